/* lock_child_seq_test: the fair lock's queue as one listing shows it (zklock_queue.c).
 * Every known implementation's node contends (stockd's, Curator's, kazoo's,
 * go-zookeeper's, ZooKeeper's own C recipe's), ordered by the sequence; a node at
 * ZooKeeper's sequence limit (2147483647, or signed) is ordered after all others and
 * never holds; any other child is a stray that neither holds nor is waited for; our own
 * late twins are neither; and only stockd's own nodes carry our GUID. */
#include <stdio.h>

#include "check.h"
#include "zklock_int.h"

#define GUID  "0123456789abcdef0123456789abcdef"
#define OTHER "ffffffffffffffffffffffffffffffff"

/* The decision for `mine` in the listing names[0..n-1]. */
static zklock_decision decide(const char *mine, const char *guid, char **names, int n) {
    struct String_vector kids = {n, names};
    zklock_decision d;
    zklock__decide(&kids, mine, guid, &d);
    return d;
}

int main(void) {
    /* Who contends, and the sequence text. */
    CHECK_INT_EQ(42, zklock__child_seq(GUID "-lock-0000000042"));
    CHECK_INT_EQ(2147483647, zklock__child_seq(OTHER "-lock-2147483647"));
    CHECK_INT_EQ(7, zklock__child_seq("_c_6f1d0b6e-3b8a-4c1e-9d55-2f7a0c1b9e42-lock-0000000007"));
    CHECK_INT_EQ(7, zklock__child_seq("8c2e4f1a9b3d4e5f8a7b6c5d4e3f2a1b__lock__0000000007"));
    CHECK_INT_EQ(-2147483648, zklock__child_seq(GUID "-lock--2147483648"));
    CHECK_INT_EQ(-1, zklock__child_seq(GUID "-lock--000000001"));
    CHECK_INT_EQ(1, zklock__contender_seq(GUID "-lock-000000042") == NULL);
    CHECK_INT_EQ(1, zklock__contender_seq(GUID "-lock-00000000x2") == NULL);
    CHECK_INT_EQ(1, zklock__contender_seq(GUID "-lock-00000000042") == NULL);
    CHECK_INT_EQ(1, zklock__contender_seq("leader-0000000001") == NULL);
    CHECK_INT_EQ(1, zklock__contender_seq("keeper") == NULL);
    /* ZooKeeper's C recipe: "x-", the session id in 16 hex digits, "-", the sequence. */
    CHECK_INT_EQ(12, zklock__child_seq("x-0100000a1b2c3d4e-0000000012"));
    CHECK_INT_EQ(1, zklock__contender_seq("x-0100000a1b2c3d4-0000000012") == NULL);
    CHECK_INT_EQ(1, zklock__contender_seq("x-0100000A1B2C3D4E-0000000012") == NULL);
    CHECK_INT_EQ(1, zklock__contender_seq("y-0100000a1b2c3d4e-0000000012") == NULL);
    CHECK_INT_EQ(1, zklock__contender_seq("ax-0100000a1b2c3d4e-0000000012") == NULL);
    CHECK_INT_EQ(1, zklock__contender_seq("") == NULL);

    /* Who made it. */
    CHECK_STR_EQ("stockd", zklock__contender_impl(GUID "-lock-0000000001"));
    CHECK_STR_EQ("curator",
                 zklock__contender_impl("_c_6f1d0b6e-3b8a-4c1e-9d55-2f7a0c1b9e42-lock-0000000001"));
    CHECK_STR_EQ("kazoo", zklock__contender_impl(OTHER "__lock__0000000001"));
    CHECK_STR_EQ("zoolock", zklock__contender_impl("x-0100000a1b2c3d4e-0000000001"));
    CHECK_STR_EQ("other", zklock__contender_impl("_c_" GUID "-lock-0000000001"));
    CHECK_STR_EQ("stray", zklock__contender_impl("keeper"));

    /* Recovery and sweeps by GUID find stockd's own shape only. */
    CHECK_INT_EQ(1, zklock__own_child(GUID "-lock-0000000003", GUID));
    CHECK_INT_EQ(0, zklock__own_child(GUID "__lock__0000000003", GUID));
    CHECK_INT_EQ(0, zklock__own_child(GUID "-lock-0000000003-x", GUID));
    CHECK_INT_EQ(0, zklock__own_child(OTHER "-lock-0000000003", GUID));

    /* A Curator node below ours holds the lock: we watch it. */
    char *mixed[] = {GUID "-lock-0000000005",
                     "_c_6f1d0b6e-3b8a-4c1e-9d55-2f7a0c1b9e42-lock-0000000002",
                     OTHER "__lock__0000000004", "keeper", OTHER "-lock-0000000009"};
    zklock_decision d = decide(GUID "-lock-0000000005", GUID, mixed, 5);
    CHECK_INT_EQ(1, d.found);
    CHECK_INT_EQ(0, d.holds);
    CHECK_STR_EQ(OTHER "__lock__0000000004", d.pred);
    CHECK_INT_EQ(2, d.below);
    CHECK_INT_EQ(1, d.above);
    CHECK_INT_EQ(1, d.strays);
    /* The Curator node, lowest, holds; the stray does not stand in its way. */
    d = decide("_c_6f1d0b6e-3b8a-4c1e-9d55-2f7a0c1b9e42-lock-0000000002", NULL, mixed, 5);
    CHECK_INT_EQ(1, d.holds);
    CHECK_INT_EQ(1, d.pred == NULL);
    CHECK_INT_EQ(3, d.above);

    /* A stray alone never holds anybody up. */
    char *stray[] = {"aaa-lock-x", GUID "-lock-0000000008", "0000000001"};
    d = decide(GUID "-lock-0000000008", GUID, stray, 3);
    CHECK_INT_EQ(1, d.holds);
    CHECK_INT_EQ(2, d.strays);

    /* A late twin of ours (same GUID) is neither predecessor nor queued. */
    char *twin[] = {GUID "-lock-0000000003", GUID "-lock-0000000001", OTHER "-lock-0000000002"};
    d = decide(GUID "-lock-0000000003", GUID, twin, 3);
    CHECK_INT_EQ(1, d.twins);
    CHECK_STR_EQ(OTHER "-lock-0000000002", d.pred);
    CHECK_INT_EQ(1, d.below);

    /* Our node is gone from the listing. */
    d = decide(GUID "-lock-0000000004", GUID, twin, 3);
    CHECK_INT_EQ(0, d.found);
    CHECK_INT_EQ(0, d.holds);

    /* A node of ZooKeeper's C recipe below ours holds the lock: we watch it. */
    char *crecipe[] = {GUID "-lock-0000000007", "x-0100000a1b2c3d4e-0000000006"};
    d = decide(GUID "-lock-0000000007", GUID, crecipe, 2);
    CHECK_INT_EQ(0, d.holds);
    CHECK_STR_EQ("x-0100000a1b2c3d4e-0000000006", d.pred);

    /* At ZooKeeper's limit the server names every child 2147483647 (and a create in flight
     * with the one that reached it gets a signed name): such a sequence says nothing of
     * who came first. A node there never holds, whatever its name sorts as, and is
     * ordered after every other, so the holder below the limit keeps the lock. */
    CHECK_INT_EQ(1, zklock__seq_at_limit(zklock__contender_seq(GUID "-lock-2147483647")));
    CHECK_INT_EQ(1, zklock__seq_at_limit(zklock__contender_seq(GUID "-lock--2147483648")));
    CHECK_INT_EQ(1, zklock__seq_at_limit(zklock__contender_seq(GUID "-lock--000000001")));
    CHECK_INT_EQ(0, zklock__seq_at_limit(zklock__contender_seq(GUID "-lock-2147483646")));
    CHECK_INT_EQ(0, zklock__seq_at_limit(NULL));
    char *limit[] = {OTHER "-lock-2147483646", "0000000000000000000000000000000a-lock-2147483647",
                     GUID "-lock-2147483647", OTHER "__lock__-2147483648"};
    d = decide(OTHER "-lock-2147483646", NULL, limit, 4);
    CHECK_INT_EQ(1, d.holds);
    CHECK_INT_EQ(0, d.at_limit);
    CHECK_INT_EQ(3, d.above);
    /* A newcomer whose GUID sorts first, alone at the limit with the holder gone, or
     * signed: none holds. */
    d = decide("0000000000000000000000000000000a-lock-2147483647", NULL, limit, 4);
    CHECK_INT_EQ(0, d.holds);
    CHECK_INT_EQ(1, d.at_limit);
    CHECK_STR_EQ(OTHER "-lock-2147483646", d.pred);
    d = decide("0000000000000000000000000000000a-lock-2147483647", NULL, limit + 1, 3);
    CHECK_INT_EQ(0, d.holds);
    CHECK_INT_EQ(1, d.at_limit);
    d = decide(OTHER "__lock__-2147483648", NULL, limit, 4);
    CHECK_INT_EQ(0, d.holds);
    CHECK_INT_EQ(1, d.at_limit);
    CHECK_INT_EQ(1, zklock__contender_cmp(GUID "-lock--2147483648", OTHER "-lock-0000000001") > 0);
    CHECK_INT_EQ(1, zklock__contender_cmp(GUID "-lock-2147483647", OTHER "-lock-2147483646") > 0);
    printf("ok\n");
    return 0;
}
