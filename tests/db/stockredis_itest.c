/* stockredis_itest: mode redis-stock's script (db/stockredis.h) against a real Redis of
 * the test's own (stockredis_test.sh starts it).
 *   - a bad address is refused; a Redis where nothing listens is ERR_CONNECTION;
 *   - a product with no count is NOT_LOADED and nothing is written;
 *   - the first load sets the count; a later load on another handle does not reset it;
 *   - 16 threads, each with its own handle, race to load and deduct one product with
 *     stock 5 (every one of them passes a load): exactly 5 deducted, the count 0, never
 *     below it, and one stream entry per deduction, with distinct keys;
 *   - a repeated key gets its first answer (REPLAYED, nothing decremented or appended);
 *     the key for another product is KEY_REUSED;
 *   - a stream entry has exactly key, product, instance and at_us (Redis's clock, in us);
 *   - the backlog of the group nobody reads is every entry, none pending;
 *   - WAIT without a replica answers 0;
 *   - a count that is not a number is ERR_SERVER, never a deduction;
 *   - a memo lives for the life it was given (the idempotency window); then the key is new;
 *   - through a relay (tests/support/fault_proxy.h's Redis hook) that loses the script's
 *     reply and then answers -LOADING (to the reconnect's SCRIPT LOAD, or to the resent
 *     script): ERR_UNKNOWN, never "nothing done", and the deduction was made once; a
 *     -LOADING to a first send is ERR_REFUSED and nothing was done;
 *   - at maxmemory (noeviction) the script is refused before it runs: ERR_REFUSED, the
 *     count untouched;
 *   - a restock (MariaDB first, then stockredis_restock) racing the load of a count that
 *     is not in Redis adds its units once in both orders of the race: a load that read
 *     MariaDB after the restock but set the count before Redis heard of it, and one that
 *     read before and set after; the documented UPDATE-then-INCRBY sold 15 of 10 + 0
 *     there (issue 42): here 10 + 5 units are sold, exactly;
 *   - a reservation (a product loaded with reserve_seconds) is paid once (a second pay is
 *     NOT_RESERVED, another customer's is NOT_YOURS, the count unchanged); one past its
 *     expiry, released by 8 handles at once (EXPIRE) and its customer's CANCEL, changes
 *     once: one CHANGED, the unit and the customer's unit back once, one change entry. */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "fault_proxy.h"
#include "fault_proxy_redis.h"
#include "stockredis.h"

static const char *addr, *dead;

static stockredis *open_h(const char *a, const char *instance) {
    stockredis_config c = {.addr = a, .instance = instance, .io_timeout_ms = 5000};
    stockredis *s = NULL;
    char err[256];
    int rc = stockredis_new(&c, &s, err, sizeof(err));
    if (rc != STOCKREDIS_OK) CHECK_FAIL_("stockredis_new(%s): %d %s", a, rc, err);
    return s;
}

static redisContext *raw(void) {
    const char *colon = strrchr(addr, ':');
    char host[64];
    snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
    redisContext *c = redisConnect(host, atoi(colon + 1));
    CHECK(c && !c->err);
    return c;
}

static long long int_of(redisContext *c, const char *cmd) {
    redisReply *r = redisCommand(c, cmd);
    CHECK(r != NULL);
    long long v = r->type == REDIS_REPLY_INTEGER  ? r->integer
                  : r->type == REDIS_REPLY_STRING ? atoll(r->str)
                                                  : -999;
    freeReplyObject(r);
    return v;
}

static void test_config_and_unreachable(void) {
    stockredis_config bad = {.addr = "no-port"};
    stockredis *s = NULL;
    char err[256];
    CHECK_INT_EQ(STOCKREDIS_ERR_ARGS, stockredis_new(&bad, &s, err, sizeof(err)));
    CHECK(s == NULL && strstr(err, "HOST:PORT") != NULL);
    s = open_h(dead, "t");
    stockredis_result res;
    CHECK_INT_EQ(STOCKREDIS_ERR_CONNECTION,
                 stockredis_deduct(s, 1, "k", 5, 0, 3600, NULL, -1, -1, &res));
    CHECK(stockredis_errstr(s)[0] != '\0');
    stockredis_free(s);
    stockredis_free(NULL);
    printf("ok: a bad address is refused; nothing listening is ERR_CONNECTION\n");
}

