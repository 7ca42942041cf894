"""The strategy comparison report, written from its data (bench.json, report.json).

loadtest/report measures; this module renders what it measured. The headline
benchmark becomes Markdown (bench.md) and one self-contained HTML page (index.html:
the tables first, then the charts as inline SVG drawn by gnuplot, no scripts, no fonts
or images from anywhere). The older tables, with sold-out answers (report.json's runs:
the hot product at each think time, the spread, the concurrency curve), become
report.md, three plots (gnuplot with loadtest/report-plots.gp) and, for a directory
without bench.json, their own page. Both can be rendered again from the JSON alone:

    /usr/bin/python3 -m lab.report DIR       writes DIR/bench.md and DIR/index.html
                                             from DIR/bench.json, or DIR/index.html
                                             from DIR/report.json; and DIR/scale.md
                                             and scale-*.png from DIR/scale.json

Each mode's cell is the median of its runs (settings.repeat): req/s and, in brackets,
its fraction of the HTTP ceiling measured right before it (same client, route, load).
The ceiling must be measured the same way for every row; a row whose ceiling (the
median of its runs) strays from the route's median ceiling by more than STRAY is
flagged in the table and listed under it, not averaged in silence.
"""

import html
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

STRAY = 0.25  # a row's ceiling more than 25 % away from the route's median

CLIENTS = (("hot", "ab"), ("hot", "stockload"), ("spread", "wrk"), ("spread", "stockload"))
HEAD = ["mode", "hot ab", "hot stockload", "spread wrk", "spread stockload", "hot p99 (ab)",
        "spread p99 (wrk)", "lock ops/deduction", "exact", "ceiling"]


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fix(x, d):
    return "n/a" if x is None else f"{x:.{d}f}"


def _ordered(values):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def tables(doc):
    """The benchmark as data: one dict per route, in the order round-robin, affinity:
    {route, ceiling: {(kind, client): (median, min, max)}, rows: [Row dicts], flagged}."""
    b = doc["bench"]
    rows = b["rows"]

    def ceiling_of(r):
        for c in rows:
            if (c["row"] == "ceiling" and c["route"] == r["route"] and c["kind"] == r["kind"]
                    and c["client"] == r["client"] and c["spec"] == r["spec"]
                    and c["ensemble"] == r["ensemble"] and c.get("rep") == r.get("rep")):
                return c["rps"]
        return None

    out = []
    for route in sorted({r["route"] for r in rows}, reverse=True):
        ceil = [r for r in rows if r["row"] == "ceiling" and r["route"] == route]
        loads = [r for r in rows if r["row"] != "ceiling" and r["route"] == route]
        # Each mode's ceiling per (kind, client): the median of its runs.
        per_mode = {}
        for r in ceil:
            per_mode.setdefault((r["spec"], r["ensemble"], r["kind"], r["client"]), []).append(r["rps"])
        ceiling = {}
        for kc in CLIENTS:
            v = [median(x) for (s, e, k, c), x in per_mode.items() if (k, c) == kc and not e]
            if v:
                ceiling[kc] = (median(v), min(v), max(v))
        lines = []
        for ens in (False, True):
            for spec in _ordered(r["spec"] for r in loads if r["ensemble"] == ens):
                mine = [r for r in loads if r["spec"] == spec and r["ensemble"] == ens]
                cells = {}
                strays = []
                for kc in CLIENTS:
                    runs = [r for r in mine if (r["kind"], r["client"]) == kc]
                    if not runs:
                        continue
                    fr = [r["rps"] / c for r in runs
                          if (c := ceiling_of(r)) not in (None, 0)]
                    cells[kc] = {"rps": median(r["rps"] for r in runs),
                                 "p99": median(r["p99_ms"] for r in runs),
                                 "fraction": median(fr)}
                    own = median(per_mode.get((spec, ens, *kc), []))
                    ref = ceiling.get(kc, (None,))[0]
                    if own and ref and abs(own - ref) / ref > STRAY:
                        strays.append((kc, own, ref))
                ops = {}
                for kind in ("hot", "spread"):
                    x = next((r for r in mine if r["kind"] == kind), None)
                    ops[kind] = None if x is None else x.get("lock_ops_per_deduction")
                bad = [r for r in mine if not r["exact"]]
                if bad:
                    exact = "NO: " + "; ".join(sorted({
                        f"{r['kind']} {r['client']}: {r['initial']} -> {r['final']}, {r['orders']} "
                        f"orders; {r['client_orders']} orders, {r['ok']} 2xx" for r in bad}))
                else:
                    orders = sum({r["kind"]: r["orders"] for r in mine}.values())
                    exact = f"yes ({orders} orders)"
                name = spec if not ens else f"{spec}, ZooKeeper as a 3-server ensemble"
                lines.append({"mode": name, "cells": cells, "ops": ops, "exact": exact,
                              "strays": strays})
        out.append({"route": route, "ceiling": ceiling, "rows": lines,
                    "flagged": [l for l in lines if l["strays"]]})
    return out


def _cells(t):
    """Each line of one route's table as strings, in HEAD's columns."""
    c = t["ceiling"]
    yield ["GET /health (HTTP ceiling: median [min–max] over the modes, each the median of its runs)"] + [
        f"{c[kc][0]:.0f} [{c[kc][1]:.0f}–{c[kc][2]:.0f}]" if kc in c else "–" for kc in CLIENTS
    ] + ["–", "–", "–", "–", "–"]
    for l in t["rows"]:
        row = [l["mode"]]
        for kc in CLIENTS:
            x = l["cells"].get(kc)
            row.append("–" if x is None else f"{x['rps']:.0f}"
                       + ("" if x["fraction"] is None else f" ({x['fraction']:.2f})"))
        for kc in (("hot", "ab"), ("spread", "wrk")):
            x = l["cells"].get(kc)
            row.append("–" if x is None else fix(x["p99"], 1))
        row.append(" / ".join("–" if l["ops"][k] is None else f"{l['ops'][k]:.2f}"
                              for k in ("hot", "spread")))
        row.append(l["exact"])
        row.append("STRAYED: " + "; ".join(
            f"{k} {cl} {own:.0f} vs {ref:.0f}" for (k, cl), own, ref in l["strays"])
            if l["strays"] else "ok")
        yield row


