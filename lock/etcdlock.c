/* etcdlock.c: the etcd fair lock (see etcdlock.h).
 *
 * Every request is one POST of a JSON object to the v3 gateway (/v3/lease/grant,
 * /v3/kv/txn, /v3/kv/range, ...), made with cJSON and sent with libcurl; keys travel in
 * base64, 64-bit numbers as decimal strings, as the gateway writes them. A handle has
 * three libcurl easy handles: `cmd` for the calling thread's requests, `watch` for the
 * streaming watch on a predecessor (run through a multi handle, so a wait can look at
 * the cancel flag and the deadline while the stream is open), and `ka` for the keep-alive
 * thread. A request that cannot reach its endpoint (or finds it without a leader) is
 * sent to the next endpoint of the list; every request here may be repeated: the put is
 * a check-and-set whose failure branch reads our own key back, as concurrency.Mutex's. */
#include "etcdlock.h"
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
#include <curl/curl.h>

#define EP_MAX  280
#define KEY_MAX (32 + ETCDLOCK_NAME_MAX + 1 + 16 + 1) /* prefix name / lease-hex */
#define B64_MAX (((KEY_MAX + 2) / 3) * 4 + 1)

/* gRPC status codes the gateway passes on. */
#define GRPC_DEADLINE_EXCEEDED 4
#define GRPC_NOT_FOUND         5
#define GRPC_UNAVAILABLE       14

typedef struct el_buf {
    char *p;
    size_t n, cap;
} el_buf;

/* One libcurl easy handle, the endpoint it talks to, and its answer. */
typedef struct el_conn {
    CURL *easy;
    int ep;
    el_buf body;
    struct curl_slist *headers;
    char curlerr[CURL_ERROR_SIZE];
} el_conn;

struct etcdlock_hold {
    etcdlock *l;
    etcdlock_hold *next; /* in l->holds, under l->mu */
    pthread_t thread;
    int64_t lease;
    int ttl_s;
    int64_t rev; /* our key's create revision: the fencing token */
    int margin_ms;
    /* Monotonic: the send time of the grant or of the latest keep-alive that extended
     * the lease, plus the TTL, minus the margin; 0 once a keep-alive found the lease
     * gone. Written by the keep-alive thread, read by check(). */
    atomic_llong valid_until_us;
    atomic_int lost;
    char name[ETCDLOCK_NAME_MAX + 1];
    char key[KEY_MAX];
};

struct etcdlock {
    char ep[ETCDLOCK_ENDPOINTS_MAX][EP_MAX];
    int nep;
    char prefix[33];
    int ttl_s, margin_cfg_ms, poll_ms, connect_ms, io_ms;
    const atomic_int *cancel;
    el_conn cmd, watch, ka;
    CURLM *multi;
    /* The holds (waiting or held) whose leases the keep-alive thread renews. The list
     * is written by the handle's thread and walked by the keep-alive thread, both under
     * mu; the keep-alive thread holds mu for its round trips, so a hold is never freed
     * under it. */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC: wakes the keep-alive thread to stop */
    bool stop, ka_started;
    pthread_t ka_thread;
    int64_t ka_tick_us; /* under mu */
    etcdlock_hold *holds;
    etcdlock_stats st; /* the calling thread's counters */
    atomic_ullong keepalives, keepalive_lost;
    char errstr[512];
};

/* ---------------------------------------------------------------- helpers */

static void set_err(etcdlock *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_err(etcdlock *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->errstr, sizeof(l->errstr), fmt, ap);
    va_end(ap);
}

static bool name_valid(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > ETCDLOCK_NAME_MAX) return false;
    for (const char *p = name; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

/* Splits an endpoint list into out (may be NULL): the count, or -1 if malformed. */
static int split_endpoints(const char *s, char (*out)[EP_MAX]) {
    if (!s || !*s) return -1;
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (n == ETCDLOCK_ENDPOINTS_MAX || len == 0 || len >= EP_MAX || !colon || colon == p)
            return -1;
        for (const char *q = p; q < colon; q++) {
            char c = *q;
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '-' || c == '_'))
                return -1;
        }
        long port = 0;
        if (colon + 1 == p + len) return -1;
        for (const char *q = colon + 1; q < p + len; q++) {
            if (*q < '0' || *q > '9') return -1;
            port = port * 10 + (*q - '0');
            if (port > 65535) return -1;
        }
        if (port == 0) return -1;
        if (out) {
            memcpy(out[n], p, len);
            out[n][len] = '\0';
        }
        n++;
        if (!end) return n;
        p = end + 1;
    }
}

