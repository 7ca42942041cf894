/* combiner.c: combining of deductions, so that one lock acquisition serves every
 * deduction of a slot (a product, or one segment of it) that queued up behind it.
 *
 * A worker that pops a deduction hands it to the combiner. The job joins its slot. A
 * slot is in one of two states:
 *
 *   LED      a worker (its leader, in worker.c's lead()) serves it: it queues for the
 *            slot's lock (the only worker of this process in that queue) and, once it
 *            holds the lock, takes up to batch_max waiting jobs as one batch, batch
 *            after batch, until none waits;
 *   WAITING  jobs wait with no leader, because opening the slot LED would have passed a
 *            bound (below); a leader will take it over or claim it.
 *
 * A job that opens a slot makes its worker the leader when no bound says otherwise; any
 * other job waits in its slot and its worker goes back to the queue at once. So a hot
 * product never ties up more than one worker, and other products and /health keep being
 * served. The two bounds:
 *   - max_leaders: LED slots of one split product (--segments K gives K slots, and K
 *     leaders would take K workers, with K >= --workers every worker: the head-of-line
 *     blocking the combiner exists to prevent);
 *   - cross: leaders in all, with batches across products (--cross-products). Each
 *     leader's batch claims up to K-1 WAITING slots of other products whose locks a try
 *     gets now (cross.c), and gives them back after it.
 *
 * The one rule that keeps a job from being left without a leader: a leader whose slot
 * runs empty closes it and, under the same mutex, takes over the oldest WAITING slot it
 * may lead (stockd_combiner_next AT_DONE) before it stops leading. A slot is opened
 * WAITING only while some leader exists that must pass through that step (of the
 * product, for segments; any, across products).
 *
 * A leader does not hold the others up while it waits for a lock held elsewhere. When
 * its wait could (another product waits with no leader, or the leaders are at the cross
 * bound), it tries the lock first (AT_LOCK says TRY). If that is busy (AT_BUSY), it
 * passes its slot on: the slot goes WAITING, not picked again for a while, and the worker
 * leads the oldest WAITING slot instead. With none to pass to, it waits for its lock but
 * is set aside: not counted toward the cross bound until its next take, so a new product
 * gets a leader of its own rather than waiting behind it. Below the bound with no one
 * waiting, a leader just waits: a hot product's contended lock costs no try.
 *
 *   (none) --enter, within the bounds--------------> LED
 *   (none) --enter, past a bound-------------------> WAITING
 *   WAITING --next AT_DONE takeover, claim---------> LED
 *   LED --next AT_BUSY, another waits--------------> WAITING (busy for a while)
 *   LED --unclaim, jobs left-----------------------> WAITING
 *   LED --next AT_DONE or unclaim, no job left-----> (closed)
 *
 * Slots live in a small hash table (chained, by product id) guarded by one mutex; the
 * critical sections are a few pointer moves, never I/O. */
#include <pthread.h>
#include <stdlib.h>

#include "stockd.h"

#define NBUCKETS 256 /* slots exist only for products being served: a handful */

typedef struct slot {
    int32_t product_id;
    unsigned segment;
    bool led;                /* false: WAITING */
    bool aside;              /* LED, its leader waiting for the lock uncounted */
    stockd_job *head, *tail; /* waiting jobs, in arrival order */
    unsigned waiting;
    uint64_t busy_until_ns; /* WAITING: its lock was found busy; not picked before this */
    struct slot *next;      /* hash chain */
} slot;

struct stockd_combiner {
    pthread_mutex_t mu;
    unsigned max_leaders; /* LED slots per split product; 0 = no bound */
    unsigned cross;       /* leaders before new products wait; 0 = never */
    unsigned leaders;     /* workers in lead() now, less those set aside; claimed slots
                           * are not counted */
    slot *buckets[NBUCKETS];
};

static slot **find(stockd_combiner *c, int32_t product_id, unsigned segment) {
    slot **p = &c->buckets[((uint32_t)product_id * 31u + segment) % NBUCKETS];
    while (*p && ((*p)->product_id != product_id || (*p)->segment != segment))
        p = &(*p)->next;
    return p;
}

/* Unlinks and frees the slot at *p. */
static void close_slot(slot **p) {
    slot *s = *p;
    *p = s->next;
    free(s);
}

stockd_combiner *stockd_combiner_new(unsigned max_leaders, unsigned cross) {
    stockd_combiner *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->max_leaders = max_leaders;
    c->cross = cross;
    return c;
}

