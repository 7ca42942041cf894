#!/usr/bin/env bash
# Rate limiting in front (article 001 section 8.3): nginx's limit_req keyed by the
# product id, a rate and a burst (STACK_NGINX_RATE_LIMIT=RATE:BURST, as
# `scripts/stack up --rate-limit` sets it), before three zk instances.
#   - A flood on one hot product: part of it is refused by nginx with 429 and a JSON
#     body ({"result":"rate_limited",...}, Content-Type application/json, Retry-After),
#     the rest is admitted and served.
#   - Nothing refused reaches stockd: the stock is exact (orders = initial - final, and
#     it did not run out), every "deducted" answer has its orders row and no row lacks
#     its answer (stockload's reconciliation).
#   - The key is the product: another product, flooded by nobody, is served at once.
# Whether a given request is admitted is timing; what is asserted is not.
source "$STOCKD_SRC/tests/lib.sh"

t_db
for i in 1 2 3; do t_stockd "$i" zk; done
STACK_NGINX_RATE_LIMIT=20:10 t_nginx 3
grep -q 'limit_req zone=stockd_product burst=10 nodelay' "$T/nginx/nginx.conf" ||
  fail "nginx.conf has no limit_req"

stock=5000
sql "UPDATE product SET stock = $stock WHERE id = 1; UPDATE product SET stock = 10 WHERE id = 2"

# 600 requests, 60 in flight, far above 20/s + 10.
"$STOCKLOAD_BIN" --url "http://127.0.0.1:$PORT0/stock/reduce?id=1" --threads 60 --loops 10 \
  --json --no-progress --mysql "$MYSQL_URL" --product 1 >"$T/load.json" || (($? == 1)) ||
  fail "stockload failed"
jq -c '.counts | with_entries(select(.value > 0))' "$T/load.json"
deducted=$(jq -r .counts.deducted "$T/load.json")
refused=$(jq -r .counts.http_4xx "$T/load.json")
((deducted > 0)) || fail "nothing was admitted"
((refused > 0)) || fail "nothing was refused by the rate limit"
expect_eq "every answer is a deduction or a refusal" 600 $((deducted + refused))
final=$(sql "SELECT stock FROM product WHERE id = 1")
orders=$(sql "SELECT COUNT(*) FROM orders WHERE product_id = 1")
expect_eq "ledger: orders = initial - final" $((stock - final)) "$orders"
expect_eq "ledger: orders = deducted answers" "$deducted" "$orders"
expect_eq "reconciliation (each answer its row, each row its answer)" ok \
  "$(jq -r .reconciliation.verdict "$T/load.json")"
echo "ok: admitted $deducted, refused $refused (429), admitted p99 $(jq -r .latency_ms_by_outcome.deducted.p99 "$T/load.json") ms"

# The refusal itself, as a client sees it: flood product 1 again, look at one 429.
# (Only the curls are waited for: the stockd instances are this shell's children too.)
pids=()
for n in $(seq 40); do
  curl -sS -m 10 -D "$T/h.$n" -o "$T/b.$n" "http://127.0.0.1:$PORT0/stock/reduce?id=1" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done
n429=$(grep -l '^HTTP/1.1 429' "$T"/h.* | head -1) || true
[[ -n $n429 ]] || fail "no 429 among 40 simultaneous requests on product 1"
b=$T/b.${n429##*.}
expect_eq "429 body result" rate_limited "$(jq -r .result "$b")"
jq -e '.message | length > 0' "$b" >/dev/null || fail "429 body has no message: $(cat "$b")"
grep -qi '^Content-Type: application/json' "$n429" || fail "429 is not JSON: $(cat "$n429")"
grep -qi '^Retry-After: 1' "$n429" || fail "429 has no Retry-After"
echo "ok: 429 answer: $(cat "$b")"

# Per product: product 2's bucket is its own.
code=$(curl -sS -m 10 -o "$T/p2" -w '%{http_code}' "http://127.0.0.1:$PORT0/stock/reduce?id=2")
expect_eq "product 2 while product 1 is limited" "200 deducted" "$code $(jq -r .result "$T/p2")"
