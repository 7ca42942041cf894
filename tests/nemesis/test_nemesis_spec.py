#!/usr/bin/python3
"""Unit tests of how loadtest/nemesis reads --mode: a run spec of lab/runspec.py, with a
bare lock mode keeping stockd's defaults, the spec's stockd arguments before --extra's,
and the specs the nemesis cannot run refused with the reason. The modes are those of the
stockd in $STOCKD_BIN (ctest sets it), as the nemesis reads them (stockd --list-modes)."""
import argparse
import importlib.machinery
import importlib.util
import io
import os
import sys
import unittest
from contextlib import redirect_stderr

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
STOCKD = os.environ.get("STOCKD_BIN") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "service", "stockd")
PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "loadtest", "nemesis")
_loader = importlib.machinery.SourceFileLoader("nemesis", PATH)
nemesis = importlib.util.module_from_spec(importlib.util.spec_from_loader("nemesis", _loader))
_loader.exec_module(nemesis)  # which puts loadtest/ on sys.path
import nemesis_faults  # noqa: E402
import nemesis_soak  # noqa: E402


def parse(*argv):
    return nemesis.parse(list(argv))


class ModeSpec(unittest.TestCase):
    def test_a_bare_mode_keeps_stockds_defaults(self):
        a = parse("--mode", "none", "--seed", "3")
        self.assertEqual(("none", "", "round-robin", 0), (a.mode, a.extra, a.route, a.commit_ms))
        self.assertEqual("nemesis-out/none-3", a.out)

    def test_a_preset_gives_its_arguments_before_extras(self):
        a = parse("--mode", "redis-renew", "--extra", "--fence off --think-us 600000")
        self.assertEqual("redis", a.mode)
        self.assertEqual("--lease-renew on --fence off --think-us 600000", a.extra)
        self.assertEqual("nemesis-out/redis-renew-1", a.out)

    def test_fields_and_explicit_arguments(self):
        a = parse("--mode", "zk,--batch-max,1:route=affinity:fence=off:commit-ms=20:3")
        self.assertEqual(("zk", "--batch-max 1 --fence off", "affinity", 20),
                         (a.mode, a.extra, a.route, a.commit_ms))

    def test_commit_ms_option_wins_over_the_field(self):
        self.assertEqual(5, parse("--mode", "zk:commit-ms=20", "--commit-ms", "5").commit_ms)

    def test_the_lease_follows_the_specs_arguments(self):
        a = parse("--mode", "etcd,--etcd-ttl-s,4")
        self.assertEqual(4.0, nemesis.lease_seconds(a.extra))

    def refused(self, spec):
        err = io.StringIO()
        with redirect_stderr(err), self.assertRaises(SystemExit) as cm:
            parse("--mode", spec)
        self.assertEqual(2, cm.exception.code)
        return err.getvalue()

    def test_specs_the_nemesis_cannot_run_are_refused(self):
        self.assertIn("runs 3 instances", self.refused("zk:5"))
        self.assertIn("--faults kill9", self.refused("local:kill"))
        self.assertIn("no such field", self.refused("zk:speed=9"))


class StockdsModes(unittest.TestCase):
    """The modes, and which of them need ZooKeeper, are what stockd reports."""

    def setUp(self):
        if not os.environ.get("STOCKD_BIN") and not os.access(STOCKD, os.X_OK):
            self.skipTest(f"no stockd at {STOCKD} (build it, or set STOCKD_BIN)")

    def test_a_mode_stockd_does_not_have_is_refused(self):
        with self.assertRaises(nemesis.RunFailed) as e:
            nemesis.stockd_mode(STOCKD, "bogus")
        self.assertIn("no mode 'bogus'", str(e.exception))
        self.assertIn("zk-herd", str(e.exception))  # the modes stockd has

    def test_the_zk_modes_are_those_whose_lock_service_is_zookeeper(self):
        zk = {m for m in nemesis.runspec.stockd_modes(STOCKD)
              if nemesis.stockd_mode(STOCKD, m).service == "zookeeper"}
        self.assertEqual({"zk", "zk-herd"}, zk)
        self.assertIn("zk-leader", nemesis_faults.faults_for("zk-herd", True))
        self.assertNotIn("zk-leader", nemesis_faults.faults_for("redis", False))

    def test_every_soak_row_reads(self):
        for spec, extra, _, _ in nemesis_soak.SOAK_ROWS:
            row = argparse.Namespace(mode=spec, extra=extra, commit_ms=0)
            nemesis.apply_spec(row)
            nemesis.stockd_mode(STOCKD, row.mode)  # raises if stockd has no such mode


if __name__ == "__main__":
    unittest.main()