def machine_text(m):
    deb = f" (Debian {m['debian']})" if m.get("debian") else ""
    return (f"{m['nproc']} CPUs ({m['cpu']}), {m['ram_gib']} GiB RAM, {m['os']}{deb}, "
            f"Linux {m['kernel']}, MariaDB {m['mariadb']}")


def durability_text(d):
    if not d:
        return "not recorded (this report was made before loadtest/report recorded the durability settings)"
    src = {"default": " (the default: zoo.cfg does not set it)",
           "zoo.cfg": " (set in zoo.cfg)"}.get(d["zookeeper"]["force_sync_source"], " (no zoo.cfg found)")
    return (f"MariaDB innodb_flush_log_at_trx_commit={d['mysql']['innodb_flush_log_at_trx_commit']}, "
            f"sync_binlog={d['mysql']['sync_binlog']}"
            f"{' (binary log off)' if d['mysql']['log_bin'] == 0 else ''}; ZooKeeper "
            f"forceSync={d['zookeeper']['force_sync']}{src}; data directories on "
            f"{d['storage']['fstype']} ({d['storage']['source']}, {d['storage']['medium']})")


def settings_text(b):
    s = b["settings"]
    rep = s.get("repeat", 1)
    return (f"Every product starts with stock {s['stock_each']}: no answer is sold out, every "
            f"request is a deduction. **Hot**: product {s['hot']['product']}, `{s['hot']['ab']}` "
            f"and `{s['hot']['stockload']}`. **Spread**: products {s['spread']['products']} drawn "
            f"uniformly, `{s['spread']['wrk']}` and `{s['spread']['stockload']}`. The **HTTP "
            f"ceiling** is `GET /health?id=N` through the same nginx with the same client and "
            f"settings, measured right before each load; each cell is req/s and, in brackets, "
            f"its fraction of that ceiling. Each cell is the median of {rep} run(s). p99 in ms. "
            f"Lock ops: operations sent to the lock service per deduction, hot / spread. The "
            f"exact column is lab/ledger.py's verdict: no product below 0, orders rows = the "
            f"stock change = the 2xx answers of each client (wrk stops at its deadline, so up "
            f"to -c of its orders have no counted answer). The ceiling column flags a row "
            f"whose ceiling strayed more than {STRAY:.0%} from the route's median.")


def rl_rows(b):
    for r in b.get("rate_limit") or []:
        ex = (f"yes ({r['orders']} orders, {r['initial']} -> {r['final']})" if r["exact"] else
              f"NO: {r['orders']} orders, {r['admitted']} admitted, {r['initial']} -> {r['final']}")
        yield [r["rate_limit"] or "none", str(r["requests"]), str(r["admitted"]),
               str(r["refused_429"]), fix(r["admitted_p99_ms"], 1), f"{r['rps']:.0f}", ex]


RL_HEAD = ["rate limit", "requests", "admitted", "refused (429)", "admitted p99 ms",
           "req/s (all answers)", "stock exact, ledger reconciled"]


def servers(b):
    """The servers that shared the CPUs: etcd and RedLock's only when their rows ran."""
    modes = {r.get("mode") for r in b["rows"]}
    s = ["MariaDB", "ZooKeeper", "Redis"]
    s += ["RedLock's three Redis servers"] if "redlock" in modes else []
    s += ["etcd"] if "etcd" in modes else []
    return ", ".join(s[:-1]) + " and " + s[-1]


def title(doc):
    b = doc["bench"]
    routes = " and ".join(sorted({r["route"] for r in b["rows"]}, reverse=True))
    return (f"The headline benchmark: ample stock, one hot product and "
            f"{b['settings']['spread'].get('count', 100)} spread, nginx {routes}")


def markdown(doc):
    b = doc["bench"]
    out = [f"## {title(doc)}", "", f"Generated {doc['date']} by `{doc['command']}`.", "",
           f"Machine: {machine_text(doc['machine'])}; load average (1 min) "
           f"{doc['machine']['loadavg_start']} before and {doc['machine']['loadavg_end']} after. "
           f"The clients, nginx, {b['settings']['instances']} stockd instances, {servers(b)} "
           f"share these CPUs.", "",
           f"Durability: {durability_text(doc.get('durability'))}.", "", settings_text(b), ""]
    for t in tables(doc):
        out += [f"### nginx {t['route']}", "", "| " + " | ".join(HEAD) + " |",
                "|---|" + "--:|" * 7 + "---|---|"]
        out += ["| " + " | ".join(r) + " |" for r in _cells(t)]
        out.append("")
        for l in t["flagged"]:
            out.append(f"- {l['mode']}: the ceiling next to it strayed more than {STRAY:.0%} "
                       f"from the route's median; its fractions are against its own ceiling.")
        if t["flagged"]:
            out.append("")
    rl = list(rl_rows(b))
    if rl:
        out += ["### Rate limiting in front (nginx limit_req per product), one hot product", "",
                "| " + " | ".join(RL_HEAD) + " |", "|---|" + "--:|" * 5 + "---|"]
        out += ["| " + " | ".join(r) + " |" for r in rl] + [""]
    return "\n".join(out)


def _inline_md(text):
    t = html.escape(text)
    t = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", t)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", t)


def _html_table(cls, head, rows, flag_col=None):
    out = [f'<table class="{cls}">', "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head)
           + "</tr></thead>", "<tbody>"]
    for r in rows:
        tds = []
        for i, v in enumerate(r):
            c = ""
            if i == flag_col and v.startswith("STRAYED"):
                c = ' class="strayed"'
            elif i > 0 and v[:1].isdigit() and " " not in v.split(" (")[0]:
                c = ' class="num"'
            tds.append(f"<td{c}>{html.escape(v)}</td>")
        strayed = flag_col is not None and r[flag_col].startswith("STRAYED")
        out.append(("<tr class=\"strayed\">" if strayed else "<tr>") + "".join(tds) + "</tr>")
    return out + ["</tbody>", "</table>"]


