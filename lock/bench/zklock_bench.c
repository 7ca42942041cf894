/* zklock-bench: how fast one zklock changes hands, fair queue against herd.
 *
 *   zklock-bench --zk HOSTS --kind fair|herd --procs P --threads T --seconds D
 *                [--hold-us N] [--name LOCK] [--json]
 *
 * P forked processes (one zklock session each) run T threads that take the same
 * lock again and again for D seconds, hold it N microseconds (default 1000) and
 * release it. Reported: acquisitions and acquisitions/s, overlaps (two holders at
 * once, seen through a gauge in shared memory; must be 0), the mean, p50 and p99
 * of the wait in zklock_acquire, and ZooKeeper calls and node-watch events per
 * acquisition, from the sessions' counters. It measures; it asserts nothing about
 * timing. Exit status 1 if there was an overlap or the shared counter lost an
 * update, 2 on bad usage or setup failure. */
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

#include "zklock.h"

#define MAX_SAMPLES (1u << 21)

typedef struct bench_shared {
    atomic_int ready;
    atomic_int go;
    atomic_int holders;
    atomic_long overlaps;
    atomic_long acquisitions;
    atomic_long failures;
    atomic_long setup_failures;
    atomic_ulong nsamples;
    atomic_ulong watch_events, op_create, op_delete, op_children, op_data;
    long counter; /* written only under the lock */
    int64_t end_us;
    uint32_t samples[MAX_SAMPLES]; /* wait in zklock_acquire, microseconds */
} bench_shared;

static struct {
    const char *hosts, *name;
    zklock_kind kind;
    int procs, threads, seconds, hold_us, json;
} opt = {.procs = 4, .threads = 4, .seconds = 10, .hold_us = 1000};

static bench_shared *sh;
static zklock_session *sess;

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void *bench_thread(void *arg) {
    (void)arg;
    while (!atomic_load(&sh->go))
        usleep(1000);
    while (now_us() < sh->end_us) {
        zklock_hold *h = NULL;
        int64_t t0 = now_us();
        int rc = zklock_acquire(sess, opt.name, opt.kind, 30000, &h);
        int64_t waited = now_us() - t0;
        if (rc != ZKLOCK_OK) {
            atomic_fetch_add(&sh->failures, 1);
            continue;
        }
        if (atomic_fetch_add(&sh->holders, 1) != 0) atomic_fetch_add(&sh->overlaps, 1);
        long v = sh->counter;
        if (opt.hold_us > 0) usleep((useconds_t)opt.hold_us);
        sh->counter = v + 1;
        atomic_fetch_sub(&sh->holders, 1);
        zklock_release(h);
        atomic_fetch_add(&sh->acquisitions, 1);
        unsigned long i = atomic_fetch_add(&sh->nsamples, 1);
        if (i < MAX_SAMPLES) sh->samples[i] = waited > UINT32_MAX ? UINT32_MAX : (uint32_t)waited;
    }
    return NULL;
}

