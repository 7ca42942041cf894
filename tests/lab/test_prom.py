"""lab.prom: Prometheus text through prometheus_client's parser, deltas over
instances, and the quantile bound of a histogram."""

import math
import unittest

from lab import prom

BEFORE = """# HELP stockd_zk_ops_total ZooKeeper operations sent.
# TYPE stockd_zk_ops_total counter
stockd_zk_ops_total{op="create"} 10
stockd_zk_ops_total{op="delete"} 9
# HELP stockd_lock_wait_seconds Time to acquire the lock.
# TYPE stockd_lock_wait_seconds histogram
stockd_lock_wait_seconds_bucket{le="0.001"} 1
stockd_lock_wait_seconds_bucket{le="0.01"} 2
stockd_lock_wait_seconds_bucket{le="+Inf"} 2
stockd_lock_wait_seconds_sum 0.005
stockd_lock_wait_seconds_count 2
"""

AFTER = BEFORE.replace('op="create"} 10', 'op="create"} 40').replace(
    'le="0.01"} 2', 'le="0.01"} 90').replace('le="+Inf"} 2', 'le="+Inf"} 102').replace(
    "_count 2", "_count 102").replace('le="0.001"} 1', 'le="0.001"} 50')


class Parse(unittest.TestCase):
    def test_samples_by_name_and_labels(self):
        s = prom.parse(BEFORE)
        self.assertEqual(s.total("stockd_zk_ops_total"), 19)
        self.assertEqual(s.total("stockd_zk_ops_total", op="delete"), 9)
        self.assertEqual(s.by_label("stockd_zk_ops_total", "op"), {"create": 10, "delete": 9})
        self.assertIsNone(s.total("stockd_no_such_metric"))

    def test_a_metric_name_is_no_pattern(self):
        # The shell's old metric() took the name as a regex: "stockd_zk.ops" matched.
        self.assertIsNone(prom.parse(BEFORE).total("stockd_zk.ops_total"))

    def test_text_that_is_not_the_format_is_refused(self):
        with self.assertRaises(ValueError):
            prom.parse("stockd_x{op=\"a\" 1\n")


class Delta(unittest.TestCase):
    def test_after_minus_before_summed_over_instances(self):
        d = prom.delta([prom.parse(BEFORE)] * 3, [prom.parse(AFTER)] * 3)
        self.assertEqual(d.total("stockd_zk_ops_total", op="create"), 90)
        self.assertEqual(d.total("stockd_zk_ops_total", op="delete"), 0)
        self.assertEqual(d.total("stockd_lock_wait_seconds_count"), 300)

    def test_the_quantile_bound_is_the_bucket_holding_it(self):
        d = prom.delta([prom.parse(BEFORE)], [prom.parse(AFTER)])
        # 100 waits: 49 <= 1 ms, 88 <= 10 ms, 100 in all: p50 in the 10 ms bucket.
        self.assertEqual(prom.histogram_quantile_bound(d, "stockd_lock_wait_seconds", 0.5), 0.01)
        self.assertEqual(prom.histogram_quantile_bound(d, "stockd_lock_wait_seconds", 0.99),
                         math.inf)
        self.assertIsNone(prom.histogram_quantile_bound(prom.Scrape(), "stockd_x", 0.99))



class Cli(unittest.TestCase):
    def test_keys_print_as_prometheus_writes_them(self):
        self.assertEqual(prom.key_text(("stockd_zk_ops_total", (("op", "create"),))),
                         'stockd_zk_ops_total{op="create"}')
        self.assertEqual(prom.key_text(("stockd_x", ())), "stockd_x")


if __name__ == "__main__":
    unittest.main()