def chart_svg(t, work):
    """One route's req/s by mode and client (the ceiling first) as SVG from gnuplot,
    without its XML prolog and with ids made unique to the route; "" without gnuplot."""
    data = os.path.join(work, f"{t['route']}.tsv")
    with open(data, "w", encoding="utf-8") as f:
        f.write("mode\thot ab\thot stockload\tspread wrk\tspread stockload\n")
        f.write("ceiling\t" + "\t".join(f"{t['ceiling'][kc][0]:.0f}" if kc in t["ceiling"] else "0"
                                         for kc in CLIENTS) + "\n")
        for l in t["rows"]:
            name = l["mode"].split(",")[0] + (" (ens.)" if "ensemble" in l["mode"] else "")
            f.write(name + "\t" + "\t".join(f"{l['cells'][kc]['rps']:.0f}" if kc in l["cells"] else "0"
                                            for kc in CLIENTS) + "\n")
    svg = os.path.join(work, f"{t['route']}.svg")
    script = (f"set terminal svg size 900,420 noenhanced font 'sans-serif,12' background rgb 'white';"
              f"set output '{svg}'; set datafile separator '\\t'; set style data histograms;"
              f"set style histogram clustered gap 1; set style fill solid 0.85 border -1;"
              f"set key top right; set grid ytics; set ylabel 'req/s (median of the runs)';"
              f"set xtics rotate by -30; set title 'nginx {t['route']}: req/s by mode and client';"
              f"plot for [i=2:5] '{data}' using i:xtic(1) title columnheader(i)")
    try:
        subprocess.run(["gnuplot", "-e", script], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    with open(svg, encoding="utf-8") as f:
        text = f.read()
    text = text[text.index("<svg"):]
    p = t["route"]
    return (text.replace('id="', f'id="{p}-').replace("id='", f"id='{p}-")
            .replace('href="#', f'href="#{p}-').replace("url(#", f"url(#{p}-"))


STYLE = """body { font: 15px/1.45 system-ui, sans-serif; color: #222; margin: 1.5em auto; max-width: 1500px; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { font-size: 1.3em; margin-top: 1.6em; }
code { font: 0.92em ui-monospace, monospace; background: #f3f3f3; padding: 0 0.2em; }
table { border-collapse: collapse; margin: 0.6em 0 1em; font-size: 0.84em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; vertical-align: top; }
thead th { background: #eef2f7; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.strayed { background: #fbecc8; font-weight: bold; }
table.facts th { text-align: left; background: #f6f6f6; white-space: nowrap; }
.scroll { overflow-x: auto; }
figure.chart { margin: 0 0 1em; border: 1px solid #ddd; padding: 0.5em; max-width: 950px; } figure.chart svg { width: 100%; height: auto; display: block; }
figcaption { font-size: 0.88em; color: #555; }"""


def page(doc, work, older=False):
    b, m = doc["bench"], doc["machine"]
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>stockd: {e(title(doc))} ({e(doc['date'])})</title>", f"<style>\n{STYLE}\n</style>",
           "</head>", "<body>", f'<h1 id="bench">{e(title(doc))}</h1>',
           f"<p>Measured {e(doc['date'])} by <code>{e(doc['command'])}</code>. The numbers are "
           f"those of that run; this page only shows them.</p>",
           f"<p>{_inline_md(settings_text(b))}</p>"]
    for t in tables(doc):
        r = t["route"]
        out += [f'<h2 id="route-{e(r)}">nginx {e(r)}</h2>', '<div class="scroll">']
        out += _html_table(f"bench {e(r)}", HEAD, list(_cells(t)), flag_col=len(HEAD) - 1)
        out.append("</div>")
        if t["flagged"]:
            out.append('<ul class="strays">' + "".join(
                f"<li>{e(l['mode'])}: its ceiling strayed more than {STRAY:.0%} from the route's "
                f"median; its fractions are against its own ceiling.</li>" for l in t["flagged"]) + "</ul>")
        svg = chart_svg(t, work)
        if svg:
            out += [f'<figure class="chart" id="chart-{e(r)}">', svg,
                    f"<figcaption>nginx {e(r)}: req/s of each mode with each client, the HTTP "
                    f"ceiling first (the median over the modes).</figcaption>", "</figure>"]
    rl = list(rl_rows(b))
    if rl:
        out += ['<h2 id="rate-limit">Rate limiting in front (nginx limit_req per product), one hot product</h2>']
        out += _html_table("bench-rl", RL_HEAD, rl)
    out += ['<h2 id="run">The run</h2>', '<table class="facts">']
    for k, v in (("Date (UTC)", e(doc["date"])), ("Command", f"<code>{e(doc['command'])}</code>"),
                 ("Machine", e(machine_text(m))),
                 ("Load average (1 min)", f"{m['loadavg_start']} before, {m['loadavg_end']} after"),
                 ("Durability", e(durability_text(doc.get("durability"))))):
        out.append(f'<tr><th scope="row">{k}</th><td>{v}</td></tr>')
    out += ["</table>", '<p>The data: <a href="bench.json">bench.json</a>; the same tables as '
            'Markdown: <a href="bench.md">bench.md</a>.</p>']
    if older:
        out.append('<p>The older tables, with sold-out answers (the half-sold-out mix, spread '
                   'and concurrency curve): <a href="report.md">report.md</a>.</p>')
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- the older tables

# report.json's runs (loadtest/report's tables with sold-out answers): the cells of
# each table in report.md's formats, shared by report.md and the older page. A cell is
# a string, or Code(text) for a cell shown as code.


class Code(str):
    """A cell shown as code: `text` in Markdown, <code> in HTML."""


