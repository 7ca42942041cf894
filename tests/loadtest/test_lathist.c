/* Tests of loadtest/lathist: the bucket layout covers every value without gaps, and
 * the percentiles of generated latency distributions agree with a sorted reference to
 * within the precision lathist.h promises (under 1/128 of the value). */
#include "check.h"
#include "lathist.h"

#include <math.h>

static uint64_t rng_state = 0x5eed5eed12345678ULL;

/* splitmix64: deterministic, so a failure reproduces. */
static uint64_t rng(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double uniform01(void) {
    return (double)(rng() >> 11) * 0x1.0p-53;
}

static uint64_t uniform(uint64_t lo, uint64_t hi) {
    return lo + rng() % (hi - lo + 1);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The nearest-rank percentile of sorted values, written independently of lathist. */
static uint64_t reference(const uint64_t *sorted, size_t n, double p) {
    if (p <= 0) return sorted[0];
    if (p >= 100) return sorted[n - 1];
    size_t rank = (size_t)ceil(p * (double)n / 100.0);
    if (rank < 1) rank = 1;
    return sorted[rank - 1];
}

static const double percentiles[] = {0, 0.1, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9, 99.99, 100};

/* Records v into a histogram and checks count, min, max, mean and every percentile
 * against the sorted values. Sorts v. */
static void check_against_reference(const char *name, uint64_t *v, size_t n) {
    lathist h;
    lathist_init(&h);
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        lathist_record(&h, v[i]);
        sum += (double)v[i];
    }
    qsort(v, n, sizeof(*v), cmp_u64);

    CHECK_INT_EQ(n, h.total);
    CHECK_INT_EQ(v[0], h.min_us);
    CHECK_INT_EQ(v[n - 1], h.max_us);
    if (fabs(lathist_mean(&h) - sum / (double)n) > 1e-6 * (sum / (double)n))
        CHECK_FAIL_("%s: mean %f, expected %f", name, lathist_mean(&h), sum / (double)n);

    for (size_t i = 0; i < sizeof(percentiles) / sizeof(percentiles[0]); i++) {
        double p = percentiles[i], got = lathist_percentile(&h, p);
        uint64_t want = reference(v, n, p);
        /* The sample lies in the reported value's bucket, whose half-width is below
         * 1/128 of its lower bound (0 for the exact buckets under 128 us). */
        if (fabs(got - (double)want) > (double)want / 128.0)
            CHECK_FAIL_("%s: p%g = %.1f us, sorted reference says %" PRIu64 " us", name, p, got,
                        want);
    }
    printf("ok: %s (%zu values): p50 %.0f p99 %.0f max %" PRIu64 " us\n", name, n,
           lathist_percentile(&h, 50), lathist_percentile(&h, 99), h.max_us);
}

static void test_buckets_tile_the_range_without_gaps(void) {
    uint64_t prev_hi = 0;
    unsigned last = lathist_bucket(LATHIST_MAX_US);
    CHECK_INT_LT(last, LATHIST_BUCKETS);
    for (unsigned i = 0; i <= last; i++) {
        uint64_t lo, hi;
        lathist_bucket_range(i, &lo, &hi);
        if (i > 0) CHECK_INT_EQ(prev_hi + 1, lo);
        CHECK_INT_LE(lo, hi);
        CHECK_INT_EQ(i, lathist_bucket(lo));
        CHECK_INT_EQ(i, lathist_bucket(hi));
        /* Width at most 1/64 of the lower bound above the exact range. */
        if (lo >= 128)
            CHECK_INT_LE((hi - lo + 1) * 64, lo);
        else
            CHECK_INT_EQ(lo, hi);
        prev_hi = hi;
    }
    CHECK_INT_GE(prev_hi, LATHIST_MAX_US);
    CHECK_INT_EQ(0, lathist_bucket(0));
    CHECK_INT_EQ(last, lathist_bucket(LATHIST_MAX_US + 1));
    CHECK_INT_EQ(last, lathist_bucket(UINT64_MAX));
    puts("ok: buckets tile 0 us .. 60 s without gaps, each <= 1/64 wide");
}

static void test_log_uniform_from_1us_to_60s(void) {
    size_t n = 200000;
    uint64_t *v = malloc(n * sizeof(*v));
    CHECK(v);
    for (size_t i = 0; i < n; i++)
        v[i] = (uint64_t)exp(uniform01() * log((double)LATHIST_MAX_US));
    check_against_reference("log-uniform 1 us .. 60 s", v, n);
    free(v);
}

static void test_narrow_around_2ms(void) {
    size_t n = 100000;
    uint64_t *v = malloc(n * sizeof(*v));
    CHECK(v);
    for (size_t i = 0; i < n; i++)
        v[i] = uniform(1700, 2300);
    check_against_reference("uniform 1.7 .. 2.3 ms", v, n);
    free(v);
}

/* Most requests fast, a tail of lock waits: p90 and p99 fall on different modes. */
static void test_bimodal_with_a_slow_tail(void) {
    size_t n = 100001;
    uint64_t *v = malloc(n * sizeof(*v));
    CHECK(v);
    for (size_t i = 0; i < n; i++)
        v[i] = uniform01() < 0.95 ? uniform(500, 1100) : uniform(200000, 2000000);
    check_against_reference("95% ~1 ms, 5% 0.2 .. 2 s", v, n);
    free(v);
}

static void test_small_values_are_exact(void) {
    size_t n = 5000;
    uint64_t v[5000];
    for (size_t i = 0; i < n; i++)
        v[i] = uniform(0, 127);
    check_against_reference("0 .. 127 us (exact buckets)", v, n);
}

static void test_few_values_follow_nearest_rank(void) {
    uint64_t one[] = {4242};
    check_against_reference("one value", one, 1);
    uint64_t two[] = {20, 10};
    check_against_reference("two values", two, 2);

    lathist h;
    lathist_init(&h);
    lathist_record(&h, 10);
    lathist_record(&h, 20);
    lathist_record(&h, 30);
    /* Nearest rank: p50 of three is the 2nd value, p34 the 2nd, p33 the 1st. */
    CHECK_INT_EQ(20, lathist_percentile(&h, 50));
    CHECK_INT_EQ(20, lathist_percentile(&h, 34));
    CHECK_INT_EQ(10, lathist_percentile(&h, 33));
    CHECK_INT_EQ(30, lathist_percentile(&h, 67));
    puts("ok: few values follow the nearest-rank rule");
}

static void test_empty_histogram_reports_zero(void) {
    lathist h;
    lathist_init(&h);
    CHECK_INT_EQ(0, h.total);
    CHECK(lathist_percentile(&h, 0) == 0);
    CHECK(lathist_percentile(&h, 50) == 0);
    CHECK(lathist_percentile(&h, 100) == 0);
    CHECK(lathist_mean(&h) == 0);
    puts("ok: an empty histogram reports 0");
}

static void test_values_above_60s_keep_an_exact_max(void) {
    lathist h;
    lathist_init(&h);
    lathist_record(&h, 1000);
    lathist_record(&h, 120000000); /* two minutes */
    CHECK_INT_EQ(120000000, h.max_us);
    CHECK(lathist_percentile(&h, 100) == 120000000.0);
    /* The top bucket holds it; the reported p99 stays within [min, max]. */
    double p99 = lathist_percentile(&h, 99);
    CHECK(p99 >= 59000000.0 && p99 <= 120000000.0);
    CHECK(fabs(lathist_percentile(&h, 50) - 1000) <= 1000 / 128.0);
    puts("ok: values above 60 s clamp into the top bucket, max stays exact");
}

static void test_add_equals_recording_into_one(void) {
    lathist a, b, all;
    lathist_init(&a);
    lathist_init(&b);
    lathist_init(&all);
    for (int i = 0; i < 50000; i++) {
        uint64_t v = (uint64_t)exp(uniform01() * 15);
        lathist_record(i % 3 ? &a : &b, v);
        lathist_record(&all, v);
    }
    lathist empty;
    lathist_init(&empty);
    lathist_add(&a, &empty);
    lathist_add(&a, &b);
    CHECK_INT_EQ(all.total, a.total);
    CHECK_INT_EQ(all.min_us, a.min_us);
    CHECK_INT_EQ(all.max_us, a.max_us);
    CHECK(memcmp(all.counts, a.counts, sizeof(all.counts)) == 0);
    for (size_t i = 0; i < sizeof(percentiles) / sizeof(percentiles[0]); i++)
        CHECK(lathist_percentile(&a, percentiles[i]) == lathist_percentile(&all, percentiles[i]));
    puts("ok: adding histograms equals recording into one");
}

int main(void) {
    test_buckets_tile_the_range_without_gaps();
    test_log_uniform_from_1us_to_60s();
    test_narrow_around_2ms();
    test_bimodal_with_a_slow_tail();
    test_small_values_are_exact();
    test_few_values_follow_nearest_rank();
    test_empty_histogram_reports_zero();
    test_values_above_60s_keep_an_exact_max();
    test_add_equals_recording_into_one();
    return 0;
}
