/* locks.c: the lock kinds a deduction can run under, behind one small interface
 * (acquire, check before commit, fencing token, release), chosen once from the lock
 * mode. Adding a kind is one more table here, not a switch in the worker.
 *
 *   local       a mutex per product inside this process (striped, see below);
 *   zk, zk-herd the ZooKeeper fair or herd lock of lock/zklock.h, with its czxid as the
 *               fencing token and its session state as the pre-commit check;
 *   for-update  no lock outside the database: the batch's SELECT ... FOR UPDATE is the
 *               lock, so acquire and release do nothing;
 *   redis       the Redis lease lock of lock/redislock.h, its fencing token from the
 *               acquire script, the local lease clock as the pre-commit check;
 *   db-lock     article 001's lock table (lock/dblock.h): a stock_lock row, its
 *               AUTO_INCREMENT token as the fence, the same lease check.
 * Modes none and atomic take no lock and never come here.
 *
 * The two lease kinds have one connection per handle and their handles are NOT
 * thread-safe, while one stockd_locks serves every worker. So they share a small pool of
 * slots, one per worker (a worker holds at most one lock at a time): acquire takes a
 * slot under a mutex, the slot travels with the hold, and release gives it back. A slot's
 * handle is made the first time the slot is used, on that worker, and made again after
 * a failed attempt: a lock service that is down at start-up, or goes down later, makes
 * the requests that need it fail with 503 (ZKLOCK_ERR_CONNECTION), never the process.
 * Their codes are mapped onto ZKLOCK_* so the worker answers them as it answers
 * ZooKeeper's: timeout 503 lock_timeout, an unreachable or failing service 503
 * unavailable, a lease that ran out before the commit lock_lost (through the guard).
 *
 * stockd_locks_cancel() ends every lock wait for good, whatever the kind: ZooKeeper's
 * through zklock_session_cancel(), the lease kinds through a flag every handle of the
 * pool reads between its tries (so a wait ends within one poll interval).
 *
 * The watchdog (--lease-renew on), as Redisson's: one renewer thread per process, with
 * a lock-service handle of its own (the libraries' handles are per thread; their
 * *_renew functions are the one call that takes another thread's hold). A holder is
 * usually asleep in --think-us or waiting on MySQL, so it cannot renew for itself.
 * Every tick (a twelfth of the lease) the renewer walks the slots and renews each hold
 * whose last renewal (or acquisition) is a third of the lease old: a compare-and-extend
 * that succeeds only while the lease is still this acquisition's. A successful renewal
 * moves the hold's own lease clock forward, so the pre-commit check keeps meaning "the
 * lease is surely ours": a process that was paused renewed nothing and is refused by
 * it, or by the fence. A renewal that finds the lock gone stops renewing that hold; one
 * that cannot reach the service is tried again at the next tick. Each slot's hold is
 * published to the renewer under the slot's renew_mu, which a renewal holds for its
 * round trip, so a release waits for an in-flight renewal and the renewer never touches
 * a freed hold. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dblock.h"
#include "redislock.h"
#include "stockd.h"

/* Products are striped over a fixed set of mutexes instead of getting one each, so
 * memory stays bounded whatever ids clients send; two products that share a stripe only
 * wait for each other, which never breaks mutual exclusion. */
#define LOCAL_STRIPES 1024

struct lease_ops;
typedef struct lease_slot lease_slot;

struct stockd_locks {
    const struct stockd_lock_kind *kind;
    zklock_session *zk;
    zklock_kind zk_kind;
    int timeout_ms;
    pthread_mutex_t stripes[LOCAL_STRIPES];
    /* The lease kinds (redis, db-lock): their operations, configuration and pool. */
    const struct lease_ops *lease;
    const stockd_config *cfg;
    stockdb_config db;
    pthread_mutex_t pool_mu;
    lease_slot *slots; /* cfg->workers of them */
    lease_slot *free_slots;
    atomic_llong last_log; /* CLOCK_MONOTONIC second of the last failure logged */
    atomic_int cancelled;  /* set once by stockd_locks_cancel; read by the lease handles */
    /* The watchdog (--lease-renew on): its thread, and the stop it waits on. */
    int lease_ms;
    bool renewer_started;
    pthread_t renewer;
    pthread_mutex_t renew_stop_mu;
    pthread_cond_t renew_stop_cv; /* on CLOCK_MONOTONIC */
    bool renew_stop;
};

