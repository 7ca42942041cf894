#!/usr/bin/env bash
# Owner routing (--route owner, docs/routing.md) on real instances.
#   route_owner.sh CASE
#   zk        3 instances of mode zk behind the test nginx (round-robin), membership in
#             ZooKeeper: every instance sees the same view of 3 members; a hot product
#             under load ends at exactly 0 with the ledger reconciled; deductions were
#             forwarded in frames of more than one on average, and every order was
#             written by the product's owner.
#   refused   the peer endpoint without the secret (none, wrong) is 403; bad frames with
#             it are 400; nothing is deducted by any of them; a good frame is served; a
#             client that sends X-Stockd-Hop itself is served where it lands.
#   pingpong  2 instances (mode for-update, static --peers) with views forced apart by
#             --route-pin: product 2 is B's for A and A's for B (a ping-pong), product 4
#             is its own for each (two owners). Every deduction of 2 is forwarded once
#             and served where it lands (a refused hop), never bounced back; both
#             products end exact.
#   dropped   the owner's answer is lost after its COMMIT: A forwards product 3 to B
#             through a relay (the fault proxy), B's COMMIT is held at its MySQL relay,
#             the A-B connection is cut meanwhile; A serves the deduction again under the
#             same request id and the ledger has exactly one order for it: the id A
#             made (dropped), or the client's Idempotency-Key (dropped-key).
#   dropped-nodb  as dropped-key, and A's own MySQL is gone (its relay stopped) before the
#             cut, so A cannot serve it again: A answers 500 unknown, never a 503 that
#             says nothing was deducted (B's order exists); asked again with the same key
#             once A's MySQL is back, it answers B's order, replayed.
source "$STOCKD_SRC/tests/lib.sh"
case_=${1:?case}

t_db
echo "peer-secret-$RANDOM$RANDOM" >"$T/secret"
chmod 600 "$T/secret"
secret=$(cat "$T/secret")
members=/stockd/t/$STOCKD_TEST_NAME/members
addr() { echo "127.0.0.1:$((PORT0 + $1))"; }
route_args=(--route owner --peer-secret-file "$T/secret")

# frame JSON: POST it to /peer/frame of instance 1 with the secret; prints the status.
frame() {
  curl -sS -m 30 -o "$T/frame.out" -w '%{http_code}' -H "X-Stockd-Peer-Secret: $secret" \
    -H 'Content-Type: application/json' --data-binary "$1" "http://$(addr 1)/peer/frame"
}

