#!/usr/bin/python3
"""The order's life on two Galera writers (docs/galera.md, "stockd on Galera"): stockd A
and B, each on a node of its own (no proxy), in mode for-update, whose row lock is
local to its node, so their writes of one product meet at certification and the loser
is aborted with error 1213. Run by galera_partition.sh (scenario restock) on the
cluster it starts; it prints what it saw and exits 1 on the first broken promise.

  galera_life.py --run T --db DB --urls URL_A URL_B --token-file F --product P

Each round reserves ORDERS orders of product P (reservations that do not expire within
the run), then sends at the same instant, for every order, its payment to one instance
and its cancel to the other, and RESTOCKS restocks of one unit spread over both. Every
answer must be applied once or cleanly refused: a pay or cancel is 200 (and the order
is in that state), 409 not_reserved (the other won), or 503 "nothing changed" (and the
order is not in that state through it); a restock is 200 (in the restock ledger) or 503
(not in it). Then each of the three nodes, read with wsrep_sync_wait=1, has the same
rows and stock = initial + restocks - held. Rounds go on (5 at most) until the instances
have retried at least one order transaction (stockd_txn_retries_total{txn="order"}), so
that the retry was met, not assumed.

A second product, reserved for 1 s, is left to stockd's expiry thread, which runs on
both instances and gives every reservation back once: its stock ends where it began on
every node.
"""

import argparse
import collections
import concurrent.futures
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from lab import prom  # noqa: E402
from lab import servers as srv  # noqa: E402
from lab.orders import Api, Books, read_token  # noqa: E402
from lab.shop import Shop  # noqa: E402

ORDERS = 20
RESTOCKS = 20
ROUNDS = 5
RESERVE_TRIES = 5


class NodeShop(Shop):
    """Shop's reads on Galera node N itself (root over its socket, wsrep_sync_wait=1)."""

    def __init__(self, run, n, db):  # pylint: disable=super-init-not-called
        self.redis = None
        self.conn = srv.GaleraNode(run, None, n).connect(db)


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def order_retries(urls):
    """stockd_txn_retries_total{txn="order"} summed over the instances (lab.prom)."""
    total = 0
    for u, sc in zip(urls, prom.scrape(urls)):
        n = sc.total("stockd_txn_retries_total", txn="order")
        if n is None:
            fail(f"{u}/metrics has no stockd_txn_retries_total{{txn=\"order\"}}")
        total += int(n)
    return total


def clean_refusal(ans):
    """A 503 that says nothing changed."""
    return ans.status == 503 and "nothing changed" in (ans.doc.get("message") or "")


def reserve(apis, product, i, user):
    """A reservation of PRODUCT for USER on instance i % 2. Reservations race too
    (for-update on two writers): one aborted on every try is a clean 503 and is sent
    again under its key, on the other instance, RESERVE_TRIES times at most."""
    for attempt in range(RESERVE_TRIES):
        ans = apis[(i + attempt) % 2].reduce(product, user, key=f"{user}-reserve")
        if not clean_refusal(ans):
            break
    return ans


def race(apis, product, rnd):
    """One round: reservations, then every order's pay and cancel on different instances
    and the restocks, all at once. (orders {oid: user}, pays {oid: Answer}, cancels
    {oid: Answer}, restock answers)."""
    users = [f"r{rnd}-u{i}" for i in range(ORDERS)]

    with concurrent.futures.ThreadPoolExecutor(ORDERS) as pool:
        res = list(pool.map(lambda iu: reserve(apis, product, *iu), enumerate(users)))
    orders = {}
    for u, ans in zip(users, res):
        if ans.result != "reserved":
            fail(f"reservation of {u}: {ans.status} {ans.result} {ans.doc.get('message')}")
        orders[ans.order] = u
    jobs = []
    with concurrent.futures.ThreadPoolExecutor(2 * ORDERS + RESTOCKS) as pool:
        for i, (oid, u) in enumerate(orders.items()):
            jobs.append(("pay", oid, pool.submit(apis[i % 2].pay, oid, u)))
            jobs.append(("cancel", oid, pool.submit(apis[(i + 1) % 2].cancel, oid, u)))
        for i in range(RESTOCKS):
            jobs.append(("restock", None, pool.submit(apis[i % 2].restock, product, 1)))
        done = [(k, oid, f.result()) for k, oid, f in jobs]
    pays = {oid: a for k, oid, a in done if k == "pay"}
    cancels = {oid: a for k, oid, a in done if k == "cancel"}
    restocks = [a for k, _, a in done if k == "restock"]
    return orders, pays, cancels, restocks


