/* modes.c: the table of --lock modes (stockd_modes). Each word is a row naming two
 * independent axes, a lock kind of lock/lock_kinds.c and a database strategy of
 * db/stockdb.h, plus whether deductions are batched and which stockd_config fields
 * feed the kind's lock_config. What follows from the table is here too: a mode's
 * row, name and parse, the lists of modes that config.c's messages name, the rules
 * between the mode and the other options (stockd_mode_check), and stockd_lock_config.
 * Pure; it calls nothing else in service/ (config.c calls it). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "hostport.h"
#include "stockd.h"

#define CF(field) offsetof(stockd_config, field)

/* The --lock words: each a lock kind and a database strategy (stockd.h, stockd_mode).
 * none, for-update and atomic share the kind none and differ only in the strategy and
 * in whether deductions are batched. */
const stockd_mode stockd_modes[] = {
    [STOCKD_LOCK_NONE] = {"none", "none", STOCKDB_READ_CHECK_UPDATE, false},
    [STOCKD_LOCK_LOCAL] = {"local", "local", STOCKDB_READ_CHECK_UPDATE, true},
    [STOCKD_LOCK_ZK] = {"zk", "zk", STOCKDB_READ_CHECK_UPDATE, true, CF(zk), 0, CF(zk_auth)},
    [STOCKD_LOCK_ZK_HERD] = {"zk-herd", "zk-herd", STOCKDB_READ_CHECK_UPDATE, true, CF(zk), 0,
                             CF(zk_auth)},
    [STOCKD_LOCK_FOR_UPDATE] = {"for-update", "none", STOCKDB_FOR_UPDATE, true},
    [STOCKD_LOCK_ATOMIC] = {"atomic", "none", STOCKDB_ATOMIC, false},
    [STOCKD_LOCK_REDIS] = {"redis", "redis", STOCKDB_READ_CHECK_UPDATE, true, CF(redis),
                           CF(redis_user), CF(redis_password), CF(redis_lease_ms),
                           "--redis-lease-ms"},
    [STOCKD_LOCK_DB_LOCK] = {"db-lock", "db-lock", STOCKDB_READ_CHECK_UPDATE, true, 0, 0, 0,
                             CF(db_lock_lease_ms), "--db-lock-lease-ms"},
    [STOCKD_LOCK_REDLOCK] = {"redlock", "redlock", STOCKDB_READ_CHECK_UPDATE, true, CF(redis),
                             CF(redis_user), CF(redis_password), CF(redis_lease_ms),
                             "--redis-lease-ms"},
    [STOCKD_LOCK_ETCD] = {"etcd", "etcd", STOCKDB_READ_CHECK_UPDATE, true, CF(etcd), 0, 0,
                          CF(etcd_lease_ms), "--etcd-ttl-s (in ms)"},
    /* No lock and no transaction here: a Lua script in Redis deducts (service/redisstock.c),
     * and the order writer brings MariaDB along later. The strategy is what its first load
     * of a product reads. */
    [STOCKD_LOCK_REDIS_STOCK] = {.name = "redis-stock",
                                 .kind = "none",
                                 .strategy = STOCKDB_ATOMIC,
                                 .batched = false,
                                 .store = "redis"},
};
const size_t stockd_nmodes = sizeof(stockd_modes) / sizeof(stockd_modes[0]);

const stockd_mode *stockd_mode_of(stockd_lock_mode m) {
    return (size_t)m < stockd_nmodes ? &stockd_modes[m] : &stockd_modes[0];
}

bool stockd_mode_routes(const stockd_mode *m) {
    return m->batched && strcmp(m->kind, "local") != 0;
}

const char *stockd_lock_mode_name(stockd_lock_mode m) {
    return (size_t)m < stockd_nmodes ? stockd_modes[m].name : "?";
}

int stockd_lock_mode_parse(const char *s, stockd_lock_mode *out) {
    for (size_t i = 0; i < stockd_nmodes; i++) {
        if (strcmp(s, stockd_modes[i].name) == 0) {
            *out = (stockd_lock_mode)i;
            return 0;
        }
    }
    return -1;
}

const char *stockd_mode_list(char *buf, size_t cap, bool (*pick)(const stockd_mode *)) {
    size_t n = 0, len = 0, total = 0;
    for (size_t i = 0; i < stockd_nmodes; i++)
        total += !pick || pick(&stockd_modes[i]);
    buf[0] = '\0';
    for (size_t i = 0; i < stockd_nmodes && len < cap; i++) {
        if (pick && !pick(&stockd_modes[i])) continue;
        n++;
        len += (size_t)snprintf(buf + len, cap - len, "%s%s",
                                n == 1       ? ""
                                : n == total ? " or "
                                             : ", ",
                                stockd_modes[i].name);
    }
    return buf;
}

bool stockd_mode_batched(const stockd_mode *m) {
    return m->batched;
}

/* A lock the service takes and releases around a transaction. */
bool stockd_mode_locks(const stockd_mode *m) {
    return strcmp(m->kind, "none") != 0;
}

bool stockd_mode_lease(const stockd_mode *m) {
    return m->lease_off != 0;
}

static const char *field_str(const stockd_config *c, size_t off) {
    return off ? (const char *)c + off : NULL;
}

