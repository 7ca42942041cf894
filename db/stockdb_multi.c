/* stockdb_multi.c: batches of several products, under their own locks, as ONE transaction
 * (stockdb.h's stockdb_deduct_multi), so that a leader that holds the locks of several
 * products pays the round trips of one transaction, not of one per product.
 *
 * One attempt (multi_once) checks every row, thinks once for all, and writes every row
 * with the per-row step's halves (a read by primary key, then the fenced compare-and-set
 * under the caller's token of that product and the row_version its check read), inserts
 * the orders of every product in ONE statement (multi_insert_orders), calls the guard
 * once and COMMITs: 2k + 2 statements for k products. All or nothing: anything but the
 * common case (a row with no stock left, a key that has an order already, a row changed
 * since its check, a fence or guard refusal, a failed statement) rolls the whole
 * transaction back and returns STOCKDB_SPLIT, and the caller runs each batch on its own
 * (stockdb_batch.c) under its own lock. A COMMIT whose reply was lost is confirmed by any
 * keyed order of the transaction, as it is atomic. The batch's state, argument check and
 * answers are the batch's own (stockdb_int.h, "a batch's steps"). */
#include "stockdb_int.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <errmsg.h>
#include <mysql.h>

/* ---------------------------------------------------------------- several products */

/* Every row's check, then the think time of every product at once, then every row's
 * write (the per-row step's halves, stockdb__row_check and stockdb__row_write: a
 * primary-key read, then the fenced compare-and-set). Nothing is written until every
 * row is checked, so the session is never idle with rows written while it thinks: the
 * server ends a write transaction that is silent longer than idle_write_transaction_timeout
 * (stockdb.c), and a think per product after the first product's write would have it
 * end every transaction whose think times add up past it. Returns STOCKDB_OK with
 * rows[i].taken > 0 written for every row; else the transaction is ended and the return
 * is STOCKDB__RETRY_IDLE (the connection dropped before any write) or STOCKDB_SPLIT
 * (errstr says why). One statement for all rows (an UPDATE joined with a JSON_TABLE of
 * the rows) was tried and measured: MariaDB spent about 1.8x the CPU per deduction on
 * it (README, "Batches across products"). */
static int multi_take_each(stockdb *db, stockdb_strategy strategy, stockdb__batch_state *sts,
                           stockdb__row *rows, size_t nb) {
    uint64_t think_us = 0;
    int rc = STOCKDB_OK;
    for (size_t i = 0; i < nb; i++) {
        size_t want = 0;
        for (size_t x = 0; x < sts[i].b->n; x++)
            if (stockdb__batch_open(&sts[i], x)) want++;
        rc = stockdb__row_check(db, strategy, &rows[i], want, false);
        /* No stock left (the key look-ups are the per-product path's), any refusal, or
         * a product with a limit or reservations (the per-product path counts the
         * customers and reserves). */
        if (rc != STOCKDB_OK || rows[i].taken == 0 || !rows[i].terms.no_limit ||
            !rows[i].terms.no_reserve) {
            stockdb__end_trx(db);
            return rc == STOCKDB__RETRY_IDLE ? STOCKDB__RETRY_IDLE : STOCKDB_SPLIT;
        }
        think_us += sts[i].b->think_us;
    }
    stockdb__think(think_us > UINT_MAX ? UINT_MAX : (unsigned)think_us);
    for (size_t i = 0; i < nb && rc == STOCKDB_OK; i++)
        rc = stockdb__row_write(db, &rows[i]);
    if (rc == STOCKDB_OK) return STOCKDB_OK;
    stockdb__end_trx(db);
    return STOCKDB_SPLIT;
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
            stockdb__json_raw(&j, ",");
            stockdb__json_key(&j, b->items[sts[i].sel[x]].user);
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
 * check and fenced write (two statements a row), the orders of every batch in one
 * INSERT, the guard and COMMIT: 2k + 2 statements for k rows. Anything but the common
 * case ends the transaction and returns STOCKDB_SPLIT; nothing is committed then. */
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
    int rc = multi_take_each(db, strategy, sts, rows, nb);
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
