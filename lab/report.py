"""The headline benchmark's report, written from its data (bench.json).

loadtest/report measures; this module renders what it measured, as Markdown
(bench.md) and as one self-contained HTML page (index.html: the tables first, then
the charts as inline SVG drawn by gnuplot, no scripts, no fonts or images from
anywhere). A page can be rendered again from bench.json alone:

    /usr/bin/python3 -m lab.report DIR       writes DIR/bench.md and DIR/index.html

Each mode's cell is the median of its runs (settings.repeat): req/s and, in brackets,
its fraction of the HTTP ceiling measured right before it (same client, route, load).
The ceiling must be measured the same way for every row; a row whose ceiling (the
median of its runs) strays from the route's median ceiling by more than STRAY is
flagged in the table and listed under it, not averaged in silence.
"""

import html
import json
import os
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
        return "not recorded"
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
    import re
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


def write(directory):
    """Writes directory/bench.md and directory/index.html from directory/bench.json; the
    page links the older tables' report.md when the directory has one."""
    with open(os.path.join(directory, "bench.json"), encoding="utf-8") as f:
        doc = json.load(f)
    md = markdown(doc)
    with tempfile.TemporaryDirectory() as work:
        html_text = page(doc, work, os.path.exists(os.path.join(directory, "report.md")))
    for name, text in (("bench.md", md), ("index.html", html_text)):
        tmp = os.path.join(directory, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(directory, name))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python3 -m lab.report DIR   (writes DIR/bench.md and DIR/index.html "
              "from DIR/bench.json)", file=sys.stderr)
        return 2
    try:
        write(argv[0])
    except (OSError, ValueError, KeyError) as e:
        print(f"report: {argv[0]}: {e}", file=sys.stderr)
        return 1
    print(f"report: wrote {argv[0]}/bench.md and index.html", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
