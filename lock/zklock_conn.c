/* zklock_conn.c: the session side of zklock. A zklock_session owns one ZooKeeper
 * connection at a time (zklock_conn), the watchers that turn ZooKeeper's events
 * into state changes, and a maintenance thread that
 *   - replaces a connection whose session expired (zookeeper_init and
 *     zookeeper_close must not run on ZooKeeper's completion thread, where our
 *     watchers run), and
 *   - deletes nodes that a release or a failed acquisition could not delete
 *     because the connection was down, once it is back with the same session, and
 *   - lets go of cached holds (zklock_release_cached) once a contender queues, their
 *     time runs out, or the session is cancelled.
 * The lock recipes themselves are in zklock.c, the lock cache in zklock_cache.c. */
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

static void zklock_wake_all_locked(zklock_session *s) {
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

static void zklock_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ms) {
    if (deadline_ms < 0) {
        pthread_cond_wait(cond, mu);
        return;
    }
    struct timespec ts = {.tv_sec = deadline_ms / 1000,
                          .tv_nsec = (long)(deadline_ms % 1000) * 1000000};
    pthread_cond_timedwait(cond, mu, &ts);
}

void zklock__wait_locked(zklock_session *s, zklock_waiter *w, int64_t deadline_ms) {
    zklock_cond_wait_until(&w->cond, &s->mu, deadline_ms);
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
    zklock_wake_all_locked(s);
    pthread_mutex_unlock(&s->mu);
}

void zklock__node_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    uint64_t id = (uint64_t)(uintptr_t)ctx;
    (void)state;
    (void)path;
    /* Session events reach every registered watcher; the session watcher handles
     * them. NOTWATCHING follows our own zoo_remove_watches. */
    if (type == ZOO_SESSION_EVENT || type == ZOO_NOTWATCHING_EVENT) return;

    zklock_conn *c = (zklock_conn *)zoo_get_context(zh);
    zklock_session *s = c->s;
    pthread_mutex_lock(&s->mu);
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

