"""scripts/stack's command line: one argparse parser per command on lab.stack.

Usage errors exit 2 with a message that names the option and points at the command's
--help, before anything is installed, built or started; errors of the stack exit 1.
"""

import argparse
import json
import os
import re
import sys

from . import LabError
from . import nginx
from . import ports
from .stack import Stack, export_lines

MAIN_HELP = """usage: scripts/stack COMMAND [ARGS...]

The local stack on loopback: a private MariaDB, a standalone ZooKeeper (or a
three-server ensemble), a Redis (for --lock redis; with --redis-sentinel a replica
and a redis-sentinel too), three more Redis servers for --lock redlock, an etcd (for
--lock etcd), N stockd instances, nginx round-robin over them and Prometheus scraping
them (rules: monitoring/stockd-rules.yml), all under one run directory.

commands:
  up [--instances N] [--lock MODE] [--zk-ensemble] [--redis-sentinel]
     [--route round-robin|affinity|owner] [--affinity] [--rate-limit RATE[:BURST]]
     [--galera 3 [--multi-writer]] [-- STOCKD ARGS...]
                     install missing packages, build, start everything (idempotent)
  down               stop everything (idempotent)
  status             what runs where; exit 0 only if everything answers
  restart-stockd [--instances N] [--lock MODE] [--route R] [--affinity]
     [--rate-limit RATE[:BURST]|off] [-- STOCKD ARGS...]
                     restart only stockd (e.g. in another lock mode) and re-point nginx
  kill-stockd I [--restart]
                     kill -9 instance I (a crash), and with --restart start it again
  env                shell `export` lines for scripts: eval "$(scripts/stack env)"
  mysql [--node K] [ARGS...]
                     the mariadb client as root on the stack's database `shop` (on
                     the writer, or on Galera node K)
  restock N K        add K units to product N through the API (POST /stock/restock
                     with the stack's admin token, $STACK_RUN/admin-token)

`scripts/stack COMMAND --help` describes each command.

environment:
  STACK_RUN          run directory (default <repo>/.run): data, logs, pids, state
                     (stack.json)
  STACK_PORT_BASE    first port (default %(base)d); the offsets are lab/ports.json's:
                     MariaDB +%(mysql)d, nginx +%(nginx)d, ZooKeeper +%(zk)d, Redis +%(redis)d, Prometheus +%(prometheus)d,
                     stockd instance i at +%(stockd)d+i, RedLock's servers +%(redlock)d..+%(redlock2)d, the
                     replica +%(redis_replica)d and the Sentinel +%(sentinel)d, etcd +%(etcd)d (peer +%(etcd_peer)d;
                     mode etcd only); with --zk-ensemble the ZooKeeper servers at
                     +%(zk_ensemble)d..+%(zk_ensemble2)d (quorum +%(q1)d..+%(q2)d, election +%(e1)d..+%(e2)d);
                     with --galera 3 the nodes' SQL ports +%(galera)d..+%(galera2)d (group, IST
                     and SST the next nine) and HAProxy on MariaDB's port
  STACK_ZK_PORT      ZooKeeper's port; with --zk-ensemble the first of its nine
  STACK_MYSQL_PORT, STACK_REDIS_PORT, STACK_NGINX_PORT, STACK_PROMETHEUS_PORT,
  STACK_REDIS_REPLICA_PORT, STACK_SENTINEL_PORT, STACK_ETCD_PORT
                     override one port
  STACK_REDLOCK_PORT the first of RedLock's three consecutive ports
  STACK_PROMETHEUS_INTERVAL
                     Prometheus's scrape and rule evaluation interval (default 5s)
  STACK_BUILD        build directory (default <repo>/build)
  STOCKD_BIN         use this stockd binary instead of building one
""" % dict(ports.OFFSETS, base=ports.BASES["stack"], redlock2=ports.OFFSETS["redlock"] + 2,
           etcd_peer=ports.OFFSETS["etcd"] - 1, zk_ensemble2=ports.OFFSETS["zk_ensemble"] + 2,
           q1=ports.OFFSETS["zk_ensemble"] + 3, q2=ports.OFFSETS["zk_ensemble"] + 5,
           e1=ports.OFFSETS["zk_ensemble"] + 6, galera2=ports.OFFSETS["galera"] + 2, e2=ports.OFFSETS["zk_ensemble"] + 8)

