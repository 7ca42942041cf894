/* stockd.h: the pieces of the stockd executable and how they fit.
 *
 * One request's path (http.c, jobq.c, worker.c, deduct.c, combiner.c, batch.c, cross.c,
 * txn.c, answer.c, and lock/ and db/ below) is told once, in docs/architecture.md ("The
 * path of a request"); the other files:
 *   contract.c pure functions: routing, the id and key parsers, and the mapping from an
 *             outcome to an HTTP status and a JSON body (cJSON). Unit-tested and fuzzed.
 *   config.c  command line, environment and --config file into a stockd_config (pure),
 *             from one table with a row per option.
 *   kvfile.c  the KEY=VALUE file format that --config reads (a systemd EnvironmentFile).
 *   modes.c   the table of --lock words (stockd_modes): each mode's lock kind and
 *             database strategy, and what derives from it (stockd_lock_config; pure).
 *   log.c     one log line per event, text or JSON; it calls nothing else here, so
 *             every file may log without a circle back to main.c.
 *   stockwatch.c off the request path: one thread re-reads from MySQL, once a second,
 *             the stock of the products just served, for /metrics' stockd_product_stock.
 *   main.c    wiring, signals and orderly shutdown.
 * Owner routing (--route owner, docs/routing.md):
 *   owner.c   rendezvous hashing: a product's owner among the view's members (pure).
 *   route.c   the view, the circuit breakers, the test pins and the counters (memory).
 *   frame.c   the frame between instances: build and parse, answers too (pure).
 *   peers.c   the membership in ZooKeeper (modes zk, zk-herd): a node and a watch.
 *   forward.c a leader's frame to the owner, over libcurl (a worker file).
 *   peer_api.c the /peer/ endpoints: a frame's entries queued as hop jobs.
 *
 * Where the memory goes (loadtest/memory measures it; docs/benchmarks.md, "Memory"):
 *   - about 12 MB at rest, two thirds of it the pages of the shared libraries
 *     (libcrypto, GnuTLS, libc), and about 150 KiB per worker for its MySQL connection
 *     (and as much for the stock watch's one, stockwatch.c);
 *   - under load, libmicrohttpd's connection memory: 6 KiB per open connection, all of
 *     it resident (http.c says why it is that size), about 3 MB at 1000 requests in
 *     flight over 3 instances;
 *   - a job lives inside its request's context (one calloc per request, freed when the
 *     answer is sent), so the queue costs nothing of its own; the batch arrays are made
 *     once per worker (worker.c). main.c caps glibc's malloc arenas at 2 (it says why).
 */
#ifndef STOCKD_H
#define STOCKD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "lock.h"
#include "stockdb.h"
#include "stockredis.h"

/* ------------------------------------------------------------------ config */

/* A --lock word is a mode: a row of stockd_modes (modes.c) naming two independent
 * axes, the lock kind (lock/lock.h's registry) and the database strategy
 * (db/stockdb.h). The words users type stay what they were; the enum names the rows
 * the code and tests refer to, in the table's order. */
typedef enum stockd_lock_mode {
    STOCKD_LOCK_NONE = 0,    /* no lock, read-check-update: the seed's first experiment */
    STOCKD_LOCK_LOCAL,       /* one mutex per product inside this process */
    STOCKD_LOCK_ZK,          /* ZooKeeper fair lock + fencing */
    STOCKD_LOCK_ZK_HERD,     /* ZooKeeper non-fair lock (herd effect) + fencing */
    STOCKD_LOCK_FOR_UPDATE,  /* no lock, SELECT ... FOR UPDATE: the row lock is the lock */
    STOCKD_LOCK_ATOMIC,      /* no lock, one conditional UPDATE */
    STOCKD_LOCK_REDIS,       /* Redis lease lock (lock/redislock.c) + fencing */
    STOCKD_LOCK_DB_LOCK,     /* a stock_lock row is the lock (lock/dblock.c) + fencing */
    STOCKD_LOCK_REDLOCK,     /* RedLock over 3..9 Redis servers (lock/redlock.c) + fencing */
    STOCKD_LOCK_ETCD,        /* etcd fair lock with a lease (lock/etcdlock.c) + fencing */
    STOCKD_LOCK_REDIS_STOCK, /* no lock: Redis holds the count (db/stockredis.h), orders later */
} stockd_lock_mode;

/* One row of the table of modes. Adding a lock kind: its file in lock/ with its row
 * in lock/lock_kinds.c, then its row here; adding a strategy: its function in db/ and
 * a row here. The offsets say which stockd_config fields feed the kind's lock_config
 * (0 = none; offset 0 is `bind`, never one of them). */
typedef struct stockd_mode {
    const char *name;          /* the --lock word */
    const char *kind;          /* axis 1: the lock kind's name in lock/lock_kinds.c */
    stockdb_strategy strategy; /* axis 2: how the database deducts */
    /* true: deductions meet in the combiner (combiner.c) and run in batches, each
     * batch under one acquisition of the kind; false: each on its own, without the
     * combiner (kind none only). */
    bool batched;
    size_t addr_off;          /* char[]: the lock service's address */
    size_t user_off;          /* char[]: its user */
    size_t password_off;      /* char[]: its password (zk: the digest USER:PASSWORD) */
    size_t lease_off;         /* unsigned: the lease in ms; 0 = not a lease kind */
    const char *lease_option; /* that lease's option, for messages */
    /* The service the mode keeps its stock in beside MySQL ("redis"), for a kind that
     * takes no lock service; NULL = none. --list-modes prints it where the kind has none. */
    const char *store;
} stockd_mode;

/* The table, in the enum's order; stockd_nmodes rows. */
extern const stockd_mode stockd_modes[];
extern const size_t stockd_nmodes;

/* --pitfall: the two mistakes that oversell most often in real code, each made exactly
 * and nothing else changed (batch.c and txn.c, docs/fence.md, "Two classic mistakes"). */
typedef enum stockd_pitfall {
    STOCKD_PITFALL_NONE = 0,
    /* The lock is released before COMMIT, as when the unlock runs inside a
     * @Transactional method and Spring commits after it returns. */
    STOCKD_PITFALL_RELEASE_BEFORE_COMMIT,
    /* The transaction's REPEATABLE READ snapshot is opened by a read before the lock is
     * taken, so the holder reads the stock as it was before it waited. */
    STOCKD_PITFALL_SNAPSHOT_BEFORE_LOCK,
} stockd_pitfall;

