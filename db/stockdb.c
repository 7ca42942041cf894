/* stockdb.c: the stock-deduction transaction on MariaDB Connector/C (see stockdb.h).
 *
 * A handle owns one MYSQL connection and the prepared statements below; both are made
 * together by db_connect() and dropped together by db_disconnect(), so "connected" and
 * "statements prepared" are one state. Every failure goes through deduct_fail(), which
 * decides between three ends: the connection is gone (drop it; retry only if no
 * transaction was open), the server refused a statement (roll back, report), or the
 * server picked us as a lock victim (roll back, STOCKDB_ERR_DEADLOCK). A COMMIT whose
 * reply was lost is the one case that cannot be decided locally: confirm_commit() asks
 * the database whether the order exists. */
#include "stockdb.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

/* ---------------------------------------------------------------- statements */

enum {
    ST_LOOKUP,          /* an order by request id, with its product's stock now */
    ST_CONFIRM,         /* the same, as a locking read: waits for an in-flight twin */
    ST_READ,            /* the seed's read */
    ST_READ_FOR_UPDATE, /* the read that takes the row lock */
    ST_UPDATE,          /* the seed's unconditional update */
    ST_UPDATE_FENCED,   /* the same, refused unless the fence is as we read it */
    ST_UPDATE_ATOMIC,   /* the check inside the update */
    ST_UPDATE_ATOMIC_FENCED,
    ST_INSERT,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_LOOKUP] = "SELECT o.id, o.product_id, p.stock FROM orders o"
                  " LEFT JOIN product p ON p.id = o.product_id WHERE o.request_id = ?",
    [ST_CONFIRM] = "SELECT id, product_id FROM orders WHERE request_id = ? LOCK IN SHARE MODE",
    [ST_READ] = "SELECT stock, fence FROM product WHERE id = ?",
    [ST_READ_FOR_UPDATE] = "SELECT stock, fence FROM product WHERE id = ? FOR UPDATE",
    [ST_UPDATE] = "UPDATE product SET stock = stock - 1 WHERE id = ?",
    /* Compare-and-set on the fence: the row must still carry the fence our check read
     * (nobody wrote in between) and it must not be newer than our token. */
    [ST_UPDATE_FENCED] = "UPDATE product SET stock = stock - 1, fence = ?"
                         " WHERE id = ? AND fence = ? AND fence <= ?",
    [ST_UPDATE_ATOMIC] = "UPDATE product SET stock = stock - 1 WHERE id = ? AND stock > 0",
    [ST_UPDATE_ATOMIC_FENCED] = "UPDATE product SET stock = stock - 1, fence = ?"
                                " WHERE id = ? AND stock > 0 AND fence <= ?",
    [ST_INSERT] =
        "INSERT INTO orders (product_id, instance, fence, request_id) VALUES (?, ?, ?, ?)",
};

/* Short names for error messages. */
static const char *const stmt_name[ST_COUNT] = {
    [ST_LOOKUP] = "SELECT order by request id",
    [ST_CONFIRM] = "SELECT order to confirm COMMIT",
    [ST_READ] = "SELECT stock, fence",
    [ST_READ_FOR_UPDATE] = "SELECT stock, fence FOR UPDATE",
    [ST_UPDATE] = "UPDATE product",
    [ST_UPDATE_FENCED] = "UPDATE product (fenced)",
    [ST_UPDATE_ATOMIC] = "UPDATE product (atomic)",
    [ST_UPDATE_ATOMIC_FENCED] = "UPDATE product (atomic, fenced)",
    [ST_INSERT] = "INSERT INTO orders",
};

static const char sql_begin[] = "START TRANSACTION";
static const char sql_lock_wait[] = "SET SESSION innodb_lock_wait_timeout = ?";

/* ---------------------------------------------------------------- the handle */

struct stockdb {
    stockdb_config cfg;
    char instance[STOCKDB_INSTANCE_MAX + 1];
    MYSQL *conn;                /* NULL while disconnected */
    MYSQL_STMT *stmt[ST_COUNT]; /* all prepared while conn != NULL, else all NULL */
    char errstr[512];
};

/* Internal result of one attempt: the connection dropped while no transaction was open,
 * so the caller may reconnect and run the whole call again. Never returned to users. */
#define RETRY_IDLE 1

