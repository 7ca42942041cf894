/* redlock.c: RedLock, a lease lock held by a majority of independent Redis servers
 * (article 001 §3.7), with a fencing token derived from theirs.
 *
 * The algorithm, as its author describes it, over N servers (3 to 9; 3 or 5 in practice)
 * that share nothing (no replication between them):
 *   - note the time, then try to take the lock on every server in turn, each try bounded
 *     by a short per-server timeout (server_timeout_ms) so that a dead server costs
 *     little. Each try is lock/redislock.c's acquire script, sent once through a
 *     redislock handle of that server (one handle per server, reused; no Lua of our own):
 *     SET <prefix><name> <token> NX PX <lease> with that server's fencing counter;
 *   - the lock is held if a majority (N/2 + 1) of the servers granted it and time is left:
 *     validity = lease - elapsed - drift, where elapsed is the time the round took and
 *     drift (drift_ms) allows for the servers' clocks running faster than ours and for
 *     Redis's expiry granularity. redlock_check() says LOST once the validity has passed
 *     by our monotonic clock;
 *   - otherwise the keys it did get are released on those servers and, after a random
 *     backoff (1..retry_ms), a new round starts, until the caller's deadline;
 *   - release goes to EVERY server, as the algorithm says: redislock's compare-and-delete
 *     where it granted, and elsewhere the deletion of a key of this handle's owner
 *     (redislock_release_mine) that a try whose reply was lost may have left.
 *
 * The fencing token. RedLock has no monotonic counter of its own: each server has its
 * own counter, and they are unrelated. A hold's token is the MAXIMUM of the per-server
 * tokens it got. Each of those is redislock's counter, floored at that server's clock in
 * microseconds, so the tokens of all servers live on one scale (Redis time, µs). The
 * database keeps them apart from other kinds' by fence_kind LOCK_FENCE_REDLOCK (5).
 * What that guarantees:
 *   - any two majorities share a server S; if B acquired after A's key on S was gone
 *     (released, or expired), B's token on S is above A's token on S;
 *   - hence B's token (a maximum) is above A's whenever A's largest per-server token was
 *     handed out less than (time between A's acquire and B's) of clock skew ahead:
 *     with the servers' clocks agreeing to within d, every acquisition that begins more
 *     than d after another one's has the larger token. On one machine (the tests, the
 *     stack) d is 0; with NTP, a few ms, against leases of seconds. A server clock that
 *     jumps FORWARD only raises its later tokens; one that steps BACK keeps its counter
 *     (the floor only ever raises it);
 *   - what it does not guarantee: with skew above the gap between two acquisitions, a
 *     stale holder's token can be the larger one. Its late write is then accepted and the
 *     newer holder's refused (503 lock_lost): the fence keeps at most one of them writing
 *     per row version, but which one wins is no longer "the newer";
 *   - without the fence (--fence off) nothing checks the token: a holder that lost the
 *     majority while it worked (paused past its validity, or a clock jump on servers that
 *     expired its keys early, the case Kleppmann describes) writes on, and a second holder
 *     that took the majority meanwhile writes too: oversold. redlock_check() cannot see a
 *     clock jump on the servers at all: its validity is counted on our clock.
 *
 * Failures: a server down, or answering an error, is one missing vote; with a majority
 * still up acquire works. With fewer than a majority reachable in a round, acquire
 * returns LOCK_ERR_CONNECTION at once (nothing is held, what was granted is released). A
 * grant whose reply was lost (the per-server timeout passed) is deleted by the round's
 * or the hold's release on that server: every key a handle sets ends with its owner id.
 * On a SLOW server the release arrives after the late grant and deletes it. On a server
 * that was STOPPED (SIGSTOP, a frozen VM), the try and the release wait in the queues of
 * two connections, which the server may serve in either order: a release served first
 * finds nothing, and the grant then blocks that server's vote for at most one lease.
 *
 *
 * The calls have the contracts and thread rules of a lease library (lease_pool_int.h);
 * redlock_int.h declares them.
 *
 * A handle is one redislock handle per server, made at redlock_new (or, for a server that
 * was down, at the first round that reaches it) and kept for the handle's life:
 * redislock reconnects a broken connection by itself. Every per-server step is a
 * redislock call (acquire with timeout 0 = one try, release, renew, ping), so the Lua,
 * the fencing counter and the credentials are redislock's alone. This file adds the
 * vote: rounds, the majority, the validity, the backoff and the token; and ends with the
 * registry's row (lock.h), a lease kind pooled by lease_pool.c like redis. */
