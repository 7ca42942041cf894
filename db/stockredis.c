/* stockredis.c: mode redis-stock's count, answer memo and order stream in Redis
 * (stockredis.h). One connection per handle, made at the first call and again after an
 * error; the script runs with EVALSHA, loaded with SCRIPT LOAD once per connection (a
 * NOSCRIPT answer loads it again: the script did not run). */
#include "stockredis.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostport.h"

/* The deduction script. Its layout (docs/strategies.md, "Redis as the stock of record"):
 *
 *   KEYS[1]  stockd:stock:{<id>}  the count
 *   KEYS[2]  stockd:key:<key>     the request key's memo
 *   KEYS[3]  stockd:orders        the stream
 *   ARGV[1]  the product id       ARGV[2]  the request key
 *   ARGV[3]  the instance         ARGV[4]  the stock of record to load, or "" (load nothing)
 *   ARGV[5]  the memo's life in seconds (> 0): the key's idempotency window
 *   KEYS[4]  stockd:restocked:{<id>}  the units restocks added here (stockredis_restock)
 *   ARGV[6]  the restocks' units in MariaDB when ARGV[4] was read (with ARGV[4] only)
 *   KEYS[5]  stockd:limit:{<id>}  the product's per_user_limit (absent: no limit)
 *   KEYS[6]  stockd:users:{<id>}  a hash: each customer's units sold by this count
 *   ARGV[7]  per_user_limit read with ARGV[4], or "" (none, or no load)
 *   ARGV[8]  the customer, or "" (anonymous: no limit applies)
 *   KEYS[7]  stockd:reserve:{<id>}  the product's reserve_seconds (absent: sells at once)
 *   KEYS[8]  stockd:order:<key>   the reservation's record (a hash: product, user, state,
 *                                 expires_us), made when the product reserves
 *   KEYS[9]  stockd:expiry        the reservations by expiry (a sorted set: key, expires_us)
 *   ARGV[9]  reserve_seconds read with ARGV[4], or "" (none, or no load)
 *
 * A product that reserves (docs/orders.md) makes a reserved order: its record, its place
 * in the expiry index, and a stream entry with state reserved and expires_us, so that the
 * writer writes the order reserved; its memo lives reserve_seconds longer than the window,
 * so that the key is not taken for a new deduction while its reservation stands. The
 * answer then carries expires_us as a third element (on a replay too).
 *
 * The limit and the customers' units live and die with the count: a load (the count
 * absent) sets the limit read from MariaDB with the stock and empties the hash, in the
 * write step, so a reset of the product (which deletes the count) starts both afresh. A
 * customer at the limit is refused with {5, count} (LIMIT_REACHED) after the count's
 * checks and before the writes: the customer's check and increment are one atomic step
 * with the decrement, so three instances cannot each sell the last unit of a customer.
 *
 * It answers {outcome, count}, the outcomes of stockredis_outcome, in three steps: the
 * memo (a key seen within its window answers as it did, or is refused for another
 * product), the count (loaded if absent; sold out at 0), then the writes (the
 * decrement, the memo with its expiry and the stream entry, in one atomic step, so no
 * order is lost between them and none is appended twice). A later step that needs
 * more checks (a customer's count, a reservation) goes between the count and the
 * writes: every refusal comes before the first write, so a refusal writes nothing.
 *
 * The shebang line (no flags) makes Redis refuse the whole script, before it runs,
 * when it is over maxmemory (OOM), loading or a read-only replica, instead of failing
 * at its first write: so such a refusal means "nothing was done". at_us is TIME's
 * seconds and microseconds written side by side (exact, no float). */
