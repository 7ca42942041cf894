/* Tests of loadtest/loadopts: the two modes and their defaults, every option, and
 * refusal (with a reason) of anything ambiguous, out of range or malformed. */
#include "check.h"
#include "loadopts.h"

#define URL "http://127.0.0.1:8080/stock/reduce?id=1"

/* Parses a NULL-terminated argument list (argv[0] is added). */
static int parse_list(loadopts *o, char *err, size_t errlen, char **args) {
    char *argv[32] = {"stockload"};
    int argc = 1;
    while (args[argc - 1]) {
        CHECK_INT_LT(argc, 31);
        argv[argc] = args[argc - 1];
        argc++;
    }
    return loadopts_parse(o, argc, argv, err, errlen);
}
#define PARSE(o, err, ...) parse_list(o, err, sizeof(err), (char *[]){__VA_ARGS__, NULL})

/* The arguments must be refused with a reason containing `reason`. */
#define REFUSED(reason, ...)                                                                       \
    do {                                                                                           \
        loadopts o_;                                                                               \
        char err_[256];                                                                            \
        int rc_ = PARSE(&o_, err_, __VA_ARGS__);                                                   \
        if (rc_ != LOADOPTS_USAGE || !strstr(err_, reason))                                        \
            CHECK_FAIL_("%s: expected a usage error about \"%s\", got rc %d \"%s\"", #__VA_ARGS__, \
                        reason, rc_, err_);                                                        \
    } while (0)

static void test_threads_and_loops_with_defaults(void) {
    loadopts o;
    char err[256];
    CHECK_INT_EQ(LOADOPTS_RUN, PARSE(&o, err, "--url", URL, "--threads", "50", "--loops", "10"));
    CHECK_STR_EQ(URL, o.url);
    CHECK_INT_EQ(LOADOPTS_LOOPS, o.mode);
    CHECK_INT_EQ(50, o.concurrency);
    CHECK_INT_EQ(10, o.loops);
    CHECK_INT_EQ(LOADOPTS_DEFAULT_TIMEOUT_MS, o.timeout_ms);
    CHECK(!o.post && !o.idempotency && !o.json && o.progress);
    CHECK(o.mysql_url == NULL);
    CHECK_STR_EQ("", err);

    /* JMeter's default of one loop; --opt=value works too. */
    CHECK_INT_EQ(LOADOPTS_RUN, PARSE(&o, err, "--threads=4", "--url=" URL));
    CHECK_INT_EQ(4, o.concurrency);
    CHECK_INT_EQ(1, o.loops);
    CHECK_STR_EQ(URL, o.url);
    puts("ok: --threads/--loops, loops default to 1");
}

static void test_duration_and_concurrency(void) {
    loadopts o;
    char err[256];
    CHECK_INT_EQ(LOADOPTS_RUN,
                 PARSE(&o, err, "--duration", "2.5", "--concurrency", "8", "--url", URL));
    CHECK_INT_EQ(LOADOPTS_DURATION, o.mode);
    CHECK_INT_EQ(8, o.concurrency);
    CHECK(o.duration_s == 2.5);
    CHECK_INT_EQ(LOADOPTS_RUN,
                 PARSE(&o, err, "--duration", "60", "--concurrency", "1", "--url", URL));
    CHECK(o.duration_s == 60);
    puts("ok: --duration/--concurrency");
}

static void test_every_option(void) {
    loadopts o;
    char err[256];
    CHECK_INT_EQ(LOADOPTS_RUN,
                 PARSE(&o, err, "--url", "https://localhost/x", "--threads", "10000", "--loops",
                       "10000", "--method", "POST", "--idempotency", "--timeout-ms", "600000",
                       "--json", "--no-progress", "--mysql", "mysql://stockd@127.0.0.1:3306/shop",
                       "--product", "2147483647", "--keys-out", "/tmp/k.log"));
    CHECK(o.post && o.idempotency && o.json && !o.progress);
    CHECK_STR_EQ("/tmp/k.log", o.keys_out);
    CHECK_INT_EQ(10000, o.concurrency);
    CHECK_INT_EQ(10000, o.loops); /* exactly the 1e8 request limit */
    CHECK_INT_EQ(600000, o.timeout_ms);
    CHECK_STR_EQ("mysql://stockd@127.0.0.1:3306/shop", o.mysql_url);
    CHECK_INT_EQ(2147483647, o.product);
    CHECK_INT_EQ(LOADOPTS_RUN, PARSE(&o, err, "--url", URL, "--threads", "1", "--method", "GET"));
    CHECK(!o.post);
    CHECK(o.keys_out == NULL);
    puts("ok: every option");
}

