/* lock_cache_test: lock caching (zklock_release_cached) on a real ZooKeeper.
 *   - a cached node stays; the next acquisition, also from another thread, gets the same
 *     node and token back without a single ZooKeeper operation (zklock_stats);
 *   - a contender that queues gets the lock within a bounded time: the children watch
 *     makes the session let its cached node go (the time is printed; only a generous
 *     bound, the session timeout, is asserted);
 *   - a contender that queues while a thread has the hold makes its next
 *     release_cached a real release;
 *   - a hold that had to queue behind another contender is not cached;
 *   - a cached node is deleted when its time runs out, when the session is cancelled
 *     (shutdown) and when the session is freed.
 * Each process of the service has one session: here a, b and c stand for three. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "lock_test.h"

#define SESSION_MS 6000

/* A contender on a thread: acquires, notes when, holds for hold_ms, releases. */
typedef struct contender {
    zklock_session *s;
    const char *name;
    int hold_ms;
    int cache; /* release with zklock_release_cached */
    int rc;
    int64_t got_ms;
    int64_t token;
} contender;

static void *contend(void *arg) {
    contender *c = arg;
    zklock_hold *h = NULL;
    c->rc = zklock_acquire(c->s, c->name, ZKLOCK_FAIR, 20000, &h);
    c->got_ms = lt_now_ms();
    if (c->rc != LOCK_OK) return NULL;
    c->token = zklock_token(h);
    if (c->hold_ms) lt_sleep_ms(c->hold_ms);
    c->rc = c->cache ? zklock_release_cached(h, 60000) : zklock_release(h);
    return NULL;
}

/* Waits until session s, whose operations were o0, has queued behind another node:
 * created its node, listed the children and set its watch on the predecessor (3). */
static void wait_queued(zklock_session *s, uint64_t o0) {
    for (int i = 0; i < 500 && lt_ops(s) - o0 < 3; i++)
        lt_sleep_ms(10);
    CHECK_INT_GE(lt_ops(s) - o0, 3);
}

