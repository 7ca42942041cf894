/* stockdb_deduct.c: one deduction per request (stockdb.h's stockdb_deduct), and the ends
 * every deduction shares with the batch.
 *
 * READ_CHECK_UPDATE and FOR_UPDATE are a batch of one (stockdb_batch.c), so that a
 * request and a batch take the same path through the check, the fenced write and the
 * ledger. ATOMIC is its own path here: the check is inside the UPDATE, so there is nothing
 * to batch, and only when the UPDATE changes no row does one read tell why. What both
 * paths share lives here too: a key's order (look it up, replay it or refuse a key of
 * another product) and a COMMIT whose reply was lost, which cannot be decided locally:
 * stockdb__confirm_key() asks the database whether the order exists. */
#include "stockdb_int.h"

#include <stdio.h>
#include <string.h>

#include <mysql.h>

/* ---------------------------------------------------------------- orders */

int stockdb__lookup_order(stockdb *db, int id, const char *request_id, bool *found,
                          uint64_t *order_id, int32_t *product_id, int32_t *stock) {
    MYSQL_BIND p[1], r[3];
    unsigned long len;
    my_bool stock_null = 0;
    *stock = 0;
    stockdb__bind_text(&p[0], request_id, &len);
    stockdb__bind_ubigint(&r[0], order_id);
    stockdb__bind_int(&r[1], product_id, NULL);
    stockdb__bind_int(&r[2], stock, &stock_null);
    int rc = stockdb__run(db, id, p, r, found, NULL);
    if (stock_null) *stock = 0;
    return rc;
}

int stockdb__replay(stockdb *db, int32_t want_product, const char *request_id, uint64_t order_id,
                    int32_t product_id, int32_t stock, stockdb_result *out) {
    if (product_id != want_product) {
        stockdb__set_err(db, "request id \"%s\" was already used for product %d, not %d",
                         request_id, product_id, want_product);
        return STOCKDB_ERR_KEY_REUSED;
    }
    out->outcome = STOCKDB_DEDUCTED;
    out->stock = stock;
    out->order_id = order_id;
    out->replayed = true;
    return STOCKDB_OK;
}

/* Ends an earlier session of this handle whose COMMIT may be in doubt. */
static const char sql_kill[] = "KILL CONNECTION ?";

/* Ends server session `id` (an earlier connection of this handle, so the service user
 * may kill it without any privilege) on the new connection. Its open transaction, if
 * any, is rolled back, and a COMMIT of it still on its way through the network can no
 * longer land. Best effort: a session that has ended already gives ER_NO_SUCH_THREAD,
 * and any other failure leaves the locking read of stockdb__confirm_key to wait for the session
 * as before. Counted as one statement. It assumes the new connection reaches the same
 * server as the old one did (one MariaDB, as here): behind a proxy that fails over to
 * another server, the id could name an unrelated session there. */
static void kill_session(stockdb *db, unsigned long id) {
    MYSQL_STMT *st = mysql_stmt_init(db->conn);
    if (!st) return;
    unsigned long long v = id;
    MYSQL_BIND b;
    memset(&b, 0, sizeof(b));
    b.buffer_type = MYSQL_TYPE_LONGLONG;
    b.buffer = &v;
    b.is_unsigned = 1;
    db->statements++;
    if (mysql_stmt_prepare(st, sql_kill, sizeof(sql_kill) - 1) == 0 &&
        mysql_stmt_bind_param(st, &b) == 0)
        (void)mysql_stmt_execute(st);
    mysql_stmt_close(st);
}

/* Only an order row can tell whether a COMMIT whose reply was lost committed, and only if
 * it carries a request id. Before it looks, this kills the old session: the COMMIT may
 * have been lost on the way (a partition), leaving the old session on the server with its
 * transaction open, its row locks held and nobody to end it; killed, it rolls back. The
 * lookup is a locking read so that it waits for the old session's COMMIT or rollback to
 * finish instead of reading too early; its lock is released at once. */
