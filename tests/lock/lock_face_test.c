/* lock_face_test.c: lock/lock.h without a lock service. The registry names every kind
 * with a complete table; the codes have one text each; the address parser; the kinds
 * none and local; and the pool of lease handles (lease_pool.c) on a lease kind of this
 * test's own, kept in memory, which is also the smallest example of a new kind: a
 * lock_lease_ops and one LOCK_LEASE_KIND row. A unit test (no servers, well under a
 * second). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "lock.h"

/* ---------------------------------------------------------------- the registry */

static void test_registry(void) {
    static const char *names[] = {"none",  "local",   "zk",      "zk-herd",
                                  "redis", "db-lock", "redlock", "etcd"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const lock_kind *k = lock_kind_find(names[i]);
        if (!k) CHECK_FAIL_("lock_kind_find(\"%s\"): NULL", names[i]);
        CHECK_STR_EQ(names[i], k->name);
        CHECK(k->set_new && k->acquire && k->check && k->token && k->release);
        if (k->flags & LOCK_KIND_LEASE) {
            const lock_lease_ops *o = k->lease;
            CHECK(o && o->open && o->close && o->acquire && o->check && o->token && o->release &&
                  o->renew && o->ops && o->errstr);
            CHECK(k->down_message != NULL);
        }
        /* A kind with a token has a service, and no two services share a fence kind. */
        CHECK((k->fence_kind == LOCK_FENCE_NONE) == (k->service == NULL));
    }
    size_t n = 0;
    for (; lock_kinds[n]; n++)
        for (size_t j = 0; j < n; j++) {
            CHECK(strcmp(lock_kinds[n]->name, lock_kinds[j]->name) != 0);
            if (lock_kinds[n]->fence_kind && lock_kinds[n]->fence_kind == lock_kinds[j]->fence_kind)
                CHECK_STR_EQ(lock_kinds[n]->service, lock_kinds[j]->service);
        }
    CHECK_INT_EQ(sizeof(names) / sizeof(names[0]), n);
    CHECK(lock_kind_find("redlock-typo") == NULL);
    CHECK(lock_kind_find(NULL) == NULL);
    CHECK_INT_EQ(LOCK_FENCE_ZOOKEEPER, lock_kind_find("zk-herd")->fence_kind);
    CHECK_INT_EQ(LOCK_FENCE_REDIS, lock_kind_find("redis")->fence_kind);
    CHECK_INT_EQ(LOCK_FENCE_TABLE, lock_kind_find("db-lock")->fence_kind);
    CHECK_INT_EQ(LOCK_FENCE_REDLOCK, lock_kind_find("redlock")->fence_kind);
    CHECK_INT_EQ(LOCK_FENCE_ETCD, lock_kind_find("etcd")->fence_kind);
}

static void test_codes(void) {
    for (int a = LOCK_LOST; a <= LOCK_OK; a++)
        for (int b = LOCK_LOST; b < a; b++)
            CHECK(strcmp(lock_strerror(a), lock_strerror(b)) != 0);
    CHECK_STR_EQ("unknown lock code", lock_strerror(-100));
}