/* --log-format (log.c). */
typedef enum stockd_log_format {
    STOCKD_LOG_TEXT = 0,
    STOCKD_LOG_JSON,
} stockd_log_format;

/* RedLock's server count bounds (lock/redlock.c's REDLOCK_SERVERS_MIN and _MAX; the
 * service links no Redis client, so they are repeated here). A list of etcd members has
 * the same upper bound: an etcd cluster of more than 9 members is slower, not safer. */
#define STOCKD_REDLOCK_MIN 3
#define STOCKD_REDLOCK_MAX 9

/* The most segments a product may be split over (--segments). */
#define STOCKD_SEGMENTS_MAX 256

/* --route: where a deduction is served (docs/routing.md). */
typedef enum stockd_route_kind {
    STOCKD_ROUTE_LOCAL = 0, /* where it lands, as always */
    STOCKD_ROUTE_OWNER,     /* at its product's owner, by rendezvous hashing over the view */
} stockd_route_kind;

typedef struct stockd_config {
    char bind[64];
    unsigned port;
    stockd_lock_mode lock; /* the --lock word: a row of stockd_modes */
    /* The two axes, filled from that row by stockd_config_parse. */
    const char *lock_kind;     /* the lock kind (lock/lock.h's registry) */
    stockdb_strategy strategy; /* the database strategy (db/stockdb.h) */
    char mysql_url[512];
    char zk[512];
    char instance[65];
    unsigned workers;
    unsigned queue_max;
    unsigned lock_timeout_ms;
    unsigned zk_session_ms;
    unsigned max_connections;
    unsigned connection_timeout_s;
    unsigned think_us;            /* pause between check and update, once per batch */
    unsigned think_jitter_us;     /* plus a uniformly random 0..this per pause */
    unsigned batch_max;           /* deductions per lock acquisition (combiner.c) */
    bool precheck;                /* sold out answered from one read before the lock */
    unsigned lock_passes;         /* batches per acquisition while more wait */
    unsigned lock_cache_ms;       /* zk: keep the lock node this long after a batch; 0 = off */
    unsigned cross_products;      /* products one batch may take (try-locked); 1 = one */
    unsigned queue_deadline_ms;   /* 0 = none; see stockd_job.deadline_ns */
    char redis[256];              /* HOST:PORT of the Redis of mode redis; for mode redlock,
                                   * the comma list of its servers */
    unsigned redis_lease_ms;      /* the lease of a Redis (or RedLock) lock acquisition */
    unsigned redis_wait_replicas; /* redis-stock: WAIT for this many replicas; 0 = none */
    unsigned redis_wait_ms;       /* ... at most this long */
    unsigned redis_key_window_s;  /* redis-stock: how long a client's key is remembered */
    unsigned db_lock_lease_ms;    /* the lease of a stock_lock row */
    char etcd[512];               /* HOST:PORT[,HOST:PORT...] of the etcd of mode etcd */
    unsigned etcd_ttl_s;          /* the TTL of an etcd lock's lease, seconds */
    unsigned etcd_lease_ms;       /* the same in ms, set by stockd_config_parse (the mode
                                   * table's lease) */
    /* false only for the paused-holder demonstration: the write carries no fencing
     * token and the commit does not re-check the lock, as a client that trusts its
     * lease would do. */
    bool fence;
    /* 1: the product row holds the stock. K > 1: segments 1..K of product_segment do
     * (sql/schema.sql), each locked as product_N_seg_S (batch.c). */
    unsigned segments;
    /* Issue 20's two classic mistakes, made on purpose (batch.c, txn.c); NONE is the correct
     * order: acquire, read, write, commit, release. */
    stockd_pitfall pitfall;
    stockd_log_format log_format; /* --log-format text|json */
    /* Credentials (docs/operating.md, "Security"). The secrets come from the environment
     * (STOCKD_REDIS_PASSWORD, STOCKD_ZK_AUTH) or from a file main.c reads, never argv. */
    char redis_user[129];          /* ACL user; "" = the default user */
    char redis_password[513];      /* "" = send no AUTH */
    char redis_password_file[512]; /* read by main.c into redis_password */
    char zk_auth[513];             /* "user:password" for digest auth; "" = none */
    char zk_auth_file[512];        /* read by main.c into zk_auth */
    /* --zk-lock-path: where a product's ZooKeeper lock lives, "{id}" standing for its id
     * (checked by config.c; lock_config.path) */
    char zk_lock_path[200];
    char zk_peer_acl[300];      /* --zk-peer-acl SCHEME:ID: lock_config.peer; "" = none */
    char admin_token_file[512]; /* --admin-token-file: read by main.c into admin_token */
    char admin_token[257];      /* POST /stock/restock's Bearer token; "" = restock refused */
    unsigned expiry_ms;         /* --expiry-ms: how often the expiry thread looks (orders.c) */
    /* true: a lease kind's lease must be at least STOCKD_LEASE_MIN_MS(think) (config.c
     * refuses less); false only for the demonstrations of a holder outliving its lease. */
    bool lease_check;
    /* true: a renewer thread extends every lease this process holds at a third of its
     * length (lock/lease_pool.c, Redisson's watchdog); false (the default): a lease is never
     * extended, so a batch must end within it. */
    bool lease_renew;
    /* Owner routing (docs/routing.md; route.c, peers.c, forward.c, peer_api.c). */
    stockd_route_kind route; /* --route local|owner */
    char announce[256];      /* HOST:PORT peers reach this instance at; "" = bind:port */
    char peers[1024];        /* --peers: the static membership, without ZooKeeper */
    char peer_secret_file[512];
    char peer_secret[129];   /* read by main.c from peer_secret_file */
    char route_pin[256];     /* --route-pin ID=HOST:PORT,...: tests only (divergent views) */
    char route_members[200]; /* --route-members: the members' parent node in ZooKeeper */
    bool help;
    bool version;
    bool list_modes; /* --list-modes: print the table of modes and exit (main.c) */
} stockd_config;

