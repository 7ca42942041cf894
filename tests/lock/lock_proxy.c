/* lock_proxy.c: see lock_proxy.h. One thread polls the listening socket and the two
 * ends of the current connection; whole frames are read into a buffer per
 * direction, looked at, and forwarded (or dropped, held or rewritten). */
#include "lock_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lock_test.h"

#define LP_BUF     (1 << 20)
#define LP_PENDING 256

struct lp_proxy {
    int lfd;
    char hosts[32];
    struct sockaddr_in up;
    pthread_t thr;

    pthread_mutex_t mu; /* guards the settings and counters below */
    int stop;
    int lose_arm, hold_arm, sever_now, refuse_ms;
    int hold_after_op, hold_after_op2, hold_reply, hold_before;
    int release;
    int hide, mangle;
    int64_t refuse_until;
    int triggers, injected, holding, connections;

    /* The proxy thread's own state. */
    int cfd, ufd;
    int cfirst, dfirst; /* the next frame is the connect request / response */
    int dropping;       /* a lost reply: drop both ways until close_at */
    int64_t close_at;
    unsigned char *cbuf, *dbuf; /* partial frames, client -> server and back */
    size_t clen, dlen;
    unsigned char *held; /* a held create frame (length included) */
    size_t held_len;
    int32_t held_xid;    /* reply to swallow once injected */
    int swallow;         /* held_xid's reply is still to come */
    int32_t hold_xid;    /* hold the reply with this xid ... */
    int hold_pending;    /* ... when it comes */
    unsigned char *hbuf; /* held downstream bytes */
    size_t hlen, hcap;
    struct {
        int32_t xid, op;
    } pend[LP_PENDING];
    int npend;
};

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void lp_close_conn(lp_proxy *p) {
    if (p->cfd >= 0) {
        close(p->cfd);
        close(p->ufd);
    }
    p->cfd = p->ufd = -1;
    p->clen = p->dlen = p->hlen = 0;
    p->dropping = 0;
    p->hold_pending = 0;
    p->npend = 0;
    pthread_mutex_lock(&p->mu);
    p->holding = 0;
    pthread_mutex_unlock(&p->mu);
}

static int lp_is_lock_create(const unsigned char *f, uint32_t len) {
    return memmem(f, len, "-lock-", 6) || memmem(f, len, "-herd", 5);
}

static int lp_pending_take(lp_proxy *p, int32_t xid) {
    for (int i = 0; i < p->npend; i++) {
        if (p->pend[i].xid == xid) {
            int op = p->pend[i].op;
            p->pend[i] = p->pend[--p->npend];
            return op;
        }
    }
    return -1;
}

/* Sends the held create to the server; its reply is swallowed. */
static int lp_inject_held(lp_proxy *p) {
    int rc = write_all(p->ufd, p->held, p->held_len);
    free(p->held);
    p->held = NULL;
    p->swallow = 1;
    return rc;
}

/* One whole frame from the client (f = 4-byte length + payload). Returns -1 when
 * the connection must be closed. */
