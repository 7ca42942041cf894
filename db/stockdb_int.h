/* stockdb_int.h: the private parts that db/'s files share (never included outside db/).
 *
 * stockdb.c owns the handle, its connection, its session set-up, the prepared statements
 * below and the reads; stockdb_order.c the ends every deduction shares (a key's order, a
 * COMMIT whose reply was lost); stockdb_batch.c the batch, built on a per-row step;
 * stockdb_deduct.c the per-request deduction, a batch of one unless atomic;
 * stockdb_multi.c the transaction over several products, built on the batch's state and
 * steps; stockdb_json.c the JSON arrays that carry many rows in one statement's parameter.
 * Layers, each calling only the ones below it: stockdb.c and stockdb_json.c at the
 * bottom, then stockdb_order.c, then stockdb_batch.c, then stockdb_deduct.c and
 * stockdb_multi.c. They talk in one code space: every helper here returns
 * STOCKDB_OK, a negative STOCKDB_ERR_* or one of the positive STOCKDB__RETRY_* below, never
 * a MySQL error number. The number behind the last failure stays in the handle (err), next
 * to its text (errstr), for the detail and the log. Same thread rules as stockdb.h: a handle
 * is used by one thread at a time. */
#ifndef STOCKDB_INT_H
#define STOCKDB_INT_H

#include "stockdb.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <mysql.h>

/* ---------------------------------------------------------------- statements */

/* Every statement a handle prepares when it connects; their SQL is in stockdb.c. */
enum {
    STOCKDB__ST_LOOKUP,          /* an order by request id, with its product's stock now */
    STOCKDB__ST_CONFIRM,         /* the same, as a locking read: waits for an in-flight twin */
    STOCKDB__ST_READ,            /* the seed's read */
    STOCKDB__ST_READ_FOR_UPDATE, /* the read that takes the row lock */
    STOCKDB__ST_UPDATE_ATOMIC,   /* the check inside the update */
    STOCKDB__ST_UPDATE_ATOMIC_FENCED,
    STOCKDB__ST_INSERT,
    STOCKDB__ST_PEEK,                /* the sold-out pre-check: stock, and the key's order if any */
    STOCKDB__ST_UPDATE_BATCH,        /* the seed's unconditional update, by k units */
    STOCKDB__ST_UPDATE_BATCH_FENCED, /* the same, refused unless the row is as we read it */
    STOCKDB__ST_INSERT_BATCH,        /* the orders of a batch, one row per key of a JSON array */
    STOCKDB__ST_INSERT_MULTI,        /* the orders of several products */
    STOCKDB__ST_SEG_READ,            /* ST_READ, ST_READ_FOR_UPDATE and the batch updates ... */
    STOCKDB__ST_SEG_READ_FOR_UPDATE,
    STOCKDB__ST_SEG_UPDATE_BATCH,
    STOCKDB__ST_SEG_UPDATE_BATCH_FENCED, /* ... on one segment of a split product */
    STOCKDB__ST_INSERT_ATOMIC,           /* ATOMIC's order: the limit and the reservation inside */
    STOCKDB__ST_USER_COUNT,              /* the units each customer of a batch holds */
    STOCKDB__ST_ORDER_READ,              /* one order, for a change (stockdb_life.c) */
    STOCKDB__ST_ORDER_CHANGE,            /* a change of stockdb_changes, conditional on state */
    STOCKDB__ST_RELEASE_EXPIRED,         /* the expiry of a product's oldest reservations */
    STOCKDB__ST_EXPIRED_SCAN,            /* the products that have some */
    STOCKDB__ST_STOCK_ADD,               /* units given back or restocked */
    STOCKDB__ST_STOCK_ADD_FENCED,
    STOCKDB__ST_RESTOCK_INSERT,
    STOCKDB__ST_RESTOCK_LOOKUP,  /* a restock's Idempotency-Key */
    STOCKDB__ST_STOCK_RESTOCKED, /* the whole stock and the restocks' units, one snapshot */
    STOCKDB__ST_STOCK_UNITS,     /* the whole stock and its orders' units by state, the same */
    STOCKDB__ST_COUNT
};

/* The states that hold a unit, as SQL (stockdb_state_holds says the same of
 * stockdb_changes' states; test_contract checks the two agree). */
