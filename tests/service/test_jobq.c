/* Unit tests of service/jobq.c: FIFO order, the bound, the requeue at the head (past
 * the bound and after close), and close. */
#include <pthread.h>

#include "check.h"
#include "stockd.h"

static stockd_job jobs[8];

static void *popper(void *arg) {
    return stockd_jobq_pop(arg);
}

int main(void) {
    stockd_jobq *q = stockd_jobq_new(3);

    CHECK(q != NULL);
    for (int i = 0; i < 3; i++)
        CHECK_INT_EQ(0, stockd_jobq_push(q, &jobs[i]));
    /* Full: the fourth is refused and stays the caller's. */
    CHECK_INT_EQ(-1, stockd_jobq_push(q, &jobs[3]));

    /* FIFO. */
    CHECK(stockd_jobq_pop(q) == &jobs[0]);
    /* A requeue goes to the head, also when the queue is full again. */
    CHECK_INT_EQ(0, stockd_jobq_push(q, &jobs[3]));
    stockd_jobq_requeue(q, &jobs[0]);
    CHECK(stockd_jobq_pop(q) == &jobs[0]);
    CHECK(stockd_jobq_pop(q) == &jobs[1]);
    CHECK(stockd_jobq_pop(q) == &jobs[2]);
    CHECK(stockd_jobq_pop(q) == &jobs[3]);
    /* The tail is right after the queue ran empty and a requeue refilled it. */
    stockd_jobq_requeue(q, &jobs[4]);
    CHECK_INT_EQ(0, stockd_jobq_push(q, &jobs[5]));
    CHECK(stockd_jobq_pop(q) == &jobs[4]);
    CHECK(stockd_jobq_pop(q) == &jobs[5]);

    /* Close wakes a blocked popper with NULL and refuses pushes; a requeue after close
     * is still handed out, then NULL. */
    pthread_t t;
    void *got = &jobs[7];
    pthread_create(&t, NULL, popper, q);
    stockd_jobq_close(q);
    pthread_join(t, &got);
    CHECK(got == NULL);
    CHECK_INT_EQ(-1, stockd_jobq_push(q, &jobs[6]));
    stockd_jobq_requeue(q, &jobs[7]);
    CHECK(stockd_jobq_pop(q) == &jobs[7]);
    CHECK(stockd_jobq_pop(q) == NULL);
    stockd_jobq_free(q);
    puts("test_jobq: all passed");
    return 0;
}