UP_DESC = """Installs missing Debian packages (scripts/deps demo, plus etcd or sentinel when
asked for), builds stockd if it is missing or older than a source file, then starts
what is not running yet:
  - MariaDB with database `shop` (schema + seed on the first `up` only; later runs keep
    the data) and a service user `stockd` with only the grants a deduction needs; its
    password is generated once into $STACK_RUN/mysql-password
  - with --galera 3, instead of that MariaDB a three-node MariaDB Galera cluster (node 1
    bootstraps it, the others join by state transfer) and HAProxy on the MariaDB port
    sending every connection to the first synced node, the others as backups
    (docs/galera.md); with --multi-writer instance I connects to node ((I-1) mod 3)+1
    directly instead, for the multi-writer experiment
  - a standalone ZooKeeper, or with --zk-ensemble a three-server ensemble; every stockd
    is given all three servers
  - a Redis whose default user is off: user stockd, with a password generated once into
    $STACK_RUN/redis-password, may run only the lock's commands on the lock keys
  - with --redis-sentinel, a replica of that Redis and one redis-sentinel (quorum 1,
    master name `stockd`) that promotes the replica when the primary is down for 1 s;
    after a failover, `stack restart-stockd` gives stockd the primary Sentinel names
  - with --lock redlock, three more independent Redis servers
  - with --lock etcd, a one-member etcd (data in $STACK_RUN/etcd, fsync on)
  - N stockd instances (default 3) with lock MODE (default none; stockd --help lists
    the modes), each given the passwords through its environment
  - nginx round-robin over the instances, or with --route affinity by product id; with
    --route owner round-robin too, and every stockd started with --route owner (its
    --announce address, the peers' shared secret $STACK_RUN/peer.secret, and --peers in
    the modes that have no ZooKeeper lock), each product's owner printed at the end; with
    --rate-limit RATE[:BURST] a per-product limit_req in front of the deductions
  - Prometheus scraping every instance's /metrics, with monitoring/stockd-rules.yml
Running instances are kept if N, MODE, the extra args, the binary and the kind of
ZooKeeper are unchanged; otherwise they are restarted. Extra args after `--` go to
every stockd instance. It ends with the status table and the line
`live page: http://127.0.0.1:PORT/live/` (nginx's port)."""

DESCS = {
    "down": "Stops Prometheus, nginx, the stockd instances, ZooKeeper, the Redis servers (and\n"
            "the Sentinel), etcd and MariaDB of the stack under $STACK_RUN. The data and the\n"
            "passwords stay. Does nothing if nothing runs.",
    "status": "Prints one line per component: name, pid, port and whether it is up (MariaDB\n"
              "answers a query, ZooKeeper `srvr`, Redis PING, stockd /health with 200, nginx\n"
              "/nginx-health, Prometheus /-/ready); for an ensemble one line per server and one\n"
              "with each server's mode. Exits 0 if all are up, 1 otherwise.",
    "restart-stockd": "Stops every stockd instance, starts N new ones in lock MODE and reloads nginx\n"
                      "for the new instance list, route and rate limit (Prometheus follows it).\n"
                      "N, MODE, the route, the rate limit and the extra args default to those of\n"
                      "the running stack (--rate-limit off removes the limit).",
    "kill-stockd": "Kills stockd instance I with SIGKILL (a crash) and leaves nginx as it is;\n"
                   "with --restart the instance is started again with the stack's settings.",
    "env": "Prints `export` lines describing the stack, for eval \"$(scripts/stack env)\":\n"
           "  STACK_RUN, NGINX_URL, MYSQL_URL, STOCKD_MYSQL_PASSWORD, STOCKD_REDIS_USER,\n"
           "  STOCKD_REDIS_PASSWORD, ZK, REDIS, REDLOCK, SENTINEL, ETCD, MYSQL_PORT,\n"
           "  STACK_MYSQL_PORT, STACK_GALERA_PORTS (the Galera nodes' SQL ports),\n"
           "  MYSQL_SOCKET, STACK_INSTANCES, STACK_LOCK, STACK_ROUTE, STACK_RATE_LIMIT,\n"
           "  STOCKD_PORTS, STOCKD_URLS, STOCKD_BIN, PROMETHEUS_URL, ADMIN_TOKEN_FILE",
    "mysql": "usage: scripts/stack mysql [--node K] [MARIADB CLIENT ARGS...]\n\n"
             "Runs the mariadb client as root over the stack's private socket, on database\n"
             "`shop` (with --galera: on the node HAProxy sends writes to; --node K: on Galera\n"
             "node K, 1..3). Examples:\n"
             "  scripts/stack mysql -e 'SELECT id, stock FROM product'\n"
             "  scripts/stack mysql < sql/seed.sql",
    "restock": "Adds K units to product N through stockd's API, as an operator should (no\n"
               "UPDATE behind the service's back; docs/orders.md): POST /stock/restock?id=N&units=K\n"
               "through nginx, with the admin token the stack made ($STACK_RUN/admin-token, 0600,\n"
               "given to every stockd as --admin-token-file). Prints stockd's answer; exits 0 on\n"
               "`restocked`, 1 otherwise.",
}


