/* redislock_view.c: the Redis lease lock's part of lock_view_read (lock.h). Redis keeps
 * one key per lock, holding the holder's fencing token and expiring with its lease, and
 * no queue: waiters poll and listen for the release on their own. So a view is that
 * key, its token and the lease left, or nothing when the lock is free. */
#include <stdio.h>

#include "lock.h"
#include "redislock.h"

int redislock__lease_view(void *handle, const char *name, lock_view *out) {
    long long token = 0, pttl = -1;
    int rc = redislock_peek(handle, name, out->path, sizeof(out->path), &token, &pttl);
    if (rc != LOCK_OK) return rc;
    out->lease = true;
    out->total = out->n = token ? 1 : 0;
    out->lease_ms = token ? pttl : -1;
    if (token) {
        lock_view_entry *e = &out->e[0];
        snprintf(e->node, sizeof(e->node), "%s", name);
        e->seq = -1;
        e->token = token;
        e->watches = -1;
    }
    return LOCK_OK;
}
