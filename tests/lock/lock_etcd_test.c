/* lock_etcd_test: the contract of the etcd lock library (etcdlock_int.h) against a real etcd (the
 * fixture's).
 *   - endpoint lists are parsed strictly; nothing listening gives LOCK_ERR_CONNECTION;
 *     a list whose first member is down is served by the next;
 *   - mutual exclusion: 2 processes x 3 threads, a handle each, on one name: never two
 *     in the critical section (a counter in shared memory), every acquisition made;
 *   - FIFO: waiters that queued in the order B, C, D get the lock in that order;
 *   - fencing tokens (create revisions) grow across acquisitions, names and handles;
 *   - timeout: try-once and a bounded wait time out, the wait lasts its timeout, and the
 *     timed-out waiter leaves nothing behind (a try-once after the holder's release
 *     takes the lock at once);
 *   - a waiter sleeps on its watch: woken by the release, with a handful of requests;
 *   - the keep-alive keeps a 2 s lease held for 5 s; without it (no_keepalive) the lease
 *     ends: check() says LOST, another handle takes the lock with a larger token, the
 *     stale holder's release is LOST and leaves the new holder's key alone;
 *   - etcdlock_renew through another thread's handle keeps a lease without the
 *     keep-alive thread, and says LOST once the lease has ended;
 *   - another thread cannot release a hold; a handle cannot take a name twice;
 *   - the cancel flag ends a wait and refuses later acquires;
 *   - etcd going away and coming back (its own, with the same data directory): calls
 *     fail with LOCK_ERR_CONNECTION, the handle works again by itself, and the first
 *     token after the restart is above every token before it. */
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "etcdlock_int.h"
#include "lease_test.h"

static etcdlock *open_lock(const char *ep, int ttl_s, int no_keepalive, const atomic_int *cancel) {
    etcdlock_config c = {
        .endpoints = ep, .ttl_s = ttl_s, .no_keepalive = no_keepalive, .cancel = cancel};
    etcdlock *l = NULL;
    char err[512];
    int rc = etcdlock_new(&c, &l, err, sizeof(err));
    if (rc != LOCK_OK) CHECK_FAIL_("etcdlock_new(%s): %s: %s", ep, etcdlock_strerror(rc), err);
    return l;
}

static void test_config(void) {
    CHECK_INT_EQ(LOCK_OK, etcdlock_parse_endpoints("127.0.0.1:2379"));
    CHECK_INT_EQ(LOCK_OK, etcdlock_parse_endpoints("a:1,b.c:2,127.0.0.1:3"));
    const char *bad[] = {"",     "host", ":1",       "h:",    "h:0", "h:70000",
                         "h:1,", ",h:1", "h:1,,h:2", "h h:1", "h:1x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_INT_EQ(LOCK_ERR_ARGS, etcdlock_parse_endpoints(bad[i]));
    etcdlock *l = (etcdlock *)1;
    etcdlock_config c = {.endpoints = "nope"};
    CHECK_INT_EQ(LOCK_ERR_ARGS, etcdlock_new(&c, &l, NULL, 0));
    CHECK(l == NULL);
    printf("ok: endpoint lists are parsed strictly\n");
}

static void test_unreachable(void) {
    char ep[64], err[512];
    snprintf(ep, sizeof(ep), "127.0.0.1:%s", ls_env("STOCKD_TEST_DEAD_PORT"));
    etcdlock_config c = {.endpoints = ep, .connect_timeout_ms = 500};
    etcdlock *l = NULL;
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, etcdlock_new(&c, &l, err, sizeof(err)));
    CHECK(l == NULL);
    CHECK(strstr(err, ep) != NULL);
    printf("ok: nothing listening: LOCK_ERR_CONNECTION (%s)\n", err);
}

/* A list whose first member is down: every request goes on to the next one. */
static void test_failover(const char *ep) {
    char list[128];
    snprintf(list, sizeof(list), "127.0.0.1:%s,%s", ls_env("STOCKD_TEST_DEAD_PORT"), ep);
    etcdlock_config c = {.endpoints = list, .connect_timeout_ms = 500};
    etcdlock *l = NULL;
    char err[512];
    CHECK_INT_EQ(LOCK_OK, etcdlock_new(&c, &l, err, sizeof(err)));
    etcdlock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(l, ls_name("failover"), 1000, &h));
    CHECK_INT_GT(etcdlock_token(h), 0);
    CHECK_INT_EQ(LOCK_OK, etcdlock_release(h));
    CHECK_INT_EQ(LOCK_OK, etcdlock_ping(l));
    etcdlock_free(l);
    printf("ok: a member list whose first member is down: the next one answers\n");
}