static int lp_client_frame(lp_proxy *p, unsigned char *f, uint32_t len, int64_t now) {
    const unsigned char *b = f + 4;
    if (p->cfirst) {
        p->cfirst = 0;
        return write_all(p->ufd, f, 4 + len);
    }
    if (p->dropping) return 0;
    int32_t xid = len >= 8 ? (int32_t)be32(b) : 0;
    int op = len >= 8 ? (int)be32(b + 4) : -1;

    pthread_mutex_lock(&p->mu);
    int lock_create = op == LP_OP_CREATE2 && lp_is_lock_create(b, len);
    if (lock_create && p->hold_arm && !p->held) {
        /* Keep the create; the client sees the connection drop. */
        p->hold_arm = 0;
        p->triggers++;
        pthread_mutex_unlock(&p->mu);
        p->held = malloc(4 + len);
        if (!p->held) return -1;
        memcpy(p->held, f, 4 + len);
        p->held_len = 4 + len;
        p->held_xid = xid;
        return -1;
    }
    int lose = lock_create && p->lose_arm;
    if (lose) {
        p->lose_arm = 0;
        p->triggers++;
        p->refuse_until = now + 300 + p->refuse_ms;
    }
    int inject = p->held && (op == p->hold_after_op || op == p->hold_after_op2);
    int before = inject && p->hold_before;
    int hold_reply = inject && !before && p->hold_reply;
    if (inject) p->injected++;
    pthread_mutex_unlock(&p->mu);

    if (p->npend < LP_PENDING) {
        p->pend[p->npend].xid = xid;
        p->pend[p->npend].op = op;
        p->npend++;
    }
    /* Before the request that must see it, or after the one that must not: the
     * server takes one connection's requests in order. */
    if (before && lp_inject_held(p) != 0) return -1;
    if (write_all(p->ufd, f, 4 + len) != 0) return -1;
    if (lose) {
        p->dropping = 1;
        p->close_at = now + 300;
    }
    if (inject && !before) {
        int rc = lp_inject_held(p);
        if (hold_reply) {
            p->hold_xid = xid;
            p->hold_pending = 1;
        }
        if (rc != 0) return -1;
    }
    return 0;
}

static int lp_hbuf_add(lp_proxy *p, const unsigned char *f, size_t n) {
    if (p->hlen + n > p->hcap) {
        size_t cap = (p->hlen + n) * 2;
        unsigned char *nb = realloc(p->hbuf, cap);
        if (!nb) return -1;
        p->hbuf = nb;
        p->hcap = cap;
    }
    memcpy(p->hbuf + p->hlen, f, n);
    p->hlen += n;
    return 0;
}

/* One whole frame from the server. */
static int lp_server_frame(lp_proxy *p, unsigned char *f, uint32_t len) {
    unsigned char *b = f + 4;
    if (p->dropping) return 0;
    if (p->dfirst || len < 16) {
        p->dfirst = 0;
        return p->hlen ? lp_hbuf_add(p, f, 4 + len) : write_all(p->cfd, f, 4 + len);
    }
    int32_t xid = (int32_t)be32(b);
    int err = (int)be32(b + 12);
    if (p->swallow && xid == p->held_xid) {
        p->swallow = 0;
        return 0;
    }
    int op = lp_pending_take(p, xid);
    pthread_mutex_lock(&p->mu);
    int hide = p->hide, mangle = p->mangle;
    pthread_mutex_unlock(&p->mu);

    if (err == 0 && mangle && op == LP_OP_CREATE2 && len >= 20) {
        uint32_t plen = be32(b + 16);
        unsigned char *path = b + 20;
        if (20 + (size_t)plen <= len) {
            unsigned char *m = memmem(path, plen, "-lock-", 6);
            if (m && m + 6 < path + plen) m[6] = '-';
        }
    }
    unsigned char *out = f;
    size_t out_len = 4 + len;
    unsigned char *tmp = NULL;
    if (err == 0 && hide && (op == LP_OP_GETCHILDREN || op == LP_OP_GETCHILDREN2) && len >= 20) {
        /* Header, an empty vector, then whatever followed the vector (a Stat). */
        uint32_t n = be32(b + 16);
        size_t off = 20;
        for (uint32_t i = 0; i < n && off + 4 <= len; i++)
            off += 4 + be32(b + off);
        if (off <= len) {
            tmp = malloc(4 + 20 + (len - off));
            if (!tmp) return -1;
            memcpy(tmp + 4, b, 16);
            put32(tmp + 20, 0);
            memcpy(tmp + 24, b + off, len - off);
            out_len = 4 + 20 + (len - off);
            put32(tmp, (uint32_t)(out_len - 4));
            out = tmp;
        }
    }
    int rc;
    if (p->hold_pending && xid == p->hold_xid) {
        p->hold_pending = 0;
        pthread_mutex_lock(&p->mu);
        p->holding = 1;
        p->release = 0;
        pthread_mutex_unlock(&p->mu);
        rc = lp_hbuf_add(p, out, out_len);
    } else if (p->hlen) {
        rc = lp_hbuf_add(p, out, out_len);
    } else {
        rc = write_all(p->cfd, out, out_len);
    }
    free(tmp);
    return rc;
}