#include "redlock_int.h"
#include "hostport.h"
#include "lease_pool_int.h"
#include "lock.h"
#include "lock_clock.h"
#include "redislock_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define ADDR_MAX 262 /* host (255) + ':' + port + NUL */

struct redlock_hold {
    redlock *l;
    redlock_hold *next;
    pthread_t thread;
    int64_t token;
    int granted;
    /* Monotonic: the start of the round that took (or last renewed) it plus its
     * validity. Atomic because a renewer thread moves it (redlock_renew). */
    atomic_llong valid_until_us;
    redislock_hold *sub[REDLOCK_SERVERS_MAX]; /* NULL where the server did not grant */
    char name[REDISLOCK_NAME_MAX + 1];
};

struct redlock {
    int n, quorum;
    char addr[REDLOCK_SERVERS_MAX][ADDR_MAX];
    redislock *srv[REDLOCK_SERVERS_MAX]; /* NULL until reached */
    char prefix[33];
    char user[129], password[513];
    char owner[17]; /* this handle's, in every key it sets (redislock_config.owner) */
    int lease_ms, drift_ms, timeout_ms, retry_ms;
    const atomic_int *cancel;
    uint64_t rng;
    redlock_hold *holds;
    redlock_stats st;
    char errstr[512];
};

/* ---------------------------------------------------------------- helpers */

static void set_err(redlock *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_err(redlock *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->errstr, sizeof(l->errstr), fmt, ap);
    va_end(ap);
}

/* redislock's codes in lock_codes.h's space. An if-chain, not a switch: redislock's
 * names may become aliases of the same values. AUTH is a connection failure here (the
 * server is of no use to the vote). */
static int code_of(int rc) {
    if (rc == LOCK_OK) return LOCK_OK;
    if (rc == LOCK_ERR_ARGS) return LOCK_ERR_ARGS;
    if (rc == LOCK_ERR_NOMEM) return LOCK_ERR_NOMEM;
    if (rc == LOCK_ERR_TIMEOUT) return LOCK_ERR_TIMEOUT;
    if (rc == LOCK_ERR_CONNECTION || rc == LOCK_ERR_CONNECTION) return LOCK_ERR_CONNECTION;
    if (rc == LOCK_ERR_NOT_OWNER) return LOCK_ERR_NOT_OWNER;
    if (rc == LOCK_LOST) return LOCK_LOST;
    if (rc == LOCK_ERR_CANCELLED) return LOCK_ERR_CANCELLED;
    return LOCK_ERR_SERVER;
}

/* Splits the comma list into addr[] (hostport.h's LIST: distinct, well-formed); the
 * count, or LOCK_ERR_ARGS. */
static int split_addrs(const char *list, char addr[][ADDR_MAX]) {
    hostport hp[REDLOCK_SERVERS_MAX];
    int n = hostport_list_parse(list, hp, REDLOCK_SERVERS_MAX);
    if (n < REDLOCK_SERVERS_MIN) return LOCK_ERR_ARGS;
    for (int i = 0; i < n; i++)
        if (hostport_format(&hp[i], addr[i], ADDR_MAX) != 0) return LOCK_ERR_ARGS;
    return n;
}

int redlock_count_addrs(const char *addrs) {
    char addr[REDLOCK_SERVERS_MAX][ADDR_MAX];
    return split_addrs(addrs, addr);
}

/* A random backoff in 1..retry_ms ms (xorshift64; the state is per handle, so no
 * thread shares it). */
static int64_t backoff_us(redlock *l) {
    l->rng ^= l->rng << 13;
    l->rng ^= l->rng >> 7;
    l->rng ^= l->rng << 17;
    return 1000 + (int64_t)(l->rng % (uint64_t)l->retry_ms) * 1000;
}

