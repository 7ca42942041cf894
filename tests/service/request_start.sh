#!/usr/bin/env bash
# request_start.sh MODE: --queue-deadline-ms counts from when the proxy in front sent the
# request (its X-Request-Start header, "t=<seconds>.<milliseconds>" as nginx's
# "t=${msec}" writes it), not from when stockd took it in. A request that spent longer
# than the deadline before stockd saw it (in the listen backlog, say) is answered 503
# overloaded and deducts nothing: nginx, whose proxy_read_timeout counts from the send,
# may have answered 504 already. One sent just now is deducted, and a header stockd
# cannot trust (malformed, in the future, older than its bound) is ignored: the request
# is served as if it had none. Talks to stockd directly, so the test sets the header.
# Before the fix the expired request was deducted.
source "$STOCKD_SRC/tests/lib.sh"
mode=${1:?mode}

t_db
sql "UPDATE product SET stock = 10 WHERE id = 1"
t_stockd 1 "$mode" --queue-deadline-ms 2000
url="http://127.0.0.1:$((PORT0 + 1))/stock/reduce?id=1"

# sent SECONDS_AGO: an X-Request-Start value that many seconds before now (negative: in
# the future), with milliseconds, as nginx writes it.
sent() {
  local now=${EPOCHREALTIME/,/.}
  echo "t=$((${now%.*} - $1)).${now#*.}" | cut -c1-16
}
# ask KEY HEADER_VALUE: one deduction with that idempotency key and X-Request-Start;
# prints "CODE RESULT".
ask() {
  local code
  code=$(curl -sS -m 30 -o "$T/$1.body" -w '%{http_code}' -H "Idempotency-Key: $1" \
    -H "X-Request-Start: $2" "$url")
  echo "$code $(jq -r .result "$T/$1.body")"
}
order_of() { sql "SELECT COUNT(*) FROM orders WHERE request_id = '$1'"; }

old=$(sent 10)
expect_eq "a request sent 10 s ago, deadline 2 s ($old)" "503 overloaded" "$(ask rs-old "$old")"
jq -r .message "$T/rs-old.body" | grep -q "queue deadline" ||
  fail "not the deadline's answer: $(cat "$T/rs-old.body")"
expect_eq "no order for it" 0 "$(order_of rs-old)"
expect_eq "stock after it" 10 "$(stock 1)"

expect_eq "a request sent just now" "200 deducted" "$(ask rs-fresh "$(sent 0)")"
expect_eq "its order" 1 "$(order_of rs-fresh)"
expect_eq "stock after it" 9 "$(stock 1)"

# Ignored, so served as without the header: each is deducted.
n=0
for bad in "t=abc" "$(sent 10 | tr -d t=)" "$(sent -60)" "$(sent 3600)"; do
  n=$((n + 1))
  expect_eq "X-Request-Start '$bad' (ignored)" "200 deducted" "$(ask "rs-bad-$n" "$bad")"
done
expect_eq "stock after the ignored ones" 5 "$(stock 1)"
expect_eq "orders: every deduction's, no other" 5 "$(orders 1)"
alive 1
echo "ok: $mode: the queue deadline counts from the proxy's send"
