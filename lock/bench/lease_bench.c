/* lease-bench: how fast a lease lock changes hands (redis, db-lock or redlock), and the
 * proof that it excludes. The twin of zklock-bench for the lease kinds, run by hand for
 * the numbers (docs/benchmarks.md); the tests lock_mutex_redis, lock_mutex_db,
 * lock_mutex_redlock and lock_mutex_lease_control use it for the checks. --kind redlock
 * runs RedLock over the servers of a comma list in --redis.
 *
 * It takes its lock through lock.h as the service does: P forked processes each make
 * the kind's set for T holders (lease_pool.c: one handle per holder, as neither library
 * shares a connection between threads), and each of their T threads takes the same lock
 * in a loop, N times (--iterations) or until D seconds have passed (--seconds). The
 * critical section is zklock-bench's: a counter in MAP_SHARED memory updated
 * non-atomically (read, sleep U microseconds, write), committed only if lock_check says
 * the lease is still ours, an atomic gauge of holders, and a fencing token that must
 * grow from one committed holder to the next.
 *
 * Measured: acquisitions and acquisitions/s, the wait in acquire (mean, p50, p99, max),
 * and lock-service operations (Redis commands or SQL statements, lock_stats.ops) per
 * acquisition. Checked: every process finished, no overlap, counter == committed
 * sections, tokens grew, something was committed, and with --expect-all every
 * acquisition succeeded. --no-lock is the negative control. Exit status 0 if all checks
 * hold, 1 if one failed, 2 on bad usage or setup failure. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "lock.h"
#include "stockdb.h"

typedef enum { KIND_REDIS, KIND_DB, KIND_REDLOCK } bench_kind;

/* The --kind names, by bench_kind, and the registry's names of their kinds. */
static const char *const kinds[] = {"redis", "db", "redlock", NULL};
static const char *const kind_rows[] = {"redis", "db-lock", "redlock"};

typedef struct bench_shared {
    bench_state b;    /* first: what the harness counts */
    atomic_ulong ops; /* lock-service operations of every process's set */
} bench_shared;

static struct {
    bench_opts b;
    const char *redis, *mysql;
    int kind; /* a bench_kind; -1 until --kind */
    int lease_ms;
} opt = {.b = BENCH_OPTS_INIT, .kind = -1, .lease_ms = 10000};

static bench_shared *sh;
static stockdb_config dbcfg;

/* One thread's hold, on its process's set. */
typedef struct lk {
    lock_set *set;
    lock_hold h;
} lk;

/* The bench_lock over lock.h; ctx is the thread's lk. */
static int lk_acquire(void *ctx) {
    lk *k = ctx;
    return lock_acquire(k->set, opt.b.name, &k->h);
}

static int lk_check(void *ctx) {
    return lock_check(&((lk *)ctx)->h);
}

static int64_t lk_token(void *ctx) {
    return lock_token(&((lk *)ctx)->h);
}

static void lk_release(void *ctx) {
    lk *k = ctx;
    if (k->h.kind) lock_release(&k->h);
    k->h = (lock_hold){0};
}

static const bench_lock lease_lock = {lk_acquire, lk_token, lk_check, lk_release};

static void *thread_main(void *arg) {
    lk *k = arg;
    bench_loop(&sh->b, &opt.b, &lease_lock, k);
    return NULL;
}

/* Makes the process's set (NULL with --no-lock) and checks that the lock service
 * answers, so that a wrong address voids the run rather than failing every acquire. */
static int open_set(lock_set **out) {
    char err[512];
    *out = NULL;
    if (opt.b.no_lock) return 0;
    lock_config cfg = {.addr = opt.redis,
                       .timeout_ms = opt.b.timeout_ms,
                       .lease_ms = opt.lease_ms,
                       .holders = (unsigned)opt.b.threads,
                       .owner = "lease-bench",
                       .db = &dbcfg};
    int rc = lock_set_new(lock_kind_find(kind_rows[opt.kind]), &cfg, out, err, sizeof(err));
    if (rc == LOCK_OK) rc = lock_ping(*out, err, sizeof(err));
    if (rc != LOCK_OK) fprintf(stderr, "lease-bench: lock set: %s\n", err);
    return rc;
}

