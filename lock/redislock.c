/* redislock.c: a lease lock on one Redis server (hiredis), with a fencing token.
 *
 * The recipe article 001 describes and Redisson made common, on a single Redis:
 *   - one lock = one key, <prefix><name> (prefix "lock:" by default). Acquiring is one
 *     Lua script, so it is atomic on the server: if the key is free, INCR the fencing
 *     counter <prefix>#fence and SET <prefix><name> <token> NX PX <lease>; the token is
 *     the reply. If the key is held, the script answers its remaining lease (PTTL);
 *   - a waiter does not spin: it SUBSCRIBEs to <prefix>#released:<name>, tries once
 *     more (a release between its try and its subscription would otherwise be missed),
 *     then sleeps until a release message, the end of the holder's lease (the server
 *     publishes nothing when a lease runs out), the fallback poll interval or its
 *     deadline, whichever comes first, and tries again. Every release wakes every
 *     subscribed waiter (as in Redisson); one of them wins;
 *   - release is a second script, a compare-and-delete: the key is deleted only if it
 *     still holds our token, and then the release is PUBLISHed. So a holder whose lease
 *     ran out can never delete its successor's key;
 *   - the token is the counter after INCR, raised first to the server's clock in
 *     microseconds if it is below it (Redis TIME, inside the script). The counter lives
 *     in memory only (the server runs without persistence), so without that floor a
 *     restarted Redis would start again from 1 and every later write would be refused
 *     by the database's fence. With it, tokens grow across restarts as long as the
 *     server's clock does not step back by more than the time since the last token.
 *
 * What a lease lock cannot promise: a holder that is paused (GC, swap, SIGSTOP) past its
 * lease still believes it holds the lock when it wakes, while another process holds it.
 * redislock_check() reads the local clock, so it says LOST once the lease (minus a safety
 * margin) has passed since the acquire was sent, but a pause between that check and the
 * write is invisible to it: only the fencing token, checked by the database in the
 * write itself, refuses the late write. A lost acquire reply (the connection broke
 * after the script ran) leaves the name blocked for at most one lease.
 *
 * RedLock (a majority of independent Redis servers) is redlock.c, over one handle of this
 * library per server.
 *
 * Locks are not reentrant, and the calls have the contracts and thread rules of a lease
 * library (lease_pool_int.h); redislock_int.h declares them. The file ends with the
 * registry's row, redislock_kind (lock.h).
 *
 * A handle has two hiredis contexts. `cmd` runs the two scripts with EVALSHA (loaded
 * once per connection with SCRIPT LOAD; a NOSCRIPT answer loads them again). `sub` is
 * made only when an acquisition first has to wait; it stays in subscriber mode for the
 * handle's life and is read without blocking (poll() on its socket, then hiredis's
 * reader), so a wait can end on a message, a lease end, the poll interval or the
 * deadline. Any error on a context drops it; the next call connects again. */
#include "redislock_int.h"
#include "lease_pool_int.h"
#include "lock.h"
#include "lock_clock.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "redisconn.h"

/* KEYS[1] the lock, KEYS[2] the fencing counter; ARGV[1] the lease in ms, ARGV[2] what
 * follows the token in the key ("" or ".<owner>"). Answers the
 * token (> 0) when acquired, else minus the remaining lease in ms (0 if the key has no
 * expiry, which only a foreign writer could cause). Numbers are written with
 * string.format('%d') because Redis would turn a Lua number above 1e14 into a float
 * text. */
static const char acquire_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then\n"
    "  local ttl = redis.call('PTTL', KEYS[1])\n"
    "  if ttl > 0 then return -ttl end\n"
    "  return 0\n"
    "end\n"
    "local t = redis.call('TIME')\n"
    "local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "local n = redis.call('INCR', KEYS[2])\n"
    "if n < floor then\n"
    "  n = floor\n"
    "  redis.call('SET', KEYS[2], string.format('%d', n))\n"
    "end\n"
    "redis.call('SET', KEYS[1], string.format('%d', n) .. ARGV[2], 'NX', 'PX', ARGV[1])\n"
    "return n\n";

