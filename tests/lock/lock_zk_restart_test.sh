#!/usr/bin/env bash
# lock_zk_restart_test: ZooKeeper restarts while one process holds the lock and
# others wait. Three processes x two threads hammer one fair lock on a ZooKeeper
# of this test's own (under $T) for 20 s; once a holder and a waiter have their nodes,
# the server is stopped, left down 2 s and started again on the same data. Sessions (20 s) outlive the outage.
# Every worker must finish, and zklock-bench checks that there were never two
# holders at once and that every committed critical section counted.
# Usage: lock_zk_restart_test.sh PATH_TO_zklock-bench
source "$STOCKD_SRC/tests/lib.sh"
bench=$1
port=$((PORT0 + 16))
zk_start "$T" "$port" zk2
hosts=127.0.0.1:$port

"$bench" --zk "$hosts" --kind fair --procs 3 --threads 2 --iterations 1000000 \
  --seconds 20 --hold-us 2000 --timeout-ms 60000 --session-ms 20000 \
  --name zk_restart >"$T/bench.log" 2>&1 &
bp=$!
# ephemerals: the ephemeral nodes of every session (a holder's node and the waiters').
ephemerals() { zk_4lw "$port" dump | grep -c $'^\t/' || true; }
wait_until 20 eval '(($(ephemerals) >= 2))' || { cat "$T/bench.log"; fail "no holder and waiter on the lock"; }
kill -0 "$bp" 2>/dev/null || { cat "$T/bench.log"; fail "zklock-bench ended before the restart"; }
echo "stopping zookeeper"
zk_stop "$T" zk2
# A pause, not a wait: the outage's length is what the test is about (the sessions,
# 20 s, must outlive it while every worker retries).
sleep 2
echo "starting zookeeper"
zk_start "$T" "$port" zk2
kill -0 "$bp" 2>/dev/null || { cat "$T/bench.log"; fail "zklock-bench ended during the restart"; }
rc=0
wait "$bp" || rc=$?
cat "$T/bench.log"
expect_eq "zklock-bench exit status" 0 "$rc"
grep -q '^ok$' "$T/bench.log" || fail "zklock-bench did not report ok"
zk_stop "$T" zk2
