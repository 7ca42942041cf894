/* config.c: stockd's options, one row each in the table `options`: name, environment variable
 * (also the --config FILE key), type (the setter), field, range, default, group and help. The
 * defaults, argv, the environment, the file and --help (hence the man page, made by help2man)
 * all read it, so an option is added by adding a row. Secrets have a variable and no option,
 * so that they never appear in argv. Pure apart from getenv and reading the file. The --lock
 * modes and the rules between them and the other options are in modes.c. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostport.h"
#include "stockd.h"

#define HELP_COL   25 /* --help: the column where an option's help starts */
#define HELP_WIDTH 80

typedef struct opt opt;
/* Sets the option's field from v. name is what the user wrote (--port, STOCKD_PORT,
 * FILE:LINE: KEY), for the message. 0, or -1 with the reason in err. */
typedef int opt_setter(stockd_config *c, const opt *o, const char *v, const char *name, char *err,
                       size_t errlen);

/* Operator options come first in --help; demonstration switches make the service
 * oversell or misbehave on purpose and are listed apart; secrets have no option. */
enum { OPERATOR, DEMO, SECRET };

struct opt {
    const char *name; /* --name; NULL for a secret */
    const char *arg;  /* the value's placeholder in --help */
    const char *env;  /* STOCKD_*: the environment variable and the --config key */
    opt_setter *set;  /* the type; NULL: --config (read first) or read by main.c */
    size_t off, size; /* the stockd_config field */
    unsigned lo, hi;  /* set_uint: the range; set_addrs: a list's length */
    const char *dflt; /* the default, as a user would write it; NULL: none */
    int group;        /* OPERATOR, DEMO or SECRET */
    const char *help; /* --help's text; the variable, range and default are added */
};

/* ------------------------------------------------------------------ setters */

static int set_uint(stockd_config *c, const opt *o, const char *s, const char *name, char *err,
                    size_t errlen) {
    char *end;
    unsigned long v;
    if (!s || !*s || *s == '-' || *s == '+') goto bad;
    v = strtoul(s, &end, 10);
    if (*end || v < o->lo || v > o->hi) goto bad;
    *(unsigned *)((char *)c + o->off) = (unsigned)v;
    return 0;
bad:
    snprintf(err, errlen, "%s must be an integer in %u..%u, got '%s'", name, o->lo, o->hi,
             s ? s : "");
    return -1;
}

static int set_bool(stockd_config *c, const opt *o, const char *s, const char *name, char *err,
                    size_t errlen) {
    if (s && (strcmp(s, "on") == 0 || strcmp(s, "off") == 0)) {
        *(bool *)((char *)c + o->off) = strcmp(s, "on") == 0;
        return 0;
    }
    snprintf(err, errlen, "%s must be on or off, got '%s'", name, s ? s : "");
    return -1;
}

static int set_str(stockd_config *c, const opt *o, const char *s, const char *name, char *err,
                   size_t errlen) {
    if (!s || strlen(s) >= o->size) {
        snprintf(err, errlen, "%s is too long (at most %zu bytes)", name, o->size - 1);
        return -1;
    }
    memcpy((char *)c + o->off, s, strlen(s) + 1);
    return 0;
}

/* A ZooKeeper lock path template: absolute, one "{id}" in its last segment, segments a
 * lock name may be (zklock.h), outside ZooKeeper's own /zookeeper. The messages name
 * what is wrong, since a fleet sharing a lock must agree on this path exactly. */
