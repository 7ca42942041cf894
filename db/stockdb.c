/* stockdb.c: the stock-deduction transaction on MariaDB Connector/C (see stockdb.h).
 *
 * A handle owns one MYSQL connection and the prepared statements below; both are made
 * together by db_connect() and dropped together by db_disconnect(), so "connected" and
 * "statements prepared" are one state. Every failure goes through deduct_fail(), which
 * decides between three ends: the connection is gone (drop it; retry only if no
 * transaction was open), the server refused a statement (roll back, report), or the
 * server picked us as a lock victim (roll back, STOCKDB_ERR_DEADLOCK). A COMMIT whose
 * reply was lost is the one case that cannot be decided locally: confirm_commit() asks
 * the database whether the order exists. */
#include "stockdb.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

/* ---------------------------------------------------------------- statements */

enum {
    ST_LOOKUP,          /* an order by request id, with its product's stock now */
    ST_CONFIRM,         /* the same, as a locking read: waits for an in-flight twin */
    ST_READ,            /* the seed's read */
    ST_READ_FOR_UPDATE, /* the read that takes the row lock */
    ST_UPDATE_ATOMIC,   /* the check inside the update */
    ST_UPDATE_ATOMIC_FENCED,
    ST_INSERT,
    ST_PEEK,                /* the sold-out pre-check: stock, and the key's order if any */
    ST_UPDATE_BATCH,        /* the seed's unconditional update, by k units */
    ST_UPDATE_BATCH_FENCED, /* the same, refused unless the fence is as we read it */
    ST_INSERT_BATCH,        /* the orders of a batch, one row per key of a JSON array */
    ST_SEG_READ,            /* ST_READ, ST_READ_FOR_UPDATE and the batch updates ... */
    ST_SEG_READ_FOR_UPDATE,
    ST_SEG_UPDATE_BATCH,
    ST_SEG_UPDATE_BATCH_FENCED, /* ... on one segment of a split product */
    ST_COUNT
};

/* A product's whole stock is product.stock plus its segments' (sql/schema.sql): the
 * sum of a primary-key range, 0 for a product that is not split. CAST keeps it an
 * integer (SUM of INT is DECIMAL). */
#define SEGMENTS_SUM                                                                               \
    "CAST(COALESCE((SELECT SUM(s.stock) FROM product_segment s WHERE s.product_id = p.id), 0)"     \
    " AS SIGNED)"

static const char *const stmt_sql[ST_COUNT] = {
    [ST_LOOKUP] = "SELECT o.id, o.product_id, p.stock + " SEGMENTS_SUM " FROM orders o"
                  " LEFT JOIN product p ON p.id = o.product_id WHERE o.request_id = ?",
    [ST_CONFIRM] = "SELECT id, product_id FROM orders WHERE request_id = ? LOCK IN SHARE MODE",
    [ST_READ] = "SELECT stock, fence, fence_kind, row_version FROM product WHERE id = ?",
    [ST_READ_FOR_UPDATE] = "SELECT stock, fence, fence_kind, row_version FROM product"
                           " WHERE id = ? FOR UPDATE",
    /* LAST_INSERT_ID(expr) hands the stock left back in the statement's own reply (its
     * insert id), so the deduction needs no read after it. Its check is in its own WHERE,
     * so it needs no compare-and-set; it bumps row_version like every write. */
    [ST_UPDATE_ATOMIC] = "UPDATE product SET stock = LAST_INSERT_ID(stock - 1),"
                         " row_version = row_version + 1 WHERE id = ? AND stock > 0",
    [ST_UPDATE_ATOMIC_FENCED] = "UPDATE product SET stock = LAST_INSERT_ID(stock - 1), fence = ?,"
                                " fence_kind = ?, row_version = row_version + 1"
                                " WHERE id = ? AND stock > 0 AND (fence <= ? OR fence_kind <> ?)",
    [ST_INSERT] =
        "INSERT INTO orders (product_id, instance, fence, request_id) VALUES (?, ?, ?, ?)",
    /* With no key, o.request_id = NULL matches nothing, so the order columns are NULL. */
    [ST_PEEK] = "SELECT p.stock + " SEGMENTS_SUM ", o.id, o.product_id FROM product p"
                " LEFT JOIN orders o ON o.request_id = ? WHERE p.id = ?",
    [ST_UPDATE_BATCH] =
        "UPDATE product SET stock = stock - ?, row_version = row_version + 1 WHERE id = ?",
    /* The fenced compare-and-set (sql/schema.sql): the row must still be the version our
     * check read, so nobody wrote in between, not even a holder of our own token whose
     * COMMIT arrived late; and no holder with a newer token of the same kind may have
     * written it. */
    [ST_UPDATE_BATCH_FENCED] = "UPDATE product SET stock = stock - ?, fence = ?, fence_kind = ?,"
                               " row_version = row_version + 1 WHERE id = ? AND row_version = ?"
                               " AND (fence <= ? OR fence_kind <> ?)",
    /* One constant statement for any number of orders: the request ids travel as one
     * JSON array parameter (null for none) and become rows in array order. RETURNING
     * (MariaDB 10.5+) hands back each row's real id, in that order, whatever the
     * server's auto_increment_increment or innodb_autoinc_lock_mode; its key comes back
     * too, so the order is checked, not assumed. */
    [ST_INSERT_BATCH] = "INSERT INTO orders (product_id, instance, fence, request_id)"
                        " SELECT ?, ?, ?, k.rid FROM JSON_TABLE(?, '$[*]' COLUMNS ("
                        "n FOR ORDINALITY, rid VARCHAR(100) PATH '$')) AS k ORDER BY k.n"
                        " RETURNING id, request_id",
    [ST_SEG_READ] = "SELECT stock, fence, fence_kind, row_version FROM product_segment"
                    " WHERE product_id = ? AND seg = ?",
    [ST_SEG_READ_FOR_UPDATE] = "SELECT stock, fence, fence_kind, row_version FROM product_segment"
                               " WHERE product_id = ? AND seg = ? FOR UPDATE",
    [ST_SEG_UPDATE_BATCH] = "UPDATE product_segment SET stock = stock - ?,"
                            " row_version = row_version + 1 WHERE product_id = ? AND seg = ?",
    [ST_SEG_UPDATE_BATCH_FENCED] =
        "UPDATE product_segment SET stock = stock - ?, fence = ?, fence_kind = ?,"
        " row_version = row_version + 1 WHERE product_id = ? AND seg = ? AND row_version = ?"
        " AND (fence <= ? OR fence_kind <> ?)",
};

/* Short names for error messages. */
static const char *const stmt_name[ST_COUNT] = {
    [ST_LOOKUP] = "SELECT order by request id",
    [ST_CONFIRM] = "SELECT order to confirm COMMIT",
    [ST_READ] = "SELECT stock, fence",
    [ST_READ_FOR_UPDATE] = "SELECT stock, fence FOR UPDATE",
    [ST_UPDATE_ATOMIC] = "UPDATE product (atomic)",
    [ST_UPDATE_ATOMIC_FENCED] = "UPDATE product (atomic, fenced)",
    [ST_INSERT] = "INSERT INTO orders",
    [ST_PEEK] = "SELECT stock and the key's order (pre-check)",
    [ST_UPDATE_BATCH] = "UPDATE product by k",
    [ST_UPDATE_BATCH_FENCED] = "UPDATE product by k (fenced)",
    [ST_INSERT_BATCH] = "INSERT INTO orders of a batch",
    [ST_SEG_READ] = "SELECT segment stock, fence",
    [ST_SEG_READ_FOR_UPDATE] = "SELECT segment stock, fence FOR UPDATE",
    [ST_SEG_UPDATE_BATCH] = "UPDATE product_segment by k",
    [ST_SEG_UPDATE_BATCH_FENCED] = "UPDATE product_segment by k (fenced)",
};

static const char sql_timeouts[] =
    "SET SESSION innodb_lock_wait_timeout = ?, idle_write_transaction_timeout = ?";
/* Each statement sees what is committed when it starts, so the statements of one
 * transaction never act on a stale snapshot (a batch that answers known keys and runs
 * again reads the stock afresh). */
