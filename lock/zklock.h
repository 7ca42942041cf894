/* zklock: distributed mutual exclusion on ZooKeeper (libzookeeper_mt).
 *
 * The fair lock is the recipe from ZooKeeper's documentation and the seed articles:
 *   - one lock = one container parent, e.g. /stock/locks/product_1 (ZOO_CONTAINER; the
 *     server reaps it when empty, so a NoNode on create means "make it again, retry");
 *   - each contender creates an EPHEMERAL_SEQUENTIAL child "<guid>-lock-<seq>"; the GUID
 *     lets a create whose reply was lost be found again (and adopted only if its
 *     ephemeral owner is our current session);
 *   - children are ordered by sequence only, and any implementation's child whose name
 *     ends in "-lock-" or "__lock__" and a sequence contends (Curator's, kazoo's: one
 *     queue, zklock_int.h); the lowest holds the lock; every other
 *     contender puts a data watch (zoo_wget) on its predecessor only, so a release wakes
 *     exactly one waiter;
 *   - operations at the recipe's minimum: create, list the children, and the release's
 *     delete without contention (3); one more, the watch, for a waiter whose
 *     predecessor was the lowest node of its listing, since sequence numbers only grow
 *     and that node's deletion alone makes ours the lowest (4). A waiter further back
 *     lists once more when its predecessor goes (5). No watch is kept on our own node: a node
 *     deleted by hand under a live session is refused by the fence (the next holder's
 *     write moves it), and a session loss is seen by the session watcher.
 * The herd lock is the seeds' first attempt, kept for comparison: one ephemeral node
 * per lock, <root>/<name>-herd, holding the GUID; losers set an exists watch on it
 * and all race again when it goes. (So a lock name may not end in "-herd".)
 *
 * Safety beyond the recipe:
 *   - timeout, error or cancellation deletes our own node: no orphan is left. If
 *     the connection is down at that moment (or the node's create reply was lost),
 *     the deletion is queued and done in the background as soon as the connection
 *     is back with the same session; if the session expires instead, the server
 *     has deleted the node already. The same holds for a release;
 *   - a node whose create reply was lost is adopted only if our current session
 *     owns it; a late duplicate carrying our GUID is deleted when seen;
 *   - on disconnect every held lock becomes SUSPECT; on session expiry every held lock
 *     becomes LOST, a new session is made, and zklock_check() tells the holder;
 *   - every acquisition yields a fencing token, the czxid of its lock node, which only
 *     grows across the ensemble; the database refuses writes with an older token.
 *
 * Lock caching (zklock_release_cached), after Chubby's and GFS's client caches and the
 * DLMs' (VMS, GFS2) lock caching with callbacks: a process keeps a lock node it no
 * longer uses, so that its next use costs no round trip, and lets it go when somebody
 * else asks. The "callback" is a children watch on the lock's parent, armed once per
 * acquisition (by its first listing with config.cache, else by the first
 * zklock_release_cached): ZooKeeper fires it when another contender creates its node.
 * A cached lock is let go by the maintenance thread at once when that watch fires,
 * when it was not used again within its time (max_ms), when the session is cancelled,
 * and with the session when it expires or is freed. Only the fair lock caches, and only a hold
 * that did not queue behind another contender and whose watched listing showed none
 * queued behind it (that listing's watch cannot fire for those): under steady
 * contention the cache would only slow the handover. The fencing token stays the node's czxid, so a
 * cached lock serves many batches under one token; the database's compare-and-set on
 * row_version keeps that sound (docs/fence.md).
 *
 * Threads and ownership:
 *   - A zklock_session is one ZooKeeper session shared by all threads of a process
 *     (replaced by a new one, in the background, when it expires).
 *     zklock_session_new/free are called by one thread (main); all other functions are
 *     thread-safe. Never fork() with a session open; make sessions after fork.
 *   - A zklock_hold belongs to the thread that acquired it: only that thread may check
 *     or release it. Locks are reentrant per thread: acquiring a lock the calling thread
 *     already holds returns the same hold with its count raised; release lowers it, and
 *     the node is deleted when it reaches zero. The hold is freed by the last release.
 *   - A hold given to zklock_release_cached() and cached leaves its thread: the session
 *     owns it (its maintenance thread may let it go at any time), and the next
 *     acquisition of the same lock by any thread of the process takes it over, under
 *     the same node and token. That is the one hand-over between threads.
 *   - ZooKeeper's watcher callbacks only record state and signal; they never block.
 *
 * Every function returns LOCK_OK (0) or a negative LOCK_* code, the values of
 * lock_codes.h; zklock_strerror() names it. zklock_kind.c ends the library with its two
 * rows of the lock registry (lock.h): zk and zk-herd. Nothing here prints (ZooKeeper's
 * own log is set to errors only and sent to a callback that drops it), exits or aborts
 * on a server error. */
