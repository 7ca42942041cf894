/* zklock_conn.c: the bottom layer of zklock (zklock_int.h gives the layers). One
 * ZooKeeper connection of a session at a time (zklock_conn): opening and closing it,
 * the watchers that turn ZooKeeper's events into state changes, references for the
 * threads inside a call, the sync, and the deletion by GUID of nodes that a release or
 * a failed acquisition could not delete (zklock_cleanup), run later by the maintenance
 * thread of zklock_session.c. It calls no other zklock file. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zklock_int.h"

/* ---------------------------------------------------------------- small helpers */

int64_t zklock__now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t zklock__boot_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t zklock__pause_limit_ms_locked(const zklock_session *s) {
    int64_t timeout = s->session_timeout_ms;
    if (s->conn->timeout_ms > 0 && s->conn->timeout_ms < timeout) timeout = s->conn->timeout_ms;
    return timeout / 3;
}

int zklock__zk_retryable(int rc) {
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZSESSIONEXPIRED ||
           rc == ZINVALIDSTATE || rc == ZCLOSING || rc == ZSESSIONMOVED;
}

void zklock__count_op(zklock_session *s, int op) {
    pthread_mutex_lock(&s->mu);
    s->stats.round_trips++; /* every counted call is synchronous: one round trip */
    switch (op) {
    case ZKLOCK_OP_CREATE:
        s->stats.op_create++;
        break;
    case ZKLOCK_OP_DELETE:
        s->stats.op_delete++;
        break;
    case ZKLOCK_OP_CHILDREN:
        s->stats.op_get_children++;
        break;
    default:
        s->stats.op_get_data++;
        break;
    }
    pthread_mutex_unlock(&s->mu);
}

/* ZooKeeper's own log goes nowhere: a library does not print. */
static void zklock_log_discard(const char *message) {
    (void)message;
}

void zklock__wake_all_locked(zklock_session *s) {
    for (zklock_waiter *w = s->waiters; w; w = w->next)
        pthread_cond_signal(&w->cond);
    pthread_cond_signal(&s->maint_cond);
}

void zklock__waiter_add(zklock_session *s, zklock_waiter *w) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &attr);
    pthread_condattr_destroy(&attr);
    w->watch_id = 0;
    w->fired = 0;
    w->cache_watch = 0;
    w->cache_fired = 0;
    pthread_mutex_lock(&s->mu);
    w->next = s->waiters;
    s->waiters = w;
    pthread_mutex_unlock(&s->mu);
}

void zklock__waiter_remove(zklock_session *s, zklock_waiter *w) {
    pthread_mutex_lock(&s->mu);
    for (zklock_waiter **p = &s->waiters; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    pthread_cond_destroy(&w->cond);
}

void zklock__cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ms) {
    if (deadline_ms < 0) {
        pthread_cond_wait(cond, mu);
        return;
    }
    struct timespec ts = {.tv_sec = deadline_ms / 1000,
                          .tv_nsec = (long)(deadline_ms % 1000) * 1000000};
    pthread_cond_timedwait(cond, mu, &ts);
}

void zklock__wait_locked(zklock_session *s, zklock_waiter *w, int64_t deadline_ms) {
    zklock__cond_wait_until(&w->cond, &s->mu, deadline_ms);
}

uint64_t zklock__watch_id_locked(zklock_session *s) {
    return ++s->last_watch;
}

/* ---------------------------------------------------------------- watchers */

static void zklock_mark_holds_locked(zklock_session *s, zklock_conn *c, int lost) {
    for (zklock_hold *h = s->holds; h; h = h->next) {
        if (h->epoch != c->epoch || h->lost) continue;
        if (lost)
            s->stats.lost_events++;
        else
            s->stats.suspect_events++;
    }
}

/* The session watcher: records connection state changes. Runs on ZooKeeper's
 * completion thread, so it only records and signals. */
