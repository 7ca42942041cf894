/* main.c: the stock-writer executable: its options (one row each in `options`, read from
 * argv and from the environment variable of the row, as stockd's: the command line wins;
 * the servers' variables are stockd's own, so one environment file serves both), the
 * signals, and either the writer's loop or --reconcile (writer.h). */
#include <getopt.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostport.h"
#include "writer.h"

#define VERSION    "0.1.0"
#define HELP_COL   24 /* --help: the column where an option's help starts */
#define HELP_WIDTH 80

/* Exit codes, as --help says. */
enum { EXIT_AGREE = 0, EXIT_DISAGREE = 1, EXIT_USAGE = 2, EXIT_NOT_DRAINED = 3, EXIT_SERVER = 4 };

typedef struct opts {
    writer_config w;
    char redis[300];
    char mysql[400];
    unsigned wait_s;
    int reconcile;
} opts;

enum kind { K_STR, K_UINT, K_FLAG };

typedef struct opt {
    const char *name, *arg, *env;
    enum kind kind;
    size_t off, size;
    unsigned lo, hi;
    const char *dflt, *help;
} opt;

#define F(field) offsetof(opts, field), sizeof(((opts *)0)->field)

static const opt options[] = {
    {"redis", "HOST:PORT", "STOCKD_REDIS", K_STR, F(redis), 0, 0, "127.0.0.1:6379",
     "the Redis that holds the stream stockd:orders (stockd's --redis in mode redis-stock); "
     "after a Sentinel failover, restart the writer with the new primary"},
    {"redis-user", "NAME", "STOCKD_REDIS_USER", K_STR, F(w.redis_user), 0, 0, NULL,
     "the Redis ACL user; the password is read from STOCKD_REDIS_PASSWORD, never from argv"},
    {"mysql", "URL", "STOCKD_MYSQL", K_STR, F(mysql), 0, 0, "mysql://stockd@127.0.0.1:3306/shop",
     "mysql://USER@HOST:PORT/DB, as stockd's; the password is read from STOCKD_MYSQL_PASSWORD"},
    {"consumer", "NAME", "STOCKD_WRITER_CONSUMER", K_STR, F(w.consumer), 0, 0, NULL,
     "this writer's consumer name in the group `writers` (default writer-HOST-PID). A writer "
     "restarted under the same name writes its own pending entries first; under a new name, "
     "the entries the old one left are claimed after --claim-idle-ms"},
    {"batch", "N", "STOCKD_WRITER_BATCH", K_UINT, F(w.batch), 1, WRITER_BATCH_MAX, "256",
     "the most entries written in one MariaDB transaction"},
    {"block-ms", "N", "STOCKD_WRITER_BLOCK_MS", K_UINT, F(w.block_ms), 1, 60000, "1000",
     "the longest wait for new entries in one XREADGROUP (also bounds how long SIGTERM takes)"},
    {"claim-idle-ms", "N", "STOCKD_WRITER_CLAIM_IDLE_MS", K_UINT, F(w.claim_idle_ms), 100, 3600000,
     "5000",
     "claim (XAUTOCLAIM) another consumer's entries once they have been pending this long: "
     "longer than that writer's slowest batch, or two writers write the same batch (harmless: "
     "the second finds every order written, but wasted)"},
    {"backoff-max-ms", "N", "STOCKD_WRITER_BACKOFF_MAX_MS", K_UINT, F(w.backoff_max_ms), 100, 60000,
     "2000", "the longest pause between retries while Redis or MariaDB is away"},
    {"wait-replicas", "N", "STOCKD_WRITER_WAIT_REPLICAS", K_UINT, F(w.wait_replicas), 0, 16, "0",
     "write a batch only once N replicas of Redis have it (WAIT after reading it), so that no "
     "order is written that a failover to such a replica could lose and sell again; fewer "
     "within --wait-ms: the batch stays pending and is retried (0: do not wait)"},
    {"wait-ms", "N", "STOCKD_WRITER_WAIT_MS", K_UINT, F(w.wait_ms), 1, 60000, "100",
     "the longest that WAIT waits for the replicas of --wait-replicas"},
    {"forget-idle-ms", "N", "STOCKD_WRITER_FORGET_IDLE_MS", K_UINT, F(w.forget_idle_ms), 1000,
     86400000, "600000",
     "remove from the group (XGROUP DELCONSUMER) a consumer that holds no pending entry and has "
     "been idle this long: a writer that is gone (restarted under another name). A live writer "
     "is idle at most --block-ms between reads; one removed by mistake is re-created by its "
     "next read"},
    {"metrics-port", "N", "STOCKD_WRITER_METRICS_PORT", K_UINT, F(w.metrics_port), 0, 65535, "0",
     "serve GET /metrics (Prometheus text: backlog, lag, batch size, orders, duplicates, "
     "oversold promises, reused keys, claims, trims) on this port, all addresses (0: none)"},
    {"reconcile", NULL, NULL, K_FLAG, F(reconcile), 0, 0, NULL,
     "do not write: print per product the Redis count, backlog, pending entries, MariaDB's "
     "stock, orders and oversold promises, and the writer's lag; exit 0 if they agree"},
    {"wait", "S", "STOCKD_WRITER_WAIT", K_UINT, F(wait_s), 0, 3600, "0",
     "with --reconcile: wait up to S seconds for the writers to drain the stream first"},
};
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

