#!/usr/bin/env bash
# docs/report/index.html in a real browser: Debian's Chromium, headless, opens the page
# that `loadtest/report --html-only` makes of a small report.json (the fixture next to
# this script, so no load has to run) and the committed docs/report/index.html, takes a
# screenshot of each and checks that the page renders: its title and heading, its
# tables with their rows, every chart an inline SVG laid out at a real size with drawn
# paths, no broken image, no console message, no resource fetched from anywhere, and
# nothing wider than the window (wide tables scroll inside their own box). A page
# with a broken image, a console error and an empty chart goes through the same check
# first and must fail it, so that a check that sees nothing cannot pass.
#
# The page itself has no script. To read what Chromium laid out, the test renders a
# copy with two scripts added: one at the top of <head> that records errors (a failed
# load, an exception, console.error/warn) and one at the end of <body> that measures the
# page after the load event and leaves the result, base64 JSON, in a hidden <pre> that
# --dump-dom prints. Chromium's own console log (--enable-logging=stderr) is checked too.
#
# usage: report_html.sh   (run by ctest with STOCKD_SRC and STOCKD_TEST_RUN)
set -euo pipefail
src=${STOCKD_SRC:?}
T=${STOCKD_TEST_RUN:?}/t/loadtest_report_html
rm -rf "$T"
mkdir -p "$T"

# fail and expect_eq; not tests/lib.sh, which is for tests that run stockd on the
# fixture's servers.
source "$src/tests/assert.sh"

chromium=$(command -v chromium || true)
[[ -n $chromium ]] || { echo "SKIP: chromium is not installed (scripts/deps installs it)"; exit 77; }
for tool in jq gnuplot base64; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (scripts/deps)"; exit 77; }
done

# ---------------------------------------------------------------- the check

hook='<script>
window.__problems = [];
window.addEventListener("error", function (e) {
  var t = e.target;
  __problems.push(t && t !== window && t.outerHTML ? "failed to load: " + t.outerHTML.slice(0, 160)
                                                   : "error: " + e.message);
}, true);
["error", "warn"].forEach(function (k) {
  var f = console[k];
  console[k] = function () {
    __problems.push("console." + k + ": " + Array.prototype.join.call(arguments, " "));
    f.apply(console, arguments);
  };
});
</script>'
measure='<script>
window.addEventListener("load", function () {
  function box(el) { var r = el.getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; }
  var svgs = Array.from(document.querySelectorAll("svg")).map(function (s) {
    var shapes = Array.from(s.querySelectorAll("path, polyline, polygon"));
    var drawn = shapes.filter(function (p) { var b = p.getBBox(); return b.width > 0 || b.height > 0; });
    var fig = s.closest("figure");
    return {figure: fig ? fig.id : "", size: box(s), shapes: shapes.length, drawn: drawn.length};
  });
  var tables = Array.from(document.querySelectorAll("table")).map(function (t) {
    return {class: t.className, rows: t.rows.length, size: box(t)};
  });
  var images = Array.from(document.images).map(function (i) {
    return {src: i.src.slice(0, 160), ok: i.complete && i.naturalWidth > 0};
  });
  var h1 = document.querySelector("h1");
  var res = {title: document.title, h1: h1 ? h1.textContent : null, h1_size: h1 ? box(h1) : null,
             svgs: svgs, tables: tables, images: images, problems: window.__problems,
             resources: performance.getEntriesByType("resource").map(function (e) { return e.name; }),
             scripts: document.scripts.length,
             overflow: document.documentElement.scrollWidth - window.innerWidth};
  var pre = document.createElement("pre");
  pre.id = "render-check";
  pre.hidden = true;
  pre.textContent = btoa(unescape(encodeURIComponent(JSON.stringify(res))));
  document.body.appendChild(pre);
});
</script>'

# render PAGE NAME: Chromium opens a copy of PAGE with the two scripts, screenshots it to
# $T/NAME.png and leaves what it measured in $T/NAME.json and its console log in
# $T/NAME.console. Chromium gets a new empty profile and no network: no first-run,
# sync, component updates, background requests or QUIC, and every host name resolves
# to nothing.
render() {
  local page=$1 name=$2 copy=$T/$2.check.html profile=$T/$2.profile rc=0
  # index() and substr(), not sub(): the scripts hold "&&", which sub() would replace.
  awk -v hook="$hook" -v measure="$measure" '
    { line = $0
      if (!h && (i = index(line, "<head>"))) {
        line = substr(line, 1, i + 5) "\n" hook substr(line, i + 6); h = 1 }
      if (!m && (i = index(line, "</body>"))) {
        line = substr(line, 1, i - 1) measure "\n" substr(line, i); m = 1 }
      print line }
    END { if (!h || !m) exit 1 }' "$page" >"$copy" || fail "$page has no <head> or no </body>"
  rm -rf "$profile"
  mkdir -p "$profile"
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --host-resolver-rules='MAP * ~NOTFOUND' --user-data-dir="$profile" \
    --enable-logging=stderr --v=0 --hide-scrollbars --window-size=1400,4200 \
    --screenshot="$T/$name.png" --dump-dom "file://$copy" \
    >"$T/$name.dom" 2>"$T/$name.stderr" </dev/null || rc=$?
  rm -rf "$profile"
  ((rc == 0)) || { tail -n 20 "$T/$name.stderr" >&2; fail "$name: chromium exited $rc"; }
  grep -F 'CONSOLE' "$T/$name.stderr" >"$T/$name.console" || true
  sed -n 's/.*<pre id="render-check" hidden="">\([A-Za-z0-9+/=]*\)<\/pre>.*/\1/p' "$T/$name.dom" |
    base64 -d >"$T/$name.json" 2>/dev/null || true
  jq -e . "$T/$name.json" >/dev/null 2>&1 || fail "$name: no measurements in the page Chromium dumped"
}

