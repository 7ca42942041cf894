/* etcdlock_int.h: private to lock/. The etcd fair lock's own calls (etcdlock.c states
 * the recipe), for the tests of what only this library has (tests/lock/lock_etcd_test.c);
 * everything else reaches it through lock.h as the kind "etcd". The calls common to the
 * lease libraries have the contracts lease_pool_int.h states once.
 *
 * Below them, the handle and the hold that etcdlock.c (the lock recipe: leases, the keep-alive
 * thread, the queue, acquire and release, the kind's row) and etcdlock_http.c (the v3 JSON gateway:
 * libcurl requests with member failover, base64 keys, the JSON helpers, the streaming watch) share,
 * and the calls the second offers the first.
 *
 * Threads: the configuration is fixed once etcdlock_new returns; the `cmd` and `watch`
 * connections, the multi handle, st and errstr are the calling thread's; the `ka`
 * connection is the keep-alive thread's; the list of holds, ka_tick_us and stop are
 * shared under mu; the counters and a hold's lease clock are atomics. */
#ifndef ETCDLOCK_INT_H
#define ETCDLOCK_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <curl/curl.h> /* the types only: the library is loaded at run time */

#include "curl_api.h"
#include "lock.h"

/* The longest lock name, in bytes. Names are [A-Za-z0-9_.-]. */
#define ETCDLOCK_NAME_MAX 200
/* The most endpoints in a list. */
#define ETCDLOCK_ENDPOINTS_MAX 8

typedef struct etcdlock_config {
    /* "HOST:PORT[,HOST:PORT...]", members of one cluster (what --etcd and STOCKD_ETCD
     * take). A call that cannot reach one endpoint tries the next. */
    const char *endpoints;
    const char *prefix;     /* key prefix; NULL = "lock/" (at most 32 bytes) */
    int ttl_s;              /* the lease TTL asked for, seconds; 0 = 10. etcd raises it to
                             * its minimum (2 s with the default election timeout) */
    int safety_margin_ms;   /* check() says LOST this long before the TTL ends; 0 =
                             * TTL/10 + 2 ms; < 0 is refused */
    int poll_ms;            /* a wait looks at the cancel flag and the deadline this
                             * often; 0 = 50 */
    int connect_timeout_ms; /* 0 = 2000 */
    int io_timeout_ms;      /* one request's answer (not a watch); 0 = 2000 */
    /* NULL, or the flag that ends the waits (lease_pool_int.h); a cancelled acquire
     * takes its key out of the queue. */
    const atomic_int *cancel;
    /* 0: the keep-alive thread runs (the default). Non-zero: no keep-alive at all, so
     * every lease ends after its TTL even while held (tests of a lost lease). */
    int no_keepalive;
    /* Who we are (the instance), written as the value of each queue key, so that a view
     * (etcdlock_view.c) can tell who queued. NULL = "". Copied, at most 63 bytes. */
    const char *owner;
} etcdlock_config;

/* Counters for /metrics and the tests. All only grow. */
typedef struct etcdlock_stats {
    uint64_t acquired;
    uint64_t timeouts;
    uint64_t released;
    uint64_t release_lost;   /* releases that found our key gone (the lease had ended) */
    uint64_t ops;            /* requests sent by the calling thread (grant, txn, range, ...) */
    uint64_t watches;        /* watches opened on a predecessor */
    uint64_t wakeups;        /* predecessor deletes a watch delivered */
    uint64_t keepalives;     /* keep-alives that extended a lease (the keep-alive thread
                              * and etcdlock_renew through this handle) */
    uint64_t keepalive_lost; /* keep-alives that found the lease gone */
} etcdlock_stats;

typedef struct etcdlock etcdlock;
typedef struct etcdlock_hold etcdlock_hold;

/* Checks an endpoint list ("HOST:PORT[,HOST:PORT...]"): LOCK_OK or LOCK_ERR_ARGS.
 * Pure; thread-safe. */
int etcdlock_parse_endpoints(const char *endpoints);

/* etcdlock_new asks the cluster for its status (so a wrong address fails there), and
 * is LOCK_ERR_ARGS also when libcurl cannot be loaded; a failed acquire deletes its key
 * and lease again (best effort: they end with their TTL otherwise); check counts the TTL
 * from the last keep-alive that succeeded (or the grant), and says LOST once a keep-alive
 * found the lease gone; the token is our key's create revision, which grows across every
 * key of the cluster; renew is one keep-alive, as the keep-alive thread sends every third
 * of the TTL; release deletes our key and revokes the lease; ping also wants a leader. */
