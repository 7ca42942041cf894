#!/usr/bin/env bash
# The lease locks' failures end to end, against real parts, each checked against the
# stock and the orders:
#
#   lease_faults.sh redis-down
#     stockd in mode redis starts although its Redis is down; a deduction is answered
#     503 "Redis is unavailable" and deducts nothing, /health says 503 with "redis":
#     "down"; the process stays up. Redis comes up: the next deduction goes through and
#     /health says 200 (the connection is made at request time). Redis goes down again:
#     503 again, never a crash. A malformed --redis is refused at start-up (exit 2).
#
#   lease_faults.sh paused redis|db-lock|redlock fenced|unfenced
#     Article 001's warning about lease locks, in the service. Product 2 has one unit.
#     Instance 1 (lease 1 s, 3 s think time between its read and its write) takes the
#     lock, reads stock 1 and is SIGSTOPped. Its lease runs out, instance 2 takes the
#     lock and buys the last unit. Instance 1 is continued after its think time, so it
#     writes at once:
#       fenced:   its write carries the older token and is refused: 503 lock_lost,
#                 stock 0, one order;
#       unfenced: (--fence off on both) nothing stops it: stock -1, two orders, the
#                 last unit sold twice.
#
#     With a fourth argument `renew` (--lease-renew on, on both), the same: the watchdog
#     renews instance 1's lease (at least once, checked before the stop), but a stopped
#     process renews nothing, so the lease runs out all the same and only the fence (or
#     the pre-commit check) refuses the late write.
#
#   lease_faults.sh slow redis|db-lock|redlock renew|norenew
#     Issue 20 item 3, Redisson's watchdog. One instance, lease 1 s, a batch that thinks
#     2.5 s (--lease-check off lets it start), product 2 with 5 units, one deduction:
#       renew:   (--lease-renew on) its lease is renewed at a third of its length while
#                it thinks: 200 deducted, stock 4, one order, and
#                stockd_lease_renewals_total >= 2 (the lock is not lost at the release);
#       norenew: (the default) the lease runs out during the think: 503 lock_lost,
#                nothing deducted, no order, no renewal.
#
#   lease_faults.sh shutdown redis|db-lock
#     Products 1 and 2 are locked from outside for an hour (a SET of the Redis key, an
#     INSERT of the stock_lock row), and stockd (lock timeout 20 s) has deductions of
#     both waiting for those locks. SIGTERM ends the waits: every request is answered 503
#     "shutting down", nothing is deducted, and the process exits 0 within 8 s, not
#     after the 20 s lock timeout (issue 9 #3's rule for zk, here for the lease kinds).
#
#   lease_faults.sh crashed-holder
#     Issue 10 section 6, the kill -9 test for db-lock in the service. Two instances in
#     mode db-lock (2 s lease, one deduction per acquisition). Instance 1 takes product
#     2's stock_lock row and, inside its transaction (30 s think time), is killed with -9.
#     Its row stays until its lease runs out. Instance 2's deduction of product 2, sent
#     right after the kill, succeeds (so within its 10 s lock timeout) and its order is
#     written after the killed row's expires_at by the database's clock (so not before
#     the lease ran out). Stock and orders reconcile: one unit gone, one order, instance
#     2's; the killed holder's transaction was never committed. It prints how long the
#     product was blocked.
#
#   lease_faults.sh release-lost
#     Issue 16 #10. Mode db-lock: while instance 1's batch thinks (2 s) under product 2's
#     row, the row is taken over (deleted and made again by another owner, as a takeover
#     after the lease does). The batch commits (nobody wrote the product, so the fence
#     lets it), and the release finds the row no longer ours. The deduction is 200, and
#     the log says the lock was taken over before the release, after the fenced commit,
#     not that "the lock table is unavailable; nothing was deducted".
# It runs its own Redis (it stops it), never the shared one.
source "$STOCKD_SRC/tests/lib.sh"

t_db

