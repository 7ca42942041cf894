/* lathist: logarithmic latency buckets (see lathist.h for the layout and its precision). */
#include "lathist.h"

#include <math.h>
#include <string.h>

#define SUB_COUNT   (1u << LATHIST_SUB_BITS)
#define EXACT_COUNT (1u << (LATHIST_SUB_BITS + 1))

void lathist_init(lathist *h) {
    memset(h, 0, sizeof(*h));
}

unsigned lathist_bucket(uint64_t us) {
    if (us > LATHIST_MAX_US) us = LATHIST_MAX_US;
    if (us < EXACT_COUNT) return (unsigned)us;
    /* m is the position of the top bit; the LATHIST_SUB_BITS bits below it pick the
     * sub-bucket, so each bucket of power m is 2^(m - SUB_BITS) wide. */
    unsigned m = 63u - (unsigned)__builtin_clzll(us);
    unsigned shift = m - LATHIST_SUB_BITS;
    unsigned sub = (unsigned)(us >> shift) - SUB_COUNT;
    return EXACT_COUNT + (m - LATHIST_SUB_BITS - 1) * SUB_COUNT + sub;
}

void lathist_bucket_range(unsigned bucket, uint64_t *lo, uint64_t *hi) {
    if (bucket < EXACT_COUNT) {
        *lo = *hi = bucket;
        return;
    }
    unsigned rel = bucket - EXACT_COUNT;
    unsigned shift = rel / SUB_COUNT + 1;
    uint64_t sub = rel % SUB_COUNT;
    *lo = (SUB_COUNT + sub) << shift;
    *hi = *lo + (1ULL << shift) - 1;
}

void lathist_record(lathist *h, uint64_t us) {
    h->counts[lathist_bucket(us)]++;
    if (h->total == 0 || us < h->min_us) h->min_us = us;
    if (us > h->max_us) h->max_us = us;
    h->total++;
    h->sum_us += (double)us;
}

void lathist_add(lathist *dst, const lathist *src) {
    if (src->total == 0) return;
    for (unsigned i = 0; i < LATHIST_BUCKETS; i++)
        dst->counts[i] += src->counts[i];
    if (dst->total == 0 || src->min_us < dst->min_us) dst->min_us = src->min_us;
    if (src->max_us > dst->max_us) dst->max_us = src->max_us;
    dst->total += src->total;
    dst->sum_us += src->sum_us;
}

double lathist_percentile(const lathist *h, double p) {
    if (h->total == 0) return 0;
    if (p <= 0) return (double)h->min_us;
    if (p >= 100) return (double)h->max_us;
    /* Nearest rank: the rank-th smallest value, rank = ceil(p% of n), at least 1. */
    double r = ceil(p * (double)h->total / 100.0);
    uint64_t rank = r < 1 ? 1 : (uint64_t)r;
    uint64_t seen = 0;
    for (unsigned i = 0; i < LATHIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen < rank) continue;
        uint64_t lo, hi;
        lathist_bucket_range(i, &lo, &hi);
        double v = (double)lo + (double)(hi - lo) / 2.0;
        if (v < (double)h->min_us) v = (double)h->min_us;
        if (v > (double)h->max_us) v = (double)h->max_us;
        return v;
    }
    return (double)h->max_us; /* not reached: the counts add up to total */
}

double lathist_mean(const lathist *h) {
    return h->total ? h->sum_us / (double)h->total : 0;
}
