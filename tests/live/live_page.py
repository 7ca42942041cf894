"""live_page.py: the browser half of tests/live/live_page.sh.

Holds the live page in headless Chromium while scripts/demo runs none x3 and then zk x3
(each paced, on the stack the shell half started), and asserts what the page's DOM
shows, waiting for each state rather than sleeping:
  - all three instances were shown;
  - under none the stock went below zero, and the oversell alert fired;
  - under zk the stock ended at 0, and the lock queue showed at least two waiters from
    at least two instances at once.
The screenshot is written to OUT/live.png whatever the outcome, the demo's output to
OUT/demo-*.log."""

import argparse
import subprocess
import sys

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait


def browser():
    opts = Options()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1500", "--hide-scrollbars"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


# The page's state in one script run, so that no element can be replaced (the page
# redraws every second) between two reads.
STATE_JS = """
const a = (sel, n) => { const e = document.querySelector(sel); return e ? e.getAttribute(n) : null; };
const t = (id) => { const e = document.getElementById(id); return e ? e.textContent : null; };
return {ticks: document.body.dataset.ticks || null, instances: a("#instances", "data-seen"),
        mode: t("mode"), stock: a("#stock-now span", "data-last"),
        stock_min: a("#stock-now span", "data-min"), alert: a("#alert", "data-state"),
        best_waiters: a("#queue-seen", "data-best-waiters"),
        best_owners: a("#queue-seen", "data-best-owners"), errors: t("errors")};
"""


def state(d):
    return d.execute_script(STATE_JS)


def wait_for(d, what, cond, secs):
    """Waits up to secs for cond(state) to be true; fails with what it last saw otherwise."""
    try:
        WebDriverWait(d, secs, poll_frequency=0.2).until(lambda drv: cond(state(drv)))
    except TimeoutException:
        raise AssertionError(f"timed out after {secs} s waiting for {what}; the page shows: "
                             f"{state(d)}") from None
    print(f"ok: {what}: {state(d)}", flush=True)


def num(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def demo(args, runs, log):
    cmd = [args.demo, "--keep", "--pace", str(args.pace), "--runs", runs]
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {rc}; see {log}")
    print(f"ok: demo {runs} done", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="the page, e.g. http://127.0.0.1:PORT/live/")
    ap.add_argument("--demo", required=True, help="scripts/demo")
    ap.add_argument("--out", required=True, help="where the screenshot and logs go")
    ap.add_argument("--pace", type=int, default=150, help="demo --pace, ms [150]")
    args = ap.parse_args()

    d = browser()
    try:
        d.get(args.url)
        wait_for(d, "the page polls", lambda st: (num(st["ticks"]) or 0) >= 2, 30)
        wait_for(d, "all three instances shown",
                 lambda st: (st["instances"] or "").split() == ["stockd-1", "stockd-2", "stockd-3"], 30)

        demo(args, "none:3", f"{args.out}/demo-none.log")
        wait_for(d, "the stock below zero under none", lambda st: (num(st["stock"]) or 0) < 0, 20)
        wait_for(d, "the oversell alert firing", lambda st: st["alert"] == "firing", 30)

        demo(args, "zk:3", f"{args.out}/demo-zk.log")
        wait_for(d, "the stock at 0 under zk", lambda st: num(st["stock"]) == 0 and st["mode"] == "zk", 20)
        s = state(d)
        waiters, owners = num(s["best_waiters"]) or 0, (s["best_owners"] or "").split()
        if waiters < 2 or len(owners) < 2:
            raise AssertionError(f"the zk queue never showed 2 waiters from 2 instances: {s}")
        print(f"ok: the zk queue showed {waiters} waiters from {', '.join(owners)}", flush=True)
        # Two more refreshes, so that the charts have drawn the end of the run.
        ticks = num(s["ticks"]) or 0
        wait_for(d, "two more refreshes", lambda st: (num(st["ticks"]) or 0) >= ticks + 2, 20)
        return 0
    except AssertionError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    finally:
        d.save_screenshot(f"{args.out}/live.png")
        print(f"screenshot: {args.out}/live.png", flush=True)
        d.quit()


if __name__ == "__main__":
    sys.exit(main())