static const char sql_isolation[] = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";
/* Ends an earlier session of this handle whose COMMIT may be in doubt (confirm_key). */
static const char sql_kill[] = "KILL CONNECTION ?";

/* ---------------------------------------------------------------- the handle */

struct stockdb {
    stockdb_config cfg;
    char instance[STOCKDB_INSTANCE_MAX + 1];
    MYSQL *conn;                /* NULL while disconnected */
    MYSQL_STMT *stmt[ST_COUNT]; /* all prepared while conn != NULL, else all NULL */
    unsigned long session_id;   /* the server's id of conn's session (mysql_thread_id) */
    bool in_trx;                /* a statement ran since the last COMMIT or ROLLBACK */
    uint64_t statements;        /* round trips sent for deductions and reads, see stockdb.h */
    char errstr[512];
};

/* Internal result of one attempt: the connection dropped while no transaction was open,
 * so the caller may reconnect and run the whole call again. Never returned to users. */
#define RETRY_IDLE 1

/* Handles made by this thread, so that mysql_thread_end runs after the last one. */
static _Thread_local unsigned thread_handles;

static void set_err(stockdb *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_err(stockdb *db, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(db->errstr, sizeof(db->errstr), fmt, ap);
    va_end(ap);
}

static bool is_lock_victim(unsigned err) {
    return err == ER_LOCK_DEADLOCK || err == ER_LOCK_WAIT_TIMEOUT;
}

static void db_disconnect(stockdb *db) {
    stockdb_conn_close(&db->conn, db->stmt, ST_COUNT);
    db->in_trx = false;
}

/* The session's timeouts, from the client's read and write timeout rw_timeout_s:
 *
 * innodb_lock_wait_timeout below it (rw - 2 s, at least 1 s), so a long row-lock wait
 * ends as STOCKDB_ERR_DEADLOCK with the connection intact rather than as a read timeout
 * (see stockdb.h).
 *
 * idle_write_transaction_timeout equal to it. A write transaction of ours is idle on
 * the server only between its statements, while the guard checks the lock before
 * COMMIT, and we give up on any reply after rw_timeout_s anyway. A session silent
 * longer than that with rows written has lost its client (a COMMIT lost in a partition,
 * a crashed or frozen process): the server then ends it and rolls it back, instead of
 * holding the product's row lock for wait_timeout (8 h by default) while every other
 * instance's deduction of the product waits and times out. Think time (--think-us)
 * falls before the first write, so it is not cut short. */
static unsigned set_timeouts(stockdb *db, unsigned rw_timeout_s) {
    MYSQL_STMT *st = mysql_stmt_init(db->conn);
    if (!st) return CR_OUT_OF_MEMORY;
    unsigned err = 0;
    long long secs[2] = {rw_timeout_s > 2 ? rw_timeout_s - 2 : 1, rw_timeout_s};
    MYSQL_BIND b[2];
    memset(b, 0, sizeof(b));
    for (int i = 0; i < 2; i++) {
        b[i].buffer_type = MYSQL_TYPE_LONGLONG;
        b[i].buffer = &secs[i];
    }
    if (mysql_stmt_prepare(st, sql_timeouts, sizeof(sql_timeouts) - 1) ||
        mysql_stmt_bind_param(st, b) || mysql_stmt_execute(st)) {
        err = mysql_stmt_errno(st);
        set_err(db, "%s: %s (%u)", sql_timeouts, mysql_stmt_error(st), err);
    }
    mysql_stmt_close(st);
    return err;
}

/* The rest of the session's set-up, once per connection: READ COMMITTED, and autocommit
 * off (the first statement of a deduction opens its transaction, so no START
 * TRANSACTION round trip). */
static unsigned set_session(stockdb *db) {
    unsigned err;
    if (mysql_real_query(db->conn, sql_isolation, sizeof(sql_isolation) - 1)) goto fail;
    if (mysql_autocommit(db->conn, 0)) goto fail;
    return 0;
fail:
    err = mysql_errno(db->conn);
    set_err(db, "session set-up: %s (%u)", mysql_error(db->conn), err);
    return err ? err : CR_UNKNOWN_ERROR;
}

/* Connects and prepares every statement, unless already connected. On failure the
 * handle stays disconnected and the next call tries again. */
static int db_connect(stockdb *db) {
    if (db->conn) return STOCKDB_OK;
    unsigned rw_s = db->cfg.rw_timeout_s ? db->cfg.rw_timeout_s : 10;
    unsigned err;
    /* CLIENT_FOUND_ROWS: an UPDATE reports the rows it matched, so "0 rows" means the
     * WHERE refused, never "matched but unchanged". */
    int rc =
        stockdb_conn_open(&db->cfg, CLIENT_FOUND_ROWS, &db->conn, db->errstr, sizeof(db->errstr));
    if (rc == STOCKDB_OK)
        rc = stockdb_conn_prepare(db->conn, db->stmt, stmt_sql, stmt_name, ST_COUNT, db->errstr,
                                  sizeof(db->errstr));
    if (rc != STOCKDB_OK) {
        db_disconnect(db);
        return rc;
    }
    if ((err = set_timeouts(db, rw_s)) != 0 || (err = set_session(db)) != 0) {
        db_disconnect(db);
        return stockdb_conn_gone(err) ? STOCKDB_ERR_CONNECT : STOCKDB_ERR_QUERY;
    }
    db->session_id = mysql_thread_id(db->conn);
    return STOCKDB_OK;
}

/* ---------------------------------------------------------------- a connection of one's own */

int stockdb_conn_open(const stockdb_config *c, unsigned long client_flags, MYSQL **out,
                      char *errbuf, size_t errcap) {
    unsigned connect_s = c->connect_timeout_s ? c->connect_timeout_s : 2;
    unsigned rw_s = c->rw_timeout_s ? c->rw_timeout_s : 10;
    unsigned protocol = MYSQL_PROTOCOL_TCP;
    MYSQL *m = mysql_init(NULL);
    *out = NULL;
    if (!m) {
        snprintf(errbuf, errcap, "mysql_init: out of memory");
        return STOCKDB_ERR_NOMEM;
    }
    mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &connect_s);
    mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &rw_s);
    mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &rw_s);
    mysql_options(m, MYSQL_OPT_PROTOCOL, &protocol);
    mysql_options(m, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (!mysql_real_connect(m, c->host, c->user, c->password, c->database, c->port, NULL,
                            client_flags)) {
        unsigned err = mysql_errno(m);
        snprintf(errbuf, errcap, "connect to %s:%u/%s: %s (%u)", c->host, c->port, c->database,
                 mysql_error(m), err);
        mysql_close(m);
        return err == CR_OUT_OF_MEMORY ? STOCKDB_ERR_NOMEM : STOCKDB_ERR_CONNECT;
    }
    *out = m;
    return STOCKDB_OK;
}

int stockdb_conn_prepare(MYSQL *conn, MYSQL_STMT **stmts, const char *const *sql,
                         const char *const *names, int n, char *errbuf, size_t errcap) {
    for (int i = 0; i < n; i++) {
        stmts[i] = mysql_stmt_init(conn);
        if (!stmts[i]) {
            snprintf(errbuf, errcap, "mysql_stmt_init: out of memory");
            return STOCKDB_ERR_NOMEM;
        }
        if (mysql_stmt_prepare(stmts[i], sql[i], strlen(sql[i]))) {
            unsigned err = mysql_stmt_errno(stmts[i]);
            snprintf(errbuf, errcap, names ? "prepare %s: %s (%u)" : "prepare \"%s\": %s (%u)",
                     names ? names[i] : sql[i], mysql_stmt_error(stmts[i]), err);
            return stockdb_conn_gone(err) ? STOCKDB_ERR_CONNECT : STOCKDB_ERR_QUERY;
        }
    }
    return STOCKDB_OK;
}

void stockdb_conn_close(MYSQL **conn, MYSQL_STMT **stmts, int n) {
    for (int i = 0; i < n; i++) {
        if (stmts[i]) mysql_stmt_close(stmts[i]);
        stmts[i] = NULL;
    }
    if (*conn) mysql_close(*conn);
    *conn = NULL;
}

