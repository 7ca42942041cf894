/* fuzz_request.c: a libFuzzer target for the pure parts of stockd's request handling.
 *
 * The input is text, one field per line, so that seeds are readable and libFuzzer's
 * mutations stay meaningful; any byte but '\n' (NUL included) may appear in a field:
 *   line 1      METHOD PATH        (split at the first space; NUL ends them, as in C)
 *   H:VALUE     an Idempotency-Key header (may be empty)
 *   B:N         a body of N bytes
 *   T           "more than STOCKD_MAX_PARAMS parameters" (also set past the 16th)
 *   S:U,H       URI and header sizes in bytes (once stockd_request_in has them)
 *   U:URL       also fed to stockdb_config_from_url
 *   M:TEXT      also rendered as an answer's message and a health error, and parsed back
 *   KEY=VALUE   a query parameter as libmicrohttpd hands it over (decoded; no '=' means
 *               no value)
 * It routes the request with stockd_route_request and checks every decision against
 * the contract: an error has a message and a 4xx status (405 with Allow); a routed
 * request names a known route with an allowed method, a deduction or read has exactly
 * one canonical id in 1..INT32_MAX, a key is a valid key taken from the request. The
 * answer is rendered with stockd_answer_json and parsed back with cJSON, which must
 * give the same result word and message. stockd_parse_id and stockd_check_key are
 * compared with reference implementations written out here from the contract, and
 * stockdb_config_from_url must leave its output alone on error and fill it with
 * terminated fields and a valid port on success.
 *
 * A violated invariant prints what went wrong and aborts, which libFuzzer reports as a
 * crash and the corpus replay (fuzz_replay.c) as a failed test. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stockd.h"
#include "stockdb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The id grammar of the contract, written out independently of contract.c: 1..10
 * decimal digits, no leading zero, at most INT32_MAX. */
static int ref_parse_id(const char *s, size_t len, int32_t *out) {
    long long v = 0;
    if (!s || len == 0 || len > 10 || s[0] == '0') return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v > INT32_MAX) return -1;
    *out = (int32_t)v;
    return 0;
}

static int ref_check_key(const char *s, size_t len) {
    if (!s || len == 0 || len > 64) return -1;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(c == '_' || c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
              (c >= 'A' && c <= 'Z')))
            return -1;
    }
    return 0;
}

static void check_parse_id(const char *s, size_t len) {
    int32_t got = -7, want = -7;
    const char *why = NULL;
    int rc = stockd_parse_id(s, len, &got, &why);
    int ref = ref_parse_id(s, len, &want);

    FUZZ_CHECK(rc == ref);
    if (rc == 0) {
        FUZZ_CHECK(got == want && got >= 1);
    } else {
        FUZZ_CHECK(rc == -1 && why && *why);
        FUZZ_CHECK(got == -7); /* the output is untouched on error */
    }
}

static void check_key(const char *s, size_t len) {
    FUZZ_CHECK(stockd_check_key(s, len) == ref_check_key(s, len));
}

/* Renders an answer, parses it back and compares what a client would read. */
static void check_answer(const stockd_answer *a) {
    char *json = stockd_answer_json(a, "stockd-1");
    cJSON *o, *v;

    FUZZ_CHECK(json != NULL);
    o = cJSON_Parse(json);
    FUZZ_CHECK(o != NULL && cJSON_IsObject(o));
    v = cJSON_GetObjectItemCaseSensitive(o, "result");
    FUZZ_CHECK(cJSON_IsString(v) && strcmp(v->valuestring, stockd_result_name(a->result)) == 0);
    v = cJSON_GetObjectItemCaseSensitive(o, "message");
    if (a->message)
        FUZZ_CHECK(cJSON_IsString(v) && strcmp(v->valuestring, a->message) == 0);
    else
        FUZZ_CHECK(v == NULL);
    v = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (a->id > 0)
        FUZZ_CHECK(cJSON_IsNumber(v) && v->valuedouble == (double)a->id);
    else
        FUZZ_CHECK(v == NULL);
    cJSON_Delete(o);
    free(json);
}

