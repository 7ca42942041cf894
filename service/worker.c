/* worker.c: the threads that do the blocking work of a request.
 *
 * Each worker owns one stockdb handle (one MySQL connection, never shared) and pops
 * jobs one at a time. A deduction goes through the combiner exactly when its mode takes
 * a lock per product: the mode's row in stockd_modes (modes.c) says so (`batched`), and
 * that table, not this comment, is the list of such modes. Such a deduction goes this
 * way:
 *
 *   pop ──> pre-check: one plain read ── stock <= 0 ──> answer sold_out (no lock)
 *             │ stock > 0
 *             v
 *           combiner ── the product has a leader ──> wait there; the worker pops on
 *             │ none: this worker leads the product
 *             v
 *           acquire the product's lock ──> take up to --batch-max waiting jobs ──>
 *           one transaction for all (read once, stock - k, one INSERT, guard, COMMIT)
 *           ──> release (or keep it for --lock-passes batches while more wait; in
 *               mode zk the node may stay cached for the next batch, --lock-cache-ms)
 *           ──> answer every job of the batch ──> next batch, until none waits
 *
 * With --cross-products K (a lock kind that can try one: cross__on), the batch also
 * takes the waiting deductions of up to K-1 other products whose locks a TRY gets now
 * (never waited for), in the same transaction, each row under its own token. Its own
 * product's lock, when busy, is passed on to another waiting product, or waited for by
 * a leader the combiner does not count meanwhile, so that a lock held by another
 * instance does not hold up the products whose locks are free: at each step lead()
 * asks the combiner what next (stockd_combiner_next). The batch across products is
 * cross.c's; one product's batch (its lock, its transaction, its answers) is batch.c's,
 * below both (worker_int.h draws the layers).
 *
 * With segmented stock (--segments K) the slot, the lock and the batch are one
 * segment's: a deduction starts at a random segment and, when the batch finds that
 * segment empty, moves on to the next one (next_segment) until it is deducted or has
 * found all K empty and a read of the whole stock confirms it. One product's segments
 * have at most half the workers as leaders (combiner.c); the others' jobs wait in WAITING slots.
 *
 * The order inside a batch is fixed: acquire, transaction (whose guard re-checks the
 * lock right before COMMIT), commit, and only then release, so that no other holder
 * can read the row between our write and our commit. Modes none and atomic take no lock
 * and serve each deduction on its own, as the seed's experiment does. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker_int.h"

/* ---------------------------------------------------------------- per request */

/* One deduction without a lock or the combiner (modes none, atomic), by the mode's
 * strategy; a deadlock victim was rolled back whole, so it is retried (twice). Its
 * deadline is checked before COMMIT too. */
static void serve_unlocked(worker_state *ws, stockd_job *job) {
    stockd_ctx *ctx = ws->w->ctx;
    stockdb_strategy s = ctx->cfg->strategy;
    uint64_t limit = (uint64_t)ctx->cfg->queue_deadline_ms * 1000000u;
    batch_guard g = {.deadline_ns = limit ? job->arrived_ns + limit : 0};
    stockdb_request req = {.product_id = job->product_id,
                           .request_id = job->request_id,
                           .guard = limit ? batch__guard_check : NULL,
                           .guard_arg = &g,
                           .think_us = think_us(ws)};
    stockdb_result res = {0};
    stockd_answer a = {.id = job->product_id};
    int rc = STOCKDB_ERR_DEADLOCK;

    for (int attempt = 0; attempt < 3 && rc == STOCKDB_ERR_DEADLOCK; attempt++)
        rc = stockdb_deduct(ws->db, s, &req, &res);
    count_statements(ws);
    if (rc == STOCKDB_ERR_GUARD && g.late) {
        batch__finish_expired(ws, job);
        return;
    }
    batch__note_db_error(ws, "deduction", rc);
    if (rc == STOCKDB_OK) stockd_stockwatch_note(job->product_id, res.stock);
    stockd_answer_from_db(&a, LOCK_OK, rc, &res);
    batch__finish(ws, job, &a);
}