bool stockdb_conn_gone(unsigned err) {
    switch (err) {
    case CR_CONNECTION_ERROR:
    case CR_CONN_HOST_ERROR:
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case CR_SERVER_LOST_EXTENDED:
    case CR_COMMANDS_OUT_OF_SYNC: /* protocol state unknown: only a new session is safe */
    case CR_ERR_NET_READ:
    case CR_ERR_NET_WRITE:
    case ER_SERVER_SHUTDOWN:
    case ER_CONNECTION_KILLED:
        return true;
    default:
        return false;
    }
}

/* ---------------------------------------------------------------- running statements */

static void bind_int(MYSQL_BIND *b, int32_t *v, my_bool *is_null) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONG;
    b->buffer = v;
    b->is_null = is_null;
}

static void bind_bigint(MYSQL_BIND *b, int64_t *v, my_bool *is_null) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_null = is_null;
}

static void bind_ubigint(MYSQL_BIND *b, uint64_t *v) {
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_unsigned = 1;
}

/* A string parameter; NULL s binds SQL NULL. */
static void bind_text(MYSQL_BIND *b, const char *s, unsigned long *len) {
    memset(b, 0, sizeof(*b));
    if (!s) {
        b->buffer_type = MYSQL_TYPE_NULL;
        return;
    }
    *len = strlen(s);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = (void *)s;
    b->buffer_length = *len;
    b->length = len;
}

/* Executes statement id with params. With results, fetches at most one row into them
 * and sets *found; otherwise sets *rows to the rows the statement matched. Returns 0 or
 * the client/server error number, with the text in db->errstr. */
static unsigned stmt_run(stockdb *db, int id, MYSQL_BIND *params, MYSQL_BIND *results, bool *found,
                         uint64_t *rows) {
    MYSQL_STMT *st = db->stmt[id];
    unsigned err = 0;

    /* A failed ROLLBACK drops the connection, and with it every statement: a caller
     * that goes on (to look a key up, say) gets "connection lost", never a NULL
     * statement. */
    if (!st) {
        set_err(db, "%s: not connected (the connection was dropped)", stmt_name[id]);
        return CR_SERVER_LOST;
    }
    db->statements++;
    db->in_trx = true; /* autocommit is off: every statement here opens or joins one */
    if (mysql_stmt_bind_param(st, params) || mysql_stmt_execute(st)) goto fail;
    if (!results) {
        if (rows) *rows = mysql_stmt_affected_rows(st);
        return 0;
    }
    if (mysql_stmt_bind_result(st, results) || mysql_stmt_store_result(st)) goto fail;
    int rc = mysql_stmt_fetch(st);
    if (rc == 1) goto fail;
    /* Every query here selects by a unique key, so there is at most one row and its
     * columns are all integers: truncation cannot happen. */
    *found = rc == 0 || rc == MYSQL_DATA_TRUNCATED;
    mysql_stmt_free_result(st);
    return 0;

fail:
    err = mysql_stmt_errno(st);
    set_err(db, "%s: %s (%u)", stmt_name[id], mysql_stmt_error(st), err);
    mysql_stmt_free_result(st);
    return err ? err : CR_UNKNOWN_ERROR;
}

/* Ends the open transaction. If even that fails, the connection is dropped, which makes
 * the server roll back: either way nothing of the transaction survives. The error text
 * of the failure that led here is kept. */
static void rollback(stockdb *db) {
    if (!db->conn) return;
    db->statements++;
    db->in_trx = false;
    if (mysql_rollback(db->conn)) db_disconnect(db);
}

/* COMMIT, counted. Returns 0 or the error number. */
static unsigned commit(stockdb *db) {
    db->statements++;
    if (mysql_commit(db->conn)) return mysql_errno(db->conn);
    db->in_trx = false;
    return 0;
}

/* Ends the transaction that reads (or a failed statement) left open. Even a plain READ
 * COMMITTED read holds a metadata lock on every table it read until its transaction
 * ends, so a connection left idle inside one makes an ALTER TABLE of those tables wait,
 * and every query queued behind the ALTER with it (for lock_wait_timeout, a day by
 * default). So no public call returns with a transaction open. It costs a round trip (a
 * ROLLBACK: whatever is open wrote nothing that is meant to stay) only when a statement
 * ran since the last COMMIT or ROLLBACK. */
static void end_trx(stockdb *db) {
    if (db->conn && db->in_trx) rollback(db);
}

/* The end of a deduction after statement error err (text already in errstr). */
static int deduct_fail(stockdb *db, unsigned err, bool in_trx) {
    if (stockdb_conn_gone(err)) {
        db_disconnect(db);
        if (!in_trx) return RETRY_IDLE;
        size_t n = strlen(db->errstr);
        snprintf(db->errstr + n, sizeof(db->errstr) - n,
                 "; connection lost inside the transaction, which the server rolls back");
        return STOCKDB_ERR_CONNECT;
    }
    if (in_trx) rollback(db);
    return is_lock_victim(err) ? STOCKDB_ERR_DEADLOCK : STOCKDB_ERR_QUERY;
}

/* Looks up the order of req->request_id (statement ST_LOOKUP or ST_CONFIRM). Sets
 * *found, and when found *order_id, *product_id and (ST_LOOKUP only) *stock. */
static unsigned lookup_order(stockdb *db, int id, const char *request_id, bool *found,
                             uint64_t *order_id, int32_t *product_id, int32_t *stock) {
    MYSQL_BIND p[1], r[3];
    unsigned long len;
    my_bool stock_null = 0;
    *stock = 0;
    bind_text(&p[0], request_id, &len);
    bind_ubigint(&r[0], order_id);
    bind_int(&r[1], product_id, NULL);
    bind_int(&r[2], stock, &stock_null);
    unsigned err = stmt_run(db, id, p, r, found, NULL);
    if (stock_null) *stock = 0;
    return err;
}

/* Fills *out as the replay of an existing order, or refuses a key of another product. */
static int replay(stockdb *db, const stockdb_request *req, uint64_t order_id, int32_t product_id,
                  int32_t stock, stockdb_result *out) {
    if (product_id != req->product_id) {
        set_err(db, "request id \"%s\" was already used for product %d, not %d", req->request_id,
                product_id, req->product_id);
        return STOCKDB_ERR_KEY_REUSED;
    }
    out->outcome = STOCKDB_DEDUCTED;
    out->stock = stock;
    out->order_id = order_id;
    out->replayed = true;
    return STOCKDB_OK;
}

/* Ends server session `id` (an earlier connection of this handle, so the service user
 * may kill it without any privilege) on the new connection. Its open transaction, if
 * any, is rolled back, and a COMMIT of it still on its way through the network can no
 * longer land. Best effort: a session that has ended already gives ER_NO_SUCH_THREAD,
 * and any other failure leaves the locking read of confirm_key to wait for the session
 * as before. Counted as one statement. It assumes the new connection reaches the same
 * server as the old one did (one MariaDB, as here): behind a proxy that fails over to
 * another server, the id could name an unrelated session there. */
static void kill_session(stockdb *db, unsigned long id) {
    MYSQL_STMT *st = mysql_stmt_init(db->conn);
    if (!st) return;
    unsigned long long v = id;
    MYSQL_BIND b;
    memset(&b, 0, sizeof(b));
    b.buffer_type = MYSQL_TYPE_LONGLONG;
    b.buffer = &v;
    b.is_unsigned = 1;
    db->statements++;
    if (mysql_stmt_prepare(st, sql_kill, sizeof(sql_kill) - 1) == 0 &&
        mysql_stmt_bind_param(st, &b) == 0)
        (void)mysql_stmt_execute(st);
    mysql_stmt_close(st);
}