static int bench_process(void) {
    zklock_session_config cfg = {.hosts = opt.hosts, .connect_timeout_ms = 10000};
    int rc = zklock_session_new(&cfg, &sess);
    if (rc != ZKLOCK_OK) {
        fprintf(stderr, "zklock-bench: session: %s\n", zklock_strerror(rc));
        atomic_fetch_add(&sh->setup_failures, 1);
        atomic_fetch_add(&sh->ready, 1);
        return 1;
    }
    pthread_t *t = calloc((size_t)opt.threads, sizeof(*t));
    if (!t) return 1;
    for (int i = 0; i < opt.threads; i++)
        pthread_create(&t[i], NULL, bench_thread, NULL);
    atomic_fetch_add(&sh->ready, 1);
    for (int i = 0; i < opt.threads; i++)
        pthread_join(t[i], NULL);
    zklock_stats st;
    zklock_get_stats(sess, &st);
    atomic_fetch_add(&sh->watch_events, st.watch_events);
    atomic_fetch_add(&sh->op_create, st.op_create);
    atomic_fetch_add(&sh->op_delete, st.op_delete);
    atomic_fetch_add(&sh->op_children, st.op_get_children);
    atomic_fetch_add(&sh->op_data, st.op_get_data);
    zklock_session_free(sess);
    free(t);
    return 0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void usage(void) {
    fprintf(stderr, "usage: zklock-bench --zk HOSTS --kind fair|herd --procs P --threads T "
                    "--seconds D [--hold-us N] [--name LOCK] [--json]\n");
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {
        {"zk", required_argument, 0, 'z'},      {"kind", required_argument, 0, 'k'},
        {"procs", required_argument, 0, 'p'},   {"threads", required_argument, 0, 't'},
        {"seconds", required_argument, 0, 's'}, {"hold-us", required_argument, 0, 'u'},
        {"name", required_argument, 0, 'n'},    {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
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
                usage();
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
        case 'u':
            opt.hold_us = atoi(optarg);
            break;
        case 'n':
            opt.name = optarg;
            break;
        case 'j':
            opt.json = 1;
            break;
        default:
            usage();
            return c == 'h' ? 0 : 2;
        }
    }
    if (!opt.hosts || opt.procs < 1 || opt.threads < 1 || opt.seconds < 1 || opt.hold_us < 0) {
        usage();
        return 2;
    }
    char name[96];
    if (!opt.name) {
        snprintf(name, sizeof(name), "bench_%s_%ld", opt.kind == ZKLOCK_HERD ? "herd" : "fair",
                 (long)getpid());
        opt.name = name;
    }

    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("zklock-bench: mmap");
        return 2;
    }
    pid_t *pids = calloc((size_t)opt.procs, sizeof(*pids));
    if (!pids) return 2;
    for (int i = 0; i < opt.procs; i++) {
        fflush(NULL);
        pids[i] = fork();
        if (pids[i] < 0) {
            perror("zklock-bench: fork");
            return 2;
        }
        if (pids[i] == 0) _exit(bench_process());
    }
    /* Start everyone together, once every session is connected. */
    while (atomic_load(&sh->ready) < opt.procs)
        usleep(1000);
    int64_t start = now_us();
    sh->end_us = start + (int64_t)opt.seconds * 1000000;
    atomic_store(&sh->go, 1);
    for (int i = 0; i < opt.procs; i++)
        waitpid(pids[i], NULL, 0);
    double elapsed = (double)(now_us() - start) / 1e6;
    free(pids);
    if (atomic_load(&sh->setup_failures) > 0) return 2;

    long acq = atomic_load(&sh->acquisitions);
    unsigned long n = atomic_load(&sh->nsamples);
    if (n > MAX_SAMPLES) n = MAX_SAMPLES;
    double mean = 0, p50 = 0, p99 = 0, max = 0;
    if (n > 0) {
        qsort(sh->samples, n, sizeof(sh->samples[0]), cmp_u32);
        double sum = 0;
        for (unsigned long i = 0; i < n; i++)
            sum += sh->samples[i];
        mean = sum / (double)n / 1000.0;
        p50 = sh->samples[n / 2] / 1000.0;
        p99 = sh->samples[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1000.0;
        max = sh->samples[n - 1] / 1000.0;
    }
    double per = acq > 0 ? 1.0 / (double)acq : 0;
    double rate = (double)acq / elapsed;
    long overlaps = atomic_load(&sh->overlaps), failures = atomic_load(&sh->failures);
    int counter_ok = sh->counter == acq;
    double wev = (double)atomic_load(&sh->watch_events) * per;
    double ops = (double)(atomic_load(&sh->op_create) + atomic_load(&sh->op_delete) +
                          atomic_load(&sh->op_children) + atomic_load(&sh->op_data)) *
                 per;

    if (opt.json) {
        printf("{\"kind\": \"%s\", \"procs\": %d, \"threads\": %d, \"seconds\": %.2f, "
               "\"hold_us\": %d, \"acquisitions\": %ld, \"acquisitions_per_s\": %.1f, "
               "\"overlaps\": %ld, \"failures\": %ld, \"counter_ok\": %s, "
               "\"wait_ms_mean\": %.3f, \"wait_ms_p50\": %.3f, \"wait_ms_p99\": %.3f, "
               "\"wait_ms_max\": %.3f, \"watch_events_per_acq\": %.3f, "
               "\"zk_calls_per_acq\": %.3f}\n",
               opt.kind == ZKLOCK_HERD ? "herd" : "fair", opt.procs, opt.threads, elapsed,
               opt.hold_us, acq, rate, overlaps, failures, counter_ok ? "true" : "false", mean, p50,
               p99, max, wev, ops);
    } else {
        printf("kind=%s procs=%d threads=%d seconds=%.2f hold_us=%d lock=%s\n",
               opt.kind == ZKLOCK_HERD ? "herd" : "fair", opt.procs, opt.threads, elapsed,
               opt.hold_us, opt.name);
        printf("acquisitions=%ld (%.1f/s) overlaps=%ld failures=%ld counter_ok=%s\n", acq, rate,
               overlaps, failures, counter_ok ? "yes" : "NO");
        printf("wait ms: mean=%.3f p50=%.3f p99=%.3f max=%.3f\n", mean, p50, p99, max);
        printf("per acquisition: watch_events=%.3f zk_calls=%.3f\n", wev, ops);
    }
    return overlaps == 0 && counter_ok ? 0 : 1;
}
