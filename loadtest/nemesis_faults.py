"""The nemesis's faults (loadtest/nemesis's help says what each does), as a table: each
kind is a row of which modes can have it, and three steps. claim picks the victim and the
fault's parameters from the fault's own seeded random source and returns the targets it
takes (one fault at a time per target; None: no victim now); apply puts the fault in place
and returns how long it stays; heal takes it away. The Nemesis schedules them, several
at once, and records each as applied and healed (or failed) in the history.

A new fault is a row of FAULTS and its three functions."""
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from lab import proc, writer
from lab import servers as srv
from lab.redisstock import RedisStock
from nemesis_stack import N_INSTANCES, RunFailed, lab


@dataclass
class Shot:
    """One fault as it happens: its kind, its random source, its history record, and what
    claim picked for apply and heal (the victim)."""
    kind: str
    rng: random.Random
    rec: dict
    victim: object = None
    more: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Fault:
    can: Callable  # (mode, uses_zk) -> whether a run of the mode can have it
    claim: Callable  # (nemesis, shot) -> the targets it takes, or None: no victim now
    apply: Callable  # (nemesis, shot) -> seconds the fault stays
    heal: Callable  # (nemesis, shot)


def nothing(nem, shot):
    pass


def every_mode(mode, uses_zk):
    return True


def a_stockd(nem, shot):
    """A stockd at random; a pause's length in rec["seconds"]."""
    i = shot.rng.randint(1, N_INSTANCES)
    shot.victim = f"stockd/{i}.pid"
    shot.rec["target"] = f"stockd-{i}"
    if shot.kind == "pause":
        shot.rec["seconds"] = round(nem.pause_seconds(shot.rng), 3)
    return [shot.rec["target"]]


def kill_stockd(nem, shot):
    nem.stack.kill9(shot.victim)
    return shot.rng.uniform(0.5, 3)


def restart_stockd(nem, shot):
    nem.stack.restart_stockd(int(shot.rec["target"].split("-")[1]))


def pause(nem, shot):
    nem.stack.pause(shot.victim, shot.more.get("marker"))
    return shot.rec["seconds"]


def resume(nem, shot):
    nem.stack.resume(shot.victim, shot.more.get("marker"))


def a_zk_server(nem, shot):
    """The ZooKeeper leader (zk-leader) or a follower; none while there is no leader."""
    leader = nem.stack.zk.leader()
    if leader is None:
        return None
    n = leader if shot.kind == "zk-leader" else shot.rng.choice(
        [k for k in (1, 2, 3) if k != leader])
    shot.victim = n
    shot.rec["target"] = f"zk{n}"
    return ["zk"]


def kill_zk_server(nem, shot):
    nem.stack.kill9(f"zk{shot.victim}/pid")
    return shot.rng.uniform(1, 5)


def restart_zk_server(nem, shot):
    lab(nem.stack.zk.start, [shot.victim], wait=False)


def a_lock_server(nem, shot):
    """One of the lock service's servers (a RedLock Redis, an etcd member), one at a time,
    so that a majority stays up."""
    name, pidfile, marker, start = shot.rng.choice(nem.stack.lock_servers())
    shot.victim = pidfile
    shot.more.update(marker=marker, start=start)
    shot.rec["target"] = name
    if shot.kind == "lock-server-pause":
        shot.rec["seconds"] = round(nem.pause_seconds(shot.rng), 3)
    return ["lock-server"]


def kill_lock_server(nem, shot):
    """kill -9; a Redis without persistence comes back empty."""
    nem.stack.kill9(shot.victim, shot.more["marker"])
    return shot.rng.uniform(1, 5)


def restart_lock_server(nem, shot):
    lab(shot.more["start"])


def mariadb(nem, shot):
    shot.rec["target"], shot.rec["signal"] = "mysql", shot.rng.choice(["TERM", "KILL"])
    return ["mysql"]


def stop_mariadb(nem, shot):
    if shot.rec["signal"] == "KILL":
        nem.stack.kill9("mysql/pid")
    else:
        nem.stack.db.stop()
    return shot.rng.uniform(1, 4)


def start_mariadb(nem, shot):
    nem.stack.start_mysql()


