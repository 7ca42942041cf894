#!/usr/bin/env bash
# zk_seq_limit.sh: the fair lock at ZooKeeper's sequence limit, on a real ZooKeeper 3.8.
# ZooKeeper names a lock child by its parent's child version (cversion) and stops
# counting at 2^31-1: every later child is named ...2147483647, and such names no longer
# say who came first (a newcomer whose GUID sorted first held beside the holder, issue
# 43). This test runs its own ZooKeeper on a snapshot whose lock parent (persistent, as
# kazoo makes them) has its cversion at 2^31-2 (tests/support/ZkCversionSnapshot.java).
# (The counter is the cversion as the server stores it, a count of the children created;
# a client reads twice it less the children, so the names are what this test checks.)
#   1. A kazoo holder takes the last good number, 2147483646, and holds.
#   2. stockd's deduction gets 2147483647: it is refused at once (503 unavailable, not a
#      lock timeout), its message and stockd's log tell the operator to recreate the
#      parent, /metrics counts it, nothing is deducted and no node of stockd's is left.
#      A kazoo node queued at 2147483647 is shown at_limit and not holding.
#   3. The holder gone, stockd alone at the limit is refused all the same; so are the
#      library's acquisition and its tries of many locks (zk_seq_limit_probe).
#   4. The operator's step: the parent, empty, deleted; stockd makes it anew and deducts.
source "$STOCKD_SRC/tests/lib.sh"
# stockd's default lock path: the snapshot's parent is there, on a ZooKeeper of this
# test's own (lib.sh's per-test path is for the fixture's ZooKeeper).
unset STOCKD_ZK_LOCK_PATH
zkport=$((PORT0 + 16))
id=1 parent=/stock/locks/product_1
mkdir -p "$T/zk/data"
java -cp "/usr/share/java/*" "$STOCKD_SRC/tests/support/ZkCversionSnapshot.java" "$T/zk/data" \
  "$parent" 2147483646 >"$T/snapshot.log" 2>&1 ||
  fail "the snapshot was not written: $(tail -5 "$T/snapshot.log")"
zk_start "$T" "$zkport" zk
STOCKD_TEST_ZK=127.0.0.1:$zkport
# zk_py CODE: runs CODE with z, a kazoo client connected to our ZooKeeper.
zk_py() {
  /usr/bin/python3 -c "from kazoo.client import KazooClient as K
z = K('$STOCKD_TEST_ZK'); z.start(30)
$1
z.stop()"
}

t_db
sql "UPDATE product SET stock=10 WHERE id=$id"
t_stockd 1 zk
url=http://127.0.0.1:$((PORT0 + 1))

# probe DIR RECIPE: kazoo_hold.py on our ZooKeeper, until it holds (enqueue: has queued).
probe() {
  mkdir -p "$1"
  touch "$1/go"
  /usr/bin/python3 "$STOCKD_SRC/tests/service/kazoo_hold.py" "$STOCKD_TEST_ZK" "$parent" "$1" \
    --recipe "$2" >"$1/log" 2>&1 &
  echo $! >"$1/pid"
  wait_until 120 test -e "$1/held" || fail "the $2 probe did not queue: $(tail -5 "$1/log")"
}
# reduce_answer N: "STATUS RESULT" of a deduction, its body in $T/rN.
reduce_answer() {
  local code
  code=$(curl -sS -m 60 -o "$T/r$1" -w '%{http_code}' "$url/stock/reduce?id=$id")
  echo "$code $(jq -r .result "$T/r$1")"
}
# queue: the view of the lock, "SEQ:HOLDS:AT_LIMIT" in order.
queue() {
  curl -sS "$url/lock/queue?id=$id" |
    jq -r '[.entries[] | "\(.seq):\(.holds):\(.at_limit // false)"] | join(" ")'
}

# 1. kazoo holds with the last good sequence.
probe "$T/a" kazoo
expect_eq "the holder's node" "2147483646:true:false" "$(queue)"

# 2. stockd's node is the first at the limit: refused at once.
expect_eq "a deduction at the limit" "503 unavailable" "$(reduce_answer 1)"
grep -q "recreate" "$T/r1" || fail "the answer does not tell to recreate the parent: $(cat "$T/r1")"
expect_eq "refusals counted" 1 "$(metric "$url" stockd_zk_seq_limit_total)"
wait_until 10 grep -q "lock of product $id: .*sequence numbers" "$T/stockd/1.log" ||
  fail "stockd's log does not say the parent used up its sequence numbers"
expect_eq "the queue after the refusal: no node of stockd's" "2147483646:true:false" "$(queue)"
probe "$T/b" enqueue
expect_eq "a kazoo node at the limit, behind the holder" \
  "2147483646:true:false 2147483647:false:true" "$(queue)"
expect_eq "a deduction beside them" "503 unavailable" "$(reduce_answer 2)"
touch "$T/a/release" "$T/b/release"
wait_until 30 test -e "$T/a/released" -a -e "$T/b/released" || fail "the probes did not let go"

# 3. Alone at the limit: its GUID could sort first against any later one, so refused.
expect_eq "a deduction alone at the limit" "503 unavailable" "$(reduce_answer 3)"
expect_eq "refusals counted" 3 "$(metric "$url" stockd_zk_seq_limit_total)"
expect_eq "nothing deducted at the limit" "10 0" "$(stock "$id") $(orders "$id")"
# The library's acquisition, its tries of many locks and its view, on the same parent.
"$STOCKD_BUILD/tests/zk_seq_limit_probe" "$STOCKD_TEST_ZK" /stock/locks product_1 ||
  fail "the lock library at the sequence limit (zk_seq_limit_probe)"

# 4. What the message says to do: the parent deleted once empty, made anew from 0.
zk_py "z.delete('$parent')"
expect_eq "a deduction on the new parent" "200 deducted" "$(reduce_answer 4)"
expect_eq "stock and orders" "9 1" "$(stock "$id") $(orders "$id")"
alive 1
echo PASS
