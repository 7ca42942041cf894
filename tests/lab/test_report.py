"""lab.report: the headline tables from bench.json rows: medians per cell, fractions
against the ceiling measured next to each run, and a row whose ceiling strays flagged."""

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


if __name__ == "__main__":
    unittest.main()