#define STOCKDB__HOLDING_SQL "('sold', 'reserved', 'paid')"

/* Short names of the statements, for error texts. */
extern const char *const stockdb__stmt_name[STOCKDB__ST_COUNT];

/* ---------------------------------------------------------------- the handle */

struct stockdb {
    stockdb_config cfg;
    char instance[STOCKDB_INSTANCE_MAX + 1];
    MYSQL *conn;                         /* NULL while disconnected */
    MYSQL_STMT *stmt[STOCKDB__ST_COUNT]; /* all prepared while conn != NULL, else all NULL */
    unsigned long session_id;            /* the server's id of conn's session (mysql_thread_id) */
    char server[96];                     /* host:port of the server conn reached ("" unknown) */
    bool in_trx;                         /* a statement ran since the last COMMIT or ROLLBACK */
    uint64_t statements;                 /* round trips sent for deductions and reads, stockdb.h */
    unsigned err;                        /* MySQL error number of the last failure; 0 none */
    char errstr[512];
};

/* Internal results, never returned to users; positive, so never taken for a STOCKDB_ERR_*,
 * and never 1, which is the public STOCKDB_SPLIT (stockdb.h): stockdb_deduct_multi's
 * attempt returns both, and must not take a split for a dropped connection. */
#define STOCKDB__RETRY_IDLE                                                                        \
    2 /* the connection dropped before anything was written: reconnect                             \
         and run the whole call again */
#define STOCKDB__RETRY_KEYS                                                                        \
    3 /* a batch answered keys (or went one row at a time): run the                                \
         rest again */
#define STOCKDB__RETRY_STALE                                                                       \
    4 /* the fenced compare-and-set found the row changed since the check: read it again */
_Static_assert(STOCKDB__RETRY_IDLE != STOCKDB_SPLIT && STOCKDB__RETRY_KEYS != STOCKDB_SPLIT &&
                   STOCKDB__RETRY_STALE != STOCKDB_SPLIT,
               "an internal retry must not look like STOCKDB_SPLIT");

/* Starts a public call: no error yet. */
static inline void stockdb__clear_err(stockdb *db) {
    db->err = 0;
    db->errstr[0] = '\0';
}