static const char deduct_lua[] =
    "#!lua\n"
    "-- 1. the memo\n"
    "local memo = redis.call('GET', KEYS[2])\n"
    "if memo then\n"
    "  if memo ~= ARGV[1] then return {3, 0} end\n"
    "  local c = tonumber(redis.call('GET', KEYS[1]) or '0') or 0\n"
    "  local x = redis.call('HGET', KEYS[8], 'expires_us')\n"
    "  if x then return {2, c, x} end\n"
    "  return {2, c}\n"
    "end\n"
    "-- 2. the count, and the limit per customer and the reservation loaded with it\n"
    "local n = redis.call('GET', KEYS[1])\n"
    "local loading = false\n"
    "local limit = redis.call('GET', KEYS[5])\n"
    "local reserve = redis.call('GET', KEYS[7])\n"
    "if not n then\n"
    "  if ARGV[4] == '' then return {4, 0} end\n"
    "  -- a restock between the read of the load and now is counted once (stockredis.h)\n"
    "  n = tonumber(ARGV[4]) + tonumber(redis.call('GET', KEYS[4]) or '0') - tonumber(ARGV[6])\n"
    "  loading = true\n"
    "  limit = ARGV[7] ~= '' and ARGV[7]\n"
    "  reserve = ARGV[9] ~= '' and ARGV[9]\n"
    "end\n"
    "limit = limit and tonumber(limit)\n"
    "reserve = reserve and tonumber(reserve)\n"
    "n = tonumber(n)\n"
    "if not n then return redis.error_reply('STOCKD the count ' .. KEYS[1] .. ' is not a "
    "number') end\n"
    "local function load()\n"
    "  if not loading then return end\n"
    "  if limit then redis.call('SET', KEYS[5], limit) else redis.call('DEL', KEYS[5]) end\n"
    "  if reserve then redis.call('SET', KEYS[7], reserve) else redis.call('DEL', KEYS[7]) end\n"
    "  redis.call('DEL', KEYS[6])\n"
    "end\n"
    "if n <= 0 then\n"
    "  if loading then redis.call('SET', KEYS[1], n) load() end\n"
    "  return {0, n}\n"
    "end\n"
    "-- 2b. the customer: the units this count sold them (none when loading)\n"
    "if ARGV[8] ~= '' and limit then\n"
    "  local held = loading and 0 or tonumber(redis.call('HGET', KEYS[6], ARGV[8]) or '0')\n"
    "  if held >= limit then return {5, n} end\n"
    "end\n"
    "-- 3. the writes\n"
    "redis.call('SET', KEYS[1], n - 1)\n"
    "load()\n"
    "local t = redis.call('TIME')\n"
    "local at = t[1] .. string.format('%06d', tonumber(t[2]))\n"
    "local entry = {'key', ARGV[2], 'product', ARGV[1], 'instance', ARGV[3], 'at_us', at}\n"
    "if ARGV[8] ~= '' then\n"
    "  redis.call('HINCRBY', KEYS[6], ARGV[8], 1)\n"
    "  table.insert(entry, 'user') table.insert(entry, ARGV[8])\n"
    "end\n"
    "if not reserve then\n"
    "  redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[5])\n"
    "  redis.call('XADD', KEYS[3], '*', unpack(entry))\n"
    "  return {1, n - 1}\n"
    "end\n"
    "local x = (tonumber(t[1]) + reserve) .. string.format('%06d', tonumber(t[2]))\n"
    "redis.call('SET', KEYS[2], ARGV[1], 'EX', tonumber(ARGV[5]) + reserve)\n"
    "redis.call('DEL', KEYS[8])\n"
    "redis.call('HSET', KEYS[8], 'product', ARGV[1], 'user', ARGV[8], 'state', 'reserved', "
    "'expires_us', x)\n"
    "redis.call('ZADD', KEYS[9], x, ARGV[2])\n"
    "table.insert(entry, 'state') table.insert(entry, 'reserved')\n"
    "table.insert(entry, 'expires_us') table.insert(entry, x)\n"
    "redis.call('XADD', KEYS[3], '*', unpack(entry))\n"
    "return {1, n - 1, x}\n";

/* The change script (stockredis_change): pay, cancel or expire one reservation, in one
 * atomic step, the state check its guard (docs/orders.md), so that two changes racing
 * for one reservation (a cancel and the expiry, two instances' expiry threads) make one.
 *
 *   KEYS[1]  stockd:order:<key>   KEYS[2]  stockd:stock:{<id>}   KEYS[3]  stockd:users:{<id>}
 *   KEYS[4]  stockd:orders        KEYS[5]  stockd:expiry
 *   ARGV[1]  the product id (read from the record before: checked again here)
 *   ARGV[2]  the key   ARGV[3]  pay | cancel | expire   ARGV[4]  the customer ("": expire)
 *   ARGV[5]  the instance   ARGV[6]  the record's life once final, in seconds
 *
 * Answers {outcome, state, count}: the outcomes of stockredis_change_outcome. A change
 * that gives the unit back (cancel, expire) raises the count (if it is loaded: a reset
 * deleted it, and the next load reads MariaDB, where the writer gives the unit back) and
 * the customer's units, in the same step as the state and the stream entry that tells
 * the writer the new state. */
