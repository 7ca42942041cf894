/* lease_pool_int.h: what a lease library (redislock, redlock, dblock, etcdlock) includes
 * to give lease_pool.c its calls, private to lock/.
 *
 * The pool calls every library through the void pointers of lock_lease_ops (lock.h);
 * the libraries' own functions take their typed handles and holds. Most of the calls
 * only pass the pointers on, so they and the table are written once here:
 * LOCK_LEASE_OPS(redislock, PING, VIEW) defines static functions redislock__lease_close,
 * _acquire, _check, _token, _release, _renew and _errstr, each calling redislock_free,
 * redislock_acquire, ... with the contract of that function, and then
 * `static const lock_lease_ops redislock__lease`, the row's table. The library writes
 * before it its redislock__lease_open (it maps lock_config onto its own config) and
 * redislock__lease_ops (what counts as an operation differs); PING and VIEW are
 * LOCK_LEASE_PING_SHIM's and LOCK_LEASE_VIEW_SHIM's functions (which call LIB_ping and
 * LIB_view), or NULL for a kind without. A library LIB must name its types LIB and
 * LIB_hold. */
#ifndef LOCK_LEASE_POOL_INT_H
#define LOCK_LEASE_POOL_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lock.h"

/* ------------------------------------------------------------------ a lease library
 *
 * Every lease library LIB (redislock_int.h, redlock_int.h, dblock_int.h, etcdlock_int.h)
 * has the same calls, with the contracts of lock_lease_ops's of that name (lock.h), which
 * are stated once here:
 *   - LIB_new(cfg, &handle, err, errcap): connects; LOCK_OK with the handle, or a code
 *     with NULL and the detail in err (LOCK_ERR_ARGS for a bad configuration,
 *     LOCK_ERR_CONNECTION for a service that cannot be reached or refuses the
 *     credentials). LIB_free(handle) frees it and every hold still outstanding (their
 *     locks end with their lease); NULL is a no-op.
 *   - LIB_acquire(handle, name, timeout_ms, &hold): waits at most timeout_ms (0 = try
 *     once, < 0 = no limit) for `name`. LOCK_OK with the hold, or NULL and LOCK_ERR_ARGS
 *     (a bad name, or one this handle holds already: locks are not reentrant),
 *     LOCK_ERR_NOMEM, LOCK_ERR_TIMEOUT, LOCK_ERR_CONNECTION (after one reconnect),
 *     LOCK_ERR_SERVER or LOCK_ERR_CANCELLED (the config's cancel flag, which any thread
 *     may set and a wait reads between its tries).
 *   - LIB_check(hold): LOCK_OK, or LOCK_LOST once the lease minus a safety margin has
 *     passed since the acquire (or the last renewal) was sent, by the local monotonic
 *     clock. Never asks the service; LOCK_ERR_ARGS for NULL. A pause between the check
 *     and the write is invisible to it: the fencing token, checked by the database in
 *     the write, covers that.
 *   - LIB_token(hold): the fencing token, > 0, growing from one holder of a name to the
 *     next; 0 for NULL.
 *   - LIB_release(hold): lets go and frees the hold in every case but
 *     LOCK_ERR_NOT_OWNER (another thread's hold). LOCK_OK; LOCK_LOST if the lock was no
 *     longer ours (its lease ran out; a successor is left alone); LOCK_ERR_CONNECTION
 *     or LOCK_ERR_SERVER if it could not be done (the lock then ends with its lease).
 *   - LIB_renew(via, hold): the watchdog's compare-and-extend of the hold's lease, sent
 *     through `via`, a handle of the CALLING thread (the renewer's), while the hold may
 *     belong to another handle and thread, which may use it meanwhile (check, token)
 *     but not release it. On LOCK_OK, check counts the lease from this renewal;
 *     LOCK_LOST if the lock was not ours any more (nothing is touched);
 *     LOCK_ERR_CONNECTION or LOCK_ERR_SERVER if it could not be sent (try again while
 *     there is lease left). The counters go to `via`.
 *   - LIB_ping(handle): is the service reachable (reconnecting if needed)? LOCK_OK or
 *     the error. LIB_view(handle, name, out): lock_lease_ops.view.
 *   - LIB_get_stats(handle, &out): its counters, which only grow. LIB_errstr(handle):
 *     the last error's detail ("" after a success), never NULL for a handle.
 *     LIB_strerror(code): lock_strerror's text, where the library says more.
 * Threads: a handle is NOT thread-safe (one per thread, made, used and freed one call at
 * a time); a hold belongs to its handle and the thread that acquired it, which alone
 * checks, reads the token of or releases it (LIB_renew is the one exception); never
 * fork() with a handle open. Nothing in a library prints, exits or aborts. */

#define LOCK_LEASE_OPS(LIB, PING, VIEW)                                                            \
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
    }                                                                                              \
    static const lock_lease_ops LIB##__lease = {                                                   \
        .open = LIB##__lease_open,                                                                 \
        .close = LIB##__lease_close,                                                               \
        .acquire = LIB##__lease_acquire,                                                           \
        .check = LIB##__lease_check,                                                               \
        .token = LIB##__lease_token,                                                               \
        .release = LIB##__lease_release,                                                           \
        .renew = LIB##__lease_renew,                                                               \
        .ping = (PING),                                                                            \
        .ops = LIB##__lease_ops,                                                                   \
        .errstr = LIB##__lease_errstr,                                                             \
        .view = (VIEW),                                                                            \
    };

#define LOCK_LEASE_PING_SHIM(LIB)                                                                  \
    static int LIB##__lease_ping(void *handle) {                                                   \
        return LIB##_ping(handle);                                                                 \
    }

#define LOCK_LEASE_VIEW_SHIM(LIB)                                                                  \
    static int LIB##__lease_view(void *handle, const char *name, lock_view *out) {                 \
        return LIB##_view(handle, name, out);                                                      \
    }

/* Fills a lease kind's view of the lock `name` (lock_lease_ops.view; out as
 * lock_view_read zeroed it) from what the service says of its one holder: token (0 =
 * the lock is free, and then nothing else is read), the lease left in ms and owner,
 * the instance that holds it (NULL = not known). out->path is the caller's. In
 * lease_pool.c; any thread. */
void lock__lease_view_holder(lock_view *out, const char *name, int64_t token, int64_t left_ms,
                             const char *owner);

/* A lease library's LIB_strerror: lock_strerror's text, but `connection` and `server`
 * for LOCK_ERR_CONNECTION and LOCK_ERR_SERVER, where the library says which service.
 * In lease_pool.c; pure. */
const char *lock__lease_strerror(int code, const char *connection, const char *server);

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
