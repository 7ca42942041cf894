/* lock_cache_pause_test: a cached hold is never handed out after the process may have
 * been paused past its session. A child process (the paused instance) holds a lock,
 * caches it for 60 s (zklock_release_cached) and waits on a pipe; it talks to ZooKeeper
 * through a fault proxy. The parent stops the child (SIGSTOP), cuts the proxy off
 * (blackhole: the child will not even hear of its connection's end), takes the same
 * lock from a session of its own (which it gets only once the child's session has
 * expired and its node is gone), releases it, and wakes the child (SIGCONT), whose next
 * acquisition of the lock comes at once. Its client has not heard from the server since
 * before the pause, so its view still says connected; the cached hold must not be handed
 * out all the same (no cache hit, and no LOCK_OK under the old, dead token). Three
 * rounds, each with a fresh child. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault_proxy.h"
#include "lock_test.h"

#define CHILD_SESSION_MS 2000

typedef struct child_report {
    int rc;         /* of the acquisition after the pause */
    int64_t token;  /* the cached hold's token (first report), the new one (second) */
    uint64_t hits;  /* cache hits of that acquisition */
    int release_rc; /* of zklock_release_cached (first report) */
} child_report;

static void put(int fd, const child_report *r) {
    if (write(fd, r, sizeof(*r)) != (ssize_t)sizeof(*r)) _exit(3);
}

static int get(int fd, child_report *r) {
    return read(fd, r, sizeof(*r)) == (ssize_t)sizeof(*r);
}

/* The paused instance. Reports twice on out: after caching, and after the pause. */
static void child_main(int in, int out, const char *name) {
    int port = 0;
    if (read(in, &port, sizeof(port)) != (ssize_t)sizeof(port)) _exit(3);
    char hosts[64];
    snprintf(hosts, sizeof(hosts), "127.0.0.1:%d", port);
    zklock_session *s = lt_session(hosts, CHILD_SESSION_MS);
    zklock_hold *h = NULL;
    child_report r = {.rc = zklock_acquire(s, name, ZKLOCK_FAIR, 10000, &h)};
    if (r.rc == LOCK_OK) {
        r.token = zklock_token(h);
        r.release_rc = zklock_release_cached(h, 60000);
    }
    put(out, &r);
    char go;
    if (read(in, &go, 1) != 1) _exit(3); /* stopped and woken in here */
    uint64_t hits = lt_stats(s).cache_hits;
    h = NULL;
    r = (child_report){.rc = zklock_acquire(s, name, ZKLOCK_FAIR, 3000, &h)};
    r.hits = lt_stats(s).cache_hits - hits;
    if (r.rc == LOCK_OK) {
        r.token = zklock_token(h);
        (void)zklock_release(h);
    }
    put(out, &r);
    if (read(in, &go, 1) != 1) _exit(3); /* the proxy is healed: the close can be sent */
    zklock_session_free(s);
    _exit(0);
}

static void one_round(const char *hosts, int upstream_port, int round) {
    char name[128];
    snprintf(name, sizeof(name), "%s_%d", lt_lock_name("cachepause"), round);
    int to_child[2], from_child[2];
    CHECK(pipe(to_child) == 0 && pipe(from_child) == 0);
    fflush(stdout);
    pid_t pid = fork(); /* before this round's threads: the child starts its own */
    CHECK(pid >= 0);
    if (pid == 0) {
        close(to_child[1]);
        close(from_child[0]);
        child_main(to_child[0], from_child[1], name);
    }
    close(to_child[0]);
    close(from_child[1]);

    fault_proxy *p = NULL;
    fault_proxy_config cfg = {.upstream_host = "127.0.0.1", .upstream_port = upstream_port};
    CHECK_INT_EQ(FAULT_PROXY_OK, fault_proxy_new(&cfg, &p));
    int port = fault_proxy_port(p);
    CHECK(write(to_child[1], &port, sizeof(port)) == (ssize_t)sizeof(port));
    child_report cached, after;
    CHECK(get(from_child[0], &cached));
    CHECK_INT_EQ(LOCK_OK, cached.rc);
    CHECK_INT_EQ(LOCK_OK, cached.release_rc);

    /* The pause: the child stops with its hold cached, and hears nothing more. */
    CHECK(kill(pid, SIGSTOP) == 0);
    int st = 0;
    CHECK(waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st));
    fault_proxy_blackhole(p, 1);
    /* Another instance gets the lock once the child's session has expired. */
    zklock_session *other = lt_session(hosts, 0);
    zklock_hold *oh = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(other, name, ZKLOCK_FAIR, 30000, &oh));
    CHECK_INT_GT(zklock_token(oh), cached.token);
    CHECK_INT_EQ(LOCK_OK, zklock_release(oh));
    zklock_session_free(other);

    /* Woken, the child asks for the lock at once. */
    CHECK(write(to_child[1], "g", 1) == 1);
    CHECK(kill(pid, SIGCONT) == 0);
    CHECK(get(from_child[0], &after));
    printf("round %d: after the pause: %s, %llu cache hits, token %lld (cached %lld)\n", round,
           zklock_strerror(after.rc), (unsigned long long)after.hits, (long long)after.token,
           (long long)cached.token);
    fault_proxy_blackhole(p, 0);
    CHECK(write(to_child[1], "g", 1) == 1);
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(to_child[1]);
    close(from_child[0]);
    fault_proxy_free(p);

    CHECK_INT_EQ(0, after.hits);
    if (after.rc == LOCK_OK && after.token == cached.token)
        CHECK_FAIL_("round %d: the cached hold of an expired session was handed out", round);
}

int main(void) {
    const char *hosts = lt_zk_hosts();
    const char *colon = strrchr(hosts, ':');
    CHECK(colon != NULL);
    int upstream_port = atoi(colon + 1);
    for (int round = 1; round <= 3; round++)
        one_round(hosts, upstream_port, round);
    printf("ok\n");
    return 0;
}
