/* Tests of loadtest/reconcile's pure parts: the mysql:// URL and the comparison of
 * answered order ids with orders rows, including a randomised check against a
 * brute-force count. (reconcile_fetch runs against MariaDB in stockload_nginx.sh.) */
#include "check.h"
#include "reconcile.h"

static void test_url_without_password_keeps_the_environments(void) {
    reconcile_db db;
    memset(&db, 0, sizeof(db));
    strcpy(db.password, "from-env");
    CHECK_INT_EQ(RECONCILE_OK, reconcile_parse_url(&db, "mysql://stockd@127.0.0.1:25306/t_shop"));
    CHECK_STR_EQ("stockd", db.user);
    CHECK_STR_EQ("from-env", db.password);
    CHECK_STR_EQ("127.0.0.1", db.host);
    CHECK_INT_EQ(25306, db.port);
    CHECK_STR_EQ("t_shop", db.database);

    /* One parser with stockd's (db/stockdb_url.c): '@' in a password is %40, and a raw
     * second '@' is refused, as stockd refuses it. */
    CHECK_INT_EQ(RECONCILE_OK, reconcile_parse_url(&db, "mysql://u:p%40ss%25@localhost/db"));
    CHECK_STR_EQ("u", db.user);
    CHECK_STR_EQ("p@ss%", db.password);
    CHECK_STR_EQ("localhost", db.host);
    CHECK_INT_EQ(3306, db.port);
    CHECK_STR_EQ("db", db.database);
    puts("ok: mysql:// URLs");
}

static void test_bad_urls(void) {
    const char *bad[] = {
        "stockd@127.0.0.1/db",
        "mysql://127.0.0.1:3306/db",
        "mysql://stockd@127.0.0.1",
        "mysql://@127.0.0.1/db",
        "mysql://stockd@/db",
        "mysql://stockd@:3306/db",
        "mysql://stockd@h:0/db",
        "mysql://stockd@h:65536/db",
        "mysql://stockd@h:3x/db",
        "mysql://stockd@h:/db",
        "mysql://stockd@h/",
        "mysql://stockd@h/db/x",
        "mysql://stockd@h/db?ssl=1",
        "mysql://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa@h/db",
        "mysql://u:p@ss@localhost/db",
        "mysql://u:p%4@localhost/db",
        "mysql://u:p%00@localhost/db",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        reconcile_db db;
        memset(&db, 0, sizeof(db));
        if (reconcile_parse_url(&db, bad[i]) != RECONCILE_ERR_URL)
            CHECK_FAIL_("%s: expected RECONCILE_ERR_URL", bad[i]);
    }
    puts("ok: bad mysql:// URLs are refused");
}

static void test_same_ids_in_any_order_reconcile(void) {
    uint64_t answers[] = {5, 3, 9, 1}, rows[] = {1, 3, 5, 9};
    reconcile_report r;
    reconcile_compare(answers, 4, rows, 4, &r);
    CHECK(r.ok);
    CHECK_INT_EQ(4, r.answers);
    CHECK_INT_EQ(4, r.rows);
    CHECK_INT_EQ(0, r.missing_rows + r.unanswered_rows + r.duplicate_answers);
    CHECK_INT_EQ(1, answers[0]); /* sorted in place */
    CHECK_INT_EQ(9, answers[3]);

    reconcile_compare(NULL, 0, NULL, 0, &r);
    CHECK(r.ok);
    puts("ok: the same ids in any order reconcile; nothing vs nothing is ok");
}