/* KEYS[1] the lock; ARGV[1] our token, ARGV[2] the release channel. 1 if it was ours
 * and is now deleted, 0 if it was not ours (expired, or another holder's). */
static const char release_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                  "  redis.call('DEL', KEYS[1])\n"
                                  "  redis.call('PUBLISH', ARGV[2], ARGV[1])\n"
                                  "  return 1\n"
                                  "end\n"
                                  "return 0\n";

/* KEYS[1] the lock; ARGV[1] our token, ARGV[2] the lease in ms. The watchdog's
 * compare-and-extend: 1 if the key still holds our token and its expiry is now a full
 * lease from the server's now, 0 if it was not ours (expired, or another holder's), in
 * which case nothing is touched. Loaded only on a handle that renews, so the others send
 * the same commands as before the watchdog existed. Keep it last. */
static const char renew_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                                "end\n"
                                "return 0\n";

/* KEYS[1] the lock; ARGV[1] ".<owner>", ARGV[2] the release channel. 1 if the key ends
 * with our owner (a token of ours, whichever) and is now deleted, else 0. Loaded only on
 * a handle with an owner. */
static const char release_mine_lua[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if v and #v > #ARGV[1] and string.sub(v, -#ARGV[1]) == ARGV[1] then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  redis.call('PUBLISH', ARGV[2], v)\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

enum { SCRIPT_ACQUIRE, SCRIPT_RELEASE, SCRIPT_RENEW, SCRIPT_RELEASE_MINE, SCRIPT_COUNT };
static const char *const script_text[SCRIPT_COUNT] = {acquire_lua, release_lua, renew_lua,
                                                      release_mine_lua};

#define KEY_MAX (32 + 10 + REDISLOCK_NAME_MAX + 1) /* prefix + "#released:" + name */

struct redislock_hold {
    redislock *l;
    redislock_hold *next;
    pthread_t thread;
    int64_t token;
    /* Monotonic: sent + lease - margin, of the acquire or of the latest renewal that
     * succeeded. Atomic because a renewer thread moves it forward (redislock_renew)
     * while the holder's thread reads it (redislock_check). */
    atomic_llong valid_until_us;
    char name[REDISLOCK_NAME_MAX + 1];
    char value[64]; /* what the key holds: the token, and ".<owner>" with an owner */
};

struct redislock {
    char host[256];
    int port;
    char prefix[33];
    char user[129], password[513]; /* "" = none */
    char owner[34];                /* ".<owner>" or "" */
    int lease_ms, margin_ms, poll_ms, connect_timeout_ms, io_timeout_ms;
    redisContext *cmd, *sub;
    char sha[SCRIPT_COUNT][41];
    redislock_hold *holds;
    const atomic_int *cancel; /* the config's; may be NULL */
    bool renews;              /* has renewed: load the renewal script too */
    redislock_stats st;
    char errstr[256];
};

/* ---------------------------------------------------------------- helpers */

static void set_err(redislock *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_err(redislock *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->errstr, sizeof(l->errstr), fmt, ap);
    va_end(ap);
}

static bool name_valid(const char *name) {
    return lock__lease_name_valid(name, REDISLOCK_NAME_MAX);
}

/* ---------------------------------------------------------------- connections */

static void drop(redisContext **c) {
    if (*c) redisFree(*c);
    *c = NULL;
}

/* A new context with the handle's timeouts, authenticated (db/redisconn.h): LOCK_OK
 * and *out, or a code (the reason in errstr) and *out NULL. A refused password is a
 * connection failure here, as every lock call documents. */
static int rl_dial(redislock *l, const char *what, redisContext **out) {
    redisconn_config rc = {.host = l->host,
                           .port = l->port,
                           .user = l->user,
                           .password = l->password,
                           .connect_timeout_ms = l->connect_timeout_ms,
                           .io_timeout_ms = l->io_timeout_ms};
    int code = redisconn_dial(&rc, what, out, l->errstr, sizeof(l->errstr));
    if (l->password[0] && (code == REDISCONN_OK || code == REDISCONN_ERR_AUTH))
        l->st.ops++; /* the AUTH */
    return code == REDISCONN_OK          ? LOCK_OK
           : code == REDISCONN_ERR_NOMEM ? LOCK_ERR_NOMEM
                                         : LOCK_ERR_CONNECTION;
}

/* An error answer that means "authenticate first": the server has a password (or the
 * default user is off) and we sent none, or our user lost a permission it needs. */
static int rl_error_code(const char *err) {
    return redisconn_auth_error(err) ? LOCK_ERR_CONNECTION : LOCK_ERR_SERVER;
}

/* Loads the scripts this handle uses on the command connection (their SHA1s do not
 * change, but a restarted or flushed server has forgotten them): acquire and release, the
 * renewal once it renews, release_mine with an owner. */
static int rl_load_scripts(redislock *l) {
    for (int i = 0; i < SCRIPT_COUNT; i++) {
        if ((i == SCRIPT_RENEW && !l->renews) || (i == SCRIPT_RELEASE_MINE && !l->owner[0]))
            continue;
        int rc =
            redisconn_script_load(l->cmd, script_text[i], l->sha[i], l->errstr, sizeof(l->errstr));
        l->st.ops++;
        if (rc == REDISCONN_ERR_CONNECTION) {
            drop(&l->cmd);
            return LOCK_ERR_CONNECTION;
        }
        if (rc != REDISCONN_OK)
            return rc == REDISCONN_ERR_AUTH ? LOCK_ERR_CONNECTION : LOCK_ERR_SERVER;
    }
    return LOCK_OK;
}

static int rl_connect_cmd(redislock *l) {
    if (l->cmd) return LOCK_OK;
    int rc = rl_dial(l, "command", &l->cmd);
    if (rc != LOCK_OK) return rc;
    l->st.reconnects++;
    rc = rl_load_scripts(l);
    /* A connection that cannot run our scripts is of no use: the next call dials again,
     * so a password fixed on the server side is picked up. */
    if (rc != LOCK_OK) drop(&l->cmd);
    return rc;
}

/* Runs script `which` with nkeys keys followed by the other args; on LOCK_OK
 * *result is its integer answer. A broken connection is made again and the call sent
 * once more: every script is safe to repeat (a repeated acquire finds the key held;
 * a repeated release finds it gone; a repeated renewal extends from a later now). */
static int rl_eval(redislock *l, int which, int nargs, const char **args, long long *result) {
    const char *argv[8];
    size_t argl[8];
    argv[0] = "EVALSHA";
    argv[2] = "2";
    for (int i = 0; i < nargs; i++)
        argv[3 + i] = args[i];
    if (which != SCRIPT_ACQUIRE) argv[2] = "1";
    for (int attempt = 0; attempt < 3; attempt++) {
        int rc = rl_connect_cmd(l);
        if (rc != LOCK_OK) return rc;
        if (!l->sha[which][0] && (rc = rl_load_scripts(l)) != LOCK_OK) return rc;
        argv[1] = l->sha[which];
        for (int i = 0; i < 3 + nargs; i++)
            argl[i] = strlen(argv[i]);
        redisReply *r = redisCommandArgv(l->cmd, 3 + nargs, argv, argl);
        l->st.ops++;
        if (!r) {
            set_err(l, "EVALSHA: %s", l->cmd->errstr);
            drop(&l->cmd);
            if (attempt == 0) continue;
            return LOCK_ERR_CONNECTION;
        }
        if (r->type == REDIS_REPLY_INTEGER) {
            *result = r->integer;
            freeReplyObject(r);
            return LOCK_OK;
        }
        bool noscript = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
        int code = r->type == REDIS_REPLY_ERROR ? rl_error_code(r->str) : LOCK_ERR_SERVER;
        set_err(l, "EVALSHA: unexpected answer: %s",
                r->type == REDIS_REPLY_ERROR ? r->str : "(not an integer)");
        freeReplyObject(r);
        if (!noscript) return code;
        if ((rc = rl_load_scripts(l)) != LOCK_OK) return rc;
    }
    return LOCK_ERR_SERVER;
}

/* Writes everything appended to the subscriber context. */
static int rl_sub_flush(redislock *l) {
    int done = 0;
    do {
        if (redisBufferWrite(l->sub, &done) != REDIS_OK) {
            set_err(l, "pub/sub connection: %s", l->sub->errstr);
            drop(&l->sub);
            return LOCK_ERR_CONNECTION;
        }
    } while (!done);
    return LOCK_OK;
}

/* The next reply on the subscriber connection within timeout_us: 1 and *out set, 0 if
 * none came in time, or LOCK_ERR_CONNECTION (the context is dropped). */
static int rl_sub_next(redislock *l, int64_t timeout_us, redisReply **out) {
    int64_t end = lock_now_us() + timeout_us;
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(l->sub->reader, &reply) != REDIS_OK) {
            set_err(l, "pub/sub connection: protocol error");
            drop(&l->sub);
            return LOCK_ERR_CONNECTION;
        }
        if (reply) {
            *out = reply;
            return 1;
        }
        int64_t left = end - lock_now_us();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = l->sub->fd, .events = POLLIN};
        int n = poll(&p, 1, (int)((left + 999) / 1000));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            set_err(l, "pub/sub connection: poll: %s", strerror(errno));
            drop(&l->sub);
            return LOCK_ERR_CONNECTION;
        }
        if (n == 0) continue; /* the loop ends on the deadline above */
        if (redisBufferRead(l->sub) != REDIS_OK) {
            set_err(l, "pub/sub connection: %s", l->sub->errstr);
            drop(&l->sub);
            return LOCK_ERR_CONNECTION;
        }
    }
}

