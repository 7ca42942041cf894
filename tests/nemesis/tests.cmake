# The nemesis (loadtest/nemesis) and its history checker (loadtest/nemesis_check.py).
set(nemesis ${CMAKE_CURRENT_SOURCE_DIR}/nemesis)

# Plain build only, as every nemesis test (the runs below): Python, on this build's
# stockd --list-modes at most.
if(NOT STOCKD_SANITIZE)
  # The checker on hand-made histories: a clean one passes, each anomaly is found.
  add_test(NAME nemesis_checker_finds_each_anomaly
    COMMAND ${STOCKD_PYTHON} ${nemesis}/test_nemesis_check.py)
  set_tests_properties(nemesis_checker_finds_each_anomaly PROPERTIES LABELS "unit;nemesis"
    TIMEOUT 60)

  # --mode as a run spec (lab/runspec.py): presets, fields, the specs it refuses, and the
  # modes as this build's stockd reports them (--list-modes).
  add_test(NAME nemesis_reads_the_run_spec
    COMMAND ${STOCKD_PYTHON} ${nemesis}/test_nemesis_spec.py)
  set_tests_properties(nemesis_reads_the_run_spec PROPERTIES LABELS "unit;nemesis" TIMEOUT 60
    ENVIRONMENT STOCKD_BIN=$<TARGET_FILE:stockd>)
endif()

# The nemesis on its own private stack (on the test's 20 ports). Each run costs its
# --seconds plus 2 to 8 s of start and stop (MariaDB, the ZooKeeper ensemble). CI time,
# measured 2026-11-25 on the shared 2-core machine (`ctest -L nemesis`, 485 s in all; 516
# s in a second run):
# self-checks 22 + 22 + 34 + 34 + 32 + 34 + 29 + 28 s, exact runs 50 + 53 + 47 + 48 + 47 s.
# nemesis_run(NAME EXPECT SECONDS NEMESIS-ARGS...): EXPECT is exact or an anomaly name.
# A run is a whole stack under load with faults timed against sessions and leases (a
# pause of 2.5x the lease, a COMMIT held 1.5x it), and a self-check must meet a holder
# inside a window: beside the rest of the suite, load stretches those windows. But a run
# leaves most of the machine idle (64 % idle on the 2 cores, `vmstat` through
# nemesis_zk_batched_exact alone, 2026-12-08), so the runs share it two at a time: each
# holds one of two lanes (SHARES nemesis_lane_0 or _1), and scripts/test runs them in a
# pass of their own after the rest (ctest -L nemesis -j 2). Run them so by hand too.
set_property(GLOBAL PROPERTY nemesis_runs 0)
function(nemesis_run name expect seconds)
  math(EXPR timeout "${seconds} + 240")
  get_property(n GLOBAL PROPERTY nemesis_runs)
  math(EXPR lane "${n} % 2")
  math(EXPR n "${n} + 1")
  set_property(GLOBAL PROPERTY nemesis_runs ${n})
  stockd_integration_test(${name}
    COMMAND bash ${nemesis}/nemesis_run.sh ${expect} --seconds ${seconds} ${ARGN}
    TIMEOUT ${timeout} LABELS nemesis SHARES nemesis_lane_${lane})
endfunction()

# The nemesis runs are registered in the plain build only, as the container test is: a
# sanitizer build of stockd is several times slower, so the same schedule would test the
# sanitizer more than the faults, and three builds would triple the 7 minutes.
if(NOT STOCKD_SANITIZE)
# Self-checks: runs that must fail do fail, with the anomaly named. Those without a
# fault (none, local and the two pitfalls) oversell from the first sell-out on, so 6 s
# do. Measured 2026-11-27 on the shared 2-core machine: in 20 s (seed 1) they sold 38 to
# 67 orders below 0, the first 0.0-0.3 s into the run; in 6 s, seeds 1, 2 and 3 of each
# (12 runs) all reported negative_stock on all three products, 11 to 38 orders below 0,
# the first 0.0-0.5 s in. A run takes 8 s (none, local) or 11-12 s (the pitfalls)
# instead of 24-28 s. The faulted self-checks keep their time: their first sale below 0
# came 4-9 s in, and 1 to 8 orders went below 0 in a whole run (seed 1, or 4 for etcd).
# Owner routing on (stockd --route owner, docs/routing.md; the nemesis passes each
# instance its address, the peers' secret and, without ZooKeeper, the list of
# instances): the faults move owners, and the routing must cost no exactness.
nemesis_run(nemesis_zk_owner_routing_exact exact 20 --mode zk --extra "--route owner" --seed 1)
nemesis_run(nemesis_selfcheck_none_3_instances_oversells negative_stock 6
  --mode none --seed 1 --faults none)
nemesis_run(nemesis_selfcheck_local_3_instances_oversells negative_stock 6
  --mode local --seed 1 --faults none)
# The pause must meet a holder between its check and its write: with 200 ms of think it
# did so in 2 of 4 runs on a loaded machine, with 600 ms in 5 of 5.
nemesis_run(nemesis_selfcheck_redis_fence_off_paused_past_lease_sells_twice negative_stock 30
  --mode redis --extra "--fence off --think-us 600000" --seed 1 --faults pause
  --fault-gap 0.5 2)
nemesis_run(nemesis_selfcheck_redis_fence_off_clock_jump_sells_twice negative_stock 30
  --mode redis --extra "--fence off" --seed 1 --faults clock --fault-gap 0.5 2)
