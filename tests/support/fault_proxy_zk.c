/* fault_proxy_zk.c: see fault_proxy_zk.h. The settings and counters the test's threads
 * change live under `mu`. A held create outlives the connection it came on, so it (and
 * the swallowing of its reply) is hook-wide state, touched only on the proxy's thread;
 * the rest (the requests whose replies are awaited, a reply to hold, a lost reply's
 * silence) belongs to one connection. */
#include "fault_proxy_zk.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZK_PENDING 256

struct fp_zk {
    fault_proxy *proxy; /* made by fp_zk_start, or NULL */
    char hosts[32];

    pthread_mutex_t mu; /* guards the settings and counters below */
    int lose_arm, hold_arm, refuse_ms;
    int hold_after_op, hold_after_op2, hold_reply, hold_before;
    int hide, mangle;
    int triggers, injected;

    /* The proxy thread's own. */
    unsigned char *held; /* a held create frame (length included) */
    size_t held_len;
    int32_t held_xid;
    int swallow;        /* held_xid's reply is still to come */
    unsigned char *out; /* a rewritten reply */
    size_t out_cap;
};

typedef struct zk_conn {
    int cfirst, dfirst; /* the next frame is the connect request / response */
    int dropping;       /* a lost reply: nothing passes until the cut */
    int held_here;      /* the held create came on this connection: not injected on it */
    int32_t hold_xid;   /* hold the reply with this xid ... */
    int hold_pending;   /* ... when it comes */
    struct {
        int32_t xid, op;
    } pend[ZK_PENDING];
    int npend;
} zk_conn;

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static int is_lock_create(const unsigned char *f, size_t len) {
    return memmem(f, len, "-lock-", 6) || memmem(f, len, "-herd", 5);
}

static int pending_take(zk_conn *cs, int32_t xid) {
    for (int i = 0; i < cs->npend; i++) {
        if (cs->pend[i].xid == xid) {
            int op = cs->pend[i].op;
            cs->pend[i] = cs->pend[--cs->npend];
            return op;
        }
    }
    return -1;
}

static long zk_frame(void *arg, fp_conn *c, int dir, const unsigned char *buf, size_t len) {
    (void)arg;
    (void)c;
    (void)dir;
    if (len < 4) return 0;
    uint32_t n = be32(buf);
    if (n > (64u << 20)) return -1;
    return len >= 4 + (size_t)n ? (long)(4 + n) : 0;
}

static void zk_open(void *arg, fp_conn *c) {
    (void)arg;
    zk_conn *cs = calloc(1, sizeof(*cs));
    if (cs) cs->cfirst = cs->dfirst = 1;
    fp_conn_set_data(c, cs);
}

static void zk_close(void *arg, fp_conn *c) {
    (void)arg;
    free(fp_conn_data(c));
}

/* Sends the held create to the server; its reply is to be swallowed. */
static void inject_held(fp_zk *z, fp_conn *c) {
    fp_conn_send(c, FP_UP, z->held, z->held_len);
    free(z->held);
    z->held = NULL;
    z->swallow = 1;
}

