/* lock_fair_order_test: contenders that enqueue in a known order acquire the fair
 * lock in that order. A holder takes the lock; contender i starts only once the
 * node of contender i-1 is in the queue (seen from outside through a plain
 * ZooKeeper handle); when the holder releases, the order of acquisition must be
 * 0, 1, ..., K-1. Each contender has its own session, as separate processes would. */
#include <pthread.h>
#include <stdio.h>

#include "lock_test.h"

#define K 6

static const char *hosts, *name;
static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
static int order[K], norder;

static void *contender(void *arg) {
    int id = (int)(intptr_t)arg;
    zklock_session *s = lt_session(hosts, 0);
    zklock_hold *h = NULL;
    int rc = zklock_acquire(s, name, ZKLOCK_FAIR, 60000, &h);
    if (rc != LOCK_OK) CHECK_FAIL_("contender %d: %s", id, zklock_strerror(rc));
    pthread_mutex_lock(&order_mu);
    order[norder++] = id;
    pthread_mutex_unlock(&order_mu);
    lt_sleep_ms(5);
    CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    zklock_session_free(s);
    return NULL;
}

int main(void) {
    hosts = lt_zk_hosts();
    name = lt_lock_name("fair_order");
    zhandle_t *zh = lt_zk_open(hosts);
    zklock_session *s = lt_session(hosts, 0);

    zklock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(s, name, ZKLOCK_FAIR, 10000, &h));
    pthread_t t[K];
    for (int i = 0; i < K; i++) {
        CHECK(pthread_create(&t[i], NULL, contender, (void *)(intptr_t)i) == 0);
        /* Queue position i+1 (after the holder) belongs to contender i. */
        if (!lt_wait_children(zh, name, i + 2, 30))
            CHECK_FAIL_("contender %d did not enqueue: %d children", i, lt_children(zh, name));
    }
    CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    for (int i = 0; i < K; i++)
        pthread_join(t[i], NULL);

    CHECK_INT_EQ(K, norder);
    for (int i = 0; i < K; i++) {
        printf("acquisition %d: contender %d\n", i, order[i]);
        CHECK_INT_EQ(i, order[i]);
    }
    CHECK_INT_LE(lt_children(zh, name), 0); /* empty, or already reaped */
    zklock_session_free(s);
    zookeeper_close(zh);
    printf("ok\n");
    return 0;
}