static int bench_process(void) {
    pthread_t *th = calloc((size_t)opt.b.threads, sizeof(*th));
    lk *t = calloc((size_t)opt.b.threads, sizeof(*t));
    lock_set *set = NULL;
    int started = 0;
    if (!th || !t || stockdb_global_init() != STOCKDB_OK || open_set(&set) != 0) goto out;
    for (; started < opt.b.threads; started++) {
        t[started].set = set;
        if (pthread_create(&th[started], NULL, thread_main, &t[started]) != 0) break;
    }

out:
    if (started < opt.b.threads) atomic_fetch_add(&sh->b.sync.setup_failures, 1);
    atomic_fetch_add(&sh->b.sync.ready, 1);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (set) {
        lock_stats st;
        lock_get_stats(set, &st);
        atomic_fetch_add(&sh->ops, st.ops);
    }
    lock_set_free(set);
    int ok = started == opt.b.threads;
    free(th);
    free(t);
    return ok ? 0 : 1;
}

static const char *kind_name(void) {
    return opt.kind == KIND_REDIS ? "redis" : opt.kind == KIND_REDLOCK ? "redlock" : "db";
}

/* lease-bench's part of the report: the lease, and lock-service operations per
 * acquisition. */
static void own_report(bench_own *r) {
    long acq = atomic_load(&sh->b.acquired);
    double ops = acq > 0 ? (double)atomic_load(&sh->ops) / (double)acq : 0;
    r->kind = kind_name();
    r->strerror = lock_strerror;
    snprintf(r->text_head, sizeof(r->text_head), " lease_ms=%d", opt.lease_ms);
    snprintf(r->json_head, sizeof(r->json_head), "\"lease_ms\": %d, ", opt.lease_ms);
    snprintf(r->text_tail, sizeof(r->text_tail), "lock-service ops=%.3f", ops);
    snprintf(r->json_tail, sizeof(r->json_tail), "\"ops_per_acq\": %.3f", ops);
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: lease-bench --kind redis --redis HOST:PORT [options]\n"
            "       lease-bench --kind redlock --redis HOST:PORT,HOST:PORT,HOST:PORT [options]\n"
            "       lease-bench --kind db --mysql mysql://USER@HOST:PORT/DB [options]\n"
            "  (the MySQL password comes from STOCKD_MYSQL_PASSWORD)\n"
            "  --procs P          processes (4)\n"
            "  --threads T        threads per process, one lock handle each (4)\n" BENCH_USAGE_RUN
            "  --timeout-ms MS    acquire timeout (60000)\n"
            "  --lease-ms MS      lease of every acquisition (10000)\n" BENCH_USAGE_NAME
                BENCH_USAGE_END);
}

int main(int argc, char **argv) {
    const bench_option own[] = {{.name = "kind", .choices = kinds, .choice = &opt.kind},
                                {.name = "redis", .text = &opt.redis},
                                {.name = "mysql", .text = &opt.mysql},
                                {.name = "lease-ms", .num = &opt.lease_ms, .late = true},
                                {0}};
    char name[96];
    int rc = bench_parse(argc, argv, own, usage, kind_name, &opt.b, name, sizeof(name));
    if (rc >= 0) return rc;
    if (opt.kind < 0 || (opt.kind != KIND_DB && !opt.redis) ||
        (opt.kind == KIND_DB && !opt.mysql) || opt.lease_ms < 1) {
        usage(stderr);
        return 2;
    }
    if (opt.kind == KIND_DB) {
        const char *pw = getenv("STOCKD_MYSQL_PASSWORD");
        if (pw) snprintf(dbcfg.password, sizeof(dbcfg.password), "%s", pw);
        if (stockdb_config_from_url(&dbcfg, opt.mysql) != STOCKDB_OK) {
            fprintf(stderr, "lease-bench: bad --mysql URL\n");
            return 2;
        }
    }
    if (!(sh = bench_map("lease-bench", sizeof(*sh)))) return 2;
    rc = bench_main("lease-bench", &sh->b, &opt.b, bench_process, own_report);
    munmap(sh, sizeof(*sh));
    return rc;
}
