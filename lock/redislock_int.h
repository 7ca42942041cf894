/* redislock_int.h: private to lock/. The Redis lease lock's own calls (redislock.c
 * states the recipe), for redlock.c, which votes over one handle per server, and for
 * the tests of what only this library has (tests/lock/lock_redis_test.c). Everything
 * else reaches it through lock.h as the kind "redis". The calls common to the lease
 * libraries have the contracts lease_pool_int.h states once. */
#ifndef REDISLOCK_INT_H
#define REDISLOCK_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lock.h"

/* The longest lock name, in bytes. Names are [A-Za-z0-9_.-]. */
#define REDISLOCK_NAME_MAX 200

typedef struct redislock_config {
    const char *addr;         /* "HOST:PORT" (IPv4 address or name), e.g. "127.0.0.1:6379" */
    const char *prefix;       /* key prefix; NULL = "lock:" (at most 32 bytes) */
    int lease_ms;             /* the lease of every acquisition; 0 = 10000 */
    int safety_margin_ms;     /* check() says LOST this long before the lease ends;
                               * 0 = lease/10 + 2 ms (clock drift, the server's expiry
                               * granularity); < 0 is refused */
    int poll_ms;              /* the longest a waiter sleeps between tries; 0 = 100 */
    int connect_timeout_ms;   /* 0 = 2000 */
    int io_timeout_ms;        /* a command's reply; 0 = 2000 */
    const atomic_int *cancel; /* NULL, or the flag that ends the waits (lease_pool_int.h) */
    /* Credentials, sent as AUTH [user] password on every connection (the first one and
     * every reconnect, command and pub/sub alike). password NULL or "" = send no AUTH;
     * user NULL or "" = the server's default user (requirepass). Copied (at most 128 and
     * 512 bytes). */
    const char *user;
    const char *password;
    /* NULL or "", or up to 32 bytes of [A-Za-z0-9_-] naming this handle: every key it sets
     * then holds "<token>.<owner>" instead of "<token>", so that redislock_release_mine
     * can delete a key of ours whose token we never learned (a grant whose reply was
     * lost). Copied. RedLock gives each of its handles one. */
    const char *owner;
} redislock_config;

/* Counters. All only grow. */
typedef struct redislock_stats {
    uint64_t acquired;
    uint64_t timeouts;
    uint64_t released;
    uint64_t release_lost;  /* releases that found the key no longer ours */
    uint64_t released_mine; /* keys of ours no hold knew, deleted by release_mine */
    uint64_t ops;           /* commands sent to Redis (scripts, SUBSCRIBE, ...) */
    uint64_t wakeups;       /* release messages a waiter received */
    uint64_t polls;         /* waits that ended without a message (poll, lease end) */
    uint64_t reconnects;
    uint64_t renewals;   /* redislock_renew calls through this handle that extended */
    uint64_t renew_lost; /* ... that found the key no longer ours */
} redislock_stats;

typedef struct redislock redislock;
typedef struct redislock_hold redislock_hold;

int redislock_new(const redislock_config *cfg, redislock **out, char *errbuf, size_t errcap);
void redislock_free(redislock *l);
int redislock_acquire(redislock *l, const char *name, int timeout_ms, redislock_hold **out);
int redislock_check(const redislock_hold *h);
int64_t redislock_token(const redislock_hold *h);
int redislock_release(redislock_hold *h);
int redislock_renew(redislock *via, redislock_hold *h);
int redislock_ping(redislock *l);
int redislock_view(redislock *l, const char *name, lock_view *out);
void redislock_get_stats(const redislock *l, redislock_stats *out);
const char *redislock_errstr(const redislock *l);
const char *redislock_strerror(int code);

/* Deletes lock `name`'s key if this handle (its config's owner) set it, whatever the
 * token, as when an acquire's reply was lost: the key was set, the call failed, and no
 * hold knows it. A key of another owner, or none, is left alone. Never call it for a
 * name this handle holds (it would delete the hold's key). LOCK_OK (whether or not there
 * was a key of ours), LOCK_ERR_ARGS (no owner configured, a bad name), or a connection or
 * server code as redislock_release. */
int redislock_release_mine(redislock *l, const char *name);

#endif