/* COMMIT failed because the connection dropped: the transaction may or may not have
 * committed. Only an order row can tell, and only if it carries a request id: this
 * reconnects and looks `key` up. Before it looks, it kills the old session: the COMMIT
 * may have been lost on the way (a partition), leaving the old session on the server
 * with its transaction open, its row locks held and nobody to end it; killed, it rolls
 * back. The lookup is a locking read so that it waits for the old session's COMMIT or
 * rollback to finish instead of reading too early; its lock is released at once.
 * Returns STOCKDB_OK with *found (and *order_id, *product_id when found), or
 * STOCKDB_ERR_UNKNOWN with the reason in errstr (which keeps the COMMIT's own error in
 * front). */
static int confirm_key(stockdb *db, const char *key, bool *found, uint64_t *order_id,
                       int32_t *product_id) {
    char why[sizeof(db->errstr)], detail[sizeof(db->errstr)];
    int32_t unused;
    unsigned long old_session = db->session_id;
    snprintf(why, sizeof(why), "%s", db->errstr);
    db_disconnect(db);
    *found = false;
    /* Without a key nothing can be confirmed, but the old session is killed all the same,
     * so that its row locks are freed now rather than when the server times it out. A
     * server numbers its sessions upwards from 1 at start: a new id not above the old one
     * means the server restarted (the old session is gone with it), and the old id may
     * now be someone else's session, or our own. */
    bool connected = db_connect(db) == STOCKDB_OK;
    if (connected && db->session_id > old_session) kill_session(db, old_session);
    if (!key) {
        set_err(db, "%s; COMMIT reply lost and no request id to confirm it", why);
        return STOCKDB_ERR_UNKNOWN;
    }
    if (!connected) {
        snprintf(detail, sizeof(detail), "%s", db->errstr);
        set_err(db, "%s; COMMIT reply lost and reconnecting to confirm failed: %s", why, detail);
        return STOCKDB_ERR_UNKNOWN;
    }
    unsigned err = lookup_order(db, ST_CONFIRM, key, found, order_id, product_id, &unused);
    if (err) {
        if (stockdb_conn_gone(err)) db_disconnect(db);
        snprintf(detail, sizeof(detail), "%s", db->errstr);
        set_err(db, "%s; COMMIT reply lost and the lookup to confirm it failed: %s", why, detail);
        return STOCKDB_ERR_UNKNOWN;
    }
    rollback(db); /* the shared lock of the locking read */
    if (!*found)
        set_err(db, "%s; COMMIT reply lost, and the order is not in the database: not committed",
                why);
    else
        db->errstr[0] = '\0';
    return STOCKDB_OK;
}

/* ---------------------------------------------------------------- the atomic deduction */

/* Binds the parameters of the atomic UPDATE: (id) unfenced, (fence, kind, id, fence,
 * kind) fenced. */
static void bind_update_atomic(MYSQL_BIND *p, bool fenced, int64_t *fence, int32_t *kind,
                               int32_t *pid) {
    if (!fenced) {
        bind_int(&p[0], pid, NULL);
        return;
    }
    bind_bigint(&p[0], fence, NULL);
    bind_int(&p[1], kind, NULL);
    bind_int(&p[2], pid, NULL);
    bind_bigint(&p[3], fence, NULL);
    bind_int(&p[4], kind, NULL);
}

/* Binds the results of the reads of a row (ST_READ, ST_SEG_READ and their FOR UPDATE
 * forms): stock, fence, fence_kind, row_version. */
static void bind_row(MYSQL_BIND *r, int32_t *stock, int64_t *fence, int32_t *kind,
                     uint64_t *version) {
    bind_int(&r[0], stock, NULL);
    bind_bigint(&r[1], fence, NULL);
    bind_int(&r[2], kind, NULL);
    bind_ubigint(&r[3], version);
}

/* True when a row last fenced with (row_fence, row_kind) was written by a newer holder
 * than our token of our kind. Tokens of different kinds are not comparable: a row last
 * written under another lock service takes any token (a switch of lock mode), and the
 * row_version compare-and-set still refuses a write whose check is stale. */
static bool newer_holder_wrote(int64_t row_fence, int32_t row_kind, int64_t fence, int32_t kind) {
    return row_kind == kind && row_fence > fence;
}

/* One attempt at the atomic deduction on a connected handle: the check is inside the
 * UPDATE, so there is nothing to batch. Returns a STOCKDB_* code, or RETRY_IDLE when
 * the connection dropped before anything was written. A key seen before needs no
 * look-up first: the order INSERT's duplicate key says so, and the first order is the
 * answer. */
static int deduct_atomic(stockdb *db, const stockdb_request *req, stockdb_result *out) {
    int32_t pid = req->product_id, stock = 0, found_pid = 0, found_stock = 0;
    int32_t kind = req->fence_kind, row_kind = 0;
    int64_t fence = req->fence, row_fence = 0;
    uint64_t rows = 0, order_id = 0, row_version = 0;
    bool found = false, fenced = fence > 0;
    unsigned err;
    MYSQL_BIND p[5], r[4];

    int id = fenced ? ST_UPDATE_ATOMIC_FENCED : ST_UPDATE_ATOMIC;
    bind_update_atomic(p, fenced, &fence, &kind, &pid);
    if ((err = stmt_run(db, id, p, NULL, NULL, &rows))) return deduct_fail(db, err, false);
    if (rows == 0) {
        /* It changed nothing: one read tells why (sold out, no such product, fenced). */
        bind_int(&p[0], &pid, NULL);
        bind_row(r, &stock, &row_fence, &row_kind, &row_version);
        if ((err = stmt_run(db, ST_READ, p, r, &found, NULL))) return deduct_fail(db, err, true);
        rollback(db);
        if (!found) goto not_found;
        if (fenced && newer_holder_wrote(row_fence, row_kind, fence, kind)) goto fenced_out;
        if (stock <= 0) goto sold_out;
        set_err(db, "%s changed no row although product %d has stock %d", stmt_name[id], pid,
                stock);
        return STOCKDB_ERR_QUERY;
    }
    /* The stock the UPDATE left, from LAST_INSERT_ID(stock - 1): stock > 0 before it,
     * so the value is 0 or more and fits. */
    stock = (int32_t)mysql_stmt_insert_id(db->stmt[id]);
    out->stock = stock;

    MYSQL_BIND ins[4];
    unsigned long instance_len, rid_len;
    my_bool fence_null = !fenced;
    bind_int(&ins[0], &pid, NULL);
    bind_text(&ins[1], db->instance, &instance_len);
    bind_bigint(&ins[2], &fence, &fence_null);
    bind_text(&ins[3], req->request_id, &rid_len);
    if ((err = stmt_run(db, ST_INSERT, ins, NULL, NULL, &rows))) {
        if (err != ER_DUP_ENTRY || !req->request_id) return deduct_fail(db, err, true);
        /* The key has an order already (a retry, or a twin that committed first): ours
         * is undone and the first order is the answer. */
        rollback(db);
        goto lookup;
    }
    order_id = mysql_stmt_insert_id(db->stmt[ST_INSERT]);
    if (req->guard && req->guard(req->guard_arg) != 0) {
        rollback(db);
        set_err(db, "the guard refused the commit; rolled back");
        return STOCKDB_ERR_GUARD;
    }
    if ((err = commit(db))) {
        set_err(db, "COMMIT: %s (%u)", mysql_error(db->conn), err);
        if (!stockdb_conn_gone(err)) return deduct_fail(db, err, true); /* the server said no */
        uint64_t found_id = 0;
        int rc = confirm_key(db, req->request_id, &found, &found_id, &found_pid);
        if (rc != STOCKDB_OK) return rc;
        if (!found) return STOCKDB_ERR_CONNECT;
        if (found_id != order_id) return replay(db, req, found_id, found_pid, stock, out);
    }
    out->outcome = STOCKDB_DEDUCTED;
    out->order_id = order_id;
    return STOCKDB_OK;

sold_out:
    /* Sold out now, but this key may have bought before: its order is the answer. */
    if (!req->request_id) {
        out->outcome = STOCKDB_SOLD_OUT;
        out->stock = stock;
        return STOCKDB_OK;
    }
lookup:
    err = lookup_order(db, ST_LOOKUP, req->request_id, &found, &order_id, &found_pid, &found_stock);
    if (err) return deduct_fail(db, err, false);
    if (found) return replay(db, req, order_id, found_pid, found_stock, out);
    if (rows == 0 && stock <= 0) {
        out->outcome = STOCKDB_SOLD_OUT;
        out->stock = stock;
        return STOCKDB_OK;
    }
    set_err(db, "duplicate request id \"%s\", but no order with it exists", req->request_id);
    return STOCKDB_ERR_QUERY;
not_found:
    set_err(db, "no product with id %d", pid);
    return STOCKDB_ERR_NOT_FOUND;
fenced_out:
    set_err(db, "product %d was written under a newer lock token than %lld; rolled back", pid,
            (long long)fence);
    return STOCKDB_ERR_FENCED;
}

