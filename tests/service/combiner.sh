#!/usr/bin/env bash
# The combiner end to end (zk mode, real MariaDB, its own ZooKeeper):
#   combiner.sh fifo       stock k, more than k deductions queued behind a busy holder:
#                          the next batch gives the units to the first k to arrive, in
#                          one lock round, and the rest are sold out; 4 statements per
#                          batch, and 2 (no lock) for a request after the sell-out;
#   combiner.sh same-key   one Idempotency-Key twice in one batch deducts once, and both
#                          requests get that order (the second as a replay);
#   combiner.sh lock-lost  ZooKeeper goes away while a batch thinks: the whole batch is
#                          rolled back and every request of it answered 503 lock_lost;
#   combiner.sh hol        no head-of-line blocking: while product A is saturated (every
#                          deduction of it holds the lock for 0.3 s), a request for
#                          product B and /health are answered before A's queue has
#                          moved, because A ties up one worker of the instance, not all;
#   combiner.sh deadline   deductions that waited behind a holder (another instance) past
#                          --queue-deadline-ms are answered 503 overloaded and deduct
#                          nothing (their client or nginx has likely given up);
#   combiner.sh deadline-commit  the deadline is checked again right before COMMIT
#                          (issue 16 #4): a deduction taken at once whose batch thinks
#                          past --queue-deadline-ms is answered 503 overloaded and
#                          deducts nothing; one whose batch ends within it deducts;
#   combiner.sh shutdown   ZooKeeper down, deductions waiting for the lock with a 60 s
#                          lock timeout: SIGTERM answers every one 503 and exits 0 at
#                          once, instead of waiting out the lock timeout.
# The think time makes a batch last long enough for the next requests to queue behind
# it; every ordering is forced by waiting on /metrics or on the requests themselves, not
# by a clock.
source "$STOCKD_SRC/tests/lib.sh"
# f_gap_lock_start, f_gap_lock_stop: a batch held at its INSERT (fifo).
source "$STOCKD_SRC/tests/faults/faultlib.sh"
case=$1

zk_port=$((PORT0 + 16))
zk_start "$T" "$zk_port" zk
ZK=127.0.0.1:$zk_port
URL=http://127.0.0.1:$((PORT0 + 1))
t_db
start() { stockd_start "$T" 1 $((PORT0 + 1)) zk "$MYSQL_URL" "$ZK" "$@"; }
# ask NAME ID [KEY]: one deduction in the background; its answer goes to $T/NAME.
ask() {
  local hdr=()
  [[ -n ${3:-} ]] && hdr=(-H "Idempotency-Key: $3")
  curl -sS -m 30 "${hdr[@]}" -o "$T/$1.body" -w '%{http_code}' \
    "$URL/stock/reduce?id=$2" >"$T/$1.code" 2>"$T/$1.err" &
}
# answer NAME: the request's "CODE RESULT" once curl has finished (it writes the code
# last, 000 if it failed). Polled, not waited for: $(answer ...) is a subshell, and a
# subshell cannot wait for its parent's children.
answer() {
  wait_until 40 test -s "$T/$1.code" || fail "$1: no answer within 40 s"
  echo "$(cat "$T/$1.code") $(jq -r '.result' "$T/$1.body" 2>/dev/null)"
}
field() { jq -r "$2" "$T/$1.body"; }
# rounds N: at least N lock rounds have started (acquisitions).
rounds() { ((${1} <= $(metric_sum stockd_lock_acquisitions_total "$URL"))); }
# in_combiner N: at least N deductions have been handed to the combiner (each then waits
# in its product's slot, or leads it).
in_combiner() { ((${1} <= $(metric_sum stockd_combiner_deductions_total "$URL"))); }

