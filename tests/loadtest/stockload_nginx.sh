#!/usr/bin/env bash
# stockload against a real HTTP server: a private nginx whose locations answer the fixed
# bodies of the stockd contract (200 deducted, 409 sold_out, 503 lock_timeout, ...), so
# every outcome can be produced on purpose. nginx's access log is the server-side truth:
# it proves the exact number of requests in threads x loops mode, the keep-alive
# connection bound, the method and the Idempotency-Key of each request, and, for a mixed
# run, how many answers of each kind were sent; with --keys-out, each request's line in
# the keys file must carry the key and status nginx logged for it. Reconciliation reads a real MariaDB
# database (the shared test server) whose orders rows the test writes itself.
#
# usage: stockload_nginx.sh PATH/TO/stockload   (run by ctest with the STOCKD_* variables)
source "$STOCKD_SRC/tests/lib.sh"

STOCKLOAD=${1:?usage: stockload_nginx.sh PATH/TO/stockload}
command -v jq >/dev/null || { echo "SKIP: jq is not installed (scripts/deps installs it)" >&2; exit 77; }

NGX=$T/nginx
SILENT_PORT=$((PORT0 + 1)) # accepts connections, never answers: timeouts
CLOSED_PORT=$((PORT0 + 2)) # nothing listens: connection refused
BASE=http://127.0.0.1:$PORT0

# ------------------------------------------------------------------ servers

mkdir -p "$NGX/logs" "$NGX/tmp"
cat >"$NGX/nginx.conf" <<CONF
worker_processes 1;
pid $NGX/nginx.pid;
error_log $NGX/logs/error.log warn;
daemon on;
events { worker_connections 1024; }
http {
    # One line per request: connection serial, method, Idempotency-Key, final location
    # (after the /mixed rewrite), run tag (the query string) and status.
    log_format counted '\$connection \$request_method \$http_idempotency_key \$uri \$args \$status';
    access_log $NGX/logs/access.log counted;
    client_body_temp_path $NGX/tmp/body;
    proxy_temp_path $NGX/tmp/proxy;
    fastcgi_temp_path $NGX/tmp/fastcgi;
    uwsgi_temp_path $NGX/tmp/uwsgi;
    scgi_temp_path $NGX/tmp/scgi;
    default_type application/json;
    keepalive_requests 100000;

    # Spreads the mixed run over five answers by a hash of each request's identity.
    split_clients "\${connection}-\${connection_requests}" \$mixed {
        20% deducted;
        20% sold_out;
        20% lock_timeout;
        20% unknown;
        *   not_json;
    }

    server {
        listen 127.0.0.1:$PORT0;
        location = /deducted     { return 200 '{"result":"deducted","id":1,"stock":41,"order_id":977,"instance":"fake-1"}'; }
        location = /replayed     { return 200 '{"result":"deducted","id":1,"stock":41,"order_id":977,"replayed":true}'; }
        location = /no_order_id  { return 200 '{"result":"deducted","id":1,"stock":41}'; }
        location = /not_json     { return 200 'hello'; }
        location = /sold_out     { return 409 '{"result":"sold_out","id":1,"stock":0,"instance":"fake-1"}'; }
        location = /lock_timeout { return 503 '{"result":"lock_timeout","id":1,"message":"lock not acquired in time"}'; }
        location = /lock_lost    { return 503 '{"result":"lock_lost","id":1,"message":"lock lost"}'; }
        location = /unavailable  { return 503 '{"result":"unavailable","message":"mysql down"}'; }
        location = /overloaded   { return 503 '{"result":"overloaded","message":"queue full"}'; }
        location = /nginx_503    { return 503; }
        location = /unknown      { return 500 '{"result":"unknown","message":"commit reply lost"}'; }
        location = /bad_gateway  { return 502; }
        location = /not_found    { return 404 '{"result":"not_found","id":7,"message":"no product with id 7"}'; }
        location = /bad_request  { return 400 '{"result":"bad_request","message":"missing id"}'; }
        location = /redirect     { return 302 /deducted; }
        location = /mixed        { rewrite ^ /\$mixed last; }
    }
}
CONF
nginx -p "$NGX" -c "$NGX/nginx.conf" -e "$NGX/logs/error.log" || fail "nginx did not start"
wait_until 10 curl -fsS "$BASE/deducted" || fail "nginx does not answer on $PORT0"

