/* lock.h: the lock module's face, the one header the service includes from lock/.
 *
 * A *kind* is one way of locking (a table of functions a library ends with). The
 * registry (lock_kinds.c, lock_kind_find) is the one list of kinds, by name; adding a
 * kind is one new file in lock/ that ends with its `const lock_kind` and one row in that
 * table. A *set* is the locks of one kind for a whole process (the
 * ZooKeeper session, the pool of Redis or lock-table connections, the striped
 * mutexes), made once by the main thread and shared by every worker. A *hold* is one
 * acquisition, in a lock_hold the caller owns (usually on its stack).
 *
 * The lease kinds (a library with one handle per thread and a lease per lock) do not
 * write the set functions themselves: they give lease_pool.c their per-handle calls
 * (lock_lease_ops) and build their row with LOCK_LEASE_KIND. The pool
 * keeps one handle per holder thread, made on first use and again after a failure
 * (so a service that is down makes requests fail with LOCK_ERR_CONNECTION, never the
 * process), and the watchdog that renews leases (lock_config.renew).
 *
 * Codes: every call returns LOCK_OK (0) or a negative LOCK_* code of lock_codes.h,
 * whatever the kind; lock_strerror() names one. Nothing in lock/ prints or calls into
 * the service: a set logs through the callback in its lock_config.
 *
 * Threads:
 *   - lock_set_new, lock_set_free: one thread (main), with no other thread inside a
 *     call on the set. lock_set_cancel: any thread, any time (shutdown).
 *   - lock_acquire, lock_try_acquire(_many): any thread; each hold belongs to the
 *     acquiring thread (lock_release_many takes several of that thread's), which alone
 *     checks, reads the token of and releases it (as zklock.h states it). A hold given
 *     to lock_release_cached and kept passes to the set, and from it to the next
 *     acquiring thread: the one hand-over between threads.
 *   - lock_ping: any worker thread (it may borrow a pooled connection).
 *   - lock_get_stats, lock_set_kind: any thread; they read memory only. */
#ifndef LOCK_H
#define LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lock_codes.h"

struct stockdb_config;
typedef struct lock_view lock_view;

/* Which lock service issued a fencing token (stored as product.fence_kind, so tokens of
 * different services are never compared; sql/schema.sql). Pure numbers: never reuse one. */
#define LOCK_FENCE_NONE      0
#define LOCK_FENCE_ZOOKEEPER 1 /* zk and zk-herd share czxids */
#define LOCK_FENCE_REDIS     2
#define LOCK_FENCE_TABLE     3 /* the stock_lock table */
#define LOCK_FENCE_ETCD      4
#define LOCK_FENCE_REDLOCK   5

/* A set's log line: level "warn" or "error", msg a full sentence without newline.
 * Called from any thread the set runs on; must not call back into the set. */
typedef void (*lock_log_fn)(void *arg, const char *level, const char *msg);

/* What lock_set_new needs. The set keeps a copy of the struct; what its pointers point
 * to must stay valid as long as the set (the service's configuration does). A kind
 * reads the fields it needs and ignores the others. */
typedef struct lock_config {
    const char *addr;     /* the lock service: zk "HOST:PORT,...", redis "HOST:PORT", ...;
                           * NULL for kinds without one */
    const char *user;     /* credentials; NULL or "" = none (zk: the digest's user) */
    const char *password; /* NULL or "" = none */
    const char *peer;     /* zk with credentials: another identity that shares the locks,
                           * "SCHEME:ID" (zklock_session_config.peer); NULL or "" = none */
    int timeout_ms;       /* the longest lock_acquire waits (0 = try once) */
    int lease_ms;         /* lease kinds: the lease of every acquisition */
    int session_ms;       /* session kinds (zk): the session timeout asked for */
    unsigned holders;     /* threads that may hold a lock at once (the workers) */
    bool renew;           /* lease kinds: a watchdog thread renews held leases */
    bool cache;           /* zk: the holder will use lock_release_cached, so each
                           * acquisition sets the watch caching needs (zklock.h) */
    const char *owner;    /* who we are, for rows or values people read (the instance) */
    const char *path;     /* zk: where the lock "product_X" lives, a template whose one "{id}"
                           * (in its last segment) stands for X; any other name lives
                           * beside it, under the template's directory. NULL = the default,
                           * /stock/locks/product_{id} */
    const struct stockdb_config *db; /* db-lock: the MySQL server */
    lock_log_fn log;                 /* NULL = no log */
    void *log_arg;
} lock_config;