static void zklock_session_watcher(zhandle_t *zh, int type, int state, const char *path,
                                   void *ctx) {
    zklock_conn *c = ctx;
    zklock_session *s = c->s;
    (void)path;
    if (type != ZOO_SESSION_EVENT) return;

    pthread_mutex_lock(&s->mu);
    if (c->state == ZKLOCK_CONN_EXPIRED) {
        /* Nothing comes back from an expired session. */
    } else if (state == ZOO_CONNECTED_STATE) {
        const clientid_t *id = zoo_client_id(zh);
        if (c->session_id == 0) c->session_id = id->client_id;
        if (id->client_id != c->session_id) {
            /* Never seen with the C client (it reports EXPIRED instead), but a new
             * session id means the old session and its nodes are gone. */
            zklock_mark_holds_locked(s, c, 1);
            c->state = ZKLOCK_CONN_EXPIRED;
        } else {
            c->state = ZKLOCK_CONN_CONNECTED;
            c->timeout_ms = zoo_recv_timeout(zh); /* set by the I/O thread before this event */
        }
    } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        zklock_mark_holds_locked(s, c, 1);
        c->state = ZKLOCK_CONN_EXPIRED;
    } else if (c->state == ZKLOCK_CONN_CONNECTED) {
        /* CONNECTING or ASSOCIATING: the connection broke, the session may live. */
        zklock_mark_holds_locked(s, c, 0);
        c->state = ZKLOCK_CONN_CONNECTING;
    }
    s->state_seq++;
    zklock__wake_all_locked(s);
    pthread_mutex_unlock(&s->mu);
}

zklock_session *zklock__watch_event_lock(zhandle_t *zh, int type, void *ctx, uint64_t *id) {
    *id = (uint64_t)(uintptr_t)ctx;
    if (type == ZOO_SESSION_EVENT || type == ZOO_NOTWATCHING_EVENT) return NULL;
    zklock_conn *c = (zklock_conn *)zoo_get_context(zh);
    zklock_session *s = c->s;
    pthread_mutex_lock(&s->mu);
    return s;
}

