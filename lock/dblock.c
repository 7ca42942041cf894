/* dblock.c: article 001's lock table on MariaDB / MySQL, with a lease and a fencing token.
 *
 * A row of stock_lock (sql/schema.sql) is the lock:
 *     stock_lock(name PRIMARY KEY, owner, token AUTO_INCREMENT UNIQUE, expires_at)
 *   - acquire: INSERT (name, owner, NOW(6) + lease). Success means held, and the row's
 *     AUTO_INCREMENT token (the statement's insert id) is the fencing token. A
 *     duplicate key means "held by someone": first an atomic takeover is tried, DELETE
 *     ... WHERE name = ? AND expires_at < NOW(6), which removes the row only if its
 *     lease has passed by the database's clock (a crashed holder's row), and if it did,
 *     the INSERT is tried again at once. Otherwise the waiter sleeps with exponential
 *     backoff and jitter (1 ms doubling up to poll_max_ms, never past its deadline) and
 *     tries again: the database has no notification to wait on, but it is never spun on;
 *   - release: DELETE ... WHERE name = ? AND owner = ? AND token = ?, so only the owner
 *     of this very acquisition can delete it; a holder whose row was taken over
 *     deletes nothing (LOCK_LOST);
 *   - every statement is a prepared statement on the handle's own connection, in
 *     autocommit mode: the lock row is committed, and visible to every other process,
 *     before the caller's stock transaction (on another connection) begins.
 *
 * Fencing is sound here: the token comes from an AUTO_INCREMENT counter in the same
 * server as the stock, allocated once the lock is held: the INSERT's own value is not
 * enough, since InnoDB allocates it when the INSERT starts, not when its row goes in (a
 * waiter that took N and was delayed could insert after a later holder's N+1 had been
 * inserted, held and deleted, and hold with the smaller token: lock_mutex_db saw it
 * under load). So the holder makes its row again at once (REPLACE, ST_RETOKEN), which
 * allocates a value after the previous holder's release, hence after the previous
 * holder's own REPLACE: larger. One statement more per acquisition. MariaDB keeps the
 * counter across restarts (since 10.2.4; MySQL before 8.0 did not, and an empty table
 * restarted there would hand out small tokens again). Gaps (failed INSERTs use values
 * too) do not matter.
 *
 * The lease is judged by two clocks: the database's (NOW(6), for the takeover) and the
 * holder's monotonic clock (dblock_check: LOST once the lease minus a safety margin has
 * passed since the INSERT was sent). A holder paused past its lease is refused by the
 * fence in the stock write, as for the other lock kinds.
 *
 *
 * A handle is one MySQL connection: call stockdb_global_init() first (the client
 * library's rule, stockdb.h); handles reconnect by themselves. The calls have the
 * contracts and thread rules of a lease library (lease_pool_int.h); dblock_int.h
 * declares them. The file ends with the registry's row, dblock_kind (lock.h).
 *
 * A handle owns one autocommit MYSQL connection and its prepared statements, made
 * together by dl_connect() and dropped together by dl_disconnect(), like stockdb.c and
 * with its connection helpers (stockdb_conn_*), so both connect the same way.
 * dl_exec() runs one statement and sorts its failure into: the connection is gone
 * (dropped; the caller decides whether repeating is safe), a duplicate key (the lock
 * is held), a lock victim (deadlock or lock wait timeout: try again later), or any
 * other refusal. */
#include "dblock_int.h"
#include "lease_pool_int.h"
#include "lock.h"
#include "lock_clock.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

enum { ST_INSERT, ST_RETOKEN, ST_TAKEOVER, ST_RELEASE, ST_UNDO, ST_RENEW, ST_COUNT };

#define RENEW_SQL                                                                                  \
    "UPDATE stock_lock SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND"                 \
    " WHERE name = ? AND owner = ? AND token = ?"

/* UTC_TIMESTAMP, not NOW: the session time zone (and its daylight saving jumps) must not
 * move a lease. */
