#!/usr/bin/env bash
# GET /lock/queue?id=N: the lock service's view of a product's lock. Two zk instances
# each deduct product 1 with a long pause inside the lock, so one holds and the other
# waits: the view lists both nodes in order, with their instances, the waiter watching
# the holder. A mode without a lock and a lease kind answer their own views, and bad
# input gets a JSON 4xx.
source "$STOCKD_SRC/tests/lib.sh"

t_db
sql "UPDATE product SET stock=10 WHERE id=1"
t_stockd 1 zk --think-us 3000000
t_stockd 2 zk --think-us 3000000
t_stockd 3 none
t_stockd 4 redis --redis "$STOCKD_TEST_REDIS" --think-us 3000000
t_stockd 5 db-lock --think-us 3000000
t_stockd 6 etcd --think-us 3000000

# q INSTANCE QUERY [curl args...]: sets $status and $body (checked to be JSON).
q() {
  local i=$1 query=$2
  shift 2
  status=$(curl -sS -o "$T/body" -w '%{http_code}' "$@" "http://127.0.0.1:$((PORT0 + i))/lock/queue$query")
  body=$(cat "$T/body")
  jq -e 'has("result")' <<<"$body" >/dev/null || fail "/lock/queue$query: not a JSON answer: $body"
}
field() { jq -r "$1" <<<"$body"; }

# Bad input: 400 (405 for a method), JSON, on every instance kind.
for bad in "" "?id=" "?id=-1" "?id=0" "?id=abc" "?id=2147483648" "?id=99999999999999999999" \
  "?id=1&id=2" "?id=1&x=2" "?x=1" "?id=1;ls"; do
  q 1 "$bad"
  expect_eq "status of /lock/queue$bad" 400 "$status"
  expect_eq "result of /lock/queue$bad" bad_request "$(field .result)"
done
q 1 "?id=1" -X POST
expect_eq "POST /lock/queue" 405 "$status"

# A free lock: an empty queue.
q 1 "?id=1"
expect_eq "free zk lock: status" 200 "$status"
expect_eq "free zk lock" "queue 0 0" "$(field '[.view, .total, (.entries | length)] | join(" ")')"
# The path is --zk-lock-path's template for product 1 (tests/lib.sh gives each test its own).
expect_eq "zk lock's path" "${STOCKD_ZK_LOCK_PATH/\{id\}/1}" "$(field .path)"

# One holder and one waiter, from two instances.
curl -sS -o "$T/r1" "http://127.0.0.1:$((PORT0 + 1))/stock/reduce?id=1" &
r1=$!
curl -sS -o "$T/r2" "http://127.0.0.1:$((PORT0 + 2))/stock/reduce?id=1" &
r2=$!
wait_until 10 eval '(($(lock_queue_total $((PORT0 + 1)) 1) == 2))' || true
q 1 "?id=1"
expect_eq "queue of two" 2 "$(field .total)"
expect_eq "the first holds, the second waits" "true false" "$(field '[.entries[].holds] | join(" ")')"
expect_eq "the waiter watches the holder" "$(field '.entries[0].node')" "$(field '.entries[1].watches')"
expect_eq "the holder watches nobody" null "$(field '.entries[0].watches')"
expect_eq "both instances queued" "stockd-1 stockd-2" "$(field '[.entries[].owner] | sort | join(" ")')"
expect_eq "our node is marked" stockd-1 "$(field '.entries[] | select(.ours) | .owner')"
expect_eq "both nodes are stockd's" "stockd stockd" "$(field '[.entries[].impl] | join(" ")')"
expect_eq "no stray child" 0 "$(field .strays)"
expect_eq "answered by" stockd-1 "$(field .instance)"
wait "$r1" "$r2"
expect_eq "both deducted" "deducted deducted" "$(jq -r .result "$T/r1" "$T/r2" | sort | xargs)"

# No lock, and a lease kind.
q 3 "?id=1"
expect_eq "mode none: status" 200 "$status"
expect_eq "mode none" "none none" "$(field '[.view, .mode] | join(" ")')"
q 4 "?id=1"
expect_eq "mode redis" "lease 0 -1" "$(field '[.view, .total, .lease_ms] | join(" ")')"

# A lease kind while a deduction holds it: the holder's instance, marked as this
# instance's own (a lease has no session: its owner says whose it is), token, lease.
# etcd's leases form a queue.
declare -A view=([4]=lease [5]=lease [6]=queue)
for i in 4 5 6; do
  curl -sS -o "$T/r$i" "http://127.0.0.1:$((PORT0 + i))/stock/reduce?id=1" &
  held=$!
  wait_until 10 eval '(($(lock_queue_total $((PORT0 + i)) 1) == 1))' || true
  q "$i" "?id=1"
  mode=$(field .mode)
  expect_eq "$mode holder" "${view[$i]} 1 stockd-$i true" \
    "$(field '[.view, .total, .entries[0].owner, .entries[0].ours] | join(" ")')"
  [[ ${view[$i]} == queue ]] || (($(field .lease_ms) > 0 && $(field '.entries[0].token') > 0)) ||
    fail "$mode lease and token: $body"
  wait "$held"
  expect_eq "$mode deducted" deducted "$(jq -r .result "$T/r$i")"
done

alive 1
alive 2
echo "ok: lock_queue"
