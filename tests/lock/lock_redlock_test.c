/* lock_redlock_test: the contract of the RedLock library (redlock_int.h) against three real Redis
 * servers of the test's own (tests/lock/redlock_test.sh starts them).
 *   - server lists are checked: fewer than three, a duplicate or a bad address refused;
 *   - mutual exclusion: a second handle's acquire times out while the first holds (and
 *     waits at least its timeout), takes the lock after the release, with a larger token;
 *   - a split vote (two other holders each on one server) gives no majority: the acquire
 *     times out and leaves no key of its own on the one server that granted it;
 *   - the Kleppmann case, with the expiry shortened from outside (PEXPIRE on two of the
 *     three servers) standing in for a clock jump: a second client takes the majority
 *     while the first still believes it holds (its check says OK). Two holders at once;
 *     only the token tells them apart (the second's is larger), and the first's release
 *     says LOST;
 *   - the watchdog's renewal extends the validity on a majority, and says LOST once the
 *     keys are gone on two servers;
 *   - a try whose reply came after the per-server timeout (a server slow for a moment)
 *     set its key there all the same; the release deletes it (it carries the handle's
 *     owner), so that server's vote is free again at once, not after the lease, while
 *     foreign keys survive every handle's releases;
 *   - one server down: acquire, check and release still work on the two others;
 *   - two down: acquire fails at once with LOCK_ERR_CONNECTION, leaves no key on the one
 *     server up, ping fails, and a new handle is refused; both back: the same handle
 *     takes the lock again with a token above every earlier one. */
#include <hiredis/hiredis.h>
#include <string.h>

#include "fault_proxy.h"
#include "lease_test.h"
#include "redlock_int.h"

static const char *addrs;
static int ports[3];

static redlock *open_lock(int lease_ms) {
    redlock_config c = {.addrs = addrs, .lease_ms = lease_ms, .retry_ms = 20};
    redlock *l = NULL;
    char err[512];
    int rc = redlock_new(&c, &l, err, sizeof(err));
    if (rc != LOCK_OK) CHECK_FAIL_("redlock_new(%s): %s: %s", addrs, redlock_strerror(rc), err);
    return l;
}

/* Runs a command on server i (0..2) and returns its integer answer, or -2 for a string
 * or nil answer; the string, if any, goes to out. */
static long long on_server(int i, char *out, size_t cap, const char *fmt, const char *arg) {
    redisContext *c = redisConnect("127.0.0.1", ports[i]);
    CHECK(c && !c->err);
    redisReply *r = redisCommand(c, fmt, arg);
    CHECK(r != NULL);
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -2;
    if (out) snprintf(out, cap, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    redisFree(c);
    return v;
}

static void key_value(int i, const char *name, char *out, size_t cap) {
    on_server(i, out, cap, "GET lock:%s", name);
}

static void own_redis(const char *what, int i) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "OWN_REDIS_PORT=%d bash \"%s/tests/lock/own_redis.sh\" %s r%d",
             ports[i], ls_env("STOCKD_SRC"), what, i + 1);
    if (system(cmd) != 0) CHECK_FAIL_("%s failed", cmd);
}

static void test_config(void) {
    char three[128], dup[128];
    snprintf(three, sizeof(three), "127.0.0.1:1,127.0.0.1:2,localhost:3");
    CHECK_INT_EQ(3, redlock_count_addrs(three));
    CHECK_INT_EQ(5, redlock_count_addrs("a:1,b:2,c:3,d:4,e:5"));
    snprintf(dup, sizeof(dup), "127.0.0.1:1,127.0.0.1:2,127.0.0.1:1");
    const char *bad[] = {"",
                         "127.0.0.1:1",
                         "127.0.0.1:1,127.0.0.1:2",
                         dup,
                         "127.0.0.1:1,,127.0.0.1:2,127.0.0.1:3",
                         "127.0.0.1:1,127.0.0.1:2,x",
                         "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9,j:10",
                         NULL};
    for (int i = 0; bad[i]; i++)
        CHECK_INT_EQ(LOCK_ERR_ARGS, redlock_count_addrs(bad[i]));
    redlock *l = (redlock *)1;
    redlock_config c = {.addrs = dup};
    CHECK_INT_EQ(LOCK_ERR_ARGS, redlock_new(&c, &l, NULL, 0));
    CHECK(l == NULL);
    redlock_config c2 = {.addrs = addrs, .lease_ms = 100, .drift_ms = 100};
    CHECK_INT_EQ(LOCK_ERR_ARGS, redlock_new(&c2, &l, NULL, 0));
    printf("ok: bad server lists and configurations refused\n");
}

