#!/usr/bin/env bash
# docker-compose.yml built and run for real, as a podman user runs it (docker/podman/compose,
# the README's podman path): every image built from debian:12 (bootstrapped from
# Debian's mirror when podman lacks it) with `up -d --build` and STOCKD_LOCK=zk, then
# from the host's loopback only, through the port nginx publishes:
#   - nginx answers /health 200, from each of the three stockd containers, and the
#     ZooKeeper ensemble zk1..zk3 has one leader and two followers;
#   - product 3 reset to stock 500, then 600 deductions, 25 at a time, and once the
#     first is deducted the leader's container is killed (podman kill): the two
#     others elect a new leader, no stockd container restarts, every answer is
#     deducted, sold_out or a 503, and the deducted answers are the orders rows (same
#     count, same order ids, same count per instance) and the stock's drop;
#   - the old leader started again rejoins as a follower, and a second, short load
#     (30 units, 90 deductions) ends exactly: 30 deducted, the stock at 0, the ledger
#     equal to the answers, and answers from all three stockd containers;
#   - nginx restarted while stockd-3 is stopped waits for it;
#   - then the same running stack in STOCKD_LOCK=redis and STOCKD_LOCK=db-lock, one
#     after the other: only the three stockd containers are made again with the new
#     mode (mariadb, zk1..3, redis and nginx keep running, the database keeps its
#     data), each container's /metrics must name the mode and count operations on its
#     lock service (Redis, the stock_lock table), and the same reset and load must end
#     as exactly as under zk;
#   - `down -v` removes the containers and the volume; the test removes the network.
# It fails, saying why, when podman cannot run containers here: it is never skipped.
#
# Settings from ctest (tests/stack/tests.cmake): STOCKD_SRC, STOCKD_TEST_RUN, and
# STOCKD_CONTAINER_TEST_PORT (the published port on 127.0.0.1) and
# STOCKD_CONTAINER_TEST_PROJECT (the compose project name, also the images' tag).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../assert.sh"
src=$STOCKD_SRC
port=$STOCKD_CONTAINER_TEST_PORT
# A project name of the test's own, so it never meets a user's `docker-compose.yml`
# project (whose name is the folder's) or another checkout's test; the images get it
# as their tag for the same reason.
project=$STOCKD_CONTAINER_TEST_PROJECT
net=${project}_default
T=$STOCKD_TEST_RUN/t/stack_containers
rm -rf "$T"
mkdir -p "$T"
product=3 stock=50 requests=300 concurrency=25

export CONTAINERS_CONF=$src/docker/podman/containers.conf
export STOCKD_LOCK=zk STOCKD_HTTP_PORT=$port STOCKD_IMAGE_TAG=$project
export STOCKD_PROMETHEUS_PORT=$((port + 1))
STOCKD_MYSQL_PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
export STOCKD_MYSQL_PASSWORD
# The lock services' credentials (docker-compose.yml requires them, issue 16 #12).
STOCKD_REDIS_PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
STOCKD_ZK_PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
export STOCKD_REDIS_PASSWORD STOCKD_ZK_PASSWORD

elapsed() { echo "$((SECONDS - $1)) s"; }
compose() { "$src/docker/podman/compose" -p "$project" "$@"; }

# ---------------------------------------------------------------- can podman run here?

