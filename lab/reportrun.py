"""The strategy comparison report's measurements (loadtest/report is its command line).

A Bench runs on the report's own stack (lab/stack.py, under its own run directory and
port base) and leaves its results as report.json's records: one run of the older
tables (run_record: the hot product or the spread, with sold-out answers) and the
headline benchmark's rows (ceiling and load rows, rate-limit runs). The pure parts
(run_record, bench_row, rate_limit_record, command_line) take what was read and say
what it means; the ledger's verdicts are lab/ledger.py's.

The benchmark's hygiene: every server a row needs is started before the first row
(servers_up), every row starts on fresh instances warmed the same way (warm), the HTTP
ceiling is measured the same way right before every load run (ceiling), and
lab/report.py flags a row whose ceiling strays.
"""

import json
import os
import shlex
import subprocess
import threading
import time

from . import LabError, ledger, prom
from .loadstack import Failed, LoadStack, client_argv, client_result, note
from .shop import Shop

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_STOCK = 100000000  # more than any run can sell: every answer a deduction
SPREAD_LO = 1001  # the spread's products are 1001..1000+N


def command_line(prog, args):
    """The command as typed, for the report: each word quoted only where the shell needs it."""
    return " ".join([prog] + [shlex.quote(a) for a in args])


def _int(v):
    return int(v) if v is not None and v == int(v) else v


# ---------------------------------------------------------------- pure records


def run_record(table, spec, think, threads, loops, products, initial, final, negative, orders,
               load, deltas, shares, samples, window):
    """One run of the older tables as report.json has it.

    load: stockload's --json document; deltas: a prom.Scrape of after - before summed
    over the instances; shares: [(instance, orders)]; samples: [(server time, stock)];
    window: (t0, t1), the load's start and end (the samples' time 0 is t0)."""
    deducted = load["counts"]["deducted"]
    led = ledger.judge(initial, final, orders, deducted, negative=negative, products=products)

    def per(x, n):
        return None if x is None or not n else x / n

    zk = {op: _int(v) for op, v in sorted(deltas.by_label("stockd_zk_ops_total", "op").items())}
    zk_total = _int(sum(zk.values())) if zk else None
    svc_names = sorted(deltas.by_label("stockd_lock_service_ops_total", "service"))
    svc_ops = zk_total if zk else _int(deltas.total("stockd_lock_service_ops_total"))
    statements = _int(deltas.total("stockd_mysql_statements_total"))
    waits = _int(deltas.total("stockd_lock_wait_seconds_count") or 0)
    p99 = prom.histogram_quantile_bound(deltas, "stockd_lock_wait_seconds", 0.99)
    buckets = sorted(((float(dict(ls)["le"]), dict(ls)["le"], v) for (n, ls), v in deltas.items()
                      if n == "stockd_lock_wait_seconds_bucket"))
    bsum, bcount = deltas.total("stockd_batch_size_sum"), deltas.total("stockd_batch_size_count")
    t0, t1 = window
    return {
        "table": table, "run": spec.label, "mode": spec.mode, "stockd_args": spec.stockd_args(),
        "think_us": think, "threads": threads, "loops": loops, "products": products,
        "initial": initial, "final": final, "orders": orders, "deducted": deducted,
        "sold_out": load["counts"]["sold_out"],
        "errors": load["requests"] - deducted - load["counts"]["sold_out"],
        "oversold": led.oversold, "verdict": led.verdict, "ledger": "ok" if led.ok else "MISMATCH",
        "reconciliation": (load.get("reconciliation") or {}).get("verdict", "n/a"),
        "requests": load["requests"], "duration_s": load["duration_s"],
        "throughput_rps": load["throughput_rps"], "latency_ms": load["latency_ms"],
        "latency_ms_by_outcome": load.get("latency_ms_by_outcome"), "counts": load["counts"],
        "instance_share": [{"instance": i, "orders": n, "share": n / orders if orders else 0}
                           for i, n in shares],
        "zk_ops": zk or None, "zk_ops_total": zk_total,
        "zk_ops_per_deduction": per(zk_total, deducted) if zk else None,
        "zk_ops_per_request": zk_total / load["requests"] if zk else None,
        # The lock service: ZooKeeper, Redis or the lock table (its own statements, not in
        # mysql_statements); None for the modes without one.
        "lock_service": "zookeeper" if zk else (svc_names[0] if svc_names else None),
        "lock_service_ops": svc_ops, "lock_service_ops_per_deduction": per(svc_ops, deducted),
        "mysql_statements": statements,
        "mysql_statements_per_deduction": per(statements, deducted),
        "lock_acquisitions": _int(deltas.total("stockd_lock_acquisitions_total")),
        # Of those, the rounds served from the zk lock cache (--lock-cache-ms).
        "lock_cache_hits": _int(deltas.total("stockd_lock_cache_hits_total")),
        "batches": _int(bcount), "batch_mean": per(bsum, bcount),
        "lock_wait": {
            "count": waits,
            "mean_ms": deltas.total("stockd_lock_wait_seconds_sum") * 1000 / waits if waits else None,
            # The upper bound of the bucket holding the 99th percentile: all a histogram knows.
            "p99_le_s": None if not waits or p99 is None else ("+Inf" if p99 == float("inf") else p99),
            "buckets": [{"le": le, "count": _int(c)} for _, le, c in buckets],
        },
        "load_window": {"start": t0, "end": t1},
        "stock_samples": [[round(t - t0, 3), s] for t, s in samples],
    }


