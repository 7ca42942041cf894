#!/usr/bin/env bash
# Mode redis-stock across a Sentinel failover (loadtest/redis-failover, one variant, the
# deterministic sequence its help describes: 20 units, 10 sold and replicated, the
# replication link cut, 3 deductions written by the writer from the primary only, 3 more
# while the writer is paused, the primary killed, the replica promoted, sold out there):
#
#   redis_failover.sh none          no mitigation: the 3 unwritten deductions answered
#                                   "deducted" are lost (no order), and the 3 written ones
#                                   are sold again by the promoted replica: 3 oversold
#                                   promises; the drift before it was 3.
#   redis_failover.sh wait          --redis-wait-replicas 1: the 6 deductions after the cut
#                                   are answered 503 not_replicated, so none answered
#                                   "deducted" is lost; but the 3 the writer had written
#                                   from the primary are still sold again: 3 oversold
#                                   promises (WAIT tells the buyer, it does not take the
#                                   deduction back), and 3 orders of 503 answers.
#   redis_failover.sh wait-writer   that, and the writer's --wait-replicas 1: it does not
#                                   write what the replica lacks, so nothing is sold
#                                   again: none lost, none oversold, no drift.
#   redis_failover.sh min-replicas  min-replicas-to-write 1 (max lag 3 s) on the primary:
#                                   without its replica it refuses the 6 deductions (503),
#                                   nothing is lost, nothing oversold, no drift.
source "$STOCKD_SRC/tests/lib.sh"
variant=${1:?none, wait, wait-writer or min-replicas}
need_stockd_bin
t_db
/usr/bin/python3 "$STOCKD_SRC/loadtest/redis-failover" --run "$STOCKD_TEST_RUN" --db "$DB" \
  --mysql "$MYSQL_URL" --port-base $((PORT0 + 10)) --build "$STOCKD_BUILD" --variant "$variant" \
  --bench-requests 0 --stock 20 --after-cut 3 | tee "$T/out" || fail "the run failed"
res=$(grep '^FAILOVER ' "$T/out") || fail "no FAILOVER line"
get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$res"; }
case $variant in
none)
  expect_eq "deductions answered deducted with no order (lost)" 3 "$(get lost)"
  expect_eq "oversold promises" 3 "$(get oversold)"
  expect_eq "drift (Redis count - MariaDB stock) after the failover" 3 "$(get drift)"
  ;;
wait)
  expect_eq "lost" 0 "$(get lost)"
  expect_eq "refused (503 not_replicated)" 6 "$(get refused)"
  expect_eq "oversold promises (WAIT does not undo what the writer wrote)" 3 "$(get oversold)"
  expect_eq "orders or promises of 503 answers" 3 "$(get phantom)"
  ;;
wait-writer)
  expect_eq "lost" 0 "$(get lost)"
  expect_eq "refused (503 not_replicated)" 6 "$(get refused)"
  expect_eq "oversold promises" 0 "$(get oversold)"
  expect_eq "drift" 0 "$(get drift)"
  expect_eq "orders or promises of 503 answers" 0 "$(get phantom)"
  ;;
min-replicas)
  expect_eq "lost" 0 "$(get lost)"
  expect_eq "refused" 6 "$(get refused)"
  expect_eq "oversold promises" 0 "$(get oversold)"
  expect_eq "drift" 0 "$(get drift)"
  expect_eq "phantom" 0 "$(get phantom)"
  ;;
esac
expect_eq "MariaDB's stock" 0 "$(get final)"
echo PASS