(($(id -u) == 0)) || fail "needs root: podman's bridge networks (CNI) need it"
for tool in podman podman-compose mmdebstrap runc curl jq; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/deps installs it)"
done
(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
  fail "port $port on 127.0.0.1 is taken (set STOCKD_CONTAINER_TEST_PORT)"

t0=$SECONDS
"$src/docker/podman/compose" --base-image >"$T/base.log" 2>&1 ||
  fail "could not make the debian:12 base image: $(tail -n 20 "$T/base.log")"
echo "ok: base image debian:12 ($(elapsed "$t0"))"
# No network: the smoke test must not create podman's default bridge.
if ! out=$(podman run --rm --network none debian:12 cat /etc/debian_version 2>&1); then
  fail "podman cannot run a container here: $out"
fi
echo "ok: podman runs a debian:12 container ($out)"

# ---------------------------------------------------------------- up, and down at exit

ip_forward=$(sysctl -n net.ipv4.ip_forward 2>/dev/null || echo 1)

# net_remove: removes the test's network, its bridge, and the INPUT rule that the
# dnsname plugin adds for the bridge and leaves behind. The bridge's name is read
# while the network exists.
net_remove() {
  local bridge
  podman network exists "$net" || return 0
  bridge=$(podman network inspect -f '{{.NetworkInterface}}' "$net")
  podman network rm -f "$net" >/dev/null
  [[ -n $bridge ]] || return 0
  while iptables -D INPUT -i "$bridge" -p udp -m udp --dport 53 -j ACCEPT 2>/dev/null; do :; done
  if ip link show "$bridge" >/dev/null 2>&1; then ip link del "$bridge"; fi
  return 0
}

# teardown: what the test made, and only that.
teardown() {
  local rc=$?
  set +e
  [[ $rc == 0 ]] || {
    echo "== container states and last log lines, before teardown" >&2
    podman ps -a --filter "label=io.podman.compose.project=$project" \
      --format '{{.Names}} {{.Status}}' >&2
    for c in $(podman ps -a -q --filter "label=io.podman.compose.project=$project"); do
      echo "-- $(podman inspect -f '{{.Name}}' "$c")" >&2
      podman logs --tail 15 "$c" >&2 2>&1
    done
  }
  compose down -v >"$T/down.log" 2>&1
  net_remove
  if podman network exists "$net"; then
    echo "FAIL: the network $net could not be removed" >&2
    rc=1
  fi
  # The bridge network turned on IPv4 forwarding; turn it off again if it was off and
  # no other container runs.
  if [[ $ip_forward == 0 && -z $(podman ps -q) ]]; then sysctl -q -w net.ipv4.ip_forward=0; fi
  exit "$rc"
}
trap teardown EXIT

# Leftovers of an earlier run that was killed (its trap never ran).
compose down -v >"$T/predown.log" 2>&1 || true
net_remove

t0=$SECONDS
compose up -d --build >"$T/up.log" 2>&1 ||
  fail "podman-compose up failed, see $T/up.log: $(grep -E 'Error|error:' "$T/up.log" | tail -n 5)"
bridge=$(podman network inspect -f '{{.NetworkInterface}}' "$net" 2>/dev/null || true)
[[ -n $bridge ]] || fail "up made no network $net with a bridge"
# podman-compose 1.0.3 carries on after a failed build or run and exits 0: count what runs.
running=$(podman ps --filter "label=io.podman.compose.project=$project" --format '{{.Names}}' | sort)
expect_eq "containers running after up -d --build ($(elapsed "$t0"))" \
  "$(printf '%s\n' "$project"_mariadb_1 "$project"_nginx_1 "$project"_stockd-{1,2,3}_1 \
    "$project"_zk{1,2,3}_1 "$project"_redis_1 "$project"_prometheus_1 "$project"_writer_1 |
    sort)" "$running"

# The images keep their health checks (built in Docker's format): podman runs them on
# demand, there is no systemd here to schedule them.
for s in mariadb zk1 redis stockd-1 nginx; do
  hc=$(podman inspect -f '{{.Config.Healthcheck}}' "${project}_${s}_1")
  [[ $hc == *CMD* ]] || fail "$s: the image has no HEALTHCHECK (was it built in OCI format?)"
done
echo "ok: the images carry their HEALTHCHECKs"

# ---------------------------------------------------------------- ready through nginx

base=http://127.0.0.1:$port

