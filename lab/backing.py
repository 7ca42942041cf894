"""The backing servers of a stack, built from a port layout: MariaDB (with the shop
database when asked) or a three-node Galera cluster behind HAProxy, ZooKeeper (standalone or a three-server ensemble), Redis (with
a replica and a Sentinel when asked), RedLock's three Redis servers, etcd and
Prometheus, all under one run directory (lab/servers.py). The operator's stack
(lab/stack.py) and the tests' `servers` fixture (lab/fixture.py) both start and stop
theirs here; which servers a stack needs follows from its lock mode (lock_servers)."""

import os

from . import servers as srv


class Backing:
    """The servers under RUN on the ports of PORTS, a dict with any of mysql, zk,
    redis, redis_replica, sentinel, etcd and prometheus (a port each) and redlock (a
    list of ports); with no ports, servers that can only be stopped. ZK_ENSEMBLE:
    ZooKeeper is the ensemble whose first port is zk. REDIS_PASSWORD: every Redis's
    (None: no ACL). GALERA_CHECK_PASSWORD (with a galera port, the first node's): the
    database is a three-node Galera cluster and HAProxy on the mysql port sends to one
    node of it; the password is its health check's."""

    def __init__(self, run, ports=None, zk_ensemble=False, redis_password=None,
                 galera_check_password=None):
        self.run = run
        self.ports = dict(ports or {})
        self.zk_ensemble = zk_ensemble
        self.redis_password = redis_password or None
        self.galera_check_password = galera_check_password

    @property
    def galera(self):
        return bool(self.ports.get("galera"))

    def mysql(self):
        """The database as one server: MariaDB, or the Galera cluster (its writer node
        answers the lab's queries; stockd goes through haproxy())."""
        if self.galera:
            return self.galera_cluster()
        return srv.MariaDB(self.run, self.ports.get("mysql"))

    def galera_cluster(self):
        return srv.GaleraCluster(self.run, self.ports.get("galera"), self.galera_check_password)

    def haproxy(self):
        nodes = srv.galera_ports(self.ports["galera"]) if self.galera else []
        return srv.HAProxy(self.run, self.ports.get("mysql"), [n[0] for n in nodes],
                           self.galera_check_password)

    def zk(self, ensemble=None):
        """The ZooKeeper of the layout (ENSEMBLE: of that kind instead)."""
        ensemble = self.zk_ensemble if ensemble is None else ensemble
        if ensemble:
            return srv.ZkEnsemble(self.run, self.ports.get("zk") or 0)
        return srv.ZooKeeper(self.run, self.ports.get("zk"))

    def redis(self, name="redis", port=None, **kw):
        """The Redis NAME (redis, redis-replica, redlockN) with the layout's password."""
        port = port or self.ports.get({"redis-replica": "redis_replica"}.get(name, name))
        return srv.Redis(self.run, port, name, self.redis_password, **kw)

    def replica(self):
        return self.redis("redis-replica", replication=True, master=self.ports.get("redis"))

    def redlock(self):
        ports = self.ports.get("redlock") or [None] * 3
        return [self.redis("redlock%d" % n, port=p) for n, p in enumerate(ports, 1)]

    def sentinel(self):
        return srv.Sentinel(self.run, self.ports.get("sentinel"), self.ports.get("redis"),
                            self.redis_password)

    def etcd(self):
        return srv.Etcd(self.run, self.ports.get("etcd"))

    def prometheus(self):
        return srv.Prometheus(self.run, self.ports.get("prometheus"))

    def start(self, db=None, sentinel=False, redlock=False, etcd=False):
        """Starts what is not running, in order: MariaDB (DB: a callable given the
        server, which makes sure of the database), ZooKeeper, Redis (SENTINEL: with
        the users replica and sentinel, a replica and a Sentinel; without, those two
        stopped), RedLock's three Redis servers when REDLOCK, etcd when ETCD."""
        db_server = self.mysql().start()
        if db is not None:
            db(db_server)
        if self.galera:
            self.haproxy().start()
        self.zk().start()
        if sentinel:
            # The primary needs the users replica and sentinel: one started without them
            # is started again (its lock keys are leases; stockd reconnects).
            try:
                with open(os.path.join(self.run, "redis", "auth.conf")) as f:
                    has = any(line.startswith("user sentinel ") for line in f)
            except OSError:
                has = False
            if not has:
                self.redis().stop()
        else:
            self.sentinel().stop()
            self.redis("redis-replica").stop()
        self.redis(replication=sentinel).start()
        if sentinel:
            self.replica().start()
            self.sentinel().start()
        self.lock_servers(redlock=redlock, etcd=etcd)

    def lock_servers(self, lock=None, redlock=False, etcd=False):
        """The servers only one lock mode needs: RedLock's three Redis (mode redlock),
        etcd (mode etcd)."""
        if redlock or lock == "redlock":
            for r in self.redlock():
                r.start()
        if etcd or lock == "etcd":
            self.etcd().start()

    def stop(self):
        """Stops every backing server that runs under the run directory, of either kind
        of ZooKeeper."""
        self.prometheus().stop()
        self.sentinel().stop()
        for r in [self.redis("redis-replica"), self.redis()] + self.redlock():
            r.stop()
        self.etcd().stop()
        self.zk(False).stop()
        self.zk(True).stop()
        self.haproxy().stop()
        srv.GaleraCluster(self.run, None).stop()
        srv.MariaDB(self.run, self.ports.get("mysql")).stop()
