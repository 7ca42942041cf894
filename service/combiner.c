/* combiner.c: combining of deductions, so that one lock acquisition serves every
 * deduction of a slot (a product, or one segment of it) that queued up behind it: a
 * worker that pops a deduction hands it here, and at most one worker of this process
 * (the slot's leader) queues for or holds the slot's lock. A hot product so never ties
 * up more than one worker, and other products and /health keep being served. The slot's
 * states (LED, ASIDE, WAITING, WAITING busy), their diagram and the bounds on leaders
 * are told once, in docs/architecture.md ("The combiner"); stockd.h gives each step's
 * outcomes.
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
    bool led;                /* false: WAITING (busy while busy_until_ns is ahead) */
    bool aside;              /* LED, its leader waiting for the lock uncounted: ASIDE */
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

/* Slot s (WAITING) is led from now on. */
static void lead_slot(stockd_combiner *c, slot *s) {
    s->led = true;
    s->busy_until_ns = 0;
    c->leaders++;
}

/* Appends the job to slot s, or puts it first. */
static void add_job(slot *s, stockd_job *job, bool first) {
    if (first) {
        job->next = s->head;
        s->head = job;
        if (!s->tail) s->tail = job;
    } else {
        job->next = NULL;
        if (s->tail)
            s->tail->next = job;
        else
            s->head = job;
        s->tail = job;
    }
    s->waiting++;
}

stockd_entered stockd_combiner_enter(stockd_combiner *c, stockd_job *job) {
    stockd_entered rc = STOCKD_ENTERED_FOLLOWER;
    bool handed = job->handed;
    job->handed = false;
    pthread_mutex_lock(&c->mu);
    slot **p = find(c, job->product_id, job->segment), *s = *p;
    if (!s) {
        if (!(s = calloc(1, sizeof(*s)))) {
            pthread_mutex_unlock(&c->mu);
            return STOCKD_ENTERED_NOMEM;
        }
        s->product_id = job->product_id;
        s->segment = job->segment;
        *p = s;
    }
    /* A handed job's slot is LED already, for this worker (stockd_combiner_busy). A
     * WAITING slot nobody leads is led like a new one when the bounds allow it: its
     * jobs need not wait for a claim or a takeover. */
    if (handed && s->led) {
        rc = STOCKD_ENTERED_LEADER;
    } else if (!s->led && may_lead(c, s, true)) {
        lead_slot(c, s);
        rc = STOCKD_ENTERED_LEADER;
    }
    add_job(s, job, handed);
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

void stockd_combiner_putback(stockd_combiner *c, int32_t product_id, unsigned segment,
                             stockd_job **jobs, unsigned n) {
    pthread_mutex_lock(&c->mu);
    slot *s = *find(c, product_id, segment); /* open: its leader is the caller */
    for (unsigned i = n; s && i-- > 0;)
        add_job(s, jobs[i], true);
    pthread_mutex_unlock(&c->mu);
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

/* The leader of slot s (if open) counts again: its wait set aside is over. */
static void count_again(stockd_combiner *c, slot *s) {
    if (s && s->aside) {
        s->aside = false;
        c->leaders++;
    }
}

stockd_lock_plan stockd_combiner_before_lock(stockd_combiner *c, int32_t product_id,
                                             unsigned segment) {
    /* Without the cross bound a wait holds no other product up (cross is fixed at new,
     * and no slot is set aside without it). */
    if (!c->cross) return STOCKD_PLAN_WAIT;
    pthread_mutex_lock(&c->mu);
    count_again(c, *find(c, product_id, segment));
    bool others = oldest_waiting(c, true, &product_id, 1, stockd_now_ns()) != NULL;
    stockd_lock_plan plan = others || c->leaders >= c->cross ? STOCKD_PLAN_TRY : STOCKD_PLAN_WAIT;
    pthread_mutex_unlock(&c->mu);
    return plan;
}

/* The oldest WAITING slot nobody leads, busy or not, if one more leader is allowed: LED
 * from now on, its first job out of it, marked handed, for the worker that pops it. */
static stockd_job *hand_over(stockd_combiner *c) {
    slot *s = oldest_waiting(c, false, NULL, 0, 0);
    if (!s || !may_lead(c, s, true)) return NULL;
    lead_slot(c, s);
    stockd_job *j = s->head;
    s->head = j->next;
    if (!s->head) s->tail = NULL;
    s->waiting--;
    j->next = NULL;
    j->handed = true;
    return j;
}

stockd_busy_step stockd_combiner_busy(stockd_combiner *c, int32_t *product_id, unsigned *segment,
                                      uint64_t busy_ns, stockd_job **handed) {
    stockd_busy_step step = STOCKD_BUSY_ASIDE;
    uint64_t now = stockd_now_ns();
    *handed = NULL;
    pthread_mutex_lock(&c->mu);
    slot **p = find(c, *product_id, *segment), *s = *p;
    count_again(c, s);
    slot *other = c->cross ? oldest_waiting(c, true, product_id, 1, now) : NULL;
    if (other) {
        if (s) let_wait(p, now + busy_ns);
        other->led = true;
        *product_id = other->product_id;
        *segment = other->segment;
        step = STOCKD_BUSY_PASSED;
    } else {
        if (s) {
            s->aside = true; /* waits for its lock: a new product may lead meanwhile */
            c->leaders--;
        }
        *handed = c->cross ? hand_over(c) : NULL;
    }
    pthread_mutex_unlock(&c->mu);
    return step;
}

stockd_after_step stockd_combiner_done(stockd_combiner *c, int32_t *product_id, unsigned *segment) {
    stockd_after_step step = STOCKD_AFTER_CLOSED;
    pthread_mutex_lock(&c->mu);
    slot **p = find(c, *product_id, *segment), *s = *p, *other = NULL;
    count_again(c, s);
    if (s && s->head) {
        step = STOCKD_AFTER_AGAIN;
    } else {
        if (s) close_slot(p);
        /* Only a segment's leader, or any leader across products, has WAITING slots it
         * may take over: an unsplit product's leader without the cross bound skips the
         * scan of every bucket, at the end of each of its batches. */
        if ((c->cross || *segment) && (other = oldest_waiting(c, false, NULL, 0, 0)) != NULL) {
            other->led = true;
            *product_id = other->product_id;
            *segment = other->segment;
            step = STOCKD_AFTER_MOVED;
        } else {
            c->leaders--;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return step;
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
