#!/usr/bin/env bash
# Services bind to loopback unless told otherwise: a stack started by scripts/stack (its
# own MariaDB, ZooKeeper, two stockd instances in lock mode zk, and nginx, under this
# test's run directory and inside its ports) listens only on 127.0.0.1, every socket of
# every one of its processes (TCP and UDP, whatever the port), as ss shows them (the
# ZooKeeper JVM's IPv6 socket on ::ffff:127.0.0.1 is loopback too). Then a
# stockd told --bind 0.0.0.0 does listen there, so the check can tell the difference.
source "$STOCKD_SRC/tests/lib.sh"

if [[ ! -x $STOCKD_BIN ]]; then
  echo "SKIP: no stockd binary at $STOCKD_BIN"
  exit 77
fi

stack=$STOCKD_SRC/scripts/stack
# As in tests/stack/up_down.sh: MariaDB at +6, stockd i at +10+i, nginx +1, ZooKeeper +2,
# Redis +3 (the stack starts one in every mode: at its usual +82 it took a port of the
# test four blocks on, "stockd: port 29862 is taken", fresh clone, 2026-12-08),
# Prometheus +4.
export STACK_RUN=$T STACK_PORT_BASE=$PORT0 STACK_NGINX_PORT=$((PORT0 + 1))
export STACK_ZK_PORT=$((PORT0 + 2)) STACK_REDIS_PORT=$((PORT0 + 3)) STACK_PROMETHEUS_PORT=$((PORT0 + 4))
export STOCKD_BIN
unset STOCKD_MYSQL_PASSWORD
trap '"$stack" down </dev/null || true; t_cleanup' EXIT

"$stack" up --instances 2 --lock zk </dev/null || fail "stack up failed"

# The stack's processes: each pid file's process and all its descendants (nginx
# workers, the JVM's threads are one process).
tree() {
  local p
  echo "$1"
  for p in $(pgrep -P "$1"); do tree "$p"; done
}
pids=()
for f in "$T"/mysql/pid "$T"/zk/pid "$T"/nginx/nginx.pid "$T"/prometheus/pid "$T"/stockd/*.pid; do
  [[ -s $f ]] || fail "no pid file $f"
  while read -r p; do pids+=("$p"); done < <(tree "$(cat "$f")")
done

ss -H -ltunp >"$T/ss.txt"
seen=0
for p in "${pids[@]}"; do
  while read -r proto _ _ _ local _ users; do
    seen=$((seen + 1))
    case $local in
    # The JVM binds an IPv6 socket to the IPv4-mapped loopback address.
    127.0.0.1:* | "[::ffff:127.0.0.1]:"* | "[::1]:"*) echo "ok: pid $p listens on $proto $local" ;;
    *) fail "pid $p listens on $proto $local, not on loopback: $users" ;;
    esac
  done < <(grep "pid=$p," "$T/ss.txt")
done
# mysql, zookeeper, nginx (master and worker share the socket), two stockd.
((seen >= 5)) || fail "found only $seen listening sockets of the stack: $(cat "$T/ss.txt")"
for port in $((PORT0 + 1)) $((PORT0 + 2)) $((PORT0 + 6)) $((PORT0 + 11)) $((PORT0 + 12)); do
  grep -qE " (127.0.0.1|\[::ffff:127.0.0.1\]):$port " "$T/ss.txt" ||
    fail "nothing listens on 127.0.0.1:$port"
done
echo "ok: $seen listening sockets of ${#pids[@]} stack processes, all on 127.0.0.1"

# Told otherwise, stockd binds where it is told (so the check above can see it).
eval "$("$stack" env)"
t_stockd 5 none --bind 0.0.0.0
ss -H -ltnp | grep "pid=$(cat "$T/stockd/5.pid")," | grep -q " 0.0.0.0:$((PORT0 + 5)) " ||
  fail "stockd --bind 0.0.0.0 does not listen on 0.0.0.0"
echo "ok: stockd --bind 0.0.0.0 listens on 0.0.0.0"
echo "PASS"