/* ---------------------------------------------------------------- mutual exclusion */

struct shared {
    atomic_int inside, overlaps, done;
};

struct mx_arg {
    const char *ep, *name;
    struct shared *sh;
    int iterations, failures;
};

static void *mx_thread(void *arg) {
    struct mx_arg *a = arg;
    etcdlock *l = open_lock(a->ep, 5, 0, NULL);
    for (int i = 0; i < a->iterations; i++) {
        etcdlock_hold *h = NULL;
        int rc = etcdlock_acquire(l, a->name, 30000, &h);
        if (rc != LOCK_OK) {
            fprintf(stderr, "acquire: %s: %s\n", etcdlock_strerror(rc), etcdlock_errstr(l));
            a->failures++;
            continue;
        }
        if (atomic_fetch_add(&a->sh->inside, 1) != 0) atomic_fetch_add(&a->sh->overlaps, 1);
        ls_sleep_ms(2);
        atomic_fetch_sub(&a->sh->inside, 1);
        atomic_fetch_add(&a->sh->done, 1);
        if (etcdlock_release(h) != LOCK_OK) a->failures++;
    }
    etcdlock_free(l);
    return NULL;
}

/* 3 threads of this process; the number of failed calls. */
static int mx_process(const char *ep, const char *name, struct shared *sh, int iterations) {
    pthread_t t[3];
    struct mx_arg a[3];
    int failures = 0;
    for (int i = 0; i < 3; i++) {
        a[i] = (struct mx_arg){.ep = ep, .name = name, .sh = sh, .iterations = iterations};
        CHECK(pthread_create(&t[i], NULL, mx_thread, &a[i]) == 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        failures += a[i].failures;
    }
    return failures;
}

static void test_mutual_exclusion(const char *ep) {
    enum { ITER = 8 };
    struct shared *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    char name[128];
    snprintf(name, sizeof(name), "%s", ls_name("mutex"));
    int64_t t0 = ls_now_us();
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) _exit(mx_process(ep, name, sh, ITER) == 0 ? 0 : 1);
    int failures = mx_process(ep, name, sh, ITER);
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK_INT_EQ(0, WEXITSTATUS(status));
    CHECK_INT_EQ(0, failures);
    CHECK_INT_EQ(0, atomic_load(&sh->overlaps));
    CHECK_INT_EQ(2 * 3 * ITER, atomic_load(&sh->done));
    printf("ok: 2 processes x 3 threads x %d acquisitions, no overlap (%.1f s)\n", ITER,
           (double)(ls_now_us() - t0) / 1e6);
    munmap(sh, sizeof(*sh));
}

/* ---------------------------------------------------------------- FIFO */

struct fifo_arg {
    const char *ep, *name;
    int id;
    atomic_int *next_slot;
    int slot, rc;
};

static int fifo_order[8];

static void *fifo_thread(void *arg) {
    struct fifo_arg *a = arg;
    etcdlock *l = open_lock(a->ep, 10, 0, NULL);
    etcdlock_hold *h = NULL;
    a->rc = etcdlock_acquire(l, a->name, 30000, &h);
    if (a->rc == LOCK_OK) {
        a->slot = atomic_fetch_add(a->next_slot, 1);
        fifo_order[a->slot] = a->id;
        ls_sleep_ms(50);
        etcdlock_release(h);
    }
    etcdlock_free(l);
    return NULL;
}

static void test_fifo(const char *ep) {
    etcdlock *a = open_lock(ep, 10, 0, NULL);
    const char *name = ls_name("fifo");
    etcdlock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(a, name, 1000, &h));
    atomic_int next = 0;
    struct fifo_arg w[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (struct fifo_arg){.ep = ep, .name = name, .id = i + 1, .next_slot = &next};
        CHECK(pthread_create(&t[i], NULL, fifo_thread, &w[i]) == 0);
        ls_sleep_ms(400); /* queued before the next one starts */
    }
    CHECK_INT_EQ(LOCK_OK, etcdlock_release(h));
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK_INT_EQ(LOCK_OK, w[i].rc);
    }
    for (int i = 0; i < 3; i++)
        CHECK_INT_EQ(i + 1, fifo_order[i]);
    etcdlock_free(a);
    printf("ok: waiters got the lock in the order they queued (1, 2, 3)\n");
}