static int set_zk_lock_path(stockd_config *c, const opt *o, const char *s, const char *name,
                            char *err, size_t errlen) {
    const char *why = NULL, *id = s ? strstr(s, "{id}") : NULL;
    const char *last = s ? strrchr(s, '/') : NULL;
    if (!s || s[0] != '/')
        why = "must be absolute (start with /)";
    else if (!id || strstr(id + 1, "{id}"))
        why = "must hold {id}, the product's id, exactly once";
    else if (id < last)
        why = "must have {id} in its last segment (the lock's own node)";
    else if (strstr(s, "//") || s[strlen(s) - 1] == '/' || strstr(s, "/./") || strstr(s, "/../") ||
             strncmp(last, "/.", 2) == 0)
        why = "must not have an empty, . or .. segment, nor end in /";
    else if (strcmp(s, "/zookeeper") == 0 || strncmp(s, "/zookeeper/", 11) == 0)
        why = "must lie outside /zookeeper, ZooKeeper's own tree";
    else if (strlen(s) >= 5 && strcmp(s + strlen(s) - 5, "-herd") == 0)
        why = "must not end in -herd (the herd lock's suffix)";
    for (const char *p = s; !why && p && *p; p++)
        if (*p <= ' ' || *p >= 127) why = "must be printable ASCII without spaces";
    if (why) {
        snprintf(err, errlen, "%s %s, got '%s'", name, why, s ? s : "");
        return -1;
    }
    return set_str(c, o, s, name, err, errlen);
}

/* A ZooKeeper ACL id that shares the locks: world:anyone, digest:USER:HASH (HASH being
 * base64 of SHA-1, 28 characters, as ZooKeeper's DigestAuthenticationProvider makes it),
 * or ip:ADDR[/BITS]. */
static int set_zk_peer_acl(stockd_config *c, const opt *o, const char *s, const char *name,
                           char *err, size_t errlen) {
    const char *colon = s ? strrchr(s, ':') : NULL;
    int ok = s && (!*s || strcmp(s, "world:anyone") == 0 ||
                   (strncmp(s, "digest:", 7) == 0 && colon > s + 7 && strlen(colon + 1) == 28) ||
                   (strncmp(s, "ip:", 3) == 0 && s[3]));
    if (!ok) {
        snprintf(err, errlen,
                 "%s must be world:anyone, digest:USER:BASE64-SHA1 (28 characters) or ip:ADDR, "
                 "got '%s'",
                 name, s ? s : "");
        return -1;
    }
    return set_str(c, o, s, name, err, errlen);
}

/* One HOST:PORT, or a comma list of lo..hi distinct ones (hostport.h). Which one the
 * mode wants is stockd_mode_check's. */
static int set_addrs(stockd_config *c, const opt *o, const char *s, const char *name, char *err,
                     size_t errlen) {
    int n = s ? hostport_list_parse(s, NULL, (int)o->hi) : -1;
    if (n < 0 || (n > 1 && n < (int)o->lo)) {
        snprintf(err, errlen, "%s must be %s, got '%s' (a list names %u to %u distinct servers)",
                 name, o->arg, s ? s : "", o->lo, o->hi);
        return -1;
    }
    return set_str(c, o, s, name, err, errlen);
}

static int set_lock(stockd_config *c, const opt *o, const char *s, const char *name, char *err,
                    size_t errlen) {
    char list[256];
    if (s && stockd_lock_mode_parse(s, &c->lock) == 0) return 0;
    snprintf(err, errlen, "%s must be %s, got '%s'", name,
             stockd_mode_list(list, sizeof(list), NULL), s ? s : "");
    return -1;
}

/* One of the '|'-separated words of the row's arg; the field (an enum) gets its index. */
static int set_word(stockd_config *c, const opt *o, const char *s, const char *name, char *err,
                    size_t errlen) {
    const char *w = o->arg;
    for (int i = 0; s && *w; i++, w += strcspn(w, "|") + (w[strcspn(w, "|")] == '|')) {
        if (strlen(s) == strcspn(w, "|") && strncmp(s, w, strlen(s)) == 0) {
            *(int *)((char *)c + o->off) = i;
            return 0;
        }
    }
    snprintf(err, errlen, "%s must be one of %s, got '%s'", name, o->arg, s ? s : "");
    return -1;
}

/* ZooKeeper's digest scheme takes USER:PASSWORD; the user may not contain ':'. */
static int set_zk_auth(stockd_config *c, const opt *o, const char *s, const char *name, char *err,
                       size_t errlen) {
    const char *colon = s ? strchr(s, ':') : NULL;
    if (!colon || colon == s || !colon[1] || strcspn(s, "\r\n") != strlen(s)) {
        snprintf(err, errlen, "%s must be USER:PASSWORD (both non-empty, one line)", name);
        return -1;
    }
    return set_str(c, o, s, name, err, errlen);
}

