/* stockdb_order.c: a key's order, the one end that every deduction shares (the atomic
 * request of stockdb_deduct.c, the batch of stockdb_batch.c, the transaction over
 * several products of stockdb_multi.c): look the order up, replay it or refuse a key
 * first used for another product, and decide a COMMIT whose reply was lost, which only
 * the database can: stockdb__confirm_key() asks it whether the order exists.
 *
 * Layer: it calls stockdb.c (the handle and its statements) only; every deduction file
 * calls it, and it calls none of them. */
#include "stockdb_int.h"

#include <stdio.h>
#include <string.h>

#include <mysql.h>

int stockdb__lookup_order(stockdb *db, int id, const char *request_id, bool *found,
                          uint64_t *order_id, int32_t *product_id, int32_t *stock) {
    MYSQL_BIND p[1], r[3];
    unsigned long len;
    my_bool stock_null = 0;
    *stock = 0;
    stockdb__bind_text(&p[0], request_id, &len);
    stockdb__bind_ubigint(&r[0], order_id);
    stockdb__bind_int(&r[1], product_id, NULL);
    stockdb__bind_int(&r[2], stock, &stock_null);
    int rc = stockdb__run(db, id, p, r, found, NULL);
    if (stock_null) *stock = 0;
    return rc;
}

int stockdb__replay(stockdb *db, int32_t want_product, const char *request_id, uint64_t order_id,
                    int32_t product_id, int32_t stock, stockdb_result *out) {
    if (product_id != want_product) {
        stockdb__set_err(db, "request id \"%s\" was already used for product %d, not %d",
                         request_id, product_id, want_product);
        return STOCKDB_ERR_KEY_REUSED;
    }
    out->outcome = STOCKDB_DEDUCTED;
    out->stock = stock;
    out->order_id = order_id;
    out->replayed = true;
    return STOCKDB_OK;
}

/* Ends an earlier session of this handle whose COMMIT may be in doubt. */
static const char sql_kill[] = "KILL CONNECTION ?";

/* Ends server session `id` (an earlier connection of this handle, so the service user
 * may kill it without any privilege) on the new connection, which must be on the same
 * server (confirm_key checks). Its open transaction, if
 * any, is rolled back, and a COMMIT of it still on its way through the network can no
 * longer land. Best effort: a session that has ended already gives ER_NO_SUCH_THREAD,
 * and any other failure leaves the locking read of stockdb__confirm_key to wait for the session
 * as before. Counted as one statement. */
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

/* Only an order row can tell whether a COMMIT whose reply was lost committed, and only if
 * it carries a request id. Before it looks, this kills the old session: the COMMIT may
 * have been lost on the way (a partition), leaving the old session on the server with its
 * transaction open, its row locks held and nobody to end it; killed, it rolls back. The
 * lookup is a locking read so that it waits for the old session's COMMIT or rollback to
 * finish instead of reading too early; its lock is released at once. */
int stockdb__confirm_key(stockdb *db, const char *key, bool *found, uint64_t *order_id,
                         int32_t *product_id) {
    char why[sizeof(db->errstr)], detail[sizeof(db->errstr)];
    int32_t unused;
    unsigned long old_session = db->session_id;
    char old_server[sizeof(db->server)];
    snprintf(old_server, sizeof(old_server), "%s", db->server);
    snprintf(why, sizeof(why), "%s", db->errstr);
    stockdb__disconnect(db);
    *found = false;
    /* Without a key nothing can be confirmed, but the old session is killed all the same,
     * so that its row locks are freed now rather than when the server times it out. A
     * server numbers its sessions upwards from 1 at start: a new id not above the old one
     * means the server restarted (the old session is gone with it), and the old id may
     * now be someone else's session, or our own. Behind a proxy that failed over (HAProxy
     * before a Galera cluster) the new session is on another server, where the old id
     * may name an unrelated session: only the same server's is killed. The lookup then
     * waits for the cluster (wsrep_sync_wait), so a COMMIT that the old node had
     * replicated before it died is seen here. */
    bool connected = stockdb__connect(db) == STOCKDB_OK;
    if (connected && db->session_id > old_session && old_server[0] &&
        strcmp(old_server, db->server) == 0)
        kill_session(db, old_session);
    if (!key) {
        stockdb__set_err(db, "%s; COMMIT reply lost and no request id to confirm it", why);
        return STOCKDB_ERR_UNKNOWN;
    }
    if (!connected) {
        snprintf(detail, sizeof(detail), "%s", db->errstr);
        stockdb__set_err(db, "%s; COMMIT reply lost and reconnecting to confirm failed: %s", why,
                         detail);
        return STOCKDB_ERR_UNKNOWN;
    }
    int rc =
        stockdb__lookup_order(db, STOCKDB__ST_CONFIRM, key, found, order_id, product_id, &unused);
    if (rc != STOCKDB_OK) {
        if (rc == STOCKDB_ERR_CONNECT) stockdb__disconnect(db);
        snprintf(detail, sizeof(detail), "%s", db->errstr);
        stockdb__set_err(db, "%s; COMMIT reply lost and the lookup to confirm it failed: %s", why,
                         detail);
        return STOCKDB_ERR_UNKNOWN;
    }
    stockdb__rollback(db); /* the shared lock of the locking read */
    if (!*found)
        stockdb__set_err(
            db, "%s; COMMIT reply lost, and the order is not in the database: not committed", why);
    else
        db->errstr[0] = '\0';
    return STOCKDB_OK;
}
