#!/usr/bin/env bash
# The MariaDB image's first start (python3 -m lab.container mariadb), run outside a
# container on this test's own port and run directory: from an empty volume it must
# make the seeded `shop` and a service user `stockd`@'%' that logs in over TCP with the
# password from the environment and can do exactly what stockd needs (read and update
# product, read and insert orders, nothing else); root must not log in over TCP. A
# second start on the same volume keeps the data, and an empty password stops the
# first start before any database is made.
source "$STOCKD_SRC/tests/lib.sh"

port=$((PORT0 + 15))
# The entrypoint's settings: its run directory is $T, so t_cleanup stops the server
# it leaves there ($T/mysql/pid) when the test exits.
export STOCKD_RUN=$T STOCKD_MYSQL_PORT=$port STOCKD_MYSQL_BIND=127.0.0.1
export PYTHONPATH=$STOCKD_SRC
# A password with the characters SQL quoting must survive.
export STOCKD_MYSQL_PASSWORD="it's a \\ test"

# entrypoint LOG: runs the entrypoint in the background until the server answers on
# TCP (mariadb-admin ping answers even without credentials).
entrypoint() {
  /usr/bin/python3 -m lab.container mariadb >"$T/$1" 2>&1 &
  wait_until 90 mariadb-admin --no-defaults --connect-timeout=2 -h 127.0.0.1 -P "$port" \
    -u healthcheck ping || fail "the entrypoint's server did not answer: $(tail -n 20 "$T/$1")"
}

# Without a password the first start stops, and leaves no database behind.
if STOCKD_MYSQL_PASSWORD='' /usr/bin/python3 -m lab.container mariadb >"$T/nopw.log" 2>&1; then
  fail "the entrypoint started without STOCKD_MYSQL_PASSWORD"
fi
grep -q STOCKD_MYSQL_PASSWORD "$T/nopw.log" || fail "unclear error without the password: $(cat "$T/nopw.log")"
[[ ! -e $T/mysql/data ]] || fail "an empty password left a datadir behind"
echo "ok: an empty STOCKD_MYSQL_PASSWORD stops the first start"

entrypoint first.log
expect_eq "seeded products" 4 "$(mysql_cli "$T" -N -B shop -e 'SELECT COUNT(*) FROM product')"
# The server lists a grant's columns in no fixed order: put them in name order.
grants=$(mysql_cli "$T" -N -B -e "SHOW GRANTS FOR 'stockd'@'%'" | sed 's/ IDENTIFIED BY.*//' |
  sed 's/UPDATE (`state`, `released_at`)/UPDATE (`released_at`, `state`)/' | sort)
want=$(sort <<'GRANTS'
GRANT SELECT, INSERT, UPDATE (`released_at`, `state`) ON `shop`.`orders` TO `stockd`@`%`
GRANT SELECT, INSERT ON `shop`.`oversold_promise` TO `stockd`@`%`
GRANT SELECT, INSERT ON `shop`.`restock` TO `stockd`@`%`
GRANT SELECT, INSERT, UPDATE (`expires_at`), DELETE ON `shop`.`stock_lock` TO `stockd`@`%`
GRANT SELECT, UPDATE ON `shop`.`product` TO `stockd`@`%`
GRANT SELECT, UPDATE ON `shop`.`product_segment` TO `stockd`@`%`
GRANT SELECT ON `shop`.`product_stock` TO `stockd`@`%`
GRANT USAGE ON *.* TO `stockd`@`%`
GRANTS
)
expect_eq "grants of stockd@%" "$want" "$grants"
expect_eq "root accounts" "localhost" \
  "$(mysql_cli "$T" -N -B -e "SELECT Host FROM mysql.global_priv WHERE User='root'")"
if mariadb --no-defaults -h 127.0.0.1 -P "$port" -u root -e 'select 1' 2>/dev/null; then
  fail "root logs in over TCP without a password"
fi
echo "ok: root does not log in over TCP"

# as_stockd SQL: runs SQL over TCP as the service user, password from the environment.
as_stockd() {
  MYSQL_PWD=$STOCKD_MYSQL_PASSWORD mariadb --no-defaults -h 127.0.0.1 -P "$port" -u stockd \
    -N -B shop -e "$1"
}
expect_eq "stockd reads stock" 100 "$(as_stockd 'SELECT stock FROM product WHERE id=2')"
as_stockd "UPDATE product SET stock = stock - 1 WHERE id = 2;
           INSERT INTO orders (product_id, instance) VALUES (2, 'initdb-test')"
expect_eq "stockd deducts and records" "99 1" \
  "$(as_stockd "SELECT CONCAT((SELECT stock FROM product WHERE id=2), ' ', COUNT(*)) FROM orders")"
for q in "DELETE FROM orders" "UPDATE orders SET instance='x'" "INSERT INTO product VALUES (9,'x',1,0)" \
  "DROP TABLE orders" "CREATE TABLE t (i INT)"; do
  if as_stockd "$q" 2>/dev/null; then fail "stockd may run: $q"; fi
  echo "ok: stockd may not run: $q"
done

# A restart on the same volume (the container restarted) keeps the data.
stop_pidfile "$T/mysql/pid" 60
entrypoint second.log
grep -q 'first start' "$T/second.log" && fail "the second start initialised the database again"
expect_eq "stock after a restart" 99 "$(as_stockd 'SELECT stock FROM product WHERE id=2')"
