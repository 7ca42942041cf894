/* zklock_int.h: private to lock/. The session's shared state, the connection
 * (one zhandle and its ZooKeeper session) and the helpers the zklock files share.
 *
 * Layers: a file calls only files of a lower layer, never its own or up.
 *   0. zklock_queue.c    the fair lock's queue: which children contend, in what order,
 *                        and what a listing means to one contender (pure);
 *   1. zklock_conn.c     a connection: open/close, watchers, references, sync, cleanup
 *                        by GUID (zklock_cleanup), the small clock and counting helpers;
 *   2. zklock_hold.c     a hold: its state, token, the deletion of its node
 *                        (zklock_release), and the name, GUID and path helpers;
 *   3. zklock_cache.c    the lock cache: hand-over, children watch, sweep, release_cached;
 *   4. zklock.c          the acquisition recipes (zklock_acquire), which try the cache's
 *                        hand-over first;
 *      zklock_session.c  the session's life and its maintenance thread, which runs
 *                        layer 1's cleanups and layer 3's sweep;
 *      zklock_view.c     a lock's queue as the server has it, for a view (lock.h);
 *   5. zklock_many.c     many tries and releases in one round trip;
 *   6. zklock_kind.c     the registry row of lock.h.
 * tests/file_layers.sh (ctest no_file_circle_in_lock) prints the calls between the files
 * from their symbol tables and fails on a circle.
 *
 * Locking rule: one mutex per session (s->mu) guards everything below. It is never
 * held across a ZooKeeper call: the library's completion thread runs our watchers,
 * which take s->mu, and a synchronous call waits for that thread. */
#ifndef ZKLOCK_INT_H
#define ZKLOCK_INT_H

#include <pthread.h>
#include <stdint.h>
#include <zookeeper.h>

#include "zklock.h"

#define ZKLOCK_GUID_LEN 32 /* hex digits of a 128-bit random id */

/* Our view of a connection's state, written by the session watcher. */
enum { ZKLOCK_CONN_CONNECTING = 0, ZKLOCK_CONN_CONNECTED, ZKLOCK_CONN_EXPIRED };

/* One zhandle and the ZooKeeper session it carries. A session that expires is
 * replaced by a new zklock_conn with a higher epoch; the old one is closed by the
 * maintenance thread once nobody uses it (refs == 0). Nodes made through a
 * connection remember its epoch: a node of an older epoch is gone with its session. */
typedef struct zklock_conn {
    zklock_session *s;
    zhandle_t *zh;
    uint64_t epoch;
    int64_t session_id; /* set at the first CONNECTED event, then fixed */
    int state;          /* ZKLOCK_CONN_* */
    int refs;           /* threads inside a ZooKeeper call on zh */
    int timeout_ms;     /* the session timeout the server granted, 0 until connected */
} zklock_conn;

/* A thread inside zklock_acquire (or zklock_session_new). It sleeps on its own
 * condition variable, so a watch wakes exactly the thread it was set for. */
typedef struct zklock_waiter {
    struct zklock_waiter *next;
    pthread_cond_t cond;
    uint64_t watch_id;    /* the watch this waiter sleeps on, 0 = none */
    int fired;            /* that watch fired */
    int deleted;          /* ... because its node was deleted */
    uint64_t cache_watch; /* an acquisition's children watch (config.cache), 0 = none */
    int cache_fired;      /* ... it fired before the hold took it over */
} zklock_waiter;

/* A node that must still be deleted once the connection is back (same session):
 * a release whose delete lost its connection, or an acquisition that gave up
 * while a create's reply was lost. Dropped if the session expires (the node went
 * with it). Fair: every child of `path` (the lock's parent) carrying `guid`.
 * Herd: the node `path` if its data is `guid` and our session owns it. */
typedef struct zklock_cleanup {
    struct zklock_cleanup *next;
    uint64_t epoch;
    zklock_kind kind;
    char *path;
    char guid[ZKLOCK_GUID_LEN + 1];
} zklock_cleanup;

