/* redisstock.c: a deduction of mode redis-stock, on a worker thread. Redis holds the
 * sellable count; one Lua script (db/stockredis.h) checks and decrements it, remembers
 * the request's key and appends the order to the stream stockd:orders, all or nothing;
 * the order writer (writer/) writes the orders to MariaDB later. No lock, no combiner,
 * no transaction here.
 *
 * The way of one deduction:
 *
 *   script ── count in Redis ──> 200 deducted {"order": key} | 409 sold_out
 *     │                          | 409 limit_reached (the customer's units, same script) | 422
 *     │ not loaded yet
 *     v
 *   read product.stock from MariaDB ──> script again with it: the script sets the count
 *   only if it is still absent, so of all instances racing to load a product, the first
 *   script to run loads it and the others deduct from that count
 *     │ deducted, --redis-wait-replicas N
 *     v
 *   WAIT N --redis-wait-ms ── fewer replicas ──> 503 not_replicated (the order is in the
 *   stream: it will be written unless this primary is lost before a replica has it)
 *
 * Answers: Redis unreachable, or refusing the script before running it (at maxmemory,
 * loading, a read-only replica), is 503 with nothing done. Once the script has been sent
 * and its reply lost, every failure after it is 500 unknown (it may have run; the same key
 * asked again learns which), never "nothing was deducted".
 *
 * Reservations (docs/orders.md): a product with reserve_seconds (loaded with its count)
 * is reserved by the same script, which answers the expiry; the order is named by its
 * request key, the "order" of the answer, and pay, cancel and the expiry thread change it
 * with one script each (stockd_redisstock_change, stockd_redisstock_expire).
 *
 * Memory: a client's key is remembered (its memo) for --redis-key-window-s; stockd's own
 * keys ("i/...", for requests without one, which no client can send again) only for
 * OWN_KEY_TTL_S, what the resend after a lost reply needs. Layer: called by worker.c;
 * calls batch.c's job-end and db/. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "worker_int.h"

/* The life of the memo of stockd's own keys: the resend of a lost reply comes within two
 * Redis timeouts (2 s each); a minute leaves room for a slow Redis. */
#define OWN_KEY_TTL_S 60

stockredis *stockd_redisstock_open(const stockd_ctx *ctx) {
    const stockd_config *c = ctx->cfg;
    if (c->lock != STOCKD_LOCK_REDIS_STOCK) return NULL;
    stockredis_config rc = {.addr = c->redis,
                            .user = c->redis_user,
                            .password = c->redis_password,
                            .instance = c->instance};
    stockredis *s = NULL;
    char err[256];
    if (stockredis_new(&rc, &s, err, sizeof(err)) != STOCKREDIS_OK)
        stockd_log("error", "mode redis-stock: %s", err);
    return s;
}

/* The answer of a failed script. */
static void answer_error(worker_state *ws, int rc, stockd_answer *a) {
    answer__log_failure(ws, "redis-stock", stockredis_errstr(ws->redis));
    a->result = STOCKD_R_UNAVAILABLE;
    if (rc == STOCKREDIS_ERR_UNKNOWN) {
        a->result = STOCKD_R_UNKNOWN;
        a->message = "Redis failed after the deduction was sent: it may have been made; send "
                     "the same Idempotency-Key again to learn which";
    } else if (rc == STOCKREDIS_ERR_AUTH) {
        a->message = "Redis refused stockd's credentials; nothing was deducted";
    } else if (rc == STOCKREDIS_ERR_CONNECTION) {
        a->message = "Redis is unavailable; nothing was deducted";
    } else if (rc == STOCKREDIS_ERR_REFUSED) {
        a->message = "Redis refused the deduction before running it (full at maxmemory, "
                     "loading, or a replica); nothing was deducted";
    } else {
        a->message = "Redis answered the deduction script with an error; nothing was deducted";
    }
}

/* The life of a key's memo, and of a final reservation's record (so that a late pay or
 * cancel within it is answered not_reserved or expired rather than not_found): the
 * window for a client's key; for stockd's own ('/' never appears in a client's key),
 * what a resend needs. */
static unsigned key_life_s(const stockd_config *c, const char *key) {
    return strchr(key, '/') ? OWN_KEY_TTL_S : c->redis_key_window_s;
}