def a_galera_node(nem, shot):
    """A Galera node at random, killed (-9) or paused (SIGSTOP, cut off from the group
    until it is evicted); the node HAProxy writes to is as likely as the others."""
    n = shot.rng.randint(1, 3)
    shot.victim = n
    shot.rec["target"], shot.rec["signal"] = f"galera{n}", shot.rng.choice(["KILL", "STOP"])
    return ["mysql"]  # one database fault at a time: a quorum of two is kept


def fail_galera_node(nem, shot):
    pidfile = f"galera{shot.victim}/pid"
    if shot.rec["signal"] == "KILL":
        nem.stack.kill9(pidfile)
    else:
        nem.stack.pause(pidfile)
    return shot.rng.uniform(2, 8)


def heal_galera_node(nem, shot):
    if shot.rec["signal"] == "STOP":
        nem.stack.resume(f"galera{shot.victim}/pid")
    lab(nem.stack.db.start)  # a killed node joins again (IST); waits until every node is synced


def a_commit_of_stockd_1(nem, shot):
    """One of stockd-1's next COMMITs, held for 1.5x-3x the lease. A ZooKeeper holder
    keeps its session through a held COMMIT unless it is paused; a lease runs out by
    itself, so the lease modes are paused less."""
    hold_s = shot.rng.uniform(1.5 * nem.lease_s, 3 * nem.lease_s)
    pause = nem.kept_alive or shot.rng.random() < 0.5
    shot.rec.update(target="stockd-1", seconds=round(hold_s, 3), pause=pause)
    shot.more["hold_s"] = hold_s
    return ["stockd-1"]


def hold_commit(nem, shot):
    """Arms the relay; with a pause, stockd-1 is stopped right after the held COMMIT was
    sent, for as long as a lease and more."""
    skip = shot.rng.randint(0, 3)
    shot.rec["skip_commits"] = skip
    hold_s = shot.more["hold_s"]
    nem.stack.arm_commit_hold(hold_s, skip)
    if shot.rec["pause"] and nem.wait_for(nem.stack.commit_held, hold_s):
        d = shot.rng.uniform(1.2 * nem.lease_s, 2.5 * nem.lease_s)
        shot.rec["pause_seconds"] = round(d, 3)
        shot.victim = "stockd/1.pid"
        nem.stack.pause(shot.victim)
        return d
    return hold_s


def release_commit(nem, shot):
    if shot.victim:
        nem.stack.resume(shot.victim)
    nem.stack.disarm()


def a_link(nem, shot):
    """stockd-1's link to db, zk or redis, for 0.3 s up to 2.5x the lease: a partition is
    healed as it is or, half the time, with its connections cut; a latency adds 20 ms
    up to 0.4x the lease to every chunk."""
    link = shot.kind.split("-", 1)[1]
    shot.victim = link
    shot.rec["target"] = f"stockd-1 to {link}"
    shot.rec["seconds"] = round(nem.pause_seconds(shot.rng), 3)
    if shot.kind.startswith("partition-"):
        shot.rec["cut"] = shot.rng.random() < 0.5
    else:
        shot.rec["delay_ms"] = int(shot.rng.uniform(20, 0.4 * nem.lease_s * 1000))
    return [f"link-{link}"]


def black_hole(nem, shot):
    """Nothing passes either way, and what was sent meanwhile arrives after it, as over TCP."""
    nem.stack.control(shot.victim, "blackhole on")
    return shot.rec["seconds"]


def mend(nem, shot):
    nem.stack.control(shot.victim, *(["cut"] if shot.rec["cut"] else []), "blackhole off")


def slow(nem, shot):
    nem.stack.control(shot.victim, f"delay {shot.rec['delay_ms']}")
    return shot.rec["seconds"]


def unslow(nem, shot):
    nem.stack.control(shot.victim, "delay 0")


