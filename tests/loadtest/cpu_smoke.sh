#!/usr/bin/env bash
# loadtest/cpu in a tiny run: batched zk, round-robin, spread over 10 products, stockload
# with 10 in flight for 2 s, on the command's own stack inside this test's ports. It checks
# what the command promises, not how fast anything was: the table has a row for every
# process kind of a zk stack (stockd, nginx's master and worker, mariadbd, ZooKeeper,
# Redis, the client) and a sum; stockd and mariadbd used CPU (a deduction cannot be made
# without both); the sum row is the sum of the rows; the deductions it reports are the
# orders rows the database holds afterwards (counted here, on the kept stack), the stock
# went down by exactly that many, and stockload answered each of them; ZooKeeper
# operations and MySQL statements per deduction are positive. About 30 s.
#
# usage: cpu_smoke.sh PATH/TO/stockload   (run by ctest with the STOCKD_* variables)
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/loadtest/tool_stack.sh"
tool_stack "${1:?usage: cpu_smoke.sh PATH/TO/stockload}" jq

# --keep: the ledger is read again here, from the database, after the command is done.
"$STOCKD_SRC/loadtest/cpu" --mode zk --route round-robin --load spread --products 10 \
  --concurrency 10 --seconds 2 --warmup 1 --run "$run" --port-base "$PORT0" --out "$out" --keep \
  </dev/null | tee "$T/stdout" || fail "loadtest/cpu failed"

for f in cpu.md cpu.json; do [[ -s $out/$f ]] || fail "missing or empty: $out/$f"; done
j=$out/cpu.json
jq -e . "$j" >/dev/null || fail "cpu.json does not parse"
q() { jq -r "$1" "$j"; }

for kind in stockd nginx-master nginx-worker mariadbd zookeeper redis-server client; do
  [[ $(q "[.processes[] | select(.kind == \"$kind\")] | length") -ge 1 ]] ||
    fail "no process of kind $kind in cpu.json"
  grep -Eq "^\| $kind \| " "$out/cpu.md" || fail "cpu.md has no row of kind $kind"
done
expect_eq "stockd rows" 3 "$(q '[.processes[] | select(.kind == "stockd")] | length')"
grep -q '^| \*\*sum\*\* |' "$out/cpu.md" || fail "cpu.md has no sum row"
for kind in stockd mariadbd; do
  q ".by_kind[] | select(.kind == \"$kind\") | .cpu_s > 0" | grep -qx true ||
    fail "$kind used no CPU for the load: $(q ".by_kind[] | select(.kind == \"$kind\")")"
done
expect_eq "sum row = the sum of the rows" true \
  "$(q '(.sum.cpu_s - ([.processes[].cpu_s] | add)) | fabs < 1e-6')"
expect_eq "µs per deduction = CPU s / deductions" true \
  "$(q '(.sum.cpu_us_per_deduction - .sum.cpu_s * 1e6 / .deductions) | fabs < 1e-3')"

# The ledger, from the database itself (the stack was kept).
sqlq() { mysql_cli "$run" -N -B shop -e "$1"; }
d=$(q .deductions)
((d > 0)) || fail "no deductions"
w=$(q .warmup_deductions)
((w > 0)) || fail "the 1 s warm-up made no deduction"
expect_eq "orders rows = the warm-up's and the load's deductions" $((w + d)) \
  "$(sqlq 'SELECT COUNT(*) FROM orders WHERE product_id BETWEEN 1001 AND 1010')"
expect_eq "stock = initial - deductions (exact)" $((10 * 100000000 - w - d)) \
  "$(sqlq 'SELECT SUM(stock) FROM product_stock WHERE id BETWEEN 1001 AND 1010')"
expect_eq "stockload's deduction answers" "$d" "$(q .ledger.client_deduction_answers)"
expect_eq "other answers" 0 "$(q .ledger.client_other_answers)"
expect_eq "exact" true "$(q .ledger.exact)"
q '.per_deduction.zk_fsyncs > 0 and .per_deduction.mysql_commits > 0' | grep -qx true ||
  fail "no ZooKeeper fsync or MariaDB COMMIT counted: $(jq -c .servers "$j")"
q '.per_deduction.zk_ops > 0 and .per_deduction.mysql_statements > 0 and .rps > 0' | grep -qx true ||
  fail "no ZooKeeper operations, MySQL statements or rate: $(jq -c '[.per_deduction, .rps]' "$j")"
echo "ok: $d deductions, $(q '.sum.cpu_us_per_deduction | round') CPU µs each over $(q '.processes | length') processes"
