#!/usr/bin/env bash
# Prometheus watching stockd, for real: Debian's Prometheus (started by stack-lib's
# prometheus_start, as scripts/stack does) scrapes three stockd instances every second
# and evaluates monitoring/stockd-rules.yml every second. Then the same load as the
# oversell tests (product 1 at stock 50, 1000 requests, 100 at a time, through nginx):
#   zk x3:   the stock ends at exactly 0; the recorded series are there; the oversell
#            alert was never pending nor firing;
#   none x3: the stock ends below 0; the alert fires for product 1 with the table's
#            stock as its value.
# And every metric name the Grafana dashboard uses is on a real /metrics scrape or is
# recorded by Prometheus. Everything on the test's own ports (Prometheus at +19).
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/monitoring/dashboard_names.sh"

for tool in prometheus promtool jq curl; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/deps)"
done
rules=$STOCKD_SRC/monitoring/stockd-rules.yml
promtool check rules "$rules" || fail "promtool check rules $rules"

PROM=http://127.0.0.1:$((PORT0 + 19))
product=1 stock=50
ports=($((PORT0 + 1)) $((PORT0 + 2)) $((PORT0 + 3)))
targets=$(printf '127.0.0.1:%s\n' "${ports[@]}")

# q EXPR: the result vector of an instant query, as compact JSON.
q() {
  curl -fsS -m 5 --data-urlencode "query=$1" "$PROM/api/v1/query" | jq -c '.data.result'
}
# qn EXPR: how many series an instant query returns.
qn() { q "$1" | jq length; }
# wait_for SECONDS WHAT CONDITION...: polls CONDITION (a command) until it holds.
wait_for() {
  local secs=$1 what=$2
  shift 2
  wait_until "$secs" "$@" || fail "$what: not within ${secs}s"
  echo "ok: $what"
}
# instances MODE: three stockd in MODE behind nginx, the oversell tests' settings.
instances() {
  local i
  stockd_stop_all "$T"
  for i in 1 2 3; do t_stockd "$i" "$1" --think-us 1000 --batch-max "$2"; done
  t_nginx 3
}
# load LABEL: resets the product and sends the load; prints the final stock.
load() {
  mysql_set_stock "$STOCKD_TEST_RUN" "$DB" "$product" "$stock"
  "$STOCKLOAD_BIN" --url "http://127.0.0.1:$PORT0/stock/reduce?id=$product" --threads 100 \
    --loops 10 --json --no-progress >"$T/$1.json" || fail "$1: stockload failed"
  echo "$1: $(jq -c .counts "$T/$1.json")" >&2
  sql "SELECT stock FROM product WHERE id=$product"
}
# gauge_is VALUE: every instance's stockd_product_stock of the product is VALUE in
# Prometheus (the three series, all at VALUE).
gauge_is() {
  local r
  r=$(q "stockd_product_stock{product=\"$product\"}")
  [[ $(jq length <<<"$r") == 3 && $(jq -r '[.[].value[1]] | unique | join(" ")' <<<"$r") == "$1" ]]
}
alert_firing() {
  curl -fsS -m 5 "$PROM/api/v1/alerts" | jq -e --arg p "$product" \
    '[.data.alerts[] | select(.labels.alertname == "StockdStockBelowZero" and
      .labels.product == $p and .state == "firing")] | length == 1' >/dev/null
}

t_db
instances zk 64
t0=$SECONDS
prometheus_targets "$T" "${ports[@]}"
STACK_PROMETHEUS_INTERVAL=1s prometheus_start "$T" $((PORT0 + 19)) || fail "Prometheus did not start"
echo "ok: Prometheus ready on $PROM ($((SECONDS - t0)) s)"
wait_for 20 "Prometheus scrapes the three stockd" \
  eval '[[ $(q "up{job=\"stockd\"} == 1" | jq -r "[.[].metric.instance] | sort | join(\"\n\")") == "$targets" ]]'
curl -fsS "$PROM/api/v1/rules" | jq -e '[.data.groups[].rules[]] | length == 13' >/dev/null ||
  fail "Prometheus did not load the 13 rules of $rules"
echo "ok: Prometheus loaded the rules"

