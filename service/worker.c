/* worker.c: the threads that do the blocking work of a request.
 *
 * Each worker owns one stockdb handle (one MySQL connection, never shared) and loops:
 * pop a job, take the lock of the configured mode, run the transaction, release, write
 * the answer into the job, and hand it back to the HTTP side. The order inside a
 * locked deduction is fixed: acquire, transaction (whose guard re-checks the lock right
 * before COMMIT), commit, and only then release, so that no other holder can read the
 * row between our write and our commit. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stockd.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The `local` mode's mutexes. Products are striped over a fixed set instead of getting
 * a mutex each, so memory stays bounded whatever ids clients send; two products that
 * share a stripe only wait for each other, which never breaks mutual exclusion. */
#define LOCAL_STRIPES 1024

struct stockd_workers {
    stockd_ctx *ctx;
    unsigned n;
    pthread_t *threads;
    pthread_mutex_t stripes[LOCAL_STRIPES];
};

typedef struct worker_state {
    stockd_workers *w;
    stockdb *db;
    time_t last_log;
} worker_state;

/* Logs a database or lock failure at most once a second per worker, so an outage does
 * not turn into one log line per request. */
static void log_failure(worker_state *ws, const char *what, const char *detail) {
    time_t now = time(NULL);
    if (now == ws->last_log) return;
    ws->last_log = now;
    stockd_log("warn", "%s: %s", what, detail);
}

/* The guard stockdb calls right before COMMIT: refuse unless the lock is surely ours. */
static int zk_guard(void *arg) {
    return zklock_check(arg) != ZKLOCK_OK;
}

/* One deduction; a deadlock victim was rolled back whole, so it is retried (twice). */
static int deduct(worker_state *ws, stockdb_strategy s, stockdb_request *req, stockdb_result *res) {
    int rc = STOCKDB_ERR_DEADLOCK;
    for (int attempt = 0; attempt < 3 && rc == STOCKDB_ERR_DEADLOCK; attempt++)
        rc = stockdb_deduct(ws->db, s, req, res);
    return rc;
}

static void serve_deduct(worker_state *ws, stockd_job *job, stockd_answer *a) {
    stockd_ctx *ctx = ws->w->ctx;
    stockdb_request req = {.product_id = job->product_id,
                           .request_id = job->request_id,
                           .think_us = ctx->cfg->think_us};
    stockdb_result res = {0};
    int lock_rc = ZKLOCK_OK, rc = STOCKDB_ERR_QUERY;
    uint64_t t0 = now_ns();

    switch (ctx->cfg->lock) {
    case STOCKD_LOCK_NONE:
        rc = deduct(ws, STOCKDB_READ_CHECK_UPDATE, &req, &res);
        break;
    case STOCKD_LOCK_LOCAL: {
        pthread_mutex_t *m = &ws->w->stripes[(uint32_t)job->product_id % LOCAL_STRIPES];
        pthread_mutex_lock(m);
        stockd_metrics_lock_wait(now_ns() - t0);
        rc = deduct(ws, STOCKDB_READ_CHECK_UPDATE, &req, &res);
        pthread_mutex_unlock(m);
        break;
    }
    case STOCKD_LOCK_ZK:
    case STOCKD_LOCK_ZK_HERD: {
        zklock_kind kind = ctx->cfg->lock == STOCKD_LOCK_ZK ? ZKLOCK_FAIR : ZKLOCK_HERD;
        zklock_hold *h = NULL;
        char name[32];

        snprintf(name, sizeof(name), "product_%d", job->product_id);
        lock_rc = zklock_acquire(ctx->zk, name, kind, (int)ctx->cfg->lock_timeout_ms, &h);
        stockd_metrics_lock_wait(now_ns() - t0);
        if (lock_rc != ZKLOCK_OK) {
            if (lock_rc != ZKLOCK_ERR_TIMEOUT)
                log_failure(ws, "zookeeper lock", zklock_strerror(lock_rc));
            break;
        }
        req.fence = zklock_token(h);
        req.guard = zk_guard;
        req.guard_arg = h;
        rc = deduct(ws, STOCKDB_READ_CHECK_UPDATE, &req, &res);
        int rel = zklock_release(h);
        if (rel != ZKLOCK_OK) log_failure(ws, "zookeeper release", zklock_strerror(rel));
        break;
    }
    case STOCKD_LOCK_FOR_UPDATE:
        rc = deduct(ws, STOCKDB_FOR_UPDATE, &req, &res);
        break;
    case STOCKD_LOCK_ATOMIC:
        rc = deduct(ws, STOCKDB_ATOMIC, &req, &res);
        break;
    }
    if (lock_rc == ZKLOCK_OK && rc != STOCKDB_OK && rc != STOCKDB_ERR_NOT_FOUND) {
        stockd_metrics_db_error(rc);
        log_failure(ws, "deduction", stockdb_errstr(ws->db));
    }
    stockd_metrics_deduction(now_ns() - t0);
    stockd_answer_from_db(a, lock_rc, rc, &res);
}

