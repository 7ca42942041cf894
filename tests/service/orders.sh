#!/usr/bin/env bash
# After the deduction (docs/orders.md), on real servers: three stockd of one lock mode.
#   orders.sh limit MODE exact
#     one customer with a per_user_limit of 1 sends 30 requests at once, spread over the
#     three instances: with a lock (or a row lock, or the atomic statement) exactly one
#     unit is sold and the other 29 are 409 limit_reached. In mode redis-stock the Lua
#     script counts the customer in Redis, and the order writer's row carries the
#     customer. (Without a lock, and with zk, the experiment's rows prove the same
#     through nginx: tests/loadtest/orders.sh.)
#   orders.sh limit zk exact owner
#     the same with every instance routing by owner (--route owner, docs/routing.md): the
#     customer's X-User header crosses to the product's owner with each forward, so the
#     limit holds there; at least one deduction was forwarded.
#   orders.sh reserve MODE
#     10 customers reserve the 10 units of a product that reserves: 3 pay in time, one
#     cancels, the rest expire (brought forward to now + 1 s) while 3 of them cancel at the same moment and 3
#     pay late; paid never exceeds the stock, no unit comes back twice, late payments are
#     409 expired with nothing changed, and stock + units held = initial + restocks,
#     before and after an authenticated restock; GET /stock's reserved, paid and
#     released counts say the same as the rows. A restock with an Idempotency-Key
#     restocks once: replayed, it adds nothing; reused for other units or another
#     product, 422 key_conflict (restock_keyed).
#   orders.sh redis-reserve
#     mode redis-stock reserves in Redis: 6 customers reserve 6 units on two instances, one
#     pays in time (and again: not_reserved), one cancels through nginx, its order named
#     by stockd's own key (and again: not_reserved), the
#     rest expire through the expiry threads while one cancels and one pays late (409
#     expired, nothing changed); Redis's count, the stream (each change once) and, once
#     the writer drained it, MariaDB's orders by state and stock all agree. With
#     --redis-wait-replicas and no replica, a reservation and its cancel are made and
#     answered 503 not_replicated.
#     Its restock (MariaDB, then Redis) with a key, replayed and reused, adds the units
#     once in both.
#   orders.sh auth
#     restock refused without --admin-token-file (403), anonymous (401), with a wrong
#     token (403), bad units (400); accepted with the token (200), into the ledger; a
#     key replayed and reused (restock_keyed), and five retries of one key at once on
#     two instances restock once.
source "$STOCKD_SRC/tests/lib.sh"
what=$1 mode=${2:-zk} expect=${3:-} routing=${4:-}

# held P: units product P's orders hold (sold, reserved, paid).
held() { sql "SELECT COUNT(*) FROM orders WHERE product_id=$1 AND state IN ('sold','reserved','paid')"; }
# units P: GET /stock's "stock reserved paid released" for product P (instance 1), the
# names the live page reads (web/live/live.js).
units() { curl -sS -m 30 "http://127.0.0.1:$((PORT0 + 1))/stock?id=$1" | jq -r '"\(.stock) \(.reserved) \(.paid) \(.released)"'; }
restocked() { sql "SELECT COALESCE(SUM(units), 0) FROM restock WHERE product_id=$1"; }
# post PATH [CURL ARGS...]: POSTs to instance 1; prints "CODE RESULT".
# The body stays in $T/post.json (the last post in the foreground; background posts keep
# their own).
post() {
  local path=$1 port=${PORT:-$((PORT0 + 1))} f=$T/post.$BASHPID
  shift
  curl -sS -m 30 -X POST -o "$f.json" -w '%{http_code}' "$@" "http://127.0.0.1:$port$path" >"$f.code"
  echo "$(cat "$f.code") $(jq -r .result "$f.json")"
  cp "$f.json" "$T/post.json"
}
# restock_keyed P K KEY: a restock of K units of product P with Idempotency-Key KEY
# (instance $PORT or 1, the token s3cret-token), its replay and the key reused for other
# units and for product 3 (422 key_conflict): one restock of K, in the stock and the
# ledger, whatever the retries; the replay answers restocked, replayed.
restock_keyed() {
  local p=$1 k=$2 key=$3 s s3 r auth=(-H "Authorization: Bearer s3cret-token" -H "Idempotency-Key: $3")
  s=$(stock "$p") s3=$(stock 3) r=$(restocked "$p")
  expect_eq "restock $k with key $key" "200 restocked" "$(post "/stock/restock?id=$p&units=$k" "${auth[@]}")"
  expect_eq "the same key again" "200 restocked true" \
    "$(post "/stock/restock?id=$p&units=$k" "${auth[@]}") $(jq -r .replayed "$T/post.json")"
  expect_eq "the key for other units" "422 key_conflict" "$(post "/stock/restock?id=$p&units=$((k + 1))" "${auth[@]}")"
  expect_eq "the key for another product" "422 key_conflict" "$(post "/stock/restock?id=3&units=$k" "${auth[@]}")"
  expect_eq "stock after the key's restock, replay and conflicts" $((s + k)) "$(stock "$p")"
  expect_eq "product 3's stock" "$s3" "$(stock 3)"
  expect_eq "restock ledger" $((r + k)) "$(restocked "$p")"
}
ledger_adds_up() { # P INITIAL
  local s h r
  s=$(stock "$1") h=$(held "$1") r=$(restocked "$1")
  expect_eq "stock + units held = initial + restocks (stock $s, held $h, restocked $r)" $(($2 + r)) $((s + h))
}