# db-lock's leases are timed by MariaDB's clock, which the clock faults step forward and
# back (libfaketime): with the fence off a forward step lets a second holder sell what the
# first is selling; with the fence the same schedule is exact. (Backward steps alone,
# fence off: 0 anomalies in 30 s, db-lock and redis alike, measured 2026-11-25.) About
# 37 s each on the shared 2-core machine.
nemesis_run(nemesis_selfcheck_db_lock_fence_off_clock_jumps_sell_twice negative_stock 30
  --mode db-lock --extra "--fence off" --seed 1 --faults clock,clock-back --fault-gap 0.5 2)
nemesis_run(nemesis_db_lock_fenced_clock_jumps_exact exact 30
  --mode db-lock --seed 1 --faults clock,clock-back --fault-gap 0.5 2)
# RedLock, fence off: the clocks of 1 to 3 of its servers jump forward (keys that expire
# early, the stand-in of the redis self-check on each server); when a majority's keys
# go, a second holder takes the lock while the first still sells. etcd, fence off: a
# holder paused past its lease (--etcd-ttl-s 2) writes after the next holder; its load is
# slow (600 ms of think), so restocks of at most 2 units keep the stock near 0, where the
# second holder's sale oversells (with the default restocks, seed 4 found none in 30 s;
# with --restock-max 2, seeds 4 and 5 found one each; seed 1 found none twice, on a quiet
# machine, and seed 2 did: nemesis_run.sh gives a self-check three seeds, here 4 to 6). Measured 2026-11-26 on the
# shared 2-core machine: 27 s (redlock) and 38 s (etcd) a seed.
nemesis_run(nemesis_selfcheck_redlock_fence_off_clock_jump_sells_twice negative_stock 20
  --mode redlock --extra "--fence off" --seed 1 --faults clock --fault-gap 0.5 2)
nemesis_run(nemesis_selfcheck_etcd_fence_off_paused_past_lease_sells_twice negative_stock 30
  --mode etcd --extra "--fence off --think-us 600000" --seed 4 --faults pause
  --fault-gap 0.5 2 --restock-max 2)
# The two classic mistakes (--pitfall) with the seed's plain SQL: each sells what is gone.
# No fault is needed. release-before-commit needs a COMMIT slower than the next holder's
# wake-up and read (docs/fence.md, "Two classic mistakes"): --commit-ms 20. Measured 2026-11-25
# on the shared 2-core machine: 3 of 3 seeds each report negative_stock on all three
# products in 20 s, and in 6 s (2026-11-27, above).
nemesis_run(nemesis_selfcheck_pitfall_release_before_commit_fence_off_oversells negative_stock 6
  --mode zk --extra "--fence off --pitfall release-before-commit" --commit-ms 20 --seed 1
  --faults none)
nemesis_run(nemesis_selfcheck_pitfall_snapshot_before_lock_fence_off_oversells negative_stock 6
  --mode zk --extra "--fence off --pitfall snapshot-before-lock" --seed 1 --faults none)

# Short exact runs under every fault the mode can have, each with the order's life
# (issue 42, --orders): customers, limits, reservations of 1 s paid in time and late,
# cancelled, cancelled and paid at once, or left to expire, beside a product with no
# terms whose deductions are the plain ones of a run without --orders; the checker's
# order checks (paid <= stock, each customer within the limit, every release once, no
# late payment accepted, nothing left reserved) find nothing either. (The zk run of the
# order's life alone, 20 s, went: the batched zk run is the same run, longer.) 25 s each,
# 8 to 12 faults at the default gap of 1 to 4 s: CI's run is a smoke of every fault; the
# long runs are `loadtest/nemesis --soak` (docs/testing.md), a script, not a test.
nemesis_run(nemesis_zk_batched_exact exact 25 --mode zk --seed 1 --orders)
nemesis_run(nemesis_zk_per_request_exact exact 25 --mode zk --extra "--batch-max 1" --seed 1
  --orders)
nemesis_run(nemesis_redis_exact exact 25 --mode redis --seed 1 --orders)
nemesis_run(nemesis_db_lock_exact exact 25 --mode db-lock --seed 1 --orders)
nemesis_run(nemesis_atomic_exact exact 25 --mode atomic --seed 1 --orders)
# The last lock kinds under every fault they can have, lock-server kills and pauses (and
# RedLock's clock jumps) among them: about 27 s each.
nemesis_run(nemesis_redlock_exact exact 20 --mode redlock --seed 1 --orders)
nemesis_run(nemesis_etcd_exact exact 20 --mode etcd --seed 1 --orders)
# Mode redis-stock across its Sentinel failover (fault redis-failover): the first one is
# made lossy as loadtest/redis-failover is (the replication link cut, the writer paused,
# then the primary killed), so the checker must count acknowledged deductions with no
# order; it reports the oversold promises and the drift beside them. Products of 300
# units sell out within the run, after the failover. Measured 2026-11-28 on the shared
# 2-core machine, 20 s, seed 1: 2 failovers, 5 lost deductions and 6 oversold promises,
# 32 s in all.
nemesis_run(nemesis_redis_stock_failover_counts_lost_deductions lost_deduction 20
  --mode redis-stock --seed 1 --faults redis-failover --products 3 --stock 300)
endif()

# fault-proxy's --arm-file (hold the (K+1)-th next COMMIT), against a stand-in upstream.
add_test(NAME nemesis_relay_holds_the_armed_commit
  COMMAND ${STOCKD_PYTHON} ${nemesis}/test_relay_arm.py $<TARGET_FILE:fault-proxy>)
set_tests_properties(nemesis_relay_holds_the_armed_commit PROPERTIES LABELS "unit;nemesis"
  TIMEOUT 60)