typedef struct stockd_lock_kind {
    /* name: product_N or product_N_seg_S; key: a number for it (the local stripes) */
    int (*acquire)(stockd_locks *l, const char *name, uint32_t key, void **impl);
    int (*check)(const void *impl);
    int64_t (*token)(const void *impl);
    int (*release)(void *impl);
} stockd_lock_kind;

/* ---------------------------------------------------------------- local */

static int local_acquire(stockd_locks *l, const char *name, uint32_t key, void **impl) {
    pthread_mutex_t *m = &l->stripes[key % LOCAL_STRIPES];
    pthread_mutex_lock(m);
    *impl = m;
    return ZKLOCK_OK;
}

static int always_ok(const void *impl) {
    return ZKLOCK_OK;
}

static int64_t no_token(const void *impl) {
    return 0;
}

static int local_release(void *impl) {
    pthread_mutex_unlock(impl);
    return ZKLOCK_OK;
}

static const stockd_lock_kind kind_local = {local_acquire, always_ok, no_token, local_release};

/* ---------------------------------------------------------------- ZooKeeper */

static int zk_acquire(stockd_locks *l, const char *name, uint32_t key, void **impl) {
    zklock_hold *h = NULL;
    int rc = zklock_acquire(l->zk, name, l->zk_kind, l->timeout_ms, &h);
    *impl = h;
    return rc;
}

static int zk_check(const void *impl) {
    return zklock_check(impl);
}

static int64_t zk_token(const void *impl) {
    return zklock_token(impl);
}

static int zk_release(void *impl) {
    return zklock_release(impl);
}

static const stockd_lock_kind kind_zk = {zk_acquire, zk_check, zk_token, zk_release};

/* ---------------------------------------------------------------- the row lock */

static int row_acquire(stockd_locks *l, const char *name, uint32_t key, void **impl) {
    *impl = NULL;
    return ZKLOCK_OK;
}

static int row_release(void *impl) {
    return ZKLOCK_OK;
}

static const stockd_lock_kind kind_row = {row_acquire, always_ok, no_token, row_release};

/* ---------------------------------------------------------------- lease locks */

/* One lease kind's library behind one face. Codes are the library's own until to_zk. */
typedef struct lease_ops {
    const char *service;      /* for logs */
    const char *down_message; /* the answer's message when the service fails */
    int (*open)(const stockd_locks *l, void **handle, char *err, size_t errcap);
    void (*close)(void *handle);
    int (*acquire)(void *handle, const char *name, int timeout_ms, void **hold);
    int (*check)(const void *hold);
    int64_t (*token)(const void *hold);
    int (*release)(void *hold);
    int (*renew)(void *via_handle, void *hold); /* on the renewer's thread and handle */
    int (*ping)(void *handle);                  /* NULL: nothing beyond MySQL to check */
    uint64_t (*ops)(const void *handle);
    const char *(*errstr)(const void *handle);
    int (*to_zk)(int rc);
} lease_ops;

/* A pooled handle, and the hold it carries while a worker has it. */
struct lease_slot {
    stockd_locks *l;
    void *handle;      /* NULL until first used, and after a failed open */
    void *hold;        /* the acquisition in progress, or NULL */
    uint64_t ops_seen; /* the handle's operations already added to the metrics */
    lease_slot *next;  /* in the free list */
    /* What the renewer sees: the hold to renew (NULL: none, or its lock is lost) and
     * when it is next due (CLOCK_MONOTONIC us). Both under renew_mu. */
    pthread_mutex_t renew_mu;
    void *renewing;
    int64_t renew_due_us;
};

static int64_t now_us(void) {
    return (int64_t)(stockd_now_ns() / 1000);
}

/* Logs a lock-service failure with its detail, at most once a second per process, so
 * that an outage is one line a second and not one per request. */
static void lease_log(stockd_locks *l, const char *what, const char *detail) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = (long long)ts.tv_sec, last = atomic_load(&l->last_log);
    if (now == last || !atomic_compare_exchange_strong(&l->last_log, &last, now)) return;
    stockd_log("warn", "%s %s: %s", l->lease->service, what, detail);
}

/* Adds the handle's operations since the last call to the metrics (or only skips
 * them: the health check's ping is not part of any deduction). */
