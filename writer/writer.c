/* writer.c: the writer's loop (writer.h). Each round takes one batch, in this order:
 * this consumer's own pending entries (a batch that failed before, or left by this
 * consumer name's previous process), then entries other consumers have left idle for
 * claim_idle_ms (a crashed writer's), then new ones, waiting up to block_ms. The batch
 * is written in one MariaDB transaction and acknowledged only after its COMMIT. Any
 * failure leaves the batch pending with this consumer, drops the connection that failed,
 * and waits (doubling from 100 ms up to backoff_max_ms) before the next round; the
 * next round reads the same entries again from the pending list. With --wait-replicas a
 * batch is written only once that many replicas have it (writer.h).
 *
 * After a batch is acknowledged (at most every TRIM_EVERY_MS), and in an idle round after
 * one, the stream is trimmed of what every group has acknowledged; every FORGET_EVERY_MS
 * the consumers that are gone are removed. Every round ends by publishing the statistics
 * to /metrics. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "writer_int.h"

#define TRIM_EVERY_MS   100
#define FORGET_EVERY_MS 10000

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sleeps ms in slices, returning early once *stop is set. */
static void nap(unsigned ms, volatile sig_atomic_t *stop) {
    while (ms > 0 && !*stop) {
        unsigned slice = ms < 50 ? ms : 50;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)slice * 1000000L};
        nanosleep(&ts, NULL);
        ms -= slice;
    }
}

/* Logs the entries that are acknowledged without an order: a loss or a contract breach
 * is never dropped silently. Counts the batch and its lag (commit time - at_us). */
static void account(const writer_config *c, FILE *log, writer_stats *st, const writer_entry *e,
                    unsigned n) {
    double now = wall_s(), oldest = now;
    st->entries += n;
    st->last_batch = n;
    for (unsigned i = 0; i < n; i++) {
        switch (e[i].kind) {
        case WRITER__ENTRY_MALFORMED:
            st->malformed++;
            fprintf(log,
                    "stock-writer %s: entry %s is not in the contract's format "
                    "(key, product, instance, at_us): acknowledged without an order\n",
                    c->consumer, e[i].id);
            continue;
        case WRITER__ENTRY_VANISHED:
            st->vanished++;
            fprintf(log,
                    "stock-writer %s: pending entry %s was deleted from the stream before "
                    "it was written: its order is lost\n",
                    c->consumer, e[i].id);
            continue;
        case WRITER__ENTRY_OK:
            break;
        }
        double at = (double)e[i].at_us / 1e6;
        st->lag_sum_s += now - at;
        if (at < oldest) oldest = at;
        if (e[i].outcome == WRITER__KEY_REUSED) {
            st->key_reused++;
            fprintf(log,
                    "stock-writer %s: KEY REUSED: entry %s, key %s of product %d (from %s) was "
                    "deducted again in Redis, but the key has an order of another deduction "
                    "(product %d): its memo was gone (the window passed, or it was lost); "
                    "recorded in oversold_promise as %s@%lld, reason key_reused\n",
                    c->consumer, e[i].id, e[i].key, e[i].product, e[i].instance, e[i].prior_product,
                    e[i].key, (long long)e[i].at_us);
        }
        if (e[i].outcome == WRITER__ORDER) st->orders++;
        if (e[i].outcome == WRITER__DUPLICATE) st->duplicates++;
        if (e[i].outcome == WRITER__OVERSOLD) {
            st->oversold++;
            fprintf(log,
                    "stock-writer %s: OVERSOLD PROMISE: order %s of product %d (from %s) "
                    "has no stock in MariaDB; recorded in oversold_promise\n",
                    c->consumer, e[i].key, e[i].product, e[i].instance);
        }
    }
    st->last_lag_s = now - oldest;
    fflush(log);
}

/* Takes the next batch into e[0..*n): own pending, claimed, or new. */
static int next_batch(const writer_config *c, redisContext *r, char *cursor, size_t cursorlen,
                      writer_entry *e, unsigned *n, writer_stats *st, char *err, size_t errlen) {
    int rc = writer_redis__read(r, c->consumer, "0", c->batch, 0, e, n, err, errlen);
    if (rc != WRITER_OK || *n > 0) return rc;
    rc = writer_redis__claim(r, c->consumer, c->claim_idle_ms, cursor, cursorlen, c->batch, e, n,
                             err, errlen);
    if (rc != WRITER_OK || *n > 0) {
        st->claimed += *n;
        return rc;
    }
    return writer_redis__read(r, c->consumer, ">", c->batch, c->block_ms, e, n, err, errlen);
}

