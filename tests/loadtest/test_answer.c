/* Tests of loadtest/answer: every answer of the HTTP contract maps to its kind, and
 * anything off-contract (a 200 that is not a well-formed deduction, odd statuses,
 * bodies that are not JSON) is counted as such rather than guessed; the keys-file line of
 * a request says what check-invariant needs and cannot be broken apart by its key. */
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
    /* Mode redis-stock names the order by its key; an empty or non-string one is no order. */
    {200, "{\"result\":\"deducted\",\"order\":\"k-1\"}", ANSWER_DEDUCTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order\":\"k-1\",\"replayed\":true}", ANSWER_DEDUCTED, 0,
     true},
    {200, "{\"result\":\"deducted\",\"order\":\"\"}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order\":7}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order_id\":0}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order_id\":-5}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order_id\":1.5}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order_id\":\"977\"}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"deducted\",\"order_id\":1e300}", ANSWER_UNEXPECTED, 0, false},
    {200, "{\"result\":\"ok\",\"id\":1,\"stock\":41}", ANSWER_UNEXPECTED, 0, false},
    /* A reservation takes a unit with its order (docs/orders.md). */
    {200,
     "{\"result\":\"reserved\",\"order_id\":978,\"expires_at\":\"2026-12-07 17:00:01.000000\"}",
     ANSWER_DEDUCTED, 978, false},
    {200, "{\"result\":\"reserved\"}", ANSWER_UNEXPECTED, 0, false},
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

/* The line of each kind of finished request, exactly as check-invariant reads it. */
static void test_key_lines(void) {
    char buf[ANSWER_KEY_LINE_MAX];
    answer_info ded = {.order_id = 977, .replayed = false};
    answer_info rep = {.order_id = 5, .replayed = true};

    int n = answer_key_line(buf, sizeof(buf), "k-1", 200, ANSWER_DEDUCTED, &ded, 0);
    CHECK_STR_EQ("k-1 200 deducted 977 false 0\n", buf);
    CHECK_INT_EQ(strlen(buf), n);
    answer_key_line(buf, sizeof(buf), "k_2", 200, ANSWER_DEDUCTED, &rep, 0);
    CHECK_STR_EQ("k_2 200 deducted 5 true 0\n", buf);
    answer_key_line(buf, sizeof(buf), "K3", 409, ANSWER_SOLD_OUT, NULL, 0);
    CHECK_STR_EQ("K3 409 sold_out 0 false 0\n", buf);
    answer_key_line(buf, sizeof(buf), "k4", 503, ANSWER_LOCK_TIMEOUT, NULL, 0);
    CHECK_STR_EQ("k4 503 lock_timeout 0 false 0\n", buf);
    answer_key_line(buf, sizeof(buf), "k5", 500, ANSWER_OTHER_5XX, NULL, 0);
    CHECK_STR_EQ("k5 500 other_5xx 0 false 0\n", buf);
    /* Details of a deduction are not written for any other kind. */
    answer_key_line(buf, sizeof(buf), "k6", 200, ANSWER_UNEXPECTED, &rep, 0);
    CHECK_STR_EQ("k6 200 unexpected 0 false 0\n", buf);
    /* No HTTP answer: status 0 and no result, whatever the caller had. */
    answer_key_line(buf, sizeof(buf), "k7", 0, ANSWER_TRANSPORT, NULL, 28);
    CHECK_STR_EQ("k7 0 - 0 false 28\n", buf);
    answer_key_line(buf, sizeof(buf), "k8", 200, ANSWER_TRANSPORT, &ded, 56);
    CHECK_STR_EQ("k8 0 - 0 false 56\n", buf);

    /* The longest key fits in ANSWER_KEY_LINE_MAX with the longest other fields. */
    char longest[ANSWER_KEY_MAX + 2];
    memset(longest, 'a', ANSWER_KEY_MAX);
    longest[ANSWER_KEY_MAX] = '\0';
    answer_info big = {.order_id = UINT64_MAX, .replayed = false};
    CHECK(answer_key_line(buf, sizeof(buf), longest, 999, ANSWER_DEDUCTED, &big, 2147483647) > 0);
    puts("ok: keys-file lines");
}

static void test_key_lines_refused(void) {
    char buf[ANSWER_KEY_LINE_MAX];
    strcpy(buf, "untouched");
    char too_long[ANSWER_KEY_MAX + 2];
    memset(too_long, 'a', ANSWER_KEY_MAX + 1);
    too_long[ANSWER_KEY_MAX + 1] = '\0';
    const char *bad_keys[] = {NULL, "", "a b", "a\nb", "k\t", "k/1", "k.1", too_long};
    for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++)
        CHECK_INT_EQ(-1,
                     answer_key_line(buf, sizeof(buf), bad_keys[i], 409, ANSWER_SOLD_OUT, NULL, 0));
    CHECK_INT_EQ(-1, answer_key_line(buf, sizeof(buf), "k", 409, ANSWER_KINDS, NULL, 0));
    CHECK_INT_EQ(-1, answer_key_line(buf, sizeof(buf), "k", 0, ANSWER_SOLD_OUT, NULL, 0));
    CHECK_INT_EQ(-1, answer_key_line(buf, sizeof(buf), "k", 1000, ANSWER_UNEXPECTED, NULL, 0));
    CHECK_INT_EQ(-1, answer_key_line(buf, sizeof(buf), "k", 409, ANSWER_SOLD_OUT, NULL, -1));
    /* "k 409 sold_out 0 false 0\n" is 25 bytes: it needs 26 with the NUL. */
    CHECK_INT_EQ(-1, answer_key_line(buf, 25, "k", 409, ANSWER_SOLD_OUT, NULL, 0));
    CHECK_STR_EQ("untouched", buf);
    CHECK_INT_EQ(25, answer_key_line(buf, 26, "k", 409, ANSWER_SOLD_OUT, NULL, 0));
    puts("ok: keys-file lines refused for bad keys, kinds, statuses and short buffers");
}

int main(void) {
    test_contract_examples();
    test_body_is_read_only_up_to_len();
    test_names_are_distinct();
    test_ambiguous_kinds_are_those_that_may_have_deducted();
    test_key_lines();
    test_key_lines_refused();
    return 0;
}
