/* stockdb_life.c: an order's life after the deduction (stockdb.h, "after the
 * deduction"): the table of its states and changes, and the transactions that make the
 * changes (pay, cancel, the expiry of unpaid reservations) and that raise the stock
 * (restock).
 *
 * The table is the one place that says which change leaves which state for which, when,
 * and what it gives back; the statements take its words as parameters, so a change the
 * table does not have cannot be made. docs/orders.md draws it. Every change is a
 * conditional UPDATE on the order's state: two changes racing for one order (a cancel
 * and the expiry, a payment and the expiry) both run it, and only one changes the row,
 * so a unit is given back once. A change that gives units back raises the stock in the
 * same transaction, fenced like a deduction's write, under the product's lock where the
 * mode has one (the caller takes it; FOR_UPDATE locks the row here).
 *
 * Layer: it calls stockdb.c (the handle and its statements) only. */
#include "stockdb_int.h"

#include <stdio.h>
#include <string.h>

#include <mysql.h>

/* ---------------------------------------------------------------- the table */

const stockdb_change stockdb_changes[STOCKDB_EV_COUNT] = {
    [STOCKDB_EV_PAY] = {STOCKDB_EV_PAY, STOCKDB_STATE_RESERVED, STOCKDB_STATE_PAID,
                        STOCKDB_WHEN_BEFORE_EXPIRY, 0},
    [STOCKDB_EV_CANCEL] = {STOCKDB_EV_CANCEL, STOCKDB_STATE_RESERVED, STOCKDB_STATE_CANCELLED,
                           STOCKDB_WHEN_ANY, 1},
    [STOCKDB_EV_EXPIRE] = {STOCKDB_EV_EXPIRE, STOCKDB_STATE_RESERVED, STOCKDB_STATE_EXPIRED,
                           STOCKDB_WHEN_AFTER_EXPIRY, 1},
};

static const struct {
    const char *name;
    bool holds; /* holds a unit: counted by the limit, not in the stock */
} states[STOCKDB_STATE_COUNT] = {
    [STOCKDB_STATE_SOLD] = {"sold", true},        [STOCKDB_STATE_RESERVED] = {"reserved", true},
    [STOCKDB_STATE_PAID] = {"paid", true},        [STOCKDB_STATE_CANCELLED] = {"cancelled", false},
    [STOCKDB_STATE_EXPIRED] = {"expired", false},
};

const char *stockdb_state_name(stockdb_state s) {
    return (unsigned)s < STOCKDB_STATE_COUNT ? states[s].name : "?";
}

bool stockdb_state_holds(stockdb_state s) {
    return (unsigned)s < STOCKDB_STATE_COUNT && states[s].holds;
}

/* ---------------------------------------------------------------- one-row reads */

/* Runs st, a read of at most one row, with parameters p into r, and ends its
 * transaction; *found says whether the row was there. Retried once after reconnecting if
 * the idle connection was lost. The order's and the product's reads below. */
static int read_row(stockdb *db, int st, MYSQL_BIND *p, MYSQL_BIND *r, bool *found) {
    for (int attempt = 0;; attempt++) {
        int rc = stockdb__connect(db);
        if (rc != STOCKDB_OK) return rc;
        *found = false;
        rc = stockdb__run(db, st, p, r, found, NULL);
        if (rc != STOCKDB_OK) {
            rc = stockdb__fail(db, rc, false);
            if (rc == STOCKDB__RETRY_IDLE && attempt == 0) continue;
            stockdb__end_trx(db);
            return rc == STOCKDB__RETRY_IDLE ? STOCKDB_ERR_CONNECT : rc;
        }
        stockdb__end_trx(db);
        return STOCKDB_OK;
    }
}

/* ---------------------------------------------------------------- reading an order */

