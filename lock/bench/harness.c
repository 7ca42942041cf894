/* harness.c: what the lock benchmarks share: options, the fork-and-start harness, the
 * benchmark thread's loop and the report (see harness.h). */
#include "harness.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- options */

/* The shared options that take a number, in the order of bench_parse's nums[], and
 * those that take none, in the order of its flags[]. The option table is built in the
 * order of the usage texts: own options, these numbers, late own options, --name, the
 * flags, --help. */
static const char *const bench_num_names[] = {"procs",      "threads", "seconds",
                                              "iterations", "hold-us", "timeout-ms"};
static const char *const bench_flag_names[] = {"expect-all", "no-lock", "json"};

#define N_NUMS    (sizeof(bench_num_names) / sizeof(bench_num_names[0]))
#define N_FLAGS   (sizeof(bench_flag_names) / sizeof(bench_flag_names[0]))
#define N_OWN_MAX 16
#define VAL_NUM   256 /* getopt's value for nums[i] is VAL_NUM + i, for own[i] VAL_OWN + i */
#define VAL_OWN   512
#define VAL_NAME  'n'
#define VAL_HELP  'h'

/* Stores arg in own option d; -1 if it is not one of d's choices. */
static int bench_set_own(const bench_option *d, const char *arg) {
    if (d->num) {
        *d->num = atoi(arg);
    } else if (d->text) {
        *d->text = arg;
    } else {
        int i = 0;
        while (d->choices[i] && strcmp(arg, d->choices[i]) != 0)
            i++;
        if (!d->choices[i]) return -1;
        *d->choice = i;
    }
    return 0;
}

