#!/usr/bin/env python3
"""The nemesis's history checker: decides from the history of a run and the final
database alone whether anything happened that stockd's model forbids.

  nemesis_check.py --history history.jsonl --final final.json [--slack-ms MS]

The model is simpler than general linearizability: each product is a counter that
deductions lower by one (never below 0) and restocks raise, and each Idempotency-Key
buys at most once. So the checker needs no search over interleavings; it checks:

  negative_stock            a product's final stock is below 0, or a replay of its ledger
                            (orders and restocks in commit order, below) goes below 0
  ledger_mismatch           orders != initial - final + restocks, for a product
  deducted_without_order    an answer "deducted" whose order row does not exist
  order_id_mismatch         an answer "deducted" whose order id is another key's or another
                            product's row, or whose key's row has another id
  order_for_nothing_deducted  an order row for a key every attempt of which was answered
                            "nothing was deducted" (sold out, or a clear 4xx/5xx)
  order_without_request     an order row whose key the workload never sent
  duplicate_order           more than one order row for one key (some attempt was answered)
  unknown_outcome_two_orders  the same, for a key whose every attempt timed out
  sold_out_not_linearizable an answer "sold out" although at no instant between its
                            invocation and completion the product's stock can have been <= 0

The order's life (issue 42, docs/orders.md; final has "orders_life": the run sent
customers, reservations, payments and cancels). An order row holds a unit while it is
sold, reserved or paid, and gave it back once cancelled or expired (lab/orders.py), so
the ledger counts the holding rows (stock = initial + restocks - sold - reserved - paid)
and the replay counts a released row as given back at once (which can only understate a
fall below 0). On top:

  paid_over_stock           a product's paid and sold rows outnumber initial + restocks
  over_limit                a customer holds more units of a product than its per_user_limit
  answered_paid_not_paid    a payment answered "paid" whose order is not paid
  late_payment_accepted     a payment sent after its order's expires_at (plus the slack)
                            answered "paid" (not checked when the run moved MariaDB's clock)
  released_twice            an order answered "cancelled" twice, or answered "cancelled" and
                            not cancelled, or answered "expired" and paid
  not_released              an order still reserved when the final database was read,
                            although its expires_at had passed by more than the grace

Mode redis-stock (final has "redis_stock": the run waited for the order writer to drain
the stream before reading it) answers "deducted" before the order is written, so the
per-answer and sold-out checks give way to the counts of what a Redis failover loses:

  lost_deduction            an answer "deducted" whose key has neither an order nor an
                            oversold promise (its stream entry was lost with the primary)
  oversold_promise          an entry the database refused for want of stock, although the
                            buyer was told "deducted" (one anomaly each)
  redis_drift               a product whose Redis count differs from MariaDB's stock once
                            the writer has drained (by more than it may: Redis may lack
                            the units of a committed restock not answered "restocked")

Commit order. orders.created_at is CURRENT_TIMESTAMP(6) of the INSERT, which runs after
the transaction's UPDATE of the product row and before its COMMIT, so while it holds that
row's lock. Two deductions of a product therefore INSERT in the order they commit, and
created_at (ties broken by the AUTO_INCREMENT id, for the rows of one batch) is the commit
order. A restock writes its row of nemesis_restock in its own transaction after its UPDATE
of the product, so its `at` has the same property.

The same lock gives an order that needs no clock, and the nemesis uses it, because its
clock faults move MariaDB's clock (mode db-lock, libfaketime), backward too, and then
created_at is no longer monotonic. Two deductions of a product INSERT in commit order, so
their AUTO_INCREMENT ids are in commit order too (ids of committed rows are never reused,
not even after crash recovery). A restock's row carries after_order: the highest order id
of its product, read (READ COMMITTED, so the latest committed rows) after its UPDATE took
the product row. Every order of that product committed before the restock has an id up to
after_order, and every later one a higher id, as it could INSERT only after the restock's
COMMIT let the row go. One restocker adds them one at a time, so restock ids are in commit
order among themselves. When every restock of a product has after_order, the replay goes
by order id, each restock right after its after_order (final's "replay_by_order_id").

The sold-out check. Each deduction takes effect at one instant (its linearization point)
between its request's invocation and the COMMIT of its order, and each restock between its
invocation and its client's seeing the COMMIT succeed. The checker does not know these
instants, but it can bound the stock from below: at instant t, at least initial + the
restocks seen committed before t - the orders whose request was invoked before t (or, for
an order of no recorded request, created before t). A sold-out answer is right if at some
instant of its window the stock was <= 0 in some choice of those instants; with every
deduction as early and every restock as late as it may be, the bound is the lowest stock
any choice gives. So the checker flags only answers for which the bound stays above 0 over
the whole window, and never a right one. Why so generous: a batch reads the stock once
(say 3 units for 6 requests), and a restock that commits between that read and the
batch's write does not move row_version (a raise need not), so the batch sells 3 and
answers 3 sold out while the committed stock is 11 at its COMMIT. That history is
linearizable (the 3 deductions and the 3 sold-out answers at the read, the restock after),
and a bound that put the orders at their created_at would call it wrong; the first
nemesis run on main did exactly that.

Clock precision. The client's times (time.time()) and MariaDB's CURRENT_TIMESTAMP(6) read
the same CLOCK_REALTIME of the same machine (the nemesis runs everything on loopback), so
they are comparable to the microsecond. The window is still widened by --slack-ms (default
5 ms) on each side, to cover float rounding and a clock step by NTP during a run; the
larger the slack, the fewer anomalies this check can see, never more. When the nemesis
moves MariaDB's clock (mode db-lock's clock faults), the bound stays safe: an order counts
from min(created_at, its first invocation) and a restock from max(at, when its client saw
it), so a created_at or `at` moved by the clock either loses to the client's time or moves
the deduction earlier or the restock later, which lowers the bound: fewer anomalies, never
a false one.

Input formats (JSON):
  history, one object a line:
    {"type":"op","key":K,"attempt":N,"product":P,"invoke":T,"complete":T,
     "outcome":"deducted"|"sold_out"|"failed"|"unknown","order":O,"status":S,
     "result":R,"instance":I}
    {"type":"restock","id":N,"product":P,"amount":A,"invoke":T,"complete":T,
     "outcome":"ok"|"failed"|"unknown"}
    {"type":"pay"|"cancel","order":O,"user":U,"product":P,"invoke":T,"complete":T,
     "status":S,"result":R}
    O is the order as the deduction's answer named it (lab/orders.py's Answer.order):
    its row id, or in mode redis-stock its request key (the row's request_id).
    other types (meta, fault) are kept for the reader and ignored here.
  final: {"products": {"P": {"initial": N, "final": N}},
          "orders": [{"id":ID,"product":P,"request_id":K,"created_at":T,"instance":I}],
          "restocks": [{"id":N,"product":P,"amount":A,"at":T,"after_order":ID}]}
  and "replay_by_order_id": true to replay by order id and after_order (left out: by time).
  With "orders_life": true, each order also has "user", "state" and "expires_at" (Unix
  time, or null), each product "limit" (or null), and final has "read_at" (when it was
  read) and "clock_faults" (MariaDB's clock was moved).
  The final restocks are the committed ones (read from the database); without them the
  history's restocks with outcome "ok" are taken, at their completion time.
Exit status: 0 no anomaly, 1 anomalies, 2 unreadable input."""
import argparse
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lab import ledger  # noqa: E402  the ledger equation and the verdict, once
from lab import orders as orders_life  # noqa: E402  an order's states, once