int stockdb_order_read(stockdb *db, uint64_t id, stockdb_order *out) {
    if (!db) return STOCKDB_ERR_CONFIG;
    stockdb__clear_err(db);
    memset(out, 0, sizeof(*out));
    uint64_t oid = id;
    int32_t state = 0, past = 0;
    my_bool user_null = 1, past_null = 1, expires_null = 1;
    unsigned long user_len = 0, expires_len = 0;
    bool found = false;
    MYSQL_BIND p[1], r[5];
    stockdb__bind_ubigint(&p[0], &oid);
    stockdb__bind_int(&r[0], &out->product_id, NULL);
    stockdb__bind_out_text(&r[1], out->user, sizeof(out->user), &user_len, &user_null);
    stockdb__bind_int(&r[2], &state, NULL);
    stockdb__bind_int(&r[3], &past, &past_null);
    stockdb__bind_out_text(&r[4], out->expires_at, sizeof(out->expires_at), &expires_len,
                           &expires_null);
    int rc = read_row(db, STOCKDB__ST_ORDER_READ, p, r, &found);
    if (rc != STOCKDB_OK) return rc;
    if (!found) {
        stockdb__set_err(db, "no order with id %llu", (unsigned long long)id);
        return STOCKDB_ERR_NOT_FOUND;
    }
    out->id = id;
    out->state = (stockdb_state)(state - 1); /* ENUM + 0 counts from 1 */
    out->has_user = !user_null;
    out->user[user_null ? 0 : user_len < sizeof(out->user) ? user_len : 0] = '\0';
    out->past_expiry = !past_null && past;
    out->expires_at[expires_null || expires_len >= sizeof(out->expires_at) ? 0 : expires_len] =
        '\0';
    return STOCKDB_OK;
}

/* ---------------------------------------------------------------- one transaction */

/* The stock raised by units (fenced when l->fence > 0), after the change's UPDATE; *stock
 * the stock after. Returns STOCKDB_OK, STOCKDB_ERR_FENCED (a newer holder wrote the row)
 * or STOCKDB_ERR_NOT_FOUND (no such product; nothing rolled back here), or a code of
 * stockdb__run(). */
static int stock_add(stockdb *db, const stockdb_life *l, int32_t units, int32_t *stock) {
    int32_t k = units, pid = l->product_id, kind = l->fence_kind;
    int64_t fence = l->fence;
    bool fenced = fence > 0;
    uint64_t rows = 0;
    MYSQL_BIND p[6];
    stockdb__bind_int(&p[0], &k, NULL);
    if (fenced) {
        stockdb__bind_bigint(&p[1], &fence, NULL);
        stockdb__bind_int(&p[2], &kind, NULL);
        stockdb__bind_int(&p[3], &pid, NULL);
        stockdb__bind_bigint(&p[4], &fence, NULL);
        stockdb__bind_int(&p[5], &kind, NULL);
    } else {
        stockdb__bind_int(&p[1], &pid, NULL);
    }
    int id = fenced ? STOCKDB__ST_STOCK_ADD_FENCED : STOCKDB__ST_STOCK_ADD;
    int rc = stockdb__run(db, id, p, NULL, NULL, &rows);
    if (rc != STOCKDB_OK) return rc;
    if (rows == 0) {
        /* No row: fenced out, or no such product; one read tells. */
        bool found = false;
        int32_t now = 0, row_kind = 0;
        int64_t row_fence = 0;
        uint64_t version = 0;
        rc = stockdb__read_product(db, pid, &found, &now, &row_fence, &row_kind, &version);
        if (rc != STOCKDB_OK) return rc;
        if (!found) {
            stockdb__set_err(db, "no product with id %d", pid);
            return STOCKDB_ERR_NOT_FOUND;
        }
        return stockdb__fenced_out(db, pid, 0, fence);
    }
    if (stock) *stock = (int32_t)mysql_stmt_insert_id(db->stmt[id]);
    return STOCKDB_OK;
}

/* FOR_UPDATE: the product row's lock, first, as every write of that mode takes it. */
static int lock_row(stockdb *db, const stockdb_life *l) {
    if (l->strategy != STOCKDB_FOR_UPDATE) return STOCKDB_OK;
    int32_t pid = l->product_id, stock, kind;
    int64_t fence;
    uint64_t version;
    bool found = false;
    stockdb__terms unused;
    MYSQL_BIND p[1], r[6];
    stockdb__bind_int(&p[0], &pid, NULL);
    stockdb__bind_row(r, &stock, &fence, &kind, &version, &unused);
    int rc = stockdb__run(db, STOCKDB__ST_READ_FOR_UPDATE, p, r, &found, NULL);
    if (rc == STOCKDB_OK && !found) {
        stockdb__set_err(db, "no product with id %d", pid);
        return STOCKDB_ERR_NOT_FOUND;
    }
    return rc;
}

