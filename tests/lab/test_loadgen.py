"""lab.loadgen: wrk's JSON line (loadtest/wrk-json.lua), ab's report and -g file, and
stockload's JSON, each to one Result."""

import unittest

from lab import loadgen

WRK = """Running 1s test @ http://127.0.0.1:20611/health
  1 threads and 4 connections
Requests/sec:   1313.58
WRK_JSON {"requests":1336,"duration_s":1.017068,"rps":1313.580,"non_2xx_3xx":6,"errors":{"connect":0,"read":2,"write":0,"status":6,"timeout":1},"latency_us":{"p50":2266,"p90":8526,"p99":29093,"max":39975,"mean":4110.6}}
"""

AB = """This is ApacheBench, Version 2.3 <$Revision: 1903618 $>
Server Hostname:        127.0.0.1
Document Path:          /health
Time taken for tests:   0.039 seconds
Complete requests:      50
Failed requests:        3
   (Connect: 0, Receive: 0, Length: 0, Exceptions: 3)
Non-2xx responses:      2
Requests per second:    1289.26 [#/sec] (mean)
Connection Times (ms)
              min  mean[+/-sd] median   max
Total:          1    4   1.8      3       8
"""
AB_TSV = "starttime\tseconds\tctime\tdtime\tttime\twait\n" + "".join(
    f"Thu Nov 26 18:40:25 2026\t1795718425\t0\t1\t{t}\t1\n" for t in range(1, 101))


class Wrk(unittest.TestCase):
    def test_the_done_hooks_line(self):
        r = loadgen.wrk(WRK)
        self.assertEqual((r.client, r.requests, r.rps, r.p99_ms), ("wrk", 1336, 1313.58, 29.093))
        # 6 non-2xx answers, 2 read errors, 1 timeout.
        self.assertEqual((r.ok, r.other), (1327, 9))

    def test_without_the_script_it_says_so(self):
        with self.assertRaisesRegex(ValueError, "wrk-json.lua"):
            loadgen.wrk("Requests/sec: 1313.58\n")


class Ab(unittest.TestCase):
    def test_counts_by_name_and_p99_from_the_requests(self):
        r = loadgen.ab(AB, AB_TSV)
        self.assertEqual((r.requests, r.ok, r.other, r.rps), (50, 45, 5, 1289.26))
        self.assertEqual(r.p99_ms, 99.0)

    def test_not_an_ab_report(self):
        with self.assertRaises(ValueError):
            loadgen.ab("hello: world\n", AB_TSV)


class Stockload(unittest.TestCase):
    DOC = {"requests": 100, "throughput_rps": 900.5, "latency_ms": {"p99": 12.5},
           "counts": {"deducted": 97, "transport_error": 1, "other_5xx": 0, "total_503": 2}}

    def test_deductions_or_health_answers(self):
        r = loadgen.stockload(self.DOC)
        self.assertEqual((r.ok, r.other, r.p99_ms), (97, 3, 12.5))
        r = loadgen.stockload(self.DOC, health=True)
        self.assertEqual((r.ok, r.other), (97, 3))


class Percentile(unittest.TestCase):
    def test_nearest_rank(self):
        self.assertEqual(loadgen.percentile(range(1, 101), 0.99), 99)
        self.assertEqual(loadgen.percentile([5], 0.99), 5)
        self.assertIsNone(loadgen.percentile([], 0.5))


if __name__ == "__main__":
    unittest.main()
