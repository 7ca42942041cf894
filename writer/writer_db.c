/* writer_db.c: the writer's MariaDB side. One connection (db/'s stockdb_conn_*: the same
 * client set-up, URL and "connection gone" rules as stockd's), READ COMMITTED, autocommit
 * off, and one transaction per batch of stream entries.
 *
 * A batch is written by a handful of statements whatever its size (multi-row, built as
 * text with every string escaped), and each entry exactly once however often it is
 * delivered (a redelivery after a crash between COMMIT and XACK, a claim from a slow
 * writer):
 *   1. SELECT ... FOR UPDATE the batch's product rows, in id order: two writers lock
 *      them in the same order, and a twin writer of the same entries waits here until
 *      the first has committed, so that step 2 sees what it wrote.
 *   2. SELECT the orders and oversold promises of the batch's keys. An entry whose key
 *      has a row with the same product and the same answered_at (its at_us) is a
 *      redelivery: a duplicate, skipped. A key with a row of another product or time
 *      was deducted again in Redis after its memo was gone (the window passed, or the
 *      memo was lost): KEY REUSED, recorded as an oversold promise under
 *      "<key>@<at_us>" with reason key_reused, never dropped.
 *   3. The others, per product in stream order: while MariaDB's stock lasts, an order;
 *      then an oversold promise (sold_out, or no_product without a row).
 *   4. One UPDATE of the products' stock, one INSERT of the orders, one INSERT IGNORE of
 *      the promises, COMMIT.
 * So orders stays the ledger of units that exist (initial stock - stock = orders), and
 * each oversold_promise row is a unit promised that does not exist. */
#include <mysql.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "writer_int.h"

enum { ST_PRODUCT, ST_LAG, ST_COUNT };

static const char *const stmt_sql[ST_COUNT] = {
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
static const char *const stmt_name[ST_COUNT] = {[ST_PRODUCT] = "product", [ST_LAG] = "lag"};

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

/* ---------------------------------------------------------------- one batch as text */

/* A statement's text, grown with open_memstream. */
typedef struct sqltext {
    FILE *f;
    char *s;
    size_t len;
} sqltext;

/* Appends s as a quoted, escaped SQL string. */
static void put_str(writer_db *db, sqltext *t, const char *s) {
    char esc[2 * (STOCKDB_REQUEST_ID_MAX + 24) + 1];
    size_t n = strlen(s);
    if (n > STOCKDB_REQUEST_ID_MAX + 24) n = STOCKDB_REQUEST_ID_MAX + 24;
    mysql_real_escape_string(db->conn, esc, s, (unsigned long)n);
    fprintf(t->f, "'%s'", esc);
}

/* Runs t's text (and frees it): 0, or WRITER_ERR_DB with the error recorded. */
static int run(writer_db *db, sqltext *t, const char *what) {
    int rc = WRITER_OK;
    if (fclose(t->f) != 0 || !t->s) {
        snprintf(db->errstr, sizeof(db->errstr), "%s: out of memory", what);
        free(t->s);
        return WRITER_ERR_NOMEM;
    }
    if (mysql_real_query(db->conn, t->s, (unsigned long)t->len)) {
        db->err = mysql_errno(db->conn);
        snprintf(db->errstr, sizeof(db->errstr), "%s: %s (%u)", what, mysql_error(db->conn),
                 db->err);
        if (stockdb_conn_gone(db->err)) stockdb_conn_close(&db->conn, db->stmt, ST_COUNT);
        rc = WRITER_ERR_DB;
    }
    free(t->s);
    return rc;
}

static void open_text(sqltext *t) {
    t->s = NULL;
    t->len = 0;
    t->f = open_memstream(&t->s, &t->len);
}

/* The oversold_promise key of an entry whose key was used before: "<key>@<at_us>" ('@'
 * never appears in a key), so that a redelivery of it is found and not written twice. */
static void reused_id(const writer_entry *e, char *buf, size_t cap) {
    char at[24];
    int n = snprintf(at, sizeof(at), "@%lld", (long long)e->at_us);
    snprintf(buf, cap, "%.*s%s", (int)(STOCKDB_REQUEST_ID_MAX - (size_t)n), e->key, at);
}

/* A row of orders or oversold_promise found for a batch's key. */
typedef struct prior {
    char id[STOCKDB_REQUEST_ID_MAX + 1];
    int32_t product;
    long long at_us; /* -1: no answered_at */
} prior;

typedef struct product_lock {
    int32_t id;
    bool found;
    long long stock; /* what is left to sell in this batch */
    long long taken;
} product_lock;

/* Step 1: the batch's product rows, locked in id order (order[] is sorted by product). */
static int lock_products(writer_db *db, writer_entry **order, unsigned n, product_lock *p,
                         unsigned *np) {
    sqltext t;
    *np = 0;
    open_text(&t);
    if (!t.f) return WRITER_ERR_NOMEM;
    fputs("SELECT id, stock FROM product WHERE id IN (", t.f);
    for (unsigned i = 0; i < n; i++) {
        if (i > 0 && order[i]->product == order[i - 1]->product) continue;
        fprintf(t.f, "%s%d", *np ? "," : "", order[i]->product);
        p[*np] = (product_lock){.id = order[i]->product};
        (*np)++;
    }
    fputs(") ORDER BY id FOR UPDATE", t.f);
    int rc = run(db, &t, "lock the products");
    if (rc != WRITER_OK) return rc;
    MYSQL_RES *res = mysql_store_result(db->conn);
    if (!res) {
        snprintf(db->errstr, sizeof(db->errstr), "lock the products: %s", mysql_error(db->conn));
        return WRITER_ERR_DB;
    }
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res))) {
        int32_t id = (int32_t)strtol(row[0], NULL, 10);
        for (unsigned j = 0; j < *np; j++)
            if (p[j].id == id) p[j].found = true, p[j].stock = strtoll(row[1], NULL, 10);
    }
    mysql_free_result(res);
    return WRITER_OK;
}

