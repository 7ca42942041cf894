/* answer: classification of stockd answers (see answer.h). */
#include "answer.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[ANSWER_KINDS] = {
    [ANSWER_DEDUCTED] = "deducted",         [ANSWER_SOLD_OUT] = "sold_out",
    [ANSWER_LOCK_TIMEOUT] = "lock_timeout", [ANSWER_LOCK_LOST] = "lock_lost",
    [ANSWER_UNAVAILABLE] = "unavailable",   [ANSWER_OVERLOADED] = "overloaded",
    [ANSWER_OTHER_503] = "other_503",       [ANSWER_OTHER_5XX] = "other_5xx",
    [ANSWER_HTTP_4XX] = "http_4xx",         [ANSWER_UNEXPECTED] = "unexpected",
    [ANSWER_TRANSPORT] = "transport_error",
};

const char *answer_kind_name(answer_kind kind) {
    return (unsigned)kind < ANSWER_KINDS ? kind_names[kind] : "invalid";
}

bool answer_kind_ambiguous(answer_kind kind) {
    return kind == ANSWER_OTHER_503 || kind == ANSWER_OTHER_5XX || kind == ANSWER_UNEXPECTED ||
           kind == ANSWER_TRANSPORT;
}

/* Order ids are stored as JSON numbers; a double holds integers exactly up to 2^53. */
#define MAX_EXACT_ID 9007199254740992.0

static answer_kind classify_200(const cJSON *root, answer_info *info) {
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(root, "result");
    /* A reservation (docs/orders.md) takes a unit as a deduction does, with its order. */
    if (!cJSON_IsString(result) || (strcmp(result->valuestring, "deducted") != 0 &&
                                    strcmp(result->valuestring, "reserved") != 0))
        return ANSWER_UNEXPECTED;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "order_id");
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(root, "order");
    if (!cJSON_IsNumber(id) && cJSON_IsString(key) && key->valuestring[0]) {
        /* Mode redis-stock: the order is named by its key; its row comes later. */
        info->keyed = true;
        info->replayed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "replayed"));
        return ANSWER_DEDUCTED;
    }
    if (!cJSON_IsNumber(id)) return ANSWER_UNEXPECTED;
    double d = id->valuedouble;
    if (!(d >= 1 && d <= MAX_EXACT_ID) || floor(d) != d) return ANSWER_UNEXPECTED;
    info->order_id = (uint64_t)d;
    info->replayed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "replayed"));
    return ANSWER_DEDUCTED;
}

static answer_kind classify_503(const cJSON *root) {
    static const struct {
        const char *result;
        answer_kind kind;
    } known[] = {
        {"lock_timeout", ANSWER_LOCK_TIMEOUT},
        {"lock_lost", ANSWER_LOCK_LOST},
        {"unavailable", ANSWER_UNAVAILABLE},
        {"overloaded", ANSWER_OVERLOADED},
    };
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(root, "result");
    if (!cJSON_IsString(result)) return ANSWER_OTHER_503;
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(result->valuestring, known[i].result) == 0) return known[i].kind;
    return ANSWER_OTHER_503;
}

answer_kind answer_classify(long status, const char *body, size_t len, answer_info *info) {
    answer_info scratch;
    if (!info) info = &scratch;
    memset(info, 0, sizeof(*info));

    if (status <= 0) return ANSWER_TRANSPORT;
    if (status == 409) return ANSWER_SOLD_OUT;
    if (status >= 400 && status < 500) return ANSWER_HTTP_4XX;
    if (status >= 500 && status < 600 && status != 503) return ANSWER_OTHER_5XX;
    if (status != 200 && status != 503) return ANSWER_UNEXPECTED;

    /* Only a 200 and a 503 need the body. A body that is not a JSON object makes a 200
     * unexpected and a 503 "other" (nginx answers its own 503 in HTML). */
    cJSON *root = len ? cJSON_ParseWithLength(body, len) : NULL;
    answer_kind kind;
    if (!cJSON_IsObject(root))
        kind = status == 200 ? ANSWER_UNEXPECTED : ANSWER_OTHER_503;
    else
        kind = status == 200 ? classify_200(root, info) : classify_503(root);
    cJSON_Delete(root);
    return kind;
}

static bool key_ok(const char *key) {
    size_t n = key ? strlen(key) : 0;
    if (n < 1 || n > ANSWER_KEY_MAX) return false;
    return strspn(key, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

int answer_key_line(char *buf, size_t len, const char *key, long status, answer_kind kind,
                    const answer_info *info, int curl_code) {
    if (!key_ok(key) || (unsigned)kind >= ANSWER_KINDS || curl_code < 0) return -1;
    bool deducted = kind == ANSWER_DEDUCTED && info;
    const char *result = answer_kind_name(kind);
    if (kind == ANSWER_TRANSPORT) {
        status = 0;
        result = "-";
    } else if (status < 100 || status > 999) {
        return -1;
    }
    /* Into a scratch buffer first, so a line that does not fit leaves buf untouched. */
    char line[ANSWER_KEY_LINE_MAX];
    int n = snprintf(line, sizeof(line), "%s %ld %s %" PRIu64 " %s %d\n", key, status, result,
                     deducted ? info->order_id : 0, deducted && info->replayed ? "true" : "false",
                     curl_code);
    if (n < 0 || (size_t)n >= sizeof(line) || (size_t)n >= len) return -1;
    memcpy(buf, line, (size_t)n + 1);
    return n;
}