static fp_verdict zk_request(fp_zk *z, fp_conn *c, zk_conn *cs, fp_frame *f) {
    const unsigned char *b = f->data + 4;
    size_t len = f->len - 4;
    if (cs->cfirst) {
        cs->cfirst = 0;
        return FP_PASS;
    }
    if (cs->dropping) return FP_DROP;
    int32_t xid = len >= 8 ? (int32_t)be32(b) : 0;
    int op = len >= 8 ? (int)be32(b + 4) : -1;

    pthread_mutex_lock(&z->mu);
    int lock_create = op == FP_ZK_OP_CREATE2 && is_lock_create(b, len);
    if (lock_create && z->hold_arm && !z->held) {
        /* Keep the create; the client sees the connection drop. */
        z->hold_arm = 0;
        z->triggers++;
        int refuse_ms = z->refuse_ms;
        pthread_mutex_unlock(&z->mu);
        z->held = malloc(f->len);
        if (!z->held) return FP_CUT;
        memcpy(z->held, f->data, f->len);
        z->held_len = f->len;
        z->held_xid = xid;
        /* Requests pipelined behind it in the same read (a batch's listing) are not the
         * later connection's that the create must follow. */
        cs->held_here = 1;
        if (refuse_ms) fault_proxy_refuse(fp_conn_proxy(c), refuse_ms);
        return FP_CUT;
    }
    int lose = lock_create && z->lose_arm;
    int refuse_ms = z->refuse_ms;
    if (lose) {
        z->lose_arm = 0;
        z->triggers++;
    }
    int inject = z->held && !cs->held_here && (op == z->hold_after_op || op == z->hold_after_op2);
    int before = inject && z->hold_before;
    int hold_reply = inject && !before && z->hold_reply;
    if (inject) z->injected++;
    pthread_mutex_unlock(&z->mu);

    if (cs->npend < ZK_PENDING) {
        cs->pend[cs->npend].xid = xid;
        cs->pend[cs->npend].op = op;
        cs->npend++;
    }
    if (lose) {
        fault_proxy_refuse(fp_conn_proxy(c), 300 + refuse_ms);
        cs->dropping = 1;
        fp_conn_cut_after(c, 300);
        return FP_PASS;
    }
    /* Before the request that must see it, or after the one that must not: the server
     * takes one connection's requests in order. */
    if (before) inject_held(z, c);
    if (inject && !before) {
        fp_conn_send(c, FP_UP, f->data, f->len);
        inject_held(z, c);
        if (hold_reply) {
            cs->hold_xid = xid;
            cs->hold_pending = 1;
        }
        return FP_DROP;
    }
    return FP_PASS;
}

static fp_verdict zk_reply(fp_zk *z, zk_conn *cs, fp_frame *f) {
    unsigned char *b = f->data + 4;
    size_t len = f->len - 4;
    if (cs->dropping) return FP_DROP;
    if (cs->dfirst || len < 16) {
        cs->dfirst = 0;
        return FP_PASS;
    }
    int32_t xid = (int32_t)be32(b);
    int err = (int)be32(b + 12);
    if (z->swallow && xid == z->held_xid) {
        z->swallow = 0;
        return FP_DROP;
    }
    int op = pending_take(cs, xid);
    pthread_mutex_lock(&z->mu);
    int hide = z->hide, mangle = z->mangle;
    pthread_mutex_unlock(&z->mu);

    if (err == 0 && mangle && op == FP_ZK_OP_CREATE2 && len >= 20) {
        uint32_t plen = be32(b + 16);
        unsigned char *path = b + 20;
        if (20 + (size_t)plen <= len) {
            unsigned char *m = memmem(path, plen, "-lock-", 6);
            if (m && m + 6 < path + plen) m[6] = 'x';
        }
    }
    if (err == 0 && hide && (op == FP_ZK_OP_GETCHILDREN || op == FP_ZK_OP_GETCHILDREN2) &&
        len >= 20) {
        /* Header, an empty vector, then whatever followed the vector (a Stat). */
        uint32_t n = be32(b + 16);
        size_t off = 20;
        for (uint32_t i = 0; i < n && off + 4 <= len; i++)
            off += 4 + be32(b + off);
        if (off <= len) {
            size_t out_len = 4 + 20 + (len - off);
            if (out_len > z->out_cap) {
                unsigned char *nb = realloc(z->out, out_len);
                if (!nb) return FP_CUT;
                z->out = nb;
                z->out_cap = out_len;
            }
            memcpy(z->out + 4, b, 16);
            put32(z->out + 20, 0);
            memcpy(z->out + 24, b + off, len - off);
            put32(z->out, (uint32_t)(out_len - 4));
            f->data = z->out;
            f->len = out_len;
        }
    }
    if (cs->hold_pending && xid == cs->hold_xid) {
        cs->hold_pending = 0;
        return FP_HOLD;
    }
    return FP_PASS;
}

static fp_verdict zk_decide(void *arg, fp_conn *c, fp_frame *f) {
    zk_conn *cs = fp_conn_data(c);
    if (!cs) return FP_CUT;
    return f->dir == FP_UP ? zk_request(arg, c, cs, f) : zk_reply(arg, cs, f);
}

fp_zk *fp_zk_new(void) {
    fp_zk *z = calloc(1, sizeof(*z));
    if (!z) return NULL;
    pthread_mutex_init(&z->mu, NULL);
    z->hold_after_op = z->hold_after_op2 = -1;
    return z;
}

