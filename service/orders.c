/* orders.c: what comes after the deduction (docs/orders.md): paying and cancelling a
 * reservation (POST /orders/{order}/pay and /cancel), restocking a product (POST
 * /stock/restock), and the expiry thread that gives back reservations left unpaid past
 * their expiry.
 *
 * Every one of them writes under the product's lock of the mode (product_N, the lock a
 * batch of deductions takes), with the fence and the pre-commit check a batch has, so a
 * release or a restock is ordered with the deductions exactly as they are with each
 * other. The mode's strategy does the rest in db/ (FOR_UPDATE locks the row first). The
 * order's states and changes are db/stockdb_life.c's table; each change is a conditional
 * UPDATE on the state, so a cancel and the expiry racing give the unit back once.
 *
 * Mode redis-stock has no lock: its reservations live in Redis, and pay, cancel and the
 * expiry are each one script there (redisstock.c); the order writer carries the new
 * states to MariaDB.
 *
 * Pay and cancel are served where they land (never routed to another instance: the lock
 * orders them wherever they run). The workers call orders__serve; the expiry thread is
 * one per instance, started and stopped with the workers (worker.c), with its own MySQL
 * connection, so it keeps its pace whatever the load on the job queue. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "worker_int.h"

/* Reservations given back per transaction, and products looked at per round: each round
 * is bounded, and a product with more left over is served again at once. */
#define EXPIRY_BATCH    100
#define EXPIRY_PRODUCTS 64

typedef enum { LIFE_CHANGE, LIFE_RESTOCK, LIFE_RELEASE } life_op;

typedef struct life_run {
    life_op op;
    const stockd_job *job; /* CHANGE, RESTOCK */
    stockdb_order after;   /* CHANGE */
    int32_t stock;         /* RESTOCK: the stock after */
    bool replayed;         /* RESTOCK: the job's key had restocked already */
    unsigned released;     /* RELEASE */
} life_run;

/* Runs r under product pid's lock (waited for as a batch waits), with the fence and the
 * pre-commit check a batch has. A transaction the database aborted (a deadlock or lock
 * wait victim, or on Galera a certification conflict at COMMIT, which several writer
 * nodes meet on the product's row) was rolled back whole and runs again as a deduction
 * does (txn_again): its conditional UPDATE reads the order's state afresh, so a retry
 * never applies a change twice; past the last try the answer is a 503, nothing changed.
 * Returns the STOCKDB_* code, with the acquire's in *lock_rc (nothing run unless
 * LOCK_OK). */
static int under_lock(const stockd_ctx *ctx, stockdb *db, int32_t pid, life_run *r, int *lock_rc) {
    product_lock pl = {.product_id = pid};
    char name[48];
    snprintf(name, sizeof(name), "product_%d", pid);
    *lock_rc = lock_acquire(ctx->locks, name, &pl.hold);
    if (*lock_rc != LOCK_OK) return STOCKDB_OK;
    bool fence = ctx->cfg->fence;
    txn_guard g = {.lock = fence ? &pl : NULL};
    stockdb_life l = {.product_id = pid,
                      .strategy = ctx->cfg->strategy,
                      .fence = fence ? lock_token(&pl.hold) : 0,
                      .fence_kind = lock_set_kind(ctx->locks)->fence_kind,
                      .guard = fence ? txn__guard_check : NULL,
                      .guard_arg = &g};
    int rc = STOCKDB_OK, attempt = 0;
    do {
        switch (r->op) {
        case LIFE_CHANGE:
            rc = stockdb_order_change(db, &l, r->job->order_id, r->job->event, r->job->user,
                                      &r->after);
            break;
        case LIFE_RESTOCK:
            rc = stockdb_restock(db, &l, r->job->units,
                                 r->job->request_id[0] ? r->job->request_id : NULL, &r->stock,
                                 &r->replayed);
            break;
        case LIFE_RELEASE:
            rc = stockdb_release_expired(db, &l, EXPIRY_BATCH, &r->released);
            break;
        }
    } while (txn_again(STOCKD_TXN_ORDER, rc, attempt++));
    (void)lock_release(&pl.hold);
    return rc;
}