/* Handles made by this thread, so that mysql_thread_end runs after the last one. */
static _Thread_local unsigned thread_handles;

static void set_err(stockdb *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_err(stockdb *db, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(db->errstr, sizeof(db->errstr), fmt, ap);
    va_end(ap);
}

/* True for the errors after which the connection cannot be used again: the server went
 * away, the network failed, or the server killed or is shutting down this session. */
static bool is_gone(unsigned err) {
    switch (err) {
    case CR_CONNECTION_ERROR:
    case CR_CONN_HOST_ERROR:
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case CR_SERVER_LOST_EXTENDED:
    case CR_COMMANDS_OUT_OF_SYNC: /* protocol state unknown: only a new session is safe */
    case CR_ERR_NET_READ:
    case CR_ERR_NET_WRITE:
    case ER_SERVER_SHUTDOWN:
    case ER_CONNECTION_KILLED:
        return true;
    default:
        return false;
    }
}

static bool is_lock_victim(unsigned err) {
    return err == ER_LOCK_DEADLOCK || err == ER_LOCK_WAIT_TIMEOUT;
}

static void db_disconnect(stockdb *db) {
    for (int i = 0; i < ST_COUNT; i++) {
        if (db->stmt[i]) mysql_stmt_close(db->stmt[i]);
        db->stmt[i] = NULL;
    }
    if (db->conn) mysql_close(db->conn);
    db->conn = NULL;
}

/* Caps the session's row-lock wait below the client's read timeout (see stockdb.h). */
static unsigned set_lock_wait(stockdb *db, unsigned rw_timeout_s) {
    MYSQL_STMT *st = mysql_stmt_init(db->conn);
    if (!st) return CR_OUT_OF_MEMORY;
    unsigned err = 0;
    long long secs = rw_timeout_s > 2 ? rw_timeout_s - 2 : 1;
    MYSQL_BIND b;
    memset(&b, 0, sizeof(b));
    b.buffer_type = MYSQL_TYPE_LONGLONG;
    b.buffer = &secs;
    if (mysql_stmt_prepare(st, sql_lock_wait, sizeof(sql_lock_wait) - 1) ||
        mysql_stmt_bind_param(st, &b) || mysql_stmt_execute(st)) {
        err = mysql_stmt_errno(st);
        set_err(db, "%s: %s (%u)", sql_lock_wait, mysql_stmt_error(st), err);
    }
    mysql_stmt_close(st);
    return err;
}

/* Connects and prepares every statement, unless already connected. On failure the
 * handle stays disconnected and the next call tries again. */
static int db_connect(stockdb *db) {
    if (db->conn) return STOCKDB_OK;
    const stockdb_config *c = &db->cfg;
    unsigned connect_s = c->connect_timeout_s ? c->connect_timeout_s : 2;
    unsigned rw_s = c->rw_timeout_s ? c->rw_timeout_s : 10;
    unsigned protocol = MYSQL_PROTOCOL_TCP;
    unsigned err;

    db->conn = mysql_init(NULL);
    if (!db->conn) {
        set_err(db, "mysql_init: out of memory");
        return STOCKDB_ERR_NOMEM;
    }
    mysql_options(db->conn, MYSQL_OPT_CONNECT_TIMEOUT, &connect_s);
    mysql_options(db->conn, MYSQL_OPT_READ_TIMEOUT, &rw_s);
    mysql_options(db->conn, MYSQL_OPT_WRITE_TIMEOUT, &rw_s);
    mysql_options(db->conn, MYSQL_OPT_PROTOCOL, &protocol);
    mysql_options(db->conn, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    /* CLIENT_FOUND_ROWS: an UPDATE reports the rows it matched, so "0 rows" means the
     * WHERE refused, never "matched but unchanged". */
    if (!mysql_real_connect(db->conn, c->host, c->user, c->password, c->database, c->port, NULL,
                            CLIENT_FOUND_ROWS)) {
        err = mysql_errno(db->conn);
        set_err(db, "connect to %s:%u/%s: %s (%u)", c->host, c->port, c->database,
                mysql_error(db->conn), err);
        db_disconnect(db);
        return err == CR_OUT_OF_MEMORY ? STOCKDB_ERR_NOMEM : STOCKDB_ERR_CONNECT;
    }
    for (int i = 0; i < ST_COUNT; i++) {
        db->stmt[i] = mysql_stmt_init(db->conn);
        if (!db->stmt[i]) {
            set_err(db, "mysql_stmt_init: out of memory");
            db_disconnect(db);
            return STOCKDB_ERR_NOMEM;
        }
        if (mysql_stmt_prepare(db->stmt[i], stmt_sql[i], strlen(stmt_sql[i]))) {
            err = mysql_stmt_errno(db->stmt[i]);
            set_err(db, "prepare %s: %s (%u)", stmt_name[i], mysql_stmt_error(db->stmt[i]), err);
            db_disconnect(db);
            return is_gone(err) ? STOCKDB_ERR_CONNECT : STOCKDB_ERR_QUERY;
        }
    }
    if ((err = set_lock_wait(db, rw_s)) != 0) {
        db_disconnect(db);
        return is_gone(err) ? STOCKDB_ERR_CONNECT : STOCKDB_ERR_QUERY;
    }
    return STOCKDB_OK;
}

/* ---------------------------------------------------------------- running statements */

static void bind_int(MYSQL_BIND *b, int32_t *v, my_bool *is_null) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONG;
    b->buffer = v;
    b->is_null = is_null;
}

static void bind_bigint(MYSQL_BIND *b, int64_t *v, my_bool *is_null) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_null = is_null;
}

