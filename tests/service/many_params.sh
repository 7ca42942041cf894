#!/usr/bin/env bash
# many_params.sh: a query with many parameters gets its answer at once, the same answer
# as a query just past the limit (STOCKD_MAX_PARAMS), on every route, directly and
# through nginx. libmicrohttpd stores each query argument in the connection's small
# pool; without http.c's look at the URI before it is split (on_uri), about 85 empty
# parameters filled the pool and the request got no answer until the connection
# timeout (an HTML 504 through nginx). That look depends on libmicrohttpd calling the
# URI callback before it splits the arguments, with the buffer it then splits: were
# that to change, the 300 and 4000 rows below would hang and fail.
# A NUL byte before the '?' hid the query from that look (libmicrohttpd finds the '?'
# over the whole URI, on_uri read it as a string, up to the NUL), and the hang came back;
# such requests are refused at once with 400 (http.c's unescape_arg), the rows sent raw
# at the end, with the NUL, a false version and both line ends, hang without it.
source "$STOCKD_SRC/tests/lib.sh"

t_db
# A connection timeout far above curl's -m: a request without an answer fails as one,
# not as a closed connection.
t_stockd 1 none --connection-timeout-s 120
t_nginx 1
direct=http://127.0.0.1:$((PORT0 + 1)) proxied=http://127.0.0.1:$PORT0
before=$(sql "SELECT COUNT(*) FROM orders")

# amps N: N ampersands.
amps() { printf '%*s' "$1" '' | tr ' ' '&'; }

# answer BASE PATH: "STATUS RESULT" of GET BASE/PATH ("000 -" for none within curl's -m).
answer() {
  local code
  rm -f "$T/body"
  code=$(curl -sS -m 20 -o "$T/body" -w '%{http_code}' "$1$2" 2>/dev/null) || true
  if [[ $2 == /metrics* ]]; then
    echo "${code:-000} $(head -c 1 "$T/body" 2>/dev/null | tr -c '#' '-')"
  else
    echo "${code:-000} $(jq -r .result "$T/body" 2>/dev/null || echo -)"
  fi
}

# The answer to 20 ampersands (21 parameters, past the limit of 16) is the reference;
# 90 (past where the pool ran out), 300 (the 326-byte URI of the report), 4000 (a URI
# just under stockd's 4 KiB limit) and 300 parameters of 10 bytes each must get it too.
long=$(for ((i = 0; i < 300; i++)); do printf '&k%03d=vvvvv' "$i"; done)
for base in "$direct" "$proxied"; do
  for route in "/stock/reduce?id=1" "/stock?id=1" "/health?" "/lock/queue?id=1" "/metrics?" \
    "/nope?"; do
    want=$(answer "$base" "$route$(amps 20)")
    [[ $want != 000* ]] || fail "$base$route with 20 parameters: no answer"
    for n in 90 300 4000; do
      expect_eq "$base$route with $n ampersands" "$want" "$(answer "$base" "$route$(amps "$n")")"
    done
    expect_eq "$base$route with 300 parameters of 10 bytes" "$want" "$(answer "$base" "$route$long")"
  done
done
expect_eq "deductions refused" "400 bad_request" "$(answer "$direct" "/stock/reduce?id=1$(amps 300)")"
expect_eq "why" "too many query parameters" "$(jq -r .message "$T/body")"

# rawanswers PORT TARGET...: "STATUS RESULT" of GET TARGET sent raw (Python escapes, so
# \x00 is a NUL byte), a line per target, each with CRLF then with bare LF line ends;
# "TIMEOUT" for no answer within rawhttp.py's 10 s. One rawhttp.py for them all.
rawanswers() {
  local port=$1 target eol reqs=() status ctype body
  shift
  for target in "$@"; do
    for eol in '\r\n' '\n'; do
      reqs+=("GET $target HTTP/1.1${eol}Host: x${eol}Connection: close${eol}${eol}")
    done
  done
  /usr/bin/python3 "$STOCKD_SRC/tests/security/rawhttp.py" "$port" "${reqs[@]}" |
    while IFS=$'\t' read -r status ctype body; do
      if [[ $ctype == application/json* ]]; then
        echo "$status $(jq -r .result <<<"$body")"
      else
        echo "$status"
      fi
    done
}
kv=$(for ((i = 0; i < 300; i++)); do printf 'k%03d=v&' "$i"; done)
targets=('/stock/reduce\x00?id=999' "/stock/reduce\\x00?id=999$(amps 300)"
  "/health\\x00?$(amps 300)" "/stock/reduce\\x00x\\x00?$kv"
  "/stock/reduce\\x00?$kv" "/stock/reduce\\x00?k=v&$(amps 300)"
  "/stock/reduce\\x00HTTP/1.1\\x00?$(amps 300)"
  "/stock/reduce\\x00HTTP/1.1\\x00?k=HTTP/1.1&$(amps 300)"
  "/stock/reduce\\x00?k=HTTP/1.1&$(amps 300)" "/stock/reduce\\x00?HTTP/1.1&$kv")
for port in $((PORT0 + 1)) $PORT0; do
  mapfile -t got < <(rawanswers "$port" "${targets[@]}")
  for ((i = 0; i < ${#targets[@]}; i++)); do
    target=${targets[i]}
    expect_eq "port $port: GET ${target:0:70} (NUL before the query)" "400 bad_request" \
      "${got[2 * i]:-none}"
    expect_eq "port $port: GET ${target:0:70}, bare LF line ends" "400 bad_request" \
      "${got[2 * i + 1]:-none}"
  done
done
expect_eq "orders from refused queries" "$before" "$(sql "SELECT COUNT(*) FROM orders")"
# The service goes on serving, with its parameters read as ever.
expect_eq "a deduction after them" "200 deducted" "$(answer "$direct" "/stock/reduce?id=1&request_id=after")"
echo PASS