mkdir -p "$T/silent"
nc -lk 127.0.0.1 "$SILENT_PORT" >/dev/null 2>&1 </dev/null &
echo $! >"$T/silent/pid"
wait_until 10 eval "! port_free $SILENT_PORT" || fail "silent listener did not start"
port_free "$CLOSED_PORT" || fail "port $CLOSED_PORT should be free"

# ------------------------------------------------------------------ helpers

# load TAG ARGS...: runs stockload --json with ARGS, output in $T/TAG.json, stderr in
# $T/TAG.err; sets $rc to its exit status.
load() {
  local tag=$1
  shift
  rc=0
  "$STOCKLOAD" --json "$@" >"$T/$tag.json" 2>"$T/$tag.err" || rc=$?
}

# field TAG JQ: a value of TAG's JSON output.
field() { jq -r "$2" "$T/$1.json"; }

# served TAG [URI]: how many requests nginx logged for run TAG (optionally for one URI).
served() {
  awk -v tag="run=$1" -v uri="${2:-}" '$5 == tag && (uri == "" || $4 == uri)' \
    "$NGX/logs/access.log" | wc -l
}

# connections TAG: how many distinct connections carried run TAG.
connections() { awk -v tag="run=$1" '$5 == tag { print $1 }' "$NGX/logs/access.log" | sort -u | wc -l; }

# ------------------------------------------------------------------ each outcome alone

# location -> kind stockload must count it as.
declare -A kind_of=(
  [deducted]=deducted [sold_out]=sold_out [lock_timeout]=lock_timeout [lock_lost]=lock_lost
  [unavailable]=unavailable [overloaded]=overloaded [nginx_503]=other_503
  [unknown]=other_5xx [bad_gateway]=other_5xx [not_found]=http_4xx [bad_request]=http_4xx
  [not_json]=unexpected [no_order_id]=unexpected [redirect]=unexpected [replayed]=deducted
)
kinds=(deducted sold_out lock_timeout lock_lost unavailable overloaded other_503 other_5xx
  http_4xx unexpected transport_error)

for loc in "${!kind_of[@]}"; do
  load "one_$loc" --url "$BASE/$loc?run=one_$loc" --threads 3 --loops 4
  expect_eq "$loc: exit status" 0 "$rc"
  want=${kind_of[$loc]}
  for k in "${kinds[@]}"; do
    n=$(field "one_$loc" ".counts.$k")
    if [[ $k == "$want" ]]; then
      expect_eq "$loc: counted as $k" 12 "$n"
    else
      [[ $n == 0 ]] || fail "$loc: expected no $k answers, got $n"
    fi
  done
  expect_eq "$loc: requests nginx served" 12 "$(served "one_$loc")"
  expect_eq "$loc: latencies recorded" 12 "$(field "one_$loc" .latency_ms.count)"
done
expect_eq "deducted: order id count" 12 "$(field one_deducted .order_id_count)"
expect_eq "deducted: order ids" "977" "$(field one_deducted '.order_ids | unique | join(",")')"
expect_eq "replayed: replayed answers" 12 "$(field one_replayed .replayed)"
expect_eq "sold_out: no order ids" 0 "$(field one_sold_out '.order_ids | length')"
expect_eq "503s add up" 12 "$(field one_lock_timeout .counts.total_503)"
expect_eq "500 is a 5xx but not a 503" "12 0" \
  "$(field one_unknown '"\(.counts.total_5xx) \(.counts.total_503)"')"

# ------------------------------------------------------------------ transport errors