def jround(x):
    """Rounds half away from zero (the reports' rule), to an int."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def fix1(x):
    return "n/a" if x is None else f"{jround(x * 10) / 10:.1f}"


def fix2(x):
    return "n/a" if x is None else f"{jround(x * 100) / 100:.2f}"


def _share(shares):
    return "n/a" if not shares else " / ".join(str(jround(s["share"] * 100)) for s in shares)


def _spec(r):
    return Code(" ".join([r["mode"]] + list(r["stockd_args"])))


RUN_HEAD = ["run", "stockd --lock", "stock initial -> final", "orders", "oversold", "verdict",
            "ledger", "other answers", "req/s", "p50 ms", "p99 ms",
            "lock service ops / deduction", "MySQL statements / deduction", "mean batch",
            "instance share %"]
RUN_ALIGN = "lllrrllrrrrrrrl"


def run_cells(r):
    rec = r.get("reconciliation")
    svc = r.get("lock_service")
    return [r["run"], _spec(r), f"{r['initial']} -> {r['final']}", str(r["orders"]),
            str(r["oversold"]), r["verdict"],
            r["ledger"] + ("" if rec in ("ok", "n/a", None) else f" (reconciliation {rec})"),
            str(r["errors"]), str(jround(r["throughput_rps"])), fix1(r["latency_ms"]["p50"]),
            fix1(r["latency_ms"]["p99"]),
            fix2(r.get("lock_service_ops_per_deduction")) + (f" ({svc})" if svc else ""),
            fix2(r.get("mysql_statements_per_deduction")), fix2(r.get("batch_mean")),
            _share(r.get("instance_share"))]


CURVE_HEAD = ["threads", "requests", "verdict", "ledger", "other answers", "req/s", "p50 ms",
              "p99 ms", "mean batch", "ZK ops / deduction"]
CURVE_ALIGN = "rrllrrrrrr"


def curve_cells(r):
    return [str(r["threads"]), str(r["requests"]), r["verdict"], r["ledger"], str(r["errors"]),
            str(jround(r["throughput_rps"])), fix1(r["latency_ms"]["p50"]),
            fix1(r["latency_ms"]["p99"]), fix2(r.get("batch_mean")),
            fix2(r.get("zk_ops_per_deduction"))]


LEGEND = [
    "**run**: the run spec (see `loadtest/report --help` for the presets); **stockd --lock**: the mode and the options it adds. A `-1` suffix is `--batch-max 1`: one lock acquisition per deduction, the seed design; `zk-seed` also turns the sold-out pre-check off, so that every request takes the lock, sold-out ones too, as in the seed.",
    "**orders**: rows in `orders` for the product(s) after the run; **oversold** = orders - initial stock when positive.",
    "**verdict**: OVERSOLD (a stock < 0), EXACT (final 0 and orders = initial stock), NO OVERSELL (spread table, see there) or UNDERSOLD.",
    "**ledger**: ok when deducted answers = orders rows = initial - final stock; on the hot product stockload also reconciles every deducted answer with its order row, shown when it disagrees.",
    "**other answers**: requests answered neither `deducted` nor `sold_out` (lock timeouts, 503s, transport errors); see `counts` in report.json.",
    "**req/s, p50, p99**: measured by stockload over all requests from the first request to the last answer; latency covers every answer, sold-out ones included (per-outcome percentiles are in report.json).",
    "**lock service ops / deduction**: operations sent to the lock service, summed over the instances, divided by the deducted answers; the service in brackets. zookeeper: the increase of `stockd_zk_ops_total` (create, delete, get_children, get_data, sync); redis: of `stockd_lock_service_ops_total` (scripts, SUBSCRIBE, PING on reconnect...); mysql_lock_table: the lock table's own statements (INSERT, takeover DELETE, release DELETE) on their own connections, not counted in the MySQL column. n/a: the mode uses no lock service (none, local, for-update, atomic).",
    "**MySQL statements / deduction**: the increase of `stockd_mysql_statements_total` (every statement sent: reads, writes, COMMIT, ROLLBACK, the sold-out pre-check) divided by the deducted answers.",
    "**mean batch**: deductions served per lock acquisition (`stockd_batch_size` histogram: sum / count). n/a: the mode does not batch.",
    "**instance share %**: each stockd instance's share of the orders, in instance order: how fairly the lock passed between the instances.",
]


def _md_row(cells):
    return "| " + " | ".join(f"`{c}`" if isinstance(c, Code) else c for c in cells) + " |"


def _md_rule(align):
    return "|" + "".join("--:|" if a == "r" else "---|" for a in align)


def _runs(doc, table, think=None):
    return [r for r in doc["runs"]
            if r["table"] == table and (think is None or r["think_us"] == think)]


def older_title(doc):
    return (f"Lock strategies compared: one hot product, {doc['load']['instances']} stockd "
            f"instances, the same load")


def _hot_title(doc, t, mix=True):
    L = doc["load"]
    half = (f": the half-sold-out mix (stock for half of the {L['requests']} requests)"
            if mix and L["stock"] * 2 == L["requests"] else "")
    return f"One hot product (id {L['product']}, stock {L['stock']}), stockd --think-us {t}{half}"


def _spread_title(doc):
    L = doc["load"]
    return (f"The same load spread over {L['spread_products']} products (ids "
            f"1001..{1000 + L['spread_products']}), stockd --think-us {L['think_us'][0]}")


def older_markdown(doc):
    """report.md of the older tables (without the headline benchmark)."""
    L, m = doc["load"], doc["machine"]
    extra = " " + " ".join(L["extra_stockd_args"]) if L["extra_stockd_args"] else ""
    out = [f"# {older_title(doc)}", "", f"Generated {doc['date']} by `{doc['command']}`.", "",
           f"Machine: {machine_text(m)}. Load average (1 min) {m['loadavg_start']} before the "
           f"runs and {m['loadavg_end']} after them: the load tool, nginx, the instances, "
           f"MariaDB and ZooKeeper all share these CPUs, and anything else running on the "
           f"machine shows in the numbers, so compare runs within one report rather than "
           f"across machines or reports.", ""]
    if "durability" in doc:
        out += [f"Durability: {durability_text(doc['durability'])}.", ""]
    out += [f"Load, the same for every run of a table: stockload `--threads {L['threads']} "
            f"--loops {L['loops']}` = {L['requests']} requests, at most {L['threads']} in "
            f"flight, through nginx round-robin over {L['instances']} stockd instances. Before "
            f"each run the product is reset to its stock (orders cleared) and the stockd "
            f"instances are restarted with the run spec (`stockd --lock MODE ARGS --think-us "
            f"T{extra}`, other options at their defaults); MariaDB, ZooKeeper and nginx stay "
            f"up.", ""]
    for t in L["think_us"]:
        out += [f"### {_hot_title(doc, t)}", "", _md_row(RUN_HEAD), _md_rule(RUN_ALIGN)]
        out += [_md_row(run_cells(r)) for r in _runs(doc, "hot", t)] + [""]
    spread = _runs(doc, "spread")
    if spread:
        n = L["spread_products"]
        out += [f"### {_spread_title(doc)}", "",
                f"Each product starts at stock {L['stock'] // n} ({L['stock']} in all); "
                f"stockload `--products` draws the product of each request uniformly. The "
                f"stock column sums the products; NO OVERSELL means no product went below 0 "
                f"and the ledger holds, with units left where a product drew fewer requests "
                f"than its stock.", "", _md_row(RUN_HEAD), _md_rule(RUN_ALIGN)]
        out += [_md_row(run_cells(r)) for r in spread] + [""]
        for s in spread:
            for h in _runs(doc, "hot", s["think_us"]):
                if h["run"] == s["run"]:
                    out.append(f"- {s['run']}: {jround(s['throughput_rps'])} req/s over {n} "
                               f"products vs {jround(h['throughput_rps'])} req/s on one hot "
                               f"product = {fix2(s['throughput_rps'] / h['throughput_rps'])}x.")
        out.append("")
    curve = _runs(doc, "curve")
    if curve:
        out += [f"### Batched zk (`zk`) at several concurrencies, one hot product, stockd "
                f"--think-us {L['think_us'][0]}", "", _md_row(CURVE_HEAD), _md_rule(CURVE_ALIGN)]
        out += [_md_row(curve_cells(r)) for r in curve] + [""]
    out += ["Columns:"] + ["- " + x for x in LEGEND] + [""]
    out += ["## Plots", "", "![Throughput by strategy](throughput.png)", "",
            "![Latency p50 and p99 by strategy](p99.png)", "", "![Stock over time](stock.png)", "",
            f"The stock plot samples `SELECT stock` over one root connection every "
            f"{L['sample_ms']} ms (server clock), from 0.2 s before the load to 0.2 s after; "
            f"time 0 is the start of stockload.", "",
            "The same data, with per-outcome counts and latencies, the lock-wait buckets and "
            "the stock samples: [report.json](report.json)."]
    return "\n".join(out) + "\n"


def with_bench(older_md, bench_md):
    """report.md with the headline benchmark first and the older tables under their own
    title after it."""
    lines = older_md.split("\n")
    return "\n".join([lines[0], "", bench_md.rstrip("\n"), "## The tables with sold-out answers",
                      ""] + lines[2:])


def plots(doc, fmt, datadir, outdir):
    """The three plots as outdir/{throughput,p99,stock}.fmt (png or svg) by gnuplot with
    loadtest/report-plots.gp, their data files in datadir. Raises OSError when gnuplot
    fails."""
    L = doc["load"]
    hot = _runs(doc, "hot")
    with open(os.path.join(datadir, "modes.tsv"), "w", encoding="utf-8") as f:
        for label in _ordered(r["run"] for r in hot):
            mine = [r for r in hot if r["run"] == label]
            cols = [label]
            for t in L["think_us"]:
                v = next((r["throughput_rps"] for r in mine if r["think_us"] == t), 0)
                cols.append(_num(v))
            for r in mine:
                if r["think_us"] == L["think_us"][0]:
                    cols += [_num(r["latency_ms"]["p50"]), _num(r["latency_ms"]["p99"])]
            f.write("\t".join(cols) + "\n")
    stock_modes = []
    for label in ("none", "zk-seed", "zk"):
        samples = [x for r in hot if r["run"] == label and r["think_us"] == L["think_us"][-1]
                   for x in r["stock_samples"]]
        with open(os.path.join(datadir, f"stock-{label}.tsv"), "w", encoding="utf-8") as f:
            f.writelines(f"{_num(t)}\t{_num(v)}\n" for t, v in samples)
        if samples:
            stock_modes.append(label)
    subtitle = (f"{L['instances']} instances, one hot product at stock {L['stock']}, "
                f"{L['threads']} threads x {L['loops']} loops")
    for c in ("throughput", "p99", "stock"):
        try:
            os.unlink(os.path.join(outdir, f"{c}.{fmt}"))
        except FileNotFoundError:
            pass
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "loadtest", "report-plots.gp")
    r = subprocess.run(["gnuplot", "-e",
                        f"fmt='{fmt}'; datadir='{datadir}'; outdir='{outdir}'; "
                        f"stock_modes='{' '.join(stock_modes)}'; subtitle='{subtitle}'; "
                        f"thinks='{' '.join(map(str, L['think_us']))}'; "
                        f"stock_think='{L['think_us'][-1]}'", script],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise OSError(f"gnuplot failed: {r.stderr.strip()}")


def _num(x):
    """A number as jq's @tsv writes it: integers without a fraction."""
    return str(int(x)) if float(x) == int(x) else repr(float(x))