/* The shortest lease (ms) a lease kind may run with when a batch pauses up to
 * pause_us (--think-us plus --think-jitter-us): twice the pause plus 200 ms. A batch's
 * time is the pause plus its SQL and COMMIT, and the lease library ends a lease early by
 * its safety margin (a tenth of it); doubling the pause leaves room for a loaded machine
 * stretching it, and 200 ms covers the statements. Below this, most batches would find
 * their lease gone at the pre-commit check and every deduction would fail. */
#define STOCKD_LEASE_MIN_MS(pause_us) ((2 * (uint64_t)(pause_us) + 999) / 1000 + 200)

/* Fills *cfg from the defaults, the --config FILE that argv names (KEY=VALUE lines with
 * the environment's keys), the environment (STOCKD_*) and argv, each winning over the
 * ones before. Returns 0, or -1 with a one-line reason in err (for the file,
 * "FILE:LINE: ..."). Pure apart from reading the environment and that file. */
int stockd_config_parse(stockd_config *cfg, int argc, char **argv, char *err, size_t errlen);
void stockd_config_usage(FILE *out);
/* One line of a KEY=VALUE file: its trimmed key and unquoted value, where it is
 * ("FILE:LINE", for messages) and its line number. 0 goes on; -1 stops the read, with
 * the reason in err. */
typedef int stockd_kvfile_fn(void *arg, const char *key, const char *val, const char *where,
                             unsigned line, char *err, size_t errlen);
/* Calls fn for every KEY=VALUE line of path (kvfile.c says what a line may look like).
 * 0, or -1 with the reason in err ("FILE:LINE: ..." for a bad line or fn's refusal).
 * Pure apart from reading the file. */
int stockd_kvfile_read(const char *path, stockd_kvfile_fn *fn, void *arg, char *err, size_t errlen);
/* Sets cfg->zk_auth from v ("USER:PASSWORD"), as STOCKD_ZK_AUTH or the file of
 * --zk-auth-file give it. 0, or -1 with the reason (naming `name`, never the secret). */
int stockd_config_set_zk_auth(stockd_config *cfg, const char *v, const char *name, char *err,
                              size_t errlen);
const char *stockd_lock_mode_name(stockd_lock_mode m);
int stockd_lock_mode_parse(const char *s, stockd_lock_mode *out);
/* The row of mode m (the first row, none, for a value out of range). Pure. */
const stockd_mode *stockd_mode_of(stockd_lock_mode m);
/* Writes the names of the modes that `pick` keeps (all with NULL) as "a, b or c" into
 * buf and returns buf. The picks: modes that batch; that take a lock (kind not none);
 * whose kind has a lease. Pure (modes.c). */
const char *stockd_mode_list(char *buf, size_t cap, bool (*pick)(const stockd_mode *));
bool stockd_mode_batched(const stockd_mode *m);
bool stockd_mode_locks(const stockd_mode *m);
bool stockd_mode_lease(const stockd_mode *m);
/* May the mode run with --route owner? The batched modes whose lock holds across
 * instances: not local (a process mutex), nor the modes that do not batch. */
bool stockd_mode_routes(const stockd_mode *m);
/* Fills the fields of cfg that follow from its mode (lock_kind, strategy,
 * etcd_lease_ms) and checks the rules between the mode and the other options (a
 * RedLock list, segments, a pitfall, a lease long enough for the pause, --lease-renew).
 * 0, or -1 with the reason in err. Pure (modes.c); stockd_config_parse calls it. */
int stockd_mode_check(stockd_config *cfg, char *err, size_t errlen);

/* ------------------------------------------------------------------ answers */

/* What one request came to, before it is turned into HTTP. */
typedef enum stockd_result {
    STOCKD_R_OK = 0, /* /stock, /health */
    STOCKD_R_DEDUCTED,
    STOCKD_R_SOLD_OUT,
    STOCKD_R_NOT_FOUND,
    STOCKD_R_BAD_REQUEST,
    STOCKD_R_NO_ROUTE,
    STOCKD_R_METHOD_NOT_ALLOWED,
    STOCKD_R_LOCK_TIMEOUT,
    STOCKD_R_LOCK_LOST,
    STOCKD_R_UNAVAILABLE,
    STOCKD_R_OVERLOADED,
    STOCKD_R_UNKNOWN, /* commit outcome could not be confirmed */
    STOCKD_R_URI_TOO_LONG,
    STOCKD_R_HEADERS_TOO_LARGE,
    STOCKD_R_INTERNAL,
    STOCKD_R_KEY_CONFLICT,   /* the Idempotency-Key belongs to an order of another product */
    STOCKD_R_NOT_REPLICATED, /* redis-stock: deducted on the primary, too few replicas have it */
    /* After the deduction (docs/orders.md): */
    STOCKD_R_RESERVED,       /* deducted as a reservation, with its expires_at */
    STOCKD_R_LIMIT_REACHED,  /* the customer holds the product's per_user_limit */
    STOCKD_R_EXPIRED,        /* a payment after the reservation's expiry: nothing changed */
    STOCKD_R_NOT_RESERVED,   /* the order is not reserved (paid, sold, given back) */
    STOCKD_R_NOT_YOUR_ORDER, /* the order is another customer's */
    STOCKD_R_PAID,
    STOCKD_R_CANCELLED,
    STOCKD_R_RESTOCKED,
    STOCKD_R_UNAUTHORIZED, /* restock without a token */
    STOCKD_R_FORBIDDEN,    /* restock with a wrong token or without --admin-token-file; a
                            * /peer/ call without the peers' secret */
    STOCKD_R_COUNT
} stockd_result;

typedef struct stockd_answer {
    stockd_result result;
    int32_t id; /* product id, 0 = none */
    bool has_stock;
    int32_t stock;
    uint64_t order_id; /* 0 = none */
    unsigned segment;  /* the segment deducted from, whose stock `stock` is; 0 = none */
    bool replayed;
    const char *message;    /* NULL = none; not owned */
    const char *order;      /* redis-stock: the order's key in the ledger; NULL = none; not owned */
    const char *expires_at; /* a reservation's expiry, "YYYY-MM-DD HH:MM:SS.ffffff" UTC (rendered
                             * as ISO 8601 with Z); NULL = none; not owned */
    const char *state;      /* an order's state after pay or cancel; NULL = none; not owned */
    bool has_units;         /* GET /stock: the product's orders by state beside the stock */
    int64_t reserved, paid, released;
} stockd_answer;

