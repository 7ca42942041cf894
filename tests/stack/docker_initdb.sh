#!/usr/bin/env bash
# The MariaDB init files of docker-compose.yml, run the way the official image runs
# them on an empty volume (in name order; .sql into MARIADB_DATABASE, .sh sourced with
# the entrypoint's helpers), against a real MariaDB of this test's own. The result must
# be the seeded `shop` and a service user `stockd`@'%' that logs in with the password
# from the environment and can do exactly what stockd needs: read and update product,
# read and insert orders, nothing else.
source "$STOCKD_SRC/tests/lib.sh"

port=$((PORT0 + 15))
mysql_start "$T" "$port"
export MARIADB_DATABASE=shop
# A password with the characters SQL quoting must survive.
export STOCKD_MYSQL_PASSWORD="it's a \\ test"

# The entrypoint's helpers that the init script uses, over this test's root socket.
docker_process_sql() { mysql_cli "$T" "$@"; }
docker_sql_escape_string_literal() {
  local s=${1//\\/\\\\}
  printf '%s' "${s//\'/\\\'}"
}
mysql_error() { fail "init script: $*"; }

# The init files and their order come from the resolved compose file.
mapfile -t init < <(STOCKD_MYSQL_PASSWORD=x docker-compose -f "$STOCKD_SRC/docker-compose.yml" \
  --project-directory "$STOCKD_SRC" config |
  /usr/bin/python3 -c '
import sys, yaml
vols = yaml.safe_load(sys.stdin)["services"]["mariadb"]["volumes"]
pairs = [v.split(":")[:2] for v in vols if ":/docker-entrypoint-initdb.d/" in v]
for src, dst in sorted(pairs, key=lambda p: p[1]):
    print(src)
')
expect_eq "init files" 3 "${#init[@]}"

mysql_cli "$T" -e "CREATE DATABASE shop"
for f in "${init[@]}"; do
  case $f in
  *.sql) mysql_cli "$T" shop <"$f" ;;
  *.sh)
    [[ ! -x $f ]] || fail "$f is executable: the image would run it without its helpers"
    # shellcheck source=/dev/null
    source "$f"
    ;;
  *) fail "unexpected init file $f" ;;
  esac
  echo "ok: ran $(basename "$f")"
done

expect_eq "seeded products" 4 "$(mysql_cli "$T" -N -B shop -e 'SELECT COUNT(*) FROM product')"
grants=$(mysql_cli "$T" -N -B -e "SHOW GRANTS FOR 'stockd'@'%'" | sed 's/ IDENTIFIED BY.*//' | sort)
expect_eq "grants of stockd@%" \
  "GRANT SELECT, INSERT ON \`shop\`.\`orders\` TO \`stockd\`@\`%\`
GRANT SELECT, UPDATE ON \`shop\`.\`product\` TO \`stockd\`@\`%\`
GRANT USAGE ON *.* TO \`stockd\`@\`%\`" "$grants"

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

# Without a password the init script stops the initialisation.
# shellcheck source=/dev/null
if (STOCKD_MYSQL_PASSWORD='' && source "${init[2]}") 2>/dev/null; then
  fail "the init script accepted an empty password"
fi
echo "ok: an empty STOCKD_MYSQL_PASSWORD stops the init"
