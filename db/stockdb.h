/* stockdb: the stock-deduction transaction on MariaDB (10.5 or later: it uses INSERT ...
 * RETURNING, idle_write_transaction_timeout and the utf8mb4_nopad_bin collation, which
 * MySQL does not have).
 *
 * A stockdb handle is one database connection with its prepared statements. It is
 * NOT thread-safe: each worker thread owns one handle and never shares it. Handles
 * connect lazily and reconnect by themselves: a handle made while the server is down
 * is usable, and every call fails with STOCKDB_ERR_CONNECT until the server is back.
 * MYSQL_OPT_RECONNECT is never used; after "server gone" the handle closes, reconnects
 * and re-prepares, and retries a call only if no transaction was open.
 *
 * Every function returns STOCKDB_OK (0) or a negative STOCKDB_ERR_* code; the detail of
 * the last error is in stockdb_errstr(). Nothing here prints, exits or aborts on a
 * server error. Every transaction either commits whole or is rolled back.
 *
 * The deduction follows the seed experiment on purpose: SELECT stock; if it is <= 0
 * answer sold out; else UPDATE ... SET stock = stock - 1; INSERT the order; COMMIT.
 * The UPDATE is not conditional on the stock it read, which is what turns a race
 * between two unlocked transactions into visible negative stock. Under a lock, several
 * queued deductions of one product run as one such transaction (stockdb_deduct_batch):
 * one read, stock - k, one INSERT of k orders, one COMMIT.
 *
 * Round trips: a connection runs in READ COMMITTED with autocommit off, so the first
 * statement opens the transaction (no START TRANSACTION). Even a read's transaction holds
 * metadata locks on what it read until it ends (an ALTER TABLE waits for it, and every
 * query behind the ALTER), so no call returns with a transaction open: one that only
 * read ends with a ROLLBACK. A deduction of one unit under a lock is 4 statements
 * (SELECT, UPDATE, INSERT, COMMIT), a batch of k units too (one INSERT ... SELECT ...
 * RETURNING writes the k orders from a JSON array of their keys and hands back their
 * ids), a sold-out answer under the lock 2 (the SELECT and the ROLLBACK), the sold-out
 * pre-check 2 (stockdb_peek: its read and the ROLLBACK), an ATOMIC deduction 3 (UPDATE,
 * INSERT, COMMIT). A key seen before costs no look-up on the way in: the INSERT's
 * duplicate key finds it, and only then is it looked up. stockdb_statements() counts
 * what was sent.
 *
 * Threads: call stockdb_global_init() once on the main thread before any other thread
 * exists (it runs mysql_library_init, which is not thread-safe), and
 * stockdb_global_end() after every handle is freed. stockdb_new() runs
 * mysql_thread_init() for the calling thread, and stockdb_free() runs
 * mysql_thread_end() when the last handle that thread made is freed. So a handle must be
 * made, used and freed on one and the same thread, and a thread must not use the client
 * library by other means after freeing its last handle. All SQL is sent as prepared
 * statements (or constant text for START TRANSACTION, COMMIT and ROLLBACK); no statement
 * text is ever built from data. */
#ifndef STOCKDB_H
#define STOCKDB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Return codes. */
#define STOCKDB_OK            0
#define STOCKDB_ERR_CONFIG    -1 /* bad URL or argument; nothing was attempted */
#define STOCKDB_ERR_CONNECT   -2 /* server unreachable or gone; nothing was committed */
#define STOCKDB_ERR_QUERY     -3 /* a statement failed; the transaction was rolled back */
#define STOCKDB_ERR_NOT_FOUND -4 /* no such product; nothing was changed */
#define STOCKDB_ERR_FENCED    -5 /* a newer lock holder has written the row; rolled back */
#define STOCKDB_ERR_GUARD     -6 /* the guard refused the commit; rolled back */
#define STOCKDB_ERR_UNKNOWN   -7 /* COMMIT sent, reply lost, outcome could not be confirmed */
#define STOCKDB_ERR_NOMEM     -8
#define STOCKDB_ERR_DEADLOCK                                                                       \
    -9                             /* the server chose this transaction as a deadlock or lock      \
                                      wait timeout victim; rolled back, safe to retry */
#define STOCKDB_ERR_KEY_REUSED -10 /* the request id has an order of another product */
#define STOCKDB_ERR_STATE      -11 /* the order is not in a state this change may leave */

