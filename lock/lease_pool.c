/* lease_pool.c: the set of every lease kind (redis, db-lock, and later ones), built on
 * the per-handle calls its library gives in a lock_lease_ops (lock.h, LOCK_LEASE_KIND).
 *
 * The lease libraries have one connection per handle and their handles are NOT
 * thread-safe, while one set serves every worker. So the set is a small pool of slots,
 * one per holder thread (lock_config.holders; a worker holds at most one lock at a
 * time): acquire takes a slot under a mutex, the slot travels with the hold, and
 * release gives it back. A slot's handle is made the first time the slot is used, on
 * that thread, and made again after a failed attempt: a lock service that is down at
 * start-up, or goes down later, makes the calls that need it fail with
 * LOCK_ERR_CONNECTION, never the process.
 *
 * lock_lease_set_cancel() ends every wait for good through a flag every handle of the
 * pool reads between its tries (so a wait ends within one poll interval).
 *
 * The watchdog (lock_config.renew), as Redisson's: one renewer thread per set, with a
 * handle of its own (the libraries' *_renew functions are the one call that takes
 * another thread's hold). A holder is usually asleep in its think time or waiting on
 * MySQL, so it cannot renew for itself. Every tick (a twelfth of the lease) the renewer
 * walks the slots and renews each hold whose last renewal (or acquisition) is a third
 * of the lease old: a compare-and-extend that succeeds only while the lease is still
 * this acquisition's. A successful renewal moves the hold's own lease clock forward,
 * so the pre-commit check keeps meaning "the lease is surely ours": a process that was
 * paused renewed nothing and is refused by it, or by the fence. A renewal that finds
 * the lock gone stops renewing that hold; one that cannot reach the service is tried
 * again at the next tick. Each slot's hold is published to the renewer under the
 * slot's renew_mu, which a renewal holds for its round trip, so a release waits for an
 * in-flight renewal and the renewer never touches a freed hold.
 *
 * Failures are logged through lock_config.log, at most once a second per set, and
 * counted in the set's lock_stats; nothing here calls into the service.
 *
 * The file also holds what the lease libraries share beyond the pool (lease_pool_int.h):
 * the view of a lock's one holder, the texts of their codes, and the key-value kinds'
 * rule for lock names. */
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lease_pool_int.h"
#include "lock.h"

typedef struct lease_set lease_set;

/* A pooled handle, and the hold it carries while a thread has it. */
typedef struct lease_slot {
    lease_set *l;
    void *handle;            /* NULL until first used, and after a failed open */
    void *hold;              /* the acquisition in progress, or NULL */
    uint64_t ops_seen;       /* the handle's operations already counted */
    struct lease_slot *next; /* in the free list */
    /* What the renewer sees: the hold to renew (NULL: none, or its lock is lost) and
     * when it is next due (CLOCK_MONOTONIC us). Both under renew_mu. */
    pthread_mutex_t renew_mu;
    void *renewing;
    int64_t renew_due_us;
} lease_slot;

struct lease_set {
    const lock_kind *kind;
    const lock_lease_ops *ops;
    lock_config cfg; /* its pointers are the caller's, valid as long as the set */
    pthread_mutex_t pool_mu;
    lease_slot *slots; /* cfg.holders of them */
    lease_slot *free_slots;
    atomic_llong last_log; /* CLOCK_MONOTONIC second of the last failure logged */
    atomic_int cancelled;  /* set once by lock_lease_set_cancel; read by the handles */
    /* The counters of lock_stats. */
    atomic_ullong acquired, timeouts, lost, unavailable, n_ops, renewals;
    /* The watchdog: its thread, and the stop it waits on. */
    bool renewer_started;
    pthread_t renewer;
    pthread_mutex_t renew_stop_mu;
    pthread_cond_t renew_stop_cv; /* on CLOCK_MONOTONIC */
    bool renew_stop;
};

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Logs a lock-service failure with its detail, at most once a second per set, so that
 * an outage is one line a second and not one per request. */
static void lease_log(lease_set *l, const char *what, const char *detail) {
    if (!l->cfg.log) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = (long long)ts.tv_sec, last = atomic_load(&l->last_log);
    if (now == last || !atomic_compare_exchange_strong(&l->last_log, &last, now)) return;
    char msg[768];
    snprintf(msg, sizeof(msg), "%s %s: %s", l->kind->name, what, detail);
    l->cfg.log(l->cfg.log_arg, "warn", msg);
}

