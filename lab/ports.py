"""The port layout, from lab/ports.json (which tests/CMakeLists.txt reads too).

Every port of a stack is an offset from one base, and each tool that starts a stack of
its own has its default base there (BASES). Instance i (1-based) of stockd
listens on base + stockd + i. etcd's peer port is the one below its client port. A
ZooKeeper ensemble takes nine ports from its first: clients +0..+2, quorum +3..+5,
leader election +6..+8. A Galera cluster (--galera 3) takes twelve from its first: the
nodes' SQL ports +0..+2, group communication +3..+5, IST +6..+8, SST +9..+11; HAProxy's
writer port is then the mysql port. A single port may be overridden (the integration tests squeeze
a stack into their 20 ports that way).
"""

import json
import os
import re

from . import LabError

_HERE = os.path.dirname(os.path.abspath(__file__))
_JSON = json.load(open(os.path.join(_HERE, "ports.json")))
OFFSETS = {k: v for k, v in _JSON.items() if isinstance(v, int)}
# Each tool's default base: scripts/stack, the load tools, the nemesis and the tests.
BASES = _JSON["bases"]

# The environment variables that override one port each (scripts/stack).
OVERRIDES = {
    "mysql": "STACK_MYSQL_PORT",
    "zk": "STACK_ZK_PORT",
    "redis": "STACK_REDIS_PORT",
    "nginx": "STACK_NGINX_PORT",
    "prometheus": "STACK_PROMETHEUS_PORT",
    "redlock": "STACK_REDLOCK_PORT",
    "redis_replica": "STACK_REDIS_REPLICA_PORT",
    "sentinel": "STACK_SENTINEL_PORT",
    "etcd": "STACK_ETCD_PORT",
}


def check_base(text):
    """Returns the base as an int, or raises LabError naming STACK_PORT_BASE."""
    if not re.fullmatch(r"[1-9][0-9]{3,4}", text or "") or not 1024 <= int(text) <= 65400:
        raise LabError("STACK_PORT_BASE must be a number in 1024..65400, got '%s'" % text)
    return int(text)


def layout(base, ensemble=False, env=None):
    """The ports of a stack on BASE: a dict of mysql, zk, redis, nginx, prometheus,
    redlock (the first of three), redis_replica, sentinel and etcd. With ENSEMBLE the
    zk port is the ensemble's first. ENV (default os.environ) may override each one."""
    env = os.environ if env is None else env
    ports = {k: base + OFFSETS[k] for k in OVERRIDES}
    if ensemble:
        ports["zk"] = base + OFFSETS["zk_ensemble"]
    for key, var in OVERRIDES.items():
        text = env.get(var)
        if text is None or text == "":
            continue
        if not re.fullmatch(r"[1-9][0-9]{0,4}", text) or int(text) > 65535:
            raise LabError("not a port: %s" % text)
        ports[key] = int(text)
    if ensemble and ports["zk"] + 8 > 65535:
        raise LabError("the ZooKeeper ensemble needs the nine ports from %d: too high" % ports["zk"])
    return ports


def stockd_port(base, i):
    """The port of stockd instance I (1-based) of a stack on BASE."""
    return base + OFFSETS["stockd"] + i


def galera_ports(first):
    """(sql, group, ist, sst) ports of Galera nodes 1..3, from FIRST."""
    return [(first + n, first + n + 3, first + n + 6, first + n + 9) for n in range(3)]


def zk_ensemble_ports(first):
    """(client, quorum, election) ports of ensemble members 1..3, from FIRST."""
    return [(first + n, first + n + 3, first + n + 6) for n in range(3)]


def tests(base):
    """The tests' layout (tests/CMakeLists.txt computes the same from ports.json)."""
    return {
        "mysql": base + OFFSETS["mysql"],
        "zk": base + OFFSETS["zk"],
        "redis": base + OFFSETS["redis"],
        "redlock": [base + OFFSETS["redlock"] + i for i in range(3)],
        "etcd": base + OFFSETS["etcd"],
    }


def all_ports(st):
    """Every port the stack described by state ST listens on, with a name each, for
    the overlap check: a list of (name, port)."""
    out = [("HAProxy" if st.get("galera") else "MariaDB", st["mysql_port"]), ("Redis", st["redis_port"]),
           ("nginx", st["nginx_port"]), ("Prometheus", st["prometheus_port"])]
    if st["lock"] == "etcd":
        out += [("etcd", st["etcd_port"]), ("etcd peer", st["etcd_port"] - 1)]
    if st.get("galera"):
        for n, ports in enumerate(galera_ports(st["galera_port"]), 1):
            out += [("galera%d" % n, p) for p in ports]
    if st["zk_ensemble"]:
        for n, ports in enumerate(zk_ensemble_ports(st["zk_port"]), 1):
            out += [("zk%d" % n, p) for p in ports]
    else:
        out.append(("ZooKeeper", st["zk_port"]))
    if st["lock"] == "redlock":
        out += [("redlock%d" % (i + 1), st["redlock_port"] + i) for i in range(3)]
    if st["redis_sentinel"]:
        out += [("Redis replica", st["redis_replica_port"]), ("Sentinel", st["sentinel_port"])]
    out += [("stockd-%d" % i, stockd_port(st["base"], i)) for i in range(1, st["instances"] + 1)]
    return out


def check_distinct(st):
    """Raises LabError if two of the stack's ports are the same or one is out of range."""
    seen = {}
    for name, port in all_ports(st):
        if not 1 <= port <= 65535:
            raise LabError("port %d (%s) is out of range" % (port, name))
        if port in seen:
            raise LabError("ports overlap: %s and %s both on %d; use fewer instances or other ports"
                           % (seen[port], name, port))
        seen[port] = name


if __name__ == "__main__":
    # `python3 lab/ports.py` prints the offsets as NAME=OFFSET lines (for a shell).
    for k, v in sorted(OFFSETS.items()):
        print("%s=%d" % (k, v))
