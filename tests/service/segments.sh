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
#     and answers sold out (it undersells, never oversells: README says every instance
#     and the reset must agree on K); a product that does not exist is 404.
source "$STOCKD_SRC/tests/lib.sh"
case=${1:?drain or config}

t_db
total() { sql "SELECT stock FROM product_stock WHERE id=$1"; }
orders() { sql "SELECT COUNT(*) FROM orders WHERE product_id=$1"; }
# reduce URL ID [KEY]: prints "CODE RESULT"; the body stays in $T/ans.
reduce() {
  local hdr=()
  [[ -n ${3:-} ]] && hdr=(-H "Idempotency-Key: $3")
  local code
  code=$(curl -sS -m 30 "${hdr[@]}" -o "$T/ans" -w '%{http_code}' "$1/stock/reduce?id=$2")
  echo "$code $(jq -r .result "$T/ans")"
}
# metric NAME: the sum of a metric over instances 1..2.
metric() {
  local i sum=0 v
  for i in 1 2; do
    v=$(curl -fsS "http://127.0.0.1:$((PORT0 + i))/metrics" | awk -v m="$1" '$1 == m { print $2 }')
    sum=$((sum + ${v:-0}))
  done
  echo "$sum"
}

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
    key=$([[ $n == 1 ]] && echo seg-drain-key || echo "")
    expect_eq "request $n of 4 units (one at a time)" "200 deducted" "$(reduce "$URL" 2 "$key")"
    seg=$(jq -r .segment "$T/ans")
    [[ $seg == 5 || $seg == 12 ]] || fail "deducted from segment '$seg', which had no stock"
    expect_eq "total after $n" $((4 - n)) "$(total 2)"
  done
  moves0=$(metric stockd_segment_moves_total)
  expect_eq "request 5, every segment empty" "409 sold_out" "$(reduce "$URL" 2)"
  moves=$(($(metric stockd_segment_moves_total) - moves0))
  expect_eq "segments visited by the sold-out request after its first" 15 "$moves"
  expect_eq "a key that bought before, after the sell-out" "200 deducted true" \
    "$(reduce "$URL" 2 seg-drain-key) $(jq -r .replayed "$T/ans")"
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
*) fail "unknown case $case" ;;
esac
echo PASS
