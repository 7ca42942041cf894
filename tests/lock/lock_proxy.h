/* lock_proxy.h: a loopback TCP proxy between one ZooKeeper client and the server,
 * for the zklock tests that need a connection to misbehave at a chosen request. It
 * reads ZooKeeper's framing (a 4-byte length, then the request or reply header) in
 * both directions, so it can act on one kind of request and on the reply to it.
 * It serves one client connection at a time (a zklock session reconnects through
 * it); a second connection while one is open is refused.
 *
 * Every function is called by the test's threads; the proxy runs on its own thread
 * and takes its settings under a mutex. The faults (each one-shot unless said):
 *   - lose a create's reply: forward the next lock-node create, swallow its reply
 *     and sever 300 ms later (the server has made the node by then);
 *   - hold a create: do not forward the next lock-node create and sever at once;
 *     on the next connection forward it right after the first request of a given
 *     opcode (a listing, say), so it takes effect only after that request, and
 *     swallow its reply. Optionally hold the reply to that request (and everything
 *     after it) until lp_release(); or forward it right before the first request
 *     of a given opcode (a sync: a follower that lags catches up when asked to);
 *   - sever the connection now;
 *   - refuse reconnection for a while after a sever;
 *   - (lasting) answer every listing with no children;
 *   - (lasting) rename the sequence of every created lock node in the reply, so
 *     that the client cannot parse it (the node itself keeps its name). */
#ifndef LOCK_PROXY_H
#define LOCK_PROXY_H

/* ZooKeeper opcodes the tests name. */
#define LP_OP_GETDATA      4
#define LP_OP_GETCHILDREN  8
#define LP_OP_SYNC         9
#define LP_OP_GETCHILDREN2 12
#define LP_OP_CREATE2      15

typedef struct lp_proxy lp_proxy;

/* Starts a proxy to the first host of `hosts` on a free loopback port; fails the
 * test if it cannot. */
lp_proxy *lp_start(const char *hosts);

/* "127.0.0.1:<port>", for a session that should go through the proxy. */
const char *lp_hosts(lp_proxy *p);

/* Stops the thread, closes the sockets and frees the proxy. */
void lp_stop(lp_proxy *p);

/* Loses the reply of the next lock-node create; reconnection is refused for
 * refuse_ms after the sever. */
void lp_lose_next_create_reply(lp_proxy *p, int refuse_ms);

/* Severs the current connection now; refuses reconnection for refuse_ms. */
void lp_sever(lp_proxy *p, int refuse_ms);

/* Holds the next lock-node create as described above: it reaches the server right
 * after the first request of opcode `after_op` (or `after_op2`, -1 = none) on a
 * later connection. With hold_reply, the reply to that request is held too. */
void lp_hold_next_create(lp_proxy *p, int after_op, int after_op2, int hold_reply);

/* Holds the next lock-node create like lp_hold_next_create, but lets it reach the
 * server right before the first request of opcode `op` on a later connection, so
 * that request and every later one see it. */
void lp_hold_next_create_before(lp_proxy *p, int op);

/* Changes the opcodes after which a held create is let through (-1 = none): hold
 * with after_op -1, then let it through later with this. */
void lp_inject_after(lp_proxy *p, int after_op, int after_op2);

/* Releases a held reply (and what arrived after it). */
void lp_release(lp_proxy *p);

/* Lasting modes, on (1) or off (0). */
void lp_hide_children(lp_proxy *p, int on);
void lp_mangle_create(lp_proxy *p, int on);

/* Counters: faults triggered (a create lost or held), held creates injected,
 * replies being held right now (0 or 1), connections accepted. */
int lp_triggers(lp_proxy *p);
int lp_injected(lp_proxy *p);
int lp_holding(lp_proxy *p);
int lp_connections(lp_proxy *p);

#endif