/* ---------------------------------------------------------------- tokens, timeout */

static void test_tokens_grow(const char *ep) {
    etcdlock *a = open_lock(ep, 5, 0, NULL), *b = open_lock(ep, 5, 0, NULL);
    char n1[128], n2[128];
    snprintf(n1, sizeof(n1), "%s_1", ls_name("tokens"));
    snprintf(n2, sizeof(n2), "%s_2", ls_name("tokens"));
    int64_t last = 0;
    for (int i = 0; i < 10; i++) {
        etcdlock_hold *h = NULL;
        CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(i % 2 ? a : b, i % 3 ? n1 : n2, 1000, &h));
        CHECK_INT_GT(etcdlock_token(h), last);
        last = etcdlock_token(h);
        CHECK_INT_EQ(LOCK_OK, etcdlock_check(h));
        CHECK_INT_EQ(LOCK_OK, etcdlock_release(h));
    }
    etcdlock_free(a);
    etcdlock_free(b);
    printf("ok: 10 tokens grew, last %lld\n", (long long)last);
}

static void test_timeout(const char *ep) {
    etcdlock *a = open_lock(ep, 10, 0, NULL), *b = open_lock(ep, 10, 0, NULL);
    const char *name = ls_name("timeout");
    etcdlock_hold *h = NULL, *h2 = (etcdlock_hold *)1;
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(a, name, 1000, &h));
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, etcdlock_acquire(b, name, 0, &h2));
    CHECK(h2 == NULL);
    int64_t t0 = ls_now_us();
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, etcdlock_acquire(b, name, 300, &h2));
    int64_t waited = ls_now_us() - t0;
    CHECK_INT_GE(waited, 300000);
    CHECK_INT_EQ(LOCK_ERR_ARGS, etcdlock_acquire(a, name, 0, &h2)); /* not reentrant */
    etcdlock_stats st;
    etcdlock_get_stats(b, &st);
    CHECK_INT_EQ(2, st.timeouts);
    CHECK_INT_EQ(LOCK_OK, etcdlock_release(h));
    /* The two timed-out tries took their keys out of the queue: nothing is ahead. */
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(b, name, 0, &h2));
    CHECK_INT_EQ(LOCK_OK, etcdlock_release(h2));
    etcdlock_free(a);
    etcdlock_free(b);
    printf("ok: try-once and 300 ms waits time out (waited %.1f ms) and leave no key\n",
           (double)waited / 1000);
}

struct waiter {
    etcdlock *l;
    const char *name;
    int rc;
    int64_t got_us;
};

static void *wait_thread(void *arg) {
    struct waiter *w = arg;
    etcdlock_hold *h = NULL;
    w->rc = etcdlock_acquire(w->l, w->name, 60000, &h);
    w->got_us = ls_now_us();
    if (h) etcdlock_release(h);
    return NULL;
}

static void test_woken_by_release(const char *ep) {
    etcdlock *a = open_lock(ep, 30, 0, NULL), *b = open_lock(ep, 30, 0, NULL);
    const char *name = ls_name("wakeup");
    etcdlock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(a, name, 1000, &h));
    struct waiter w = {.l = b, .name = name, .rc = 999};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, wait_thread, &w) == 0);
    ls_sleep_ms(700);
    int64_t released = ls_now_us();
    CHECK_INT_EQ(LOCK_OK, etcdlock_release(h));
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_OK, w.rc);
    etcdlock_stats st;
    etcdlock_get_stats(b, &st);
    CHECK_INT_EQ(1, st.wakeups);
    CHECK_INT_EQ(1, st.watches);
    /* grant, txn, range, watch, range, get, delete, revoke: 8 (+1 status at
     * connect, not counted). A polling waiter would have sent dozens in 700 ms. */
    CHECK_INT_LE(st.ops, 9);
    etcdlock_free(a);
    etcdlock_free(b);
    printf("ok: a waiter woken by its watch %.1f ms after the release, %llu requests in all\n",
           (double)(w.got_us - released) / 1000, (unsigned long long)st.ops);
}

/* ---------------------------------------------------------------- leases */