static void bind_ubigint(MYSQL_BIND *b, uint64_t *v) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_unsigned = 1;
}

/* A string parameter; NULL s binds SQL NULL. */
static void bind_text(MYSQL_BIND *b, const char *s, unsigned long *len) {
    memset(b, 0, sizeof(*b));
    if (!s) {
        b->buffer_type = MYSQL_TYPE_NULL;
        return;
    }
    *len = strlen(s);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = (void *)s;
    b->buffer_length = *len;
    b->length = len;
}

/* Executes statement id with params. With results, fetches at most one row into them
 * and sets *found; otherwise sets *rows to the rows the statement matched. Returns 0 or
 * the client/server error number, with the text in db->errstr. */
static unsigned stmt_run(stockdb *db, int id, MYSQL_BIND *params, MYSQL_BIND *results, bool *found,
                         uint64_t *rows) {
    MYSQL_STMT *st = db->stmt[id];
    unsigned err = 0;

    if (mysql_stmt_bind_param(st, params) || mysql_stmt_execute(st)) goto fail;
    if (!results) {
        if (rows) *rows = mysql_stmt_affected_rows(st);
        return 0;
    }
    if (mysql_stmt_bind_result(st, results) || mysql_stmt_store_result(st)) goto fail;
    int rc = mysql_stmt_fetch(st);
    if (rc == 1) goto fail;
    /* Every query here selects by a unique key, so there is at most one row and its
     * columns are all integers: truncation cannot happen. */
    *found = rc == 0 || rc == MYSQL_DATA_TRUNCATED;
    mysql_stmt_free_result(st);
    return 0;

fail:
    err = mysql_stmt_errno(st);
    set_err(db, "%s: %s (%u)", stmt_name[id], mysql_stmt_error(st), err);
    mysql_stmt_free_result(st);
    return err ? err : CR_UNKNOWN_ERROR;
}

/* Ends the open transaction. If even that fails, the connection is dropped, which makes
 * the server roll back: either way nothing of the transaction survives. The error text
 * of the failure that led here is kept. */
static void rollback(stockdb *db) {
    if (db->conn && mysql_rollback(db->conn)) db_disconnect(db);
}

/* The end of a deduction after statement error err (text already in errstr). */
static int deduct_fail(stockdb *db, unsigned err, bool in_trx) {
    if (is_gone(err)) {
        db_disconnect(db);
        if (!in_trx) return RETRY_IDLE;
        size_t n = strlen(db->errstr);
        snprintf(db->errstr + n, sizeof(db->errstr) - n,
                 "; connection lost inside the transaction, which the server rolls back");
        return STOCKDB_ERR_CONNECT;
    }
    if (in_trx) rollback(db);
    return is_lock_victim(err) ? STOCKDB_ERR_DEADLOCK : STOCKDB_ERR_QUERY;
}

/* Looks up the order of req->request_id (statement ST_LOOKUP or ST_CONFIRM). Sets
 * *found, and when found *order_id, *product_id and (ST_LOOKUP only) *stock. */