def judge_answers(states, pays, cancels, restocks):
    """Each answer applied once or cleanly refused, against the order states (node 1's)."""
    count = collections.Counter()
    for what, answers, won in (("pay", pays, "paid"), ("cancel", cancels, "cancelled")):
        for oid, a in answers.items():
            state = states[oid]
            if a.status == 200 and a.result == won:
                if state != won:
                    fail(f"order {oid}: {what} answered {won}, the order is {state}")
                count[f"{what} {won}"] += 1
            elif a.status == 409 and a.result == "not_reserved":
                if state == won or state == "reserved":
                    fail(f"order {oid}: {what} refused not_reserved, the order is {state}")
                count[f"{what} not_reserved"] += 1
            elif clean_refusal(a):
                other = cancels[oid] if what == "pay" else pays[oid]
                if state == won:
                    fail(f"order {oid}: {what} answered 503 (nothing changed), the order is {state}")
                if state != "reserved" and not (other.status == 200):
                    fail(f"order {oid} is {state} with no 200 for it")
                count[f"{what} 503"] += 1
            else:
                fail(f"order {oid}: {what} answered {a.status} {a.result} {a.doc.get('message')} "
                     f"{a.error or ''}")
    restocked = 0
    for a in restocks:
        if a.status == 200 and a.result == "restocked":
            restocked += 1
        elif clean_refusal(a):
            count["restock 503"] += 1
        else:
            fail(f"restock answered {a.status} {a.result} {a.doc.get('message')} {a.error or ''}")
    count["restock restocked"] += restocked
    return restocked, count


def judge_nodes(shops, product, initial, restocked):
    """Every node has the rows and the stock the books give, and the same as node 1."""
    first = None
    for n, shop in enumerate(shops, 1):
        rows = sorted((oid, state) for oid, _, state, _ in shop.order_rows(product))
        books = Books(initial, shop.restocked(product), shop.stock(product),
                      shop.order_states(product))
        if books.restocked != restocked:
            fail(f"node {n}: the restock ledger has {books.restocked} units, {restocked} "
                 f"were answered restocked")
        if books.problems():
            fail(f"node {n}: " + "; ".join(books.problems()))
        if first is None:
            first = (rows, books.final)
        elif (rows, books.final) != first:
            fail(f"node {n} differs from node 1: stock {books.final} against {first[1]}, "
                 f"{len(rows)} rows against {len(first[0])}")
        print(f"node {n}: {books.line()}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--urls", nargs=2, required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--product", type=int, required=True)
    p.add_argument("--expiring-product", type=int, required=True)
    a = p.parse_args()
    token = read_token(a.token_file)
    apis = [Api(u, token) for u in a.urls]
    shops = [NodeShop(a.run, n, a.db) for n in (1, 2, 3)]
    initial = 2 * ORDERS * ROUNDS
    shops[0].set_stock(a.product, initial)
    shops[0].set_terms(a.product, None, 600)
    restocked = 0
    for rnd in range(1, ROUNDS + 1):
        _, pays, cancels, restocks = race(apis, a.product, rnd)
        states = {oid: state for oid, _, state, _ in shops[0].order_rows(a.product)}
        got, count = judge_answers(states, pays, cancels, restocks)
        restocked += got
        print(f"round {rnd}: " + ", ".join(f"{k} {v}" for k, v in sorted(count.items())))
        judge_nodes(shops, a.product, initial, restocked)
        retries = order_retries(a.urls)
        print(f"round {rnd}: order transactions retried after an abort: {retries}")
        if retries:
            break
    else:
        fail(f"{ROUNDS} rounds and no order transaction was retried: the race met no abort")
    print("ok: every pay, cancel and restock applied once or cleanly refused; the three "
          "nodes agree with the books")

    # The expiry thread of both instances on one product's reservations.
    e = a.expiring_product
    shops[0].set_stock(e, 10)
    shops[0].set_terms(e, None, 1)
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        res = list(pool.map(lambda i: reserve(apis, e, i, f"x{i}"), range(10)))
    if any(x.result != "reserved" for x in res):
        fail("reservations of the expiring product: " + ", ".join(str(x.result) for x in res))
    deadline = time.time() + 60
    while shops[0].order_states(e).get("reserved") and time.time() < deadline:
        time.sleep(0.2)
    if shops[0].order_states(e).get("reserved"):
        fail("reservations still held 60 s after their expiry")
    judge_nodes(shops, e, 10, 0)
    for n, shop in enumerate(shops, 1):
        if shop.stock(e) != 10 or shop.order_states(e).get("expired", 0) != 10:
            fail(f"node {n}: after the expiry, stock {shop.stock(e)} and "
                 f"{shop.order_states(e)}; expected 10 and 10 expired")
    print("ok: 10 reservations released once by the expiry threads of both writers, on "
          "every node")


if __name__ == "__main__":
    main()