int bench_parse(int argc, char **argv, const bench_option *own, void (*usage)(FILE *out),
                const char *(*kind_name)(void), bench_opts *o, char *name_buf, size_t name_cap) {
    int *nums[N_NUMS] = {&o->procs,      &o->threads, &o->seconds,
                         &o->iterations, &o->hold_us, &o->timeout_ms};
    int *flags[N_FLAGS] = {&o->expect_all, &o->no_lock, &o->json};
    struct option all[N_OWN_MAX + N_NUMS + N_FLAGS + 3];
    size_t n = 0, n_own = 0;
    while (n_own < N_OWN_MAX && own[n_own].name)
        n_own++;
    for (size_t i = 0; i < n_own; i++)
        if (!own[i].late)
            all[n++] = (struct option){own[i].name, required_argument, NULL, VAL_OWN + (int)i};
    for (size_t i = 0; i < N_NUMS; i++)
        all[n++] = (struct option){bench_num_names[i], required_argument, NULL, VAL_NUM + (int)i};
    for (size_t i = 0; i < n_own; i++)
        if (own[i].late)
            all[n++] = (struct option){own[i].name, required_argument, NULL, VAL_OWN + (int)i};
    all[n++] = (struct option){"name", required_argument, NULL, VAL_NAME};
    for (size_t i = 0; i < N_FLAGS; i++)
        all[n++] = (struct option){bench_flag_names[i], no_argument, flags[i], 1};
    all[n++] = (struct option){"help", no_argument, NULL, VAL_HELP};
    all[n] = (struct option){0};

    int c;
    while ((c = getopt_long(argc, argv, "", all, NULL)) != -1) {
        if (c == VAL_HELP) {
            usage(stdout);
            return 0;
        }
        if (c == 0) continue; /* a flag: getopt has set it */
        if (c == VAL_NAME) {
            o->name = optarg;
        } else if (c >= VAL_NUM && c < VAL_NUM + (int)N_NUMS) {
            *nums[c - VAL_NUM] = atoi(optarg);
        } else if (c < VAL_OWN || c >= VAL_OWN + (int)n_own ||
                   bench_set_own(&own[c - VAL_OWN], optarg) != 0) {
            /* '?': an unknown option or a missing value, which getopt has named. */
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || o->procs < 1 || o->threads < 1 || o->seconds < 0 || o->iterations < 0 ||
        o->hold_us < 0 || (o->expect_all && !o->iterations)) {
        usage(stderr);
        return 2;
    }
    if (!o->seconds && !o->iterations) o->seconds = 10;
    if (!o->name) {
        snprintf(name_buf, name_cap, "bench_%s_%ld_%lld", kind_name(), (long)getpid(),
                 (long long)time(NULL));
        o->name = name_buf;
    }
    return -1;
}

/* ---------------------------------------------------------------- the run */

int64_t bench_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int bench_run(const char *prog, bench_sync *s, int procs, int seconds, int (*process)(void),
              double *elapsed_s, int *bad_exits) {
    int forked = 0, bad = 0, rc = -1;
    pid_t *pids = calloc((size_t)procs, sizeof(*pids));
    if (!pids) return -1;
    for (; forked < procs; forked++) {
        fflush(NULL);
        pids[forked] = fork();
        if (pids[forked] < 0) {
            fprintf(stderr, "%s: fork: %s\n", prog, strerror(errno));
            atomic_fetch_add(&s->setup_failures, 1);
            break;
        }
        if (pids[forked] == 0) _exit(process());
    }
    /* Start everyone together, once every process has its connections and threads. */
    while (atomic_load(&s->ready) < forked)
        usleep(1000);
    int64_t start = bench_now_us();
    if (seconds) s->end_us = start + (int64_t)seconds * 1000000;
    atomic_store(&s->go, 1);
    for (int i = 0; i < forked; i++) {
        int st = 0;
        if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
    }
    if (atomic_load(&s->setup_failures) == 0) {
        *elapsed_s = (double)(bench_now_us() - start) / 1e6;
        *bad_exits = bad;
        rc = 0;
    }
    free(pids);
    return rc;
}

bool bench_wait_go(bench_sync *s) {
    while (!atomic_load(&s->go))
        usleep(1000);
    /* If any process could not start, the run is void: do not load the server. */
    return atomic_load(&s->setup_failures) == 0;
}

bool bench_more(const bench_sync *s, int i, int iterations) {
    return (!iterations || i < iterations) && (!s->end_us || bench_now_us() < s->end_us);
}

/* One critical section (see bench_loop). */
static void bench_section(bench_state *s, const bench_opts *o, const bench_lock *lk, void *ctx) {
    int inside = atomic_fetch_add(&s->holders, 1) + 1;
    if (inside > 1) atomic_fetch_add(&s->overlaps, 1);
    int mx = atomic_load(&s->max_holders);
    while (inside > mx && !atomic_compare_exchange_weak(&s->max_holders, &mx, inside))
        ;
    int64_t token = o->no_lock ? s->last_token + 1 : lk->token(ctx);
    long v = s->counter;
    if (o->hold_us > 0) usleep((useconds_t)o->hold_us);
    if (o->no_lock || lk->check(ctx) == 0) {
        if (token <= s->last_token) atomic_fetch_add(&s->fence_errors, 1);
        s->counter = v + 1;
        s->last_token = token;
        atomic_fetch_add(&s->committed, 1);
    } else {
        atomic_fetch_add(&s->not_committed, 1);
    }
    atomic_fetch_sub(&s->holders, 1);
}

void bench_loop(bench_state *s, const bench_opts *o, const bench_lock *lk, void *ctx) {
    if (!bench_wait_go(&s->sync)) return;
    for (int i = 0; bench_more(&s->sync, i, o->iterations); i++) {
        int64_t t0 = bench_now_us();
        int rc = o->no_lock ? 0 : lk->acquire(ctx);
        int64_t waited = bench_now_us() - t0;
        if (rc != 0) {
            atomic_fetch_add(&s->failures[-rc % BENCH_MAX_CODES], 1);
            usleep(50000); /* while the lock service is down, do not spin on it */
            continue;
        }
        atomic_fetch_add(&s->acquired, 1);
        unsigned long n = atomic_fetch_add(&s->nsamples, 1);
        if (n < BENCH_MAX_SAMPLES)
            s->samples[n] = waited > UINT32_MAX ? UINT32_MAX : (uint32_t)waited;
        bench_section(s, o, lk, ctx);
        if (!o->no_lock) lk->release(ctx);
    }
}

void *bench_map(const char *prog, size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) return p;
    fprintf(stderr, "%s: mmap: %s\n", prog, strerror(errno));
    return NULL;
}

/* ---------------------------------------------------------------- the report */

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void bench_wait_stats(uint32_t *samples, unsigned long n, double *mean, double *p50, double *p99,
                      double *max) {
    *mean = *p50 = *p99 = *max = 0;
    if (n == 0) return;
    qsort(samples, n, sizeof(samples[0]), cmp_u32);
    double sum = 0;
    for (unsigned long i = 0; i < n; i++)
        sum += samples[i];
    *mean = sum / (double)n / 1000.0;
    *p50 = samples[n / 2] / 1000.0;
    *p99 = samples[(n * 99) / 100] / 1000.0;
    *max = samples[n - 1] / 1000.0;
}

static int bench_check(FILE *out, int ok, const char *what, long expected, long actual) {
    if (!ok) fprintf(out, "FAIL: %s: expected %ld, got %ld\n", what, expected, actual);
    return !ok;
}