/* Is r a pub/sub push of the given kind ("message", "subscribe") on channel? */
static bool is_push(const redisReply *r, const char *kind, const char *channel) {
    return r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
           r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, kind) == 0 &&
           r->element[1]->type == REDIS_REPLY_STRING && strcmp(r->element[1]->str, channel) == 0;
}

/* Subscribes to channel and returns once the server confirms it, so that a release
 * published after our next try cannot be missed. Pushes for other channels (left over
 * from earlier waits) are dropped on the way. */
static int rl_subscribe(redislock *l, const char *channel) {
    if (!l->sub) {
        int rc = rl_dial(l, "pub/sub", &l->sub);
        if (rc != LOCK_OK) return rc;
    }
    if (redisAppendCommand(l->sub, "SUBSCRIBE %s", channel) != REDIS_OK) {
        drop(&l->sub);
        return LOCK_ERR_NOMEM;
    }
    l->st.ops++;
    int rc = rl_sub_flush(l);
    if (rc != LOCK_OK) return rc;
    for (;;) {
        redisReply *r = NULL;
        rc = rl_sub_next(l, (int64_t)l->io_timeout_ms * 1000, &r);
        if (rc < 0) return rc;
        if (rc == 0) {
            set_err(l, "pub/sub connection: no SUBSCRIBE confirmation in %d ms", l->io_timeout_ms);
            drop(&l->sub);
            return LOCK_ERR_CONNECTION;
        }
        bool confirmed = is_push(r, "subscribe", channel);
        freeReplyObject(r);
        if (confirmed) return LOCK_OK;
    }
}

