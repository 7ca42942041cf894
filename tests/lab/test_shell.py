"""lab.shell's /metrics calls, which the shell tests' metric helpers (tests/assert.sh)
use: a sample is found by its exact name and label set, summed over targets, and never
matched as a pattern. The pages come from a static HTTP server on a free port."""

import contextlib
import http.server
import io
import threading
import unittest

from lab import LabError
from lab import shell

PAGE = """# HELP stockd_lock_acquisitions_total Lock acquisitions.
# TYPE stockd_lock_acquisitions_total counter
stockd_lock_acquisitions_total 3
# HELP stockd_mysql_errors_total MySQL errors by kind.
# TYPE stockd_mysql_errors_total counter
stockd_mysql_errors_total{kind="fenced"} 2
stockd_mysql_errors_total{kind="guard"} 0
# HELP stockd_batch_size Deductions per batch.
# TYPE stockd_batch_size histogram
stockd_batch_size_bucket{le="+Inf"} 4
stockd_batch_size_sum 6.5
stockd_batch_size_count 4
"""


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = PAGE.encode() if self.path == "/metrics" else b""
        self.send_response(200 if body else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Metrics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page) for _ in range(2)]
        for s in cls.servers:
            threading.Thread(target=s.serve_forever, daemon=True).start()
        cls.ports = [str(s.server_address[1]) for s in cls.servers]

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.shutdown()
            s.server_close()

    def out(self, fn, *args):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            fn(*args)
        return buf.getvalue().strip()

    def test_exact_name_and_labels(self):
        self.assertEqual(self.out(shell.metric, "stockd_lock_acquisitions_total", self.ports[0]), "3")
        self.assertEqual(self.out(shell.metric, 'stockd_mysql_errors_total{kind="fenced"}', self.ports[0]), "2")
        self.assertEqual(self.out(shell.metric, 'stockd_mysql_errors_total{kind="guard"}', self.ports[0]), "0")

    def test_a_name_is_no_pattern(self):
        self.assertEqual(self.out(shell.metric, "stockd_lock_acquisitions_tota", self.ports[0]), "")
        self.assertEqual(self.out(shell.metric, "stockd_mysql_errors_total", self.ports[0]), "")
        with self.assertRaises(ValueError):
            shell.metric_key("stockd_.*")

    def test_sum_over_targets_port_or_url(self):
        url = "http://127.0.0.1:%s" % self.ports[1]
        self.assertEqual(self.out(shell.metric, "stockd_lock_acquisitions_total", self.ports[0], url), "6")
        self.assertEqual(self.out(shell.metric, "stockd_batch_size_sum", self.ports[0]), "6.5")

    def test_total_and_series_over_labels(self):
        self.assertEqual(self.out(shell.metric_total, "stockd_mysql_errors_total", *self.ports), "4")
        self.assertEqual(self.out(shell.metric_total, "stockd_none_total", self.ports[0]), "0")
        self.assertEqual(self.out(shell.metric_series, "stockd_mysql_errors_total", self.ports[0]), "2")

    def test_wait_metric_returns_or_says_the_last_value(self):
        shell.wait_metric("1", "stockd_lock_acquisitions_total", "3", self.ports[0])
        with self.assertRaisesRegex(LabError, "stayed at 3"):
            shell.wait_metric("0.1", "stockd_lock_acquisitions_total", "4", self.ports[0])

    def test_no_page_is_an_error(self):
        with self.assertRaises(LabError):
            shell.metric("stockd_lock_acquisitions_total", "1")


if __name__ == "__main__":
    unittest.main()


class SetStockSql(unittest.TestCase):
    """The statements of mysql_set_stock (lab.shop), which the container test hands to
    the mariadb client of a container without Python."""

    def test_segments_split_evenly_first_ones_get_the_rest(self):
        from lab.shop import set_stock_sql
        self.assertEqual(["DELETE FROM orders WHERE product_id=2",
                          "DELETE FROM restock WHERE product_id=2",
                          "DELETE FROM product_segment WHERE product_id=2",
                          "UPDATE product SET stock=0, fence=0 WHERE id=2",
                          "INSERT INTO product_segment (product_id, seg, stock, fence) VALUES "
                          "(2, 1, 4, 0), (2, 2, 3, 0), (2, 3, 3, 0)"], set_stock_sql(2, 10, 3))
        self.assertEqual("UPDATE product SET stock=500, fence=0 WHERE id=3", set_stock_sql(3, 500)[3])

    def test_only_numbers_reach_the_text(self):
        from lab.shop import set_stock_sql
        for args in (("3; DROP TABLE orders", 1), (3, "1 OR 1=1"), (3, 1, 0)):
            with self.assertRaises(ValueError):
                set_stock_sql(*args)

    def test_printed_as_one_transaction(self):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            shell.set_stock_sql("3", "500")
        lines = buf.getvalue().splitlines()
        self.assertEqual(("START TRANSACTION;", "COMMIT;"), (lines[0], lines[-1]))
        self.assertEqual(6, len(lines))
