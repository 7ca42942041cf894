/* combiner.c: per-product combining of deductions, so that one lock acquisition serves
 * every deduction of a product that queued up behind it.
 *
 * A worker that pops a deduction hands it to the combiner. If no worker of this
 * process is busy with that product, the job opens the product's slot and the worker
 * becomes its leader: it queues for the product's lock (the only one of this process in
 * that queue) and, once it holds the lock, takes up to batch_max waiting jobs as one
 * batch. If a leader exists already, the job waits in the slot and the worker goes back
 * to the queue at once: a hot product never ties up more than one worker, so other
 * products and /health keep being served. The leader keeps serving the product until
 * its slot is empty and then closes it, under the same mutex that followers append
 * under, so a job is never left in a slot without a leader.
 *
 * With segmented stock (--segments K) a slot is one segment of a product: each segment
 * has its own lock, so each has its own leader and batches. But a leader is a worker
 * tied up for as long as its slot has jobs, so K leaders of one hot product would take
 * K workers, and with K >= --workers every worker, which is the head-of-line blocking
 * the combiner exists to prevent (issue 16 #8). So one product has at most max_leaders
 * of them (max(1, workers / 2), stockd_combiner_set_max_leaders). A job for a segment
 * without a leader when the product has that many waits in a parked slot, and its
 * worker goes back to the queue as a follower's does; a leader whose slot runs empty
 * takes over the product's parked slot whose first job is oldest, under the same mutex,
 * so a parked slot is never left once the product's last leader is gone.
 *
 * Batches across products (--cross-products K, issue 19 #2): with it, a new unsplit
 * product gets a leader of its own only while fewer than `cross` leaders exist;
 * otherwise its slot is UNLED and its worker goes back to the queue. Each leader claims
 * up to K-1 unled slots for its batch (those whose locks it can take now) and gives them
 * back after it; a leader whose slot runs empty takes over the oldest unled slot before
 * it leaves. An unled slot is made only while a leader exists, and the last leader
 * cannot leave while one has jobs (both under the mutex), so no job is left without a
 * leader here either.
 *
 * A leader does not hold the others up while it waits for a lock held elsewhere
 * (stockd_combiner_before_wait). When an unled slot not found busy lately waits, or
 * the leaders are at the bound, it tries its product's lock first (a free one is then
 * simply taken). If that is busy, it passes its product to the oldest such slot: its
 * own slot goes unled, not claimed for a while, and it leads the other one instead.
 * With none to pass to, it waits for its lock as ever, holding nothing, but is not
 * counted among the `cross` leaders meanwhile, so a new product gets a leader of its
 * own (which claims the unled slots) rather than waiting behind it;
 * stockd_combiner_waited counts it again. It is still a leader: it serves its slot and
 * takes over unled ones after. So each product still has at most one leader, and an
 * unled slot with jobs still has some worker in lead() that will come to it. Below the
 * bound with none to pass to, a leader just waits, counted: no new product waits for
 * it, and a hot product's contended lock costs no try.
 *
 * Slots live in a small hash table (chained, by product id) guarded by one mutex; the
 * critical sections are a few pointer moves, never I/O.
 *
 * The combiner also keeps a sold-out hint per product: what the last read of its
 * stock (a batch's, or a pre-check's) said. The pre-check read is only worth its round
 * trip when the product is likely sold out, so it is made only when the hint says so;
 * a product believed in stock goes straight to its lock, where the batch's own read
 * decides. A wrong or lost hint costs one read or one lock round, never correctness. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "stockd.h"

#define NBUCKETS 256  /* slots exist only for products being served: a handful */
#define NHINTS   4096 /* sold-out hints, by product id modulo; a collision forgets one */

typedef struct slot {
    int32_t product_id;
    unsigned segment;
    bool led;                /* false: parked, waiting for a leader of the product */
    stockd_job *head, *tail; /* waiting jobs, in arrival order */
    unsigned waiting;
    uint64_t busy_until_ns; /* unled: its lock was found busy; not claimed before this */
    struct slot *next;      /* hash chain */
} slot;

struct stockd_combiner {
    pthread_mutex_t mu;
    unsigned max_leaders; /* per product, for segments; 0 = no bound */
    unsigned cross;       /* leaders before new products wait unled; 0 = never */
    unsigned leaders;     /* workers in lead() now, but for those waiting for their lock
                           * (stockd_combiner_before_wait); claimed slots not counted */
    slot *buckets[NBUCKETS];
    /* (product id << 1) | sold out; 0 = no hint. Lock-free: one word per entry. */
    _Atomic uint64_t hints[NHINTS];
};