/* Reads what one side has and handles every whole frame. */
static int lp_pump(lp_proxy *p, int from_client, int64_t now) {
    int fd = from_client ? p->cfd : p->ufd;
    unsigned char *buf = from_client ? p->cbuf : p->dbuf;
    size_t *blen = from_client ? &p->clen : &p->dlen;
    ssize_t n = read(fd, buf + *blen, LP_BUF - *blen);
    if (n <= 0) return -1;
    *blen += (size_t)n;
    while (*blen >= 4) {
        uint32_t len = be32(buf);
        if (len > LP_BUF - 4) return -1;
        if (*blen < 4 + (size_t)len) break;
        int rc = from_client ? lp_client_frame(p, buf, len, now) : lp_server_frame(p, buf, len);
        if (rc != 0) return -1;
        if (p->cfd < 0) return 0;
        memmove(buf, buf + 4 + len, *blen - 4 - len);
        *blen -= 4 + len;
    }
    return 0;
}

static void *lp_main(void *arg) {
    lp_proxy *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int stop = p->stop, sever = p->sever_now, release = p->release;
        p->sever_now = 0;
        if (sever && p->cfd >= 0) p->refuse_until = lt_now_ms() + p->refuse_ms;
        if (release) {
            p->release = 0;
            p->holding = 0;
        }
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        int64_t now = lt_now_ms();
        if (p->cfd >= 0 && (sever || (p->dropping && now >= p->close_at))) lp_close_conn(p);
        if (release && p->cfd >= 0 && p->hlen) {
            if (write_all(p->cfd, p->hbuf, p->hlen) != 0) lp_close_conn(p);
            p->hlen = 0;
        }

        struct pollfd fds[3] = {{.fd = p->lfd, .events = POLLIN},
                                {.fd = p->cfd, .events = POLLIN},
                                {.fd = p->ufd, .events = POLLIN}};
        poll(fds, p->cfd >= 0 ? 3 : 1, 10);
        now = lt_now_ms();

        if (fds[0].revents & POLLIN) {
            int nc = accept(p->lfd, NULL, NULL);
            pthread_mutex_lock(&p->mu);
            int refuse = now < p->refuse_until;
            pthread_mutex_unlock(&p->mu);
            if (nc >= 0 && (refuse || p->cfd >= 0)) {
                close(nc);
            } else if (nc >= 0) {
                int uf = socket(AF_INET, SOCK_STREAM, 0);
                if (uf < 0 || connect(uf, (struct sockaddr *)&p->up, sizeof(p->up)) != 0) {
                    if (uf >= 0) close(uf);
                    close(nc);
                } else {
                    p->cfd = nc;
                    p->ufd = uf;
                    p->cfirst = p->dfirst = 1;
                    pthread_mutex_lock(&p->mu);
                    p->connections++;
                    pthread_mutex_unlock(&p->mu);
                }
            }
            continue;
        }
        if (p->cfd < 0) continue;
        if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) && lp_pump(p, 1, now) != 0) {
            lp_close_conn(p);
            continue;
        }
        if (p->cfd >= 0 && (fds[2].revents & (POLLIN | POLLHUP | POLLERR)) &&
            lp_pump(p, 0, now) != 0)
            lp_close_conn(p);
    }
    lp_close_conn(p);
    return NULL;
}