static void usage(FILE *f) {
    fprintf(f,
            "Usage: stock-writer [OPTION]...\n"
            "  or:  stock-writer --reconcile [--wait S] [OPTION]...\n"
            "The order writer of stockd's mode redis-stock: reads the Redis stream stockd:orders\n"
            "as a member of the consumer group `writers` and writes each batch of entries to\n"
            "MariaDB in one transaction: per entry an order (orders.request_id = the entry's\n"
            "key, unique) and product.stock - 1, never below 0. An entry whose product has no\n"
            "stock left in MariaDB is an oversold promise, recorded in oversold_promise and\n"
            "logged. Entries are acknowledged (XACK) only after COMMIT, and a redelivered entry\n"
            "writes nothing twice: every entry is written exactly once, whatever crashes.\n"
            "Run as many writers as wanted, each under its own --consumer name; kill any of\n"
            "them at any time. SIGTERM or SIGINT stops a writer after its batch in hand.\n"
            "\n"
            "Options (each also read from the environment variable in brackets):\n");
    for (size_t i = 0; i < NOPTIONS; i++) {
        const opt *o = &options[i];
        char head[64], text[900], *w, *save = NULL;
        size_t col = HELP_COL;
        snprintf(head, sizeof(head), "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        int len = snprintf(text, sizeof(text), "%s", o->help);
        if (o->env) len += snprintf(text + len, sizeof(text) - (size_t)len, " [%s]", o->env);
        if (o->kind == K_UINT)
            len += snprintf(text + len, sizeof(text) - (size_t)len, " (%u..%u)", o->lo, o->hi);
        if (o->dflt) snprintf(text + len, sizeof(text) - (size_t)len, " (default %s)", o->dflt);
        fprintf(f, "  %-*s", HELP_COL - 3, head);
        /* Word-wrapped at HELP_WIDTH, continued under the help's column. */
        for (w = strtok_r(text, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
            if (col > HELP_COL && col + 1 + strlen(w) > HELP_WIDTH) {
                fprintf(f, "\n%*s", HELP_COL - 1, "");
                col = HELP_COL;
            }
            fprintf(f, " %s", w);
            col += 1 + strlen(w);
        }
        fputc('\n', f);
    }
    fprintf(f, "  %-21s  %s\n  %-21s  %s\n", "--help", "print this help and exit", "--version",
            "print the version and exit");
    fprintf(f, "\n"
               "Exit status:\n"
               "  0  a writer stopped by a signal; --reconcile: drained and every product agrees\n"
               "  1  --reconcile: drained, and a product disagrees (DRIFT: Redis count is not\n"
               "     MariaDB's stock; OVERSOLD: oversold promises recorded)\n"
               "  2  a bad option or variable\n"
               "  3  --reconcile: the stream was not drained within --wait\n"
               "  4  --reconcile: Redis or MariaDB unreachable; a writer out of memory\n"
               "\n"
               "A writer never exits because Redis or MariaDB is away: it retries with backoff\n"
               "(up to --backoff-max-ms), leaving the batch in hand pending, and logs one line\n"
               "per change of state on stderr.\n");
}

static int set(opts *s, const opt *o, const char *v, const char *who) {
    char *p = (char *)s + o->off;
    if (o->kind == K_FLAG) {
        *(int *)p = 1;
        return 0;
    }
    if (o->kind == K_STR) {
        if (strlen(v) >= o->size) {
            fprintf(stderr, "stock-writer: %s is too long (at most %zu bytes)\n", who, o->size - 1);
            return -1;
        }
        memcpy(p, v, strlen(v) + 1);
        return 0;
    }
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    if (!*v || *v == '-' || *end || n < o->lo || n > o->hi) {
        fprintf(stderr, "stock-writer: %s must be an integer in %u..%u, got '%s'\n", who, o->lo,
                o->hi, v);
        return -1;
    }
    *(unsigned *)p = (unsigned)n;
    return 0;
}

/* Defaults, then the environment, then argv. 0 go on, 1 exit 0 (help, version), -1 usage. */
static int parse(opts *s, int argc, char **argv) {
    struct option lo[NOPTIONS + 3];
    memset(s, 0, sizeof(*s));
    for (size_t i = 0; i < NOPTIONS; i++) {
        const opt *o = &options[i];
        if (o->dflt && set(s, o, o->dflt, o->name) != 0) return -1;
        const char *v = o->env ? getenv(o->env) : NULL;
        if (v && set(s, o, v, o->env) != 0) return -1;
        lo[i] = (struct option){o->name, o->kind == K_FLAG ? no_argument : required_argument, NULL,
                                (int)(i + 256)};
    }
    lo[NOPTIONS] = (struct option){"help", no_argument, NULL, 'h'};
    lo[NOPTIONS + 1] = (struct option){"version", no_argument, NULL, 'V'};
    lo[NOPTIONS + 2] = (struct option){0, 0, 0, 0};
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 1;
        }
        if (c == 'V') {
            printf("stock-writer %s\n", VERSION);
            return 1;
        }
        if (c < 256) return -1;
        char who[64];
        snprintf(who, sizeof(who), "--%s", options[c - 256].name);
        if (set(s, &options[c - 256], optarg, who) != 0) return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "stock-writer: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    hostport hp;
    if (hostport_parse(s->redis, strlen(s->redis), 6379, &hp) != 0 ||
        strlen(hp.host) >= sizeof(s->w.redis_host)) {
        fprintf(stderr, "stock-writer: --redis must be HOST:PORT, got '%s'\n", s->redis);
        return -1;
    }
    snprintf(s->w.redis_host, sizeof(s->w.redis_host), "%s", hp.host);
    s->w.redis_port = hp.port;
    const char *pw = getenv("STOCKD_REDIS_PASSWORD");
    if (pw && strlen(pw) >= sizeof(s->w.redis_password)) {
        fprintf(stderr, "stock-writer: STOCKD_REDIS_PASSWORD is too long\n");
        return -1;
    }
    snprintf(s->w.redis_password, sizeof(s->w.redis_password), "%s", pw ? pw : "");
    pw = getenv("STOCKD_MYSQL_PASSWORD");
    if (pw && strlen(pw) >= sizeof(s->w.mysql.password)) {
        fprintf(stderr, "stock-writer: STOCKD_MYSQL_PASSWORD is too long\n");
        return -1;
    }
    snprintf(s->w.mysql.password, sizeof(s->w.mysql.password), "%s", pw ? pw : "");
    if (stockdb_config_from_url(&s->w.mysql, s->mysql) != STOCKDB_OK) {
        fprintf(stderr, "stock-writer: --mysql must be mysql://USER@HOST:PORT/DB, got '%s'\n",
                s->mysql);
        return -1;
    }
    if (!s->w.consumer[0]) {
        char host[40] = "localhost";
        gethostname(host, sizeof(host) - 1);
        snprintf(s->w.consumer, sizeof(s->w.consumer), "writer-%s-%ld", host, (long)getpid());
    }
    if (strcspn(s->w.consumer, " \t\r\n") != strlen(s->w.consumer)) {
        fprintf(stderr, "stock-writer: --consumer must not contain spaces\n");
        return -1;
    }
    return 0;
}

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig) {
    (void)sig;
    stop_flag = 1;
}

int main(int argc, char **argv) {
    opts s;
    int rc = parse(&s, argc, argv);
    if (rc != 0) {
        if (rc < 0) fprintf(stderr, "Try 'stock-writer --help'.\n");
        return rc > 0 ? 0 : EXIT_USAGE;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (stockdb_global_init() != STOCKDB_OK) {
        fprintf(stderr, "stock-writer: cannot initialise the MariaDB client library\n");
        return EXIT_SERVER;
    }
    if (s.reconcile) {
        rc = writer_reconcile(&s.w, s.wait_s, &stop_flag, stdout);
        rc = rc == WRITER_OK            ? EXIT_AGREE
             : rc == WRITER_DISAGREE    ? EXIT_DISAGREE
             : rc == WRITER_NOT_DRAINED ? EXIT_NOT_DRAINED
                                        : EXIT_SERVER;
    } else {
        writer_stats st;
        rc = writer_run(&s.w, &stop_flag, stderr, &st) == WRITER_OK ? 0 : EXIT_SERVER;
    }
    stockdb_global_end();
    return rc;
}