static void test_help_wins(void) {
    loadopts o;
    char err[256];
    CHECK_INT_EQ(LOADOPTS_HELP, PARSE(&o, err, "--help"));
    CHECK_INT_EQ(LOADOPTS_HELP, PARSE(&o, err, "--url", URL, "-h"));
    CHECK_INT_EQ(LOADOPTS_HELP, PARSE(&o, err, "--threads", "3", "--duration", "1", "--help"));
    /* --version is answered like --help, whatever else is on the line. */
    CHECK_INT_EQ(LOADOPTS_VERSION, PARSE(&o, err, "--version"));
    CHECK_INT_EQ(LOADOPTS_VERSION, PARSE(&o, err, "--url", URL, "--version"));
    CHECK(strstr(loadopts_usage, "--version") != NULL);
    CHECK(strstr(loadopts_usage, "--threads T") && strstr(loadopts_usage, "--mysql URL") &&
          strstr(loadopts_usage, "STOCKD_MYSQL_PASSWORD") &&
          strstr(loadopts_usage, "Exit status") && strstr(loadopts_usage, "--keys-out FILE") &&
          strstr(loadopts_usage, "KEY STATUS RESULT ORDER_ID REPLAYED CURL_EXIT"));
    puts("ok: --help");
}

static void test_modes_are_exclusive_and_complete(void) {
    REFUSED("--url is required", "--threads", "2");
    REFUSED("pick a mode", "--url", URL);
    REFUSED("exclude each other", "--url", URL, "--threads", "2", "--duration", "1",
            "--concurrency", "2");
    REFUSED("--loops needs --threads", "--url", URL, "--loops", "2");
    REFUSED("--concurrency needs --duration", "--url", URL, "--concurrency", "2");
    REFUSED("--duration needs --concurrency", "--url", URL, "--duration", "2");
    REFUSED("--concurrency goes with --duration", "--url", URL, "--threads", "2", "--concurrency",
            "2");
    REFUSED("--loops goes with --threads", "--url", URL, "--duration", "1", "--concurrency", "2",
            "--loops", "3");
    puts("ok: modes are exclusive and complete");
}

static void test_numbers_are_strict_and_bounded(void) {
    REFUSED("--threads must be", "--url", URL, "--threads", "0");
    REFUSED("--threads must be", "--url", URL, "--threads", "10001");
    REFUSED("--threads must be", "--url", URL, "--threads", "-1");
    REFUSED("--threads must be", "--url", URL, "--threads", "5x");
    REFUSED("--threads must be", "--url", URL, "--threads", " 5");
    REFUSED("--threads must be", "--url", URL, "--threads", "");
    REFUSED("--threads must be", "--url", URL, "--threads=");
    REFUSED("--loops must be", "--url", URL, "--threads", "1", "--loops", "0");
    REFUSED("--loops must be", "--url", URL, "--threads", "1", "--loops",
            "99999999999999999999999");
    REFUSED("at most", "--url", URL, "--threads", "10000", "--loops", "10001");
    REFUSED("--concurrency must be", "--url", URL, "--duration", "1", "--concurrency", "0");
    REFUSED("--duration must be", "--url", URL, "--duration", "0.05", "--concurrency", "1");
    REFUSED("--duration must be", "--url", URL, "--duration", "3601", "--concurrency", "1");
    REFUSED("--duration must be", "--url", URL, "--duration", "1e3", "--concurrency", "1");
    REFUSED("--duration must be", "--url", URL, "--duration", "1..2", "--concurrency", "1");
    REFUSED("--duration must be", "--url", URL, "--duration", "nan", "--concurrency", "1");
    REFUSED("--duration must be", "--url", URL, "--duration", "-1", "--concurrency", "1");
    REFUSED("--timeout-ms must be", "--url", URL, "--threads", "1", "--timeout-ms", "0");
    REFUSED("--timeout-ms must be", "--url", URL, "--threads", "1", "--timeout-ms", "600001");
    REFUSED("--product must be", "--url", URL, "--threads", "1", "--mysql", "mysql://u@h/d",
            "--product", "0");
    REFUSED("--product must be", "--url", URL, "--threads", "1", "--mysql", "mysql://u@h/d",
            "--product", "2147483648");
    puts("ok: numbers are strict and bounded");
}