/* Sets the handle's error text (printf-style); db->err is left as it is. */
void stockdb__set_err(stockdb *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records MySQL error number err (0: an unknown client error) in the handle and returns
 * its STOCKDB_* code: STOCKDB_ERR_CONNECT when the connection cannot be used again
 * (stockdb_conn_gone), STOCKDB_ERR_DEADLOCK for a deadlock or lock wait victim,
 * STOCKDB_ERR_NOMEM for the client out of memory, else STOCKDB_ERR_QUERY. */
int stockdb__code(stockdb *db, unsigned err);

/* True when rc, a call's failure, was a duplicate key (an order with that request id
 * exists already). */
bool stockdb__duplicate_key(const stockdb *db, int rc);

/* Connects and prepares every statement, unless already connected; on failure the handle
 * stays disconnected (the reason in errstr) and the next call tries again. Returns
 * STOCKDB_OK, STOCKDB_ERR_CONNECT, _QUERY or _NOMEM. */
int stockdb__connect(stockdb *db);
/* Closes the connection and its statements; the server rolls back what was open. */
void stockdb__disconnect(stockdb *db);

/* ---------------------------------------------------------------- running statements */

/* Executes statement id with params. With results, fetches at most one row into them
 * and sets *found; otherwise sets *rows (if not NULL) to the rows the statement matched.
 * Counts one statement and marks the transaction open. Returns STOCKDB_OK or a code of
 * stockdb__code(), with the text in errstr. */
int stockdb__run(stockdb *db, int id, MYSQL_BIND *params, MYSQL_BIND *results, bool *found,
                 uint64_t *rows);

/* Records the error of statement st (named name in the text) in the handle and returns
 * its code (stockdb__code). */
int stockdb__stmt_error(stockdb *db, MYSQL_STMT *st, const char *name);

/* Ends the open transaction. If even that fails, the connection is dropped, which makes
 * the server roll back: either way nothing of it survives. errstr is kept. */
void stockdb__rollback(stockdb *db);

/* COMMIT, counted. Returns STOCKDB_OK, or a code of stockdb__code() with "COMMIT: ..." in
 * errstr: STOCKDB_ERR_CONNECT means the outcome is in doubt (stockdb__confirm_key), any
 * other code that the server refused it (the transaction is still to be rolled back). */
int stockdb__commit(stockdb *db);

/* Rolls back the transaction that reads (or a failed statement) left open, if any: no
 * public call returns with one open (stockdb.h, "Round trips"). */
void stockdb__end_trx(stockdb *db);

/* The end of a call after a statement failed with code rc (text already in errstr).
 * wrote: the transaction has written something. The connection is gone: drop it, and
 * return STOCKDB__RETRY_IDLE when nothing was written, else STOCKDB_ERR_CONNECT. Any other
 * failure: roll back what was written and return rc. */
int stockdb__fail(stockdb *db, int rc, bool wrote);

/* ---------------------------------------------------------------- reads and checks */

/* The pre-check's statement: the product's whole stock (its segments included) and,
 * when request_id is not NULL, that key's order (else *order_id = 0). Sets *found.
 * Returns STOCKDB_OK or a code of stockdb__run(). */
int stockdb__read_total(stockdb *db, int32_t product_id, const char *request_id, bool *found,
                        int32_t *stock, uint64_t *order_id, int32_t *order_product);

/* The seed's read of the product row (STOCKDB__ST_READ): sets *found and, when found,
 * *stock, *fence, *kind and *version (else 0). Returns STOCKDB_OK or a code of
 * stockdb__run(). */
int stockdb__read_product(stockdb *db, int32_t product_id, bool *found, int32_t *stock,
                          int64_t *fence, int32_t *kind, uint64_t *version);

/* Checks a request id: NULL or 1..STOCKDB_REQUEST_ID_MAX bytes; sets errstr when not. */
bool stockdb__request_id_ok(stockdb *db, const char *what, const char *key);
/* Checks a customer: NULL or 1..STOCKDB_USER_MAX bytes; sets errstr when not. */
bool stockdb__user_ok(stockdb *db, const char *what, const char *user);

/* True when a row last fenced with (row_fence, row_kind) was written by a newer holder
 * than our token of our kind. Tokens of different kinds are not comparable: a row last
 * written under another lock service takes any token (a switch of lock mode), and the
 * row_version compare-and-set still refuses a write whose check is stale. */
static inline bool stockdb__newer_holder_wrote(int64_t row_fence, int32_t row_kind, int64_t fence,
                                               int32_t kind) {
    return row_kind == kind && row_fence > fence;
}

/* Sets the text of a refusal by the fence (segment 0: the product row) and returns
 * STOCKDB_ERR_FENCED. */
int stockdb__fenced_out(stockdb *db, int32_t product_id, int32_t segment, int64_t fence);

/* ---------------------------------------------------------------- orders (stockdb_order.c) */

/* Looks up the order of request_id with statement STOCKDB__ST_LOOKUP or _CONFIRM. Sets
 * *found, and when found *order_id, *product_id and (LOOKUP only; else 0) *stock.
 * Returns STOCKDB_OK or a code of stockdb__run(). */
int stockdb__lookup_order(stockdb *db, int id, const char *request_id, bool *found,
                          uint64_t *order_id, int32_t *product_id, int32_t *stock);

/* Fills *out as the replay of an existing order (order_id of product_id, stock now), or
 * refuses a key first used for another product than want_product (STOCKDB_ERR_KEY_REUSED,
 * text in errstr). */
int stockdb__replay(stockdb *db, int32_t want_product, const char *request_id, uint64_t order_id,
                    int32_t product_id, int32_t stock, stockdb_result *out);

/* A COMMIT failed because the connection dropped: it may or may not have committed.
 * Reconnects, kills the old session and looks key up (NULL: nothing to look up). Returns
 * STOCKDB_OK with *found (and *order_id, *product_id when found), or STOCKDB_ERR_UNKNOWN
 * with the reason in errstr (the COMMIT's own error in front). */
int stockdb__confirm_key(stockdb *db, const char *key, bool *found, uint64_t *order_id,
                         int32_t *product_id);

/* ---------------------------------------------------------------- binding parameters */

static inline void stockdb__bind_int(MYSQL_BIND *b, int32_t *v, my_bool *is_null) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONG;
    b->buffer = v;
    b->is_null = is_null;
}

