#!/usr/bin/env bash
# The order writer (stock-writer) against a Redis and a database of the test's own, the
# stream fed in the contract's exact format (writerlib.sh):
#
#   writer.sh exactly-once
#     Product 2 has 5 units in MariaDB. Entries: keys d-1..d-7, then d-1 and d-2 again
#     (a client retry answered from the memo, appended twice by a bug), and one entry
#     without its fields. A dead consumer `ghost` has read the first 3 and never
#     acknowledged them. The writer claims the ghost's entries (after --claim-idle-ms),
#     writes five of d-1..d-7 as orders and the other two as oversold promises
#     (which two: the claimed ones come last), skips the repeats, and logs the malformed
#     entry. Drained, the stream is trimmed to nothing (all acknowledged), and the ghost,
#     idle and holding nothing, is removed from the group. Then every entry is delivered
#     again (copies of the same entries, as after a crash between COMMIT and XACK):
#     nothing changes. Product 3 (Redis count 1, MariaDB 4, three entries) reconciles:
#     agree; product 2 (oversold): the reconciliation exits 1. Then two keys deducted
#     again (e-1 for product 3 at another time, d-3 for product 3: their memos gone):
#     each recorded as an oversold promise `<key>@<at_us>` with reason key_reused and a
#     log line, never dropped as a duplicate. /metrics says the same counts. Two
#     reservations (entries with state reserved and expires_us) and their changes (a
#     cancel delivered twice, a payment after it, a payment of the other), and a third
#     reservation that only the cancelled unit makes possible, right after the cancel in
#     one batch: each change applies once, to a reserved order only; the cancelled unit
#     comes back once, at its place in the stream, so the third is an order. SIGTERM
#     stops the writer with exit 0.
#   writer.sh kill9
#     Load fed while writer A runs; a row lock held on product 2 stalls A's batch, and A
#     is killed with -9 with entries pending. Writer B (another name) claims them; the
#     feed goes on. Drained: every key exactly once, stock = initial - orders.
#   writer.sh mysql-restart
#     MariaDB (the test's own) killed with -9 mid-load and started again; the writer
#     retries and, drained, every key is written exactly once.
#   writer.sh maxmemory
#     Redis memory bounded by what is in flight: a Redis with maxmemory 4 MB above its
#     start (noeviction), stockd in mode redis-stock with --redis-key-window-s 1.
#     1. No writer: 60,000 deductions with keys do not fit (nothing is trimmed): Redis
#        refuses the script at the limit, and every refusal is a 503 with nothing
#        deducted (deducted answers = the Redis count's fall = the stream's entries).
#     2. The writer started: it drains and trims the stream, the memos expire, and
#        30,000 more deductions (4 at a time, so that the writer keeps up on a loaded
#        machine: what is in flight is the writer's lag) are all made under that limit. Drained, Redis and
#        MariaDB agree, and the stream and the memos are (nearly) empty.
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/writer/writerlib.sh"
case=${1:?exactly-once, kill9, mysql-restart or maxmemory}

if [[ $case == mysql-restart ]]; then
  myport=$((PORT0 + 16))
  mysql_start "$T" "$myport"
  MYSQL_RUN=$T
  MYSQL_URL="mysql://$DB_USER@127.0.0.1:$myport/$DB"
  mysql_create_db "$T" "$DB" "$DB_USER" "$DB_PASS"
else
  t_db
fi
w_redis