/* The name goes into AUTH as one argument; Redis ACL names have no spaces. */
static int set_user(stockd_config *c, const opt *o, const char *s, const char *name, char *err,
                    size_t errlen) {
    if (!s || !*s || strcspn(s, " \t\r\n") != strlen(s)) {
        snprintf(err, errlen, "%s must be a user name without spaces", name);
        return -1;
    }
    return set_str(c, o, s, name, err, errlen);
}

/* ------------------------------------------------------------------ the table */

#define F(field) offsetof(stockd_config, field), sizeof(((stockd_config *)0)->field)

/* A lease shorter than 100 ms would run out inside one batch on a busy machine; etcd
 * grants no lease below its minimum (2 s with the default election timeout). */
static const opt options[] = {
    {"port", "P", "STOCKD_PORT", set_uint, F(port), 1, 65535, "8080", OPERATOR, "listen port"},
    {"bind", "ADDR", "STOCKD_BIND", set_str, F(bind), 0, 0, "127.0.0.1", OPERATOR,
     "listen address"},
    {"lock", "MODE", "STOCKD_LOCK", set_lock, F(lock), 0, 0, "none", OPERATOR,
     "the lock mode, one of:"},
    {"mysql", "URL", "STOCKD_MYSQL", set_str, F(mysql_url), 0, 0,
     "mysql://stockd@127.0.0.1:3306/shop", OPERATOR,
     "mysql://USER@HOST:PORT/DB; the password is read from STOCKD_MYSQL_PASSWORD, so it is not "
     "in argv"},
    {"zk", "HOSTS", "STOCKD_ZK", set_str, F(zk), 0, 0, "127.0.0.1:2181", OPERATOR,
     "ZooKeeper HOST:PORT[,HOST:PORT...]; used by zk and zk-herd"},
    {"redis", "HOST:PORT[,HOST:PORT...]", "STOCKD_REDIS", set_addrs, F(redis), STOCKD_REDLOCK_MIN,
     STOCKD_REDLOCK_MAX, "127.0.0.1:6379", OPERATOR,
     "the Redis of modes redis and redis-stock, connected at the first request, so a Redis that is "
     "down gives 503 "
     "answers, not a failed start. Mode redlock takes 3 to 9 independent servers, "
     "HOST:PORT,HOST:PORT,... and holds a lock while a majority grants it"},
    {"redis-lease-ms", "N", "STOCKD_REDIS_LEASE_MS", set_uint, F(redis_lease_ms), 100, 3600000,
     "10000", OPERATOR, "lease of one Redis (or RedLock) lock acquisition"},
    {"redis-wait-replicas", "N", "STOCKD_REDIS_WAIT_REPLICAS", set_uint, F(redis_wait_replicas), 0,
     16, "0", OPERATOR,
     "mode redis-stock: after each deduction's script, WAIT until N replicas have it (0: do not "
     "wait); fewer within --redis-wait-ms answers 503 not_replicated, since a failover now could "
     "lose the deduction (the order is in the stream already; docs/strategies.md)"},
    {"redis-wait-ms", "N", "STOCKD_REDIS_WAIT_MS", set_uint, F(redis_wait_ms), 1, 60000, "100",
     OPERATOR, "the longest that WAIT waits for the replicas of --redis-wait-replicas"},
    {"redis-key-window-s", "N", "STOCKD_REDIS_KEY_WINDOW_S", set_uint, F(redis_key_window_s), 1,
     31536000, "86400", OPERATOR,
     "mode redis-stock: how long Redis remembers a client's Idempotency-Key (its answer memo): a "
     "resend within the window gets the first answer; after it the key is new again and "
     "deducts again (the order writer then records it as key_reused). stockd's own keys, for "
     "requests without one, live 60 s, enough for stockd's resend"},
    {"db-lock-lease-ms", "N", "STOCKD_DB_LOCK_LEASE_MS", set_uint, F(db_lock_lease_ms), 100,
     3600000, "10000", OPERATOR,
     "lease of one stock_lock row, after which another instance may take a crashed holder's lock"},
    {"etcd", "HOST:PORT[,HOST:PORT...]", "STOCKD_ETCD", set_addrs, F(etcd), 2, STOCKD_REDLOCK_MAX,
     "127.0.0.1:2379", OPERATOR,
     "the etcd members of mode etcd; connected at the first request, as Redis is"},
    {"etcd-ttl-s", "N", "STOCKD_ETCD_TTL_S", set_uint, F(etcd_ttl_s), 2, 3600, "10", OPERATOR,
     "TTL of an etcd lock's lease, kept alive while it is held; a holder that dies blocks its "
     "product this long. In modes redis, db-lock and etcd, start-up is refused (exit 2) unless "
     "the mode's lease is at least twice the longest pause (--think-us + --think-jitter-us) plus "
     "200 ms"},
    {"lease-renew", "on|off", "STOCKD_LEASE_RENEW", set_bool, F(lease_renew), 0, 0, "off", OPERATOR,
     "the watchdog of modes redis, db-lock and redlock, as Redisson's: a thread renews every "
     "lease this process holds at a third of its length, only while it is still ours; redundant "
     "in mode etcd, whose library keeps its leases alive itself"},
    {"redis-user", "NAME", "STOCKD_REDIS_USER", set_user, F(redis_user), 0, 0, NULL, OPERATOR,
     "the Redis ACL user stockd authenticates as (none: the default user); the password is read "
     "from STOCKD_REDIS_PASSWORD, so it is not in argv, or from:"},
    {"redis-password-file", "F", "STOCKD_REDIS_PASSWORD_FILE", set_str, F(redis_password_file), 0,
     0, NULL, OPERATOR, "the first line of file F"},
    {"zk-auth-file", "F", "STOCKD_ZK_AUTH_FILE", set_str, F(zk_auth_file), 0, 0, NULL, OPERATOR,
     "ZooKeeper digest credentials USER:PASSWORD, the first line of file F, or from "
     "STOCKD_ZK_AUTH itself; with them, lock nodes are made with an ACL that gives access to "
     "that identity only (none: nodes open to every client)"},
    {"zk-lock-path", "TEMPLATE", "STOCKD_ZK_LOCK_PATH", set_zk_lock_path, F(zk_lock_path), 0, 0,
     "/stock/locks/product_{id}", OPERATOR,
     "mode zk: where a product's lock lives, {id} standing for its id, so that stockd queues on "
     "the same lock as a fleet's other services (Curator, kazoo: docs/zookeeper-lock.md); the "
     "articles' services lock /product_{id}. Every member of the fleet must use the same path"},
    {"zk-peer-acl", "SCHEME:ID", "STOCKD_ZK_PEER_ACL", set_zk_peer_acl, F(zk_peer_acl), 0, 0, NULL,
     OPERATOR,
     "with --zk-auth-file: another identity that shares the locks (a fleet's Curator or kazoo "
     "clients), world:anyone or digest:USER:BASE64-SHA1; it may read and watch stockd's lock "
     "nodes and queue under the lock's parents (docs/zookeeper-lock.md)"},
    {"admin-token-file", "F", "STOCKD_ADMIN_TOKEN_FILE", set_str, F(admin_token_file), 0, 0, NULL,
     OPERATOR,
     "the Bearer token of POST /stock/restock, the first line of file F (none: restock is "
     "refused, 403)"},
    {"expiry-ms", "N", "STOCKD_EXPIRY_MS", set_uint, F(expiry_ms), 0, 60000, "200", OPERATOR,
     "how often the expiry thread gives back reservations left unpaid past their expiry "
     "(docs/orders.md); 0 = never (for tests of a payment arriving late)"},
    {"instance", "NAME", "STOCKD_INSTANCE", set_str, F(instance), 0, 0, NULL, OPERATOR,
     "name in answers, logs and orders (stockd-PORT when not given)"},
    {"workers", "N", "STOCKD_WORKERS", set_uint, F(workers), 1, 512, "16", OPERATOR,
     "worker threads = MySQL connections"},
    {"queue", "N", "STOCKD_QUEUE", set_uint, F(queue_max), 1, 1000000, "4096", OPERATOR,
     "requests waiting for a worker before 503"},
    {"lock-timeout-ms", "N", "STOCKD_LOCK_TIMEOUT_MS", set_uint, F(lock_timeout_ms), 0, 600000,
     "5000", OPERATOR, "how long a deduction waits for the product's lock"},
    {"zk-session-ms", "N", "STOCKD_ZK_SESSION_MS", set_uint, F(zk_session_ms), 1000, 600000, "6000",
     OPERATOR, "ZooKeeper session timeout"},
    {"max-connections", "N", "STOCKD_MAX_CONNECTIONS", set_uint, F(max_connections), 1, 100000,
     "1024", OPERATOR, "HTTP connection limit"},
    {"connection-timeout-s", "N", "STOCKD_CONNECTION_TIMEOUT_S", set_uint, F(connection_timeout_s),
     1, 3600, "30", OPERATOR, "idle HTTP connection timeout"},
    {"batch-max", "N", "STOCKD_BATCH_MAX", set_uint, F(batch_max), 1, STOCKDB_BATCH_MAX, "64",
     OPERATOR,
     "deductions of one product served under one lock acquisition, as one transaction; 1 = the "
     "seed's one acquisition per deduction. Modes none and atomic never batch"},
    {"precheck", "on|off", "STOCKD_PRECHECK", set_bool, F(precheck), 0, 0, "on", OPERATOR,
     "answer sold out from one plain read before queuing for the lock; off = every request takes "
     "the lock, as in the seed"},
    {"lock-cache-ms", "N", "STOCKD_LOCK_CACHE_MS", set_uint, F(lock_cache_ms), 0, 60000, "200",
     OPERATOR,
     "mode zk: keep the product's lock node after a batch for up to N ms, so the next batch in "
     "this process takes it without ZooKeeper; let go at once when another instance queues (a "
     "children watch); 0 = off; never with --batch-max 1"},
    {"cross-products", "K", "STOCKD_CROSS_PRODUCTS", set_uint, F(cross_products), 1,
     STOCKDB_MULTI_MAX, "1", OPERATOR,
     "mode zk: one batch may take waiting deductions of up to K products whose locks are free "
     "now (try only, never waited for) and commit them in ONE transaction, each row with its own "
     "fence; 1 = one product per batch; never with --batch-max 1 or segments"},
    {"queue-deadline-ms", "N", "STOCKD_QUEUE_DEADLINE_MS", set_uint, F(queue_deadline_ms), 0,
     3600000, "25000", OPERATOR,
     "a request still unserved this long after it arrived is answered 503 without deducting, "
     "also when its batch's COMMIT would come later; a statement waits at most a fifth of it "
     "(2..10 s); keep it plus a fifth within the proxy's read timeout; 0 = none"},
    {"segments", "K", "STOCKD_SEGMENTS", set_uint, F(segments), 1, STOCKD_SEGMENTS_MAX, "1",
     OPERATOR,
     "the product's stock is split over K rows of product_segment, each with its own lock; a "
     "deduction starts at a random segment and moves on while they are empty; every instance and "
     "the stock reset (scripts/stack-lib.sh mysql_set_stock) must use the same K. Modes with a "
     "lock only; at most half the workers serve one product's segments at a time"},
    {"log-format", "text|json", "STOCKD_LOG_FORMAT", set_word, F(log_format), 0, 0, "text",
     OPERATOR,
     "text: one line per event for people; json: one object per line (time, level, instance, "
     "message) for log shippers"},
    {"route", "local|owner", "STOCKD_ROUTE", set_word, F(route), 0, 0, "local", OPERATOR,
     "local: serve a deduction where it lands; owner: forward it, batched with the others of "
     "its product, to the product's owner among the instances (rendezvous hashing over the "
     "view), which serves it under the lock as ever; an unreachable owner means a local serve "
     "(docs/routing.md). Modes that batch across instances only, not none or local"},
    {"announce", "HOST:PORT", "STOCKD_ANNOUNCE", set_addrs, F(announce), 1, 1, NULL, OPERATOR,
     "--route owner: the address the peers reach this instance at (none: --bind:--port)"},
    {"peers", "HOST:PORT[,HOST:PORT...]", "STOCKD_PEERS", set_addrs, F(peers), 1, 64, NULL,
     OPERATOR,
     "--route owner without ZooKeeper (modes for-update, db-lock, redis, redlock, etcd): the "
     "instances, this one included (a static view; a peer whose circuit is open owns nothing "
     "until it answers again). Modes zk and zk-herd find their peers in ZooKeeper instead, "
     "under /stockd/members"},
    {"route-members", "PATH", "STOCKD_ROUTE_MEMBERS", set_str, F(route_members), 0, 0,
     "/stockd/members", OPERATOR,
     "modes zk and zk-herd with --route owner: the ZooKeeper node under which each instance "
     "keeps an ephemeral child named by its --announce address; one fleet, one path"},
    {"peer-secret-file", "F", "STOCKD_PEER_SECRET_FILE", set_str, F(peer_secret_file), 0, 0, NULL,
     OPERATOR,
     "the peers' shared secret, the first line of file F; a call to /peer/ without it is "
     "refused 403; needed by --route owner"},
    {"config", "FILE", NULL, NULL, 0, 0, 0, 0, NULL, OPERATOR,
     "read options from FILE: KEY=VALUE lines with the keys of the environment variables "
     "(STOCKD_PORT=8081), # comments and blank lines; an unknown key or a bad line is an error. "
     "The command line wins over the environment, which wins over the file, which wins over the "
     "defaults. STOCKD_MYSQL_PASSWORD stays in the environment"},
    {"think-us", "N", "STOCKD_THINK_US", set_uint, F(think_us), 0, 60000000, "0", DEMO,
     "pause between the stock check and the update, standing in for a real service's business "
     "logic; the oversell experiment uses it; with batching it is paid once per batch"},
    {"think-jitter-us", "N", "STOCKD_THINK_JITTER_US", set_uint, F(think_jitter_us), 0, 60000000,
     "0", DEMO,
     "add a uniformly random 0..N us to each pause, so that instances with the same pause do not "
     "fall into step"},
    {"lock-passes", "N", "STOCKD_LOCK_PASSES", set_uint, F(lock_passes), 1, 1000, "1", DEMO,
     "batches one acquisition may serve back to back while more deductions of the product wait: "
     "1 = release and queue again after every batch"},
    {"fence", "on|off", "STOCKD_FENCE", set_bool, F(fence), 0, 0, "on", DEMO,
     "off: the write carries no fencing token and the commit does not re-check the lock, for the "
     "demonstration that a holder paused past its lease then oversells"},
    {"lease-check", "on|off", "STOCKD_LEASE_CHECK", set_bool, F(lease_check), 0, 0, "on", DEMO,
     "off skips the refusal of a lease too short for the pause (--etcd-ttl-s), for the "
     "demonstrations of a holder outliving its lease"},
    {"pitfall", "none|release-before-commit|snapshot-before-lock", "STOCKD_PITFALL", set_word,
     F(pitfall), 0, 0, "none", DEMO,
     "make one of the two classic mistakes on purpose, to show what it does: "
     "release-before-commit (unlock, then COMMIT) or snapshot-before-lock (REPEATABLE READ "
     "snapshot opened before acquiring). Only in a mode that takes a lock: one whose lock kind "
     "(--list-modes, second column) is not none"},
    {"route-pin", "ID=HOST:PORT[,...]", "STOCKD_ROUTE_PIN", set_str, F(route_pin), 0, 0, NULL, DEMO,
     "TESTS ONLY: this instance believes product ID is owned by HOST:PORT whatever the view "
     "says, to force divergent views (two owners, or a ping-pong between two instances)"},
    /* Secrets: the environment only (main.c reads the MySQL password itself). */
    {NULL, NULL, "STOCKD_MYSQL_PASSWORD", NULL, 0, 0, 0, 0, NULL, SECRET, NULL},
    {NULL, NULL, "STOCKD_REDIS_PASSWORD", set_str, F(redis_password), 0, 0, NULL, SECRET, NULL},
    {NULL, NULL, "STOCKD_ZK_AUTH", set_zk_auth, F(zk_auth), 0, 0, NULL, SECRET, NULL},
};
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