static bool cancelled(const redlock *l) {
    return l->cancel && atomic_load(l->cancel);
}

/* Server i's handle, made now if it has none. LOCK_OK or the failure's code, with the
 * detail in errstr. */
static int srv_open(redlock *l, int i) {
    if (l->srv[i]) return LOCK_OK;
    redislock_config c = {.addr = l->addr[i],
                          .prefix = l->prefix,
                          .lease_ms = l->lease_ms,
                          .connect_timeout_ms = l->timeout_ms,
                          .io_timeout_ms = l->timeout_ms,
                          .cancel = l->cancel,
                          .user = l->user,
                          .password = l->password,
                          .owner = l->owner};
    char err[256];
    int rc = redislock_new(&c, &l->srv[i], err, sizeof(err));
    if (rc != LOCK_OK) {
        l->srv[i] = NULL;
        set_err(l, "%s", err); /* the callers name the server */
    }
    return code_of(rc);
}

/* Releases h's key on EVERY server, as the algorithm says: on a server that granted it,
 * the hold's compare-and-delete; on the others, any key of this handle's owner
 * (redislock_release_mine), which a try left there when its reply was lost (a slow
 * server: the key was set after the try gave up, and would block that server's vote for
 * a whole lease). Another holder's key is left alone. Returns how many granted keys were
 * still ours (*kept), how many were not (*lost); the rest could not be reached. */
static void release_subs(redlock *l, redlock_hold *h, int *kept, int *lost) {
    *kept = *lost = 0;
    for (int i = 0; i < l->n; i++) {
        if (!h->sub[i]) {
            if (l->srv[i]) (void)redislock_release_mine(l->srv[i], h->name);
            continue;
        }
        int rc = redislock_release(h->sub[i]);
        h->sub[i] = NULL;
        if (rc == LOCK_OK) {
            (*kept)++;
        } else if (rc == LOCK_LOST) {
            (*lost)++;
        } else {
            set_err(l, "server %s: release: %s", l->addr[i], redislock_errstr(l->srv[i]));
        }
    }
}

/* ---------------------------------------------------------------- handle */

int redlock_new(const redlock_config *cfg, redlock **out, char *errbuf, size_t errcap) {
    if (errbuf && errcap) errbuf[0] = '\0';
    if (!out) return LOCK_ERR_ARGS;
    *out = NULL;
    if (!cfg) return LOCK_ERR_ARGS;
    redlock *l = calloc(1, sizeof(*l));
    if (!l) return LOCK_ERR_NOMEM;
    int rc = LOCK_ERR_ARGS;
    const char *prefix = cfg->prefix ? cfg->prefix : "lock:";
    l->lease_ms = cfg->lease_ms ? cfg->lease_ms : 10000;
    l->drift_ms = cfg->drift_ms ? cfg->drift_ms : l->lease_ms / 100 + 2;
    l->timeout_ms = cfg->server_timeout_ms ? cfg->server_timeout_ms : 200;
    l->retry_ms = cfg->retry_ms ? cfg->retry_ms : 50;
    l->cancel = cfg->cancel;
    l->n = split_addrs(cfg->addrs, l->addr);
    if (l->n < 0) {
        set_err(l, "bad server list \"%s\" (want %d to %d distinct HOST:PORT, comma-separated)",
                cfg->addrs ? cfg->addrs : "", REDLOCK_SERVERS_MIN, REDLOCK_SERVERS_MAX);
        goto fail;
    }
    l->quorum = l->n / 2 + 1;
    if (strlen(prefix) >= sizeof(l->prefix) || l->lease_ms < 1 || cfg->drift_ms < 0 ||
        l->drift_ms >= l->lease_ms || l->timeout_ms < 1 || l->retry_ms < 1 ||
        (cfg->user && strlen(cfg->user) >= sizeof(l->user)) ||
        (cfg->password && strlen(cfg->password) >= sizeof(l->password))) {
        set_err(l, "bad configuration: want a prefix of at most 32 bytes, lease_ms above the "
                   "drift, positive timeouts, and credentials of at most 128/512 bytes");
        goto fail;
    }
    strcpy(l->prefix, prefix);
    snprintf(l->user, sizeof(l->user), "%s", cfg->user ? cfg->user : "");
    snprintf(l->password, sizeof(l->password), "%s", cfg->password ? cfg->password : "");
    l->rng = (uint64_t)lock_now_us() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)l;
    if (!l->rng) l->rng = 1;
    /* The owner id in every key this handle sets: 64 bits from the kernel's random pool,
     * so that no other handle, of any process or machine, deletes our keys with its
     * redislock_release_mine (only a failing pool falls back on the seed, mixed by
     * splitmix64's finalizer). */
    uint64_t x = 0;
    if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != (ssize_t)sizeof(x)) {
        x = l->rng;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        x ^= x >> 31;
    }
    snprintf(l->owner, sizeof(l->owner), "%016llx", (unsigned long long)x);
    int up = 0;
    char first_err[sizeof(l->errstr)] = "";
    for (int i = 0; i < l->n; i++) {
        int src = srv_open(l, i);
        if (src == LOCK_OK) {
            up++;
        } else if (src == LOCK_ERR_NOMEM) {
            rc = src;
            goto fail;
        } else if (!first_err[0]) {
            snprintf(first_err, sizeof(first_err), "server %s: %.200s", l->addr[i], l->errstr);
        }
    }
    if (up < l->quorum) {
        set_err(l, "%d of %d servers reachable, %d needed; %.400s", up, l->n, l->quorum, first_err);
        rc = LOCK_ERR_CONNECTION;
        goto fail;
    }
    l->errstr[0] = '\0';
    *out = l;
    return LOCK_OK;

