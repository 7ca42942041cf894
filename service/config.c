/* config.c: stockd's options. Every option has an environment twin (STOCKD_*), read
 * first, so that a secret such as the MySQL password never has to appear in argv
 * (STOCKD_MYSQL_PASSWORD is read by main.c). Pure apart from getenv. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redislock.h"
#include "stockd.h"

static const char *mode_names[] = {
    [STOCKD_LOCK_NONE] = "none",
    [STOCKD_LOCK_LOCAL] = "local",
    [STOCKD_LOCK_ZK] = "zk",
    [STOCKD_LOCK_ZK_HERD] = "zk-herd",
    [STOCKD_LOCK_FOR_UPDATE] = "for-update",
    [STOCKD_LOCK_ATOMIC] = "atomic",
    [STOCKD_LOCK_REDIS] = "redis",
    [STOCKD_LOCK_DB_LOCK] = "db-lock",
};
#define NMODES (sizeof(mode_names) / sizeof(mode_names[0]))

const char *stockd_lock_mode_name(stockd_lock_mode m) {
    return (size_t)m < NMODES ? mode_names[m] : "?";
}

int stockd_lock_mode_parse(const char *s, stockd_lock_mode *out) {
    for (size_t i = 0; i < NMODES; i++) {
        if (strcmp(s, mode_names[i]) == 0) {
            *out = (stockd_lock_mode)i;
            return 0;
        }
    }
    return -1;
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
          "                         redis | db-lock (STOCKD_LOCK) [none]\n"
          "  --mysql URL            mysql://USER@HOST:PORT/DB (STOCKD_MYSQL)\n"
          "                         [mysql://stockd@127.0.0.1:3306/shop]; the password is\n"
          "                         read from STOCKD_MYSQL_PASSWORD, so it is not in argv\n"
          "  --zk HOSTS             ZooKeeper HOST:PORT[,HOST:PORT...] (STOCKD_ZK)\n"
          "                         [127.0.0.1:2181]; used by zk and zk-herd\n"
          "  --redis HOST:PORT      the Redis of mode redis (STOCKD_REDIS) [127.0.0.1:6379];\n"
          "                         connected at the first request, so a Redis that is down\n"
          "                         gives 503 answers, not a failed start\n"
          "  --redis-lease-ms N     lease of one Redis lock acquisition; keep it well above\n"
          "                         a batch's time (STOCKD_REDIS_LEASE_MS) [10000]\n"
          "  --db-lock-lease-ms N   lease of one stock_lock row, after which another\n"
          "                         instance may take a crashed holder's lock\n"
          "                         (STOCKD_DB_LOCK_LEASE_MS) [10000]\n"
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
    O_QUEUE_DEADLINE,
    O_REDIS,
    O_REDIS_LEASE,
    O_DB_LOCK_LEASE,
    O_FENCE,
    O_SEGMENTS,
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
    {O_QUEUE_DEADLINE, "queue-deadline-ms", "STOCKD_QUEUE_DEADLINE_MS"},
    {O_REDIS, "redis", "STOCKD_REDIS"},
    {O_REDIS_LEASE, "redis-lease-ms", "STOCKD_REDIS_LEASE_MS"},
    {O_DB_LOCK_LEASE, "db-lock-lease-ms", "STOCKD_DB_LOCK_LEASE_MS"},
    {O_FENCE, "fence", "STOCKD_FENCE"},
    {O_SEGMENTS, "segments", "STOCKD_SEGMENTS"},
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
            snprintf(err, errlen,
                     "%s must be none, local, zk, zk-herd, for-update, atomic, redis or db-lock, "
                     "got '%s'",
                     name, v);
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
        if (v && (strcmp(v, "on") == 0 || strcmp(v, "off") == 0)) {
            c->precheck = strcmp(v, "on") == 0;
            return 0;
        }
        snprintf(err, errlen, "%s must be on or off, got '%s'", name, v ? v : "");
        return -1;
    case O_LOCK_PASSES:
        return set_uint(&c->lock_passes, v, 1, 1000, name, err, errlen);
    case O_QUEUE_DEADLINE:
        return set_uint(&c->queue_deadline_ms, v, 0, 3600000, name, err, errlen);
    case O_REDIS: {
        char host[256];
        int port;
        if (!v || redislock_parse_addr(v, host, sizeof(host), &port) != REDISLOCK_OK) {
            snprintf(err, errlen, "%s must be HOST:PORT, got '%s'", name, v ? v : "");
            return -1;
        }
        return set_str(c->redis, sizeof(c->redis), v, name, err, errlen);
    }
    /* A lease shorter than 100 ms would run out inside one batch on a busy machine. */
    case O_REDIS_LEASE:
        return set_uint(&c->redis_lease_ms, v, 100, 3600000, name, err, errlen);
    case O_DB_LOCK_LEASE:
        return set_uint(&c->db_lock_lease_ms, v, 100, 3600000, name, err, errlen);
    case O_FENCE:
        if (v && (strcmp(v, "on") == 0 || strcmp(v, "off") == 0)) {
            c->fence = strcmp(v, "on") == 0;
            return 0;
        }
        snprintf(err, errlen, "%s must be on or off, got '%s'", name, v ? v : "");
        return -1;
    case O_SEGMENTS:
        return set_uint(&c->segments, v, 1, STOCKD_SEGMENTS_MAX, name, err, errlen);
    }
    return -1;
}

int stockd_config_parse(stockd_config *c, int argc, char **argv, char *err, size_t errlen) {
    struct option longopts[NOPTIONS + 3];
    int ch;

    memset(c, 0, sizeof(*c));
    strcpy(c->bind, "127.0.0.1");
    c->port = 8080;
    c->lock = STOCKD_LOCK_NONE;
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
    c->queue_deadline_ms = 25000;
    strcpy(c->redis, "127.0.0.1:6379");
    c->redis_lease_ms = 10000;
    c->db_lock_lease_ms = 10000;
    c->fence = true;
    c->segments = 1;

    for (size_t i = 0; i < NOPTIONS; i++) {
        const char *v = getenv(options[i].env);
        if (v && apply(c, options[i].id, v, options[i].env, err, errlen) != 0) return -1;
        longopts[i] = (struct option){options[i].opt, required_argument, NULL, options[i].id};
    }
    longopts[NOPTIONS] = (struct option){"help", no_argument, NULL, O_HELP};
    longopts[NOPTIONS + 1] = (struct option){"version", no_argument, NULL, O_VERSION};
    longopts[NOPTIONS + 2] = (struct option){0};

    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (ch == 'h' || ch == O_HELP) {
            c->help = true;
        } else if (ch == O_VERSION) {
            c->version = true;
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
    if (c->segments > 1 && (c->lock == STOCKD_LOCK_NONE || c->lock == STOCKD_LOCK_ATOMIC)) {
        snprintf(err, errlen,
                 "--segments %u needs a mode with a lock (local, zk, zk-herd, for-update, "
                 "redis or db-lock), not %s",
                 c->segments, stockd_lock_mode_name(c->lock));
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
