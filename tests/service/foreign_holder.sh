#!/usr/bin/env bash
# foreign_holder.sh LIBRARY PATH: stockd (mode zk) and another implementation of the lock
# recipe, Curator's InterProcessMutex, kazoo's Lock or ZooKeeper's own C recipe (zoolock:
# zoo_lock.c's node names and order, kazoo_hold.py --recipe zoo_lock), on one product's
# lock, PATH being
# "default" (/stock/locks/product_N) or "articles" (/product_N, the articles' own path), or
# (kazoo) "acl": stockd with credentials of its own makes creator-only nodes, and the
# fleet's digest identity, given as --zk-peer-acl, still queues, reads and watches them.
# Hold probes, not loads: each side holds while the other asks.
#   1. The library holds: stockd queues behind it (the view shows both, in order, each
#      with its implementation) and deducts nothing until the library lets go.
#   2. stockd holds (a long pause inside the lock): the library queues behind it and
#      gets the lock only after stockd's deduction committed (stock 8, not 9, while the
#      library holds: stockd cannot write then).
source "$STOCKD_SRC/tests/lib.sh"
lib=$1
# The fixture's ZooKeeper is shared: each library has a product of its own.
id=$(case $lib in curator) echo 1 ;; kazoo) echo 2 ;; *) echo 3 ;; esac)
acl_args=() probe_auth=()
case $2 in
  default) lock_path=/stock/locks/product_$id ;;
  articles) lock_path=/product_$id ;;
  acl)
    # stockd with digest credentials of its own, and the fleet's identity as a peer; the
    # library authenticates as the fleet. In a chroot of the shared ZooKeeper of its own.
    lock_path=/fleet/product_$id
    chroot=/t_foreign_acl_$$_$RANDOM
    /usr/bin/python3 -c "from kazoo.client import KazooClient as K; z = K('$STOCKD_TEST_ZK'); z.start(30); z.ensure_path('$chroot'); z.stop()"
    STOCKD_TEST_ZK=$STOCKD_TEST_ZK$chroot
    fleet=fleet:$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
    hash=$(printf '%s' "$fleet" | openssl dgst -binary -sha1 | base64)
    export STOCKD_ZK_AUTH=stockd:$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
    acl_args=(--zk-peer-acl "digest:fleet:$hash")
    probe_auth=(--auth "$fleet")
    ;;
  *) fail "PATH must be default, articles or acl, got $2" ;;
esac

t_db
sql "UPDATE product SET stock=10 WHERE id=$id"
# Instance 1 answers at once; instance 2 pauses 5 s inside the lock (step 2).
t_stockd 1 zk --zk-lock-path "${lock_path%_*}_{id}" "${acl_args[@]}"
t_stockd 2 zk --zk-lock-path "${lock_path%_*}_{id}" --think-us 5000000 "${acl_args[@]}"

# hold DIR: the library's probe, connected; it takes the lock once DIR/go exists and
# holds it until DIR/release exists (a JVM starts slowly: it is started early).
hold() {
  mkdir -p "$1"
  if [[ $lib == curator ]]; then
    local cp
    cp=$(printf '/usr/share/java/%s.jar:' curator-client curator-framework curator-recipes \
      zookeeper zookeeper-jute guava slf4j-api slf4j-nop)
    java -cp "$cp" "$STOCKD_SRC/tests/service/CuratorHold.java" "$STOCKD_TEST_ZK" "$lock_path" \
      "$1" >"$1/log" 2>&1 &
  else
    /usr/bin/python3 "$STOCKD_SRC/tests/service/kazoo_hold.py" "$STOCKD_TEST_ZK" "$lock_path" "$1" \
      --recipe "$([[ $lib == zoolock ]] && echo zoo_lock || echo kazoo)" "${probe_auth[@]}" \
      >"$1/log" 2>&1 &
  fi
  echo $! >"$1/pid"
  wait_until 120 test -e "$1/ready" || fail "the $lib probe did not connect: $(tail -5 "$1/log")"
}
# queue I: the view of product 1's lock from stockd I, as "impl:holds ..." in order.
queue() {
  curl -sS "http://127.0.0.1:$((PORT0 + $1))/lock/queue?id=$id" |
    jq -r '[.entries[] | "\(.impl):\(.holds)"] | join(" ")'
}

# impls_are I LIST: stockd I's view lists the implementations LIST, in queue order.
impls_are() {
  [[ $(curl -sS "http://127.0.0.1:$((PORT0 + $1))/lock/queue?id=$id" |
    jq -r '[.entries[].impl] | join(" ")') == "$2" ]]
}

# 1. The library holds; stockd waits for its release.
hold "$T/a"
touch "$T/a/go"
wait_until 60 test -e "$T/a/held" ||
  fail "timed out waiting: the $lib probe holds the lock"
curl -sS -o "$T/r1" "http://127.0.0.1:$((PORT0 + 1))/stock/reduce?id=$id" &
r1=$!
wait_until 30 impls_are 1 "$lib stockd" ||
  fail "timed out waiting: stockd queued behind the $lib holder"
expect_eq "queue while $lib holds" "$lib:true stockd:false" "$(queue 1)"
expect_eq "$lib holds: stockd deducted nothing" 10 "$(stock "$id")"
expect_eq "$lib holds: no order" 0 "$(orders "$id")"
kill -0 "$r1" 2>/dev/null || fail "stockd answered while $lib held the lock: $(cat "$T/r1")"
touch "$T/a/release"
wait "$r1"
expect_eq "stockd deducted after the release" deducted "$(jq -r .result "$T/r1")"
expect_eq "stock after step 1" 9 "$(stock "$id")"
wait_until 30 test -e "$T/a/released" ||
  fail "timed out waiting: the $lib probe let go"

# 2. stockd holds (5 s pause inside the lock); the library waits for its commit.
hold "$T/b"
curl -sS -o "$T/r2" "http://127.0.0.1:$((PORT0 + 2))/stock/reduce?id=$id" &
r2=$!
wait_until 30 impls_are 2 stockd ||
  fail "timed out waiting: stockd holds"
touch "$T/b/go"
wait_until 30 impls_are 2 "stockd $lib" ||
  fail "timed out waiting: the $lib probe queued behind stockd"
wait_until 60 test -e "$T/b/held" ||
  fail "timed out waiting: the $lib probe holds the lock"
expect_eq "$lib got the lock after stockd's commit" 8 "$(stock "$id")"
touch "$T/b/release"
wait "$r2"
expect_eq "stockd's deduction" deducted "$(jq -r .result "$T/r2")"
wait_until 30 test -e "$T/b/released" ||
  fail "timed out waiting: the $lib probe let go"
expect_eq "stock" 8 "$(stock "$id")"
expect_eq "orders" 2 "$(orders "$id")"
alive 1
alive 2
echo "ok: $lib and stockd on $lock_path"