void zklock__node_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    uint64_t id;
    (void)state;
    (void)path;
    zklock_session *s = zklock__watch_event_lock(zh, type, ctx, &id);
    if (!s) return;
    s->stats.watch_events++;
    for (zklock_waiter *w = s->waiters; w; w = w->next) {
        if (w->watch_id == id) {
            w->fired = 1;
            /* Only a deletion can hand the lock on without a new listing. */
            w->deleted = type == ZOO_DELETED_EVENT;
            pthread_cond_signal(&w->cond);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------- connections */

/* The least time between two routine resolutions of the ensemble's host names. */
#define ZKLOCK_RESOLVE_MS 10000

int zklock__conn_open(zklock_session *s, zklock_conn **out) {
    zklock_conn *c = calloc(1, sizeof(*c));
    if (!c) return LOCK_ERR_NOMEM;
    c->s = s;
    c->state = ZKLOCK_CONN_CONNECTING;
    pthread_mutex_lock(&s->mu);
    c->epoch = ++s->last_epoch;
    pthread_mutex_unlock(&s->mu);
    c->zh = zookeeper_init2(s->hosts, zklock_session_watcher, s->session_timeout_ms, NULL, c, 0,
                            zklock_log_discard);
    if (!c->zh) {
        int nomem = errno == ENOMEM;
        free(c);
        return nomem ? LOCK_ERR_NOMEM : LOCK_ERR_CONNECTION;
    }
    /* By default the client resolves the ensemble's host names each time it checks its
     * socket for readiness: a getaddrinfo (and the kernel's address dumps it asks for)
     * per loop of its I/O thread, that is several per lock operation under load. Once
     * per ZKLOCK_RESOLVE_MS is enough to follow a DNS change; a lost connection still
     * resolves at once. */
    (void)zoo_set_servers_resolution_delay(c->zh, ZKLOCK_RESOLVE_MS);
    /* Auth belongs to the handle: the client sends it again after every reconnect of
     * this session, and a replacement handle (after an expiry) gets it here. Added
     * before the first connection completes, it is sent before any request of ours. */
    if (s->auth &&
        zoo_add_auth(c->zh, "digest", s->auth, (int)strlen(s->auth), NULL, NULL) != ZOK) {
        zookeeper_close(c->zh);
        free(c);
        return LOCK_ERR_CONNECTION;
    }
    *out = c;
    return LOCK_OK;
}

/* Closes the handle (joins ZooKeeper's threads, so no watcher runs afterwards). */
void zklock__conn_close(zklock_conn *c) {
    if (!c) return;
    zookeeper_close(c->zh);
    free(c);
}

int zklock__conn_get_locked(zklock_session *s, zklock_waiter *w, int64_t deadline_ms,
                            zklock_conn **out) {
    for (;;) {
        /* Cancellation stops waiting, never cleaning up (callers without w). */
        if (w && s->cancelled) return LOCK_ERR_CANCELLED;
        zklock_conn *c = s->conn;
        /* Our recorded state lags the library's by the event's trip through the
         * completion thread, so both must say connected. */
        int zk_connected = zoo_state(c->zh) == ZOO_CONNECTED_STATE;
        if (c->state == ZKLOCK_CONN_CONNECTED && zk_connected) {
            c->refs++;
            *out = c;
            return LOCK_OK;
        }
        int64_t now = zklock__now_ms();
        if (!w || (deadline_ms >= 0 && now >= deadline_ms)) return LOCK_ERR_CONNECTION;
        int64_t until = deadline_ms;
        if (c->state == ZKLOCK_CONN_CONNECTED && (until < 0 || until > now + 10))
            until = now + 10; /* the state event is on its way */
        zklock__wait_locked(s, w, until);
    }
}

void zklock__conn_put(zklock_session *s, zklock_conn *c) {
    pthread_mutex_lock(&s->mu);
    if (--c->refs == 0 && c != s->conn) pthread_cond_signal(&s->maint_cond);
    pthread_mutex_unlock(&s->mu);
}

typedef struct zklock_sync_wait {
    zklock_session *s;
    pthread_cond_t cond;
    int done;
    int rc;
} zklock_sync_wait;

/* The completion of zoo_async: runs on ZooKeeper's completion thread, records and
 * signals only. The library calls it exactly once, also when the connection is lost
 * or the handle closed, so the waiting thread always wakes. */
static void zklock_sync_done(int rc, const char *value, const void *data) {
    zklock_sync_wait *sw = (zklock_sync_wait *)(uintptr_t)data;
    (void)value;
    pthread_mutex_lock(&sw->s->mu);
    sw->rc = rc;
    sw->done = 1;
    pthread_cond_signal(&sw->cond);
    pthread_mutex_unlock(&sw->s->mu);
}

int zklock__sync(zklock_conn *c, const char *path) {
    zklock_session *s = c->s;
    zklock_sync_wait sw = {.s = s};
    pthread_cond_init(&sw.cond, NULL);
    zklock__count_op(s, ZKLOCK_OP_DATA);
    int rc = zoo_async(c->zh, path, zklock_sync_done, &sw);
    if (rc == ZOK) {
        pthread_mutex_lock(&s->mu);
        while (!sw.done)
            pthread_cond_wait(&sw.cond, &s->mu);
        rc = sw.rc;
        pthread_mutex_unlock(&s->mu);
    }
    pthread_cond_destroy(&sw.cond);
    return rc;
}

int zklock__ensure_path(zklock_conn *c, const char *path) {
    size_t len = strlen(path);
    char *buf = malloc(len + 1);
    if (!buf) return ZSYSTEMERROR;
    int rc = ZOK;
    /* Parent first: create every prefix that ends before a '/', then the path. */
    for (size_t i = 1; i <= len; i++) {
        if (i < len && path[i] != '/') continue;
        memcpy(buf, path, i);
        buf[i] = '\0';
        zklock__count_op(c->s, ZKLOCK_OP_CREATE);
        rc = zoo_create(c->zh, buf, NULL, -1, c->s->parent_acl, ZOO_PERSISTENT, NULL, 0);
        if (rc == ZNODEEXISTS && c->s->auth) {
            /* Made before auth was on (open to all): close it, so that nobody else can
             * replace it and put lock parents of their own under it. A node of another
             * identity refuses (ZNOAUTH) and is left alone. */
            zklock__count_op(c->s, ZKLOCK_OP_DATA);
            int src = zoo_set_acl(c->zh, buf, -1, c->s->parent_acl);
            if (zklock__zk_retryable(src)) {
                rc = src;
                break;
            }
        }
        if (rc == ZNODEEXISTS) rc = ZOK;
        if (rc != ZOK) break;
    }
    free(buf);
    return rc;
}

/* ---------------------------------------------------------------- cleanup of nodes */

void zklock__cleanup_queue(zklock_session *s, uint64_t epoch, zklock_kind kind, const char *path,
                           const char *guid) {
    zklock_cleanup *e = calloc(1, sizeof(*e));
    if (!e || !(e->path = strdup(path))) {
        free(e);
        return;
    }
    e->epoch = epoch;
    e->kind = kind;
    memcpy(e->guid, guid, ZKLOCK_GUID_LEN);
    pthread_mutex_lock(&s->mu);
    e->next = s->cleanups;
    s->cleanups = e;
    pthread_cond_signal(&s->maint_cond);
    pthread_mutex_unlock(&s->mu);
}

void zklock__cleanup_free(zklock_cleanup *e) {
    if (!e) return;
    free(e->path);
    free(e);
}

int zklock__cleanup_run(zklock_conn *c, const zklock_cleanup *e) {
    zklock_session *s = c->s;
    /* A cleanup looks for a node whose create's reply may have been lost, and a server
     * that lags (a follower we reconnected to) may not have applied that create yet: a
     * plain read would find nothing, the entry would be dropped, and the create would
     * land afterwards, owned by our live session, blocking the lock everywhere. So the
     * server is brought up to date first, as the acquisition's recovery does. */
    int rc = zklock__sync(c, e->path);
    if (rc != ZOK && rc != ZNONODE) return rc;
    if (e->kind == ZKLOCK_HERD) {
        /* The herd node has a fixed name: delete it only if it is the one we made. */
        char data[ZKLOCK_GUID_LEN + 1];
        int len = ZKLOCK_GUID_LEN;
        struct Stat st;
        zklock__count_op(s, ZKLOCK_OP_DATA);
        rc = zoo_get(c->zh, e->path, 0, data, &len, &st);
        if (rc == ZNONODE) return ZOK;
        if (rc != ZOK) return rc;
        if (st.ephemeralOwner != c->session_id || len != ZKLOCK_GUID_LEN ||
            memcmp(data, e->guid, ZKLOCK_GUID_LEN) != 0)
            return ZOK;
        zklock__count_op(s, ZKLOCK_OP_DELETE);
        rc = zoo_delete(c->zh, e->path, st.version);
        return rc == ZNONODE || rc == ZBADVERSION ? ZOK : rc;
    }

    struct String_vector kids = {0, NULL};
    zklock__count_op(s, ZKLOCK_OP_CHILDREN);
    rc = zoo_get_children(c->zh, e->path, 0, &kids);
    if (rc == ZNONODE) return ZOK;
    if (rc != ZOK) return rc;
    size_t plen = strlen(e->path);
    for (int i = 0; i < kids.count && rc == ZOK; i++) {
        if (!zklock__own_child(kids.data[i], e->guid)) continue;
        size_t n = plen + 1 + strlen(kids.data[i]) + 1;
        char *p = malloc(n);
        if (!p) {
            rc = ZSYSTEMERROR;
            break;
        }
        snprintf(p, n, "%s/%s", e->path, kids.data[i]);
        zklock__count_op(s, ZKLOCK_OP_DELETE);
        rc = zoo_delete(c->zh, p, -1);
        if (rc == ZNONODE) rc = ZOK;
        free(p);
    }
    deallocate_String_vector(&kids);
    return rc;
}

/* Runs the queued cleanups once (mu held; dropped around ZooKeeper calls). An
 * entry of an older session is dropped: its nodes went with that session. */
void zklock__cleanups_run_locked(zklock_session *s) {
    zklock_cleanup *todo = s->cleanups, *keep = NULL;
    s->cleanups = NULL;
    while (todo) {
        zklock_cleanup *e = todo;
        todo = e->next;
        zklock_conn *c = NULL;
        if (e->epoch != s->conn->epoch) {
            zklock__cleanup_free(e);
            continue;
        }
        if (zklock__conn_get_locked(s, NULL, 0, &c) != LOCK_OK) {
            e->next = keep;
            keep = e;
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        int rc = zklock__cleanup_run(c, e);
        zklock__conn_put(s, c);
        pthread_mutex_lock(&s->mu);
        if (rc == ZOK || !zklock__zk_retryable(rc)) {
            zklock__cleanup_free(e); /* done, or an error that retrying cannot fix */
        } else {
            e->next = keep;
            keep = e;
        }
    }
    /* Entries queued meanwhile stay in front of the ones kept. */
    zklock_cleanup **tail = &s->cleanups;
    while (*tail)
        tail = &(*tail)->next;
    *tail = keep;
}