/* ------------------------------------------------------------------ --help */

/* Prints text from column HELP_COL, wrapped at HELP_WIDTH. */
static void usage_wrap(FILE *out, const char *text) {
    size_t col = HELP_COL;
    for (const char *p = text; *p; p += strspn(p, " ")) {
        size_t n = strcspn(p, " ");
        if (col > HELP_COL && col + 1 + n > HELP_WIDTH)
            col = (size_t)fprintf(out, "\n%*s", HELP_COL, "") - 1;
        else if (col > HELP_COL)
            col += (size_t)fprintf(out, " ");
        col += (size_t)fprintf(out, "%.*s", (int)n, p);
        p += n;
    }
    fputc('\n', out);
}

static void usage_group(FILE *out, int group) {
    for (size_t i = 0; i < NOPTIONS; i++) {
        const opt *o = &options[i];
        char head[64], text[1024], list[256] = "", range[32] = "", dflt[64] = "";
        if (o->group != group) continue;
        if (o->set == set_lock) stockd_mode_list(list, sizeof(list), NULL);
        if (o->set == set_uint) snprintf(range, sizeof(range), ", %u..%u", o->lo, o->hi);
        if (o->dflt) snprintf(dflt, sizeof(dflt), " [%s]", o->dflt);
        snprintf(text, sizeof(text), "%s%s%s (%s%s)%s", o->help, *list ? " " : "", list,
                 o->env ? o->env : "command line only", range, dflt);
        /* A head too long for its column puts the help on the next line. */
        int n = snprintf(head, sizeof(head), "  --%s %s", o->name, o->arg);
        if (n + 2 > HELP_COL)
            fprintf(out, "%s\n%*s", head, HELP_COL, "");
        else
            fprintf(out, "%-*s", HELP_COL, head);
        usage_wrap(out, text);
    }
}

