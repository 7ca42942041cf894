/* writer_reconcile.c: stock-writer --reconcile (writer.h's writer_reconcile). It reads,
 * without changing anything but the group's existence, the Redis counts
 * (`stockd:stock:{<id>}`, found by SCAN), the group's backlog and pending entries (per
 * product, by reading the entries not yet acknowledged), and per product MariaDB's stock,
 * orders and oversold promises; it prints one table and a verdict.
 *
 * The rule it judges by: once every entry is written, each decrement in Redis has become
 * either a decrement in MariaDB or an oversold promise, so a product whose count was
 * loaded from MariaDB agrees when its Redis count equals MariaDB's stock and it has no
 * oversold promise. What it cannot see is a deduction acknowledged to a buyer whose
 * decrement and entry were both lost (a failover to a replica that never had them): the
 * two stores still agree. Only the buyers' answers show those (the load tools' ledger,
 * lab/ledger.py). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "writer_int.h"

static int cmp_id_p(const void *a, const void *b) {
    return writer_redis__id_cmp(*(const writer_id *)a, *(const writer_id *)b);
}

typedef struct product_row {
    int32_t id;
    long long redis;
    long long backlog, pending;
} product_row;

typedef struct recon {
    redisContext *r;
    char err[600];
    product_row *rows;
    size_t nrows, caprows;
    writer_id last_delivered;
    long long backlog, pending, length;
    writer_id *pend; /* the pending ids, sorted */
    size_t npend;
} recon;

static product_row *row_of(recon *x, int32_t id) {
    for (size_t i = 0; i < x->nrows; i++)
        if (x->rows[i].id == id) return &x->rows[i];
    if (x->nrows == x->caprows) {
        size_t cap = x->caprows ? x->caprows * 2 : 64;
        product_row *p = realloc(x->rows, cap * sizeof(*p));
        if (!p) return NULL;
        x->rows = p, x->caprows = cap;
    }
    product_row *row = &x->rows[x->nrows++];
    memset(row, 0, sizeof(*row));
    row->id = id;
    row->redis = -1; /* no count in Redis */
    return row;
}

/* The group's state: last delivered id, pending count; backlog is counted below. */
static int group_state(recon *x) {
    const char *argv[] = {"XINFO", "GROUPS", WRITER_STREAM};
    redisReply *rep = writer_redis__cmd(x->r, 3, argv, x->err, sizeof(x->err));
    if (!rep) return WRITER_ERR_REDIS;
    int rc = WRITER_ERR_REDIS;
    snprintf(x->err, sizeof(x->err), "redis: no group %s on %s", WRITER_GROUP, WRITER_STREAM);
    for (size_t g = 0; rep->type == REDIS_REPLY_ARRAY && g < rep->elements; g++) {
        const redisReply *kv = rep->element[g];
        bool ours = false;
        writer_id last = {0, 0};
        long long pending = 0;
        for (size_t i = 0; kv->type == REDIS_REPLY_ARRAY && i + 1 < kv->elements; i += 2) {
            const redisReply *k = kv->element[i], *v = kv->element[i + 1];
            if (k->type != REDIS_REPLY_STRING) continue;
            if (strcmp(k->str, "name") == 0 && v->type == REDIS_REPLY_STRING)
                ours = strcmp(v->str, WRITER_GROUP) == 0;
            if (strcmp(k->str, "last-delivered-id") == 0 && v->type == REDIS_REPLY_STRING)
                last = writer_redis__id(v->str);
            if (strcmp(k->str, "pending") == 0 && v->type == REDIS_REPLY_INTEGER)
                pending = v->integer;
        }
        if (ours) {
            x->last_delivered = last;
            x->pending = pending;
            rc = WRITER_OK;
        }
    }
    freeReplyObject(rep);
    return rc;
}

/* The pending ids (sorted) and, per product, the entries after the last delivered id
 * (backlog) and those pending. */
