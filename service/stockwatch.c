/* stockwatch.c: the stock of the products this instance serves, read back from MySQL
 * for the stockd_product_stock gauge of /metrics (and the alert on negative stock,
 * monitoring/stockd-rules.yml).
 *
 * Why a read of its own. The stock a worker knows after a deduction is not the table's:
 * without a lock (mode none) instances race, and the stock one of them believes it left
 * (what it read, minus what it took) is already stale when another one's UPDATE lands
 * after it. A gauge fed with those values could say 0 while the row says -46, which is
 * exactly when the alert must fire. So the gauge only ever holds what a plain read of
 * the committed row returned: every worker that has just read or written a product's
 * stock marks it (stockd_stockwatch_note), and one thread with a MySQL connection of
 * its own re-reads the marked products once a second
 * (stockdb_get_stock: one SELECT, segments included). Whoever committed last marked the
 * product after its commit, so its instance reads the final stock within a second of
 * the last write: the alert cannot miss an oversell that stays, whatever the race.
 * Stock only falls under deductions, so a negative value read is a true oversell at the
 * moment of the read. A product whose last reading was negative is re-read every pass
 * until it is not, so that a restock by hand clears the alert without any deduction.
 *
 * In mode redis-stock the deductions happen in Redis and MariaDB's stock follows later,
 * when the order writer has written them; the drift between the two is what a person
 * should see open and close. So the watch also reads, on a Redis connection of its own,
 * each product's count (stockredis_count) beside its stock, and once a pass the order
 * stream's backlog (stockredis_backlog); and it keeps re-reading a product while its
 * count and its stock differ, since no deduction of this instance marks it when the
 * writer moves the stock. The cost: a GET per product read and one XINFO a second.
 *
 * The same note sets the product's sold-out hint (stockd_stockwatch_sold_out), which
 * decides whether a deduction is worth a pre-check read before its lock (deduct.c).
 *
 * Bounded: at most STOCKWATCH_MAX products. A product whose last reading was negative
 * is never forgotten while it stays negative, whatever else is served: the alert must
 * not resolve over an oversell that stays. The others are kept most recently served
 * first; the least recently served of them gives its entry to a new product, and its
 * series leaves /metrics. (If every entry reads negative, a new product is not watched
 * until one recovers.) The cost is one SELECT per second per product that was served in
 * the last second or reads negative, on a connection outside the workers' (its
 * statements are counted in stockd_stock_watch_reads_total, not in
 * stockd_mysql_statements_total).
 *
 * Threads: one process-wide table under one mutex, held for memory moves only, never
 * across I/O, so the polling thread may snapshot it for /metrics. A worker's touch costs
 * O(1) under it, also past STOCKWATCH_MAX products: the order of recency is a list, and
 * an entry leaves the hash index by backward-shift deletion, not by a rebuild. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stockd.h"

#define INDEX_SIZE 2048 /* a power of two, over twice STOCKWATCH_MAX: short probes */
#define INDEX_MASK (INDEX_SIZE - 1)
#define PASS_MS    1000
#define NONE       UINT16_MAX /* no entry, in the recency list's links */

typedef struct reading {
    int32_t product_id;
    int32_t stock;
    long long count; /* redis-stock: its count in Redis, when has_count */
    bool has_count;
    bool known;          /* stock holds a read (a product that was never read has no series) */
    bool dirty;          /* touched since the last read began */
    bool pinned;         /* its last reading was negative: out of the recency list */
    uint16_t prev, next; /* the recency list, least recently served first */
} reading;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    reading r[STOCKWATCH_MAX];
    unsigned n;
    uint16_t index[INDEX_SIZE]; /* entry + 1, 0 = empty; linear probing */
    uint16_t oldest, newest;    /* the recency list's ends, NONE when empty */
    bool started, stop;
    pthread_t thread;
    stockdb_config db;
    char instance[STOCKDB_INSTANCE_MAX + 1];
    bool redis_on; /* mode redis-stock: read the counts and the backlog too */
    char redis_addr[256], redis_user[129], redis_password[513];
    stockd_stream_backlog backlog;
    atomic_ullong reads, errors;
} w = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .cv = PTHREAD_COND_INITIALIZER,
       .oldest = NONE,
       .newest = NONE};

