/* lock_local.c: the kind "local", a mutex per lock name inside this process. It keeps
 * two threads of one stockd apart and nothing more: two instances deduct side by side
 * (the README's second experiment). No token, and nothing that could be lost, so the
 * pre-commit check always passes.
 *
 * Names are striped over a fixed set of mutexes instead of getting one each, so memory
 * stays bounded whatever ids clients send; two names that share a stripe only wait for
 * each other, which never breaks mutual exclusion. */
#include <pthread.h>
#include <stdlib.h>

#include "lock.h"

#define LOCAL_STRIPES 1024

typedef struct local_set {
    pthread_mutex_t stripes[LOCAL_STRIPES];
} local_set;

static int local_set_new(const lock_kind *k, const lock_config *cfg, void **set, char *err,
                         size_t errcap) {
    (void)k, (void)cfg, (void)err, (void)errcap;
    local_set *l = malloc(sizeof(*l));
    if (!l) return LOCK_ERR_NOMEM;
    for (size_t i = 0; i < LOCAL_STRIPES; i++)
        pthread_mutex_init(&l->stripes[i], NULL);
    *set = l;
    return LOCK_OK;
}

static void local_set_free(void *set) {
    local_set *l = set;
    for (size_t i = 0; i < LOCAL_STRIPES; i++)
        pthread_mutex_destroy(&l->stripes[i]);
    free(l);
}

/* FNV-1a: the names of neighbouring products land on different stripes. */
static uint32_t local_hash(const char *name) {
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

static int local_acquire(void *set, const char *name, void **hold) {
    local_set *l = set;
    pthread_mutex_t *m = &l->stripes[local_hash(name) % LOCAL_STRIPES];
    pthread_mutex_lock(m);
    *hold = m;
    return LOCK_OK;
}

static int local_check(const void *hold) {
    (void)hold;
    return LOCK_OK;
}

static int64_t local_token(const void *hold) {
    (void)hold;
    return 0;
}

static int local_release(void *hold) {
    pthread_mutex_unlock(hold);
    return LOCK_OK;
}

const lock_kind lock_kind_local = {
    .name = "local",
    .fence_kind = LOCK_FENCE_NONE,
    .set_new = local_set_new,
    .set_free = local_set_free,
    .acquire = local_acquire,
    .check = local_check,
    .token = local_token,
    .release = local_release,
};
