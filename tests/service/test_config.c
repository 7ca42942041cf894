/* Unit tests of service/config.c: defaults, the environment, argv overriding it, and
 * clear refusals of bad values; --config FILE and its place in the precedence. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "stockd.h"

static int parse(stockd_config *c, char *err, int argc, char **argv) {
    return stockd_config_parse(c, argc, argv, err, 256);
}

/* Writes text to a new temporary file and returns its name (static storage). */
static const char *write_file(const char *text) {
    static char path[64];
    int fd;
    FILE *f;

    snprintf(path, sizeof(path), "/tmp/test_config.XXXXXX");
    fd = mkstemp(path);
    CHECK(fd >= 0);
    f = fdopen(fd, "w");
    CHECK(f != NULL);
    fputs(text, f);
    CHECK_INT_EQ(0, fclose(f));
    return path;
}

/* Parses "stockd --config FILE" with FILE holding text, plus extra argv (up to 2). */
static int parse_file(stockd_config *c, char *err, const char *text, char *a1, char *a2) {
    const char *path = write_file(text);
    char *argv[] = {"stockd", "--config", (char *)path, a1, a2, NULL};
    int argc = 3 + (a1 != NULL) + (a2 != NULL), rc = parse(c, err, argc, argv);
    unlink(path);
    return rc;
}

/* --config FILE: KEY=VALUE lines with the environment's keys; the precedence is the
 * command line over the environment over the file over the default. */
static void test_config_file(void) {
    stockd_config c;
    char err[256];

    {
        err[0] = '\0';
        CHECK_INT_EQ(0, parse_file(&c, err,
                                   "# stockd for port 9100\n"
                                   "\n"
                                   "STOCKD_PORT=9100\n"
                                   "  STOCKD_LOCK = zk  \n"
                                   "STOCKD_ZK=\"zk1:2181,zk2:2181\"\n"
                                   "\t# an indented comment\n"
                                   "STOCKD_INSTANCE='shop-a'\n"
                                   "STOCKD_PRECHECK=off\n"
                                   "STOCKD_BATCH_MAX=8", /* no newline at the end */
                                   NULL, NULL));
        CHECK_INT_EQ(9100, c.port);
        CHECK_INT_EQ(STOCKD_LOCK_ZK, c.lock);
        CHECK_STR_EQ("zk1:2181,zk2:2181", c.zk);
        CHECK_STR_EQ("shop-a", c.instance);
        CHECK(!c.precheck);
        CHECK_INT_EQ(8, c.batch_max);
        CHECK_INT_EQ(16, c.workers); /* not in the file: the default */
    }
    /* The environment beats the file, and the command line beats both. */
    setenv("STOCKD_PORT", "9200", 1);
    setenv("STOCKD_WORKERS", "4", 1);
    {
        CHECK_INT_EQ(0, parse_file(&c, err, "STOCKD_PORT=9100\nSTOCKD_WORKERS=2\nSTOCKD_QUEUE=7\n",
                                   "--workers", "3"));
        CHECK_INT_EQ(9200, c.port);
        CHECK_INT_EQ(3, c.workers);
        CHECK_INT_EQ(7, c.queue_max);
        CHECK_STR_EQ("stockd-9200", c.instance);
    }
    unsetenv("STOCKD_PORT");
    unsetenv("STOCKD_WORKERS");
    /* --config=FILE works too, and an option after it still wins. */
    {
        const char *path = write_file("STOCKD_THINK_US=5\n");
        char opt[128];
        snprintf(opt, sizeof(opt), "--config=%s", path);
        char *argv[] = {"stockd", opt, NULL};
        CHECK_INT_EQ(0, parse(&c, err, 2, argv));
        CHECK_INT_EQ(5, c.think_us);
        unlink(path);
    }
    /* Each refusal names the file's line and the key. */
    static const char *bad[][2] = {
        {"STOCKD_PORT=9100\nSTOCKD_PROT=9101\n", ":2: unknown key 'STOCKD_PROT'"},
        {"# ok\nSTOCKD_PORT 9100\n", ":2: expected KEY=VALUE"},
        {"=9100\n", ":1: expected KEY=VALUE"},
        {"STOCKD_PORT=0\n", ":1: STOCKD_PORT must be an integer in 1..65535, got '0'"},
        {"STOCKD_LOCK=chubby\n", ":1: STOCKD_LOCK must be none"},
        {"STOCKD_PORT=1\n\nSTOCKD_PORT=2\n", ":3: STOCKD_PORT given twice (first on line 1)"},
        {"STOCKD_MYSQL_PASSWORD=x\n",
         ":1: STOCKD_MYSQL_PASSWORD is read from the environment only"},
        {"STOCKD_REDIS_PASSWORD=x\n",
         ":1: STOCKD_REDIS_PASSWORD is read from the environment only"},
        {"# x\nSTOCKD_ZK_AUTH=u:p\n", ":2: STOCKD_ZK_AUTH is read from the environment only"},
        {"STOCKD_ZK=\"a:1\n", ":1: STOCKD_ZK: unbalanced quote"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        CHECK_INT_EQ(-1, parse_file(&c, err, bad[i][0], NULL, NULL));
        if (!strstr(err, "/tmp/test_config.") || !strstr(err, bad[i][1]))
            CHECK_FAIL_("config file '%s': expected '%s' in the error, got '%s'", bad[i][0],
                        bad[i][1], err);
    }
    /* A file that cannot be read, and --config without a file. */
    {
        char *argv[] = {"stockd", "--config", "/nonexistent/stockd.conf", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 3, argv));
        CHECK(strstr(err, "/nonexistent/stockd.conf") != NULL);
        char *none[] = {"stockd", "--config", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 2, none));
        CHECK(strstr(err, "--config") != NULL);
        const char *path = write_file("STOCKD_PORT=9100\n");
        char *twice[] = {"stockd", "--config", (char *)path, "--config", (char *)path, NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 5, twice));
        CHECK(strstr(err, "--config given twice") != NULL);
        unlink(path);
    }
    puts("ok: --config FILE");
}

