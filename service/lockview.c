/* lockview.c: GET /lock/queue?id=N, what the lock service holds for product N's lock
 * right now (lock.h, lock_view_read), for people to watch: the live page draws it.
 *
 * Answer (200): {"result":"ok","id":N,"mode":..,"kind":..,"view":"queue"|"lease"|
 * "holder"|"none"|"unavailable","lock":"product_N","path":..,"total":T,"shown":n,
 * "truncated":bool,"lease_ms":ms,"entries":[{"node","owner","seq","token","holds",
 * "watches","ours","impl","at_limit"}],"strays":k,"age_ms":..,"instance":..}. "impl" (zk)
 * names who made the node, from its name: stockd, curator, kazoo, zoolock or other;
 * "at_limit" (only when true) marks a node whose sequence is at ZooKeeper's limit, which
 * never holds; "strays" counts the children that are no contender
 * (docs/zookeeper-lock.md). "none": the mode takes no lock;
 * "unavailable": its kind has no view. A lock service that cannot be read is 503.
 *
 * Safe to leave on: the view is read by one worker at a time, each product's view is
 * kept STOCKD_LOCKVIEW_FRESH_MS and given again meanwhile (so a page polled by many
 * costs the lock service no more than one reader), and it lists at most LOCK_VIEW_MAX
 * entries. A worker that finds another one reading answers the last view it has of
 * that product, or 503 "busy" when it has none. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stockd.h"

#define LOCKVIEW_SLOTS 8 /* products whose last view is kept */

typedef struct lockview_slot {
    int32_t id; /* 0 = empty */
    uint64_t at_ns;
    char *body; /* the JSON without age_ms and instance, "{...," open at the end */
} lockview_slot;

static pthread_mutex_t lockview_read_mu = PTHREAD_MUTEX_INITIALIZER;  /* one reader */
static pthread_mutex_t lockview_cache_mu = PTHREAD_MUTEX_INITIALIZER; /* the slots */
static lockview_slot lockview_slots[LOCKVIEW_SLOTS];
static unsigned lockview_next;

/* The cached view of id, completed with its age and our instance (malloc'd), or NULL. */
static char *lockview_cached(int32_t id, uint64_t max_age_ns, const char *instance) {
    char *out = NULL;
    uint64_t now = stockd_now_ns();
    pthread_mutex_lock(&lockview_cache_mu);
    for (unsigned i = 0; i < LOCKVIEW_SLOTS; i++) {
        lockview_slot *s = &lockview_slots[i];
        if (s->id != id || !s->body || now - s->at_ns > max_age_ns) continue;
        cJSON *name = cJSON_CreateString(instance);
        char *quoted = name ? cJSON_PrintUnformatted(name) : NULL; /* escaped, in quotes */
        size_t n = strlen(s->body) + (quoted ? strlen(quoted) : 0) + 64;
        if (quoted && (out = malloc(n)))
            snprintf(out, n, "%s\"age_ms\":%llu,\"instance\":%s}", s->body,
                     (unsigned long long)((now - s->at_ns) / 1000000), quoted);
        free(quoted);
        cJSON_Delete(name);
        break;
    }
    pthread_mutex_unlock(&lockview_cache_mu);
    return out;
}

/* Keeps body (taken over) as id's view. */
static void lockview_keep(int32_t id, char *body) {
    pthread_mutex_lock(&lockview_cache_mu);
    lockview_slot *s = NULL;
    for (unsigned i = 0; i < LOCKVIEW_SLOTS && !s; i++)
        if (lockview_slots[i].id == id) s = &lockview_slots[i];
    if (!s) s = &lockview_slots[lockview_next++ % LOCKVIEW_SLOTS];
    free(s->body);
    s->id = id;
    s->at_ns = stockd_now_ns();
    s->body = body;
    pthread_mutex_unlock(&lockview_cache_mu);
}

static cJSON *lockview_entry(const lock_view *v, size_t i) {
    const lock_view_entry *e = &v->e[i];
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "node", e->node);
    if (e->owner[0])
        cJSON_AddStringToObject(o, "owner", e->owner);
    else
        cJSON_AddNullToObject(o, "owner");
    if (e->seq >= 0) cJSON_AddNumberToObject(o, "seq", (double)e->seq);
    if (e->token) cJSON_AddNumberToObject(o, "token", (double)e->token);
    cJSON_AddBoolToObject(o, "holds", i == 0 && !e->at_limit);
    if (e->at_limit) cJSON_AddBoolToObject(o, "at_limit", true);
    if (e->watches >= 0 && (size_t)e->watches < v->n)
        cJSON_AddStringToObject(o, "watches", v->e[e->watches].node);
    else
        cJSON_AddNullToObject(o, "watches");
    cJSON_AddBoolToObject(o, "ours", e->ours);
    if (e->impl[0]) cJSON_AddStringToObject(o, "impl", e->impl);
    return o;
}

/* The view's JSON, left open ("{...,") for lockview_cached to close; NULL when out of
 * memory. v NULL: the mode has no lock (what = "none") or its kind no view. */
