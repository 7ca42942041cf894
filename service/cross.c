/* cross.c: batches across products (--cross-products K, issue 19 #2), the part of a
 * worker's batch that takes other products' waiting deductions along.
 *
 * The leader holds its own product's lock (waited for as ever). Before it takes its own
 * jobs it claims up to K-1 products whose jobs wait with no leader (combiner.c's WAITING
 * slots; at most --batch-max - 1, so that each has room in the batch however many of
 * its own wait), and TRIES their locks at once (one round trip with zk): a lock not free
 * now is not waited for (our place in its queue is given up at once), its slot goes back
 * and its jobs to a later batch. So a leader never waits for a lock while it holds
 * another: no hold-and-wait, no deadlock. The products it got run as ONE transaction
 * (stockdb_deduct_multi), each row with its own fenced compare-and-set, under one guard
 * that re-checks EVERY lock before the one COMMIT: a lock lost, a fence refusal, or
 * anything but the common case commits nothing, and the batch is then split: each
 * product runs again on its own under its lock (txn__run), which answers each job as a
 * batch of one product does. Never a half-done batch.
 *
 * Everything here runs on a worker thread, with that worker's own worker_state
 * (worker_int.h), except cross__on, which only reads the configuration. */
#include <stdio.h>
#include <string.h>

#include "worker_int.h"

typedef struct cross_group {
    product_lock lock; /* group 0: the leader's own (a copy; lead() releases it) */
    unsigned first, n; /* its jobs: ws->jobs[first .. first + n - 1] */
} cross_group;

typedef struct cross_guard {
    const cross_group *g;
    unsigned ng;
    bool check_locks;     /* --fence on */
    uint64_t deadline_ns; /* the oldest job's; 0 = none */
} cross_guard;

static int cross_guard_check(void *arg) {
    const cross_guard *x = arg;
    if (x->deadline_ns && stockd_now_ns() > x->deadline_ns) return 1;
    for (unsigned i = 0; x->check_locks && i < x->ng; i++)
        if (lock_check(&x->g[i].lock.hold) != LOCK_OK) return 1;
    return 0;
}

/* Does this leader batch across products? Only mode zk-like kinds that can try a lock,
 * batched, unsplit, and without a pitfall demonstration. */
bool cross__on(const stockd_ctx *ctx, unsigned segment) {
    const stockd_config *c = ctx->cfg;
    return c->cross_products > 1 && c->batch_max > 1 && !segment && c->segments <= 1 &&
           c->pitfall == STOCKD_PITFALL_NONE && lock_can_try(ctx->locks);
}

unsigned cross__claim(worker_state *ws, int32_t *out) {
    const stockd_config *cfg = ws->w->ctx->cfg;
    unsigned max = cfg->cross_products - 1;
    if (max > cfg->batch_max - 1) max = cfg->batch_max - 1;
    return stockd_combiner_claim(ws->comb, out, max);
}

/* The claimed products' locks, all tried at once (zk: one round trip): a lock not free
 * now is not waited for (its slot goes back, not picked again for a while); each one got
 * becomes a group with the jobs its slot holds (as many as fit), its expired dropped.
 * g[0] is the leader's own. Returns how many groups, and counts the busy in *busy. */
static unsigned take_claimed(worker_state *ws, cross_group *g, unsigned used, const int32_t *pids,
                             unsigned nc, unsigned *busy) {
    stockd_ctx *ctx = ws->w->ctx;
    unsigned max = ctx->cfg->batch_max, ng = 1;
    char names[STOCKDB_MULTI_MAX][24];
    const char *namev[STOCKDB_MULTI_MAX];
    lock_hold tried[STOCKDB_MULTI_MAX];
    int rcs[STOCKDB_MULTI_MAX];
    for (unsigned i = 0; i < nc; i++) {
        namev[i] = names[i];
        snprintf(names[i], sizeof(names[i]), "product_%d", pids[i]);
    }
    if (nc) (void)lock_try_acquire_many(ctx->locks, namev, nc, tried, rcs);
    for (unsigned i = 0; i < nc; i++) {
        if (rcs[i] != LOCK_OK) { /* busy (held or queued for elsewhere): not waited for */
            if (rcs[i] != LOCK_ERR_TIMEOUT)
                answer__log_failure(ws, "lock (tried)", answer__lock_text(ctx, rcs[i]));
            (*busy)++;
            stockd_combiner_unclaim(ws->comb, pids[i], CROSS_BUSY_NS);
            continue;
        }
        unsigned k =
            stockd_combiner_take(ws->comb, pids[i], 0, ws->jobs + used, max - used, UINT64_MAX);
        k = answer__drop_late(ws, ws->jobs + used, k);
        g[ng++] = (cross_group){.lock = {tried[i], pids[i], 0}, .first = used, .n = k};
        used += k;
    }
    return ng;
}

/* The groups with jobs as ONE transaction, under one guard that re-checks every lock
 * and the oldest job's deadline before the one COMMIT. STOCKDB_SPLIT when fewer than
 * two products have jobs (each then runs on its own). */
