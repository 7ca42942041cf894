/* lock_view_test: lock_view_read (lock.h) shows what the lock service holds.
 *   1. zk: a holder and two waiters, each through its own session (a set of its own,
 *      named by lock_config.owner), queue on one fair lock. The view from one
 *      waiter's set lists the three nodes in their order, each with the instance that
 *      made it, the first one holding and each other one watching the node before
 *      it, and marks only that waiter's node as its own. Once all have let go the
 *      lock is free again.
 *   2. redis: a lease held through one set shows in another's view with the holder's
 *      token and a lease left of at most lease_ms; once released, the lock is free.
 *      etcd: a holder and a waiter show in order, with their instances, the waiter
 *      watching the holder, and the holder's lease left.
 *   3. A bad name is LOCK_ERR_ARGS, and a kind without a lock service has no view.
 *   4. zk on a lock_config.path at the top ("/lvt_<unique>_{id}", as the articles'
 *      /product_{id}): the lock product_X lives at the template's path and the herd's
 *      node beside it. Another implementation's node there (kazoo's "__lock__" name,
 *      made by a plain client) holds: a try is busy and the view names it kazoo, while a
 *      child of no recipe is a stray that blocks nobody. Once it goes, the try holds. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock.h"
#include "lock_test.h"

static lock_set *set_of(const char *kind, const char *addr, const char *owner) {
    lock_config cfg = {.addr = addr,
                       .timeout_ms = 20000,
                       .lease_ms = 10000,
                       .session_ms = 10000,
                       .holders = 4,
                       .owner = owner};
    lock_set *s = NULL;
    char err[256];
    int rc = lock_set_new(lock_kind_find(kind), &cfg, &s, err, sizeof(err));
    if (rc != LOCK_OK) CHECK_FAIL_("lock_set_new(%s, %s): %s", kind, addr, err);
    return s;
}

typedef struct waiter {
    lock_set *s;
    const char *name;
    int rc;
} waiter;

/* Waits for the lock, holds it for a moment, lets go. */
static void *wait_main(void *arg) {
    waiter *w = arg;
    lock_hold h;
    w->rc = lock_acquire(w->s, w->name, &h);
    if (w->rc == LOCK_OK) {
        lt_sleep_ms(10);
        w->rc = lock_release(&h);
    }
    return NULL;
}

static void zk_case(void) {
    const char *hosts = lt_zk_hosts();
    char name[128];
    snprintf(name, sizeof(name), "%s", lt_lock_name("view"));
    lock_set *h = set_of("zk", hosts, "inst-h"), *a = set_of("zk", hosts, "inst-a"),
             *b = set_of("zk", hosts, "inst-b");
    zhandle_t *zh = lt_zk_open(hosts);
    lock_hold held;
    CHECK_INT_EQ(LOCK_OK, lock_acquire(h, name, &held));

    /* The waiters queue one after the other, so their order is known. */
    waiter wa = {.s = a, .name = name}, wb = {.s = b, .name = name};
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, wait_main, &wa) == 0);
    CHECK_INT_EQ(1, lt_wait_children(zh, name, 2, 10));
    CHECK(pthread_create(&tb, NULL, wait_main, &wb) == 0);
    CHECK_INT_EQ(1, lt_wait_children(zh, name, 3, 10));

    lock_view v;
    CHECK_INT_EQ(LOCK_OK, lock_view_read(a, name, &v));
    CHECK(v.queue && !v.lease);
    CHECK_INT_EQ(3, (long long)v.total);
    CHECK_INT_EQ(3, (long long)v.n);
    const char *owners[3] = {"inst-h", "inst-a", "inst-b"};
    for (int i = 0; i < 3; i++) {
        CHECK_STR_EQ(owners[i], v.e[i].owner);
        CHECK_INT_EQ(i - 1, v.e[i].watches);
        CHECK_INT_EQ(i == 1, v.e[i].ours);
        if (i) CHECK_INT_GT(v.e[i].seq, v.e[i - 1].seq);
    }
    char want[300];
    snprintf(want, sizeof(want), "/stock/locks/%s", name);
    CHECK_STR_EQ(want, v.path);

    CHECK_INT_EQ(LOCK_OK, lock_release(&held));
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK_INT_EQ(LOCK_OK, wa.rc);
    CHECK_INT_EQ(LOCK_OK, wb.rc);
    CHECK_INT_EQ(LOCK_OK, lock_view_read(b, name, &v));
    CHECK_INT_EQ(0, (long long)v.n);
    CHECK_INT_EQ(0, (long long)v.total);

    CHECK_INT_EQ(LOCK_ERR_ARGS, lock_view_read(a, "bad/name", &v));
    zookeeper_close(zh);
    lock_set_free(h);
    lock_set_free(a);
    lock_set_free(b);
}

