#!/usr/bin/env bash
# loadtest/check-invariant must catch what the fault tests rely on it to catch. Against
# a real stack it gets one clean run (ok), then the ledger is broken one way at a time
# and each time it must say VIOLATED, naming the reason:
#   - a deduction without its order (a partial deduction),
#   - an order nobody was answered for, without a key to resolve it (lossy mode),
#   - an answer lost in strict mode, a request that timed out,
#   - an order carrying a lower lock token than the one before it,
#   - two answers naming the same order,
#   - a stockload keys file that does not belong to its run (a usage error, exit 2),
# and an answer of the clean run is forged into a lost one (a reset connection): the
# lossy check must retry that key from the keys file and get its order back replayed,
# the strict one must call the answer lost,
#   - real oversell: three instances without a lock drive the stock below 0, and
#     their deductions overlap in time.
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/faults/faultlib.sh"
F_STOCK=40

t_db
f_cluster "$STOCKD_TEST_ZK" 1
f_load_start load --threads 10 --loops 6
f_load_wait load
expect_eq "stock after 60 requests for 40 units" 0 "$(stock "$F_PRODUCT")"

# check [ARGS...]: runs the checker over the clean run plus ARGS; prints its output.
check() {
  "$STOCKD_SRC/loadtest/check-invariant" --run "$MYSQL_RUN" --db "$DB" --product "$F_PRODUCT" \
    --initial "$F_STOCK" --url "$F_NGINX" --load "$T/load.json" "$@"
}
# expect_violation WHAT REASON [ARGS...]: the checker must fail and name REASON.
expect_violation() {
  local what=$1 reason=$2 out rc=0
  shift 2
  out=$(check "$@") || rc=$?
  ((rc == 1)) || fail "$what: expected exit 1, got $rc: $out"
  grep -q "verdict=VIOLATED" <<<"$out" || fail "$what: no VIOLATED verdict: $out"
  grep -q "violation: .*$reason" <<<"$out" || fail "$what: expected '$reason' in: $out"
  echo "ok: $what -> $(grep -m1 'violation:' <<<"$out" | sed 's/^ *//')"
}

out=$(check --think-us "$F_THINK_US") || fail "the clean run should pass: $out"
echo "ok: clean run: $out"

sql "UPDATE product SET stock = stock + 1 WHERE id = $F_PRODUCT"
expect_violation "stock changed without an order" "partial deductions"
sql "UPDATE product SET stock = stock - 1 WHERE id = $F_PRODUCT"

sql "UPDATE product SET stock = stock - 1 WHERE id = $F_PRODUCT;
  INSERT INTO orders (product_id, instance) VALUES ($F_PRODUCT, 'forged')"
expect_violation "an order without answer or key (lossy)" "no request id to resolve" --lossy
expect_violation "an order without answer (strict)" "have no deducted answer"
sql "DELETE FROM orders WHERE instance = 'forged'; UPDATE product SET stock = stock + 1
  WHERE id = $F_PRODUCT"

echo "lost-1 000 - 0 false 52" >"$T/lost.keys"
expect_violation "a lost answer in strict mode" "answers were lost" --keys "$T/lost.keys"
echo "slow-1 000 - 0 false 28" >"$T/slow.keys"
expect_violation "a request that timed out" "within the client's timeout" --keys "$T/slow.keys"

sql "UPDATE orders SET fence = 1 WHERE id = (SELECT MAX(id) FROM (SELECT id FROM orders) o)"
expect_violation "a lock token going down" "lower lock token"
sql "UPDATE orders SET fence = NULL WHERE fence = 1"

# One more "deducted" answer, naming an order the clean run was answered already.
jq '.counts |= map_values(0) | .counts.deducted = 1 | .transport_errors = {} |
  .order_ids = [.order_ids[0]] | del(.keys_out, .keys_written)' "$T/load.json" >"$T/dup.json"
expect_violation "two answers naming one order" "answered more than once" --load "$T/dup.json"