/* The answer of a pay or cancel that changed nothing, from the order as it is. */
static void refused_change(stockd_answer *a, const stockd_job *job, const stockdb_order *o) {
    bool late =
        o->state == STOCKDB_STATE_EXPIRED || (o->state == STOCKDB_STATE_RESERVED && o->past_expiry);
    a->state = stockdb_state_name(o->state);
    if (job->event == STOCKDB_EV_PAY && late) {
        a->result = STOCKD_R_EXPIRED;
        a->message = "the reservation expired before this payment; nothing changed "
                     "(refund the payment)";
        return;
    }
    a->result = STOCKD_R_NOT_RESERVED;
    a->message = "the order is not reserved; nothing changed";
}

/* POST /orders/{order}/pay or /cancel. */
static void serve_change(worker_state *ws, stockd_job *job) {
    stockd_ctx *ctx = ws->w->ctx;
    stockd_answer a = {.order_id = job->order_id};
    stockdb_order o;
    life_run r = {.op = LIFE_CHANGE, .job = job};
    int lock_rc = LOCK_OK, rc;
    const char *message = NULL;
    if (ctx->cfg->lock == STOCKD_LOCK_REDIS_STOCK) {
        /* Redis holds the count and the reservation there: one script (redisstock.c),
         * the order named by the key its deduction answered. */
        rc = stockd_redisstock_change(ws, job, &r.after, &message);
        a.id = r.after.product_id;
        a.order_id = 0; /* named by its key there, even a key of digits */
        if (job->request_id[0]) a.order = job->request_id;
    } else if (!job->order_id) {
        a.result = STOCKD_R_BAD_REQUEST;
        a.message = stockd_order_id_rule;
        answer__send(ws, job, &a);
        return;
    } else {
        /* The order's product names the lock; a customer's mistakes are answered before it. */
        rc = stockdb_order_read(ws->db, job->order_id, &o);
        if (rc == STOCKDB_OK && (!o.has_user || strcmp(o.user, job->user) != 0))
            rc = STOCKDB_ERR_KEY_REUSED;
        if (rc == STOCKDB_OK) {
            a.id = o.product_id;
            rc = under_lock(ctx, ws->db, o.product_id, &r, &lock_rc);
        }
    }
    count_statements(ws);
    switch (lock_rc == LOCK_OK ? rc : STOCKDB_OK) {
    case STOCKDB_OK:
        stockd_answer_from_db(&a, lock_rc, STOCKDB_OK, NULL);
        if (lock_rc != LOCK_OK) {
            const char *m = lock_failure_message(ctx->locks, lock_rc);
            a.message = m ? m : "the product's lock was not acquired; nothing changed";
            break;
        }
        a.result = job->event == STOCKDB_EV_PAY ? STOCKD_R_PAID : STOCKD_R_CANCELLED;
        a.state = stockdb_state_name(r.after.state);
        if (message) { /* redis-stock: made, too few replicas have it */
            a.result = STOCKD_R_NOT_REPLICATED;
            a.message = message;
        }
        break;
    case STOCKDB_ERR_NOT_FOUND:
        a.result = STOCKD_R_NOT_FOUND;
        a.message = "no such order";
        break;
    case STOCKDB_ERR_KEY_REUSED:
        a.result = STOCKD_R_NOT_YOUR_ORDER;
        a.message = "this order is another customer's; nothing changed";
        break;
    case STOCKDB_ERR_STATE:
        refused_change(&a, job, &r.after);
        break;
    default:
        answer__note_db_error(ws, job->event == STOCKDB_EV_PAY ? "payment" : "cancel", rc);
        stockd_answer_from_db(&a, LOCK_OK, rc, NULL);
        if (message) a.message = message;
        break;
    }
    answer__send(ws, job, &a);
}

