/* stockdb_itest: the deduction transaction against a real MariaDB.
 *
 *   stockdb_itest shared URL ROOT_SOCKET DB PROXY_PORT [CASE]
 *       Runs every case (or only CASE; `stockdb_itest list` names them) against the
 *       shared test server, in the test's own database DB (made by t_db). ROOT_SOCKET
 *       gives a root connection to set up rows and to look at what was written; the
 *       handles under test use URL as the service user. PROXY_PORT is a free port for
 *       the tests' fault proxy in front of the server, which can drop the connection
 *       right before or right after a COMMIT, or while idle.
 *   stockdb_itest restart URL CTL
 *       URL points at the test's OWN MariaDB, which is stopped when this starts. CTL is a
 *       script run as `bash CTL start|stop` to start or stop that server.
 *
 * The service user's password comes from STOCKD_MYSQL_PASSWORD. Every check prints the
 * expected and actual values on failure (check.h). */
#include "check.h"
#include "fault_proxy.h"
#include "fault_proxy_mysql.h"
#include "stockdb.h"

#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mysql.h>

extern char **environ;

static stockdb_config g_cfg;
static MYSQL *g_admin;

#define CHECK_RC(expected, rc, db)                                                                 \
    do {                                                                                           \
        int r_ = (rc);                                                                             \
        if (r_ != (expected))                                                                      \
            CHECK_FAIL_("%s: expected %d (%s), got %d (%s): %s", #rc, (int)(expected),             \
                        stockdb_strerror(expected), r_, stockdb_strerror(r_), stockdb_errstr(db)); \
    } while (0)

static const char *strategy_name(stockdb_strategy s) {
    return s == STOCKDB_READ_CHECK_UPDATE ? "READ_CHECK_UPDATE"
           : s == STOCKDB_FOR_UPDATE      ? "FOR_UPDATE"
                                          : "ATOMIC";
}

static const stockdb_strategy all_strategies[] = {STOCKDB_READ_CHECK_UPDATE, STOCKDB_FOR_UPDATE,
                                                  STOCKDB_ATOMIC};

/* ---------------------------------------------------------------- root connection */

static void admin_connect(const char *socket, const char *db) {
    g_admin = mysql_init(NULL);
    CHECK(g_admin != NULL);
    if (!mysql_real_connect(g_admin, "localhost", "root", NULL, db, 0, socket, 0))
        CHECK_FAIL_("root connection over %s: %s", socket, mysql_error(g_admin));
}

/* Runs sql as root with parameters described by types ('i' = long long, 's' = string)
 * and returns the first column of the first row, or `none` when there is no row or no
 * result set (NULL reads as `none` too). */
static long long admin_q(long long none, const char *sql, const char *types, ...) {
    MYSQL_STMT *st = mysql_stmt_init(g_admin);
    CHECK(st != NULL);
    if (mysql_stmt_prepare(st, sql, strlen(sql)))
        CHECK_FAIL_("prepare \"%s\": %s", sql, mysql_stmt_error(st));
    MYSQL_BIND p[8];
    long long ints[8];
    unsigned long lens[8];
    size_t n = strlen(types);
    CHECK(n <= 8);
    memset(p, 0, sizeof(p));
    va_list ap;
    va_start(ap, types);
    for (size_t i = 0; i < n; i++) {
        if (types[i] == 'i') {
            ints[i] = va_arg(ap, long long);
            p[i].buffer_type = MYSQL_TYPE_LONGLONG;
            p[i].buffer = &ints[i];
        } else {
            char *s = va_arg(ap, char *);
            lens[i] = strlen(s);
            p[i].buffer_type = MYSQL_TYPE_STRING;
            p[i].buffer = s;
            p[i].buffer_length = lens[i];
            p[i].length = &lens[i];
        }
    }
    va_end(ap);
    if ((n && mysql_stmt_bind_param(st, p)) || mysql_stmt_execute(st))
        CHECK_FAIL_("execute \"%s\": %s", sql, mysql_stmt_error(st));
    long long value = none;
    if (mysql_stmt_field_count(st) > 0) {
        MYSQL_BIND r;
        my_bool is_null = 0;
        long long v = 0;
        memset(&r, 0, sizeof(r));
        r.buffer_type = MYSQL_TYPE_LONGLONG;
        r.buffer = &v;
        r.is_null = &is_null;
        if (mysql_stmt_bind_result(st, &r) || mysql_stmt_store_result(st))
            CHECK_FAIL_("results of \"%s\": %s", sql, mysql_stmt_error(st));
        if (mysql_stmt_fetch(st) == 0 && !is_null) value = v;
    }
    mysql_stmt_close(st);
    return value;
}

#define NO_ROW (-999999999LL)

static void admin_exec(const char *sql) {
    if (mysql_query(g_admin, sql)) CHECK_FAIL_("\"%s\": %s", sql, mysql_error(g_admin));
}

/* Makes product id with the given stock and fence 0, and no orders. */
static void set_product(int id, int stock) {
    admin_q(0, "DELETE FROM orders WHERE product_id = ?", "i", (long long)id);
    admin_q(0,
            "INSERT INTO product (id, product_name, stock, fence) VALUES (?, 'test', ?, 0)"
            " ON DUPLICATE KEY UPDATE stock = VALUES(stock), fence = 0",
            "ii", (long long)id, (long long)stock);
}

static long long db_stock(int id) {
    return admin_q(NO_ROW, "SELECT stock FROM product WHERE id = ?", "i", (long long)id);
}

static long long db_fence(int id) {
    return admin_q(NO_ROW, "SELECT fence FROM product WHERE id = ?", "i", (long long)id);
}

static long long db_orders(int id) {
    return admin_q(NO_ROW, "SELECT COUNT(*) FROM orders WHERE product_id = ?", "i", (long long)id);
}

static long long db_orders_with_key(const char *key) {
    return admin_q(NO_ROW, "SELECT COUNT(*) FROM orders WHERE request_id = ?", "s", key);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* Runs an ALTER TABLE of product that needs every other session's metadata lock on it
 * gone, with a 2 s lock wait: it fails if a handle left a transaction open. */
static void check_alter_product_is_not_blocked(const char *after) {
    admin_exec("SET SESSION lock_wait_timeout = 2");
    double t0 = now_ms();
    if (mysql_query(g_admin, "ALTER TABLE product COMMENT = 'itest'"))
        CHECK_FAIL_("after %s: expected ALTER TABLE product to run, got \"%s\" after %.0f ms",
                    after, mysql_error(g_admin), now_ms() - t0);
    admin_exec("SET SESSION lock_wait_timeout = DEFAULT");
}

/* ---------------------------------------------------------------- helpers */

static stockdb *new_handle(const char *instance) {
    stockdb *db = stockdb_new(&g_cfg, instance);
    CHECK(db != NULL);
    return db;
}

static int deduct(stockdb *db, stockdb_strategy s, int product, int64_t fence, const char *key,
                  stockdb_result *out) {
    stockdb_request req = {.product_id = product, .fence = fence, .request_id = key};
    return stockdb_deduct(db, s, &req, out);
}

/* ---------------------------------------------------------------- single-handle tests */

static void test_deduct_lowers_stock_and_writes_one_order(stockdb *db) {
    set_product(10, 5);
    int expected = 5;
    for (size_t i = 0; i < 3; i++) {
        stockdb_result res;
        CHECK_RC(STOCKDB_OK, deduct(db, all_strategies[i], 10, 0, NULL, &res), db);
        expected--;
        CHECK_INT_EQ(STOCKDB_DEDUCTED, res.outcome);
        CHECK_INT_EQ(expected, res.stock);
        CHECK_INT_EQ(0, res.replayed);
        CHECK_INT_GT(res.order_id, 0);
        CHECK_STR_EQ("", stockdb_errstr(db));
        CHECK_INT_EQ(expected, db_stock(10));
        CHECK_INT_EQ(1, admin_q(NO_ROW,
                                "SELECT COUNT(*) FROM orders WHERE id = ? AND product_id = 10"
                                " AND instance = 'itest' AND fence IS NULL AND request_id IS NULL",
                                "i", (long long)res.order_id));
    }
    CHECK_INT_EQ(3, db_orders(10));
    int32_t stock = -1;
    CHECK_RC(STOCKDB_OK, stockdb_get_stock(db, 10, &stock), db);
    CHECK_INT_EQ(2, stock);
    CHECK_RC(STOCKDB_OK, stockdb_ping(db), db);
    printf("ok: deduct lowers stock and writes one order (all strategies)\n");
}

static void test_sold_out_writes_nothing(stockdb *db) {
    const int stocks[] = {0, -3};
    for (size_t k = 0; k < 2; k++) {
        set_product(11, stocks[k]);
        for (size_t i = 0; i < 3; i++) {
            stockdb_result res;
            CHECK_RC(STOCKDB_OK, deduct(db, all_strategies[i], 11, 0, NULL, &res), db);
            CHECK_INT_EQ(STOCKDB_SOLD_OUT, res.outcome);
            CHECK_INT_EQ(stocks[k], res.stock);
            CHECK_INT_EQ(0, res.order_id);
            CHECK_INT_EQ(stocks[k], db_stock(11));
            CHECK_INT_EQ(0, db_orders(11));
        }
    }
    printf("ok: sold out at 0 and below writes nothing (all strategies)\n");
}

static void test_unknown_product_is_not_found(stockdb *db) {
    for (size_t i = 0; i < 3; i++) {
        stockdb_result res;
        CHECK_RC(STOCKDB_ERR_NOT_FOUND, deduct(db, all_strategies[i], 999999, 0, NULL, &res), db);
        CHECK(stockdb_errstr(db)[0] != '\0');
        /* With fencing too: a missing row is not a fencing refusal. */
        CHECK_RC(STOCKDB_ERR_NOT_FOUND, deduct(db, all_strategies[i], 999999, 5, NULL, &res), db);
    }
    CHECK_INT_EQ(0, db_orders(999999));
    int32_t stock = 123;
    CHECK_RC(STOCKDB_ERR_NOT_FOUND, stockdb_get_stock(db, 999999, &stock), db);
    CHECK_INT_EQ(123, stock);
    printf("ok: an unknown product is not found (all strategies)\n");
}

static void test_fencing_accepts_equal_or_newer_and_refuses_older(stockdb *db) {
    for (size_t i = 0; i < 3; i++) {
        stockdb_strategy s = all_strategies[i];
        stockdb_result res;
        set_product(12, 10);
        CHECK_RC(STOCKDB_OK, deduct(db, s, 12, 100, NULL, &res), db);
        CHECK_INT_EQ(100, db_fence(12));
        CHECK_INT_EQ(1, admin_q(NO_ROW, "SELECT COUNT(*) FROM orders WHERE id = ? AND fence = 100",
                                "i", (long long)res.order_id));
        CHECK_RC(STOCKDB_OK, deduct(db, s, 12, 100, NULL, &res), db); /* equal */
        CHECK_RC(STOCKDB_OK, deduct(db, s, 12, 150, NULL, &res), db); /* newer */
        CHECK_INT_EQ(150, db_fence(12));
        CHECK_INT_EQ(7, db_stock(12));
        CHECK_INT_EQ(3, db_orders(12));
        CHECK_RC(STOCKDB_ERR_FENCED, deduct(db, s, 12, 120, NULL, &res), db); /* older */
        CHECK_INT_EQ(7, db_stock(12));
        CHECK_INT_EQ(150, db_fence(12));
        CHECK_INT_EQ(3, db_orders(12));
        /* Without a token the row is written and its fence kept. */
        CHECK_RC(STOCKDB_OK, deduct(db, s, 12, 0, NULL, &res), db);
        CHECK_INT_EQ(6, db_stock(12));
        CHECK_INT_EQ(150, db_fence(12));
        printf("ok: fencing accepts equal or newer tokens and refuses older ones (%s)\n",
               strategy_name(s));
    }
}

/* The paused-holder race (found by tests/faults/paused_holder.sh): a newer holder B
 * checks the stock, and while it thinks, a stale holder A (older token, its session
 * already expired) writes. The fence alone would let B's write through too, with B's
 * check now stale; the compare-and-set on the row B read must refuse it. B still holds
 * the newest token, so it checks again, and finds the unit gone: sold out. */
struct fenced_writer {
    int product;
    int64_t fence;
    unsigned think_us;
    int rc;
    stockdb_result res;
};

static void *fenced_writer_main(void *arg) {
    struct fenced_writer *w = arg;
    stockdb *db = new_handle("itest-B");
    stockdb_request req = {.product_id = w->product, .fence = w->fence, .think_us = w->think_us};
    w->rc = stockdb_deduct(db, STOCKDB_READ_CHECK_UPDATE, &req, &w->res);
    stockdb_free(db);
    return NULL;
}

static void test_fence_refuses_a_write_based_on_a_stale_check(stockdb *db) {
    struct fenced_writer b = {.product = 17, .fence = 200, .think_us = 600000};
    stockdb_result res;
    pthread_t th;

    set_product(17, 1);
    CHECK_INT_EQ(0, pthread_create(&th, NULL, fenced_writer_main, &b));
    /* B has read stock 1 and fence 0 long before this; A writes with token 100. */
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_READ_CHECK_UPDATE, 17, 100, NULL, &res), db);
    pthread_join(th, NULL);
    CHECK_RC(STOCKDB_OK, b.rc, db);
    CHECK_INT_EQ(STOCKDB_SOLD_OUT, b.res.outcome);
    CHECK_INT_EQ(0, db_stock(17));
    CHECK_INT_EQ(1, db_orders(17));
    CHECK_INT_EQ(100, db_fence(17));
    printf("ok: a write whose check went stale under a newer fence is refused, and checked "
           "again\n");
}

