/* redlock: RedLock, a lease lock held by a majority of independent Redis servers
 * (article 001 §3.7), with a fencing token derived from theirs.
 *
 * The algorithm, as its author describes it, over N servers (3 to 9; 3 or 5 in practice)
 * that share nothing (no replication between them):
 *   - note the time, then try to take the lock on every server in turn, each try bounded
 *     by a short per-server timeout (server_timeout_ms) so that a dead server costs
 *     little. Each try is lock/redislock.c's acquire script, sent once through a
 *     redislock handle of that server (one handle per server, reused; no Lua of our own):
 *     SET <prefix><name> <token> NX PX <lease> with that server's fencing counter;
 *   - the lock is held if a majority (N/2 + 1) of the servers granted it and time is left:
 *     validity = lease - elapsed - drift, where elapsed is the time the round took and
 *     drift (drift_ms) allows for the servers' clocks running faster than ours and for
 *     Redis's expiry granularity. redlock_check() says LOST once the validity has passed
 *     by our monotonic clock;
 *   - otherwise the keys it did get are released on those servers and, after a random
 *     backoff (1..retry_ms), a new round starts, until the caller's deadline;
 *   - release goes to EVERY server, as the algorithm says: redislock's compare-and-delete
 *     where it granted, and elsewhere the deletion of a key of this handle's owner
 *     (redislock_release_mine) that a try whose reply was lost may have left.
 *
 * The fencing token. RedLock has no monotonic counter of its own: each server has its
 * own counter, and they are unrelated. A hold's token is the MAXIMUM of the per-server
 * tokens it got. Each of those is redislock's counter, floored at that server's clock in
 * microseconds, so the tokens of all servers live on one scale (Redis time, µs). The
 * database keeps them apart from other kinds' by fence_kind LOCK_FENCE_REDLOCK (5).
 * What that guarantees:
 *   - any two majorities share a server S; if B acquired after A's key on S was gone
 *     (released, or expired), B's token on S is above A's token on S;
 *   - hence B's token (a maximum) is above A's whenever A's largest per-server token was
 *     handed out less than (time between A's acquire and B's) of clock skew ahead:
 *     with the servers' clocks agreeing to within d, every acquisition that begins more
 *     than d after another one's has the larger token. On one machine (the tests, the
 *     stack) d is 0; with NTP, a few ms, against leases of seconds. A server clock that
 *     jumps FORWARD only raises its later tokens; one that steps BACK keeps its counter
 *     (the floor only ever raises it);
 *   - what it does not guarantee: with skew above the gap between two acquisitions, a
 *     stale holder's token can be the larger one. Its late write is then accepted and the
 *     newer holder's refused (503 lock_lost): the fence keeps at most one of them writing
 *     per row version, but which one wins is no longer "the newer";
 *   - without the fence (--fence off) nothing checks the token: a holder that lost the
 *     majority while it worked (paused past its validity, or a clock jump on servers that
 *     expired its keys early, the case Kleppmann describes) writes on, and a second holder
 *     that took the majority meanwhile writes too: oversold. redlock_check() cannot see a
 *     clock jump on the servers at all: its validity is counted on our clock.
 *
 * Failures: a server down, or answering an error, is one missing vote; with a majority
 * still up acquire works. With fewer than a majority reachable in a round, acquire
 * returns LOCK_ERR_CONNECTION at once (nothing is held, what was granted is released). A
 * grant whose reply was lost (the per-server timeout passed) is deleted by the round's
 * or the hold's release on that server: every key a handle sets ends with its owner id.
 * On a SLOW server the release arrives after the late grant and deletes it. On a server
 * that was STOPPED (SIGSTOP, a frozen VM), the try and the release wait in the queues of
 * two connections, which the server may serve in either order: a release served first
 * finds nothing, and the grant then blocks that server's vote for at most one lease.
 *
 * Threads and ownership are redislock's: a handle is NOT thread-safe (one per thread,
 * any thread may make and free one); a hold belongs to its handle and to the thread that
 * acquired it; locks are not reentrant (LOCK_ERR_ARGS); no fork() with a handle open.
 * redlock_renew is the one call that takes another thread's hold (the watchdog).
 *
 * The file ends with the registry's row, redlock_kind (lock.h: "redlock", a lease kind
 * pooled by lease_pool.c, service "redis", fence kind LOCK_FENCE_REDLOCK), which
 * stockd's --lock redlock uses with --redis as the list of servers.
 *
 * Every function returns LOCK_OK (0) or a negative LOCK_* code of lock_codes.h;
 * redlock_strerror() names it, redlock_errstr() has the detail of the last error on a
 * handle. Nothing here prints, exits or aborts on a server error. */