case $case in
exactly-once)
  sql "UPDATE product SET stock = 5 WHERE id = 2; UPDATE product SET stock = 4 WHERE id = 3"
  export W_AT=$(date +%s%6N)
  rcli XGROUP CREATE stockd:orders writers 0 MKSTREAM >/dev/null
  w_feed 2 1 7 d
  rcli XREADGROUP GROUP writers ghost COUNT 3 STREAMS stockd:orders '>' >/dev/null
  expect_eq "the ghost's pending entries" 3 "$(w_pending ghost)"
  w_feed 2 1 2 d
  rcli XADD stockd:orders '*' key d-bad product x >/dev/null
  w_feed 3 1 3 e
  rcli SET 'stockd:stock:{3}' 1 >/dev/null
  rcli SET 'stockd:stock:{2}' 0 >/dev/null
  metrics_port=$((PORT0 + 17))
  w_start a --claim-idle-ms 200 --batch 4 --forget-idle-ms 1000 --metrics-port "$metrics_port"
  wait_until 30 w_drained || fail "not drained: $(cat "$T/reconcile")"
  expect_eq "the ghost's pending entries" 0 "$(w_pending ghost)"
  expect_eq "orders of product 2" 5 "$(orders 2)"
  expect_eq "stock of product 2" 0 "$(stock 2)"
  # Which two keys: the claimed entries are written after the later ones.
  expect_eq "oversold promises of product 2" 2 \
    "$(sql "SELECT COUNT(*) FROM oversold_promise WHERE product_id=2 AND reason='sold_out'")"
  expect_eq "orders without answered_at" 0 "$(sql "SELECT COUNT(*) FROM orders WHERE answered_at IS NULL")"
  grep -q 'not in the contract' "$T/writer-a/log" || fail "the malformed entry was not logged"
  expect_eq "oversold promises logged" 2 "$(grep -c 'OVERSOLD PROMISE' "$T/writer-a/log")"
  w_exactly_once 2 5
  trimmed() { [[ $(rcli XLEN stockd:orders) == 0 ]]; }
  wait_until 10 trimmed || fail "the stream was not trimmed once all was acknowledged: XLEN $(rcli XLEN stockd:orders)"
  ghost_gone() { ! rcli XINFO CONSUMERS stockd:orders writers | grep -qx ghost; }
  wait_until 30 ghost_gone || fail "the ghost consumer (idle, nothing pending) was not removed"
  grep -q 'removed consumer ghost' "$T/writer-a/log" || fail "the ghost's removal was not logged"
  rcli XINFO CONSUMERS stockd:orders writers | grep -qx a || fail "writer a removed itself"
  # Every entry delivered again: nothing is written twice.
  w_feed 2 1 7 d
  w_feed 3 1 3 e
  wait_until 30 w_drained || fail "not drained after the redelivery"
  w_exactly_once 2 5
  expect_eq "oversold promises after the redelivery" 2 "$(sql "SELECT COUNT(*) FROM oversold_promise")"
  rc=0
  w_reconcile 10 || rc=$?
  expect_eq "reconciliation's exit (product 2 oversold)" 1 "$rc"
  grep -Eq '^ +3 +1 +0 +0 +1 +3 +0  agree$' "$T/reconcile" || fail "product 3 does not agree"
  grep -Eq '^ +2 .*OVERSOLD$' "$T/reconcile" || fail "product 2 is not reported oversold"
  # Two keys deducted again after their memos were gone: recorded, never dropped.
  W_AT=$((W_AT + 1000)) w_feed 3 1 1 e
  W_AT=$((W_AT + 2000)) w_feed 3 3 3 d
  wait_until 30 w_drained || fail "not drained after the reused keys"
  expect_eq "key_reused promises" "e-1@$((W_AT + 1000)) d-3@$((W_AT + 2000))" \
    "$(sql "SELECT GROUP_CONCAT(request_id ORDER BY id SEPARATOR ' ') FROM oversold_promise WHERE reason='key_reused' AND product_id=3")"
  expect_eq "reused keys logged" 2 "$(grep -c 'KEY REUSED' "$T/writer-a/log")"
  expect_eq "orders of product 3 (the reused keys add none)" 3 "$(orders 3)"
  metrics=$(curl -sf "http://127.0.0.1:$metrics_port/metrics") || fail "no /metrics from the writer"
  for m in 'stock_writer_orders_total 8' 'stock_writer_oversold_promises_total 2' \
    'stock_writer_key_reused_total 2' 'stock_writer_claimed_total 3' \
    'stock_writer_consumers_removed_total 1' 'stock_writer_pending_entries 0' \
    'stock_writer_undelivered_entries 0'; do
    grep -qx "$m" <<<"$metrics" || fail "/metrics lacks '$m': $(grep "^${m% *} " <<<"$metrics")"
  done
  # Reservations of mode redis-stock (docs/orders.md): of 2 units, r-1 reserved,
  # cancelled, its cancel delivered again and a payment after it; r-2 reserved and paid;
  # r-3 reserved with r-1's unit (Redis had it back) right after r-1's cancel, in the
  # same batch of 4 (one MULTI, read at once), and paid. Each change applies to a
  # reserved order only, in stream order, and r-1's unit comes back once, before r-3
  # takes it (the nemesis's --orders found it taken after the batch's deductions).
  sql "UPDATE product SET stock = 2 WHERE id = 4"
  x=$((W_AT + 3600000000))
  {
    echo MULTI
    for k in r-1 r-2; do
      echo "XADD stockd:orders * key $k product 4 instance test at_us $W_AT user u-$k state reserved expires_us $x"
    done
    echo "XADD stockd:orders * key r-1 product 4 instance test at_us $((W_AT + 5)) change cancelled"
    echo "XADD stockd:orders * key r-3 product 4 instance test at_us $((W_AT + 6)) user u-r-3 state reserved expires_us $x"
    for c in "r-1 cancelled" "r-1 paid" "r-2 paid" "r-3 paid"; do
      echo "XADD stockd:orders * key ${c% *} product 4 instance test at_us $((W_AT + 7)) change ${c#* }"
    done
    echo EXEC
  } | rcli >/dev/null || fail "feeding the reservations failed"
  wait_until 30 w_drained || fail "not drained after the reservations"
  expect_eq "r-1, r-2 and r-3: state, expires_at, released_at" \
    "r-1 cancelled 1 1 r-2 paid 1 0 r-3 paid 1 0" \
    "$(sql "SELECT request_id, state, expires_at IS NOT NULL, released_at IS NOT NULL FROM orders WHERE product_id=4 ORDER BY request_id" | tr '\t\n' '  ' | sed 's/ $//')"
  expect_eq "stock of product 4 (r-1's unit back once, to r-3)" 0 "$(stock 4)"
  pid=$(cat "$T/writer-a/pid")
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
  expect_eq "the writer's exit after SIGTERM" 0 "$rc"
  grep -q 'stopped: .* 11 orders, [0-9]* duplicates, 2 oversold promises' "$T/writer-a/log" ||
    fail "no summary line: $(tail -n 3 "$T/writer-a/log")"
  ;;
