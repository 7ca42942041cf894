"""Mode redis-stock's keys in the Redis of a stack, as the lab's tools reset and read
them (db/stockredis.h names the keys; docs/operating.md, "Restocking in mode
redis-stock", says why in this order):

  stockd:stock:{ID}   the sellable count of product ID (absent: loaded from MariaDB's
                      product.stock by the first deduction, once)
  stockd:orders       the stream of orders, read by the order writers' group `writers`

A reset waits for the writers to drain the stream (nothing undelivered, nothing
pending), so that no order of the old stock lands after MariaDB's row is reset, and then
deletes the count, so that the next deduction loads the new stock.
"""

import os

from . import LabError, proc
from . import servers as srv
from . import state as statemod

STREAM = "stockd:orders"
GROUP = "writers"


def count_key(product):
    return "stockd:stock:{%d}" % int(product)


def restocked_key(product):
    """The units restocks through the API added to the count (db/stockredis.h)."""
    return "stockd:restocked:{%d}" % int(product)


class RedisStock:
    """The Redis of the stack under RUN (its Sentinel's primary with --redis-sentinel),
    as the stack's Redis user."""

    def __init__(self, port, password):
        self.port, self.password = port, password

    @classmethod
    def of(cls, run):
        """The stack's Redis, or None when the stack under RUN has none answering."""
        st = statemod.load(run)
        if not st or not st["redis_port"]:
            return None
        port = st["redis_port"]
        if st["redis_sentinel"] and st["sentinel_port"]:
            primary = srv.sentinel_primary(st["sentinel_port"])
            port = int(primary.rsplit(":", 1)[1]) if primary else port
        try:
            with open(os.path.join(run, "redis-password")) as f:
                pw = f.read().strip()
        except OSError:
            pw = ""
        r = cls(port, pw)
        return r if srv.redis_ping(port, srv.redis_user(), pw or None) else None

    @classmethod
    def at(cls, addr, password=""):
        """The Redis at HOST:PORT on loopback (a test's own), with the stack's user when
        PASSWORD is given."""
        return cls(int(addr.rsplit(":", 1)[1]), password)

    def cmd(self, *args):
        return srv.redis_cmd(self.port, *args, user=srv.redis_user(),
                             password=self.password or None)

    def count(self, product):
        """The product's count in Redis, or None when it is not loaded."""
        v = self.cmd("GET", count_key(product))
        return None if v is None else int(v)

    def group(self):
        """The writers' group as XINFO GROUPS has it (a dict), or None without the
        stream or the group."""
        try:
            groups = self.cmd("XINFO", "GROUPS", STREAM)
        except OSError as e:
            if "no such key" in str(e):
                return None
            raise
        for g in groups or []:
            info = dict(zip(g[::2], g[1::2]))
            if info.get("name") == GROUP:
                return info
        return None

    def consumers(self):
        """The names of the writers' group's consumers ([] without the group)."""
        try:
            rows = self.cmd("XINFO", "CONSUMERS", STREAM, GROUP)
        except OSError:
            return []
        return [dict(zip(c[::2], c[1::2])).get("name") for c in rows or []]

    def added(self):
        """Entries ever added to the stream (XINFO STREAM's entries-added; 0 without it).
        Unlike XLEN it only grows: the writer trims what every group has written."""
        try:
            info = self.cmd("XINFO", "STREAM", STREAM)
        except OSError as e:
            if "no such key" in str(e):
                return 0
            raise
        return int(dict(zip(info[::2], info[1::2])).get("entries-added") or 0)

    def backlog(self):
        """(undelivered, pending) entries of the writers' group: XINFO GROUPS's lag and
        pending; (0, 0) without the stream or the group."""
        g = self.group()
        return (int(g.get("lag") or 0), int(g.get("pending") or 0)) if g else (0, 0)

    def wait_drained(self, seconds=120):
        """Waits until the writers have written every order of the stream; raises
        LabError after SECONDS (is the writer running?). Returns at once when no writer
        ever joined the group: nobody would drain it."""
        g = self.group()
        if not g or not int(g.get("consumers") or 0):
            return
        if not proc.wait_until(seconds, lambda: self.backlog() == (0, 0)):
            lag, pending = self.backlog()
            raise LabError("the order writers have not drained %s in %d s (%d undelivered, %d "
                           "pending): is stock-writer running?" % (STREAM, seconds, lag, pending))

    def forget(self, *products):
        """Deletes the products' counts (and what restocks added to them, as the reset of
        MariaDB deletes the restock rows): the next deduction of each loads MariaDB's
        stock."""
        for i in range(0, len(products), 500):
            part = products[i:i + 500]
            self.cmd("DEL", *[count_key(p) for p in part], *[restocked_key(p) for p in part])
