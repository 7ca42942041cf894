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
 * has its own lock, so each has its own leader and batches.
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
    stockd_job *head, *tail; /* waiting jobs, in arrival order */
    unsigned waiting;
    struct slot *next; /* hash chain */
} slot;

struct stockd_combiner {
    pthread_mutex_t mu;
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
        *p = s;
        rc = STOCKD_COMBINER_LEADER;
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

bool stockd_combiner_leave(stockd_combiner *c, int32_t product_id, unsigned segment) {
    bool closed = false;
    pthread_mutex_lock(&c->mu);
    slot **p = find(c, product_id, segment), *s = *p;
    if (!s || !s->head) {
        if (s) {
            *p = s->next;
            free(s);
        }
        closed = true;
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
