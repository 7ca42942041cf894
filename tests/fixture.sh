#!/usr/bin/env bash
# The `servers` ctest fixture: starts (up) or stops (down) the private MariaDB,
# ZooKeeper, Redis and etcd that the integration tests share, and the three more Redis
# servers of mode redlock (STOCKD_TEST_REDLOCK, independent of the first and of each
# other). Also stops anything a failed test
# left running under the test run directory.
set -euo pipefail
source "$STOCKD_SRC/scripts/stack-lib.sh"
run=$STOCKD_TEST_RUN
zk_port=${STOCKD_TEST_ZK##*:}
redis_port=${STOCKD_TEST_REDIS##*:}
IFS=, read -r -a redlock_addrs <<<"$STOCKD_TEST_REDLOCK"
etcd_port=${STOCKD_TEST_ETCD##*:}

case ${1:-} in
up)
  mkdir -p "$run"
  mysql_start "$run" "$STOCKD_TEST_MYSQL_PORT"
  zk_start "$run" "$zk_port"
  redis_start "$run" "$redis_port"
  for i in "${!redlock_addrs[@]}"; do
    redis_start "$run" "${redlock_addrs[$i]##*:}" "redlock$((i + 1))"
  done
  etcd_start "$run" "$etcd_port"
  echo "servers: mysql on $STOCKD_TEST_MYSQL_PORT, zookeeper on $zk_port, redis on $redis_port," \
    "redlock on $STOCKD_TEST_REDLOCK, etcd on $etcd_port, under $run"
  ;;
down)
  # Tests stop what they start; this catches what a failed or timed-out one left.
  for f in "$run"/t/*/stockd/*.pid; do [[ -e $f ]] && stop_pidfile "$f" 5; done
  for d in "$run"/t/*/nginx; do [[ -d $d ]] && nginx_stop "${d%/nginx}"; done
  for f in "$run"/t/*/*/pid; do [[ -e $f ]] && stop_pidfile "$f" 10; done
  redis_stop "$run"
  for i in "${!redlock_addrs[@]}"; do redis_stop "$run" "redlock$((i + 1))"; done
  etcd_stop "$run"
  zk_stop "$run"
  mysql_stop "$run"
  echo "servers: stopped"
  ;;
*)
  echo "usage: fixture.sh up|down" >&2
  exit 2
  ;;
esac