/* The most items in one stockdb_deduct_batch. */
#define STOCKDB_BATCH_MAX 1024

/* The longest request id (orders.request_id is VARCHAR(100)) and instance name
 * (orders.instance is VARCHAR(64)), in bytes. */
#define STOCKDB_REQUEST_ID_MAX 100
#define STOCKDB_INSTANCE_MAX   64
/* The longest customer (orders.user is VARCHAR(64)), in bytes. */
#define STOCKDB_USER_MAX 64
/* The text of a DATETIME(6), "YYYY-MM-DD HH:MM:SS.ffffff" (UTC), and its NUL. */
#define STOCKDB_TIME_TEXT 27

/* How the deduction protects itself (or not). */
typedef enum stockdb_strategy {
    /* The seed's read-check-update. Safe only under an external lock. */
    STOCKDB_READ_CHECK_UPDATE = 0,
    /* SELECT ... FOR UPDATE, then the same check and update: the row lock is the lock. */
    STOCKDB_FOR_UPDATE,
    /* UPDATE ... SET stock = stock - 1 WHERE id = ? AND stock > 0, no separate read. When
     * it changes no row, one read tells sold out from not found (and from fenced). */
    STOCKDB_ATOMIC,
} stockdb_strategy;

typedef enum stockdb_outcome {
    STOCKDB_DEDUCTED = 0,
    STOCKDB_SOLD_OUT = 1,
    /* The customer holds product.per_user_limit units already (its sold, reserved and
     * paid orders, and earlier deductions of the same batch): nothing was deducted. */
    STOCKDB_LIMIT_REACHED = 2,
} stockdb_outcome;

typedef struct stockdb_config {
    char host[256]; /* name or address; always reached over TCP, never a unix socket */
    unsigned port;
    char user[64];
    char password[128];
    char database[64];
    unsigned connect_timeout_s; /* 0 = 2 s */
    /* Read and write timeout; 0 = 10 s. The session's innodb_lock_wait_timeout is set
     * below it (timeout - 2 s, at least 1 s), so a long row-lock wait ends as
     * STOCKDB_ERR_DEADLOCK with the connection intact rather than as a read timeout. Its
     * idle_write_transaction_timeout is set to it: a session that has written and then
     * hears nothing from us for that long (a COMMIT lost in a partition, a frozen
     * process) is ended and rolled back by the server, so it does not hold the row lock
     * for wait_timeout (8 h). */
    unsigned rw_timeout_s;
} stockdb_config;

/* The answer of one deduction. */
typedef struct stockdb_result {
    stockdb_outcome outcome;
    /* Deducted: the stock after this deduction (of the segment, for a batch on one).
     * READ_CHECK_UPDATE and FOR_UPDATE report the stock they read minus one (under a race without a
     * lock, that read may be stale); ATOMIC has it from its UPDATE's reply (LAST_INSERT_ID). Sold
     * out: the stock as read. Replayed: the product's stock now. */
    int32_t stock;
    uint64_t order_id; /* orders.id when deducted, else 0 */
    bool replayed;     /* the request id had already deducted: this is its first order */
    /* Deducted from a product with reserve_seconds (not replayed): the order is reserved
     * until expires_at (UTC, the database's clock), then given back unless paid. */
    bool reserved;
    char expires_at[STOCKDB_TIME_TEXT];
} stockdb_result;