void stockd_config_usage(FILE *out) {
    fputs("usage: stockd [options]\n\n"
          "An inventory-deduction HTTP service: GET|POST /stock/reduce?id=N deducts one unit\n"
          "of product N in a MySQL transaction, under the lock chosen by --lock.\n\n"
          "options (each also read from the environment variable in brackets):\n",
          out);
    usage_group(out, OPERATOR);
    fputs("  --list-modes           print the --lock modes, one a line: the mode, its lock\n"
          "                         kind and its lock service (- for none), tab-separated\n"
          "  --help, --version\n\n"
          "demonstration switches (ONLY to show what goes wrong; NEVER in production):\n",
          out);
    usage_group(out, DEMO);
}

/* ------------------------------------------------------------------ argv */

/* Walks argv; every option name must be written in full. With config_only, it finds
 * --config's file (*path, read before the environment) and applies nothing else;
 * otherwise it applies every option but --config. 0, or -1 with err set. */
static int argv_walk(stockd_config *c, int argc, char **argv, bool config_only, const char **path,
                     char *err, size_t errlen) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        char name[64];
        size_t n = strcspn(a, "=");
        const opt *o = NULL;

        for (size_t k = 0; k < NOPTIONS && strncmp(a, "--", 2) == 0; k++)
            if (options[k].name && strlen(options[k].name) == n - 2 &&
                strncmp(options[k].name, a + 2, n - 2) == 0)
                o = &options[k];

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "--version") == 0 ||
            strcmp(a, "--list-modes") == 0) {
            *(a[2] == 'v' ? &c->version : a[2] == 'l' ? &c->list_modes : &c->help) = true;
            continue;
        }
        if (strcmp(a, "--") == 0 || a[0] != '-') {
            if (a[0] == '-' && ++i == argc) break;
            snprintf(err, errlen, "unexpected argument '%s'", argv[i]);
            return -1;
        }
        /* Secrets have no option: say so rather than "unknown", and never echo a value. */
        if (!o && (strstr(a, "password") || strstr(a, "-auth"))) {
            snprintf(err, errlen, "%.*s: secrets are never taken from the command line (--help)",
                     (int)n, a);
            return -1;
        }
        if (!o) {
            snprintf(err, errlen, "unknown option '%.*s'", (int)n, a);
            return -1;
        }
        if (a[n] == '=') {
            v = a + n + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            snprintf(err, errlen, "%s needs a %s", a, o->arg);
            return -1;
        }
        if (!o->set && config_only) {
            if (*path) {
                snprintf(err, errlen, "--config given twice");
                return -1;
            }
            *path = v;
        }
        if (!o->set || config_only) continue;
        snprintf(name, sizeof(name), "--%s", o->name);
        if (o->set(c, o, v, name, err, errlen) != 0) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ --config FILE */

