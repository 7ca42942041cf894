/* lease-bench: how fast a lease lock changes hands (redislock or dblock), and the proof
 * that it excludes. The twin of zklock-bench for the two lease kinds: lock/bench/run
 * uses it for the numbers; the tests lock_mutex_redis, lock_mutex_db and
 * lock_lease_bench_smoke use it for the checks.
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
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dblock.h"
#include "harness.h"
#include "redislock.h"

#define MAX_SAMPLES (1u << 21)
#define MAX_CODES   16 /* failures are counted by -code; every code of both kinds is above -16 */

typedef enum { KIND_REDIS, KIND_DB } bench_kind;

typedef struct bench_shared {
    bench_sync sync; /* first: ready, go, setup failures, time limit */
    atomic_int holders, max_holders;
    atomic_long overlaps, acquired, committed, not_committed, fence_errors;
    atomic_long failures[MAX_CODES];
    atomic_ulong nsamples, ops;
    long counter;       /* only ever written under the lock */
    int64_t last_token; /* likewise */
    uint32_t samples[MAX_SAMPLES];
} bench_shared;

static struct {
    const char *redis, *mysql, *name;
    bench_kind kind;
    int procs, threads, seconds, iterations, hold_us, timeout_ms, lease_ms;
    int expect_all, no_lock, json;
} opt = {.procs = 4, .threads = 4, .hold_us = 1000, .timeout_ms = 60000, .lease_ms = 10000};

static bench_shared *sh;
static stockdb_config dbcfg;

/* One thread's handle and hold of either kind. */
typedef struct lk {
    redislock *r;
    dblock *d;
    redislock_hold *rh;
    dblock_hold *dh;
} lk;

