/* answer.c: the pure part of stockd's HTTP contract. It parses what a client sends
 * (product ids, idempotency keys) and turns an outcome into a status and a JSON body.
 * Nothing here does I/O or keeps state, so it is unit-tested and fuzzed on its own. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

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
    [STOCKD_R_INTERNAL] = {"internal_error", 500},
};

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
    /* Order ids are BIGINT UNSIGNED; a JSON number holds them exactly up to 2^53, far
     * beyond what an AUTO_INCREMENT reaches here. */
    if (a->order_id && !cJSON_AddNumberToObject(o, "order_id", (double)a->order_id)) goto out;
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

void stockd_answer_from_db(stockd_answer *a, int lock_rc, int rc, const stockdb_result *res) {
    switch (lock_rc) {
    case ZKLOCK_OK:
        break;
    case ZKLOCK_ERR_TIMEOUT:
        a->result = STOCKD_R_LOCK_TIMEOUT;
        a->message = "the product's lock was not acquired in time; nothing was deducted";
        return;
    case ZKLOCK_ERR_CANCELLED:
        a->result = STOCKD_R_UNAVAILABLE;
        a->message = "the service is shutting down; nothing was deducted";
        return;
    default:
        a->result = STOCKD_R_UNAVAILABLE;
        a->message = "ZooKeeper is unavailable; nothing was deducted";
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
            a->result = STOCKD_R_DEDUCTED;
            a->order_id = res->order_id;
            a->replayed = res->replayed;
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
        a->message = "the database gave up waiting for the row lock; nothing was deducted";
        return;
    case STOCKDB_ERR_FENCED:
        a->result = STOCKD_R_LOCK_LOST;
        a->message = "a newer lock holder has written this product; rolled back";
        return;
    case STOCKDB_ERR_GUARD:
        a->result = STOCKD_R_LOCK_LOST;
        a->message = "the lock was lost or in doubt before commit; rolled back";
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
                         const char *lock_mode, const char *instance) {
    cJSON *o = cJSON_CreateObject();
    char *out = NULL;

    if (!o) return NULL;
    if (!cJSON_AddStringToObject(o, "result", ok ? "ok" : "unavailable")) goto out;
    if (!cJSON_AddStringToObject(o, "mysql", mysql_err ? "down" : "up")) goto out;
    if (mysql_err && !cJSON_AddStringToObject(o, "mysql_error", mysql_err)) goto out;
    if (!cJSON_AddStringToObject(o, "zookeeper", zk_state)) goto out;
    if (zk_err && !cJSON_AddStringToObject(o, "zookeeper_error", zk_err)) goto out;
    if (!cJSON_AddStringToObject(o, "lock", lock_mode)) goto out;
    if (!cJSON_AddStringToObject(o, "instance", instance)) goto out;
    out = cJSON_PrintUnformatted(o);
out:
    cJSON_Delete(o);
    return out;
}
