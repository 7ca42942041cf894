/* writer_db.c: the writer's MariaDB side. One connection (db/'s stockdb_conn_*: the same
 * client set-up, URL and "connection gone" rules as stockd's), READ COMMITTED, autocommit
 * off, and one transaction per batch of stream entries.
 *
 * An entry is written by two prepared statements, and exactly once however often it is
 * delivered (a redelivery after a crash between COMMIT and XACK, a claim from a slow
 * writer):
 *   1. UPDATE product SET stock = stock - 1 WHERE id = ? AND stock > 0, unless the key
 *      has an order or an oversold promise already: the guard and the duplicate check.
 *   2. One row updated: INSERT the order. A twin being written by another writer at
 *      the same moment makes this a duplicate key error, and the whole batch is rolled
 *      back and run again (it then finds the twin's order in step 1).
 *      No row updated: INSERT IGNORE the oversold promise, unless the key has an order.
 *      A row inserted: the product had no stock left in MariaDB (or no row); none: the
 *      entry was written before.
 * So orders stays the ledger of units that exist (initial stock - stock = orders), and
 * each oversold_promise row is a unit promised that does not exist. */
#include <mysql.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "writer_int.h"

enum { ST_DEDUCT, ST_ORDER, ST_PROMISE, ST_PRODUCT, ST_LAG, ST_COUNT };

#define ANSWERED_AT "FROM_UNIXTIME(? DIV 1000000) + INTERVAL (? MOD 1000000) MICROSECOND"

static const char *const stmt_sql[ST_COUNT] = {
    [ST_DEDUCT] = "UPDATE product SET stock = stock - 1, row_version = row_version + 1 "
                  "WHERE id = ? AND stock > 0 "
                  "AND NOT EXISTS (SELECT 1 FROM orders WHERE request_id = ?) "
                  "AND NOT EXISTS (SELECT 1 FROM oversold_promise WHERE request_id = ?)",
    [ST_ORDER] = "INSERT INTO orders (product_id, instance, request_id, answered_at) "
                 "VALUES (?, ?, ?, " ANSWERED_AT ")",
    [ST_PROMISE] = "INSERT IGNORE INTO oversold_promise "
                   "(request_id, product_id, instance, answered_at, reason) "
                   "SELECT ?, ?, ?, " ANSWERED_AT ", "
                   "IF(EXISTS(SELECT 1 FROM product WHERE id = ?), 'sold_out', 'no_product') "
                   "FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM orders WHERE request_id = ?)",
    [ST_PRODUCT] = "SELECT p.stock, "
                   "(SELECT COUNT(*) FROM orders o WHERE o.product_id = p.id), "
                   "(SELECT COUNT(*) FROM oversold_promise s WHERE s.product_id = p.id) "
                   "FROM product p WHERE p.id = ?",
    [ST_LAG] = "SELECT COUNT(*) OVER (), "
               "PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY lag_us) OVER (), "
               "PERCENTILE_CONT(0.99) WITHIN GROUP (ORDER BY lag_us) OVER () "
               "FROM (SELECT TIMESTAMPDIFF(MICROSECOND, answered_at, created_at) AS lag_us "
               "FROM orders WHERE answered_at IS NOT NULL) t LIMIT 1",
};
static const char *const stmt_name[ST_COUNT] = {[ST_DEDUCT] = "deduct",
                                                [ST_ORDER] = "order",
                                                [ST_PROMISE] = "promise",
                                                [ST_PRODUCT] = "product",
                                                [ST_LAG] = "lag"};

/* A batch that lost a race (a deadlock or lock wait victim, or a twin's order written
 * meanwhile: a duplicate key) is run again at once, this many times in all. */
#define DEADLOCK_TRIES 3

struct writer_db {
    stockdb_config cfg;
    MYSQL *conn;
    MYSQL_STMT *stmt[ST_COUNT];
    unsigned err; /* the last failure's error number */
    char errstr[512];
};

writer_db *writer_db__new(const stockdb_config *cfg) {
    writer_db *db = calloc(1, sizeof(*db));
    if (db) db->cfg = *cfg;
    return db;
}

void writer_db__free(writer_db *db) {
    if (!db) return;
    stockdb_conn_close(&db->conn, db->stmt, ST_COUNT);
    free(db);
}

const char *writer_db__errstr(const writer_db *db) {
    return db->errstr;
}

