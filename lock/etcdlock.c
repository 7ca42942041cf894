/* etcdlock.c: a fair lock on etcd 3.4 (its v3 JSON gateway, through libcurl and cJSON),
 * with a lease, a keep-alive and a fencing token: Consul's model of article 001 §5 (a
 * session plus a check-and-set acquire), on the server Debian 12 packages.
 *
 * The recipe is etcd's own concurrency.Mutex:
 *   - every acquisition grants a lease (LeaseGrant, ttl_s seconds; the server may raise
 *     it to its minimum) and keeps it alive while it waits and while it holds: a thread
 *     of the handle sends LeaseKeepAlive every third of the TTL;
 *   - it puts the key <prefix><name>/<lease id in hex>, attached to the lease, in a
 *     transaction that compares the key's create_revision with 0 (the check-and-set);
 *     the same transaction reads the prefix's oldest key. If that is ours, we hold it;
 *   - otherwise we wait for our predecessor, the key of the prefix with the largest
 *     create revision below ours, to be deleted (a watch from the revision we read, so a
 *     delete in between is not missed), then look again. Waiters queue by create
 *     revision: first come, first served, and a release wakes one waiter only;
 *   - the fencing token is our key's create revision: etcd's revision counter grows with
 *     every write in the cluster and survives restarts (it is in the data directory);
 *   - release deletes our key (LOST if it was gone) and revokes the lease. A holder that
 *     dies stops keeping its lease alive; etcd deletes its key once the TTL has passed
 *     (it looks for expired leases every half second), so the lock is blocked for at
 *     most about one TTL after the last keep-alive.
 *
 * What a lease cannot promise: a holder paused (SIGSTOP, GC, swap) past its TTL wakes
 * believing it holds the lock while a successor does. etcdlock_check() says LOST once the
 * TTL minus a safety margin has passed since the last keep-alive that succeeded was sent
 * (or since the grant), or once a keep-alive found the lease gone; a pause between that
 * check and the write is invisible to it, and only the fencing token, checked by the
 * database in the write itself, refuses the late write.
 *
 *
 * A handle is one HTTP connection for commands, one for watches (both the calling
 * thread's) and a keep-alive thread of its own with a third; etcdlock_check may race with
 * the keep-alive thread safely (it reads one atomic). etcdlock_new loads libcurl
 * (libcurl.so.4, with dlopen: a program that links etcdlock but never makes a handle does
 * not map libcurl and its ~18 libraries) and runs curl_global_init() once per process.
 * The calls have the contracts and thread rules of a lease library (lease_pool_int.h);
 * etcdlock_int.h declares them.
 *
 * This file is the recipe: a lease per acquisition and the handle's keep-alive thread
 * that renews it, the queue (a check-and-set put and the prefix's oldest key in one
 * transaction, then the predecessor and a watch on it), acquire, check, token, release
 * and renew, and at its end the kind's row for lock.h's registry. Every request may be
 * repeated: the put is a check-and-set whose failure branch reads our own key back, as
 * concurrency.Mutex's. The requests travel through etcdlock_http.c (etcd's v3 JSON
 * gateway through libcurl, member failover, the streaming watch); etcdlock_int.h is
 * what the two share. */
#include "etcdlock_int.h"
#include "lease_pool_int.h"
#include "lock.h"
#include "lock_clock.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* ---------------------------------------------------------------- helpers */

static void set_err(etcdlock *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_err(etcdlock *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->errstr, sizeof(l->errstr), fmt, ap);
    va_end(ap);
}

static bool name_valid(const char *name) {
    return lock__lease_name_valid(name, ETCDLOCK_NAME_MAX);
}

/* ---------------------------------------------------------------- leases */