static const char *const stmt_sql[ST_COUNT] = {
    [ST_INSERT] = "INSERT INTO stock_lock (name, owner, expires_at)"
                  " VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)",
    /* Once held: the same row made again, with a token allocated now (the fencing
     * token; see the top of the file). Only the holder's row has this name, so the
     * REPLACE replaces exactly it. */
    [ST_RETOKEN] = "REPLACE INTO stock_lock (name, owner, expires_at)"
                   " VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)",
    /* The takeover: only a row whose lease has passed by the server's clock. */
    [ST_TAKEOVER] = "DELETE FROM stock_lock WHERE name = ? AND expires_at < UTC_TIMESTAMP(6)",
    [ST_RELEASE] = "DELETE FROM stock_lock WHERE name = ? AND owner = ? AND token = ?",
    /* After an INSERT whose reply was lost: our row, if it was made. The handle holds
     * no other row of this name (no reentrancy), so owner + name is exactly that one. */
    [ST_UNDO] = "DELETE FROM stock_lock WHERE name = ? AND owner = ?",
    /* The watchdog's renewal: a full lease from the server's now, for this very
     * acquisition only. A row that was taken over has another owner and token, so it is
     * not touched. Prepared only on a handle that renews (dl_exec), so that the service
     * user needs UPDATE (expires_at) only where --lease-renew is on. Keep it last. */
    [ST_RENEW] = RENEW_SQL,
};
/* The same, for the lazy prepare (dl_exec), which takes a table of its own. */
static const char *const renew_sql[1] = {RENEW_SQL};

/* Internal results of dl_exec, never returned to users. */
#define DL_DUP    1 /* duplicate key: the lock is held */
#define DL_VICTIM 2 /* deadlock or lock wait timeout: nothing happened, try again */

#define OWNER_MAX 64

struct dblock_hold {
    dblock *d;
    dblock_hold *next;
    int64_t token;
    /* Monotonic: sent + lease - margin, of the INSERT or of the latest renewal that
     * succeeded. Atomic because a renewer thread moves it forward (dblock_renew) while
     * the holder's thread reads it (dblock_check). */
    atomic_llong valid_until_us;
    char name[DBLOCK_NAME_MAX + 1];
};

struct dblock {
    stockdb_config cfg;
    char owner[OWNER_MAX + 1];
    int lease_ms, margin_ms, poll_max_ms;
    MYSQL *conn;
    MYSQL_STMT *stmt[ST_COUNT];
    dblock_hold *holds;
    const atomic_int *cancel; /* the config's; may be NULL */
    unsigned rand_state;
    dblock_stats st;
    char errstr[512];
};

/* ---------------------------------------------------------------- helpers */

static void set_err(dblock *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_err(dblock *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->errstr, sizeof(d->errstr), fmt, ap);
    va_end(ap);
}

static void bind_str(MYSQL_BIND *b, const char *s, unsigned long *len) {
    memset(b, 0, sizeof(*b));
    *len = (unsigned long)strlen(s);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = (void *)s;
    b->buffer_length = *len;
    b->length = len;
}

static void bind_i64(MYSQL_BIND *b, int64_t *v) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
}

/* ---------------------------------------------------------------- connection */

static void dl_disconnect(dblock *d) {
    stockdb_conn_close(&d->conn, d->stmt, ST_COUNT);
}

/* stockdb_conn_*'s codes as dblock's. */
static int dl_code(int stockdb_rc) {
    if (stockdb_rc == STOCKDB_ERR_NOMEM) return LOCK_ERR_NOMEM;
    if (stockdb_rc == STOCKDB_ERR_QUERY) return LOCK_ERR_SERVER;
    return stockdb_rc == STOCKDB_OK ? LOCK_OK : LOCK_ERR_CONNECTION;
}

static int dl_connect(dblock *d) {
    if (d->conn) return LOCK_OK;
    /* CLIENT_FOUND_ROWS: the renewal's UPDATE must count the row it matched, even in
     * the (same-microsecond) case where its new expires_at equals the old one. INSERT
     * and DELETE report the same either way. */
    int rc = stockdb_conn_open(&d->cfg, CLIENT_FOUND_ROWS, &d->conn, d->errstr, sizeof(d->errstr));
    if (rc != STOCKDB_OK) return dl_code(rc);
    /* Autocommit on purpose: each statement commits, so the lock row is visible to
     * everyone as soon as the INSERT returns. */
    if (mysql_autocommit(d->conn, 1)) {
        set_err(d, "autocommit: %s", mysql_error(d->conn));
        dl_disconnect(d);
        return LOCK_ERR_CONNECTION;
    }
    /* Statements are named by their SQL in errors (names NULL). */
    rc = stockdb_conn_prepare(d->conn, d->stmt, stmt_sql, NULL, ST_RENEW, d->errstr,
                              sizeof(d->errstr));
    if (rc != STOCKDB_OK) dl_disconnect(d);
    return dl_code(rc);
}