/* The HTTP status of a result. */
unsigned stockd_answer_status(stockd_result r);
/* The "result" word of a result, e.g. "sold_out". */
const char *stockd_result_name(stockd_result r);
/* Renders the JSON body; the caller frees it with free(). NULL when out of memory. */
char *stockd_answer_json(const stockd_answer *a, const char *instance);

/* Renders /health: {"result":"ok"|"unavailable","mysql":"up"|"down","zookeeper":...,
 * "<service>":...}, where service is the lock service of the mode ("redis", "etcd"),
 * with its state and, when not NULL, its error as "<service>_error". The error texts may
 * be NULL; service NULL leaves it out (the modes without one). The caller frees the
 * result. */
char *stockd_health_json(bool ok, const char *mysql_err, const char *zk_state, const char *zk_err,
                         const char *service, const char *service_state, const char *service_err,
                         const char *lock_mode, const char *instance);

/* Parses a product id: decimal digits only, 1..INT32_MAX, no sign, no spaces, no leading
 * zero, exactly len bytes (so an embedded NUL is refused). Returns 0 or -1 and sets
 * *why to a static reason. */
int stockd_parse_id(const char *s, size_t len, int32_t *out, const char **why);
/* Checks an idempotency key: 1..64 bytes of [A-Za-z0-9_-]. Returns 0 or -1. */
int stockd_check_key(const char *s, size_t len);
/* Checks a customer (user=U or X-User: U): 1..STOCKDB_USER_MAX bytes of [A-Za-z0-9_.@-].
 * Returns 0 or -1. */
int stockd_check_user(const char *s, size_t len);
/* Checks an Authorization header against the admin token: STOCKD_R_OK for exactly
 * "Bearer <token>" (compared in constant time), STOCKD_R_UNAUTHORIZED when the header
 * is absent or not a Bearer one, STOCKD_R_FORBIDDEN for another token or when token is
 * NULL or "" (no --admin-token-file: restock is refused). Pure. */
stockd_result stockd_check_admin(const char *header, size_t len, const char *token);

/* How long ago a proxy in front sent the request, from its X-Request-Start header:
 * "t=<seconds since the epoch>[.<1 to 9 digits of fraction>]" (nginx's "t=${msec}"),
 * exactly len bytes. now_wall_ns is CLOCK_REALTIME in nanoseconds. Returns now_wall_ns
 * minus that time in nanoseconds, or 0 (count from now) for anything else: a value not
 * of that form, a time after now, or one more than STOCKD_REQUEST_START_MAX_AGE_MS
 * before now. Never more than that bound. Pure; any thread. */
#define STOCKD_REQUEST_START_MAX_AGE_MS 60000
uint64_t stockd_request_age_ns(const char *s, size_t len, uint64_t now_wall_ns);

/* Maps a finished deduction or read to an answer. rc is a STOCKDB_* code; lock_rc a
 * LOCK_* code from the acquire (LOCK_OK if there was no lock or it was taken). */
void stockd_answer_from_db(stockd_answer *a, int lock_rc, int rc, const stockdb_result *res);

/* ------------------------------------------------------------------ jobs */

typedef enum stockd_route {
    STOCKD_ROUTE_REDUCE = 0,
    STOCKD_ROUTE_STOCK,
    STOCKD_ROUTE_HEALTH,
    STOCKD_ROUTE_METRICS,
    STOCKD_ROUTE_LOCK_QUEUE,
    STOCKD_ROUTE_ORDER,   /* POST /orders/{order}/pay or /cancel */
    STOCKD_ROUTE_RESTOCK, /* POST /stock/restock */
    STOCKD_ROUTE_ROUTING, /* /route/view, /route/owner: rendered at once (route.c) */
    STOCKD_ROUTE_OTHER,
    STOCKD_ROUTE_COUNT,
} stockd_route;

typedef enum stockd_job_kind {
    STOCKD_JOB_DEDUCT = 0,
    STOCKD_JOB_STOCK,
    STOCKD_JOB_HEALTH,
    STOCKD_JOB_LOCK_VIEW,
    STOCKD_JOB_ORDER,   /* pay or cancel job->order_id (orders.c) */
    STOCKD_JOB_RESTOCK, /* job->units more of job->product_id (orders.c) */
} stockd_job_kind;

/* A request handed from the polling thread to a worker. The polling thread owns it
 * until it is pushed, a worker owns it until it resumes the connection, and then the
 * polling thread sends job->body and frees it in the completion callback. */
typedef struct stockd_job {
    stockd_job_kind kind;
    stockd_route route;
    stockd_result result; /* for metrics; set with status */
    int32_t product_id;
    uint64_t arrived_ns;  /* CLOCK_MONOTONIC when the request arrived (stockd_now_ns),
                           * moved back by the proxy's X-Request-Start (http.c) */
    char request_id[101]; /* the client's Idempotency-Key, or our own unique id; STOCKD_JOB_ORDER:
                           * {order} in a key's form ("" if not), redis-stock's name of it */
    char user[STOCKDB_USER_MAX + 1]; /* the customer (user= or X-User); "" = none */
    uint64_t order_id;               /* STOCKD_JOB_ORDER: the order's row id; 0: none */
    stockdb_event event;             /* STOCKD_JOB_ORDER: pay or cancel */
    int32_t units;                   /* STOCKD_JOB_RESTOCK: how many */
    /* Segmented stock (--segments K > 1, deduct.c): the segment the deduction is at
     * (1..K; 0 before its first), how many segments it has found empty so far, and how
     * many times it began the walk again because the whole stock read after one showed
     * a unit (a restock during its walk). */
    uint16_t segment, segs_empty, rewalks;
    bool handed; /* its slot was handed to the worker that pops it (combiner.c) */
    /* Owner routing (docs/routing.md). hop: it came forwarded (a frame's entry, or a
     * request with X-Stockd-Hop), so it is served here, never forwarded again. fwd: the
     * request whole as frame.c's JSON (stockd_frame_request), made by http.c when it
     * may be forwarded; freed with the job. frame: the peer frame it is an entry of
     * (peer_api.c), which gets its answer instead of a connection. */
    bool hop;
    bool hop_side; /* it waits in the workers' hop-side combiner (deduct.c) */
    /* A frame carrying it was sent to the owner and not answered (forward.c): the owner
     * may have deducted it. It is served here under its request id, and never answered
     * with a result that says nothing was deducted (answer.c answers `unknown` instead). */
    bool in_doubt;
    char *fwd;
    void *frame;
    void *conn;      /* struct MHD_Connection *, resumed by the worker */
    unsigned status; /* answer, filled by the worker */
    char *body;
    bool done;
    struct stockd_job *next;
} stockd_job;