lp_proxy *lp_start(const char *hosts) {
    char host[64];
    int port = 0;
    CHECK(sscanf(hosts, "%63[^:]:%d", host, &port) == 2);
    lp_proxy *p = calloc(1, sizeof(*p));
    CHECK(p != NULL);
    p->cbuf = malloc(LP_BUF);
    p->dbuf = malloc(LP_BUF);
    CHECK(p->cbuf && p->dbuf);
    p->cfd = p->ufd = -1;
    pthread_mutex_init(&p->mu, NULL);
    p->up.sin_family = AF_INET;
    p->up.sin_port = htons((uint16_t)port);
    CHECK(inet_pton(AF_INET, host, &p->up.sin_addr) == 1);
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t al = sizeof(a);
    CHECK(bind(p->lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(p->lfd, 8) == 0);
    CHECK(getsockname(p->lfd, (struct sockaddr *)&a, &al) == 0);
    snprintf(p->hosts, sizeof(p->hosts), "127.0.0.1:%d", ntohs(a.sin_port));
    CHECK(pthread_create(&p->thr, NULL, lp_main, p) == 0);
    return p;
}

const char *lp_hosts(lp_proxy *p) {
    return p->hosts;
}

void lp_stop(lp_proxy *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thr, NULL);
    close(p->lfd);
    pthread_mutex_destroy(&p->mu);
    free(p->held);
    free(p->hbuf);
    free(p->cbuf);
    free(p->dbuf);
    free(p);
}

void lp_lose_next_create_reply(lp_proxy *p, int refuse_ms) {
    pthread_mutex_lock(&p->mu);
    p->lose_arm = 1;
    p->refuse_ms = refuse_ms;
    pthread_mutex_unlock(&p->mu);
}

void lp_sever(lp_proxy *p, int refuse_ms) {
    pthread_mutex_lock(&p->mu);
    p->sever_now = 1;
    p->refuse_ms = refuse_ms;
    pthread_mutex_unlock(&p->mu);
}

void lp_hold_next_create(lp_proxy *p, int after_op, int after_op2, int hold_reply) {
    pthread_mutex_lock(&p->mu);
    p->hold_arm = 1;
    p->hold_after_op = after_op;
    p->hold_after_op2 = after_op2;
    p->hold_reply = hold_reply;
    p->hold_before = 0;
    p->refuse_ms = 0;
    pthread_mutex_unlock(&p->mu);
}

void lp_hold_next_create_before(lp_proxy *p, int op) {
    pthread_mutex_lock(&p->mu);
    p->hold_arm = 1;
    p->hold_after_op = op;
    p->hold_after_op2 = -1;
    p->hold_reply = 0;
    p->hold_before = 1;
    p->refuse_ms = 0;
    pthread_mutex_unlock(&p->mu);
}

void lp_inject_after(lp_proxy *p, int after_op, int after_op2) {
    pthread_mutex_lock(&p->mu);
    p->hold_after_op = after_op;
    p->hold_after_op2 = after_op2;
    pthread_mutex_unlock(&p->mu);
}

void lp_release(lp_proxy *p) {
    pthread_mutex_lock(&p->mu);
    p->release = 1;
    pthread_mutex_unlock(&p->mu);
}

void lp_hide_children(lp_proxy *p, int on) {
    pthread_mutex_lock(&p->mu);
    p->hide = on;
    pthread_mutex_unlock(&p->mu);
}

void lp_mangle_create(lp_proxy *p, int on) {
    pthread_mutex_lock(&p->mu);
    p->mangle = on;
    pthread_mutex_unlock(&p->mu);
}

static int lp_get(lp_proxy *p, const int *field) {
    pthread_mutex_lock(&p->mu);
    int v = *field;
    pthread_mutex_unlock(&p->mu);
    return v;
}

int lp_triggers(lp_proxy *p) {
    return lp_get(p, &p->triggers);
}

int lp_injected(lp_proxy *p) {
    return lp_get(p, &p->injected);
}

int lp_holding(lp_proxy *p) {
    return lp_get(p, &p->holding);
}

int lp_connections(lp_proxy *p) {
    return lp_get(p, &p->connections);
}
