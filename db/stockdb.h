/* stockdb: the stock-deduction transaction on MariaDB / MySQL.
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
 * The deduction follows the seed experiment on purpose: BEGIN; SELECT stock; if it is
 * <= 0 answer sold out; else UPDATE ... SET stock = stock - 1; INSERT the order; COMMIT.
 * The UPDATE is not conditional on the stock it read, which is what turns a race
 * between two unlocked transactions into visible negative stock. */
#ifndef STOCKDB_H
#define STOCKDB_H

#include <stdbool.h>
#include <stdint.h>

/* Return codes. */
#define STOCKDB_OK              0
#define STOCKDB_ERR_CONFIG      -1 /* bad URL or option; nothing was attempted */
#define STOCKDB_ERR_CONNECT     -2 /* server unreachable or gone; nothing was committed */
#define STOCKDB_ERR_QUERY       -3 /* a statement failed; the transaction was rolled back */
#define STOCKDB_ERR_NOT_FOUND   -4 /* no such product; nothing was changed */
#define STOCKDB_ERR_FENCED      -5 /* a newer lock holder has written the row; rolled back */
#define STOCKDB_ERR_GUARD       -6 /* the guard refused the commit; rolled back */
#define STOCKDB_ERR_UNKNOWN     -7 /* COMMIT sent, reply lost, outcome could not be confirmed */
#define STOCKDB_ERR_NOMEM       -8
#define STOCKDB_ERR_DEADLOCK    -9 /* the server chose this transaction as a deadlock or lock
                                      wait timeout victim; rolled back, safe to retry */

/* How the deduction protects itself (or not). */
typedef enum stockdb_strategy {
    /* The seed's read-check-update. Safe only under an external lock. */
    STOCKDB_READ_CHECK_UPDATE = 0,
    /* SELECT ... FOR UPDATE, then the same check and update: the row lock is the lock. */
    STOCKDB_FOR_UPDATE,
    /* UPDATE ... SET stock = stock - 1 WHERE id = ? AND stock > 0, no separate read. */
    STOCKDB_ATOMIC,
} stockdb_strategy;

typedef enum stockdb_outcome {
    STOCKDB_DEDUCTED = 0,
    STOCKDB_SOLD_OUT = 1,
} stockdb_outcome;

typedef struct stockdb_config {
    char host[256];
    unsigned port;
    char user[64];
    char password[128];
    char database[64];
    unsigned connect_timeout_s; /* 0 = 2 s */
    unsigned rw_timeout_s;      /* read and write timeout; 0 = 10 s */
} stockdb_config;

/* The answer of one deduction. */
typedef struct stockdb_result {
    stockdb_outcome outcome;
    int32_t stock;     /* after the deduction, or as read when sold out */
    uint64_t order_id; /* orders.id when deducted, else 0 */
    bool replayed;     /* the request id had already deducted: this is its first order */
} stockdb_result;

/* What a deduction needs besides the product. Every field may be zero / NULL. */
typedef struct stockdb_request {
    int32_t product_id;
    /* Lock token (ZooKeeper czxid) of the caller's lock, or 0 for none. When > 0 the
     * UPDATE only applies if product.fence <= fence, and raises product.fence to it;
     * otherwise the call fails with STOCKDB_ERR_FENCED. */
    int64_t fence;
    /* Unique key of this request (<= 100 bytes), stored in orders.request_id. A second
     * call with the same key returns the first order (replayed = true) and deducts
     * nothing. It also lets a COMMIT whose reply was lost be confirmed after reconnect.
     * NULL stores no key. */
    const char *request_id;
    /* Called after the UPDATE and INSERT and right before COMMIT; a non-zero return
     * refuses the commit (STOCKDB_ERR_GUARD, rolled back). Used to re-check that the
     * distributed lock is still held. NULL = always commit. */
    int (*guard)(void *arg);
    void *guard_arg;
} stockdb_request;

typedef struct stockdb stockdb;

/* Parses mysql://USER[:PASS]@HOST[:PORT]/DB into *cfg (port defaults to 3306). If the
 * URL has no password, cfg->password is left as it was, so a caller can fill it from
 * the environment first. Returns STOCKDB_OK or STOCKDB_ERR_CONFIG. Pure; thread-safe. */
int stockdb_config_from_url(stockdb_config *cfg, const char *url);

/* Makes a handle for cfg (copied) and tries to connect once. Returns NULL only when out
 * of memory; a failed connection is reported by stockdb_errstr() and retried on use.
 * Call mysql_library_init() (stockdb_global_init) once before any thread uses this. */
stockdb *stockdb_new(const stockdb_config *cfg, const char *instance);
void stockdb_free(stockdb *db); /* NULL is a no-op */

/* Process-wide setup and teardown of the client library; main thread only. */
int stockdb_global_init(void);
void stockdb_global_end(void);

/* Runs one deduction as one transaction. On STOCKDB_OK *out says deducted or sold out.
 * A failure before the transaction began (connection lost while idle) is retried once
 * after reconnecting. Any other failure rolls back and returns an error code. */
int stockdb_deduct(stockdb *db, stockdb_strategy strategy, const stockdb_request *req,
                   stockdb_result *out);

/* Reads one product's stock. STOCKDB_ERR_NOT_FOUND if there is no such product. */
int stockdb_get_stock(stockdb *db, int32_t product_id, int32_t *stock);

/* Checks the connection (reconnecting if needed). */
int stockdb_ping(stockdb *db);

/* The last error's text on this handle ("" if none); valid until the next call. */
const char *stockdb_errstr(const stockdb *db);
/* A static text for a return code. */
const char *stockdb_strerror(int code);

#endif
