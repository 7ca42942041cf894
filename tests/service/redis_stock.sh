#!/usr/bin/env bash
# Mode redis-stock end to end (issue 35): three instances behind nginx, a Redis of the
# test's own (PORT0+15) holding the count, and loadtest/oversell's load (1000 requests at
# concurrency 100 on a stock of 50, so the sale is overloaded).
#   1. Exact: deducted answers = the initial stock, the Redis count ends at 0 (it only
#      falls by one per deducted answer, so it was never below 0), the stream holds one
#      entry per deducted answer with the contract's four fields and distinct keys, and
#      the three instances raced to load the product from MariaDB without loading it
#      twice (a second load would have sold more than 50).
#   2. The order writer (writer/, stock-writer), when the build has it: once it has
#      drained the stream, orders = deducted answers and MariaDB's stock = initial -
#      orders (oversell's ledger). Without it, MariaDB is untouched: stock 50, no order.
#   3. A key: its 200 names the order by the key, the same key gets the same order back
#      (replayed), and the key used for another product is refused (422).
#   4. Redis down: 503 unavailable, and nothing done in MariaDB either; /health 503.
#   5. /metrics: the Redis count, MariaDB's stock and the stream's backlog.
#   6. --redis-wait-replicas without a replica: 503 not_replicated, the entry written.
source "$STOCKD_SRC/tests/lib.sh"

t_db
r_port=$((PORT0 + 15))
redis_start "$T" "$r_port" redis-stock || fail "Redis did not start"
rcli() { redis-cli -p "$r_port" "$@"; }
# A second consumer group that never reads: the writer trims the stream only of what
# every group has acknowledged, so the entries stay for the checks below to read.
rcli XGROUP CREATE stockd:orders audit 0 MKSTREAM >/dev/null
# added: the entries ever appended to the stream (XINFO STREAM's entries-added). Not XLEN:
# the writer trims what it has written, at moments of its own.
added() { rcli XINFO STREAM stockd:orders | awk 'p == "entries-added" { print; exit } { p = $0 }'; }
for ((i = 1; i <= 3; i++)); do
  t_stockd "$i" redis-stock --redis "127.0.0.1:$r_port"
done
t_nginx 3

writer_bin=$STOCKD_BUILD/writer/stock-writer
if [[ -x $writer_bin ]]; then
  mkdir -p "$T/writer"
  STOCKD_REDIS=127.0.0.1:$r_port STOCKD_MYSQL=$MYSQL_URL "$writer_bin" --consumer w1 \
    >"$T/writer/log" 2>&1 &
  echo $! >"$T/writer/pid"
  # Joined once it is a consumer of the group: only then do the tools wait for it.
  joined() { rcli XINFO CONSUMERS stockd:orders writers 2>/dev/null | grep -qx w1; }
  wait_until 30 joined || fail "the order writer never joined the group: $(tail -5 "$T/writer/log")"
  echo "the order writer runs ($writer_bin)"
else
  echo "no $writer_bin in this build: the orders' half is not checked"
fi

# 1 and 2: the oversell tool's load. It resets the product (MariaDB's row and the Redis
# count, after the writer drained), and after the load waits for the writer again.
"$STOCKD_SRC/loadtest/oversell" --url "http://127.0.0.1:$PORT0" --run "$STOCKD_TEST_RUN" \
  --db "$DB" --label "redis-stock x3" --redis-stock "127.0.0.1:$r_port" | tee "$T/out"
res=$(grep '^RESULT ' "$T/out") || fail "no RESULT line"
get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$res"; }
initial=$(get initial)
expect_eq "deducted answers (overloaded: all the stock)" "$initial" "$(get deducted)"
expect_eq "the Redis count" 0 "$(get redis_count)"
expect_eq "stream entries" "$initial" "$(added)"
# The entries as one XRANGE read them: the writer trims what it wrote at moments of its
# own, so the stream may hold some of them or none; each one left is checked, and the
# orders it wrote stand for the rest. Each entry: its id, then its fields in the order
# the script wrote them.
entries=$(rcli XRANGE stockd:orders - +)
left=$(awk 'NR % 9 == 1' <<<"$entries" | grep -c . || true)
echo "stream entries not trimmed yet: $left"
if ((left > 0)); then
  expect_eq "the entries' fields" "at_us instance key product " \
    "$(awk 'NR % 9 == 2 || NR % 9 == 4 || NR % 9 == 6 || NR % 9 == 8' <<<"$entries" | sort -u | tr '\n' ' ')"
  expect_eq "the entries' product" "1 " "$(awk 'NR % 9 == 5' <<<"$entries" | sort -u | tr '\n' ' ')"
fi
expect_eq "distinct order keys in the stream" "$left" "$(awk 'NR % 9 == 3' <<<"$entries" | grep . | sort -u | wc -l)"
if [[ -x $writer_bin ]]; then
  expect_eq "distinct order keys written" "$initial" "$(sql "SELECT COUNT(DISTINCT request_id) FROM orders WHERE product_id=1")"
  instances=$(sql "SELECT COUNT(DISTINCT instance) FROM orders WHERE product_id = 1")
else
  expect_eq "entries in the stream (no writer trims them)" "$initial" "$left"
  instances=$(awk 'NR % 9 == 7' <<<"$entries" | sort -u | wc -l)