static unsigned lookup_order(stockdb *db, int id, const char *request_id, bool *found,
                             uint64_t *order_id, int32_t *product_id, int32_t *stock) {
    MYSQL_BIND p[1], r[3];
    unsigned long len;
    my_bool stock_null = 0;
    *stock = 0;
    bind_text(&p[0], request_id, &len);
    bind_ubigint(&r[0], order_id);
    bind_int(&r[1], product_id, NULL);
    bind_int(&r[2], stock, &stock_null);
    unsigned err = stmt_run(db, id, p, r, found, NULL);
    if (stock_null) *stock = 0;
    return err;
}

/* Fills *out as the replay of an existing order, or refuses a key of another product. */
static int replay(stockdb *db, const stockdb_request *req, uint64_t order_id, int32_t product_id,
                  int32_t stock, stockdb_result *out) {
    if (product_id != req->product_id) {
        set_err(db, "request id \"%s\" was already used for product %d, not %d", req->request_id,
                product_id, req->product_id);
        return STOCKDB_ERR_QUERY;
    }
    out->outcome = STOCKDB_DEDUCTED;
    out->stock = stock;
    out->order_id = order_id;
    out->replayed = true;
    return STOCKDB_OK;
}

/* COMMIT failed because the connection dropped: the transaction may or may not have
 * committed. Only the order row can tell, and only if it carries a request id. The
 * lookup is a locking read so that, should the old session still be finishing its
 * COMMIT or rollback on the server, it waits for that instead of reading too early. */
static int confirm_commit(stockdb *db, const stockdb_request *req, uint64_t order_id,
                          stockdb_result *out) {
    char why[sizeof(db->errstr)];
    snprintf(why, sizeof(why), "%s", db->errstr);
    db_disconnect(db);
    if (!req->request_id) {
        set_err(db, "%s; COMMIT reply lost and no request id to confirm it", why);
        return STOCKDB_ERR_UNKNOWN;
    }
    if (db_connect(db) != STOCKDB_OK) {
        char detail[sizeof(db->errstr)];
        snprintf(detail, sizeof(detail), "%s", db->errstr);
        set_err(db, "%s; COMMIT reply lost and reconnecting to confirm failed: %s", why, detail);
        return STOCKDB_ERR_UNKNOWN;
    }
    bool found = false;
    uint64_t found_id = 0;
    int32_t product_id = 0, unused;
    unsigned err =
        lookup_order(db, ST_CONFIRM, req->request_id, &found, &found_id, &product_id, &unused);
    if (err) {
        if (is_gone(err)) db_disconnect(db);
        char detail[sizeof(db->errstr)];
        snprintf(detail, sizeof(detail), "%s", db->errstr);
        set_err(db, "%s; COMMIT reply lost and the lookup to confirm it failed: %s", why, detail);
        return STOCKDB_ERR_UNKNOWN;
    }
    if (!found) {
        set_err(db, "%s; COMMIT reply lost, and the order is not in the database: not committed",
                why);
        return STOCKDB_ERR_CONNECT;
    }
    if (found_id != order_id) {
        /* A twin with the same key committed instead of us: it is the first order. */
        return replay(db, req, found_id, product_id, out->stock, out);
    }
    out->outcome = STOCKDB_DEDUCTED;
    out->order_id = order_id;
    db->errstr[0] = '\0';
    return STOCKDB_OK;
}

/* ---------------------------------------------------------------- the deduction */

/* One attempt at the deduction on a connected handle. Returns a STOCKDB_* code, or
 * RETRY_IDLE when the connection dropped before the transaction began. */
/* Binds the parameters of the UPDATE statements: (id) unfenced; fenced, (fence, id,
 * fence) for the atomic one and (fence, id, seen, fence) for the read-check-update
 * one, where seen is the fence its check read (seen == NULL for atomic). */
static void bind_update(MYSQL_BIND *p, bool fenced, int64_t *fence, int32_t *pid, int64_t *seen) {
    if (!fenced) {
        bind_int(&p[0], pid, NULL);
        return;
    }
    bind_bigint(&p[0], fence, NULL);
    bind_int(&p[1], pid, NULL);
    if (seen) bind_bigint(&p[2], seen, NULL);
    bind_bigint(&p[seen ? 3 : 2], fence, NULL);
}

