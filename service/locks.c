/* locks.c: the lock kinds a deduction can run under, behind one small interface
 * (acquire, check before commit, fencing token, release), chosen once from the lock
 * mode. Adding a kind is one more table here, not a switch in the worker.
 *
 *   local       a mutex per product inside this process (striped, see below);
 *   zk, zk-herd the ZooKeeper fair or herd lock of lock/zklock.h, with its czxid as the
 *               fencing token and its session state as the pre-commit check;
 *   for-update  no lock outside the database: the batch's SELECT ... FOR UPDATE is the
 *               lock, so acquire and release do nothing.
 * Modes none and atomic take no lock and never come here. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "stockd.h"

/* Products are striped over a fixed set of mutexes instead of getting one each, so
 * memory stays bounded whatever ids clients send; two products that share a stripe only
 * wait for each other, which never breaks mutual exclusion. */
#define LOCAL_STRIPES 1024

struct stockd_locks {
    const struct stockd_lock_kind *kind;
    zklock_session *zk;
    zklock_kind zk_kind;
    int timeout_ms;
    pthread_mutex_t stripes[LOCAL_STRIPES];
};

typedef struct stockd_lock_kind {
    int (*acquire)(stockd_locks *l, int32_t product_id, void **impl);
    int (*check)(const void *impl);
    int64_t (*token)(const void *impl);
    int (*release)(void *impl);
} stockd_lock_kind;

/* ---------------------------------------------------------------- local */

static int local_acquire(stockd_locks *l, int32_t product_id, void **impl) {
    pthread_mutex_t *m = &l->stripes[(uint32_t)product_id % LOCAL_STRIPES];
    pthread_mutex_lock(m);
    *impl = m;
    return ZKLOCK_OK;
}

static int always_ok(const void *impl) {
    return ZKLOCK_OK;
}

static int64_t no_token(const void *impl) {
    return 0;
}

static int local_release(void *impl) {
    pthread_mutex_unlock(impl);
    return ZKLOCK_OK;
}

static const stockd_lock_kind kind_local = {local_acquire, always_ok, no_token, local_release};

/* ---------------------------------------------------------------- ZooKeeper */

static int zk_acquire(stockd_locks *l, int32_t product_id, void **impl) {
    char name[32];
    zklock_hold *h = NULL;
    snprintf(name, sizeof(name), "product_%d", product_id);
    int rc = zklock_acquire(l->zk, name, l->zk_kind, l->timeout_ms, &h);
    *impl = h;
    return rc;
}

static int zk_check(const void *impl) {
    return zklock_check(impl);
}

static int64_t zk_token(const void *impl) {
    return zklock_token(impl);
}

static int zk_release(void *impl) {
    return zklock_release(impl);
}

static const stockd_lock_kind kind_zk = {zk_acquire, zk_check, zk_token, zk_release};

/* ---------------------------------------------------------------- the row lock */

static int row_acquire(stockd_locks *l, int32_t product_id, void **impl) {
    *impl = NULL;
    return ZKLOCK_OK;
}

static int row_release(void *impl) {
    return ZKLOCK_OK;
}

static const stockd_lock_kind kind_row = {row_acquire, always_ok, no_token, row_release};

/* ---------------------------------------------------------------- the interface */

stockd_locks *stockd_locks_new(const stockd_ctx *ctx) {
    stockd_locks *l = calloc(1, sizeof(*l));
    if (!l) return NULL;
    l->zk = ctx->zk;
    l->timeout_ms = (int)ctx->cfg->lock_timeout_ms;
    for (size_t i = 0; i < LOCAL_STRIPES; i++)
        pthread_mutex_init(&l->stripes[i], NULL);
    switch (ctx->cfg->lock) {
    case STOCKD_LOCK_LOCAL:
        l->kind = &kind_local;
        break;
    case STOCKD_LOCK_ZK:
    case STOCKD_LOCK_ZK_HERD:
        l->kind = &kind_zk;
        l->zk_kind = ctx->cfg->lock == STOCKD_LOCK_ZK ? ZKLOCK_FAIR : ZKLOCK_HERD;
        break;
    default:
        l->kind = &kind_row;
        break;
    }
    return l;
}

void stockd_locks_free(stockd_locks *l) {
    if (!l) return;
    for (size_t i = 0; i < LOCAL_STRIPES; i++)
        pthread_mutex_destroy(&l->stripes[i]);
    free(l);
}

int stockd_lock_acquire(stockd_locks *l, int32_t product_id, stockd_lock *out) {
    out->kind = l->kind;
    out->product_id = product_id;
    out->impl = NULL;
    return l->kind->acquire(l, product_id, &out->impl);
}

int stockd_lock_check(const stockd_lock *h) {
    return h->kind->check(h->impl);
}

int64_t stockd_lock_token(const stockd_lock *h) {
    return h->kind->token(h->impl);
}

int stockd_lock_release(stockd_lock *h) {
    int rc = h->kind->release(h->impl);
    h->impl = NULL;
    return rc;
}

uint64_t stockd_locks_ops(stockd_locks *l) {
    if (!l || !l->zk) return 0;
    zklock_stats st;
    zklock_get_stats(l->zk, &st);
    return st.op_create + st.op_delete + st.op_get_children + st.op_get_data;
}