/* What a deduction needs besides the product. Every field may be zero / NULL. */
typedef struct stockdb_request {
    int32_t product_id;
    /* Lock token of the caller's lock (a ZooKeeper czxid, a Redis or stock_lock token),
     * or 0 for none. When > 0 the UPDATE sets product.fence to it and product.fence_kind
     * to fence_kind, and only applies if no newer token of the same kind has written
     * the row (product.fence <= fence, or the row's fence is of another kind) and, for
     * READ_CHECK_UPDATE and FOR_UPDATE, if product.row_version is still the value the
     * check read. That compare-and-set refuses a write after ANY write in between: a
     * stale holder resuming with an older token, or a COMMIT that arrived late from a
     * batch made under this same token (several batches per acquisition). Such a
     * refusal is run once more from a fresh check while the token is still the newest;
     * otherwise the call fails with STOCKDB_ERR_FENCED and changes nothing. */
    int64_t fence;
    /* Which lock service issued `fence` (any value 1..255 the caller keeps for one
     * service; 0 = unnamed). Tokens of different kinds are never compared with each
     * other: see sql/schema.sql. */
    uint8_t fence_kind;
    /* Unique key of this request (1..STOCKDB_REQUEST_ID_MAX bytes, else
     * STOCKDB_ERR_CONFIG), stored in orders.request_id and compared byte for byte (the
     * column's collation is utf8mb4_nopad_bin: "a-B" and "a-b" are two keys). A second
     * call with the same key returns the first order (replayed = true) and deducts
     * nothing, also when the two calls race; a key first used for another product gives
     * STOCKDB_ERR_KEY_REUSED (a client's mistake, not a database error). It also lets a
     * COMMIT whose reply was lost be confirmed after reconnect. NULL stores no key. */
    const char *request_id;
    /* The customer (1..STOCKDB_USER_MAX bytes, else STOCKDB_ERR_CONFIG; NULL = none),
     * stored in orders.user. When the product has a per_user_limit, the customer's sold,
     * reserved and paid orders are counted in the same transaction, after the row is
     * locked (ATOMIC: after its UPDATE took the row lock), and a customer at the limit
     * gets STOCKDB_LIMIT_REACHED. Exact whenever the stock is (under a lock, FOR_UPDATE,
     * ATOMIC); READ_CHECK_UPDATE without a lock races on the count as on the stock. */
    const char *user;
    /* Called after the UPDATE and INSERT and right before COMMIT; a non-zero return
     * refuses the commit (STOCKDB_ERR_GUARD, rolled back). Used to re-check that the
     * distributed lock is still held. NULL = always commit. */
    int (*guard)(void *arg);
    void *guard_arg;
    /* Microseconds to pause between the check (SELECT) and the UPDATE, in the
     * READ_CHECK_UPDATE and FOR_UPDATE strategies; 0 = none. It stands in for the work
     * a real service does between reading and writing (pricing, risk checks, calls to
     * other services), so that the oversell experiment's race window does not depend on
     * how fast this machine happens to run the statements. */
    unsigned think_us;
} stockdb_request;

typedef struct stockdb stockdb;

/* Parses mysql://USER[:PASS]@HOST[:PORT]/DB into *cfg (port defaults to 3306). If the
 * URL has no password, cfg->password is left as it was, so a caller can fill it from
 * the environment first ("USER:@" sets an empty one). USER and PASS may contain %XX
 * escapes (needed for '@', '/', '?', '#', '%' and, in USER, ':'); %00 is refused. HOST
 * is a name or IPv4 address of [A-Za-z0-9.-_], or an IPv6 address in brackets; DB is
 * [A-Za-z0-9_$-]. No query string or fragment. Fields longer than their cfg buffer are
 * refused, not truncated. The timeouts are not touched. On error *cfg is unchanged.
 * Returns STOCKDB_OK or STOCKDB_ERR_CONFIG. Pure; thread-safe. */
int stockdb_config_from_url(stockdb_config *cfg, const char *url);

/* Makes a handle for cfg (copied) and tries to connect once. instance (at most
 * STOCKDB_INSTANCE_MAX bytes; NULL = "") is written into every order. Returns NULL
 * when out of memory or when cfg is NULL or instance too long; a failed connection is
 * not an error here: it is reported by stockdb_errstr() and retried on use. Call
 * stockdb_global_init() once before any thread uses this; see "Threads" above. */
stockdb *stockdb_new(const stockdb_config *cfg, const char *instance);
void stockdb_free(stockdb *db); /* NULL is a no-op; same thread as stockdb_new */

/* Process-wide setup and teardown of the client library; main thread only, while no
 * other thread uses the library. stockdb_global_init returns STOCKDB_ERR_NOMEM if the
 * library cannot initialise. */
int stockdb_global_init(void);
void stockdb_global_end(void);