static const char change_lua[] =
    "#!lua\n"
    "local r = redis.call('HMGET', KEYS[1], 'product', 'user', 'state', 'expires_us')\n"
    "if not r[1] or r[1] ~= ARGV[1] then return {0, '', 0} end\n"
    "if ARGV[4] ~= '' and r[2] ~= ARGV[4] then return {1, r[3], 0} end\n"
    "if r[3] ~= 'reserved' then\n"
    "  if ARGV[3] == 'expire' then redis.call('ZREM', KEYS[5], ARGV[2]) end\n"
    "  return {2, r[3], 0}\n"
    "end\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1] .. string.format('%06d', tonumber(t[2])))\n"
    "local past = now >= tonumber(r[4])\n"
    "if ARGV[3] == 'pay' and past then return {3, 'reserved', 0} end\n"
    "if ARGV[3] == 'expire' and not past then return {2, 'reserved', 0} end\n"
    "local to = ({pay = 'paid', cancel = 'cancelled', expire = 'expired'})[ARGV[3]]\n"
    "if not to then return redis.error_reply('STOCKD no such change ' .. ARGV[3]) end\n"
    "redis.call('HSET', KEYS[1], 'state', to)\n"
    "redis.call('EXPIRE', KEYS[1], ARGV[6])\n"
    "redis.call('ZREM', KEYS[5], ARGV[2])\n"
    "local c = tonumber(redis.call('GET', KEYS[2]) or '-1')\n"
    "if to ~= 'paid' then\n"
    "  if redis.call('EXISTS', KEYS[2]) == 1 then c = redis.call('INCR', KEYS[2]) end\n"
    "  if r[2] ~= '' and tonumber(redis.call('HGET', KEYS[3], r[2]) or '0') > 0 then\n"
    "    redis.call('HINCRBY', KEYS[3], r[2], -1)\n"
    "  end\n"
    "end\n"
    "redis.call('XADD', KEYS[4], '*', 'key', ARGV[2], 'product', ARGV[1], 'instance', ARGV[5], "
    "'at_us', t[1] .. string.format('%06d', tonumber(t[2])), 'change', to)\n"
    "return {4, to, c}\n";

/* The restock script (stockredis_restock): KEYS[1] the count, KEYS[2] the units restocks
 * added here, ARGV[1] the units. Answers {1, count} when the count is loaded, else {0, 0}:
 * the next load reads MariaDB, which has the units already. */
static const char restock_lua[] = "#!lua\n"
                                  "redis.call('INCRBY', KEYS[2], ARGV[1])\n"
                                  "if redis.call('EXISTS', KEYS[1]) == 1 then\n"
                                  "  return {1, redis.call('INCRBY', KEYS[1], ARGV[1])}\n"
                                  "end\n"
                                  "return {0, 0}\n";

/* Takes a key out of the expiry index if its record is gone (stockredis_change). */
static const char unindex_lua[] = "#!lua\n"
                                  "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
                                  "return redis.call('ZREM', KEYS[2], ARGV[1])\n";

/* Error answers with which Redis refuses a script before running it: nothing was done. */
static bool refusal(const char *server_err) {
    static const char *const refusals[] = {"OOM",   "LOADING",    "READONLY", "MASTERDOWN",
                                           "BUSY ", "NOREPLICAS", "MISCONF"};
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++)
        if (strncmp(server_err, refusals[i], strlen(refusals[i])) == 0) return true;
    return false;
}

struct stockredis {
    hostport hp;
    char user[129], password[513], instance[65];
    int connect_timeout_ms, io_timeout_ms;
    redisContext *c;
    char sha[41];
    char errstr[256];
};

static void set_err(stockredis *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_err(stockredis *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errstr, sizeof(s->errstr), fmt, ap);
    va_end(ap);
}

static void drop(stockredis *s) {
    if (s->c) redisFree(s->c);
    s->c = NULL;
}

