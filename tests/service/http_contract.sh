#!/usr/bin/env bash
# stockd's HTTP contract against a real MariaDB: every route and status code, JSON on
# every answer, the ledger row behind every deduction, idempotency keys, and 503 (never
# a deduction) when MySQL cannot be reached.
source "$STOCKD_SRC/tests/lib.sh"

t_db
t_stockd 1 none
base=http://127.0.0.1:$((PORT0 + 1))

# call METHOD PATH [curl args...]: sets $status and $body; checks the answer is JSON
# with a "result" field.
call() {
  local method=$1 path=$2 f
  shift 2
  f=$T/body
  status=$(curl -sS -o "$f" -w '%{http_code}' -X "$method" "$@" "$base$path")
  body=$(cat "$f")
  if [[ $method != HEAD ]]; then
    jq -e 'has("result")' <<<"$body" >/dev/null || fail "$method $path: not a JSON answer: $body"
  fi
}
field() { jq -r ".$1" <<<"$body"; }

# expect METHOD PATH STATUS RESULT [curl args...]
expect() {
  local method=$1 path=$2 want_status=$3 want_result=$4
  shift 4
  call "$method" "$path" "$@"
  [[ $status == "$want_status" ]] || fail "$method $path: expected $want_status, got $status: $body"
  [[ $want_result == - || $(field result) == "$want_result" ]] ||
    fail "$method $path: expected result $want_result, got $body"
  echo "ok: $method $path -> $status $want_result"
}

expect GET /health 200 ok
[[ $(field mysql) == up ]] || fail "health: $body"

# A deduction: 200, stock down by one, an orders row with the answered order_id.
expect GET "/stock?id=2" 200 ok
before=$(field stock)
expect GET "/stock/reduce?id=2" 200 deducted
order=$(field order_id)
expect_eq "stock after one deduction" $((before - 1)) "$(field stock)"
expect_eq "stock in the database" $((before - 1)) "$(sql 'SELECT stock FROM product WHERE id=2')"
expect_eq "orders row for the answer" "2 stockd-1" "$(sql "SELECT product_id, instance FROM orders WHERE id=$order" | tr '\t' ' ')"
expect POST "/stock/reduce?id=2" 200 deducted

# Sold out: 409, nothing written.
sql "UPDATE product SET stock=0 WHERE id=3"
n=$(sql "SELECT COUNT(*) FROM orders")
expect GET "/stock/reduce?id=3" 409 sold_out
expect_eq "stock stays 0" 0 "$(sql 'SELECT stock FROM product WHERE id=3')"
expect_eq "no order for a sold-out answer" "$n" "$(sql 'SELECT COUNT(*) FROM orders')"

# Unknown product and bad ids: 404 and 400, nothing written.
expect GET "/stock/reduce?id=999" 404 not_found
expect GET "/stock?id=999" 404 not_found
for bad in "" "?id=" "?id=abc" "?id=1abc" "?id=-1" "?id=0" "?id=1.5" "?id=0x10" "?id=1e3" \
  "?id=%2B1" "?id=2147483648" "?id=99999999999999999999" "?id=%201" "?id=1%00" \
  "?id=1&id=2" "?id=1%27%20OR%201=1" "?id=1;DROP%20TABLE%20product"; do
  expect GET "/stock/reduce$bad" 400 bad_request
done
expect_eq "no order from bad requests" "$n" "$(sql 'SELECT COUNT(*) FROM orders')"

# A customer (docs/orders.md): 1..64 of [A-Za-z0-9_.@-], from user= or X-User, agreeing.
long=$(printf 'u%.0s' $(seq 65))
for bad in "user=" "user=a%20b" "user=a/b" "user=$long" "user=a&user=a"; do
  expect GET "/stock/reduce?id=2&$bad" 400 bad_request
done
expect GET "/stock/reduce?id=2&user=alice" 400 bad_request -H "X-User: bob"
expect GET "/stock/reduce?id=2" 400 bad_request -H "X-User: $long"
expect_eq "no order from a bad customer" "$n" "$(sql 'SELECT COUNT(*) FROM orders')"
expect GET "/stock/reduce?id=2&user=alice" 200 deducted -H "X-User: alice"
alices=$(field order_id)
expect_eq "the order's customer" "alice sold" "$(sql "SELECT user, state FROM orders WHERE id=$alices" | tr '\t' ' ')"
n=$(sql 'SELECT COUNT(*) FROM orders')
# Pay and cancel: POST, a customer, an order that exists and is theirs.
expect POST "/orders/$alices/pay" 400 bad_request
expect POST "/orders/$alices/pay?user=bob" 403 not_your_order
expect POST "/orders/$alices/pay?user=alice" 409 not_reserved
expect POST "/orders/999999999/cancel?user=alice" 404 not_found
expect GET "/orders/1/pay?user=alice" 405 method_not_allowed
expect POST "/orders/x/pay?user=alice" 400 bad_request
expect POST "/orders/1/ship?user=alice" 404 not_found
# Restock without --admin-token-file: refused, nothing changed.
expect POST "/stock/restock?id=2&units=5" 401 unauthorized
expect POST "/stock/restock?id=2&units=5" 403 forbidden -H "Authorization: Bearer x"
expect_eq "no restock" 0 "$(sql 'SELECT COUNT(*) FROM restock')"

# Routes and methods.
expect GET /nope 404 not_found
expect GET /stock/reduce/1 404 not_found
for m in PUT DELETE PATCH; do
  expect "$m" "/stock/reduce?id=2" 405 method_not_allowed
