"""lab.report: the headline tables from bench.json rows: medians per cell, fractions
against the ceiling measured next to each run, and a row whose ceiling strays flagged;
the older tables from report.json's runs (tests/loadtest/report-fixture.json) in
report.md's formats."""

import json
import os
import unittest

from lab import report


def row(spec, kind, client, rps, rep, ceiling=False, route="round-robin", ensemble=False):
    r = {"row": "ceiling" if ceiling else spec, "spec": spec, "route": route, "kind": kind,
         "client": client, "rps": rps, "p99_ms": 10.0, "rep": rep, "ensemble": ensemble,
         "requests": 100, "ok": 100, "other": 0}
    if not ceiling:
        r.update(mode=spec, initial=1000, final=900, orders=100, client_orders=100, exact=True,
                 lock_ops_per_deduction=0.5)
    return r


def doc(rows):
    return {"bench": {"rows": rows, "settings": {"instances": 3}}}


class Tables(unittest.TestCase):
    def test_cells_are_medians_of_fractions_against_the_ceiling_next_to_each_run(self):
        rows = []
        for rep, (c, l) in enumerate([(1000, 500), (2000, 600), (1000, 900)], 1):
            rows += [row("zk", "hot", "ab", c, rep, ceiling=True), row("zk", "hot", "ab", l, rep)]
        t = report.tables(doc(rows))[0]
        cell = t["rows"][0]["cells"][("hot", "ab")]
        self.assertEqual(cell["rps"], 600)
        self.assertEqual(cell["fraction"], 0.5)  # 0.5, 0.3, 0.9
        self.assertEqual(t["ceiling"][("hot", "ab")], (1000, 1000, 1000))

    def test_a_row_whose_ceiling_strays_is_flagged(self):
        rows = []
        for spec, c in (("a", 1000), ("b", 1100), ("c", 1000), ("d", 400)):
            rows += [row(spec, "hot", "ab", c, 1, ceiling=True), row(spec, "hot", "ab", 300, 1)]
        t = report.tables(doc(rows))[0]
        self.assertEqual([l["mode"] for l in t["flagged"]], ["d"])
        cells = list(report._cells(t))
        self.assertTrue(cells[-1][-1].startswith("STRAYED: hot ab 400 vs 1000"))
        self.assertEqual(cells[1][-1], "ok")

    def test_a_ledger_that_does_not_hold_is_shown(self):
        bad = row("none", "hot", "ab", 300, 1)
        bad.update(exact=False, client_orders=101)
        t = report.tables(doc([row("none", "hot", "ab", 1000, 1, ceiling=True), bad]))[0]
        self.assertTrue(t["rows"][0]["exact"].startswith("NO: hot ab: 1000 -> 900, 100 orders; 101 orders"))

    def test_routes_in_order_and_the_ensemble_last(self):
        rows = [row("zk", "hot", "ab", 1000, 1, ceiling=True, route=r) for r in ("affinity", "round-robin")]
        rows += [row("zk", "hot", "ab", 500, 1, route=r) for r in ("affinity", "round-robin")]
        rows += [row("zk", "hot", "ab", 1000, 1, ceiling=True, ensemble=True),
                 row("zk", "hot", "ab", 400, 1, ensemble=True)]
        ts = report.tables(doc(rows))
        self.assertEqual([t["route"] for t in ts], ["round-robin", "affinity"])
        self.assertEqual([l["mode"] for l in ts[0]["rows"]], ["zk", "zk, ZooKeeper as a 3-server ensemble"])


FIXTURE = os.path.join(os.path.dirname(__file__), "..", "loadtest", "report-fixture.json")