static void test_keepalive_holds(const char *ep) {
    etcdlock *a = open_lock(ep, 2, 0, NULL), *b = open_lock(ep, 2, 0, NULL);
    const char *name = ls_name("keepalive");
    etcdlock_hold *h = NULL, *h2 = NULL;
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(a, name, 1000, &h));
    CHECK_INT_EQ(2, etcdlock_ttl(h));
    ls_sleep_ms(5000);
    CHECK_INT_EQ(LOCK_OK, etcdlock_check(h));
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, etcdlock_acquire(b, name, 0, &h2));
    etcdlock_stats st;
    etcdlock_get_stats(a, &st);
    CHECK_INT_GE(st.keepalives, 5);
    CHECK_INT_EQ(LOCK_OK, etcdlock_release(h));
    etcdlock_free(a);
    etcdlock_free(b);
    printf("ok: the keep-alive held a 2 s lease for 5 s (%llu keep-alives)\n",
           (unsigned long long)st.keepalives);
}

/* A watchdog's thread: its own handle renews another thread's hold `times` times,
 * every gap_ms, and keeps the last code. */
struct renewer {
    const char *ep;
    etcdlock_hold *h;
    int times, gap_ms, rc;
};

static void *renew_thread(void *arg) {
    struct renewer *r = arg;
    etcdlock *via = open_lock(r->ep, 10, 0, NULL);
    for (int i = 0; i < r->times; i++) {
        ls_sleep_ms(r->gap_ms);
        r->rc = etcdlock_renew(via, r->h);
    }
    etcdlock_free(via);
    return NULL;
}

static void test_renew(const char *ep) {
    /* No keep-alive thread: only the other thread's renewals keep the 2 s lease. */
    etcdlock *a = open_lock(ep, 2, 1, NULL), *b = open_lock(ep, 10, 0, NULL);
    const char *name = ls_name("renew");
    etcdlock_hold *h = NULL, *h2 = NULL;
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(a, name, 1000, &h));
    struct renewer r = {.ep = ep, .h = h, .times = 5, .gap_ms = 600, .rc = 999};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, renew_thread, &r) == 0);
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_OK, r.rc);
    CHECK_INT_EQ(LOCK_OK, etcdlock_check(h)); /* 3 s after the grant of a 2 s lease */
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, etcdlock_acquire(b, name, 0, &h2));
    /* Without renewals the lease ends; a renewal then finds it gone. */
    ls_sleep_ms(3000);
    r = (struct renewer){.ep = ep, .h = h, .times = 1, .gap_ms = 0, .rc = 999};
    CHECK(pthread_create(&t, NULL, renew_thread, &r) == 0);
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_LOST, r.rc);
    CHECK_INT_EQ(LOCK_LOST, etcdlock_check(h));
    CHECK_INT_EQ(LOCK_LOST, etcdlock_release(h));
    etcdlock_free(a);
    etcdlock_free(b);
    printf("ok: another handle's renewals kept a 2 s lease for 3 s; once it ended, LOST\n");
}

struct releaser {
    etcdlock_hold *h;
    int rc;
};

static void *release_thread(void *arg) {
    struct releaser *r = arg;
    r->rc = etcdlock_release(r->h);
    return NULL;
}

static void test_lost_lease(const char *ep) {
    etcdlock *a = open_lock(ep, 2, 1, NULL), *b = open_lock(ep, 10, 0, NULL);
    const char *name = ls_name("lost");
    etcdlock_hold *ha = NULL, *hb = NULL;
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(a, name, 1000, &ha));
    CHECK_INT_EQ(LOCK_OK, etcdlock_check(ha));
    struct releaser r = {.h = ha, .rc = 999};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, release_thread, &r) == 0);
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_ERR_NOT_OWNER, r.rc);
    CHECK_INT_EQ(LOCK_OK, etcdlock_check(ha)); /* untouched */

    int64_t t0 = ls_now_us();
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(b, name, 10000, &hb)); /* after a's TTL */
    int64_t waited = ls_now_us() - t0;
    CHECK_INT_GE(waited, 1000000);
    CHECK_INT_EQ(LOCK_LOST, etcdlock_check(ha));
    CHECK_INT_GT(etcdlock_token(hb), etcdlock_token(ha));
    CHECK_INT_EQ(LOCK_LOST, etcdlock_release(ha));
    /* The new holder's key is untouched: a third handle still cannot take it. */
    etcdlock *c = open_lock(ep, 10, 0, NULL);
    etcdlock_hold *hc = NULL;
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, etcdlock_acquire(c, name, 0, &hc));
    CHECK_INT_EQ(LOCK_OK, etcdlock_release(hb));
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(c, name, 0, &hc));
    CHECK_INT_EQ(LOCK_OK, etcdlock_release(hc));
    etcdlock_free(a);
    etcdlock_free(b);
    etcdlock_free(c);
    printf("ok: a lease without keep-alive ends (taken over after %.1f s); the stale release "
           "is LOST and leaves the new holder's key\n",
           (double)waited / 1e6);
}

