/* batch.c: one product's batch, the step below every path of a deduction in a locked
 * mode: its lock (waited for), its transaction under the held lock with the guard that
 * re-checks the lock and the oldest deadline right before COMMIT, and its answers, with
 * the deadline that drops a job nobody waits for any more.
 *
 * Layer: worker.c (the threads, a slot's leader) and cross.c (batches across products)
 * call it; it calls neither, only the modules below service/ (lock/, db/) and the
 * stock notes (stockwatch.c). Everything here runs on a worker thread with its own
 * worker_state (worker_int.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker_int.h"

/* Logs a database or lock failure at most once a second per worker, so an outage does
 * not turn into one log line per request. */
void batch__log_failure(worker_state *ws, const char *what, const char *detail) {
    time_t now = time(NULL);
    if (now == ws->last_log) return;
    ws->last_log = now;
    stockd_log("warn", "%s: %s", what, detail);
}

/* Counts and logs a database failure (not the client's mistakes). */
void batch__note_db_error(worker_state *ws, const char *what, int rc) {
    if (rc == STOCKDB_OK || rc == STOCKDB_ERR_NOT_FOUND || rc == STOCKDB_ERR_KEY_REUSED) return;
    stockd_metrics_db_error(rc);
    batch__log_failure(ws, what, stockdb_errstr(ws->db));
}

/* Writes the answer into the job and hands it back to the HTTP side. */
void batch__finish(worker_state *ws, stockd_job *job, const stockd_answer *a) {
    job->result = a->result;
    job->status = stockd_answer_status(a->result);
    job->body = stockd_answer_json(a, ws->w->ctx->cfg->instance);
    if (job->kind == STOCKD_JOB_DEDUCT) stockd_metrics_deduction(stockd_now_ns() - job->arrived_ns);
    ws->w->ctx->complete(job);
}

/* A job that waited past --queue-deadline-ms is answered without deducting: its client
 * (or the proxy in front) has most likely given up on it already. It is checked when a
 * job is taken and again right before its batch's COMMIT (batch__guard_check). */
bool batch__expired(const stockd_ctx *ctx, const stockd_job *job, uint64_t now) {
    uint64_t limit = (uint64_t)ctx->cfg->queue_deadline_ms * 1000000u;
    return limit && now - job->arrived_ns > limit;
}

void batch__finish_expired(worker_state *ws, stockd_job *job) {
    stockd_answer a = {.result = STOCKD_R_OVERLOADED,
                       .id = job->product_id,
                       .message = "the request was not served within the queue deadline; "
                                  "nothing was deducted"};
    batch__finish(ws, job, &a);
}

/* Waits at most the configured lock timeout for the lock of the product (named
 * product_N) or of its segment S >= 1 (product_N_seg_S), or only tries it. LOCK_OK with
 * *out held, or the error. */
int batch__lock_acquire(lock_set *locks, int32_t product_id, unsigned segment, bool try_only,
                        product_lock *out) {
    char name[48];
    out->product_id = product_id;
    out->segment = segment;
    if (segment)
        snprintf(name, sizeof(name), "product_%d_seg_%u", product_id, segment);
    else
        snprintf(name, sizeof(name), "product_%d", product_id);
    return try_only ? lock_try_acquire(locks, name, &out->hold)
                    : lock_acquire(locks, name, &out->hold);
}

/* A text for a lock code, for the log: the kind's own message where it has one. */
const char *batch__lock_text(const stockd_ctx *ctx, int rc) {
    /* Only a release sees a lease kind's LOST (the pre-commit check is the guard's, and
     * is answered, not logged): the batch before it has run, and whether it committed
     * was decided by the fence, not by this release. */
    if (rc == LOCK_LOST && (lock_set_kind(ctx->locks)->flags & LOCK_KIND_LEASE))
        return ctx->cfg->fence
                   ? "the lock was no longer ours at this release (its lease ran out, and it "
                     "may have been taken over); the commit before it was fenced, so it could "
                     "not overwrite a newer holder's write, and nothing is undone"
                   : "the lock was no longer ours at this release (its lease ran out, and it "
                     "may have been taken over); with --fence off the commit before it was not "
                     "fenced and may have oversold";
    const char *m = lock_failure_message(ctx->locks, rc);
    return m ? m : lock_strerror(rc);
}

/* Refuses the COMMIT unless the lock is surely ours and the batch's oldest job is still
 * within --queue-deadline-ms. The batch__expired() check when a job is taken is not enough:
 * the think time and the statements come after it, and a job taken just before its
 * deadline would otherwise commit after its client (or nginx) has given up on it. */
int batch__guard_check(void *arg) {
    batch_guard *g = arg;
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

/* Runs jobs[0..n-1] of one product as one transaction under the held lock h and fills
 * their answers (not yet sent). Returns true, with no answer filled, when the batch was
 * rolled back because its oldest job had passed its deadline before COMMIT: the caller
 * answers those past it and runs the rest again. With --pitfall release-before-commit
 * the lock is let go right before COMMIT (*released says whether that happened). */
bool batch__run(worker_state *ws, stockd_job **jobs, unsigned n, product_lock *h,
                stockd_answer *answers, bool *released) {
    stockd_ctx *ctx = ws->w->ctx;
    uint64_t limit = (uint64_t)ctx->cfg->queue_deadline_ms * 1000000u, oldest = UINT64_MAX;
    for (unsigned i = 0; i < n; i++) {
        ws->items[i] = (stockdb_item){.request_id = jobs[i]->request_id};
        if (jobs[i]->arrived_ns < oldest) oldest = jobs[i]->arrived_ns;
    }
    /* --fence off (the paused-holder demonstration only) sends no token and skips the
     * pre-commit check, as a client that trusts its lease would. */
    bool fence = ctx->cfg->fence;
    bool release_early = ctx->cfg->pitfall == STOCKD_PITFALL_RELEASE_BEFORE_COMMIT;
    batch_guard g = {.lock = fence ? h : NULL,
                     .release = release_early ? h : NULL,
                     .deadline_ns = limit ? oldest + limit : 0};
    stockdb_batch b = {.product_id = h->product_id,
                       .segment = (int32_t)h->segment,
                       .fence = fence ? lock_token(&h->hold) : 0,
                       .fence_kind = lock_set_kind(ctx->locks)->fence_kind,
                       .guard = fence || limit || release_early ? batch__guard_check : NULL,
                       .guard_arg = &g,
                       .think_us = think_us(ws),
                       .items = ws->items,
                       .n = n};
    int rc = STOCKDB_ERR_DEADLOCK;
    for (int attempt = 0; attempt < 3 && rc == STOCKDB_ERR_DEADLOCK; attempt++)
        rc = stockdb_deduct_batch(ws->db, ctx->cfg->strategy, &b);
    *released = g.released;
    count_statements(ws);
    if (rc == STOCKDB_ERR_GUARD && g.late) return true;
    batch__note_db_error(ws, "deduction", rc);
    stockd_metrics_batch(n);
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
    return false;
}

/* Answers the jobs of jobs[0..n-1] that are past their deadline (503, nothing
 * deducted) and packs the rest to the front; returns how many are left. */
unsigned batch__drop_expired(worker_state *ws, stockd_job **jobs, unsigned n) {
    uint64_t now = stockd_now_ns();
    unsigned live = 0;
    for (unsigned i = 0; i < n; i++) {
        if (batch__expired(ws->w->ctx, jobs[i], now))
            batch__finish_expired(ws, jobs[i]);
        else
            jobs[live++] = jobs[i];
    }
    return live;
}
