/* dblock_view.c: the lock table's part of lock_view_read (lock.h). A lock is one row of
 * stock_lock (sql/schema.sql), and waiters poll for it, so a view is that row: its
 * owner, token and the lease left by MySQL's clock, or nothing when the lock is free.
 * The owner column is the holder's lock_config.owner followed by ":PID:N:RANDOM"
 * (dblock_new), which the view drops to name the instance. */
#include <stdio.h>
#include <string.h>

#include "dblock.h"
#include "lock.h"

int dblock__lease_view(void *handle, const char *name, lock_view *out) {
    char owner[128];
    long long token = 0, left = -1;
    int rc = dblock_peek(handle, name, owner, sizeof(owner), &token, &left);
    if (rc != LOCK_OK) return rc;
    snprintf(out->path, sizeof(out->path), "stock_lock.name = '%s'", name);
    out->lease = true;
    out->total = out->n = token ? 1 : 0;
    out->lease_ms = token ? left : -1;
    if (!token) return LOCK_OK;
    /* The last three ':' fields are dblock_new's suffix. */
    for (int i = 0; i < 3; i++) {
        char *colon = strrchr(owner, ':');
        if (colon) *colon = '\0';
    }
    lock_view_entry *e = &out->e[0];
    snprintf(e->node, sizeof(e->node), "%s", name);
    snprintf(e->owner, sizeof(e->owner), "%.63s", owner);
    e->seq = -1;
    e->token = token;
    e->watches = -1;
    return LOCK_OK;
}
