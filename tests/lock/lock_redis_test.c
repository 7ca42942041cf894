/* lock_redis_test: the contract of the Redis lease library (redislock_int.h) against a real Redis.
 *   - addresses are parsed strictly; a bad configuration is refused;
 *   - Redis unreachable: redislock_new answers LOCK_ERR_CONNECTION with a reason;
 *   - fencing tokens grow across acquisitions, names and handles;
 *   - a second holder is refused: try-once and a bounded wait both time out, and the
 *     wait lasts at least its timeout;
 *   - a waiter sleeps on the release message: with its poll interval and the holder's
 *     lease both far away, it is woken by the release and sends only a handful of
 *     commands however long it waited (no spinning);
 *   - check() says LOST once the lease has passed; the next holder takes the lock; the
 *     stale holder's release is refused (LOST) and the new holder's key is untouched;
 *   - another thread cannot release a hold; a handle cannot take a name twice;
 *   - the cancel flag, set by another thread, ends a wait with LOCK_ERR_CANCELLED
 *     long before its timeout, and an acquire after it fails without taking the lock;
 *   - Redis going away and coming back: calls fail with LOCK_ERR_CONNECTION (no
 *     crash, no hang), the handle reconnects by itself, and the first token after the
 *     restart is still above every token before it (the clock floor). */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <string.h>

#include "lease_test.h"
#include "redislock_int.h"

static redislock *open_lock(const char *addr, int lease_ms, int poll_ms) {
    redislock_config c = {.addr = addr, .lease_ms = lease_ms, .poll_ms = poll_ms};
    redislock *l = NULL;
    char err[256];
    int rc = redislock_new(&c, &l, err, sizeof(err));
    if (rc != LOCK_OK) CHECK_FAIL_("redislock_new(%s): %s: %s", addr, redislock_strerror(rc), err);
    return l;
}

/* The key's value as Redis has it now ("" if none). */
static void key_value(const char *addr, const char *name, char *out, size_t cap) {
    char host[64];
    int port;
    CHECK_INT_EQ(LOCK_OK, lock_parse_hostport(addr, host, sizeof(host), &port));
    redisContext *c = redisConnect(host, port);
    CHECK(c && !c->err);
    redisReply *r = redisCommand(c, "GET lock:%s", name);
    CHECK(r != NULL);
    snprintf(out, cap, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    redisFree(c);
}

/* lock_parse_hostport's rule itself is lock_face_test's: here, that redislock_new
 * applies it, and refuses a lease inside its own safety margin. */
static void test_config(void) {
    const char *bad[] = {"", "127.0.0.1", ":6379", "127.0.0.1:0", "a b:1", NULL};
    for (int i = 0; bad[i]; i++) {
        redislock *l = (redislock *)1;
        redislock_config c = {.addr = bad[i]};
        CHECK_INT_EQ(LOCK_ERR_ARGS, redislock_new(&c, &l, NULL, 0));
        CHECK(l == NULL);
    }
    redislock *l = (redislock *)1;
    redislock_config c = {.addr = "127.0.0.1:1", .lease_ms = 100, .safety_margin_ms = 100};
    CHECK_INT_EQ(LOCK_ERR_ARGS, redislock_new(&c, &l, NULL, 0));
    CHECK(l == NULL);
    printf("ok: bad addresses and configurations refused\n");
}

static void test_unreachable(void) {
    char addr[64], err[256];
    snprintf(addr, sizeof(addr), "127.0.0.1:%s", ls_env("STOCKD_TEST_DEAD_PORT"));
    redislock_config c = {.addr = addr, .connect_timeout_ms = 1000};
    redislock *l = (redislock *)1;
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, redislock_new(&c, &l, err, sizeof(err)));
    CHECK(l == NULL);
    CHECK(err[0] != '\0');
    printf("ok: unreachable Redis: %s (%s)\n", redislock_strerror(LOCK_ERR_CONNECTION), err);
}

static void test_tokens_grow(const char *addr) {
    redislock *a = open_lock(addr, 0, 0), *b = open_lock(addr, 0, 0);
    char n1[128], n2[128];
    snprintf(n1, sizeof(n1), "%s_1", ls_name("tokens"));
    snprintf(n2, sizeof(n2), "%s_2", ls_name("tokens"));
    int64_t last = 0;
    for (int i = 0; i < 20; i++) {
        redislock_hold *h = NULL;
        CHECK_INT_EQ(LOCK_OK, redislock_acquire(i % 2 ? a : b, i % 3 ? n1 : n2, 1000, &h));
        CHECK_INT_GT(redislock_token(h), last);
        last = redislock_token(h);
        CHECK_INT_EQ(LOCK_OK, redislock_check(h));
        CHECK_INT_EQ(LOCK_OK, redislock_release(h));
    }
    redislock_free(a);
    redislock_free(b);
    printf("ok: 20 tokens grew, last %lld\n", (long long)last);
}

