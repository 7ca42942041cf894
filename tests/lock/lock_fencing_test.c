/* lock_fencing_test: fencing tokens strictly increase across successive
 * acquisitions: of one lock, across lock names and kinds, and after the server
 * reaped a lock's container parent and it was made again. */
#include <stdio.h>

#include "lock_test.h"

static int64_t take(zklock_session *s, const char *name, zklock_kind kind, int64_t last) {
    zklock_hold *h = NULL;
    int rc = zklock_acquire(s, name, kind, 10000, &h);
    if (rc != LOCK_OK) CHECK_FAIL_("acquire %s: %s", name, zklock_strerror(rc));
    int64_t t = zklock_token(h);
    CHECK_INT_GT(t, last);
    CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    return t;
}

int main(void) {
    const char *hosts = lt_zk_hosts();
    char a[128], b[128];
    snprintf(a, sizeof(a), "%s_a", lt_lock_name("fencing"));
    snprintf(b, sizeof(b), "%s_b", lt_lock_name("fencing"));
    zhandle_t *zh = lt_zk_open(hosts);
    zklock_session *s1 = lt_session(hosts, 0), *s2 = lt_session(hosts, 0);

    int64_t t = 0;
    for (int i = 0; i < 5; i++) {
        t = take(i % 2 ? s1 : s2, a, ZKLOCK_FAIR, t);
        t = take(s1, b, ZKLOCK_FAIR, t);
        t = take(s2, a, ZKLOCK_HERD, t);
    }
    if (!lt_wait_parent_gone(zh, a, 90)) CHECK_FAIL_("container parent of %s not reaped", a);
    int64_t before = t;
    t = take(s1, a, ZKLOCK_FAIR, t);
    printf("token before reaping %lld, after %lld\n", (long long)before, (long long)t);

    zklock_session_free(s1);
    zklock_session_free(s2);
    zookeeper_close(zh);
    printf("ok\n");
    return 0;
}