case $case in
fifo)
  sql "UPDATE product SET stock = 3 WHERE id = 1"
  start --think-us 1500000
  # f0's batch is held at its INSERT (faultlib's gap lock on the end of the orders
  # table) until five more have arrived behind it, one after the other, however long
  # that takes on a busy machine.
  f_gap_lock_start
  ask f0 1 fifo-0
  wait_until 10 rounds 1 || fail "the first deduction never took the lock"
  for i in 1 2 3 4 5; do
    ask "f$i" 1 "fifo-$i"
    wait_until 10 in_combiner $((i + 1)) || fail "f$i never reached the combiner"
  done
  f_gap_lock_stop
  expect_eq "f0" "200 deducted" "$(answer f0)"
  for i in 1 2; do expect_eq "f$i (among the first two to arrive)" "200 deducted" "$(answer "f$i")"; done
  for i in 3 4 5; do expect_eq "f$i (arrived after the units ran out)" "409 sold_out" "$(answer "f$i")"; done
  (($(field f1 .order_id) < $(field f2 .order_id))) || fail "f1's order is not before f2's"
  expect_eq "stock" 0 "$(stock 1)"
  expect_eq "orders" 3 "$(orders 1)"
  expect_eq "lock rounds" 2 "$(metric_sum stockd_batch_size_count "$URL")"
  expect_eq "deductions over those rounds (1 + 5)" 6 "$(metric_sum stockd_batch_size_sum "$URL")"
  # Round trips: 4 statements per batch (SELECT, UPDATE, INSERT, COMMIT), no pre-check
  # read while the product was in stock. Now that a batch saw it sold out, the next
  # request costs one read (and the ROLLBACK that ends its transaction) and no lock round.
  expect_eq "MySQL statements for the two batches" 8 "$(metric_sum stockd_mysql_statements_total "$URL")"
  ask f6 1 fifo-6
  expect_eq "f6 (after the sell-out)" "409 sold_out" "$(answer f6)"
  expect_eq "MySQL statements after one more sold-out request" 10 \
    "$(metric_sum stockd_mysql_statements_total "$URL")"
  expect_eq "answered by the pre-check" 1 "$(metric_sum stockd_precheck_sold_out_total "$URL")"
  expect_eq "lock rounds after it" 2 "$(metric_sum stockd_batch_size_count "$URL")"
  ;;
same-key)
  sql "UPDATE product SET stock = 10 WHERE id = 1"
  start --think-us 1500000
  ask s0 1 same-0
  wait_until 10 rounds 1 || fail "the first deduction never took the lock"
  ask t1 1 twin
  wait_until 10 in_combiner 2 || fail "the first twin never reached the combiner"
  ask t2 1 twin
  wait_until 10 in_combiner 3 || fail "the second twin never reached the combiner"
  expect_eq "s0" "200 deducted" "$(answer s0)"
  expect_eq "twin 1" "200 deducted" "$(answer t1)"
  expect_eq "twin 2" "200 deducted" "$(answer t2)"
  expect_eq "both twins name one order" "$(field t1 .order_id)" "$(field t2 .order_id)"
  expect_eq "one of them is the replay" "false true" \
    "$(printf '%s\n' "$(field t1 '.replayed // false')" "$(field t2 '.replayed // false')" | sort | xargs)"
  expect_eq "orders with the key" 1 "$(sql "SELECT COUNT(*) FROM orders WHERE request_id = 'twin'")"
  expect_eq "stock (two deductions)" 8 "$(stock 1)"
  expect_eq "the twins were one batch" 2 "$(metric_sum stockd_batch_size_count "$URL")"
  ;;
lock-lost)
  sql "UPDATE product SET stock = 10 WHERE id = 1"
  start --think-us 3000000 --lock-timeout-ms 2000
  ask l0 1 lost-0
  wait_until 10 rounds 1 || fail "the first deduction never took the lock"
  for i in 1 2 3 4; do
    ask "l$i" 1 "lost-$i"
    wait_until 10 in_combiner $((i + 1)) || fail "l$i never reached the combiner"
  done
  # The second round is the batch of four; ZooKeeper goes while it thinks.
  wait_until 10 rounds 2 || fail "the batch of four never took the lock"
  zk_stop "$T" zk
  expect_eq "l0 (the first round, committed)" "200 deducted" "$(answer l0)"
  for i in 1 2 3 4; do expect_eq "l$i (the lost batch)" "503 lock_lost" "$(answer "l$i")"; done
  expect_eq "stock: only the first round" 9 "$(stock 1)"
  expect_eq "orders: only the first round" 1 "$(orders 1)"
  expect_eq "no order of the lost batch" 0 \
    "$(sql "SELECT COUNT(*) FROM orders WHERE request_id IN ('lost-1','lost-2','lost-3','lost-4')")"
  ;;
hol)
  sql "UPDATE product SET stock = 1000 WHERE id IN (1, 2)"
  # One deduction per lock round, each holding it 0.3 s: product 1's queue drains at
  # about 3 a second, and 4 workers would all be stuck behind it without the combiner.
  start --think-us 300000 --batch-max 1 --workers 4
  for i in $(seq 1 24); do ask "a$i" 1; done
  wait_until 10 rounds 1 || fail "product 1 never took the lock"
  before=$(orders 1)
  ask b 2
  expect_eq "product 2 while product 1 is saturated" "200 deducted" "$(answer b)"
  health=$(curl -sS -m 30 -o /dev/null -w '%{http_code}' "$URL/health")
  after=$(orders 1)
  expect_eq "/health while product 1 is saturated" 200 "$health"
  echo "product 1 orders: $before when product 2 was asked, $after when it and /health answered"
  # Behind the queue they would wait for about 20 of product 1's deductions (4 workers,
  # 24 requests); served at once, at most a round or two of product 1 passes meanwhile.
  ((after - before <= 3)) ||
    fail "product 2 and /health waited for $((after - before)) deductions of product 1"
  for i in $(seq 1 24); do expect_eq "a$i" "200 deducted" "$(answer "a$i")"; done
  expect_eq "product 1 stock" 976 "$(stock 1)"
  ;;
