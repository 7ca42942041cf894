/* batch.c: a batch's lock life, all in batch__pass: the slot's lock waited for, or
 * tried and passed on or waited for set aside, as the combiner's steps say; the batch
 * taken, its expired jobs dropped, its transaction run under the lock (or the batch
 * across products, cross.c); and the lock kept for another pass, cached or let go. On a
 * failed wait, the jobs that waited through it get its failure. docs/architecture.md
 * tells the request path; worker_int.h draws the files' layers. Everything here runs on
 * a worker thread with its own worker_state. */
#include <stdio.h>

#include "worker_int.h"

/* Waits at most the configured lock timeout for the lock of the slot (product_N, or
 * product_N_seg_S for segment S >= 1), or only tries it. LOCK_OK with l->lock held, or
 * the error. */
static int lock_slot(worker_state *ws, leader *l, bool try_only) {
    char name[48];
    if (l->lock.segment)
        snprintf(name, sizeof(name), "product_%d_seg_%u", l->lock.product_id, l->lock.segment);
    else
        snprintf(name, sizeof(name), "product_%d", l->lock.product_id);
    lock_set *locks = ws->w->ctx->locks;
    return try_only ? lock_try_acquire(locks, name, &l->lock.hold)
                    : lock_acquire(locks, name, &l->lock.hold);
}

/* The slot's lock, as the combiner's steps say: waited for, or tried first and, when
 * busy, passed on (the worker then leads another slot: l changes) or waited for set
 * aside, handing a slot nobody leads to another worker. A try that fails otherwise (the
 * service is down, say) falls back to the plain wait. LOCK_OK or the wait's error. */
static int acquire(worker_state *ws, leader *l) {
    stockd_combiner *c = ws->comb;
    int32_t *pid = &l->lock.product_id;
    unsigned *seg = &l->lock.segment;
    while (stockd_combiner_before_lock(c, *pid, *seg) == STOCKD_PLAN_TRY) {
        int rc = lock_slot(ws, l, true);
        if (rc != LOCK_ERR_TIMEOUT) {
            if (rc == LOCK_OK) return rc;
            break;
        }
        stockd_metrics_cross_busy();
        stockd_job *handed = NULL;
        if (stockd_combiner_busy(c, pid, seg, CROSS_BUSY_NS, &handed) == STOCKD_BUSY_ASIDE) {
            if (handed) stockd_jobq_requeue(ws->w->ctx->queue, handed);
            break;
        }
    }
    return lock_slot(ws, l, false);
}

/* Answers the slot's waiting jobs that arrived before `before` with the lock's failure. */
static void fail_waiting(worker_state *ws, const leader *l, int lock_rc, uint64_t before) {
    stockd_ctx *ctx = ws->w->ctx;
    unsigned n;
    while ((n = stockd_combiner_take(ws->comb, l->lock.product_id, l->lock.segment, ws->jobs,
                                     ctx->cfg->batch_max, before)) > 0) {
        for (unsigned i = 0; i < n; i++) {
            stockd_answer a = {.id = l->lock.product_id};
            stockd_answer_from_db(&a, lock_rc, STOCKDB_OK, NULL);
            const char *m = lock_failure_message(ctx->locks, lock_rc);
            if (m) a.message = m;
            answer__send(ws, ws->jobs[i], &a);
        }
    }
}

/* Takes the slot's lock for a first pass; false when the wait failed, its waiters then
 * answered: those that waited through the whole attempt get its failure, the ones that
 * came during it try again, unless the lock is unusable now. */
static bool take_lock(worker_state *ws, leader *l) {
    stockd_ctx *ctx = ws->w->ctx;
    bool snapshot_first = ctx->cfg->pitfall == STOCKD_PITFALL_SNAPSHOT_BEFORE_LOCK;
    uint64_t t0 = stockd_now_ns();
    /* --pitfall snapshot-before-lock: the transaction's first read, and so its
     * snapshot, comes before the wait for the lock. */
    if (snapshot_first) (void)stockdb_open_snapshot(ws->db, l->lock.product_id);
    int rc = acquire(ws, l);
    stockd_metrics_lock_wait(stockd_now_ns() - t0);
    if (rc == LOCK_OK) {
        l->held = true;
        l->passes = 0;
        return true;
    }
    if (snapshot_first) stockdb_end_transaction(ws->db);
    if (rc != LOCK_ERR_TIMEOUT) {
        /* The product too: a lock at ZooKeeper's sequence limit needs its parent recreated. */
        char what[40];
        snprintf(what, sizeof(what), "lock of product %d", (int)l->lock.product_id);
        answer__log_failure(ws, what, answer__lock_text(ctx, rc));
    }
    fail_waiting(ws, l, rc, rc == LOCK_ERR_TIMEOUT ? t0 : UINT64_MAX);
    return false;
}

/* One batch under the held lock: with --cross-products, room is kept for the products
 * that wait with no leader (claimed first, so a hot product's full slot never crowds
 * them out: issue 34 #1); then the slot's jobs, the expired dropped, and the one
 * transaction. Returns the jobs to answer (ws->jobs, ws->answers). */
static unsigned run_batch(worker_state *ws, leader *l) {
    stockd_ctx *ctx = ws->w->ctx;
    bool cross = cross__on(ctx, l->lock.segment);
    int32_t claimed[STOCKDB_MULTI_MAX];
    unsigned nc = cross ? cross__claim(ws, claimed) : 0;
    unsigned n = stockd_combiner_take(ws->comb, l->lock.product_id, l->lock.segment, ws->jobs,
                                      ctx->cfg->batch_max - nc, UINT64_MAX);
    unsigned live = answer__drop_late(ws, ws->jobs, n);
    if (cross && (live > 0 || nc > 0))
        return cross__run(ws, &l->lock, live, claimed, nc, ws->answers);
    bool released = false;
    /* Rolled back at the deadline of its oldest job: those past their deadline get 503;
     * the rest, within theirs, run again at once under the same lock. Each round
     * answers at least the oldest, so this ends. */
    while (live > 0 && txn__run(ws, ws->jobs, live, &l->lock, ws->answers, &released))
        live = answer__drop_late(ws, ws->jobs, live);
    if (released) l->held = false; /* --pitfall release-before-commit let it go */
    return live;
}

/* Keeps the lock for the next batch only within the pass limit, while more wait and
 * the lock is surely still ours; otherwise lets it go before the batch is answered, so
 * the next holder starts as early as possible. Lock caching (zk): the node is kept for
 * --lock-cache-ms, so that this product's next batch here starts without a ZooKeeper
 * round, until another instance queues for it (lock/zklock.h). --batch-max 1 keeps the
 * seed's one acquisition per deduction. */
static void keep_or_let_go(worker_state *ws, leader *l) {
    const stockd_config *cfg = ws->w->ctx->cfg;
    if (l->passes < cfg->lock_passes &&
        stockd_combiner_waiting(ws->comb, l->lock.product_id, l->lock.segment) > 0 &&
        lock_check(&l->lock.hold) == LOCK_OK)
        return;
    unsigned cache_ms = cfg->batch_max > 1 ? cfg->lock_cache_ms : 0;
    int rel = lock_release_cached(&l->lock.hold, (int)cache_ms);
    if (rel != LOCK_OK) answer__log_failure(ws, "lock release", answer__lock_text(ws->w->ctx, rel));
    l->held = false;
}

unsigned batch__pass(worker_state *ws, leader *l) {
    if (!l->held && !take_lock(ws, l)) return 0;
    unsigned n = run_batch(ws, l);
    l->passes++;
    if (l->held) keep_or_let_go(ws, l);
    return n;
}