static void lease_count_ops(lease_slot *s, bool count) {
    if (!s->handle) return;
    uint64_t now = s->l->lease->ops(s->handle);
    if (count) stockd_metrics_lock_ops(now - s->ops_seen);
    s->ops_seen = now;
}

/* Takes a free slot with a connected handle. ZKLOCK_OK, or the open's error (the slot
 * is given back) with its detail in err. */
static int lease_take(stockd_locks *l, lease_slot **out, char *err, size_t errcap) {
    pthread_mutex_lock(&l->pool_mu);
    lease_slot *s = l->free_slots;
    if (s) l->free_slots = s->next;
    pthread_mutex_unlock(&l->pool_mu);
    *out = NULL;
    /* One slot per worker, and a worker uses one at a time: an empty pool is a bug. */
    if (!s) {
        snprintf(err, errcap, "no free lock connection");
        return ZKLOCK_ERR_ARGS;
    }
    if (!s->handle) {
        int rc = l->lease->open(l, &s->handle, err, errcap);
        if (rc != 0) {
            s->handle = NULL;
            lease_log(l, "connect", err);
            stockd_metrics_lock_event(STOCKD_LOCK_EV_UNAVAILABLE);
            pthread_mutex_lock(&l->pool_mu);
            s->next = l->free_slots;
            l->free_slots = s;
            pthread_mutex_unlock(&l->pool_mu);
            return l->lease->to_zk(rc);
        }
        s->ops_seen = 0;
    }
    *out = s;
    return ZKLOCK_OK;
}

/* Gives a slot back. Its handle is kept: the library reconnects it by itself. */
static void lease_give(lease_slot *s) {
    stockd_locks *l = s->l;
    s->hold = NULL;
    pthread_mutex_lock(&l->pool_mu);
    s->next = l->free_slots;
    l->free_slots = s;
    pthread_mutex_unlock(&l->pool_mu);
}

static int lease_acquire(stockd_locks *l, const char *name, uint32_t key, void **impl) {
    char err[512];
    lease_slot *s;
    *impl = NULL;
    /* After the cancel, not even a connection is made: the answer is 503 at once. */
    if (atomic_load(&l->cancelled)) return ZKLOCK_ERR_CANCELLED;
    int rc = lease_take(l, &s, err, sizeof(err));
    if (rc != ZKLOCK_OK) return rc;
    rc = l->lease->to_zk(l->lease->acquire(s->handle, name, l->timeout_ms, &s->hold));
    lease_count_ops(s, true);
    if (rc == ZKLOCK_OK) {
        stockd_metrics_lock_event(STOCKD_LOCK_EV_ACQUIRED);
        if (l->renewer_started) {
            pthread_mutex_lock(&s->renew_mu);
            s->renewing = s->hold;
            s->renew_due_us = now_us() + (int64_t)l->lease_ms * 1000 / 3;
            pthread_mutex_unlock(&s->renew_mu);
        }
        *impl = s;
        return ZKLOCK_OK;
    }
    if (rc == ZKLOCK_ERR_TIMEOUT) {
        stockd_metrics_lock_event(STOCKD_LOCK_EV_TIMEOUT);
    } else if (rc != ZKLOCK_ERR_CANCELLED) {
        stockd_metrics_lock_event(STOCKD_LOCK_EV_UNAVAILABLE);
        lease_log(l, "acquire", l->lease->errstr(s->handle));
    }
    lease_give(s);
    return rc;
}

static int lease_check(const void *impl) {
    const lease_slot *s = impl;
    return s->l->lease->to_zk(s->l->lease->check(s->hold));
}

static int64_t lease_token(const void *impl) {
    const lease_slot *s = impl;
    return s->l->lease->token(s->hold);
}

static int lease_release(void *impl) {
    lease_slot *s = impl;
    stockd_locks *l = s->l;
    /* Withdrawn from the renewer first; this waits for a renewal in flight. */
    if (l->renewer_started) {
        pthread_mutex_lock(&s->renew_mu);
        s->renewing = NULL;
        pthread_mutex_unlock(&s->renew_mu);
    }
    int rc = l->lease->to_zk(l->lease->release(s->hold));
    lease_count_ops(s, true);
    if (rc == ZKLOCK_LOST) {
        stockd_metrics_lock_event(STOCKD_LOCK_EV_LOST);
    } else if (rc != ZKLOCK_OK) {
        /* The lock then frees itself when its lease runs out. */
        stockd_metrics_lock_event(STOCKD_LOCK_EV_UNAVAILABLE);
        lease_log(l, "release", l->lease->errstr(s->handle));
    }
    lease_give(s);
    return rc;
}

