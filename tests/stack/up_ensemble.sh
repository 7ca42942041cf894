#!/usr/bin/env bash
# scripts/stack up --zk-ensemble end to end, with its own MariaDB, three ZooKeeper
# servers, Redis, stockd and nginx under this test's run directory:
#   - `up --zk-ensemble --instances 2 --lock zk` starts a three-server ensemble (one
#     leader, two followers), `status` shows each server and its mode, `env` gives ZK
#     as the three servers, and each stockd was started with all three;
#   - deductions through nginx reach both instances and the stock drops by as many;
#   - the leader killed (-9): the two others elect a new leader, `status` fails and
#     names the dead server, and deductions through nginx still succeed;
#   - a second `up --zk-ensemble` starts the dead server again (it rejoins as a
#     follower) and keeps the stockd processes;
#   - `up` without the option replaces the ensemble by a standalone ZooKeeper and
#     restarts stockd on it; then `down` leaves nothing running and no port taken.
source "$STOCKD_SRC/tests/lib.sh"

need_stockd_bin

stack=$STOCKD_SRC/scripts/stack
# Everything inside the 20 ports ctest gives this test: nginx at +0, Redis +1, the
# ensemble's nine ports +2..+10 (clients +2..+4), stockd i at +10+i (so +11, +12),
# MariaDB moved from +6 (inside the ensemble's ports) to +13, Prometheus at +14.
zk0=$((PORT0 + 2))
export STACK_RUN=$T STACK_PORT_BASE=$PORT0 STACK_NGINX_PORT=$PORT0 STACK_REDIS_PORT=$((PORT0 + 1))
export STACK_ZK_PORT=$zk0 STACK_MYSQL_PORT=$((PORT0 + 13)) STACK_PROMETHEUS_PORT=$((PORT0 + 14))
export STOCKD_BIN
unset STOCKD_MYSQL_PASSWORD # the stack makes its own
trap '"$stack" down </dev/null || true; t_cleanup' EXIT

