#!/usr/bin/env bash
# scripts/stack's command line, without servers: every command has --help, usage
# errors exit 2 with a message naming the problem (before anything is installed,
# built or started), and the commands that need a stack say so on an empty run
# directory, where `down` is a no-op.
set -euo pipefail
stack=$STOCKD_SRC/scripts/stack
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export STACK_RUN=$T/run STACK_PORT_BASE=29990

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

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
for cmd in up down status restart-stockd env mysql; do
  expect_rc 0 "usage: scripts/stack $cmd" "$cmd" --help
done
expect_rc 2 "--instances must be a number in 1..64, got '0'" up --instances 0
expect_rc 2 "--instances must be a number in 1..64, got '65'" up --instances=65
expect_rc 2 "--instances must be a number in 1..64, got 'x'" restart-stockd --instances x
expect_rc 2 "--instances needs a value" up --instances
expect_rc 2 "--lock: not a lock mode: 'Z K'" up --lock 'Z K'
expect_rc 2 "unknown argument '--verbose'" up --verbose
expect_rc 2 "unexpected argument 'now'" down now
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
expect_rc 1 "no stack under $STACK_RUN" mysql -e 'select 1'
