/* zklock_many.c: many fair locks tried, and many holds released, in one round trip
 * (zklock_try_many, zklock_release_many in zklock.h), for a leader that batches the
 * deductions of several products (issue 19, batches across products).
 *
 * ZooKeeper has no create-with-stat inside a multi, and the fencing token is the
 * node's czxid, so the tries do not use zoo_multi: they send asynchronous calls,
 * all in flight at once on the one session. The server answers a session's requests
 * in the order they were sent, so each name's listing, sent right behind its create,
 * sees that create; the k creates and k listings then cost one round trip together,
 * not 2k. The completions run on the library's completion thread: they only record
 * what came back under the batch's own mutex and signal; everything else (deciding,
 * making holds, counting) happens on the calling thread afterwards.
 *
 * What each name can end as is what one zklock_acquire(..., timeout 0) ends as; the
 * paths this file does not take itself (the herd lock, a missing root, a hold that
 * must be swept by GUID) are handed to the single-lock functions of zklock.c and
 * zklock_cache.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zklock_int.h"

/* Outstanding asynchronous calls of one wave. */
typedef struct zklock_wave {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int pending;
} zklock_wave;

/* One name of a zklock_try_many call that needs operations. */
typedef struct zklock_try {
    zklock_wave *wave;
    int idx; /* in names[] */
    char guid[ZKLOCK_GUID_LEN + 1];
    char *parent;
    char *path; /* our node once created */
    size_t path_cap;
    zklock_hold *h;          /* made before anything is sent, so that winning cannot fail */
    zklock_waiter w;         /* carries the cache's children watch until the hold has it */
    int create_rc;           /* ZOK, a zk code; set by the completion (under wave->mu) */
    int list_rc;             /* ditto, of the listing */
    int del_rc;              /* ditto, of the delete of a busy node */
    int parent_rc;           /* ditto, of the parent's create (wave 1b only) */
    int64_t token;           /* czxid of our node */
    int found, below, above; /* the listing: our node, lock nodes below and above it */
    int at_limit;            /* ... and our node's sequence is at ZooKeeper's limit */
} zklock_try;

static void zklock_wave_init(zklock_wave *v) {
    pthread_mutex_init(&v->mu, NULL);
    pthread_cond_init(&v->cond, NULL);
    v->pending = 0;
}

static void zklock_wave_destroy(zklock_wave *v) {
    pthread_cond_destroy(&v->cond);
    pthread_mutex_destroy(&v->mu);
}

static void zklock_wave_add(zklock_wave *v) {
    pthread_mutex_lock(&v->mu);
    v->pending++;
    pthread_mutex_unlock(&v->mu);
}

/* One call of the wave ended: rc goes to *slot. Also for a call the library refused
 * (then no completion runs). */
static void zklock_wave_done_locked(zklock_wave *v, int *slot, int rc) {
    *slot = rc;
    if (--v->pending == 0) pthread_cond_signal(&v->cond);
}

static void zklock_wave_done(zklock_wave *v, int *slot, int rc) {
    pthread_mutex_lock(&v->mu);
    zklock_wave_done_locked(v, slot, rc);
    pthread_mutex_unlock(&v->mu);
}

/* Waits for every completion. The library calls each one, with ZCONNECTIONLOSS or
 * ZCLOSING when the connection or the handle goes, so this ends. */
static void zklock_wave_wait(zklock_wave *v) {
    pthread_mutex_lock(&v->mu);
    while (v->pending > 0)
        pthread_cond_wait(&v->cond, &v->mu);
    pthread_mutex_unlock(&v->mu);
}

