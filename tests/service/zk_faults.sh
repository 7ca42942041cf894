#!/usr/bin/env bash
# ZooKeeper-mode faults end to end, each against real parts and each checked against
# the ledger (answers = orders = stock change):
#   1. lock timeout: a holder keeps the lock; another instance answers 503 lock_timeout
#      and deducts nothing;
#   2. a paused holder: SIGSTOP past its session timeout, another instance takes the
#      lock and deducts, SIGCONT: the paused one's write is refused (fencing or the
#      pre-commit check) with 503 lock_lost, and the stock stays consistent;
#   3. ZooKeeper down: 503, nothing deducted; back up: deductions resume.
# It runs its own ZooKeeper (it stops it), never the shared one.
source "$STOCKD_SRC/tests/lib.sh"

zk_port=$((PORT0 + 16))
zk_start "$T" "$zk_port" zk
ZK=127.0.0.1:$zk_port
t_db
start() { stockd_start "$T" "$1" $((PORT0 + $1)) zk "$MYSQL_URL" "$ZK" "${@:2}"; }
# Each step waits on `holding I` (the instance has acquired its lock), not on a fixed
# sleep, so a slow (sanitizer) build does not race the holder.

# 1. Lock timeout. Instance 1 holds product 2's lock for 3 s (its think time).
start 1 --think-us 3000000
start 2 --lock-timeout-ms 500
s0=$(stock 2)
reduce $((PORT0 + 1)) 2 >"$T/holder" &
holder=$!
wait_until 10 holding 1 || fail "instance 1 never took the lock"
expect_eq "second instance while the lock is held" "503 lock_timeout" "$(reduce $((PORT0 + 2)) 2)"
wait "$holder"
expect_eq "the holder's answer" "200 deducted" "$(cat "$T/holder")"
expect_eq "one deduction" $((s0 - 1)) "$(stock 2)"
expect_eq "one order" 1 "$(orders 2)"
stockd_stop "$T" 1
stockd_stop "$T" 2

# 2. A paused holder. Instance 1 has a 2 s session and thinks 5 s between its check
# and its write; it is stopped once it holds the lock, until another instance has
# taken the lock (after the 2 s session expired) and deducted.
start 1 --think-us 5000000 --zk-session-ms 2000
start 2 --lock-timeout-ms 15000
s0=$(stock 1)
reduce $((PORT0 + 1)) 1 >"$T/paused" &
paused=$!
wait_until 10 holding 1 || fail "instance 1 never took the lock"
kill -STOP "$(cat "$T/stockd/1.pid")"
expect_eq "a new holder after the paused one's session expired" "200 deducted" "$(reduce $((PORT0 + 2)) 1)"
kill -CONT "$(cat "$T/stockd/1.pid")"
wait "$paused"
expect_eq "the paused holder's write" "503 lock_lost" "$(cat "$T/paused")"
expect_eq "stock: one deduction, not two" $((s0 - 1)) "$(stock 1)"
expect_eq "orders" 1 "$(orders 1)"
# Which of the two defences refused it: the UPDATE's fence (the usual winner, as the
# worker writes the moment it runs again) or the pre-commit lock check (if ZooKeeper's
# expiry notice arrived first). Exactly one refusal, whichever it was.
refusals $((PORT0 + 1))
echo "refused by: fence $fenced, pre-commit check $guard"
expect_eq "refusals" 1 $((fenced + guard))
stockd_stop "$T" 1

# 3. ZooKeeper down, then back.
start 1 --lock-timeout-ms 1000
s0=$(stock 3) n0=$(orders 3)
expect_eq "with ZooKeeper up" "200 deducted" "$(reduce $((PORT0 + 1)) 3)"
zk_stop "$T" zk
r=$(reduce $((PORT0 + 1)) 3)
expect_eq "with ZooKeeper down" "503 unavailable" "$r"
expect_eq "its message" "ZooKeeper is unavailable; nothing was deducted" "$(jq -r .message "$T/ans.$((PORT0 + 1))")"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((PORT0 + 1))/health")
expect_eq "/health with ZooKeeper down" 503 "$code"
expect_eq "nothing deducted while down" $((s0 - 1)) "$(stock 3)"
zk_start "$T" "$zk_port" zk
wait_until 20 eval "[[ \$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$((PORT0 + 1))/health) == 200 ]]" ||
  fail "stockd did not reconnect to ZooKeeper"
expect_eq "with ZooKeeper back" "200 deducted" "$(reduce $((PORT0 + 1)) 3)"
expect_eq "ledger" $((n0 + 2)) "$(orders 3)"
expect_eq "stock" $((s0 - 2)) "$(stock 3)"
echo PASS