static int stream_state(recon *x) {
    char start[64] = "-", count[] = "1000";
    int rc = group_state(x);
    if (rc != WRITER_OK) return rc;
    free(x->pend);
    x->pend = NULL;
    x->npend = 0;
    x->backlog = 0;
    for (size_t i = 0; i < x->nrows; i++)
        x->rows[i].backlog = x->rows[i].pending = 0;
    if (x->pending > 0) {
        const char *argv[] = {"XPENDING", WRITER_STREAM, WRITER_GROUP, "-", "+", "1000000"};
        redisReply *rep = writer_redis__cmd(x->r, 6, argv, x->err, sizeof(x->err));
        if (!rep) return WRITER_ERR_REDIS;
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
            (x->pend = calloc(rep->elements, sizeof(*x->pend)))) {
            for (size_t i = 0; i < rep->elements; i++) {
                const redisReply *p = rep->element[i];
                if (p->type == REDIS_REPLY_ARRAY && p->elements >= 1 &&
                    p->element[0]->type == REDIS_REPLY_STRING)
                    x->pend[x->npend++] = writer_redis__id(p->element[0]->str);
            }
            qsort(x->pend, x->npend, sizeof(*x->pend), cmp_id_p);
            snprintf(start, sizeof(start), "%llu-%llu", x->pend[0].ms, x->pend[0].seq);
        }
        freeReplyObject(rep);
    }
    if (x->npend == 0)
        snprintf(start, sizeof(start), "(%llu-%llu", x->last_delivered.ms, x->last_delivered.seq);
    for (;;) {
        const char *argv[] = {"XRANGE", WRITER_STREAM, start, "+", "COUNT", count};
        redisReply *rep = writer_redis__cmd(x->r, 6, argv, x->err, sizeof(x->err));
        if (!rep) return WRITER_ERR_REDIS;
        size_t got = rep->type == REDIS_REPLY_ARRAY ? rep->elements : 0;
        for (size_t i = 0; i < got; i++) {
            writer_entry e;
            writer_redis__entry(rep->element[i], &e);
            writer_id id = writer_redis__id(e.id);
            bool later = writer_redis__id_cmp(id, x->last_delivered) > 0;
            bool pend = !later && bsearch(&id, x->pend, x->npend, sizeof(id), cmp_id_p);
            if (!later && !pend) continue;
            x->backlog += later;
            product_row *row = e.kind == WRITER__ENTRY_OK ? row_of(x, e.product) : NULL;
            if (row) row->backlog += later, row->pending += pend;
        }
        if (got > 0 && rep->element[got - 1]->type == REDIS_REPLY_ARRAY) {
            writer_entry e;
            writer_redis__entry(rep->element[got - 1], &e);
            snprintf(start, sizeof(start), "(%s", e.id);
        }
        freeReplyObject(rep);
        if (got < 1000) break;
    }
    return WRITER_OK;
}

/* Every `stockd:stock:{<id>}` and its count. */
static int redis_counts(recon *x) {
    char cursor[32] = "0";
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", WRITER_STOCK_PREFIX "*", "COUNT", "1000"};
        redisReply *rep = writer_redis__cmd(x->r, 6, argv, x->err, sizeof(x->err));
        if (!rep) return WRITER_ERR_REDIS;
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
            snprintf(x->err, sizeof(x->err), "redis: SCAN: unexpected reply");
            freeReplyObject(rep);
            return WRITER_ERR_REDIS;
        }
        snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
        const redisReply *keys = rep->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            const char *k = keys->element[i]->str + strlen(WRITER_STOCK_PREFIX);
            char *end;
            long id = strtol(k, &end, 10);
            if (strcmp(end, "}") != 0 || id <= 0 || id > INT32_MAX) continue;
            const char *get[] = {"GET", keys->element[i]->str};
            redisReply *v = writer_redis__cmd(x->r, 2, get, x->err, sizeof(x->err));
            if (!v) {
                freeReplyObject(rep);
                return WRITER_ERR_REDIS;
            }
            product_row *row = row_of(x, (int32_t)id);
            if (row && v->type == REDIS_REPLY_STRING) row->redis = strtoll(v->str, NULL, 10);
            freeReplyObject(v);
        }
        freeReplyObject(rep);
    } while (strcmp(cursor, "0") != 0);
    return WRITER_OK;
}