OUTCOMES = ("deducted", "sold_out", "failed", "unknown")
DEFAULT_SLACK_S = 0.005
# How late a payment may be sent after expires_at and still be answered "paid" (MariaDB
# rounds, and the client reads its clock before the request leaves), and how long past
# expires_at a reservation may stay reserved when the final database is read.
LATE_PAYMENT_SLACK_S = 0.05
RELEASE_GRACE_S = 5.0


class Anomaly:
    """One violation: its name, the product, a sentence, and the operations involved."""

    def __init__(self, name, product, text, ops=(), orders=()):
        self.name = name
        self.product = product
        self.text = text
        self.ops = list(ops)
        self.orders = list(orders)

    def lines(self):
        out = [f"ANOMALY {self.name} product={self.product}: {self.text}"]
        for op in self.ops:
            out.append("  " + format_op(op))
        for o in self.orders:
            out.append(
                f"  order id={o['id']} key={o.get('request_id')} product={o['product']} "
                f"created_at={o['created_at']:.6f} instance={o.get('instance')}")
        return out


def format_op(op):
    if op.get("type") == "restock":
        return (f"restock id={op.get('id')} +{op.get('amount')} outcome={op.get('outcome')} "
                f"[{op['invoke']:.6f}, {op['complete']:.6f}]")
    extra = f" order={op['order']}" if op.get("order") else ""
    return (f"op key={op['key']} attempt={op.get('attempt', 1)} outcome={op['outcome']} "
            f"status={op.get('status')} result={op.get('result')}{extra} "
            f"instance={op.get('instance')} [{op['invoke']:.6f}, {op['complete']:.6f}]")