load refused --url "http://127.0.0.1:$CLOSED_PORT/deducted" --threads 2 --loops 3 \
  --idempotency --keys-out "$T/refused.keys"
expect_eq "refused: exit status (no HTTP answer at all)" 3 "$rc"
expect_eq "refused: transport errors" 6 "$(field refused .counts.transport_error)"
expect_eq "refused: curl's reason" 6 "$(field refused '.transport_errors["Couldn'\''t connect to server"]')"
expect_eq "refused: no latency from transport errors" 0 "$(field refused .latency_ms.count)"
expect_eq "refused: keys-file lines (no answer, connection refused)" 6 \
  "$(grep -cE '^[A-Za-z0-9_-]+ 0 - 0 false 7$' "$T/refused.keys")"

load silent --url "http://127.0.0.1:$SILENT_PORT/deducted" --threads 2 --loops 2 --timeout-ms 300 \
  --idempotency --keys-out "$T/silent.keys"
expect_eq "silent: exit status" 3 "$rc"
expect_eq "silent: timeouts" 4 "$(field silent '.transport_errors["Timeout was reached"]')"
# Transport errors are in the keys file too: status 0, no result, curl's code.
expect_eq "silent: keys-file lines (no answer, timed out)" 4 \
  "$(grep -cE '^[A-Za-z0-9_-]+ 0 - 0 false 28$' "$T/silent.keys")"
expect_eq "silent: keys file, line count" "4 4" "$(field silent .keys_written) $(wc -l <"$T/silent.keys")"

# ------------------------------------------------------------------ threads x loops, mixed

load mixed --url "$BASE/mixed?run=mixed" --threads 4 --loops 50
expect_eq "mixed: exit status" 0 "$rc"
expect_eq "mixed: requests reported" 200 "$(field mixed .requests)"
expect_eq "mixed: requests nginx served (exactly threads x loops)" 200 "$(served mixed)"
declare -A mixed_kind=([deducted]=deducted [sold_out]=sold_out [lock_timeout]=lock_timeout
  [unknown]=other_5xx [not_json]=unexpected)
sum=0
for loc in "${!mixed_kind[@]}"; do
  n=$(served mixed "/$loc")
  ((n > 0)) || fail "mixed: nginx sent no /$loc answer; the split should spread 200 requests"
  expect_eq "mixed: ${mixed_kind[$loc]} counted as nginx sent them" "$n" \
    "$(field mixed ".counts.${mixed_kind[$loc]}")"
  sum=$((sum + n))
done
expect_eq "mixed: answers add up" 200 "$sum"
expect_eq "mixed: one order id per deducted answer" "$(served mixed /deducted)" \
  "$(field mixed .order_id_count)"
conns=$(connections mixed)
((conns >= 1 && conns <= 4)) || fail "mixed: expected 1..4 keep-alive connections, nginx saw $conns"
echo "ok: mixed: 200 requests over $conns connections"
expect_eq "mixed: nothing on stderr when it is not a terminal" "" "$(cat "$T/mixed.err")"
expect_eq "mixed: no Idempotency-Key without --idempotency" 0 \
  "$(awk '$5 == "run=mixed" && $3 != "-"' "$NGX/logs/access.log" | wc -l)"

# ------------------------------------------------------------------ method and idempotency keys

load idem --url "$BASE/deducted?run=idem" --threads 3 --loops 4 --method POST --idempotency
expect_eq "idem: exit status" 0 "$rc"
expect_eq "idem: requests served" 12 "$(served idem)"
expect_eq "idem: every request a POST" 12 "$(awk '$5 == "run=idem" && $2 == "POST"' "$NGX/logs/access.log" | wc -l)"
keys=$(awk '$5 == "run=idem" { print $3 }' "$NGX/logs/access.log")
expect_eq "idem: distinct keys" 12 "$(sort -u <<<"$keys" | wc -l)"
expect_eq "idem: keys fit the contract" 12 "$(grep -cE '^[A-Za-z0-9_-]{1,64}$' <<<"$keys")"

