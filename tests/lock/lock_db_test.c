/* lock_db_test: the contract of the lock-table library (dblock_int.h) against a real MariaDB (the
 * test's own database, as the service user).
 *   - a bad configuration is refused; an unreachable server or a wrong password gives
 *     LOCK_ERR_CONNECTION with a reason;
 *   - fencing tokens grow across acquisitions, names and handles;
 *   - a second holder is refused: try-once and a bounded wait both time out, the wait
 *     lasts at least its timeout, and it sleeps (backoff) rather than spins;
 *   - the lock row is committed when acquire returns: another connection sees it;
 *   - check() says LOST once the lease has passed; the next holder takes the row over;
 *     the stale holder's release is refused (LOST) and the new holder's row stays;
 *   - a handle cannot take a name twice;
 *   - the cancel flag, set by another thread, ends a wait with LOCK_ERR_CANCELLED
 *     long before its timeout, and an acquire after it fails without taking the lock;
 *   - two processes with the same configured owner, the same pid (each is pid 1 of a
 *     PID namespace of its own, as two containers are) and the same handle number
 *     write different owners, so the one's delete by owner (the undo after a lost
 *     INSERT reply) cannot remove the other's row (issue 16 #11). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <mysql.h>
#include <sched.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dblock_int.h"
#include "lease_test.h"

static stockdb_config dbc;

static dblock *open_lock(int lease_ms) {
    dblock_config c = {.db = dbc, .owner = "lock_db_test", .lease_ms = lease_ms};
    dblock *d = NULL;
    char err[512];
    int rc = dblock_new(&c, &d, err, sizeof(err));
    if (rc != LOCK_OK) CHECK_FAIL_("dblock_new: %s: %s", dblock_strerror(rc), err);
    return d;
}

/* The token of the row of `name` as another connection sees it (0 if none). */
static long long row_token(const char *name) {
    MYSQL *m = mysql_init(NULL);
    CHECK(m != NULL);
    if (!mysql_real_connect(m, dbc.host, dbc.user, dbc.password, dbc.database, dbc.port, NULL, 0))
        CHECK_FAIL_("connect: %s", mysql_error(m));
    MYSQL_STMT *st = mysql_stmt_init(m);
    const char *q = "SELECT token FROM stock_lock WHERE name = ?";
    CHECK(st && mysql_stmt_prepare(st, q, strlen(q)) == 0);
    MYSQL_BIND p, r;
    unsigned long len = strlen(name);
    long long tok = 0;
    memset(&p, 0, sizeof(p));
    memset(&r, 0, sizeof(r));
    p.buffer_type = MYSQL_TYPE_STRING;
    p.buffer = (void *)name;
    p.buffer_length = len;
    p.length = &len;
    r.buffer_type = MYSQL_TYPE_LONGLONG;
    r.buffer = &tok;
    CHECK(mysql_stmt_bind_param(st, &p) == 0 && mysql_stmt_execute(st) == 0);
    CHECK(mysql_stmt_bind_result(st, &r) == 0);
    int f = mysql_stmt_fetch(st);
    if (f != 0) tok = 0;
    mysql_stmt_close(st);
    mysql_close(m);
    return tok;
}

/* The owner of the row of `name` as another connection sees it ("" if none), and the
 * rows a DELETE ... WHERE name = ? AND owner = ? (dblock's undo) removes when not
 * NULL: run it with that owner when delete_as is set. */
static void row_owner(const char *name, char *owner, size_t cap, const char *delete_as,
                      unsigned long long *deleted) {
    MYSQL *m = mysql_init(NULL);
    CHECK(m != NULL);
    if (!mysql_real_connect(m, dbc.host, dbc.user, dbc.password, dbc.database, dbc.port, NULL, 0))
        CHECK_FAIL_("connect: %s", mysql_error(m));
    MYSQL_STMT *st = mysql_stmt_init(m);
    const char *q = delete_as ? "DELETE FROM stock_lock WHERE name = ? AND owner = ?"
                              : "SELECT owner FROM stock_lock WHERE name = ?";
    CHECK(st && mysql_stmt_prepare(st, q, strlen(q)) == 0);
    MYSQL_BIND p[2], r;
    unsigned long len[2] = {strlen(name), delete_as ? strlen(delete_as) : 0}, got = 0;
    memset(p, 0, sizeof(p));
    memset(&r, 0, sizeof(r));
    p[0].buffer_type = p[1].buffer_type = MYSQL_TYPE_STRING;
    p[0].buffer = (void *)name;
    p[0].buffer_length = len[0];
    p[0].length = &len[0];
    p[1].buffer = (void *)delete_as;
    p[1].buffer_length = len[1];
    p[1].length = &len[1];
    CHECK(mysql_stmt_bind_param(st, p) == 0 && mysql_stmt_execute(st) == 0);
    owner[0] = '\0';
    if (delete_as) {
        *deleted = (unsigned long long)mysql_stmt_affected_rows(st);
    } else {
        r.buffer_type = MYSQL_TYPE_STRING;
        r.buffer = owner;
        r.buffer_length = cap - 1;
        r.length = &got;
        CHECK(mysql_stmt_bind_result(st, &r) == 0);
        if (mysql_stmt_fetch(st) == 0) owner[got < cap ? got : cap - 1] = '\0';
    }
    mysql_stmt_close(st);
    mysql_close(m);
}

