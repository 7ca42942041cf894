"""The nemesis's stack (loadtest/nemesis): nginx over 3 stockd, MariaDB behind the relay,
the lock service's servers, and the fault proxies on stockd-1's links, on the ports of
--port-base (the layout is in loadtest/nemesis's help). It starts and stops the servers,
and gives the faults (nemesis_faults.py) their levers: a server killed, paused or
resumed by its pid file, a link's proxy sent a command, the relay armed to hold a
COMMIT, MariaDB's clock moved. Servers come from lab/servers.py; a LabError of theirs
fails the run (RunFailed)."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from lab import LabError, proc, runspec, writer
from lab import servers as srv
from lab.redisstock import RedisStock
from lab.shop import Shop

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
DB, DB_USER, DB_PASS = "nemesis", "stockd", "nemesis-pw"
N_INSTANCES = 3


class RunFailed(Exception):
    """The run itself failed (a server did not start, the database could not be read)."""


def log(text):
    print(text, file=sys.stderr, flush=True)


def lab(fn, *args, **kw):
    """Calls FN of the lab library (lab/servers.py: a server's start or stop); its
    LabError, which names the server's log, fails the run."""
    try:
        return fn(*args, **kw)
    except LabError as e:
        raise RunFailed(str(e)) from None


def stockd_path(stockd_bin):
    return os.path.abspath(stockd_bin or os.path.join(SRC, "build", "service", "stockd"))


def fault_proxy_bin(stockd_bin):
    """The fault proxy (tests/support/fault_proxy_cli.c): $FAULT_PROXY_BIN, else the one
    built next to stockd (BUILD/service/stockd -> BUILD/tests/support/fault-proxy)."""
    if os.environ.get("FAULT_PROXY_BIN"):
        return os.environ["FAULT_PROXY_BIN"]
    return os.path.join(os.path.dirname(os.path.dirname(stockd_path(stockd_bin))), "tests",
                        "support", "fault-proxy")


def ensure_built(stockd_bin, out, writer_too=False):
    """Brings what a run needs up to date in stockd's build directory, as scripts/stack
    does for stockd (the demo builds stockd alone, and a pull leaves it stale): stockd,
    unless --stockd-bin names one, which is used as it is, and the fault proxy, unless
    $FAULT_PROXY_BIN names one, and with WRITER_TOO (mode redis-stock) the order writer,
    unless it is there next to a given stockd. A build directory that was never configured is
    configured only when it is the repository's own (SRC/build); otherwise the error says
    in one line what to run. The build's output goes to OUT/build.log."""
    stockd = stockd_path(stockd_bin)
    build = os.path.dirname(os.path.dirname(stockd))
    proxy = fault_proxy_bin(stockd_bin)
    targets = [] if stockd_bin else ["stockd"]
    if not os.environ.get("FAULT_PROXY_BIN") and (targets or not os.access(proxy, os.X_OK)):
        targets.append("fault-proxy")
    writer_bin = os.path.join(build, "writer", "stock-writer")
    if writer_too and (not stockd_bin or not os.access(writer_bin, os.X_OK)):
        targets.append("stock-writer")
    if not targets:
        return
    how = f"cmake -S {SRC} -B {build} && cmake --build {build} -j2 --target {' '.join(targets)}"
    configured = os.path.exists(os.path.join(build, "CMakeCache.txt"))
    if not configured and build != os.path.join(SRC, "build"):
        raise RunFailed(f"{build} is not a configured build directory; build what the "
                        f"nemesis needs with: {how}")
    missing = [t for t, path in (("stockd", stockd), ("fault-proxy", proxy),
                                 ("stock-writer", writer_bin))
               if t in targets and not os.access(path, os.X_OK)]
    if missing:
        log(f"nemesis: building {' and '.join(missing)} in {build} (log: {out}/build.log)")
    with open(os.path.join(out, "build.log"), "w") as f:
        cmds = [] if configured else [["cmake", "-S", SRC, "-B", build]]
        cmds.append(["cmake", "--build", build, "-j2", "--target", *targets])
        for cmd in cmds:
            if subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL) != 0:
                raise RunFailed(f"the build failed, see {out}/build.log; by hand: {how}")