def _svg_inline(path, prefix):
    """gnuplot's SVG without its XML prolog, every id (and reference to one) prefixed,
    since the charts of one page would otherwise define the same ids."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return ""
    if "<svg" not in text:
        return ""
    text = text[text.index("\n<svg") + 1 if "\n<svg" in text else text.index("<svg"):]
    text = re.sub(r"""(id=["'])""", r"\g<1>" + prefix + "-", text)
    text = re.sub(r"""(href=["']#)""", r"\g<1>" + prefix + "-", text)
    return text.replace("url(#", f"url(#{prefix}-")


def _html_cell(c):
    return f"<code>{html.escape(c)}</code>" if isinstance(c, Code) else html.escape(c)


def _older_table(cls, head, align, rows):
    v = head.index("verdict") if "verdict" in head else None
    out = [f'<table class="{cls}">',
           "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead>",
           "<tbody>"]
    for r in rows:
        tds = []
        for i, (c, a) in enumerate(zip(r, align)):
            cls_ = (f' class="verdict {c.lower().replace(" ", "-")}"' if i == v
                    else ' class="num"' if a == "r" else "")
            tds.append(f"<td{cls_}>{_html_cell(c)}</td>")
        out.append("<tr>" + "".join(tds) + "</tr>")
    return out + ["</tbody>", "</table>"]


OLDER_STYLE = """body { font: 15px/1.45 system-ui, sans-serif; color: #222; margin: 1.5em auto; max-width: 1500px; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { font-size: 1.25em; margin-top: 1.8em; }
code { font: 0.92em ui-monospace, monospace; background: #f3f3f3; padding: 0 0.2em; } table.runs td { white-space: nowrap; } table.facts code { overflow-wrap: anywhere; }
table { border-collapse: collapse; margin: 0.6em 0 1em; font-size: 0.84em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; vertical-align: top; }
thead th { background: #eef2f7; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.verdict.oversold { background: #f7d4d4; font-weight: bold; } td.verdict.exact { background: #d9f0dc; }
td.verdict.undersold { background: #fbecc8; } td.verdict.no-oversell { background: #e5f3e7; }
table.facts th { text-align: left; background: #f6f6f6; white-space: nowrap; }
.scroll { overflow-x: auto; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(460px, 1fr)); gap: 1em; }
figure.chart { margin: 0; border: 1px solid #ddd; padding: 0.5em; } figure.chart svg { width: 100%; height: auto; display: block; }
figcaption { font-size: 0.88em; color: #555; }"""


def older_page(doc, svgs):
    """The older tables' page: the run's facts, the charts (svgs: {name: inline SVG},
    an empty one left out) and the tables; needs nothing else."""
    L, M, e = doc["load"], doc["machine"], html.escape
    deb = f" (Debian {e(M['debian'])})" if M.get("debian") else ""
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>stockd: lock strategies compared ({e(doc['date'])})</title>",
           f"<style>\n{OLDER_STYLE}\n</style>", "</head>", "<body>",
           f"<h1>{e(older_title(doc))}</h1>",
           f"<p>Measured {e(doc['date'])} by <code>{e(doc['command'])}</code>. The numbers are "
           f"those of that run; this page only shows them.</p>",
           '<h2 id="run">The run</h2>', '<table class="facts">']
    for k, v in (("Date (UTC)", e(doc["date"])), ("Command", f"<code>{e(doc['command'])}</code>"),
                 ("CPU", f"{e(M['cpu'])}, {M['nproc']} cores"), ("Memory", f"{M['ram_gib']} GiB"),
                 ("System", f"{e(M['os'])}{deb}, Linux {e(M['kernel'])}, MariaDB {e(M['mariadb'])}"),
                 ("Load average (1 min)",
                  f"{M['loadavg_start']} before the runs, {M['loadavg_end']} after them"),
                 ("Durability", e(durability_text(doc.get("durability")))),
                 ("Load", f"stockload <code>--threads {L['threads']} --loops {L['loops']}</code> = "
                          f"{L['requests']} requests per run, at most {L['threads']} in flight, "
                          f"{e(L['path'])}, {L['instances']} instances")):
        out.append(f'<tr><th scope="row">{k}</th><td>{v}</td></tr>')
    out += ["</table>",
            "<p>The load tool, nginx, the instances, MariaDB and ZooKeeper all share these CPUs, "
            "so compare runs within one report rather than across machines or reports. Before "
            "each run the product is reset to its stock (orders cleared) and the stockd "
            "instances are restarted with the run spec; MariaDB, ZooKeeper and nginx stay up.</p>",
            '<h2 id="charts">Charts</h2>', '<div class="charts">']
    for name, caption in (
            ("throughput", "Throughput by strategy: every request, deducted and sold out."),
            ("p99", f"Latency p50 and p99 by strategy at think {L['think_us'][0]} us."),
            ("stock", f"Stock of the hot product over time: `SELECT stock` every "
                      f"{L['sample_ms']} ms (server clock); time 0 is the start of stockload.")):
        if svgs.get(name):
            out += [f'<figure class="chart" id="chart-{name}">', svgs[name].rstrip("\n"),
                    f"<figcaption>{_inline_md(caption)}</figcaption>", "</figure>"]
    out.append("</div>")
    for t in L["think_us"]:
        out += [f"<h2>{e(_hot_title(doc, t, mix=False))}</h2>", '<div class="scroll">']
        out += _older_table("runs hot", RUN_HEAD, RUN_ALIGN,
                            [run_cells(r) for r in _runs(doc, "hot", t)]) + ["</div>"]
    spread = _runs(doc, "spread")
    if spread:
        n = L["spread_products"]
        out += [f"<h2>{e(_spread_title(doc))}</h2>",
                f"<p>Each product starts at stock {L['stock'] // n} ({L['stock']} in all); "
                f"stockload draws the product of each request uniformly. The stock column sums "
                f"the products.</p>", '<div class="scroll">']
        out += _older_table("runs spread", RUN_HEAD, RUN_ALIGN, [run_cells(r) for r in spread])
        out.append("</div>")
    curve = _runs(doc, "curve")
    if curve:
        out += [f"<h2>Batched zk at several concurrencies, one hot product, stockd --think-us "
                f"{L['think_us'][0]}</h2>", '<div class="scroll">']
        out += _older_table("runs curve", CURVE_HEAD, CURVE_ALIGN, [curve_cells(r) for r in curve])
        out.append("</div>")
    out += ['<h2 id="columns">Columns</h2>', "<ul>"] + [f"<li>{_inline_md(x)}</li>" for x in LEGEND]
    out += ["</ul>", "<p>The same data, with per-outcome counts and latencies, the lock-wait "
            'buckets and the stock samples: <a href="report.json">report.json</a>.</p>',
            "</body>", "</html>"]
    return "\n".join(out) + "\n"


