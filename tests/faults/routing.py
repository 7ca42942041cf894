"""routing.py SCENARIO: the fault tests of owner routing (stockd --route owner,
docs/routing.md) on real servers, one scenario per ctest (tests/faults/tests.cmake).

Each scenario starts its own ZooKeeper (membership is its ephemeral nodes: a test that
shared the fixture's would see another test's instances as peers), 2 to 4 stockd in mode
zk with --route owner behind nginx round-robin, all on the test's own ports, on its own
database in the fixture's MariaDB. A load is stockload with an Idempotency-Key per
request and its keys file; every test ends with a drain (the stock at exactly 0) and
loadtest/check-invariant over every load: orders = initial - final, every "deducted"
answer a distinct row of the ledger, every lost answer retried with its key.

  kill_owner        kill -9 of the product's owner mid-load: the survivors' view drops
                    it, a survivor owns the product, and once the view has changed (and
                    nginx no longer sends to the dead one) a load sees no 503 at all
  paused_owner      the owner stopped (SIGSTOP) past its ZooKeeper session, then
                    resumed, under a load sent to the other two: the product moved
                    meanwhile, the late batch is refused by the fence, the stock stays
                    exact
  add_remove        an instance added mid-load, then one stopped: exact; the old owner's
                    cached lock is handed over (a 60 s --lock-cache-ms with a 20 s lock
                    timeout: a stall would answer lock_timeout, there is none), and the
                    batches are as large again after the changes
  peer_http_cut     one instance announced through a relay (tests/support's fault proxy)
                    that then cuts and blackholes: it stays in ZooKeeper's view, its
                    circuit opens at the others, they serve its products locally, exact;
                    healed, the circuit closes and forwarding resumes
  peer_path_refused through nginx /peer/... is refused with a JSON 404 and deducts
                    nothing; at an instance without the secret, a 4xx and nothing
                    deducted; a client's own X-Stockd-Hop header is served locally

Ports (STOCKD_TEST_PORTS = P): nginx P, stockd i at P+i (1..5), ZooKeeper P+10, the
fault proxy P+12. Exit 0 pass, 1 fail, 77 skipped (a stockd without --route).
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

SRC = os.environ.get("STOCKD_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, SRC)

from lab import LabError, proc, prom  # noqa: E402
from lab import servers as srv  # noqa: E402
from lab.shop import Shop  # noqa: E402

DB_USER, DB_PASS = "stockd", "stockd-test-pw"
TIMEOUT_MS = 20000


class Fail(Exception):
    pass


def ok(what):
    print("ok: " + what, flush=True)


def expect(cond, what):
    if not cond:
        raise Fail(what)
    ok(what)


def wait_for(seconds, what, cond):
    """Waits (SECONDS at most) for COND() to be true; a Fail naming WHAT otherwise."""
    if not proc.wait_until(seconds, cond):
        raise Fail("timed out after %d s waiting for %s" % (seconds, what))
    ok(what)


def get(url, headers=None, method="GET"):
    """(status, parsed JSON or None) of one request; status 0 when nothing answered."""
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    except OSError:
        return 0, None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


class Cluster:
    """The test's servers: its ZooKeeper, stockd instances and nginx (lab/servers.py),
    its database, and its loads."""

    def __init__(self, think_us=100000, stock=3000, extra=()):
        self.name = os.environ["STOCKD_TEST_NAME"]
        self.p0 = int(os.environ["STOCKD_TEST_PORTS"])
        self.build = os.environ["STOCKD_BUILD"]
        self.bin = os.environ["STOCKD_BIN"]
        self.fixture = os.environ["STOCKD_TEST_RUN"]
        self.t = os.path.join(self.fixture, "t", self.name)
        subprocess.run(["rm", "-rf", self.t], check=True)
        os.makedirs(self.t)
        self.db = "t_" + "".join(c if c.isalnum() else "_" for c in self.name)
        self.think_us, self.stock, self.extra = think_us, stock, list(extra)
        self.product = 2
        self.secret = os.path.join(self.t, "peer.secret")
        srv.secret_file(self.secret)
        self.zk = srv.ZooKeeper(self.t, self.p0 + 10)
        self.mysql_url = "mysql://%s@127.0.0.1:%s/%s" % (
            DB_USER, os.environ["STOCKD_TEST_MYSQL_PORT"], self.db)
        self.env = dict(os.environ, STOCKD_MYSQL_PASSWORD=DB_PASS)
        self.announced = {}  # instance -> the port its peers reach it at (a relay's, or its own)
        self.loads = []

    # ------------------------------------------------------------ servers

    def up(self, n):
        """The database with the product at the test's stock, ZooKeeper, stockd 1..N and
        nginx over them."""
        srv.MariaDB(self.fixture).create_db(self.db, DB_USER, DB_PASS)
        with Shop(self.fixture, self.db) as shop:
            shop.set_stock(self.product, self.stock)
        self.zk.start()
        for i in range(1, n + 1):
            self.start(i)
        self.nginx(range(1, n + 1))

    def port(self, i):
        return self.p0 + i

    def start(self, i, announce=None):
        """stockd-I on P+I, announcing ANNOUNCE (a port; default its own)."""
        self.announced[i] = announce or self.port(i)
        # A 10 s queue deadline, as the nemesis runs: a forward to an owner that does not
        # answer gives up within half of it (the frame's budget, docs/routing.md) and the
        # deduction is served locally, inside the clients' 20 s.
        args = ["--zk-session-ms", "2000", "--think-us", str(self.think_us),
                "--queue-deadline-ms", "10000",
                "--route", "owner", "--announce", "127.0.0.1:%d" % self.announced[i],
                "--peer-secret-file", self.secret] + self.extra
        srv.Stockd(self.t, i, self.port(i), self.bin, "zk", self.mysql_url,
                   "127.0.0.1:%d" % self.zk.port, args, self.env).start()

    def stockd(self, i):
        return srv.Stockd(self.t, i, self.port(i))

    def pid(self, i):
        return proc.read_pid(self.stockd(i).pidfile)

    def nginx(self, instances):
        """nginx on P, round-robin over INSTANCES (started, or reloaded to them)."""
        srv.Nginx(self.t, self.p0, [self.port(i) for i in instances], "owner").start()

    def down(self):
        srv.Nginx(self.t).stop()
        srv.Stockd.stop_all(self.t)
        proxy = os.path.join(self.t, "proxy.pid")
        if os.path.exists(proxy):
            proc.stop_pidfile(proxy, 5)
        self.zk.stop()

    # ------------------------------------------------------------ what they say

    def metrics(self, i):
        return prom.scrape([self.port(i)])[0]

    def metric(self, i, name, **labels):
        return self.metrics(i).total(name, **labels) or 0

    def owner(self, i, product=None):
        """The announced address of self.product's owner as instance I computes it."""
        status, ans = get("http://127.0.0.1:%d/route/owner?id=%d" % (self.port(i), product or self.product))
        return ans.get("owner") if status == 200 and isinstance(ans, dict) else None

    def owner_index(self, i, product=None):
        """The instance whose announced address instance I names as the owner, or None."""
        addr = self.owner(i, product)
        for k, p in self.announced.items():
            if addr == "127.0.0.1:%d" % p:
                return k
        return None

    def members(self, i):
        """(view number, sorted announced addresses) of instance I's view, or None."""
        status, ans = get("http://127.0.0.1:%d/route/view" % self.port(i))
        if status != 200 or not isinstance(ans, dict):
            return None
        ms = [m if isinstance(m, str) else m.get("address") for m in ans.get("members", [])]
        return ans.get("view"), sorted(ms)

    def view_is(self, instances, at):
        """Every instance in AT has the view whose members are INSTANCES."""
        want = sorted("127.0.0.1:%d" % self.announced[k] for k in instances)
        views = [self.members(i) for i in at]
        return all(v and v[1] == want for v in views) and len({v[0] for v in views}) == 1

    def stock_now(self):
        with Shop(self.fixture, self.db) as shop:
            return shop.stock(self.product)

    def orders_by(self, instance, after=0):
        with Shop(self.fixture, self.db) as shop:
            return shop.value("SELECT COUNT(*) FROM orders WHERE id > %s AND instance = %s",
                              (after, "stockd-%d" % instance))

    def last_order(self):
        with Shop(self.fixture, self.db) as shop:
            return shop.value("SELECT COALESCE(MAX(id), 0) FROM orders")

    # ------------------------------------------------------------ loads

    def load(self, name, *args, wait=False, url=None):
        """stockload NAME against nginx (or URL) with a key per request, in the
        background unless WAIT; its JSON in T/NAME.json, its keys in T/NAME.keys."""
        url = url or "http://127.0.0.1:%d" % self.p0
        argv = [os.path.join(self.build, "loadtest", "stockload"), "--url",
                "%s/stock/reduce?id=%d" % (url, self.product), "--idempotency",
                "--keys-out", os.path.join(self.t, name + ".keys"), "--timeout-ms", str(TIMEOUT_MS),
                "--json", "--no-progress"] + list(args or ("--duration", "8", "--concurrency", "50"))
        out = open(os.path.join(self.t, name + ".json"), "w")
        err = open(os.path.join(self.t, name + ".err"), "w")
        p = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        self.loads.append(name)
        if wait:
            return self.load_wait(name, p)
        return p

    def load_wait(self, name, p):
        """Waits for load P; its JSON (requests, counts, transport errors)."""
        rc = p.wait()
        if rc != 0:
            raise Fail("stockload %s exited %d: %s" % (name, rc, open(
                os.path.join(self.t, name + ".err")).read()[-500:]))
        with open(os.path.join(self.t, name + ".json")) as f:
            res = json.load(f)
        print(json.dumps({"load": name, "requests": res.get("requests"), "counts": res.get("counts"),
                          "transport_errors": res.get("transport_errors")}), flush=True)
        return res

    def under_way(self, units=50):
        wait_for(30, "the load deducted %d units" % units, lambda: self.stock_now() <= self.stock - units)

    def drain(self):
        """More units asked for than are left, 20 at a time: the stock must end at 0."""
        left = self.stock_now()
        res = self.load("drain", "--threads", "20", "--loops", str((left + 40 + 19) // 20), wait=True)
        expect(self.stock_now() == 0, "the stock is exactly 0 after the drain")
        expect(res["counts"].get("sold_out", 0) > 0, "the drain saw sold_out")

    def check(self):
        """loadtest/check-invariant over every load, in its lossy form (a kill destroys
        answers): every lost answer retried with its key."""
        argv = [os.path.join(SRC, "loadtest", "check-invariant"), "--run", self.fixture,
                "--db", self.db, "--product", str(self.product), "--initial", str(self.stock),
                "--url", "http://127.0.0.1:%d" % self.p0, "--lossy", "--think-us", str(self.think_us)]
        for name in self.loads:
            argv += ["--load", os.path.join(self.t, name + ".json")]
        r = subprocess.run(argv, capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        if r.returncode != 0:
            raise Fail("the invariant does not hold: %s" % r.stderr.strip()[-800:])
        ok("the ledger is exact: every deducted answer is a row, every lost one resolved by its key")


def no_503(res, what):
    c = res["counts"]
    bad = {k: v for k, v in c.items() if k not in ("deducted", "sold_out") and v}
    expect(not bad and not res.get("transport_errors"), "%s: only deducted and sold_out (%s)"
           % (what, json.dumps(c)))


# ---------------------------------------------------------------- scenarios

def kill_owner(c):
    c.up(3)
    wait_for(30, "every instance sees the three", lambda: c.view_is([1, 2, 3], [1, 2, 3]))
    victim = c.owner_index(1)
    expect(victim is not None and all(c.owner_index(i) == victim for i in (1, 2, 3)),
           "the three agree that stockd-%s owns product %d" % (victim, c.product))
    rest = [i for i in (1, 2, 3) if i != victim]
    view0 = c.members(rest[0])[0]
    load = c.load("load")
    c.under_way()
    expect(c.metric(rest[0], "stockd_route_forwarded_total") + c.metric(
        rest[0], "stockd_route_frame_deductions_total") > 0,
        "stockd-%d forwarded the product's deductions to its owner" % rest[0])
    os.kill(c.pid(victim), signal.SIGKILL)
    ok("killed the owner stockd-%d" % victim)
    wait_for(30, "the survivors' view drops the dead owner", lambda: c.view_is(rest, rest))
    expect(c.members(rest[0])[0] != view0, "the view number changed")
    new = c.owner_index(rest[0])
    expect(new in rest and c.owner_index(rest[1]) == new, "stockd-%s owns the product now" % new)
    c.load_wait("load", load)
    # What an operator's balancer does with a dead instance: it leaves it out. Past the
    # view change there is nothing left to be unavailable about.
    c.nginx(rest)
    after = c.load("after", "--threads", "10", "--loops", "20", wait=True)
    no_503(after, "after the view change")
    c.drain()
    c.check()


def paused_owner(c):
    c.up(3)
    wait_for(30, "every instance sees the three", lambda: c.view_is([1, 2, 3], [1, 2, 3]))
    victim = c.owner_index(1)
    expect(victim is not None, "stockd-%s owns product %d" % (victim, c.product))
    rest = [i for i in (1, 2, 3) if i != victim]
    # The load goes to the two others, which forward to the owner: a paused process
    # holds whatever is sent to it directly (through nginx a third of the clients would
    # wait out the pause there), and what is tested is the forwarding to it.
    loads = [(i, c.load("load%d" % i, "--duration", "12", "--concurrency", "25",
                        url="http://127.0.0.1:%d" % c.port(i))) for i in rest]
    c.under_way()
    wait_for(10, "the owner holds the product's lock", lambda: c.metric(
        victim, "stockd_lock_acquisitions_total") > 0)
    last = c.last_order()
    os.kill(c.pid(victim), signal.SIGSTOP)
    ok("paused the owner stockd-%d in the middle of its batches" % victim)
    try:
        wait_for(30, "the others' view drops the paused owner", lambda: c.view_is(rest, rest))
        wait_for(30, "another instance deducted the product", lambda: sum(
            c.orders_by(i, last) for i in rest) > 0)
    finally:
        os.kill(c.pid(victim), signal.SIGCONT)
    ok("resumed stockd-%d" % victim)
    for i, p in loads:
        c.load_wait("load%d" % i, p)
    m = c.metrics(victim)
    refused = (m.total("stockd_mysql_errors_total", kind="fenced") or 0) + (
        m.total("stockd_mysql_errors_total", kind="guard") or 0)
    expect(refused > 0, "stockd-%d's late batch was refused (fence or pre-commit check: %d)"
           % (victim, refused))
    wait_for(30, "the resumed instance is back in the view", lambda: c.view_is([1, 2, 3], [1, 2, 3]))
    c.drain()
    c.check()


def add_remove(c):
    c.extra = ["--lock-cache-ms", "60000", "--lock-timeout-ms", "20000"]
    c.up(2)
    wait_for(30, "both instances see the two", lambda: c.view_is([1, 2], [1, 2]))
    load = c.load("load", "--duration", "14", "--concurrency", "50")
    c.under_way()
    before = [c.metrics(i) for i in (1, 2)]
    c.start(3)
    c.nginx([1, 2, 3])
    wait_for(30, "the three see the three", lambda: c.view_is([1, 2, 3], [1, 2, 3]))
    left = 1 if c.owner_index(3) != 1 else 2
    c.stockd(left).stop()
    ok("stopped stockd-%d" % left)
    stay = [i for i in (1, 2, 3) if i != left]
    c.nginx(stay)
    wait_for(30, "the two left see the two", lambda: c.view_is(stay, stay))
    mid = [c.metrics(i) for i in stay]
    res = c.load_wait("load", load)
    expect(res["counts"].get("lock_timeout", 0) == 0,
           "no deduction waited out the 60 s lock cache (no lock_timeout)")
    after = c.load("after", "--threads", "50", "--loops", "10", wait=True)
    no_503(after, "after the changes")
    end = [c.metrics(i) for i in stay]

    def batch(b, a):
        n = sum((y.total("stockd_batch_size_count") or 0) - (x.total("stockd_batch_size_count") or 0)
                for x, y in zip(b, a))
        s = sum((y.total("stockd_batch_size_sum") or 0) - (x.total("stockd_batch_size_sum") or 0)
                for x, y in zip(b, a))
        return s / n if n else 0
    first = sum(m.total("stockd_batch_size_sum") or 0 for m in before) / max(
        1, sum(m.total("stockd_batch_size_count") or 0 for m in before))
    last = batch(mid, end)
    print("mean batch: before the changes %.1f, after %.1f" % (first, last), flush=True)
    expect(last > 1, "the owner batches again after the changes (mean %.1f deductions)" % last)
    c.drain()
    c.check()


def peer_http_cut(c):
    # A shorter deadline (the last --queue-deadline-ms wins): against the blackhole each
    # forward fails only when its budget is spent (half the deadline), and the circuit
    # opens at the third failure.
    c.extra = ["--queue-deadline-ms", "4000"]
    relay, control = c.p0 + 12, os.path.join(c.t, "proxy.control")
    srv.MariaDB(c.fixture).create_db(c.db, DB_USER, DB_PASS)
    with Shop(c.fixture, c.db) as shop:
        shop.set_stock(c.product, c.stock)
    c.zk.start()
    proc.spawn([os.path.join(c.build, "tests", "support", "fault-proxy"), "--listen", str(relay),
                "--upstream", str(c.port(3)), "--control", control],
               os.path.join(c.t, "proxy.log"), pidfile=os.path.join(c.t, "proxy.pid"))
    wait_for(10, "the relay listens", lambda: "ready" in open(os.path.join(c.t, "proxy.log")).read())
    c.start(1)
    c.start(2)
    c.start(3, announce=relay)
    c.nginx([1, 2, 3])
    wait_for(30, "every instance sees the three", lambda: c.view_is([1, 2, 3], [1, 2, 3]))
    # A product that stockd-3 owns, so that 1 and 2 forward to it through the relay.
    for pid in range(2, 200):
        if c.owner_index(1, pid) == 3:
            break
    else:
        raise Fail("stockd-3 owns none of products 2..199")
    c.product = pid
    with Shop(c.fixture, c.db) as shop:
        shop.set_products(c.product, c.product, c.stock)
    ok("stockd-3 owns product %d" % c.product)
    peer = "127.0.0.1:%d" % relay

    def breaker(i):
        return c.metrics(i).total("stockd_route_breaker_open", peer=peer) or 0
    # Long enough to outlast the failures, the open circuit and the healing (it is
    # waited for at the end, whatever the time left).
    load = c.load("load", "--duration", "40", "--concurrency", "30")
    c.under_way(20)
    fall0 = [c.metric(i, "stockd_route_local_fallbacks_total") for i in (1, 2)]
    with open(control + ".tmp", "w") as f:
        f.write("blackhole on\ncut\n")
    os.replace(control + ".tmp", control)
    ok("the relay in front of stockd-3 cuts and blackholes")
    # Three failed forwards open a circuit; against a blackhole each fails only when its
    # budget is spent (under 2 s), so this takes up to three of them.
    wait_for(60, "stockd-1 and stockd-2 open their circuit to stockd-3",
             lambda: breaker(1) == 1 and breaker(2) == 1)
    expect(c.view_is([1, 2, 3], [1, 2, 3]), "stockd-3 is still in ZooKeeper's view")
    wait_for(20, "they serve its product locally", lambda: all(
        c.metric(i, "stockd_route_local_fallbacks_total") > f for i, f in zip((1, 2), fall0)))
    with open(control + ".tmp", "w") as f:
        f.write("heal\n")
    os.replace(control + ".tmp", control)
    ok("the relay healed")
    fwd = [c.metric(i, "stockd_route_forwarded_total") + c.metric(i, "stockd_route_frames_total")
           for i in (1, 2)]
    wait_for(60, "the circuits close again", lambda: breaker(1) == 0 and breaker(2) == 0)
    wait_for(20, "forwarding to stockd-3 resumes", lambda: any(
        c.metric(i, "stockd_route_forwarded_total") + c.metric(i, "stockd_route_frames_total") > f
        for i, f in zip((1, 2), fwd)))
    c.load_wait("load", load)
    c.drain()
    c.check()


def peer_path_refused(c):
    c.up(2)
    wait_for(30, "both instances see the two", lambda: c.view_is([1, 2], [1, 2]))
    nginx = "http://127.0.0.1:%d" % c.p0
    secret = open(c.secret).read().strip()
    stock = c.stock_now()
    for path in ("/peer/reduce?id=%d" % c.product, "/peer/frame", "/peer/", "/peer/x/../reduce?id=2"):
        for method in ("GET", "POST"):
            status, ans = get(nginx + path, method=method, headers={"X-Stockd-Peer-Secret": secret,
                                                                    "X-Stockd-Hop": "1"})
            expect(status == 404 and isinstance(ans, dict) and ans.get("result") == "not_found",
                   "nginx refuses %s %s with its JSON 404 (got %s %s)" % (method, path, status, ans))
    for i in (1, 2):
        for path in ("/peer/reduce?id=%d" % c.product, "/peer/frame"):
            status, ans = get("http://127.0.0.1:%d%s" % (c.port(i), path), method="POST")
            expect(400 <= status < 500 and isinstance(ans, dict),
                   "stockd-%d refuses %s without the secret: %s %s" % (i, path, status, ans))
    expect(c.stock_now() == stock, "nothing was deducted (stock %d)" % stock)
    # A client that sends the hop header itself gains a local serve, nothing more.
    owner = c.owner_index(1)
    other = 2 if owner == 1 else 1
    f0 = c.metric(other, "stockd_route_forwarded_total")
    status, ans = get("http://127.0.0.1:%d/stock/reduce?id=%d" % (c.port(other), c.product),
                      headers={"X-Stockd-Hop": "1", "Idempotency-Key": "hop-header-1"})
    expect(status == 200 and ans.get("result") == "deducted", "a request with X-Stockd-Hop is served")
    expect(c.metric(other, "stockd_route_forwarded_total") == f0,
           "where it landed (stockd-%d forwarded nothing)" % other)
    expect(c.stock_now() == stock - 1, "it deducted exactly one unit")


SCENARIOS = {f.__name__: f for f in (kill_owner, paused_owner, add_remove, peer_http_cut,
                                     peer_path_refused)}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in SCENARIOS:
        print("usage: routing.py %s" % "|".join(SCENARIOS), file=sys.stderr)
        return 2
    stockd = os.environ.get("STOCKD_BIN", "")
    help_text = subprocess.run([stockd, "--help"], capture_output=True, text=True).stdout \
        if os.access(stockd, os.X_OK) else ""
    if "--route" not in help_text or "--peer-secret-file" not in help_text:
        print("SKIP: %s has no --route owner (issue 40's stockd side)" % stockd, flush=True)
        return 77
    c = Cluster()
    try:
        SCENARIOS[sys.argv[1]](c)
    except (Fail, LabError) as e:
        print("FAIL: %s" % e, flush=True)
        for f in sorted(os.listdir(os.path.join(c.t, "stockd"))) if os.path.isdir(
                os.path.join(c.t, "stockd")) else []:
            if f.endswith(".log"):
                print("-- %s (last lines):\n%s" % (f, proc.tail(os.path.join(c.t, "stockd", f), 8)))
        return 1
    finally:
        c.down()
    print("PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
