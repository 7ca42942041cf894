#!/usr/bin/env bash
# loadtest/memory in a tiny run: two zk instances, two chunks of 1000 requests with 100
# in flight, on the command's own stack inside this test's ports. It checks what the
# command promises, not how much memory anything took: a row per instance with a peak
# (VmHWM) at least the RSS after the last chunk, the RSS after each chunk, the run
# judged exact, and that ledger read again here from the kept stack's database. About
# 20 s.
#
# usage: memory_smoke.sh PATH/TO/stockload   (run by ctest with the STOCKD_* variables)
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/loadtest/tool_stack.sh"
tool_stack "${1:?usage: memory_smoke.sh PATH/TO/stockload}"

# Exit 3 is a missed memory target: a measurement, not a failure of the command.
rc=0
"$STOCKD_SRC/loadtest/memory" --instances 2 --lock zk --threads 100 --chunk 1000 --total 2000 \
  --run "$run" --port-base "$PORT0" --keep </dev/null >"$T/stdout" || rc=$?
cat "$T/stdout"
((rc == 0 || rc == 3)) || fail "loadtest/memory failed (exit $rc)"

grep -q 'exact: yes (stock 4000 -> 2000, orders 2000, deducted answers 2000, other answers 0)' \
  "$T/stdout" || fail "the run is not reported exact with 2000 deductions"
for i in 1 2; do
  row=$(grep "^| stockd-$i |" "$T/stdout") || fail "no row for stockd-$i"
  # | stockd-i | idle | peak | after 1000 | after 2000 | growth | fds |
  IFS='|' read -r _ _ idle peak r1 rn _ fds _ <<<"$row"
  awk -v p="$peak" -v r="$rn" -v i="$idle" 'BEGIN { exit !(p + 0 >= r + 0 && r + 0 > 0 && i + 0 > 0) }' ||
    fail "stockd-$i: peak $peak below the last RSS $rn (or none)"
  ((fds > 0)) || fail "stockd-$i: no descriptors seen"
done
grep -Eq '^ +2000: [0-9.]+ [0-9.]+$' "$T/stdout" || fail "no RSS line after the second chunk"
grep -Eq '^Targets: peak <= 16 MB per instance, growth <= 10%: (met|MISSED)$' "$T/stdout" ||
  fail "no verdict on the targets"

# The ledger, read again from the kept stack's database.
q() { mariadb --no-defaults -uroot -S "$run/mysql/sock" -N -B shop -e "$1"; }
expect_eq "orders rows of product 1" 2000 "$(q 'SELECT COUNT(*) FROM orders WHERE product_id=1')"
expect_eq "stock of product 1" 2000 "$(q 'SELECT stock FROM product_stock WHERE id=1')"
echo "ok: loadtest/memory measured two instances over two chunks, exact"