static const stockd_lock_kind kind_lease = {lease_acquire, lease_check, lease_token, lease_release};

/* The watchdog. */

/* One pass over the slots: renews every hold that is due. *handle is the renewer's own,
 * made here the first time (and again after a failed open). */
static void renew_due(stockd_locks *l, void **handle, uint64_t *ops_seen) {
    int64_t third_us = (int64_t)l->lease_ms * 1000 / 3;
    for (unsigned i = 0; i < l->cfg->workers; i++) {
        lease_slot *s = &l->slots[i];
        pthread_mutex_lock(&s->renew_mu);
        if (!s->renewing || now_us() < s->renew_due_us) {
            pthread_mutex_unlock(&s->renew_mu);
            continue;
        }
        if (!*handle) {
            char err[512];
            if (l->lease->open(l, handle, err, sizeof(err)) != 0) {
                *handle = NULL;
                pthread_mutex_unlock(&s->renew_mu);
                lease_log(l, "renewer connect", err);
                return; /* the next tick tries again, while the leases last */
            }
            *ops_seen = 0;
        }
        int64_t sent = now_us();
        int rc = l->lease->to_zk(l->lease->renew(*handle, s->renewing));
        if (rc == ZKLOCK_OK) {
            s->renew_due_us = sent + third_us;
            stockd_metrics_lease_renewal();
        } else if (rc == ZKLOCK_LOST) {
            /* Gone for good: its holder's check or the fence refuses its write. */
            s->renewing = NULL;
        }
        pthread_mutex_unlock(&s->renew_mu);
        if (rc != ZKLOCK_OK) lease_log(l, "renewal", l->lease->errstr(*handle));
        /* A service that cannot be reached would cost every other slot its own
         * timeout, with their releases waiting: the next tick tries again. */
        if (rc != ZKLOCK_OK && rc != ZKLOCK_LOST) break;
    }
    if (*handle) {
        uint64_t now = l->lease->ops(*handle);
        stockd_metrics_lock_ops(now - *ops_seen);
        *ops_seen = now;
    }
}

static void *renewer_main(void *arg) {
    stockd_locks *l = arg;
    void *handle = NULL;
    uint64_t ops_seen = 0;
    /* A twelfth of the lease: a hold is renewed between a third and about five
     * twelfths of its lease after the last renewal, well before the safety margin. */
    int64_t tick_us = (int64_t)l->lease_ms * 1000 / 12;
    if (tick_us < 1000) tick_us = 1000;
    pthread_mutex_lock(&l->renew_stop_mu);
    while (!l->renew_stop) {
        pthread_mutex_unlock(&l->renew_stop_mu);
        renew_due(l, &handle, &ops_seen);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ns = until.tv_nsec + tick_us * 1000;
        until.tv_sec += (time_t)(ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
        pthread_mutex_lock(&l->renew_stop_mu);
        if (!l->renew_stop) pthread_cond_timedwait(&l->renew_stop_cv, &l->renew_stop_mu, &until);
    }
    pthread_mutex_unlock(&l->renew_stop_mu);
    /* Freed on the thread that made it, as the libraries want. */
    if (handle) l->lease->close(handle);
    return NULL;
}

/* Starts the renewer. 0, or -1 (then there is no renewer). */
static int renewer_start(stockd_locks *l) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return -1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&l->renew_stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) return -1;
    if (pthread_create(&l->renewer, NULL, renewer_main, l) != 0) {
        pthread_cond_destroy(&l->renew_stop_cv);
        return -1;
    }
    l->renewer_started = true;
    return 0;
}

static void renewer_stop(stockd_locks *l) {
    if (!l->renewer_started) return;
    pthread_mutex_lock(&l->renew_stop_mu);
    l->renew_stop = true;
    pthread_cond_signal(&l->renew_stop_cv);
    pthread_mutex_unlock(&l->renew_stop_mu);
    pthread_join(l->renewer, NULL);
    pthread_cond_destroy(&l->renew_stop_cv);
    l->renewer_started = false;
}

/* Redis. */

