/* answer: what one stockd answer means, from its HTTP status and JSON body.
 *
 * stockload counts answers by kind; this is the one place that maps the HTTP contract
 * (notes: /stock/reduce answers 200 deducted, 409 sold_out, 503 lock_timeout | lock_lost
 * | unavailable | overloaded, 500 unknown, 4xx for bad requests) onto those kinds. The
 * status decides first; the body only refines a 200 (is it really a deduction, with an
 * order id?) and a 503 (which kind of refusal). Anything that does not fit the contract
 * is ANSWER_UNEXPECTED rather than guessed. Pure functions; thread-safe. */
#ifndef ANSWER_H
#define ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum answer_kind {
    ANSWER_DEDUCTED = 0, /* 200, result "deducted", with a positive integer order_id */
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
    uint64_t order_id; /* orders.id of the deduction */
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

#endif
