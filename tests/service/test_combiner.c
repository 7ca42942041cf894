/* Unit tests of service/combiner.c's batches across products (--cross-products): past
 * the leader bound a new product waits unled; a leader claims unled slots oldest first
 * and gives them back; a slot found busy is not claimed again for a while, but a leader
 * leaving takes it over all the same; the last leader cannot leave while an unled slot
 * has jobs. Without the bound (the default) every new product gets its own leader. A
 * leader whose lock is busy passes its product on to the oldest unled one not found
 * busy; with none, it waits for its lock uncounted, so a new product leads itself. */
#include <stdint.h>
#include <time.h>

#include "check.h"
#include "stockd.h"

static stockd_job jobs[8];

static stockd_job *job(int i, int32_t product) {
    jobs[i] = (stockd_job){.kind = STOCKD_JOB_DEDUCT, .product_id = product};
    jobs[i].arrived_ns = stockd_now_ns();
    return &jobs[i];
}

int main(void) {
    stockd_combiner *c = stockd_combiner_new();
    CHECK(c != NULL);
    stockd_job *out[8];
    int32_t pids[8];

    /* The default: each new product leads itself. */
    CHECK_INT_EQ(STOCKD_COMBINER_LEADER, stockd_combiner_enter(c, job(0, 1)));
    CHECK_INT_EQ(STOCKD_COMBINER_LEADER, stockd_combiner_enter(c, job(1, 2)));
    CHECK_INT_EQ(0, stockd_combiner_claim(c, pids, 8));
    for (int32_t p = 1; p <= 2; p++) {
        CHECK_INT_EQ(1, stockd_combiner_take(c, p, 0, out, 8, UINT64_MAX));
        int32_t pid = p;
        unsigned seg = 0;
        CHECK(stockd_combiner_leave(c, &pid, &seg));
    }

    /* One leader at most: the next products wait unled. */
    stockd_combiner_set_cross(c, 1);
    CHECK_INT_EQ(STOCKD_COMBINER_LEADER, stockd_combiner_enter(c, job(0, 1)));
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(1, 2)));
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(2, 3)));
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(3, 2)));
    /* Claimed oldest first; a claimed slot is not claimed twice. */
    CHECK_INT_EQ(2, stockd_combiner_claim(c, pids, 8));
    CHECK_INT_EQ(2, pids[0]);
    CHECK_INT_EQ(3, pids[1]);
    CHECK_INT_EQ(0, stockd_combiner_claim(c, pids, 8));
    CHECK_INT_EQ(2, stockd_combiner_take(c, 2, 0, out, 8, UINT64_MAX));
    CHECK(out[0] == &jobs[1] && out[1] == &jobs[3]);
    stockd_combiner_unclaim(c, 2, 0); /* empty: closed */
    /* 3's lock was busy: back unled, not claimed again for a minute... */
    stockd_combiner_unclaim(c, 3, 60ull * 1000000000ull);
    CHECK_INT_EQ(0, stockd_combiner_claim(c, pids, 8));
    /* ... but the leader, its own slot empty, cannot leave it behind. */
    CHECK_INT_EQ(1, stockd_combiner_take(c, 1, 0, out, 8, UINT64_MAX));
    int32_t pid = 1;
    unsigned seg = 0;
    CHECK(!stockd_combiner_leave(c, &pid, &seg));
    CHECK_INT_EQ(3, pid);
    CHECK_INT_EQ(0, seg);
    /* 2 was closed: a new job of it waits unled again, for this same leader. */
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(4, 2)));
    CHECK_INT_EQ(1, stockd_combiner_take(c, 3, 0, out, 8, UINT64_MAX));
    CHECK(!stockd_combiner_leave(c, &pid, &seg));
    CHECK_INT_EQ(2, pid);
    CHECK_INT_EQ(1, stockd_combiner_take(c, 2, 0, out, 8, UINT64_MAX));
    CHECK(out[0] == &jobs[4]);
    CHECK(stockd_combiner_leave(c, &pid, &seg));
    /* No leader left: the next product leads itself. */
    CHECK_INT_EQ(STOCKD_COMBINER_LEADER, stockd_combiner_enter(c, job(5, 7)));
    CHECK_INT_EQ(1, stockd_combiner_take(c, 7, 0, out, 8, UINT64_MAX));
    pid = 7;
    CHECK(stockd_combiner_leave(c, &pid, &seg));

    /* At the bound, a leader tries its lock first; busy, with no one to pass to, it
     * waits for it uncounted: the next new product leads itself rather than waiting
     * unled behind that wait. */
    const uint64_t busy = 60ull * 1000000000ull;
    CHECK_INT_EQ(STOCKD_COMBINER_LEADER, stockd_combiner_enter(c, job(0, 11)));
    pid = 11;
    CHECK_INT_EQ(STOCKD_COMBINER_TRY, stockd_combiner_before_wait(c, &pid, false, busy));
    CHECK_INT_EQ(STOCKD_COMBINER_ASIDE, stockd_combiner_before_wait(c, &pid, true, busy));
    CHECK_INT_EQ(11, pid);
    CHECK_INT_EQ(STOCKD_COMBINER_LEADER, stockd_combiner_enter(c, job(1, 12)));
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(2, 13))); /* 12 counts */
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(3, 11))); /* still led */
    stockd_combiner_waited(c);
    /* 11's leader, its lock got, serves 11 and then takes over the unled 13. */
    CHECK_INT_EQ(2, stockd_combiner_take(c, 11, 0, out, 8, UINT64_MAX));
    CHECK(!stockd_combiner_leave(c, &pid, &seg));
    CHECK_INT_EQ(13, pid);
    CHECK_INT_EQ(1, stockd_combiner_take(c, 13, 0, out, 8, UINT64_MAX));
    CHECK(stockd_combiner_leave(c, &pid, &seg));
    int32_t pid2 = 12;
    CHECK_INT_EQ(1, stockd_combiner_take(c, 12, 0, out, 8, UINT64_MAX));
    CHECK(stockd_combiner_leave(c, &pid2, &seg));

    /* A leader whose lock is busy passes its product to the oldest unled one; its own
     * waits unled, not claimed while busy, and is taken over again at the end. */
    CHECK_INT_EQ(STOCKD_COMBINER_LEADER, stockd_combiner_enter(c, job(0, 11)));
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(1, 12)));
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(2, 13)));
    pid = 11;
    CHECK_INT_EQ(STOCKD_COMBINER_TRY, stockd_combiner_before_wait(c, &pid, false, busy));
    CHECK_INT_EQ(11, pid);
    CHECK_INT_EQ(STOCKD_COMBINER_PASSED, stockd_combiner_before_wait(c, &pid, true, busy));
    CHECK_INT_EQ(12, pid);
    /* A new job of 11 waits in its unled slot; no new leader (the passer still counts). */
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(3, 11)));
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(4, 14)));
    CHECK_INT_EQ(2, stockd_combiner_claim(c, pids, 8)); /* 13 and 14; 11 is busy */
    CHECK_INT_EQ(13, pids[0]);
    CHECK_INT_EQ(14, pids[1]);
    stockd_combiner_unclaim(c, 13, 0);
    stockd_combiner_unclaim(c, 14, 0);
    /* 12's lock is busy too: passed to 13, the oldest unled not found busy. */
    CHECK_INT_EQ(STOCKD_COMBINER_PASSED, stockd_combiner_before_wait(c, &pid, true, busy));
    CHECK_INT_EQ(13, pid);
    /* 13's lock is got: its batch, then the takeovers, oldest first, busy or not. */
    CHECK_INT_EQ(1, stockd_combiner_take(c, 13, 0, out, 8, UINT64_MAX));
    CHECK(out[0] == &jobs[2]);
    int32_t order[] = {11, 12, 14};
    unsigned count[] = {2, 1, 1};
    for (int i = 0; i < 3; i++) {
        CHECK(!stockd_combiner_leave(c, &pid, &seg));
        CHECK_INT_EQ(order[i], pid);
        CHECK_INT_EQ(count[i], stockd_combiner_take(c, pid, 0, out, 8, UINT64_MAX));
    }
    CHECK(stockd_combiner_leave(c, &pid, &seg));
    /* Only unled slots found busy lately: nothing to pass to, so the leader waits. */
    CHECK_INT_EQ(STOCKD_COMBINER_LEADER, stockd_combiner_enter(c, job(0, 30)));
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(1, 31)));
    CHECK_INT_EQ(1, stockd_combiner_claim(c, pids, 8));
    stockd_combiner_unclaim(c, 31, busy);
    pid = 30;
    CHECK_INT_EQ(STOCKD_COMBINER_ASIDE, stockd_combiner_before_wait(c, &pid, true, busy));
    CHECK_INT_EQ(30, pid);
    stockd_combiner_waited(c);
    CHECK_INT_EQ(1, stockd_combiner_take(c, 30, 0, out, 8, UINT64_MAX));
    CHECK(!stockd_combiner_leave(c, &pid, &seg)); /* 31 is taken over all the same */
    CHECK_INT_EQ(31, pid);
    CHECK_INT_EQ(1, stockd_combiner_take(c, 31, 0, out, 8, UINT64_MAX));
    CHECK(stockd_combiner_leave(c, &pid, &seg));
    /* The count is whole again: one leader, then unled. */
    CHECK_INT_EQ(STOCKD_COMBINER_LEADER, stockd_combiner_enter(c, job(0, 20)));
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(1, 21)));
    CHECK_INT_EQ(1, stockd_combiner_take(c, 20, 0, out, 8, UINT64_MAX));
    pid = 20;
    CHECK(!stockd_combiner_leave(c, &pid, &seg));
    CHECK_INT_EQ(21, pid);
    CHECK_INT_EQ(1, stockd_combiner_take(c, 21, 0, out, 8, UINT64_MAX));
    CHECK(stockd_combiner_leave(c, &pid, &seg));
    /* Below the bound, with no one to pass to, a leader just waits, counted (no try). */
    stockd_combiner_set_cross(c, 2);
    CHECK_INT_EQ(STOCKD_COMBINER_LEADER, stockd_combiner_enter(c, job(0, 40)));
    pid = 40;
    CHECK_INT_EQ(STOCKD_COMBINER_WAIT, stockd_combiner_before_wait(c, &pid, false, busy));
    CHECK_INT_EQ(STOCKD_COMBINER_LEADER, stockd_combiner_enter(c, job(1, 41)));
    CHECK_INT_EQ(STOCKD_COMBINER_FOLLOWER, stockd_combiner_enter(c, job(2, 42))); /* 2 lead */
    CHECK_INT_EQ(1, stockd_combiner_take(c, 40, 0, out, 8, UINT64_MAX));
    CHECK(!stockd_combiner_leave(c, &pid, &seg));
    CHECK_INT_EQ(42, pid);
    CHECK_INT_EQ(1, stockd_combiner_take(c, 42, 0, out, 8, UINT64_MAX));
    CHECK(stockd_combiner_leave(c, &pid, &seg));
    pid = 41;
    CHECK_INT_EQ(1, stockd_combiner_take(c, 41, 0, out, 8, UINT64_MAX));
    CHECK(stockd_combiner_leave(c, &pid, &seg));
    stockd_combiner_free(c);
    printf("ok: unled products are claimed, given back, and never left without a leader; "
           "a busy lock is passed on or waited for uncounted\n");
    return 0;
}
