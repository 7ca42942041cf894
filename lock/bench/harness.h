/* harness: the part the lock benchmarks (zklock-bench, lease-bench) share: P forked
 * processes that start their threads, wait until every process is ready, run together
 * until an iteration count or a time limit, and are waited for; and the summary of the
 * waits and the checks they print.
 *
 * Each benchmark keeps its own MAP_SHARED struct (its counters differ by lock kind) and
 * puts a bench_sync in it, which bench_run and the threads use to start together.
 * bench_run is called once, by the parent, before any thread exists; the bench_sync
 * functions may be called from any thread of any of the processes. */
#ifndef BENCH_HARNESS_H
#define BENCH_HARNESS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct bench_sync {
    atomic_int ready;          /* processes that have started their threads, or given up */
    atomic_int go;             /* set by bench_run once every process is ready */
    atomic_int setup_failures; /* a process or thread that could not start: the run is void */
    int64_t end_us;            /* 0 = no time limit; written before `go` is set */
} bench_sync;

/* CLOCK_MONOTONIC in microseconds. */
int64_t bench_now_us(void);

/* Forks procs processes, each running process() and exiting with its result (0 = it
 * ran its threads; it must add 1 to s->ready once they are started, or it gave up).
 * Once all are ready it sets the time limit (seconds > 0) and `go`, then waits for every
 * process. s lives in MAP_SHARED memory of the caller's. Returns 0 with *elapsed_s (from
 * `go` to the last exit) and *bad_exits (processes that did not exit 0) set, or -1 if
 * the run is void (a fork failed or a process could not start its threads); prog names
 * the program in messages on stderr. */
int bench_run(const char *prog, bench_sync *s, int procs, int seconds, int (*process)(void),
              double *elapsed_s, int *bad_exits);

/* For a benchmark thread: waits for `go`. False if the run is void (then do nothing). */
bool bench_wait_go(bench_sync *s);

/* For a benchmark thread's loop: may iteration i (from 0) start? iterations 0 = no
 * count, only the time limit. */
bool bench_more(const bench_sync *s, int i, int iterations);

/* The waits in ms over n samples in microseconds (sorted in place): mean, p50, p99 and
 * max; all 0 for n == 0. */
void bench_wait_stats(uint32_t *samples, unsigned long n, double *mean, double *p50, double *p99,
                      double *max);

/* What a run came to, for the checks every lock benchmark makes. */
typedef struct bench_outcome {
    int bad_exits;     /* processes that did not exit 0 */
    long overlaps;     /* critical sections entered while another was inside */
    int max_holders;   /* the most holders at once */
    long committed;    /* critical sections whose write was committed */
    long counter;      /* the shared counter those sections incremented */
    long fence_errors; /* fencing tokens that did not grow */
    long failures;     /* failed acquisitions */
    long all;          /* > 0: every one of these acquisitions must have succeeded */
} bench_outcome;

/* Prints "FAIL: what: expected E, got A" to out for every check o fails (no process
 * failed, no overlap, at most one holder, counter = committed sections, tokens grew, at
 * least one section; with all > 0 also no failed acquisition and counter = all) and
 * returns how many failed. */
int bench_checks(FILE *out, const bench_outcome *o);

#endif
