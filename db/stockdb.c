/* stockdb.c: the handle, its session and the reads of stockdb.h, on MariaDB Connector/C.
 *
 * A handle owns one MYSQL connection and the prepared statements below; both are made
 * together by stockdb__connect() and dropped together by stockdb__disconnect(), so
 * "connected" and "statements prepared" are one state. This file also runs statements
 * for the other db/ files (stockdb__run, commit, rollback) and turns every MySQL error
 * number into a STOCKDB_* code (stockdb__code), keeping the number in the handle. Every
 * failure of a call ends in stockdb__fail(), which decides between three ends: the
 * connection is gone (drop it; retry only if nothing was written), the server refused a
 * statement (roll back, report), or the server picked us as a lock victim (roll back,
 * STOCKDB_ERR_DEADLOCK). The connection kit that lock/dblock.c borrows (stockdb_conn_*)
 * is here too, so both connect the same way. The deductions are in stockdb_deduct.c (one
 * request), stockdb_batch.c (a batch) and stockdb_multi.c (several products), the
 * mysql:// parser in stockdb_url.c; stockdb_int.h is what they share. */
#include "stockdb_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

/* ---------------------------------------------------------------- statements */
/* A product's whole stock is product.stock plus its segments' (sql/schema.sql): the
 * sum of a primary-key range, 0 for a product that is not split. CAST keeps it an
 * integer (SUM of INT is DECIMAL). */
#define SEGMENTS_SUM                                                                               \
    "CAST(COALESCE((SELECT SUM(s.stock) FROM product_segment s WHERE s.product_id = p.id), 0)"     \
    " AS SIGNED)"

#define TERMS                                                                                      \
    "per_user_limit, DATE_FORMAT(UTC_TIMESTAMP(6) + INTERVAL reserve_seconds SECOND,"              \
    " '%Y-%m-%d %H:%i:%s.%f')"
/* The answer's text of an order's expires_at. */
#define EXPIRES_TEXT "DATE_FORMAT(expires_at, '%Y-%m-%d %H:%i:%s.%f')"

