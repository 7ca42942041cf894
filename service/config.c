/* config.c: stockd's options. Every option has an environment twin (STOCKD_*), read
 * first, so that a secret such as the MySQL password never has to appear in argv
 * (STOCKD_MYSQL_PASSWORD is read by main.c). --config FILE gives the same keys as
 * KEY=VALUE lines. Pure apart from getenv and reading that file. The table of
 * --lock modes and what derives from it (stockd_lock_config) are in modes.c. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stockd.h"

/* RedLock's server count bounds (lock/redlock.h's REDLOCK_SERVERS_MIN and _MAX; config.c
 * links no Redis client, so they are repeated here). */
#define REDLOCK_MIN 3
#define REDLOCK_MAX 9
/* The most addresses one list may name: RedLock's servers, or etcd's members (an etcd
 * cluster of more than 9 members is slower, not safer). */
#define HOSTPORT_LIST_MAX REDLOCK_MAX

/* How many distinct HOST:PORT a comma list names (1 for a plain address), or -1 if one
 * is malformed, two are equal, or there are more than HOSTPORT_LIST_MAX. For --redis
 * (redlock's servers) and --etcd (the cluster's members). */
static int hostport_list_count(const char *v) {
    char seen[HOSTPORT_LIST_MAX][256];
    int n = 0;
    for (const char *p = v;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char host[256];
        int port;
        if (n == HOSTPORT_LIST_MAX || len == 0 || len >= sizeof(seen[0])) return -1;
        memcpy(seen[n], p, len);
        seen[n][len] = '\0';
        if (lock_parse_hostport(seen[n], host, sizeof(host), &port) != LOCK_OK) return -1;
        for (int i = 0; i < n; i++)
            if (strcmp(seen[i], seen[n]) == 0) return -1;
        n++;
        if (!comma) return n;
        p = comma + 1;
    }
}