void stockd_combiner_free(stockd_combiner *c) {
    if (!c) return;
    for (size_t i = 0; i < NBUCKETS; i++)
        while (c->buckets[i])
            close_slot(&c->buckets[i]);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* The product's LED slots. A scan of every bucket, under the mutex: a few hundred
 * pointer reads, made only for segments. */
static unsigned leaders_of(const stockd_combiner *c, int32_t product_id) {
    unsigned n = 0;
    for (size_t i = 0; i < NBUCKETS; i++)
        for (const slot *s = c->buckets[i]; s; s = s->next)
            n += s->product_id == product_id && s->led;
    return n;
}

/* May slot s be led now? newcomer: by a worker that leads nothing yet, so that the
 * cross bound applies too. */
static bool may_lead(const stockd_combiner *c, const slot *s, bool newcomer) {
    if (s->segment && c->max_leaders && leaders_of(c, s->product_id) >= c->max_leaders)
        return false;
    return !newcomer || !c->cross || c->leaders < c->cross;
}

/* The WAITING slot with jobs whose first job is oldest and that a leader may take:
 * with pick set (a claim or a pass), only an unsplit product's, not among skip[0..nskip-1]
 * and not found busy until after now; without (a takeover), any it may lead. NULL if
 * none. */
static slot *oldest_waiting(const stockd_combiner *c, bool pick, const int32_t *skip,
                            unsigned nskip, uint64_t now) {
    slot *best = NULL;
    for (size_t i = 0; i < NBUCKETS; i++)
        for (slot *s = c->buckets[i]; s; s = s->next) {
            if (s->led || !s->head) continue;
            if (best && s->head->arrived_ns >= best->head->arrived_ns) continue;
            if (pick && (s->segment || s->busy_until_ns > now)) continue;
            bool skipped = false;
            for (unsigned k = 0; k < nskip && !skipped; k++)
                skipped = skip[k] == s->product_id;
            if (!skipped && may_lead(c, s, false)) best = s;
        }
    return best;
}

int stockd_combiner_enter(stockd_combiner *c, stockd_job *job) {
    int rc = STOCKD_COMBINER_FOLLOWER;
    pthread_mutex_lock(&c->mu);
    slot **p = find(c, job->product_id, job->segment), *s = *p;
    if (!s) {
        if (!(s = calloc(1, sizeof(*s)))) {
            rc = STOCKD_COMBINER_NOMEM;
            goto out;
        }
        s->product_id = job->product_id;
        s->segment = job->segment;
        s->led = may_lead(c, s, true);
        *p = s;
        if (s->led) {
            c->leaders++;
            rc = STOCKD_COMBINER_LEADER;
        }
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
    if (s && s->aside) { /* its leader's wait is over: it counts again */
        s->aside = false;
        c->leaders++;
    }
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

unsigned stockd_combiner_waiting(stockd_combiner *c, int32_t product_id, unsigned segment) {
    pthread_mutex_lock(&c->mu);
    slot *s = *find(c, product_id, segment);
    unsigned n = s ? s->waiting : 0;
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* Slot *p (LED, ours) goes WAITING, not picked before until_ns, or closes if empty. */
static void let_wait(slot **p, uint64_t until_ns) {
    if (!(*p)->head) {
        close_slot(p);
        return;
    }
    (*p)->led = false;
    (*p)->aside = false;
    (*p)->busy_until_ns = until_ns;
}

int stockd_combiner_next(stockd_combiner *c, int32_t *product_id, unsigned *segment, int at,
                         uint64_t busy_ns) {
    /* Without the cross bound a wait holds no other product up: wait, no lock taken
     * (cross is fixed at new, and no slot is set aside without it). */
    if (at == STOCKD_COMBINER_AT_LOCK && !c->cross) return STOCKD_COMBINER_STAY;
    int rc = STOCKD_COMBINER_STAY;
    uint64_t now = stockd_now_ns();
    pthread_mutex_lock(&c->mu);
    slot **p = find(c, *product_id, *segment), *s = *p;
    if (s && s->aside) {
        s->aside = false;
        c->leaders++;
    }
    /* A pass or a try is for batches across products only (the cross bound). */
    slot *other = c->cross && at != STOCKD_COMBINER_AT_DONE
                      ? oldest_waiting(c, true, product_id, 1, now)
                      : NULL;
    switch (at) {
    case STOCKD_COMBINER_AT_LOCK:
        if (c->cross && (other || c->leaders >= c->cross)) rc = STOCKD_COMBINER_TRY;
        break;
    case STOCKD_COMBINER_AT_BUSY:
        if (other) {
            if (s) let_wait(p, now + busy_ns);
            other->led = true;
            *product_id = other->product_id;
            *segment = other->segment;
            rc = STOCKD_COMBINER_MOVED;
        } else if (s) {
            s->aside = true; /* waits for its lock: a new product may lead meanwhile */
            c->leaders--;
        }
        break;
    default: /* AT_DONE */
        if (s && s->head) break;
        if (s) close_slot(p);
        /* Only a segment's leader, or any leader across products, has waiting slots it
         * may take over: an unsplit product's leader without the cross bound skips the
         * scan of every bucket, at the end of each of its batches. */
        if ((c->cross || *segment) && (other = oldest_waiting(c, false, NULL, 0, 0)) != NULL) {
            other->led = true;
            *product_id = other->product_id;
            *segment = other->segment;
            rc = STOCKD_COMBINER_MOVED;
        } else {
            c->leaders--;
            rc = STOCKD_COMBINER_DONE;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

unsigned stockd_combiner_claim(stockd_combiner *c, int32_t *out, unsigned max) {
    unsigned n = 0;
    pthread_mutex_lock(&c->mu);
    slot *s;
    uint64_t now = stockd_now_ns();
    while (c->cross && n < max && (s = oldest_waiting(c, true, out, n, now)) != NULL) {
        s->led = true;
        out[n++] = s->product_id;
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

void stockd_combiner_unclaim(stockd_combiner *c, int32_t product_id, uint64_t busy_ns) {
    uint64_t until = busy_ns ? stockd_now_ns() + busy_ns : 0;
    pthread_mutex_lock(&c->mu);
    slot **p = find(c, product_id, 0);
    if (*p) let_wait(p, until);
    pthread_mutex_unlock(&c->mu);
}
