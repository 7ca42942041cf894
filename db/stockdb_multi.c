/* stockdb_multi.c: batches of several products, under their own locks, as ONE transaction
 * (stockdb.h's stockdb_deduct_multi), so that a leader that holds the locks of several
 * products pays the round trips of one transaction, not of one per product.
 *
 * One attempt (multi_once) reads every row (multi_read), writes every row (multi_write),
 * inserts every order (multi_insert_orders), calls the guard once and COMMITs: four
 * statements for products' own rows, whatever their number. Each row keeps its own fenced
 * compare-and-set: the write carries, per row, the caller's token of that product and
 * the row_version its check read, and the ids are distinct, so the rows the write matched
 * equal the products exactly when every compare-and-set held. Segments take the per-row
 * step (stockdb__row_take) one row at a time instead. All or nothing: anything but the
 * common case (a row with no stock left, a key that has an order already, a row changed
 * since its check, a fence or guard refusal, a failed statement) rolls the whole
 * transaction back and returns STOCKDB_SPLIT, and the caller runs each batch on its own
 * (stockdb_batch.c) under its own lock. A COMMIT whose reply was lost is confirmed by any
 * keyed order of the transaction, as it is atomic. The batch's state, argument check and
 * answers are the batch's own (stockdb_int.h, "a batch's steps"). */
#include "stockdb_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <errmsg.h>
#include <mysql.h>

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
