#!/usr/bin/env bash
# own_mysql.sh start|stop: starts or stops the MariaDB that stockdb_test.sh made for the
# restart test (under $OWN_MYSQL_RUN, on $OWN_MYSQL_PORT), through the lab library.
# Called by stockdb_itest; it does not source tests/lib.sh, whose exit trap would stop
# the test's servers.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../assert.sh"

case ${1:-} in
start) lab mysql_start "$OWN_MYSQL_RUN" "$OWN_MYSQL_PORT" ;;
stop) lab mysql_stop "$OWN_MYSQL_RUN" ;;
*)
  echo "usage: own_mysql.sh start|stop" >&2
  exit 2
  ;;
esac