deadline)
  sql "UPDATE product SET stock = 10 WHERE id = 1"
  # Instance 2 (no deadline) holds product 1's lock for 2 s serving d0; instance 1's
  # deductions (deadline 500 ms, no think time) queue for the lock behind it. (The lock
  # is held by another instance because a batch of instance 1's own that thought past
  # its deadline would now be refused before COMMIT: combiner.sh deadline-commit.)
  start --queue-deadline-ms 500
  stockd_start "$T" 2 $((PORT0 + 2)) zk "$MYSQL_URL" "$ZK" --think-us 2000000 --queue-deadline-ms 0
  URL=http://127.0.0.1:$((PORT0 + 2))
  ask d0 1 dl-0
  wait_until 10 rounds 1 || fail "the first deduction never took the lock"
  URL=http://127.0.0.1:$((PORT0 + 1))
  for i in 1 2 3; do
    ask "d$i" 1 "dl-$i"
    wait_until 10 in_combiner "$i" || fail "d$i never reached the combiner"
  done
  expect_eq "d0 (took the lock at once, on instance 2)" "200 deducted" "$(answer d0)"
  for i in 1 2 3; do expect_eq "d$i (waited 1.5 s or more for the lock)" "503 overloaded" "$(answer "d$i")"; done
  expect_eq "stock: only d0" 9 "$(stock 1)"
  expect_eq "no order of the expired ones" 0 \
    "$(sql "SELECT COUNT(*) FROM orders WHERE request_id IN ('dl-1','dl-2','dl-3')")"
  ;;
deadline-commit)
  sql "UPDATE product SET stock = 10 WHERE id = 1"
  # Both instances have a 1 s deadline; instance 1's batch thinks 1.5 s, so its COMMIT
  # would land past it, instance 2's 0.2 s. Nothing waits in a queue: each request is
  # taken at once, so only the check before COMMIT can catch the late one.
  start --think-us 1500000 --queue-deadline-ms 1000
  stockd_start "$T" 2 $((PORT0 + 2)) zk "$MYSQL_URL" "$ZK" --think-us 200000 --queue-deadline-ms 1000
  ask late 1 dlc-late
  expect_eq "a batch that thinks past the deadline" "503 overloaded" "$(answer late)"
  echo "its message: $(field late .message)"
  expect_eq "stock after it" 10 "$(stock 1)"
  expect_eq "orders after it" 0 "$(orders 1)"
  URL=http://127.0.0.1:$((PORT0 + 2))
  ask ok 1 dlc-ok
  expect_eq "a batch that ends within the deadline" "200 deducted" "$(answer ok)"
  expect_eq "stock after both" 9 "$(stock 1)"
  expect_eq "orders after both" 1 "$(orders 1)"
  expect_eq "the order is the one within the deadline" dlc-ok \
    "$(sql "SELECT request_id FROM orders WHERE product_id = 1")"
  ;;
shutdown)
  sql "UPDATE product SET stock = 100 WHERE id IN (1, 2)"
  start --lock-timeout-ms 60000 --queue-deadline-ms 0
  zk_stop "$T" zk
  for i in $(seq 1 20); do ask "q$i" $((1 + i % 2)); done
  wait_until 20 in_combiner 20 || fail "the deductions never reached the combiner"
  pid=$(cat "$T/stockd/1.pid")
  kill -TERM "$pid"
  # The lock timeout is 60 s: an exit well before it means the waits were cancelled.
  # (Not a timing assertion on speed: waiting the timeout out would take over 60 s.)
  wait_until 30 eval "! kill -0 $pid" || fail "stockd still runs 30 s after SIGTERM"
  wait "$pid" && rc=0 || rc=$?
  expect_eq "exit status" 0 "$rc"
  for i in $(seq 1 20); do
    got=$(answer "q$i")
    [[ $got == "503 "* ]] || fail "q$i: expected a 503, got '$got'"
  done
  echo "ok: 20 waiting deductions answered 503 ($(answer q1), ...)"
  expect_eq "no deduction" 0 "$(sql "SELECT COUNT(*) FROM orders WHERE product_id IN (1, 2)")"
  ;;
*) fail "unknown case $case" ;;
esac
echo PASS
