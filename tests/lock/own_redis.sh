#!/usr/bin/env bash
# own_redis.sh start|stop: starts or stops the test's own Redis (under $OWN_REDIS_RUN, on
# $OWN_REDIS_PORT; see lease_lock_test.sh). It does not source tests/lib.sh, whose exit
# trap would stop the test's servers.
set -euo pipefail
source "$STOCKD_SRC/scripts/stack-lib.sh"

case ${1:-} in
start) redis_start "$OWN_REDIS_RUN" "$OWN_REDIS_PORT" ;;
stop) redis_stop "$OWN_REDIS_RUN" ;;
*)
  echo "usage: own_redis.sh start|stop" >&2
  exit 2
  ;;
esac
