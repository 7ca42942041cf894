#!/usr/bin/env bash
# The MariaDB container's main process (docker/mariadb/Dockerfile), built on
# scripts/stack-lib.sh so that the containers and the native stack make and run their
# database the same way.
#
# On the first start (no datadir on the volume) it makes the system tables
# (mysql_install), starts the server with networking off, loads the schema and the seed
# into `shop` and creates the service user `stockd`@'%' with the password from
# STOCKD_MYSQL_PASSWORD and the narrow grants of mysql_create_db; then stops it. The
# initialisation happens in RUN/init and is moved into place only when complete, so a
# start interrupted half-way begins again instead of serving a half-made database.
# Then it replaces itself with the server, on TCP, with the stack's server settings.
#
# root logs in only over the socket inside the container, with no password (as in the
# native stack); from the network, only `stockd` can. Settings (for running it outside
# a container, as tests/stack/docker_initdb.sh does): STOCKD_RUN (/var/lib/stockd),
# STOCKD_MYSQL_PORT (3306), STOCKD_MYSQL_BIND (0.0.0.0), STOCKD_LIB (the folder with
# scripts/ and sql/; /usr/local/lib/stockd).
set -euo pipefail
# shellcheck source=../../scripts/stack-lib.sh
source "${STOCKD_LIB:-/usr/local/lib/stockd}/scripts/stack-lib.sh"

run=${STOCKD_RUN:-/var/lib/stockd}
port=${STOCKD_MYSQL_PORT:-3306}
bind=${STOCKD_MYSQL_BIND:-0.0.0.0}
osuser=$(id -un)

die() {
  stack_log "stockd-mariadb: $*"
  exit 1
}

init() {
  local tmp=$run/init pid
  [[ -n ${STOCKD_MYSQL_PASSWORD:-} ]] ||
    die "STOCKD_MYSQL_PASSWORD is empty: the stockd service user needs a password"
  stack_log "stockd-mariadb: first start, making the database in $run"
  rm -rf "$tmp"
  mysql_install "$tmp" "$osuser" || die "install-db failed: $(tail -n 5 "$tmp/mysql/install.log")"
  mariadbd --no-defaults --user="$osuser" --datadir="$tmp/mysql/data" \
    --socket="$tmp/mysql/sock" --pid-file="$tmp/mysql/pid" --skip-networking \
    "${STACK_MYSQL_FLAGS[@]}" --log-error="$tmp/mysql/error.log" &
  pid=$!
  wait_until 60 mysql_cli "$tmp" -e 'select 1' ||
    die "the server did not start: $(tail -n 5 "$tmp/mysql/error.log")"
  mysql_create_db "$tmp" shop stockd "$STOCKD_MYSQL_PASSWORD" '%' ||
    die "could not load the schema or create the service user"
  # install-db also makes root@127.0.0.1 and root@::1 without a password; only the
  # socket's root@localhost stays.
  mysql_cli "$tmp" -e "DROP USER IF EXISTS 'root'@'127.0.0.1', 'root'@'::1';
    DELETE FROM mysql.global_priv WHERE User = 'root' AND Host <> 'localhost';
    DELETE FROM mysql.proxies_priv WHERE User = 'root' AND Host <> 'localhost';
    FLUSH PRIVILEGES; SHUTDOWN" || die "could not finish the initialisation"
  wait "$pid" || die "the server did not stop cleanly after the initialisation"
  mkdir -p "$run/mysql"
  mv "$tmp/mysql/data" "$run/mysql/data"
  rm -rf "$tmp"
}

[[ -d $run/mysql/data/mysql ]] || init
# Logs go to stderr, where the container engine collects them.
exec mariadbd --no-defaults --user="$osuser" --datadir="$run/mysql/data" \
  --socket="$run/mysql/sock" --pid-file="$run/mysql/pid" \
  --port="$port" --bind-address="$bind" "${STACK_MYSQL_FLAGS[@]}"