static int redis_to_zk(int rc) {
    switch (rc) {
    case REDISLOCK_OK:
        return ZKLOCK_OK;
    case REDISLOCK_ERR_ARGS:
        return ZKLOCK_ERR_ARGS;
    case REDISLOCK_ERR_NOMEM:
        return ZKLOCK_ERR_NOMEM;
    case REDISLOCK_ERR_TIMEOUT:
        return ZKLOCK_ERR_TIMEOUT;
    case REDISLOCK_ERR_CONNECTION:
        return ZKLOCK_ERR_CONNECTION;
    case REDISLOCK_ERR_NOT_OWNER:
        return ZKLOCK_ERR_NOT_OWNER;
    case REDISLOCK_LOST:
        return ZKLOCK_LOST;
    case REDISLOCK_ERR_CANCELLED:
        return ZKLOCK_ERR_CANCELLED;
    default: /* REDISLOCK_ERR_REDIS: the server answered an error; 503 like ZooKeeper's */
        return ZKLOCK_ERR_ZK;
    }
}

static int redis_open(const stockd_locks *l, void **handle, char *err, size_t errcap) {
    /* A connect that hangs (a black-holed address) must not outlast the lock wait. */
    int connect_ms = l->timeout_ms > 0 && l->timeout_ms < 2000 ? l->timeout_ms : 2000;
    if (connect_ms < 100) connect_ms = 100;
    redislock_config c = {.addr = l->cfg->redis,
                          .lease_ms = (int)l->cfg->redis_lease_ms,
                          .connect_timeout_ms = connect_ms,
                          .cancel = &l->cancelled,
                          .user = l->cfg->redis_user,
                          .password = l->cfg->redis_password};
    redislock *r = NULL;
    int rc = redislock_new(&c, &r, err, errcap);
    *handle = r;
    return rc;
}

static void redis_close(void *handle) {
    redislock_free(handle);
}

static int redis_acquire(void *handle, const char *name, int timeout_ms, void **hold) {
    redislock_hold *h = NULL;
    int rc = redislock_acquire(handle, name, timeout_ms, &h);
    *hold = h;
    return rc;
}

static int redis_check(const void *hold) {
    return redislock_check(hold);
}

static int64_t redis_token(const void *hold) {
    return redislock_token(hold);
}

static int redis_release(void *hold) {
    return redislock_release(hold);
}

static int redis_renew(void *via, void *hold) {
    return redislock_renew(via, hold);
}

static int redis_ping(void *handle) {
    return redislock_ping(handle);
}

static uint64_t redis_ops(const void *handle) {
    redislock_stats st;
    redislock_get_stats(handle, &st);
    return st.ops;
}

static const char *redis_errstr(const void *handle) {
    return redislock_errstr(handle);
}

static const lease_ops lease_redis = {
    .service = "redis",
    .down_message = "Redis is unavailable; nothing was deducted",
    .open = redis_open,
    .close = redis_close,
    .acquire = redis_acquire,
    .check = redis_check,
    .token = redis_token,
    .release = redis_release,
    .renew = redis_renew,
    .ping = redis_ping,
    .ops = redis_ops,
    .errstr = redis_errstr,
    .to_zk = redis_to_zk,
};

/* The lock table. */

static int db_to_zk(int rc) {
    switch (rc) {
    case DBLOCK_OK:
        return ZKLOCK_OK;
    case DBLOCK_ERR_ARGS:
        return ZKLOCK_ERR_ARGS;
    case DBLOCK_ERR_NOMEM:
        return ZKLOCK_ERR_NOMEM;
    case DBLOCK_ERR_TIMEOUT:
        return ZKLOCK_ERR_TIMEOUT;
    case DBLOCK_ERR_CONNECTION:
        return ZKLOCK_ERR_CONNECTION;
    case DBLOCK_LOST:
        return ZKLOCK_LOST;
    case DBLOCK_ERR_CANCELLED:
        return ZKLOCK_ERR_CANCELLED;
    default: /* DBLOCK_ERR_QUERY: no table or no grant; 503, and the log says which */
        return ZKLOCK_ERR_ZK;
    }
}

/* Made on a worker thread, which has run mysql_thread_init() for its own stockdb
 * handle already; MariaDB Connector/C lets a connection move between threads as long
 * as one thread at a time uses it, which the pool guarantees. */
