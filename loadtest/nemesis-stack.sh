#!/usr/bin/env bash
# loadtest/nemesis-stack.sh FUNCTION ARGS...: runs one function of scripts/stack-lib.sh,
# so that loadtest/nemesis (Python) starts, stops and restarts the parts of its private
# stack with the same code as scripts/stack and the tests. Only the functions below may
# be called. Servers started here keep running after this script exits (their pid files
# are under the run directory given to each function).
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/scripts/stack-lib.sh"

fn=${1:?function}
shift
case $fn in
mysql_start | mysql_stop | mysql_create_db | mysql_cli | zk_ensemble_start | \
  zk_ensemble_start_one | zk_ensemble_stop | zk_leader | zk_ensemble_mode | redis_start | \
  redis_stop | etcd_cluster_start | etcd_cluster_stop | stockd_start | stockd_stop | \
  stockd_stop_all | nginx_start | nginx_stop | stop_pidfile)
  "$fn" "$@"
  ;;
*)
  echo "nemesis-stack.sh: $fn is not one of the stack functions it runs" >&2
  exit 2
  ;;
esac
