#!/usr/bin/env bash
# late_commit.sh KIND: issue 16's defect 1, end to end, for lock kind KIND (zk,
# zk-herd, redis, db-lock). One acquisition serves several batches (--lock-passes 4),
# and the second batch's COMMIT arrives late.
#
# Product 2 has 3 units. Instance A reaches MariaDB through the fault proxy
# (tests/support/fault-proxy) that holds A's second COMMIT back for 4 s. A gets two
# deductions: the first batch commits (the row's fence is now A's token); the second,
# under the same token, writes and sends its COMMIT, which the relay holds. A is then
# paused (SIGSTOP) past its 1 s lease or ZooKeeper session, so B takes the lock with a
# newer token, reads the committed row (2 units) and sends three deductions' UPDATE,
# which waits for A's row lock. A's COMMIT lands. B's write was decided on 2 units when
# 1 is left:
# the compare-and-set on row_version refuses it; B, still the holder, reads again: 1
# deducted, 2 sold out. Stock 0, 3 orders. Before the fix the compare-and-set was on the
# fence value, which a second batch under one token leaves unchanged: B subtracted 2 from
# 1 and this test ended at stock -1 for every kind.
# Every answer is checked against the orders: each "deducted" has its order, nothing else.
#
# late_commit.sh zk cached: the same, but A's second batch runs under its CACHED lock
# (--lock-cache-ms, batched, --lock-passes 1): the first batch's release keeps the node,
# the second batch takes it back from the cache with the same token, and its COMMIT is
# the late one. The fence does not care how the token was kept.
source "$STOCKD_SRC/tests/lib.sh"
kind=${1:?kind}
variant=${2:-passes}

t_db
sql "UPDATE product SET stock = 3, fence = 0 WHERE id = 2"
relay_port=$((PORT0 + 10))
mkdir -p "$T/relay"
"$FAULT_PROXY_BIN" --listen "$relay_port" --proto mysql \
  --upstream "127.0.0.1:$STOCKD_TEST_MYSQL_PORT" --hold-commit 2 --hold-s 4 >"$T/relay/log" 2>&1 &
echo $! >"$T/relay/pid"
wait_until 10 grep -q ready "$T/relay/log" || fail "the relay did not start: $(cat "$T/relay/log")"

# A: short lease or session, two workers (so the second deduction waits in the combiner
# while the first batch runs), one deduction per batch, up to 4 batches per acquisition,
# 0.2 s of work per batch. B: default leases, so its own lease outlasts the wait.
a_args=(--workers 2 --batch-max 1 --lock-passes 4 --think-us 200000 --lock-timeout-ms 15000)
if [[ $variant == cached ]]; then
  [[ $kind == zk ]] || fail "only the zk lock caches"
  a_args=(--workers 2 --lock-passes 1 --lock-cache-ms 10000 --think-us 200000 --lock-timeout-ms 15000)
fi
b_args=(--lock-timeout-ms 15000)
case $kind in
zk | zk-herd) a_args+=(--zk-session-ms 1000) ;;
redis) a_args+=(--redis-lease-ms 1000) ;;
db-lock) a_args+=(--db-lock-lease-ms 1000) ;;
*) fail "unknown kind $kind" ;;
esac
stockd_start "$T" 1 $((PORT0 + 1)) "$kind" "mysql://$DB_USER@127.0.0.1:$relay_port/$DB" \
  "$STOCKD_TEST_ZK" "${a_args[@]}"
t_stockd 2 "$kind" "${b_args[@]}"

# ask NAME PORT: one deduction of product 2 in the background; "CODE RESULT" in $T/NAME.
ask() {
  curl -sS -m 40 -o "$T/$1.body" -w '%{http_code}' "http://127.0.0.1:$2/stock/reduce?id=2" \
    >"$T/$1.code" 2>"$T/$1.err" || true
  echo "$(cat "$T/$1.code") $(jq -r .result "$T/$1.body" 2>/dev/null)" >"$T/$1"
}
ask a1 $((PORT0 + 1)) &
# a2 comes once a1's lock round has begun, within its 0.2 s of work: a second batch
# under the same acquisition (and, cached, not a member of a1's batch, --batch-max being
# more than 1 there).
wait_metric 10 stockd_lock_acquisitions_total 1 $((PORT0 + 1)) || fail "a1 never took the lock"
ask a2 $((PORT0 + 1)) &
wait_until 10 grep -q "holding COMMIT #2" "$T/relay/log" ||
  fail "A's second COMMIT never reached the relay: $(cat "$T/relay/log"); $(tail -5 "$T/stockd/1.log")"
apid=$(cat "$T/stockd/1.pid")
kill -STOP "$apid"
for i in 1 2 3; do ask "b$i" $((PORT0 + 2)) & done
# A stays stopped until B holds the lock (A's lease or session ran out) and B's UPDATE
# waits for the row lock of A's second batch, whose COMMIT the relay still holds; on a
# machine so slow that the relay let the COMMIT go first, B read after it, which the
# checks below accept as well.
wait_metric 20 stockd_lock_acquisitions_total 1 $((PORT0 + 2)) || fail "B never took the lock"
b_waits() { (($(trx_open "LOCK WAIT") >= 1)) || grep -q "released COMMIT #2" "$T/relay/log"; }
wait_until 20 b_waits || fail "B's write never waited for A's row lock: $(tail -5 "$T/stockd/2.log")"
grep -q "released COMMIT #2" "$T/relay/log" && echo "note: A's COMMIT landed before B's write"
kill -CONT "$apid"
wait_until 40 eval '[[ -s $T/a1 && -s $T/a2 && -s $T/b1 && -s $T/b2 && -s $T/b3 ]]' ||
  fail "not every request was answered"
cat "$T/relay/log"
deducted=0
for r in a1 a2 b1 b2 b3; do
  echo "$r: $(cat "$T/$r")"
  [[ $(cat "$T/$r") == "200 deducted" ]] && deducted=$((deducted + 1))
done
stock=$(sql "SELECT stock FROM product WHERE id = 2")
orders=$(sql "SELECT COUNT(*) FROM orders WHERE product_id = 2")
echo "stock $stock, orders $orders, deducted answers $deducted"
expect_eq "A's two deductions (its late COMMIT landed)" "200 deducted 200 deducted" "$(cat "$T/a1") $(cat "$T/a2")"
expect_eq "orders = 3 - stock (the ledger)" $((3 - stock)) "$orders"
expect_eq "deducted answers = orders" "$orders" "$deducted"
expect_eq "stock" 0 "$stock"
if [[ $variant == cached ]]; then
  hits=$(metric_sum stockd_lock_cache_hits_total $((PORT0 + 1)))
  ((hits >= 1)) || fail "A's second batch did not run under its cached lock ($hits cache hits)"
  echo "ok: A's second batch took its lock from the cache ($hits hit)"
fi
echo "ok: $kind: a late COMMIT of a second batch under one token did not oversell"