static void test_config_and_unreachable(void) {
    dblock *d = (dblock *)1;
    char err[512];
    dblock_config c = {.db = dbc, .lease_ms = 100, .safety_margin_ms = 100};
    CHECK_INT_EQ(LOCK_ERR_ARGS, dblock_new(&c, &d, NULL, 0));
    CHECK(d == NULL);

    c = (dblock_config){.db = dbc};
    c.db.port = (unsigned)atoi(ls_env("STOCKD_TEST_DEAD_PORT"));
    c.db.connect_timeout_s = 1;
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, dblock_new(&c, &d, err, sizeof(err)));
    CHECK(d == NULL && err[0]);
    printf("ok: unreachable server: %s (%s)\n", dblock_strerror(LOCK_ERR_CONNECTION), err);

    c = (dblock_config){.db = dbc};
    snprintf(c.db.password, sizeof(c.db.password), "wrong-password");
    CHECK_INT_EQ(LOCK_ERR_CONNECTION, dblock_new(&c, &d, err, sizeof(err)));
    printf("ok: wrong password: %s\n", err);
}

static void test_tokens_grow(void) {
    dblock *a = open_lock(0), *b = open_lock(0);
    char n1[128], n2[128];
    snprintf(n1, sizeof(n1), "%s_1", ls_name("tokens"));
    snprintf(n2, sizeof(n2), "%s_2", ls_name("tokens"));
    int64_t last = 0;
    for (int i = 0; i < 20; i++) {
        dblock_hold *h = NULL;
        const char *n = i % 3 ? n1 : n2;
        CHECK_INT_EQ(LOCK_OK, dblock_acquire(i % 2 ? a : b, n, 1000, &h));
        CHECK_INT_GT(dblock_token(h), last);
        last = dblock_token(h);
        CHECK_INT_EQ(last, row_token(n)); /* committed, visible to another connection */
        CHECK_INT_EQ(LOCK_OK, dblock_check(h));
        CHECK_INT_EQ(LOCK_OK, dblock_release(h));
        CHECK_INT_EQ(0, row_token(n));
    }
    dblock_free(a);
    dblock_free(b);
    printf("ok: 20 tokens grew, last %lld; rows visible while held, gone after release\n",
           (long long)last);
}

static void test_timeout(void) {
    dblock *a = open_lock(0), *b = open_lock(0);
    const char *name = ls_name("timeout");
    dblock_hold *h = NULL, *h2 = (dblock_hold *)1;
    CHECK_INT_EQ(LOCK_OK, dblock_acquire(a, name, 1000, &h));
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, dblock_acquire(b, name, 0, &h2));
    CHECK(h2 == NULL);
    dblock_stats st0, st;
    dblock_get_stats(b, &st0);
    int64_t t0 = ls_now_us();
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, dblock_acquire(b, name, 500, &h2));
    int64_t waited = ls_now_us() - t0;
    CHECK_INT_GE(waited, 500000);
    dblock_get_stats(b, &st);
    /* Backoff 1, 2, 4, ... 50 ms: about 15 rounds of 2 statements in 500 ms; a spinning
     * waiter would run thousands. */
    CHECK_INT_LE(st.ops - st0.ops, 100);
    CHECK_INT_EQ(LOCK_ERR_ARGS, dblock_acquire(a, name, 0, &h2)); /* not reentrant */
    CHECK_INT_EQ(2, st.timeouts);
    CHECK_INT_EQ(LOCK_OK, dblock_release(h));
    dblock_free(a);
    dblock_free(b);
    printf("ok: try-once and 500 ms waits time out (waited %.1f ms, %llu statements)\n",
           (double)waited / 1000, (unsigned long long)(st.ops - st0.ops));
}

