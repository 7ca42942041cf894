/* stockdb_batch.c: several deductions of one product as one transaction (stockdb.h's
 * stockdb_deduct_batch); READ_CHECK_UPDATE and FOR_UPDATE requests are a batch of one.
 *
 * One attempt (batch_once) is a row of named steps: the per-row check, the customers
 * counted against the product's limit (batch_limit), the per-row write (k units taken
 * with the fenced compare-and-set), the ledger
 * (batch_insert_orders: one INSERT ... RETURNING of the k orders), the guard and COMMIT
 * (batch_commit), and the answers (stockdb__batch_answer). The per-row step knows nothing
 * of items or orders, so the transaction over several products (stockdb_multi.c) can run
 * it once per row; that transaction shares the batch's state and steps, stockdb_int.h
 * declares them. An attempt that meets a key with an order already, or a row changed
 * since its check, ends its transaction and asks stockdb_deduct_batch to run the rest
 * again (STOCKDB__RETRY_*). */
#include "stockdb_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <errmsg.h>
#include <mysql.h>

/* ---------------------------------------------------------------- one row */

/* The check: reads row's stock, fence and version (locking it for FOR_UPDATE). A segment
 * that has no row is an empty one if the product exists (it may be split over fewer
 * segments than the caller was told, or not at all): one more read, only on that path.
 * Sets *found; returns STOCKDB_OK or a code of stockdb__run(). */
static int row_read(stockdb *db, stockdb_strategy strategy, stockdb__row *row, bool *found) {
    bool split = row->segment > 0;
    int32_t pid = row->product_id, seg = row->segment;
    MYSQL_BIND p[2], r[6];
    stockdb__bind_int(&p[0], &pid, NULL);
    stockdb__bind_int(&p[1], &seg, NULL);
    stockdb__bind_row(r, &row->stock, &row->seen_fence, &row->seen_kind, &row->version,
                      &row->terms);
    int id = strategy == STOCKDB_FOR_UPDATE
                 ? (split ? STOCKDB__ST_SEG_READ_FOR_UPDATE : STOCKDB__ST_READ_FOR_UPDATE)
                 : (split ? STOCKDB__ST_SEG_READ : STOCKDB__ST_READ);
    int rc = stockdb__run(db, id, p, r, found, NULL);
    stockdb__terms_done(&row->terms);
    if (rc != STOCKDB_OK || *found || !split) return rc;
    int32_t total, unused_pid;
    uint64_t unused_id;
    rc = stockdb__read_total(db, pid, NULL, found, &total, &unused_id, &unused_pid);
    row->stock = 0;
    row->seen_fence = 0;
    row->seen_kind = 0;
    row->version = 0;
    row->terms = (stockdb__terms){.no_limit = 1, .no_reserve = 1};
    return rc;
}

/* The write: row->taken units at once. Unfenced it is the seed's unconditional write (so
 * an unlocked run still oversells); fenced it is a compare-and-set on the row_version the
 * check read, which refuses it after ANY write in between: a stale holder's, or the late
 * COMMIT of a batch made under our own token or an older one. Sets *rows to the rows it
 * changed; returns STOCKDB_OK or a code of stockdb__run(). */
static int row_write(stockdb *db, stockdb__row *row, uint64_t *rows) {
    bool fenced = row->fence > 0, split = row->segment > 0;
    int32_t k = row->taken, pid = row->product_id, seg = row->segment, kind = row->fence_kind;
    int64_t fence = row->fence;
    MYSQL_BIND p[8];
    int np = 0;
    stockdb__bind_int(&p[np++], &k, NULL);
    if (fenced) {
        stockdb__bind_bigint(&p[np++], &fence, NULL);
        stockdb__bind_int(&p[np++], &kind, NULL);
    }
    stockdb__bind_int(&p[np++], &pid, NULL);
    if (split) stockdb__bind_int(&p[np++], &seg, NULL);
    if (fenced) {
        stockdb__bind_ubigint(&p[np++], &row->version);
        stockdb__bind_bigint(&p[np++], &fence, NULL);
        stockdb__bind_int(&p[np++], &kind, NULL);
    }
    int id = split ? (fenced ? STOCKDB__ST_SEG_UPDATE_BATCH_FENCED : STOCKDB__ST_SEG_UPDATE_BATCH)
                   : (fenced ? STOCKDB__ST_UPDATE_BATCH_FENCED : STOCKDB__ST_UPDATE_BATCH);
    return stockdb__run(db, id, p, NULL, NULL, rows);
}