static const char *const stmt_sql[STOCKDB__ST_COUNT] = {
    [STOCKDB__ST_LOOKUP] = "SELECT o.id, o.product_id, p.stock + " SEGMENTS_SUM " FROM orders o"
                           " LEFT JOIN product p ON p.id = o.product_id WHERE o.request_id = ?",
    [STOCKDB__ST_CONFIRM] =
        "SELECT id, product_id FROM orders WHERE request_id = ? LOCK IN SHARE MODE",
    /* The row, and the product's terms: its limit, and when a reservation made now would
     * expire (NULL when it sells at once), on the database's UTC clock. */
    [STOCKDB__ST_READ] = "SELECT stock, fence, fence_kind, row_version, " TERMS " FROM product"
                         " WHERE id = ?",
    [STOCKDB__ST_READ_FOR_UPDATE] = "SELECT stock, fence, fence_kind, row_version, " TERMS
                                    " FROM product WHERE id = ? FOR UPDATE",
    /* LAST_INSERT_ID(expr) hands the stock left back in the statement's own reply (its
     * insert id), so the deduction needs no read after it. Its check is in its own WHERE,
     * so it needs no compare-and-set; it bumps row_version like every write. */
    [STOCKDB__ST_UPDATE_ATOMIC] = "UPDATE product SET stock = LAST_INSERT_ID(stock - 1),"
                                  " row_version = row_version + 1 WHERE id = ? AND stock > 0",
    [STOCKDB__ST_UPDATE_ATOMIC_FENCED] =
        "UPDATE product SET stock = LAST_INSERT_ID(stock - 1), fence = ?,"
        " fence_kind = ?, row_version = row_version + 1"
        " WHERE id = ? AND stock > 0 AND (fence <= ? OR fence_kind <> ?)",
    [STOCKDB__ST_INSERT] = "INSERT INTO orders (product_id, instance, fence, request_id, user,"
                           " state, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
    /* With no key, o.request_id = NULL matches nothing, so the order columns are NULL. */
    [STOCKDB__ST_PEEK] = "SELECT p.stock + " SEGMENTS_SUM ", o.id, o.product_id FROM product p"
                         " LEFT JOIN orders o ON o.request_id = ? WHERE p.id = ?",
    [STOCKDB__ST_UPDATE_BATCH] =
        "UPDATE product SET stock = stock - ?, row_version = row_version + 1 WHERE id = ?",
    /* The fenced compare-and-set (sql/schema.sql): the row must still be the version our
     * check read, so nobody wrote in between, not even a holder of our own token whose
     * COMMIT arrived late; and no holder with a newer token of the same kind may have
     * written it. */
    [STOCKDB__ST_UPDATE_BATCH_FENCED] =
        "UPDATE product SET stock = stock - ?, fence = ?, fence_kind = ?,"
        " row_version = row_version + 1 WHERE id = ? AND row_version = ?"
        " AND (fence <= ? OR fence_kind <> ?)",
    /* One constant statement for any number of orders: the request ids travel as one
     * JSON array parameter (null for none) and become rows in array order. RETURNING
     * (MariaDB 10.5+) hands back each row's real id, in that order, whatever the
     * server's auto_increment_increment or innodb_autoinc_lock_mode; its key comes back
     * too, so the order is checked, not assumed. */
    [STOCKDB__ST_INSERT_BATCH] =
        "INSERT INTO orders (product_id, instance, fence, request_id, user, state, expires_at)"
        " SELECT ?, ?, ?, k.rid, k.usr, ?, ? FROM JSON_TABLE(?, '$[*]' COLUMNS ("
        "n FOR ORDINALITY, rid VARCHAR(100) PATH '$[0]', usr VARCHAR(64) PATH '$[1]')) AS k"
        " ORDER BY k.n RETURNING id, product_id, request_id",
    /* The orders of a transaction over several products (stockdb_deduct_multi), one
     * statement for all: ST_INSERT_BATCH with the product and fence per key. (Its rows are
     * read and written one by one, with the statements above: one statement for all rows,
     * an UPDATE joined with a JSON_TABLE, cost MariaDB about 1.8x the CPU.)
     * ([product, fence or null, key or null] per element). */
    [STOCKDB__ST_INSERT_MULTI] =
        "INSERT INTO orders (product_id, instance, fence, request_id, user)"
        " SELECT k.pid, ?, k.f, k.rid, k.usr FROM JSON_TABLE(?, '$[*]' COLUMNS ("
        "n FOR ORDINALITY, pid INT PATH '$[0]', f BIGINT PATH '$[1]',"
        " rid VARCHAR(100) PATH '$[2]', usr VARCHAR(64) PATH '$[3]')) AS k ORDER BY k.n"
        " RETURNING id, product_id, request_id",
    /* A segment carries no terms: a split product has no limit and sells at once
     * (docs/orders.md). */
    [STOCKDB__ST_SEG_READ] = "SELECT stock, fence, fence_kind, row_version, NULL, NULL"
                             " FROM product_segment WHERE product_id = ? AND seg = ?",
    [STOCKDB__ST_SEG_READ_FOR_UPDATE] =
        "SELECT stock, fence, fence_kind, row_version, NULL, NULL FROM product_segment"
        " WHERE product_id = ? AND seg = ? FOR UPDATE",
    [STOCKDB__ST_SEG_UPDATE_BATCH] =
        "UPDATE product_segment SET stock = stock - ?,"
        " row_version = row_version + 1 WHERE product_id = ? AND seg = ?",
    [STOCKDB__ST_SEG_UPDATE_BATCH_FENCED] =
        "UPDATE product_segment SET stock = stock - ?, fence = ?, fence_kind = ?,"
        " row_version = row_version + 1 WHERE product_id = ? AND seg = ? AND row_version = ?"
        " AND (fence <= ? OR fence_kind <> ?)",
    /* ATOMIC's order, after its UPDATE took the product's row lock: written only if the
     * customer (NULL: anonymous) is below the product's limit, counted now under that
     * lock (each statement of READ COMMITTED reads what is committed when it starts);
     * reserved until now + reserve_seconds when the product reserves. No row = the limit
     * (or a product deleted since the UPDATE, which cannot happen under its lock). */
    [STOCKDB__ST_INSERT_ATOMIC] =
        "INSERT INTO orders (product_id, instance, fence, request_id, user, state, expires_at)"
        " SELECT p.id, ?, ?, ?, ?, IF(p.reserve_seconds IS NULL, 'sold', 'reserved'),"
        " UTC_TIMESTAMP(6) + INTERVAL p.reserve_seconds SECOND FROM product p WHERE p.id = ?"
        " AND (? IS NULL OR p.per_user_limit IS NULL OR p.per_user_limit >"
        " (SELECT COUNT(*) FROM orders o WHERE o.product_id = p.id AND o.user = ?"
        " AND o.state IN " STOCKDB__HOLDING_SQL "))"
        " RETURNING id, " EXPIRES_TEXT,
    /* A JSON array of distinct customers, and the units each holds of the product. */
    [STOCKDB__ST_USER_COUNT] =
        "SELECT k.usr, (SELECT COUNT(*) FROM orders o WHERE o.product_id = ? AND o.user = k.usr"
        " AND o.state IN " STOCKDB__HOLDING_SQL ") FROM JSON_TABLE(?, '$[*]' COLUMNS ("
        "usr VARCHAR(64) PATH '$')) AS k",
    [STOCKDB__ST_ORDER_READ] = "SELECT product_id, user, state + 0, expires_at <= UTC_TIMESTAMP(6),"
                               " " EXPIRES_TEXT " FROM orders WHERE id = ?",
    /* One change of stockdb_changes (stockdb_life.c): to, gives back (released_at), the
     * order, its product and its customer, from, and when (0 any, 1 before expiry, 2 after). */
    [STOCKDB__ST_ORDER_CHANGE] =
        "UPDATE orders SET state = ?, released_at = IF(? > 0, UTC_TIMESTAMP(6), released_at)"
        " WHERE id = ? AND product_id = ? AND user = ? AND state = ? AND (? = 0"
        " OR (? = 1 AND expires_at > UTC_TIMESTAMP(6))"
        " OR (? = 2 AND expires_at <= UTC_TIMESTAMP(6)))",
    [STOCKDB__ST_RELEASE_EXPIRED] =
        "UPDATE orders SET state = ?, released_at = UTC_TIMESTAMP(6) WHERE state = ?"
        " AND expires_at <= UTC_TIMESTAMP(6) AND product_id = ? ORDER BY expires_at LIMIT ?",
    [STOCKDB__ST_EXPIRED_SCAN] = "SELECT product_id FROM orders WHERE state = 'reserved'"
                                 " AND expires_at <= UTC_TIMESTAMP(6) ORDER BY expires_at LIMIT ?",
    /* LAST_INSERT_ID(expr) hands the stock after back, as the atomic UPDATE does. A raise
     * needs no compare-and-set (nothing it wrote rests on a read), only the fence. */
    [STOCKDB__ST_STOCK_ADD] = "UPDATE product SET stock = LAST_INSERT_ID(stock + ?),"
                              " row_version = row_version + 1 WHERE id = ?",
    [STOCKDB__ST_STOCK_ADD_FENCED] =
        "UPDATE product SET stock = LAST_INSERT_ID(stock + ?), fence = ?, fence_kind = ?,"
        " row_version = row_version + 1 WHERE id = ? AND (fence <= ? OR fence_kind <> ?)",
    [STOCKDB__ST_RESTOCK_INSERT] = "INSERT INTO restock (product_id, units, instance, request_id)"
                                   " VALUES (?, ?, ?, ?)",
    /* A restock's key, as STOCKDB__ST_LOOKUP is a deduction's: what it restocked, and the
     * product's stock now for the replay's answer. */
    [STOCKDB__ST_RESTOCK_LOOKUP] = "SELECT r.product_id, r.units, p.stock + " SEGMENTS_SUM
                                   " FROM restock r JOIN product p ON p.id = r.product_id"
                                   " WHERE r.request_id = ?",
    [STOCKDB__ST_STOCK_RESTOCKED] =
        "SELECT p.stock + " SEGMENTS_SUM ", CAST((SELECT COALESCE(SUM(r.units), 0) FROM restock r"
        " WHERE r.product_id = p.id) AS SIGNED), p.per_user_limit, p.reserve_seconds FROM product p"
        " WHERE p.id = ?",
    /* Three counts on ix_orders_state (product_id, state), each a range of the index alone:
     * the sold orders, which are most of them, are never read. */
    [STOCKDB__ST_STOCK_UNITS] =
        "SELECT p.stock + " SEGMENTS_SUM ","
        " (SELECT COUNT(*) FROM orders o WHERE o.product_id = p.id AND o.state = 'reserved'),"
        " (SELECT COUNT(*) FROM orders o WHERE o.product_id = p.id AND o.state = 'paid'),"
        " (SELECT COUNT(*) FROM orders o WHERE o.product_id = p.id"
        " AND o.state IN ('cancelled', 'expired')) FROM product p WHERE p.id = ?",
};