static void test_stale_holder(void) {
    dblock *a = open_lock(300), *b = open_lock(10000);
    const char *name = ls_name("stale");
    dblock_hold *ha = NULL, *hb = NULL;
    CHECK_INT_EQ(LOCK_OK, dblock_acquire(a, name, 1000, &ha));
    CHECK_INT_EQ(LOCK_OK, dblock_check(ha));
    CHECK_INT_EQ(LOCK_OK, dblock_acquire(b, name, 5000, &hb)); /* a takeover */
    CHECK_INT_EQ(LOCK_LOST, dblock_check(ha));
    CHECK_INT_GT(dblock_token(hb), dblock_token(ha));
    dblock_stats st;
    dblock_get_stats(b, &st);
    CHECK_INT_EQ(1, st.takeovers);
    CHECK_INT_EQ(LOCK_LOST, dblock_release(ha));
    CHECK_INT_EQ(dblock_token(hb), row_token(name));
    CHECK_INT_EQ(LOCK_OK, dblock_release(hb));
    CHECK_INT_EQ(0, row_token(name));
    dblock_free(a);
    dblock_free(b);
    printf("ok: an expired row is taken over; the stale holder's release is refused\n");
}

/* A watchdog's thread: its own handle (made, used and freed there) renews another
 * thread's hold `times` times, every gap_ms, and keeps the last code. */
struct renewer {
    dblock_hold *h;
    int times, gap_ms, rc;
};

static void *renew_thread(void *arg) {
    struct renewer *r = arg;
    dblock *via = open_lock(600);
    for (int i = 0; i < r->times; i++) {
        ls_sleep_ms(r->gap_ms);
        r->rc = dblock_renew(via, r->h);
    }
    dblock_free(via);
    return NULL;
}

/* Issue 20 #3: renewed from another thread, a 600 ms lease outlives 900 ms and is not
 * taken over; not renewed, it is, and a later renewal touches neither the new row nor
 * the stale hold's lease clock. */
static void test_renew(void) {
    dblock *a = open_lock(600), *b = open_lock(600);
    const char *name = ls_name("renew");
    dblock_hold *ha = NULL, *hb = NULL;
    CHECK_INT_EQ(LOCK_OK, dblock_acquire(a, name, 1000, &ha));
    struct renewer r = {.h = ha, .times = 3, .gap_ms = 300, .rc = 999};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, renew_thread, &r) == 0);
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_OK, r.rc);
    CHECK_INT_EQ(LOCK_OK, dblock_check(ha)); /* 900 ms into a 600 ms lease */
    CHECK_INT_EQ(LOCK_ERR_TIMEOUT, dblock_acquire(b, name, 0, &hb)); /* no takeover */

    ls_sleep_ms(700); /* no renewal: the lease runs out */
    CHECK_INT_EQ(LOCK_LOST, dblock_check(ha));
    CHECK_INT_EQ(LOCK_OK, dblock_acquire(b, name, 0, &hb)); /* a takeover */
    r = (struct renewer){.h = ha, .times = 1, .gap_ms = 0, .rc = 999};
    CHECK(pthread_create(&t, NULL, renew_thread, &r) == 0);
    pthread_join(t, NULL);
    CHECK_INT_EQ(LOCK_LOST, r.rc);
    CHECK_INT_EQ(LOCK_LOST, dblock_check(ha));
    CHECK_INT_EQ(dblock_token(hb), row_token(name));
    CHECK_INT_EQ(LOCK_LOST, dblock_release(ha));
    CHECK_INT_EQ(LOCK_OK, dblock_release(hb));
    dblock_free(a);
    dblock_free(b);
    printf("ok: a lease renewed from another thread outlives itself; a lost one is not renewed\n");
}

/* dblock_acquire for ls_kind. */
static int acquire_any(void *lock, const char *name, int timeout_ms, void **hold) {
    dblock_hold *h = *hold;
    int rc = dblock_acquire(lock, name, timeout_ms, &h);
    *hold = h;
    return rc;
}

static void test_cancel(void) {
    const ls_kind kind = {.acquire = acquire_any, .ok = LOCK_OK, .cancelled = LOCK_ERR_CANCELLED};
    atomic_int cancel = 0;
    dblock *a = open_lock(30000);
    dblock_config c = {.db = dbc, .owner = "lock_db_test", .lease_ms = 30000, .cancel = &cancel};
    dblock *b = NULL;
    CHECK_INT_EQ(LOCK_OK, dblock_new(&c, &b, NULL, 0));
    char free_name[128];
    dblock_hold *h = ls_check_cancel(&kind, a, b, &cancel, free_name, sizeof(free_name));
    CHECK_INT_EQ(0, row_token(free_name));
    CHECK_INT_EQ(LOCK_OK, dblock_release(h));
    dblock_free(a);
    dblock_free(b);
    printf("ok: the cancel flag ends a wait and refuses later acquires\n");
}

/* In a fresh process: takes `name` with the configured owner "lock_db_test" and
 * leaves the row behind (it stays for its 60 s lease), then exits 0. Runs as pid 1 of
 * a new PID namespace when `own_pid_ns`, so that two such processes share a pid. */
