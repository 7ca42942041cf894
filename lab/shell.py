"""The lab library for shell scripts: `python3 -m lab.shell FUNCTION ARGS...` runs one
start or stop function of lab/servers.py with the argument order of
scripts/stack-lib.sh, so that the shell helpers of the tests and the load tools start
their servers with the same code as scripts/stack (stack-lib.sh's functions of the
same names call this). Exit 0 on success, 1 with the reason on stderr, 2 on a wrong
call.

Settings that stack-lib.sh took from the environment still come from there:
STACK_REDIS_PASSWORD (and STACK_REDIS_USER) for Redis and Sentinel,
STACK_REDIS_REPLICATION=1 for a primary with the users replica and sentinel,
STACK_PROMETHEUS_INTERVAL, STACK_NGINX_ROUTE and STACK_NGINX_RATE_LIMIT.
"""

import os
import sys

from . import LabError
from . import servers as srv


def _pw():
    return os.environ.get("STACK_REDIS_PASSWORD") or None


def _redis_start(run, port, name="redis", master=""):
    srv.redis_start(run, int(port), name, _pw(), os.environ.get("STACK_REDIS_REPLICATION") == "1",
                    int(master) if master else None)


CALLS = {
    "mysql_start": lambda run, port: srv.mysql_start(run, int(port)),
    "mysql_stop": srv.mysql_stop,
    "zk_start": lambda run, port, name="zk": srv.zk_start(run, int(port), name),
    "zk_stop": lambda run, name="zk": srv.zk_stop(run, name),
    "zk_ensemble_start": lambda run, first: srv.zk_ensemble_start(run, int(first)),
    "zk_ensemble_start_one": lambda run, first, n, wait="wait": srv.zk_ensemble_start(
        run, int(first), [int(n)], wait != "nowait"),
    "zk_ensemble_stop": srv.zk_ensemble_stop,
    "redis_start": _redis_start,
    "redis_stop": lambda run, name="redis": srv.redis_stop(run, name),
    "sentinel_start": lambda run, port, master, name="sentinel": srv.sentinel_start(
        run, int(port), int(master), _pw(), name),
    "sentinel_stop": lambda run, name="sentinel": srv.sentinel_stop(run, name),
    "etcd_start": lambda run, port: srv.etcd_start(run, int(port)),
    "etcd_stop": srv.etcd_stop,
    "prometheus_start": lambda run, port: srv.prometheus_start(run, int(port)),
    "prometheus_stop": srv.prometheus_stop,
    "prometheus_targets": lambda run, *ports: srv.prometheus_targets(run, [int(p) for p in ports]),
    "stockd_stop_all": srv.stockd_stop_all,
    "nginx_start": lambda run, port, *ups: srv.nginx_start(
        run, int(port), [int(u) for u in ups], os.environ.get("STACK_NGINX_ROUTE") or "round-robin",
        os.environ.get("STACK_NGINX_RATE_LIMIT") or ""),
    "nginx_stop": srv.nginx_stop,
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in CALLS:
        print("usage: python3 -m lab.shell FUNCTION ARGS... (FUNCTION: %s)" % " ".join(sorted(CALLS)),
              file=sys.stderr)
        return 2
    try:
        CALLS[argv[0]](*argv[1:])
    except TypeError as e:
        print("lab.shell %s: %s" % (argv[0], e), file=sys.stderr)
        return 2
    except (LabError, ValueError) as e:
        print("%s: %s" % (argv[0], e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
