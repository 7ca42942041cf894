# shellcheck shell=bash
# Helpers for the fault tests in this folder. Source it after tests/lib.sh.
#
# Every fault test has the same shape: N stockd instances behind nginx, one product
# with stock $F_STOCK, a bounded stockload run against nginx (f_load_start), a fault
# injected while it runs, the load awaited, a drain that asks for more units than are
# left (f_drain, so the stock must end at exactly 0 and the service must answer again
# after the fault), and loadtest/check-invariant over everything the clients saw
# (f_check). stockload writes the key and outcome of each of its requests to
# $T/NAME.keys (--keys-out) and names that file in its JSON, so the checker retries every
# key whose answer was lost; single requests whose key the test must know go through
# f_keyed, which logs them to $F_KEYS in the same format.
#
# No request may hang: stockload and f_keyed give every request F_TIMEOUT_MS (20 s) to
# get an answer, and the checker fails the test if any did not.

F_PRODUCT=${F_PRODUCT:-2}
F_STOCK=${F_STOCK:-300}
F_TIMEOUT_MS=20000
# Each deduction thinks this long between its check and its write, under the lock. It
# makes the stock last through the fault (at most 1 s / 10 ms = 100 deductions a second
# whatever the machine, so 300 units last at least 3 s) and widens the window in which
# two holders at once would oversell.
F_THINK_US=${F_THINK_US:-10000}
# Deductions per lock acquisition. The fault tests run the seed's one-per-acquisition
# path unless a test asks for batches (then the think time is per batch, so such a test
# needs a longer one for the stock to last through the fault).
F_BATCH_MAX=${F_BATCH_MAX:-1}
F_KEYS=$T/keys.log
F_NGINX=http://127.0.0.1:$PORT0
: >"$F_KEYS"

# f_reset: stock to F_STOCK, no orders, fence 0.
f_reset() { mysql_set_stock "$MYSQL_RUN" "$DB" "$F_PRODUCT" "$F_STOCK"; }

# f_stockd INDEX ZK [ARGS...]: stockd INDEX (on PORT0+INDEX) in zk mode on ZK, with
# the fault tests' settings.
f_stockd() {
  local i=$1 zk=$2
  shift 2
  stockd_start "$T" "$i" $((PORT0 + i)) zk "$MYSQL_URL" "$zk" --think-us "$F_THINK_US" \
    --batch-max "$F_BATCH_MAX" "$@"
}

# f_cluster ZK N [ARGS...]: the product reset, stockd 1..N (f_stockd, with ARGS) and
# nginx over them on PORT0.
f_cluster() {
  local zk=$1 n=$2 i
  shift 2
  f_reset
  for ((i = 1; i <= n; i++)); do f_stockd "$i" "$zk" "$@"; done
  t_nginx "$n"
}

# f_kill9 PID: kill -9 of a child of this shell, reaped quietly (bash would report the
# killed job on stderr).
f_kill9() { { kill -KILL "$1" && wait "$1"; } 2>/dev/null || true; }