#ifndef ZKLOCK_H
#define ZKLOCK_H

#include <stdint.h>

#include "lock_codes.h"

typedef enum zklock_kind {
    ZKLOCK_FAIR = 0, /* ephemeral-sequential queue, watch the predecessor */
    ZKLOCK_HERD,     /* one ephemeral node, every loser watches it */
} zklock_kind;

typedef struct zklock_session_config {
    const char *hosts;      /* "127.0.0.1:2181,127.0.0.1:2182" */
    const char *root;       /* parent of all locks; NULL = "/stock/locks"; "/" = the top */
    int session_timeout_ms; /* requested; 0 = 6000 (the server may clamp it) */
    int connect_timeout_ms; /* how long zklock_session_new waits; 0 = 5000 */
    /* NULL or "": nodes are made with OPEN_ACL_UNSAFE (any client may read, delete or
     * add children). "USER:PASSWORD": every connection of the session (the first and
     * each replacement after an expiry) adds digest auth with it, and every node we make
     * (the root and its ancestors, the container parents, the lock nodes) gets
     * CREATOR_ALL_ACL: all permissions to that digest identity, none to anyone else. An
     * unauthenticated client can then neither delete a lock node nor add a child to a
     * lock's parent. The root path's existing nodes are given the same ACL where we may
     * (zoo_set_acl; a node another identity owns is left as it is). Copied. */
    const char *auth;
    /* With auth only: "SCHEME:ID", another identity that shares the locks, as ZooKeeper
     * writes an ACL's id: "world:anyone", or "digest:USER:BASE64(SHA1(USER:PASSWORD))"
     * for the digest identity of a fleet's Curator or kazoo clients. It gets READ on our
     * lock nodes (to list, read and watch them: a waiter behind us watches ours) and
     * READ|CREATE|DELETE on the nodes above them (the root path and the lock parents), so
     * that its clients can queue and release. ZooKeeper's DELETE is the parent's: such a
     * peer can delete any child of a lock's parent, ours too; the fence is what refuses
     * a write after that (docs/zookeeper-lock.md). NULL or "": creator only. Copied. */
    const char *peer;
    /* 1 if this process will cache its fair locks (zklock_release_cached): each fair
     * acquisition's first listing of the children then sets the children watch that
     * caching needs, so that caching costs no operation of its own. 0: the watch is
     * set by the first zklock_release_cached of an acquisition (one operation). */
    int cache;
    /* Who we are (the instance), written as the data of each fair-lock node we make,
     * so a view (zklock_view.c) can tell which process queued each node. NULL = "".
     * Copied, at most 63 bytes. */
    const char *owner;
} zklock_session_config;

