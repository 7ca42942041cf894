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