/* Runs one deduction as one transaction. On STOCKDB_OK *out says deducted or sold out.
 * A failure before the transaction began (connection lost while idle) is retried once
 * after reconnecting. Any other failure rolls back and returns an error code; nothing is
 * retried after the transaction began (STOCKDB_ERR_DEADLOCK is left to the caller).
 * When the connection drops during COMMIT, the handle reconnects and first kills its old
 * server session (whose transaction, if the COMMIT never arrived, would otherwise stay
 * open with its row locks). Then, when req->request_id is set, it looks the order up:
 * found = STOCKDB_OK (deducted), not found = STOCKDB_ERR_CONNECT (not committed), cannot
 * tell = STOCKDB_ERR_UNKNOWN. Without a request id a lost COMMIT reply is always
 * STOCKDB_ERR_UNKNOWN. */
int stockdb_deduct(stockdb *db, stockdb_strategy strategy, const stockdb_request *req,
                   stockdb_result *out);

/* One deduction inside a batch. request_id is the caller's (borrowed; NULL = none). */
typedef struct stockdb_item {
    const char *request_id;
    const char *user; /* as stockdb_request.user (borrowed) */
    /* out: STOCKDB_OK, STOCKDB_ERR_KEY_REUSED, or STOCKDB_ERR_QUERY for a key the
     * database refuses as a duplicate although no order with it can be found (a
     * request_id column not yet migrated to sql/schema.sql's collation); that item
     * deducts nothing, and the rest of the batch is served. */
    int rc;
    stockdb_result res; /* out when rc == STOCKDB_OK */
} stockdb_item;

/* Several deductions of one product under one lock acquisition. */
typedef struct stockdb_batch {
    int32_t product_id;
    /* 0: the product's own row. S >= 1: row (product_id, S) of product_segment, the
     * segment S of a split product (sql/schema.sql), read, fenced and written instead
     * of the product row; its stock is what the answers report. A segment that has no
     * row is empty (every item sold out, stock 0) if the product exists, else the batch
     * is STOCKDB_ERR_NOT_FOUND; telling the two apart costs one more read. */
    int32_t segment;
    int64_t fence;           /* as stockdb_request.fence, for the whole batch */
    uint8_t fence_kind;      /* as stockdb_request.fence_kind */
    int (*guard)(void *arg); /* as stockdb_request.guard, called once */
    void *guard_arg;
    unsigned think_us;   /* slept once per batch between the check and the update */
    stockdb_item *items; /* in arrival order; borrowed */
    size_t n;            /* 1..STOCKDB_BATCH_MAX */
} stockdb_batch;

/* Runs a batch as ONE transaction (strategies READ_CHECK_UPDATE and FOR_UPDATE): read
 * the stock, fence and row_version once; k = min(distinct deductions, max(stock, 0));
 * UPDATE stock = stock - k (the fenced compare-and-set on row_version when fence > 0,
 * run once more from a fresh read if it finds the row changed; unfenced
 * READ_CHECK_UPDATE stays the seed's unconditional write); one INSERT of k orders; the
 * guard; COMMIT. The
 * first k items in order get the units, each its own order id and the stock it left;
 * the rest are sold out; res.order_id is the row's real id (RETURNING), whatever the
 * server's auto_increment_increment. A key already in orders gets its first order
 * (replayed); the same key (byte for byte) twice in the batch deducts once and the
 * later item gets the same order, marked replayed. A transaction that wrote nothing is
 * rolled back before the call returns. Returns STOCKDB_OK when every item has its
 * answer in rc / res, or an error for the WHOLE batch, which is then rolled back whole:
 * STOCKDB_ERR_GUARD,
 * _FENCED, _CONNECT, _QUERY, _DEADLOCK, _NOT_FOUND, _UNKNOWN (a COMMIT reply lost and
 * not confirmed: a keyed order of the batch confirms it), _CONFIG, _NOMEM. */
int stockdb_deduct_batch(stockdb *db, stockdb_strategy strategy, stockdb_batch *b);

/* stockdb_deduct_multi's answer when it committed nothing and the caller should run each
 * batch on its own (stockdb_deduct_batch): positive, never taken for an error. */
#define STOCKDB_SPLIT 1

