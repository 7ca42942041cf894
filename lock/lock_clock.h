/* lock_clock.h: the monotonic clock and the sleep the lease locks (redislock.c,
 * dblock.c) time their waits with. Internal to lock/; not part of any module's API.
 * Pure functions of the clock; any thread. */
#ifndef LOCK_CLOCK_H
#define LOCK_CLOCK_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in microseconds. */
static inline int64_t lock_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Sleeps us microseconds, resuming after a signal. */
static inline void lock_sleep_us(int64_t us) {
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

#endif
