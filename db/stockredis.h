/* stockredis.h: mode redis-stock's data access. Redis holds each product's sellable count,
 * and one Lua script per deduction checks it, decrements it, records the request's key and
 * appends the order to a stream, atomically on the server; the order writer (writer/)
 * turns the stream into MariaDB's orders later.
 *
 * The keys (docs/strategies.md, "Redis as the stock of record"; the writer reads the same):
 *   stockd:stock:{<id>}   the sellable count of product <id>, a decimal integer;
 *   stockd:restocked:{<id>}  the units restocks through the API added (stockredis_restock);
 *                         a reset of the product deletes it with the count and MariaDB's
 *                         restock rows (docs/orders.md);
 *   stockd:key:<key>      the product a request key deducted from (the answer memo): a
 *                         repeated key gets its first answer back, and a key of another
 *                         product is refused; it expires after the caller's memo life
 *                         (the key's idempotency window), after which the key is new;
 *   stockd:limit:{<id>}   the product's per_user_limit, loaded with the count (none: absent);
 *   stockd:users:{<id>}   a hash, customer -> units this count sold them (emptied at a load);
 *   stockd:reserve:{<id>} the product's reserve_seconds, loaded with the count (none:
 *                         absent, the product sells at once);
 *   stockd:order:<key>    a reservation's record (a hash: product, user, state,
 *                         expires_us); it lives until its state is final, then the key's
 *                         window (stockredis_change);
 *   stockd:expiry         the reservations still reserved, by expiry (a sorted set of
 *                         keys scored by expires_us);
 *   stockd:orders         the stream of orders, one entry per deduction, with the fields
 *                         key, product, instance and at_us (Redis TIME, in us), and user
 *                         when the deduction had a customer, and state reserved and
 *                         expires_us when it made a reservation; and one entry per change
 *                         of a reservation: key, product, instance, at_us and change (paid,
 *                         cancelled or expired);
 *                         its consumer group `writers` is created by whoever comes first.
 *
 * Loading: a product whose count is not in Redis yet answers STOCKREDIS_NOT_LOADED and
 * nothing is done; the caller reads the stock of record (MariaDB) and calls again with
 * it as `load`. The script sets the count only if it is still absent, in the same atomic
 * step as the deduction, so racing instances load it once and never over a count in use.
 *
 * Threads: a handle is one connection, NOT thread-safe: one per thread. It connects at
 * its first call (and again after an error), so a Redis that is down at start-up is an
 * error of the calls, not of stockredis_new. Nothing here prints or exits. */
#ifndef STOCKD_STOCKREDIS_H
#define STOCKD_STOCKREDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "redisconn.h"

#define STOCKREDIS_OK             0
#define STOCKREDIS_ERR_CONNECTION -1 /* Redis unreachable (nothing was sent) */
#define STOCKREDIS_ERR_AUTH       -2 /* credentials refused or missing */
#define STOCKREDIS_ERR_NOMEM      -3
#define STOCKREDIS_ERR_SERVER     -4 /* an answer that makes no sense (a count not a number) */
#define STOCKREDIS_ERR_ARGS       -5
#define STOCKREDIS_ERR_UNKNOWN    -6 /* the script was sent and its answer lost: it may have run */
#define STOCKREDIS_ERR_REFUSED                                                                     \
    -7 /* Redis refused the script before running it (OOM at                                       \
        * maxmemory, LOADING, READONLY, ...): nothing done */

#define STOCKREDIS_STREAM  "stockd:orders"
#define STOCKREDIS_EXPIRY  "stockd:expiry"
#define STOCKREDIS_GROUP   "writers"
#define STOCKREDIS_KEY_MAX 100 /* a request key's longest text */

typedef struct stockredis_config {
    const char *addr;       /* "HOST:PORT" */
    const char *user;       /* NULL or "": the default user */
    const char *password;   /* NULL or "": no AUTH */
    const char *instance;   /* the stream entries' `instance` field */
    int connect_timeout_ms; /* 0 = 2000 */
    int io_timeout_ms;      /* 0 = 2000 */
} stockredis_config;

typedef enum stockredis_outcome {
    STOCKREDIS_SOLD_OUT = 0,
    STOCKREDIS_DEDUCTED = 1,
    STOCKREDIS_REPLAYED = 2,      /* the key deducted this product before: the first answer */
    STOCKREDIS_KEY_REUSED = 3,    /* the key deducted another product: refused */
    STOCKREDIS_NOT_LOADED = 4,    /* no count in Redis and no `load` given: nothing done */
    STOCKREDIS_LIMIT_REACHED = 5, /* the customer holds the product's limit: nothing done */
} stockredis_outcome;

typedef struct stockredis_result {
    stockredis_outcome outcome;
    long long count;      /* the count after the script (sold out, deducted, replayed) */
    long long expires_us; /* DEDUCTED, REPLAYED: a reservation's expiry (Redis TIME, us); 0:
                           * the unit was sold at once */
} stockredis_result;

/* A change of a reservation (docs/orders.md), and what came of it. */
typedef enum stockredis_event {
    STOCKREDIS_PAY,
    STOCKREDIS_CANCEL,
    STOCKREDIS_EXPIRE
} stockredis_event;
typedef enum stockredis_change_outcome {
    STOCKREDIS_NO_ORDER = 0,     /* no reservation of that key (never, or its record is gone) */
    STOCKREDIS_NOT_YOURS = 1,    /* another customer's (or one without a customer) */
    STOCKREDIS_NOT_RESERVED = 2, /* its state is final (state), or EXPIRE before its expiry */
    STOCKREDIS_LATE = 3,         /* PAY at or after its expiry: nothing changed */
    STOCKREDIS_CHANGED = 4,      /* state is the new state */
} stockredis_change_outcome;

