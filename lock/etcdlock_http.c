/* etcdlock_http.c: etcdlock's side of etcd's v3 JSON gateway (see etcdlock_int.h).
 *
 * Every request is one POST of a JSON object to the gateway (/v3/lease/grant,
 * /v3/kv/txn, /v3/kv/range, ...), made with cJSON and sent with libcurl; keys travel in
 * base64, 64-bit numbers as decimal strings, as the gateway writes them. A handle has
 * three libcurl easy handles: `cmd` for the calling thread's requests, `watch` for the
 * streaming watch on a predecessor (run through a multi handle, so a wait can look at
 * the cancel flag and the deadline while the stream is open), and `ka` for the keep-alive
 * thread. A request that cannot reach its endpoint (or finds it without a leader) is
 * sent to the next endpoint of the list. What the requests say is the recipe's, in
 * etcdlock.c; this file only carries them.
 *
 * libcurl is loaded at run time (dlopen of ETCDLOCK_LIBCURL, once, by the first
 * etcdlock_new), not linked: linked, it and the ~18 libraries it needs (Kerberos, LDAP,
 * SASL, libssh2, nghttp2, brotli, ...) were mapped into every stockd whatever its lock
 * mode, about 1.5 MB of resident memory per instance (docs/benchmarks.md, "Memory"). Every libcurl
 * call goes through the table `curl` below; curl/curl.h gives only the types. */
#include "curl_api.h"
#include "etcdlock_int.h"
#include "hostport.h"
#include "lock_clock.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- endpoints, base64, JSON */

int etcdlock__split_endpoints(const char *s, char (*out)[ETCDLOCK_EP_MAX]) {
    hostport hp[ETCDLOCK_ENDPOINTS_MAX];
    int n = hostport_list_parse(s, hp, ETCDLOCK_ENDPOINTS_MAX);
    for (int i = 0; out && i < n; i++)
        if (hostport_format(&hp[i], out[i], ETCDLOCK_EP_MAX) != 0) return -1;
    return n;
}

int etcdlock_parse_endpoints(const char *endpoints) {
    return etcdlock__split_endpoints(endpoints, NULL) > 0 ? LOCK_OK : LOCK_ERR_ARGS;
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

void etcdlock__b64s(const char *s, char *out) {
    b64(s, strlen(s), out);
}

int64_t etcdlock__j_i64(const cJSON *o, const char *field) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    if (cJSON_IsString(v) && v->valuestring) return strtoll(v->valuestring, NULL, 10);
    if (cJSON_IsNumber(v)) return (int64_t)v->valuedouble;
    return 0;
}

cJSON *etcdlock__j_get(const cJSON *o, const char *field) {
    return cJSON_GetObjectItemCaseSensitive(o, field);
}

void etcdlock__j_add_i64(cJSON *o, const char *field, int64_t v) {
    char s[24];
    snprintf(s, sizeof(s), "%" PRId64, v);
    cJSON_AddStringToObject(o, field, s);
}

/* ---------------------------------------------------------------- libcurl, loaded */

static struct curl_api curl;

#define CURL_SYM(field, name)                                                                      \
    { name, offsetof(struct curl_api, field) }
static const struct {
    const char *name;
    size_t off;
} curl_syms[] = {
    CURL_SYM(global_init, "curl_global_init"),
    CURL_SYM(easy_init, "curl_easy_init"),
    CURL_SYM(easy_cleanup, "curl_easy_cleanup"),
    CURL_SYM(easy_setopt, "curl_easy_setopt"),
    CURL_SYM(easy_perform, "curl_easy_perform"),
    CURL_SYM(easy_getinfo, "curl_easy_getinfo"),
    CURL_SYM(easy_strerror, "curl_easy_strerror"),
    CURL_SYM(slist_append, "curl_slist_append"),
    CURL_SYM(slist_free_all, "curl_slist_free_all"),
    CURL_SYM(multi_init, "curl_multi_init"),
    CURL_SYM(multi_cleanup, "curl_multi_cleanup"),
    CURL_SYM(multi_add_handle, "curl_multi_add_handle"),
    CURL_SYM(multi_remove_handle, "curl_multi_remove_handle"),
    CURL_SYM(multi_perform, "curl_multi_perform"),
    CURL_SYM(multi_info_read, "curl_multi_info_read"),
    CURL_SYM(multi_poll, "curl_multi_poll"),
};
#undef CURL_SYM

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_rc = LOCK_ERR_ARGS;
static char curl_err[320];

/* Loads libcurl and runs curl_global_init, once per process (under curl_once). The
 * library stays loaded until the process ends: libcurl is not meant to be unloaded. */
