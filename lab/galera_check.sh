#!/bin/sh
# HAProxy's external check of one Galera node (lab/servers.py's HAProxy): exits 0 only
# when the node is a synced member of the primary component (wsrep_local_state 4,
# wsrep_cluster_status Primary), the only state in which it should take writes.
# Usage: galera_check.sh CNF PROXY_ADDR PROXY_PORT NODE_ADDR NODE_PORT (HAProxy gives the
# last four; CNF holds the check user's login).
cnf=$1 addr=$4 port=$5
state=$(mariadb --defaults-file="$cnf" -h "$addr" -P "$port" -N -B -e \
  "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state','wsrep_cluster_status')" 2>/dev/null |
  sort | tr '\t\n' '= ')
[ "$state" = "wsrep_cluster_status=Primary wsrep_local_state=4 " ]