typedef struct stockd_jobq stockd_jobq;

stockd_jobq *stockd_jobq_new(unsigned max);
void stockd_jobq_free(stockd_jobq *q);
/* Appends a job; returns 0, or -1 if the queue is full or closed (the job stays the
 * caller's). Any thread. */
int stockd_jobq_push(stockd_jobq *q, stockd_job *job);
/* Puts a job that a worker has begun back at the head of the queue, past the limit and
 * also once the queue is closed (closing still hands out what is queued, and the caller
 * is a worker that pops again), so it is never refused. Worker threads. */
void stockd_jobq_requeue(stockd_jobq *q, stockd_job *job);
/* Waits for a job and takes the oldest; NULL once the queue is closed and empty. Any
 * thread. */
stockd_job *stockd_jobq_pop(stockd_jobq *q);
/* Refuses further pushes and wakes the poppers; queued jobs are still handed out. */
void stockd_jobq_close(stockd_jobq *q);

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t stockd_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ combiner */

/* Combining of deductions (combiner.c), so that one lock acquisition serves every
 * deduction that queued up behind it. A slot is what one lock guards: a product, or one
 * segment of it (job->segment; 0 = the product is not split). docs/architecture.md
 * names a slot's states and draws their diagram. Thread-safe; never blocks on I/O. A
 * job in the combiner belongs to its slot's leader (or future leader), which must
 * answer it. Each step of a leader is one call with its own small set of outcomes. */
typedef struct stockd_combiner stockd_combiner;

/* Makes a combiner with its two bounds on leaders (0 = no bound):
 *   max_leaders  LED slots of one split product (its segments), so that a hot product
 *                never ties up every worker; a new segment slot past it waits;
 *   cross        leaders in all, for batches across products (--cross-products): a new
 *                slot of an unsplit product past it waits, to be claimed by a leader's
 *                batch, taken over by a leader done with its own, or handed to a worker.
 * NULL when out of memory. */
stockd_combiner *stockd_combiner_new(unsigned max_leaders, unsigned cross);
void stockd_combiner_free(stockd_combiner *c); /* no slot may be open; NULL is a no-op */

/* Adds a deduction to its slot. A new slot, or a WAITING one nobody leads, is LED by
 * the caller when the bounds allow it (LEADER; the job waits in it too); otherwise the
 * job waits (FOLLOWER). A job handed over by stockd_combiner_busy (job->handed) goes
 * back to the head of its slot, which the caller now leads (LEADER). */
typedef enum {
    STOCKD_ENTERED_LEADER,
    STOCKD_ENTERED_FOLLOWER,
    STOCKD_ENTERED_NOMEM
} stockd_entered;
stockd_entered stockd_combiner_enter(stockd_combiner *c, stockd_job *job);
/* Leader only: moves up to max waiting jobs of the slot, oldest first, into out; only
 * jobs that arrived before arrived_before_ns (UINT64_MAX = all). Returns how many. */
unsigned stockd_combiner_take(stockd_combiner *c, int32_t product_id, unsigned segment,
                              stockd_job **out, unsigned max, uint64_t arrived_before_ns);
/* Leader only: puts jobs[0..n-1] (taken from the slot) back at its head, in that order,
 * for this pass to serve them (a failed forward, forward.c). */
void stockd_combiner_putback(stockd_combiner *c, int32_t product_id, unsigned segment,
                             stockd_job **jobs, unsigned n);
/* Jobs waiting in the slot (0 if none is open). */
unsigned stockd_combiner_waiting(stockd_combiner *c, int32_t product_id, unsigned segment);

/* The leader's steps, one call per moment, on the slot it leads (product_id, segment):
 *
 * Before it waits for the slot's lock: TRY when the wait could hold others up (another
 * product waits with no leader, or the leaders are at the cross bound): try the lock
 * first, and if it is busy, call stockd_combiner_busy. WAIT otherwise. */
typedef enum { STOCKD_PLAN_WAIT, STOCKD_PLAN_TRY } stockd_lock_plan;
stockd_lock_plan stockd_combiner_before_lock(stockd_combiner *c, int32_t product_id,
                                             unsigned segment);
/* A try found the lock busy. PASSED when another WAITING slot not found busy lately
 * exists: this slot waits (not picked for busy_ns) and the worker leads that one instead
 * (*product_id, *segment). ASIDE otherwise: the worker waits for its lock without
 * counting toward the cross bound (its next take counts it again), so that a new
 * product gets a leader of its own; and the oldest WAITING slot nobody leads, if the
 * bounds allow one more leader, is handed to another worker: its first job comes back
 * in *handed (job->handed set), for the caller to put at the head of the job queue. */
typedef enum { STOCKD_BUSY_PASSED, STOCKD_BUSY_ASIDE } stockd_busy_step;
stockd_busy_step stockd_combiner_busy(stockd_combiner *c, int32_t *product_id, unsigned *segment,
                                      uint64_t busy_ns, stockd_job **handed);
/* A batch is over and the lock let go (or the wait for it failed). AGAIN while jobs
 * wait in the slot; else the slot closes, and the worker either takes over the oldest
 * WAITING slot it may lead, busy or not (MOVED: *product_id, *segment), or leads no
 * more (CLOSED). */
typedef enum { STOCKD_AFTER_AGAIN, STOCKD_AFTER_MOVED, STOCKD_AFTER_CLOSED } stockd_after_step;
stockd_after_step stockd_combiner_done(stockd_combiner *c, int32_t *product_id, unsigned *segment);