struct zklock_hold {
    zklock_session *s;
    struct zklock_hold *next; /* in s->holds */
    pthread_t owner;
    zklock_kind kind;
    int count;      /* reentrancy depth */
    int lost;       /* the session that made our node expired */
    int sweep;      /* a create's reply was lost: release deletes by GUID */
    uint64_t epoch; /* of the connection that made the node */
    int64_t token;  /* czxid of the node */
    /* The cache (zklock_release_cached), all under s->mu. While `cached`, the hold has no
     * thread: count is 0, owner is meaningless, and only the session touches it. */
    int waited;           /* the acquisition waited behind another node: never cached */
    int cached;           /* kept after its last release, owned by the session */
    int contended;        /* the children watch fired: let go at the next release */
    int64_t cache_until;  /* ms: a cached hold not taken again by then is let go */
    uint64_t cache_watch; /* id of the armed children watch on parent, 0 = none */
    char guid[ZKLOCK_GUID_LEN + 1];
    char *name;
    char *parent; /* fair: <root>/<name>; herd: <root> */
    char *path;   /* our node */
};

struct zklock_session {
    char *hosts;
    char *root;
    char *auth;                          /* "USER:PASSWORD" for digest auth, or NULL */
    const struct ACL_vector *acl;        /* of our lock nodes: creator-only with auth */
    const struct ACL_vector *parent_acl; /* of the root path and the lock parents */
    struct ACL acls[4];                  /* with a peer: acl's entries, then parent_acl's */
    struct ACL_vector peer_acl, peer_parent_acl;
    char *peer; /* config.peer, split at its first ':' in place */
    int session_timeout_ms;
    int connect_timeout_ms;
    int cache;      /* config.cache: the first listing of a fair acquisition is watched */
    char owner[64]; /* config.owner: every fair node's data */

    pthread_mutex_t mu;
    pthread_cond_t maint_cond; /* wakes the maintenance thread */
    zklock_conn *conn;         /* current connection, never NULL after new() */
    uint64_t last_epoch;
    uint64_t last_watch;
    uint64_t state_seq; /* bumped on every connection state change */
    int cancelled;
    int stopping;
    zklock_waiter *waiters;
    zklock_hold *holds;
    zklock_cleanup *cleanups;
    zklock_stats stats;
    pthread_t maint;
    int maint_started;
    int64_t maint_tick_ms; /* when the maintenance thread last went round (monotonic) */
    int64_t maint_boot_ms; /* the same on zklock__boot_ms, for the pause check */
};

/* ---- layer 0, zklock_queue.c */

/* The queue of a fair lock: which children of its parent contend, and in what order.
 * stockd shares it with the implementations whose names it knows (docs/zookeeper-lock.md,
 * "Sharing the lock with Curator and kazoo"): a child contends when its name ends in a
 * lock marker, "-lock-" (stockd's "<guid>-lock-", Curator's "_c_<uuid>-lock-", and any
 * other "-lock-" name, as go-zookeeper's) or "__lock__" (kazoo's "<uuid>__lock__"), or is
 * ZooKeeper's own C recipe's "x-<session>-" (zoo_lock.c), then the 10-digit sequence
 * ZooKeeper appended; all of them order by that sequence. Contenders are ordered by it,
 * numerically, until the parent's counter reaches ZooKeeper's limit (2^31-1): a
 * contender at the limit (2147483647, or signed) is ordered after every other and never
 * holds (zklock__decide's at_limit: LOCK_ERR_SEQ_LIMIT). Any other child is a stray: it
 * neither holds nor waits, so nobody waits for it; it is counted
 * (zklock_stats.strays_seen) and the view shows it. */

/* The sequence text at the end of a contender's name, or NULL for a stray. */
const char *zklock__contender_seq(const char *name);
/* Is a sequence text (zklock__contender_seq's, or NULL) at ZooKeeper's limit? 1 or 0. */
int zklock__seq_at_limit(const char *seq);
/* A contender's sequence as a number (negative if signed), or INT64_MIN for a stray. */
int64_t zklock__child_seq(const char *name);
/* Orders two contenders (<0, 0, >0): by sequence, those at the limit after all others,
 * then by name. */
int zklock__contender_cmp(const char *a, const char *b);
/* Who made a child, from its name alone: "stockd", "curator" (its protected name,
 * "_c_<uuid>-lock-<seq>"), "kazoo" ("__lock__"), "zoolock" (ZooKeeper's C recipe,
 * "x-<session>-<seq>"), "other" (another "-lock-" contender, as go-zookeeper's), or
 * "stray" (no contender). For the view. */