/* Counts a wave: its operations, one round trip, and the names it tried. */
static void zklock_count_wave(zklock_session *s, int creates, int lists, int deletes, int tries) {
    pthread_mutex_lock(&s->mu);
    s->stats.op_create += (uint64_t)creates;
    s->stats.op_get_children += (uint64_t)lists;
    s->stats.op_delete += (uint64_t)deletes;
    s->stats.batched_tries += (uint64_t)tries;
    s->stats.round_trips++;
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------- completions */

static void zklock_created(int rc, const char *path, const struct Stat *st, const void *data) {
    zklock_try *t = (zklock_try *)data;
    pthread_mutex_lock(&t->wave->mu);
    if (rc == ZOK) {
        snprintf(t->path, t->path_cap, "%s", path);
        t->token = st->czxid;
    }
    zklock_wave_done_locked(t->wave, &t->create_rc, rc);
    pthread_mutex_unlock(&t->wave->mu);
}

static void zklock_listed(int rc, const struct String_vector *kids, const void *data) {
    zklock_try *t = (zklock_try *)data;
    /* The create's completion ran before this one (the same session's replies come
     * in order), so path is known if it succeeded. */
    pthread_mutex_lock(&t->wave->mu);
    if (rc == ZOK && t->create_rc == ZOK) {
        const char *mine = strrchr(t->path, '/') + 1;
        if (zklock__contender_seq(mine)) {
            zklock_decision d;
            zklock__decide(kids, mine, NULL, &d);
            t->found = d.found;
            t->below = d.below;
            t->above = d.above;
            t->at_limit = d.at_limit;
        }
    }
    zklock_wave_done_locked(t->wave, &t->list_rc, rc);
    pthread_mutex_unlock(&t->wave->mu);
}

static void zklock_parent_made(int rc, const char *path, const void *data) {
    zklock_try *t = (zklock_try *)data;
    (void)path;
    zklock_wave_done(t->wave, &t->parent_rc, rc);
}

static void zklock_deleted(int rc, const void *data) {
    zklock_try *t = (zklock_try *)data;
    zklock_wave_done(t->wave, &t->del_rc, rc);
}

/* ---------------------------------------------------------------- try */

/* The part that needs no operation (mu not held): cache hits and reentries. Returns
 * 1 if names[i] was settled so (holds[i], rcs[i] set), 0 if it needs operations. */
static int zklock_try_local(zklock_session *s, const char *name, zklock_hold **out, int *rc) {
    pthread_t self = pthread_self();
    zklock_hold *stale = NULL;
    pthread_mutex_lock(&s->mu);
    zklock_hold *cached = zklock__cache_take_locked(s, name, ZKLOCK_FAIR, &stale);
    pthread_mutex_unlock(&s->mu);
    if (cached) {
        *out = cached;
        *rc = LOCK_OK;
        return 1;
    }
    /* A cached hold that may not be handed out (contended, out of time) goes first, as
     * in zklock_acquire: our new node must not queue behind our own old one. */
    if (stale) (void)zklock__hold_let_go(stale);
    pthread_mutex_lock(&s->mu);
    for (zklock_hold *h = s->holds; h; h = h->next) {
        if (h->cached || !pthread_equal(h->owner, self) || h->kind != ZKLOCK_FAIR ||
            strcmp(h->name, name) != 0)
            continue;
        *rc = zklock__hold_state_locked(h) == LOCK_LOST ? LOCK_LOST : LOCK_OK;
        if (*rc == LOCK_OK) {
            h->count++;
            *out = h;
        }
        pthread_mutex_unlock(&s->mu);
        return 1;
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* Makes what t needs before anything is sent. LOCK_OK or LOCK_ERR_NOMEM/ZK. */
static int zklock_try_prepare(zklock_session *s, zklock_try *t, const char *name) {
    t->parent = zklock__join(s->root, name, "");
    t->path_cap = strlen(s->root) + strlen(name) + ZKLOCK_GUID_LEN + 32;
    t->path = calloc(1, t->path_cap);
    t->h = calloc(1, sizeof(*t->h));
    if (!t->parent || !t->path || !t->h || !(t->h->name = strdup(name))) return LOCK_ERR_NOMEM;
    return zklock__new_guid(t->guid) == 0 ? LOCK_OK : LOCK_ERR_SERVER;
}

/* Sends t's create and, right behind it, its listing (with the cache's children watch
 * when the session caches). With_parent: the container parent's create goes first (it
 * was reaped: the server reaps an empty one), ZNODEEXISTS being as good. */
static void zklock_try_send(zklock_session *s, zklock_conn *c, zklock_try *t, int with_parent) {
    char prefix[ZKLOCK_GUID_LEN + 8];
    snprintf(prefix, sizeof(prefix), "%s-lock-", t->guid);
    char *want = zklock__join(t->parent, prefix, "");
    t->create_rc = t->list_rc = t->parent_rc = ZOK;
    t->found = t->below = t->above = 0;
    if (with_parent) {
        zklock_wave_add(t->wave);
        int prc = zoo_acreate(c->zh, t->parent, NULL, -1, s->parent_acl, ZOO_CONTAINER,
                              zklock_parent_made, t);
        if (prc != ZOK) zklock_wave_done(t->wave, &t->parent_rc, prc);
    }
    zklock_wave_add(t->wave);
    int rc = want ? zoo_acreate2(c->zh, want, s->owner, (int)strlen(s->owner), s->acl,
                                 ZOO_EPHEMERAL_SEQUENTIAL, zklock_created, t)
                  : ZSYSTEMERROR;
    free(want);
    if (rc != ZOK) zklock_wave_done(t->wave, &t->create_rc, rc);

    uint64_t id = 0;
    if (s->cache) {
        pthread_mutex_lock(&s->mu);
        id = t->w.cache_watch = zklock__watch_id_locked(s);
        t->w.cache_fired = 0;
        pthread_mutex_unlock(&s->mu);
    }
    zklock_wave_add(t->wave);
    rc = id ? zoo_awget_children(c->zh, t->parent, zklock__cache_watcher, (void *)(uintptr_t)id,
                                 zklock_listed, t)
            : zoo_aget_children(c->zh, t->parent, 0, zklock_listed, t);
    if (rc != ZOK) zklock_wave_done(t->wave, &t->list_rc, rc);
}

/* The outcome of t's wave: LOCK_OK (held), LOCK_ERR_TIMEOUT (busy), ZKLOCK_MANY_ALONE
 * (the parent could not be made: try alone), or an error. *del says whether our node must be
 * deleted, *sweep whether a node of ours may exist that only its GUID can find. */
#define ZKLOCK_MANY_ALONE 1
static int zklock_try_outcome(const zklock_try *t, int *del, int *sweep) {
    *del = *sweep = 0;
    if (t->create_rc == ZNONODE) return ZKLOCK_MANY_ALONE;
    if (t->create_rc != ZOK) {
        /* A lost reply: the create may yet be applied. Given up, swept by GUID. */
        *sweep = zklock__zk_retryable(t->create_rc);
        return *sweep ? LOCK_ERR_CONNECTION : LOCK_ERR_SERVER;
    }
    if (!zklock__contender_seq(strrchr(t->path, '/') + 1)) {
        *sweep = 1; /* a name we cannot order (zklock.c says why) */
        return LOCK_ERR_SERVER;
    }
    *del = 1;
    if (t->list_rc != ZOK)
        return zklock__zk_retryable(t->list_rc) ? LOCK_ERR_CONNECTION : LOCK_ERR_SERVER;
    if (!t->found) return LOCK_ERR_TIMEOUT; /* deleted under us already: not held */
    if (t->at_limit) return LOCK_ERR_SEQ_LIMIT;
    if (t->below) return LOCK_ERR_TIMEOUT; /* busy: never wait, give the place up */
    *del = 0;
    return LOCK_OK;
}

/* Turns t's won node into the calling thread's hold (mu held), as zklock_acquire does. */
static zklock_hold *zklock_try_hold_locked(zklock_session *s, zklock_try *t, uint64_t epoch) {
    zklock_hold *h = t->h;
    t->h = NULL;
    h->s = s;
    h->owner = pthread_self();
    h->kind = ZKLOCK_FAIR;
    h->count = 1;
    h->epoch = epoch;
    h->token = t->token;
    memcpy(h->guid, t->guid, sizeof(h->guid));
    h->parent = t->parent;
    h->path = t->path;
    t->parent = t->path = NULL;
    /* The listing's children watch: the hold's if still armed and nobody is behind us. */
    if (t->w.cache_watch) {
        if (t->w.cache_fired || t->above)
            h->contended = 1;
        else
            h->cache_watch = t->w.cache_watch;
    }
    h->next = s->holds;
    s->holds = h;
    s->stats.acquired++;
    return h;
}

static int zklock_names_ok(const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        if (!names[i] || !zklock__name_valid(names[i])) return 0;
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0) return 0;
    }
    return 1;
}

int zklock_try_many(zklock_session *s, const char *const *names, int n, zklock_kind kind,
                    zklock_hold **holds, int *rcs) {
    if (!holds || !rcs || n < 0 || n > ZKLOCK_MANY_MAX) return LOCK_ERR_ARGS;
    for (int i = 0; i < n; i++) {
        holds[i] = NULL;
        rcs[i] = LOCK_ERR_ARGS;
    }
    if (!s || !names || (kind != ZKLOCK_FAIR && kind != ZKLOCK_HERD) || !zklock_names_ok(names, n))
        return LOCK_ERR_ARGS;
    int held = 0;
    if (kind == ZKLOCK_HERD) {
        for (int i = 0; i < n; i++)
            held += (rcs[i] = zklock_acquire(s, names[i], kind, 0, &holds[i])) == LOCK_OK;
        return held;
    }
    pthread_mutex_lock(&s->mu);
    int cancelled = s->cancelled;
    pthread_mutex_unlock(&s->mu);

    zklock_try ts[ZKLOCK_MANY_MAX];
    zklock_wave wave;
    zklock_wave_init(&wave);
    int nt = 0;
    for (int i = 0; i < n; i++) {
        if (cancelled) {
            rcs[i] = LOCK_ERR_CANCELLED;
            continue;
        }
        if (zklock_try_local(s, names[i], &holds[i], &rcs[i])) {
            held += rcs[i] == LOCK_OK;
            continue;
        }
        zklock_try *t = &ts[nt];
        memset(t, 0, sizeof(*t));
        t->wave = &wave;
        t->idx = i;
        if ((rcs[i] = zklock_try_prepare(s, t, names[i])) == LOCK_OK) {
            zklock__waiter_add(s, &t->w);
            nt++;
            continue;
        }
        zklock__hold_free(t->h);
        free(t->parent);
        free(t->path);
    }

    zklock_conn *c = NULL;
    int crc = LOCK_OK;
    if (nt) {
        pthread_mutex_lock(&s->mu);
        crc = zklock__conn_get_locked(s, NULL, 0, &c); /* a try does not wait to connect */
        pthread_mutex_unlock(&s->mu);
    }
    if (crc == LOCK_OK && nt) {
        /* Wave 1: every create, each with its listing right behind it. */
        for (int j = 0; j < nt; j++)
            zklock_try_send(s, c, &ts[j], 0);
        zklock_wave_wait(&wave);
        zklock_count_wave(s, nt, nt, 0, nt);
        /* Wave 1b, only for names whose container parent was reaped (or never made):
         * the parent's create, then the same two again, all together. */
        int np = 0;
        for (int j = 0; j < nt; j++) {
            if (ts[j].create_rc != ZNONODE) continue;
            zklock_try_send(s, c, &ts[j], 1);
            np++;
        }
        if (np) {
            zklock_wave_wait(&wave);
            zklock_count_wave(s, 2 * np, np, 0, 0);
        }

        /* Wave 2, only if some are busy: their nodes deleted together. */
        int nd = 0;
        for (int j = 0; j < nt; j++) {
            zklock_try *t = &ts[j];
            int del, sweep;
            rcs[t->idx] = zklock_try_outcome(t, &del, &sweep);
            if (sweep) zklock__cleanup_queue(s, c->epoch, ZKLOCK_FAIR, t->parent, t->guid);
            /* A busy node's delete that cannot be sent or answered is queued below. */
            t->del_rc = ZOK;
            if (!del) continue;
            zklock_wave_add(&wave);
            int rc = zoo_adelete(c->zh, t->path, -1, zklock_deleted, t);
            if (rc != ZOK) zklock_wave_done(&wave, &t->del_rc, rc);
            nd++;
        }
        if (nd) {
            zklock_wave_wait(&wave);
            zklock_count_wave(s, 0, 0, nd, 0);
        }
        uint64_t timeouts = 0, seq_limit = 0;
        pthread_mutex_lock(&s->mu);
        for (int j = 0; j < nt; j++) {
            zklock_try *t = &ts[j];
            timeouts += rcs[t->idx] == LOCK_ERR_TIMEOUT;
            seq_limit += rcs[t->idx] == LOCK_ERR_SEQ_LIMIT;
            if (rcs[t->idx] == LOCK_OK) {
                holds[t->idx] = zklock_try_hold_locked(s, t, c->epoch);
                held++;
            }
        }
        s->stats.timeouts += timeouts;
        s->stats.seq_limit += seq_limit;
        pthread_mutex_unlock(&s->mu);
        for (int j = 0; j < nt; j++) {
            zklock_try *t = &ts[j];
            if (t->del_rc != ZOK && t->del_rc != ZNONODE && zklock__zk_retryable(t->del_rc))
                zklock__cleanup_queue(s, c->epoch, ZKLOCK_FAIR, t->parent, t->guid);
        }
    } else {
        for (int j = 0; j < nt; j++)
            rcs[ts[j].idx] = crc;
    }
    if (c) zklock__conn_put(s, c);

    for (int j = 0; j < nt; j++) {
        zklock_try *t = &ts[j];
        zklock__waiter_remove(s, &t->w);
        zklock__hold_free(t->h);
        free(t->parent);
        free(t->path);
        /* Still no parent (the root is gone): the single try makes the path. */
        if (rcs[t->idx] == ZKLOCK_MANY_ALONE) {
            rcs[t->idx] = zklock_acquire(s, names[t->idx], ZKLOCK_FAIR, 0, &holds[t->idx]);
            held += rcs[t->idx] == LOCK_OK;
        }
    }
    zklock_wave_destroy(&wave);
    return held;
}

/* ---------------------------------------------------------------- release */

/* What zklock_release_many does with one hold. */
enum { ZKLOCK_REL_DONE = 0, ZKLOCK_REL_SINGLE, ZKLOCK_REL_BATCH };

/* Decides for one hold (mu not held): settled here (an inner level, not the owner, a
 * lost hold), left to the single-lock functions (cached, herd, swept by GUID), or
 * unlinked for the batch's delete. */
static int zklock_release_plan(zklock_hold *h, int max_ms, int *rc) {
    zklock_session *s = h->s;
    *rc = LOCK_OK;
    if (!pthread_equal(h->owner, pthread_self())) {
        *rc = LOCK_ERR_NOT_OWNER;
        return ZKLOCK_REL_DONE;
    }
    pthread_mutex_lock(&s->mu);
    int plan = ZKLOCK_REL_BATCH;
    if (h->count > 1) {
        h->count--;
        plan = ZKLOCK_REL_DONE;
    } else if (h->kind != ZKLOCK_FAIR || h->sweep) {
        plan = ZKLOCK_REL_SINGLE;
    } else if (max_ms > 0 && !h->waited && !h->contended && !s->cancelled &&
               zklock__hold_state_locked(h) == LOCK_OK) {
        /* Cacheable: zklock_release_cached keeps it (no operation if the watch is
         * armed), or finds it contended after all and deletes it. */
        plan = ZKLOCK_REL_SINGLE;
    } else {
        for (zklock_hold **p = &s->holds; *p; p = &(*p)->next) {
            if (*p == h) {
                *p = h->next;
                break;
            }
        }
        if (zklock__hold_state_locked(h) == LOCK_LOST) {
            *rc = LOCK_LOST;
            plan = ZKLOCK_REL_DONE;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (plan == ZKLOCK_REL_DONE && *rc == LOCK_LOST) zklock__hold_free(h);
    return plan;
}

typedef struct zklock_del {
    zklock_wave *wave;
    int rc;
} zklock_del;

static void zklock_del_done(int rc, const void *data) {
    zklock_del *d = (zklock_del *)data;
    zklock_wave_done(d->wave, &d->rc, rc);
}

int zklock_release_many(zklock_hold **holds, int n, int max_ms, int *rcs) {
    if (!holds || n < 0 || n > ZKLOCK_MANY_MAX) return LOCK_ERR_ARGS;
    int plan[ZKLOCK_MANY_MAX], rc[ZKLOCK_MANY_MAX];
    zklock_del del[ZKLOCK_MANY_MAX];
    zklock_session *s = NULL;
    int nb = 0;
    for (int i = 0; i < n; i++) {
        plan[i] = ZKLOCK_REL_DONE;
        rc[i] = LOCK_OK;
        if (!holds[i]) continue;
        plan[i] = zklock_release_plan(holds[i], max_ms, &rc[i]);
        if (plan[i] == ZKLOCK_REL_SINGLE)
            rc[i] = max_ms > 0 ? zklock_release_cached(holds[i], max_ms) : zklock_release(holds[i]);
        if (plan[i] != ZKLOCK_REL_BATCH) continue;
        nb++;
        if (!s) s = holds[i]->s;
    }

    zklock_wave wave;
    zklock_wave_init(&wave);
    for (int i = 0; i < n && nb; i++) {
        if (plan[i] != ZKLOCK_REL_BATCH) continue;
        zklock_hold *h = holds[i];
        /* Holds of another session than the first batched one: alone (rare). */
        if (h->s != s) {
            rc[i] = zklock__hold_let_go(h);
            plan[i] = ZKLOCK_REL_DONE;
            nb--;
        }
    }
    zklock_conn *c = NULL;
    int crc = LOCK_ERR_CONNECTION;
    if (nb) {
        pthread_mutex_lock(&s->mu);
        crc = zklock__conn_get_locked(s, NULL, 0, &c);
        pthread_mutex_unlock(&s->mu);
    }
    if (crc == LOCK_OK) {
        for (int i = 0; i < n; i++) {
            if (plan[i] != ZKLOCK_REL_BATCH) continue;
            del[i] = (zklock_del){.wave = &wave, .rc = ZOK};
            zklock_wave_add(&wave);
            int zrc = zoo_adelete(c->zh, holds[i]->path, -1, zklock_del_done, &del[i]);
            if (zrc != ZOK) zklock_wave_done(&wave, &del[i].rc, zrc);
        }
        zklock_wave_wait(&wave);
        zklock_count_wave(s, 0, 0, nb, 0);
        zklock__conn_put(s, c);
    }
    for (int i = 0; i < n; i++) {
        if (plan[i] != ZKLOCK_REL_BATCH) continue;
        zklock_hold *h = holds[i];
        int zrc = crc == LOCK_OK ? del[i].rc : ZCONNECTIONLOSS;
        if (zrc == ZNONODE) zrc = ZOK;
        if (zrc != ZOK) {
            /* Not connected, or the delete's reply was lost: the node must still go
             * once we are back (or it went with the session), as in zklock_release. */
            rc[i] = zklock__zk_retryable(zrc) ? LOCK_ERR_CONNECTION : LOCK_ERR_SERVER;
            if (zklock__zk_retryable(zrc))
                zklock__cleanup_queue(s, h->epoch, ZKLOCK_FAIR, h->parent, h->guid);
        }
        zklock__hold_free(h);
    }
    zklock_wave_destroy(&wave);
    int first = LOCK_OK;
    for (int i = 0; i < n; i++) {
        if (rcs) rcs[i] = rc[i];
        if (first == LOCK_OK) first = rc[i];
    }
    return first;
}
