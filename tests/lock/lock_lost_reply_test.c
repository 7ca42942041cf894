/* lock_lost_reply_test: a create whose reply is lost is recovered, and never
 * leaves an orphan. The zklock session talks to ZooKeeper through the tests'
 * fault proxy with its ZooKeeper hook (tests/support/fault_proxy_zk.h). When
 * armed, the proxy forwards the next create2 request of a lock node to the server, swallows the
 * reply, and severs the connection 300 ms later (the server has made the node by then). The client
 * sees a connection loss on the create, reconnects through the proxy and its
 * ZooKeeper session survives. Checked:
 *   1. fair: the acquisition adopts the node it made (one child, czxid = token);
 *   2. herd: likewise for the single herd node;
 *   3. fair, and the proxy refuses reconnection until the acquisition's deadline
 *      has passed: the acquisition fails, and once the connection is back the
 *      node it may have made is deleted in the background (no orphan);
 *   4. a release while disconnected: the hold is SUSPECT first, the release says
 *      LOCK_ERR_CONNECTION, and the node is deleted after reconnection, so
 *      another session gets the lock.
 * Then a create that is applied late, as on a follower that lags: the proxy keeps
 * the create, severs, and lets it reach the server only right after the client's
 * first look on the next connection, which therefore concludes "never created".
 *   5. fair: the acquisition is cancelled just after that look (the proxy holds the
 *      listing's reply until the test has cancelled): the late node, ours and
 *      alive with our session, must still be deleted, else it blocks the lock;
 *   6. herd: the late node is our own herd node; the acquisition must take it as
 *      ours rather than wait for itself until its deadline;
 *   7. fair, late enough to come after a restart: the waiter's second node is
 *      deleted by hand while it waits behind another waiter; when that one goes,
 *      it lists, finds its node gone and makes a new one, and only then does the
 *      first create reach the server. The late node sits in the queue before the
 *      new one; the waiter must recognise it as its own (same GUID, same session)
 *      and delete it, not wait for it.
 * Last, a server that lags but catches up when asked to sync, as a follower does:
 * the proxy lets the held create through right before the first sync.
 *   8. fair and 9. herd: recovery syncs before it looks, so it adopts the node the
 *      first create made (one create recovered, the token is that node's czxid);
 *  10. zklock_try_many and 11. the single try (zklock_acquire, timeout 0) give up at
 *      once and leave the node to the cleanup by GUID, which must sync before it
 *      lists too: the node is deleted, and another session gets the lock. The single
 *      try may also find the session back before it looks again and recover its node
 *      (then it holds, and releases): the same two things must hold. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_proxy_zk.h"
#include "lock_test.h"

/* czxid of the only child of <root>/<name>, or of <root>/<name>-herd. */
static int64_t node_czxid(zhandle_t *zh, const char *name, int herd) {
    char path[512];
    struct Stat st;
    if (herd) {
        snprintf(path, sizeof(path), "/stock/locks/%s-herd", name);
    } else {
        struct String_vector v = {0, NULL};
        snprintf(path, sizeof(path), "/stock/locks/%s", name);
        CHECK_INT_EQ(ZOK, zoo_get_children(zh, path, 0, &v));
        CHECK_INT_EQ(1, v.count);
        snprintf(path, sizeof(path), "/stock/locks/%s/%s", name, v.data[0]);
        deallocate_String_vector(&v);
    }
    CHECK_INT_EQ(ZOK, zoo_exists(zh, path, 0, &st));
    return st.czxid;
}