fail:
    if (errbuf && errcap) snprintf(errbuf, errcap, "%s", l->errstr);
    redlock_free(l);
    return rc;
}

void redlock_free(redlock *l) {
    if (!l) return;
    while (l->holds) {
        redlock_hold *h = l->holds;
        l->holds = h->next;
        free(h); /* its per-server holds go with their handles below */
    }
    for (int i = 0; i < l->n; i++)
        redislock_free(l->srv[i]);
    explicit_bzero(l->password, sizeof(l->password));
    free(l);
}

/* ---------------------------------------------------------------- the lock */

int redlock_acquire(redlock *l, const char *name, int timeout_ms, redlock_hold **out) {
    if (!out) return LOCK_ERR_ARGS;
    *out = NULL;
    if (!l || !name) return LOCK_ERR_ARGS;
    l->errstr[0] = '\0';
    if (strlen(name) > REDISLOCK_NAME_MAX) {
        set_err(l, "bad lock name (at most %d bytes)", REDISLOCK_NAME_MAX);
        return LOCK_ERR_ARGS;
    }
    for (redlock_hold *o = l->holds; o; o = o->next) {
        if (strcmp(o->name, name) == 0) {
            set_err(l, "lock %s is already held by this handle", name);
            return LOCK_ERR_ARGS;
        }
    }
    redlock_hold *h = calloc(1, sizeof(*h));
    if (!h) return LOCK_ERR_NOMEM;
    strcpy(h->name, name);
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : lock_now_us() + (int64_t)timeout_ms * 1000;
    int rc;

    for (;;) {
        if (cancelled(l)) {
            set_err(l, "lock %s: cancelled", name);
            rc = LOCK_ERR_CANCELLED;
            goto out;
        }
        l->st.rounds++;
        int64_t start = lock_now_us();
        int granted = 0, down = 0;
        int64_t token = 0;
        char why[sizeof(l->errstr)] = "";
        rc = LOCK_OK;
        for (int i = 0; i < l->n; i++) {
            int src = srv_open(l, i);
            if (src == LOCK_OK) src = code_of(redislock_acquire(l->srv[i], name, 0, &h->sub[i]));
            if (src == LOCK_OK) {
                granted++;
                int64_t t = redislock_token(h->sub[i]);
                if (t > token) token = t;
                continue;
            }
            h->sub[i] = NULL;
            if (src == LOCK_ERR_TIMEOUT) continue; /* held by another: a vote against */
            if (src == LOCK_ERR_ARGS || src == LOCK_ERR_NOMEM || src == LOCK_ERR_CANCELLED) {
                rc = src; /* the same on every server: stop the round */
                if (src == LOCK_ERR_ARGS)
                    snprintf(why, sizeof(why), "%s", redislock_errstr(l->srv[i]));
                break;
            }
            down++;
            snprintf(why, sizeof(why), "server %s: %.200s", l->addr[i],
                     l->srv[i] ? redislock_errstr(l->srv[i]) : l->errstr);
        }
        int64_t validity = (int64_t)(l->lease_ms - l->drift_ms) * 1000 - (lock_now_us() - start);
        if (rc == LOCK_OK && granted >= l->quorum && validity > 0) {
            h->l = l;
            h->thread = pthread_self();
            h->token = token;
            h->granted = granted;
            atomic_store(&h->valid_until_us, start + validity);
            h->next = l->holds;
            l->holds = h;
            *out = h;
            h = NULL;
            l->st.acquired++;
            l->errstr[0] = '\0';
            goto out;
        }
        l->st.rounds_short++;
        int kept, lost;
        release_subs(l, h, &kept, &lost);
        if (rc != LOCK_OK) {
            set_err(l, "lock %s: %s", name, rc == LOCK_ERR_CANCELLED ? "cancelled" : why);
            goto out;
        }
        if (down > l->n - l->quorum) {
            set_err(l, "lock %s: %d of %d servers unreachable or failing, %d needed; last: %.400s",
                    name, down, l->n, l->quorum, why);
            rc = LOCK_ERR_CONNECTION;
            goto out;
        }
        int64_t now = lock_now_us();
        if (now >= deadline) {
            set_err(l, "lock %s: no majority within %d ms (last round: %d of %d granted)", name,
                    timeout_ms, granted, l->n);
            l->st.timeouts++;
            rc = LOCK_ERR_TIMEOUT;
            goto out;
        }
        int64_t wait = backoff_us(l);
        if (deadline - now < wait) wait = deadline - now;
        lock_sleep_us(wait);
    }

out:
    free(h);
    return rc;
}