static slot **find(stockd_combiner *c, int32_t product_id, unsigned segment) {
    slot **p = &c->buckets[((uint32_t)product_id * 31u + segment) % NBUCKETS];
    while (*p && ((*p)->product_id != product_id || (*p)->segment != segment))
        p = &(*p)->next;
    return p;
}

stockd_combiner *stockd_combiner_new(void) {
    stockd_combiner *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void stockd_combiner_free(stockd_combiner *c) {
    if (!c) return;
    for (size_t i = 0; i < NBUCKETS; i++) {
        slot *s = c->buckets[i];
        while (s) {
            slot *next = s->next;
            free(s);
            s = next;
        }
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void stockd_combiner_set_max_leaders(stockd_combiner *c, unsigned n) {
    pthread_mutex_lock(&c->mu);
    c->max_leaders = n;
    pthread_mutex_unlock(&c->mu);
}

void stockd_combiner_set_cross(stockd_combiner *c, unsigned n) {
    pthread_mutex_lock(&c->mu);
    c->cross = n;
    pthread_mutex_unlock(&c->mu);
}

/* The unled slot (an unsplit product's) whose first job is oldest, not among
 * skip[0..nskip-1] (slots claimed already) and, when now_ns is not 0, not found busy
 * until after now_ns; or NULL. */
static slot *oldest_unled(const stockd_combiner *c, const int32_t *skip, unsigned nskip,
                          uint64_t now_ns) {
    slot *best = NULL;
    for (size_t i = 0; i < NBUCKETS; i++)
        for (slot *s = c->buckets[i]; s; s = s->next) {
            if (s->segment || s->led || !s->head) continue;
            if (now_ns && s->busy_until_ns > now_ns) continue;
            bool skipped = false;
            for (unsigned k = 0; k < nskip && !skipped; k++)
                skipped = skip[k] == s->product_id;
            if (!skipped && (!best || s->head->arrived_ns < best->head->arrived_ns)) best = s;
        }
    return best;
}

unsigned stockd_combiner_claim(stockd_combiner *c, int32_t *out, unsigned max) {
    unsigned n = 0;
    pthread_mutex_lock(&c->mu);
    slot *s;
    uint64_t now = stockd_now_ns();
    while (n < max && (s = oldest_unled(c, out, n, now)) != NULL) {
        s->led = true;
        out[n++] = s->product_id;
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

void stockd_combiner_unclaim(stockd_combiner *c, int32_t product_id, uint64_t busy_ns) {
    uint64_t until = busy_ns ? stockd_now_ns() + busy_ns : 0;
    pthread_mutex_lock(&c->mu);
    slot **p = find(c, product_id, 0), *s = *p;
    if (s && !s->head) {
        *p = s->next;
        free(s);
    } else if (s) {
        s->led = false;
        s->busy_until_ns = until;
    }
    pthread_mutex_unlock(&c->mu);
}

int stockd_combiner_before_wait(stockd_combiner *c, int32_t *product_id, bool busy,
                                uint64_t busy_ns) {
    int rc = STOCKD_COMBINER_ASIDE;
    uint64_t now = stockd_now_ns();
    pthread_mutex_lock(&c->mu);
    /* Our own slot is led, so never its own successor. */
    slot *next = oldest_unled(c, NULL, 0, now);
    if (!busy) {
        /* Below the bound, a wait holds no new product up: no try needed. */
        rc = next || c->leaders >= c->cross ? STOCKD_COMBINER_TRY : STOCKD_COMBINER_WAIT;
    } else if (next) {
        slot **p = find(c, *product_id, 0), *s = *p;
        if (s && !s->head) {
            *p = s->next;
            free(s);
        } else if (s) {
            s->led = false;
            s->busy_until_ns = now + busy_ns;
        }
        next->led = true;
        *product_id = next->product_id;
        rc = STOCKD_COMBINER_PASSED;
    } else {
        c->leaders--; /* waits: a new product may have a leader meanwhile */
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void stockd_combiner_waited(stockd_combiner *c) {
    pthread_mutex_lock(&c->mu);
    c->leaders++;
    pthread_mutex_unlock(&c->mu);
}

/* The product's slots that have a leader. A scan of every bucket, made only when a
 * segment's slot opens or closes, under the mutex: a few hundred pointer reads. */
static unsigned leaders_of(const stockd_combiner *c, int32_t product_id) {
    unsigned n = 0;
    for (size_t i = 0; i < NBUCKETS; i++)
        for (const slot *s = c->buckets[i]; s; s = s->next)
            n += s->product_id == product_id && s->led;
    return n;
}

/* The product's parked slot whose first job arrived first, or NULL. */
static slot *oldest_parked(const stockd_combiner *c, int32_t product_id) {
    slot *best = NULL;
    for (size_t i = 0; i < NBUCKETS; i++)
        for (slot *s = c->buckets[i]; s; s = s->next)
            if (s->product_id == product_id && !s->led && s->head &&
                (!best || s->head->arrived_ns < best->head->arrived_ns))
                best = s;
    return best;
}

int stockd_combiner_enter(stockd_combiner *c, stockd_job *job) {
    int rc;
    pthread_mutex_lock(&c->mu);
    slot **p = find(c, job->product_id, job->segment), *s = *p;
    if (s) {
        rc = STOCKD_COMBINER_FOLLOWER;
    } else if (!(s = calloc(1, sizeof(*s)))) {
        rc = STOCKD_COMBINER_NOMEM;
        goto out;
    } else {
        s->product_id = job->product_id;
        s->segment = job->segment;
        s->led = job->segment ? !c->max_leaders || leaders_of(c, job->product_id) < c->max_leaders
                              : !c->cross || c->leaders < c->cross;
        *p = s;
        if (s->led) c->leaders++;
        rc = s->led ? STOCKD_COMBINER_LEADER : STOCKD_COMBINER_FOLLOWER;
    }
    job->next = NULL;
    if (s->tail)
        s->tail->next = job;
    else
        s->head = job;
    s->tail = job;
    s->waiting++;
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

unsigned stockd_combiner_take(stockd_combiner *c, int32_t product_id, unsigned segment,
                              stockd_job **out, unsigned max, uint64_t arrived_before_ns) {
    unsigned n = 0;
    pthread_mutex_lock(&c->mu);
    slot *s = *find(c, product_id, segment);
    while (s && s->head && n < max && s->head->arrived_ns < arrived_before_ns) {
        stockd_job *j = s->head;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        j->next = NULL;
        s->waiting--;
        out[n++] = j;
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

bool stockd_combiner_leave(stockd_combiner *c, int32_t *product_id, unsigned *segment) {
    bool closed = false;
    pthread_mutex_lock(&c->mu);
    slot **p = find(c, *product_id, *segment), *s = *p;
    if (!s || !s->head) {
        if (s) {
            *p = s->next;
            free(s);
        }
        slot *next = *segment ? oldest_parked(c, *product_id) : NULL;
        if (!next && c->cross) next = oldest_unled(c, NULL, 0, 0); /* busy or not */
        if (next) {
            next->led = true;
            *product_id = next->product_id;
            *segment = next->segment;
        } else {
            closed = true;
            c->leaders--;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return closed;
}

unsigned stockd_combiner_waiting(stockd_combiner *c, int32_t product_id, unsigned segment) {
    pthread_mutex_lock(&c->mu);
    slot *s = *find(c, product_id, segment);
    unsigned n = s ? s->waiting : 0;
    pthread_mutex_unlock(&c->mu);
    return n;
}

bool stockd_combiner_sold_out_hint(stockd_combiner *c, int32_t product_id) {
    uint64_t v =
        atomic_load_explicit(&c->hints[(uint32_t)product_id % NHINTS], memory_order_relaxed);
    return v == (((uint64_t)(uint32_t)product_id << 1) | 1u);
}

void stockd_combiner_note_stock(stockd_combiner *c, int32_t product_id, int32_t stock) {
    uint64_t v = ((uint64_t)(uint32_t)product_id << 1) | (stock <= 0 ? 1u : 0u);
    atomic_store_explicit(&c->hints[(uint32_t)product_id % NHINTS], v, memory_order_relaxed);
    /* Every read or committed deduction passes here: the gauge of /metrics reads the
     * product's stock again (the value given may be stale, stockwatch.c). */
    stockd_stockwatch_touch(product_id);
}
