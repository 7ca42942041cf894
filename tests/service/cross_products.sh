#!/usr/bin/env bash
# cross_products.sh CASE: batches across products (--cross-products K, issue 19 #2) in
# mode zk, against the real MariaDB, ZooKeeper and nginx.
#   spread3  3 instances behind nginx round-robin, 2000 requests spread uniformly over
#            100 products of 4 units each (so every product sells out, all but surely):
#            exact 0 on every product, no stock below 0, the ledger reconciled (the
#            deducted answers = the orders = the units gone, per product too), and at
#            least one transaction that committed several products. ~15 s.
#   busy     a busy product is not waited for: instance B holds product 9's lock (a
#            deduction with 3 s of think time); instance A (2 workers, so one leader)
#            gets deductions of products 2..9: it commits 2..8 while B still holds 9 (its
#            try of 9's lock gave up its place at once), and 9's deduction is served
#            after B lets go, with B's order before it. Product 2's batch is held at its
#            INSERT until 9 and then 3..8 have reached A, so A's leader takes 9 over as
#            its own product and finds it busy: it passes it on rather than wait while
#            3..8 wait behind it. ~6 s.
#   hol      a leader waiting for a busy lock holds no other product up: B holds 9's lock
#            for 3 s; A (2 workers, --cross-products 4) gets 9, then 3 and 4: 3 and 4 are
#            answered while B holds 9, and A's 9 after B's. ~6 s.
#   kill9    spread3's 3 instances (2 s ZooKeeper sessions), 100 products of 10 units,
#            and instance 2 killed with -9 once 300 units are sold, while the load goes
#            on: its open transaction rolls back, its lock nodes go with its session, the
#            others go on; a drain sells the rest. Then exact 0 on every product, 10
#            orders each, and the lossy ledger: deducted answers <= orders <= deducted +
#            the answers left open (nginx's 502s: round-robin keeps sending a third of
#            the load to the dead instance, which refuses it with nothing deducted). ~20 s.
#   starve   two hot products (40 closed-loop clients each) keep both leaders' batches
#            full: a third product's single deduction is answered (deducted) while that
#            load runs, not 503 at its deadline (issue 34 #1). ~5 s.
#   aside    a leader waits for one busy lock (C's, 6 s) while another product's (B's,
#            1.5 s) frees: that product is handed to another worker and answered while
#            C still holds its lock (issue 34 #2). ~8 s.
# (A batch with one lock lost before COMMIT commits nothing: stockdb_itest's
# multi_products_commit_all_or_nothing, with the guard refusing as a lost lock makes it.)
source "$STOCKD_SRC/tests/lib.sh"
# f_gap_lock_start, f_stalled_trx, f_gap_lock_stop: a batch held at its INSERT (busy).
source "$STOCKD_SRC/tests/faults/faultlib.sh"
case=${1:?case}

t_db

# holds I ID: instance I starts a deduction of product ID in the background (its curl's
# pid is hold_pid[I], its answer $T/hold<I>.body) and holds ID's lock when this returns
# (for its think time).
declare -A hold_pid
holds() {
  local url=http://127.0.0.1:$((PORT0 + $1)) held
  held=$(metric_sum stockd_lock_acquisitions_total "$url")
  curl -sS -m 30 -o "$T/hold$1.body" "$url/stock/reduce?id=$2" &
  hold_pid[$1]=$!
  # It holds the lock once it has acquired one more, for its think time.
  wait_metric 10 stockd_lock_acquisitions_total $((held + 1)) "$url" ||
    fail "stockd-$1 never took $2's lock"
}

# b_holds_9: instance A (1) makes its first deduction (it opens its connections, so its
# batches after are not slowed by that), then instance B (2, 3 s of think time) holds
# product 9's lock (holds 2 9; its curl is $bpid). Sets a and b to the two instances' URLs.
b_holds_9() {
  a=http://127.0.0.1:$((PORT0 + 1)) b=http://127.0.0.1:$((PORT0 + 2))
  curl -fsS -m 20 -o /dev/null "$a/stock/reduce?id=1" || fail "A's first deduction"
  holds 2 9
  bpid=${hold_pid[2]}
}

