/* lease_test.h: helpers shared by the tests of the two lease lock kinds (redislock,
 * dblock): the servers from the environment that lease_lock_test.sh sets, clocks, and
 * the database configuration of the test's own database. */
#ifndef LEASE_TEST_H
#define LEASE_TEST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "stockdb.h"

/* $name, or skip the test (exit 77) when it is not set. */
static inline const char *ls_env(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) SKIP("%s is not set (run through ctest)", name);
    return v;
}

static inline int64_t ls_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline void ls_sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* A unique lock name for this run: "<prefix>_<pid>_<time>" (a static buffer). */
static inline const char *ls_name(const char *prefix) {
    static char buf[128];
    snprintf(buf, sizeof(buf), "%s_%ld_%lld", prefix, (long)getpid(), (long long)time(NULL));
    return buf;
}

/* Sets *flag after ms milliseconds, on a thread of its own; join it with
 * pthread_join. For the cancel tests: the acquire that waits stays on the thread that
 * made its handle (dblock's rule), and the flag is set from elsewhere, as at shutdown. */
typedef struct ls_canceller {
    atomic_int *flag;
    int ms;
} ls_canceller;

static inline void *ls_cancel_after(void *arg) {
    ls_canceller *c = arg;
    ls_sleep_ms(c->ms);
    atomic_store(c->flag, 1);
    return NULL;
}

/* One lease kind's acquire behind void pointers (lock: the kind's handle; *hold: its
 * hold, NULL when not acquired) and its codes, so that one test body drives both kinds. */
typedef struct ls_kind {
    int (*acquire)(void *lock, const char *name, int timeout_ms, void **hold);
    int ok, cancelled; /* the kind's OK and ERR_CANCELLED */
} ls_kind;

/* The cancel test of either kind. holder takes a fresh name; waiter, made with *cancel as
 * its config's cancel flag, then waits up to 60 s for it, and only the flag, set by
 * another thread after 300 ms, can end that wait within the test's time: it must end
 * with `cancelled` and no hold. An acquire of a name nobody holds (written to free_name)
 * must then be refused the same way. Returns holder's hold of the first name: the caller
 * checks that nothing was written under free_name, then releases it. */
static inline void *ls_check_cancel(const ls_kind *k, void *holder, void *waiter,
                                    atomic_int *cancel, char *free_name, size_t cap) {
    const char *name = ls_name("cancel");
    snprintf(free_name, cap, "%s_free", name);
    void *h = NULL, *h2 = (void *)1;
    CHECK_INT_EQ(k->ok, k->acquire(holder, name, 1000, &h));
    ls_canceller c = {.flag = cancel, .ms = 300};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, ls_cancel_after, &c) == 0);
    CHECK_INT_EQ(k->cancelled, k->acquire(waiter, name, 60000, &h2));
    pthread_join(t, NULL);
    CHECK(h2 == NULL);
    CHECK_INT_EQ(k->cancelled, k->acquire(waiter, free_name, 1000, &h2));
    CHECK(h2 == NULL);
    return h;
}

/* The test database ($STOCKD_TEST_MYSQL_URL, password from STOCKD_MYSQL_PASSWORD). */
static inline stockdb_config ls_db_config(void) {
    stockdb_config c = {0};
    const char *pw = getenv("STOCKD_MYSQL_PASSWORD");
    if (pw) snprintf(c.password, sizeof(c.password), "%s", pw);
    if (stockdb_config_from_url(&c, ls_env("STOCKD_TEST_MYSQL_URL")) != STOCKDB_OK)
        CHECK_FAIL_("bad STOCKD_TEST_MYSQL_URL");
    return c;
}

#endif
