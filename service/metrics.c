/* metrics.c: stockd's counters and histograms, and their Prometheus text rendering.
 *
 * One process-wide set, updated with relaxed atomics from any thread (a counter only
 * needs to be exact eventually, not ordered with anything else) and rendered on the
 * HTTP polling thread for GET /metrics; rendering reads memory only, never blocks on
 * I/O. The lock counters come from the lock set's own (lock_get_stats, lock/lock.h). */
#include <stdarg.h>
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

#define NRESULTS (STOCKD_R_KEY_CONFLICT + 1)

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
} m;

static const char *route_names[STOCKD_ROUTE_COUNT] = {
    [STOCKD_ROUTE_REDUCE] = "/stock/reduce", [STOCKD_ROUTE_STOCK] = "/stock",
    [STOCKD_ROUTE_HEALTH] = "/health",       [STOCKD_ROUTE_METRICS] = "/metrics",
    [STOCKD_ROUTE_LOCK_QUEUE] = "/lock/queue", [STOCKD_ROUTE_OTHER] = "other",
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

static void put_histogram(buf *b, const char *name, const char *help, histogram *h) {
    unsigned long long cum = 0;

    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (size_t i = 0; i <= NBUCKETS; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        if (i < NBUCKETS)
            put(b, "%s_bucket{le=\"%g\"} %llu\n", name, bucket_le[i], cum);
        else
            put(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, cum);
    }
    put(b, "%s_sum %.9f\n", name,
        (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9);
    /* The count is the +Inf bucket, so the two always agree in one scrape. */
    put(b, "%s_count %llu\n", name, cum);
}

static void put_counter(buf *b, const char *name, const char *help, unsigned long long v) {
    put(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, v);
}

/* The stock gauge (stockwatch.c): one series per product this instance served, the
 * last value read back from MySQL. The snapshot is copied out under the watch's mutex
 * (memory only), so rendering never waits on a read. */
static void put_stock(buf *b) {
    stockd_stock_reading *r = malloc(STOCKWATCH_MAX * sizeof(*r));
    uint64_t reads, errors;
    size_t n;

    if (!r) {
        b->oom = true;
        return;
    }
    n = stockd_stockwatch_snapshot(r, STOCKWATCH_MAX);
    put(b,
        "# HELP stockd_product_stock Stock of a product this instance served, as last read "
        "from MySQL (re-read within 1 s of each deduction; at most %d products).\n"
        "# TYPE stockd_product_stock gauge\n",
        STOCKWATCH_MAX);
    for (size_t i = 0; i < n; i++)
        put(b, "stockd_product_stock{product=\"%d\"} %d\n", r[i].product_id, r[i].stock);
    free(r);
    stockd_stockwatch_counts(&reads, &errors);
    put_counter(b, "stockd_stock_watch_reads_total",
                "Stock reads made for stockd_product_stock (not in stockd_mysql_statements_total).",
                (unsigned long long)reads);
    put_counter(b, "stockd_stock_watch_errors_total",
                "Stock reads for stockd_product_stock that failed (retried the next second).",
                (unsigned long long)errors);
}

char *stockd_metrics_render(const stockd_config *cfg, lock_set *locks) {
    buf b = {.cap = 8192};

    b.s = malloc(b.cap);
    if (!b.s) return NULL;
    b.s[0] = '\0';
    put(&b, "# HELP stockd_info The instance and its lock mode.\n# TYPE stockd_info gauge\n");
    put(&b, "stockd_info{instance=\"%s\",lock=\"%s\",version=\"%s\"} 1\n", cfg->instance,
        stockd_lock_mode_name(cfg->lock), STOCKD_VERSION);

    put(&b, "# HELP stockd_requests_total Answered requests by route and result.\n"
            "# TYPE stockd_requests_total counter\n");
    for (int r = 0; r < STOCKD_ROUTE_COUNT; r++) {
        for (int x = 0; x < NRESULTS; x++) {
            unsigned long long v = atomic_load_explicit(&m.requests[r][x], memory_order_relaxed);
            /* A deduction's two usual outcomes are there from the start, at 0: a series
             * that first appears with its value after a burst has no earlier sample, so
             * rate() would never see that burst. */
            bool always =
                r == STOCKD_ROUTE_REDUCE && (x == STOCKD_R_DEDUCTED || x == STOCKD_R_SOLD_OUT);
            if (v || always)
                put(&b, "stockd_requests_total{route=\"%s\",result=\"%s\",code=\"%u\"} %llu\n",
                    route_names[r], stockd_result_name((stockd_result)x),
                    stockd_answer_status((stockd_result)x), v);
        }
    }
    put(&b, "# HELP stockd_mysql_errors_total Failed MySQL transactions by kind.\n"
            "# TYPE stockd_mysql_errors_total counter\n");
    for (int e = 0; e < STOCKD_DBERR_COUNT; e++)
        put(&b, "stockd_mysql_errors_total{kind=\"%s\"} %llu\n", dberr_names[e],
            (unsigned long long)atomic_load_explicit(&m.mysql_errors[e], memory_order_relaxed));
    put_histogram(&b, "stockd_deduction_seconds",
                  "Time a worker spent on one deduction, lock wait included.", &m.deduction);
    put_histogram(&b, "stockd_lock_wait_seconds",
                  "Time spent acquiring the lock (modes local, zk, zk-herd).", &m.lock_wait);

    unsigned long long cum = 0;
    put(&b, "# HELP stockd_batch_size Deductions served by one lock acquisition.\n"
            "# TYPE stockd_batch_size histogram\n");
    for (size_t i = 0; i <= NBATCH; i++) {
        cum += atomic_load_explicit(&m.batch[i], memory_order_relaxed);
        if (i < NBATCH)
            put(&b, "stockd_batch_size_bucket{le=\"%u\"} %llu\n", batch_le[i], cum);
        else
            put(&b, "stockd_batch_size_bucket{le=\"+Inf\"} %llu\n", cum);
    }
    put(&b, "stockd_batch_size_sum %llu\nstockd_batch_size_count %llu\n",
        (unsigned long long)atomic_load_explicit(&m.batch_sum, memory_order_relaxed), cum);
    put(&b,
        "# HELP stockd_batch_products Products in one batch's transaction (--cross-products).\n"
        "# TYPE stockd_batch_products summary\n"
        "stockd_batch_products_sum %llu\nstockd_batch_products_count %llu\n"
        "# HELP stockd_cross_busy_total Products whose lock was busy when tried (an extra "
        "product's deductions went to a later batch; a leader's own product was passed on "
        "or waited for holding nothing).\n"
        "# TYPE stockd_cross_busy_total counter\nstockd_cross_busy_total %llu\n",
        (unsigned long long)atomic_load_explicit(&m.xbatch_sum, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&m.xbatch_count, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&m.xbatch_busy, memory_order_relaxed));

    /* Round trips per deduction: the totals, and their ratio to the deductions answered
     * so far (sold-out answers included in the cost, since they are part of it). */
    unsigned long long deducted = 0, statements;
    for (int r = 0; r < STOCKD_ROUTE_COUNT; r++)
        deducted += atomic_load_explicit(&m.requests[r][STOCKD_R_DEDUCTED], memory_order_relaxed);
    statements = atomic_load_explicit(&m.statements, memory_order_relaxed);
    put_counter(&b, "stockd_mysql_statements_total",
                "MySQL statements sent for requests (reads, writes, COMMIT, ROLLBACK).",
                statements);
    put_counter(&b, "stockd_combiner_deductions_total",
                "Deductions handed to the combiner (past the pre-check) to wait for the lock; "
                "a move to another segment hands one again.",
                atomic_load_explicit(&m.combined, memory_order_relaxed));
    put_counter(&b, "stockd_segment_moves_total",
                "Deductions that found their segment empty and moved on to the next one.",
                atomic_load_explicit(&m.segment_moves, memory_order_relaxed));
    put_counter(&b, "stockd_precheck_reads_total",
                "Sold-out pre-check reads before the lock (made while a product looks sold out).",
                atomic_load_explicit(&m.precheck_reads, memory_order_relaxed));
    put_counter(&b, "stockd_precheck_sold_out_total",
                "Requests answered sold out by the pre-check, without the lock.",
                atomic_load_explicit(&m.precheck_sold_out, memory_order_relaxed));

    /* The lock's counters, in one of two families: a session kind's (ZooKeeper: the
     * session's events and its operations by type) or a lease kind's (Redis, or
     * MySQL's stock_lock table on connections of their own, not counted in
     * stockd_mysql_statements_total). */
    const lock_kind *kind = lock_set_kind(locks);
    lock_stats st;
    lock_get_stats(locks, &st);
    const char *session_service = kind && (kind->flags & LOCK_KIND_SESSION) ? kind->service : NULL;
    const char *lease_service = kind && (kind->flags & LOCK_KIND_LEASE) ? kind->service : NULL;
    if (session_service) {
        const struct {
            const char *name, *help;
            uint64_t value;
        } counters[] = {
            {"stockd_lock_acquisitions_total",
             "ZooKeeper lock rounds begun: acquisitions, cache hits included.",
             st.acquired + st.cache_hits},
            {"stockd_lock_cache_hits_total",
             "ZooKeeper lock rounds served by a cached lock node, without an operation.",
             st.cache_hits},
            {"stockd_lock_cache_parks_total",
             "ZooKeeper locks kept (cached) after a batch instead of released.", st.cache_parks},
            {"stockd_lock_timeouts_total", "ZooKeeper lock acquisitions timed out.", st.timeouts},
            {"stockd_lock_suspect_total", "Held locks that became suspect.", st.suspect},
            {"stockd_lock_lost_total", "Held locks that were lost.", st.lost},
            {"stockd_zk_session_expirations_total", "ZooKeeper sessions expired.", st.expirations},
            {"stockd_zk_watch_events_total", "Node watches fired for lock waiters.",
             st.watch_events},
            {"stockd_zk_round_trips_total",
             "ZooKeeper round trips: one per synchronous operation, one per wave of "
             "operations sent together (many locks tried or released at once).",
             st.round_trips},
            {"stockd_zk_batched_tries_total",
             "ZooKeeper locks tried in waves sent together (--cross-products).", st.batched_tries},
        };
        for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
            put_counter(&b, counters[i].name, counters[i].help,
                        (unsigned long long)counters[i].value);
        put(&b, "# HELP stockd_lock_cache_releases_total Cached ZooKeeper locks let go, by "
                "reason.\n# TYPE stockd_lock_cache_releases_total counter\n");
        put(&b, "stockd_lock_cache_releases_total{reason=\"contender\"} %llu\n",
            (unsigned long long)st.cache_let_go_contender);
        put(&b, "stockd_lock_cache_releases_total{reason=\"timeout\"} %llu\n",
            (unsigned long long)st.cache_let_go_timeout);
        put(&b, "stockd_lock_cache_releases_total{reason=\"other\"} %llu\n",
            (unsigned long long)st.cache_let_go_other);
        put(&b, "# HELP stockd_zk_ops_total ZooKeeper operations by type.\n"
                "# TYPE stockd_zk_ops_total counter\n");
        for (size_t i = 0; i < sizeof(st.op) / sizeof(st.op[0]) && st.op[i].name; i++)
            put(&b, "stockd_zk_ops_total{op=\"%s\"} %llu\n", st.op[i].name,
                (unsigned long long)st.op[i].n);
    }
    if (lease_service) {
        const struct {
            const char *name, *help;
            uint64_t value;
        } counters[] = {
            {"stockd_lock_acquisitions_total", "Lock acquisitions.", st.acquired},
            {"stockd_lock_timeouts_total", "Lock acquisitions timed out.", st.timeouts},
            {"stockd_lock_lost_total", "Releases that found the lease run out.", st.lost},
            {"stockd_lock_unavailable_total", "Lock calls that could not reach the lock service.",
             st.unavailable},
        };
        for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
            put_counter(&b, counters[i].name, counters[i].help,
                        (unsigned long long)counters[i].value);
        put(&b,
            "# HELP stockd_lock_service_ops_total Operations sent to the lock service.\n"
            "# TYPE stockd_lock_service_ops_total counter\n"
            "stockd_lock_service_ops_total{service=\"%s\"} %llu\n",
            lease_service, (unsigned long long)st.ops);
        /* 0 with --lease-renew off: the series exists in every lease mode. */
        put(&b,
            "# HELP stockd_lease_renewals_total Leases the watchdog extended (--lease-renew).\n"
            "# TYPE stockd_lease_renewals_total counter\n"
            "stockd_lease_renewals_total{service=\"%s\"} %llu\n",
            lease_service, (unsigned long long)st.renewals);
    }
    put(&b, "# HELP stockd_round_trips_per_deduction Operations sent per deduction answered so "
            "far, by service.\n# TYPE stockd_round_trips_per_deduction gauge\n");
    put(&b, "stockd_round_trips_per_deduction{service=\"mysql\"} %.4f\n",
        deducted ? (double)statements / (double)deducted : 0.0);
    if (session_service || lease_service)
        put(&b, "stockd_round_trips_per_deduction{service=\"%s\"} %.4f\n",
            session_service ? session_service : lease_service,
            deducted ? (double)st.ops / (double)deducted : 0.0);
    put_stock(&b);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