void stockredis_count_key(int32_t product_id, char *buf, size_t cap) {
    snprintf(buf, cap, "stockd:stock:{%ld}", (long)product_id);
}

int stockredis_new(const stockredis_config *cfg, stockredis **out, char *err, size_t errcap) {
    if (err && errcap) err[0] = '\0';
    *out = NULL;
    stockredis *s = calloc(1, sizeof(*s));
    if (!s) return STOCKREDIS_ERR_NOMEM;
    const char *addr = cfg->addr ? cfg->addr : "";
    if (hostport_parse(addr, strlen(addr), 0, &s->hp) != 0) {
        if (err) snprintf(err, errcap, "bad Redis address \"%s\" (want HOST:PORT)", addr);
        goto fail;
    }
    if ((cfg->user && strlen(cfg->user) >= sizeof(s->user)) ||
        (cfg->password && strlen(cfg->password) >= sizeof(s->password)) ||
        (cfg->instance && strlen(cfg->instance) >= sizeof(s->instance))) {
        if (err) snprintf(err, errcap, "the Redis user, password or instance name is too long");
        goto fail;
    }
    snprintf(s->user, sizeof(s->user), "%s", cfg->user ? cfg->user : "");
    snprintf(s->password, sizeof(s->password), "%s", cfg->password ? cfg->password : "");
    snprintf(s->instance, sizeof(s->instance), "%s", cfg->instance ? cfg->instance : "");
    s->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 2000;
    s->io_timeout_ms = cfg->io_timeout_ms > 0 ? cfg->io_timeout_ms : 2000;
    *out = s;
    return STOCKREDIS_OK;
fail:
    stockredis_free(s);
    return STOCKREDIS_ERR_ARGS;
}

void stockredis_free(stockredis *s) {
    if (!s) return;
    drop(s);
    explicit_bzero(s->password, sizeof(s->password));
    free(s);
}

const char *stockredis_errstr(const stockredis *s) {
    return s->errstr;
}

static int code_of(int redisconn_rc) {
    switch (redisconn_rc) {
    case REDISCONN_OK:
        return STOCKREDIS_OK;
    case REDISCONN_ERR_AUTH:
        return STOCKREDIS_ERR_AUTH;
    case REDISCONN_ERR_NOMEM:
        return STOCKREDIS_ERR_NOMEM;
    case REDISCONN_ERR_SERVER:
        return STOCKREDIS_ERR_SERVER;
    default:
        return STOCKREDIS_ERR_CONNECTION;
    }
}

/* The connection, made if there is none: dialled, the script loaded and the writers'
 * group created (BUSYGROUP: it exists, which is what we want). */
static int connect_once(stockredis *s) {
    /* An idle connection has nothing to read: if it is readable, the server closed it
     * (a restart, a shutdown, a timeout). Dropped here, before a script is written to
     * it, a Redis that is gone is "unreachable, nothing done", not "sent, answer lost". */
    struct pollfd p = {.fd = s->c ? s->c->fd : -1, .events = POLLIN | POLLRDHUP};
    if (s->c && poll(&p, 1, 0) != 0) drop(s);
    if (s->c) return STOCKREDIS_OK;
    redisconn_config rc = {.host = s->hp.host,
                           .port = s->hp.port,
                           .user = s->user,
                           .password = s->password,
                           .connect_timeout_ms = s->connect_timeout_ms,
                           .io_timeout_ms = s->io_timeout_ms};
    int code = redisconn_dial(&rc, "stock", &s->c, s->errstr, sizeof(s->errstr));
    if (code == REDISCONN_OK)
        code = redisconn_script_load(s->c, deduct_lua, s->sha, s->errstr, sizeof(s->errstr));
    if (code != REDISCONN_OK) {
        drop(s);
        return code_of(code);
    }
    redisReply *r =
        redisCommand(s->c, "XGROUP CREATE %s %s 0 MKSTREAM", STOCKREDIS_STREAM, STOCKREDIS_GROUP);
    if (!r) {
        set_err(s, "XGROUP CREATE: %s", s->c->errstr);
        drop(s);
        return STOCKREDIS_ERR_CONNECTION;
    }
    int ret = STOCKREDIS_OK;
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) != 0) {
        set_err(s, "XGROUP CREATE: %s", r->str);
        ret = redisconn_auth_error(r->str) ? STOCKREDIS_ERR_AUTH
              : refusal(r->str)            ? STOCKREDIS_ERR_REFUSED
                                           : STOCKREDIS_ERR_SERVER;
        drop(s);
    }
    freeReplyObject(r);
    return ret;
}