int writer_run(const writer_config *c, volatile sig_atomic_t *stop, FILE *log, writer_stats *st) {
    redisContext *r = NULL;
    writer_db *db = writer_db__new(&c->mysql);
    writer_entry *e = calloc(c->batch, sizeof(*e));
    writer_http *http = NULL;
    char err[600], cursor[48] = "0-0", last_err[600] = "";
    unsigned backoff = 0, n = 0;
    bool untrimmed = true; /* acknowledged since the last trim (or never trimmed) */
    long long last_trim = 0, last_forget = 0;
    int rc = WRITER_OK;

    memset(st, 0, sizeof(*st));
    if (!db || !e) {
        rc = WRITER_ERR_NOMEM;
        goto out;
    }
    if ((rc = writer_http__start(c, &http, err, sizeof(err))) != WRITER_OK) {
        fprintf(log, "stock-writer %s: %s\n", c->consumer, err);
        goto out;
    }
    fprintf(log,
            "stock-writer %s: reading %s as group %s from redis %s:%d, writing to mysql "
            "%s:%u/%s, batches of %u\n",
            c->consumer, WRITER_STREAM, WRITER_GROUP, c->redis_host, c->redis_port, c->mysql.host,
            c->mysql.port, c->mysql.database, c->batch);
    fflush(log);
    while (!*stop) {
        if (backoff) {
            st->retries++;
            nap(backoff, stop);
            if (*stop) break;
        }
        err[0] = '\0';
        rc = r ? WRITER_OK : writer_redis__dial(c, c->block_ms + 5000, &r, err, sizeof(err));
        if (rc == WRITER_OK && writer_db__connect(db) != WRITER_OK) {
            snprintf(err, sizeof(err), "mysql: %s", writer_db__errstr(db));
            rc = WRITER_ERR_DB;
        }
        if (rc == WRITER_OK)
            rc = next_batch(c, r, cursor, sizeof(cursor), e, &n, st, err, sizeof(err));
        long long acked = 0;
        if (rc == WRITER_OK && n > 0 && c->wait_replicas &&
            (rc = writer_redis__wait(r, c->wait_replicas, c->wait_ms, &acked, err, sizeof(err))) ==
                WRITER_OK &&
            acked < (long long)c->wait_replicas) {
            /* Not on enough replicas yet: written now, a failover could sell it again.
             * WAIT counts the writes of this connection: the read of new entries (and a
             * claim) is one, so the replicas then have the entries before it. A batch
             * re-read from the pending list on a NEW connection is not: WAIT passes at
             * once, which is only right if the earlier connection's WAIT did (a retry
             * after a MariaDB failure); after Redis itself failed, it is not proven. */
            snprintf(err, sizeof(err),
                     "%lld of %u replicas have the batch's %u entries: left "
                     "pending",
                     acked, c->wait_replicas, n);
            rc = WRITER_ERR_WAIT;
        }
        if (rc == WRITER_OK && n > 0) {
            if (writer_db__write(db, e, n) != WRITER_OK) {
                snprintf(err, sizeof(err), "mysql: %s (%u entries left pending)",
                         writer_db__errstr(db), n);
                rc = WRITER_ERR_DB;
            } else {
                st->batches++;
                account(c, log, st, e, n);
                /* Committed: an acknowledgement lost now only means a redelivery, which
                 * writes nothing twice. */
                rc = writer_redis__ack(r, e, n, err, sizeof(err));
                untrimmed = true;
            }
        }
        /* What every group has acknowledged is freed; the group's backlog read with it. */
        if (rc == WRITER_OK && untrimmed && (n == 0 || now_ms() - last_trim >= TRIM_EVERY_MS)) {
            long long trimmed = 0;
            rc = writer_redis__trim(r, &trimmed, &st->undelivered, &st->pending, err, sizeof(err));
            st->trimmed += (uint64_t)trimmed;
            last_trim = now_ms();
            untrimmed = rc != WRITER_OK;
        }
        if (rc == WRITER_OK && now_ms() - last_forget >= FORGET_EVERY_MS) {
            long long removed = 0;
            rc = writer_redis__forget(r, c->consumer, c->forget_idle_ms, log, &removed, err,
                                      sizeof(err));
            st->forgotten += (uint64_t)removed;
            last_forget = now_ms();
            fflush(log);
        }
        writer_http__publish(http, st);
        if (rc == WRITER_ERR_NOMEM) goto out;
        if (rc == WRITER_OK) {
            if (last_err[0]) fprintf(log, "stock-writer %s: working again\n", c->consumer);
            last_err[0] = '\0';
            backoff = 0;
            continue;
        }
        if (rc == WRITER_ERR_REDIS && r) {
            redisFree(r);
            r = NULL;
        }
        /* One line per change of trouble, not one per retry. */
        if (strcmp(err, last_err) != 0) {
            fprintf(log, "stock-writer %s: %s; retrying\n", c->consumer, err);
            fflush(log);
            snprintf(last_err, sizeof(last_err), "%s", err);
        }
        backoff = backoff ? backoff * 2 : 100;
        if (backoff > c->backoff_max_ms) backoff = c->backoff_max_ms;
        rc = WRITER_OK;
    }
    fprintf(log,
            "stock-writer %s: stopped: %llu batches, %llu orders, %llu duplicates, "
            "%llu oversold promises, %llu claimed, %llu malformed, %llu vanished, "
            "%llu key reused, %llu trimmed\n",
            c->consumer, (unsigned long long)st->batches, (unsigned long long)st->orders,
            (unsigned long long)st->duplicates, (unsigned long long)st->oversold,
            (unsigned long long)st->claimed, (unsigned long long)st->malformed,
            (unsigned long long)st->vanished, (unsigned long long)st->key_reused,
            (unsigned long long)st->trimmed);
    fflush(log);
out:
    writer_http__stop(http);
    if (r) redisFree(r);
    writer_db__free(db);
    free(e);
    return rc;
}
