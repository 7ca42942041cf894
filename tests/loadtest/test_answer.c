/* Tests of loadtest/answer: every answer of the HTTP contract maps to its kind, and
 * anything off-contract (a 200 that is not a well-formed deduction, odd statuses,
 * bodies that are not JSON) is counted as such rather than guessed. */
#include "answer.h"
#include "check.h"

#include <stdbool.h>

typedef struct {
    long status;
    const char *body;
    answer_kind kind;
    uint64_t order_id;
    bool replayed;
} example;

static const example examples[] = {
    /* Deductions. */
    {200,
     "{\"result\":\"deducted\",\"id\":1,\"stock\":41,\"order_id\":977,\"instance\":\"stockd-1\"}",
     ANSWER_DEDUCTED, 977, false},
    {200, "{\"result\":\"deducted\",\"order_id\":5,\"replayed\":true}", ANSWER_DEDUCTED, 5, true},
    {200, "{\"result\":\"deducted\",\"order_id\":5,\"replayed\":false}", ANSWER_DEDUCTED, 5, false},
    {200, "{\"result\":\"deducted\",\"order_id\":9007199254740992}", ANSWER_DEDUCTED,
     9007199254740992ULL, false},
    {200, " {\"order_id\": 12, \"result\": \"deducted\"} \n", ANSWER_DEDUCTED, 12, false},
    /* A 200 that is not a usable deduction. */
    {200, "{\"result\":\"deducted\"}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order_id\":0}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order_id\":-5}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order_id\":1.5}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order_id\":\"977\"}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order_id\":1e300}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"ok\",\"id\":1,\"stock\":41}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order_id\":97", ANSWER_UNEXPECTED, 0, false},
    {200, "hello", ANSWER_UNEXPECTED, 0, false},
    {200, "", ANSWER_UNEXPECTED, 0, false},
    {200, "[977]", ANSWER_UNEXPECTED, 0, false},
    {201, "{\"result\":\"deducted\",\"order_id\":977}", ANSWER_UNEXPECTED, 0, false},
    /* Sold out: the status decides. */
    {409, "{\"result\":\"sold_out\",\"id\":1,\"stock\":0,\"instance\":\"stockd-1\"}",
     ANSWER_SOLD_OUT, 0, false},
    {409, "", ANSWER_SOLD_OUT, 0, false},
    /* 503 by result. */
    {503, "{\"result\":\"lock_timeout\",\"id\":1,\"message\":\"x\"}", ANSWER_LOCK_TIMEOUT, 0,
     false},
    {503, "{\"result\":\"lock_lost\",\"id\":1,\"message\":\"x\"}", ANSWER_LOCK_LOST, 0, false},
    {503, "{\"result\":\"unavailable\",\"message\":\"x\"}", ANSWER_UNAVAILABLE, 0, false},
    {503, "{\"result\":\"overloaded\",\"message\":\"x\"}", ANSWER_OVERLOADED, 0, false},
    {503, "{\"result\":\"maintenance\"}", ANSWER_OTHER_503, 0, false},
    {503, "{\"result\":5}", ANSWER_OTHER_503, 0, false},
    {503, "<html><body>503 Service Temporarily Unavailable</body></html>", ANSWER_OTHER_503, 0,
     false},
    {503, "", ANSWER_OTHER_503, 0, false},
    /* Other 5xx, whatever the body says. */
    {500, "{\"result\":\"unknown\",\"message\":\"x\"}", ANSWER_OTHER_5XX, 0, false},
    {500, "{\"result\":\"deducted\",\"order_id\":977}", ANSWER_OTHER_5XX, 0, false},
    {502, "<html>bad gateway</html>", ANSWER_OTHER_5XX, 0, false},
    {504, "", ANSWER_OTHER_5XX, 0, false},
    {599, "", ANSWER_OTHER_5XX, 0, false},
    /* Client errors. */
    {400, "{\"result\":\"bad_request\",\"message\":\"x\"}", ANSWER_HTTP_4XX, 0, false},
    {404, "{\"result\":\"not_found\",\"id\":7,\"message\":\"x\"}", ANSWER_HTTP_4XX, 0, false},
    {405, "{\"result\":\"method_not_allowed\",\"message\":\"x\"}", ANSWER_HTTP_4XX, 0, false},
    {499, "", ANSWER_HTTP_4XX, 0, false},
    /* Off-contract statuses and no answer at all. */
    {100, "", ANSWER_UNEXPECTED, 0, false},
    {204, "", ANSWER_UNEXPECTED, 0, false},
    {302, "", ANSWER_UNEXPECTED, 0, false},
    {600, "", ANSWER_UNEXPECTED, 0, false},
    {0, "", ANSWER_TRANSPORT, 0, false},
    {-1, "", ANSWER_TRANSPORT, 0, false},
};