# ---------------------------------------------------------------- zk x3: exact, silent
final=$(load zk)
expect_eq "zk x3: final stock" 0 "$final"
curl -fsS "http://127.0.0.1:${ports[0]}/metrics" >"$T/metrics-zk.txt"
wait_for 10 "zk x3: every instance's stockd_product_stock{product=\"$product\"} is 0" gauge_is 0
for rec in 'instance_result:stockd_deductions:rate1m{result="deducted"}' \
  'instance_result:stockd_deductions:rate1m{result="sold_out"}' \
  'instance:stockd_lock_ops_per_deduction:ratio_rate1m > 0' \
  'instance:stockd_mysql_statements_per_deduction:ratio_rate1m > 0' \
  'instance:stockd_batch_size:mean_rate1m >= 1' \
  'instance:stockd_batch_size:p99_rate1m >= 1' \
  'instance:stockd_deduction_seconds:p99_rate1m > 0' \
  'job:stockd_deduction_seconds:p99_rate1m > 0' \
  'instance:stockd_lock_wait_seconds:p99_rate1m >= 0' \
  'instance:stockd_http_5xx:ratio_rate1m == 0' \
  "product:stockd_product_stock:min{product=\"$product\"} == 0"; do
  wait_for 15 "zk x3: recorded $rec" eval '(($(qn "$rec") > 0))'
done
# The load's deductions and sold-out answers show as rates (the series are there at 0
# from the start, so rate() sees the burst).
for result in deducted sold_out; do
  wait_for 10 "zk x3: $result/s > 0 on some instance" \
    eval '(($(qn "instance_result:stockd_deductions:rate1m{result=\"$result\"} > 0") > 0))'
done
echo "zk x3: deductions/s by instance and outcome: $(q 'instance_result:stockd_deductions:rate1m' |
  jq -c '[.[] | {(.metric.instance + " " + .metric.result): (.value[1] | tonumber * 100 | round / 100)}] | add')"
# Three more evaluations after the rules saw the 0 (waited for: the alert's group names a
# new lastEvaluation three times), then: never pending nor firing.
alert_evaluated() {
  curl -fsS -m 5 "$PROM/api/v1/rules?type=alert" |
    jq -r '.data.groups[] | select(any(.rules[]; .name == "StockdStockBelowZero")) | .lastEvaluation'
}
evals=0 seen=$(alert_evaluated)
three_evaluations() {
  local now
  now=$(alert_evaluated) || return 1
  [[ $now == "$seen" ]] || { seen=$now evals=$((evals + 1)); }
  ((evals >= 3))
}
wait_for 15 "zk x3: three more rule evaluations" three_evaluations
expect_eq "zk x3: StockdStockBelowZero samples (pending or firing) over the run" 0 \
  "$(qn 'count_over_time(ALERTS{alertname="StockdStockBelowZero"}[10m])')"
expect_eq "zk x3: StockdStockBelowZero state" inactive \
  "$(curl -fsS "$PROM/api/v1/rules?type=alert" |
    jq -r '.data.groups[].rules[] | select(.name == "StockdStockBelowZero") | .state')"

# ---------------------------------------------------------------- none x3: oversold, fires
instances none 1
final=$(load none)
((final < 0)) || fail "none x3 did not oversell this time (final stock $final)"
echo "ok: none x3 oversold: final stock $final"
curl -fsS "http://127.0.0.1:${ports[0]}/metrics" >"$T/metrics-none.txt"
wait_for 20 "none x3: StockdStockBelowZero firing for product $product" alert_firing
# The alert fires on the first negative reading; its value follows the gauge at each
# evaluation, so it reaches the table's final stock within a scrape and an evaluation.
alert_value_is_final() {
  alert=$(curl -fsS "$PROM/api/v1/alerts" |
    jq -c --arg p "$product" '.data.alerts[] | select(.labels.alertname == "StockdStockBelowZero" and .labels.product == $p)') &&
    [[ $(jq -r '.value | tonumber' <<<"$alert") == "$final" ]]
}
wait_for 20 "none x3: the alert's value is the table's stock, $final" alert_value_is_final
echo "alert: $alert"
expect_eq "none x3: the alert's summary" "Product $product is oversold: stock $final" \
  "$(jq -r .annotations.summary <<<"$alert")"
wait_for 10 "none x3: every instance's gauge reads the table's $final" gauge_is "$final"

# ---------------------------------------------------------------- the Grafana dashboard
dash=$STOCKD_SRC/monitoring/grafana-stockd.json
scraped=$(cat "$T/metrics-zk.txt" "$T/metrics-none.txt" | grep -v '^#' | sed -E 's/[{ ].*//' | sort -u)
n=0
while read -r name; do
  n=$((n + 1))
  if [[ $name == *:* ]]; then
    (($(qn "count_over_time($name[10m])") > 0)) || fail "dashboard: Prometheus never recorded $name"
    echo "ok: dashboard: $name was recorded by Prometheus"
  else
    grep -qxF "$name" <<<"$scraped" || fail "dashboard: $name is on no /metrics scrape of the run"
    echo "ok: dashboard: $name is on a real /metrics"
  fi
done < <(dashboard_names "$dash")
((n > 0)) || fail "no metric names in $dash"
echo "ok: all $n metric names of the dashboard exist ($((SECONDS - t0)) s since Prometheus started)"
