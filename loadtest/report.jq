# What report.md and index.html share (loadtest/report): the number formats, the cells of
# the tables, the column legend and the sentences about the machine and the run's
# durability. Each table cell is a string, or {code: STRING} for a cell shown as code;
# md_cells and html_cells turn a row into Markdown or HTML, so both documents show the
# same values in the same columns. Text written here uses Markdown's **bold** and
# `code` only, which md_inline_html turns into HTML.

def fix1: (. * 10 | round) as $n | "\($n / 10 | floor).\($n % 10)";
def fix2: (. * 100 | round) as $n | "\($n / 100 | floor).\($n % 100 | tostring | if length < 2 then "0" + . else . end)";
def ms: if . == null then "n/a" else fix1 end;
def z: if . == null then "n/a" else fix2 end;
def share: if length == 0 then "n/a"
           else map(.share * 100 | round | tostring) | join(" / ") end;
def spec: {code: "\(.mode)\(if (.stockd_args | length) > 0 then " " + (.stockd_args | join(" ")) else "" end)"};

# ---------------------------------------------------------------- tables

# The table of a hot-product or spread table: its header, the alignment of each
# column (l or r), and one run's cells.
def run_head: ["run", "stockd --lock", "stock initial -> final", "orders", "oversold", "verdict", "ledger", "other answers", "req/s", "p50 ms", "p99 ms", "lock service ops / deduction", "MySQL statements / deduction", "mean batch", "instance share %"];
def run_align: ["l", "l", "l", "r", "r", "l", "l", "r", "r", "r", "r", "r", "r", "r", "l"];
def run_cells:
  [.run, spec, "\(.initial) -> \(.final)", "\(.orders)", "\(.oversold)", .verdict,
   "\(.ledger)\(if .reconciliation == "ok" or .reconciliation == "n/a" then "" else " (reconciliation \(.reconciliation))" end)",
   "\(.errors)", "\(.throughput_rps | round)", (.latency_ms.p50 | ms), (.latency_ms.p99 | ms),
   "\(.lock_service_ops_per_deduction | z)\(if .lock_service then " (" + .lock_service + ")" else "" end)",
   (.mysql_statements_per_deduction | z), (.batch_mean | z), (.instance_share | share)];

# The concurrency curve of batched zk.
def curve_head: ["threads", "requests", "verdict", "ledger", "other answers", "req/s", "p50 ms", "p99 ms", "mean batch", "ZK ops / deduction"];
def curve_align: ["r", "r", "l", "l", "r", "r", "r", "r", "r", "r"];
def curve_cells:
  ["\(.threads)", "\(.requests)", .verdict, .ledger, "\(.errors)", "\(.throughput_rps | round)",
   (.latency_ms.p50 | ms), (.latency_ms.p99 | ms), (.batch_mean | z), (.zk_ops_per_deduction | z)];

def md_cell: if type == "object" then "`\(.code)`" else . end;
def md_row: "| " + (map(md_cell) | join(" | ")) + " |";
def md_rule: "|" + (map(if . == "r" then "--:|" else "---|" end) | join(""));

def html_cell: if type == "object" then "<code>\(.code | @html)</code>" else @html end;
# A table with a class (for the page's style and its test) and the verdict column, if
# any, marked so that OVERSOLD stands out.
def html_table(class; head; align; rows):
  (head | index("verdict")) as $v
  | "<table class=\"\(class)\">",
    "<thead><tr>" + (head | map("<th>\(@html)</th>") | join("")) + "</tr></thead>",
    "<tbody>",
    (rows | "<tr>" + ([., align] | transpose | to_entries
                        | map((if .key == $v then " class=\"verdict \(.value[0] | ascii_downcase | gsub(" "; "-"))\""
                               elif .value[1] == "r" then " class=\"num\"" else "" end) as $c
                              | "<td\($c)>\(.value[0] | html_cell)</td>")
                        | join("")) + "</tr>"),
    "</tbody>",
    "</table>";