static void test_contract_examples(void) {
    for (size_t i = 0; i < sizeof(examples) / sizeof(examples[0]); i++) {
        const example *e = &examples[i];
        answer_info info = {.order_id = 123456, .replayed = true}; /* must be reset */
        answer_kind kind = answer_classify(e->status, e->body, strlen(e->body), &info);
        if (kind != e->kind || info.order_id != e->order_id || info.replayed != e->replayed)
            CHECK_FAIL_("%ld %s: expected %s order %" PRIu64 " replayed %d, got %s order %" PRIu64
                        " replayed %d",
                        e->status, e->body, answer_kind_name(e->kind), e->order_id, e->replayed,
                        answer_kind_name(kind), info.order_id, info.replayed);
    }
    printf("ok: %zu contract examples classified\n", sizeof(examples) / sizeof(examples[0]));
}

static void test_body_is_read_only_up_to_len(void) {
    /* The body buffer is not NUL-terminated: only len bytes count. */
    const char buf[] = "{\"result\":\"lock_timeout\"}trailing garbage";
    CHECK_INT_EQ(ANSWER_LOCK_TIMEOUT, answer_classify(503, buf, 25, NULL));
    const char ded[] = "{\"result\":\"deducted\",\"order_id\":42}{\"order_id\":7";
    answer_info info;
    CHECK_INT_EQ(ANSWER_DEDUCTED, answer_classify(200, ded, 35, &info));
    CHECK_INT_EQ(42, info.order_id);
    /* Cut inside the JSON: no longer a deduction. */
    CHECK_INT_EQ(ANSWER_UNEXPECTED, answer_classify(200, ded, 20, &info));
    CHECK_INT_EQ(0, info.order_id);
    CHECK_INT_EQ(ANSWER_OTHER_503, answer_classify(503, NULL, 0, NULL));
    puts("ok: the body is read only up to len, info may be NULL");
}

static void test_names_are_distinct(void) {
    for (int a = 0; a < ANSWER_KINDS; a++) {
        const char *na = answer_kind_name((answer_kind)a);
        CHECK(strcmp(na, "invalid") != 0);
        for (int b = a + 1; b < ANSWER_KINDS; b++)
            CHECK(strcmp(na, answer_kind_name((answer_kind)b)) != 0);
    }
    CHECK_STR_EQ("deducted", answer_kind_name(ANSWER_DEDUCTED));
    CHECK_STR_EQ("transport_error", answer_kind_name(ANSWER_TRANSPORT));
    CHECK_STR_EQ("invalid", answer_kind_name(ANSWER_KINDS));
    puts("ok: kind names are distinct");
}

static void test_ambiguous_kinds_are_those_that_may_have_deducted(void) {
    /* stockd's refusals are definite: nothing was deducted. */
    answer_kind definite[] = {ANSWER_DEDUCTED,  ANSWER_SOLD_OUT,    ANSWER_LOCK_TIMEOUT,
                              ANSWER_LOCK_LOST, ANSWER_UNAVAILABLE, ANSWER_OVERLOADED,
                              ANSWER_HTTP_4XX};
    answer_kind open[] = {ANSWER_OTHER_503, ANSWER_OTHER_5XX, ANSWER_UNEXPECTED, ANSWER_TRANSPORT};
    for (size_t i = 0; i < sizeof(definite) / sizeof(definite[0]); i++)
        CHECK(!answer_kind_ambiguous(definite[i]));
    for (size_t i = 0; i < sizeof(open) / sizeof(open[0]); i++)
        CHECK(answer_kind_ambiguous(open[i]));
    CHECK_INT_EQ(ANSWER_KINDS,
                 sizeof(definite) / sizeof(definite[0]) + sizeof(open) / sizeof(open[0]));
    puts("ok: ambiguous kinds");
}

int main(void) {
    test_contract_examples();
    test_body_is_read_only_up_to_len();
    test_names_are_distinct();
    test_ambiguous_kinds_are_those_that_may_have_deducted();
    return 0;
}
