"""The order writer of mode redis-stock (writer/writer.h), as the lab sees it: its
oversold promises, and starting and stopping writers. In that mode stockd answers
"deducted" when Redis has decremented and appended the order to the stream; the writer
writes it to MariaDB later, so a tool waits for the drain (lab/redisstock.py) before it
reads the ledger, and counts the oversold promises (entries the database had no stock
for) beside the orders.
"""

import os

from . import proc


def oversold_promises(shop, product):
    """The oversold promises of PRODUCT recorded by the writer (0 if the table is not
    there: a database made before the writer)."""
    if not shop.value("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
                      "DATABASE() AND table_name = 'oversold_promise'"):
        return 0
    return int(shop.value("SELECT COUNT(*) FROM oversold_promise WHERE product_id=%s",
                          (product,)))


def start(run, binary, name, redis, mysql_url, extra=(), env=None, metrics_port=0):
    """Starts stock-writer BINARY as consumer NAME under RUN/writer-NAME (pid, log),
    serving its /metrics on METRICS_PORT (0: none)."""
    d = os.path.join(run, "writer-%s" % name)
    os.makedirs(d, exist_ok=True)
    argv = [binary, "--redis", redis, "--mysql", mysql_url, "--consumer", name] + list(extra)
    if metrics_port:
        argv += ["--metrics-port", str(metrics_port)]
    return proc.spawn(argv, os.path.join(d, "log"), env=env, pidfile=os.path.join(d, "pid"))


def stop(run, name):
    """SIGTERM (then SIGKILL) to writer NAME under RUN."""
    proc.stop_pidfile(os.path.join(run, "writer-%s" % name, "pid"))