kill9)
  initial=3000
  sql "UPDATE product SET stock = $initial WHERE id = 2"
  w_start a --batch 50
  w_feed 2 1 200
  wait_until 30 w_drained || fail "writer a did not write the first entries"
  # Hold product 2's row lock, so that writer a's next batch waits inside its transaction.
  mysql_cli "$MYSQL_RUN" -N -B "$DB" -e \
    "START TRANSACTION; SELECT stock FROM product WHERE id=2 FOR UPDATE; SELECT SLEEP(120)" \
    >/dev/null 2>&1 &
  holder=$!
  holder_id() { sql "SELECT trx_mysql_thread_id FROM information_schema.innodb_trx WHERE trx_mysql_thread_id <> CONNECTION_ID() AND trx_rows_locked > 0 LIMIT 1"; }
  holding_lock() { [[ -n $(holder_id) ]]; }
  wait_until 10 holding_lock || fail "no transaction holds the row"
  hid=$(holder_id)
  # Each chunk's first key fed twice with the same at_us: a redelivered copy.
  (for ((c = 0; c < 20; c++)); do
    at=$(date +%s%6N)
    W_AT=$at w_feed 2 $((201 + c * 50)) $((250 + c * 50))
    W_AT=$at w_feed 2 $((201 + c * 50)) $((201 + c * 50))
  done) &
  feeder=$!
  a_pending() { (($(w_pending a) > 0)); }
  wait_until 30 a_pending || fail "writer a has nothing pending"
  kill -9 "$(cat "$T/writer-a/pid")"
  echo "writer a killed with $(w_pending a) entries pending"
  sql "KILL $hid"
  wait "$holder" || true
  w_start b --batch 50 --claim-idle-ms 500
  wait "$feeder"
  wait_until 60 w_drained || fail "not drained: $(cat "$T/reconcile")"
  expect_eq "writer a's pending entries" 0 "$(w_pending a)"
  grep -q 'stopped' "$T/writer-a/log" && fail "writer a was not killed but stopped"
  echo "orders: $(orders 2), stock $(stock 2)"
  w_exactly_once 2 "$initial"
  expect_eq "oversold promises" 0 "$(sql "SELECT COUNT(*) FROM oversold_promise")"
  ;;