void stockd_lock_config(const stockd_config *cfg, const stockdb_config *db, lock_config *out) {
    const stockd_mode *m = stockd_mode_of(cfg->lock);
    *out = (lock_config){
        .addr = field_str(cfg, m->addr_off),
        .user = field_str(cfg, m->user_off),
        .password = field_str(cfg, m->password_off),
        .timeout_ms = (int)cfg->lock_timeout_ms,
        .lease_ms = m->lease_off ? (int)*(const unsigned *)((const char *)cfg + m->lease_off) : 0,
        .session_ms = (int)cfg->zk_session_ms,
        .holders = cfg->workers + 1, /* and the expiry thread (orders.c) */
        .renew = cfg->lease_renew,
        /* --batch-max 1 keeps the seed's one acquisition per deduction */
        .cache = cfg->lock_cache_ms > 0 && cfg->batch_max > 1,
        .owner = cfg->instance,
        .path = cfg->zk_lock_path,
        .peer = cfg->zk_peer_acl,
        .db = db};
}

/* ------------------------------------------------------------------ the rules */

int stockd_mode_check(stockd_config *c, char *err, size_t errlen) {
    const stockd_mode *m = stockd_mode_of(c->lock);
    char list[256];

    c->etcd_lease_ms = c->etcd_ttl_s * 1000;
    c->lock_kind = m->kind;
    c->strategy = m->strategy;
    if (c->lock == STOCKD_LOCK_REDLOCK &&
        hostport_list_parse(c->redis, NULL, STOCKD_REDLOCK_MAX) < STOCKD_REDLOCK_MIN) {
        snprintf(err, errlen,
                 "--lock redlock needs --redis with %d to %d independent servers, "
                 "HOST:PORT,HOST:PORT,..., got '%s'",
                 STOCKD_REDLOCK_MIN, STOCKD_REDLOCK_MAX, c->redis);
        return -1;
    }
    if ((c->lock == STOCKD_LOCK_REDIS || c->lock == STOCKD_LOCK_REDIS_STOCK) &&
        strchr(c->redis, ',')) {
        snprintf(err, errlen,
                 "--lock %s takes one HOST:PORT in --redis, got '%s' (a list of servers is "
                 "for --lock redlock)",
                 m->name, c->redis);
        return -1;
    }
    if (c->redis_wait_replicas && c->lock != STOCKD_LOCK_REDIS_STOCK) {
        snprintf(err, errlen, "--redis-wait-replicas is for --lock redis-stock, not %s", m->name);
        return -1;
    }
    if (c->segments > 1 && !m->batched) {
        snprintf(err, errlen, "--segments %u needs a mode with a lock (%s), not %s", c->segments,
                 stockd_mode_list(list, sizeof(list), stockd_mode_batched), m->name);
        return -1;
    }
    /* A pitfall misuses a lock that the service takes and releases around a
     * transaction. none and atomic take no lock, and for-update's lock is the row lock,
     * which the database holds to COMMIT and which its locking read reads through: there
     * the mistake cannot be made. */
    if (c->pitfall != STOCKD_PITFALL_NONE && !stockd_mode_locks(m)) {
        snprintf(err, errlen,
                 "--pitfall %s needs a lock the service takes and releases around its "
                 "transaction (%s); %s has none to misuse",
                 c->pitfall == STOCKD_PITFALL_RELEASE_BEFORE_COMMIT ? "release-before-commit"
                                                                    : "snapshot-before-lock",
                 stockd_mode_list(list, sizeof(list), stockd_mode_locks), m->name);
        return -1;
    }
    if (c->lease_check && stockd_mode_lease(m)) {
        uint64_t pause_us = (uint64_t)c->think_us + c->think_jitter_us;
        unsigned lease = *(const unsigned *)((const char *)c + m->lease_off);
        if (lease < STOCKD_LEASE_MIN_MS(pause_us)) {
            snprintf(err, errlen,
                     "%s %u is too short for a batch that pauses up to %llu us "
                     "(--think-us + --think-jitter-us): every batch would outlive its lease; "
                     "want at least %llu ms (twice the pause plus 200 ms)",
                     m->lease_option, lease, (unsigned long long)pause_us,
                     (unsigned long long)STOCKD_LEASE_MIN_MS(pause_us));
            return -1;
        }
    }
    /* Routing is not a lock: with every deduction of a product at one instance, local's
     * process mutex looks exact until the view changes, and then two instances serve the
     * product at once (docs/routing.md, "Modes none and local"). Only the modes whose
     * lock or row lock holds across instances route. */
    if (c->route == STOCKD_ROUTE_OWNER && !stockd_mode_routes(m)) {
        snprintf(err, errlen,
                 "--route owner needs a mode whose lock holds across instances (%s), not %s: "
                 "routing is a hint, the lock stays the safety (docs/routing.md)",
                 stockd_mode_list(list, sizeof(list), stockd_mode_routes), m->name);
        return -1;
    }
    if (c->route == STOCKD_ROUTE_OWNER && !c->peer_secret_file[0]) {
        snprintf(err, errlen, "--route owner needs --peer-secret-file, the peers' shared secret");
        return -1;
    }
    /* Only a lease has anything to renew: ZooKeeper's session is kept alive by its
     * client, and the other modes hold nothing that expires. */
    if (c->lease_renew && !stockd_mode_lease(m)) {
        snprintf(err, errlen, "--lease-renew on needs a lease lock (%s), not %s",
                 stockd_mode_list(list, sizeof(list), stockd_mode_lease), m->name);
        return -1;
    }
    return 0;
}
