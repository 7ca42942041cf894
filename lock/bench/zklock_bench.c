/* zklock-bench: how fast one zklock changes hands (fair queue against herd), and
 * the proof that it excludes. lock/bench/run uses it for the numbers; the tests
 * lock_mutex_*, lock_zk_restart_test and lock_bench_smoke use it for the checks.
 *
 * P forked processes (one zklock session each) run T threads that take the same
 * lock in a loop, each thread N times (--iterations) or until D seconds have
 * passed (--seconds), whichever comes first; with neither, for 10 seconds. In the
 * critical section a counter in MAP_SHARED memory is updated non-atomically (read,
 * sleep U microseconds, write), so any overlap would lose updates, and an atomic
 * gauge of holders records whether two were ever inside at once. The write is
 * committed only if zklock_check() says the lock is still ours, as the service does
 * before COMMIT, and the fencing token must grow from one committed holder to the
 * next.
 *
 * Measured: acquisitions and acquisitions/s, the mean, p50, p99 and max wait in
 * zklock_acquire, and ZooKeeper calls and node-watch events per acquisition from
 * the sessions' counters. Nothing about timing is asserted.
 *
 * Checked: every process finished, no overlap, counter == committed sections,
 * tokens grew, at least one section was committed, and with --expect-all every
 * acquisition succeeded and P x T x N sections were committed. --no-lock skips the
 * lock: the negative control, which must fail these checks. Exit status 0 if all
 * checks hold, 1 if one failed, 2 on bad usage or setup failure. */
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

#include "harness.h"
#include "zklock.h"

#define MAX_SAMPLES (1u << 21)
#define MAX_CODES   16 /* failures are counted by -code, and every ZKLOCK_* code is above -16 */

typedef struct bench_shared {
    bench_sync sync; /* first: ready, go, setup failures, time limit */
    atomic_int holders;
    atomic_int max_holders;
    atomic_long overlaps;
    atomic_long acquired;
    atomic_long committed;
    atomic_long not_committed; /* zklock_check said SUSPECT or LOST before the write */
    atomic_long fence_errors;
    atomic_long failures[MAX_CODES];
    atomic_ulong nsamples;
    atomic_ulong watch_events, zk_calls;
    long counter;                  /* only ever written under the lock */
    int64_t last_token;            /* likewise */
    uint32_t samples[MAX_SAMPLES]; /* wait in zklock_acquire, microseconds */
} bench_shared;

static struct {
    const char *hosts, *name;
    zklock_kind kind;
    int procs, threads, seconds, iterations, hold_us, timeout_ms, session_ms;
    int expect_all, no_lock, json;
} opt = {.procs = 4, .threads = 4, .hold_us = 1000, .timeout_ms = 60000};

static bench_shared *sh;
static zklock_session *sess;

/* One critical section: the read-sleep-write of the counter loses an update
 * whenever two holders overlap; the commit is guarded like the service's. */
