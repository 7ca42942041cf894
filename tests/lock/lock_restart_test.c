/* lock_restart_test: an acquisition whose node keeps vanishing from the listing
 * ends at its deadline, and leaves no node behind. The session goes through the
 * tests' fault proxy with its ZooKeeper hook (tests/support/fault_proxy_zk.h),
 * which makes the two cases that send the fair lock back to making a new node:
 *   1. every listing comes back empty (as if our node had been deleted each time):
 *      the acquisition starts over and over, and must still end with
 *      LOCK_ERR_TIMEOUT at its deadline, every node it made deleted;
 *   2. the name of our node, as the create's reply gives it, does not parse (the
 *      form ZooKeeper prints once a parent's sequence passes 2^31): the
 *      acquisition must fail with LOCK_ERR_SERVER rather than make node after node,
 *      and the node it made must be deleted (by its GUID, as its name is unknown).
 * The acquisition runs on a thread; if it has not returned long after its deadline
 * the test fails and says how many nodes it left. */
#include <pthread.h>
#include <stdio.h>

#include "fault_proxy_zk.h"
#include "lock_test.h"

typedef struct run {
    zklock_session *s;
    const char *name;
    int timeout_ms;
    pthread_mutex_t mu;
    int done, rc;
} run;

static void *acquire_main(void *arg) {
    run *r = arg;
    zklock_hold *h = NULL;
    int rc = zklock_acquire(r->s, r->name, ZKLOCK_FAIR, r->timeout_ms, &h);
    if (rc == LOCK_OK) zklock_release(h);
    pthread_mutex_lock(&r->mu);
    r->rc = rc;
    r->done = 1;
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Acquires `name` with timeout_ms on a thread; fails the test if it has not
 * returned after guard_s seconds. Returns its result. */
static int acquire_guarded(zklock_session *s, zhandle_t *zh, const char *name, int timeout_ms,
                           int guard_s) {
    run r = {.s = s, .name = name, .timeout_ms = timeout_ms};
    pthread_mutex_init(&r.mu, NULL);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, acquire_main, &r) == 0);
    int done = 0;
    for (int64_t end = lt_now_ms() + guard_s * 1000; !done && lt_now_ms() < end;) {
        lt_sleep_ms(50);
        pthread_mutex_lock(&r.mu);
        done = r.done;
        pthread_mutex_unlock(&r.mu);
    }
    if (!done)
        CHECK_FAIL_("acquire(%s, %d ms) still running after %d s; %d nodes under it", name,
                    timeout_ms, guard_s, lt_children(zh, name));
    pthread_join(t, NULL);
    pthread_mutex_destroy(&r.mu);
    return r.rc;
}

int main(void) {
    const char *hosts = lt_zk_hosts();
    const char *base = lt_lock_name("restart");
    char hidden[128], mangled[128];
    snprintf(hidden, sizeof(hidden), "%s_hidden", base);
    snprintf(mangled, sizeof(mangled), "%s_mangled", base);
    zhandle_t *zh = lt_zk_open(hosts);
    fp_zk *p = fp_zk_start(hosts);
    CHECK(p != NULL);
    zklock_session *s = lt_session(fp_zk_hosts(p), 10000);

    /* 1. Our node is never in the listing. */
    fp_zk_hide_children(p, 1);
    int rc = acquire_guarded(s, zh, hidden, 1000, 20);
    fp_zk_hide_children(p, 0);
    printf("listing without our node: %s\n", zklock_strerror(rc));
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, rc);
    CHECK_INT_LE(lt_children(zh, hidden), 0); /* none left (or the parent reaped) */

    /* 2. Our node's name does not parse. */
    fp_zk_mangle_create(p, 1);
    rc = acquire_guarded(s, zh, mangled, 1000, 20);
    fp_zk_mangle_create(p, 0);
    printf("unparsable node name: %s\n", zklock_strerror(rc));
    CHECK_INT_EQ(LOCK_ERR_SERVER, rc);
    CHECK_INT_LE(lt_children(zh, mangled), 0);

    /* The session is still usable. */
    zklock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(s, mangled, ZKLOCK_FAIR, 10000, &h));
    CHECK_INT_EQ(LOCK_OK, zklock_release(h));

    zklock_session_free(s);
    fp_zk_stop(p);
    zookeeper_close(zh);
    printf("ok\n");
    return 0;
}