static int run_multi(worker_state *ws, const cross_group *g, unsigned ng, unsigned busy) {
    const stockd_config *cfg = ws->w->ctx->cfg;
    uint64_t limit = (uint64_t)cfg->queue_deadline_ms * 1000000u, oldest = UINT64_MAX;
    stockdb_batch bs[STOCKDB_MULTI_MAX];
    unsigned nb = 0;
    for (unsigned i = 0; i < ng; i++) {
        if (!g[i].n) continue;
        for (unsigned j = g[i].first; j < g[i].first + g[i].n; j++) {
            ws->items[j] = (stockdb_item){.request_id = ws->jobs[j]->request_id,
                                          .user = ws->jobs[j]->user[0] ? ws->jobs[j]->user : NULL};
            if (ws->jobs[j]->arrived_ns < oldest) oldest = ws->jobs[j]->arrived_ns;
        }
        bs[nb++] = (stockdb_batch){.product_id = g[i].lock.product_id,
                                   .fence = cfg->fence ? lock_token(&g[i].lock.hold) : 0,
                                   .fence_kind = lock_set_kind(ws->w->ctx->locks)->fence_kind,
                                   .think_us = think_us(ws),
                                   .items = ws->items + g[i].first,
                                   .n = g[i].n};
    }
    cross_guard xg = {.g = g,
                      .ng = ng,
                      .check_locks = cfg->fence,
                      .deadline_ns = limit && oldest != UINT64_MAX ? oldest + limit : 0};
    int rc = STOCKDB_SPLIT, attempt = 0;
    if (nb > 1) do
            rc = stockdb_deduct_multi(ws->db, cfg->strategy, bs, nb, cross_guard_check, &xg);
        while (txn_again(STOCKD_TXN_DEDUCTION, rc, attempt++));
    count_statements(ws);
    if (nb > 1) stockd_metrics_batch_products(rc == STOCKDB_OK ? nb : 1, busy);
    if (rc != STOCKDB_OK && rc != STOCKDB_SPLIT)
        answer__note_db_error(ws, "deduction across products", rc);
    return rc;
}

/* Fills the answers of group x's jobs from the transaction's outcome rc; returns how
 * many are left to answer (a split's expired ones are answered and packed out). */
static unsigned group_answers(worker_state *ws, cross_group *x, int rc, stockd_answer *answers) {
    unsigned n = x->n, first = x->first;
    product_lock *h = &x->lock;
    if (n && rc == STOCKDB_OK) {
        int32_t left = INT32_MAX;
        stockd_metrics_batch(n);
        for (unsigned j = first; j < first + n; j++) {
            answers[j] = (stockd_answer){.id = h->product_id};
            stockd_answer_from_db(&answers[j], LOCK_OK, ws->items[j].rc, &ws->items[j].res);
            if (ws->items[j].rc == STOCKDB_OK && ws->items[j].res.stock < left)
                left = ws->items[j].res.stock;
        }
        if (left != INT32_MAX) stockd_stockwatch_note(h->product_id, left);
    } else if (n && rc == STOCKDB_SPLIT) {
        /* Nothing committed: this product on its own, under its lock (re-checked). */
        bool released = false;
        while (n > 0 && txn__run(ws, ws->jobs + first, n, h, answers + first, &released))
            n = answer__drop_late(ws, ws->jobs + first, n);
    } else if (n) {
        /* The COMMIT's outcome is in doubt (or it failed after a lost reply): the whole
         * transaction's, so every job gets that answer. */
        for (unsigned j = first; j < first + n; j++) {
            answers[j] = (stockd_answer){.id = h->product_id};
            stockd_answer_from_db(&answers[j], LOCK_OK, rc, NULL);
        }
    }
    return n;
}

/* The extras' locks, jobs or none: let go (or cached) together, then their slots back. */
static void give_back(worker_state *ws, const cross_group *g, unsigned ng) {
    stockd_ctx *ctx = ws->w->ctx;
    lock_hold held[STOCKDB_MULTI_MAX];
    int rcs[STOCKDB_MULTI_MAX];
    for (unsigned i = 1; i < ng; i++)
        held[i - 1] = g[i].lock.hold;
    if (ng > 1) (void)lock_release_many(held, ng - 1, (int)ctx->cfg->lock_cache_ms, rcs);
    for (unsigned i = 1; i < ng; i++) {
        if (rcs[i - 1] != LOCK_OK)
            answer__log_failure(ws, "lock release", answer__lock_text(ctx, rcs[i - 1]));
        stockd_combiner_unclaim(ws->comb, g[i].lock.product_id, 0);
    }
}

unsigned cross__run(worker_state *ws, product_lock *primary, unsigned live, const int32_t *claimed,
                    unsigned nc, stockd_answer *answers) {
    cross_group g[STOCKDB_MULTI_MAX];
    unsigned busy = 0;
    g[0] = (cross_group){.lock = *primary, .first = 0, .n = live};
    unsigned ng = take_claimed(ws, g, live, claimed, nc, &busy);
    int rc = run_multi(ws, g, ng, busy);
    unsigned out = 0;
    for (unsigned i = 0; i < ng; i++) {
        unsigned n = group_answers(ws, &g[i], rc, answers), first = g[i].first;
        memmove(ws->jobs + out, ws->jobs + first, n * sizeof(*ws->jobs));
        memmove(answers + out, answers + first, n * sizeof(*answers));
        out += n;
    }
    give_back(ws, g, ng);
    return out;
}
