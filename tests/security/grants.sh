#!/usr/bin/env bash
# The service's MySQL user can do what a deduction needs and nothing more: read and
# update product and its segments (product_segment; the product_stock view is read
# only), read and add orders and oversold promises (the order writer of mode
# redis-stock records the entries MariaDB had no stock for), move an order's state and
# released_at (pay, cancel, expiry) and no other column of it, add restocks, take and
# give back a row of
# the lock table stock_lock
# (the db-lock mode) and move its expiry (the db-lock watchdog, --lease-renew), no
# other column of it. Checked twice: by what SHOW GRANTS lists for
# stockd@127.0.0.1 (and @localhost), and by what the server refuses when stockd tries it
# over TCP, as the service connects. The shared test server holds a database per test,
# each granted to the same user, so every grant line must have one of the allowed shapes
# and this test's database must have exactly its seven.
source "$STOCKD_SRC/tests/lib.sh"

t_db

# as_stockd SQL: runs SQL as the service user over TCP in this test's database.
as_stockd() {
  MYSQL_PWD=$DB_PASS mariadb --no-defaults -h 127.0.0.1 -P "$STOCKD_TEST_MYSQL_PORT" \
    -u "$DB_USER" -N -B "$DB" -e "$1"
}

for host in 127.0.0.1 localhost; do
  mysql_cli "$STOCKD_TEST_RUN" -N -B -e "SHOW GRANTS FOR '$DB_USER'@'$host'" >"$T/grants" ||
    fail "SHOW GRANTS for $DB_USER@$host"
  # The server lists a grant's columns in no fixed order: put them in name order.
  sed -e "s/ IDENTIFIED BY PASSWORD '[^']*'//" \
    -e 's/UPDATE (`state`, `released_at`)/UPDATE (`released_at`, `state`)/' "$T/grants" >"$T/grants.norm"
  while IFS= read -r g; do
    case $g in
    "GRANT USAGE ON *.* TO \`$DB_USER\`@\`$host\`") ;;
    "GRANT SELECT, UPDATE ON \`"*"\`.\`product\` TO \`$DB_USER\`@\`$host\`") ;;
    "GRANT SELECT, UPDATE ON \`"*"\`.\`product_segment\` TO \`$DB_USER\`@\`$host\`") ;;
    "GRANT SELECT ON \`"*"\`.\`product_stock\` TO \`$DB_USER\`@\`$host\`") ;;
    "GRANT SELECT, INSERT, UPDATE (\`released_at\`, \`state\`) ON \`"*"\`.\`orders\` TO \`$DB_USER\`@\`$host\`") ;;
    "GRANT SELECT, INSERT ON \`"*"\`.\`restock\` TO \`$DB_USER\`@\`$host\`") ;;
    "GRANT SELECT, INSERT ON \`"*"\`.\`oversold_promise\` TO \`$DB_USER\`@\`$host\`") ;;
    "GRANT SELECT, INSERT, UPDATE (\`expires_at\`), DELETE ON \`"*"\`.\`stock_lock\` TO \`$DB_USER\`@\`$host\`") ;;
    *) fail "unexpected grant for $DB_USER@$host: $g" ;;
    esac
  done <"$T/grants.norm"
  mine=$(grep -F "ON \`$DB\`." "$T/grants.norm" | sort | sed "s/ TO .*//" | paste -sd '|')
  want=$(printf '%s\n' "GRANT SELECT, INSERT, UPDATE (\`released_at\`, \`state\`) ON \`$DB\`.\`orders\`" \
    "GRANT SELECT, INSERT ON \`$DB\`.\`restock\`" \
    "GRANT SELECT, INSERT ON \`$DB\`.\`oversold_promise\`" \
    "GRANT SELECT, INSERT, UPDATE (\`expires_at\`), DELETE ON \`$DB\`.\`stock_lock\`" \
    "GRANT SELECT, UPDATE ON \`$DB\`.\`product\`" \
    "GRANT SELECT, UPDATE ON \`$DB\`.\`product_segment\`" \
    "GRANT SELECT ON \`$DB\`.\`product_stock\`" | sort | paste -sd '|')
  expect_eq "grants on $DB for $DB_USER@$host" "$want" "$mine"