pids() { cat "$T"/mysql/pid "$T"/zk*/pid "$T"/redis/pid "$T"/nginx/nginx.pid "$T"/prometheus/pid "$T"/stockd/*.pid 2>/dev/null; }
# stack_stock: product 2's stock in the stack's own database (through its CLI).
stack_stock() { "$stack" mysql -N -B -e 'SELECT stock FROM product WHERE id=2'; }
# deduct N: N deductions of product 2 through nginx; prints the answering instances.
deduct() {
  local i body
  for ((i = 0; i < $1; i++)); do
    body=$(curl -sS -m 20 "$NGINX_URL/stock/reduce?id=2") || fail "no answer through nginx"
    [[ $(jq -r .result <<<"$body" 2>/dev/null) == deducted ]] || fail "not deducted: $body"
    jq -r .instance <<<"$body"
  done
}

t0=$SECONDS
"$stack" up --zk-ensemble --instances 2 --lock zk </dev/null || fail "stack up --zk-ensemble failed"
echo "up --zk-ensemble took $((SECONDS - t0)) s"
"$stack" status >"$T/status.txt" || fail "status after up: $(cat "$T/status.txt")"
cat "$T/status.txt"
expect_eq "components up (mysql, zk1..3, redis, stockd-1..2, nginx, prometheus)" 9 "$(grep -cE ' up$' "$T/status.txt")"
expect_eq "status rows of the ensemble" "zk1 zk2 zk3" "$(grep -oE '^zk[0-9]' "$T/status.txt" | xargs)"
expect_eq "the ensemble's modes, sorted" "follower follower leader" \
  "$(sed -n 's/^zookeeper ensemble: //p' "$T/status.txt" | xargs -n 2 | cut -d' ' -f2 | sort | xargs)"
leader=$(zk_leader "$zk0") || fail "the ensemble has no leader"

eval "$("$stack" env)"
expect_eq ZK "127.0.0.1:$zk0,127.0.0.1:$((zk0 + 1)),127.0.0.1:$((zk0 + 2))" "$ZK"
expect_eq NGINX_URL "http://127.0.0.1:$PORT0" "$NGINX_URL"
for i in 1 2; do
  expect_eq "stockd-$i's --zk" "$ZK" \
    "$(tr '\0' '\n' <"/proc/$(cat "$T/stockd/$i.pid")/cmdline" | grep -A1 -x -- --zk | tail -n 1)"
done

before=$(stack_stock)
expect_eq "instances reached by 2 deductions" "stockd-1 stockd-2" "$(deduct 2 | sort | xargs)"
expect_eq "stock after 2 deductions" $((before - 2)) "$(stack_stock)"

# The leader dies: the two others keep a quorum, and the service goes on.
kill -9 "$(cat "$T/zk$leader/pid")"
new_leader() {
  local l
  l=$(zk_leader "$zk0") && [[ $l != "$leader" ]]
}
wait_until 60 new_leader || fail "no new leader within 60 s of killing zk$leader"
echo "ok: killed the leader zk$leader; zk$(zk_leader "$zk0") leads now"
if "$stack" status >"$T/status.txt"; then fail "status says all up with zk$leader dead"; fi
grep -E "^zk$leader " "$T/status.txt" | grep -q ' down$' ||
  fail "status does not show zk$leader down: $(cat "$T/status.txt")"
echo "ok: status fails and shows zk$leader down"
# A session on the dead server moves to another within its timeout; until then a
# deduction may be refused (503), never half-done: wait for both instances to deduct.
healthy() { [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((PORT0 + 10 + $1))/health") == 200 ]]; }
wait_until 30 healthy 1 && wait_until 30 healthy 2 || fail "an instance stayed unhealthy without zk$leader"
expect_eq "instances reached by 2 deductions without zk$leader" "stockd-1 stockd-2" "$(deduct 2 | sort | xargs)"
expect_eq "stock after 4 deductions" $((before - 4)) "$(stack_stock)"

# A second `up --zk-ensemble` starts the dead server again and keeps stockd.
stockd_pids=$(cat "$T"/stockd/*.pid | xargs)
"$stack" up --zk-ensemble --instances 2 --lock zk </dev/null || fail "second up --zk-ensemble failed"
"$stack" status >"$T/status.txt" || fail "status after the second up: $(cat "$T/status.txt")"
expect_eq "zk$leader's mode after the second up" follower "$(zk_ensemble_mode "$zk0" "$leader")"
expect_eq "stockd processes after the second up" "$stockd_pids" "$(cat "$T"/stockd/*.pid | xargs)"

# `up` without the option: a standalone ZooKeeper on the same first port, stockd on it.
ens_pids=$(cat "$T"/zk[123]/pid | xargs)
"$stack" up --instances 2 --lock zk </dev/null || fail "up back to a standalone ZooKeeper failed"
"$stack" status >"$T/status.txt" || fail "status after the switch: $(cat "$T/status.txt")"
for pid in $ens_pids; do
  if pid_runs "$pid"; then fail "ensemble server pid $pid still runs"; fi
done
grep -qE '^zookeeper .* up$' "$T/status.txt" || fail "no standalone zookeeper row: $(cat "$T/status.txt")"
expect_eq "zookeeper mode" standalone "$(zk_4lw "$zk0" srvr | sed -n 's/^Mode: //p')"
eval "$("$stack" env)"
expect_eq ZK "127.0.0.1:$zk0" "$ZK"
expect_eq "instances reached after the switch" "stockd-1 stockd-2" "$(deduct 2 | sort | xargs)"
expect_eq "stock after 6 deductions" $((before - 6)) "$(stack_stock)"

all=$(pids | xargs)
"$stack" down </dev/null || fail "stack down failed"
for pid in $all; do
  # down waited for each to end; the kernel may still be tearing a large one down.
  wait_until 10 eval "! pid_runs $pid" || fail "pid $pid still runs after down"
done
for ((p = PORT0; p <= PORT0 + 13; p++)); do
  port_free "$p" || fail "port $p still taken after down"
done
echo "ok: nothing runs and no port is taken after down"