# ------------------------------------------------------------------ --products spreads the ids

load spread --url "$BASE/deducted?run=spread&id={id}" --products 3-7 --threads 10 --loops 50
expect_eq "spread: exit status" 0 "$rc"
ids=$(awk '$5 ~ /^run=spread&id=/ { sub(/^run=spread&id=/, "", $5); print $5 }' "$NGX/logs/access.log")
expect_eq "spread: requests served" 500 "$(wc -l <<<"$ids")"
expect_eq "spread: every id inside 3..7" 500 "$(grep -cxE '[3-7]' <<<"$ids")"
# 500 uniform draws over 5 ids: each id is missed with probability 0.8^500 (about 1e-49).
expect_eq "spread: every id of the range used" "3 4 5 6 7" "$(sort -u <<<"$ids" | xargs)"
expect_eq "spread: the range in the JSON" "3-7" "$(field spread '"\(.products.from)-\(.products.to)"')"

# ------------------------------------------------------------------ keys file

# check_keys TAG N: $T/TAG.keys has exactly one line per request of run TAG (N of them,
# as stockload and nginx count them), its keys are unique, and each key's status is
# the one nginx logged for that key; each line's result is the outcome the status and
# location mean (kind_of, plus deducted's order id and replay flag).
check_keys() {
  local tag=$1 n=$2 keysf=$T/$1.keys
  expect_eq "$tag: keys_written" "$n" "$(field "$tag" .keys_written)"
  expect_eq "$tag: keys_out is the absolute path" "$(realpath "$keysf")" "$(field "$tag" .keys_out)"
  expect_eq "$tag: keys-file lines" "$n" "$(wc -l <"$keysf")"
  expect_eq "$tag: distinct keys in the keys file" "$n" "$(cut -d' ' -f1 "$keysf" | sort -u | wc -l)"
  expect_eq "$tag: well-formed lines" "$n" \
    "$(grep -cE '^[A-Za-z0-9_-]{1,64} [0-9]+ [a-z_0-9-]+ [0-9]+ (true|false) [0-9]+$' "$keysf")"
  # nginx's view per key: "KEY STATUS RESULT ORDER_ID REPLAYED 0" built from the location.
  awk -v tag="run=$tag" '$5 == tag { print $3, $6, substr($4, 2) }' "$NGX/logs/access.log" |
    while read -r key status loc; do
      case $loc in
      deducted) echo "$key $status deducted 977 false 0" ;;
      replayed) echo "$key $status deducted 977 true 0" ;;
      *) echo "$key $status ${kind_of[$loc]} 0 false 0" ;;
      esac
    done | sort >"$T/$tag.served"
  expect_eq "$tag: requests nginx logged with a key" "$n" "$(wc -l <"$T/$tag.served")"
  sort "$keysf" | diff - "$T/$tag.served" >"$T/$tag.keydiff" ||
    fail "$tag: the keys file differs from what nginx served (< keys file, > nginx): $(head -5 "$T/$tag.keydiff")"
  echo "ok: $tag: $n keys-file lines, one per request, each as nginx served it"
}

load idem_keys --url "$BASE/mixed?run=idem_keys" --threads 4 --loops 25 --idempotency \
  --keys-out "$T/idem_keys.keys"
expect_eq "idem_keys: exit status" 0 "$rc"
expect_eq "idem_keys: requests" 100 "$(field idem_keys .requests)"
check_keys idem_keys 100
for kind in deducted sold_out lock_timeout other_5xx unexpected; do
  grep -q "^[^ ]* [0-9]* $kind " "$T/idem_keys.keys" || fail "idem_keys: no $kind line; the split should spread 100 requests"
done
load replayed_keys --url "$BASE/replayed?run=replayed_keys" --threads 2 --loops 3 --idempotency \
  --keys-out "$T/replayed_keys.keys"
check_keys replayed_keys 6