fp_hook fp_zk_hook(fp_zk *z) {
    return (fp_hook){.name = "zk",
                     .arg = z,
                     .frame = zk_frame,
                     .open = zk_open,
                     .close = zk_close,
                     .decide = zk_decide};
}

fp_zk *fp_zk_start(const char *hosts) {
    char host[64];
    int port = 0;
    if (sscanf(hosts, "%63[^:,]:%d", host, &port) != 2) return NULL;
    fp_zk *z = fp_zk_new();
    if (!z) return NULL;
    fp_hook hook = fp_zk_hook(z);
    fault_proxy_config cfg = {
        .upstream_host = host, .upstream_port = port, .hook = &hook, .max_conns = 1};
    if (fault_proxy_new(&cfg, &z->proxy) != FAULT_PROXY_OK) {
        fp_zk_stop(z);
        return NULL;
    }
    snprintf(z->hosts, sizeof(z->hosts), "127.0.0.1:%d", fault_proxy_port(z->proxy));
    return z;
}

const char *fp_zk_hosts(fp_zk *z) {
    return z->hosts;
}

void fp_zk_stop(fp_zk *z) {
    if (!z) return;
    fault_proxy_free(z->proxy);
    pthread_mutex_destroy(&z->mu);
    free(z->held);
    free(z->out);
    free(z);
}

void fp_zk_lose_next_create_reply(fp_zk *z, int refuse_ms) {
    pthread_mutex_lock(&z->mu);
    z->lose_arm = 1;
    z->refuse_ms = refuse_ms;
    pthread_mutex_unlock(&z->mu);
}

void fp_zk_sever(fp_zk *z, int refuse_ms) {
    if (fault_proxy_active(z->proxy) > 0) fault_proxy_refuse(z->proxy, refuse_ms);
    fault_proxy_cut_all(z->proxy);
}

void fp_zk_hold_next_create(fp_zk *z, int after_op, int after_op2, int hold_reply) {
    pthread_mutex_lock(&z->mu);
    z->hold_arm = 1;
    z->hold_after_op = after_op;
    z->hold_after_op2 = after_op2;
    z->hold_reply = hold_reply;
    z->hold_before = 0;
    z->refuse_ms = 0;
    pthread_mutex_unlock(&z->mu);
}

void fp_zk_hold_next_create_before(fp_zk *z, int op) {
    pthread_mutex_lock(&z->mu);
    z->hold_arm = 1;
    z->hold_after_op = op;
    z->hold_after_op2 = -1;
    z->hold_reply = 0;
    z->hold_before = 1;
    z->refuse_ms = 0;
    pthread_mutex_unlock(&z->mu);
}

void fp_zk_refuse_after_hold(fp_zk *z, int refuse_ms) {
    pthread_mutex_lock(&z->mu);
    z->refuse_ms = refuse_ms;
    pthread_mutex_unlock(&z->mu);
}

void fp_zk_inject_after(fp_zk *z, int after_op, int after_op2) {
    pthread_mutex_lock(&z->mu);
    z->hold_after_op = after_op;
    z->hold_after_op2 = after_op2;
    pthread_mutex_unlock(&z->mu);
}

void fp_zk_release(fp_zk *z) {
    fault_proxy_release(z->proxy);
}

void fp_zk_hide_children(fp_zk *z, int on) {
    pthread_mutex_lock(&z->mu);
    z->hide = on;
    pthread_mutex_unlock(&z->mu);
}

void fp_zk_mangle_create(fp_zk *z, int on) {
    pthread_mutex_lock(&z->mu);
    z->mangle = on;
    pthread_mutex_unlock(&z->mu);
}

static int get(fp_zk *z, const int *field) {
    pthread_mutex_lock(&z->mu);
    int v = *field;
    pthread_mutex_unlock(&z->mu);
    return v;
}

int fp_zk_triggers(fp_zk *z) {
    return get(z, &z->triggers);
}

int fp_zk_injected(fp_zk *z) {
    return get(z, &z->injected);
}

int fp_zk_holding(fp_zk *z) {
    return fault_proxy_holding(z->proxy) > 0;
}

int fp_zk_connections(fp_zk *z) {
    return fault_proxy_connections(z->proxy);
}