int etcdlock_parse_endpoints(const char *endpoints) {
    return split_endpoints(endpoints, NULL) > 0 ? LOCK_OK : LOCK_ERR_ARGS;
}

static void b64(const char *in, size_t n, char *out) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = (const unsigned char *)in;
    size_t i = 0;
    char *o = out;
    for (; i + 2 < n; i += 3) {
        *o++ = tab[s[i] >> 2];
        *o++ = tab[((s[i] & 3) << 4) | (s[i + 1] >> 4)];
        *o++ = tab[((s[i + 1] & 15) << 2) | (s[i + 2] >> 6)];
        *o++ = tab[s[i + 2] & 63];
    }
    if (i < n) {
        *o++ = tab[s[i] >> 2];
        if (i + 1 < n) {
            *o++ = tab[((s[i] & 3) << 4) | (s[i + 1] >> 4)];
            *o++ = tab[(s[i + 1] & 15) << 2];
        } else {
            *o++ = tab[(s[i] & 3) << 4];
            *o++ = '=';
        }
        *o++ = '=';
    }
    *o = '\0';
}

static void b64s(const char *s, char *out) {
    b64(s, strlen(s), out);
}

/* A 64-bit field the gateway writes as a decimal string (or, rarely, a number); 0 if
 * missing. */
static int64_t j_i64(const cJSON *o, const char *field) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    if (cJSON_IsString(v) && v->valuestring) return strtoll(v->valuestring, NULL, 10);
    if (cJSON_IsNumber(v)) return (int64_t)v->valuedouble;
    return 0;
}

static cJSON *j_get(const cJSON *o, const char *field) {
    return cJSON_GetObjectItemCaseSensitive(o, field);
}

static void j_add_i64(cJSON *o, const char *field, int64_t v) {
    char s[24];
    snprintf(s, sizeof(s), "%" PRId64, v);
    cJSON_AddStringToObject(o, field, s);
}

/* ---------------------------------------------------------------- HTTP */

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg) {
    el_buf *b = arg;
    size_t n = size * nmemb;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return 0; /* libcurl then fails the transfer */
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
    return n;
}

static int conn_init(el_conn *c) {
    c->easy = curl_easy_init();
    c->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (!c->easy || !c->headers) return LOCK_ERR_NOMEM;
    return LOCK_OK;
}

static void conn_free(el_conn *c) {
    if (c->easy) curl_easy_cleanup(c->easy);
    curl_slist_free_all(c->headers);
    free(c->body.p);
    memset(c, 0, sizeof(*c));
}

/* Sets up c for a POST of body to path on its current endpoint. */
static void conn_prepare(etcdlock *l, el_conn *c, const char *path, const char *body,
                         long timeout_ms) {
    char url[EP_MAX + 64];
    snprintf(url, sizeof(url), "http://%s%s", l->ep[c->ep], path);
    CURL *e = c->easy;
    c->body.n = 0;
    if (c->body.p) c->body.p[0] = '\0';
    c->curlerr[0] = '\0';
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &c->body);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->curlerr);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)l->connect_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_PROXY, "");
}

/* POSTs req to path and parses the answer into *out (the caller frees it). Tries each
 * endpoint once, starting with the connection's current one. LOCK_OK; or
 * LOCK_ERR_CONNECTION (no endpoint answered, or every one said unavailable);
 * LOCK_ERR_SERVER (an error answer: *grpc has its code, the detail goes to err). */