static int zklock_conn_open(zklock_session *s, zklock_conn **out) {
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
static void zklock_conn_close(zklock_conn *c) {
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
        rc = zoo_create(c->zh, buf, NULL, -1, c->s->acl, ZOO_PERSISTENT, NULL, 0);
        if (rc == ZNODEEXISTS && c->s->auth) {
            /* Made before auth was on (open to all): close it, so that nobody else can
             * replace it and put lock parents of their own under it. A node of another
             * identity refuses (ZNOAUTH) and is left alone. */
            zklock__count_op(c->s, ZKLOCK_OP_DATA);
            int src = zoo_set_acl(c->zh, buf, -1, c->s->acl);
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

static void zklock_cleanup_free(zklock_cleanup *e) {
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
        if (strncmp(kids.data[i], e->guid, ZKLOCK_GUID_LEN) != 0) continue;
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
static void zklock_cleanups_run_locked(zklock_session *s) {
    zklock_cleanup *todo = s->cleanups, *keep = NULL;
    s->cleanups = NULL;
    while (todo) {
        zklock_cleanup *e = todo;
        todo = e->next;
        zklock_conn *c = NULL;
        if (e->epoch != s->conn->epoch) {
            zklock_cleanup_free(e);
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
            zklock_cleanup_free(e); /* done, or an error that retrying cannot fix */
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

/* ---------------------------------------------------------------- maintenance thread */

static void *zklock_maint_main(void *arg) {
    zklock_session *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        zklock_conn *old = s->conn;
        if (old->state == ZKLOCK_CONN_EXPIRED) {
            pthread_mutex_unlock(&s->mu);
            zklock_conn *c = NULL;
            int rc = zklock_conn_open(s, &c);
            pthread_mutex_lock(&s->mu);
            if (rc != LOCK_OK) {
                zklock_cond_wait_until(&s->maint_cond, &s->mu, zklock__now_ms() + 1000);
                continue;
            }
            s->conn = c;
            s->stats.expirations++;
            s->state_seq++;
            zklock_wake_all_locked(s);
            /* Threads inside a call on the old handle get an error at once. */
            while (old->refs > 0)
                pthread_cond_wait(&s->maint_cond, &s->mu);
            pthread_mutex_unlock(&s->mu);
            zklock_conn_close(old);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        if (s->cleanups && old->state == ZKLOCK_CONN_CONNECTED) zklock_cleanups_run_locked(s);
        /* Cached holds that are contended, out of time, lost, cancelled, or kept across
         * a gap that may have been a pause go now (the tick is moved only after the
         * sweep has seen the gap); the next one to run out of time sets the next
         * wake-up. */
        int64_t next = zklock__cache_sweep_locked(s);
        s->maint_tick_ms = zklock__now_ms();
        int64_t round = zklock__pause_limit_ms_locked(s) / 2;
        int64_t until = s->maint_tick_ms + (round < 500 ? round : 500);
        if (next >= 0 && next < until) until = next;
        /* Retry queued cleanups now and then even without a state change. */
        zklock_cond_wait_until(&s->maint_cond, &s->mu, until);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---------------------------------------------------------------- public: session */

static int zklock_root_valid(const char *root) {
    size_t n = strlen(root);
    if (n < 2 || root[0] != '/' || root[n - 1] == '/') return 0;
    return strstr(root, "//") == NULL;
}

int zklock_session_new(const zklock_session_config *cfg, zklock_session **out) {
    if (!out) return LOCK_ERR_ARGS;
    *out = NULL;
    if (!cfg || !cfg->hosts || !cfg->hosts[0]) return LOCK_ERR_ARGS;
    const char *root = cfg->root ? cfg->root : "/stock/locks";
    if (!zklock_root_valid(root) || cfg->session_timeout_ms < 0 || cfg->connect_timeout_ms < 0)
        return LOCK_ERR_ARGS;

    zklock_session *s = calloc(1, sizeof(*s));
    if (!s) return LOCK_ERR_NOMEM;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&s->maint_cond, &attr);
    pthread_condattr_destroy(&attr);
    s->session_timeout_ms = cfg->session_timeout_ms ? cfg->session_timeout_ms : 6000;
    s->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 5000;
    s->cache = cfg->cache != 0;
    s->hosts = strdup(cfg->hosts);
    s->root = strdup(root);
    s->acl = &ZOO_OPEN_ACL_UNSAFE;
    int rc = LOCK_ERR_NOMEM;
    if (!s->hosts || !s->root) goto out;
    if (cfg->auth && cfg->auth[0]) {
        const char *colon = strchr(cfg->auth, ':');
        if (!colon || colon == cfg->auth) {
            rc = LOCK_ERR_ARGS;
            goto out;
        }
        if (!(s->auth = strdup(cfg->auth))) goto out;
        /* ("auth", "") stands for every identity the creating session has added. */
        s->acl = &ZOO_CREATOR_ALL_ACL;
    }

    /* Error level only, and every handle logs into zklock_log_discard. */
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    rc = zklock_conn_open(s, &s->conn);
    if (rc != LOCK_OK) goto out;

    zklock_waiter w;
    zklock_conn *c = NULL;
    zklock__waiter_add(s, &w);
    pthread_mutex_lock(&s->mu);
    rc = zklock__conn_get_locked(s, &w, zklock__now_ms() + s->connect_timeout_ms, &c);
    pthread_mutex_unlock(&s->mu);
    zklock__waiter_remove(s, &w);
    if (rc != LOCK_OK) goto out;
    int zrc = zklock__ensure_path(c, s->root);
    zklock__conn_put(s, c);
    if (zrc != ZOK) {
        rc = zklock__zk_retryable(zrc) ? LOCK_ERR_CONNECTION : LOCK_ERR_SERVER;
        goto out;
    }
    s->maint_tick_ms = zklock__now_ms();
    if (pthread_create(&s->maint, NULL, zklock_maint_main, s) != 0) {
        rc = LOCK_ERR_NOMEM;
        goto out;
    }
    s->maint_started = 1;
    rc = LOCK_OK;
out:
    if (rc != LOCK_OK) {
        zklock_session_free(s);
        s = NULL;
    }
    *out = s;
    return rc;
}

void zklock_session_cancel(zklock_session *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->cancelled = 1;
    zklock_wake_all_locked(s);
    pthread_mutex_unlock(&s->mu);
}

void zklock_session_free(zklock_session *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->cancelled = 1;
    s->stopping = 1;
    zklock_wake_all_locked(s);
    pthread_mutex_unlock(&s->mu);
    if (s->maint_started) pthread_join(s->maint, NULL);
    /* Closing the session deletes every ephemeral node it still has. */
    zklock_conn_close(s->conn);
    while (s->holds) {
        zklock_hold *h = s->holds;
        s->holds = h->next;
        free(h->name);
        free(h->parent);
        free(h->path);
        free(h);
    }
    while (s->cleanups) {
        zklock_cleanup *e = s->cleanups;
        s->cleanups = e->next;
        zklock_cleanup_free(e);
    }
    pthread_cond_destroy(&s->maint_cond);
    pthread_mutex_destroy(&s->mu);
    free(s->hosts);
    free(s->root);
    if (s->auth) explicit_bzero(s->auth, strlen(s->auth));
    free(s->auth);
    free(s);
}

int zklock_session_status(zklock_session *s) {
    int rc;

    if (!s) return LOCK_ERR_ARGS;
    pthread_mutex_lock(&s->mu);
    if (s->cancelled)
        rc = LOCK_ERR_CANCELLED;
    else
        rc = s->conn->state == ZKLOCK_CONN_CONNECTED ? LOCK_OK : LOCK_ERR_CONNECTION;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void zklock_get_stats(zklock_session *s, zklock_stats *out) {
    if (!s || !out) return;
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
}

const char *zklock_strerror(int code) {
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
        return "no usable connection to ZooKeeper";
    case LOCK_ERR_CANCELLED:
        return "cancelled";
    case LOCK_ERR_SERVER:
        return "unexpected ZooKeeper error";
    case LOCK_ERR_NOT_OWNER:
        return "the hold belongs to another thread";
    case LOCK_SUSPECT:
        return "connection lost; the lock may have passed on";
    case LOCK_LOST:
        return "lock lost (session expired or node deleted)";
    default:
        return "unknown zklock code";
    }
}