static void serve_stock(worker_state *ws, stockd_job *job, stockd_answer *a) {
    int32_t stock = 0;
    int rc = stockdb_get_stock(ws->db, job->product_id, &stock);

    if (rc != STOCKDB_OK && rc != STOCKDB_ERR_NOT_FOUND) {
        stockd_metrics_db_error(rc);
        log_failure(ws, "stock read", stockdb_errstr(ws->db));
    }
    stockd_answer_from_db(a, ZKLOCK_OK, rc, NULL);
    if (rc == STOCKDB_OK) {
        a->has_stock = true;
        a->stock = stock;
    }
    if (rc == STOCKDB_ERR_CONNECT) a->message = "MySQL is unavailable";
}

static char *serve_health(worker_state *ws, unsigned *status, stockd_result *result) {
    stockd_ctx *ctx = ws->w->ctx;
    int db_rc = stockdb_ping(ws->db);
    int zk_rc = ctx->zk ? zklock_session_status(ctx->zk) : ZKLOCK_OK;
    bool ok = db_rc == STOCKDB_OK && zk_rc == ZKLOCK_OK;

    *status = ok ? 200 : 503;
    *result = ok ? STOCKD_R_OK : STOCKD_R_UNAVAILABLE;
    return stockd_health_json(ok, db_rc == STOCKDB_OK ? NULL : stockdb_errstr(ws->db),
                              !ctx->zk             ? "unused"
                              : zk_rc == ZKLOCK_OK ? "up"
                                                   : "down",
                              zk_rc == ZKLOCK_OK ? NULL : zklock_strerror(zk_rc),
                              stockd_lock_mode_name(ctx->cfg->lock), ctx->cfg->instance);
}

static void serve(worker_state *ws, stockd_job *job) {
    stockd_answer a = {.id = job->product_id};
    const char *instance = ws->w->ctx->cfg->instance;

    switch (job->kind) {
    case STOCKD_JOB_DEDUCT:
        serve_deduct(ws, job, &a);
        break;
    case STOCKD_JOB_STOCK:
        serve_stock(ws, job, &a);
        break;
    case STOCKD_JOB_HEALTH:
        job->body = serve_health(ws, &job->status, &job->result);
        return;
    }
    job->result = a.result;
    job->status = stockd_answer_status(a.result);
    job->body = stockd_answer_json(&a, instance);
}

static void *worker_main(void *arg) {
    worker_state ws = {.w = arg};
    stockd_ctx *ctx = ws.w->ctx;
    stockd_job *job;

    ws.db = stockdb_new(&ctx->db, ctx->cfg->instance);
    while (stockd_jobq_pop(ctx->queue, &job, 1) == 1) {
        if (ws.db) {
            serve(&ws, job);
        } else {
            /* Out of memory when the worker started: answer rather than drop. */
            job->result = STOCKD_R_INTERNAL;
            job->status = 500;
            job->body = NULL;
        }
        ctx->complete(job);
    }
    stockdb_free(ws.db);
    return NULL;
}

stockd_workers *stockd_workers_start(stockd_ctx *ctx) {
    stockd_workers *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->ctx = ctx;
    w->threads = calloc(ctx->cfg->workers, sizeof(pthread_t));
    if (!w->threads) goto fail;
    for (unsigned i = 0; i < LOCAL_STRIPES; i++)
        pthread_mutex_init(&w->stripes[i], NULL);
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
    if (w->threads)
        for (unsigned i = 0; i < LOCAL_STRIPES; i++)
            pthread_mutex_destroy(&w->stripes[i]);
    free(w->threads);
    free(w);
}
