# shellcheck shell=bash
# dashboard_names DASHBOARD: prints, one a line, the metric names the Grafana
# dashboard's queries use: stockd's own (stockd_*) and the recorded ones (a name with a
# colon, from monitoring/stockd-rules.yml). PromQL's functions, keywords and label
# names are neither, so they are left out.
dashboard_names() {
  jq -r '.. | .expr? // empty' "$1" | grep -oE '[a-zA-Z_:][a-zA-Z0-9_:]*' |
    grep -E '^stockd_|:' | sort -u
}

# recorded_names RULES: the names the rules file records.
recorded_names() {
  sed -n 's/^[[:space:]]*- record:[[:space:]]*\([^[:space:]]*\).*/\1/p' "$1" | sort -u
}
