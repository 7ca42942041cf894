#!/usr/bin/env bash
# Runs stockredis_itest (mode redis-stock's script) against a Redis of the test's own on
# PORT0+15; PORT0+16 is a port where nothing listens.
#   stockredis_test.sh PROGRAM
source "$STOCKD_SRC/tests/lib.sh"
port=$((PORT0 + 15))
redis_start "$T" "$port" stockredis || fail "Redis did not start"
"$1" "127.0.0.1:$port" "127.0.0.1:$((PORT0 + 16))" || fail "stockredis_itest failed"
echo PASS