/* The pre-check's statement: the product's whole stock (its segments included) and,
 * when request_id is not NULL, that key's order (else *order_id = 0). Sets *found.
 * Returns 0 or the error number. */
static unsigned read_total(stockdb *db, int32_t product_id, const char *request_id, bool *found,
                           int32_t *stock, uint64_t *order_id, int32_t *order_product) {
    MYSQL_BIND p[2], r[3];
    int32_t pid = product_id;
    my_bool oid_null = 0, opid_null = 0;
    unsigned long key_len;
    *stock = 0;
    *order_id = 0;
    *order_product = 0;
    bind_text(&p[0], request_id, &key_len);
    bind_int(&p[1], &pid, NULL);
    bind_int(&r[0], stock, NULL);
    bind_ubigint(&r[1], order_id);
    r[1].is_null = &oid_null;
    bind_int(&r[2], order_product, &opid_null);
    unsigned err = stmt_run(db, ST_PEEK, p, r, found, NULL);
    if (oid_null) *order_id = 0;
    if (opid_null) *order_product = 0;
    return err;
}

/* ---------------------------------------------------------------- the batch */

/* What one attempt at a batch needs besides the batch: which items are already
 * answered (a key found in orders) and which item each one follows (the first item with
 * the same key; itself if none). */
typedef struct batch_state {
    stockdb_batch *b;
    size_t *leader;
    bool *done;
    /* Insert the orders one row at a time: set once a duplicate key could not be
     * found (see batch_once). */
    bool one_by_one;
} batch_state;

/* Looks up the orders of the keyed leaders not yet answered and answers those that
 * exist: replayed, or STOCKDB_ERR_KEY_REUSED for a key of another product. One
 * statement per key; this runs only on a duplicate key or when nothing is left to sell.
 * Returns 0 or the error number. */
static unsigned answer_known_keys(stockdb *db, batch_state *st, size_t *answered) {
    stockdb_batch *b = st->b;
    *answered = 0;
    for (size_t i = 0; i < b->n; i++) {
        stockdb_item *it = &b->items[i];
        if (st->done[i] || st->leader[i] != i || !it->request_id) continue;
        bool found = false;
        uint64_t order_id = 0;
        int32_t pid = 0, stock = 0;
        unsigned err = lookup_order(db, ST_LOOKUP, it->request_id, &found, &order_id, &pid, &stock);
        if (err) return err;
        if (!found) continue;
        stockdb_request req = {.product_id = b->product_id, .request_id = it->request_id};
        it->rc = replay(db, &req, order_id, pid, stock, &it->res);
        st->done[i] = true;
        (*answered)++;
    }
    return 0;
}

/* Appends key (NULL: JSON null) to the JSON array being built in *buf. Request ids are
 * at most STOCKDB_REQUEST_ID_MAX bytes; every byte that JSON cannot carry raw is
 * escaped, so any key arrives as it was. Returns false when out of memory. */
static bool json_add_key(char **buf, size_t *len, size_t *cap, const char *key) {
    size_t need = *len + 2 + (key ? 6 * strlen(key) + 2 : 4) + 2;
    if (need > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < need)
            c *= 2;
        char *grown = realloc(*buf, c);
        if (!grown) return false;
        *buf = grown;
        *cap = c;
    }
    char *o = *buf + *len;
    if (*len > 1) *o++ = ',';
    if (!key) {
        memcpy(o, "null", 4);
        o += 4;
    } else {
        *o++ = '"';
        for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
            if (*p == '"' || *p == '\\') {
                *o++ = '\\';
                *o++ = (char)*p;
            } else if (*p < 0x20) {
                o += snprintf(o, 7, "\\u%04x", *p);
            } else {
                *o++ = (char)*p;
            }
        }
        *o++ = '"';
    }
    *len = (size_t)(o - *buf);
    return true;
}

/* Runs ST_INSERT_BATCH with params and reads the id of each row it wrote, in order,
 * into ids[0..k-1]. Each row's key must be the key of item sel[j], as the statement
 * writes them in array order; anything else is an error, never a wrong id. Returns 0 or
 * the error number. */
static unsigned insert_returning(stockdb *db, stockdb_batch *b, MYSQL_BIND *params,
                                 const size_t *sel, size_t k, uint64_t *ids) {
    MYSQL_STMT *st = db->stmt[ST_INSERT_BATCH];
    uint64_t id = 0;
    char key[STOCKDB_REQUEST_ID_MAX + 1];
    unsigned long key_len = 0;
    my_bool key_null = 0;
    MYSQL_BIND r[2];
    size_t got = 0;
    int rc;

    db->statements++;
    db->in_trx = true;
    bind_ubigint(&r[0], &id);
    memset(&r[1], 0, sizeof(r[1]));
    r[1].buffer_type = MYSQL_TYPE_STRING;
    r[1].buffer = key;
    r[1].buffer_length = sizeof(key);
    r[1].length = &key_len;
    r[1].is_null = &key_null;
    if (mysql_stmt_bind_param(st, params) || mysql_stmt_execute(st) ||
        mysql_stmt_bind_result(st, r) || mysql_stmt_store_result(st))
        goto fail;
    while ((rc = mysql_stmt_fetch(st)) == 0 || rc == MYSQL_DATA_TRUNCATED) {
        const char *want = got < k ? b->items[sel[got]].request_id : NULL;
        bool same = got < k && (key_null ? !want
                                         : want && rc == 0 && key_len == strlen(want) &&
                                               memcmp(key, want, key_len) == 0);
        if (!same) {
            set_err(db, "%s: row %zu of %zu is not the order of its item",
                    stmt_name[ST_INSERT_BATCH], got + 1, k);
            mysql_stmt_free_result(st);
            return CR_UNKNOWN_ERROR;
        }
        ids[got++] = id;
    }
    if (rc == 1) goto fail;
    mysql_stmt_free_result(st);
    if (got != k) {
        set_err(db, "%s wrote %zu rows, not %zu", stmt_name[ST_INSERT_BATCH], got, k);
        return CR_UNKNOWN_ERROR;
    }
    return 0;
fail:;
    /* No mysql_stmt_free_result() here: a duplicate key ends the result after some rows
     * with an error, and Connector/C (3.3) would then wait for the rest of a result that
     * will never come, until the read timeout drops the connection. The next execute
     * starts clean without it. */
    unsigned err = mysql_stmt_errno(st);
    set_err(db, "%s: %s (%u)", stmt_name[ST_INSERT_BATCH], mysql_stmt_error(st), err);
    return err ? err : CR_UNKNOWN_ERROR;
}

/* The orders of a batch: rows for items sel[0..k-1], in that order, their ids in ids[].
 * One INSERT ... SELECT ... RETURNING over a JSON array of the keys; with one_by_one, a
 * single-row INSERT each, so that a duplicate key names its item: *dup_at is then the
 * index into sel of the row that failed. Returns 0 or the error number. */