/* Step 2: the orders and promises already written under the batch's keys. */
static int read_priors(writer_db *db, writer_entry **order, unsigned n, prior **out, size_t *nout) {
    static const char at_sql[] = "CAST(UNIX_TIMESTAMP(answered_at) * 1000000 AS SIGNED)";
    char rid[STOCKDB_REQUEST_ID_MAX + 1];
    sqltext t;
    *out = NULL;
    *nout = 0;
    open_text(&t);
    if (!t.f) return WRITER_ERR_NOMEM;
    fprintf(t.f, "SELECT request_id, product_id, %s FROM orders WHERE request_id IN (", at_sql);
    for (unsigned i = 0; i < n; i++) {
        if (i) fputc(',', t.f);
        put_str(db, &t, order[i]->key);
    }
    fprintf(t.f,
            ") UNION ALL SELECT request_id, product_id, %s FROM oversold_promise "
            "WHERE request_id IN (",
            at_sql);
    for (unsigned i = 0; i < n; i++) {
        reused_id(order[i], rid, sizeof(rid));
        if (i) fputc(',', t.f);
        put_str(db, &t, rid);
        fputc(',', t.f);
        put_str(db, &t, order[i]->key);
    }
    fputc(')', t.f);
    int rc = run(db, &t, "read the keys");
    if (rc != WRITER_OK) return rc;
    MYSQL_RES *res = mysql_store_result(db->conn);
    if (!res) {
        snprintf(db->errstr, sizeof(db->errstr), "read the keys: %s", mysql_error(db->conn));
        return WRITER_ERR_DB;
    }
    size_t rows = (size_t)mysql_num_rows(res);
    prior *p = rows ? calloc(rows, sizeof(*p)) : NULL;
    if (rows && !p) {
        mysql_free_result(res);
        return WRITER_ERR_NOMEM;
    }
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res))) {
        prior *x = &p[(*nout)++];
        snprintf(x->id, sizeof(x->id), "%s", row[0]);
        x->product = (int32_t)strtol(row[1], NULL, 10);
        x->at_us = row[2] ? strtoll(row[2], NULL, 10) : -1;
    }
    mysql_free_result(res);
    *out = p;
    return WRITER_OK;
}

