/* zk_seq_limit_probe: the lock library itself on a lock whose parent is at ZooKeeper's
 * sequence limit, run by tests/service/zk_seq_limit.sh (on its own ZooKeeper, once the
 * parent ROOT/NAME has reached 2^31-1 and has no child):
 *   - zklock_acquire, even with time to wait, is LOCK_ERR_SEQ_LIMIT at once, no hold;
 *   - zklock_try_many of NAME and a fresh lock: NAME is LOCK_ERR_SEQ_LIMIT (no hold),
 *     the fresh one held;
 *   - zklock_stats.seq_limit counts both refusals, and no node is left under NAME.
 *
 *     zk_seq_limit_probe HOSTS ROOT NAME */
#include <stdio.h>

#include "check.h"
#include "lock.h"
#include "zklock.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: zk_seq_limit_probe HOSTS ROOT NAME\n");
        return 2;
    }
    zklock_session_config cfg = {.hosts = argv[1], .root = argv[2]};
    zklock_session *s = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_session_new(&cfg, &s));

    zklock_hold *h = NULL;
    CHECK_INT_EQ(LOCK_ERR_SEQ_LIMIT, zklock_acquire(s, argv[3], ZKLOCK_FAIR, 30000, &h));
    CHECK(h == NULL);

    const char *names[2] = {argv[3], "fresh_lock"};
    zklock_hold *holds[2] = {NULL, NULL};
    int rcs[2];
    zklock_try_many(s, names, 2, ZKLOCK_FAIR, holds, rcs);
    CHECK_INT_EQ(LOCK_ERR_SEQ_LIMIT, rcs[0]);
    CHECK(holds[0] == NULL);
    CHECK_INT_EQ(LOCK_OK, rcs[1]);
    CHECK_INT_EQ(LOCK_OK, zklock_release(holds[1]));

    zklock_stats st;
    zklock_get_stats(s, &st);
    CHECK_INT_EQ(2, st.seq_limit);
    lock_view v;
    CHECK_INT_EQ(LOCK_OK, zklock_view(s, argv[3], ZKLOCK_FAIR, &v));
    CHECK_INT_EQ(0, v.total);
    zklock_session_free(s);
    printf("ok\n");
    return 0;
}
