/* redislock: a lease lock on one Redis server (hiredis), with a fencing token.
 *
 * The recipe article 001 describes and Redisson made common, on a single Redis:
 *   - one lock = one key, <prefix><name> (prefix "lock:" by default). Acquiring is one
 *     Lua script, so it is atomic on the server: if the key is free, INCR the fencing
 *     counter <prefix>#fence and SET <prefix><name> <token> NX PX <lease>; the token is
 *     the reply. If the key is held, the script answers its remaining lease (PTTL);
 *   - a waiter does not spin: it SUBSCRIBEs to <prefix>#released:<name>, tries once
 *     more (a release between its try and its subscription would otherwise be missed),
 *     then sleeps until a release message, the end of the holder's lease (the server
 *     publishes nothing when a lease runs out), the fallback poll interval or its
 *     deadline, whichever comes first, and tries again. Every release wakes every
 *     subscribed waiter (as in Redisson); one of them wins;
 *   - release is a second script, a compare-and-delete: the key is deleted only if it
 *     still holds our token, and then the release is PUBLISHed. So a holder whose lease
 *     ran out can never delete its successor's key;
 *   - the token is the counter after INCR, raised first to the server's clock in
 *     microseconds if it is below it (Redis TIME, inside the script). The counter lives
 *     in memory only (the server runs without persistence), so without that floor a
 *     restarted Redis would start again from 1 and every later write would be refused
 *     by the database's fence. With it, tokens grow across restarts as long as the
 *     server's clock does not step back by more than the time since the last token.
 *
 * What a lease lock cannot promise: a holder that is paused (GC, swap, SIGSTOP) past its
 * lease still believes it holds the lock when it wakes, while another process holds it.
 * redislock_check() reads the local clock, so it says LOST once the lease (minus a safety
 * margin) has passed since the acquire was sent, but a pause between that check and the
 * write is invisible to it: only the fencing token, checked by the database in the
 * write itself, refuses the late write. A lost acquire reply (the connection broke
 * after the script ran) leaves the name blocked for at most one lease.
 *
 * RedLock (a majority of independent Redis servers) is out of scope: it still needs a
 * fence for the paused holder, and a single Redis with a fence is what we compare.
 *
 * Threads and ownership:
 *   - A redislock handle is one connection for commands and, made the first time this
 *     handle has to wait, one for pub/sub. It is NOT thread-safe: make one per worker
 *     thread (hiredis contexts cannot be shared). Handles are independent of each other
 *     and may be made and freed on any thread, one call at a time.
 *   - A redislock_hold belongs to the handle that acquired it and to the thread that
 *     acquired it: only that thread checks, reads the token of, or releases it.
 *   - Locks are NOT reentrant: acquiring a name this handle already holds is refused
 *     with LOCK_ERR_ARGS (it would otherwise wait on itself until the lease ends).
 *   - Never fork() with a handle open; make handles after fork.
 *
 * Every function returns LOCK_OK (0) or a negative LOCK_* code, the values of
 * lock_codes.h (the file ends with the registry's row, redislock_kind; lock.h);
 * redislock_strerror() names it, redislock_errstr() has the detail of the last error on
 * a handle. Nothing here prints, exits or aborts on a server error. */
#ifndef REDISLOCK_H
#define REDISLOCK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lock_codes.h"

/* The longest lock name, in bytes. Names are [A-Za-z0-9_.-]. */
#define REDISLOCK_NAME_MAX 200

typedef struct redislock_config {
    const char *addr;       /* "HOST:PORT" (IPv4 address or name), e.g. "127.0.0.1:6379" */
    const char *prefix;     /* key prefix; NULL = "lock:" (at most 32 bytes) */
    int lease_ms;           /* the lease of every acquisition; 0 = 10000 */
    int safety_margin_ms;   /* check() says LOST this long before the lease ends;
                             * 0 = lease/10 + 2 ms (clock drift, the server's expiry
                             * granularity); < 0 is refused */
    int poll_ms;            /* the longest a waiter sleeps between tries; 0 = 100 */
    int connect_timeout_ms; /* 0 = 2000 */
    int io_timeout_ms;      /* a command's reply; 0 = 2000 */
    /* NULL, or a flag any thread may set (to non-zero) to end this handle's waits, as
     * at shutdown: an acquire that finds it set, before a try or after a wait, returns
     * LOCK_ERR_CANCELLED without the lock. A wait notices it within poll_ms. The
     * handle only reads it; the caller owns it and keeps it alive as long as the
     * handle. */
    const atomic_int *cancel;
    /* Credentials, sent as AUTH [user] password on every connection (the first one and
     * every reconnect, command and pub/sub alike). password NULL or "" = send no AUTH;
     * user NULL or "" = the server's default user (requirepass). Copied by
     * redislock_new (at most 128 and 512 bytes). A server that refuses them, or that
     * wants a password when none is set, makes the call fail with LOCK_ERR_CONNECTION. */
    const char *user;
    const char *password;
    /* NULL or "", or up to 32 bytes of [A-Za-z0-9_-] naming this handle: every key it sets
     * then holds "<token>.<owner>" instead of "<token>", so that redislock_release_mine
     * can delete a key of ours whose token we never learned (a grant whose reply was
     * lost). Copied by redislock_new. RedLock gives each of its handles one. */
    const char *owner;
} redislock_config;

/* Counters for /metrics and the benchmark. All only grow. */
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

/* Parses "HOST:PORT" (what --redis and STOCKD_REDIS take) into host (a buffer of
 * hostcap bytes) and *port. LOCK_OK or LOCK_ERR_ARGS. Pure; thread-safe. */