static unsigned slot_of(int32_t product_id) {
    /* Knuth's multiplicative hash: consecutive ids spread over the index. */
    return ((uint32_t)product_id * 2654435761u) >> (32 - 11);
}

/* The index slot of product_id's entry, or -1. Under w.mu. */
static int find_slot(int32_t product_id) {
    for (unsigned h = slot_of(product_id);; h = (h + 1) & INDEX_MASK) {
        unsigned e = w.index[h];
        if (e == 0) return -1;
        if (w.r[e - 1].product_id == product_id) return (int)h;
    }
}

/* The entry of product_id, or -1. Under w.mu. */
static int find(int32_t product_id) {
    int h = find_slot(product_id);
    return h < 0 ? -1 : (int)w.index[h] - 1;
}

static void index_add(unsigned e) {
    unsigned h = slot_of(w.r[e].product_id);
    while (w.index[h] != 0)
        h = (h + 1) & INDEX_MASK;
    w.index[h] = (uint16_t)(e + 1);
}

/* Removes entry e from the index (backward-shift deletion: every entry after the hole
 * in its probe run that may move back does, so no tombstone is left). Under w.mu. */
static void index_del(unsigned e) {
    unsigned hole = (unsigned)find_slot(w.r[e].product_id);
    for (unsigned j = (hole + 1) & INDEX_MASK; w.index[j] != 0; j = (j + 1) & INDEX_MASK) {
        unsigned home = slot_of(w.r[w.index[j] - 1].product_id);
        /* The entry at j may fill the hole unless its home lies cyclically in (hole, j]. */
        if (((j - home) & INDEX_MASK) >= ((j - hole) & INDEX_MASK)) {
            w.index[hole] = w.index[j];
            hole = j;
        }
    }
    w.index[hole] = 0;
}

static void list_unlink(unsigned e) {
    reading *r = &w.r[e];
    if (r->prev != NONE)
        w.r[r->prev].next = r->next;
    else
        w.oldest = r->next;
    if (r->next != NONE)
        w.r[r->next].prev = r->prev;
    else
        w.newest = r->prev;
    r->prev = r->next = NONE;
}

static void list_append(unsigned e) {
    reading *r = &w.r[e];
    r->prev = w.newest;
    r->next = NONE;
    if (w.newest != NONE)
        w.r[w.newest].next = (uint16_t)e;
    else
        w.oldest = (uint16_t)e;
    w.newest = (uint16_t)e;
}

/* The sold-out hints, apart from the table: (product id << 1) | sold out, by product id
 * modulo; 0 = no hint, and a collision forgets one. Lock-free: one word per entry. The
 * pre-check read (deduct.c) is only worth its round trip when the product is likely
 * sold out, so it is made only when the hint says so; a product believed in stock goes
 * straight to its lock, where the batch's own read decides. A wrong or lost hint costs
 * one read or one lock round, never correctness. */
#define NHINTS 4096
static _Atomic uint64_t hints[NHINTS];

bool stockd_stockwatch_sold_out(int32_t product_id) {
    uint64_t v = atomic_load_explicit(&hints[(uint32_t)product_id % NHINTS], memory_order_relaxed);
    return v == (((uint64_t)(uint32_t)product_id << 1) | 1u);
}

