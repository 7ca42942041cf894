/* lock.c: the calls of lock.h that every kind shares: a set and a hold dispatch to
 * their kind's table, and the code names and lock_parse_hostport (whose grammar is
 * hostport.h's) that need no kind. Pure (no lock service of its own); the kinds are in
 * their own files and the registry in lock_kinds.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostport.h"
#include "lock.h"

struct lock_set {
    const lock_kind *kind;
    void *impl;
};

int lock_set_new(const lock_kind *k, const lock_config *cfg, lock_set **out, char *err,
                 size_t errcap) {
    if (errcap) err[0] = '\0';
    *out = NULL;
    if (!k || !cfg) return LOCK_ERR_ARGS;
    lock_set *s = calloc(1, sizeof(*s));
    if (!s) return LOCK_ERR_NOMEM;
    s->kind = k;
    int rc = k->set_new(k, cfg, &s->impl, err, errcap);
    if (rc != LOCK_OK) {
        free(s);
        return rc;
    }
    *out = s;
    return LOCK_OK;
}

void lock_set_cancel(lock_set *s) {
    if (s && s->kind->set_cancel) s->kind->set_cancel(s->impl);
}

void lock_set_free(lock_set *s) {
    if (!s) return;
    if (s->kind->set_free) s->kind->set_free(s->impl);
    free(s);
}

const lock_kind *lock_set_kind(const lock_set *s) {
    return s ? s->kind : NULL;
}

int lock_ping(lock_set *s, char *err, size_t errcap) {
    if (errcap) err[0] = '\0';
    if (!s || !s->kind->ping) return LOCK_OK;
    return s->kind->ping(s->impl, err, errcap);
}

void lock_get_stats(lock_set *s, lock_stats *out) {
    memset(out, 0, sizeof(*out));
    if (s && s->kind->stats) s->kind->stats(s->impl, out);
}

const char *lock_failure_message(const lock_set *s, int rc) {
    /* LOST is no outage: the service answered, and the lock was no longer ours. */
    if (!s || rc == LOCK_OK || rc == LOCK_ERR_TIMEOUT || rc == LOCK_ERR_CANCELLED ||
        rc == LOCK_LOST)
        return NULL;
    /* No outage either: the service works, and this one lock needs an operator. */
    if (rc == LOCK_ERR_SEQ_LIMIT)
        return "the product's ZooKeeper lock parent has used up its sequence numbers; an "
               "operator must recreate it (docs/zookeeper-lock.md); nothing was deducted";
    return s->kind->down_message;
}

int lock_acquire(lock_set *s, const char *name, lock_hold *out) {
    out->kind = s->kind;
    out->impl = NULL;
    return s->kind->acquire(s->impl, name, &out->impl);
}

int lock_try_acquire(lock_set *s, const char *name, lock_hold *out) {
    out->kind = s->kind;
    out->impl = NULL;
    if (!s->kind->try_acquire) return LOCK_ERR_ARGS;
    return s->kind->try_acquire(s->impl, name, &out->impl);
}

int lock_try_acquire_many(lock_set *s, const char *const *names, size_t n, lock_hold *out,
                          int *rcs) {
    void *impl[LOCK_MANY_MAX];
    if (!s || !names || !out || !rcs || n > LOCK_MANY_MAX) return LOCK_ERR_ARGS;
    for (size_t i = 0; i < n; i++) {
        out[i] = (lock_hold){.kind = s->kind};
        rcs[i] = LOCK_ERR_ARGS;
    }
    if (!s->kind->try_acquire) return LOCK_ERR_ARGS;
    if (!s->kind->try_acquire_many) {
        int held = 0;
        for (size_t i = 0; i < n; i++)
            held += (rcs[i] = lock_try_acquire(s, names[i], &out[i])) == LOCK_OK;
        return held;
    }
    int held = s->kind->try_acquire_many(s->impl, names, n, impl, rcs);
    for (size_t i = 0; held >= 0 && i < n; i++)
        out[i].impl = impl[i];
    return held;
}