# running PID: 1 while the process runs, else 0.
running() { kill -0 "$1" 2>/dev/null && echo 1 || echo 0; }

case $case in
spread3)
  sql "INSERT INTO product (id, product_name, stock) SELECT seq, 'spread', 4 FROM seq_1_to_100
       ON DUPLICATE KEY UPDATE stock = 4; DELETE FROM orders"
  for i in 1 2 3; do t_stockd "$i" zk --cross-products 8 --think-us 1000; done
  t_nginx 3
  "$STOCKLOAD_BIN" --url "http://127.0.0.1:$PORT0/stock/reduce?id={id}" --products 1-100 \
    --threads 100 --loops 20 --json --no-progress >"$T/load.json" || fail "stockload failed"
  deducted=$(jq '.counts.deducted' "$T/load.json")
  sold_out=$(jq '.counts.sold_out' "$T/load.json")
  echo "answers: $deducted deducted, $sold_out sold out of $(jq .requests "$T/load.json")"
  expect_eq "answers (deducted + sold out)" 2000 $((deducted + sold_out))
  expect_eq "products left with stock" 0 "$(sql "SELECT COUNT(*) FROM product WHERE id <= 100 AND stock <> 0")"
  expect_eq "orders" 400 "$(sql "SELECT COUNT(*) FROM orders WHERE product_id <= 100")"
  expect_eq "deducted answers = orders" 400 "$deducted"
  expect_eq "products whose orders are not 4" 0 "$(sql "SELECT COUNT(*) FROM product p WHERE id <= 100
    AND (SELECT COUNT(*) FROM orders o WHERE o.product_id = p.id) <> 4")"
  sum=0 count=0 busy=0
  for i in 1 2 3; do
    p=$((PORT0 + i))
    s=$(metric "$p" stockd_batch_products_sum) c=$(metric "$p" stockd_batch_products_count)
    b=$(metric "$p" stockd_cross_busy_total)
    echo "stockd-$i: $c transactions across products, $s products in them, $b tried locks busy"
    sum=$((sum + s)) count=$((count + c)) busy=$((busy + b))
  done
  ((sum > count)) || fail "no transaction committed several products ($sum products in $count)"
  ;;
busy)
  sql "INSERT INTO product (id, product_name, stock) SELECT seq, 'busy', 10 FROM seq_1_to_9
       ON DUPLICATE KEY UPDATE stock = 10; DELETE FROM orders"
  t_stockd 1 zk --workers 2 --cross-products 16 --think-us 100000 --lock-cache-ms 0
  t_stockd 2 zk --think-us 3000000
  # (A cross transaction thinks for each product, before any write: 3..8 take 6 x 100 ms.)
  b_holds_9
  # Product 2's batch leads, and is held at its INSERT by a lock on the end of the orders
  # table (faultlib's gap lock) while 9 and then 3..8 arrive behind it.
  f_gap_lock_start
  curl -sS -m 20 -o "$T/a2.body" "$a/stock/reduce?id=2" &
  pids=($!)
  wait_until 15 eval '[[ -n $(f_stalled_trx) ]]' || fail "A's batch of product 2 never wrote"
  # 9 arrives first of them, so its slot is the oldest waiting one, which the leader takes
  # over after product 2's batch: the worst order. Its try finds B's lock busy, so it
  # passes 9 on to product 3 (whose batch tries the rest) instead of waiting for B while
  # 3..8 wait behind it, as it once did.
  curl -sS -m 20 -o "$T/a9.body" "$a/stock/reduce?id=9" &
  p9=$!
  wait_until 10 eval '(($(tcp_conns "sport = :$((PORT0 + 1))" stockd) >= 2))' ||
    fail "A never accepted the request for 9"
  # 3..8 from one client, all at once. Sent by six curls started one by one, on a busy
  # machine (three busy loops on the two cores) they met no batch of several products
  # in 1 run of 10: they had reached A too far apart.
  many=()
  for id in 3 4 5 6 7 8; do many+=(-o "$T/a$id.body" "$a/stock/reduce?id=$id"); done
  curl -sS -m 20 --parallel --parallel-immediate "${many[@]}" &
  pids+=($!)
  wait_until 10 eval '(($(tcp_conns "sport = :$((PORT0 + 1))" stockd) >= 8))' ||
    fail "A never accepted the requests for 3..8"
  f_gap_lock_stop
  for pid in "${pids[@]}"; do wait "$pid"; done # products 2..8
  # B is still thinking under 9's lock: A did not wait for it.
  expect_eq "B's deduction still under way when A's products 2..8 were answered" 1 \
    "$(running "$bpid")"
  for id in 2 3 4 5 6 7 8; do
    expect_eq "A's product $id" deducted "$(jq -r .result "$T/a$id.body")"
  done
  expect_eq "orders of product 9 while B holds its lock" 0 \
    "$(sql "SELECT COUNT(*) FROM orders WHERE product_id = 9")"
  wait "$p9"
  wait "$bpid"
  expect_eq "B's deduction of 9" deducted "$(jq -r .result "$T/hold2.body")"
  expect_eq "A's deduction of 9" deducted "$(jq -r .result "$T/a9.body")"
  expect_eq "product 9's orders: B's first, then A's" "stockd-2 stockd-1" \
    "$(sql "SELECT GROUP_CONCAT(instance ORDER BY id SEPARATOR ' ') FROM orders WHERE product_id = 9")"
  expect_eq "product 9's stock" 8 "$(sql "SELECT stock FROM product WHERE id = 9")"
  s=$(metric $((PORT0 + 1)) stockd_batch_products_sum) c=$(metric $((PORT0 + 1)) stockd_batch_products_count)
  echo "A: $c transactions across products, $s products; $(metric $((PORT0 + 1)) stockd_cross_busy_total) tried locks busy"
  ((s > c)) || fail "A committed no transaction of several products"
  (($(metric $((PORT0 + 1)) stockd_cross_busy_total) >= 1)) || fail "A never found 9's lock busy"
  ;;