static int conn_call(etcdlock *l, el_conn *c, const char *path, const cJSON *req, cJSON **out,
                     int *grpc, char *err, size_t errcap) {
    *out = NULL;
    if (grpc) *grpc = 0;
    char *body = cJSON_PrintUnformatted(req);
    if (!body) return LOCK_ERR_NOMEM;
    int rc = LOCK_ERR_CONNECTION;
    for (int tries = 0; tries < l->nep; tries++) {
        conn_prepare(l, c, path, body, (long)(l->connect_ms + l->io_ms));
        CURLcode cc = curl_easy_perform(c->easy);
        if (cc != CURLE_OK) {
            snprintf(err, errcap, "%.100s %s: %.200s", l->ep[c->ep], path,
                     c->curlerr[0] ? c->curlerr : curl_easy_strerror(cc));
            rc = cc == CURLE_WRITE_ERROR ? LOCK_ERR_NOMEM : LOCK_ERR_CONNECTION;
            c->ep = (c->ep + 1) % l->nep;
            continue;
        }
        long status = 0;
        curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
        cJSON *j = c->body.p ? cJSON_Parse(c->body.p) : NULL;
        if (!j) {
            snprintf(err, errcap, "%.100s %s: HTTP %ld, an answer that is not JSON", l->ep[c->ep],
                     path, status);
            rc = LOCK_ERR_SERVER;
            break;
        }
        const cJSON *e = j_get(j, "error");
        if (status == 200 && !e) {
            *out = j;
            rc = LOCK_OK;
            break;
        }
        int code = (int)j_i64(j, "code");
        if (grpc) *grpc = code;
        snprintf(err, errcap, "%.100s %s: HTTP %ld: %.200s", l->ep[c->ep], path, status,
                 cJSON_IsString(e) ? e->valuestring : "(no message)");
        cJSON_Delete(j);
        if (code == GRPC_UNAVAILABLE || code == GRPC_DEADLINE_EXCEEDED || status == 503) {
            /* No leader here (an election, a lost quorum): another member may have one. */
            rc = LOCK_ERR_CONNECTION;
            c->ep = (c->ep + 1) % l->nep;
            continue;
        }
        rc = LOCK_ERR_SERVER;
        break;
    }
    free(body);
    return rc;
}

/* conn_call on the calling thread's connection, counted, with the detail in errstr. */
static int el_call(etcdlock *l, const char *path, const cJSON *req, cJSON **out, int *grpc) {
    l->st.ops++;
    return conn_call(l, &l->cmd, path, req, out, grpc, l->errstr, sizeof(l->errstr));
}

/* ---------------------------------------------------------------- leases */