/* The file's keys are the rows' variables, each set by the row's setter, so every row
 * with a variable is a key of the file too. It comes between the defaults and the
 * environment: command line > environment > file > defaults. */
struct config_file {
    stockd_config *c;
    unsigned first_line[NOPTIONS]; /* where each key was set, to refuse a second time */
};

/* stockd_kvfile_read's callback: applies one KEY=VALUE line. */
static int config_file_line(void *arg, const char *key, const char *val, const char *where,
                            unsigned line, char *err, size_t errlen) {
    struct config_file *cf = arg;
    char name[320];
    size_t i;

    for (i = 0; i < NOPTIONS && !(options[i].env && strcmp(key, options[i].env) == 0); i++) {
    }
    /* Secrets stay out of files that are read by the service itself. */
    if (i < NOPTIONS && options[i].group == SECRET) {
        snprintf(err, errlen,
                 "%s: %s is read from the environment only (an EnvironmentFile may set it)", where,
                 key);
        return -1;
    }
    if (i == NOPTIONS) {
        snprintf(err, errlen,
                 "%s: unknown key '%.64s' (the keys are the STOCKD_* variables of --help)", where,
                 key);
        return -1;
    }
    if (cf->first_line[i]) {
        snprintf(err, errlen, "%s: %s given twice (first on line %u)", where, key,
                 cf->first_line[i]);
        return -1;
    }
    cf->first_line[i] = line;
    snprintf(name, sizeof(name), "%s: %s", where, key);
    return options[i].set(cf->c, &options[i], val, name, err, errlen);
}