static void bench_section(zklock_hold *h) {
    int inside = atomic_fetch_add(&sh->holders, 1) + 1;
    if (inside > 1) atomic_fetch_add(&sh->overlaps, 1);
    int mx = atomic_load(&sh->max_holders);
    while (inside > mx && !atomic_compare_exchange_weak(&sh->max_holders, &mx, inside))
        ;
    int64_t token = opt.no_lock ? sh->last_token + 1 : zklock_token(h);
    long v = sh->counter;
    if (opt.hold_us > 0) usleep((useconds_t)opt.hold_us);
    if (opt.no_lock || zklock_check(h) == ZKLOCK_OK) {
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
    (void)arg;
    if (!bench_wait_go(&sh->sync)) return NULL;
    for (int i = 0; bench_more(&sh->sync, i, opt.iterations); i++) {
        zklock_hold *h = NULL;
        int64_t t0 = bench_now_us();
        int rc =
            opt.no_lock ? ZKLOCK_OK : zklock_acquire(sess, opt.name, opt.kind, opt.timeout_ms, &h);
        int64_t waited = bench_now_us() - t0;
        if (rc != ZKLOCK_OK) {
            atomic_fetch_add(&sh->failures[-rc % MAX_CODES], 1);
            usleep(50000); /* while the connection is down, do not spin on it */
            continue;
        }
        atomic_fetch_add(&sh->acquired, 1);
        unsigned long n = atomic_fetch_add(&sh->nsamples, 1);
        if (n < MAX_SAMPLES) sh->samples[n] = waited > UINT32_MAX ? UINT32_MAX : (uint32_t)waited;
        bench_section(h);
        if (h) zklock_release(h);
    }
    return NULL;
}

/* The body of one forked process; its exit status is 0 if it ran its threads. */
static int bench_process(void) {
    zklock_session_config cfg = {
        .hosts = opt.hosts, .session_timeout_ms = opt.session_ms, .connect_timeout_ms = 10000};
    pthread_t *t = NULL;
    int started = 0;
    int rc = zklock_session_new(&cfg, &sess);
    if (rc != ZKLOCK_OK) {
        fprintf(stderr, "zklock-bench: session on %s: %s\n", opt.hosts, zklock_strerror(rc));
        goto out;
    }
    t = calloc((size_t)opt.threads, sizeof(*t));
    if (!t) goto out;
    while (started < opt.threads && pthread_create(&t[started], NULL, bench_thread, NULL) == 0)
        started++;

out:
    if (started < opt.threads) atomic_fetch_add(&sh->sync.setup_failures, 1);
    atomic_fetch_add(&sh->sync.ready, 1);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    if (sess) {
        zklock_stats st;
        zklock_get_stats(sess, &st);
        atomic_fetch_add(&sh->watch_events, st.watch_events);
        atomic_fetch_add(&sh->zk_calls,
                         st.op_create + st.op_delete + st.op_get_children + st.op_get_data);
    }
    zklock_session_free(sess);
    free(t);
    return started == opt.threads ? 0 : 1;
}

/* Prints the results (JSON or text) and the failed checks; returns how many failed. */
static int bench_report(double elapsed, int bad_exits) {
    long acq = atomic_load(&sh->acquired), committed = atomic_load(&sh->committed);
    long overlaps = atomic_load(&sh->overlaps), failures = 0;
    for (int i = 1; i < MAX_CODES; i++)
        failures += atomic_load(&sh->failures[i]);
    unsigned long n = atomic_load(&sh->nsamples);
    if (n > MAX_SAMPLES) n = MAX_SAMPLES;
    double mean, p50, p99, max;
    bench_wait_stats(sh->samples, n, &mean, &p50, &p99, &max);
    double per = acq > 0 ? 1.0 / (double)acq : 0;
    double rate = elapsed > 0 ? (double)acq / elapsed : 0;
    double wev = (double)atomic_load(&sh->watch_events) * per;
    double ops = (double)atomic_load(&sh->zk_calls) * per;
    const char *kind = opt.kind == ZKLOCK_HERD ? "herd" : "fair";
    int counter_ok = sh->counter == committed;

    if (opt.json) {
        printf("{\"kind\": \"%s\", \"no_lock\": %s, \"procs\": %d, \"threads\": %d, "
               "\"seconds\": %.2f, \"hold_us\": %d, \"acquisitions\": %ld, "
               "\"acquisitions_per_s\": %.1f, \"committed\": %ld, \"not_committed\": %ld, "
               "\"counter\": %ld, \"counter_ok\": %s, \"overlaps\": %ld, \"max_holders\": %d, "
               "\"fence_errors\": %ld, \"failures\": %ld, \"bad_exits\": %d, "
               "\"wait_ms_mean\": %.3f, \"wait_ms_p50\": %.3f, \"wait_ms_p99\": %.3f, "
               "\"wait_ms_max\": %.3f, \"watch_events_per_acq\": %.3f, "
               "\"zk_calls_per_acq\": %.3f}\n",
               kind, opt.no_lock ? "true" : "false", opt.procs, opt.threads, elapsed, opt.hold_us,
               acq, rate, committed, atomic_load(&sh->not_committed), sh->counter,
               counter_ok ? "true" : "false", overlaps, atomic_load(&sh->max_holders),
               atomic_load(&sh->fence_errors), failures, bad_exits, mean, p50, p99, max, wev, ops);
    } else {
        printf("kind=%s%s procs=%d threads=%d seconds=%.2f hold_us=%d lock=%s\n", kind,
               opt.no_lock ? " (no lock)" : "", opt.procs, opt.threads, elapsed, opt.hold_us,
               opt.name);
        printf("acquisitions=%ld (%.1f/s) committed=%ld not_committed=%ld counter=%ld "
               "failures=%ld\n",
               acq, rate, committed, atomic_load(&sh->not_committed), sh->counter, failures);
        printf("overlaps=%ld max_holders=%d fence_errors=%ld bad_exits=%d\n", overlaps,
               atomic_load(&sh->max_holders), atomic_load(&sh->fence_errors), bad_exits);
        printf("wait ms: mean=%.3f p50=%.3f p99=%.3f max=%.3f\n", mean, p50, p99, max);
        printf("per acquisition: watch_events=%.3f zk_calls=%.3f\n", wev, ops);
    }

    /* With --json, stdout holds the JSON only; the notes go to stderr. */
    FILE *notes = opt.json ? stderr : stdout;
    for (int i = 1; i < MAX_CODES; i++) {
        long k = atomic_load(&sh->failures[i]);
        if (k) fprintf(notes, "failures: %ld x %s\n", k, zklock_strerror(-i));
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
    /* The "ok" line is for people and logs; JSON readers have the fields. */
    if (!failed && !opt.json) printf("ok\n");
    return failed;
}

static void usage(FILE *out) {
    fprintf(out, "usage: zklock-bench --zk HOSTS [options]\n"
                 "  --kind fair|herd   lock recipe (fair)\n"
                 "  --procs P          processes, one zklock session each (4)\n"
                 "  --threads T        threads per process (4)\n"
                 "  --seconds D        stop starting acquisitions after D seconds\n"
                 "  --iterations N     acquisitions per thread (with neither: --seconds 10)\n"
                 "  --hold-us U        time inside the critical section (1000)\n"
                 "  --timeout-ms MS    zklock_acquire timeout (60000)\n"
                 "  --session-ms MS    ZooKeeper session timeout (0: zklock's default)\n"
                 "  --name LOCK        lock name (bench_KIND_PID_TIME)\n"
                 "  --expect-all       also check that every acquisition succeeded\n"
                 "                     (needs --iterations)\n"
                 "  --no-lock          negative control: no lock, so the checks must fail\n"
                 "  --json             one JSON object on stdout; notes on stderr\n"
                 "Exit status: 0 all checks hold, 1 a check failed, 2 bad usage or setup.\n");
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {{"zk", required_argument, 0, 'z'},
                                             {"kind", required_argument, 0, 'k'},
                                             {"procs", required_argument, 0, 'p'},
                                             {"threads", required_argument, 0, 't'},
                                             {"seconds", required_argument, 0, 's'},
                                             {"iterations", required_argument, 0, 'i'},
                                             {"hold-us", required_argument, 0, 'u'},
                                             {"timeout-ms", required_argument, 0, 'o'},
                                             {"session-ms", required_argument, 0, 'S'},
                                             {"name", required_argument, 0, 'n'},
                                             {"expect-all", no_argument, 0, 'a'},
                                             {"no-lock", no_argument, 0, 'L'},
                                             {"json", no_argument, 0, 'j'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'z':
            opt.hosts = optarg;
            break;
        case 'k':
            if (strcmp(optarg, "fair") == 0) {
                opt.kind = ZKLOCK_FAIR;
            } else if (strcmp(optarg, "herd") == 0) {
                opt.kind = ZKLOCK_HERD;
            } else {
                usage(stderr);
                return 2;
            }
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
        case 'S':
            opt.session_ms = atoi(optarg);
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
    if (optind < argc || !opt.hosts || opt.procs < 1 || opt.threads < 1 || opt.seconds < 0 ||
        opt.iterations < 0 || opt.hold_us < 0 || opt.session_ms < 0 ||
        (opt.expect_all && !opt.iterations)) {
        usage(stderr);
        return 2;
    }
    if (!opt.seconds && !opt.iterations) opt.seconds = 10;
    char name[96];
    if (!opt.name) {
        snprintf(name, sizeof(name), "bench_%s_%ld_%lld", opt.kind == ZKLOCK_HERD ? "herd" : "fair",
                 (long)getpid(), (long long)time(NULL));
        opt.name = name;
    }

    int rc = 2, bad_exits = 0;
    double elapsed = 0;
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("zklock-bench: mmap");
        return 2;
    }
    if (bench_run("zklock-bench", &sh->sync, opt.procs, opt.seconds, bench_process, &elapsed,
                  &bad_exits) == 0)
        rc = bench_report(elapsed, bad_exits) ? 1 : 0;
    munmap(sh, sizeof(*sh));
    return rc;
}
