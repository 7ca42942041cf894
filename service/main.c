/* main.c: stockd's entry point. It reads the options, connects what the lock mode
 * needs, starts the workers and the HTTP daemon, and on SIGTERM, SIGINT or SIGHUP shuts
 * down in order: stop accepting, answer every request already accepted, then exit 0.
 * SIGHUP is taken the same way because its default action kills the process on the
 * spot, resetting every connection in flight, while a supervisor or a closed terminal
 * sends it expecting an orderly stop or a reload (stockd has nothing to reload: its
 * options are read once). */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stockd.h"

/* A password inside a --mysql URL is in argv, which every local user can read in ps and
 * /proc/PID/cmdline. Once the URL is parsed it is overwritten in place with 'x' (as the
 * mysql client does with -p), so it shows only between exec and here; with
 * STOCKD_MYSQL_PASSWORD it never shows at all. */
static void hide_url_password(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char *auth = strstr(argv[i], "mysql://"), *end, *colon;
        if (!auth) continue;
        auth += 8;
        end = auth + strcspn(auth, "@/");
        if (*end != '@') continue;
        colon = memchr(auth, ':', (size_t)(end - auth));
        if (colon) memset(colon + 1, 'x', (size_t)(end - colon - 1));
    }
}

/* glibc gives each thread that allocates an arena of its own, up to 8 per core: a
 * worker's, the HTTP thread's, the lock threads'. Each keeps its own free memory and
 * top, so the same load holds more resident pages; two arenas took 0.2-0.8 MB off the
 * peak RSS per instance at 1000 requests in flight (docs/benchmarks.md, "Memory"), and per-thread
 * caches (tcache) keep most allocations off the arenas' locks anyway. A
 * MALLOC_ARENA_MAX or GLIBC_TUNABLES in the environment is left to decide. */
#define STOCKD_MALLOC_ARENAS 2

static void limit_malloc_arenas(void) {
    const char *t = getenv("GLIBC_TUNABLES");
    if (getenv("MALLOC_ARENA_MAX") || (t && strstr(t, "arena_max"))) return;
    mallopt(M_ARENA_MAX, STOCKD_MALLOC_ARENAS);
}

/* The lock set's logger (lock_config.log): lock/ never calls into the service. */
static void log_lock(void *arg, const char *level, const char *msg) {
    (void)arg;
    stockd_log(level, "%s", msg);
}

/* --list-modes: the table of modes (modes.c) for tools, one mode a line, tab-separated:
 * the --lock word, its lock kind, and the kind's lock service from lock/'s registry ("-"
 * when it has none beyond this process). Tools read their list of modes, and what a
 * mode needs (a ZooKeeper, say), from here instead of keeping a copy. */
static void list_modes(FILE *out) {
    for (size_t i = 0; i < stockd_nmodes; i++) {
        const stockd_mode *m = &stockd_modes[i];
        const lock_kind *k = lock_kind_find(m->kind);
        const char *service = k && k->service ? k->service : m->store;
        fprintf(out, "%s\t%s\t%s\n", m->name, m->kind, service ? service : "-");
    }
}

/* Reads the first line of a secret's file into buf (without its line end). 0, or -1 with
 * the reason in err. The file's content never goes into a message. */
static int read_secret_file(const char *path, const char *option, char *buf, size_t cap, char *err,
                            size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open %s: %s", option, path, strerror(errno));
        return -1;
    }
    int rc = 0;
    if (!fgets(buf, (int)cap, f)) {
        snprintf(err, errlen, "%s: %s is empty", option, path);
        rc = -1;
    } else {
        size_t n = strcspn(buf, "\r\n");
        if (n == cap - 1 && !feof(f)) {
            snprintf(err, errlen, "%s: the first line of %s is too long (at most %zu bytes)",
                     option, path, cap - 2);
            rc = -1;
        } else if (n == 0) {
            snprintf(err, errlen, "%s: the first line of %s is empty", option, path);
            rc = -1;
        }
        buf[n] = '\0';
    }
    fclose(f);
    return rc;
}