void stockd_config_usage(FILE *out) {
    fputs("usage: stockd [options]\n"
          "\n"
          "An inventory-deduction HTTP service: GET|POST /stock/reduce?id=N deducts one unit\n"
          "of product N in a MySQL transaction, under the lock chosen by --lock.\n"
          "\n"
          "options (each also read from the environment variable in brackets):\n"
          "  --port P               listen port (STOCKD_PORT) [8080]\n"
          "  --bind ADDR            listen address (STOCKD_BIND) [127.0.0.1]\n"
          "  --lock MODE            none | local | zk | zk-herd | for-update | atomic |\n"
          "                         redis | db-lock | redlock | etcd (STOCKD_LOCK) [none]\n"
          "  --mysql URL            mysql://USER@HOST:PORT/DB (STOCKD_MYSQL)\n"
          "                         [mysql://stockd@127.0.0.1:3306/shop]; the password is\n"
          "                         read from STOCKD_MYSQL_PASSWORD, so it is not in argv\n"
          "  --zk HOSTS             ZooKeeper HOST:PORT[,HOST:PORT...] (STOCKD_ZK)\n"
          "                         [127.0.0.1:2181]; used by zk and zk-herd\n"
          "  --redis HOST:PORT      the Redis of mode redis (STOCKD_REDIS) [127.0.0.1:6379];\n"
          "                         connected at the first request, so a Redis that is down\n"
          "                         gives 503 answers, not a failed start. Mode redlock\n"
          "                         takes 3 to 9 independent servers, HOST:PORT,HOST:PORT,...\n"
          "                         and holds a lock while a majority grants it\n"
          "  --redis-lease-ms N     lease of one Redis (or RedLock) lock acquisition; keep it\n"
          "                         well above a batch's time (STOCKD_REDIS_LEASE_MS) [10000]\n"
          "  --db-lock-lease-ms N   lease of one stock_lock row, after which another\n"
          "                         instance may take a crashed holder's lock\n"
          "                         (STOCKD_DB_LOCK_LEASE_MS) [10000]\n"
          "  --etcd HOST:PORT[,HOST:PORT...]  the etcd members of mode etcd (STOCKD_ETCD)\n"
          "                         [127.0.0.1:2379]; connected at the first request, as\n"
          "                         Redis is\n"
          "  --etcd-ttl-s N         TTL of an etcd lock's lease, kept alive while it is\n"
          "                         held; a holder that dies blocks its product this long\n"
          "                         (STOCKD_ETCD_TTL_S) [10]; etcd raises it to at least 2\n"
          "                         In modes redis, db-lock and etcd, start-up is refused\n"
          "                         (exit 2) unless the mode's lease is at least twice\n"
          "                         the longest pause (--think-us + --think-jitter-us)\n"
          "                         plus 200 ms: room for the batch's SQL and COMMIT, the\n"
          "                         lease's safety margin (a tenth) and a loaded machine\n"
          "  --lease-check on|off   off skips that refusal (STOCKD_LEASE_CHECK) [on]; ONLY\n"
          "                         for the demonstrations of a holder outliving its lease\n"
          "  --redis-user NAME      the Redis ACL user stockd authenticates as\n"
          "                         (STOCKD_REDIS_USER) [none: the default user]; the\n"
          "                         password is read from STOCKD_REDIS_PASSWORD, so it is\n"
          "                         not in argv, or from:\n"
          "  --redis-password-file F  the first line of file F (STOCKD_REDIS_PASSWORD_FILE)\n"
          "  --zk-auth-file F       ZooKeeper digest credentials USER:PASSWORD, the first\n"
          "                         line of file F (STOCKD_ZK_AUTH_FILE), or from\n"
          "                         STOCKD_ZK_AUTH itself; with them, lock nodes are\n"
          "                         made with an ACL that gives access to that identity\n"
          "                         only [none: nodes open to every client]\n"
          "  --fence on|off         off: the write carries no fencing token and the commit\n"
          "                         does not re-check the lock (STOCKD_FENCE) [on]; ONLY for\n"
          "                         the demonstration that a holder paused past its lease\n"
          "                         then oversells\n"
          "  --instance NAME        name in answers, logs and orders (STOCKD_INSTANCE)\n"
          "                         [stockd-PORT]\n"
          "  --workers N            worker threads = MySQL connections (STOCKD_WORKERS) [16]\n"
          "  --queue N              requests waiting for a worker before 503\n"
          "                         (STOCKD_QUEUE) [4096]\n"
          "  --lock-timeout-ms N    how long a deduction waits for the product's lock\n"
          "                         (STOCKD_LOCK_TIMEOUT_MS) [5000]\n"
          "  --zk-session-ms N      ZooKeeper session timeout (STOCKD_ZK_SESSION_MS) [6000]\n"
          "  --max-connections N    HTTP connection limit (STOCKD_MAX_CONNECTIONS) [1024]\n"
          "  --connection-timeout-s N  idle HTTP connection timeout\n"
          "                         (STOCKD_CONNECTION_TIMEOUT_S) [30]\n"
          "  --think-us N           pause between the stock check and the update, standing\n"
          "                         in for a real service's business logic; the oversell\n"
          "                         experiment uses it (STOCKD_THINK_US) [0]; with batching\n"
          "                         it is paid once per batch\n"
          "  --think-jitter-us N    add a uniformly random 0..N us to each pause, so that\n"
          "                         instances with the same pause do not fall into step\n"
          "                         (STOCKD_THINK_JITTER_US) [0]\n"
          "  --batch-max N          deductions of one product served under one lock\n"
          "                         acquisition, as one transaction (STOCKD_BATCH_MAX) [64];\n"
          "                         1 = the seed's one acquisition per deduction. Modes\n"
          "                         none and atomic never batch\n"
          "  --precheck on|off      answer sold out from one plain read before queuing for\n"
          "                         the lock (STOCKD_PRECHECK) [on]; off = every request\n"
          "                         takes the lock, as in the seed\n"
          "  --lock-passes N        batches one acquisition may serve back to back while\n"
          "                         more deductions of the product wait (STOCKD_LOCK_PASSES)\n"
          "                         [1]: 1 = release and queue again after every batch\n"
          "  --lock-cache-ms N      mode zk: keep the product's lock node after a batch for up\n"
          "                         to N ms, so the next batch in this process takes it\n"
          "                         without ZooKeeper; let go at once when another instance\n"
          "                         queues (a children watch) (STOCKD_LOCK_CACHE_MS) [200];\n"
          "                         0 = off; never with --batch-max 1\n"
          "  --cross-products K     mode zk: one batch may take waiting deductions of up to K\n"
          "                         products whose locks are free now (try only, never\n"
          "                         waited for) and commit them in ONE transaction, each row\n"
          "                         with its own fence (STOCKD_CROSS_PRODUCTS) [1]; 1 = one\n"
          "                         product per batch; never with --batch-max 1 or segments\n"
          "  --queue-deadline-ms N  a request still unserved this long after it arrived is\n"
          "                         answered 503 without deducting, also when its batch's\n"
          "                         COMMIT would come later; a statement waits at most a\n"
          "                         fifth of it (2..10 s); keep it plus a fifth within the\n"
          "                         proxy's read timeout (STOCKD_QUEUE_DEADLINE_MS) [25000];\n"
          "                         0 = none\n"
          "  --segments K           the product's stock is split over K rows of\n"
          "                         product_segment, each with its own lock; a deduction\n"
          "                         starts at a random segment and moves on while they are\n"
          "                         empty (STOCKD_SEGMENTS) [1]; every instance and the\n"
          "                         stock reset (scripts/stack-lib.sh mysql_set_stock) must\n"
          "                         use the same K. Modes with a lock only; at most half\n"
          "                         the workers serve one product's segments at a time\n"
          "  --pitfall MISTAKE      make one of the two classic mistakes on purpose, to\n"
          "                         show what it does (STOCKD_PITFALL) [none]:\n"
          "                         release-before-commit (unlock, then COMMIT) or\n"
          "                         snapshot-before-lock (REPEATABLE READ snapshot opened\n"
          "                         before acquiring). Lock modes local, zk, zk-herd, redis,\n"
          "                         db-lock, redlock and etcd only. NEVER in production\n"
          "  --log-format text|json text: one line per event for people; json: one\n"
          "                         object per line (time, level, instance, message) for\n"
          "                         log shippers (STOCKD_LOG_FORMAT) [text]\n"
          "  --lease-renew on|off   the watchdog of modes redis, db-lock and redlock, as\n"
          "                         Redisson's: a thread renews every lease this process\n"
          "                         holds at a third of its length, only while it is\n"
          "                         still ours (STOCKD_LEASE_RENEW) [off]; redundant in\n"
          "                         mode etcd, whose library keeps its leases alive\n"
          "                         itself\n"
          "  --config FILE          read options from FILE: KEY=VALUE lines with the keys\n"
          "                         of the environment variables above (STOCKD_PORT=8081),\n"
          "                         # comments and blank lines; an unknown key or a bad\n"
          "                         line is an error. The command line wins over the\n"
          "                         environment, which wins over the file, which wins over\n"
          "                         the defaults. STOCKD_MYSQL_PASSWORD stays in the\n"
          "                         environment\n"
          "  --help, --version\n",
          out);
}

