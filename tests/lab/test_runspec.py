"""lab.runspec: the one grammar of lock mode + stockd arguments + instances + route."""

import unittest

from lab.runspec import SpecError, parse, parse_list, main


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
