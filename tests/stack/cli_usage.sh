#!/usr/bin/env bash
# scripts/stack's command line, without servers: every command has --help, usage
# errors exit 2 with a message naming the problem (before anything is installed,
# built or started), and the commands that need a stack say so on an empty run
# directory, where `down` is a no-op. Then the binaries' command lines (stockd and
# stockload are the arguments): stockload --version prints stockd's version, and
# stockd --config FILE works end to end: its refusals exit 2 naming the file, line and
# key, and its precedence shows on a running stockd's /metrics (no MySQL needed:
# stockd connects on the first deduction).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../assert.sh"
stack=$STOCKD_SRC/scripts/stack
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export STACK_RUN=$T/run STACK_PORT_BASE=29990


# expect_rc WANT_RC WANT_TEXT ARGS...: runs the stack with ARGS, checks the exit code
# and that stdout+stderr contain WANT_TEXT.
expect_rc() {
  local want=$1 text=$2 rc=0 out
  shift 2
  out=$("$stack" "$@" 2>&1 </dev/null) || rc=$?
  [[ $rc == "$want" ]] || fail "stack $*: expected exit $want, got $rc: $out"
  [[ $out == *"$text"* ]] || fail "stack $*: expected '$text' in: $out"
  echo "ok: stack $* -> $rc ($text)"
}

expect_rc 0 "usage: scripts/stack COMMAND" --help
expect_rc 2 "usage: scripts/stack COMMAND"
expect_rc 2 "unknown command 'start'" start
for cmd in up down status restart-stockd kill-stockd env mysql; do
  expect_rc 0 "usage: scripts/stack $cmd" "$cmd" --help
done
expect_rc 2 "--instances must be a number in 1..64, got '0'" up --instances 0
expect_rc 2 "--instances must be a number in 1..64, got '65'" up --instances=65
expect_rc 2 "--instances must be a number in 1..64, got 'x'" restart-stockd --instances x
expect_rc 2 "--instances needs a value" up --instances
expect_rc 2 "--lock: not a lock mode: 'Z K'" up --lock 'Z K'
expect_rc 2 "unknown argument '--verbose'" up --verbose
expect_rc 2 "unexpected argument 'now'" down now
# nginx's route and rate limit (docs/strategies.md, "Rate limiting and affinity in front").
expect_rc 2 "--route must be round-robin, affinity or owner, got 'hash'" up --route hash
expect_rc 2 "--route must be round-robin, affinity or owner, got 'x'" restart-stockd --route=x
expect_rc 2 "--rate-limit wants RATE[:BURST] (e.g. 100:20, 600r/m:10), got '0'" up --rate-limit 0
expect_rc 2 "--rate-limit wants RATE[:BURST] (e.g. 100:20, 600r/m:10), got 'off'" up --rate-limit off
expect_rc 2 "--rate-limit needs a value" restart-stockd --rate-limit
expect_rc 2 "which instance? (1..N)" kill-stockd
expect_rc 2 "unexpected argument 'x'" kill-stockd x
# The ZooKeeper topology is the stack's: `up` chooses it, restart-stockd cannot.
expect_rc 0 "--zk-ensemble" up --help
expect_rc 2 "unknown argument '--zk-ensemble'" restart-stockd --zk-ensemble
STACK_ZK_PORT=65530 expect_rc 1 "the ZooKeeper ensemble needs the nine ports from 65530" \
  up --zk-ensemble
STACK_PORT_BASE=80 expect_rc 1 "STACK_PORT_BASE must be a number in 1024..65400" up
STACK_NGINX_PORT=x expect_rc 1 "not a port: x" up
[[ ! -e $STACK_RUN ]] || fail "a usage error created the run directory"
echo "ok: usage errors touch nothing"

expect_rc 0 "nothing under $STACK_RUN" down
expect_rc 1 "no stack under $STACK_RUN (run: scripts/stack up)" status
expect_rc 1 "no stack under $STACK_RUN" env
expect_rc 1 "no stack under $STACK_RUN" restart-stockd --lock zk
expect_rc 1 "no stack under $STACK_RUN" kill-stockd 1 --restart
expect_rc 1 "no stack under $STACK_RUN" mysql -e 'select 1'

