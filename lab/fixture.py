"""The tests' `servers` ctest fixture: `python3 -m lab.fixture up|down` starts or stops
the private MariaDB, ZooKeeper, Redis and etcd that the integration tests share (and
mode redlock's three more Redis servers), once per ctest run: the backing servers of
lab/backing.py, as the stack's are. Each test starts its own stockd against them
(t_stockd in tests/lib.sh).
`down` also stops whatever a failed or timed-out test left running under the run
directory. tests/CMakeLists.txt passes the run directory and the ports in
STOCKD_TEST_* variables (computed from lab/ports.json)."""

import glob
import os
import sys

from . import LabError
from . import proc
from . import servers as srv
from .backing import Backing


def _port(addr):
    return int(addr.rsplit(":", 1)[1])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv not in (["up"], ["down"]):
        print("usage: python3 -m lab.fixture up|down", file=sys.stderr)
        return 2
    env = os.environ
    run = env["STOCKD_TEST_RUN"]
    redlock = [_port(a) for a in env.get("STOCKD_TEST_REDLOCK", "").split(",") if a]
    try:
        if argv == ["up"]:
            os.makedirs(run, exist_ok=True)
            Backing(run, {"mysql": int(env["STOCKD_TEST_MYSQL_PORT"]),
                          "zk": _port(env["STOCKD_TEST_ZK"]), "redis": _port(env["STOCKD_TEST_REDIS"]),
                          "redlock": redlock, "etcd": _port(env["STOCKD_TEST_ETCD"])}
                    ).start(redlock=bool(redlock), etcd=True)
            print("servers: mysql on %s, zookeeper on %s, redis on %s, redlock on %s, etcd on %s, under %s"
                  % (env["STOCKD_TEST_MYSQL_PORT"], env["STOCKD_TEST_ZK"], env["STOCKD_TEST_REDIS"],
                     env.get("STOCKD_TEST_REDLOCK", ""), env["STOCKD_TEST_ETCD"], run))
        else:
            # Tests stop what they start; this catches what a failed one left.
            for f in glob.glob(os.path.join(run, "t", "*", "stockd", "*.pid")):
                proc.stop_pidfile(f, 5)
            for d in glob.glob(os.path.join(run, "t", "*", "nginx")):
                srv.Nginx(os.path.dirname(d)).stop()
            for f in glob.glob(os.path.join(run, "t", "*", "*", "pid")):
                proc.stop_pidfile(f, 10)
            Backing(run).stop()
            print("servers: stopped")
    except LabError as e:
        print("servers: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
