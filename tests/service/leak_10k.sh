#!/usr/bin/env bash
# No leak in a stockd run of 10k requests: deductions (deducted and sold out, with and
# without idempotency keys), bad input, reads, health and metrics, in zk mode so the
# lock's paths run too; then SIGTERM. LeakSanitizer reports at exit into the log, and
# tests/lib.sh fails the test on any report. It needs the AddressSanitizer build
# (scripts/test runs the suite under it); in other builds it is skipped.
source "$STOCKD_SRC/tests/lib.sh"
ldd "$STOCKD_BIN" | grep -q libasan || {
  echo "SKIP: needs the AddressSanitizer build (scripts/test runs it there)"
  exit 77
}
load=$STOCKD_BUILD/loadtest/stockload
t_db
sql "UPDATE product SET stock=3000 WHERE id=2"
t_stockd 1 zk
base=http://127.0.0.1:$((PORT0 + 1))
"$load" --url "$base/stock/reduce?id=2" --threads 20 --loops 250 --no-progress >/dev/null
"$load" --url "$base/stock/reduce?id=2" --threads 10 --loops 200 --idempotency --no-progress >/dev/null
"$load" --url "$base/stock/reduce?id=abc" --threads 10 --loops 100 --no-progress >/dev/null || true
"$load" --url "$base/stock?id=2" --threads 10 --loops 100 --no-progress >/dev/null
"$load" --url "$base/health" --threads 5 --loops 100 --no-progress >/dev/null || true
"$load" --url "$base/metrics" --threads 5 --loops 100 --no-progress >/dev/null || true
expect_eq "stock after 3000 deductions" 0 "$(sql 'SELECT stock FROM product WHERE id=2')"
expect_eq "orders" 3000 "$(sql 'SELECT COUNT(*) FROM orders WHERE product_id=2')"
stockd_stop "$T" 1
grep -q "stopped" "$T/stockd/1.log" || fail "stockd did not stop in order"
echo "PASS (leaks, if any, are reported by the log scan on exit)"