static const prior *find_prior(const prior *p, size_t n, const char *id) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(p[i].id, id) == 0) return &p[i];
    return NULL;
}

/* Step 3: each entry's outcome. */
static void classify(writer_entry **order, unsigned n, const prior *pr, size_t npr,
                     product_lock *pl, unsigned npl) {
    char rid[STOCKDB_REQUEST_ID_MAX + 1];
    unsigned j = 0;
    for (unsigned i = 0; i < n; i++) {
        writer_entry *e = order[i];
        while (pl[j].id != e->product)
            j++;
        reused_id(e, rid, sizeof(rid));
        const prior *same = find_prior(pr, npr, e->key);
        e->prior_product = 0;
        if (find_prior(pr, npr, rid)) {
            e->outcome = WRITER__DUPLICATE;
            continue;
        }
        /* A key earlier in this batch counts as written already. */
        const writer_entry *twin = NULL;
        for (unsigned k = 0; !same && k < i && !twin; k++)
            if (strcmp(order[k]->key, e->key) == 0 && order[k]->outcome != WRITER__KEY_REUSED)
                twin = order[k];
        if (same || twin) {
            int32_t prod = same ? same->product : twin->product;
            long long at = same ? same->at_us : twin->at_us;
            e->outcome =
                prod == e->product && at == e->at_us ? WRITER__DUPLICATE : WRITER__KEY_REUSED;
            e->prior_product = prod;
            continue;
        }
        if (pl[j].found && pl[j].stock > 0) {
            pl[j].stock--;
            pl[j].taken++;
            e->outcome = WRITER__ORDER;
        } else {
            e->outcome = WRITER__OVERSOLD;
            e->no_product = !pl[j].found;
        }
    }
}

/* at_us as SQL: FROM_UNIXTIME's seconds and the microseconds added exactly. */
static void put_at(sqltext *t, long long at_us) {
    fprintf(t->f, "FROM_UNIXTIME(%lld) + INTERVAL %lld MICROSECOND", at_us / 1000000,
            at_us % 1000000);
}

