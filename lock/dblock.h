/* dblock: article 001's lock table on MariaDB / MySQL, with a lease and a fencing token.
 *
 * A row of stock_lock (sql/schema.sql) is the lock:
 *     stock_lock(name PRIMARY KEY, owner, token AUTO_INCREMENT UNIQUE, expires_at)
 *   - acquire: INSERT (name, owner, NOW(6) + lease). Success means held, and the row's
 *     AUTO_INCREMENT token (the statement's insert id) is the fencing token. A
 *     duplicate key means "held by someone": first an atomic takeover is tried, DELETE
 *     ... WHERE name = ? AND expires_at < NOW(6), which removes the row only if its
 *     lease has passed by the database's clock (a crashed holder's row), and if it did,
 *     the INSERT is tried again at once. Otherwise the waiter sleeps with exponential
 *     backoff and jitter (1 ms doubling up to poll_max_ms, never past its deadline) and
 *     tries again: the database has no notification to wait on, but it is never spun on;
 *   - release: DELETE ... WHERE name = ? AND owner = ? AND token = ?, so only the owner
 *     of this very acquisition can delete it; a holder whose row was taken over
 *     deletes nothing (LOCK_LOST);
 *   - every statement is a prepared statement on the handle's own connection, in
 *     autocommit mode: the lock row is committed, and visible to every other process,
 *     before the caller's stock transaction (on another connection) begins.
 *
 * Fencing is sound here: the token comes from an AUTO_INCREMENT counter in the same
 * server as the stock, and the next holder's INSERT can only succeed after the previous
 * row was deleted, so its value is allocated later and is larger. MariaDB keeps the
 * counter across restarts (since 10.2.4; MySQL before 8.0 did not, and an empty table
 * restarted there would hand out small tokens again). Gaps (failed INSERTs use values
 * too) do not matter.
 *
 * The lease is judged by two clocks: the database's (NOW(6), for the takeover) and the
 * holder's monotonic clock (dblock_check: LOST once the lease minus a safety margin has
 * passed since the INSERT was sent). A holder paused past its lease is refused by the
 * fence in the stock write, as for the other lock kinds.
 *
 * Threads and ownership: a dblock handle is one MySQL connection and is NOT
 * thread-safe; make one per worker thread, and make, use and free it on that thread
 * (the client library's per-thread rule, see stockdb.h; call stockdb_global_init()
 * first). Handles reconnect by themselves. A dblock_hold belongs to its handle and is
 * used on that thread only. Locks are not reentrant: acquiring a name this handle
 * already holds is refused (LOCK_ERR_ARGS).
 *
 * Every function returns LOCK_OK (0) or a negative LOCK_* code, the values of
 * lock_codes.h (the file ends with the registry's row, dblock_kind; lock.h);
 * dblock_strerror() names it, dblock_errstr() has the detail. Nothing here prints,
 * exits or aborts. */
#ifndef DBLOCK_H
#define DBLOCK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lock_codes.h"
#include "stockdb.h"

/* The longest lock name, in bytes (stock_lock.name is VARCHAR(200)). */
#define DBLOCK_NAME_MAX 200

typedef struct dblock_config {
    stockdb_config db;    /* the server, as for stockdb (copied) */
    const char *owner;    /* written into the rows, for people reading the table
                           * (<= 40 bytes; NULL = "dblock"); ":<pid>:<n>:<12 random hex
                           * digits>" is appended so every handle's rows are its own,
                           * also across hosts and containers that share a pid */
    int lease_ms;         /* 0 = 10000 */
    int safety_margin_ms; /* 0 = lease/10 + 2 ms; < 0 refused */
    int poll_max_ms;      /* the longest backoff sleep; 0 = 50 */
    /* NULL, or a flag any thread may set (to non-zero) to end this handle's waits, as
     * at shutdown: an acquire that finds it set, before a try, returns
     * LOCK_ERR_CANCELLED without the lock; a wait notices it within poll_max_ms. The
     * handle only reads it; the caller owns it and keeps it alive as long as the
     * handle. */
    const atomic_int *cancel;
} dblock_config;

/* Counters. All only grow. */
typedef struct dblock_stats {
    uint64_t acquired;
    uint64_t timeouts;
    uint64_t takeovers; /* expired rows this handle deleted to take the lock */
    uint64_t released;
    uint64_t release_lost; /* releases that found the row gone or taken over */
    uint64_t ops;          /* statements executed */
    uint64_t sleeps;       /* backoff sleeps while waiting */
    uint64_t renewals;     /* dblock_renew calls through this handle that extended */
    uint64_t renew_lost;   /* ... that found the row gone or taken over */
} dblock_stats;

