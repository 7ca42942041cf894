/* lock_hammer: proves mutual exclusion across processes. P forked processes, each
 * with its own zklock session, run T threads that take one lock N times each. In
 * the critical section a counter in MAP_SHARED memory is updated non-atomically
 * (read, sleep, write), so any overlap would lose updates, and an atomic gauge of
 * holders records whether two were ever inside at once. The write is committed
 * only if zklock_check says the lock is still ours, as a service would do before
 * COMMIT; fencing tokens must grow from one committed holder to the next.
 *
 *   lock_hammer --zk HOSTS [--kind fair|herd] [--procs P] [--threads T]
 *               [--iterations N] [--hold-us U] [--timeout-ms MS] [--session-ms MS]
 *               [--seconds D] [--name NAME] [--expect-all] [--no-lock]
 *
 * Exit 0 when: no overlap, counter == committed sections, tokens grew, every
 * process finished, at least one section committed, and (with --expect-all)
 * every acquisition succeeded. --seconds stops starting new acquisitions after D
 * seconds. --no-lock skips the lock (the negative control: it must fail). Used by
 * the lock_mutex_* and lock_zk_restart tests. */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lock_test.h"

typedef struct shared {
    atomic_int holders;
    atomic_int max_holders;
    atomic_long overlaps;
    atomic_long acquired;
    atomic_long committed;
    atomic_long not_committed; /* check said SUSPECT or LOST before the write */
    atomic_long fence_errors;
    atomic_long failures[16]; /* by -code */
    long counter;             /* only ever written under the lock */
    int64_t last_token;       /* likewise */
} shared;

static struct {
    const char *hosts, *name;
    zklock_kind kind;
    int procs, threads, iterations, hold_us, timeout_ms, session_ms, seconds, expect_all, no_lock;
} opt = {.procs = 3, .threads = 3, .iterations = 30, .hold_us = 1000, .timeout_ms = 60000};

static shared *sh;
static zklock_session *sess;
static int64_t end_ms;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < opt.iterations && (!end_ms || lt_now_ms() < end_ms); i++) {
        zklock_hold *h = NULL;
        int rc =
            opt.no_lock ? ZKLOCK_OK : zklock_acquire(sess, opt.name, opt.kind, opt.timeout_ms, &h);
        if (rc != ZKLOCK_OK) {
            atomic_fetch_add(&sh->failures[-rc & 15], 1);
            lt_sleep_ms(50);
            continue;
        }
        atomic_fetch_add(&sh->acquired, 1);
        int now = atomic_fetch_add(&sh->holders, 1) + 1;
        if (now > 1) atomic_fetch_add(&sh->overlaps, 1);
        int mx = atomic_load(&sh->max_holders);
        while (now > mx && !atomic_compare_exchange_weak(&sh->max_holders, &mx, now))
            ;
        int64_t token = opt.no_lock ? sh->last_token + 1 : zklock_token(h);
        long v = sh->counter;
        usleep((useconds_t)opt.hold_us);
        if (opt.no_lock || zklock_check(h) == ZKLOCK_OK) {
            if (token <= sh->last_token) atomic_fetch_add(&sh->fence_errors, 1);
            sh->counter = v + 1;
            sh->last_token = token;
            atomic_fetch_add(&sh->committed, 1);
        } else {
            atomic_fetch_add(&sh->not_committed, 1);
        }
        atomic_fetch_sub(&sh->holders, 1);
        if (h) zklock_release(h);
    }
    return NULL;
}

