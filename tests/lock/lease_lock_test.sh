#!/usr/bin/env bash
# Runs one test of the lease lock kinds (redislock, dblock) with what it needs: this
# test's own database (schema, seed, the service user) and the shared Redis of the
# `servers` fixture, in STOCKD_TEST_MYSQL_URL and STOCKD_TEST_REDIS; OWN_REDIS_RUN and
# OWN_REDIS_PORT name a Redis of the test's own that tests/lock/own_redis.sh starts and
# stops (for the tests that take Redis down; the shared one is never stopped).
#   lease_lock_test.sh [--stock N] [--orders N] PROGRAM [ARGS...]
# --stock N: product 1 starts with N units (and fence 0).
# --orders N: after the program passed, the ledger must hold exactly N orders.
source "$STOCKD_SRC/tests/lib.sh"
orders= stock=
while [[ ${1:-} == --* ]]; do
  case $1 in
  --orders) orders=$2 ;;
  --stock) stock=$2 ;;
  *) fail "unknown option $1" ;;
  esac
  shift 2
done
t_db
[[ -z $stock ]] || mysql_set_stock "$STOCKD_TEST_RUN" "$DB" 1 "$stock"
export STOCKD_TEST_MYSQL_URL=$MYSQL_URL
export OWN_REDIS_RUN=$T OWN_REDIS_PORT=$((PORT0 + 18))
# A port where nothing listens, for the "server unreachable" cases.
export STOCKD_TEST_DEAD_PORT=$((PORT0 + 19))
"$@"
if [[ -n $orders ]]; then
  expect_eq "orders rows" "$orders" "$(sql 'SELECT COUNT(*) FROM orders')"
fi
echo "PASS"