def bench_row(result, *, spec, mode, route, kind, ensemble, rep, before, after, client_orders,
              negative, products, concurrency):
    """One load run of the benchmark: the client's Result (lab/loadgen.py) with the
    ledger of this run: before/after are the stock summed over the load's products,
    client_orders the orders rows it added. wrk stops at its deadline without waiting
    for the requests under way: their deductions commit, their answers are not counted
    (at most -c of them), so its check is lossy."""
    wrk = result.client == "wrk"
    led = ledger.judge(before, after, client_orders, result.ok, negative=negative,
                       products=products, lossy=wrk, lost=concurrency if wrk else 0)
    return dict(result.to_json(), row=spec, spec=spec, mode=mode, route=route, kind=kind,
                ensemble=ensemble, rep=rep, client_orders=client_orders, exact=led.exact,
                problems=list(led.problems))


def bench_load_totals(rows, initial, final, orders, negative, products, lock_ops):
    """Adds the (spec, route, load)'s ledger over all its runs to each of its rows: the
    stock change, the orders and the lock operations per deduction; a row is exact only
    if the whole load is too."""
    whole = ledger.judge(initial, final, orders, orders, negative=negative, products=products)
    for r in rows:
        r.update(initial=initial, final=final, orders=orders,
                 answered_2xx=sum(x["ok"] for x in rows),
                 exact=r["exact"] and whole.exact,
                 lock_ops_per_deduction=None if lock_ops is None or not orders else lock_ops / orders)
    return rows


def load_batches(before, after):
    """What a load did to the lock, from each instance's /metrics before and after it
    (lists of Scrapes in the same instance order): the batches (stockd_batch_size: the
    deductions one lock acquisition, or one transaction of for-update, served) and their
    mean size, overall and per instance. An instance's batch is what it gathered of the
    product's requests while it waited for the lock, so under round-robin it shrinks
    with the instance's share of them, and each batch is one more hand-off of the lock
    (or the row lock) between instances."""
    def mean(d):
        n = d.total("stockd_batch_size_count")
        return d.total("stockd_batch_size_sum") / n if n else None

    whole = prom.delta(before, after)
    return {"batches": _int(whole.total("stockd_batch_size_count")), "batch_mean": mean(whole),
            "batch_mean_by_instance": [mean(prom.delta([b], [a])) for b, a in zip(before, after)]}


