#!/usr/bin/env bash
# lock_cache.sh CASE: the ZooKeeper lock's cache (--lock-cache-ms, lock/zklock.h) in the
# service, against the real MariaDB, ZooKeeper and nginx.
#   fair3  3 instances behind nginx round-robin, one hot product with ample stock
#          (as many units as requests, so no sold-out answer), caching on (the
#          default): exact 0, the ledger reconciled, and each instance deducted a fair
#          share (at least half of its third). Cache hits and ZooKeeper operations per
#          deduction are printed.
#   ops1   1 instance, the same hot load twice, caching off then on: exact each time,
#          and with caching fewer ZooKeeper operations per deduction, with cache hits.
#   handover  an instance whose lock is cached for 30 s lets it go as soon as another
#          instance queues: the other's deduction is answered within the session timeout.
#   kill9  an instance that cached its lock is killed -9: the node stays until its
#          session (2 s) expires, and then the other instance takes the lock and
#          deducts. (That a write of a holder that lost its cached lock is refused is
#          late_commit_zk_cached_exact.)
source "$STOCKD_SRC/tests/lib.sh"
case=${1:?case}

t_db
# load URL N LABEL: N deductions of product 1 from stock N at concurrency 50; checks
# exact 0 and the ledger.
load() {
  "$STOCKD_SRC/loadtest/oversell" --url "$1" --run "$STOCKD_TEST_RUN" --db "$DB" \
    --mysql "$MYSQL_URL" --label "$3" --stock "$2" --requests "$2" --concurrency 50 | tee "$T/out"
  res=$(grep '^RESULT ' "$T/out") || fail "no RESULT line"
  get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$res"; }
  expect_eq "$3: ledger (answers = orders = stock change)" ok "$(get ledger)"
  expect_eq "$3: final stock" 0 "$(get final)"
  expect_eq "$3: orders" "$2" "$(get orders)"
}

case $case in
fair3)
  n=900
  for i in 1 2 3; do t_stockd "$i" zk --think-us 1000; done
  t_nginx 3
  load "http://127.0.0.1:$PORT0" "$n" "zk x3, lock cache on"
  hits=0 ops=0
  for i in 1 2 3; do
    p=$((PORT0 + i))
    share=$(sql "SELECT COUNT(*) FROM orders WHERE product_id = 1 AND instance = 'stockd-$i'")
    h=$(metric "$p" stockd_lock_cache_hits_total)
    echo "stockd-$i: $share deducted; $(metric "$p" stockd_lock_acquisitions_total) lock rounds," \
      "$h cache hits, let go for a contender $(metric "$p" 'stockd_lock_cache_releases_total{reason="contender"}')," \
      "at timeout $(metric "$p" 'stockd_lock_cache_releases_total{reason="timeout"}')"
    ((share >= n / 6)) || fail "stockd-$i deducted $share of $n: less than half its third"
    hits=$((hits + h))
    ops=$((ops + $(metric_total stockd_zk_ops_total "$p")))
  done
  echo "zk x3 with the lock cache: $hits cache hits, $(awk -v o="$ops" -v d="$n" \
    'BEGIN { printf "%.3f", o / d }') ZooKeeper operations per deduction"
  ;;
ops1)
  n=600
  declare -A per
  for cache in 0 200; do
    t_stockd 1 zk --think-us 1000 --lock-cache-ms "$cache"
    load "http://127.0.0.1:$((PORT0 + 1))" "$n" "zk x1, --lock-cache-ms $cache"
    ops=$(metric_total stockd_zk_ops_total $((PORT0 + 1)))
    hits=$(metric $((PORT0 + 1)) stockd_lock_cache_hits_total)
    per[$cache]=$(awk -v o="$ops" -v d="$n" 'BEGIN { printf "%.3f", o / d }')
    echo "--lock-cache-ms $cache: $ops ZooKeeper operations for $n deductions (${per[$cache]}" \
      "per deduction), $hits cache hits"
    if ((cache == 0)); then
      expect_eq "cache hits with the cache off" 0 "$hits"
    else
      ((hits > 0)) || fail "no cache hit on one instance with one hot product"
    fi
    stockd_stop "$T" 1
  done
  awk -v on="${per[200]}" -v off="${per[0]}" 'BEGIN { exit !(on < off) }' ||
    fail "operations per deduction with the cache (${per[200]}) not below without (${per[0]})"
  echo "ok: ZooKeeper operations per deduction ${per[0]} -> ${per[200]} with the lock cache"
  ;;