/* Short names for error messages. */
const char *const stockdb__stmt_name[STOCKDB__ST_COUNT] = {
    [STOCKDB__ST_LOOKUP] = "SELECT order by request id",
    [STOCKDB__ST_CONFIRM] = "SELECT order to confirm COMMIT",
    [STOCKDB__ST_READ] = "SELECT stock, fence",
    [STOCKDB__ST_READ_FOR_UPDATE] = "SELECT stock, fence FOR UPDATE",
    [STOCKDB__ST_UPDATE_ATOMIC] = "UPDATE product (atomic)",
    [STOCKDB__ST_UPDATE_ATOMIC_FENCED] = "UPDATE product (atomic, fenced)",
    [STOCKDB__ST_INSERT] = "INSERT INTO orders",
    [STOCKDB__ST_PEEK] = "SELECT stock and the key's order (pre-check)",
    [STOCKDB__ST_UPDATE_BATCH] = "UPDATE product by k",
    [STOCKDB__ST_UPDATE_BATCH_FENCED] = "UPDATE product by k (fenced)",
    [STOCKDB__ST_INSERT_BATCH] = "INSERT INTO orders of a batch",
    [STOCKDB__ST_INSERT_MULTI] = "INSERT INTO orders of several products",
    [STOCKDB__ST_SEG_READ] = "SELECT segment stock, fence",
    [STOCKDB__ST_SEG_READ_FOR_UPDATE] = "SELECT segment stock, fence FOR UPDATE",
    [STOCKDB__ST_SEG_UPDATE_BATCH] = "UPDATE product_segment by k",
    [STOCKDB__ST_SEG_UPDATE_BATCH_FENCED] = "UPDATE product_segment by k (fenced)",
    [STOCKDB__ST_INSERT_ATOMIC] = "INSERT INTO orders (atomic, with the limit)",
    [STOCKDB__ST_USER_COUNT] = "SELECT the units of each customer",
    [STOCKDB__ST_ORDER_READ] = "SELECT an order",
    [STOCKDB__ST_ORDER_CHANGE] = "UPDATE an order's state",
    [STOCKDB__ST_RELEASE_EXPIRED] = "UPDATE expired reservations",
    [STOCKDB__ST_EXPIRED_SCAN] = "SELECT products with expired reservations",
    [STOCKDB__ST_STOCK_ADD] = "UPDATE product by +k",
    [STOCKDB__ST_STOCK_ADD_FENCED] = "UPDATE product by +k (fenced)",
    [STOCKDB__ST_RESTOCK_INSERT] = "INSERT INTO restock",
    [STOCKDB__ST_RESTOCK_LOOKUP] = "SELECT restock by key",
    [STOCKDB__ST_STOCK_RESTOCKED] = "SELECT stock, restocked units and terms",
    [STOCKDB__ST_STOCK_UNITS] = "SELECT stock and order units by state",
};