static void test_load_once(redisContext *c) {
    stockredis *a = open_h(addr, "a"), *b = open_h(addr, "b");
    stockredis_result res;
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(a, 7, "l0", -1, 0, 3600, NULL, -1, -1, &res));
    CHECK_INT_EQ(STOCKREDIS_NOT_LOADED, res.outcome);
    CHECK_INT_EQ(0, int_of(c, "EXISTS stockd:stock:{7} stockd:key:l0"));
    CHECK_INT_EQ(0, int_of(c, "XLEN stockd:orders"));
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(a, 7, "l1", 3, 0, 3600, NULL, -1, -1, &res));
    CHECK_INT_EQ(STOCKREDIS_DEDUCTED, res.outcome);
    CHECK_INT_EQ(2, res.count);
    /* Another instance that read another stock of record loads nothing over it. */
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(b, 7, "l2", 100, 0, 3600, NULL, -1, -1, &res));
    CHECK_INT_EQ(STOCKREDIS_DEDUCTED, res.outcome);
    CHECK_INT_EQ(1, res.count);
    long long count = 0;
    bool present = false;
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_count(b, 7, &count, &present));
    CHECK(present);
    CHECK_INT_EQ(1, count);
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_count(b, 70, &count, &present));
    CHECK(!present);
    stockredis_free(a);
    stockredis_free(b);
    printf("ok: not loaded writes nothing; the first load sets the count, a later one does not\n");
}

#define RACERS     16
#define RACE_STOCK 5

static int race_deducted[RACERS];

static void *racer(void *arg) {
    int i = (int)(intptr_t)arg;
    char instance[16], key[32];
    snprintf(instance, sizeof(instance), "r%d", i);
    stockredis *s = open_h(addr, instance);
    for (int n = 0; n < 4; n++) {
        stockredis_result res;
        snprintf(key, sizeof(key), "race-%d-%d", i, n);
        /* As redisstock.c does: try, and on NOT_LOADED pass the stock of record. */
        int rc = stockredis_deduct(s, 8, key, -1, 0, 3600, NULL, -1, -1, &res);
        if (rc == STOCKREDIS_OK && res.outcome == STOCKREDIS_NOT_LOADED)
            rc = stockredis_deduct(s, 8, key, RACE_STOCK, 0, 3600, NULL, -1, -1, &res);
        if (rc != STOCKREDIS_OK) CHECK_FAIL_("racer %d: %d %s", i, rc, stockredis_errstr(s));
        CHECK(res.count >= 0);
        if (res.outcome == STOCKREDIS_DEDUCTED) race_deducted[i]++;
    }
    stockredis_free(s);
    return NULL;
}

static void test_race(redisContext *c) {
    long long before = int_of(c, "XLEN stockd:orders");
    pthread_t t[RACERS];
    for (int i = 0; i < RACERS; i++)
        CHECK(pthread_create(&t[i], NULL, racer, (void *)(intptr_t)i) == 0);
    int total = 0;
    for (int i = 0; i < RACERS; i++) {
        pthread_join(t[i], NULL);
        total += race_deducted[i];
    }
    CHECK_INT_EQ(RACE_STOCK, total);
    CHECK_INT_EQ(0, int_of(c, "GET stockd:stock:{8}"));
    CHECK_INT_EQ(before + RACE_STOCK, int_of(c, "XLEN stockd:orders"));
    printf("ok: %d handles racing to load and deduct stock %d: exactly %d deducted, count 0\n",
           RACERS, RACE_STOCK, total);
}

static void test_replay_and_reuse(redisContext *c) {
    stockredis *s = open_h(addr, "a");
    stockredis_result res;
    long long len = int_of(c, "XLEN stockd:orders");
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(s, 7, "l1", -1, 0, 3600, NULL, -1, -1, &res));
    CHECK_INT_EQ(STOCKREDIS_REPLAYED, res.outcome);
    CHECK_INT_EQ(1, res.count);
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(s, 8, "l1", -1, 0, 3600, NULL, -1, -1, &res));
    CHECK_INT_EQ(STOCKREDIS_KEY_REUSED, res.outcome);
    CHECK_INT_EQ(1, int_of(c, "GET stockd:stock:{7}"));
    CHECK_INT_EQ(len, int_of(c, "XLEN stockd:orders"));
    /* Sold out: the count stays 0, the answer carries it. */
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(s, 8, "late", -1, 0, 3600, NULL, -1, -1, &res));
    CHECK_INT_EQ(STOCKREDIS_SOLD_OUT, res.outcome);
    CHECK_INT_EQ(0, res.count);
    CHECK_INT_EQ(0, int_of(c, "GET stockd:stock:{8}"));
    stockredis_free(s);
    printf("ok: a repeated key is replayed, a reused key refused, sold out stays at 0\n");
}