/* Counters for /metrics and the lock benchmark. All only grow. */
typedef struct zklock_stats {
    uint64_t acquired; /* successful first acquisitions (reentrant ones excluded) */
    uint64_t timeouts;
    uint64_t suspect_events; /* holds that became SUSPECT */
    uint64_t lost_events;    /* holds that became LOST */
    uint64_t expirations;    /* sessions that expired and were replaced */
    uint64_t op_create;
    uint64_t op_delete;
    uint64_t op_get_children;
    uint64_t op_get_data;       /* zoo_(a)wget / zoo_wexists / zoo_get / zoo_exists, and the
                                 * zoo_async (sync) before reading after a lost create reply */
    uint64_t watch_events;      /* node watches that fired for our waiters */
    uint64_t recovered_creates; /* lost create replies whose node we found and adopted */
    uint64_t orphans_deleted;   /* late duplicates of such creates that we deleted */
    uint64_t strays_seen;       /* children of a fair lock's parent that are no contender,
                                 * once per listing (zklock_int.h says what they are) */
    uint64_t seq_limit;         /* fair acquisitions and tries refused: our node's sequence
                                 * was at ZooKeeper's limit (LOCK_ERR_SEQ_LIMIT) */
    /* The cache (zklock_release_cached). */
    uint64_t cache_parks;            /* holds kept after their last release */
    uint64_t cache_hits;             /* acquisitions served by a cached hold, no operation */
    uint64_t cache_let_go_contender; /* cached holds let go: another node came */
    uint64_t cache_let_go_timeout;   /* ... their time ran out */
    uint64_t cache_let_go_other;     /* ... lost, disconnected, cancelled, or kept across a
                                      * gap that may have been a pause past the session */
    uint64_t cache_callbacks;        /* children watches of the cache that fired */
    /* Round trips: each synchronous call above is one; the operations that
     * zklock_try_many and zklock_release_many send together, in flight at once, are
     * one per wave (the ops above still count each operation). */
    uint64_t round_trips;
    uint64_t batched_tries; /* locks that zklock_try_many tried in such a wave */
} zklock_stats;

typedef struct zklock_session zklock_session;
typedef struct zklock_hold zklock_hold;

/* Connects and waits for CONNECTED up to cfg->connect_timeout_ms. On success *out is
 * the session; on failure *out is NULL and the code says why (LOCK_ERR_CONNECTION
 * if ZooKeeper did not answer in time). */
int zklock_session_new(const zklock_session_config *cfg, zklock_session **out);

/* Cancels waiting acquisitions, deletes any nodes still held (by closing the
 * ZooKeeper session), and frees everything, including holds still outstanding:
 * their pointers become invalid. No other thread may be inside a zklock call or
 * use a hold of this session any more: call zklock_session_cancel(), join the
 * threads, then free. NULL is a no-op. */
void zklock_session_free(zklock_session *s);

/* Makes every acquisition now waiting, or started later, fail with
 * LOCK_ERR_CANCELLED (used at shutdown). */
void zklock_session_cancel(zklock_session *s);

/* Acquires the lock `name` (a single path segment of printable ASCII such as
 * "product_1", at most 200 bytes, not ending in "-herd") of the given kind, waiting at
 * most timeout_ms (0 = try once, < 0 = no limit). On LOCK_OK *out is the hold; on
 * error *out is NULL and our node, if one was made, has been deleted (or its
 * deletion is queued, see above). If the session expires while we wait, the wait
 * goes on with the new session (a new node, so a new place in the queue).
 * Returns LOCK_OK, LOCK_ERR_ARGS, LOCK_ERR_NOMEM, LOCK_ERR_TIMEOUT,
 * LOCK_ERR_CONNECTION (not connected at the deadline), LOCK_ERR_CANCELLED,
 * LOCK_ERR_SERVER, LOCK_ERR_SEQ_LIMIT (fair: our node's sequence was at ZooKeeper's
 * limit, 2^31-1 or signed, where names no longer order the queue: refused at once, never
 * waited on; the parent must be recreated), or LOCK_LOST: a reentrant acquisition of a
 * hold that is already LOST is refused (the count is not raised), so that the outer
 * critical section learns it is no longer protected; release that hold. */
int zklock_acquire(zklock_session *s, const char *name, zklock_kind kind, int timeout_ms,
                   zklock_hold **out);