int stockdb__confirm_key(stockdb *db, const char *key, bool *found, uint64_t *order_id,
                         int32_t *product_id) {
    char why[sizeof(db->errstr)], detail[sizeof(db->errstr)];
    int32_t unused;
    unsigned long old_session = db->session_id;
    snprintf(why, sizeof(why), "%s", db->errstr);
    stockdb__disconnect(db);
    *found = false;
    /* Without a key nothing can be confirmed, but the old session is killed all the same,
     * so that its row locks are freed now rather than when the server times it out. A
     * server numbers its sessions upwards from 1 at start: a new id not above the old one
     * means the server restarted (the old session is gone with it), and the old id may
     * now be someone else's session, or our own. */
    bool connected = stockdb__connect(db) == STOCKDB_OK;
    if (connected && db->session_id > old_session) kill_session(db, old_session);
    if (!key) {
        stockdb__set_err(db, "%s; COMMIT reply lost and no request id to confirm it", why);
        return STOCKDB_ERR_UNKNOWN;
    }
    if (!connected) {
        snprintf(detail, sizeof(detail), "%s", db->errstr);
        stockdb__set_err(db, "%s; COMMIT reply lost and reconnecting to confirm failed: %s", why,
                         detail);
        return STOCKDB_ERR_UNKNOWN;
    }
    int rc =
        stockdb__lookup_order(db, STOCKDB__ST_CONFIRM, key, found, order_id, product_id, &unused);
    if (rc != STOCKDB_OK) {
        if (rc == STOCKDB_ERR_CONNECT) stockdb__disconnect(db);
        snprintf(detail, sizeof(detail), "%s", db->errstr);
        stockdb__set_err(db, "%s; COMMIT reply lost and the lookup to confirm it failed: %s", why,
                         detail);
        return STOCKDB_ERR_UNKNOWN;
    }
    stockdb__rollback(db); /* the shared lock of the locking read */
    if (!*found)
        stockdb__set_err(
            db, "%s; COMMIT reply lost, and the order is not in the database: not committed", why);
    else
        db->errstr[0] = '\0';
    return STOCKDB_OK;
}

/* ---------------------------------------------------------------- the atomic deduction */

/* Binds the parameters of the atomic UPDATE: (id) unfenced, (fence, kind, id, fence,
 * kind) fenced. */
static void bind_update_atomic(MYSQL_BIND *p, bool fenced, int64_t *fence, int32_t *kind,
                               int32_t *pid) {
    if (!fenced) {
        stockdb__bind_int(&p[0], pid, NULL);
        return;
    }
    stockdb__bind_bigint(&p[0], fence, NULL);
    stockdb__bind_int(&p[1], kind, NULL);
    stockdb__bind_int(&p[2], pid, NULL);
    stockdb__bind_bigint(&p[3], fence, NULL);
    stockdb__bind_int(&p[4], kind, NULL);
}

/* Answers req from the order of its key, after the transaction was ended: the order's
 * replay if there is one; else sold out (stock as read) when sold_out, or an error (the
 * database refused the key as a duplicate, yet no order has it). */
static int atomic_by_key(stockdb *db, const stockdb_request *req, bool sold_out, int32_t stock,
                         stockdb_result *out) {
    bool found = false;
    uint64_t order_id = 0;
    int32_t found_pid = 0, found_stock = 0;
    int rc = stockdb__lookup_order(db, STOCKDB__ST_LOOKUP, req->request_id, &found, &order_id,
                                   &found_pid, &found_stock);
    if (rc != STOCKDB_OK) return stockdb__fail(db, rc, false);
    if (found)
        return stockdb__replay(db, req->product_id, req->request_id, order_id, found_pid,
                               found_stock, out);
    if (sold_out) {
        out->outcome = STOCKDB_SOLD_OUT;
        out->stock = stock;
        return STOCKDB_OK;
    }
    stockdb__set_err(db, "duplicate request id \"%s\", but no order with it exists",
                     req->request_id);
    return STOCKDB_ERR_QUERY;
}

/* The atomic UPDATE (statement id) changed no row: one read tells why (no such product,
 * fenced, sold out), and the transaction, which wrote nothing, ends. Sold out now, a key
 * may still have bought before: its order is the answer. */
static int atomic_refused(stockdb *db, const stockdb_request *req, int id, stockdb_result *out) {
    int32_t pid = req->product_id, stock = 0, row_kind = 0;
    int64_t row_fence = 0;
    uint64_t row_version = 0;
    bool found = false;
    MYSQL_BIND p[1], r[4];
    stockdb__bind_int(&p[0], &pid, NULL);
    stockdb__bind_row(r, &stock, &row_fence, &row_kind, &row_version);
    int rc = stockdb__run(db, STOCKDB__ST_READ, p, r, &found, NULL);
    if (rc != STOCKDB_OK) return stockdb__fail(db, rc, true);
    stockdb__rollback(db);
    if (!found) {
        stockdb__set_err(db, "no product with id %d", pid);
        return STOCKDB_ERR_NOT_FOUND;
    }
    if (req->fence > 0 &&
        stockdb__newer_holder_wrote(row_fence, row_kind, req->fence, req->fence_kind))
        return stockdb__fenced_out(db, pid, 0, req->fence);
    if (stock > 0) {
        stockdb__set_err(db, "%s changed no row although product %d has stock %d",
                         stockdb__stmt_name[id], pid, stock);
        return STOCKDB_ERR_QUERY;
    }
    if (!req->request_id) {
        out->outcome = STOCKDB_SOLD_OUT;
        out->stock = stock;
        return STOCKDB_OK;
    }
    return atomic_by_key(db, req, true, stock, out);
}

/* One attempt at the atomic deduction on a connected handle. Returns a STOCKDB_* code,
 * or STOCKDB__RETRY_IDLE when the connection dropped before anything was written. A key
 * seen before needs no look-up first: the order INSERT's duplicate key says so, and the
 * first order is the answer. */