def a_clock_step(nem, shot):
    """A step of 1.5x-3x the lease, forward (clock) or backward (clock-back), of the clock
    that times the leases: Redis's (by a stand-in, on 1 to 3 of RedLock's servers) or
    MariaDB's (db-lock, libfaketime). It takes no target and is not healed."""
    step = shot.rng.uniform(1.5 * nem.lease_s, 3 * nem.lease_s)
    shot.rec["direction"] = "forward" if shot.kind == "clock" else "back"
    if nem.mode in ("redis", "redlock"):
        ports = [nem.stack.ports["redis"]]
        if nem.mode == "redlock":
            ports = sorted(shot.rng.sample(nem.stack.redlock_ports(), shot.rng.randint(1, 3)))
        shot.victim = ports
        shot.rec["target"] = "redis lock keys" + (
            f" on {','.join(map(str, ports))}" if nem.mode == "redlock" else "")
        if shot.kind == "clock-back":
            shot.rec["seconds"] = round(step, 3)
        shot.more["step"] = step
    else:
        whole = max(1, round(step))
        offset = nem.stack.db_clock + (whole if shot.kind == "clock" else -whole)
        shot.rec.update(target="mariadb clock", seconds=whole, offset=offset)
    return []


def step_clock(nem, shot):
    if shot.victim is None:
        nem.stack.set_db_clock(shot.rec["offset"])
        return 0
    # Stand-ins: Redis times a key's expiry by its own clock, so a jump forward ends every
    # lease at once (with 2 or 3 of RedLock's servers, a majority's keys expire early: the
    # hazard its critics describe) and a jump back lengthens each.
    if shot.kind == "clock":
        script = ("for _, k in ipairs(redis.call('KEYS', 'lock:*')) do "
                  "redis.call('PEXPIRE', k, 1) end return 1")
    else:
        script = ("for _, k in ipairs(redis.call('KEYS', 'lock:*')) do "
                  "local t = redis.call('PTTL', k) if t > 0 then "
                  f"redis.call('PEXPIRE', k, t + {int(shot.more['step'] * 1000)}) end end "
                  "return 1")
    for q in shot.victim:
        try:  # a server that is stopped (lock-server-pause) misses its jump
            srv.redis_cmd(q, "EVAL", script, 0)
        except OSError:
            pass
    return 0


def the_redis_primary(nem, shot):
    """Redis's primary, with every stockd (they are restarted on the promoted replica)."""
    shot.rec["target"] = f"redis {nem.stack.redis_primary}"
    return ["redis"] + [f"stockd-{i}" for i in range(1, N_INSTANCES + 1)]


# How long the lossy failover waits for each state it needs (deductions after the
# partition, the writer's backlog written): the load decides how soon they come, and the
# replica's link stays up all the while (fail_redis_over), so only a run that stalls
# waits this long.
LOSSY_STEP_S = 20


def fail_redis_over(nem, shot):
    """The primary killed (-9) so that the Sentinel promotes the replica; stockd and a new
    order writer follow the promoted one, as an operator restarts them. The first time
    (the replica replicates through the fault proxy), made lossy as loadtest/
    redis-failover is: the replication link partitioned, deductions that the writer
    writes, the writer paused, deductions it never writes, and only then the kill.

    The partition passes no byte but leaves the connection open, so the replica still
    reports its link up. A link it saw close would count against it: Sentinel skips a
    replica whose link has been down for more than ten times down-after-milliseconds
    (1 s here) plus the time the primary has been down, and with the link cut, steps that
    a loaded machine stretched past 10 s left the Sentinel no replica to promote (the
    run failed, "the Sentinel did not promote the Redis replica"). The replica's
    repl-timeout, after which it would call the silent link down itself, is raised past
    the longest these steps may take."""
    st = nem.stack
    old, new = (st.redis, st.redis_replica) if st.redis_primary == st.redis.port else (
        st.redis_replica, st.redis)
    paused = None
    if new.master == st.redis.port + 1:  # through the proxy: the first failover
        shot.rec["lossy"] = True
        new.cmd("CONFIG", "SET", "repl-timeout", str(10 * LOSSY_STEP_S))
        st.control("redis-repl", "blackhole on")
        if not nem.wait_for(lambda: st.proxy_applied("redis-repl", "blackhole on"), 10):
            raise RunFailed("the replication link's fault proxy never took the partition")
        rs = st.redis_stock()
        # Entries added, not XLEN: the writer trims what it has written.
        grown = lambda: rs.added() > shot.more["added"]  # noqa: E731
        shot.more["added"] = rs.added()
        nem.wait_for(grown, LOSSY_STEP_S)
        nem.wait_for(lambda: rs.backlog() == (0, 0), LOSSY_STEP_S)  # written
        paused = st.writer_pidfile()
        st.pause(paused)
        shot.more["added"] = rs.added()
        nem.wait_for(grown, LOSSY_STEP_S)  # never written
        shot.rec["replica_behind"] = RedisStock.at(f"127.0.0.1:{new.port}").added() < rs.added()
    st.kill9(f"{old.name}/pid", f"127.0.0.1:{old.port}".encode())
    want = f"127.0.0.1:{new.port}"
    if not proc.wait_until(60, lambda: srv.sentinel_primary(st.sentinel.port) == want):
        raise RunFailed("the Sentinel did not promote the Redis replica")
    if not proc.wait_until(10, new.is_primary):
        raise RunFailed("the promoted Redis replica never became a primary")
    if paused:
        st.kill9(paused)
    else:
        writer.stop(st.run, f"w{st.writer_n}")
    st.redis_primary = new.port
    shot.more["old"] = old
    for i in range(1, N_INSTANCES + 1):
        st.restart_stockd(i)
    lab(st.start_writer)
    return shot.rng.uniform(0.5, 2)


