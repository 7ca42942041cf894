#!/usr/bin/env bash
# MariaDB killed (kill -9) and started again 1 s later during load (three stockd, zk
# lock):
#   - while it is down, /health is 503 and a deduction answers 503 unavailable;
#   - no partial deduction: crash recovery rolls back each transaction the crash cut,
#     among them one frozen on purpose after its UPDATE of the stock (orders = initial
#     - final), and no answered deduction is lost (each "deducted" answer's order
#     survives: the defaults flush the log at every commit);
#   - after it is back every instance is healthy again and deducts; a drain sells the
#     rest, so the stock ends at exactly 0;
#   - the invariant holds in its lossy form: a COMMIT whose reply the crash cut may
#     be answered 500 unknown, so deducted <= orders <= deducted + lost, and every such
#     lost answer is retried with its key from stockload's keys file: an order that
#     committed comes back replayed with the same id, one that did not deducts anew
#     or finds the product sold out. (Often the crash cuts no COMMIT: every answer is
#     then 503 unavailable or a deduction, and nothing is lost.)
# (The name says restart: a clean shutdown is the milder case of the same.)
# Bound: every request gets an answer within 20 s.
# It runs its own MariaDB under $T (it stops it), never the shared one.
source "$STOCKD_SRC/tests/lib.sh"
myport=$((PORT0 + 15))
mysql_start "$T" "$myport"
MYSQL_RUN=$T
MYSQL_URL="mysql://$DB_USER@127.0.0.1:$myport/$DB"
mysql_create_db "$T" "$DB" "$DB_USER" "$DB_PASS"
source "$STOCKD_SRC/tests/faults/faultlib.sh"

f_cluster "$STOCKD_TEST_ZK" 3 --zk-session-ms 2000

f_load_start load
f_load_under_way
# Freeze the lock holder between its UPDATE and its COMMIT (faultlib.sh), so the crash
# surely cuts a transaction that has changed the stock.
f_freeze_holder
echo "a holder is frozen before its commit at stock $(stock "$F_PRODUCT")"
mpid=$(cat "$T/mysql/pid")
# A crash, not a shutdown: the transactions under way are cut wherever they are, and
# InnoDB's recovery must roll each one back whole and keep every commit it answered.
f_kill9 "$mpid"
echo "MariaDB killed (kill -9)"
f_gap_lock_stop # its client only: the crash took the session
expect_eq "/health of stockd-1 while MariaDB is down" 503 "$(f_health 1)"
read -r _ code result _ < <(f_keyed while-mysql-down "http://127.0.0.1:$((PORT0 + 2))")
expect_eq "a deduction while MariaDB is down" "503 unavailable" "$code $result"
# A pause, not a wait: MariaDB stays down for a second of the load (the outage is
# what the test is about).
sleep 1
mysql_start "$T" "$myport"
echo "MariaDB started again at stock $(stock "$F_PRODUCT")"
f_wait_healthy 1 2 3
f_load_wait load
f_drain
f_check --lossy
echo "lost answers: $(f_invariant lost), retried with their key: $(f_invariant retried)" \
  "($(f_invariant retried_replayed) had committed)"
f_expect_sold_out
echo PASS
