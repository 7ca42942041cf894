/* lock_expiry_test: a holder whose session expires loses the lock, and learns it.
 * A forked child takes the lock with a 2000 ms session and is then stopped
 * (SIGSTOP) past its session timeout; the parent, waiting for the same lock, gets
 * it once the server expires the child's session. After SIGCONT the child's
 * zklock_check must say LOCK_LOST (it polls: it learns of the expiry when its
 * client reconnects), its release must say LOST too, and a new acquisition on the
 * same zklock_session (now on a new ZooKeeper session) must work, with a larger
 * fencing token than the parent's. The child reports over a pipe. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lock_test.h"

typedef struct report {
    int64_t token1;
    int check_after; /* zklock_check once LOST was seen (or the last value) */
    int release_rc;
    int reacquire_rc;
    int64_t token2;
    uint64_t lost_events, expirations;
} report;

static void child(const char *hosts, const char *name, int up, int down) {
    report r = {0};
    zklock_session *s = lt_session(hosts, 2000);
    zklock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(s, name, ZKLOCK_FAIR, 10000, &h));
    CHECK_INT_EQ(LOCK_OK, zklock_check(h));
    r.token1 = zklock_token(h);
    CHECK(write(up, &r, sizeof(r)) == sizeof(r));
    char go;
    CHECK(read(down, &go, 1) == 1); /* stopped and continued in here */

    r.check_after = zklock_check(h);
    for (int64_t end = lt_now_ms() + 30000; r.check_after != LOCK_LOST && lt_now_ms() < end;) {
        lt_sleep_ms(50);
        r.check_after = zklock_check(h);
    }
    r.release_rc = zklock_release(h);
    zklock_hold *h2 = NULL;
    r.reacquire_rc = zklock_acquire(s, name, ZKLOCK_FAIR, 30000, &h2);
    if (r.reacquire_rc == LOCK_OK) {
        r.token2 = zklock_token(h2);
        zklock_release(h2);
    }
    zklock_stats st;
    zklock_get_stats(s, &st);
    r.lost_events = st.lost_events;
    r.expirations = st.expirations;
    zklock_session_free(s);
    CHECK(write(up, &r, sizeof(r)) == sizeof(r));
    _exit(0);
}

int main(void) {
    const char *hosts = lt_zk_hosts();
    const char *name = lt_lock_name("expiry");
    int up[2], down[2];
    CHECK(pipe(up) == 0 && pipe(down) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) child(hosts, name, up[1], down[0]);

    report r;
    CHECK(read(up[0], &r, sizeof(r)) == sizeof(r));
    CHECK_INT_EQ(0, kill(pid, SIGSTOP));

    zklock_session *s = lt_session(hosts, 0);
    zklock_hold *h = NULL;
    int rc = zklock_acquire(s, name, ZKLOCK_FAIR, 60000, &h);
    if (rc != LOCK_OK) {
        kill(pid, SIGKILL);
        CHECK_FAIL_("parent acquire after the child's expiry: %s", zklock_strerror(rc));
    }
    int64_t parent_token = zklock_token(h);
    CHECK_INT_GT(parent_token, r.token1);
    CHECK_INT_EQ(LOCK_OK, zklock_check(h));
    CHECK_INT_EQ(LOCK_OK, zklock_release(h));

    CHECK_INT_EQ(0, kill(pid, SIGCONT));
    CHECK(write(down[1], "g", 1) == 1);
    CHECK(read(up[0], &r, sizeof(r)) == sizeof(r));
    int st = 0;
    waitpid(pid, &st, 0);
    printf("child: check=%s release=%s reacquire=%s token1=%lld parent=%lld token2=%lld "
           "lost_events=%llu expirations=%llu\n",
           zklock_strerror(r.check_after), zklock_strerror(r.release_rc),
           zklock_strerror(r.reacquire_rc), (long long)r.token1, (long long)parent_token,
           (long long)r.token2, (unsigned long long)r.lost_events,
           (unsigned long long)r.expirations);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_INT_EQ(LOCK_LOST, r.check_after);
    CHECK_INT_EQ(LOCK_LOST, r.release_rc);
    CHECK_INT_EQ(LOCK_OK, r.reacquire_rc);
    CHECK_INT_GT(r.token2, parent_token);
    CHECK_INT_EQ(1, r.lost_events);
    CHECK_INT_EQ(1, r.expirations);

    zhandle_t *zh = lt_zk_open(hosts);
    CHECK_INT_LE(lt_children(zh, name), 0);
    zookeeper_close(zh);
    zklock_session_free(s);
    printf("ok\n");
    return 0;
}