/* The sold-out pre-check: one plain read before the lock. The stock only ever falls
 * under deductions, so a stock <= 0 read now is the true answer at the moment of the
 * read: answering sold out without the lock is linearizable. A key that bought before
 * gets its order back. Returns true if the job was answered. Made only when the
 * product's sold-out hint is set (see combiner.c): for a product in stock the read
 * would be one more statement per deduction, and the batch reads the stock anyway. */
static bool precheck(worker_state *ws, stockd_job *job) {
    stockd_answer a = {.id = job->product_id};
    int32_t stock = 0, order_product = 0;
    uint64_t order_id = 0;
    int rc =
        stockdb_peek(ws->db, job->product_id, job->request_id, &stock, &order_id, &order_product);
    count_statements(ws);
    if (rc == STOCKDB_OK) stockd_stockwatch_note(job->product_id, stock);
    if (rc == STOCKDB_OK && !order_id && stock > 0) {
        stockd_metrics_precheck(false);
        return false;
    }
    batch__note_db_error(ws, "sold-out pre-check", rc);
    if (rc == STOCKDB_OK && order_id) {
        stockdb_result res = {
            .outcome = STOCKDB_DEDUCTED, .stock = stock, .order_id = order_id, .replayed = true};
        rc = order_product == job->product_id ? STOCKDB_OK : STOCKDB_ERR_KEY_REUSED;
        stockd_answer_from_db(&a, LOCK_OK, rc, &res);
    } else if (rc == STOCKDB_OK) {
        stockd_metrics_precheck(true);
        stockdb_result res = {.outcome = STOCKDB_SOLD_OUT, .stock = stock};
        stockd_answer_from_db(&a, LOCK_OK, rc, &res);
    } else {
        stockd_answer_from_db(&a, LOCK_OK, rc, NULL);
    }
    batch__finish(ws, job, &a);
    return true;
}

/* ---------------------------------------------------------------- batches */

/* How many times a deduction that found every segment empty starts its walk again when
 * the product's whole stock, read then, still shows a unit. */
#define SEGMENT_REWALKS 3
#define TOTAL_UNREAD    INT32_MIN

/* A deduction of split stock that found its segment empty (article 001's segmented
 * stock): it moves on to the next segment, through the head of the queue, so any worker
 * takes it to that segment's slot and lock. When it has found every segment empty, it
 * is not yet sold out: each segment was empty when visited, not all at one moment, and
 * one visited early may have been restocked since (issue 16 #9). So the product's whole
 * stock is read once (*total caches it for the batch; TOTAL_UNREAD before): above 0,
 * the walk begins again (at most SEGMENT_REWALKS times); at or below 0 (or unreadable:
 * the walk's own finding stands) the answer is sold out, linearizable at that read, as
 * stock only falls under deductions. Returns true if the job was requeued, false if
 * the caller answers it. */
