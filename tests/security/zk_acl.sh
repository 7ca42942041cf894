#!/usr/bin/env bash
# ZooKeeper digest ACLs (issue 16, defect 12). stockd with STOCKD_ZK_AUTH=USER:PASSWORD
# adds digest auth and makes its lock nodes (the root, the container parents, the
# ephemeral-sequential nodes) creator-only. The test runs in a chroot of its own on the
# shared ZooKeeper (HOSTS/t_zk_acl_...), so nothing it closes touches other tests.
#   - the lock root exists already with an open ACL (made before auth was on);
#   - while instance 4 holds product 2's lock (3 s think time), tests/security/
#     zk_acl_probe (the C client) finds the root, the parent and the held node limited
#     to a digest identity, and neither a client without auth nor one of another
#     identity may list the parent, add a child to it, delete the held node or the
#     parent, or add a lock parent of its own: NOAUTH each time; the holder's deduction
#     then completes;
#   - three instances with auth under the oversell load behind nginx: exactly 0 stock
#     left, and the ledger matches.
source "$STOCKD_SRC/tests/lib.sh"
# The chroot is its own, and the probe reads stockd's default lock path there.
unset STOCKD_ZK_LOCK_PATH
probe=${1:?the zk_acl_probe binary}

t_db
chroot=/t_zk_acl_$$_$RANDOM
# The lock root exists already, open to all, as on a ZooKeeper that stockd used before
# auth was turned on: stockd must close it too.
for p in "$chroot" "$chroot/stock" "$chroot/stock/locks"; do
  "$probe" mkpath "$STOCKD_TEST_ZK" "$p" || fail "cannot make $p"
done
STOCKD_TEST_ZK=$STOCKD_TEST_ZK$chroot
auth=stockd:$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
export STOCKD_ZK_AUTH=$auth

t_stockd 4 zk --think-us 3000000 --batch-max 1
grep -q -- "${auth#*:}" "/proc/$(cat "$T/stockd/4.pid")/cmdline" && fail "the secret is in argv"
curl -sS -m 30 -o "$T/held.body" -w '%{http_code}' "http://127.0.0.1:$((PORT0 + 4))/stock/reduce?id=2" >"$T/held.code" &
held=$!
wait_until 10 holding 4 || fail "stockd-4 never took the lock"
"$probe" probe "$STOCKD_TEST_ZK" "$auth" product_2 | tee "$T/probe" || fail "the ACL let an intruder in (above)"
wait "$held"
grep -q 'zookeeper digest ACL' "$T/stockd/4.log" || fail "stockd-4 does not say it uses the ACL: $(cat "$T/stockd/4.log")"
expect_eq "the holder's deduction" "200 deducted" "$(cat "$T/held.code") $(jq -r .result "$T/held.body")"
stockd_stop "$T" 4

for i in 1 2 3; do t_stockd "$i" zk --think-us 1000; done
t_nginx 3
"$STOCKD_SRC/loadtest/oversell" --url "http://127.0.0.1:$PORT0" --run "$STOCKD_TEST_RUN" \
  --db "$DB" --mysql "$MYSQL_URL" --label "zk with digest ACL x3" --tool stockload | tee "$T/out"
res=$(grep '^RESULT ' "$T/out") || fail "no RESULT line"
get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$res"; }
expect_eq "ledger (answers = orders = stock change)" ok "$(get ledger)"
expect_eq "final stock" 0 "$(get final)"
expect_eq "orders" "$(get initial)" "$(get orders)"
