#!/usr/bin/env bash
# fence_kinds.sh switch|reset: issue 16's defect 7. The fence compares lock tokens, and
# each lock service has its own scale: a Redis token is the server's time in
# microseconds, a stock_lock token counts from 1, a czxid counts ZooKeeper's writes.
#
#   switch  Product 2 is deducted under redis (its fence is now ~1.7e15), then the same
#           instance restarts as db-lock (tokens from 1) and deducts again. Before
#           fence_kind this was 503 lock_lost for good; now the row's fence is of another
#           kind and the token is taken. Then back to redis, and to zk: each deducts.
#   reset   The tokens of one kind start over: db-lock deducts (its token ~N), then
#           stock_lock is TRUNCATEd, which resets its AUTO_INCREMENT, so the next tokens
#           are below the row's fence: 503 lock_lost, nothing deducted. Loading
#           sql/fence-reset.sql (the documented step) makes it deduct again.
# Each step checks the answer, the stock and the orders.
source "$STOCKD_SRC/tests/lib.sh"
t_db
sql "UPDATE product SET stock = 100, fence = 0 WHERE id = 2"
A=$((PORT0 + 1))
# under KIND: restarts instance 1 in lock mode KIND.
under() {
  stockd_stop "$T" 1
  t_stockd 1 "$1" --lock-timeout-ms 5000
}

case ${1:-} in
switch)
  n=0
  for kind in redis db-lock redis zk db-lock; do
    under "$kind"
    expect_eq "a deduction under $kind (row fenced by the previous kind)" "200 deducted" "$(reduce "$A" 2)"
    n=$((n + 1))
    echo "row after $kind: $(sql "SELECT fence, fence_kind, row_version FROM product WHERE id = 2")"
  done
  expect_eq "stock" $((100 - n)) "$(stock 2)"
  expect_eq "orders" "$n" "$(orders 2)"
  ;;
reset)
  under db-lock
  for i in 1 2 3; do expect_eq "db-lock deduction $i" "200 deducted" "$(reduce "$A" 2)"; done
  fence=$(sql "SELECT fence FROM product WHERE id = 2")
  echo "fence after three db-lock deductions: $fence"
  ((fence >= 3)) || fail "expected a db-lock token of at least 3, got $fence"
  stockd_stop "$T" 1
  sql "TRUNCATE TABLE stock_lock"
  under db-lock
  expect_eq "after TRUNCATE stock_lock (tokens start again at 1)" "503 lock_lost" "$(reduce "$A" 2)"
  expect_eq "stock: nothing deducted" 97 "$(stock 2)"
  mysql_cli "$STOCKD_TEST_RUN" "$DB" <"$STOCKD_SRC/sql/fence-reset.sql"
  expect_eq "after sql/fence-reset.sql" "200 deducted" "$(reduce "$A" 2)"
  expect_eq "stock" 96 "$(stock 2)"
  expect_eq "orders" 4 "$(orders 2)"
  ;;
*) fail "usage: fence_kinds.sh switch|reset" ;;
esac
