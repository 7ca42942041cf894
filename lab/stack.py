"""The operator's local stack: a private MariaDB (or with --galera 3 a three-node Galera
cluster behind HAProxy), ZooKeeper (standalone or a
three-server ensemble), a Redis (with --redis-sentinel also a replica and a Sentinel),
RedLock's three more Redis servers in mode redlock, an etcd in mode etcd, N stockd
instances, nginx over them and Prometheus scraping them, all on loopback under one run
directory. scripts/stack is its command line.

Around the servers (lab/servers.py) it adds what an operator needs: packages, a fresh
build, the `shop` database and its service user, and one state file (lab/state.py) that
remembers the ports and the stockd settings so that status, env and down need no
arguments. Every operation is idempotent. Errors are raised as LabError; progress
notes go to stderr, the status table and env lines to stdout.
"""

import json
import os
import shlex
import subprocess
import sys

from . import LabError
from .backing import Backing
from . import ports as portmod
from . import proc
from . import runspec
from . import servers as srv
from . import state as statemod
from . import orders
from . import writer
from .redisstock import RedisStock

DB = "shop"
DB_USER = "stockd"
SRC = srv.SRC


def note(msg):
    print("stack: %s" % msg, file=sys.stderr, flush=True)


class Stack:
    """The stack under one run directory (STACK_RUN, default <repo>/.run)."""

    def __init__(self, run=None):
        run = run or os.environ.get("STACK_RUN") or os.path.join(SRC, ".run")
        self.run = os.path.abspath(run)
        self.st = statemod.load(self.run)

    # ---------------------------------------------------------------- small facts

    def need_state(self):
        if self.st is None:
            raise LabError("no stack under %s (run: scripts/stack up)" % self.run)
        return self.st

    def path(self, *parts):
        return os.path.join(self.run, *parts)

    def stockd_port(self, i):
        return portmod.stockd_port(self.st["base"], i)

    def stockd_ports(self):
        return [self.stockd_port(i) for i in range(1, self.st["instances"] + 1)]

    def redlock_ports(self):
        return [self.st["redlock_port"] + i for i in range(3)]

    def zk_hosts(self):
        if self.st["zk_ensemble"]:
            return self.zk().hosts()
        return "127.0.0.1:%d" % self.st["zk_port"]

    # ---------------------------------------------------------------- its servers
    # Each built from the state's ports; with no state, a server that can only be stopped.

    def port(self, name):
        return self.st[name] if self.st else None

    def backing(self):
        """Its backing servers (lab/backing.py) on the state's ports."""
        st = self.st
        ports = {k: st[k + "_port"] for k in ("mysql", "zk", "redis", "redis_replica", "sentinel",
                                               "etcd", "prometheus")} if st else {}
        if st:
            ports["redlock"] = self.redlock_ports()
            if st["galera"]:
                ports["galera"] = st["galera_port"]
        return Backing(self.run, ports, bool(st and st["zk_ensemble"]),
                       self._read_secret("redis-password") or None,
                       self._secret("galera-check-password") if st and st["galera"] else None)

    def mysql(self):
        return self.backing().mysql()

    def zk(self, ensemble=None):
        """The ZooKeeper of the state (ENSEMBLE: of that kind instead)."""
        return self.backing().zk(ensemble)

    def redis(self, name="redis"):
        """The Redis NAME (redis, redis-replica, redlockN), with the stack's password."""
        return self.backing().redis(name)

    def redlock(self):
        return self.backing().redlock()

    def sentinel(self):
        return self.backing().sentinel()

    def etcd(self):
        return self.backing().etcd()

    def nginx(self):
        st = self.st
        return srv.Nginx(self.run, st["nginx_port"], self.stockd_ports(), st["route"],
                         st["rate_limit"], st["prometheus_port"] or 0) if st else srv.Nginx(self.run)

    def prometheus(self):
        return self.backing().prometheus()

    def stockd_mysql_port(self, i):
        """Where instance I connects: MariaDB, or HAProxy's writer port; with
        --multi-writer Galera node ((I-1) mod 3)+1 itself (the experiment's anti-pattern)."""
        st = self.st
        if st["galera"] and st["multi_writer"]:
            return portmod.galera_ports(st["galera_port"])[(i - 1) % 3][0]
        return st["mysql_port"]

    def stockd(self, i, env=None):
        st = self.st
        return srv.Stockd(self.run, i, self.stockd_port(i), st["bin"], st["lock"],
                          "mysql://%s@127.0.0.1:%d/%s" % (DB_USER, self.stockd_mysql_port(i), DB),
                          self.zk_hosts(), self.admin_args() + self.route_args(i) + st["extra"], env)

    def admin_args(self):
        """--admin-token-file RUN/admin-token, which stockd's restock asks for (made on
        first use, 0600, like the passwords); nothing for a stockd older than the option."""
        if not srv.stockd_has_option(self.st["bin"], "--admin-token-file"):
            return []
        self.admin_token()
        return ["--admin-token-file", self.path("admin-token")]

    def admin_token(self):
        return self._secret("admin-token")

    def route_args(self, i):
        """Instance I's owner-routing arguments with --route owner (lab/servers.py's
        owner_route_args; membership by ZooKeeper where the lock mode uses it, else the
        list of the stack's instances), none with a route of nginx's."""
        st = self.st
        if st["route"] != "owner":
            return []
        self.peer_secret()
        try:
            zk = runspec.stockd_modes(st["bin"]).get(st["lock"])
        except runspec.SpecError as e:
            raise LabError(str(e)) from None
        return srv.owner_route_args(self.stockd_port(i), self.stockd_ports(),
                                    self.path("peer.secret"),
                                    bool(zk and zk.service == "zookeeper"))

    def _secret(self, name):
        """The password in RUN/NAME, made on first use (0600; it reaches the servers
        and stockd only through files and environments, never argv)."""
        return srv.secret_file(self.path(name))

    def db_password(self):
        return self._secret("mysql-password")

    def redis_password(self):
        return self._secret("redis-password")

    def peer_secret(self):
        """The stockd instances' shared secret for each other's /peer/ endpoints (owner
        routing), in RUN/peer.secret like the passwords."""
        return self._secret("peer.secret")

    def _read_secret(self, name):
        try:
            with open(self.path(name)) as fh:
                return fh.read().strip()
        except OSError:
            return ""

    # ---------------------------------------------------------------- health

    def mysql_up(self):
        if self.st and self.st["galera"]:
            return self.mysql().up() and self.backing().haproxy().up()
        return srv.MariaDB(self.run).up()  # on whatever port

    def zk_up(self):
        """ZooKeeper serves; for the ensemble: a quorum does (a member serves only within one)."""
        if self.st["zk_ensemble"]:
            return any(m.up() for m in self.zk().members)
        return self.zk().up()

    def stockd_up(self, i):
        """Instance I runs and its /health says 200."""
        return (self.stockd(i).running() and srv.http_status(
            "http://127.0.0.1:%d/health" % self.stockd_port(i)) == 200)

    def pidfiles(self):
        names = ["mysql/pid", "zk/pid", "zk1/pid", "zk2/pid", "zk3/pid", "redis/pid", "etcd/pid",
                 "nginx/nginx.pid", "redlock1/pid", "redlock2/pid", "redlock3/pid",
                 "redis-replica/pid", "sentinel/pid", "prometheus/pid", "writer-1/pid",
                 "galera1/pid", "galera2/pid", "galera3/pid", "haproxy/pid"]
        out = [self.path(n) for n in names]
        d = self.path("stockd")
        if os.path.isdir(d):
            out += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".pid")]
        return out

    def anything_runs(self):
        return any(proc.pid_alive(f) for f in self.pidfiles())

    # ---------------------------------------------------------------- build

    def ensure_binary(self):
        """The stockd binary: STOCKD_BIN as it is, or STACK_BUILD's (default
        <repo>/build), built when missing or older than a source file."""
        given = os.environ.get("STOCKD_BIN")
        if given:
            if not (os.path.isfile(given) and os.access(given, os.X_OK)):
                raise LabError("STOCKD_BIN=%s is not an executable file" % given)
            return given
        build = os.path.abspath(os.environ.get("STACK_BUILD") or os.path.join(SRC, "build"))
        binary = os.path.join(build, "service", "stockd")
        if os.path.isfile(binary):
            newer = self._newer_source(os.path.getmtime(binary), build)
            if newer is None:
                return binary
            note("rebuilding: %s is newer than %s" % (newer, binary))
        else:
            note("building stockd in %s" % build)
        os.makedirs(self.run, exist_ok=True)
        log = self.path("build.log")
        targets = ["stockd"]
        if os.path.isfile(os.path.join(SRC, "writer", "CMakeLists.txt")):
            targets.append("stock-writer")  # mode redis-stock's order writer
        try:
            with open(os.path.join(SRC, "loadtest", "CMakeLists.txt")) as f:
                if "add_executable(stockload" in f.read().replace("( ", "("):
                    targets.append("stockload")
        except OSError:
            pass
        with open(log, "wb") as out:
            ok = subprocess.run(["cmake", "-S", SRC, "-B", build], stdout=out, stderr=out,
                                stdin=subprocess.DEVNULL).returncode == 0 and subprocess.run(
                ["cmake", "--build", build, "-j2", "--target"] + targets, stdout=out, stderr=out,
                stdin=subprocess.DEVNULL).returncode == 0
        if not ok:
            print(proc.tail(log, 30), file=sys.stderr)
            raise LabError("build failed; full log: %s" % log)
        if not os.access(binary, os.X_OK):
            raise LabError("the build did not produce %s; see %s" % (binary, log))
        return binary

    def _newer_source(self, mtime, build):
        skip = {".git", ".run"}
        for root, dirs, files in os.walk(SRC):
            dirs[:] = [d for d in dirs if d not in skip and not d.startswith("build")
                       and os.path.join(root, d) not in (build, self.run)]
            for f in files:
                if f.endswith((".c", ".h", ".cmake")) or f == "CMakeLists.txt":
                    p = os.path.join(root, f)
                    if os.path.getmtime(p) > mtime:
                        return p
        return None

    # ---------------------------------------------------------------- database

    def ensure_db(self, pw, db):
        """`shop` with the schema, the seed and the service user on the first `up` on
        the MariaDB DB; later the data is kept (an experiment may be looking at it), the
        schema re-applied (CREATE TABLE IF NOT EXISTS) and the user made sure of."""
        rows = db.query("SELECT COUNT(*) FROM information_schema.tables "
                               "WHERE table_schema=%s AND table_name IN ('product','orders')", (DB,))
        if rows[0][0] != 2:
            note("creating database %s (schema + seed) and user %s" % (DB, DB_USER))
            db.create_db(DB, DB_USER, pw)
        else:
            db.source(DB, os.path.join(SRC, "sql", "schema.sql"))
            db.grant_service_user(DB, DB_USER, pw)

    # ---------------------------------------------------------------- stockd and nginx

    def stockd_env(self):
        """stockd's environment: the passwords, and where its Redis and etcd are."""
        st = self.st
        env = dict(os.environ)
        env["STOCKD_MYSQL_PASSWORD"] = self.db_password()
        env["STOCKD_REDIS_USER"] = srv.redis_user()
        env["STOCKD_REDIS_PASSWORD"] = self.redis_password()
        if st["redis_port"]:
            env["STOCKD_REDIS"] = "127.0.0.1:%d" % st["redis_port"]
        if st["redis_sentinel"]:
            p = self.sentinel().primary()
            if p:
                if p != "127.0.0.1:%d" % st["redis_port"]:
                    note("Redis primary after a failover: %s" % p)
                env["STOCKD_REDIS"] = p
        if st["lock"] == "redlock":
            env["STOCKD_REDIS"] = ",".join("127.0.0.1:%d" % p for p in self.redlock_ports())
        if st["etcd_port"]:
            env["STOCKD_ETCD"] = "127.0.0.1:%d" % st["etcd_port"]
        return env

    def start_stockd(self, i, env):
        self.stockd(i, env).start()

    def start_stockd_all(self):
        """Instances 1..N with the state's lock and extra args, after stopping those
        that ran before; then nginx and Prometheus are pointed at them."""
        st = self.st
        srv.Stockd.stop_all(self.run)
        env = self.stockd_env()
        for i in range(1, st["instances"] + 1):
            try:
                self.start_stockd(i, env)
            except LabError as e:
                raise LabError("stockd-%d did not become healthy on port %d (lock %s): %s"
                               % (i, self.stockd_port(i), st["lock"], e))
        self.start_writer(env)
        self.start_nginx()

    def start_writer(self, env):
        """Mode redis-stock's order writer (one, consumer `1`, lab/writer.py) on stockd's
        Redis, restarted with stockd (so after a failover it follows the new primary
        too); stopped in every other mode."""
        st = self.st
        writer.stop(self.run, "1")
        if st["lock"] != "redis-stock":
            return
        binary = os.path.join(os.path.dirname(os.path.dirname(st["bin"])), "writer", "stock-writer")
        if not os.access(binary, os.X_OK):
            raise LabError("mode redis-stock needs the order writer %s (cmake --build ... "
                           "--target stock-writer)" % binary)
        writer.start(self.run, binary, "1", env["STOCKD_REDIS"],
                     "mysql://%s@127.0.0.1:%d/%s" % (DB_USER, st["mysql_port"], DB), env=env,
                     metrics_port=self.writer_metrics_port())
        # The tools wait for the drain only once a writer has joined the stream's group
        # (lab/redisstock.py): up returns when it has.
        if not proc.wait_until(20, self.writer_up):
            log = self.path("writer-1", "log")
            raise LabError("the order writer did not join the stream's group within 20 s; see "
                           "%s:\n%s" % (log, proc.tail(log, 5)))

    def writer_metrics_port(self):
        """The port of writer 1's /metrics (scraped by the stack's Prometheus)."""
        return self.st["base"] + portmod.OFFSETS["writer_metrics"]

    def writer_up(self):
        """Writer 1 runs and is a consumer of the stream's group."""
        if not proc.pid_alive(self.path("writer-1", "pid")):
            return False
        redis = RedisStock.of(self.run)
        return bool(redis and "1" in redis.consumers())

    def start_nginx(self):
        self.nginx().start()
        writers = [self.writer_metrics_port()] if self.st["lock"] == "redis-stock" else []
        self.prometheus().targets(self.stockd_ports(), writers)

    def stockd_current(self):
        """True if instances 1..N all answer, started after the binary was built, and
        no other instance runs: `up` then leaves them alone."""
        for i in range(1, self.st["instances"] + 1):
            f = self.stockd(i).pidfile
            if not self.stockd_up(i) or os.path.getmtime(f) <= os.path.getmtime(self.st["bin"]):
                return False
        d = self.path("stockd")
        n = sum(1 for f in os.listdir(d) if f.endswith(".pid") and proc.pid_alive(os.path.join(d, f)))
        return n == self.st["instances"]

    def lock_servers(self):
        """The servers the state's lock mode alone needs (RedLock's, etcd)."""
        self.redis_password()  # made on first use; the backing servers read it
        self.backing().lock_servers(self.st["lock"])

    # ---------------------------------------------------------------- commands

    def up(self, instances=None, lock=None, extra=(), zk_ensemble=False, redis_sentinel=False,
           route=None, rate_limit="", deps=True, galera=0, multi_writer=False):
        """Starts what is not running (see `scripts/stack up --help`)."""
        base = portmod.check_base(os.environ.get("STACK_PORT_BASE") or str(portmod.BASES["stack"]))
        want = portmod.layout(base, zk_ensemble)
        want["galera"] = base + portmod.OFFSETS["galera"] if galera else None
        old = self.st
        had_state = old is not None
        zk_same = not had_state or bool(old["zk_ensemble"]) == zk_ensemble
        if had_state and self.anything_runs():
            now = [old["mysql_port"], old["redis_port"], old["nginx_port"],
                   old["prometheus_port"] or want["prometheus"], old["base"]]
            req = [want["mysql"], want["redis"], want["nginx"], want["prometheus"], base]
            now.append(bool(old["galera"]))
            req.append(bool(galera))
            if zk_same:
                now.append(old["zk_port"])
                req.append(want["zk"])
            if now != req:
                raise LabError("the stack under %s runs on other ports (base %s); run: scripts/stack down"
                               % (self.run, old["base"]))
        os.makedirs(self.run, exist_ok=True)
        if deps:
            profiles = ["demo"] + (["etcd"] if lock == "etcd" else []) + (
                ["sentinel"] if redis_sentinel else []) + (["galera"] if galera else [])
            if subprocess.run([os.path.join(SRC, "scripts", "deps")] + profiles,
                              stdin=subprocess.DEVNULL).returncode != 0:
                raise LabError("installing packages failed (scripts/deps %s)" % " ".join(profiles))
        binary = self.ensure_binary()
        st = dict(statemod.DEFAULTS)
        st.update(base=base, mysql_port=want["mysql"], zk_port=want["zk"], redis_port=want["redis"],
                  nginx_port=want["nginx"], prometheus_port=want["prometheus"],
                  redlock_port=want["redlock"], redis_replica_port=want["redis_replica"],
                  sentinel_port=want["sentinel"], etcd_port=want["etcd"],
                  instances=instances or 3, lock=lock or "none", bin=binary, extra=list(extra),
                  zk_ensemble=zk_ensemble, redis_sentinel=redis_sentinel,
                  route=route or "round-robin", rate_limit=rate_limit or "",
                  galera=galera or 0, galera_port=want["galera"],
                  multi_writer=bool(galera and multi_writer))
        keep = (had_state and zk_same and old["instances"] == st["instances"]
                and old["lock"] == st["lock"] and old["bin"] == binary and old["extra"] == st["extra"]
                and old["galera"] == st["galera"] and old["multi_writer"] == st["multi_writer"]
                and (old["route"] == "owner") == (st["route"] == "owner"))
        portmod.check_distinct(st)
        # The other kind of ZooKeeper goes first: its ports may be the new one's.
        self.zk(not zk_ensemble).stop()
        # A standalone MariaDB and HAProxy share the mysql port: the other kind goes first.
        if galera:
            srv.MariaDB(self.run).stop()
        else:
            Backing(self.run).haproxy().stop()
            srv.GaleraCluster(self.run, None).stop()
        self.st = st
        statemod.save(self.run, st)

        pw = self.db_password()
        self.redis_password()  # made on first use; the backing servers read it
        self.backing().start(db=lambda db: self.ensure_db(pw, db), sentinel=redis_sentinel,
                             redlock=st["lock"] == "redlock", etcd=st["lock"] == "etcd")
        if keep and self.stockd_current():
            self.start_nginx()
            if st["lock"] == "redis-stock" and not self.writer_up():
                self.start_writer(self.stockd_env())
        else:
            if had_state and not zk_same:
                srv.Stockd.stop_all(self.run)
                self.reset_zk_fences()
            self.start_stockd_all()
        self.prometheus().start()
        if not self.status(sys.stdout):
            raise LabError("not everything answers (see above)")
        print("live page: http://127.0.0.1:%d/live/" % st["nginx_port"], flush=True)
        self.print_owners(sys.stdout)
        note('up; for scripts: eval "$(scripts/stack env)"; stop with: scripts/stack down')

    def reset_zk_fences(self):
        """Every product's fence back to 0, after ZooKeeper was replaced by the other
        kind: a zk fence is a czxid, which grows only within one ZooKeeper's history, so
        the new one's tokens may be lower than the old fences. Safe only here, with
        every stockd stopped."""
        note("ZooKeeper replaced: resetting the products' fences (its lock tokens start again)")
        self.mysql().source(DB, os.path.join(SRC, "sql", "fence-reset.sql"))

    def restart_stockd(self, instances=None, lock=None, extra=None, route=None, rate_limit=None):
        st = self.need_state()
        if not self.mysql_up():
            raise LabError("MariaDB of %s does not answer; run: scripts/stack up" % self.run)
        if not self.zk_up():
            raise LabError("ZooKeeper of %s does not answer; run: scripts/stack up" % self.run)
        if not os.access(st["bin"], os.X_OK):
            raise LabError("stockd binary %s is gone; run: scripts/stack up" % st["bin"])
        st["instances"] = instances or st["instances"]
        st["lock"] = lock or st["lock"]
        st["route"] = route or st["route"] or "round-robin"
        if rate_limit is not None:
            st["rate_limit"] = "" if rate_limit == "off" else rate_limit
        if extra is not None:
            st["extra"] = list(extra)
        portmod.check_distinct(st)
        self.lock_servers()
        statemod.save(self.run, st)
        self.start_stockd_all()
        note("stockd: %d instance(s), lock %s, behind nginx on %d (%s%s)"
             % (st["instances"], st["lock"], st["nginx_port"], st["route"],
                ", rate limit " + st["rate_limit"] if st["rate_limit"] else ""))
        self.print_owners(sys.stdout)

    def owners(self):
        """With --route owner: [(product id, its owner endpoint's URL, what it answers)]
        for the products of the database (the first 20), asked through nginx (every
        instance computes the same owner from the same view); [] otherwise."""
        st = self.st
        if st["route"] != "owner":
            return []
        ids = [r[0] for r in self.mysql().query("SELECT id FROM product ORDER BY id LIMIT 20", db=DB)]
        out = []
        for pid in ids:
            url = "http://127.0.0.1:%d/route/owner?id=%d" % (st["nginx_port"], pid)
            try:
                ans = json.loads(srv.http_text(url) or "null")
            except (OSError, ValueError):
                ans = None
            out.append((pid, url, ans))
        return out

    def print_owners(self, out):
        """One line per product with --route owner: `owner of product N: ADDR (URL)`, and
        the view's URL."""
        st = self.st
        if st["route"] != "owner":
            return
        out.write("route owner: the view at http://127.0.0.1:%d/route/view\n" % st["nginx_port"])
        for pid, url, ans in self.owners():
            owner = ans.get("owner") if isinstance(ans, dict) else None
            out.write("owner of product %d: %s (%s)\n" % (pid, owner or "unknown", url))
        out.flush()

    def kill_stockd(self, i, restart=False):
        """SIGKILL of instance I (a crash); with RESTART it is started again."""
        st = self.need_state()
        if i > st["instances"]:
            raise LabError("no instance %d (the stack has %d)" % (i, st["instances"]))
        f = self.stockd(i).pidfile
        pid = proc.read_pid(f)
        if pid is not None and proc.pid_runs(pid):
            os.kill(pid, 9)
            if not proc.wait_until(10, lambda: not proc.pid_runs(pid)):
                raise LabError("stockd-%d (pid %d) survived SIGKILL" % (i, pid))
            note("stockd-%d (pid %d) killed with SIGKILL" % (i, pid))
        else:
            note("stockd-%d was not running" % i)
        try:
            os.unlink(f)
        except FileNotFoundError:
            pass
        if not restart:
            return
        env = self.stockd_env()
        try:
            self.start_stockd(i, env)
        except LabError as e:
            raise LabError("stockd-%d did not come back on port %d: %s" % (i, self.stockd_port(i), e))
        note("stockd-%d started again on port %d" % (i, self.stockd_port(i)))

    def down(self):
        if not os.path.isdir(self.run):
            note("nothing under %s" % self.run)
            return
        srv.Prometheus(self.run).stop()
        srv.Nginx(self.run).stop()
        srv.Stockd.stop_all(self.run)
        writer.stop(self.run, "1")
        Backing(self.run).stop()
        if self.anything_runs():
            raise LabError("something under %s still runs; see: scripts/stack status" % self.run)
        note("stopped (data and password kept under %s)" % self.run)

    def status(self, out):
        """Prints one row per component to OUT; True if every one is up."""
        st = self.need_state()
        ok = True

        def row(name, server, up=None):
            nonlocal ok
            pid, port = proc.read_pid(server.pidfile), server.port
            if (up or server.up)():
                state = "up"
            else:
                ok = False
                if pid is not None and proc.pid_runs(pid):
                    state = "running, not healthy"
                else:
                    state, pid = "down", None
            out.write("%-11s %-8s %-6s %s\n" % (name, pid if pid is not None else "-", port, state))

        out.write("%-11s %-8s %-6s %s\n" % ("component", "pid", "port", "state"))
        if st["galera"]:
            for m in self.backing().galera_cluster().members:
                row(m.name, m)
            row("haproxy", self.backing().haproxy())
        else:
            row("mysql", self.mysql(), self.mysql_up)
        if st["zk_ensemble"]:
            for m in self.zk().members:
                row(m.name, m)
        else:
            row("zookeeper", self.zk())
        if st["redis_port"]:
            row("redis", self.redis())
        if st["redis_sentinel"]:
            row("redis-repl", self.redis("redis-replica"))
            row("sentinel", self.sentinel())
        if st["lock"] == "redlock":
            for r in self.redlock():
                row(r.name, r)
        # etcd runs for mode etcd (and after it, until `down`).
        if st["lock"] == "etcd" or self.etcd().running():
            row("etcd", self.etcd())
        for i in range(1, st["instances"] + 1):
            row("stockd-%d" % i, self.stockd(i), lambda i=i: self.stockd_up(i))
        if st["lock"] == "redis-stock":
            row("writer", srv.Server(self.run, "-", "writer-1"), self.writer_up)
        row("nginx", self.nginx())
        if st["prometheus_port"]:
            row("prometheus", self.prometheus())
        if st["zk_ensemble"]:
            modes = [m.mode() or "not serving" for m in self.zk().members]
            out.write("zookeeper ensemble:%s\n" % "".join(
                " zk%d %s" % (n, m) for n, m in enumerate(modes, 1)))
        if st["galera"]:
            out.write("galera: %s\n" % ("multi-writer, instance I on node ((I-1) mod 3)+1"
                                        if st["multi_writer"] else "one writer behind HAProxy"))
        route = "round-robin, stockd routes by owner" if st["route"] == "owner" else st["route"]
        out.write("lock mode: %s; nginx: %s%s; run dir: %s\n"
                  % (st["lock"], route, ", rate limit " + st["rate_limit"] if st["rate_limit"] else "",
                     self.run))
        out.flush()
        return ok

    def env(self):
        """The stack as (NAME, VALUE) pairs, for `export` lines."""
        st = self.need_state()
        pw = self._read_secret("mysql-password")
        if not pw:
            raise LabError("no password file %s (run: scripts/stack up)" % self.path("mysql-password"))
        ports = self.stockd_ports()
        return [
            ("STACK_RUN", self.run),
            ("NGINX_URL", "http://127.0.0.1:%d" % st["nginx_port"]),
            ("MYSQL_URL", "mysql://%s@127.0.0.1:%d/%s" % (DB_USER, st["mysql_port"], DB)),
            ("STOCKD_MYSQL_PASSWORD", pw),
            ("STOCKD_REDIS_USER", srv.redis_user()),
            ("STOCKD_REDIS_PASSWORD", self._read_secret("redis-password")),
            ("ZK", self.zk_hosts()),
            ("REDIS", "127.0.0.1:%d" % (st["redis_port"] or 6379)),
            ("REDLOCK", ",".join("127.0.0.1:%d" % p for p in self.redlock_ports())
             if st["lock"] == "redlock" else ""),
            ("SENTINEL", "127.0.0.1:%d" % st["sentinel_port"] if st["redis_sentinel"] else ""),
            ("ETCD", "127.0.0.1:%d" % (st["etcd_port"] or 2379)),
            ("MYSQL_PORT", str(st["mysql_port"])),
            ("STACK_MYSQL_PORT", str(st["mysql_port"])),
            ("STACK_GALERA_PORTS", " ".join(str(p) for p in self.galera_ports())),
            ("MYSQL_SOCKET", self.mysql().socket),
            ("STACK_INSTANCES", str(st["instances"])),
            ("STACK_LOCK", st["lock"]),
            ("STACK_ROUTE", st["route"]),
            ("STACK_RATE_LIMIT", st["rate_limit"]),
            ("STOCKD_PORTS", " ".join(str(p) for p in ports)),
            ("STOCKD_URLS", " ".join("http://127.0.0.1:%d" % p for p in ports)),
            ("STOCKD_BIN", st["bin"]),
            ("PROMETHEUS_URL", "http://127.0.0.1:%d" % st["prometheus_port"] if st["prometheus_port"] else ""),
            ("ADMIN_TOKEN_FILE", self.path("admin-token")),
        ]

    def restock(self, product, units):
        """POST /stock/restock through nginx with the admin token (docs/orders.md): the
        answer as (HTTP status, its JSON document)."""
        st = self.need_state()
        token = self._read_secret("admin-token")
        if not token:
            if not srv.stockd_has_option(st["bin"], "--admin-token-file"):
                raise LabError("the stack's stockd (%s) has no --admin-token-file: no restock "
                               "through the API" % st["bin"])
            raise LabError("no admin token %s (run: scripts/stack up)" % self.path("admin-token"))
        a = orders.Api("http://127.0.0.1:%d" % st["nginx_port"], token).restock(product, units)
        if a.status == 0:
            raise LabError("nginx on %d did not answer: %s" % (st["nginx_port"], a.error))
        return a.status, a.doc

    def galera_ports(self):
        """The Galera nodes' SQL ports (none without --galera)."""
        st = self.need_state()
        return [n[0] for n in portmod.galera_ports(st["galera_port"])] if st["galera"] else []

    def mysql_argv(self, args, node=None):
        """The mariadb client as root on the writer (with --galera: the node HAProxy
        sends writes to), or on Galera node NODE (1..3)."""
        st = self.need_state()
        if node is not None:
            if not st["galera"]:
                raise LabError("--node needs a Galera stack (scripts/stack up --galera 3)")
            m = self.backing().galera_cluster().node(node)
            if not m.running():
                raise LabError("Galera node %d of %s does not run" % (node, self.run))
            return ["mariadb", "--no-defaults", "-uroot", "-S", m.socket, "-D", DB] + list(args)
        if not self.mysql_up():
            raise LabError("MariaDB of %s does not answer; run: scripts/stack up" % self.run)
        return ["mariadb", "--no-defaults", "-uroot", "-S", self.mysql().socket, "-D", DB] + list(args)


class Quiet:
    """Within it, this process's stdout and stderr (and its children's) go to a log
    file: the stack's notes and status table are not a tool's output."""

    def __init__(self, log):
        self.log = log

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = (os.dup(1), os.dup(2))
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
            os.close(saved)


def logged(log, fn, *args, **kw):
    """FN(*ARGS, **KW), a Stack operation of a load tool, with its output in the file
    LOG (Quiet); its result. A LabError it raises comes back with the last 20 lines of
    LOG added."""
    try:
        with Quiet(log):
            return fn(*args, **kw)
    except LabError as e:
        with open(log, encoding="utf-8", errors="replace") as f:
            tail = "".join(f.readlines()[-20:])
        raise LabError("%s\n%s" % (e, tail)) from None


def export_lines(pairs):
    """`export NAME=VALUE` lines, each value quoted for the shell."""
    return "".join("export %s=%s\n" % (k, shlex.quote(v)) for k, v in pairs)
