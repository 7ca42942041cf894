/* fault_proxy_zk.h: the ZooKeeper hook of the fault proxy (fault_proxy.h), for the zklock
 * tests that need a connection to misbehave at a chosen request. It reads ZooKeeper's
 * framing (a 4-byte big-endian length, then the request or reply header) in both
 * directions, so it can act on one kind of request and on the reply to it. The proxy it
 * serves (fp_zk_start) takes one client connection at a time (a zklock session
 * reconnects through it); a second connection while one is open is refused.
 *
 * The faults (each one-shot unless said):
 *   - lose a create's reply: forward the next lock-node create, swallow its reply and
 *     cut 300 ms later (the server has made the node by then);
 *   - hold a create: do not forward the next lock-node create and cut at once; on the
 *     next connection forward it right after the first request of a given opcode (a
 *     listing, say), so it takes effect only after that request, and swallow its reply.
 *     Optionally hold the reply to that request (and everything after it) until
 *     fp_zk_release(); or forward it right before the first request of a given opcode
 *     (a sync: a follower that lags catches up when asked to);
 *   - sever the connection now;
 *   - refuse reconnection for a while after a sever (or a held create's cut);
 *   - (lasting) answer every listing with no children;
 *   - (lasting) rename the sequence of every created lock node in the reply, so that the
 *     client cannot parse it (the node itself keeps its name).
 * A lock-node create is a create2 whose path holds "-lock-" or "-herd".
 *
 * Threads: every call may be made from any thread but the proxy's; the hook runs on the
 * proxy's. With no fault armed the hook only frames (fault-proxy --proto zk). */
#ifndef FAULT_PROXY_ZK_H
#define FAULT_PROXY_ZK_H

#include "fault_proxy.h"

/* ZooKeeper opcodes the tests name. */
#define FP_ZK_OP_GETDATA      4
#define FP_ZK_OP_GETCHILDREN  8
#define FP_ZK_OP_SYNC         9
#define FP_ZK_OP_GETCHILDREN2 12
#define FP_ZK_OP_CREATE2      15

typedef struct fp_zk fp_zk;

/* The hook's state alone (for a proxy made by the caller); NULL without memory. */
fp_zk *fp_zk_new(void);
fp_hook fp_zk_hook(fp_zk *z);

/* A hook and a proxy to the first host of `hosts` on a free loopback port, one
 * connection at a time; NULL if it cannot be made. */
fp_zk *fp_zk_start(const char *hosts);

/* "127.0.0.1:<port>", for a session that should go through fp_zk_start's proxy. */
const char *fp_zk_hosts(fp_zk *z);

/* Frees the proxy fp_zk_start made (if any), then the hook. NULL is a no-op. */
void fp_zk_stop(fp_zk *z);

/* The faults below act on fp_zk_start's proxy where they need one. */

/* Loses the reply of the next lock-node create; reconnection is refused for refuse_ms
 * after the cut. */
void fp_zk_lose_next_create_reply(fp_zk *z, int refuse_ms);

/* Severs the current connection now; refuses reconnection for refuse_ms. */
void fp_zk_sever(fp_zk *z, int refuse_ms);

/* Holds the next lock-node create as described above: it reaches the server right
 * after the first request of opcode `after_op` (or `after_op2`, -1 = none) on a later
 * connection. With hold_reply, the reply to that request is held too. */
void fp_zk_hold_next_create(fp_zk *z, int after_op, int after_op2, int hold_reply);

/* Holds the next lock-node create like fp_zk_hold_next_create, but lets it reach the
 * server right before the first request of opcode `op` on a later connection, so that
 * request and every later one see it. */
void fp_zk_hold_next_create_before(fp_zk *z, int op);

/* Refuses reconnection for refuse_ms after the cut of the create armed by the last
 * fp_zk_hold_next_create (call it after that). */
void fp_zk_refuse_after_hold(fp_zk *z, int refuse_ms);

/* Changes the opcodes after which a held create is let through (-1 = none). */
void fp_zk_inject_after(fp_zk *z, int after_op, int after_op2);

/* Releases a held reply (and what arrived after it). */
void fp_zk_release(fp_zk *z);

/* Lasting modes, on (1) or off (0). */
void fp_zk_hide_children(fp_zk *z, int on);
/* Mangle: a create reply's node name gets an x for the first digit of its sequence,
 * a name that no implementation of the lock recipe would recognise. */
void fp_zk_mangle_create(fp_zk *z, int on);

/* Counters: faults triggered (a create lost or held), held creates injected, replies
 * being held right now (0 or 1), connections accepted. */
int fp_zk_triggers(fp_zk *z);
int fp_zk_injected(fp_zk *z);
int fp_zk_holding(fp_zk *z);
int fp_zk_connections(fp_zk *z);

#endif