/* Adds the handle's operations since the last call to the counters (or only skips
 * them: the health check's ping is not part of any deduction). */
static void lease_count_ops(lease_slot *s, bool count) {
    if (!s->handle) return;
    uint64_t now = s->l->ops->ops(s->handle);
    if (count) atomic_fetch_add(&s->l->n_ops, now - s->ops_seen);
    s->ops_seen = now;
}

/* Takes a free slot with a connected handle. LOCK_OK, or the open's error (the slot is
 * given back) with its detail in err. */
static int lease_take(lease_set *l, lease_slot **out, char *err, size_t errcap) {
    pthread_mutex_lock(&l->pool_mu);
    lease_slot *s = l->free_slots;
    if (s) l->free_slots = s->next;
    pthread_mutex_unlock(&l->pool_mu);
    *out = NULL;
    /* One slot per holder, and a holder uses one at a time: an empty pool is a bug. */
    if (!s) {
        snprintf(err, errcap, "no free lock connection");
        return LOCK_ERR_ARGS;
    }
    if (!s->handle) {
        int rc = l->ops->open(&l->cfg, &l->cancelled, &s->handle, err, errcap);
        if (rc != LOCK_OK) {
            s->handle = NULL;
            lease_log(l, "connect", err);
            atomic_fetch_add(&l->unavailable, 1);
            pthread_mutex_lock(&l->pool_mu);
            s->next = l->free_slots;
            l->free_slots = s;
            pthread_mutex_unlock(&l->pool_mu);
            return rc;
        }
        s->ops_seen = 0;
    }
    *out = s;
    return LOCK_OK;
}

/* Gives a slot back. Its handle is kept: the library reconnects it by itself. */
static void lease_give(lease_slot *s) {
    lease_set *l = s->l;
    s->hold = NULL;
    pthread_mutex_lock(&l->pool_mu);
    s->next = l->free_slots;
    l->free_slots = s;
    pthread_mutex_unlock(&l->pool_mu);
}

int lock_lease_acquire(void *set, const char *name, void **hold) {
    lease_set *l = set;
    char err[512];
    lease_slot *s;
    *hold = NULL;
    /* After the cancel, not even a connection is made: the answer is at once. */
    if (atomic_load(&l->cancelled)) return LOCK_ERR_CANCELLED;
    int rc = lease_take(l, &s, err, sizeof(err));
    if (rc != LOCK_OK) return rc;
    rc = l->ops->acquire(s->handle, name, l->cfg.timeout_ms, &s->hold);
    lease_count_ops(s, true);
    if (rc == LOCK_OK) {
        atomic_fetch_add(&l->acquired, 1);
        if (l->renewer_started) {
            pthread_mutex_lock(&s->renew_mu);
            s->renewing = s->hold;
            s->renew_due_us = now_us() + (int64_t)l->cfg.lease_ms * 1000 / 3;
            pthread_mutex_unlock(&s->renew_mu);
        }
        *hold = s;
        return LOCK_OK;
    }
    if (rc == LOCK_ERR_TIMEOUT) {
        atomic_fetch_add(&l->timeouts, 1);
    } else if (rc != LOCK_ERR_CANCELLED) {
        atomic_fetch_add(&l->unavailable, 1);
        lease_log(l, "acquire", l->ops->errstr(s->handle));
    }
    lease_give(s);
    return rc;
}

int lock_lease_check(const void *hold) {
    const lease_slot *s = hold;
    return s->l->ops->check(s->hold);
}

int64_t lock_lease_token(const void *hold) {
    const lease_slot *s = hold;
    return s->l->ops->token(s->hold);
}

int lock_lease_release(void *hold) {
    lease_slot *s = hold;
    lease_set *l = s->l;
    /* Withdrawn from the renewer first; this waits for a renewal in flight. */
    if (l->renewer_started) {
        pthread_mutex_lock(&s->renew_mu);
        s->renewing = NULL;
        pthread_mutex_unlock(&s->renew_mu);
    }
    int rc = l->ops->release(s->hold);
    lease_count_ops(s, true);
    if (rc == LOCK_LOST) {
        atomic_fetch_add(&l->lost, 1);
    } else if (rc != LOCK_OK) {
        /* The lock then frees itself when its lease runs out. */
        atomic_fetch_add(&l->unavailable, 1);
        lease_log(l, "release", l->ops->errstr(s->handle));
    }
    lease_give(s);
    return rc;
}