int lock_release_many(lock_hold *holds, size_t n, int max_ms, int *rcs) {
    void *impl[LOCK_MANY_MAX];
    int rc[LOCK_MANY_MAX];
    if (!holds || n > LOCK_MANY_MAX) return LOCK_ERR_ARGS;
    const lock_kind *k = n ? holds[0].kind : NULL;
    for (size_t i = 0; i < n; i++) {
        rc[i] = LOCK_OK;
        impl[i] = holds[i].impl;
        if (holds[i].kind != k) return LOCK_ERR_ARGS;
    }
    if (k && k->release_many) {
        k->release_many(impl, n, max_ms, rc);
        for (size_t i = 0; i < n; i++)
            if (impl[i] && rc[i] != LOCK_ERR_NOT_OWNER) holds[i].impl = NULL;
    } else {
        for (size_t i = 0; i < n; i++)
            if (holds[i].impl) rc[i] = lock_release_cached(&holds[i], max_ms);
    }
    int first = LOCK_OK;
    for (size_t i = 0; i < n; i++) {
        if (rcs) rcs[i] = rc[i];
        if (first == LOCK_OK) first = rc[i];
    }
    return first;
}

bool lock_can_try(const lock_set *s) {
    return s->kind->try_acquire != NULL;
}

int lock_check(const lock_hold *h) {
    return h->kind->check(h->impl);
}

int64_t lock_token(const lock_hold *h) {
    return h->kind->token(h->impl);
}

int lock_release(lock_hold *h) {
    int rc = h->kind->release(h->impl);
    if (rc != LOCK_ERR_NOT_OWNER) h->impl = NULL;
    return rc;
}

int lock_release_cached(lock_hold *h, int max_ms) {
    if (max_ms <= 0 || !h->kind->release_cached) return lock_release(h);
    int rc = h->kind->release_cached(h->impl, max_ms);
    if (rc != LOCK_ERR_NOT_OWNER) h->impl = NULL;
    return rc;
}

const char *lock_strerror(int code) {
    switch (code) {
    case LOCK_OK:
        return "ok";
    case LOCK_ERR_ARGS:
        return "bad argument";
    case LOCK_ERR_NOMEM:
        return "out of memory";
    case LOCK_ERR_TIMEOUT:
        return "lock not acquired before the deadline";
    case LOCK_ERR_CONNECTION:
        return "no usable connection to the lock service";
    case LOCK_ERR_CANCELLED:
        return "cancelled";
    case LOCK_ERR_SERVER:
        return "unexpected error from the lock service";
    case LOCK_ERR_NOT_OWNER:
        return "the hold belongs to another thread";
    case LOCK_SUSPECT:
        return "connection lost; the lock may have passed on";
    case LOCK_LOST:
        return "lock lost";
    case LOCK_ERR_SEQ_LIMIT:
        return "the lock's ZooKeeper parent has used up its sequence numbers (2^31-1), which no "
               "longer order its queue, so the lock is refused; an operator must delete the "
               "parent once no contender is left in it, and it is made anew "
               "(docs/zookeeper-lock.md)";
    default:
        return "unknown lock code";
    }
}

int lock_parse_hostport(const char *addr, char *host, size_t hostcap, int *port) {
    hostport hp;
    if (!addr || !host || !port || hostcap == 0) return LOCK_ERR_ARGS;
    if (hostport_parse(addr, strlen(addr), 0, &hp) != 0 || strlen(hp.host) >= hostcap)
        return LOCK_ERR_ARGS;
    memcpy(host, hp.host, strlen(hp.host) + 1);
    *port = hp.port;
    return LOCK_OK;
}

bool lock_can_view(const lock_set *s) {
    return s && s->kind->view && (!s->kind->lease || s->kind->lease->view);
}

int lock_view_read(lock_set *s, const char *name, lock_view *out) {
    memset(out, 0, sizeof(*out));
    out->lease_ms = -1;
    if (!lock_can_view(s) || !name) return LOCK_ERR_ARGS;
    return s->kind->view(s->impl, name, out);
}