int redlock_check(const redlock_hold *h) {
    if (!h) return LOCK_ERR_ARGS;
    return lock_now_us() < atomic_load(&h->valid_until_us) ? LOCK_OK : LOCK_LOST;
}

int64_t redlock_token(const redlock_hold *h) {
    return h ? h->token : 0;
}

int redlock_granted(const redlock_hold *h) {
    return h ? h->granted : 0;
}

int redlock_renew(redlock *via, redlock_hold *h) {
    if (!via || !h) return LOCK_ERR_ARGS;
    via->errstr[0] = '\0';
    const redlock *owner = h->l;
    if (via->n != owner->n) return LOCK_ERR_ARGS;
    int64_t start = lock_now_us();
    int extended = 0, lost = 0;
    for (int i = 0; i < owner->n; i++) {
        if (!h->sub[i]) continue;
        if (strcmp(via->addr[i], owner->addr[i]) != 0) return LOCK_ERR_ARGS;
        int rc = srv_open(via, i);
        if (rc == LOCK_OK) rc = code_of(redislock_renew(via->srv[i], h->sub[i]));
        if (rc == LOCK_OK) {
            extended++;
        } else if (rc == LOCK_LOST) {
            lost++;
        } else {
            char detail[320];
            snprintf(detail, sizeof(detail), "%.300s",
                     via->srv[i] ? redislock_errstr(via->srv[i]) : via->errstr);
            set_err(via, "server %s: renew: %s", via->addr[i], detail);
        }
    }
    if (extended >= owner->quorum) {
        int64_t until =
            start + (int64_t)(owner->lease_ms - owner->drift_ms) * 1000 - (lock_now_us() - start);
        lock_clock_extend(&h->valid_until_us, until);
        via->st.renewals++;
        via->errstr[0] = '\0';
        return LOCK_OK;
    }
    if (lost > h->granted - owner->quorum) {
        set_err(via, "lock %s: our key is gone on %d of the %d servers that granted it", h->name,
                lost, h->granted);
        via->st.renew_lost++;
        return LOCK_LOST;
    }
    if (!via->errstr[0]) set_err(via, "lock %s: too few servers answered the renewal", h->name);
    return LOCK_ERR_CONNECTION;
}