int lock_lease_ping(void *set, char *err, size_t errcap) {
    lease_set *l = set;
    lease_slot *s;
    if (errcap) err[0] = '\0';
    if (!l->ops->ping) return LOCK_OK;
    int rc = lease_take(l, &s, err, errcap);
    if (rc != LOCK_OK) return rc;
    rc = l->ops->ping(s->handle);
    if (rc != LOCK_OK) snprintf(err, errcap, "%s", l->ops->errstr(s->handle));
    lease_count_ops(s, false);
    lease_give(s);
    return rc;
}

/* A view borrows a pooled handle as a ping does; its reads are no deduction's, so they
 * are not counted. */
int lock_lease_view(void *set, const char *name, lock_view *out) {
    lease_set *l = set;
    lease_slot *s;
    char err[256];
    if (!l->ops->view) return LOCK_ERR_ARGS;
    int rc = lease_take(l, &s, err, sizeof(err));
    if (rc != LOCK_OK) return rc;
    out->lease = true;
    rc = l->ops->view(s->handle, name, out);
    lease_count_ops(s, false);
    lease_give(s);
    /* A lease has no session to tell whose it is: the holder this process's owner names
     * (lock_config.owner, stockd's instance) is ours. */
    for (size_t i = 0; rc == LOCK_OK && i < out->n; i++)
        out->e[i].ours =
            l->cfg.owner && l->cfg.owner[0] && strcmp(out->e[i].owner, l->cfg.owner) == 0;
    return rc;
}

void lock__lease_view_holder(lock_view *out, const char *name, int64_t token, int64_t left_ms,
                             const char *owner) {
    out->lease = true;
    out->total = out->n = token ? 1 : 0;
    out->lease_ms = token ? left_ms : -1;
    if (!token) return;
    lock_view_entry *e = &out->e[0];
    snprintf(e->node, sizeof(e->node), "%s", name);
    if (owner) snprintf(e->owner, sizeof(e->owner), "%s", owner);
    e->seq = -1;
    e->token = token;
    e->watches = -1;
}

const char *lock__lease_strerror(int code, const char *connection, const char *server) {
    if (code == LOCK_ERR_CONNECTION) return connection;
    if (code == LOCK_ERR_SERVER) return server;
    return lock_strerror(code);
}