def older_svgs(doc, work):
    """The three charts as inline SVG, drawn in work."""
    plots(doc, "svg", work, work)
    return {c: _svg_inline(os.path.join(work, f"{c}.svg"), c) for c in ("throughput", "p99", "stock")}


# ---------------------------------------------------------------- the scale-out sweep

# scale.json (loadtest/report --scale-only): the headline benchmark's rows, each with
# the instance count it ran on and its load's batches (lab/reportrun.py load_batches).
# The curve is the third-party client's req/s (ab on the hot product, wrk on the
# spread), each the median of its runs, against the number of stockd instances.

SCALE_CLIENT = {"hot": "ab", "spread": "wrk"}


def scale_points(doc):
    """{(kind, route, spec): {instances: point}} in the run's order, a point being
    {rps, stockload, ceiling, fraction, batch, batch_by_instance, exact} (medians of the
    runs; batch the load's mean deductions per batch, and per instance)."""
    rows = doc["scale"]["rows"]
    out = {}
    for kind in ("hot", "spread"):
        for route in _ordered(r["route"] for r in rows):
            for spec in _ordered(r["spec"] for r in rows):
                for n in sorted({r["instances"] for r in rows}):
                    mine = [r for r in rows if (r["kind"], r["route"], r["spec"], r["instances"])
                            == (kind, route, spec, n)]
                    load = [r for r in mine if r["row"] != "ceiling"]
                    if not load:
                        continue

                    def rps(client, row):
                        return median(r["rps"] for r in mine
                                      if r["client"] == client and (r["row"] == "ceiling") == row)

                    tp = SCALE_CLIENT[kind]
                    ceil = rps(tp, True)
                    point = {"rps": rps(tp, False), "stockload": rps("stockload", False),
                             "ceiling": ceil, "batch": load[0].get("batch_mean"),
                             "batch_by_instance": load[0].get("batch_mean_by_instance") or [],
                             "exact": all(r["exact"] for r in load)}
                    point["fraction"] = point["rps"] / ceil if ceil else None
                    out.setdefault((kind, route, spec), {})[n] = point
    return out