void stockd_stockwatch_note(int32_t product_id, int32_t stock) {
    uint64_t v = ((uint64_t)(uint32_t)product_id << 1) | (stock <= 0 ? 1u : 0u);
    atomic_store_explicit(&hints[(uint32_t)product_id % NHINTS], v, memory_order_relaxed);
    if (product_id <= 0) return;
    pthread_mutex_lock(&w.mu);
    int e = find(product_id);
    if (e < 0) {
        if (w.n < STOCKWATCH_MAX) {
            e = (int)w.n++;
        } else if (w.oldest != NONE) {
            /* Full: the least recently served product that does not read negative
             * gives its entry up. */
            e = w.oldest;
            list_unlink((unsigned)e);
            index_del((unsigned)e);
        } else {
            pthread_mutex_unlock(&w.mu); /* every entry reads negative: they stay */
            return;
        }
        w.r[e] = (reading){.product_id = product_id, .prev = NONE, .next = NONE};
        index_add((unsigned)e);
        list_append((unsigned)e);
    } else if (!w.r[e].pinned) {
        list_unlink((unsigned)e);
        list_append((unsigned)e);
    }
    w.r[e].dirty = true;
    pthread_mutex_unlock(&w.mu);
}

size_t stockd_stockwatch_snapshot(stockd_stock_reading *out, size_t max) {
    size_t k = 0;
    pthread_mutex_lock(&w.mu);
    for (unsigned i = 0; i < w.n && k < max; i++)
        if (w.r[i].known)
            out[k++] = (stockd_stock_reading){.product_id = w.r[i].product_id,
                                              .stock = w.r[i].stock,
                                              .has_count = w.r[i].has_count,
                                              .count = w.r[i].count};
    pthread_mutex_unlock(&w.mu);
    return k;
}

void stockd_stockwatch_backlog(stockd_stream_backlog *out) {
    pthread_mutex_lock(&w.mu);
    *out = w.backlog;
    pthread_mutex_unlock(&w.mu);
}

void stockd_stockwatch_counts(uint64_t *reads, uint64_t *errors) {
    *reads = atomic_load_explicit(&w.reads, memory_order_relaxed);
    *errors = atomic_load_explicit(&w.errors, memory_order_relaxed);
}

/* Stores a read (or, for a product that is gone, forgets the value), and the Redis count
 * read with it (count_rc < 0: none, or it failed); takes w.mu. */
static void store(int32_t product_id, int rc, int32_t stock, int count_rc, long long count) {
    pthread_mutex_lock(&w.mu);
    int e = find(product_id);
    if (e >= 0) {
        reading *r = &w.r[e];
        r->has_count = count_rc == STOCKREDIS_OK;
        r->count = count;
        if (rc == STOCKDB_OK) {
            r->stock = stock;
            r->known = true;
        } else if (rc == STOCKDB_ERR_NOT_FOUND) {
            r->known = false;
        } else {
            r->dirty = true; /* read again next pass */
        }
        /* A negative reading pins the entry until a reading says otherwise; an error
         * leaves it as it was. */
        bool negative = r->known && r->stock < 0;
        if (negative && !r->pinned) {
            list_unlink((unsigned)e);
            r->pinned = true;
        } else if (!negative && r->pinned) {
            r->pinned = false;
            list_append((unsigned)e); /* as if just served: it was, a second ago */
        }
    }
    pthread_mutex_unlock(&w.mu);
}

/* Is the product's stock still to follow its Redis count (redis-stock, the writer
 * behind)? Under w.mu. */
static bool drifts(const reading *r) {
    return r->known && r->has_count && r->count != r->stock;
}

/* The counts' Redis connection of the watch (redis-stock), or NULL. */
static stockredis *redis_open(void) {
    if (!w.redis_on) return NULL;
    stockredis_config rc = {.addr = w.redis_addr,
                            .user = w.redis_user,
                            .password = w.redis_password,
                            .instance = w.instance};
    stockredis *r = NULL;
    char err[256];
    if (stockredis_new(&rc, &r, err, sizeof(err)) != STOCKREDIS_OK)
        stockd_log("warn", "stock watch: no Redis counts: %s", err);
    return r;
}

/* One pass's read of the backlog, stored. */
static void read_backlog(stockredis *redis) {
    stockd_stream_backlog b = {0};
    b.known = stockredis_backlog(redis, &b.undelivered, &b.pending) == STOCKREDIS_OK;
    pthread_mutex_lock(&w.mu);
    w.backlog = b;
    pthread_mutex_unlock(&w.mu);
}

