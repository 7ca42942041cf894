/* deduct.c: a deduction's policy, top to bottom: its deadline, the unlocked modes, the
 * sold-out pre-check, the combiner, the leader's loop and the segment walk. The request
 * path and the combiner's states are told in docs/architecture.md; worker_int.h draws
 * the files' layers. Everything here runs on a worker thread with its own worker_state. */
#include <stdlib.h>

#include "worker_int.h"

/* How many times a deduction that found every segment empty starts its walk again when
 * the product's whole stock, read then, still shows a unit. */
#define SEGMENT_REWALKS 3
#define TOTAL_UNREAD    INT32_MIN

/* One deduction without a lock or the combiner, by the mode's strategy; an aborted
 * transaction was rolled back whole, so it is retried (txn_again). Its deadline is
 * checked before COMMIT too. */
static void deduct_alone(worker_state *ws, stockd_job *job) {
    stockd_ctx *ctx = ws->w->ctx;
    uint64_t limit = (uint64_t)ctx->cfg->queue_deadline_ms * 1000000u;
    txn_guard g = {.deadline_ns = limit ? job->arrived_ns + limit : 0};
    stockdb_request req = {.product_id = job->product_id,
                           .request_id = job->request_id,
                           .user = job->user[0] ? job->user : NULL,
                           .guard = limit ? txn__guard_check : NULL,
                           .guard_arg = &g,
                           .think_us = think_us(ws)};
    stockdb_result res = {0};
    stockd_answer a = {.id = job->product_id};
    int rc, attempt = 0;

    do
        rc = stockdb_deduct(ws->db, ctx->cfg->strategy, &req, &res);
    while (txn_again(STOCKD_TXN_DEDUCTION, rc, attempt++));
    count_statements(ws);
    if (rc == STOCKDB_ERR_GUARD && g.late) {
        answer__late(ws, job);
        return;
    }
    answer__note_db_error(ws, "deduction", rc);
    if (rc == STOCKDB_OK) stockd_stockwatch_note(job->product_id, res.stock);
    stockd_answer_from_db(&a, LOCK_OK, rc, &res);
    answer__send(ws, job, &a);
}

/* The sold-out pre-check: one plain read before the lock, made only when the product's
 * sold-out hint is set (stockwatch.c; for a product in stock the read would be one more
 * statement per deduction, and the batch reads the stock anyway). The stock only ever
 * falls under deductions, so a stock <= 0 read now is the true answer at the moment of
 * the read: answering sold out without the lock is linearizable. A key that bought
 * before gets its order back. Returns true if the job was answered. */
static bool sold_out_precheck(worker_state *ws, stockd_job *job) {
    stockd_answer a = {.id = job->product_id};
    int32_t stock = 0, order_product = 0;
    uint64_t order_id = 0;
    if (!ws->w->ctx->cfg->precheck || !stockd_stockwatch_sold_out(job->product_id)) return false;
    int rc =
        stockdb_peek(ws->db, job->product_id, job->request_id, &stock, &order_id, &order_product);
    count_statements(ws);
    if (rc == STOCKDB_OK) stockd_stockwatch_note(job->product_id, stock);
    if (rc == STOCKDB_OK && !order_id && stock > 0) {
        stockd_metrics_precheck(false);
        return false;
    }
    answer__note_db_error(ws, "sold-out pre-check", rc);
    stockdb_result res = {.outcome = STOCKDB_SOLD_OUT, .stock = stock};
    const stockdb_result *r = rc == STOCKDB_OK ? &res : NULL;
    if (rc == STOCKDB_OK && order_id) {
        res = (stockdb_result){
            .outcome = STOCKDB_DEDUCTED, .stock = stock, .order_id = order_id, .replayed = true};
        rc = order_product == job->product_id ? STOCKDB_OK : STOCKDB_ERR_KEY_REUSED;
    } else if (rc == STOCKDB_OK) {
        stockd_metrics_precheck(true);
    }
    stockd_answer_from_db(&a, LOCK_OK, rc, r);
    answer__send(ws, job, &a);
    return true;
}

/* The unlocked modes: the ones whose row in stockd_modes (modes.c) is not `batched`
 * take no lock and never enter the combiner; each deduction is served on its own, here,
 * as the seed's experiment does, or (redis-stock) by one Lua script on Redis. Returns true if the
 * job was one of theirs (answered). */
static bool serve_unlocked(worker_state *ws, stockd_job *job) {
    stockd_ctx *ctx = ws->w->ctx;
    if (stockd_mode_of(ctx->cfg->lock)->batched) return false;
    if (ctx->cfg->lock == STOCKD_LOCK_REDIS_STOCK) {
        stockd_redisstock_serve(ws, job); /* Redis holds the count: redisstock.c */
        return true;
    }
    /* The pre-check serves atomic too: its sold-out answer would otherwise cost an
     * UPDATE that changes nothing, a read of why, a ROLLBACK and a key look-up. Mode
     * none (read, check, update) keeps the seed's race untouched. */
    if (ctx->cfg->strategy != STOCKDB_READ_CHECK_UPDATE && sold_out_precheck(ws, job)) return true;
    deduct_alone(ws, job);
    return true;
}