static void late_create_cases(const char *hosts, zhandle_t *zh, const char *base) {
    char late[128], herd[128], path[256];
    snprintf(late, sizeof(late), "%s_late", base);
    snprintf(herd, sizeof(herd), "%s_lateh", base);
    snprintf(path, sizeof(path), "/stock/locks/%s", late);
    CHECK_INT_EQ(ZOK, zoo_create(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, NULL, 0));
    fp_zk *p = fp_zk_start(hosts);
    CHECK(p != NULL);

    /* 5. Fair, cancelled after recovery found nothing. */
    zklock_session *s = lt_session(fp_zk_hosts(p), 10000);
    fp_zk_hold_next_create(p, FP_ZK_OP_GETCHILDREN, FP_ZK_OP_GETCHILDREN2, 1);
    lt_acquire_run r = {.s = s, .name = late, .timeout_ms = 30000};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, lt_acquire_main, &r) == 0);
    for (int64_t end = lt_now_ms() + 10000; !fp_zk_holding(p) && lt_now_ms() < end;)
        lt_sleep_ms(10);
    CHECK_INT_EQ(1, fp_zk_holding(p));
    zklock_session_cancel(s);
    fp_zk_release(p);
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_ERR_CANCELLED, r.rc);
    CHECK_INT_EQ(1, fp_zk_injected(p));
    if (!lt_wait_children(zh, late, 0, 5))
        CHECK_FAIL_("late node left after the acquisition was cancelled: %d children",
                    lt_children(zh, late));
    zklock_session_free(s);
    printf("fair, create applied after the recovery listing, then cancelled: no node left\n");

    /* 6. Herd: our own late node is the one in the way. */
    s = lt_session(fp_zk_hosts(p), 10000);
    fp_zk_hold_next_create(p, FP_ZK_OP_GETDATA, -1, 0);
    zklock_hold *h = NULL;
    int rc = zklock_acquire(s, herd, ZKLOCK_HERD, 5000, &h);
    CHECK_INT_EQ(2, fp_zk_injected(p));
    CHECK_INT_EQ(LOCK_OK, rc);
    CHECK_INT_EQ(node_czxid(zh, herd, 1), zklock_token(h));
    CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    snprintf(path, sizeof(path), "/stock/locks/%s-herd", herd);
    CHECK_INT_EQ(ZNONODE, zoo_exists(zh, path, 0, NULL));
    zklock_session_free(s);
    printf("herd, create applied after the recovery look: our own node adopted\n");

    /* 7. Fair, the late create arrives after a restart. */
    char rs[128];
    snprintf(rs, sizeof(rs), "%s_restart", base);
    zklock_session *holder = lt_session(hosts, 0), *mid = lt_session(hosts, 0);
    zklock_hold *hh = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(holder, rs, ZKLOCK_FAIR, 10000, &hh));
    lt_acquire_run m = {.s = mid, .name = rs, .timeout_ms = 30000},
                   w = {.s = NULL, .name = rs, .timeout_ms = 30000};
    pthread_t tm, tw;
    CHECK(pthread_create(&tm, NULL, lt_acquire_main, &m) == 0);
    CHECK(lt_wait_children(zh, rs, 2, 10));
    s = lt_session(fp_zk_hosts(p), 10000);
    w.s = s;
    fp_zk_hold_next_create(p, -1, -1, 0); /* kept until told */
    CHECK(pthread_create(&tw, NULL, lt_acquire_main, &w) == 0);
    /* The first create is held; the second, after reconnection, makes node 3. */
    CHECK(lt_wait_children(zh, rs, 3, 10));
    snprintf(path, sizeof(path), "/stock/locks/%s", rs);
    struct String_vector v = {0, NULL};
    CHECK_INT_EQ(ZOK, zoo_get_children(zh, path, 0, &v));
    char mine[512] = "";
    int64_t top = -1;
    for (int i = 0; i < v.count; i++) {
        const char *k = v.data[i];
        int64_t seq = strtoll(k + strlen(k) - 10, NULL, 10);
        if (seq > top) {
            top = seq;
            snprintf(mine, sizeof(mine), "%s/%s", path, k);
        }
    }
    deallocate_String_vector(&v);
    CHECK_INT_EQ(ZOK, zoo_delete(zh, mine, -1));
    fp_zk_inject_after(p, FP_ZK_OP_GETCHILDREN, FP_ZK_OP_GETCHILDREN2);
    /* The middle waiter gives up: ours lists (the held create follows the listing),
     * restarts, and waits behind the holder, or behind its own late node. */
    zklock_session_cancel(mid);
    pthread_join(tm, NULL);
    CHECK_INT_EQ(LOCK_ERR_CANCELLED, m.rc);
    for (int64_t end = lt_now_ms() + 10000; fp_zk_injected(p) < 3 && lt_now_ms() < end;)
        lt_sleep_ms(10);
    CHECK_INT_EQ(3, fp_zk_injected(p));
    CHECK_INT_EQ(LOCK_OK, zklock_release(hh));
    pthread_join(tw, NULL);
    CHECK_INT_EQ(LOCK_OK, w.rc);
    CHECK(lt_wait_children(zh, rs, 0, 5));
    zklock_stats st;
    zklock_get_stats(s, &st);
    CHECK_INT_GE(st.orphans_deleted, 1);
    zklock_session_free(s);
    zklock_session_free(mid);
    zklock_session_free(holder);
    printf("fair, create applied after a restart: the late node recognised and deleted\n");

    /* 8-9. The server we come back to lags, but catches up when asked to sync (a
     * follower does): the create reaches it right before the first sync. Recovery
     * syncs before it looks, so it finds the node the first create made and adopts
     * it; without the sync it would see nothing, make a second node, and the held
     * create would never be let through. */
    char sf[128], sh[128];
    snprintf(sf, sizeof(sf), "%s_sync", base);
    snprintf(sh, sizeof(sh), "%s_synch", base);
    snprintf(path, sizeof(path), "/stock/locks/%s", sf);
    CHECK_INT_EQ(ZOK, zoo_create(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, NULL, 0));
    const char *sync_names[] = {sf, sh};
    for (int herd_kind = 0; herd_kind <= 1; herd_kind++) {
        const char *name = sync_names[herd_kind];
        s = lt_session(fp_zk_hosts(p), 10000);
        fp_zk_hold_next_create_before(p, FP_ZK_OP_SYNC);
        rc = zklock_acquire(s, name, herd_kind ? ZKLOCK_HERD : ZKLOCK_FAIR, 5000, &h);
        CHECK_INT_EQ(LOCK_OK, rc);
        CHECK_INT_EQ(4 + herd_kind, fp_zk_injected(p));
        zklock_get_stats(s, &st);
        CHECK_INT_EQ(1, st.recovered_creates);
        if (!herd_kind) CHECK_INT_EQ(1, lt_children(zh, name));
        CHECK_INT_EQ(node_czxid(zh, name, herd_kind), zklock_token(h));
        CHECK_INT_EQ(LOCK_OK, zklock_release(h));
        zklock_session_free(s);
        printf("%s, create applied by a lagging server when asked to sync: adopted\n",
               herd_kind ? "herd" : "fair");
    }
    CHECK(lt_wait_children(zh, sf, 0, 5)); /* the fair case's node went at its release */
    snprintf(path, sizeof(path), "/stock/locks/%s-herd", sh);
    CHECK_INT_EQ(ZNONODE, zoo_exists(zh, path, 0, NULL));

    /* 10-11. The tries (zklock_try_many, and zklock_acquire with timeout 0) give up on
     * a create whose reply was lost and leave its node to a cleanup by GUID. The
     * server we come back to lags: it applies the create right after the first sync
     * or the first listing, whichever comes first. The cleanup must sync before it
     * lists, else it finds nothing, forgets the GUID, and the node lands afterwards,
     * owned by our live session: every later acquisition of the lock, anywhere,
     * queues behind it until the process exits. */
    const char *try_kinds[] = {"try_many", "try"};
    for (int single = 0; single <= 1; single++) {
        char tn[128];
        snprintf(tn, sizeof(tn), "%s_%s", base, single ? "try1" : "trymany");
        snprintf(path, sizeof(path), "/stock/locks/%s", tn);
        CHECK_INT_EQ(ZOK,
                     zoo_create(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, NULL, 0));
        int before = fp_zk_injected(p);
        s = lt_session(fp_zk_hosts(p), 10000);
        fp_zk_hold_next_create(p, FP_ZK_OP_SYNC, FP_ZK_OP_GETCHILDREN, 0);
        if (single) {
            rc = zklock_acquire(s, tn, ZKLOCK_FAIR, 0, &h);
            /* A slow run (a sanitizer's) may have the session back before the try looks
             * again: the try then syncs, finds its node and holds it. That is legitimate
             * too; either way no orphan may remain and another session must acquire. */
            CHECK((rc == LOCK_OK) == (h != NULL));
            if (rc == LOCK_OK) CHECK_INT_EQ(LOCK_OK, zklock_release(h));
            h = NULL;
        } else {
            const char *one[1] = {tn};
            int rcs[1];
            CHECK_INT_EQ(0, zklock_try_many(s, one, 1, ZKLOCK_FAIR, &h, rcs));
            rc = rcs[0];
            CHECK(rc == LOCK_ERR_CONNECTION || rc == LOCK_ERR_TIMEOUT);
        }
        CHECK(rc == LOCK_OK || rc == LOCK_ERR_CONNECTION || rc == LOCK_ERR_TIMEOUT);
        /* The create reaches the server once the session is back. */
        for (int64_t end = lt_now_ms() + 10000; fp_zk_injected(p) == before && lt_now_ms() < end;)
            lt_sleep_ms(10);
        CHECK_INT_EQ(before + 1, fp_zk_injected(p));
        if (!lt_wait_children(zh, tn, 0, 5))
            CHECK_FAIL_("%s: the lost create's node is left to block the lock: %d children",
                        try_kinds[single], lt_children(zh, tn));
        zklock_session *other = lt_session(hosts, 0);
        zklock_hold *oh = NULL;
        CHECK_INT_EQ(LOCK_OK, zklock_acquire(other, tn, ZKLOCK_FAIR, 0, &oh));
        CHECK_INT_EQ(LOCK_OK, zklock_release(oh));
        zklock_session_free(other);
        zklock_session_free(s);
        printf("%s, create applied by a lagging server after the sweep's look: swept\n",
               try_kinds[single]);
    }
    fp_zk_stop(p);
}

