/* fault_proxy.h: the one TCP fault proxy of the tests. It listens on one loopback port,
 * relays each accepted connection to one upstream server, and can make the network
 * misbehave: as a whole (a partition, a delay on every chunk, every connection cut at
 * once, new connections refused) or at a chosen point of one protocol's exchange, through
 * a hook.
 *
 * A hook knows one protocol's framing. The proxy cuts each direction of a connection into
 * the hook's frames and asks the hook, for each frame, what to do with it: pass it, delay
 * it, hold it (and everything after it in that direction) until released, drop it, cut
 * the connection, or strand it (the client's side closed, the server's side left open and
 * silent, as a server sees a client it can no longer hear from). Hooks for MySQL
 * (fault_proxy_mysql.h) and ZooKeeper (fault_proxy_zk.h) live next to this file; without a
 * hook every read is one frame and every frame passes (the raw proxy).
 *
 * Threads: the proxy runs on one thread of its own, which calls the hook. Every
 * fault_proxy_* call below may be made from any other thread; none of them may be made
 * from a hook (fault_proxy_cut_all waits for the proxy's thread). The fp_conn_* calls are
 * for hooks only, on the proxy's thread. The proxy never changes a byte unless a hook does. */
#ifndef FAULT_PROXY_H
#define FAULT_PROXY_H

#include <stddef.h>

#define FAULT_PROXY_OK         0
#define FAULT_PROXY_ERR_ARGS   -1 /* a bad config (no upstream, a bad address) */
#define FAULT_PROXY_ERR_NOMEM  -2
#define FAULT_PROXY_ERR_LISTEN -3 /* the port could not be bound or listened on */
#define FAULT_PROXY_ERR_THREAD -4

/* The two directions of a connection. */
#define FP_UP   0 /* client to upstream */
#define FP_DOWN 1 /* upstream to client */

typedef struct fault_proxy fault_proxy;
typedef struct fp_conn fp_conn;

/* What becomes of one frame. */
typedef enum {
    FP_PASS,   /* forwarded (after the proxy's delay, if any) */
    FP_DELAY,  /* forwarded delay_ms later; later frames of that direction wait behind it */
    FP_HOLD,   /* this frame and every later one of its direction wait for a release */
    FP_DROP,   /* swallowed; the connection goes on */
    FP_CUT,    /* not forwarded; both sides of the connection are closed now */
    FP_STRAND, /* not forwarded; the client's side is closed, the server's is kept open
                * and what it sends is read and thrown away until it closes */
} fp_verdict;

/* One frame, as a hook sees it. The hook may change data in place, or point data at
 * a buffer of its own (valid until its next decide call) with another len: that is what
 * goes on instead. To send something more, it calls fp_conn_send. */
typedef struct fp_frame {
    int dir;             /* FP_UP or FP_DOWN */
    unsigned char *data; /* owned by the proxy, valid during the call */
    size_t len;
    int delay_ms; /* for FP_DELAY */
    unsigned tag; /* non-zero: the hook's done() is called with it once the frame leaves */
} fp_frame;

/* A protocol hook. Every function may be NULL; every call is on the proxy's thread. */
typedef struct fp_hook {
    const char *name;
    void *arg; /* passed to every call */
    /* The length of the whole frame at the head of buf (len bytes are buffered): 0 if it
     * is not all there yet, negative if the stream cannot be framed (the connection is
     * cut). NULL: every read is one frame. */
    long (*frame)(void *arg, fp_conn *c, int dir, const unsigned char *buf, size_t len);
    /* A connection was accepted and its upstream connected. */
    void (*open)(void *arg, fp_conn *c);
    /* The connection is about to be freed (its data must be freed here). */
    void (*close)(void *arg, fp_conn *c);
    /* The fate of one frame; NULL: FP_PASS. */
    fp_verdict (*decide)(void *arg, fp_conn *c, fp_frame *f);
    /* A frame with a tag left the proxy: written, or thrown away with its connection. */
    void (*done)(void *arg, fp_conn *c, unsigned tag);
} fp_hook;

typedef struct fault_proxy_config {
    int listen_port;           /* on 127.0.0.1; 0: a free port (see fault_proxy_port) */
    const char *upstream_host; /* an IPv4 address or a name; NULL: 127.0.0.1 */
    int upstream_port;
    const fp_hook *hook; /* NULL: raw. Copied; hook->arg must outlive the proxy. */
    int max_conns;       /* more open connections are closed at once; 0: no limit */
} fault_proxy_config;

/* Starts a proxy; *out is set on FAULT_PROXY_OK. Once this returns, the port listens. */
int fault_proxy_new(const fault_proxy_config *cfg, fault_proxy **out);

/* Stops the thread, closes every connection and the port, frees the proxy. NULL is a
 * no-op. */
void fault_proxy_free(fault_proxy *p);

const char *fault_proxy_strerror(int rc);

/* The port it listens on. */
int fault_proxy_port(const fault_proxy *p);

/* A partition, on (1) or off (0). While on, no byte passes either way; connections
 * accepted meanwhile get nothing (their upstream is connected once it is off). What was
 * sent during it is delivered after it, as TCP would once a partition heals. */
void fault_proxy_blackhole(fault_proxy *p, int on);

/* Every chunk read from now on, either way, is forwarded ms later (0: at once). */
void fault_proxy_delay(fault_proxy *p, int ms);

/* Closes every open connection (stranded server sides too) and returns once they are
 * closed. */
void fault_proxy_cut_all(fault_proxy *p);

/* New connections are closed at once for the next ms milliseconds; ms < 0: until
 * fault_proxy_refuse(p, 0). */
void fault_proxy_refuse(fault_proxy *p, int ms);

/* Lets every held direction go on. */
void fault_proxy_release(fault_proxy *p);

/* Counters: connections relayed so far, open now, directions held now, server sides
 * stranded and still open now. */
int fault_proxy_connections(fault_proxy *p);
int fault_proxy_active(fault_proxy *p);
int fault_proxy_holding(fault_proxy *p);
int fault_proxy_stranded(fault_proxy *p);

/* ---------------------------------------------------------------- for hooks */

fault_proxy *fp_conn_proxy(fp_conn *c);

/* The hook's own state for this connection (NULL until set). */
void *fp_conn_data(fp_conn *c);
void fp_conn_set_data(fp_conn *c, void *data);

/* Queues len bytes (copied) in direction dir, after whatever is queued there now; a
 * frame being decided is queued after them unless it is dropped. 0, or -1 without
 * memory (the connection is then cut). */
int fp_conn_send(fp_conn *c, int dir, const void *data, size_t len);

/* Closes the connection ms milliseconds from now. */
void fp_conn_cut_after(fp_conn *c, int ms);

/* Milliseconds on a monotonic clock, the one the proxy uses. */
long long fp_now_ms(void);

#endif
