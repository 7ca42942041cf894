#!/usr/bin/env bash
# monitoring/stockd-rules.yml with Prometheus's own promtool: the rules are valid
# (check rules) and do what they say on made-up series (test rules: the oversell alert
# takes the lowest stock any instance read, the 5xx alert its threshold and `for`).
set -euo pipefail
command -v promtool >/dev/null || { echo "FAIL: promtool is not installed (scripts/deps: prometheus)" >&2; exit 1; }
cd "$STOCKD_SRC/monitoring"
promtool check rules stockd-rules.yml
promtool test rules stockd-rules.test.yml