typedef struct stockredis_change_result {
    stockredis_change_outcome outcome;
    char state[16];     /* the reservation's state after (not for NO_ORDER) */
    int32_t product_id; /* the reservation's product; 0 for NO_ORDER */
    long long count;    /* CHANGED: the count after (-1: not loaded) */
} stockredis_change_result;

typedef struct stockredis stockredis;

/* Copies the configuration; connects at the first call. STOCKREDIS_OK and *out, or
 * ERR_ARGS (a bad address or a text too long, detail in err) or ERR_NOMEM. */
int stockredis_new(const stockredis_config *cfg, stockredis **out, char *err, size_t errcap);
void stockredis_free(stockredis *s); /* NULL is a no-op */

/* One deduction of product_id for request `key` (1..STOCKREDIS_KEY_MAX bytes): the script.
 * load < 0: the count must be in Redis already (else NOT_LOADED); load >= 0: the stock of
 * record, set as the count first if and only if there is none, corrected by the restocks
 * made since it was read (load_restocked: stockredis_restock; stockdb_get_stock_restocked
 * reads both in one statement). memo_ttl_s (> 0): how long
 * the key's memo lives, i.e. how long a resend of the key is answered as the first one.
 * On STOCKREDIS_OK *out says what happened. A connection that breaks after the script was
 * sent is made again and the script sent once more: the key's memo makes that safe (it
 * answers REPLAYED if the first one ran). user (NULL or "": anonymous) is the customer,
 * counted against the product's per_user_limit, which a load (load >= 0) brings as
 * load_limit (< 0: none): LIMIT_REACHED with nothing done when they hold it already.
 * load_reserve (< 0: none) is the product's reserve_seconds a load brings: such a product
 * makes a reservation (res->expires_us), released by stockredis_change.
 * Errors: ERR_CONNECTION, ERR_AUTH, ERR_REFUSED, ERR_SERVER (the script's own check):
 * nothing was done. ERR_UNKNOWN: it may have been done (the reply of a script sent was
 * lost, and whatever followed failed too; or an error that may come after a write). */
int stockredis_deduct(stockredis *s, int32_t product_id, const char *key, long long load,
                      long long load_restocked, unsigned memo_ttl_s, const char *user,
                      long long load_limit, long long load_reserve, stockredis_result *out);

/* Pays, cancels or expires the reservation of request `key`, in one script (docs/orders.md):
 * PAY only if still reserved and before its expiry (LATE otherwise, nothing changed);
 * CANCEL if still reserved; EXPIRE if still reserved and past its expiry. user is the
 * customer the order must be (NULL or "" for EXPIRE: anyone's). CANCEL and EXPIRE give
 * the unit back to the count and the customer's units in the same step, and every change
 * appends a stream entry (`change`) for the writer. The record then lives final_ttl_s.
 * On STOCKREDIS_OK *out says what happened; errors as stockredis_restock's (the script is
 * sent once: ERR_UNKNOWN when its reply was lost). */
int stockredis_change(stockredis *s, const char *key, stockredis_event ev, const char *user,
                      unsigned final_ttl_s, stockredis_change_result *out);

/* The keys of at most max reservations past their expiry by Redis's clock (oldest first),
 * into keys[0..*n). For the expiry thread, which releases each by stockredis_change. */
int stockredis_due(stockredis *s, char (*keys)[STOCKREDIS_KEY_MAX + 1], unsigned max, unsigned *n);

/* Restock (docs/orders.md, "Restock in mode redis-stock"): call it AFTER the restock
 * committed in MariaDB (stockdb_restock). It adds units to stockd:restocked:{id}, and to
 * the count when the count is loaded (*present, *count the count after). A load racing
 * the restock counts its units once: the load passes the restocks' units MariaDB had when
 * its stock was read (load_restocked of stockredis_deduct), and the script loads
 * stock + (restocked here - load_restocked), so a load that read MariaDB before the
 * restock gets the units from Redis, and one that read it after but set the count before
 * this call gets them from this call (and nets them out of its load). Errors as
 * stockredis_deduct's; ERR_UNKNOWN when the reply was lost (not resent). */
int stockredis_restock(stockredis *s, int32_t product_id, int32_t units, long long *count,
                       bool *present);

/* WAIT replicas timeout_ms on the handle's connection, right after a deduction: how many
 * replicas have acknowledged every write made through it (*acked), or an error. */
int stockredis_wait(stockredis *s, int replicas, int timeout_ms, int *acked);

/* PING, for /health: STOCKREDIS_OK when Redis answers PONG, else an error. */
int stockredis_ping(stockredis *s);

/* Reads the count of product_id (*count, *present false if there is none). */
int stockredis_count(stockredis *s, int32_t product_id, long long *count, bool *present);

/* The stream's backlog for the writers' group: *lag the entries not yet delivered to a
 * writer (XINFO GROUPS lag; Redis 7.0) and *pending those delivered and not acknowledged.
 * Both 0 when the stream or the group does not exist yet. */
int stockredis_backlog(stockredis *s, long long *lag, long long *pending);

/* Builds the count's key of product_id into buf (cap bytes). Pure. */
void stockredis_count_key(int32_t product_id, char *buf, size_t cap);

/* The last error's detail ("" after a success). */
const char *stockredis_errstr(const stockredis *s);

#endif
