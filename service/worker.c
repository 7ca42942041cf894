/* worker.c: the worker threads, which do the blocking work of a request: each owns one
 * stockdb handle (one MySQL connection, never shared), pops jobs one at a time and
 * dispatches them: a deduction to its policy (deduct.c), a read of the stock or of
 * /health here, a /lock/queue view to lockview.c, a pay, cancel or restock to orders.c
 * (which also runs the expiry thread, started and stopped here with the workers).
 * docs/architecture.md tells the request path; worker_int.h draws the worker's files in their
 * layers. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker_int.h"

/* ---------------------------------------------------------------- reads */

static void serve_stock(worker_state *ws, stockd_job *job) {
    stockd_answer a = {.id = job->product_id};
    int32_t stock = 0;
    stockdb_units u = {0};
    /* The stock and its orders by state in one statement: one snapshot, so the live page's
     * stock, reserved, paid and released add up at every tick. */
    int rc = stockdb_get_stock_units(ws->db, job->product_id, &stock, &u);

    count_statements(ws);
    answer__note_db_error(ws, "stock read", rc);
    stockd_answer_from_db(&a, LOCK_OK, rc, NULL);
    if (rc == STOCKDB_OK) {
        a.has_stock = true;
        a.stock = stock;
        a.has_units = true;
        a.reserved = u.reserved;
        a.paid = u.paid;
        a.released = u.released;
    }
    if (rc == STOCKDB_ERR_CONNECT) a.message = "MySQL is unavailable";
    answer__send(ws, job, &a);
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
     * MySQL itself), and mode redis-stock's Redis, which holds the count. */
    const char *service =
        kind->service && (strcmp(kind->service, "redis") == 0 || strcmp(kind->service, "etcd") == 0)
            ? kind->service
            : NULL;
    if (ctx->cfg->lock == STOCKD_LOCK_REDIS_STOCK) {
        service = "redis";
        lock_rc = ws->redis && stockredis_ping(ws->redis) == STOCKREDIS_OK ? LOCK_OK
                                                                           : LOCK_ERR_CONNECTION;
        if (lock_rc != LOCK_OK)
            snprintf(lock_err, sizeof(lock_err), "%s",
                     ws->redis ? stockredis_errstr(ws->redis) : "no Redis handle");
    }
    bool ok = db_rc == STOCKDB_OK && lock_rc == LOCK_OK;

    char *body = stockd_health_json(ok, db_rc == STOCKDB_OK ? NULL : stockdb_errstr(ws->db),
                                    !zk                  ? "unused"
                                    : lock_rc == LOCK_OK ? "up"
                                                         : "down",
                                    zk && lock_rc != LOCK_OK ? lock_err : NULL, service,
                                    !service             ? NULL
                                    : lock_rc == LOCK_OK ? "up"
                                                         : "down",
                                    service && lock_rc != LOCK_OK ? lock_err : NULL,
                                    stockd_lock_mode_name(ctx->cfg->lock), ctx->cfg->instance);
    answer__complete(ws, job, ok ? 200 : 503, ok ? STOCKD_R_OK : STOCKD_R_UNAVAILABLE, body);
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
    ws.answers = malloc(ctx->cfg->batch_max * sizeof(*ws.answers));
    while ((job = stockd_jobq_pop(ctx->queue)) != NULL) {
        if (!ws.db || !ws.jobs || !ws.items || !ws.answers) {
            /* Out of memory when the worker started: answer rather than drop. */
            answer__complete(&ws, job, 500, STOCKD_R_INTERNAL, NULL);
            continue;
        }
        switch (job->kind) {
        case STOCKD_JOB_DEDUCT:
            deduct__serve(&ws, job);
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
        case STOCKD_JOB_ORDER:
        case STOCKD_JOB_RESTOCK:
            orders__serve(&ws, job);
            break;
        }
    }
    forward__free(&ws);
    free(ws.jobs);
    free(ws.items);
    free(ws.answers);
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
    w->hops = stockd_combiner_new(half, 0);
    w->threads = calloc(ctx->cfg->workers, sizeof(pthread_t));
    if (!w->combiner || !w->hops || !w->threads) goto fail;
    /* Default thread attributes on purpose: a stack is only resident as far as it is
     * used (about 12 KiB a worker, measured), so a smaller reservation than glibc's
     * 8 MiB would save address space, not memory, and could overflow under the
     * sanitizers, whose frames are several times larger. */
    for (; w->n < ctx->cfg->workers; w->n++) {
        if (pthread_create(&w->threads[w->n], NULL, worker_main, w) != 0) goto fail;
    }
    if (orders__expiry_start(ctx) != 0) goto fail;
    return w;
fail:
    /* Threads already running exit once the queue is closed. */
    stockd_jobq_close(ctx->queue);
    stockd_workers_join(w);
    return NULL;
}

void stockd_workers_join(stockd_workers *w) {
    if (!w) return;
    orders__expiry_stop();
    for (unsigned i = 0; i < w->n; i++)
        pthread_join(w->threads[i], NULL);
    free(w->threads);
    stockd_combiner_free(w->combiner);
    stockd_combiner_free(w->hops);
    free(w);
}