static void test_timeout(const char *addr) {
    redislock *a = open_lock(addr, 0, 0), *b = open_lock(addr, 0, 0);
    const char *name = ls_name("timeout");
    redislock_hold *h = NULL, *h2 = (redislock_hold *)1;
    CHECK_INT_EQ(LOCK_OK, redislock_acquire(a, name, 1000, &h));
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, redislock_acquire(b, name, 0, &h2));
    CHECK(h2 == NULL);
    int64_t t0 = ls_now_us();
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, redislock_acquire(b, name, 300, &h2));
    int64_t waited = ls_now_us() - t0;
    CHECK_INT_GE(waited, 300000);
    CHECK_INT_EQ(LOCK_ERR_ARGS, redislock_acquire(a, name, 0, &h2)); /* not reentrant */
    redislock_stats st;
    redislock_get_stats(b, &st);
    CHECK_INT_EQ(2, st.timeouts);
    CHECK_INT_EQ(LOCK_OK, redislock_release(h));
    redislock_free(a);
    redislock_free(b);
    printf("ok: try-once and 300 ms waits time out (waited %.1f ms)\n", (double)waited / 1000);
}

struct waiter {
    redislock *l;
    const char *name;
    int rc;
};

static void *wait_thread(void *arg) {
    struct waiter *w = arg;
    redislock_hold *h = NULL;
    w->rc = redislock_acquire(w->l, w->name, 60000, &h);
    if (h) redislock_release(h);
    return NULL;
}

static void test_woken_by_release(const char *addr) {
    /* The waiter polls every 20 s and the holder's lease is 30 s: only the release
     * message can wake it within the test. */
    redislock *a = open_lock(addr, 30000, 0), *b = open_lock(addr, 30000, 20000);
    const char *name = ls_name("wakeup");
    redislock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, redislock_acquire(a, name, 1000, &h));
    struct waiter w = {.l = b, .name = name, .rc = 999};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, wait_thread, &w) == 0);
    ls_sleep_ms(700);
    CHECK_INT_EQ(LOCK_OK, redislock_release(h));
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_OK, w.rc);
    redislock_stats st;
    redislock_get_stats(b, &st);
    CHECK_INT_EQ(1, st.wakeups);
    CHECK_INT_EQ(0, st.polls);
    /* try, SUBSCRIBE, try, try after the message, UNSUBSCRIBE, release: 6 (+2 SCRIPT
     * LOADs at connect). A spinning waiter would have sent hundreds in 700 ms. */
    CHECK_INT_LE(st.ops, 8);
    redislock_free(a);
    redislock_free(b);
    printf("ok: a waiter woken by the release message, %llu commands in all\n",
           (unsigned long long)st.ops);
}

/* redislock_acquire for ls_kind. */
static int acquire_any(void *lock, const char *name, int timeout_ms, void **hold) {
    redislock_hold *h = *hold;
    int rc = redislock_acquire(lock, name, timeout_ms, &h);
    *hold = h;
    return rc;
}

static void test_cancel(const char *addr) {
    const ls_kind kind = {.acquire = acquire_any, .ok = LOCK_OK, .cancelled = LOCK_ERR_CANCELLED};
    atomic_int cancel = 0;
    redislock *a = open_lock(addr, 30000, 0);
    redislock_config c = {.addr = addr, .lease_ms = 30000, .poll_ms = 100, .cancel = &cancel};
    redislock *b = NULL;
    CHECK_INT_EQ(LOCK_OK, redislock_new(&c, &b, NULL, 0));
    char free_name[128], v[64];
    redislock_hold *h = ls_check_cancel(&kind, a, b, &cancel, free_name, sizeof(free_name));
    key_value(addr, free_name, v, sizeof(v));
    CHECK_STR_EQ("", v);
    CHECK_INT_EQ(LOCK_OK, redislock_release(h));
    redislock_free(a);
    redislock_free(b);
    printf("ok: the cancel flag ends a wait and refuses later acquires\n");
}

struct releaser {
    redislock_hold *h;
    int rc;
};

static void *release_thread(void *arg) {
    struct releaser *r = arg;
    r->rc = redislock_release(r->h);
    return NULL;
}

static void test_stale_holder(const char *addr) {
    redislock *a = open_lock(addr, 300, 0), *b = open_lock(addr, 10000, 0);
    const char *name = ls_name("stale");
    redislock_hold *ha = NULL, *hb = NULL;
    CHECK_INT_EQ(LOCK_OK, redislock_acquire(a, name, 1000, &ha));
    CHECK_INT_EQ(LOCK_OK, redislock_check(ha));

    struct releaser r = {.h = ha, .rc = 999};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, release_thread, &r) == 0);
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_ERR_NOT_OWNER, r.rc);
    CHECK_INT_EQ(LOCK_OK, redislock_check(ha)); /* untouched */

    CHECK_INT_EQ(LOCK_OK, redislock_acquire(b, name, 5000, &hb)); /* after the lease */
    CHECK_INT_EQ(LOCK_LOST, redislock_check(ha));
    CHECK_INT_GT(redislock_token(hb), redislock_token(ha));
    CHECK_INT_EQ(LOCK_LOST, redislock_release(ha));
    char v[64], want[64];
    key_value(addr, name, v, sizeof(v));
    snprintf(want, sizeof(want), "%lld", (long long)redislock_token(hb));
    CHECK_STR_EQ(want, v);
    CHECK_INT_EQ(LOCK_OK, redislock_release(hb));
    key_value(addr, name, v, sizeof(v));
    CHECK_STR_EQ("", v);
    redislock_free(a);
    redislock_free(b);
    printf("ok: a stale holder's release is refused and leaves the new holder's key\n");
}