static int lk_open(lk *k) {
    char err[512];
    int rc;
    if (opt.kind == KIND_REDIS) {
        redislock_config c = {.addr = opt.redis, .lease_ms = opt.lease_ms};
        rc = redislock_new(&c, &k->r, err, sizeof(err));
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
    redislock_free(k->r);
    dblock_free(k->d);
}

static int lk_acquire(lk *k) {
    if (opt.no_lock) return 0;
    return opt.kind == KIND_REDIS ? redislock_acquire(k->r, opt.name, opt.timeout_ms, &k->rh)
                                  : dblock_acquire(k->d, opt.name, opt.timeout_ms, &k->dh);
}

static int lk_check(lk *k) {
    return opt.kind == KIND_REDIS ? redislock_check(k->rh) : dblock_check(k->dh);
}

static int64_t lk_token(lk *k) {
    return opt.kind == KIND_REDIS ? redislock_token(k->rh) : dblock_token(k->dh);
}

static void lk_release(lk *k) {
    if (k->rh) redislock_release(k->rh);
    if (k->dh) dblock_release(k->dh);
    k->rh = NULL;
    k->dh = NULL;
}

static const char *lk_strerror(int code) {
    return opt.kind == KIND_REDIS ? redislock_strerror(code) : dblock_strerror(code);
}

static void bench_section(lk *k) {
    int inside = atomic_fetch_add(&sh->holders, 1) + 1;
    if (inside > 1) atomic_fetch_add(&sh->overlaps, 1);
    int mx = atomic_load(&sh->max_holders);
    while (inside > mx && !atomic_compare_exchange_weak(&sh->max_holders, &mx, inside))
        ;
    int64_t token = opt.no_lock ? sh->last_token + 1 : lk_token(k);
    long v = sh->counter;
    if (opt.hold_us > 0) usleep((useconds_t)opt.hold_us);
    if (opt.no_lock || lk_check(k) == 0) {
        if (token <= sh->last_token) atomic_fetch_add(&sh->fence_errors, 1);
        sh->counter = v + 1;
        sh->last_token = token;
        atomic_fetch_add(&sh->committed, 1);
    } else {
        atomic_fetch_add(&sh->not_committed, 1);
    }
    atomic_fetch_sub(&sh->holders, 1);
}

static void *bench_thread(void *arg) {
    lk *k = arg;
    if (!bench_wait_go(&sh->sync)) return NULL;
    for (int i = 0; bench_more(&sh->sync, i, opt.iterations); i++) {
        int64_t t0 = bench_now_us();
        int rc = lk_acquire(k);
        int64_t waited = bench_now_us() - t0;
        if (rc != 0) {
            atomic_fetch_add(&sh->failures[-rc % MAX_CODES], 1);
            usleep(50000); /* while the server is down, do not spin on it */
            continue;
        }
        atomic_fetch_add(&sh->acquired, 1);
        unsigned long n = atomic_fetch_add(&sh->nsamples, 1);
        if (n < MAX_SAMPLES) sh->samples[n] = waited > UINT32_MAX ? UINT32_MAX : (uint32_t)waited;
        bench_section(k);
        lk_release(k);
    }
    return NULL;
}

/* One thread of a forked process: it opens its own handle (a dblock handle must be made
 * and used on one thread), reports that it did, and runs once every process is ready. */
typedef struct tctx {
    lk k;
    int ok;
    atomic_int *opened;
} tctx;

static void *thread_main(void *arg) {
    tctx *t = arg;
    t->ok = !opt.no_lock ? lk_open(&t->k) == 0 : 1;
    if (!t->ok) atomic_fetch_add(&sh->sync.setup_failures, 1);
    atomic_fetch_add(t->opened, 1);
    if (t->ok) bench_thread(&t->k);
    lk_close(&t->k);
    return NULL;
}

static int bench_process(void) {
    pthread_t *th = calloc((size_t)opt.threads, sizeof(*th));
    tctx *t = calloc((size_t)opt.threads, sizeof(*t));
    atomic_int opened = 0;
    int started = 0;
    if (!th || !t || stockdb_global_init() != STOCKDB_OK) goto out;
    for (; started < opt.threads; started++) {
        t[started].opened = &opened;
        if (pthread_create(&th[started], NULL, thread_main, &t[started]) != 0) break;
    }
    while (atomic_load(&opened) < started)
        usleep(1000);

out:
    if (started < opt.threads) atomic_fetch_add(&sh->sync.setup_failures, 1);
    atomic_fetch_add(&sh->sync.ready, 1);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    int ok = started == opt.threads;
    for (int i = 0; ok && i < opt.threads; i++)
        ok = t[i].ok;
    free(th);
    free(t);
    return ok ? 0 : 1;
}

static int bench_report(double elapsed, int bad_exits) {
    long acq = atomic_load(&sh->acquired), committed = atomic_load(&sh->committed);
    long overlaps = atomic_load(&sh->overlaps), failures = 0;
    for (int i = 1; i < MAX_CODES; i++)
        failures += atomic_load(&sh->failures[i]);
    unsigned long n = atomic_load(&sh->nsamples);
    if (n > MAX_SAMPLES) n = MAX_SAMPLES;
    double mean, p50, p99, max;
    bench_wait_stats(sh->samples, n, &mean, &p50, &p99, &max);
    double rate = elapsed > 0 ? (double)acq / elapsed : 0;
    double ops = acq > 0 ? (double)atomic_load(&sh->ops) / (double)acq : 0;
    const char *kind = opt.kind == KIND_REDIS ? "redis" : "db";
    int counter_ok = sh->counter == committed;

    if (opt.json) {
        printf("{\"kind\": \"%s\", \"no_lock\": %s, \"procs\": %d, \"threads\": %d, "
               "\"seconds\": %.2f, \"hold_us\": %d, \"lease_ms\": %d, \"acquisitions\": %ld, "
               "\"acquisitions_per_s\": %.1f, \"committed\": %ld, \"not_committed\": %ld, "
               "\"counter\": %ld, \"counter_ok\": %s, \"overlaps\": %ld, \"max_holders\": %d, "
               "\"fence_errors\": %ld, \"failures\": %ld, \"bad_exits\": %d, "
               "\"wait_ms_mean\": %.3f, \"wait_ms_p50\": %.3f, \"wait_ms_p99\": %.3f, "
               "\"wait_ms_max\": %.3f, \"ops_per_acq\": %.3f}\n",
               kind, opt.no_lock ? "true" : "false", opt.procs, opt.threads, elapsed, opt.hold_us,
               opt.lease_ms, acq, rate, committed, atomic_load(&sh->not_committed), sh->counter,
               counter_ok ? "true" : "false", overlaps, atomic_load(&sh->max_holders),
               atomic_load(&sh->fence_errors), failures, bad_exits, mean, p50, p99, max, ops);
    } else {
        printf("kind=%s%s procs=%d threads=%d seconds=%.2f hold_us=%d lease_ms=%d lock=%s\n", kind,
               opt.no_lock ? " (no lock)" : "", opt.procs, opt.threads, elapsed, opt.hold_us,
               opt.lease_ms, opt.name);
        printf("acquisitions=%ld (%.1f/s) committed=%ld not_committed=%ld counter=%ld "
               "failures=%ld\n",
               acq, rate, committed, atomic_load(&sh->not_committed), sh->counter, failures);
        printf("overlaps=%ld max_holders=%d fence_errors=%ld bad_exits=%d\n", overlaps,
               atomic_load(&sh->max_holders), atomic_load(&sh->fence_errors), bad_exits);
        printf("wait ms: mean=%.3f p50=%.3f p99=%.3f max=%.3f\n", mean, p50, p99, max);
        printf("per acquisition: lock-service ops=%.3f\n", ops);
    }
    FILE *notes = opt.json ? stderr : stdout;
    for (int i = 1; i < MAX_CODES; i++) {
        long k = atomic_load(&sh->failures[i]);
        if (k) fprintf(notes, "failures: %ld x %s\n", k, lk_strerror(-i));
    }
    bench_outcome o = {.bad_exits = bad_exits,
                       .overlaps = overlaps,
                       .max_holders = atomic_load(&sh->max_holders),
                       .committed = committed,
                       .counter = sh->counter,
                       .fence_errors = atomic_load(&sh->fence_errors),
                       .failures = failures,
                       .all = opt.expect_all ? (long)opt.procs * opt.threads * opt.iterations : 0};
    int failed = bench_checks(notes, &o);
    if (!failed && !opt.json) printf("ok\n");
    return failed;
}

static void usage(FILE *out) {
    fprintf(out, "usage: lease-bench --kind redis --redis HOST:PORT [options]\n"
                 "       lease-bench --kind db --mysql mysql://USER@HOST:PORT/DB [options]\n"
                 "  (the MySQL password comes from STOCKD_MYSQL_PASSWORD)\n"
                 "  --procs P          processes (4)\n"
                 "  --threads T        threads per process, one lock handle each (4)\n"
                 "  --seconds D        stop starting acquisitions after D seconds\n"
                 "  --iterations N     acquisitions per thread (with neither: --seconds 10)\n"
                 "  --hold-us U        time inside the critical section (1000)\n"
                 "  --timeout-ms MS    acquire timeout (60000)\n"
                 "  --lease-ms MS      lease of every acquisition (10000)\n"
                 "  --name LOCK        lock name (bench_KIND_PID_TIME)\n"
                 "  --expect-all       also check that every acquisition succeeded\n"
                 "  --no-lock          negative control: no lock, so the checks must fail\n"
                 "  --json             one JSON object on stdout; notes on stderr\n"
                 "Exit status: 0 all checks hold, 1 a check failed, 2 bad usage or setup.\n");
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {{"kind", required_argument, 0, 'k'},
                                             {"redis", required_argument, 0, 'r'},
                                             {"mysql", required_argument, 0, 'm'},
                                             {"procs", required_argument, 0, 'p'},
                                             {"threads", required_argument, 0, 't'},
                                             {"seconds", required_argument, 0, 's'},
                                             {"iterations", required_argument, 0, 'i'},
                                             {"hold-us", required_argument, 0, 'u'},
                                             {"timeout-ms", required_argument, 0, 'o'},
                                             {"lease-ms", required_argument, 0, 'l'},
                                             {"name", required_argument, 0, 'n'},
                                             {"expect-all", no_argument, 0, 'a'},
                                             {"no-lock", no_argument, 0, 'L'},
                                             {"json", no_argument, 0, 'j'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c, kind_set = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'k':
            kind_set = 1;
            if (strcmp(optarg, "redis") == 0) {
                opt.kind = KIND_REDIS;
            } else if (strcmp(optarg, "db") == 0) {
                opt.kind = KIND_DB;
            } else {
                usage(stderr);
                return 2;
            }
            break;
        case 'r':
            opt.redis = optarg;
            break;
        case 'm':
            opt.mysql = optarg;
            break;
        case 'p':
            opt.procs = atoi(optarg);
            break;
        case 't':
            opt.threads = atoi(optarg);
            break;
        case 's':
            opt.seconds = atoi(optarg);
            break;
        case 'i':
            opt.iterations = atoi(optarg);
            break;
        case 'u':
            opt.hold_us = atoi(optarg);
            break;
        case 'o':
            opt.timeout_ms = atoi(optarg);
            break;
        case 'l':
            opt.lease_ms = atoi(optarg);
            break;
        case 'n':
            opt.name = optarg;
            break;
        case 'a':
            opt.expect_all = 1;
            break;
        case 'L':
            opt.no_lock = 1;
            break;
        case 'j':
            opt.json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || !kind_set || (opt.kind == KIND_REDIS && !opt.redis) ||
        (opt.kind == KIND_DB && !opt.mysql) || opt.procs < 1 || opt.threads < 1 ||
        opt.seconds < 0 || opt.iterations < 0 || opt.hold_us < 0 || opt.lease_ms < 1 ||
        (opt.expect_all && !opt.iterations)) {
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
    if (!opt.seconds && !opt.iterations) opt.seconds = 10;
    char name[96];
    if (!opt.name) {
        snprintf(name, sizeof(name), "bench_%s_%ld_%lld", opt.kind == KIND_REDIS ? "redis" : "db",
                 (long)getpid(), (long long)time(NULL));
        opt.name = name;
    }

    int rc = 2, bad_exits = 0;
    double elapsed = 0;
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("lease-bench: mmap");
        return 2;
    }
    if (bench_run("lease-bench", &sh->sync, opt.procs, opt.seconds, bench_process, &elapsed,
                  &bad_exits) == 0)
        rc = bench_report(elapsed, bad_exits) ? 1 : 0;
    munmap(sh, sizeof(*sh));
    return rc;
}