/* Counters of one set, for /metrics. All only grow. A kind fills what it has. */
typedef struct lock_stats {
    uint64_t acquired;    /* successful acquisitions */
    uint64_t timeouts;    /* acquisitions that timed out */
    uint64_t lost;        /* session kinds: holds that became LOST; lease kinds: releases
                           * that found the lease run out */
    uint64_t suspect;     /* session kinds: holds that became SUSPECT */
    uint64_t unavailable; /* calls that could not reach the lock service, or were refused */
    uint64_t ops;         /* operations sent to the lock service (health pings excluded) */
    uint64_t renewals;    /* leases the watchdog extended */
    uint64_t expirations; /* session kinds: sessions that expired and were replaced */
    uint64_t seq_limit;   /* zk fair: acquisitions refused at ZooKeeper's sequence limit */
    uint64_t watch_events;
    /* zk's lock cache (lock_release_cached): rounds served from the cache, holds kept,
     * and cached holds let go because another contender queued, at their time limit, or
     * otherwise (lost, disconnected, cancelled). */
    uint64_t cache_hits;
    uint64_t cache_parks;
    uint64_t cache_let_go_contender;
    uint64_t cache_let_go_timeout;
    uint64_t cache_let_go_other;
    /* zk: round trips to the server (a synchronous call is one; the calls that
     * lock_try_acquire_many or lock_release_many send together are one per wave), and
     * the locks tried in such waves. */
    uint64_t round_trips;
    uint64_t batched_tries;
    /* Session kinds: ops by type (zk: create, delete, get_children, get_data); the
     * names are the kind's, NULL past the last. */
    struct {
        const char *name;
        uint64_t n;
    } op[4];
} lock_stats;

/* A lease kind's library, one handle per thread, behind the pool (lease_pool.c). Each
 * call has the contract of the library's own function of that name; `cancel` is the
 * set's flag, which the library's waits must read (and end with LOCK_ERR_CANCELLED). */
typedef struct lock_lease_ops {
    int (*open)(const lock_config *cfg, const atomic_int *cancel, void **handle, char *err,
                size_t errcap);
    void (*close)(void *handle);
    int (*acquire)(void *handle, const char *name, int timeout_ms, void **hold);
    int (*check)(const void *hold);
    int64_t (*token)(const void *hold);
    int (*release)(void *hold);                /* frees the hold whatever it returns */
    int (*renew)(void *via, void *hold);       /* on the renewer's thread and handle */
    int (*ping)(void *handle);                 /* NULL: nothing to check beyond MySQL */
    uint64_t (*ops)(const void *handle);       /* operations sent so far through the handle */
    const char *(*errstr)(const void *handle); /* the last error's detail */
    /* lock_view's read through the handle; NULL: the kind has no view. */
    int (*view)(void *handle, const char *name, lock_view *out);
} lock_lease_ops;

