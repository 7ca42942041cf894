#!/usr/bin/env bash
# Segmented stock (stockd --segments K, article 001's section 8) end to end, against the
# shared MariaDB and ZooKeeper and a real nginx:
#
#   segments.sh drain
#     Product 2 is split over 16 segments, only two of which hold stock (3 and 1), so
#     nearly every deduction starts at an empty segment and must move on. One request
#     at a time through nginx to two zk instances: each of the first 4 is deducted (a
#     sold_out while any segment still held a unit would be an undersell), the 5th is
#     sold out only after visiting all 16 segments (15 moves, counted in /metrics), a
#     key that bought before still gets its order after the sell-out, and /stock
#     answers the sum of the segments throughout. Then uneven concurrent demand: 37
#     units over 16 segments (5 of 3, 11 of 2), 300 requests at concurrency 30 through
#     loadtest/oversell: exactly 37 deducted, the total ends at exactly 0, the ledger
#     reconciles.
#
#   segments.sh config
#     What a wrong setting does, never a crash: --segments 0, 257, or with a mode that
#     has no lock, is refused at start-up with exit 2 and the reason; an instance with
#     --segments 4 in front of a product that is not split finds every segment missing
#     and answers sold out (it undersells, never oversells: docs/strategies.md says every instance
#     and the reset must agree on K); a product that does not exist is 404.
#
#   segments.sh hol
#     Issue 16 #8: a hot split product must not take every worker. --workers 2,
#     product 1 over 4 segments, 24 deductions each holding a segment's lock 0.3 s (one
#     per round): /health, asked five times meanwhile, answers each time within 0.5 s
#     (it took 1.85 s when each segment had a worker leading it), and the 24 deduct
#     exactly.
#
#   segments.sh restock
#     Issue 16 #9: a restock during a deduction's walk. Mode db-lock, product 2 over two
#     empty segments, both locked from outside (stock_lock rows), so the walk stops at
#     each. The deduction visits one segment (empty), and while it waits at the other
#     the visited one gets a unit; then it finds the other empty too. It must deduct
#     that unit (the product was never sold out), not answer sold_out.
source "$STOCKD_SRC/tests/lib.sh"
case=${1:?drain or config}

t_db
total() { sql "SELECT stock FROM product_stock WHERE id=$1"; }
# on_both NAME: the sum of a metric over instances 1..2.
on_both() { metric_sum "$1" $((PORT0 + 1)) $((PORT0 + 2)); }

case $case in
drain)
  for i in 1 2; do t_stockd "$i" zk --segments 16; done
  t_nginx 2
  URL=http://127.0.0.1:$PORT0
  sql "DELETE FROM orders WHERE product_id=2; DELETE FROM product_segment WHERE product_id=2;
       UPDATE product SET stock=0, fence=0 WHERE id=2;
       INSERT INTO product_segment (product_id, seg, stock) VALUES
         (2,1,0),(2,2,0),(2,3,0),(2,4,0),(2,5,3),(2,6,0),(2,7,0),(2,8,0),
         (2,9,0),(2,10,0),(2,11,0),(2,12,1),(2,13,0),(2,14,0),(2,15,0),(2,16,0)"
  expect_eq "/stock answers the sum of the segments" 4 \
    "$(curl -fsS "$URL/stock?id=2" | jq -r .stock)"

  for n in 1 2 3 4; do
    key=()
    [[ $n == 1 ]] && key=(-H "Idempotency-Key: seg-drain-key")
    expect_eq "request $n of 4 units (one at a time)" "200 deducted" "$(reduce "$URL" 2 "${key[@]}")"
    seg=$(jq -r .segment "$T/ans")
    [[ $seg == 5 || $seg == 12 ]] || fail "deducted from segment '$seg', which had no stock"
    expect_eq "total after $n" $((4 - n)) "$(total 2)"
  done
  moves0=$(on_both stockd_segment_moves_total)
  expect_eq "request 5, every segment empty" "409 sold_out" "$(reduce "$URL" 2)"
  moves=$(($(on_both stockd_segment_moves_total) - moves0))
  expect_eq "segments visited by the sold-out request after its first" 15 "$moves"
  expect_eq "a key that bought before, after the sell-out" "200 deducted true" \
    "$(reduce "$URL" 2 -H "Idempotency-Key: seg-drain-key") $(jq -r .replayed "$T/ans")"
  expect_eq "orders" 4 "$(orders 2)"
  expect_eq "segments' stock" "0" "$(sql "SELECT MAX(stock) FROM product_segment WHERE product_id=2")"
  expect_eq "/stock at the end" 0 "$(curl -fsS "$URL/stock?id=2" | jq -r .stock)"

  "$STOCKD_SRC/loadtest/oversell" --url "$URL" --run "$STOCKD_TEST_RUN" --db "$DB" \
    --mysql "$MYSQL_URL" --product 2 --stock 37 --segments 16 --requests 300 \
    --concurrency 30 --label "zk x2, 16 segments" | tee "$T/out"
  res=$(grep '^RESULT ' "$T/out") || fail "no RESULT line"
  get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$res"; }
  expect_eq "ledger (answers = orders = stock change)" ok "$(get ledger)"
  expect_eq "final total" 0 "$(get final)"
  expect_eq "deducted" 37 "$(get deducted)"
  expect_eq "verdict" EXACT "$(get verdict)"
  ;;

