#!/usr/bin/env bash
# The stock table on a three-node Galera cluster behind HAProxy (docs/galera.md), three
# stockd in zk mode on HAProxy's writer port; the writer node killed (kill -9) during the
# load:
#   - HAProxy's check marks it down and sends the next connections to node 2 (a backup);
#     the gap of 503s, from the kill to the first deduction answered again, is printed;
#   - no answered deduction is lost: every 200's order is on the surviving nodes (the
#     checker reads them through node 2, which waits for the cluster), and nodes 2 and
#     3 agree on the stock and the orders;
#   - a COMMIT the kill cut is decided by its key, retried (the checker's --lossy), and
#     the drain ends at exactly 0: nothing oversold, nothing deducted twice;
#   - node 1 started again joins by IST (not a full SST) and agrees with the others.
# Bound: every request gets an answer within 20 s. It runs its own cluster under $T.
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/faults/galeralib.sh"
first=$G_FIRST proxy=$G_PROXY q=$G_LEDGER
writer_port() { mariadb --defaults-file="$T/haproxy/check.cnf" -h 127.0.0.1 -P "$proxy" -N -B -e 'SELECT @@port'; }

expect_eq "HAProxy's writer before the kill" "$first" "$(writer_port)"
f_cluster "$STOCKD_TEST_ZK" 3 --zk-session-ms 2000
f_load_start load --duration 12 --concurrency 30
f_load_under_way
echo "killing the writer node 1 at stock $(stock "$F_PRODUCT")"
t0=$(date +%s%N)
f_kill9 "$(cat "$T/galera1/pid")"
# The gap: deductions with a key of their own through nginx until one is answered 200.
n=0
while :; do
  n=$((n + 1))
  read -r _ code _ < <(f_keyed "gap$n" "$F_NGINX")
  [[ $code == 200 ]] && break
  (($(date +%s%N) - t0 < 60000000000)) || fail "no deduction answered within 60 s of the kill"
done
gap_ms=$((($(date +%s%N) - t0) / 1000000))
echo "GAP writer node killed -> first 200: ${gap_ms} ms, $((n - 1)) keyed requests answered otherwise"
expect_eq "HAProxy's writer after the kill" "$((first + 1))" "$(writer_port)"
f_load_wait load
f_drain
f_check --lossy
echo "lost answers: $(f_invariant lost), retried with their key: $(f_invariant retried)" \
  "($(f_invariant retried_replayed) had committed)"
f_expect_sold_out
expect_eq "stock/orders on node 3 as on node 2" "$(node_sql 2 "$q")" "$(node_sql 3 "$q")"
expect_eq "orders after the drain" "$F_STOCK" "$(node_sql 2 "$q" | cut -d/ -f2)"

# Node 1 back: from its gcache position the donor sends the missing writes (IST).
galera_start "$T" "$first" "$proxy" 1
grep -q "IST received" "$T/galera1/error.log" || fail "node 1 did not rejoin by IST; $(grep -i sst "$T/galera1/error.log" | tail -3)"
expect_eq "stock/orders on node 1 after it rejoined" "$(node_sql 2 "$q")" "$(node_sql 1 "$q")"
echo PASS