/* One kind: its name, what it is, and its functions. Rows are const and static. */
typedef struct lock_kind {
    const char *name;    /* the registry's name, e.g. "zk-herd" */
    const char *service; /* the lock service, for logs, /metrics and /health: "zookeeper",
                          * "redis", "mysql_lock_table"; NULL: none beyond this process */
    uint8_t fence_kind;  /* LOCK_FENCE_*: the issuer of the tokens; NONE = lock_token is 0 */
    unsigned flags;      /* LOCK_KIND_* */
    /* The answer's message when the lock service fails (acquire), e.g. "Redis is
     * unavailable; nothing was deducted"; NULL = the service's default. */
    const char *down_message;
    const lock_lease_ops *lease; /* lease kinds: the library's per-handle calls */
    const void *arg;             /* the kind's own constant (zk: fair or herd) */

    /* The set. new: LOCK_OK with *set, or a code with the reason in err. */
    int (*set_new)(const struct lock_kind *k, const lock_config *cfg, void **set, char *err,
                   size_t errcap);
    void (*set_cancel)(void *set); /* every wait, now and later, ends CANCELLED */
    void (*set_free)(void *set);
    /* A hold. acquire: LOCK_OK with *hold, or an error with nothing held. */
    int (*acquire)(void *set, const char *name, void **hold);
    int (*check)(const void *hold); /* LOCK_OK while surely ours; SUSPECT or LOST */
    int64_t (*token)(const void *hold);
    int (*release)(void *hold); /* lets go in every case but NOT_OWNER */
    /* Releases but may keep the lock cached up to max_ms for the next acquire of the
     * same name in this process (zk); NULL = the kind does not cache: release. */
    int (*release_cached)(void *hold, int max_ms);
    /* As acquire, but never waits: a lock that another holder has (or is queued for
     * before us) is LOCK_ERR_TIMEOUT at once, with our place in its queue given up (zk:
     * our node deleted). A lock cached by this process is a hit. NULL = the kind has no
     * try (lock_try_acquire is then LOCK_ERR_ARGS). */
    int (*try_acquire)(void *set, const char *name, void **hold);
    /* lock_try_acquire of names[0..n-1] at once (zk: one round trip for all), each
     * holds[i]/rcs[i] as try_acquire's; returns how many are held. NULL = the kind has
     * none: lock_try_acquire_many loops over try_acquire. */
    int (*try_acquire_many)(void *set, const char *const *names, size_t n, void **holds, int *rcs);
    /* release_cached (max_ms > 0) or release of holds[0..n-1] at once, rcs[i] as each
     * one's; NULL entries skipped. NULL = lock_release_many loops. */
    void (*release_many)(void **holds, size_t n, int max_ms, int *rcs);
    /* The set again. ping: LOCK_OK, or the error with its detail in err; NULL = the
     * kind has nothing to check. stats: NULL = all zero. */
    int (*ping)(void *set, char *err, size_t errcap);
    void (*stats)(void *set, lock_stats *out);
    /* lock_view of the lock `name` (lock_view.c states the rules); NULL = no view. */
    int (*view)(void *set, const char *name, lock_view *out);
} lock_kind;

#define LOCK_KIND_LEASE   1u /* a lease: lease_ms and renew apply; LOST at release is news */
#define LOCK_KIND_SESSION 2u /* a session (zk): SUSPECT/LOST come from its state */

/* The pool's functions, for LOCK_LEASE_KIND (lease_pool.c). */
int lock_lease_set_new(const lock_kind *k, const lock_config *cfg, void **set, char *err,
                       size_t errcap);
void lock_lease_set_cancel(void *set);
void lock_lease_set_free(void *set);
int lock_lease_acquire(void *set, const char *name, void **hold);
int lock_lease_check(const void *hold);
int64_t lock_lease_token(const void *hold);
int lock_lease_release(void *hold);
int lock_lease_ping(void *set, char *err, size_t errcap);
void lock_lease_stats(void *set, lock_stats *out);
int lock_lease_view(void *set, const char *name, lock_view *out);

/* The row of a lease kind: `ops` its library's calls, the rest as in lock_kind. */
#define LOCK_LEASE_KIND(NAME, SERVICE, FENCE, DOWN, OPS)                                           \
    {                                                                                              \
        .name = (NAME), .service = (SERVICE), .fence_kind = (FENCE), .flags = LOCK_KIND_LEASE,     \
        .down_message = (DOWN), .lease = (OPS), .set_new = lock_lease_set_new,                     \
        .set_cancel = lock_lease_set_cancel, .set_free = lock_lease_set_free,                      \
        .acquire = lock_lease_acquire, .check = lock_lease_check, .token = lock_lease_token,       \
        .release = lock_lease_release, .ping = lock_lease_ping, .stats = lock_lease_stats,         \
        .view = lock_lease_view,                                                                   \
    }