/* Sends UNSUBSCRIBE without waiting for its confirmation: rl_subscribe and rl_wait
 * skip whatever arrives for channels we no longer wait on. */
static void rl_unsubscribe(redislock *l, const char *channel) {
    if (!l->sub) return;
    if (redisAppendCommand(l->sub, "UNSUBSCRIBE %s", channel) != REDIS_OK) {
        drop(&l->sub);
        return;
    }
    l->st.ops++;
    (void)rl_sub_flush(l);
}

/* Waits up to timeout_us for a release message on channel. Returns 1 on a message, 0
 * when the time is up, LOCK_ERR_CONNECTION if the subscriber connection broke. */
static int rl_wait(redislock *l, const char *channel, int64_t timeout_us) {
    int64_t end = lock_now_us() + timeout_us;
    for (;;) {
        redisReply *r = NULL;
        int rc = rl_sub_next(l, end - lock_now_us(), &r);
        if (rc <= 0) return rc;
        bool ours = is_push(r, "message", channel);
        freeReplyObject(r);
        if (ours) return 1;
    }
}

/* ---------------------------------------------------------------- handle */

int redislock_new(const redislock_config *cfg, redislock **out, char *errbuf, size_t errcap) {
    if (errbuf && errcap) errbuf[0] = '\0';
    if (!out) return LOCK_ERR_ARGS;
    *out = NULL;
    if (!cfg) return LOCK_ERR_ARGS;
    redislock *l = calloc(1, sizeof(*l));
    if (!l) return LOCK_ERR_NOMEM;
    int rc = LOCK_ERR_ARGS;
    const char *prefix = cfg->prefix ? cfg->prefix : "lock:";
    l->lease_ms = cfg->lease_ms ? cfg->lease_ms : 10000;
    l->margin_ms = cfg->safety_margin_ms ? cfg->safety_margin_ms : l->lease_ms / 10 + 2;
    l->poll_ms = cfg->poll_ms ? cfg->poll_ms : 100;
    l->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 2000;
    l->io_timeout_ms = cfg->io_timeout_ms ? cfg->io_timeout_ms : 2000;
    l->cancel = cfg->cancel;
    if (lock_parse_hostport(cfg->addr, l->host, sizeof(l->host), &l->port) != LOCK_OK) {
        set_err(l, "bad Redis address \"%s\" (want HOST:PORT)", cfg->addr ? cfg->addr : "");
        goto fail;
    }
    if (strlen(prefix) >= sizeof(l->prefix) || l->lease_ms < 1 || cfg->safety_margin_ms < 0 ||
        l->margin_ms >= l->lease_ms || l->poll_ms < 1 || l->connect_timeout_ms < 1 ||
        l->io_timeout_ms < 1) {
        set_err(l, "bad configuration: want a prefix of at most 32 bytes, lease_ms >= 1 above "
                   "the safety margin, and positive timeouts");
        goto fail;
    }
    strcpy(l->prefix, prefix);
    if ((cfg->user && strlen(cfg->user) >= sizeof(l->user)) ||
        (cfg->password && strlen(cfg->password) >= sizeof(l->password))) {
        set_err(l, "bad configuration: the Redis user or password is too long");
        rc = LOCK_ERR_ARGS;
        goto fail;
    }
    snprintf(l->user, sizeof(l->user), "%s", cfg->user ? cfg->user : "");
    snprintf(l->password, sizeof(l->password), "%s", cfg->password ? cfg->password : "");
    if (cfg->owner && cfg->owner[0]) {
        size_t n = strlen(cfg->owner);
        bool ok = n <= 32;
        for (const char *p = cfg->owner; ok && *p; p++)
            ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                 *p == '_' || *p == '-';
        if (!ok) {
            set_err(l, "bad configuration: the owner is 1..32 bytes of [A-Za-z0-9_-]");
            rc = LOCK_ERR_ARGS;
            goto fail;
        }
        snprintf(l->owner, sizeof(l->owner), ".%s", cfg->owner);
    }
    if ((rc = rl_connect_cmd(l)) != LOCK_OK) goto fail;
    l->st.reconnects = 0; /* the first connection is not a reconnect */
    *out = l;
    return LOCK_OK;

fail:
    if (errbuf && errcap) snprintf(errbuf, errcap, "%s", l->errstr);
    redislock_free(l);
    return rc;
}