int bench_checks(FILE *out, const bench_outcome *o) {
    int failed = 0;
    failed += bench_check(out, o->bad_exits == 0, "processes that failed", 0, o->bad_exits);
    failed += bench_check(out, o->overlaps == 0, "overlaps", 0, o->overlaps);
    failed += bench_check(out, o->max_holders <= 1, "max holders (at most)", 1, o->max_holders);
    failed += bench_check(out, o->counter == o->committed, "counter (= committed sections)",
                          o->committed, o->counter);
    failed += bench_check(out, o->fence_errors == 0, "fencing tokens that did not grow", 0,
                          o->fence_errors);
    failed += bench_check(out, o->committed > 0, "committed sections (at least)", 1, o->committed);
    if (o->all > 0) {
        failed += bench_check(out, o->failures == 0, "failed acquisitions", 0, o->failures);
        failed +=
            bench_check(out, o->counter == o->all, "counter (= all sections)", o->all, o->counter);
    }
    return failed;
}

/* Prints the results (JSON or text) and the failed checks; returns how many failed. */
static int bench_report(bench_state *s, const bench_opts *o, const bench_own *own, double elapsed,
                        int bad_exits) {
    long acq = atomic_load(&s->acquired), committed = atomic_load(&s->committed);
    long overlaps = atomic_load(&s->overlaps), failures = 0;
    for (int i = 1; i < BENCH_MAX_CODES; i++)
        failures += atomic_load(&s->failures[i]);
    unsigned long n = atomic_load(&s->nsamples);
    if (n > BENCH_MAX_SAMPLES) n = BENCH_MAX_SAMPLES;
    double mean, p50, p99, max;
    bench_wait_stats(s->samples, n, &mean, &p50, &p99, &max);
    double rate = elapsed > 0 ? (double)acq / elapsed : 0;
    int counter_ok = s->counter == committed;

    if (o->json) {
        printf("{\"kind\": \"%s\", \"no_lock\": %s, \"procs\": %d, \"threads\": %d, "
               "\"seconds\": %.2f, \"hold_us\": %d, %s\"acquisitions\": %ld, "
               "\"acquisitions_per_s\": %.1f, \"committed\": %ld, \"not_committed\": %ld, "
               "\"counter\": %ld, \"counter_ok\": %s, \"overlaps\": %ld, \"max_holders\": %d, "
               "\"fence_errors\": %ld, \"failures\": %ld, \"bad_exits\": %d, "
               "\"wait_ms_mean\": %.3f, \"wait_ms_p50\": %.3f, \"wait_ms_p99\": %.3f, "
               "\"wait_ms_max\": %.3f, %s}\n",
               own->kind, o->no_lock ? "true" : "false", o->procs, o->threads, elapsed, o->hold_us,
               own->json_head, acq, rate, committed, atomic_load(&s->not_committed), s->counter,
               counter_ok ? "true" : "false", overlaps, atomic_load(&s->max_holders),
               atomic_load(&s->fence_errors), failures, bad_exits, mean, p50, p99, max,
               own->json_tail);
    } else {
        printf("kind=%s%s procs=%d threads=%d seconds=%.2f hold_us=%d%s lock=%s\n", own->kind,
               o->no_lock ? " (no lock)" : "", o->procs, o->threads, elapsed, o->hold_us,
               own->text_head, o->name);
        printf("acquisitions=%ld (%.1f/s) committed=%ld not_committed=%ld counter=%ld "
               "failures=%ld\n",
               acq, rate, committed, atomic_load(&s->not_committed), s->counter, failures);
        printf("overlaps=%ld max_holders=%d fence_errors=%ld bad_exits=%d\n", overlaps,
               atomic_load(&s->max_holders), atomic_load(&s->fence_errors), bad_exits);
        printf("wait ms: mean=%.3f p50=%.3f p99=%.3f max=%.3f\n", mean, p50, p99, max);
        printf("per acquisition: %s\n", own->text_tail);
    }

    /* With --json, stdout holds the JSON only; the notes go to stderr. */
    FILE *notes = o->json ? stderr : stdout;
    for (int i = 1; i < BENCH_MAX_CODES; i++) {
        long k = atomic_load(&s->failures[i]);
        if (k) fprintf(notes, "failures: %ld x %s\n", k, own->strerror(-i));
    }
    bench_outcome out = {.bad_exits = bad_exits,
                         .overlaps = overlaps,
                         .max_holders = atomic_load(&s->max_holders),
                         .committed = committed,
                         .counter = s->counter,
                         .fence_errors = atomic_load(&s->fence_errors),
                         .failures = failures,
                         .all = o->expect_all ? (long)o->procs * o->threads * o->iterations : 0};
    int failed = bench_checks(notes, &out);
    /* The "ok" line is for people and logs; JSON readers have the fields. */
    if (!failed && !o->json) printf("ok\n");
    return failed;
}

int bench_main(const char *prog, bench_state *s, const bench_opts *o, int (*process)(void),
               void (*own)(bench_own *r)) {
    int bad_exits = 0;
    double elapsed = 0;
    if (bench_run(prog, &s->sync, o->procs, o->seconds, process, &elapsed, &bad_exits) != 0)
        return 2;
    bench_own r = {0};
    own(&r);
    return bench_report(s, o, &r, elapsed, bad_exits) ? 1 : 0;
}