def scale_curve_lines(doc):
    """The curve as Markdown table lines: one row per load, route and mode, one column
    per instance count, each cell the third-party client's req/s and, in brackets, the
    mean batch. docs/benchmarks.md carries these lines as they are (docs_check scale)."""
    pts = scale_points(doc)
    ns = sorted({n for p in pts.values() for n in p})
    out = ["| load | route | mode | " + " | ".join(f"{n} inst." for n in ns) + " |",
           "|---|---|---|" + "--:|" * len(ns)]
    for (kind, route, spec), p in pts.items():
        cells = ["–" if n not in p else f"{p[n]['rps']:.0f} ({fix(p[n]['batch'], 1)})" for n in ns]
        out.append(f"| {kind} ({SCALE_CLIENT[kind]}) | {route} | {spec} | " + " | ".join(cells) + " |")
    return out


def scale_target_lines(doc):
    """Owner routing's targets (issue 40, docs/routing.md) as Markdown lines, when the
    sweep ran route owner: hot, owner / affinity of the same mode at each instance count
    (target at least 0.8 at 3, 6 and 9) and owner at its largest count / at 3 (at least
    1.0); spread, each mode under owner / atomic under plain round-robin at each count
    (for zk: at least 1.0). Each ratio is of the third-party client's req/s in the same
    run; [] without an owner row."""
    pts = scale_points(doc)
    specs = _ordered(spec for (kind, route, spec) in pts if route == "owner")
    if not specs:
        return []
    ns = sorted({n for p in pts.values() for n in p})

    def ratio(a, b, n):
        x, y = pts.get(a, {}).get(n), pts.get(b, {}).get(n)
        return f"{x['rps'] / y['rps']:.2f}" if x and y and y["rps"] else "–"
    out = ["| ratio (req/s, same run) | " + " | ".join(f"{n} inst." for n in ns) + " |",
           "|---|" + "--:|" * len(ns)]
    for spec in specs:
        out.append(f"| hot (ab): {spec} owner / {spec} affinity | "
                   + " | ".join(ratio(("hot", "owner", spec), ("hot", "affinity", spec), n) for n in ns)
                   + " |")
    for spec in specs:
        out.append(f"| spread (wrk): {spec} owner / atomic round-robin | "
                   + " | ".join(ratio(("spread", "owner", spec), ("spread", "round-robin", "atomic"), n)
                                for n in ns) + " |")
    for spec in specs:
        hot = pts.get(("hot", "owner", spec), {})
        if 3 in hot and max(hot) > 3 and hot[3]["rps"]:
            out.append(f"| hot (ab): {spec} owner, {max(hot)} inst. / 3 inst. | "
                       + " | ".join(f"{hot[max(hot)]['rps'] / hot[3]['rps']:.2f}" if n == max(hot) else "–"
                                    for n in ns) + " |")
    return out


def source_text(src):
    """", on commit abc1234" (with its uncommitted changes, if any); "" if not known."""
    if not src:
        return ""
    return f", on commit {src['commit']}" + (" with uncommitted changes" if src["dirty"] else "")