def read_history(path):
    recs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except ValueError as e:
                raise ValueError(f"{path}:{n}: {e}") from None
    return recs


def check(history, final, slack_s=DEFAULT_SLACK_S):
    """Returns the list of Anomaly found in history (a list of records) and final (the
    final database, as in the module's docstring). Pure: reads nothing else."""
    ops = [r for r in history if r.get("type") == "op"]
    for op in ops:
        if op.get("outcome") not in OUTCOMES:
            raise ValueError(f"op with an unknown outcome: {op}")
    hist_restocks = [r for r in history if r.get("type") == "restock"]
    products = {int(p): v for p, v in final["products"].items()}
    orders = sorted(final.get("orders", []), key=lambda o: (o["created_at"], o["id"]))
    if "restocks" in final:
        restocks = list(final["restocks"])
    else:
        restocks = [{"id": r.get("id"), "product": r["product"], "amount": r["amount"],
                     "at": r["complete"]} for r in hist_restocks if r.get("outcome") == "ok"]
    # When a client saw each restock succeed (by id): the latest its COMMIT can be.
    restock_seen = {r.get("id"): r["complete"] for r in hist_restocks if r.get("outcome") == "ok"}

    anomalies = []
    by_key = defaultdict(list)
    for op in ops:
        by_key[op["key"]].append(op)
    orders_by_id = {o["id"]: o for o in orders}
    orders_by_key = defaultdict(list)
    for o in orders:
        orders_by_key[o.get("request_id")].append(o)

    for p in sorted(products):
        anomalies += check_product_ledger(p, products[p], orders, restocks, by_key,
                                          bool(final.get("replay_by_order_id")))
    if final.get("orders_life"):
        anomalies += check_orders_life(history, products, orders, restocks, final)
    if "redis_stock" in final:
        anomalies += check_redis_stock(ops, products, orders_by_key, final["redis_stock"],
                                       restocks, hist_restocks)
    anomalies += check_galera_nodes(products, orders, final.get("galera_nodes", {}))

    # Every "deducted" answer has its row, with its key, its product and its id.
    for op in ops if "redis_stock" not in final else ():
        if op["outcome"] != "deducted":
            continue
        row = orders_by_id.get(op.get("order"))
        mine = orders_by_key.get(op["key"], [])
        if row is None and not mine:
            anomalies.append(Anomaly(
                "deducted_without_order", op["product"],
                f"answered deducted (order {op.get('order')}) but the ledger has no order "
                f"for key {op['key']}", [op]))
        elif row is None or row.get("request_id") != op["key"] or \
                row["product"] != op["product"]:
            anomalies.append(Anomaly(
                "order_id_mismatch", op["product"],
                f"answered order {op.get('order')} for key {op['key']}, but the ledger's "
                f"row for that id or key does not match", [op],
                ([row] if row else []) + [o for o in mine if o is not row]))

    # Per key: at most one order, and none for a key only ever told "nothing deducted".
    for key, rows in orders_by_key.items():
        attempts = by_key.get(key, [])
        product = rows[0]["product"]
        if not attempts:
            anomalies.append(Anomaly(
                "order_without_request", product,
                f"order row(s) for key {key}, which the workload never sent", [], rows))
            continue
        if len(rows) > 1:
            answered = any(a["outcome"] != "unknown" for a in attempts)
            anomalies.append(Anomaly(
                "duplicate_order" if answered else "unknown_outcome_two_orders", product,
                f"{len(rows)} orders for one key {key}", attempts, rows))
        if all(a["outcome"] in ("sold_out", "failed") for a in attempts):
            anomalies.append(Anomaly(
                "order_for_nothing_deducted", product,
                f"key {key} has an order, but every attempt was answered that nothing "
                f"was deducted", attempts, rows))

    if "redis_stock" in final:
        return anomalies
    # The earliest instant each key's deduction may take effect: its first invocation.
    first_invoke = {k: min(a["invoke"] for a in v) for k, v in by_key.items()}
    anomalies += check_sold_out(ops, products, orders, restocks, restock_seen, first_invoke,
                                slack_s)
    return anomalies