static void test_hostport(void) {
    char host[16];
    int port = 0;
    CHECK_INT_EQ(LOCK_OK, lock_parse_hostport("127.0.0.1:6379", host, sizeof(host), &port));
    CHECK_STR_EQ("127.0.0.1", host);
    CHECK_INT_EQ(6379, port);
    CHECK_INT_EQ(LOCK_OK, lock_parse_hostport("redis-1:1", host, sizeof(host), &port));
    CHECK_STR_EQ("redis-1", host);
    static const char *bad[] = {"",        ":6379",   "host",
                                "host:",   "host:0",  "host:65536",
                                "host:6x", "ho st:1", "a-very-long-host-name:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (lock_parse_hostport(bad[i], host, sizeof(host), &port) != LOCK_ERR_ARGS)
            CHECK_FAIL_("lock_parse_hostport(\"%s\") accepted", bad[i]);
}

/* ---------------------------------------------------------------- none and local */

static void test_none(void) {
    lock_config cfg = {.timeout_ms = 10};
    lock_set *s;
    char err[128];
    lock_hold h;
    CHECK_INT_EQ(LOCK_OK, lock_set_new(lock_kind_find("none"), &cfg, &s, err, sizeof(err)));
    CHECK_INT_EQ(LOCK_OK, lock_acquire(s, "product_1", &h));
    CHECK_INT_EQ(LOCK_OK, lock_check(&h));
    CHECK_INT_EQ(0, lock_token(&h));
    CHECK_INT_EQ(LOCK_OK, lock_release(&h));
    CHECK_INT_EQ(LOCK_OK, lock_ping(s, err, sizeof(err)));
    CHECK(lock_failure_message(s, LOCK_ERR_CONNECTION) == NULL);
    lock_stats st;
    lock_get_stats(s, &st);
    CHECK_INT_EQ(0, st.acquired);
    lock_set_free(s);
}

typedef struct local_run {
    lock_set *s;
    long counter; /* changed only under the lock, in two steps */
    int overlaps;
    atomic_int inside;
} local_run;

static void *local_worker(void *arg) {
    local_run *r = arg;
    for (int i = 0; i < 2000; i++) {
        lock_hold h;
        CHECK_INT_EQ(LOCK_OK, lock_acquire(r->s, "product_7_seg_2", &h));
        if (atomic_fetch_add(&r->inside, 1) != 0) r->overlaps++;
        long v = r->counter;
        if (i % 64 == 0) sched_yield();
        r->counter = v + 1;
        atomic_fetch_sub(&r->inside, 1);
        CHECK_INT_EQ(LOCK_OK, lock_release(&h));
    }
    return NULL;
}

static void test_local(void) {
    lock_config cfg = {.timeout_ms = 10};
    local_run r = {0};
    char err[128];
    CHECK_INT_EQ(LOCK_OK, lock_set_new(lock_kind_find("local"), &cfg, &r.s, err, sizeof(err)));
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        CHECK_INT_EQ(0, pthread_create(&t[i], NULL, local_worker, &r));
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    CHECK_INT_EQ(0, r.overlaps);
    CHECK_INT_EQ(6000, r.counter);

    /* The batch calls on a kind without a try: refused, nothing held; the release of
     * many falls back to one release each, and the locks are free again after it. */
    const char *names[2] = {"product_1", "product_2"};
    lock_hold hs[2];
    int rcs[2];
    CHECK_INT_EQ(LOCK_ERR_ARGS, lock_try_acquire_many(r.s, names, 2, hs, rcs));
    CHECK_INT_EQ(LOCK_ERR_ARGS, rcs[0]);
    CHECK(hs[0].impl == NULL && hs[1].impl == NULL);
    CHECK_INT_EQ(LOCK_OK, lock_acquire(r.s, names[0], &hs[0]));
    CHECK_INT_EQ(LOCK_OK, lock_acquire(r.s, names[1], &hs[1]));
    CHECK_INT_EQ(LOCK_OK, lock_release_many(hs, 2, 100, rcs));
    CHECK(hs[0].impl == NULL && hs[1].impl == NULL);
    CHECK_INT_EQ(LOCK_OK, rcs[1]);
    CHECK_INT_EQ(LOCK_OK, lock_acquire(r.s, names[0], &hs[0])); /* free again */
    CHECK_INT_EQ(LOCK_OK, lock_release(&hs[0]));
    lock_set_free(r.s);
}

/* ---------------------------------------------------------------- a lease kind in memory */

/* The "service": one owner token per name, leases not modelled beyond renewals. */
static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char name[32];
    int64_t token;
} mem_keys[8];
static int64_t mem_next_token = 1;
static atomic_int mem_down, mem_opens, mem_renewals;

typedef struct mem_handle {
    uint64_t ops;
    char errstr[64];
    const atomic_int *cancel;
} mem_handle;

typedef struct mem_hold {
    mem_handle *via;
    char name[32];
    int64_t token;
} mem_hold;

static int mem_open(const lock_config *cfg, const atomic_int *cancel, void **handle, char *err,
                    size_t errcap) {
    (void)cfg;
    atomic_fetch_add(&mem_opens, 1);
    if (atomic_load(&mem_down)) {
        snprintf(err, errcap, "connection refused");
        return LOCK_ERR_CONNECTION;
    }
    mem_handle *h = calloc(1, sizeof(*h));
    if (!h) return LOCK_ERR_NOMEM;
    h->cancel = cancel;
    *handle = h;
    return LOCK_OK;
}

static void mem_close(void *handle) {
    free(handle);
}