/* Issue 16, defect 7: tokens of different lock services are on different scales (a
 * Redis token is a time in microseconds, a stock_lock token counts from 1). A row last
 * written under one kind takes any token of another kind, so a product can switch lock
 * mode; within one kind an older token is still refused. */
static void test_fence_kinds_are_not_compared_with_each_other(stockdb *db) {
    stockdb_result res;
    set_product(19, 10);
    stockdb_request redis = {.product_id = 19, .fence = 1732000000000000LL, .fence_kind = 2};
    stockdb_request dblock = {.product_id = 19, .fence = 7, .fence_kind = 3};
    stockdb_request old_dblock = {.product_id = 19, .fence = 6, .fence_kind = 3};
    for (size_t i = 0; i < 3; i++) {
        stockdb_strategy s = all_strategies[i];
        CHECK_RC(STOCKDB_OK, stockdb_deduct(db, s, &redis, &res), db);
        CHECK_RC(STOCKDB_OK, stockdb_deduct(db, s, &dblock, &res), db);
        CHECK_INT_EQ(7, db_fence(19));
        CHECK_INT_EQ(3, admin_q(NO_ROW, "SELECT fence_kind FROM product WHERE id = 19", ""));
        CHECK_RC(STOCKDB_ERR_FENCED, stockdb_deduct(db, s, &old_dblock, &res), db);
    }
    CHECK_INT_EQ(10 - 6, db_stock(19));
    CHECK_INT_EQ(6, db_orders(19));
    printf("ok: a token of another lock kind is not compared with the row's; one of the same "
           "kind is\n");
}

/* Issue 16, defect 1: a holder that serves two batches under ONE token (--lock-passes 2
 * and up, and lock caching) and whose second COMMIT arrives late. A (token 100) has
 * committed a first batch, so the row's fence is already 100; its second batch has
 * written and not committed when B, a newer holder (token 200: A's session or lease ran
 * out meanwhile), reads the committed row. B's UPDATE waits for A's row lock, and A's
 * COMMIT lands. A compare-and-set on the fence alone still matches (A's second batch left
 * it at 100), and B would subtract its unit from stock that A already sold: -1. The
 * compare-and-set must see that the row changed: B's write is refused, and B, still the
 * holder, reads again and finds the product sold out. */
struct late_commit {
    pthread_t th;
    struct fenced_writer b;
    long long waits; /* lock waits seen while A's COMMIT was held back */
};

static int late_commit_guard(void *arg) {
    struct late_commit *lc = arg;
    CHECK_INT_EQ(0, pthread_create(&lc->th, NULL, fenced_writer_main, &lc->b));
    /* Hold A's COMMIT until B's UPDATE waits for A's row lock (so B's check is done). */
    for (int i = 0; i < 500 && lc->waits == 0; i++) {
        /* B's UPDATE, in progress on another session of this case's database, is the
         * lock wait (the server is shared with tests running beside this one). */
        lc->waits = admin_q(0,
                            "SELECT COUNT(*) FROM information_schema.processlist"
                            " WHERE command = 'Execute' AND id <> CONNECTION_ID()"
                            " AND db = DATABASE()",
                            "");
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void test_fence_refuses_a_write_after_a_late_commit_under_the_same_token(stockdb *db) {
    struct late_commit lc = {.b = {.product = 18, .fence = 200}};
    stockdb_item first = {0}, second = {0};
    set_product(18, 2);
    /* A's first batch under token 100. */
    stockdb_batch b1 = {.product_id = 18, .fence = 100, .items = &first, .n = 1};
    CHECK_RC(STOCKDB_OK, stockdb_deduct_batch(db, STOCKDB_READ_CHECK_UPDATE, &b1), db);
    CHECK_INT_EQ(STOCKDB_DEDUCTED, first.res.outcome);
    /* A's second batch under the same token; B runs while A's COMMIT is held back. */
    stockdb_batch b = {.product_id = 18,
                       .fence = 100,
                       .guard = late_commit_guard,
                       .guard_arg = &lc,
                       .items = &second,
                       .n = 1};
    CHECK_RC(STOCKDB_OK, stockdb_deduct_batch(db, STOCKDB_READ_CHECK_UPDATE, &b), db);
    CHECK_INT_EQ(STOCKDB_DEDUCTED, second.res.outcome);
    pthread_join(lc.th, NULL);
    printf("B's answer after A's late COMMIT: rc %d (%s), outcome %d, stock %d\n", lc.b.rc,
           stockdb_strerror(lc.b.rc), (int)lc.b.res.outcome, (int)lc.b.res.stock);
    CHECK_INT_GE(lc.waits, 1);
    CHECK_INT_EQ(0, db_stock(18));
    CHECK_INT_EQ(2, db_orders(18));
    CHECK(lc.b.rc != STOCKDB_OK || lc.b.res.outcome == STOCKDB_SOLD_OUT);
    printf("ok: a second batch's late COMMIT under one token makes a newer holder's stale "
           "write fail\n");
}

struct guard_state {
    int answer;
    int calls;
    long long stock_seen; /* the stock committed data shows while the guard runs */
};

static int guard_cb(void *arg) {
    struct guard_state *g = arg;
    g->calls++;
    g->stock_seen = db_stock(13);
    return g->answer;
}

static void test_guard_refusal_rolls_back(stockdb *db) {
    for (size_t i = 0; i < 3; i++) {
        stockdb_strategy s = all_strategies[i];
        stockdb_result res;
        set_product(13, 4);
        struct guard_state g = {.answer = 1};
        stockdb_request req = {
            .product_id = 13, .guard = guard_cb, .guard_arg = &g, .request_id = "guard-refused"};
        CHECK_RC(STOCKDB_ERR_GUARD, stockdb_deduct(db, s, &req, &res), db);
        CHECK_INT_EQ(1, g.calls);
        CHECK_INT_EQ(4, g.stock_seen); /* nothing was committed before the guard */
        CHECK_INT_EQ(4, db_stock(13));
        CHECK_INT_EQ(0, db_orders(13));
        CHECK_INT_EQ(0, db_orders_with_key("guard-refused"));
        g.answer = 0;
        req.request_id = NULL;
        CHECK_RC(STOCKDB_OK, stockdb_deduct(db, s, &req, &res), db);
        CHECK_INT_EQ(2, g.calls);
        CHECK_INT_EQ(3, db_stock(13));
        CHECK_INT_EQ(1, db_orders(13));
        /* Sold out never reaches the guard. */
        set_product(13, 0);
        CHECK_RC(STOCKDB_OK, stockdb_deduct(db, s, &req, &res), db);
        CHECK_INT_EQ(STOCKDB_SOLD_OUT, res.outcome);
        CHECK_INT_EQ(2, g.calls);
    }
    printf("ok: a guard refusal rolls back stock and order (all strategies)\n");
}

static void test_request_id_replays_the_first_order(stockdb *db) {
    for (size_t i = 0; i < 3; i++) {
        stockdb_strategy s = all_strategies[i];
        char key[32];
        snprintf(key, sizeof(key), "replay-%zu", i);
        set_product(14, 1);
        stockdb_result first, again;
        CHECK_RC(STOCKDB_OK, deduct(db, s, 14, 0, key, &first), db);
        CHECK_INT_EQ(STOCKDB_DEDUCTED, first.outcome);
        CHECK_INT_EQ(0, first.replayed);
        /* Stock is 0 now: the replay still answers "deducted" with the first order. */
        for (size_t j = 0; j < 3; j++) {
            CHECK_RC(STOCKDB_OK, deduct(db, all_strategies[j], 14, 0, key, &again), db);
            CHECK_INT_EQ(STOCKDB_DEDUCTED, again.outcome);
            CHECK_INT_EQ(1, again.replayed);
            CHECK_INT_EQ(first.order_id, again.order_id);
            CHECK_INT_EQ(0, again.stock);
        }
        CHECK_INT_EQ(0, db_stock(14));
        CHECK_INT_EQ(1, db_orders_with_key(key));
        CHECK_INT_EQ(1, db_orders(14));
        /* The same key for another product is refused, not replayed. */
        set_product(10, 5);
        CHECK_RC(STOCKDB_ERR_KEY_REUSED, deduct(db, s, 10, 0, key, &again), db);
        CHECK_INT_EQ(5, db_stock(10));
    }
    char long_key[STOCKDB_REQUEST_ID_MAX + 2];
    memset(long_key, 'k', sizeof(long_key) - 1);
    long_key[sizeof(long_key) - 1] = '\0';
    stockdb_result res;
    CHECK_RC(STOCKDB_ERR_CONFIG, deduct(db, STOCKDB_ATOMIC, 10, 0, long_key, &res), db);
    CHECK_RC(STOCKDB_ERR_CONFIG, deduct(db, STOCKDB_ATOMIC, 10, 0, "", &res), db);
    long_key[STOCKDB_REQUEST_ID_MAX] = '\0'; /* exactly the maximum */
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_ATOMIC, 10, 0, long_key, &res), db);
    CHECK_INT_EQ(1, db_orders_with_key(long_key));
    printf("ok: a request id replays its first order and deducts once (all strategies)\n");
}

static void test_lock_wait_timeout_is_deadlock(void) {
    /* rw timeout 3 s -> innodb_lock_wait_timeout 1 s for this handle. */
    stockdb_config cfg = g_cfg;
    cfg.rw_timeout_s = 3;
    stockdb *db = stockdb_new(&cfg, "itest-wait");
    CHECK(db != NULL);
    set_product(15, 5);
    admin_exec("START TRANSACTION");
    CHECK_INT_EQ(5, admin_q(NO_ROW, "SELECT stock FROM product WHERE id = 15 FOR UPDATE", ""));
    stockdb_result res;
    CHECK_RC(STOCKDB_ERR_DEADLOCK, deduct(db, STOCKDB_FOR_UPDATE, 15, 0, NULL, &res), db);
    CHECK_RC(STOCKDB_ERR_DEADLOCK, deduct(db, STOCKDB_ATOMIC, 15, 0, NULL, &res), db);
    CHECK_RC(STOCKDB_ERR_DEADLOCK, deduct(db, STOCKDB_READ_CHECK_UPDATE, 15, 0, NULL, &res), db);
    admin_exec("ROLLBACK");
    /* The victim's read left no transaction open behind it. */
    check_alter_product_is_not_blocked("a lock wait timeout");
    CHECK_INT_EQ(5, db_stock(15));
    CHECK_INT_EQ(0, db_orders(15));
    /* The victim's connection is still usable. */
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_FOR_UPDATE, 15, 0, NULL, &res), db);
    CHECK_INT_EQ(4, res.stock);
    stockdb_free(db);
    printf("ok: a lock wait timeout is STOCKDB_ERR_DEADLOCK and rolls back\n");
}

static void test_new_checks_arguments(void) {
    char name[STOCKDB_INSTANCE_MAX + 2];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    CHECK(stockdb_new(&g_cfg, name) == NULL); /* one byte too long */
    CHECK(stockdb_new(NULL, "x") == NULL);
    stockdb_free(NULL);
    name[STOCKDB_INSTANCE_MAX] = '\0'; /* the longest name fits orders.instance */
    stockdb *db = new_handle(name);
    set_product(10, 5);
    stockdb_result res;
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_ATOMIC, 10, 0, NULL, &res), db);
    CHECK_INT_EQ(1, admin_q(NO_ROW, "SELECT COUNT(*) FROM orders WHERE id = ? AND instance = ?",
                            "is", (long long)res.order_id, name));
    stockdb_request req = {.product_id = 10};
    CHECK_RC(STOCKDB_ERR_CONFIG, stockdb_deduct(db, (stockdb_strategy)7, &req, &res), db);
    req.fence = -1;
    CHECK_RC(STOCKDB_ERR_CONFIG, stockdb_deduct(db, STOCKDB_ATOMIC, &req, &res), db);
    CHECK_RC(STOCKDB_ERR_CONFIG, stockdb_deduct(db, STOCKDB_ATOMIC, NULL, &res), db);
    CHECK_INT_EQ(4, db_stock(10));
    stockdb_free(db);
    printf("ok: stockdb_new and stockdb_deduct refuse bad arguments\n");
}

