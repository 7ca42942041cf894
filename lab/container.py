"""The container images' main processes and health checks (docker/*/Dockerfile):

    python3 -m lab.container mariadb|zookeeper|redis
    python3 -m lab.container ready zookeeper|redis PORT

Each makes its server's files with lab/servers.py's code, the native stack's, and
replaces itself with the server (exec), logging to stdout or stderr where the container
engine collects it. The differences from the native servers are only where they listen
(every interface of the container: the compose network) and who they run as.

Settings from the environment: STOCKD_RUN (/var/lib/stockd); MariaDB: STOCKD_MYSQL_PORT
(3306), STOCKD_MYSQL_BIND (0.0.0.0), STOCKD_MYSQL_PASSWORD (the service user's, needed
on the first start); ZooKeeper: STOCKD_ZK_PORT (2181), and for a member of an ensemble
STOCKD_ZK_MYID and STOCKD_ZK_SERVERS (a comma-separated HOST:QUORUM_PORT:ELECTION_PORT
list whose I-th entry is server I); Redis: STOCKD_REDIS_PORT (6379), STOCKD_REDIS_BIND
(0.0.0.0), STACK_REDIS_PASSWORD (with it, the native Redis's ACL)."""

import os
import pwd
import shutil
import subprocess
import sys
import time

from . import LabError
from . import proc
from . import servers as srv


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run_dir():
    return os.environ.get("STOCKD_RUN") or "/var/lib/stockd"


# ---------------------------------------------------------------- MariaDB

def mariadb_init(run, osuser, password):
    """The first start: the system tables, then the server with networking off, the
    schema and the seed in `shop`, the service user stockd@'%' with PASSWORD and the
    native stack's narrow grants, root kept to the socket's root@localhost; then the
    server stopped. It all happens in RUN/init and is moved into place only when
    complete, so a start interrupted half-way begins again instead of serving a
    half-made database."""
    tmp = os.path.join(run, "init")
    shutil.rmtree(tmp, ignore_errors=True)
    db = srv.MariaDB(tmp)
    os.makedirs(db.dir)
    srv.mysql_install(db.dir, osuser)
    server = subprocess.Popen(["mariadbd", "--no-defaults", "--user=" + osuser,
                               "--datadir=" + os.path.join(db.dir, "data"),
                               "--socket=" + db.socket, "--pid-file=" + db.pidfile,
                               "--skip-networking"] + srv.MYSQL_FLAGS + ["--log-error=" + db.log])
    deadline = time.monotonic() + 60
    while not db.answers():
        if server.poll() is not None or time.monotonic() > deadline:
            raise LabError("the server did not start:\n%s" % proc.tail(db.log, 5))
        time.sleep(0.2)
    db.create_db("shop", "stockd", password, hosts=["%"])
    # install-db also makes root@127.0.0.1 and root@::1 without a password; only the
    # socket's root@localhost stays.
    db.sql("DROP USER IF EXISTS 'root'@'127.0.0.1', 'root'@'::1';\n"
           "DELETE FROM mysql.global_priv WHERE User = 'root' AND Host <> 'localhost';\n"
           "DELETE FROM mysql.proxies_priv WHERE User = 'root' AND Host <> 'localhost';\n"
           "FLUSH PRIVILEGES; SHUTDOWN;\n")
    if server.wait() != 0:
        raise LabError("the server did not stop cleanly after the initialisation")
    os.makedirs(os.path.join(run, "mysql"), exist_ok=True)
    os.rename(os.path.join(db.dir, "data"), os.path.join(run, "mysql", "data"))
    shutil.rmtree(tmp)