static int db_open(const stockd_locks *l, void **handle, char *err, size_t errcap) {
    /* dblock takes an owner of at most 40 bytes; the instance name may be longer. */
    char owner[41];
    size_t n = strnlen(l->cfg->instance, sizeof(owner) - 1);
    memcpy(owner, l->cfg->instance, n);
    owner[n] = '\0';
    dblock_config c = {.db = l->db,
                       .owner = owner,
                       .lease_ms = (int)l->cfg->db_lock_lease_ms,
                       .cancel = &l->cancelled};
    dblock *d = NULL;
    int rc = dblock_new(&c, &d, err, errcap);
    *handle = d;
    return rc;
}

static void db_close(void *handle) {
    dblock_free(handle);
}

static int db_acquire(void *handle, const char *name, int timeout_ms, void **hold) {
    dblock_hold *h = NULL;
    int rc = dblock_acquire(handle, name, timeout_ms, &h);
    *hold = h;
    return rc;
}

static int db_check(const void *hold) {
    return dblock_check(hold);
}

static int64_t db_token(const void *hold) {
    return dblock_token(hold);
}

static int db_release(void *hold) {
    return dblock_release(hold);
}

static int db_renew(void *via, void *hold) {
    return dblock_renew(via, hold);
}

static uint64_t db_ops(const void *handle) {
    dblock_stats st;
    dblock_get_stats(handle, &st);
    return st.ops;
}

static const char *db_errstr(const void *handle) {
    return dblock_errstr(handle);
}

static const lease_ops lease_db = {
    .service = "db-lock",
    .down_message = "the lock table is unavailable; nothing was deducted",
    .open = db_open,
    .close = db_close,
    .acquire = db_acquire,
    .check = db_check,
    .token = db_token,
    .release = db_release,
    .renew = db_renew,
    .ping = NULL,
    .ops = db_ops,
    .errstr = db_errstr,
    .to_zk = db_to_zk,
};

/* ---------------------------------------------------------------- the interface */

stockd_locks *stockd_locks_new(const stockd_ctx *ctx) {
    stockd_locks *l = calloc(1, sizeof(*l));
    if (!l) return NULL;
    l->zk = ctx->zk;
    l->cfg = ctx->cfg;
    l->db = ctx->db;
    l->timeout_ms = (int)ctx->cfg->lock_timeout_ms;
    for (size_t i = 0; i < LOCAL_STRIPES; i++)
        pthread_mutex_init(&l->stripes[i], NULL);
    pthread_mutex_init(&l->pool_mu, NULL);
    pthread_mutex_init(&l->renew_stop_mu, NULL);
    switch (ctx->cfg->lock) {
    case STOCKD_LOCK_LOCAL:
        l->kind = &kind_local;
        break;
    case STOCKD_LOCK_ZK:
    case STOCKD_LOCK_ZK_HERD:
        l->kind = &kind_zk;
        l->zk_kind = ctx->cfg->lock == STOCKD_LOCK_ZK ? ZKLOCK_FAIR : ZKLOCK_HERD;
        break;
    case STOCKD_LOCK_REDIS:
    case STOCKD_LOCK_DB_LOCK:
        l->kind = &kind_lease;
        l->lease = ctx->cfg->lock == STOCKD_LOCK_REDIS ? &lease_redis : &lease_db;
        l->slots = calloc(ctx->cfg->workers, sizeof(*l->slots));
        if (!l->slots) {
            stockd_locks_free(l);
            return NULL;
        }
        for (unsigned i = 0; i < ctx->cfg->workers; i++) {
            l->slots[i].l = l;
            l->slots[i].next = l->free_slots;
            l->free_slots = &l->slots[i];
            pthread_mutex_init(&l->slots[i].renew_mu, NULL);
        }
        l->lease_ms = (int)(ctx->cfg->lock == STOCKD_LOCK_REDIS ? ctx->cfg->redis_lease_ms
                                                                : ctx->cfg->db_lock_lease_ms);
        if (ctx->cfg->lease_renew && renewer_start(l) != 0) {
            stockd_locks_free(l);
            return NULL;
        }
        break;
    default:
        l->kind = &kind_row;
        break;
    }
    return l;
}