/* POST /stock/restock?id=N&units=K (authenticated by http.c). */
static void serve_restock(worker_state *ws, stockd_job *job) {
    stockd_ctx *ctx = ws->w->ctx;
    stockd_answer a = {.id = job->product_id};
    life_run r = {.op = LIFE_RESTOCK, .job = job};
    int lock_rc = LOCK_OK, rc;
    if (ctx->cfg->segments > 1) {
        a.result = STOCKD_R_BAD_REQUEST;
        a.message = "restock of split stock (--segments) goes to its segments: see "
                    "docs/operating.md; nothing was restocked";
        answer__send(ws, job, &a);
        return;
    }
    const char *message = NULL;
    if (ctx->cfg->lock == STOCKD_LOCK_REDIS_STOCK) /* MariaDB, then Redis: redisstock.c */
        rc = stockd_redisstock_restock(ws, job, &r.stock, &r.replayed, &message);
    else
        rc = under_lock(ctx, ws->db, job->product_id, &r, &lock_rc);
    count_statements(ws);
    if (lock_rc == LOCK_OK) answer__note_db_error(ws, "restock", rc);
    stockd_answer_from_db(&a, lock_rc, rc, NULL);
    if (message) a.message = message;
    if (rc == STOCKDB_ERR_KEY_REUSED)
        a.message = "this Idempotency-Key was already used for a restock of another product "
                    "or of other units; nothing was restocked";
    if (lock_rc != LOCK_OK) {
        const char *m = lock_failure_message(ctx->locks, lock_rc);
        if (m) a.message = m;
    } else if (rc == STOCKDB_OK) {
        a.result = STOCKD_R_RESTOCKED;
        a.replayed = r.replayed;
        a.has_stock = true;
        a.stock = r.stock;
        stockd_stockwatch_note(job->product_id, r.stock);
    }
    answer__send(ws, job, &a);
}

void orders__serve(worker_state *ws, stockd_job *job) {
    if (job->kind == STOCKD_JOB_RESTOCK)
        serve_restock(ws, job);
    else
        serve_change(ws, job);
}

/* ---------------------------------------------------------------- the expiry thread */

static struct {
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
} expiry = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* One round: the products with reservations past their expiry (a bounded read of the
 * index on (state, expires_at)), each released under its lock until none is left over. */
static void expiry_round(const stockd_ctx *ctx, stockdb *db) {
    int32_t pids[EXPIRY_PRODUCTS];
    unsigned n = 0;
    int rc = stockdb_expired_products(db, pids, EXPIRY_PRODUCTS, &n);
    if (rc != STOCKDB_OK) {
        stockd_log("warn", "expiry: reading expired reservations: %s", stockdb_errstr(db));
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        life_run r = {.op = LIFE_RELEASE, .released = EXPIRY_BATCH};
        int lock_rc = LOCK_OK;
        while (r.released == EXPIRY_BATCH) {
            r.released = 0;
            rc = under_lock(ctx, db, pids[i], &r, &lock_rc);
            if (lock_rc != LOCK_OK || rc != STOCKDB_OK) {
                stockd_log("warn", "expiry: product %d: %s", pids[i],
                           lock_rc != LOCK_OK ? lock_strerror(lock_rc) : stockdb_errstr(db));
                break;
            }
        }
    }
}

static void *expiry_main(void *arg) {
    const stockd_ctx *ctx = arg;
    /* Mode redis-stock releases in Redis, the reservations' place of record there
     * (redisstock.c); the writer gives the units back in MariaDB from the stream. */
    stockredis *redis = stockd_redisstock_open(ctx);
    stockdb *db = ctx->cfg->lock == STOCKD_LOCK_REDIS_STOCK
                      ? NULL
                      : stockdb_new(&ctx->db, ctx->cfg->instance);
    pthread_mutex_lock(&expiry.mu);
    while (!expiry.stop) {
        pthread_mutex_unlock(&expiry.mu);
        if (db) expiry_round(ctx, db);
        while (redis && stockd_redisstock_expire(redis, ctx->cfg) == STOCKD_REDIS_EXPIRY_KEYS) {
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)ctx->cfg->expiry_ms * 1000000u;
        until.tv_sec += (time_t)(ns / 1000000000u);
        until.tv_nsec = (long)(ns % 1000000000u);
        pthread_mutex_lock(&expiry.mu);
        while (!expiry.stop && pthread_cond_timedwait(&expiry.cv, &expiry.mu, &until) == 0) {
        }
    }
    pthread_mutex_unlock(&expiry.mu);
    stockdb_free(db);
    stockredis_free(redis);
    return NULL;
}

int orders__expiry_start(stockd_ctx *ctx) {
    if (ctx->cfg->expiry_ms == 0) return 0;
    expiry.stop = false;
    if (pthread_create(&expiry.thread, NULL, expiry_main, ctx) != 0) return -1;
    expiry.started = true;
    return 0;
}

void orders__expiry_stop(void) {
    if (!expiry.started) return;
    pthread_mutex_lock(&expiry.mu);
    expiry.stop = true;
    pthread_cond_broadcast(&expiry.cv);
    pthread_mutex_unlock(&expiry.mu);
    pthread_join(expiry.thread, NULL);
    expiry.started = false;
}