/* Runs statement `st` with params (connecting first if needed). On LOCK_OK,
 * *affected (if not NULL) is the rows changed and *insert_id (if not NULL) the
 * AUTO_INCREMENT value. Otherwise DL_DUP, DL_VICTIM, LOCK_ERR_CONNECTION (the
 * connection is dropped; *sent says whether the statement may have reached the server),
 * LOCK_ERR_SERVER or LOCK_ERR_NOMEM. */
static int dl_exec(dblock *d, int st, MYSQL_BIND *params, uint64_t *affected, uint64_t *insert_id,
                   bool *sent) {
    *sent = false;
    int rc = dl_connect(d);
    if (rc != LOCK_OK) return rc;
    if (st == ST_RENEW && !d->stmt[ST_RENEW]) {
        /* The one statement dl_connect leaves out (the renewal), on first use. */
        rc = stockdb_conn_prepare(d->conn, &d->stmt[ST_RENEW], renew_sql, NULL, 1, d->errstr,
                                  sizeof(d->errstr));
        if (rc != STOCKDB_OK) {
            if (d->stmt[st]) mysql_stmt_close(d->stmt[st]);
            d->stmt[st] = NULL;
            if (rc == STOCKDB_ERR_CONNECT) dl_disconnect(d);
            return dl_code(rc);
        }
    }
    MYSQL_STMT *s = d->stmt[st];
    d->st.ops++;
    if (mysql_stmt_bind_param(s, params) == 0) {
        *sent = true;
        if (mysql_stmt_execute(s) == 0) {
            if (affected) *affected = (uint64_t)mysql_stmt_affected_rows(s);
            if (insert_id) *insert_id = (uint64_t)mysql_stmt_insert_id(s);
            return LOCK_OK;
        }
    }
    unsigned err = mysql_stmt_errno(s);
    set_err(d, "\"%s\": %s (%u)", stmt_sql[st], mysql_stmt_error(s), err);
    if (err == ER_DUP_ENTRY) return DL_DUP;
    if (err == ER_LOCK_DEADLOCK || err == ER_LOCK_WAIT_TIMEOUT) return DL_VICTIM;
    if (stockdb_conn_gone(err)) {
        dl_disconnect(d);
        return LOCK_ERR_CONNECTION;
    }
    return err == CR_OUT_OF_MEMORY ? LOCK_ERR_NOMEM : LOCK_ERR_SERVER;
}

/* Runs an idempotent DELETE, once more after a reconnect if the connection was gone. */
static int dl_delete(dblock *d, int st, MYSQL_BIND *params, uint64_t *affected) {
    bool sent;
    int rc = dl_exec(d, st, params, affected, NULL, &sent);
    if (rc == LOCK_ERR_CONNECTION) rc = dl_exec(d, st, params, affected, NULL, &sent);
    return rc;
}

/* ---------------------------------------------------------------- handle */

