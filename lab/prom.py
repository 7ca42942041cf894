"""Prometheus text, read with prometheus_client's parser (python3-prometheus-client).

A scrape becomes a Scrape: {(name, labels): value} over every sample, labels as a
sorted tuple of (key, value). Counters only grow within one process and every tool runs
its load in fresh or unchanged processes, so after - before, summed over the instances,
is what the load did (delta()).
"""

import math

from prometheus_client.parser import text_string_to_metric_families


class Scrape(dict):
    """{(sample name, ((label, value), ...)): value}."""

    def total(self, name, **labels):
        """The sum of the samples called name whose labels include labels; None if none."""
        want = set(labels.items())
        vals = [v for (n, ls), v in self.items() if n == name and want <= set(ls)]
        return sum(vals) if vals else None

    def by_label(self, name, label):
        """{value of label: sum} over the samples called name."""
        out = {}
        for (n, ls), v in self.items():
            d = dict(ls)
            if n == name and label in d:
                out[d[label]] = out.get(d[label], 0) + v
        return out


def parse(text):
    """Parses one /metrics page; raises ValueError on text that is not the format."""
    s = Scrape()
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            s[key] = s.get(key, 0) + sample.value
    return s


def scrape(targets, timeout=10):
    """The Scrapes of the /metrics of each stockd in TARGETS (a port, or a base URL), in
    their order; LabError naming the first that gives none. The one scrape of N
    instances: the tests' metric helpers (lab/shell.py), report, cpu and memory."""
    import urllib.request
    from . import LabError
    out = []
    for t in targets:
        t = str(t)
        url = ("http://127.0.0.1:%d" % int(t) if t.isdigit() else t.rstrip("/")) + "/metrics"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                out.append(parse(r.read().decode("utf-8")))
        except (OSError, ValueError) as e:
            raise LabError("no /metrics at %s: %s" % (url, e)) from e
    return out


def delta(befores, afters):
    """after - before summed over the instances (lists of Scrapes, any order)."""
    d = Scrape()
    for sign, scrapes in ((-1, befores), (1, afters)):
        for sc in scrapes:
            for k, v in sc.items():
                d[k] = d.get(k, 0) + sign * v
    return d


def histogram_quantile_bound(scrape, name, q):
    """The upper bound of the bucket holding the q-quantile of histogram name (what a
    histogram knows of it): a float, math.inf for the +Inf bucket, None when empty."""
    buckets = sorted((float(dict(ls)["le"]), v) for (n, ls), v in scrape.items()
                     if n == name + "_bucket")
    count = scrape.total(name + "_count") or 0
    if count <= 0:
        return None
    rank = math.ceil(count * q)
    for bound, cum in buckets:
        if cum >= rank:
            return bound
    return math.inf


def key_text(key):
    """A sample's key as Prometheus writes it: name{label="value",...}."""
    name, labels = key
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def main(argv=None):
    """python3 -m lab.prom totals NAME...          stdin: /metrics pages one after
                                                   another; prints each NAME's sum
       python3 -m lab.prom delta --before F... --after F...
                                                   prints name{labels}<TAB>after - before
                                                   for every sample, summed over files"""
    import sys
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["totals"] and len(argv) > 1:
            s = parse(sys.stdin.read())
            print(" ".join(f"{s.total(n) or 0:.0f}" for n in argv[1:]))
            return 0
        if argv[:1] == ["delta"] and "--before" in argv and "--after" in argv:
            b, a = argv.index("--before"), argv.index("--after")
            if b > a:
                raise ValueError("--before comes first")
            pages = []
            for files in (argv[b + 1:a], argv[a + 1:]):
                scrapes = []
                for f in files:
                    with open(f, encoding="utf-8") as fh:
                        scrapes.append(parse(fh.read()))
                pages.append(scrapes)
            for k, v in sorted(delta(*pages).items()):
                print(f"{key_text(k)}\t{int(v) if v == int(v) else repr(v)}")
            return 0
    except (OSError, ValueError) as e:
        print(f"prom: {e}", file=sys.stderr)
        return 1
    print(main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    import sys
    sys.exit(main())
