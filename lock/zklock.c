/* zklock.c: the acquisition recipes of zklock.h (zklock_acquire): the fair lock (an
 * ephemeral-sequential queue under a container parent, each waiter watching only its
 * predecessor) and the herd lock (one ephemeral node that every loser watches), with
 * reentrancy. What a hold is and how it is let go (release, check, fencing token) is
 * in zklock_hold.c; the lock cache whose hand-over an acquisition tries first, in
 * zklock_cache.c; connections, watchers and cleanup by GUID, in zklock_conn.c. The
 * layers are in zklock_int.h.
 *
 * One acquisition is an "attempt": a random GUID, a node made with it, and the
 * waiting. What the attempt knows about its node is one of
 *   - nothing made yet;
 *   - uncertain: a create's reply was lost; the node may exist. Once connected
 *     again we sync, look for our GUID and adopt the node only if our current
 *     session owns it (a node of an expired session is about to vanish:
 *     CURATOR-498). Such a create may still be applied later, so from then on the
 *     attempt deletes by GUID, and a node with our GUID that is not ours is a late
 *     copy to delete;
 *   - made: we know its path and czxid.
 * If our node disappears, the attempt starts over (until its deadline) with the
 * same GUID; if the session expires, with a new one. Whatever ends an attempt
 * without the lock deletes what it made, or queues the deletion until the
 * connection is back (the Curator bugs CURATOR-79, CURATOR-462 and CURATOR-678
 * were nodes left behind on exactly these paths). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zklock_int.h"

#define ZKLOCK_RESTART 1 /* internal: the attempt's node is gone, start over */
/* Internal results of one round: wait for the armed watch; round again at once. */
enum { ZKLOCK_ROUND_WAIT = 2, ZKLOCK_ROUND_AGAIN = 3 };

typedef struct zklock_attempt {
    zklock_session *s;
    zklock_waiter w;
    zklock_kind kind;
    int64_t deadline; /* ms, -1 = none */
    char guid[ZKLOCK_GUID_LEN + 1];
    char *parent; /* fair: <root>/<name>; herd: <root> */
    char *path;   /* fair: our node once known (buffer); herd: the node */
    size_t path_cap;
    uint64_t epoch; /* connection epoch of the node (made or uncertain) */
    int made;
    int uncertain;
    int64_t token;
    int ever_uncertain; /* delete by GUID: a late copy of a lost create may still appear */
    uint64_t watch_id;  /* the last watch this attempt registered */
    char *watch_path;   /* its path, NULL when none is registered */
    /* Fair: the predecessor we watch was the lowest lock node of our last listing.
     * Sequence numbers only grow, so no lower node can appear later: its deletion
     * alone means the lock is ours, without listing the children again. */
    int pred_lowest;
    int waited;           /* some round found a node below ours: another contender was there */
    uint64_t cache_epoch; /* connection epoch of w.cache_watch */
    int behind;           /* the listing that gave us the lock showed others queued behind */
} zklock_attempt;

/* ---------------------------------------------------------------- watches */

/* Drops the client's registration of the attempt's last watch unless it has
 * fired (a data or exists watch fires once, and its registration goes with it).
 * Local only (no operation is sent): the server keeps one watch per path and
 * connection, shared with the other waiters of this session, and it ends when the
 * watched node changes. Without this, every round that watches again (after a
 * connection state change, say) would leave one more registration behind, which
 * the client would also set again at the server on every reconnection. */
static void zklock_watch_drop(zklock_attempt *a, zklock_conn *c) {
    if (!a->watch_path) return;
    pthread_mutex_lock(&a->s->mu);
    int fired = a->w.fired && a->w.watch_id == a->watch_id;
    pthread_mutex_unlock(&a->s->mu);
    if (!fired)
        zoo_remove_watches(c->zh, a->watch_path, ZWATCHTYPE_ANY, zklock__node_watcher,
                           (void *)(uintptr_t)a->watch_id, 1);
    free(a->watch_path);
    a->watch_path = NULL;
}

/* Sets w's watch id before the ZooKeeper call that registers it, so an event that
 * arrives before the call returns is not missed; the previous watch is dropped
 * first. Returns the state_seq to wait on. */
