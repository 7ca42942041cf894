/* Unit tests of service/combiner.c, the slot's two states and the leader's step: past
 * the cross bound a new product WAITS; a leader claims waiting slots oldest first and
 * gives them back; a slot found busy is not claimed again for a while, but a leader
 * done with its own takes it over all the same; the last leader cannot stop while a
 * waiting slot has jobs. Without the bound (the default) every new product gets its own
 * leader. A leader whose lock is busy passes its slot on to the oldest waiting one not
 * found busy; with none, it waits for its lock set aside, so a new product leads itself.
 * A split product has at most max_leaders LED segments; the others wait for a leader of
 * the product. A leader set aside hands the oldest waiting slot to another worker. */
#include <stdint.h>
#include <time.h>

#include "check.h"
#include "stockd.h"

static stockd_job jobs[8];

/* The leader's step when a batch is over. */
static stockd_after_step done(stockd_combiner *c, int32_t *pid, unsigned *seg) {
    return stockd_combiner_done(c, pid, seg);
}

/* The leader's step when a try found its lock busy, expecting no hand-over. */
static stockd_busy_step busy_step(stockd_combiner *c, int32_t *pid, unsigned *seg, uint64_t ns) {
    stockd_job *handed = NULL;
    stockd_busy_step step = stockd_combiner_busy(c, pid, seg, ns, &handed);
    CHECK(handed == NULL);
    return step;
}

static stockd_job *job(int i, int32_t product) {
    jobs[i] = (stockd_job){.kind = STOCKD_JOB_DEDUCT, .product_id = product};
    jobs[i].arrived_ns = stockd_now_ns();
    return &jobs[i];
}