int writer_db__connect(writer_db *db) {
    static const char *const session[] = {
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "SET SESSION innodb_lock_wait_timeout = 5",
        /* A writer frozen inside a batch (SIGSTOP, a stalled VM) would hold its product
         * rows' locks, and every other writer would wait on them: the server rolls such
         * a transaction back after 10 s of silence, as it does stockd's (stockdb.h). */
        "SET SESSION idle_write_transaction_timeout = 10",
    };
    if (db->conn) return WRITER_OK;
    int rc = stockdb_conn_open(&db->cfg, 0, &db->conn, db->errstr, sizeof(db->errstr));
    if (rc == STOCKDB_OK)
        rc = stockdb_conn_prepare(db->conn, db->stmt, stmt_sql, stmt_name, ST_COUNT, db->errstr,
                                  sizeof(db->errstr));
    for (size_t i = 0; rc == STOCKDB_OK && i < sizeof(session) / sizeof(session[0]); i++) {
        if (mysql_query(db->conn, session[i])) {
            snprintf(db->errstr, sizeof(db->errstr), "%s: %s", session[i], mysql_error(db->conn));
            rc = STOCKDB_ERR_QUERY;
        }
    }
    if (rc == STOCKDB_OK && mysql_autocommit(db->conn, 0)) {
        snprintf(db->errstr, sizeof(db->errstr), "autocommit off: %s", mysql_error(db->conn));
        rc = STOCKDB_ERR_QUERY;
    }
    if (rc != STOCKDB_OK) {
        stockdb_conn_close(&db->conn, db->stmt, ST_COUNT);
        return WRITER_ERR_DB;
    }
    return WRITER_OK;
}

/* Records statement id's failure; a connection that is gone is closed. */
static int stmt_fail(writer_db *db, int id) {
    db->err = mysql_stmt_errno(db->stmt[id]);
    snprintf(db->errstr, sizeof(db->errstr), "%s: %s (%u)", stmt_name[id],
             mysql_stmt_error(db->stmt[id]), db->err);
    if (stockdb_conn_gone(db->err)) stockdb_conn_close(&db->conn, db->stmt, ST_COUNT);
    return WRITER_ERR_DB;
}

/* Executes statement id with params; *rows = the rows it changed. */
static int exec(writer_db *db, int id, MYSQL_BIND *params, uint64_t *rows) {
    MYSQL_STMT *st = db->stmt[id];
    if (mysql_stmt_bind_param(st, params) || mysql_stmt_execute(st)) return stmt_fail(db, id);
    *rows = (uint64_t)mysql_stmt_affected_rows(st);
    return WRITER_OK;
}

static void bind_int(MYSQL_BIND *b, int32_t *v) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONG;
    b->buffer = v;
}

static void bind_ll(MYSQL_BIND *b, int64_t *v) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
}

static void bind_str(MYSQL_BIND *b, char *s, unsigned long *len) {
    memset(b, 0, sizeof(*b));
    *len = (unsigned long)strlen(s);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = s;
    b->buffer_length = *len;
    b->length = len;
}

/* Writes one entry inside the open transaction and sets its outcome. */
static int write_entry(writer_db *db, writer_entry *e) {
    MYSQL_BIND p[6];
    unsigned long klen, k2len, ilen;
    uint64_t rows = 0;
    int rc;

    bind_int(&p[0], &e->product);
    bind_str(&p[1], e->key, &klen);
    bind_str(&p[2], e->key, &k2len);
    if ((rc = exec(db, ST_DEDUCT, p, &rows)) != WRITER_OK) return rc;
    if (rows == 1) {
        bind_int(&p[0], &e->product);
        bind_str(&p[1], e->instance, &ilen);
        bind_str(&p[2], e->key, &klen);
        bind_ll(&p[3], &e->at_us);
        bind_ll(&p[4], &e->at_us);
        e->outcome = WRITER__ORDER;
        return exec(db, ST_ORDER, p, &rows);
    }
    bind_str(&p[0], e->key, &klen);
    bind_int(&p[1], &e->product);
    bind_str(&p[2], e->instance, &ilen);
    bind_ll(&p[3], &e->at_us);
    bind_ll(&p[4], &e->at_us);
    bind_int(&p[5], &e->product);
    MYSQL_BIND q[7];
    memcpy(q, p, sizeof(p));
    bind_str(&q[6], e->key, &k2len);
    if ((rc = exec(db, ST_PROMISE, q, &rows)) != WRITER_OK) return rc;
    e->outcome = rows == 1 ? WRITER__OVERSOLD : WRITER__DUPLICATE;
    return WRITER_OK;
}

