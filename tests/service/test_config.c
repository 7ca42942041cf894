/* Unit tests of service/config.c: defaults, the environment, argv overriding it, and
 * clear refusals of bad values. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "stockd.h"

static int parse(stockd_config *c, char *err, int argc, char **argv) {
    return stockd_config_parse(c, argc, argv, err, 256);
}

int main(void) {
    stockd_config c;
    char err[256];

    unsetenv("STOCKD_PORT");
    unsetenv("STOCKD_LOCK");
    {
        char *argv[] = {"stockd", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 1, argv));
        CHECK_INT_EQ(8080, c.port);
        CHECK_STR_EQ("127.0.0.1", c.bind);
        CHECK_INT_EQ(STOCKD_LOCK_NONE, c.lock);
        CHECK_STR_EQ("stockd-8080", c.instance);
        CHECK_INT_EQ(16, c.workers);
        CHECK_INT_EQ(64, c.batch_max);
        CHECK_INT_EQ(1, c.segments);
        CHECK(c.precheck);
        CHECK_INT_EQ(1, c.lock_passes);
        CHECK_INT_EQ(25000, c.queue_deadline_ms);
        CHECK_INT_EQ(0, c.think_us);
        CHECK_INT_EQ(0, c.think_jitter_us);
        CHECK_STR_EQ("127.0.0.1:6379", c.redis);
        CHECK_INT_EQ(10000, c.redis_lease_ms);
        CHECK_INT_EQ(10000, c.db_lock_lease_ms);
        CHECK(c.fence);
    }
    /* The lease kinds: Redis from the environment, argv winning over it. */
    setenv("STOCKD_REDIS", "redis.internal:6390", 1);
    setenv("STOCKD_REDIS_LEASE_MS", "3000", 1);
    {
        char *argv[] = {"stockd", "--lock", "redis", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 3, argv));
        CHECK_INT_EQ(STOCKD_LOCK_REDIS, c.lock);
        CHECK_STR_EQ("redis.internal:6390", c.redis);
        CHECK_INT_EQ(3000, c.redis_lease_ms);
    }
    {
        char *argv[] = {"stockd",
                        "--lock",
                        "db-lock",
                        "--redis",
                        "127.0.0.1:7000",
                        "--redis-lease-ms",
                        "500",
                        "--fence",
                        "off",
                        "--db-lock-lease-ms",
                        "2500",
                        NULL};
        CHECK_INT_EQ(0, parse(&c, err, 11, argv));
        CHECK_INT_EQ(STOCKD_LOCK_DB_LOCK, c.lock);
        CHECK_STR_EQ("127.0.0.1:7000", c.redis);
        CHECK_INT_EQ(500, c.redis_lease_ms);
        CHECK_INT_EQ(2500, c.db_lock_lease_ms);
        CHECK(!c.fence);
    }
    unsetenv("STOCKD_REDIS");
    unsetenv("STOCKD_REDIS_LEASE_MS");
    setenv("STOCKD_BATCH_MAX", "8", 1);
    setenv("STOCKD_PRECHECK", "off", 1);
    {
        char *argv[] = {"stockd", "--lock-passes", "4", "--queue-deadline-ms", "0", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 5, argv));
        CHECK_INT_EQ(8, c.batch_max);
        CHECK(!c.precheck);
        CHECK_INT_EQ(4, c.lock_passes);
        CHECK_INT_EQ(0, c.queue_deadline_ms);
    }
    {
        char *argv[] = {"stockd", "--batch-max", "1", "--precheck", "on", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 5, argv));
        CHECK_INT_EQ(1, c.batch_max);
        CHECK(c.precheck);
    }
    setenv("STOCKD_THINK_JITTER_US", "7000", 1);
    {
        char *argv[] = {"stockd", "--think-us", "20000", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 3, argv));
        CHECK_INT_EQ(20000, c.think_us);
        CHECK_INT_EQ(7000, c.think_jitter_us);
    }
    unsetenv("STOCKD_THINK_JITTER_US");
    unsetenv("STOCKD_BATCH_MAX");
    unsetenv("STOCKD_PRECHECK");
    setenv("STOCKD_PORT", "9001", 1);
    setenv("STOCKD_LOCK", "local", 1);
    {
        char *argv[] = {"stockd", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 1, argv));
        CHECK_INT_EQ(9001, c.port);
        CHECK_INT_EQ(STOCKD_LOCK_LOCAL, c.lock);
    }
    {
        char *argv[] = {"stockd", "--port",  "9002",       "--lock", "zk-herd",
                        "--zk",   "h:1,h:2", "--instance", "a-1",    "--lock-timeout-ms",
                        "0",      NULL};
        CHECK_INT_EQ(0, parse(&c, err, 11, argv));
        CHECK_INT_EQ(9002, c.port);
        CHECK_INT_EQ(STOCKD_LOCK_ZK_HERD, c.lock);
        CHECK_STR_EQ("h:1,h:2", c.zk);
        CHECK_STR_EQ("a-1", c.instance);
        CHECK_INT_EQ(0, c.lock_timeout_ms);
    }
    unsetenv("STOCKD_LOCK");
    static const char *bad[][3] = {
        {"--port", "0", "--port"},
        {"--think-jitter-us", "60000001", "--think-jitter-us"},
        {"--think-jitter-us", "-5", "--think-jitter-us"},
        {"--port", "65536", "--port"},
        {"--port", "-1", "--port"},
        {"--port", "12x", "--port"},
        {"--lock", "redlock", "--lock"},
        {"--workers", "0", "--workers"},
        {"--instance", "a b", "instance"},
        {"--nope", "1", "unknown option"},
        {"--batch-max", "0", "--batch-max"},
        {"--batch-max", "1025", "--batch-max"},
        {"--precheck", "yes", "on or off"},
        {"--lock-passes", "0", "--lock-passes"},
        {"--redis", "localhost", "HOST:PORT"},
        {"--redis", "h:0", "HOST:PORT"},
        {"--redis", "a b:1", "HOST:PORT"},
        {"--redis-lease-ms", "99", "--redis-lease-ms"},
        {"--db-lock-lease-ms", "x", "--db-lock-lease-ms"},
        {"--fence", "no", "on or off"},
        {"--segments", "0", "--segments"},
        {"--segments", "257", "--segments"},
        {"--segments", "2", "needs a mode with a lock"}, /* the default mode is none */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[] = {"stockd", (char *)bad[i][0], (char *)bad[i][1], NULL};
        err[0] = '\0';
        CHECK_INT_EQ(-1, parse(&c, err, 3, argv));
        if (!strstr(err, bad[i][2]))
            CHECK_FAIL_("error for %s %s: '%s'", bad[i][0], bad[i][1], err);
    }
    setenv("STOCKD_PORT", "abc", 1);
    {
        char *argv[] = {"stockd", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 1, argv));
        CHECK(strstr(err, "STOCKD_PORT") != NULL);
    }
    unsetenv("STOCKD_PORT");
    {
        char *argv[] = {"stockd", "--lock", "redis", "--segments", "16", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 5, argv));
        CHECK_INT_EQ(16, c.segments);
        char *atomic[] = {"stockd", "--segments", "4", "--lock", "atomic", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 5, atomic));
        CHECK(strstr(err, "not atomic") != NULL);
    }
    for (int m = STOCKD_LOCK_NONE; m <= STOCKD_LOCK_DB_LOCK; m++) {
        stockd_lock_mode back;
        CHECK_INT_EQ(0, stockd_lock_mode_parse(stockd_lock_mode_name(m), &back));
        CHECK_INT_EQ(m, back);
    }
    /* Issue 16, defect 12: a lease shorter than the batch's own pause makes every batch
     * of that lease kind fail, so start-up refuses it. The bound is twice the longest
     * pause (think + jitter) plus 200 ms, for the mode's own lease only. */
    CHECK_INT_EQ(200, STOCKD_LEASE_MIN_MS(0));
    CHECK_INT_EQ(1000, STOCKD_LEASE_MIN_MS(400000));
    CHECK_INT_EQ(1001, STOCKD_LEASE_MIN_MS(400001));
    {
        /* The seed's default lease and a 3 s pause: fine (6.2 s needed). */
        char *ok[] = {"stockd", "--lock", "redis", "--think-us", "3000000", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 5, ok));
        CHECK(c.lease_check);
        /* 1 s lease, 3 s pause: refused, saying which option and what it needs. */
        char *short_lease[] = {"stockd", "--lock",     "redis",   "--redis-lease-ms",
                               "1000",   "--think-us", "3000000", NULL};
        err[0] = '\0';
        CHECK_INT_EQ(-1, parse(&c, err, 7, short_lease));
        CHECK(strstr(err, "--redis-lease-ms 1000 is too short") != NULL);
        CHECK(strstr(err, "at least 6200 ms") != NULL);
        /* Exactly at the bound passes, 1 us of pause more does not. */
        char *edge[] = {"stockd", "--lock",     "redis",  "--redis-lease-ms",
                        "1000",   "--think-us", "400000", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 7, edge));
        char *over[] = {"stockd", "--lock",     "redis",  "--redis-lease-ms",
                        "1000",   "--think-us", "400001", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 7, over));
        /* The jitter is part of the pause. */
        char *jit[] = {"stockd", "--lock",     "redis",  "--redis-lease-ms",
                       "1000",   "--think-us", "300000", "--think-jitter-us",
                       "200000", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 9, jit));
        CHECK(strstr(err, "500000 us") != NULL);
        /* db-lock: its own lease counts, the Redis one does not. */
        char *db[] = {"stockd",           "--lock", "db-lock",    "--db-lock-lease-ms", "2000",
                      "--redis-lease-ms", "100000", "--think-us", "30000000",           NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 9, db));
        CHECK(strstr(err, "--db-lock-lease-ms 2000 is too short") != NULL);
        char *db_redis_short[] = {"stockd", "--lock",     "db-lock", "--redis-lease-ms",
                                  "100",    "--think-us", "1000000", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 7, db_redis_short));
        /* Modes without a lease do not care. */
        char *zk[] = {
            "stockd",     "--lock",   "zk", "--redis-lease-ms", "100", "--db-lock-lease-ms", "100",
            "--think-us", "30000000", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 9, zk));
        /* --lease-check off (the paused-holder demonstrations) lets it through. */
        char *off[] = {"stockd", "--lock",     "db-lock",  "--db-lock-lease-ms",
                       "2000",   "--think-us", "30000000", "--lease-check",
                       "off",    NULL};
        CHECK_INT_EQ(0, parse(&c, err, 9, off));
        CHECK(!c.lease_check);
        setenv("STOCKD_LEASE_CHECK", "off", 1);
        CHECK_INT_EQ(0, parse(&c, err, 7, short_lease));
        unsetenv("STOCKD_LEASE_CHECK");
    }
    /* Credentials: user from argv or the environment, secrets from the environment only
     * (argv has no option for them), never repeated in an error. */
    setenv("STOCKD_REDIS_PASSWORD", "s3cret-redis", 1);
    setenv("STOCKD_ZK_AUTH", "stockd:s3cret-zk", 1);
    {
        char *argv[] = {"stockd", "--redis-user", "stockd", "--redis-password-file", "/run/pw",
                        NULL};
        CHECK_INT_EQ(0, parse(&c, err, 5, argv));
        CHECK_STR_EQ("stockd", c.redis_user);
        CHECK_STR_EQ("s3cret-redis", c.redis_password);
        CHECK_STR_EQ("/run/pw", c.redis_password_file);
        CHECK_STR_EQ("stockd:s3cret-zk", c.zk_auth);
        char *pw_opt[] = {"stockd", "--redis-password", "x", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 3, pw_opt));
        CHECK(strstr(err, "never taken from the command line") != NULL);
        char *pw_eq[] = {"stockd", "--redis-passw=x", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 2, pw_eq));
        char *zk_opt[] = {"stockd", "--zk-auth", "u:p", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 3, zk_opt));
        char *file_eq[] = {"stockd", "--zk-auth-file=/run/zk", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 2, file_eq));
        CHECK_STR_EQ("/run/zk", c.zk_auth_file);
        char *spaced[] = {"stockd", "--redis-user", "a b", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 3, spaced));
    }
    setenv("STOCKD_ZK_AUTH", "no-colon-s3cret", 1);
    {
        char *argv[] = {"stockd", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 1, argv));
        CHECK(strstr(err, "STOCKD_ZK_AUTH must be USER:PASSWORD") != NULL);
        CHECK(strstr(err, "s3cret") == NULL);
    }
    unsetenv("STOCKD_REDIS_PASSWORD");
    unsetenv("STOCKD_ZK_AUTH");
    {
        char *argv[] = {"stockd", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 1, argv));
        CHECK_STR_EQ("", c.redis_user);
        CHECK_STR_EQ("", c.redis_password);
        CHECK_STR_EQ("", c.zk_auth);
    }
    puts("test_config: all passed");
    return 0;
}