static void test_entry(redisContext *c) {
    redisReply *r = redisCommand(c, "XREVRANGE stockd:orders + - COUNT 1");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    redisReply *f = r->element[0]->element[1];
    CHECK_INT_EQ(8, f->elements);
    const char *want[] = {"key", "product", "instance", "at_us"};
    for (int i = 0; i < 4; i++)
        CHECK_STR_EQ(want[i], f->element[2 * i]->str);
    CHECK_STR_EQ("8", f->element[3]->str);
    long long at_us = atoll(f->element[7]->str);
    long long now_us = (long long)time(NULL) * 1000000;
    CHECK_INT_LE(now_us - 600000000LL, at_us);
    CHECK_INT_LE(at_us, now_us + 600000000LL);
    freeReplyObject(r);
    printf("ok: an entry has key, product, instance and at_us\n");
}

static void test_backlog_and_wait(redisContext *c) {
    stockredis *s = open_h(addr, "a");
    long long lag = -1, pending = -1;
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_backlog(s, &lag, &pending));
    CHECK_INT_EQ(int_of(c, "XLEN stockd:orders"), lag);
    CHECK_INT_EQ(0, pending);
    int acked = -1;
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_wait(s, 1, 50, &acked));
    CHECK_INT_EQ(0, acked);
    stockredis_free(s);
    printf("ok: the backlog is every entry, none pending; WAIT without a replica is 0\n");
}

static void test_not_a_number(redisContext *c) {
    stockredis *s = open_h(addr, "a");
    freeReplyObject(redisCommand(c, "SET stockd:stock:{9} abc"));
    long long len = int_of(c, "XLEN stockd:orders");
    stockredis_result res;
    CHECK_INT_EQ(STOCKREDIS_ERR_SERVER,
                 stockredis_deduct(s, 9, "nan", 5, 0, 3600, NULL, -1, -1, &res));
    long long count;
    bool present;
    CHECK_INT_EQ(STOCKREDIS_ERR_SERVER, stockredis_count(s, 9, &count, &present));
    CHECK_INT_EQ(len, int_of(c, "XLEN stockd:orders"));
    CHECK_INT_EQ(0, int_of(c, "EXISTS stockd:key:nan"));
    stockredis_free(s);
    printf("ok: a count that is not a number is an error, nothing written\n");
}

static void test_memo_window(redisContext *c) {
    stockredis *s = open_h(addr, "a");
    stockredis_result res;
    freeReplyObject(redisCommand(c, "SET stockd:stock:{10} 5"));
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(s, 10, "w1", -1, 0, 1, NULL, -1, -1, &res));
    CHECK_INT_EQ(STOCKREDIS_DEDUCTED, res.outcome);
    long long ttl = int_of(c, "PTTL stockd:key:w1");
    CHECK_INT_LE(1, ttl);
    CHECK_INT_LE(ttl, 1000);
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(s, 10, "w1", -1, 0, 1, NULL, -1, -1, &res));
    CHECK_INT_EQ(STOCKREDIS_REPLAYED, res.outcome);
    CHECK_INT_EQ(STOCKREDIS_ERR_ARGS, stockredis_deduct(s, 10, "w1", -1, 0, 0, NULL, -1, -1, &res));
    /* Past the window the key is new: it deducts again. */
    while (int_of(c, "EXISTS stockd:key:w1") != 0) {
        struct timespec ts = {0, 50000000L};
        nanosleep(&ts, NULL);
    }
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(s, 10, "w1", -1, 0, 1, NULL, -1, -1, &res));
    CHECK_INT_EQ(STOCKREDIS_DEDUCTED, res.outcome);
    CHECK_INT_EQ(3, res.count);
    stockredis_free(s);
    printf("ok: a memo lives for its window, then the key is new\n");
}

/* ---------------------------------------------------------------- the relay's faults */

/* What the relay does next, set by the test between deductions (read on the proxy's
 * thread; the test waits on the deduction's return, which orders it). */