/* The test's own etcd (under $OWN_REDIS_RUN/etcd, the run directory lease_lock_test.sh
 * gives its own servers), on the test's port +17 (peer +16); the shared one is never
 * stopped. */
static void own_etcd(const char *what, char *ep, size_t cap) {
    int port = atoi(ls_env("STOCKD_TEST_PORTS")) + 17;
    snprintf(ep, cap, "127.0.0.1:%d", port);
    char cmd[1024], portarg[16] = "";
    /* The lab library's etcd_start RUN PORT and etcd_stop RUN. */
    if (strcmp(what, "start") == 0) snprintf(portarg, sizeof(portarg), " %d", port);
    snprintf(cmd, sizeof(cmd), "cd \"%s\" && /usr/bin/python3 -m lab.shell etcd_%s \"%s\"%s",
             ls_env("STOCKD_SRC"), what, ls_env("OWN_REDIS_RUN"), portarg);
    if (system(cmd) != 0) CHECK_FAIL_("%s failed", cmd);
}

static void test_etcd_restart(void) {
    char ep[64];
    own_etcd("start", ep, sizeof(ep));
    etcdlock *l = open_lock(ep, 2, 0, NULL);
    const char *name = ls_name("restart");
    etcdlock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(l, name, 1000, &h));
    int64_t before = etcdlock_token(h);
    own_etcd("stop", ep, sizeof(ep));
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, etcdlock_release(h));
    printf("  release with etcd down: %s\n", etcdlock_errstr(l));
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, etcdlock_acquire(l, name, 1000, &h));
    CHECK(h == NULL);
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, etcdlock_ping(l));
    own_etcd("start", ep, sizeof(ep)); /* the same data directory */
    CHECK_INT_EQ(LOCK_OK, etcdlock_ping(l));
    /* The key the failed release left goes with its lease (2 s, from the restart). */
    int64_t t0 = ls_now_us();
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(l, name, 15000, &h));
    CHECK_INT_GT(etcdlock_token(h), before);
    printf("  token before the restart %lld, after %lld; the orphan key went after %.1f s\n",
           (long long)before, (long long)etcdlock_token(h), (double)(ls_now_us() - t0) / 1e6);
    CHECK_INT_EQ(LOCK_OK, etcdlock_release(h));
    etcdlock_free(l);
    own_etcd("stop", ep, sizeof(ep));
    printf("ok: etcd down gives LOCK_ERR_CONNECTION; back up, the same handle works and tokens "
           "still grow (revisions are on disk)\n");
}

static int acquire_any(void *lock, const char *name, int timeout_ms, void **hold) {
    etcdlock_hold *h = *hold;
    int rc = etcdlock_acquire(lock, name, timeout_ms, &h);
    *hold = h;
    return rc;
}

static void test_cancel(const char *ep) {
    const ls_kind kind = {.acquire = acquire_any, .ok = LOCK_OK, .cancelled = LOCK_ERR_CANCELLED};
    atomic_int cancel = 0;
    etcdlock *a = open_lock(ep, 10, 0, NULL), *b = open_lock(ep, 10, 0, &cancel);
    char free_name[128];
    etcdlock_hold *h = ls_check_cancel(&kind, a, b, &cancel, free_name, sizeof(free_name));
    /* Nothing was queued under the free name: another handle takes it at once. */
    etcdlock_hold *h2 = NULL;
    CHECK_INT_EQ(LOCK_OK, etcdlock_acquire(a, free_name, 0, &h2));
    CHECK_INT_EQ(LOCK_OK, etcdlock_release(h2));
    CHECK_INT_EQ(LOCK_OK, etcdlock_release(h));
    etcdlock_free(a);
    etcdlock_free(b);
    printf("ok: the cancel flag ends a wait and refuses later acquires\n");
}

int main(void) {
    const char *ep = ls_env("STOCKD_TEST_ETCD");
    test_config();
    test_unreachable();
    test_failover(ep);
    test_tokens_grow(ep);
    test_timeout(ep);
    test_woken_by_release(ep);
    test_fifo(ep);
    test_cancel(ep);
    test_mutual_exclusion(ep);
    test_keepalive_holds(ep);
    test_lost_lease(ep);
    test_renew(ep);
    test_etcd_restart();
    printf("ok\n");
    return 0;
}
