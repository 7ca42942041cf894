/* frame.c: the frame, owner routing's one message between instances (docs/routing.md,
 * "The frame"). A non-owner sends a product's queued deductions as one frame; each
 * entry is its request whole (method, path, every query parameter, and the headers of
 * stockd_forwarded_headers), the request id it is served under, and what is left of its
 * deadline. The owner answers each entry with the status and body a direct request
 * would have had, which the forwarder relays verbatim. JSON by cJSON; pure, so the
 * parser is unit-tested with bad frames (tests/service/test_route.c) before any
 * deduction rests on it. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "stockd.h"

/* Adds [[k, v], ...] of n pairs (v may be NULL: "?id" has no value). */
static bool add_pairs(cJSON *o, const char *name, const stockd_param *p, size_t n) {
    cJSON *a = cJSON_AddArrayToObject(o, name);
    if (!a) return false;
    for (size_t i = 0; i < n; i++) {
        cJSON *pair = cJSON_CreateArray();
        char k[STOCKD_MAX_URI_BYTES + 1], v[STOCKD_MAX_URI_BYTES + 1];
        size_t kl = p[i].key_len < STOCKD_MAX_URI_BYTES ? p[i].key_len : STOCKD_MAX_URI_BYTES;
        size_t vl = p[i].value_len < STOCKD_MAX_URI_BYTES ? p[i].value_len : STOCKD_MAX_URI_BYTES;
        if (!pair) return false;
        cJSON_AddItemToArray(a, pair);
        memcpy(k, p[i].key, kl);
        k[kl] = '\0';
        if (!cJSON_AddItemToArray(pair, cJSON_CreateString(k))) return false;
        if (p[i].value) {
            memcpy(v, p[i].value, vl);
            v[vl] = '\0';
        }
        if (!cJSON_AddItemToArray(pair, p[i].value ? cJSON_CreateString(v) : cJSON_CreateNull()))
            return false;
    }
    return true;
}

char *stockd_frame_request(const char *method, const char *path, const stockd_param *params,
                           size_t nparams, const stockd_param *headers, size_t nheaders) {
    cJSON *o = cJSON_CreateObject();
    char *out = NULL;
    if (!o) return NULL;
    if (cJSON_AddStringToObject(o, "method", method) && cJSON_AddStringToObject(o, "path", path) &&
        add_pairs(o, "params", params, nparams) && add_pairs(o, "headers", headers, nheaders))
        out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

char *stockd_frame_build(const char *from, uint64_t view, const stockd_frame_out *entries,
                         size_t n) {
    cJSON *o = cJSON_CreateObject(), *a;
    char *out = NULL;
    if (!o) return NULL;
    if (!cJSON_AddStringToObject(o, "from", from) ||
        !cJSON_AddNumberToObject(o, "view", (double)view) ||
        !(a = cJSON_AddArrayToObject(o, "entries")))
        goto out;
    for (size_t i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        if (!e) goto out;
        cJSON_AddItemToArray(a, e);
        if (!cJSON_AddItemToObject(e, "request", cJSON_CreateRaw(entries[i].request)) ||
            !cJSON_AddStringToObject(e, "request_id", entries[i].request_id) ||
            (entries[i].deadline_ms &&
             !cJSON_AddNumberToObject(e, "deadline_ms", entries[i].deadline_ms)))
            goto out;
    }
    out = cJSON_PrintUnformatted(o);
out:
    cJSON_Delete(o);
    return out;
}

/* Reads [[k, v], ...] into out (at most max pairs; *truncated past it). */
static const char *read_pairs(const cJSON *a, stockd_param *out, size_t max, size_t *n,
                              bool *truncated, size_t *bytes) {
    const cJSON *pair;
    *n = 0;
    if (!cJSON_IsArray(a)) return "params and headers must be arrays of [name, value]";
    cJSON_ArrayForEach(pair, a) {
        const cJSON *k = cJSON_GetArrayItem(pair, 0), *v = cJSON_GetArrayItem(pair, 1);
        if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 || !cJSON_IsString(k) ||
            !(cJSON_IsString(v) || cJSON_IsNull(v)))
            return "each param or header must be [string, string or null]";
        if (*n == max) {
            *truncated = true;
            continue;
        }
        out[*n] = (stockd_param){k->valuestring, strlen(k->valuestring),
                                 cJSON_IsString(v) ? v->valuestring : NULL,
                                 cJSON_IsString(v) ? strlen(v->valuestring) : 0};
        *bytes += out[*n].key_len + out[*n].value_len + 2;
        (*n)++;
    }
    return NULL;
}