/* Grants a lease of l->ttl_s: LOCK_OK with *id, *ttl_s (as granted) and *sent_us. */
static int el_grant(etcdlock *l, int64_t *id, int *ttl_s, int64_t *sent_us) {
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    j_add_i64(req, "TTL", l->ttl_s);
    *sent_us = lock_now_us();
    int rc = el_call(l, "/v3/lease/grant", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    *id = j_i64(res, "ID");
    *ttl_s = (int)j_i64(res, "TTL");
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
    j_add_i64(req, "ID", id);
    int grpc = 0;
    int rc = el_call(l, "/v3/lease/revoke", req, &res, &grpc);
    cJSON_Delete(req);
    cJSON_Delete(res);
    if (rc == LOCK_ERR_SERVER && grpc == GRPC_NOT_FOUND) return LOCK_OK;
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
static int keepalive(etcdlock *l, el_conn *c, etcdlock_hold *h, char *err, size_t errcap) {
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    j_add_i64(req, "ID", h->lease);
    int64_t sent = lock_now_us();
    int rc = conn_call(l, c, "/v3/lease/keepalive", req, &res, NULL, err, errcap);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    int64_t ttl = j_i64(j_get(res, "result"), "TTL");
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
    long long until = sent + ttl * 1000000 - (int64_t)h->margin_ms * 1000;
    long long cur = atomic_load(&h->valid_until_us);
    while (cur != 0 && cur < until &&
           !atomic_compare_exchange_weak(&h->valid_until_us, &cur, until)) {
    }
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

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void) {
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int etcdlock_new(const etcdlock_config *cfg, etcdlock **out, char *errbuf, size_t errcap) {
    if (errbuf && errcap) errbuf[0] = '\0';
    if (!out) return LOCK_ERR_ARGS;
    *out = NULL;
    if (!cfg) return LOCK_ERR_ARGS;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        if (errbuf && errcap) snprintf(errbuf, errcap, "libcurl: curl_global_init failed");
        return LOCK_ERR_NOMEM;
    }
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
    l->nep = split_endpoints(cfg->endpoints, l->ep);
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
    rc = LOCK_ERR_NOMEM;
    if (conn_init(&l->cmd) || conn_init(&l->watch) || conn_init(&l->ka) ||
        !(l->multi = curl_multi_init())) {
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
    if (l->multi) curl_multi_cleanup(l->multi);
    conn_free(&l->cmd);
    conn_free(&l->watch);
    conn_free(&l->ka);
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
    char key_b64[B64_MAX];
    b64s(h->key, key_b64);
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    cJSON *cmp = cJSON_AddArrayToObject(req, "compare");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cmp, c);
    cJSON_AddStringToObject(c, "key", key_b64);
    cJSON_AddStringToObject(c, "target", "CREATE");
    cJSON_AddStringToObject(c, "result", "EQUAL");
    j_add_i64(c, "create_revision", 0);
    /* Success: our put, then the owner. Failure (the put happened before, and this is a
     * repeat): our key, then the owner. */
    for (int branch = 0; branch < 2; branch++) {
        cJSON *ops = cJSON_AddArrayToObject(req, branch == 0 ? "success" : "failure");
        cJSON *op = cJSON_CreateObject(), *body;
        cJSON_AddItemToArray(ops, op);
        if (branch == 0) {
            body = cJSON_AddObjectToObject(op, "request_put");
            cJSON_AddStringToObject(body, "key", key_b64);
            cJSON_AddStringToObject(body, "value", "");
            j_add_i64(body, "lease", h->lease);
        } else {
            body = cJSON_AddObjectToObject(op, "request_range");
            cJSON_AddStringToObject(body, "key", key_b64);
        }
        op = cJSON_CreateObject();
        cJSON_AddItemToArray(ops, op);
        body = cJSON_AddObjectToObject(op, "request_range");
        cJSON_AddStringToObject(body, "key", pfx_b64);
        cJSON_AddStringToObject(body, "range_end", end_b64);
        cJSON_AddStringToObject(body, "sort_order", "ASCEND");
        cJSON_AddStringToObject(body, "sort_target", "CREATE");
        j_add_i64(body, "limit", 1);
    }
    int rc = el_call(l, "/v3/kv/txn", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    bool ok = cJSON_IsTrue(j_get(res, "succeeded"));
    const cJSON *resps = j_get(res, "responses");
    const cJSON *r0 = j_get(cJSON_GetArrayItem(resps, 0), "response_range");
    const cJSON *r1 = j_get(cJSON_GetArrayItem(resps, 1), "response_range");
    h->rev = ok ? j_i64(j_get(res, "header"), "revision")
                : j_i64(cJSON_GetArrayItem(j_get(r0, "kvs"), 0), "create_revision");
    *first = j_i64(cJSON_GetArrayItem(j_get(r1, "kvs"), 0), "create_revision");
    cJSON_Delete(res);
    if (h->rev <= 0) {
        set_err(l, "lock %s: the put answered no revision", h->name);
        return LOCK_ERR_SERVER;
    }
    return LOCK_OK;
}

/* Our predecessor: the key of the prefix with the largest create revision below ours.
 * On LOCK_OK, pred (B64_MAX bytes) is its base64 key or "" if there is none, and *rev
 * the revision the range was read at. */
static int el_predecessor(etcdlock *l, const etcdlock_hold *h, const char *pfx_b64,
                          const char *end_b64, char *pred, int64_t *rev) {
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    cJSON_AddStringToObject(req, "key", pfx_b64);
    cJSON_AddStringToObject(req, "range_end", end_b64);
    cJSON_AddStringToObject(req, "sort_order", "DESCEND");
    cJSON_AddStringToObject(req, "sort_target", "CREATE");
    j_add_i64(req, "limit", 1);
    j_add_i64(req, "max_create_revision", h->rev - 1);
    cJSON_AddTrueToObject(req, "keys_only");
    int rc = el_call(l, "/v3/kv/range", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    *rev = j_i64(j_get(res, "header"), "revision");
    const cJSON *k = j_get(cJSON_GetArrayItem(j_get(res, "kvs"), 0), "key");
    pred[0] = '\0';
    if (cJSON_IsString(k) && strlen(k->valuestring) < B64_MAX) strcpy(pred, k->valuestring);
    cJSON_Delete(res);
    return LOCK_OK;
}

/* Does our key still exist with our create revision? 1 yes, 0 no (the lease ended while
 * we waited), or a negative code. */
static int el_key_alive(etcdlock *l, const etcdlock_hold *h) {
    char key_b64[B64_MAX];
    b64s(h->key, key_b64);
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    cJSON_AddStringToObject(req, "key", key_b64);
    int rc = el_call(l, "/v3/kv/range", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    int64_t rev = j_i64(cJSON_GetArrayItem(j_get(res, "kvs"), 0), "create_revision");
    cJSON_Delete(res);
    return rev == h->rev ? 1 : 0;
}

/* What the watch stream has told us so far. */
typedef struct watch_state {
    el_buf line; /* a partial JSON object, up to its newline */
    bool deleted, ended;
} watch_state;

static void watch_message(watch_state *w, const char *text) {
    cJSON *j = cJSON_Parse(text);
    if (!j) return;
    const cJSON *r = j_get(j, "result");
    if (!r || j_get(j, "error") || cJSON_IsTrue(j_get(r, "canceled")) ||
        j_i64(r, "compact_revision") > 0)
        w->ended = true; /* look again with a range */
    const cJSON *ev;
    cJSON_ArrayForEach(ev, j_get(r, "events")) {
        const cJSON *t = j_get(ev, "type");
        if (cJSON_IsString(t) && strcmp(t->valuestring, "DELETE") == 0) w->deleted = true;
    }
    cJSON_Delete(j);
}

static size_t on_watch(char *data, size_t size, size_t nmemb, void *arg) {
    watch_state *w = arg;
    size_t n = size * nmemb;
    for (size_t i = 0; i < n; i++) {
        if (data[i] == '\n') {
            if (w->line.n) watch_message(w, w->line.p);
            w->line.n = 0;
            continue;
        }
        if (on_body(data + i, 1, 1, &w->line) != 1) return 0;
    }
    return n;
}

/* Waits until the key pred_b64 is deleted at a revision after from_rev. 1 when it was
 * (or the watch ended some other way: look again), 0 at the deadline,
 * LOCK_ERR_CANCELLED, or LOCK_ERR_NOMEM. A watch that cannot connect waits poll_ms and
 * answers 1: the range that follows tells whether etcd is reachable at all. */
static int el_watch_delete(etcdlock *l, const char *pred_b64, int64_t from_rev,
                           int64_t deadline_us) {
    cJSON *req = cJSON_CreateObject();
    if (!req) return LOCK_ERR_NOMEM;
    cJSON *cr = cJSON_AddObjectToObject(req, "create_request");
    cJSON_AddStringToObject(cr, "key", pred_b64);
    j_add_i64(cr, "start_revision", from_rev + 1);
    cJSON *filters = cJSON_AddArrayToObject(cr, "filters");
    cJSON_AddItemToArray(filters, cJSON_CreateString("NOPUT"));
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    if (!body) return LOCK_ERR_NOMEM;
    el_conn *c = &l->watch;
    watch_state w = {0};
    conn_prepare(l, c, "/v3/watch", body, 0L);
    free(body);
    curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, on_watch);
    curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, &w);
    l->st.ops++;
    l->st.watches++;
    curl_multi_add_handle(l->multi, c->easy);
    int rc = 1;
    bool failed = false;
    for (;;) {
        int running = 0;
        curl_multi_perform(l->multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(l->multi, &left)))
            if (m->msg == CURLMSG_DONE && m->data.result != CURLE_OK) failed = true;
        if (w.deleted) {
            l->st.wakeups++;
            break;
        }
        if (w.ended || !running) break;
        if (l->cancel && atomic_load(l->cancel)) {
            rc = LOCK_ERR_CANCELLED;
            break;
        }
        int64_t left_us = deadline_us - lock_now_us();
        if (left_us <= 0) {
            rc = 0;
            break;
        }
        int wait_ms = left_us / 1000 + 1 < l->poll_ms ? (int)(left_us / 1000 + 1) : l->poll_ms;
        curl_multi_poll(l->multi, NULL, 0, wait_ms, NULL);
    }
    curl_multi_remove_handle(l->multi, c->easy);
    free(w.line.p);
    if (rc == 1 && failed && !w.deleted) {
        c->ep = (c->ep + 1) % l->nep;
        int64_t left_us = deadline_us - lock_now_us();
        lock_sleep_us(left_us < (int64_t)l->poll_ms * 1000 ? (left_us > 0 ? left_us : 0)
                                                           : (int64_t)l->poll_ms * 1000);
    }
    return rc;
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
    /* The queue of `name` is every key between <prefix><name>/ and <prefix><name>0
     * ('0' follows '/'). */
    char pfx[KEY_MAX], pfx_b64[B64_MAX], end_b64[B64_MAX], pred[B64_MAX];
    snprintf(pfx, sizeof(pfx), "%s%s/", l->prefix, name);
    b64s(pfx, pfx_b64);
    pfx[strlen(pfx) - 1] = '0';
    b64s(pfx, end_b64);
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
            rc = el_watch_delete(l, pred, at, deadline);
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
    char key_b64[B64_MAX];
    b64s(h->key, key_b64);
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    int rc = LOCK_ERR_NOMEM;
    if (!req) goto out;
    cJSON_AddStringToObject(req, "key", key_b64);
    rc = el_call(l, "/v3/kv/deleterange", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) goto out;
    int64_t deleted = j_i64(res, "deleted");
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
    int rc = el_call(l, "/v3/maintenance/status", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    int64_t leader = j_i64(res, "leader");
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
    switch (code) {
    case LOCK_OK:
        return "ok";
    case LOCK_ERR_ARGS:
        return "bad argument";
    case LOCK_ERR_NOMEM:
        return "out of memory";
    case LOCK_ERR_TIMEOUT:
        return "lock not acquired in time";
    case LOCK_ERR_CONNECTION:
        return "no connection to etcd (or no leader)";
    case LOCK_ERR_CANCELLED:
        return "lock wait cancelled";
    case LOCK_ERR_SERVER:
        return "unexpected etcd error";
    case LOCK_ERR_NOT_OWNER:
        return "the hold belongs to another thread";
    case LOCK_SUSPECT:
        return "connection lost; the lock may have passed on";
    case LOCK_LOST:
        return "lock lost (lease ended)";
    default:
        return "unknown etcdlock code";
    }
}

/* ---------------------------------------------------------------- the kind */

/* The registry's row (lock.h): a lease kind, pooled by lease_pool.c, one handle per
 * worker. The pool's lease is in ms; etcd's TTL is in whole seconds, so it is rounded
 * up (stockd's --etcd-ttl-s gives whole seconds anyway). */

static int ek_open(const lock_config *cfg, const atomic_int *cancel, void **handle, char *err,
                   size_t errcap) {
    /* A connect that hangs (a black-holed address) must not outlast the lock wait. */
    int connect_ms = cfg->timeout_ms > 0 && cfg->timeout_ms < 2000 ? cfg->timeout_ms : 2000;
    if (connect_ms < 100) connect_ms = 100;
    etcdlock_config c = {.endpoints = cfg->addr,
                         .ttl_s = cfg->lease_ms > 0 ? (cfg->lease_ms + 999) / 1000 : 0,
                         .connect_timeout_ms = connect_ms,
                         .cancel = cancel};
    etcdlock *e = NULL;
    int rc = etcdlock_new(&c, &e, err, errcap);
    *handle = e;
    return rc;
}

static void ek_close(void *handle) {
    etcdlock_free(handle);
}

static int ek_acquire(void *handle, const char *name, int timeout_ms, void **hold) {
    etcdlock_hold *h = NULL;
    int rc = etcdlock_acquire(handle, name, timeout_ms, &h);
    *hold = h;
    return rc;
}

static int ek_check(const void *hold) {
    return etcdlock_check(hold);
}

static int64_t ek_token(const void *hold) {
    return etcdlock_token(hold);
}

static int ek_release(void *hold) {
    return etcdlock_release(hold);
}

static int ek_renew(void *via, void *hold) {
    return etcdlock_renew(via, hold);
}

static int ek_ping(void *handle) {
    return etcdlock_ping(handle);
}

/* The calling thread's requests and the keep-alive thread's, all sent to etcd. */
static uint64_t ek_ops(const void *handle) {
    const etcdlock *l = handle;
    return l->st.ops + atomic_load(&((etcdlock *)l)->keepalives) +
           atomic_load(&((etcdlock *)l)->keepalive_lost);
}

static const char *ek_errstr(const void *handle) {
    return etcdlock_errstr(handle);
}

static const lock_lease_ops ek_lease = {
    .open = ek_open,
    .close = ek_close,
    .acquire = ek_acquire,
    .check = ek_check,
    .token = ek_token,
    .release = ek_release,
    .renew = ek_renew,
    .ping = ek_ping,
    .ops = ek_ops,
    .errstr = ek_errstr,
};

const lock_kind etcdlock_kind = LOCK_LEASE_KIND(
    "etcd", "etcd", LOCK_FENCE_ETCD, "etcd is unavailable; nothing was deducted", &ek_lease);