/* Step 4: the writes. */
static int write_rows(writer_db *db, writer_entry **order, unsigned n, const product_lock *pl,
                      unsigned npl) {
    char rid[STOCKDB_REQUEST_ID_MAX + 1];
    sqltext t;
    int rc = WRITER_OK;
    unsigned nupd = 0, nord = 0, nprom = 0;
    for (unsigned j = 0; j < npl; j++)
        nupd += pl[j].taken > 0;
    if (nupd) {
        open_text(&t);
        if (!t.f) return WRITER_ERR_NOMEM;
        fputs("UPDATE product SET stock = stock - CASE id", t.f);
        for (unsigned j = 0; j < npl; j++)
            if (pl[j].taken) fprintf(t.f, " WHEN %d THEN %lld", pl[j].id, pl[j].taken);
        fputs(" END, row_version = row_version + CASE id", t.f);
        for (unsigned j = 0; j < npl; j++)
            if (pl[j].taken) fprintf(t.f, " WHEN %d THEN %lld", pl[j].id, pl[j].taken);
        fputs(" END WHERE id IN (", t.f);
        for (unsigned j = 0, k = 0; j < npl; j++)
            if (pl[j].taken) fprintf(t.f, "%s%d", k++ ? "," : "", pl[j].id);
        fputc(')', t.f);
        if ((rc = run(db, &t, "update the stock")) != WRITER_OK) return rc;
    }
    open_text(&t);
    if (!t.f) return WRITER_ERR_NOMEM;
    fputs("INSERT INTO orders (product_id, instance, request_id, answered_at, user) VALUES ", t.f);
    for (unsigned i = 0; i < n; i++) {
        if (order[i]->outcome != WRITER__ORDER) continue;
        fprintf(t.f, "%s(%d,", nord++ ? "," : "", order[i]->product);
        put_str(db, &t, order[i]->instance);
        fputc(',', t.f);
        put_str(db, &t, order[i]->key);
        fputc(',', t.f);
        put_at(&t, order[i]->at_us);
        fputc(',', t.f);
        if (order[i]->user[0])
            put_str(db, &t, order[i]->user);
        else
            fputs("NULL", t.f);
        fputc(')', t.f);
    }
    if (nord) {
        if ((rc = run(db, &t, "insert the orders")) != WRITER_OK) return rc;
    } else {
        fclose(t.f);
        free(t.s);
    }
    open_text(&t);
    if (!t.f) return WRITER_ERR_NOMEM;
    fputs("INSERT IGNORE INTO oversold_promise (request_id, product_id, instance, answered_at, "
          "reason) VALUES ",
          t.f);
    for (unsigned i = 0; i < n; i++) {
        writer_entry *e = order[i];
        if (e->outcome != WRITER__OVERSOLD && e->outcome != WRITER__KEY_REUSED) continue;
        if (e->outcome == WRITER__KEY_REUSED) reused_id(e, rid, sizeof(rid));
        fputs(nprom++ ? ",(" : "(", t.f);
        put_str(db, &t, e->outcome == WRITER__KEY_REUSED ? rid : e->key);
        fprintf(t.f, ",%d,", e->product);
        put_str(db, &t, e->instance);
        fputc(',', t.f);
        put_at(&t, e->at_us);
        fprintf(t.f, ",'%s')",
                e->outcome == WRITER__KEY_REUSED ? "key_reused"
                : e->no_product                  ? "no_product"
                                                 : "sold_out");
    }
    if (nprom) return run(db, &t, "insert the oversold promises");
    fclose(t.f);
    free(t.s);
    return WRITER_OK;
}

static int by_product(const void *a, const void *b) {
    const writer_entry *x = *(writer_entry *const *)a, *y = *(writer_entry *const *)b;
    if (x->product != y->product) return x->product < y->product ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* One attempt: the four steps, then COMMIT. */
static int write_once(writer_db *db, writer_entry **order, unsigned n, product_lock *pl) {
    prior *pr = NULL;
    size_t npr = 0;
    unsigned npl = 0;
    int rc = lock_products(db, order, n, pl, &npl);
    if (rc == WRITER_OK) rc = read_priors(db, order, n, &pr, &npr);
    if (rc == WRITER_OK) {
        classify(order, n, pr, npr, pl, npl);
        rc = write_rows(db, order, n, pl, npl);
    }
    free(pr);
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
    product_lock *pl = malloc((n ? n : 1) * sizeof(*pl));
    unsigned k = 0;
    int rc = WRITER_OK;
    if (!order || !pl) {
        snprintf(db->errstr, sizeof(db->errstr), "out of memory");
        rc = WRITER_ERR_NOMEM;
        goto out;
    }
    for (unsigned i = 0; i < n; i++)
        if (e[i].kind == WRITER__ENTRY_OK) order[k++] = &e[i];
    qsort(order, k, sizeof(*order), by_product);
    for (int t = 0; k > 0 && t < DEADLOCK_TRIES; t++) {
        if ((rc = writer_db__connect(db)) != WRITER_OK) break;
        db->err = 0;
        rc = write_once(db, order, k, pl);
        if (rc == WRITER_OK || (db->err != ER_LOCK_DEADLOCK && db->err != ER_LOCK_WAIT_TIMEOUT &&
                                db->err != ER_DUP_ENTRY))
            break;
    }
out:
    free(order);
    free(pl);
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