static void check_health(const char *err) {
    char *json = stockd_health_json(false, err, "up", err, "redis", "down", err, "zk", "stockd-1");
    cJSON *o, *v;

    FUZZ_CHECK(json != NULL);
    o = cJSON_Parse(json);
    FUZZ_CHECK(o != NULL);
    v = cJSON_GetObjectItemCaseSensitive(o, "mysql_error");
    FUZZ_CHECK(cJSON_IsString(v) && strcmp(v->valuestring, err) == 0);
    v = cJSON_GetObjectItemCaseSensitive(o, "zookeeper_error");
    FUZZ_CHECK(cJSON_IsString(v) && strcmp(v->valuestring, err) == 0);
    cJSON_Delete(o);
    free(json);
}

static int bounded(const char *s, size_t cap) {
    return memchr(s, '\0', cap) != NULL;
}

static void check_url(const char *url) {
    stockdb_config cfg, before;

    memset(&cfg, 0xa5, sizeof(cfg));
    before = cfg;
    if (stockdb_config_from_url(&cfg, url) != STOCKDB_OK) {
        FUZZ_CHECK(memcmp(&cfg, &before, sizeof(cfg)) == 0);
        return;
    }
    FUZZ_CHECK(strncmp(url, "mysql://", 8) == 0);
    FUZZ_CHECK(bounded(cfg.host, sizeof(cfg.host)) && cfg.host[0]);
    FUZZ_CHECK(bounded(cfg.user, sizeof(cfg.user)) && cfg.user[0]);
    FUZZ_CHECK(bounded(cfg.database, sizeof(cfg.database)) && cfg.database[0]);
    FUZZ_CHECK(cfg.port >= 1 && cfg.port <= 65535);
    FUZZ_CHECK(cfg.connect_timeout_s == before.connect_timeout_s);
    FUZZ_CHECK(cfg.rw_timeout_s == before.rw_timeout_s);
    /* The password is either set (terminated) or left exactly as it was. */
    FUZZ_CHECK(bounded(cfg.password, sizeof(cfg.password)) ||
               memcmp(cfg.password, before.password, sizeof(cfg.password)) == 0);
}