/* Batches of SEVERAL products (or segments) under their own locks, as ONE transaction:
 * each row is read and written with its own fenced compare-and-set (bs[i].fence), then
 * the orders of every batch, then ONE call of guard (which must check every lock; the
 * batches' own guards are not called) and ONE COMMIT: a read and a write per row, one
 * INSERT of every order, COMMIT (2 nb + 2 statements). All or
 * nothing: either every batch's items get their answers as stockdb_deduct_batch gives
 * them, or nothing is committed. The common case only: a batch whose row has no stock
 * left, a key that has an order already, a row changed since its check, a fence or a
 * guard refusal, a deadlock, or a failed statement before COMMIT all roll the whole
 * transaction back and return STOCKDB_SPLIT: nothing was committed, and the caller runs
 * the batches one by one (the per-product path decides those cases, each with its own
 * lock re-checked). Returns STOCKDB_OK, STOCKDB_SPLIT, or for the whole transaction
 * STOCKDB_ERR_UNKNOWN (a COMMIT reply lost and not confirmed: a keyed order of any batch
 * confirms it), _CONNECT (COMMIT failed and confirmed not done), _CONFIG, _NOMEM.
 * nb is 1..STOCKDB_MULTI_MAX; strategy as stockdb_deduct_batch. */
#define STOCKDB_MULTI_MAX 64
int stockdb_deduct_multi(stockdb *db, stockdb_strategy strategy, stockdb_batch *bs, size_t nb,
                         int (*guard)(void *arg), void *guard_arg);

/* ---------------------------------------------------------------- after the deduction
 *
 * An order's states and the changes between them are ONE table, stockdb_changes
 * (stockdb_life.c), which the statements below read: the state a change needs, the one
 * it leaves, when it may happen, and what it gives back to the stock. docs/orders.md
 * draws it. Every change is a conditional UPDATE on the order's state (a pay and an
 * expiry, or a cancel and an expiry, racing: one of them changes the row, the other
 * none), and a change that gives the unit back raises the stock in the same transaction,
 * fenced like a deduction's write. */
typedef enum stockdb_state {
    STOCKDB_STATE_SOLD = 0, /* the order of ENUM('sold', ...) in sql/schema.sql */
    STOCKDB_STATE_RESERVED,
    STOCKDB_STATE_PAID,
    STOCKDB_STATE_CANCELLED,
    STOCKDB_STATE_EXPIRED,
    STOCKDB_STATE_COUNT
} stockdb_state;

typedef enum stockdb_event {
    STOCKDB_EV_PAY = 0, /* the customer pays a reservation */
    STOCKDB_EV_CANCEL,  /* the customer gives it back */
    STOCKDB_EV_EXPIRE,  /* the service gives back a reservation left unpaid past expires_at */
    STOCKDB_EV_COUNT
} stockdb_event;

/* When a change may happen, against the order's expires_at and the database's clock. */
typedef enum stockdb_when {
    STOCKDB_WHEN_ANY = 0,
    STOCKDB_WHEN_BEFORE_EXPIRY,
    STOCKDB_WHEN_AFTER_EXPIRY,
} stockdb_when;

typedef struct stockdb_change {
    stockdb_event event;
    stockdb_state from, to;
    stockdb_when when;
    int32_t stock_delta; /* units given back to the stock */
} stockdb_change;

/* The table, one row per event (stockdb_changes[e].event == e). */
extern const stockdb_change stockdb_changes[STOCKDB_EV_COUNT];
/* "sold", "reserved", ... (the ENUM's words); "?" out of range. */
const char *stockdb_state_name(stockdb_state s);
/* True for the states that hold a unit (counted by the limit): sold, reserved, paid. */
bool stockdb_state_holds(stockdb_state s);

/* One order as read (stockdb_order_read). */
typedef struct stockdb_order {
    uint64_t id;
    int32_t product_id;
    stockdb_state state;
    bool has_user;
    char user[STOCKDB_USER_MAX + 1];
    bool past_expiry; /* expires_at is set and not after the database's clock now */
    char expires_at[STOCKDB_TIME_TEXT]; /* "" when NULL */
} stockdb_order;

/* Reads order id (no lock; 2 statements with the ROLLBACK). STOCKDB_OK, or
 * STOCKDB_ERR_NOT_FOUND when there is none. */
int stockdb_order_read(stockdb *db, uint64_t id, stockdb_order *out);

/* What a change of one order, or the expiry of a product's reservations, needs. */
typedef struct stockdb_life {
    int32_t product_id;
    stockdb_strategy strategy; /* FOR_UPDATE: the product row is locked first */
    int64_t fence;             /* as stockdb_request.fence, for the stock's write */
    uint8_t fence_kind;
    int (*guard)(void *arg); /* as stockdb_request.guard */
    void *guard_arg;
} stockdb_life;

