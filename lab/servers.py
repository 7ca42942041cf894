"""The real servers of the stack, one class each: MariaDB, ZooKeeper (standalone, or a
ZkEnsemble of three), Redis (and Sentinel), Etcd (or an EtcdCluster of three),
Prometheus, Stockd and Nginx. A server is an object built from its run directory and
its port (lab/ports.py's layout gives the ports), as PostgreSQL's PostgreSQL::Test::Cluster
and memcached's new_memcached hand a test a handle:

    db = MariaDB(run, 5306).start()     # returns once it answers a query
    db.create_db("shop", "stockd", pw)
    zk = ZkEnsemble(run, 5310).start()  # three members, once they serve
    zk.leader(), zk.hosts()
    db.stop(); zk.stop()

Every server lives in a directory of its own under one run directory RUN (RUN/mysql,
RUN/zk, RUN/zk1..3, RUN/redis, RUN/redlock1..3, RUN/etcd, RUN/prometheus, RUN/stockd,
RUN/nginx), listens on loopback on its port and writes its pid to RUN/NAME/pid (nginx:
RUN/nginx/nginx.pid, stockd: RUN/stockd/I.pid). Each has start, stop, ready and pid.
Starting a server that runs does nothing (a stockd is started again; nginx and
Prometheus reload). start returns once ready() is true for the process we started; it
raises LabError, naming the log, if that does not come. Stopping one that does not run
does nothing, so a server to stop needs only its run directory (and name).
"""

import hashlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
import urllib.error
import urllib.request

from . import LabError
from . import proc
from .ports import galera_ports, zk_ensemble_ports

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def await_ready(name, pidfile, port, check, seconds, log):
    """Waits until the process of PIDFILE listens on PORT and CHECK() is true. Raises
    LabError, naming LOG, as soon as the process ends (its port taken, a bad
    configuration) or when SECONDS pass. A pid file not written yet (nginx writes its
    own once it has forked) is waited for, not taken for an exit."""
    deadline = time.monotonic() + seconds
    while True:
        pid = proc.read_pid(pidfile)
        if pid is not None and not proc.pid_runs(pid):
            raise LabError("%s exited at start-up (is port %d taken?); see %s:\n%s"
                           % (name, port, log, proc.tail(log, 5)))
        try:
            if pid is not None and proc.listens(pid, port) and check():
                return
        except Exception:  # a server on its way up refuses in many ways
            pass
        if time.monotonic() >= deadline:
            raise LabError("%s did not answer on port %d within %d s; see %s"
                           % (name, port, seconds, log))
        time.sleep(0.1)


# ---------------------------------------------------------------- probes

def http_status(url, timeout=5):
    """The HTTP status of a GET of URL, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, ValueError):
        return None


def stockd_has_option(binary, option):
    """Whether the stockd at BINARY names OPTION in its --help (asked once per binary
    and build time): the stack passes a newer option only to a stockd that has it."""
    try:
        key = (binary, os.path.getmtime(binary))
    except OSError:
        return False
    if key not in _HELP:
        r = subprocess.run([binary, "--help"], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        _HELP[key] = r.stdout + r.stderr
    return option in _HELP[key]


_HELP = {}


def http_text(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode(errors="replace")
    except (OSError, ValueError):
        return ""


def zk_4lw(port, word, timeout=5):
    """ZooKeeper's answer to a four-letter word ('' if none)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while True:
                b = s.recv(4096)
                if not b:
                    break
                chunks.append(b)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def zk_mode(port):
    """leader, follower or standalone; None when the server does not serve."""
    m = re.search(r"^Mode: (\S+)", zk_4lw(port, "srvr"), re.M)
    return m.group(1) if m else None


def _resp_read(f):
    line = f.readline()
    if not line:
        raise OSError("connection closed")
    kind, rest = line[:1], line[1:].rstrip(b"\r\n")
    if kind in (b"+", b":"):
        return rest.decode()
    if kind == b"-":
        raise OSError(rest.decode())
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2].decode()
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_resp_read(f) for _ in range(n)]
    raise OSError("not a RESP reply")


