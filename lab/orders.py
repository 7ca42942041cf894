"""Orders after the deduction (issue 42, docs/orders.md), as the lab sees them: the
states an order row can be in and which of them hold a unit, a client of the order API
(a deduction with a customer, a payment, a cancel, a restock), and the books of a
product that reservations, payments, releases and restocks must keep.

The states and their changes are stockd's table (service/, docs/orders.md's drawing);
this module names them for the tools that read rows and answers (loadtest/orders, the
nemesis and its checker), and says nothing the service does not:

    (deduction) -> sold                      reserve_seconds NULL: sold at once
    (deduction) -> reserved -> paid          paid before expires_at
                           -> cancelled      cancelled by its customer: the unit back
                           -> expired        not paid in time: the unit back, by stockd

So after any run, for each product (the one equation of orders.md):

    stock = initial + restocks - sold - reserved - paid

and the released rows (cancelled, expired) gave their unit back exactly once. The pure
part (states, Books, Answer) reads nothing; Api talks HTTP with urllib.
"""

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

STATES = ("sold", "reserved", "paid", "cancelled", "expired")
HOLDING = ("sold", "reserved", "paid")  # the row holds a unit out of the stock
RELEASED = ("cancelled", "expired")  # the row's unit came back to the stock
# The changes of state after the deduction: (from, to) -> what makes it.
CHANGES = {("reserved", "paid"): "pay", ("reserved", "cancelled"): "cancel",
           ("reserved", "expired"): "expiry"}

# The results of the order API (docs/operating.md, "Routes and answers"), by route.
DEDUCTION_TAKES = ("deducted", "reserved")  # a unit taken, with its order (Answer.order)
NOTHING_TAKEN = ("sold_out", "limit_reached")
PAY_RESULTS = ("paid", "expired", "not_reserved", "not_your_order", "not_found")
CANCEL_RESULTS = ("cancelled", "expired", "not_reserved", "not_your_order", "not_found")


@dataclass(frozen=True)
class Books:
    """One product's counts after a run: its stock before and after, the units
    restocked, and its order rows by state (a dict state -> count)."""

    initial: int
    restocked: int
    final: int
    states: dict = field(default_factory=dict)

    def count(self, *states):
        return sum(int(self.states.get(s, 0)) for s in states)

    @property
    def held(self):
        return self.count(*HOLDING)

    @property
    def released(self):
        return self.count(*RELEASED)

    @property
    def expected(self):
        """The stock the equation gives."""
        return self.initial + self.restocked - self.held

    @property
    def supply(self):
        return self.initial + self.restocked

    def problems(self):
        """What the rows and the stock say went wrong: sentences, none when the books
        hold. A stock above the equation is a unit given back more than once (or a
        deduction that left no row); below it, a unit taken without a row."""
        out = []
        if self.final > self.expected:
            out.append(f"stock {self.final} is above initial {self.initial} + restocks "
                       f"{self.restocked} - held {self.held} = {self.expected}: a unit came "
                       f"back twice")
        elif self.final < self.expected:
            out.append(f"stock {self.final} is below initial {self.initial} + restocks "
                       f"{self.restocked} - held {self.held} = {self.expected}: a unit left "
                       f"without its order")
        paid = self.count("paid", "sold")
        if paid > self.supply:
            out.append(f"{paid} units paid or sold of {self.supply} (initial + restocks)")
        elif self.held > self.supply:
            out.append(f"{self.held} units held of {self.supply} (initial + restocks)")
        return out

    def line(self):
        """The counts as the experiment prints them."""
        return " ".join(f"{s} {self.count(s)}" for s in STATES) + \
            f", restocked {self.restocked}, stock {self.initial} -> {self.final}"


def over_limit(rows, limit):
    """The customers who hold more than LIMIT units of a product: {user: units} from
    ROWS, (user, state) pairs of its orders. Released rows do not count, reserved ones
    do (issue 42: the limit counts unpaid orders too)."""
    held = {}
    for user, state in rows:
        if user is not None and state in HOLDING:
            held[user] = held.get(user, 0) + 1
    return {u: n for u, n in sorted(held.items()) if limit is not None and n > limit}


@dataclass
class Answer:
    """One HTTP answer of stockd: status (0 without one), its JSON document ({} if it
    had none), error (the transport's, else None), and when it was sent and answered."""

    status: int
    doc: dict
    error: str = None
    invoke: float = 0.0
    complete: float = 0.0

    @property
    def result(self):
        return self.doc.get("result")

    @property
    def order(self):
        """The order the answer names, as {order} of /orders/{order}/pay|cancel takes it:
        its row id (`order_id`) in every mode but redis-stock, whose answers name it by
        the request key (`order`) and have no row id (docs/orders.md)."""
        return self.doc.get("order", self.doc.get("order_id"))

    def record(self):
        """The answer as a history record's fields."""
        out = {"status": self.status, "result": self.result, "invoke": self.invoke,
               "complete": self.complete}
        if self.error:
            out["error"] = self.error
        for k in ("order_id", "order", "instance", "expires_at", "replayed"):
            if k in self.doc:
                out[k] = self.doc[k]
        return out


class Api:
    """stockd's order API at URL (nginx or one instance): reduce, pay, cancel and
    restock, each returning an Answer. TOKEN is the admin token restock sends (the
    stack's RUN/admin-token); TIMEOUT the seconds a request may take."""

    def __init__(self, url, token=None, timeout=30.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(self, method, path, params, headers=None):
        import time
        q = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        req = urllib.request.Request(f"{self.url}{path}?{q}", method=method,
                                     headers=headers or {},
                                     data=b"" if method == "POST" else None)
        t0 = time.time()
        status, body, err = 0, b"", None
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                status, body = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read()
        except (OSError, urllib.error.URLError) as e:
            err = str(getattr(e, "reason", e)) or type(e).__name__
        try:
            doc = json.loads(body) if body else {}
        except ValueError:
            doc = {}
        return Answer(status, doc if isinstance(doc, dict) else {}, err, t0, time.time())

    def reduce(self, product, user=None, key=None):
        return self.call("GET", "/stock/reduce", {"id": product, "user": user},
                         {"Idempotency-Key": key} if key else None)

    def pay(self, order, user):
        return self.call("POST", f"/orders/{order}/pay", {"user": user})

    def cancel(self, order, user):
        return self.call("POST", f"/orders/{order}/cancel", {"user": user})

    def restock(self, product, units, key=None):
        """KEY: the restock's Idempotency-Key (a retry of it restocks once), or None."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if key:
            headers["Idempotency-Key"] = key
        return self.call("POST", "/stock/restock", {"id": product, "units": units}, headers)


def read_token(path):
    """The admin token in PATH (the stack's RUN/admin-token), stripped; "" if unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""