case ${1:-} in
redis-down)
  rport=$((PORT0 + 17))
  port_free "$rport" || fail "port $rport is taken"
  REDIS=127.0.0.1:$rport
  t_stockd 1 redis --redis "$REDIS" --lock-timeout-ms 1000
  s0=$(stock 3) n0=$(orders 3)

  expect_eq "a deduction with Redis down" "503 unavailable" "$(reduce $((PORT0 + 1)) 3)"
  expect_eq "its message" "Redis is unavailable; nothing was deducted" "$(jq -r .message "$T/ans.$((PORT0 + 1))")"
  expect_eq "/health with Redis down" 503 "$(health $((PORT0 + 1)))"
  expect_eq "/health's redis" down "$(jq -r .redis "$T/health")"
  [[ -n $(jq -r '.redis_error // empty' "$T/health") ]] || fail "/health gives no redis_error"
  for i in 1 2 3 4 5; do reduce $((PORT0 + 1)) 3 >/dev/null; done
  alive 1
  expect_eq "nothing deducted while Redis is down" "$s0" "$(stock 3)"

  redis_start "$T" "$rport" own-redis
  expect_eq "/health with Redis up" 200 "$(health $((PORT0 + 1)))"
  expect_eq "/health's redis" up "$(jq -r .redis "$T/health")"
  expect_eq "a deduction with Redis up" "200 deducted" "$(reduce $((PORT0 + 1)) 3)"

  redis_stop "$T" own-redis
  expect_eq "a deduction after Redis went away" "503 unavailable" "$(reduce $((PORT0 + 1)) 3)"
  expect_eq "/health after Redis went away" 503 "$(health $((PORT0 + 1)))"
  alive 1
  expect_eq "orders: the one deduction while Redis was up" $((n0 + 1)) "$(orders 3)"
  expect_eq "stock" $((s0 - 1)) "$(stock 3)"

  # A malformed address is a configuration error: refused at start, with the reason.
  rc=0
  "$(stockd_bin)" --lock redis --redis "no-port" --port $((PORT0 + 2)) >"$T/bad.out" 2>&1 || rc=$?
  expect_eq "exit status for --redis no-port" 2 "$rc"
  grep -q -- "--redis must be HOST:PORT" "$T/bad.out" || fail "unclear message: $(cat "$T/bad.out")"
  echo "ok: $(cat "$T/bad.out")"
  ;;

paused)
  kind=${2:?kind} fencing=${3:?fenced or unfenced} renew=${4:-}
  args=(--lock-timeout-ms 15000 --batch-max 1)
  [[ $renew == renew ]] && args+=(--lease-renew on)
  case $kind in
  redis | redlock) args+=(--redis-lease-ms 1000) ;;
  db-lock) args+=(--db-lock-lease-ms 1000) ;;
  *) fail "unknown kind $kind" ;;
  esac
  [[ $fencing == unfenced ]] && args+=(--fence off)
  sql "UPDATE product SET stock = 1 WHERE id = 2"
  # Instance 1 pauses 3 s under a 1 s lease on purpose: it is the holder that outlives
  # its lease, so the start-up check of the lease against the pause is turned off.
  t_stockd 1 "$kind" "${args[@]}" --think-us 3000000 --lease-check off
  t_stockd 2 "$kind" "${args[@]}"
  reduce $((PORT0 + 1)) 2 >"$T/paused" &
  paused=$!
  wait_until 10 holding 1 || fail "instance 1 never took the lock"
  renewals() { metric_total stockd_lease_renewals_total $((PORT0 + 1)); }
  if [[ $renew == renew ]]; then
    # The watchdog works before the stop: the lease was extended at least once.
    wait_until 5 eval '(($(renewals) >= 1))' || fail "instance 1's lease was never renewed"
    echo "renewals before the stop: $(renewals)"
  fi
  t_hold=$(date +%s.%N)
  kill -STOP "$(cat "$T/stockd/1.pid")"
  expect_eq "instance 2, once the paused holder's lease ran out" "200 deducted" "$(reduce $((PORT0 + 2)) 2)"
  # The stop does not stop the clock: instance 1's think is over 0.3 s after this, so
  # it writes the moment it runs again. A pause, not a wait: how long instance 1 stays
  # stopped is the fault.
  sleep "$(awk -v t0="$t_hold" -v now="$(date +%s.%N)" \
    'BEGIN { d = t0 + 3.3 - now; print (d > 0 ? d : 0) }')"
  kill -CONT "$(cat "$T/stockd/1.pid")"
  wait "$paused"
  [[ $renew == renew ]] && echo "renewals after the continue: $(renewals)"
  # Refused by the UPDATE's fence (it writes the moment it runs again) or, if its
  # worker read the clock first, by the pre-commit lease check: one of the two.
  late_write "$fencing" "$T/paused" $((PORT0 + 1)) 2
  ;;