static void redis_case(void) {
    const char *addr = getenv("STOCKD_TEST_REDIS");
    if (!addr || !*addr) SKIP("STOCKD_TEST_REDIS is not set (run through ctest)");
    char name[128];
    snprintf(name, sizeof(name), "%s", lt_lock_name("view_redis"));
    lock_set *one = set_of("redis", addr, "inst-1"), *two = set_of("redis", addr, "inst-2");
    lock_view v;
    CHECK_INT_EQ(LOCK_OK, lock_view_read(two, name, &v));
    CHECK(v.lease && !v.queue);
    CHECK_INT_EQ(0, (long long)v.n);
    CHECK_INT_EQ(-1, v.lease_ms);

    lock_hold held;
    CHECK_INT_EQ(LOCK_OK, lock_acquire(one, name, &held));
    CHECK_INT_EQ(LOCK_OK, lock_view_read(two, name, &v));
    CHECK_INT_EQ(1, (long long)v.n);
    CHECK_INT_EQ(lock_token(&held), v.e[0].token);
    CHECK_INT_GT(v.lease_ms, 0);
    CHECK_INT_LE(v.lease_ms, 10000);
    CHECK_INT_EQ(-1, v.e[0].watches);

    CHECK_INT_EQ(LOCK_OK, lock_release(&held));
    CHECK_INT_EQ(LOCK_OK, lock_view_read(two, name, &v));
    CHECK_INT_EQ(0, (long long)v.n);
    lock_set_free(one);
    lock_set_free(two);
}

/* etcd: a holder and a waiter of two sets; the view lists both keys in their order with
 * their instances, the waiter watching the holder, and the holder's lease left. */
static void etcd_case(void) {
    const char *addr = getenv("STOCKD_TEST_ETCD");
    if (!addr || !*addr) SKIP("STOCKD_TEST_ETCD is not set (run through ctest)");
    char name[128];
    snprintf(name, sizeof(name), "%s", lt_lock_name("view_etcd"));
    lock_set *h = set_of("etcd", addr, "inst-e1"), *w = set_of("etcd", addr, "inst-e2");
    lock_view v;
    CHECK_INT_EQ(LOCK_OK, lock_view_read(w, name, &v));
    CHECK(v.queue && v.lease);
    CHECK_INT_EQ(0, (long long)v.n);

    lock_hold held;
    CHECK_INT_EQ(LOCK_OK, lock_acquire(h, name, &held));
    waiter ww = {.s = w, .name = name};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, wait_main, &ww) == 0);
    int64_t end = lt_now_ms() + 10000;
    do {
        CHECK_INT_EQ(LOCK_OK, lock_view_read(h, name, &v));
        if (v.n < 2) lt_sleep_ms(20);
    } while (v.n < 2 && lt_now_ms() < end);
    CHECK_INT_EQ(2, (long long)v.total);
    CHECK_STR_EQ("inst-e1", v.e[0].owner);
    CHECK_STR_EQ("inst-e2", v.e[1].owner);
    CHECK_INT_EQ(-1, v.e[0].watches);
    CHECK_INT_EQ(0, v.e[1].watches);
    CHECK_INT_GT(v.e[1].seq, v.e[0].seq);
    CHECK_INT_GT(v.lease_ms, 0);
    CHECK_INT_LE(v.lease_ms, 10000);

    CHECK_INT_EQ(LOCK_OK, lock_release(&held));
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_OK, ww.rc);
    CHECK_INT_EQ(LOCK_OK, lock_view_read(h, name, &v));
    CHECK_INT_EQ(0, (long long)v.n);
    lock_set_free(h);
    lock_set_free(w);
}

