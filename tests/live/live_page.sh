#!/usr/bin/env bash
# The live page in a real browser: a stack of its own (3 instances, Prometheus scraping
# every second) comes up, headless Chromium opens http://nginx/live/, and
# `scripts/demo --keep --pace` runs none x3 and then zk x3 while the page is held.
# live_page.py drives the runs and reads the page's DOM; the screenshot is kept as
# $T/live.png (the test's run directory, named in its output).
source "$STOCKD_SRC/tests/lib.sh"

py=/usr/bin/python3 # Debian's, where python3-selenium is
if ! "$py" -c 'import selenium' 2>/dev/null || ! command -v chromedriver >/dev/null; then
  echo "SKIP: python3-selenium or chromium-driver is missing (scripts/deps installs them)"
  exit 77
fi

stack=$STOCKD_SRC/scripts/stack
# Inside the 20 ports ctest gives this test, as tests/stack/up_down.sh lays them out.
export STACK_RUN=$T STACK_PORT_BASE=$PORT0 STACK_NGINX_PORT=$((PORT0 + 1))
export STACK_ZK_PORT=$((PORT0 + 2)) STACK_REDIS_PORT=$((PORT0 + 3))
export STACK_PROMETHEUS_PORT=$((PORT0 + 4)) STACK_PROMETHEUS_INTERVAL=1s
export STOCKD_BIN
unset STOCKD_MYSQL_PASSWORD # the stack makes its own
trap '"$stack" down </dev/null >/dev/null 2>&1 || true; t_cleanup' EXIT

"$stack" up --instances 3 --lock none </dev/null >"$T/stack-up.log" 2>&1 ||
  fail "stack up failed: $(tail -n 20 "$T/stack-up.log")"
eval "$("$stack" env)"
"$py" "$STOCKD_SRC/tests/live/live_page.py" --url "$NGINX_URL/live/" --demo "$STOCKD_SRC/scripts/demo" \
  --out "$T" || fail "the live page's checks failed (screenshot and logs in $T)"
