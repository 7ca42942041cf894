# shellcheck shell=bash
# tool_stack.sh: sourced by the smoke tests of the load tools (loadtest/report, cpu,
# memory), after tests/lib.sh: the tool's own stack inside the 20 ports ctest gives the
# test (MariaDB at +6 and stockd i at +10+i from the base; nginx, ZooKeeper, Redis and
# Prometheus moved to +1..+4), stopped when the test ends.
#
# usage: tool_stack PATH/TO/stockload [TOOL...]
#   Skips the test (77) without stockd, stockload or one of the TOOLs; exports
#   STOCKLOAD_BIN and the stack's ports; sets run (the stack's run directory, $T/stack)
#   and out ($T/out); and sets the EXIT trap that stops the stack and cleans up.
tool_stack() {
  export STOCKLOAD_BIN=${1:?usage: tool_stack PATH/TO/stockload [TOOL...]}
  shift
  need_stockd_bin
  [[ -x $STOCKLOAD_BIN ]] || { echo "SKIP: no stockload at $STOCKLOAD_BIN"; exit 77; }
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (scripts/deps)"; exit 77; }
  done
  # shellcheck disable=SC2034 # out is the caller's
  run=$T/stack out=$T/out
  export STOCKD_BIN STACK_NGINX_PORT=$((PORT0 + 1)) STACK_ZK_PORT=$((PORT0 + 2))
  export STACK_REDIS_PORT=$((PORT0 + 3)) STACK_PROMETHEUS_PORT=$((PORT0 + 4))
  unset STOCKD_MYSQL_PASSWORD STACK_RUN STACK_PORT_BASE # the stack makes its own
  trap 'STACK_RUN=$run STACK_PORT_BASE=$PORT0 "$STOCKD_SRC/scripts/stack" down </dev/null \
    >/dev/null 2>&1 || true; t_cleanup' EXIT
}