# f_load_start NAME [STOCKLOAD ARGS...]: stockload against nginx in the background,
# 50 requests in flight for 8 s unless the args say otherwise; JSON in $T/NAME.json, one
# line per request ("KEY STATUS RESULT ORDER_ID REPLAYED CURL_EXIT") in $T/NAME.keys.
f_load_start() {
  local name=$1
  shift
  local args=("$@")
  ((${#args[@]})) || args=(--duration 8 --concurrency 50)
  "$STOCKD_BUILD/loadtest/stockload" --url "$F_NGINX/stock/reduce?id=$F_PRODUCT" \
    --idempotency --keys-out "$T/$name.keys" --timeout-ms "$F_TIMEOUT_MS" --json --no-progress \
    "${args[@]}" >"$T/$name.json" 2>"$T/$name.err" &
  echo $! >"$T/$name.loadpid"
}

# f_load_under_way [UNITS]: waits (20 s at most) until the load has deducted UNITS
# (default 20) of the product's F_STOCK, so a fault injected next lands in a running load
# (at most 100 deductions a second, F_THINK_US, leave most of the stock for the fault).
f_load_under_way() {
  local units=${1:-20}
  wait_until 20 eval '(($(stock "$F_PRODUCT") <= F_STOCK - units))' ||
    fail "the load deducted fewer than $units units in 20 s (stock $(stock "$F_PRODUCT"))"
}

# f_load_wait NAME: waits for it and prints its counts.
f_load_wait() {
  local name=$1 rc=0
  wait "$(cat "$T/$name.loadpid")" || rc=$?
  ((rc == 0)) || { cat "$T/$name.err" >&2; fail "stockload $name exited $rc"; }
  jq -c '{load: "'"$name"'", requests, counts, transport_errors, replayed}' "$T/$name.json"
}

# f_drain: asks for 40 more units than are left, 20 at a time, so the stock must end
# at 0 with sold_out answers; the load files are then load.json and drain.json.
f_drain() {
  local left loops
  left=$(stock "$F_PRODUCT")
  loops=$(((left + 40 + 19) / 20))
  f_load_start drain --threads 20 --loops "$loops"
  f_load_wait drain
}

# f_keyed KEY URL [CURL ARGS...]: one deduction of the product with Idempotency-Key KEY
# at URL (nginx or an instance), logged as "KEY STATUS RESULT ORDER_ID REPLAYED
# CURL_EXIT" to $F_KEYS for the checker. Prints the line.
f_keyed() {
  local key=$1 url=$2 code cexit=0 line
  shift 2
  code=$(curl -sS -m $((F_TIMEOUT_MS / 1000)) -o "$T/key.$key" -w '%{http_code}' "$@" \
    -H "Idempotency-Key: $key" "$url/stock/reduce?id=$F_PRODUCT" 2>>"$T/keyed.err") || cexit=$?
  line="$key ${code:-000} $(jq -r '"\(.result // "-") \(.order_id // 0) \(.replayed // false)"' \
    "$T/key.$key" 2>/dev/null || echo '- 0 false') $cexit"
  echo "$line" >>"$F_KEYS"
  echo "$line"
}

# f_check [--lossy]: loadtest/check-invariant over every load (with its keys file) and
# keyed request of the test, with the overlap check for F_THINK_US; fails the test on a
# violation. The INVARIANT line goes to the test's output; every lost answer must have
# been retried with its key (retried = lost), which the keys files make possible.
f_check() {
  local loads=() f
  for f in "$T"/*.json; do [[ -e $f ]] && loads+=(--load "$f"); done
  "$STOCKD_SRC/loadtest/check-invariant" --run "$MYSQL_RUN" --db "$DB" \
    --product "$F_PRODUCT" --initial "$F_STOCK" --url "$F_NGINX" --keys "$F_KEYS" \
    --think-us "$F_THINK_US" \
    "${loads[@]}" "$@" | tee "$T/invariant" || fail "the invariant does not hold"
  expect_eq "lost answers retried with their key" "$(f_invariant lost)" "$(f_invariant retried)"
}

# f_invariant FIELD: a field of the last f_check's INVARIANT line (e.g. lost, retried).
f_invariant() { sed -n "s/^INVARIANT .* $1=\([0-9]*\) .*/\1/p" "$T/invariant"; }

# f_expect_sold_out: after the drain the stock is exactly 0, and the drain saw sold_out.
f_expect_sold_out() {
  expect_eq "final stock after the drain" 0 "$(stock "$F_PRODUCT")"
  (($(jq .counts.sold_out "$T/drain.json") > 0)) || fail "the drain saw no sold_out answer"
}

# f_wait_healthy INDEX...: waits (30 s at most) until each instance's /health is 200.
f_wait_healthy() {
  local i
  for i in "$@"; do
    wait_until 30 eval "[[ \$(curl -s -o /dev/null -m 5 -w '%{http_code}' \
      http://127.0.0.1:$((PORT0 + i))/health) == 200 ]]" ||
      fail "stockd-$i did not become healthy again"
  done
  echo "ok: stockd $* healthy"
}

# f_health INDEX: prints the HTTP status of the instance's /health.
f_health() {
  curl -s -o /dev/null -m 10 -w '%{http_code}' "http://127.0.0.1:$((PORT0 + $1))/health" || true
}

# ------------------------------------------------------------ stalling a commit

# f_gap_lock_start: a root transaction locks the end of the orders table (SELECT ...
# FOR UPDATE takes the next-key lock on the supremum), so the next deduction's INSERT
# waits after its UPDATE of the stock: a holder frozen between UPDATE and COMMIT, with
# a partial deduction pending. The session stays open until f_gap_lock_stop.
f_gap_lock_start() {
  mysql_cli "$MYSQL_RUN" -N -B "$DB" -e "START TRANSACTION;
    SELECT id FROM orders WHERE id >= (SELECT COALESCE(MAX(id), 0) FROM orders) FOR UPDATE;
    SELECT SLEEP(60), 'faults-gap-lock';" >/dev/null 2>&1 &
  echo $! >"$T/gaplock.clientpid"
  wait_until 10 eval "[[ -n \$(f_gap_lock_conn) ]]" || fail "the gap lock session did not start"
}

# f_freeze_holder: f_gap_lock_start, then waits until a deduction is frozen by it.
f_freeze_holder() {
  f_gap_lock_start
  wait_until 15 eval '[[ -n $(f_stalled_trx) ]]' || fail "no deduction stalled at the gap lock"
}

# f_gap_lock_conn: the gap lock session's connection id.
f_gap_lock_conn() {
  mysql_cli "$MYSQL_RUN" -N -B -e "SELECT id FROM information_schema.processlist
    WHERE db = '$DB' AND info LIKE 'SELECT SLEEP(60), %faults-gap-lock%' AND id <> CONNECTION_ID()"
}

# f_gap_lock_stop: ends the session (its transaction rolls back, the lock goes), if
# the server still runs.
f_gap_lock_stop() {
  local id
  id=$(f_gap_lock_conn 2>/dev/null) || id='' # the server may be down
  [[ -z $id ]] || mysql_cli "$MYSQL_RUN" -e "KILL $id" 2>/dev/null || true
  wait "$(cat "$T/gaplock.clientpid")" 2>/dev/null || true
}

# f_stalled_trx: prints "THREAD_ID ROWS_MODIFIED" of the transaction waiting for the
# gap lock after modifying rows (the frozen holder), or nothing.
f_stalled_trx() {
  # Of this test's database only: tests run side by side on the fixture's MariaDB.
  mysql_cli "$MYSQL_RUN" -N -B -e "SELECT t.trx_mysql_thread_id, t.trx_rows_modified
    FROM information_schema.innodb_trx t JOIN information_schema.processlist p
      ON p.id = t.trx_mysql_thread_id
    WHERE p.db = '$DB' AND t.trx_state = 'LOCK WAIT' AND t.trx_rows_modified > 0 LIMIT 1"
}

# f_trx_open THREAD_ID: true while that connection has a transaction open.
f_trx_open() {
  [[ -n $(mysql_cli "$MYSQL_RUN" -N -B -e "SELECT 1 FROM information_schema.innodb_trx
    WHERE trx_mysql_thread_id = $1") ]]
}

# f_instance_of_conn THREAD_ID: the stockd index (1..) whose process owns that MySQL
# connection, found through the client port in the processlist and ss. One local port
# can serve connections to other servers too (side by side tests), so only the socket
# towards MariaDB's port counts.
f_instance_of_conn() {
  local host port pid f
  host=$(mysql_cli "$MYSQL_RUN" -N -B -e "SELECT host FROM information_schema.processlist
    WHERE id = $1")
  port=${host##*:}
  [[ $port =~ ^[0-9]+$ ]] || return 1
  for pid in $(ss -tnpH state established \
    "( sport = :$port and dport = :$STOCKD_TEST_MYSQL_PORT )" |
    sed -n 's/.*pid=\([0-9]*\).*/\1/p'); do
    for f in "$T"/stockd/*.pid; do
      [[ $(cat "$f") == "$pid" ]] && { basename "$f" .pid; return 0; }
    done
  done
  return 1
}

# ------------------------------------------------------------ ZooKeeper sessions

# f_zk_sid PID ZKPORT: the ZooKeeper session id of the process's connection to the
# server on ZKPORT (from ss and the `cons` four-letter word).
f_zk_sid() {
  local pid=$1 zkport=$2 lport
  lport=$(ss -tnpH state established "( dport = :$zkport )" | grep "pid=$pid," |
    awk '{print $3}' | sed 's/.*://' | head -1)
  [[ -n $lport ]] || return 1
  zk_4lw "$zkport" cons | grep "/127.0.0.1:$lport\[" | sed -n 's/.*sid=\(0x[0-9a-f]*\).*/\1/p'
}

# f_zk_ephemerals ZKPORT SID: the ephemeral nodes the session owns (from `dump`).
f_zk_ephemerals() {
  zk_4lw "$1" dump | awk -v sid="$2" '
    /^0x[0-9a-f]+:$/ { cur = substr($0, 1, length($0) - 1); next }
    /^\t\// { if (cur == sid) { sub(/^\t/, ""); print } next }
    { cur = "" }'
}

# f_keyed_cut KEY URL SECONDS: a keyed deduction whose client hangs up after SECONDS
# (a connection cut, whatever the server does with the request), logged with status 000
# and curl exit "cut".
f_keyed_cut() {
  local key=$1 url=$2 secs=$3 pid rc=0
  curl -sS -m $((F_TIMEOUT_MS / 1000)) -o /dev/null -H "Idempotency-Key: $key" \
    "$url/stock/reduce?id=$F_PRODUCT" 2>/dev/null &
  pid=$!
  sleep "$secs" # a pause, not a wait: the client's patience is the fault
  { kill -KILL "$pid" && wait "$pid"; } 2>/dev/null || rc=$?
  ((rc == 137)) || fail "request $key ended before the cut (curl exit $rc)"
  echo "$key 000 - 0 false cut" >>"$F_KEYS"
}
