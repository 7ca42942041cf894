#!/usr/bin/env bash
# A three-member etcd cluster on loopback whose leader is killed (kill -9) during load
# (three stockd in mode etcd, --etcd listing all three members):
#   - the two others elect a new leader and keep the quorum; a request to the dead
#     member fails to connect and goes to the next member of the list, and a waiter
#     whose watch was on it looks again through another;
#   - every instance is healthy again and deducts; a drain sells the rest, so the stock
#     ends at exactly 0;
#   - the strict invariant holds: no answer is lost, deducted answers = orders =
#     initial - final, final >= 0, and the fencing tokens (create revisions) of the
#     orders only grow across the change of leader.
# Bound: every request gets an answer within 20 s. About 20 s.
# It runs its own cluster under $T (members $T/etcd1..3 on ports PORT0+10..15).
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/faults/faultlib.sh"
ebase=$((PORT0 + 10))
etcd_cluster_start "$T" "$ebase" || fail "the etcd cluster did not start"
ETCD=$(etcd_cluster_hosts "$ebase")
leader=$(etcd_cluster_leader "$ebase") || fail "the cluster has no leader"
echo "cluster $ETCD up, leader etcd$leader"

t_db
# The fault tests' cluster, in mode etcd (the later --lock wins over f_stockd's zk).
f_cluster "$STOCKD_TEST_ZK" 3 --lock etcd --etcd "$ETCD" --etcd-ttl-s 5

f_load_start load
f_load_under_way
lpid=$(cat "$T/etcd$leader/pid")
f_kill9 "$lpid"
echo "killed the leader etcd$leader at stock $(stock "$F_PRODUCT")"
new_leader() {
  local l
  l=$(etcd_cluster_leader "$ebase") && [[ $l != "$leader" ]]
}
wait_until 30 new_leader || fail "no new leader was elected"
echo "ok: new leader etcd$(etcd_cluster_leader "$ebase")"
f_wait_healthy 1 2 3
f_load_wait load
f_drain
f_check
f_expect_sold_out
expect_eq "the fence holds etcd's tokens (fence_kind 4)" 4 \
  "$(sql "SELECT fence_kind FROM product WHERE id = $F_PRODUCT")"
echo PASS