fi
((instances >= 2)) || fail "the deductions came from $instances instance(s); nginx spreads them"
if [[ -x $writer_bin ]]; then
  expect_eq "ledger (answers = orders = stock change)" ok "$(get ledger)"
  expect_eq "MariaDB's stock" 0 "$(stock 1)"
  # The stream's keys not yet trimmed are all among the orders' request_ids.
  expect_eq "stream keys with no order" "" \
    "$(comm -23 <(awk 'NR % 9 == 3' <<<"$entries" | grep . | sort) \
      <(sql "SELECT request_id FROM orders WHERE product_id = 1" | sort) | tr '\n' ' ')"
else
  expect_eq "MariaDB's stock without a writer" "$initial" "$(stock 1)"
  expect_eq "orders without a writer" 0 "$(orders 1)"
fi

# 5. The watch: each instance's /metrics has product 1's Redis count beside its stock,
# and the stream's backlog (the writers' part of it: 0 once drained; without a writer,
# every entry is undelivered).
# is NAME VALUE PORT: the sample NAME of the stockd on PORT is VALUE now.
is() { [[ $(metric "$3" "$1") == "$2" ]]; }
for ((i = 1; i <= 3; i++)); do
  wait_until 10 is 'stockd_redis_stock{product="1"}' 0 $((PORT0 + i)) ||
    fail "stockd-$i's stockd_redis_stock of product 1: '$(metric $((PORT0 + i)) 'stockd_redis_stock{product="1"}')'"
done
echo "ok: stockd_redis_stock{product=\"1\"} = 0 on every instance"
want_stock=$initial want_backlog=$initial
[[ -x $writer_bin ]] && want_stock=0 want_backlog=0
wait_until 10 is 'stockd_product_stock{product="1"}' "$want_stock" $((PORT0 + 1)) ||
  fail "stockd_product_stock of product 1: '$(metric $((PORT0 + 1)) 'stockd_product_stock{product="1"}')'"
wait_until 10 is 'stockd_order_stream_backlog{state="undelivered"}' "$want_backlog" $((PORT0 + 1)) ||
  fail "undelivered backlog: '$(metric $((PORT0 + 1)) 'stockd_order_stream_backlog{state="undelivered"}')'"
wait_until 10 is 'stockd_order_stream_backlog{state="pending"}' 0 $((PORT0 + 1)) ||
  fail "pending backlog: '$(metric $((PORT0 + 1)) 'stockd_order_stream_backlog{state="pending"}')'"
echo "ok: the gauges show MariaDB's stock $want_stock and a backlog of $want_backlog"

# 3. One key.
sql "UPDATE product SET stock = 5 WHERE id = 2"
expect_eq "a keyed deduction" "200 deducted" "$(reduce "$PORT0" 2 -H 'Idempotency-Key: e2e-k1')"
expect_eq "its order" e2e-k1 "$(jq -r .order "$T/ans")"
expect_eq "the count after it (loaded from MariaDB's 5)" 4 "$(rcli GET 'stockd:stock:{2}')"
expect_eq "the same key again" "200 deducted" "$(reduce "$PORT0" 2 -H 'Idempotency-Key: e2e-k1')"
expect_eq "its order, again" "e2e-k1 true" "$(jq -r '"\(.order) \(.replayed)"' "$T/ans")"
expect_eq "the count, untouched by the replay" 4 "$(rcli GET 'stockd:stock:{2}')"
expect_eq "the key for another product" "422 key_conflict" "$(reduce "$PORT0" 1 -H 'Idempotency-Key: e2e-k1')"
expect_eq "stream entries after one more deduction" $((initial + 1)) "$(added)"

# 6. --redis-wait-replicas 1 on a Redis without a replica: the deduction is made (its
# entry is in the stream), and the answer says that no replica has it.
t_stockd 4 redis-stock --redis "127.0.0.1:$r_port" --redis-wait-replicas 1 --redis-wait-ms 50
len=$(added)
expect_eq "a deduction no replica confirmed" "503 not_replicated" "$(reduce $((PORT0 + 4)) 2)"
jq -e '.message | test("0 of 1 replicas confirmed it within 50 ms")' "$T/ans" >/dev/null ||
  fail "the 503 does not say what happened: $(cat "$T/ans")"
expect_eq "its entry is in the stream" $((len + 1)) "$(added)"

# 4. Redis down: nothing is done anywhere, and /health says why.
health() { curl -sS -o "$T/health" -w '%{http_code}' "http://127.0.0.1:$((PORT0 + 1))/health"; }
expect_eq "/health with Redis up" "200 up" "$(health) $(jq -r .redis "$T/health")"
sql "UPDATE product SET stock = 7 WHERE id = 3"
redis_stop "$T" redis-stock
expect_eq "/health with Redis down" "503 down" "$(health) $(jq -r .redis "$T/health")"
expect_eq "a deduction with Redis down" "503 unavailable" "$(reduce $((PORT0 + 1)) 3)"
jq -e '.message | test("Redis is unavailable; nothing was deducted")' "$T/ans" >/dev/null ||
  fail "the 503 does not say why: $(cat "$T/ans")"
expect_eq "MariaDB's stock of product 3" 7 "$(stock 3)"
expect_eq "orders of product 3" 0 "$(orders 3)"
echo PASS