slow)
  kind=${2:?kind} renew=${3:?renew or norenew}
  args=(--lock-timeout-ms 15000 --batch-max 1 --think-us 2500000 --lease-check off)
  case $kind in
  redis | redlock) args+=(--redis-lease-ms 1000) ;;
  db-lock) args+=(--db-lock-lease-ms 1000) ;;
  *) fail "unknown kind $kind" ;;
  esac
  [[ $renew == renew ]] && args+=(--lease-renew on)
  sql "UPDATE product SET stock = 5 WHERE id = 2"
  n0=$(orders 2)
  t_stockd 1 "$kind" "${args[@]}"
  t0=$(date +%s.%N)
  got=$(reduce $((PORT0 + 1)) 2)
  echo "the slow holder's answer after $(awk -v t0="$t0" -v t1="$(date +%s.%N)" \
    'BEGIN { printf "%.2f", t1 - t0 }') s: $got"
  renewed=$(metric_total stockd_lease_renewals_total $((PORT0 + 1)))
  lost=$(metric_sum stockd_lock_lost_total $((PORT0 + 1)))
  echo "renewals: $renewed, releases that found the lease gone: $lost"
  if [[ $renew == renew ]]; then
    expect_eq "the slow holder, renewed" "200 deducted" "$got"
    expect_eq "stock" 4 "$(stock 2)"
    expect_eq "orders" $((n0 + 1)) "$(orders 2)"
    ((${renewed:-0} >= 2)) || fail "the lease was renewed ${renewed:-0} times in a 2.5 s batch, want >= 2"
    expect_eq "releases that found the lease gone" 0 "$lost"
  else
    expect_eq "the slow holder, not renewed" "503 lock_lost" "$got"
    expect_eq "stock: nothing deducted" 5 "$(stock 2)"
    expect_eq "orders" "$n0" "$(orders 2)"
    expect_eq "renewals" 0 "$renewed"
  fi
  ;;
shutdown)
  kind=${2:?kind}
  sql "UPDATE product SET stock = 100 WHERE id IN (1, 2)"
  s0=$(sql "SELECT SUM(stock) FROM product WHERE id IN (1, 2)")
  args=(--lock-timeout-ms 20000 --queue-deadline-ms 0)
  case $kind in
  redis)
    # Its own Redis, so the foreign keys never reach the shared one.
    rport=$((PORT0 + 17))
    redis_start "$T" "$rport" own-redis
    args+=(--redis "127.0.0.1:$rport")
    # The key format of lock/redislock.c: <prefix><name>, prefix "lock:".
    for id in 1 2; do
      expect_eq "product $id locked from outside" OK \
        "$(redis-cli -h 127.0.0.1 -p "$rport" SET "lock:product_$id" 1 PX 3600000 NX)"
    done
    ;;
  db-lock)
    # The row format of lock/dblock.c: name, owner, expires_at (UTC).
    sql "INSERT INTO stock_lock (name, owner, expires_at) VALUES
         ('product_1', 'outsider', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR),
         ('product_2', 'outsider', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)"
    ;;
  *) fail "unknown kind $kind" ;;
  esac
  t_stockd 1 "$kind" "${args[@]}"
  URL=http://127.0.0.1:$((PORT0 + 1))
  n=8
  for i in $(seq 1 $n); do
    curl -sS -m 60 -o "$T/q$i.body" -w '%{http_code}' "$URL/stock/reduce?id=$((1 + i % 2))" \
      >"$T/q$i.code" 2>"$T/q$i.err" &
  done
  in_combiner() { (($(metric_sum stockd_combiner_deductions_total $((PORT0 + 1))) >= n)); }
  wait_until 20 in_combiner || fail "the deductions never reached the combiner"
  pid=$(cat "$T/stockd/1.pid")
  t_term=$(date +%s.%N)
  kill -TERM "$pid"
  # The lock timeout is 20 s: an exit within 8 s means the waits were cancelled. A bound
  # on a shutdown, not a measurement of speed.
  wait_until 8 eval "! kill -0 $pid" || fail "stockd still runs 8 s after SIGTERM"
  wait "$pid" && rc=0 || rc=$?
  expect_eq "exit status" 0 "$rc"
  echo "exited $(awk -v t0="$t_term" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.2f", t1 - t0 }') s" \
    "after SIGTERM (polled every 0.1 s), with $n deductions waiting for a held lock"
  for i in $(seq 1 $n); do
    wait_until 10 test -s "$T/q$i.code" || fail "q$i: no answer"
    got="$(cat "$T/q$i.code") $(jq -r .result "$T/q$i.body")"
    expect_eq "q$i's answer" "503 unavailable" "$got"
    expect_eq "q$i's message" "the service is shutting down; nothing was deducted" \
      "$(jq -r .message "$T/q$i.body")"
  done
  expect_eq "orders" 0 "$(sql "SELECT COUNT(*) FROM orders WHERE product_id IN (1, 2)")"
  expect_eq "stock" "$s0" "$(sql "SELECT SUM(stock) FROM product WHERE id IN (1, 2)")"
  ;;