# redis_stock_up: mode redis-stock's count and customers in a Redis of its own, the
# orders written by the order writer (which records the customer, orders.user); sets
# extra to stockd's --redis option.
redis_stock_up() {
  r_port=$((PORT0 + 15))
  redis_start "$T" "$r_port" redis-stock || fail "Redis did not start"
  extra=(--redis "127.0.0.1:$r_port")
  mkdir -p "$T/writer"
  STOCKD_REDIS=127.0.0.1:$r_port STOCKD_MYSQL=$MYSQL_URL "$STOCKD_BUILD/writer/stock-writer" \
    --consumer w1 >"$T/writer/log" 2>&1 &
  echo $! >"$T/writer/pid"
}

t_db
echo "s3cret-token" >"$T/token"
case $what in
limit)
  [[ $expect == exact ]] || fail "limit: only exact (the race is the experiment's row)"
  think=50000
  sql "UPDATE product SET stock = 20, per_user_limit = 1 WHERE id = 2"
  extra=()
  [[ $mode == redis-stock ]] && redis_stock_up
  for i in 1 2 3; do
    route=()
    if [[ $routing == owner ]]; then
      echo "peer-secret-$RANDOM$RANDOM" >"$T/secret"
      chmod 600 "$T/secret"
      route=(--route owner --peer-secret-file "$T/secret" --announce "127.0.0.1:$((PORT0 + i))"
        --route-members "/stockd/t/$STOCKD_TEST_NAME/members")
    fi
    t_stockd "$i" "$mode" --think-us "$think" "${extra[@]}" "${route[@]}"
  done
  if [[ $routing == owner ]]; then
    wait_until 20 eval '[[ $(curl -fsS "http://127.0.0.1:$((PORT0 + 1))/route/view" | jq ".members | length") == 3 ]]' ||
      fail "the view did not reach 3 members"
  fi
  pids=()
  for b in $(seq 0 29); do
    curl -sS -m 60 -o "$T/ans.$b" -w '%{http_code}' -H 'X-User: alice' \
      "http://127.0.0.1:$((PORT0 + 1 + b % 3))/stock/reduce?id=2" >"$T/code.$b" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  deducted=0 limited=0
  for b in $(seq 0 29); do
    a="$(cat "$T/code.$b") $(jq -r .result "$T/ans.$b" 2>/dev/null || echo '(no JSON)')"
    case $a in
    "200 deducted") deducted=$((deducted + 1)) ;;
    "409 limit_reached") limited=$((limited + 1)) ;;
    *) fail "request $b got '$a'" ;;
    esac
  done
  if [[ $mode == redis-stock ]]; then
    written() { [[ $(sql "SELECT COUNT(*) FROM orders WHERE product_id=2") == "$deducted" ]]; }
    wait_until 30 written || fail "the writer did not write the $deducted order(s): $(tail -5 "$T/writer/log")"
  fi
  alice=$(sql "SELECT COUNT(*) FROM orders WHERE product_id=2 AND user='alice'")
  echo "$mode x3: alice with a limit of 1 got $deducted units ($limited limit_reached); $alice orders"
  expect_eq "orders = deducted answers" "$deducted" "$alice"
  expect_eq "stock change = deducted answers" "$deducted" $((20 - $(stock 2)))
  if [[ $routing == owner ]]; then
    fwd=$(metric_sum stockd_route_forwarded_total $((PORT0 + 1)) $((PORT0 + 2)) $((PORT0 + 3)))
    echo "forwarded to the owner: $fwd"
    ((fwd > 0)) || fail "no deduction was forwarded: the test proves nothing about the forward"
  fi
  expect_eq "units sold to alice" 1 "$deducted"
  expect_eq "limit_reached answers" 29 "$limited"
  ;;
