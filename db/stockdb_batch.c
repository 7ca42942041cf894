/* stockdb_batch.c: several deductions of one product as one transaction (stockdb.h's
 * stockdb_deduct_batch); READ_CHECK_UPDATE and FOR_UPDATE requests are a batch of one.
 *
 * One attempt (batch_once) is a row of named steps: the per-row step stockdb__row_take
 * (the check, then k units taken with the fenced compare-and-set), the ledger
 * (batch_insert_orders: one INSERT ... RETURNING of the k orders), the guard and COMMIT
 * (batch_commit), and the answers (stockdb__batch_answer). The per-row step knows nothing
 * of items or orders, so a transaction over several products can run it once per row. An attempt
 * that meets a key with an order already, or a row changed since its check, ends its
 * transaction and asks stockdb_deduct_batch to run the rest again (STOCKDB__RETRY_*). */
#include "stockdb_int.h"

#include <stdarg.h>
#include <stdio.h>
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
    MYSQL_BIND p[2], r[4];
    stockdb__bind_int(&p[0], &pid, NULL);
    stockdb__bind_int(&p[1], &seg, NULL);
    stockdb__bind_row(r, &row->stock, &row->seen_fence, &row->seen_kind, &row->version);
    int id = strategy == STOCKDB_FOR_UPDATE
                 ? (split ? STOCKDB__ST_SEG_READ_FOR_UPDATE : STOCKDB__ST_READ_FOR_UPDATE)
                 : (split ? STOCKDB__ST_SEG_READ : STOCKDB__ST_READ);
    int rc = stockdb__run(db, id, p, r, found, NULL);
    if (rc != STOCKDB_OK || *found || !split) return rc;
    int32_t total, unused_pid;
    uint64_t unused_id;
    rc = stockdb__read_total(db, pid, NULL, found, &total, &unused_id, &unused_pid);
    row->stock = 0;
    row->seen_fence = 0;
    row->seen_kind = 0;
    row->version = 0;
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