int main(void) {
    const char *hosts = lt_zk_hosts();
    zhandle_t *zh = lt_zk_open(hosts);
    zklock_session *a = lt_session(hosts, SESSION_MS), *b = lt_session(hosts, SESSION_MS);
    char name[128];
    snprintf(name, sizeof(name), "%s", lt_lock_name("cache"));
    zklock_hold *h = NULL;

    /* 1. A hit costs nothing. The first caching arms the watch (one listing); the
     *    hit, the second caching (the watch is still armed) and a hit on another
     *    thread send no operation at all. */
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(a, name, ZKLOCK_FAIR, 10000, &h));
    int64_t token = zklock_token(h);
    uint64_t o0 = lt_ops(a);
    CHECK_INT_EQ(LOCK_OK, zklock_release_cached(h, 60000));
    CHECK_INT_EQ(1, lt_ops(a) - o0);
    CHECK_INT_EQ(1, lt_children(zh, name)); /* the node is kept */
    o0 = lt_ops(a);
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(a, name, ZKLOCK_FAIR, 10000, &h));
    CHECK_INT_EQ(token, zklock_token(h));
    CHECK_INT_EQ(LOCK_OK, zklock_check(h));
    CHECK_INT_EQ(LOCK_OK, zklock_release_cached(h, 60000));
    lt_acquire_run r = {.s = a, .name = name, .timeout_ms = 10000};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, lt_acquire_main, &r) == 0); /* hit, then a real release */
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_OK, r.rc);
    CHECK_INT_EQ(2, lt_stats(a).cache_hits);
    CHECK_INT_EQ(2, lt_stats(a).cache_parks);
    CHECK_INT_EQ(1, lt_ops(a) - o0); /* only the other thread's release: the delete */
    CHECK(lt_wait_children(zh, name, 0, 10));

    /* 2. A contender queues behind a cached node: handed over within a bounded time. */
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(a, name, ZKLOCK_FAIR, 10000, &h));
    token = zklock_token(h);
    CHECK_INT_EQ(LOCK_OK, zklock_release_cached(h, 60000));
    contender cb = {.s = b, .name = name, .hold_ms = 500};
    int64_t t0 = lt_now_ms();
    CHECK(pthread_create(&t, NULL, contend, &cb) == 0);
    /* While b holds, a's acquisition is no hit: its cached node is gone. */
    CHECK(lt_wait_children(zh, name, 1, 10));
    uint64_t hits = lt_stats(a).cache_hits;
    for (int i = 0; i < 100 && lt_stats(a).cache_let_go_contender == 0; i++)
        lt_sleep_ms(20);
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_OK, cb.rc);
    printf("handover: a cached lock reached its contender after %lld ms\n",
           (long long)(cb.got_ms - t0));
    CHECK_INT_LT(cb.got_ms - t0, SESSION_MS);
    CHECK_INT_GT(cb.token, token);
    CHECK_INT_EQ(1, lt_stats(a).cache_let_go_contender);
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(a, name, ZKLOCK_FAIR, 10000, &h));
    CHECK_INT_EQ(hits, lt_stats(a).cache_hits);
    CHECK_INT_GT(zklock_token(h), cb.token);

    /* 3. The contender queues while a thread has the hold (after a hit): the watch
     *    armed at the first caching fires, and release_cached lets the node go. */
    CHECK_INT_EQ(LOCK_OK, zklock_release_cached(h, 60000));
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(a, name, ZKLOCK_FAIR, 10000, &h));
    CHECK_INT_EQ(hits + 1, lt_stats(a).cache_hits);
    uint64_t parks = lt_stats(a).cache_parks;
    contender cb2 = {.s = b, .name = name};
    uint64_t calls = lt_stats(a).cache_callbacks;
    t0 = lt_now_ms();
    CHECK(pthread_create(&t, NULL, contend, &cb2) == 0);
    /* The callback: ZooKeeper told a that b's node came. */
    for (int i = 0; i < 500 && lt_stats(a).cache_callbacks == calls; i++)
        lt_sleep_ms(10);
    CHECK_INT_EQ(calls + 1, lt_stats(a).cache_callbacks);
    CHECK_INT_EQ(LOCK_OK, zklock_release_cached(h, 60000));
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_OK, cb2.rc);
    CHECK_INT_EQ(parks, lt_stats(a).cache_parks); /* not cached */
    printf("handover after a held hit: %lld ms\n", (long long)(cb2.got_ms - t0));

    /* 4. A hold that queued behind another contender's node is released, not
     *    cached, even through release_cached. */
    CHECK(lt_wait_children(zh, name, 0, 10));
    zklock_hold *ha = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(a, name, ZKLOCK_FAIR, 10000, &ha));
    parks = lt_stats(b).cache_parks;
    contender cb3 = {.s = b, .name = name, .cache = 1};
    o0 = lt_ops(b);
    CHECK(pthread_create(&t, NULL, contend, &cb3) == 0);
    wait_queued(b, o0);
    CHECK_INT_EQ(LOCK_OK, zklock_release(ha));
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_OK, cb3.rc);
    CHECK_INT_EQ(parks, lt_stats(b).cache_parks);
    CHECK(lt_wait_children(zh, name, 0, 10));

    /* 4b. With config.cache the acquisition's first listing sets the watch: an
     *     acquisition and its caching cost 2 operations (create, list), a hit 0, and a
     *     contender still gets the lock at once. A second such session that queues
     *     behind it is not cached, and its stray first-listing watch does no harm. */
    zklock_session_config cc = {
        .hosts = hosts, .session_timeout_ms = SESSION_MS, .connect_timeout_ms = 10000, .cache = 1};
    zklock_session *w1 = NULL, *w2 = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_session_new(&cc, &w1));
    CHECK_INT_EQ(LOCK_OK, zklock_session_new(&cc, &w2));
    /* A child that is no lock node keeps the container parent from being reaped
     * (which would cost a create of the parent and a retry), so the count is exact. */
    char keeper[256];
    snprintf(keeper, sizeof(keeper), "/stock/locks/%s/keeper", name);
    char parent[256];
    snprintf(parent, sizeof(parent), "/stock/locks/%s", name);
    int krc = ZNONODE;
    for (int i = 0; i < 10 && krc == ZNONODE; i++) { /* the parent may be reaped meanwhile */
        zoo_create(zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, NULL, 0);
        krc = zoo_create(zh, keeper, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    }
    CHECK_INT_EQ(ZOK, krc);
    o0 = lt_ops(w1);
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(w1, name, ZKLOCK_FAIR, 10000, &h));
    CHECK_INT_EQ(LOCK_OK, zklock_release_cached(h, 60000));
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(w1, name, ZKLOCK_FAIR, 10000, &h));
    CHECK_INT_EQ(LOCK_OK, zklock_release_cached(h, 60000));
    CHECK_INT_EQ(2, lt_ops(w1) - o0);
    CHECK_INT_EQ(ZOK, zoo_delete(zh, keeper, -1)); /* a change of the children: */
    for (int i = 0; i < 500 && lt_stats(w1).cache_let_go_contender == 0; i++)
        lt_sleep_ms(10); /* ... any change lets the cached node go */
    CHECK_INT_EQ(1, lt_stats(w1).cache_let_go_contender);
    CHECK(lt_wait_children(zh, name, 0, 10));
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(w1, name, ZKLOCK_FAIR, 10000, &h));
    CHECK_INT_EQ(LOCK_OK, zklock_release_cached(h, 60000));
    CHECK_INT_EQ(1, lt_stats(w1).cache_hits);
    contender cw = {.s = w2, .name = name};
    t0 = lt_now_ms();
    CHECK(pthread_create(&t, NULL, contend, &cw) == 0);
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_OK, cw.rc);
    printf("handover with the listing's watch: %lld ms\n", (long long)(cw.got_ms - t0));
    CHECK_INT_LT(cw.got_ms - t0, SESSION_MS);
    CHECK_INT_EQ(2, lt_stats(w1).cache_let_go_contender);
    CHECK(lt_wait_children(zh, name, 0, 10));
    /* w2 queues behind w1's held node: its hold is not cached. */
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(w1, name, ZKLOCK_FAIR, 10000, &h));
    contender cw2 = {.s = w2, .name = name, .cache = 1};
    o0 = lt_ops(w2);
    CHECK(pthread_create(&t, NULL, contend, &cw2) == 0);
    wait_queued(w2, o0);
    CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_OK, cw2.rc);
    CHECK_INT_EQ(0, lt_stats(w2).cache_parks);
    CHECK(lt_wait_children(zh, name, 0, 10));
    zklock_session_free(w1);
    zklock_session_free(w2);

    /* 5. Out of time: let go after max_ms. */
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(a, name, ZKLOCK_FAIR, 10000, &h));
    uint64_t timeouts = lt_stats(a).cache_let_go_timeout;
    t0 = lt_now_ms();
    CHECK_INT_EQ(LOCK_OK, zklock_release_cached(h, 300));
    CHECK(lt_wait_children(zh, name, 0, 10));
    printf("a cache of 300 ms was let go after %lld ms\n", (long long)(lt_now_ms() - t0));
    CHECK_INT_EQ(timeouts + 1, lt_stats(a).cache_let_go_timeout);

    /* 6. Shutdown: cancelling the session lets its cached nodes go at once, and
     *    freeing a session deletes them with it. */
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(b, name, ZKLOCK_FAIR, 10000, &h));
    CHECK_INT_EQ(LOCK_OK, zklock_release_cached(h, 60000));
    CHECK_INT_EQ(1, lt_children(zh, name));
    zklock_session_cancel(b);
    CHECK(lt_wait_children(zh, name, 0, 10));
    CHECK_INT_EQ(1, lt_stats(b).cache_let_go_other);
    zklock_session_free(b);

    CHECK_INT_EQ(LOCK_OK, zklock_acquire(a, name, ZKLOCK_FAIR, 10000, &h));
    CHECK_INT_EQ(LOCK_OK, zklock_release_cached(h, 60000));
    CHECK_INT_EQ(1, lt_children(zh, name));
    zklock_session_free(a);
    CHECK(lt_wait_children(zh, name, 0, 10));

    zookeeper_close(zh);
    printf("PASS\n");
    return 0;
}
