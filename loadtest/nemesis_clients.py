"""The nemesis's clients (loadtest/nemesis) and the history they write: deductions with a
new Idempotency-Key each, retried with the same key while the outcome is open, a
restocker that adds units through the database, and at the end the retry of every key
still open and the final database, for loadtest/nemesis_check.py."""
import json
import random
import threading
import time
import urllib.error
import urllib.request

from lab import LabError, writer
from lab.shop import Shop
from nemesis_stack import DB, RunFailed, lab

# The results by which stockd says that nothing was deducted (docs/operating.md, "Routes and answers").
NOTHING_DEDUCTED = {"sold_out", "lock_timeout", "lock_lost", "unavailable", "overloaded",
                    "not_found", "bad_request", "key_conflict", "internal_error",
                    "method_not_allowed"}


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
    if status == 200 and result == "deducted":
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

    def __init__(self, args, stack, history, products, restock_max):
        self.args = args
        self.stack = stack
        self.history = history
        self.products = products
        self.restock_max = restock_max
        self.stop = threading.Event()  # the workload's end
        self.open_keys = {}  # key -> (product, attempts) whose outcome is still open
        self.open_lock = threading.Lock()
        self.restock_id = 0

    def threads(self):
        """The clients' threads and the restocker's, not started. Mode redis-stock has no
        restocker: its count is Redis's, which a restock of MariaDB's row does not reach."""
        restocker = [] if self.stack.mode == "redis-stock" else [
            threading.Thread(target=self.restocker)]
        return [threading.Thread(target=self.client, args=(n,))
                for n in range(self.args.clients)] + restocker

    def deduct(self, client, key, product, attempt):
        url = f"http://127.0.0.1:{self.stack.ports['nginx']}/stock/reduce?id={product}"
        req = urllib.request.Request(url, headers={"Idempotency-Key": key})
        rec = {"type": "op", "key": key, "product": product, "attempt": attempt,
               "client": client, "invoke": time.time()}
        status, body, err = 0, None, None
        try:
            with urllib.request.urlopen(req, timeout=self.args.timeout) as r:
                status, body = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read()
        except (OSError, urllib.error.URLError) as e:
            err = str(getattr(e, "reason", e))
        rec["complete"] = time.time()
        rec["status"] = status
        try:
            doc = json.loads(body) if body else {}
        except ValueError:
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        rec["result"] = doc.get("result")
        rec["instance"] = doc.get("instance")
        rec["outcome"] = outcome(status, doc, err)
        if rec["outcome"] == "deducted":
            rec["order_id"] = doc.get("order_id")
            rec["replayed"] = bool(doc.get("replayed"))
        if err:
            rec["error"] = err
        self.history.record(rec)
        return rec["outcome"]

    def client(self, n):
        rng = random.Random(f"{self.args.seed}-client-{n}")
        seq = 0
        while not self.stop.is_set():
            seq += 1
            key = f"s{self.args.seed}-c{n}-{seq}"
            product = rng.choice(list(self.products))
            attempt = 1
            while True:
                if self.deduct(n, key, product, attempt) != "unknown":
                    break
                if attempt >= self.args.retries or self.stop.is_set():
                    with self.open_lock:
                        self.open_keys[key] = (product, attempt)
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

    def resolve_open_keys(self):
        """Retries every key whose outcome is still open, now that the faults are healed."""
        with self.open_lock:
            keys = dict(self.open_keys)
        for key, (product, attempt) in sorted(keys.items()):
            for extra in range(1, 4):
                if self.deduct(-1, key, product, attempt + extra) != "unknown":
                    break
                time.sleep(0.5)

    def final(self):
        """The final database for the checker: each product's first and last stock, the
        orders and the committed restocks; in mode redis-stock, once the order writer has
        drained the stream, also Redis's counts and the oversold promises."""
        extra = self.redis_stock_final() if self.stack.mode == "redis-stock" else {}
        stocks = self.stack.sql(("SELECT id, stock FROM product_stock WHERE id IN %s",
                                 (tuple(self.products),)))
        orders = self.stack.sql("SELECT id, product_id, IFNULL(request_id, ''), "
                                "UNIX_TIMESTAMP(created_at), instance FROM orders ORDER BY id")
        restocks = self.stack.sql("SELECT id, product_id, amount, UNIX_TIMESTAMP(at), "
                                  "after_order FROM nemesis_restock ORDER BY id")
        nodes = self.galera_nodes() if self.stack.haproxy else {}
        return {"products": {str(p): {"initial": self.products[p], "final": int(s)}
                             for p, s in ((int(r[0]), r[1]) for r in stocks)},
                "orders": [{"id": int(r[0]), "product": int(r[1]), "request_id": r[2] or None,
                            "created_at": float(r[3]), "instance": r[4]} for r in orders],
                "restocks": [{"id": int(r[0]), "product": int(r[1]), "amount": int(r[2]),
                              "at": float(r[3]), "after_order": int(r[4])} for r in restocks],
                "replay_by_order_id": True, **nodes, **extra}

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
