/* contract.c: the pure part of stockd's HTTP contract. It decides what a request asks
 * for from its method, path, query parameters and headers (routing, product ids,
 * idempotency keys), and turns an outcome into a status and a JSON body. Nothing here
 * does I/O or keeps state, so it is unit-tested and fuzzed on its own; http.c feeds it
 * what libmicrohttpd parsed. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "stockd.h"

static const struct {
    const char *name;
    unsigned status;
} results[] = {
    [STOCKD_R_OK] = {"ok", 200},
    [STOCKD_R_DEDUCTED] = {"deducted", 200},
    [STOCKD_R_SOLD_OUT] = {"sold_out", 409},
    [STOCKD_R_NOT_FOUND] = {"not_found", 404},
    [STOCKD_R_BAD_REQUEST] = {"bad_request", 400},
    [STOCKD_R_NO_ROUTE] = {"not_found", 404},
    [STOCKD_R_METHOD_NOT_ALLOWED] = {"method_not_allowed", 405},
    [STOCKD_R_LOCK_TIMEOUT] = {"lock_timeout", 503},
    [STOCKD_R_LOCK_LOST] = {"lock_lost", 503},
    [STOCKD_R_UNAVAILABLE] = {"unavailable", 503},
    [STOCKD_R_OVERLOADED] = {"overloaded", 503},
    [STOCKD_R_UNKNOWN] = {"unknown", 500},
    [STOCKD_R_URI_TOO_LONG] = {"uri_too_long", 414},
    [STOCKD_R_HEADERS_TOO_LARGE] = {"headers_too_large", 431},
    [STOCKD_R_INTERNAL] = {"internal_error", 500},
    [STOCKD_R_KEY_CONFLICT] = {"key_conflict", 422},
    [STOCKD_R_NOT_REPLICATED] = {"not_replicated", 503},
    [STOCKD_R_RESERVED] = {"reserved", 200},
    [STOCKD_R_LIMIT_REACHED] = {"limit_reached", 409},
    [STOCKD_R_EXPIRED] = {"expired", 409},
    [STOCKD_R_NOT_RESERVED] = {"not_reserved", 409},
    [STOCKD_R_NOT_YOUR_ORDER] = {"not_your_order", 403},
    [STOCKD_R_PAID] = {"paid", 200},
    [STOCKD_R_CANCELLED] = {"cancelled", 200},
    [STOCKD_R_RESTOCKED] = {"restocked", 200},
    [STOCKD_R_UNAUTHORIZED] = {"unauthorized", 401},
    [STOCKD_R_FORBIDDEN] = {"forbidden", 403},
};
_Static_assert(sizeof(results) / sizeof(results[0]) == STOCKD_R_COUNT, "a result without a row");

unsigned stockd_answer_status(stockd_result r) {
    if ((size_t)r >= sizeof(results) / sizeof(results[0])) return 500;
    return results[r].status;
}

const char *stockd_result_name(stockd_result r) {
    if ((size_t)r >= sizeof(results) / sizeof(results[0])) return "internal_error";
    return results[r].name;
}

char *stockd_answer_json(const stockd_answer *a, const char *instance) {
    cJSON *o = cJSON_CreateObject();
    char *out = NULL;

    if (!o) return NULL;
    if (!cJSON_AddStringToObject(o, "result", stockd_result_name(a->result))) goto out;
    if (a->id > 0 && !cJSON_AddNumberToObject(o, "id", a->id)) goto out;
    if (a->has_stock && !cJSON_AddNumberToObject(o, "stock", a->stock)) goto out;
    if (a->has_units && (!cJSON_AddNumberToObject(o, "reserved", (double)a->reserved) ||
                         !cJSON_AddNumberToObject(o, "paid", (double)a->paid) ||
                         !cJSON_AddNumberToObject(o, "released", (double)a->released)))
        goto out;
    /* Order ids are BIGINT UNSIGNED; a JSON number holds them exactly up to 2^53, far
     * beyond what an AUTO_INCREMENT reaches here. */
    if (a->order_id && !cJSON_AddNumberToObject(o, "order_id", (double)a->order_id)) goto out;
    if (a->order && !cJSON_AddStringToObject(o, "order", a->order)) goto out;
    if (a->state && !cJSON_AddStringToObject(o, "state", a->state)) goto out;
    if (a->expires_at) {
        /* "YYYY-MM-DD HH:MM:SS.ffffff" (UTC, the database's) as ISO 8601. */
        char iso[40];
        snprintf(iso, sizeof(iso), "%sZ", a->expires_at);
        if (iso[10] == ' ') iso[10] = 'T';
        if (!cJSON_AddStringToObject(o, "expires_at", iso)) goto out;
    }
    if (a->segment && !cJSON_AddNumberToObject(o, "segment", a->segment)) goto out;
    if (a->replayed && !cJSON_AddTrueToObject(o, "replayed")) goto out;
    if (a->message && !cJSON_AddStringToObject(o, "message", a->message)) goto out;
    if (instance && *instance && !cJSON_AddStringToObject(o, "instance", instance)) goto out;
    out = cJSON_PrintUnformatted(o);
