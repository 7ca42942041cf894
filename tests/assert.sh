# shellcheck shell=bash
# The shell tests' assertions and their requests to a running stockd: what every test
# script may source, including one that is no integration test (tests/lib.sh sources
# this file and adds the run directory, the ports and the servers). It sets nothing and
# starts nothing. The request helpers keep answers in $T, a directory of the caller's
# (lib.sh makes one per test).

# fail MESSAGE...: the test fails with MESSAGE.
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect_eq WHAT EXPECTED ACTUAL
expect_eq() {
  [[ $2 == "$3" ]] || fail "$1: expected '$2', got '$3'"
  echo "ok: $1 = $3"
}

# reduce PORT ID: one deduction of product ID from the stockd on PORT; prints
# "status result". The body stays in $T/ans.PORT.
reduce() {
  local port=$1 id=$2
  curl -sS -m 30 -o "$T/ans.$port" -w '%{http_code}' "http://127.0.0.1:$port/stock/reduce?id=$id" >"$T/code.$port"
  echo "$(cat "$T/code.$port") $(jq -r .result "$T/ans.$port")"
}

# health PORT: prints the status of /health of the stockd on PORT; the body stays in
# $T/health.
health() { curl -sS -m 10 -o "$T/health" -w '%{http_code}' "http://127.0.0.1:$1/health"; }

# metric PORT NAME: prints the value of NAME (with its labels, as /metrics writes them)
# in the /metrics of the stockd on PORT; nothing if it has none.
metric() { curl -sS "http://127.0.0.1:$1/metrics" | sed -n "s/^$2 //p"; }

# refusals PORT: sets `fenced` and `guard` to the writes the stockd on PORT had refused
# so far, by the fence and by its pre-commit lease check (0 for none).
refusals() {
  local m
  m=$(curl -sS "http://127.0.0.1:$1/metrics")
  fenced=$(sed -n 's/^stockd_mysql_errors_total{kind="fenced"} //p' <<<"$m")
  guard=$(sed -n 's/^stockd_mysql_errors_total{kind="guard"} //p' <<<"$m")
  fenced=${fenced:-0} guard=${guard:-0}
}