static void test_exclusion(void) {
    redlock *a = open_lock(10000), *b = open_lock(10000);
    const char *name = ls_name("excl");
    redlock_hold *ha = NULL, *hb = (redlock_hold *)1;
    CHECK_INT_EQ(LOCK_OK, redlock_acquire(a, name, 1000, &ha));
    CHECK_INT_EQ(3, redlock_granted(ha));
    CHECK_INT_EQ(LOCK_OK, redlock_check(ha));
    int64_t ta = redlock_token(ha);
    CHECK_INT_GT(ta, 0);
    /* The token is the largest of the three keys' values. */
    int64_t most = 0;
    for (int i = 0; i < 3; i++) {
        char v[64];
        key_value(i, name, v, sizeof(v));
        CHECK(v[0] != '\0');
        if (atoll(v) > most) most = atoll(v);
    }
    CHECK_INT_EQ(most, ta);
    CHECK_INT_EQ(LOCK_ERR_ARGS, redlock_acquire(a, name, 0, &hb)); /* not reentrant */
    int64_t t0 = ls_now_us();
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, redlock_acquire(b, name, 300, &hb));
    CHECK(hb == NULL);
    CHECK_INT_GE(ls_now_us() - t0, 300000);
    CHECK_INT_EQ(LOCK_OK, redlock_release(ha));
    for (int i = 0; i < 3; i++) {
        char v[64];
        key_value(i, name, v, sizeof(v));
        CHECK_STR_EQ("", v);
    }
    CHECK_INT_EQ(LOCK_OK, redlock_acquire(b, name, 1000, &hb));
    CHECK_INT_GT(redlock_token(hb), ta);
    CHECK_INT_EQ(LOCK_OK, redlock_release(hb));
    redlock_stats st;
    redlock_get_stats(b, &st);
    CHECK_INT_EQ(1, st.acquired);
    CHECK_INT_EQ(1, st.timeouts);
    CHECK_INT_GE(st.rounds_short, 2);
    CHECK_INT_GT(st.ops, 0);
    redlock_free(a);
    redlock_free(b);
    printf("ok: a second handle waits out the holder, then takes it with a larger token\n");
}

static void test_split_vote(void) {
    const char *name = ls_name("split");
    /* Two foreign holders, one key each on servers 0 and 1. */
    on_server(0, NULL, 0, "SET lock:%s x PX 10000", name);
    on_server(1, NULL, 0, "SET lock:%s y PX 10000", name);
    redlock *c = open_lock(10000);
    redlock_hold *h = (redlock_hold *)1;
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, redlock_acquire(c, name, 200, &h));
    CHECK(h == NULL);
    char v[64];
    key_value(2, name, v, sizeof(v));
    CHECK_STR_EQ("", v); /* granted there each round, and given back */
    redlock_stats st;
    redlock_get_stats(c, &st);
    CHECK_INT_GE(st.rounds, 2);
    CHECK_INT_EQ(st.rounds, st.rounds_short);
    /* Every round released on every server: the foreign keys are not ours, and stay. */
    CHECK_INT_EQ(1, on_server(0, NULL, 0, "DEL lock:%s", name));
    CHECK_INT_EQ(1, on_server(1, NULL, 0, "DEL lock:%s", name));
    redlock_free(c);
    printf("ok: a split vote times out and leaves no key on the server that granted it\n");
}