int main(void) {
    stockd_combiner *c = stockd_combiner_new(0, 0);
    CHECK(c != NULL);
    stockd_job *out[8];
    int32_t pids[8];

    /* The default: each new product leads itself. */
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, job(0, 1)));
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, job(1, 2)));
    CHECK_INT_EQ(0, stockd_combiner_claim(c, pids, 8));
    for (int32_t p = 1; p <= 2; p++) {
        CHECK_INT_EQ(1, stockd_combiner_take(c, p, 0, out, 8, UINT64_MAX));
        int32_t pid = p;
        unsigned seg = 0;
        CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid, &seg));
    }

    stockd_combiner_free(c);

    /* A split product: at most max_leaders (here 1) LED segments; another segment of it
     * waits for that leader, while another product's segment leads itself. */
    c = stockd_combiner_new(1, 0);
    CHECK(c != NULL);
    stockd_job *sj = job(0, 5);
    sj->segment = 1;
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, sj));
    sj = job(1, 5);
    sj->segment = 2;
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, sj));
    sj = job(2, 6);
    sj->segment = 1;
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, sj));
    CHECK_INT_EQ(0, stockd_combiner_claim(c, pids, 8)); /* no cross bound: no claims */
    {
        int32_t pid = 6;
        unsigned seg = 1;
        CHECK_INT_EQ(1, stockd_combiner_take(c, 6, 1, out, 8, UINT64_MAX));
        /* 6's leader may not take 5's waiting segment: 5 has its one leader. */
        CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid, &seg));
        pid = 5;
        seg = 1;
        CHECK_INT_EQ(1, stockd_combiner_take(c, 5, 1, out, 8, UINT64_MAX));
        CHECK_INT_EQ(STOCKD_AFTER_MOVED, done(c, &pid, &seg));
        CHECK_INT_EQ(5, pid);
        CHECK_INT_EQ(2, seg);
        CHECK_INT_EQ(1, stockd_combiner_take(c, 5, 2, out, 8, UINT64_MAX));
        CHECK(out[0] == &jobs[1]);
        CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid, &seg));
    }
    stockd_combiner_free(c);

    /* One leader at most: the next products wait. */
    c = stockd_combiner_new(0, 1);
    CHECK(c != NULL);
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, job(0, 1)));
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(1, 2)));
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(2, 3)));
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(3, 2)));
    /* Claimed oldest first; a claimed slot is not claimed twice. */
    CHECK_INT_EQ(2, stockd_combiner_claim(c, pids, 8));
    CHECK_INT_EQ(2, pids[0]);
    CHECK_INT_EQ(3, pids[1]);
    CHECK_INT_EQ(0, stockd_combiner_claim(c, pids, 8));
    CHECK_INT_EQ(2, stockd_combiner_take(c, 2, 0, out, 8, UINT64_MAX));
    CHECK(out[0] == &jobs[1] && out[1] == &jobs[3]);
    stockd_combiner_unclaim(c, 2, 0); /* empty: closed */
    /* 3's lock was busy: back waiting, not claimed again for a minute... */
    stockd_combiner_unclaim(c, 3, 60ull * 1000000000ull);
    CHECK_INT_EQ(0, stockd_combiner_claim(c, pids, 8));
    /* ... but the leader, its own slot empty, cannot leave it behind. */
    CHECK_INT_EQ(1, stockd_combiner_take(c, 1, 0, out, 8, UINT64_MAX));
    int32_t pid = 1;
    unsigned seg = 0;
    CHECK_INT_EQ(STOCKD_AFTER_MOVED, done(c, &pid, &seg));
    CHECK_INT_EQ(3, pid);
    CHECK_INT_EQ(0, seg);
    /* 2 was closed: a new job of it waits waiting again, for this same leader. */
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(4, 2)));
    CHECK_INT_EQ(1, stockd_combiner_take(c, 3, 0, out, 8, UINT64_MAX));
    CHECK_INT_EQ(STOCKD_AFTER_MOVED, done(c, &pid, &seg));
    CHECK_INT_EQ(2, pid);
    CHECK_INT_EQ(1, stockd_combiner_take(c, 2, 0, out, 8, UINT64_MAX));
    CHECK(out[0] == &jobs[4]);
    CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid, &seg));
    /* No leader left: the next product leads itself. */
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, job(5, 7)));
    CHECK_INT_EQ(1, stockd_combiner_take(c, 7, 0, out, 8, UINT64_MAX));
    pid = 7;
    CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid, &seg));

    /* At the bound, a leader tries its lock first; busy, with no one to pass to, it
     * waits for it uncounted: the next new product leads itself rather than waiting
     * waiting behind that wait. */
    const uint64_t busy = 60ull * 1000000000ull;
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, job(0, 11)));
    pid = 11;
    CHECK_INT_EQ(STOCKD_PLAN_TRY, stockd_combiner_before_lock(c, pid, seg));
    CHECK_INT_EQ(STOCKD_BUSY_ASIDE, busy_step(c, &pid, &seg, busy));
    CHECK_INT_EQ(11, pid);
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, job(1, 12)));
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(2, 13))); /* 12 counts */
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(3, 11))); /* still led */
    /* 11's leader, its lock got, serves 11 and then takes over the waiting 13. */
    CHECK_INT_EQ(2, stockd_combiner_take(c, 11, 0, out, 8, UINT64_MAX));
    CHECK_INT_EQ(STOCKD_AFTER_MOVED, done(c, &pid, &seg));
    CHECK_INT_EQ(13, pid);
    CHECK_INT_EQ(1, stockd_combiner_take(c, 13, 0, out, 8, UINT64_MAX));
    CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid, &seg));
    int32_t pid2 = 12;
    CHECK_INT_EQ(1, stockd_combiner_take(c, 12, 0, out, 8, UINT64_MAX));
    CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid2, &seg));

    /* A leader whose lock is busy passes its product to the oldest waiting one; its own
     * waits waiting, not claimed while busy, and is taken over again at the end. */
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, job(0, 11)));
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(1, 12)));
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(2, 13)));
    pid = 11;
    CHECK_INT_EQ(STOCKD_PLAN_TRY, stockd_combiner_before_lock(c, pid, seg));
    CHECK_INT_EQ(11, pid);
    CHECK_INT_EQ(STOCKD_BUSY_PASSED, busy_step(c, &pid, &seg, busy));
    CHECK_INT_EQ(12, pid);
    /* A new job of 11 waits in its waiting slot; no new leader (the passer still counts). */
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(3, 11)));
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(4, 14)));
    CHECK_INT_EQ(2, stockd_combiner_claim(c, pids, 8)); /* 13 and 14; 11 is busy */
    CHECK_INT_EQ(13, pids[0]);
    CHECK_INT_EQ(14, pids[1]);
    stockd_combiner_unclaim(c, 13, 0);
    stockd_combiner_unclaim(c, 14, 0);
    /* 12's lock is busy too: passed to 13, the oldest waiting not found busy. */
    CHECK_INT_EQ(STOCKD_BUSY_PASSED, busy_step(c, &pid, &seg, busy));
    CHECK_INT_EQ(13, pid);
    /* 13's lock is got: its batch, then the takeovers, oldest first, busy or not. */
    CHECK_INT_EQ(1, stockd_combiner_take(c, 13, 0, out, 8, UINT64_MAX));
    CHECK(out[0] == &jobs[2]);
    int32_t order[] = {11, 12, 14};
    unsigned count[] = {2, 1, 1};
    for (int i = 0; i < 3; i++) {
        CHECK_INT_EQ(STOCKD_AFTER_MOVED, done(c, &pid, &seg));
        CHECK_INT_EQ(order[i], pid);
        CHECK_INT_EQ(count[i], stockd_combiner_take(c, pid, 0, out, 8, UINT64_MAX));
    }
    CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid, &seg));
    /* Only waiting slots found busy lately: nothing to pass to, so the leader waits
     * set aside, and the waiting slot is handed to another worker (issue 34 #2): its
     * first job comes back marked, and entering it makes that worker its leader, the
     * job first again. */
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, job(0, 30)));
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(1, 31)));
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(2, 31)));
    CHECK_INT_EQ(1, stockd_combiner_claim(c, pids, 8));
    stockd_combiner_unclaim(c, 31, busy);
    pid = 30;
    stockd_job *handed = NULL;
    CHECK_INT_EQ(STOCKD_BUSY_ASIDE, stockd_combiner_busy(c, &pid, &seg, busy, &handed));
    CHECK_INT_EQ(30, pid);
    CHECK(handed == &jobs[1] && handed->handed);
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, handed));
    CHECK(!jobs[1].handed);
    CHECK_INT_EQ(0, stockd_combiner_claim(c, pids, 8)); /* 31 is led */
    CHECK_INT_EQ(2, stockd_combiner_take(c, 31, 0, out, 8, UINT64_MAX));
    CHECK(out[0] == &jobs[1] && out[1] == &jobs[2]);
    int32_t pid31 = 31;
    CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid31, &seg));
    CHECK_INT_EQ(1, stockd_combiner_take(c, 30, 0, out, 8, UINT64_MAX));
    CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid, &seg));
    /* The count is whole again: one leader, then waiting. */
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, job(0, 20)));
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(1, 21)));
    CHECK_INT_EQ(1, stockd_combiner_take(c, 20, 0, out, 8, UINT64_MAX));
    pid = 20;
    CHECK_INT_EQ(STOCKD_AFTER_MOVED, done(c, &pid, &seg));
    CHECK_INT_EQ(21, pid);
    CHECK_INT_EQ(1, stockd_combiner_take(c, 21, 0, out, 8, UINT64_MAX));
    CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid, &seg));
    stockd_combiner_free(c);
    /* Below the bound, with no one to pass to, a leader just waits, counted (no try). */
    c = stockd_combiner_new(0, 2);
    CHECK(c != NULL);
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, job(0, 40)));
    pid = 40;
    CHECK_INT_EQ(STOCKD_PLAN_WAIT, stockd_combiner_before_lock(c, pid, seg));
    CHECK_INT_EQ(STOCKD_ENTERED_LEADER, stockd_combiner_enter(c, job(1, 41)));
    CHECK_INT_EQ(STOCKD_ENTERED_FOLLOWER, stockd_combiner_enter(c, job(2, 42))); /* 2 lead */
    CHECK_INT_EQ(1, stockd_combiner_take(c, 40, 0, out, 8, UINT64_MAX));
    CHECK_INT_EQ(STOCKD_AFTER_MOVED, done(c, &pid, &seg));
    CHECK_INT_EQ(42, pid);
    CHECK_INT_EQ(1, stockd_combiner_take(c, 42, 0, out, 8, UINT64_MAX));
    CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid, &seg));
    pid = 41;
    CHECK_INT_EQ(1, stockd_combiner_take(c, 41, 0, out, 8, UINT64_MAX));
    CHECK_INT_EQ(STOCKD_AFTER_CLOSED, done(c, &pid, &seg));
    stockd_combiner_free(c);
    printf("ok: waiting products are claimed, given back, and never left without a leader; "
           "a busy lock is passed on or waited for uncounted\n");
    return 0;
}