static void test_each_kind_of_mismatch(void) {
    reconcile_report r;
    /* An answered order the table does not have. */
    uint64_t a1[] = {1, 2, 3}, r1[] = {1, 3};
    reconcile_compare(a1, 3, r1, 2, &r);
    CHECK(!r.ok);
    CHECK_INT_EQ(1, r.missing_rows);
    CHECK_INT_EQ(1, r.n_missing_examples);
    CHECK_INT_EQ(2, r.missing_examples[0]);
    CHECK_INT_EQ(0, r.unanswered_rows + r.duplicate_answers);

    /* A row nobody was told about: the oversell signature. */
    uint64_t a2[] = {1, 3}, r2[] = {1, 2, 3, 4};
    reconcile_compare(a2, 2, r2, 4, &r);
    CHECK(!r.ok);
    CHECK_INT_EQ(2, r.unanswered_rows);
    CHECK_INT_EQ(2, r.unanswered_examples[0]);
    CHECK_INT_EQ(4, r.unanswered_examples[1]);
    CHECK_INT_EQ(0, r.missing_rows + r.duplicate_answers);

    /* Two answers naming one order. */
    uint64_t a3[] = {7, 7, 7, 8}, r3[] = {7, 8};
    reconcile_compare(a3, 4, r3, 2, &r);
    CHECK(!r.ok);
    CHECK_INT_EQ(2, r.duplicate_answers);
    CHECK_INT_EQ(0, r.missing_rows + r.unanswered_rows);

    /* No rows at all, and no answers at all. */
    uint64_t a4[] = {4, 4};
    reconcile_compare(a4, 2, NULL, 0, &r);
    CHECK_INT_EQ(1, r.missing_rows);
    CHECK_INT_EQ(1, r.duplicate_answers);
    uint64_t r5[] = {10, 11};
    reconcile_compare(NULL, 0, r5, 2, &r);
    CHECK_INT_EQ(2, r.unanswered_rows);
    puts("ok: missing rows, unanswered rows and duplicate answers");
}

static void test_examples_are_the_smallest_few(void) {
    uint64_t rows[100];
    for (int i = 0; i < 100; i++)
        rows[i] = (uint64_t)(100 - i);
    reconcile_report r;
    reconcile_compare(NULL, 0, rows, 100, &r);
    CHECK_INT_EQ(100, r.unanswered_rows);
    CHECK_INT_EQ(RECONCILE_EXAMPLES, r.n_unanswered_examples);
    for (int i = 0; i < RECONCILE_EXAMPLES; i++)
        CHECK_INT_EQ(i + 1, r.unanswered_examples[i]);
    puts("ok: examples are capped and the smallest ids");
}

static uint64_t rng_state = 42;
static uint64_t rng(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void test_random_sets_match_a_brute_force_count(void) {
    enum { N = 600 };
    for (int round = 0; round < 50; round++) {
        uint64_t rows[N], answers[2 * N];
        size_t nr = 0, na = 0;
        /* Rows: distinct ids 1..N, each present with probability 3/4. Answers: most
         * rows, some twice, plus ids that have no row. */
        for (uint64_t id = 1; id <= N; id++) {
            if (rng() % 4 == 0) continue;
            rows[nr++] = id;
            unsigned dice = (unsigned)(rng() % 10);
            if (dice > 0) answers[na++] = id;
            if (dice == 9) answers[na++] = id;
        }
        for (int k = 0; k < 20; k++)
            answers[na++] = N + 1 + rng() % 50;
        /* Shuffle both, to make the sorting do work. */
        for (size_t i = na; i > 1; i--) {
            size_t j = rng() % i;
            uint64_t t = answers[i - 1];
            answers[i - 1] = answers[j];
            answers[j] = t;
        }

        size_t missing = 0, unanswered = 0, dup = 0;
        for (size_t i = 0; i < na; i++) {
            bool earlier = false, has_row = false;
            for (size_t j = 0; j < i; j++)
                if (answers[j] == answers[i]) earlier = true;
            for (size_t j = 0; j < nr; j++)
                if (rows[j] == answers[i]) has_row = true;
            if (earlier)
                dup++;
            else if (!has_row)
                missing++;
        }
        for (size_t j = 0; j < nr; j++) {
            bool named = false;
            for (size_t i = 0; i < na; i++)
                if (answers[i] == rows[j]) named = true;
            if (!named) unanswered++;
        }

        reconcile_report r;
        reconcile_compare(answers, na, rows, nr, &r);
        CHECK_INT_EQ(na, r.answers);
        CHECK_INT_EQ(nr, r.rows);
        CHECK_INT_EQ(missing, r.missing_rows);
        CHECK_INT_EQ(unanswered, r.unanswered_rows);
        CHECK_INT_EQ(dup, r.duplicate_answers);
        CHECK_INT_EQ(missing + unanswered + dup == 0, r.ok);
    }
    puts("ok: 50 random rounds match a brute-force count");
}

int main(void) {
    test_url_without_password_keeps_the_environments();
    test_bad_urls();
    test_same_ids_in_any_order_reconcile();
    test_each_kind_of_mismatch();
    test_examples_are_the_smallest_few();
    test_random_sets_match_a_brute_force_count();
    return 0;
}
