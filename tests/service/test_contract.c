/* Unit tests of service/contract.c: how requests are routed, how ids and keys are
 * parsed, and how every outcome becomes an HTTP status and a JSON body. Pure logic, no
 * server. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "stockd.h"

static void test_id_parser_accepts_only_canonical_positive_int32(void) {
    static const struct {
        const char *in;
        size_t len; /* 0 = strlen */
        int ok;
        int32_t want;
    } cases[] = {
        {"1", 0, 1, 1},
        {"42", 0, 1, 42},
        {"2147483647", 0, 1, 2147483647},
        {"", 0, 0, 0},
        {"0", 0, 0, 0},
        {"-1", 0, 0, 0},
        {"+1", 0, 0, 0},
        {"abc", 0, 0, 0},
        {"1abc", 0, 0, 0},
        {"1.5", 0, 0, 0},
        {"0x10", 0, 0, 0},
        {"1e3", 0, 0, 0},
        {"007", 0, 0, 0},
        {" 1", 0, 0, 0},
        {"1 ", 0, 0, 0},
        {"2147483648", 0, 0, 0},
        {"9223372036854775808", 0, 0, 0},
        {"99999999999999999999999", 0, 0, 0},
        {"1;DROP TABLE product", 0, 0, 0},
        {"1\0"
         "2",
         3, 0, 0}, /* %00 inside the value */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int32_t got = -7;
        const char *why = NULL;
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].in);
        int rc = stockd_parse_id(cases[i].in, len, &got, &why);
        if (cases[i].ok) {
            CHECK_INT_EQ(0, rc);
            CHECK_INT_EQ(cases[i].want, got);
        } else {
            if (rc != -1) CHECK_FAIL_("id '%s' should be refused", cases[i].in);
            CHECK(why && *why);
            CHECK_INT_EQ(-7, got);
        }
    }
    const char *why = NULL;
    int32_t v;
    CHECK_INT_EQ(-1, stockd_parse_id(NULL, 0, &v, &why));
}

static void test_key_check(void) {
    CHECK_INT_EQ(0, stockd_check_key("abc-DEF_123", 11));
    CHECK_INT_EQ(-1, stockd_check_key("", 0));
    CHECK_INT_EQ(-1, stockd_check_key("a/b", 3));
    CHECK_INT_EQ(-1, stockd_check_key("a b", 3));
    char k[66];
    memset(k, 'k', sizeof(k));
    CHECK_INT_EQ(0, stockd_check_key(k, 64));
    CHECK_INT_EQ(-1, stockd_check_key(k, 65));
}

/* Renders an answer and parses it back, so checks see what a client sees. */
static cJSON *render(const stockd_answer *a) {
    char *s = stockd_answer_json(a, "stockd-1");
    CHECK(s != NULL);
    cJSON *o = cJSON_Parse(s);
    free(s);
    CHECK(o != NULL);
    return o;
}

static const char *str_field(cJSON *o, const char *k) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void test_deducted_answer_has_stock_order_and_instance(void) {
    stockdb_result res = {.outcome = STOCKDB_DEDUCTED, .stock = 41, .order_id = 977};
    stockd_answer a = {.id = 1};
    stockd_answer_from_db(&a, LOCK_OK, STOCKDB_OK, &res);
    CHECK_INT_EQ(200, stockd_answer_status(a.result));
    cJSON *o = render(&a);
    CHECK_STR_EQ("deducted", str_field(o, "result"));
    CHECK_STR_EQ("stockd-1", str_field(o, "instance"));
    CHECK_INT_EQ(1, cJSON_GetObjectItem(o, "id")->valueint);
    CHECK_INT_EQ(41, cJSON_GetObjectItem(o, "stock")->valueint);
    CHECK_INT_EQ(977, (long long)cJSON_GetObjectItem(o, "order_id")->valuedouble);
    CHECK(cJSON_GetObjectItem(o, "replayed") == NULL);
    cJSON_Delete(o);
}

/* Mode redis-stock: the order is named by its key (a string), and a deduction that too
 * few replicas confirmed is a 503 of its own. */
static void test_redis_stock_answers_name_the_order_by_key(void) {
    stockd_answer a = {
        .result = STOCKD_R_DEDUCTED, .id = 1, .has_stock = true, .stock = 9, .order = "i/b00t/7"};
    cJSON *o = render(&a);
    CHECK_STR_EQ("deducted", str_field(o, "result"));
    CHECK_STR_EQ("i/b00t/7", str_field(o, "order"));
    CHECK(cJSON_GetObjectItem(o, "order_id") == NULL);
    cJSON_Delete(o);
    CHECK_INT_EQ(503, stockd_answer_status(STOCKD_R_NOT_REPLICATED));
    CHECK_STR_EQ("not_replicated", stockd_result_name(STOCKD_R_NOT_REPLICATED));
}