/* ---------------------------------------------------------------- threads */

struct twin {
    pthread_barrier_t *barrier;
    stockdb_strategy strategy;
    const char *key;
    int product;
    int rc;
    stockdb_result res;
    char err[256];
};

static void *twin_main(void *arg) {
    struct twin *t = arg;
    stockdb *db = new_handle("itest-twin");
    stockdb_request req = {.product_id = t->product, .request_id = t->key};
    pthread_barrier_wait(t->barrier);
    t->rc = stockdb_deduct(db, t->strategy, &req, &t->res);
    snprintf(t->err, sizeof(t->err), "%s", stockdb_errstr(db));
    stockdb_free(db);
    return NULL;
}

/* Two threads with the same key at the same moment: one order, one deduction, both
 * answers name it. With stock 1, the loser must not answer "sold out" either. */
static void test_twins_with_one_key_deduct_once(void) {
    const int rounds = 30;
    for (int r = 0; r < rounds; r++) {
        char key[32];
        snprintf(key, sizeof(key), "twin-%d", r);
        set_product(16, r % 2 ? 1 : 10);
        long long before = db_stock(16);
        pthread_barrier_t barrier;
        pthread_barrier_init(&barrier, NULL, 2);
        struct twin t[2];
        pthread_t th[2];
        for (int i = 0; i < 2; i++) {
            t[i] = (struct twin){
                .barrier = &barrier, .strategy = all_strategies[r % 3], .key = key, .product = 16};
            CHECK_INT_EQ(0, pthread_create(&th[i], NULL, twin_main, &t[i]));
        }
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&barrier);
        for (int i = 0; i < 2; i++) {
            if (t[i].rc != STOCKDB_OK)
                CHECK_FAIL_("round %d twin %d: expected 0, got %d: %s", r, i, t[i].rc, t[i].err);
            CHECK_INT_EQ(STOCKDB_DEDUCTED, t[i].res.outcome);
        }
        CHECK_INT_EQ(t[0].res.order_id, t[1].res.order_id);
        CHECK_INT_EQ(1, (int)t[0].res.replayed + (int)t[1].res.replayed);
        CHECK_INT_EQ(1, db_orders_with_key(key));
        CHECK_INT_EQ(before - 1, db_stock(16));
    }
    printf("ok: twins with one request id deduct once (%d rounds)\n", rounds);
}

enum { WORKERS = 8, ATTEMPTS = 100, START_STOCK = 50, RACE_PRODUCT = 3 };

struct worker {
    pthread_barrier_t *barrier;
    pthread_mutex_t *mutex; /* NULL = no lock around the deduction */
    stockdb_strategy strategy;
    int attempts;
    int deducted, sold_out, deadlocks, errors;
    char err[256];
};

static void *worker_main(void *arg) {
    struct worker *w = arg;
    char name[32];
    snprintf(name, sizeof(name), "itest-%s", strategy_name(w->strategy));
    stockdb *db = new_handle(name);
    pthread_barrier_wait(w->barrier);
    for (int i = 0; i < w->attempts; i++) {
        stockdb_result res;
        int rc;
        /* A deadlock victim was rolled back and may run again, as the service may. */
        for (int tries = 0;; tries++) {
            if (w->mutex) pthread_mutex_lock(w->mutex);
            rc = deduct(db, w->strategy, RACE_PRODUCT, 0, NULL, &res);
            if (w->mutex) pthread_mutex_unlock(w->mutex);
            if (rc != STOCKDB_ERR_DEADLOCK || tries == 5) break;
            w->deadlocks++;
        }
        if (rc != STOCKDB_OK) {
            w->errors++;
            snprintf(w->err, sizeof(w->err), "%d %s", rc, stockdb_errstr(db));
        } else if (res.outcome == STOCKDB_DEDUCTED) {
            w->deducted++;
        } else {
            w->sold_out++;
        }
    }
    stockdb_free(db);
    return NULL;
}

/* 8 threads, one handle each, 100 attempts on stock 50. Returns the deductions made. */
static int race(stockdb_strategy s, pthread_mutex_t *mutex, int *sold_out, int *deadlocks) {
    set_product(RACE_PRODUCT, START_STOCK);
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, WORKERS);
    struct worker w[WORKERS];
    pthread_t th[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        w[i] = (struct worker){.barrier = &barrier,
                               .mutex = mutex,
                               .strategy = s,
                               .attempts = ATTEMPTS / WORKERS + (i < ATTEMPTS % WORKERS)};
        CHECK_INT_EQ(0, pthread_create(&th[i], NULL, worker_main, &w[i]));
    }
    int deducted = 0;
    *sold_out = *deadlocks = 0;
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(th[i], NULL);
        if (w[i].errors)
            CHECK_FAIL_("%s worker %d: expected 0 errors, got %d, last: %s", strategy_name(s), i,
                        w[i].errors, w[i].err);
        deducted += w[i].deducted;
        *sold_out += w[i].sold_out;
        *deadlocks += w[i].deadlocks;
    }
    pthread_barrier_destroy(&barrier);
    return deducted;
}

static void test_race_safe_strategies_end_at_zero(void) {
    const stockdb_strategy safe[] = {STOCKDB_FOR_UPDATE, STOCKDB_ATOMIC};
    for (size_t i = 0; i < 2; i++) {
        int sold_out, deadlocks;
        int deducted = race(safe[i], NULL, &sold_out, &deadlocks);
        CHECK_INT_EQ(START_STOCK, deducted);
        CHECK_INT_EQ(ATTEMPTS - START_STOCK, sold_out);
        CHECK_INT_EQ(0, db_stock(RACE_PRODUCT));
        CHECK_INT_EQ(START_STOCK, db_orders(RACE_PRODUCT));
        printf("ok: %s from %d threads ends at stock 0 with %d orders (%d deadlock retries)\n",
               strategy_name(safe[i]), WORKERS, START_STOCK, deadlocks);
    }
    pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    int sold_out, deadlocks;
    int deducted = race(STOCKDB_READ_CHECK_UPDATE, &mutex, &sold_out, &deadlocks);
    CHECK_INT_EQ(START_STOCK, deducted);
    CHECK_INT_EQ(0, db_stock(RACE_PRODUCT));
    CHECK_INT_EQ(START_STOCK, db_orders(RACE_PRODUCT));
    printf("ok: READ_CHECK_UPDATE under a mutex ends at stock 0 with %d orders\n", START_STOCK);

    /* Without a lock the seed's transaction may oversell; whatever happens, every unit
     * that left the stock has its order (the ledger invariant). */
    deducted = race(STOCKDB_READ_CHECK_UPDATE, NULL, &sold_out, &deadlocks);
    long long final = db_stock(RACE_PRODUCT);
    CHECK_INT_EQ(START_STOCK - final, db_orders(RACE_PRODUCT));
    CHECK_INT_EQ(deducted, db_orders(RACE_PRODUCT));
    printf("ok: READ_CHECK_UPDATE without a lock keeps the ledger (final stock %lld, %d orders, "
           "%d deadlock retries)\n",
           final, deducted, deadlocks);
}

/* ---------------------------------------------------------------- batches */

static int never_commit(void *arg) {
    (void)arg;
    return 1;
}

/* A batch of n items with the given keys (NULL entries = no key). */
static int batch(stockdb *db, stockdb_strategy s, int product, int64_t fence, stockdb_item *items,
                 size_t n, int (*guard)(void *)) {
    stockdb_batch b = {
        .product_id = product, .fence = fence, .guard = guard, .items = items, .n = n};
    return stockdb_deduct_batch(db, s, &b);
}

static void test_batch_serves_the_first_k_in_order(stockdb *db) {
    const stockdb_strategy ss[] = {STOCKDB_READ_CHECK_UPDATE, STOCKDB_FOR_UPDATE};
    for (size_t v = 0; v < 2; v++) {
        set_product(30, 3);
        stockdb_item it[5];
        char keys[5][32];
        for (size_t i = 0; i < 5; i++) {
            snprintf(keys[i], sizeof(keys[i]), "fifo-%zu-%zu", v, i);
            it[i] = (stockdb_item){.request_id = keys[i]};
        }
        uint64_t before = stockdb_statements(db);
        CHECK_RC(STOCKDB_OK, batch(db, ss[v], 30, 7, it, 5, NULL), db);
        /* SELECT, UPDATE, one INSERT of three rows, COMMIT. */
        CHECK_INT_EQ(4, stockdb_statements(db) - before);
        for (size_t i = 0; i < 3; i++) {
            CHECK_RC(STOCKDB_OK, it[i].rc, db);
            CHECK_INT_EQ(STOCKDB_DEDUCTED, it[i].res.outcome);
            CHECK_INT_EQ(2 - (int)i, it[i].res.stock);
            CHECK_INT_EQ(0, it[i].res.replayed);
            /* Each answer's order is the row of its own key. */
            CHECK_INT_EQ(1, admin_q(NO_ROW,
                                    "SELECT COUNT(*) FROM orders WHERE id = ? AND request_id = ?"
                                    " AND product_id = 30 AND fence = 7",
                                    "is", (long long)it[i].res.order_id, keys[i]));
        }
        for (size_t i = 3; i < 5; i++) {
            CHECK_RC(STOCKDB_OK, it[i].rc, db);
            CHECK_INT_EQ(STOCKDB_SOLD_OUT, it[i].res.outcome);
            CHECK_INT_EQ(0, it[i].res.stock);
            CHECK_INT_EQ(0, db_orders_with_key(keys[i]));
        }
        CHECK_INT_EQ(0, db_stock(30));
        CHECK_INT_EQ(3, db_orders(30));
        CHECK_INT_EQ(7, db_fence(30));
    }
    printf("ok: a batch deducts for the first k in arrival order, one order each, 4 statements\n");
}

static void test_batch_keys_keep_their_meaning(stockdb *db) {
    stockdb_result res;
    set_product(31, 10);
    set_product(32, 10);
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_READ_CHECK_UPDATE, 31, 0, "bk-known", &res), db);
    uint64_t known = res.order_id;
    stockdb_item it[] = {{.request_id = "bk-A"},
                         {.request_id = "bk-B"},
                         {.request_id = "bk-A"},
                         {.request_id = "bk-known"},
                         {.request_id = NULL}};
    CHECK_RC(STOCKDB_OK, batch(db, STOCKDB_READ_CHECK_UPDATE, 31, 0, it, 5, NULL), db);
    for (size_t i = 0; i < 5; i++) {
        CHECK_RC(STOCKDB_OK, it[i].rc, db);
        CHECK_INT_EQ(STOCKDB_DEDUCTED, it[i].res.outcome);
    }
    /* The same key twice deducts once; both get that order, the second as a replay. */
    CHECK_INT_EQ(it[0].res.order_id, it[2].res.order_id);
    CHECK_INT_EQ(0, it[0].res.replayed);
    CHECK_INT_EQ(1, it[2].res.replayed);
    CHECK_INT_EQ(1, db_orders_with_key("bk-A"));
    /* A key that bought before gets its first order back. */
    CHECK_INT_EQ(known, it[3].res.order_id);
    CHECK_INT_EQ(1, it[3].res.replayed);
    CHECK_INT_EQ(1, db_orders_with_key("bk-known"));
    /* bk-A, bk-B and the keyless one: three units. */
    CHECK_INT_EQ(9 - 3, db_stock(31));
    CHECK_INT_EQ(4, db_orders(31));

    /* A key of another product is the client's mistake, for that item only. */
    stockdb_item other[] = {{.request_id = "bk-known"}, {.request_id = "bk-C"}};
    CHECK_RC(STOCKDB_OK, batch(db, STOCKDB_FOR_UPDATE, 32, 0, other, 2, NULL), db);
    CHECK_RC(STOCKDB_ERR_KEY_REUSED, other[0].rc, db);
    CHECK_RC(STOCKDB_OK, other[1].rc, db);
    CHECK_INT_EQ(STOCKDB_DEDUCTED, other[1].res.outcome);
    CHECK_INT_EQ(9, db_stock(32));
    CHECK_RC(STOCKDB_ERR_KEY_REUSED, deduct(db, STOCKDB_ATOMIC, 32, 0, "bk-known", &res), db);
    CHECK_RC(STOCKDB_ERR_KEY_REUSED, deduct(db, STOCKDB_READ_CHECK_UPDATE, 32, 0, "bk-known", &res),
             db);
    CHECK_INT_EQ(9, db_stock(32));

    /* Sold out: a key that bought before still gets its order, a new one sold out. */
    set_product(31, 0);
    stockdb_item late[] = {{.request_id = "bk-B"}, {.request_id = "bk-D"}};
    admin_q(0, "INSERT INTO orders (product_id, instance, request_id) VALUES (31, 'x', 'bk-B')",
            "");
    CHECK_RC(STOCKDB_OK, batch(db, STOCKDB_READ_CHECK_UPDATE, 31, 0, late, 2, NULL), db);
    CHECK_INT_EQ(STOCKDB_DEDUCTED, late[0].res.outcome);
    CHECK_INT_EQ(1, late[0].res.replayed);
    CHECK_INT_EQ(STOCKDB_SOLD_OUT, late[1].res.outcome);
    printf("ok: keys in a batch: twins deduct once, known keys replay, other products' keys "
           "are refused\n");
}

