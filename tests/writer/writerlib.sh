# shellcheck shell=bash
# The order writer's test helpers (sourced after tests/lib.sh): a Redis of the test's
# own that holds the stream, a feeder that appends entries in the stream contract's
# exact format (what stockd's mode redis-stock appends: key, product, instance, at_us),
# and writers started and stopped under a consumer name each.

W_REDIS_PORT=$((PORT0 + 15))
W_BIN=$STOCKD_BUILD/writer/stock-writer
[[ -x $W_BIN ]] || skip "no stock-writer at $W_BIN (build the stock-writer target first)"

# w_redis: starts the test's Redis (PORT0+15) under $T/redis.
w_redis() { redis_start "$T" "$W_REDIS_PORT" || fail "the test's Redis did not start"; }
rcli() { redis-cli -p "$W_REDIS_PORT" "$@"; }

# w_feed PRODUCT FIRST LAST [PREFIX]: appends the entries of keys PREFIX-FIRST ..
# PREFIX-LAST (PREFIX defaults to k) for PRODUCT, in one redis-cli pipe; the keys
# written go to $T/keys.PRODUCT. Their at_us is now, or $W_AT: entries fed again with
# the same W_AT are copies of the first (a redelivery); with another, the same keys
# deducted again (a key reused).
w_feed() {
  local product=$1 first=$2 last=$3 prefix=${4:-k} i now
  now=${W_AT:-$(date +%s%6N)}
  for ((i = first; i <= last; i++)); do
    printf 'XADD stockd:orders * key %s-%d product %d instance test at_us %d\n' \
      "$prefix" "$i" "$product" "$now"
    echo "$prefix-$i" >>"$T/keys.$product"
  done | rcli >/dev/null || fail "feeding the stream failed"
}

# w_start NAME [ARGS...]: starts a writer with consumer name NAME under $T/writer-NAME.
w_start() {
  local name=$1
  shift
  mkdir -p "$T/writer-$name"
  "$W_BIN" --redis "127.0.0.1:$W_REDIS_PORT" --mysql "$MYSQL_URL" --consumer "$name" "$@" \
    >>"$T/writer-$name/log" 2>&1 &
  echo $! >"$T/writer-$name/pid"
  wait_until 10 grep -q 'reading stockd:orders' "$T/writer-$name/log" ||
    fail "writer $name did not start: $(cat "$T/writer-$name/log")"
}

# w_pending [NAME]: entries pending in the group (with NAME: that consumer's).
w_pending() {
  if [[ -n ${1:-} ]]; then
    rcli XPENDING stockd:orders writers - + 100000 "$1" | awk 'NR % 4 == 1' | grep -c . || true
  else
    rcli XPENDING stockd:orders writers | head -n 1
  fi
}

# w_drained: every entry of the stream is written and acknowledged, as the load tools
# ask it (lab/redisstock.py); the reconciliation's table of the moment goes to $T/reconcile.
w_drained() {
  "$W_BIN" --reconcile --redis "127.0.0.1:$W_REDIS_PORT" --mysql "$MYSQL_URL" >"$T/reconcile" || true
  PYTHONPATH=$STOCKD_SRC /usr/bin/python3 -c \
    'import sys; from lab.redisstock import RedisStock as R; sys.exit(R.at(sys.argv[1]).backlog() != (0, 0))' \
    "127.0.0.1:$W_REDIS_PORT"
}

# w_reconcile WAIT: runs the reconciliation (waiting up to WAIT s for the drain), prints
# its table, and returns its exit code.
w_reconcile() {
  local rc=0
  "$W_BIN" --reconcile --wait "$1" --redis "127.0.0.1:$W_REDIS_PORT" --mysql "$MYSQL_URL" \
    >"$T/reconcile" || rc=$?
  cat "$T/reconcile"
  return "$rc"
}

# w_exactly_once PRODUCT INITIAL: every key fed is in orders exactly once (or an
# oversold promise), nothing else is, and the stock fell by the orders.
w_exactly_once() {
  local product=$1 initial=$2 fed written
  fed=$(sort -u "$T/keys.$product" | wc -l)
  written=$(sql "SELECT COUNT(*) FROM (SELECT request_id FROM orders WHERE product_id=$product
                 UNION ALL SELECT request_id FROM oversold_promise WHERE product_id=$product) t")
  expect_eq "keys fed (distinct) vs orders + oversold promises" "$fed" "$written"
  sort -u "$T/keys.$product" >"$T/keys.fed"
  sql "SELECT request_id FROM orders WHERE product_id=$product
       UNION SELECT request_id FROM oversold_promise WHERE product_id=$product" | sort >"$T/keys.written"
  cmp -s "$T/keys.fed" "$T/keys.written" || fail "the keys written are not the keys fed: $(diff "$T/keys.fed" "$T/keys.written" | head)"
  expect_eq "stock = initial - orders (no order doubled, no decrement without an order)" \
    $((initial - $(orders "$product"))) "$(stock "$product")"
}
