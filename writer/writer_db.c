/* writer_db.c: the writer's MariaDB side. One connection (db/'s stockdb_conn_*: the same
 * client set-up, URL and "connection gone" rules as stockd's), READ COMMITTED, autocommit
 * off, and one transaction per batch of stream entries.
 *
 * A batch is written by five statements whatever its size (and two per change of a
 * reservation), each prepared once with the batch's rows bound as ONE JSON parameter that
 * JSON_TABLE turns into rows (fixed SQL, bound values: no SQL is built at run time), and
 * each entry exactly once however often it is delivered (a redelivery after a crash
 * between COMMIT and XACK, a claim from a slow writer):
 *   1. SELECT ... FOR UPDATE the batch's product rows, in id order (the JSON array is
 *      sorted, and joined to product by its primary key in that order): two writers lock
 *      them in the same order, and a twin writer of the same entries waits here until
 *      the first has committed, so that step 2 sees what it wrote.
 *   2. SELECT the orders and oversold promises of the batch's keys. An entry whose key
 *      has a row with the same product and the same answered_at (its at_us) is a
 *      redelivery: a duplicate, skipped. A key with a row of another product or time
 *      was deducted again in Redis after its memo was gone (the window passed, or the
 *      memo was lost): KEY REUSED, recorded as an oversold promise under
 *      "<key>@<at_us>" with reason key_reused, never dropped.
 *   3. The others, per product in stream order: while MariaDB's stock lasts, an order;
 *      then an oversold promise (sold_out, or no_product without a row). A cancel or an
 *      expiry that will give its unit back (step 5) adds it at its place in the stream,
 *      as Redis did: a deduction after it in the batch may take that unit.
 *   4. One UPDATE of the products' stock, one INSERT of the orders, one INSERT IGNORE of
 *      the promises;
 *   5. the change entries of reservations (paid, cancelled, expired; docs/orders.md),
 *      one conditional UPDATE each (and one of the stock for a unit given back), then
 *      COMMIT.
 * So orders stays the ledger of units that exist (initial stock - stock = orders), and
 * each oversold_promise row is a unit promised that does not exist. */
#include <cjson/cJSON.h>
#include <mysql.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "writer_int.h"

enum {
    ST_LOCK,
    ST_PRIORS,
    ST_STOCK,
    ST_ORDERS,
    ST_PROMISES,
    ST_CHANGE,
    ST_GIVE_BACK,
    ST_PRODUCT,
    ST_LAG,
    ST_COUNT
};

/* JSON_TABLE's columns: a key as the tables hold it, and at_us as a time. */
#define KEY_COL     "VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"
#define AT_US(a)    "FROM_UNIXTIME(" a " DIV 1000000) + INTERVAL (" a " MOD 1000000) MICROSECOND"
#define AT_OF(t)    "CAST(UNIX_TIMESTAMP(" t ".answered_at) * 1000000 AS SIGNED)"
#define KEYS_OF(js) "JSON_TABLE(" js ", '$[*]' COLUMNS (k " KEY_COL " PATH '$')) j"
#define ROWS_COLS                                                                                  \
    "COLUMNS (p INT PATH '$.p', i VARCHAR(64) CHARACTER SET utf8mb4 PATH '$.i', k " KEY_COL        \
    " PATH '$.k', a BIGINT PATH '$.a', r VARCHAR(16) PATH '$.r', u VARCHAR(64) CHARACTER SET "     \
    "ascii COLLATE ascii_bin PATH '$.u', s VARCHAR(16) PATH '$.s', x BIGINT PATH '$.x')"

