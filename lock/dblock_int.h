/* dblock_int.h: private to lock/. The lock table's own calls (dblock.c states the
 * recipe), for the tests of what only this library has (tests/lock/lock_db_test.c).
 * Everything else reaches it through lock.h as the kind "db-lock". The calls common to
 * the lease libraries have the contracts lease_pool_int.h states once. */
#ifndef DBLOCK_INT_H
#define DBLOCK_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lock.h"
#include "stockdb.h"

/* The longest lock name, in bytes (stock_lock.name is VARCHAR(200)). */
#define DBLOCK_NAME_MAX 200

typedef struct dblock_config {
    stockdb_config db;        /* the server, as for stockdb (copied) */
    const char *owner;        /* written into the rows, for people reading the table
                               * (<= 40 bytes; NULL = "dblock"); ":<pid>:<n>:<12 random hex
                               * digits>" is appended so every handle's rows are its own,
                               * also across hosts and containers that share a pid */
    int lease_ms;             /* 0 = 10000 */
    int safety_margin_ms;     /* 0 = lease/10 + 2 ms; < 0 refused */
    int poll_max_ms;          /* the longest backoff sleep; 0 = 50 */
    const atomic_int *cancel; /* NULL, or the flag that ends the waits (lease_pool_int.h) */
} dblock_config;

/* Counters. All only grow. */
typedef struct dblock_stats {
    uint64_t acquired;
    uint64_t timeouts;
    uint64_t takeovers; /* expired rows this handle deleted to take the lock */
    uint64_t released;
    uint64_t release_lost; /* releases that found the row gone or taken over */
    uint64_t ops;          /* statements executed */
    uint64_t sleeps;       /* backoff sleeps while waiting */
    uint64_t renewals;     /* dblock_renew calls through this handle that extended */
    uint64_t renew_lost;   /* ... that found the row gone or taken over */
} dblock_stats;

typedef struct dblock dblock;
typedef struct dblock_hold dblock_hold;

/* dblock_new: LOCK_ERR_SERVER also when the statements cannot be prepared (no
 * stock_lock table, or no grant), and LOCK_ERR_ARGS when the kernel gave no random
 * bytes for the owner. dblock_renew: a row whose lease has passed by the database's
 * clock but that nobody took over is still this acquisition's and is renewed (nobody
 * else can have held the lock in between). */
int dblock_new(const dblock_config *cfg, dblock **out, char *errbuf, size_t errcap);
void dblock_free(dblock *d);
int dblock_acquire(dblock *d, const char *name, int timeout_ms, dblock_hold **out);
int dblock_check(const dblock_hold *h);
int64_t dblock_token(const dblock_hold *h);
int dblock_release(dblock_hold *h);
int dblock_renew(dblock *via, dblock_hold *h);
int dblock_ping(dblock *d);
int dblock_view(dblock *d, const char *name, lock_view *out);
void dblock_get_stats(const dblock *d, dblock_stats *out);
const char *dblock_errstr(const dblock *d);
const char *dblock_strerror(int code);

/* The owner this handle writes into its rows (dblock_config.owner plus its unique
 * suffix; the configured part shortened if the whole would pass 64 bytes). Valid as
 * long as the handle; "" for NULL. Read-only. */
const char *dblock_owner(const dblock *d);

#endif