static inline void stockdb__bind_bigint(MYSQL_BIND *b, int64_t *v, my_bool *is_null) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_null = is_null;
}

static inline void stockdb__bind_ubigint(MYSQL_BIND *b, uint64_t *v) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_unsigned = 1;
}

/* A string parameter; NULL s binds SQL NULL. *len must live until the execute. */
static inline void stockdb__bind_text(MYSQL_BIND *b, const char *s, unsigned long *len) {
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

/* A text result of at most cap - 1 bytes, NUL-terminated by the caller (len). */
static inline void stockdb__bind_out_text(MYSQL_BIND *b, char *buf, size_t cap, unsigned long *len,
                                          my_bool *is_null) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = buf;
    b->buffer_length = cap;
    b->length = len;
    b->is_null = is_null;
}

/* What a product row says about its sales (sql/schema.sql): its per_user_limit and, when
 * it reserves, when a reservation made now expires (the database's UTC clock plus
 * reserve_seconds, as text). A segment row has neither. */
typedef struct stockdb__terms {
    int32_t per_user_limit;
    my_bool no_limit; /* per_user_limit IS NULL */
    char expires_at[STOCKDB_TIME_TEXT];
    unsigned long expires_len;
    my_bool no_reserve; /* reserve_seconds IS NULL: sell at once */
} stockdb__terms;

/* After a fetch: expires_at NUL-terminated ("" when the product does not reserve). */
static inline void stockdb__terms_done(stockdb__terms *t) {
    size_t n = t->no_reserve ? 0 : t->expires_len;
    if (n >= sizeof(t->expires_at)) n = sizeof(t->expires_at) - 1;
    t->expires_at[n] = '\0';
}

/* Binds the results of the reads of a row (ST_READ, ST_SEG_READ and their FOR UPDATE
 * forms): stock, fence, fence_kind, row_version, and the product's terms (6 columns). */
static inline void stockdb__bind_row(MYSQL_BIND *r, int32_t *stock, int64_t *fence, int32_t *kind,
                                     uint64_t *version, stockdb__terms *t) {
    stockdb__bind_int(&r[0], stock, NULL);
    stockdb__bind_bigint(&r[1], fence, NULL);
    stockdb__bind_int(&r[2], kind, NULL);
    stockdb__bind_ubigint(&r[3], version);
    stockdb__bind_int(&r[4], &t->per_user_limit, &t->no_limit);
    stockdb__bind_out_text(&r[5], t->expires_at, sizeof(t->expires_at), &t->expires_len,
                           &t->no_reserve);
}

/* Runs statement id with params and calls each(arg) once per row fetched into results;
 * a non-zero return of each stops the fetch with that code. Counts one statement.
 * Returns STOCKDB_OK, each's code, or a code of stockdb__code(). */
int stockdb__run_each(stockdb *db, int id, MYSQL_BIND *params, MYSQL_BIND *results,
                      int (*each)(void *arg), void *arg);

/* ---------------------------------------------------------------- one row of a batch */

/* One stock row a batch deducts from: a product's own row (segment 0) or row (product_id,
 * segment) of product_segment, and what the check read of it. A batch of one product
 * has one; a transaction over several products would have one per product, each with
 * its own fenced compare-and-set. */
typedef struct stockdb__row {
    int32_t product_id;
    int32_t segment;    /* 0: the product row */
    int64_t fence;      /* the caller's lock token; 0 = none (no compare-and-set) */
    int32_t fence_kind; /* as stockdb_request.fence_kind */
    /* out, from the check: */
    int32_t stock;      /* as read (0 for a segment that has no row) */
    int64_t seen_fence; /* the row's fence and kind as read */
    int32_t seen_kind;
    uint64_t version;     /* the row_version the compare-and-set expects */
    int32_t taken;        /* units the write took: min(want, max(stock, 0)); 0 = no write */
    stockdb__terms terms; /* the product's limit and reservation, as read */
} stockdb__row;