int main(int argc, char **argv) {
    stockd_config cfg;
    stockd_ctx ctx = {.cfg = &cfg, .complete = stockd_http_complete};
    stockd_workers *workers = NULL;
    stockd_http *http = NULL;
    const char *pw;
    char err[256];
    sigset_t sigs;
    int sig = 0, rc, status = 1;
    bool uses_zk, uses_redis;
    const lock_kind *kind;
    lock_config lc;

    if (stockd_config_parse(&cfg, argc, argv, err, sizeof(err)) != 0) {
        fprintf(stderr, "stockd: %s (see --help)\n", err);
        return 2;
    }
    if (cfg.help) {
        stockd_config_usage(stdout);
        return 0;
    }
    if (cfg.version) {
        puts("stockd " STOCKD_VERSION);
        return 0;
    }
    if (cfg.list_modes) {
        list_modes(stdout);
        return 0;
    }
    stockd_log_setup(cfg.instance, cfg.log_format);
    limit_malloc_arenas(); /* before any thread starts */
    if (cfg.redis_password_file[0] &&
        read_secret_file(cfg.redis_password_file, "--redis-password-file", cfg.redis_password,
                         sizeof(cfg.redis_password), err, sizeof(err)) != 0) {
        fprintf(stderr, "stockd: %s\n", err);
        return 2;
    }
    if (cfg.admin_token_file[0] &&
        read_secret_file(cfg.admin_token_file, "--admin-token-file", cfg.admin_token,
                         sizeof(cfg.admin_token), err, sizeof(err)) != 0) {
        fprintf(stderr, "stockd: %s\n", err);
        return 2;
    }
    if (cfg.zk_auth_file[0]) {
        char line[sizeof(cfg.zk_auth) + 1];
        if (read_secret_file(cfg.zk_auth_file, "--zk-auth-file", line, sizeof(line), err,
                             sizeof(err)) != 0 ||
            stockd_config_set_zk_auth(&cfg, line, "--zk-auth-file", err, sizeof(err)) != 0) {
            fprintf(stderr, "stockd: %s\n", err);
            return 2;
        }
    }
    if (cfg.peer_secret_file[0] &&
        read_secret_file(cfg.peer_secret_file, "--peer-secret-file", cfg.peer_secret,
                         sizeof(cfg.peer_secret), err, sizeof(err)) != 0) {
        fprintf(stderr, "stockd: %s\n", err);
        return 2;
    }

    pw = getenv("STOCKD_MYSQL_PASSWORD");
    if (pw) snprintf(ctx.db.password, sizeof(ctx.db.password), "%s", pw);
    if (stockdb_config_from_url(&ctx.db, cfg.mysql_url) != STOCKDB_OK) {
        fprintf(stderr, "stockd: --mysql must look like mysql://USER@HOST:PORT/DB\n");
        return 2;
    }
    hide_url_password(argc, argv);

    /* Signals are taken by sigwait in this thread only: block them before any thread
     * starts so that every thread inherits the mask. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (stockdb_global_init() != STOCKDB_OK) {
        stockd_log("error", "cannot initialise the MySQL client library");
        return 1;
    }
    /* The product locks: the mode's kind from lock/'s registry (zk connects its
     * session here, and a failure ends the start-up). */
    kind = lock_kind_find(cfg.lock_kind);
    uses_zk = kind && kind->service && strcmp(kind->service, "zookeeper") == 0;
    uses_redis = (kind && kind->service && strcmp(kind->service, "redis") == 0) ||
                 cfg.lock == STOCKD_LOCK_REDIS_STOCK;
    stockd_lock_config(&cfg, &ctx.db, &lc);
    lc.log = log_lock;
    rc = kind ? lock_set_new(kind, &lc, &ctx.locks, err, sizeof(err)) : LOCK_ERR_ARGS;
    if (rc != LOCK_OK) {
        stockd_log("error", "cannot make the %s locks: %s", cfg.lock_kind,
                   err[0] ? err : lock_strerror(rc));
        goto out;
    }
    /* Owner routing (docs/routing.md): the view, from ZooKeeper in its modes (peers.c,
     * joined once the HTTP side listens) or from --peers; libcurl for the forwards. */
    bool route_zk = uses_zk && cfg.route == STOCKD_ROUTE_OWNER;
    if (stockd_route_setup(&cfg, route_zk, err, sizeof(err)) != 0 ||
        (cfg.route == STOCKD_ROUTE_OWNER && stockd_forward_init(err, sizeof(err)) != 0)) {
        stockd_log("error", "--route owner: %s", err);
        goto out;
    }
    ctx.queue = stockd_jobq_new(cfg.queue_max);
    if (!ctx.queue || !ctx.locks) goto out;
    /* The stock gauge's reader; if it cannot start, the service still serves, only
     * without stockd_product_stock. */
    stockredis_config watch_redis = {
        .addr = cfg.redis, .user = cfg.redis_user, .password = cfg.redis_password};
    if (stockd_stockwatch_start(&ctx.db, cfg.instance,
                                cfg.lock == STOCKD_LOCK_REDIS_STOCK ? &watch_redis : NULL) != 0)
        stockd_log("warn", "cannot start the stock watch thread: no stockd_product_stock");
    workers = stockd_workers_start(&ctx);
    if (!workers) {
        stockd_log("error", "cannot start %u worker threads", cfg.workers);
        goto out;
    }
    http = stockd_http_start(&ctx, err, sizeof(err));
    if (!http) {
        stockd_log("error", "%s", err);
        goto out;
    }
    if (route_zk && stockd_peers_start(&cfg, err, sizeof(err)) != 0) {
        stockd_log("error", "%s", err);
        goto out;
    }
    stockd_log(
        "info",
        "listening on %s:%u, lock %s, batch-max %u, precheck %s, %u workers, "
        "mysql %s@%s:%u/%s%s%s%s%s%s%s%s%s%s%s%s",
        cfg.bind, cfg.port, stockd_lock_mode_name(cfg.lock), cfg.batch_max,
        cfg.precheck ? "on" : "off", cfg.workers, ctx.db.user, ctx.db.host, ctx.db.port,
        ctx.db.database, uses_zk ? ", zookeeper " : "", uses_zk ? cfg.zk : "",
        uses_redis ? ", redis " : "", uses_redis ? cfg.redis : "",
        uses_redis && cfg.redis_password[0] ? " with a password" : "",
        cfg.lock == STOCKD_LOCK_ETCD ? ", etcd " : "", cfg.lock == STOCKD_LOCK_ETCD ? cfg.etcd : "",
        uses_zk && cfg.zk_auth[0] ? ", zookeeper digest ACL" : "", cfg.fence ? "" : ", FENCING OFF",
        cfg.route == STOCKD_ROUTE_OWNER ? ", route owner as " : "",
        cfg.route == STOCKD_ROUTE_OWNER ? stockd_route_self() : "");

    while (sigwait(&sigs, &sig) != 0 && errno == EINTR) {
    }
    stockd_log("info", "signal %d: stop accepting, answer the requests in flight", sig);
    stockd_peers_stop(); /* leave the view first: peers stop forwarding here */
    stockd_http_quiesce(http);
    status = 0;
out:
    /* Every lock wait, now and later, ends at once with "shutting down" (503), so the
     * requests queued behind a lock are answered instead of waiting out their timeouts;
     * closing the queue lets the workers answer the rest and exit. */
    stockd_peers_stop();
    lock_set_cancel(ctx.locks);
    if (ctx.queue) stockd_jobq_close(ctx.queue);
    stockd_workers_join(workers);
    stockd_stockwatch_stop();
    stockd_http_stop(http, 5000);
    stockd_jobq_free(ctx.queue);
    lock_set_free(ctx.locks);
    stockdb_global_end();
    if (status == 0) stockd_log("info", "stopped");
    return status;
}