/* Tries once every millisecond until the deadline, as a lease library's wait would. */
static int mem_acquire(void *handle, const char *name, int timeout_ms, void **hold) {
    mem_handle *m = handle;
    for (int waited = 0;; waited++) {
        if (atomic_load(m->cancel)) return LOCK_ERR_CANCELLED;
        m->ops++;
        pthread_mutex_lock(&mem_mu);
        int free_i = -1, held = 0;
        for (int i = 0; i < 8; i++) {
            if (!mem_keys[i].name[0] && free_i < 0) free_i = i;
            if (strcmp(mem_keys[i].name, name) == 0) held = 1;
        }
        if (!held && free_i >= 0) {
            snprintf(mem_keys[free_i].name, sizeof(mem_keys[free_i].name), "%s", name);
            mem_keys[free_i].token = mem_next_token++;
            mem_hold *h = calloc(1, sizeof(*h));
            snprintf(h->name, sizeof(h->name), "%s", name);
            h->token = mem_keys[free_i].token;
            pthread_mutex_unlock(&mem_mu);
            *hold = h;
            return LOCK_OK;
        }
        pthread_mutex_unlock(&mem_mu);
        if (waited >= timeout_ms) {
            snprintf(m->errstr, sizeof(m->errstr), "held");
            return LOCK_ERR_TIMEOUT;
        }
        usleep(1000);
    }
}

static int mem_check(const void *hold) {
    return hold ? LOCK_OK : LOCK_ERR_ARGS;
}

static int64_t mem_token(const void *hold) {
    return ((const mem_hold *)hold)->token;
}

static int mem_release(void *hold) {
    mem_hold *h = hold;
    int rc = LOCK_LOST;
    pthread_mutex_lock(&mem_mu);
    for (int i = 0; i < 8; i++)
        if (strcmp(mem_keys[i].name, h->name) == 0 && mem_keys[i].token == h->token) {
            mem_keys[i].name[0] = '\0';
            rc = LOCK_OK;
        }
    pthread_mutex_unlock(&mem_mu);
    free(h);
    return rc;
}

static int mem_renew(void *via, void *hold) {
    ((mem_handle *)via)->ops++;
    atomic_fetch_add(&mem_renewals, 1);
    return ((mem_hold *)hold)->token > 0 ? LOCK_OK : LOCK_LOST;
}

static uint64_t mem_ops(const void *handle) {
    return ((const mem_handle *)handle)->ops;
}

static const char *mem_errstr(const void *handle) {
    return ((const mem_handle *)handle)->errstr;
}

static const lock_lease_ops mem_lease = {
    .open = mem_open,
    .close = mem_close,
    .acquire = mem_acquire,
    .check = mem_check,
    .token = mem_token,
    .release = mem_release,
    .renew = mem_renew,
    .ops = mem_ops,
    .errstr = mem_errstr,
};

static const lock_kind mem_kind =
    LOCK_LEASE_KIND("mem", "memory", 99, "memory is unavailable; nothing was deducted", &mem_lease);

static atomic_int logged;
static char last_log[256];

static void test_log(void *arg, const char *level, const char *msg) {
    (void)arg;
    atomic_fetch_add(&logged, 1);
    snprintf(last_log, sizeof(last_log), "%s %s", level, msg);
}

typedef struct taker {
    lock_set *s;
    int rc;
} taker;

static void *take_once(void *arg) {
    taker *t = arg;
    lock_hold h;
    t->rc = lock_acquire(t->s, "product_1", &h);
    if (t->rc == LOCK_OK) lock_release(&h);
    return NULL;
}

/* Runs an acquire of product_1 on another thread (a pool slot is per holder thread). */
static int acquire_elsewhere(lock_set *s) {
    taker t = {.s = s};
    pthread_t th;
    CHECK_INT_EQ(0, pthread_create(&th, NULL, take_once, &t));
    pthread_join(th, NULL);
    return t.rc;
}

