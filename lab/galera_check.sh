#!/bin/sh
# HAProxy's external check of one Galera node (lab/servers.py's HAProxy): exits 0 only
# when the node is a synced member of the primary component (wsrep_local_state 4,
# wsrep_cluster_status Primary), the only state in which it should take writes.
# Usage: galera_check.sh CNF PROXY_ADDR PROXY_PORT NODE_ADDR NODE_PORT (HAProxy gives the
# last four; CNF holds the check user's login). One client process, nothing else: HAProxy
# kills a check that outlives its interval, and this machine may be busy.
s="SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME"
[ "$(mariadb --defaults-file="$1" -h "$4" -P "$5" -N -B -e \
  "SELECT ($s='WSREP_LOCAL_STATE')='4' AND ($s='WSREP_CLUSTER_STATUS')='Primary'" 2>/dev/null)" = 1 ]
