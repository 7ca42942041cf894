#!/usr/bin/env bash
# scripts/stack end to end, with its own MariaDB, ZooKeeper, stockd and nginx under
# this test's run directory: `up` with 2 instances, `status`, `env`, a deduction
# through nginx reaching both instances, the service user's narrow grants, the password
# kept out of argv, a second `up` that keeps data and processes, `restart-stockd` in
# another mode and instance count, and `down` leaving nothing running.
source "$STOCKD_SRC/tests/lib.sh"

need_stockd_bin

stack=$STOCKD_SRC/scripts/stack
# Everything inside the 20 ports ctest gives this test: MariaDB at +6 and stockd i at
# +10+i from the base; nginx, ZooKeeper, Redis and Prometheus (+80, +81, +82, +92 by
# default) moved to +1, +2, +3 and +4.
export STACK_RUN=$T STACK_PORT_BASE=$PORT0 STACK_NGINX_PORT=$((PORT0 + 1))
export STACK_ZK_PORT=$((PORT0 + 2)) STACK_REDIS_PORT=$((PORT0 + 3))
export STACK_PROMETHEUS_PORT=$((PORT0 + 4))
export STOCKD_BIN
unset STOCKD_MYSQL_PASSWORD # the stack makes its own
trap '"$stack" down </dev/null || true; t_cleanup' EXIT