done
anon=$(mysql_cli "$STOCKD_TEST_RUN" -N -B -e "SELECT COUNT(*) FROM mysql.user WHERE user=''")
expect_eq "anonymous MySQL accounts" 0 "$anon"

# What a deduction does is allowed (the INSERT is rolled back).
expect_eq "SELECT product" 1 "$(as_stockd 'SELECT stock FROM product WHERE id=1')"
as_stockd 'UPDATE product SET stock = stock WHERE id = 1' || fail "stockd may not UPDATE product"
as_stockd 'UPDATE product_segment SET stock = stock WHERE product_id = 1' ||
  fail "stockd may not UPDATE product_segment"
expect_eq "SELECT product_stock" 1 "$(as_stockd 'SELECT stock FROM product_stock WHERE id=1')"
as_stockd "START TRANSACTION; INSERT INTO orders (product_id, instance, fence, request_id)
  VALUES (1, 'grants-test', 0, 'grants-test'); ROLLBACK" || fail "stockd may not INSERT orders"
expect_eq "orders after the rolled-back INSERT" 0 "$(as_stockd 'SELECT COUNT(*) FROM orders')"
as_stockd "START TRANSACTION; INSERT INTO oversold_promise (request_id, product_id, instance, reason)
  VALUES ('grants-test', 1, 'grants-test', 'sold_out'); ROLLBACK" ||
  fail "stockd may not INSERT oversold_promise"
as_stockd "INSERT INTO stock_lock (name, owner, expires_at) VALUES ('grants-test', 'grants-test',
  UTC_TIMESTAMP(6)); UPDATE stock_lock SET expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 SECOND
  WHERE name = 'grants-test'; DELETE FROM stock_lock WHERE name = 'grants-test'" ||
  fail "stockd may not take, renew and give back a stock_lock row"
echo "ok: stockd may read and update product, read and add orders and oversold promises, take, renew and give back a lock row"

# Everything else is refused.
refused=(
  "DELETE FROM orders"
  "DELETE FROM oversold_promise"
  "UPDATE orders SET instance = 'x'"
  "UPDATE orders SET user = 'x'"
  "DELETE FROM restock"
  "UPDATE restock SET units = 1"
  "INSERT INTO product (id, product_name, stock, fence) VALUES (99, 'x', 1, 0)"
  "DELETE FROM product"
  "INSERT INTO product_segment (product_id, seg, stock) VALUES (1, 1, 100)"
  "DELETE FROM product_segment"
  "UPDATE product_stock SET stock = 0"
  "UPDATE stock_lock SET owner = 'x'"
  "UPDATE stock_lock SET token = token + 1"
  "DROP TABLE product"
  "TRUNCATE TABLE orders"
  "ALTER TABLE product ADD COLUMN x INT"
  "CREATE TABLE evil (id INT)"
  "CREATE DATABASE evil"
  "SELECT user, password FROM mysql.user"
  "SELECT stock FROM product INTO OUTFILE '/tmp/stockd-grants-test'"
  "GRANT SELECT ON \`$DB\`.product TO '$DB_USER'@'127.0.0.1'"
  "CREATE USER 'evil'@'%'"
  "SET GLOBAL max_connections = 1"
)
for q in "${refused[@]}"; do
  if as_stockd "$q" >"$T/out" 2>"$T/err"; then fail "stockd may: $q"; fi
  grep -qiE 'denied|command denied|privilege' "$T/err" || fail "'$q' failed, but not as refused: $(cat "$T/err")"
  echo "ok: refused: $q"
done
# Without the FILE privilege LOAD_FILE reads nothing (it answers NULL, not an error).
expect_eq "LOAD_FILE('/etc/passwd') is NULL" 1 "$(as_stockd "SELECT LOAD_FILE('/etc/passwd') IS NULL")"
expect_eq "product rows unchanged" 4 "$(sql 'SELECT COUNT(*) FROM product')"
echo "PASS"