class UsageError(Exception):
    def __init__(self, msg, cmd):
        super().__init__(msg)
        self.cmd = cmd


class Parser(argparse.ArgumentParser):
    """argparse with the stack's messages: each names the option or argument at fault."""

    def error(self, message):
        cmd = self.prog.split()[-1]
        m = re.match(r"argument (\S+?)(?:/\S+)?: expected one argument", message)
        if m:
            raise UsageError("%s needs a value" % m.group(1), cmd)
        m = re.match(r"unrecognized arguments: (\S+)", message)
        if m:
            raise UsageError("unknown argument '%s'" % m.group(1), cmd)
        raise UsageError(message, cmd)


def _instances(cmd):
    def f(text):
        if not re.fullmatch(r"[1-9][0-9]{0,2}", text) or not 1 <= int(text) <= 64:
            raise UsageError("--instances must be a number in 1..64, got '%s'" % text, cmd)
        return int(text)
    return f


def _lock(cmd):
    def f(text):
        # stockd owns the list of modes; only what can never be one is refused here.
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,31}", text):
            raise UsageError("--lock: not a lock mode: '%s'" % text, cmd)
        return text
    return f


def _route(cmd):
    def f(text):
        if text not in nginx.ROUTES:
            raise UsageError("--route must be round-robin, affinity or owner, got '%s'" % text, cmd)
        return text
    return f


def _rate_limit(cmd):
    def f(text):
        if (text == "off" and cmd == "restart-stockd") or nginx.rate_limit_ok(text):
            return text
        raise UsageError("--rate-limit wants RATE[:BURST] (e.g. 100:20, 600r/m:10), got '%s'" % text, cmd)
    return f


def _galera(cmd):
    def f(text):
        if text != "3":
            raise UsageError("--galera: only a three-node cluster is supported, got '%s'" % text, cmd)
        return 3
    return f


