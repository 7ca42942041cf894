#!/usr/bin/env bash
# The stock table on a three-node Galera cluster behind HAProxy (docs/galera.md), stockd
# in zk mode on HAProxy's writer port. One scenario per run, named by $1:
#   isolated: nodes 2 and 3 paused (SIGSTOP) during the load, so node 1, the writer, is
#     left alone: it turns non-primary and takes no write (its orders do not grow, a
#     deduction answers 503); once 2 and 3 resume, the cluster forms again, the load
#     goes on, and the drain ends at exactly 0 with every key answered once (the
#     checker): nothing deducted twice, nothing lost;
#   restock: the product sold out through stockd (its pre-check then reads before the
#     lock), restocked with one unit on node 3 directly, and at once deducted through
#     stockd, whose writer is node 1: every round is a sale, never a stale "sold out"
#     (the sessions' wsrep_sync_wait makes node 1 apply node 3's commit first). Then,
#     on the same cluster, the order's life on two writers (galera_life.py): stockd on
#     node 1 and stockd on node 2, no proxy, mode for-update; every order's pay and
#     cancel sent at once to different nodes with restocks among them, each applied
#     once or refused with a 503 that changed nothing, the order transactions' retry
#     after a certification abort met, the expiry threads of both writers giving each
#     reservation back once, and the three nodes agreeing with the books.
# It runs its own cluster under $T.
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/faults/galeralib.sh"
q=$G_LEDGER

case ${1:-} in
isolated)
  f_cluster "$STOCKD_TEST_ZK" 2 --zk-session-ms 2000
  f_load_start load --duration 20 --concurrency 20
  f_load_under_way
  kill -STOP "$(cat "$T/galera2/pid")" "$(cat "$T/galera3/pid")"
  echo "nodes 2 and 3 paused at stock $(stock "$F_PRODUCT")"
  wait_until 30 eval '[[ $(node_status 1) == non-Primary ]]' || fail "node 1 alone is still $(node_status 1)"
  echo "ok: node 1 alone is non-Primary"
  before=$(node_local 1 "SELECT COUNT(*) FROM orders WHERE product_id=$F_PRODUCT")
  read -r _ code result _ < <(f_keyed isolated1 "$F_NGINX")
  expect_eq "a deduction while the writer is alone" "503" "$code"
  expect_eq "orders on node 1 while it is alone" "$before" \
    "$(node_local 1 "SELECT COUNT(*) FROM orders WHERE product_id=$F_PRODUCT")"
  kill -CONT "$(cat "$T/galera2/pid")" "$(cat "$T/galera3/pid")"
  wait_until 60 eval '[[ $(node_status 1) == Primary ]]' || fail "the cluster did not form again"
  echo "ok: nodes 2 and 3 resumed, node 1 is Primary again"
  f_load_wait load
  f_drain
  f_check --lossy
  f_expect_sold_out
  for n in 2 3; do expect_eq "stock/orders on node $n as on node 1" "$(node_sql 1 "$q")" "$(node_sql "$n" "$q")"; done
  ;;
restock)
  F_STOCK=3
  f_cluster "$STOCKD_TEST_ZK" 1
  f_drain # sells the 3 units and sees sold out: the pre-check is on for the product
  url=http://127.0.0.1:$((PORT0 + 1))
  for i in $(seq 1 40); do
    node_sql 3 "UPDATE product SET stock = stock + 1 WHERE id=$F_PRODUCT"
    read -r _ code result _ < <(f_keyed "restock$i" "$url")
    [[ $code == 200 && $result == deducted ]] || fail "round $i: restocked on node 3, then '$code $result' through node 1"
  done
  echo "ok: 40 restocks on node 3, each sold at once through node 1"
  expect_eq "pre-check reads made" 1 "$(( $(metric_sum stockd_precheck_reads_total "$url") > 0 ))"
  expect_eq "stock/orders on node 1 as on node 3" "$(node_sql 3 "$q")" "$(node_sql 1 "$q")"
  expect_eq "orders" "43" "$(node_sql 1 "$q" | cut -d/ -f2)"
  (umask 077 && head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/admin-token")
  for i in 2 3; do # stockd 2 on node 1, stockd 3 on node 2: two writers
    stockd_start "$T" "$i" $((PORT0 + i)) for-update \
      "mysql://$DB_USER@127.0.0.1:$((G_FIRST + i - 2))/$DB" "$STOCKD_TEST_ZK" \
      --admin-token-file "$T/admin-token" --expiry-ms 200
  done
  "$STOCKD_SRC/tests/faults/galera_life.py" --run "$T" --db "$DB" \
    --urls "http://127.0.0.1:$((PORT0 + 2))" "http://127.0.0.1:$((PORT0 + 3))" \
    --token-file "$T/admin-token" --product 3 --expiring-product 4 ||
    fail "the order's life on two writers"
  ;;
*) fail "usage: galera_partition.sh isolated|restock" ;;
esac
echo PASS
