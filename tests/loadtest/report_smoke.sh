#!/usr/bin/env bash
# loadtest/report end to end, small: four run specs (none, batched zk, redis, and redis with
# the watchdog, preset redis-renew) on the report's own stack
# under this test's run directory, with counts small enough for CI. It checks what the
# report promises, not how fast anything was: every output file exists (the plots are
# PNG images), report.json parses and says what the database says (none oversold, zk
# ended at exactly 0, the ledger and stockload's reconciliation agree in both), the
# metrics deltas are this run's own (zk's lock waits = its batches, no ZooKeeper
# counters without ZooKeeper), the stock samples start at the initial stock and end at
# the final one, the Markdown has the table, report.json and report.md say the run's
# durability settings, index.html carries the charts and the rows, and the stack is
# stopped afterwards.
#
# usage: report_smoke.sh PATH/TO/stockload   (run by ctest with the STOCKD_* variables)
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/loadtest/tool_stack.sh"
tool_stack "${1:?usage: report_smoke.sh PATH/TO/stockload}" jq gnuplot

# Stock 50 and 300 requests at 100 in flight: the oversell experiment's proportions
# (tests/service/oversell.sh), which make the unlocked run go negative every time.
stock=50 threads=100 loops=3
"$STOCKD_SRC/loadtest/report" --modes "none zk redis redis-renew" --think-us 1000 --spread 0 --curve "" --bench "" \
  --stock "$stock" --threads "$threads" --loops "$loops" --run "$run" --port-base "$PORT0" \
  --out "$out" </dev/null |
  tee "$T/stdout" || fail "loadtest/report failed"

for f in report.md report.json throughput.png p99.png stock.png index.html; do
  [[ -s $out/$f ]] || fail "missing or empty: $out/$f"
done
for f in throughput.png p99.png stock.png; do
  expect_eq "$f is a PNG image" 89504e470d0a1a0a "$(od -An -N8 -tx1 "$out/$f" | tr -d ' \n')"
done

j=$out/report.json
jq -e . "$j" >/dev/null || fail "report.json does not parse"
r() { jq -r --arg m "$1" ".runs[] | select(.run == \$m) | $2" "$j"; }
expect_eq "runs, in order" "none zk redis redis-renew" "$(jq -r '[.runs[].run] | join(" ")' "$j")"
expect_eq "stockd options of the presets" "none:--batch-max 1|zk:|redis:|redis:--lease-renew on" \
  "$(jq -r '[.runs[] | "\(.mode):\(.stockd_args | join(" "))"] | join("|")' "$j")"
expect_eq "requests per run" $((threads * loops)) "$(jq -r .load.requests "$j")"
expect_eq "think times of the load" "[1000]" "$(jq -c .load.think_us "$j")"
expect_eq "nproc in the machine" "$(nproc)" "$(jq -r .machine.nproc "$j")"
expect_eq "Debian version in the machine" "$(cat /etc/debian_version)" "$(jq -r .machine.debian "$j")"
# The durability of the run, as the stack's servers had it: MariaDB at its durable
# defaults with no binary log, ZooKeeper's zoo.cfg silent on forceSync (so yes), and
# the run directory's filesystem.
expect_eq "durability: MariaDB" '{"innodb_flush_log_at_trx_commit":1,"sync_binlog":0,"log_bin":0}' \
  "$(jq -c .durability.mysql "$j")"
expect_eq "durability: ZooKeeper" '{"force_sync":"yes","force_sync_source":"default"}' \
  "$(jq -c .durability.zookeeper "$j")"
expect_eq "durability: the run directory's filesystem" "$(findmnt -n -o FSTYPE -T "$run")" \
  "$(jq -r .durability.storage.fstype "$j")"

for m in none zk redis redis-renew; do
  expect_eq "$m: initial stock" "$stock" "$(r "$m" .initial)"
  expect_eq "$m: ledger" ok "$(r "$m" .ledger)"
  expect_eq "$m: stockload reconciliation" ok "$(r "$m" .reconciliation)"
  expect_eq "$m: orders = deducted answers" "$(r "$m" .deducted)" "$(r "$m" .orders)"
  expect_eq "$m: every request answered deducted or sold_out" 0 "$(r "$m" .errors)"
  # The sampler runs from before the load until after it.
  expect_eq "$m: first stock sample" "$stock" "$(r "$m" '.stock_samples[0][1]')"
  expect_eq "$m: last stock sample" "$(r "$m" .final)" "$(r "$m" '.stock_samples[-1][1]')"
done

final=$(r none .final)
((final < 0)) || fail "none: expected a negative final stock, got $final"
expect_eq "none: verdict" OVERSOLD "$(r none .verdict)"
expect_eq "none: oversold" $((-final)) "$(r none .oversold)"
expect_eq "none: ZooKeeper ops" null "$(r none .zk_ops)"
expect_eq "none: lock waits" 0 "$(r none .lock_wait.count)"

