/* lock_timeout_test: an acquisition that times out or is cancelled leaves no node
 * behind, for both kinds; after the last release the server reaps the empty
 * container parent (the test server checks containers every second). */
#include <pthread.h>
#include <stdio.h>

#include "lock_test.h"

static const char *name;
static zklock_session *s3;
static int cancel_rc = 999;

static void *blocked_acquire(void *arg) {
    (void)arg;
    zklock_hold *h = NULL;
    cancel_rc = zklock_acquire(s3, name, ZKLOCK_FAIR, -1, &h);
    CHECK(h == NULL);
    return NULL;
}

static int herd_node_exists(zhandle_t *zh, const char *lock) {
    char path[256];
    snprintf(path, sizeof(path), "/stock/locks/%s-herd", lock);
    return zoo_exists(zh, path, 0, NULL) == ZOK;
}

int main(void) {
    const char *hosts = lt_zk_hosts();
    name = lt_lock_name("timeout");
    zhandle_t *zh = lt_zk_open(hosts);
    zklock_session *s1 = lt_session(hosts, 0), *s2 = lt_session(hosts, 0);
    s3 = lt_session(hosts, 0);

    zklock_hold *h1 = NULL, *h2 = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(s1, name, ZKLOCK_FAIR, 10000, &h1));
    CHECK_INT_EQ(1, lt_children(zh, name));

    /* Try once, then a short wait: both time out and remove their node. */
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, zklock_acquire(s2, name, ZKLOCK_FAIR, 0, &h2));
    CHECK(h2 == NULL);
    CHECK_INT_EQ(1, lt_children(zh, name));
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, zklock_acquire(s2, name, ZKLOCK_FAIR, 300, &h2));
    CHECK_INT_EQ(1, lt_children(zh, name));

    /* Cancellation of a waiter that would wait forever. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, blocked_acquire, NULL) == 0);
    CHECK(lt_wait_children(zh, name, 2, 30));
    zklock_session_cancel(s3);
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_ERR_CANCELLED, cancel_rc);
    CHECK_INT_EQ(1, lt_children(zh, name));
    CHECK_INT_EQ(LOCK_ERR_CANCELLED, zklock_acquire(s3, name, ZKLOCK_FAIR, 1000, &h2));

    /* The herd kind: the loser's timeout leaves only the holder's node. */
    char herd_name[128];
    snprintf(herd_name, sizeof(herd_name), "%s_h", name);
    zklock_hold *hh = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(s1, herd_name, ZKLOCK_HERD, 10000, &hh));
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, zklock_acquire(s2, herd_name, ZKLOCK_HERD, 300, &h2));
    CHECK(herd_node_exists(zh, herd_name));
    CHECK_INT_EQ(LOCK_OK, zklock_release(hh));
    CHECK(!herd_node_exists(zh, herd_name));

    zklock_stats st;
    zklock_get_stats(s2, &st);
    CHECK_INT_EQ(3, st.timeouts);
    CHECK_INT_EQ(0, st.acquired);

    CHECK_INT_EQ(LOCK_OK, zklock_release(h1));
    CHECK_INT_EQ(0, lt_children(zh, name));
    if (!lt_wait_parent_gone(zh, name, 90)) CHECK_FAIL_("container parent of %s not reaped", name);

    zklock_session_free(s1);
    zklock_session_free(s2);
    zklock_session_free(s3);
    zookeeper_close(zh);
    printf("ok\n");
    return 0;
}