int etcdlock_new(const etcdlock_config *cfg, etcdlock **out, char *errbuf, size_t errcap);
void etcdlock_free(etcdlock *l);
int etcdlock_acquire(etcdlock *l, const char *name, int timeout_ms, etcdlock_hold **out);
int etcdlock_check(const etcdlock_hold *h);
int64_t etcdlock_token(const etcdlock_hold *h);
int etcdlock_release(etcdlock_hold *h);
int etcdlock_renew(etcdlock *via, etcdlock_hold *h);
int etcdlock_ping(etcdlock *l);
void etcdlock_get_stats(const etcdlock *l, etcdlock_stats *out);
const char *etcdlock_errstr(const etcdlock *l);
const char *etcdlock_strerror(int code);

/* The lease's TTL in seconds as etcd granted it (0 for NULL). */
int etcdlock_ttl(const etcdlock_hold *h);

/* The libcurl that etcdlock_http.c loads at run time (its soname on Debian 12). */
#ifndef ETCDLOCK_LIBCURL
#define ETCDLOCK_LIBCURL "libcurl.so.4"
#endif

#define ETCDLOCK_EP_MAX  280 /* one HOST:PORT of the list, with its NUL */
#define ETCDLOCK_KEY_MAX (32 + ETCDLOCK_NAME_MAX + 1 + 16 + 1) /* prefix name / lease-hex */
#define ETCDLOCK_B64_MAX (((ETCDLOCK_KEY_MAX + 2) / 3) * 4 + 1)

/* gRPC status codes the gateway passes on. */
#define ETCDLOCK_GRPC_DEADLINE_EXCEEDED 4
#define ETCDLOCK_GRPC_NOT_FOUND         5
#define ETCDLOCK_GRPC_UNAVAILABLE       14

typedef curl_api_buf etcdlock_buf;

/* One libcurl easy handle, the endpoint it talks to, and its answer. */
typedef struct etcdlock_conn {
    CURL *easy;
    int ep;
    etcdlock_buf body;
    struct curl_slist *headers;
    char curlerr[CURL_ERROR_SIZE];
} etcdlock_conn;

struct etcdlock_hold {
    etcdlock *l;
    etcdlock_hold *next; /* in l->holds, under l->mu */
    pthread_t thread;
    int64_t lease;
    int ttl_s;
    int64_t rev; /* our key's create revision: the fencing token */
    int margin_ms;
    /* Monotonic: the send time of the grant or of the latest keep-alive that extended
     * the lease, plus the TTL, minus the margin; 0 once a keep-alive found the lease
     * gone. Written by the keep-alive thread, read by check(). */
    atomic_llong valid_until_us;
    atomic_int lost;
    char name[ETCDLOCK_NAME_MAX + 1];
    char key[ETCDLOCK_KEY_MAX];
};

struct etcdlock {
    char ep[ETCDLOCK_ENDPOINTS_MAX][ETCDLOCK_EP_MAX];
    int nep;
    char prefix[33];
    char owner[64]; /* config.owner: every queue key's value */
    int ttl_s, margin_cfg_ms, poll_ms, connect_ms, io_ms;
    const atomic_int *cancel;
    etcdlock_conn cmd, watch, ka;
    CURLM *multi;
    /* The holds (waiting or held) whose leases the keep-alive thread renews. The list
     * is written by the handle's thread and walked by the keep-alive thread, both under
     * mu; the keep-alive thread holds mu for its round trips, so a hold is never freed
     * under it. */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC: wakes the keep-alive thread to stop */
    bool stop, ka_started;
    pthread_t ka_thread;
    int64_t ka_tick_us; /* under mu */
    etcdlock_hold *holds;
    etcdlock_stats st; /* the calling thread's counters */
    atomic_ullong keepalives, keepalive_lost;
    char errstr[512];
};

/* The kind's view (lock_lease_ops.view): the queue of a lock in order; etcdlock_view.c. */
struct lock_view;
int etcdlock__lease_view(void *handle, const char *name, struct lock_view *out);

/* ---------------------------------------------------------------- etcdlock_http.c */

/* Splits an endpoint list into out (may be NULL): the count, or -1 if malformed. */
int etcdlock__split_endpoints(const char *s, char (*out)[ETCDLOCK_EP_MAX]);