static int by_product(const void *a, const void *b) {
    const writer_entry *x = *(writer_entry *const *)a, *y = *(writer_entry *const *)b;
    if (x->product != y->product) return x->product < y->product ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* One attempt: every OK entry, then COMMIT. */
static int write_once(writer_db *db, writer_entry **order, unsigned n) {
    int rc = WRITER_OK;
    for (unsigned i = 0; i < n && rc == WRITER_OK; i++)
        rc = write_entry(db, order[i]);
    if (rc == WRITER_OK && mysql_commit(db->conn)) {
        /* The COMMIT's reply is lost or refused: whether it committed is unknown, and it
         * need not be known: the entries stay pending and their rewrite is a no-op if it
         * did. The connection is dropped so that the server ends the session. */
        db->err = mysql_errno(db->conn);
        snprintf(db->errstr, sizeof(db->errstr), "COMMIT: %s (%u)", mysql_error(db->conn), db->err);
        stockdb_conn_close(&db->conn, db->stmt, ST_COUNT);
        return WRITER_ERR_DB;
    }
    if (rc != WRITER_OK && db->conn && mysql_rollback(db->conn))
        stockdb_conn_close(&db->conn, db->stmt, ST_COUNT);
    return rc;
}

int writer_db__write(writer_db *db, writer_entry *e, unsigned n) {
    writer_entry **order = malloc((n ? n : 1) * sizeof(*order));
    unsigned k = 0;
    int rc = WRITER_OK;
    if (!order) {
        snprintf(db->errstr, sizeof(db->errstr), "out of memory");
        return WRITER_ERR_NOMEM;
    }
    for (unsigned i = 0; i < n; i++)
        if (e[i].kind == WRITER__ENTRY_OK) order[k++] = &e[i];
    qsort(order, k, sizeof(*order), by_product);
    for (int t = 0; k > 0 && t < DEADLOCK_TRIES; t++) {
        if ((rc = writer_db__connect(db)) != WRITER_OK) break;
        db->err = 0;
        rc = write_once(db, order, k);
        if (rc == WRITER_OK || (db->err != ER_LOCK_DEADLOCK && db->err != ER_LOCK_WAIT_TIMEOUT &&
                                db->err != ER_DUP_ENTRY))
            break;
    }
    free(order);
    return rc;
}

int writer_db__product(writer_db *db, int32_t id, bool *found, int64_t *stock, int64_t *orders,
                       int64_t *oversold) {
    MYSQL_BIND p[1], r[3];
    int rc = writer_db__connect(db);
    if (rc != WRITER_OK) return rc;
    MYSQL_STMT *st = db->stmt[ST_PRODUCT];
    bind_int(&p[0], &id);
    bind_ll(&r[0], stock);
    bind_ll(&r[1], orders);
    bind_ll(&r[2], oversold);
    *found = false;
    if (mysql_stmt_bind_param(st, p) || mysql_stmt_execute(st) || mysql_stmt_bind_result(st, r) ||
        mysql_stmt_store_result(st))
        return stmt_fail(db, ST_PRODUCT);
    *found = mysql_stmt_fetch(st) == 0;
    mysql_stmt_free_result(st);
    mysql_rollback(db->conn); /* a read ends its transaction too (stockdb.h) */
    return WRITER_OK;
}

int writer_db__lag(writer_db *db, int64_t *n, double *p50_us, double *p99_us) {
    MYSQL_BIND r[3];
    int rc = writer_db__connect(db);
    if (rc != WRITER_OK) return rc;
    MYSQL_STMT *st = db->stmt[ST_LAG];
    bind_ll(&r[0], n);
    memset(&r[1], 0, sizeof(r[1]) * 2);
    r[1].buffer_type = r[2].buffer_type = MYSQL_TYPE_DOUBLE;
    r[1].buffer = p50_us;
    r[2].buffer = p99_us;
    *n = 0;
    *p50_us = *p99_us = 0;
    if (mysql_stmt_execute(st) || mysql_stmt_bind_result(st, r) || mysql_stmt_store_result(st))
        return stmt_fail(db, ST_LAG);
    if (mysql_stmt_fetch(st) != 0) *n = 0;
    mysql_stmt_free_result(st);
    mysql_rollback(db->conn);
    return WRITER_OK;
}
