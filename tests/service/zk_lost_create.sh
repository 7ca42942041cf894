#!/usr/bin/env bash
# zk_lost_create.sh: a lock-node create whose reply is lost in a try, on a ZooKeeper
# server that lags, must not leave a node that blocks the product everywhere.
#
# Instance 1 batches across products (--cross-products, so a leader TRIES its own lock
# first) and talks to ZooKeeper through the fault proxy. The proxy holds the try's
# create and cuts; reconnection is refused for longer than instance 1's lock timeout,
# so that deduction gives up (nothing deducted) and only the cleanup by GUID looks for
# the node, once the session is back. The proxy lets the create reach the server right
# after the first sync or listing of the new connection, as a follower that lags and
# catches up when asked to: a cleanup that lists without a sync finds nothing, and the
# node lands afterwards, owned by instance 1's live session. Then every deduction of
# that product, on every instance, waits behind it: 503 lock_timeout until instance 1
# exits. Checked: once the create has landed, instance 2 (straight to ZooKeeper) and
# instance 1 both deduct the product (200), and the ledger holds.
#
# The product is one of this test's own (4242), and its lock's parent is made by hand as
# a persistent node with a child that is no lock node (both ignored by the recipe):
# the server reaps an empty container parent within a second, and a create that lands
# after that fails instead of leaving a node.
source "$STOCKD_SRC/tests/lib.sh"
# Its product (4242) is its own, under stockd's default lock path, made by hand below.
unset STOCKD_ZK_LOCK_PATH

id=4242
t_db
sql "INSERT INTO product (id, product_name, stock) VALUES ($id, 'lost-create', 10), (4243, 'warm-up', 10)
     ON DUPLICATE KEY UPDATE stock = 10, fence = 0; DELETE FROM orders"
# zk_cmd ARGS: one command of ZooKeeper's own command-line client on the fixture's server.
zk_cmd() {
  java -cp "$(zk_classpath)" org.apache.zookeeper.ZooKeeperMain -server "$STOCKD_TEST_ZK" "$@" \
    >>"$T/zkcli.log" 2>&1
}
parent=/stock/locks/product_$id
for path in /stock /stock/locks $parent $parent/keep; do zk_cmd create "$path" "" || true; done
zk_cmd stat "$parent/keep" || fail "could not make $parent/keep: $(cat "$T/zkcli.log")"
trap 'zk_cmd deleteall "$parent" || true; t_cleanup' EXIT
relay_port=$((PORT0 + 10))
mkdir -p "$T/relay"
"$FAULT_PROXY_BIN" --listen "$relay_port" --proto zk --upstream "$STOCKD_TEST_ZK" \
  --control "$T/relay/ctl" >"$T/relay/log" 2>&1 &
echo $! >"$T/relay/pid"
wait_until 10 grep -q ready "$T/relay/log" || fail "the relay did not start: $(cat "$T/relay/log")"
# control LINE: hands LINE to the proxy and waits until it is applied.
control() {
  echo "$1" >"$T/relay/ctl.tmp"
  mv "$T/relay/ctl.tmp" "$T/relay/ctl"
  wait_until 10 grep -qF "control: $1" "$T/relay/log" || fail "the relay did not apply '$1'"
}

stockd_start "$T" 1 $((PORT0 + 1)) zk "$MYSQL_URL" "127.0.0.1:$relay_port" \
  --cross-products 4 --lock-cache-ms 0 --lock-timeout-ms 500
t_stockd 2 zk --lock-cache-ms 0 --lock-timeout-ms 3000
# A first deduction of another product: instance 1's session and MySQL connections are up.
expect_eq "instance 1, before the fault" "200 deducted" "$(reduce $((PORT0 + 1)) 4243)"

control "zk-hold-create 1500"
first=$(reduce $((PORT0 + 1)) $id)
echo "instance 1, its create held and its reconnection refused: $first"
[[ $first != "200 deducted" ]] || fail "the deduction under the fault should have given up"
wait_until 15 grep -q "zk: held create let through" "$T/relay/log" ||
  fail "the held create never reached ZooKeeper: $(cat "$T/relay/log")"

expect_eq "instance 2, after the late create landed" "200 deducted" "$(reduce $((PORT0 + 2)) $id)"
expect_eq "instance 1, after the late create landed" "200 deducted" "$(reduce $((PORT0 + 1)) $id)"
expect_eq "the product's stock" 8 "$(stock $id)"
expect_eq "the product's orders" 2 "$(orders $id)"