/* The guard and COMMIT of a transaction that wrote. STOCKDB_OK, STOCKDB_ERR_GUARD (rolled
 * back), or the COMMIT's code (STOCKDB_ERR_CONNECT: in doubt). */
static int life_commit(stockdb *db, const stockdb_life *l) {
    if (l->guard && l->guard(l->guard_arg) != 0) {
        stockdb__rollback(db);
        stockdb__set_err(db, "the guard refused the commit; rolled back");
        return STOCKDB_ERR_GUARD;
    }
    int rc = stockdb__commit(db);
    if (rc != STOCKDB_OK && rc != STOCKDB_ERR_CONNECT) return stockdb__fail(db, rc, true);
    return rc;
}

/* ---------------------------------------------------------------- pay and cancel */

/* One attempt at a change of order id on a connected handle: the row lock (FOR_UPDATE),
 * the conditional UPDATE, the stock (when it gives back), guard, COMMIT. *changed says
 * whether the UPDATE changed the row (if not, nothing was written and the transaction is
 * ended). Returns STOCKDB_OK, STOCKDB__RETRY_IDLE, or an error. */
static int change_once(stockdb *db, const stockdb_life *l, uint64_t id, const stockdb_change *c,
                       const char *user, bool *changed) {
    const char *to = stockdb_state_name(c->to), *from = stockdb_state_name(c->from);
    int32_t give = c->stock_delta, when = (int32_t)c->when;
    int32_t pid = l->product_id;
    uint64_t oid = id, rows = 0;
    unsigned long to_len, from_len, user_len;
    MYSQL_BIND p[9];
    *changed = false;
    int rc = lock_row(db, l);
    if (rc != STOCKDB_OK) return rc == STOCKDB_ERR_NOT_FOUND ? rc : stockdb__fail(db, rc, false);
    stockdb__bind_text(&p[0], to, &to_len);
    stockdb__bind_int(&p[1], &give, NULL);
    stockdb__bind_ubigint(&p[2], &oid);
    stockdb__bind_int(&p[3], &pid, NULL);
    stockdb__bind_text(&p[4], user, &user_len);
    stockdb__bind_text(&p[5], from, &from_len);
    stockdb__bind_int(&p[6], &when, NULL);
    stockdb__bind_int(&p[7], &when, NULL);
    stockdb__bind_int(&p[8], &when, NULL);
    rc = stockdb__run(db, STOCKDB__ST_ORDER_CHANGE, p, NULL, NULL, &rows);
    if (rc != STOCKDB_OK) return stockdb__fail(db, rc, false);
    if (rows == 0) {
        stockdb__end_trx(db); /* wrote nothing; the caller reads why */
        return STOCKDB_OK;
    }
    *changed = true;
    if (give > 0) {
        rc = stock_add(db, l, give, NULL);
        if (rc != STOCKDB_OK) {
            if (rc == STOCKDB_ERR_FENCED || rc == STOCKDB_ERR_NOT_FOUND) {
                stockdb__rollback(db);
                return rc;
            }
            return stockdb__fail(db, rc, true);
        }
    }
    return life_commit(db, l);
}

/* Why a change did not apply, from the order as read now. */
static int refusal(stockdb *db, const stockdb_life *l, const stockdb_change *c, const char *user,
                   const stockdb_order *o) {
    if (o->product_id != l->product_id) {
        stockdb__set_err(db, "order %llu is not of product %d", (unsigned long long)o->id,
                         l->product_id);
        return STOCKDB_ERR_NOT_FOUND;
    }
    if (!o->has_user || strcmp(o->user, user) != 0) {
        stockdb__set_err(db, "order %llu is another customer's", (unsigned long long)o->id);
        return STOCKDB_ERR_KEY_REUSED;
    }
    stockdb__set_err(db, "order %llu is %s%s, not %s", (unsigned long long)o->id,
                     stockdb_state_name(o->state),
                     o->state == c->from && o->past_expiry ? " past its expiry" : "",
                     stockdb_state_name(c->from));
    return STOCKDB_ERR_STATE;
}