static void test_batch_refused_or_fenced_rolls_back_whole(stockdb *db) {
    set_product(33, 5);
    stockdb_item it[] = {{.request_id = "bg-1"}, {.request_id = "bg-2"}, {.request_id = NULL}};
    CHECK_RC(STOCKDB_ERR_GUARD, batch(db, STOCKDB_READ_CHECK_UPDATE, 33, 9, it, 3, never_commit),
             db);
    CHECK_INT_EQ(5, db_stock(33));
    CHECK_INT_EQ(0, db_orders(33));
    CHECK_INT_EQ(0, db_fence(33));

    admin_q(0, "UPDATE product SET fence = 100 WHERE id = 33", "");
    CHECK_RC(STOCKDB_ERR_FENCED, batch(db, STOCKDB_FOR_UPDATE, 33, 50, it, 3, NULL), db);
    CHECK_INT_EQ(5, db_stock(33));
    CHECK_INT_EQ(0, db_orders(33));
    CHECK_RC(STOCKDB_OK, batch(db, STOCKDB_READ_CHECK_UPDATE, 33, 200, it, 3, NULL), db);
    CHECK_INT_EQ(2, db_stock(33));
    CHECK_INT_EQ(200, db_fence(33));
    printf("ok: a refused or fenced batch is rolled back whole\n");
}

/* Batches of several products in one transaction (stockdb_deduct_multi): all or nothing.
 * Products 40..42, each batch of two keyed items under its own fence. */
static int multi(stockdb *db, stockdb_strategy s, stockdb_item (*it)[2], const int64_t *fences,
                 size_t nb, int (*guard)(void *)) {
    stockdb_batch bs[3];
    for (size_t i = 0; i < nb; i++)
        bs[i] =
            (stockdb_batch){.product_id = 40 + (int)i, .fence = fences[i], .items = it[i], .n = 2};
    return stockdb_deduct_multi(db, s, bs, nb, guard, NULL);
}

static void multi_items(stockdb_item (*it)[2], char (*keys)[32], const char *tag) {
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 2; j++) {
            snprintf(keys[i * 2 + j], 32, "mx-%s-%zu-%zu", tag, i, j);
            it[i][j] = (stockdb_item){.request_id = keys[i * 2 + j]};
        }
}

static void test_multi_products_commit_all_or_nothing(stockdb *db) {
    const stockdb_strategy ss[] = {STOCKDB_READ_CHECK_UPDATE, STOCKDB_FOR_UPDATE};
    for (size_t v = 0; v < 2; v++) {
        stockdb_item it[3][2];
        char keys[6][32], tag[16];
        const int64_t fences[3] = {11, 12, 13};
        for (int p = 40; p <= 42; p++)
            set_product(p, 5);

        /* The lock of one product lost before COMMIT (the guard says no): nothing of any
         * product is committed. */
        snprintf(tag, sizeof(tag), "g%zu", v);
        multi_items(it, keys, tag);
        CHECK_RC(STOCKDB_SPLIT, multi(db, ss[v], it, fences, 3, never_commit), db);
        for (int p = 40; p <= 42; p++) {
            CHECK_INT_EQ(5, db_stock(p));
            CHECK_INT_EQ(0, db_orders(p));
            CHECK_INT_EQ(0, db_fence(p));
        }

        /* A newer holder wrote the second product: its fenced check refuses before
         * anything is written (every row is checked before any is written). */
        admin_q(0, "UPDATE product SET fence = 1000, fence_kind = 0 WHERE id = 41", "");
        snprintf(tag, sizeof(tag), "f%zu", v);
        multi_items(it, keys, tag);
        uint64_t split_before = stockdb_statements(db);
        CHECK_RC(STOCKDB_SPLIT, multi(db, ss[v], it, fences, 3, NULL), db);
        /* The first row's read, the second's read, the ROLLBACK, once: a split is not
         * tried again. */
        CHECK_INT_EQ(3, stockdb_statements(db) - split_before);
        CHECK_INT_EQ(5, db_stock(40));
        CHECK_INT_EQ(0, db_orders(40));
        CHECK_INT_EQ(0, db_fence(40));
        admin_q(0, "UPDATE product SET fence = 0 WHERE id = 41", "");

        /* A product with no stock left is the per-product path's: nothing committed. */
        set_product(42, 0);
        snprintf(tag, sizeof(tag), "s%zu", v);
        multi_items(it, keys, tag);
        CHECK_RC(STOCKDB_SPLIT, multi(db, ss[v], it, fences, 3, NULL), db);
        CHECK_INT_EQ(5, db_stock(40));
        CHECK_INT_EQ(0, db_orders(40));
        set_product(42, 5);

        /* The common case: one transaction, each row its own compare-and-set under its
         * own token: a read and a write per row, one INSERT of every order, one COMMIT. */
        snprintf(tag, sizeof(tag), "ok%zu", v);
        multi_items(it, keys, tag);
        uint64_t before = stockdb_statements(db);
        CHECK_RC(STOCKDB_OK, multi(db, ss[v], it, fences, 3, NULL), db);
        CHECK_INT_EQ(2 * 3 + 2, stockdb_statements(db) - before);
        for (int p = 40; p <= 42; p++) {
            CHECK_INT_EQ(3, db_stock(p));
            CHECK_INT_EQ(2, db_orders(p));
            CHECK_INT_EQ(fences[p - 40], db_fence(p));
            for (size_t j = 0; j < 2; j++) {
                stockdb_item *x = &it[p - 40][j];
                CHECK_RC(STOCKDB_OK, x->rc, db);
                CHECK_INT_EQ(STOCKDB_DEDUCTED, x->res.outcome);
                CHECK_INT_EQ(4 - (int)j, x->res.stock);
                CHECK_INT_EQ(1, admin_q(NO_ROW,
                                        "SELECT COUNT(*) FROM orders WHERE id = ? AND "
                                        "request_id = ? AND product_id = ?",
                                        "isi", (long long)x->res.order_id, x->request_id, p));
            }
        }
        /* A key that has an order already: split, nothing committed by this call. */
        CHECK_RC(STOCKDB_SPLIT, multi(db, ss[v], it, fences, 3, NULL), db);
        for (int p = 40; p <= 42; p++)
            CHECK_INT_EQ(3, db_stock(p));
    }
    printf("ok: batches of several products commit in one transaction, or nothing of them\n");
}

/* Products 60..75, one keyed item each (and a keyless second item on the even ones). */
static void multi_wide(stockdb_batch *bs, stockdb_item (*it)[2], char (*keys)[32], size_t nb,
                       const char *tag) {
    for (size_t i = 0; i < nb; i++) {
        snprintf(keys[i], 32, "mw-%s-%u", tag, (unsigned)i);
        it[i][0] = (stockdb_item){.request_id = keys[i]};
        it[i][1] = (stockdb_item){.request_id = NULL};
        bs[i] = (stockdb_batch){.product_id = 60 + (int)i,
                                .fence = 100 + (int64_t)i,
                                .items = it[i],
                                .n = i % 2 == 0 ? 2 : 1};
    }
}

/* The think time of a transaction over several products falls before its first write:
 * the server ends a write transaction silent for longer than its rw timeout
 * (idle_write_transaction_timeout, stockdb.c), so a think per product after the first
 * product's write would end every such transaction whose think is longer than that. */
static void test_multi_thinks_before_any_write(void) {
    stockdb_config cfg = g_cfg;
    cfg.rw_timeout_s = 2;
    stockdb *db = stockdb_new(&cfg, "itest-multi-think");
    CHECK(db != NULL);
    stockdb_item it[3][2];
    char keys[6][32];
    multi_items(it, keys, "think");
    stockdb_batch bs[2];
    for (size_t i = 0; i < 2; i++) {
        set_product(40 + (int)i, 5);
        bs[i] = (stockdb_batch){.product_id = 40 + (int)i,
                                .fence = 21 + (int64_t)i,
                                .think_us = 2500000, /* past the 2 s idle limit */
                                .items = it[i],
                                .n = 2};
    }
    CHECK_RC(STOCKDB_OK, stockdb_deduct_multi(db, STOCKDB_READ_CHECK_UPDATE, bs, 2, NULL, NULL),
             db);
    for (int p = 40; p <= 41; p++) {
        CHECK_INT_EQ(3, db_stock(p));
        CHECK_INT_EQ(2, db_orders(p));
    }
    stockdb_free(db);
    printf("ok: a transaction over several products thinks before it writes, so a think "
           "past the idle limit does not end it\n");
}

static void test_multi_products_cost_2k_plus_2_statements(stockdb *db) {
    const size_t ks[] = {2, 16};
    for (size_t v = 0; v < 2; v++) {
        size_t nb = ks[v];
        stockdb_batch bs[16];
        stockdb_item it[16][2];
        char keys[16][32], tag[16];
        for (int p = 60; p < 76; p++)
            set_product(p, 5);
        snprintf(tag, sizeof(tag), "k%u", (unsigned)nb);
        multi_wide(bs, it, keys, nb, tag);
        uint64_t before = stockdb_statements(db);
        CHECK_RC(STOCKDB_OK,
                 stockdb_deduct_multi(db, STOCKDB_READ_CHECK_UPDATE, bs, nb, NULL, NULL), db);
        /* A read and a write per row, one INSERT of every order, one COMMIT. */
        CHECK_INT_EQ(2 * (long long)nb + 2, stockdb_statements(db) - before);
        for (size_t i = 0; i < nb; i++) {
            int p = 60 + (int)i;
            CHECK_INT_EQ(5 - (long long)bs[i].n, db_stock(p));
            CHECK_INT_EQ((long long)bs[i].n, db_orders(p));
            CHECK_INT_EQ(100 + (long long)i, db_fence(p));
            for (size_t j = 0; j < bs[i].n; j++) {
                CHECK_RC(STOCKDB_OK, it[i][j].rc, db);
                CHECK_INT_EQ(STOCKDB_DEDUCTED, it[i][j].res.outcome);
                CHECK_INT_EQ(4 - (int)j, it[i][j].res.stock);
                CHECK_INT_EQ(p, admin_q(NO_ROW, "SELECT product_id FROM orders WHERE id = ?", "i",
                                        (long long)it[i][j].res.order_id));
                CHECK_INT_EQ(100 + (long long)i,
                             admin_q(NO_ROW, "SELECT fence FROM orders WHERE id = ?", "i",
                                     (long long)it[i][j].res.order_id));
            }
            CHECK_INT_EQ((long long)it[i][0].res.order_id,
                         admin_q(NO_ROW, "SELECT id FROM orders WHERE request_id = ?", "s",
                                 it[i][0].request_id));
        }
        /* A product whose row is missing: nothing of the others is committed. */
        admin_exec("DELETE FROM orders WHERE product_id = 61");
        admin_exec("DELETE FROM product WHERE id = 61");
        snprintf(tag, sizeof(tag), "gone%u", (unsigned)nb);
        multi_wide(bs, it, keys, nb, tag);
        CHECK_RC(STOCKDB_SPLIT, stockdb_deduct_multi(db, STOCKDB_FOR_UPDATE, bs, nb, NULL, NULL),
                 db);
        CHECK_INT_EQ(5 - (long long)bs[0].n, db_stock(60));
        CHECK_INT_EQ((long long)bs[0].n, db_orders(60));
    }
    printf("ok: a transaction over 2 or 16 products is 2k + 2 statements\n");
}

/* Runs a multi-product call on a second handle (connected before the thread starts, so
 * the call reads at once), while the test bumps a row between its check and its write. */
struct multi_runner {
    stockdb *db;
    stockdb_batch *bs;
    size_t nb;
    int rc;
};

static void *multi_runner_main(void *arg) {
    struct multi_runner *m = arg;
    m->rc = stockdb_deduct_multi(m->db, STOCKDB_READ_CHECK_UPDATE, m->bs, m->nb, NULL, NULL);
    return NULL;
}