# The keys file is rewritten, not appended to, and a table run reports it too.
rc=0
"$STOCKLOAD" --url "$BASE/sold_out?run=idem_keys_table" --threads 1 --loops 2 --idempotency \
  --keys-out "$T/idem_keys.keys" >"$T/idem_keys_table.out" 2>&1 || rc=$?
expect_eq "idem_keys_table: exit status" 0 "$rc"
expect_eq "idem_keys_table: keys file rewritten" 2 "$(wc -l <"$T/idem_keys.keys")"
grep -q "^  keys: 2 lines in $(realpath "$T/idem_keys.keys")\$" "$T/idem_keys_table.out" ||
  fail "idem_keys_table: no keys line in the table: $(cat "$T/idem_keys_table.out")"

# A keys file that cannot be written is a setup failure, before any request is sent.
load keys_unwritable --url "$BASE/deducted?run=keys_unwritable" --threads 1 --idempotency \
  --keys-out "$T/no/such/dir/k.keys"
expect_eq "keys_unwritable: exit status" 3 "$rc"
grep -q "cannot write --keys-out" "$T/keys_unwritable.err" || fail "keys_unwritable: no reason on stderr"
expect_eq "keys_unwritable: no request sent" 0 "$(served keys_unwritable)"

# ------------------------------------------------------------------ duration mode

load duration --url "$BASE/deducted?run=duration" --duration 1 --concurrency 3
expect_eq "duration: exit status" 0 "$rc"
n=$(field duration .requests)
((n > 0)) || fail "duration: no requests in one second"
expect_eq "duration: requests nginx served" "$n" "$(served duration)"
expect_eq "duration: every answer counted" "$n" "$(field duration .counts.deducted)"
conns=$(connections duration)
((conns >= 1 && conns <= 3)) || fail "duration: expected 1..3 connections, nginx saw $conns"
echo "ok: duration: $n requests over $conns connections"

# ------------------------------------------------------------------ the table

rc=0
"$STOCKLOAD" --url "$BASE/sold_out?run=table" --threads 2 --loops 5 >"$T/table.out" 2>&1 || rc=$?
expect_eq "table: exit status" 0 "$rc"
grep -q '^stockload: 10 requests (2 threads x 5 loops)' "$T/table.out" || fail "table: no summary line"
grep -qE '^  sold_out +10 +100\.0%$' "$T/table.out" || fail "table: no sold_out row"

# ------------------------------------------------------------------ progress bar, interruption

# On a terminal (script(1) gives it one) the progress bar is drawn on stderr, at least
# once at the start; --no-progress keeps even a terminal quiet.
script -qec "$STOCKLOAD --url '$BASE/deducted?run=tty' --threads 2 --loops 50 --json >$T/tty.json" \
  "$T/tty.log" >/dev/null || fail "tty: stockload failed under script"
grep -q 'req/s' "$T/tty.log" || fail "tty: no progress bar on a terminal"
expect_eq "tty: requests" 100 "$(field tty .requests)"
script -qec "$STOCKLOAD --url '$BASE/deducted?run=tty_quiet' --threads 2 --loops 50 --no-progress --json >$T/tty_quiet.json" \
  "$T/tty_quiet.log" >/dev/null || fail "tty_quiet: stockload failed under script"
grep -q 'req/s' "$T/tty_quiet.log" && fail "tty_quiet: progress bar despite --no-progress"
echo "ok: progress bar only on a terminal, and not with --no-progress"

# SIGINT ends a long run early: the requests under way finish, the results are printed
# (marked interrupted) and the exit status is 3. The signal is sent once nginx has seen
# requests of the run, so the handler is surely installed.
"$STOCKLOAD" --json --url "$BASE/deducted?run=int" --duration 60 --concurrency 2 \
  >"$T/int.json" 2>"$T/int.err" &
