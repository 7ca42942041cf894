/* lock_reentrant_test: a thread that takes a lock it holds gets the same hold
 * (same token) with its count raised; the node goes only with the last release;
 * meanwhile another thread cannot take the lock, and cannot release the hold. */
#include <pthread.h>
#include <stdio.h>

#include "lock_test.h"

static zklock_session *s;
static const char *name;
static zklock_hold *shared_hold;
static int other_rc;
static int64_t other_token;

static void *other_try(void *arg) {
    zklock_hold *h = NULL;
    other_rc = zklock_acquire(s, name, ZKLOCK_FAIR, (int)(intptr_t)arg, &h);
    if (other_rc == LOCK_OK) {
        other_token = zklock_token(h);
        CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    }
    return NULL;
}

static void *other_release(void *arg) {
    (void)arg;
    other_rc = zklock_release(shared_hold);
    return NULL;
}

static int run_other(void *(*fn)(void *), int arg) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fn, (void *)(intptr_t)arg) == 0);
    pthread_join(t, NULL);
    return other_rc;
}

int main(void) {
    const char *hosts = lt_zk_hosts();
    name = lt_lock_name("reentrant");
    zhandle_t *zh = lt_zk_open(hosts);
    s = lt_session(hosts, 0);

    zklock_hold *a = NULL, *b = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(s, name, ZKLOCK_FAIR, 10000, &a));
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(s, name, ZKLOCK_FAIR, 10000, &b));
    CHECK(a == b);
    CHECK_INT_EQ(zklock_token(a), zklock_token(b));
    CHECK_INT_GT(zklock_token(a), 0);
    CHECK_INT_EQ(1, lt_children(zh, name));

    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, run_other(other_try, 300));
    shared_hold = a;
    CHECK_INT_EQ(LOCK_ERR_NOT_OWNER, run_other(other_release, 0));

    CHECK_INT_EQ(LOCK_OK, zklock_release(b));
    CHECK_INT_EQ(1, lt_children(zh, name));
    CHECK_INT_EQ(LOCK_OK, zklock_check(a));
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, run_other(other_try, 300));

    int64_t first = zklock_token(a);
    CHECK_INT_EQ(LOCK_OK, zklock_release(a));
    CHECK_INT_EQ(0, lt_children(zh, name));
    CHECK_INT_EQ(LOCK_OK, run_other(other_try, 10000));
    CHECK_INT_GT(other_token, first);

    zklock_stats st;
    zklock_get_stats(s, &st);
    CHECK_INT_EQ(2, st.acquired); /* the reentry is not an acquisition */

    zklock_session_free(s);
    zookeeper_close(zh);
    printf("ok\n");
    return 0;
}