static volatile int cut_evalsha_reply; /* lose the reply of the next EVALSHA */
static volatile int loading_after;     /* then: -LOADING to commands matching `loading_on` */
static const char *volatile loading_on;
static char mark_cut; /* a connection's data: its next reply is to be lost */

static const char loading_err[] = "-LOADING Redis is loading the dataset in memory\r\n";

static bool frame_has(const fp_frame *f, const char *word) {
    size_t n = strlen(word);
    for (size_t i = 0; i + n <= f->len; i++)
        if (memcmp(f->data + i, word, n) == 0) return true;
    return false;
}

static fp_verdict relay_decide(void *arg, fp_conn *c, fp_frame *f) {
    (void)arg;
    if (f->dir == FP_DOWN) return fp_conn_data(c) == &mark_cut ? FP_CUT : FP_PASS;
    if (loading_after && frame_has(f, loading_on)) {
        fp_conn_send(c, FP_DOWN, loading_err, sizeof(loading_err) - 1);
        return FP_DROP;
    }
    if (cut_evalsha_reply && frame_has(f, "EVALSHA")) {
        cut_evalsha_reply = 0;
        loading_after = loading_on != NULL;
        fp_conn_set_data(c, &mark_cut);
    }
    return FP_PASS;
}

static void test_lost_reply_then_loading(redisContext *c) {
    fp_hook hook = fp_redis_hook();
    hook.decide = relay_decide;
    const char *colon = strrchr(addr, ':');
    fault_proxy_config pc = {.upstream_port = atoi(colon + 1), .hook = &hook};
    fault_proxy *p = NULL;
    CHECK_INT_EQ(FAULT_PROXY_OK, fault_proxy_new(&pc, &p));
    char via[32];
    snprintf(via, sizeof(via), "127.0.0.1:%d", fault_proxy_port(p));
    freeReplyObject(redisCommand(c, "SET stockd:stock:{11} 10"));
    stockredis *s = open_h(via, "relay");
    stockredis_result res;
    /* The connection and the script loaded first, through a deduction with no fault. */
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(s, 11, "f0", -1, 0, 3600, NULL, -1, -1, &res));
    /* The reply lost, the reconnect's first command (SCRIPT LOAD) answered -LOADING, or
     * the resent script itself: made, so unknown. */
    const char *on[] = {"SCRIPT", "EVALSHA"};
    for (int i = 0; i < 2; i++) {
        char key[8];
        snprintf(key, sizeof(key), "f%d", i + 1);
        long long before = int_of(c, "GET stockd:stock:{11}");
        loading_on = on[i];
        cut_evalsha_reply = 1;
        int rc = stockredis_deduct(s, 11, key, -1, 0, 3600, NULL, -1, -1, &res);
        loading_after = 0;
        if (rc != STOCKREDIS_ERR_UNKNOWN)
            CHECK_FAIL_("lost reply, then -LOADING to %s: want ERR_UNKNOWN (%d), got %d (%s)",
                        on[i], STOCKREDIS_ERR_UNKNOWN, rc, stockredis_errstr(s));
        CHECK_INT_EQ(before - 1, int_of(c, "GET stockd:stock:{11}"));
        /* The client's resend under the same key learns it was made. */
        CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(s, 11, key, -1, 0, 3600, NULL, -1, -1, &res));
        CHECK_INT_EQ(STOCKREDIS_REPLAYED, res.outcome);
        CHECK_INT_EQ(before - 1, res.count);
    }
    /* -LOADING to a first send: refused before it ran, nothing done. */
    long long before = int_of(c, "GET stockd:stock:{11}");
    loading_on = "EVALSHA";
    loading_after = 1;
    CHECK_INT_EQ(STOCKREDIS_ERR_REFUSED,
                 stockredis_deduct(s, 11, "f9", -1, 0, 3600, NULL, -1, -1, &res));
    loading_after = 0;
    CHECK_INT_EQ(before, int_of(c, "GET stockd:stock:{11}"));
    CHECK_INT_EQ(0, int_of(c, "EXISTS stockd:key:f9"));
    stockredis_free(s);
    fault_proxy_free(p);
    printf("ok: a lost reply then -LOADING is unknown, made once; -LOADING first is refused\n");
}

