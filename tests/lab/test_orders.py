"""Unit tests of lab/orders.py: the books of a product with reservations, payments,
releases and restocks, the limit per customer, and the ledger's verdict with released
rows (lab/ledger.py). Pure: hand-made counts, no servers."""
import unittest

from lab import ledger, orders
from lab.orders import Books


class BooksTest(unittest.TestCase):
    def test_balanced_books_have_no_problem(self):
        # 10 units + 3 restocked; 4 paid, 2 reserved, 1 sold hold 7; 5 released.
        b = Books(10, 3, 6, {"paid": 4, "reserved": 2, "sold": 1, "cancelled": 2, "expired": 3})
        self.assertEqual(7, b.held)
        self.assertEqual(5, b.released)
        self.assertEqual([], b.problems())

    def test_a_unit_released_twice_shows_as_stock_above_the_equation(self):
        b = Books(10, 0, 7, {"paid": 4, "cancelled": 3})
        self.assertEqual(6, b.expected)
        self.assertIn("came back twice", b.problems()[0])

    def test_a_unit_taken_without_its_row_shows_as_stock_below_the_equation(self):
        b = Books(10, 0, 5, {"paid": 4, "expired": 3})
        self.assertIn("without its order", b.problems()[0])

    def test_paid_beyond_the_supply_is_found(self):
        # The rows' states say 12 paid of 10 + 1 restocked, even if the stock matches.
        b = Books(10, 1, -1, {"paid": 12})
        self.assertEqual(["12 units paid or sold of 11 (initial + restocks)"], b.problems())

    def test_held_reservations_beyond_the_supply_are_found(self):
        b = Books(2, 0, -1, {"paid": 1, "reserved": 2})
        self.assertEqual(["3 units held of 2 (initial + restocks)"], b.problems())


class LimitTest(unittest.TestCase):
    def test_released_rows_do_not_count_and_reserved_ones_do(self):
        rows = [("u1", "paid"), ("u1", "cancelled"), ("u1", "expired"), ("u2", "reserved"),
                ("u2", "paid"), (None, "sold"), (None, "sold")]
        self.assertEqual({}, orders.over_limit(rows, 2))
        self.assertEqual({"u2": 2}, orders.over_limit(rows, 1))
        self.assertEqual({}, orders.over_limit(rows, None))

    def test_the_states_are_the_schemas(self):
        # sql/schema.sql's orders.state ENUM, in its order: the lab names no other state.
        import os
        import re
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "sql", "schema.sql")) as f:
            m = re.search(r"state ENUM\(([^)]*)\)", f.read())
        self.assertIsNotNone(m, "no orders.state ENUM in sql/schema.sql")
        self.assertEqual(orders.STATES, tuple(re.findall(r"'([a-z]+)'", m.group(1))))

    def test_the_states_are_partitioned(self):
        self.assertEqual(set(orders.STATES), set(orders.HOLDING) | set(orders.RELEASED))
        self.assertFalse(set(orders.HOLDING) & set(orders.RELEASED))
        for (a, b) in orders.CHANGES:
            self.assertEqual("reserved", a)
            self.assertIn(b, orders.STATES)


class LedgerWithReleasesTest(unittest.TestCase):
    def test_released_rows_balance_the_stock_equation(self):
        # 8 rows, 3 of them released: 5 units gone from 5 -> 0.
        v = ledger.judge(5, 0, 8, 8, released=3)
        self.assertTrue(v.ok, v.problems)
        self.assertEqual(ledger.EXACT, v.verdict)
        self.assertEqual(0, v.oversold)

    def test_without_the_releases_the_same_rows_do_not_balance(self):
        v = ledger.judge(5, 0, 8, 8)
        self.assertFalse(v.balanced)
        self.assertIn("partial deductions", v.problems[0])


if __name__ == "__main__":
    unittest.main()