int stockdb__row_take(stockdb *db, stockdb_strategy strategy, stockdb__row *row, size_t want,
                      unsigned think_us, bool wrote) {
    bool found = false;
    uint64_t rows = 0;
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

    if (think_us) {
        /* The experiment's stand-in for the business logic between check and write: it
         * stands for the work around one check-and-update (once per batch of one product). */
        struct timespec ts = {think_us / 1000000, (long)(think_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    rc = row_write(db, row, &rows);
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

/* ---------------------------------------------------------------- the ledger */

/* Room for more bytes and the final NUL; false when out of memory. */
static bool json_room(stockdb__json_buf *j, size_t more) {
    if (j->oom) return false;
    size_t need = j->len + more + 1;
    if (need <= j->cap) return true;
    size_t c = j->cap ? j->cap : 256;
    while (c < need)
        c *= 2;
    char *grown = realloc(j->s, c);
    if (!grown) {
        free(j->s);
        *j = (stockdb__json_buf){.oom = true};
        return false;
    }
    j->s = grown;
    j->cap = c;
    return true;
}

/* Appends text (no escaping: numbers and punctuation only). */
void stockdb__json_raw(stockdb__json_buf *j, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !json_room(j, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(j->s + j->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    j->len += (size_t)n;
}

/* Appends key as a JSON string (NULL: null). Request ids are at most
 * STOCKDB_REQUEST_ID_MAX bytes; every byte that JSON cannot carry raw is escaped, so any
 * key arrives as it was. */
void stockdb__json_key(stockdb__json_buf *j, const char *key) {
    if (!key) {
        stockdb__json_raw(j, "null");
        return;
    }
    if (!json_room(j, 6 * strlen(key) + 2)) return;
    char *o = j->s + j->len;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        if (*p == '"' || *p == '\\') {
            *o++ = '\\';
            *o++ = (char)*p;
        } else if (*p < 0x20) {
            o += snprintf(o, 7, "\\u%04x", *p);
        } else {
            *o++ = (char)*p;
        }
    }
    *o++ = '"';
    *o = '\0';
    j->len = (size_t)(o - j->s);
}

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

/* The JSON array of the keys of items st->sel[0..k-1], in that order (NULL when out of
 * memory; the caller frees it). */
static char *keys_json(const stockdb__batch_state *st, size_t k) {
    stockdb__json_buf j = {0};
    stockdb__json_raw(&j, "[");
    for (size_t x = 0; x < k; x++) {
        if (x) stockdb__json_raw(&j, ",");
        stockdb__json_key(&j, st->b->items[st->sel[x]].request_id);
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
    unsigned long instance_len, key_len;
    uint64_t rows = 0;
    MYSQL_BIND p[4];

    stockdb__bind_int(&p[0], &pid, NULL);
    stockdb__bind_text(&p[1], db->instance, &instance_len);
    stockdb__bind_bigint(&p[2], &fence, &fence_null);
    if (st->one_by_one) {
        for (size_t j = 0; j < k; j++) {
            stockdb__bind_text(&p[3], b->items[st->sel[j]].request_id, &key_len);
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
    stockdb__bind_text(&p[3], json, &key_len);
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
    for (size_t j = 0; j < k; j++) {
        stockdb_item *it = &st->b->items[st->sel[j]];
        it->rc = STOCKDB_OK;
        it->res = (stockdb_result){
            .outcome = STOCKDB_DEDUCTED, .stock = stock - (int32_t)j - 1, .order_id = st->ids[j]};
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

    int rc = stockdb__row_take(db, strategy, &row, want, b->think_us, false);
    if ((rc == STOCKDB_ERR_NOT_FOUND || rc == STOCKDB_ERR_FENCED) && row.taken == 0)
        end_read(db, strategy); /* refused by the check */
    if (rc != STOCKDB_OK) return rc;
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
        if (!stockdb__request_id_ok(db, "stockdb_deduct_batch", b->items[i].request_id))
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

/* ---------------------------------------------------------------- several products */

/* Can the rows of sts[0..nb-1] be read and written one statement for all? Each must be a
 * product's own row (no segment), each product once: the write's rows matched then tell
 * whether every row's compare-and-set held. */
static bool multi_one_statement(const stockdb__batch_state *sts, size_t nb) {
    for (size_t i = 0; i < nb; i++) {
        if (sts[i].b->segment > 0) return false;
        for (size_t j = 0; j < i; j++)
            if (sts[j].b->product_id == sts[i].b->product_id) return false;
    }
    return true;
}

/* The check of every row at once (ST_MULTI_READ, locking for FOR_UPDATE): fills each
 * rows[i]'s stock, fence, kind and version. Returns STOCKDB_OK, STOCKDB_ERR_NOT_FOUND
 * (a product has no row) or a code of stockdb__code(). */
static int multi_read(stockdb *db, stockdb_strategy strategy, stockdb__row *rows, size_t nb) {
    int sid =
        strategy == STOCKDB_FOR_UPDATE ? STOCKDB__ST_MULTI_READ_FOR_UPDATE : STOCKDB__ST_MULTI_READ;
    MYSQL_STMT *stmt = db->stmt[sid];
    const char *name = stockdb__stmt_name[sid];
    stockdb__json_buf j = {0};
    stockdb__json_raw(&j, "[");
    for (size_t i = 0; i < nb; i++)
        stockdb__json_raw(&j, "%s%d", i ? "," : "", (int)rows[i].product_id);
    stockdb__json_raw(&j, "]");
    if (j.oom) {
        stockdb__set_err(db, "out of memory for the ids of %zu products", nb);
        return stockdb__code(db, CR_OUT_OF_MEMORY);
    }
    unsigned long json_len;
    int32_t pid = 0, stock = 0, kind = 0;
    int64_t fence = 0;
    uint64_t version = 0;
    bool seen[STOCKDB_MULTI_MAX] = {false};
    size_t got = 0;
    MYSQL_BIND p[1], r[5];
    stockdb__bind_text(&p[0], j.s, &json_len);
    stockdb__bind_int(&r[0], &pid, NULL);
    stockdb__bind_row(r + 1, &stock, &fence, &kind, &version);
    db->statements++;
    db->in_trx = true;
    int rc = 0;
    if (mysql_stmt_bind_param(stmt, p) || mysql_stmt_execute(stmt) ||
        mysql_stmt_bind_result(stmt, r) || mysql_stmt_store_result(stmt)) {
        free(j.s);
        rc = stockdb__stmt_error(db, stmt, name);
        mysql_stmt_free_result(stmt);
        return rc;
    }
    free(j.s);
    while ((rc = mysql_stmt_fetch(stmt)) == 0 || rc == MYSQL_DATA_TRUNCATED) {
        for (size_t i = 0; i < nb; i++) {
            if (rows[i].product_id != pid || seen[i]) continue;
            seen[i] = true;
            rows[i].stock = stock;
            rows[i].seen_fence = fence;
            rows[i].seen_kind = kind;
            rows[i].version = version;
            got++;
            break;
        }
    }
    if (rc == 1) {
        rc = stockdb__stmt_error(db, stmt, name);
        mysql_stmt_free_result(stmt);
        return rc;
    }
    mysql_stmt_free_result(stmt);
    for (size_t i = 0; got < nb && i < nb; i++) {
        if (seen[i]) continue;
        stockdb__set_err(db, "no product with id %d", rows[i].product_id);
        return STOCKDB_ERR_NOT_FOUND;
    }
    return STOCKDB_OK;
}

/* The write of every row at once (ST_MULTI_UPDATE): rows[i].taken units each, each row
 * with its own compare-and-set. Sets *matched to the rows whose compare-and-set held.
 * Returns STOCKDB_OK or a code of stockdb__code(). */
static int multi_write(stockdb *db, const stockdb__row *rows, size_t nb, uint64_t *matched) {
    stockdb__json_buf j = {0};
    stockdb__json_raw(&j, "[");
    for (size_t i = 0; i < nb; i++)
        stockdb__json_raw(&j, "%s[%d,%d,%lld,%d,%llu]", i ? "," : "", (int)rows[i].product_id,
                          (int)rows[i].taken, (long long)rows[i].fence, (int)rows[i].fence_kind,
                          (unsigned long long)rows[i].version);
    stockdb__json_raw(&j, "]");
    if (j.oom) {
        stockdb__set_err(db, "out of memory for the writes of %zu products", nb);
        return stockdb__code(db, CR_OUT_OF_MEMORY);
    }
    unsigned long json_len;
    MYSQL_BIND p[1];
    stockdb__bind_text(&p[0], j.s, &json_len);
    int rc = stockdb__run(db, STOCKDB__ST_MULTI_UPDATE, p, NULL, NULL, matched);
    free(j.s);
    return rc;
}

/* Every row's check and write as one statement each (multi_one_statement holds). Returns
 * STOCKDB_OK with rows[i].taken > 0 written for every row; else the transaction is ended
 * and the return is STOCKDB__RETRY_IDLE (the connection dropped before any write) or
 * STOCKDB_SPLIT (errstr says why). */
static int multi_take_rows(stockdb *db, stockdb_strategy strategy, stockdb__batch_state *sts,
                           stockdb__row *rows, size_t nb) {
    unsigned long long think_us = 0;
    int rc = multi_read(db, strategy, rows, nb);
    if (rc != STOCKDB_OK) {
        if (rc != STOCKDB_ERR_NOT_FOUND) rc = stockdb__fail(db, rc, false);
        stockdb__end_trx(db);
        return rc == STOCKDB__RETRY_IDLE ? rc : STOCKDB_SPLIT;
    }
    for (size_t i = 0; i < nb; i++) {
        stockdb__row *row = &rows[i];
        size_t want = 0;
        for (size_t x = 0; x < sts[i].b->n; x++)
            if (stockdb__batch_open(&sts[i], x)) want++;
        if (row->fence > 0 && stockdb__newer_holder_wrote(row->seen_fence, row->seen_kind,
                                                          row->fence, row->fence_kind)) {
            stockdb__fenced_out(db, row->product_id, 0, row->fence);
            stockdb__end_trx(db);
            return STOCKDB_SPLIT;
        }
        /* No stock left: the key look-ups and sold-out answers are the per-product path's. */
        if (row->stock <= 0 || want == 0) {
            stockdb__end_trx(db);
            return STOCKDB_SPLIT;
        }
        row->taken = (size_t)row->stock < want ? row->stock : (int32_t)want;
        think_us += sts[i].b->think_us;
    }
    if (think_us) {
        /* The stand-in for the business logic: once per product, as on the per-row path. */
        struct timespec ts = {(time_t)(think_us / 1000000), (long)(think_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    uint64_t matched = 0;
    rc = multi_write(db, rows, nb, &matched);
    if (rc != STOCKDB_OK) {
        stockdb__fail(db, rc, true);
        stockdb__end_trx(db);
        return STOCKDB_SPLIT;
    }
    if (matched != nb) {
        /* Some row changed after its check (or was deleted): which one is the per-product
         * path's to tell, each under its own lock. */
        stockdb__rollback(db);
        stockdb__set_err(db,
                         "%llu of %zu products changed between the check and the write; "
                         "rolled back",
                         (unsigned long long)(nb - matched), nb);
        return STOCKDB_SPLIT;
    }
    return STOCKDB_OK;
}

/* Every row's check and write one row at a time (the per-row step), for segments. Same
 * returns as multi_take_rows. */
static int multi_take_each(stockdb *db, stockdb_strategy strategy, stockdb__batch_state *sts,
                           stockdb__row *rows, size_t nb) {
    bool wrote = false;
    for (size_t i = 0; i < nb; i++) {
        size_t want = 0;
        for (size_t x = 0; x < sts[i].b->n; x++)
            if (stockdb__batch_open(&sts[i], x)) want++;
        int rc = stockdb__row_take(db, strategy, &rows[i], want, sts[i].b->think_us, wrote);
        /* No stock left (the key look-ups are the per-product path's) or any refusal. */
        if (rc != STOCKDB_OK || rows[i].taken == 0) {
            stockdb__end_trx(db);
            return rc == STOCKDB__RETRY_IDLE && !wrote ? STOCKDB__RETRY_IDLE : STOCKDB_SPLIT;
        }
        wrote = true;
    }
    return STOCKDB_OK;
}

/* The orders of every batch in one statement (ST_INSERT_MULTI): batch i's first ks[i]
 * open items (sts[i].sel) get an order each, ids in sts[i].ids. Returns STOCKDB_OK or a
 * STOCKDB_* code (a duplicate key among them too). */
static int multi_insert_orders(stockdb *db, stockdb__batch_state *sts, size_t nb,
                               const size_t *ks) {
    stockdb__json_buf j = {0};
    stockdb__json_raw(&j, "[");
    for (size_t i = 0; i < nb; i++) {
        stockdb_batch *b = sts[i].b;
        size_t n_sel = 0;
        for (size_t x = 0; x < b->n && n_sel < ks[i]; x++)
            if (stockdb__batch_open(&sts[i], x)) sts[i].sel[n_sel++] = x;
        for (size_t x = 0; x < ks[i]; x++) {
            stockdb__json_raw(&j, "%s[%d,", j.len > 1 ? "," : "", (int)b->product_id);
            if (b->fence > 0)
                stockdb__json_raw(&j, "%lld,", (long long)b->fence);
            else
                stockdb__json_raw(&j, "null,");
            stockdb__json_key(&j, b->items[sts[i].sel[x]].request_id);
            stockdb__json_raw(&j, "]");
        }
    }
    stockdb__json_raw(&j, "]");
    if (j.oom) {
        stockdb__set_err(db, "out of memory for the orders of %zu products", nb);
        return stockdb__code(db, CR_OUT_OF_MEMORY);
    }
    unsigned long instance_len, json_len;
    MYSQL_BIND p[2];
    stockdb__bind_text(&p[0], db->instance, &instance_len);
    stockdb__bind_text(&p[1], j.s, &json_len);
    int rc = stockdb__insert_returning(db, STOCKDB__ST_INSERT_MULTI, sts, nb, ks, p);
    free(j.s);
    return rc;
}

/* One attempt at stockdb_deduct_multi on a connected handle (stockdb.h): every row's
 * check and fenced write, every batch's orders, the guard and COMMIT. For products'
 * own rows that is four statements whatever the number of products: one read of all
 * rows, one write of all rows (each with its own compare-and-set), one INSERT of all
 * orders and COMMIT; segments are read and written one row at a time. Anything but the
 * common case ends the transaction and returns STOCKDB_SPLIT; nothing is committed then. */
static int multi_once(stockdb *db, stockdb_strategy strategy, stockdb__batch_state *sts, size_t nb,
                      int (*guard)(void *), void *guard_arg) {
    stockdb__row rows[STOCKDB_MULTI_MAX];
    size_t ks[STOCKDB_MULTI_MAX];
    for (size_t i = 0; i < nb; i++) {
        stockdb_batch *b = sts[i].b;
        rows[i] = (stockdb__row){.product_id = b->product_id,
                                 .segment = b->segment,
                                 .fence = b->fence,
                                 .fence_kind = b->fence_kind};
    }
    int rc = multi_one_statement(sts, nb) ? multi_take_rows(db, strategy, sts, rows, nb)
                                          : multi_take_each(db, strategy, sts, rows, nb);
    if (rc != STOCKDB_OK) return rc;
    for (size_t i = 0; i < nb; i++)
        ks[i] = (size_t)rows[i].taken;
    /* A duplicate key rolls back: the per-product path answers it from its order. */
    rc = multi_insert_orders(db, sts, nb, ks);
    if (rc != STOCKDB_OK) {
        stockdb__fail(db, rc, true);
        stockdb__end_trx(db);
        return STOCKDB_SPLIT;
    }
    if (guard && guard(guard_arg) != 0) {
        stockdb__rollback(db);
        stockdb__set_err(db, "the guard refused the commit of %zu products; rolled back", nb);
        return STOCKDB_SPLIT;
    }
    rc = stockdb__commit(db);
    if (rc != STOCKDB_OK && rc != STOCKDB_ERR_CONNECT) {
        stockdb__fail(db, rc, true); /* the server said no: nothing was committed */
        return STOCKDB_SPLIT;
    }
    if (rc == STOCKDB_ERR_CONNECT) {
        /* In doubt: any keyed order of the transaction tells, as it is atomic. */
        const char *key = NULL;
        uint64_t key_id = 0, found_id = 0;
        int32_t found_pid = 0;
        bool found = false;
        for (size_t i = 0; i < nb && !key; i++)
            for (size_t j = 0; j < ks[i] && !key; j++) {
                key = sts[i].b->items[sts[i].sel[j]].request_id;
                key_id = sts[i].ids[j];
            }
        rc = stockdb__confirm_key(db, key, &found, &found_id, &found_pid);
        if (rc != STOCKDB_OK) return rc;
        if (!found) return STOCKDB_ERR_CONNECT;
        if (found_id != key_id) {
            stockdb__set_err(db,
                             "COMMIT reply lost, and request id \"%s\" has order %llu, not ours",
                             key, (unsigned long long)found_id);
            return STOCKDB_ERR_UNKNOWN;
        }
    }
    for (size_t i = 0; i < nb; i++)
        stockdb__batch_answer(&sts[i], rows[i].stock, ks[i]);
    return STOCKDB_OK;
}

int stockdb_deduct_multi(stockdb *db, stockdb_strategy strategy, stockdb_batch *bs, size_t nb,
                         int (*guard)(void *arg), void *guard_arg) {
    if (!db) return STOCKDB_ERR_CONFIG;
    stockdb__clear_err(db);
    if (!bs || nb == 0 || nb > STOCKDB_MULTI_MAX) {
        stockdb__set_err(db, "stockdb_deduct_multi: 1..%d batches are required", STOCKDB_MULTI_MAX);
        return STOCKDB_ERR_CONFIG;
    }
    for (size_t i = 0; i < nb; i++) {
        if (!stockdb__batch_args_ok(db, strategy, &bs[i])) return STOCKDB_ERR_CONFIG;
        /* One key in two batches would be two deductions of one key in one transaction. */
        for (size_t j = 0; j < i; j++)
            for (size_t x = 0; x < bs[i].n; x++)
                for (size_t y = 0; bs[i].items[x].request_id && y < bs[j].n; y++)
                    if (bs[j].items[y].request_id &&
                        strcmp(bs[i].items[x].request_id, bs[j].items[y].request_id) == 0)
                        return STOCKDB_SPLIT;
    }
    stockdb__batch_state sts[STOCKDB_MULTI_MAX];
    memset(sts, 0, sizeof(sts));
    int rc = STOCKDB_ERR_NOMEM;
    for (size_t i = 0; i < nb; i++) {
        size_t n = bs[i].n;
        sts[i] = (stockdb__batch_state){.b = &bs[i],
                                        .leader = malloc(n * sizeof(size_t)),
                                        .done = calloc(n, sizeof(bool)),
                                        .sel = malloc(n * sizeof(size_t)),
                                        .ids = malloc(n * sizeof(uint64_t))};
        if (!sts[i].leader || !sts[i].done || !sts[i].sel || !sts[i].ids) {
            stockdb__set_err(db, "stockdb_deduct_multi: out of memory");
            goto out;
        }
        stockdb__batch_find_leaders(&sts[i]);
    }
    for (int idle_retries = 0;;) {
        rc = stockdb__connect(db);
        if (rc != STOCKDB_OK) {
            rc = STOCKDB_SPLIT; /* nothing was sent; the per-product path reports it */
            break;
        }
        rc = multi_once(db, strategy, sts, nb, guard, guard_arg);
        if (rc != STOCKDB__RETRY_IDLE) break;
        if (++idle_retries == 2) {
            rc = STOCKDB_SPLIT;
            break;
        }
    }
    if (rc == STOCKDB_OK)
        for (size_t i = 0; i < nb; i++)
            stockdb__batch_follow(&sts[i]);
out:
    stockdb__end_trx(db);
    for (size_t i = 0; i < nb; i++) {
        free(sts[i].leader);
        free(sts[i].done);
        free(sts[i].sel);
        free(sts[i].ids);
    }
    return rc;
}