/* The per-row step of a batch, in two halves, inside the caller's transaction
 * (stockdb_batch.c; stockdb_multi.c checks every row before it writes any). The check
 * reads the row (locking it when strategy is STOCKDB_FOR_UPDATE) with the product's terms
 * (its limit and reservation), refuses if a newer holder has written it, and sets
 * row->taken = min(want, max(stock, 0)); wrote: the transaction has written before this
 * row (for stockdb__fail). It returns STOCKDB_OK (nothing written yet),
 * STOCKDB_ERR_NOT_FOUND (no such product) or STOCKDB_ERR_FENCED, which wrote nothing (the
 * caller ends the transaction), or a code of stockdb__fail(). The write takes row->taken
 * units: unconditionally without a fence (the seed's write) and as the fenced
 * compare-and-set on the version the check read with one; it returns STOCKDB_OK,
 * STOCKDB__RETRY_STALE (the row changed since the check) or STOCKDB_ERR_NOT_FOUND
 * (deleted since), both after rolling the whole transaction back, or a code of
 * stockdb__fail(). Text in errstr for every refusal. Between the two the batch counts
 * its customers against the limit (stockdb_batch.c), and stockdb__think sleeps think_us,
 * the stand-in for the business logic between check and write. */
int stockdb__row_check(stockdb *db, stockdb_strategy strategy, stockdb__row *row, size_t want,
                       bool wrote);
void stockdb__think(unsigned think_us);
int stockdb__row_write(stockdb *db, stockdb__row *row);

/* ---------------------------------------------------------- a batch's steps (stockdb_batch.c) */

/* What the attempts at one batch share: which items are already answered (a key found in
 * orders) and which item each one follows (the first item with the same key; itself if
 * none), and room for the items an attempt sells to (sel) and their order ids (ids). The
 * batch (stockdb_batch.c) keeps one; the transaction over several products one per
 * product. The arrays are the caller's, n items each. */
typedef struct stockdb__batch_state {
    stockdb_batch *b;
    size_t *leader;
    bool *done;
    size_t *sel;
    uint64_t *ids;
    /* Insert the orders one row at a time: set once a duplicate key could not be found
     * (see batch_insert_orders). */
    bool one_by_one;
    /* The attempt's terms (from its row's check): its orders are reserved until
     * terms->expires_at when it is not "" (else sold). NULL = sold. */
    const stockdb__terms *terms;
} stockdb__batch_state;

/* True for an item that still needs an answer of its own (a leader not yet done). */
static inline bool stockdb__batch_open(const stockdb__batch_state *st, size_t i) {
    return !st->done[i] && st->leader[i] == i;
}

/* Checks a batch's arguments for strategy; false, with errstr set, when they are bad. */
bool stockdb__batch_args_ok(stockdb *db, stockdb_strategy strategy, const stockdb_batch *b);

/* Sets each item's leader (the first item with its key, byte for byte) and clears every
 * item's answer. */
void stockdb__batch_find_leaders(stockdb__batch_state *st);

/* After a call that returns STOCKDB_OK: each follower gets its leader's answer. */
void stockdb__batch_follow(stockdb__batch_state *st);

/* Runs INSERT ... RETURNING statement sid (ST_INSERT_BATCH or _MULTI) with params and
 * puts the ids of the nb batches' orders, checked row by row against their items, in
 * sts[i].ids. Returns STOCKDB_OK or a code of stockdb__code(). */
int stockdb__insert_returning(stockdb *db, int sid, stockdb__batch_state *sts, size_t nb,
                              const size_t *ks, MYSQL_BIND *params);

/* The answers of a committed attempt that read stock and took k units: items sel[0..k-1]
 * their orders, every other open item sold out. */
void stockdb__batch_answer(stockdb__batch_state *st, int32_t stock, size_t k);

/* ---------------------------------------------------------- JSON parameters (stockdb_json.c) */

/* A JSON text being built (the parameters of the statements that take many rows at
 * once); oom is set, and the text dropped, once memory runs out. Start from {0}; the
 * caller frees s. */
typedef struct stockdb__json_buf {
    char *s;
    size_t len, cap;
    bool oom;
} stockdb__json_buf;

/* Appends printf-style text, unescaped: numbers and punctuation only. */
void stockdb__json_raw(stockdb__json_buf *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends key as a JSON string, every byte JSON cannot carry raw escaped (NULL: null). */
void stockdb__json_key(stockdb__json_buf *j, const char *key);

#endif