crashed-holder)
  lease_ms=2000 timeout_ms=10000
  sql "UPDATE product SET stock = 10 WHERE id = 2"
  args=(--db-lock-lease-ms $lease_ms --lock-timeout-ms $timeout_ms --batch-max 1)
  # Killed inside a 30 s pause under a 2 s lease, on purpose (no lease check).
  t_stockd 1 db-lock "${args[@]}" --think-us 30000000 --lease-check off
  t_stockd 2 db-lock "${args[@]}"
  # The victim's request loses its answer with the process.
  curl -sS -m 60 -o /dev/null "http://127.0.0.1:$((PORT0 + 1))/stock/reduce?id=2" 2>/dev/null &
  victim_curl=$!
  # Held: instance 1's row is in stock_lock, and its stock transaction is open (it has
  # read the stock and thinks). Both read from the database, not guessed from a clock.
  row() { sql "SELECT expires_at FROM stock_lock WHERE name = 'product_2' AND owner LIKE 'stockd-1:%'"; }
  in_trx() {
    (($(sql "SELECT COUNT(*) FROM information_schema.innodb_trx t
             JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
             WHERE p.db = '$DB'") >= 1))
  }
  wait_until 20 eval '[[ -n $(row) ]]' || fail "instance 1 never took product 2's row"
  wait_until 20 in_trx || fail "instance 1 never opened its stock transaction"
  thread=$(sql "SELECT t.trx_mysql_thread_id FROM information_schema.innodb_trx t
                 JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
                 WHERE p.db = '$DB'")
  [[ $thread =~ ^[0-9]+$ ]] || fail "expected one open transaction (instance 1's), got '$thread'"
  expires=$(row)
  echo "instance 1 holds product 2's row until $expires (UTC, the database's clock)"
  kill -KILL "$(cat "$T/stockd/1.pid")"
  t_kill=$(date +%s.%N)
  wait "$victim_curl" 2>/dev/null || true
  trx_gone() { [[ $(sql "SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = $thread") == 0 ]]; }
  wait_until 20 trx_gone || fail "the killed holder's transaction (MySQL thread $thread) stayed open"
  echo "ok: the killed holder's transaction (MySQL thread $thread) was rolled back"
  expect_eq "instance 2's deduction after the kill" "200 deducted" "$(reduce $((PORT0 + 2)) 2)"
  t_ok=$(date +%s.%N)
  # The order's time against the killed row's expiry, both by the database's clock (in
  # UTC): the takeover only deletes a row whose lease has passed.
  after_us=$(sql "SET time_zone = '+00:00';
    SELECT TIMESTAMPDIFF(MICROSECOND, '$expires', created_at) FROM orders WHERE product_id = 2")
  ((after_us > 0)) || fail "instance 2's order is ${after_us} us before the killed row's lease ended"
  echo "ok: instance 2's order was written $((after_us / 1000)) ms after the killed row's lease ended"
  blocked=$(awk -v a="$t_kill" -v b="$t_ok" 'BEGIN { printf "%.0f", (b - a) * 1000 }')
  echo "product 2 blocked: $((lease_ms + after_us / 1000)) ms from the holder's acquisition to" \
    "the next order (database clock; lease $lease_ms ms); $blocked ms from the kill -9 to" \
    "instance 2's answer"
  ((blocked < lease_ms + timeout_ms)) || fail "blocked $blocked ms, beyond the lease and the lock timeout"
  expect_eq "stock: one unit, instance 2's" 9 "$(stock 2)"
  expect_eq "orders" 1 "$(orders 2)"
  expect_eq "the order's instance" stockd-2 "$(sql "SELECT instance FROM orders WHERE product_id = 2")"
  ;;
release-lost)
  sql "UPDATE product SET stock = 10 WHERE id = 2"
  t_stockd 1 db-lock --think-us 2000000 --batch-max 1
  reduce $((PORT0 + 1)) 2 >"$T/r.out" &
  request=$!
  row() { sql "SELECT owner FROM stock_lock WHERE name = 'product_2'"; }
  wait_until 20 eval '[[ $(row) == stockd-1:* ]]' || fail "instance 1 never took product 2's row"
  sql "DELETE FROM stock_lock WHERE name = 'product_2';
       INSERT INTO stock_lock (name, owner, expires_at)
       VALUES ('product_2', 'another', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)"
  wait "$request"
  expect_eq "the deduction whose release found the row taken over" "200 deducted" "$(cat "$T/r.out")"
  expect_eq "stock" 9 "$(stock 2)"
  expect_eq "orders" 1 "$(orders 2)"
  log=$T/stockd/1.log
  grep 'lock release' "$log" || fail "no log line about the release: $(tail -n 20 "$log")"
  if grep 'lock release' "$log" | grep -q 'unavailable; nothing was deducted'; then
    fail "the release is logged as an outage that deducted nothing"
  fi
  grep 'lock release' "$log" | grep -q 'taken over' ||
    fail "the release's log line does not say the lock was taken over"
  ;;
*) fail "usage: lease_faults.sh redis-down | paused redis|db-lock fenced|unfenced [renew] | slow redis|db-lock renew|norenew | shutdown redis|db-lock | crashed-holder | release-lost" ;;
esac
echo PASS