static void test_malformed_arguments(void) {
    REFUSED("--method must be GET or POST", "--url", URL, "--threads", "1", "--method", "PUT");
    REFUSED("--method must be GET or POST", "--url", URL, "--threads", "1", "--method", "get");
    REFUSED("--url must start with http", "--url", "ftp://127.0.0.1/", "--threads", "1");
    REFUSED("--url must start with http", "--url", "127.0.0.1:8080/stock", "--threads", "1");
    REFUSED("--mysql must be", "--url", URL, "--threads", "1", "--mysql", "http://x/", "--product",
            "1");
    REFUSED("go together", "--url", URL, "--threads", "1", "--mysql", "mysql://u@h/d");
    REFUSED("go together", "--url", URL, "--threads", "1", "--product", "1");
    REFUSED("--keys-out needs --idempotency", "--url", URL, "--threads", "1", "--keys-out", "k");
    REFUSED("--keys-out needs a file name", "--url", URL, "--threads", "1", "--idempotency",
            "--keys-out", "");
    REFUSED("--keys-out needs a value", "--url", URL, "--threads", "1", "--idempotency",
            "--keys-out");
    REFUSED("unknown option '--foo'", "--url", URL, "--threads", "1", "--foo");
    REFUSED("unknown option '--thread'", "--url", URL, "--thread", "1");
    REFUSED("unexpected argument 'extra'", "--url", URL, "--threads", "1", "extra");
    REFUSED("unexpected argument '-t'", "--url", URL, "-t", "1");
    REFUSED("--json takes no value", "--url", URL, "--threads", "1", "--json=1");
    REFUSED("--url needs a value", "--threads", "1", "--url");
    REFUSED("--threads given twice", "--url", URL, "--threads", "1", "--threads", "2");
    puts("ok: malformed arguments are refused with a reason");
}

#define URL_ID "http://127.0.0.1:8080/stock/reduce?id={id}"

static void test_products_spread_the_load(void) {
    loadopts o;
    char err[256];
    CHECK_INT_EQ(LOADOPTS_RUN,
                 PARSE(&o, err, "--url", URL_ID, "--threads", "4", "--products", "1-100"));
    CHECK_INT_EQ(1, o.products_lo);
    CHECK_INT_EQ(100, o.products_hi);
    CHECK_INT_EQ(LOADOPTS_RUN, PARSE(&o, err, "--url", URL_ID, "--threads", "4", "--products=7-7"));
    CHECK_INT_EQ(7, o.products_lo);
    CHECK_INT_EQ(7, o.products_hi);
    CHECK_INT_EQ(LOADOPTS_RUN, PARSE(&o, err, "--url", URL, "--threads", "4"));
    CHECK_INT_EQ(0, o.products_lo);
    REFUSED("--products must be A-B", "--url", URL_ID, "--threads", "1", "--products", "5");
    REFUSED("--products must be A-B", "--url", URL_ID, "--threads", "1", "--products", "-5");
    REFUSED("1 <= A <= B", "--url", URL_ID, "--threads", "1", "--products", "9-3");
    REFUSED("1 <= A <= B", "--url", URL_ID, "--threads", "1", "--products", "0-3");
    REFUSED("1 <= A <= B", "--url", URL_ID, "--threads", "1", "--products", "1-3x");
    REFUSED("1 <= A <= B", "--url", URL_ID, "--threads", "1", "--products", "1--3");
    REFUSED("{id} exactly once", "--url", URL, "--threads", "1", "--products", "1-3");
    REFUSED("{id} exactly once", "--url", URL_ID "&x={id}", "--threads", "1", "--products", "1-3");
    REFUSED("give --products", "--url", URL_ID, "--threads", "1");
    REFUSED("exclude each other", "--url", URL_ID, "--threads", "1", "--products", "1-3", "--mysql",
            "mysql://u@h/d", "--product", "1");
    puts("ok: --products takes A-B and needs {id} once in the URL");
}

static void test_users_name_a_customer_per_request(void) {
    loadopts o;
    char err[256];
    CHECK_INT_EQ(LOADOPTS_RUN, PARSE(&o, err, "--url", URL, "--threads", "4", "--users", "1000"));
    CHECK_INT_EQ(1000, o.users);
    CHECK_INT_EQ(LOADOPTS_RUN, PARSE(&o, err, "--url", URL, "--threads", "4"));
    CHECK_INT_EQ(0, o.users);
    REFUSED("--users must be 1..1000000", "--url", URL, "--threads", "1", "--users", "0");
    REFUSED("--users must be 1..1000000", "--url", URL, "--threads", "1", "--users", "1000001");
    REFUSED("--users must be 1..1000000", "--url", URL, "--threads", "1", "--users", "-3");
    puts("ok: --users takes 1..1000000");
}

int main(void) {
    test_products_spread_the_load();
    test_users_name_a_customer_per_request();
    test_threads_and_loops_with_defaults();
    test_duration_and_concurrency();
    test_every_option();
    test_help_wins();
    test_modes_are_exclusive_and_complete();
    test_numbers_are_strict_and_bounded();
    test_malformed_arguments();
    return 0;
}
