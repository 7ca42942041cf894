#!/usr/bin/env bash
# scripts/stack up --lock redlock --redis-sentinel end to end, under this test's run
# directory: RedLock's three Redis servers and the replica and Sentinel start and say up
# in `status`, `env` names them, a deduction through nginx goes through in mode redlock;
# restart-stockd in mode redis, the primary killed, Sentinel promotes the replica (with
# the ACL users `replica` and `sentinel`, the password in no argv), restart-stockd gives
# stockd the new primary and deductions go on; down leaves nothing running. About 30 s.
source "$STOCKD_SRC/tests/lib.sh"

need_stockd_bin

stack=$STOCKD_SRC/scripts/stack
# Everything inside the 20 ports ctest gives this test (as up_down.sh): nginx, ZooKeeper,
# Redis, Prometheus at +1..+4, RedLock's servers at +15..+17, the replica at +18 and the
# Sentinel at +19.
export STACK_RUN=$T STACK_PORT_BASE=$PORT0 STACK_NGINX_PORT=$((PORT0 + 1))
export STACK_ZK_PORT=$((PORT0 + 2)) STACK_REDIS_PORT=$((PORT0 + 3))
export STACK_PROMETHEUS_PORT=$((PORT0 + 4)) STACK_REDLOCK_PORT=$((PORT0 + 15))
export STACK_REDIS_REPLICA_PORT=$((PORT0 + 18)) STACK_SENTINEL_PORT=$((PORT0 + 19))
export STOCKD_BIN
unset STOCKD_MYSQL_PASSWORD STOCKD_REDIS
trap '"$stack" down </dev/null || true; t_cleanup' EXIT

"$stack" up --instances 2 --lock redlock --redis-sentinel </dev/null || fail "stack up failed"
"$stack" status >"$T/status.txt" || fail "status after up: $(cat "$T/status.txt")"
cat "$T/status.txt"
for c in redlock1 redlock2 redlock3 redis-repl sentinel; do
  grep -qE "^$c .* up\$" "$T/status.txt" || fail "$c is not up"
done
eval "$("$stack" env)"
expect_eq REDLOCK "127.0.0.1:$((PORT0 + 15)),127.0.0.1:$((PORT0 + 16)),127.0.0.1:$((PORT0 + 17))" "$REDLOCK"
expect_eq SENTINEL "127.0.0.1:$((PORT0 + 19))" "$SENTINEL"
tr '\0' ' ' <"/proc/$(cat "$T/stockd/1.pid")/cmdline" | grep -q -- '--lock redlock' ||
  fail "stockd-1 is not in mode redlock"
expect_eq "a deduction in mode redlock" "200 deducted" "$(reduce "$NGINX_URL" 4)"
for p in $((PORT0 + 15)) $((PORT0 + 16)) $((PORT0 + 17)) $((PORT0 + 18)); do
  out=$(redis-cli -h 127.0.0.1 -p "$p" ping 2>&1)
  [[ $out == NOAUTH* ]] || fail "the Redis on $p answers without a password: $out"
done
for f in "$T"/redis*/pid "$T"/redlock*/pid "$T"/sentinel/pid; do
  if tr '\0' ' ' <"/proc/$(cat "$f")/cmdline" | grep -qF -- "$STOCKD_REDIS_PASSWORD"; then
    fail "the Redis password is in the argv of $f"
  fi
done
echo "ok: every Redis wants the password, which is in no argv"

"$stack" restart-stockd --lock redis </dev/null || fail "restart-stockd --lock redis failed"
expect_eq "a deduction in mode redis" "200 deducted" "$(reduce "$NGINX_URL" 4)"
kill -9 "$(cat "$T/redis/pid")"
promoted() { [[ $(sentinel_primary $((PORT0 + 19))) == "127.0.0.1:$((PORT0 + 18))" ]]; }
wait_until 30 promoted || fail "Sentinel did not promote the replica: $(tail -n 5 "$T/sentinel/sentinel.log")"
echo "ok: Sentinel promoted the replica"
"$stack" restart-stockd </dev/null 2>"$T/restart.err" || fail "restart-stockd failed: $(cat "$T/restart.err")"
grep -q "Redis primary after a failover: 127.0.0.1:$((PORT0 + 18))" "$T/restart.err" ||
  fail "restart-stockd did not say where the primary went: $(cat "$T/restart.err")"
expect_eq "a deduction on the promoted replica" "200 deducted" "$(reduce "$NGINX_URL" 4)"

"$stack" down </dev/null || fail "down failed"
for f in "$T"/redis*/pid "$T"/redlock*/pid "$T"/sentinel/pid; do
  ! pid_alive "$f" || fail "$f still runs after down"
done
echo PASS
