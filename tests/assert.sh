# shellcheck shell=bash
# The shell tests' one set of helpers that need no servers of their own: assertions
# and requests to a running stockd. Every test script sources it,
# directly or through tests/lib.sh (which adds the run directory, the ports, the test
# database and the servers); no test defines a helper of the same name. It starts
# nothing. The request helpers keep answers in $T, a directory of the caller's (lib.sh
# makes one per test; a test without lib.sh makes its own).
STOCKD_SRC=${STOCKD_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}

# fail MESSAGE...: the test fails with MESSAGE.
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# skip REASON...: the test is skipped (ctest's SKIP_RETURN_CODE 77) with REASON.
skip() {
  echo "SKIP: $*" >&2
  exit 77
}

# expect_eq WHAT EXPECTED ACTUAL
expect_eq() {
  [[ $2 == "$3" ]] || fail "$1: expected '$2', got '$3'"
  echo "ok: $1 = $3"
}

# lab FUNCTION ARGS...: FUNCTION of the lab library's shell bridge (lab/shell.py), on
# Debian's python3, whose packages (python3-pymysql, python3-prometheus-client) the
# library uses.
lab() { PYTHONPATH=$STOCKD_SRC${PYTHONPATH:+:$PYTHONPATH} /usr/bin/python3 -m lab.shell "$@"; }

# url_of TARGET: TARGET as a base URL: a port is the stockd on 127.0.0.1:PORT, anything
# else is taken as a URL already (nginx's, say).
url_of() {
  if [[ $1 =~ ^[0-9]+$ ]]; then printf 'http://127.0.0.1:%s' "$1"; else printf '%s' "$1"; fi
}

# reduce TARGET ID [CURL ARGS...]: one deduction of product ID at TARGET (a stockd's
# port, or a base URL); prints "STATUS RESULT". The body stays in $T/ans.TARGET (for a
# URL, with every character but letters and digits made _) and in $T/ans.
reduce() {
  local target=$1 id=$2 key code
  shift 2
  key=${target//[^a-zA-Z0-9]/_}
  code=$(curl -sS -m 30 -o "$T/ans.$key" -w '%{http_code}' "$@" \
    "$(url_of "$target")/stock/reduce?id=$id") || true
  cp "$T/ans.$key" "$T/ans" 2>/dev/null || : >"$T/ans"
  echo "${code:-000} $(jq -r .result "$T/ans.$key" 2>/dev/null || echo -)"
}

# health PORT: prints the status of /health of the stockd on PORT; the body stays in
# $T/health.
health() { curl -sS -m 10 -o "$T/health" -w '%{http_code}' "http://127.0.0.1:$1/health"; }

# The /metrics helpers read the page with lab/prom.py's parser. A TARGET is a stockd's
# port or a base URL.
#
# metric TARGET NAME: prints the value of the sample NAME, exactly as /metrics writes it
# with its labels (stockd_mysql_errors_total{kind="fenced"}); nothing if it has none.
metric() { lab metric "$2" "$1"; }

# metric_sum NAME TARGET...: the sum of the sample NAME over the targets; 0 if none has it.
metric_sum() {
  local v
  v=$(lab metric "$@") || return 1
  echo "${v:-0}"
}

# metric_total NAME TARGET...: the sum of every sample called NAME, whatever its labels
# (stockd_zk_ops_total{op=...}), over the targets; 0 if none has one.
metric_total() { lab metric_total "$@"; }

# metric_series NAME TARGET: how many samples called NAME (one per label set) it has.
metric_series() { lab metric_series "$@"; }

# wait_metric SECONDS NAME LEAST TARGET...: waits until the sample NAME summed over the
# targets is at least LEAST; fails (returns 1, saying the last value) after SECONDS. It
# polls every 20 ms in one process, for a wait that must notice the state at once.
wait_metric() { lab wait_metric "$@"; }

# lock_queue_total PORT ID: how many hold or wait in product ID's lock queue, as GET
# /lock/queue of the stockd at PORT reports it (its `total`).
lock_queue_total() { curl -fsS -m 10 "http://127.0.0.1:$1/lock/queue?id=$2" | jq -r .total; }
# gauge TARGET ID: the stockd_product_stock of product ID; nothing if it has no series.
gauge() { metric "$1" "stockd_product_stock{product=\"$2\"}"; }

# refusals PORT: sets `fenced` and `guard` to the writes the stockd on PORT had refused
# so far, by the fence and by its pre-commit lease check (0 for none).
# shellcheck disable=SC2034 # fenced and guard are for the caller
refusals() {
  fenced=$(metric_sum 'stockd_mysql_errors_total{kind="fenced"}' "$1")
  guard=$(metric_sum 'stockd_mysql_errors_total{kind="guard"}' "$1")
}
