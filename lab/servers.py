"""The real servers of the stack, each started, checked and stopped here once:
MariaDB, ZooKeeper (standalone or a three-server ensemble), Redis (and Sentinel),
etcd, Prometheus, stockd and nginx.

Every server lives in a directory of its own under one run directory RUN (RUN/mysql,
RUN/zk, RUN/zk1..3, RUN/redis, RUN/redlock1..3, RUN/etcd, RUN/prometheus, RUN/stockd,
RUN/nginx), listens on loopback on the port it is given and writes its pid to RUN/NAME/pid
(nginx: RUN/nginx/nginx.pid, stockd: RUN/stockd/I.pid). Starting a server that runs
already does nothing. A start returns once the server answers (a query, srvr, PING,
/health) from the process we started; it raises LabError, naming the log, if it does
not.
"""

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

from . import LabError
from . import proc
from .ports import zk_ensemble_ports

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STACK_LIB = os.path.join(SRC, "scripts", "stack-lib.sh")


def _stack_lib_argv(command, *args):
    """The argv of bash running the line COMMAND with stack-lib.sh sourced and ARGS as
    $1...; when COMMAND execs a server (zk_exec), the pid bash started with is the
    server's."""
    return ["bash", "-c", 'source "$0" && ' + command, STACK_LIB] + [str(a) for a in args]