static const char *const stmt_sql[ST_COUNT] = {
    /* [id, ...] ascending: locked in that order, each by its primary key. */
    [ST_LOCK] = "SELECT p.id, p.stock FROM JSON_TABLE(?, '$[*]' COLUMNS (id INT PATH '$')) j "
                "STRAIGHT_JOIN product p FORCE INDEX (PRIMARY) ON p.id = j.id FOR UPDATE",
    /* [key, ...] of orders, then [key or <key>@<at_us>, ...] of promises. */
    [ST_PRIORS] = "SELECT o.request_id, o.product_id, " AT_OF("o") ", o.state FROM " KEYS_OF(
        "?") " JOIN orders o ON o.request_id = j.k "
             "UNION ALL SELECT s.request_id, s.product_id, " AT_OF("s") ", NULL FROM " KEYS_OF(
                 "?") " JOIN oversold_promise s ON s.request_id = j.k",
    /* [{"id", "n"}, ...]: n units of product id. */
    [ST_STOCK] = "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id INT PATH '$.id', n INT PATH '$.n')) j "
                 "STRAIGHT_JOIN product p FORCE INDEX (PRIMARY) ON p.id = j.id "
                 "SET p.stock = p.stock - j.n, p.row_version = p.row_version + j.n",
    /* [{"p", "i", "k", "a"[, "u"][, "s", "x"]}, ...]: the orders, in stream order; u the
     * customer (absent: NULL), s "reserved" with x its expiry (absent: sold). */
    [ST_ORDERS] =
        "INSERT INTO orders (product_id, instance, request_id, answered_at, user, state, "
        "expires_at) "
        "SELECT j.p, j.i, j.k, " AT_US("j.a") ", j.u, COALESCE(j.s, 'sold'), "
                                              "IF(j.x IS NULL, NULL, " AT_US(
                                                  "j.x") ") FROM JSON_TABLE(?, '$[*]' " ROWS_COLS
                                                         ") j",
    /* A change entry: the order of key k (product p) takes state s if it is reserved,
     * released_at its at_us when s gives the unit back (db/stockdb_life.c's table: paid
     * keeps it). The state condition makes a redelivery change nothing. */
    [ST_CHANGE] = "UPDATE orders SET state = ?, released_at = IF(? = 'paid', NULL, "
                  "FROM_UNIXTIME(? DIV 1000000) + INTERVAL (? MOD 1000000) MICROSECOND) "
                  "WHERE request_id = ? AND product_id = ? AND state = 'reserved'",
    /* The unit a cancel or an expiry gave back, after ST_CHANGE changed its order. */
    [ST_GIVE_BACK] = "UPDATE product SET stock = stock + 1, row_version = row_version + 1 "
                     "WHERE id = ?",
    /* [{"p", "i", "k", "a", "r"}, ...]: the promises, r their reason. */
    [ST_PROMISES] =
        "INSERT IGNORE INTO oversold_promise "
        "(request_id, product_id, instance, answered_at, reason) "
        "SELECT j.k, j.p, j.i, " AT_US("j.a") ", j.r "
                                              "FROM JSON_TABLE(?, '$[*]' " ROWS_COLS ") j",
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
static const char *const stmt_name[ST_COUNT] = {[ST_LOCK] = "lock the products",
                                                [ST_PRIORS] = "read the keys",
                                                [ST_STOCK] = "update the stock",
                                                [ST_ORDERS] = "insert the orders",
                                                [ST_PROMISES] = "insert the promises",
                                                [ST_CHANGE] = "change an order",
                                                [ST_GIVE_BACK] = "give a unit back",
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

/* ---------------------------------------------------------------- one batch */

static void bind_json(MYSQL_BIND *b, char *json, unsigned long *len) {
    memset(b, 0, sizeof(*b));
    *len = (unsigned long)strlen(json);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = json;
    b->buffer_length = *len;
    b->length = len;
}

/* Executes statement id with its JSON parameters (taken and freed; NULL: out of memory;
 * ST_PRIORS has two, the others one). 0, or WRITER_ERR_DB / _NOMEM with the error
 * recorded. */
static int exec_json(writer_db *db, int id, cJSON *p0, cJSON *p1) {
    char *j0 = p0 ? cJSON_PrintUnformatted(p0) : NULL, *j1 = p1 ? cJSON_PrintUnformatted(p1) : NULL;
    int nparams = id == ST_PRIORS ? 2 : 1;
    int rc = WRITER_OK;
    cJSON_Delete(p0);
    cJSON_Delete(p1);
    if (!j0 || (nparams == 2 && !j1)) {
        snprintf(db->errstr, sizeof(db->errstr), "%s: out of memory", stmt_name[id]);
        rc = WRITER_ERR_NOMEM;
        goto out;
    }
    MYSQL_BIND b[2];
    unsigned long l0, l1;
    bind_json(&b[0], j0, &l0);
    if (nparams == 2) bind_json(&b[1], j1, &l1);
    if (mysql_stmt_bind_param(db->stmt[id], b) || mysql_stmt_execute(db->stmt[id]))
        rc = stmt_fail(db, id);
out:
    free(j0);
    free(j1);
    return rc;
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
    int64_t at_us;  /* -1: no answered_at */
    char state[16]; /* an order's state; "" for a promise */
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
    cJSON *ids = cJSON_CreateArray();
    *np = 0;
    for (unsigned i = 0; ids && i < n; i++) {
        if (i > 0 && order[i]->product == order[i - 1]->product) continue;
        p[(*np)++] = (product_lock){.id = order[i]->product};
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(order[i]->product));
    }
    int rc = exec_json(db, ST_LOCK, ids, NULL);
    if (rc != WRITER_OK) return rc;
    MYSQL_STMT *st = db->stmt[ST_LOCK];
    int32_t id;
    int64_t stock;
    MYSQL_BIND r[2];
    bind_int(&r[0], &id);
    bind_ll(&r[1], &stock);
    if (mysql_stmt_bind_result(st, r) || mysql_stmt_store_result(st)) return stmt_fail(db, ST_LOCK);
    while (mysql_stmt_fetch(st) == 0)
        for (unsigned j = 0; j < *np; j++)
            if (p[j].id == id) p[j].found = true, p[j].stock = stock;
    mysql_stmt_free_result(st);
    return WRITER_OK;
}

/* Step 2: the orders and promises already written under the batch's keys. */
static int read_priors(writer_db *db, writer_entry **order, unsigned n, prior **out, size_t *nout) {
    char rid[STOCKDB_REQUEST_ID_MAX + 1];
    cJSON *keys = cJSON_CreateArray(), *pkeys = cJSON_CreateArray();
    *out = NULL;
    *nout = 0;
    for (unsigned i = 0; keys && pkeys && i < n; i++) {
        reused_id(order[i], rid, sizeof(rid));
        cJSON_AddItemToArray(keys, cJSON_CreateString(order[i]->key));
        cJSON_AddItemToArray(pkeys, cJSON_CreateString(order[i]->key));
        cJSON_AddItemToArray(pkeys, cJSON_CreateString(rid));
    }
    int rc = exec_json(db, ST_PRIORS, keys, pkeys);
    if (rc != WRITER_OK) return rc;
    MYSQL_STMT *st = db->stmt[ST_PRIORS];
    prior x;
    unsigned long idlen = 0, stlen = 0;
    my_bool at_null = 0, st_null = 0;
    MYSQL_BIND r[4];
    memset(r, 0, sizeof(r));
    r[0].buffer_type = MYSQL_TYPE_STRING;
    r[0].buffer = x.id;
    r[0].buffer_length = sizeof(x.id);
    r[0].length = &idlen;
    bind_int(&r[1], &x.product);
    bind_ll(&r[2], &x.at_us);
    r[2].is_null = &at_null;
    r[3].buffer_type = MYSQL_TYPE_STRING;
    r[3].buffer = x.state;
    r[3].buffer_length = sizeof(x.state);
    r[3].length = &stlen;
    r[3].is_null = &st_null;
    if (mysql_stmt_bind_result(st, r) || mysql_stmt_store_result(st))
        return stmt_fail(db, ST_PRIORS);
    size_t rows = (size_t)mysql_stmt_num_rows(st);
    prior *p = rows ? calloc(rows, sizeof(*p)) : NULL;
    if (rows && !p) {
        mysql_stmt_free_result(st);
        return WRITER_ERR_NOMEM;
    }
    while (*nout < rows && mysql_stmt_fetch(st) == 0) {
        x.id[idlen < sizeof(x.id) ? idlen : sizeof(x.id) - 1] = '\0';
        if (at_null) x.at_us = -1;
        x.state[st_null || stlen >= sizeof(x.state) ? 0 : stlen] = '\0';
        p[(*nout)++] = x;
    }
    mysql_stmt_free_result(st);
    *out = p;
    return WRITER_OK;
}

static const prior *find_prior(const prior *p, size_t n, const char *id) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(p[i].id, id) == 0) return &p[i];
    return NULL;
}