/* Is the lock still ours? LOCK_OK, LOCK_SUSPECT (connection currently lost) or
 * LOCK_LOST (session expired). Call it right before
 * committing work done under the lock. Cheap: reads local state only. A connection
 * problem that the client has not noticed yet (a process paused past its session
 * timeout) cannot be seen here: that is what the fencing token is for. */
int zklock_check(const zklock_hold *h);

/* The fencing token of this acquisition: the czxid of its lock node, > 0 (0 for
 * NULL). Tokens grow across all locks of an ensemble, so a database can refuse a
 * write carrying a token lower than the last one it accepted. */
int64_t zklock_token(const zklock_hold *h);

/* Releases one level of the hold; at zero deletes the node and frees the hold.
 * Returns LOCK_OK; LOCK_ERR_NOT_OWNER if called by another thread than the
 * acquirer (the hold is untouched); LOCK_LOST if the hold had been lost (nothing
 * to delete; the hold is freed); LOCK_ERR_CONNECTION if the delete could not
 * reach the server: the hold is freed and the delete is retried in the background
 * once the connection is back with the same session (else the node went with the
 * session), so the lock is never left blocked. */
int zklock_release(zklock_hold *h);

/* Reads the lock `name` of `kind` as ZooKeeper has it now, for a view (lock.h,
 * lock_view_read; zklock_view.c): the fair lock's children in order with the instance
 * that made each, or the herd lock's node. Uses the current connection without waiting
 * for one (LOCK_ERR_CONNECTION while there is none). LOCK_OK, LOCK_ERR_ARGS for a bad
 * name, or the error of a read. Any thread. */
struct lock_view;
int zklock_view(zklock_session *s, const char *name, zklock_kind kind, struct lock_view *out);

/* Releases the hold's last level but keeps its node for up to max_ms (lock caching):
 * the next zklock_acquire of the same name and kind by ANY thread of this process
 * within that time, while no other contender has queued and the node is surely ours,
 * gets this hold back at once, with the same node and fencing token, and sends no
 * ZooKeeper operation (a cache hit). The acquisition's first listing (with
 * config.cache) or else its first caching (one operation) sets one children watch on
 * the lock's parent, which stays armed across hits;
 * ZooKeeper fires it when another contender creates its node, and the hold is then
 * let go: at once by the session's maintenance thread if it is cached, or at its next
 * release if a thread has it. A cached hold is also let go when max_ms passes without
 * a hit, when the session is cancelled (shutdown), with the session when it is freed
 * or expires, and when the process may have been paused past the session since it
 * was cached (a gap of over a third of the session timeout in the session's own
 * maintenance rounds): the client learns of an expiry only once its I/O thread runs
 * again, and a hold handed out before that would serve a batch under a dead token. What
 * the cache costs is the other side of that pause: a cached node of a paused process
 * blocks every other instance's acquisition of that lock until its session expires.
 *
 * Ownership: on LOCK_OK the hold leaves the calling thread; the pointer is no
 * longer the caller's (the session may free it at any moment) and must not be used.
 * The hold that a later cache hit returns belongs to that acquiring thread, as any
 * fresh hold does.
 *
 * It behaves exactly as zklock_release (and returns what that returns) when max_ms
 * <= 0, for the herd lock, for an inner level of a reentrant hold, for a hold that
 * queued behind another contender's node when it was acquired (contention just seen
 * is likely to go on, and the watch would fire at once), when a contender has queued
 * already (the watch fired, or the watch's listing shows one), or when the hold is
 * not surely ours. Returns LOCK_OK when cached; LOCK_ERR_NOT_OWNER (untouched). */
int zklock_release_cached(zklock_hold *h, int max_ms);

/* The most names one zklock_try_many or zklock_release_many call takes. */
#define ZKLOCK_MANY_MAX 64