void redislock_free(redislock *l) {
    if (!l) return;
    while (l->holds) {
        redislock_hold *h = l->holds;
        l->holds = h->next;
        free(h);
    }
    drop(&l->cmd);
    drop(&l->sub);
    /* The password does not outlive the handle in freed memory. */
    explicit_bzero(l->password, sizeof(l->password));
    free(l);
}

/* ---------------------------------------------------------------- the lock */

int redislock_acquire(redislock *l, const char *name, int timeout_ms, redislock_hold **out) {
    if (!out) return LOCK_ERR_ARGS;
    *out = NULL;
    if (!l || !name) return LOCK_ERR_ARGS;
    l->errstr[0] = '\0';
    if (!name_valid(name)) {
        set_err(l, "bad lock name (want 1..%d bytes of [A-Za-z0-9_.-])", REDISLOCK_NAME_MAX);
        return LOCK_ERR_ARGS;
    }
    for (redislock_hold *h = l->holds; h; h = h->next) {
        if (strcmp(h->name, name) == 0) {
            set_err(l, "lock %s is already held by this handle", name);
            return LOCK_ERR_ARGS;
        }
    }
    redislock_hold *h = calloc(1, sizeof(*h));
    if (!h) return LOCK_ERR_NOMEM;
    char key[KEY_MAX], counter[KEY_MAX], channel[KEY_MAX], lease[16];
    snprintf(key, sizeof(key), "%s%s", l->prefix, name);
    snprintf(counter, sizeof(counter), "%s#fence", l->prefix);
    snprintf(channel, sizeof(channel), "%s#released:%s", l->prefix, name);
    snprintf(lease, sizeof(lease), "%d", l->lease_ms);
    const char *args[4] = {key, counter, lease, l->owner};
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : lock_now_us() + (int64_t)timeout_ms * 1000;
    bool sub_tried = false, subscribed = false;
    int rc;

    for (;;) {
        /* Checked before every try, so a wait ends at most one sleep (poll_ms) after
         * the flag is set, and an acquire after it never takes the lock. */
        if (l->cancel && atomic_load(l->cancel)) {
            set_err(l, "lock %s: cancelled", name);
            rc = LOCK_ERR_CANCELLED;
            goto out;
        }
        int64_t sent = lock_now_us();
        long long r = 0;
        if ((rc = rl_eval(l, SCRIPT_ACQUIRE, 4, args, &r)) != LOCK_OK) goto out;
        if (r > 0) {
            h->l = l;
            h->thread = pthread_self();
            h->token = r;
            atomic_store(&h->valid_until_us, sent + (int64_t)(l->lease_ms - l->margin_ms) * 1000);
            strcpy(h->name, name);
            snprintf(h->value, sizeof(h->value), "%lld%s", r, l->owner);
            h->next = l->holds;
            l->holds = h;
            *out = h;
            h = NULL;
            l->st.acquired++;
            rc = LOCK_OK;
            goto out;
        }
        int64_t now = lock_now_us();
        if (now >= deadline) {
            set_err(l, "lock %s: not acquired within %d ms", name, timeout_ms);
            l->st.timeouts++;
            rc = LOCK_ERR_TIMEOUT;
            goto out;
        }
        if (!sub_tried) {
            /* Subscribe, then try again at once: a release between the try above and
             * the subscription would otherwise be missed until the next poll. */
            sub_tried = true;
            subscribed = rl_subscribe(l, channel) == LOCK_OK;
            continue;
        }
        /* Sleep until a release, the end of the holder's lease (expiry publishes
         * nothing; +1 ms because the server expires a key only after its last
         * millisecond), the poll interval or our deadline. */
        int64_t wait = (int64_t)l->poll_ms * 1000;
        if (r < 0 && -r * 1000 + 1000 < wait) wait = -r * 1000 + 1000;
        if (deadline - now < wait) wait = deadline - now;
        int w = subscribed ? rl_wait(l, channel, wait) : 0;
        if (w < 0) {
            subscribed = false; /* the subscriber connection broke: poll from now on */
            w = 0;
        }
        if (!subscribed)
            lock_sleep_us(deadline - lock_now_us() < wait ? deadline - lock_now_us() : wait);
        if (w > 0) {
            l->st.wakeups++;
        } else {
            l->st.polls++;
        }
    }

out:
    if (subscribed) rl_unsubscribe(l, channel);
    free(h);
    return rc;
}