static void test_multi_one_stale_row_commits_nothing(stockdb *db) {
    (void)db;
    stockdb_batch bs[4];
    stockdb_item it[4][2];
    char keys[4][32];
    for (int p = 60; p < 64; p++)
        set_product(p, 5);
    multi_wide(bs, it, keys, 4, "stale");
    for (size_t i = 0; i < 4; i++)
        bs[i].think_us = i == 2 ? 1000000 : 0; /* between the checks and the writes */
    struct multi_runner m = {.db = new_handle("itest-M"), .bs = bs, .nb = 4};
    CHECK_STR_EQ("", stockdb_errstr(m.db));
    pthread_t th;
    CHECK_INT_EQ(0, pthread_create(&th, NULL, multi_runner_main, &m));
    /* The runner has read every row long before this and thinks; the third now changes
     * under it (a late COMMIT under the same token would look the same: no newer fence). */
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    admin_exec("UPDATE product SET stock = stock - 1, row_version = row_version + 1 WHERE id = 62");
    pthread_join(th, NULL);
    CHECK_RC(STOCKDB_SPLIT, m.rc, m.db);
    /* Every row read, the first two written and the third's write refused, the ROLLBACK;
     * never tried again. */
    CHECK_INT_EQ(8, stockdb_statements(m.db));
    stockdb_free(m.db);
    for (int p = 60; p < 64; p++) {
        CHECK_INT_EQ(p == 62 ? 4 : 5, db_stock(p));
        CHECK_INT_EQ(0, db_orders(p));
        CHECK_INT_EQ(0, db_fence(p));
    }
    for (size_t i = 0; i < 4; i++)
        CHECK_INT_EQ(0, db_orders_with_key(keys[i]));
    printf("ok: one row's compare-and-set refused at the write commits nothing of any "
           "product\n");
}

static void test_multi_duplicate_keys(stockdb *db) {
    stockdb_batch bs[3];
    stockdb_item it[3][2];
    char keys[3][32];
    for (int p = 60; p < 63; p++)
        set_product(p, 5);

    /* One key twice in one product's batch: one deduction, the second item replays it. */
    multi_wide(bs, it, keys, 3, "dup");
    it[0][1].request_id = keys[0];
    uint64_t before = stockdb_statements(db);
    CHECK_RC(STOCKDB_OK, stockdb_deduct_multi(db, STOCKDB_READ_CHECK_UPDATE, bs, 3, NULL, NULL),
             db);
    CHECK_INT_EQ(2 * 3 + 2, stockdb_statements(db) - before);
    CHECK_INT_EQ(4, db_stock(60));
    CHECK_INT_EQ(1, db_orders_with_key(keys[0]));
    CHECK_INT_EQ(STOCKDB_DEDUCTED, it[0][0].res.outcome);
    CHECK_INT_EQ(0, it[0][0].res.replayed);
    CHECK_INT_EQ(STOCKDB_DEDUCTED, it[0][1].res.outcome);
    CHECK_INT_EQ(1, it[0][1].res.replayed);
    CHECK_INT_EQ((long long)it[0][0].res.order_id, (long long)it[0][1].res.order_id);
    uint64_t first = it[0][0].res.order_id, second = it[1][0].res.order_id;
    CHECK_INT_EQ(4, db_stock(61));

    /* One key in two products' batches: split before any statement. */
    char shared[32];
    multi_wide(bs, it, keys, 3, "two");
    snprintf(shared, sizeof(shared), "%s", keys[0]);
    it[2][0].request_id = shared;
    before = stockdb_statements(db);
    CHECK_RC(STOCKDB_SPLIT, stockdb_deduct_multi(db, STOCKDB_FOR_UPDATE, bs, 3, NULL, NULL), db);
    CHECK_INT_EQ(0, stockdb_statements(db) - before);

    /* A key that has an order already (product 61's, above) in a batch of product 61:
     * nothing of any product is committed, and the per-product path replays it. */
    multi_wide(bs, it, keys, 3, "again");
    snprintf(shared, sizeof(shared), "mw-dup-1");
    it[1][0].request_id = shared;
    CHECK_RC(STOCKDB_SPLIT, stockdb_deduct_multi(db, STOCKDB_READ_CHECK_UPDATE, bs, 3, NULL, NULL),
             db);
    CHECK_INT_EQ(4, db_stock(60));
    CHECK_INT_EQ(4, db_stock(61));
    CHECK_INT_EQ(3, db_stock(62));
    CHECK_INT_EQ(0, db_orders_with_key(keys[0]));
    CHECK_RC(STOCKDB_OK, stockdb_deduct_batch(db, STOCKDB_READ_CHECK_UPDATE, &bs[1]), db);
    CHECK_INT_EQ(STOCKDB_DEDUCTED, it[1][0].res.outcome);
    CHECK_INT_EQ(1, it[1][0].res.replayed);
    CHECK_INT_EQ((long long)second, (long long)it[1][0].res.order_id);
    CHECK_INT_EQ(4, db_stock(61));
    (void)first;

    /* The same key in a batch of ANOTHER product: the per-product path refuses it. */
    it[1][0].request_id = keys[1];
    it[2][0].request_id = shared;
    CHECK_RC(STOCKDB_SPLIT, stockdb_deduct_multi(db, STOCKDB_READ_CHECK_UPDATE, bs, 3, NULL, NULL),
             db);
    CHECK_INT_EQ(3, db_stock(62));
    CHECK_RC(STOCKDB_OK, stockdb_deduct_batch(db, STOCKDB_READ_CHECK_UPDATE, &bs[2]), db);
    CHECK_RC(STOCKDB_ERR_KEY_REUSED, it[2][0].rc, db);
    printf("ok: duplicate keys in a batch over several products are answered from their "
           "orders\n");
}

static void test_round_trips_are_counted_at_the_minimum(stockdb *db) {
    stockdb_result res;
    int32_t stock = 0, order_product = 0;
    uint64_t order_id = 0, before;
    set_product(34, 2);
    before = stockdb_statements(db);
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_READ_CHECK_UPDATE, 34, 5, "rt-1", &res), db);
    CHECK_INT_EQ(4, stockdb_statements(db) - before); /* SELECT, UPDATE, INSERT, COMMIT */
    before = stockdb_statements(db);
    CHECK_RC(STOCKDB_OK, stockdb_peek(db, 34, "rt-2", &stock, &order_id, &order_product), db);
    CHECK_INT_EQ(2, stockdb_statements(db) - before); /* SELECT, ROLLBACK */
    CHECK_INT_EQ(1, stock);
    CHECK_INT_EQ(0, order_id);
    CHECK_RC(STOCKDB_OK, stockdb_peek(db, 34, "rt-1", &stock, &order_id, &order_product), db);
    CHECK_INT_EQ(res.order_id, order_id);
    CHECK_INT_EQ(34, order_product);
    CHECK_RC(STOCKDB_ERR_NOT_FOUND,
             stockdb_peek(db, 999999, NULL, &stock, &order_id, &order_product), db);
    set_product(34, 0);
    before = stockdb_statements(db);
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_READ_CHECK_UPDATE, 34, 5, NULL, &res), db);
    CHECK_INT_EQ(STOCKDB_SOLD_OUT, res.outcome);
    /* The read under the lock, and the ROLLBACK that ends its transaction. */
    CHECK_INT_EQ(2, stockdb_statements(db) - before);
    /* atomic: UPDATE (which hands back the stock it left), INSERT, COMMIT. */
    set_product(34, 2);
    for (int left = 1; left >= 0; left--) {
        before = stockdb_statements(db);
        CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_ATOMIC, 34, 0, NULL, &res), db);
        CHECK_INT_EQ(3, stockdb_statements(db) - before);
        CHECK_INT_EQ(STOCKDB_DEDUCTED, res.outcome);
        CHECK_INT_EQ(left, res.stock);
        CHECK_INT_EQ(left, db_stock(34));
    }
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_ATOMIC, 34, 0, NULL, &res), db);
    CHECK_INT_EQ(STOCKDB_SOLD_OUT, res.outcome);
    printf("ok: 4 statements per locked deduction, 3 per atomic one, 2 per sold-out answer and "
           "per pre-check\n");
}

/* Split stock (sql/schema.sql's product_segment): a batch on segment S reads, fences and
 * writes only that row, at the same 4 statements; the product's stock (peek, get_stock,
 * a replay's stock) is the product row plus every segment; a segment with no row is
 * empty (one more read tells it from a product that does not exist). */
static void test_batch_on_a_segment(stockdb *db) {
    const stockdb_strategy ss[] = {STOCKDB_READ_CHECK_UPDATE, STOCKDB_FOR_UPDATE};
    for (size_t v = 0; v < 2; v++) {
        set_product(35, 0);
        admin_q(0, "DELETE FROM product_segment WHERE product_id = 35", "");
        admin_q(0,
                "INSERT INTO product_segment (product_id, seg, stock, fence) VALUES"
                " (35, 1, 2, 0), (35, 2, 0, 0), (35, 3, 5, 0)",
                "");
        int32_t stock = 0, order_product = 0;
        uint64_t order_id = 0;
        CHECK_RC(STOCKDB_OK, stockdb_get_stock(db, 35, &stock), db);
        CHECK_INT_EQ(7, stock);

        char keys[3][32];
        stockdb_item it[3];
        for (size_t i = 0; i < 3; i++) {
            snprintf(keys[i], sizeof(keys[i]), "seg-%zu-%zu", v, i);
            it[i] = (stockdb_item){.request_id = keys[i]};
        }
        stockdb_batch b = {.product_id = 35, .segment = 1, .fence = 40, .items = it, .n = 3};
        uint64_t before = stockdb_statements(db);
        CHECK_RC(STOCKDB_OK, stockdb_deduct_batch(db, ss[v], &b), db);
        CHECK_INT_EQ(4, stockdb_statements(db) - before);
        CHECK_INT_EQ(STOCKDB_DEDUCTED, it[0].res.outcome);
        CHECK_INT_EQ(1, it[0].res.stock); /* the segment's stock left */
        CHECK_INT_EQ(STOCKDB_DEDUCTED, it[1].res.outcome);
        CHECK_INT_EQ(0, it[1].res.stock);
        CHECK_INT_EQ(STOCKDB_SOLD_OUT, it[2].res.outcome);
        CHECK_INT_EQ(0, admin_q(NO_ROW,
                                "SELECT stock FROM product_segment WHERE product_id = 35"
                                " AND seg = 1",
                                ""));
        CHECK_INT_EQ(40, admin_q(NO_ROW,
                                 "SELECT fence FROM product_segment WHERE product_id = 35"
                                 " AND seg = 1",
                                 ""));
        CHECK_INT_EQ(0, db_fence(35)); /* the product row is not touched */
        CHECK_INT_EQ(0, db_stock(35));
        CHECK_INT_EQ(2, db_orders(35));
        CHECK_RC(STOCKDB_OK, stockdb_peek(db, 35, keys[0], &stock, &order_id, &order_product), db);
        CHECK_INT_EQ(5, stock);
        CHECK_INT_EQ(it[0].res.order_id, order_id);

        /* Each segment has its own fence: an older token is refused on segment 3 only
         * after segment 3 saw a newer one. */
        stockdb_item one = {.request_id = NULL};
        b = (stockdb_batch){.product_id = 35, .segment = 3, .fence = 30, .items = &one, .n = 1};
        CHECK_RC(STOCKDB_OK, stockdb_deduct_batch(db, ss[v], &b), db);
        CHECK_INT_EQ(4, one.res.stock);
        b.fence = 50;
        CHECK_RC(STOCKDB_OK, stockdb_deduct_batch(db, ss[v], &b), db);
        b.fence = 45;
        CHECK_RC(STOCKDB_ERR_FENCED, stockdb_deduct_batch(db, ss[v], &b), db);
        CHECK_INT_EQ(3, admin_q(NO_ROW,
                                "SELECT stock FROM product_segment WHERE product_id = 35"
                                " AND seg = 3",
                                ""));

        /* An empty segment, and one with no row: sold out, and a known key replays. */
        stockdb_item late[] = {{.request_id = keys[0]}, {.request_id = "seg-new"}};
        for (int32_t seg = 2; seg <= 9; seg += 7) {
            b = (stockdb_batch){.product_id = 35, .segment = seg, .items = late, .n = 2};
            CHECK_RC(STOCKDB_OK, stockdb_deduct_batch(db, ss[v], &b), db);
            CHECK_INT_EQ(STOCKDB_DEDUCTED, late[0].res.outcome);
            CHECK_INT_EQ(1, late[0].res.replayed);
            CHECK_INT_EQ(it[0].res.order_id, late[0].res.order_id);
            CHECK_INT_EQ(3, late[0].res.stock); /* a replay reports the product's stock */
            CHECK_INT_EQ(STOCKDB_SOLD_OUT, late[1].res.outcome);
            CHECK_INT_EQ(0, late[1].res.stock);
        }
        /* A product that does not exist is not found, split or not. */
        b = (stockdb_batch){.product_id = 999999, .segment = 2, .items = &one, .n = 1};
        CHECK_RC(STOCKDB_ERR_NOT_FOUND, stockdb_deduct_batch(db, ss[v], &b), db);
        CHECK_INT_EQ(4, db_orders(35)); /* 2 on segment 1, 2 on segment 3 */
    }
    admin_q(0, "DELETE FROM product_segment WHERE product_id = 35", "");
    printf("ok: a batch on a segment writes only its row (4 statements, its own fence); "
           "the product's stock is the sum; a missing segment is empty\n");
}