int redlock_release(redlock_hold *h) {
    if (!h) return LOCK_ERR_ARGS;
    if (!pthread_equal(h->thread, pthread_self())) return LOCK_ERR_NOT_OWNER;
    redlock *l = h->l;
    l->errstr[0] = '\0';
    for (redlock_hold **p = &l->holds; *p; p = &(*p)->next) {
        if (*p == h) {
            *p = h->next;
            break;
        }
    }
    int kept, lost, rc = LOCK_OK;
    release_subs(l, h, &kept, &lost);
    if (kept >= l->quorum) {
        l->st.released++;
        l->errstr[0] = '\0';
    } else if (lost > 0) {
        set_err(l, "lock %s: our key was gone on %d of %d servers (still ours on %d)", h->name,
                lost, h->granted, kept);
        l->st.release_lost++;
        rc = LOCK_LOST;
    } else {
        rc = LOCK_ERR_CONNECTION;
    }
    free(h);
    return rc;
}

int redlock_ping(redlock *l) {
    if (!l) return LOCK_ERR_ARGS;
    l->errstr[0] = '\0';
    int up = 0;
    char why[sizeof(l->errstr)] = "";
    for (int i = 0; i < l->n; i++) {
        int rc = srv_open(l, i);
        if (rc == LOCK_OK) rc = code_of(redislock_ping(l->srv[i]));
        if (rc == LOCK_OK) {
            up++;
        } else {
            snprintf(why, sizeof(why), "server %s: %.200s", l->addr[i],
                     l->srv[i] ? redislock_errstr(l->srv[i]) : l->errstr);
        }
    }
    if (up >= l->quorum) {
        l->errstr[0] = '\0';
        return LOCK_OK;
    }
    set_err(l, "%d of %d servers answer, %d needed; %.400s", up, l->n, l->quorum, why);
    return LOCK_ERR_CONNECTION;
}

void redlock_get_stats(const redlock *l, redlock_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof(*out));
    if (!l) return;
    *out = l->st;
    for (int i = 0; i < l->n; i++) {
        redislock_stats s;
        redislock_get_stats(l->srv[i], &s);
        out->ops += s.ops;
    }
}

const char *redlock_errstr(const redlock *l) {
    return l ? l->errstr : "";
}

const char *redlock_strerror(int code) {
    switch (code) {
    case LOCK_ERR_TIMEOUT:
        return "no majority acquired in time";
    case LOCK_ERR_CONNECTION:
        return "fewer than a majority of the Redis servers reachable";
    case LOCK_ERR_SERVER:
        return "unexpected Redis error";
    case LOCK_LOST:
        return "lock lost (validity passed, or the keys are gone on a majority)";
    default:
        return lock_strerror(code);
    }
}

/* ---------------------------------------------------------------- the kind */

/* The registry's row (lock.h): a lease kind, one handle (N connections) per worker.
 * cfg->addr is the comma list of servers (--redis in mode redlock). */

static int redlock__lease_open(const lock_config *cfg, const atomic_int *cancel, void **handle,
                               char *err, size_t errcap) {
    redlock_config c = {.addrs = cfg->addr,
                        .lease_ms = cfg->lease_ms,
                        .cancel = cancel,
                        .user = cfg->user,
                        .password = cfg->password};
    redlock *r = NULL;
    int rc = redlock_new(&c, &r, err, errcap);
    *handle = r;
    return rc;
}

static uint64_t redlock__lease_ops(const void *handle) {
    redlock_stats st;
    redlock_get_stats(handle, &st);
    return st.ops;
}

LOCK_LEASE_PING_SHIM(redlock)
LOCK_LEASE_OPS(redlock, redlock__lease_ping, NULL)

const lock_kind redlock_kind = LOCK_LEASE_KIND(
    "redlock", "redis", LOCK_FENCE_REDLOCK,
    "fewer than a majority of the RedLock servers are reachable; nothing was deducted",
    &redlock__lease);
