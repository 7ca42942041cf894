/* zklock_kind.c: the ZooKeeper locks as two kinds of the registry (lock.h), "zk" (the
 * fair lock) and "zk-herd" (the herd lock). A set is one zklock_session; a hold is a
 * zklock_hold, whose czxid is the fencing token and whose session state is the
 * pre-commit check. The codes are zklock's own, which are lock_codes.h's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock.h"
#include "zklock.h"

typedef struct zk_set {
    zklock_session *s;
    zklock_kind kind;
    int timeout_ms;
    char root[200]; /* the template's directory ("/" at the top) */
    char pre[200];  /* its last segment before {id} */
    char post[200]; /* ... and after */
} zk_set;

/* lock_config.path, split into the session's root and the lock's name around {id}. */
static int zk_path_parse(zk_set *z, const char *path) {
    const char *last = strrchr(path, '/'), *id = strstr(path, "{id}");
    if (path[0] != '/' || !id || id < last) return LOCK_ERR_ARGS;
    snprintf(z->root, sizeof(z->root), "%.*s", last == path ? 1 : (int)(last - path), path);
    snprintf(z->pre, sizeof(z->pre), "%.*s", (int)(id - last - 1), last + 1);
    snprintf(z->post, sizeof(z->post), "%s", id + 4);
    return LOCK_OK;
}

/* The zklock name of the lock `name`: "product_X" as the template has it. */
static const char *zk_name(const zk_set *z, const char *name, char *buf, size_t cap) {
    if (strncmp(name, "product_", 8) != 0) return name;
    int n = snprintf(buf, cap, "%s%s%s", z->pre, name + 8, z->post);
    return n >= 0 && (size_t)n < cap ? buf : ""; /* "" is no name: LOCK_ERR_ARGS */
}

static int zk_set_new(const lock_kind *k, const lock_config *cfg, void **set, char *err,
                      size_t errcap) {
    char auth[1100] = "";
    zk_set *z = calloc(1, sizeof(*z));
    if (!z) return LOCK_ERR_NOMEM;
    z->kind = *(const zklock_kind *)k->arg;
    z->timeout_ms = cfg->timeout_ms;
    if (zk_path_parse(z, cfg->path ? cfg->path : "/stock/locks/product_{id}") != LOCK_OK) {
        snprintf(err, errcap, "bad ZooKeeper lock path '%s'", cfg->path);
        free(z);
        return LOCK_ERR_ARGS;
    }
    if (cfg->password && cfg->password[0])
        snprintf(auth, sizeof(auth), "%s%s%s", cfg->user ? cfg->user : "",
                 cfg->user && cfg->user[0] ? ":" : "", cfg->password);
    zklock_session_config zc = {.hosts = cfg->addr,
                                .root = z->root,
                                .session_timeout_ms = cfg->session_ms,
                                .connect_timeout_ms = 10000,
                                .auth = auth[0] ? auth : NULL,
                                .peer = cfg->peer,
                                .cache = cfg->cache,
                                .owner = cfg->owner};
    int rc = zklock_session_new(&zc, &z->s);
    memset(auth, 0, sizeof(auth));
    if (rc == LOCK_ERR_ARGS && cfg->peer && cfg->peer[0] && !zc.auth) {
        snprintf(err, errcap, "a peer ACL (%s) needs ZooKeeper credentials of our own", cfg->peer);
        free(z);
        return rc;
    }
    if (rc != LOCK_OK) {
        snprintf(err, errcap, "cannot connect to ZooKeeper at %s: %s",
                 cfg->addr ? cfg->addr : "(none)", zklock_strerror(rc));
        free(z);
        return rc;
    }
    *set = z;
    return LOCK_OK;
}

static void zk_set_cancel(void *set) {
    zklock_session_cancel(((zk_set *)set)->s);
}

static void zk_set_free(void *set) {
    zk_set *z = set;
    zklock_session_free(z->s);
    free(z);
}

static int zk_acquire(void *set, const char *name, void **hold) {
    zk_set *z = set;
    zklock_hold *h = NULL;
    char buf[256];
    int rc = zklock_acquire(z->s, zk_name(z, name, buf, sizeof(buf)), z->kind, z->timeout_ms, &h);
    *hold = h;
    return rc;
}

/* Timeout 0: one round (a cache hit sends nothing); a node that is not first is
 * deleted before the call returns. */
static int zk_try_acquire(void *set, const char *name, void **hold) {
    zk_set *z = set;
    zklock_hold *h = NULL;
    char buf[256];
    int rc = zklock_acquire(z->s, zk_name(z, name, buf, sizeof(buf)), z->kind, 0, &h);
    *hold = h;
    return rc;
}