def rate_limit_record(limit, load, initial, final, orders):
    """A rate-limit run (stockload on the hot product) as report.json has it."""
    c = load["counts"]
    rec = (load.get("reconciliation") or {}).get("verdict")
    led = ledger.judge(initial, final, orders, c["deducted"])
    return {"rate_limit": limit or None, "requests": load["requests"], "rps": load["throughput_rps"],
            "admitted": c["deducted"], "refused_429": c["http_4xx"],
            "other": load["requests"] - c["deducted"] - c["http_4xx"],
            "admitted_p99_ms": load["latency_ms_by_outcome"]["deducted"]["p99"],
            "refused_p99_ms": (load["latency_ms_by_outcome"].get("http_4xx") or {}).get("p99"),
            "initial": initial, "final": final, "orders": orders, "reconciliation": rec,
            "exact": led.ok and rec == "ok"}


# ---------------------------------------------------------------- the stack


class Bench:
    """The report's stack and its loads. o: loadtest/report's options."""

    def __init__(self, o, work):
        self.o, self.work = o, work
        self.ls = LoadStack("report", o.run, o.port_base, os.path.join(work, "stack.log"),
                            3 if o.galera else 0, o.multi_writer)
        self.stack = self.ls.stack
        self.shop = None
        self.stockload = None
        self.runs, self.rows, self.rate_limits = [], [], []
        self.seq = 0

    def up(self, ensemble=False):
        self.ls.step(self.stack.up, self.o.instances, "none", self.o.extra, zk_ensemble=ensemble,
                     **self.ls.db_kw,
                     what="starting the stack")
        if self.shop:
            self.shop.close()
        self.shop = Shop(self.stack.run)
        self.nginx = "http://127.0.0.1:%d" % self.stack.st["nginx_port"]
        env = dict(self.stack.env())
        self.mysql_url = env["MYSQL_URL"]
        # stockload reads the service user's password for --mysql from its environment.
        self.client_env = dict(os.environ, STOCKD_MYSQL_PASSWORD=env["STOCKD_MYSQL_PASSWORD"])
        if self.shop.stock(self.o.product) is None:
            raise Failed(f"no product {self.o.product} in shop")

    def restart(self, lock, args, route="round-robin", rate_limit=None, instances=None):
        self.ls.step(self.stack.restart_stockd, instances or self.o.instances, lock,
                     list(args) + self.o.extra, route, rate_limit,
                     what=f"restarting stockd (--lock {lock})")

    def down(self):
        if self.shop:
            self.shop.close()
            self.shop = None
        self.ls.down(what="stopping the stack")

    def find_stockload(self):
        self.stockload = self.ls.stockload(build=True)

    # ---------------------------------------------------------------- reading

    def scrape(self):
        return self.ls.scrape()

    def books(self, lo, hi):
        """(stock summed, orders rows, products below 0) of products lo..hi, read in one
        statement, so from one snapshot: a deduction that commits while they are read
        (wrk leaves requests under way at its deadline) is in all three or in none."""
        stock, orders, negative = self.shop.rows(
            "SELECT (SELECT COALESCE(SUM(stock), 0) FROM product_stock WHERE id BETWEEN %s AND %s),"
            " (SELECT COUNT(*) FROM orders WHERE product_id BETWEEN %s AND %s),"
            " (SELECT COUNT(*) FROM product_stock WHERE id BETWEEN %s AND %s AND stock < 0)",
            (lo, hi, lo, hi, lo, hi))[0]
        return int(stock), int(orders), int(negative)

    def settled(self, mode):
        """Mode redis-stock answers before MariaDB has the order: the ledger is read once
        the order writer has drained the stream. Any other mode: at once."""
        if mode == "redis-stock" and self.shop.redis:
            try:
                self.shop.redis.wait_drained()
            except LabError as e:
                raise Failed(str(e))

    def _run(self, argv, out, ok=(0,)):
        """Runs a load client bounded by --mode-timeout; its stdout to out."""
        with open(out, "wb") as f, open(out + ".err", "wb") as err:
            try:
                rc = subprocess.run(argv, stdout=f, stderr=err, stdin=subprocess.DEVNULL,
                                    env=self.client_env, timeout=self.o.mode_timeout).returncode
            except subprocess.TimeoutExpired:
                raise Failed(f"{os.path.basename(argv[0])}: the load ran longer than "
                             f"{self.o.mode_timeout} s (--mode-timeout)")
        if rc not in ok:
            with open(out + ".err", encoding="utf-8", errors="replace") as e:
                raise Failed(f"{os.path.basename(argv[0])} failed (exit {rc}): {e.read()[-2000:]}")

    def _id(self, name):
        self.seq += 1
        return os.path.join(self.work, f"{self.seq}-{name}")

    # ---------------------------------------------------------------- the older tables

    def run_one(self, table, think, threads, loops, spec):
        """Restarts stockd with the spec, runs the load (the hot product, or the spread's
        products for table spread) and appends its record to self.runs."""
        o = self.o
        note(f"{table}: {spec.label} ({' '.join(['--lock', spec.mode] + spec.stockd_args())} "
             f"--think-us {think}), {threads} x {loops} requests")
        self.restart(spec.mode, ["--think-us", str(think)] + spec.stockd_args())
        load_args = ["--threads", str(threads), "--loops", str(loops), "--json", "--no-progress"]
        if table == "spread":
            products, each = o.spread, max(o.stock // o.spread, 1)
            lo, hi = SPREAD_LO, SPREAD_LO + o.spread - 1
            self.shop.set_products(lo, hi, each, name="report")
            initial = each * o.spread
            url = f"{self.nginx}/stock/reduce?id={{id}}"
            load_args += ["--products", f"{lo}-{hi}"]
        else:
            products, lo, hi = 1, o.product, o.product
            self.shop.set_stock(o.product, o.stock, spec.segments)
            initial = o.stock
            url = f"{self.nginx}/stock/reduce?id={o.product}"
            if spec.mode != "redis-stock":  # its answers name keys; orders come later
                load_args += ["--mysql", self.mysql_url, "--product", str(o.product)]
        before = self.scrape()
        sampler = Sampler(self.stack.run, o.product, o.sample_ms / 1000) if table != "spread" else None
        out = self._id(f"{spec.label}.load.json")
        try:
            # A few samples of the starting level before the load, and of the end after it.
            if sampler:
                sampler.window(0.2)
            t0 = time.time()
            # 0: done; 1: the answers and the orders disagree, which is a result to report.
            self._run([self.stockload, "--url", url] + load_args, out, ok=(0, 1))
            t1 = time.time()
            self.settled(spec.mode)
            if sampler:
                sampler.window(0.2)
        finally:
            samples = sampler.stop() if sampler else []
        deltas = prom.delta(before, self.scrape())
        with open(out, encoding="utf-8") as f:
            load = json.load(f)
        final, orders, negative = self.books(lo, hi)
        shares = [(i, int(n)) for i, n in self.shop.rows(
            "SELECT instance, COUNT(*) FROM orders WHERE product_id BETWEEN %s AND %s "
            "GROUP BY instance ORDER BY instance", (lo, hi))]
        note(f"  stock {initial} -> {final}, orders {orders}, deducted answers "
             f"{load['counts']['deducted']}, {load['throughput_rps']:.0f} req/s")
        self.runs.append(run_record(table, spec, think, threads, loops, products, initial, final,
                                    negative, orders, load, deltas, shares, samples, (t0, t1)))

    # ---------------------------------------------------------------- the headline benchmark

    def servers_up(self, specs):
        """Every lock server a benchmark row needs (RedLock's three Redis, etcd), started
        before the first row rather than when its row comes: the stack starts them with
        the first stockd of their mode and keeps them up."""
        for mode in dict.fromkeys(s.mode for s in specs):
            if mode in ("redlock", "etcd"):
                note(f"bench: starting the servers of {mode} before the first row")
                self.restart(mode, [])

    def client(self, client, kind, path, out):
        """One load on path (/stock/reduce or /health) through nginx: kind hot (one
        product, count-based) or spread (the products, duration-based); its Result."""
        o = self.o
        hot = kind == "hot"
        if (client, kind) not in (("stockload", "hot"), ("stockload", "spread"), ("ab", "hot"),
                                  ("wrk", "spread")):
            raise Failed(f"no client {client} for {kind}")
        n = o.bench_requests // o.bench_concurrency
        # stockload exits 1 when it saw answers other than deductions (the ceiling's /health).
        self._run(client_argv(client, self.stockload, self.nginx, path, out, o.bench_concurrency,
                              product=o.product if hot else None,
                              products=None if hot else (SPREAD_LO, SPREAD_LO + o.bench_products - 1),
                              seconds=None if hot else o.bench_seconds,
                              requests=n * o.bench_concurrency if hot else None),
                  out, ok=(0, 1) if client == "stockload" else (0,))
        return client_result(client, out, health=path == "/health")

    def warm(self):
        """The fresh instances (and the servers behind them) warmed the same way before
        every row, so that no row's ceiling or load is measured on a cold stack: a second
        of /health and a second of deductions on the hot product, both thrown away. The
        stock is reset after it, so its orders count in no ledger."""
        for path in ("/health", "/stock/reduce"):
            self._run([self.stockload, "--url", f"{self.nginx}{path}?id={self.o.product}",
                       "--duration", "1", "--concurrency", str(self.o.bench_concurrency), "--json",
                       "--no-progress"], self._id("warm.json"), ok=(0, 1))

    def set_bench_stock(self):
        lo, hi = SPREAD_LO, SPREAD_LO + self.o.bench_products - 1
        self.shop.set_products(lo, hi, BENCH_STOCK, name="report")
        self.shop.set_stock(self.o.product, BENCH_STOCK, 1)

    def ceiling(self, route, kind, spec, ensemble, rep, into):
        """The HTTP ceiling right before a load run: GET /health?id=N through the same
        nginx with each client and the same settings (with affinity it reaches the
        instance a deduction would). Measured next to every run, since on a shared
        machine the ceiling moves with the neighbours."""
        for client in ("stockload", "ab" if kind == "hot" else "wrk"):
            r = self.client(client, kind, "/health", self._id(f"ceiling-{client}"))
            into.append(dict(r.to_json(), row="ceiling", spec=spec, route=route, kind=kind,
                             ensemble=ensemble, rep=rep))
            note(f"  {kind} ceiling {client}: {r.rps:.0f} req/s")

    def bench_spec(self, route, ensemble, spec, instances=None, into=None):
        """The spec on both loads with both clients, --bench-repeat times each (the
        ceiling measured before every run), the ledger checked per client run and over
        the load, on `instances` stockd (--instances); the rows go to `into` (the
        headline's, self.rows), each with its instance count and its load's batches."""
        o = self.o
        n = instances or o.instances
        into = self.rows if into is None else into
        note(f"bench: {spec.label} ({' '.join(['--lock', spec.mode] + spec.stockd_args())}), {route}"
             + (", ZooKeeper ensemble" if ensemble else "") + f", {n} instance(s)")
        self.restart(spec.mode, spec.stockd_args(), route, instances=n)
        first = len(into)
        self.warm()
        self.set_bench_stock()
        for kind in ("hot", "spread"):
            lo, hi = ((o.product, o.product) if kind == "hot"
                      else (SPREAD_LO, SPREAD_LO + o.bench_products - 1))
            products = 1 if kind == "hot" else o.bench_products
            initial = self.books(lo, hi)[0]
            before = self.scrape()
            rows = []
            for rep in range(1, o.bench_repeat + 1):
                self.ceiling(route, kind, spec.label, ensemble, rep, into)
                for client in ("stockload", "ab" if kind == "hot" else "wrk"):
                    s0, n0, _ = self.books(lo, hi)
                    r = self.client(client, kind, "/stock/reduce", self._id(f"{spec.label}-{client}"))
                    self.settled(spec.mode)
                    s1, n1, neg = self.books(lo, hi)
                    rows.append(bench_row(r, spec=spec.label, mode=spec.mode, route=route, kind=kind,
                                          ensemble=ensemble, rep=rep, before=s0, after=s1,
                                          client_orders=n1 - n0, negative=neg,
                                          products=products, concurrency=o.bench_concurrency))
                    note(f"  {kind} {client}: {r.rps:.0f} req/s, p99 {r.p99_ms} ms")
            after = self.scrape()
            d = prom.delta(before, after)
            zk, svc = d.total("stockd_zk_ops_total"), d.total("stockd_lock_service_ops_total")
            ops = None if zk is None and svc is None else (zk or 0) + (svc or 0)
            batches = load_batches(before, after)
            into += [dict(r, **batches) for r in
                     bench_load_totals(rows, initial, *self.books(lo, hi), products, ops)]
        for r in into[first:]:
            r["instances"] = n

    def rate_limit_run(self, limit):
        """Batched zk, round-robin, the hot product, stockload with the bench's settings,
        with nginx's limit ("" = none)."""
        o = self.o
        note(f"bench: rate limit {limit or 'off'}: zk, round-robin, hot product, stockload")
        self.restart("zk", [], "round-robin", limit or "off")
        self.shop.set_stock(o.product, BENCH_STOCK, 1)
        out = self._id("rate-limit.json")
        self._run([self.stockload, "--url", f"{self.nginx}/stock/reduce?id={o.product}",
                   "--threads", str(o.bench_concurrency),
                   "--loops", str(o.bench_requests // o.bench_concurrency), "--json", "--no-progress",
                   "--mysql", self.mysql_url, "--product", str(o.product)], out, ok=(0, 1))
        with open(out, encoding="utf-8") as f:
            load = json.load(f)
        r = rate_limit_record(limit, load, BENCH_STOCK, self.shop.stock(o.product),
                              self.shop.orders(o.product))
        self.rate_limits.append(r)
        note(f"  rate limit {limit or 'off'}: {r['admitted']} admitted (p99 {r['admitted_p99_ms']} "
             f"ms), {r['refused_429']} refused with 429, exact {str(r['exact']).lower()}")

    def bench_doc(self):
        o = self.o
        n, c = o.bench_requests // o.bench_concurrency, o.bench_concurrency
        lo, hi = SPREAD_LO, SPREAD_LO + o.bench_products - 1
        return {"settings": {
            "hot": {"product": o.product, "ab": f"ab -k -n {n * c} -c {c}",
                    "stockload": f"stockload --threads {c} --loops {n}"},
            "spread": {"count": o.bench_products, "products": f"{lo}..{hi}",
                       "wrk": f"wrk -t 2 -c {c} -d {o.bench_seconds}s -s loadtest/wrk-json.lua "
                              f"(random id)",
                       "stockload": f"stockload --duration {o.bench_seconds} --concurrency {c} "
                                    f"--products {lo}-{hi}"},
            "stock_each": BENCH_STOCK, "instances": o.instances, "repeat": o.bench_repeat},
            "rows": self.rows, "rate_limit": self.rate_limits}

    # ---------------------------------------------------------------- the run's facts

    def durability(self):
        """The durability the runs had, read from the servers they ran against: what
        MariaDB and ZooKeeper promise about a committed write decides what each commit and
        each lock node costs. MariaDB's settings from the server; ZooKeeper's forceSync
        from its zoo.cfg (yes when the file does not set it, ZooKeeper's default); the
        medium from the filesystem the run directory sits on."""
        flush, sync, log_bin = self.shop.rows(
            "SELECT @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin")[0]
        run = self.stack.run
        cfg = os.path.join(run, "zk", "zoo.cfg")
        if not os.path.exists(cfg):
            cfg = next((os.path.join(d, "zoo.cfg") for d, _, fs in os.walk(run)
                        if "zoo.cfg" in fs and d.count(os.sep) - run.count(os.sep) <= 1), None)
        force, source = "unknown", "unknown"
        if cfg:
            with open(cfg, encoding="utf-8") as f:
                vals = [l.split("=", 1)[1].strip() for l in f
                        if "=" in l and l.split("=", 1)[0].strip() == "forceSync"]
            force, source = (vals[-1], "zoo.cfg") if vals and vals[-1] else ("yes", "default")
        fm = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", run],
                            capture_output=True, text=True).stdout.split()
        fstype, fs_source = (fm + ["unknown", "unknown"])[:2]
        if fstype in ("tmpfs", "ramfs"):
            medium = f"memory ({fstype})"
        else:
            rota = subprocess.run(["lsblk", "-ndo", "ROTA", fs_source], capture_output=True,
                                  text=True).stdout.strip()
            medium = {"0": "non-rotational disk (SSD or virtual)",
                      "1": "rotational disk, as the kernel reports it"}.get(rota, "unknown medium")
        return {"mysql": {"innodb_flush_log_at_trx_commit": int(flush), "sync_binlog": int(sync),
                          "log_bin": int(log_bin)},
                "zookeeper": {"force_sync": force, "force_sync_source": source},
                "storage": {"path": run, "fstype": fstype, "source": fs_source, "medium": medium}}


def machine(loadavg_start, loadavg_end):
    """The machine the report ran on."""
    def first(path, key, sep=":"):
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    k, s, v = line.partition(sep)
                    if s and k.strip() == key:
                        return v.strip()
        except OSError:
            pass
        return None

    mem_kib = int((first("/proc/meminfo", "MemTotal") or "0 kB").split()[0])
    os_name = (first("/etc/os-release", "PRETTY_NAME", "=") or "unknown").strip('"')
    try:
        with open("/etc/debian_version", encoding="utf-8") as f:
            debian = f.read().strip() or None
    except OSError:
        debian = None
    try:
        v = subprocess.run(["mariadbd", "--version"], capture_output=True, text=True).stdout.split()
        mariadb = v[2] if len(v) > 2 else "unknown"
    except OSError:
        mariadb = "unknown"
    return {"nproc": os.cpu_count(), "cpu": first("/proc/cpuinfo", "model name") or "unknown",
            "ram_gib": round(mem_kib / 1048576, 1), "os": os_name, "debian": debian,
            "kernel": os.uname().release, "mariadb": mariadb,
            "loadavg_start": loadavg_start, "loadavg_end": loadavg_end}


def commit():
    """The commit the tools ran from: {"commit": short hash, "dirty": uncommitted changes
    to tracked files}, or None outside a git checkout."""
    def git(*args):
        try:
            r = subprocess.run(["git", "-C", SRC] + list(args), capture_output=True, text=True)
        except OSError:
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    head = git("rev-parse", "--short", "HEAD")
    return None if head is None else {
        "commit": head, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def loadavg():
    return os.getloadavg()[0]


class Sampler:
    """One root connection that reads the hot product's stock every interval with the
    server's clock (one clock for every sample), in a thread, until stop()."""

    def __init__(self, run, product, interval):
        self.samples, self.stopped = [], threading.Event()
        self.shop = Shop(run)
        self.product, self.interval = product, interval
        self.error = None
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        try:
            while not self.stopped.is_set():
                t, s = self.shop.rows("SELECT UNIX_TIMESTAMP(NOW(6)), stock FROM product_stock "
                                      "WHERE id=%s", (self.product,))[0]
                self.samples.append((float(t), int(s)))
                self.stopped.wait(self.interval)
        except Exception as e:  # noqa: BLE001 - reported by stop()
            self.error = e

    def window(self, seconds):
        """Lets the sampler take its samples for a while (before and after the load)."""
        self.stopped.wait(seconds)

    def stop(self):
        self.stopped.set()
        self.thread.join()
        self.shop.close()
        if self.error:
            raise Failed(f"the stock sampler failed: {self.error}")
        return list(self.samples)