static pid_t spawn_holder(const char *name, bool own_pid_ns) {
    pid_t p = fork();
    CHECK(p >= 0);
    if (p > 0) return p;
    if (own_pid_ns) {
        /* The namespace is the next child's: it is pid 1 there. */
        if (unshare(CLONE_NEWPID) != 0) _exit(3);
        pid_t q = fork();
        if (q < 0) _exit(4);
        if (q > 0) {
            int status = 0;
            if (waitpid(q, &status, 0) != q) _exit(5);
            _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 6);
        }
        if (getpid() != 1) _exit(7);
    }
    dblock_config c = {.db = dbc, .owner = "lock_db_test", .lease_ms = 60000};
    dblock *d = NULL;
    dblock_hold *h = NULL;
    if (dblock_new(&c, &d, NULL, 0) != LOCK_OK) _exit(8);
    if (dblock_acquire(d, name, 5000, &h) != LOCK_OK) _exit(9);
    dblock_free(d); /* the row stays until its lease passes */
    _exit(0);
}

static void test_owner_unique(void) {
    char a_name[64], b_name[64], a_owner[80], b_owner[80], left[80];
    snprintf(a_name, sizeof(a_name), "%s", ls_name("owner-a"));
    snprintf(b_name, sizeof(b_name), "%s", ls_name("owner-b"));
    /* A pid namespace needs CAP_SYS_ADMIN; without it the two holders still run, with
     * two pids, and the test says so. */
    bool ns = true;
    pid_t probe = spawn_holder(a_name, true);
    int status = 0;
    CHECK(waitpid(probe, &status, 0) == probe);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
        printf("note: no PID namespace here (unshare: not permitted): the two holders have "
               "different pids, so this proves less\n");
        ns = false;
        probe = spawn_holder(a_name, false);
        CHECK(waitpid(probe, &status, 0) == probe);
    }
    CHECK(WIFEXITED(status));
    CHECK_INT_EQ(0, WEXITSTATUS(status));
    pid_t pb = spawn_holder(b_name, ns);
    CHECK(waitpid(pb, &status, 0) == pb && WIFEXITED(status));
    CHECK_INT_EQ(0, WEXITSTATUS(status));
    row_owner(a_name, a_owner, sizeof(a_owner), NULL, NULL);
    row_owner(b_name, b_owner, sizeof(b_owner), NULL, NULL);
    printf("owners written by the two holders%s: '%s' and '%s'\n",
           ns ? " (each pid 1 of its own PID namespace)" : "", a_owner, b_owner);
    CHECK(a_owner[0] && b_owner[0]);
    if (strcmp(a_owner, b_owner) == 0)
        CHECK_FAIL_("two handles in two processes share the owner '%s'", a_owner);
    /* The second holder's undo (DELETE by name and its own owner) misses the first's. */
    unsigned long long deleted = 1;
    row_owner(a_name, left, sizeof(left), b_owner, &deleted);
    CHECK_INT_EQ(0, deleted);
    row_owner(a_name, left, sizeof(left), NULL, NULL);
    CHECK_STR_EQ(a_owner, left);
    /* Clean up with each one's own owner. */
    row_owner(a_name, left, sizeof(left), a_owner, &deleted);
    CHECK_INT_EQ(1, deleted);
    row_owner(b_name, left, sizeof(left), b_owner, &deleted);
    CHECK_INT_EQ(1, deleted);
    printf("ok: same owner, pid and handle number in two processes: different owner "
           "strings, and one's delete by owner leaves the other's row\n");

    /* The longest configured owner (40 bytes) is shortened to keep the whole suffix. */
    const char *long_owner = "0123456789012345678901234567890123456789";
    dblock_config c = {.db = dbc, .owner = long_owner};
    dblock *d = NULL;
    CHECK_INT_EQ(LOCK_OK, dblock_new(&c, &d, NULL, 0));
    const char *o = dblock_owner(d), *tail = strrchr(o, ':');
    printf("owner of a handle configured with 40 bytes: '%s'\n", o);
    CHECK_INT_LE(strlen(o), 64);
    CHECK(strncmp(o, long_owner, 16) == 0 && tail && strlen(tail + 1) == 12);
    dblock_free(d);
}

int main(void) {
    CHECK_INT_EQ(STOCKDB_OK, stockdb_global_init());
    dbc = ls_db_config();
    test_config_and_unreachable();
    test_tokens_grow();
    test_timeout();
    test_stale_holder();
    test_renew();
    test_cancel();
    test_owner_unique();
    stockdb_global_end();
    printf("ok\n");
    return 0;
}
