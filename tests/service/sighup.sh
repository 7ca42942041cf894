#!/usr/bin/env bash
# SIGHUP stops stockd the way SIGTERM does (issue 16, defect 12): six deductions are in
# flight (each inside a 1.5 s pause between its read and its write) when SIGHUP
# arrives. Every one of them is answered 200 deducted, none has its connection reset,
# the stock and the orders move by six, and the process exits 0. Its default action
# would kill the process on the spot: curl would see an empty reply and the exit status
# would be 129.
source "$STOCKD_SRC/tests/lib.sh"

t_db
port=$((PORT0 + 1))
p=2
sql "UPDATE product SET stock = 100 WHERE id = $p"
n0=$(sql "SELECT COUNT(*) FROM orders WHERE product_id = $p")
mkdir -p "$T/stockd"
"$(stockd_bin)" --port "$port" --lock none --mysql "$MYSQL_URL" --zk "$STOCKD_TEST_ZK" \
  --instance stockd-1 --think-us 1500000 >"$T/stockd/1.log" 2>&1 &
pid=$!
echo "$pid" >"$T/stockd/1.pid"
wait_until 20 http_answers "http://127.0.0.1:$port/health" || fail "stockd did not start: $(cat "$T/stockd/1.log")"

curls=()
for i in 1 2 3 4 5 6; do
  curl -sS -m 30 -o "$T/body.$i" -w '%{http_code}' "http://127.0.0.1:$port/stock/reduce?id=$p" \
    >"$T/code.$i" 2>"$T/err.$i" &
  curls+=($!)
done
# All six are in flight: stockd has accepted their connections (each then goes into its
# 1.5 s pause).
wait_until 10 eval '(($(tcp_conns "sport = :$port" stockd) >= 6))' ||
  fail "stockd accepted $(tcp_conns "sport = :$port" stockd) of the six connections"
kill -HUP "$pid"
for c in "${curls[@]}"; do wait "$c" || true; done
rc=0
wait "$pid" || rc=$?
for i in 1 2 3 4 5 6; do
  got="$(cat "$T/code.$i") $(jq -r .result "$T/body.$i" 2>/dev/null || echo -)"
  [[ -s $T/err.$i ]] && echo "curl $i: $(cat "$T/err.$i")"
  expect_eq "request $i, in flight at SIGHUP" "200 deducted" "$got"
done
expect_eq "stockd's exit status after SIGHUP" 0 "$rc"
expect_eq "stock" 94 "$(sql "SELECT stock FROM product WHERE id = $p")"
expect_eq "orders" $((n0 + 6)) "$(sql "SELECT COUNT(*) FROM orders WHERE product_id = $p")"
grep -q 'signal 1: stop accepting' "$T/stockd/1.log" || fail "no drain line in the log: $(cat "$T/stockd/1.log")"
echo "ok: $(grep 'signal 1' "$T/stockd/1.log")"