static int run_process(void) {
    sess = lt_session(opt.hosts, opt.session_ms);
    pthread_t *t = calloc((size_t)opt.threads, sizeof(*t));
    CHECK(t != NULL);
    for (int i = 0; i < opt.threads; i++)
        CHECK(pthread_create(&t[i], NULL, worker, NULL) == 0);
    for (int i = 0; i < opt.threads; i++)
        pthread_join(t[i], NULL);
    zklock_session_free(sess);
    free(t);
    return 0;
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {{"zk", required_argument, 0, 'z'},
                                             {"kind", required_argument, 0, 'k'},
                                             {"procs", required_argument, 0, 'p'},
                                             {"threads", required_argument, 0, 't'},
                                             {"iterations", required_argument, 0, 'n'},
                                             {"hold-us", required_argument, 0, 'u'},
                                             {"timeout-ms", required_argument, 0, 'o'},
                                             {"session-ms", required_argument, 0, 's'},
                                             {"name", required_argument, 0, 'N'},
                                             {"expect-all", no_argument, 0, 'a'},
                                             {"seconds", required_argument, 0, 'S'},
                                             {"no-lock", no_argument, 0, 'L'},
                                             {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'z':
            opt.hosts = optarg;
            break;
        case 'k':
            opt.kind = strcmp(optarg, "herd") == 0 ? ZKLOCK_HERD : ZKLOCK_FAIR;
            break;
        case 'p':
            opt.procs = atoi(optarg);
            break;
        case 't':
            opt.threads = atoi(optarg);
            break;
        case 'n':
            opt.iterations = atoi(optarg);
            break;
        case 'u':
            opt.hold_us = atoi(optarg);
            break;
        case 'o':
            opt.timeout_ms = atoi(optarg);
            break;
        case 's':
            opt.session_ms = atoi(optarg);
            break;
        case 'N':
            opt.name = optarg;
            break;
        case 'a':
            opt.expect_all = 1;
            break;
        case 'S':
            opt.seconds = atoi(optarg);
            break;
        case 'L':
            opt.no_lock = 1;
            break;
        default:
            fprintf(stderr, "usage: see the comment at the top of lock_hammer.c\n");
            return 2;
        }
    }
    if (!opt.hosts) opt.hosts = lt_zk_hosts();
    if (!opt.name) opt.name = lt_lock_name(opt.kind == ZKLOCK_HERD ? "hammer_herd" : "hammer");

    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));

    if (opt.seconds > 0) end_ms = lt_now_ms() + opt.seconds * 1000L;
    pid_t *pids = calloc((size_t)opt.procs, sizeof(*pids));
    CHECK(pids != NULL);
    for (int i = 0; i < opt.procs; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) _exit(run_process());
    }
    int bad_exits = 0;
    for (int i = 0; i < opt.procs; i++) {
        int st = 0;
        waitpid(pids[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad_exits++;
    }
    free(pids);

    long failures = 0;
    printf("lock_hammer %s kind=%s procs=%d threads=%d iterations=%d\n", opt.name,
           opt.kind == ZKLOCK_HERD ? "herd" : "fair", opt.procs, opt.threads, opt.iterations);
    printf("acquired=%ld committed=%ld not_committed=%ld counter=%ld overlaps=%ld "
           "max_holders=%d fence_errors=%ld bad_exits=%d\n",
           atomic_load(&sh->acquired), atomic_load(&sh->committed), atomic_load(&sh->not_committed),
           sh->counter, atomic_load(&sh->overlaps), atomic_load(&sh->max_holders),
           atomic_load(&sh->fence_errors), bad_exits);
    for (int i = 1; i < 16; i++) {
        long n = atomic_load(&sh->failures[i]);
        failures += n;
        if (n) printf("failures: %ld x %s\n", n, zklock_strerror(-i));
    }
    fflush(stdout);

    CHECK_INT_EQ(0, bad_exits);
    CHECK_INT_EQ(0, atomic_load(&sh->overlaps));
    CHECK_INT_LE(atomic_load(&sh->max_holders), 1);
    CHECK_INT_EQ(atomic_load(&sh->committed), sh->counter);
    CHECK_INT_EQ(0, atomic_load(&sh->fence_errors));
    CHECK_INT_GT(atomic_load(&sh->committed), 0);
    if (opt.expect_all) {
        CHECK_INT_EQ(0, failures);
        CHECK_INT_EQ((long)opt.procs * opt.threads * opt.iterations, sh->counter);
    }
    printf("ok\n");
    return 0;
}