kill9)
  sql "INSERT INTO product (id, product_name, stock) SELECT seq, 'spread', 10 FROM seq_1_to_100
       ON DUPLICATE KEY UPDATE stock = 10; DELETE FROM orders"
  for i in 1 2 3; do t_stockd "$i" zk --cross-products 8 --think-us 1000 --zk-session-ms 2000; done
  t_nginx 3
  "$STOCKLOAD_BIN" --url "http://127.0.0.1:$PORT0/stock/reduce?id={id}" --products 1-100 \
    --threads 100 --loops 20 --json --no-progress >"$T/load.json" &
  load=$!
  wait_until 30 eval "(( \$(sql 'SELECT COUNT(*) FROM orders') >= 300 ))" ||
    fail "300 units were not sold within 30 s"
  kill -KILL "$(cat "$T/stockd/2.pid")"
  last=$(sql "SELECT MAX(id) FROM orders")
  echo "killed stockd-2 with $(sql 'SELECT COUNT(*) FROM orders') orders in"
  wait "$load" || fail "stockload failed"
  lost=$(jq '.counts.other_5xx + .counts.transport_error' "$T/load.json")
  deducted=$(jq '.counts.deducted' "$T/load.json")
  echo "load: $deducted deducted, $(jq .counts.sold_out "$T/load.json") sold out, $lost lost" \
    "answers, $(jq '.counts.unavailable + .counts.lock_timeout + .counts.lock_lost' "$T/load.json")" \
    "503s (nothing deducted)"
  n=$(sql "SELECT COUNT(*) FROM orders WHERE id > $last AND instance <> 'stockd-2'")
  ((n > 0)) || fail "no other instance deducted after the kill"
  echo "ok: $n deductions by the other instances after the kill"
  # The drain: the rest, product by product, at stockd-1 (nginx's round-robin still
  # sends a third to the dead instance).
  drained=0
  for round in 1 2 3; do
    for id in $(sql "SELECT id FROM product WHERE id <= 100 AND stock > 0"); do
      for ((u = $(sql "SELECT stock FROM product WHERE id = $id"); u > 0; u--)); do
        r=$(curl -sS -m 20 "http://127.0.0.1:$((PORT0 + 1))/stock/reduce?id=$id" | jq -r .result)
        [[ $r == deducted ]] && drained=$((drained + 1))
      done
    done
  done
  echo "drain: $drained deducted"
  expect_eq "products not at exactly 0" 0 "$(sql "SELECT COUNT(*) FROM product WHERE id <= 100 AND stock <> 0")"
  expect_eq "orders" 1000 "$(sql "SELECT COUNT(*) FROM orders WHERE product_id <= 100")"
  expect_eq "products whose orders are not 10" 0 "$(sql "SELECT COUNT(*) FROM product p WHERE id <= 100
    AND (SELECT COUNT(*) FROM orders o WHERE o.product_id = p.id) <> 10")"
  total=$((deducted + drained))
  ((total <= 1000)) || fail "more deducted answers ($total) than orders (1000)"
  ((1000 <= total + lost)) || fail "orders (1000) exceed deducted answers + lost answers ($total + $lost)"
  echo "ok: deducted $total <= orders 1000 <= deducted + lost $((total + lost))"
  ;;
