#!/usr/bin/env bash
# The headline benchmark of loadtest/report in its short mode (--bench-only, small
# counts), on the report's own stack inside this test's ports: two specs (batched zk
# and RedLock over three Redis servers, which the report starts before the first row), both
# routes, both clients per load (stockload and ab on the hot product,
# stockload and wrk on the spread), two runs per cell (--bench-repeat 2). It checks what
# the benchmark promises, not how fast anything was: bench.md and bench.json exist;
# every row has a positive rate; the ceiling rows are there for each route, load,
# client and run, and every other row carries its fraction of the one measured right
# before it; a cell is the median of its runs; no deduction row saw a sold-out or failed answer
# (ample stock); every (spec, route, load) is exact with the ledger holding; the
# durability settings are printed; the rate limit runs (without, then with 20/s and a
# burst of 10) end exact, and with the limit part of the answers are 429. The ensemble row needs nine more ports than a test
# has, so it is left out here (--bench-ensemble ""); the full run has it.
#
# usage: report_bench_smoke.sh PATH/TO/stockload   (run by ctest with the STOCKD_* variables)
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/loadtest/tool_stack.sh"
tool_stack "${1:?usage: report_bench_smoke.sh PATH/TO/stockload}" jq gnuplot ab wrk
# RedLock's three servers at +7..+9 (MariaDB is at +6, the stockd instances at +11..+13).
export STACK_REDLOCK_PORT=$((PORT0 + 7))

"$STOCKD_SRC/loadtest/report" --bench-only --bench "zk redlock" --bench-requests 200 \
  --bench-concurrency 20 --bench-seconds 1 --bench-repeat 2 --bench-products 10 --bench-ensemble "" --bench-rate-limit 20:10 \
  --run "$run" --port-base "$PORT0" --out "$out" </dev/null | tee "$T/stdout" ||
  fail "loadtest/report --bench-only failed"

for f in bench.md bench.json; do [[ -s $out/$f ]] || fail "missing or empty: $out/$f"; done
[[ ! -e $out/report.json ]] || fail "--bench-only wrote report.json"
j=$out/bench.json
jq -e . "$j" >/dev/null || fail "bench.json does not parse"
q() { jq -r "$1" "$j"; }
# 2 routes x 2 specs x 2 loads x 2 clients x 2 runs x (the ceiling before it + the mode)
expect_eq "rows" 64 "$(q '.bench.rows | length')"
expect_eq "runs per cell" 2 "$(q '.bench.settings.repeat')"
expect_eq "ceiling rows per spec" "redlock 16 zk 16" \
  "$(q '[.bench.rows[] | select(.row == "ceiling") | .spec] | group_by(.) | map("\(.[0]) \(length)") | join(" ")')"
expect_eq "ceiling rows per route, load and client" \
  "affinity/hot/ab affinity/hot/stockload affinity/spread/stockload affinity/spread/wrk round-robin/hot/ab round-robin/hot/stockload round-robin/spread/stockload round-robin/spread/wrk" \
  "$(q '[.bench.rows[] | select(.row == "ceiling") | "\(.route)/\(.kind)/\(.client)"] | unique | join(" ")')"
expect_eq "load rows per (spec, route, load, client), one per run" "[1,2]" \
  "$(q '[.bench.rows[] | select(.row != "ceiling")] | group_by([.spec, .route, .kind, .client])
        | map(map(.rep) | sort) | unique | .[] | tojson')"
# shellcheck disable=SC2016 # jq's variables, not the shell's
expect_eq "load rows without a ceiling of their own run" 0 \
  "$(q '.bench.rows as $R | [$R[] | select(.row != "ceiling") | . as $r
        | select([$R[] | select(.row == "ceiling" and .spec == $r.spec and .route == $r.route
                  and .kind == $r.kind and .client == $r.client and .rep == $r.rep)] | length != 1)] | length')"
expect_eq "rows with no positive rate" 0 "$(q '[.bench.rows[] | select((.rps > 0) | not)] | length')"
expect_eq "deduction rows with answers other than 2xx (ample stock: none sold out)" 0 \
  "$(q '[.bench.rows[] | select(.row != "ceiling" and .other != 0)] | length')"
expect_eq "deduction rows not exact" 0 "$(q '[.bench.rows[] | select(.row != "ceiling" and (.exact | not))] | length')"
# Each hot load: 2 clients x 2 runs x 200 requests; one ab row per run.
expect_eq "hot rows whose orders match both clients' requests" 8 \
  "$(q '[.bench.rows[] | select(.row != "ceiling" and .kind == "hot" and .client == "ab" and .orders == 800 and .initial - .final == 800)] | length')"
