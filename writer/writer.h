/* writer: the order writer of mode redis-stock (stock-writer), a process of its own.
 *
 * In mode redis-stock stockd deducts in Redis: one Lua script decrements
 * `stockd:stock:{<id>}` and appends the order to the stream `stockd:orders` (fields key,
 * product, instance, at_us, and user when there is a customer, written to orders.user;
 * docs/architecture.md). The writer reads that stream as a
 * member of the consumer group `writers` and writes each batch of entries to MariaDB in
 * ONE transaction: per entry, the order (orders.request_id = key, unique) and the
 * product's stock - 1 with a guard that never takes it below 0. An entry whose product
 * is already at 0 in MariaDB is an oversold promise (a buyer was told "deducted" for a
 * unit the database does not have): it is recorded in oversold_promise, never dropped.
 * Only after COMMIT are the entries acknowledged (XACK), so an entry is written at
 * least once whatever crashes; the unique keys of orders and oversold_promise make the
 * second write of an entry a no-op, so it is written exactly once. A writer that dies
 * leaves its entries pending; another writer claims them (XAUTOCLAIM) once they have
 * been idle for claim_idle_ms, and a writer restarted under the same consumer name
 * reads its own pending entries first.
 *
 * Bounded by what is in flight: after acknowledging, a writer trims the stream of what
 * every group has acknowledged (XTRIM MINID), and removes from the group the consumers
 * that hold nothing and have been idle for forget_idle_ms (writers that are gone). With
 * metrics_port, it serves GET /metrics (Prometheus text) on a thread of its own.
 *
 * Single-threaded: one Redis connection and one MariaDB connection, owned by the
 * calling thread (stockdb.h's thread rules: stockdb_global_init() first). Every
 * function returns 0 / a WRITER_* code, or as documented; nothing here exits. */
#ifndef WRITER_H
#define WRITER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "stockdb.h"

/* The contract's names (docs/architecture.md, "Redis as the stock of record"). */
#define WRITER_STREAM       "stockd:orders"
#define WRITER_GROUP        "writers"
#define WRITER_STOCK_PREFIX "stockd:stock:{"

#define WRITER_OK          0
#define WRITER_ERR_CONFIG  -1 /* a bad option; nothing was attempted */
#define WRITER_ERR_REDIS   -2 /* Redis unreachable, refused or gone */
#define WRITER_ERR_DB      -3 /* MariaDB unreachable or a statement failed: rolled back */
#define WRITER_ERR_NOMEM   -4
#define WRITER_ERR_WAIT    -5 /* too few replicas have the batch: left pending */
#define WRITER_DISAGREE    1  /* writer_reconcile: drained, and a product does not agree */
#define WRITER_NOT_DRAINED 2  /* writer_reconcile: the stream did not drain in time */

#define WRITER_BATCH_MAX    4096
#define WRITER_CONSUMER_MAX 64

typedef struct writer_config {
    char redis_host[256];
    int redis_port;
    char redis_user[64];      /* "" = the default user */
    char redis_password[128]; /* "" = no AUTH */
    stockdb_config mysql;
    char consumer[WRITER_CONSUMER_MAX + 1]; /* this process's name in the group */
    unsigned batch;                         /* entries per transaction, 1..WRITER_BATCH_MAX */
    unsigned block_ms;                      /* the longest XREADGROUP wait */
    unsigned claim_idle_ms;                 /* XAUTOCLAIM's min-idle-time */
    unsigned backoff_max_ms;                /* the longest pause between retries */
    /* > 0: before writing a batch, WAIT until this many replicas have everything up to
     * its read (replication is one ordered stream, so they then have its entries too),
     * up to wait_ms; fewer: the batch is not written, left pending, and retried. So no
     * entry is written that a failover to such a replica could lose. */
    unsigned wait_replicas;
    unsigned wait_ms;
    unsigned forget_idle_ms; /* remove consumers idle this long that hold nothing */
    unsigned metrics_port;   /* 0: no /metrics */
} writer_config;

/* What a run did, for its last log line and the tests. */
typedef struct writer_stats {
    uint64_t batches;    /* transactions committed */
    uint64_t orders;     /* entries written as orders */
    uint64_t duplicates; /* entries already written (a redelivery): skipped */
    uint64_t oversold;   /* entries recorded as oversold promises */
    uint64_t malformed;  /* entries not in the contract's format: logged and acknowledged */
    uint64_t vanished;   /* pending entries deleted from the stream before they were written */
    uint64_t claimed;    /* entries claimed from other consumers */
    uint64_t retries;    /* failed rounds (Redis or MariaDB away, deadlock) */
    uint64_t key_reused; /* entries whose key had an order of another deduction: recorded */
    uint64_t trimmed;    /* entries trimmed from the stream once acknowledged by all */
    uint64_t forgotten;  /* consumers removed from the group */
    uint64_t entries;    /* entries in the batches committed (the batch size's sum) */
    double lag_sum_s;    /* sum over written entries of commit time - at_us */
    /* Gauges, as of the last round: */
    long long undelivered, pending; /* the group's entries not yet read, read and not acked */
    unsigned last_batch;            /* entries in the last batch committed */
    double last_lag_s;              /* commit time - the oldest at_us of that batch */
} writer_stats;

/* Reads and writes until *stop becomes non-zero (a signal handler sets it), retrying
 * with backoff while Redis or MariaDB is away; logs to log (one line per event).
 * Returns WRITER_OK after a clean stop (the batch in hand committed and acknowledged, or
 * rolled back and left pending) or WRITER_ERR_NOMEM. */
int writer_run(const writer_config *c, volatile sig_atomic_t *stop, FILE *log, writer_stats *st);

/* Reconciliation: per product with a Redis count, the Redis count, the entries not yet
 * delivered to the group (backlog) and delivered but not acknowledged (pending),
 * MariaDB's stock, its orders and its oversold promises, printed as a table to out, and
 * the writer's lag (answered_at to created_at of the orders). It waits up to wait_s
 * seconds for the stream to drain (no backlog, nothing pending, *stop permitting), then
 * judges: a product agrees when its Redis count equals MariaDB's stock and it has no
 * oversold promise. Returns WRITER_OK (all agree), WRITER_DISAGREE, WRITER_NOT_DRAINED,
 * or WRITER_ERR_REDIS / _DB (the reason printed to out). */
int writer_reconcile(const writer_config *c, unsigned wait_s, volatile sig_atomic_t *stop,
                     FILE *out);

#endif