int stockdb__row_check(stockdb *db, stockdb_strategy strategy, stockdb__row *row, size_t want,
                       bool wrote) {
    bool found = false;
    row->taken = 0;
    int rc = row_read(db, strategy, row, &found);
    if (rc != STOCKDB_OK) return stockdb__fail(db, rc, wrote);
    if (!found) {
        stockdb__set_err(db, "no product with id %d", row->product_id);
        return STOCKDB_ERR_NOT_FOUND;
    }
    /* A newer holder has written already: nothing we read can be trusted. */
    if (row->fence > 0 &&
        stockdb__newer_holder_wrote(row->seen_fence, row->seen_kind, row->fence, row->fence_kind))
        return stockdb__fenced_out(db, row->product_id, row->segment, row->fence);
    if (row->stock <= 0 || want == 0) return STOCKDB_OK;
    row->taken = (size_t)row->stock < want ? row->stock : (int32_t)want;
    return STOCKDB_OK;
}

void stockdb__think(unsigned think_us) {
    if (!think_us) return;
    struct timespec ts = {think_us / 1000000, (long)(think_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

int stockdb__row_write(stockdb *db, stockdb__row *row) {
    uint64_t rows = 0;
    int rc = row_write(db, row, &rows);
    if (rc != STOCKDB_OK) return stockdb__fail(db, rc, true);
    if (rows > 0) return STOCKDB_OK;
    stockdb__rollback(db);
    /* The row changed after our check. The caller reads it again once: a newer holder's
     * token then shows as fenced, anything else gets a fresh check. */
    if (row->fence > 0) {
        stockdb__set_err(db, "product %d changed between the check and the write; rolled back",
                         row->product_id);
        return STOCKDB__RETRY_STALE;
    }
    stockdb__set_err(db, "no product with id %d (deleted after the check)", row->product_id);
    return STOCKDB_ERR_NOT_FOUND;
}

/* ---------------------------------------------------------------- the batch's state */

/* Answers every open item as sold out, with the stock left. */
static void batch_sold_out(stockdb__batch_state *st, int32_t stock) {
    for (size_t i = 0; i < st->b->n; i++) {
        if (!stockdb__batch_open(st, i)) continue;
        st->b->items[i].rc = STOCKDB_OK;
        st->b->items[i].res = (stockdb_result){.outcome = STOCKDB_SOLD_OUT, .stock = stock};
        st->done[i] = true;
    }
}

/* Looks up the orders of the keyed open items and answers those that exist: replayed, or
 * STOCKDB_ERR_KEY_REUSED for a key of another product. One statement per key; this runs
 * only on a duplicate key or when nothing is left to sell. Returns STOCKDB_OK or a code of
 * stockdb__run(). */
static int answer_known_keys(stockdb *db, stockdb__batch_state *st, size_t *answered) {
    stockdb_batch *b = st->b;
    *answered = 0;
    for (size_t i = 0; i < b->n; i++) {
        stockdb_item *it = &b->items[i];
        if (!stockdb__batch_open(st, i) || !it->request_id) continue;
        bool found = false;
        uint64_t order_id = 0;
        int32_t pid = 0, stock = 0;
        int rc = stockdb__lookup_order(db, STOCKDB__ST_LOOKUP, it->request_id, &found, &order_id,
                                       &pid, &stock);
        if (rc != STOCKDB_OK) return rc;
        if (!found) continue;
        it->rc = stockdb__replay(db, b->product_id, it->request_id, order_id, pid, stock, &it->res);
        st->done[i] = true;
        (*answered)++;
    }
    return STOCKDB_OK;
}

/* ---------------------------------------------------------------- the limit */

/* The units each customer of a batch holds, as ST_USER_COUNT reads them. */
typedef struct limit_scan {
    stockdb__batch_state *st;
    size_t *first; /* per item: the first open item with its customer */
    int64_t *held; /* per first item: the units its customer holds */
    char user[STOCKDB_USER_MAX + 1];
    unsigned long user_len;
    my_bool user_null;
    int64_t count;
} limit_scan;

static int limit_row(void *arg) {
    limit_scan *ls = arg;
    stockdb_batch *b = ls->st->b;
    size_t len = ls->user_null ? 0 : ls->user_len;
    if (len > STOCKDB_USER_MAX) len = STOCKDB_USER_MAX;
    ls->user[len] = '\0';
    for (size_t i = 0; i < b->n; i++)
        if (ls->first[i] == i && b->items[i].user && strcmp(b->items[i].user, ls->user) == 0)
            ls->held[i] = ls->count;
    return STOCKDB_OK;
}

/* A customer at the product's limit: its key's order if the key bought before (a retry
 * is answered, not refused), else limit_reached with the stock as read. */
static int limit_refuse(stockdb *db, stockdb__batch_state *st, size_t i, int32_t stock) {
    stockdb_item *it = &st->b->items[i];
    bool found = false;
    uint64_t order_id = 0;
    int32_t pid = 0, now = 0;
    st->done[i] = true;
    if (it->request_id) {
        int rc = stockdb__lookup_order(db, STOCKDB__ST_LOOKUP, it->request_id, &found, &order_id,
                                       &pid, &now);
        if (rc != STOCKDB_OK) return rc;
    }
    if (found) {
        it->rc =
            stockdb__replay(db, st->b->product_id, it->request_id, order_id, pid, now, &it->res);
        return STOCKDB_OK;
    }
    it->rc = STOCKDB_OK;
    it->res = (stockdb_result){.outcome = STOCKDB_LIMIT_REACHED, .stock = stock};
    return STOCKDB_OK;
}

/* The per-customer limit of a batch whose row (checked, so locked where the mode locks)
 * has one: one statement reads the units each of the batch's customers holds, then the
 * open items, in arrival order, each count against their customer's, the batch's own
 * earlier deductions included; one past the limit is answered limit_reached (or from
 * its key's order). *want becomes the open items left. Returns STOCKDB_OK or a code of
 * stockdb__run(). */
static int batch_limit(stockdb *db, stockdb__batch_state *st, const stockdb__row *row,
                       size_t *want) {
    stockdb_batch *b = st->b;
    limit_scan ls = {.st = st,
                     .first = malloc(b->n * sizeof(*ls.first)),
                     .held = calloc(b->n, sizeof(*ls.held))};
    stockdb__json_buf j = {0};
    int rc = STOCKDB_OK;
    size_t users = 0;
    if (!ls.first || !ls.held) goto oom;
    stockdb__json_raw(&j, "[");
    for (size_t i = 0; i < b->n; i++) {
        ls.first[i] = i;
        if (!stockdb__batch_open(st, i) || !b->items[i].user) continue;
        for (size_t x = 0; x < i; x++)
            if (ls.first[x] == x && stockdb__batch_open(st, x) && b->items[x].user &&
                strcmp(b->items[x].user, b->items[i].user) == 0) {
                ls.first[i] = x;
                break;
            }
        if (ls.first[i] != i) continue;
        stockdb__json_raw(&j, users++ ? "," : "");
        stockdb__json_key(&j, b->items[i].user);
    }
    stockdb__json_raw(&j, "]");
    if (j.oom) goto oom;
    if (users > 0) {
        int32_t pid = b->product_id;
        unsigned long json_len;
        MYSQL_BIND p[2], r[2];
        stockdb__bind_int(&p[0], &pid, NULL);
        stockdb__bind_text(&p[1], j.s, &json_len);
        stockdb__bind_out_text(&r[0], ls.user, sizeof(ls.user), &ls.user_len, &ls.user_null);
        stockdb__bind_bigint(&r[1], &ls.count, NULL);
        rc = stockdb__run_each(db, STOCKDB__ST_USER_COUNT, p, r, limit_row, &ls);
    }
    *want = 0;
    for (size_t i = 0; rc == STOCKDB_OK && i < b->n; i++) {
        if (!stockdb__batch_open(st, i)) continue;
        if (b->items[i].user) {
            size_t f = ls.first[i];
            if (ls.held[f] >= row->terms.per_user_limit) {
                rc = limit_refuse(db, st, i, row->stock);
                continue;
            }
            ls.held[f]++;
        }
        (*want)++;
    }
    goto out;
oom:
    stockdb__set_err(db, "out of memory for the customers of a batch");
    rc = stockdb__code(db, CR_OUT_OF_MEMORY);
out:
    free(j.s);
    free(ls.first);
    free(ls.held);
    return rc;
}

/* ---------------------------------------------------------------- the ledger */

/* Runs statement id (ST_INSERT_BATCH or ST_INSERT_MULTI) with params and reads the id of
 * each row it wrote, in order: the rows of sts[0] first (sts[i].ids[0..ks[i]-1]), then
 * those of sts[1], and so on. Each row's product and key must be those of item
 * sts[i].sel[j], as the statement writes them in array order; anything else is an error,
 * never a wrong id. Returns STOCKDB_OK or a code of stockdb__code(). */
int stockdb__insert_returning(stockdb *db, int sid, stockdb__batch_state *sts, size_t nb,
                              const size_t *ks, MYSQL_BIND *params) {
    MYSQL_STMT *stmt = db->stmt[sid];
    const char *name = stockdb__stmt_name[sid];
    uint64_t id = 0;
    int32_t pid = 0;
    char key[STOCKDB_REQUEST_ID_MAX + 1];
    unsigned long key_len = 0;
    my_bool key_null = 0;
    MYSQL_BIND r[3];
    size_t got = 0, total = 0, i = 0, j = 0;
    int rc;

    for (size_t x = 0; x < nb; x++)
        total += ks[x];
    db->statements++;
    db->in_trx = true;
    stockdb__bind_ubigint(&r[0], &id);
    stockdb__bind_int(&r[1], &pid, NULL);
    memset(&r[2], 0, sizeof(r[2]));
    r[2].buffer_type = MYSQL_TYPE_STRING;
    r[2].buffer = key;
    r[2].buffer_length = sizeof(key);
    r[2].length = &key_len;
    r[2].is_null = &key_null;
    /* On a failure, no mysql_stmt_free_result(): a duplicate key ends the result after some
     * rows with an error, and Connector/C (3.3) would then wait for the rest of a result
     * that will never come, until the read timeout drops the connection. The next execute
     * starts clean without it. */
    if (mysql_stmt_bind_param(stmt, params) || mysql_stmt_execute(stmt) ||
        mysql_stmt_bind_result(stmt, r) || mysql_stmt_store_result(stmt))
        return stockdb__stmt_error(db, stmt, name);
    while ((rc = mysql_stmt_fetch(stmt)) == 0 || rc == MYSQL_DATA_TRUNCATED) {
        while (i < nb && j >= ks[i]) {
            i++;
            j = 0;
        }
        const char *want = i < nb ? sts[i].b->items[sts[i].sel[j]].request_id : NULL;
        bool same = i < nb && pid == sts[i].b->product_id &&
                    (key_null ? !want
                              : want && rc == 0 && key_len == strlen(want) &&
                                    memcmp(key, want, key_len) == 0);
        if (!same) {
            stockdb__set_err(db, "%s: row %zu of %zu is not the order of its item", name, got + 1,
                             total);
            mysql_stmt_free_result(stmt);
            return stockdb__code(db, CR_UNKNOWN_ERROR);
        }
        sts[i].ids[j++] = id;
        got++;
    }
    if (rc == 1) return stockdb__stmt_error(db, stmt, name);
    mysql_stmt_free_result(stmt);
    if (got != total) {
        stockdb__set_err(db, "%s wrote %zu rows, not %zu", name, got, total);
        return stockdb__code(db, CR_UNKNOWN_ERROR);
    }
    return STOCKDB_OK;
}

/* The JSON array of [key, customer] of items st->sel[0..k-1], in that order (NULL when
 * out of memory; the caller frees it). */
static char *keys_json(const stockdb__batch_state *st, size_t k) {
    stockdb__json_buf j = {0};
    stockdb__json_raw(&j, "[");
    for (size_t x = 0; x < k; x++) {
        stockdb__json_raw(&j, x ? ",[" : "[");
        stockdb__json_key(&j, st->b->items[st->sel[x]].request_id);
        stockdb__json_raw(&j, ",");
        stockdb__json_key(&j, st->b->items[st->sel[x]].user);
        stockdb__json_raw(&j, "]");
    }
    stockdb__json_raw(&j, "]");
    return j.s;
}

/* The orders of an attempt: rows for items st->sel[0..k-1], in that order, their ids in
 * st->ids. One INSERT ... SELECT ... RETURNING over a JSON array of the keys; with
 * st->one_by_one, a single-row INSERT each, so that a duplicate key names its item:
 * *dup_at is then the index into sel of the row that failed. Returns STOCKDB_OK or a
 * STOCKDB_* code (stockdb__duplicate_key tells a key that has an order already). */
static int insert_orders(stockdb *db, stockdb__batch_state *st, size_t k, size_t *dup_at) {
    stockdb_batch *b = st->b;
    int32_t pid = b->product_id;
    int64_t fence = b->fence;
    my_bool fence_null = b->fence <= 0;
    unsigned long instance_len, key_len, user_len, state_len, expires_len;
    uint64_t rows = 0;
    MYSQL_BIND p[7];
    bool reserve = st->terms && st->terms->expires_at[0];

    stockdb__bind_int(&p[0], &pid, NULL);
    stockdb__bind_text(&p[1], db->instance, &instance_len);
    stockdb__bind_bigint(&p[2], &fence, &fence_null);
    if (st->one_by_one) {
        stockdb__bind_text(
            &p[5], stockdb_state_name(reserve ? STOCKDB_STATE_RESERVED : STOCKDB_STATE_SOLD),
            &state_len);
        stockdb__bind_text(&p[6], reserve ? st->terms->expires_at : NULL, &expires_len);
        for (size_t j = 0; j < k; j++) {
            stockdb__bind_text(&p[3], b->items[st->sel[j]].request_id, &key_len);
            stockdb__bind_text(&p[4], b->items[st->sel[j]].user, &user_len);
            *dup_at = j;
            int rc = stockdb__run(db, STOCKDB__ST_INSERT, p, NULL, NULL, &rows);
            if (rc != STOCKDB_OK) return rc;
            st->ids[j] = mysql_stmt_insert_id(db->stmt[STOCKDB__ST_INSERT]);
        }
        return STOCKDB_OK;
    }
    char *json = keys_json(st, k);
    if (!json) {
        stockdb__set_err(db, "out of memory for the keys of a batch");
        return stockdb__code(db, CR_OUT_OF_MEMORY);
    }
    stockdb__bind_text(&p[3],
                       stockdb_state_name(reserve ? STOCKDB_STATE_RESERVED : STOCKDB_STATE_SOLD),
                       &state_len);
    stockdb__bind_text(&p[4], reserve ? st->terms->expires_at : NULL, &expires_len);
    stockdb__bind_text(&p[5], json, &key_len);
    int rc = stockdb__insert_returning(db, STOCKDB__ST_INSERT_BATCH, st, 1, &k, p);
    free(json);
    return rc;
}

/* Answers item i, whose single-row INSERT hit a duplicate key (one_by_one), after the
 * rollback: its order if a look-up finds it now, else an error for this item alone.
 * Returns STOCKDB__RETRY_KEYS (the rest run again), or a code of stockdb__fail() when the
 * look-up fails. */
static int answer_duplicate(stockdb *db, stockdb__batch_state *st, size_t i) {
    stockdb_batch *b = st->b;
    stockdb_item *it = &b->items[i];
    bool found = false;
    uint64_t order_id = 0;
    int32_t pid = 0, stock = 0;
    if (it->request_id) {
        int rc = stockdb__lookup_order(db, STOCKDB__ST_LOOKUP, it->request_id, &found, &order_id,
                                       &pid, &stock);
        if (rc != STOCKDB_OK) return stockdb__fail(db, rc, false);
    }
    if (found) {
        it->rc = stockdb__replay(db, b->product_id, it->request_id, order_id, pid, stock, &it->res);
    } else {
        it->rc = STOCKDB_ERR_QUERY;
        stockdb__set_err(db, "request id \"%s\" is refused as a duplicate, but no order has it",
                         it->request_id ? it->request_id : "");
    }
    st->done[i] = true;
    return STOCKDB__RETRY_KEYS;
}

/* The ledger of an attempt that took k units: the first k open items in arrival order
 * (st->sel) get an order each. A key that has an order already (a retry of an earlier
 * request) rolls the attempt back; the keys that exist are answered from their orders and
 * the rest run again (STOCKDB__RETRY_KEYS). Returns STOCKDB_OK, STOCKDB__RETRY_KEYS or a
 * code of stockdb__fail(). */
static int batch_insert_orders(stockdb *db, stockdb__batch_state *st, size_t k) {
    size_t n_sel = 0, dup_at = 0, answered = 0;
    for (size_t i = 0; i < st->b->n && n_sel < k; i++)
        if (stockdb__batch_open(st, i)) st->sel[n_sel++] = i;
    int rc = insert_orders(db, st, k, &dup_at);
    if (rc == STOCKDB_OK) return STOCKDB_OK;
    if (!stockdb__duplicate_key(db, rc)) return stockdb__fail(db, rc, true);
    stockdb__rollback(db);
    if (st->one_by_one) return answer_duplicate(db, st, st->sel[dup_at]);
    rc = answer_known_keys(db, st, &answered);
    if (rc != STOCKDB_OK) return stockdb__fail(db, rc, false);
    /* The database refused a key that no look-up finds: two keys it holds for one (a
     * request_id column whose collation is not yet the byte-exact one of sql/schema.sql),
     * or an order deleted since. Never fail the whole batch for it: insert its orders one
     * row at a time to learn which item is refused. */
    if (answered == 0) st->one_by_one = true;
    return STOCKDB__RETRY_KEYS;
}

/* ---------------------------------------------------------------- commit and answers */

/* The guard, then COMMIT of an attempt that wrote k orders. A COMMIT whose reply was lost
 * is confirmed by any one keyed order of it, the transaction being atomic. Returns
 * STOCKDB_OK when it committed, or a STOCKDB_* error (rolled back, or not confirmed). */
static int batch_commit(stockdb *db, stockdb__batch_state *st, size_t k) {
    stockdb_batch *b = st->b;
    if (b->guard && b->guard(b->guard_arg) != 0) {
        stockdb__rollback(db);
        stockdb__set_err(db, "the guard refused the commit; the batch of %zu was rolled back", k);
        return STOCKDB_ERR_GUARD;
    }
    int rc = stockdb__commit(db);
    if (rc == STOCKDB_OK) return STOCKDB_OK;
    if (rc != STOCKDB_ERR_CONNECT) return stockdb__fail(db, rc, true); /* the server said no */
    const char *key = NULL;
    uint64_t key_id = 0, found_id = 0;
    int32_t found_pid = 0;
    bool found = false;
    for (size_t j = 0; j < k && !key; j++) {
        key = b->items[st->sel[j]].request_id;
        key_id = st->ids[j];
    }
    rc = stockdb__confirm_key(db, key, &found, &found_id, &found_pid);
    if (rc != STOCKDB_OK) return rc;
    if (!found) return STOCKDB_ERR_CONNECT;
    if (found_id != key_id) {
        stockdb__set_err(db,
                         "COMMIT reply lost, and request id \"%s\" has order %llu, not ours (%llu)",
                         key, (unsigned long long)found_id, (unsigned long long)key_id);
        return STOCKDB_ERR_UNKNOWN;
    }
    return STOCKDB_OK;
}

/* The answers of a committed attempt that read stock and took k units: items sel[0..k-1]
 * each their order and the stock it left, every other open item sold out. */
void stockdb__batch_answer(stockdb__batch_state *st, int32_t stock, size_t k) {
    bool reserve = st->terms && st->terms->expires_at[0];
    for (size_t j = 0; j < k; j++) {
        stockdb_item *it = &st->b->items[st->sel[j]];
        it->rc = STOCKDB_OK;
        it->res = (stockdb_result){.outcome = STOCKDB_DEDUCTED,
                                   .stock = stock - (int32_t)j - 1,
                                   .order_id = st->ids[j],
                                   .reserved = reserve};
        if (reserve) memcpy(it->res.expires_at, st->terms->expires_at, STOCKDB_TIME_TEXT);
        st->done[st->sel[j]] = true;
    }
    batch_sold_out(st, stock - (int32_t)k);
}

/* ---------------------------------------------------------------- one attempt */

/* The end of a read that writes nothing. A locking read (FOR_UPDATE) rolls back at once
 * to free its row lock; a plain read (READ_CHECK_UPDATE) holds no row lock, and its
 * transaction is ended with whatever look-ups follow it, by stockdb__end_trx() when the
 * call returns. */
static void end_read(stockdb *db, stockdb_strategy strategy) {
    if (strategy == STOCKDB_FOR_UPDATE) stockdb__rollback(db);
}

/* One attempt at the batch on a connected handle. Returns STOCKDB_OK (every item not done
 * before has its answer), a STOCKDB_* error for the whole batch, STOCKDB__RETRY_IDLE (the
 * connection dropped before anything was written), STOCKDB__RETRY_KEYS, or
 * STOCKDB__RETRY_STALE (the fenced write found the row changed since the check and was
 * rolled back). */
static int batch_once(stockdb *db, stockdb_strategy strategy, stockdb__batch_state *st) {
    stockdb_batch *b = st->b;
    stockdb__row row = {.product_id = b->product_id,
                        .segment = b->segment,
                        .fence = b->fence,
                        .fence_kind = b->fence_kind};
    size_t want = 0, answered = 0;
    for (size_t i = 0; i < b->n; i++)
        if (stockdb__batch_open(st, i)) want++;

    int rc = stockdb__row_check(db, strategy, &row, want, false);
    if ((rc == STOCKDB_ERR_NOT_FOUND || rc == STOCKDB_ERR_FENCED) && row.taken == 0)
        end_read(db, strategy); /* refused by the check */
    if (rc != STOCKDB_OK) return rc;
    st->terms = &row.terms;
    if (!row.terms.no_limit) {
        /* Counted after the check, so under the same lock (or row lock) as the stock. */
        rc = batch_limit(db, st, &row, &want);
        if (rc != STOCKDB_OK) return stockdb__fail(db, rc, false);
        row.taken = row.stock <= 0 ? 0 : (size_t)row.stock < want ? row.stock : (int32_t)want;
    }
    if (row.taken > 0) {
        /* The experiment's stand-in for the business logic between check and write. */
        stockdb__think(b->think_us);
        rc = stockdb__row_write(db, &row);
        if (rc != STOCKDB_OK) return rc;
    }
    size_t k = (size_t)row.taken;
    if (k == 0) {
        /* Nothing to sell. A key that bought before still gets its order. */
        end_read(db, strategy);
        rc = answer_known_keys(db, st, &answered);
        if (rc != STOCKDB_OK) return stockdb__fail(db, rc, false);
        batch_sold_out(st, row.stock);
        return STOCKDB_OK;
    }
    rc = batch_insert_orders(db, st, k);
    if (rc == STOCKDB_OK) rc = batch_commit(db, st, k);
    if (rc == STOCKDB_OK) stockdb__batch_answer(st, row.stock, k);
    return rc;
}

/* ---------------------------------------------------------------- public API */

/* Two items with one key are one deduction: the later follows the first. Keys are
 * compared byte for byte, as the database compares them (orders.request_id is
 * utf8mb4_nopad_bin, sql/schema.sql). A batch is at most STOCKDB_BATCH_MAX items, so the
 * quadratic scan stays small. Clears every item's answer. */
void stockdb__batch_find_leaders(stockdb__batch_state *st) {
    stockdb_batch *b = st->b;
    for (size_t i = 0; i < b->n; i++) {
        const char *key = b->items[i].request_id;
        st->leader[i] = i;
        for (size_t j = 0; key && j < i; j++) {
            const char *other = b->items[j].request_id;
            if (other && strcmp(other, key) == 0) {
                st->leader[i] = j;
                break;
            }
        }
        b->items[i].rc = STOCKDB_OK;
        memset(&b->items[i].res, 0, sizeof(b->items[i].res));
    }
}

/* A follower gets its leader's answer; a deduction is a replay for it. */
void stockdb__batch_follow(stockdb__batch_state *st) {
    stockdb_batch *b = st->b;
    for (size_t i = 0; i < b->n; i++) {
        size_t l = st->leader[i];
        if (l == i) continue;
        b->items[i] = (stockdb_item){
            .request_id = b->items[i].request_id, .rc = b->items[l].rc, .res = b->items[l].res};
        if (b->items[i].res.outcome == STOCKDB_DEDUCTED) b->items[i].res.replayed = true;
    }
}

/* Checks a batch's arguments; sets errstr when they are bad. */
bool stockdb__batch_args_ok(stockdb *db, stockdb_strategy strategy, const stockdb_batch *b) {
    if (!b || !b->items || b->n == 0 || b->n > STOCKDB_BATCH_MAX) {
        stockdb__set_err(db, "stockdb_deduct_batch: 1..%d items are required", STOCKDB_BATCH_MAX);
        return false;
    }
    if (strategy != STOCKDB_READ_CHECK_UPDATE && strategy != STOCKDB_FOR_UPDATE) {
        stockdb__set_err(db, "stockdb_deduct_batch: strategy %d does not batch", (int)strategy);
        return false;
    }
    if (b->fence < 0) {
        stockdb__set_err(db, "stockdb_deduct_batch: negative fence %lld", (long long)b->fence);
        return false;
    }
    if (b->segment < 0) {
        stockdb__set_err(db, "stockdb_deduct_batch: negative segment %d", (int)b->segment);
        return false;
    }
    for (size_t i = 0; i < b->n; i++)
        if (!stockdb__request_id_ok(db, "stockdb_deduct_batch", b->items[i].request_id) ||
            !stockdb__user_ok(db, "stockdb_deduct_batch", b->items[i].user))
            return false;
    return true;
}

int stockdb_deduct_batch(stockdb *db, stockdb_strategy strategy, stockdb_batch *b) {
    if (!db) return STOCKDB_ERR_CONFIG;
    stockdb__clear_err(db);
    if (!stockdb__batch_args_ok(db, strategy, b)) return STOCKDB_ERR_CONFIG;

    stockdb__batch_state st = {.b = b,
                               .leader = malloc(b->n * sizeof(*st.leader)),
                               .done = calloc(b->n, sizeof(*st.done)),
                               .sel = malloc(b->n * sizeof(*st.sel)),
                               .ids = malloc(b->n * sizeof(*st.ids))};
    int rc = STOCKDB_ERR_NOMEM;
    if (!st.leader || !st.done || !st.sel || !st.ids) {
        stockdb__set_err(db, "stockdb_deduct_batch: out of memory");
        goto out;
    }
    stockdb__batch_find_leaders(&st);
    /* Each STOCKDB__RETRY_KEYS answers at least one key, but the one that turns one_by_one on, so
     * there are at most n + 1 of them; an idle connection lost before the first statement
     * is retried once, and so is a compare-and-set that found the row changed (then it is
     * STOCKDB_ERR_FENCED). */
    for (int idle_retries = 0, stale_retries = 0;;) {
        rc = stockdb__connect(db);
        if (rc != STOCKDB_OK) break;
        rc = batch_once(db, strategy, &st);
        if (rc == STOCKDB__RETRY_KEYS) continue;
        if (rc == STOCKDB__RETRY_STALE) {
            if (++stale_retries < 2) continue;
            rc = STOCKDB_ERR_FENCED; /* errstr says why */
            break;
        }
        if (rc != STOCKDB__RETRY_IDLE) break;
        if (++idle_retries == 2) {
            rc = STOCKDB_ERR_CONNECT; /* errstr says why */
            break;
        }
    }
    if (rc == STOCKDB_OK) stockdb__batch_follow(&st);
out:
    stockdb__end_trx(db);
    free(st.leader);
    free(st.done);
    free(st.sel);
    free(st.ids);
    return rc;
}
