/* zklock_cache.c: the lock cache of zklock.h (zklock_release_cached). A fair hold
 * whose acquisition did not wait may be kept after its last release, owned by the
 * session instead of a thread, so that the next zklock_acquire of the same lock in
 * the process takes it over without a ZooKeeper operation (the hand-over). A
 * children watch on the lock's parent, armed by the acquisition's first listing (or
 * at release), marks the hold contended as soon as anybody else queues; a contended
 * hold, one past its time limit (cache_until), one whose session is lost or
 * cancelled, is let go by the maintenance thread of zklock_conn.c through
 * zklock__cache_sweep_locked. The lock recipes are in zklock.c. The cache's state
 * is guarded by s->mu, never held across a ZooKeeper call (zklock_int.h). */
#include <stdint.h>
#include <string.h>

#include "zklock_int.h"

/* ---------------------------------------------------------------- state */

/* Has the process surely run since the session was last known alive? Our view of the
 * connection is only as fresh as the client's I/O thread: after a pause past the
 * session timeout, it still says connected until that thread runs and learns of the
 * expiry, and a cached hold handed out meanwhile would run a batch under a dead token.
 * So a gap in the maintenance thread's rounds longer than zklock__pause_limit_ms_locked
 * counts as such a pause: a hold cached across it is let go, never handed out. The gap
 * is measured on CLOCK_BOOTTIME, so that a suspend of the machine counts too (the
 * session runs out on the server meanwhile; CLOCK_MONOTONIC stops). mu held. */
static int zklock_cache_fresh_locked(const zklock_session *s) {
    return zklock__boot_ms() - s->maint_boot_ms < zklock__pause_limit_ms_locked(s);
}

/* May a cached hold be handed to a thread now? Only while nobody else queued for the
 * lock since we cached it (the watch has not fired), within its time, while the node is
 * surely ours (connected, same session) and the process cannot have been paused past
 * the session meanwhile. mu held. */
static int zklock_cache_usable_locked(const zklock_hold *h) {
    return !h->contended && !h->s->cancelled && zklock__now_ms() < h->cache_until &&
           zklock_cache_fresh_locked(h->s) && zklock__hold_state_locked(h) == LOCK_OK;
}

/* Counts why a cached hold is let go (mu held). */
static void zklock_cache_count_let_go_locked(const zklock_hold *h) {
    zklock_stats *st = &h->s->stats;
    if (h->contended)
        st->cache_let_go_contender++;
    else if (!h->s->cancelled && zklock_cache_fresh_locked(h->s) &&
             zklock__hold_state_locked(h) == LOCK_OK)
        st->cache_let_go_timeout++;
    else
        st->cache_let_go_other++;
}

/* The watcher of the children watch on a lock's parent (the context is the watch id):
 * marks the hold that armed it contended and wakes the maintenance thread, or notes
 * the firing for an acquisition that has not made its hold yet. */
void zklock__cache_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    uint64_t id;
    (void)state;
    (void)path;
    zklock_session *s = zklock__watch_event_lock(zh, type, ctx, &id);
    if (!s) return;
    s->stats.cache_callbacks++;
    for (zklock_hold *h = s->holds; h; h = h->next) {
        if (h->cache_watch != id) continue;
        /* Any change of the children means a contender came (or went): the watch
         * is spent, and the hold is let go as soon as no thread has it. */
        h->cache_watch = 0;
        h->contended = 1;
        pthread_cond_signal(&s->maint_cond);
        break;
    }
    /* Set by an acquisition's first listing that has not made its hold yet. */
    for (zklock_waiter *w = s->waiters; w; w = w->next)
        if (w->cache_watch == id) w->cache_fired = 1;
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------- acquire */

