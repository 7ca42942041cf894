#!/usr/bin/env bash
# ZooKeeper stopped for 2 s and started again during load (three stockd, zk lock):
#   - while it is down, /health is 503 and a deduction answers 503 (nothing deducted);
#   - after it is back every instance is healthy again and deducts; a drain sells the
#     rest, so the stock ends at exactly 0;
#   - the strict invariant holds: no answer is lost (every stockd stays up), deducted
#     answers = orders = initial - final, final >= 0.
# Bound: every request gets an answer within 20 s (lock timeout 2 s here).
# It runs its own ZooKeeper under $T (it stops it), never the shared one.
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/faults/faultlib.sh"
zkport=$((PORT0 + 16))
zk_start "$T" "$zkport" zk
ZK=127.0.0.1:$zkport

t_db
f_cluster "$ZK" 3 --zk-session-ms 2000 --lock-timeout-ms 2000

f_load_start load
f_load_under_way
zk_stop "$T" zk
echo "ZooKeeper stopped at stock $(stock "$F_PRODUCT")"
expect_eq "/health of stockd-1 while ZooKeeper is down" 503 "$(f_health 1)"
read -r _ code result _ < <(f_keyed while-zk-down "http://127.0.0.1:$((PORT0 + 2))")
expect_eq "a deduction while ZooKeeper is down" "503 unavailable" "$code $result"
# A pause, not a wait: ZooKeeper stays down for a second of the load (the outage is
# what the test is about).
sleep 1
zk_start "$T" "$zkport" zk
echo "ZooKeeper started again at stock $(stock "$F_PRODUCT")"
f_wait_healthy 1 2 3
f_load_wait load
f_drain
f_check
f_expect_sold_out
echo PASS