/* ------------------------------------------------------------------ parse */

int stockd_config_set_zk_auth(stockd_config *c, const char *v, const char *name, char *err,
                              size_t errlen) {
    return set_zk_auth(c, &options[NOPTIONS - 1], v, name, err, errlen); /* the last row */
}

int stockd_config_parse(stockd_config *c, int argc, char **argv, char *err, size_t errlen) {
    const char *config_path = NULL;

    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < NOPTIONS; i++)
        if (options[i].dflt &&
            options[i].set(c, &options[i], options[i].dflt, options[i].name, err, errlen) != 0)
            return -1;
    if (argv_walk(c, argc, argv, true, &config_path, err, errlen) != 0) return -1;
    if (config_path && stockd_kvfile_read(config_path, config_file_line,
                                          &(struct config_file){.c = c}, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < NOPTIONS; i++) {
        const char *v = options[i].set && options[i].env ? getenv(options[i].env) : NULL;
        if (v && options[i].set(c, &options[i], v, options[i].env, err, errlen) != 0) return -1;
    }
    if (argv_walk(c, argc, argv, false, NULL, err, errlen) != 0 ||
        stockd_mode_check(c, err, errlen) != 0)
        return -1;
    if (!c->instance[0]) snprintf(c->instance, sizeof(c->instance), "stockd-%u", c->port);
    if (stockd_check_key(c->instance, strlen(c->instance)) != 0) {
        snprintf(err, errlen, "instance name must be 1..64 of [A-Za-z0-9_-], got '%s'",
                 c->instance);
        return -1;
    }
    return 0;
}
