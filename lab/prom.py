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