/* ------------------------------------------------------------------ registry */

/* The kinds, NULL-terminated (lock_kinds.c). */
extern const lock_kind *const lock_kinds[];

/* The kind called name, or NULL. Pure; any thread. */
const lock_kind *lock_kind_find(const char *name);

/* ------------------------------------------------------------------ sets */

typedef struct lock_set lock_set;

/* Makes the set of kind k (zk: connects its session, waiting up to 10 s). LOCK_OK with
 * *out, or a code with *out NULL and the reason in err. Main thread. */
int lock_set_new(const lock_kind *k, const lock_config *cfg, lock_set **out, char *err,
                 size_t errcap);
/* Ends every lock wait of the set, now and later, with LOCK_ERR_CANCELLED: zk through
 * its session, the lease kinds within one poll interval. The local mutex, held only
 * for a transaction, is not waited on long enough to need it. Any thread; NULL no-op. */
void lock_set_cancel(lock_set *s);
/* Frees the set; no thread may be in a call on it or hold one of its locks any more.
 * NULL is a no-op. Main thread. */
void lock_set_free(lock_set *s);
/* The set's kind. */
const lock_kind *lock_set_kind(const lock_set *s);

/* Is the lock service reachable? LOCK_OK (also for kinds without one) or the error,
 * with the detail in err. Worker threads. */
int lock_ping(lock_set *s, char *err, size_t errcap);
/* The set's counters (zeros for kinds without). Reads memory only; any thread. */
void lock_get_stats(lock_set *s, lock_stats *out);
/* The answer's message for a failed acquire of rc when the set's service is down
 * (the kind's down_message), else NULL. LOST, TIMEOUT and CANCELLED are no outage. */
const char *lock_failure_message(const lock_set *s, int rc);

/* ------------------------------------------------------------------ holds */

/* One acquisition; the caller owns the struct, the set owns what impl points to. */
typedef struct lock_hold {
    const lock_kind *kind;
    void *impl; /* the kind's hold; NULL for kinds that keep nothing */
} lock_hold;

/* Waits at most the set's timeout for the lock `name` (a path segment of
 * [A-Za-z0-9_.-], at most 200 bytes, e.g. "product_7_seg_2"). LOCK_OK with *out held,
 * or the error with nothing held. */
int lock_acquire(lock_set *s, const char *name, lock_hold *out);
/* As lock_acquire, but never waits (a lock that is not free now is LOCK_ERR_TIMEOUT at
 * once, nothing held): what a holder of other locks may call without hold-and-wait.
 * LOCK_ERR_ARGS for a kind without a try (lock_can_try). */
int lock_try_acquire(lock_set *s, const char *name, lock_hold *out);
/* The most names one lock_try_acquire_many (or holds one lock_release_many) takes. */
#define LOCK_MANY_MAX 64
/* lock_try_acquire of each of names[0..n-1] (distinct, n <= LOCK_MANY_MAX): out[i] and
 * rcs[i] are what lock_try_acquire(s, names[i], &out[i]) gives, and the same rules hold
 * (never waits, so a holder of other locks may call it). A kind with a batch version
 * (zk: zklock_try_many) sends the tries together, so k tries cost about one round trip
 * (two if some were busy); the others are tried one after the other. Returns how many
 * are held; LOCK_ERR_ARGS (nothing held, every rcs[i] LOCK_ERR_ARGS) for a bad
 * argument or a kind without a try. Same thread rules as lock_try_acquire. */
int lock_try_acquire_many(lock_set *s, const char *const *names, size_t n, lock_hold *out,
                          int *rcs);
/* lock_release_cached(&holds[i], max_ms) of each (max_ms 0: lock_release), with each
 * result in rcs[i] (rcs may be NULL); holds whose impl is NULL are skipped (LOCK_OK).
 * All of one kind. A kind with a batch version (zk) sends the deletes together. Returns
 * LOCK_OK or the first other code. Same thread as the acquires. */
