/* lock_ops_test: the fair lock costs the recipe's minimum of ZooKeeper operations,
 * counted by zklock_stats (every operation the library sends):
 *   - uncontended, acquire + release = 3 (create, list, delete);
 *   - a waiter whose predecessor is the lowest node (the holder) = 4 (create, list,
 *     watch the holder, delete): the holder's deletion alone hands it the lock;
 *   - a waiter further back = 5: when its predecessor goes, it lists once more.
 * Each contender has its own session, so each one's counters are its own. */
#include <pthread.h>
#include <stdio.h>

#include "lock_test.h"

typedef struct contender {
    zklock_session *s;
    const char *name;
    int rc;
    zklock_hold *h;
} contender;

static void *take(void *arg) {
    contender *c = arg;
    c->rc = zklock_acquire(c->s, c->name, ZKLOCK_FAIR, 20000, &c->h);
    if (c->rc == LOCK_OK) c->rc = zklock_release(c->h); /* only its owner may */
    return NULL;
}

int main(void) {
    const char *hosts = lt_zk_hosts();
    zhandle_t *zh = lt_zk_open(hosts);
    zklock_session *a = lt_session(hosts, 0), *b = lt_session(hosts, 0), *c = lt_session(hosts, 0);

    /* Uncontended. The parent is made first by a throwaway acquisition, so the
     * count is the steady state, not the one-off creation of the container. */
    const char *name = lt_lock_name("ops");
    zklock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(a, name, ZKLOCK_FAIR, 10000, &h));
    CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    uint64_t before = lt_ops(a);
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(a, name, ZKLOCK_FAIR, 10000, &h));
    CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    CHECK_INT_EQ(3, lt_ops(a) - before);

    /* A holds; B queues right behind it, C behind B. */
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(a, name, ZKLOCK_FAIR, 10000, &h));
    uint64_t b0 = lt_ops(b), c0 = lt_ops(c);
    contender cb = {.s = b, .name = name}, cc = {.s = c, .name = name};
    pthread_t tb, tc;
    CHECK(pthread_create(&tb, NULL, take, &cb) == 0);
    CHECK(lt_wait_children(zh, name, 2, 10));
    CHECK(pthread_create(&tc, NULL, take, &cc) == 0);
    CHECK(lt_wait_children(zh, name, 3, 10));
    /* Wait until both have listed the children and sent their watch (3 operations
     * each so far): C's listing then holds A and B, B's only A. */
    for (int i = 0; i < 200 && (lt_ops(b) - b0 < 3 || lt_ops(c) - c0 < 3); i++)
        lt_sleep_ms(50);
    CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    pthread_join(tb, NULL);
    CHECK_INT_EQ(LOCK_OK, cb.rc);
    pthread_join(tc, NULL);
    CHECK_INT_EQ(LOCK_OK, cc.rc);
    printf("ops: uncontended 3, behind the holder %llu, behind a waiter %llu\n",
           (unsigned long long)(lt_ops(b) - b0), (unsigned long long)(lt_ops(c) - c0));
    CHECK_INT_EQ(4, lt_ops(b) - b0);
    CHECK_INT_EQ(5, lt_ops(c) - c0);

    zklock_session_free(a);
    zklock_session_free(b);
    zklock_session_free(c);
    zookeeper_close(zh);
    return 0;
}