/* Changes order `id` of product l->product_id by the customer `user` with event (PAY or
 * CANCEL), as stockdb_changes says, in one transaction: the conditional UPDATE of the
 * order, the stock raised when the change gives the unit back (fenced), the guard,
 * COMMIT. Returns STOCKDB_OK (changed; *after is the order now), or, with nothing
 * changed and *after the order as read: STOCKDB_ERR_NOT_FOUND (no such order, or not
 * of that product), STOCKDB_ERR_STATE (not in the state the change needs, or PAY past
 * expires_at: after->past_expiry tells), STOCKDB_ERR_KEY_REUSED (the order is another
 * customer's), or an error of the transaction (_FENCED, _GUARD, _CONNECT, _DEADLOCK,
 * _QUERY, _UNKNOWN when a COMMIT reply was lost and the order's state could not be read
 * back). */
int stockdb_order_change(stockdb *db, const stockdb_life *l, uint64_t id, stockdb_event event,
                         const char *user, stockdb_order *after);

/* Gives back at most max (1..1000) reservations of product l->product_id left unpaid
 * past their expires_at, oldest first, as stockdb_changes' EXPIRE says, in one
 * transaction (fenced and guarded as above). *released is how many. A reservation paid
 * or cancelled meanwhile is not touched: the UPDATE is conditional on its state. */
int stockdb_release_expired(stockdb *db, const stockdb_life *l, unsigned max, unsigned *released);

/* Products that have reservations past their expiry: at most max (1..1000) of the
 * oldest such reservations are read (a bounded range of the index on (state,
 * expires_at)), and their distinct products written to out. */
int stockdb_expired_products(stockdb *db, int32_t *out, unsigned max, unsigned *n);

/* Raises product l->product_id's stock by units (1..1000000) and records it in the
 * restock table, in one transaction (fenced and guarded as above). *stock is the stock
 * after. STOCKDB_ERR_NOT_FOUND when there is no such product. request_id (NULL = none;
 * borrowed) is the client's Idempotency-Key, kept in restock.request_id as a deduction's
 * is in orders.request_id: a key that restocked already adds nothing and returns
 * STOCKDB_OK with *replayed set and *stock the stock now, when it restocked the same
 * product by the same units, else STOCKDB_ERR_KEY_REUSED. A COMMIT whose reply was lost
 * is STOCKDB_ERR_UNKNOWN: a retry with the same key tells. */
int stockdb_restock(stockdb *db, const stockdb_life *l, int32_t units, const char *request_id,
                    int32_t *stock, bool *replayed);

/* Reads product l's whole stock, the units its restocks added (the restock table), its
 * per_user_limit (*limit) and reserve_seconds (*reserve_s), -1 when NULL, in one
 * statement, so one snapshot: mode redis-stock's load (stockredis.h). 2 statements;
 * STOCKDB_ERR_NOT_FOUND when there is no such product. */
int stockdb_get_stock_restocked(stockdb *db, int32_t product_id, int32_t *stock, int64_t *restocked,
                                int32_t *limit, int32_t *reserve_s);

/* A product's orders by state, as GET /stock answers them beside the stock. */
typedef struct stockdb_units {
    int64_t reserved; /* reservations not yet paid, cancelled or expired */
    int64_t paid;
    int64_t released; /* cancelled or expired: units given back */
} stockdb_units;

/* Reads product_id's whole stock and its orders' units by state in one statement, so one
 * snapshot (stock = initial + restocks - sold - reserved - paid holds between them). 2
 * statements; STOCKDB_ERR_NOT_FOUND when there is no such product. */
int stockdb_get_stock_units(stockdb *db, int32_t product_id, int32_t *stock, stockdb_units *u);

/* The sold-out pre-check: one read, and the ROLLBACK that ends its transaction (2
 * statements). Reads the product's whole stock (product.stock plus its segments' stock,
 * sql/schema.sql) and, when request_id
 * is not NULL, that key's order (*order_id, *order_product; 0 when it has none).
 * STOCKDB_ERR_NOT_FOUND when there is no such product. A stock <= 0 read here is a
 * linearizable "sold out" at the moment of this read, whatever raises the stock later
 * (a cancel, an expiry, a restock): docs/orders.md, "The sold-out pre-check". */