int redislock_check(const redislock_hold *h) {
    if (!h) return LOCK_ERR_ARGS;
    return lock_now_us() < atomic_load(&h->valid_until_us) ? LOCK_OK : LOCK_LOST;
}

int redislock_renew(redislock *via, redislock_hold *h) {
    if (!via || !h) return LOCK_ERR_ARGS;
    via->errstr[0] = '\0';
    /* The hold's name, value, prefix and lease were fixed when it was acquired and are
     * only read here; the holder's thread writes nothing of it while it is held. */
    const redislock *owner = h->l;
    char key[KEY_MAX], lease[16];
    snprintf(key, sizeof(key), "%s%s", owner->prefix, h->name);
    snprintf(lease, sizeof(lease), "%d", owner->lease_ms);
    const char *args[3] = {key, h->value, lease};
    via->renews = true;
    int64_t sent = lock_now_us();
    long long r = 0;
    int rc = rl_eval(via, SCRIPT_RENEW, 3, args, &r);
    if (rc != LOCK_OK) return rc;
    if (r != 1) {
        set_err(via, "lock %s: the key no longer holds token %s", h->name, h->value);
        via->st.renew_lost++;
        return LOCK_LOST;
    }
    /* The server's expiry is now at least a lease after `sent`. */
    lock_clock_extend(&h->valid_until_us,
                      sent + (int64_t)(owner->lease_ms - owner->margin_ms) * 1000);
    via->st.renewals++;
    return LOCK_OK;
}