/* Reads the script's {outcome, count}. An error answer is a refusal (nothing done),
 * the script's own STOCKD error (raised before any write: nothing done), or anything
 * else, which may have come after a write: unknown. */
static int read_answer(stockredis *s, const redisReply *r, stockredis_result *out) {
    if (r->type == REDIS_REPLY_ERROR) {
        set_err(s, "the deduction script: %s", r->str);
        if (refusal(r->str)) return STOCKREDIS_ERR_REFUSED;
        return strncmp(r->str, "STOCKD ", 7) == 0 ? STOCKREDIS_ERR_SERVER : STOCKREDIS_ERR_UNKNOWN;
    }
    if (r->type != REDIS_REPLY_ARRAY || (r->elements != 2 && r->elements != 3) ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER ||
        r->element[0]->integer < STOCKREDIS_SOLD_OUT ||
        r->element[0]->integer > STOCKREDIS_LIMIT_REACHED ||
        (r->elements == 3 && r->element[2]->type != REDIS_REPLY_STRING)) {
        set_err(s, "the deduction script: an answer not of the form {outcome, count[, expiry]}");
        return STOCKREDIS_ERR_UNKNOWN;
    }
    out->outcome = (stockredis_outcome)r->element[0]->integer;
    out->count = r->element[1]->integer;
    out->expires_us = r->elements == 3 ? strtoll(r->element[2]->str, NULL, 10) : 0;
    return STOCKREDIS_OK;
}

/* The key of the units restocks added to product_id's count. */
static void restocked_key(int32_t product_id, char *buf, size_t cap) {
    snprintf(buf, cap, "stockd:restocked:{%ld}", (long)product_id);
}

int stockredis_deduct(stockredis *s, int32_t product_id, const char *key, long long load,
                      long long load_restocked, unsigned memo_ttl_s, const char *user,
                      long long load_limit, long long load_reserve, stockredis_result *out) {
    char count_key[64], memo_key[16 + STOCKREDIS_KEY_MAX], product[16], loadv[24] = "", ttl[16];
    char restocked[64], restockedv[24] = "", limit_key[64], users_key[64], limitv[24] = "";
    char reserve_key[64], record_key[16 + STOCKREDIS_KEY_MAX], reservev[24] = "";
    size_t klen = key ? strlen(key) : 0;
    if (product_id <= 0 || klen == 0 || klen > STOCKREDIS_KEY_MAX || memo_ttl_s == 0) {
        set_err(s, "bad product id, request key or memo life");
        return STOCKREDIS_ERR_ARGS;
    }
    stockredis_count_key(product_id, count_key, sizeof(count_key));
    snprintf(memo_key, sizeof(memo_key), "stockd:key:%s", key);
    snprintf(product, sizeof(product), "%ld", (long)product_id);
    snprintf(ttl, sizeof(ttl), "%u", memo_ttl_s);
    restocked_key(product_id, restocked, sizeof(restocked));
    if (load >= 0) snprintf(loadv, sizeof(loadv), "%lld", load);
    if (load >= 0) snprintf(restockedv, sizeof(restockedv), "%lld", load_restocked);
    if (load >= 0 && load_limit >= 0) snprintf(limitv, sizeof(limitv), "%lld", load_limit);
    snprintf(limit_key, sizeof(limit_key), "stockd:limit:{%ld}", (long)product_id);
    snprintf(users_key, sizeof(users_key), "stockd:users:{%ld}", (long)product_id);
    snprintf(reserve_key, sizeof(reserve_key), "stockd:reserve:{%ld}", (long)product_id);
    snprintf(record_key, sizeof(record_key), "stockd:order:%s", key);
    if (load >= 0 && load_reserve >= 0) snprintf(reservev, sizeof(reservev), "%lld", load_reserve);
    const char *argv[] = {"EVALSHA",   s->sha,
                          "9",         count_key,
                          memo_key,    STOCKREDIS_STREAM,
                          restocked,   limit_key,
                          users_key,   reserve_key,
                          record_key,  STOCKREDIS_EXPIRY,
                          product,     key,
                          s->instance, loadv,
                          ttl,         restockedv,
                          limitv,      user ? user : "",
                          reservev};
    enum { ARGC = sizeof(argv) / sizeof(argv[0]) };
    size_t argl[ARGC];
    bool sent = false;

    /* At most: one lost reply and its resend, and one NOSCRIPT (a flushed script cache).
     * Once a script has been sent and its reply lost, it may have run: every later
     * failure, whatever it is, is then ERR_UNKNOWN, never "nothing was done". */
    for (int attempt = 0; attempt < 3; attempt++) {
        int rc = connect_once(s);
        if (rc != STOCKREDIS_OK) return sent ? STOCKREDIS_ERR_UNKNOWN : rc;
        argv[1] = s->sha;
        for (int i = 0; i < ARGC; i++)
            argl[i] = strlen(argv[i]);
        redisReply *r = redisCommandArgv(s->c, ARGC, argv, argl);
        if (!r) {
            set_err(s, "EVALSHA: %s", s->c->errstr);
            drop(s);
            sent = true;
            continue;
        }
        bool noscript = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
        if (noscript) {
            freeReplyObject(r);
            drop(s); /* the next connect_once loads it again */
            continue;
        }
        rc = read_answer(s, r, out);
        freeReplyObject(r);
        if (rc == STOCKREDIS_OK) s->errstr[0] = '\0';
        return rc != STOCKREDIS_OK && sent ? STOCKREDIS_ERR_UNKNOWN : rc;
    }
    return sent ? STOCKREDIS_ERR_UNKNOWN : STOCKREDIS_ERR_SERVER;
}

