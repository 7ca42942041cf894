#!/usr/bin/env bash
# stockd_product_stock, the gauge behind the oversell alert (service/stockwatch.c), on
# one stockd in mode none:
#   - it is the table's stock, read back within a second of each request, not the
#     stock a deduction computed: another writer's -3 shows after the next request;
#   - a product read negative is read again every second, so a restock by hand shows
#     without any further deduction;
#   - at most 1000 products, the most recently served: after 1005 products were served
#     one after the other, the first 5 have no series and the last 1000 do.
source "$STOCKD_SRC/tests/lib.sh"

t_db
t_stockd 1 none
url=http://127.0.0.1:$((PORT0 + 1))
# gauge_becomes ID VALUE WHAT: waits up to 3 s (three passes of the watch).
gauge_becomes() {
  local id=$1 want=$2
  wait_until 3 eval '[[ $(gauge $((PORT0 + 1)) "$id") == "$want" ]]' ||
    fail "$3: stockd_product_stock{product=\"$1\"} is '$(gauge $((PORT0 + 1)) "$1")', expected $2"
  echo "ok: $3: stockd_product_stock{product=\"$1\"} = $2"
}

mysql_set_stock "$STOCKD_TEST_RUN" "$DB" 1 5
curl -fsS -o /dev/null "$url/stock/reduce?id=1" || fail "deduction failed"
gauge_becomes 1 4 "after one deduction"
# Another writer (a second instance, a person) changes the row: no deduction here.
sql "UPDATE product SET stock = -3 WHERE id = 1"
curl -sS -o /dev/null "$url/stock/reduce?id=1" # sold out (409): the batch read -3
gauge_becomes 1 -3 "after another writer oversold it"
sql "UPDATE product SET stock = 7 WHERE id = 1"
gauge_becomes 1 7 "after a restock by hand, with no request"

# 1005 products, served in order over one keep-alive connection (curl's URL range).
sql "INSERT INTO product (id, product_name, stock) SELECT seq, CONCAT('p', seq), 1
     FROM seq_1001_to_2005"
curl -sS -o /dev/null "$url/stock/reduce?id=[1001-2005]" || fail "the 1005 deductions failed"
expect_eq "deductions of products 1001..2005" 0 "$(sql "SELECT SUM(stock) FROM product WHERE id > 1000")"
wait_until 5 eval '(($(metric_series stockd_product_stock $((PORT0 + 1))) == 1000))' ||
  fail "expected 1000 stockd_product_stock series, got $(metric_series stockd_product_stock $((PORT0 + 1)))"
echo "ok: 1000 stockd_product_stock series, no more"
for id in 1 1001 1005; do
  [[ -z $(gauge $((PORT0 + 1)) "$id") ]] ||
    fail "product $id, among the least recently served, still has a series"
done
for id in 1006 1500 2005; do
  [[ $(gauge $((PORT0 + 1)) "$id") == 0 ]] ||
    fail "product $id, among the 1000 most recent, has no series at 0"
done
echo "ok: the 1000 most recently served products have a series; the oldest do not"