static int deduct_once(stockdb *db, stockdb_strategy strategy, const stockdb_request *req,
                       stockdb_result *out) {
    int32_t pid = req->product_id, stock = 0, found_pid = 0, found_stock = 0;
    int64_t fence = req->fence;
    uint64_t rows = 0, order_id = 0;
    bool found = false, fenced = fence > 0;
    unsigned err;

    /* A key seen before is answered from its order, without touching the stock. */
    if (req->request_id) {
        err = lookup_order(db, ST_LOOKUP, req->request_id, &found, &order_id, &found_pid,
                           &found_stock);
        if (err) return deduct_fail(db, err, false);
        if (found) return replay(db, req, order_id, found_pid, found_stock, out);
    }

    if (mysql_real_query(db->conn, sql_begin, sizeof(sql_begin) - 1)) {
        err = mysql_errno(db->conn);
        set_err(db, "%s: %s (%u)", sql_begin, mysql_error(db->conn), err);
        return deduct_fail(db, err, false);
    }

    MYSQL_BIND p[4], r[2];
    int64_t seen = 0; /* product.fence as the check read it */
    if (strategy == STOCKDB_ATOMIC) {
        int id = fenced ? ST_UPDATE_ATOMIC_FENCED : ST_UPDATE_ATOMIC;
        bind_update(p, fenced, &fence, &pid, NULL);
        if ((err = stmt_run(db, id, p, NULL, NULL, &rows))) return deduct_fail(db, err, true);
        if (rows == 0) {
            /* Nothing changed: one read says why. We hold the row's lock (or the gap's,
             * when there is no row) since the UPDATE, so the read agrees with it. */
            int64_t row_fence = 0;
            bind_int(&p[0], &pid, NULL);
            bind_int(&r[0], &stock, NULL);
            bind_bigint(&r[1], &row_fence, NULL);
            if ((err = stmt_run(db, ST_READ, p, r, &found, NULL)))
                return deduct_fail(db, err, true);
            rollback(db);
            if (!found) goto not_found;
            if (fenced && row_fence > fence) goto fenced_out;
            if (stock <= 0) goto sold_out;
            set_err(db, "%s changed no row although product %d has stock %d", stmt_name[id], pid,
                    stock);
            return STOCKDB_ERR_QUERY;
        }
        /* The stock this deduction left, read under our own row lock. */
        bind_int(&p[0], &pid, NULL);
        bind_int(&r[0], &stock, NULL);
        bind_bigint(&r[1], &seen, NULL);
        if ((err = stmt_run(db, ST_READ, p, r, &found, NULL))) return deduct_fail(db, err, true);
        out->stock = stock;
    } else {
        /* The seed's check: read, and answer sold out at zero. Without FOR UPDATE (and
         * without an outside lock) the value read may already be stale. */
        int id = strategy == STOCKDB_FOR_UPDATE ? ST_READ_FOR_UPDATE : ST_READ;
        bind_int(&p[0], &pid, NULL);
        bind_int(&r[0], &stock, NULL);
        bind_bigint(&r[1], &seen, NULL);
        if ((err = stmt_run(db, id, p, r, &found, NULL))) return deduct_fail(db, err, true);
        if (!found) {
            rollback(db);
            goto not_found;
        }
        if (fenced && seen > fence) {
            /* A newer holder has written already: nothing we read can be trusted. */
            rollback(db);
            goto fenced_out;
        }
        if (stock <= 0) {
            rollback(db);
            goto sold_out;
        }
        if (req->think_us) {
            /* The experiment's stand-in for the business logic a real service runs
             * between its check and its write (see stockdb_request.think_us). */
            struct timespec ts = {req->think_us / 1000000, (long)(req->think_us % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
        /* Deliberately not "AND stock > 0": see stockdb.h. */
        id = fenced ? ST_UPDATE_FENCED : ST_UPDATE;
        /* Fenced, the write also proves that nobody wrote since our check: a holder
         * that was paused past its session may write between a newer holder's check and
         * its write, with its older token (the newer one has not raised the fence yet).
         * The fence alone would let both writes through; the compare-and-set on the
         * fence we read refuses the second. */
        bind_update(p, fenced, &fence, &pid, &seen);
        if ((err = stmt_run(db, id, p, NULL, NULL, &rows))) return deduct_fail(db, err, true);
        if (rows == 0) {
            rollback(db);
            if (fenced) goto fenced_out;
            goto not_found; /* the row was deleted after our read */
        }
        out->stock = stock - 1;
    }

    /* The ledger row, in the same transaction as the stock change. */
    MYSQL_BIND ins[4];
    unsigned long instance_len, rid_len;
    my_bool fence_null = !fenced;
    bind_int(&ins[0], &pid, NULL);
    bind_text(&ins[1], db->instance, &instance_len);
    bind_bigint(&ins[2], &fence, &fence_null);
    bind_text(&ins[3], req->request_id, &rid_len);
    if ((err = stmt_run(db, ST_INSERT, ins, NULL, NULL, &rows))) {
        if (err != ER_DUP_ENTRY || !req->request_id) return deduct_fail(db, err, true);
        /* A twin with the same key committed between our lookup and our INSERT (InnoDB
         * made the INSERT wait for it). Ours is undone; the twin's order is the answer. */
        rollback(db);
        char dup[sizeof(db->errstr)];
        snprintf(dup, sizeof(dup), "%s", db->errstr);
        err = lookup_order(db, ST_LOOKUP, req->request_id, &found, &order_id, &found_pid,
                           &found_stock);
        if (err) return deduct_fail(db, err, false);
        if (!found) {
            set_err(db, "%s, but no order with that request id exists", dup);
            return STOCKDB_ERR_QUERY;
        }
        return replay(db, req, order_id, found_pid, found_stock, out);
    }
    order_id = mysql_stmt_insert_id(db->stmt[ST_INSERT]);

    if (req->guard && req->guard(req->guard_arg) != 0) {
        rollback(db);
        set_err(db, "the guard refused the commit; rolled back");
        return STOCKDB_ERR_GUARD;
    }

    if (mysql_commit(db->conn)) {
        err = mysql_errno(db->conn);
        set_err(db, "COMMIT: %s (%u)", mysql_error(db->conn), err);
        if (is_gone(err)) return confirm_commit(db, req, order_id, out);
        /* The server answered, so it did not commit. */
        return deduct_fail(db, err, true);
    }
    out->outcome = STOCKDB_DEDUCTED;
    out->order_id = order_id;
    return STOCKDB_OK;

sold_out:
    /* A twin with the same key may have taken the last unit: its order is our answer. */
    if (req->request_id) {
        err = lookup_order(db, ST_LOOKUP, req->request_id, &found, &order_id, &found_pid,
                           &found_stock);
        if (err) return deduct_fail(db, err, false);
        if (found) return replay(db, req, order_id, found_pid, found_stock, out);
    }
    out->outcome = STOCKDB_SOLD_OUT;
    out->stock = stock;
    return STOCKDB_OK;
not_found:
    set_err(db, "no product with id %d", pid);
    return STOCKDB_ERR_NOT_FOUND;
fenced_out:
    set_err(db, "product %d was written under a newer lock token than %lld; rolled back", pid,
            (long long)fence);
    return STOCKDB_ERR_FENCED;
}

/* ---------------------------------------------------------------- public API */

int stockdb_global_init(void) {
    return mysql_library_init(0, NULL, NULL) ? STOCKDB_ERR_NOMEM : STOCKDB_OK;
}

void stockdb_global_end(void) {
    mysql_library_end();
}

stockdb *stockdb_new(const stockdb_config *cfg, const char *instance) {
    if (!cfg) return NULL;
    if (!instance) instance = "";
    size_t n = strlen(instance);
    if (n > STOCKDB_INSTANCE_MAX) return NULL;
    stockdb *db = calloc(1, sizeof(*db));
    if (!db) return NULL;
    if (thread_handles == 0 && mysql_thread_init()) {
        free(db);
        return NULL;
    }
    thread_handles++;
    db->cfg = *cfg;
    memcpy(db->instance, instance, n + 1);
    /* One eager attempt, so a bad password shows up at start; failure is not fatal. */
    (void)db_connect(db);
    return db;
}

void stockdb_free(stockdb *db) {
    if (!db) return;
    db_disconnect(db);
    memset(db->cfg.password, 0, sizeof(db->cfg.password));
    free(db);
    if (thread_handles > 0 && --thread_handles == 0) mysql_thread_end();
}

int stockdb_deduct(stockdb *db, stockdb_strategy strategy, const stockdb_request *req,
                   stockdb_result *out) {
    if (!db) return STOCKDB_ERR_CONFIG;
    db->errstr[0] = '\0';
    if (!req || !out) {
        set_err(db, "stockdb_deduct: req and out are required");
        return STOCKDB_ERR_CONFIG;
    }
    if (strategy != STOCKDB_READ_CHECK_UPDATE && strategy != STOCKDB_FOR_UPDATE &&
        strategy != STOCKDB_ATOMIC) {
        set_err(db, "stockdb_deduct: unknown strategy %d", (int)strategy);
        return STOCKDB_ERR_CONFIG;
    }
    if (req->request_id) {
        size_t n = strlen(req->request_id);
        if (n == 0 || n > STOCKDB_REQUEST_ID_MAX) {
            set_err(db, "stockdb_deduct: request id must be 1..%d bytes, not %zu",
                    STOCKDB_REQUEST_ID_MAX, n);
            return STOCKDB_ERR_CONFIG;
        }
    }
    if (req->fence < 0) {
        set_err(db, "stockdb_deduct: negative fence %lld", (long long)req->fence);
        return STOCKDB_ERR_CONFIG;
    }
    for (int attempt = 0;; attempt++) {
        memset(out, 0, sizeof(*out));
        int rc = db_connect(db);
        if (rc != STOCKDB_OK) return rc;
        rc = deduct_once(db, strategy, req, out);
        if (rc != RETRY_IDLE) return rc;
        if (attempt == 1) return STOCKDB_ERR_CONNECT; /* errstr says why */
    }
}

int stockdb_get_stock(stockdb *db, int32_t product_id, int32_t *stock) {
    if (!db) return STOCKDB_ERR_CONFIG;
    db->errstr[0] = '\0';
    if (!stock) {
        set_err(db, "stockdb_get_stock: stock is required");
        return STOCKDB_ERR_CONFIG;
    }
    for (int attempt = 0;; attempt++) {
        int rc = db_connect(db);
        if (rc != STOCKDB_OK) return rc;
        MYSQL_BIND p[1], r[2];
        int32_t pid = product_id, value = 0;
        int64_t fence = 0;
        bool found = false;
        bind_int(&p[0], &pid, NULL);
        bind_int(&r[0], &value, NULL);
        bind_bigint(&r[1], &fence, NULL);
        unsigned err = stmt_run(db, ST_READ, p, r, &found, NULL);
        if (!err) {
            if (!found) {
                set_err(db, "no product with id %d", product_id);
                return STOCKDB_ERR_NOT_FOUND;
            }
            *stock = value;
            return STOCKDB_OK;
        }
        rc = deduct_fail(db, err, false);
        if (rc != RETRY_IDLE) return rc;
        if (attempt == 1) return STOCKDB_ERR_CONNECT;
    }
}

int stockdb_ping(stockdb *db) {
    if (!db) return STOCKDB_ERR_CONFIG;
    db->errstr[0] = '\0';
    for (int attempt = 0;; attempt++) {
        int rc = db_connect(db);
        if (rc != STOCKDB_OK) return rc;
        if (mysql_ping(db->conn) == 0) return STOCKDB_OK;
        unsigned err = mysql_errno(db->conn);
        set_err(db, "ping: %s (%u)", mysql_error(db->conn), err);
        db_disconnect(db);
        if (!is_gone(err)) return STOCKDB_ERR_QUERY;
        if (attempt == 1) return STOCKDB_ERR_CONNECT;
    }
}

const char *stockdb_errstr(const stockdb *db) {
    return db ? db->errstr : "";
}

const char *stockdb_strerror(int code) {
    switch (code) {
    case STOCKDB_OK:
        return "ok";
    case STOCKDB_ERR_CONFIG:
        return "bad configuration or argument";
    case STOCKDB_ERR_CONNECT:
        return "database unreachable; nothing committed";
    case STOCKDB_ERR_QUERY:
        return "database statement failed; rolled back";
    case STOCKDB_ERR_NOT_FOUND:
        return "no such product";
    case STOCKDB_ERR_FENCED:
        return "refused: a newer lock holder wrote the row";
    case STOCKDB_ERR_GUARD:
        return "refused by the guard before commit; rolled back";
    case STOCKDB_ERR_UNKNOWN:
        return "commit outcome unknown";
    case STOCKDB_ERR_NOMEM:
        return "out of memory";
    case STOCKDB_ERR_DEADLOCK:
        return "deadlock or lock wait timeout; rolled back";
    default:
        return "unknown error code";
    }
}

/* ---------------------------------------------------------------- URL parsing */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Copies [s, s+n) into dst (size cap) decoding %XX. Refuses raw characters in `forbid`,
 * controls, spaces, bad escapes, %00, and results that do not fit. */
static bool url_decode(char *dst, size_t cap, const char *s, size_t n, const char *forbid) {
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == 0x7f || strchr(forbid, c)) return false;
        if (c == '%') {
            if (i + 2 >= n) return false;
            int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
            if (h < 0 || l < 0) return false;
            c = (unsigned char)(h * 16 + l);
            if (c == 0) return false;
            i += 2;
        }
        if (out + 1 >= cap) return false;
        dst[out++] = (char)c;
    }
    dst[out] = '\0';
    return true;
}

/* True if [s, s+n) is non-empty, made only of `allowed` plus letters and digits, and
 * fits (with its NUL) in cap bytes. */
static bool plain_token(const char *s, size_t n, size_t cap, const char *allowed) {
    if (n == 0 || n >= cap) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (c == '\0' || !strchr(allowed, c))) return false;
    }
    return true;
}