def stack_lib(command, *args, env=None):
    """Runs the bash line COMMAND with scripts/stack-lib.sh sourced and ARGS as $1...
    What the container images (which have no Python) share with the native servers,
    the MariaDB install and grants, the zoo.cfg and the JVM's command line, Redis's
    ACL file, is written there once and used from here. Returns its standard output;
    raises LabError with its standard error when it fails. Secrets go in ENV, never in
    ARGS."""
    r = subprocess.run(_stack_lib_argv(command, *args), env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise LabError("stack-lib.sh %s failed: %s" % (command.split()[0], r.stderr.strip()))
    return r.stdout


def _dir(run, name):
    d = os.path.join(run, name)
    os.makedirs(d, exist_ok=True)
    return d


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


# ---------------------------------------------------------------- MariaDB

# The server settings of every MariaDB of ours (the native stack's and the container's,
# docker/mariadb): durable defaults are kept on purpose, to behave like production.
MYSQL_FLAGS = ["--max-connections=2000", "--skip-name-resolve", "--innodb-buffer-pool-size=128M"]


def mysql_socket(run):
    return os.path.join(run, "mysql", "sock")


def mysql_connect(run, db=None):
    """A pymysql connection as root over the private socket (autocommit on)."""
    import pymysql  # Debian's python3-pymysql; only the MariaDB functions need it
    return pymysql.connect(unix_socket=mysql_socket(run), user="root", password="",
                           database=db, autocommit=True, connect_timeout=5)


def mysql_query(run, sql, args=None, db=None):
    """Runs one parameterised statement; returns its rows."""
    con = mysql_connect(run, db)
    try:
        with con.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    finally:
        con.close()


def mysql_source(run, db, path):
    """Runs the SQL file PATH on DB with the mariadb client (files of many statements)."""
    with open(path, "rb") as f:
        r = subprocess.run(["mariadb", "--no-defaults", "-uroot", "-S", mysql_socket(run), db],
                           stdin=f, capture_output=True)
    if r.returncode != 0:
        raise LabError("running %s on %s failed: %s" % (path, db, r.stderr.decode().strip()))


def mysql_up(run, port=None):
    """True if the MariaDB of RUN runs and answers a query (on PORT, if given)."""
    if not proc.pid_alive(os.path.join(run, "mysql", "pid")):
        return False
    try:
        rows = mysql_query(run, "SELECT @@port")
    except Exception:
        return False
    return port is None or int(rows[0][0]) == port


def mysql_start(run, port, env=None):
    """Initialises (the first time) and starts a private MariaDB on 127.0.0.1:PORT, in
    the environment ENV (None: ours; the nemesis's clock faults preload libfaketime)."""
    d = _dir(run, "mysql")
    pidfile = os.path.join(d, "pid")
    if proc.pid_alive(pidfile):
        return
    # The server's temporary tables go where the bootstrap's did (mysql_install says why).
    # Its own pid file is not ours: it rewrites that file as it starts, and a reader
    # that met the file empty took a starting server for one that had exited.
    stack_lib('mysql_install "$1"', run)
    tmp = os.path.join(d, "tmp")
    log = os.path.join(d, "error.log")
    proc.spawn(["mariadbd", "--no-defaults", "--user=root", "--datadir=" + os.path.join(d, "data"),
                "--tmpdir=" + tmp,
                "--socket=" + mysql_socket(run), "--port=%d" % port, "--bind-address=127.0.0.1",
                "--pid-file=" + os.path.join(d, "mariadbd.pid")] + MYSQL_FLAGS + ["--log-error=" + log],
               None, env=env, pidfile=pidfile)
    await_ready("MariaDB", pidfile, port, lambda: mysql_up(run, port), 60, log)


def mysql_stop(run):
    proc.stop_pidfile(os.path.join(run, "mysql", "pid"), 60)


def mysql_grant_service_user(run, db, user, password):
    """stack-lib.sh's mysql_grant_service_user: USER with PASSWORD from 127.0.0.1 and
    localhost, allowed only what a deduction needs."""
    stack_lib('mysql_grant_service_user "$1" "$2" "$3" "$STACK_LIB_PASSWORD"', run, db, user,
              env=dict(os.environ, STACK_LIB_PASSWORD=password))


def mysql_create_db(run, db, user, password):
    """stack-lib.sh's mysql_create_db: DB made again with the schema and the seed, and
    the service user."""
    stack_lib('mysql_create_db "$1" "$2" "$3" "$STACK_LIB_PASSWORD"', run, db, user,
              env=dict(os.environ, STACK_LIB_PASSWORD=password))


# ---------------------------------------------------------------- ZooKeeper

def _zk_launch(d):
    """Runs the server of D/zoo.cfg (stack-lib.sh's zk_exec, the container's too),
    logging into D/zk.log."""
    stack_lib('zk_log4j "$1"', d)
    proc.spawn(_stack_lib_argv('zk_exec "$1"', d), os.path.join(d, "stdout.log"),
               pidfile=os.path.join(d, "pid"))


def zk_start(run, port, name="zk"):
    """A standalone ZooKeeper under RUN/NAME; returns once it serves (srvr has a Mode:
    ruok answers imok earlier than that)."""
    d = _dir(run, name)
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    pidfile = os.path.join(d, "pid")
    if proc.pid_alive(pidfile):
        return
    stack_lib('zk_write_cfg "$1" "$2"', d, port)
    _zk_launch(d)
    await_ready("ZooKeeper", pidfile, port, lambda: zk_mode(port) is not None, 60,
                os.path.join(d, "zk.log"))


def zk_stop(run, name="zk"):
    proc.stop_pidfile(os.path.join(run, name, "pid"), 20)


def zk_ensemble_hosts(first):
    """stockd's --zk for the ensemble from FIRST: all three members."""
    return ",".join("127.0.0.1:%d" % c for c, _, _ in zk_ensemble_ports(first))


def zk_ensemble_start(run, first, members=(1, 2, 3), wait=True):
    """Members MEMBERS of the three-server ensemble from port FIRST (member N in
    RUN/zkN; the config is written the first time); with WAIT returns once each of them
    serves as leader or follower (which needs a quorum: another member must be up)."""
    ports = zk_ensemble_ports(first)
    servers = ["127.0.0.1:%d:%d" % (q, e) for _, q, e in ports]
    for n in members:
        client = ports[n - 1][0]
        d = _dir(run, "zk%d" % n)
        os.makedirs(os.path.join(d, "data"), exist_ok=True)
        if proc.pid_alive(os.path.join(d, "pid")):
            continue
        stack_lib('zk_write_cfg "$1" "$2" && zk_ensemble_cfg "$1" "${@:3}"', d, client, n, *servers)
        _zk_launch(d)
    if not wait:
        return
    for n in members:
        client = ports[n - 1][0]
        d = os.path.join(run, "zk%d" % n)
        await_ready("ZooKeeper zk%d" % n, os.path.join(d, "pid"), client,
                    lambda c=client: zk_mode(c) is not None, 60, os.path.join(d, "zk.log"))


def zk_ensemble_stop(run):
    for n in (1, 2, 3):
        zk_stop(run, "zk%d" % n)


def zk_leader(first):
    """The member (1..3) of the ensemble from port FIRST that serves as leader, or None."""
    for n, (client, _, _) in enumerate(zk_ensemble_ports(first), 1):
        if zk_mode(client) == "leader":
            return n
    return None


# ---------------------------------------------------------------- Redis

# No persistence: the lock keys are leases, and the fencing counter survives a restart
# through its clock floor (lock/redislock.c).
REDIS_FLAGS = ["--save", "", "--appendonly", "no", "--daemonize", "no"]


def redis_user():
    return os.environ.get("STACK_REDIS_USER") or "stockd"


def _redis_auth_conf(d, password, replication, master):
    """Writes D/auth.conf (0600) for PASSWORD with stack-lib.sh's redis_auth_conf (the
    container's ACL too) and returns its path: the default user off, the users and
    their commands as it says; the password reaches the server as its SHA-256, never in
    argv."""
    env = dict(os.environ, STACK_REDIS_PASSWORD=password, STACK_REDIS_USER=redis_user(),
               STACK_REDIS_REPLICATION="1" if replication else "0")
    return stack_lib('redis_auth_conf "$1" "$2"', d, master or "", env=env)


def redis_start(run, port, name="redis", password=None, replication=False, master=None):
    """A private redis-server under RUN/NAME on 127.0.0.1:PORT, protected mode on; with
    PASSWORD only the ACL user (redis_user()) may log in; with MASTER a replica of the
    Redis on that port."""
    d = _dir(run, name)
    pidfile = os.path.join(d, "pid")
    if proc.pid_alive(pidfile):
        return
    argv = ["redis-server"]
    if password:
        argv.append(_redis_auth_conf(d, password, replication, master))
    argv += ["--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes"] + REDIS_FLAGS
    if master:
        argv += ["--replicaof", "127.0.0.1", str(master)]
    log = os.path.join(d, "redis.log")
    argv += ["--dir", d, "--logfile", log]
    proc.spawn(argv, None, pidfile=pidfile)
    user = redis_user() if password else None
    await_ready("Redis %s" % name, pidfile, port, lambda: redis_ping(port, user, password), 20, log)


def redis_stop(run, name="redis"):
    proc.stop_pidfile(os.path.join(run, name, "pid"), 10)


def sentinel_primary(port):
    """HOST:PORT of the primary the Sentinel on PORT names for master `stockd`, or None."""
    try:
        a = redis_cmd(port, "SENTINEL", "get-master-addr-by-name", "stockd")
    except (OSError, ValueError):
        return None
    if isinstance(a, list) and len(a) == 2 and str(a[1]).isdigit():
        return "%s:%s" % (a[0], a[1])
    return None


def sentinel_start(run, port, master, password=None, name="sentinel"):
    """A redis-sentinel on PORT watching the primary on MASTER as `stockd`, quorum 1:
    it calls the primary down after 1 s and promotes a replica; failover-timeout 60 s."""
    d = _dir(run, name)
    pidfile = os.path.join(d, "pid")
    if proc.pid_alive(pidfile):
        return
    conf = os.path.join(d, "sentinel.conf")
    text = ("port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\n"
            "logfile %s/sentinel.log\nsentinel monitor stockd 127.0.0.1 %d 1\n"
            "sentinel down-after-milliseconds stockd 1000\nsentinel failover-timeout stockd 60000\n"
            % (port, d, d, master))
    if password:
        text += 'sentinel auth-user stockd sentinel\nsentinel auth-pass stockd "%s"\n' % password
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    proc.spawn(["redis-sentinel", conf], None, pidfile=pidfile)
    await_ready("redis-sentinel", pidfile, port, lambda: sentinel_primary(port) is not None, 20,
                os.path.join(d, "sentinel.log"))


def sentinel_stop(run, name="sentinel"):
    proc.stop_pidfile(os.path.join(run, name, "pid"), 10)


# ---------------------------------------------------------------- etcd

def etcd_healthy(port):
    return '"health":"true"' in http_text("http://127.0.0.1:%d/health" % port, 3)


def etcd_start(run, port):
    """A one-member etcd under RUN/etcd, clients on PORT, its peer URL on PORT-1,
    fsync on (its revisions are the lock's fencing tokens); returns once healthy."""
    d = _dir(run, "etcd")
    pidfile = os.path.join(d, "pid")
    if proc.pid_alive(pidfile):
        return
    c, p = "http://127.0.0.1:%d" % port, "http://127.0.0.1:%d" % (port - 1)
    log = os.path.join(d, "etcd.log")
    proc.spawn(["etcd", "--name", "s1", "--data-dir", os.path.join(d, "data"),
                "--listen-client-urls", c, "--advertise-client-urls", c,
                "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                "--initial-cluster", "s1=" + p, "--initial-cluster-state", "new"],
               log, pidfile=pidfile)
    await_ready("etcd", pidfile, port, lambda: etcd_healthy(port), 30, log)


def etcd_stop(run):
    proc.stop_pidfile(os.path.join(run, "etcd", "pid"), 20)


def etcd_cluster_hosts(first):
    """stockd's --etcd for the three-member cluster from port FIRST."""
    return ",".join("127.0.0.1:%d" % (first + n) for n in range(3))


def etcd_cluster_start(run, first):
    """The members of a three-member etcd cluster under RUN/etcd1..3 that do not run:
    clients on FIRST..FIRST+2, peers on FIRST+3..FIRST+5, fsync on. A member with data
    joins the existing cluster (a restart after a kill); returns once each is healthy
    (which needs a quorum)."""
    peers = ["http://127.0.0.1:%d" % (first + 3 + n) for n in range(3)]
    cluster = ",".join("e%d=%s" % (n, p) for n, p in enumerate(peers, 1))
    for n in (1, 2, 3):
        d = _dir(run, "etcd%d" % n)
        pidfile = os.path.join(d, "pid")
        if proc.pid_alive(pidfile):
            continue
        c = "http://127.0.0.1:%d" % (first + n - 1)
        state = "existing" if os.path.isdir(os.path.join(d, "data")) else "new"
        proc.spawn(["etcd", "--name", "e%d" % n, "--data-dir", os.path.join(d, "data"),
                    "--listen-client-urls", c, "--advertise-client-urls", c,
                    "--listen-peer-urls", peers[n - 1],
                    "--initial-advertise-peer-urls", peers[n - 1],
                    "--initial-cluster", cluster, "--initial-cluster-state", state],
                   os.path.join(d, "etcd.log"), pidfile=pidfile)
    for n in (1, 2, 3):
        d = os.path.join(run, "etcd%d" % n)
        port = first + n - 1
        await_ready("etcd%d" % n, os.path.join(d, "pid"), port, lambda p=port: etcd_healthy(p), 60,
                    os.path.join(d, "etcd.log"))


def etcd_cluster_leader(first):
    """The member (1..3) of the cluster from port FIRST that answers as its own leader
    (the status's leader is its member id), or None."""
    for n in (1, 2, 3):
        req = urllib.request.Request("http://127.0.0.1:%d/v3/maintenance/status" % (first + n - 1),
                                     data=b"{}", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=3) as r:
                st = json.loads(r.read())
        except (OSError, ValueError):
            continue
        if st.get("leader") and st.get("leader") == st.get("header", {}).get("member_id"):
            return n
    return None


def etcd_cluster_stop(run):
    for n in (1, 2, 3):
        proc.stop_pidfile(os.path.join(run, "etcd%d" % n, "pid"), 20)


# ---------------------------------------------------------------- Prometheus

def prometheus_targets(run, ports):
    """Points Prometheus at the stockd on PORTS (its file_sd file, renamed into place:
    Prometheus watches it and never reads half a file)."""
    d = _dir(run, "prometheus")
    tmp = os.path.join(d, "targets.json.tmp")
    with open(tmp, "w") as f:
        json.dump([{"targets": ["127.0.0.1:%d" % p for p in ports], "labels": {}}], f)
        f.write("\n")
    os.replace(tmp, os.path.join(d, "targets.json"))


def prometheus_ready(port):
    return http_status("http://127.0.0.1:%d/-/ready" % port) == 200


def prometheus_start(run, port):
    """Prometheus on PORT scraping the targets file with monitoring/stockd-rules.yml
    (interval STACK_PROMETHEUS_INTERVAL, default 5s); a running one reloads its
    configuration."""
    d = _dir(run, "prometheus")
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    targets = os.path.join(d, "targets.json")
    if not os.path.exists(targets):
        with open(targets, "w") as f:
            f.write("[]\n")
    interval = os.environ.get("STACK_PROMETHEUS_INTERVAL") or "5s"
    cfg = os.path.join(d, "prometheus.yml")
    with open(cfg + ".tmp", "w") as f:
        f.write("# Written by lab/servers.py (prometheus_start); rewritten on every start.\n"
                "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n"
                "rule_files:\n  - %s/monitoring/stockd-rules.yml\nscrape_configs:\n"
                "  - job_name: stockd\n    file_sd_configs:\n      - files: ['%s']\n"
                % (interval, interval, interval, SRC, targets))
    os.replace(cfg + ".tmp", cfg)
    pidfile = os.path.join(d, "pid")
    pid = proc.read_pid(pidfile)
    if pid is not None and proc.pid_runs(pid):
        os.kill(pid, signal.SIGHUP)
        return
    log = os.path.join(d, "prometheus.log")
    proc.spawn(["prometheus", "--config.file=" + cfg, "--storage.tsdb.path=" + os.path.join(d, "data"),
                "--storage.tsdb.retention.time=2d", "--web.listen-address=127.0.0.1:%d" % port,
                "--web.console.templates=/etc/prometheus/consoles",
                "--web.console.libraries=/etc/prometheus/console_libraries"], log, pidfile=pidfile)
    await_ready("Prometheus", pidfile, port, lambda: prometheus_ready(port), 30, log)


def prometheus_stop(run):
    proc.stop_pidfile(os.path.join(run, "prometheus", "pid"), 20)


# ---------------------------------------------------------------- stockd

def stockd_pidfile(run, i):
    return os.path.join(run, "stockd", "%d.pid" % i)


def stockd_answers(port):
    """True if stockd on PORT gives any HTTP answer to /health (503 while MariaDB is down
    is still an instance that is up)."""
    return http_status("http://127.0.0.1:%d/health" % port) is not None


def stockd_start(run, binary, i, port, lock, mysql_url, zk, extra=(), env=None):
    """Instance I (stockd-I) on PORT. ENV carries the passwords (never argv). An
    instance I that runs is stopped first."""
    d = _dir(run, "stockd")
    pidfile = stockd_pidfile(run, i)
    proc.stop_pidfile(pidfile, 10)
    log = os.path.join(d, "%d.log" % i)
    open(log, "wb").close()
    proc.spawn([binary, "--port", str(port), "--lock", lock, "--mysql", mysql_url, "--zk", zk,
                "--instance", "stockd-%d" % i] + list(extra), log, env=env, pidfile=pidfile)
    await_ready("stockd-%d" % i, pidfile, port, lambda: stockd_answers(port), 20, log)


def stockd_stop_all(run):
    d = os.path.join(run, "stockd")
    if not os.path.isdir(d):
        return
    for f in sorted(os.listdir(d)):
        if f.endswith(".pid"):
            proc.stop_pidfile(os.path.join(d, f), 20)


# ---------------------------------------------------------------- nginx

def nginx_start(run, port, upstream_ports, route="round-robin", rate_limit="", prom_port=0):
    """nginx on 127.0.0.1:PORT over the stockd on UPSTREAM_PORTS (lab/nginx.py renders
    nginx/nginx.conf.in; the live page reads the Prometheus on PROM_PORT, 0 for none); a running nginx of RUN reloads and returns once the old
    workers, with the old upstream list, are gone."""
    from . import nginx
    d = _dir(run, "nginx")
    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    text = nginx.render_native(d, port, ["127.0.0.1:%d" % p for p in upstream_ports], route, rate_limit,
                               prom_port=prom_port or 9)
    with open(conf + ".new", "w") as f:
        f.write(text)
    os.replace(conf + ".new", conf)
    pidfile = os.path.join(d, "nginx.pid")
    base = ["nginx", "-p", d, "-c", conf, "-e", os.path.join(d, "logs", "error.log")]
    master = proc.read_pid(pidfile)
    if master is not None and proc.pid_runs(master):
        old = [c for c in proc._children(master)]
        r = subprocess.run(base + ["-s", "reload"], capture_output=True)
        if r.returncode != 0:
            raise LabError("nginx reload failed: %s" % r.stderr.decode().strip())
        for w in old:
            if not proc.wait_until(30, lambda w=w: not proc.pid_runs(w)):
                raise LabError("nginx: old worker %d still running" % w)
        return
    r = subprocess.run(base, capture_output=True, stdin=subprocess.DEVNULL)
    log = os.path.join(d, "logs", "error.log")
    if r.returncode != 0:
        raise LabError("nginx did not start on port %d: %s; see %s"
                       % (port, r.stderr.decode().strip(), log))
    await_ready("nginx", pidfile, port,
                lambda: http_status("http://127.0.0.1:%d/nginx-health" % port) == 200, 10, log)


def nginx_stop(run):
    d = os.path.join(run, "nginx")
    pidfile = os.path.join(d, "nginx.pid")
    if proc.pid_alive(pidfile):
        subprocess.run(["nginx", "-p", d, "-c", os.path.join(d, "nginx.conf"), "-e",
                        os.path.join(d, "logs", "error.log"), "-s", "quit"], capture_output=True)
        if not proc.wait_until(10, lambda: not proc.pid_alive(pidfile)):
            proc.stop_pidfile(pidfile, 5)