bool lock__lease_name_valid(const char *name, size_t max) {
    size_t n = strlen(name);
    if (n == 0 || n > max) return false;
    for (const char *p = name; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

void lock_lease_stats(void *set, lock_stats *out) {
    lease_set *l = set;
    out->acquired = atomic_load(&l->acquired);
    out->timeouts = atomic_load(&l->timeouts);
    out->lost = atomic_load(&l->lost);
    out->unavailable = atomic_load(&l->unavailable);
    out->ops = atomic_load(&l->n_ops);
    out->renewals = atomic_load(&l->renewals);
}

/* ---------------------------------------------------------------- the watchdog */

/* One pass over the slots: renews every hold that is due. *handle is the renewer's own,
 * made here the first time (and again after a failed open). */
static void renew_due(lease_set *l, void **handle, uint64_t *ops_seen) {
    int64_t third_us = (int64_t)l->cfg.lease_ms * 1000 / 3;
    for (unsigned i = 0; i < l->cfg.holders; i++) {
        lease_slot *s = &l->slots[i];
        pthread_mutex_lock(&s->renew_mu);
        if (!s->renewing || now_us() < s->renew_due_us) {
            pthread_mutex_unlock(&s->renew_mu);
            continue;
        }
        if (!*handle) {
            char err[512];
            if (l->ops->open(&l->cfg, &l->cancelled, handle, err, sizeof(err)) != LOCK_OK) {
                *handle = NULL;
                pthread_mutex_unlock(&s->renew_mu);
                lease_log(l, "renewer connect", err);
                return; /* the next tick tries again, while the leases last */
            }
            *ops_seen = 0;
        }
        int64_t sent = now_us();
        int rc = l->ops->renew(*handle, s->renewing);
        if (rc == LOCK_OK) {
            s->renew_due_us = sent + third_us;
            atomic_fetch_add(&l->renewals, 1);
        } else if (rc == LOCK_LOST) {
            /* Gone for good: its holder's check or the fence refuses its write. */
            s->renewing = NULL;
        }
        pthread_mutex_unlock(&s->renew_mu);
        if (rc != LOCK_OK) lease_log(l, "renewal", l->ops->errstr(*handle));
        /* A service that cannot be reached would cost every other slot its own
         * timeout, with their releases waiting: the next tick tries again. */
        if (rc != LOCK_OK && rc != LOCK_LOST) break;
    }
    if (*handle) {
        uint64_t now = l->ops->ops(*handle);
        atomic_fetch_add(&l->n_ops, now - *ops_seen);
        *ops_seen = now;
    }
}

static void *renewer_main(void *arg) {
    lease_set *l = arg;
    void *handle = NULL;
    uint64_t ops_seen = 0;
    /* A twelfth of the lease: a hold is renewed between a third and about five
     * twelfths of its lease after the last renewal, well before the safety margin. */
    int64_t tick_us = (int64_t)l->cfg.lease_ms * 1000 / 12;
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
    if (handle) l->ops->close(handle);
    return NULL;
}

/* Starts the renewer. 0, or -1 (then there is no renewer). */
static int renewer_start(lease_set *l) {
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

static void renewer_stop(lease_set *l) {
    if (!l->renewer_started) return;
    pthread_mutex_lock(&l->renew_stop_mu);
    l->renew_stop = true;
    pthread_cond_signal(&l->renew_stop_cv);
    pthread_mutex_unlock(&l->renew_stop_mu);
    pthread_join(l->renewer, NULL);
    pthread_cond_destroy(&l->renew_stop_cv);
    l->renewer_started = false;
}

/* ---------------------------------------------------------------- the set */

int lock_lease_set_new(const lock_kind *k, const lock_config *cfg, void **set, char *err,
                       size_t errcap) {
    *set = NULL;
    if (!k->lease || cfg->holders == 0 || cfg->lease_ms <= 0) {
        snprintf(err, errcap, "%s: no holders or no lease", k->name);
        return LOCK_ERR_ARGS;
    }
    lease_set *l = calloc(1, sizeof(*l));
    if (!l) return LOCK_ERR_NOMEM;
    l->kind = k;
    l->ops = k->lease;
    l->cfg = *cfg;
    pthread_mutex_init(&l->pool_mu, NULL);
    pthread_mutex_init(&l->renew_stop_mu, NULL);
    l->slots = calloc(cfg->holders, sizeof(*l->slots));
    if (!l->slots) {
        lock_lease_set_free(l);
        return LOCK_ERR_NOMEM;
    }
    for (unsigned i = 0; i < cfg->holders; i++) {
        l->slots[i].l = l;
        l->slots[i].next = l->free_slots;
        l->free_slots = &l->slots[i];
        pthread_mutex_init(&l->slots[i].renew_mu, NULL);
    }
    if (cfg->renew && renewer_start(l) != 0) {
        snprintf(err, errcap, "%s: cannot start the lease renewer thread", k->name);
        lock_lease_set_free(l);
        return LOCK_ERR_NOMEM;
    }
    *set = l;
    return LOCK_OK;
}

void lock_lease_set_cancel(void *set) {
    lease_set *l = set;
    atomic_store(&l->cancelled, 1);
}

void lock_lease_set_free(void *set) {
    lease_set *l = set;
    if (!l) return;
    /* The holders are gone: every slot is back, and any lock still held (none, after
     * an orderly shutdown) frees itself when its lease runs out. */
    renewer_stop(l);
    if (l->slots) {
        for (unsigned i = 0; i < l->cfg.holders; i++) {
            if (l->slots[i].handle) l->ops->close(l->slots[i].handle);
            pthread_mutex_destroy(&l->slots[i].renew_mu);
        }
        free(l->slots);
    }
    pthread_mutex_destroy(&l->renew_stop_mu);
    pthread_mutex_destroy(&l->pool_mu);
    free(l);
}
