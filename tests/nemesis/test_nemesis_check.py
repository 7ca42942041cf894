#!/usr/bin/env python3
"""Unit tests of loadtest/nemesis_check.py on small hand-made histories: a clean history
passes, and each anomaly the checker names is found in a history made to have it, with
the operations involved. A checker that cannot fail proves nothing."""
import copy
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "loadtest"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import nemesis_check  # noqa: E402

T0 = 1_800_000_000.0


def op(key, outcome, inv, comp, order_id=None, product=1, attempt=1):
    r = {"type": "op", "key": key, "attempt": attempt, "product": product,
         "invoke": T0 + inv, "complete": T0 + comp, "outcome": outcome,
         "instance": "stockd-1", "status": {"deducted": 200, "sold_out": 409,
                                            "failed": 503, "unknown": 0}[outcome]}
    if order_id is not None:
        r["order"] = order_id
    return r


def order(oid, key, at, product=1):
    return {"id": oid, "product": product, "request_id": key, "created_at": T0 + at,
            "instance": "stockd-1"}


def clean():
    """Product 1: 2 units, a restock of 1 at t=5; 3 deductions, sold-out answers while
    the stock was 0, a 503, a timeout that did deduct and one that did not."""
    history = [
        {"type": "meta", "mode": "zk", "seed": 1},
        op("a", "deducted", 0.0, 0.2, order_id=10),
        op("b", "unknown", 0.1, 3.0),                 # timed out; its order exists
        op("b", "deducted", 3.1, 3.2, order_id=11, attempt=2),  # the retry: replayed
        op("c", "sold_out", 0.5, 0.6),                # stock 0 from 0.30 on
        op("d", "failed", 0.7, 0.8),                  # 503 lock_lost: nothing
        op("e", "unknown", 0.9, 4.0),                 # timed out; nothing committed
        {"type": "restock", "id": 1, "product": 1, "amount": 1, "invoke": T0 + 4.9,
         "complete": T0 + 5.1, "outcome": "ok"},
        op("f", "sold_out", 4.95, 5.05),              # read before the restock committed
        op("g", "deducted", 6.0, 6.1, order_id=12),
        op("h", "sold_out", 6.2, 6.3),
    ]
    final = {"products": {"1": {"initial": 2, "final": 0}},
             "orders": [order(10, "a", 0.1), order(11, "b", 0.3), order(12, "g", 6.05)],
             "restocks": [{"id": 1, "product": 1, "amount": 1, "at": T0 + 5.0}]}
    return history, final


def life():
    """The order's life (final's "orders_life"): product 1, 3 units, a limit of 1 and
    reservations that expire 2 s after they are made. a reserves and pays in time, b
    reserves and pays late (answered expired; stockd released it), c reserves, cancels
    and cancels again (not_reserved), and pays after it (not_reserved); a restock of 1
    unit. Held: a's order alone, so the stock is 3 + 1 - 1 = 3."""
    h = [{"type": "meta", "mode": "zk", "seed": 1},
         op("a", "deducted", 0.0, 0.1, order_id=10),
         op("b", "deducted", 0.0, 0.2, order_id=11),
         op("c", "deducted", 0.0, 0.3, order_id=12),
         pay("pay", 10, "u1", 0.5, 0.6, "paid"),
         pay("pay", 11, "u2", 3.0, 3.1, "expired"),
         pay("cancel", 12, "u3", 0.6, 0.7, "cancelled"),
         pay("cancel", 12, "u3", 0.8, 0.9, "not_reserved"),
         pay("pay", 12, "u3", 1.0, 1.1, "not_reserved"),
         {"type": "restock", "id": 1, "product": 1, "amount": 1, "invoke": T0 + 4.9,
          "complete": T0 + 5.1, "outcome": "ok"}]
    for r in h[1:4]:
        r["result"] = "reserved"
    f = {"products": {"1": {"initial": 3, "final": 3, "limit": 1}},
         "orders": [life_order(10, "a", 0.05, "u1", "paid", 2.05),
                    life_order(11, "b", 0.15, "u2", "expired", 2.15),
                    life_order(12, "c", 0.25, "u3", "cancelled", 2.25)],
         "restocks": [{"id": 1, "product": 1, "amount": 1, "at": T0 + 5.0}],
         "orders_life": True, "read_at": T0 + 10.0, "clock_faults": False}
    return h, f