/* Runs a command built by the caller on the connection (connecting first); one attempt,
 * since every caller here only reads or WAITs. NULL with the error set, or the reply. */
static redisReply *command(stockredis *s, int *rc, const char *fmt, ...) {
    *rc = connect_once(s);
    if (*rc != STOCKREDIS_OK) return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(s->c, fmt, ap);
    va_end(ap);
    if (!r) {
        set_err(s, "%s", s->c->errstr);
        drop(s);
        *rc = STOCKREDIS_ERR_CONNECTION;
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        set_err(s, "%s", r->str);
        *rc = redisconn_auth_error(r->str) ? STOCKREDIS_ERR_AUTH : STOCKREDIS_ERR_SERVER;
    }
    return r;
}

/* Sends a script that changes something (`what` names it in errors), once, on the
 * connection made: it is not idempotent, so a lost reply is ERR_UNKNOWN and is never
 * resent, and an error reply is ERR_REFUSED when Redis refused the script before
 * running it (refusal), else ERR_UNKNOWN. NULL with *rc and the error set, or the
 * reply, whose form the caller checks. */
static redisReply *send_once(stockredis *s, int *rc, const char *what, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(s->c, fmt, ap);
    va_end(ap);
    if (!r) {
        set_err(s, "%s: %s", what, s->c->errstr);
        drop(s);
        *rc = STOCKREDIS_ERR_UNKNOWN;
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        set_err(s, "%s: %s", what, r->str);
        *rc = refusal(r->str) ? STOCKREDIS_ERR_REFUSED : STOCKREDIS_ERR_UNKNOWN;
        freeReplyObject(r);
        return NULL;
    }
    *rc = STOCKREDIS_OK;
    return r;
}

int stockredis_restock(stockredis *s, int32_t product_id, int32_t units, long long *count,
                       bool *present) {
    char count_key[64], restocked[64];
    *present = false;
    *count = 0;
    if (product_id <= 0 || units <= 0) {
        set_err(s, "bad product id or units");
        return STOCKREDIS_ERR_ARGS;
    }
    stockredis_count_key(product_id, count_key, sizeof(count_key));
    restocked_key(product_id, restocked, sizeof(restocked));
    int rc = connect_once(s);
    if (rc != STOCKREDIS_OK) return rc;
    /* EVAL, not EVALSHA: an operator's call, rare. */
    redisReply *r = send_once(s, &rc, "the restock script", "EVAL %s 2 %s %s %d", restock_lua,
                              count_key, restocked, (int)units);
    if (!r) return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER) {
        set_err(s, "the restock script: an answer not of the form {present, count}");
        rc = STOCKREDIS_ERR_UNKNOWN;
    } else {
        *present = r->element[0]->integer == 1;
        *count = r->element[1]->integer;
    }
    freeReplyObject(r);
    return rc;
}