static void test_an_open_read_never_serves_a_stale_snapshot(stockdb *db) {
    stockdb_result res;
    int32_t stock = 0, order_product = 0;
    uint64_t order_id = 0;
    set_product(35, 5);
    CHECK_RC(STOCKDB_OK, stockdb_peek(db, 35, NULL, &stock, &order_id, &order_product), db);
    CHECK_INT_EQ(5, stock);
    /* Another connection sells two units while our read's transaction is still open. */
    stockdb *other = new_handle("itest-other");
    CHECK_RC(STOCKDB_OK, deduct(other, STOCKDB_READ_CHECK_UPDATE, 35, 0, NULL, &res), db);
    CHECK_RC(STOCKDB_OK, deduct(other, STOCKDB_ATOMIC, 35, 0, NULL, &res), db);
    stockdb_free(other);
    CHECK_RC(STOCKDB_OK, stockdb_peek(db, 35, NULL, &stock, &order_id, &order_product), db);
    CHECK_INT_EQ(3, stock);
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_READ_CHECK_UPDATE, 35, 0, NULL, &res), db);
    CHECK_INT_EQ(2, res.stock);
    CHECK_INT_EQ(2, db_stock(35));
    printf("ok: a read left open does not make the next deduction read a stale stock\n");
}

/* ---------------------------------------------------------------- keys, ids, locks (issue 16) */

/* Checks that order id is a row of product with exactly this key (NULL: none),
 * compared byte for byte whatever the column's collation. */
static void check_order_key(uint64_t id, int product, const char *key) {
    long long n = key ? admin_q(NO_ROW,
                                "SELECT COUNT(*) FROM orders WHERE id = ? AND product_id = ?"
                                " AND CAST(request_id AS BINARY) = CAST(? AS BINARY)",
                                "iis", (long long)id, (long long)product, key)
                      : admin_q(NO_ROW,
                                "SELECT COUNT(*) FROM orders WHERE id = ? AND product_id = ?"
                                " AND request_id IS NULL",
                                "ii", (long long)id, (long long)product);
    if (n != 1)
        CHECK_FAIL_("order %llu: expected a row of product %d with key \"%s\", found %lld",
                    (unsigned long long)id, product, key ? key : "(none)", n);
}

static const char request_id_collation_sql[] =
    "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
    " AND TABLE_NAME = 'orders' AND COLUMN_NAME = 'request_id' AND COLLATION_NAME = ?";

/* Loads sql/schema.sql again into the test's database, as root, the way an operator
 * upgrades a database made by an older version. */
static void admin_reload_schema(void) {
    const char *src = getenv("STOCKD_SRC");
    CHECK(src != NULL);
    char path[4096];
    snprintf(path, sizeof(path), "%s/sql/schema.sql", src);
    FILE *f = fopen(path, "r");
    if (!f) CHECK_FAIL_("open %s: %s", path, strerror(errno));
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    CHECK(feof(f));
    fclose(f);
    text[n] = '\0';
    CHECK_INT_EQ(0, mysql_set_server_option(g_admin, MYSQL_OPTION_MULTI_STATEMENTS_ON));
    int rc = mysql_real_query(g_admin, text, (unsigned long)n);
    for (int i = 1; rc == 0; i++) {
        MYSQL_RES *res = mysql_store_result(g_admin);
        if (res) mysql_free_result(res);
        rc = mysql_next_result(g_admin);
        if (rc > 0) CHECK_FAIL_("%s, statement %d: %s", path, i + 1, mysql_error(g_admin));
    }
    if (rc > 0) CHECK_FAIL_("%s: %s", path, mysql_error(g_admin));
    CHECK_INT_EQ(0, mysql_set_server_option(g_admin, MYSQL_OPTION_MULTI_STATEMENTS_OFF));
}

/* A database made before request_id was byte-exact still compares keys without case.
 * Two keys it takes for one then collide inside a batch, and a look-up by either finds
 * nothing (neither is committed). The batch must answer every item anyway: the keyless
 * ones and the first key deduct, and only the refused item gets an error. Loading
 * schema.sql again then migrates the column. */
static void test_an_unfindable_duplicate_key_fails_one_item_not_the_batch(stockdb *db) {
    const stockdb_strategy ss[] = {STOCKDB_READ_CHECK_UPDATE, STOCKDB_FOR_UPDATE};
    admin_exec("ALTER TABLE orders MODIFY request_id VARCHAR(100) CHARACTER SET utf8mb4"
               " COLLATE utf8mb4_general_ci NULL");
    for (size_t v = 0; v < 2; v++) {
        char lower[32], upper[32];
        snprintf(lower, sizeof(lower), "fb-%zu-7F3A", v);
        snprintf(upper, sizeof(upper), "FB-%zu-7f3a", v);
        set_product(36, 10);
        stockdb_item it[] = {{.request_id = lower},
                             {.request_id = NULL},
                             {.request_id = upper},
                             {.request_id = NULL},
                             {.request_id = NULL}};
        CHECK_RC(STOCKDB_OK, batch(db, ss[v], 36, 0, it, 5, NULL), db);
        for (size_t i = 0; i < 5; i++) {
            if (i == 2) continue;
            CHECK_RC(STOCKDB_OK, it[i].rc, db);
            CHECK_INT_EQ(STOCKDB_DEDUCTED, it[i].res.outcome);
            CHECK_INT_EQ(0, it[i].res.replayed);
            check_order_key(it[i].res.order_id, 36, it[i].request_id);
        }
        CHECK_RC(STOCKDB_ERR_QUERY, it[2].rc, db);
        CHECK_INT_EQ(6, db_stock(36));
        CHECK_INT_EQ(4, db_orders(36));
    }
    admin_reload_schema();
    CHECK_INT_EQ(1, admin_q(NO_ROW, request_id_collation_sql, "s", "utf8mb4_nopad_bin"));
    /* Loading it once more changes nothing and keeps the rows. */
    admin_reload_schema();
    CHECK_INT_EQ(1, admin_q(NO_ROW, request_id_collation_sql, "s", "utf8mb4_nopad_bin"));
    CHECK_INT_EQ(4, db_orders(36));
    printf("ok: a duplicate key no look-up finds fails its item, not the batch; loading "
           "schema.sql again migrates request_id to utf8mb4_nopad_bin\n");
}

/* Request ids compare byte for byte, in the batch (strcmp) as in the database: keys that
 * differ only in case, or by a trailing space, are different requests, and each one
 * deducts, in one batch, across batches and in every strategy. */
static void test_keys_differing_in_case_are_different_orders(stockdb *db) {
    set_product(37, 10);
    stockdb_item it[] = {{.request_id = "order-7F3A"}, {.request_id = NULL},
                         {.request_id = "Order-7f3a"}, {.request_id = NULL},
                         {.request_id = "pad"},        {.request_id = "pad "},
                         {.request_id = NULL}};
    size_t n = sizeof(it) / sizeof(it[0]);
    CHECK_RC(STOCKDB_OK, batch(db, STOCKDB_READ_CHECK_UPDATE, 37, 0, it, n, NULL), db);
    for (size_t i = 0; i < n; i++) {
        CHECK_RC(STOCKDB_OK, it[i].rc, db);
        CHECK_INT_EQ(STOCKDB_DEDUCTED, it[i].res.outcome);
        CHECK_INT_EQ(0, it[i].res.replayed);
        check_order_key(it[i].res.order_id, 37, it[i].request_id);
        for (size_t j = 0; j < i; j++)
            CHECK(it[i].res.order_id != it[j].res.order_id);
    }
    CHECK_INT_EQ(10 - (long long)n, db_stock(37));
    CHECK_INT_EQ(n, db_orders(37));

    /* Across batches and strategies: each spelling is its own request. */
    set_product(38, 10);
    const char *keys[] = {"case-AB", "CASE-ab", "Case-Ab", "case-ab"};
    uint64_t ids[4];
    for (size_t i = 0; i < 4; i++) {
        stockdb_result res;
        if (i < 2) {
            stockdb_item one = {.request_id = keys[i]};
            CHECK_RC(
                STOCKDB_OK,
                batch(db, i ? STOCKDB_READ_CHECK_UPDATE : STOCKDB_FOR_UPDATE, 38, 0, &one, 1, NULL),
                db);
            CHECK_RC(STOCKDB_OK, one.rc, db);
            res = one.res;
        } else {
            CHECK_RC(STOCKDB_OK,
                     deduct(db, i == 2 ? STOCKDB_ATOMIC : STOCKDB_READ_CHECK_UPDATE, 38, 0, keys[i],
                            &res),
                     db);
        }
        CHECK_INT_EQ(STOCKDB_DEDUCTED, res.outcome);
        CHECK_INT_EQ(0, res.replayed);
        check_order_key(res.order_id, 38, keys[i]);
        ids[i] = res.order_id;
    }
    CHECK_INT_EQ(6, db_stock(38));
    /* The same bytes again are a replay, and the pre-check tells the spellings apart. */
    stockdb_result again;
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_READ_CHECK_UPDATE, 38, 0, "CASE-ab", &again), db);
    CHECK_INT_EQ(1, again.replayed);
    CHECK_INT_EQ(ids[1], again.order_id);
    int32_t stock = 0, order_product = 0;
    uint64_t order_id = 0;
    CHECK_RC(STOCKDB_OK, stockdb_peek(db, 38, "cASE-AB", &stock, &order_id, &order_product), db);
    CHECK_INT_EQ(0, order_id);
    CHECK_RC(STOCKDB_OK, stockdb_peek(db, 38, "Case-Ab", &stock, &order_id, &order_product), db);
    CHECK_INT_EQ(ids[2], order_id);
    CHECK_INT_EQ(6, db_stock(38));
    CHECK_INT_EQ(4, db_orders(38));
    printf("ok: keys that differ in case or by a trailing space are different orders (in a "
           "batch, across batches, every strategy)\n");
}

/* With auto_increment_increment 2 the ids of one INSERT are 2 apart: every id a batch
 * answers must still be the row of its own item. The setting applies to the sessions
 * that connect while it is set, so the handle connects then, and the global value is put
 * back at once. */
static void test_batch_order_ids_are_real_with_an_increment_of_2(void) {
    long long old = admin_q(NO_ROW, "SELECT @@GLOBAL.auto_increment_increment", "");
    admin_exec("SET GLOBAL auto_increment_increment = 2");
    stockdb *db = new_handle("itest-step");
    admin_q(0, "SET GLOBAL auto_increment_increment = ?", "i", old);
    CHECK_STR_EQ("", stockdb_errstr(db)); /* connected while the step was 2 */
    const stockdb_strategy ss[] = {STOCKDB_READ_CHECK_UPDATE, STOCKDB_FOR_UPDATE};
    for (size_t v = 0; v < 2; v++) {
        set_product(39, 10);
        char keys[4][32];
        stockdb_item it[5];
        for (size_t i = 0; i < 4; i++) {
            snprintf(keys[i], sizeof(keys[i]), "step-%zu-%zu", v, i);
            it[i] = (stockdb_item){.request_id = keys[i]};
        }
        it[4] = (stockdb_item){.request_id = NULL};
        CHECK_RC(STOCKDB_OK, batch(db, ss[v], 39, 0, it, 5, NULL), db);
        for (size_t i = 0; i < 5; i++) {
            CHECK_RC(STOCKDB_OK, it[i].rc, db);
            CHECK_INT_EQ(STOCKDB_DEDUCTED, it[i].res.outcome);
            check_order_key(it[i].res.order_id, 39, it[i].request_id);
        }
        /* The step was in force (else this test proves nothing). */
        CHECK_INT_EQ(2, it[1].res.order_id - it[0].res.order_id);
        CHECK_INT_EQ(5, db_stock(39));
    }
    stockdb_free(db);
    printf("ok: a batch answers the real order ids when auto_increment_increment is 2\n");
}

/* A handle that goes idle after a read must not sit in an open transaction: even a READ
 * COMMITTED read holds a metadata lock until its transaction ends, and an ALTER TABLE
 * would wait for it (a day, by default) with every query behind it. */