def redis_cmd(port, *args, user=None, password=None, timeout=5):
    """Sends one command to the Redis (or Sentinel) on PORT, after AUTH USER PASSWORD
    when a password is given; returns the reply (raises OSError on an error reply)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        f = s.makefile("rb")
        cmds = ([("AUTH", user, password)] if password else []) + [args]
        for c in cmds:
            s.sendall(b"*%d\r\n" % len(c) + b"".join(
                b"$%d\r\n%s\r\n" % (len(str(a).encode()), str(a).encode()) for a in c))
        reply = None
        for _ in cmds:
            reply = _resp_read(f)
        return reply


def redis_ping(port, user=None, password=None):
    try:
        return redis_cmd(port, "PING", user=user, password=password) == "PONG"
    except OSError:
        return False



def etcd_healthy(port):
    return '"health":"true"' in http_text("http://127.0.0.1:%d/health" % port, 3)


def prometheus_ready(port):
    return http_status("http://127.0.0.1:%d/-/ready" % port) == 200


def sentinel_primary(port):
    """HOST:PORT of the primary the Sentinel on PORT names for master `stockd`, or None."""
    try:
        a = redis_cmd(port, "SENTINEL", "get-master-addr-by-name", "stockd")
    except (OSError, ValueError):
        return None
    if isinstance(a, list) and len(a) == 2 and str(a[1]).isdigit():
        return "%s:%s" % (a[0], a[1])
    return None


# ---------------------------------------------------------------- MariaDB's files

def mysql_install(d, osuser="root"):
    """Makes the system tables in D/data unless they are there. The server will run as
    OSUSER; root logs in over the socket with no password. The bootstrap's temporary
    tables go to D/tmp: in a shared /tmp they have been seen to vanish under it ("Error
    on delete of '/tmp/#sql-temptable-...'")."""
    os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
    if os.path.isdir(os.path.join(d, "data", "mysql")):
        return
    with open(os.path.join(d, "install.log"), "wb") as log:
        r = subprocess.run(["mariadb-install-db", "--no-defaults", "--user=" + osuser,
                            "--datadir=" + os.path.join(d, "data"),
                            "--tmpdir=" + os.path.join(d, "tmp"),
                            "--auth-root-authentication-method=normal", "--skip-test-db"],
                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise LabError("mysql: install-db failed, see %s/install.log:\n%s"
                       % (d, proc.tail(os.path.join(d, "install.log"), 5)))


def sql_quote(s):
    """S for the inside of a '...' SQL literal (backslashes and quotes escaped), so that
    a password chosen by a user cannot end the literal."""
    return s.replace("\\", "\\\\").replace("'", "\\'")


def service_user_sql(db, user, password, host):
    """USER@HOST with PASSWORD, allowed only what a deduction needs: read and update
    product (and its segments), read the stock view, read and add orders (and oversold
    promises: the order writer of mode redis-stock) and move an order's state (pay, cancel,
    expiry: state and released_at only), read and add restocks, and take and give back a
    lock row in stock_lock (db-lock: INSERT, and DELETE with a WHERE on the row, which
    needs SELECT)."""
    who = "'%s'@'%s'" % (user, host)
    pw = sql_quote(password)
    return ("CREATE USER IF NOT EXISTS %s IDENTIFIED BY '%s';\n"
            "ALTER USER %s IDENTIFIED BY '%s';\n" % (who, pw, who, pw)
            + "".join("GRANT %s ON `%s`.%s TO %s;\n" % (what, db, table, who) for what, table in (
                ("SELECT, UPDATE", "product"), ("SELECT, UPDATE", "product_segment"),
                ("SELECT", "product_stock"),
                ("SELECT, INSERT, UPDATE (state, released_at)", "orders"),
                ("SELECT, INSERT", "oversold_promise"), ("SELECT, INSERT", "restock"),
                ("SELECT, INSERT, DELETE, UPDATE (expires_at)", "stock_lock"))))


# ---------------------------------------------------------------- ZooKeeper's files

ZK_CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/*"


def zk_write_cfg(d, port, address="127.0.0.1"):
    """D/zoo.cfg, the configuration every ZooKeeper of ours uses, listening on ADDRESS
    (the container gives 0.0.0.0). tickTime 500 and a 1 s minimum session let tests
    expire sessions in about 2 s. (The container check interval is a JVM property, set
    by zk_argv: ZooKeeper ignores it here.)"""
    with open(os.path.join(d, "zoo.cfg"), "w") as f:
        f.write("tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s/data\nclientPort=%d\n"
                "clientPortAddress=%s\nadmin.enableServer=false\n4lw.commands.whitelist=*\n"
                "minSessionTimeout=1000\nmaxSessionTimeout=60000\nmaxClientCnxns=0\n"
                % (d, port, address))


def zk_ensemble_cfg(d, n, servers):
    """Makes the server of D (its zoo.cfg written by zk_write_cfg) member N of an
    ensemble: N in D/data/myid, and one server.I line per SERVER (HOST:QUORUM_PORT:
    ELECTION_PORT, the I-th is server I). Every member must be given the same list: the
    containers zk1..zk3 of docker-compose.yml and the native ZkEnsemble."""
    if not str(n).isdigit() or not 1 <= int(n) <= len(servers):
        raise LabError("zk: member number '%s' is not one of 1..%d" % (n, len(servers)))
    with open(os.path.join(d, "data", "myid"), "w") as f:
        f.write("%d\n" % int(n))
    with open(os.path.join(d, "zoo.cfg"), "a") as f:
        f.write("".join("server.%d=%s\n" % (i, s) for i, s in enumerate(servers, 1)))


def zk_log4j(d, console=False):
    """The server's logging, WARN and up, into D/zk.log (or to stdout, for a container)."""
    appender = ("org.apache.log4j.ConsoleAppender" if console else
                "org.apache.log4j.FileAppender\nlog4j.appender.F.File=${zookeeper.log.dir}/zk.log")
    with open(os.path.join(d, "log4j.properties"), "w") as f:
        f.write("log4j.rootLogger=WARN, F\nlog4j.appender.F=%s\n"
                "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
                "log4j.appender.F.layout.ConversionPattern=%%d %%p [%%t] %%c{1}: %%m%%n\n"
                % appender)


def zk_argv(d):
    """The JVM running the server of D/zoo.cfg (the native one and the container's)."""
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", ZK_CLASSPATH,
            "-Dzookeeper.log.dir=" + d, "-Dlog4j.configuration=file:%s/log4j.properties" % d,
            "-Dzookeeper.jmx.log4j.disable=true", "-Dznode.container.checkIntervalMs=1000",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain", os.path.join(d, "zoo.cfg")]


# ---------------------------------------------------------------- Redis's files

# With a password, the default user is off and one ACL user (redis_user(), stockd) may
# run only what lock/redislock.c sends: EVALSHA and SCRIPT LOAD of its two scripts, the
# commands those scripts call, SUBSCRIBE/UNSUBSCRIBE for waiting and PING for /health,
# on the keys lock:* and the channels lock:#released:* only; and for mode redis-stock, on
# the keys stockd:*, what db/stockredis.c's scripts and the stock watch send (SET XADD,
# XGROUP CREATE, XINFO, WAIT; EVAL of restock, pay, cancel and the expiry, whose scripts
# call HSET HGET HMGET HINCRBY INCRBY EXPIRE ZADD ZREM, and the expiry's ZRANGEBYSCORE)
# and what the order writer (writer/) reads and acknowledges
# the stream with (XREADGROUP XACK XAUTOCLAIM XPENDING XRANGE XLEN, SCAN for
# --reconcile), trims it with (XTRIM) and removes gone consumers with (XGROUP
# DELCONSUMER). With a Sentinel two more
# users with the same password: `replica` (a replica's masteruser) and `sentinel`, with
# the commands Redis's documentation lists for Sentinel. Neither may touch a key.
REDIS_ACL = ["-@all", "+evalsha", "+script|load", "+exists", "+pttl", "+time", "+incr", "+set",
             "+get", "+del", "+publish", "+subscribe", "+unsubscribe", "+ping", "+decr", "+xadd",
             "+xgroup|create", "+xinfo|groups", "+wait", "+xinfo|consumers", "+xreadgroup",
             "+xack", "+xautoclaim", "+xpending", "+xrange", "+xlen", "+scan", "+xtrim",
             "+xgroup|delconsumer", "+eval", "+hset", "+hget", "+hmget", "+hincrby", "+incrby",
             "+expire", "+zadd", "+zrem", "+zrangebyscore"]
REDIS_REPLICA_ACL = ["+psync", "+replconf", "+ping"]
REDIS_SENTINEL_ACL = ["allchannels", "+multi", "+exec", "+slaveof", "+replicaof", "+ping",
                      "+subscribe", "+config|rewrite", "+role", "+publish", "+info",
                      "+client|setname", "+client|kill", "+script|kill"]


def redis_auth_conf(d, password, replication=False, master=None):
    """Writes D/auth.conf (0600) for PASSWORD and returns its path. The password reaches
    the server as its SHA-256, never in argv; a replica's password to its primary
    (MASTER) is in this file too."""
    h = hashlib.sha256(password.encode()).hexdigest()
    text = "user default off\nuser %s reset on #%s ~lock:* ~stockd:* resetchannels &lock:#released:* %s\n" % (
        redis_user(), h, " ".join(REDIS_ACL))
    if replication:
        text += "user replica reset on #%s resetchannels -@all %s\n" % (h, " ".join(REDIS_REPLICA_ACL))
        text += "user sentinel reset on #%s -@all %s\n" % (h, " ".join(REDIS_SENTINEL_ACL))
    if master:
        text += 'masteruser replica\nmasterauth "%s"\n' % password
    path = os.path.join(d, "auth.conf")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


# ---------------------------------------------------------------- a server

class Server:
    """One server of ours under RUN/NAME on 127.0.0.1:PORT. A subclass says how it is
    launched (launch: spawn the process, its pid in pidfile) and when it is ready."""

    title = "server"  # its name in messages
    log_name = "server.log"  # its log, in its directory
    start_s = 20  # how long start waits for ready()
    stop_s = 20  # how long stop waits after SIGTERM before SIGKILL

    default_name = "server"

    def __init__(self, run, port=None, name=None):
        self.run = run
        self.port = port
        self.name = name or self.default_name
        self.dir = os.path.join(run, self.name)
        self.pidfile = os.path.join(self.dir, "pid")
        self.log = os.path.join(self.dir, self.log_name)

    @property
    def pid(self):
        """The pid of the running server, or None."""
        pid = proc.read_pid(self.pidfile)
        return pid if pid is not None and proc.pid_runs(pid) else None

    def running(self):
        return proc.pid_alive(self.pidfile)

    def ready(self):
        """True when the server serves (a query, srvr, PING, /health)."""
        raise NotImplementedError

    def up(self):
        """It runs and serves (what `scripts/stack status` calls up)."""
        return self.running() and self.ready()

    def start(self):
        """Starts it unless it runs; returns self once it is ready."""
        if self.running():
            return self
        os.makedirs(self.dir, exist_ok=True)
        self.launch()
        self.await_ready()
        return self

    def await_ready(self):
        await_ready(self.title, self.pidfile, self.port, self.ready, self.start_s, self.log)

    def launch(self):
        raise NotImplementedError

    def stop(self):
        proc.stop_pidfile(self.pidfile, self.stop_s)


# ---------------------------------------------------------------- MariaDB

# The server settings of every MariaDB of ours (the native stack's and the container's,
# docker/mariadb): durable defaults are kept on purpose, to behave like production.
MYSQL_FLAGS = ["--max-connections=2000", "--skip-name-resolve", "--innodb-buffer-pool-size=128M"]


class MariaDB(Server):
    """A private MariaDB under RUN/mysql on 127.0.0.1:PORT; root logs in over its
    socket, RUN/mysql/sock, with no password. ENV: the server's environment (None: ours;
    the nemesis's clock faults preload libfaketime)."""

    title, default_name, log_name, start_s, stop_s = "MariaDB", "mysql", "error.log", 60, 60
    osuser = "root"  # the system user the server runs as

    def __init__(self, run, port=None, env=None, name=None):
        super().__init__(run, port, name)
        self.env = env
        self.socket = os.path.join(self.dir, "sock")

    def flags(self):
        """The server's options beyond its files and port (a Galera node adds wsrep's)."""
        return list(MYSQL_FLAGS)

    def argv(self):
        """The server's command line. Its own pid file is not ours: it rewrites that file
        as it starts, and a reader that met the file empty took a starting server for one
        that had exited. The temporary tables go where the bootstrap's did (mysql_install
        says why)."""
        return (["mariadbd", "--no-defaults", "--user=" + self.osuser,
                 "--datadir=" + os.path.join(self.dir, "data"),
                 "--tmpdir=" + os.path.join(self.dir, "tmp"), "--socket=" + self.socket,
                 "--port=%d" % self.port, "--bind-address=127.0.0.1",
                 "--pid-file=" + os.path.join(self.dir, "mariadbd.pid")]
                + self.flags() + ["--log-error=" + self.log])

    def launch(self):
        mysql_install(self.dir, self.osuser)
        proc.spawn(self.argv(), None, env=self.env, pidfile=self.pidfile)

    def ready(self):
        """It answers a query (on PORT, when one was given)."""
        try:
            rows = self.query("SELECT @@port")
        except Exception:
            return False
        return self.port is None or int(rows[0][0]) == self.port

    def connect(self, db=None):
        """A pymysql connection as root over the private socket (autocommit on)."""
        import pymysql  # Debian's python3-pymysql; only MariaDB's queries need it
        return pymysql.connect(unix_socket=self.socket, user="root", password="",
                               database=db, autocommit=True, connect_timeout=5)

    def query(self, sql, args=None, db=None):
        """Runs one parameterised statement; returns its rows."""
        con = self.connect(db)
        try:
            with con.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall()
        finally:
            con.close()

    def source(self, db, path):
        """Runs the SQL file PATH on DB with the mariadb client (files of many statements)."""
        with open(path, "rb") as f:
            r = subprocess.run(["mariadb", "--no-defaults", "-uroot", "-S", self.socket, db],
                               stdin=f, capture_output=True)
        if r.returncode != 0:
            raise LabError("running %s on %s failed: %s" % (path, db, r.stderr.decode().strip()))

    def sql(self, text, db=None):
        """Runs the statements TEXT with the mariadb client, as root over the socket
        (what needs no python3-pymysql: the container's start-up); their output."""
        r = subprocess.run(["mariadb", "--no-defaults", "-uroot", "-S", self.socket, "-N", "-B"]
                           + ([db] if db else []), input=text.encode(), capture_output=True)
        if r.returncode != 0:
            raise LabError("mariadb: %s" % r.stderr.decode().strip())
        return r.stdout.decode()

    def answers(self):
        """It answers a query over the socket (the mariadb client's)."""
        try:
            return self.sql("SELECT 1").strip() == "1"
        except LabError:
            return False

    def grant_service_user(self, db, user, password, hosts=("127.0.0.1", "localhost")):
        """USER with PASSWORD from each of HOSTS (the containers give '%': stockd connects
        from its own container), allowed only what a deduction needs (service_user_sql)."""
        self.sql("".join(service_user_sql(db, user, password, h) for h in hosts))

    def create_db(self, db, user, password, hosts=("127.0.0.1", "localhost")):
        """DB made again with the schema and the seed, and the service user."""
        self.sql("DROP DATABASE IF EXISTS `%s`;\nCREATE DATABASE `%s` CHARACTER SET utf8mb4;\n"
                 % (db, db))
        for f in ("schema.sql", "seed.sql"):
            self.source(db, os.path.join(SRC, "sql", f))
        self.grant_service_user(db, user, password, hosts)


# ---------------------------------------------------------------- MariaDB Galera Cluster

GALERA_PROVIDER = "/usr/lib/galera/libgalera_smm.so"

# Every node's settings beyond MYSQL_FLAGS (docs/galera.md says why each):
# - durable commits on every node: innodb_flush_log_at_trx_commit=1 and sync_binlog=1
#   (no binary log is written here, so the second only matters to whoever turns one on).
#   Jepsen's report on MariaDB Galera Cluster 12.1.2 lost committed transactions when
#   nodes crashed in quick succession under the non-flushing settings that are usually
#   recommended for Galera (the cluster, not the disk, is to keep a commit).
# - what wsrep requires: row-based replication, interleaved auto-increment locks;
# - state transfer by rsync (SST) for a node with no data, IST from a peer's gcache for one
#   that was away briefly; gcache.recover keeps the gcache across a crash, so a killed node
#   comes back by IST rather than a full copy;
# - evs timeouts short enough that a paused or cut-off node is suspected in ~2 s and
#   evicted in ~4 s (the defaults are 5 s and 15 s): a lab's sale lasts seconds.
GALERA_FLAGS = ["--binlog-format=ROW", "--default-storage-engine=InnoDB",
                "--innodb-autoinc-lock-mode=2", "--innodb-flush-log-at-trx-commit=1",
                "--sync-binlog=1", "--wsrep-on=ON", "--wsrep-provider=" + GALERA_PROVIDER,
                "--wsrep-cluster-name=stockd", "--wsrep-sst-method=rsync",
                "--wsrep-slave-threads=2"]
GALERA_PROVIDER_OPTIONS = ("gcache.size=64M;gcache.recover=yes;evs.keepalive_period=PT0.5S;"
                           "evs.inactive_check_period=PT0.5S;evs.suspect_timeout=PT2S;"
                           "evs.inactive_timeout=PT4S;evs.install_timeout=PT4S")
SYNCED = 4  # wsrep_local_state of a node that is a full member, in step with the group


def galera_flags(n, addr, ports, peers, listen="127.0.0.1"):
    """wsrep's options of node N beyond GALERA_FLAGS: the node reached by the others at
    ADDR on PORTS (sql, group, ist, sst), its group port listening on LISTEN, and the
    cluster's PEERS (every node's ADDR:GROUP). The native stack's nodes (loopback, ports
    from the stack's base) and the containers' (docker/galera.yml: each node its own
    address, the default ports) take them from here."""
    sql, group, ist, sst = ports
    return GALERA_FLAGS + [
        "--wsrep-node-name=node%d" % n, "--wsrep-node-address=%s:%d" % (addr, group),
        "--wsrep-node-incoming-address=%s:%d" % (addr, sql),
        "--wsrep-sst-receive-address=%s:%d" % (addr, sst),
        "--wsrep-cluster-address=gcomm://" + ",".join(peers),
        "--wsrep-provider-options=gmcast.listen_addr=tcp://%s:%d;ist.recv_addr=%s:%d;%s"
        % (listen, group, addr, ist, GALERA_PROVIDER_OPTIONS)]


def galera_check_user_sql(password, host="127.0.0.1"):
    """The user `clustercheck`@HOST with PASSWORD and no privilege, which HAProxy's health
    check logs in as (lab/galera_check.sh: it reads status variables only)."""
    return ("CREATE USER IF NOT EXISTS 'clustercheck'@'%s' IDENTIFIED BY '%s';\n"
            "ALTER USER 'clustercheck'@'%s' IDENTIFIED BY '%s';\n"
            % (host, sql_quote(password), host, sql_quote(password)))


def searchable_by_others(path):
    """Makes every directory above PATH searchable by users other than its owner (o+x:
    enter, not list), since the Galera nodes run as `mysql`: a checkout in a directory
    made by mktemp -d (mode 0700) stops `mysql` there otherwise. Says so on stderr for a
    directory outside this checkout."""
    d = os.path.dirname(os.path.abspath(path))
    while True:
        mode = os.stat(d).st_mode
        if not mode & 0o001:
            os.chmod(d, (mode & 0o7777) | 0o001)
            if not (d == SRC or d.startswith(SRC + os.sep)):
                sys.stderr.write("lab: %s made searchable by others (o+x) for the Galera "
                                 "nodes, which run as user mysql\n" % d)
        if d == os.path.dirname(d):
            return
        d = os.path.dirname(d)


class GaleraNode(MariaDB):
    """Node N (1..3) of the three-node Galera cluster whose ports galera_ports(FIRST)
    gives (SQL, group, IST, SST of each), under RUN/galeraN. A MariaDB whose launch adds
    wsrep's settings; ready once it answers a query and is synced (wsrep_local_state 4).
    Its reads as root (query, sql) wait for the cluster (wsrep_sync_wait=1): what the
    lab reads on a node is what the cluster has committed."""

    start_s = 300  # a joiner copies the data (SST) before it answers; minutes on a busy machine
    # Not root: the joiner's rsync daemon (wsrep_sst_rsync), started by root, would drop
    # to `nobody` and could not write the node's files.
    osuser = "mysql"

    def __init__(self, run, first, n, env=None):
        self.ports = galera_ports(first) if first else [(None,) * 4] * 3
        super().__init__(run, self.ports[n - 1][0], env, "galera%d" % n)
        self.n = n
        self.title = "Galera node %d" % n
        self.bootstrap = False

    def flags(self):
        peers = ["127.0.0.1:%d" % g for _, g, _, _ in self.ports]
        argv = super().flags() + galera_flags(self.n, "127.0.0.1", self.ports[self.n - 1], peers)
        return argv + (["--wsrep-new-cluster"] if self.bootstrap else [])

    def launch(self):
        os.makedirs(os.path.join(self.dir, "tmp"), exist_ok=True)
        searchable_by_others(self.dir)
        subprocess.run(["chown", "-R", "%s:" % self.osuser, self.dir], check=True)
        super().launch()

    def status(self, *names):
        """The node's wsrep status variables NAMES as a dict (empty when it does not
        answer); read without waiting for the cluster, so a node cut off answers too."""
        try:
            con = MariaDB.connect(self)
            try:
                with con.cursor() as cur:
                    cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN (%s)"
                                % ",".join(["%s"] * len(names)), names)
                    return dict(cur.fetchall())
            finally:
                con.close()
        except Exception:
            return {}

    def synced(self):
        st = self.status("wsrep_local_state", "wsrep_cluster_status")
        return st.get("wsrep_local_state") == str(SYNCED) and st.get("wsrep_cluster_status") == "Primary"

    def ready(self):
        return super().ready() and self.synced()

    def connect(self, db=None):
        import pymysql
        return pymysql.connect(unix_socket=self.socket, user="root", password="", database=db,
                               autocommit=True, connect_timeout=5,
                               init_command="SET SESSION wsrep_sync_wait=1")

    def sql(self, text, db=None):
        return super().sql("SET SESSION wsrep_sync_wait=1;\n" + text, db)

    def grastate(self):
        """The node's saved state (data/grastate.dat, grastate()); None without one."""
        return grastate(os.path.join(self.dir, "data", "grastate.dat"))

    def safe_to_bootstrap(self):
        """grastate.dat says this node left last, cleanly (it may start a new cluster)."""
        st = self.grastate()
        return bool(st and st.safe)

    def recover_seqno(self):
        """The last transaction this stopped node committed, by `mariadbd --wsrep-recover`
        (InnoDB's recovery, then the position it read, in the log; the server exits
        without serving): the seqno, or -1 when it cannot tell. For a node that crashed,
        whose grastate.dat says seqno -1."""
        if self.port is None or self.running():
            return -1
        log = os.path.join(self.dir, "recover.log")
        try:
            os.remove(log)
        except OSError:
            pass
        subprocess.run(["chown", "-R", "%s:" % self.osuser, self.dir], check=False)
        subprocess.run(self.argv() + ["--wsrep-recover", "--log-error=" + log],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env,
                       timeout=self.start_s, check=False)
        try:
            with open(log) as f:
                return recovered_seqno(f.read())
        except OSError:
            return -1

    def mark_safe_to_bootstrap(self):
        f = os.path.join(self.dir, "data", "grastate.dat")
        if os.path.exists(f):
            with open(f) as fh:
                text = fh.read()
            with open(f, "w") as fh:
                fh.write(re.sub(r"^safe_to_bootstrap:.*$", "safe_to_bootstrap: 1", text, flags=re.M))


@dataclass(frozen=True)
class Grastate:
    """A node's data/grastate.dat: the cluster's uuid, the seqno of its last commit
    (-1 when it did not stop cleanly, or while it runs), and safe_to_bootstrap (it left
    the cluster last, cleanly)."""

    uuid: str
    seqno: int
    safe: bool


def grastate(path):
    """The Grastate in file PATH; None when there is none (a node never started)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    field = dict(re.findall(r"^(uuid|seqno|safe_to_bootstrap):\s*(\S+)", text, re.M))
    try:
        seqno = int(field.get("seqno", "-1"))
    except ValueError:
        seqno = -1
    return Grastate(field.get("uuid", ""), seqno, field.get("safe_to_bootstrap") == "1")


def recovered_seqno(log):
    """The seqno in the `WSREP: Recovered position: UUID:SEQNO` line of a
    --wsrep-recover run's LOG (its last), or -1."""
    found = re.findall(r"WSREP: Recovered position:\s*[0-9a-f-]+:(-?\d+)", log)
    return int(found[-1]) if found else -1


def bootstrap_choice(positions):
    """The node to start a new cluster from, when none runs: POSITIONS maps each node
    number to (seqno, safe_to_bootstrap), None for a node without data. The most advanced
    node (the highest seqno: it holds every commit the others hold), a node marked safe
    before an unmarked one of the same seqno, then the lowest number; None when no node
    has data (a fresh cluster: the caller takes node 1). Bootstrapping from a node behind
    another would make its commits the cluster's history, and the node ahead could not
    join without a full copy that drops what only it had."""
    have = [(seqno, safe, -n) for n, p in positions.items() if p is not None
            for seqno, safe in [p]]
    return -max(have)[2] if have else None


class GaleraCluster:
    """The three Galera nodes from port FIRST (galera_ports), under RUN/galera1..3, seen
    from the outside as one MariaDB: query, sql, source, create_db and the socket go to
    the writer (the first synced node, HAProxy's choice too), and each reads with
    wsrep_sync_wait. start bootstraps: with no node running, the most advanced node
    (bootstrap_choice: grastate.dat's seqno, or --wsrep-recover's for a node that
    crashed; node 1 for a fresh cluster) starts a new cluster and the others join it by
    SST or IST, one at a time. CHECK_PASSWORD: the password of the user `clustercheck`
    (USAGE only) that HAProxy's health check logs in as."""

    title = "Galera"

    def __init__(self, run, first, check_password=None, env=None):
        self.run = run
        self.first = first
        self.port = first
        self.check_password = check_password
        self.members = [GaleraNode(run, first, n, env) for n in (1, 2, 3)]

    def node(self, n):
        return self.members[n - 1]

    def ports(self):
        return [m.port for m in self.members]

    def running(self):
        return any(m.running() for m in self.members)

    def start(self, members=(1, 2, 3)):
        if not any(m.running() for m in self.members):
            positions = self.positions()
            first = self.members[(bootstrap_choice(positions) or 1) - 1]
            if positions.get(first.n):
                sys.stderr.write("lab: Galera: no node runs; node %d bootstraps the cluster "
                                 "(seqno per node: %s)\n" % (first.n, ", ".join(
                                     "%d: %s" % (n, p[0] if p else "no data")
                                     for n, p in sorted(positions.items()))))
            first.mark_safe_to_bootstrap()
            first.bootstrap = True
            try:
                first.start()
            finally:
                first.bootstrap = False
            if self.check_password:
                first.sql(galera_check_user_sql(self.check_password))
        for n in members:
            self.members[n - 1].start()
        return self

    def positions(self):
        """Each stopped node's (seqno, safe_to_bootstrap), for bootstrap_choice: the
        seqno its grastate.dat saved when it stopped cleanly, else the one
        --wsrep-recover reads from its data (a node that crashed); None without data."""
        out = {}
        for m in self.members:
            st = m.grastate()
            if st is None:
                out[m.n] = None
                continue
            seqno = st.seqno if st.seqno >= 0 else m.recover_seqno()
            out[m.n] = (seqno, st.safe)
        return out

    def stop(self):
        """Stops the nodes in reverse, so that node 1 leaves last and may bootstrap."""
        for m in reversed(self.members):
            m.stop()

    def writer(self):
        """The first synced node (the one HAProxy sends writes to); raises LabError if none."""
        for m in self.members:
            if m.running() and m.synced():
                return m
        raise LabError("no Galera node under %s is synced" % self.run)

    def up(self):
        return any(m.up() for m in self.members)

    ready = up

    @property
    def socket(self):
        return self.writer().socket

    @property
    def pidfile(self):
        return self.writer().pidfile

    def connect(self, db=None):
        return self.writer().connect(db)

    def query(self, sql, args=None, db=None):
        return self.writer().query(sql, args, db)

    def sql(self, text, db=None):
        return self.writer().sql(text, db)

    def source(self, db, path):
        # The mariadb client runs the file on the writer; DDL replicates as TOI.
        return self.writer().source(db, path)

    def answers(self):
        return self.up()

    def grant_service_user(self, db, user, password, hosts=("127.0.0.1", "localhost")):
        self.writer().grant_service_user(db, user, password, hosts)

    def create_db(self, db, user, password, hosts=("127.0.0.1", "localhost")):
        self.writer().create_db(db, user, password, hosts)


def database(run):
    """The database of the lab under RUN as root sees it over a socket: the Galera
    cluster when a node of one runs there (its writer answers), else the MariaDB."""
    cluster = GaleraCluster(run, None)
    return cluster if cluster.running() else MariaDB(run)


# ---------------------------------------------------------------- HAProxy

# The health check HAProxy runs for each node (external-check): a node is fit for
# writes only when it is a synced member of the primary component. A TCP check, or
# HAProxy's own mysql-check (a login handshake), passes while a node is still joining
# (its data half copied), donating, or cut off in a non-primary component, where every
# statement fails with 1047; that node would be sent the writes.
GALERA_CHECK = os.path.join(SRC, "lab", "galera_check.sh")


class HAProxy(Server):
    """HAProxy under RUN/haproxy on 127.0.0.1:PORT in front of the nodes on NODE_PORTS
    (TCP): every connection to the first node that passes the check (lab/galera_check.sh,
    logging in as `clustercheck` with CHECK_PASSWORD), the others `backup`, taken in
    order when it fails. A node marked down has its sessions cut (its open transactions
    then fail at once rather than at a timeout), and when the first node is back the
    sessions on a backup are cut too, so that two nodes never take writes through the
    proxy at the same time for long."""

    title, default_name, log_name, start_s = "HAProxy", "haproxy", "haproxy.log", 30

    def __init__(self, run, port=None, node_ports=(), check_password=None, bind="127.0.0.1"):
        """NODE_PORTS: each node's SQL port on loopback, or its "HOST:PORT" (the
        containers', docker/galera.yml); BIND: the address HAProxy listens on."""
        super().__init__(run, port)
        self.nodes = [n if isinstance(n, str) else "127.0.0.1:%d" % n for n in node_ports]
        self.check_password = check_password
        self.bind = bind

    def write_config(self):
        """RUN/haproxy/haproxy.cfg and its check's wrapper and login (the containers'
        HAProxy writes it too: lab/container.py)."""
        os.makedirs(self.dir, exist_ok=True)
        cnf = os.path.join(self.dir, "check.cnf")
        fd = os.open(cnf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("[client]\nuser=clustercheck\npassword=%s\nconnect-timeout=2\n"
                    % self.check_password)
        # external-check command takes no arguments: a wrapper names the credentials.
        check = os.path.join(self.dir, "check")
        with open(check, "w") as f:
            f.write("#!/bin/sh\nexec %s %s \"$@\"\n" % (GALERA_CHECK, cnf))
        os.chmod(check, 0o700)
        servers = "".join("  server node%d %s check%s\n" % (n, a, "" if n == 1 else " backup")
                          for n, a in enumerate(self.nodes, 1))
        with open(os.path.join(self.dir, "haproxy.cfg"), "w") as f:
            f.write("# Written by lab/servers.py (HAProxy); rewritten on every start.\n"
                    "global\n  external-check\n  insecure-fork-wanted\n  maxconn 4000\n"
                    "defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 1h\n"
                    "  timeout server 1h\n  timeout check 2s\n"
                    "listen writer\n  bind %s:%d\n  option external-check\n"
                    "  external-check path /usr/bin:/bin\n  external-check command %s\n"
                    "  default-server inter 2s fastinter 2s downinter 2s rise 1 fall 2 "
                    "on-marked-down shutdown-sessions on-marked-up shutdown-backup-sessions\n%s"
                    % (self.bind, self.port, check, servers))

    def launch(self):
        self.write_config()
        proc.spawn(["haproxy", "-db", "-f", os.path.join(self.dir, "haproxy.cfg")], self.log,
                   pidfile=self.pidfile)

    def ready(self):
        """A login through it as the check user answers."""
        import pymysql
        try:
            con = pymysql.connect(host="127.0.0.1", port=self.port, user="clustercheck",
                                  password=self.check_password or "", connect_timeout=3)
            con.close()
            return True
        except Exception:
            return False


# ---------------------------------------------------------------- ZooKeeper

class ZooKeeper(Server):
    """A standalone ZooKeeper under RUN/NAME (default zk); ready once it serves (srvr
    has a Mode: ruok answers imok earlier than that)."""

    title, default_name, log_name, start_s = "ZooKeeper", "zk", "zk.log", 60

    def launch(self):
        os.makedirs(os.path.join(self.dir, "data"), exist_ok=True)
        zk_write_cfg(self.dir, self.port)
        self.exec()

    def exec(self):
        """Runs the server of DIR/zoo.cfg (the container's JVM too), logging into
        DIR/zk.log."""
        zk_log4j(self.dir)
        proc.spawn(zk_argv(self.dir), os.path.join(self.dir, "stdout.log"), pidfile=self.pidfile)

    def mode(self):
        """leader, follower or standalone; None when it does not serve."""
        return zk_mode(self.port)

    def ready(self):
        return self.mode() is not None


class ZkMember(ZooKeeper):
    """Member N (1..3) of the three-server ensemble from port FIRST, under RUN/zkN."""

    def __init__(self, run, first, n):
        self.ports = zk_ensemble_ports(first)
        super().__init__(run, self.ports[n - 1][0], "zk%d" % n)
        self.n = n
        self.title = "ZooKeeper zk%d" % n

    def launch(self):
        os.makedirs(os.path.join(self.dir, "data"), exist_ok=True)
        zk_write_cfg(self.dir, self.port)
        zk_ensemble_cfg(self.dir, self.n, ["127.0.0.1:%d:%d" % (q, e) for _, q, e in self.ports])
        self.exec()


class Cluster:
    """Three members of one server (MEMBER(run, first, n)) from port FIRST, each under
    RUN/NAMEn; hosts() is stockd's option for all three."""

    def __init__(self, run, first, member):
        self.run = run
        self.first = first
        self.members = [member(run, first, n) for n in (1, 2, 3)]

    def start(self, members=(1, 2, 3), wait=True):
        """Starts MEMBERS that do not run; with WAIT returns once each of them is ready
        (which needs a quorum: another member must be up)."""
        for n in members:
            m = self.members[n - 1]
            if not m.running():
                os.makedirs(m.dir, exist_ok=True)
                m.launch()
        if wait:
            for n in members:
                self.members[n - 1].await_ready()
        return self

    def stop(self):
        for m in self.members:
            m.stop()

    def hosts(self):
        return ",".join("127.0.0.1:%d" % m.port for m in self.members)


class ZkEnsemble(Cluster):
    """The three-server ZooKeeper ensemble from port FIRST (lab/ports.py's layout:
    clients FIRST+0..2, quorum +3..5, election +6..8), members in RUN/zk1..3; a member's
    config is written the first time it starts."""

    def __init__(self, run, first):
        super().__init__(run, first, ZkMember)

    def leader(self):
        """The member (1..3) that serves as leader, or None."""
        for m in self.members:
            if m.mode() == "leader":
                return m.n
        return None


# ---------------------------------------------------------------- Redis

# No persistence: the lock keys are leases, and the fencing counter survives a restart
# through its clock floor (lock/redislock.c).
REDIS_FLAGS = ["--save", "", "--appendonly", "no", "--daemonize", "no"]


def redis_user():
    return os.environ.get("STACK_REDIS_USER") or "stockd"


class Redis(Server):
    """A private redis-server under RUN/NAME (default redis) on 127.0.0.1:PORT,
    protected mode on; with PASSWORD only the ACL user (redis_user()) may log in, and
    with REPLICATION the users replica and sentinel too; with MASTER a replica of the
    Redis on that port."""

    default_name, log_name, stop_s = "redis", "redis.log", 10

    def __init__(self, run, port=None, name=None, password=None, replication=False, master=None):
        super().__init__(run, port, name)
        self.title = "Redis %s" % self.name
        self.password = password
        self.replication = replication
        self.master = master
        self.user = redis_user() if password else None

    def launch(self):
        argv = ["redis-server"]
        if self.password:
            argv.append(redis_auth_conf(self.dir, self.password, self.replication, self.master))
        argv += ["--port", str(self.port), "--bind", "127.0.0.1", "--protected-mode", "yes"]
        argv += REDIS_FLAGS
        if self.master:
            argv += ["--replicaof", "127.0.0.1", str(self.master)]
        proc.spawn(argv + ["--dir", self.dir, "--logfile", self.log], None, pidfile=self.pidfile)

    def ready(self):
        return redis_ping(self.port, self.user, self.password)

    def cmd(self, *args):
        """One command's reply (raises OSError on an error reply)."""
        return redis_cmd(self.port, *args, user=self.user, password=self.password)

    def linked(self):
        """A replica whose link to its primary is up (False if it does not answer)."""
        try:
            return "master_link_status:up" in self.cmd("INFO", "replication")
        except (OSError, ValueError):
            return False

    def is_primary(self):
        try:
            return "role:master" in self.cmd("INFO", "replication")
        except (OSError, ValueError):
            return False


class Sentinel(Server):
    """A redis-sentinel under RUN/NAME (default sentinel) on PORT, watching the primary
    on MASTER as `stockd`, quorum 1: it calls the primary down after 1 s and promotes a
    replica; failover-timeout 60 s."""

    title, default_name, log_name, stop_s = "redis-sentinel", "sentinel", "sentinel.log", 10

    def __init__(self, run, port=None, master=None, password=None, name=None):
        super().__init__(run, port, name)
        self.master = master
        self.password = password

    def launch(self):
        conf = os.path.join(self.dir, "sentinel.conf")
        text = ("port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\n"
                "logfile %s\nsentinel monitor stockd 127.0.0.1 %d 1\n"
                "sentinel down-after-milliseconds stockd 1000\n"
                "sentinel failover-timeout stockd 60000\n"
                % (self.port, self.dir, self.log, self.master))
        if self.password:
            text += 'sentinel auth-user stockd sentinel\nsentinel auth-pass stockd "%s"\n' % (
                self.password)
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        proc.spawn(["redis-sentinel", conf], None, pidfile=self.pidfile)

    def primary(self):
        """HOST:PORT of the primary it names, or None."""
        return sentinel_primary(self.port)

    def ready(self):
        return self.primary() is not None


# ---------------------------------------------------------------- etcd

class Etcd(Server):
    """A one-member etcd under RUN/etcd, clients on PORT, its peer URL on PORT-1, fsync
    on (its revisions are the lock's fencing tokens)."""

    title, default_name, log_name, start_s = "etcd", "etcd", "etcd.log", 30
    member = "s1"

    def peers(self):
        """(its peer URL, the cluster's --initial-cluster)."""
        p = "http://127.0.0.1:%d" % (self.port - 1)
        return p, "s1=" + p

    def launch(self):
        c = "http://127.0.0.1:%d" % self.port
        peer, cluster = self.peers()
        data = os.path.join(self.dir, "data")
        state = "existing" if self.member != "s1" and os.path.isdir(data) else "new"
        proc.spawn(["etcd", "--name", self.member, "--data-dir", data,
                    "--listen-client-urls", c, "--advertise-client-urls", c,
                    "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", cluster, "--initial-cluster-state", state],
                   self.log, pidfile=self.pidfile)

    def ready(self):
        return etcd_healthy(self.port)


class EtcdMember(Etcd):
    """Member N (1..3) of the three-member cluster from port FIRST, under RUN/etcdN:
    clients on FIRST..FIRST+2, peers on FIRST+3..FIRST+5. A member with data joins the
    existing cluster (a restart after a kill)."""

    start_s = 60

    def __init__(self, run, first, n):
        super().__init__(run, first + n - 1, "etcd%d" % n)
        self.first = first
        self.n = n
        self.title = "etcd%d" % n
        self.member = "e%d" % n

    def peers(self):
        peers = ["http://127.0.0.1:%d" % (self.first + 3 + n) for n in range(3)]
        return peers[self.n - 1], ",".join("e%d=%s" % (n, p) for n, p in enumerate(peers, 1))


class EtcdCluster(Cluster):
    """A three-member etcd cluster from port FIRST, members in RUN/etcd1..3."""

    def __init__(self, run, first):
        super().__init__(run, first, EtcdMember)

    def leader(self):
        """The member (1..3) that answers as its own leader (the status's leader is its
        member id), or None."""
        for m in self.members:
            req = urllib.request.Request("http://127.0.0.1:%d/v3/maintenance/status" % m.port,
                                         data=b"{}", method="POST")
            try:
                with urllib.request.urlopen(req, timeout=3) as r:
                    st = json.loads(r.read())
            except (OSError, ValueError):
                continue
            if st.get("leader") and st.get("leader") == st.get("header", {}).get("member_id"):
                return m.n
        return None


# ---------------------------------------------------------------- Prometheus

class Prometheus(Server):
    """Prometheus under RUN/prometheus on PORT scraping the stockd of its targets file
    with monitoring/stockd-rules.yml (interval STACK_PROMETHEUS_INTERVAL, default 5s)."""

    title, default_name, log_name, start_s = "Prometheus", "prometheus", "prometheus.log", 30

    def targets(self, ports, writer_ports=()):
        """Points it at the stockd on PORTS and the order writers' /metrics on
        WRITER_PORTS (job writer): their file_sd files, renamed into place (Prometheus
        watches them and never reads half a file)."""
        os.makedirs(self.dir, exist_ok=True)
        for name, ps in (("targets.json", ports), ("writer-targets.json", writer_ports)):
            tmp = os.path.join(self.dir, name + ".tmp")
            with open(tmp, "w") as f:
                json.dump([{"targets": ["127.0.0.1:%d" % p for p in ps], "labels": {}}], f)
                f.write("\n")
            os.replace(tmp, os.path.join(self.dir, name))

    def start(self):
        """Writes the configuration; a running Prometheus reloads it."""
        os.makedirs(os.path.join(self.dir, "data"), exist_ok=True)
        targets = os.path.join(self.dir, "targets.json")
        writers = os.path.join(self.dir, "writer-targets.json")
        for path in (targets, writers):
            if not os.path.exists(path):
                with open(path, "w") as f:
                    f.write("[]\n")
        interval = os.environ.get("STACK_PROMETHEUS_INTERVAL") or "5s"
        cfg = os.path.join(self.dir, "prometheus.yml")
        with open(cfg + ".tmp", "w") as f:
            f.write("# Written by lab/servers.py (Prometheus.start); rewritten on every start.\n"
                    "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n"
                    "  evaluation_interval: %s\nrule_files:\n"
                    "  - %s/monitoring/stockd-rules.yml\nscrape_configs:\n"
                    "  - job_name: stockd\n    file_sd_configs:\n      - files: ['%s']\n"
                    "  - job_name: writer\n    file_sd_configs:\n      - files: ['%s']\n"
                    % (interval, interval, interval, SRC, targets, writers))
        os.replace(cfg + ".tmp", cfg)
        if self.pid is not None:
            os.kill(self.pid, signal.SIGHUP)
            return self
        return super().start()

    def launch(self):
        proc.spawn(["prometheus", "--config.file=" + os.path.join(self.dir, "prometheus.yml"),
                    "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
                    "--storage.tsdb.retention.time=2d",
                    "--web.listen-address=127.0.0.1:%d" % self.port,
                    "--web.console.templates=/etc/prometheus/consoles",
                    "--web.console.libraries=/etc/prometheus/console_libraries"],
                   self.log, pidfile=self.pidfile)

    def ready(self):
        return prometheus_ready(self.port)


# ---------------------------------------------------------------- stockd

class Stockd(Server):
    """Instance I (stockd-I) on PORT, its pid in RUN/stockd/I.pid and its log in
    RUN/stockd/I.log: BINARY --port PORT --lock LOCK --mysql MYSQL_URL --zk ZK
    --instance stockd-I EXTRA.... ENV carries the passwords (never argv). Started, an
    instance I that runs is stopped first."""

    default_name = "stockd"

    def __init__(self, run, i, port=None, binary=None, lock=None, mysql_url=None, zk=None,
                 extra=(), env=None):
        super().__init__(run, port)
        self.i = i
        self.title = "stockd-%d" % i
        self.pidfile = os.path.join(self.dir, "%d.pid" % i)
        self.log = os.path.join(self.dir, "%d.log" % i)
        self.argv = [binary, "--port", str(port), "--lock", lock, "--mysql", mysql_url, "--zk",
                     zk, "--instance", self.title] + list(extra)
        self.env = env

    def start(self):
        self.stop(10)
        return super().start()

    def launch(self):
        open(self.log, "wb").close()
        proc.spawn(self.argv, self.log, env=self.env, pidfile=self.pidfile)

    def ready(self):
        """Any HTTP answer to /health (503 while MariaDB is down is still an instance
        that is up)."""
        return http_status("http://127.0.0.1:%d/health" % self.port) is not None

    def stop(self, seconds=None):
        proc.stop_pidfile(self.pidfile, seconds or self.stop_s)

    @staticmethod
    def stop_all(run):
        """Every stockd under RUN."""
        d = os.path.join(run, "stockd")
        if not os.path.isdir(d):
            return
        for f in sorted(os.listdir(d)):
            if f.endswith(".pid"):
                proc.stop_pidfile(os.path.join(d, f), 20)


def secret_file(f):
    """The secret (a password) in file F, made on first use: 32 hex digits, mode 0600.
    It reaches the servers and stockd only through files and environments, never argv."""
    try:
        with open(f) as fh:
            pw = fh.read().strip()
        if pw:
            os.chmod(f, 0o600)
            return pw
    except FileNotFoundError:
        pass
    pw = secrets.token_hex(16)
    fd = os.open(f + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(pw)
    os.replace(f + ".tmp", f)
    return pw


def owner_route_args(port, peer_ports, secret_file, zk_membership):
    """stockd's arguments for owner routing (docs/routing.md) of the instance on PORT of
    127.0.0.1: the address its peers reach it at, the peers' shared secret in
    SECRET_FILE, and, unless ZK_MEMBERSHIP (the lock mode uses ZooKeeper, whose
    ephemeral nodes then hold the view), the static list of every instance's address,
    PEER_PORTS (itself included)."""
    args = ["--route", "owner", "--announce", "127.0.0.1:%d" % port,
            "--peer-secret-file", secret_file]
    if not zk_membership:
        args += ["--peers", ",".join("127.0.0.1:%d" % p for p in peer_ports)]
    return args


# ---------------------------------------------------------------- nginx

class Nginx(Server):
    """nginx under RUN/nginx on 127.0.0.1:PORT over the stockd on UPSTREAM_PORTS
    (lab/nginx.py renders nginx/nginx.conf.in; the live page reads the Prometheus on
    PROM_PORT, 0 for none). A running nginx reloads; start then returns once the old
    workers, with the old upstream list, are gone."""

    title, default_name, start_s = "nginx", "nginx", 10

    def __init__(self, run, port=None, upstream_ports=(), route="round-robin", rate_limit="",
                 prom_port=0):
        super().__init__(run, port)
        self.pidfile = os.path.join(self.dir, "nginx.pid")
        self.log = os.path.join(self.dir, "logs", "error.log")
        self.conf = os.path.join(self.dir, "nginx.conf")
        self.upstream_ports = upstream_ports
        self.route = route
        self.rate_limit = rate_limit
        self.prom_port = prom_port

    def command(self, *more):
        return ["nginx", "-p", self.dir, "-c", self.conf, "-e", self.log] + list(more)

    def start(self):
        from . import nginx
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        os.makedirs(os.path.join(self.dir, "tmp"), exist_ok=True)
        text = nginx.render_native(self.dir, self.port,
                                   ["127.0.0.1:%d" % p for p in self.upstream_ports], self.route,
                                   self.rate_limit, prom_port=self.prom_port or 9)
        with open(self.conf + ".new", "w") as f:
            f.write(text)
        os.replace(self.conf + ".new", self.conf)
        master = self.pid
        if master is None:
            return super().start()
        old = proc._children(master)
        r = subprocess.run(self.command("-s", "reload"), capture_output=True)
        if r.returncode != 0:
            raise LabError("nginx reload failed: %s" % r.stderr.decode().strip())
        for w in old:
            if not proc.wait_until(30, lambda w=w: not proc.pid_runs(w)):
                raise LabError("nginx: old worker %d still running" % w)
        return self

    def launch(self):
        r = subprocess.run(self.command(), capture_output=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise LabError("nginx did not start on port %d: %s; see %s"
                           % (self.port, r.stderr.decode().strip(), self.log))

    def ready(self):
        return http_status("http://127.0.0.1:%d/nginx-health" % self.port) == 200

    def stop(self):
        if proc.pid_alive(self.pidfile):
            subprocess.run(self.command("-s", "quit"), capture_output=True)
            if not proc.wait_until(10, lambda: not proc.pid_alive(self.pidfile)):
                proc.stop_pidfile(self.pidfile, 5)
