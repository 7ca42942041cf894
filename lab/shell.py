"""The lab library for shell scripts: `python3 -m lab.shell FUNCTION ARGS...` runs one
server of lab/servers.py (a start, a stop, or a question such as the ensemble's
leader) or lab/shop.py's set_stock, so that the shell helpers of the tests and the load
tools handle their servers with the same code as scripts/stack (stack-lib.sh's
functions of the same names call this, CALLS), or reads a stockd's /metrics for the tests' `metric` helper (tests/assert.sh,
QUERIES). Exit 0 on success, 1 with the reason on stderr, 2 on a wrong call.

Settings that stack-lib.sh took from the environment still come from there:
STACK_REDIS_PASSWORD (and STACK_REDIS_USER) for Redis and Sentinel,
STACK_REDIS_REPLICATION=1 for a primary with the users replica and sentinel,
STACK_PROMETHEUS_INTERVAL, STACK_NGINX_ROUTE and STACK_NGINX_RATE_LIMIT.
"""

import os
import sys
import time

from . import LabError


class _LazyServers:
    """lab.servers, imported at the first use: the /metrics calls do without it (and
    without its start-up time, which a wait would add to its latency). The /metrics
    calls import the Prometheus client as they need it, in turn: the servers' calls
    need only the packages of `scripts/deps demo` (lock/bench/run asks for no more)."""

    def __getattr__(self, name):
        from . import servers
        return getattr(servers, name)


srv = _LazyServers()


def _pw():
    return os.environ.get("STACK_REDIS_PASSWORD") or None


def _redis(run, port=None, name="redis", master=""):
    return srv.Redis(run, int(port) if port else None, name, _pw(),
                     os.environ.get("STACK_REDIS_REPLICATION") == "1",
                     int(master) if master else None)


def metric_key(text):
    """The (name, labels) key of lab.prom's Scrape for a sample written as /metrics
    writes it, NAME or NAME{label="value",...}; ValueError if it is not one sample."""
    from prometheus_client.parser import text_string_to_metric_families
    samples = [s for fam in text_string_to_metric_families(text + " 0\n") for s in fam.samples]
    if len(samples) != 1:
        raise ValueError("not one sample name: %r" % text)
    return samples[0].name, tuple(sorted(samples[0].labels.items()))


def _scrapes(targets):
    """lab.prom Scrapes of the /metrics of each target (a stockd's port, or a base URL)."""
    from . import prom
    return prom.scrape(targets)


def _print_number(v):
    print(int(v) if v == int(v) else repr(v))


def _sum(key, targets):
    """The sum of sample key over targets, None if none of them has it."""
    found = [sc[key] for sc in _scrapes(targets) if key in sc]
    return sum(found) if found else None


def metric(name, *targets):
    """Prints the value of the sample NAME (exactly that name and those labels) summed
    over the stockd instances at TARGETs; prints nothing if none of them has it."""
    v = _sum(metric_key(name), targets)
    if v is not None:
        _print_number(v)


def wait_metric(seconds, name, least, *targets):
    """Returns once the sample NAME summed over TARGETs is at least LEAST, polling every
    20 ms (one process, so the wait notices the state within a poll, not within a
    Python start-up); LabError with the last value once SECONDS have passed."""
    key, least = metric_key(name), float(least)
    deadline = time.monotonic() + float(seconds)
    while True:
        try:
            v = _sum(key, targets)
        except LabError:
            v = None  # not up yet: keep waiting until the deadline
        if v is not None and v >= least:
            return
        if time.monotonic() >= deadline:
            raise LabError("%s stayed at %s, below %s, for %s s" % (name, v, least, seconds))
        time.sleep(0.02)


def metric_total(name, *targets):
    """Prints the sum of every sample called NAME, whatever its labels, over TARGETs (0
    if there is none)."""
    _print_number(sum(sc.total(name) or 0 for sc in _scrapes(targets)))


def metric_series(name, target):
    """Prints how many samples called NAME (one per label set) the stockd at TARGET has."""
    (sc,) = _scrapes([target])
    print(sum(1 for n, _ in sc if n == name))


def _print_member(n):
    """Prints member number N; LabError when there is none (no leader)."""
    if n is None:
        raise LabError("no member answers as the leader")
    print(n)


def zk_ensemble_mode(first, n):
    """Prints member N's mode (leader, follower); nothing when it does not serve."""
    mode = srv.ZkMember("", int(first), int(n)).mode()
    if mode:
        print(mode)


def mysql_set_stock(run, db, product, stock, segments="1"):
    """lab.shop's set_stock: the product's stock (over SEGMENTS), fence 0, no orders."""
    from .shop import Shop
    with Shop(run, db) as shop:
        shop.set_stock(int(product), int(stock), int(segments))


def set_stock_sql(product, stock, segments="1"):
    """Prints mysql_set_stock's statements as one transaction, for a mariadb client."""
    from .shop import set_stock_sql as sql
    print("START TRANSACTION;\n%s;\nCOMMIT;" % ";\n".join(sql(product, stock, segments)))


def sentinel_primary(port):
    """Prints HOST:PORT of the primary the Sentinel on PORT names; LabError if none."""
    primary = srv.Sentinel("", int(port)).primary()
    if primary is None:
        raise LabError("the Sentinel on port %s names no primary" % port)
    print(primary)