int zklock__cache_list_watched(zklock_conn *c, zklock_waiter *w, const char *parent,
                               struct String_vector *kids) {
    /* The first listing sets the children watch a cached hold needs (config.cache):
     * caching then costs no operation of its own. If we must wait, it fires at the
     * next change of the children and finds no hold: nothing is left behind. */
    zklock_session *s = c->s;
    pthread_mutex_lock(&s->mu);
    uint64_t id = zklock__watch_id_locked(s);
    w->cache_watch = id;
    w->cache_fired = 0;
    pthread_mutex_unlock(&s->mu);
    int rc = zoo_wget_children(c->zh, parent, zklock__cache_watcher, (void *)(uintptr_t)id, kids);
    if (rc != ZOK) {
        pthread_mutex_lock(&s->mu);
        w->cache_watch = 0; /* a failed call registers no watch */
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

zklock_hold *zklock__cache_take_locked(zklock_session *s, const char *name, zklock_kind kind,
                                       zklock_hold **stale) {
    *stale = NULL;
    for (zklock_hold **p = &s->holds; *p; p = &(*p)->next) {
        zklock_hold *h = *p;
        if (!h->cached || h->kind != kind || strcmp(h->name, name) != 0) continue;
        if (zklock_cache_usable_locked(h)) {
            /* The hand-over: the session gives the cached hold to this thread, as if
             * it had just been acquired, under the same node and token. */
            h->cached = 0;
            h->owner = pthread_self();
            h->count = 1;
            s->stats.cache_hits++;
            return h;
        }
        /* Contended, out of time, or not surely ours: let it go, then queue anew. */
        *p = h->next;
        zklock_cache_count_let_go_locked(h);
        *stale = h;
        return NULL;
    }
    return NULL;
}

/* ---------------------------------------------------------------- let go */

int64_t zklock__cache_sweep_locked(zklock_session *s) {
    for (;;) {
        zklock_hold *go = NULL;
        int64_t next = -1;
        for (zklock_hold **p = &s->holds; *p; p = &(*p)->next) {
            zklock_hold *h = *p;
            if (!h->cached) continue;
            /* A SUSPECT hold waits, within its time, for its connection to return. */
            int suspect_wait = zklock__hold_state_locked(h) == LOCK_SUSPECT && !h->contended &&
                               !s->cancelled && zklock__now_ms() < h->cache_until &&
                               zklock_cache_fresh_locked(s);
            if (!zklock_cache_usable_locked(h) && !suspect_wait) {
                *p = h->next;
                go = h;
                break;
            }
            if (next < 0 || h->cache_until < next) next = h->cache_until;
        }
        if (!go) return next;
        zklock_cache_count_let_go_locked(go);
        pthread_mutex_unlock(&s->mu);
        (void)zklock__hold_let_go(go);
        pthread_mutex_lock(&s->mu);
    }
}

/* ---------------------------------------------------------------- release */

int zklock_release_cached(zklock_hold *h, int max_ms) {
    if (!h) return LOCK_ERR_ARGS;
    if (!pthread_equal(h->owner, pthread_self())) return LOCK_ERR_NOT_OWNER;
    zklock_session *s = h->s;
    /* Not cached: off; the herd lock; an inner level of a reentrant hold; a lock that
     * had to queue behind another contender (contention just seen is likely to go on,
     * and the watch would cost an operation only to fire at once). */
    if (max_ms <= 0 || h->kind != ZKLOCK_FAIR || h->count > 1 || h->waited)
        return zklock_release(h);

    /* Arm the children watch once per acquisition, while the hold is still this
     * thread's (so nothing can free it meanwhile). A cache hit keeps it armed. */
    pthread_mutex_lock(&s->mu);
    zklock_conn *c = NULL;
    uint64_t id = 0;
    int ok = !h->contended && !s->cancelled && zklock_cache_fresh_locked(s) &&
             zklock__hold_state_locked(h) == LOCK_OK;
    if (ok && !h->cache_watch) {
        ok = zklock__conn_get_locked(s, NULL, 0, &c) == LOCK_OK;
        if (ok) id = h->cache_watch = zklock__watch_id_locked(s);
    }
    pthread_mutex_unlock(&s->mu);
    if (c) {
        struct String_vector kids = {0, NULL};
        zklock__count_op(s, ZKLOCK_OP_CHILDREN);
        int zrc = zoo_wget_children(c->zh, h->parent, zklock__cache_watcher, (void *)(uintptr_t)id,
                                    &kids);
        zklock__conn_put(s, c);
        const char *mine = strrchr(h->path, '/') + 1;
        int others = 0;
        for (int i = 0; zrc == ZOK && i < kids.count; i++)
            if (zklock__child_seq(kids.data[i]) >= 0 && strcmp(kids.data[i], mine) != 0) others++;
        if (zrc == ZOK) deallocate_String_vector(&kids);
        pthread_mutex_lock(&s->mu);
        if (zrc != ZOK) {
            ok = 0;
            if (h->cache_watch == id) h->cache_watch = 0; /* a failed call registers none */
        } else if (others) {
            h->contended = 1; /* somebody queued already */
        }
        pthread_mutex_unlock(&s->mu);
    }

    pthread_mutex_lock(&s->mu);
    if (!ok || h->contended || s->cancelled || zklock__hold_state_locked(h) != LOCK_OK) {
        pthread_mutex_unlock(&s->mu);
        return zklock_release(h);
    }
    /* The hand-over to the session: from here on the hold is not this thread's. */
    h->count = 0;
    h->cached = 1;
    h->cache_until = zklock__now_ms() + max_ms;
    s->stats.cache_parks++;
    pthread_cond_signal(&s->maint_cond); /* its next wake-up may now be sooner */
    pthread_mutex_unlock(&s->mu);
    return LOCK_OK;
}
