/* Unit tests of service/jobq.c: FIFO order, the same-product batch pop that later
 * coalescing relies on, the bound, and close. */
#include <pthread.h>

#include "check.h"
#include "stockd.h"

static stockd_job jobs[8];

static void *popper(void *arg) {
    stockd_jobq *q = arg;
    stockd_job *out[1];
    return (void *)(uintptr_t)stockd_jobq_pop(q, out, 1);
}

int main(void) {
    stockd_jobq *q = stockd_jobq_new(6);
    stockd_job *out[8];
    int32_t products[] = {1, 2, 1, 3, 1, 2};

    CHECK(q != NULL);
    for (int i = 0; i < 6; i++) {
        jobs[i].kind = STOCKD_JOB_DEDUCT;
        jobs[i].product_id = products[i];
        CHECK_INT_EQ(0, stockd_jobq_push(q, &jobs[i]));
    }
    /* Full: the seventh is refused and stays the caller's. */
    CHECK_INT_EQ(-1, stockd_jobq_push(q, &jobs[6]));

    /* A batch takes the oldest job and the later ones of the same product, in order. */
    CHECK_INT_EQ(3, stockd_jobq_pop(q, out, 8));
    CHECK(out[0] == &jobs[0] && out[1] == &jobs[2] && out[2] == &jobs[4]);
    /* max = 1 is plain FIFO. */
    CHECK_INT_EQ(1, stockd_jobq_pop(q, out, 1));
    CHECK(out[0] == &jobs[1]);
    CHECK_INT_EQ(1, stockd_jobq_pop(q, out, 1));
    CHECK(out[0] == &jobs[3]);
    /* The tail is still right after unlinking from the middle: push then drain. */
    CHECK_INT_EQ(0, stockd_jobq_push(q, &jobs[6]));
    CHECK_INT_EQ(1, stockd_jobq_pop(q, out, 8));
    CHECK(out[0] == &jobs[5]);
    CHECK_INT_EQ(1, stockd_jobq_pop(q, out, 8));
    CHECK(out[0] == &jobs[6]);

    /* Close wakes a blocked popper with 0, and refuses pushes. */
    pthread_t t;
    void *got;
    pthread_create(&t, NULL, popper, q);
    stockd_jobq_close(q);
    pthread_join(t, &got);
    CHECK_INT_EQ(0, (uintptr_t)got);
    CHECK_INT_EQ(-1, stockd_jobq_push(q, &jobs[7]));
    stockd_jobq_free(q);
    puts("test_jobq: all passed");
    return 0;
}
