#!/usr/bin/env bash
# The seed's experiment end to end, as a test: N stockd instances of one lock mode
# behind a real nginx, the same load (loadtest/oversell), and the verdict it must reach.
#   oversell.sh MODE INSTANCES EXPECT [STOCKD ARGS...]
# with EXPECT one of
#   negative           the stock must end below 0;
#   zero               exactly 0, and orders = initial stock;
#   oversold-at-most:N the stock ends between -N and 0. For a race whose size is
#                      bounded but whose occurrence in one run is timing (local on
#                      several instances: at most one stale read per instance, so at
#                      most INSTANCES-1 units oversold). last_unit.sh forces it;
#   counted            the ledger alone, whatever the stock: for a load (JMeter's) too
#                      gentle to make the race happen in every run.
# In every run, whatever the mode, the ledger must match: deducted answers = orders
# rows = initial - final stock. SEGMENTS=K in the environment splits the stock over K
# segments and starts every instance with --segments K. COMMIT_DELAY_MS=D puts a relay
# (tests/support/fault-proxy) between the instances and MariaDB that delays every
# COMMIT by D ms: a commit as slow as on a disk that syncs slowly. OVERSELL_TOOL names
# oversell's load client (stockload, ab); OVERSELL_TOOL=jmeter runs the source article's
# JMeter plan through its runner, loadtest/jmeter/run, whose answers must all be 200 or
# 409 (JMeter's assertion), with the 200s counted as the deducted answers.
source "$STOCKD_SRC/tests/lib.sh"
mode=$1 instances=$2 expect=$3
shift 3

t_db
segments=${SEGMENTS:-1}
((segments == 1)) || set -- --segments "$segments" "$@"
# The same service settings for every mode: only the lock differs. The pause between
# check and update is the experiment's stand-in for business logic (docs/tutorial.md).
stockd_url=$MYSQL_URL
if [[ -n ${COMMIT_DELAY_MS:-} ]]; then
  relay_port=$((PORT0 + 15))
  mkdir -p "$T/relay"
  "$FAULT_PROXY_BIN" --listen "$relay_port" --proto mysql \
    --upstream "127.0.0.1:$STOCKD_TEST_MYSQL_PORT" --delay-commit-ms "$COMMIT_DELAY_MS" >"$T/relay/log" 2>&1 &
  echo $! >"$T/relay/pid"
  wait_until 10 grep -q ready "$T/relay/log" || fail "the relay did not start"
  stockd_url=mysql://$DB_USER@127.0.0.1:$relay_port/$DB
  echo "every COMMIT of the instances is delayed by $COMMIT_DELAY_MS ms"
fi
for ((i = 1; i <= instances; i++)); do
  MYSQL_URL=$stockd_url t_stockd "$i" "$mode" --think-us "${THINK_US:-1000}" "$@"
done
t_nginx "$instances"

tool=${OVERSELL_TOOL:-stockload}
if [[ $tool == jmeter && ! -f ${JMETER_HOME:-/usr/share/jmeter}/lib/ext/ApacheJMeter_http.jar ]]; then
  skip "no JMeter with its HTTP sampler (scripts/deps jmeter)"
fi
case $tool in
jmeter) load=(env NGINX_URL="http://127.0.0.1:$PORT0" STACK_RUN="$STOCKD_TEST_RUN" "$STOCKD_SRC/loadtest/jmeter/run") ;;
*) load=("$STOCKD_SRC/loadtest/oversell" --tool "$tool") ;;
esac
"${load[@]}" --url "http://127.0.0.1:$PORT0" --run "$STOCKD_TEST_RUN" \
  --db "$DB" --mysql "$MYSQL_URL" --label "$mode x$instances" --segments "$segments" | tee "$T/out"
res=$(grep '^RESULT ' "$T/out") || fail "no RESULT line"
if [[ $tool == jmeter ]]; then
  grep -q '^jmeter: summary = .* Err: *0 ' "$T/out" || fail "JMeter counted errors: $(grep '^jmeter: summary =' "$T/out")"
  grep -q '(JMeter errors 0)$' "$T/out" || fail "answers other than 200 and 409: $(grep '^answers:' "$T/out")"
fi
get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$res"; }

expect_eq "ledger (answers = orders = stock change)" ok "$(get ledger)"
case $expect in
negative)
  (($(get final) < 0)) || fail "expected negative stock with $mode x$instances, got $(get final)"
  echo "ok: oversold to $(get final)"
  ;;
zero)
  expect_eq "final stock" 0 "$(get final)"
  expect_eq "orders" "$(get initial)" "$(get orders)"
  ;;
oversold-at-most:*)
  bound=${expect#*:}
  final=$(get final)
  ((final >= -bound && final <= 0)) ||
    fail "expected $mode x$instances to end between -$bound and 0, got $final"
  echo "ok: final stock $final is within [-$bound, 0] ($((-final)) oversold)"
  ;;
counted) echo "ok: the books agree; the stock ended at $(get final) ($(get verdict))" ;;
*) fail "unknown expectation $expect" ;;
esac

# on_all NAME: the sum of a metric (exact name with labels) over the instances.
ports=()
for ((i = 1; i <= instances; i++)); do ports+=($((PORT0 + i))); done
on_all() { metric_sum "$1" "${ports[@]}"; }

# The lease locks really went through their lock service: every acquisition took at
# least one operation and every release one more. The operations per deduction are
# printed for the record (a measurement, not asserted).
case $mode in
redis | db-lock | etcd)
  case $mode in
  redis | etcd) service=$mode ;;
  db-lock) service=mysql_lock_table ;;
  esac
  acquired=$(on_all stockd_lock_acquisitions_total)
  ops=$(on_all "stockd_lock_service_ops_total{service=\"$service\"}")
  ((acquired >= 1)) || fail "no lock acquisitions counted in mode $mode"
  ((ops >= 2 * acquired)) || fail "$ops $service operations for $acquired acquisitions"
  echo "ok: $acquired acquisitions, $ops $service operations," \
    "$(awk -v o="$ops" -v d="$(get orders)" 'BEGIN { printf "%.2f", o / d }') per deduction"
  ;;
esac

# With --batch-max 1 every lock acquisition served exactly one deduction: the batch
# histogram counts one batch of size 1 per acquisition, and the lock's acquisitions
# are those batches (the pre-check answers sold out without any).
if [[ ${CHECK_ONE_PER_ACQUISITION:-0} == 1 ]]; then
  batches=$(on_all stockd_batch_size_count)
  ((batches >= $(get orders))) || fail "expected at least $(get orders) lock rounds, got $batches"
  expect_eq "deductions per lock round (batch size sum = count)" "$batches" "$(on_all stockd_batch_size_sum)"
  expect_eq "lock acquisitions = lock rounds" "$batches" "$(on_all stockd_lock_acquisitions_total)"
  # ... and none of them came from the lock cache: --batch-max 1 never caches.
  [[ $mode == zk ]] && expect_eq "lock cache hits with --batch-max 1" 0 "$(on_all stockd_lock_cache_hits_total)"
fi
# Mode zk caches its lock between batches (--lock-cache-ms): printed for the record.
if [[ $mode == zk ]]; then
  echo "zk: $(on_all stockd_lock_acquisitions_total) lock rounds, $(on_all stockd_lock_cache_hits_total)" \
    "cache hits, cache let go: $(on_all 'stockd_lock_cache_releases_total{reason="contender"}') for a" \
    "contender, $(on_all 'stockd_lock_cache_releases_total{reason="timeout"}') at timeout"
fi
echo PASS