static void test_an_idle_handle_holds_no_metadata_lock(stockdb *db) {
    int32_t stock = 0, order_product = 0;
    uint64_t order_id = 0;
    stockdb_result res;
    set_product(40, 0);
    CHECK_RC(STOCKDB_OK, stockdb_peek(db, 40, "mdl-0", &stock, &order_id, &order_product), db);
    check_alter_product_is_not_blocked("a pre-check (stockdb_peek)");
    CHECK_RC(STOCKDB_OK, stockdb_get_stock(db, 40, &stock), db);
    check_alter_product_is_not_blocked("stockdb_get_stock");
    CHECK_RC(STOCKDB_ERR_NOT_FOUND, stockdb_get_stock(db, 999999, &stock), db);
    check_alter_product_is_not_blocked("stockdb_get_stock of no product");
    const stockdb_strategy ss[] = {STOCKDB_READ_CHECK_UPDATE, STOCKDB_FOR_UPDATE};
    for (size_t v = 0; v < 2; v++) {
        stockdb_item it[] = {{.request_id = NULL}};
        CHECK_RC(STOCKDB_OK, batch(db, ss[v], 40, 0, it, 1, NULL), db);
        CHECK_INT_EQ(STOCKDB_SOLD_OUT, it[0].res.outcome);
        check_alter_product_is_not_blocked("a sold-out batch");
        stockdb_item keyed[] = {{.request_id = "mdl-1"}, {.request_id = NULL}};
        CHECK_RC(STOCKDB_OK, batch(db, ss[v], 40, 0, keyed, 2, NULL), db);
        check_alter_product_is_not_blocked("a sold-out batch with a key");
        CHECK_RC(STOCKDB_ERR_NOT_FOUND, batch(db, ss[v], 999999, 0, it, 1, NULL), db);
        check_alter_product_is_not_blocked("a batch of no product");
    }
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_ATOMIC, 40, 0, "mdl-2", &res), db);
    CHECK_INT_EQ(STOCKDB_SOLD_OUT, res.outcome);
    check_alter_product_is_not_blocked("a sold-out atomic deduction with a key");
    set_product(40, 5);
    for (size_t i = 0; i < 3; i++) {
        CHECK_RC(STOCKDB_OK, deduct(db, all_strategies[i], 40, 0, "mdl-3", &res), db);
        check_alter_product_is_not_blocked("a deduction");
    }
    CHECK_INT_EQ(1, res.replayed);
    check_alter_product_is_not_blocked("a replayed key");
    CHECK_INT_EQ(4, db_stock(40));
    printf("ok: an idle handle holds no metadata lock after a pre-check, a stock read, a "
           "sold-out or replayed deduction\n");
}

/* A holder that goes silent inside its write transaction (frozen, or cut off before its
 * COMMIT) must not keep the product's row locked for wait_timeout (8 h): the server
 * ends the session once it has been idle for the handle's rw timeout. The guard runs
 * between the INSERT and the COMMIT; here it stands for the silence, and from inside it
 * another connection updates the row. */
struct silent_guard {
    double waited_ms;
    char err[256];
};

static int silent_guard_cb(void *arg) {
    struct silent_guard *g = arg;
    admin_exec("SET SESSION innodb_lock_wait_timeout = 8");
    double t0 = now_ms();
    if (mysql_query(g_admin, "UPDATE product SET stock = stock WHERE id = 41"))
        snprintf(g->err, sizeof(g->err), "%s", mysql_error(g_admin));
    g->waited_ms = now_ms() - t0;
    admin_exec("SET SESSION innodb_lock_wait_timeout = DEFAULT");
    return 0;
}

static void test_a_silent_write_transaction_is_ended_by_the_server(void) {
    stockdb_config cfg = g_cfg;
    cfg.rw_timeout_s = 3;
    stockdb *db = stockdb_new(&cfg, "itest-silent");
    CHECK(db != NULL);
    for (int keyed = 0; keyed < 2; keyed++) {
        set_product(41, 5);
        struct silent_guard g = {0};
        stockdb_item it = {.request_id = keyed ? "silent-1" : NULL};
        stockdb_batch b = {
            .product_id = 41, .guard = silent_guard_cb, .guard_arg = &g, .items = &it, .n = 1};
        int rc = stockdb_deduct_batch(db, STOCKDB_READ_CHECK_UPDATE, &b);
        if (g.err[0])
            CHECK_FAIL_("expected the row to be free within the 3 s idle limit, got \"%s\" "
                        "after %.0f ms",
                        g.err, g.waited_ms);
        CHECK_INT_LT(g.waited_ms, 6000);
        /* The server rolled the silent transaction back: its COMMIT finds no session. */
        CHECK_RC(keyed ? STOCKDB_ERR_CONNECT : STOCKDB_ERR_UNKNOWN, rc, db);
        CHECK_INT_EQ(5, db_stock(41));
        CHECK_INT_EQ(0, db_orders(41));
        printf("info: the row was free after %.0f ms\n", g.waited_ms);
    }
    stockdb_free(db);
    printf("ok: a write transaction left silent is ended by the server after the rw timeout\n");
}

/* ---------------------------------------------------------------- relay */

/* The tests' fault proxy (tests/support/fault_proxy.h) between the handle and the server,
 * with its MySQL hook, which can break the connection at the moments that matter: right
 * before the COMMIT reaches the server, right after the server answered it (the answer is
 * never delivered), before a ROLLBACK, or while idle (every connection cut). A stranded
 * COMMIT is a partition: it never arrives, the client's side is closed, and the server's
 * side stays open and silent, as a server sees a client it can no longer hear from. */
static fault_proxy *g_proxy;
static fp_mysql *g_relay;

static void relay_start(int port, int upstream_port) {
    g_relay = fp_mysql_new(NULL);
    CHECK(g_relay != NULL);
    fp_hook hook = fp_mysql_hook(g_relay);
    fault_proxy_config cfg = {.listen_port = port, .upstream_port = upstream_port, .hook = &hook};
    int rc = fault_proxy_new(&cfg, &g_proxy);
    if (rc != FAULT_PROXY_OK)
        CHECK_FAIL_("relay: 127.0.0.1:%d: %s", port, fault_proxy_strerror(rc));
}

static void relay_stop(void) {
    fault_proxy_free(g_proxy);
    fp_mysql_free(g_relay);
    g_proxy = NULL;
    g_relay = NULL;
}

/* Drops every open relayed connection (it returns once they are closed), so the
 * handle's next call meets a dead connection for sure. */
static void relay_kill_all(void) {
    CHECK_INT_GT(fault_proxy_active(g_proxy), 0);
    fault_proxy_cut_all(g_proxy);
    CHECK_INT_EQ(0, fault_proxy_active(g_proxy));
}

static void test_lost_commit_is_confirmed_by_request_id(int proxy_port, int mysql_port) {
    relay_start(proxy_port, mysql_port);
    stockdb_config cfg = g_cfg;
    snprintf(cfg.host, sizeof(cfg.host), "127.0.0.1");
    cfg.port = (unsigned)proxy_port;
    stockdb *db = stockdb_new(&cfg, "itest-relay");
    CHECK(db != NULL);
    stockdb_result res;
    set_product(17, 10);
    CHECK_RC(STOCKDB_OK, stockdb_ping(db), db);

    /* Dropped before the server saw COMMIT: not committed, and the lookup says so. */
    fp_mysql_arm(g_relay, FP_MYSQL_CUT_BEFORE_COMMIT);
    CHECK_RC(STOCKDB_ERR_CONNECT, deduct(db, STOCKDB_FOR_UPDATE, 17, 0, "lost-1", &res), db);
    CHECK_INT_EQ(1, fp_mysql_cuts(g_relay));
    CHECK_INT_EQ(10, db_stock(17));
    CHECK_INT_EQ(0, db_orders_with_key("lost-1"));
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_FOR_UPDATE, 17, 0, "lost-1", &res), db);
    CHECK_INT_EQ(0, res.replayed);
    CHECK_INT_EQ(9, db_stock(17));
    printf("ok: a COMMIT lost before the server is reported not committed\n");

    /* Dropped after the server committed: the lookup finds the order. */
    fp_mysql_arm(g_relay, FP_MYSQL_CUT_AFTER_COMMIT);
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_ATOMIC, 17, 0, "lost-2", &res), db);
    CHECK_INT_EQ(2, fp_mysql_cuts(g_relay));
    CHECK_INT_EQ(STOCKDB_DEDUCTED, res.outcome);
    CHECK_INT_EQ(0, res.replayed);
    CHECK_INT_EQ(8, res.stock);
    CHECK_INT_EQ(8, db_stock(17));
    CHECK_INT_EQ(1, admin_q(NO_ROW, "SELECT COUNT(*) FROM orders WHERE id = ? AND request_id = ?",
                            "is", (long long)res.order_id, "lost-2"));
    uint64_t first = res.order_id;
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_ATOMIC, 17, 0, "lost-2", &res), db);
    CHECK_INT_EQ(1, res.replayed);
    CHECK_INT_EQ(first, res.order_id);
    printf("ok: a COMMIT whose reply was lost is confirmed by its request id\n");

    /* Without a request id nobody can tell. */
    fp_mysql_arm(g_relay, FP_MYSQL_CUT_AFTER_COMMIT);
    CHECK_RC(STOCKDB_ERR_UNKNOWN, deduct(db, STOCKDB_READ_CHECK_UPDATE, 17, 0, NULL, &res), db);
    CHECK_INT_EQ(7, db_stock(17)); /* it did commit */
    fp_mysql_arm(g_relay, FP_MYSQL_CUT_BEFORE_COMMIT);
    CHECK_RC(STOCKDB_ERR_UNKNOWN, deduct(db, STOCKDB_READ_CHECK_UPDATE, 17, 0, NULL, &res), db);
    CHECK_INT_EQ(7, db_stock(17)); /* it did not */
    printf("ok: a lost COMMIT reply without a request id is STOCKDB_ERR_UNKNOWN\n");

    /* With a request id but no way back to the server: unknown, and later the key
     * replays the order that did commit. */
    fp_mysql_refuse_after(g_relay, 1);
    fp_mysql_arm(g_relay, FP_MYSQL_CUT_AFTER_COMMIT);
    CHECK_RC(STOCKDB_ERR_UNKNOWN, deduct(db, STOCKDB_FOR_UPDATE, 17, 0, "lost-3", &res), db);
    CHECK_RC(STOCKDB_ERR_CONNECT, stockdb_ping(db), db);
    fp_mysql_refuse_after(g_relay, 0);
    fault_proxy_refuse(g_proxy, 0);
    CHECK_INT_EQ(6, db_stock(17));
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_FOR_UPDATE, 17, 0, "lost-3", &res), db);
    CHECK_INT_EQ(1, res.replayed);
    CHECK_INT_EQ(6, db_stock(17));
    printf("ok: a lost COMMIT that cannot be looked up is STOCKDB_ERR_UNKNOWN\n");

    /* A connection dropped while idle is reconnected and the call retried. */
    for (size_t i = 0; i < 3; i++) {
        relay_kill_all();
        CHECK_RC(STOCKDB_OK, deduct(db, all_strategies[i], 17, 0, NULL, &res), db);
        CHECK_INT_EQ(5 - 2 * (int)i, db_stock(17));
        relay_kill_all();
        char key[16];
        snprintf(key, sizeof(key), "idle-%zu", i);
        CHECK_RC(STOCKDB_OK, deduct(db, all_strategies[i], 17, 0, key, &res), db);
        CHECK_INT_EQ(0, res.replayed);
        relay_kill_all();
        int32_t stock = 0;
        CHECK_RC(STOCKDB_OK, stockdb_get_stock(db, 17, &stock), db);
        CHECK_INT_EQ(db_stock(17), stock);
        relay_kill_all();
        CHECK_RC(STOCKDB_OK, stockdb_ping(db), db);
    }
    CHECK_INT_EQ(10 - 4 - 6, db_stock(17));
    CHECK_INT_EQ(db_orders(17), 10 - db_stock(17));
    printf("ok: a connection dropped while idle is reconnected and the call retried\n");

    /* A ROLLBACK whose connection breaks drops the handle's statements; the paths that
     * go on after a rollback (a key look-up when sold out, after a duplicate key, after
     * an atomic UPDATE that changed nothing) must not touch them: they start again on a
     * fresh connection instead. Each case below crashed with SIGSEGV before. */
    set_product(17, 5);
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_FOR_UPDATE, 17, 0, "rb-known", &res), db);
    CHECK_INT_EQ(STOCKDB_DEDUCTED, res.outcome);
    uint64_t known = res.order_id;
    int drops = fp_mysql_cuts(g_relay);
    set_product(18, 0);
    fp_mysql_arm(g_relay, FP_MYSQL_CUT_BEFORE_ROLLBACK);
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_FOR_UPDATE, 18, 0, "rb-1", &res), db);
    CHECK_INT_EQ(STOCKDB_SOLD_OUT, res.outcome);
    CHECK_INT_EQ(drops + 1, fp_mysql_cuts(g_relay));
    fp_mysql_arm(g_relay, FP_MYSQL_CUT_BEFORE_ROLLBACK);
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_ATOMIC, 18, 0, "rb-2", &res), db);
    CHECK_INT_EQ(STOCKDB_SOLD_OUT, res.outcome);
    CHECK_INT_EQ(drops + 2, fp_mysql_cuts(g_relay));
    set_product(18, 5);
    fp_mysql_arm(g_relay, FP_MYSQL_CUT_BEFORE_ROLLBACK);
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_FOR_UPDATE, 17, 0, "rb-known", &res), db);
    CHECK_INT_EQ(known, res.order_id);
    CHECK_INT_EQ(1, res.replayed);
    CHECK_INT_EQ(drops + 3, fp_mysql_cuts(g_relay));
    fp_mysql_arm(g_relay, FP_MYSQL_CUT_BEFORE_ROLLBACK);
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_ATOMIC, 17, 0, "rb-known", &res), db);
    CHECK_INT_EQ(known, res.order_id);
    CHECK_INT_EQ(drops + 4, fp_mysql_cuts(g_relay));
    CHECK_INT_EQ(5, db_stock(18));
    CHECK_INT_EQ(4, db_stock(17));
    printf("ok: a ROLLBACK that loses the connection is followed by no statement on it\n");
    stockdb_free(db);
    relay_stop();
}