#ifndef REDLOCK_H
#define REDLOCK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lock_codes.h"

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
    /* NULL, or a flag any thread may set to end this handle's waits (as redislock's):
     * checked before every round and every per-server try. */
    const atomic_int *cancel;
    const char *user; /* credentials sent to every server, as redislock_config's */
    const char *password;
} redlock_config;

/* Counters for /metrics and the tests. All only grow. */
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
 * HOST:PORT, no two equal), or LOCK_ERR_ARGS. Pure; thread-safe. For the service's
 * option check. */
int redlock_count_addrs(const char *addrs);

/* Makes a handle and connects to every server (redislock_new, per-server timeout).
 * Servers that cannot be reached are tried again at every round. On LOCK_OK *out is the
 * handle; otherwise *out is NULL and the code says why: LOCK_ERR_ARGS (bad configuration),
 * LOCK_ERR_CONNECTION (fewer than a majority reachable, or credentials refused),
 * LOCK_ERR_NOMEM. The detail goes to errbuf (errcap bytes) when not NULL. */
int redlock_new(const redlock_config *cfg, redlock **out, char *errbuf, size_t errcap);

/* Closes every connection and frees the handle and every hold still outstanding (their
 * keys expire with their lease). NULL is a no-op. */
void redlock_free(redlock *l);

/* Acquires `name` on a majority, trying rounds until timeout_ms has passed (0 = one
 * round, < 0 = no limit). On LOCK_OK *out is the hold; otherwise *out is NULL and no
 * key of ours is left (except a lost reply's, see above). Returns LOCK_OK, LOCK_ERR_ARGS,
 * LOCK_ERR_NOMEM, LOCK_ERR_TIMEOUT, LOCK_ERR_CONNECTION (fewer than a majority reachable
 * in the last round), LOCK_ERR_SERVER or LOCK_ERR_CANCELLED. */
int redlock_acquire(redlock *l, const char *name, int timeout_ms, redlock_hold **out);

/* LOCK_OK while the validity surely lasts (local monotonic clock), else LOCK_LOST.
 * Reads local state only. LOCK_ERR_ARGS for NULL. */
int redlock_check(const redlock_hold *h);

/* The fencing token: the maximum of the per-server tokens (> 0; 0 for NULL). */
int64_t redlock_token(const redlock_hold *h);

/* How many servers granted this hold (a majority at least). */
int redlock_granted(const redlock_hold *h);

/* The watchdog's renewal: extends h's key on every server that granted it, through the
 * CALLING thread's handle `via` (same servers, same order); h may belong to another
 * thread, which must not release it during the call. LOCK_OK if a majority extended
 * (the validity is then counted from this round); LOCK_LOST if fewer than a majority
 * still held our key; LOCK_ERR_CONNECTION / LOCK_ERR_SERVER if too few answered (try
 * again while validity lasts); LOCK_ERR_ARGS for NULL or a `via` of other servers. */
int redlock_renew(redlock *via, redlock_hold *h);

/* Releases h on every server that granted it (compare-and-delete) and frees it, except
 * on LOCK_ERR_NOT_OWNER (called by another thread; untouched). LOCK_OK if our key was
 * still there on a majority; LOCK_LOST if on fewer (the lock may have passed on while we
 * held it); LOCK_ERR_CONNECTION if too few servers answered to tell (the keys expire with
 * their lease). */
int redlock_release(redlock_hold *h);

/* PING on every server: LOCK_OK if a majority answered, else LOCK_ERR_CONNECTION. */
int redlock_ping(redlock *l);

/* Copies the handle's counters (ops summed over the servers' handles). */
void redlock_get_stats(const redlock *l, redlock_stats *out);

/* The last error's detail on this handle ("" after a success); never NULL for a
 * non-NULL handle; valid until the next call. */
const char *redlock_errstr(const redlock *l);

/* A text for a code: lock_strerror()'s, but where the library says more about
 * the majority of servers (TIMEOUT, CONNECTION, SERVER, LOST). Pure. */
const char *redlock_strerror(int code);

#endif
