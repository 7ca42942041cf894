"""The load clients' results, read from their machine-readable output.

Every client's run becomes the same record (Result): requests, req/s, p99 in ms, and
how many answers were 2xx ("ok") and how many were not ("other"). stockload writes
JSON (--json); wrk prints a JSON line through loadtest/wrk-json.lua's done() hook; ab
writes every request's times with -g (a tab-separated file), from which the p99 is
computed here, and its counts come from its report's "Name: value" lines, read as
such rather than by position.
"""

import json
import math
from dataclasses import asdict, dataclass

WRK_MARK = "WRK_JSON "


@dataclass
class Result:
    client: str
    rps: float
    p99_ms: float
    requests: int
    ok: int
    other: int

    def to_json(self):
        return asdict(self)


def percentile(values, q):
    """The q-quantile (0..1) by the nearest-rank rule; None for no values."""
    v = sorted(values)
    if not v:
        return None
    return v[max(0, math.ceil(q * len(v)) - 1)]


def wrk(stdout):
    """A wrk run's Result from its stdout with loadtest/wrk-json.lua loaded.

    wrk stops at its deadline: the requests still under way are neither counted nor
    answered, which the caller's ledger allows for (at most -c of them)."""
    lines = [l for l in stdout.splitlines() if l.startswith(WRK_MARK)]
    if not lines:
        raise ValueError("no WRK_JSON line: was wrk run with -s loadtest/wrk-json.lua?")
    d = json.loads(lines[-1][len(WRK_MARK):])
    e = d["errors"]
    # Socket errors are no HTTP answer; "status" errors are the non-2xx/3xx answers.
    other = d["non_2xx_3xx"] + e["connect"] + e["read"] + e["write"] + e["timeout"]
    return Result("wrk", d["rps"], d["latency_us"]["p99"] / 1000.0, d["requests"],
                  d["requests"] - other, other)


def ab_fields(text):
    """ab's report as {name: first word of the value}: "Complete requests: 50" ->
    {"Complete requests": "50"}."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and value.strip() and not name.startswith(" "):
            out.setdefault(name.strip(), value.split()[0])
    return out


def ab(text, gnuplot_tsv):
    """An ab run's Result from its report (stdout) and its -g file.

    ab counts a request that failed at the socket as complete, and "Failed requests"
    also counts answers whose length differed (ab -l turns that off)."""
    f = ab_fields(text)
    if "Complete requests" not in f:
        raise ValueError("not an ab report (no 'Complete requests')")
    n = int(f["Complete requests"])
    bad = int(f.get("Failed requests", 0)) + int(f.get("Non-2xx responses", 0))
    times = []
    for line in gnuplot_tsv.splitlines()[1:]:
        cols = line.split("\t")
        if len(cols) >= 5:
            times.append(float(cols[4]))  # ttime: connect to last byte, ms
    p99 = percentile(times, 0.99)
    return Result("ab", float(f["Requests per second"]), p99 if p99 is not None else 0.0,
                  n, n - bad, bad)


def stockload(doc, health=False):
    """A stockload --json document's Result. On /health (the HTTP ceiling) every answer
    that is no transport error, 503 or other 5xx counts as ok; on /stock/reduce only
    the deductions do."""
    c = doc["counts"]
    if health:
        other = c["transport_error"] + c["other_5xx"] + c["total_503"]
    else:
        other = doc["requests"] - c["deducted"]
    return Result("stockload", doc["throughput_rps"], doc["latency_ms"]["p99"],
                  doc["requests"], doc["requests"] - other, other)


def main(argv=None):
    """python3 -m lab.loadgen wrk|ab|stockload[-health] FILE [TSV]: the Result as JSON."""
    import sys
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print(main.__doc__, file=sys.stderr)
        return 2
    kind, path = argv[0], argv[1]
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    try:
        if kind == "wrk":
            r = wrk(text)
        elif kind == "ab":
            with open(argv[2], encoding="utf-8") as g:
                r = ab(text, g.read())
        elif kind in ("stockload", "stockload-health"):
            r = stockload(json.loads(text), health=kind == "stockload-health")
        else:
            print(f"loadgen: no client '{kind}' (wrk, ab, stockload, stockload-health)",
                  file=sys.stderr)
            return 2
    except (ValueError, KeyError, IndexError) as e:
        print(f"loadgen: {path}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(r.to_json()))
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main())