/* The base64 of the string s into out (ETCDLOCK_B64_MAX bytes for a key). */
void etcdlock__b64s(const char *s, char *out);

/* A 64-bit field the gateway writes as a decimal string (or, rarely, a number); 0 if
 * missing. */
int64_t etcdlock__j_i64(const cJSON *o, const char *field);
/* The member `field` of o, or NULL (o may be NULL). */
cJSON *etcdlock__j_get(const cJSON *o, const char *field);
/* Adds a 64-bit field as the gateway wants it: a decimal string. */
void etcdlock__j_add_i64(cJSON *o, const char *field, int64_t v);

/* Loads libcurl (ETCDLOCK_LIBCURL) and runs curl_global_init, once per process; any
 * thread. LOCK_OK; LOCK_ERR_ARGS if the library cannot be loaded or lacks a call we
 * use, LOCK_ERR_NOMEM if curl_global_init fails; either way err (may be NULL) says
 * what, and every later call gives the same answer. */
int etcdlock__http_global_init(char *err, size_t errcap);
/* Makes l's three connections and its multi handle: LOCK_OK or LOCK_ERR_NOMEM (what was
 * made is left for etcdlock__http_close). */
int etcdlock__http_open(etcdlock *l);
/* Frees what etcdlock__http_open made; safe on a half-made or zeroed handle. */
void etcdlock__http_close(etcdlock *l);

/* POSTs req to path through c and parses the answer into *out (the caller frees it).
 * Tries each endpoint once, starting with the connection's current one. LOCK_OK; or
 * LOCK_ERR_CONNECTION (no endpoint answered, or every one said unavailable);
 * LOCK_ERR_SERVER (an error answer: *grpc, if not NULL, has its code; the detail goes
 * to err); LOCK_ERR_NOMEM. Any thread, with a connection of its own. */
int etcdlock__conn_call(etcdlock *l, etcdlock_conn *c, const char *path, const cJSON *req,
                        cJSON **out, int *grpc, char *err, size_t errcap);

/* etcdlock__conn_call on the calling thread's connection, counted, with the detail in
 * l->errstr. */
int etcdlock__call(etcdlock *l, const char *path, const cJSON *req, cJSON **out, int *grpc);

/* Waits until the key pred_b64 is deleted at a revision after from_rev. 1 when it was
 * (or the watch ended some other way: look again), 0 at the deadline,
 * LOCK_ERR_CANCELLED, or LOCK_ERR_NOMEM. A watch that cannot connect waits poll_ms and
 * answers 1: the range that follows tells whether etcd is reachable at all. Calling
 * thread only (the `watch` connection and the multi handle). */
int etcdlock__watch_delete(etcdlock *l, const char *pred_b64, int64_t from_rev,
                           int64_t deadline_us);

/* ---------------------------------------------------------------- the queue's range */

/* What the recipe (etcdlock.c) and the view (etcdlock_view.c) both read: the queue of
 * lock `name` is every key from <prefix><name>/ up to <prefix><name>0 ('0' follows
 * '/'). Writes pfx (ETCDLOCK_KEY_MAX bytes) "<prefix><name>/", and that key and the
 * range's end in base64 (ETCDLOCK_B64_MAX bytes each). The name is a valid one. */
static inline void etcdlock__queue_range(const etcdlock *l, const char *name, char *pfx,
                                         char *pfx_b64, char *end_b64) {
    snprintf(pfx, ETCDLOCK_KEY_MAX, "%s%s0", l->prefix, name);
    etcdlock__b64s(pfx, end_b64);
    pfx[strlen(pfx) - 1] = '/';
    etcdlock__b64s(pfx, pfx_b64);
}

/* Adds to range request o the queue's range, in the order the keys were created
 * (`order` "ASCEND": the holder first, or "DESCEND"), at most `limit` keys. */
static inline void etcdlock__j_add_queue_range(cJSON *o, const char *pfx_b64, const char *end_b64,
                                               const char *order, int64_t limit) {
    cJSON_AddStringToObject(o, "key", pfx_b64);
    cJSON_AddStringToObject(o, "range_end", end_b64);
    cJSON_AddStringToObject(o, "sort_order", order);
    cJSON_AddStringToObject(o, "sort_target", "CREATE");
    etcdlock__j_add_i64(o, "limit", limit);
}

#endif
