/* etcdlock: a fair lock on etcd 3.4 (its v3 JSON gateway, through libcurl and cJSON),
 * with a lease, a keep-alive and a fencing token: Consul's model of article 001 §5 (a
 * session plus a check-and-set acquire), on the server Debian 12 packages.
 *
 * The recipe is etcd's own concurrency.Mutex:
 *   - every acquisition grants a lease (LeaseGrant, ttl_s seconds; the server may raise
 *     it to its minimum) and keeps it alive while it waits and while it holds: a thread
 *     of the handle sends LeaseKeepAlive every third of the TTL;
 *   - it puts the key <prefix><name>/<lease id in hex>, attached to the lease, in a
 *     transaction that compares the key's create_revision with 0 (the check-and-set);
 *     the same transaction reads the prefix's oldest key. If that is ours, we hold it;
 *   - otherwise we wait for our predecessor, the key of the prefix with the largest
 *     create revision below ours, to be deleted (a watch from the revision we read, so a
 *     delete in between is not missed), then look again. Waiters queue by create
 *     revision: first come, first served, and a release wakes one waiter only;
 *   - the fencing token is our key's create revision: etcd's revision counter grows with
 *     every write in the cluster and survives restarts (it is in the data directory);
 *   - release deletes our key (LOST if it was gone) and revokes the lease. A holder that
 *     dies stops keeping its lease alive; etcd deletes its key once the TTL has passed
 *     (it looks for expired leases every half second), so the lock is blocked for at
 *     most about one TTL after the last keep-alive.
 *
 * What a lease cannot promise: a holder paused (SIGSTOP, GC, swap) past its TTL wakes
 * believing it holds the lock while a successor does. etcdlock_check() says LOST once the
 * TTL minus a safety margin has passed since the last keep-alive that succeeded was sent
 * (or since the grant), or once a keep-alive found the lease gone; a pause between that
 * check and the write is invisible to it, and only the fencing token, checked by the
 * database in the write itself, refuses the late write.
 *
 * Threads and ownership:
 *   - A handle is one HTTP connection for commands, one for watches (both used only by
 *     the calling thread) and a keep-alive thread of its own with a third connection.
 *     It is NOT thread-safe: make one per worker thread. Handles are independent of each
 *     other and may be made and freed on any thread, one call at a time.
 *   - An etcdlock_hold belongs to the handle and the thread that acquired it: only that
 *     thread checks, reads the token of, or releases it. etcdlock_check may race with
 *     the keep-alive thread safely (it reads one atomic).
 *   - Locks are NOT reentrant: acquiring a name this handle holds is LOCK_ERR_ARGS.
 *   - Never fork() with a handle open. etcdlock_new loads libcurl (libcurl.so.4, with
 *     dlopen: a program that links etcdlock but never makes a handle does not map
 *     libcurl and its ~18 libraries) and runs curl_global_init() once per process.
 *
 * The end of etcdlock.c is the kind's row for lock.h's registry ("etcd", fence kind
 * LOCK_FENCE_ETCD): a lease kind pooled by lease_pool.c, one handle per worker, its
 * lease_ms rounded up to whole seconds of TTL. Its set_new loads libcurl first, so a
 * missing libcurl ends the start-up with a clear error rather than failing requests.
 *
 * Every function returns LOCK_OK (0) or a negative LOCK_* code of lock_codes.h;
 * etcdlock_strerror() names it, etcdlock_errstr() has the detail of the last error on a
 * handle. Nothing here prints, exits or aborts on a server error. */
#ifndef ETCDLOCK_H
#define ETCDLOCK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lock_codes.h"

/* The longest lock name, in bytes. Names are [A-Za-z0-9_.-]. */
#define ETCDLOCK_NAME_MAX 200
/* The most endpoints in a list. */
#define ETCDLOCK_ENDPOINTS_MAX 8

typedef struct etcdlock_config {
    /* "HOST:PORT[,HOST:PORT...]", members of one cluster (what --etcd and STOCKD_ETCD
     * take). A call that cannot reach one endpoint tries the next. */
    const char *endpoints;
    const char *prefix;     /* key prefix; NULL = "lock/" (at most 32 bytes) */
    int ttl_s;              /* the lease TTL asked for, seconds; 0 = 10. etcd raises it to
                             * its minimum (2 s with the default election timeout) */
    int safety_margin_ms;   /* check() says LOST this long before the TTL ends; 0 =
                             * TTL/10 + 2 ms; < 0 is refused */
    int poll_ms;            /* a wait looks at the cancel flag and the deadline this
                             * often; 0 = 50 */
    int connect_timeout_ms; /* 0 = 2000 */
    int io_timeout_ms;      /* one request's answer (not a watch); 0 = 2000 */
    /* NULL, or a flag any thread may set (non-zero) to end this handle's waits: an
     * acquire that finds it set returns LOCK_ERR_CANCELLED without the lock (and takes
     * its key out of the queue). The caller owns it and keeps it alive as long as the
     * handle. */
    const atomic_int *cancel;
    /* 0: the keep-alive thread runs (the default). Non-zero: no keep-alive at all, so
     * every lease ends after its TTL even while held (tests of a lost lease). */
    int no_keepalive;
    /* Who we are (the instance), written as the value of each queue key, so that a view
     * (etcdlock_view.c) can tell who queued. NULL = "". Copied, at most 63 bytes. */
    const char *owner;
} etcdlock_config;