/* Whether the change entry order[I] will change its order (step 5), which is so when the
 * order is reserved by then: written reserved before this batch or earlier in it, and not
 * changed by an earlier entry of the batch (a change makes the state final). The products
 * are locked, so no other writer changes the rows meanwhile. */
static bool will_change(writer_entry **order, unsigned i, const prior *pr, size_t npr) {
    const writer_entry *e = order[i];
    bool reserved = false;
    for (size_t k = 0; k < npr; k++)
        if (strcmp(pr[k].id, e->key) == 0 && pr[k].product == e->product &&
            strcmp(pr[k].state, "reserved") == 0)
            reserved = true;
    for (unsigned k = 0; k < i; k++) {
        const writer_entry *x = order[k];
        if (x->product != e->product || strcmp(x->key, e->key) != 0) continue;
        if (x->outcome == WRITER__CHANGE)
            reserved = false;
        else if (x->outcome == WRITER__ORDER)
            reserved = strcmp(x->state, "reserved") == 0;
    }
    return reserved;
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
        if (e->change[0]) { /* applied after the inserts (apply_changes) */
            /* A release's unit is back for the deductions after it, as in Redis, where
             * the script that released it ran before theirs. */
            if (strcmp(e->change, "paid") != 0 && pl[j].found && will_change(order, i, pr, npr))
                pl[j].stock++;
            e->outcome = WRITER__CHANGE;
            continue;
        }
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
            if (strcmp(order[k]->key, e->key) == 0 && order[k]->outcome != WRITER__KEY_REUSED &&
                order[k]->outcome != WRITER__CHANGE)
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

/* One order's or promise's row for ST_ORDERS / ST_PROMISES (reason NULL: an order). */
static void add_row(cJSON *rows, const writer_entry *e, const char *key, const char *reason) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddNumberToObject(o, "p", e->product);
    cJSON_AddStringToObject(o, "i", e->instance);
    cJSON_AddStringToObject(o, "k", key);
    cJSON_AddNumberToObject(o, "a", (double)e->at_us); /* < 2^53: exact */
    if (reason) cJSON_AddStringToObject(o, "r", reason);
    if (!reason && e->user[0]) cJSON_AddStringToObject(o, "u", e->user);
    if (!reason && e->state[0]) {
        cJSON_AddStringToObject(o, "s", e->state);
        cJSON_AddNumberToObject(o, "x", (double)e->expires_us); /* < 2^53: exact */
    }
    cJSON_AddItemToArray(rows, o);
}

