/* worker_int.h: private to service/. The three files of a deduction in a locked mode,
 * in layers, each calling only the ones below it:
 *
 *   worker.c   the worker threads: pop a job, serve it, lead a slot of the combiner
 *   cross.c    a batch across products (--cross-products), built on batch.c
 *   batch.c    one product's batch: its lock, its transaction, its answers
 *
 * and what they share: a worker's state and a product's lock.
 *
 * Threads: a worker_state belongs to its worker thread alone (its MySQL connection, its
 * room for one batch, its log throttle); everything below that takes one is called only
 * on that thread, with its own. cross__on reads the configuration only and may be
 * called on any thread (stockd_workers_start calls it on the main thread). */
#ifndef STOCKD_WORKER_INT_H
#define STOCKD_WORKER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "stockd.h"
#include "stockredis.h"

struct stockd_workers {
    stockd_ctx *ctx;
    stockd_combiner *combiner; /* the workers' own: who leads which slot */
    unsigned n;
    pthread_t *threads;
};

typedef struct worker_state {
    stockd_workers *w;
    stockdb *db;
    stockredis *redis; /* mode redis-stock's connection (redisstock.c); NULL in the others */
    time_t last_log;
    uint64_t statements; /* stockdb_statements(db) already added to the metrics */
    stockd_job **jobs;   /* room for one batch */
    stockdb_item *items;
    unsigned seed; /* rand_r: the first segment of a deduction, the think jitter */
} worker_state;

/* A product's lock (or its segment's): lock/lock.h's hold, and what it guards. */
typedef struct product_lock {
    lock_hold hold;
    int32_t product_id;
    unsigned segment; /* 0 = the whole product */
} product_lock;

/* Adds the statements sent since the last call to the metrics. */
static inline void count_statements(worker_state *ws) {
    uint64_t now = stockdb_statements(ws->db);
    stockd_metrics_statements(now - ws->statements);
    ws->statements = now;
}

/* The pause between check and update for one transaction: --think-us plus a uniformly
 * random 0..--think-jitter-us. A constant pause lets instances fall into step: one whose
 * UPDATE waited for another's row lock commits right after it, every time, which is a
 * pattern of this stand-in and not of real business logic. */
static inline unsigned think_us(worker_state *ws) {
    const stockd_config *c = ws->w->ctx->cfg;
    if (!c->think_jitter_us) return c->think_us;
    uint64_t span = (uint64_t)c->think_jitter_us + 1;
    return c->think_us + (unsigned)((uint64_t)rand_r(&ws->seed) * span / ((uint64_t)RAND_MAX + 1));
}

/* ---------------------------------------------------------------- batch.c */

/* Logs a failure at most once a second per worker. */
void batch__log_failure(worker_state *ws, const char *what, const char *detail);
/* Counts and logs a database failure (not the client's mistakes). */
void batch__note_db_error(worker_state *ws, const char *what, int rc);
/* A text for a lock code, for the log. */
const char *batch__lock_text(const stockd_ctx *ctx, int rc);
/* Writes answer a into the job and hands the job back to the HTTP side (it is not ours
 * after this). */
void batch__finish(worker_state *ws, stockd_job *job, const stockd_answer *a);
/* Has the job waited past --queue-deadline-ms at `now`? */
bool batch__expired(const stockd_ctx *ctx, const stockd_job *job, uint64_t now);
/* Answers the job 503 for its deadline, nothing deducted. */
void batch__finish_expired(worker_state *ws, stockd_job *job);
/* Waits at most the lock timeout for product_N's lock (segment 0) or product_N_seg_S's,
 * or with try_only set only tries it (LOCK_ERR_TIMEOUT when busy). LOCK_OK with *out
 * held, or the error. */
int batch__lock_acquire(lock_set *locks, int32_t product_id, unsigned segment, bool try_only,
                        product_lock *out);

/* What the check stockdb calls right before COMMIT (stockdb_batch.guard) looks at. */
typedef struct batch_guard {
    const product_lock *lock; /* NULL: the lock is not re-checked (--fence off) */
    /* --pitfall release-before-commit: the mistake instead of the check. The lock is let
     * go here, after the write and before COMMIT, as when an unlock in a finally block
     * runs inside a @Transactional method and the commit follows its return. The fence
     * (when on) still protects the row; the lock no longer does. */
    product_lock *release;
    uint64_t deadline_ns; /* the batch's oldest job's deadline; 0 = none */
    bool late;            /* out: refused because that deadline had passed */
    bool released;        /* out: `release` was let go */
} batch_guard;

/* The guard (stockdb's, right before COMMIT) of a batch_guard: 0 to commit. */
int batch__guard_check(void *arg);
/* Answers the jobs of jobs[0..n-1] past their deadline (503, nothing deducted) and packs
 * the rest to the front; returns how many are left. */
unsigned batch__drop_expired(worker_state *ws, stockd_job **jobs, unsigned n);
/* Runs jobs[0..n-1] of one product as one transaction under the held lock h and fills
 * their answers (not sent). True, with no answer filled, when it was rolled back at its
 * oldest job's deadline: the caller drops the expired and runs the rest again. */
bool batch__run(worker_state *ws, stockd_job **jobs, unsigned n, product_lock *h,
                stockd_answer *answers, bool *released);

/* ---------------------------------------------------------------- redisstock.c */

/* The worker's Redis handle of mode redis-stock (it connects at its first deduction);
 * NULL in the other modes, or when it cannot be made (logged; deductions answer 503). */
stockredis *stockd_redisstock_open(const stockd_ctx *ctx);
/* Serves and answers one deduction of mode redis-stock (the caller checked its deadline). */
void stockd_redisstock_serve(worker_state *ws, stockd_job *job);

/* ---------------------------------------------------------------- cross.c */

/* How long a product whose lock a try found busy is not picked again by a claim or a
 * pass (its jobs wait for a leader's takeover, or for a claim after this). */
#define CROSS_BUSY_NS (20u * 1000000u)

/* Does a leader of this slot batch across products (--cross-products)? */
bool cross__on(const stockd_ctx *ctx, unsigned segment);
/* Runs the leader's live jobs ws->jobs[0..live-1] (its product's lock *primary held)
 * with those of other products whose locks are free now; returns how many jobs
 * ws->jobs[] and answers[] then hold to answer. */
unsigned cross__run(worker_state *ws, product_lock *primary, unsigned live, stockd_answer *answers);

#endif