# Markdown's **bold** and `code`, after escaping the rest, as HTML.
def md_inline_html:
  @html
  | gsub("\\*\\*(?<t>[^*]+)\\*\\*"; "<b>\(.t)</b>")
  | gsub("`(?<t>[^`]+)`"; "<code>\(.t)</code>");

# ---------------------------------------------------------------- the run

def machine_text:
  "\(.nproc) CPUs (\(.cpu)), \(.ram_gib) GiB RAM, \(.os)\(if .debian then " (Debian \(.debian))" else "" end), Linux \(.kernel), MariaDB \(.mariadb)";

# The durability settings a report records (reports made before they were recorded
# have none: say so rather than guess).
def durability_text:
  if . == null then "not recorded (this report was made before loadtest/report recorded the durability settings)"
  else
    "MariaDB innodb_flush_log_at_trx_commit=\(.mysql.innodb_flush_log_at_trx_commit), sync_binlog=\(.mysql.sync_binlog)\(if .mysql.log_bin == 0 then " (binary log off)" else "" end); ZooKeeper forceSync=\(.zookeeper.force_sync)\({"default": " (the default: zoo.cfg does not set it)", "zoo.cfg": " (set in zoo.cfg)"}[.zookeeper.force_sync_source] // " (no zoo.cfg found)"); data directories on \(.storage.fstype) (\(.storage.source), \(.storage.medium))"
  end;

def legend:
  "**run**: the run spec (see `loadtest/report --help` for the presets); **stockd --lock**: the mode and the options it adds. A `-1` suffix is `--batch-max 1`: one lock acquisition per deduction, the seed design; `zk-seed` also turns the sold-out pre-check off, so that every request takes the lock, sold-out ones too, as in the seed.",
  "**orders**: rows in `orders` for the product(s) after the run; **oversold** = orders - initial stock when positive.",
  "**verdict**: OVERSOLD (a stock < 0), EXACT (final 0 and orders = initial stock), NO OVERSELL (spread table, see there) or UNDERSOLD.",
  "**ledger**: ok when deducted answers = orders rows = initial - final stock; on the hot product stockload also reconciles every deducted answer with its order row, shown when it disagrees.",
  "**other answers**: requests answered neither `deducted` nor `sold_out` (lock timeouts, 503s, transport errors); see `counts` in report.json.",
  "**req/s, p50, p99**: measured by stockload over all requests from the first request to the last answer; latency covers every answer, sold-out ones included (per-outcome percentiles are in report.json).",
  "**lock service ops / deduction**: operations sent to the lock service, summed over the instances, divided by the deducted answers; the service in brackets. zookeeper: the increase of `stockd_zk_ops_total` (create, delete, get_children, get_data, sync); redis: of `stockd_lock_service_ops_total` (scripts, SUBSCRIBE, PING on reconnect...); mysql_lock_table: the lock table's own statements (INSERT, takeover DELETE, release DELETE) on their own connections, not counted in the MySQL column. n/a: the mode uses no lock service (none, local, for-update, atomic).",
  "**MySQL statements / deduction**: the increase of `stockd_mysql_statements_total` (every statement sent: reads, writes, COMMIT, ROLLBACK, the sold-out pre-check) divided by the deducted answers.",
  "**mean batch**: deductions served per lock acquisition (`stockd_batch_size` histogram: sum / count). n/a: the mode does not batch.",
  "**instance share %**: each stockd instance's share of the orders, in instance order: how fairly the lock passed between the instances.";