typedef struct dblock dblock;
typedef struct dblock_hold dblock_hold;

/* Makes a handle and connects. On LOCK_OK *out is the handle; otherwise *out is NULL
 * and the code says why (LOCK_ERR_CONNECTION: the server is unreachable or refused
 * the login; LOCK_ERR_SERVER: the statements could not be prepared, e.g. no
 * stock_lock table or no grant; LOCK_ERR_ARGS: a bad configuration, or the kernel
 * gave no random bytes for the owner). If errbuf is not NULL the detail is written there. */
int dblock_new(const dblock_config *cfg, dblock **out, char *errbuf, size_t errcap);

/* Closes the connection and frees the handle and any holds still outstanding (their
 * pointers become invalid; their rows stay until their lease passes). NULL is a no-op. */
void dblock_free(dblock *d);

/* Acquires `name` (1..DBLOCK_NAME_MAX bytes), waiting at most timeout_ms (0 = try once,
 * < 0 = no limit). On LOCK_OK *out is the hold; otherwise *out is NULL. Returns
 * LOCK_OK, LOCK_ERR_ARGS, LOCK_ERR_NOMEM, LOCK_ERR_TIMEOUT,
 * LOCK_ERR_CONNECTION (after one reconnect; an INSERT whose reply was lost is undone
 * by owner if the connection comes back, else its row expires with the lease),
 * LOCK_ERR_SERVER or LOCK_ERR_CANCELLED (the config's cancel flag is set). */
int dblock_acquire(dblock *d, const char *name, int timeout_ms, dblock_hold **out);

/* Is the lease surely still ours? LOCK_OK, or LOCK_LOST once lease_ms minus the
 * safety margin has passed since the INSERT was sent. Local clock only; never asks the
 * server. LOCK_ERR_ARGS for NULL. */
int dblock_check(const dblock_hold *h);

/* The watchdog's renewal, as Redisson's: UPDATE stock_lock SET expires_at = now + lease
 * WHERE name = ? AND owner = ? AND token = ? of hold h, on the connection of handle
 * `via`. On LOCK_OK, dblock_check(h) counts its lease from the moment this renewal
 * was sent. Returns LOCK_OK; LOCK_LOST if no row of this acquisition is left (it
 * was taken over after its lease; h's lease clock is not touched); LOCK_ERR_CONNECTION
 * (after one reconnect) or LOCK_ERR_SERVER if it could not be done (nothing extended;
 * try again while there is lease left); LOCK_ERR_ARGS for NULL. A row whose lease has
 * passed by the database's clock but that nobody took over is still this acquisition's
 * and is renewed: nobody else can have held the lock in between.
 *
 * The one exception to the thread rule above, made for a renewer thread: `via` is a
 * handle made and used on the CALLING thread (the renewer's own, on the same server),
 * while h may belong to another handle and thread, which may be using h meanwhile
 * (check, token). The caller guarantees that h is not released or freed during the
 * call. The counters go to `via`. */
int dblock_renew(dblock *via, dblock_hold *h);

/* The fencing token (stock_lock.token of this acquisition), > 0; 0 for NULL. */
int64_t dblock_token(const dblock_hold *h);

/* Deletes our row and frees the hold (in every case). LOCK_OK; LOCK_LOST if the row
 * was no longer ours (taken over after the lease); LOCK_ERR_CONNECTION or
 * LOCK_ERR_SERVER if the delete failed (the row then stays until its lease passes). */
int dblock_release(dblock_hold *h);

/* Checks the connection (reconnecting if needed): LOCK_OK or LOCK_ERR_CONNECTION. */
int dblock_ping(dblock *d);

/* Reads the row of the lock `name` as MySQL has it now, for a view (lock.h,
 * lock_view_read): *owner (ownercap bytes) the holder's owner string, *token its token
 * (0 = free) and *left_ms its lease left by the server's clock (-1 = free). One
 * statement; reconnects as any call. LOCK_OK or an error with its detail in errstr.
 * The handle's thread. */
int dblock_peek(dblock *d, const char *name, char *owner, size_t ownercap, long long *token,
                long long *left_ms);

void dblock_get_stats(const dblock *d, dblock_stats *out);

/* The owner this handle writes into its rows (dblock_config.owner plus its unique
 * suffix; the configured part shortened if the whole would pass 64 bytes). Valid as
 * long as the handle; "" for NULL. Read-only. */
const char *dblock_owner(const dblock *d);

/* The last error's detail ("" after a success); never NULL for a non-NULL handle. */
const char *dblock_errstr(const dblock *d);

/* A text for a code: lock_strerror()'s, but where the library says more about
 * the database (CONNECTION, SERVER). Pure. */
const char *dblock_strerror(int code);

#endif
