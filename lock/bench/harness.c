/* harness.c: the lock benchmarks' shared fork-and-start harness (see harness.h). */
#include "harness.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