pids() {
  cat "$T"/mysql/pid "$T"/zk/pid "$T"/redis/pid "$T"/nginx/nginx.pid "$T"/prometheus/pid \
    "$T"/stockd/*.pid 2>/dev/null
}

# prom_targets: the scrape targets Prometheus knows, sorted, on one line.
prom_targets() {
  curl -fsS "$PROMETHEUS_URL/api/v1/targets" |
    jq -r '[.data.activeTargets[] | .labels.instance] | sort | join(" ")'
}

"$stack" up --instances 2 </dev/null || fail "stack up failed"
"$stack" status >"$T/status.txt" || fail "status after up: $(cat "$T/status.txt")"
cat "$T/status.txt"
expect_eq "components up" 7 "$(grep -cE ' up$' "$T/status.txt")"

eval "$("$stack" env)"
expect_eq NGINX_URL "http://127.0.0.1:$((PORT0 + 1))" "$NGINX_URL"
expect_eq MYSQL_URL "mysql://stockd@127.0.0.1:$((PORT0 + 6))/shop" "$MYSQL_URL"
expect_eq ZK "127.0.0.1:$((PORT0 + 2))" "$ZK"
expect_eq STOCKD_PORTS "$((PORT0 + 11)) $((PORT0 + 12))" "$STOCKD_PORTS"
expect_eq PROMETHEUS_URL "http://127.0.0.1:$((PORT0 + 4))" "$PROMETHEUS_URL"
# Prometheus applies a new target list a few seconds after it reads it.
wait_until 20 eval '[[ $(prom_targets) == "127.0.0.1:$((PORT0 + 11)) 127.0.0.1:$((PORT0 + 12))" ]]' ||
  fail "Prometheus targets: expected both instances, got '$(prom_targets)'"
echo "ok: Prometheus scrapes both instances"
expect_eq "password file mode" 600 "$(stat -c %a "$T/mysql-password")"
expect_eq "password in env" "$(cat "$T/mysql-password")" "$STOCKD_MYSQL_PASSWORD"
[[ ${#STOCKD_MYSQL_PASSWORD} -ge 16 ]] || fail "short password: $STOCKD_MYSQL_PASSWORD"

# The password reaches stockd through its environment, never through any argv.
for pid in $(pids); do
  if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$STOCKD_MYSQL_PASSWORD"; then
    fail "the password is in the argv of pid $pid"
  fi
done
tr '\0' '\n' <"/proc/$(cat "$T/stockd/1.pid")/environ" |
  grep -qxF "STOCKD_MYSQL_PASSWORD=$STOCKD_MYSQL_PASSWORD" ||
  fail "stockd-1 did not get the password in its environment"
echo "ok: the password is in stockd's environment and in no argv"
# Redis wants user stockd's password (issue 16 #12), kept like the MySQL one.
expect_eq "Redis password file mode" 600 "$(stat -c %a "$T/redis-password")"
expect_eq "Redis password in env" "$(cat "$T/redis-password")" "$STOCKD_REDIS_PASSWORD"
out=$(redis-cli -h 127.0.0.1 -p "${REDIS##*:}" ping 2>&1)
[[ $out == NOAUTH* ]] || fail "the stack's Redis answers without a password: $out"
for pid in $(pids); do
  if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$STOCKD_REDIS_PASSWORD"; then
    fail "the Redis password is in the argv of pid $pid"
  fi
done
echo "ok: the stack's Redis wants a password, which is in no argv"

code=$(curl -s -o "$T/health" -w '%{http_code}' "$NGINX_URL/health")
expect_eq "GET /health through nginx" 200 "$code"

# Two deductions through nginx: round-robin sends one to each instance.
seen=()
for _ in 1 2; do
  body=$(curl -fsS "$NGINX_URL/stock/reduce?id=2") || fail "deduction through nginx failed"
  seen+=("$(jq -r .instance <<<"$body")")
done
expect_eq "instances reached" "stockd-1 stockd-2" "$(printf '%s\n' "${seen[@]}" | sort | xargs)"
expect_eq "stock after 2 deductions" 98 "$("$stack" mysql -N -B -e 'SELECT stock FROM product WHERE id=2')"

# The service user can deduct and record, and nothing more.
as_stockd() {
  MYSQL_PWD=$STOCKD_MYSQL_PASSWORD mariadb --no-defaults -h 127.0.0.1 -P "$MYSQL_PORT" \
    -u stockd -N -B shop -e "$1"
}
expect_eq "orders seen by stockd" 2 "$(as_stockd 'SELECT COUNT(*) FROM orders')"
if as_stockd 'DELETE FROM orders' 2>/dev/null; then fail "stockd may delete orders"; fi
if as_stockd 'DROP TABLE product' 2>/dev/null; then fail "stockd may drop product"; fi
echo "ok: stockd may not delete orders nor drop tables"

# A second `up` with the same settings keeps the data and the running processes.
before=$(pids | sort | xargs)
"$stack" up --instances 2 </dev/null || fail "second stack up failed"
expect_eq "processes after a second up" "$before" "$(pids | sort | xargs)"
expect_eq "stock after a second up" 98 "$("$stack" mysql -N -B -e 'SELECT stock FROM product WHERE id=2')"

# restart-stockd: one instance in lock mode local; nginx follows.
old2=$(cat "$T/stockd/2.pid")
"$stack" restart-stockd --instances 1 --lock local </dev/null || fail "restart-stockd failed"
"$stack" status >"$T/status.txt" || fail "status after restart: $(cat "$T/status.txt")"
expect_eq "stockd lines after restart" 1 "$(grep -c '^stockd-' "$T/status.txt")"
grep -q 'lock mode: local' "$T/status.txt" || fail "status does not show lock mode local"
if pid_runs "$old2"; then fail "stockd-2 (pid $old2) still runs"; fi
expect_eq "nginx upstreams" 1 "$(grep -c 'server 127.0.0.1:' "$T/nginx/nginx.conf")"
# Prometheus watches its targets file: the instance list follows without a restart.
wait_until 20 eval '[[ $(prom_targets) == "127.0.0.1:$((PORT0 + 11))" ]]' ||
  fail "Prometheus targets after restart-stockd: $(prom_targets)"
echo "ok: Prometheus scrapes the one instance left"
for _ in 1 2 3; do
  body=$(curl -fsS "$NGINX_URL/stock/reduce?id=2") || fail "deduction after restart failed"
  expect_eq "answering instance" stockd-1 "$(jq -r .instance <<<"$body")"
done
expect_eq "stock after 5 deductions" 95 "$("$stack" mysql -N -B -e 'SELECT stock FROM product WHERE id=2')"

# Mode redis against the stack's Redis with its password.
"$stack" restart-stockd --instances 1 --lock redis </dev/null || fail "restart-stockd redis failed"
body=$(curl -fsS "$NGINX_URL/stock/reduce?id=2") || fail "deduction in mode redis failed"
expect_eq "a deduction in mode redis" deducted "$(jq -r .result <<<"$body")"
expect_eq "stock after 6 deductions" 94 "$("$stack" mysql -N -B -e 'SELECT stock FROM product WHERE id=2')"

# nginx by product id with a rate limit (restart-stockd --affinity --rate-limit): the
# state keeps both, the product's deductions meet in one instance, and a burst over the
# limit gets 429 JSON (one a minute and a burst of 3: the fifth of six quick requests is
# refused however slowly the machine answers); kill-stockd --restart brings a crashed
# instance back.
"$stack" restart-stockd --instances 2 --lock zk --affinity --rate-limit 1r/m:3 </dev/null ||
  fail "restart-stockd --affinity --rate-limit failed"
"$stack" status >"$T/status.txt" || fail "status after affinity: $(cat "$T/status.txt")"
grep -q 'nginx: affinity, rate limit 1r/m:3' "$T/status.txt" || fail "status: $(tail -1 "$T/status.txt")"
grep -q '^[[:space:]]*hash $arg_id consistent;' "$T/nginx/nginx.conf" || fail "nginx.conf has no hash balancer"
eval "$("$stack" env)"
expect_eq "STACK_ROUTE" affinity "$STACK_ROUTE"
codes=() owners=()
for _ in 1 2 3 4 5 6; do
  code=$(curl -sS -o "$T/ans" -w '%{http_code}' "$NGINX_URL/stock/reduce?id=2")
  codes+=("$code $(jq -r .result "$T/ans")")
  [[ $code != 200 ]] || owners+=("$(jq -r .instance "$T/ans")")
done
echo "answers: ${codes[*]}"
[[ " ${codes[*]} " == *" 429 rate_limited "* ]] || fail "no 429 rate_limited in 6 quick requests: ${codes[*]}"
expect_eq "instances that deducted product 2" 1 "$(printf '%s\n' "${owners[@]}" | sort -u | wc -l)"
old=$(cat "$T/stockd/1.pid")
"$stack" kill-stockd 1 --restart </dev/null || fail "kill-stockd --restart failed"
if pid_runs "$old"; then fail "stockd-1 (pid $old) survived kill-stockd"; fi
"$stack" status >/dev/null || fail "not all up after kill-stockd --restart"
echo "ok: kill-stockd 1 --restart: a new stockd-1 answers"
"$stack" restart-stockd --route round-robin --rate-limit off </dev/null || fail "back to round-robin failed"
if grep -Eq '^[[:space:]]*(hash|limit_req|limit_req_zone) ' "$T/nginx/nginx.conf"; then fail "round-robin nginx.conf still routes by hash or limits"; fi
echo "ok: back to round-robin without a limit"

# down stops everything, and a second down is a no-op.
all=$(pids | xargs)
"$stack" down </dev/null || fail "stack down failed"
for pid in $all; do
  # down waited for each to end; the kernel may still be tearing a large one down.
  wait_until 10 eval "! pid_runs $pid" || fail "pid $pid still runs after down"
done
for p in $((PORT0 + 1)) $((PORT0 + 2)) $((PORT0 + 4)) $((PORT0 + 6)) $((PORT0 + 11)) $((PORT0 + 12)); do
  port_free "$p" || fail "port $p still taken after down"
done
echo "ok: nothing runs and no port is taken after down"
if "$stack" status >/dev/null; then fail "status says all up after down"; fi
"$stack" down </dev/null || fail "second down failed"
echo "ok: status fails and down is idempotent once stopped"