static int set_uint(unsigned *dst, const char *s, unsigned lo, unsigned hi, const char *name,
                    char *err, size_t errlen) {
    char *end;
    unsigned long v;

    if (!s || !*s || *s == '-' || *s == '+') goto bad;
    v = strtoul(s, &end, 10);
    if (*end || v < lo || v > hi) goto bad;
    *dst = (unsigned)v;
    return 0;
bad:
    snprintf(err, errlen, "%s must be an integer in %u..%u, got '%s'", name, lo, hi, s ? s : "");
    return -1;
}

static int set_onoff(bool *dst, const char *s, const char *name, char *err, size_t errlen) {
    if (s && (strcmp(s, "on") == 0 || strcmp(s, "off") == 0)) {
        *dst = strcmp(s, "on") == 0;
        return 0;
    }
    snprintf(err, errlen, "%s must be on or off, got '%s'", name, s ? s : "");
    return -1;
}

static int set_str(char *dst, size_t cap, const char *s, const char *name, char *err,
                   size_t errlen) {
    if (!s || strlen(s) >= cap) {
        snprintf(err, errlen, "%s is too long (at most %zu bytes)", name, cap - 1);
        return -1;
    }
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

enum {
    O_PORT = 1,
    O_BIND,
    O_LOCK,
    O_MYSQL,
    O_ZK,
    O_INSTANCE,
    O_WORKERS,
    O_QUEUE,
    O_LOCK_TIMEOUT,
    O_ZK_SESSION,
    O_MAX_CONN,
    O_CONN_TIMEOUT,
    O_THINK,
    O_THINK_JITTER,
    O_BATCH_MAX,
    O_PRECHECK,
    O_LOCK_PASSES,
    O_LOCK_CACHE,
    O_CROSS,
    O_QUEUE_DEADLINE,
    O_REDIS,
    O_REDIS_LEASE,
    O_DB_LOCK_LEASE,
    O_FENCE,
    O_SEGMENTS,
    O_PITFALL,
    O_LEASE_CHECK,
    O_REDIS_USER,
    O_REDIS_PASSWORD_FILE,
    O_ZK_AUTH_FILE,
    O_LOG_FORMAT,
    O_LEASE_RENEW,
    O_ETCD,
    O_ETCD_TTL,
    O_CONFIG, /* not in options[]: read before the environment (config_file_find) */
    O_HELP,
    O_VERSION,
};

static const struct {
    int id;
    const char *opt;
    const char *env;
} options[] = {
    {O_PORT, "port", "STOCKD_PORT"},
    {O_BIND, "bind", "STOCKD_BIND"},
    {O_LOCK, "lock", "STOCKD_LOCK"},
    {O_MYSQL, "mysql", "STOCKD_MYSQL"},
    {O_ZK, "zk", "STOCKD_ZK"},
    {O_INSTANCE, "instance", "STOCKD_INSTANCE"},
    {O_WORKERS, "workers", "STOCKD_WORKERS"},
    {O_QUEUE, "queue", "STOCKD_QUEUE"},
    {O_LOCK_TIMEOUT, "lock-timeout-ms", "STOCKD_LOCK_TIMEOUT_MS"},
    {O_ZK_SESSION, "zk-session-ms", "STOCKD_ZK_SESSION_MS"},
    {O_MAX_CONN, "max-connections", "STOCKD_MAX_CONNECTIONS"},
    {O_CONN_TIMEOUT, "connection-timeout-s", "STOCKD_CONNECTION_TIMEOUT_S"},
    {O_THINK, "think-us", "STOCKD_THINK_US"},
    {O_THINK_JITTER, "think-jitter-us", "STOCKD_THINK_JITTER_US"},
    {O_BATCH_MAX, "batch-max", "STOCKD_BATCH_MAX"},
    {O_PRECHECK, "precheck", "STOCKD_PRECHECK"},
    {O_LOCK_PASSES, "lock-passes", "STOCKD_LOCK_PASSES"},
    {O_LOCK_CACHE, "lock-cache-ms", "STOCKD_LOCK_CACHE_MS"},
    {O_CROSS, "cross-products", "STOCKD_CROSS_PRODUCTS"},
    {O_QUEUE_DEADLINE, "queue-deadline-ms", "STOCKD_QUEUE_DEADLINE_MS"},
    {O_REDIS, "redis", "STOCKD_REDIS"},
    {O_REDIS_LEASE, "redis-lease-ms", "STOCKD_REDIS_LEASE_MS"},
    {O_DB_LOCK_LEASE, "db-lock-lease-ms", "STOCKD_DB_LOCK_LEASE_MS"},
    {O_FENCE, "fence", "STOCKD_FENCE"},
    {O_SEGMENTS, "segments", "STOCKD_SEGMENTS"},
    {O_PITFALL, "pitfall", "STOCKD_PITFALL"},
    {O_LEASE_CHECK, "lease-check", "STOCKD_LEASE_CHECK"},
    {O_REDIS_USER, "redis-user", "STOCKD_REDIS_USER"},
    {O_REDIS_PASSWORD_FILE, "redis-password-file", "STOCKD_REDIS_PASSWORD_FILE"},
    {O_ZK_AUTH_FILE, "zk-auth-file", "STOCKD_ZK_AUTH_FILE"},
    {O_LOG_FORMAT, "log-format", "STOCKD_LOG_FORMAT"},
    {O_LEASE_RENEW, "lease-renew", "STOCKD_LEASE_RENEW"},
    {O_ETCD, "etcd", "STOCKD_ETCD"},
    {O_ETCD_TTL, "etcd-ttl-s", "STOCKD_ETCD_TTL_S"},
};
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

/* Applies one option's value. name is what the user wrote, for the message. */
static int apply(stockd_config *c, int id, const char *v, const char *name, char *err,
                 size_t errlen) {
    switch (id) {
    case O_PORT:
        return set_uint(&c->port, v, 1, 65535, name, err, errlen);
    case O_BIND:
        return set_str(c->bind, sizeof(c->bind), v, name, err, errlen);
    case O_LOCK:
        if (stockd_lock_mode_parse(v, &c->lock) != 0) {
            char list[256];
            snprintf(err, errlen, "%s must be %s, got '%s'", name,
                     stockd_mode_list(list, sizeof(list), NULL), v);
            return -1;
        }
        return 0;
    case O_MYSQL:
        return set_str(c->mysql_url, sizeof(c->mysql_url), v, name, err, errlen);
    case O_ZK:
        return set_str(c->zk, sizeof(c->zk), v, name, err, errlen);
    case O_INSTANCE:
        return set_str(c->instance, sizeof(c->instance), v, name, err, errlen);
    case O_WORKERS:
        return set_uint(&c->workers, v, 1, 512, name, err, errlen);
    case O_QUEUE:
        return set_uint(&c->queue_max, v, 1, 1000000, name, err, errlen);
    case O_LOCK_TIMEOUT:
        return set_uint(&c->lock_timeout_ms, v, 0, 600000, name, err, errlen);
    case O_ZK_SESSION:
        return set_uint(&c->zk_session_ms, v, 1000, 600000, name, err, errlen);
    case O_MAX_CONN:
        return set_uint(&c->max_connections, v, 1, 100000, name, err, errlen);
    case O_CONN_TIMEOUT:
        return set_uint(&c->connection_timeout_s, v, 1, 3600, name, err, errlen);
    case O_THINK:
        return set_uint(&c->think_us, v, 0, 60000000, name, err, errlen);
    case O_THINK_JITTER:
        return set_uint(&c->think_jitter_us, v, 0, 60000000, name, err, errlen);
    case O_BATCH_MAX:
        return set_uint(&c->batch_max, v, 1, STOCKDB_BATCH_MAX, name, err, errlen);
    case O_PRECHECK:
        return set_onoff(&c->precheck, v, name, err, errlen);
    case O_LOCK_PASSES:
        return set_uint(&c->lock_passes, v, 1, 1000, name, err, errlen);
    case O_LOCK_CACHE:
        return set_uint(&c->lock_cache_ms, v, 0, 60000, name, err, errlen);
    case O_CROSS:
        return set_uint(&c->cross_products, v, 1, STOCKDB_MULTI_MAX, name, err, errlen);
    case O_QUEUE_DEADLINE:
        return set_uint(&c->queue_deadline_ms, v, 0, 3600000, name, err, errlen);
    case O_REDIS: {
        /* One address (mode redis) or RedLock's list; which one the mode wants is
         * checked once every option is in (stockd_config_parse's end). */
        int n = v ? hostport_list_count(v) : -1;
        if (n < 0 || (strchr(v, ',') ? n < REDLOCK_MIN : n != 1)) {
            snprintf(err, errlen,
                     "%s must be HOST:PORT (or, for mode redlock, %d to %d distinct "
                     "HOST:PORT,...), got '%s'",
                     name, REDLOCK_MIN, REDLOCK_MAX, v ? v : "");
            return -1;
        }
        return set_str(c->redis, sizeof(c->redis), v, name, err, errlen);
    }
    /* A lease shorter than 100 ms would run out inside one batch on a busy machine. */
    case O_REDIS_LEASE:
        return set_uint(&c->redis_lease_ms, v, 100, 3600000, name, err, errlen);
    case O_DB_LOCK_LEASE:
        return set_uint(&c->db_lock_lease_ms, v, 100, 3600000, name, err, errlen);
    case O_ETCD:
        if (!v || hostport_list_count(v) < 1) {
            snprintf(err, errlen, "%s must be HOST:PORT[,HOST:PORT...], got '%s'", name,
                     v ? v : "");
            return -1;
        }
        return set_str(c->etcd, sizeof(c->etcd), v, name, err, errlen);
    /* etcd grants no lease below its minimum (2 s with the default election timeout). */
    case O_ETCD_TTL:
        return set_uint(&c->etcd_ttl_s, v, 2, 3600, name, err, errlen);
    case O_FENCE:
        return set_onoff(&c->fence, v, name, err, errlen);
    case O_SEGMENTS:
        return set_uint(&c->segments, v, 1, STOCKD_SEGMENTS_MAX, name, err, errlen);
    case O_PITFALL:
        if (v && strcmp(v, "none") == 0) {
            c->pitfall = STOCKD_PITFALL_NONE;
        } else if (v && strcmp(v, "release-before-commit") == 0) {
            c->pitfall = STOCKD_PITFALL_RELEASE_BEFORE_COMMIT;
        } else if (v && strcmp(v, "snapshot-before-lock") == 0) {
            c->pitfall = STOCKD_PITFALL_SNAPSHOT_BEFORE_LOCK;
        } else {
            snprintf(err, errlen,
                     "%s must be none, release-before-commit or snapshot-before-lock, got '%s'",
                     name, v ? v : "");
            return -1;
        }
        return 0;
    case O_LEASE_CHECK:
        return set_onoff(&c->lease_check, v, name, err, errlen);
    case O_REDIS_USER:
        /* The name goes into AUTH as one argument; Redis ACL names have no spaces. */
        if (!v || !*v || strcspn(v, " \t\r\n") != strlen(v)) {
            snprintf(err, errlen, "%s must be a user name without spaces", name);
            return -1;
        }
        return set_str(c->redis_user, sizeof(c->redis_user), v, name, err, errlen);
    case O_REDIS_PASSWORD_FILE:
        return set_str(c->redis_password_file, sizeof(c->redis_password_file), v, name, err,
                       errlen);
    case O_ZK_AUTH_FILE:
        return set_str(c->zk_auth_file, sizeof(c->zk_auth_file), v, name, err, errlen);
    case O_LOG_FORMAT:
        if (v && (strcmp(v, "text") == 0 || strcmp(v, "json") == 0)) {
            c->log_format = strcmp(v, "json") == 0 ? STOCKD_LOG_JSON : STOCKD_LOG_TEXT;
            return 0;
        }
        snprintf(err, errlen, "%s must be text or json, got '%s'", name, v ? v : "");
        return -1;
    case O_LEASE_RENEW:
        return set_onoff(&c->lease_renew, v, name, err, errlen);
    }
    return -1;
}

/* ------------------------------------------------------------ --config FILE */

/* --config FILE is read in a block of its own: it feeds each line to apply(), the same
 * setter the environment uses, under the same key, so an option added to the table
 * above is a key of the file too. The file comes between the defaults and the
 * environment: command line > environment > file > defaults. */

/* Finds --config FILE or --config=FILE in argv, before getopt runs, because the file
 * must be applied before the environment. Sets *path (NULL without the option).
 * Returns -1 with err set when the option has no file or is given twice. */
static int config_file_find(int argc, char **argv, const char **path, char *err, size_t errlen) {
    *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *p = NULL;
        if (strcmp(a, "--") == 0) break;
        if (strcmp(a, "--config") == 0) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--config needs a FILE");
                return -1;
            }
            p = argv[++i];
        } else if (strncmp(a, "--config=", 9) == 0) {
            p = a + 9;
        } else {
            continue;
        }
        if (*path) {
            snprintf(err, errlen, "--config given twice");
            return -1;
        }
        *path = p;
    }
    return 0;
}