/* Batches across products, leader only: claims up to max WAITING slots of unsplit
 * products not found busy lately, oldest first job first, and writes their product ids
 * to out; the caller leads them for one batch (take, then unclaim). Returns how many;
 * 0 without the cross bound. */
unsigned stockd_combiner_claim(stockd_combiner *c, int32_t *out, unsigned max);
/* Gives a claimed slot back: closed if no job waits, else WAITING again. busy_ns > 0:
 * its lock was found busy, so no claim (nor a pass) picks it for that long (a try of a
 * busy ZooKeeper lock costs three operations, and its node makes a holder that cached
 * the lock let it go); a takeover or a hand-over still may, and waits for it. */
void stockd_combiner_unclaim(stockd_combiner *c, int32_t product_id, uint64_t busy_ns);

/* ------------------------------------------------------------------ locks */

/* The product locks are lock/lock.h's: main.c makes the set of cfg->lock_kind
 * (stockd_lock_config fills its lock_config) and batch.c takes product_N or
 * product_N_seg_S. Every code is a LOCK_* of lock/lock_codes.h. */

/* Fills *out from cfg for the kind of cfg's mode: the address, credentials and lease
 * its row names, the lock timeout, one holder per worker, the watchdog and the
 * instance. Pointers into cfg and db are kept, so both must outlive the set. log, if
 * not NULL, is the set's logger. Pure. */
void stockd_lock_config(const stockd_config *cfg, const stockdb_config *db, lock_config *out);

/* ------------------------------------------------------------------ routing */

/* One query parameter as libmicrohttpd decoded it; value may be NULL ("?id"). */
typedef struct stockd_param {
    const char *key;
    size_t key_len;
    const char *value;
    size_t value_len;
} stockd_param;

#define STOCKD_MAX_PARAMS 16
/* The largest URI (path and query, as decoded) and header block (names and values)
 * stockd serves; larger ones are answered 414 / 431. Each stays below the 6 KiB
 * connection memory of http.c (which holds the raw head, about 5.4 KiB of it), so a
 * head over a limit but within that memory gets stockd's JSON answer, not
 * libmicrohttpd's. Our own requests are a few hundred bytes; 4 KiB leaves room for long
 * keys and a proxy's headers. The text forms are for the answers. */
#define STOCKD_MAX_URI_BYTES        4096
#define STOCKD_MAX_HEADER_BYTES     4096
#define STOCKD_MAX_URI_BYTES_STR    "4096"
#define STOCKD_MAX_HEADER_BYTES_STR "4096"

/* A request as far as routing needs it. Nothing is owned. */
typedef struct stockd_request_in {
    const char *method;
    const char *path;
    const stockd_param *params;
    size_t nparams;
    bool params_truncated; /* there were more than STOCKD_MAX_PARAMS */
    const char *idem_key;  /* the Idempotency-Key header, NULL if absent */
    size_t idem_key_len;
    unsigned idem_keys; /* how many Idempotency-Key headers came (idem_key is the first) */
    const char *user;   /* the X-User header, NULL if absent */
    size_t user_len;
    unsigned users; /* how many X-User headers came */
    size_t body_bytes;
    size_t uri_bytes;    /* path plus decoded query parameters */
    size_t header_bytes; /* header names plus values */
} stockd_request_in;

/* What routing decided. If error != STOCKD_R_OK the request is answered at once with
 * it (message and, for 405, allow). Otherwise route METRICS is rendered at once and
 * any other route becomes a job of `kind` for product_id; key (not NUL-terminated,
 * pointing into the input) is the client's idempotency key, NULL if none. */
typedef struct stockd_routed {
    stockd_route route;
    stockd_job_kind kind;
    stockd_result error;
    const char *message;
    const char *allow;
    int32_t product_id;
    const char *key;
    size_t key_len;
    const char *user; /* the customer (query or X-User), pointing into the input; NULL if none */
    size_t user_len;
    uint64_t order_id;   /* route ORDER: the order's row id; 0 if {order} is not one */
    stockdb_event event; /* route ORDER: pay or cancel */
    /* route ORDER: {order} when it has a request key's form (NULL if not): mode redis-stock
     * names an order by the key its deduction answered (docs/orders.md). */
    const char *order;
    size_t order_len;
    int32_t units; /* route RESTOCK */
} stockd_routed;

/* Routes a request. Pure; any thread. */
void stockd_route_request(const stockd_request_in *in, stockd_routed *out);

/* The headers a forwarded deduction carries (contract.c): the ONE list of the headers
 * stockd reads from a request, so that a deduction crosses instances whole (the seam
 * with issue 42's customer, X-User). NULL-terminated. */
extern const char *const stockd_forwarded_headers[];
/* Adds header `name` to *in: its bytes to header_bytes, and for the headers of
 * stockd_forwarded_headers their value (the first of each) and count. http.c calls it for
 * every header of a request, frame.c for those of a rebuilt one, so both read a header
 * alike. Pure. */
void stockd_request_set_header(stockd_request_in *in, const char *name, const char *value,
                               size_t len);
/* The result whose "result" word is name; 0, or -1 if none. Pure. */
int stockd_result_parse(const char *name, stockd_result *out);
/* Checks a request id a frame carries: a client's key (stockd_check_key) or stockd's own
 * "i/<16 hex>/<digits>" (http.c). 0 or -1. Pure. */
int stockd_check_request_id(const char *s);
/* The refusal of an {order} that names no order of the mode (contract.c, orders.c). */
extern const char stockd_order_id_rule[];

/* ------------------------------------------------------------------ owner routing */

/* docs/routing.md tells the design. owner.c (pure): rendezvous hashing. */
#define STOCKD_ADDR_MAX  256 /* one HOST:PORT */
#define STOCKD_PEERS_MAX 64  /* members of a view */
/* A member's score for a product; the highest owns it. Pure. */
uint64_t stockd_owner_score(const char *member, int32_t product_id);
/* The index of product_id's owner among members[0..n-1] (-1 when n is 0). Pure. */
int stockd_owner_pick(const char *const *members, size_t n, int32_t product_id);

/* route.c: the view, the breakers, the pins and the counters of this process. Any
 * thread, memory only. */
