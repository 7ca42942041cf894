#!/usr/bin/env bash
# Clients that hang up in the middle of their deduction, during load (three stockd, zk
# lock): the answer is destroyed after the request reached the service, which is the
# case an Idempotency-Key exists for.
#   - a root transaction holds the gap lock the next INSERT into orders needs, so the
#     lock holder freezes between its UPDATE and its COMMIT and every other deduction
#     queues for the ZooKeeper lock;
#   - five keyed requests are sent through nginx and their clients hang up 1 s later;
#     then the gap lock goes and the queue moves on: stockd cannot tell its client is
#     gone, so each of those deductions commits with nobody to answer;
#   - retrying each key returns its order, the same order id, "replayed":true
#     (check-invariant does the retries: every answerless order must be resolved);
#   - the invariant holds in its lossy form, and a drain ends the stock at exactly 0.
# Bound: every request (but the five cut on purpose) gets an answer within 20 s.
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/faults/faultlib.sh"

t_db
f_cluster "$STOCKD_TEST_ZK" 3

f_load_start load
f_load_under_way
f_freeze_holder
echo "a holder is frozen before its commit at stock $(stock "$F_PRODUCT")"
cuts=()
for n in 1 2 3 4 5; do
  f_keyed_cut "cut-$n" "$F_NGINX" 1 &
  cuts+=($!)
done
for p in "${cuts[@]}"; do wait "$p" || fail "a cut request was answered before its client hung up"; done
f_gap_lock_stop
echo "the clients of cut-1..5 hung up; gap lock released"
f_load_wait load
committed=$(sql "SELECT COUNT(*) FROM orders WHERE request_id LIKE 'cut-%'")
echo "orders committed for the cut requests: $committed of 5"
# stockd finishes a queued deduction whose client left (it learns only when it answers),
# and the stock lasts past the stall (the think time caps the rate at 100 a second).
expect_eq "deductions committed after their client hung up" 5 "$committed"
f_drain
f_check --lossy
expect_eq "answerless orders resolved by retrying their key" 5 \
  "$(sed -n 's/.* resolved=\([0-9]*\).*/\1/p' "$T/invariant")"
f_expect_sold_out
echo PASS
