/* txn.c: one product's transaction under its held lock, the step below every batch of
 * a deduction in a locked mode (batch.c's, and cross.c's when it splits): read once,
 * stock - n, one INSERT, the guard right before COMMIT that re-checks the lock and the
 * oldest job's deadline, and the answers (filled, not sent). Everything here runs on a
 * worker thread with its own worker_state (worker_int.h). */
#include "worker_int.h"

/* Refuses the COMMIT unless the lock is surely ours and the batch's oldest job is still
 * within --queue-deadline-ms. The answer__expired() check when a job is taken is not
 * enough: the think time and the statements come after it, and a job taken just before
 * its deadline would otherwise commit after its client (or nginx) has given up on it. */
int txn__guard_check(void *arg) {
    txn_guard *g = arg;
    if (g->deadline_ns && stockd_now_ns() > g->deadline_ns) {
        g->late = true;
        return 1;
    }
    if (g->release) {
        /* Once: a batch retried after a deadlock comes back here with the lock gone. */
        if (!g->released) (void)lock_release(&g->release->hold);
        g->released = true;
        return 0;
    }
    return g->lock && lock_check(&g->lock->hold) != LOCK_OK;
}

/* The database's answers to the n jobs of a batch of product h that ended with rc. */
static void fill_answers(worker_state *ws, unsigned n, const product_lock *h, int rc,
                         stockd_answer *answers) {
    int32_t left = INT32_MAX;
    for (unsigned i = 0; i < n; i++) {
        answers[i] = (stockd_answer){.id = h->product_id};
        int item_rc = rc == STOCKDB_OK ? ws->items[i].rc : rc;
        stockd_answer_from_db(&answers[i], LOCK_OK, item_rc, &ws->items[i].res);
        if (answers[i].result == STOCKD_R_DEDUCTED) answers[i].segment = h->segment;
        if (item_rc == STOCKDB_OK && ws->items[i].res.stock < left) left = ws->items[i].res.stock;
    }
    /* One empty segment says nothing about the product: only stock left is news. */
    if (left != INT32_MAX && (left > 0 || !h->segment)) stockd_stockwatch_note(h->product_id, left);
}

bool txn__run(worker_state *ws, stockd_job **jobs, unsigned n, product_lock *h,
              stockd_answer *answers, bool *released) {
    stockd_ctx *ctx = ws->w->ctx;
    uint64_t limit = (uint64_t)ctx->cfg->queue_deadline_ms * 1000000u, oldest = UINT64_MAX;
    for (unsigned i = 0; i < n; i++) {
        ws->items[i] = (stockdb_item){.request_id = jobs[i]->request_id,
                                      .user = jobs[i]->user[0] ? jobs[i]->user : NULL};
        if (jobs[i]->arrived_ns < oldest) oldest = jobs[i]->arrived_ns;
    }
    /* --fence off (the paused-holder demonstration only) sends no token and skips the
     * pre-commit check, as a client that trusts its lease would. */
    bool fence = ctx->cfg->fence;
    bool release_early = ctx->cfg->pitfall == STOCKD_PITFALL_RELEASE_BEFORE_COMMIT;
    txn_guard g = {.lock = fence ? h : NULL,
                   .release = release_early ? h : NULL,
                   .deadline_ns = limit ? oldest + limit : 0};
    stockdb_batch b = {.product_id = h->product_id,
                       .segment = (int32_t)h->segment,
                       .fence = fence ? lock_token(&h->hold) : 0,
                       .fence_kind = lock_set_kind(ctx->locks)->fence_kind,
                       .guard = fence || limit || release_early ? txn__guard_check : NULL,
                       .guard_arg = &g,
                       .think_us = think_us(ws),
                       .items = ws->items,
                       .n = n};
    int rc, attempt = 0;
    do
        rc = stockdb_deduct_batch(ws->db, ctx->cfg->strategy, &b);
    while (txn_again(STOCKD_TXN_DEDUCTION, rc, attempt++));
    *released = g.released;
    count_statements(ws);
    if (rc == STOCKDB_ERR_GUARD && g.late) return true;
    answer__note_db_error(ws, "deduction", rc);
    stockd_metrics_batch(n);
    fill_answers(ws, n, h, rc, answers);
    return false;
}
