/* lathist: a latency histogram with logarithmic buckets, in the spirit of HdrHistogram.
 *
 * stockload records one latency per answer and reports percentiles at the end; keeping
 * every sample would cost memory proportional to the run, so samples go into fixed
 * buckets instead. Values below 128 us have a bucket each (exact); above that every
 * power of two is split into 64 equal buckets, so a bucket is at most 1/64 (1.6 %) of
 * its lower bound wide and a reported percentile is within 0.8 % of the true sample.
 * Values above LATHIST_MAX_US (60 s) share the top bucket; min, max and the mean are
 * kept exactly.
 *
 * A lathist is a plain value (no allocation): lathist_init() it, then record. It is not
 * thread-safe; give each thread its own and add them with lathist_add(). */
#ifndef LATHIST_H
#define LATHIST_H

#include <stdint.h>

#define LATHIST_SUB_BITS 6           /* 64 buckets per power of two */
#define LATHIST_MAX_US   60000000ULL /* 60 s; larger values clamp */
#define LATHIST_TOP_BIT  25          /* floor(log2(LATHIST_MAX_US)) */
#define LATHIST_BUCKETS                                                                            \
    ((1u << (LATHIST_SUB_BITS + 1)) +                                                              \
     (LATHIST_TOP_BIT - LATHIST_SUB_BITS) * (1u << LATHIST_SUB_BITS))

typedef struct lathist {
    uint64_t counts[LATHIST_BUCKETS];
    uint64_t total;  /* read-only: number of recorded values */
    uint64_t min_us; /* read-only: exact smallest value (0 when empty) */
    uint64_t max_us; /* read-only: exact largest value, even above LATHIST_MAX_US */
    double sum_us;   /* read-only: exact sum, for the mean */
} lathist;

void lathist_init(lathist *h);

/* Records one value in microseconds. */
void lathist_record(lathist *h, uint64_t us);

/* Adds every value recorded in src to dst. */
void lathist_add(lathist *dst, const lathist *src);

/* The value at percentile p (0..100) by the nearest-rank rule: the smallest recorded
 * value v such that at least p % of the values are <= v, to within its bucket (the
 * bucket's midpoint, clamped to [min, max]). p >= 100 gives the exact max, p <= 0 the
 * exact min; an empty histogram gives 0. */
double lathist_percentile(const lathist *h, double p);

/* The mean in microseconds (0 when empty). */
double lathist_mean(const lathist *h);

/* Bucket arithmetic, exposed for the tests: the bucket of a value and the range of
 * values [*lo, *hi] that bucket holds. */
unsigned lathist_bucket(uint64_t us);
void lathist_bucket_range(unsigned bucket, uint64_t *lo, uint64_t *hi);

#endif
