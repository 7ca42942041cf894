#!/usr/bin/env bash
# A three-server ZooKeeper ensemble on loopback whose leader is killed (kill -9)
# during load (three stockd, zk lock, --zk listing all three servers):
#   - the two others elect a new leader (found with the `srvr` four-letter word) and
#     keep the quorum; the clients connected to the dead one move to another server;
#   - every instance is healthy again and deducts; a drain sells the rest, so the stock
#     ends at exactly 0;
#   - the strict invariant holds: no answer is lost (every stockd stays up), deducted
#     answers = orders = initial - final, final >= 0, and the fencing tokens of the
#     orders only grow across the change of leader.
# Bound: every request gets an answer within 20 s.
# It runs its own ensemble under $T (servers $T/zk1..3 on ports PORT0+10..18).
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/faults/faultlib.sh"
zkbase=$((PORT0 + 10))
zk_ensemble_start "$T" "$zkbase"
ZK=$(zk_ensemble_hosts "$zkbase")
leader=$(zk_leader "$zkbase") || fail "the ensemble has no leader"
echo "ensemble $ZK up, leader zk$leader"

t_db
f_cluster "$ZK" 3 --zk-session-ms 4000

f_load_start load
f_load_under_way
lpid=$(cat "$T/zk$leader/pid")
f_kill9 "$lpid"
echo "killed the leader zk$leader at stock $(stock "$F_PRODUCT")"
new_leader() {
  local l
  l=$(zk_leader "$zkbase") && [[ $l != "$leader" ]]
}
wait_until 30 new_leader || fail "no new leader was elected"
echo "ok: new leader zk$(zk_leader "$zkbase")"
f_wait_healthy 1 2 3
f_load_wait load
f_drain
f_check
f_expect_sold_out
echo PASS