# problems NAME SVGS [TABLE]: prints one line per way the rendered page NAME falls short
# of a page with SVGS charts and result tables of class TABLE (runs); nothing when it
# renders as it should.
problems() {
  local j=$T/$1.json
  jq -r --argjson want_svgs "$2" --arg table "${3:-runs}" '
    (if (.title | length) == 0 then "no title" else empty end),
    (if .h1 == null or .h1_size[1] == 0 then "no visible heading" else empty end),
    (.svgs | length) as $n | (if $n != $want_svgs then "\($n) charts, expected \($want_svgs)" else empty end),
    (.svgs[] | select(.size[0] < 200 or .size[1] < 100 or .shapes == 0 or .drawn == 0)
     | "an empty or unrendered chart \(.figure): \(.size[0])x\(.size[1]) px, \(.drawn) of \(.shapes) paths drawn"),
    ([.tables[] | select(.class | startswith($table))] | if length == 0 then "no result table" else empty end),
    (.tables[] | select(.rows < 2 or .size[1] == 0) | "an empty table (\(.class)): \(.rows) rows"),
    (.images[] | select(.ok | not) | "a broken image: \(.src)"),
    (.problems[] | "page error: \(.)"),
    (.resources[] | "a resource fetched: \(.)"),
    (if .scripts != 2 then "\(.scripts - 2) scripts of its own" else empty end),
    (if .overflow > 0 then "wider than the window by \(.overflow) px" else empty end)
  ' "$j"
  sed 's/^/console: /' "$T/$1.console"
  # The screenshot is a PNG of the window's size (width and height in its IHDR).
  local ihdr
  ihdr=$(od -An -tx1 -j12 -N12 "$T/$1.png" 2>/dev/null | tr -d ' \n')
  [[ $ihdr == 494844520000057800001068 ]] || echo "the screenshot is not a 1400x4200 PNG (IHDR $ihdr)"
}

# ---------------------------------------------------------------- the check fails a bad page

cat >"$T/bad.html" <<'EOF'
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>bad</title></head>
<body><h1>A page that renders badly</h1>
<img src="missing.png" alt="missing">
<figure id="chart-empty"><svg width="600" height="300" viewBox="0 0 600 300"></svg></figure>
<table class="runs"><tr><th>run</th></tr></table>
<p style="white-space: nowrap">a line wider than any window: <code>loadtest/report --modes ...</code><span style="display: inline-block; width: 3000px"></span></p>
<script>console.error("an error on the console");</script>
</body></html>
EOF
render "$T/bad.html" bad
problems bad 1 >"$T/bad.problems"
for want in "an empty or unrendered chart chart-empty" "a broken image" \
  "console.error: an error on the console" "an empty table (runs)" "console: " \
  "1 scripts of its own" "wider than the window by"; do
  grep -qF "$want" "$T/bad.problems" || fail "the check missed '$want' on the bad page: $(cat "$T/bad.problems")"
done
echo "ok: the check fails a page with a broken image, a console error, an empty chart and an overflow"

# ---------------------------------------------------------------- the fixture's page

fx=$T/fixture
mkdir -p "$fx"
cp "$src/tests/loadtest/report-fixture.json" "$fx/report.json"
"$src/loadtest/report" --html-only "$fx" || fail "loadtest/report --html-only failed"
page=$fx/index.html
[[ -s $page ]] || fail "no index.html"
expect_eq "files after --html-only" "index.html report.json" \
  "$(find "$fx" -mindepth 1 -printf '%f\n' | sort | tr '\n' ' ' | sed 's/ $//')"

# Self-contained: nothing for the browser to fetch. The only URLs are the SVG namespace
# names (never fetched) and the link to report.json next to the page.
refs=$(grep -oE '(src|href|xlink:href)="[^"]*"|url\([^)#]*\)|@import|<(script|link|img|iframe|object)\b' "$page" |
  grep -vE '^(xlink:)?href="(#|report\.json")' || true)
expect_eq "references to other files in the page" "" "$refs"