static unsigned insert_orders(stockdb *db, stockdb_batch *b, const size_t *sel, size_t k,
                              uint64_t *ids, bool one_by_one, size_t *dup_at) {
    int32_t pid = b->product_id;
    int64_t fence = b->fence;
    my_bool fence_null = b->fence <= 0;
    unsigned long instance_len, key_len;
    uint64_t rows = 0;
    MYSQL_BIND p[4];
    unsigned err = 0;

    bind_int(&p[0], &pid, NULL);
    bind_text(&p[1], db->instance, &instance_len);
    bind_bigint(&p[2], &fence, &fence_null);
    if (one_by_one) {
        for (size_t j = 0; j < k; j++) {
            bind_text(&p[3], b->items[sel[j]].request_id, &key_len);
            *dup_at = j;
            if ((err = stmt_run(db, ST_INSERT, p, NULL, NULL, &rows))) return err;
            ids[j] = mysql_stmt_insert_id(db->stmt[ST_INSERT]);
        }
        return 0;
    }
    char *json = NULL;
    size_t len = 1, cap = 0;
    if (!json_add_key(&json, &len, &cap, "")) goto nomem; /* room, and the '[' below */
    json[0] = '[';
    len = 1;
    for (size_t j = 0; j < k; j++)
        if (!json_add_key(&json, &len, &cap, b->items[sel[j]].request_id)) goto nomem;
    json[len++] = ']';
    json[len] = '\0';
    bind_text(&p[3], json, &key_len);
    err = insert_returning(db, b, p, sel, k, ids);
    free(json);
    return err;
nomem:
    free(json);
    set_err(db, "out of memory for the keys of a batch");
    return CR_OUT_OF_MEMORY;
}

/* The end of a batch that writes nothing. A locking read (FOR_UPDATE) rolls back at
 * once to free its row lock; a plain read (READ_CHECK_UPDATE) holds no row lock, and
 * its transaction is ended with whatever look-ups follow it, by end_trx() when the
 * call returns. */
static void end_read(stockdb *db, stockdb_strategy strategy) {
    if (strategy == STOCKDB_FOR_UPDATE) rollback(db);
}

#define RETRY_KEYS  2 /* internal: keys were answered (or one_by_one set); run the rest again */
#define RETRY_STALE 3 /* internal: the compare-and-set found the row changed; read again */

/* Answers item i, whose single-row INSERT hit a duplicate key (one_by_one), after the
 * rollback: its order if a look-up finds it now, else an error for this item alone.
 * Returns RETRY_KEYS (the rest run again), or a STOCKDB_* error or RETRY_IDLE when the
 * look-up fails. */
static int answer_duplicate(stockdb *db, batch_state *st, size_t i) {
    stockdb_batch *b = st->b;
    stockdb_item *it = &b->items[i];
    bool found = false;
    uint64_t order_id = 0;
    int32_t pid = 0, stock = 0;
    if (it->request_id) {
        unsigned err = lookup_order(db, ST_LOOKUP, it->request_id, &found, &order_id, &pid, &stock);
        if (err) return deduct_fail(db, err, false);
    }
    if (found) {
        stockdb_request req = {.product_id = b->product_id, .request_id = it->request_id};
        it->rc = replay(db, &req, order_id, pid, stock, &it->res);
    } else {
        it->rc = STOCKDB_ERR_QUERY;
        set_err(db, "request id \"%s\" is refused as a duplicate, but no order has it",
                it->request_id ? it->request_id : "");
    }
    st->done[i] = true;
    return RETRY_KEYS;
}

/* One attempt at the batch on a connected handle. Returns STOCKDB_OK (every item not
 * done before has its answer), a STOCKDB_* error for the whole batch, RETRY_IDLE (the
 * connection dropped before anything was written), RETRY_KEYS, or RETRY_STALE (the
 * fenced write found the row changed since the check and was rolled back). */