case $case_ in
zk)
  for i in 1 2 3; do
    t_stockd "$i" zk "${route_args[@]}" --route-members "$members" --announce "$(addr "$i")"
  done
  t_nginx 3
  wait_until 20 eval '[[ $(curl -fsS "http://$(addr 1)/route/view" | jq ".members | length") == 3 &&
    $(curl -fsS "http://$(addr 3)/route/view" | jq ".members | length") == 3 ]]' ||
    fail "the view did not reach 3 members: $(curl -sS "http://$(addr 1)/route/view")"
  v1=$(curl -fsS "http://$(addr 1)/route/view" | jq .view)
  v3=$(curl -fsS "http://$(addr 3)/route/view" | jq .view)
  expect_eq "view number, instance 1 and 3" "$v1" "$v3"
  owner=$(curl -fsS "http://$(addr 2)/route/owner?id=1" | jq -r .owner)
  for i in 1 3; do
    expect_eq "owner of product 1 at instance $i" "$owner" \
      "$(curl -fsS "http://$(addr "$i")/route/owner?id=1" | jq -r .owner)"
  done
  sql "DELETE FROM orders WHERE product_id = 1; UPDATE product SET stock = 300 WHERE id = 1"
  "$STOCKLOAD_BIN" --url "http://127.0.0.1:$PORT0/stock/reduce?id=1" --threads 60 --loops 6 \
    --json --no-progress --mysql "$MYSQL_URL" --product 1 >"$T/load.json" || (($? == 1))
  expect_eq "final stock" 0 "$(stock 1)"
  expect_eq "orders" 300 "$(orders 1)"
  expect_eq "reconciliation" ok "$(jq -r .reconciliation.verdict "$T/load.json")"
  targets=("$(addr 1)" "$(addr 2)" "$(addr 3)")
  fwd=$(metric_sum stockd_route_forwarded_total "${targets[@]/#/http://}")
  frames=$(metric_sum stockd_route_frames_total "${targets[@]/#/http://}")
  got=$(metric_sum stockd_route_frame_deductions_total "${targets[@]/#/http://}")
  fallbacks=$(metric_sum stockd_route_local_fallbacks_total "${targets[@]/#/http://}")
  echo "forwarded $fwd deductions in $frames frames ($got received), $fallbacks local fallbacks"
  ((fwd > 0 && frames > 0)) || fail "nothing was forwarded"
  ((fwd > frames)) || fail "frames carried one deduction each ($fwd in $frames): no batching"
  expect_eq "local fallbacks" 0 "$fallbacks"
  expect_eq "deductions received = forwarded" "$fwd" "$got"
  owner_name=stockd-$((${owner##*:} - PORT0))
  expect_eq "orders not written by the owner $owner_name" 0 \
    "$(sql "SELECT COUNT(*) FROM orders WHERE product_id = 1 AND instance <> '$owner_name'")"
  ;;
refused)
  t_stockd 1 for-update "${route_args[@]}" --peers "$(addr 1)"
  before=$(stock 3)
  good='{"entries":[{"request":{"method":"GET","path":"/stock/reduce","params":[["id","3"]],"headers":[]},"request_id":"route-good-1","deadline_ms":5000}]}'
  code=$(curl -sS -m 10 -o "$T/out" -w '%{http_code}' --data-binary "$good" "http://$(addr 1)/peer/frame")
  expect_eq "no secret: status" 403 "$code"
  expect_eq "no secret: result" forbidden "$(jq -r .result "$T/out")"
  code=$(curl -sS -m 10 -o "$T/out" -w '%{http_code}' -H 'X-Stockd-Peer-Secret: wrong' \
    --data-binary "$good" "http://$(addr 1)/peer/frame")
  expect_eq "wrong secret: status" 403 "$code"
  code=$(curl -sS -m 10 -o "$T/out" -w '%{http_code}' -H "X-Stockd-Peer-Secret: ${secret}x" \
    --data-binary "$good" "http://$(addr 1)/peer/frame")
  expect_eq "secret with one byte more: status" 403 "$code"
  for bad in 'not json' '{}' '{"entries":[]}' '{"entries":[1]}' \
    '{"entries":[{"request":{"method":"GET","path":"/stock/reduce","params":[["id","3"]],"headers":[]}}]}' \
    '{"entries":[{"request":{"method":"GET","path":"/stock/reduce","params":[["id",3]],"headers":[]},"request_id":"k1"}]}' \
    '{"entries":[{"request":{"method":"GET","path":"/stock/reduce","params":[["id","3"]],"headers":[]},"request_id":"bad key!"}]}' \
    '{"entries":[{"request":{"method":"GET","path":"/stock/reduce","params":[["id","3"]],"headers":[]},"request_id":"k2","deadline_ms":-5}]}' \
    '{"entries":[{"request":{"method":"GET","path":"/stock/reduce","params":[["id","3"]],"headers":[]},"request_id":"k3"},{"request":"x","request_id":"k4"}]}'; do
    expect_eq "bad frame '$bad': status" 400 "$(frame "$bad")"
  done
  expect_eq "stock after refused and bad frames" "$before" "$(stock 3)"
  expect_eq "orders after refused and bad frames" 0 "$(orders 3)"
  expect_eq "good frame: status" 200 "$(frame "$good")"
  expect_eq "good frame: the entry's answer" "200 deducted" \
    "$(jq -r '.answers[0] | "\(.status) \(.body | fromjson | .result)"' "$T/frame.out")"
  expect_eq "good frame: one order under its id" 1 \
    "$(sql "SELECT COUNT(*) FROM orders WHERE request_id = 'route-good-1'")"
  # A client's own hop header: served here, as without it.
  expect_eq "a client's X-Stockd-Hop" "200 deducted" "$(reduce "$(addr 1)" 3 -H 'X-Stockd-Hop: 1')"
  ;;
pingpong)
  peers=$(addr 1),$(addr 2)
  t_stockd 1 for-update "${route_args[@]}" --peers "$peers" --route-pin "2=$(addr 2),4=$(addr 1)"
  t_stockd 2 for-update "${route_args[@]}" --peers "$peers" --route-pin "2=$(addr 1),4=$(addr 2)"
  loads=()
  sql "UPDATE product SET stock = 60 WHERE id IN (2, 4)"
  for p in 2 4; do
    for i in 1 2; do
      "$STOCKLOAD_BIN" --url "http://$(addr "$i")/stock/reduce?id=$p" --threads 10 --loops 3 \
        --json --no-progress >"$T/load.$p.$i.json" &
      loads+=($!)
    done
  done
  wait "${loads[@]}"
  for p in 2 4; do
    expect_eq "product $p: final stock" 0 "$(stock "$p")"
    expect_eq "product $p: orders" 60 "$(orders "$p")"
  done
  for i in 1 2; do
    expect_eq "instance $i: forwarded (product 2's 30 requests, each once)" 30 \
      "$(metric_sum stockd_route_forwarded_total "http://$(addr "$i")")"
    expect_eq "instance $i: refused hops (the other's 30, served here)" 30 \
      "$(metric_sum stockd_route_refused_hops_total "http://$(addr "$i")")"
  done
  # Product 4 had two owners: both sold it, and the row lock kept it exact.
  expect_eq "product 4: instances that sold it" 2 \
    "$(sql "SELECT COUNT(DISTINCT instance) FROM orders WHERE product_id = 4")"
  ;;
dropped | dropped-key | dropped-nodb)
  mysql_relay=$((PORT0 + 10)) peer_relay=$((PORT0 + 11)) a_relay=$((PORT0 + 12))
  # A's own MySQL through a relay of its own, stopped in dropped-nodb.
  a_mysql() {
    mkdir -p "$T/arelay"
    "$FAULT_PROXY_BIN" --listen "$a_relay" --upstream "127.0.0.1:$STOCKD_TEST_MYSQL_PORT" \
      >"$T/arelay/log" 2>&1 &
    echo $! >"$T/arelay/pid"
    wait_until 10 grep -q ready "$T/arelay/log" || fail "A's MySQL relay did not start"
  }
  a_mysql
  mkdir -p "$T/mrelay" "$T/prelay"
  "$FAULT_PROXY_BIN" --listen "$mysql_relay" --proto mysql \
    --upstream "127.0.0.1:$STOCKD_TEST_MYSQL_PORT" --hold-commit 1 --hold-s 4 >"$T/mrelay/log" 2>&1 &
  echo $! >"$T/mrelay/pid"
  "$FAULT_PROXY_BIN" --listen "$peer_relay" --upstream "$(addr 2)" --control "$T/prelay/ctl" \
    >"$T/prelay/log" 2>&1 &
  echo $! >"$T/prelay/pid"
  wait_until 10 grep -q ready "$T/mrelay/log" || fail "the MySQL relay did not start"
  wait_until 10 grep -q ready "$T/prelay/log" || fail "the peer relay did not start"
  peers=$(addr 1),$(addr 2)
  stockd_start "$T" 1 $((PORT0 + 1)) for-update "mysql://$DB_USER@127.0.0.1:$a_relay/$DB" \
    "$STOCKD_TEST_ZK" "${route_args[@]}" --peers "$peers" --route-pin "3=127.0.0.1:$peer_relay"
  stockd_start "$T" 2 $((PORT0 + 2)) for-update "mysql://$DB_USER@127.0.0.1:$mysql_relay/$DB" \
    "$STOCKD_TEST_ZK" "${route_args[@]}" --peers "$peers" --route-pin "3=$(addr 2)"
  before=$(stock 3)
  # Without a key, A makes the id (i/<boot>/<seq>) and it travels in the frame.
  key=() where="product_id = 3"
  [[ $case_ != dropped ]] && key=(-H 'Idempotency-Key: route-dropped-1') where="request_id = 'route-dropped-1'"
  curl -sS -m 40 -o "$T/ans" -w '%{http_code}' "${key[@]}" \
    "http://$(addr 1)/stock/reduce?id=3" >"$T/code" &
  ask=$!
  wait_until 20 grep -q "holding COMMIT" "$T/mrelay/log" || fail "B's COMMIT was not held"
  [[ $case_ == dropped-nodb ]] && stop_pidfile "$T/arelay/pid" 10
  echo cut >"$T/prelay/ctl.tmp" && mv "$T/prelay/ctl.tmp" "$T/prelay/ctl"
  wait_until 10 grep -q "control: cut" "$T/prelay/log" || fail "the relay did not cut"
  wait "$ask"
  if [[ $case_ == dropped-nodb ]]; then
    expect_eq "A's answer without its MySQL" "500 unknown" "$(cat "$T/code") $(jq -r .result "$T/ans")"
    wait_until 20 grep -q "released COMMIT" "$T/mrelay/log" || fail "B's COMMIT was not released"
    expect_eq "orders ($where), B's" 1 "$(sql "SELECT COUNT(*) FROM orders WHERE $where")"
    a_mysql
    curl -sS -m 40 -o "$T/ans" -w '%{http_code}' "${key[@]}" "http://$(addr 1)/stock/reduce?id=3" >"$T/code"
  fi
  expect_eq "A's answer" "200 deducted" "$(cat "$T/code") $(jq -r .result "$T/ans")"
  expect_eq "A's answer is B's order, replayed" true "$(jq -r .replayed "$T/ans")"
  expect_eq "orders ($where)" 1 "$(sql "SELECT COUNT(*) FROM orders WHERE $where")"
  expect_eq "the order's instance" stockd-2 "$(sql "SELECT instance FROM orders WHERE $where")"
  [[ $case_ != dropped ]] || [[ $(sql "SELECT request_id FROM orders WHERE $where") == i/* ]] ||
    fail "the order's id is not the id A made: $(sql "SELECT request_id FROM orders WHERE $where")"
  expect_eq "stock" $((before - 1)) "$(stock 3)"
  expect_eq "A's local fallbacks" 1 "$(metric_sum stockd_route_local_fallbacks_total "http://$(addr 1)")"
  ;;
*) fail "unknown case $case_" ;;
esac
echo "ok: route_owner $case_"