int stockdb_order_change(stockdb *db, const stockdb_life *l, uint64_t id, stockdb_event event,
                         const char *user, stockdb_order *after) {
    if (!db) return STOCKDB_ERR_CONFIG;
    stockdb__clear_err(db);
    memset(after, 0, sizeof(*after));
    if (!l || (unsigned)event >= STOCKDB_EV_COUNT || event == STOCKDB_EV_EXPIRE || !user ||
        !*user || !stockdb__user_ok(db, "stockdb_order_change", user)) {
        if (!db->errstr[0]) stockdb__set_err(db, "stockdb_order_change: bad arguments");
        return STOCKDB_ERR_CONFIG;
    }
    const stockdb_change *c = &stockdb_changes[event];
    bool changed = false;
    int rc;
    for (int attempt = 0;; attempt++) {
        rc = stockdb__connect(db);
        if (rc != STOCKDB_OK) return rc;
        rc = change_once(db, l, id, c, user, &changed);
        if (rc == STOCKDB__RETRY_IDLE && attempt == 0) continue;
        stockdb__end_trx(db);
        if (rc == STOCKDB__RETRY_IDLE) return STOCKDB_ERR_CONNECT;
        break;
    }
    char why[sizeof(db->errstr)];
    snprintf(why, sizeof(why), "%s", db->errstr);
    if (rc != STOCKDB_OK && rc != STOCKDB_ERR_CONNECT) return rc;
    /* Changed and committed, in doubt, or not changed: the order as it is now tells. A
     * COMMIT whose reply was lost is decided by the order's state (the change is the
     * only way into it). */
    int read = stockdb_order_read(db, id, after);
    if (rc == STOCKDB_ERR_CONNECT) {
        if (read == STOCKDB_OK && after->state == c->to) return STOCKDB_OK;
        stockdb__set_err(db, "%s; the order's state could not be confirmed", why);
        return read == STOCKDB_OK ? STOCKDB_ERR_CONNECT : STOCKDB_ERR_UNKNOWN;
    }
    if (changed) {
        if (read != STOCKDB_OK) { /* committed; the read after is only for the answer */
            after->id = id;
            after->product_id = l->product_id;
            after->state = c->to;
        }
        return STOCKDB_OK;
    }
    if (read != STOCKDB_OK) return read;
    return refusal(db, l, c, user, after);
}

/* ---------------------------------------------------------------- the expiry */

int stockdb_release_expired(stockdb *db, const stockdb_life *l, unsigned max, unsigned *released) {
    if (!db) return STOCKDB_ERR_CONFIG;
    stockdb__clear_err(db);
    *released = 0;
    if (!l || max == 0 || max > 1000) {
        stockdb__set_err(db, "stockdb_release_expired: 1..1000 at a time");
        return STOCKDB_ERR_CONFIG;
    }
    const stockdb_change *c = &stockdb_changes[STOCKDB_EV_EXPIRE];
    for (int attempt = 0;; attempt++) {
        int rc = stockdb__connect(db);
        if (rc != STOCKDB_OK) return rc;
        const char *to = stockdb_state_name(c->to), *from = stockdb_state_name(c->from);
        int32_t pid = l->product_id, lim = (int32_t)max;
        unsigned long to_len, from_len;
        uint64_t rows = 0;
        MYSQL_BIND p[4];
        rc = lock_row(db, l);
        if (rc == STOCKDB_OK) {
            stockdb__bind_text(&p[0], to, &to_len);
            stockdb__bind_text(&p[1], from, &from_len);
            stockdb__bind_int(&p[2], &pid, NULL);
            stockdb__bind_int(&p[3], &lim, NULL);
            rc = stockdb__run(db, STOCKDB__ST_RELEASE_EXPIRED, p, NULL, NULL, &rows);
        }
        if (rc != STOCKDB_OK) {
            rc = rc == STOCKDB_ERR_NOT_FOUND ? rc : stockdb__fail(db, rc, false);
            if (rc == STOCKDB__RETRY_IDLE && attempt == 0) continue;
            stockdb__end_trx(db);
            return rc == STOCKDB__RETRY_IDLE ? STOCKDB_ERR_CONNECT : rc;
        }
        if (rows == 0) {
            stockdb__end_trx(db);
            return STOCKDB_OK;
        }
        rc = stock_add(db, l, (int32_t)rows * c->stock_delta, NULL);
        if (rc == STOCKDB_ERR_FENCED || rc == STOCKDB_ERR_NOT_FOUND) {
            stockdb__rollback(db);
            return rc;
        }
        if (rc != STOCKDB_OK) return stockdb__fail(db, rc, true);
        rc = life_commit(db, l);
        stockdb__end_trx(db);
        /* A lost COMMIT reply: the next scan finds what is still reserved. */
        if (rc == STOCKDB_ERR_CONNECT) return STOCKDB_ERR_UNKNOWN;
        if (rc == STOCKDB_OK) *released = (unsigned)rows;
        return rc;
    }
}