def new_redis_replica(nem, shot):
    """The lost primary's place taken by a new replica of the promoted one."""
    st, old = nem.stack, shot.more["old"]
    old.master = st.redis_primary
    lab(old.start)
    if not proc.wait_until(20, old.linked):
        raise RunFailed("no new Redis replica of the promoted primary")


def zk_modes(mode, uses_zk):
    return uses_zk


def clock_modes(mode, uses_zk):
    return mode in ("redis", "db-lock", "redlock")


def lock_server_modes(mode, uses_zk):
    return mode in ("redlock", "etcd")


def redis_modes(mode, uses_zk):
    return mode == "redis"


def redis_stock_modes(mode, uses_zk):
    return mode == "redis-stock"


# The order is the schedule's: a seed picks kinds from a mode's faults in this order.
FAULTS = {
    "kill9": Fault(every_mode, a_stockd, kill_stockd, restart_stockd),
    "pause": Fault(every_mode, a_stockd, pause, resume),
    "mysql": Fault(every_mode, mariadb, stop_mariadb, start_mariadb),
    "galera-node": Fault(every_mode, a_galera_node, fail_galera_node, heal_galera_node),
    "commit-delay": Fault(every_mode, a_commit_of_stockd_1, hold_commit, release_commit),
    "partition-db": Fault(every_mode, a_link, black_hole, mend),
    "latency-db": Fault(every_mode, a_link, slow, unslow),
    "zk-leader": Fault(zk_modes, a_zk_server, kill_zk_server, restart_zk_server),
    "zk-follower": Fault(zk_modes, a_zk_server, kill_zk_server, restart_zk_server),
    "partition-zk": Fault(zk_modes, a_link, black_hole, mend),
    "latency-zk": Fault(zk_modes, a_link, slow, unslow),
    "clock": Fault(clock_modes, a_clock_step, step_clock, nothing),
    "clock-back": Fault(clock_modes, a_clock_step, step_clock, nothing),
    "lock-server-kill": Fault(lock_server_modes, a_lock_server, kill_lock_server,
                              restart_lock_server),
    "lock-server-pause": Fault(lock_server_modes, a_lock_server, pause, resume),
    "partition-redis": Fault(redis_modes, a_link, black_hole, mend),
    "latency-redis": Fault(redis_modes, a_link, slow, unslow),
    "redis-failover": Fault(redis_stock_modes, the_redis_primary, fail_redis_over,
                            new_redis_replica),
}
ALL_FAULTS = tuple(FAULTS)


def faults_for(mode, uses_zk):
    """The faults a run of mode can have; uses_zk: its lock service is ZooKeeper."""
    return [k for k, f in FAULTS.items() if f.can(mode, uses_zk)]