render "$page" fixture
problems fixture 3 >"$T/fixture.problems"
[[ ! -s $T/fixture.problems ]] || fail "the fixture's page: $(cat "$T/fixture.problems")"
j=$T/fixture.json
expect_eq "title" "stockd: lock strategies compared (2026-11-23T12:55:52Z)" "$(jq -r .title "$j")"
expect_eq "charts" "chart-throughput chart-p99 chart-stock" "$(jq -r '[.svgs[].figure] | join(" ")' "$j")"
expect_eq "tables and their rows (a header row each)" "facts:8 runs hot:5 runs hot:5 runs spread:3 runs curve:4" \
  "$(jq -r '[.tables[] | "\(.class):\(.rows)"] | join(" ")' "$j")"
dom=$T/fixture.dom
for want in '<td class="verdict oversold">OVERSOLD</td>' '<td class="verdict exact">EXACT</td>' \
  'innodb_flush_log_at_trx_commit=1, sync_binlog=0 (binary log off)' 'ZooKeeper forceSync=yes' \
  'data directories on ext4' 'Debian 12.11' 'AMD EPYC, 2 cores' '23.5 GiB' '6.18.44-fc-v769' \
  '<code>loadtest/report --modes'; do
  grep -qF -- "$want" "$dom" || fail "the rendered page does not show '$want'"
done
echo "ok: the fixture's page shows the machine, the command, the durability settings and the verdicts"
# The numbers in the first row are report.json's, in report.md's formats.
row=$(grep -m1 -oE '<tr><td>none</td>.*' "$dom" | sed -E 's#</tr>.*##; s/<[^>]+>/|/g; s/\|+/|/g; s/&gt;/>/g')
expect_eq "the first row of the first table" \
  "|none|none --batch-max 1|2000 -> -45|2045|45|OVERSOLD|ok|0|2294|38.7|128.5|n/a|5.91|n/a|34 / 33 / 33|" "$row"

# ---------------------------------------------------------------- the committed page

# docs/report/index.html is the headline benchmark's page, which lab/report.py writes
# from docs/report/bench.json: the ample-stock tables of both routes (every mode with ab
# or wrk and stockload, hot and spread, and the HTTP ceiling) come first, each with its
# chart; the run's facts after them.
committed=$src/docs/report/index.html
[[ -s $committed ]] || fail "no docs/report/index.html (loadtest/report --html-only docs/report)"
render "$committed" committed
problems committed 2 bench >"$T/committed.problems"
[[ ! -s $T/committed.problems ]] || fail "docs/report/index.html: $(cat "$T/committed.problems")"
j=$T/committed.json
expect_eq "the committed page's title names its benchmark's date" \
  "stockd: $(jq -r '"The headline benchmark: ample stock, one hot product and 100 spread, nginx round-robin and affinity (\(.date))"' "$src/docs/report/bench.json")" \
  "$(jq -r .title "$j")"
expect_eq "the charts, one per route" "chart-round-robin chart-affinity" "$(jq -r '[.svgs[].figure] | join(" ")' "$j")"
# The tables in page order: the headline first; its rows are a header, the ceiling and
# one per mode (and the ensemble's on round-robin) as bench.json has them.
modes=$(jq '[.bench.rows[] | select(.row != "ceiling" and (.ensemble | not)) | .spec] | unique | length' "$src/docs/report/bench.json")
expect_eq "tables and their rows, in page order" \
  "bench round-robin:$((modes + 3)) bench affinity:$((modes + 2)) bench-rl:3 facts:5" \
  "$(jq -r '[.tables[] | "\(.class):\(.rows)"] | join(" ")' "$j")"
dom=$T/committed.dom
for want in '<th>hot ab</th><th>hot stockload</th><th>spread wrk</th><th>spread stockload</th>' \
  '<td>GET /health (HTTP ceiling' '<h2 id="route-round-robin">' '<h2 id="route-affinity">' \
  'zk, ZooKeeper as a 3-server ensemble' '<td class="strayed">STRAYED: '; do
  grep -qF -- "$want" "$dom" || fail "the rendered page does not show '$want'"
done
# The headline comes before anything else: the first table of the page is its first.
expect_eq "the page's first table" "bench round-robin" "$(jq -r '.tables[0].class' "$j")"
# The committed page is what the renderer makes of the committed bench.json now.
cur=$T/current
mkdir -p "$cur"
cp "$src/docs/report/bench.json" "$src/docs/report/report.md" "$cur/"
"$src/loadtest/report" --html-only "$cur" 2>/dev/null || fail "loadtest/report --html-only failed on bench.json"
cmp -s "$cur/index.html" "$committed" ||
  fail "docs/report/index.html is not what loadtest/report --html-only docs/report makes now: $(diff "$committed" "$cur/index.html" | head -5)"
cmp -s "$cur/bench.md" "$src/docs/report/bench.md" ||
  fail "docs/report/bench.md is not what loadtest/report --html-only docs/report makes now"
echo "ok: docs/report/index.html shows the headline benchmark first, renders and is current (screenshots: $T/fixture.png, $T/committed.png)"
