/* harness: the part the lock benchmarks (zklock-bench, lease-bench) share: the options
 * they both take, P forked processes that start their threads, wait until every process
 * is ready, run together until an iteration count or a time limit, and are waited for;
 * the loop every benchmark thread runs around its lock and the critical section it
 * guards; and the report of the waits and the checks.
 *
 * A benchmark keeps its own MAP_SHARED struct, with a bench_state first (what the
 * harness counts) and its own counters after it; it brings its lock kind as a
 * bench_lock (acquire, token, check, release through one context per thread), its own
 * options as a bench_option table for bench_parse, and its own fields of the report
 * (bench_own). bench_parse and bench_main are called by the parent's main
 * thread, before any other thread exists; bench_loop by every benchmark thread of the
 * forked processes; the bench_sync functions from any thread of any of the processes. */
#ifndef BENCH_HARNESS_H
#define BENCH_HARNESS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---------------------------------------------------------------- options */

/* The options both benchmarks take (see either one's usage). */
typedef struct bench_opts {
    const char *name; /* --name; bench_parse fills in bench_KIND_PID_TIME */
    int procs, threads, seconds, iterations, hold_us, timeout_ms;
    int expect_all, no_lock, json;
} bench_opts;

#define BENCH_OPTS_INIT                                                                            \
    { .procs = 4, .threads = 4, .hold_us = 1000, .timeout_ms = 60000 }

/* One of a benchmark's own options (at most 16), for bench_parse: --NAME VALUE sets a
 * number (num), a text (text, pointing into argv), or one of the names in choices
 * (NULL-ended; *choice becomes its index, and any other value is bad usage). Exactly
 * one of num, text and choices is set. */
typedef struct bench_option {
    const char *name;
    int *num;
    const char **text;
    const char *const *choices;
    int *choice;
    /* Listed after --timeout-ms rather than before --procs, as in the usage: getopt
     * names the candidates of an ambiguous abbreviation in the table's order. */
    bool late;
} bench_option;

/* The usage lines of the shared options that mean the same in every benchmark, for a
 * benchmark's usage text: the run's length, --name and --expect-all, and the end. */
#define BENCH_USAGE_RUN                                                                            \
    "  --seconds D        stop starting acquisitions after D seconds\n"                            \
    "  --iterations N     acquisitions per thread (with neither: --seconds 10)\n"                  \
    "  --hold-us U        time inside the critical section (1000)\n"
#define BENCH_USAGE_NAME                                                                           \
    "  --name LOCK        lock name (bench_KIND_PID_TIME)\n"                                       \
    "  --expect-all       also check that every acquisition succeeded\n"
#define BENCH_USAGE_END                                                                            \
    "  --no-lock          negative control: no lock, so the checks must fail\n"                    \
    "  --json             one JSON object on stdout; notes on stderr\n"                            \
    "Exit status: 0 all checks hold, 1 a check failed, 2 bad usage or setup.\n"

/* Parses argv: the shared options into o, which it checks, and the benchmark's own (own,
 * ended by a zero entry), which the caller checks after it. Any bad option, value or
 * extra argument prints usage to stderr and returns 2; --help prints it to stdout and
 * returns 0; otherwise it returns -1 (go on). With neither --seconds nor --iterations
 * it sets --seconds 10, and without --name the name bench_KIND_PID_TIME, in name_buf
 * (name_cap bytes), with KIND from kind_name(), called after parsing. */
int bench_parse(int argc, char **argv, const bench_option *own, void (*usage)(FILE *out),
                const char *(*kind_name)(void), bench_opts *o, char *name_buf, size_t name_cap);

/* ---------------------------------------------------------------- the run */

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

#define BENCH_MAX_SAMPLES (1u << 21)
#define BENCH_MAX_CODES   16 /* failures are counted by -code; every lock code is above -16 */

/* What the harness counts, at the start of each benchmark's MAP_SHARED struct. */
typedef struct bench_state {
    bench_sync sync; /* first: ready, go, setup failures, time limit */
    atomic_int holders, max_holders;
    atomic_long overlaps, acquired, committed;
    atomic_long not_committed; /* check said the lock was no longer ours before the write */
    atomic_long fence_errors;
    atomic_long failures[BENCH_MAX_CODES];
    atomic_ulong nsamples;
    long counter;                        /* only ever written under the lock */
    int64_t last_token;                  /* likewise */
    uint32_t samples[BENCH_MAX_SAMPLES]; /* wait in acquire, microseconds */
} bench_state;

/* A lock kind, for one benchmark thread: ctx is that thread's (its handle and hold).
 * acquire returns 0 or the kind's negative code; check returns 0 while the lock is
 * still ours; release lets go of what acquire took. */
typedef struct bench_lock {
    int (*acquire)(void *ctx);
    int64_t (*token)(void *ctx);
    int (*check)(void *ctx);
    void (*release)(void *ctx);
} bench_lock;

/* A benchmark thread's life once its lock is ready: waits for `go`, then acquires (not
 * with --no-lock) and runs the critical section until bench_more says stop. The section
 * updates s->counter non-atomically (read, sleep hold_us, write), so any overlap loses
 * updates, gauges the holders, and commits only if check() says the lock is still
 * ours, as the service does before COMMIT; the fencing token must grow from one
 * committed holder to the next. A failed acquisition is counted by its code and
 * followed by 50 ms of sleep, so that a lock service that is down is not spun on. */
void bench_loop(bench_state *s, const bench_opts *o, const bench_lock *lk, void *ctx);

/* Maps size bytes of zeroed MAP_SHARED memory for the benchmark's struct; NULL (with
 * "prog: mmap: reason" on stderr) on failure. The caller unmaps it. */
void *bench_map(const char *prog, size_t size);

/* ---------------------------------------------------------------- the report */

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

/* The part of the report that is the benchmark's own, filled in after the run: the
 * lock kind, the text of a failure code, and its own fields, formatted: the heads go
 * after hold_us (text " lease_ms=10000", JSON "\"lease_ms\": 10000, ", or empty), the
 * tails at the end (text after "per acquisition: ", JSON the last fields, no comma). */
typedef struct bench_own {
    const char *kind;
    const char *(*strerror)(int code);
    char text_head[64], json_head[64], text_tail[128], json_tail[128];
} bench_own;

/* Runs the benchmark (bench_run with process) on s, the bench_state of the caller's
 * MAP_SHARED struct, then has own() fill in its part and prints the results (JSON or
 * text, see the usage of either benchmark) and the failed checks. Returns the exit
 * status: 0 if all checks hold, 1 if one failed, 2 if the run was void. */
int bench_main(const char *prog, bench_state *s, const bench_opts *o, int (*process)(void),
               void (*own)(bench_own *r));

#endif
