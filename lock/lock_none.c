/* lock_none.c: the kind "none", no lock beyond the database's own. Acquire and release
 * do nothing and there is no token. The service runs it in three modes: none (the
 * seed's race, read-check-update with nothing in between), for-update (the batch's
 * SELECT ... FOR UPDATE row lock is the lock) and atomic (one conditional UPDATE). */
#include "lock.h"

static int none_set_new(const lock_kind *k, const lock_config *cfg, void **set, char *err,
                        size_t errcap) {
    (void)k, (void)cfg, (void)err, (void)errcap;
    *set = NULL;
    return LOCK_OK;
}

static int none_acquire(void *set, const char *name, void **hold) {
    (void)set, (void)name;
    *hold = NULL;
    return LOCK_OK;
}

static int none_check(const void *hold) {
    (void)hold;
    return LOCK_OK;
}

static int64_t none_token(const void *hold) {
    (void)hold;
    return 0;
}

static int none_release(void *hold) {
    (void)hold;
    return LOCK_OK;
}

const lock_kind lock_kind_none = {
    .name = "none",
    .fence_kind = LOCK_FENCE_NONE,
    .set_new = none_set_new,
    .acquire = none_acquire,
    .check = none_check,
    .token = none_token,
    .release = none_release,
};