/* Runs the script, loading the count from MariaDB first when Redis has none. */
static int deduct(worker_state *ws, stockd_job *job, stockredis_result *res, stockd_answer *a) {
    unsigned ttl = key_life_s(ws->w->ctx->cfg, job->request_id);
    const char *user = job->user[0] ? job->user : NULL;
    int rc = stockredis_deduct(ws->redis, job->product_id, job->request_id, -1, 0, ttl, user, -1,
                               -1, res);
    if (rc != STOCKREDIS_OK || res->outcome != STOCKREDIS_NOT_LOADED) return rc;
    int32_t stock = 0, limit = -1, reserve_s = -1;
    int64_t restocked = 0;
    int db_rc = stockdb_get_stock_restocked(ws->db, job->product_id, &stock, &restocked, &limit,
                                            &reserve_s);
    count_statements(ws);
    answer__note_db_error(ws, "redis-stock load", db_rc);
    if (db_rc != STOCKDB_OK) {
        stockd_answer_from_db(a, LOCK_OK, db_rc, NULL);
        return 1;
    }
    return stockredis_deduct(ws->redis, job->product_id, job->request_id, stock < 0 ? 0 : stock,
                             restocked, ttl, user, limit, reserve_s, res);
}

/* A reservation's expiry (Redis TIME, us) as the answers write it (stockd_answer). */
static void expiry_text(long long us, char *buf, size_t cap) {
    time_t sec = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    char day[24];
    strftime(day, sizeof(day), "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%06lld", day, us % 1000000);
}

int stockd_redisstock_restock(worker_state *ws, const stockd_job *job, int32_t *stock,
                              bool *replayed, const char **message) {
    int32_t product_id = job->product_id;
    stockdb_life l = {.product_id = product_id, .strategy = STOCKDB_ATOMIC};
    long long count = 0;
    bool present = false;
    /* MariaDB first (docs/orders.md): the writer never meets a sold unit MariaDB lacks. */
    int rc = stockdb_restock(ws->db, &l, job->units, job->request_id[0] ? job->request_id : NULL,
                             stock, replayed);
    count_statements(ws);
    if (rc != STOCKDB_OK) return rc;
    /* A replay never runs Redis's step again: the first may have run it whatever its
     * answer said (a lost reply), and a second would make the units sellable twice. */
    if (*replayed) return STOCKDB_OK;
    int redis_rc = ws->redis
                       ? stockredis_restock(ws->redis, product_id, job->units, &count, &present)
                       : STOCKREDIS_ERR_NOMEM;
    if (redis_rc != STOCKREDIS_OK) {
        answer__log_failure(ws, "redis-stock restock",
                            ws->redis ? stockredis_errstr(ws->redis) : "no Redis handle");
        *message = "restocked in MariaDB, but Redis did not confirm it: the units may not be "
                   "sellable until the product's next reset (never sold twice)";
        return STOCKDB_ERR_CONNECT;
    }
    if (present) *stock = (int32_t)count;
    return STOCKDB_OK;
}

void stockd_redisstock_serve(worker_state *ws, stockd_job *job) {
    const stockd_config *c = ws->w->ctx->cfg;
    stockd_answer a = {.id = job->product_id};
    stockredis_result res = {0};
    char msg[200], expires[40];
    int rc = ws->redis ? deduct(ws, job, &res, &a) : STOCKREDIS_ERR_NOMEM;

    if (rc == 1) { /* answered from MariaDB's error */
    } else if (rc != STOCKREDIS_OK) {
        answer_error(ws, rc, &a);
    } else if (res.outcome == STOCKREDIS_KEY_REUSED) {
        stockd_answer_from_db(&a, LOCK_OK, STOCKDB_ERR_KEY_REUSED, NULL);
    } else if (res.outcome == STOCKREDIS_LIMIT_REACHED) {
        a.result = STOCKD_R_LIMIT_REACHED;
        a.has_stock = true;
        a.stock = (int32_t)res.count;
    } else if (res.outcome == STOCKREDIS_SOLD_OUT || res.outcome == STOCKREDIS_NOT_LOADED) {
        a.result = STOCKD_R_SOLD_OUT;
        a.has_stock = true;
        a.stock = (int32_t)res.count;
    } else {
        a.result = STOCKD_R_DEDUCTED;
        a.has_stock = true;
        a.stock = (int32_t)res.count;
        a.replayed = res.outcome == STOCKREDIS_REPLAYED;
        a.order = job->request_id;
        if (res.expires_us > 0) {
            a.result = STOCKD_R_RESERVED;
            expiry_text(res.expires_us, expires, sizeof(expires));
            a.expires_at = expires;
        }
        int acked = 0;
        if (c->redis_wait_replicas &&
            (rc = stockredis_wait(ws->redis, (int)c->redis_wait_replicas, (int)c->redis_wait_ms,
                                  &acked)) != STOCKREDIS_OK)
            acked = -1;
        if (c->redis_wait_replicas && acked < (int)c->redis_wait_replicas) {
            a.result = STOCKD_R_NOT_REPLICATED;
            snprintf(msg, sizeof(msg),
                     "deducted on the Redis primary, but %d of %u replicas confirmed it within "
                     "%u ms: a failover now may lose it (the order is in the stream)",
                     acked < 0 ? 0 : acked, c->redis_wait_replicas, c->redis_wait_ms);
            a.message = msg;
        }
    }
    if (a.has_stock) stockd_stockwatch_note(job->product_id, a.stock);
    answer__send(ws, job, &a);
}