static const char sql_timeouts[] =
    "SET SESSION innodb_lock_wait_timeout = ?, idle_write_transaction_timeout = ?";
/* Each statement sees what is committed when it starts, so the statements of one
 * transaction never act on a stale snapshot (a batch that answers known keys and runs
 * again reads the stock afresh). */
static const char sql_isolation[] = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";
/* On a Galera node, every read and UPDATE first waits until the node has applied all
 * that the cluster committed before it (wsrep_sync_wait 1 + 2): a node applies other
 * nodes' writes a little later than they commit, and a read that decides something (the
 * sold-out pre-check, GET /stock, a batch's read, the UPDATE's own check in mode atomic)
 * must not see a stock from before a restock or a sale made through another node.
 * Reads on the writer only would not be enough: after a failover the new writer may
 * still be applying the old one's last commits. A server without wsrep refuses the
 * variable (ignored) or ignores it (wsrep off). */
static const char sql_sync_wait[] = "SET SESSION wsrep_sync_wait = 3";
/* Which server a session is on: its ids are numbered per server (confirm_key's KILL). */
static const char sql_server[] = "SELECT CONCAT(@@hostname, ':', @@port)";

/* ---------------------------------------------------------------- the handle */

/* Handles made by this thread, so that mysql_thread_end runs after the last one. */
static _Thread_local unsigned thread_handles;

