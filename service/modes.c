/* modes.c: the table of --lock modes (stockd_modes). Each word is a row naming two
 * independent axes, a lock kind of lock/lock_kinds.c and a database strategy of
 * db/stockdb.h, plus whether deductions are batched and which stockd_config fields
 * feed the kind's lock_config. What follows from the table is here too: a mode's
 * row, name and parse, the lists of modes that config.c's messages name, and
 * stockd_lock_config. Pure; it calls nothing else in service/ (config.c calls it). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

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
};
const size_t stockd_nmodes = sizeof(stockd_modes) / sizeof(stockd_modes[0]);

const stockd_mode *stockd_mode_of(stockd_lock_mode m) {
    return (size_t)m < stockd_nmodes ? &stockd_modes[m] : &stockd_modes[0];
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
                                n == 1 ? "" : n == total ? " or " : ", ", stockd_modes[i].name);
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
    *out = (lock_config){.addr = field_str(cfg, m->addr_off),
                         .user = field_str(cfg, m->user_off),
                         .password = field_str(cfg, m->password_off),
                         .timeout_ms = (int)cfg->lock_timeout_ms,
                         .lease_ms = m->lease_off ? (int)*(const unsigned *)((const char *)cfg +
                                                                              m->lease_off)
                                                  : 0,
                         .session_ms = (int)cfg->zk_session_ms,
                         .holders = cfg->workers,
                         .renew = cfg->lease_renew,
                         /* --batch-max 1 keeps the seed's one acquisition per deduction */
                         .cache = cfg->lock_cache_ms > 0 && cfg->batch_max > 1,
                         .owner = cfg->instance,
                         .db = db};
}
