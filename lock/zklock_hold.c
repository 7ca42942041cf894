/* zklock_hold.c: a hold of zklock.h and its end: its state as zklock_check reports it,
 * its fencing token, the deletion of its node (zklock_release, and the let-go of a
 * cached hold), and the small helpers of lock names, GUIDs and paths that the recipes
 * (zklock.c, zklock_many.c) and the cache (zklock_cache.c) share. It calls only
 * zklock_conn.c (zklock_int.h gives the layers). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "zklock_int.h"

/* ---------------------------------------------------------------- helpers */

int zklock__new_guid(char out[ZKLOCK_GUID_LEN + 1]) {
    unsigned char raw[ZKLOCK_GUID_LEN / 2];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[ZKLOCK_GUID_LEN] = '\0';
    return 0;
}

/* A lock name is one path segment of printable ASCII. "-herd" is reserved as the
 * suffix of the herd lock's node, which lives beside the fair locks' parents. */
int zklock__name_valid(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 200 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return 0;
    if (n >= 5 && strcmp(name + n - 5, "-herd") == 0) return 0;
    for (const char *p = name; *p; p++)
        if (*p <= ' ' || *p >= 127 || *p == '/') return 0;
    return 1;
}

char *zklock__join(const char *a, const char *b, const char *suffix) {
    size_t n = strlen(a) + 1 + strlen(b) + strlen(suffix) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s%s", a, b, suffix);
    return p;
}

static int zklock_map_zk(int rc) {
    return zklock__zk_retryable(rc) ? LOCK_ERR_CONNECTION : LOCK_ERR_SERVER;
}

int zklock__hold_state_locked(const zklock_hold *h) {
    zklock_conn *c = h->s->conn;
    if (h->lost || c->epoch != h->epoch || c->state == ZKLOCK_CONN_EXPIRED) return LOCK_LOST;
    int zs = zoo_state(c->zh);
    if (zs == ZOO_EXPIRED_SESSION_STATE || zs == ZOO_AUTH_FAILED_STATE) return LOCK_LOST;
    if (c->state != ZKLOCK_CONN_CONNECTED || zs != ZOO_CONNECTED_STATE) return LOCK_SUSPECT;
    return LOCK_OK;
}

void zklock__hold_free(zklock_hold *h) {
    if (!h) return;
    free(h->name);
    free(h->parent);
    free(h->path);
    free(h);
}

/* ---------------------------------------------------------------- hold */

int zklock_check(const zklock_hold *h) {
    if (!h) return LOCK_ERR_ARGS;
    pthread_mutex_lock(&h->s->mu);
    int rc = zklock__hold_state_locked(h);
    pthread_mutex_unlock(&h->s->mu);
    return rc;
}

int64_t zklock_token(const zklock_hold *h) {
    return h ? h->token : 0;
}

/* Deletes the node of a hold through c. Returns a zk code. */
static int zklock_hold_delete(zklock_hold *h, zklock_conn *c) {
    zklock_session *s = h->s;
    if (h->kind == ZKLOCK_FAIR && h->sweep) {
        /* A lost create may have a late twin with our GUID, even behind our node
         * (requests can be reordered across a reconnection): delete all of them. */
        zklock_cleanup e = {.epoch = h->epoch, .kind = ZKLOCK_FAIR, .path = h->parent};
        memcpy(e.guid, h->guid, sizeof(e.guid));
        return zklock__cleanup_run(c, &e);
    }
    if (h->kind == ZKLOCK_FAIR) {
        zklock__count_op(s, ZKLOCK_OP_DELETE);
        int rc = zoo_delete(c->zh, h->path, -1);
        return rc == ZNONODE ? ZOK : rc;
    }
    /* The herd node's name is shared: delete it only while it is still the node
     * we made (same czxid, our session), never a successor's. */
    struct Stat st;
    zklock__count_op(s, ZKLOCK_OP_DATA);
    int rc = zoo_exists(c->zh, h->path, 0, &st);
    if (rc == ZNONODE) return ZOK;
    if (rc != ZOK) return rc;
    if (st.czxid != h->token || st.ephemeralOwner != c->session_id) return ZOK;
    zklock__count_op(s, ZKLOCK_OP_DELETE);
    rc = zoo_delete(c->zh, h->path, st.version);
    return rc == ZNONODE || rc == ZBADVERSION ? ZOK : rc;
}

/* Deletes the node of a hold that is no longer in s->holds and frees the hold (mu not
 * held). Returns what zklock_release documents. */
int zklock__hold_let_go(zklock_hold *h) {
    zklock_session *s = h->s;
    pthread_mutex_lock(&s->mu);
    int state = zklock__hold_state_locked(h);
    zklock_conn *c = NULL;
    int rc = LOCK_LOST;
    if (state != LOCK_LOST) rc = zklock__conn_get_locked(s, NULL, 0, &c);
    pthread_mutex_unlock(&s->mu);

    if (rc == LOCK_OK) {
        int zrc = zklock_hold_delete(h, c);
        zklock__conn_put(s, c);
        if (zrc != ZOK) {
            rc = zklock_map_zk(zrc);
            if (zklock__zk_retryable(zrc))
                zklock__cleanup_queue(s, h->epoch, h->kind,
                                      h->kind == ZKLOCK_FAIR ? h->parent : h->path, h->guid);
        }
    } else if (rc != LOCK_LOST) {
        /* Disconnected (SUSPECT): the node must go once we are back, else it would
         * block the lock for as long as our session lives (CURATOR-678). */
        rc = LOCK_ERR_CONNECTION;
        zklock__cleanup_queue(s, h->epoch, h->kind, h->kind == ZKLOCK_FAIR ? h->parent : h->path,
                              h->guid);
    }
    zklock__hold_free(h);
    return rc;
}

int zklock_release(zklock_hold *h) {
    if (!h) return LOCK_ERR_ARGS;
    if (!pthread_equal(h->owner, pthread_self())) return LOCK_ERR_NOT_OWNER;
    zklock_session *s = h->s;

    pthread_mutex_lock(&s->mu);
    if (--h->count > 0) {
        pthread_mutex_unlock(&s->mu);
        return LOCK_OK;
    }
    /* Unlinked first: the own-node watch that our delete fires finds no hold. */
    for (zklock_hold **p = &s->holds; *p; p = &(*p)->next) {
        if (*p == h) {
            *p = h->next;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return zklock__hold_let_go(h);
}