class OlderTables(unittest.TestCase):
    def setUp(self):
        with open(FIXTURE, encoding="utf-8") as f:
            self.doc = json.load(f)

    def test_numbers_round_half_away_from_zero(self):
        self.assertEqual([report.jround(x) for x in (2.5, 3.5, -2.5, 0.49)], [3, 4, -3, 0])
        self.assertEqual((report.fix1(38.6555), report.fix2(5.9119804), report.fix2(None)),
                         ("38.7", "5.91", "n/a"))

    def test_a_run_row_in_markdown(self):
        md = report.older_markdown(self.doc)
        self.assertIn("| none | `none --batch-max 1` | 2000 -> -45 | 2045 | 45 | OVERSOLD | ok | 0 "
                      "| 2294 | 38.7 | 128.5 | n/a | 5.91 | n/a | 34 / 33 / 33 |", md)
        self.assertIn("### One hot product (id 1, stock 2000), stockd --think-us 0: the "
                      "half-sold-out mix (stock for half of the 4000 requests)", md)
        self.assertEqual(md.count("|---|---|---|--:|--:|---|---|--:|"), 3)  # two hot, one spread
        self.assertIn("### Batched zk (`zk`) at several concurrencies", md)
        self.assertIn("Durability: MariaDB innodb_flush_log_at_trx_commit=1", md)

    def test_the_spread_is_compared_with_the_hot_product_at_its_think_time(self):
        md = report.older_markdown(self.doc)
        spread = [r for r in self.doc["runs"] if r["table"] == "spread" and r["run"] == "zk"][0]
        hot = [r for r in self.doc["runs"] if r["table"] == "hot" and r["run"] == "zk"
               and r["think_us"] == 0][0]
        self.assertIn(f"- zk: {report.jround(spread['throughput_rps'])} req/s over 100 products vs "
                      f"{report.jround(hot['throughput_rps'])} req/s on one hot product", md)

    def test_the_headline_comes_first_in_report_md(self):
        md = report.with_bench(report.older_markdown(self.doc), "## bench\n\nrows\n")
        lines = md.split("\n")
        self.assertTrue(lines[0].startswith("# Lock strategies compared"))
        self.assertEqual(lines[1:6], ["", "## bench", "", "rows", "## The tables with sold-out answers"])
        self.assertTrue(lines[7].startswith("Generated "))

    def test_the_page_marks_verdicts_and_leaves_out_a_missing_chart(self):
        page = report.older_page(self.doc, {"throughput": "<svg></svg>", "p99": "", "stock": ""})
        self.assertIn('<td class="verdict oversold">OVERSOLD</td>', page)
        self.assertIn('<figure class="chart" id="chart-throughput">', page)
        self.assertNotIn("chart-p99", page)
        self.assertEqual(page.count('<table class="runs hot">'), 2)


if __name__ == "__main__":
    unittest.main()


class ScaleTargets(unittest.TestCase):
    """Owner routing's target ratios in scale.md (lab/report.py scale_target_lines)."""

    @staticmethod
    def row(kind, route, spec, n, rps, client=None):
        return {"kind": kind, "route": route, "spec": spec, "instances": n, "row": spec,
                "client": client or {"hot": "ab", "spread": "wrk"}[kind], "rps": rps,
                "exact": True, "batch_mean": 10.0}

    def test_ratios_of_the_same_run(self):
        from lab import report
        rows = []
        for n, aff, own in ((3, 1000, 900), (9, 1000, 1000)):
            rows += [self.row("hot", "affinity", "zk", n, aff), self.row("hot", "owner", "zk", n, own),
                     self.row("spread", "round-robin", "atomic", n, 500),
                     self.row("spread", "owner", "zk", n, 600)]
        lines = report.scale_target_lines({"scale": {"rows": rows}})
        self.assertEqual(lines[0], "| ratio (req/s, same run) | 3 inst. | 9 inst. |")
        self.assertIn("| hot (ab): zk owner / zk affinity | 0.90 | 1.00 |", lines)
        self.assertIn("| spread (wrk): zk owner / atomic round-robin | 1.20 | 1.20 |", lines)
        self.assertIn("| hot (ab): zk owner, 9 inst. / 3 inst. | – | 1.11 |", lines)
        # No owner row: no section.
        self.assertEqual(report.scale_target_lines(
            {"scale": {"rows": [r for r in rows if r["route"] != "owner"]}}), [])
