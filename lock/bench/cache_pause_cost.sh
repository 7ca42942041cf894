#!/usr/bin/env bash
# cache_pause_cost.sh PORT_BASE [CACHE_MS...]: what the zk lock cache (--lock-cache-ms)
# costs in availability when an instance is paused, and what it saves in lock
# operations, for each CACHE_MS given (default: 0 200 1000). It starts a private MariaDB
# and ZooKeeper and two stockd instances (mode zk, 2 s sessions) on PORT_BASE..+3,
# under build/cache-pause-run (or $CACHE_PAUSE_RUN), and stops them all at the end.
#
# Availability: instance A deducts product 1 (idle after it: its lock is cached for
# CACHE_MS), is stopped (SIGSTOP) right after its answer, and B deducts product 1:
# B's answer time is how long a paused idle instance blocks the others. 5 rounds, A
# woken (SIGCONT) and healthy again between them.
# Operations: 5 s of load (16 in flight) on A alone over products 1..20 (one instance
# per product set, as under affinity), then 5 s on A and B at once over the same
# products (the products shared, as under round-robin): the ZooKeeper operations per
# deduction, over both instances.
# Needs a build (build/service/stockd, build/loadtest/stockload).
set -euo pipefail
# shellcheck source=scripts/stack-lib.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../scripts/stack-lib.sh"
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
base=${1:?usage: cache_pause_cost.sh PORT_BASE [CACHE_MS...]}
[[ $base =~ ^[1-9][0-9]{3,4}$ ]] || { echo "cache_pause_cost.sh: PORT_BASE must be a port number, got '$base'" >&2; exit 2; }
shift
caches=("$@")
[[ $# -gt 0 ]] || caches=(0 200 1000)
STOCKLOAD=$STACK_SRC/build/loadtest/stockload
RUN=${CACHE_PAUSE_RUN:-$STACK_SRC/build/cache-pause-run}
rm -rf "$RUN"
mkdir -p "$RUN/tmp"
export TMPDIR=$RUN/tmp # MariaDB's own temporary files, out of the shared /tmp
DB=bench
export STOCKD_MYSQL_PASSWORD=bench-pw
port_a=$((base + 2)) port_b=$((base + 3))
cleanup() {
  stockd_stop_all "$RUN" || true
  zk_stop "$RUN" || true
  mysql_stop "$RUN" || true
}
trap cleanup EXIT
mysql_start "$RUN" "$base"
zk_start "$RUN" $((base + 1))
mysql_create_db "$RUN" "$DB" stockd "$STOCKD_MYSQL_PASSWORD"
mysql_cli "$RUN" "$DB" -e "INSERT INTO product (id, product_name, stock) SELECT seq, 'bench', 100000000
  FROM seq_1_to_20 ON DUPLICATE KEY UPDATE stock = 100000000"
url="mysql://stockd@127.0.0.1:$base/$DB"
zk=127.0.0.1:$((base + 1))

healthy() { [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health") == 200 ]]; }
ops() { # PORT: ZooKeeper operations so far
  curl -s "http://127.0.0.1:$1/metrics" | awk '/^stockd_zk_ops_total/ { n += $2 } END { print n + 0 }'
}
load() { # SECONDS PORT...: load on each port at once; prints the deductions
  local s=$1 p total=0
  shift
  for p in "$@"; do
    "$STOCKLOAD" --url "http://127.0.0.1:$p/stock/reduce?id={id}" --products 1-20 \
      --duration "$s" --concurrency 16 --json --no-progress >"$RUN/load.$p" &
  done
  wait
  for p in "$@"; do total=$((total + $(jq .counts.deducted "$RUN/load.$p"))); done
  echo "$total"
}

printf '%-10s %-40s %-22s %-22s\n' cache_ms "B blocked after A paused (ms, 5 rounds)" \
  "ops/deduction, A only" "ops/deduction, A+B"
for c in "${caches[@]}"; do
  for i in 1 2; do
    stockd_start "$RUN" "$i" $((base + 1 + i)) zk "$url" "$zk" --zk-session-ms 2000 \
      --lock-cache-ms "$c" --lock-timeout-ms 20000
  done
  blocked=()
  for _ in 1 2 3 4 5; do
    curl -fsS -o /dev/null "http://127.0.0.1:$port_a/stock/reduce?id=1"
    kill -STOP "$(cat "$RUN/stockd/1.pid")"
    t=$(curl -sS -o /dev/null -w '%{time_total}' "http://127.0.0.1:$port_b/stock/reduce?id=1")
    kill -CONT "$(cat "$RUN/stockd/1.pid")"
    blocked+=("$(awk -v t="$t" 'BEGIN { printf "%d", t * 1000 }')")
    wait_until 30 healthy "$port_a"
    wait_until 30 healthy "$port_b"
  done
  o0=$(($(ops "$port_a") + $(ops "$port_b")))
  d1=$(load 5 "$port_a")
  o1=$(($(ops "$port_a") + $(ops "$port_b")))
  d2=$(load 5 "$port_a" "$port_b")
  o2=$(($(ops "$port_a") + $(ops "$port_b")))
  printf '%-10s %-40s %-22s %-22s\n' "$c" "${blocked[*]}" \
    "$(awk -v o=$((o1 - o0)) -v d="$d1" 'BEGIN { printf "%.3f (%d ded.)", o / d, d }')" \
    "$(awk -v o=$((o2 - o1)) -v d="$d2" 'BEGIN { printf "%.3f (%d ded.)", o / d, d }')"
  stockd_stop_all "$RUN"
done