expect_eq "zk: final stock" 0 "$(r zk .final)"
expect_eq "zk: verdict" EXACT "$(r zk .verdict)"
expect_eq "zk: orders" "$stock" "$(r zk .orders)"
# Each lock round of the zk instances is one batch (a lock wait, then one transaction),
# and the counters are this run's: fresh processes, before/after deltas.
expect_eq "zk: lock waits = batches" "$(r zk .batches)" "$(r zk .lock_wait.count)"
expect_eq "zk: batches served every deduction" true "$(r zk '.batches >= 1 and .batch_mean >= 1')"
expect_eq "zk: deductions <= batches x mean" true \
  "$(r zk '(.batches * .batch_mean) >= .orders')"
expect_eq "zk: lock wait p99 is a bucket bound" true "$(r zk '.lock_wait.p99_le_s != null')"
expect_eq "zk: one create per lock round at least" true "$(r zk '.zk_ops.create >= .batches')"
expect_eq "zk: ops per deduction" true \
  "$(r zk '.zk_ops_per_deduction == ((.zk_ops | add) / .deducted)')"
expect_eq "zk: statements per deduction measured" true "$(r zk '.mysql_statements_per_deduction > 0')"
expect_eq "redis: verdict" EXACT "$(r redis .verdict)"
expect_eq "none: no lock service" null "$(r none .lock_service)"
expect_eq "zk: lock service" zookeeper "$(r zk .lock_service)"
expect_eq "redis: lock service" redis "$(r redis .lock_service)"
# The watchdog's preset: mode redis with --lease-renew on, exact like redis.
expect_eq "redis-renew: verdict" EXACT "$(r redis-renew .verdict)"
expect_eq "redis-renew: lock service" redis "$(r redis-renew .lock_service)"
expect_eq "redis: at least 2 Redis operations per lock round" true \
  "$(r redis '.lock_service_ops >= 2 * .lock_acquisitions and .lock_acquisitions >= 1')"
for m in none zk redis redis-renew; do
  expect_eq "$m: instance shares add up to the orders" "$(r "$m" .orders)" \
    "$(r "$m" '[.instance_share[].orders] | add')"
done

md=$out/report.md
grep -qF "One hot product (id 1, stock $stock), stockd --think-us 1000" "$md" ||
  fail "the table header does not say the load"
grep -qF -- "--threads $threads --loops $loops" "$md" || fail "report.md does not say the load"
grep -qF "| none | \`none --batch-max 1\` | $stock -> $final | " "$md" ||
  fail "no table row for none: $(grep '^|' "$md")"
grep -qF "| zk | \`zk\` | $stock -> 0 | $stock | 0 | EXACT | ok | " "$md" ||
  fail "no table row for zk: $(grep '^|' "$md")"
grep -qF -- "--modes 'none zk redis redis-renew'" "$md" || fail "report.md does not show the command"
grep -qF "Durability: MariaDB innodb_flush_log_at_trx_commit=1, sync_binlog=0 (binary log off); ZooKeeper forceSync=yes" "$md" ||
  fail "report.md does not say the durability settings: $(grep -i durab "$md")"
echo "ok: report.md has the header, both rows, the command and the durability settings"

# index.html: the same run on one page with its three charts inline (tests/loadtest/
# report_html.sh renders such a page in Chromium).
html=$out/index.html
expect_eq "inline SVG charts in index.html" 3 "$(grep -c '^<svg' "$html")"
grep -qF '<td class="verdict exact">EXACT</td>' "$html" || fail "index.html has no EXACT verdict cell"
grep -qF "<tr><td>none</td><td><code>none --batch-max 1</code></td><td>$stock -&gt; $final</td>" "$html" ||
  fail "index.html has no row for none"
grep -qF 'innodb_flush_log_at_trx_commit=1' "$html" || fail "index.html does not say the durability settings"
if grep -qE '<(img|script|link)\b' "$html"; then fail "index.html loads something: $(grep -oE '<(img|script|link)[^>]*' "$html")"; fi
echo "ok: index.html has the charts, the rows and the durability settings"

# The report stopped its stack: no process of it runs and its ports are free.
for f in "$run"/mysql/pid "$run"/zk/pid "$run"/redis/pid "$run"/nginx/nginx.pid "$run"/stockd/*.pid; do
  if pid_alive "$f"; then fail "still running after the report: $f"; fi
done
for p in $((PORT0 + 1)) $((PORT0 + 2)) $((PORT0 + 3)) $((PORT0 + 6)) $((PORT0 + 11)) $((PORT0 + 12)) \
  $((PORT0 + 13)); do
  port_free "$p" || fail "port $p still taken after the report"
done
echo "ok: the report's stack is stopped"
echo PASS
