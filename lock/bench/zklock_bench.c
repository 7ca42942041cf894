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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "zklock.h"

typedef struct bench_shared {
    bench_state b; /* first: what the harness counts */
    atomic_ulong watch_events, zk_calls;
} bench_shared;

static struct {
    bench_opts b;
    const char *hosts;
    int kind; /* a zklock_kind */
    int session_ms;
} opt = {.b = BENCH_OPTS_INIT};

static bench_shared *sh;
static zklock_session *sess;

/* The zklock of one benchmark thread: the process's session, and its hold. */
static int zk_acquire(void *ctx) {
    return zklock_acquire(sess, opt.b.name, (zklock_kind)opt.kind, opt.b.timeout_ms,
                          (zklock_hold **)ctx);
}

static int64_t zk_token(void *ctx) {
    return zklock_token(*(zklock_hold **)ctx);
}

static int zk_check(void *ctx) {
    return zklock_check(*(zklock_hold **)ctx);
}

static void zk_release(void *ctx) {
    zklock_hold **h = ctx;
    if (*h) zklock_release(*h);
    *h = NULL;
}

static const bench_lock zk_lock = {zk_acquire, zk_token, zk_check, zk_release};

static void *bench_thread(void *arg) {
    (void)arg;
    zklock_hold *h = NULL;
    bench_loop(&sh->b, &opt.b, &zk_lock, &h);
    return NULL;
}

/* The body of one forked process; its exit status is 0 if it ran its threads. */
static int bench_process(void) {
    zklock_session_config cfg = {
        .hosts = opt.hosts, .session_timeout_ms = opt.session_ms, .connect_timeout_ms = 10000};
    pthread_t *t = NULL;
    int started = 0;
    int rc = zklock_session_new(&cfg, &sess);
    if (rc != LOCK_OK) {
        fprintf(stderr, "zklock-bench: session on %s: %s\n", opt.hosts, zklock_strerror(rc));
        goto out;
    }
    t = calloc((size_t)opt.b.threads, sizeof(*t));
    if (!t) goto out;
    while (started < opt.b.threads && pthread_create(&t[started], NULL, bench_thread, NULL) == 0)
        started++;

out:
    if (started < opt.b.threads) atomic_fetch_add(&sh->b.sync.setup_failures, 1);
    atomic_fetch_add(&sh->b.sync.ready, 1);
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
    return started == opt.b.threads ? 0 : 1;
}

static const char *kind_name(void) {
    return opt.kind == ZKLOCK_HERD ? "herd" : "fair";
}

/* zklock-bench's part of the report: ZooKeeper calls and watch events per acquisition. */
static void own_report(bench_own *r) {
    long acq = atomic_load(&sh->b.acquired);
    double per = acq > 0 ? 1.0 / (double)acq : 0;
    double wev = (double)atomic_load(&sh->watch_events) * per;
    double ops = (double)atomic_load(&sh->zk_calls) * per;
    r->kind = kind_name();
    r->strerror = zklock_strerror;
    snprintf(r->text_tail, sizeof(r->text_tail), "watch_events=%.3f zk_calls=%.3f", wev, ops);
    snprintf(r->json_tail, sizeof(r->json_tail),
             "\"watch_events_per_acq\": %.3f, \"zk_calls_per_acq\": %.3f", wev, ops);
}

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: zklock-bench --zk HOSTS [options]\n"
        "  --kind fair|herd   lock recipe (fair)\n"
        "  --procs P          processes, one zklock session each (4)\n"
        "  --threads T        threads per process (4)\n" BENCH_USAGE_RUN
        "  --timeout-ms MS    zklock_acquire timeout (60000)\n"
        "  --session-ms MS    ZooKeeper session timeout (0: zklock's default)\n" BENCH_USAGE_NAME
        "                     (needs --iterations)\n" BENCH_USAGE_END);
}

/* The --kind names, by zklock_kind. */
static const char *const kinds[] = {"fair", "herd", NULL};

int main(int argc, char **argv) {
    const bench_option own[] = {{.name = "zk", .text = &opt.hosts},
                                {.name = "kind", .choices = kinds, .choice = &opt.kind},
                                {.name = "session-ms", .num = &opt.session_ms, .late = true},
                                {0}};
    char name[96];
    int rc = bench_parse(argc, argv, own, usage, kind_name, &opt.b, name, sizeof(name));
    if (rc >= 0) return rc;
    if (!opt.hosts || opt.session_ms < 0) {
        usage(stderr);
        return 2;
    }
    if (!(sh = bench_map("zklock-bench", sizeof(*sh)))) return 2;
    rc = bench_main("zklock-bench", &sh->b, &opt.b, bench_process, own_report);
    munmap(sh, sizeof(*sh));
    return rc;
}