int stockdb_peek(stockdb *db, int32_t product_id, const char *request_id, int32_t *stock,
                 uint64_t *order_id, int32_t *order_product);

/* FOR THE PITFALL DEMONSTRATION ONLY (stockd --pitfall snapshot-before-lock): ends any
 * open transaction and opens a REPEATABLE READ one whose snapshot is fixed now, by a
 * plain read of product_id's row, as a @Transactional method that reads before it
 * locks does. The next stockdb_deduct_batch on this handle runs inside it and reads
 * the stock as of now, however long the caller waits for its lock meanwhile; the
 * batch's own COMMIT or ROLLBACK ends it, and so does stockdb_end_transaction (when the
 * lock was never taken). 2 statements and the ROLLBACK. Returns
 * STOCKDB_OK or an error (then nothing is open). */
int stockdb_open_snapshot(stockdb *db, int32_t product_id);

/* Rolls back whatever transaction the handle has open (no statement if none). */
void stockdb_end_transaction(stockdb *db);

/* Statements sent on this handle so far: every prepared execute, COMMIT and ROLLBACK
 * of deductions and reads (the per-connection set-up and pings excluded). */
uint64_t stockdb_statements(const stockdb *db);

/* Reads one product's whole stock, its segments included (no lock; 2 statements, as
 * stockdb_peek). STOCKDB_ERR_NOT_FOUND if there is no such product. Retried once after
 * reconnecting if the idle connection was lost. */
int stockdb_get_stock(stockdb *db, int32_t product_id, int32_t *stock);

/* Checks the connection (reconnecting if needed). */
int stockdb_ping(stockdb *db);

/* The last error's text on this handle ("" if the last call succeeded); valid until the
 * next call. Never NULL for a non-NULL handle. */
const char *stockdb_errstr(const stockdb *db);
/* A static text for a return code. */
const char *stockdb_strerror(int code);

/* ---------------------------------------------------------------- a connection of one's own
 *
 * For modules that open their own connection with the same stockdb_config (dblock's
 * lock table): the client set-up every connection of this project gets, the preparing
 * and closing of a set of statements, and which client errors mean the connection is
 * gone. The caller owns the MYSQL and the MYSQL_STMTs these make and gives them back
 * with stockdb_conn_close(). They follow the rule of "Threads" above: made, used and
 * closed on one thread, which has made a stockdb or dblock handle (so that
 * mysql_thread_init has run), after stockdb_global_init(). Nothing here retries. */
struct st_mysql;      /* MYSQL */
struct st_mysql_stmt; /* MYSQL_STMT */

/* Connects to c->host:c->port over TCP with c's timeouts (0: 2 s to connect, 10 s to
 * read or write), charset utf8mb4 and client_flags (mysql_real_connect's, e.g.
 * CLIENT_FOUND_ROWS; 0 for none). Returns STOCKDB_OK with *out the connection, or
 * STOCKDB_ERR_NOMEM / STOCKDB_ERR_CONNECT with *out NULL and the reason in errbuf. */
int stockdb_conn_open(const stockdb_config *c, unsigned long client_flags, struct st_mysql **out,
                      char *errbuf, size_t errcap);

/* Prepares sql[0..n-1] on conn into stmts[0..n-1]. names[i] names statement i in the
 * error text; with names NULL the error quotes its SQL. Returns STOCKDB_OK, or
 * STOCKDB_ERR_NOMEM, STOCKDB_ERR_CONNECT (the connection is gone) or STOCKDB_ERR_QUERY
 * with the reason in errbuf; the statements made so far stay in stmts either way, for
 * stockdb_conn_close(). */
int stockdb_conn_prepare(struct st_mysql *conn, struct st_mysql_stmt **stmts,
                         const char *const *sql, const char *const *names, int n, char *errbuf,
                         size_t errcap);

/* Closes stmts[0..n-1] and *conn, those that are not NULL, and sets them all NULL. */
void stockdb_conn_close(struct st_mysql **conn, struct st_mysql_stmt **stmts, int n);

/* True for the client or server error numbers after which a connection cannot be used
 * again: the server went away, the network failed, the server killed or is shutting
 * down the session, or the protocol state is unknown. Pure; thread-safe. */
bool stockdb_conn_gone(unsigned err);

#endif