def check_orders_life(history, products, orders, restocks, final):
    """The order's life (the module's docstring): the states of the rows against the
    supply, the limit and the payment and cancel answers."""
    out = []
    # An order by the name its answers gave it (lab/orders.py's Answer.order): the row id,
    # or in mode redis-stock the request key. An id (int) is never a key (str).
    by_name = {o["id"]: o for o in orders}
    by_name.update({o["request_id"]: o for o in orders if o.get("request_id") is not None})
    for p in sorted(products):
        mine = [o for o in orders if o["product"] == p]
        supply = products[p]["initial"] + sum(r["amount"] for r in restocks if r["product"] == p)
        paid = [o for o in mine if o.get("state") in ("paid", "sold")]
        if len(paid) > supply:
            out.append(Anomaly("paid_over_stock", p, f"{len(paid)} orders paid or sold of "
                               f"{supply} units (initial + restocks)", [], paid[supply:]))
        limit = products[p].get("limit")
        for user, n in orders_life.over_limit([(o.get("user"), o.get("state")) for o in mine],
                                              limit).items():
            out.append(Anomaly("over_limit", p, f"customer {user} holds {n} units, the limit "
                               f"is {limit}", [], [o for o in mine if o.get("user") == user
                                                   and o.get("state") in orders_life.HOLDING]))
    cancelled = defaultdict(list)
    for r in history:
        if r.get("type") not in ("pay", "cancel"):
            continue
        row = by_name.get(r.get("order"))
        state = row.get("state") if row else None
        res = r.get("result")
        if r["type"] == "pay" and res == "paid":
            if state != "paid":
                out.append(Anomaly("answered_paid_not_paid", r.get("product"),
                                   f"order {r.get('order')} was answered paid and is "
                                   f"{state}", [r], [row] if row else []))
            exp = row.get("expires_at") if row else None
            if exp is not None and not final.get("clock_faults") and \
                    r["invoke"] > exp + LATE_PAYMENT_SLACK_S:
                out.append(Anomaly("late_payment_accepted", r.get("product"),
                                   f"order {r.get('order')}: a payment sent "
                                   f"{r['invoke'] - exp:.3f} s after its expiry was answered "
                                   f"paid", [r], [row]))
        if res == "expired" and state == "paid":
            out.append(Anomaly("released_twice", r.get("product"),
                               f"order {r.get('order')} was answered expired and is paid",
                               [r], [row]))
        if r["type"] == "cancel" and res == "cancelled":
            cancelled[r.get("order")].append(r)
    for oid, rs in sorted(cancelled.items(), key=lambda kv: str(kv[0])):
        row = by_name.get(oid)
        if len(rs) > 1 or not row or row.get("state") != "cancelled":
            out.append(Anomaly("released_twice", rs[0].get("product"),
                               f"order {oid} was answered cancelled {len(rs)} time(s) and is "
                               f"{row.get('state') if row else 'missing'}", rs,
                               [row] if row else []))
    read_at = final.get("read_at")
    for o in orders:
        exp = o.get("expires_at")
        if o.get("state") == "reserved" and read_at is not None and exp is not None and \
                exp + RELEASE_GRACE_S < read_at:
            out.append(Anomaly("not_released", o["product"],
                               f"order {o['id']} still reserved {read_at - exp:.1f} s after "
                               f"its expiry", [], [o]))
    return out


