"""The nemesis's soak (loadtest/nemesis --soak): every row of SOAK_ROWS, --seeds seeds
each, each run a loadtest/nemesis of its own; a table per run and one per row
(operations, multi-product transactions, faults by kind, anomalies by name against
those expected)."""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

from nemesis_stack import apply_spec, log

NEMESIS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nemesis")
# The soak's rows: a run spec (--mode), more stockd options (--extra), more nemesis
# options, and the anomaly the row must report (a self-check: the run that must fail
# does), or None (it must be exact).
SOAK_ROWS = (("zk", "", "", None), ("zk-1", "", "", None), ("zk-herd", "", "", None),
             ("for-update", "", "", None), ("atomic", "", "", None), ("redis", "", "", None),
             ("redis-1", "", "", None), ("db-lock", "", "", None),
             ("redis-renew", "", "", None), ("redlock", "", "", None),
             ("etcd", "", "", None),
             # Batches across products under every zk fault: 12 products with stock
             # enough not to run out, and 2 workers an instance for 32 clients, so that
             # deductions wait with no leader and a leader takes them along (service/
             # cross.c); a shorter think gives more batches (138 in 30 s, seed 1).
             ("zk", "--cross-products 4 --workers 2 --think-us 50000 --think-jitter-us 50000",
              "--clients 32 --products 12 --stock 300", None),
             # The unfenced hazards of the last lock kinds: keys that expire early on the
             # RedLock servers (a clock jump), and a holder paused past its etcd lease.
             ("redlock:fence=off", "", "--faults clock --fault-gap 0.5 2", "negative_stock"),
             ("etcd:fence=off", "--think-us 600000",
              "--faults pause --fault-gap 0.5 2 --restock-max 2", "negative_stock"))


def soak(args):
    """Every row of SOAK_ROWS for --seconds with --seeds seeds each; prints a table per run
    and one per row. Exit 0 when every exact row was exact and every self-check found its
    anomaly; otherwise the worst exit."""
    rows = []
    t0 = time.time()
    only = [w for w in args.only.split(",") if w] if args.only else None
    for spec, extra, more, expect in SOAK_ROWS:
        row = argparse.Namespace(mode=spec, extra=extra, commit_ms=0)
        apply_spec(row)
        if only and not any(w in (spec, row.mode) or w in f"{row.extra} {more}" for w in only):
            continue
        for k in range(args.seeds):
            rows.append(soak_run(args, spec, extra, more, expect, args.seed + k))
    print_runs(rows)
    print_rows(rows, args.seconds, time.time() - t0)
    return max((r["rc"] for r in rows), default=0)


def soak_run(args, spec, extra, more, expect, seed):
    """One run of a row; its verdict (rc 0: as the row expects) and what it counted."""
    label = " ".join(x for x in (spec, extra, more) if x)
    name = re.sub(r"[^a-z0-9.-]+", "", f"{spec}{extra}{more}".replace(" ", "-")
                  .replace("--", "-"))[:80] + f"-{seed}"
    cmd = [sys.executable, NEMESIS, "--mode", spec, "--extra", f"{extra} {args.extra}".strip(),
           "--seconds", str(args.seconds), "--seed", str(seed), "--out",
           os.path.join(args.out, name), "--port-base", str(args.port_base), *shlex.split(more)]
    if args.stockd_bin:
        cmd += ["--stockd-bin", args.stockd_bin]
    p = subprocess.run(cmd, capture_output=True, text=True)
    os.makedirs(os.path.join(args.out, name), exist_ok=True)
    with open(os.path.join(args.out, name, "nemesis.err"), "w") as f:
        f.write(p.stderr)  # why a run failed (exit 2)
    lines = p.stdout.strip().splitlines() or ["(no output)"]
    last = lines[-1]
    summary = next((line for line in lines if line.startswith("outcomes:")), "")
    m = re.search(r"ops=(\d+)", last)
    ops = int(m.group(1)) if m else 0
    m = re.search(r"multi=(\d+)", last)
    multi = int(m.group(1)) if m else 0
    m = re.search(r"faults: (.*?); anomalies by name: (\{.*\})", summary)
    faults = dict(kv.split("=") for kv in m.group(1).split()) if m and m.group(1) != "-" else {}
    names = json.loads(m.group(2)) if m else {}
    rc = p.returncode
    if expect and rc != 2:  # a self-check: right when it reports what it must
        rc = 0 if rc == 1 and expect in names else 1
    log(f"soak: {label} seed {seed}: exit {p.returncode}: {last}")
    return {"mode": label, "seed": seed, "rc": rc, "ops": ops, "multi": multi,
            "faults": {k: int(v) for k, v in faults.items()}, "anomalies": names,
            "expect": expect, "last": last}


def print_runs(rows):
    print("| mode | seed | verdict | result |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['seed']} | {'ok' if r['rc'] == 0 else 'FAIL'} | {r['last']} |")
    print()


def print_rows(rows, seconds, took):
    print(f"Per row ({seconds:g} s a run, {len(rows)} runs, {took / 60:.1f} minutes):")
    print()
    print("| mode | seeds | operations | multi-product transactions | faults by kind "
          "| anomalies found | expected | verdicts |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = [r for r in rows if r["mode"] == mode]
        faults, names = {}, {}
        for r in mine:
            for k, v in r["faults"].items():
                faults[k] = faults.get(k, 0) + v
            for k, v in r["anomalies"].items():
                names[k] = names.get(k, 0) + v
        seeds = ",".join(str(r["seed"]) for r in mine)
        kinds = " ".join(f"{k} {v}" for k, v in sorted(faults.items())) or "-"
        anomalies = " ".join(f"{k} {v}" for k, v in sorted(names.items())) or "0"
        expect = mine[0]["expect"]
        expected = f"{expect} in every run" if expect else "0"
        verdicts = ",".join("ok" if r["rc"] == 0 else "FAIL" for r in mine)
        print(f"| {mode} | {seeds} | {sum(r['ops'] for r in mine)} | "
              f"{sum(r['multi'] for r in mine)} | {kinds} | {anomalies} | {expected} "
              f"| {verdicts} |")
