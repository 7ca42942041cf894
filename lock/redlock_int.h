/* redlock_int.h: private to lock/. RedLock's own calls (redlock.c states the algorithm
 * and what its token guarantees), for the tests of what only this library has
 * (tests/lock/lock_redlock_test.c). Everything else reaches it through lock.h as the
 * kind "redlock". The calls common to the lease libraries have the contracts
 * lease_pool_int.h states once; where RedLock's differ, it is said below. */
#ifndef REDLOCK_INT_H
#define REDLOCK_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lock.h"

#define REDLOCK_SERVERS_MIN 3
#define REDLOCK_SERVERS_MAX 9

typedef struct redlock_config {
    /* "HOST:PORT,HOST:PORT,HOST:PORT": REDLOCK_SERVERS_MIN..MAX distinct servers. */
    const char *addrs;
    const char *prefix;    /* key prefix on every server; NULL = "lock:" (at most 32 bytes) */
    int lease_ms;          /* the lease on each server; 0 = 10000 */
    int drift_ms;          /* subtracted from the validity; 0 = lease/100 + 2; < 0 refused */
    int server_timeout_ms; /* connect and reply, per server and command; 0 = 200 */
    int retry_ms;          /* the longest random backoff between rounds; 0 = 50 */
    /* NULL, or the flag that ends the waits (lease_pool_int.h): checked before every
     * round and every per-server try. */
    const atomic_int *cancel;
    const char *user; /* credentials sent to every server, as redislock_config's */
    const char *password;
} redlock_config;

/* Counters. All only grow. */
typedef struct redlock_stats {
    uint64_t acquired;
    uint64_t timeouts;
    uint64_t rounds;       /* rounds of tries over the servers */
    uint64_t rounds_short; /* ... that did not reach a valid majority */
    uint64_t released;
    uint64_t release_lost; /* releases that found our key on fewer than a majority */
    uint64_t renewals;     /* redlock_renew calls through this handle that extended */
    uint64_t renew_lost;
    uint64_t ops; /* commands sent to all servers */
} redlock_stats;

typedef struct redlock redlock;
typedef struct redlock_hold redlock_hold;

/* How many servers the comma list names (REDLOCK_SERVERS_MIN..MAX, each a valid
 * HOST:PORT, no two equal), or LOCK_ERR_ARGS. Pure; thread-safe. */
int redlock_count_addrs(const char *addrs);

/* Where a call is about a majority: new fails with LOCK_ERR_CONNECTION when fewer than
 * a majority can be reached; acquire tries rounds until timeout_ms (0 = one round), and
 * its LOCK_ERR_CONNECTION is fewer than a majority in the last round; check counts the
 * validity (lease - elapsed - drift); renew and release are LOCK_OK when a majority
 * still had our key, LOCK_LOST when fewer did; ping is LOCK_OK when a majority answers. */
int redlock_new(const redlock_config *cfg, redlock **out, char *errbuf, size_t errcap);
void redlock_free(redlock *l);
int redlock_acquire(redlock *l, const char *name, int timeout_ms, redlock_hold **out);
int redlock_check(const redlock_hold *h);
int64_t redlock_token(const redlock_hold *h); /* the maximum of the per-server tokens */
int redlock_release(redlock_hold *h);
int redlock_renew(redlock *via, redlock_hold *h); /* `via` on the same servers, in order */
int redlock_ping(redlock *l);
void redlock_get_stats(const redlock *l, redlock_stats *out); /* ops summed over servers */
const char *redlock_errstr(const redlock *l);
const char *redlock_strerror(int code);

/* How many servers granted this hold (a majority at least). */
int redlock_granted(const redlock_hold *h);

#endif