static void load_curl(void) {
    void *lib = dlopen(ETCDLOCK_LIBCURL, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(curl_err, sizeof(curl_err),
                 "mode etcd needs libcurl, which could not be loaded: %.200s (on Debian: "
                 "apt-get install libcurl4)",
                 why ? why : ETCDLOCK_LIBCURL);
        return;
    }
    for (size_t i = 0; i < sizeof(curl_syms) / sizeof(curl_syms[0]); i++) {
        void *f = dlsym(lib, curl_syms[i].name);
        if (!f) {
            snprintf(curl_err, sizeof(curl_err), "%s has no %s: libcurl 7.66 or later is needed",
                     ETCDLOCK_LIBCURL, curl_syms[i].name);
            return;
        }
        memcpy((char *)&curl + curl_syms[i].off, &f, sizeof(f));
    }
    if (curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(curl_err, sizeof(curl_err), "libcurl: curl_global_init failed");
        curl_rc = LOCK_ERR_NOMEM;
        return;
    }
    curl_rc = LOCK_OK;
}

int etcdlock__http_global_init(char *err, size_t errcap) {
    pthread_once(&curl_once, load_curl);
    if (curl_rc != LOCK_OK && err && errcap) snprintf(err, errcap, "%s", curl_err);
    return curl_rc;
}

const struct curl_api *lock_curl_api(char *err, size_t errcap) {
    return etcdlock__http_global_init(err, errcap) == LOCK_OK ? &curl : NULL;
}

/* ---------------------------------------------------------------- HTTP */

static int conn_init(etcdlock_conn *c) {
    c->easy = curl.easy_init();
    c->headers = curl.slist_append(NULL, "Content-Type: application/json");
    if (!c->easy || !c->headers) return LOCK_ERR_NOMEM;
    return LOCK_OK;
}

static void conn_free(etcdlock_conn *c) {
    if (c->easy) curl.easy_cleanup(c->easy);
    if (c->headers) curl.slist_free_all(c->headers);
    free(c->body.p);
    memset(c, 0, sizeof(*c));
}

int etcdlock__http_open(etcdlock *l) {
    if (conn_init(&l->cmd) || conn_init(&l->watch) || conn_init(&l->ka) ||
        !(l->multi = curl.multi_init()))
        return LOCK_ERR_NOMEM;
    return LOCK_OK;
}

void etcdlock__http_close(etcdlock *l) {
    if (l->multi) curl.multi_cleanup(l->multi);
    l->multi = NULL;
    conn_free(&l->cmd);
    conn_free(&l->watch);
    conn_free(&l->ka);
}

/* Sets up c for a POST of body to path on its current endpoint. */
static void conn_prepare(etcdlock *l, etcdlock_conn *c, const char *path, const char *body,
                         long timeout_ms) {
    char url[ETCDLOCK_EP_MAX + 64];
    snprintf(url, sizeof(url), "http://%s%s", l->ep[c->ep], path);
    CURL *e = c->easy;
    c->body.n = 0;
    if (c->body.p) c->body.p[0] = '\0';
    c->curlerr[0] = '\0';
    curl.easy_setopt(e, CURLOPT_URL, url);
    curl.easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    curl.easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body);
    curl.easy_setopt(e, CURLOPT_WRITEFUNCTION, curl_api_on_body);
    curl.easy_setopt(e, CURLOPT_WRITEDATA, &c->body);
    curl.easy_setopt(e, CURLOPT_ERRORBUFFER, c->curlerr);
    curl.easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl.easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)l->connect_ms);
    curl.easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl.easy_setopt(e, CURLOPT_PROXY, "");
}

/* POSTs req to path and parses the answer into *out (the caller frees it). Tries each
 * endpoint once, starting with the connection's current one. LOCK_OK; or
 * LOCK_ERR_CONNECTION (no endpoint answered, or every one said unavailable);
 * LOCK_ERR_SERVER (an error answer: *grpc has its code, the detail goes to err). */
