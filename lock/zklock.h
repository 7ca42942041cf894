/* zklock: distributed mutual exclusion on ZooKeeper (libzookeeper_mt).
 *
 * The fair lock is the recipe from ZooKeeper's documentation and the seed articles:
 *   - one lock = one container parent, e.g. /stock/locks/product_1 (ZOO_CONTAINER; the
 *     server reaps it when empty, so a NoNode on create means "make it again, retry");
 *   - each contender creates an EPHEMERAL_SEQUENTIAL child "<guid>-lock-<seq>"; the GUID
 *     lets a create whose reply was lost be found again (and adopted only if its
 *     ephemeral owner is our current session);
 *   - children are ordered by sequence only; the lowest holds the lock; every other
 *     contender puts a data watch (zoo_wget) on its predecessor only, so a release wakes
 *     exactly one waiter.
 * The herd lock is the seeds' first attempt, kept for comparison: one ephemeral node
 * per lock; losers watch it and all race again when it goes.
 *
 * Safety beyond the recipe:
 *   - timeout, error or cancellation deletes our own node: no orphan is left;
 *   - on disconnect every held lock becomes SUSPECT; on session expiry every held lock
 *     becomes LOST, a new session is made, and zklock_check() tells the holder;
 *   - every acquisition yields a fencing token, the czxid of its lock node, which only
 *     grows across the ensemble; the database refuses writes with an older token.
 *
 * Threads and ownership:
 *   - A zklock_session is one ZooKeeper session shared by all threads of a process.
 *     zklock_session_new/free are called by one thread (main); all other functions are
 *     thread-safe.
 *   - A zklock_hold belongs to the thread that acquired it: only that thread may check
 *     or release it. Locks are reentrant per thread: acquiring a lock the calling thread
 *     already holds returns the same hold with its count raised; release lowers it, and
 *     the node is deleted when it reaches zero. The hold is freed by the last release.
 *   - ZooKeeper's watcher callbacks only record state and signal; they never block.
 *
 * Every function returns ZKLOCK_OK (0) or a negative ZKLOCK_* code; zklock_strerror()
 * names it. Nothing here prints (except through ZooKeeper's own log, which is set
 * to errors only), exits or aborts on a server error. */
#ifndef ZKLOCK_H
#define ZKLOCK_H

#include <stdint.h>

#define ZKLOCK_OK              0
#define ZKLOCK_ERR_ARGS        -1 /* bad argument */
#define ZKLOCK_ERR_NOMEM       -2
#define ZKLOCK_ERR_TIMEOUT     -3 /* not acquired before the deadline; our node is gone */
#define ZKLOCK_ERR_CONNECTION  -4 /* no usable connection to ZooKeeper */
#define ZKLOCK_ERR_CANCELLED   -5 /* zklock_session_cancel() was called */
#define ZKLOCK_ERR_ZK          -6 /* ZooKeeper answered an unexpected error */
#define ZKLOCK_ERR_NOT_OWNER   -7 /* the hold belongs to another thread */
#define ZKLOCK_SUSPECT         -8 /* check: connection lost; the lock may have passed on */
#define ZKLOCK_LOST            -9 /* check: session expired or node gone; lock is lost */

typedef enum zklock_kind {
    ZKLOCK_FAIR = 0, /* ephemeral-sequential queue, watch the predecessor */
    ZKLOCK_HERD,     /* one ephemeral node, every loser watches it */
} zklock_kind;

typedef struct zklock_session_config {
    const char *hosts;       /* "127.0.0.1:2181,127.0.0.1:2182" */
    const char *root;        /* parent of all locks; NULL = "/stock/locks" */
    int session_timeout_ms;  /* requested; 0 = 6000 (the server may clamp it) */
    int connect_timeout_ms;  /* how long zklock_session_new waits; 0 = 5000 */
} zklock_session_config;

/* Counters for /metrics and the lock benchmark. All only grow. */
typedef struct zklock_stats {
    uint64_t acquired;       /* successful first acquisitions (reentrant ones excluded) */
    uint64_t timeouts;
    uint64_t suspect_events; /* holds that became SUSPECT */
    uint64_t lost_events;    /* holds that became LOST */
    uint64_t expirations;    /* sessions that expired and were replaced */
    uint64_t op_create;
    uint64_t op_delete;
    uint64_t op_get_children;
    uint64_t op_get_data;    /* zoo_wget / zoo_wexists calls */
    uint64_t watch_events;   /* node watches that fired for our waiters */
} zklock_stats;

typedef struct zklock_session zklock_session;
typedef struct zklock_hold zklock_hold;

/* Connects and waits for CONNECTED up to cfg->connect_timeout_ms. On success *out is
 * the session; on failure *out is NULL and the code says why (ZKLOCK_ERR_CONNECTION
 * if ZooKeeper did not answer in time). */
int zklock_session_new(const zklock_session_config *cfg, zklock_session **out);

/* Cancels waiting acquisitions, deletes any nodes still held, closes the session.
 * Holds still outstanding become invalid. NULL is a no-op. */
void zklock_session_free(zklock_session *s);

/* Makes every acquisition now waiting, or started later, fail with
 * ZKLOCK_ERR_CANCELLED (used at shutdown). */
void zklock_session_cancel(zklock_session *s);

/* Acquires the lock `name` (a single path segment such as "product_1") of the given
 * kind, waiting at most timeout_ms (0 = try once, < 0 = no limit). On ZKLOCK_OK *out is
 * the hold. On any error our node, if one was made, has been deleted. */
int zklock_acquire(zklock_session *s, const char *name, zklock_kind kind, int timeout_ms,
                   zklock_hold **out);

/* Is the lock still ours? ZKLOCK_OK, ZKLOCK_SUSPECT (connection currently lost) or
 * ZKLOCK_LOST (session expired, or our node was deleted). Call it right before
 * committing work done under the lock. Cheap: reads local state only. */
int zklock_check(const zklock_hold *h);

/* The fencing token of this acquisition: the czxid of its lock node, > 0. */
int64_t zklock_token(const zklock_hold *h);

/* Releases one level of the hold; at zero deletes the node and frees the hold. A
 * delete that cannot reach the server is left to session expiry, and the function
 * still frees the hold and returns the error. */
int zklock_release(zklock_hold *h);

/* Copies the session's counters. */
void zklock_get_stats(zklock_session *s, zklock_stats *out);

const char *zklock_strerror(int code);

#endif