static int batch_once(stockdb *db, stockdb_strategy strategy, batch_state *st, size_t *sel,
                      uint64_t *ids) {
    stockdb_batch *b = st->b;
    int32_t pid = b->product_id, seg = b->segment, stock = 0, k32;
    int32_t kind = b->fence_kind, seen_kind = 0;
    int64_t fence = b->fence, seen = 0;
    uint64_t rows = 0, version = 0;
    bool found = false, fenced = fence > 0, split = seg > 0;
    size_t k = 0, m = 0, answered;
    unsigned err;
    MYSQL_BIND p[8], r[4];
    int np = 0; /* the parameters bound so far */

    /* The check: read the stock and the fence once for the whole batch, of the product
     * row or of the segment's row. */
    bind_int(&p[0], &pid, NULL);
    bind_int(&p[1], &seg, NULL);
    bind_row(r, &stock, &seen, &seen_kind, &version);
    int id = strategy == STOCKDB_FOR_UPDATE ? (split ? ST_SEG_READ_FOR_UPDATE : ST_READ_FOR_UPDATE)
                                            : (split ? ST_SEG_READ : ST_READ);
    if ((err = stmt_run(db, id, p, r, &found, NULL))) return deduct_fail(db, err, false);
    if (!found && split) {
        /* No such segment: an empty one, if the product exists (it may be split over
         * fewer segments than the caller was told, or not at all). One more read, only
         * on this path. */
        int32_t total;
        uint64_t unused_id;
        int32_t unused_pid;
        if ((err = read_total(db, pid, NULL, &found, &total, &unused_id, &unused_pid)))
            return deduct_fail(db, err, false);
        stock = 0;
        seen = 0;
        seen_kind = 0;
        version = 0;
    }
    if (!found) {
        end_read(db, strategy);
        set_err(db, "no product with id %d", pid);
        return STOCKDB_ERR_NOT_FOUND;
    }
    if (fenced && newer_holder_wrote(seen, seen_kind, fence, kind)) {
        /* A newer holder has written already: nothing we read can be trusted. */
        end_read(db, strategy);
        goto fenced_out;
    }
    for (size_t i = 0; i < b->n; i++)
        if (!st->done[i] && st->leader[i] == i) m++;
    k = stock > 0 ? ((size_t)stock < m ? (size_t)stock : m) : 0;

    if (k == 0) {
        /* Nothing to sell. A key that bought before still gets its order. */
        end_read(db, strategy);
        if ((err = answer_known_keys(db, st, &answered))) return deduct_fail(db, err, false);
        for (size_t i = 0; i < b->n; i++) {
            if (st->done[i] || st->leader[i] != i) continue;
            b->items[i].rc = STOCKDB_OK;
            b->items[i].res = (stockdb_result){.outcome = STOCKDB_SOLD_OUT, .stock = stock};
            st->done[i] = true;
        }
        return STOCKDB_OK;
    }

    if (b->think_us) {
        /* The experiment's stand-in for the business logic between check and write,
         * once per batch: it stands for the work around one check-and-update. */
        struct timespec ts = {b->think_us / 1000000, (long)(b->think_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }

    /* The write: k units at once. Unfenced it is the seed's unconditional write (so an
     * unlocked run still oversells); fenced it is a compare-and-set on the row_version
     * the check read, which refuses it after ANY write in between: a stale holder's, or
     * the late COMMIT of a batch made under our own token or an older one. */
    k32 = (int32_t)k;
    bind_int(&p[np++], &k32, NULL);
    if (fenced) {
        bind_bigint(&p[np++], &fence, NULL);
        bind_int(&p[np++], &kind, NULL);
    }
    bind_int(&p[np++], &pid, NULL);
    if (split) bind_int(&p[np++], &seg, NULL);
    if (fenced) {
        bind_ubigint(&p[np++], &version);
        bind_bigint(&p[np++], &fence, NULL);
        bind_int(&p[np++], &kind, NULL);
    }
    id = split ? (fenced ? ST_SEG_UPDATE_BATCH_FENCED : ST_SEG_UPDATE_BATCH)
               : (fenced ? ST_UPDATE_BATCH_FENCED : ST_UPDATE_BATCH);
    if ((err = stmt_run(db, id, p, NULL, NULL, &rows))) return deduct_fail(db, err, true);
    if (rows == 0) {
        rollback(db);
        /* The row changed after our check. The caller reads it again once: a newer
         * holder's token then shows as fenced, anything else gets a fresh check. */
        if (fenced) {
            set_err(db, "product %d changed between the check and the write; rolled back", pid);
            return RETRY_STALE;
        }
        set_err(db, "no product with id %d (deleted after the check)", pid);
        return STOCKDB_ERR_NOT_FOUND;
    }

    /* The ledger: the first k leaders in arrival order get the units. */
    size_t n_sel = 0;
    for (size_t i = 0; i < b->n && n_sel < k; i++)
        if (!st->done[i] && st->leader[i] == i) sel[n_sel++] = i;
    size_t dup_at = 0;
    if ((err = insert_orders(db, b, sel, k, ids, st->one_by_one, &dup_at))) {
        if (err != ER_DUP_ENTRY) return deduct_fail(db, err, true);
        /* A key has an order already (a retry of an earlier request): undo, answer the
         * keys that exist from their orders, and run the rest again. */
        rollback(db);
        if (st->one_by_one) return answer_duplicate(db, st, sel[dup_at]);
        if ((err = answer_known_keys(db, st, &answered))) return deduct_fail(db, err, false);
        /* The database refused a key that no look-up finds: two keys it holds for one
         * (a request_id column whose collation is not yet the byte-exact one of
         * sql/schema.sql), or an order deleted since. Never fail the whole batch for
         * it: insert its orders one row at a time to learn which item is refused. */
        if (answered == 0) st->one_by_one = true;
        return RETRY_KEYS;
    }

    if (b->guard && b->guard(b->guard_arg) != 0) {
        rollback(db);
        set_err(db, "the guard refused the commit; the batch of %zu was rolled back", k);
        return STOCKDB_ERR_GUARD;
    }
    if ((err = commit(db))) {
        set_err(db, "COMMIT: %s (%u)", mysql_error(db->conn), err);
        if (!stockdb_conn_gone(err)) return deduct_fail(db, err, true); /* the server said no */
        /* The transaction is atomic: any one keyed order of it tells whether it all
         * committed. */
        const char *key = NULL;
        uint64_t key_id = 0, found_id = 0;
        int32_t found_pid = 0;
        for (size_t j = 0; j < k && !key; j++) {
            key = b->items[sel[j]].request_id;
            key_id = ids[j];
        }
        int rc = confirm_key(db, key, &found, &found_id, &found_pid);
        if (rc != STOCKDB_OK) return rc;
        if (!found) return STOCKDB_ERR_CONNECT;
        if (found_id != key_id) {
            set_err(db, "COMMIT reply lost, and request id \"%s\" has order %llu, not ours (%llu)",
                    key, (unsigned long long)found_id, (unsigned long long)key_id);
            return STOCKDB_ERR_UNKNOWN;
        }
    }

    for (size_t j = 0; j < k; j++) {
        stockdb_item *it = &b->items[sel[j]];
        it->rc = STOCKDB_OK;
        it->res = (stockdb_result){
            .outcome = STOCKDB_DEDUCTED, .stock = stock - (int32_t)j - 1, .order_id = ids[j]};
        st->done[sel[j]] = true;
    }
    for (size_t i = 0; i < b->n; i++) {
        if (st->done[i] || st->leader[i] != i) continue;
        b->items[i].rc = STOCKDB_OK;
        b->items[i].res = (stockdb_result){.outcome = STOCKDB_SOLD_OUT, .stock = stock - k32};
        st->done[i] = true;
    }
    return STOCKDB_OK;

fenced_out:
    if (split)
        set_err(db,
                "segment %d of product %d was written under a newer lock token than %lld; "
                "rolled back",
                seg, pid, (long long)fence);
    else
        set_err(db, "product %d was written under a newer lock token than %lld; rolled back", pid,
                (long long)fence);
    return STOCKDB_ERR_FENCED;
}

/* ---------------------------------------------------------------- public API */

int stockdb_global_init(void) {
    return mysql_library_init(0, NULL, NULL) ? STOCKDB_ERR_NOMEM : STOCKDB_OK;
}

void stockdb_global_end(void) {
    mysql_library_end();
}

stockdb *stockdb_new(const stockdb_config *cfg, const char *instance) {
    if (!cfg) return NULL;
    if (!instance) instance = "";
    size_t n = strlen(instance);
    if (n > STOCKDB_INSTANCE_MAX) return NULL;
    stockdb *db = calloc(1, sizeof(*db));
    if (!db) return NULL;
    if (thread_handles == 0 && mysql_thread_init()) {
        free(db);
        return NULL;
    }
    thread_handles++;
    db->cfg = *cfg;
    memcpy(db->instance, instance, n + 1);
    /* One eager attempt, so a bad password shows up at start; failure is not fatal. */
    (void)db_connect(db);
    return db;
}

void stockdb_free(stockdb *db) {
    if (!db) return;
    db_disconnect(db);
    memset(db->cfg.password, 0, sizeof(db->cfg.password));
    free(db);
    if (thread_handles > 0 && --thread_handles == 0) mysql_thread_end();
}

/* Checks a request id: NULL or 1..STOCKDB_REQUEST_ID_MAX bytes. */
static bool request_id_ok(stockdb *db, const char *what, const char *key) {
    if (!key) return true;
    size_t n = strlen(key);
    if (n > 0 && n <= STOCKDB_REQUEST_ID_MAX) return true;
    set_err(db, "%s: request id must be 1..%d bytes, not %zu", what, STOCKDB_REQUEST_ID_MAX, n);
    return false;
}

int stockdb_deduct(stockdb *db, stockdb_strategy strategy, const stockdb_request *req,
                   stockdb_result *out) {
    if (!db) return STOCKDB_ERR_CONFIG;
    db->errstr[0] = '\0';
    if (!req || !out) {
        set_err(db, "stockdb_deduct: req and out are required");
        return STOCKDB_ERR_CONFIG;
    }
    if (strategy != STOCKDB_ATOMIC) {
        /* The read-check-update strategies are a batch of one. */
        stockdb_item item = {.request_id = req->request_id};
        stockdb_batch b = {.product_id = req->product_id,
                           .fence = req->fence,
                           .fence_kind = req->fence_kind,
                           .guard = req->guard,
                           .guard_arg = req->guard_arg,
                           .think_us = req->think_us,
                           .items = &item,
                           .n = 1};
        int rc = stockdb_deduct_batch(db, strategy, &b);
        if (rc == STOCKDB_OK) rc = item.rc;
        *out = rc == STOCKDB_OK ? item.res : (stockdb_result){0};
        return rc;
    }
    if (!request_id_ok(db, "stockdb_deduct", req->request_id)) return STOCKDB_ERR_CONFIG;
    if (req->fence < 0) {
        set_err(db, "stockdb_deduct: negative fence %lld", (long long)req->fence);
        return STOCKDB_ERR_CONFIG;
    }
    for (int attempt = 0;; attempt++) {
        memset(out, 0, sizeof(*out));
        int rc = db_connect(db);
        if (rc != STOCKDB_OK) return rc;
        rc = deduct_atomic(db, req, out);
        if (rc == RETRY_IDLE && attempt == 0) continue;
        end_trx(db);
        return rc == RETRY_IDLE ? STOCKDB_ERR_CONNECT : rc; /* errstr says why */
    }
}

int stockdb_deduct_batch(stockdb *db, stockdb_strategy strategy, stockdb_batch *b) {
    if (!db) return STOCKDB_ERR_CONFIG;
    db->errstr[0] = '\0';
    if (!b || !b->items || b->n == 0 || b->n > STOCKDB_BATCH_MAX) {
        set_err(db, "stockdb_deduct_batch: 1..%d items are required", STOCKDB_BATCH_MAX);
        return STOCKDB_ERR_CONFIG;
    }
    if (strategy != STOCKDB_READ_CHECK_UPDATE && strategy != STOCKDB_FOR_UPDATE) {
        set_err(db, "stockdb_deduct_batch: strategy %d does not batch", (int)strategy);
        return STOCKDB_ERR_CONFIG;
    }
    if (b->fence < 0) {
        set_err(db, "stockdb_deduct_batch: negative fence %lld", (long long)b->fence);
        return STOCKDB_ERR_CONFIG;
    }
    if (b->segment < 0) {
        set_err(db, "stockdb_deduct_batch: negative segment %d", (int)b->segment);
        return STOCKDB_ERR_CONFIG;
    }
    for (size_t i = 0; i < b->n; i++)
        if (!request_id_ok(db, "stockdb_deduct_batch", b->items[i].request_id))
            return STOCKDB_ERR_CONFIG;

    size_t *leader = malloc(b->n * sizeof(*leader)), *sel = malloc(b->n * sizeof(*sel));
    uint64_t *ids = malloc(b->n * sizeof(*ids));
    bool *done = calloc(b->n, sizeof(*done));
    int rc = STOCKDB_ERR_NOMEM;
    if (!leader || !sel || !ids || !done) {
        set_err(db, "stockdb_deduct_batch: out of memory");
        goto out;
    }
    /* Two items with one key are one deduction: the later follows the first. Keys are
     * compared byte for byte, as the database compares them (orders.request_id is
     * utf8mb4_nopad_bin, sql/schema.sql). A batch is at most STOCKDB_BATCH_MAX items, so
     * the quadratic scan stays small. */
    for (size_t i = 0; i < b->n; i++) {
        const char *key = b->items[i].request_id;
        leader[i] = i;
        for (size_t j = 0; key && j < i; j++) {
            const char *other = b->items[j].request_id;
            if (other && strcmp(other, key) == 0) {
                leader[i] = j;
                break;
            }
        }
        b->items[i].rc = STOCKDB_OK;
        memset(&b->items[i].res, 0, sizeof(b->items[i].res));
    }
    batch_state st = {.b = b, .leader = leader, .done = done};
    /* Each RETRY_KEYS answers at least one key, but the one that turns one_by_one on,
     * so there are at most n + 1 of them; an idle connection lost before the first
     * statement is retried once, and so is a compare-and-set that found the row changed
     * (then it is STOCKDB_ERR_FENCED). */
    for (int idle_retries = 0, stale_retries = 0;;) {
        rc = db_connect(db);
        if (rc != STOCKDB_OK) goto out;
        rc = batch_once(db, strategy, &st, sel, ids);
        if (rc == RETRY_KEYS) continue;
        if (rc == RETRY_STALE) {
            if (++stale_retries < 2) continue;
            rc = STOCKDB_ERR_FENCED; /* errstr says why */
            break;
        }
        if (rc != RETRY_IDLE) break;
        if (++idle_retries == 2) {
            rc = STOCKDB_ERR_CONNECT; /* errstr says why */
            break;
        }
    }
    if (rc == STOCKDB_OK) {
        /* A follower gets its leader's answer; a deduction is a replay for it. */
        for (size_t i = 0; i < b->n; i++) {
            if (leader[i] == i) continue;
            b->items[i] = (stockdb_item){.request_id = b->items[i].request_id,
                                         .rc = b->items[leader[i]].rc,
                                         .res = b->items[leader[i]].res};
            if (b->items[i].res.outcome == STOCKDB_DEDUCTED) b->items[i].res.replayed = true;
        }
    }
out:
    end_trx(db);
    free(leader);
    free(sel);
    free(ids);
    free(done);
    return rc;
}

int stockdb_peek(stockdb *db, int32_t product_id, const char *request_id, int32_t *stock,
                 uint64_t *order_id, int32_t *order_product) {
    if (!db) return STOCKDB_ERR_CONFIG;
    db->errstr[0] = '\0';
    if (!stock || !order_id || !order_product) {
        set_err(db, "stockdb_peek: stock, order_id and order_product are required");
        return STOCKDB_ERR_CONFIG;
    }
    if (!request_id_ok(db, "stockdb_peek", request_id)) return STOCKDB_ERR_CONFIG;
    for (int attempt = 0;; attempt++) {
        int rc = db_connect(db);
        if (rc != STOCKDB_OK) return rc;
        int32_t value = 0, opid = 0;
        uint64_t oid = 0;
        bool found = false;
        /* One read, then the ROLLBACK that ends its transaction (end_trx): it wrote
         * nothing, but an open transaction holds metadata locks while the worker idles. */
        unsigned err = read_total(db, product_id, request_id, &found, &value, &oid, &opid);
        if (!err) {
            end_trx(db);
            if (!found) {
                set_err(db, "no product with id %d", product_id);
                return STOCKDB_ERR_NOT_FOUND;
            }
            *stock = value;
            *order_id = oid;
            *order_product = opid;
            return STOCKDB_OK;
        }
        rc = deduct_fail(db, err, false);
        if (rc == RETRY_IDLE && attempt == 0) continue;
        end_trx(db);
        return rc == RETRY_IDLE ? STOCKDB_ERR_CONNECT : rc;
    }
}

/* The pitfall's snapshot (stockdb.h). The session runs READ COMMITTED; SET TRANSACTION
 * changes the level of the next transaction only, and only while none is open, so any
 * open transaction is ended first. */
int stockdb_open_snapshot(stockdb *db, int32_t product_id) {
    static const char rr[] = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ";
    if (!db) return STOCKDB_ERR_CONFIG;
    db->errstr[0] = '\0';
    int rc = db_connect(db);
    if (rc != STOCKDB_OK) return rc;
    rollback(db);
    if (!db->conn) return STOCKDB_ERR_CONNECT;
    db->statements++;
    if (mysql_real_query(db->conn, rr, sizeof(rr) - 1)) {
        unsigned err = mysql_errno(db->conn);
        set_err(db, "%s: %s (%u)", rr, mysql_error(db->conn), err);
        rc = deduct_fail(db, err, false);
        return rc == RETRY_IDLE ? STOCKDB_ERR_CONNECT : rc;
    }
    int32_t pid = product_id, stock = 0, kind = 0;
    int64_t fence = 0;
    uint64_t version = 0;
    bool found = false;
    MYSQL_BIND p[1], r[4];
    bind_int(&p[0], &pid, NULL);
    bind_row(r, &stock, &fence, &kind, &version);
    unsigned err = stmt_run(db, ST_READ, p, r, &found, NULL);
    if (err) {
        rc = deduct_fail(db, err, true);
        return rc == RETRY_IDLE ? STOCKDB_ERR_CONNECT : rc;
    }
    return STOCKDB_OK;
}

void stockdb_end_transaction(stockdb *db) {
    if (db) end_trx(db);
}

uint64_t stockdb_statements(const stockdb *db) {
    return db ? db->statements : 0;
}

int stockdb_get_stock(stockdb *db, int32_t product_id, int32_t *stock) {
    uint64_t order_id;
    int32_t order_product;
    /* The pre-check's statement without a key: the join on a NULL key matches nothing. */
    return stockdb_peek(db, product_id, NULL, stock, &order_id, &order_product);
}

int stockdb_ping(stockdb *db) {
    if (!db) return STOCKDB_ERR_CONFIG;
    db->errstr[0] = '\0';
    for (int attempt = 0;; attempt++) {
        int rc = db_connect(db);
        if (rc != STOCKDB_OK) return rc;
        if (mysql_ping(db->conn) == 0) return STOCKDB_OK;
        unsigned err = mysql_errno(db->conn);
        set_err(db, "ping: %s (%u)", mysql_error(db->conn), err);
        db_disconnect(db);
        if (!stockdb_conn_gone(err)) return STOCKDB_ERR_QUERY;
        if (attempt == 1) return STOCKDB_ERR_CONNECT;
    }
}

const char *stockdb_errstr(const stockdb *db) {
    return db ? db->errstr : "";
}

const char *stockdb_strerror(int code) {
    switch (code) {
    case STOCKDB_OK:
        return "ok";
    case STOCKDB_ERR_CONFIG:
        return "bad configuration or argument";
    case STOCKDB_ERR_CONNECT:
        return "database unreachable; nothing committed";
    case STOCKDB_ERR_QUERY:
        return "database statement failed; rolled back";
    case STOCKDB_ERR_NOT_FOUND:
        return "no such product";
    case STOCKDB_ERR_FENCED:
        return "refused: a newer lock holder wrote the row";
    case STOCKDB_ERR_GUARD:
        return "refused by the guard before commit; rolled back";
    case STOCKDB_ERR_UNKNOWN:
        return "commit outcome unknown";
    case STOCKDB_ERR_NOMEM:
        return "out of memory";
    case STOCKDB_ERR_DEADLOCK:
        return "deadlock or lock wait timeout; rolled back";
    case STOCKDB_ERR_KEY_REUSED:
        return "the request id was already used for another product";
    default:
        return "unknown error code";
    }
}
