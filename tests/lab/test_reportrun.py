"""lab.reportrun's pure parts: a run's record from what was read (the ledger's verdict,
the metrics' deltas), a benchmark row's ledger (wrk's deadline allowed for), the
rate-limit record and the command line as typed."""

import unittest

from lab import loadgen, prom, reportrun, runspec


def load(requests, deducted, sold_out, rec="ok"):
    return {"requests": requests, "duration_s": 1.0, "throughput_rps": requests / 1.0,
            "latency_ms": {"p50": 1.0, "p99": 2.0},
            "latency_ms_by_outcome": {"deducted": {"p99": 2.0}},
            "counts": {"deducted": deducted, "sold_out": sold_out, "http_4xx": 0},
            "reconciliation": {"verdict": rec}}


BEFORE = """# TYPE stockd_zk_ops_total counter
stockd_zk_ops_total{op="create"} 10
stockd_zk_ops_total{op="delete"} 10
# TYPE stockd_mysql_statements_total counter
stockd_mysql_statements_total 100
# TYPE stockd_lock_wait_seconds histogram
stockd_lock_wait_seconds_bucket{le="0.001"} 1
stockd_lock_wait_seconds_bucket{le="0.01"} 2
stockd_lock_wait_seconds_bucket{le="+Inf"} 2
stockd_lock_wait_seconds_sum 0.004
stockd_lock_wait_seconds_count 2
# TYPE stockd_batch_size histogram
stockd_batch_size_bucket{le="+Inf"} 2
stockd_batch_size_sum 2
stockd_batch_size_count 2
"""
AFTER = """# TYPE stockd_zk_ops_total counter
stockd_zk_ops_total{op="create"} 30
stockd_zk_ops_total{op="delete"} 30
# TYPE stockd_mysql_statements_total counter
stockd_mysql_statements_total 400
# TYPE stockd_lock_wait_seconds histogram
stockd_lock_wait_seconds_bucket{le="0.001"} 1
stockd_lock_wait_seconds_bucket{le="0.01"} 11
stockd_lock_wait_seconds_bucket{le="+Inf"} 22
stockd_lock_wait_seconds_sum 1.004
stockd_lock_wait_seconds_count 22
# TYPE stockd_batch_size histogram
stockd_batch_size_bucket{le="+Inf"} 22
stockd_batch_size_sum 102
stockd_batch_size_count 22
"""


class RunRecord(unittest.TestCase):
    def record(self, initial=100, final=0, negative=0, orders=100, deducted=100):
        d = prom.delta([prom.parse(BEFORE)], [prom.parse(AFTER)])
        return reportrun.run_record(
            "hot", runspec.parse("zk"), 0, 10, 20, 1, initial, final, negative, orders,
            load(200, deducted, 200 - deducted), d, [("stockd-1", 60), ("stockd-2", 40)],
            [(1000.0, initial), (1000.5, final)], (1000.2, 1001.0))

    def test_an_exact_run_and_its_lock_counts(self):
        r = self.record()
        self.assertEqual((r["verdict"], r["ledger"], r["oversold"], r["errors"]), ("EXACT", "ok", 0, 0))
        self.assertEqual(r["zk_ops"], {"create": 20, "delete": 20})
        self.assertEqual((r["zk_ops_total"], r["zk_ops_per_deduction"]), (40, 0.4))
        self.assertEqual((r["lock_service"], r["lock_service_ops"]), ("zookeeper", 40))
        self.assertEqual(r["mysql_statements_per_deduction"], 3.0)
        self.assertEqual((r["batches"], r["batch_mean"]), (20, 5.0))
        # 20 waits: the 99th percentile (rank 20) lies in the +Inf bucket.
        self.assertEqual(r["lock_wait"]["count"], 20)
        self.assertEqual(r["lock_wait"]["p99_le_s"], "+Inf")
        self.assertEqual([b["count"] for b in r["lock_wait"]["buckets"]], [0, 9, 20])
        self.assertEqual([s["share"] for s in r["instance_share"]], [0.6, 0.4])
        self.assertEqual(r["stock_samples"], [[-0.2, 100], [0.3, 0]])

    def test_an_oversold_run_and_books_that_disagree(self):
        r = self.record(final=-3, negative=1, orders=103, deducted=103)
        self.assertEqual((r["verdict"], r["ledger"], r["oversold"]), ("OVERSOLD", "ok", 3))
        r = self.record(final=0, orders=100, deducted=99)
        self.assertEqual((r["verdict"], r["ledger"]), ("EXACT", "MISMATCH"))

    def test_no_lock_service_without_its_metrics(self):
        d = prom.parse("# TYPE stockd_mysql_statements_total counter\nstockd_mysql_statements_total 5\n")
        r = reportrun.run_record("hot", runspec.parse("none"), 0, 1, 1, 1, 1, 0, 0, 1,
                                 load(1, 1, 0), d, [], [], (0, 1))
        self.assertEqual((r["zk_ops"], r["lock_service"], r["lock_wait"]["count"]), (None, None, 0))
        self.assertEqual(r["stockd_args"], ["--batch-max", "1"])