const char *zklock__contender_impl(const char *name);
/* Is `name` a node that stockd made with `guid` ("<guid>-lock-<seq>")? 1 or 0. Only such
 * nodes are ever adopted or swept by GUID, never another implementation's. */
int zklock__own_child(const char *name, const char *guid);

/* What one listing says to a contender whose node is `mine`. */
typedef struct zklock_decision {
    int found;        /* mine is in the listing (else it was deleted under us) */
    int holds;        /* found, and no contender is below it: the lock is ours */
    const char *pred; /* else the greatest contender below mine, the one to watch */
    int below, above; /* other contenders below and above mine */
    int twins;        /* other nodes of ours (guid): late copies of a lost create */
    int strays;       /* children that are not contenders */
    int at_limit;     /* mine is at the sequence limit: it never holds (LOCK_ERR_SEQ_LIMIT) */
} zklock_decision;

/* The recipe's decision, a pure function of the listing (pointers into kids). With
 * guid, our own other nodes are twins, neither below nor above. */
void zklock__decide(const struct String_vector *kids, const char *mine, const char *guid,
                    zklock_decision *d);

/* ---- layer 1, zklock_conn.c */

/* Milliseconds of CLOCK_MONOTONIC. */
int64_t zklock__now_ms(void);
/* Milliseconds of CLOCK_BOOTTIME, which goes on while the machine is suspended: the
 * clock of the pause check (zklock_cache.c), as the session expires on the server in
 * real time. */
int64_t zklock__boot_ms(void);

/* Waits on cond (with mu held) until deadline_ms of CLOCK_MONOTONIC (-1 = none). */
void zklock__cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ms);

/* Wakes every waiter and the maintenance thread (mu held). */
void zklock__wake_all_locked(zklock_session *s);

/* Opens a connection (a new zhandle, so a new ZooKeeper session) for s with a fresh
 * epoch; it connects in the background. LOCK_OK or LOCK_ERR_CONNECTION. mu not held. */
int zklock__conn_open(zklock_session *s, zklock_conn **out);
/* Closes the handle (joins ZooKeeper's threads, so no watcher runs afterwards). */
void zklock__conn_close(zklock_conn *c);

/* The longest gap between two rounds of the maintenance thread past which the process
 * may have been paused (SIGSTOP, a frozen VM) long enough for its session to expire
 * unseen: a third of the session timeout (the negotiated one once connected). The
 * client pings after a third of it in silence and the server expires the session after
 * all of it, so a pause shorter than two thirds cannot have expired it. The maintenance
 * thread goes round at least twice as often. mu held. */
int64_t zklock__pause_limit_ms_locked(const zklock_session *s);

/* A zk return code that means "the connection or session failed, try again once
 * connected (the epoch tells whether the session survived)". */
int zklock__zk_retryable(int rc);

/* Waiter registration (mu not held). */
void zklock__waiter_add(zklock_session *s, zklock_waiter *w);
void zklock__waiter_remove(zklock_session *s, zklock_waiter *w);

/* Waits on w->cond until `deadline_ms` (-1 = none); mu held. */
void zklock__wait_locked(zklock_session *s, zklock_waiter *w, int64_t deadline_ms);

/* Takes a reference on the current connection once it is connected, waiting on w
 * until deadline_ms (-1 = forever). mu held. Returns LOCK_OK,
 * LOCK_ERR_CANCELLED (only with a waiter) or LOCK_ERR_CONNECTION. With w NULL
 * it does not wait and ignores cancellation: cleanup must still run. */
int zklock__conn_get_locked(zklock_session *s, zklock_waiter *w, int64_t deadline_ms,
                            zklock_conn **out);
void zklock__conn_put(zklock_session *s, zklock_conn *c);

/* A fresh watch id (mu held). */
uint64_t zklock__watch_id_locked(zklock_session *s);

/* The watcher of every node watch; the context is the watch id. */
void zklock__node_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx);

/* The start of a watcher whose context is a watch id (the node watcher, the cache's
 * children watcher): *id, and the session with mu taken; or NULL, nothing taken, for
 * the events that are not the watch's (session events reach every watcher and the
 * session watcher handles them; NOTWATCHING follows our own zoo_remove_watches). */
