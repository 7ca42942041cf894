#!/usr/bin/env bash
# monitoring/grafana-stockd.json without servers: it parses as JSON, has panels with
# queries, and every metric name a query uses is either recorded by
# monitoring/stockd-rules.yml or one that service/metrics.c renders (a histogram's
# _bucket/_sum/_count are the histogram's name). prometheus.sh checks the same names
# against a real /metrics scrape and against what Prometheus recorded.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../assert.sh"
src=$STOCKD_SRC
dash=$src/monitoring/grafana-stockd.json
source "$src/tests/monitoring/dashboard_names.sh"


jq -e . "$dash" >/dev/null || fail "$dash does not parse as JSON"
n=$(jq '[.panels[] | select(.targets | length > 0)] | length' "$dash")
((n >= 5)) || fail "expected at least 5 panels with queries, got $n"
echo "ok: the dashboard parses: $n panels with queries"

recorded=$(recorded_names "$src/monitoring/stockd-rules.yml")
count=0
while read -r name; do
  count=$((count + 1))
  if [[ $name == *:* ]]; then
    grep -qxF "$name" <<<"$recorded" || fail "$name is not recorded by monitoring/stockd-rules.yml"
    echo "ok: $name is recorded"
  else
    base=$(sed -E 's/_(bucket|sum|count)$//' <<<"$name")
    grep -qF "\"$name\"" "$src/service/metrics.c" || grep -qF "\"$base\"" "$src/service/metrics.c" ||
      grep -qF "\"$name " "$src/service/metrics.c" || grep -qF "$name{" "$src/service/metrics.c" ||
      grep -qF "$name " "$src/service/metrics.c" ||
      fail "$name is not rendered by service/metrics.c"
    echo "ok: $name is rendered by service/metrics.c"
  fi
done < <(dashboard_names "$dash")
((count > 0)) || fail "no metric names found in the dashboard's queries"