out:
    cJSON_Delete(o);
    return out;
}

int stockd_parse_id(const char *s, size_t len, int32_t *out, const char **why) {
    long long v = 0;

    if (!s || len == 0) {
        *why = "missing id: use ?id=N with N a positive integer";
        return -1;
    }
    if (len > 10) {
        *why = "id out of range: must be 1..2147483647";
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            *why = "id must be a positive decimal integer";
            return -1;
        }
        v = v * 10 + (s[i] - '0');
    }
    if (s[0] == '0') {
        *why =
            len == 1 ? "id out of range: must be 1..2147483647" : "id must not have leading zeros";
        return -1;
    }
    if (v > INT32_MAX) {
        *why = "id out of range: must be 1..2147483647";
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

int stockd_result_parse(const char *name, stockd_result *out) {
    for (size_t i = 0; name && i < sizeof(results) / sizeof(results[0]); i++)
        if (results[i].name && strcmp(results[i].name, name) == 0) {
            *out = (stockd_result)i;
            return 0;
        }
    return -1;
}

const char *const stockd_forwarded_headers[] = {"Idempotency-Key", "X-User", NULL};

void stockd_request_set_header(stockd_request_in *in, const char *name, const char *value,
                               size_t len) {
    in->header_bytes += strlen(name) + len + 2;
    if (strcasecmp(name, "Idempotency-Key") == 0) {
        if (!in->idem_keys++) {
            in->idem_key = value;
            in->idem_key_len = len;
        }
    } else if (strcasecmp(name, "X-User") == 0) {
        if (!in->users++) {
            in->user = value;
            in->user_len = len;
        }
    }
}

const char stockd_order_id_rule[] =
    "order id must be a positive decimal integer without leading zeros, 1..18 digits (or, in "
    "mode redis-stock, the order the deduction answered)";

int stockd_check_request_id(const char *s) {
    size_t n = s ? strlen(s) : 0, i = 2, hex = 0, digits = 0;
    if (stockd_check_key(s, n) == 0) return 0;
    if (n < 5 || s[0] != 'i' || s[1] != '/') return -1;
    for (; i < n && ((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')); i++)
        hex++;
    if (hex != 16 || i >= n || s[i++] != '/') return -1;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
        digits++;
    return i == n && digits >= 1 && digits <= 20 ? 0 : -1;
}

int stockd_check_key(const char *s, size_t len) {
    if (!s || len == 0 || len > 64) return -1;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return -1;
    }
    return 0;
}

int stockd_check_user(const char *s, size_t len) {
    if (!s || len == 0 || len > STOCKDB_USER_MAX) return -1;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.' || c == '@'))
            return -1;
    }
    return 0;
}

stockd_result stockd_check_admin(const char *header, size_t len, const char *token) {
    static const char scheme[] = "Bearer ";
    const size_t slen = sizeof(scheme) - 1;
    if (!header || len <= slen || strncasecmp(header, scheme, slen) != 0)
        return STOCKD_R_UNAUTHORIZED;
    if (!token || !*token) return STOCKD_R_FORBIDDEN;
    /* Constant time in the token's bytes: the difference of every byte is or-ed in, and
     * a length that differs counts as a difference without an early return. */
    const char *got = header + slen;
    size_t glen = len - slen, tlen = strlen(token);
    unsigned char diff = glen != tlen;
    for (size_t i = 0; i < tlen; i++)
        diff |= (unsigned char)(token[i] ^ (i < glen ? got[i] : 0));
    return diff ? STOCKD_R_FORBIDDEN : STOCKD_R_OK;
}

/* The bound on an age is twice nginx's proxy_read_timeout (30 s): a request that old
 * has been answered 504 by nginx long ago, so any deadline has passed, and a time older
 * still says more about a clock that differs from ours than about a wait. */
uint64_t stockd_request_age_ns(const char *s, size_t len, uint64_t now_wall_ns) {
    const uint64_t max_age = (uint64_t)STOCKD_REQUEST_START_MAX_AGE_MS * 1000000u;
    uint64_t sec = 0, frac = 0, scale = 1000000000u, t;
    size_t i = 2, digits = 0;

    if (!s || len < 3 || s[0] != 't' || s[1] != '=') return 0;
    /* At most 10 digits of seconds (up to the year 2286), so t cannot overflow. */
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        if (++digits > 10) return 0;
        sec = sec * 10 + (uint64_t)(s[i] - '0');
    }
    if (digits == 0) return 0;
    if (i < len && s[i] == '.') {
        for (i++, digits = 0; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
            if (++digits > 9) return 0;
            scale /= 10;
            frac += (uint64_t)(s[i] - '0') * scale;
        }
        if (digits == 0) return 0;
    }
    if (i != len) return 0;
    t = sec * 1000000000u + frac;
    if (t > now_wall_ns || now_wall_ns - t > max_age) return 0;
    return now_wall_ns - t;
}

void stockd_answer_from_db(stockd_answer *a, int lock_rc, int rc, const stockdb_result *res) {
    switch (lock_rc) {
    case LOCK_OK:
        break;
    case LOCK_ERR_TIMEOUT:
        a->result = STOCKD_R_LOCK_TIMEOUT;
        a->message = "the product's lock was not acquired in time; nothing was deducted";
        return;
    case LOCK_ERR_CANCELLED:
        a->result = STOCKD_R_UNAVAILABLE;
        a->message = "the service is shutting down; nothing was deducted";
        return;
    default:
        /* The kind names its own service (lock_failure_message, which the caller puts in
         * place of this); this is the text for a kind without one. */
        a->result = STOCKD_R_UNAVAILABLE;
        a->message = "the product's lock could not be taken; nothing was deducted";
        return;
    }
    switch (rc) {
    case STOCKDB_OK:
        if (!res) {
            a->result = STOCKD_R_OK;
            return;
        }
        a->has_stock = true;
        a->stock = res->stock;
        if (res->outcome == STOCKDB_DEDUCTED) {
            a->result = res->reserved ? STOCKD_R_RESERVED : STOCKD_R_DEDUCTED;
            a->order_id = res->order_id;
            a->replayed = res->replayed;
            if (res->reserved) a->expires_at = res->expires_at;
        } else if (res->outcome == STOCKDB_LIMIT_REACHED) {
            a->result = STOCKD_R_LIMIT_REACHED;
            a->message = "this customer holds the product's limit already; nothing was deducted";
        } else {
            a->result = STOCKD_R_SOLD_OUT;
        }
        return;
    case STOCKDB_ERR_NOT_FOUND:
        a->result = STOCKD_R_NOT_FOUND;
        a->message = "no such product";
        return;
    case STOCKDB_ERR_CONNECT:
        a->result = STOCKD_R_UNAVAILABLE;
        a->message = "MySQL is unavailable; nothing was deducted";
        return;
    case STOCKDB_ERR_DEADLOCK:
        a->result = STOCKD_R_UNAVAILABLE;
        a->message = "the database aborted the transaction on every try (a deadlock, a lock "
                     "wait timeout or a Galera certification conflict); nothing changed";
        return;
    case STOCKDB_ERR_FENCED:
        a->result = STOCKD_R_LOCK_LOST;
        a->message = "a newer lock holder has written this product; rolled back";
        return;
    case STOCKDB_ERR_GUARD:
        a->result = STOCKD_R_LOCK_LOST;
        a->message = "the lock was lost or in doubt before commit; rolled back";
        return;
    case STOCKDB_ERR_KEY_REUSED:
        a->result = STOCKD_R_KEY_CONFLICT;
        a->message = "this Idempotency-Key was already used for another product; "
                     "use a new key for a new request";
        return;
    case STOCKDB_ERR_UNKNOWN:
        a->result = STOCKD_R_UNKNOWN;
        a->message = "the commit's reply was lost and it could not be confirmed; "
                     "retry with the same Idempotency-Key";
        return;
    default:
        a->result = STOCKD_R_INTERNAL;
        a->message = "database error; rolled back";
        return;
    }
}

char *stockd_health_json(bool ok, const char *mysql_err, const char *zk_state, const char *zk_err,
                         const char *service, const char *service_state, const char *service_err,
                         const char *lock_mode, const char *instance) {
    cJSON *o = cJSON_CreateObject();
    char *out = NULL;

    if (!o) return NULL;
    if (!cJSON_AddStringToObject(o, "result", ok ? "ok" : "unavailable")) goto out;
    if (!cJSON_AddStringToObject(o, "mysql", mysql_err ? "down" : "up")) goto out;
    if (mysql_err && !cJSON_AddStringToObject(o, "mysql_error", mysql_err)) goto out;
    if (!cJSON_AddStringToObject(o, "zookeeper", zk_state)) goto out;
    if (zk_err && !cJSON_AddStringToObject(o, "zookeeper_error", zk_err)) goto out;
    char err_field[64];
    if (service) snprintf(err_field, sizeof(err_field), "%s_error", service);
    if (service && !cJSON_AddStringToObject(o, service, service_state)) goto out;
    if (service && service_err && !cJSON_AddStringToObject(o, err_field, service_err)) goto out;
    if (!cJSON_AddStringToObject(o, "lock", lock_mode)) goto out;
    if (!cJSON_AddStringToObject(o, "instance", instance)) goto out;
    out = cJSON_PrintUnformatted(o);
out:
    cJSON_Delete(o);
    return out;
}

/* Finds the single value of a query parameter. Returns its count (0, 1 or more). */
static unsigned find_param(const stockd_request_in *in, const char *key, const char **value,
                           size_t *len) {
    size_t klen = strlen(key);
    unsigned n = 0;

    for (size_t i = 0; i < in->nparams; i++) {
        const stockd_param *p = &in->params[i];
        if (p->key_len == klen && memcmp(p->key, key, klen) == 0) {
            *value = p->value;
            *len = p->value ? p->value_len : 0;
            n++;
        }
    }
    return n;
}

static void refuse(stockd_routed *out, stockd_result r, const char *message, const char *allow) {
    out->error = r;
    out->message = message;
    out->allow = allow;
}

/* The client's idempotency key, from the Idempotency-Key header or request_id=. */
static void route_key(const stockd_request_in *in, stockd_routed *out) {
    const char *q = NULL;
    size_t qlen = 0;
    unsigned n = find_param(in, "request_id", &q, &qlen);

    if (n > 1) return refuse(out, STOCKD_R_BAD_REQUEST, "request_id given more than once", NULL);
    if (in->idem_keys > 1)
        return refuse(out, STOCKD_R_BAD_REQUEST, "Idempotency-Key given more than once", NULL);
    if (n && stockd_check_key(q, qlen) != 0)
        return refuse(out, STOCKD_R_BAD_REQUEST, "request_id must be 1..64 of [A-Za-z0-9_-]", NULL);
    if (in->idem_key && stockd_check_key(in->idem_key, in->idem_key_len) != 0)
        return refuse(out, STOCKD_R_BAD_REQUEST, "Idempotency-Key must be 1..64 of [A-Za-z0-9_-]",
                      NULL);
    if (in->idem_key && n && (in->idem_key_len != qlen || memcmp(in->idem_key, q, qlen) != 0))
        return refuse(out, STOCKD_R_BAD_REQUEST, "Idempotency-Key and request_id differ", NULL);
    if (in->idem_key) {
        out->key = in->idem_key;
        out->key_len = in->idem_key_len;
    } else if (n) {
        out->key = q;
        out->key_len = qlen;
    }
}

/* The customer, from user= or the X-User header (once each; both must agree), as the
 * key is (route_key): a forwarded request carries it the same way. required: a missing
 * one is refused. */
static void route_user(const stockd_request_in *in, stockd_routed *out, bool required) {
    const char *q = NULL;
    size_t qlen = 0;
    unsigned n = find_param(in, "user", &q, &qlen);

    if (n > 1) return refuse(out, STOCKD_R_BAD_REQUEST, "user given more than once", NULL);
    if (in->users > 1)
        return refuse(out, STOCKD_R_BAD_REQUEST, "X-User given more than once", NULL);
    if (n && stockd_check_user(q, qlen) != 0)
        return refuse(out, STOCKD_R_BAD_REQUEST, "user must be 1..64 of [A-Za-z0-9_.@-]", NULL);
    if (in->user && stockd_check_user(in->user, in->user_len) != 0)
        return refuse(out, STOCKD_R_BAD_REQUEST, "X-User must be 1..64 of [A-Za-z0-9_.@-]", NULL);
    if (in->user && n && (in->user_len != qlen || memcmp(in->user, q, qlen) != 0))
        return refuse(out, STOCKD_R_BAD_REQUEST, "X-User and user differ", NULL);
    if (in->user) {
        out->user = in->user;
        out->user_len = in->user_len;
    } else if (n) {
        out->user = q;
        out->user_len = qlen;
    } else if (required) {
        return refuse(out, STOCKD_R_BAD_REQUEST, "missing user: use ?user=U or X-User: U", NULL);
    }
}

/* POST /orders/{order}/pay or /cancel: the order and the event, or a refusal. The order
 * is named two ways (docs/orders.md): by the id of its row (order_id, the exact modes)
 * or, in mode redis-stock, by the request key the deduction answered as "order" (order:
 * a client's key or stockd's own "i/<hex>/<n>", whose slashes are why the event is
 * found at the last slash). Which one a mode takes is the worker's to say. */
static void route_order(const char *path, stockd_routed *out) {
    const char *id = path + strlen("/orders/"), *slash = strrchr(id, '/');
    char text[101];
    uint64_t v = 0;

    out->route = STOCKD_ROUTE_ORDER;
    out->kind = STOCKD_JOB_ORDER;
    if (!slash || (strcmp(slash, "/pay") != 0 && strcmp(slash, "/cancel") != 0))
        return refuse(out, STOCKD_R_NO_ROUTE,
                      "no such route; try POST /orders/{order}/pay or /orders/{order}/cancel",
                      NULL);
    out->event = slash[1] == 'p' ? STOCKDB_EV_PAY : STOCKDB_EV_CANCEL;
    size_t len = (size_t)(slash - id);
    if (len > 0 && len < sizeof(text)) {
        memcpy(text, id, len);
        text[len] = '\0';
        if (stockd_check_request_id(text) == 0) {
            out->order = id;
            out->order_len = len;
        }
    }
    /* An order id as the deduction answered it: decimal, no sign, no leading zero; 18
     * digits keep it below 2^63 (orders.id is BIGINT UNSIGNED AUTO_INCREMENT). */
    for (size_t i = 0; len <= 18 && i < len; i++) {
        if (id[i] < '0' || id[i] > '9' || (i == 0 && id[i] == '0')) {
            v = 0;
            break;
        }
        v = v * 10 + (uint64_t)(id[i] - '0');
    }
    out->order_id = v;
    if (!v && !out->order) return refuse(out, STOCKD_R_BAD_REQUEST, stockd_order_id_rule, NULL);
}

/* units=K of a restock: 1..1000000. */
static void route_units(const stockd_request_in *in, stockd_routed *out) {
    const char *u = NULL;
    size_t len = 0;
    long long v = 0;
    unsigned n = find_param(in, "units", &u, &len);
    if (n != 1 || !u || len == 0 || len > 7)
        return refuse(out, STOCKD_R_BAD_REQUEST, "units must be given once, 1..1000000", NULL);
    for (size_t i = 0; i < len; i++) {
        if (u[i] < '0' || u[i] > '9')
            return refuse(out, STOCKD_R_BAD_REQUEST, "units must be a positive integer, 1..1000000",
                          NULL);
        v = v * 10 + (u[i] - '0');
    }
    if (v < 1 || v > 1000000 || u[0] == '0')
        return refuse(out, STOCKD_R_BAD_REQUEST, "units must be a positive integer, 1..1000000",
                      NULL);
    out->units = (int32_t)v;
}

void stockd_route_request(const stockd_request_in *in, stockd_routed *out) {
    const char *m = in->method ? in->method : "", *path = in->path ? in->path : "";
    bool get = strcmp(m, "GET") == 0, head = strcmp(m, "HEAD") == 0, post = strcmp(m, "POST") == 0;
    const char *id = NULL, *why = NULL;
    size_t id_len = 0;
    unsigned n;

    memset(out, 0, sizeof(*out));
    out->error = STOCKD_R_OK;
    if (in->uri_bytes > STOCKD_MAX_URI_BYTES) {
        out->route = STOCKD_ROUTE_OTHER;
        return refuse(out, STOCKD_R_URI_TOO_LONG,
                      "the URI is longer than " STOCKD_MAX_URI_BYTES_STR " bytes", NULL);
    }
    if (in->header_bytes > STOCKD_MAX_HEADER_BYTES) {
        out->route = STOCKD_ROUTE_OTHER;
        return refuse(out, STOCKD_R_HEADERS_TOO_LARGE,
                      "the headers are larger than " STOCKD_MAX_HEADER_BYTES_STR " bytes", NULL);
    }
    if (strcmp(path, "/metrics") == 0) {
        out->route = STOCKD_ROUTE_METRICS;
        if (!get && !head)
            return refuse(out, STOCKD_R_METHOD_NOT_ALLOWED, "use GET or HEAD", "GET, HEAD");
        return;
    }
    if (strcmp(path, "/stock/reduce") == 0) {
        out->route = STOCKD_ROUTE_REDUCE;
        out->kind = STOCKD_JOB_DEDUCT;
        /* Never HEAD: it would deduct without showing the answer. */
        if (!get && !post)
            return refuse(out, STOCKD_R_METHOD_NOT_ALLOWED, "use GET or POST for /stock/reduce",
                          "GET, POST");
    } else if (strcmp(path, "/stock") == 0 || strcmp(path, "/health") == 0) {
        bool stock = path[1] == 's';
        out->route = stock ? STOCKD_ROUTE_STOCK : STOCKD_ROUTE_HEALTH;
        out->kind = stock ? STOCKD_JOB_STOCK : STOCKD_JOB_HEALTH;
        if (!get && !head)
            return refuse(out, STOCKD_R_METHOD_NOT_ALLOWED, "use GET or HEAD", "GET, HEAD");
    } else if (strncmp(path, "/orders/", 8) == 0) {
        route_order(path, out);
        if (out->error != STOCKD_R_OK) return;
        if (!post) return refuse(out, STOCKD_R_METHOD_NOT_ALLOWED, "use POST", "POST");
        if (in->body_bytes > 0)
            return refuse(out, STOCKD_R_BAD_REQUEST,
                          "a request body is not accepted; pass parameters in the query", NULL);
        if (in->params_truncated)
            return refuse(out, STOCKD_R_BAD_REQUEST, "too many query parameters", NULL);
        return route_user(in, out, true);
    } else if (strcmp(path, "/stock/restock") == 0) {
        out->route = STOCKD_ROUTE_RESTOCK;
        out->kind = STOCKD_JOB_RESTOCK;
        if (!post) return refuse(out, STOCKD_R_METHOD_NOT_ALLOWED, "use POST", "POST");
    } else if (strcmp(path, "/route/view") == 0 || strcmp(path, "/route/owner") == 0) {
        /* Owner routing's view and a product's owner (route.c): memory only, rendered at
         * once like /metrics; id= for the owner. */
        out->route = STOCKD_ROUTE_ROUTING;
        out->kind = STOCKD_JOB_STOCK; /* a read; no job is made */
        if (!get && !head)
            return refuse(out, STOCKD_R_METHOD_NOT_ALLOWED, "use GET or HEAD", "GET, HEAD");
        if (path[7] == 'v') return;
    } else if (strcmp(path, "/lock/queue") == 0) {
        out->route = STOCKD_ROUTE_LOCK_QUEUE;
        out->kind = STOCKD_JOB_LOCK_VIEW;
        if (!get && !head)
            return refuse(out, STOCKD_R_METHOD_NOT_ALLOWED, "use GET or HEAD", "GET, HEAD");
        /* A read-only view that people poll: anything but id= is a mistake to name. */
        for (size_t i = 0; i < in->nparams; i++)
            if (in->params[i].key_len != 2 || memcmp(in->params[i].key, "id", 2) != 0)
                return refuse(out, STOCKD_R_BAD_REQUEST, "/lock/queue takes one parameter, id=N",
                              NULL);
    } else {
        out->route = STOCKD_ROUTE_OTHER;
        return refuse(out, STOCKD_R_NO_ROUTE,
                      "no such route; try /stock/reduce?id=N, /stock?id=N or /health", NULL);
    }
    if (in->body_bytes > 0)
        return refuse(out, STOCKD_R_BAD_REQUEST,
                      "a request body is not accepted; pass parameters in the query", NULL);
    if (in->params_truncated)
        return refuse(out, STOCKD_R_BAD_REQUEST, "too many query parameters", NULL);
    if (out->kind == STOCKD_JOB_HEALTH) return;

    n = find_param(in, "id", &id, &id_len);
    if (n > 1) return refuse(out, STOCKD_R_BAD_REQUEST, "id given more than once", NULL);
    if (stockd_parse_id(id, id_len, &out->product_id, &why) != 0)
        return refuse(out, STOCKD_R_BAD_REQUEST, why, NULL);
    if (out->kind == STOCKD_JOB_RESTOCK) {
        /* A restock takes a deduction's key, so that a retry restocks once. */
        route_units(in, out);
        if (out->error == STOCKD_R_OK) route_key(in, out);
        return;
    }
    if (out->kind != STOCKD_JOB_DEDUCT) return;
    route_key(in, out);
    if (out->error == STOCKD_R_OK) route_user(in, out, false);
}
