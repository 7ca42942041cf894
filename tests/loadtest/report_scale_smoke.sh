#!/usr/bin/env bash
# The scale-out sweep of loadtest/report, tiny (--scale-only --scale "1 2", batched zk,
# its three routes: round-robin, affinity and owner; small counts), on the report's own stack inside this test's ports. It
# checks what the sweep promises, not how fast anything was: scale.json, scale.md and
# the three charts exist; every point has its ceiling and its load row for each load
# and client, on the instance count it says, with a positive rate; every load is exact;
# each load row carries its mean batch (at least one deduction per batch) and one batch
# figure per instance; one hot product under round-robin reaches both instances, and
# under affinity only one, and with owner routing only the owner batches it; scale.md's
# curve has a row per load, route and mode.
#
# usage: report_scale_smoke.sh PATH/TO/stockload   (run by ctest with the STOCKD_* variables)
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/loadtest/tool_stack.sh"
tool_stack "${1:?usage: report_scale_smoke.sh PATH/TO/stockload}" jq gnuplot ab wrk

"$STOCKD_SRC/loadtest/report" --scale-only --scale "1 2" --scale-modes zk --bench-requests 200 \
  --bench-concurrency 20 --bench-seconds 1 --bench-products 10 \
  --run "$run" --port-base "$PORT0" --out "$out" </dev/null | tee "$T/stdout" ||
  fail "loadtest/report --scale-only failed"

for f in scale.json scale.md scale-hot.png scale-spread.png scale-batch.png; do
  [[ -s $out/$f ]] || fail "missing or empty: $out/$f"
done
[[ ! -e $out/bench.json && ! -e $out/report.json ]] || fail "--scale-only wrote other reports"
j=$out/scale.json
jq -e . "$j" >/dev/null || fail "scale.json does not parse"
q() { jq -r "$1" "$j"; }
expect_eq "instance counts swept" "[1,2]" "$(q '.scale.settings.instances_swept | tojson')"
expect_eq "runs per point (--scale-only's default)" 1 "$(q '.scale.settings.repeat')"
# 2 instance counts x 3 routes x 2 loads x 2 clients x (the ceiling before it + the load)
expect_eq "rows" 48 "$(q '.scale.rows | length')"
expect_eq "rows per instance count" "1 24 2 24" \
  "$(q '[.scale.rows[] | .instances] | group_by(.) | map("\(.[0]) \(length)") | join(" ")')"
expect_eq "(instances, route, load, client) without exactly one ceiling and one load row" 0 \
  "$(q '[.scale.rows | group_by([.instances, .route, .kind, .client])[]
        | select((map(.row == "ceiling") | sort) != [false, true])] | length')"
expect_eq "rows with no positive rate" 0 "$(q '[.scale.rows[] | select((.rps > 0) | not)] | length')"
expect_eq "load rows not exact" 0 "$(q '[.scale.rows[] | select(.row != "ceiling" and (.exact | not))] | length')"
expect_eq "load rows with answers other than 2xx (ample stock: none sold out)" 0 \
  "$(q '[.scale.rows[] | select(.row != "ceiling" and .other != 0)] | length')"
expect_eq "load rows without a mean batch of at least 1" 0 \
  "$(q '[.scale.rows[] | select(.row != "ceiling" and ((.batch_mean // 0) < 1))] | length')"
expect_eq "load rows without one batch figure per instance" 0 \
  "$(q '[.scale.rows[] | select(.row != "ceiling" and (.batch_mean_by_instance | length) != .instances)] | length')"
# One hot product: round-robin sends it to both instances, affinity to one of them.
expect_eq "instances batching the hot product, round-robin, 2 instances" "2" \
  "$(q '[.scale.rows[] | select(.row != "ceiling" and .kind == "hot" and .route == "round-robin"
        and .instances == 2) | [.batch_mean_by_instance[] | select(. != null)] | length] | unique | join(" ")')"
expect_eq "instances batching the hot product, affinity, 2 instances" "1" \
  "$(q '[.scale.rows[] | select(.row != "ceiling" and .kind == "hot" and .route == "affinity"
        and .instances == 2) | [.batch_mean_by_instance[] | select(. != null)] | length] | unique | join(" ")')"
expect_eq "instances batching the hot product, owner, 2 instances" "1" \
  "$(q '[.scale.rows[] | select(.row != "ceiling" and .kind == "hot" and .route == "owner"
        and .instances == 2) | [.batch_mean_by_instance[] | select(. != null)] | length] | unique | join(" ")')"
md=$out/scale.md
grep -q '^| load | route | mode | 1 inst. | 2 inst. |$' "$md" || fail "scale.md has no curve table"
expect_eq "curve rows (2 loads x 3 routes x 1 mode)" 6 \
  "$(grep -cE '^\| (hot \(ab\)|spread \(wrk\)) \| (round-robin|affinity|owner) \| zk \| [0-9]+ \([0-9.]+\) \| [0-9]+ \([0-9.]+\) \|$' "$md")"
echo "ok: scale.md:"
cat "$md"
STACK_RUN=$run "$STOCKD_SRC/scripts/stack" status >/dev/null 2>&1 && fail "the stack still runs after the report"
echo "ok: the stack is down"