# A keys file with a line missing is not the run's: the checker refuses it.
head -n -1 "$T/load.keys" >"$T/short.keys"
jq --arg k "$T/short.keys" '.keys_out = $k' "$T/load.json" >"$T/short.json"
rc=0
out=$("$STOCKD_SRC/loadtest/check-invariant" --run "$MYSQL_RUN" --db "$DB" --product "$F_PRODUCT" \
  --initial "$F_STOCK" --url "$F_NGINX" --load "$T/short.json" 2>&1) || rc=$?
expect_eq "a keys file one line short: exit status" 2 "$rc"
grep -q "does not match" <<<"$out" || fail "a keys file one line short: no reason in: $out"
echo "ok: a keys file one line short is refused"

# The clean run with its first deduction's answer lost: the keys file says which key,
# and retrying it must bring back that very order, replayed.
read -r key _ _ oid _ < <(awk '$2 == 200 && $3 == "deducted"' "$T/load.keys" | head -1)
awk -v k="$key" '$1 == k { $0 = k " 0 - 0 false 56" } 1' "$T/load.keys" >"$T/forged.keys"
jq --arg k "$T/forged.keys" --argjson oid "$oid" '.keys_out = $k | .counts.deducted -= 1 |
  .counts.transport_error += 1 | .order_ids -= [$oid] |
  .transport_errors["Failure when receiving data from the peer"] += 1' \
  "$T/load.json" >"$T/forged.json"
forged() {
  "$STOCKD_SRC/loadtest/check-invariant" --run "$MYSQL_RUN" --db "$DB" --product "$F_PRODUCT" \
    --initial "$F_STOCK" --url "$F_NGINX" --load "$T/forged.json" "$@"
}
out=$(forged --lossy) || fail "a lost answer whose key replays its order should pass: $out"
for want in lost=1 unanswered=1 resolved=1 retried=1 retried_replayed=1 retried_fresh=0; do
  grep -q " $want " <<<"$out" || fail "lost answer of key $key (order $oid): expected $want in: $out"
done
echo "ok: lost answer of key $key retried from the keys file: $out"
rc=0
out=$(forged) || rc=$?
((rc == 1)) && grep -q "violation: .*answers were lost" <<<"$out" ||
  fail "a lost answer in strict mode (from a keys file): expected a violation, got $rc: $out"
echo "ok: a lost answer from a keys file violates the strict invariant"

# A keys file whose lost key is an SQL fragment (the checker queries as root): the
# database must stay as it is, and the line be reported as a key (issue 16 #12).
evil="x';DROP/**/TABLE/**/orders;--"
awk -v k="$key" -v e="$evil" '$1 == k { $0 = e " 0 - 0 false 56" } 1' "$T/load.keys" >"$T/evil.keys"
jq --arg k "$T/evil.keys" '.keys_out = $k' "$T/forged.json" >"$T/evil.json"
n_orders=$(sql "SELECT COUNT(*) FROM orders")
rc=0
out=$("$STOCKD_SRC/loadtest/check-invariant" --run "$MYSQL_RUN" --db "$DB" --product "$F_PRODUCT" \
  --initial "$F_STOCK" --url "$F_NGINX" --load "$T/evil.json" --lossy 2>&1) || rc=$?
echo "$out"
expect_eq "orders after a key file with an SQL fragment" "$n_orders" "$(sql "SELECT COUNT(*) FROM orders" 2>&1)"
expect_eq "check-invariant's exit status for it" 1 "$rc"
grep -qF "violation: lost key '$evil'" <<<"$out" || fail "the fragment is not reported as a key: $out"
echo "ok: the SQL fragment was reported as a key and changed nothing"

# Real oversell: the seed's experiment (no lock, three instances, a think time).
stockd_stop "$T" 1
for i in 1 2 3; do stockd_start "$T" "$i" $((PORT0 + i)) none "$MYSQL_URL" "$STOCKD_TEST_ZK" \
  --think-us 1000; done
t_nginx 3
F_STOCK=50
f_reset
rm -f "$T/load.json"
f_load_start load --threads 100 --loops 10
f_load_wait load
echo "stock without a lock: $(stock "$F_PRODUCT")"
expect_violation "oversell without a lock" "oversold"
expect_violation "deductions at once without a lock" "deductions overlapped" --think-us 1000
echo PASS