# ready MODE: waits until nginx has had /health 200 from each of the three stockd
# containers in lock mode MODE (an instance still in another mode does not count),
# then runs every container's own health check.
ready() {
  local mode=$1 t0=$SECONDS body inst s
  local -A healthy=()
  while ((${#healthy[@]} < 3)); do
    ((SECONDS - t0 < 240)) ||
      fail "nginx /health: 200 in mode $mode from only ${!healthy[*]} within 240 s; last answer: $body"
    body=$(curl -s -m 5 -w '\n%{http_code}' "$base/health" || true)
    if [[ ${body##*$'\n'} == 200 ]]; then
      body=${body%$'\n'*}
      inst=$(jq -r .instance <<<"$body")
      [[ $inst == stockd-[123] && $(jq -r .lock <<<"$body") == "$mode" ]] && healthy[$inst]=1
    fi
    ((${#healthy[@]} == 3)) || sleep 0.5
  done
  echo "ok: /health 200 through nginx in mode $mode from ${!healthy[*]} ($(elapsed "$t0"))"
  # Each container's own health check agrees, within the time the images' HEALTHCHECK
  # would give it: a ZooKeeper server still joining the quorum fails its check for a
  # moment while stockd already serves through the other two (seen: zk2, once).
  t0=$SECONDS
  for s in mariadb zk1 zk2 zk3 redis stockd-1 stockd-2 stockd-3 nginx; do
    until podman healthcheck run "${project}_${s}_1" >/dev/null 2>&1; do
      ((SECONDS - t0 < 60)) || fail "$s: its health check still fails after 60 s"
      sleep 1
    done
  done
  echo "ok: every container's health check passes ($(elapsed "$t0"))"
}
ready zk

# ---------------------------------------------------------------- deductions

# shop_sql QUERY: runs QUERY in `shop` as root over the MariaDB container's socket.
shop_sql() {
  podman exec "${project}_mariadb_1" mariadb --no-defaults -uroot -S /var/lib/stockd/mysql/sock \
    -N -B shop -e "$1"
}

# reset NAME STOCK: makes the round's folder $T/NAME, keeps there the highest order id
# so far (the rounds share one database: a round's ledger rows are the ids above it),
# and sets the product's stock to STOCK.
reset() {
  local name=$1 d=$T/$1
  mkdir -p "$d/answers"
  shop_sql "SELECT COALESCE(MAX(id), 0) FROM orders" >"$d/mark"
  # The reset's statements are lab/shop.py's (the container has no python3-pymysql).
  lab set_stock_sql "$product" "$2" | podman exec -i "${project}_mariadb_1" mariadb \
    --no-defaults -uroot -S /var/lib/stockd/mysql/sock shop ||
    fail "$name: the reset of product $product failed"
  expect_eq "$name: stock of product $product after the reset" "$2" \
    "$(shop_sql "SELECT stock FROM product WHERE id=$product")"
}

# fire NAME REQUESTS CONCURRENCY: the deductions through nginx, CONCURRENCY at a time;
# each answer's body in $T/NAME/answers/I, the status codes in $T/NAME/codes.
fire() {
  seq "$2" | xargs -P "$3" -I{} curl -s -m 60 -o "$T/$1/answers/{}" \
    -w '%{http_code}\n' "$base/stock/reduce?id=$product" >"$T/$1/codes" || true
}

# codes NAME: the round's status codes, "status:count " each, in order.
codes() { sort "$T/$1/codes" | uniq -c | awk '{ printf "%s:%s ", $2, $1 }'; }

# deducted NAME: how many of the round's answers so far say deducted.
deducted() { grep -l '"result":"deducted"' "$T/$1"/answers/* 2>/dev/null | wc -l; }

# reconcile NAME STOCK REQUESTS: every request has a JSON answer, and the ledger agrees
# with the answers: the orders rows the round made are the deducted answers (same
# count, same order ids, same count per instance), and the stock is the reset's STOCK
# less the deducted answers.
reconcile() {
  local name=$1 s=$2 n=$3 d=$T/$1 mark k
  mark=$(cat "$d/mark")
  jq -s -r '.[] | [.result, .instance, (.order_id // "")] | @tsv' "$d"/answers/* \
    >"$d/answers.tsv" || fail "$name: an answer is not JSON (see $d/answers)"
  expect_eq "$name: answers" "$n" "$(wc -l <"$d/answers.tsv")"
  k=$(awk '$1 == "deducted"' "$d/answers.tsv" | wc -l)
  ((k <= s)) || fail "$name: $k deducted answers for a stock of $s"
  expect_eq "$name: stock after the load ($s less the $k deducted answers)" $((s - k)) \
    "$(shop_sql "SELECT stock FROM product WHERE id=$product")"
  expect_eq "$name: orders rows (the ledger)" "$k" \
    "$(shop_sql "SELECT COUNT(*) FROM orders WHERE product_id=$product AND id > $mark")"
  expect_eq "$name: order ids: answered = in the ledger" \
    "$(shop_sql "SELECT id FROM orders WHERE product_id=$product AND id > $mark ORDER BY id" | tr '\n' ' ')" \
    "$(awk '$1 == "deducted" { print $3 }' "$d/answers.tsv" | sort -n | tr '\n' ' ')"
  expect_eq "$name: deductions per instance: answered = in the ledger" \
    "$(shop_sql "SELECT instance, COUNT(*) FROM orders WHERE product_id=$product AND id > $mark
            GROUP BY instance ORDER BY instance" | tr '\t\n' ': ')" \
    "$(awk '$1 == "deducted" { print $2 }' "$d/answers.tsv" | sort | uniq -c | awk '{ printf "%s:%s ", $2, $1 }')"
}

# load NAME [STOCK REQUESTS CONCURRENCY]: resets the product, fires the load through
# nginx and checks that it ended exactly: every answer deducted or sold_out, STOCK
# deducted, the stock at 0, the ledger equal to the answers (reconcile); and that
# nginx spread the answers over all three.
load() {
  local name=$1 s=${2:-$stock} n=${3:-$requests} c=${4:-$concurrency} d=$T/$1 t0 spread
  reset "$name" "$s"
  t0=$SECONDS
  fire "$name" "$n" "$c"
  echo "$name: load: $n requests, $c at a time, in $(elapsed "$t0")"
  expect_eq "$name: HTTP answers (status:count)" "200:$s 409:$((n - s)) " "$(codes "$name")"
  expect_eq "$name: deducted answers" "$s" "$(deducted "$name")"
  reconcile "$name" "$s" "$n"
  spread=$(cut -f2 "$d/answers.tsv" | sort | uniq -c | awk '{ printf "%s:%s ", $2, $1 }')
  expect_eq "$name: instances that answered" "stockd-1 stockd-2 stockd-3" \
    "$(cut -f2 "$d/answers.tsv" | sort -u | tr '\n' ' ' | sed 's/ $//')"
  echo "ok: $name: nginx spread the requests: $spread"
}

# ---------------------------------------------------------------- the ZooKeeper leader killed

# zk_mode N: the mode of member zkN (leader or follower), from `srvr` asked inside its
# container (lab/servers.py's zk_mode); nothing while it is down or not serving.
zk_mode() {
  podman exec "${project}_zk$1_1" python3 -c \
    'from lab.servers import zk_mode; print(zk_mode(2181) or "")' 2>/dev/null || true
}
# zk_modes: "zk1:MODE zk2:MODE zk3:MODE", MODE - for a member that does not serve.
zk_modes() {
  local n m
  for n in 1 2 3; do
    m=$(zk_mode "$n")
    printf 'zk%s:%s ' "$n" "${m:--}"
  done
}
# zk_leader: the number of the member that leads, or nothing.
zk_leader() { zk_modes | grep -o 'zk[123]:leader' | cut -c3 || true; }
# stockd_starts: when each stockd container last started (a restart changes it).
stockd_starts() {
  local n
  for n in 1 2 3; do podman inspect -f '{{.State.StartedAt}}' "${project}_stockd-${n}_1"; done
}

modes=$(zk_modes)
expect_eq "the ensemble's modes, sorted" "follower follower leader" \
  "$(tr ' ' '\n' <<<"$modes" | cut -s -d: -f2 | sort | xargs)"
leader=$(zk_leader)
echo "ok: the ensemble serves: $modes"

# The load of the zk round, with the leader's container killed once the first unit is
# deducted: its clients lose their server, the two followers theirs, until the two
# elect a new leader; meanwhile a deduction waits for the lock (up to stockd's 5 s) or
# gets a 503, and a holder whose session is in doubt rolls back (lock_lost) rather than
# write. Whatever each request got, the ledger must agree with the answers. The stock
# is larger than the other rounds' so that units are still being deducted when the
# kill lands: with 50 units all were sold before `podman kill` returned (seen, with
# curl's one process per request making about 50 requests a second), and the rest of
# the load were sold-out answers, which need no lock.
name=zk-leader-kill kstock=500 krequests=600
d=$T/$name
reset "$name" "$kstock"
starts=$(stockd_starts)
t0=$SECONDS
fire "$name" "$krequests" "$concurrency" &
loadpid=$!
until (($(deducted "$name") >= 1)); do
  kill -0 "$loadpid" 2>/dev/null || fail "$name: the load ended before a unit was deducted"
  ((SECONDS - t0 < 60)) || fail "$name: no unit was deducted within 60 s"
  sleep 0.1
done
podman kill "${project}_zk${leader}_1" >/dev/null
tk=$SECONDS
at_kill=$(deducted "$name")
kill -0 "$loadpid" 2>/dev/null || fail "$name: the load was over before the kill landed"
((at_kill < kstock)) ||
  fail "$name: all $kstock units were deducted before the kill landed: not a kill under load"
echo "ok: killed the leader zk$leader under load (at most $at_kill of $kstock units deducted"\
  "when it landed, $(find "$d/answers" -type f | wc -l) of $krequests requests answered)"
until l=$(zk_leader) && [[ -n $l && $l != "$leader" ]]; do
  ((SECONDS - tk < 60)) || fail "$name: no new leader within 60 s of the kill: $(zk_modes)"
  sleep 0.5
done
echo "ok: zk$l leads within $(elapsed "$tk") of the kill: $(zk_modes)"
wait "$loadpid" || true
echo "$name: load: $krequests requests, $concurrency at a time, in $(elapsed "$t0"):" \
  "$(codes "$name")"
bad=$(grep -cvxE '200|409|503' "$d/codes" || true)
expect_eq "$name: answers other than 200, 409 or 503" 0 "$bad"
reconcile "$name" "$kstock" "$krequests"
expect_eq "$name: results" "" \
  "$(cut -f1 "$d/answers.tsv" | grep -vxE 'deducted|sold_out|unavailable|lock_timeout|lock_lost|overloaded' |
    sort | uniq -c | xargs)"
echo "ok: $name: $(cut -f1 "$d/answers.tsv" | sort | uniq -c | awk '{ printf "%s:%s ", $2, $1 }')"
expect_eq "$name: when each stockd container started (none restarted)" \
  "$(xargs <<<"$starts")" "$(stockd_starts | xargs)"

# The old leader comes back as a follower, every container is healthy again, and a
# second load on the whole ensemble is exact.
t0=$SECONDS
podman start "${project}_zk${leader}_1" >/dev/null
until [[ $(zk_mode "$leader") == follower ]]; do
  ((SECONDS - t0 < 90)) || fail "zk$leader did not rejoin as a follower within 90 s: $(zk_modes)"
  sleep 0.5
done
echo "ok: zk$leader started again rejoined as a follower ($(elapsed "$t0")): $(zk_modes)"
ready zk
load zk-after 30 90 15

# ---------------------------------------------------------------- a stockd that arrives late

# podman-compose does not wait for health before starting nginx, so nginx must cope
# with a stockd that is not there yet: with stockd-3 stopped (its name gone from the
# network's DNS), nginx restarted waits for the name instead of failing, and once
# stockd-3 starts, nginx serves from all three again.
# waits: how often nginx's entrypoint has logged that it waits (its log keeps the
# lines of earlier starts).
waits() { podman logs "${project}_nginx_1" 2>&1 | grep -c 'waiting for the upstreams to resolve' || true; }
before=$(waits)
podman stop -t 5 "${project}_stockd-3_1" >/dev/null
podman restart -t 5 "${project}_nginx_1" >/dev/null
t0=$SECONDS
until (($(waits) > before)); do
  ((SECONDS - t0 < 60)) || fail "nginx did not wait for the missing stockd-3: $(podman logs --tail 5 "${project}_nginx_1" 2>&1)"
  sleep 1
done
echo "ok: nginx waits while stockd-3 is missing"
podman start "${project}_stockd-3_1" >/dev/null
t0=$SECONDS
until [[ $(curl -s -m 5 "$base/health" | jq -r .instance 2>/dev/null) == stockd-3 ]]; do
  ((SECONDS - t0 < 120)) || fail "nginx does not reach stockd-3 after it started late"
  sleep 0.5
done
echo "ok: nginx serves from stockd-3 after it arrived late ($(elapsed "$t0"))"

# ---------------------------------------------------------------- the lease locks

# metrics CONTAINER: the container's own /metrics, asked inside the container (bash's
# /dev/tcp: the image has no curl), so the answer is that container's and not
# whichever nginx picked.
metrics() {
  podman exec "$1" bash -c 'exec 3<>/dev/tcp/127.0.0.1/8080 &&
    printf "GET /metrics HTTP/1.0\r\n\r\n" >&3 && cat <&3'
}
# sample NAME: the value of the sample NAME (with its labels, exactly) in /metrics on stdin.
sample() { awk -v k="$1" '$1 == k { print $2 }'; }

# switch MODE: makes the three stockd containers again with STOCKD_LOCK=MODE and
# nothing else. podman-compose 1.0.3 has no change detection: `up -d` with a new
# environment only finds the containers there and starts them as they are (Docker
# Compose would recreate the changed services), and its --force-recreate stops and
# removes the services' dependencies too. So the stockd containers are removed here
# and `up -d` is given them by name: it makes them with the new environment; for
# their running dependencies its `podman run` fails on the name in use and the
# `podman start` it falls back to leaves them as they are.
switch() {
  local mode=$1 t0=$SECONDS s before after
  before=$(for s in mariadb zk1 zk2 zk3 redis nginx; do
    podman inspect -f '{{.Id}}' "${project}_${s}_1"
  done)
  podman rm -f -t 5 "${project}"_stockd-{1,2,3}_1 >/dev/null
  STOCKD_LOCK=$mode compose up -d --no-build stockd-1 stockd-2 stockd-3 >"$T/up-$mode.log" 2>&1 ||
    fail "up -d in mode $mode failed, see $T/up-$mode.log"
  for s in stockd-1 stockd-2 stockd-3; do
    expect_eq "$s: its container's STOCKD_LOCK" "STOCKD_LOCK=$mode" \
      "$(podman inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "${project}_${s}_1" |
        grep '^STOCKD_LOCK=')"
  done
  after=$(for s in mariadb zk1 zk2 zk3 redis nginx; do
    podman inspect -f '{{.Id}}' "${project}_${s}_1"
  done)
  expect_eq "$mode: mariadb, zk1..3, redis and nginx are the same containers" "$before" "$after"
  echo "ok: stockd-1..3 made again in mode $mode ($(elapsed "$t0"))"
  ready "$mode"
}

# lease_round MODE SERVICE: the switch, the load, and each container's /metrics: it
# runs MODE (stockd_info), and each container that deducted acquired the lock and sent
# operations to its lock service SERVICE (a mode that never took its lock would end
# exact here only by luck).
lease_round() {
  local mode=$1 service=$2 n m ops acq
  switch "$mode"
  load "$mode"
  for n in 1 2 3; do
    m=$(metrics "${project}_stockd-${n}_1")
    grep -q "^stockd_info{instance=\"stockd-$n\",lock=\"$mode\"," <<<"$m" ||
      fail "stockd-$n does not say it runs $mode: $(grep '^stockd_info' <<<"$m")"
    ops=$(sample "stockd_lock_service_ops_total{service=\"$service\"}" <<<"$m")
    acq=$(sample stockd_lock_acquisitions_total <<<"$m")
    if ! awk -v i="stockd-$n" '$1 == "deducted" && $2 == i { f = 1 } END { exit !f }' \
      "$T/$mode/answers.tsv"; then
      echo "ok: stockd-$n runs $mode (it deducted nothing: $acq acquisitions)"
      continue
    fi
    [[ $ops =~ ^[0-9]+$ && $ops -gt 0 && $acq =~ ^[0-9]+$ && $acq -gt 0 ]] ||
      fail "stockd-$n in mode $mode: operations on $service '$ops', acquisitions '$acq'"
    echo "ok: stockd-$n runs $mode: $acq lock acquisitions, $ops operations on $service"
  done
}
lease_round redis redis
lease_round db-lock mysql_lock_table

# ---------------------------------------------------------------- down

t0=$SECONDS
compose down -v >"$T/down.log" 2>&1 || fail "podman-compose down -v failed, see $T/down.log"
expect_eq "containers left after down -v ($(elapsed "$t0"))" "" \
  "$(podman ps -a -q --filter "label=io.podman.compose.project=$project")"
for v in mariadb-data zk1-data zk2-data zk3-data; do
  podman volume exists "${project}_$v" && fail "down -v left the volume ${project}_$v"
done
echo "ok: down -v removed the containers and the volumes"
net_remove
podman network exists "$net" && fail "the network $net is still there"
ip link show "$bridge" >/dev/null 2>&1 && fail "the bridge $bridge of $net is still there"
iptables -C INPUT -i "$bridge" -p udp -m udp --dport 53 -j ACCEPT 2>/dev/null &&
  fail "the INPUT rule for $bridge is still there"
echo "ok: the network $net, its bridge $bridge and its INPUT rule are gone"