static uint64_t zklock_arm_watch(zklock_attempt *a, zklock_conn *c) {
    zklock_watch_drop(a, c);
    zklock_session *s = a->s;
    pthread_mutex_lock(&s->mu);
    uint64_t seq = s->state_seq;
    a->w.watch_id = zklock__watch_id_locked(s);
    a->w.fired = a->w.deleted = 0;
    pthread_mutex_unlock(&s->mu);
    a->watch_id = a->w.watch_id;
    return seq;
}

/* Remembers that the armed watch is registered at the server (for its removal if
 * we give up before it fires). Without memory we merely cannot remove it. */
static void zklock_watch_registered(zklock_attempt *a, const char *path) {
    free(a->watch_path);
    a->watch_path = strdup(path);
}

/* Sleeps until the watch fires, the connection state changes, the session is
 * cancelled or the deadline passes. LOCK_OK means "look again". */
static int zklock_wait(zklock_attempt *a, uint64_t seq) {
    zklock_session *s = a->s;
    int rc = LOCK_OK;
    pthread_mutex_lock(&s->mu);
    while (!a->w.fired) {
        if (s->cancelled) {
            rc = LOCK_ERR_CANCELLED;
            break;
        }
        if (s->state_seq != seq) break;
        if (a->deadline >= 0 && zklock__now_ms() >= a->deadline) {
            rc = LOCK_ERR_TIMEOUT;
            break;
        }
        zklock__wait_locked(s, &a->w, a->deadline);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int zklock_deadline_passed(const zklock_attempt *a) {
    return a->deadline >= 0 && zklock__now_ms() >= a->deadline;
}

/* Forgets the attempt's node (it is gone). The GUID is kept while the session
 * lives: a create of this attempt whose reply was lost may still produce a node
 * later, and only the GUID lets us recognise (and delete) it. A new session draws a
 * new GUID; the old session's nodes went with it. */
static int zklock_attempt_reset(zklock_attempt *a, int new_session) {
    a->made = 0;
    a->uncertain = 0;
    a->pred_lowest = 0;
    if (!new_session) return LOCK_OK;
    a->ever_uncertain = 0;
    return zklock__new_guid(a->guid) == 0 ? LOCK_OK : LOCK_ERR_SERVER;
}

/* Our node is missing from the listing (deleted under us, or its parent reaped).
 * It is deleted all the same before a new one is made: the attempt gives up on it,
 * and a node that is still there after all would block the queue for as long as
 * our session lives. The loop that follows is bounded by the deadline. Returns
 * ZKLOCK_RESTART to make a new node, ZKLOCK_ROUND_AGAIN when the delete must be
 * retried, or a negative code (LOCK_ERR_TIMEOUT once the deadline has passed). */
static int zklock_attempt_restart(zklock_attempt *a, zklock_conn *c) {
    if (a->made) {
        zklock__count_op(a->s, ZKLOCK_OP_DELETE);
        int zrc = zoo_delete(c->zh, a->path, -1);
        if (zrc != ZOK && zrc != ZNONODE)
            return zklock__zk_retryable(zrc) ? ZKLOCK_ROUND_AGAIN : LOCK_ERR_SERVER;
    }
    zklock_attempt_reset(a, 0);
    return zklock_deadline_passed(a) ? LOCK_ERR_TIMEOUT : ZKLOCK_RESTART;
}

/* ---------------------------------------------------------------- fair lock */

/* Creates our ephemeral-sequential child; makes the container parent (and the
 * root) again when the server reaped it. Returns a zk code. */
static int zklock_fair_create(zklock_attempt *a, zklock_conn *c) {
    char prefix[ZKLOCK_GUID_LEN + 8];
    snprintf(prefix, sizeof(prefix), "%s-lock-", a->guid);
    char *want = zklock__join(a->parent, prefix, "");
    if (!want) return ZSYSTEMERROR;
    int rc;
    for (int tries = 0;; tries++) {
        struct Stat st;
        zklock__count_op(a->s, ZKLOCK_OP_CREATE);
        rc = zoo_create2(c->zh, want, a->s->owner, (int)strlen(a->s->owner), a->s->acl,
                         ZOO_EPHEMERAL_SEQUENTIAL, a->path, (int)a->path_cap, &st);
        if (rc == ZOK) {
            a->made = 1;
            a->token = st.czxid;
            break;
        }
        if (rc != ZNONODE || tries == 20) break;
        /* The container parent was reaped (or never made): make it, retry. */
        zklock__count_op(a->s, ZKLOCK_OP_CREATE);
        rc = zoo_create(c->zh, a->parent, NULL, -1, a->s->parent_acl, ZOO_CONTAINER, NULL, 0);
        if (rc == ZNONODE) rc = zklock__ensure_path(c, a->s->root);
        if (rc != ZOK && rc != ZNODEEXISTS) break;
    }
    free(want);
    return rc;
}

/* A zk code that failed a round: connection trouble rounds again, anything else fails. */
static int zklock_round_failed(int zrc) {
    return zklock__zk_retryable(zrc) ? ZKLOCK_ROUND_AGAIN : LOCK_ERR_SERVER;
}

/* The recipe's first step: our ephemeral-sequential child. A create whose reply was
 * lost leaves the attempt uncertain (the node may exist): the next rounds find it by
 * GUID (zklock_fair_recover). Returns LOCK_OK when the node is made. */
static int zklock_fair_make(zklock_attempt *a, zklock_conn *c) {
    a->epoch = c->epoch;
    int rc = zklock_fair_create(a, c);
    if (zklock__zk_retryable(rc)) {
        a->uncertain = a->ever_uncertain = 1;
        return ZKLOCK_ROUND_AGAIN;
    }
    if (rc != ZOK) return LOCK_ERR_SERVER;
    /* A name no contender would recognise (a server that numbers otherwise) would make
     * node after node: give up, and let the node be swept by its GUID. */
    if (!zklock__contender_seq(strrchr(a->path, '/') + 1)) {
        a->ever_uncertain = 1;
        return LOCK_ERR_SERVER;
    }
    return LOCK_OK;
}

/* The cached listing: the first listing of an acquisition that may be cached sets the
 * children watch the cache needs (zklock_cache.c), every other is plain. After a lost
 * create reply the server is first brought up to date with the leader: the follower we
 * reconnected to may not have applied our create yet. Returns LOCK_OK with *kids. */
static int zklock_fair_list(zklock_attempt *a, zklock_conn *c, struct String_vector *kids) {
    int rc = ZOK;
    if (a->uncertain) rc = zklock__sync(c, a->parent);
    if (rc != ZOK && rc != ZNONODE) return zklock_round_failed(rc);
    zklock__count_op(a->s, ZKLOCK_OP_CHILDREN);
    if (a->s->cache && !a->w.cache_watch && !a->waited) {
        a->cache_epoch = c->epoch;
        rc = zklock__cache_list_watched(c, &a->w, a->parent, kids);
    } else {
        rc = zoo_get_children(c->zh, a->parent, 0, kids);
    }
    if (rc == ZNONODE) return ZKLOCK_RESTART; /* parent reaped: no node of ours in it */
    return rc == ZOK ? LOCK_OK : zklock_round_failed(rc);
}

/* The uncertain-create recovery, after a lost create reply: adopt the child of ours
 * (our GUID, stockd's own shape) that our current session owns, the lowest should there
 * be several. Nothing found: the create never happened, and the next round makes one
 * with the same GUID, so that a late copy of the first is still recognised. Returns
 * LOCK_OK with our node known, ZKLOCK_ROUND_AGAIN to create again, or an error. */
static int zklock_fair_recover(zklock_attempt *a, zklock_conn *c, struct String_vector *kids) {
    const char *best = NULL;
    for (int i = 0; i < kids->count; i++) {
        const char *k = kids->data[i];
        if (!zklock__own_child(k, a->guid)) continue;
        char *p = zklock__join(a->parent, k, "");
        if (!p) return LOCK_ERR_NOMEM;
        struct Stat st;
        zklock__count_op(a->s, ZKLOCK_OP_DATA);
        int rc = zoo_exists(c->zh, p, 0, &st);
        if (rc == ZOK && st.ephemeralOwner == c->session_id &&
            (!best || zklock__contender_cmp(k, best) < 0)) {
            best = k;
            snprintf(a->path, a->path_cap, "%s", p);
            a->token = st.czxid;
        }
        free(p);
        if (rc != ZOK && rc != ZNONODE) return zklock_round_failed(rc);
    }
    a->uncertain = 0;
    if (!best) return ZKLOCK_ROUND_AGAIN;
    a->made = 1;
    pthread_mutex_lock(&a->s->mu);
    a->s->stats.recovered_creates++;
    pthread_mutex_unlock(&a->s->mu);
    return LOCK_OK;
}

/* The late-twin deletion: a second node with our GUID is the late result of a create
 * whose reply was lost, and would block the queue until our session ends. Strays (no
 * contender) are counted, never deleted: they are somebody else's. */
static void zklock_fair_tidy(zklock_attempt *a, zklock_conn *c, const struct String_vector *kids,
                             const zklock_decision *d) {
    const char *mine = strrchr(a->path, '/') + 1;
    uint64_t deleted = 0;
    for (int i = 0; d->twins && i < kids->count; i++) {
        const char *k = kids->data[i];
        if (strcmp(k, mine) == 0 || !zklock__own_child(k, a->guid)) continue;
        char *p = zklock__join(a->parent, k, "");
        if (!p) break;
        zklock__count_op(a->s, ZKLOCK_OP_DELETE);
        int rc = zoo_delete(c->zh, p, -1);
        free(p);
        deleted += rc == ZOK || rc == ZNONODE;
    }
    pthread_mutex_lock(&a->s->mu);
    a->s->stats.orphans_deleted += deleted;
    a->s->stats.strays_seen += (uint64_t)d->strays;
    pthread_mutex_unlock(&a->s->mu);
}

/* The recipe's last step: a data watch on the predecessor (not exists: on a vanished
 * node it sets nothing). If pred was the only contender below ours, its deletion alone
 * makes the lock ours (sequence numbers only grow). */
static int zklock_fair_watch(zklock_attempt *a, zklock_conn *c, const char *pred, int only,
                             uint64_t *seq) {
    char *pp = zklock__join(a->parent, pred, "");
    if (!pp) return LOCK_ERR_NOMEM;
    a->pred_lowest = only;
    *seq = zklock_arm_watch(a, c);
    char buf[1];
    int len = sizeof(buf);
    zklock__count_op(a->s, ZKLOCK_OP_DATA);
    int rc =
        zoo_wget(c->zh, pp, zklock__node_watcher, (void *)(uintptr_t)a->watch_id, buf, &len, NULL);
    if (rc == ZOK) zklock_watch_registered(a, pp);
    free(pp);
    if (rc == ZOK) return ZKLOCK_ROUND_WAIT;
    if (rc == ZNONODE) return only ? LOCK_OK : ZKLOCK_ROUND_AGAIN; /* gone: look again */
    return zklock_round_failed(rc);
}

/* One round of the fair recipe on connection c: create, list, decide, watch. Returns
 * LOCK_OK with the lock, ZKLOCK_RESTART (our node is gone), ZKLOCK_ROUND_WAIT (wait for
 * the watch armed with *seq), ZKLOCK_ROUND_AGAIN (round again at once) or an error. */
static int zklock_fair_round(zklock_attempt *a, zklock_conn *c, uint64_t *seq) {
    int rc;
    if (!a->made && !a->uncertain && (rc = zklock_fair_make(a, c)) != LOCK_OK) return rc;

    struct String_vector kids = {0, NULL};
    if ((rc = zklock_fair_list(a, c, &kids)) != LOCK_OK) goto done;
    if (a->uncertain && (rc = zklock_fair_recover(a, c, &kids)) != LOCK_OK) goto done;

    const char *mine = strrchr(a->path, '/') + 1;
    zklock_decision d;
    zklock__decide(&kids, mine, a->guid, &d);
    zklock_fair_tidy(a, c, &kids, &d);
    if (!d.found) {
        rc = ZKLOCK_RESTART; /* deleted under us, or its session expired */
    } else if (d.at_limit) {
        /* Never wait either: every node after ours gets the same sequence, so waiting
         * could not end better. Our node is deleted by zklock_attempt_abandon. */
        pthread_mutex_lock(&a->s->mu);
        a->s->stats.seq_limit++;
        pthread_mutex_unlock(&a->s->mu);
        rc = LOCK_ERR_SEQ_LIMIT;
    } else if (d.holds) {
        /* Contenders that queued between our create and this listing are behind us
         * already: the children watch of the cached listing will not fire for them. */
        a->behind = d.above > 0;
        rc = LOCK_OK;
    } else {
        a->waited = 1;
        rc = zklock_deadline_passed(a) ? LOCK_ERR_TIMEOUT
                                       : zklock_fair_watch(a, c, d.pred, d.below == 1, seq);
    }
done:
    deallocate_String_vector(&kids);
    return rc;
}

/* ---------------------------------------------------------------- herd lock */

/* Is the herd node our own? Only if it carries our GUID and our current session
 * owns it: then it was made by a create of ours whose reply was lost, and the lock
 * is ours. Returns a zk code; on ZOK a->made says whether it was adopted. */
static int zklock_herd_adopt(zklock_attempt *a, zklock_conn *c) {
    char data[ZKLOCK_GUID_LEN];
    int len = sizeof(data);
    struct Stat st;
    zklock__count_op(a->s, ZKLOCK_OP_DATA);
    int rc = zoo_get(c->zh, a->path, 0, data, &len, &st);
    if (rc == ZNONODE) return ZOK;
    if (rc != ZOK) return rc;
    if (st.ephemeralOwner == c->session_id && len == ZKLOCK_GUID_LEN &&
        memcmp(data, a->guid, ZKLOCK_GUID_LEN) == 0) {
        a->made = 1;
        a->token = st.czxid;
        pthread_mutex_lock(&a->s->mu);
        a->s->stats.recovered_creates++;
        pthread_mutex_unlock(&a->s->mu);
    }
    return ZOK;
}

static int zklock_herd_round(zklock_attempt *a, zklock_conn *c, uint64_t *seq) {
    int rc;
    struct Stat st;
    if (a->uncertain) {
        /* Our create's reply was lost: bring the server up to date, then look. */
        rc = zklock__sync(c, a->parent);
        if (rc == ZOK || rc == ZNONODE) rc = zklock_herd_adopt(a, c);
        if (zklock__zk_retryable(rc)) return ZKLOCK_ROUND_AGAIN;
        if (rc != ZOK) return LOCK_ERR_SERVER;
        a->uncertain = 0;
        if (a->made) return LOCK_OK;
    }

    a->epoch = c->epoch;
    zklock__count_op(a->s, ZKLOCK_OP_CREATE);
    rc = zoo_create2(c->zh, a->path, a->guid, ZKLOCK_GUID_LEN, a->s->acl, ZOO_EPHEMERAL, NULL, 0,
                     &st);
    if (rc == ZOK) {
        a->made = 1;
        a->token = st.czxid;
        return LOCK_OK;
    }
    if (rc == ZNONODE) {
        rc = zklock__ensure_path(c, a->s->root);
        if (rc == ZOK) return ZKLOCK_ROUND_AGAIN;
    }
    if (zklock__zk_retryable(rc)) {
        a->uncertain = a->ever_uncertain = 1;
        return ZKLOCK_ROUND_AGAIN;
    }
    if (rc != ZNODEEXISTS) return LOCK_ERR_SERVER;
    if (a->ever_uncertain) {
        /* The node in the way may be the late result of our own lost create (even
         * after the look above found nothing): waiting for it would be waiting for
         * ourselves. */
        rc = zklock_herd_adopt(a, c);
        if (zklock__zk_retryable(rc)) return ZKLOCK_ROUND_AGAIN;
        if (rc != ZOK) return LOCK_ERR_SERVER;
        if (a->made) return LOCK_OK;
    }
    if (zklock_deadline_passed(a)) return LOCK_ERR_TIMEOUT;

    *seq = zklock_arm_watch(a, c);
    zklock__count_op(a->s, ZKLOCK_OP_DATA);
    rc = zoo_wexists(c->zh, a->path, zklock__node_watcher, (void *)(uintptr_t)a->watch_id, &st);
    /* On ZNONODE an exists watch stays set (it fires at the next create). */
    if (rc == ZOK || rc == ZNONODE) zklock_watch_registered(a, a->path);
    if (rc == ZOK) return ZKLOCK_ROUND_WAIT;
    if (rc == ZNONODE || zklock__zk_retryable(rc)) return ZKLOCK_ROUND_AGAIN;
    return LOCK_ERR_SERVER;
}

/* ---------------------------------------------------------------- acquire */

/* Runs rounds until the lock is ours or the attempt fails. */
static int zklock_attempt_run(zklock_attempt *a) {
    zklock_session *s = a->s;
    for (;;) {
        zklock_conn *c = NULL;
        pthread_mutex_lock(&s->mu);
        int rc = zklock__conn_get_locked(s, &a->w, a->deadline, &c);
        pthread_mutex_unlock(&s->mu);
        if (rc != LOCK_OK) return rc;

        if ((a->made || a->uncertain) && c->epoch != a->epoch) {
            /* The session that made (or maybe made) our node expired. */
            zklock__conn_put(s, c);
            if ((rc = zklock_attempt_reset(a, 1)) != LOCK_OK) return rc;
            if (zklock_deadline_passed(a)) return LOCK_ERR_TIMEOUT;
            continue;
        }
        uint64_t seq = 0;
        /* The handoff: our predecessor, the lowest node below ours, was deleted while
         * this session lived (the connection's epoch is the node's), so ours is now
         * the lowest. Acquired with no further operation: 4 in all for a waiter
         * (create, list, watch, and the release's delete), 3 without contention. */
        if (a->kind == ZKLOCK_FAIR && a->made && a->pred_lowest && a->w.fired && a->w.deleted)
            rc = LOCK_OK;
        else
            rc = a->kind == ZKLOCK_FAIR ? zklock_fair_round(a, c, &seq)
                                        : zklock_herd_round(a, c, &seq);
        if (rc == LOCK_OK) {
            /* No watch on our own node: a node deleted under a live session (by hand)
             * is what the fencing token covers, since any later holder's write moves
             * the fence our compare-and-set needs; a session loss makes the hold
             * SUSPECT or LOST through the session watcher. The watch would cost one
             * more operation per acquisition for a case the fence already refuses. */
            zklock_watch_drop(a, c);
            zklock__conn_put(s, c);
            return LOCK_OK;
        }
        if (rc == ZKLOCK_RESTART) rc = zklock_attempt_restart(a, c);
        zklock__conn_put(s, c);
        if (rc == ZKLOCK_RESTART || rc == ZKLOCK_ROUND_AGAIN) continue;
        if (rc == ZKLOCK_ROUND_WAIT) {
            rc = zklock_wait(a, seq);
            if (rc != LOCK_OK) return rc;
            continue;
        }
        return rc;
    }
}

/* Gives up an attempt: removes its watch and deletes whatever node it made (or
 * may have made). What cannot be deleted now is queued for after reconnection. */
static void zklock_attempt_abandon(zklock_attempt *a) {
    zklock_session *s = a->s;
    zklock_conn *c = NULL;
    pthread_mutex_lock(&s->mu);
    int rc = zklock__conn_get_locked(s, NULL, 0, &c);
    pthread_mutex_unlock(&s->mu);
    if (rc == LOCK_OK) zklock_watch_drop(a, c);
    /* After a lost create reply the node may exist even when recovery found
     * nothing (its create may yet be applied): sweep by GUID all the same. */
    if (a->made || a->uncertain || a->ever_uncertain) {
        int zrc = ZCONNECTIONLOSS;
        if (rc == LOCK_OK && c->epoch != a->epoch) {
            zrc = ZOK; /* made by an expired session: gone with it */
        } else if (rc == LOCK_OK && a->made && a->kind == ZKLOCK_FAIR && !a->ever_uncertain) {
            zklock__count_op(s, ZKLOCK_OP_DELETE);
            zrc = zoo_delete(c->zh, a->path, -1);
            if (zrc == ZNONODE) zrc = ZOK;
        } else if (rc == LOCK_OK) {
            zklock_cleanup e = {.epoch = a->epoch, .kind = a->kind};
            e.path = a->kind == ZKLOCK_FAIR ? a->parent : a->path;
            memcpy(e.guid, a->guid, sizeof(e.guid));
            zrc = zklock__cleanup_run(c, &e);
        }
        if (zrc != ZOK)
            zklock__cleanup_queue(s, a->epoch, a->kind,
                                  a->kind == ZKLOCK_FAIR ? a->parent : a->path, a->guid);
    }
    if (c) zklock__conn_put(s, c);
}

int zklock_acquire(zklock_session *s, const char *name, zklock_kind kind, int timeout_ms,
                   zklock_hold **out) {
    if (out) *out = NULL;
    if (!s || !name || !out || !zklock__name_valid(name) ||
        (kind != ZKLOCK_FAIR && kind != ZKLOCK_HERD))
        return LOCK_ERR_ARGS;

    pthread_t self = pthread_self();
    pthread_mutex_lock(&s->mu);
    if (s->cancelled) {
        pthread_mutex_unlock(&s->mu);
        return LOCK_ERR_CANCELLED;
    }
    zklock_hold *stale = NULL;
    zklock_hold *cached = zklock__cache_take_locked(s, name, kind, &stale);
    if (cached) {
        pthread_mutex_unlock(&s->mu);
        *out = cached;
        return LOCK_OK;
    }
    pthread_mutex_unlock(&s->mu);
    if (stale) (void)zklock__hold_let_go(stale);
    pthread_mutex_lock(&s->mu);
    for (zklock_hold *h = s->holds; h; h = h->next) {
        if (h->cached) continue;
        if (pthread_equal(h->owner, self) && h->kind == kind && strcmp(h->name, name) == 0) {
            /* Reentry. A lost hold is not handed out again: the caller must learn
             * that the outer critical section is no longer protected. */
            int rc = zklock__hold_state_locked(h) == LOCK_LOST ? LOCK_LOST : LOCK_OK;
            if (rc == LOCK_OK) {
                h->count++;
                *out = h;
            }
            pthread_mutex_unlock(&s->mu);
            return rc;
        }
    }
    pthread_mutex_unlock(&s->mu);

    /* Everything the success path needs is allocated first, so that nothing can
     * fail between winning the lock and handing it out. */
    zklock_attempt a = {.s = s, .kind = kind};
    a.deadline = timeout_ms < 0 ? -1 : zklock__now_ms() + timeout_ms;
    zklock_hold *h = calloc(1, sizeof(*h));
    int rc = LOCK_ERR_NOMEM;
    if (!h || !(h->name = strdup(name))) goto out_nowaiter;
    if (kind == ZKLOCK_FAIR) {
        a.parent = zklock__join(s->root, name, "");
        a.path_cap = strlen(s->root) + strlen(name) + ZKLOCK_GUID_LEN + 32;
        a.path = calloc(1, a.path_cap);
    } else {
        a.parent = strdup(s->root[0] ? s->root : "/");
        a.path = zklock__join(s->root, name, "-herd");
    }
    if (!a.parent || !a.path) goto out_nowaiter;
    if (zklock__new_guid(a.guid) != 0) {
        rc = LOCK_ERR_SERVER;
        goto out_nowaiter;
    }

    zklock__waiter_add(s, &a.w);
    rc = zklock_attempt_run(&a);
    if (rc == LOCK_OK) {
        h->s = s;
        h->owner = self;
        h->kind = kind;
        h->count = 1;
        h->epoch = a.epoch;
        h->token = a.token;
        h->sweep = a.ever_uncertain;
        h->waited = a.waited;
        memcpy(h->guid, a.guid, sizeof(h->guid));
        h->parent = a.parent;
        h->path = a.path;
        a.parent = a.path = NULL;
        pthread_mutex_lock(&s->mu);
        /* The first listing's children watch, if it is still armed on the session that
         * made our node; if it fired already, or the listing showed a contender behind us,
         * let go at release. */
        if (a.w.cache_watch && !a.waited && a.cache_epoch == a.epoch) {
            if (a.w.cache_fired || a.behind)
                h->contended = 1;
            else
                h->cache_watch = a.w.cache_watch;
        }
        h->next = s->holds;
        s->holds = h;
        s->stats.acquired++;
        pthread_mutex_unlock(&s->mu);
        *out = h;
        h = NULL;
    } else {
        zklock_attempt_abandon(&a);
        if (rc == LOCK_ERR_TIMEOUT) {
            pthread_mutex_lock(&s->mu);
            s->stats.timeouts++;
            pthread_mutex_unlock(&s->mu);
        }
    }
    zklock__waiter_remove(s, &a.w);
out_nowaiter:
    zklock__hold_free(h);
    free(a.parent);
    free(a.path);
    free(a.watch_path);
    return rc;
}
