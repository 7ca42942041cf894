#!/usr/bin/env bash
# Runs one RedLock test (lock/redlock.c) against three Redis servers of its own, r1..r3
# under $T on PORT0+15..17, which the program may stop and start again through
# tests/lock/own_redis.sh (OWN_REDIS_RUN=$T, OWN_REDIS_PORT, NAME rI). The list is in
# STOCKD_TEST_REDLOCK ("127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"), the ports one by one
# in STOCKD_TEST_REDLOCK_PORTS.
#   redlock_test.sh PROGRAM [ARGS...]
source "$STOCKD_SRC/tests/lib.sh"
ports=() addrs=()
for i in 1 2 3; do
  p=$((PORT0 + 14 + i))
  redis_start "$T" "$p" "r$i" || fail "redis r$i did not start on $p"
  ports+=("$p")
  addrs+=("127.0.0.1:$p")
done
export OWN_REDIS_RUN=$T
export STOCKD_TEST_REDLOCK_PORTS="${ports[*]}"
STOCKD_TEST_REDLOCK=$(IFS=,; echo "${addrs[*]}")
export STOCKD_TEST_REDLOCK
"$@"
echo "PASS"
