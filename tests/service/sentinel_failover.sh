#!/usr/bin/env bash
# The Sentinel failover hazard (article 001 §3.5.4), end to end, mode redis:
#
#   sentinel_failover.sh fenced|unfenced
#
# A primary P (PORT0+15), a replica R (PORT0+17) that replicates from P through the
# tests' fault proxy (tests/support/fault-proxy on PORT0+16), and one redis-sentinel
# (PORT0+18, quorum 1) watching P, all of the test's own. Product 2 has one unit.
#   1. The replication link is partitioned (the proxy's `blackhole on`): R keeps
#      everything it had, and gets nothing written from now on. The connection stays
#      open, so R still reports its link up: Sentinel skips a replica whose link it
#      knows to have been down for more than ten times down-after-milliseconds (10 s
#      here) plus the primary's down time, which a loaded machine could stretch the
#      steps below past if the link were cut (loadtest/nemesis_faults.py's
#      fail_redis_over, issue 43).
#   2. Instance 1 (--redis P, a 30 s lease, so its lease never runs out in this test)
#      takes product 2's lock on P, reads stock 1, and is SIGSTOPped in its think time
#      (3 s: the stop must land in it).
#      The key is on P and not on R.
#   3. P is killed with -9. Sentinel calls it down after 1 s and promotes R.
#   4. Instance 2 is started on the primary Sentinel now names (stockd does not ask
#      Sentinel itself: a stockd that is (re)started after a failover is given the new
#      address, which is what this does). R has no lock key: instance 2 takes the same
#      lock and buys the last unit.
#   5. Instance 1 is continued: its lease is valid by its own clock, so the pre-commit
#      check lets it write.
#       fenced:   its token (P's clock when it acquired) is below instance 2's (R's
#                 clock, later): the database refuses the write. 503 lock_lost, stock 0,
#                 one order; the refusal is the fence's, not the pre-commit check's;
#       unfenced: (--fence off on both) stock -1, two orders.
# About 6 s.
source "$STOCKD_SRC/tests/lib.sh"
fencing=${1:?fenced or unfenced}

t_db

p_port=$((PORT0 + 15)) relay_port=$((PORT0 + 16)) r_port=$((PORT0 + 17)) s_port=$((PORT0 + 18))
redis_start "$T" "$p_port" primary || fail "the primary did not start"
mkdir -p "$T/relay"
"$STOCKD_BUILD/tests/support/fault-proxy" --listen "$relay_port" --upstream "$p_port" \
  --control "$T/relay/control" >"$T/relay/log" 2>&1 &
echo $! >"$T/relay/pid"
wait_until 10 grep -q ready "$T/relay/log" || fail "the fault proxy did not start"
redis_start "$T" "$r_port" replica "$relay_port" || fail "the replica did not start"
linked() { redis-cli -p "$r_port" INFO replication | grep -q '^master_link_status:up'; }
wait_until 20 linked || fail "the replica never linked to the primary"
sentinel_start "$T" "$s_port" "$p_port" || fail "the sentinel did not start"
knows_replica() { [[ $(redis-cli -p "$s_port" SENTINEL replicas stockd | grep -c "^$r_port\$") -ge 1 ]]; }
wait_until 20 knows_replica || fail "the sentinel never saw the replica"
expect_eq "the sentinel's primary" "127.0.0.1:$p_port" "$(sentinel_primary "$s_port")"

args=(--lock-timeout-ms 15000 --batch-max 1 --redis-lease-ms 30000)
[[ $fencing == unfenced ]] && args+=(--fence off)
sql "UPDATE product SET stock = 1 WHERE id = 2"
t_stockd 1 redis "${args[@]}" --redis "127.0.0.1:$p_port" --think-us 3000000

# 1. Replication stops here: a partition.
printf 'blackhole on\n' >"$T/relay/control.tmp"
mv "$T/relay/control.tmp" "$T/relay/control"
wait_until 10 grep -q 'control: blackhole on' "$T/relay/log" || fail "the fault proxy did not partition"

# 2. Instance 1 takes the lock on the primary only, and is stopped while it holds it:
# as soon as the key is there (asked of Redis directly, at once), inside its 3 s think.
reduce $((PORT0 + 1)) 2 >"$T/first" &
first=$!
locked() { [[ -n $(redis-cli -p "$p_port" GET lock:product_2) ]]; }
wait_until 10 locked || fail "instance 1 never took the lock"
kill -STOP "$(cat "$T/stockd/1.pid")"
locked || fail "the lock key went from the primary before instance 1 was stopped"
expect_eq "the key on the replica" "" "$(redis-cli -p "$r_port" GET lock:product_2)"

# 3. The primary fails; Sentinel promotes the replica.
kill -9 "$(cat "$T/primary/pid")"
promoted() { [[ $(sentinel_primary "$s_port") == "127.0.0.1:$r_port" ]]; }
t0=$SECONDS
wait_until 30 promoted || fail "the sentinel did not promote the replica: $(tail -n 5 "$T/sentinel/sentinel.log")"
writable() { redis-cli -p "$r_port" INFO replication | grep -q '^role:master'; }
wait_until 10 writable || fail "the replica never became a primary"
echo "promoted after about $((SECONDS - t0)) s"

# 4. A second instance on the new primary takes the same lock.
t_stockd 2 redis "${args[@]}" --redis "$(sentinel_primary "$s_port")"
expect_eq "instance 2, on the promoted replica" "200 deducted" "$(reduce $((PORT0 + 2)) 2)"

# 5. The first holder runs again and writes.
kill -CONT "$(cat "$T/stockd/1.pid")"
wait "$first"
# Instance 1's lease is valid by its own clock: only the fence can refuse it.
late_write "$fencing" "$T/first" $((PORT0 + 1)) 2 fence
echo PASS