static void test_outcome_to_status_table(void) {
    static const struct {
        int lock_rc, rc;
        stockdb_outcome outcome;
        unsigned status;
        const char *result;
    } cases[] = {
        {LOCK_OK, STOCKDB_OK, STOCKDB_SOLD_OUT, 409, "sold_out"},
        {LOCK_OK, STOCKDB_ERR_NOT_FOUND, 0, 404, "not_found"},
        {LOCK_OK, STOCKDB_ERR_CONNECT, 0, 503, "unavailable"},
        {LOCK_OK, STOCKDB_ERR_DEADLOCK, 0, 503, "unavailable"},
        {LOCK_OK, STOCKDB_ERR_FENCED, 0, 503, "lock_lost"},
        {LOCK_OK, STOCKDB_ERR_GUARD, 0, 503, "lock_lost"},
        {LOCK_OK, STOCKDB_ERR_UNKNOWN, 0, 500, "unknown"},
        {LOCK_OK, STOCKDB_ERR_QUERY, 0, 500, "internal_error"},
        /* A key reused for another product is the client's mistake, not a 500. */
        {LOCK_OK, STOCKDB_ERR_KEY_REUSED, 0, 422, "key_conflict"},
        {LOCK_ERR_TIMEOUT, STOCKDB_ERR_QUERY, 0, 503, "lock_timeout"},
        {LOCK_ERR_CONNECTION, STOCKDB_ERR_QUERY, 0, 503, "unavailable"},
        {LOCK_ERR_CANCELLED, STOCKDB_ERR_QUERY, 0, 503, "unavailable"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        stockdb_result res = {.outcome = cases[i].outcome};
        stockd_answer a = {.id = 3};
        stockd_answer_from_db(&a, cases[i].lock_rc, cases[i].rc, &res);
        CHECK_INT_EQ(cases[i].status, stockd_answer_status(a.result));
        cJSON *o = render(&a);
        CHECK_STR_EQ(cases[i].result, str_field(o, "result"));
        /* Every error carries a message for humans. */
        if (cases[i].status != 409) CHECK(str_field(o, "message") != NULL);
        cJSON_Delete(o);
    }
}

static void test_error_answers(void) {
    CHECK_INT_EQ(400, stockd_answer_status(STOCKD_R_BAD_REQUEST));
    CHECK_INT_EQ(404, stockd_answer_status(STOCKD_R_NO_ROUTE));
    CHECK_INT_EQ(405, stockd_answer_status(STOCKD_R_METHOD_NOT_ALLOWED));
    CHECK_INT_EQ(503, stockd_answer_status(STOCKD_R_OVERLOADED));
    CHECK_INT_EQ(500, stockd_answer_status((stockd_result)999));
    stockd_answer a = {.result = STOCKD_R_BAD_REQUEST, .message = "quote \" and \\ escape"};
    cJSON *o = render(&a);
    CHECK_STR_EQ("bad_request", str_field(o, "result"));
    CHECK_STR_EQ("quote \" and \\ escape", str_field(o, "message"));
    CHECK(cJSON_GetObjectItem(o, "id") == NULL);
    cJSON_Delete(o);
}

static void test_health_json(void) {
    char *s =
        stockd_health_json(false, "Can't connect", "up", NULL, NULL, NULL, NULL, "zk", "stockd-2");
    cJSON *o = cJSON_Parse(s);
    CHECK(o != NULL);
    CHECK_STR_EQ("unavailable", str_field(o, "result"));
    CHECK_STR_EQ("down", str_field(o, "mysql"));
    CHECK_STR_EQ("Can't connect", str_field(o, "mysql_error"));
    CHECK_STR_EQ("up", str_field(o, "zookeeper"));
    CHECK_STR_EQ("zk", str_field(o, "lock"));
    CHECK(cJSON_GetObjectItem(o, "redis") == NULL);
    cJSON_Delete(o);
    free(s);

    /* Mode redis: the Redis state and its error are part of the answer. */
    s = stockd_health_json(false, NULL, "unused", NULL, "redis", "down", "Connection refused",
                           "redis", "stockd-3");
    o = cJSON_Parse(s);
    CHECK(o != NULL);
    CHECK_STR_EQ("up", str_field(o, "mysql"));
    CHECK_STR_EQ("unused", str_field(o, "zookeeper"));
    CHECK_STR_EQ("down", str_field(o, "redis"));
    CHECK_STR_EQ("Connection refused", str_field(o, "redis_error"));
    cJSON_Delete(o);
    free(s);

    /* Mode etcd: the same, under its own name. */
    s = stockd_health_json(true, NULL, "unused", NULL, "etcd", "up", NULL, "etcd", "stockd-4");
    o = cJSON_Parse(s);
    CHECK(o != NULL);
    CHECK_STR_EQ("ok", str_field(o, "result"));
    CHECK_STR_EQ("up", str_field(o, "etcd"));
    CHECK(cJSON_GetObjectItem(o, "etcd_error") == NULL);
    CHECK(cJSON_GetObjectItem(o, "redis") == NULL);
    cJSON_Delete(o);
    free(s);
}

/* route METHOD PATH with "k=v" parameters (NULL-terminated; "k" alone = no value). */
static stockd_routed route(const char *method, const char *path, const char *idem, size_t body,
                           ...) {
    static stockd_param params[STOCKD_MAX_PARAMS];
    stockd_request_in in = {.method = method, .path = path, .params = params, .body_bytes = body};
    stockd_routed out;
    va_list ap;
    const char *kv;

    va_start(ap, body);
    while ((kv = va_arg(ap, const char *))) {
        const char *eq = strchr(kv, '=');
        stockd_param *p = &params[in.nparams++];
        p->key = kv;
        p->key_len = eq ? (size_t)(eq - kv) : strlen(kv);
        p->value = eq ? eq + 1 : NULL;
        p->value_len = eq ? strlen(eq + 1) : 0;
    }
    va_end(ap);
    if (idem) {
        in.idem_key = idem;
        in.idem_key_len = strlen(idem);
        in.idem_keys = 1;
    }
    stockd_route_request(&in, &out);
    return out;
}

/* Two Idempotency-Key headers are refused as two request_id= parameters are, whatever
 * their values. */
static void test_two_idempotency_keys(void) {
    stockd_param p = {"id", 2, "1", 1};
    stockd_request_in in = {.method = "GET",
                            .path = "/stock/reduce",
                            .params = &p,
                            .nparams = 1,
                            .idem_key = "a",
                            .idem_key_len = 1,
                            .idem_keys = 2};
    stockd_routed out;
    stockd_route_request(&in, &out);
    CHECK_INT_EQ(STOCKD_R_BAD_REQUEST, out.error);
    CHECK_STR_EQ("Idempotency-Key given more than once", out.message);
    in.idem_keys = 1;
    stockd_route_request(&in, &out);
    CHECK_INT_EQ(STOCKD_R_OK, out.error);
}

static void test_routing_table(void) {
    static const struct {
        const char *method, *path, *idem;
        size_t body;
        const char *p1, *p2;
        stockd_route route;
        stockd_result error;
        const char *allow;
    } cases[] = {
        {"GET", "/stock/reduce", NULL, 0, "id=1", NULL, STOCKD_ROUTE_REDUCE, STOCKD_R_OK, NULL},
        {"POST", "/stock/reduce", NULL, 0, "id=1", NULL, STOCKD_ROUTE_REDUCE, STOCKD_R_OK, NULL},
        {"HEAD", "/stock/reduce", NULL, 0, "id=1", NULL, STOCKD_ROUTE_REDUCE,
         STOCKD_R_METHOD_NOT_ALLOWED, "GET, POST"},
        {"PUT", "/stock/reduce", NULL, 0, "id=1", NULL, STOCKD_ROUTE_REDUCE,
         STOCKD_R_METHOD_NOT_ALLOWED, "GET, POST"},
        {"GET", "/stock", NULL, 0, "id=1", NULL, STOCKD_ROUTE_STOCK, STOCKD_R_OK, NULL},
        {"HEAD", "/health", NULL, 0, NULL, NULL, STOCKD_ROUTE_HEALTH, STOCKD_R_OK, NULL},
        {"DELETE", "/health", NULL, 0, NULL, NULL, STOCKD_ROUTE_HEALTH, STOCKD_R_METHOD_NOT_ALLOWED,
         "GET, HEAD"},
        {"GET", "/metrics", NULL, 0, NULL, NULL, STOCKD_ROUTE_METRICS, STOCKD_R_OK, NULL},
        {"POST", "/metrics", NULL, 0, NULL, NULL, STOCKD_ROUTE_METRICS, STOCKD_R_METHOD_NOT_ALLOWED,
         "GET, HEAD"},
        {"GET", "/stock/reduce/", NULL, 0, "id=1", NULL, STOCKD_ROUTE_OTHER, STOCKD_R_NO_ROUTE,
         NULL},
        {"GET", "/", NULL, 0, NULL, NULL, STOCKD_ROUTE_OTHER, STOCKD_R_NO_ROUTE, NULL},
        {"GET", "/stock/reduce", NULL, 3, "id=1", NULL, STOCKD_ROUTE_REDUCE, STOCKD_R_BAD_REQUEST,
         NULL},
        {"GET", "/stock/reduce", NULL, 0, NULL, NULL, STOCKD_ROUTE_REDUCE, STOCKD_R_BAD_REQUEST,
         NULL},
        {"GET", "/stock/reduce", NULL, 0, "id", NULL, STOCKD_ROUTE_REDUCE, STOCKD_R_BAD_REQUEST,
         NULL},
        {"GET", "/stock/reduce", NULL, 0, "id=1", "id=1", STOCKD_ROUTE_REDUCE, STOCKD_R_BAD_REQUEST,
         NULL},
        {"GET", "/stock/reduce", NULL, 0, "id=1", "request_id=k 1", STOCKD_ROUTE_REDUCE,
         STOCKD_R_BAD_REQUEST, NULL},
        {"GET", "/stock/reduce", "a", 0, "id=1", "request_id=b", STOCKD_ROUTE_REDUCE,
         STOCKD_R_BAD_REQUEST, NULL},
        {"GET", "/stock/reduce", "a", 0, "id=1", "request_id=a", STOCKD_ROUTE_REDUCE, STOCKD_R_OK,
         NULL},
        {"GET", "/stock/reduce", "bad/key", 0, "id=1", NULL, STOCKD_ROUTE_REDUCE,
         STOCKD_R_BAD_REQUEST, NULL},
        /* Unknown parameters are ignored; a health check needs none. */
        {"GET", "/stock", NULL, 0, "id=7", "x=y", STOCKD_ROUTE_STOCK, STOCKD_R_OK, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        stockd_routed r = route(cases[i].method, cases[i].path, cases[i].idem, cases[i].body,
                                cases[i].p1, cases[i].p2, (const char *)NULL);
        if (r.route != cases[i].route || r.error != cases[i].error)
            CHECK_FAIL_("case %zu (%s %s %s %s): expected route %d error %d, got route %d "
                        "error %d (%s)",
                        i, cases[i].method, cases[i].path, cases[i].p1 ? cases[i].p1 : "",
                        cases[i].p2 ? cases[i].p2 : "", cases[i].route, cases[i].error, r.route,
                        r.error, r.message ? r.message : "");
        if (cases[i].allow) CHECK_STR_EQ(cases[i].allow, r.allow);
        if (r.error != STOCKD_R_OK) CHECK(r.message && *r.message);
    }
    stockd_routed r =
        route("GET", "/stock/reduce", NULL, 0, "id=42", "request_id=k-1", (const char *)NULL);
    CHECK_INT_EQ(STOCKD_R_OK, r.error);
    CHECK_INT_EQ(STOCKD_JOB_DEDUCT, r.kind);
    CHECK_INT_EQ(42, r.product_id);
    CHECK_INT_EQ(3, r.key_len);
    CHECK(memcmp(r.key, "k-1", 3) == 0);
    r = route("GET", "/stock/reduce", "hdr", 0, "id=42", (const char *)NULL);
    CHECK_INT_EQ(3, r.key_len);
    CHECK(memcmp(r.key, "hdr", 3) == 0);
    r = route("GET", "/stock/reduce", NULL, 0, "id=42", (const char *)NULL);
    CHECK(r.key == NULL);
}

/* After the deduction (docs/orders.md): the customer from user= or X-User, checked and
 * agreed; pay and cancel routes need one; restock's units and Idempotency-Key. */
static void test_customer_and_order_routes(void) {
    static const struct {
        const char *method, *path, *p1, *p2;
        stockd_route route;
        stockd_result error;
    } cases[] = {
        {"GET", "/stock/reduce", "id=1", "user=alice", STOCKD_ROUTE_REDUCE, STOCKD_R_OK},
        {"GET", "/stock/reduce", "id=1", "user=a.b@c-d_e", STOCKD_ROUTE_REDUCE, STOCKD_R_OK},
        {"GET", "/stock/reduce", "id=1", "user=", STOCKD_ROUTE_REDUCE, STOCKD_R_BAD_REQUEST},
        {"GET", "/stock/reduce", "id=1", "user=a b", STOCKD_ROUTE_REDUCE, STOCKD_R_BAD_REQUEST},
        {"GET", "/stock/reduce", "id=1", "user=a/b", STOCKD_ROUTE_REDUCE, STOCKD_R_BAD_REQUEST},
        {"GET", "/stock/reduce", "id=1",
         "user=0123456789012345678901234567890123456789012345678901234567890123456789",
         STOCKD_ROUTE_REDUCE, STOCKD_R_BAD_REQUEST},
        {"POST", "/orders/17/pay", "user=alice", NULL, STOCKD_ROUTE_ORDER, STOCKD_R_OK},
        {"POST", "/orders/17/cancel", "user=alice", NULL, STOCKD_ROUTE_ORDER, STOCKD_R_OK},
        {"POST", "/orders/17/pay", NULL, NULL, STOCKD_ROUTE_ORDER, STOCKD_R_BAD_REQUEST},
        {"GET", "/orders/17/pay", "user=alice", NULL, STOCKD_ROUTE_ORDER,
         STOCKD_R_METHOD_NOT_ALLOWED},
        /* Not an order id, but a request key's form: mode redis-stock's name of an order
         * (the worker of another mode refuses it, 400). */
        {"POST", "/orders/017/pay", "user=alice", NULL, STOCKD_ROUTE_ORDER, STOCKD_R_OK},
        {"POST", "/orders/-1/pay", "user=alice", NULL, STOCKD_ROUTE_ORDER, STOCKD_R_OK},
        {"POST", "/orders/i/0123456789abcdef/42/pay", "user=alice", NULL, STOCKD_ROUTE_ORDER,
         STOCKD_R_OK},
        {"POST", "/orders//pay", "user=alice", NULL, STOCKD_ROUTE_ORDER, STOCKD_R_BAD_REQUEST},
        {"POST", "/orders/a.b/pay", "user=alice", NULL, STOCKD_ROUTE_ORDER, STOCKD_R_BAD_REQUEST},
        {"POST", "/orders/i/xyz/42/pay", "user=alice", NULL, STOCKD_ROUTE_ORDER,
         STOCKD_R_BAD_REQUEST},
        {"POST", "/orders/17/refund", "user=alice", NULL, STOCKD_ROUTE_ORDER, STOCKD_R_NO_ROUTE},
        {"POST", "/orders/17", "user=alice", NULL, STOCKD_ROUTE_ORDER, STOCKD_R_NO_ROUTE},
        {"POST", "/stock/restock", "id=1", "units=5", STOCKD_ROUTE_RESTOCK, STOCKD_R_OK},
        {"POST", "/stock/restock", "id=1", "units=0", STOCKD_ROUTE_RESTOCK, STOCKD_R_BAD_REQUEST},
        {"POST", "/stock/restock", "id=1", "units=-5", STOCKD_ROUTE_RESTOCK, STOCKD_R_BAD_REQUEST},
        {"POST", "/stock/restock", "id=1", "units=1000001", STOCKD_ROUTE_RESTOCK,
         STOCKD_R_BAD_REQUEST},
        {"POST", "/stock/restock", "id=1", NULL, STOCKD_ROUTE_RESTOCK, STOCKD_R_BAD_REQUEST},
        {"POST", "/stock/restock", "units=5", NULL, STOCKD_ROUTE_RESTOCK, STOCKD_R_BAD_REQUEST},
        {"GET", "/stock/restock", "id=1", "units=5", STOCKD_ROUTE_RESTOCK,
         STOCKD_R_METHOD_NOT_ALLOWED},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        stockd_routed r = route(cases[i].method, cases[i].path, NULL, 0, cases[i].p1, cases[i].p2,
                                (const char *)NULL);
        if (r.route != cases[i].route || r.error != cases[i].error)
            CHECK_FAIL_("case %zu (%s %s %s %s): expected route %d error %d, got route %d "
                        "error %d (%s)",
                        i, cases[i].method, cases[i].path, cases[i].p1 ? cases[i].p1 : "",
                        cases[i].p2 ? cases[i].p2 : "", cases[i].route, cases[i].error, r.route,
                        r.error, r.message ? r.message : "");
        if (r.error != STOCKD_R_OK) CHECK(r.message && *r.message);
    }
    stockd_routed r =
        route("POST", "/orders/123456789012/cancel", NULL, 0, "user=bob", (const char *)NULL);
    CHECK_INT_EQ(STOCKD_JOB_ORDER, r.kind);
    CHECK(r.order_id == 123456789012ull);
    CHECK(r.order_len == 12 && memcmp(r.order, "123456789012", 12) == 0);
    CHECK_INT_EQ(STOCKDB_EV_CANCEL, r.event);
    CHECK_INT_EQ(3, r.user_len);
    CHECK(memcmp(r.user, "bob", 3) == 0);
    /* stockd's own key names an order of mode redis-stock: the event is after its last '/'. */
    r = route("POST", "/orders/i/0123456789abcdef/42/cancel", NULL, 0, "user=bob",
              (const char *)NULL);
    CHECK_INT_EQ(STOCKDB_EV_CANCEL, r.event);
    CHECK(r.order_id == 0 && r.order_len == 21 &&
          memcmp(r.order, "i/0123456789abcdef/42", 21) == 0);
    r = route("POST", "/stock/restock", NULL, 0, "id=9", "units=250", (const char *)NULL);
    CHECK_INT_EQ(STOCKD_JOB_RESTOCK, r.kind);
    CHECK_INT_EQ(9, r.product_id);
    CHECK_INT_EQ(250, r.units);
    CHECK(r.key == NULL);
    /* A restock takes a deduction's key, checked by the same rules. */
    r = route("POST", "/stock/restock", "rs-1", 0, "id=9", "units=250", (const char *)NULL);
    CHECK_INT_EQ(STOCKD_R_OK, r.error);
    CHECK(r.key_len == 4 && memcmp(r.key, "rs-1", 4) == 0);
    r = route("POST", "/stock/restock", "rs/1", 0, "id=9", "units=250", (const char *)NULL);
    CHECK_INT_EQ(STOCKD_R_BAD_REQUEST, r.error);
    r = route("POST", "/stock/restock", "rs-1", 0, "id=9", "units=250", "request_id=rs-2",
              (const char *)NULL);
    CHECK_INT_EQ(STOCKD_R_BAD_REQUEST, r.error);

    /* The X-User header: alone, agreeing with user=, differing, twice. */
    stockd_param p[2] = {{"id", 2, "1", 1}, {"user", 4, "alice", 5}};
    stockd_request_in in = {.method = "GET",
                            .path = "/stock/reduce",
                            .params = p,
                            .nparams = 1,
                            .user = "alice",
                            .user_len = 5,
                            .users = 1};
    stockd_route_request(&in, &r);
    CHECK_INT_EQ(STOCKD_R_OK, r.error);
    CHECK(r.user == in.user && r.user_len == 5);
    in.nparams = 2;
    stockd_route_request(&in, &r);
    CHECK_INT_EQ(STOCKD_R_OK, r.error);
    in.user = "bob";
    in.user_len = 3;
    stockd_route_request(&in, &r);
    CHECK_INT_EQ(STOCKD_R_BAD_REQUEST, r.error);
    CHECK_STR_EQ("X-User and user differ", r.message);
    in.nparams = 1;
    in.users = 2;
    stockd_route_request(&in, &r);
    CHECK_INT_EQ(STOCKD_R_BAD_REQUEST, r.error);
    /* Without a customer a deduction routes as it always did. */
    in.user = NULL;
    in.users = 0;
    stockd_route_request(&in, &r);
    CHECK_INT_EQ(STOCKD_R_OK, r.error);
    CHECK(r.user == NULL);
}

/* The restock token: Bearer only, compared whole, refused when none is configured. */
static void test_admin_token(void) {
    const char *h = "Bearer s3cret";
    CHECK_INT_EQ(STOCKD_R_OK, stockd_check_admin(h, strlen(h), "s3cret"));
    CHECK_INT_EQ(STOCKD_R_FORBIDDEN, stockd_check_admin(h, strlen(h), "s3cre"));
    CHECK_INT_EQ(STOCKD_R_FORBIDDEN, stockd_check_admin(h, strlen(h), "s3cret!"));
    CHECK_INT_EQ(STOCKD_R_FORBIDDEN, stockd_check_admin(h, strlen(h), ""));
    CHECK_INT_EQ(STOCKD_R_FORBIDDEN, stockd_check_admin(h, strlen(h), NULL));
    CHECK_INT_EQ(STOCKD_R_UNAUTHORIZED, stockd_check_admin(NULL, 0, "s3cret"));
    CHECK_INT_EQ(STOCKD_R_UNAUTHORIZED, stockd_check_admin("Basic s3cret", 12, "s3cret"));
    CHECK_INT_EQ(STOCKD_R_UNAUTHORIZED, stockd_check_admin("Bearer ", 7, "s3cret"));
    CHECK_INT_EQ(401, stockd_answer_status(STOCKD_R_UNAUTHORIZED));
    CHECK_INT_EQ(403, stockd_answer_status(STOCKD_R_FORBIDDEN));
}

/* The new answers: their statuses, and a reservation's expiry as ISO 8601 UTC. */
static void test_order_answers(void) {
    static const struct {
        stockd_result r;
        unsigned status;
        const char *name;
    } cases[] = {
        {STOCKD_R_RESERVED, 200, "reserved"},
        {STOCKD_R_LIMIT_REACHED, 409, "limit_reached"},
        {STOCKD_R_EXPIRED, 409, "expired"},
        {STOCKD_R_NOT_RESERVED, 409, "not_reserved"},
        {STOCKD_R_NOT_YOUR_ORDER, 403, "not_your_order"},
        {STOCKD_R_PAID, 200, "paid"},
        {STOCKD_R_CANCELLED, 200, "cancelled"},
        {STOCKD_R_RESTOCKED, 200, "restocked"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_INT_EQ(cases[i].status, stockd_answer_status(cases[i].r));
        CHECK_STR_EQ(cases[i].name, stockd_result_name(cases[i].r));
    }
    stockdb_result res = {.outcome = STOCKDB_DEDUCTED,
                          .stock = 4,
                          .order_id = 77,
                          .reserved = true,
                          .expires_at = "2026-12-07 18:00:00.250000"};
    stockd_answer a = {.id = 2};
    stockd_answer_from_db(&a, LOCK_OK, STOCKDB_OK, &res);
    cJSON *o = render(&a);
    CHECK_STR_EQ("reserved", str_field(o, "result"));
    CHECK_STR_EQ("2026-12-07T18:00:00.250000Z", str_field(o, "expires_at"));
    cJSON_Delete(o);
    res = (stockdb_result){.outcome = STOCKDB_LIMIT_REACHED, .stock = 4};
    a = (stockd_answer){.id = 2};
    stockd_answer_from_db(&a, LOCK_OK, STOCKDB_OK, &res);
    CHECK_INT_EQ(STOCKD_R_LIMIT_REACHED, a.result);
    CHECK(a.message && *a.message);
}

/* The order's life is one table: each event's row, and the states that hold a unit are
 * exactly those the limit's SQL counts (sold, reserved, paid). */
static void test_order_state_table(void) {
    for (int e = 0; e < STOCKDB_EV_COUNT; e++)
        CHECK_INT_EQ(e, stockdb_changes[e].event);
    CHECK_INT_EQ(STOCKDB_STATE_PAID, stockdb_changes[STOCKDB_EV_PAY].to);
    CHECK_INT_EQ(0, stockdb_changes[STOCKDB_EV_PAY].stock_delta);
    CHECK_INT_EQ(1, stockdb_changes[STOCKDB_EV_CANCEL].stock_delta);
    CHECK_INT_EQ(1, stockdb_changes[STOCKDB_EV_EXPIRE].stock_delta);
    CHECK_INT_EQ(STOCKDB_WHEN_AFTER_EXPIRY, stockdb_changes[STOCKDB_EV_EXPIRE].when);
    CHECK(stockdb_state_holds(STOCKDB_STATE_SOLD));
    CHECK(stockdb_state_holds(STOCKDB_STATE_RESERVED));
    CHECK(stockdb_state_holds(STOCKDB_STATE_PAID));
    CHECK(!stockdb_state_holds(STOCKDB_STATE_CANCELLED));
    CHECK(!stockdb_state_holds(STOCKDB_STATE_EXPIRED));
    /* A change that gives a unit back leaves a state that holds none. */
    for (int e = 0; e < STOCKDB_EV_COUNT; e++)
        CHECK(stockdb_state_holds(stockdb_changes[e].to) == (stockdb_changes[e].stock_delta == 0));
    CHECK_STR_EQ("expired", stockdb_state_name(STOCKDB_STATE_EXPIRED));
}

static void test_size_limits_come_first(void) {
    stockd_param id = {"id", 2, "1", 1};
    stockd_request_in in = {.method = "GET", .path = "/stock/reduce", .params = &id, .nparams = 1};
    stockd_routed out;

    in.uri_bytes = STOCKD_MAX_URI_BYTES;
    stockd_route_request(&in, &out);
    CHECK_INT_EQ(STOCKD_R_OK, out.error);
    in.uri_bytes = STOCKD_MAX_URI_BYTES + 1;
    stockd_route_request(&in, &out);
    CHECK_INT_EQ(STOCKD_R_URI_TOO_LONG, out.error);
    CHECK_INT_EQ(414, stockd_answer_status(out.error));
    in.uri_bytes = 0;
    in.header_bytes = STOCKD_MAX_HEADER_BYTES + 1;
    stockd_route_request(&in, &out);
    CHECK_INT_EQ(STOCKD_R_HEADERS_TOO_LARGE, out.error);
    CHECK_INT_EQ(431, stockd_answer_status(out.error));
    /* The answers name the limits they enforce (the text forms follow the numbers). */
    char num[32];
    snprintf(num, sizeof(num), " %d bytes", STOCKD_MAX_HEADER_BYTES);
    CHECK(strstr(out.message, num) != NULL);
    in.header_bytes = 0;
    in.uri_bytes = STOCKD_MAX_URI_BYTES + 1;
    stockd_route_request(&in, &out);
    snprintf(num, sizeof(num), " %d bytes", STOCKD_MAX_URI_BYTES);
    CHECK(strstr(out.message, num) != NULL);
}

static void test_request_start_age_only_from_a_sane_past_time(void) {
    const uint64_t s = 1000000000u, ms = 1000000u;
    const uint64_t now = 1700000000u * s + 500 * ms; /* 1700000000.500 */
    static const struct {
        const char *in;
        uint64_t want_ms; /* the age in ms; 0 = ignored */
    } cases[] = {
        {"t=1700000000.500", 0},     /* sent just now */
        {"t=1700000000.250", 250},   /* nginx's ${msec}: milliseconds */
        {"t=1699999990.500", 10000}, /* older than a deadline: it must expire */
        {"t=1699999990.5", 10000},
        {"t=1699999990.500000000", 10000},
        {"t=1699999990", 10500},
        {"t=1699999940.500", 60000}, /* the bound itself */
        {"t=1699999940.499", 0},     /* past the bound: another clock, not a wait */
        {"t=1700000000.501", 0},     /* in the future */
        {"t=1800000000.000", 0},
        {"t=0", 0},
        {"t=1", 0},
        {"", 0},
        {"t=", 0},
        {"t=.5", 0},
        {"t=1699999990.", 0},
        {"t=1699999990.5000000000", 0}, /* more than 9 digits of fraction */
        {"1699999990.500", 0},          /* no t= */
        {"T=1699999990.500", 0},
        {"t=+1699999990", 0},
        {"t=-1699999990", 0},
        {"t= 1699999990", 0},
        {"t=1699999990.500 ", 0},
        {"t=1699999990,500", 0},
        {"t=1699999990.5x", 0},
        {"t=99999999999999999999", 0}, /* would overflow */
        {"t=18446744073.709551616", 0},
        {"t=1699999990e0", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t got = stockd_request_age_ns(cases[i].in, strlen(cases[i].in), now);
        if (got != cases[i].want_ms * ms)
            CHECK_FAIL_("X-Request-Start '%s': expected an age of %llu ns, got %llu", cases[i].in,
                        (unsigned long long)(cases[i].want_ms * ms), (unsigned long long)got);
    }
    /* Exactly len bytes: an embedded NUL or a longer buffer is not read past len. */
    CHECK(stockd_request_age_ns("t=1699999990\0"
                                "5",
                                14, now) == 0);
    CHECK(stockd_request_age_ns("t=1699999990.500junk", 16, now) == 10000 * ms);
    CHECK(stockd_request_age_ns(NULL, 0, now) == 0);
    /* A time after the wall clock (here 3 s past the epoch) is no age, never a negative one. */
    CHECK(stockd_request_age_ns("t=5", 3, 3 * s) == 0);
}

int main(void) {
    test_routing_table();
    test_two_idempotency_keys();
    test_size_limits_come_first();
    test_customer_and_order_routes();
    test_admin_token();
    test_order_answers();
    test_order_state_table();
    test_id_parser_accepts_only_canonical_positive_int32();
    test_key_check();
    test_deducted_answer_has_stock_order_and_instance();
    test_redis_stock_answers_name_the_order_by_key();
    test_outcome_to_status_table();
    test_error_answers();
    test_health_json();
    test_request_start_age_only_from_a_sane_past_time();
    puts("test_contract: all passed");
    return 0;
}
