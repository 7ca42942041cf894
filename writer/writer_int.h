/* writer_int.h: what writer/'s files share (never included outside writer/): the stream
 * entry, the Redis side (writer_redis.c: dial, read, claim, acknowledge) and the MariaDB
 * side (writer_db.c: one batch, one transaction). writer.c's loop and
 * writer_reconcile.c call both; the two sides never call each other. */
#ifndef WRITER_INT_H
#define WRITER_INT_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "writer.h"

/* One stream entry, parsed. */
typedef struct writer_entry {
    char id[48]; /* the stream id, as Redis wrote it */
    char key[STOCKDB_REQUEST_ID_MAX + 1];
    int32_t product;
    char instance[STOCKDB_INSTANCE_MAX + 1];
    int64_t at_us;
    char user[STOCKDB_USER_MAX + 1]; /* the customer; "" = none (the field is optional) */
    /* A reservation (docs/orders.md): an order entry with state reserved carries its
     * expiry; a change entry (change: paid, cancelled or expired) carries no order, only
     * the new state of the order of its key. Both optional; "" and 0 = a plain sale. */
    char state[16];
    int64_t expires_us;
    char change[16];
    /* What the entry is: */
    enum {
        WRITER__ENTRY_OK,        /* in the contract's format: to be written */
        WRITER__ENTRY_MALFORMED, /* a field missing or out of range: logged, acknowledged */
        WRITER__ENTRY_VANISHED,  /* pending but deleted from the stream: logged, acknowledged */
    } kind;
    /* writer_db__write's verdict for an OK entry: */
    enum {
        WRITER__ORDER,
        WRITER__DUPLICATE,  /* written before (a redelivery) */
        WRITER__OVERSOLD,   /* no stock left in MariaDB (no_product: no row) */
        WRITER__KEY_REUSED, /* its key has an order of another deduction (prior_product) */
        WRITER__CHANGE,     /* a change entry: applied to its order if that is reserved */
    } outcome;
    bool no_product;
    int32_t prior_product;
} writer_entry;

/* ---------------------------------------------------------------- Redis (writer_redis.c) */

/* A connection to c's Redis with AUTH, a read timeout of io_ms, and the group created
 * (XGROUP CREATE ... MKSTREAM; an existing group is fine). 0 and *out, or
 * WRITER_ERR_REDIS / _NOMEM with the reason in err. */
int writer_redis__dial(const writer_config *c, unsigned io_ms, redisContext **out, char *err,
                       size_t errlen);

/* Sends one command (argv, NUL-terminated strings) and returns the reply, or NULL with
 * the reason in err (the connection is then unusable). An error reply is returned as
 * it is. */
redisReply *writer_redis__cmd(redisContext *r, int argc, const char **argv, char *err,
                              size_t errlen);

/* Fills e[0..*n) (at most max) with entries for consumer: from id "0" its own pending
 * entries, from ">" new ones (waiting up to block_ms). 0 or WRITER_ERR_REDIS. */
int writer_redis__read(redisContext *r, const char *consumer, const char *from, unsigned max,
                       unsigned block_ms, writer_entry *e, unsigned *n, char *err, size_t errlen);

/* XAUTOCLAIM: moves to consumer at most max entries pending for longer than idle_ms with
 * another consumer, scanning from *cursor (updated; "0-0" when the scan went round), and
 * fills e[0..*n). 0 or WRITER_ERR_REDIS. */
int writer_redis__claim(redisContext *r, const char *consumer, unsigned idle_ms, char *cursor,
                        size_t cursorlen, unsigned max, writer_entry *e, unsigned *n, char *err,
                        size_t errlen);

/* WAIT replicas timeout_ms on r: *acked = the replicas that have every write made
 * through r so far. 0 or WRITER_ERR_REDIS. */
int writer_redis__wait(redisContext *r, unsigned replicas, unsigned timeout_ms, long long *acked,
                       char *err, size_t errlen);

/* XACK of e[0..n). 0 or WRITER_ERR_REDIS. */
int writer_redis__ack(redisContext *r, const writer_entry *e, unsigned n, char *err, size_t errlen);

/* A stream id ("MS-SEQ"), parsed (writer_redis__id: 0-0 if it is not one), and
 * compared (<0, 0, >0). */
typedef struct writer_id {
    unsigned long long ms, seq;
} writer_id;
writer_id writer_redis__id(const char *s);
int writer_redis__id_cmp(writer_id a, writer_id b);

/* XTRIM MINID of what every group of the stream has acknowledged: the entries before
 * the oldest that some group still needs (its oldest pending entry, or the one after its
 * last delivered). *trimmed = the entries deleted; *lag and *pending = the writers'
 * group's undelivered and pending entries (XINFO GROUPS, read for the trim anyway).
 * Nothing is trimmed without a group. 0 or WRITER_ERR_REDIS. */
int writer_redis__trim(redisContext *r, long long *trimmed, long long *lag, long long *pending,
                       char *err, size_t errlen);

/* XGROUP DELCONSUMER of every consumer of the writers' group but self that holds no
 * pending entry and has been idle for idle_ms (a writer that is gone), one log line
 * each; *removed = how many. 0 or WRITER_ERR_REDIS. */
int writer_redis__forget(redisContext *r, const char *self, unsigned idle_ms, FILE *log,
                         long long *removed, char *err, size_t errlen);

/* Parses one entry reply ([id, [field, value, ...]] or [id, nil]) into *e. */
void writer_redis__entry(const redisReply *r, writer_entry *e);

/* ---------------------------------------------------------------- /metrics (writer_http.c) */

typedef struct writer_http writer_http;

/* Serves GET /metrics on c->metrics_port (all addresses) from a thread of its own; *out
 * NULL when the port is 0. 0, WRITER_ERR_CONFIG (the port cannot be bound; err says so)
 * or WRITER_ERR_NOMEM. */
int writer_http__start(const writer_config *c, writer_http **out, char *err, size_t errlen);
/* Copies st for the next scrapes. NULL h: nothing. */
void writer_http__publish(writer_http *h, const writer_stats *st);
void writer_http__stop(writer_http *h); /* NULL is a no-op */

/* ---------------------------------------------------------------- MariaDB (writer_db.c) */

typedef struct writer_db writer_db;

writer_db *writer_db__new(const stockdb_config *cfg);
void writer_db__free(writer_db *db); /* NULL is a no-op */
/* Connects (once; again after a failure). 0 or WRITER_ERR_DB with the reason in errstr. */
int writer_db__connect(writer_db *db);
const char *writer_db__errstr(const writer_db *db);

/* Writes e[0..n)'s OK entries in ONE transaction of a few multi-row statements, locking
 * the product rows in id order (so two writers cannot deadlock each other on them), and
 * sets each one's outcome (writer_db.c says how). 0 when committed; WRITER_ERR_DB when rolled back
 * or the COMMIT's outcome is unknown (the entries must then not be acknowledged: their redelivery
 * is written once). A deadlock victim is retried here. */
int writer_db__write(writer_db *db, writer_entry *e, unsigned n);

/* For the reconciliation: product id's stock (*found false when there is no such row),
 * its orders and its oversold promises. 0 or WRITER_ERR_DB. */
int writer_db__product(writer_db *db, int32_t id, bool *found, int64_t *stock, int64_t *orders,
                       int64_t *oversold);

/* The writer's lag over the orders that carry answered_at: their number, the median
 * and p99 of created_at - answered_at in microseconds. 0 or WRITER_ERR_DB. */
int writer_db__lag(writer_db *db, int64_t *n, double *p50_us, double *p99_us);

#endif
