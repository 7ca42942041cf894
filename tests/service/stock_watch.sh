#!/usr/bin/env bash
# stock_watch.sh: the stockd_product_stock gauge (service/stockwatch.c) never forgets a
# product whose stock reads negative while it stays negative, however many other
# products are served meanwhile: the oversell alert must not resolve over an oversell
# that stays. One stockd (mode none); product 5000 is set to -3 by hand and served
# once, until the gauge reads -3; then 1,100 other products (more than the watch's
# 1,000 entries) are each served once. Checked: once the watch has read the last of
# them, product 5000 still reads -3, the others kept are the 999 most recently served,
# and a restock by hand clears it to 4 without any
# deduction. About 10 s.
source "$STOCKD_SRC/tests/lib.sh"

t_db
sql "INSERT INTO product (id, product_name, stock) VALUES (5000, 'oversold', -3)
       ON DUPLICATE KEY UPDATE stock = -3;
     INSERT INTO product (id, product_name, stock) SELECT seq, 'watched', 5 FROM seq_5001_to_6100
       ON DUPLICATE KEY UPDATE stock = 5"
t_stockd 1 none
port=$((PORT0 + 1))
is() { [[ $(gauge "$port" "$1") == "$2" ]]; }

expect_eq "the oversold product's answer" "409 sold_out" "$(reduce "$port" 5000)"
wait_until 10 is 5000 -3 || fail "the gauge never read product 5000's -3: '$(gauge "$port" 5000)'"
# 1,100 products, one deduction each, on one keep-alive connection (curl's URL range).
curl -sS -o /dev/null "http://127.0.0.1:$port/stock/reduce?id=[5001-6100]" ||
  fail "the deductions of products 5001..6100"
full() { [[ $(metric_series stockd_product_stock "$port") == 1000 ]] && is 6100 4; }
wait_until 15 full ||
  fail "the gauge never read the last products: $(metric_series stockd_product_stock "$port") series, 6100 at '$(gauge "$port" 6100)'"
expect_eq "product 5000's gauge after 1,100 other products" -3 "$(gauge "$port" 5000)"
# The table holds 5000 and the 999 most recently served: 5102..6100.
expect_eq "5102, the least recently served one kept" 4 "$(gauge "$port" 5102)"
expect_eq "5101, the last one forgotten" "" "$(gauge "$port" 5101)"
expect_eq "product 5000's stock" -3 "$(stock 5000)"

sql "UPDATE product SET stock = 4 WHERE id = 5000"
wait_until 10 is 5000 4 || fail "a restock by hand did not show: '$(gauge "$port" 5000)'"
echo "ok: a restock by hand shows without a deduction"
