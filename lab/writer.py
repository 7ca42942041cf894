"""The order writer of mode redis-stock (writer/writer.h), as the lab sees it.

In that mode stockd answers "deducted" when Redis has decremented and appended the order
to the stream stockd:orders; stock-writer writes it to MariaDB later. So a ledger read
right after a run misses the orders still in the stream: every tool that judges a run of
this mode waits for drained() first, and counts the oversold promises (entries the
database had no stock for) beside the orders. Also starting and stopping writers.
"""

import os

from lab import LabError, proc
from lab.servers import redis_cmd

STREAM = "stockd:orders"
GROUP = "writers"


def _port(redis):
    """The port of HOST:PORT (the lab's Redis servers are all on 127.0.0.1)."""
    host, _, port = str(redis).rpartition(":")
    if host not in ("127.0.0.1", "localhost", "") or not port.isdigit():
        raise LabError("the writer's Redis must be 127.0.0.1:PORT, got %s" % redis)
    return int(port)


def backlog(redis, user=None, password=None):
    """(entries not yet delivered to the group, entries delivered and not acknowledged),
    or (None, None) when the stream or the group does not exist yet."""
    port = _port(redis)
    try:
        groups = redis_cmd(port, "XINFO", "GROUPS", STREAM, user=user, password=password)
    except (ConnectionError, TimeoutError):
        raise
    except OSError:  # ERR no such key: nothing was ever appended
        return None, None
    for g in groups or []:
        info = dict(zip(g[::2], g[1::2]))
        if info.get("name") != GROUP:
            continue
        undelivered = info.get("lag")
        if undelivered is None:  # Redis does not know it: is anything after the last?
            later = redis_cmd(port, "XRANGE", STREAM, "(" + info.get("last-delivered-id", "0-0"),
                              "+", "COUNT", 1, user=user, password=password)
            undelivered = len(later or [])
        return int(undelivered), int(info.get("pending", 0))
    return None, None


def drained(redis, user=None, password=None):
    """True when every entry of the stream has been written and acknowledged (or there
    is no stream: nothing to write)."""
    undelivered, pending = backlog(redis, user, password)
    if undelivered is None:
        length = 0
        try:
            length = int(redis_cmd(_port(redis), "XLEN", STREAM, user=user, password=password))
        except (ConnectionError, TimeoutError):
            raise
        except OSError:
            pass
        return length == 0
    return undelivered == 0 and pending == 0


def wait_drained(redis, seconds=120, user=None, password=None):
    """Waits for drained(); LabError naming what is left when SECONDS pass."""
    if not proc.wait_until(seconds, lambda: drained(redis, user, password), 0.1):
        undelivered, pending = backlog(redis, user, password)
        raise LabError("the order writer did not drain %s within %d s (backlog %s, pending %s): "
                       "is a stock-writer running?" % (STREAM, seconds, undelivered, pending))


def oversold_promises(shop, product):
    """The oversold promises of PRODUCT recorded by the writer (0 if the table is not
    there: a database made before the writer)."""
    if not shop.value("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
                      "DATABASE() AND table_name = 'oversold_promise'"):
        return 0
    return int(shop.value("SELECT COUNT(*) FROM oversold_promise WHERE product_id=%s",
                          (product,)))


def reset(redis, shop, product, seconds=120):
    """Before a product's stock is reset in MariaDB (shop.set_stock): waits for the writer
    to drain what is in flight, drops the product's count, so that stockd loads it again
    from MariaDB (the mode's restock, docs/operating.md), and its oversold promises."""
    wait_drained(redis, seconds)
    redis_cmd(_port(redis), "DEL", "stockd:stock:{%d}" % int(product))
    shop.rows("DELETE FROM oversold_promise WHERE product_id=%s", (int(product),))


def start(run, binary, name, redis, mysql_url, extra=(), env=None):
    """Starts stock-writer BINARY as consumer NAME under RUN/writer-NAME (pid, log)."""
    d = os.path.join(run, "writer-%s" % name)
    os.makedirs(d, exist_ok=True)
    argv = [binary, "--redis", redis, "--mysql", mysql_url, "--consumer", name] + list(extra)
    return proc.spawn(argv, os.path.join(d, "log"), env=env, pidfile=os.path.join(d, "pid"))


def stop(run, name):
    """SIGTERM (then SIGKILL) to writer NAME under RUN."""
    proc.stop_pidfile(os.path.join(run, "writer-%s" % name, "pid"))