/* Fills entry e from its JSON; NULL, or why the frame is malformed. */
static const char *read_entry(const cJSON *j, stockd_frame_entry *e) {
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(j, "request");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "request_id");
    const cJSON *dl = cJSON_GetObjectItemCaseSensitive(j, "deadline_ms");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(req, "method");
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(req, "path");
    stockd_param headers[8];
    size_t nh = 0;
    bool cut = false;
    const char *why;

    if (!cJSON_IsObject(j) || !cJSON_IsObject(req)) return "each entry must hold a request object";
    if (!cJSON_IsString(method) || !cJSON_IsString(path))
        return "a request needs method and path strings";
    if (!cJSON_IsString(id) || stockd_check_request_id(id->valuestring) != 0)
        return "each entry needs a request_id (an Idempotency-Key or stockd's own i/ id)";
    if (dl && (!cJSON_IsNumber(dl) || dl->valuedouble < 1 || dl->valuedouble > 3600000))
        return "deadline_ms must be a number of ms in 1..3600000";
    memset(e, 0, sizeof(*e));
    e->in.method = method->valuestring;
    e->in.path = path->valuestring;
    e->in.uri_bytes = strlen(path->valuestring);
    if ((why = read_pairs(cJSON_GetObjectItemCaseSensitive(req, "params"), e->params,
                          STOCKD_MAX_PARAMS, &e->in.nparams, &e->in.params_truncated,
                          &e->in.uri_bytes)) != NULL ||
        (why = read_pairs(cJSON_GetObjectItemCaseSensitive(req, "headers"), headers, 8, &nh, &cut,
                          &e->in.header_bytes)) != NULL)
        return why;
    if (cut) return "too many headers in a request";
    e->in.params = e->params;
    for (size_t i = 0; i < nh; i++)
        stockd_request_set_header(&e->in, headers[i].key, headers[i].value, headers[i].value_len);
    e->request_id = id->valuestring;
    e->deadline_ms = dl ? (unsigned)dl->valuedouble : 0;
    return NULL;
}

const char *stockd_frame_parse(const char *body, size_t len, stockd_frame *out) {
    const cJSON *entries, *j;
    size_t i = 0;
    memset(out, 0, sizeof(*out));
    if (!body || !len) return "the frame is empty";
    out->root = cJSON_ParseWithLength(body, len);
    if (!out->root || !cJSON_IsObject(out->root)) return "the frame is not a JSON object";
    entries = cJSON_GetObjectItemCaseSensitive(out->root, "entries");
    if (!cJSON_IsArray(entries)) return "the frame needs an entries array";
    out->n = (size_t)cJSON_GetArraySize(entries);
    if (out->n < 1 || out->n > STOCKD_FRAME_MAX)
        return "a frame holds 1.." STOCKD_FRAME_MAX_STR " entries";
    if (!(out->e = calloc(out->n, sizeof(*out->e)))) return "out of memory";
    cJSON_ArrayForEach(j, entries) {
        const char *why = read_entry(j, &out->e[i++]);
        if (why) return why;
    }
    return NULL;
}

void stockd_frame_free(stockd_frame *f) {
    if (!f) return;
    cJSON_Delete(f->root);
    free(f->e);
    memset(f, 0, sizeof(*f));
}

char *stockd_frame_answers(const stockd_frame_answer *a, size_t n) {
    cJSON *o = cJSON_CreateObject(), *arr;
    char *out = NULL;
    if (!o || !(arr = cJSON_AddArrayToObject(o, "answers"))) goto out;
    for (size_t i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        if (!e) goto out;
        cJSON_AddItemToArray(arr, e);
        if (!cJSON_AddNumberToObject(e, "status", a[i].status) ||
            !cJSON_AddStringToObject(e, "result", stockd_result_name(a[i].result)) ||
            !cJSON_AddStringToObject(e, "body", a[i].body ? a[i].body : ""))
            goto out;
    }
    out = cJSON_PrintUnformatted(o);
out:
    cJSON_Delete(o);
    return out;
}

void *stockd_frame_answers_parse(const char *body, size_t len, stockd_frame_answer *out, size_t n) {
    cJSON *root = cJSON_ParseWithLength(body, len), *e;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "answers");
    size_t i = 0;
    if (!cJSON_IsArray(arr) || (size_t)cJSON_GetArraySize(arr) != n) goto bad;
    cJSON_ArrayForEach(e, arr) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "status");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "result");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "body");
        if (!cJSON_IsNumber(st) || st->valuedouble < 100 || st->valuedouble > 599 ||
            !cJSON_IsString(r) || !cJSON_IsString(b))
            goto bad;
        out[i].status = (unsigned)st->valuedouble;
        if (stockd_result_parse(r->valuestring, &out[i].result) != 0)
            out[i].result = STOCKD_R_INTERNAL;
        out[i].body = b->valuestring;
        i++;
    }
    return root;
bad:
    cJSON_Delete(root);
    return NULL;
}

void stockd_frame_answers_free(void *root) {
    cJSON_Delete(root);
}
