/* zklock_session.c: a zklock_session of zklock.h, its life (new, cancel, free, status,
 * stats) and its maintenance thread, which
 *   - replaces a connection whose session expired (zookeeper_init and
 *     zookeeper_close must not run on ZooKeeper's completion thread, where our
 *     watchers run), and
 *   - deletes nodes that a release or a failed acquisition could not delete
 *     because the connection was down, once it is back with the same session, and
 *   - lets go of cached holds (zklock_cache.c) once a contender queues, their time runs
 *     out, the session is cancelled or the process may have been paused past it.
 * It is the top of the session side: it calls zklock_conn.c and zklock_cache.c, and
 * nothing below calls it (zklock_int.h gives the layers). */
#include <stdlib.h>
#include <string.h>

#include "lock.h"
#include "zklock_int.h"

/* ---------------------------------------------------------------- maintenance thread */

static void *zklock_maint_main(void *arg) {
    zklock_session *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        zklock_conn *old = s->conn;
        if (old->state == ZKLOCK_CONN_EXPIRED) {
            pthread_mutex_unlock(&s->mu);
            zklock_conn *c = NULL;
            int rc = zklock__conn_open(s, &c);
            pthread_mutex_lock(&s->mu);
            if (rc != LOCK_OK) {
                zklock__cond_wait_until(&s->maint_cond, &s->mu, zklock__now_ms() + 1000);
                continue;
            }
            s->conn = c;
            s->stats.expirations++;
            s->state_seq++;
            zklock__wake_all_locked(s);
            /* Threads inside a call on the old handle get an error at once. */
            while (old->refs > 0)
                pthread_cond_wait(&s->maint_cond, &s->mu);
            pthread_mutex_unlock(&s->mu);
            zklock__conn_close(old);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        if (s->cleanups && old->state == ZKLOCK_CONN_CONNECTED) zklock__cleanups_run_locked(s);
        /* Cached holds that are contended, out of time, lost, cancelled, or kept across
         * a gap that may have been a pause go now (the tick is moved only after the
         * sweep has seen the gap); the next one to run out of time sets the next
         * wake-up. */
        int64_t next = zklock__cache_sweep_locked(s);
        s->maint_tick_ms = zklock__now_ms();
        s->maint_boot_ms = zklock__boot_ms();
        int64_t round = zklock__pause_limit_ms_locked(s) / 2;
        int64_t until = s->maint_tick_ms + (round < 500 ? round : 500);
        if (next >= 0 && next < until) until = next;
        /* Retry queued cleanups now and then even without a state change. */
        zklock__cond_wait_until(&s->maint_cond, &s->mu, until);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---------------------------------------------------------------- public: session */

static int zklock_root_valid(const char *root) {
    size_t n = strlen(root);
    if (strcmp(root, "/") == 0) return 1; /* the top: locks are /<name> */
    if (n < 2 || root[0] != '/' || root[n - 1] == '/') return 0;
    return strstr(root, "//") == NULL;
}

/* The ACLs with a peer identity (zklock_session_config.peer): our creator identity keeps
 * every permission; the peer reads our lock nodes and queues under the parents. Only
 * with auth: without it every node is open anyway. */
static int zklock_peer_acls(zklock_session *s, const char *peer) {
    char *colon = strchr(peer, ':');
    if (!s->auth || !colon || colon == peer || !colon[1]) return LOCK_ERR_ARGS;
    if (!(s->peer = strdup(peer))) return LOCK_ERR_NOMEM;
    s->peer[colon - peer] = '\0';
    struct Id creator = {"auth", ""}, other = {s->peer, s->peer + (colon - peer) + 1};
    s->acls[0] = (struct ACL){ZOO_PERM_ALL, creator};
    s->acls[1] = (struct ACL){ZOO_PERM_READ, other};
    s->acls[2] = (struct ACL){ZOO_PERM_ALL, creator};
    s->acls[3] = (struct ACL){ZOO_PERM_READ | ZOO_PERM_CREATE | ZOO_PERM_DELETE, other};
    s->peer_acl = (struct ACL_vector){2, &s->acls[0]};
    s->peer_parent_acl = (struct ACL_vector){2, &s->acls[2]};
    s->acl = &s->peer_acl;
    s->parent_acl = &s->peer_parent_acl;
    return LOCK_OK;
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
    snprintf(s->owner, sizeof(s->owner), "%s", cfg->owner ? cfg->owner : "");
    s->hosts = strdup(cfg->hosts);
    s->root = strdup(strcmp(root, "/") == 0 ? "" : root); /* joined as root + "/" + name */
    s->acl = s->parent_acl = &ZOO_OPEN_ACL_UNSAFE;
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
        s->acl = s->parent_acl = &ZOO_CREATOR_ALL_ACL;
    }
    if (cfg->peer && cfg->peer[0] && (rc = zklock_peer_acls(s, cfg->peer)) != LOCK_OK) goto out;

    /* Error level only, and every handle logs into zklock_log_discard. */
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    rc = zklock__conn_open(s, &s->conn);
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
    s->maint_boot_ms = zklock__boot_ms();
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
    zklock__wake_all_locked(s);
    pthread_mutex_unlock(&s->mu);
}

void zklock_session_free(zklock_session *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->cancelled = 1;
    s->stopping = 1;
    zklock__wake_all_locked(s);
    pthread_mutex_unlock(&s->mu);
    if (s->maint_started) pthread_join(s->maint, NULL);
    /* Closing the session deletes every ephemeral node it still has. */
    zklock__conn_close(s->conn);
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
        zklock__cleanup_free(e);
    }
    pthread_cond_destroy(&s->maint_cond);
    pthread_mutex_destroy(&s->mu);
    free(s->hosts);
    free(s->root);
    if (s->auth) explicit_bzero(s->auth, strlen(s->auth));
    free(s->auth);
    free(s->peer);
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
    case LOCK_ERR_CONNECTION:
        return "no usable connection to ZooKeeper";
    case LOCK_ERR_SERVER:
        return "unexpected ZooKeeper error";
    case LOCK_LOST:
        return "lock lost (session expired or node deleted)";
    case LOCK_ERR_SEQ_LIMIT:
        return "the lock's parent has used up ZooKeeper's sequence numbers; recreate it";
    default:
        return lock_strerror(code);
    }
}