def scale_markdown(doc):
    s = doc["scale"]["settings"]
    out = ["## The scale-out curve: req/s against the number of stockd instances", "",
           f"Generated {doc['date']} by `{doc['command']}`" + source_text(doc.get("source")) + ".",
           "", f"Machine: {machine_text(doc['machine'])}; load average (1 min) "
           f"{doc['machine']['loadavg_start']} before and {doc['machine']['loadavg_end']} after.",
           "", f"Durability: {durability_text(doc.get('durability'))}.", "",
           f"Every product starts with stock {s['stock_each']}: no answer is sold out. **Hot**: "
           f"product {s['hot']['product']}, `{s['hot']['ab']}` and `{s['hot']['stockload']}`. "
           f"**Spread**: products {s['spread']['products']} drawn uniformly, `{s['spread']['wrk']}` "
           f"and `{s['spread']['stockload']}`. Each point runs as a row of the headline benchmark "
           f"on fresh instances: the HTTP ceiling (`GET /health?id=N`, same client) right before "
           f"each load, each figure the median of {s.get('repeat', 1)} run(s).", "",
           f"Instances: {' '.join(map(str, s['instances_swept']))}. Each cell: req/s of ab (hot) "
           "or wrk (spread), and in brackets the mean batch: the deductions one lock acquisition "
           "(for-update: one transaction) served, from stockd_batch_size of every instance's "
           "/metrics over the load.", ""]
    out += scale_curve_lines(doc) + [""]
    targets = scale_target_lines(doc)
    if targets:
        out += ["### Owner routing against its targets", "",
                "Targets (docs/routing.md): hot, owner at least 0.8x affinity at 3, 6 and 9 "
                "instances, and 9 at least as fast as 3; spread, zk under owner at least 1.0x "
                "atomic under plain round-robin.", ""] + targets + [""]
    out += ["### Every point", "",
            "| load | route | mode | instances | req/s | stockload req/s | ceiling | fraction "
            "| mean batch | batch per instance | exact |",
            "|---|---|---|--:|--:|--:|--:|--:|--:|---|---|"]
    for (kind, route, spec), p in scale_points(doc).items():
        for n, x in p.items():
            per = " ".join(fix(b, 1) for b in x["batch_by_instance"])
            out.append(f"| {kind} ({SCALE_CLIENT[kind]}) | {route} | {spec} | {n} | {x['rps']:.0f} | "
                       f"{fix(x['stockload'], 0)} | {fix(x['ceiling'], 0)} | {fix(x['fraction'], 2)} | "
                       f"{fix(x['batch'], 1)} | {per} | {'yes' if x['exact'] else 'NO'} |")
    return "\n".join(out) + "\n"


def scale_plots(doc, fmt, datadir, outdir):
    """outdir/scale-hot.FMT and scale-spread.FMT (req/s against instances, one line per
    mode and route) and scale-batch.FMT (the hot product's mean batch) by gnuplot with
    loadtest/report-plots.gp, their data in datadir. Raises OSError when gnuplot fails."""
    series = []
    for (kind, route, spec), p in scale_points(doc).items():
        name = f"{spec}/{route}"
        if name not in series:
            series.append(name)
        with open(os.path.join(datadir, f"scale-{kind}-{series.index(name) + 1}.tsv"), "w",
                  encoding="utf-8") as f:
            f.writelines(f"{n}\t{_num(x['rps'])}\t{'NaN' if x['batch'] is None else _num(x['batch'])}\n"
                          for n, x in p.items())
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "loadtest", "report-plots.gp")
    r = subprocess.run(["gnuplot", "-e", f"fmt='{fmt}'; datadir='{datadir}'; outdir='{outdir}'; "
                        f"what='scale'; scale_series='{' '.join(series)}'", script],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise OSError(f"gnuplot failed: {r.stderr.strip()}")


def write_scale(directory):
    """Writes directory/scale.md and its three PNG charts from directory/scale.json."""
    with open(os.path.join(directory, "scale.json"), encoding="utf-8") as f:
        doc = json.load(f)
    with tempfile.TemporaryDirectory() as work:
        scale_plots(doc, "png", work, directory)
    put_file(directory, "scale.md", scale_markdown(doc))


# ---------------------------------------------------------------- writing files


def put_file(directory, name, text):
    tmp = os.path.join(directory, name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, os.path.join(directory, name))


def write(directory):
    """Writes directory/bench.md and directory/index.html from directory/bench.json; the
    page links the older tables' report.md when the directory has one."""
    with open(os.path.join(directory, "bench.json"), encoding="utf-8") as f:
        doc = json.load(f)
    md = markdown(doc)
    with tempfile.TemporaryDirectory() as work:
        html_text = page(doc, work, os.path.exists(os.path.join(directory, "report.md")))
    put_file(directory, "bench.md", md)
    put_file(directory, "index.html", html_text)


def write_older(directory):
    """Writes directory/index.html from directory/report.json: the older tables' page."""
    with open(os.path.join(directory, "report.json"), encoding="utf-8") as f:
        doc = json.load(f)
    with tempfile.TemporaryDirectory() as work:
        put_file(directory, "index.html", older_page(doc, older_svgs(doc, work)))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python3 -m lab.report DIR   (writes DIR/bench.md and DIR/index.html "
              "from DIR/bench.json, or DIR/index.html from DIR/report.json; and DIR/scale.md "
              "with its charts from DIR/scale.json)", file=sys.stderr)
        return 2
    d = argv[0]
    try:
        has = {n: os.path.exists(os.path.join(d, n)) for n in ("scale.json", "bench.json", "report.json")}
        if has["scale.json"]:
            write_scale(d)
            print(f"report: wrote {d}/scale.md and its charts", file=sys.stderr)
        if has["bench.json"]:
            write(d)
            print(f"report: wrote {d}/bench.md and index.html", file=sys.stderr)
        elif has["report.json"]:
            write_older(d)
            print(f"report: wrote {d}/index.html from {d}/report.json", file=sys.stderr)
        elif not has["scale.json"]:
            print(f"report: no bench.json, report.json or scale.json in {d}", file=sys.stderr)
            return 1
    except (OSError, ValueError, KeyError) as e:
        print(f"report: {d}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