static void *watch_main(void *arg) {
    (void)arg;
    stockdb *db = stockdb_new(&w.db, w.instance);
    stockredis *redis = redis_open();
    int32_t *ids = malloc(STOCKWATCH_MAX * sizeof(*ids));
    time_t last_log = 0;
    struct timespec until;

    pthread_mutex_lock(&w.mu);
    while (!w.stop) {
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += PASS_MS / 1000;
        while (!w.stop && pthread_cond_timedwait(&w.cv, &w.mu, &until) == 0) {
        }
        if (w.stop) break;
        /* What to read this pass: the products served since the last one, and those
         * that read negative (so that a restock by hand shows). Cleared before the
         * read: a commit after our read marks its product again. */
        unsigned k = 0;
        for (unsigned i = 0; ids && i < w.n; i++) {
            if (w.r[i].dirty || (w.r[i].known && w.r[i].stock < 0) || drifts(&w.r[i])) {
                ids[k++] = w.r[i].product_id;
                w.r[i].dirty = false;
            }
        }
        pthread_mutex_unlock(&w.mu);
        if (redis) read_backlog(redis);
        for (unsigned i = 0; db && i < k; i++) {
            int32_t stock = 0;
            long long count = 0;
            bool present = false;
            int count_rc = redis ? stockredis_count(redis, ids[i], &count, &present) : -1;
            if (count_rc == STOCKREDIS_OK && !present) count_rc = -1; /* not loaded yet */
            int rc = stockdb_get_stock(db, ids[i], &stock);
            if (rc == STOCKDB_OK || rc == STOCKDB_ERR_NOT_FOUND) {
                atomic_fetch_add_explicit(&w.reads, 1, memory_order_relaxed);
            } else {
                atomic_fetch_add_explicit(&w.errors, 1, memory_order_relaxed);
                time_t now = time(NULL);
                if (now - last_log >= 10) {
                    last_log = now;
                    stockd_log("warn", "stock watch: reading product %d: %s", ids[i],
                               stockdb_errstr(db));
                }
            }
            store(ids[i], rc, stock, count_rc, count);
            if (rc == STOCKDB_ERR_CONNECT) {
                /* MySQL is down: the rest of this pass would fail the same way. */
                for (unsigned j = i + 1; j < k; j++)
                    store(ids[j], rc, 0, -1, 0);
                break;
            }
        }
        pthread_mutex_lock(&w.mu);
    }
    pthread_mutex_unlock(&w.mu);
    free(ids);
    stockdb_free(db);
    stockredis_free(redis);
    return NULL;
}

int stockd_stockwatch_start(const stockdb_config *db, const char *instance,
                            const stockredis_config *redis) {
    pthread_condattr_t ca;

    pthread_mutex_lock(&w.mu);
    if (w.started) {
        pthread_mutex_unlock(&w.mu);
        return 0;
    }
    w.db = *db;
    snprintf(w.instance, sizeof(w.instance), "%s", instance ? instance : "");
    w.redis_on = redis != NULL;
    if (redis) {
        snprintf(w.redis_addr, sizeof(w.redis_addr), "%s", redis->addr ? redis->addr : "");
        snprintf(w.redis_user, sizeof(w.redis_user), "%s", redis->user ? redis->user : "");
        snprintf(w.redis_password, sizeof(w.redis_password), "%s",
                 redis->password ? redis->password : "");
    }
    w.stop = false;
    pthread_mutex_unlock(&w.mu);

    /* The pass timer runs on CLOCK_MONOTONIC, like every other wait of stockd. */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_destroy(&w.cv);
    pthread_cond_init(&w.cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&w.thread, NULL, watch_main, NULL) != 0) return -1;
    w.started = true;
    return 0;
}

void stockd_stockwatch_stop(void) {
    if (!w.started) return;
    pthread_mutex_lock(&w.mu);
    w.stop = true;
    pthread_cond_signal(&w.cv);
    pthread_mutex_unlock(&w.mu);
    pthread_join(w.thread, NULL);
    w.started = false;
}
