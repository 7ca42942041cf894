#!/usr/bin/env bash
# loadtest/wrk-json.lua with the real wrk, read by lab/loadgen.py: against a small
# static HTTP server (python3 -m http.server on this test's first port), the done()
# hook's JSON line counts every request, the 2xx answers as ok, and a path that
# answers 404 as other; with PATH LO HI each request names a product in LO..HI (the
# server's log shows which). About 5 s.
source "$STOCKD_SRC/tests/lib.sh"

command -v wrk >/dev/null || { echo "SKIP: wrk is not installed (scripts/deps)"; exit 77; }

www=$T/www
mkdir -p "$www/stock"
echo '{"ok":true}' >"$www/stock/reduce"
/usr/bin/python3 -m http.server "$PORT0" --bind 127.0.0.1 --directory "$www" \
  >"$T/http.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; t_cleanup' EXIT
base=http://127.0.0.1:$PORT0
wait_until 10 curl -fsS -m 1 -o /dev/null "$base/stock/reduce" ||
  fail "the HTTP server does not answer: $(cat "$T/http.log")"

lua=$STOCKD_SRC/loadtest/wrk-json.lua
loadgen() { PYTHONPATH=$STOCKD_SRC /usr/bin/python3 -m lab.loadgen "$@"; }

# The spread: /stock/reduce?id=N, N in 7..9.
wrk -t 1 -c 2 -d 1s -s "$lua" "$base" -- /stock/reduce 7 9 >"$T/spread.out" 2>&1 ||
  fail "wrk failed: $(cat "$T/spread.out")"
loadgen wrk "$T/spread.out" >"$T/spread.json" || fail "no result from wrk's output"
read -r requests ok other rps < <(jq -r '"\(.requests) \(.ok) \(.other) \(.rps)"' "$T/spread.json")
((requests > 0)) || fail "wrk counted no request"
expect_eq "2xx answers of the spread" "$requests" "$ok"
expect_eq "other answers of the spread" 0 "$other"
awk -v r="$rps" 'BEGIN { exit !(r > 0) }' || fail "no req/s"
ids=$(grep -oE 'GET /stock/reduce\?id=[0-9]+' "$T/http.log" | sed 's/.*=//' | sort -un | tr '\n' ' ')
expect_eq "the product ids the server saw" "7 8 9 " "$ids"

# A path that answers 404: every request counted, none of them ok.
wrk -t 1 -c 2 -d 1s -s "$lua" "$base/missing" >"$T/missing.out" 2>&1 ||
  fail "wrk failed: $(cat "$T/missing.out")"
loadgen wrk "$T/missing.out" >"$T/missing.json" || fail "no result from wrk's output"
read -r requests ok other < <(jq -r '"\(.requests) \(.ok) \(.other)"' "$T/missing.json")
((requests > 0)) || fail "wrk counted no request on the 404 path"
expect_eq "ok answers on the 404 path" 0 "$ok"
expect_eq "other answers on the 404 path" "$requests" "$other"
echo "ok: wrk-json.lua's line counts $requests requests as lab/loadgen.py reads them"