int lock_release_many(lock_hold *holds, size_t n, int max_ms, int *rcs);
/* Does the set's kind have lock_try_acquire? */
bool lock_can_try(const lock_set *s);
/* LOCK_OK while the lock is surely ours (call it right before COMMIT); LOCK_SUSPECT or
 * LOCK_LOST otherwise. Reads local state only. */
int lock_check(const lock_hold *h);
/* The fencing token of the acquisition, > 0; 0 for kinds without one. */
int64_t lock_token(const lock_hold *h);
/* Releases; LOCK_OK or the kind's error (the lock is let go either way, but for
 * LOCK_ERR_NOT_OWNER). Same thread as the acquire. */
int lock_release(lock_hold *h);
/* As lock_release, but a kind that caches (zk, see zklock_release_cached) may keep the
 * lock for up to max_ms, so that the next lock_acquire of the same name by any thread
 * of this process takes it back without a round trip, until another process queues for
 * it. On LOCK_OK the hold is no longer the caller's. max_ms 0, or a kind that does not
 * cache: exactly lock_release. Same thread as the acquire. */
int lock_release_cached(lock_hold *h, int max_ms);

/* ------------------------------------------------------------------ view */

/* What the lock service says about one lock now, for people to read (GET /lock/queue):
 * never used to decide anything. A view costs the kind a few reads (zk: one listing of
 * the lock's children and one read per child listed), so the caller bounds how often
 * it asks. */
#define LOCK_VIEW_MAX 16 /* the most entries a view lists; `total` counts them all */

typedef struct lock_view_entry {
    char node[64];  /* zk: the node's name under the lock; lease kinds: the key */
    char owner[64]; /* the instance that made it (lock_config.owner); "" = not known */
    int64_t seq;    /* zk fair: the sequence number; -1 = none */
    int64_t token;  /* lease kinds: the holder's fencing token; 0 = not known */
    int watches;    /* zk fair: index of the entry this one watches; -1 = none (the holder) */
    bool ours;      /* this process's: zk, made by its session; a lease, its owner ours */
    char impl[8];   /* zk fair: who made it, from the node's name: "stockd", "curator",
                     * "kazoo", "zoolock" or "other" (zklock_int.h); "" = not known */
    bool at_limit;  /* zk fair: its sequence is at ZooKeeper's limit (2^31-1, or signed):
                     * it never holds, and it is listed after every other */
} lock_view_entry;

struct lock_view {
    bool queue;       /* entries are a queue in order (zk fair), entry 0 the holder */
    bool lease;       /* a lease kind: at most one entry, the holder, and lease_ms */
    size_t total;     /* entries the lock service has (n of them listed) */
    size_t n;         /* 0 = the lock is free */
    size_t strays;    /* zk fair: children of the lock's parent that are no contender */
    int64_t lease_ms; /* lease kinds: the holder's lease left in ms; -1 = none */
    char path[256];   /* where the service keeps the lock (zk path, redis key, row) */
    lock_view_entry e[LOCK_VIEW_MAX];
};

/* Does the set's kind have a view? */
bool lock_can_view(const lock_set *s);
/* Reads the lock service's view of the lock `name` (lock_acquire's names) into *out.
 * LOCK_OK, LOCK_ERR_ARGS for a bad name or a kind without a view, or the service's
 * error. Worker threads (it may borrow a pooled connection, or wait for ZooKeeper). */
int lock_view_read(lock_set *s, const char *name, lock_view *out);

/* ------------------------------------------------------------------ helpers */

/* A text for a code. Pure. */
const char *lock_strerror(int code);
/* Parses "HOST:PORT" (hostport.h's ADDR, port required) into host (hostcap bytes) and
 * *port (1..65535). LOCK_OK or LOCK_ERR_ARGS. Pure; any thread. */
int lock_parse_hostport(const char *addr, char *host, size_t hostcap, int *port);

#endif