zklock_session *zklock__watch_event_lock(zhandle_t *zh, int type, void *ctx, uint64_t *id);

/* Counts one synchronous call of the given kind, and its round trip (mu not held). */
enum { ZKLOCK_OP_CREATE, ZKLOCK_OP_DELETE, ZKLOCK_OP_CHILDREN, ZKLOCK_OP_DATA };
void zklock__count_op(zklock_session *s, int op);

/* Brings the server we are connected to up to date with the leader (zoo_async, the
 * C API's sync) and waits for it (mu not held). Every look for the node of a create
 * whose reply was lost goes through it first (the acquisition's recovery and every
 * cleanup by GUID): after a reconnection to a follower that has not applied that
 * create yet, a plain read would not see it. Returns a zk code. */
int zklock__sync(zklock_conn *c, const char *path);

/* Makes sure the persistent path `path` (and its ancestors) exists. */
int zklock__ensure_path(zklock_conn *c, const char *path);

/* Deletes what `e` describes through c (caller holds a reference). Returns a zk
 * code: ZOK when nothing of ours is left, else the failing call's code. */
int zklock__cleanup_run(zklock_conn *c, const zklock_cleanup *e);

/* Runs the queued cleanups once (mu held; dropped around ZooKeeper calls). An entry of
 * an older session is dropped: its nodes went with that session. */
void zklock__cleanups_run_locked(zklock_session *s);

/* Frees a queued cleanup; NULL is a no-op. */
void zklock__cleanup_free(zklock_cleanup *e);

/* Queues a cleanup for the maintenance thread (mu not held). Copies its arguments;
 * on allocation failure the node is left to session expiry. */
void zklock__cleanup_queue(zklock_session *s, uint64_t epoch, zklock_kind kind, const char *path,
                           const char *guid);

/* ---- layer 2, zklock_hold.c */

/* A hold's state as zklock_check reports it: LOCK_OK, LOCK_SUSPECT or
 * LOCK_LOST (mu held). */
int zklock__hold_state_locked(const zklock_hold *h);

/* Deletes the node of a hold that is no longer in s->holds and frees the hold (mu not
 * held). Returns what zklock_release documents. */
int zklock__hold_let_go(zklock_hold *h);

/* A fresh random GUID in hex; 0, or -1 if the system gave no randomness. */
int zklock__new_guid(char out[ZKLOCK_GUID_LEN + 1]);
/* Is `name` a valid lock name (zklock_acquire)? 1 or 0. */
int zklock__name_valid(const char *name);
/* "a/b<suffix>", malloc'd, or NULL. */
char *zklock__join(const char *a, const char *b, const char *suffix);
/* Frees a hold's memory (nothing is sent); NULL is a no-op. */
void zklock__hold_free(zklock_hold *h);

/* ---- layer 3, zklock_cache.c */

/* The watcher of the cache's children watch on a lock's parent (the context is the
 * watch id): marks the hold that armed it contended, or sets cache_fired in the
 * waiter whose cache_watch it is. */
void zklock__cache_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx);

/* A fair acquisition's first listing of `parent` through c, setting the children
 * watch a cached hold needs on it; w->cache_watch is its id (0 if the call failed)
 * and w->cache_fired is set if it fires before the hold takes it over. mu not held.
 * Returns the zk code of zoo_wget_children. */
int zklock__cache_list_watched(zklock_conn *c, zklock_waiter *w, const char *parent,
                               struct String_vector *kids);

/* The hand-over (mu held): the cached hold of (name, kind), given to the calling
 * thread if it is still usable, else NULL. A cached hold of that lock that is not
 * usable is unlinked into *stale, for the caller to zklock__hold_let_go once mu is
 * dropped. */
zklock_hold *zklock__cache_take_locked(zklock_session *s, const char *name, zklock_kind kind,
                                       zklock_hold **stale);

/* Run by the maintenance thread (mu held, dropped around ZooKeeper calls): lets go of
 * every cached hold that is contended, past its time, lost, or whose session is
 * cancelled. Returns the earliest cache_until left (ms), -1 when none is cached. */
int64_t zklock__cache_sweep_locked(zklock_session *s);

#endif
