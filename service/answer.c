/* answer.c: a job's end, the one place that writes a job's status, result and body,
 * counts it and hands it back to the HTTP side; and the worker's report of a failure.
 * The bottom of the worker's files (worker_int.h); docs/architecture.md tells the
 * request path. Everything here runs on a worker thread with its own worker_state. */
#include <time.h>

#include "worker_int.h"

/* Logs a database or lock failure at most once a second per worker, so an outage does
 * not turn into one log line per request. */
void answer__log_failure(worker_state *ws, const char *what, const char *detail) {
    time_t now = time(NULL);
    if (now == ws->last_log) return;
    ws->last_log = now;
    stockd_log("warn", "%s: %s", what, detail);
}

void answer__note_db_error(worker_state *ws, const char *what, int rc) {
    if (rc == STOCKDB_OK || rc == STOCKDB_ERR_NOT_FOUND || rc == STOCKDB_ERR_KEY_REUSED) return;
    stockd_metrics_db_error(rc);
    answer__log_failure(ws, what, stockdb_errstr(ws->db));
}

/* A text for a lock code, for the log: the kind's own message where it has one. */
const char *answer__lock_text(const stockd_ctx *ctx, int rc) {
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

/* Is r an answer a deduction in doubt may get? Only what the ledger decided under the
 * lock and the request id (the owner's order found by its key, or a fresh one; sold out;
 * the key taken by another product; no such product) is true of it; every other answer
 * (the deadline, the lock, the database, shutdown, memory) says nothing was deducted,
 * which the owner may have done. */
static bool true_in_doubt(stockd_result r) {
    return r == STOCKD_R_DEDUCTED || r == STOCKD_R_SOLD_OUT || r == STOCKD_R_KEY_CONFLICT ||
           r == STOCKD_R_NOT_FOUND || r == STOCKD_R_UNKNOWN;
}

void answer__complete(worker_state *ws, stockd_job *job, unsigned status, stockd_result r,
                      char *body) {
    if (job->in_doubt && !true_in_doubt(r)) {
        stockd_answer a = {.result = STOCKD_R_UNKNOWN,
                           .id = job->product_id,
                           .message = "a frame carrying this deduction was sent to the "
                                      "product's owner and not answered, and it could not be "
                                      "served here: it may have been deducted; ask again with "
                                      "the same Idempotency-Key"};
        free(body);
        r = a.result;
        status = stockd_answer_status(r);
        body = stockd_answer_json(&a, ws->w->ctx->cfg->instance);
    }
    job->status = status;
    job->result = r;
    job->body = body;
    if (job->kind == STOCKD_JOB_DEDUCT) stockd_metrics_deduction(stockd_now_ns() - job->arrived_ns);
    ws->w->ctx->complete(job);
}

void answer__send(worker_state *ws, stockd_job *job, const stockd_answer *a) {
    answer__complete(ws, job, stockd_answer_status(a->result), a->result,
                     stockd_answer_json(a, ws->w->ctx->cfg->instance));
}

/* A job that waited past --queue-deadline-ms is answered without deducting: its client
 * (or the proxy in front) has most likely given up on it already. It is checked when a
 * job is taken and again right before its batch's COMMIT (txn__guard_check). */
bool answer__expired(const stockd_ctx *ctx, const stockd_job *job, uint64_t now) {
    uint64_t limit = (uint64_t)ctx->cfg->queue_deadline_ms * 1000000u;
    return limit && now - job->arrived_ns > limit;
}

void answer__late(worker_state *ws, stockd_job *job) {
    stockd_answer a = {.result = STOCKD_R_OVERLOADED,
                       .id = job->product_id,
                       .message = "the request was not served within the queue deadline; "
                                  "nothing was deducted"};
    answer__send(ws, job, &a);
}

unsigned answer__drop_late(worker_state *ws, stockd_job **jobs, unsigned n) {
    uint64_t now = stockd_now_ns();
    unsigned live = 0;
    for (unsigned i = 0; i < n; i++) {
        if (answer__expired(ws->w->ctx, jobs[i], now))
            answer__late(ws, jobs[i]);
        else
            jobs[live++] = jobs[i];
    }
    return live;
}