def stockd_mode(stockd_bin, mode):
    """The row of mode in the table of modes of the stockd at stockd_bin (its
    --list-modes, read by lab/runspec.py): the one list of modes, and what each needs.
    Raises RunFailed if stockd has no such mode."""
    try:
        modes = runspec.stockd_modes(stockd_bin)
    except runspec.SpecError as e:
        raise RunFailed(str(e)) from None
    if mode not in modes:
        raise RunFailed(f"stockd has no mode '{mode}' (stockd --list-modes: "
                        f"{', '.join(modes)})")
    return modes[mode]


def apply_spec(args):
    """Reads --mode as a run spec (lab/runspec.py) into args: the lock mode, the spec's
    stockd arguments before --extra's, its route and commit-ms (--commit-ms, when given,
    wins). A bare lock mode keeps stockd's defaults, as it always meant here (the preset
    of the same name may add arguments: none's --batch-max 1). Returns the spec's label.
    The nemesis runs 3 instances and kills them itself (--faults kill9), so a spec's
    other instance count or its kill field is refused. Whether stockd has the mode is
    asked of the stockd under test once it is built (stockd_mode)."""
    spec = runspec.parse(args.mode)
    if args.mode == spec.mode:  # a word that names a mode (and the preset of that name)
        spec = runspec.Spec(label=args.mode, mode=args.mode)
    if spec.instances not in (None, N_INSTANCES):
        raise runspec.SpecError(f"the nemesis runs {N_INSTANCES} instances")
    if spec.kill:
        raise runspec.SpecError("the nemesis kills instances itself (--faults kill9)")
    args.mode = spec.mode
    args.extra = shlex.join(spec.stockd_args() + shlex.split(args.extra))
    args.route = spec.route or "round-robin"
    args.commit_ms = args.commit_ms or spec.commit_ms
    return spec.label


def lease_seconds(extra):
    """The session or lease the faults are timed against: the nemesis's 2 s, or what
    --extra sets."""
    s = 2.0
    for m in re.finditer(r"--(?:zk-session|redis-lease|db-lock-lease)-ms[ =](\d+)"
                         r"|--etcd-ttl-s[ =](\d+)", extra):
        s = int(m.group(1)) / 1000 if m.group(1) else float(m.group(2))
    return s