/* A watchdog's thread: its own handle renews another thread's hold `times` times,
 * every gap_ms, and keeps the last code. */
struct renewer {
    const char *addr;
    redislock_hold *h;
    int times, gap_ms, rc;
};

static void *renew_thread(void *arg) {
    struct renewer *r = arg;
    redislock *via = open_lock(r->addr, 600, 0);
    for (int i = 0; i < r->times; i++) {
        ls_sleep_ms(r->gap_ms);
        r->rc = redislock_renew(via, r->h);
    }
    redislock_free(via);
    return NULL;
}

/* Issue 20 #3: renewed from another thread, a 600 ms lease outlives 900 ms and keeps
 * out other handles; not renewed, it runs out, and a later renewal is refused without
 * touching the new holder's key or the stale hold's lease clock. */
static void test_renew(const char *addr) {
    redislock *a = open_lock(addr, 600, 0), *b = open_lock(addr, 600, 0);
    const char *name = ls_name("renew");
    redislock_hold *ha = NULL, *hb = NULL;
    CHECK_INT_EQ(LOCK_OK, redislock_acquire(a, name, 1000, &ha));
    struct renewer r = {.addr = addr, .h = ha, .times = 3, .gap_ms = 300, .rc = 999};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, renew_thread, &r) == 0);
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_OK, r.rc);
    CHECK_INT_EQ(LOCK_OK, redislock_check(ha)); /* 900 ms into a 600 ms lease */
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, redislock_acquire(b, name, 0, &hb));

    ls_sleep_ms(700); /* no renewal: the lease runs out */
    CHECK_INT_EQ(LOCK_LOST, redislock_check(ha));
    CHECK_INT_EQ(LOCK_OK, redislock_acquire(b, name, 0, &hb));
    r = (struct renewer){.addr = addr, .h = ha, .times = 1, .gap_ms = 0, .rc = 999};
    CHECK(pthread_create(&t, NULL, renew_thread, &r) == 0);
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_LOST, r.rc);
    CHECK_INT_EQ(LOCK_LOST, redislock_check(ha));
    char v[64], want[64];
    key_value(addr, name, v, sizeof(v));
    snprintf(want, sizeof(want), "%lld", (long long)redislock_token(hb));
    CHECK_STR_EQ(want, v);
    CHECK_INT_EQ(LOCK_LOST, redislock_release(ha));
    CHECK_INT_EQ(LOCK_OK, redislock_release(hb));
    redislock_free(a);
    redislock_free(b);
    printf("ok: a lease renewed from another thread outlives itself; a lost one is not renewed\n");
}

static void own_redis(const char *what) {
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "bash \"%s/tests/lock/own_redis.sh\" %s", ls_env("STOCKD_SRC"),
             what);
    if (system(cmd) != 0) CHECK_FAIL_("%s failed", cmd);
}

static void test_redis_restart(void) {
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%s", ls_env("OWN_REDIS_PORT"));
    own_redis("start");
    redislock *l = open_lock(addr, 10000, 0);
    const char *name = ls_name("restart");
    redislock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, redislock_acquire(l, name, 1000, &h));
    int64_t before = redislock_token(h);
    own_redis("stop");
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, redislock_release(h));
    printf("  release with Redis down: %s (%s)\n", redislock_strerror(LOCK_ERR_CONNECTION),
           redislock_errstr(l));
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, redislock_acquire(l, name, 1000, &h));
    CHECK(h == NULL);
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, redislock_ping(l));
    printf("  acquire with Redis down: %s (%s)\n", redislock_strerror(LOCK_ERR_CONNECTION),
           redislock_errstr(l));
    own_redis("start"); /* empty: no persistence, so the counter starts again */
    CHECK_INT_EQ(LOCK_OK, redislock_ping(l));
    CHECK_INT_EQ(LOCK_OK, redislock_acquire(l, name, 1000, &h));
    CHECK_INT_GT(redislock_token(h), before);
    printf("  token before the restart %lld, after %lld\n", (long long)before,
           (long long)redislock_token(h));
    CHECK_INT_EQ(LOCK_OK, redislock_release(h));
    redislock_stats st;
    redislock_get_stats(l, &st);
    CHECK_INT_GE(st.reconnects, 1);
    redislock_free(l);
    own_redis("stop");
    printf("ok: Redis down gives LOCK_ERR_CONNECTION; back up, the handle reconnects and "
           "tokens still grow\n");
}

int main(void) {
    const char *addr = ls_env("STOCKD_TEST_REDIS");
    test_config();
    test_unreachable();
    test_tokens_grow(addr);
    test_timeout(addr);
    test_woken_by_release(addr);
    test_cancel(addr);
    test_stale_holder(addr);
    test_renew(addr);
    test_redis_restart();
    printf("ok\n");
    return 0;
}
