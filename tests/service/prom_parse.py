#!/usr/bin/python3
"""Parses Prometheus text exposition from stdin with the reference client's parser
(python3-prometheus-client) and prints one line per sample: `name{labels} value`, with
labels sorted, so shell tests can grep exact samples. Exits 1 if the text does not parse
or a histogram's buckets are not cumulative."""
import sys

from prometheus_client.parser import text_string_to_metric_families


def main() -> int:
    text = sys.stdin.read()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser raises ValueError and friends
        print(f"does not parse as Prometheus text: {e}", file=sys.stderr)
        return 1
    for fam in families:
        last = {}
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            print(f"{s.name}{{{labels}}} {s.value:g}")
            if s.name.endswith("_bucket"):
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                if s.value < last.get(key, 0):
                    print(f"{s.name}: buckets not cumulative", file=sys.stderr)
                    return 1
                last[key] = s.value
    return 0


if __name__ == "__main__":
    sys.exit(main())
