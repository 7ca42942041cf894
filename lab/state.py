"""The state file of a stack: what the last `up` or `restart-stockd` asked for, as
JSON data (never code), so that status, env, down and the other commands need no
arguments. Written whole and renamed into place."""

import json
import os

# The fields and their defaults; a file lacking one (an older version's) gets it.
DEFAULTS = {
    "base": None, "mysql_port": None, "zk_port": None, "redis_port": None,
    "nginx_port": None, "prometheus_port": None, "redlock_port": None,
    "redis_replica_port": None, "sentinel_port": None, "etcd_port": None,
    "instances": 3, "lock": "none", "bin": "", "zk_ensemble": False,
    "redis_sentinel": False, "galera": 0, "galera_port": None, "multi_writer": False, "route": "round-robin", "rate_limit": "", "extra": [],
}


def path(run):
    return os.path.join(run, "stack.json")


def load(run):
    """The state of the stack under RUN as a dict, or None if there is none (or it is
    not a JSON object, e.g. cut short)."""
    try:
        with open(path(run)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    st = dict(DEFAULTS)
    st.update({k: v for k, v in data.items() if k in DEFAULTS})
    return st


def save(run, st):
    """Writes ST (only the known fields) under RUN."""
    tmp = path(run) + ".tmp"
    with open(tmp, "w") as f:
        json.dump({k: st.get(k, DEFAULTS[k]) for k in DEFAULTS}, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path(run))