/* Checks one routing decision against the contract. */
static void check_routed(const stockd_request_in *in, const stockd_routed *d, const char *buf,
                         size_t buflen) {
    const char *m = in->method, *p = in->path;
    bool get = strcmp(m, "GET") == 0, head = strcmp(m, "HEAD") == 0, post = strcmp(m, "POST") == 0;
    stockd_answer a = {.result = d->error, .id = d->product_id, .message = d->message};

    if (d->error != STOCKD_R_OK) {
        unsigned status = stockd_answer_status(d->error);
        FUZZ_CHECK(d->message && *d->message);
        FUZZ_CHECK(status >= 400 && status <= 499);
        if (d->error == STOCKD_R_METHOD_NOT_ALLOWED)
            FUZZ_CHECK(d->allow && *d->allow);
        else
            FUZZ_CHECK(d->allow == NULL);
        check_answer(&a);
        return;
    }
    FUZZ_CHECK(d->message == NULL && d->allow == NULL);
#ifdef STOCKD_MAX_URI_BYTES
    FUZZ_CHECK(in->uri_bytes <= STOCKD_MAX_URI_BYTES);
    FUZZ_CHECK(in->header_bytes <= STOCKD_MAX_HEADER_BYTES);
#endif
    switch (d->route) {
    case STOCKD_ROUTE_METRICS:
        FUZZ_CHECK(strcmp(p, "/metrics") == 0 && (get || head));
        FUZZ_CHECK(d->key == NULL);
        return;
    case STOCKD_ROUTE_HEALTH:
        FUZZ_CHECK(strcmp(p, "/health") == 0 && (get || head));
        FUZZ_CHECK(d->kind == STOCKD_JOB_HEALTH && d->key == NULL);
        break;
    case STOCKD_ROUTE_STOCK:
        FUZZ_CHECK(strcmp(p, "/stock") == 0 && (get || head));
        FUZZ_CHECK(d->kind == STOCKD_JOB_STOCK && d->key == NULL);
        break;
    case STOCKD_ROUTE_REDUCE:
        FUZZ_CHECK(strcmp(p, "/stock/reduce") == 0 && (get || post));
        FUZZ_CHECK(d->kind == STOCKD_JOB_DEDUCT);
        break;
    case STOCKD_ROUTE_LOCK_QUEUE:
        FUZZ_CHECK(strcmp(p, "/lock/queue") == 0 && (get || head));
        FUZZ_CHECK(d->kind == STOCKD_JOB_LOCK_VIEW && d->key == NULL);
        /* Its only parameter is id. */
        for (size_t i = 0; i < in->nparams; i++)
            FUZZ_CHECK(in->params[i].key_len == 2 && memcmp(in->params[i].key, "id", 2) == 0);
        break;
    case STOCKD_ROUTE_ROUTING:
        /* Owner routing's view (it reads no parameter) and a product's owner (id=). */
        FUZZ_CHECK((strcmp(p, "/route/view") == 0 || strcmp(p, "/route/owner") == 0) &&
                   (get || head));
        FUZZ_CHECK(d->key == NULL);
        if (strcmp(p, "/route/view") == 0) return;
        break;
    case STOCKD_ROUTE_ORDER:
        /* POST /orders/{order}/pay or /cancel: the order is in the path, no id=. */
        FUZZ_CHECK(strncmp(p, "/orders/", 8) == 0 && post);
        FUZZ_CHECK(d->kind == STOCKD_JOB_ORDER && d->key == NULL);
        /* It names an order: a row id, or a request key's form (redis-stock's name) in the
         * path, never longer than a job's request id holds. */
        FUZZ_CHECK(d->order_id || (d->order && d->order > p && d->order_len <= 100));
        FUZZ_CHECK(in->body_bytes == 0 && !in->params_truncated);
        return;
    case STOCKD_ROUTE_RESTOCK:
        FUZZ_CHECK(strcmp(p, "/stock/restock") == 0 && post);
        FUZZ_CHECK(d->kind == STOCKD_JOB_RESTOCK && d->key == NULL);
        break;
    default:
        FUZZ_CHECK(!"a routed request names no route");
    }
    FUZZ_CHECK(in->body_bytes == 0 && !in->params_truncated);
    if (d->route != STOCKD_ROUTE_HEALTH) {
        /* Exactly one id, canonical, and the routed id is its value. */
        const stockd_param *id = NULL;
        int32_t want = 0;
        for (size_t i = 0; i < in->nparams; i++) {
            if (in->params[i].key_len == 2 && memcmp(in->params[i].key, "id", 2) == 0) {
                FUZZ_CHECK(id == NULL);
                id = &in->params[i];
            }
        }
        FUZZ_CHECK(id != NULL && id->value != NULL);
        FUZZ_CHECK(ref_parse_id(id->value, id->value_len, &want) == 0);
        FUZZ_CHECK(d->product_id == want && d->product_id >= 1);
    }
    if (d->key) {
        /* A key is valid and points into this request: the header wins over request_id. */
        FUZZ_CHECK(d->key_len >= 1 && d->key_len <= 64);
        FUZZ_CHECK(ref_check_key(d->key, d->key_len) == 0);
        FUZZ_CHECK(d->key >= buf && d->key + d->key_len <= buf + buflen);
        if (in->idem_key) FUZZ_CHECK(d->key == in->idem_key && d->key_len == in->idem_key_len);
    } else {
        FUZZ_CHECK(in->idem_key == NULL || d->route != STOCKD_ROUTE_REDUCE);
    }
    a.result = STOCKD_R_OK;
    check_answer(&a);
}

