#!/usr/bin/env bash
# lock_bench_smoke: zklock-bench runs briefly for both kinds against the shared
# ZooKeeper; only that there was no overlap and some acquisitions is asserted
# (timing belongs to benchmarks, not tests).
# Usage: lock_bench_smoke.sh PATH_TO_zklock-bench
source "$STOCKD_SRC/tests/lib.sh"
bench=$1
for kind in fair herd; do
  out=$("$bench" --zk "$STOCKD_TEST_ZK" --kind "$kind" --procs 2 --threads 2 --seconds 2 --json)
  echo "$out"
  overlaps=$(sed -n 's/.*"overlaps": \([0-9]*\).*/\1/p' <<<"$out")
  acq=$(sed -n 's/.*"acquisitions": \([0-9]*\).*/\1/p' <<<"$out")
  expect_eq "$kind overlaps" 0 "$overlaps"
  ((acq > 0)) || fail "$kind: no acquisitions"
  echo "ok: $kind acquisitions = $acq"
done