/* ---------------------------------------------------------------- the order's life */

int stockd_redisstock_change(worker_state *ws, const stockd_job *job, stockdb_order *after,
                             const char **message) {
    stockredis_change_result res;
    stockredis_event ev = job->event == STOCKDB_EV_PAY ? STOCKREDIS_PAY : STOCKREDIS_CANCEL;
    memset(after, 0, sizeof(*after));
    if (!job->request_id[0]) return STOCKDB_ERR_NOT_FOUND; /* not a key: no order here */
    int rc = ws->redis ? stockredis_change(ws->redis, job->request_id, ev, job->user,
                                           key_life_s(ws->w->ctx->cfg, job->request_id), &res)
                       : STOCKREDIS_ERR_NOMEM;
    if (rc != STOCKREDIS_OK) {
        answer__log_failure(ws, "redis-stock change",
                            ws->redis ? stockredis_errstr(ws->redis) : "no Redis handle");
        *message = rc == STOCKREDIS_ERR_UNKNOWN
                       ? "Redis failed after the change was sent: it may have been made; "
                         "send it again to learn the order's state"
                       : "Redis is unavailable or refused the change; nothing changed";
        return rc == STOCKREDIS_ERR_UNKNOWN ? STOCKDB_ERR_UNKNOWN : STOCKDB_ERR_CONNECT;
    }
    after->product_id = res.product_id;
    after->state = STOCKDB_STATE_RESERVED;
    for (int st = 0; st < STOCKDB_STATE_COUNT; st++)
        if (strcmp(res.state, stockdb_state_name((stockdb_state)st)) == 0)
            after->state = (stockdb_state)st;
    after->past_expiry = res.outcome == STOCKREDIS_LATE;
    if (res.outcome == STOCKREDIS_CHANGED && res.count >= 0)
        stockd_stockwatch_note(res.product_id, (int32_t)res.count);
    /* --redis-wait-replicas: a change waits for the replicas as a deduction does, and
     * says so when too few have it (STOCKDB_OK with *message: not_replicated). */
    const stockd_config *c = ws->w->ctx->cfg;
    int acked = 0;
    if (res.outcome == STOCKREDIS_CHANGED && c->redis_wait_replicas &&
        (stockredis_wait(ws->redis, (int)c->redis_wait_replicas, (int)c->redis_wait_ms, &acked) !=
             STOCKREDIS_OK ||
         acked < (int)c->redis_wait_replicas))
        *message = "changed on the Redis primary, but too few replicas confirmed it in time: a "
                   "failover now may lose the change";
    switch (res.outcome) {
    case STOCKREDIS_NO_ORDER:
        return STOCKDB_ERR_NOT_FOUND;
    case STOCKREDIS_NOT_YOURS:
        return STOCKDB_ERR_KEY_REUSED;
    case STOCKREDIS_CHANGED:
        return STOCKDB_OK;
    default:
        return STOCKDB_ERR_STATE;
    }
}

unsigned stockd_redisstock_expire(stockredis *r, const stockd_config *c) {
    char keys[STOCKD_REDIS_EXPIRY_KEYS][STOCKREDIS_KEY_MAX + 1];
    unsigned n = 0;
    int rc = stockredis_due(r, keys, STOCKD_REDIS_EXPIRY_KEYS, &n);
    if (rc != STOCKREDIS_OK) {
        stockd_log("warn", "expiry: reading due reservations from Redis: %s", stockredis_errstr(r));
        return 0;
    }
    for (unsigned i = 0; i < n; i++) {
        stockredis_change_result res;
        /* Two instances may release one reservation at once: the script's state check lets
         * one of them change it, and the other is answered NOT_RESERVED. */
        rc = stockredis_change(r, keys[i], STOCKREDIS_EXPIRE, NULL, key_life_s(c, keys[i]), &res);
        if (rc != STOCKREDIS_OK) {
            stockd_log("warn", "expiry: releasing %s in Redis: %s", keys[i], stockredis_errstr(r));
            return 0;
        }
        if (res.outcome == STOCKREDIS_CHANGED && res.count >= 0)
            stockd_stockwatch_note(res.product_id, (int32_t)res.count);
    }
    return n;
}