def fault_kinds(mode, uses_zk, asked, commit_ms, galera=False):
    """The faults of a run: the mode's (faults_for), or those of ASKED (--faults: a
    comma-separated list, or none) that it can have. Raises RunFailed for a fault that
    does not exist, or one that --commit-ms makes impossible. GALERA: the database is a
    cluster, whose node fault (galera-node) stands for the one MariaDB's (mysql)."""
    kinds = [k for k in faults_for(mode, uses_zk) if k != ("mysql" if galera else "galera-node")]
    if asked == "none":
        kinds = []
    elif asked:
        names = [k.strip() for k in asked.split(",") if k.strip()]
        bad = [k for k in names if k not in ALL_FAULTS]
        if bad:
            raise RunFailed(f"unknown fault(s) {','.join(bad)}; known: {','.join(ALL_FAULTS)}")
        kinds = [k for k in names if k in kinds]
    alone = {"commit-delay", "partition-db", "latency-db"}  # stockd-1's own relay
    if commit_ms > 0 and alone & set(kinds):
        if asked:
            raise RunFailed("--commit-ms puts every instance behind the relay, so "
                            f"{','.join(sorted(alone & set(kinds)))} would not be "
                            "stockd-1's alone")
        kinds = [k for k in kinds if k not in alone]
    return kinds


class Nemesis:
    """Applies and heals faults on STACK at random times from SEED, recording them in
    HISTORY. LEASE_S times them; KEPT_ALIVE: a holder's session or lease is kept alive
    while its process runs (ZooKeeper, etcd, the Redis watchdog)."""

    def __init__(self, stack, history, seed, gap, lease_s, kept_alive):
        self.stack = stack
        self.mode = stack.mode
        self.history = history
        self.rng = random.Random(seed)
        self.gap = gap
        self.lease_s = lease_s
        self.kept_alive = kept_alive
        self.heal_now = threading.Event()  # the run ends: every fault heals
        self.busy = set()  # fault targets in use
        self.busy_lock = threading.Lock()
        self.nfaults = 0
        self.counts = {}
        self.error = None  # the RunFailed of a fault that could not be applied or healed

    def schedule(self, kinds, stop):
        """Starts a fault of KINDS every gap seconds until STOP is set, then heals them all."""
        threads = []
        while not stop.wait(self.rng.uniform(*self.gap)):
            kind = self.rng.choice(kinds)
            t = threading.Thread(target=self.fault, args=(kind, random.Random(self.rng.random())))
            t.start()
            threads.append(t)
        self.heal_now.set()
        for t in threads:
            t.join()

    def fault(self, kind, rng):
        fault = FAULTS[kind]
        shot = Shot(kind, rng, {"type": "fault", "kind": kind, "start": time.time()})
        taken = []
        try:
            targets = fault.claim(self, shot)
            if targets is None or not self.take(targets):
                return
            taken = targets
            self.record(shot.rec, "applied")
            self.hold(fault.apply(self, shot))
            fault.heal(self, shot)
            shot.rec["end"] = time.time()
            self.record(shot.rec, "healed")
        except RunFailed as e:
            shot.rec["error"] = str(e)
            self.record(shot.rec, "failed")
            self.error = e
        finally:
            with self.busy_lock:
                self.busy.difference_update(taken)

    def take(self, targets):
        with self.busy_lock:
            if self.busy & set(targets):
                return False
            self.busy.update(targets)
            return True

    def record(self, rec, phase):
        if phase == "applied":
            self.nfaults += 1
            self.counts[rec["kind"]] = self.counts.get(rec["kind"], 0) + 1
        self.history.record(dict(rec, phase=phase))

    def hold(self, seconds):
        """Waits SECONDS, or less once the run ends (every fault heals then)."""
        self.heal_now.wait(seconds)

    def wait_for(self, pred, limit):
        """True once PRED() is, within LIMIT s and before the run ends."""
        deadline = time.time() + limit
        while time.time() < deadline and not self.heal_now.is_set():
            if pred():
                return True
            time.sleep(0.01)
        return False

    def pause_seconds(self, rng):
        """How long a pause, a partition or a latency lasts: 0.3 s up to 2.5x the lease."""
        return rng.uniform(0.3, 2.5 * self.lease_s)
