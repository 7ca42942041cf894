#!/usr/bin/env bash
# The race at its smallest, made deterministic: one unit left, three buyers at once.
#   last_unit.sh MODE INSTANCES EXPECT   with EXPECT = oversold | sold-once
# Stock 1, INSTANCES stockd of one lock mode, and three simultaneous requests, spread
# over the instances directly (no nginx: which instance gets which request is part of
# the setup). A think time of 1 s between the check and the update holds every
# transaction open far longer than it takes to start three requests, so:
#   - where nothing spans the instances (none, or local on several), every buyer reads
#     stock 1 before anyone commits, and the stock goes negative;
#   - where the lock spans them (local on one instance, zk), one buyer deducts, the
#     others wait and then answer sold out, and the stock ends at 0.
# Both outcomes are asserted exactly: all three sold, or one.
# The seed-scale run (oversell.sh) shows how often this happens under load; this test
# shows that it can, every time, for a reason one can point at.
source "$STOCKD_SRC/tests/lib.sh"
mode=$1 instances=$2 expect=$3
buyers=3

t_db
sql "UPDATE product SET stock = 1 WHERE id = 1"
for ((i = 1; i <= instances; i++)); do t_stockd "$i" "$mode" --think-us 1000000; done

pids=()
for ((b = 0; b < buyers; b++)); do
  port=$((PORT0 + 1 + b % instances))
  curl -sS -m 30 -o "$T/ans.$b" -w '%{http_code}' \
    "http://127.0.0.1:$port/stock/reduce?id=1" >"$T/code.$b" &
  pids+=($!)
done
# A failed curl (no answer within 30 s) is reported below as that buyer's answer.
for p in "${pids[@]}"; do wait "$p" || true; done

deducted=0 sold_out=0
for ((b = 0; b < buyers; b++)); do
  answer="$(cat "$T/code.$b") $(jq -r .result "$T/ans.$b" 2>/dev/null || echo '(no JSON)')"
  echo "buyer $b: $answer"
  case $answer in
  "200 deducted") deducted=$((deducted + 1)) ;;
  "409 sold_out") sold_out=$((sold_out + 1)) ;;
  *) fail "buyer $b got '$answer'" ;;
  esac
done
final=$(sql "SELECT stock FROM product WHERE id = 1")
orders=$(sql "SELECT COUNT(*) FROM orders WHERE product_id = 1")
echo "$mode x$instances: stock 1 -> $final, $deducted deducted, $sold_out sold out, $orders orders"

expect_eq "orders = deducted answers" "$deducted" "$orders"
expect_eq "stock change = deducted answers" "$deducted" $((1 - final))
case $expect in
oversold)
  # Every buyer read stock 1 inside the others' 1 s windows: all of them deduct.
  expect_eq "deducted answers (every buyer got the last unit)" "$buyers" "$deducted"
  expect_eq "final stock" $((1 - buyers)) "$final"
  ;;
sold-once)
  expect_eq "final stock" 0 "$final"
  expect_eq "sold out answers" $((buyers - 1)) "$sold_out"
  ;;
*) fail "unknown expectation $expect" ;;
esac
echo PASS