# The headline benchmark (.bench of report.json or bench.json): one object per nginx
# route, {route, rows}, each row the cells of one line (bench_head); the first line is
# the HTTP ceiling (median [min-max] over the modes of the ceilings measured next to
# them, each mode's the median of its runs), then the modes in run order, then the
# ZooKeeper-ensemble row if there is one. A mode's cell is the median of its runs
# (settings.repeat, one run for a report made before repetitions): the median req/s
# and the median of the fractions, each run against the ceiling measured right before it.
def bench_head: ["mode", "hot ab", "hot stockload", "spread wrk", "spread stockload", "hot p99 (ab)",
                 "spread p99 (wrk)", "lock ops/deduction", "exact"];
def bench_align: ["l", "r", "r", "r", "r", "r", "r", "r", "l"];
def bench_median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
                  else (.[length / 2 - 1] + .[length / 2]) / 2 end;
def bench_tables:
  .bench as $B
  | def ceil($r):
      first($B.rows[] | select(.row == "ceiling" and .route == $r.route and .kind == $r.kind
                               and .client == $r.client and .spec == $r.spec
                               and .ensemble == $r.ensemble and .rep == $r.rep) | .rps) // null;
    def withfrac: . as $r | ceil($r) as $c
      | $r + {fraction: (if $c == null or $c == 0 or $r.row == "ceiling" then null else $r.rps / $c end)};
    def cell($r): if $r == null then "–"
                  else "\($r.rps | round)\(if $r.fraction == null then "" else " (\($r.fraction | fix2))" end)" end;
    def p99($r): if $r == null then "–" else ($r.p99_ms | ms) end;
    def find($rows; $kind; $client): [$rows[] | select(.kind == $kind and .client == $client)]
      | if length == 0 then null
        else {rps: (map(.rps) | bench_median), p99_ms: (map(.p99_ms) | bench_median),
              fraction: (map(.fraction | select(. != null)) | bench_median)} end;
    def ops($rows; $kind): (first($rows[] | select(.kind == $kind)) // null) as $x
      | if $x == null or $x.lock_ops_per_deduction == null then "–" else ($x.lock_ops_per_deduction | fix2) end;
    def exact($rows): if ($rows | length) == 0 then "–"
      elif all($rows[]; .exact) then "yes (\($rows | group_by(.kind) | map(.[0].orders) | add) orders)"
      else "NO: " + ([$rows[] | select(.exact | not)
                      | "\(.kind) \(.client): \(.initial) -> \(.final), \(.orders) orders; \(.client_orders) orders, \(.ok) 2xx"]
                     | unique | join("; ")) end;
    def line($name; $rows):
      [$name, cell(find($rows; "hot"; "ab")), cell(find($rows; "hot"; "stockload")),
       cell(find($rows; "spread"; "wrk")), cell(find($rows; "spread"; "stockload")),
       p99(find($rows; "hot"; "ab")), p99(find($rows; "spread"; "wrk")),
       "\(ops($rows; "hot")) / \(ops($rows; "spread"))", exact($rows)];
    def ceilcell($rows; $kind; $client):
      [$rows[] | select(.kind == $kind and .client == $client)] | group_by(.spec)
      | map(map(.rps) | bench_median) as $v
      | if ($v | length) == 0 then "–"
        else "\($v | bench_median | round) [\($v | min | round)–\($v | max | round)]" end;
    def ceilp99($rows; $kind; $client): [$rows[] | select(.kind == $kind and .client == $client) | .p99_ms]
      | if length == 0 then "–" else (bench_median | ms) end;
    def ceilline($rows):
      ["GET /health (HTTP ceiling: median [min–max] over the modes, each the median of its runs)",
       ceilcell($rows; "hot"; "ab"), ceilcell($rows; "hot"; "stockload"),
       ceilcell($rows; "spread"; "wrk"), ceilcell($rows; "spread"; "stockload"),
       ceilp99($rows; "hot"; "ab"), ceilp99($rows; "spread"; "wrk"), "–", "–"];
    ($B.rows | map(withfrac)) as $rows
  | ($rows | map(.route) | unique | sort | reverse)[] as $route
  | [$rows[] | select(.route == $route and .row != "ceiling" and (.ensemble | not))] as $modes
  | [$rows[] | select(.route == $route and .row != "ceiling" and .ensemble)] as $ens
  | {route: $route,
     rows: ([ceilline([$rows[] | select(.row == "ceiling" and .route == $route and (.ensemble | not))])]
            + [($modes | map(.spec) | reduce .[] as $s ([]; if index([$s]) then . else . + [$s] end))[] as $spec
               | line($spec; [$modes[] | select(.spec == $spec)])]
            + (if ($ens | length) > 0 then [line("\($ens[0].spec), ZooKeeper as a 3-server ensemble"; $ens)]
               else [] end))};

# The rate limit runs of the benchmark, one line each.
def bench_rl_head: ["rate limit", "requests", "admitted", "refused (429)", "admitted p99 ms",
                    "req/s (all answers)", "stock exact, ledger reconciled"];
def bench_rl_align: ["l", "r", "r", "r", "r", "r", "l"];
def bench_rl_rows:
  .bench.rate_limit[]
  | [(.rate_limit // "none"), (.requests | tostring), (.admitted | tostring), (.refused_429 | tostring),
     (.admitted_p99_ms | ms), (.rps | round | tostring),
     (if .exact then "yes (\(.orders) orders, \(.initial) -> \(.final))"
      else "NO: \(.orders) orders, \(.admitted) admitted, \(.initial) -> \(.final), reconciliation \(.reconciliation)" end)];

# The benchmark's prose, shared by bench.md, report.md and index.html (Markdown inline).
def bench_settings_text:
  .bench.settings as $S
  | "Every product starts with stock \($S.stock_each): no answer is sold out, every request is a deduction. The exact column: no product below 0, orders rows = the stock change, and the 2xx answers of each client = the orders its load made (wrk stops at its deadline without counting the requests still under way, so up to -c of its orders have no counted answer). **Hot**: product \($S.hot.product), `\($S.hot.ab)` and `\($S.hot.stockload)`. **Spread**: products \($S.spread.products) drawn uniformly, `\($S.spread.wrk)` and `\($S.spread.stockload)`. The **HTTP ceiling** is `GET /health?id=N` through the same nginx with the same client and settings (stockd answers it without the database), measured right before the load of each mode; each cell is req/s and, in brackets, its fraction of the ceiling measured next to it (same client, route and load). \(if ($S.repeat // 1) > 1 then "Each cell is the median of \($S.repeat) runs: the ceiling and the load alternate (ceiling, load, ceiling, load...), each run's fraction is against the ceiling measured right before it, and the cell shows the median req/s, the median fraction and the median p99; the ceiling row takes each mode's median and shows the median and range of those. " else "" end)p99 in ms. Lock ops: operations sent to the lock service (ZooKeeper; Redis; RedLock's three Redis servers together; etcd; the lock table) per deduction, over all the runs of the load, hot / spread.";
def bench_rl_text:
  "Batched zk, nginx round-robin, stockload `\(.bench.settings.hot.stockload)` on product \(.bench.settings.hot.product), without and with `scripts/stack --rate-limit RATE:BURST` (RATE per second per product, BURST admitted at once above it; the rest get 429 with a JSON body and never reach stockd).";
# The servers that shared the CPUs with the benchmark: etcd and RedLock's Redis servers
# only when one of their rows ran.
def bench_servers:
  [.bench.rows[].mode] as $m
  | ["MariaDB", "ZooKeeper", "Redis"]
    + (if any($m[]; . == "redlock") then ["RedLock's three Redis servers"] else [] end)
    + (if any($m[]; . == "etcd") then ["etcd"] else [] end)
  | "\(.[:-1] | join(", ")) and \(.[-1])";
def bench_title:
  "The headline benchmark: ample stock, one hot product and \(.bench.settings.spread.count // 100) spread, nginx \(.bench.rows | map(.route) | unique | sort | reverse | join(" and "))";
