"""The nemesis's clients (loadtest/nemesis) and the history they write: deductions with a
new Idempotency-Key each, retried with the same key while the outcome is open, a
restocker that adds units through the database (in mode redis-stock through the
restock API, the only restock that reaches Redis's count: docs/orders.md), and at the
end the retry of every key still open and the final database, for loadtest/nemesis_check.py. With --orders (issue
42, docs/orders.md) each deduction names a customer of a small pool shared by every
client, the products have a limit per customer or reserve their units, and a client
pays a reservation in time or late, cancels it, cancels and pays it at once, or leaves
it to expire; the run then waits for stockd to release what expired."""
import json
import random
import threading
import time

from lab import LabError, orders, writer
from lab.shop import Shop
from nemesis_stack import DB, RunFailed, lab

# The results by which stockd says that nothing was deducted (docs/operating.md, "Routes and answers").
NOTHING_DEDUCTED = {"sold_out", "lock_timeout", "lock_lost", "unavailable", "overloaded",
                    "not_found", "bad_request", "key_conflict", "internal_error",
                    "method_not_allowed", "limit_reached"}
# --orders: the products' terms (limit per customer, reserve seconds), by product index
# (1-based, cycling), and the pool of customers every client draws from. The fourth has
# none, and its deductions name no customer: the plain deductions of a run without
# --orders go on beside the order's life, so folding --orders into a run loses nothing.
ORDER_TERMS = ((2, 1), (None, 1), (1, None), (None, None))
CUSTOMERS = 6


class History:
    """OUT/history.jsonl, one JSON record a line, written by many threads."""

    def __init__(self, path):
        self.lock = threading.Lock()
        self.file = open(path, "w")
        self.nops = 0

    def record(self, rec):
        with self.lock:
            self.file.write(json.dumps(rec, sort_keys=True) + "\n")
            self.file.flush()
            if rec["type"] == "op":
                self.nops += 1

    def close(self):
        self.file.close()


def outcome(status, doc, err):
    """What a deduction's answer says of it: deducted, sold_out, failed (nothing was
    deducted) or unknown (a timeout, a cut connection, nginx's 502/504, stockd's 500)."""
    result = doc.get("result")
    if status == 200 and result in orders.DEDUCTION_TAKES:  # deducted, or reserved
        return "deducted"
    if status == 409 and result == "sold_out":
        return "sold_out"
    if status and result in NOTHING_DEDUCTED and status not in (502, 504):
        return "failed"
    if err and "Connection refused" in err:
        return "failed"  # nginx never took the request
    return "unknown"