/* Tries the fair locks names[0..n-1] (distinct valid names; kind ZKLOCK_FAIR; for
 * ZKLOCK_HERD it is a loop over single tries) at once, never waiting for any: for each
 * i, rcs[i] and holds[i] are what zklock_acquire(s, names[i], kind, 0, &holds[i])
 * would give, and each hold belongs to the calling thread as that one's would.
 *   - A name this process has cached is a cache hit (no operation), and a name the
 *     calling thread holds already is a reentry (the count is raised, or LOCK_LOST);
 *   - for the others, the requests go out together on the one session, which ZooKeeper
 *     answers in order: for each name a create of its EPHEMERAL_SEQUENTIAL node (the
 *     layout of zklock_acquire; its czxid is the token) and right behind it the
 *     listing of the parent, which therefore sees our node (with config.cache that
 *     listing sets the cache's children watch, as a single acquisition's does). One
 *     round trip for all: a name whose node is the lowest is held;
 *   - a name whose node is at ZooKeeper's sequence limit is LOCK_ERR_SEQ_LIMIT, deleted
 *     as a busy one's;
 *   - a name whose node has a predecessor is LOCK_ERR_TIMEOUT (busy), and its node
 *     is deleted before the call returns: those deletes also go out together (a
 *     second round trip, only when something was busy). Nothing waits for a
 *     predecessor: a caller that holds other locks may call this (no hold-and-wait);
 *   - a create whose reply was lost (connection loss) is given up, not recovered: the
 *     name is LOCK_ERR_CONNECTION and a node that the create may yet have made is
 *     deleted by its GUID in the background once the connection is back with the same
 *     session (it goes with the session otherwise), as when zklock_acquire gives up.
 *     A delete that cannot reach the server is queued the same way;
 *   - a name whose container parent was reaped (the server reaps an empty one) costs
 *     one more round trip: the parents' creates, each followed by the name's create
 *     and listing again, all together. Should the root itself be gone, that name is
 *     tried alone, by zklock_acquire with timeout 0 (which makes the path).
 * SUSPECT and LOST, the session's expiry and the release of each hold are those of
 * any hold of zklock_acquire. Returns how many are held (>= 0), or LOCK_ERR_ARGS
 * (NULL pointers, n outside 0..ZKLOCK_MANY_MAX, a bad or repeated name, a bad kind:
 * then nothing is tried, every holds[i] is NULL and every rcs[i] LOCK_ERR_ARGS).
 * Thread-safe as zklock_acquire. */
int zklock_try_many(zklock_session *s, const char *const *names, int n, zklock_kind kind,
                    zklock_hold **holds, int *rcs);

/* Releases holds[0..n-1] (NULL entries are skipped, their rcs[i] LOCK_OK) as
 * zklock_release_cached(holds[i], max_ms) each would (max_ms <= 0: as zklock_release),
 * with the same result in rcs[i] (rcs may be NULL), and the same ownership: every
 * hold not refused with LOCK_ERR_NOT_OWNER is no longer the caller's. A hold kept
 * in the cache with its watch armed costs no operation; the deletes of the fair
 * holds that go send together (one round trip for all; a hold of the herd lock, or
 * one whose create's reply was once lost, is released alone, as zklock_release does
 * it). A delete that cannot reach the server is queued for the background, as
 * zklock_release's is. Returns LOCK_OK, LOCK_ERR_ARGS (n outside
 * 0..ZKLOCK_MANY_MAX or holds NULL: nothing released) or the first rcs[i] that is
 * not LOCK_OK. Only the thread that acquired each hold may call it. */
int zklock_release_many(zklock_hold **holds, int n, int max_ms, int *rcs);

/* Is the session connected right now? LOCK_OK, LOCK_ERR_CONNECTION (connecting, or
 * the session expired and its replacement is not yet connected) or
 * LOCK_ERR_CANCELLED. Reads local state only: it never waits, so /health can ask. */
int zklock_session_status(zklock_session *s);

/* Copies the session's counters. */
void zklock_get_stats(zklock_session *s, zklock_stats *out);

const char *zklock_strerror(int code);

#endif