static void test_kleppmann(void) {
    redlock *a = open_lock(10000), *b = open_lock(10000);
    const char *name = ls_name("jump");
    redlock_hold *ha = NULL, *hb = NULL;
    CHECK_INT_EQ(LOCK_OK, redlock_acquire(a, name, 1000, &ha));
    /* Servers 0 and 1 expire A's key at once, as a forward clock jump on them would. */
    CHECK_INT_EQ(1, on_server(0, NULL, 0, "PEXPIRE lock:%s 1", name));
    CHECK_INT_EQ(1, on_server(1, NULL, 0, "PEXPIRE lock:%s 1", name));
    ls_sleep_ms(10);
    CHECK_INT_EQ(LOCK_OK, redlock_acquire(b, name, 1000, &hb));
    CHECK_INT_EQ(2, redlock_granted(hb));
    /* Two holders: A's own clock says its validity lasts. */
    CHECK_INT_EQ(LOCK_OK, redlock_check(ha));
    CHECK_INT_EQ(LOCK_OK, redlock_check(hb));
    /* The fence's view: B's token is the larger, so a database that keeps the largest
     * token it accepted refuses A's write after B's. */
    CHECK_INT_GT(redlock_token(hb), redlock_token(ha));
    CHECK_INT_EQ(LOCK_LOST, redlock_release(ha)); /* its key survives on server 2 only */
    char v[64];
    key_value(2, name, v, sizeof(v));
    CHECK_STR_EQ("", v);
    key_value(0, name, v, sizeof(v));
    CHECK(v[0] != '\0'); /* B's keys are untouched */
    CHECK_INT_EQ(LOCK_OK, redlock_release(hb));
    redlock_free(a);
    redlock_free(b);
    printf("ok: expiry shortened on two of three servers: two holders, told apart by the token\n");
}

static void test_renew(void) {
    redlock *a = open_lock(600), *via = open_lock(600);
    const char *name = ls_name("renew");
    redlock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, redlock_acquire(a, name, 1000, &h));
    ls_sleep_ms(400);
    CHECK_INT_EQ(LOCK_OK, redlock_renew(via, h));
    ls_sleep_ms(400); /* 800 ms after the acquire: past the first lease */
    CHECK_INT_EQ(LOCK_OK, redlock_check(h));
    CHECK_INT_EQ(1, on_server(0, NULL, 0, "DEL lock:%s", name));
    CHECK_INT_EQ(1, on_server(1, NULL, 0, "DEL lock:%s", name));
    CHECK_INT_EQ(LOCK_LOST, redlock_renew(via, h));
    CHECK_INT_EQ(LOCK_LOST, redlock_release(h));
    redlock_free(a);
    redlock_free(via);
    printf("ok: renewal extends the validity on a majority, and says LOST without one\n");
}

