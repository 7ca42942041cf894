/* jobq.c: the bounded FIFO between the HTTP polling thread and the workers.
 *
 * A mutex and a condition variable around an intrusive singly linked list. The pop
 * hands out the oldest job plus, if asked for more, the next queued jobs of the same
 * kind and product: that is the hook for serving several deductions of one product
 * under one lock acquisition. Taking later jobs of one product ahead of other products'
 * jobs never reorders jobs of the same product. */
#include <pthread.h>
#include <stdlib.h>

#include "stockd.h"

struct stockd_jobq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    stockd_job *head, *tail;
    unsigned len, max;
    bool closed;
};

stockd_jobq *stockd_jobq_new(unsigned max) {
    stockd_jobq *q = calloc(1, sizeof(*q));
    if (!q) return NULL;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->max = max;
    return q;
}

void stockd_jobq_free(stockd_jobq *q) {
    if (!q) return;
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

int stockd_jobq_push(stockd_jobq *q, stockd_job *job) {
    int rc = -1;

    pthread_mutex_lock(&q->mu);
    if (!q->closed && q->len < q->max) {
        job->next = NULL;
        if (q->tail)
            q->tail->next = job;
        else
            q->head = job;
        q->tail = job;
        q->len++;
        rc = 0;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void stockd_jobq_requeue(stockd_jobq *q, stockd_job *job) {
    pthread_mutex_lock(&q->mu);
    job->next = q->head;
    q->head = job;
    if (!q->tail) q->tail = job;
    q->len++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

unsigned stockd_jobq_pop(stockd_jobq *q, stockd_job **out, unsigned max) {
    unsigned n = 0;

    pthread_mutex_lock(&q->mu);
    while (!q->head && !q->closed)
        pthread_cond_wait(&q->cv, &q->mu);
    if (q->head && max > 0) {
        stockd_job *first = q->head, *prev = NULL, *j;

        /* Unlink the head, then walk on for more jobs like it. */
        q->head = first->next;
        if (!q->head) q->tail = NULL;
        first->next = NULL;
        out[n++] = first;
        for (j = q->head; j && n < max;) {
            stockd_job *next = j->next;
            if (j->kind == first->kind && j->product_id == first->product_id) {
                if (prev)
                    prev->next = next;
                else
                    q->head = next;
                if (q->tail == j) q->tail = prev;
                j->next = NULL;
                out[n++] = j;
            } else {
                prev = j;
            }
            j = next;
        }
        q->len -= n;
    }
    pthread_mutex_unlock(&q->mu);
    return n;
}

void stockd_jobq_close(stockd_jobq *q) {
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}
