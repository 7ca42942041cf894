#!/usr/bin/env bash
# own_redis.sh start|stop [NAME]: starts or stops the test's own Redis (under
# $OWN_REDIS_RUN/NAME, default redis, on $OWN_REDIS_PORT; see lease_lock_test.sh and
# redlock_test.sh), through the lab library. It does not source tests/lib.sh, whose exit
# trap would stop the test's servers.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../assert.sh"

case ${1:-} in
start) lab redis_start "$OWN_REDIS_RUN" "$OWN_REDIS_PORT" "${2:-redis}" ;;
stop) lab redis_stop "$OWN_REDIS_RUN" "${2:-redis}" ;;
*)
  echo "usage: own_redis.sh start|stop [NAME]" >&2
  exit 2
  ;;
esac