/* Counters for /metrics and the tests. All only grow. */
typedef struct etcdlock_stats {
    uint64_t acquired;
    uint64_t timeouts;
    uint64_t released;
    uint64_t release_lost;   /* releases that found our key gone (the lease had ended) */
    uint64_t ops;            /* requests sent by the calling thread (grant, txn, range, ...) */
    uint64_t watches;        /* watches opened on a predecessor */
    uint64_t wakeups;        /* predecessor deletes a watch delivered */
    uint64_t keepalives;     /* keep-alives that extended a lease (the keep-alive thread
                              * and etcdlock_renew through this handle) */
    uint64_t keepalive_lost; /* keep-alives that found the lease gone */
} etcdlock_stats;

typedef struct etcdlock etcdlock;
typedef struct etcdlock_hold etcdlock_hold;

/* Checks an endpoint list ("HOST:PORT[,HOST:PORT...]"): LOCK_OK or LOCK_ERR_ARGS.
 * Pure; thread-safe. */
int etcdlock_parse_endpoints(const char *endpoints);

/* Makes a handle and asks the cluster for its status (so a wrong address fails here).
 * On LOCK_OK *out is the handle; otherwise *out is NULL and the code says why:
 * LOCK_ERR_ARGS (bad configuration, or libcurl cannot be loaded), LOCK_ERR_CONNECTION
 * (no endpoint answered within connect_timeout_ms), LOCK_ERR_SERVER, LOCK_ERR_NOMEM. The
 * detail goes to errbuf (errcap bytes) if it is not NULL. */
int etcdlock_new(const etcdlock_config *cfg, etcdlock **out, char *errbuf, size_t errcap);

/* Stops the keep-alive thread, closes the connections, and frees the handle and every
 * hold still outstanding (their pointers become invalid; their keys go when their
 * leases end, one TTL later). NULL is a no-op. */
void etcdlock_free(etcdlock *l);

/* Acquires `name`, waiting at most timeout_ms (0 = try once, < 0 = no limit). On LOCK_OK
 * *out is the hold; otherwise *out is NULL and our key and lease are deleted again
 * (best effort: if etcd cannot be reached they end with their TTL). Returns LOCK_OK,
 * LOCK_ERR_ARGS, LOCK_ERR_NOMEM, LOCK_ERR_TIMEOUT, LOCK_ERR_CONNECTION (no endpoint
 * answered, or one answered "unavailable"), LOCK_ERR_SERVER or LOCK_ERR_CANCELLED. */
int etcdlock_acquire(etcdlock *l, const char *name, int timeout_ms, etcdlock_hold **out);

/* Is the lease surely still ours? LOCK_OK, or LOCK_LOST once the TTL minus the safety
 * margin has passed since the last successful keep-alive (or the grant) was sent, by the
 * local monotonic clock, or once a keep-alive found the lease gone. Cheap: never asks
 * etcd. LOCK_ERR_ARGS for NULL. Call it right before committing work done under the
 * lock. */
int etcdlock_check(const etcdlock_hold *h);

/* The fencing token: our key's create revision, > 0 (0 for NULL). Revisions grow across
 * every key of the cluster, so a later holder of the same name has a larger one. */
int64_t etcdlock_token(const etcdlock_hold *h);

/* The lease's TTL in seconds as etcd granted it (0 for NULL). */
int etcdlock_ttl(const etcdlock_hold *h);

/* One keep-alive of h's lease, sent now through the connection of handle `via`, as the
 * keep-alive thread does on its own every third of the TTL: for a watchdog of the
 * caller's (lock.h's renewer), which is then redundant but harmless. On LOCK_OK,
 * etcdlock_check(h) counts the TTL from the moment this keep-alive was sent. Returns
 * LOCK_OK; LOCK_LOST if the lease was gone (check() says LOST from now on);
 * LOCK_ERR_CONNECTION or LOCK_ERR_SERVER if it could not be sent (nothing changed);
 * LOCK_ERR_ARGS for NULL. The one exception to the thread rule: `via` is a handle of
 * the calling thread, h may belong to another handle and thread, which may be using h
 * meanwhile (check, token); the caller guarantees h is not released during the call.
 * The counters go to `via`. */
int etcdlock_renew(etcdlock *via, etcdlock_hold *h);

/* Releases the hold: deletes our key and revokes the lease. The hold is freed in every
 * case except LOCK_ERR_NOT_OWNER. Returns LOCK_OK; LOCK_LOST if our key was already gone
 * (the lease ended; a successor may hold the lock, which is left alone);
 * LOCK_ERR_CONNECTION or LOCK_ERR_SERVER if it could not be done (the key then goes
 * with the lease's TTL); LOCK_ERR_NOT_OWNER if called by another thread. */
int etcdlock_release(etcdlock_hold *h);

/* Is etcd reachable and does it have a leader? LOCK_OK, LOCK_ERR_CONNECTION or
 * LOCK_ERR_SERVER. For /health. */
int etcdlock_ping(etcdlock *l);

/* Copies the handle's counters (any thread that owns the handle). */
void etcdlock_get_stats(const etcdlock *l, etcdlock_stats *out);

/* The last error's detail on this handle ("" after a success); never NULL for a
 * non-NULL handle; valid until the next call. */
const char *etcdlock_errstr(const etcdlock *l);

/* A text for a code: lock_strerror()'s, but where the library says more about
 * etcd (CONNECTION, SERVER). Pure. */
const char *etcdlock_strerror(int code);

#endif