typedef enum stockd_owner { STOCKD_OWNER_SELF, STOCKD_OWNER_PEER } stockd_owner;
typedef enum stockd_route_counter {
    STOCKD_RC_FORWARDED = 0,    /* deductions sent to their owner in frames */
    STOCKD_RC_FRAMES,           /* frames sent */
    STOCKD_RC_FRAME_DEDUCTIONS, /* deductions received in peers' frames, served here */
    STOCKD_RC_LOCAL_FALLBACKS,  /* deductions served here because the forward failed */
    STOCKD_RC_REFUSED_HOPS,     /* forwarded deductions this view gives to another: served
                                 * here, never forwarded twice */
    STOCKD_RC_COUNT,
} stockd_route_counter;
/* Main thread, before the others: this instance's address (--announce, else
 * --bind:--port), the static view of --peers unless zk (peers.c then sets the members),
 * and --route-pin. 0, or -1 with the reason. */
int stockd_route_setup(const stockd_config *cfg, bool zk, char *err, size_t errlen);
/* A new view: addrs[0..n-1] (copied) and its number. */
void stockd_route_set_members(const char *const *addrs, size_t n, uint64_t view);
bool stockd_route_on(void);
const char *stockd_route_self(void);
uint64_t stockd_route_view(void);
/* forward.c: loads libcurl for the forwards (--route owner). 0, or -1 with the reason.
 * Main thread, before the workers start. */
int stockd_forward_init(char *err, size_t errlen);
/* peers.c: the membership in ZooKeeper (modes zk, zk-herd): this instance's ephemeral
 * node under --route-members (default /stockd/members), and a thread that keeps route.c's view as
 * the children are, the view numbered by the parent's child version. 0, or -1 with the reason. Main
 * thread. */
int stockd_peers_start(const stockd_config *cfg, char *err, size_t errlen);
void stockd_peers_stop(void); /* a no-op if never started */
/* Who owns the product: SELF, or PEER with its address in addr. A pin wins; otherwise
 * rendezvous over the members whose circuit is not open (this one always counts). */
stockd_owner stockd_route_owner(int32_t product_id, char *addr, size_t cap);
/* May a forward go to addr now (its circuit closed, or half-open and this the try)? */
bool stockd_route_breaker_allow(const char *addr);
/* A forward to addr answered (ok) or failed. */
void stockd_route_breaker_note(const char *addr, bool ok);
void stockd_route_count(stockd_route_counter c, uint64_t n);
typedef struct stockd_route_stats_t {
    bool on;
    uint64_t count[STOCKD_RC_COUNT];
    uint64_t view;
    size_t members, npeers;
    char peer[STOCKD_PEERS_MAX][STOCKD_ADDR_MAX]; /* the peers forwarded to so far */
    bool open[STOCKD_PEERS_MAX];                  /* ... and whether each circuit is open */
} stockd_route_stats_t;
void stockd_route_stats(stockd_route_stats_t *out);
/* GET /route/view and /route/owner?id=N: JSON the caller frees; NULL when out of memory. */
char *stockd_route_view_json(void);
char *stockd_route_owner_json(int32_t product_id);

/* frame.c (pure): the frame between instances (docs/routing.md, "The frame"). */
#define STOCKD_FRAME_MAX     1024 /* entries; --batch-max's bound */
#define STOCKD_FRAME_MAX_STR "1024"
/* The request whole as JSON: {"method","path","params":[[k,v|null]...],"headers":[...]}.
 * Caller frees; NULL when out of memory. */
char *stockd_frame_request(const char *method, const char *path, const stockd_param *params,
                           size_t nparams, const stockd_param *headers, size_t nheaders);
typedef struct stockd_frame_out {
    const char *request;    /* stockd_frame_request's JSON, embedded as it is */
    const char *request_id; /* the id it is served under, at either end */
    unsigned deadline_ms;   /* what the owner has left of it; 0 = no deadline */
} stockd_frame_out;
/* {"from","view","entries":[{"request":{...},"request_id","deadline_ms"}...]}; caller frees. */
char *stockd_frame_build(const char *from, uint64_t view, const stockd_frame_out *entries,
                         size_t n);
typedef struct stockd_frame_entry {
    stockd_request_in in; /* rebuilt: route it with stockd_route_request */
    stockd_param params[STOCKD_MAX_PARAMS];
    const char *request_id;
    unsigned deadline_ms; /* 0 = none */
} stockd_frame_entry;
typedef struct stockd_frame {
    void *root; /* the parsed JSON, which the entries point into */
    size_t n;
    stockd_frame_entry *e;
} stockd_frame;
/* Parses a frame; NULL, or why it is malformed (then nothing may be served from it).
 * Free with stockd_frame_free either way. */
const char *stockd_frame_parse(const char *body, size_t len, stockd_frame *out);
void stockd_frame_free(stockd_frame *f);
typedef struct stockd_frame_answer {
    unsigned status;
    stockd_result result;
    const char *body; /* the answer's JSON, relayed verbatim */
} stockd_frame_answer;
/* {"answers":[{"status","result","body"}...]} in entry order; caller frees. */
char *stockd_frame_answers(const stockd_frame_answer *a, size_t n);
/* Parses an owner's answers into out[0..n-1] (bodies point into the returned handle,
 * freed with stockd_frame_answers_free); NULL unless exactly n well-formed answers. */
void *stockd_frame_answers_parse(const char *body, size_t len, stockd_frame_answer *out, size_t n);
void stockd_frame_answers_free(void *root);

/* ------------------------------------------------------------------ workers */

typedef struct stockd_workers stockd_workers;

/* What the workers share; all pointers are borrowed for the workers' lifetime. */
typedef struct stockd_ctx {
    const stockd_config *cfg;
    stockdb_config db;
    stockd_jobq *queue;
    lock_set *locks; /* the product locks of the mode's kind (lock/lock.h) */
    /* Called by a worker once a job's answer is set; resumes the HTTP connection. */
    void (*complete)(stockd_job *job);
} stockd_ctx;

/* GET /lock/queue?id=N (lockview.c): the lock service's view of product N's lock as
 * JSON, read through ctx->locks (lock_view_read) on the calling worker, answered with
 * ctx->complete. Bounded: at most one read at a time per process and one per product
 * every STOCKD_LOCKVIEW_FRESH_MS; a request meanwhile gets the last view. */