static lock_set *set_at(const char *kind, const char *hosts, const char *path) {
    lock_config cfg = {.addr = hosts,
                       .timeout_ms = 20000,
                       .session_ms = 10000,
                       .holders = 2,
                       .owner = "inst-p",
                       .path = path};
    lock_set *s = NULL;
    char err[256];
    if (lock_set_new(lock_kind_find(kind), &cfg, &s, err, sizeof(err)) != LOCK_OK)
        CHECK_FAIL_("lock_set_new(%s, path %s): %s", kind, path, err);
    return s;
}

static void path_case(void) {
    const char *hosts = lt_zk_hosts();
    char tmpl[160], parent[200], name[200], node[300];
    snprintf(tmpl, sizeof(tmpl), "/lvt_%s_{id}", lt_lock_name("p"));
    snprintf(name, sizeof(name), "product_7");
    snprintf(parent, sizeof(parent), "%.*s7", (int)(strlen(tmpl) - 4), tmpl);
    zhandle_t *zh = lt_zk_open(hosts);
    lock_set *fair = set_at("zk", hosts, tmpl), *herd = set_at("zk-herd", hosts, tmpl);

    lock_hold h;
    CHECK_INT_EQ(LOCK_OK, lock_acquire(fair, name, &h));
    CHECK_INT_EQ(ZOK, zoo_exists(zh, parent, 0, NULL));
    lock_view v;
    CHECK_INT_EQ(LOCK_OK, lock_view_read(fair, name, &v));
    CHECK_STR_EQ(parent, v.path);
    CHECK_STR_EQ("stockd", v.e[0].impl);
    CHECK_INT_EQ(LOCK_OK, lock_release(&h));
    lock_hold hh;
    CHECK_INT_EQ(LOCK_OK, lock_acquire(herd, name, &hh));
    snprintf(node, sizeof(node), "%s-herd", parent);
    CHECK_INT_EQ(ZOK, zoo_exists(zh, node, 0, NULL));
    CHECK_INT_EQ(LOCK_OK, lock_release(&hh));

    /* kazoo's node holds; a stray is no contender. */
    zoo_create(zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, NULL, 0);
    char want[300], made[300];
    snprintf(want, sizeof(want), "%s/0123456789abcdef0123456789abcdef__lock__", parent);
    CHECK_INT_EQ(ZOK, zoo_create(zh, want, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
                                 made, sizeof(made)));
    snprintf(node, sizeof(node), "%s/keeper", parent);
    CHECK_INT_EQ(ZOK, zoo_create(zh, node, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0));
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, lock_try_acquire(fair, name, &h));
    CHECK_INT_EQ(LOCK_OK, lock_view_read(fair, name, &v));
    CHECK_INT_EQ(1, (long long)v.total);
    CHECK_INT_EQ(1, (long long)v.strays);
    CHECK_STR_EQ("kazoo", v.e[0].impl);
    CHECK_INT_EQ(ZOK, zoo_delete(zh, made, -1));
    CHECK_INT_EQ(LOCK_OK, lock_try_acquire(fair, name, &h));
    CHECK_INT_EQ(LOCK_OK, lock_release(&h));
    CHECK_INT_EQ(ZOK, zoo_delete(zh, node, -1));
    lock_set_free(fair);
    lock_set_free(herd);
    zookeeper_close(zh);
}

int main(void) {
    zk_case();
    path_case();
    redis_case();
    etcd_case();
    lock_set *local = set_of("local", NULL, "x");
    CHECK(!lock_can_view(local));
    lock_view v;
    CHECK_INT_EQ(LOCK_ERR_ARGS, lock_view_read(local, "product_1", &v));
    lock_set_free(local);
    printf("ok: lock_view_test\n");
    return 0;
}