static void test_maxmemory_refuses_before_running(redisContext *c) {
    stockredis *s = open_h(addr, "a");
    stockredis_result res;
    freeReplyObject(redisCommand(c, "SET stockd:stock:{12} 10"));
    /* Connected first, so that the script itself meets the limit (a new connection's
     * XGROUP CREATE is refused the same way). */
    CHECK_INT_EQ(STOCKREDIS_OK,
                 stockredis_deduct(s, 12, "pre-oom", -1, 0, 3600, NULL, -1, -1, &res));
    freeReplyObject(redisCommand(c, "CONFIG SET maxmemory-policy noeviction"));
    freeReplyObject(redisCommand(c, "CONFIG SET maxmemory 1"));
    long long len = int_of(c, "XLEN stockd:orders");
    int rc = stockredis_deduct(s, 12, "oom", -1, 0, 3600, NULL, -1, -1, &res);
    freeReplyObject(redisCommand(c, "CONFIG SET maxmemory 0"));
    if (rc != STOCKREDIS_ERR_REFUSED)
        CHECK_FAIL_("at maxmemory: want ERR_REFUSED, got %d (%s)", rc, stockredis_errstr(s));
    CHECK_INT_EQ(9, int_of(c, "GET stockd:stock:{12}"));
    CHECK_INT_EQ(len, int_of(c, "XLEN stockd:orders"));
    CHECK_INT_EQ(0, int_of(c, "EXISTS stockd:key:oom"));
    stockredis_free(s);
    printf("ok: at maxmemory the script is refused before it runs, nothing written\n");
}

/* Sells product pid until sold out; returns how many units were sold. */
static int sell_all(stockredis *s, int32_t pid, const char *prefix) {
    stockredis_result res;
    char key[32];
    int sold = 0;
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        CHECK_INT_EQ(STOCKREDIS_OK,
                     stockredis_deduct(s, pid, key, -1, 0, 3600, NULL, -1, -1, &res));
        if (res.outcome != STOCKREDIS_DEDUCTED) break;
        sold++;
    }
    return sold;
}

static void test_restock_racing_a_load(redisContext *c) {
    stockredis *s = open_h(addr, "restock");
    stockredis_result res;
    long long count = 0;
    bool present = true;
    /* MariaDB had 10 and no restock; a restock of 5 commits there (15, restocked 5). */
    /* (a) the load reads MariaDB after the restock (15, 5) and sets the count before the
     * restock reaches Redis. */
    freeReplyObject(redisCommand(c, "DEL stockd:stock:{20} stockd:restocked:{20}"));
    CHECK_INT_EQ(STOCKREDIS_OK,
                 stockredis_deduct(s, 20, "ra-first", 15, 5, 3600, NULL, -1, -1, &res));
    CHECK_INT_EQ(STOCKREDIS_DEDUCTED, res.outcome);
    CHECK_INT_EQ(9, res.count); /* 15 - (5 not yet in Redis) - 1 */
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_restock(s, 20, 5, &count, &present));
    CHECK(present);
    CHECK_INT_EQ(14, count);
    CHECK_INT_EQ(14, sell_all(s, 20, "ra-"));
    /* (b) the load reads MariaDB before the restock (10, 0) and sets the count after the
     * restock reached Redis, which found no count and kept the units aside. */
    freeReplyObject(redisCommand(c, "DEL stockd:stock:{21} stockd:restocked:{21}"));
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_restock(s, 21, 5, &count, &present));
    CHECK(!present);
    CHECK_INT_EQ(0, int_of(c, "EXISTS stockd:stock:{21}"));
    CHECK_INT_EQ(STOCKREDIS_OK,
                 stockredis_deduct(s, 21, "rb-first", 10, 0, 3600, NULL, -1, -1, &res));
    CHECK_INT_EQ(14, res.count);
    CHECK_INT_EQ(14, sell_all(s, 21, "rb-"));
    CHECK_INT_EQ(STOCKREDIS_ERR_ARGS, stockredis_restock(s, 22, 0, &count, &present));
    stockredis_free(s);
}

#define RELEASERS 8

static int release_changed[RELEASERS + 1];

static void *releaser(void *arg) {
    int i = (int)(intptr_t)arg;
    stockredis *s = open_h(addr, "rel");
    stockredis_change_result res;
    /* The last one is the customer's cancel; the others are expiry threads. */
    int rc = i == RELEASERS ? stockredis_change(s, "res-0", STOCKREDIS_CANCEL, "u1", 60, &res)
                            : stockredis_change(s, "res-0", STOCKREDIS_EXPIRE, NULL, 60, &res);
    if (rc != STOCKREDIS_OK) CHECK_FAIL_("releaser %d: %d %s", i, rc, stockredis_errstr(s));
    if (res.outcome == STOCKREDIS_CHANGED)
        release_changed[i]++;
    else
        CHECK_INT_EQ(STOCKREDIS_NOT_RESERVED, res.outcome);
    stockredis_free(s);
    return NULL;
}

