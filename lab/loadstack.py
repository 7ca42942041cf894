"""A load on a private stack: what the load tools (loadtest/report, loadtest/cpu,
loadtest/memory) share. Each runs on a stack of its own (lab/stack.py, under its own run
directory and port base), starts it in a mode with fresh stockd instances, finds
stockload, reads /metrics, and stops the stack at the end unless --keep; a run that
fails exits 1 with its message (Failed). What each measures stays in the tool."""

import json
import os
import subprocess
import sys

from . import LabError, loadgen, prom
from . import stack as stackmod

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Failed(Exception):
    """A run failed: the load tool (report, cpu, memory) exits 1 with the message."""


def note(msg, tool="report"):
    """A progress note of a load tool (report, cpu, memory) on stderr."""
    print(f"{tool}: {msg}", file=sys.stderr, flush=True)


def client_argv(client, stockload, nginx, path, out, concurrency, product=None, products=None,
                seconds=None, requests=None, users=None):
    """The argv of a load client (stockload, ab or wrk) on PATH through NGINX with
    CONCURRENCY requests in flight: on PRODUCT (one URL) or on PRODUCTS (lo, hi: each
    request's id drawn uniformly), for SECONDS or, stockload and ab, REQUESTS in all.
    ab writes its per-request table to OUT.tsv; wrk prints JSON with
    loadtest/wrk-json.lua. USERS (stockload only): each request names a customer of
    u1..uUSERS in an X-User header (docs/orders.md)."""
    c = str(concurrency)
    one = f"{nginx}{path}?id={product}"
    if client == "stockload":
        argv = [stockload, "--url", one if products is None else f"{nginx}{path}?id={{id}}"]
        argv += (["--duration", str(seconds), "--concurrency", c] if requests is None
                 else ["--threads", c, "--loops", str(requests // concurrency)])
        return argv + ["--json", "--no-progress"] + (
            [] if products is None else ["--products", "%d-%d" % products]) + (
            [] if users is None else ["--users", str(users)])
    if users is not None:
        raise Failed(f"no client {client} with customers (stockload --users)")
    if client == "ab" and products is None:
        count = ["-t", str(seconds), "-n", "100000000"] if requests is None else ["-n", str(requests)]
        return ["ab", "-k", "-l", "-r", "-q", *count, "-c", c, "-s", "30", "-g", out + ".tsv", one]
    if client == "wrk":
        wrk = ["wrk", "-t", "2", "-c", c, "-d", f"{seconds}s", "-s",
               os.path.join(SRC, "loadtest", "wrk-json.lua")]
        return wrk + ([one] if products is None else [nginx, "--", path] + [str(p) for p in products])
    raise Failed(f"no client {client} for {'one product' if products is None else 'products'}")


def client_result(client, out, health=False):
    """What the load client wrote to OUT (and OUT.tsv), as a lab/loadgen.py Result;
    HEALTH: stockload's load was on /health."""
    try:
        with open(out, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if client == "stockload":
            return loadgen.stockload(json.loads(text), health=health)
        if client == "ab":
            with open(out + ".tsv", encoding="utf-8") as g:
                return loadgen.ab(text, g.read())
        return loadgen.wrk(text)
    except (OSError, ValueError, KeyError) as e:
        raise Failed(f"{client}: could not read its output ({out}): {e}")


class LoadStack:
    """The stack of one run directory and port base, whatever STACK_RUN another stack
    exported (the tool's children see the same); its steps' output goes to LOG."""

    def __init__(self, tool, run, port_base, log, galera=0, multi_writer=False):
        """GALERA, MULTI_WRITER: every `up` puts the stock table on a Galera cluster
        (scripts/stack up --galera 3 [--multi-writer])."""
        self.tool, self.log = tool, log
        self.db_kw = {"galera": galera, "multi_writer": multi_writer}
        os.environ.update(STACK_RUN=run, STACK_PORT_BASE=str(port_base))
        self.stack = stackmod.Stack(run)

    def step(self, fn, *args, what=None, **kw):
        """One step of the stack, its output to the log; a failure is a LabError, or
        with WHAT a Failed naming the step."""
        try:
            stackmod.logged(self.log, fn, *args, **kw)
        except LabError as e:
            if what is None:
                raise
            raise Failed(f"{what} failed: {e}")

    def start(self, instances, mode, args, route=None, zk_ensemble=False):
        """The stack up with INSTANCES fresh stockd in MODE with ARGS (an `up` over a
        running stack keeps its instances; a restart makes them new, and new ones have
        only this run's high-water marks and counters)."""
        self.step(self.stack.up, instances, mode, args, zk_ensemble=zk_ensemble, route=route,
                  **self.db_kw)
        self.step(self.stack.restart_stockd, instances, mode, args, route)

    def stockload(self, build=False):
        """stockload: STOCKLOAD_BIN or STACK_BUILD/loadtest/stockload; with BUILD built
        there when missing, else a Failed."""
        build_dir = os.path.abspath(os.environ.get("STACK_BUILD") or os.path.join(SRC, "build"))
        path = os.environ.get("STOCKLOAD_BIN") or os.path.join(build_dir, "loadtest", "stockload")
        if os.access(path, os.X_OK):
            return path
        if not build:
            raise Failed(f"no stockload at {path} (cmake --build build --target stockload)")
        note(f"building stockload in {build_dir}", self.tool)
        log = os.path.join(os.path.dirname(self.log), "build.log")
        with open(log, "wb") as f:
            ok = all(subprocess.run(a, stdout=f, stderr=f, stdin=subprocess.DEVNULL).returncode == 0
                     for a in (["cmake", "-S", SRC, "-B", build_dir],
                               ["cmake", "--build", build_dir, "-j2", "--target", "stockload"]))
        if not ok:
            raise Failed(f"building stockload failed; see {log}")
        return path

    def scrape(self):
        """Every instance's /metrics (lab/prom.py)."""
        return prom.scrape(self.stack.stockd_ports())

    def down(self, what=None):
        self.step(self.stack.down, what=what)

    def drive(self, measure, keep):
        """MEASURE() on the stack, which is stopped afterwards unless KEEP: its value,
        or None (the tool exits 1) when the run failed, with the message on stderr."""
        try:
            return measure()
        except (Failed, LabError, OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
            note(str(e), self.tool)
            return None
        finally:
            if not keep:
                try:
                    self.down()
                except LabError as e:
                    note(f"stack down failed: {e}", self.tool)