static bool next_segment(worker_state *ws, stockd_job *job, const stockd_answer *a,
                         int32_t *total) {
    stockd_ctx *ctx = ws->w->ctx;
    unsigned k = ctx->cfg->segments;
    if (!job->segment || a->result != STOCKD_R_SOLD_OUT) return false;
    if (++job->segs_empty >= k) {
        if (job->rewalks < SEGMENT_REWALKS && *total == TOTAL_UNREAD) {
            int rc = stockdb_get_stock(ws->db, job->product_id, total);
            count_statements(ws);
            batch__note_db_error(ws, "stock read after a walk", rc);
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

/* Answers the product's waiting jobs that arrived before `before` with the lock's
 * failure code. */
static void fail_waiting(worker_state *ws, int32_t product_id, unsigned segment, int lock_rc,
                         uint64_t before) {
    stockd_ctx *ctx = ws->w->ctx;
    unsigned n;
    while ((n = stockd_combiner_take(ws->w->combiner, product_id, segment, ws->jobs,
                                     ctx->cfg->batch_max, before)) > 0) {
        for (unsigned i = 0; i < n; i++) {
            stockd_answer a = {.id = product_id};
            stockd_answer_from_db(&a, lock_rc, STOCKDB_OK, NULL);
            const char *m = lock_failure_message(ctx->locks, lock_rc);
            if (m) a.message = m;
            batch__finish(ws, ws->jobs[i], &a);
        }
    }
}

static unsigned drop_expired(worker_state *ws, unsigned n) {
    return batch__drop_expired(ws, ws->jobs, n);
}

/* The lock of the slot this worker leads, as the combiner's step says: waited for, or
 * tried first and, when busy, passed on (the worker then leads another slot) or waited
 * for set aside (combiner.c). A try that fails otherwise (the service is down, say)
 * falls back to the plain wait. LOCK_OK with *lock held, the lock's error, or
 * STOCKD_COMBINER_MOVED with *product_id and *segment now the slot it leads. */
static int acquire(worker_state *ws, int32_t *product_id, unsigned *segment, product_lock *lock) {
    stockd_ctx *ctx = ws->w->ctx;
    stockd_combiner *c = ws->w->combiner;
    if (stockd_combiner_next(c, product_id, segment, STOCKD_COMBINER_AT_LOCK, 0) ==
        STOCKD_COMBINER_TRY) {
        int rc = batch__lock_acquire(ctx->locks, *product_id, *segment, true, lock);
        if (rc == LOCK_OK) return rc;
        if (rc == LOCK_ERR_TIMEOUT) {
            stockd_metrics_cross_busy();
            if (stockd_combiner_next(c, product_id, segment, STOCKD_COMBINER_AT_BUSY,
                                     CROSS_BUSY_NS) == STOCKD_COMBINER_MOVED)
                return STOCKD_COMBINER_MOVED;
        }
    }
    return batch__lock_acquire(ctx->locks, *product_id, *segment, false, lock);
}

/* Serves the slot (product, or segment of it) this worker leads, then any the combiner
 * hands it, until the combiner says it leads no more. */
static void lead(worker_state *ws, int32_t product_id, unsigned segment) {
    stockd_ctx *ctx = ws->w->ctx;
    stockd_combiner *c = ws->w->combiner;
    product_lock lock;
    stockd_answer *answers = malloc(ctx->cfg->batch_max * sizeof(*answers));
    bool held = false;
    unsigned passes = 0;

    for (;;) {
        if (!held) {
            uint64_t t0 = stockd_now_ns();
            /* --pitfall snapshot-before-lock: the transaction's first read, and so its
             * snapshot, comes before the wait for the lock. */
            if (ctx->cfg->pitfall == STOCKD_PITFALL_SNAPSHOT_BEFORE_LOCK)
                (void)stockdb_open_snapshot(ws->db, product_id);
            int rc = answers ? acquire(ws, &product_id, &segment, &lock) : LOCK_ERR_NOMEM;
            if (rc == STOCKD_COMBINER_MOVED) continue; /* another slot now; its lock next */
            stockd_metrics_lock_wait(stockd_now_ns() - t0);
            if (rc != LOCK_OK) {
                if (ctx->cfg->pitfall == STOCKD_PITFALL_SNAPSHOT_BEFORE_LOCK)
                    stockdb_end_transaction(ws->db);
                if (rc != LOCK_ERR_TIMEOUT)
                    batch__log_failure(ws, "lock", batch__lock_text(ctx, rc));
                /* The jobs that waited through the whole attempt get its failure; the
                 * ones that came during it try again, unless the lock is unusable now. */
                fail_waiting(ws, product_id, segment, rc, rc == LOCK_ERR_TIMEOUT ? t0 : UINT64_MAX);
                if (stockd_combiner_next(c, &product_id, &segment, STOCKD_COMBINER_AT_DONE, 0) ==
                    STOCKD_COMBINER_DONE)
                    break;
                continue;
            }
            held = true;
            passes = 0;
        }

        unsigned n =
            stockd_combiner_take(c, product_id, segment, ws->jobs, ctx->cfg->batch_max, UINT64_MAX);
        /* Expired jobs leave the batch unanswered by the database. */
        unsigned live = drop_expired(ws, n);
        bool released = false;
        if (live > 0 && cross__on(ctx, segment)) {
            /* With other products whose locks are free now (--cross-products). */
            live = cross__run(ws, &lock, live, answers);
        } else {
            while (live > 0 && batch__run(ws, ws->jobs, live, &lock, answers, &released)) {
                /* Rolled back at the deadline of its oldest job. Those past their deadline
                 * get 503; the rest, within theirs, run again at once under the same lock.
                 * Each round answers at least the oldest, so this ends. */
                live = drop_expired(ws, live);
            }
        }
        passes++;

        /* Keep the lock for the next batch only within the pass limit, while more wait
         * and the lock is surely still ours; otherwise release before answering, so the
         * next holder starts as early as possible. */
        bool keep = !released && passes < ctx->cfg->lock_passes &&
                    stockd_combiner_waiting(c, product_id, segment) > 0 &&
                    lock_check(&lock.hold) == LOCK_OK;
        if (released) {
            held = false;
        } else if (!keep) {
            /* Lock caching (zk): the node is kept for --lock-cache-ms, so that this
             * product's next batch here starts without a ZooKeeper round, until another
             * instance queues for it (lock/zklock.h). --batch-max 1 keeps the seed's
             * one acquisition per deduction. */
            unsigned cache_ms = ctx->cfg->batch_max > 1 ? ctx->cfg->lock_cache_ms : 0;
            int rel = lock_release_cached(&lock.hold, (int)cache_ms);
            if (rel != LOCK_OK) batch__log_failure(ws, "lock release", batch__lock_text(ctx, rel));
            held = false;
        }
        int32_t total = TOTAL_UNREAD;
        for (unsigned i = 0; i < live; i++)
            if (!next_segment(ws, ws->jobs[i], &answers[i], &total))
                batch__finish(ws, ws->jobs[i], &answers[i]);
        /* The slot closes, or this worker goes on with it, or with a slot that waits
         * for a leader (combiner.c). */
        if (!held && stockd_combiner_next(c, &product_id, &segment, STOCKD_COMBINER_AT_DONE, 0) ==
                         STOCKD_COMBINER_DONE)
            break;
    }
    free(answers);
}

static void serve_deduct(worker_state *ws, stockd_job *job) {
    stockd_ctx *ctx = ws->w->ctx;
    if (batch__expired(ctx, job, stockd_now_ns())) {
        batch__finish_expired(ws, job);
        return;
    }
    if (ctx->cfg->lock == STOCKD_LOCK_REDIS_STOCK) {
        stockd_redisstock_serve(ws, job); /* Redis holds the count: no lock, no combiner */
        return;
    }
    bool batched = stockd_mode_of(ctx->cfg->lock)->batched;
    if (!batched && ctx->cfg->strategy == STOCKDB_READ_CHECK_UPDATE) {
        serve_unlocked(ws, job); /* mode none: the seed's race, untouched */
        return;
    }
    /* The pre-check serves atomic too: its sold-out answer would otherwise cost an
     * UPDATE that changes nothing, a read of why, a ROLLBACK and a key look-up. */
    if (ctx->cfg->precheck && stockd_stockwatch_sold_out(job->product_id) && precheck(ws, job))
        return;
    if (!batched) {
        serve_unlocked(ws, job); /* atomic */
        return;
    }
    if (ctx->cfg->segments > 1 && !job->segment)
        job->segment = (uint16_t)(1 + (unsigned)rand_r(&ws->seed) % ctx->cfg->segments);
    stockd_metrics_combined();
    switch (stockd_combiner_enter(ws->w->combiner, job)) {
    case STOCKD_COMBINER_LEADER:
        lead(ws, job->product_id, job->segment);
        return;
    case STOCKD_COMBINER_FOLLOWER:
        return; /* the product's leader answers it */
    default: {
        stockd_answer a = {.result = STOCKD_R_INTERNAL,
                           .id = job->product_id,
                           .message = "out of memory; nothing was deducted"};
        batch__finish(ws, job, &a);
        return;
    }
    }
}

/* ---------------------------------------------------------------- reads */

static void serve_stock(worker_state *ws, stockd_job *job) {
    stockd_answer a = {.id = job->product_id};
    int32_t stock = 0;
    int rc = stockdb_get_stock(ws->db, job->product_id, &stock);

    count_statements(ws);
    batch__note_db_error(ws, "stock read", rc);
    stockd_answer_from_db(&a, LOCK_OK, rc, NULL);
    if (rc == STOCKDB_OK) {
        a.has_stock = true;
        a.stock = stock;
    }
    if (rc == STOCKDB_ERR_CONNECT) a.message = "MySQL is unavailable";
    batch__finish(ws, job, &a);
}

/* /health: MySQL through this worker's connection, and the lock kind's service (the
 * ZooKeeper session's state, or a PING to Redis) where it has one. */
static void serve_health(worker_state *ws, stockd_job *job) {
    stockd_ctx *ctx = ws->w->ctx;
    const lock_kind *kind = lock_set_kind(ctx->locks);
    int db_rc = stockdb_ping(ws->db);
    char lock_err[512];
    int lock_rc = lock_ping(ctx->locks, lock_err, sizeof(lock_err));
    bool zk = kind->service && strcmp(kind->service, "zookeeper") == 0;
    /* The lock services /health names beside MySQL and ZooKeeper (the lock table's is
     * MySQL itself). */
    const char *service =
        kind->service && (strcmp(kind->service, "redis") == 0 || strcmp(kind->service, "etcd") == 0)
            ? kind->service
            : NULL;
    bool ok = db_rc == STOCKDB_OK && lock_rc == LOCK_OK;

    job->status = ok ? 200 : 503;
    job->result = ok ? STOCKD_R_OK : STOCKD_R_UNAVAILABLE;
    job->body = stockd_health_json(ok, db_rc == STOCKDB_OK ? NULL : stockdb_errstr(ws->db),
                                   !zk                  ? "unused"
                                   : lock_rc == LOCK_OK ? "up"
                                                        : "down",
                                   zk && lock_rc != LOCK_OK ? lock_err : NULL, service,
                                   !service             ? NULL
                                   : lock_rc == LOCK_OK ? "up"
                                                        : "down",
                                   service && lock_rc != LOCK_OK ? lock_err : NULL,
                                   stockd_lock_mode_name(ctx->cfg->lock), ctx->cfg->instance);
    ctx->complete(job);
}

/* The longest a worker's connection waits for one statement (stockdb_config's
 * rw_timeout_s, the client's read and write timeout; the session's row-lock wait is set
 * 2 s below it, so a long row-lock wait ends as a clean rollback). The pre-commit check
 * sends no COMMIT once the batch's oldest deadline has passed, but a statement sent just
 * before it, the COMMIT above all, could still run on: this bounds how long. A fifth of
 * --queue-deadline-ms, within 2..10 s: at the defaults 25 s + 5 s = 30 s, nginx's
 * proxy_read_timeout, so by the time nginx gives up the worker has its answer or has
 * given up too (and a COMMIT whose reply it gave up on is confirmed by its key, as any
 * lost reply is). Why the client's timeout rather than MariaDB's max_statement_time:
 * the server does not interrupt a COMMIT once it runs, so only the client's wait can be
 * bounded there; a row-lock wait already ends cleanly (innodb_lock_wait_timeout), and a
 * statement killed by max_statement_time would need stockdb.c to map its error. */
static unsigned statement_cap_s(const stockd_config *c, unsigned configured) {
    unsigned cap = configured ? configured : 10, fifth = c->queue_deadline_ms / 5000;
    if (!c->queue_deadline_ms) return cap;
    if (fifth < 2) fifth = 2;
    return fifth < cap ? fifth : cap;
}

static void *worker_main(void *arg) {
    worker_state ws = {.w = arg};
    stockd_ctx *ctx = ws.w->ctx;
    stockd_job *job;

    ws.seed = (unsigned)stockd_now_ns() ^ (unsigned)(uintptr_t)&ws;
    stockdb_config dbc = ctx->db;
    dbc.rw_timeout_s = statement_cap_s(ctx->cfg, dbc.rw_timeout_s);
    ws.db = stockdb_new(&dbc, ctx->cfg->instance);
    memset(dbc.password, 0, sizeof(dbc.password)); /* the handle keeps its own copy */
    ws.redis = stockd_redisstock_open(ctx);
    /* Room for one batch, made once: --batch-max 64 is about 4 KiB a worker (the
     * largest, 1024, about 60 KiB), so it never matters next to the MySQL connection,
     * which holds about 150 KiB (Connector/C's buffers and prepared statements). */
    ws.jobs = malloc(ctx->cfg->batch_max * sizeof(*ws.jobs));
    ws.items = malloc(ctx->cfg->batch_max * sizeof(*ws.items));
    while ((job = stockd_jobq_pop(ctx->queue)) != NULL) {
        if (!ws.db || !ws.jobs || !ws.items) {
            /* Out of memory when the worker started: answer rather than drop. */
            job->result = STOCKD_R_INTERNAL;
            job->status = 500;
            job->body = NULL;
            ctx->complete(job);
            continue;
        }
        switch (job->kind) {
        case STOCKD_JOB_DEDUCT:
            serve_deduct(&ws, job);
            break;
        case STOCKD_JOB_STOCK:
            serve_stock(&ws, job);
            break;
        case STOCKD_JOB_HEALTH:
            serve_health(&ws, job);
            break;
        case STOCKD_JOB_LOCK_VIEW:
            stockd_lockview_serve(ctx, job);
            break;
        }
    }
    free(ws.jobs);
    free(ws.items);
    stockdb_free(ws.db);
    stockredis_free(ws.redis);
    return NULL;
}

stockd_workers *stockd_workers_start(stockd_ctx *ctx) {
    stockd_workers *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->ctx = ctx;
    /* A hot split product may tie up at most half the workers (combiner.c), so others
     * are left for other products and /health (issue 16 #8). Across products, as many
     * leaders again, each taking up to K products a batch; the other new products wait
     * for one of them. */
    unsigned half = ctx->cfg->workers / 2 ? ctx->cfg->workers / 2 : 1;
    w->combiner = stockd_combiner_new(half, cross__on(ctx, 0) ? half : 0);
    w->threads = calloc(ctx->cfg->workers, sizeof(pthread_t));
    if (!w->combiner || !w->threads) goto fail;
    /* Default thread attributes on purpose: a stack is only resident as far as it is
     * used (about 12 KiB a worker, measured), so a smaller reservation than glibc's
     * 8 MiB would save address space, not memory, and could overflow under the
     * sanitizers, whose frames are several times larger. */
    for (; w->n < ctx->cfg->workers; w->n++) {
        if (pthread_create(&w->threads[w->n], NULL, worker_main, w) != 0) goto fail;
    }
    return w;
fail:
    /* Threads already running exit once the queue is closed. */
    stockd_jobq_close(ctx->queue);
    stockd_workers_join(w);
    return NULL;
}

void stockd_workers_join(stockd_workers *w) {
    if (!w) return;
    for (unsigned i = 0; i < w->n; i++)
        pthread_join(w->threads[i], NULL);
    free(w->threads);
    stockd_combiner_free(w->combiner);
    free(w);
}
