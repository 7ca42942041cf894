/* peers.c: owner routing's membership in ZooKeeper (modes zk and zk-herd; the other
 * modes take the static list of --peers, route.c). Each instance keeps one ephemeral
 * node, --route-members/<its announced HOST:PORT>, on a ZooKeeper session of its
 * own (not the locks': a lock session's trouble and a member's are told apart), and a
 * thread keeps route.c's view equal to the children, numbered by the parent's child
 * version (cversion), which every instance reads alike. A join or an orderly leave
 * changes the view at once; a crash, when its session expires (--zk-session-ms).
 *
 * The watcher only records and signals (docs/architecture.md's rule for ZooKeeper
 * callbacks); every call is the thread's. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zookeeper.h>

#include "stockd.h"

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool changed, stop, started;
    pthread_t thread;
    const stockd_config *cfg;
    char node[sizeof(((stockd_config *)0)->route_members) + STOCKD_ADDR_MAX + 1];
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void discard_log(const char *message) {
    (void)message;
}

/* Any event (the session's, or the children's watch) asks the thread to look again. */
static void on_event(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    (void)zh, (void)type, (void)state, (void)path, (void)ctx;
    pthread_mutex_lock(&P.mu);
    P.changed = true;
    pthread_cond_signal(&P.cv);
    pthread_mutex_unlock(&P.mu);
}

static zhandle_t *connect_zk(void) {
    zhandle_t *zh =
        zookeeper_init2(P.cfg->zk, on_event, (int)P.cfg->zk_session_ms, NULL, NULL, 0, discard_log);
    if (zh && P.cfg->zk_auth[0])
        (void)zoo_add_auth(zh, "digest", P.cfg->zk_auth, (int)strlen(P.cfg->zk_auth), NULL, NULL);
    return zh;
}

static struct ACL_vector *acl(void) {
    return P.cfg->zk_auth[0] ? &ZOO_CREATOR_ALL_ACL : &ZOO_OPEN_ACL_UNSAFE;
}

/* Our node, in this session: made, or a stale one of an earlier session of ours (a
 * restart within the session timeout) replaced. ZOK or the error. */
static int join(zhandle_t *zh) {
    struct Stat st;
    int rc;
    char path[sizeof(P.node)];
    /* The parent and each of its ancestors, made if missing (another instance may make
     * them at the same moment: ZNODEEXISTS is fine). */
    snprintf(path, sizeof(path), "%s", P.cfg->route_members);
    for (char *slash = strchr(path + 1, '/');; slash = strchr(slash + 1, '/')) {
        if (slash) *slash = '\0';
        (void)zoo_create(zh, path, NULL, -1, acl(), ZOO_PERSISTENT, NULL, 0);
        if (!slash) break;
        *slash = '/';
    }
    const char *self = stockd_route_self();
    rc = zoo_create(zh, P.node, self, (int)strlen(self), acl(), ZOO_EPHEMERAL, NULL, 0);
    if (rc == ZNODEEXISTS && zoo_exists(zh, P.node, 0, &st) == ZOK &&
        st.ephemeralOwner != zoo_client_id(zh)->client_id) {
        (void)zoo_delete(zh, P.node, -1);
        rc = zoo_create(zh, P.node, self, (int)strlen(self), acl(), ZOO_EPHEMERAL, NULL, 0);
    }
    return rc == ZNODEEXISTS ? ZOK : rc;
}

/* Reads the children (watched again) into route.c's view. ZOK or the error. */
static int read_view(zhandle_t *zh) {
    struct String_vector kids = {0};
    struct Stat st;
    int rc = zoo_wget_children2(zh, P.cfg->route_members, on_event, NULL, &kids, &st);
    if (rc != ZOK) return rc;
    const char *addrs[STOCKD_PEERS_MAX];
    size_t n = 0;
    for (int i = 0; i < kids.count && n < STOCKD_PEERS_MAX; i++)
        addrs[n++] = kids.data[i];
    stockd_route_set_members(addrs, n, (uint64_t)(uint32_t)st.cversion);
    deallocate_String_vector(&kids);
    return ZOK;
}

static void *peers_main(void *arg) {
    (void)arg;
    zhandle_t *zh = connect_zk();
    bool joined = false;
    pthread_mutex_lock(&P.mu);
    while (!P.stop) {
        P.changed = false;
        pthread_mutex_unlock(&P.mu);
        int state = zh ? zoo_state(zh) : 0;
        if (!zh || state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
            /* A new session: the old one's node is gone (or going) with it. */
            if (zh) zookeeper_close(zh);
            zh = connect_zk();
            joined = false;
        } else if (state == ZOO_CONNECTED_STATE) {
            if (!joined && join(zh) == ZOK) joined = true;
            if (joined && read_view(zh) != ZOK) joined = false;
        }
        pthread_mutex_lock(&P.mu);
        /* Events wake it; the timed wait covers a session that is still connecting. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        while (!P.changed && !P.stop && pthread_cond_timedwait(&P.cv, &P.mu, &ts) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&P.mu);
    /* Closing the session deletes our node at once: an orderly leave. */
    if (zh) zookeeper_close(zh);
    return NULL;
}

int stockd_peers_start(const stockd_config *cfg, char *err, size_t errlen) {
    P.cfg = cfg;
    const char *m = cfg->route_members;
    if (m[0] != '/' || strlen(m) < 2 || m[strlen(m) - 1] == '/' || strstr(m, "//")) {
        snprintf(err, errlen, "--route-members must be an absolute ZooKeeper path, got '%s'", m);
        return -1;
    }
    snprintf(P.node, sizeof(P.node), "%s/%s", m, stockd_route_self());
    if (pthread_create(&P.thread, NULL, peers_main, NULL) != 0) {
        snprintf(err, errlen, "cannot start the membership thread");
        return -1;
    }
    P.started = true;
    return 0;
}

void stockd_peers_stop(void) {
    if (!P.started) return;
    pthread_mutex_lock(&P.mu);
    P.stop = true;
    pthread_cond_signal(&P.cv);
    pthread_mutex_unlock(&P.mu);
    pthread_join(P.thread, NULL);
    P.started = false;
}