pid=$!
wait_until 30 eval '(( $(served int) > 0 ))' || fail "int: no request arrived"
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
expect_eq "int: exit status" 3 "$rc"
expect_eq "int: marked interrupted" true "$(field int .interrupted)"
expect_eq "int: every request counted" "$(served int)" "$(field int .counts.deducted)"

# ------------------------------------------------------------------ reconciliation (MariaDB)

t_db
sql "INSERT INTO orders (id, product_id, instance) VALUES (977, 1, 'fake-1')"

load rec_ok --url "$BASE/deducted?run=rec_ok" --threads 1 --loops 1 --mysql "$MYSQL_URL" --product 1
expect_eq "rec_ok: exit status" 0 "$rc"
expect_eq "rec_ok: verdict" ok "$(field rec_ok .reconciliation.verdict)"
expect_eq "rec_ok: answers and rows" "1 1" "$(field rec_ok '"\(.reconciliation.answers) \(.reconciliation.rows)"')"

load rec_dup --url "$BASE/deducted?run=rec_dup" --threads 1 --loops 2 --mysql "$MYSQL_URL" --product 1
expect_eq "rec_dup: exit status (mismatch)" 1 "$rc"
expect_eq "rec_dup: verdict" mismatch "$(field rec_dup .reconciliation.verdict)"
expect_eq "rec_dup: duplicate answers" 1 "$(field rec_dup .reconciliation.duplicate_answers)"

sql "INSERT INTO orders (id, product_id, instance) VALUES (978, 1, 'fake-1'), (979, 2, 'fake-1')"
load rec_extra --url "$BASE/deducted?run=rec_extra" --threads 1 --loops 1 --mysql "$MYSQL_URL" --product 1
expect_eq "rec_extra: exit status (mismatch)" 1 "$rc"
expect_eq "rec_extra: row without an answer" "1 [978]" \
  "$(field rec_extra '"\(.reconciliation.unanswered_rows) \(.reconciliation.unanswered_examples | tojson)"')"

load rec_missing --url "$BASE/deducted?run=rec_missing" --threads 1 --loops 1 --mysql "$MYSQL_URL" --product 3
expect_eq "rec_missing: exit status (mismatch)" 1 "$rc"
expect_eq "rec_missing: answer without a row" "1 [977]" \
  "$(field rec_missing '"\(.reconciliation.missing_rows) \(.reconciliation.missing_examples | tojson)"')"

load rec_none --url "$BASE/sold_out?run=rec_none" --threads 2 --loops 2 --mysql "$MYSQL_URL" --product 4
expect_eq "rec_none: exit status (nothing deducted, no rows)" 0 "$rc"
expect_eq "rec_none: verdict" ok "$(field rec_none .reconciliation.verdict)"

rc=0
STOCKD_MYSQL_PASSWORD=wrong "$STOCKLOAD" --url "$BASE/deducted?run=rec_pw" --threads 1 \
  --mysql "$MYSQL_URL" --product 1 >"$T/rec_pw.out" 2>"$T/rec_pw.err" || rc=$?
expect_eq "rec_pw: exit status (database refused us)" 3 "$rc"
grep -q 'reconciliation failed' "$T/rec_pw.err" || fail "rec_pw: no reason on stderr"
grep -q 'ERROR' "$T/rec_pw.out" || fail "rec_pw: the table does not say the reconciliation failed"

# ------------------------------------------------------------------ usage errors

for args in "--threads 2" "--url $BASE/deducted" "--url $BASE/deducted --threads 2 --duration 1" \
  "--url $BASE/deducted --threads 2 --mysql $MYSQL_URL" "--url ftp://x/ --threads 1" \
  "--url $BASE/deducted --threads 1 --keys-out $T/nokey.keys"; do
  rc=0
  # shellcheck disable=SC2086 # the arguments are split on purpose
  "$STOCKLOAD" $args >/dev/null 2>&1 || rc=$?
  expect_eq "usage error exits 2: $args" 2 "$rc"
done
[[ ! -e $T/nokey.keys ]] || fail "--keys-out without --idempotency wrote a file"

echo "PASS"