/* The record of the reservation of `key` (stockd:order:<key>). */
static void record_key_of(const char *key, char *buf, size_t cap) {
    snprintf(buf, cap, "stockd:order:%s", key);
}

int stockredis_change(stockredis *s, const char *key, stockredis_event ev, const char *user,
                      unsigned final_ttl_s, stockredis_change_result *out) {
    static const char *const events[] = {"pay", "cancel", "expire"};
    char record[16 + STOCKREDIS_KEY_MAX], count_key[64], users_key[64], product[16], ttl[16];
    size_t klen = key ? strlen(key) : 0;
    memset(out, 0, sizeof(*out));
    if (klen == 0 || klen > STOCKREDIS_KEY_MAX || (unsigned)ev > STOCKREDIS_EXPIRE ||
        final_ttl_s == 0) {
        set_err(s, "bad key, change or record life");
        return STOCKREDIS_ERR_ARGS;
    }
    record_key_of(key, record, sizeof(record));
    /* The record names the product, whose keys the script declares: read first, and
     * checked again by the script (a record made again meanwhile for another product is
     * then "not found", and nothing is done). */
    int rc;
    redisReply *r = command(s, &rc, "HGET %s product", record);
    if (!r) return rc;
    if (rc == STOCKREDIS_OK && r->type == REDIS_REPLY_STRING) {
        out->product_id = (int32_t)strtol(r->str, NULL, 10);
    } else if (rc == STOCKREDIS_OK && r->type != REDIS_REPLY_NIL) {
        set_err(s, "HGET %s product: not a string", record);
        rc = STOCKREDIS_ERR_SERVER;
    }
    freeReplyObject(r);
    if (rc == STOCKREDIS_OK && out->product_id <= 0 && ev == STOCKREDIS_EXPIRE) {
        /* A key in the index without its record (deleted by hand): out of the index, so
         * that the expiry does not read it again each round; only if the record is still
         * absent, in one step (a reservation of the key made meanwhile stays). */
        r = command(s, &rc, "EVAL %s 2 %s %s %s", unindex_lua, record, STOCKREDIS_EXPIRY, key);
        freeReplyObject(r);
    }
    if (rc != STOCKREDIS_OK || out->product_id <= 0) return rc; /* NOT_FOUND when no record */
    stockredis_count_key(out->product_id, count_key, sizeof(count_key));
    snprintf(users_key, sizeof(users_key), "stockd:users:{%ld}", (long)out->product_id);
    snprintf(product, sizeof(product), "%ld", (long)out->product_id);
    snprintf(ttl, sizeof(ttl), "%u", final_ttl_s);
    /* Sent once (a resend would be harmless, the state check refuses it, but its answer
     * would say not_reserved). */
    r = send_once(s, &rc, "the change script", "EVAL %s 5 %s %s %s %s %s %s %s %s %s %s %s",
                  change_lua, record, count_key, users_key, STOCKREDIS_STREAM, STOCKREDIS_EXPIRY,
                  product, key, events[ev], user ? user : "", s->instance, ttl);
    if (!r) return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[2]->type != REDIS_REPLY_INTEGER || r->element[0]->integer < 0 ||
        r->element[0]->integer > STOCKREDIS_CHANGED) {
        set_err(s, "the change script: an answer not of the form {outcome, state, count}");
        rc = STOCKREDIS_ERR_UNKNOWN;
    } else {
        out->outcome = (stockredis_change_outcome)r->element[0]->integer;
        snprintf(out->state, sizeof(out->state), "%s", r->element[1]->str);
        out->count = r->element[2]->integer;
        if (out->outcome == STOCKREDIS_NO_ORDER) out->product_id = 0;
    }
    freeReplyObject(r);
    return rc;
}