int main(void) {
    const char *hosts = lt_zk_hosts();
    const char *base = lt_lock_name("lostreply");
    char fair[128], herd[128], giveup[128], rel[128];
    snprintf(fair, sizeof(fair), "%s_f", base);
    snprintf(herd, sizeof(herd), "%s_h", base);
    snprintf(giveup, sizeof(giveup), "%s_g", base);
    snprintf(rel, sizeof(rel), "%s_r", base);
    zhandle_t *zh = lt_zk_open(hosts);
    /* Parents first, so that the create the proxy cuts is one that succeeds. */
    const char *names[] = {fair, giveup, rel};
    for (int i = 0; i < 3; i++) {
        char path[256];
        snprintf(path, sizeof(path), "/stock/locks/%s", names[i]);
        zoo_create(zh, "/stock", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
        zoo_create(zh, "/stock/locks", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
        CHECK_INT_EQ(ZOK,
                     zoo_create(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, NULL, 0));
    }

    fp_zk *p = fp_zk_start(hosts);
    CHECK(p != NULL);
    zklock_session *s = lt_session(fp_zk_hosts(p), 10000);
    zklock_stats st;

    /* 1. Fair: the node made by the lost create is adopted. */
    zklock_hold *h = NULL;
    fp_zk_lose_next_create_reply(p, 0);
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(s, fair, ZKLOCK_FAIR, 30000, &h));
    CHECK_INT_EQ(1, fp_zk_triggers(p));
    zklock_get_stats(s, &st);
    CHECK_INT_EQ(1, st.recovered_creates);
    CHECK_INT_EQ(1, lt_children(zh, fair));
    CHECK_INT_EQ(node_czxid(zh, fair, 0), zklock_token(h));
    CHECK_INT_EQ(LOCK_OK, zklock_check(h));
    CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    CHECK_INT_EQ(0, lt_children(zh, fair));
    printf("fair: lost create adopted\n");

    /* 2. Herd: the same for the single node. */
    fp_zk_lose_next_create_reply(p, 0);
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(s, herd, ZKLOCK_HERD, 30000, &h));
    CHECK_INT_EQ(2, fp_zk_triggers(p));
    zklock_get_stats(s, &st);
    CHECK_INT_EQ(2, st.recovered_creates);
    CHECK_INT_EQ(node_czxid(zh, herd, 1), zklock_token(h));
    CHECK_INT_EQ(LOCK_OK, zklock_release(h));
    char herd_path[256];
    snprintf(herd_path, sizeof(herd_path), "/stock/locks/%s-herd", herd);
    CHECK_INT_EQ(ZNONODE, zoo_exists(zh, herd_path, 0, NULL));
    printf("herd: lost create adopted\n");

    /* 3. The acquisition gives up while the create's fate is unknown. */
    fp_zk_lose_next_create_reply(p, 2500);
    int rc = zklock_acquire(s, giveup, ZKLOCK_FAIR, 1000, &h);
    CHECK(rc == LOCK_ERR_CONNECTION || rc == LOCK_ERR_TIMEOUT);
    CHECK_INT_EQ(3, fp_zk_triggers(p));
    CHECK_INT_EQ(1, lt_children(zh, giveup)); /* made by the lost create */
    if (!lt_wait_children(zh, giveup, 0, 20))
        CHECK_FAIL_("orphan left: %d children", lt_children(zh, giveup));
    printf("gave up with an unknown create (%s): node deleted after reconnection\n",
           zklock_strerror(rc));

    /* 4. Release while disconnected. */
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(s, rel, ZKLOCK_FAIR, 10000, &h));
    fp_zk_sever(p, 2500);
    int chk = LOCK_OK;
    for (int64_t end = lt_now_ms() + 10000; chk == LOCK_OK && lt_now_ms() < end;) {
        lt_sleep_ms(20);
        chk = zklock_check(h);
    }
    CHECK_INT_EQ(LOCK_SUSPECT, chk);
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, zklock_release(h));
    CHECK_INT_EQ(1, lt_children(zh, rel));
    zklock_session *other = lt_session(hosts, 0);
    zklock_hold *oh = NULL;
    CHECK_INT_EQ(LOCK_OK, zklock_acquire(other, rel, ZKLOCK_FAIR, 30000, &oh));
    CHECK_INT_EQ(LOCK_OK, zklock_release(oh));
    zklock_session_free(other);
    zklock_get_stats(s, &st);
    CHECK_INT_GE(st.suspect_events, 1);
    CHECK_INT_EQ(0, st.lost_events); /* the session survived every cut */
    CHECK_INT_EQ(0, st.expirations);
    printf("release while disconnected: node deleted after reconnection\n");

    zklock_session_free(s);
    fp_zk_stop(p);

    late_create_cases(hosts, zh, base);
    zookeeper_close(zh);
    printf("ok\n");
    return 0;
}