int64_t redislock_token(const redislock_hold *h) {
    return h ? h->token : 0;
}

int redislock_release(redislock_hold *h) {
    if (!h) return LOCK_ERR_ARGS;
    if (!pthread_equal(h->thread, pthread_self())) return LOCK_ERR_NOT_OWNER;
    redislock *l = h->l;
    l->errstr[0] = '\0';
    for (redislock_hold **p = &l->holds; *p; p = &(*p)->next) {
        if (*p == h) {
            *p = h->next;
            break;
        }
    }
    char key[KEY_MAX], channel[KEY_MAX];
    snprintf(key, sizeof(key), "%s%s", l->prefix, h->name);
    snprintf(channel, sizeof(channel), "%s#released:%s", l->prefix, h->name);
    const char *args[3] = {key, h->value, channel};
    long long r = 0;
    int rc = rl_eval(l, SCRIPT_RELEASE, 3, args, &r);
    if (rc == LOCK_OK && r != 1) {
        set_err(l, "lock %s: the key no longer holds token %s", h->name, h->value);
        l->st.release_lost++;
        rc = LOCK_LOST;
    } else if (rc == LOCK_OK) {
        l->st.released++;
    }
    free(h);
    return rc;
}

int redislock_release_mine(redislock *l, const char *name) {
    if (!l || !name) return LOCK_ERR_ARGS;
    l->errstr[0] = '\0';
    if (!l->owner[0] || !name_valid(name)) {
        set_err(l, "release_mine: %s", l->owner[0] ? "bad lock name" : "no owner configured");
        return LOCK_ERR_ARGS;
    }
    char key[KEY_MAX], channel[KEY_MAX];
    snprintf(key, sizeof(key), "%s%s", l->prefix, name);
    snprintf(channel, sizeof(channel), "%s#released:%s", l->prefix, name);
    const char *args[3] = {key, l->owner, channel};
    long long r = 0;
    int rc = rl_eval(l, SCRIPT_RELEASE_MINE, 3, args, &r);
    if (rc == LOCK_OK && r == 1) l->st.released_mine++;
    return rc;
}

int redislock_ping(redislock *l) {
    if (!l) return LOCK_ERR_ARGS;
    l->errstr[0] = '\0';
    for (int attempt = 0; attempt < 2; attempt++) {
        int rc = rl_connect_cmd(l);
        if (rc != LOCK_OK) return rc;
        redisReply *r = redisCommand(l->cmd, "PING");
        l->st.ops++;
        if (r) {
            bool pong = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
            int code = r->type == REDIS_REPLY_ERROR ? rl_error_code(r->str) : LOCK_ERR_SERVER;
            set_err(l, "PING: unexpected answer: %s",
                    r->type == REDIS_REPLY_ERROR ? r->str : "(not PONG)");
            freeReplyObject(r);
            if (pong) {
                l->errstr[0] = '\0';
                return LOCK_OK;
            }
            return code;
        }
        set_err(l, "PING: %s", l->cmd->errstr);
        drop(&l->cmd);
    }
    return LOCK_ERR_CONNECTION;
}