#define STOCKD_LOCKVIEW_FRESH_MS 200
void stockd_lockview_serve(stockd_ctx *ctx, stockd_job *job);

/* Starts cfg->workers threads. Returns NULL on failure (threads already started are
 * stopped). Main thread only. */
stockd_workers *stockd_workers_start(stockd_ctx *ctx);
/* Waits for the workers to drain the (closed) queue and exit, then frees them. */
void stockd_workers_join(stockd_workers *w);

/* ------------------------------------------------------------------ http */

typedef struct stockd_http stockd_http;

stockd_http *stockd_http_start(stockd_ctx *ctx, char *err, size_t errlen);
/* Stops accepting new connections; requests already queued still get answers. */
void stockd_http_quiesce(stockd_http *h);
/* Waits up to ms for answers in flight to be sent, then stops and frees. */
void stockd_http_stop(stockd_http *h, unsigned ms);
/* Resumes the job's connection (the ctx->complete callback). Any thread. */
void stockd_http_complete(stockd_job *job);

/* ------------------------------------------------------------------ metrics */

typedef enum stockd_dberr {
    STOCKD_DBERR_CONNECT = 0,
    STOCKD_DBERR_QUERY,
    STOCKD_DBERR_DEADLOCK,
    STOCKD_DBERR_FENCED,
    STOCKD_DBERR_GUARD,
    STOCKD_DBERR_UNKNOWN,
    STOCKD_DBERR_COUNT,
} stockd_dberr;

/* Counting; any thread, lock-free. */
void stockd_metrics_request(stockd_route route, stockd_result result);
void stockd_metrics_db_error(int stockdb_rc); /* ignores OK and NOT_FOUND */
void stockd_metrics_deduction(uint64_t ns);
void stockd_metrics_lock_wait(uint64_t ns);
void stockd_metrics_batch(unsigned n); /* deductions served by one acquisition */
void stockd_metrics_batch_products(unsigned n, unsigned busy); /* products in one batch, and
                                                                * tried locks found busy */
void stockd_metrics_cross_busy(void);        /* a leader's own product's lock, tried, was busy */
void stockd_metrics_statements(uint64_t n);  /* MySQL statements sent */
void stockd_metrics_precheck(bool sold_out); /* a pre-check read, and its answer */
/* The transactions an abort makes stockd run again (stockd_txn_retries_total's label). */
typedef enum stockd_txn {
    STOCKD_TXN_DEDUCTION, /* a deduction, a batch, a cross-product batch */
    STOCKD_TXN_ORDER,     /* after it: pay, cancel, the expiry's release, restock */
    STOCKD_TXN_COUNT
} stockd_txn;
void stockd_metrics_txn_retry(stockd_txn what); /* an aborted transaction run again */
void stockd_metrics_combined(void);             /* a deduction handed to the combiner */
void stockd_metrics_segment_move(void);         /* a deduction moved on from an empty segment */
/* The Prometheus text exposition; the caller frees it. NULL when out of memory. The
 * lock counters come from locks (lock_get_stats; NULL = none). Reads memory only, so
 * the polling thread may call it. */
char *stockd_metrics_render(const stockd_config *cfg, lock_set *locks);

/* ------------------------------------------------------------------ stock watch */

/* The stock of the products this instance serves, as read back from MySQL once a
 * second for the stockd_product_stock gauge (stockwatch.c says why not the stock a
 * deduction believes it left). At most STOCKWATCH_MAX products: every one that reads
 * negative, then the most recently served. */
#define STOCKWATCH_MAX 1000

typedef struct stockd_stock_reading {
    int32_t product_id;
    int32_t stock;
    bool has_count;  /* mode redis-stock: the product's count in Redis was read */
    long long count; /* ... and is this */
} stockd_stock_reading;

/* Mode redis-stock: the order stream's backlog for the writers, read once a second with
 * the counts (XINFO GROUPS: lag and pending). known false before the first read or
 * after a failed one. */
typedef struct stockd_stream_backlog {
    bool known;
    long long undelivered, pending;
} stockd_stream_backlog;

/* Notes a stock just read or left by a committed deduction: the product is marked as
 * served (its stock is read again within a second), and its sold-out hint set from
 * stock <= 0. Any thread; never blocks on I/O. */
void stockd_stockwatch_note(int32_t product_id, int32_t stock);
/* The sold-out hint: true if the last stock noted for the product was <= 0 (a hint,
 * not an answer: the caller reads before it answers). Lock-free, any thread; works
 * whether or not the watch thread runs. */
bool stockd_stockwatch_sold_out(int32_t product_id);
/* Starts the thread that reads the marked products, on a MySQL connection of its own
 * (db copied; instance at most STOCKDB_INSTANCE_MAX bytes). redis: mode redis-stock's
 * Redis (copied, with its strings), whose counts and stream backlog it reads too on a
 * connection of its own; NULL in the other modes. 0, or -1 if the thread could not
 * start. Main thread, after stockdb_global_init(). */
int stockd_stockwatch_start(const stockdb_config *db, const char *instance,
                            const stockredis_config *redis);
/* Stops and joins that thread (a read in flight ends first). Main thread; a no-op if
 * it never started. */
void stockd_stockwatch_stop(void);
/* Copies up to max readings (products read at least once) into out; returns how many.
 * Memory only: the polling thread may call it. */
size_t stockd_stockwatch_snapshot(stockd_stock_reading *out, size_t max);
/* The stream's backlog as last read (mode redis-stock). Memory only. */
void stockd_stockwatch_backlog(stockd_stream_backlog *out);
/* Reads made (found or not found) and reads that failed, so far. */
void stockd_stockwatch_counts(uint64_t *reads, uint64_t *errors);

/* ------------------------------------------------------------------ log */

/* log.c: one line per call on stderr, never interleaved. --log-format text (time,
 * instance, level: message) or json (one object per line: time, level, instance,
 * message), for log shippers. */
/* Sets the instance name and the format; main thread, before the other threads. */
void stockd_log_setup(const char *instance, stockd_log_format format);
/* Logs one line with time, level and instance. Thread-safe. */
void stockd_log(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
