# shellcheck shell=bash
# Init script for the official mariadb image (mounted into /docker-entrypoint-initdb.d,
# run once, when the data volume is empty, after the schema and the seed). It creates
# stockd's service user with the same narrow grants as scripts/stack-lib.sh's
# mysql_create_db: read and update stock, read and add orders, nothing else. The image's
# MARIADB_USER would get ALL PRIVILEGES on the database instead, which is why it is not used.
#
# The entrypoint sources this file (it must stay non-executable), so docker_process_sql
# and docker_sql_escape_string_literal are the entrypoint's own helpers, and the
# password arrives through the container's environment, never through a file in git.

if [[ -z ${STOCKD_MYSQL_PASSWORD:-} ]]; then
	mysql_error "STOCKD_MYSQL_PASSWORD is empty: the stockd service user needs a password"
fi
stockd_pw=$(docker_sql_escape_string_literal "$STOCKD_MYSQL_PASSWORD")
# '%' because every stockd container connects from its own address on the compose network.
docker_process_sql --database=mysql <<SQL
CREATE USER IF NOT EXISTS 'stockd'@'%' IDENTIFIED BY '$stockd_pw';
GRANT SELECT, UPDATE ON \`$MARIADB_DATABASE\`.product TO 'stockd'@'%';
GRANT SELECT, INSERT ON \`$MARIADB_DATABASE\`.orders TO 'stockd'@'%';
SQL
unset stockd_pw