/* A COMMIT lost in a partition: it never reaches the server, whose session stays with
 * its write transaction open and the product's row locked. Confirming the order by its
 * key must kill that session first: then the answer is final at once (not committed),
 * and the row is free for everyone else. Without a key nothing can be confirmed, but the
 * session is killed all the same. */
static void test_a_commit_lost_in_a_partition_frees_the_row(int proxy_port, int mysql_port) {
    relay_start(proxy_port, mysql_port);
    stockdb_config cfg = g_cfg;
    snprintf(cfg.host, sizeof(cfg.host), "127.0.0.1");
    cfg.port = (unsigned)proxy_port;
    /* rw 10 s: the server's own idle limit (10 s) and the lock wait (8 s) are longer
     * than anything here may take. */
    stockdb *db = stockdb_new(&cfg, "itest-partition");
    CHECK(db != NULL);
    stockdb_result res;
    for (int keyed = 1; keyed >= 0; keyed--) {
        set_product(42, 10);
        int holds = fp_mysql_strands(g_relay);
        fp_mysql_arm(g_relay, FP_MYSQL_STRAND_COMMIT);
        double t0 = now_ms();
        int rc = deduct(db, STOCKDB_READ_CHECK_UPDATE, 42, 0, keyed ? "part-1" : NULL, &res);
        double took = now_ms() - t0;
        CHECK_INT_EQ(holds + 1, fp_mysql_strands(g_relay));
        CHECK_RC(keyed ? STOCKDB_ERR_CONNECT : STOCKDB_ERR_UNKNOWN, rc, db);
        CHECK_INT_LT(took, 3000);
        admin_exec("SET SESSION innodb_lock_wait_timeout = 1");
        t0 = now_ms();
        if (mysql_query(g_admin, "UPDATE product SET stock = stock WHERE id = 42"))
            CHECK_FAIL_("expected the row to be free, got \"%s\" after %.0f ms",
                        mysql_error(g_admin), now_ms() - t0);
        admin_exec("SET SESSION innodb_lock_wait_timeout = DEFAULT");
        CHECK_INT_EQ(10, db_stock(42));
        CHECK_INT_EQ(0, db_orders(42));
        printf("info: %s lost COMMIT answered in %.0f ms\n", keyed ? "a keyed" : "a keyless", took);
    }
    /* The key was not used up: it deducts now. */
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_READ_CHECK_UPDATE, 42, 0, "part-1", &res), db);
    CHECK_INT_EQ(0, res.replayed);
    CHECK_INT_EQ(9, db_stock(42));
    stockdb_free(db);
    /* The killed sessions' connections were closed by the server, so no server side is
     * still stranded (the server may take a moment to close them). */
    for (int i = 0; i < 200 && fault_proxy_stranded(g_proxy) > 0; i++)
        usleep(10 * 1000);
    CHECK_INT_EQ(0, fault_proxy_stranded(g_proxy));
    relay_stop();
    printf("ok: a COMMIT lost in a partition leaves no session holding the row\n");
}

/* ---------------------------------------------------------------- own server */

static void ctl(const char *script, const char *what) {
    char *argv[] = {"bash", (char *)script, (char *)what, NULL};
    pid_t pid;
    CHECK_INT_EQ(0, posix_spawnp(&pid, "bash", NULL, NULL, argv, environ));
    int status = 0;
    CHECK_INT_EQ(pid, waitpid(pid, &status, 0));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        CHECK_FAIL_("bash %s %s: expected exit 0, got status %d", script, what, status);
}

static int run_restart(const char *script) {
    stockdb_result res;
    int32_t stock = 0;
    /* The server is down: the handle is made anyway, and every call says CONNECT. */
    stockdb *db = new_handle("itest-restart");
    CHECK(stockdb_errstr(db)[0] != '\0');
    printf("info: handle made while the server is down: %s\n", stockdb_errstr(db));
    CHECK_RC(STOCKDB_ERR_CONNECT, deduct(db, STOCKDB_ATOMIC, 2, 0, "down-1", &res), db);
    CHECK_RC(STOCKDB_ERR_CONNECT, stockdb_get_stock(db, 2, &stock), db);
    CHECK_RC(STOCKDB_ERR_CONNECT, stockdb_ping(db), db);
    printf("ok: a handle made while the server is down answers STOCKDB_ERR_CONNECT\n");

    ctl(script, "start");
    CHECK_RC(STOCKDB_OK, stockdb_get_stock(db, 2, &stock), db);
    CHECK_INT_EQ(100, stock); /* the seed's stock of product 2 */
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_ATOMIC, 2, 0, "down-1", &res), db);
    CHECK_INT_EQ(99, res.stock);
    CHECK_INT_EQ(0, res.replayed);
    printf("ok: the same handle works once the server is up\n");

    /* A restart between calls: each call reconnects and runs (nothing was open). */
    for (size_t i = 0; i < 3; i++) {
        ctl(script, "stop");
        ctl(script, "start");
        CHECK_RC(STOCKDB_OK, deduct(db, all_strategies[i], 2, 0, NULL, &res), db);
        CHECK_INT_EQ(98 - (int)i, res.stock);
        CHECK_INT_EQ(STOCKDB_DEDUCTED, res.outcome);
    }
    ctl(script, "stop");
    ctl(script, "start");
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_FOR_UPDATE, 2, 0, "down-1", &res), db);
    CHECK_INT_EQ(1, res.replayed); /* the key's order survived the restarts */
    ctl(script, "stop");
    ctl(script, "start");
    CHECK_RC(STOCKDB_OK, stockdb_get_stock(db, 2, &stock), db);
    CHECK_INT_EQ(96, stock);
    ctl(script, "stop");
    ctl(script, "start");
    CHECK_RC(STOCKDB_OK, stockdb_ping(db), db);
    printf("ok: server restarts between calls are survived (reconnect and retry)\n");

    /* Down again: CONNECT, then back. */
    ctl(script, "stop");
    CHECK_RC(STOCKDB_ERR_CONNECT, deduct(db, STOCKDB_ATOMIC, 2, 0, NULL, &res), db);
    CHECK_RC(STOCKDB_ERR_CONNECT, stockdb_get_stock(db, 2, &stock), db);
    ctl(script, "start");
    CHECK_RC(STOCKDB_OK, deduct(db, STOCKDB_ATOMIC, 2, 0, NULL, &res), db);
    CHECK_INT_EQ(95, res.stock);
    printf("ok: a server that went away and came back is used again\n");
    stockdb_free(db);
    return 0;
}

/* ---------------------------------------------------------------- main */

static void load_config(const char *url) {
    memset(&g_cfg, 0, sizeof(g_cfg));
    const char *pw = getenv("STOCKD_MYSQL_PASSWORD");
    if (pw) snprintf(g_cfg.password, sizeof(g_cfg.password), "%s", pw);
    if (stockdb_config_from_url(&g_cfg, url) != STOCKDB_OK)
        CHECK_FAIL_("url \"%s\": expected a valid mysql:// URL", url);
    g_cfg.connect_timeout_s = 2;
    g_cfg.rw_timeout_s = 10;
}

/* Every case of the shared mode, in the order a whole run takes them. Each is also its
 * own ctest entry, stockdb_itest_NAME (NAME without "test_"): a new case is one line here
 * and its row in tests/db/tests.cmake, which stockdb_itest_rows_match_its_list checks
 * against `stockdb_itest list`. A case WITH_DB gets a fresh handle of its own. */
typedef struct itest_case {
    const char *name;
    void (*with_db)(stockdb *db);
    void (*alone)(void);
    void (*relayed)(int proxy_port, int mysql_port);
} itest_case;

#define WITH_DB(f)                                                                                 \
    { #f + 5, f, NULL, NULL }
#define ALONE(f)                                                                                   \
    { #f + 5, NULL, f, NULL }
#define RELAYED(f)                                                                                 \
    { #f + 5, NULL, NULL, f }
static const itest_case cases[] = {
    WITH_DB(test_deduct_lowers_stock_and_writes_one_order),
    WITH_DB(test_sold_out_writes_nothing),
    WITH_DB(test_unknown_product_is_not_found),
    WITH_DB(test_fencing_accepts_equal_or_newer_and_refuses_older),
    WITH_DB(test_fence_refuses_a_write_based_on_a_stale_check),
    WITH_DB(test_fence_refuses_a_write_after_a_late_commit_under_the_same_token),
    WITH_DB(test_fence_kinds_are_not_compared_with_each_other),
    WITH_DB(test_guard_refusal_rolls_back),
    WITH_DB(test_request_id_replays_the_first_order),
    WITH_DB(test_batch_serves_the_first_k_in_order),
    WITH_DB(test_batch_keys_keep_their_meaning),
    WITH_DB(test_batch_refused_or_fenced_rolls_back_whole),
    WITH_DB(test_round_trips_are_counted_at_the_minimum),
    WITH_DB(test_batch_on_a_segment),
    WITH_DB(test_an_open_read_never_serves_a_stale_snapshot),
    WITH_DB(test_an_unfindable_duplicate_key_fails_one_item_not_the_batch),
    WITH_DB(test_keys_differing_in_case_are_different_orders),
    WITH_DB(test_an_idle_handle_holds_no_metadata_lock),
    WITH_DB(test_multi_products_commit_all_or_nothing),
    WITH_DB(test_multi_products_cost_2k_plus_2_statements),
    WITH_DB(test_multi_one_stale_row_commits_nothing),
    WITH_DB(test_multi_duplicate_keys),
    ALONE(test_multi_thinks_before_any_write),
    ALONE(test_batch_order_ids_are_real_with_an_increment_of_2),
    ALONE(test_a_silent_write_transaction_is_ended_by_the_server),
    ALONE(test_new_checks_arguments),
    ALONE(test_lock_wait_timeout_is_deadlock),
    ALONE(test_twins_with_one_key_deduct_once),
    ALONE(test_race_safe_strategies_end_at_zero),
    RELAYED(test_lost_commit_is_confirmed_by_request_id),
    RELAYED(test_a_commit_lost_in_a_partition_frees_the_row),
};

static void run_case(const itest_case *c, int proxy_port) {
    if (c->with_db) {
        stockdb *db = new_handle("itest");
        CHECK_STR_EQ("", stockdb_errstr(db));
        c->with_db(db);
        stockdb_free(db);
    } else if (c->alone) {
        c->alone();
    } else {
        c->relayed(proxy_port, (int)g_cfg.port);
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK_INT_EQ(STOCKDB_OK, stockdb_global_init());
    size_t ncases = sizeof(cases) / sizeof(cases[0]);
    if ((argc == 6 || argc == 7) && strcmp(argv[1], "shared") == 0) {
        load_config(argv[2]);
        admin_connect(argv[3], argv[4]);
        int ran = 0;
        for (size_t i = 0; i < ncases; i++) {
            if (argc == 7 && strcmp(argv[6], cases[i].name) != 0) continue;
            run_case(&cases[i], atoi(argv[5]));
            ran++;
        }
        if (ran == 0) CHECK_FAIL_("no case named \"%s\"", argv[6]);
        mysql_close(g_admin);
    } else if (argc == 4 && strcmp(argv[1], "restart") == 0) {
        load_config(argv[2]);
        run_restart(argv[3]);
    } else if (argc == 2 && strcmp(argv[1], "list") == 0) {
        for (size_t i = 0; i < ncases; i++)
            printf("%s\n", cases[i].name);
        return 0;
    } else {
        fprintf(stderr, "usage: stockdb_itest shared URL ROOT_SOCKET DB PROXY_PORT [CASE]\n"
                        "       stockdb_itest restart URL CTL_SCRIPT\n"
                        "       stockdb_itest list\n");
        return 2;
    }
    stockdb_global_end();
    printf("stockdb_itest %s: ok\n", argc == 7 ? argv[6] : argv[1]);
    return 0;
}