static void test_lost_reply(void) {
    /* Server 0 behind a proxy that, for a while, forwards every chunk 600 ms late: more
     * than the per-server timeout (200 ms), so the try there gives up, but its command
     * still reaches the server and sets the key. */
    fault_proxy *p = NULL;
    fault_proxy_config pc = {.upstream_port = ports[0]};
    CHECK_INT_EQ(FAULT_PROXY_OK, fault_proxy_new(&pc, &p));
    char list[128];
    snprintf(list, sizeof(list), "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", fault_proxy_port(p),
             ports[1], ports[2]);
    redlock_config c = {.addrs = list, .lease_ms = 30000, .retry_ms = 20};
    redlock *l = NULL;
    char err[512];
    CHECK_INT_EQ(LOCK_OK, redlock_new(&c, &l, err, sizeof(err)));
    const char *name = ls_name("lostreply");
    redlock_hold *h = NULL;
    fault_proxy_delay(p, 600);
    CHECK_INT_EQ(LOCK_OK, redlock_acquire(l, name, 5000, &h));
    CHECK_INT_EQ(2, redlock_granted(h));
    fault_proxy_delay(p, 0);
    char v[64] = "";
    int64_t deadline = ls_now_us() + 10000000;
    while (!v[0] && ls_now_us() < deadline) { /* the late try lands */
        key_value(0, name, v, sizeof(v));
        if (!v[0]) ls_sleep_ms(20);
    }
    CHECK(v[0] != '\0');
    /* The release deletes it with the granted keys; before, it stayed for the 30 s
     * lease, and server 0 voted against every acquisition of the name meanwhile. */
    CHECK_INT_EQ(LOCK_OK, redlock_release(h));
    for (int i = 0; i < 3; i++) {
        key_value(i, name, v, sizeof(v));
        CHECK_STR_EQ("", v);
    }
    CHECK_INT_EQ(LOCK_OK, redlock_acquire(l, name, 1000, &h));
    CHECK_INT_EQ(3, redlock_granted(h));
    CHECK_INT_EQ(LOCK_OK, redlock_release(h));
    redlock_free(l);
    fault_proxy_free(p);
    printf("ok: a try whose reply came too late left a key, and the release deleted it\n");
}

static void test_servers_down(void) {
    redlock *l = open_lock(10000);
    const char *name = ls_name("down");
    redlock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, redlock_acquire(l, name, 1000, &h));
    int64_t before = redlock_token(h);
    CHECK_INT_EQ(LOCK_OK, redlock_release(h));

    own_redis("stop", 2);
    CHECK_INT_EQ(LOCK_OK, redlock_ping(l));
    CHECK_INT_EQ(LOCK_OK, redlock_acquire(l, name, 1000, &h));
    CHECK_INT_EQ(2, redlock_granted(h));
    CHECK_INT_EQ(LOCK_OK, redlock_check(h));
    CHECK_INT_EQ(LOCK_OK, redlock_release(h));
    redlock *fresh = open_lock(10000); /* a majority is enough to start */
    redlock_free(fresh);
    printf("ok: one server down: acquire and release on the other two\n");

    own_redis("stop", 1);
    int64_t t0 = ls_now_us();
    h = (redlock_hold *)1;
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, redlock_acquire(l, name, 5000, &h));
    CHECK(h == NULL);
    CHECK_INT_LT(ls_now_us() - t0, 2000000); /* at once, not at the deadline */
    CHECK(strstr(redlock_errstr(l), "unreachable") != NULL);
    char v[64];
    key_value(0, name, v, sizeof(v));
    CHECK_STR_EQ("", v);
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, redlock_ping(l));
    redlock_config c = {.addrs = addrs};
    char err[512];
    fresh = (redlock *)1;
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, redlock_new(&c, &fresh, err, sizeof(err)));
    CHECK(fresh == NULL);
    CHECK(strstr(err, "1 of 3") != NULL);
    printf("ok: two servers down: LOCK_ERR_CONNECTION at once, no key left behind (%s)\n", err);

    own_redis("start", 1);
    own_redis("start", 2);
    CHECK_INT_EQ(LOCK_OK, redlock_acquire(l, name, 1000, &h));
    CHECK_INT_EQ(3, redlock_granted(h));
    CHECK_INT_GT(redlock_token(h), before);
    CHECK_INT_EQ(LOCK_OK, redlock_release(h));
    redlock_free(l);
    printf("ok: both back: the same handle takes it on all three, token still growing\n");
}

int main(void) {
    addrs = ls_env("STOCKD_TEST_REDLOCK");
    if (sscanf(ls_env("STOCKD_TEST_REDLOCK_PORTS"), "%d %d %d", &ports[0], &ports[1], &ports[2]) !=
        3)
        CHECK_FAIL_("STOCKD_TEST_REDLOCK_PORTS: want three ports");
    test_config();
    test_exclusion();
    test_split_vote();
    test_kleppmann();
    test_renew();
    test_lost_reply();
    test_servers_down();
    return 0;
}