/* Trims spaces and tabs at both ends of s in place; returns the new start. */
static char *config_file_trim(char *s) {
    char *end = s + strlen(s);
    while (*s == ' ' || *s == '\t')
        s++;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
        *--end = '\0';
    return s;
}

/* Applies the KEY=VALUE lines of path to c. A value may be wrapped in one pair of
 * double or single quotes, so that the file also serves as a systemd EnvironmentFile.
 * Returns -1 with "FILE:LINE: ..." in err on the first bad line. */
static int config_file_read(stockd_config *c, const char *path, char *err, size_t errlen) {
    unsigned first_line[NOPTIONS] = {0};
    char *line = NULL, name[320];
    size_t cap = 0;
    unsigned lineno = 0;
    int rc = -1;
    FILE *f = fopen(path, "r");

    if (!f) {
        snprintf(err, errlen, "cannot read --config file '%s': %s", path, strerror(errno));
        return -1;
    }
    while (getline(&line, &cap, f) != -1) {
        char *key, *val, *eq;
        size_t i, n;

        lineno++;
        key = config_file_trim(line);
        if (!*key || *key == '#') continue;
        eq = strchr(key, '=');
        if (!eq || eq == key) {
            snprintf(err, errlen, "%s:%u: expected KEY=VALUE, got '%.40s'", path, lineno, key);
            goto out;
        }
        *eq = '\0';
        key = config_file_trim(key);
        val = config_file_trim(eq + 1);
        n = strlen(val);
        if (n && (*val == '"' || *val == '\'')) {
            if (n < 2 || val[n - 1] != *val) {
                snprintf(err, errlen, "%s:%u: %s: unbalanced quote", path, lineno, key);
                goto out;
            }
            val[n - 1] = '\0';
            val++;
        }
        /* The password stays out of files that are read by the service itself, and out
         * of this parser: main.c takes it from the environment only. */
        if (strcmp(key, "STOCKD_MYSQL_PASSWORD") == 0) {
            snprintf(err, errlen,
                     "%s:%u: STOCKD_MYSQL_PASSWORD is read from the environment only (a "
                     "systemd EnvironmentFile can set it)",
                     path, lineno);
            goto out;
        }
        for (i = 0; i < NOPTIONS && strcmp(key, options[i].env) != 0; i++) {
        }
        if (i == NOPTIONS) {
            snprintf(err, errlen,
                     "%s:%u: unknown key '%.64s' (the keys are the STOCKD_* "
                     "variables of --help)",
                     path, lineno, key);
            goto out;
        }
        if (first_line[i]) {
            snprintf(err, errlen, "%s:%u: %s given twice (first on line %u)", path, lineno, key,
                     first_line[i]);
            goto out;
        }
        first_line[i] = lineno;
        snprintf(name, sizeof(name), "%s:%u: %s", path, lineno, key);
        if (apply(c, options[i].id, val, name, err, errlen) != 0) goto out;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "cannot read --config file '%s': %s", path, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    free(line);
    fclose(f);
    return rc;
}

/* ------------------------------------------------------------------ parse */

int stockd_config_set_zk_auth(stockd_config *c, const char *v, const char *name, char *err,
                              size_t errlen) {
    /* ZooKeeper's digest scheme takes USER:PASSWORD; the user may not contain ':'. */
    const char *colon = v ? strchr(v, ':') : NULL;
    if (!colon || colon == v || !colon[1] || strcspn(v, "\r\n") != strlen(v)) {
        snprintf(err, errlen, "%s must be USER:PASSWORD (both non-empty, one line)", name);
        return -1;
    }
    return set_str(c->zk_auth, sizeof(c->zk_auth), v, name, err, errlen);
}

int stockd_config_parse(stockd_config *c, int argc, char **argv, char *err, size_t errlen) {
    struct option longopts[NOPTIONS + 4];
    const char *config_path;
    int ch;

    memset(c, 0, sizeof(*c));
    strcpy(c->bind, "127.0.0.1");
    c->port = 8080;
    c->lock = STOCKD_LOCK_NONE;
    c->lock_kind = stockd_modes[STOCKD_LOCK_NONE].kind;
    c->strategy = stockd_modes[STOCKD_LOCK_NONE].strategy;
    strcpy(c->mysql_url, "mysql://stockd@127.0.0.1:3306/shop");
    strcpy(c->zk, "127.0.0.1:2181");
    c->workers = 16;
    c->queue_max = 4096;
    c->lock_timeout_ms = 5000;
    c->zk_session_ms = 6000;
    c->max_connections = 1024;
    c->connection_timeout_s = 30;
    c->batch_max = 64;
    c->precheck = true;
    c->lock_passes = 1;
    c->cross_products = 1;
    c->lock_cache_ms = 200;
    c->queue_deadline_ms = 25000;
    strcpy(c->redis, "127.0.0.1:6379");
    c->redis_lease_ms = 10000;
    c->db_lock_lease_ms = 10000;
    strcpy(c->etcd, "127.0.0.1:2379");
    c->etcd_ttl_s = 10;
    c->fence = true;
    c->segments = 1;
    c->lease_check = true;
    /* Secrets without an argv twin: only the environment or a file carries them. */
    const char *secret = getenv("STOCKD_REDIS_PASSWORD");
    if (secret && set_str(c->redis_password, sizeof(c->redis_password), secret,
                          "STOCKD_REDIS_PASSWORD", err, errlen) != 0)
        return -1;
    secret = getenv("STOCKD_ZK_AUTH");
    if (secret && stockd_config_set_zk_auth(c, secret, "STOCKD_ZK_AUTH", err, errlen) != 0)
        return -1;

    if (config_file_find(argc, argv, &config_path, err, errlen) != 0) return -1;
    if (config_path && config_file_read(c, config_path, err, errlen) != 0) return -1;
    for (size_t i = 0; i < NOPTIONS; i++) {
        const char *v = getenv(options[i].env);
        if (v && apply(c, options[i].id, v, options[i].env, err, errlen) != 0) return -1;
        longopts[i] = (struct option){options[i].opt, required_argument, NULL, options[i].id};
    }
    longopts[NOPTIONS] = (struct option){"help", no_argument, NULL, O_HELP};
    longopts[NOPTIONS + 1] = (struct option){"version", no_argument, NULL, O_VERSION};
    longopts[NOPTIONS + 2] = (struct option){"config", required_argument, NULL, O_CONFIG};
    longopts[NOPTIONS + 3] = (struct option){0};

    /* getopt_long takes any unambiguous prefix of an option, so "--redis-password
     * SECRET" would be read as --redis-password-file and the secret end up in argv and in
     * a "cannot open" message. Secrets have no option: refuse every abbreviation of the
     * two file options (a name that is not itself an option, such as --zk). */
    for (int i = 1; i < argc; i++) {
        static const char *const files[2] = {"--redis-password-file", "--zk-auth-file"};
        const char *a = argv[i];
        size_t n = strcspn(a, "=");
        if (n <= 2 || strncmp(a, "--", 2) != 0) continue;
        bool exact = false;
        for (size_t k = 0; k < NOPTIONS; k++)
            exact = exact ||
                    (strlen(options[k].opt) == n - 2 && strncmp(a + 2, options[k].opt, n - 2) == 0);
        for (size_t k = 0; k < 2 && !exact; k++) {
            if (n < strlen(files[k]) && strncmp(a, files[k], n) == 0) {
                snprintf(err, errlen,
                         "%.*s: secrets are never taken from the command line; use %s FILE or "
                         "the environment (%s)",
                         (int)n, a, files[k], k == 0 ? "STOCKD_REDIS_PASSWORD" : "STOCKD_ZK_AUTH");
                return -1;
            }
        }
    }
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (ch == 'h' || ch == O_HELP) {
            c->help = true;
        } else if (ch == O_VERSION) {
            c->version = true;
        } else if (ch == O_CONFIG) {
            /* Read above, before the environment. An abbreviation such as --conf FILE
             * was not seen there, so refuse it rather than ignore the file. */
            if (!config_path || strcmp(optarg, config_path) != 0) {
                snprintf(err, errlen, "write --config FILE in full (it is read first)");
                return -1;
            }
        } else if (ch == '?' || ch == ':') {
            snprintf(err, errlen, "unknown option or missing value: '%s'",
                     optind > 0 && optind <= argc ? argv[optind - 1] : "?");
            return -1;
        } else {
            char name[64];
            snprintf(name, sizeof(name), "--%s", longopts[ch - 1].name);
            if (apply(c, ch, optarg, name, err, errlen) != 0) return -1;
        }
    }
    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
        return -1;
    }
    const stockd_mode *m = stockd_mode_of(c->lock);
    char list[256];
    c->etcd_lease_ms = c->etcd_ttl_s * 1000;
    c->lock_kind = m->kind;
    c->strategy = m->strategy;
    if (c->lock == STOCKD_LOCK_REDLOCK && hostport_list_count(c->redis) < REDLOCK_MIN) {
        snprintf(err, errlen,
                 "--lock redlock needs --redis with %d to %d independent servers, "
                 "HOST:PORT,HOST:PORT,..., got '%s'",
                 REDLOCK_MIN, REDLOCK_MAX, c->redis);
        return -1;
    }
    if (c->lock == STOCKD_LOCK_REDIS && strchr(c->redis, ',')) {
        snprintf(err, errlen,
                 "--lock redis takes one HOST:PORT in --redis, got '%s' (a list of servers is "
                 "for --lock redlock)",
                 c->redis);
        return -1;
    }
    if (c->segments > 1 && !m->batched) {
        snprintf(err, errlen, "--segments %u needs a mode with a lock (%s), not %s", c->segments,
                 stockd_mode_list(list, sizeof(list), stockd_mode_batched), m->name);
        return -1;
    }
    /* A pitfall misuses a lock that the service takes and releases around a
     * transaction. none and atomic take no lock, and for-update's lock is the row lock,
     * which the database holds to COMMIT and which its locking read reads through: there
     * the mistake cannot be made. */
    if (c->pitfall != STOCKD_PITFALL_NONE && !stockd_mode_locks(m)) {
        snprintf(err, errlen,
                 "--pitfall %s needs a lock the service takes and releases around its "
                 "transaction (%s); %s has none to misuse",
                 c->pitfall == STOCKD_PITFALL_RELEASE_BEFORE_COMMIT ? "release-before-commit"
                                                                    : "snapshot-before-lock",
                 stockd_mode_list(list, sizeof(list), stockd_mode_locks), m->name);
        return -1;
    }
    if (c->lease_check && stockd_mode_lease(m)) {
        uint64_t pause_us = (uint64_t)c->think_us + c->think_jitter_us;
        unsigned lease = *(const unsigned *)((const char *)c + m->lease_off);
        if (lease < STOCKD_LEASE_MIN_MS(pause_us)) {
            snprintf(err, errlen,
                     "%s %u is too short for a batch that pauses up to %llu us "
                     "(--think-us + --think-jitter-us): every batch would outlive its lease; "
                     "want at least %llu ms (twice the pause plus 200 ms)",
                     m->lease_option, lease, (unsigned long long)pause_us,
                     (unsigned long long)STOCKD_LEASE_MIN_MS(pause_us));
            return -1;
        }
    }
    /* Only a lease has anything to renew: ZooKeeper's session is kept alive by its
     * client, and the other modes hold nothing that expires. */
    if (c->lease_renew && !stockd_mode_lease(m)) {
        snprintf(err, errlen, "--lease-renew on needs a lease lock (%s), not %s",
                 stockd_mode_list(list, sizeof(list), stockd_mode_lease), m->name);
        return -1;
    }
    if (!c->instance[0]) snprintf(c->instance, sizeof(c->instance), "stockd-%u", c->port);
    if (stockd_check_key(c->instance, strlen(c->instance)) != 0) {
        snprintf(err, errlen, "instance name must be 1..64 of [A-Za-z0-9_-], got '%s'",
                 c->instance);
        return -1;
    }
    return 0;
}