# ---------------------------------------------------------------- stockd --config
stockd=${1:?usage: cli_usage.sh STOCKD_BINARY}
port=${STOCKD_CLI_TEST_PORT:?}
# The config file's keys must not come from the caller's environment.
for v in "${!STOCKD_@}"; do
  [[ $v == STOCKD_SRC || $v == STOCKD_CLI_TEST_PORT ]] || unset "$v"
done

# expect_stockd WANT_RC WANT_TEXT ARGS...: like expect_rc, for stockd.
expect_stockd() {
  local want=$1 text=$2 rc=0 out
  shift 2
  out=$("$stockd" "$@" 2>&1 </dev/null) || rc=$?
  [[ $rc == "$want" ]] || fail "stockd $*: expected exit $want, got $rc: $out"
  [[ $out == *"$text"* ]] || fail "stockd $*: expected '$text' in: $out"
  echo "ok: stockd $* -> $rc ($text)"
}

expect_stockd 0 "--config FILE" --help
# stockload prints the same project version as stockd.
stockload=${2:?usage: cli_usage.sh STOCKD_BINARY STOCKLOAD_BINARY}
want=$("$stockd" --version)
got=$("$stockload" --version 2>&1) || fail "stockload --version exited $?: $got"
[[ $got == "stockload ${want#stockd }" ]] || fail "stockload --version: expected 'stockload ${want#stockd }', got '$got'"
echo "ok: $want, $got"
printf '# a typo on line 3\nSTOCKD_LOCK=zk\nSTOCKD_PROT=8081\n' >"$T/bad-key.conf"
expect_stockd 2 "$T/bad-key.conf:3: unknown key 'STOCKD_PROT'" --config "$T/bad-key.conf"
printf 'STOCKD_PORT 8081\n' >"$T/bad-line.conf"
expect_stockd 2 "$T/bad-line.conf:1: expected KEY=VALUE" --config "$T/bad-line.conf"
printf '\nSTOCKD_WORKERS=0\n' >"$T/bad-value.conf"
expect_stockd 2 "$T/bad-value.conf:2: STOCKD_WORKERS must be an integer in 1..512" \
  --config "$T/bad-value.conf"
expect_stockd 2 "cannot read --config file '$T/none.conf'" --config "$T/none.conf"
expect_stockd 2 "--config needs a FILE" --config
# A bad file is refused even with --version: the file is part of the command line.
expect_stockd 2 "unknown key 'STOCKD_PROT'" --config "$T/bad-key.conf" --version

# The precedence, on a running stockd: the file sets the port, the lock, the instance
# and the batch size; the environment overrides the lock; the command line overrides
# the instance.
printf '%s\n' "# stockd for the CLI test" "STOCKD_PORT=$port" "STOCKD_LOCK=local" \
  "STOCKD_INSTANCE=from-file" "STOCKD_BATCH_MAX=7" "" \
  "STOCKD_MYSQL=mysql://stockd@127.0.0.1:1/shop" >"$T/stockd.conf"
STOCKD_LOCK=for-update "$stockd" --config "$T/stockd.conf" --instance from-argv \
  >"$T/stockd.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$T"' EXIT
metrics=
for _ in $(seq 100); do
  metrics=$(curl -sf "http://127.0.0.1:$port/metrics" 2>/dev/null) && break
  kill -0 "$pid" 2>/dev/null || fail "stockd --config exited: $(cat "$T/stockd.log")"
  sleep 0.1
done
[[ -n $metrics ]] || fail "stockd --config did not answer on port $port: $(cat "$T/stockd.log")"
info=$(grep '^stockd_info' <<<"$metrics")
[[ $info == *'instance="from-argv"'* && $info == *'lock="for-update"'* ]] ||
  fail "expected the instance from argv and the lock from the environment, got: $info"
grep -q "listening on 127.0.0.1:$port, lock for-update, batch-max 7," "$T/stockd.log" ||
  fail "expected the port and batch-max from the file in the log: $(cat "$T/stockd.log")"
echo "ok: stockd --config: port and batch-max from the file, lock from the environment, instance from argv"
kill "$pid"
wait "$pid" || fail "stockd exited $? on SIGTERM: $(cat "$T/stockd.log")"
