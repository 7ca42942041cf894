/* metrics.c: stockd's counters and histograms, and their Prometheus text rendering.
 *
 * One process-wide set, updated with relaxed atomics from any thread (a counter only
 * needs to be exact eventually, not ordered with anything else) and rendered on the
 * HTTP polling thread for GET /metrics; rendering reads memory only, never blocks on
 * I/O. The lock counters come from the lock set's own (lock_get_stats, lock/lock.h).
 * /metrics is the table `families`: a row per metric family (name, type, help, the lock
 * kinds it is for, and its value or the function that writes its samples). */
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stockd.h"

/* Upper bounds (seconds) of the latency buckets; +Inf is implicit. */
static const double bucket_le[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                   0.1,    0.25,  0.5,    1,     2.5,  5,     10};
#define NBUCKETS (sizeof(bucket_le) / sizeof(bucket_le[0]))

typedef struct histogram {
    atomic_ullong bucket[NBUCKETS + 1]; /* not cumulative; the last is +Inf */
    atomic_ullong count;
    atomic_ullong sum_ns;
} histogram;

#define NRESULTS STOCKD_R_COUNT

/* Upper bounds of the batch-size buckets (deductions per lock acquisition). */
static const unsigned batch_le[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
#define NBATCH (sizeof(batch_le) / sizeof(batch_le[0]))

static struct {
    atomic_ullong requests[STOCKD_ROUTE_COUNT][NRESULTS];
    atomic_ullong mysql_errors[STOCKD_DBERR_COUNT];
    histogram deduction, lock_wait;
    atomic_ullong batch[NBATCH + 1], batch_count, batch_sum;
    atomic_ullong xbatch_count, xbatch_sum, xbatch_busy; /* products per transaction */
    atomic_ullong statements;
    atomic_ullong precheck_reads, precheck_sold_out, combined, segment_moves;
    atomic_ullong txn_retries[STOCKD_TXN_COUNT];
} m;

static const char *route_names[STOCKD_ROUTE_COUNT] = {
    [STOCKD_ROUTE_REDUCE] = "/stock/reduce",
    [STOCKD_ROUTE_STOCK] = "/stock",
    [STOCKD_ROUTE_HEALTH] = "/health",
    [STOCKD_ROUTE_METRICS] = "/metrics",
    [STOCKD_ROUTE_LOCK_QUEUE] = "/lock/queue",
    [STOCKD_ROUTE_ORDER] = "/orders",
    [STOCKD_ROUTE_RESTOCK] = "/stock/restock",
    [STOCKD_ROUTE_ROUTING] = "/route",
    [STOCKD_ROUTE_OTHER] = "other",
};

static const char *dberr_names[STOCKD_DBERR_COUNT] = {
    [STOCKD_DBERR_CONNECT] = "connect",   [STOCKD_DBERR_QUERY] = "query",
    [STOCKD_DBERR_DEADLOCK] = "deadlock", [STOCKD_DBERR_FENCED] = "fenced",
    [STOCKD_DBERR_GUARD] = "guard",       [STOCKD_DBERR_UNKNOWN] = "unknown",
};

void stockd_metrics_request(stockd_route route, stockd_result result) {
    if ((unsigned)route >= STOCKD_ROUTE_COUNT || (unsigned)result >= NRESULTS) return;
    atomic_fetch_add_explicit(&m.requests[route][result], 1, memory_order_relaxed);
}

void stockd_metrics_db_error(int rc) {
    stockd_dberr e;
    switch (rc) {
    case STOCKDB_ERR_CONNECT:
        e = STOCKD_DBERR_CONNECT;
        break;
    case STOCKDB_ERR_DEADLOCK:
        e = STOCKD_DBERR_DEADLOCK;
        break;
    case STOCKDB_ERR_FENCED:
        e = STOCKD_DBERR_FENCED;
        break;
    case STOCKDB_ERR_GUARD:
        e = STOCKD_DBERR_GUARD;
        break;
    case STOCKDB_ERR_UNKNOWN:
        e = STOCKD_DBERR_UNKNOWN;
        break;
    case STOCKDB_OK:
    case STOCKDB_ERR_NOT_FOUND:
    case STOCKDB_ERR_KEY_REUSED: /* the client's mistake, not the database's */
        return;
    default:
        e = STOCKD_DBERR_QUERY;
        break;
    }
    atomic_fetch_add_explicit(&m.mysql_errors[e], 1, memory_order_relaxed);
}

static void observe(histogram *h, uint64_t ns) {
    size_t i = 0;
    while (i < NBUCKETS && (double)ns > bucket_le[i] * 1e9)
        i++;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

void stockd_metrics_deduction(uint64_t ns) {
    observe(&m.deduction, ns);
}

void stockd_metrics_lock_wait(uint64_t ns) {
    observe(&m.lock_wait, ns);
}

void stockd_metrics_batch(unsigned n) {
    size_t i = 0;
    while (i < NBATCH && n > batch_le[i])
        i++;
    atomic_fetch_add_explicit(&m.batch[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m.batch_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m.batch_sum, n, memory_order_relaxed);
}

void stockd_metrics_batch_products(unsigned n, unsigned busy) {
    atomic_fetch_add_explicit(&m.xbatch_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m.xbatch_sum, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&m.xbatch_busy, busy, memory_order_relaxed);
}

void stockd_metrics_cross_busy(void) {
    atomic_fetch_add_explicit(&m.xbatch_busy, 1, memory_order_relaxed);
}

void stockd_metrics_statements(uint64_t n) {
    atomic_fetch_add_explicit(&m.statements, n, memory_order_relaxed);
}

void stockd_metrics_combined(void) {
    atomic_fetch_add_explicit(&m.combined, 1, memory_order_relaxed);
}

void stockd_metrics_segment_move(void) {
    atomic_fetch_add_explicit(&m.segment_moves, 1, memory_order_relaxed);
}

void stockd_metrics_txn_retry(stockd_txn what) {
    if ((unsigned)what >= STOCKD_TXN_COUNT) return;
    atomic_fetch_add_explicit(&m.txn_retries[what], 1, memory_order_relaxed);
}

void stockd_metrics_precheck(bool sold_out) {
    atomic_fetch_add_explicit(&m.precheck_reads, 1, memory_order_relaxed);
    if (sold_out) atomic_fetch_add_explicit(&m.precheck_sold_out, 1, memory_order_relaxed);
}

/* A growing text buffer; on allocation failure it stops growing and marks itself. */
typedef struct buf {
    char *s;
    size_t len, cap;
    bool oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
    va_list ap;
    int n;

    if (b->oom) return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) break;
        size_t cap = b->cap * 2 + (size_t)n;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    b->len += (size_t)n;
}

/* ------------------------------------------------------------------ rendering */

/* What one scrape reports, read once at its start (relaxed loads: each value is exact
 * eventually, and a scrape is not a snapshot of one instant). */
typedef struct scrape {
    const stockd_config *cfg;
    const char *service; /* the lock kind's service (kinds without one: NULL) */
    lock_stats st;
    uint64_t zk_rounds; /* acquisitions plus cache hits */
    uint64_t deducted, statements, combined, segment_moves, precheck_reads, precheck_sold_out;
    uint64_t xbatch_sum, xbatch_count, xbatch_busy, watch_reads, watch_errors;
} scrape;

/* A family is in every scrape, or only when the lock kind has a session (ZooKeeper) or
 * a lease (lock/lock.h's LOCK_KIND_SESSION and LOCK_KIND_LEASE): the same name may then
 * have one row per family of kinds, each with its own help; or only in mode redis-stock. */
enum { ALL, SESSION, LEASE, REDIS_STOCK };

/* One metric family: its HELP and TYPE lines, then either the one sample `name value`
 * of the uint64_t at `off` in the scrape, or the lines `samples` writes. */
typedef struct family {
    const char *name, *type, *help;
    int when;
    size_t off;
    void (*samples)(buf *b, const struct family *f, const scrape *s);
} family;

static unsigned long long load(atomic_ullong *v) {
    return atomic_load_explicit(v, memory_order_relaxed);
}

/* A histogram's n + 1 buckets, cumulative, with their bounds le_s (seconds) or le_n
 * (counts). Returns the +Inf bucket, which is written as the _count too, so that the
 * two agree in one scrape. */
static unsigned long long put_buckets(buf *b, const char *name, atomic_ullong *bucket, size_t n,
                                      const double *le_s, const unsigned *le_n) {
    unsigned long long cum = 0;
    for (size_t i = 0; i <= n; i++) {
        cum += load(&bucket[i]);
        if (i == n)
            put(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, cum);
        else if (le_s)
            put(b, "%s_bucket{le=\"%g\"} %llu\n", name, le_s[i], cum);
        else
            put(b, "%s_bucket{le=\"%u\"} %llu\n", name, le_n[i], cum);
    }
    return cum;
}

static void put_seconds(buf *b, const char *name, histogram *h) {
    unsigned long long count = put_buckets(b, name, h->bucket, NBUCKETS, bucket_le, NULL);
    put(b, "%s_sum %.9f\n%s_count %llu\n", name, (double)load(&h->sum_ns) / 1e9, name, count);
}

static void s_info(buf *b, const family *f, const scrape *s) {
    put(b, "%s{instance=\"%s\",lock=\"%s\",version=\"%s\"} 1\n", f->name, s->cfg->instance,
        stockd_lock_mode_name(s->cfg->lock), STOCKD_VERSION);
}

static void s_requests(buf *b, const family *f, const scrape *s) {
    for (int r = 0; r < STOCKD_ROUTE_COUNT; r++) {
        for (int x = 0; x < NRESULTS; x++) {
            unsigned long long v = load(&m.requests[r][x]);
            /* A deduction's two usual outcomes are there from the start, at 0: a series
             * that first appears with its value after a burst has no earlier sample, so
             * rate() would never see that burst. */
            bool always =
                r == STOCKD_ROUTE_REDUCE && (x == STOCKD_R_DEDUCTED || x == STOCKD_R_SOLD_OUT);
            if (v || always)
                put(b, "%s{route=\"%s\",result=\"%s\",code=\"%u\"} %llu\n", f->name, route_names[r],
                    stockd_result_name((stockd_result)x), stockd_answer_status((stockd_result)x),
                    v);
        }
    }
}

static void s_mysql_errors(buf *b, const family *f, const scrape *s) {
    for (int e = 0; e < STOCKD_DBERR_COUNT; e++)
        put(b, "%s{kind=\"%s\"} %llu\n", f->name, dberr_names[e], load(&m.mysql_errors[e]));
}

static void s_txn_retries(buf *b, const family *f, const scrape *s) {
    static const char *names[STOCKD_TXN_COUNT] = {
        [STOCKD_TXN_DEDUCTION] = "deduction", [STOCKD_TXN_ORDER] = "order"};
    for (int t = 0; t < STOCKD_TXN_COUNT; t++)
        put(b, "%s{txn=\"%s\"} %llu\n", f->name, names[t], load(&m.txn_retries[t]));
}

static void s_deduction(buf *b, const family *f, const scrape *s) {
    put_seconds(b, f->name, &m.deduction);
}

static void s_lock_wait(buf *b, const family *f, const scrape *s) {
    put_seconds(b, f->name, &m.lock_wait);
}

static void s_batch_size(buf *b, const family *f, const scrape *s) {
    unsigned long long count = put_buckets(b, f->name, m.batch, NBATCH, NULL, batch_le);
    put(b, "%s_sum %llu\n%s_count %llu\n", f->name, load(&m.batch_sum), f->name, count);
}

static void s_batch_products(buf *b, const family *f, const scrape *s) {
    put(b, "%s_sum %llu\n%s_count %llu\n", f->name, (unsigned long long)s->xbatch_sum, f->name,
        (unsigned long long)s->xbatch_count);
}

static void s_cache_releases(buf *b, const family *f, const scrape *s) {
    put(b,
        "%s{reason=\"contender\"} %llu\n%s{reason=\"timeout\"} %llu\n%s{reason=\"other\"} %llu\n",
        f->name, (unsigned long long)s->st.cache_let_go_contender, f->name,
        (unsigned long long)s->st.cache_let_go_timeout, f->name,
        (unsigned long long)s->st.cache_let_go_other);
}

static void s_zk_ops(buf *b, const family *f, const scrape *s) {
    for (size_t i = 0; i < sizeof(s->st.op) / sizeof(s->st.op[0]) && s->st.op[i].name; i++)
        put(b, "%s{op=\"%s\"} %llu\n", f->name, s->st.op[i].name,
            (unsigned long long)s->st.op[i].n);
}

static void s_service_ops(buf *b, const family *f, const scrape *s) {
    put(b, "%s{service=\"%s\"} %llu\n", f->name, s->service, (unsigned long long)s->st.ops);
}

/* 0 with --lease-renew off: the series exists in every lease mode. */
static void s_renewals(buf *b, const family *f, const scrape *s) {
    put(b, "%s{service=\"%s\"} %llu\n", f->name, s->service, (unsigned long long)s->st.renewals);
}

/* Round trips per deduction: the totals over the deductions answered so far (sold-out
 * answers included in the cost, since they are part of it). */
static void s_round_trips(buf *b, const family *f, const scrape *s) {
    double d = (double)s->deducted;
    put(b, "%s{service=\"mysql\"} %.4f\n", f->name, d ? (double)s->statements / d : 0.0);
    if (s->service)
        put(b, "%s{service=\"%s\"} %.4f\n", f->name, s->service, d ? (double)s->st.ops / d : 0.0);
}

/* The stock watch's readings (stockwatch.c), one series per product this instance
 * served: MySQL's stock, or (counts) mode redis-stock's count in Redis beside it, where
 * the watch has read one. The snapshot is copied out under the watch's mutex (memory
 * only), so rendering never waits on a read. */
static void put_readings(buf *b, const family *f, bool counts) {
    stockd_stock_reading *r = malloc(STOCKWATCH_MAX * sizeof(*r));
    if (!r) {
        b->oom = true;
        return;
    }
    size_t n = stockd_stockwatch_snapshot(r, STOCKWATCH_MAX);
    for (size_t i = 0; i < n; i++) {
        if (!counts)
            put(b, "%s{product=\"%d\"} %d\n", f->name, r[i].product_id, r[i].stock);
        else if (r[i].has_count)
            put(b, "%s{product=\"%d\"} %lld\n", f->name, r[i].product_id, r[i].count);
    }
    free(r);
}

static void s_stock(buf *b, const family *f, const scrape *s) {
    (void)s;
    put_readings(b, f, false);
}

/* Mode redis-stock: the count the order writer's MySQL stock follows (the drift). */
static void s_redis_stock(buf *b, const family *f, const scrape *s) {
    (void)s;
    put_readings(b, f, true);
}

/* Mode redis-stock: the order stream's entries the writers have not written yet. */
static void s_backlog(buf *b, const family *f, const scrape *s) {
    (void)s;
    stockd_stream_backlog bl;
    stockd_stockwatch_backlog(&bl);
    if (!bl.known) return;
    put(b, "%s{state=\"undelivered\"} %lld\n", f->name, bl.undelivered);
    put(b, "%s{state=\"pending\"} %lld\n", f->name, bl.pending);
}

/* Owner routing (route.c; docs/routing.md): its counters, view and breakers. */
static void s_route(buf *b, const family *f, const scrape *s) {
    (void)s;
    stockd_route_stats_t *st = malloc(sizeof(*st));
    if (!st) return;
    stockd_route_stats(st);
    static const struct {
        const char *suffix;
        int counter;
    } rows[] = {{"forwarded_total", STOCKD_RC_FORWARDED},
                {"frames_total", STOCKD_RC_FRAMES},
                {"frame_deductions_total", STOCKD_RC_FRAME_DEDUCTIONS},
                {"local_fallbacks_total", STOCKD_RC_LOCAL_FALLBACKS},
                {"refused_hops_total", STOCKD_RC_REFUSED_HOPS}};
    const char *suffix = f->name + strlen("stockd_route_");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (strcmp(suffix, rows[i].suffix) == 0)
            put(b, "%s %llu\n", f->name, (unsigned long long)st->count[rows[i].counter]);
    if (strcmp(suffix, "view") == 0) put(b, "%s %llu\n", f->name, (unsigned long long)st->view);
    if (strcmp(suffix, "members") == 0) put(b, "%s %zu\n", f->name, st->members);
    if (strcmp(suffix, "breaker_open") == 0)
        for (size_t i = 0; i < st->npeers; i++)
            put(b, "%s{peer=\"%s\"} %d\n", f->name, st->peer[i], st->open[i] ? 1 : 0);
    free(st);
}

#define V(field)  offsetof(scrape, field), NULL
#define ST(field) offsetof(scrape, st.field), NULL
#define FN(fn)    0, fn
#define STR_(x)   #x
#define STR(x)    STR_(x)

/* Every family of /metrics, in the order of the output. The names, labels and help
 * are a contract: monitoring/'s rules and dashboard and tests/monitoring read them. */
static const family families[] = {
    {"stockd_info", "gauge", "The instance and its lock mode.", ALL, FN(s_info)},
    {"stockd_requests_total", "counter", "Answered requests by route and result.", ALL,
     FN(s_requests)},
    {"stockd_mysql_errors_total", "counter", "Failed MySQL transactions by kind.", ALL,
     FN(s_mysql_errors)},
    {"stockd_deduction_seconds", "histogram",
     "Time a worker spent on one deduction, lock wait included.", ALL, FN(s_deduction)},
    {"stockd_lock_wait_seconds", "histogram",
     "Time a batch's leader spent acquiring the lock, in every mode that batches (about 0 where "
     "the lock kind is none).",
     ALL, FN(s_lock_wait)},
    {"stockd_batch_size", "histogram", "Deductions served by one lock acquisition.", ALL,
     FN(s_batch_size)},
    {"stockd_batch_products", "summary", "Products in one batch's transaction (--cross-products).",
     ALL, FN(s_batch_products)},
    {"stockd_cross_busy_total", "counter",
     "Products whose lock was busy when tried (an extra product's deductions went to a later "
     "batch; a leader's own product was passed on or waited for holding nothing).",
     ALL, V(xbatch_busy)},
    {"stockd_mysql_statements_total", "counter",
     "MySQL statements sent for requests (reads, writes, COMMIT, ROLLBACK).", ALL, V(statements)},
    {"stockd_combiner_deductions_total", "counter",
     "Deductions handed to the combiner (past the pre-check) to wait for the lock; a move to "
     "another segment hands one again.",
     ALL, V(combined)},
    {"stockd_segment_moves_total", "counter",
     "Deductions that found their segment empty and moved on to the next one.", ALL,
     V(segment_moves)},
    {"stockd_precheck_reads_total", "counter",
     "Sold-out pre-check reads before the lock (made while a product looks sold out).", ALL,
     V(precheck_reads)},
    {"stockd_precheck_sold_out_total", "counter",
     "Requests answered sold out by the pre-check, without the lock.", ALL, V(precheck_sold_out)},
    {"stockd_txn_retries_total", "counter",
     "Transactions the database aborted (a deadlock or lock wait victim, or on Galera a "
     "certification conflict at COMMIT) and stockd ran again, whole, by txn: deduction (a "
     "deduction or a batch) or order (pay, cancel, the expiry's release, restock).",
     ALL, FN(s_txn_retries)},
    /* A session kind's (ZooKeeper's) lock: the session's events, its operations. */
    {"stockd_lock_acquisitions_total", "counter",
     "ZooKeeper lock rounds begun: acquisitions, cache hits included.", SESSION, V(zk_rounds)},
    {"stockd_lock_cache_hits_total", "counter",
     "ZooKeeper lock rounds served by a cached lock node, without an operation.", SESSION,
     ST(cache_hits)},
    {"stockd_lock_cache_parks_total", "counter",
     "ZooKeeper locks kept (cached) after a batch instead of released.", SESSION, ST(cache_parks)},
    {"stockd_lock_timeouts_total", "counter", "ZooKeeper lock acquisitions timed out.", SESSION,
     ST(timeouts)},
    {"stockd_lock_suspect_total", "counter", "Held locks that became suspect.", SESSION,
     ST(suspect)},
    {"stockd_lock_lost_total", "counter", "Held locks that were lost.", SESSION, ST(lost)},
    {"stockd_zk_session_expirations_total", "counter", "ZooKeeper sessions expired.", SESSION,
     ST(expirations)},
    {"stockd_zk_watch_events_total", "counter", "Node watches fired for lock waiters.", SESSION,
     ST(watch_events)},
    {"stockd_zk_seq_limit_total", "counter",
     "Lock acquisitions refused: the lock's parent has used up ZooKeeper's sequence numbers "
     "(recreate it).",
     SESSION, ST(seq_limit)},
    {"stockd_zk_round_trips_total", "counter",
     "ZooKeeper round trips: one per synchronous operation, one per wave of operations sent "
     "together (many locks tried or released at once).",
     SESSION, ST(round_trips)},
    {"stockd_zk_batched_tries_total", "counter",
     "ZooKeeper locks tried in waves sent together (--cross-products).", SESSION,
     ST(batched_tries)},
    {"stockd_lock_cache_releases_total", "counter", "Cached ZooKeeper locks let go, by reason.",
     SESSION, FN(s_cache_releases)},
    {"stockd_zk_ops_total", "counter", "ZooKeeper operations by type.", SESSION, FN(s_zk_ops)},
    /* A lease kind's lock (Redis, RedLock, etcd, or MySQL's stock_lock table on
     * connections of its own, not counted in stockd_mysql_statements_total). */
    {"stockd_lock_acquisitions_total", "counter", "Lock acquisitions.", LEASE, ST(acquired)},
    {"stockd_lock_timeouts_total", "counter", "Lock acquisitions timed out.", LEASE, ST(timeouts)},
    {"stockd_lock_lost_total", "counter", "Releases that found the lease run out.", LEASE,
     ST(lost)},
    {"stockd_lock_unavailable_total", "counter",
     "Lock calls that could not reach the lock service.", LEASE, ST(unavailable)},
    {"stockd_lock_service_ops_total", "counter", "Operations sent to the lock service.", LEASE,
     FN(s_service_ops)},
    {"stockd_lease_renewals_total", "counter", "Leases the watchdog extended (--lease-renew).",
     LEASE, FN(s_renewals)},
    {"stockd_round_trips_per_deduction", "gauge",
     "Operations sent per deduction answered so far, by service.", ALL, FN(s_round_trips)},
    {"stockd_product_stock", "gauge",
     "Stock of a product this instance served, as last read from MySQL (re-read within 1 s "
     "of each deduction; at most " STR(STOCKWATCH_MAX) " products).",
     ALL, FN(s_stock)},
    {"stockd_stock_watch_reads_total", "counter",
     "Stock reads made for stockd_product_stock (not in stockd_mysql_statements_total).", ALL,
     V(watch_reads)},
    {"stockd_stock_watch_errors_total", "counter",
     "Stock reads for stockd_product_stock that failed (retried the next second).", ALL,
     V(watch_errors)},
    {"stockd_route_forwarded_total", "counter",
     "Deductions this instance sent to their product's owner (--route owner), in frames.", ALL,
     FN(s_route)},
    {"stockd_route_frames_total", "counter",
     "Frames sent to owners: each carries a product's queued deductions at once.", ALL,
     FN(s_route)},
    {"stockd_route_frame_deductions_total", "counter",
     "Deductions received in peers' frames and served here as their product's owner.", ALL,
     FN(s_route)},
    {"stockd_route_local_fallbacks_total", "counter",
     "Deductions served here because their forward failed (owner refused, unanswered, or its "
     "circuit open), under the same request id.",
     ALL, FN(s_route)},
    {"stockd_route_refused_hops_total", "counter",
     "Forwarded deductions this instance's view gives to another owner: served here, never "
     "forwarded a second time.",
     ALL, FN(s_route)},
    {"stockd_route_breaker_open", "gauge",
     "1 while the circuit to a peer is open (forwards to it are served locally).", ALL,
     FN(s_route)},
    {"stockd_route_view", "gauge",
     "The view's number (ZooKeeper: the members node's child version; static: 1).", ALL,
     FN(s_route)},
    {"stockd_route_members", "gauge", "Instances in the view, this one included.", ALL,
     FN(s_route)},
    {"stockd_redis_stock", "gauge",
     "Mode redis-stock: the sellable count of a product in Redis, read with "
     "stockd_product_stock (MariaDB's stock follows it as the order writer writes).",
     REDIS_STOCK, FN(s_redis_stock)},
    {"stockd_order_stream_backlog", "gauge",
     "Mode redis-stock: entries of the stream stockd:orders not yet written by the order "
     "writers: undelivered (XINFO GROUPS lag) and pending (delivered, not acknowledged).",
     REDIS_STOCK, FN(s_backlog)},
};

char *stockd_metrics_render(const stockd_config *cfg, lock_set *locks) {
    const lock_kind *kind = lock_set_kind(locks);
    unsigned flags = kind ? kind->flags : 0;
    scrape s = {.cfg = cfg};
    buf b = {.cap = 8192};

    lock_get_stats(locks, &s.st);
    if (flags & (LOCK_KIND_SESSION | LOCK_KIND_LEASE)) s.service = kind->service;
    s.zk_rounds = s.st.acquired + s.st.cache_hits;
    for (int r = 0; r < STOCKD_ROUTE_COUNT; r++)
        s.deducted += load(&m.requests[r][STOCKD_R_DEDUCTED]);
    s.statements = load(&m.statements);
    s.combined = load(&m.combined);
    s.segment_moves = load(&m.segment_moves);
    s.precheck_reads = load(&m.precheck_reads);
    s.precheck_sold_out = load(&m.precheck_sold_out);
    s.xbatch_sum = load(&m.xbatch_sum);
    s.xbatch_count = load(&m.xbatch_count);
    s.xbatch_busy = load(&m.xbatch_busy);
    stockd_stockwatch_counts(&s.watch_reads, &s.watch_errors);

    b.s = malloc(b.cap);
    if (!b.s) return NULL;
    b.s[0] = '\0';
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        const family *f = &families[i];
        if ((f->when == SESSION && !(flags & LOCK_KIND_SESSION)) ||
            (f->when == LEASE && !(flags & LOCK_KIND_LEASE)) ||
            (f->when == REDIS_STOCK && cfg->lock != STOCKD_LOCK_REDIS_STOCK))
            continue;
        put(&b, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
        if (f->samples)
            f->samples(&b, f, &s);
        else
            put(&b, "%s %llu\n", f->name,
                (unsigned long long)*(const uint64_t *)((const char *)&s + f->off));
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