def mariadb():
    run = run_dir()
    osuser = pwd.getpwuid(os.getuid()).pw_name
    d = os.path.join(run, "mysql")
    if not os.path.isdir(os.path.join(d, "data", "mysql")):
        password = os.environ.get("STOCKD_MYSQL_PASSWORD") or ""
        if not password:
            raise LabError("STOCKD_MYSQL_PASSWORD is empty: the stockd service user needs a "
                           "password")
        log("stockd-mariadb: first start, making the database in %s" % run)
        mariadb_init(run, osuser, password)
    os.execvp("mariadbd", ["mariadbd", "--no-defaults", "--user=" + osuser,
                           "--datadir=" + os.path.join(d, "data"),
                           "--socket=" + os.path.join(d, "sock"),
                           "--pid-file=" + os.path.join(d, "pid"),
                           "--port=" + (os.environ.get("STOCKD_MYSQL_PORT") or "3306"),
                           "--bind-address=" + (os.environ.get("STOCKD_MYSQL_BIND") or "0.0.0.0")]
              + srv.MYSQL_FLAGS)


# ---------------------------------------------------------------- ZooKeeper

def zookeeper():
    """Standalone unless STOCKD_ZK_MYID is set: then a member of the ensemble
    STOCKD_ZK_SERVERS (docker-compose.yml: zk1..zk3, each given the same list and its
    own number). Lock nodes are ephemeral, so the data lives in the container only."""
    d = os.path.join(run_dir(), "zk")
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    srv.zk_write_cfg(d, int(os.environ.get("STOCKD_ZK_PORT") or 2181), "0.0.0.0")
    myid = os.environ.get("STOCKD_ZK_MYID")
    if myid:
        servers = [s for s in (os.environ.get("STOCKD_ZK_SERVERS") or "").split(",") if s]
        if not servers:
            raise LabError("STOCKD_ZK_MYID is set but STOCKD_ZK_SERVERS is not")
        srv.zk_ensemble_cfg(d, myid, servers)
        # A member's own entry names its service, which resolves to the container's
        # address on the compose network; listening on every interface for the quorum
        # and election ports as well keeps it reachable whatever that name resolves to.
        with open(os.path.join(d, "zoo.cfg"), "a") as f:
            f.write("quorumListenOnAllIPs=true\n")
    srv.zk_log4j(d, console=True)
    argv = srv.zk_argv(d)
    os.execvp(argv[0], argv)


# ---------------------------------------------------------------- Redis

def redis():
    """With STACK_REDIS_PASSWORD, the native Redis's ACL: the default user off, so
    protected mode stays on and never refuses our user; without one it serves loopback
    only. No port is published (docker-compose.yml): only the containers of the same
    compose network reach it."""
    d = os.path.join(run_dir(), "redis")
    os.makedirs(d, exist_ok=True)
    password = os.environ.get("STACK_REDIS_PASSWORD")
    argv = ["redis-server"] + ([srv.redis_auth_conf(d, password)] if password else [])
    argv += ["--port", os.environ.get("STOCKD_REDIS_PORT") or "6379",
             "--bind", os.environ.get("STOCKD_REDIS_BIND") or "0.0.0.0",
             "--protected-mode", "yes"] + srv.REDIS_FLAGS + ["--dir", d]
    os.execvp(argv[0], argv)


def ready(kind, port):
    """The health checks: ZooKeeper serves requests (srvr names a mode, which a member
    of an ensemble does only within a quorum); Redis answers PONG (as the ACL user with
    STACK_REDIS_PASSWORD)."""
    if kind == "zookeeper":
        return srv.zk_mode(int(port)) is not None
    password = os.environ.get("STACK_REDIS_PASSWORD") or None
    return srv.redis_ping(int(port), srv.redis_user() if password else None, password)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    mains = {"mariadb": mariadb, "zookeeper": zookeeper, "redis": redis}
    try:
        if len(argv) == 1 and argv[0] in mains:
            mains[argv[0]]()
        elif len(argv) == 3 and argv[0] == "ready" and argv[1] in ("zookeeper", "redis"):
            return 0 if ready(argv[1], argv[2]) else 1
        print("usage: python3 -m lab.container mariadb|zookeeper|redis | "
              "ready zookeeper|redis PORT", file=sys.stderr)
        return 2
    except LabError as e:
        log("stockd-%s: %s" % (argv[0], e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
