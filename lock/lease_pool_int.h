/* lease_pool_int.h: what a lease library (redislock, redlock, dblock, etcdlock) includes
 * to give lease_pool.c its calls, private to lock/.
 *
 * The pool calls every library through the void pointers of lock_lease_ops (lock.h);
 * the libraries' own functions take their typed handles and holds. Most of the calls
 * only pass the pointers on, so they are written once here: LOCK_LEASE_SHIMS(redislock)
 * defines static functions redislock__lease_close, _acquire, _check, _token, _release,
 * _renew and _errstr, each calling redislock_free, redislock_acquire, ... with the
 * contract of that function; LOCK_LEASE_PING_SHIM(redislock) adds redislock__lease_ping
 * for a kind whose row has a ping. The library still writes its `open` (it maps
 * lock_config onto its own config) and its `ops` (what counts as an operation differs),
 * and lists all of them in its lock_lease_ops. A library LIB must name its types LIB
 * and LIB_hold. */
#ifndef LOCK_LEASE_POOL_INT_H
#define LOCK_LEASE_POOL_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lock.h"

#define LOCK_LEASE_SHIMS(LIB)                                                                      \
    static void LIB##__lease_close(void *handle) {                                                 \
        LIB##_free(handle);                                                                        \
    }                                                                                              \
    static int LIB##__lease_acquire(void *handle, const char *name, int timeout_ms, void **hold) { \
        LIB##_hold *h = NULL;                                                                      \
        int rc = LIB##_acquire(handle, name, timeout_ms, &h);                                      \
        *hold = h;                                                                                 \
        return rc;                                                                                 \
    }                                                                                              \
    static int LIB##__lease_check(const void *hold) {                                              \
        return LIB##_check(hold);                                                                  \
    }                                                                                              \
    static int64_t LIB##__lease_token(const void *hold) {                                          \
        return LIB##_token(hold);                                                                  \
    }                                                                                              \
    static int LIB##__lease_release(void *hold) {                                                  \
        return LIB##_release(hold);                                                                \
    }                                                                                              \
    static int LIB##__lease_renew(void *via, void *hold) {                                         \
        return LIB##_renew(via, hold);                                                             \
    }                                                                                              \
    static const char *LIB##__lease_errstr(const void *handle) {                                   \
        return LIB##_errstr(handle);                                                               \
    }

#define LOCK_LEASE_PING_SHIM(LIB)                                                                  \
    static int LIB##__lease_ping(void *handle) {                                                   \
        return LIB##_ping(handle);                                                                 \
    }

/* Fills a lease kind's view of the lock `name` (lock_lease_ops.view; out as
 * lock_view_read zeroed it) from what the service says of its one holder: token (0 =
 * the lock is free, and then nothing else is read), the lease left in ms and owner,
 * the instance that holds it (NULL = not known). out->path is the caller's. In
 * lease_pool.c; any thread. */
void lock__lease_view_holder(lock_view *out, const char *name, int64_t token, int64_t left_ms,
                             const char *owner);

/* The rule for the names of the key-value lease kinds (redis, etcd): 1..max bytes of
 * [A-Za-z0-9_.-], so that a name is one key segment. In lease_pool.c; pure. */
bool lock__lease_name_valid(const char *name, size_t max);

/* The connect timeout of a library whose connect may hang (a black-holed address): no
 * longer than the lock wait, and within 100..2000 ms. */
static inline int lock__lease_connect_ms(const lock_config *cfg) {
    int ms = cfg->timeout_ms > 0 && cfg->timeout_ms < 2000 ? cfg->timeout_ms : 2000;
    return ms < 100 ? 100 : ms;
}

#endif