/* Many tries at once: one round trip for those not cached (zklock_try_many). */
static int zk_try_acquire_many(void *set, const char *const *names, size_t n, void **holds,
                               int *rcs) {
    zk_set *z = set;
    zklock_hold *h[ZKLOCK_MANY_MAX];
    if (n > ZKLOCK_MANY_MAX) return LOCK_ERR_ARGS;
    char bufs[ZKLOCK_MANY_MAX][256];
    const char *zn[ZKLOCK_MANY_MAX] = {0};
    for (size_t i = 0; i < n; i++)
        zn[i] = zk_name(z, names[i], bufs[i], sizeof(bufs[i]));
    int held = zklock_try_many(z->s, zn, (int)n, z->kind, h, rcs);
    for (size_t i = 0; i < n; i++)
        holds[i] = held >= 0 ? h[i] : NULL;
    return held;
}

static void zk_release_many(void **holds, size_t n, int max_ms, int *rcs) {
    zklock_hold *h[ZKLOCK_MANY_MAX];
    for (size_t i = 0; i < n && i < ZKLOCK_MANY_MAX; i++)
        h[i] = holds[i];
    (void)zklock_release_many(h, (int)n, max_ms, rcs);
}

static int zk_check(const void *hold) {
    return zklock_check(hold);
}

static int64_t zk_token(const void *hold) {
    return zklock_token(hold);
}

static int zk_release(void *hold) {
    return zklock_release(hold);
}

static int zk_release_cached(void *hold, int max_ms) {
    return zklock_release_cached(hold, max_ms);
}

/* The session's state: it never waits, so /health can ask. */
static int zk_ping(void *set, char *err, size_t errcap) {
    int rc = zklock_session_status(((zk_set *)set)->s);
    if (rc != LOCK_OK) snprintf(err, errcap, "%s", zklock_strerror(rc));
    return rc;
}

static void zk_stats(void *set, lock_stats *out) {
    zklock_stats st;
    zklock_get_stats(((zk_set *)set)->s, &st);
    out->acquired = st.acquired;
    out->timeouts = st.timeouts;
    out->suspect = st.suspect_events;
    out->lost = st.lost_events;
    out->expirations = st.expirations;
    out->seq_limit = st.seq_limit;
    out->watch_events = st.watch_events;
    out->cache_hits = st.cache_hits;
    out->cache_parks = st.cache_parks;
    out->cache_let_go_contender = st.cache_let_go_contender;
    out->cache_let_go_timeout = st.cache_let_go_timeout;
    out->cache_let_go_other = st.cache_let_go_other;
    out->round_trips = st.round_trips;
    out->batched_tries = st.batched_tries;
    out->op[0].name = "create";
    out->op[0].n = st.op_create;
    out->op[1].name = "delete";
    out->op[1].n = st.op_delete;
    out->op[2].name = "get_children";
    out->op[2].n = st.op_get_children;
    out->op[3].name = "get_data";
    out->op[3].n = st.op_get_data;
    out->ops = st.op_create + st.op_delete + st.op_get_children + st.op_get_data;
}

static int zk_view(void *set, const char *name, lock_view *out) {
    zk_set *z = set;
    char buf[256];
    return zklock_view(z->s, zk_name(z, name, buf, sizeof(buf)), z->kind, out);
}

static const zklock_kind zk_fair = ZKLOCK_FAIR, zk_herd = ZKLOCK_HERD;

#define ZK_KIND(NAME, ARG)                                                                         \
    {                                                                                              \
        .name = (NAME), .service = "zookeeper", .fence_kind = LOCK_FENCE_ZOOKEEPER,                \
        .flags = LOCK_KIND_SESSION,                                                                \
        .down_message = "ZooKeeper is unavailable; nothing was deducted", .arg = (ARG),            \
        .set_new = zk_set_new, .set_cancel = zk_set_cancel, .set_free = zk_set_free,               \
        .acquire = zk_acquire, .check = zk_check, .token = zk_token, .release = zk_release,        \
        .release_cached = zk_release_cached, .try_acquire = zk_try_acquire, .ping = zk_ping,       \
        .try_acquire_many = zk_try_acquire_many, .release_many = zk_release_many,                  \
        .stats = zk_stats, .view = zk_view,                                                        \
    }

const lock_kind zklock_kind_fair = ZK_KIND("zk", &zk_fair);
const lock_kind zklock_kind_herd = ZK_KIND("zk-herd", &zk_herd);