typedef struct scan_state {
    int32_t pid;
    int32_t *out;
    unsigned max, n;
} scan_state;

static int scan_row(void *arg) {
    scan_state *s = arg;
    for (unsigned i = 0; i < s->n; i++)
        if (s->out[i] == s->pid) return STOCKDB_OK;
    if (s->n < s->max) s->out[s->n++] = s->pid;
    return STOCKDB_OK;
}

int stockdb_expired_products(stockdb *db, int32_t *out, unsigned max, unsigned *n) {
    if (!db) return STOCKDB_ERR_CONFIG;
    stockdb__clear_err(db);
    *n = 0;
    if (!out || max == 0 || max > 1000) {
        stockdb__set_err(db, "stockdb_expired_products: 1..1000 at a time");
        return STOCKDB_ERR_CONFIG;
    }
    for (int attempt = 0;; attempt++) {
        int rc = stockdb__connect(db);
        if (rc != STOCKDB_OK) return rc;
        scan_state s = {.out = out, .max = max};
        int32_t lim = (int32_t)max;
        MYSQL_BIND p[1], r[1];
        stockdb__bind_int(&p[0], &lim, NULL);
        stockdb__bind_int(&r[0], &s.pid, NULL);
        rc = stockdb__run_each(db, STOCKDB__ST_EXPIRED_SCAN, p, r, scan_row, &s);
        if (rc != STOCKDB_OK) {
            rc = stockdb__fail(db, rc, false);
            if (rc == STOCKDB__RETRY_IDLE && attempt == 0) continue;
            stockdb__end_trx(db);
            return rc == STOCKDB__RETRY_IDLE ? STOCKDB_ERR_CONNECT : rc;
        }
        stockdb__end_trx(db);
        *n = s.n;
        return STOCKDB_OK;
    }
}

/* ---------------------------------------------------------------- restock */

/* Runs st, a one-row read of product_id bound as its only parameter, into r, and ends its
 * transaction: the restocks' and the units' reads below. Retried once after reconnecting
 * if the idle connection was lost. */
static int read_product_row(stockdb *db, int st, int32_t product_id, MYSQL_BIND *r) {
    if (!db) return STOCKDB_ERR_CONFIG;
    stockdb__clear_err(db);
    int32_t pid = product_id;
    bool found = false;
    MYSQL_BIND p[1];
    stockdb__bind_int(&p[0], &pid, NULL);
    int rc = read_row(db, st, p, r, &found);
    if (rc != STOCKDB_OK || found) return rc;
    stockdb__set_err(db, "no product with id %d", product_id);
    return STOCKDB_ERR_NOT_FOUND;
}

int stockdb_get_stock_restocked(stockdb *db, int32_t product_id, int32_t *stock, int64_t *restocked,
                                int32_t *limit, int32_t *reserve_s) {
    MYSQL_BIND r[4];
    my_bool no_limit = 0, no_reserve = 0;
    stockdb__bind_int(&r[0], stock, NULL);
    stockdb__bind_bigint(&r[1], restocked, NULL);
    stockdb__bind_int(&r[2], limit, &no_limit);
    stockdb__bind_int(&r[3], reserve_s, &no_reserve);
    int rc = read_product_row(db, STOCKDB__ST_STOCK_RESTOCKED, product_id, r);
    if (no_limit) *limit = -1;
    if (no_reserve) *reserve_s = -1;
    return rc;
}

int stockdb_get_stock_units(stockdb *db, int32_t product_id, int32_t *stock, stockdb_units *u) {
    MYSQL_BIND r[4];
    stockdb__bind_int(&r[0], stock, NULL);
    stockdb__bind_bigint(&r[1], &u->reserved, NULL);
    stockdb__bind_bigint(&r[2], &u->paid, NULL);
    stockdb__bind_bigint(&r[3], &u->released, NULL);
    return read_product_row(db, STOCKDB__ST_STOCK_UNITS, product_id, r);
}

