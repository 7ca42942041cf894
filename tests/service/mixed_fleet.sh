#!/usr/bin/env bash
# mixed_fleet.sh: the articles' own design beside stockd on one lock. Two stockd (mode zk)
# and the articles' Java service (ArticlesService.java: Curator's InterProcessMutex and
# MariaDB's JDBC driver, the read-check-update under the lock) behind one nginx
# round-robin, one product, one lock path, the articles' /product_{id}. Every side pauses
# inside the lock, so two holders at once would oversell. The stock must end at exactly
# 0, the deducted answers equal the orders, and every implementation has orders in the
# ledger. On a stockd that does not queue behind Curator's nodes it oversells.
source "$STOCKD_SRC/tests/lib.sh"
units=60 requests=150 id=3

t_db
sql "UPDATE product SET stock=$units WHERE id=$id"
t_stockd 1 zk --zk-lock-path '/product_{id}' --think-us 2000
t_stockd 2 zk --zk-lock-path '/product_{id}' --think-us 2000
mkdir -p "$T/java"
cp=$(printf '/usr/share/java/%s.jar:' curator-client curator-framework curator-recipes zookeeper \
  zookeeper-jute guava slf4j-api slf4j-nop mariadb-java-client)
java -cp "$cp" "$STOCKD_SRC/tests/service/ArticlesService.java" $((PORT0 + 3)) "$STOCKD_TEST_ZK" \
  '/product_{id}' "jdbc:mariadb://127.0.0.1:$STOCKD_TEST_MYSQL_PORT/$DB?user=$DB_USER&password=$DB_PASS" \
  java-articles 2 >"$T/java/log" 2>&1 &
echo $! >"$T/java/pid"
wait_until 120 grep -q ready "$T/java/log" || fail "the Java service did not start: $(tail -5 "$T/java/log")"
t_nginx 3

seq "$requests" | xargs -P 24 -I{} curl -sS -o "$T/a.{}" "http://127.0.0.1:$PORT0/stock/reduce?id=$id"
deducted=$(cat "$T"/a.* | jq -r .result | grep -c '^deducted$' || true)
echo "answers: $(cat "$T"/a.* | jq -r .result | sort | uniq -c | xargs)"
echo "orders by instance: $(sql "SELECT instance, COUNT(*) FROM orders WHERE product_id=$id GROUP BY instance" | xargs)"
expect_eq "final stock" 0 "$(stock "$id")"
expect_eq "orders" "$units" "$(orders "$id")"
expect_eq "deducted answers" "$units" "$deducted"
for who in stockd-1 stockd-2 java-articles; do
  n=$(sql "SELECT COUNT(*) FROM orders WHERE product_id=$id AND instance='$who'")
  ((n > 0)) || fail "$who has no order in the ledger"
done
alive 1
alive 2
echo "ok: mixed fleet ends at 0 with $units orders"
