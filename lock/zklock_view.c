/* zklock_view.c: the ZooKeeper locks' part of lock_view_read (lock.h), what the articles
 * draw with zkCli: the fair lock's ephemeral-sequential children in order, each with
 * the instance that made it (its data, zklock_session_config.owner), the first one
 * holding and every other watching the one before it; the herd lock's one node.
 *
 * A view reads through the session's current connection without waiting for one, and
 * its reads are not counted in the session's operations, which /metrics divides by the
 * deductions. It costs one listing and one read per child listed (at most
 * LOCK_VIEW_MAX). What it returns is a snapshot: a node listed may be gone by the time
 * its data is read, and is then shown without an owner. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock.h"
#include "zklock_int.h"

static int zk_child_cmp(const void *a, const void *b) {
    return zklock__contender_cmp(*(const char *const *)a, *(const char *const *)b);
}

static int zk_view_fair(zklock_conn *c, const char *parent, lock_view *out) {
    struct String_vector kids = {0};
    const char **order = NULL;
    int rc = zoo_get_children(c->zh, parent, 0, &kids);
    if (rc == ZNONODE) return ZOK; /* no contender yet, or the container was reaped */
    if (rc != ZOK) return rc;
    order = calloc(kids.count ? (size_t)kids.count : 1, sizeof(*order));
    if (!order) {
        rc = ZSYSTEMERROR;
        goto out;
    }
    size_t n = 0;
    for (int i = 0; i < kids.count; i++) {
        if (zklock__contender_seq(kids.data[i]))
            order[n++] = kids.data[i];
        else
            out->strays++;
    }
    qsort(order, n, sizeof(*order), zk_child_cmp);
    out->total = n;
    out->n = n < LOCK_VIEW_MAX ? n : LOCK_VIEW_MAX;
    for (size_t i = 0; i < out->n; i++) {
        lock_view_entry *e = &out->e[i];
        char path[512], data[64];
        int len = (int)sizeof(data) - 1;
        struct Stat st;
        snprintf(e->node, sizeof(e->node), "%s", order[i]);
        snprintf(e->impl, sizeof(e->impl), "%s", zklock__contender_impl(order[i]));
        e->seq = zklock__child_seq(order[i]);
        e->at_limit = zklock__seq_at_limit(zklock__contender_seq(order[i]));
        e->watches = (int)i - 1;
        snprintf(path, sizeof(path), "%s/%s", parent, order[i]);
        rc = zoo_get(c->zh, path, 0, data, &len, &st);
        if (rc == ZNONODE) continue;
        if (rc != ZOK) goto out;
        data[len > 0 ? len : 0] = '\0';
        snprintf(e->owner, sizeof(e->owner), "%s", data);
        e->ours = st.ephemeralOwner == c->session_id;
    }
    rc = ZOK;
out:
    free(order);
    deallocate_String_vector(&kids);
    return rc;
}

/* The herd node carries its holder's GUID, not its instance: only our own is named. */
static int zk_view_herd(zklock_session *s, zklock_conn *c, const char *path, lock_view *out) {
    lock_view_entry *e = &out->e[0];
    char data[64];
    int len = (int)sizeof(data) - 1;
    struct Stat st;
    int rc = zoo_get(c->zh, path, 0, data, &len, &st);
    if (rc == ZNONODE) return ZOK; /* free */
    if (rc != ZOK) return rc;
    out->total = out->n = 1;
    snprintf(e->node, sizeof(e->node), "%s", strrchr(path, '/') + 1);
    e->seq = -1;
    e->watches = -1;
    e->ours = st.ephemeralOwner == c->session_id;
    if (e->ours) snprintf(e->owner, sizeof(e->owner), "%s", s->owner);
    return ZOK;
}

int zklock_view(zklock_session *s, const char *name, zklock_kind kind, lock_view *out) {
    zklock_conn *c = NULL;
    if (!s || !name || !zklock__name_valid(name)) return LOCK_ERR_ARGS;
    pthread_mutex_lock(&s->mu);
    int rc = zklock__conn_get_locked(s, NULL, -1, &c);
    pthread_mutex_unlock(&s->mu);
    if (rc != LOCK_OK) return rc;
    out->queue = kind == ZKLOCK_FAIR;
    if (kind == ZKLOCK_FAIR) {
        snprintf(out->path, sizeof(out->path), "%s/%s", s->root, name);
        rc = zk_view_fair(c, out->path, out);
    } else {
        snprintf(out->path, sizeof(out->path), "%s/%s-herd", s->root, name);
        rc = zk_view_herd(s, c, out->path, out);
    }
    zklock__conn_put(s, c);
    return rc == ZOK ? LOCK_OK : zklock__zk_retryable(rc) ? LOCK_ERR_CONNECTION : LOCK_ERR_SERVER;
}