void stockd_locks_free(stockd_locks *l) {
    if (!l) return;
    /* The workers are gone: every slot is back, and any lock still held (none, after an
     * orderly shutdown) frees itself when its lease runs out. */
    renewer_stop(l);
    if (l->slots) {
        for (unsigned i = 0; i < l->cfg->workers; i++) {
            if (l->slots[i].handle) l->lease->close(l->slots[i].handle);
            pthread_mutex_destroy(&l->slots[i].renew_mu);
        }
        free(l->slots);
    }
    pthread_mutex_destroy(&l->renew_stop_mu);
    pthread_mutex_destroy(&l->pool_mu);
    for (size_t i = 0; i < LOCAL_STRIPES; i++)
        pthread_mutex_destroy(&l->stripes[i]);
    free(l);
}

void stockd_locks_cancel(stockd_locks *l) {
    if (!l) return;
    atomic_store(&l->cancelled, 1);
    if (l->zk) zklock_session_cancel(l->zk);
}

int stockd_lock_acquire(stockd_locks *l, int32_t product_id, unsigned segment, stockd_lock *out) {
    char name[48];
    out->kind = l->kind;
    out->product_id = product_id;
    out->segment = segment;
    out->impl = NULL;
    if (segment)
        snprintf(name, sizeof(name), "product_%d_seg_%u", product_id, segment);
    else
        snprintf(name, sizeof(name), "product_%d", product_id);
    return l->kind->acquire(l, name, (uint32_t)product_id * 31u + segment, &out->impl);
}

int stockd_lock_check(const stockd_lock *h) {
    return h->kind->check(h->impl);
}

int64_t stockd_lock_token(const stockd_lock *h) {
    return h->kind->token(h->impl);
}

uint8_t stockd_lock_fence_kind(stockd_lock_mode m) {
    switch (m) {
    case STOCKD_LOCK_ZK:
    case STOCKD_LOCK_ZK_HERD:
        return 1;
    case STOCKD_LOCK_REDIS:
        return 2;
    case STOCKD_LOCK_DB_LOCK:
        return 3;
    default:
        return 0;
    }
}

int stockd_lock_release(stockd_lock *h) {
    int rc = h->kind->release(h->impl);
    h->impl = NULL;
    return rc;
}

int stockd_lock_release_cached(stockd_lock *h, unsigned max_ms) {
    if (h->kind != &kind_zk || !max_ms) return stockd_lock_release(h);
    int rc = zklock_release_cached(h->impl, (int)max_ms);
    h->impl = NULL;
    return rc;
}

const char *stockd_locks_failure_message(const stockd_locks *l, int rc) {
    /* LOST is no outage: the service answered, and the lock was no longer ours. */
    if (!l || !l->lease || rc == ZKLOCK_OK || rc == ZKLOCK_ERR_TIMEOUT ||
        rc == ZKLOCK_ERR_CANCELLED || rc == ZKLOCK_LOST)
        return NULL;
    return l->lease->down_message;
}

const char *stockd_locks_strerror(const stockd_locks *l, int rc) {
    /* Only a release sees a lease kind's LOST (the pre-commit check is the guard's, and
     * is answered, not logged): the batch before it has run, and whether it committed
     * was decided by the fence, not by this release. */
    if (l && l->lease && rc == ZKLOCK_LOST && !l->cfg->fence)
        return "the lock was no longer ours at this release (its lease ran out, and it "
               "may have been taken over); with --fence off the commit before it was not fenced "
               "and may have oversold";
    if (l && l->lease && rc == ZKLOCK_LOST)
        return "the lock was no longer ours at this release (its lease ran out, and it "
               "may have been taken over); the commit before it was fenced, so it could not "
               "overwrite a newer holder's "
               "write, and nothing is undone";
    const char *m = stockd_locks_failure_message(l, rc);
    return m ? m : zklock_strerror(rc);
}

int stockd_locks_ping(stockd_locks *l, char *err, size_t errcap) {
    lease_slot *s;
    if (errcap) err[0] = '\0';
    if (!l->lease || !l->lease->ping) return ZKLOCK_OK;
    int rc = lease_take(l, &s, err, errcap);
    if (rc != ZKLOCK_OK) return rc;
    rc = l->lease->to_zk(l->lease->ping(s->handle));
    if (rc != ZKLOCK_OK) snprintf(err, errcap, "%s", l->lease->errstr(s->handle));
    lease_count_ops(s, false);
    lease_give(s);
    return rc;
}

uint64_t stockd_locks_ops(stockd_locks *l) {
    if (!l || !l->zk) return 0;
    zklock_stats st;
    zklock_get_stats(l->zk, &st);
    return st.op_create + st.op_delete + st.op_get_children + st.op_get_data;
}