static void test_lease_pool(void) {
    lock_config cfg = {.timeout_ms = 20, .lease_ms = 1000, .holders = 2, .log = test_log};
    lock_set *s;
    lock_hold h;
    lock_stats st;
    char err[128];
    CHECK_INT_EQ(LOCK_OK, lock_set_new(&mem_kind, &cfg, &s, err, sizeof(err)));
    CHECK(lock_set_kind(s) == &mem_kind);

    /* Held here: the other holder times out, and both count. */
    CHECK_INT_EQ(LOCK_OK, lock_acquire(s, "product_1", &h));
    int64_t token = lock_token(&h);
    CHECK_INT_GT(token, 0);
    CHECK_INT_EQ(LOCK_OK, lock_check(&h));
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, acquire_elsewhere(s));
    CHECK(lock_failure_message(s, LOCK_ERR_TIMEOUT) == NULL);
    CHECK_INT_EQ(LOCK_OK, lock_release(&h));
    CHECK_INT_EQ(LOCK_OK, acquire_elsewhere(s));
    lock_get_stats(s, &st);
    CHECK_INT_EQ(2, st.acquired);
    CHECK_INT_EQ(1, st.timeouts);
    CHECK_INT_GE(st.ops, 3); /* every try of every acquire */
    CHECK_INT_EQ(0, st.unavailable);

    /* Both slots in use by one thread is a caller's bug, told as such. */
    lock_hold h2;
    CHECK_INT_EQ(LOCK_OK, lock_acquire(s, "product_2", &h));
    CHECK_INT_EQ(LOCK_OK, lock_acquire(s, "product_3", &h2));
    lock_hold h3;
    CHECK_INT_EQ(LOCK_ERR_ARGS, lock_acquire(s, "product_4", &h3));
    CHECK_INT_EQ(LOCK_OK, lock_release(&h2));
    CHECK_INT_EQ(LOCK_OK, lock_release(&h));
    lock_set_free(s);

    /* The service down when a slot's handle is first made: CONNECTION, the kind's
     * message, one log line for the burst, and the next call tries to connect again. */
    atomic_store(&mem_down, 1);
    atomic_store(&logged, 0);
    int opens = atomic_load(&mem_opens);
    CHECK_INT_EQ(LOCK_OK, lock_set_new(&mem_kind, &cfg, &s, err, sizeof(err)));
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, lock_acquire(s, "product_1", &h));
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, lock_acquire(s, "product_1", &h));
    CHECK_INT_EQ(opens + 2, atomic_load(&mem_opens));
    CHECK_STR_EQ("memory is unavailable; nothing was deducted",
                 lock_failure_message(s, LOCK_ERR_CONNECTION));
    CHECK_INT_GE(atomic_load(&logged), 1); /* at most one a second: 2 if one was crossed */
    CHECK_INT_LE(atomic_load(&logged), 2);
    CHECK_STR_EQ("warn mem connect: connection refused", last_log);
    lock_get_stats(s, &st);
    CHECK_INT_EQ(2, st.unavailable);
    atomic_store(&mem_down, 0);
    CHECK_INT_EQ(LOCK_OK, lock_acquire(s, "product_1", &h));
    CHECK_INT_EQ(LOCK_OK, lock_release(&h));

    /* Cancelled: every acquire, now and later, ends at once without connecting. */
    lock_set_cancel(s);
    opens = atomic_load(&mem_opens);
    CHECK_INT_EQ(LOCK_ERR_CANCELLED, lock_acquire(s, "product_1", &h));
    CHECK_INT_EQ(opens, atomic_load(&mem_opens));
    lock_set_free(s);

    /* The watchdog renews a hold every third of its lease, through its own handle,
     * and stops with the release. */
    cfg.lease_ms = 120;
    cfg.renew = true;
    CHECK_INT_EQ(LOCK_OK, lock_set_new(&mem_kind, &cfg, &s, err, sizeof(err)));
    CHECK_INT_EQ(LOCK_OK, lock_acquire(s, "product_1", &h));
    struct timespec pause = {0, 300 * 1000000L};
    nanosleep(&pause, NULL);
    CHECK_INT_EQ(LOCK_OK, lock_release(&h));
    lock_get_stats(s, &st);
    CHECK_INT_GE(st.renewals, 1);
    CHECK_INT_EQ(st.renewals, atomic_load(&mem_renewals));
    int after = atomic_load(&mem_renewals);
    nanosleep(&pause, NULL);
    CHECK_INT_EQ(after, atomic_load(&mem_renewals));
    lock_set_free(s);
}

int main(void) {
    test_registry();
    test_codes();
    test_hostport();
    test_none();
    test_local();
    test_lease_pool();
    printf("ok: lock face\n");
    return 0;
}