# Under round-robin every product is wanted by every instance, so each zk row pays lock
# rounds. Under affinity a warm cache may serve a whole short row with none (that is
# what the cache is for): there the count must be present, and may be 0.
expect_eq "zk round-robin rows with ZooKeeper operations counted" 8 \
  "$(q '[.bench.rows[] | select(.row != "ceiling" and .spec == "zk" and .route == "round-robin" and .lock_ops_per_deduction > 0)] | length')"
expect_eq "zk affinity rows with a ZooKeeper operation count" 8 \
  "$(q '[.bench.rows[] | select(.row != "ceiling" and .spec == "zk" and .route == "affinity" and (.lock_ops_per_deduction | type) == "number" and .lock_ops_per_deduction >= 0)] | length')"
expect_eq "redlock rows with lock service operations counted" 16 \
  "$(q '[.bench.rows[] | select(.spec == "redlock" and .mode == "redlock" and .lock_ops_per_deduction > 0)] | length')"
expect_eq "durability: innodb_flush_log_at_trx_commit" 1 "$(q .durability.mysql.innodb_flush_log_at_trx_commit)"
expect_eq "rate limit runs" "null 20:10" "$(q '[.bench.rate_limit[].rate_limit] | map(tostring) | join(" ")')"
expect_eq "rate limit runs not exact" 0 "$(q '[.bench.rate_limit[] | select(.exact | not)] | length')"
expect_eq "429 answers without the limit" 0 "$(q '.bench.rate_limit[0].refused_429')"
(($(q '.bench.rate_limit[1].refused_429') > 0)) || fail "no 429 answers with the limit"
(($(q '.bench.rate_limit[1].admitted') > 0)) || fail "nothing admitted with the limit"
echo "ok: with the limit: $(q '.bench.rate_limit[1] | "\(.admitted) admitted, \(.refused_429) refused"')"
md=$out/bench.md
grep -q '^### Rate limiting in front' "$md" || fail "bench.md has no rate limit table"
grep -q '^### nginx round-robin' "$md" || fail "bench.md has no round-robin table"
grep -q '^### nginx affinity' "$md" || fail "bench.md has no affinity table"
grep -q '^| GET /health (HTTP ceiling: median' "$md" || fail "bench.md has no ceiling row"
grep -Eq '^\| zk \| [0-9]+ \(0\.[0-9]{2}|^\| zk \| [0-9]+ \([1-9]\.[0-9]{2}' "$md" || fail "bench.md: zk row without a fraction"
grep -Eq '^\| redlock \| [0-9]+ \([0-9]\.[0-9]{2}\) \|' "$md" || fail "bench.md: redlock row without a fraction"
grep -q "RedLock's three Redis servers" "$md" || fail "bench.md does not say RedLock's servers shared the CPUs"
# Every mode row says whether the ceiling measured next to it strayed from the route's
# median (lab/report.py), rather than folding a stray ceiling into the fractions.
grep -q '^| mode | .* | exact | ceiling |$' "$md" || fail "bench.md has no ceiling column"
expect_eq "mode rows without a ceiling verdict" 0 \
  "$(grep -E '^\| (zk|redlock) \|' "$md" | grep -cvE '\| (ok|STRAYED: [^|]+) \|$' || true)"
# The round-robin redlock row's hot ab cell is the median of its two runs (their mean).
median=$(q '[.bench.rows[] | select(.row == "redlock" and .route == "round-robin" and .kind == "hot"
              and .client == "ab") | .rps] | add / length | round')
awk '/^### nginx round-robin/ { t = 1 } /^### nginx affinity/ { t = 0 }
     t && /^\| redlock \|/ { print }' "$md" | grep -Eq "^\| redlock \| $median \(" ||
  fail "bench.md: round-robin redlock hot ab is not the median of its runs ($median)"
grep -q 'innodb_flush_log_at_trx_commit=1' "$md" || fail "bench.md does not print the durability settings"
grep -q 'forceSync=' "$md" || fail "bench.md does not print ZooKeeper's forceSync"
echo "ok: bench.md:"
cat "$md"
STACK_RUN=$run "$STOCKD_SRC/scripts/stack" status >/dev/null 2>&1 && fail "the stack still runs after the report"
echo "ok: the stack is down"