static void test_reservation_changes_once(redisContext *c) {
    stockredis *s = open_h(addr, "res");
    stockredis_result res;
    stockredis_change_result ch;
    /* Loaded with reserve_seconds 0: the first reservation is past its expiry at once. */
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(s, 30, "res-0", 3, 0, 60, "u1", -1, 0, &res));
    CHECK_INT_EQ(STOCKREDIS_DEDUCTED, res.outcome);
    CHECK(res.expires_us > 0);
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(s, 30, "res-0", -1, 0, 60, "u1", -1, -1, &res));
    CHECK_INT_EQ(STOCKREDIS_REPLAYED, res.outcome);
    CHECK(res.expires_us > 0);
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_change(s, "res-0", STOCKREDIS_PAY, "u1", 60, &ch));
    CHECK_INT_EQ(STOCKREDIS_LATE, ch.outcome);
    long long entries = int_of(c, "XLEN stockd:orders");
    pthread_t t[RELEASERS + 1];
    for (int i = 0; i <= RELEASERS; i++)
        CHECK(pthread_create(&t[i], NULL, releaser, (void *)(intptr_t)i) == 0);
    int changed = 0;
    for (int i = 0; i <= RELEASERS; i++) {
        pthread_join(t[i], NULL);
        changed += release_changed[i];
    }
    CHECK_INT_EQ(1, changed);
    CHECK_INT_EQ(3, int_of(c, "GET stockd:stock:{30}"));
    CHECK_INT_EQ(0, int_of(c, "HGET stockd:users:{30} u1"));
    CHECK_INT_EQ(entries + 1, int_of(c, "XLEN stockd:orders"));
    CHECK_INT_EQ(0, int_of(c, "ZSCORE stockd:expiry res-0") > 0);
    /* A reservation within its expiry: paid once, by its customer only. */
    freeReplyObject(redisCommand(c, "SET stockd:reserve:{30} 3600"));
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_deduct(s, 30, "res-1", -1, 0, 60, "u2", -1, -1, &res));
    CHECK_INT_EQ(STOCKREDIS_DEDUCTED, res.outcome);
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_change(s, "res-1", STOCKREDIS_PAY, "u3", 60, &ch));
    CHECK_INT_EQ(STOCKREDIS_NOT_YOURS, ch.outcome);
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_change(s, "res-1", STOCKREDIS_PAY, "u2", 60, &ch));
    CHECK_INT_EQ(STOCKREDIS_CHANGED, ch.outcome);
    CHECK(strcmp(ch.state, "paid") == 0);
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_change(s, "res-1", STOCKREDIS_PAY, "u2", 60, &ch));
    CHECK_INT_EQ(STOCKREDIS_NOT_RESERVED, ch.outcome);
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_change(s, "res-1", STOCKREDIS_EXPIRE, NULL, 60, &ch));
    CHECK_INT_EQ(STOCKREDIS_NOT_RESERVED, ch.outcome);
    CHECK_INT_EQ(2, int_of(c, "GET stockd:stock:{30}"));
    CHECK_INT_EQ(STOCKREDIS_OK, stockredis_change(s, "nope", STOCKREDIS_PAY, "u2", 60, &ch));
    CHECK_INT_EQ(STOCKREDIS_NO_ORDER, ch.outcome);
    stockredis_free(s);
    printf("ok: a reservation released by %d handles and its cancel at once changes once; one "
           "within its expiry is paid once, by its customer\n",
           RELEASERS);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: stockredis_itest REDIS_ADDR DEAD_ADDR\n");
        return 2;
    }
    addr = argv[1];
    dead = argv[2];
    redisContext *c = raw();
    test_config_and_unreachable();
    test_load_once(c);
    test_race(c);
    test_replay_and_reuse(c);
    test_entry(c);
    test_backlog_and_wait(c);
    test_not_a_number(c);
    test_memo_window(c);
    test_lost_reply_then_loading(c);
    test_restock_racing_a_load(c);
    test_maxmemory_refuses_before_running(c);
    test_reservation_changes_once(c);
    redisFree(c);
    printf("ok\n");
    return 0;
}