/* Option names are matched exactly: a prefix of an option is no option (getopt would
 * take it), and argv takes no positional argument. */
static void test_exact_names(void) {
    stockd_config c;
    char err[256];
    static const char *bad[][3] = {
        {"--work", "3", "unknown option '--work'"},
        {"--conf", "/dev/null", "unknown option '--conf'"},
        {"--port=", "", "--port must be an integer"},
        {"--redis-password", "x", "secrets are never taken from the command line"},
        {"--zk-auth", "u:p", "secrets are never taken from the command line"},
        {"-x", "1", "unknown option '-x'"},
        {"extra", "1", "unexpected argument 'extra'"},
        {"--", "extra", "unexpected argument 'extra'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[] = {"stockd", (char *)bad[i][0], (char *)bad[i][1], NULL};
        int argc = bad[i][0][strlen(bad[i][0]) - 1] == '=' ? 2 : 3;
        err[0] = '\0';
        CHECK_INT_EQ(-1, parse(&c, err, argc, argv));
        if (!strstr(err, bad[i][2]))
            CHECK_FAIL_("%s %s: expected '%s' in the error, got '%s'", bad[i][0], bad[i][1],
                        bad[i][2], err);
        CHECK(strstr(err, "u:p") == NULL);
    }
    char *last[] = {"stockd", "--workers", NULL};
    CHECK_INT_EQ(-1, parse(&c, err, 2, last));
    CHECK(strstr(err, "--workers needs a N") != NULL);
    char *ok[] = {"stockd", "--workers=3", "--port", "9001", "--", NULL};
    CHECK_INT_EQ(0, parse(&c, err, 5, ok));
    CHECK_INT_EQ(3, c.workers);
    CHECK_INT_EQ(9001, c.port);
    char *help[] = {"stockd", "-h", "--version", NULL};
    CHECK_INT_EQ(0, parse(&c, err, 3, help));
    CHECK(c.help && c.version && !c.list_modes);
    char *modes[] = {"stockd", "--list-modes", NULL};
    CHECK_INT_EQ(0, parse(&c, err, 2, modes));
    CHECK(c.list_modes && !c.help);
    puts("ok: option names are matched exactly");
}

/* --help: the operator options, then the demonstration switches under their own
 * heading; each with its variable, a number's range and the default. */
/* --zk-lock-path: the default is today's path, the articles' /product_{id} is taken, and
 * what an operator can get wrong is refused with the reason. --zk-peer-acl likewise. */
static void test_zk_lock_path(void) {
    stockd_config c;
    char err[256];
    char *none[] = {"stockd", NULL};
    CHECK_INT_EQ(0, parse(&c, err, 1, none));
    CHECK_STR_EQ("/stock/locks/product_{id}", c.zk_lock_path);
    CHECK_STR_EQ("", c.zk_peer_acl);
    char *articles[] = {"stockd", "--zk-lock-path", "/product_{id}", NULL};
    CHECK_INT_EQ(0, parse(&c, err, 3, articles));
    CHECK_STR_EQ("/product_{id}", c.zk_lock_path);
    static const struct {
        const char *path, *why;
    } bad[] = {
        {"product_{id}", "must be absolute"},
        {"/stock/locks/product", "must hold {id}"},
        {"/a/{id}{id}", "must hold {id}"},
        {"/a/{id}/lock", "in its last segment"},
        {"/a//product_{id}", "empty, . or .. segment"},
        {"/a/../product_{id}", "empty, . or .. segment"},
        {"/zookeeper/product_{id}", "outside /zookeeper"},
        {"/locks/{id}-herd", "-herd"},
        {"/locks/p {id}", "printable ASCII"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[] = {"stockd", "--zk-lock-path", (char *)bad[i].path, NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 3, argv));
        if (!strstr(err, bad[i].why)) CHECK_STR_EQ(bad[i].why, err);
    }
    char *peer[] = {"stockd", "--zk-peer-acl", "digest:fleet:HBbbdAfJNfm6ATgpR2LQOwwqHUM=", NULL};
    CHECK_INT_EQ(0, parse(&c, err, 3, peer));
    char *world[] = {"stockd", "--zk-peer-acl", "world:anyone", NULL};
    CHECK_INT_EQ(0, parse(&c, err, 3, world));
    char *badpeer[] = {"stockd", "--zk-peer-acl", "digest:fleet:secret", NULL};
    CHECK_INT_EQ(-1, parse(&c, err, 3, badpeer));
    CHECK(strstr(err, "--zk-peer-acl must be") != NULL);
}

static void test_help(void) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL);
    stockd_config_usage(f);
    CHECK_INT_EQ(0, fclose(f));
    const char *demo = strstr(text, "\ndemonstration switches");
    CHECK(demo != NULL);
    static const char *operator[] = {"--port P", "--lock MODE", "--lock-cache-ms N",
                                     "--config FILE", "--lease-renew on|off"};
    static const char *demos[] = {"--fence on|off", "--pitfall none|", "--lease-check on|off",
                                  "--lock-passes N", "--think-us N"};
    for (size_t i = 0; i < 5; i++) {
        const char *o = strstr(text, operator[i]), *d = strstr(text, demos[i]);
        if (!o || o > demo) CHECK_FAIL_("'%s' not among the operator options", operator[i]);
        if (!d || d < demo) CHECK_FAIL_("'%s' not among the demonstration switches", demos[i]);
    }
    /* The same text with each line break and its indent as one space. */
    char *flat = malloc(len + 1), *o = flat;
    CHECK(flat != NULL);
    for (const char *p = text; *p; p++) {
        if (*p == '\n') p += strspn(p + 1, " ");
        *o++ = *p == '\n' ? ' ' : *p;
    }
    *o = '\0';
    CHECK(strstr(flat, "(STOCKD_WORKERS, 1..512) [16]") != NULL);
    CHECK(strstr(flat, "etcd or redis-stock (STOCKD_LOCK) [none]") != NULL);
    CHECK(strstr(flat, "(STOCKD_LOCK_CACHE_MS, 0..60000) [") != NULL);
    free(flat);
    CHECK(strstr(text, "STOCKD_REDIS_PASSWORD") != NULL); /* named, but no option */
    CHECK(strstr(text, "--redis-password ") == NULL);
    for (const char *line = text; *line; line = strchr(line, '\n') + 1) {
        size_t n = strcspn(line, "\n");
        if (n > 81) CHECK_FAIL_("a --help line of %zu columns: %.*s", n, (int)n, line);
    }
    free(text);
    puts("ok: --help lists the operator options, then the demonstration switches");
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
        CHECK_INT_EQ(200, c.lock_cache_ms);
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
    /* RedLock: --redis is its list of servers; mode redis keeps taking one address, and
     * each mode refuses the other's form once every option is in. */
    {
        char *argv[] = {"stockd", "--lock", "redlock", "--redis", "a:1,b:2,c:3", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 5, argv));
        CHECK_INT_EQ(STOCKD_LOCK_REDLOCK, c.lock);
        CHECK_STR_EQ("a:1,b:2,c:3", c.redis);
        CHECK_INT_EQ(3000, c.redis_lease_ms);
        char *one[] = {"stockd", "--lock", "redlock", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 3, one));
        CHECK(strstr(err, "--lock redlock needs --redis with 3 to 9") != NULL);
        char *list[] = {"stockd", "--redis", "a:1,b:2,c:3", "--lock", "redis", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 5, list));
        CHECK(strstr(err, "a list of servers is for --lock redlock") != NULL);
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
        char *argv[] = {"stockd", "--lock-passes",   "4", "--queue-deadline-ms",
                        "0",      "--lock-cache-ms", "0", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 7, argv));
        CHECK_INT_EQ(0, c.lock_cache_ms);
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
        {"--lock", "chubby", "--lock"},
        {"--redis", "a:1,b:2", "HOST:PORT"},
        {"--redis", "a:1,b:2,a:1", "HOST:PORT"},
        {"--workers", "0", "--workers"},
        {"--instance", "a b", "instance"},
        {"--nope", "1", "unknown option"},
        {"--batch-max", "0", "--batch-max"},
        {"--batch-max", "1025", "--batch-max"},
        {"--precheck", "yes", "on or off"},
        {"--lock-passes", "0", "--lock-passes"},
        {"--lock-cache-ms", "60001", "--lock-cache-ms"},
        {"--lock-cache-ms", "-1", "--lock-cache-ms"},
        {"--redis", "localhost", "HOST:PORT"},
        {"--redis", "h:0", "HOST:PORT"},
        {"--redis", "a b:1", "HOST:PORT"},
        {"--redis-lease-ms", "99", "--redis-lease-ms"},
        {"--db-lock-lease-ms", "x", "--db-lock-lease-ms"},
        {"--fence", "no", "on or off"},
        {"--segments", "0", "--segments"},
        {"--segments", "257", "--segments"},
        {"--segments", "2", "needs a mode with a lock"}, /* the default mode is none */
        {"--pitfall", "forget-the-lock", "one of none|release-before-commit|snapshot-before-lock"},
        {"--log-format", "xml", "--log-format must be one of text|json"},
        {"--pitfall", "snapshot-before-lock", "none has none to misuse"},
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
    {
        /* --pitfall: parsed for the modes with a lock of the service's, refused (with
         * the reason) where the mistake cannot be made. */
        char *zk[] = {"stockd", "--lock", "zk", "--pitfall", "release-before-commit", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 5, zk));
        CHECK_INT_EQ(STOCKD_PITFALL_RELEASE_BEFORE_COMMIT, c.pitfall);
        char *db[] = {"stockd", "--lock", "db-lock", "--pitfall", "snapshot-before-lock", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 5, db));
        CHECK_INT_EQ(STOCKD_PITFALL_SNAPSHOT_BEFORE_LOCK, c.pitfall);
        char *fu[] = {"stockd", "--lock", "for-update", "--pitfall", "release-before-commit", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 5, fu));
        CHECK(strstr(err, "for-update has none to misuse") != NULL);
        char *atomic[] = {"stockd", "--pitfall", "snapshot-before-lock", "--lock", "atomic", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 5, atomic));
        CHECK(strstr(err, "atomic has none to misuse") != NULL);
        char *none[] = {"stockd", "--lock", "local", "--pitfall", "none", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 5, none));
        CHECK_INT_EQ(STOCKD_PITFALL_NONE, c.pitfall);
    }
    for (int m = STOCKD_LOCK_NONE; m <= STOCKD_LOCK_REDLOCK; m++) {
        stockd_lock_mode back;
        CHECK_INT_EQ(0, stockd_lock_mode_parse(stockd_lock_mode_name(m), &back));
        CHECK_INT_EQ(m, back);
    }
    test_config_file();
    test_exact_names();
    test_help();
    test_zk_lock_path();
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
    {
        /* Issue 20 #3, the watchdog: off by default, on|off for the lease kinds only (a
         * mode without a lease has nothing to renew), and its environment twin. */
        char *dflt[] = {"stockd", "--lock", "redis", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 3, dflt));
        CHECK(!c.lease_renew);
        char *on[] = {"stockd", "--lock", "db-lock", "--lease-renew", "on", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 5, on));
        CHECK(c.lease_renew);
        char *not_bool[] = {"stockd", "--lock", "redis", "--lease-renew", "yes", NULL};
        err[0] = '\0';
        CHECK_INT_EQ(-1, parse(&c, err, 5, not_bool));
        CHECK(strstr(err, "--lease-renew must be on or off") != NULL);
        char *zk[] = {"stockd", "--lock", "zk", "--lease-renew", "on", NULL};
        err[0] = '\0';
        CHECK_INT_EQ(-1, parse(&c, err, 5, zk));
        CHECK(strstr(err, "needs a lease lock (redis, db-lock, redlock or etcd), not zk") != NULL);
        /* etcd keeps its leases alive itself; the watchdog is redundant there, not wrong. */
        char *etcd_renew[] = {"stockd", "--lock", "etcd", "--lease-renew", "on", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 5, etcd_renew));
        char *zk_off[] = {"stockd", "--lock", "zk", "--lease-renew", "off", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 5, zk_off));
        setenv("STOCKD_LEASE_RENEW", "on", 1);
        CHECK_INT_EQ(0, parse(&c, err, 3, dflt));
        CHECK(c.lease_renew);
        unsetenv("STOCKD_LEASE_RENEW");
    }
    {
        /* Issue 20 #2, mode etcd: a member list, a TTL of at least etcd's minimum (2 s),
         * and the lease check against the pause like the other lease kinds. */
        char *dflt[] = {"stockd", "--lock", "etcd", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 3, dflt));
        CHECK_INT_EQ(STOCKD_LOCK_ETCD, c.lock);
        CHECK_STR_EQ("127.0.0.1:2379", c.etcd);
        CHECK_INT_EQ(10, c.etcd_ttl_s);
        char *list[] = {"stockd",          "--lock",       "etcd", "--etcd",
                        "a:1,127.0.0.1:2", "--etcd-ttl-s", "2",    NULL};
        CHECK_INT_EQ(0, parse(&c, err, 7, list));
        CHECK_STR_EQ("a:1,127.0.0.1:2", c.etcd);
        CHECK_INT_EQ(2, c.etcd_ttl_s);
        char *bad_list[] = {"stockd", "--etcd", "a:1,", NULL};
        err[0] = '\0';
        CHECK_INT_EQ(-1, parse(&c, err, 3, bad_list));
        CHECK(strstr(err, "--etcd must be HOST:PORT[,HOST:PORT...], got 'a:1,'") != NULL);
        char *ttl1[] = {"stockd", "--etcd-ttl-s", "1", NULL};
        CHECK_INT_EQ(-1, parse(&c, err, 3, ttl1));
        char *short_ttl[] = {"stockd", "--lock",     "etcd",    "--etcd-ttl-s",
                             "2",      "--think-us", "1000000", NULL};
        err[0] = '\0';
        CHECK_INT_EQ(-1, parse(&c, err, 7, short_ttl));
        CHECK(strstr(err, "--etcd-ttl-s (in ms) 2000 is too short") != NULL);
        setenv("STOCKD_ETCD", "127.0.0.1:9", 1);
        CHECK_INT_EQ(0, parse(&c, err, 3, dflt));
        CHECK_STR_EQ("127.0.0.1:9", c.etcd);
        unsetenv("STOCKD_ETCD");
    }
    {
        /* Issue 35, mode redis-stock: no lock and no batches; one Redis; WAIT only there. */
        char *dflt[] = {"stockd", "--lock", "redis-stock", NULL};
        CHECK_INT_EQ(0, parse(&c, err, 3, dflt));
        CHECK_INT_EQ(STOCKD_LOCK_REDIS_STOCK, c.lock);
        CHECK(!stockd_mode_of(c.lock)->batched);
        CHECK(!stockd_mode_locks(stockd_mode_of(c.lock)));
        CHECK_INT_EQ(0, c.redis_wait_replicas);
        CHECK_INT_EQ(100, c.redis_wait_ms);
        char *wait[] = {"stockd", "--lock",          "redis-stock", "--redis-wait-replicas",
                        "1",      "--redis-wait-ms", "250",         NULL};
        CHECK_INT_EQ(0, parse(&c, err, 7, wait));
        CHECK_INT_EQ(1, c.redis_wait_replicas);
        CHECK_INT_EQ(250, c.redis_wait_ms);
        char *list[] = {"stockd", "--lock", "redis-stock", "--redis", "a:1,b:2,c:3", NULL};
        err[0] = '\0';
        CHECK_INT_EQ(-1, parse(&c, err, 5, list));
        CHECK(strstr(err, "--lock redis-stock takes one HOST:PORT in --redis") != NULL);
        char *elsewhere[] = {"stockd", "--lock", "atomic", "--redis-wait-replicas", "1", NULL};
        err[0] = '\0';
        CHECK_INT_EQ(-1, parse(&c, err, 5, elsewhere));
        CHECK(strstr(err, "--redis-wait-replicas is for --lock redis-stock, not atomic") != NULL);
        char *segs[] = {"stockd", "--lock", "redis-stock", "--segments", "4", NULL};
        err[0] = '\0';
        CHECK_INT_EQ(-1, parse(&c, err, 5, segs));
        CHECK(strstr(err, "needs a mode with a lock") != NULL);
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