/* The restock of key already made, if any (*found): STOCKDB_OK with *stock the product's
 * stock now when it added the same units to product l->product_id, STOCKDB_ERR_KEY_REUSED
 * (text in errstr) when it restocked another product or other units, as a deduction's
 * key of another product is refused. */
static int restock_replay(stockdb *db, const stockdb_life *l, const char *key, int32_t units,
                          bool *found, int32_t *stock) {
    int32_t pid = 0, k = 0, now = 0;
    unsigned long key_len;
    MYSQL_BIND p[1], r[3];
    *found = false;
    stockdb__bind_text(&p[0], key, &key_len);
    stockdb__bind_int(&r[0], &pid, NULL);
    stockdb__bind_int(&r[1], &k, NULL);
    stockdb__bind_int(&r[2], &now, NULL);
    int rc = read_row(db, STOCKDB__ST_RESTOCK_LOOKUP, p, r, found);
    if (rc != STOCKDB_OK || !*found) return rc;
    if (pid != l->product_id || k != units) {
        stockdb__set_err(db, "request id %s restocked product %d by %d units, not %d by %d", key,
                         pid, k, l->product_id, units);
        return STOCKDB_ERR_KEY_REUSED;
    }
    *stock = now;
    return STOCKDB_OK;
}

int stockdb_restock(stockdb *db, const stockdb_life *l, int32_t units, const char *request_id,
                    int32_t *stock, bool *replayed) {
    if (!db) return STOCKDB_ERR_CONFIG;
    stockdb__clear_err(db);
    *replayed = false;
    if (!l || units < 1 || units > 1000000) {
        stockdb__set_err(db, "stockdb_restock: 1..1000000 units");
        return STOCKDB_ERR_CONFIG;
    }
    if (!stockdb__request_id_ok(db, "stockdb_restock", request_id)) return STOCKDB_ERR_CONFIG;
    if (request_id) {
        int rc = restock_replay(db, l, request_id, units, replayed, stock);
        if (rc != STOCKDB_OK || *replayed) return rc;
    }
    for (int attempt = 0;; attempt++) {
        int rc = stockdb__connect(db);
        if (rc != STOCKDB_OK) return rc;
        rc = lock_row(db, l);
        if (rc == STOCKDB_OK) rc = stock_add(db, l, units, stock);
        if (rc == STOCKDB_ERR_FENCED || rc == STOCKDB_ERR_NOT_FOUND) {
            stockdb__end_trx(db);
            return rc;
        }
        if (rc != STOCKDB_OK) {
            rc = stockdb__fail(db, rc, false);
            if (rc == STOCKDB__RETRY_IDLE && attempt == 0) continue;
            stockdb__end_trx(db);
            return rc == STOCKDB__RETRY_IDLE ? STOCKDB_ERR_CONNECT : rc;
        }
        int32_t pid = l->product_id, k = units;
        unsigned long instance_len, key_len;
        MYSQL_BIND p[4];
        stockdb__bind_int(&p[0], &pid, NULL);
        stockdb__bind_int(&p[1], &k, NULL);
        stockdb__bind_text(&p[2], db->instance, &instance_len);
        stockdb__bind_text(&p[3], request_id, &key_len);
        rc = stockdb__run(db, STOCKDB__ST_RESTOCK_INSERT, p, NULL, NULL, NULL);
        if (rc != STOCKDB_OK && request_id && stockdb__duplicate_key(db, rc)) {
            /* The same key committed meanwhile, on another product's lock (or with no
             * lock, atomic): this raise is rolled back, and the key's row answers. */
            (void)stockdb__fail(db, rc, true);
            rc = restock_replay(db, l, request_id, units, replayed, stock);
            if (rc == STOCKDB_OK && !*replayed) {
                stockdb__set_err(db, "request id %s: a duplicate, and then no restock row",
                                 request_id);
                rc = STOCKDB_ERR_QUERY;
            }
            return rc;
        }
        if (rc != STOCKDB_OK) return stockdb__fail(db, rc, true);
        rc = life_commit(db, l);
        stockdb__end_trx(db);
        /* Nothing confirms a restock whose COMMIT reply was lost but the restock table. */
        return rc == STOCKDB_ERR_CONNECT ? STOCKDB_ERR_UNKNOWN : rc;
    }
}
