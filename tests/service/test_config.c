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
    puts("test_config: all passed");
    return 0;
}
