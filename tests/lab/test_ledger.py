"""lab.ledger against the shared cases (tests/lab/ledger_cases.json), which
tests/loadtest/test_reconcile.c also reads for loadtest/reconcile.c."""

import json
import os
import random
import unittest

from lab import ledger

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ledger_cases.json")


def load_cases():
    with open(CASES, encoding="utf-8") as f:
        return json.load(f)


class ReconcileCases(unittest.TestCase):
    def test_each_shared_case(self):
        for c in load_cases()["reconcile"]:
            with self.subTest(c["name"]):
                r = ledger.reconcile(c["answers"], c["rows"])
                self.assertEqual(r.answers, len(c["answers"]))
                self.assertEqual(r.rows, len(c["rows"]))
                self.assertEqual(r.missing_rows, c["missing_rows"])
                self.assertEqual(r.unanswered_rows, c["unanswered_rows"])
                self.assertEqual(r.duplicate_answers, c["duplicate_answers"])
                self.assertEqual(list(r.missing_examples), c["missing_examples"])
                self.assertEqual(list(r.unanswered_examples), c["unanswered_examples"])
                self.assertEqual(r.ok, c["ok"])

    def test_random_sets_match_a_brute_force_count(self):
        rng = random.Random(42)
        for _ in range(50):
            rows = [i for i in range(1, 301) if rng.randrange(4)]
            answers = []
            for i in rows:
                d = rng.randrange(10)
                answers += [i] * (d > 0) + [i] * (d == 9)
            answers += [301 + rng.randrange(50) for _ in range(20)]
            rng.shuffle(answers)
            missing = sum(1 for k, a in enumerate(answers) if a not in answers[:k] and a not in rows)
            dup = sum(1 for k, a in enumerate(answers) if a in answers[:k])
            unanswered = sum(1 for i in rows if i not in answers)
            r = ledger.reconcile(answers, rows)
            self.assertEqual((r.missing_rows, r.unanswered_rows, r.duplicate_answers),
                             (missing, unanswered, dup))


class VerdictCases(unittest.TestCase):
    def test_each_shared_case(self):
        for c in load_cases()["verdict"]:
            with self.subTest(c["name"]):
                v = ledger.judge(c["initial"], c["final"], c["orders"], c["deducted"],
                                 negative=c.get("negative"), products=c.get("products", 1),
                                 restocked=c.get("restocked", 0), lost=c.get("lost", 0),
                                 lossy=c.get("lossy", False), answer_ids=c.get("answers"),
                                 row_ids=c.get("rows"))
                self.assertEqual(v.verdict, c["verdict"])
                self.assertEqual(v.ok, c["ok"], v.problems)
                self.assertEqual(v.exact, c["exact"])

    def test_a_violation_names_both_sides(self):
        v = ledger.judge(50, 0, 50, 61)
        self.assertEqual(v.problems, ("61 deducted answers, but 50 orders rows",))
        self.assertEqual(ledger.judge(50, -8, 58, 58).oversold, 8)


if __name__ == "__main__":
    unittest.main()