class Stack:
    """The servers of one run under OUT/run. ARGS are the nemesis's (mode, extra, route,
    commit_ms, port_base, stockd_bin); PRODUCTS maps each product to its first stock."""

    def __init__(self, args, out, products):
        self.args = args
        self.mode = args.mode
        self.products = products
        self.run = os.path.join(out, "run")
        b = args.port_base
        # The lock service's own servers take P+10.. in the modes without ZooKeeper:
        # RedLock's three Redis servers P+10..P+12, etcd's three members P+10..P+15
        # (clients P+10..P+12, peers P+13..P+15; lab/servers.py's EtcdCluster).
        self.ports = {"nginx": b, "mysql": b + 5, "relay": b + 6, "redis": b + 8, "zk": b + 10,
                      "redlock": b + 10, "etcd": b + 10}
        # stockd-1's links to ZooKeeper (one proxy per server) or Redis, each behind a
        # fault proxy that the partition and latency faults drive; its MariaDB link is
        # the relay's. The free ports of the 19: P+4, P+7, P+9.
        self.link_ports = {"zk": (b + 4, b + 7, b + 9), "redis": (b + 4,)}
        self.zk_hosts = ",".join(f"127.0.0.1:{b + 10 + i}" for i in range(3))
        self.env = dict(os.environ, STOCKD_MYSQL_PASSWORD=DB_PASS)
        self.stockd_bin = stockd_path(args.stockd_bin)
        self.uses_zk = None  # the mode's lock service is ZooKeeper: known once stockd is built
        self.fault_kinds = []  # the run's fault kinds: set by the run before it starts
        # Mode redis-stock: a primary (P+8) and a replica (P+10, replicating through the
        # fault proxy on P+9 until the first failover) watched by a Sentinel (P+11), and
        # the order writer; the redis-failover fault swaps the roles.
        self.redis_primary = b + 8
        self.writer_n = 0
        self.proxies = []  # the fault proxies' pid files
        self.db = None  # its servers (lab/servers.py): made with the run directory
        self.haproxy = None  # --galera: HAProxy before the cluster (self.db)
        self.db_clock = 0  # MariaDB's clock offset in seconds (mode db-lock)

    # ------------------------------------------------------------ start and stop

    def servers(self):
        """The servers under RUN (lab/servers.py), once the run directory is made."""
        run, p = self.run, self.ports
        if self.args.galera:
            # --galera: three nodes from P+20 (lab/ports.py's galera_ports) and HAProxy on
            # the MariaDB port, the relay before it as before.
            pw = "nemesis-check"
            self.db = srv.GaleraCluster(run, self.args.port_base + 20, pw)
            self.haproxy = srv.HAProxy(run, p["mysql"], self.db.ports(), pw)
        else:
            self.db = srv.MariaDB(run, p["mysql"])
            self.haproxy = None
        self.zk = srv.ZkEnsemble(run, p["zk"])
        self.redis = srv.Redis(run, p["redis"])
        self.redis_replica = srv.Redis(run, p["redis"] + 2, "redis2", master=p["redis"] + 1)
        self.sentinel = srv.Sentinel(run, p["redis"] + 3, p["redis"])
        self.redlock = [srv.Redis(run, q, f"redlock{n}")
                        for n, q in enumerate(self.redlock_ports(), 1)]
        self.etcd = srv.EtcdCluster(run, p["etcd"])
        self.nginx = srv.Nginx(run, p["nginx"], [p["nginx"] + i for i in range(1, N_INSTANCES + 1)],
                               self.args.route)

    def start(self):
        self.make_run_dir()
        self.servers()
        self.start_mysql()
        lab(self.db.create_db, DB, DB_USER, DB_PASS)
        self.seed_products()
        self.start_proxies()
        if self.uses_zk:
            lab(self.zk.start)
        if self.mode == "redis":
            lab(self.redis.start)
        if self.mode == "redis-stock":
            self.start_redis_stock()
        for r in self.redlock:
            lab(r.start)
        if self.mode == "etcd":
            lab(self.etcd.start)
        for i in range(1, N_INSTANCES + 1):
            lab(self.start_stockd, i)
        lab(self.nginx.start)

    def start_redis_stock(self):
        """Mode redis-stock's servers: the primary, its replica behind the replication
        link's fault proxy, the Sentinel once it sees the replica, and the order writer."""
        lab(self.redis.start)
        self.start_proxy("redis-repl", self.redis.port + 1, self.redis.port, "raw",
                         self.control_file("redis-repl"))
        lab(self.redis_replica.start)
        if not proc.wait_until(20, self.redis_replica.linked):
            raise RunFailed("the Redis replica never linked to the primary")
        lab(self.sentinel.start)
        if not proc.wait_until(20, lambda: str(self.redis_replica.port) in str(
                srv.redis_cmd(self.sentinel.port, "SENTINEL", "replicas", "stockd"))):
            raise RunFailed("the Sentinel never saw the Redis replica")
        self.start_writer()

    def writer_bin(self):
        return os.path.join(os.path.dirname(os.path.dirname(self.stockd_bin)), "writer",
                            "stock-writer")

    def start_writer(self):
        """A new order writer (w1, w2, ...) on the current primary."""
        self.writer_n += 1
        lab(writer.start, self.run, self.writer_bin(), f"w{self.writer_n}",
            f"127.0.0.1:{self.redis_primary}",
            f"mysql://{DB_USER}@127.0.0.1:{self.ports['mysql']}/{DB}", ["--claim-idle-ms", "500"],
            self.env)

    def writer_pidfile(self):
        return f"writer-w{self.writer_n}/pid"

    def redis_stock(self):
        """The stock of mode redis-stock on the current primary (lab/redisstock.py)."""
        return RedisStock.at(f"127.0.0.1:{self.redis_primary}")

    def seed_products(self):
        """The products at their first stock, no orders, and the restocks' own ledger, in
        the run's private database (the service user has no grant on it): the checker
        takes the committed restocks from it."""
        ids = tuple(self.products)
        self.sql("""CREATE TABLE nemesis_restock (id INT PRIMARY KEY, product_id INT NOT NULL,
                    amount INT NOT NULL, at TIMESTAMP(6) NOT NULL, after_order BIGINT NOT NULL)""",
                 "DELETE FROM orders", "DELETE FROM restock", "DELETE FROM product_segment",
                 ("DELETE FROM product WHERE id NOT IN %s", (ids,)),
                 *[("INSERT INTO product (id, product_name, stock, fence) VALUES (%s, %s, %s, 0) "
                    "ON DUPLICATE KEY UPDATE stock=%s, fence=0", (p, f"nemesis-{p}", n, n))
                   for p, n in self.products.items()])

    def start_proxies(self):
        """The relay before MariaDB, and the fault proxies of stockd-1's other links."""
        self.start_proxy("relay", self.ports["relay"], self.ports["mysql"], "mysql",
                         self.control_file("db"), "--arm-file", self.arm_file(),
                         *(["--delay-commit-ms", str(self.args.commit_ms)]
                           if self.args.commit_ms else []))
        if self.uses_zk:
            for n, q in enumerate(self.link_ports["zk"]):
                self.start_proxy(f"zk{n + 1}", q, self.ports["zk"] + n, "zk",
                                 self.control_file("zk", n + 1))
        if self.mode == "redis":
            self.start_proxy("redis", self.link_ports["redis"][0], self.ports["redis"], "redis",
                             self.control_file("redis"))

    def start_stockd(self, i):
        """Starts stockd-I with the nemesis's options, then --extra's; raises LabError if
        it does not answer."""
        # --commit-ms puts every instance behind the relay, which then slows every COMMIT.
        behind = i == 1 or self.args.commit_ms > 0
        mysql_port = self.ports["relay"] if behind else self.ports["mysql"]
        url = f"mysql://{DB_USER}@127.0.0.1:{mysql_port}/{DB}"
        zk = self.zk_hosts if self.uses_zk else "127.0.0.1:1"
        redis_port = self.ports["redis"]
        if i == 1:  # behind the fault proxies
            zk = ",".join(f"127.0.0.1:{q}" for q in self.link_ports["zk"]) if self.uses_zk else zk
            redis_port = self.link_ports["redis"][0]
        # The think time keeps holders inside their check-to-commit window long enough
        # for the faults to meet them there, and for deductions to queue behind a batch.
        base = ["--think-us", "150000", "--think-jitter-us", "100000", "--zk-session-ms", "2000",
                "--redis-lease-ms", "2000", "--db-lock-lease-ms", "2000",
                "--lock-timeout-ms", "8000", "--queue-deadline-ms", "10000"]
        if self.mode == "redis":
            base += ["--redis", f"127.0.0.1:{redis_port}"]
        elif self.mode == "redis-stock":
            # Restocks go through the API there (nemesis_clients.py): the token it asks for.
            srv.secret_file(self.admin_token_file())
            base += ["--redis", f"127.0.0.1:{self.redis_primary}",
                     "--admin-token-file", self.admin_token_file()]
        elif self.mode == "redlock":
            base += ["--redis", ",".join(f"127.0.0.1:{q}" for q in self.redlock_ports())]
        elif self.mode == "etcd":
            base += ["--etcd", ",".join(f"127.0.0.1:{self.ports['etcd'] + n}" for n in range(3)),
                     "--etcd-ttl-s", "2"]
        extra = shlex.split(self.args.extra)
        if self.owner_routing():
            ports = [self.ports["nginx"] + n for n in range(1, N_INSTANCES + 1)]
            base += srv.owner_route_args(self.ports["nginx"] + i, ports,
                                         os.path.join(self.run, "peer.secret"), self.uses_zk)
        srv.Stockd(self.run, i, self.ports["nginx"] + i, self.stockd_bin, self.mode, url, zk,
                   base + extra, self.env).start()

    def owner_routing(self):
        """The instances route by owner (the spec's route=owner, or --route owner in
        --extra): each then gets its address and the peers' secret (made once, 0600),
        and the list of instances when the mode has no ZooKeeper to hold the view."""
        extra = shlex.split(self.args.extra)
        owner = self.args.route == "owner" or any(
            a == "--route" and extra[k + 1:k + 2] == ["owner"] or a == "--route=owner"
            for k, a in enumerate(extra))
        if owner:
            srv.secret_file(os.path.join(self.run, "peer.secret"))
        return owner

    def admin_token_file(self):
        """RUN/admin-token (0600), stockd's --admin-token-file in mode redis-stock."""
        return os.path.join(self.run, "admin-token")

    def restart_stockd(self, i):
        """Starts stockd-I again, retrying for 60 s: stockd exits at start-up when it
        cannot reach ZooKeeper (an ensemble without quorum, in the middle of the faults),
        and a supervisor (systemd's Restart=) would start it again."""
        deadline = time.time() + 60
        while True:
            try:
                self.start_stockd(i)
                return
            except LabError as e:
                if time.time() > deadline:
                    raise RunFailed(f"stockd-{i} did not start again within 60 s: {e}") from None
            time.sleep(1)

    def start_mysql(self):
        """Starts MariaDB; in mode db-lock under libfaketime, whose offset (the file
        RUN/mysql.faketime, read at every clock call) the clock faults move. Only the
        wall clock is faked: the server's own timers keep the true monotonic clock."""
        env = None
        if self.mode == "db-lock":
            if not os.path.exists(FAKETIME_LIB):
                raise RunFailed(f"mode db-lock's clock faults need libfaketime ({FAKETIME_LIB}; "
                                f"scripts/deps installs it)")
            if not os.path.exists(self.faketime_file()):
                self.set_db_clock(0)
            env = dict(self.env, LD_PRELOAD=FAKETIME_LIB,
                       FAKETIME_TIMESTAMP_FILE=self.faketime_file(), FAKETIME_NO_CACHE="1",
                       FAKETIME_DONT_FAKE_MONOTONIC="1")
        if self.haproxy:
            if env:
                raise RunFailed("--galera has no clock faults (mode db-lock)")
            lab(self.db.start)
            lab(self.haproxy.start)
            return
        self.db.env = env
        lab(self.db.start)

    def start_proxy(self, name, port, upstream, proto, control, *more):
        """A fault proxy on PORT before 127.0.0.1:UPSTREAM, driven through CONTROL (and
        MORE of its options); its output in RUN/proxy-NAME.log, its pid in
        RUN/proxy-NAME.pid. Returns once it listens."""
        path = os.path.join(self.run, f"proxy-{name}.log")
        pidfile = os.path.join(self.run, f"proxy-{name}.pid")
        open(path, "w").close()
        self.proxies.append(pidfile)
        lab(proc.spawn, [fault_proxy_bin(self.args.stockd_bin), "--listen", str(port),
                         "--proto", proto, "--upstream", f"127.0.0.1:{upstream}",
                         "--control", control, *more], path, pidfile=pidfile)
        lab(srv.await_ready, f"the fault proxy {name}", pidfile, port,
            lambda: "ready" in proc.tail(path), 10, path)

    def make_run_dir(self):
        """OUT/run, or, when MariaDB's socket path would be too long there (over 107
        bytes, the limit of a Unix socket address), a short directory in /tmp that
        OUT/run links to."""
        if os.path.islink(self.run):
            os.unlink(self.run)
        if len(os.path.join(self.run, "mysql", "sock")) > 100:
            short_run = tempfile.mkdtemp(prefix="nemesis-")
            if os.path.isdir(self.run):
                shutil.rmtree(self.run)
            os.symlink(short_run, self.run)
            self.run = short_run
        os.makedirs(self.run, exist_ok=True)

    def stop_stockd(self):
        """nginx and every stockd, the lock service and the database left running."""
        for i in range(1, N_INSTANCES + 1):  # a stopped process could not take SIGTERM
            self.resume(f"stockd/{i}.pid")
        srv.Nginx(self.run).stop()
        srv.Stockd.stop_all(self.run)

    def stop_servers(self):
        for pidfile in self.proxies:
            proc.stop_pidfile(pidfile, 5)
        if self.db is None:  # the run directory was not made: nothing started
            return
        for n in range(1, self.writer_n + 1):
            writer.stop(self.run, f"w{n}")
        for server in [self.sentinel, self.redis, self.redis_replica, *self.redlock, self.etcd,
                       self.zk, self.haproxy, self.db]:
            if server is None:
                continue
            server.stop()

    def drop_data(self):
        """Removes the servers' data (about 110 MB a run), keeping their logs."""
        for d in ["mysql/data"] + [f"{s}{n}/data" for s in ("zk", "etcd", "galera")
                                   for n in (1, 2, 3)]:
            shutil.rmtree(os.path.join(self.run, d), ignore_errors=True)

    # ------------------------------------------------------------ what runs where

    def redlock_ports(self):
        """The ports of mode redlock's three Redis servers (none in the other modes)."""
        return [self.ports["redlock"] + n for n in range(3)] if self.mode == "redlock" else []

    def lock_servers(self):
        """The lock service's own servers that the lock-server faults stop: (name, pid
        file under RUN, the command line's marker (proc.signal_ours), how to start it
        again)."""
        if self.mode == "redlock":
            return [(r.name, f"{r.name}/pid", f"127.0.0.1:{r.port}".encode(), r.start)
                    for r in self.redlock]
        if self.mode == "etcd":
            return [(m.name, f"{m.name}/pid", self.run.encode(), self.etcd.start)
                    for m in self.etcd.members]
        return []

    def sql(self, *statements):
        """Runs STATEMENTS (each a query, or a (query, args) pair) as root on the private
        MariaDB, in one connection; returns the last one's rows."""
        try:
            with Shop(self.run, DB) as db:
                rows = ()
                for st in statements:
                    q, a = (st, ()) if isinstance(st, str) else st
                    rows = db.rows(q, a)
                return rows
        except Exception as e:  # pymysql's errors, and OSError: the database is unreadable
            raise RunFailed(f"SQL failed: {e}") from None

    def health(self, i):
        """stockd-I's /health: (status, body), status 0 if it gave no answer."""
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.ports['nginx'] + i}/health", timeout=3) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except (OSError, urllib.error.URLError) as e:
            return 0, str(e)

    def await_healthy(self):
        """Waits up to 60 s for every stockd to answer /health with 200; RunFailed if one
        does not."""
        for i in range(1, N_INSTANCES + 1):
            deadline = time.time() + 60
            while (h := self.health(i))[0] != 200:
                if time.time() > deadline:
                    raise RunFailed(f"stockd-{i} did not become healthy after the faults: "
                                    f"{h[0]} {h[1].strip()}; {self.diagnose()}")
                time.sleep(0.2)

    def diagnose(self):
        """One line on the stack's state, for a run that failed."""
        parts = [f"stockd-{i} /health {self.health(i)[0]}" for i in range(1, N_INSTANCES + 1)]
        if self.uses_zk:
            for m in self.zk.members:
                parts.append(f"{m.name} {m.mode() or 'down'}")
        return ", ".join(parts)

    # ------------------------------------------------------------ the faults' levers

    def marker(self, pidfile):
        """What the command line of the server in RUN/PIDFILE holds: a stockd its --port,
        a writer its --consumer, MariaDB and ZooKeeper their files under RUN."""
        m = re.match(r"stockd/(\d+)\.pid$", pidfile)
        if m:
            return b"--port\0" + str(self.ports["nginx"] + int(m.group(1))).encode() + b"\0"
        m = re.match(r"writer-(w\d+)/pid$", pidfile)
        if m:
            return b"--consumer\0" + m.group(1).encode() + b"\0"
        return self.run.encode()

    def kill9(self, pidfile, marker=None):
        """kill -9 of the server in RUN/PIDFILE (proc.kill_pidfile): gone, its pid file
        removed, so that its start function starts it again."""
        proc.kill_pidfile(os.path.join(self.run, pidfile), marker or self.marker(pidfile))

    def pause(self, pidfile, marker=None):
        proc.pause_pidfile(os.path.join(self.run, pidfile), marker or self.marker(pidfile))

    def resume(self, pidfile, marker=None):
        proc.resume_pidfile(os.path.join(self.run, pidfile), marker or self.marker(pidfile))

    def control_file(self, link, n=None):
        return os.path.join(self.run, f"link-{link}{n or ''}.ctl")

    def links(self, link):
        """The control files of stockd-1's link to LINK (db, zk or redis)."""
        if link == "zk":
            return [self.control_file("zk", n) for n in (1, 2, 3)]
        return [self.control_file(link)]

    def control(self, link, *lines):
        """Sends LINES to every proxy of stockd-1's link to LINK, at once (the proxy
        reads its file within 20 ms). Waits first, up to 2 s, for an earlier file to be
        taken, so that no command is overwritten unread."""
        for path in self.links(link):
            deadline = time.time() + 2
            while os.path.exists(path) and time.time() < deadline:
                time.sleep(0.01)
            with open(path + ".tmp", "w") as f:
                f.write("".join(line + "\n" for line in lines))
            os.rename(path + ".tmp", path)

    def proxy_applied(self, name, line):
        """True once the fault proxy NAME (start_proxy) has applied control LINE: it
        prints "control: LINE" then."""
        log = proc.tail(os.path.join(self.run, f"proxy-{name}.log"), 100)
        return f"control: {line}" in log.splitlines()

    def arm_file(self):
        return os.path.join(self.run, "relay.arm")

    def arm_commit_hold(self, seconds, skip):
        """Arms the relay: it holds the (SKIP+1)-th next COMMIT for SECONDS."""
        tmp = self.arm_file() + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{seconds:.3f} {skip}\n")
        os.rename(tmp, self.arm_file())

    def disarm(self):
        try:
            os.unlink(self.arm_file())  # not taken: no COMMIT came
        except OSError:
            pass

    def commit_held(self):
        """True once the relay took the armed hold (it holds a COMMIT)."""
        return not os.path.exists(self.arm_file())

    def faketime_file(self):
        return os.path.join(self.run, "mysql.faketime")

    def set_db_clock(self, offset):
        """MariaDB's clock OFFSET whole seconds from the true one, at once (mode db-lock)."""
        self.db_clock = offset
        tmp = self.faketime_file() + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{offset:+d}\n")
        os.rename(tmp, self.faketime_file())