int etcdlock__conn_call(etcdlock *l, etcdlock_conn *c, const char *path, const cJSON *req,
                        cJSON **out, int *grpc, char *err, size_t errcap) {
    *out = NULL;
    if (grpc) *grpc = 0;
    char *body = cJSON_PrintUnformatted(req);
    if (!body) return LOCK_ERR_NOMEM;
    int rc = LOCK_ERR_CONNECTION;
    for (int tries = 0; tries < l->nep; tries++) {
        conn_prepare(l, c, path, body, (long)(l->connect_ms + l->io_ms));
        CURLcode cc = curl.easy_perform(c->easy);
        if (cc != CURLE_OK) {
            snprintf(err, errcap, "%.100s %s: %.200s", l->ep[c->ep], path,
                     c->curlerr[0] ? c->curlerr : curl.easy_strerror(cc));
            rc = cc == CURLE_WRITE_ERROR ? LOCK_ERR_NOMEM : LOCK_ERR_CONNECTION;
            c->ep = (c->ep + 1) % l->nep;
            continue;
        }
        long status = 0;
        curl.easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
        cJSON *j = c->body.p ? cJSON_Parse(c->body.p) : NULL;
        if (!j) {
            snprintf(err, errcap, "%.100s %s: HTTP %ld, an answer that is not JSON", l->ep[c->ep],
                     path, status);
            rc = LOCK_ERR_SERVER;
            break;
        }
        const cJSON *e = etcdlock__j_get(j, "error");
        if (status == 200 && !e) {
            *out = j;
            rc = LOCK_OK;
            break;
        }
        int code = (int)etcdlock__j_i64(j, "code");
        if (grpc) *grpc = code;
        snprintf(err, errcap, "%.100s %s: HTTP %ld: %.200s", l->ep[c->ep], path, status,
                 cJSON_IsString(e) ? e->valuestring : "(no message)");
        cJSON_Delete(j);
        if (code == ETCDLOCK_GRPC_UNAVAILABLE || code == ETCDLOCK_GRPC_DEADLINE_EXCEEDED ||
            status == 503) {
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

/* etcdlock__conn_call on the calling thread's connection, counted, with the detail in errstr. */
int etcdlock__call(etcdlock *l, const char *path, const cJSON *req, cJSON **out, int *grpc) {
    l->st.ops++;
    return etcdlock__conn_call(l, &l->cmd, path, req, out, grpc, l->errstr, sizeof(l->errstr));
}

/* ---------------------------------------------------------------- the watch */

/* What the watch stream has told us so far. */
typedef struct watch_state {
    etcdlock_buf line; /* a partial JSON object, up to its newline */
    bool deleted, ended;
} watch_state;

static void watch_message(watch_state *w, const char *text) {
    cJSON *j = cJSON_Parse(text);
    if (!j) return;
    const cJSON *r = etcdlock__j_get(j, "result");
    if (!r || etcdlock__j_get(j, "error") || cJSON_IsTrue(etcdlock__j_get(r, "canceled")) ||
        etcdlock__j_i64(r, "compact_revision") > 0)
        w->ended = true; /* look again with a range */
    const cJSON *ev;
    cJSON_ArrayForEach(ev, etcdlock__j_get(r, "events")) {
        const cJSON *t = etcdlock__j_get(ev, "type");
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
        if (curl_api_buf_append(&w->line, data + i, 1) != 0) return 0;
    }
    return n;
}

/* Waits until the key pred_b64 is deleted at a revision after from_rev. 1 when it was
 * (or the watch ended some other way: look again), 0 at the deadline,
 * LOCK_ERR_CANCELLED, or LOCK_ERR_NOMEM. A watch that cannot connect waits poll_ms and
 * answers 1: the range that follows tells whether etcd is reachable at all. */
int etcdlock__watch_delete(etcdlock *l, const char *pred_b64, int64_t from_rev,
                           int64_t deadline_us) {
    cJSON *req = cJSON_CreateObject();
    if (!req) return LOCK_ERR_NOMEM;
    cJSON *cr = cJSON_AddObjectToObject(req, "create_request");
    cJSON_AddStringToObject(cr, "key", pred_b64);
    etcdlock__j_add_i64(cr, "start_revision", from_rev + 1);
    cJSON *filters = cJSON_AddArrayToObject(cr, "filters");
    cJSON_AddItemToArray(filters, cJSON_CreateString("NOPUT"));
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    if (!body) return LOCK_ERR_NOMEM;
    etcdlock_conn *c = &l->watch;
    watch_state w = {0};
    conn_prepare(l, c, "/v3/watch", body, 0L);
    free(body);
    curl.easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, on_watch);
    curl.easy_setopt(c->easy, CURLOPT_WRITEDATA, &w);
    l->st.ops++;
    l->st.watches++;
    curl.multi_add_handle(l->multi, c->easy);
    int rc = 1;
    bool failed = false;
    for (;;) {
        int running = 0;
        curl.multi_perform(l->multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl.multi_info_read(l->multi, &left)))
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
        curl.multi_poll(l->multi, NULL, 0, wait_ms, NULL);
    }
    curl.multi_remove_handle(l->multi, c->easy);
    free(w.line.p);
    if (rc == 1 && failed && !w.deleted) {
        c->ep = (c->ep + 1) % l->nep;
        int64_t left_us = deadline_us - lock_now_us();
        lock_sleep_us(left_us < (int64_t)l->poll_ms * 1000 ? (left_us > 0 ? left_us : 0)
                                                           : (int64_t)l->poll_ms * 1000);
    }
    return rc;
}
