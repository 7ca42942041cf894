/* reconcile: answers versus orders rows (see reconcile.h). */
#include "reconcile.h"

#include "stockdb.h"

#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The URL means what it means to stockd: one parser (db/stockdb_url.c), with its %XX
 * escapes, so a password with '@' is written %40 here as there. */
int reconcile_parse_url(reconcile_db *db, const char *url) {
    stockdb_config c;
    memset(&c, 0, sizeof(c));
    memcpy(c.password, db->password, sizeof(c.password));
    if (!url || stockdb_config_from_url(&c, url) != STOCKDB_OK) return RECONCILE_ERR_URL;
    memcpy(db->host, c.host, sizeof(db->host));
    db->port = c.port;
    memcpy(db->user, c.user, sizeof(db->user));
    memcpy(db->password, c.password, sizeof(db->password));
    memcpy(db->database, c.database, sizeof(db->database));
    memset(c.password, 0, sizeof(c.password));
    return RECONCILE_OK;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

void reconcile_compare(uint64_t *answer_ids, size_t n_answers, uint64_t *row_ids, size_t n_rows,
                       reconcile_report *r) {
    memset(r, 0, sizeof(*r));
    r->answers = n_answers;
    r->rows = n_rows;
    if (n_answers) qsort(answer_ids, n_answers, sizeof(*answer_ids), cmp_u64);
    if (n_rows) qsort(row_ids, n_rows, sizeof(*row_ids), cmp_u64);

    /* One merge over both sorted lists. orders.id is a primary key, so rows are
     * distinct; answers may repeat an id, which is itself a mismatch. */
    size_t i = 0, j = 0;
    while (i < n_answers || j < n_rows) {
        if (i > 0 && i < n_answers && answer_ids[i] == answer_ids[i - 1]) {
            r->duplicate_answers++;
            i++;
        } else if (j >= n_rows || (i < n_answers && answer_ids[i] < row_ids[j])) {
            if (r->n_missing_examples < RECONCILE_EXAMPLES)
                r->missing_examples[r->n_missing_examples++] = answer_ids[i];
            r->missing_rows++;
            i++;
        } else if (i >= n_answers || row_ids[j] < answer_ids[i]) {
            if (r->n_unanswered_examples < RECONCILE_EXAMPLES)
                r->unanswered_examples[r->n_unanswered_examples++] = row_ids[j];
            r->unanswered_rows++;
            j++;
        } else {
            i++;
            j++;
        }
    }
    r->ok = r->missing_rows == 0 && r->unanswered_rows == 0 && r->duplicate_answers == 0;
}

int reconcile_fetch(const reconcile_db *db, int32_t product, uint64_t **ids, size_t *n, char *err,
                    size_t errlen) {
    static const char query[] = "SELECT id FROM orders WHERE product_id = ? ORDER BY id";
    MYSQL *conn = NULL;
    MYSQL_STMT *stmt = NULL;
    uint64_t *out = NULL;
    size_t count = 0, cap = 0;
    int rc = RECONCILE_OK;

    *ids = NULL;
    *n = 0;
    if (errlen) err[0] = '\0';

    conn = mysql_init(NULL);
    if (!conn) {
        snprintf(err, errlen, "mysql_init: out of memory");
        return RECONCILE_ERR_NOMEM;
    }
    /* Bounded waits: a database that does not answer must not hang the tool. */
    unsigned connect_timeout = 5, rw_timeout = 60;
    mysql_options(conn, MYSQL_OPT_CONNECT_TIMEOUT, &connect_timeout);
    mysql_options(conn, MYSQL_OPT_READ_TIMEOUT, &rw_timeout);
    mysql_options(conn, MYSQL_OPT_WRITE_TIMEOUT, &rw_timeout);
    if (!mysql_real_connect(conn, db->host, db->user, db->password, db->database, db->port, NULL,
                            0)) {
        snprintf(err, errlen, "connect to %s:%u/%s as %s: %s", db->host, db->port, db->database,
                 db->user, mysql_error(conn));
        rc = RECONCILE_ERR_CONNECT;
        goto out;
    }

    stmt = mysql_stmt_init(conn);
    if (!stmt || mysql_stmt_prepare(stmt, query, sizeof(query) - 1)) {
        snprintf(err, errlen, "prepare: %s", stmt ? mysql_stmt_error(stmt) : mysql_error(conn));
        rc = RECONCILE_ERR_QUERY;
        goto out;
    }

    int32_t param_product = product;
    MYSQL_BIND param;
    memset(&param, 0, sizeof(param));
    param.buffer_type = MYSQL_TYPE_LONG;
    param.buffer = &param_product;

    unsigned long long id = 0;
    my_bool is_null = 0; /* libmariadb's type for the null flag */
    MYSQL_BIND result;
    memset(&result, 0, sizeof(result));
    result.buffer_type = MYSQL_TYPE_LONGLONG;
    result.buffer = &id;
    result.is_unsigned = true;
    result.is_null = &is_null;

    if (mysql_stmt_bind_param(stmt, &param) || mysql_stmt_execute(stmt) ||
        mysql_stmt_bind_result(stmt, &result)) {
        snprintf(err, errlen, "query: %s", mysql_stmt_error(stmt));
        rc = RECONCILE_ERR_QUERY;
        goto out;
    }

    for (;;) {
        int f = mysql_stmt_fetch(stmt);
        if (f == MYSQL_NO_DATA) break;
        if (f != 0) {
            snprintf(err, errlen, "fetch: %s", mysql_stmt_error(stmt));
            rc = RECONCILE_ERR_QUERY;
            goto out;
        }
        if (is_null) continue; /* orders.id is NOT NULL; this cannot happen */
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 1024;
            uint64_t *grown = realloc(out, ncap * sizeof(*out));
            if (!grown) {
                snprintf(err, errlen, "out of memory reading %zu order ids", count);
                rc = RECONCILE_ERR_NOMEM;
                goto out;
            }
            out = grown;
            cap = ncap;
        }
        out[count++] = id;
    }
    *ids = out;
    *n = count;
    out = NULL;

out:
    free(out);
    if (stmt) mysql_stmt_close(stmt);
    mysql_close(conn);
    return rc;
}
