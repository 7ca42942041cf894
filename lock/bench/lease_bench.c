/* lease-bench: how fast a lease lock changes hands (redislock or dblock), and the proof
 * that it excludes. The twin of zklock-bench for the two lease kinds: lock/bench/run
 * uses it for the numbers; the tests lock_mutex_redis, lock_mutex_db and
 * lock_lease_bench_smoke use it for the checks. --kind redlock runs lock/redlock.h over
 * the servers of a comma list in --redis (lock_mutex_redlock).
 *
 * P forked processes run T threads each; every thread has its own lock handle (neither
 * kind shares a connection between threads) and takes the same lock in a loop, N times
 * (--iterations) or until D seconds have passed (--seconds). The critical section is
 * zklock-bench's: a counter in MAP_SHARED memory updated non-atomically (read, sleep U
 * microseconds, write), committed only if check() says the lease is still ours, an
 * atomic gauge of holders, and a fencing token that must grow from one committed holder
 * to the next.
 *
 * Measured: acquisitions and acquisitions/s, the wait in acquire (mean, p50, p99, max),
 * and lock-service operations (Redis commands or SQL statements) per acquisition.
 * Checked: every process finished, no overlap, counter == committed sections, tokens
 * grew, something was committed, and with --expect-all every acquisition succeeded.
 * --no-lock is the negative control. Exit status 0 if all checks hold, 1 if one failed,
 * 2 on bad usage or setup failure. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dblock.h"
#include "harness.h"
#include "redislock.h"
#include "redlock.h"

typedef enum { KIND_REDIS, KIND_DB, KIND_REDLOCK } bench_kind;

typedef struct bench_shared {
    bench_state b;    /* first: what the harness counts */
    atomic_ulong ops; /* lock-service operations of every handle */
} bench_shared;

static struct {
    bench_opts b;
    const char *redis, *mysql;
    int kind; /* a bench_kind; -1 until --kind */
    int lease_ms;
} opt = {.b = BENCH_OPTS_INIT, .kind = -1, .lease_ms = 10000};

static bench_shared *sh;
static stockdb_config dbcfg;

/* One thread's handle and hold of either kind. */
typedef struct lk {
    redislock *r;
    dblock *d;
    redislock_hold *rh;
    dblock_hold *dh;
    redlock *rl;
    redlock_hold *rlh;
} lk;

static int lk_open(lk *k) {
    char err[512];
    int rc;
    if (opt.kind == KIND_REDIS) {
        redislock_config c = {.addr = opt.redis, .lease_ms = opt.lease_ms};
        rc = redislock_new(&c, &k->r, err, sizeof(err));
    } else if (opt.kind == KIND_REDLOCK) {
        redlock_config c = {.addrs = opt.redis, .lease_ms = opt.lease_ms};
        rc = redlock_new(&c, &k->rl, err, sizeof(err));
    } else {
        dblock_config c = {.db = dbcfg, .owner = "lease-bench", .lease_ms = opt.lease_ms};
        rc = dblock_new(&c, &k->d, err, sizeof(err));
    }
    if (rc != 0) fprintf(stderr, "lease-bench: lock handle: %s\n", err);
    return rc;
}

static void lk_close(lk *k) {
    if (k->r) {
        redislock_stats st;
        redislock_get_stats(k->r, &st);
        atomic_fetch_add(&sh->ops, st.ops);
    }
    if (k->d) {
        dblock_stats st;
        dblock_get_stats(k->d, &st);
        atomic_fetch_add(&sh->ops, st.ops);
    }
    if (k->rl) {
        redlock_stats st;
        redlock_get_stats(k->rl, &st);
        atomic_fetch_add(&sh->ops, st.ops);
    }
    redislock_free(k->r);
    dblock_free(k->d);
    redlock_free(k->rl);
}

/* The bench_lock of either kind; ctx is the thread's lk. */
static int lk_acquire(void *ctx) {
    lk *k = ctx;
    if (opt.kind == KIND_REDLOCK)
        return redlock_acquire(k->rl, opt.b.name, opt.b.timeout_ms, &k->rlh);
    return opt.kind == KIND_REDIS ? redislock_acquire(k->r, opt.b.name, opt.b.timeout_ms, &k->rh)
                                  : dblock_acquire(k->d, opt.b.name, opt.b.timeout_ms, &k->dh);
}

static int lk_check(void *ctx) {
    lk *k = ctx;
    if (opt.kind == KIND_REDLOCK) return redlock_check(k->rlh);
    return opt.kind == KIND_REDIS ? redislock_check(k->rh) : dblock_check(k->dh);
}

static int64_t lk_token(void *ctx) {
    lk *k = ctx;
    if (opt.kind == KIND_REDLOCK) return redlock_token(k->rlh);
    return opt.kind == KIND_REDIS ? redislock_token(k->rh) : dblock_token(k->dh);
}

static void lk_release(void *ctx) {
    lk *k = ctx;
    if (k->rh) redislock_release(k->rh);
    if (k->dh) dblock_release(k->dh);
    if (k->rlh) redlock_release(k->rlh);
    k->rlh = NULL;
    k->rh = NULL;
    k->dh = NULL;
}

static const char *lk_strerror(int code) {
    if (opt.kind == KIND_REDLOCK) return redlock_strerror(code);
    return opt.kind == KIND_REDIS ? redislock_strerror(code) : dblock_strerror(code);
}

static const bench_lock lease_lock = {lk_acquire, lk_token, lk_check, lk_release};

/* One thread of a forked process: it opens its own handle (a dblock handle must be made
 * and used on one thread), reports that it did, and runs once every process is ready. */
typedef struct tctx {
    lk k;
    int ok;
    atomic_int *opened;
} tctx;

static void *thread_main(void *arg) {
    tctx *t = arg;
    t->ok = !opt.b.no_lock ? lk_open(&t->k) == 0 : 1;
    if (!t->ok) atomic_fetch_add(&sh->b.sync.setup_failures, 1);
    atomic_fetch_add(t->opened, 1);
    if (t->ok) bench_loop(&sh->b, &opt.b, &lease_lock, &t->k);
    lk_close(&t->k);
    return NULL;
}

static int bench_process(void) {
    pthread_t *th = calloc((size_t)opt.b.threads, sizeof(*th));
    tctx *t = calloc((size_t)opt.b.threads, sizeof(*t));
    atomic_int opened = 0;
    int started = 0;
    if (!th || !t || stockdb_global_init() != STOCKDB_OK) goto out;
    for (; started < opt.b.threads; started++) {
        t[started].opened = &opened;
        if (pthread_create(&th[started], NULL, thread_main, &t[started]) != 0) break;
    }
    while (atomic_load(&opened) < started)
        usleep(1000);

out:
    if (started < opt.b.threads) atomic_fetch_add(&sh->b.sync.setup_failures, 1);
    atomic_fetch_add(&sh->b.sync.ready, 1);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    int ok = started == opt.b.threads;
    for (int i = 0; ok && i < opt.b.threads; i++)
        ok = t[i].ok;
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
    r->strerror = lk_strerror;
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

/* The --kind names, by bench_kind. */
static const char *const kinds[] = {"redis", "db", "redlock", NULL};

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
