# shellcheck shell=bash
# The Galera fault tests' set-up (docs/galera.md), sourced after tests/lib.sh instead of
# starting a MariaDB: a three-node cluster of the test's own under $T (SQL ports
# PORT0+5..+7, group +8..+10, IST +11..+13, SST +14..+16) with HAProxy on PORT0+17, the
# test database made through it, and faultlib.sh sourced on it. Everything is stopped at
# exit, a node left paused resumed first. Skips without galera-4 or haproxy.
[[ -e /usr/lib/galera/libgalera_smm.so ]] && command -v haproxy >/dev/null ||
  skip "no galera-4 or haproxy (scripts/deps galera)"
G_FIRST=$((PORT0 + 5))
G_PROXY=$((PORT0 + 17))
galera_start "$T" "$G_FIRST" "$G_PROXY"
trap 'for n in 1 2 3; do [[ -e $T/galera$n/pid ]] && kill -CONT "$(cat "$T/galera$n/pid")" 2>/dev/null; done
  galera_stop "$T"; t_cleanup' EXIT
MYSQL_RUN=$T
MYSQL_URL="mysql://$DB_USER@127.0.0.1:$G_PROXY/$DB"
mysql_create_db "$T" "$DB" "$DB_USER" "$DB_PASS"
source "$STOCKD_SRC/tests/faults/faultlib.sh"

# node_sql N QUERY: QUERY on node N, waiting for the cluster; node_local N QUERY: what
# node N holds itself, answered even outside the primary component; node_status N: its
# wsrep_cluster_status.
node_sql() { mysql_cli_node "$T" "$1" -N -B "$DB" -e "$2"; }
node_local() { mariadb --no-defaults -uroot -S "$T/galera$1/sock" -N -B "$DB" -e "SET SESSION wsrep_dirty_reads=1; $2"; }
node_status() { mariadb --no-defaults -uroot -S "$T/galera$1/sock" -N -B -e "SHOW STATUS LIKE 'wsrep_cluster_status'" | cut -f2; }
# The product's stock and orders as "STOCK/ORDERS", for node_sql.
G_LEDGER="SELECT CONCAT((SELECT stock FROM product WHERE id=$F_PRODUCT), '/', COUNT(*)) FROM orders WHERE product_id=$F_PRODUCT"
