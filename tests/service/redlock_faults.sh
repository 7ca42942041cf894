#!/usr/bin/env bash
# Mode redlock's failures end to end, on three Redis servers of the test's own (r1..r3 on
# PORT0+15..17; the fixture's are never stopped or touched), checked against the stock
# and the orders:
#
#   redlock_faults.sh jump fenced|unfenced
#     Kleppmann's case against RedLock. Product 2 has one unit. Instance 1 (3 s think
#     time between its read and its write, the default 10 s lease) takes the lock on all
#     three servers and reads stock 1. Then servers r1 and r2 expire its key at once
#     (PEXPIRE 1 from outside), which is what a forward clock jump on those two servers
#     does to a lease: libfaketime does not run under Debian's redis-server, so this
#     stands in for the jump. Instance 2 takes the majority r1+r2 and buys the last unit
#     while instance 1, whose own clock says its validity lasts, still holds r3 and
#     believes it holds the lock. Instance 1 then writes:
#       fenced:   its token (the largest of its per-server tokens) is below instance 2's,
#                 so the database refuses the write: 503 lock_lost, stock 0, one order.
#                 The refusal is the fence's, not the pre-commit check's (that check
#                 reads instance 1's clock, which never jumped);
#       unfenced: (--fence off on both) nothing stops it: stock -1, two orders.
#
#   redlock_faults.sh servers-down
#     One server of three down: deductions go through (a majority is two). Two down:
#     503 "fewer than a majority ...", nothing deducted, /health 503 with "redis":"down",
#     the process stays up. Both back: deductions go through again.
source "$STOCKD_SRC/tests/lib.sh"

t_db

ports=() addrs=()
for i in 1 2 3; do
  p=$((PORT0 + 14 + i))
  redis_start "$T" "$p" "r$i" || fail "redis r$i did not start on $p"
  ports+=("$p")
  addrs+=("127.0.0.1:$p")
done
servers=$(IFS=,; echo "${addrs[*]}")
on() { redis-cli -p "${ports[$1 - 1]}" "${@:2}"; }

case ${1:-} in
jump)
  fencing=${2:?fenced or unfenced}
  args=(--redis "$servers" --lock-timeout-ms 15000 --batch-max 1)
  [[ $fencing == unfenced ]] && args+=(--fence off)
  sql "UPDATE product SET stock = 1 WHERE id = 2"
  t_stockd 1 redlock "${args[@]}" --think-us 3000000
  t_stockd 2 redlock "${args[@]}"
  reduce $((PORT0 + 1)) 2 >"$T/first" &
  first=$!
  wait_until 10 holding 1 || fail "instance 1 never took the lock"
  for i in 1 2 3; do
    [[ -n $(on "$i" GET lock:product_2) ]] || fail "instance 1 holds no key on r$i"
  done
  t1=$(on 3 GET lock:product_2)
  # The stand-in for a forward clock jump on r1 and r2: their copies of the key expire now.
  expect_eq "PEXPIRE on r1" 1 "$(on 1 PEXPIRE lock:product_2 1)"
  expect_eq "PEXPIRE on r2" 1 "$(on 2 PEXPIRE lock:product_2 1)"
  wait_until 5 eval '[[ -z $(on 1 GET lock:product_2) && -z $(on 2 GET lock:product_2) ]]' ||
    fail "the key outlived its PEXPIRE on r1 or r2"
  expect_eq "instance 2, on the majority r1+r2" "200 deducted" "$(reduce $((PORT0 + 2)) 2)"
  expect_eq "r3 still holds instance 1's key (two holders at once)" "$t1" "$(on 3 GET lock:product_2)"
  wait "$first"
  # Instance 1's own clock never jumped: only the fence can refuse it.
  late_write "$fencing" "$T/first" $((PORT0 + 1)) 2 fence
  ;;

servers-down)
  t_stockd 1 redlock --redis "$servers" --lock-timeout-ms 2000
  s0=$(stock 3) n0=$(orders 3)
  expect_eq "all three up" "200 deducted" "$(reduce $((PORT0 + 1)) 3)"
  redis_stop "$T" r3
  expect_eq "r3 down" "200 deducted" "$(reduce $((PORT0 + 1)) 3)"
  expect_eq "/health with r3 down" 200 "$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((PORT0 + 1))/health")"
  redis_stop "$T" r2
  expect_eq "r2 and r3 down" "503 unavailable" "$(reduce $((PORT0 + 1)) 3)"
  jq -r .message "$T/ans.$((PORT0 + 1))" | grep -q "majority" ||
    fail "unclear message: $(cat "$T/ans.$((PORT0 + 1))")"
  code=$(curl -sS -o "$T/health" -w '%{http_code}' "http://127.0.0.1:$((PORT0 + 1))/health")
  expect_eq "/health with two down" 503 "$code"
  expect_eq "/health's redis" down "$(jq -r .redis "$T/health")"
  expect_eq "no key left on r1" "" "$(on 1 GET lock:product_3)"
  pid_alive "$T/stockd/1.pid" || fail "stockd is gone"
  expect_eq "nothing deducted with two down" $((s0 - 2)) "$(stock 3)"
  redis_start "$T" "${ports[1]}" r2
  redis_start "$T" "${ports[2]}" r3
  expect_eq "both back" "200 deducted" "$(reduce $((PORT0 + 1)) 3)"
  expect_eq "stock" $((s0 - 3)) "$(stock 3)"
  expect_eq "orders" $((n0 + 3)) "$(orders 3)"
  ;;
*)
  fail "usage: redlock_faults.sh jump fenced|unfenced | servers-down"
  ;;
esac
echo PASS