class BenchRows(unittest.TestCase):
    def row(self, client, ok, orders, before=1000, after=None, c=20):
        res = loadgen.Result(client, 100.0, 1.0, ok, ok, 0)
        after = before - orders if after is None else after
        return reportrun.bench_row(res, spec="zk", mode="zk", route="round-robin", kind="spread",
                                   ensemble=False, rep=1, before=before, after=after,
                                   client_orders=orders, negative=0, products=10, concurrency=c)

    def test_wrk_may_leave_up_to_c_orders_unanswered(self):
        self.assertTrue(self.row("wrk", 100, 100)["exact"])
        self.assertTrue(self.row("wrk", 100, 120)["exact"])
        self.assertFalse(self.row("wrk", 100, 121)["exact"])
        self.assertFalse(self.row("wrk", 100, 99)["exact"])

    def test_stockload_and_ab_must_match_their_orders(self):
        self.assertTrue(self.row("stockload", 100, 100)["exact"])
        self.assertFalse(self.row("ab", 100, 101)["exact"])
        self.assertFalse(self.row("stockload", 100, 100, after=901)["exact"])

    def test_the_load_over_all_runs_decides_too(self):
        rows = [self.row("stockload", 100, 100), self.row("wrk", 100, 100)]
        out = reportrun.bench_load_totals(rows, 1000, 800, 200, 0, 10, 50)
        self.assertEqual([(r["exact"], r["lock_ops_per_deduction"], r["answered_2xx"]) for r in out],
                         [(True, 0.25, 200)] * 2)
        rows = [self.row("stockload", 100, 100)]
        self.assertFalse(reportrun.bench_load_totals(rows, 1000, 800, 201, 0, 10, None)[0]["exact"])


class Other(unittest.TestCase):
    def test_rate_limit_record(self):
        doc = load(200, 11, 0)
        doc["counts"]["http_4xx"] = 189
        r = reportrun.rate_limit_record("20:10", doc, 1000, 989, 11)
        self.assertEqual((r["admitted"], r["refused_429"], r["other"], r["exact"]), (11, 189, 0, True))
        self.assertFalse(reportrun.rate_limit_record("", doc, 1000, 990, 11)["exact"])
        self.assertIsNone(reportrun.rate_limit_record("", doc, 1000, 989, 11)["rate_limit"])

    def test_the_command_line_quotes_only_where_the_shell_needs_it(self):
        self.assertEqual(reportrun.command_line("loadtest/report", ["--modes", "none zk", "--bench", "",
                                                                    "--x=1,2"]),
                         "loadtest/report --modes 'none zk' --bench '' --x=1,2")


if __name__ == "__main__":
    unittest.main()
