# What report.md and the page of the mixed tables share (loadtest/report; the headline
# benchmark's tables are lab/report.py's): the number formats, the cells of
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