/* Fills buf with random bytes from the kernel. 0, or -1 with errno set. */
static int dl_random(unsigned char *buf, size_t len) {
    size_t got = 0;
    while (got < len) {
        ssize_t r = getrandom(buf + got, len - got, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

int dblock_new(const dblock_config *cfg, dblock **out, char *errbuf, size_t errcap) {
    static unsigned seq;
    if (errbuf && errcap) errbuf[0] = '\0';
    if (!out) return LOCK_ERR_ARGS;
    *out = NULL;
    if (!cfg) return LOCK_ERR_ARGS;
    dblock *d = calloc(1, sizeof(*d));
    if (!d) return LOCK_ERR_NOMEM;
    int rc = LOCK_ERR_ARGS;
    const char *owner = cfg->owner ? cfg->owner : "dblock";
    d->cfg = cfg->db;
    d->lease_ms = cfg->lease_ms ? cfg->lease_ms : 10000;
    d->margin_ms = cfg->safety_margin_ms ? cfg->safety_margin_ms : d->lease_ms / 10 + 2;
    d->poll_max_ms = cfg->poll_max_ms ? cfg->poll_max_ms : 50;
    d->cancel = cfg->cancel;
    if (strlen(owner) > 40 || d->lease_ms < 1 || cfg->safety_margin_ms < 0 ||
        d->margin_ms >= d->lease_ms || d->poll_max_ms < 1) {
        set_err(d, "bad configuration: want an owner of at most 40 bytes, lease_ms >= 1 above "
                   "the safety margin, poll_max_ms >= 1");
        goto fail;
    }
    /* The handle number makes owners unique within the process. Across processes the
     * pid and the instance name are not enough: two containers of one image often run
     * their service as the same pid with the same default name (stockd-PORT), and the
     * undo after a lost INSERT reply deletes by owner. So 48 random bits follow; the
     * configured part is shortened, not the suffix, if the whole would pass 64 bytes
     * (stock_lock.owner). */
    unsigned n = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
    char suffix[48];
    unsigned char rnd[6];
    if (dl_random(rnd, sizeof(rnd)) != 0) {
        set_err(d, "getrandom: %s", strerror(errno));
        rc = LOCK_ERR_ARGS;
        goto fail;
    }
    int sn = snprintf(suffix, sizeof(suffix), ":%ld:%u:%02x%02x%02x%02x%02x%02x", (long)getpid(), n,
                      rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
    int keep = OWNER_MAX - sn;
    snprintf(d->owner, sizeof(d->owner), "%.*s%s", keep, owner, suffix);
    d->rand_state = (unsigned)getpid() * 2654435761u ^ n ^ (unsigned)lock_now_us();
    (void)mysql_thread_init();
    if ((rc = dl_connect(d)) != LOCK_OK) goto fail;
    *out = d;
    return LOCK_OK;

fail:
    if (errbuf && errcap) snprintf(errbuf, errcap, "%s", d->errstr);
    dblock_free(d);
    return rc;
}

void dblock_free(dblock *d) {
    if (!d) return;
    while (d->holds) {
        dblock_hold *h = d->holds;
        d->holds = h->next;
        free(h);
    }
    dl_disconnect(d);
    memset(d->cfg.password, 0, sizeof(d->cfg.password));
    free(d);
}

/* ---------------------------------------------------------------- the lock */

/* One round: INSERT; if held, the takeover DELETE and, if it removed an expired row,
 * the INSERT again. LOCK_OK with *token set, DL_DUP (held: wait), or an error. */
static int dl_try(dblock *d, const char *name, int64_t *token) {
    MYSQL_BIND p[3];
    unsigned long name_len, owner_len;
    int64_t lease_us = (int64_t)d->lease_ms * 1000;
    for (int round = 0; round < 2; round++) {
        bind_str(&p[0], name, &name_len);
        bind_str(&p[1], d->owner, &owner_len);
        bind_i64(&p[2], &lease_us);
        uint64_t id = 0;
        bool sent;
        int rc = dl_exec(d, ST_INSERT, p, NULL, &id, &sent);
        if (rc == LOCK_OK) {
            /* Held: the token, allocated now (the REPLACE), binds as the INSERT did. */
            bind_str(&p[0], name, &name_len);
            bind_str(&p[1], d->owner, &owner_len);
            bind_i64(&p[2], &lease_us);
            id = 0;
            rc = dl_exec(d, ST_RETOKEN, p, NULL, &id, &sent);
            if (rc == LOCK_OK && (id == 0 || id > INT64_MAX)) {
                set_err(d, "REPLACE INTO stock_lock gave no AUTO_INCREMENT token");
                rc = LOCK_ERR_SERVER;
            }
            if (rc == LOCK_OK) {
                *token = (int64_t)id;
                return LOCK_OK;
            }
            /* Our row, with whichever token, is given up: undone below as after a lost
             * INSERT, and the caller waits or fails as then. */
            sent = true;
            if (rc != LOCK_ERR_CONNECTION) {
                bind_str(&p[0], name, &name_len);
                bind_str(&p[1], d->owner, &owner_len);
                uint64_t undone = 0;
                int urc = dl_delete(d, ST_UNDO, p, &undone);
                return urc == LOCK_OK ? (rc == DL_VICTIM ? DL_DUP : rc) : urc;
            }
        }
        if (rc == LOCK_ERR_CONNECTION) {
            /* The INSERT may have committed with its reply lost: undo it by owner once
             * the connection is back, and go on waiting as if it had been held. */
            if (!sent) return rc;
            bind_str(&p[0], name, &name_len);
            bind_str(&p[1], d->owner, &owner_len);
            uint64_t undone = 0;
            rc = dl_delete(d, ST_UNDO, p, &undone);
            return rc == LOCK_OK ? DL_DUP : rc;
        }
        if (rc != DL_DUP) return rc == DL_VICTIM ? DL_DUP : rc;
        if (round == 1) return DL_DUP;
        bind_str(&p[0], name, &name_len);
        uint64_t taken = 0;
        rc = dl_delete(d, ST_TAKEOVER, p, &taken);
        if (rc == DL_VICTIM) return DL_DUP;
        if (rc != LOCK_OK) return rc;
        if (taken == 0) return DL_DUP;
        d->st.takeovers++;
    }
    return DL_DUP;
}

int dblock_acquire(dblock *d, const char *name, int timeout_ms, dblock_hold **out) {
    if (!out) return LOCK_ERR_ARGS;
    *out = NULL;
    if (!d || !name) return LOCK_ERR_ARGS;
    d->errstr[0] = '\0';
    size_t n = strlen(name);
    if (n == 0 || n > DBLOCK_NAME_MAX) {
        set_err(d, "bad lock name (want 1..%d bytes)", DBLOCK_NAME_MAX);
        return LOCK_ERR_ARGS;
    }
    for (dblock_hold *h = d->holds; h; h = h->next) {
        if (strcmp(h->name, name) == 0) {
            set_err(d, "lock %s is already held by this handle", name);
            return LOCK_ERR_ARGS;
        }
    }
    dblock_hold *h = calloc(1, sizeof(*h));
    if (!h) return LOCK_ERR_NOMEM;
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : lock_now_us() + (int64_t)timeout_ms * 1000;
    int64_t backoff_us = 1000;
    int rc;

    for (;;) {
        /* Checked before every try, so a wait ends at most one backoff sleep
         * (poll_max_ms) after the flag is set, and an acquire after it never takes the
         * lock. */
        if (d->cancel && atomic_load(d->cancel)) {
            set_err(d, "lock %s: cancelled", name);
            rc = LOCK_ERR_CANCELLED;
            goto out;
        }
        int64_t sent = lock_now_us();
        int64_t token = 0;
        rc = dl_try(d, name, &token);
        if (rc == LOCK_OK) {
            h->d = d;
            h->token = token;
            atomic_store(&h->valid_until_us, sent + (int64_t)(d->lease_ms - d->margin_ms) * 1000);
            memcpy(h->name, name, n + 1);
            h->next = d->holds;
            d->holds = h;
            *out = h;
            h = NULL;
            d->st.acquired++;
            goto out;
        }
        if (rc != DL_DUP) goto out;
        int64_t now = lock_now_us();
        if (now >= deadline) {
            set_err(d, "lock %s: not acquired within %d ms", name, timeout_ms);
            d->st.timeouts++;
            rc = LOCK_ERR_TIMEOUT;
            goto out;
        }
        /* Backoff with jitter (50..100% of the step), so waiters of one row do not
         * arrive in lockstep; the step doubles up to poll_max_ms. */
        int64_t wait = backoff_us / 2 + (int64_t)(rand_r(&d->rand_state) % (backoff_us / 2 + 1));
        if (deadline - now < wait) wait = deadline - now;
        lock_sleep_us(wait);
        d->st.sleeps++;
        if (backoff_us < (int64_t)d->poll_max_ms * 1000) backoff_us *= 2;
        if (backoff_us > (int64_t)d->poll_max_ms * 1000)
            backoff_us = (int64_t)d->poll_max_ms * 1000;
    }

out:
    free(h);
    return rc;
}

int dblock_check(const dblock_hold *h) {
    if (!h) return LOCK_ERR_ARGS;
    return lock_now_us() < atomic_load(&h->valid_until_us) ? LOCK_OK : LOCK_LOST;
}

int dblock_renew(dblock *via, dblock_hold *h) {
    if (!via || !h) return LOCK_ERR_ARGS;
    via->errstr[0] = '\0';
    /* The hold's name and token and its handle's owner and lease were fixed before it
     * was acquired and are only read here. */
    const dblock *owner = h->d;
    MYSQL_BIND p[4];
    unsigned long name_len, owner_len;
    int64_t lease_us = (int64_t)owner->lease_ms * 1000, token = h->token;
    bind_i64(&p[0], &lease_us);
    bind_str(&p[1], h->name, &name_len);
    bind_str(&p[2], owner->owner, &owner_len);
    bind_i64(&p[3], &token);
    int64_t sent = lock_now_us();
    uint64_t matched = 0;
    bool was_sent;
    /* Safe to repeat after a reconnect: a second renewal extends from a later now. */
    int rc = dl_exec(via, ST_RENEW, p, &matched, NULL, &was_sent);
    if (rc == LOCK_ERR_CONNECTION) {
        sent = lock_now_us();
        rc = dl_exec(via, ST_RENEW, p, &matched, NULL, &was_sent);
    }
    if (rc == DL_VICTIM || rc == DL_DUP) return LOCK_ERR_SERVER;
    if (rc != LOCK_OK) return rc;
    if (matched == 0) {
        set_err(via, "lock %s: no row with our token %lld any more", h->name, (long long)token);
        via->st.renew_lost++;
        return LOCK_LOST;
    }
    lock_clock_extend(&h->valid_until_us,
                      sent + (int64_t)(owner->lease_ms - owner->margin_ms) * 1000);
    via->st.renewals++;
    return LOCK_OK;
}

int64_t dblock_token(const dblock_hold *h) {
    return h ? h->token : 0;
}

int dblock_release(dblock_hold *h) {
    if (!h) return LOCK_ERR_ARGS;
    dblock *d = h->d;
    d->errstr[0] = '\0';
    for (dblock_hold **p = &d->holds; *p; p = &(*p)->next) {
        if (*p == h) {
            *p = h->next;
            break;
        }
    }
    MYSQL_BIND p[3];
    unsigned long name_len, owner_len;
    int64_t token = h->token;
    bind_str(&p[0], h->name, &name_len);
    bind_str(&p[1], d->owner, &owner_len);
    bind_i64(&p[2], &token);
    uint64_t deleted = 0;
    int rc = dl_delete(d, ST_RELEASE, p, &deleted);
    if (rc == DL_VICTIM) {
        rc = LOCK_ERR_SERVER;
    } else if (rc == LOCK_OK && deleted == 0) {
        set_err(d, "lock %s: no row with our token %lld any more", h->name, (long long)token);
        d->st.release_lost++;
        rc = LOCK_LOST;
    } else if (rc == LOCK_OK) {
        d->st.released++;
    }
    free(h);
    return rc;
}

int dblock_ping(dblock *d) {
    if (!d) return LOCK_ERR_ARGS;
    d->errstr[0] = '\0';
    for (int attempt = 0; attempt < 2; attempt++) {
        int rc = dl_connect(d);
        if (rc != LOCK_OK) return rc;
        d->st.ops++;
        if (mysql_ping(d->conn) == 0) return LOCK_OK;
        set_err(d, "ping: %s", mysql_error(d->conn));
        dl_disconnect(d);
    }
    return LOCK_ERR_CONNECTION;
}

/* The lock table's part of lock_view_read (lock.h). A lock is one row of stock_lock
 * (sql/schema.sql), and waiters poll for it, so a view is that row: its owner, token and
 * the lease left by MySQL's clock, or nothing when the lock is free. The owner column
 * is the holder's lock_config.owner followed by ":PID:N:RANDOM" (dblock_new), which the
 * view drops to name the instance. */
int dblock_view(dblock *d, const char *name, lock_view *out) {
    static const char sql[] =
        "SELECT owner, token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) DIV 1000"
        " FROM stock_lock WHERE name = ?";
    size_t n = name ? strlen(name) : 0;
    if (!d || n == 0 || n > DBLOCK_NAME_MAX) return LOCK_ERR_ARGS;
    d->errstr[0] = '\0';
    int rc = dl_connect(d);
    if (rc != LOCK_OK) return rc;
    /* A statement of its own, prepared per call: a view is read at most every 200 ms. */
    MYSQL_STMT *st = mysql_stmt_init(d->conn);
    if (!st) return LOCK_ERR_NOMEM;
    unsigned long name_len = (unsigned long)n, owner_len = 0;
    char buf[128];
    long long tok = 0, left = 0;
    my_bool left_null = 0;
    MYSQL_BIND p[1] = {{.buffer_type = MYSQL_TYPE_STRING,
                        .buffer = (void *)name,
                        .buffer_length = name_len,
                        .length = &name_len}};
    MYSQL_BIND r[3] = {
        {.buffer_type = MYSQL_TYPE_STRING,
         .buffer = buf,
         .buffer_length = sizeof(buf),
         .length = &owner_len},
        {.buffer_type = MYSQL_TYPE_LONGLONG, .buffer = &tok},
        {.buffer_type = MYSQL_TYPE_LONGLONG, .buffer = &left, .is_null = &left_null},
    };
    d->st.ops++;
    int frc = 1;
    if (mysql_stmt_prepare(st, sql, sizeof(sql) - 1) != 0 || mysql_stmt_bind_param(st, p) != 0 ||
        mysql_stmt_execute(st) != 0 || mysql_stmt_bind_result(st, r) != 0 ||
        (frc = mysql_stmt_fetch(st)) == 1) {
        set_err(d, "reading the lock row: %s", mysql_stmt_error(st));
        rc = mysql_stmt_errno(st) >= CR_MIN_ERROR ? LOCK_ERR_CONNECTION : LOCK_ERR_SERVER;
        mysql_stmt_close(st);
        if (rc == LOCK_ERR_CONNECTION) dl_disconnect(d);
        return rc;
    }
    mysql_stmt_close(st);
    snprintf(out->path, sizeof(out->path), "stock_lock.name = '%s'", name);
    if (frc != 0 && frc != MYSQL_DATA_TRUNCATED) return LOCK_OK; /* no row: the lock is free */
    size_t len = owner_len < sizeof(buf) ? owner_len : sizeof(buf) - 1;
    buf[len] = '\0';
    /* The last three ':' fields are dblock_new's suffix. */
    for (int i = 0; i < 3; i++) {
        char *colon = strrchr(buf, ':');
        if (colon) *colon = '\0';
    }
    lock__lease_view_holder(out, name, tok, left_null ? -1 : left, buf);
    return LOCK_OK;
}

const char *dblock_owner(const dblock *d) {
    return d ? d->owner : "";
}

void dblock_get_stats(const dblock *d, dblock_stats *out) {
    if (!out) return;
    if (!d) {
        memset(out, 0, sizeof(*out));
        return;
    }
    *out = d->st;
}

const char *dblock_errstr(const dblock *d) {
    return d ? d->errstr : "";
}

const char *dblock_strerror(int code) {
    return lock__lease_strerror(code, "no connection to the database",
                                "the database refused a lock statement");
}

/* ---------------------------------------------------------------- the kind */

/* The registry's row (lock.h): a lease kind, pooled by lease_pool.c. A handle is made
 * on a worker thread, which has run mysql_thread_init() for its own stockdb handle
 * already; MariaDB Connector/C lets a connection move between threads as long as one
 * thread at a time uses it, which the pool guarantees. */

static int dblock__lease_open(const lock_config *cfg, const atomic_int *cancel, void **handle,
                              char *err, size_t errcap) {
    /* dblock takes an owner of at most 40 bytes; the instance name may be longer. */
    char owner[41];
    const char *o = cfg->owner ? cfg->owner : "";
    size_t n = strnlen(o, sizeof(owner) - 1);
    memcpy(owner, o, n);
    owner[n] = '\0';
    *handle = NULL;
    if (!cfg->db) {
        snprintf(err, errcap, "db-lock: no database configured");
        return LOCK_ERR_ARGS;
    }
    dblock_config c = {.db = *cfg->db, .owner = owner, .lease_ms = cfg->lease_ms, .cancel = cancel};
    dblock *d = NULL;
    int rc = dblock_new(&c, &d, err, errcap);
    memset(c.db.password, 0, sizeof(c.db.password));
    *handle = d;
    return rc;
}

static uint64_t dblock__lease_ops(const void *handle) {
    return ((const dblock *)handle)->st.ops;
}

LOCK_LEASE_VIEW_SHIM(dblock)
/* No ping: /health checks MySQL through the worker's own connection already. */
LOCK_LEASE_OPS(dblock, NULL, dblock__lease_view)

const lock_kind dblock_kind =
    LOCK_LEASE_KIND("db-lock", "mysql_lock_table", LOCK_FENCE_TABLE,
                    "the lock table is unavailable; nothing was deducted", &dblock__lease);
