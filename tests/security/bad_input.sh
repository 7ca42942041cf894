#!/usr/bin/env bash
# Bad input, table-driven: every row is one hostile or malformed request, sent once to a
# stockd (lock mode none) directly and once through a real nginx in front of it, each
# with the answer expected there. Every answer must be JSON with a "result" (and a
# "message" for an error), except where an HTTP layer below stockd answers by itself
# (libmicrohttpd or nginx, marked @mhd / @nginx: a request they cannot parse or that does
# not fit their buffers never reaches stockd). After the table stockd and nginx still run,
# /health answers 200, and no bad request deducted anything (orders and stock unchanged).
#
# Decisions this table documents:
# - The query is percent-decoded before the id is parsed (by libmicrohttpd), so
#   id=%39%39%39 is id=999 (a valid id: 404 for the missing product) and %69d=abc is
#   id=abc. Decoded bytes are then held to the strict id grammar: %00, %20, %2B, %0A and
#   non-ASCII digits are refused. Invalid escapes (%ZZ, a lone %) stay as they are.
# - The path is percent-decoded too and routed without normalisation: /stock%2Freduce is
#   /stock/reduce, while /stock/./reduce, //stock/reduce and /stock/reduce/ are unknown
#   routes. nginx normalises for its own location match but passes the request line on
#   unchanged (proxy_pass without a URI), so stockd decides the same either way.
# - Ids are probed with product 999 (absent) whenever a row might be accepted, so that a
#   wrongly accepted row answers 404 and never deducts.
#
# Rows tagged S1 fail until the service change S1 (stockd answers an over-long URI with
# 414 and over-large headers with 431 in JSON; see the security report), rows tagged N1
# until the nginx change N1 (JSON for the errors nginx answers itself: 400, 405, 413,
# 414, 431). The test prints each failing row with its tag and fails at the end.
source "$STOCKD_SRC/tests/lib.sh"

t_db
t_stockd 1 none
t_nginx 1
direct=$((PORT0 + 1))
proxy=$PORT0
raw=$STOCKD_SRC/tests/security/rawhttp.py
head -c 2000000 /dev/zero | tr '\0' x >"$T/body-2mb"

ledger() { sql "SELECT (SELECT COUNT(*) FROM orders), (SELECT SUM(stock) FROM product)" | tr '\t' ' '; }
before=$(ledger)

# expand S: replaces each @A<n>@ by n letters 'a' (long URLs and headers).
expand() {
  local s=$1 n
  while [[ $s =~ @A([0-9]+)@ ]]; do
    n=${BASH_REMATCH[1]}
    s=${s/"@A$n@"/$(head -c "$n" /dev/zero | tr '\0' a)}
  done
  printf '%s' "$s"
}

# send PORT METHOD TARGET [CURL ARGS...]: sets status, ctype, allow and body. METHOD RAW
# sends TARGET as it is through rawhttp.py (status "closed" if there was no answer).
send() {
  local port=$1 method=$2 target a args=() line
  target=$(expand "$3")
  shift 3
  for a in "$@"; do args+=("$(expand "$a")"); done
  status=000 ctype=- allow="" body=""
  if [[ $method == RAW ]]; then
    line=$(/usr/bin/python3 "$raw" "$port" "$target") || line="ERROR"
    case $line in
    CLOSED) status=closed ;;
    TIMEOUT | ERROR) status=${line,,} ;;
    *) IFS=$'\t' read -r status ctype body <<<"$line" ;;
    esac
    return 0
  fi
  rm -f "$T/body" "$T/headers"
  local m=(-X "$method")
  [[ $method == HEAD ]] && m=(-I)
  status=$(curl -sS --path-as-is -m 30 -o "$T/body" -D "$T/headers" -w '%{http_code}' "${m[@]}" \
    "${args[@]}" "http://127.0.0.1:$port$target" 2>"$T/curl.err") || status=000
  [[ -e $T/body ]] && body=$(cat "$T/body")
  if [[ -e $T/headers ]]; then
    ctype=$(sed -n 's/^[Cc]ontent-[Tt]ype: *\([^\r]*\).*/\1/p' "$T/headers" | tail -n 1)
    allow=$(sed -n 's/^[Aa]llow: *\([^\r]*\).*/\1/p' "$T/headers" | tail -n 1)
  fi
  [[ -n $ctype ]] || ctype=-
}