class Clients:
    """The workload of one run against STACK (nemesis_stack.Stack), recorded in HISTORY;
    ARGS are the nemesis's (seed, clients, retries, timeout)."""

    def __init__(self, args, stack, history, products, restock_max, terms=None):
        """TERMS: {product: (per_user_limit, reserve_seconds)} with --orders, else None."""
        self.args = args
        self.terms = terms
        self.reserve_s = {p: t[1] for p, t in (terms or {}).items()}
        self.stack = stack
        self.history = history
        self.products = products
        self.restock_max = restock_max
        self.stop = threading.Event()  # the workload's end
        self.open_keys = {}  # key -> (product, attempts) whose outcome is still open
        self.open_lock = threading.Lock()
        self.restock_id = 0

    def threads(self):
        """The clients' threads and the restocker's, not started. In mode redis-stock the
        restocker (through the API) runs with --orders only: beside the Sentinel failover
        of nemesis_redis_stock_failover_counts_lost_deductions, which has no --orders,
        its writers once left 52 entries undelivered for 120 s (2026-12-07, not yet
        understood), and that run's point is the lost deductions, not restocks."""
        restocker = [] if self.stack.mode == "redis-stock" and not self.args.orders else [
            threading.Thread(target=self.restocker)]
        return [threading.Thread(target=self.client, args=(n,))
                for n in range(self.args.clients)] + restocker

    def api(self):
        """The order API through nginx; in mode redis-stock with the admin token."""
        token = orders.read_token(self.stack.admin_token_file()) \
            if self.stack.mode == "redis-stock" else None
        return orders.Api(f"http://127.0.0.1:{self.stack.ports['nginx']}", token,
                          timeout=self.args.timeout)

    def deduct(self, client, key, product, attempt, user=None):
        ans = self.api().reduce(product, user, key)
        rec = {"type": "op", "key": key, "product": product, "attempt": attempt,
               "client": client, "invoke": ans.invoke, "complete": ans.complete,
               "status": ans.status, "result": ans.result, "instance": ans.doc.get("instance"),
               "outcome": outcome(ans.status, ans.doc, ans.error)}
        if user:
            rec["user"] = user
        if rec["outcome"] == "deducted":
            rec["order"] = ans.order
            rec["replayed"] = bool(ans.doc.get("replayed"))
        if ans.error:
            rec["error"] = ans.error
        self.history.record(rec)
        return rec

    def order_call(self, kind, product, order, user):
        """A payment or a cancel (KIND pay|cancel) of ORDER (as the deduction's answer
        named it: lab/orders.py's Answer.order) as USER, recorded."""
        api = self.api()
        ans = (api.pay if kind == "pay" else api.cancel)(order, user)
        self.history.record({**ans.record(), "type": kind, "order": order, "user": user,
                             "product": product})
        return ans

    def after_reservation(self, rng, product, rec):
        """What a customer does with the reservation REC: pays it in time or late, cancels
        it, cancels and pays it at once (racing each other and the expiry), or leaves it."""
        e = self.reserve_s.get(product) or 1
        oid, user = rec.get("order"), rec.get("user")
        fate = rng.random()
        time.sleep(rng.uniform(0, 1.5 * e))
        if fate < 0.4:
            self.order_call("pay", product, oid, user)
        elif fate < 0.65:
            self.order_call("cancel", product, oid, user)
        elif fate < 0.75:
            both = [threading.Thread(target=self.order_call, args=(k, product, oid, user))
                    for k in ("cancel", "pay")]
            for t in both:
                t.start()
            for t in both:
                t.join()

    def client(self, n):
        rng = random.Random(f"{self.args.seed}-client-{n}")
        seq = 0
        while not self.stop.is_set():
            seq += 1
            key = f"s{self.args.seed}-c{n}-{seq}"
            product = rng.choice(list(self.products))
            user = f"customer-{rng.randint(1, CUSTOMERS)}" \
                if self.terms and self.terms[product] != (None, None) else None
            attempt = 1
            while True:
                rec = self.deduct(n, key, product, attempt, user)
                if rec["outcome"] != "unknown":
                    if rec.get("result") == "reserved" and not rec.get("replayed"):
                        self.after_reservation(rng, product, rec)
                    break
                if attempt >= self.args.retries or self.stop.is_set():
                    with self.open_lock:
                        self.open_keys[key] = (product, attempt, user)
                    break
                attempt += 1
                time.sleep(rng.uniform(0.1, 0.5))
            time.sleep(rng.uniform(0.02, 0.12))

    def restocker(self):
        rng = random.Random(f"{self.args.seed}-restock")
        while not self.stop.wait(rng.uniform(0.5, 2.0)):
            self.restock(rng.choice(list(self.products)), rng.randint(1, self.restock_max))

    def restock(self, product, amount):
        self.restock_id += 1
        rid = self.restock_id
        rec = {"type": "restock", "id": rid, "product": product, "amount": amount,
               "invoke": time.time()}
        if self.stack.mode == "redis-stock":
            return self.restock_by_api(rec)
        # after_order, read under the product row's lock (READ COMMITTED: the latest
        # committed orders), places the restock in the product's order ids, which are in
        # commit order whatever MariaDB's clock does (loadtest/nemesis_check.py).
        ok = False
        try:
            with Shop(self.stack.run, DB) as db:
                db.rows("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                db.conn.begin()
                db.rows("UPDATE product SET stock = stock + %s WHERE id = %s", (amount, product))
                db.rows("INSERT INTO nemesis_restock VALUES (%s, %s, %s, NOW(6), (SELECT "
                        "IFNULL(MAX(id), 0) FROM orders WHERE product_id = %s))",
                        (rid, product, amount, product))
                db.conn.commit()
                ok = True
        except Exception:  # MariaDB stopped or killed (a fault): the outcome is open
            pass
        rec["complete"] = time.time()
        rec["outcome"] = "ok" if ok else "unknown"
        self.history.record(rec)

    def restock_by_api(self, rec):
        """Mode redis-stock's restock (REC, recorded): POST /stock/restock with its own
        Idempotency-Key, not retried. An SQL restock there is the documented oversell (a
        load between MariaDB's raise and Redis's sells it twice); the committed restocks
        are the API's ledger, the restock table (final). A 503 may have committed in
        MariaDB without reaching Redis (docs/orders.md): its outcome stays open."""
        rec["key"] = f"s{self.args.seed}-restock-{rec['id']}"
        ans = self.api().restock(rec["product"], rec["amount"], rec["key"])
        rec.update(complete=ans.complete, status=ans.status, result=ans.result,
                   outcome="ok" if ans.result == "restocked" else
                   "failed" if 400 <= ans.status < 500 else "unknown")
        self.history.record(rec)

    def resolve_open_keys(self):
        """Retries every key whose outcome is still open, now that the faults are healed."""
        with self.open_lock:
            keys = dict(self.open_keys)
        for key, (product, attempt, user) in sorted(keys.items()):
            for extra in range(1, 4):
                if self.deduct(-1, key, product, attempt + extra, user)["outcome"] != "unknown":
                    break
                time.sleep(0.5)

    def await_releases(self, seconds):
        """--orders: waits until no order is reserved any more (the workload has ended, so
        stockd releases each one at its expiry), for at most SECONDS; the checker judges
        what is left (not_released)."""
        end = time.time() + seconds
        while time.time() < end:
            if not int(self.stack.sql("SELECT COUNT(*) FROM orders WHERE state = 'reserved'")[0][0]):
                return
            time.sleep(0.2)

    def final(self):
        """The final database for the checker: each product's first and last stock, the
        orders and the committed restocks; in mode redis-stock, once the order writer has
        drained the stream, also Redis's counts and the oversold promises."""
        extra = self.redis_stock_final() if self.stack.mode == "redis-stock" else {}
        stocks = self.stack.sql(("SELECT id, stock FROM product_stock WHERE id IN %s",
                                 (tuple(self.products),)))
        life = ", user, state, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at) / 1e6" \
            if self.terms else ""
        rows = self.stack.sql("SELECT id, product_id, IFNULL(request_id, ''), "
                              f"UNIX_TIMESTAMP(created_at), instance{life} FROM orders ORDER BY id")
        read_at = time.time()
        restocks = self.restocks()
        nodes = self.galera_nodes() if self.stack.haproxy else {}
        out = {"products": {str(p): {"initial": self.products[p], "final": int(s)}
                            for p, s in ((int(r[0]), r[1]) for r in stocks)},
               "orders": [{"id": int(r[0]), "product": int(r[1]), "request_id": r[2] or None,
                           "created_at": float(r[3]), "instance": r[4]} for r in rows]}
        if self.terms:  # the order's life (nemesis_check.py's orders_life)
            for o, r in zip(out["orders"], rows):
                o.update(user=r[5], state=r[6], expires_at=None if r[7] is None else float(r[7]))
            for p, (limit, _) in self.terms.items():
                out["products"][str(p)]["limit"] = limit
            out.update(orders_life=True, read_at=read_at,
                       clock_faults=bool({"clock", "clock-back"} & set(self.stack.fault_kinds)))
        return {**out,
                "restocks": restocks, "replay_by_order_id": True, **nodes, **extra}

    def restocks(self):
        """The committed restocks: the restocker's own ledger (nemesis_restock, with
        after_order), or in mode redis-stock the API's (the restock table, with each one's
        key; no after_order, so the replay goes by time)."""
        if self.stack.mode == "redis-stock":
            return [{"id": int(r[0]), "product": int(r[1]), "amount": int(r[2]),
                     "at": float(r[3]), "key": r[4]} for r in self.stack.sql(
                         "SELECT id, product_id, units, UNIX_TIMESTAMP(created_at), request_id "
                         "FROM restock ORDER BY id")]
        return [{"id": int(r[0]), "product": int(r[1]), "amount": int(r[2]),
                 "at": float(r[3]), "after_order": int(r[4])} for r in self.stack.sql(
                     "SELECT id, product_id, amount, UNIX_TIMESTAMP(at), after_order "
                     "FROM nemesis_restock ORDER BY id")]

    def galera_nodes(self):
        """--galera: what each node holds, read on the node itself with wsrep_sync_wait=1
        (after every node is synced again): {"galera_nodes": {N: {"stocks": {P: stock},
        "orders": [order ids]}}}, for the check that the nodes agree with each other and
        with the ledger."""
        lab(self.stack.db.start)  # every node up and synced
        out = {}
        for m in self.stack.db.members:
            try:
                stocks = m.query("SELECT id, stock FROM product_stock WHERE id IN %s",
                                 (tuple(self.products),), DB)
                ids = m.query("SELECT id FROM orders ORDER BY id", None, DB)
            except Exception as e:  # pymysql's errors: a node that does not answer
                raise RunFailed(f"galera{m.n} unreadable: {e}") from None
            out[str(m.n)] = {"stocks": {str(int(p)): int(s) for p, s in stocks},
                             "orders": [int(r[0]) for r in ids]}
        return {"galera_nodes": out}

    def redis_stock_final(self):
        """Mode redis-stock's side of the final state, read once the writer has drained
        the stream: {"redis_stock": {"counts": {P: Redis's count}, "oversold": {P: the
        writer's oversold promises}, "promised_keys": [the promises' request ids]}}."""
        rs = self.stack.redis_stock()
        try:
            rs.wait_drained()
        except LabError as e:
            raise RunFailed(str(e)) from None
        try:
            with Shop(self.stack.run, DB) as db:
                oversold = {str(p): writer.oversold_promises(db, p) for p in self.products}
                keys = [k for (k,) in db.rows("SELECT request_id FROM oversold_promise")]
        except Exception as e:  # pymysql's errors: the database is unreadable
            raise RunFailed(f"SQL failed: {e}") from None
        return {"redis_stock": {"counts": {str(p): rs.count(p) for p in self.products},
                                "oversold": oversold, "promised_keys": keys}}


def multi_product_transactions(orders):
    """How many committed transactions deducted more than one product. A transaction's
    orders go in with ONE INSERT (db/stockdb_multi.c), whose CURRENT_TIMESTAMP(6) is the
    same for every row, so its rows share the instance and created_at."""
    products = {}
    for o in orders:
        products.setdefault((o["instance"], o["created_at"]), set()).add(o["product"])
    return sum(1 for ps in products.values() if len(ps) > 1)
