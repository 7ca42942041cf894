/* lock_watches_test: waiting leaves no watches behind.
 *   1. Two sessions with three threads each take one fair lock many times, some
 *      with a tiny timeout so that waiters give up; once everything is released
 *      the server's watch count (`wchs`) must be back where it started, while the
 *      sessions are still open (closing them would drop their watches anyway).
 *   2. A waiter whose connection breaks while it waits lists again and watches its
 *      predecessor anew; it must not keep the watch it had before. Its session goes
 *      through the tests' fault proxy (tests/support/fault_proxy_zk.h): the
 *      holder keeps the lock, the waiter's connection is cut once while it
 *      waits, and the waiter times out. Then the connection is cut once more: on reconnecting, the
 * client sets again at the server every watch it still has, so the server's count, with the holder
 * still holding, must be what it was before the waiter came. */
#include <pthread.h>
#include <stdio.h>

#include "fault_proxy_zk.h"
#include "lock_test.h"

#define SESSIONS 2
#define THREADS  3
#define ROUNDS   40

static zklock_session *sess[SESSIONS];
static const char *name;

static void *worker(void *arg) {
    int i = (int)(intptr_t)arg;
    zklock_session *s = sess[i % SESSIONS];
    for (int r = 0; r < ROUNDS; r++) {
        zklock_hold *h = NULL;
        int timeout = (r % 4 == 3) ? 2 : 30000; /* every 4th gives up quickly */
        int rc = zklock_acquire(s, name, ZKLOCK_FAIR, timeout, &h);
        if (rc == LOCK_ERR_TIMEOUT) continue;
        if (rc != LOCK_OK) CHECK_FAIL_("acquire: %s", zklock_strerror(rc));
        lt_sleep_ms(1);
        CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    }
    return NULL;
}

static uint64_t data_ops(zklock_session *s) {
    zklock_stats st;
    zklock_get_stats(s, &st);
    return st.op_get_data;
}

/* Waits up to 10 s for cond; fails the test with `what` if it never holds. */
#define WAIT_FOR(cond, what)                                                                       \
    do {                                                                                           \
        int64_t end_ = lt_now_ms() + 10000;                                                        \
        while (!(cond) && lt_now_ms() < end_)                                                      \
            lt_sleep_ms(20);                                                                       \
        if (!(cond)) CHECK_FAIL_("timed out waiting for %s", what);                                \
    } while (0)

static void reconnect_case(const char *hosts) {
    char lname[160];
    snprintf(lname, sizeof(lname), "%s_reconnect", name);
    zklock_session *holder = lt_session(hosts, 0);
    zklock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(holder, lname, ZKLOCK_FAIR, 10000, &h));
    fp_zk *p = fp_zk_start(hosts);
    CHECK(p != NULL);
    zklock_session *ws = lt_session(fp_zk_hosts(p), 10000);
    long before = lt_total_watches(hosts);
    CHECK_INT_GE(before, 0);

    lt_acquire_run w = {.s = ws, .name = lname, .timeout_ms = 5000};
    uint64_t d0 = data_ops(ws);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, lt_acquire_main, &w) == 0);
    WAIT_FOR(data_ops(ws) == d0 + 1, "the waiter's watch");
    fp_zk_sever(p, 0);
    WAIT_FOR(data_ops(ws) == d0 + 2, "the waiter's watch after reconnection");
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, w.rc);
    CHECK_INT_EQ(d0 + 2, data_ops(ws)); /* it watched twice, then gave up */

    fp_zk_sever(p, 0);
    WAIT_FOR(fp_zk_connections(p) == 3 && zklock_session_status(ws) == LOCK_OK,
             "the third connection");
    long after = -1;
    for (int64_t end = lt_now_ms() + 3000; lt_now_ms() < end; lt_sleep_ms(100))
        if ((after = lt_total_watches(hosts)) == before) break;
    printf("reconnection: watches before the waiter=%ld, after it gave up and reconnected=%ld\n",
           before, after);
    CHECK_INT_EQ(before, after);

    CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    zklock_session_free(ws);
    fp_zk_stop(p);
    zklock_session_free(holder);
}

int main(void) {
    const char *hosts = lt_zk_hosts();
    name = lt_lock_name("watches");
    for (int i = 0; i < SESSIONS; i++)
        sess[i] = lt_session(hosts, 0);
    long before = lt_total_watches(hosts);
    CHECK_INT_GE(before, 0);

    pthread_t t[SESSIONS * THREADS];
    for (int i = 0; i < SESSIONS * THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < SESSIONS * THREADS; i++)
        pthread_join(t[i], NULL);

    /* Watch events travel asynchronously; give the last ones a moment. */
    long after = -1;
    for (int64_t end = lt_now_ms() + 5000; lt_now_ms() < end; lt_sleep_ms(100))
        if ((after = lt_total_watches(hosts)) == before) break;
    uint64_t events = 0, acquired = 0, timeouts = 0;
    for (int i = 0; i < SESSIONS; i++) {
        zklock_stats st;
        zklock_get_stats(sess[i], &st);
        events += st.watch_events;
        acquired += st.acquired;
        timeouts += st.timeouts;
    }
    printf("watches before=%ld after=%ld; acquired=%llu timeouts=%llu watch_events=%llu\n", before,
           after, (unsigned long long)acquired, (unsigned long long)timeouts,
           (unsigned long long)events);
    CHECK_INT_GT(events, 0); /* there was contention, so watches were set */
    CHECK_INT_EQ(before, after);
    for (int i = 0; i < SESSIONS; i++)
        zklock_session_free(sess[i]);

    reconnect_case(hosts);
    printf("ok\n");
    return 0;
}