config)
  bin=$(stockd_bin)
  for args in "--lock zk --segments 0" "--lock zk --segments 257" "--lock atomic --segments 2" \
    "--lock none --segments 4"; do
    rc=0
    # shellcheck disable=SC2086 # the words of $args are the options
    "$bin" $args --port $((PORT0 + 5)) >"$T/bad.out" 2>&1 || rc=$?
    expect_eq "exit status for '$args'" 2 "$rc"
    grep -q -- "--segments" "$T/bad.out" || fail "no reason for '$args': $(cat "$T/bad.out")"
    echo "ok: $args -> $(head -n 1 "$T/bad.out")"
  done

  t_stockd 1 zk --segments 4
  URL=http://127.0.0.1:$((PORT0 + 1))
  s0=$(total 3)
  expect_eq "a product that is not split, seen as 4 segments" "409 sold_out" "$(reduce "$URL" 3)"
  expect_eq "its stock is untouched" "$s0" "$(total 3)"
  expect_eq "a product that does not exist" "404 not_found" "$(reduce "$URL" 999999)"
  pid_alive "$T/stockd/1.pid" || fail "stockd is gone"
  ;;
hol)
  load=()
  mysql_set_stock "$STOCKD_TEST_RUN" "$DB" 1 400 4
  t_stockd 1 zk --segments 4 --workers 2 --think-us 300000 --batch-max 1
  URL=http://127.0.0.1:$((PORT0 + 1))
  for i in $(seq 1 24); do
    curl -sS -m 60 -o "$T/a$i.body" -w '%{http_code}' "$URL/stock/reduce?id=1" >"$T/a$i.code" &
    load+=($!)
  done
  wait_until 10 holding 1 || fail "product 1 never took a lock"
  worst=0
  for p in 1 2 3 4 5; do
    # Each probe after another deduction of product 1 has committed: five points of
    # the hot run, not five at once.
    n=$(orders 1)
    t=$(curl -sS -m 30 -o "$T/health" -w '%{http_code} %{time_total}' "$URL/health")
    expect_eq "/health $p while product 1 is hot" 200 "${t% *}"
    worst=$(awk -v a="$worst" -v b="${t#* }" 'BEGIN { print (b > a ? b : a) }')
    wait_until 10 eval '(($(orders 1) > n))' || fail "no deduction of product 1 after probe $p"
  done
  echo "slowest /health of 5: ${worst}s; product 1 orders by then: $(orders 1)"
  awk -v w="$worst" 'BEGIN { exit !(w < 0.5) }' ||
    fail "/health took ${worst}s behind a hot product split over 4 segments (bound 0.5 s)"
  wait "${load[@]}"
  for i in $(seq 1 24); do expect_eq "a$i" 200 "$(cat "$T/a$i.code")"; done
  expect_eq "product 1's total" 376 "$(total 1)"
  expect_eq "orders" 24 "$(orders 1)"
  ;;

restock)
  mysql_set_stock "$STOCKD_TEST_RUN" "$DB" 2 0 2
  hold() { sql "INSERT INTO stock_lock (name, owner, expires_at)
                VALUES ('product_2_seg_$1', 'test', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)"; }
  unhold() { sql "DELETE FROM stock_lock WHERE name = 'product_2_seg_$1'"; }
  moved() { (($(metric_sum stockd_segment_moves_total $((PORT0 + 1))) >= $1)); }
  hold 1
  hold 2
  t_stockd 1 db-lock --segments 2 --lock-timeout-ms 30000
  URL=http://127.0.0.1:$((PORT0 + 1))
  curl -sS -m 60 -o "$T/r.body" -w '%{http_code}' "$URL/stock/reduce?id=2" >"$T/r.code" &
  request=$!
  wait_until 10 eval '(( $(metric_sum stockd_combiner_deductions_total $((PORT0 + 1))) >= 1 ))' ||
    fail "the deduction never reached the combiner"
  # It waits at its first segment, 1 or 2 (random). Free segment 1: if it waited
  # there, it finds it empty and moves on to 2, where it waits again.
  unhold 1
  if wait_until 5 moved 1; then
    seen=1 waiting=2
  else
    # It waits at 2: lock 1 again, free 2; it finds 2 empty and waits at 1.
    hold 1
    unhold 2
    wait_until 10 moved 1 || fail "the deduction never moved on from segment 2"
    seen=2 waiting=1
  fi
  echo "the deduction found segment $seen empty and waits for segment $waiting's lock"
  sql "UPDATE product_segment SET stock = 1 WHERE product_id = 2 AND seg = $seen"
  unhold "$waiting"
  wait "$request"
  expect_eq "the deduction after a restock during its walk" "200 deducted" \
    "$(cat "$T/r.code") $(jq -r .result "$T/r.body")"
  expect_eq "deducted from the restocked segment" "$seen" "$(jq -r .segment "$T/r.body")"
  expect_eq "product 2's total" 0 "$(total 2)"
  expect_eq "orders" 1 "$(orders 2)"
  ;;
*) fail "unknown case $case" ;;
esac
echo PASS