/* The Redis lease lock's part of lock_view_read (lock.h). Redis keeps one key per lock,
 * holding the holder's fencing token and expiring with its lease, and no queue: waiters
 * poll and listen for the release on their own. So a view is that key, its token and
 * the lease left, or nothing when the lock is free. The key holds the token, and
 * ".<owner>" after it when the holder has one. */
int redislock_view(redislock *l, const char *name, lock_view *out) {
    if (!l || !name_valid(name)) return LOCK_ERR_ARGS;
    l->errstr[0] = '\0';
    const char *key = out->path;
    snprintf(out->path, sizeof(out->path), "%s%s", l->prefix, name);
    int rc = rl_connect_cmd(l);
    if (rc != LOCK_OK) return rc;
    /* GET and PTTL pipelined: one round trip, and two replies to read. */
    redisReply *get = NULL, *ttl = NULL;
    if (redisAppendCommand(l->cmd, "GET %s", key) != REDIS_OK ||
        redisAppendCommand(l->cmd, "PTTL %s", key) != REDIS_OK ||
        redisGetReply(l->cmd, (void **)&get) != REDIS_OK ||
        redisGetReply(l->cmd, (void **)&ttl) != REDIS_OK) {
        set_err(l, "GET/PTTL: %s", l->cmd->errstr);
        drop(&l->cmd);
        rc = LOCK_ERR_CONNECTION;
        goto out;
    }
    l->st.ops += 2;
    long long token = 0, pttl = -1;
    char owner[sizeof(out->e[0].owner)] = "";
    if (get->type == REDIS_REPLY_STRING) {
        char *end;
        token = strtoll(get->str, &end, 10);
        if (*end == '.') snprintf(owner, sizeof(owner), "%s", end + 1);
    }
    if (ttl->type == REDIS_REPLY_INTEGER && token) pttl = ttl->integer;
    lock__lease_view_holder(out, name, token, pttl, owner[0] ? owner : NULL);
out:
    freeReplyObject(get);
    freeReplyObject(ttl);
    return rc;
}

void redislock_get_stats(const redislock *l, redislock_stats *out) {
    if (!out) return;
    if (!l) {
        memset(out, 0, sizeof(*out));
        return;
    }
    *out = l->st;
}

const char *redislock_errstr(const redislock *l) {
    return l ? l->errstr : "";
}

const char *redislock_strerror(int code) {
    return lock__lease_strerror(code, "no connection to Redis, or Redis refused the credentials",
                                "unexpected Redis error");
}

/* ---------------------------------------------------------------- the kind */

/* The registry's row (lock.h): a lease kind, pooled by lease_pool.c, one handle per
 * worker. */

static int redislock__lease_open(const lock_config *cfg, const atomic_int *cancel, void **handle,
                                 char *err, size_t errcap) {
    redislock_config c = {.addr = cfg->addr,
                          .lease_ms = cfg->lease_ms,
                          .connect_timeout_ms = lock__lease_connect_ms(cfg),
                          .cancel = cancel,
                          .user = cfg->user,
                          .password = cfg->password,
                          /* The key names its holder, for a view (lock_view's owner and
                           * ours), when the owner fits the key's 32 bytes. */
                          .owner = cfg->owner && strlen(cfg->owner) <= 32 ? cfg->owner : NULL};
    redislock *r = NULL;
    int rc = redislock_new(&c, &r, err, errcap);
    *handle = r;
    return rc;
}

static uint64_t redislock__lease_ops(const void *handle) {
    return ((const redislock *)handle)->st.ops;
}

LOCK_LEASE_PING_SHIM(redislock)
LOCK_LEASE_VIEW_SHIM(redislock)
LOCK_LEASE_OPS(redislock, redislock__lease_ping, redislock__lease_view)

const lock_kind redislock_kind =
    LOCK_LEASE_KIND("redis", "redis", LOCK_FENCE_REDIS,
                    "Redis is unavailable; nothing was deducted", &redislock__lease);