/* A deduction of split stock that found its segment empty (article 001's segmented
 * stock) moves on to the next segment, through the head of the queue, so any worker
 * takes it to that segment's slot and lock. When it has found every segment empty, it
 * is not yet sold out: each segment was empty when visited, not all at one moment, and
 * one visited early may have been restocked since (issue 16 #9). So the product's whole
 * stock is read once (*total caches it for the batch; TOTAL_UNREAD before): above 0,
 * the walk begins again (at most SEGMENT_REWALKS times); at or below 0 (or unreadable:
 * the walk's own finding stands) the answer is sold out, linearizable at that read, as
 * stock only falls under deductions. Returns true if the job was requeued. */
static bool next_segment(worker_state *ws, stockd_job *job, const stockd_answer *a,
                         int32_t *total) {
    stockd_ctx *ctx = ws->w->ctx;
    unsigned k = ctx->cfg->segments;
    if (!job->segment || a->result != STOCKD_R_SOLD_OUT) return false;
    if (++job->segs_empty >= k) {
        if (job->rewalks < SEGMENT_REWALKS && *total == TOTAL_UNREAD) {
            int rc = stockdb_get_stock(ws->db, job->product_id, total);
            count_statements(ws);
            answer__note_db_error(ws, "stock read after a walk", rc);
            if (rc != STOCKDB_OK) *total = 0;
        }
        if (job->rewalks >= SEGMENT_REWALKS || *total <= 0) {
            stockd_stockwatch_note(job->product_id, 0);
            return false;
        }
        job->rewalks++;
        job->segs_empty = 0;
    }
    job->segment = (uint16_t)(job->segment % k + 1);
    stockd_metrics_segment_move();
    stockd_jobq_requeue(ctx->queue, job);
    return true;
}

/* The segment walk over a pass's n jobs: each moves on, or gets its answer. */
static void answer_batch(worker_state *ws, unsigned n) {
    int32_t total = TOTAL_UNREAD;
    for (unsigned i = 0; i < n; i++)
        if (!next_segment(ws, ws->jobs[i], &ws->answers[i], &total))
            answer__send(ws, ws->jobs[i], &ws->answers[i]);
}

/* The leader's loop: a pass after a pass (batch.c), each batch answered, until the
 * combiner says this worker leads no more (it may have moved it to another slot). With
 * --route owner a pass of a product another instance owns is a frame sent to it
 * (forward.c) instead, unless that fails. */
static void lead(worker_state *ws, int32_t product_id, unsigned segment) {
    leader l = {.lock = {.product_id = product_id, .segment = segment}};
    do
        if (!forward__pass(ws, &l)) answer_batch(ws, batch__pass(ws, &l));
    while (l.held || stockd_combiner_done(ws->comb, &l.lock.product_id, &l.lock.segment) !=
                         STOCKD_AFTER_CLOSED);
}

/* Hands the job to the combiner: true if this worker now leads its slot. A deduction
 * that came forwarded to an instance whose view gives its product to another (views
 * that differ for a moment, or the test pins) waits in a combiner of its own, the hop
 * side: the main slot's leader may be out with a frame to that other instance, which may
 * be waiting the same way for us (a ping-pong), and the forwarded deduction must not
 * wait behind it. Both sides take the same product lock, so they stay exact. */
static bool enter(worker_state *ws, stockd_job *job) {
    char owner[STOCKD_ADDR_MAX];
    if (!job->handed)
        job->hop_side =
            job->hop && stockd_route_on() &&
            stockd_route_owner(job->product_id, owner, sizeof(owner)) != STOCKD_OWNER_SELF;
    ws->comb = job->hop_side ? ws->w->hops : ws->w->combiner;
    switch (stockd_combiner_enter(ws->comb, job)) {
    case STOCKD_ENTERED_LEADER:
        return true;
    case STOCKD_ENTERED_FOLLOWER:
        return false; /* the slot's leader answers it */
    case STOCKD_ENTERED_NOMEM:
        break;
    }
    stockd_answer a = {.result = STOCKD_R_INTERNAL,
                       .id = job->product_id,
                       .message = "out of memory; nothing was deducted"};
    answer__send(ws, job, &a);
    return false;
}

void deduct__serve(worker_state *ws, stockd_job *job) {
    stockd_ctx *ctx = ws->w->ctx;
    /* A job handed over with its slot (combiner.c) was through these steps already:
     * this worker leads its slot now. */
    if (job->handed) {
        if (enter(ws, job)) lead(ws, job->product_id, job->segment);
        return;
    }
    if (answer__expired(ctx, job, stockd_now_ns())) {
        answer__late(ws, job);
        return;
    }
    if (serve_unlocked(ws, job)) return;
    if (sold_out_precheck(ws, job)) return;
    if (ctx->cfg->segments > 1 && !job->segment)
        job->segment = (uint16_t)(1 + (unsigned)rand_r(&ws->seed) % ctx->cfg->segments);
    stockd_metrics_combined();
    if (enter(ws, job)) lead(ws, job->product_id, job->segment);
}