void stockdb__set_err(stockdb *db, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(db->errstr, sizeof(db->errstr), fmt, ap);
    va_end(ap);
}

int stockdb__code(stockdb *db, unsigned err) {
    db->err = err ? err : CR_UNKNOWN_ERROR;
    if (stockdb_conn_gone(db->err)) return STOCKDB_ERR_CONNECT;
    if (db->err == ER_LOCK_DEADLOCK || db->err == ER_LOCK_WAIT_TIMEOUT) return STOCKDB_ERR_DEADLOCK;
    if (db->err == CR_OUT_OF_MEMORY) return STOCKDB_ERR_NOMEM;
    return STOCKDB_ERR_QUERY;
}

bool stockdb__duplicate_key(const stockdb *db, int rc) {
    return rc == STOCKDB_ERR_QUERY && db->err == ER_DUP_ENTRY;
}

void stockdb__disconnect(stockdb *db) {
    stockdb_conn_close(&db->conn, db->stmt, STOCKDB__ST_COUNT);
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
 * falls before the first write, so it is not cut short. Returns a STOCKDB_* code. */
static int set_timeouts(stockdb *db, unsigned rw_timeout_s) {
    MYSQL_STMT *st = mysql_stmt_init(db->conn);
    if (!st) {
        stockdb__set_err(db, "%s: out of memory", sql_timeouts);
        return stockdb__code(db, CR_OUT_OF_MEMORY);
    }
    int rc = STOCKDB_OK;
    long long secs[2] = {rw_timeout_s > 2 ? rw_timeout_s - 2 : 1, rw_timeout_s};
    MYSQL_BIND b[2];
    memset(b, 0, sizeof(b));
    for (int i = 0; i < 2; i++) {
        b[i].buffer_type = MYSQL_TYPE_LONGLONG;
        b[i].buffer = &secs[i];
    }
    if (mysql_stmt_prepare(st, sql_timeouts, sizeof(sql_timeouts) - 1) ||
        mysql_stmt_bind_param(st, b) || mysql_stmt_execute(st))
        rc = stockdb__stmt_error(db, st, sql_timeouts);
    mysql_stmt_close(st);
    return rc;
}

/* The rest of the session's set-up, once per connection: READ COMMITTED, and autocommit
 * off (the first statement of a deduction opens its transaction, so no START
 * TRANSACTION round trip). Returns a STOCKDB_* code. */
static int set_session(stockdb *db) {
    /* The server's name first: once the session waits for the cluster, even this read
     * would wait (and time out with 1205 on a node cut off from it). */
    db->server[0] = '\0';
    if (mysql_real_query(db->conn, sql_server, sizeof(sql_server) - 1) != 0) goto fail;
    MYSQL_RES *res = mysql_store_result(db->conn);
    MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
    if (row && row[0]) snprintf(db->server, sizeof(db->server), "%s", row[0]);
    mysql_free_result(res);
    if (mysql_real_query(db->conn, sql_sync_wait, sizeof(sql_sync_wait) - 1) != 0 &&
        mysql_errno(db->conn) != ER_UNKNOWN_SYSTEM_VARIABLE)
        goto fail;
    if (mysql_real_query(db->conn, sql_isolation, sizeof(sql_isolation) - 1) == 0 &&
        mysql_autocommit(db->conn, 0) == 0)
        return STOCKDB_OK;
fail:;
    unsigned err = mysql_errno(db->conn);
    stockdb__set_err(db, "session set-up: %s (%u)", mysql_error(db->conn), err);
    return stockdb__code(db, err);
}

int stockdb__connect(stockdb *db) {
    if (db->conn) return STOCKDB_OK;
    unsigned rw_s = db->cfg.rw_timeout_s ? db->cfg.rw_timeout_s : 10;
    /* CLIENT_FOUND_ROWS: an UPDATE reports the rows it matched, so "0 rows" means the
     * WHERE refused, never "matched but unchanged". */
    int rc =
        stockdb_conn_open(&db->cfg, CLIENT_FOUND_ROWS, &db->conn, db->errstr, sizeof(db->errstr));
    if (rc == STOCKDB_OK)
        rc = stockdb_conn_prepare(db->conn, db->stmt, stmt_sql, stockdb__stmt_name,
                                  STOCKDB__ST_COUNT, db->errstr, sizeof(db->errstr));
    if (rc == STOCKDB_OK) rc = set_timeouts(db, rw_s);
    if (rc == STOCKDB_OK) rc = set_session(db);
    if (rc != STOCKDB_OK) {
        stockdb__disconnect(db);
        /* A lock victim cannot happen while setting up; should it, it is a refusal. */
        return rc == STOCKDB_ERR_DEADLOCK ? STOCKDB_ERR_QUERY : rc;
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
    /* A Galera node outside the primary component (cut off, or still joining) refuses
     * every statement with 1047 and commits nothing: a new session, through the proxy,
     * reaches a node that serves. */
    case ER_UNKNOWN_COM_ERROR:
    /* A COMMIT a Galera node could not replicate ("Not connected to Primary Component"):
     * the session is as good as gone, and the outcome is decided by the request id. */
    case ER_ERROR_DURING_COMMIT:
        return true;
    default:
        return false;
    }
}

/* ---------------------------------------------------------------- running statements */

int stockdb__stmt_error(stockdb *db, MYSQL_STMT *st, const char *name) {
    unsigned err = mysql_stmt_errno(st);
    stockdb__set_err(db, "%s: %s (%u)", name, mysql_stmt_error(st), err);
    return stockdb__code(db, err);
}

/* A failure of statement id after it was sent: its error, and the rest of its result
 * read and dropped, so the next execute starts clean. */
static int run_failed(stockdb *db, MYSQL_STMT *st, int id) {
    int rc = stockdb__stmt_error(db, st, stockdb__stmt_name[id]);
    mysql_stmt_free_result(st);
    return rc;
}

/* Statement id, about to run: counted, and the transaction marked open (autocommit is
 * off: every statement here opens or joins one). NULL with *rc set when the connection
 * was dropped: a failed ROLLBACK drops it, and with it every statement, so a caller that
 * goes on (to look a key up, say) gets "connection lost", never a NULL statement. */
static MYSQL_STMT *stmt_to_run(stockdb *db, int id, int *rc) {
    MYSQL_STMT *st = db->stmt[id];
    if (!st) {
        stockdb__set_err(db, "%s: not connected (the connection was dropped)",
                         stockdb__stmt_name[id]);
        *rc = stockdb__code(db, CR_SERVER_LOST);
        return NULL;
    }
    db->statements++;
    db->in_trx = true;
    return st;
}

int stockdb__run(stockdb *db, int id, MYSQL_BIND *params, MYSQL_BIND *results, bool *found,
                 uint64_t *rows) {
    int err;
    MYSQL_STMT *st = stmt_to_run(db, id, &err);
    if (!st) return err;
    if (mysql_stmt_bind_param(st, params) || mysql_stmt_execute(st)) return run_failed(db, st, id);
    if (!results) {
        if (rows) *rows = mysql_stmt_affected_rows(st);
        return STOCKDB_OK;
    }
    if (mysql_stmt_bind_result(st, results) || mysql_stmt_store_result(st))
        return run_failed(db, st, id);
    int rc = mysql_stmt_fetch(st);
    if (rc == 1) return run_failed(db, st, id);
    /* Every query here selects by a unique key, so there is at most one row and its
     * columns are all integers: truncation cannot happen. */
    *found = rc == 0 || rc == MYSQL_DATA_TRUNCATED;
    mysql_stmt_free_result(st);
    return STOCKDB_OK;
}

int stockdb__run_each(stockdb *db, int id, MYSQL_BIND *params, MYSQL_BIND *results,
                      int (*each)(void *arg), void *arg) {
    int err;
    MYSQL_STMT *st = stmt_to_run(db, id, &err);
    if (!st) return err;
    if (mysql_stmt_bind_param(st, params) || mysql_stmt_execute(st) ||
        mysql_stmt_bind_result(st, results) || mysql_stmt_store_result(st))
        return run_failed(db, st, id);
    int rc, out = STOCKDB_OK;
    while (out == STOCKDB_OK && ((rc = mysql_stmt_fetch(st)) == 0 || rc == MYSQL_DATA_TRUNCATED))
        out = each(arg);
    if (out == STOCKDB_OK && rc == 1) return run_failed(db, st, id);
    mysql_stmt_free_result(st);
    return out;
}

void stockdb__rollback(stockdb *db) {
    if (!db->conn) return;
    db->statements++;
    db->in_trx = false;
    if (mysql_rollback(db->conn)) stockdb__disconnect(db);
}

int stockdb__commit(stockdb *db) {
    db->statements++;
    if (mysql_commit(db->conn) == 0) {
        db->in_trx = false;
        return STOCKDB_OK;
    }
    unsigned err = mysql_errno(db->conn);
    stockdb__set_err(db, "COMMIT: %s (%u)", mysql_error(db->conn), err);
    return stockdb__code(db, err);
}

/* Even a plain READ COMMITTED read holds a metadata lock on every table it read until its
 * transaction ends, so a connection left idle inside one makes an ALTER TABLE of those
 * tables wait, and every query queued behind the ALTER with it (for lock_wait_timeout, a
 * day by default). It costs a round trip (a ROLLBACK: whatever is open wrote nothing that
 * is meant to stay) only when a statement ran since the last COMMIT or ROLLBACK. */
void stockdb__end_trx(stockdb *db) {
    if (db->conn && db->in_trx) stockdb__rollback(db);
}

int stockdb__fail(stockdb *db, int rc, bool wrote) {
    if (rc == STOCKDB_ERR_CONNECT) {
        stockdb__disconnect(db);
        if (!wrote) return STOCKDB__RETRY_IDLE;
        size_t n = strlen(db->errstr);
        snprintf(db->errstr + n, sizeof(db->errstr) - n,
                 "; connection lost inside the transaction, which the server rolls back");
        return STOCKDB_ERR_CONNECT;
    }
    if (wrote) stockdb__rollback(db);
    return rc;
}

/* ---------------------------------------------------------------- reads and checks */

int stockdb__read_total(stockdb *db, int32_t product_id, const char *request_id, bool *found,
                        int32_t *stock, uint64_t *order_id, int32_t *order_product) {
    MYSQL_BIND p[2], r[3];
    int32_t pid = product_id;
    my_bool oid_null = 0, opid_null = 0;
    unsigned long key_len;
    *stock = 0;
    *order_id = 0;
    *order_product = 0;
    stockdb__bind_text(&p[0], request_id, &key_len);
    stockdb__bind_int(&p[1], &pid, NULL);
    stockdb__bind_int(&r[0], stock, NULL);
    stockdb__bind_ubigint(&r[1], order_id);
    r[1].is_null = &oid_null;
    stockdb__bind_int(&r[2], order_product, &opid_null);
    int rc = stockdb__run(db, STOCKDB__ST_PEEK, p, r, found, NULL);
    if (oid_null) *order_id = 0;
    if (opid_null) *order_product = 0;
    return rc;
}

int stockdb__read_product(stockdb *db, int32_t product_id, bool *found, int32_t *stock,
                          int64_t *fence, int32_t *kind, uint64_t *version) {
    int32_t pid = product_id;
    MYSQL_BIND p[1], r[6];
    stockdb__terms unused;
    *found = false;
    *stock = *kind = 0;
    *fence = 0;
    *version = 0;
    stockdb__bind_int(&p[0], &pid, NULL);
    stockdb__bind_row(r, stock, fence, kind, version, &unused);
    return stockdb__run(db, STOCKDB__ST_READ, p, r, found, NULL);
}

bool stockdb__request_id_ok(stockdb *db, const char *what, const char *key) {
    if (!key) return true;
    size_t n = strlen(key);
    if (n > 0 && n <= STOCKDB_REQUEST_ID_MAX) return true;
    stockdb__set_err(db, "%s: request id must be 1..%d bytes, not %zu", what,
                     STOCKDB_REQUEST_ID_MAX, n);
    return false;
}

bool stockdb__user_ok(stockdb *db, const char *what, const char *user) {
    if (!user) return true;
    size_t n = strlen(user);
    if (n > 0 && n <= STOCKDB_USER_MAX) return true;
    stockdb__set_err(db, "%s: a customer must be 1..%d bytes, not %zu", what, STOCKDB_USER_MAX, n);
    return false;
}

int stockdb__fenced_out(stockdb *db, int32_t product_id, int32_t segment, int64_t fence) {
    if (segment > 0)
        stockdb__set_err(db,
                         "segment %d of product %d was written under a newer lock token than "
                         "%lld; rolled back",
                         segment, product_id, (long long)fence);
    else
        stockdb__set_err(db,
                         "product %d was written under a newer lock token than %lld; rolled back",
                         product_id, (long long)fence);
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
    (void)stockdb__connect(db);
    return db;
}

void stockdb_free(stockdb *db) {
    if (!db) return;
    stockdb__disconnect(db);
    memset(db->cfg.password, 0, sizeof(db->cfg.password));
    free(db);
    if (thread_handles > 0 && --thread_handles == 0) mysql_thread_end();
}

int stockdb_peek(stockdb *db, int32_t product_id, const char *request_id, int32_t *stock,
                 uint64_t *order_id, int32_t *order_product) {
    if (!db) return STOCKDB_ERR_CONFIG;
    stockdb__clear_err(db);
    if (!stock || !order_id || !order_product) {
        stockdb__set_err(db, "stockdb_peek: stock, order_id and order_product are required");
        return STOCKDB_ERR_CONFIG;
    }
    if (!stockdb__request_id_ok(db, "stockdb_peek", request_id)) return STOCKDB_ERR_CONFIG;
    for (int attempt = 0;; attempt++) {
        int rc = stockdb__connect(db);
        if (rc != STOCKDB_OK) return rc;
        int32_t value = 0, opid = 0;
        uint64_t oid = 0;
        bool found = false;
        /* One read, then the ROLLBACK that ends its transaction (stockdb__end_trx): it wrote
         * nothing, but an open transaction holds metadata locks while the worker idles. */
        rc = stockdb__read_total(db, product_id, request_id, &found, &value, &oid, &opid);
        if (rc == STOCKDB_OK) {
            stockdb__end_trx(db);
            if (!found) {
                stockdb__set_err(db, "no product with id %d", product_id);
                return STOCKDB_ERR_NOT_FOUND;
            }
            *stock = value;
            *order_id = oid;
            *order_product = opid;
            return STOCKDB_OK;
        }
        rc = stockdb__fail(db, rc, false);
        if (rc == STOCKDB__RETRY_IDLE && attempt == 0) continue;
        stockdb__end_trx(db);
        return rc == STOCKDB__RETRY_IDLE ? STOCKDB_ERR_CONNECT : rc;
    }
}

/* The pitfall's snapshot (stockdb.h). The session runs READ COMMITTED; SET TRANSACTION
 * changes the level of the next transaction only, and only while none is open, so any
 * open transaction is ended first. */
int stockdb_open_snapshot(stockdb *db, int32_t product_id) {
    static const char rr[] = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ";
    if (!db) return STOCKDB_ERR_CONFIG;
    stockdb__clear_err(db);
    int rc = stockdb__connect(db);
    if (rc != STOCKDB_OK) return rc;
    stockdb__rollback(db);
    if (!db->conn) return STOCKDB_ERR_CONNECT;
    db->statements++;
    if (mysql_real_query(db->conn, rr, sizeof(rr) - 1)) {
        unsigned err = mysql_errno(db->conn);
        stockdb__set_err(db, "%s: %s (%u)", rr, mysql_error(db->conn), err);
        rc = stockdb__fail(db, stockdb__code(db, err), false);
        return rc == STOCKDB__RETRY_IDLE ? STOCKDB_ERR_CONNECT : rc;
    }
    /* The read opens the snapshot; what it reads is not needed. */
    int32_t stock, kind;
    int64_t fence;
    uint64_t version;
    bool found;
    rc = stockdb__read_product(db, product_id, &found, &stock, &fence, &kind, &version);
    if (rc != STOCKDB_OK) {
        rc = stockdb__fail(db, rc, true);
        return rc == STOCKDB__RETRY_IDLE ? STOCKDB_ERR_CONNECT : rc;
    }
    return STOCKDB_OK;
}

void stockdb_end_transaction(stockdb *db) {
    if (db) stockdb__end_trx(db);
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
    stockdb__clear_err(db);
    for (int attempt = 0;; attempt++) {
        int rc = stockdb__connect(db);
        if (rc != STOCKDB_OK) return rc;
        if (mysql_ping(db->conn) == 0) return STOCKDB_OK;
        unsigned err = mysql_errno(db->conn);
        stockdb__set_err(db, "ping: %s (%u)", mysql_error(db->conn), err);
        rc = stockdb__code(db, err);
        stockdb__disconnect(db);
        if (rc != STOCKDB_ERR_CONNECT) return STOCKDB_ERR_QUERY;
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