static int by_id(const void *a, const void *b) {
    const product_row *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

int writer_reconcile(const writer_config *c, unsigned wait_s, volatile sig_atomic_t *stop,
                     FILE *out) {
    recon x = {0};
    writer_db *db = writer_db__new(&c->mysql);
    int rc = db ? writer_redis__dial(c, 5000, &x.r, x.err, sizeof(x.err)) : WRITER_ERR_NOMEM;
    time_t deadline = time(NULL) + (time_t)wait_s;
    bool drained = false, agree = true;

    if (rc != WRITER_OK) goto out;
    /* Wait for the writers to drain: nothing after the last delivered id, nothing pending. */
    for (;;) {
        if ((rc = redis_counts(&x)) != WRITER_OK || (rc = stream_state(&x)) != WRITER_OK) goto out;
        drained = x.backlog == 0 && x.pending == 0;
        if (drained || *stop || time(NULL) >= deadline) break;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 100000000L};
        nanosleep(&ts, NULL);
    }
    qsort(x.rows, x.nrows, sizeof(*x.rows), by_id);
    fprintf(out, "%8s %8s %8s %8s %8s %8s %9s  %s\n", "product", "redis", "backlog", "pending",
            "mysql", "orders", "oversold", "verdict");
    for (size_t i = 0; i < x.nrows; i++) {
        product_row *p = &x.rows[i];
        bool found;
        int64_t stock = 0, orders = 0, oversold = 0;
        if (writer_db__product(db, p->id, &found, &stock, &orders, &oversold) != WRITER_OK) {
            snprintf(x.err, sizeof(x.err), "mysql: %s", writer_db__errstr(db));
            rc = WRITER_ERR_DB;
            goto out;
        }
        const char *verdict = "agree";
        if (!drained)
            verdict = "not drained";
        else if (!found)
            verdict = "NO ROW IN MARIADB";
        else if (p->redis < 0)
            verdict = "no count in Redis";
        else if (p->redis != stock)
            verdict = "DRIFT";
        else if (oversold > 0)
            verdict = "OVERSOLD";
        /* A product whose count is not in Redis is not in this mode: not judged. */
        if (drained && p->redis >= 0 && strcmp(verdict, "agree") != 0) agree = false;
        char redis[24] = "-", mysql[24] = "-";
        if (p->redis >= 0) snprintf(redis, sizeof(redis), "%lld", p->redis);
        if (found) snprintf(mysql, sizeof(mysql), "%lld", (long long)stock);
        fprintf(out, "%8d %8s %8lld %8lld %8s %8lld %9lld  %s\n", p->id, redis, p->backlog,
                p->pending, mysql, (long long)orders, (long long)oversold, verdict);
    }
    int64_t n = 0;
    double p50 = 0, p99 = 0;
    if (writer_db__lag(db, &n, &p50, &p99) != WRITER_OK) {
        snprintf(x.err, sizeof(x.err), "mysql: %s", writer_db__errstr(db));
        rc = WRITER_ERR_DB;
        goto out;
    }
    fprintf(out, "stream %s, group %s: backlog %lld, pending %lld\n", WRITER_STREAM, WRITER_GROUP,
            x.backlog, x.pending);
    fprintf(out,
            "writer lag (answered_at -> created_at) over %lld orders: median %.1f ms, "
            "p99 %.1f ms\n",
            (long long)n, p50 / 1000.0, p99 / 1000.0);
    if (!drained) {
        fprintf(out, "verdict: NOT DRAINED after %u s\n", wait_s);
        rc = WRITER_NOT_DRAINED;
    } else {
        fprintf(out, "verdict: %s\n", agree ? "agree" : "DISAGREE");
        rc = agree ? WRITER_OK : WRITER_DISAGREE;
    }
out:
    if (rc < 0) fprintf(out, "stock-writer --reconcile: %s\n", x.err);
    if (x.r) redisFree(x.r);
    writer_db__free(db);
    free(x.rows);
    free(x.pend);
    return rc;
}