mysql-restart)
  initial=3000
  sql "UPDATE product SET stock = $initial WHERE id = 2"
  w_start a --batch 20 --backoff-max-ms 500
  (for ((c = 0; c < 40; c++)); do w_feed 2 $((1 + c * 25)) $((25 + c * 25)); done) &
  feeder=$!
  some_orders() { (($(orders 2) >= 100)); }
  wait_until 30 some_orders || fail "the writer wrote nothing"
  kill -9 "$(cat "$T/mysql/pid")"
  echo "MariaDB killed at $(rcli XLEN stockd:orders) entries"
  down_logged() { grep -q 'retrying' "$T/writer-a/log"; }
  wait_until 30 down_logged || fail "the writer did not notice MariaDB was gone"
  mysql_start "$T" "$myport"
  wait "$feeder"
  wait_until 60 w_drained || fail "not drained: $(cat "$T/reconcile")"
  grep -q 'working again' "$T/writer-a/log" || fail "the writer never said it works again"
  echo "orders: $(orders 2), stock $(stock 2)"
  w_exactly_once 2 "$initial"
  ;;
maxmemory)
  need_stockd_bin
  [[ -x $STOCKLOAD_BIN ]] || skip "no stockload at $STOCKLOAD_BIN"
  initial=1000000
  sql "UPDATE product SET stock = $initial WHERE id = 2"
  t_stockd 1 redis-stock --redis "127.0.0.1:$W_REDIS_PORT" --redis-key-window-s 1
  used=$(rcli INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
  limit=$((used + 4 * 1024 * 1024))
  rcli CONFIG SET maxmemory-policy noeviction >/dev/null
  rcli CONFIG SET maxmemory "$limit" >/dev/null
  echo "Redis uses $used bytes; maxmemory $limit"
  # load N C OUT: N deductions with keys (C at a time), the answers' counts to OUT.
  load() {
    "$STOCKLOAD_BIN" --url "http://127.0.0.1:$((PORT0 + 1))/stock/reduce?id=2" --method POST \
      --idempotency --threads "$2" --loops $(($1 / $2)) --json --no-progress >"$3" ||
      fail "stockload failed: $(head -c 300 "$2")"
  }
  count() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["counts"].get(sys.argv[2], 0))' "$@"; }
  load 60000 10 "$T/a.json"
  deducted=$(count "$T/a.json" deducted)
  refused=$(count "$T/a.json" unavailable)
  echo "without a writer: $deducted deducted, $refused refused (503)"
  ((refused > 0)) || fail "60,000 deductions fitted under maxmemory without trimming: the test proves nothing"
  expect_eq "deducted + refused" 60000 $((deducted + refused))
  expect_eq "the Redis count's fall (no refusal deducted)" "$deducted" $((initial - $(rcli GET 'stockd:stock:{2}')))
  expect_eq "the stream's entries" "$deducted" "$(rcli XLEN stockd:orders)"
  w_start a --metrics-port $((PORT0 + 17))
  wait_until 60 w_drained || fail "not drained: $(cat "$T/reconcile")"
  memos_gone() { (($(rcli DBSIZE) < 10)); }
  wait_until 30 memos_gone || fail "the memos did not expire: DBSIZE $(rcli DBSIZE)"
  echo "drained: used_memory $(rcli INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')"
  (while :; do echo "$(rcli INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p') $(rcli XLEN stockd:orders) $(rcli DBSIZE)"; sleep 0.2; done) >"$T/samples" 2>/dev/null &
  sampler=$!
  load 30000 4 "$T/b.json"
  kill $sampler
  echo "phase 2's peak (used_memory, stream entries, keys): $(sort -n "$T/samples" | tail -n 1)"
  expect_eq "deducted with the writer running, under the same maxmemory" 30000 \
    "$(count "$T/b.json" deducted)"
  wait_until 60 w_drained || fail "not drained: $(cat "$T/reconcile")"
  w_reconcile 10 || fail "Redis and MariaDB disagree"
  expect_eq "orders" $((deducted + 30000)) "$(orders 2)"
  # The writer trims when a read finds nothing new after a write: wait for that moment.
  trimmed() { (($(rcli XLEN stockd:orders) == 0)); }
  wait_until 30 trimmed || fail "stream entries left once drained: $(rcli XLEN stockd:orders)"
  wait_until 30 memos_gone || fail "the memos did not expire: DBSIZE $(rcli DBSIZE)"
  echo "Redis: used_memory $(rcli INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p') (maxmemory $limit)"
  ;;
*) fail "unknown case $case" ;;
esac
# A sanitizer build's writer reports into its log.
if grep -E 'ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:' "$T"/writer-*/log; then
  fail "sanitizer reports in the writer logs"
fi
echo PASS