handover)
  # A caches its lock for up to 30 s; B's deduction must not wait for that: the
  # children watch tells A at once, and A lets go.
  sql "UPDATE product SET stock = 10 WHERE id = 1"
  t_stockd 1 zk --lock-cache-ms 30000
  t_stockd 2 zk --lock-timeout-ms 20000
  code=$(curl -sS -m 20 -o "$T/a.body" -w '%{http_code}' "http://127.0.0.1:$((PORT0 + 1))/stock/reduce?id=1")
  expect_eq "A's deduction" "200 deducted" "$code $(jq -r .result "$T/a.body")"
  expect_eq "A kept its lock node (cached)" 1 "$(metric $((PORT0 + 1)) stockd_lock_cache_parks_total)"
  t0=$(date +%s%N)
  code=$(curl -sS -m 30 -o "$T/b.body" -w '%{http_code}' "http://127.0.0.1:$((PORT0 + 2))/stock/reduce?id=1")
  ms=$((($(date +%s%N) - t0) / 1000000))
  echo "B's deduction, with A's lock cached for 30 s, was answered after $ms ms"
  expect_eq "B's deduction" "200 deducted" "$code $(jq -r .result "$T/b.body")"
  # A generous bound (the session timeout, 6 s), far below the 30 s of A's cache.
  ((ms < 6000)) || fail "B waited $ms ms for A's cached lock"
  expect_eq "A let its cached lock go for a contender" 1 \
    "$(metric $((PORT0 + 1)) 'stockd_lock_cache_releases_total{reason="contender"}')"
  ;;
kill9)
  sql "UPDATE product SET stock = 10 WHERE id = 1"
  t_stockd 1 zk --zk-session-ms 2000 --lock-cache-ms 30000
  t_stockd 2 zk --lock-timeout-ms 20000
  code=$(curl -sS -m 20 -o "$T/a.body" -w '%{http_code}' "http://127.0.0.1:$((PORT0 + 1))/stock/reduce?id=1")
  expect_eq "A's deduction" "200 deducted" "$code $(jq -r .result "$T/a.body")"
  expect_eq "A kept its lock node (cached)" 1 "$(metric $((PORT0 + 1)) stockd_lock_cache_parks_total)"
  kill -9 "$(cat "$T/stockd/1.pid")"
  t0=$(date +%s%N)
  code=$(curl -sS -m 30 -o "$T/b.body" -w '%{http_code}' "http://127.0.0.1:$((PORT0 + 2))/stock/reduce?id=1")
  ms=$((($(date +%s%N) - t0) / 1000000))
  echo "B took over A's cached lock after $ms ms (A's session: 2000 ms)"
  expect_eq "B's deduction" "200 deducted" "$code $(jq -r .result "$T/b.body")"
  # The cached node blocked B until the session of the killed holder expired: a node
  # deleted at once (no cache) would have let B in within milliseconds.
  ((ms >= 1000)) || fail "B got the lock after $ms ms: A's cached node was not there"
  expect_eq "stock" 8 "$(sql "SELECT stock FROM product WHERE id = 1")"
  expect_eq "orders" 2 "$(sql "SELECT COUNT(*) FROM orders WHERE product_id = 1")"
  ;;
*) fail "unknown case $case" ;;
esac
echo PASS