def check_redis_stock(ops, products, orders_by_key, rs, restocks=(), hist_restocks=()):
    """lost_deduction, oversold_promise and redis_drift of mode redis-stock (the module's
    docstring); RS is final["redis_stock"], RESTOCKS the committed ones (with their
    keys), HIST_RESTOCKS the history's."""
    out = []
    # A restock whose answer was not "restocked" may have committed in MariaDB and never
    # reached Redis (docs/orders.md, "Restock in mode redis-stock"): its units are in the
    # stock of record but not sellable until the product's reset. Redis may count that
    # much less than MariaDB's stock, never more.
    confirmed = {r.get("key") for r in hist_restocks if r.get("outcome") == "ok"}
    unsure = defaultdict(int)
    for r in restocks:
        if r.get("key") not in confirmed:
            unsure[r["product"]] += r["amount"]
    promised = set(rs.get("promised_keys", []))
    told = {}
    for op in ops:
        if op["outcome"] == "deducted":
            told.setdefault(op["key"], op)
    for key, op in sorted(told.items()):
        if key not in orders_by_key and key not in promised:
            out.append(Anomaly("lost_deduction", op["product"],
                               f"answered deducted, but neither an order nor an oversold "
                               f"promise has key {key}", [op]))
    for p in sorted(products):
        n = int(rs.get("oversold", {}).get(str(p), 0))
        for i in range(n):
            out.append(Anomaly("oversold_promise", p, f"oversold promise {i + 1} of {n}: "
                               f"the writer had no stock for an order told deducted"))
        count = rs.get("counts", {}).get(str(p))
        fin = products[p]["final"]
        if count is not None and not fin - unsure[p] <= count <= fin:
            out.append(Anomaly("redis_drift", p, f"Redis counts {count}, MariaDB's stock is "
                               f"{fin} (drift {count - fin}; {unsure[p]} units of restocks not "
                               f"answered restocked) once the writer drained"))
    return out


def check_galera_nodes(products, orders, nodes):
    """--galera: every node, read with wsrep_sync_wait=1, holds the same stocks and the
    same order ids as the final state the ledger was checked on."""
    want_ids = sorted(o["id"] for o in orders)
    out = []
    for n, held in sorted(nodes.items()):
        for p in sorted(products):
            got = held["stocks"].get(str(p))
            if got != products[p]["final"]:
                out.append(Anomaly("galera_node_disagrees", p,
                                   f"node {n} has stock {got}, the ledger's final state "
                                   f"{products[p]['final']}"))
        if sorted(held["orders"]) != want_ids:
            out.append(Anomaly("galera_node_disagrees", 0,
                               f"node {n} has {len(held['orders'])} orders, the ledger "
                               f"{len(want_ids)} (ids differ)"))
    return out


def check_product_ledger(p, prod, orders, restocks, by_key, by_id=False):
    """negative_stock (final and replayed) and ledger_mismatch for product p. The final
    stock and the stock equation are lab/ledger.py's verdict; the replay is the
    nemesis's own, as are the per-key checks of check(), which name the answers that
    disagree with the rows key by key (judge's answer counts say only how many)."""
    out = []
    initial, fin = prod["initial"], prod["final"]
    mine = [o for o in orders if o["product"] == p]
    # Cancelled and expired rows gave their unit back (lab/orders.py).
    released = [o for o in mine if o.get("state") in orders_life.RELEASED]
    rs = [r for r in restocks if r["product"] == p]
    added = sum(r["amount"] for r in rs)
    keys = [v for v in by_key.values() if v[0]["product"] == p]
    deducted = sum(1 for v in keys if any(a["outcome"] == "deducted" for a in v))
    lost = sum(1 for v in keys if all(a["outcome"] != "deducted" for a in v)
               and any(a["outcome"] == "unknown" for a in v))
    verdict = ledger.judge(initial, fin, len(mine), deducted, restocked=added, lost=lost,
                           lossy=True, released=len(released))

    def ops_of(rows):
        return [op for o in rows for op in by_key.get(o.get("request_id"), [])]

    held = [o for o in mine if o.get("state") not in orders_life.RELEASED]
    if verdict.verdict == ledger.OVERSOLD:
        last = held[-(-fin) - 1:] if len(held) > -fin else held
        out.append(Anomaly("negative_stock", p, f"final stock {fin} (initial {initial}, "
                           f"restocked {added}, {len(held)} orders holding a unit); the last "
                           f"orders:", ops_of(last), last))
    # The replay, in commit order. With every restock's after_order known (the nemesis
    # records it), by order id: see the module's docstring. Otherwise by time; a restock
    # at the same instant as an order goes first, so that the replay can only understate
    # a fall below 0.
    # A released row counts as given back at once: the replay may only understate a fall.
    if by_id and all(r.get("after_order") is not None for r in rs):
        events = [(o["id"], 0, 0, -1, o) for o in held]
        events += [(r["after_order"], 1, r.get("id") or 0, r["amount"], None) for r in rs]
    else:
        events = [(o["created_at"], 1, o["id"], -1, o) for o in held]
        events += [(r["at"], 0, r.get("id") or 0, r["amount"], None) for r in rs]
    events.sort(key=lambda e: e[:3])
    stock, low, low_order = initial, initial, None
    for _, _, _, delta, o in events:
        stock += delta
        if stock < low:
            low, low_order = stock, o
    if low < 0 and fin >= 0:
        out.append(Anomaly("negative_stock", p, f"the ledger replayed in commit order goes "
                           f"down to {low} (final stock {fin}); the order that reached it:",
                           ops_of([low_order]), [low_order]))
    if not verdict.balanced:
        out.append(Anomaly("ledger_mismatch", p,
                           f"{len(held)} orders hold a unit ({len(released)} released) but "
                           f"initial {initial} - final {fin} + restocks {added} = "
                           f"{ledger.stock_change(initial, fin, added)}"))
    return out