redis-reserve)
  # Mode redis-stock reserves in Redis (docs/orders.md): two instances (two expiry
  # threads) and the order writer; an hour of reserve_seconds, and the expiry brought
  # forward in the reservations' records below, as the zk row does in MariaDB's rows.
  sql "UPDATE product SET stock = 6, reserve_seconds = 3600 WHERE id = 2"
  redis_stock_up
  rc() { redis-cli -p "$r_port" "$@"; }
  for i in 1 2; do t_stockd "$i" redis-stock "${extra[@]}" --admin-token-file "$T/token"; done
  declare -A order
  for c in $(seq 1 6); do
    key=()
    ((c == 1)) && key=(-H "Idempotency-Key: k-c1") # the others: stockd's own i/<hex>/<n>
    a=$(curl -sS -m 30 -w ' %{http_code}' "${key[@]}" "http://127.0.0.1:$((PORT0 + 1 + c % 2))/stock/reduce?id=2&user=c$c")
    expect_eq "c$c reserves" "reserved 200" "$(jq -r .result <<<"${a% *}") ${a##* }"
    [[ $(jq -r .expires_at <<<"${a% *}") == 20*Z ]] || fail "no expires_at in $a"
    order[$c]=$(jq -r .order <<<"${a% *}")
  done
  expect_eq "c1's order is its key" k-c1 "${order[1]}"
  a=$(curl -sS -m 30 -H "Idempotency-Key: k-c1" "http://127.0.0.1:$((PORT0 + 1))/stock/reduce?id=2&user=c1")
  expect_eq "c1's key again: the same reservation" "reserved true" "$(jq -r '"\(.result) \(.replayed)"' <<<"$a")"
  expect_eq "a 7th customer" "409 sold_out" "$(curl -sS -o /dev/null -w '%{http_code} ' "http://127.0.0.1:$((PORT0 + 1))/stock/reduce?id=2&user=c7")sold_out"
  expect_eq "c1 pays in time" "200 paid" "$(post "/orders/${order[1]}/pay?user=c1")"
  expect_eq "c1 pays again" "409 not_reserved" "$(post "/orders/${order[1]}/pay?user=c1")"
  expect_eq "c3 pays c2's order" "403 not_your_order" "$(post "/orders/${order[2]}/pay?user=c3")"
  expect_eq "an unknown order" "404 not_found" "$(post "/orders/no-such-key/pay?user=c2")"
  # c2's order is stockd's own key (i/<hex>/<n>): its slashes cross nginx as they are.
  [[ ${order[2]} == i/*/* ]] || fail "c2's order is not stockd's own key: ${order[2]}"
  t_nginx 2
  expect_eq "c2 cancels through nginx" "200 cancelled" "$(PORT=$PORT0 post "/orders/${order[2]}/cancel?user=c2")"
  expect_eq "c2 cancels again" "409 not_reserved" "$(post "/orders/${order[2]}/cancel?user=c2")"
  expect_eq "Redis's count after one cancel" 1 "$(rc GET 'stockd:stock:{2}')"
  expect_eq "c2's units after the cancel" 0 "$(rc HGET 'stockd:users:{2}' c2)"
  # c3..c6 expire in a second by Redis's clock; once it has passed, c3 cancels and c4
  # pays, racing the two expiry threads (which release c5 and c6 as well).
  t=($(rc TIME))
  due=$((t[0] + 1))$(printf %06d "${t[1]}")
  for c in 3 4 5 6; do
    rc HSET "stockd:order:${order[$c]}" expires_us "$due" >/dev/null
    rc ZADD stockd:expiry "$due" "${order[$c]}" >/dev/null
  done
  past() { t=($(rc TIME)) && (($(printf '%d%06d' "${t[0]}" "${t[1]}") >= due)); }
  wait_until 10 past || fail "Redis's clock did not pass the expiry"
  PORT=$((PORT0 + 2)) post "/orders/${order[3]}/cancel?user=c3" >"$T/race.3" &
  p3=$!
  expect_eq "c4 pays late" "409 expired" "$(post "/orders/${order[4]}/pay?user=c4")"
  wait "$p3" || true
  a=$(cat "$T/race.3")
  [[ $a == "200 cancelled" || $a == "409 not_reserved" ]] || fail "c3's cancel racing the expiry: $a"
  echo "c3's cancel racing the expiry: $a"
  released() { [[ $(rc ZCARD stockd:expiry) == 0 ]]; }
  wait_until 20 released || fail "the expiry threads left $(rc ZCARD stockd:expiry) reservations"
  for c in 4 5 6; do expect_eq "c$c's reservation" expired "$(rc HGET "stockd:order:${order[$c]}" state)"; done
  expect_eq "c4's late payment changed nothing: paid" "409 expired" "$(post "/orders/${order[4]}/pay?user=c4")"
  expect_eq "Redis's count: 6 - 1 paid" 5 "$(rc GET 'stockd:stock:{2}')"
  # Every release once: 6 deductions and 6 changes (1 paid, 5 given back), no more.
  expect_eq "stream entries added" 12 "$(rc XINFO STREAM stockd:orders | awk 'p == "entries-added" { print; exit } { p = $0 }')"
  drained() { [[ $(sql "SELECT COUNT(*) FROM orders WHERE product_id=2 AND state <> 'reserved'") == 6 ]]; }
  wait_until 30 drained || fail "the writer did not write the 6 orders' states: $(tail -5 "$T/writer/log")"
  by_state="paid 1 cancelled 1 expired 4" # ENUM order; c3's cancel lost to the expiry
  [[ $a == "200 cancelled" ]] && by_state="paid 1 cancelled 2 expired 3"
  expect_eq "MariaDB: orders by state" "$by_state" \
    "$(sql "SELECT state, COUNT(*) FROM orders WHERE product_id=2 GROUP BY state ORDER BY state" | tr '\t\n' '  ' | sed 's/ $//')"
  expect_eq "given back once each, with released_at" 5 \
    "$(sql "SELECT COUNT(*) FROM orders WHERE product_id=2 AND state IN ('cancelled','expired') AND released_at IS NOT NULL")"
  expect_eq "MariaDB's stock = Redis's count" "$(rc GET 'stockd:stock:{2}')" "$(stock 2)"
  ledger_adds_up 2 6
  # --redis-wait-replicas with no replica: a reservation and its cancel are made on the
  # primary and answered 503 not_replicated, as a deduction is.
  t_stockd 3 redis-stock "${extra[@]}" --redis-wait-replicas 1 --redis-wait-ms 50
  a=$(curl -sS -m 30 -w ' %{http_code}' "http://127.0.0.1:$((PORT0 + 3))/stock/reduce?id=2&user=c8")
  expect_eq "c8 reserves, no replica" "not_replicated 503" "$(jq -r .result <<<"${a% *}") ${a##* }"
  o8=$(jq -r .order <<<"${a% *}")
  expect_eq "c8 cancels, no replica" "503 not_replicated" "$(PORT=$((PORT0 + 3)) post "/orders/$o8/cancel?user=c8")"
  expect_eq "c8's reservation" cancelled "$(rc HGET "stockd:order:$o8" state)"
  expect_eq "Redis's count after c8's cancel" 5 "$(rc GET 'stockd:stock:{2}')"
  # Restock there (MariaDB, then Redis) with a key: a replay adds nothing in either.
  restock_keyed 2 4 restock-redis-1
  expect_eq "Redis's count after a keyed restock and its replay" 9 "$(rc GET 'stockd:stock:{2}')"
  expect_eq "Redis's restocked units" 4 "$(rc GET 'stockd:restocked:{2}')"
  ;;
reserve)
  # An hour, so that nothing expires while the first checks run on a loaded machine; the
  # race below brings the expiry forward in the rows themselves.
  sql "UPDATE product SET stock = 10, reserve_seconds = 3600 WHERE id = 2"
  for i in 1 2 3; do t_stockd "$i" "$mode" --admin-token-file "$T/token"; done
  declare -A order
  pids=()
  for c in $(seq 1 10); do
    curl -sS -m 30 -w ' %{http_code}' "http://127.0.0.1:$((PORT0 + 1 + c % 3))/stock/reduce?id=2&user=c$c" >"$T/res.$c" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  for c in $(seq 1 10); do
    a=$(cat "$T/res.$c")
    [[ $a == *' 200' ]] || fail "c$c's reservation: $a"
    expect_eq "c$c's answer" reserved "$(jq -r .result <<<"${a% *}")"
    [[ $(jq -r .expires_at <<<"${a% *}") == 20*Z ]] || fail "no expires_at in $a"
    order[$c]=$(jq -r .order_id <<<"${a% *}")
  done
  expect_eq "stock after 10 reservations" 0 "$(stock 2)"
  expect_eq "an 11th customer" "409 sold_out" "$(curl -sS -o /dev/null -w '%{http_code} ' "http://127.0.0.1:$((PORT0 + 1))/stock/reduce?id=2&user=c11")sold_out"
  for c in 1 2 3; do expect_eq "c$c pays in time" "200 paid" "$(post "/orders/${order[$c]}/pay?user=c$c")"; done
  expect_eq "a second payment" "409 not_reserved" "$(post "/orders/${order[1]}/pay?user=c1")"
  expect_eq "c5 pays c4's order" "403 not_your_order" "$(post "/orders/${order[4]}/pay?user=c5")"
  expect_eq "a payment without a customer" "400 bad_request" "$(post "/orders/${order[4]}/pay")"
  expect_eq "an unknown order" "404 not_found" "$(post "/orders/999999999/pay?user=c4")"
  expect_eq "c4 cancels" "200 cancelled" "$(post "/orders/${order[4]}/cancel?user=c4")"
  expect_eq "c4 cancels again" "409 not_reserved" "$(post "/orders/${order[4]}/cancel?user=c4")"
  expect_eq "stock after one cancel" 1 "$(stock 2)"
  expect_eq "GET /stock: stock, reserved, paid, released after one cancel" "1 6 3 1" "$(units 2)"
  ledger_adds_up 2 10
  # The reservations left expire in a second; wait on the database's clock for it, then
  # race the expiry thread: three cancels (c5..c7) and three late payments (c8..c10).
  sql "UPDATE orders SET expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 SECOND WHERE product_id=2 AND state='reserved'"
  for _ in $(seq 100); do
    [[ $(sql "SELECT COUNT(*) FROM orders WHERE product_id=2 AND state='reserved' AND expires_at > UTC_TIMESTAMP(6)") == 0 ]] && break
    sleep 0.1
  done
  pids=()
  for c in 5 6 7 8 9 10; do
    ev=cancel
    ((c >= 8)) && ev=pay
    PORT=$((PORT0 + 1 + c % 3)) post "/orders/${order[$c]}/$ev?user=c$c" >"$T/race.$c" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  for c in 5 6 7; do
    a=$(cat "$T/race.$c")
    [[ $a == "200 cancelled" || $a == "409 not_reserved" ]] || fail "c$c's cancel racing the expiry: $a"
    echo "c$c's cancel racing the expiry: $a"
  done
  for c in 8 9 10; do expect_eq "c$c pays late" "409 expired" "$(cat "$T/race.$c")"; done
  for _ in $(seq 300); do
    [[ $(sql "SELECT COUNT(*) FROM orders WHERE product_id=2 AND state='reserved'") == 0 ]] && break
    sleep 0.1
  done
  expect_eq "reservations left" 0 "$(sql "SELECT COUNT(*) FROM orders WHERE product_id=2 AND state='reserved'")"
  expect_eq "paid" 3 "$(sql "SELECT COUNT(*) FROM orders WHERE product_id=2 AND state='paid'")"
  expect_eq "given back (cancelled + expired, each once)" 7 \
    "$(sql "SELECT COUNT(*) FROM orders WHERE product_id=2 AND state IN ('cancelled','expired') AND released_at IS NOT NULL")"
  expect_eq "stock after the expiry" 7 "$(stock 2)"
  expect_eq "GET /stock: stock, reserved, paid, released after the expiry" "7 0 3 7" "$(units 2)"
  ledger_adds_up 2 10
  expect_eq "restock 5" "200 restocked" "$(post "/stock/restock?id=2&units=5" -H "Authorization: Bearer s3cret-token")"
  expect_eq "stock after the restock" 12 "$(stock 2)"
  restock_keyed 2 4 "restock-$mode-1"
  ledger_adds_up 2 10
  ;;
auth)
  t_stockd 1 "$mode"
  t_stockd 2 "$mode" --admin-token-file "$T/token"
  PORT=$((PORT0 + 1))
  expect_eq "restock without --admin-token-file" "403 forbidden" "$(PORT=$((PORT0 + 1)) post "/stock/restock?id=2&units=5" -H "Authorization: Bearer s3cret-token")"
  PORT=$((PORT0 + 2))
  export PORT
  expect_eq "anonymous restock" "401 unauthorized" "$(post "/stock/restock?id=2&units=5")"
  expect_eq "a wrong token" "403 forbidden" "$(post "/stock/restock?id=2&units=5" -H "Authorization: Bearer s3cret-tokeN")"
  expect_eq "restock by GET" "405 method_not_allowed" "$(curl -sS -o /dev/null -w '%{http_code} ' "http://127.0.0.1:$PORT/stock/restock?id=2&units=5")method_not_allowed"
  for u in 0 -3 x 10000001; do
    expect_eq "units=$u" "400 bad_request" "$(post "/stock/restock?id=2&units=$u" -H "Authorization: Bearer s3cret-token")"
  done
  expect_eq "stock before a good restock" 100 "$(stock 2)"
  expect_eq "restock 5" "200 restocked" "$(post "/stock/restock?id=2&units=5" -H "Authorization: Bearer s3cret-token")"
  expect_eq "the answer's stock" 105 "$(jq -r .stock "$T/post.json")"
  expect_eq "an unknown product" "404 not_found" "$(post "/stock/restock?id=99&units=5" -H "Authorization: Bearer s3cret-token")"
  expect_eq "stock after" 105 "$(stock 2)"
  expect_eq "restock ledger" 5 "$(restocked 2)"
  restock_keyed 2 3 restock-auth-1
  # Five retries of one key at once, on the two instances with the token: one restock,
  # four replays (the product's lock orders them; the unique key catches the rest).
  t_stockd 3 "$mode" --admin-token-file "$T/token"
  pids=()
  for b in 1 2 3 4 5; do
    curl -sS -m 30 -X POST -o "$T/retry.$b" -H "Authorization: Bearer s3cret-token" \
      -H "Idempotency-Key: restock-auth-2" "http://127.0.0.1:$((PORT0 + 2 + b % 2))/stock/restock?id=2&units=7" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  expect_eq "five retries of one key: answers" "5 restocked, 4 replayed" \
    "$(cat "$T"/retry.? | jq -rs '"\(map(select(.result == "restocked")) | length) restocked, \(map(select(.replayed == true)) | length) replayed"')"
  expect_eq "stock after five retries of one key" 115 "$(stock 2)"
  expect_eq "restock ledger after five retries of one key" 15 "$(restocked 2)"
  ;;
*) fail "unknown scenario $what" ;;
esac
echo PASS