int redislock_parse_addr(const char *addr, char *host, size_t hostcap, int *port);

/* Connects (the command connection), authenticates if the config has a password, and
 * loads the two scripts. On LOCK_OK *out is the handle; otherwise *out is NULL and
 * the code says why: LOCK_ERR_ARGS (bad configuration), LOCK_ERR_CONNECTION
 * (Redis unreachable within connect_timeout_ms), LOCK_ERR_CONNECTION (credentials
 * refused or missing), LOCK_ERR_SERVER, LOCK_ERR_NOMEM. If errbuf is not NULL,
 * the detail is written there (errcap bytes). Later, a broken connection is made again
 * by the next call. */
int redislock_new(const redislock_config *cfg, redislock **out, char *errbuf, size_t errcap);

/* Closes the connections and frees the handle and every hold still outstanding (their
 * pointers become invalid; their keys expire with their lease). NULL is a no-op. */
void redislock_free(redislock *l);

/* Acquires `name`, waiting at most timeout_ms (0 = try once, < 0 = no limit). On
 * LOCK_OK *out is the hold; otherwise *out is NULL. Returns LOCK_OK,
 * LOCK_ERR_ARGS, LOCK_ERR_NOMEM, LOCK_ERR_TIMEOUT,
 * LOCK_ERR_CONNECTION (one reconnect was tried), LOCK_ERR_CONNECTION (a reconnect's
 * credentials were refused), LOCK_ERR_SERVER or LOCK_ERR_CANCELLED (the config's cancel
 * flag is set). */
int redislock_acquire(redislock *l, const char *name, int timeout_ms, redislock_hold **out);

/* Is the lease surely still ours? LOCK_OK, or LOCK_LOST once lease_ms minus
 * the safety margin has passed since the acquire was sent (by the local monotonic
 * clock). Cheap: reads local state only, never asks Redis. LOCK_ERR_ARGS for NULL.
 * Call it right before committing work done under the lock. */
int redislock_check(const redislock_hold *h);

/* The watchdog's renewal, as Redisson's: extends the lease of hold h to a full lease
 * from now if, and only if, its key still holds h's token (a Lua compare-and-extend with
 * PEXPIRE), through the command connection of handle `via`. On LOCK_OK,
 * redislock_check(h) counts its lease from the moment this renewal was sent. Returns
 * LOCK_OK; LOCK_LOST if the key was not ours any more (the lease ran out; it
 * may have a new owner, which is left alone; h's lease clock is not touched, so
 * check() says LOST when it would have anyway); LOCK_ERR_CONNECTION,
 * LOCK_ERR_CONNECTION or LOCK_ERR_SERVER if it could not be sent (nothing was
 * extended; try again, while there is lease left); LOCK_ERR_ARGS for NULL.
 *
 * The one exception to the thread rule above, made for a renewer thread: `via` is a
 * handle of the CALLING thread (the renewer's own, on the same Redis), while h may
 * belong to another handle and thread, which may be using h meanwhile (check, token).
 * The caller guarantees that h is not released or freed during the call. The counters
 * go to `via`. */
int redislock_renew(redislock *via, redislock_hold *h);

/* The fencing token of this acquisition, > 0 (0 for NULL). Tokens of one Redis grow
 * across all names, so a database can refuse a write carrying a token lower than the
 * last one it accepted. */
int64_t redislock_token(const redislock_hold *h);

/* Releases the hold: deletes the key if it still holds our token and publishes the
 * release. The hold is freed in every case except LOCK_ERR_NOT_OWNER. Returns
 * LOCK_OK; LOCK_LOST if the key was no longer ours (the lease ran out; it may
 * have a new owner, which is left alone); LOCK_ERR_CONNECTION or
 * LOCK_ERR_SERVER if the release could not be done (the key then expires with its
 * lease); LOCK_ERR_NOT_OWNER if called by another thread than the acquirer. */
int redislock_release(redislock_hold *h);

/* Deletes lock `name`'s key if this handle (its config's owner) set it, whatever the
 * token, as when an acquire's reply was lost: the key was set, the call failed, and no
 * hold knows it. A key of another owner, or none, is left alone. Never call it for a
 * name this handle holds (it would delete the hold's key). LOCK_OK (whether or not there
 * was a key of ours), LOCK_ERR_ARGS (no owner configured, a bad name), or a connection or
 * server code as redislock_release. */
int redislock_release_mine(redislock *l, const char *name);

/* Is Redis reachable? PING on the command connection (reconnecting if needed):
 * LOCK_OK, LOCK_ERR_CONNECTION, LOCK_ERR_CONNECTION (a reconnect's credentials
 * were refused) or LOCK_ERR_SERVER. For /health. */
int redislock_ping(redislock *l);
/* Reads the lock `name` as the server has it now, for a view (lock.h, lock_view_read):
 * *key the key (keycap bytes), *token its token (0 = the lock is free), *pttl_ms the
 * lease left (-1 = free) and *owner (ownercap bytes) the holder's owner ("" if it has
 * none). One round trip; reconnects as any call. LOCK_OK or an error with its detail in
 * errstr. The handle's thread. */
int redislock_peek(redislock *l, const char *name, char *key, size_t keycap, long long *token,
                   long long *pttl_ms, char *owner, size_t ownercap);

/* Copies the handle's counters. */
void redislock_get_stats(const redislock *l, redislock_stats *out);

/* The last error's detail on this handle ("" after a success); never NULL for a
 * non-NULL handle; valid until the next call. */
const char *redislock_errstr(const redislock *l);

/* A text for a code: lock_strerror()'s, but where the library says more about
 * Redis (CONNECTION, SERVER). Pure. */
const char *redislock_strerror(int code);

#endif
