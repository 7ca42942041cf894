# shellcheck shell=bash
# Helpers for the shell integration tests. Source it first thing; it sets `set -euo
# pipefail`, gives the test its own run directory ($T) under the shared one, and
# stops whatever the test started (stockd, nginx, its own servers) when it exits. The
# assertions and requests that need no servers are tests/assert.sh's (sourced here);
# the servers and wait_until come from the lab library's shell side.
set -euo pipefail
source "$STOCKD_SRC/scripts/stack-lib.sh"
# fail, skip, expect_eq and the requests to stockd (reduce, health, metric, metric_sum).
source "$STOCKD_SRC/tests/assert.sh"

T=$STOCKD_TEST_RUN/t/$STOCKD_TEST_NAME
rm -rf "$T"
mkdir -p "$T"
PORT0=$STOCKD_TEST_PORTS
DB=t_${STOCKD_TEST_NAME//[^a-zA-Z0-9_]/_}
DB_USER=stockd
DB_PASS=stockd-test-pw
MYSQL_URL="mysql://$DB_USER@127.0.0.1:$STOCKD_TEST_MYSQL_PORT/$DB"
export STOCKD_MYSQL_PASSWORD=$DB_PASS
export STOCKLOAD_BIN=$STOCKD_BUILD/loadtest/stockload
# The fault proxy (tests/support/fault_proxy_cli.c): a relay that can hold, delay or cut.
export FAULT_PROXY_BIN=$STOCKD_BUILD/tests/support/fault-proxy
# Mode redis finds the fixture's Redis without an option (a test may still pass --redis).
[[ -n ${STOCKD_TEST_REDIS:-} ]] && export STOCKD_REDIS=$STOCKD_TEST_REDIS
# Mode etcd likewise finds the fixture's etcd.
[[ -n ${STOCKD_TEST_ETCD:-} ]] && export STOCKD_ETCD=$STOCKD_TEST_ETCD
# Mode zk locks under a path of this test's own on the fixture's ZooKeeper: tests run
# side by side, and two tests' stockd must never queue on one product's lock (nor see
# each other's nodes in a view or an operation count). A test that passes --zk-lock-path
# still chooses its own; one that reads stockd's default path in ZooKeeper itself unsets
# this (it has a chroot or a product of its own).
export STOCKD_ZK_LOCK_PATH="/t/$STOCKD_TEST_NAME/product_{id}"

# Runs on exit. It calls `exit` only to fail a test that would otherwise pass; when
# it returns normally bash keeps the script's own exit status, so a test that also
# runs other commands in its trap before calling t_cleanup cannot mask a failure.
t_cleanup() {
  local f
  stockd_stop_all "$T"
  nginx_stop "$T"
  for f in "$T"/*/pid; do [[ -e $f ]] && stop_pidfile "$f" 10; done
  # A sanitizer build of stockd reports into its log and carries on (or exits later
  # with a code nobody reads): any report there fails the test.
  if grep -l -E 'ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:' \
    "$T"/stockd/*.log 2>/dev/null; then
    echo "FAIL: sanitizer reports in the stockd logs above" >&2
    grep -h -A20 -E 'ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:' \
      "$T"/stockd/*.log | head -80 >&2
    exit 1
  fi
  return 0
}
trap t_cleanup EXIT

# The MariaDB that holds the test's database: the fixture's, unless a test that runs
# its own (to stop or restart it) sets MYSQL_RUN to that one's run directory.
MYSQL_RUN=$STOCKD_TEST_RUN
# sql QUERY: runs a query in the test database, prints bare values.
# Skips the test unless $STOCKD_BIN is the built service binary: the tests that start a
# stack through scripts/stack or a load tool hand it on.
need_stockd_bin() {
  if [[ ! -x $STOCKD_BIN ]] || ! grep -qa /stock/reduce "$STOCKD_BIN"; then
    skip "no stockd service binary at $STOCKD_BIN (build the stockd target first)"
  fi
}

sql() { mysql_cli "$MYSQL_RUN" -N -B "$DB" -e "$1"; }
# stock ID, orders ID: product ID's stock (product.stock), and how many orders it has.
stock() { sql "SELECT stock FROM product WHERE id=$1"; }
orders() { sql "SELECT COUNT(*) FROM orders WHERE product_id=$1"; }

# late_write FENCING ANSWER PORT ID [fence]: the verdict of a test in which a holder
# that lost its lock (paused past its lease, or its key gone from the servers) writes
# product ID's last unit after a newer holder sold it. ANSWER is the file with the late
# holder's answer, PORT its stockd. unfenced: the write went through and the unit was
# sold twice (stock -1, two orders). fenced: 503 lock_lost, refused once, stock 0 and
# one order; refused by the fence or the pre-commit lease check, or with `fence` by the
# fence alone (the holder's own lease looked valid, so the check had no cause).
late_write() {
  local fencing=$1 answer=$2 port=$3 id=$4 only=${5:-}
  echo "the late holder's answer: $(cat "$answer")"
  if [[ $fencing == unfenced ]]; then
    expect_eq "the late holder's write" "200 deducted" "$(cat "$answer")"
    expect_eq "stock: the last unit sold twice" -1 "$(stock "$id")"
    expect_eq "orders" 2 "$(orders "$id")"
    return
  fi
  expect_eq "the late holder's write" "503 lock_lost" "$(cat "$answer")"
  refusals "$port"
  echo "refused by: fence $fenced, pre-commit check $guard"
  if [[ $only == fence ]]; then
    expect_eq "refused by the fence" 1 "$fenced"
    expect_eq "not by the pre-commit check (the holder's lease looked valid)" 0 "$guard"
  else
    expect_eq "refusals" 1 $((fenced + guard))
  fi
  expect_eq "stock" 0 "$(stock "$id")"
  expect_eq "orders" 1 "$(orders "$id")"
}

# sentinel_primary PORT: HOST:PORT of the primary the Sentinel on PORT names for master
# stockd; fails if it names none.
sentinel_primary() { lab sentinel_primary "$1"; }

# alive N: fails the test, with its log, if stockd instance N is gone.
alive() { pid_alive "$T/stockd/$1.pid" || fail "stockd-$1 is gone; its log: $(tail -n 20 "$T/stockd/$1.log")"; }
# trx_open [STATE]: how many transactions MariaDB has open for this test's database
# (innodb_trx, by the connection's database), or only those in STATE ('LOCK WAIT': a
# statement waiting for a row lock). A deduction's transaction is open from its read to
# its commit, so this is how a test waits for a worker to be inside its think.
trx_open() {
  sql "SELECT COUNT(*) FROM information_schema.innodb_trx t
       JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
       WHERE p.db = '$DB'${1:+ AND t.trx_state = '$1'}"
}
# tcp_conns FILTER PROCESS: how many established TCP connections match ss's FILTER
# ("dport = :PORT" for a client's, "sport = :PORT" for a server's) and are held by a
# process called PROCESS (curl, stockd, nginx): a server's count is of the connections
# it has accepted. The test's ports are its own, so nothing else matches.
tcp_conns() { ss -Htnp state established "( $1 )" | grep -c "((\"$2\"," || true; }
# holding N: stockd instance N has acquired a lock at least once.
holding() {
  local n
  (($(metric_sum stockd_lock_acquisitions_total $((PORT0 + $1))) >= 1))
}

# t_db: makes this test's database with the schema and seed data.
t_db() { mysql_create_db "$STOCKD_TEST_RUN" "$DB" "$DB_USER" "$DB_PASS"; }

# t_stockd INDEX LOCK [ARGS...]: starts stockd INDEX (1..10) on PORT0+INDEX. Mode
# redlock gets the fixture's three servers (--redis in ARGS still wins: the last one does).
t_stockd() {
  local i=$1 lock=$2
  shift 2
  [[ $lock == redlock ]] && set -- --redis "$STOCKD_TEST_REDLOCK" "$@"
  stockd_start "$T" "$i" $((PORT0 + i)) "$lock" "$MYSQL_URL" "$STOCKD_TEST_ZK" "$@"
}

# t_nginx N: nginx on PORT0 over stockd instances 1..N.
t_nginx() {
  local ports=() i
  for ((i = 1; i <= $1; i++)); do ports+=($((PORT0 + i))); done
  nginx_start "$T" "$PORT0" "${ports[@]}"
}