hol)
  # B (instance 2) holds product 9's lock for 3 s; A (instance 1, 2 workers, so one
  # counted leader) gets a deduction of 9 first, then of 3 and 4, whose locks are free.
  # A's leader of 9 tries the lock, finds it busy with no other product to pass to, so
  # it waits, holding nothing and not counted as a leader: 3 and 4 get a leader of their
  # own and are answered while B still holds 9 (once they waited waiting behind it).
  sql "INSERT INTO product (id, product_name, stock) SELECT seq, 'hol', 10 FROM seq_1_to_9
       ON DUPLICATE KEY UPDATE stock = 10; DELETE FROM orders"
  t_stockd 1 zk --workers 2 --cross-products 4 --think-us 1000 --lock-cache-ms 0
  t_stockd 2 zk --think-us 3000000
  b_holds_9
  curl -sS -m 20 -o "$T/a9.body" "$a/stock/reduce?id=9" &
  p9=$!
  # A's leader of 9 has tried its lock, found it busy, and waits for it: a node of A's
  # behind B's in 9's queue.
  wait_metric 10 stockd_cross_busy_total 1 "$a" || fail "A's leader never tried 9's lock"
  wait_until 10 eval '(($(lock_queue_total $((PORT0 + 1)) 9) == 2))' ||
    fail "A never queued for 9's lock behind B: $(curl -sS "$a/lock/queue?id=9")"
  curl -sS -m 20 -o "$T/a3.body" "$a/stock/reduce?id=3" &
  p3=$!
  curl -sS -m 20 -o "$T/a4.body" "$a/stock/reduce?id=4" &
  p4=$!
  wait "$p3" "$p4"
  expect_eq "B's deduction still under way when A's products 3 and 4 were answered" 1 \
    "$(running "$bpid")"
  expect_eq "A's deduction of 9 still waiting then" 1 "$(running "$p9")"
  expect_eq "A's product 3" deducted "$(jq -r .result "$T/a3.body")"
  expect_eq "A's product 4" deducted "$(jq -r .result "$T/a4.body")"
  expect_eq "orders of product 9 while B holds its lock" 0 \
    "$(sql "SELECT COUNT(*) FROM orders WHERE product_id = 9")"
  wait "$p9"
  wait "$bpid"
  expect_eq "B's deduction of 9" deducted "$(jq -r .result "$T/hold2.body")"
  expect_eq "A's deduction of 9" deducted "$(jq -r .result "$T/a9.body")"
  expect_eq "product 9's orders: B's first, then A's" "stockd-2 stockd-1" \
    "$(sql "SELECT GROUP_CONCAT(instance ORDER BY id SEPARATOR ' ') FROM orders WHERE product_id = 9")"
  expect_eq "stock of 3, 4, 9" "9 9 8" \
    "$(sql "SELECT GROUP_CONCAT(stock ORDER BY id SEPARATOR ' ') FROM product WHERE id IN (3, 4, 9)")"
  # At the bound (one leader), A's leader of 9 tried the lock before waiting for it.
  (($(metric $((PORT0 + 1)) stockd_cross_busy_total) >= 1)) || fail "A never found 9's lock busy"
  ;;
