/* lock_many_test: many fair locks tried and released in one round trip
 * (zklock_try_many, zklock_release_many) on a real ZooKeeper.
 *   - k free locks in one call: all held, tokens > 0 and distinct, one round trip
 *     (zklock_stats.round_trips) for the k creates and k listings; one node each;
 *     released together in one more round trip, and no node is left;
 *   - some names held by another session: those are LOCK_ERR_TIMEOUT (what a single
 *     try returns), the others held; two round trips (the busy nodes' deletes go
 *     together), and the busy locks' parents hold only the other session's node;
 *   - the cache: holds released with max_ms are kept without an operation, and the next
 *     call gets them back as cache hits (same tokens) with no operation and no round
 *     trip; a call mixing a cached name and a new one costs one round trip;
 *   - reentry (a name this thread holds) raises the count without an operation;
 *   - a repeated name is refused (LOCK_ERR_ARGS) with nothing held;
 *   - a create's reply lost in the wave (the fault proxy): that name is
 *     LOCK_ERR_CONNECTION and, once reconnected, no node of the wave is left. */
#include <stdio.h>
#include <string.h>

#include "fault_proxy_zk.h"
#include "lock_test.h"

#define K 8

int main(void) {
    const char *hosts = lt_zk_hosts();
    zhandle_t *zh = lt_zk_open(hosts);
    zklock_session *a = lt_session(hosts, 6000), *b = lt_session(hosts, 6000);
    char buf[K][128];
    const char *names[K];
    for (int i = 0; i < K; i++) {
        char p[16];
        snprintf(p, sizeof(p), "many%d", i);
        snprintf(buf[i], sizeof(buf[i]), "%s", lt_lock_name(p));
        names[i] = buf[i];
    }
    zklock_hold *h[K];
    int rcs[K];
    /* The names' parents are made here, persistent, so that the server's reaping of
     * empty containers (within about a second in the test stack) does not add the
     * parent's round trip to the counts below; phase 0 shows that one. */
    for (int i = 0; i < K; i++) {
        char path[200];
        snprintf(path, sizeof(path), "/stock/locks/%s", names[i]);
        int zrc = zoo_create(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
        CHECK(zrc == ZOK || zrc == ZNODEEXISTS);
    }

    /* 0. Names whose parents do not exist: one more round trip makes them. */
    char fbuf[2][128];
    const char *fresh[2];
    for (int i = 0; i < 2; i++) {
        snprintf(fbuf[i], sizeof(fbuf[i]), "%s", lt_lock_name(i ? "manyfresh1" : "manyfresh0"));
        fresh[i] = fbuf[i];
    }
    zklock_stats s0 = lt_stats(a);
    CHECK_INT_EQ(2, zklock_try_many(a, fresh, 2, ZKLOCK_FAIR, h, rcs));
    zklock_stats s1 = lt_stats(a);
    CHECK_INT_EQ(2, s1.round_trips - s0.round_trips);
    CHECK_INT_EQ(1, lt_children(zh, fresh[0]));
    CHECK_INT_EQ(1, lt_children(zh, fresh[1]));
    CHECK(zklock_token(h[0]) > 0 && zklock_token(h[1]) > 0);
    CHECK_INT_EQ(LOCK_OK, zklock_release_many(h, 2, 0, rcs));
    CHECK(lt_wait_children(zh, fresh[0], 0, 10));

    /* 1. K free locks: one round trip, distinct tokens. */
    s0 = lt_stats(a);
    CHECK_INT_EQ(K, zklock_try_many(a, names, K, ZKLOCK_FAIR, h, rcs));
    s1 = lt_stats(a);
    CHECK_INT_EQ(1, s1.round_trips - s0.round_trips);
    CHECK_INT_EQ(K, s1.batched_tries - s0.batched_tries);
    CHECK_INT_EQ(K, s1.op_create - s0.op_create);
    CHECK_INT_EQ(K, s1.op_get_children - s0.op_get_children);
    CHECK_INT_EQ(K, s1.acquired - s0.acquired);
    for (int i = 0; i < K; i++) {
        CHECK_INT_EQ(LOCK_OK, rcs[i]);
        CHECK_INT_EQ(LOCK_OK, zklock_check(h[i]));
        CHECK_INT_GT(zklock_token(h[i]), 0);
        for (int j = 0; j < i; j++)
            CHECK(zklock_token(h[i]) != zklock_token(h[j]));
        CHECK_INT_EQ(1, lt_children(zh, names[i]));
    }
    /* They are really held: another session's single try finds each one busy. */
    zklock_hold *other = NULL;
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, zklock_acquire(b, names[3], ZKLOCK_FAIR, 0, &other));
    s0 = lt_stats(a);
    CHECK_INT_EQ(LOCK_OK, zklock_release_many(h, K, 0, rcs));
    s1 = lt_stats(a);
    CHECK_INT_EQ(1, s1.round_trips - s0.round_trips);
    CHECK_INT_EQ(K, s1.op_delete - s0.op_delete);
    for (int i = 0; i < K; i++) {
        CHECK_INT_EQ(LOCK_OK, rcs[i]);
        CHECK(lt_wait_children(zh, names[i], 0, 10));
    }

    /* 2. A mix: b holds the even names. */
    zklock_hold *bh[K] = {0};
    for (int i = 0; i < K; i += 2)
        CHECK_INT_EQ(LOCK_OK, zklock_acquire(b, names[i], ZKLOCK_FAIR, 5000, &bh[i]));
    s0 = lt_stats(a);
    CHECK_INT_EQ(K / 2, zklock_try_many(a, names, K, ZKLOCK_FAIR, h, rcs));
    s1 = lt_stats(a);
    CHECK_INT_EQ(2, s1.round_trips - s0.round_trips); /* the tries, then the busy deletes */
    CHECK_INT_EQ(K / 2, s1.op_delete - s0.op_delete);
    CHECK_INT_EQ(K / 2, s1.timeouts - s0.timeouts);
    for (int i = 0; i < K; i++) {
        if (i % 2 == 0) {
            CHECK_INT_EQ(LOCK_ERR_TIMEOUT, rcs[i]);
            CHECK(h[i] == NULL);
            CHECK_INT_EQ(1, lt_children(zh, names[i])); /* b's node only: ours is gone */
            CHECK_INT_EQ(LOCK_OK, zklock_check(bh[i]));
        } else {
            CHECK_INT_EQ(LOCK_OK, rcs[i]);
            CHECK_INT_GT(zklock_token(h[i]), 0);
        }
    }
    CHECK_INT_EQ(LOCK_OK, zklock_release_many(h, K, 0, rcs)); /* NULL entries skipped */
    CHECK_INT_EQ(LOCK_OK, zklock_release_many(bh, K, 0, NULL));
    for (int i = 0; i < K; i++)
        CHECK(lt_wait_children(zh, names[i], 0, 10));

    /* 3. The cache: a session that caches (config.cache: the listing sets the watch). */
    zklock_session_config cc = {
        .hosts = hosts, .session_timeout_ms = 6000, .connect_timeout_ms = 10000, .cache = 1};
    zklock_session *c = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_session_new(&cc, &c));
    int64_t tok[3];
    CHECK_INT_EQ(3, zklock_try_many(c, names, 3, ZKLOCK_FAIR, h, rcs));
    for (int i = 0; i < 3; i++)
        tok[i] = zklock_token(h[i]);
    uint64_t o0 = lt_ops(c);
    s0 = lt_stats(c);
    CHECK_INT_EQ(LOCK_OK, zklock_release_many(h, 3, 60000, rcs));
    s1 = lt_stats(c);
    CHECK_INT_EQ(0, lt_ops(c) - o0); /* kept, the watch armed already: no operation */
    CHECK_INT_EQ(3, s1.cache_parks - s0.cache_parks);
    for (int i = 0; i < 3; i++)
        CHECK_INT_EQ(1, lt_children(zh, names[i]));
    s0 = lt_stats(c);
    CHECK_INT_EQ(3, zklock_try_many(c, names, 3, ZKLOCK_FAIR, h, rcs));
    s1 = lt_stats(c);
    CHECK_INT_EQ(0, lt_ops(c) - o0);
    CHECK_INT_EQ(0, s1.round_trips - s0.round_trips);
    CHECK_INT_EQ(3, s1.cache_hits - s0.cache_hits);
    for (int i = 0; i < 3; i++)
        CHECK(zklock_token(h[i]) == tok[i]);
    CHECK_INT_EQ(LOCK_OK, zklock_release_many(h, 3, 60000, rcs));
    /* names[2] cached, names[3] new: one round trip for the new one only. */
    s0 = lt_stats(c);
    CHECK_INT_EQ(2, zklock_try_many(c, names + 2, 2, ZKLOCK_FAIR, h, rcs));
    s1 = lt_stats(c);
    CHECK_INT_EQ(1, s1.round_trips - s0.round_trips);
    CHECK_INT_EQ(1, s1.batched_tries - s0.batched_tries);
    CHECK_INT_EQ(1, s1.cache_hits - s0.cache_hits);
    CHECK(zklock_token(h[0]) == tok[2]);
    CHECK(zklock_token(h[1]) > 0 && zklock_token(h[1]) != tok[2]);
    CHECK_INT_EQ(LOCK_OK, zklock_release_many(h, 2, 0, rcs));
    /* A contender queues for a cached name: the cache lets it go, and b gets it. */
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(b, names[0], ZKLOCK_FAIR, 10000, &other));
    CHECK_INT_EQ(LOCK_OK, zklock_release(other));
    zklock_session_free(c); /* the cached names[1] goes with it */
    for (int i = 0; i < 4; i++)
        CHECK(lt_wait_children(zh, names[i], 0, 10));

    /* 4. Reentry: no operation, the same hold. */
    zklock_hold *mine = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(a, names[5], ZKLOCK_FAIR, 5000, &mine));
    o0 = lt_ops(a);
    CHECK_INT_EQ(2, zklock_try_many(a, names + 4, 2, ZKLOCK_FAIR, h, rcs));
    CHECK(h[1] == mine);
    CHECK_INT_EQ(2, lt_ops(a) - o0); /* names[4]'s create and listing only */
    CHECK_INT_EQ(LOCK_OK, zklock_release_many(h, 2, 0, rcs));
    CHECK_INT_EQ(1, lt_children(zh, names[5])); /* the outer level still holds */
    CHECK_INT_EQ(LOCK_OK, zklock_release(mine));
    CHECK(lt_wait_children(zh, names[5], 0, 10));

    /* 5. A repeated name: nothing tried. */
    const char *dup[2] = {names[6], names[6]};
    o0 = lt_ops(a);
    CHECK_INT_EQ(LOCK_ERR_ARGS, zklock_try_many(a, dup, 2, ZKLOCK_FAIR, h, rcs));
    CHECK(h[0] == NULL && h[1] == NULL);
    CHECK_INT_EQ(LOCK_ERR_ARGS, rcs[0]);
    CHECK_INT_EQ(0, lt_ops(a) - o0);

    /* 6. A create's reply lost in the wave (the fault proxy forwards the first create,
     *    swallows its reply and cuts): that name is LOCK_ERR_CONNECTION, nothing
     *    waits, and once the session is back every node the wave made and did not hold
     *    is deleted (by GUID for the lost one): no orphan. */
    fp_zk *p = fp_zk_start(hosts);
    CHECK(p != NULL);
    zklock_session *f = lt_session(fp_zk_hosts(p), 10000);
    const char *three[3] = {names[1], names[6], names[7]};
    fp_zk_lose_next_create_reply(p, 0);
    int held = zklock_try_many(f, three, 3, ZKLOCK_FAIR, h, rcs);
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, rcs[0]);
    CHECK(h[0] == NULL);
    printf("lost reply: %d of 3 held (%d %d %d)\n", held, rcs[0], rcs[1], rcs[2]);
    (void)zklock_release_many(h, 3, 0, NULL);
    for (int i = 0; i < 3; i++)
        CHECK(lt_wait_children(zh, three[i], 0, 20));
    zklock_session_free(f);
    fp_zk_stop(p);

    zklock_session_free(a);
    zklock_session_free(b);
    for (int i = 0; i < K; i++) {
        char path[200];
        snprintf(path, sizeof(path), "/stock/locks/%s", names[i]);
        (void)zoo_delete(zh, path, -1);
    }
    zookeeper_close(zh);
    printf("lock_many_test: ok\n");
    return 0;
}