done
call HEAD "/stock/reduce?id=2" -I
expect_eq "HEAD on /stock/reduce" 405 "$status"
call GET "/stock/reduce?id=2" -D "$T/headers" -o /dev/null
expect PUT "/stock?id=2" 405 method_not_allowed -D "$T/headers"
grep -qi '^allow: GET, HEAD' "$T/headers" || fail "405 without an Allow header"
grep -qi '^content-type: application/json' "$T/headers" || fail "answer is not application/json"
expect GET "/stock/reduce?id=2" 400 bad_request --data-binary 'id=2' -H 'Content-Type: text/plain'
# A body streamed past 8 MiB is not read to its end: the connection is closed (no
# answer), nothing is deducted, and the service goes on serving.
n=$(sql "SELECT COUNT(*) FROM orders")
code=$(head -c 100000000 /dev/zero | curl -s -m 30 -o /dev/null -w '%{http_code}' -X POST \
  -H 'Transfer-Encoding: chunked' --data-binary @- "$base/stock/reduce?id=2" || true)
[[ $code != 200 && $code != 400 ]] || fail "a 100 MB body was read to its end (answer $code)"
expect_eq "no order from an oversized body" "$n" "$(sql 'SELECT COUNT(*) FROM orders')"
expect GET /health 200 ok

# Idempotency: the same key twice deducts once and answers the same order.
before=$(sql 'SELECT stock FROM product WHERE id=4')
expect GET "/stock/reduce?id=4" 200 deducted -H 'Idempotency-Key: order-42'
first=$(field order_id)
expect GET "/stock/reduce?id=4" 200 deducted -H 'Idempotency-Key: order-42'
expect_eq "replayed order" "$first" "$(field order_id)"
expect_eq "replayed flag" true "$(field replayed)"
expect GET "/stock/reduce?id=4&request_id=order-42" 200 deducted
expect_eq "request_id is the same key" "$first" "$(field order_id)"
expect_eq "one deduction for one key" $((before - 1)) "$(sql 'SELECT stock FROM product WHERE id=4')"
expect GET "/stock/reduce?id=4" 400 bad_request -H 'Idempotency-Key: bad key!'
expect GET "/stock/reduce?id=4&request_id=a" 400 bad_request -H 'Idempotency-Key: b'
# Two keys are refused alike, as parameters or as headers, and deduct nothing.
expect GET "/stock/reduce?id=4&request_id=a&request_id=b" 400 bad_request
expect GET "/stock/reduce?id=4" 400 bad_request -H 'Idempotency-Key: order-42' -H 'Idempotency-Key: other'
expect_eq "why" "Idempotency-Key given more than once" "$(field message)"
expect_eq "nothing deducted for two keys" $((before - 1)) "$(sql 'SELECT stock FROM product WHERE id=4')"

# /metrics: Prometheus text that the reference parser accepts, counting what we did.
curl -sS -D "$T/mheaders" "$base/metrics" >"$T/metrics"
grep -qi '^content-type: text/plain; version=0.0.4' "$T/mheaders" || fail "/metrics content type"
/usr/bin/python3 "$STOCKD_SRC/tests/service/prom_parse.py" <"$T/metrics" >"$T/samples" ||
  fail "/metrics does not parse"
deducted=$(sql "SELECT COUNT(*) FROM orders WHERE instance='stockd-1'")
grep -qx "stockd_requests_total{code=\"200\",result=\"deducted\",route=\"/stock/reduce\"} $((deducted + 2))" "$T/samples" ||
  fail "deducted count in /metrics (want $deducted orders + 2 replays): $(grep requests_total "$T/samples")"
grep -qx 'stockd_requests_total{code="409",result="sold_out",route="/stock/reduce"} 1' "$T/samples" ||
  fail "sold_out count in /metrics"
grep -qx 'stockd_deduction_seconds_count{} '"$((deducted + 2 + 1 + 1))" "$T/samples" ||
  fail "deduction histogram count: $(grep deduction_seconds_count "$T/samples")"
echo "ok: /metrics parses and counts $deducted deductions"

# A second instance on a port in use exits non-zero and says so, instead of sharing it
# (SO_REUSEPORT would let the kernel split connections between the two).
rc=0
timeout 10 "$(stockd_bin)" --port $((PORT0 + 1)) --lock none --mysql "$MYSQL_URL" \
  --instance twin >"$T/twin.log" 2>&1 || rc=$?
((rc != 0 && rc != 124)) || fail "a second stockd on port $((PORT0 + 1)) did not exit non-zero (rc $rc)"
grep -q 'in use' "$T/twin.log" || fail "no 'in use' in the second instance's log: $(cat "$T/twin.log")"
expect GET /health 200 ok
echo "ok: a second stockd on a port in use exits $rc: $(head -n 1 "$T/twin.log")"

# MySQL unreachable: 503 unavailable, and /health says so.
free_port=$((PORT0 + 19))
MYSQL_URL="mysql://$DB_USER@127.0.0.1:$free_port/$DB" t_stockd 2 none
base=http://127.0.0.1:$((PORT0 + 2))
wait_until 10 curl -s "$base/health" || fail "stockd without MySQL did not answer /health"
expect GET /health 503 unavailable
[[ $(field mysql) == down ]] || fail "health without MySQL: $body"
expect GET "/stock/reduce?id=2" 503 unavailable
expect GET "/stock?id=2" 503 unavailable

# SIGTERM: exits 0.
pid=$(cat "$T/stockd/2.pid")
kill -TERM "$pid"
wait_until 10 eval "! kill -0 $pid" || fail "stockd did not stop on SIGTERM"
grep -q "stopped" "$T/stockd/2.log" || fail "no orderly stop in the log"
echo "PASS"
