/* jobq.c: the bounded FIFO between the HTTP polling thread and the workers.
 *
 * A mutex and a condition variable around an intrusive singly linked list. Pushes from
 * the polling thread go to the tail and are bounded; a worker's requeue (a deduction of
 * segmented stock moving on to the next segment) goes to the head and is never
 * refused, since that job was accepted already. Batching happens in the combiner, not
 * here. */
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

stockd_job *stockd_jobq_pop(stockd_jobq *q) {
    pthread_mutex_lock(&q->mu);
    while (!q->head && !q->closed)
        pthread_cond_wait(&q->cv, &q->mu);
    stockd_job *job = q->head;
    if (job) {
        q->head = job->next;
        if (!q->head) q->tail = NULL;
        job->next = NULL;
        q->len--;
    }
    pthread_mutex_unlock(&q->mu);
    return job;
}

void stockd_jobq_close(stockd_jobq *q) {
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}
