/* answer: what one stockd answer means, from its HTTP status and JSON body.
 *
 * stockload counts answers by kind; this is the one place that maps the HTTP contract
 * (notes: /stock/reduce answers 200 deducted, 409 sold_out, 503 lock_timeout | lock_lost
 * | unavailable | overloaded, 500 unknown, 4xx for bad requests) onto those kinds. The
 * status decides first; the body only refines a 200 (is it really a deduction, with an
 * order id?) and a 503 (which kind of refusal). Anything that does not fit the contract
 * is ANSWER_UNEXPECTED rather than guessed. It also writes the one-line record of a keyed
 * request (answer_key_line) that loadtest/check-invariant reads to retry lost answers.
 * Pure functions; thread-safe. */
#ifndef ANSWER_H
#define ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum answer_kind {
    ANSWER_DEDUCTED = 0, /* 200, result "deducted" (or "reserved": a unit taken, the
                          * order reserved, docs/orders.md), with a positive integer
                          * order_id, or (mode redis-stock) a non-empty string "order" */
    ANSWER_SOLD_OUT,     /* 409 */
    ANSWER_LOCK_TIMEOUT, /* 503, result "lock_timeout" */
    ANSWER_LOCK_LOST,    /* 503, result "lock_lost" */
    ANSWER_UNAVAILABLE,  /* 503, result "unavailable" */
    ANSWER_OVERLOADED,   /* 503, result "overloaded" */
    ANSWER_OTHER_503,    /* 503 with any other body (nginx's own 503, say) */
    ANSWER_OTHER_5XX,    /* 500 (result "unknown"), 502, 504, ... */
    ANSWER_HTTP_4XX,     /* 400, 404, 405, ... */
    ANSWER_UNEXPECTED,   /* 1xx, 3xx, a 2xx other than a well-formed deduction, >= 600 */
    ANSWER_TRANSPORT,    /* no HTTP answer at all (connect error, timeout, reset) */
    ANSWER_KINDS
} answer_kind;

/* Details of a deduction (zero otherwise). */
typedef struct answer_info {
    uint64_t order_id; /* orders.id of the deduction; 0 when keyed */
    bool keyed;        /* named by "order" (its key), with no orders.id yet */
    bool replayed;     /* the answer carried "replayed": true */
} answer_info;

/* Classifies an answer. status 0 means no HTTP answer (ANSWER_TRANSPORT). body need not
 * be NUL-terminated; len may be 0. info may be NULL. */
answer_kind answer_classify(long status, const char *body, size_t len, answer_info *info);

/* The kind's name as used in stockload's output ("deducted", "sold_out", ...). */
const char *answer_kind_name(answer_kind kind);

/* True if the kind leaves it open whether the request deducted: the server may have
 * committed although the client saw no deduction (a transport error, a 500 "unknown",
 * a proxy's 502/504, a body that could not be read). */
bool answer_kind_ambiguous(answer_kind kind);

/* The longest Idempotency-Key the contract allows: 1..64 of [A-Za-z0-9_-]. */
#define ANSWER_KEY_MAX 64

/* Room for any line answer_key_line writes, its newline and NUL included. */
#define ANSWER_KEY_LINE_MAX 160

/* Writes the record of one finished keyed request into buf (len bytes), as
 *   KEY STATUS RESULT ORDER_ID REPLAYED CURL_EXIT\n
 * the format loadtest/check-invariant --keys reads, where STATUS is the HTTP status (0:
 * no HTTP answer), RESULT the kind's name (answer_kind_name; "-" for ANSWER_TRANSPORT),
 * ORDER_ID and REPLAYED come from info (0 and false when it is NULL or the answer is no
 * deduction) and CURL_EXIT is libcurl's result code, the same number as curl(1)'s exit
 * status (0 ok, 7 refused, 28 timed out, 52 empty reply, 56 reset).
 * A transport error is written as STATUS 0 whatever status was passed, and an HTTP
 * answer (kind other than ANSWER_TRANSPORT) must have a status of 100..999.
 * Returns the line's length, or -1 (buf untouched) if the key is not 1..ANSWER_KEY_MAX
 * of [A-Za-z0-9_-] (a space or a newline in it would break the line apart), the kind or
 * status is out of range, curl_code is negative, or the line does not fit. */
int answer_key_line(char *buf, size_t len, const char *key, long status, answer_kind kind,
                    const answer_info *info, int curl_code);

#endif
