#!/usr/bin/env bash
# No SQL is built with printf-style formatting or string concatenation: sql_scan.py over
# db/, service/ and lock/ (dblock.c, the lock table) must find nothing. First it must
# prove, on sources written here, that it finds each kind of SQL built at run time and
# lets error messages pass, so the clean result on the real sources means something.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../assert.sh"
scan=$STOCKD_SRC/tests/security/sql_scan.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT


# must_flag NAME RULE CODE: the scanner reports CODE (as a whole .c file) under RULE.
must_flag() {
  printf '%s\n' "$3" >"$work/$1.c"
  if out=$(python3 "$scan" "$work/$1.c"); then fail "$1: not flagged: $3"; fi
  grep -q ": $2: " <<<"$out" || fail "$1: flagged, but not as $2: $out"
  echo "ok: flags $1 ($2)"
}

# must_pass NAME CODE: the scanner finds nothing in CODE.
must_pass() {
  printf '%s\n' "$2" >"$work/$1.c"
  out=$(python3 "$scan" "$work/$1.c") || fail "$1: wrongly flagged: $out"
  echo "ok: passes $1"
}

must_flag snprintf_select format \
  'void f(char *q, int id) { snprintf(q, 256, "SELECT stock FROM product WHERE id = %d", id); }'
must_flag split_literal format \
  'void f(char *q, int id) { sprintf(q, "UPDATE product SET stock = "
                                        "stock - 1 WHERE id = %d", id); }'
must_flag lower_case format \
  'void f(char *q, const char *k) { snprintf(q, 99, "select id from orders where request_id = '"'"'%s'"'"'", k); }'
must_flag own_logger format \
  'void f(struct db *db, const char *k) { db_printf(db, "INSERT INTO orders (request_id) VALUES (%s)", k); }'
must_flag strcat_where concat \
  'void f(char *q) { strcpy(q, "DELETE FROM orders"); strcat(q, " WHERE id = "); }'
must_flag runtime_buffer sink \
  'void f(MYSQL *c, char *q) { mysql_real_query(c, q, strlen(q)); }'
must_flag runtime_prepare sink \
  'void f(MYSQL_STMT *s, const char *q) { mysql_stmt_prepare(s, q, strlen(q)); }'
must_flag comment_hides_nothing sink \
  'void f(MYSQL *c, char *q) { /* "SELECT 1" */ mysql_query(c, q); }'

must_pass constant_statements '
static const char sql_begin[] = "START TRANSACTION";
static const char *const stmt_sql[2] = {"SELECT stock FROM product WHERE id = ?", "COMMIT"};
void f(MYSQL *c, MYSQL_STMT *s, int i) {
    mysql_real_query(c, sql_begin, sizeof(sql_begin) - 1);
    mysql_stmt_prepare(s, stmt_sql[i], strlen(stmt_sql[i]));
    mysql_query(c, "ROLLBACK");
}'
# stockdb_conn_prepare prepares a table of statements for stockdb and dblock: its callers
# must hand it a constant table, and only its own body may pass its parameter on.
must_flag runtime_table sink \
  'void f(MYSQL *c, MYSQL_STMT **s, char *q) { const char *t[1] = {q}; stockdb_conn_prepare(c, s, t, NULL, 1, q, 9); }'
must_flag forwarding_outside_its_body sink '
int stockdb_conn_prepare(MYSQL *c, MYSQL_STMT **s, const char *const *sql, const char *const *nm, int n, char *e, size_t k) {
    return mysql_stmt_prepare(s[0], sql[0], strlen(sql[0]));
}
void f(MYSQL_STMT *s, const char **sql) { mysql_stmt_prepare(s, sql[0], 3); }'
must_pass constant_table '
static const char *const stmt_sql[1] = {"SELECT stock FROM product WHERE id = ?"};
int stockdb_conn_prepare(MYSQL *c, MYSQL_STMT **s, const char *const *sql, const char *const *nm, int n, char *e, size_t k) {
    for (int i = 0; i < n; i++)
        if (mysql_stmt_prepare(s[i], sql[i], strlen(sql[i]))) return -1;
    return 0;
}
void f(MYSQL *c, MYSQL_STMT **s, char *e) { stockdb_conn_prepare(c, s, stmt_sql, NULL, 1, e, 9); }'
must_pass error_messages '
void f(struct db *db, const char *name, const char *err, const char *mode) {
    set_err(db, "%s: %s (%u)", name, err, 3u);
    snprintf(db->errstr, 256, "cannot update the product: %s", err);
    fprintf(stderr, "select a mode from the list, got %s\n", mode);
    stockd_log("warn", "deleted from the queue: %s", name);
    puts("UPDATE product SET stock = stock - 1 WHERE id = ?");
}'

# The real sources.
python3 "$scan" "$STOCKD_SRC/db" "$STOCKD_SRC/service" "$STOCKD_SRC/lock" ||
  fail "SQL built at run time (see above)"
echo "PASS"