def pay(kind, oid, user, inv, comp, result, product=1):
    return {"type": kind, "order": oid, "user": user, "product": product,
            "invoke": T0 + inv, "complete": T0 + comp, "result": result,
            "status": {"paid": 200, "cancelled": 200}.get(result, 409)}


def life_order(oid, key, at, user, state, expires):
    o = order(oid, key, at)
    o.update(user=user, state=state, expires_at=T0 + expires)
    return o


def add_restock(h, f, amount=1):
    """A second restock at t=6.4, after every answer of clean(), so that orders added
    after it keep the ledger balanced and every sold-out answer right."""
    h.append({"type": "restock", "id": 2, "product": 1, "amount": amount,
              "invoke": T0 + 6.35, "complete": T0 + 6.45, "outcome": "ok"})
    f["restocks"].append({"id": 2, "product": 1, "amount": amount, "at": T0 + 6.4})


def names(anomalies):
    return sorted(a.name for a in anomalies)


class CheckerTest(unittest.TestCase):
    def test_clean_history_has_no_anomaly(self):
        h, f = clean()
        self.assertEqual([], [a.lines() for a in nemesis_check.check(h, f)])

    def test_negative_final_stock(self):
        h, f = clean()
        h.append(op("x", "deducted", 6.2, 6.4, order_id=13))
        f["orders"].append(order(13, "x", 6.3))
        f["products"]["1"]["final"] = -1
        a = nemesis_check.check(h, f)
        self.assertEqual(["negative_stock"], names(a))
        self.assertIn("final stock -1", a[0].text)
        self.assertIn("x", [o["key"] for o in a[0].ops])

    def test_negative_stock_in_the_replay_although_final_is_not(self):
        h, f = clean()
        # x sold a unit at t=0.4, before the restock of t=5: -1 then, 0 at the end.
        h.append(op("x", "deducted", 0.35, 0.5, order_id=13))
        f["orders"].append(order(13, "x", 0.4))
        f["restocks"][0]["amount"] = 2
        h[7]["amount"] = 2
        f["products"]["1"]["final"] = 0
        # f's and h's sold-out answers at 4.95-5.05 and 6.2 stay right: the bound is lower.
        a = nemesis_check.check(h, f)
        self.assertEqual(["negative_stock"], names(a))
        self.assertIn("down to -1", a[0].text)
        self.assertEqual(13, a[0].orders[0]["id"])

    def test_replay_by_order_id_is_not_fooled_by_a_clock_that_went_back(self):
        h, f = clean()
        # MariaDB's clock went back 2.05 s before order 12: its created_at (4.0) is before
        # the restock's (5.0), although it committed after it (after_order 11).
        f["orders"][2]["created_at"] = T0 + 4.0
        self.assertEqual(["negative_stock"], names(nemesis_check.check(h, f)))  # by time
        f["replay_by_order_id"] = True
        f["restocks"][0]["after_order"] = 11
        self.assertEqual([], [a.lines() for a in nemesis_check.check(h, f)])

    def test_replay_by_order_id_finds_a_sale_before_the_restock(self):
        h, f = clean()
        f["replay_by_order_id"] = True
        # The restock committed after all three orders: 2 - 3 = -1 before it.
        f["restocks"][0]["after_order"] = 12
        a = nemesis_check.check(h, f)
        self.assertEqual(["negative_stock"], names(a))
        self.assertIn("down to -1", a[0].text)
        self.assertEqual(12, a[0].orders[0]["id"])

    def test_ledger_mismatch(self):
        h, f = clean()
        f["products"]["1"]["final"] = 1  # a unit came back without a restock
        self.assertEqual(["ledger_mismatch"], names(nemesis_check.check(h, f)))

    def test_deducted_without_order(self):
        h, f = clean()
        f["orders"] = [o for o in f["orders"] if o["request_id"] != "g"]
        f["products"]["1"]["final"] = 1
        # The ledger balances (the stock did not move either); the answer lied. The
        # sold-out answer of h (t=6.2) is now wrong too: a unit was left.
        a = nemesis_check.check(h, f)
        self.assertEqual(["deducted_without_order", "sold_out_not_linearizable"], names(a))
        self.assertEqual("g", a[0].ops[0]["key"])

    def test_order_id_mismatch(self):
        h, f = clean()
        h[-2]["order"] = 10  # g is told a's order id
        a = nemesis_check.check(h, f)
        self.assertEqual(["order_id_mismatch"], names(a))

    def test_order_for_a_request_answered_nothing_deducted(self):
        h, f = clean()
        f["orders"].append(order(13, "d", 6.5))  # d was answered 503
        add_restock(h, f)
        self.assertEqual(["order_for_nothing_deducted"], names(nemesis_check.check(h, f)))

    def test_order_without_request(self):
        h, f = clean()
        add_restock(h, f)
        f["orders"].append(order(13, "never-sent", 6.5))
        self.assertEqual(["order_without_request"], names(nemesis_check.check(h, f)))

    def test_two_orders_for_one_key(self):
        h, f = clean()
        add_restock(h, f)
        f["orders"].append(order(13, "a", 6.5))
        a = nemesis_check.check(h, f)
        self.assertEqual(["duplicate_order"], names(a))
        self.assertEqual([10, 13], sorted(o["id"] for o in a[0].orders))

    def test_unknown_outcome_with_two_orders(self):
        h, f = clean()
        add_restock(h, f, 2)
        f["orders"] += [order(13, "e", 6.5), order(14, "e", 6.6)]
        self.assertEqual(["unknown_outcome_two_orders"], names(nemesis_check.check(h, f)))

    def test_unknown_outcome_with_one_order_is_fine(self):
        h, f = clean()
        add_restock(h, f)
        f["orders"].append(order(13, "e", 6.5))
        self.assertEqual([], names(nemesis_check.check(h, f)))

    def test_sold_out_while_stock_was_left(self):
        h, f = clean()
        h.append(op("early", "sold_out", 0.0, 0.05))  # 2 units left then
        a = nemesis_check.check(h, f)
        self.assertEqual(["sold_out_not_linearizable"], names(a))
        self.assertEqual("early", a[0].ops[0]["key"])
        self.assertIn("at least 1", a[0].text)  # a's deduction may be at 0.0

    def test_sold_out_after_a_restock_was_seen(self):
        h, f = clean()
        h.append(op("late", "sold_out", 5.2, 5.3))  # the restock's unit was there
        self.assertEqual(["sold_out_not_linearizable"], names(nemesis_check.check(h, f)))

    def test_sold_out_within_the_slack_is_allowed(self):
        h, f = clean()
        # b's request (the second unit) is invoked 3 ms after this answer completed: within
        # the 5 ms slack, so the checker may not call it wrong; with 1 ms slack it does.
        for r in h:
            if r.get("key") == "b":
                r["invoke"] = T0 + 0.3
        h.append(op("edge", "sold_out", 0.25, 0.297))
        self.assertEqual([], names(nemesis_check.check(h, f)))
        self.assertEqual(["sold_out_not_linearizable"],
                         names(nemesis_check.check(h, f, slack_s=0.001)))

    def test_sold_out_of_a_batch_that_read_before_a_restock_is_fine(self):
        # The case the first run on main met: x and y in one batch that read 1 unit; a
        # restock of 5 commits between the read and the batch's INSERT (created_at 0.95);
        # x gets the unit, y is sold out. Linearizable: x and y at the read, restock after.
        history = [op("x", "deducted", 0.0, 1.0, order_id=1), op("y", "sold_out", 0.1, 1.0),
                   {"type": "restock", "id": 1, "product": 1, "amount": 5,
                    "invoke": T0 + 0.5, "complete": T0 + 0.92, "outcome": "ok"}]
        final = {"products": {"1": {"initial": 1, "final": 5}},
                 "orders": [order(1, "x", 0.95)],
                 "restocks": [{"id": 1, "product": 1, "amount": 5, "at": T0 + 0.9}]}
        self.assertEqual([], names(nemesis_check.check(history, final)))
        # But a sold-out answer that starts after the restock was seen is wrong.
        history.append(op("z", "sold_out", 0.93, 1.0))
        self.assertEqual(["sold_out_not_linearizable"], names(nemesis_check.check(history, final)))

    def test_restock_of_unknown_outcome_counts_in_the_ledger_not_for_sold_out(self):
        h, f = clean()
        h[7]["outcome"] = "unknown"  # the client did not see the restock commit
        self.assertEqual([], names(nemesis_check.check(h, f)))

    def test_redis_stock_counts_lost_deductions_oversold_promises_and_drift(self):
        h, f = clean()
        # Mode redis-stock: g's entry was lost with the primary, a's order was refused as
        # an oversold promise (a promise is not lost), Redis counts 1 where MariaDB has 0.
        f["orders"] = [o for o in f["orders"] if o["request_id"] not in ("a", "g")]
        f["products"]["1"] = {"initial": 1, "final": 1}  # b's order and the restock
        f["redis_stock"] = {"counts": {"1": 2}, "oversold": {"1": 1}, "promised_keys": ["a"]}
        a = nemesis_check.check(h, f)
        self.assertEqual(["lost_deduction", "oversold_promise", "redis_drift"], names(a))
        self.assertEqual("g", a[0].ops[0]["key"])
        self.assertIn("drift 1", a[2].text)
        # The same without the failover's traces: nothing (the sold-out answers are not
        # judged against a ledger that is written later).
        f["orders"] = clean()[1]["orders"]
        f["products"]["1"] = {"initial": 2, "final": 0}
        f["redis_stock"] = {"counts": {"1": 0}, "oversold": {"1": 0}, "promised_keys": []}
        self.assertEqual([], [x.lines() for x in nemesis_check.check(h, f)])
        # A restock through the API (by its key) answered 503 that committed in MariaDB
        # only: Redis may lack its unit (not sellable until a reset), never count more.
        h[7].update(key="r1", outcome="unknown")
        f["restocks"][0]["key"] = "r1"
        f["redis_stock"]["counts"]["1"] = -1
        self.assertEqual([], names(nemesis_check.check(h, f)))
        f["redis_stock"]["counts"]["1"] = -2
        self.assertEqual(["redis_drift"], names(nemesis_check.check(h, f)))
        h[7]["outcome"] = "ok"  # answered restocked: Redis has it
        f["redis_stock"]["counts"]["1"] = -1
        self.assertEqual(["redis_drift"], names(nemesis_check.check(h, f)))

    def test_an_order_life_history_has_no_anomaly(self):
        h, f = life()
        self.assertEqual([], [a.lines() for a in nemesis_check.check(h, f)])

    def test_released_rows_must_be_counted_in_the_ledger(self):
        # The same rows with the released ones read as holding: the books do not add up.
        h, f = life()
        for o in f["orders"]:
            o["state"] = "sold" if o["state"] != "paid" else "paid"
        self.assertIn("ledger_mismatch", names(nemesis_check.check(h, f)))

    def test_a_customer_over_the_limit(self):
        h, f = life()
        h.append(op("d", "deducted", 6.0, 6.1, order_id=13))
        f["orders"].append(life_order(13, "d", 6.05, "u1", "paid", 8.05))
        f["products"]["1"]["final"] = 2
        a = nemesis_check.check(h, f)
        self.assertEqual(["over_limit"], names(a))
        self.assertIn("customer u1 holds 2 units", a[0].text)

    def test_paid_beyond_the_stock(self):
        h, f = life()
        f["products"]["1"]["limit"] = None
        for n, oid in enumerate(range(13, 17)):
            h.append(op(f"x{n}", "deducted", 6.0, 6.1, order_id=oid))
            f["orders"].append(life_order(oid, f"x{n}", 6.05, f"v{n}", "paid", 8.05))
        f["products"]["1"]["final"] = -1
        self.assertIn("paid_over_stock", names(nemesis_check.check(h, f)))

    def test_a_payment_answered_paid_for_a_cancelled_order(self):
        h, f = life()
        h[8] = pay("pay", 12, "u3", 1.0, 1.1, "paid")
        self.assertEqual(["answered_paid_not_paid"], names(nemesis_check.check(h, f)))
        # Mode redis-stock names an order by its request key: the same row, found.
        h[8] = pay("pay", "c", "u3", 1.0, 1.1, "paid")
        self.assertEqual(["answered_paid_not_paid"], names(nemesis_check.check(h, f)))

    def test_a_late_payment_accepted(self):
        h, f = life()
        h[4] = pay("pay", 10, "u1", 2.5, 2.6, "paid")
        a = nemesis_check.check(h, f)
        self.assertEqual(["late_payment_accepted"], names(a))
        self.assertIn("0.450 s after its expiry", a[0].text)
        # Not judged when the run moved MariaDB's clock.
        f["clock_faults"] = True
        self.assertEqual([], names(nemesis_check.check(h, f)))

    def test_an_order_cancelled_twice_gave_its_unit_back_twice(self):
        h, f = life()
        h[7] = pay("cancel", 12, "u3", 0.8, 0.9, "cancelled")
        f["products"]["1"]["final"] = 4  # the second release's unit
        self.assertEqual(["ledger_mismatch", "released_twice"], names(nemesis_check.check(h, f)))

    def test_an_expired_answer_for_an_order_that_is_paid(self):
        h, f = life()
        f["orders"][1]["state"] = "paid"
        f["products"]["1"]["final"] = 2
        self.assertEqual(["released_twice"],
                         names(nemesis_check.check(h, f)))

    def test_a_reservation_left_past_its_expiry(self):
        h, f = life()
        f["orders"][1]["state"] = "reserved"
        f["products"]["1"]["final"] = 2
        a = nemesis_check.check(h, f)
        self.assertEqual(["not_released"], names(a))
        self.assertIn("order 11 still reserved 7.8 s after its expiry", a[0].text)
        # Within the grace (read 1 s after the expiry): not yet an anomaly.
        f["read_at"] = T0 + 3.15
        self.assertEqual([], names(nemesis_check.check(h, f)))

    def test_command_line_prints_each_anomaly_and_the_summary(self):
        h, f = clean()
        f["products"]["1"]["final"] = -1
        with tempfile.TemporaryDirectory() as d:
            hp, fp = os.path.join(d, "h.jsonl"), os.path.join(d, "f.json")
            with open(hp, "w") as out:
                out.write("".join(json.dumps(r) + "\n" for r in h))
            with open(fp, "w") as out:
                json.dump(f, out)
            buf = io.StringIO()
            with redirect_stdout(buf):
                rc = nemesis_check.main(["--history", hp, "--final", fp])
            self.assertEqual(1, rc)
            text = buf.getvalue()
            self.assertIn("ANOMALY negative_stock product=1", text)
            self.assertIn("anomalies=2 ops=9", text.splitlines()[-1])
            good = copy.deepcopy(clean())
            with open(fp, "w") as out:
                json.dump(good[1], out)
            with redirect_stdout(io.StringIO()):
                self.assertEqual(0, nemesis_check.main(["--history", hp, "--final", fp]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