int stockredis_due(stockredis *s, char (*keys)[STOCKREDIS_KEY_MAX + 1], unsigned max, unsigned *n) {
    int rc;
    *n = 0;
    /* Redis's clock, the one the change script judges by. */
    redisReply *r = command(s, &rc, "TIME");
    if (!r) return rc;
    char now[40] = "";
    if (rc == STOCKREDIS_OK && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(now, sizeof(now), "%s%06ld", r->element[0]->str,
                 strtol(r->element[1]->str, NULL, 10));
    else if (rc == STOCKREDIS_OK)
        set_err(s, "TIME: not two strings"), rc = STOCKREDIS_ERR_SERVER;
    freeReplyObject(r);
    if (rc != STOCKREDIS_OK) return rc;
    r = command(s, &rc, "ZRANGEBYSCORE %s -inf %s LIMIT 0 %u", STOCKREDIS_EXPIRY, now, max);
    if (!r) return rc;
    for (size_t i = 0; rc == STOCKREDIS_OK && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING && r->element[i]->len <= STOCKREDIS_KEY_MAX)
            snprintf(keys[(*n)++], STOCKREDIS_KEY_MAX + 1, "%s", r->element[i]->str);
    freeReplyObject(r);
    return rc;
}

int stockredis_wait(stockredis *s, int replicas, int timeout_ms, int *acked) {
    int rc;
    redisReply *r = command(s, &rc, "WAIT %d %d", replicas, timeout_ms);
    if (!r) return rc;
    if (rc == STOCKREDIS_OK && r->type == REDIS_REPLY_INTEGER) {
        *acked = (int)r->integer;
    } else if (rc == STOCKREDIS_OK) {
        set_err(s, "WAIT: not an integer");
        rc = STOCKREDIS_ERR_SERVER;
    }
    freeReplyObject(r);
    return rc;
}

int stockredis_ping(stockredis *s) {
    int rc;
    redisReply *r = command(s, &rc, "PING");
    if (!r) return rc;
    if (rc == STOCKREDIS_OK && !(r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0)) {
        set_err(s, "PING: not PONG");
        rc = STOCKREDIS_ERR_SERVER;
    }
    freeReplyObject(r);
    return rc;
}

int stockredis_count(stockredis *s, int32_t product_id, long long *count, bool *present) {
    char key[64];
    int rc;
    stockredis_count_key(product_id, key, sizeof(key));
    redisReply *r = command(s, &rc, "GET %s", key);
    if (!r) return rc;
    *present = false;
    *count = 0;
    if (rc == STOCKREDIS_OK && r->type == REDIS_REPLY_STRING) {
        char *end;
        errno = 0;
        *count = strtoll(r->str, &end, 10);
        *present = true;
        if (errno || end == r->str || *end) {
            set_err(s, "%s is not a number", key);
            rc = STOCKREDIS_ERR_SERVER;
        }
    }
    freeReplyObject(r);
    return rc;
}

/* The integer value of field `name` in a flat RESP2 map (name, value, ...): -1 if it is
 * absent or nil (XINFO's lag is nil when Redis cannot tell it). */
static long long field_int(const redisReply *m, const char *name) {
    for (size_t i = 0; i + 1 < m->elements; i += 2) {
        const redisReply *k = m->element[i], *v = m->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && strcmp(k->str, name) == 0)
            return v->type == REDIS_REPLY_INTEGER ? v->integer : -1;
    }
    return -1;
}

int stockredis_backlog(stockredis *s, long long *lag, long long *pending) {
    int rc;
    *lag = *pending = 0;
    redisReply *r = command(s, &rc, "XINFO GROUPS %s", STOCKREDIS_STREAM);
    if (!r) return rc;
    if (rc == STOCKREDIS_ERR_SERVER && strstr(r->str, "no such key")) {
        rc = STOCKREDIS_OK; /* no stream yet: nothing waits */
    } else if (rc == STOCKREDIS_OK && r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *g = r->element[i];
            if (g->type != REDIS_REPLY_ARRAY) continue;
            bool ours = false;
            for (size_t j = 0; j + 1 < g->elements; j += 2)
                ours |= g->element[j]->type == REDIS_REPLY_STRING &&
                        strcmp(g->element[j]->str, "name") == 0 &&
                        g->element[j + 1]->type == REDIS_REPLY_STRING &&
                        strcmp(g->element[j + 1]->str, STOCKREDIS_GROUP) == 0;
            if (!ours) continue;
            *lag = field_int(g, "lag");
            *pending = field_int(g, "pending");
        }
    }
    freeReplyObject(r);
    return rc;
}