static char *lockview_json(const stockd_ctx *ctx, int32_t id, const char *name, const char *what,
                           const lock_view *v) {
    char *out = NULL, *text = NULL;
    cJSON *o = cJSON_CreateObject(), *entries = NULL;
    if (!o) return NULL;
    const lock_kind *k = lock_set_kind(ctx->locks);
    cJSON_AddStringToObject(o, "result", "ok");
    cJSON_AddNumberToObject(o, "id", id);
    cJSON_AddStringToObject(o, "mode", stockd_lock_mode_name(ctx->cfg->lock));
    cJSON_AddStringToObject(o, "kind", k ? k->name : "none");
    cJSON_AddStringToObject(o, "view", what);
    cJSON_AddStringToObject(o, "lock", name);
    if (!v) {
        cJSON_AddStringToObject(o, "message",
                                strcmp(what, "none") == 0
                                    ? "this mode takes no lock from a lock service (for-update's "
                                      "row lock is MySQL's own): there is no queue to show"
                                    : "this lock kind offers no view of its lock");
    } else {
        cJSON_AddStringToObject(o, "path", v->path);
        cJSON_AddNumberToObject(o, "total", (double)v->total);
        cJSON_AddNumberToObject(o, "shown", (double)v->n);
        if (v->queue) cJSON_AddNumberToObject(o, "strays", (double)v->strays);
        cJSON_AddBoolToObject(o, "truncated", v->total > v->n);
        if (v->lease) cJSON_AddNumberToObject(o, "lease_ms", (double)v->lease_ms);
        if (!(entries = cJSON_AddArrayToObject(o, "entries"))) goto out;
        for (size_t i = 0; i < v->n; i++) {
            cJSON *e = lockview_entry(v, i);
            if (!e) goto out;
            cJSON_AddItemToArray(entries, e);
        }
    }
    if (ctx->cfg->segments > 1)
        cJSON_AddStringToObject(o, "note",
                                "with --segments each segment has a lock of its "
                                "own; this is the whole product's lock");
    if (!(text = cJSON_PrintUnformatted(o))) goto out;
    /* Open the object again so that the age and the instance can follow. */
    size_t n = strlen(text);
    if (n < 2 || text[n - 1] != '}') goto out;
    text[n - 1] = ',';
    out = text;
    text = NULL;
out:
    free(text);
    cJSON_Delete(o);
    return out;
}

static void lockview_answer(stockd_ctx *ctx, stockd_job *job, stockd_result r, const char *msg) {
    stockd_answer a = {.result = r, .id = job->product_id, .message = msg};
    job->result = r;
    job->status = stockd_answer_status(r);
    job->body = stockd_answer_json(&a, ctx->cfg->instance);
    ctx->complete(job);
}

void stockd_lockview_serve(stockd_ctx *ctx, stockd_job *job) {
    const uint64_t fresh_ns = (uint64_t)STOCKD_LOCKVIEW_FRESH_MS * 1000000;
    const char *instance = ctx->cfg->instance;
    char name[32], *body;
    int32_t id = job->product_id;

    if ((body = lockview_cached(id, fresh_ns, instance))) goto done;
    if (pthread_mutex_trylock(&lockview_read_mu) != 0) {
        /* Another worker is reading: the last view, however old, or come back. */
        if ((body = lockview_cached(id, UINT64_MAX, instance))) goto done;
        return lockview_answer(ctx, job, STOCKD_R_OVERLOADED,
                               "another view is being read; try again in a moment");
    }
    /* Read again under the lock: the worker that just let go may have read this one. */
    if (!(body = lockview_cached(id, fresh_ns, instance))) {
        lock_view v;
        snprintf(name, sizeof(name), "product_%d", (int)id);
        const stockd_mode *m = stockd_mode_of(ctx->cfg->lock);
        char *open = NULL;
        int rc = LOCK_OK;
        if (!stockd_mode_locks(m)) {
            open = lockview_json(ctx, id, name, "none", NULL);
        } else if (!lock_can_view(ctx->locks)) {
            open = lockview_json(ctx, id, name, "unavailable", NULL);
        } else if ((rc = lock_view_read(ctx->locks, name, &v)) == LOCK_OK) {
            open = lockview_json(ctx, id, name,
                                 v.queue   ? "queue"
                                 : v.lease ? "lease"
                                           : "holder",
                                 &v);
        }
        if (rc != LOCK_OK) {
            pthread_mutex_unlock(&lockview_read_mu);
            char msg[160];
            snprintf(msg, sizeof(msg), "the lock service could not be read: %s", lock_strerror(rc));
            return lockview_answer(ctx, job, STOCKD_R_UNAVAILABLE, msg);
        }
        if (open) {
            lockview_keep(id, open);
            body = lockview_cached(id, UINT64_MAX, instance);
        }
    }
    pthread_mutex_unlock(&lockview_read_mu);
    if (!body) return lockview_answer(ctx, job, STOCKD_R_INTERNAL, "out of memory");
done:
    job->result = STOCKD_R_OK;
    job->status = 200;
    job->body = body;
    ctx->complete(job);
}