def _galera(run, first=None, proxy_port=None):
    """The Galera cluster under RUN from port FIRST and its HAProxy on PROXY_PORT, with
    the health check's password in RUN/galera-check-password (made on first use)."""
    from .backing import Backing
    f = os.path.join(run, "galera-check-password")
    if not os.path.exists(f):
        import secrets
        os.makedirs(run, exist_ok=True)
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(16))
    with open(f) as fh:
        pw = fh.read().strip()
    ports = {"galera": int(first), "mysql": int(proxy_port)} if first else {}
    return Backing(run, ports, galera_check_password=pw)


def galera_start(run, first, proxy_port, *nodes):
    """Starts the Galera nodes NODES (all three when none) that do not run, bootstrapping
    when none does, and HAProxy in front of them."""
    b = _galera(run, first, proxy_port)
    b.galera_cluster().start([int(n) for n in nodes] or (1, 2, 3))
    b.haproxy().start()


def galera_stop(run):
    b = _galera(run)
    b.haproxy().stop()
    b.galera_cluster().stop()


# The functions of stack-lib.sh that call the library, each under its own name.
CALLS = {
    "mysql_start": lambda run, port: srv.MariaDB(run, int(port)).start(),
    "mysql_stop": lambda run: srv.MariaDB(run).stop(),
    "zk_start": lambda run, port, name="zk": srv.ZooKeeper(run, int(port), name).start(),
    "zk_stop": lambda run, name="zk": srv.ZooKeeper(run, name=name).stop(),
    "zk_ensemble_start": lambda run, first: srv.ZkEnsemble(run, int(first)).start(),
    "zk_ensemble_start_one": lambda run, first, n, wait="wait": srv.ZkEnsemble(
        run, int(first)).start([int(n)], wait != "nowait"),
    "zk_ensemble_stop": lambda run: srv.ZkEnsemble(run, 0).stop(),
    "redis_start": lambda *a: _redis(*a).start(),
    "redis_stop": lambda run, name="redis": srv.Redis(run, name=name).stop(),
    "sentinel_start": lambda run, port, master, name="sentinel": srv.Sentinel(
        run, int(port), int(master), _pw(), name).start(),
    "sentinel_stop": lambda run, name="sentinel": srv.Sentinel(run, name=name).stop(),
    "etcd_start": lambda run, port: srv.Etcd(run, int(port)).start(),
    "etcd_stop": lambda run: srv.Etcd(run).stop(),
    "prometheus_start": lambda run, port: srv.Prometheus(run, int(port)).start(),
    "prometheus_stop": lambda run: srv.Prometheus(run).stop(),
    "prometheus_targets": lambda run, *ports: srv.Prometheus(run).targets([int(p) for p in ports]),
    "stockd_stop_all": lambda run: srv.Stockd.stop_all(run),
    "nginx_start": lambda run, port, *ups: srv.Nginx(
        run, int(port), [int(u) for u in ups], os.environ.get("STACK_NGINX_ROUTE") or "round-robin",
        os.environ.get("STACK_NGINX_RATE_LIMIT") or "").start(),
    "nginx_stop": lambda run: srv.Nginx(run).stop(),
    "etcd_cluster_start": lambda run, first: srv.EtcdCluster(run, int(first)).start(),
    "etcd_cluster_stop": lambda run: srv.EtcdCluster(run, 0).stop(),
    "etcd_cluster_hosts": lambda first: print(srv.EtcdCluster("", int(first)).hosts()),
    "etcd_cluster_leader": lambda first: _print_member(srv.EtcdCluster("", int(first)).leader()),
    "zk_ensemble_hosts": lambda first: print(srv.ZkEnsemble("", int(first)).hosts()),
    "zk_ensemble_mode": zk_ensemble_mode,
    "zk_leader": lambda first: _print_member(srv.ZkEnsemble("", int(first)).leader()),
    "mysql_set_stock": mysql_set_stock,
    "galera_start": galera_start,
    "galera_stop": galera_stop,
    # The password in STACK_LAB_PASSWORD, never argv (stack-lib.sh's wrappers put it there).
    "mysql_create_db": lambda run, db, user: srv.database(run).create_db(
        db, user, os.environ["STACK_LAB_PASSWORD"]),
    "mysql_grant_service_user": lambda run, db, user: srv.database(run).grant_service_user(
        db, user, os.environ["STACK_LAB_PASSWORD"]),
}

# What the tests ask (tests/assert.sh, tests/lib.sh, tests/stack/containers.sh): no
# stack-lib.sh function stands for these.
QUERIES = {
    "metric": metric,
    "metric_total": metric_total,
    "metric_series": metric_series,
    "wait_metric": wait_metric,
    "sentinel_primary": sentinel_primary,
    "set_stock_sql": set_stock_sql,
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    calls = {**CALLS, **QUERIES}
    if not argv or argv[0] not in calls:
        print("usage: python3 -m lab.shell FUNCTION ARGS... (FUNCTION: %s)" % " ".join(sorted(calls)),
              file=sys.stderr)
        return 2
    try:
        calls[argv[0]](*argv[1:])
    except TypeError as e:
        print("lab.shell %s: %s" % (argv[0], e), file=sys.stderr)
        return 2
    except (LabError, ValueError) as e:
        print("%s: %s" % (argv[0], e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