failures=()
rows=0

# check WHERE EXPECT NAME: compares the last answer with EXPECT = STATUS;RESULT;ALLOW;TAG.
# RESULT is the JSON result word, or @mhd / @nginx (that layer answered; only the status
# is checked, and for a 414 / 431 @mhd that the body is not JSON: libmicrohttpd's own
# answer to a head too large for its pool, which docs/operating.md's "Memory" documents), or @none
# (HEAD: no body).
check() {
  local where=$1 name=$3 want_status want_result want_allow tag why=""
  IFS=';' read -r want_status want_result want_allow tag <<<"$2"
  if [[ $status != "$want_status" ]]; then
    why="status $status, expected $want_status"
  elif [[ $want_result == @mhd && $want_status =~ ^(414|431)$ &&
    $ctype == application/json* ]]; then
    why="JSON from stockd, where libmicrohttpd's own answer was expected (docs/operating.md: Memory)"
  elif [[ $want_result != @* ]]; then
    # One jq per answer (the rows are many, and a loaded machine starts processes
    # slowly): "RESULT<TAB>HAS-MESSAGE", or "-" for anything but an object with a result.
    local got=-
    [[ $ctype == application/json* ]] && got=$(jq -r 'if type == "object" and has("result")
      then "\(.result)\t\(.message | type == "string" and length > 0)" else "-" end' \
      <<<"$body" 2>/dev/null) || got=-
    if [[ $ctype != application/json* ]]; then
      why="content type '$ctype', expected application/json"
    elif [[ $got == - ]]; then
      why="not a JSON object with a result"
    elif [[ ${got%%$'\t'*} != "$want_result" ]]; then
      why="result ${got%%$'\t'*}, expected $want_result"
    elif ((want_status >= 400)) && [[ ${got#*$'\t'} != true ]]; then
      why="an error without a message"
    fi
  fi
  if [[ -z $why && -n $want_allow && $allow != "$want_allow" ]]; then
    why="Allow '$allow', expected '$want_allow'"
  fi
  # An answer never echoes what the client sent (no reflected markup or SQL).
  local echoed='<script|drop table|union select|aaaaaaaaaaaaaaaa'
  if [[ -z $why && ${body,,} =~ $echoed ]]; then
    why="the answer echoes the request: ${body:0:200}"
  fi
  rows=$((rows + 1))
  if [[ -n $why ]]; then
    failures+=("$where: $name: $why${tag:+ (fails until change $tag)}")
    echo "FAIL $where: $name: $why${tag:+ [$tag]} body: ${body:0:160}"
  else
    echo "ok   $where: $name -> $status ${want_result}"
  fi
}

# row NAME DIRECT NGINX METHOD TARGET [CURL ARGS...]
row() {
  local name=$1 want_direct=$2 want_nginx=$3
  shift 3
  send "$direct" "$@"
  check direct "$want_direct" "$name"
  send "$proxy" "$@"
  check nginx "$want_nginx" "$name"
}

B='400;bad_request'
R=/stock/reduce

# -------------------------------------------------------------- the id
row "id missing" "$B" "$B" GET "$R"
row "id empty" "$B" "$B" GET "$R?id="
row "id without =" "$B" "$B" GET "$R?id"
for v in abc 1abc -1 0 00 01 1.5 0x10 1e3 +1 %2B1 ' 1' %201 1%20 %091 %0A1 %00 1%00 %001 \
  2147483648 4294967297 9223372036854775807 9223372036854775808 99999999999999999999999 \
  %EF%BC%91 %E2%80%8B1 %ZZ % %%31 1%2C2; do
  row "id=$v" "$B" "$B" GET "$R?id=${v// /%20}"
done
row "id largest int32 (absent product)" '404;not_found' '404;not_found' GET "$R?id=2147483647"
row "id=%39%39%39 is 999 after decoding" '404;not_found' '404;not_found' GET "$R?id=%39%39%39"
row "id=%31 is 1 after decoding (read only)" '200;ok' '200;ok' GET "/stock?id=%31"
row "key %69d is id after decoding" "$B" "$B" GET "$R?%69d=abc"
row "id twice" "$B" "$B" GET "$R?id=1&id=2"
row "id twice, same" "$B" "$B" GET "$R?id=999&id=999"
row "id twice, one empty" "$B" "$B" GET "$R?id=999&id="
row "id;id" "$B" "$B" GET "$R?id=1;id=2"
row "SQL: quote OR" "$B" "$B" GET "$R?id=1%27%20OR%20%271%27=%271"
row "SQL: DROP TABLE" "$B" "$B" GET "$R?id=1;DROP%20TABLE%20product"
row "SQL: UNION SELECT" "$B" "$B" GET "$R?id=1%20UNION%20SELECT%20password%20FROM%20mysql.user"
row "SQL: comment" "$B" "$B" GET "$R?id=1--"
row "markup in the id" "$B" "$B" GET "$R?id=%3Cscript%3Ealert(1)%3C/script%3E"
row "17 query parameters" "$B" "$B" GET \
  "$R?id=999&a=1&b=1&c=1&d=1&e=1&f=1&g=1&h=1&i=1&j=1&k=1&l=1&m=1&n=1&o=1&p=1"
row "id on /stock" "$B" "$B" GET "/stock?id=abc"
row "unknown product: reduce" '404;not_found' '404;not_found' GET "$R?id=999"
row "unknown product: stock" '404;not_found' '404;not_found' GET "/stock?id=999"

# -------------------------------------------------------------- idempotency keys
row "key with a space" "$B" "$B" GET "$R?id=999" -H 'Idempotency-Key: bad key'
row "key of 65 bytes" "$B" "$B" GET "$R?id=999" -H "Idempotency-Key: @A65@"
row "key empty" "$B" "$B" GET "$R?id=999" -H 'Idempotency-Key;'
row "key non-ASCII" "$B" "$B" GET "$R?id=999" -H $'Idempotency-Key: k\xc3\xa9y'
row "request_id with a slash" "$B" "$B" GET "$R?id=999&request_id=i/x/1"
row "request_id twice" "$B" "$B" GET "$R?id=999&request_id=a&request_id=a"
row "request_id and key differ" "$B" "$B" GET "$R?id=999&request_id=a" -H 'Idempotency-Key: b'

# -------------------------------------------------------------- routes
NR='404;not_found'
row "unknown path" "$NR" "$NR" GET "/nope"
row "root" "$NR" "$NR" GET "/"
row "extra segment" "$NR" "$NR" GET "$R/1?id=1"
row "trailing slash" "$NR" "$NR" GET "$R/?id=1"
row "upper case" "$NR" "$NR" GET "/STOCK/REDUCE?id=1"
row "dot segment" "$NR" "$NR" GET "/stock/./reduce?id=1"
row "dot-dot segment" "$NR" "$NR" GET "/stock/../stock/reduce?id=1"
row "double slash" "$NR" "$NR" GET "//stock/reduce?id=1"
row "encoded ? in the path" "$NR" "$NR" GET "$R%3Fid=1"
row "encoded slash is decoded" "$B" "$B" GET "/stock%2Freduce?id=abc"
# nginx refuses a path that climbs above the root; stockd sees it as unknown.
row "above the root" "$NR" '400;bad_request;;N1' GET "/../../etc/passwd"

# -------------------------------------------------------------- methods
for m in PUT DELETE PATCH OPTIONS FOO; do
  row "$m on reduce" '405;method_not_allowed;GET, POST' '405;method_not_allowed;GET, POST' \
    "$m" "$R?id=999"
done
row "HEAD on reduce" '405;@none;GET, POST' '405;@none;GET, POST' HEAD "$R?id=999"
row "PUT on stock" '405;method_not_allowed;GET, HEAD' '405;method_not_allowed;GET, HEAD' \
  PUT "/stock?id=999"
row "POST on health" '405;method_not_allowed;GET, HEAD' '405;method_not_allowed;GET, HEAD' \
  POST /health
row "DELETE on metrics" '405;method_not_allowed;GET, HEAD' '405;method_not_allowed;GET, HEAD' \
  DELETE /metrics
# nginx answers TRACE itself, always 405.
row "TRACE on reduce" '405;method_not_allowed;GET, POST' '405;method_not_allowed;;N1' \
  TRACE "$R?id=999"

# -------------------------------------------------------------- bodies
row "body on a GET" "$B" "$B" GET "$R?id=999" --data-binary 'id=2' -H 'Content-Type: text/plain'
row "body on a POST" "$B" "$B" POST "$R?id=999" --data-binary 'id=2'
row "chunked body" "$B" "$B" POST "$R?id=999" -H 'Transfer-Encoding: chunked' --data-binary 'x'
# nginx refuses a body over client_max_body_size (1 MiB) before it reaches stockd.
row "2 MB body" "$B" '413;body_too_large;;N1' POST "$R?id=999" --data-binary "@$T/body-2mb"

# -------------------------------------------------------------- sizes
# Up to stockd's limits (4 KiB of URI, 4 KiB of headers) a request is served; above them
# stockd answers 414 / 431 itself (S1) as long as the request head fits libmicrohttpd's
# 6 KiB connection memory (about 5.4 KiB of head); beyond that libmicrohttpd answers
# (HTML). The memory is that small on purpose: each connection nginx holds keeps all of
# it resident (see STOCKD_CONNECTION_MEMORY in service/http.c and loadtest/memory).
# nginx passes on no head larger than about 5 KiB (large_client_header_buffers 1 4k),
# so through nginx every over-long request gets nginx's JSON 414 / 431 (N1), and
# libmicrohttpd's bare answer is only seen by a client that bypasses nginx.
row "URI of 3 KiB" "$NR" "$NR" GET "$R?id=999&pad=@A3000@"
row "URI of 5 KiB" '414;uri_too_long;;S1' '414;uri_too_long;;N1' GET "$R?id=999&pad=@A5000@"
row "URI of 7 KiB" '414;@mhd' '414;uri_too_long;;N1' GET "$R?id=999&pad=@A7000@"
row "URI of 9 KiB" '414;@mhd' '414;uri_too_long;;N1' GET "$R?id=999&pad=@A9000@"
row "URI of 100 KiB" '414;@mhd' '414;uri_too_long;;N1' GET "$R?id=999&pad=@A100000@"
row "header of 3 KiB" "$NR" "$NR" GET "$R?id=999" -H "X-Pad: @A3000@"
row "header of 5 KiB" '431;headers_too_large;;S1' '431;headers_too_large;;N1' \
  GET "$R?id=999" -H "X-Pad: @A5000@"
row "two headers of 2.5 KiB" '431;headers_too_large;;S1' '431;headers_too_large;;N1' \
  GET "$R?id=999" -H "X-Pad: @A2500@" -H "X-Pad2: @A2500@"
row "header of 20 KiB" '431;@mhd' '431;headers_too_large;;N1' GET "$R?id=999" -H "X-Pad: @A20000@"
row "header of 100 KiB" '431;@mhd' '431;headers_too_large;;N1' GET "$R?id=999" -H "X-Pad: @A100000@"

# -------------------------------------------------------------- the protocol itself
# libmicrohttpd is lenient where nginx is strict: it serves HTTP/1.1 without Host and
# bare LF line ends, and closes on a request line that is not HTTP at all. It also cuts
# a request line at a NUL byte: "id=9<NUL>99" reaches stockd as id=9 (absent, so 404).
# That is accepted: what is left is a request the client could have sent as it is, and
# nginx refuses the NUL (so nginx and stockd never disagree on what was asked). A NUL
# before the '?' is refused with 400: libmicrohttpd finds the query past it, where stockd's
# look at the URI did not, and a long query hung (tests/service/many_params.sh).
# Other raw bytes in the request line (controls, DEL, bytes >= 0x80) reach stockd as they
# are and fail its grammar, or are carried in a parameter it ignores; nginx refuses
# controls and DEL with its 400 and passes bytes >= 0x80.
row "HTTP/1.1 without Host" '404;not_found' '400;bad_request;;N1' RAW \
  'GET /stock/reduce?id=999 HTTP/1.1\r\nConnection: close\r\n\r\n'
row "not HTTP" 'closed;@mhd' '400;bad_request;;N1' RAW 'HELLO\r\n\r\n'
row "bare LF line ends" '404;not_found' '404;not_found' RAW \
  'GET /stock/reduce?id=999 HTTP/1.1\nHost: x\nConnection: close\n\n'
row "NUL in the query" '404;not_found' '400;bad_request;;N1' RAW \
  'GET /stock/reduce?id=9\x0099 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
row "NUL before the query" "$B" "$B" RAW \
  'GET /stock/reduce\x00?id=999 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
row "NUL in the path, no query" '200;ok' "$B" RAW \
  'GET /health\x00junk HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
row "control byte in the id" "$B" "$B" RAW \
  'GET /stock/reduce?id=9\x0199 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
for b in '\x01' '\x1b[31m' '\t' '\x7f' 'a\rb'; do
  row "raw $b in a parameter" '404;not_found' "$B" RAW \
    "GET /stock/reduce?id=999&x=$b HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n"
done
row "raw \\xff in a parameter" '404;not_found' '404;not_found' RAW \
  'GET /stock/reduce?id=999&x=\xff HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
row "control byte in the path" '404;not_found' "$B" RAW \
  'GET /stock/re\x01duce?id=999 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
row "raw \\xff in the path" '404;not_found' '404;not_found' RAW \
  'GET /stock/reduce\xff?id=999 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
row "NUL in a header name" '400;@mhd' '400;bad_request;;N1' RAW \
  'GET /stock/reduce?id=999 HTTP/1.1\r\nHost: x\r\nX-A\x00: b\r\n\r\n'
row "two Content-Length" '400;@mhd' '400;bad_request;;N1' RAW \
  'POST /stock/reduce?id=999 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab'
row "bad chunk size" '400;@mhd' '400;bad_request;;N1' RAW \
  'POST /stock/reduce?id=999 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n'
row "HTTP/2.0 request line" '505;@mhd' '505;@nginx' RAW \
  'GET /health HTTP/2.0\r\nHost: x\r\n\r\n'

# -------------------------------------------------------------- afterwards
echo "$rows checks, ${#failures[@]} failed"
pid_alive "$T/stockd/1.pid" || fail "stockd died during the table"
pid_alive "$T/nginx/nginx.pid" || fail "nginx died during the table"
for port in "$direct" "$proxy"; do
  code=$(curl -s -m 10 -o "$T/health" -w '%{http_code}' "http://127.0.0.1:$port/health")
  expect_eq "/health on port $port after the table" 200 "$code"
done
expect_eq "orders and total stock (nothing deducted)" "$before" "$(ledger)"
if ((${#failures[@]})); then
  printf '  %s\n' "${failures[@]}" >&2
  fail "${#failures[@]} of $rows bad-input checks failed"
fi
echo "PASS"