starve)
  # Two hot products keep every counted leader's batch full (40 closed-loop clients on
  # each, --batch-max 4, 2 leaders): a single deduction of a third product, past the
  # cross bound, waits WAITING. It is answered (deducted, not 503 overloaded at its
  # queue deadline) while the hot load still runs: a leader's batch keeps room for
  # products that wait, so their wait does not depend on the hot products' load.
  sql "INSERT INTO product (id, product_name, stock) SELECT seq, 'starve', 1000000 FROM seq_1_to_3
       ON DUPLICATE KEY UPDATE stock = 1000000; DELETE FROM orders"
  t_stockd 1 zk --workers 4 --cross-products 4 --batch-max 4 --think-us 5000 \
    --queue-deadline-ms 10000
  a=http://127.0.0.1:$((PORT0 + 1))
  loads=()
  for id in 1 2; do
    "$STOCKLOAD_BIN" --url "$a/stock/reduce?id=$id" --duration 120 --concurrency 40 --json \
      --no-progress >"$T/load$id.json" &
    loads+=($!)
  done
  # Both hot products are being served, batch after batch.
  wait_until 60 eval "(( \$(sql 'SELECT COUNT(DISTINCT product_id) FROM orders') == 2 &&
    \$(sql 'SELECT COUNT(*) FROM orders') >= 400 ))" || fail "the hot load did not start"
  third=$(reduce $((PORT0 + 1)) 3)
  hot="$(running "${loads[0]}") $(running "${loads[1]}")"
  kill -INT "${loads[@]}"
  wait "${loads[@]}" || true
  expect_eq "the hot load still running when product 3 was answered" "1 1" "$hot"
  expect_eq "product 3's deduction under the hot load" "200 deducted" "$third"
  expect_eq "product 3's orders" 1 "$(orders 3)"
  ;;
aside)
  # A waits for one busy lock while another product's busy lock frees: it must not hold
  # that product up. C holds 8's lock for 6 s, B 9's for 1.5 s. A (2 workers, one
  # counted leader) leads 2 (300 ms of think), and meanwhile 9, then 8, wait WAITING.
  # After 2, A's leader takes over 9, finds it busy, passes it on to 8, finds that busy
  # too, and waits for 8's lock. 9 is handed to A's other worker, which waits for 9's
  # lock: A's 9 is answered once B lets go, while C still holds 8 (not after A's wait
  # for 8, as when nobody led 9 meanwhile).
  sql "INSERT INTO product (id, product_name, stock) SELECT seq, 'aside', 10 FROM seq_1_to_9
       ON DUPLICATE KEY UPDATE stock = 10; DELETE FROM orders"
  t_stockd 1 zk --workers 2 --cross-products 4 --think-us 300000 --lock-cache-ms 0 \
    --lock-timeout-ms 20000
  t_stockd 2 zk --think-us 1500000
  t_stockd 3 zk --think-us 6000000
  holds 3 8
  b_holds_9
  curl -sS -m 30 -o "$T/a2.body" "$a/stock/reduce?id=2" &
  p2=$!
  sleep 0.05 # product 2's batch leads; 9 and 8 wait
  curl -sS -m 30 -o "$T/a9.body" "$a/stock/reduce?id=9" &
  p9=$!
  sleep 0.05
  curl -sS -m 30 -o "$T/a8.body" "$a/stock/reduce?id=8" &
  p8=$!
  wait "$p9"
  c_holds="$(running "${hold_pid[3]}") $(running "$p8")"
  expect_eq "C's deduction of 8 and A's still under way when A's 9 was answered" "1 1" "$c_holds"
  expect_eq "A's deduction of 9" deducted "$(jq -r .result "$T/a9.body")"
  wait "$p2" "$p8" "$bpid" "${hold_pid[3]}"
  for id in 2 8; do expect_eq "A's product $id" deducted "$(jq -r .result "$T/a$id.body")"; done
  expect_eq "product 9's orders: B's first, then A's" "stockd-2 stockd-1" \
    "$(sql "SELECT GROUP_CONCAT(instance ORDER BY id SEPARATOR ' ') FROM orders WHERE product_id = 9")"
  expect_eq "product 8's orders: C's first, then A's" "stockd-3 stockd-1" \
    "$(sql "SELECT GROUP_CONCAT(instance ORDER BY id SEPARATOR ' ') FROM orders WHERE product_id = 8")"
  ;;
*) fail "unknown case $case" ;;
esac
echo PASS