/* Step 4: the writes. */
static int write_rows(writer_db *db, writer_entry **order, unsigned n, const product_lock *pl,
                      unsigned npl) {
    char rid[STOCKDB_REQUEST_ID_MAX + 1];
    cJSON *stock = cJSON_CreateArray(), *orders = cJSON_CreateArray(),
          *promises = cJSON_CreateArray();
    int rc = WRITER_OK;
    for (unsigned j = 0; stock && j < npl; j++) {
        if (!pl[j].taken) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", pl[j].id);
        cJSON_AddNumberToObject(o, "n", (double)pl[j].taken);
        cJSON_AddItemToArray(stock, o);
    }
    for (unsigned i = 0; orders && promises && i < n; i++) {
        const writer_entry *e = order[i];
        if (e->outcome == WRITER__ORDER) add_row(orders, e, e->key, NULL);
        if (e->outcome == WRITER__OVERSOLD)
            add_row(promises, e, e->key, e->no_product ? "no_product" : "sold_out");
        if (e->outcome == WRITER__KEY_REUSED) {
            reused_id(e, rid, sizeof(rid));
            add_row(promises, e, rid, "key_reused");
        }
    }
    if (!stock || !orders || !promises) {
        rc = WRITER_ERR_NOMEM;
        goto out;
    }
    /* The arrays are passed on (and freed) one by one; an empty one is not sent. */
    if (cJSON_GetArraySize(stock) > 0) rc = exec_json(db, ST_STOCK, stock, NULL), stock = NULL;
    if (rc == WRITER_OK && cJSON_GetArraySize(orders) > 0)
        rc = exec_json(db, ST_ORDERS, orders, NULL), orders = NULL;
    if (rc == WRITER_OK && cJSON_GetArraySize(promises) > 0)
        rc = exec_json(db, ST_PROMISES, promises, NULL), promises = NULL;
out:
    cJSON_Delete(stock);
    cJSON_Delete(orders);
    cJSON_Delete(promises);
    return rc;
}

/* Step 5: the change entries, after the orders they change were inserted (in this batch
 * or before: a change follows its order in the stream), in stream order per product (the
 * order within a product is kept by the sort). A cancel or an expiry that changed its
 * order gives the unit back to the product's stock, so that MariaDB's stock stays
 * initial + restocks - orders holding a unit (docs/orders.md). */
static int apply_changes(writer_db *db, writer_entry **order, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        writer_entry *e = order[i];
        if (e->outcome != WRITER__CHANGE) continue;
        MYSQL_BIND p[6];
        unsigned long slen = (unsigned long)strlen(e->change), klen = (unsigned long)strlen(e->key);
        memset(p, 0, sizeof(p));
        for (int b = 0; b < 2; b++) {
            p[b].buffer_type = MYSQL_TYPE_STRING;
            p[b].buffer = e->change;
            p[b].buffer_length = slen;
            p[b].length = &slen;
        }
        bind_ll(&p[2], &e->at_us);
        bind_ll(&p[3], &e->at_us);
        p[4].buffer_type = MYSQL_TYPE_STRING;
        p[4].buffer = e->key;
        p[4].buffer_length = klen;
        p[4].length = &klen;
        bind_int(&p[5], &e->product);
        MYSQL_STMT *st = db->stmt[ST_CHANGE];
        if (mysql_stmt_bind_param(st, p) || mysql_stmt_execute(st)) return stmt_fail(db, ST_CHANGE);
        if (mysql_stmt_affected_rows(st) != 1 || strcmp(e->change, "paid") == 0) continue;
        st = db->stmt[ST_GIVE_BACK];
        if (mysql_stmt_bind_param(st, &p[5]) || mysql_stmt_execute(st))
            return stmt_fail(db, ST_GIVE_BACK);
    }
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
    if (rc == WRITER_OK) rc = apply_changes(db, order, n);
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