def check_sold_out(ops, products, orders, restocks, restock_seen, first_invoke, slack_s):
    """sold_out_not_linearizable: see the module's docstring for the bound and the slack."""
    out = []
    for p, prod in products.items():
        # Steps of the lower bound: -1 at the first invocation of each order's key (its
        # created_at if the workload never sent the key), +amount at the time a client saw
        # the restock's COMMIT succeed (never, if no client saw it).
        steps = [(min(o["created_at"], first_invoke.get(o.get("request_id"), o["created_at"])),
                  -1) for o in orders if o["product"] == p]
        for r in restocks:
            if r["product"] == p and r.get("id") in restock_seen:
                steps.append((max(r["at"], restock_seen[r["id"]]), r["amount"]))
            elif r["product"] == p and r.get("id") is None:
                steps.append((r["at"], r["amount"]))  # hand-made: no history record
        steps.sort()
        times = [s[0] for s in steps]
        prefix = [prod["initial"]]
        for _, d in steps:
            prefix.append(prefix[-1] + d)
        for op in ops:
            if op["product"] != p or op["outcome"] != "sold_out":
                continue
            lo, hi = op["invoke"] - slack_s, op["complete"] + slack_s
            i = bisect_right(times, lo)
            low = prefix[i]  # the bound at the window's start
            while i < len(steps) and steps[i][0] <= hi:
                i += 1
                low = min(low, prefix[i])
            if low > 0:
                out.append(Anomaly(
                    "sold_out_not_linearizable", p,
                    f"answered sold out, but the stock was at least {low} throughout "
                    f"[{lo:.6f}, {hi:.6f}] wherever the deductions and restocks are placed "
                    f"in their windows (slack {slack_s * 1000:g} ms)", [op]))
    return out


def bisect_right(a, x):
    lo, hi = 0, len(a)
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def summary(anomalies):
    """{name: count}, for the summary line."""
    counts = defaultdict(int)
    for a in anomalies:
        counts[a.name] += 1
    return dict(sorted(counts.items()))


def main(argv=None):
    ap = argparse.ArgumentParser(description="Checks a nemesis history and final database.")
    ap.add_argument("--history", required=True)
    ap.add_argument("--final", required=True)
    ap.add_argument("--slack-ms", type=float, default=DEFAULT_SLACK_S * 1000)
    args = ap.parse_args(argv)
    try:
        history = read_history(args.history)
        with open(args.final, encoding="utf-8") as f:
            final = json.load(f)
        anomalies = check(history, final, args.slack_ms / 1000)
    except (OSError, ValueError, KeyError) as e:
        print(f"nemesis_check: {e}", file=sys.stderr)
        return 2
    for a in anomalies:
        print("\n".join(a.lines()))
    nops = sum(1 for r in history if r.get("type") == "op")
    names = " ".join(f"{k}={v}" for k, v in summary(anomalies).items())
    print(f"anomalies={len(anomalies)} ops={nops}" + (f" ({names})" if names else ""))
    return 1 if anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