/* Applies one line after the first (see the top of the file). */
static void take_line(stockd_request_in *in, stockd_param *params, char *line, size_t len,
                      const char **url, const char **message) {
    if (len >= 2 && line[0] == 'H' && line[1] == ':') {
        in->idem_key = line + 2;
        in->idem_key_len = len - 2;
    } else if (len >= 2 && line[0] == 'B' && line[1] == ':') {
        in->body_bytes = (size_t)strtoul(line + 2, NULL, 10);
#ifdef STOCKD_MAX_URI_BYTES
    } else if (len >= 2 && line[0] == 'S' && line[1] == ':') {
        /* Once stockd checks sizes (stockd_request_in.uri_bytes, header_bytes): S:U,H. */
        char *comma;
        in->uri_bytes = (size_t)strtoul(line + 2, &comma, 10);
        if (*comma == ',') in->header_bytes = (size_t)strtoul(comma + 1, NULL, 10);
#endif
    } else if (len == 1 && line[0] == 'T') {
        in->params_truncated = true;
    } else if (len >= 2 && line[0] == 'U' && line[1] == ':') {
        *url = line + 2;
    } else if (len >= 2 && line[0] == 'M' && line[1] == ':') {
        *message = line + 2;
    } else if (in->nparams == STOCKD_MAX_PARAMS) {
        in->params_truncated = true; /* what http.c does past the 16th */
    } else {
        /* The key ends at the first '=' (no '=': no value). A value may hold NULs, as a
         * decoded %00 does: only its length ends it. */
        stockd_param *p = &params[in->nparams++];
        char *eq = memchr(line, '=', len);
        p->key = line;
        p->key_len = eq ? (size_t)(eq - line) : len;
        p->value = eq ? eq + 1 : NULL;
        p->value_len = eq ? len - p->key_len - 1 : 0;
        if (p->value) {
            check_parse_id(p->value, p->value_len);
            check_key(p->value, p->value_len);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    stockd_param params[STOCKD_MAX_PARAMS];
    stockd_request_in in = {.params = params};
    stockd_routed d;
    const char *message = NULL, *url = NULL;
    char *buf = malloc(size + 1), *sp;
    size_t first, start;

    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    check_parse_id(buf, size);
    check_key(buf, size);
    check_url(buf);

    /* Lines end at '\n', which becomes the NUL ending the field: libmicrohttpd hands out
     * NUL-terminated strings with their lengths. */
    for (first = 0; first < size && buf[first] != '\n'; first++) {
    }
    buf[first] = '\0';
    in.method = buf;
    sp = memchr(buf, ' ', first);
    in.path = "";
    if (sp) {
        *sp = '\0';
        in.path = sp + 1;
    }
    for (start = first + 1; start < size;) {
        size_t len = 0;
        while (start + len < size && buf[start + len] != '\n')
            len++;
        buf[start + len] = '\0';
        take_line(&in, params, buf + start, len, &url, &message);
        start += len + 1;
    }
    if (in.idem_key) check_key(in.idem_key, in.idem_key_len);
    if (url) check_url(url);
    if (message) {
        stockd_answer a = {.result = STOCKD_R_BAD_REQUEST, .message = message};
        check_answer(&a);
        check_health(message);
    }

    stockd_route_request(&in, &d);
    check_routed(&in, &d, buf, size);

    /* Every outcome of a deduction maps to a known status, with a message on errors. */
    if (size >= 2) {
        stockdb_result res = {.outcome = (stockdb_outcome)(data[0] & 1), .stock = data[1]};
        stockd_answer a = {.id = d.product_id};
        int lock_rc = -(int)(data[0] % 12), rc = -(int)(data[1] % 12);
        unsigned status;
        stockd_answer_from_db(&a, lock_rc, rc, (data[0] & 2) ? &res : NULL);
        status = stockd_answer_status(a.result);
        FUZZ_CHECK(status >= 200 && status <= 599);
        FUZZ_CHECK(status == 200 || status == 409 || a.message != NULL);
        check_answer(&a);
    }
    free(buf);
    return 0;
}
