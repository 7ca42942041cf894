/* lock_clock.h: the monotonic clock and the sleep the lease locks (redislock.c,
 * dblock.c, redlock.c, etcdlock.c) time their waits with, and their holds' lease
 * clocks. Internal to lock/; not part of any module's API. Any thread. */
#ifndef LOCK_CLOCK_H
#define LOCK_CLOCK_H

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_BOOTTIME in microseconds: the clock of a lease's validity and of the timeouts
 * measured against it. A lease runs out on the server in real time, suspended or not,
 * and CLOCK_MONOTONIC stops while the machine is suspended (CLOCK_BOOTTIME does not):
 * on it, a hold kept across a suspend would still look valid here after the server had
 * let it go. The fence refuses that holder's COMMIT either way; this clock keeps
 * lock_check from saying OK meanwhile. (Waits on a condition variable stay on
 * CLOCK_MONOTONIC, the only steady clock pthread_condattr_setclock takes; a suspend
 * only makes them end late, which decides nothing.) */
static inline int64_t lock_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Sleeps us microseconds, resuming after a signal. */
static inline void lock_sleep_us(int64_t us) {
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Moves a hold's lease clock forward to until_us, never back: the monotonic time until
 * which the lease is surely ours, which a renewer thread writes while the holder's
 * check reads it. A renewal whose reply came late must not shorten a later one, and a
 * clock at 0 (etcdlock: the lease is known to be gone) stays at 0. */
static inline void lock_clock_extend(atomic_llong *valid_until_us, long long until_us) {
    long long cur = atomic_load(valid_until_us);
    while (cur != 0 && cur < until_us &&
           !atomic_compare_exchange_weak(valid_until_us, &cur, until_us)) {
    }
}

#endif
