/* stockdb_deduct.c: one deduction per request (stockdb.h's stockdb_deduct).
 *
 * READ_CHECK_UPDATE and FOR_UPDATE are a batch of one (stockdb_batch.c), so that a
 * request and a batch take the same path through the check, the fenced write and the
 * ledger. ATOMIC is its own path here: the check is inside the UPDATE, so there is nothing
 * to batch, and only when the UPDATE changes no row does one read tell why. A key's order
 * and a COMMIT whose reply was lost are stockdb_order.c's, below every deduction. */
#include "stockdb_int.h"

#include <string.h>

#include <mysql.h>

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
 * replay if there is one; else `none` (STOCKDB_SOLD_OUT or STOCKDB_LIMIT_REACHED, with
 * the stock as read), or with none < 0 an error (the database refused the key as a
 * duplicate, yet no order has it). */
static int atomic_by_key(stockdb *db, const stockdb_request *req, int none, int32_t stock,
                         stockdb_result *out) {
    bool found = false;
    uint64_t order_id = 0;
    int32_t found_pid = 0, found_stock = 0;
    int rc = req->request_id ? stockdb__lookup_order(db, STOCKDB__ST_LOOKUP, req->request_id,
                                                     &found, &order_id, &found_pid, &found_stock)
                             : STOCKDB_OK;
    if (rc != STOCKDB_OK) return stockdb__fail(db, rc, false);
    if (found)
        return stockdb__replay(db, req->product_id, req->request_id, order_id, found_pid,
                               found_stock, out);
    if (none >= 0) {
        out->outcome = (stockdb_outcome)none;
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
    int32_t pid = req->product_id, stock, row_kind;
    int64_t row_fence;
    uint64_t row_version;
    bool found;
    int rc = stockdb__read_product(db, pid, &found, &stock, &row_fence, &row_kind, &row_version);
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
    return atomic_by_key(db, req, STOCKDB_SOLD_OUT, stock, out);
}

/* ATOMIC's order (ST_INSERT_ATOMIC), after the UPDATE took the row lock: written unless
 * the customer holds the product's limit (then *inserted is false), reserved when the
 * product reserves (out->reserved, out->expires_at). As stockdb__insert_returning, no
 * mysql_stmt_free_result() on a failure (a duplicate key may end a RETURNING result with
 * an error). Returns STOCKDB_OK or a code of stockdb__code(). */
static int atomic_insert(stockdb *db, const stockdb_request *req, bool fenced, int64_t *fence,
                         uint64_t *order_id, stockdb_result *out, bool *inserted) {
    MYSQL_STMT *st = db->stmt[STOCKDB__ST_INSERT_ATOMIC];
    const char *name = stockdb__stmt_name[STOCKDB__ST_INSERT_ATOMIC];
    int32_t pid = req->product_id;
    my_bool fence_null = !fenced, expires_null = 1;
    unsigned long instance_len, rid_len, user_len[3], expires_len = 0;
    MYSQL_BIND p[7], r[2];
    stockdb__bind_text(&p[0], db->instance, &instance_len);
    stockdb__bind_bigint(&p[1], fence, &fence_null);
    stockdb__bind_text(&p[2], req->request_id, &rid_len);
    stockdb__bind_text(&p[3], req->user, &user_len[0]);
    stockdb__bind_int(&p[4], &pid, NULL);
    stockdb__bind_text(&p[5], req->user, &user_len[1]);
    stockdb__bind_text(&p[6], req->user, &user_len[2]);
    stockdb__bind_ubigint(&r[0], order_id);
    stockdb__bind_out_text(&r[1], out->expires_at, sizeof(out->expires_at), &expires_len,
                           &expires_null);
    db->statements++;
    db->in_trx = true;
    if (mysql_stmt_bind_param(st, p) || mysql_stmt_execute(st) || mysql_stmt_bind_result(st, r) ||
        mysql_stmt_store_result(st))
        return stockdb__stmt_error(db, st, name);
    int rc = mysql_stmt_fetch(st);
    if (rc == 1) return stockdb__stmt_error(db, st, name);
    *inserted = rc == 0 || rc == MYSQL_DATA_TRUNCATED;
    mysql_stmt_free_result(st);
    size_t n = expires_null ? 0 : expires_len;
    if (n >= sizeof(out->expires_at)) n = sizeof(out->expires_at) - 1;
    out->expires_at[n] = '\0';
    out->reserved = *inserted && n > 0;
    return STOCKDB_OK;
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

    bool inserted = false;
    rc = atomic_insert(db, req, fenced, &fence, &order_id, out, &inserted);
    if (rc != STOCKDB_OK) {
        if (!stockdb__duplicate_key(db, rc) || !req->request_id) return stockdb__fail(db, rc, true);
        /* The key has an order already (a retry, or a twin that committed first): ours
         * is undone and the first order is the answer. */
        stockdb__rollback(db);
        return atomic_by_key(db, req, -1, stock, out);
    }
    if (!inserted) {
        /* The customer holds the limit: the UPDATE is undone (a key that bought before
         * is answered with its order). */
        stockdb__rollback(db);
        return atomic_by_key(db, req, STOCKDB_LIMIT_REACHED, stock + 1, out);
    }
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
        stockdb_item item = {.request_id = req->request_id, .user = req->user};
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
    if (!stockdb__request_id_ok(db, "stockdb_deduct", req->request_id) ||
        !stockdb__user_ok(db, "stockdb_deduct", req->user))
        return STOCKDB_ERR_CONFIG;
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
