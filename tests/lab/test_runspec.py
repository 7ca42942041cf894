"""lab.runspec: the one grammar of lock mode + stockd arguments + instances + route.
The presets are checked against the modes of the stockd in $STOCKD_BIN (ctest sets it)."""

import os
import unittest

from lab.runspec import PRESETS, SpecError, main, parse, parse_list, stockd_modes

STOCKD = os.environ.get("STOCKD_BIN") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "service", "stockd")


class Presets(unittest.TestCase):
    def test_a_preset_names_its_mode_and_arguments(self):
        s = parse("zk-1")
        self.assertEqual((s.label, s.mode, s.stockd_args()), ("zk-1", "zk", ["--batch-max", "1"]))
        self.assertEqual(parse("zk-seg4").segments, 4)
        self.assertEqual(parse("redis-renew").stockd_args(), ["--lease-renew", "on"])

    def test_a_name_that_is_no_preset_is_a_bare_mode(self):
        s = parse("zk-herd")
        self.assertEqual((s.mode, s.args), ("zk-herd", ()))
        self.assertEqual(parse("sentinel").mode, "sentinel")


class PresetsAreStockdsModes(unittest.TestCase):
    """The presets name stockd's modes, which stockd reports itself (--list-modes), so
    that a mode renamed or removed there fails here, not in a run."""

    def setUp(self):
        if not os.environ.get("STOCKD_BIN") and not os.access(STOCKD, os.X_OK):
            self.skipTest(f"no stockd at {STOCKD} (build it, or set STOCKD_BIN)")
        self.modes = stockd_modes(STOCKD)

    def test_every_presets_mode_is_a_mode_of_stockd(self):
        unknown = {name: mode for name, (mode, _) in PRESETS.items() if mode not in self.modes}
        self.assertEqual({}, unknown, f"stockd's modes are {', '.join(self.modes)}")

    def test_a_preset_named_after_a_mode_runs_that_mode(self):
        for name in PRESETS.keys() & self.modes.keys():
            with self.subTest(name):
                self.assertEqual(name, PRESETS[name][0])

    def test_the_table_names_each_modes_lock_service(self):
        self.assertGreaterEqual(len(self.modes), 10)
        self.assertEqual("zookeeper", self.modes["zk-herd"].service)
        self.assertEqual("none", self.modes["atomic"].kind)
        self.assertIsNone(self.modes["atomic"].service)

    def test_a_binary_that_prints_no_table_is_an_error(self):
        with self.assertRaises(SpecError) as e:
            stockd_modes("/bin/false")
        self.assertIn("no table of modes", str(e.exception))


class Explicit(unittest.TestCase):
    def test_label_mode_and_arguments(self):
        s = parse("zk-x16=zk,--cross-products,16")
        self.assertEqual((s.label, s.mode, s.stockd_args()), ("zk-x16", "zk", ["--cross-products", "16"]))
        s = parse("zk,--batch-max,8")  # cpu's old --mode form
        self.assertEqual((s.label, s.mode, s.args), ("zk", "zk", ("--batch-max", "8")))

    def test_the_demos_fields(self):
        s = parse("zk:3:4")
        self.assertEqual((s.instances, s.segments, s.stockd_args()), (3, 4, ["--segments", "4"]))
        self.assertEqual(s.title(), "zk x3 seg4")
        s = parse("zk:3:pitfall=release-before-commit:fence=off:commit-ms=20")
        self.assertEqual(s.stockd_args(), ["--pitfall", "release-before-commit", "--fence", "off"])
        self.assertEqual(s.commit_ms, 20)
        s = parse("local:3:route=affinity:kill")
        self.assertEqual((s.route, s.kill, s.title()), ("affinity", True, "local x3 route=affinity kill"))

    def test_defaults_are_the_tools(self):
        s = parse("atomic")
        self.assertEqual((s.instances, s.route, s.segments, s.kill), (None, None, 1, False))

    def test_a_list(self):
        self.assertEqual([s.label for s in parse_list(" none  zk-1 zk ")], ["none", "zk-1", "zk"])


class Refused(unittest.TestCase):
    def test_each_bad_part_is_named(self):
        for text, words in [("", "empty"), ("Zk", "mode 'Zk'"), ("zk:x", "instances"),
                            ("zk:0", "instances"), ("zk:3:4:5", "third number"),
                            ("zk:route=random", "route 'random'"), ("zk:fence=maybe", "fence"),
                            ("zk:commit-ms=0", "commit-ms"), ("zk:speed=9", "no such field"),
                            ("zk,--x;rm", "stockd argument"), ("A=zk", "label 'A'"),
                            ("zk:pitfall=BAD", "pitfall")]:
            with self.subTest(text):
                with self.assertRaises(SpecError) as e:
                    parse(text)
                self.assertIn(words, str(e.exception))

    def test_the_shell_form_exits_2_on_a_bad_spec(self):
        self.assertEqual(main(["zk:3 bad:x"]), 2)


if __name__ == "__main__":
    unittest.main()
