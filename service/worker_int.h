/* worker_int.h: private to service/. The worker's files, in layers, each calling only
 * the ones below it (tests/file_layers.sh checks), and what they share:
 *
 *   worker.c   the threads: pop a job, dispatch it; the reads (stock, /health)
 *   deduct.c   a deduction's policy, top to bottom, and the leader's loop
 *   orders.c   after the deduction: pay, cancel, restock, and the expiry thread
 *   forward.c  a pass sent to the product's owner as a frame (--route owner)
 *   batch.c    a batch's lock life: wait or try, take, run, keep or let go
 *   cross.c    a batch across products (--cross-products)
 *   txn.c      one product's transaction under its held lock, with its guard
 *   answer.c   a job's end (status, JSON, metrics, complete) and the failure log
 *
 * docs/architecture.md tells the request path through them.
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
    stockd_combiner *hops;     /* forwarded deductions this view gives to another (deduct.c) */
    unsigned n;
    pthread_t *threads;
};

typedef struct worker_state {
    stockd_workers *w;
    stockdb *db;
    stockredis *redis; /* mode redis-stock's connection (redisstock.c); NULL in the others */
    time_t last_log;
    uint64_t statements; /* stockdb_statements(db) already added to the metrics */
    stockd_job **jobs;   /* room for one batch: its jobs, their rows, their answers */
    stockdb_item *items;
    stockd_answer *answers;
    unsigned seed;         /* rand_r: the first segment of a deduction, the think jitter */
    struct forwarder *fwd; /* forward.c's kept-alive connections to peers; NULL until used */
    stockd_combiner *comb; /* the combiner of the slot this worker leads now (deduct.c) */
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

/* How many times one transaction runs when the database aborts it (STOCKDB_ERR_DEADLOCK:
 * a deadlock or lock wait victim, and on Galera a certification conflict at COMMIT, error
 * 1213 too, lost to a write certified first on another node). An abort rolled back all
 * the attempt wrote, so it runs again whole, reading afresh; past the last try the
 * answer is a 503 (contract.c), never a half-done deduction. */
#define TXN_TRIES 3

/* True if a transaction of kind what whose attempt number attempt (0: the first) ended
 * with rc is to run again; counts the retry (stockd_txn_retries_total{txn=...}). Every
 * transaction stockd runs goes through it: the deductions (deduct.c, txn.c, cross.c) and
 * the order's life (orders.c). */
static inline bool txn_again(stockd_txn what, int rc, int attempt) {
    if (rc != STOCKDB_ERR_DEADLOCK || attempt + 1 >= TXN_TRIES) return false;
    stockd_metrics_txn_retry(what);
    return true;
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

/* The slot a worker leads (combiner.c), with its lock: held from one pass to the next
 * while it is kept (--lock-passes). */
typedef struct leader {
    product_lock lock; /* the slot: lock.product_id, lock.segment; lock.hold when held */
    bool held;
    unsigned passes; /* batches under the held lock */
} leader;

/* ---------------------------------------------------------------- deduct.c */

/* Serves a deduction by its policy: answered here, or left waiting in the combiner for
 * its slot's leader (which may be this worker, serving it before this returns). */
void deduct__serve(worker_state *ws, stockd_job *job);

/* ---------------------------------------------------------------- orders.c */

/* Serves and answers a pay or cancel (STOCKD_JOB_ORDER) or a restock (STOCKD_JOB_RESTOCK)
 * under the product's lock. */
void orders__serve(worker_state *ws, stockd_job *job);
/* Starts the expiry thread (not in mode redis-stock, nor with --expiry-ms 0), which gives
 * back reservations left unpaid past their expiry every --expiry-ms. 0, or -1 when the
 * thread cannot start. Main thread; ctx must outlive orders__expiry_stop(). */
int orders__expiry_start(stockd_ctx *ctx);
/* Stops and joins it (no-op if not started). Before the lock set is freed. */
void orders__expiry_stop(void);
/* ---------------------------------------------------------------- forward.c */

/* Before a pass of the slot l leads (no lock held): if another instance owns the
 * product, sends the slot's queue to it as one frame and answers each job with the
 * owner's answer. Jobs that must be served here (forwarded already, too little deadline
 * left, or their forward failed) go back to the head of the slot. true: nothing is left
 * for this pass; false: serve the slot here now (batch__pass). */
typedef struct forwarder forwarder;
bool forward__pass(worker_state *ws, leader *l);
/* Closes the worker's connections to peers. */
void forward__free(worker_state *ws);

/* ---------------------------------------------------------------- batch.c */

/* One pass of the slot l leads: its lock (kept from the last pass, or waited for or
 * tried as the combiner's steps say, which may move l to another slot), one batch under
 * it, and the lock kept for another pass (l->held), cached or let go. Returns the jobs
 * to answer: ws->jobs[0..n-1] with ws->answers. On a failed wait 0, the slot's waiters
 * answered with its failure. */
unsigned batch__pass(worker_state *ws, leader *l);

/* ---------------------------------------------------------------- cross.c */

/* How long a product whose lock a try found busy is not picked again by a claim or a
 * pass (its jobs wait for a leader's takeover, a hand-over, or a claim after this). */
#define CROSS_BUSY_NS (20u * 1000000u)

/* Does a leader of this slot batch across products (--cross-products)? */
bool cross__on(const stockd_ctx *ctx, unsigned segment);
/* Claims the WAITING slots a batch takes along (up to K-1, and --batch-max - 1 so that
 * the leader's own jobs still fit); writes their product ids to out, returns how many. */
unsigned cross__claim(worker_state *ws, int32_t *out);
/* Runs the leader's live jobs ws->jobs[0..live-1] (its product's lock *primary held)
 * with those of the claimed products claimed[0..nc-1] whose locks a try gets now; the
 * others' slots go back. Returns how many jobs ws->jobs[] and answers[] then hold to
 * answer. */
unsigned cross__run(worker_state *ws, product_lock *primary, unsigned live, const int32_t *claimed,
                    unsigned nc, stockd_answer *answers);

/* ---------------------------------------------------------------- txn.c */

/* What the check stockdb calls right before COMMIT (stockdb_batch.guard) looks at. */
typedef struct txn_guard {
    const product_lock *lock; /* NULL: the lock is not re-checked (--fence off) */
    /* --pitfall release-before-commit: the mistake instead of the check. The lock is let
     * go here, after the write and before COMMIT, as when an unlock in a finally block
     * runs inside a @Transactional method and the commit follows its return. The fence
     * (when on) still protects the row; the lock no longer does. */
    product_lock *release;
    uint64_t deadline_ns; /* the batch's oldest job's deadline; 0 = none */
    bool late;            /* out: refused because that deadline had passed */
    bool released;        /* out: `release` was let go */
} txn_guard;

/* The guard (stockdb's, right before COMMIT) of a txn_guard: 0 to commit. */
int txn__guard_check(void *arg);
/* Runs jobs[0..n-1] of one product as one transaction under the held lock h and fills
 * their answers (not sent). True, with no answer filled, when it was rolled back at its
 * oldest job's deadline: the caller drops the expired and runs the rest again. With
 * --pitfall release-before-commit the lock is let go right before COMMIT (*released). */
bool txn__run(worker_state *ws, stockd_job **jobs, unsigned n, product_lock *h,
              stockd_answer *answers, bool *released);

/* ---------------------------------------------------------------- redisstock.c */

/* The worker's Redis handle of mode redis-stock (it connects at its first deduction);
 * NULL in the other modes, or when it cannot be made (logged; deductions answer 503). */
stockredis *stockd_redisstock_open(const stockd_ctx *ctx);
/* The restock job (product, units, Idempotency-Key) of mode redis-stock: MariaDB first
 * (stockdb_restock), then Redis (stockredis_restock); *stock is the count after
 * (MariaDB's while Redis has none loaded). A key that restocked already (*replayed) adds
 * nothing in either, and *stock is MariaDB's. A STOCKDB_* code; when Redis failed after
 * MariaDB committed, STOCKDB_ERR_CONNECT with *message saying so. */
int stockd_redisstock_restock(worker_state *ws, const stockd_job *job, int32_t *stock,
                              bool *replayed, const char **message);
/* Serves and answers one deduction of mode redis-stock (the caller checked its deadline). */
void stockd_redisstock_serve(worker_state *ws, stockd_job *job);
/* Pay or cancel in mode redis-stock: the reservation named by job->request_id (the order
 * the deduction answered), changed by one script (stockredis_change). Answers as
 * stockdb_order_change does, so that orders.c answers every mode alike: STOCKDB_OK with
 * after->state, STOCKDB_ERR_NOT_FOUND, _KEY_REUSED (another customer's), _STATE (after
 * tells the state; after->past_expiry for a late payment), or _CONNECT / _UNKNOWN with
 * *message saying what Redis did. STOCKDB_OK with *message set: made, but fewer replicas
 * than --redis-wait-replicas confirmed it (answered not_replicated). */
int stockd_redisstock_change(worker_state *ws, const stockd_job *job, stockdb_order *after,
                             const char **message);
/* One round of the expiry thread in mode redis-stock: releases the reservations past their
 * expiry by Redis's clock, each by the change script, at most STOCKD_REDIS_EXPIRY_KEYS.
 * How many were due (all of them: call again, there may be more), 0 after an error
 * (logged). The thread's own handle r. */
#define STOCKD_REDIS_EXPIRY_KEYS 64
unsigned stockd_redisstock_expire(stockredis *r, const stockd_config *c);

/* ---------------------------------------------------------------- answer.c */

/* A job's end: writes status, result and body (taken over; NULL answers 500) into the
 * job, counts a deduction's time, and hands the job back to the HTTP side (it is not
 * ours after this). Every answer of a worker ends here; so a job in doubt (its frame
 * sent, not answered: stockd_job.in_doubt) gets 500 `unknown` here instead of any
 * answer that says nothing was deducted. */
void answer__complete(worker_state *ws, stockd_job *job, unsigned status, stockd_result r,
                      char *body);
/* answer__complete with answer a as JSON. */
void answer__send(worker_state *ws, stockd_job *job, const stockd_answer *a);
/* Has the job waited past --queue-deadline-ms at `now`? */
bool answer__expired(const stockd_ctx *ctx, const stockd_job *job, uint64_t now);
/* Answers the job 503 for its deadline, nothing deducted. */
void answer__late(worker_state *ws, stockd_job *job);
/* Answers the jobs of jobs[0..n-1] past their deadline (503, nothing deducted) and packs
 * the rest to the front; returns how many are left. */
unsigned answer__drop_late(worker_state *ws, stockd_job **jobs, unsigned n);
/* Logs a failure at most once a second per worker. */
void answer__log_failure(worker_state *ws, const char *what, const char *detail);
/* Counts and logs a database failure (not the client's mistakes). */
void answer__note_db_error(worker_state *ws, const char *what, int rc);
/* A text for a lock code, for the log. */
const char *answer__lock_text(const stockd_ctx *ctx, int rc);

#endif
