#!/usr/bin/env bash
# Runs stockdb_itest (tests/db/stockdb_itest.c) against a real MariaDB.
#   stockdb_test.sh BIN shared [CASE] - the shared test server, in this test's own
#                                  database: every case, or only CASE.
#   stockdb_test.sh BIN restart  - this test's OWN MariaDB on PORT0+15, which the C program
#                                  stops and starts through own_mysql.sh; the shared server
#                                  is never restarted.
source "$STOCKD_SRC/tests/lib.sh"
bin=$1
mode=$2

case $mode in
shared)
  # A case's database is named after the case, within MariaDB's 64 characters.
  if [[ -n ${3:-} ]]; then
    DB=t_sdb_${3:0:56}
    MYSQL_URL="mysql://$DB_USER@127.0.0.1:$STOCKD_TEST_MYSQL_PORT/$DB"
  fi
  t_db
  # PORT0+1 is the relay the C program puts between its handle and the server.
  "$bin" shared "$MYSQL_URL" "$STOCKD_TEST_RUN/mysql/sock" "$DB" $((PORT0 + 1)) ${3:+"$3"}
  ;;
restart)
  own_port=$((PORT0 + 15))
  mysql_start "$T" "$own_port"
  mysql_create_db "$T" "$DB" "$DB_USER" "$DB_PASS"
  mysql_stop "$T"
  export OWN_MYSQL_RUN=$T OWN_MYSQL_PORT=$own_port
  "$bin" restart "mysql://$DB_USER@127.0.0.1:$own_port/$DB" "$STOCKD_SRC/tests/db/own_mysql.sh"
  ;;
*)
  fail "usage: stockdb_test.sh BIN shared [CASE] | restart"
  ;;
esac
