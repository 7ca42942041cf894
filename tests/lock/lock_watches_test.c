/* lock_watches_test: waiting leaves no watches behind. Two sessions with three
 * threads each take one fair lock many times, some with a tiny timeout so that
 * waiters give up; once everything is released the server's watch count (`wchs`)
 * must be back where it started, while the sessions are still open (closing them
 * would drop their watches anyway). */
#include <pthread.h>
#include <stdio.h>

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
        if (rc == ZKLOCK_ERR_TIMEOUT) continue;
        if (rc != ZKLOCK_OK) CHECK_FAIL_("acquire: %s", zklock_strerror(rc));
        lt_sleep_ms(1);
        CHECK_INT_EQ(ZKLOCK_OK, zklock_release(h));
    }
    return NULL;
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
    printf("ok\n");
    return 0;
}