static int atomic_once(stockdb *db, const stockdb_request *req, stockdb_result *out) {
    int32_t pid = req->product_id, kind = req->fence_kind, found_pid = 0;
    int64_t fence = req->fence;
    uint64_t rows = 0, order_id = 0, found_id = 0;
    bool found = false, fenced = fence > 0;
    MYSQL_BIND p[5];

    int id = fenced ? STOCKDB__ST_UPDATE_ATOMIC_FENCED : STOCKDB__ST_UPDATE_ATOMIC;
    bind_update_atomic(p, fenced, &fence, &kind, &pid);
    int rc = stockdb__run(db, id, p, NULL, NULL, &rows);
    if (rc != STOCKDB_OK) return stockdb__fail(db, rc, false);
    if (rows == 0) return atomic_refused(db, req, id, out);
    /* The stock the UPDATE left, from LAST_INSERT_ID(stock - 1): stock > 0 before it,
     * so the value is 0 or more and fits. */
    int32_t stock = (int32_t)mysql_stmt_insert_id(db->stmt[id]);
    out->stock = stock;

    MYSQL_BIND ins[4];
    unsigned long instance_len, rid_len;
    my_bool fence_null = !fenced;
    stockdb__bind_int(&ins[0], &pid, NULL);
    stockdb__bind_text(&ins[1], db->instance, &instance_len);
    stockdb__bind_bigint(&ins[2], &fence, &fence_null);
    stockdb__bind_text(&ins[3], req->request_id, &rid_len);
    rc = stockdb__run(db, STOCKDB__ST_INSERT, ins, NULL, NULL, &rows);
    if (rc != STOCKDB_OK) {
        if (!stockdb__duplicate_key(db, rc) || !req->request_id) return stockdb__fail(db, rc, true);
        /* The key has an order already (a retry, or a twin that committed first): ours
         * is undone and the first order is the answer. */
        stockdb__rollback(db);
        return atomic_by_key(db, req, false, stock, out);
    }
    order_id = mysql_stmt_insert_id(db->stmt[STOCKDB__ST_INSERT]);
    if (req->guard && req->guard(req->guard_arg) != 0) {
        stockdb__rollback(db);
        stockdb__set_err(db, "the guard refused the commit; rolled back");
        return STOCKDB_ERR_GUARD;
    }
    rc = stockdb__commit(db);
    if (rc != STOCKDB_OK && rc != STOCKDB_ERR_CONNECT)
        return stockdb__fail(db, rc, true); /* the server said no */
    if (rc == STOCKDB_ERR_CONNECT) {
        rc = stockdb__confirm_key(db, req->request_id, &found, &found_id, &found_pid);
        if (rc != STOCKDB_OK) return rc;
        if (!found) return STOCKDB_ERR_CONNECT;
        if (found_id != order_id)
            return stockdb__replay(db, req->product_id, req->request_id, found_id, found_pid, stock,
                                   out);
    }
    out->outcome = STOCKDB_DEDUCTED;
    out->order_id = order_id;
    return STOCKDB_OK;
}

/* ---------------------------------------------------------------- public API */

int stockdb_deduct(stockdb *db, stockdb_strategy strategy, const stockdb_request *req,
                   stockdb_result *out) {
    if (!db) return STOCKDB_ERR_CONFIG;
    stockdb__clear_err(db);
    if (!req || !out) {
        stockdb__set_err(db, "stockdb_deduct: req and out are required");
        return STOCKDB_ERR_CONFIG;
    }
    if (strategy != STOCKDB_ATOMIC) {
        /* The read-check-update strategies are a batch of one. */
        stockdb_item item = {.request_id = req->request_id};
        stockdb_batch b = {.product_id = req->product_id,
                           .fence = req->fence,
                           .fence_kind = req->fence_kind,
                           .guard = req->guard,
                           .guard_arg = req->guard_arg,
                           .think_us = req->think_us,
                           .items = &item,
                           .n = 1};
        int rc = stockdb_deduct_batch(db, strategy, &b);
        if (rc == STOCKDB_OK) rc = item.rc;
        *out = rc == STOCKDB_OK ? item.res : (stockdb_result){0};
        return rc;
    }
    if (!stockdb__request_id_ok(db, "stockdb_deduct", req->request_id)) return STOCKDB_ERR_CONFIG;
    if (req->fence < 0) {
        stockdb__set_err(db, "stockdb_deduct: negative fence %lld", (long long)req->fence);
        return STOCKDB_ERR_CONFIG;
    }
    for (int attempt = 0;; attempt++) {
        memset(out, 0, sizeof(*out));
        int rc = stockdb__connect(db);
        if (rc != STOCKDB_OK) return rc;
        rc = atomic_once(db, req, out);
        if (rc == STOCKDB__RETRY_IDLE && attempt == 0) continue;
        stockdb__end_trx(db);
        return rc == STOCKDB__RETRY_IDLE ? STOCKDB_ERR_CONNECT : rc; /* errstr says why */
    }
}
