#!/usr/bin/env bash
# kill -9 of one stockd of three (zk lock, 2 s ZooKeeper sessions) in the middle of a
# deduction, during load:
#   - the victim is the lock holder, frozen between its UPDATE of the stock and its
#     COMMIT (a root transaction holds the gap lock its INSERT into orders needs), so
#     the kill leaves a partial deduction open: MariaDB must roll it back;
#   - its lock node goes with its ZooKeeper session, and the other instances go on;
#   - a keyed request in flight at the victim loses its answer; retrying its key
#     deducts anew or finds the product sold out (it never committed);
#   - the victim is restarted; a drain sells the rest, so the stock ends at exactly 0;
#   - the invariant holds in its lossy form (the kill destroys answers): orders =
#     initial - final, deducted <= orders <= deducted + lost, every answerless order
#     resolved by a retry of its key;
#   - every lost answer, the load's (nginx's 502 for the requests in flight at the
#     victim) as well as ours, is retried with its key from the keys files: an order
#     that committed comes back replayed, a request that did not deducts anew or finds
#     the product sold out.
# Bound: every request gets an answer (or a transport error) within 20 s.
# It uses the shared MariaDB and ZooKeeper (it restarts neither).
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/faults/faultlib.sh"
zkport=${STOCKD_TEST_ZK##*:}

t_db
f_cluster "$STOCKD_TEST_ZK" 3 --zk-session-ms 2000

f_load_start load
f_load_under_way
f_freeze_holder
read -r thread modified < <(f_stalled_trx)
victim=$(f_instance_of_conn "$thread") || fail "cannot tell which instance owns connection $thread"
vpid=$(cat "$T/stockd/$victim.pid")
sid=$(f_zk_sid "$vpid" "$zkport") || fail "cannot find stockd-$victim's ZooKeeper session"
nodes=$(f_zk_ephemerals "$zkport" "$sid")
echo "victim: stockd-$victim (pid $vpid), MySQL connection $thread with $modified rows modified" \
  "and not committed, ZooKeeper session $sid owning:"
echo "${nodes:-  (none)}"
[[ $nodes == *product_$F_PRODUCT/* ]] || fail "the frozen holder owns no lock node of product $F_PRODUCT"
stock_at_kill=$(stock "$F_PRODUCT")
last_order=$(sql "SELECT COALESCE(MAX(id), 0) FROM orders")

# A request of our own to the victim, so that one lost answer has a known key.
f_keyed lost-at-victim "http://127.0.0.1:$((PORT0 + victim))" >/dev/null &
keyed=$!
wait_until 10 eval '(($(tcp_conns "dport = :$((PORT0 + victim))" curl) >= 1))' ||
  fail "our request never reached stockd-$victim"
f_kill9 "$vpid"
echo "killed stockd-$victim at stock $stock_at_kill"
f_gap_lock_stop
wait_until 30 eval "! f_trx_open $thread" || fail "the killed instance's transaction stayed open"
echo "ok: its open transaction is gone"
wait_until 30 eval "[[ -z \$(f_zk_ephemerals $zkport $sid) ]]" ||
  fail "the killed instance's lock nodes outlived its session"
echo "ok: its session's lock nodes are gone"
wait "$keyed" || true
f_stockd "$victim" "$STOCKD_TEST_ZK" --zk-session-ms 2000
f_load_wait load

# The others went on: orders after the kill by instances other than the victim (only
# if stock was left to sell, which the think time makes sure of).
if ((stock_at_kill > 0)); then
  n=$(sql "SELECT COUNT(*) FROM orders WHERE id > $last_order AND instance <> 'stockd-$victim'")
  ((n > 0)) || fail "no other instance deducted after the kill"
  echo "ok: $n deductions by the other instances after the kill"
fi
grep -q '^lost-at-victim 000 ' "$F_KEYS" || fail "the request at the victim got an answer: $(cat "$F_KEYS")"
f_drain
f_check --lossy
(($(f_invariant retried) > 0)) || fail "no lost answer was retried, not even lost-at-victim's"
echo "ok: $(f_invariant retried) lost answers retried with their key," \
  "$(f_invariant retried_replayed) of them had committed"
f_expect_sold_out
echo PASS