def parser_for(cmd):
    """The parser of one command (up, restart-stockd, kill-stockd, down, status, env)."""
    desc = UP_DESC if cmd == "up" else DESCS.get(cmd, "")
    p = Parser(prog="scripts/stack " + cmd, description=desc, add_help=True,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    if cmd in ("up", "restart-stockd"):
        p.add_argument("--instances", type=_instances(cmd), metavar="N",
                       help="stockd instances, 1..64 (up: default 3)")
        p.add_argument("--lock", type=_lock(cmd), metavar="MODE", help="stockd's lock mode (up: default none)")
        p.add_argument("--route", type=_route(cmd), metavar="R",
                       help="round-robin (default), affinity, or owner (nginx round-robin; each "
                       "stockd forwards a deduction to its product's owner: docs/routing.md)")
        p.add_argument("--affinity", dest="route", action="store_const", const="affinity",
                       help="the same as --route affinity")
        p.add_argument("--rate-limit", type=_rate_limit(cmd), metavar="RATE[:BURST]",
                       help="a per-product limit in front of the deductions"
                       + (" (off: none)" if cmd == "restart-stockd" else ""))
    if cmd == "up":
        p.add_argument("--zk-ensemble", action="store_true", help="ZooKeeper as a three-server ensemble")
        p.add_argument("--redis-sentinel", action="store_true", help="a Redis replica and a Sentinel too")
        p.add_argument("--galera", type=_galera(cmd), metavar="3", default=0,
                       help="the stock table on a three-node MariaDB Galera cluster behind HAProxy")
        p.add_argument("--multi-writer", action="store_true",
                       help="with --galera: each instance on a node of its own, no proxy (the "
                            "experiment of docs/galera.md, not a setup to run)")
    if cmd == "kill-stockd":
        p.add_argument("instance", nargs="?", metavar="I", help="the instance, 1..N")
        p.add_argument("--restart", action="store_true", help="start it again")
    if cmd == "restock":
        p.add_argument("product", type=_count(cmd, "N"), metavar="N", help="the product id")
        p.add_argument("units", type=_count(cmd, "K"), metavar="K", help="units to add, 1..9999999")
    return p


def _count(cmd, name):
    def f(text):
        if not re.fullmatch(r"[1-9][0-9]{0,6}", text):
            raise UsageError("%s must be a number in 1..9999999, got '%s'" % (name, text), cmd)
        return int(text)
    return f


def parse(cmd, args):
    """Parses ARGS of CMD; returns (namespace, stockd args after `--` or None)."""
    extra = None
    if cmd in ("up", "restart-stockd") and "--" in args:
        k = args.index("--")
        args, extra = args[:k], args[k + 1:]
    p = parser_for(cmd)
    ns, rest = p.parse_known_args(args)
    if rest:
        word = "unknown argument" if cmd in ("up", "restart-stockd") else "unexpected argument"
        raise UsageError("%s '%s'" % (word, rest[0]), cmd)
    if cmd == "up" and ns.multi_writer and not ns.galera:
        raise UsageError("--multi-writer needs --galera 3", cmd)
    if cmd == "kill-stockd":
        if ns.instance is None:
            raise UsageError("which instance? (1..N)", cmd)
        if not re.fullmatch(r"[1-9][0-9]{0,2}", ns.instance):
            raise UsageError("unexpected argument '%s'" % ns.instance, cmd)
        ns.instance = int(ns.instance)
    return ns, extra


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        sys.stderr.write(MAIN_HELP)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd in ("-h", "--help", "help"):
        sys.stdout.write(MAIN_HELP)
        return 0
    try:
        if cmd == "mysql":
            if args[:1] in (["-h"], ["--help"]):
                print(DESCS["mysql"])
                return 0
            node = None
            if args[:1] == ["--node"]:
                if len(args) < 2 or args[1] not in ("1", "2", "3"):
                    raise UsageError("--node wants a Galera node, 1..3", "mysql")
                node, args = int(args[1]), args[2:]
            argv2 = Stack().mysql_argv(args, node)
            sys.stdout.flush()
            os.execvp(argv2[0], argv2)
        if cmd not in ("up", "down", "status", "restart-stockd", "kill-stockd", "env", "restock"):
            sys.stderr.write("stack: unknown command '%s'\n" % cmd + MAIN_HELP)
            return 2
        ns, extra = parse(cmd, args)
        stack = Stack()
        if cmd == "up":
            stack.up(ns.instances, ns.lock, extra or [], ns.zk_ensemble, ns.redis_sentinel,
                     ns.route, ns.rate_limit or "", galera=ns.galera,
                     multi_writer=ns.multi_writer)
        elif cmd == "restart-stockd":
            stack.restart_stockd(ns.instances, ns.lock, extra, ns.route, ns.rate_limit)
        elif cmd == "kill-stockd":
            stack.kill_stockd(ns.instance, ns.restart)
        elif cmd == "down":
            stack.down()
        elif cmd == "status":
            return 0 if stack.status(sys.stdout) else 1
        elif cmd == "env":
            sys.stdout.write(export_lines(stack.env()))
        elif cmd == "restock":
            status, doc = stack.restock(ns.product, ns.units)
            print(json.dumps(doc, sort_keys=True) if doc else "HTTP %d" % status)
            return 0 if status == 200 and doc.get("result") == "restocked" else 1
        return 0
    except UsageError as e:
        print("stack: %s (see: stack %s --help)" % (e, e.cmd), file=sys.stderr)
        return 2
    except LabError as e:
        print("stack: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
