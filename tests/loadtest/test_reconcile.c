/* Tests of loadtest/reconcile's pure parts: the mysql:// URL and the comparison of
 * answered order ids with orders rows: the cases shared with lab/ledger.py
 * (tests/lab/ledger_cases.json, whose path is RECONCILE_CASES), and a randomised check
 * against a brute-force count. (reconcile_fetch runs against MariaDB in
 * stockload_nginx.sh.) */
#include <cjson/cJSON.h>

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

/* ids_of: the JSON array of numbers a as a malloc'd array (NULL when empty). */
static uint64_t *ids_of(const cJSON *a, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(a);
    uint64_t *ids = *n ? malloc(*n * sizeof(*ids)) : NULL;
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) ids[i++] = (uint64_t)e->valuedouble;
    return ids;
}

static long long int_of(const cJSON *c, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    if (!cJSON_IsNumber(v)) CHECK_FAIL_("case without a number %s", key);
    return (long long)v->valuedouble;
}

static void check_examples(const char *name, const char *kind, const cJSON *want,
                           const uint64_t *got, size_t n_got) {
    if ((size_t)cJSON_GetArraySize(want) != n_got)
        CHECK_FAIL_("%s: %s examples: expected %d, got %zu", name, kind, cJSON_GetArraySize(want),
                    n_got);
    for (size_t i = 0; i < n_got; i++) {
        uint64_t w = (uint64_t)cJSON_GetArrayItem(want, (int)i)->valuedouble;
        if (w != got[i])
            CHECK_FAIL_("%s: %s example %zu: expected %" PRIu64 ", got %" PRIu64, name, kind, i, w,
                        got[i]);
    }
}

static void test_the_shared_cases(void) {
    FILE *f = fopen(RECONCILE_CASES, "rb");
    if (!f) CHECK_FAIL_("cannot open %s", RECONCILE_CASES);
    static char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    cJSON *doc = cJSON_Parse(buf);
    if (!doc) CHECK_FAIL_("%s is not JSON", RECONCILE_CASES);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(doc, "reconcile"), *c;
    CHECK(cJSON_GetArraySize(cases) > 0);
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring;
        size_t na, nr;
        uint64_t *answers = ids_of(cJSON_GetObjectItemCaseSensitive(c, "answers"), &na);
        uint64_t *rows = ids_of(cJSON_GetObjectItemCaseSensitive(c, "rows"), &nr);
        reconcile_report r;
        reconcile_compare(answers, na, rows, nr, &r);
        if (r.answers != na || r.rows != nr ||
            (long long)r.missing_rows != int_of(c, "missing_rows") ||
            (long long)r.unanswered_rows != int_of(c, "unanswered_rows") ||
            (long long)r.duplicate_answers != int_of(c, "duplicate_answers") ||
            r.ok != cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "ok")))
            CHECK_FAIL_("%s: expected missing %lld unanswered %lld duplicate %lld, got %zu %zu %zu "
                        "(ok %d)",
                        name, int_of(c, "missing_rows"), int_of(c, "unanswered_rows"),
                        int_of(c, "duplicate_answers"), r.missing_rows, r.unanswered_rows,
                        r.duplicate_answers, r.ok);
        check_examples(name, "missing", cJSON_GetObjectItemCaseSensitive(c, "missing_examples"),
                       r.missing_examples, r.n_missing_examples);
        check_examples(name, "unanswered",
                       cJSON_GetObjectItemCaseSensitive(c, "unanswered_examples"),
                       r.unanswered_examples, r.n_unanswered_examples);
        free(answers);
        free(rows);
    }
    printf("ok: %d shared cases of tests/lab/ledger_cases.json\n", cJSON_GetArraySize(cases));
    cJSON_Delete(doc);
}

static void test_sorts_in_place(void) {
    uint64_t answers[] = {5, 3, 9, 1}, rows[] = {9, 5, 3, 1};
    reconcile_report r;
    reconcile_compare(answers, 4, rows, 4, &r);
    CHECK(r.ok);
    CHECK_INT_EQ(1, answers[0]);
    CHECK_INT_EQ(9, answers[3]);
    CHECK_INT_EQ(1, rows[0]);
    puts("ok: both arrays are sorted in place");
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
    test_the_shared_cases();
    test_sorts_in_place();
    test_random_sets_match_a_brute_force_count();
    return 0;
}