int stockdb_config_from_url(stockdb_config *cfg, const char *url) {
    static const char scheme[] = "mysql://";
    if (!cfg || !url || strncmp(url, scheme, sizeof(scheme) - 1) != 0) return STOCKDB_ERR_CONFIG;
    stockdb_config c = *cfg;
    const char *auth = url + sizeof(scheme) - 1;
    const char *slash = strchr(auth, '/');
    if (!slash) return STOCKDB_ERR_CONFIG;
    const char *at = memchr(auth, '@', (size_t)(slash - auth));
    if (!at || memchr(at + 1, '@', (size_t)(slash - at - 1))) return STOCKDB_ERR_CONFIG;

    /* USER[:PASS] */
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    const char *user_end = colon ? colon : at;
    if (user_end == auth) return STOCKDB_ERR_CONFIG;
    if (!url_decode(c.user, sizeof(c.user), auth, (size_t)(user_end - auth), "@/?#"))
        return STOCKDB_ERR_CONFIG;
    if (colon &&
        !url_decode(c.password, sizeof(c.password), colon + 1, (size_t)(at - colon - 1), "@/?#"))
        return STOCKDB_ERR_CONFIG;

    /* HOST[:PORT] */
    const char *host = at + 1, *host_end, *port = NULL;
    if (*host == '[') {
        const char *close = memchr(host, ']', (size_t)(slash - host));
        if (!close) return STOCKDB_ERR_CONFIG;
        host++;
        host_end = close;
        if (close + 1 != slash) {
            if (close[1] != ':') return STOCKDB_ERR_CONFIG;
            port = close + 2;
        }
        if (!plain_token(host, (size_t)(host_end - host), sizeof(c.host), ":.") ||
            !memchr(host, ':', (size_t)(host_end - host)))
            return STOCKDB_ERR_CONFIG;
    } else {
        const char *pc = memchr(host, ':', (size_t)(slash - host));
        host_end = pc ? pc : slash;
        if (pc) port = pc + 1;
        if (!plain_token(host, (size_t)(host_end - host), sizeof(c.host), ".-_"))
            return STOCKDB_ERR_CONFIG;
    }
    memcpy(c.host, host, (size_t)(host_end - host));
    c.host[host_end - host] = '\0';
    c.port = 3306;
    if (port) {
        size_t n = (size_t)(slash - port);
        if (n == 0 || n > 5) return STOCKDB_ERR_CONFIG;
        unsigned v = 0;
        for (size_t i = 0; i < n; i++) {
            if (port[i] < '0' || port[i] > '9') return STOCKDB_ERR_CONFIG;
            v = v * 10 + (unsigned)(port[i] - '0');
        }
        if (v == 0 || v > 65535) return STOCKDB_ERR_CONFIG;
        c.port = v;
    }

    /* /DB */
    const char *dbname = slash + 1;
    size_t n = strlen(dbname);
    if (!plain_token(dbname, n, sizeof(c.database), "_$-")) return STOCKDB_ERR_CONFIG;
    memcpy(c.database, dbname, n + 1);

    *cfg = c;
    return STOCKDB_OK;
}