/* Grants a lease of l->ttl_s: LOCK_OK with *id, *ttl_s (as granted) and *sent_us. */
static int el_grant(etcdlock *l, int64_t *id, int *ttl_s, int64_t *sent_us) {
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    etcdlock__j_add_i64(req, "TTL", l->ttl_s);
    *sent_us = lock_now_us();
    int rc = etcdlock__call(l, "/v3/lease/grant", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    *id = etcdlock__j_i64(res, "ID");
    *ttl_s = (int)etcdlock__j_i64(res, "TTL");
    cJSON_Delete(res);
    if (*id == 0 || *ttl_s <= 0) {
        set_err(l, "LeaseGrant: an answer without ID or TTL");
        return LOCK_ERR_SERVER;
    }
    return LOCK_OK;
}

/* Revokes a lease (its keys go with it). LOCK_OK, also when it was gone already. */
static int el_revoke(etcdlock *l, int64_t id) {
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    etcdlock__j_add_i64(req, "ID", id);
    int grpc = 0;
    int rc = etcdlock__call(l, "/v3/lease/revoke", req, &res, &grpc);
    cJSON_Delete(req);
    cJSON_Delete(res);
    if (rc == LOCK_ERR_SERVER && grpc == ETCDLOCK_GRPC_NOT_FOUND) return LOCK_OK;
    return rc;
}

static void hold_link(etcdlock *l, etcdlock_hold *h) {
    int64_t tick = (int64_t)h->ttl_s * 1000000 / 3;
    pthread_mutex_lock(&l->mu);
    h->next = l->holds;
    l->holds = h;
    if (tick < l->ka_tick_us) l->ka_tick_us = tick;
    pthread_mutex_unlock(&l->mu);
}

static void hold_unlink(etcdlock *l, etcdlock_hold *h) {
    pthread_mutex_lock(&l->mu);
    for (etcdlock_hold **p = &l->holds; *p; p = &(*p)->next) {
        if (*p == h) {
            *p = h->next;
            break;
        }
    }
    pthread_mutex_unlock(&l->mu);
}

/* One keep-alive of h's lease through connection c of handle l: LOCK_OK (h's lease
 * clock moved on), LOCK_LOST (the lease is gone; h is marked lost) or the call's error
 * (detail in err). Counted in l's keep-alive counters. */
static int keepalive(etcdlock *l, etcdlock_conn *c, etcdlock_hold *h, char *err, size_t errcap) {
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    etcdlock__j_add_i64(req, "ID", h->lease);
    int64_t sent = lock_now_us();
    int rc = etcdlock__conn_call(l, c, "/v3/lease/keepalive", req, &res, NULL, err, errcap);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    int64_t ttl = etcdlock__j_i64(etcdlock__j_get(res, "result"), "TTL");
    cJSON_Delete(res);
    if (ttl <= 0) {
        /* The lease is gone (it ran out while we could not reach etcd, or a pause):
         * its key is deleted, and a successor may hold the lock. */
        atomic_store(&h->lost, 1);
        atomic_store(&h->valid_until_us, 0);
        atomic_fetch_add(&l->keepalive_lost, 1);
        snprintf(err, errcap, "lease %llx is gone", (unsigned long long)h->lease);
        return LOCK_LOST;
    }
    lock_clock_extend(&h->valid_until_us, sent + ttl * 1000000 - (int64_t)h->margin_ms * 1000);
    atomic_fetch_add(&l->keepalives, 1);
    return LOCK_OK;
}

/* One keep-alive for h, on the keep-alive thread (mu held). An unreachable etcd is
 * tried again at the next tick, while the TTL lasts. */
static void ka_one(etcdlock *l, etcdlock_hold *h) {
    char err[256];
    (void)keepalive(l, &l->ka, h, err, sizeof(err));
}

static void *ka_main(void *arg) {
    etcdlock *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ns = until.tv_nsec + l->ka_tick_us * 1000;
        until.tv_sec += (time_t)(ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
        pthread_cond_timedwait(&l->cv, &l->mu, &until);
        if (l->stop) break;
        for (etcdlock_hold *h = l->holds; h && !l->stop; h = h->next)
            if (!atomic_load(&h->lost)) ka_one(l, h);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---------------------------------------------------------------- handle */

int etcdlock_new(const etcdlock_config *cfg, etcdlock **out, char *errbuf, size_t errcap) {
    if (errbuf && errcap) errbuf[0] = '\0';
    if (!out) return LOCK_ERR_ARGS;
    *out = NULL;
    if (!cfg) return LOCK_ERR_ARGS;
    int lrc = etcdlock__http_global_init(errbuf, errcap);
    if (lrc != LOCK_OK) return lrc;
    etcdlock *l = calloc(1, sizeof(*l));
    if (!l) return LOCK_ERR_NOMEM;
    int rc = LOCK_ERR_ARGS;
    const char *prefix = cfg->prefix ? cfg->prefix : "lock/";
    l->ttl_s = cfg->ttl_s ? cfg->ttl_s : 10;
    l->margin_cfg_ms = cfg->safety_margin_ms;
    l->poll_ms = cfg->poll_ms ? cfg->poll_ms : 50;
    l->connect_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 2000;
    l->io_ms = cfg->io_timeout_ms ? cfg->io_timeout_ms : 2000;
    l->cancel = cfg->cancel;
    l->ka_tick_us = (int64_t)l->ttl_s * 1000000 / 3;
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    l->nep = etcdlock__split_endpoints(cfg->endpoints, l->ep);
    if (l->nep <= 0) {
        l->nep = 0;
        set_err(l, "bad etcd endpoints \"%s\" (want HOST:PORT[,HOST:PORT...])",
                cfg->endpoints ? cfg->endpoints : "");
        goto fail;
    }
    if (strlen(prefix) >= sizeof(l->prefix) || l->ttl_s < 1 || cfg->safety_margin_ms < 0 ||
        l->poll_ms < 1 || l->connect_ms < 1 || l->io_ms < 1) {
        set_err(l, "bad configuration: want a prefix of at most 32 bytes, ttl_s >= 1, a "
                   "margin >= 0 and positive timeouts");
        goto fail;
    }
    strcpy(l->prefix, prefix);
    snprintf(l->owner, sizeof(l->owner), "%s", cfg->owner ? cfg->owner : "");
    rc = LOCK_ERR_NOMEM;
    if (etcdlock__http_open(l) != LOCK_OK) {
        set_err(l, "out of memory");
        goto fail;
    }
    if ((rc = etcdlock_ping(l)) != LOCK_OK) goto fail;
    l->st.ops = 0;
    if (!cfg->no_keepalive) {
        if (pthread_create(&l->ka_thread, NULL, ka_main, l) != 0) {
            set_err(l, "cannot start the keep-alive thread");
            rc = LOCK_ERR_NOMEM;
            goto fail;
        }
        l->ka_started = true;
    }
    *out = l;
    return LOCK_OK;

fail:
    if (errbuf && errcap) snprintf(errbuf, errcap, "%s", l->errstr);
    etcdlock_free(l);
    return rc;
}

void etcdlock_free(etcdlock *l) {
    if (!l) return;
    if (l->ka_started) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->ka_thread, NULL);
    }
    while (l->holds) {
        etcdlock_hold *h = l->holds;
        l->holds = h->next;
        free(h);
    }
    etcdlock__http_close(l);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* ---------------------------------------------------------------- the queue */

/* Our place in the queue: the check-and-set put of h->key with h->lease, and the
 * prefix's oldest key in the same transaction. On LOCK_OK, h->rev is our key's create
 * revision and *first that of the oldest key (0 if none). */
static int el_enqueue(etcdlock *l, etcdlock_hold *h, const char *pfx_b64, const char *end_b64,
                      int64_t *first) {
    char key_b64[ETCDLOCK_B64_MAX], owner_b64[ETCDLOCK_B64_MAX];
    etcdlock__b64s(h->key, key_b64);
    etcdlock__b64s(l->owner, owner_b64);
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    cJSON *cmp = cJSON_AddArrayToObject(req, "compare");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cmp, c);
    cJSON_AddStringToObject(c, "key", key_b64);
    cJSON_AddStringToObject(c, "target", "CREATE");
    cJSON_AddStringToObject(c, "result", "EQUAL");
    etcdlock__j_add_i64(c, "create_revision", 0);
    /* Success: our put, then the owner. Failure (the put happened before, and this is a
     * repeat): our key, then the owner. */
    for (int branch = 0; branch < 2; branch++) {
        cJSON *ops = cJSON_AddArrayToObject(req, branch == 0 ? "success" : "failure");
        cJSON *op = cJSON_CreateObject(), *body;
        cJSON_AddItemToArray(ops, op);
        if (branch == 0) {
            body = cJSON_AddObjectToObject(op, "request_put");
            cJSON_AddStringToObject(body, "key", key_b64);
            cJSON_AddStringToObject(body, "value", owner_b64);
            etcdlock__j_add_i64(body, "lease", h->lease);
        } else {
            body = cJSON_AddObjectToObject(op, "request_range");
            cJSON_AddStringToObject(body, "key", key_b64);
        }
        op = cJSON_CreateObject();
        cJSON_AddItemToArray(ops, op);
        body = cJSON_AddObjectToObject(op, "request_range");
        etcdlock__j_add_queue_range(body, pfx_b64, end_b64, "ASCEND", 1);
    }
    int rc = etcdlock__call(l, "/v3/kv/txn", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    bool ok = cJSON_IsTrue(etcdlock__j_get(res, "succeeded"));
    const cJSON *resps = etcdlock__j_get(res, "responses");
    const cJSON *r0 = etcdlock__j_get(cJSON_GetArrayItem(resps, 0), "response_range");
    const cJSON *r1 = etcdlock__j_get(cJSON_GetArrayItem(resps, 1), "response_range");
    h->rev =
        ok ? etcdlock__j_i64(etcdlock__j_get(res, "header"), "revision")
           : etcdlock__j_i64(cJSON_GetArrayItem(etcdlock__j_get(r0, "kvs"), 0), "create_revision");
    *first = etcdlock__j_i64(cJSON_GetArrayItem(etcdlock__j_get(r1, "kvs"), 0), "create_revision");
    cJSON_Delete(res);
    if (h->rev <= 0) {
        set_err(l, "lock %s: the put answered no revision", h->name);
        return LOCK_ERR_SERVER;
    }
    return LOCK_OK;
}

/* Our predecessor: the key of the prefix with the largest create revision below ours.
 * On LOCK_OK, pred (ETCDLOCK_B64_MAX bytes) is its base64 key or "" if there is none, and *rev
 * the revision the range was read at. */
static int el_predecessor(etcdlock *l, const etcdlock_hold *h, const char *pfx_b64,
                          const char *end_b64, char *pred, int64_t *rev) {
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    etcdlock__j_add_queue_range(req, pfx_b64, end_b64, "DESCEND", 1);
    etcdlock__j_add_i64(req, "max_create_revision", h->rev - 1);
    cJSON_AddTrueToObject(req, "keys_only");
    int rc = etcdlock__call(l, "/v3/kv/range", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    *rev = etcdlock__j_i64(etcdlock__j_get(res, "header"), "revision");
    const cJSON *k = etcdlock__j_get(cJSON_GetArrayItem(etcdlock__j_get(res, "kvs"), 0), "key");
    pred[0] = '\0';
    if (cJSON_IsString(k) && strlen(k->valuestring) < ETCDLOCK_B64_MAX)
        strcpy(pred, k->valuestring);
    cJSON_Delete(res);
    return LOCK_OK;
}

/* Does our key still exist with our create revision? 1 yes, 0 no (the lease ended while
 * we waited), or a negative code. */
static int el_key_alive(etcdlock *l, const etcdlock_hold *h) {
    char key_b64[ETCDLOCK_B64_MAX];
    etcdlock__b64s(h->key, key_b64);
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    cJSON_AddStringToObject(req, "key", key_b64);
    int rc = etcdlock__call(l, "/v3/kv/range", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    int64_t rev =
        etcdlock__j_i64(cJSON_GetArrayItem(etcdlock__j_get(res, "kvs"), 0), "create_revision");
    cJSON_Delete(res);
    return rev == h->rev ? 1 : 0;
}
/* ---------------------------------------------------------------- the lock */

int etcdlock_acquire(etcdlock *l, const char *name, int timeout_ms, etcdlock_hold **out) {
    if (!out) return LOCK_ERR_ARGS;
    *out = NULL;
    if (!l || !name) return LOCK_ERR_ARGS;
    l->errstr[0] = '\0';
    if (!name_valid(name)) {
        set_err(l, "bad lock name (want 1..%d bytes of [A-Za-z0-9_.-])", ETCDLOCK_NAME_MAX);
        return LOCK_ERR_ARGS;
    }
    /* Only this thread changes the list, so reading it without mu is safe here. */
    for (etcdlock_hold *h = l->holds; h; h = h->next) {
        if (strcmp(h->name, name) == 0) {
            set_err(l, "lock %s is already held by this handle", name);
            return LOCK_ERR_ARGS;
        }
    }
    etcdlock_hold *h = calloc(1, sizeof(*h));
    if (!h) return LOCK_ERR_NOMEM;
    h->l = l;
    strcpy(h->name, name);
    char pfx[ETCDLOCK_KEY_MAX], pfx_b64[ETCDLOCK_B64_MAX], end_b64[ETCDLOCK_B64_MAX],
        pred[ETCDLOCK_B64_MAX];
    etcdlock__queue_range(l, name, pfx, pfx_b64, end_b64);
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : lock_now_us() + (int64_t)timeout_ms * 1000;
    bool linked = false;
    int rc;

    for (;;) { /* once, and again if our lease ended while we waited */
        if (l->cancel && atomic_load(l->cancel)) {
            set_err(l, "lock %s: cancelled", name);
            rc = LOCK_ERR_CANCELLED;
            goto out;
        }
        int64_t sent;
        if ((rc = el_grant(l, &h->lease, &h->ttl_s, &sent)) != LOCK_OK) goto out;
        h->margin_ms = l->margin_cfg_ms ? l->margin_cfg_ms : h->ttl_s * 100 + 2;
        if (h->margin_ms >= h->ttl_s * 1000) h->margin_ms = h->ttl_s * 1000 / 2;
        atomic_store(&h->lost, 0);
        atomic_store(&h->valid_until_us,
                     sent + (int64_t)h->ttl_s * 1000000 - (int64_t)h->margin_ms * 1000);
        snprintf(h->key, sizeof(h->key), "%s%s/%" PRIx64, l->prefix, name, (uint64_t)h->lease);
        hold_link(l, h);
        linked = true;

        int64_t first = 0;
        if ((rc = el_enqueue(l, h, pfx_b64, end_b64, &first)) != LOCK_OK) goto out;
        if (first == 0 || first == h->rev) goto held;
        for (;;) {
            if (l->cancel && atomic_load(l->cancel)) {
                set_err(l, "lock %s: cancelled", name);
                rc = LOCK_ERR_CANCELLED;
                goto out;
            }
            int64_t at = 0;
            if ((rc = el_predecessor(l, h, pfx_b64, end_b64, pred, &at)) != LOCK_OK) goto out;
            if (!pred[0]) break; /* no older key: ours is first, if it still exists */
            if (lock_now_us() >= deadline) {
                set_err(l, "lock %s: not acquired within %d ms", name, timeout_ms);
                l->st.timeouts++;
                rc = LOCK_ERR_TIMEOUT;
                goto out;
            }
            rc = etcdlock__watch_delete(l, pred, at, deadline);
            if (rc == LOCK_ERR_CANCELLED) {
                set_err(l, "lock %s: cancelled", name);
                goto out;
            }
            if (rc < 0) goto out;
        }
        int alive = el_key_alive(l, h);
        if (alive < 0) {
            rc = alive;
            goto out;
        }
        if (alive) goto held;
        /* Our lease ended while we waited (etcd unreachable from the keep-alive for a
         * TTL): the key is gone, and with it our place. Queue again at the end. */
        hold_unlink(l, h);
        linked = false;
    }

held:
    h->thread = pthread_self();
    l->st.acquired++;
    *out = h;
    return LOCK_OK;

out:
    if (linked) {
        hold_unlink(l, h);
        /* Out of the queue at once, so our successor does not wait for our TTL. The
         * error's detail is the reason we give up, not this clean-up's. */
        char keep[sizeof(l->errstr)];
        memcpy(keep, l->errstr, sizeof(keep));
        (void)el_revoke(l, h->lease);
        memcpy(l->errstr, keep, sizeof(keep));
    }
    free(h);
    return rc;
}

int etcdlock_check(const etcdlock_hold *h) {
    if (!h) return LOCK_ERR_ARGS;
    return lock_now_us() < atomic_load(&h->valid_until_us) ? LOCK_OK : LOCK_LOST;
}

int64_t etcdlock_token(const etcdlock_hold *h) {
    return h ? h->rev : 0;
}

int etcdlock_ttl(const etcdlock_hold *h) {
    return h ? h->ttl_s : 0;
}

int etcdlock_renew(etcdlock *via, etcdlock_hold *h) {
    if (!via || !h) return LOCK_ERR_ARGS;
    via->errstr[0] = '\0';
    return keepalive(via, &via->cmd, h, via->errstr, sizeof(via->errstr));
}

int etcdlock_release(etcdlock_hold *h) {
    if (!h) return LOCK_ERR_ARGS;
    if (!pthread_equal(h->thread, pthread_self())) return LOCK_ERR_NOT_OWNER;
    etcdlock *l = h->l;
    l->errstr[0] = '\0';
    hold_unlink(l, h);
    char key_b64[ETCDLOCK_B64_MAX];
    etcdlock__b64s(h->key, key_b64);
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    int rc = LOCK_ERR_NOMEM;
    if (!req) goto out;
    cJSON_AddStringToObject(req, "key", key_b64);
    rc = etcdlock__call(l, "/v3/kv/deleterange", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) goto out;
    int64_t deleted = etcdlock__j_i64(res, "deleted");
    cJSON_Delete(res);
    /* The lease goes too (a no-op if it ended). Its failure is no reason to say the
     * release failed: the key, which is the lock, is deleted already. */
    char keep[sizeof(l->errstr)];
    memcpy(keep, l->errstr, sizeof(keep));
    (void)el_revoke(l, h->lease);
    memcpy(l->errstr, keep, sizeof(keep));
    if (deleted != 1) {
        set_err(l, "lock %s: key %s was gone (its lease had ended)", h->name, h->key);
        l->st.release_lost++;
        rc = LOCK_LOST;
    } else {
        l->st.released++;
    }
out:
    free(h);
    return rc;
}

int etcdlock_ping(etcdlock *l) {
    if (!l) return LOCK_ERR_ARGS;
    l->errstr[0] = '\0';
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    int rc = etcdlock__call(l, "/v3/maintenance/status", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    int64_t leader = etcdlock__j_i64(res, "leader");
    cJSON_Delete(res);
    if (leader == 0) {
        set_err(l, "etcd answers but has no leader");
        return LOCK_ERR_CONNECTION;
    }
    return LOCK_OK;
}

void etcdlock_get_stats(const etcdlock *l, etcdlock_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof(*out));
    if (!l) return;
    *out = l->st;
    out->keepalives = atomic_load(&((etcdlock *)l)->keepalives);
    out->keepalive_lost = atomic_load(&((etcdlock *)l)->keepalive_lost);
}

const char *etcdlock_errstr(const etcdlock *l) {
    return l ? l->errstr : "";
}

const char *etcdlock_strerror(int code) {
    return lock__lease_strerror(code, "no connection to etcd (or no leader)",
                                "unexpected etcd error");
}

/* ---------------------------------------------------------------- the kind */

/* The registry's row (lock.h): a lease kind, pooled by lease_pool.c, one handle per
 * worker. The pool's lease is in ms; etcd's TTL is in whole seconds, so it is rounded
 * up (stockd's --etcd-ttl-s gives whole seconds anyway). */

static int etcdlock__lease_open(const lock_config *cfg, const atomic_int *cancel, void **handle,
                                char *err, size_t errcap) {
    etcdlock_config c = {.endpoints = cfg->addr,
                         .ttl_s = cfg->lease_ms > 0 ? (cfg->lease_ms + 999) / 1000 : 0,
                         .connect_timeout_ms = lock__lease_connect_ms(cfg),
                         .cancel = cancel,
                         .owner = cfg->owner};
    etcdlock *e = NULL;
    int rc = etcdlock_new(&c, &e, err, errcap);
    *handle = e;
    return rc;
}

/* The calling thread's requests and the keep-alive thread's, all sent to etcd. */
static uint64_t etcdlock__lease_ops(const void *handle) {
    const etcdlock *l = handle;
    return l->st.ops + atomic_load(&((etcdlock *)l)->keepalives) +
           atomic_load(&((etcdlock *)l)->keepalive_lost);
}

LOCK_LEASE_PING_SHIM(etcdlock)
LOCK_LEASE_OPS(etcdlock, etcdlock__lease_ping, etcdlock__lease_view)

/* The pool's set_new, after loading libcurl: a process without it cannot use this
 * kind at all, which the start-up should say rather than every request. */
static int ek_set_new(const lock_kind *k, const lock_config *cfg, void **set, char *err,
                      size_t errcap) {
    int rc = etcdlock__http_global_init(err, errcap);
    return rc != LOCK_OK ? rc : lock_lease_set_new(k, cfg, set, err, errcap);
}

/* LOCK_LEASE_KIND's row with ek_set_new in place of lock_lease_set_new. */
const lock_kind etcdlock_kind = {
    .name = "etcd",
    .service = "etcd",
    .fence_kind = LOCK_FENCE_ETCD,
    .flags = LOCK_KIND_LEASE,
    .down_message = "etcd is unavailable; nothing was deducted",
    .lease = &etcdlock__lease,
    .set_new = ek_set_new,
    .set_cancel = lock_lease_set_cancel,
    .set_free = lock_lease_set_free,
    .acquire = lock_lease_acquire,
    .check = lock_lease_check,
    .token = lock_lease_token,
    .release = lock_lease_release,
    .ping = lock_lease_ping,
    .stats = lock_lease_stats,
    .view = lock_lease_view,
};
