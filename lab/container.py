"""The container images' main processes and health checks (docker/*/Dockerfile):

    python3 -m lab.container mariadb|galera|haproxy|zookeeper|redis
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
(0.0.0.0), STACK_REDIS_PASSWORD (with it, the native Redis's ACL). A Galera node
(docker/galera.yml): STOCKD_GALERA_NODE (1..3), STOCKD_GALERA_NODES (the three nodes'
service names, comma-separated), STOCKD_MYSQL_PASSWORD and STOCKD_GALERA_CHECK_PASSWORD
(the health check user's; both on node 1's first start). HAProxy: STOCKD_GALERA_NODES,
STOCKD_GALERA_CHECK_PASSWORD, STOCKD_MYSQL_PORT (3306)."""

import os
import pwd
import shutil
import socket
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

def mariadb_init(run, osuser, password, name="mysql", extra_sql=""):
    """The first start: the system tables, then the server with networking off, the
    schema and the seed in `shop`, the service user stockd@'%' with PASSWORD and the
    native stack's narrow grants, root kept to the socket's root@localhost, EXTRA_SQL
    (a Galera node's check user); then the server stopped. It all happens in RUN/init
    and is moved into place (RUN/NAME/data) only when complete, so a start interrupted
    half-way begins again instead of serving a half-made database."""
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
           + extra_sql + "FLUSH PRIVILEGES; SHUTDOWN;\n")
    if server.wait() != 0:
        raise LabError("the server did not stop cleanly after the initialisation")
    os.makedirs(os.path.join(run, name), exist_ok=True)
    os.rename(os.path.join(db.dir, "data"), os.path.join(run, name, "data"))
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


# ---------------------------------------------------------------- Galera

GALERA_PORTS = (3306, 4567, 4568, 4444)  # sql, group, IST, SST: Galera's usual ports


def galera_nodes():
    nodes = [n for n in (os.environ.get("STOCKD_GALERA_NODES") or "").split(",") if n]
    if len(nodes) != 3:
        raise LabError("STOCKD_GALERA_NODES must name the three nodes (got %r)" % nodes)
    return nodes


def galera():
    """Node STOCKD_GALERA_NODE of the cluster STOCKD_GALERA_NODES, with the native
    stack's settings (lab/servers.py: GALERA_FLAGS, galera_flags) at the container's own
    address. Node 1's first start makes the database (as the standalone image's does,
    plus the check user) and bootstraps a new cluster; nodes 2 and 3 start empty and
    join it by SST. Later, a node whose grastate.dat says safe_to_bootstrap (it left
    last, cleanly: after a `down` of all three) bootstraps again; every other node
    joins the nodes that run. After a crash of all three, Galera's pc.recovery forms
    the cluster again once they all are back."""
    run = run_dir()
    osuser = pwd.getpwuid(os.getuid()).pw_name
    n = int(os.environ.get("STOCKD_GALERA_NODE") or 0)
    nodes = galera_nodes()
    if n not in (1, 2, 3):
        raise LabError("STOCKD_GALERA_NODE must be 1, 2 or 3")
    node = srv.GaleraNode(run, None, n)
    data = os.path.join(node.dir, "data")
    bootstrap = False
    if not os.path.isdir(os.path.join(data, "mysql")):
        if n == 1:
            password = os.environ.get("STOCKD_MYSQL_PASSWORD") or ""
            check = os.environ.get("STOCKD_GALERA_CHECK_PASSWORD") or ""
            if not password or not check:
                raise LabError("node 1's first start needs STOCKD_MYSQL_PASSWORD and "
                               "STOCKD_GALERA_CHECK_PASSWORD")
            log("stockd-galera: node 1, first start: making the database in %s" % run)
            mariadb_init(run, osuser, password, node.name, srv.galera_check_user_sql(check, "%"))
            bootstrap = True
        else:
            os.makedirs(os.path.join(node.dir, "tmp"), exist_ok=True)
            srv.mysql_install(node.dir, osuser)
    elif node.safe_to_bootstrap():
        bootstrap = True
    os.makedirs(os.path.join(node.dir, "tmp"), exist_ok=True)
    addr = socket.gethostbyname(nodes[n - 1])
    peers = ["%s:%d" % (h, GALERA_PORTS[1]) for h in nodes]
    argv = ["mariadbd", "--no-defaults", "--user=" + osuser, "--datadir=" + data,
            "--tmpdir=" + os.path.join(node.dir, "tmp"), "--socket=" + node.socket,
            "--pid-file=" + os.path.join(node.dir, "pid"), "--port=%d" % GALERA_PORTS[0],
            "--bind-address=0.0.0.0"] + srv.MYSQL_FLAGS + srv.galera_flags(
                n, addr, GALERA_PORTS, peers, listen="0.0.0.0")
    if bootstrap:
        log("stockd-galera: node %d bootstraps the cluster" % n)
        argv.append("--wsrep-new-cluster")
    os.execvp(argv[0], argv)


def haproxy():
    """HAProxy on STOCKD_MYSQL_PORT in front of the three nodes, with the native stack's
    configuration and health check (lab/servers.py's HAProxy, lab/galera_check.sh)."""
    password = os.environ.get("STOCKD_GALERA_CHECK_PASSWORD") or ""
    if not password:
        raise LabError("STOCKD_GALERA_CHECK_PASSWORD is empty: the health check logs in with it")
    nodes = ["%s:%d" % (h, GALERA_PORTS[0]) for h in galera_nodes()]
    hp = srv.HAProxy(run_dir(), int(os.environ.get("STOCKD_MYSQL_PORT") or 3306), nodes, password,
                     bind="0.0.0.0")
    hp.write_config()
    os.execvp("haproxy", ["haproxy", "-db", "-f", os.path.join(hp.dir, "haproxy.cfg")])


# ---------------------------------------------------------------- ZooKeeper

def zookeeper():
    """Standalone unless STOCKD_ZK_MYID is set: then a member of the ensemble
    STOCKD_ZK_SERVERS (docker-compose.yml: zk1..zk3, each given the same list and its
    own number). The data dir is under the run dir, a volume of the member's own in
    docker-compose.yml: the lock nodes are ephemeral, but the fence's tokens are zxids,
    which must outlive the container."""
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
    mains = {"mariadb": mariadb, "galera": galera, "haproxy": haproxy, "zookeeper": zookeeper,
             "redis": redis}
    try:
        if len(argv) == 1 and argv[0] in mains:
            mains[argv[0]]()
        elif len(argv) == 3 and argv[0] == "ready" and argv[1] in ("zookeeper", "redis"):
            return 0 if ready(argv[1], argv[2]) else 1
        print("usage: python3 -m lab.container mariadb|galera|haproxy|zookeeper|redis | "
              "ready zookeeper|redis PORT", file=sys.stderr)
        return 2
    except LabError as e:
        log("stockd-%s: %s" % (argv[0], e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
