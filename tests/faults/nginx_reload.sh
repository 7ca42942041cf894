#!/usr/bin/env bash
# nginx reloaded three times during load (three stockd, zk lock): each reload starts
# new workers and lets the old ones finish the requests they hold, so
#   - the master stays, the workers are replaced (checked, so the reload really happened);
#   - no request is lost: the strict invariant holds, with no transport error and no
#     502/504, deducted answers = orders = initial - final, final >= 0;
#   - a drain sells the rest, so the stock ends at exactly 0.
# Bound: every request gets an answer within 20 s.
source "$STOCKD_SRC/tests/lib.sh"
source "$STOCKD_SRC/tests/faults/faultlib.sh"

t_db
f_cluster "$STOCKD_TEST_ZK" 3
master=$(cat "$T/nginx/nginx.pid")
workers() { pgrep -P "$master" | sort | tr '\n' ' '; }
# new_worker BEFORE: true once a worker runs that is not in BEFORE (a reload is done).
new_worker() {
  local w
  for w in $(workers); do [[ " $1 " == *" $w "* ]] || return 0; done
  return 1
}
first_workers=$(workers)

f_load_start load
for n in 1 2 3; do
  f_load_under_way $((n * 30)) # each reload with the load going on, 30 units after the last
  before=$(workers)
  t_nginx 3 # nginx runs already: this writes the same config and reloads it
  wait_until 10 new_worker "$before" || fail "reload $n started no new worker"
  echo "reload $n at stock $(stock "$F_PRODUCT"): workers $before-> $(workers)"
done
f_load_wait load
expect_eq "nginx master after the reloads" "$master" "$(cat "$T/nginx/nginx.pid")"
[[ $(workers) != "$first_workers" ]] || fail "the workers were never replaced"
f_drain
f_check
f_expect_sold_out
echo PASS
