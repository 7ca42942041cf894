/* fault_proxy.c: see fault_proxy.h. One thread polls the listening socket, a wake-up
 * pipe and both ends of every connection. Each direction of a connection has an input
 * buffer, cut into the hook's frames, and an output queue of chunks, each with the time
 * it may leave; the queue is written in order, so a delayed or held chunk keeps every
 * later one of its direction behind it. Sockets are non-blocking, so a peer that does
 * not read stalls only its own connection. The settings the other threads change live
 * under `mu` and are taken by the proxy's thread once per turn. */
#include "fault_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FP__READ      65536
#define FP__QUEUE_MAX (4u << 20) /* a direction stops reading with this much queued */
#define FP__MAX_CONNS 1024

typedef struct fp__chunk {
    struct fp__chunk *next;
    long long due;
    unsigned tag;
    size_t len, off;
    unsigned char data[];
} fp__chunk;

typedef struct fp__dir {
    unsigned char *in; /* bytes read and not yet a whole frame */
    size_t in_len, in_cap;
    fp__chunk *head, *tail;
    size_t queued;
    int held; /* waits for fault_proxy_release */
    int eof;  /* its source closed: the connection ends once the queue is empty */
} fp__dir;

struct fp_conn {
    fault_proxy *p;
    fp_conn *next;
    int cfd, ufd;
    int stranded;     /* cfd is closed; ufd is read and thrown away */
    fp__dir d[2];     /* FP_UP reads cfd and writes ufd; FP_DOWN the other way */
    long long cut_at; /* 0: none */
    void *data;
    int dead; /* to be freed at the end of this turn */
};

struct fault_proxy {
    int lfd, port;
    int wake[2];
    struct sockaddr_in up;
    fp_hook hook;
    int max_conns;
    pthread_t thr;
    fp_conn *conns;
    int nconns; /* the proxy thread's own count */

    pthread_mutex_t mu; /* guards what follows */
    pthread_cond_t cond;
    int stop;
    int blackhole;
    int delay_ms;
    long long refuse_until; /* LLONG_MAX: until turned off */
    int release_req;
    unsigned cut_req, cut_done;
    int connections, active, holding, stranded;
};

long long fp_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *fault_proxy_strerror(int rc) {
    switch (rc) {
    case FAULT_PROXY_OK:
        return "ok";
    case FAULT_PROXY_ERR_ARGS:
        return "bad arguments";
    case FAULT_PROXY_ERR_NOMEM:
        return "out of memory";
    case FAULT_PROXY_ERR_LISTEN:
        return "cannot listen on the port";
    case FAULT_PROXY_ERR_THREAD:
        return "cannot start the thread";
    default:
        return "unknown error";
    }
}

/* ---------------------------------------------------------------- small helpers */

static void fp__wake(fault_proxy *p) {
    char b = 1;
    ssize_t w = write(p->wake[1], &b, 1); /* a full pipe is a wake-up already pending */
    (void)w;
}

static void fp__set(fault_proxy *p, int *field, int v) {
    pthread_mutex_lock(&p->mu);
    *field = v;
    pthread_mutex_unlock(&p->mu);
    fp__wake(p);
}

static int fp__get(fault_proxy *p, const int *field) {
    pthread_mutex_lock(&p->mu);
    int v = *field;
    pthread_mutex_unlock(&p->mu);
    return v;
}

static void fp__count(fault_proxy *p, int *field, int by) {
    pthread_mutex_lock(&p->mu);
    *field += by;
    pthread_mutex_unlock(&p->mu);
}

static void fp__nonblock(int fd) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---------------------------------------------------------------- connections */

static int fp__enqueue(fp_conn *c, int dir, const void *data, size_t len, long long due,
                       unsigned tag) {
    fp__chunk *k = malloc(sizeof(*k) + len);
    if (!k) return -1;
    k->next = NULL;
    k->due = due;
    k->tag = tag;
    k->len = len;
    k->off = 0;
    memcpy(k->data, data, len);
    fp__dir *d = &c->d[dir];
    if (d->tail)
        d->tail->next = k;
    else
        d->head = k;
    d->tail = k;
    d->queued += len;
    return 0;
}

static void fp__chunk_done(fp_conn *c, fp__chunk *k) {
    if (k->tag && c->p->hook.done) c->p->hook.done(c->p->hook.arg, c, k->tag);
    free(k);
}

/* Marks the connection dead and closes its sockets; freed at the end of the turn. */
static void fp__cut(fp_conn *c) {
    if (c->dead) return;
    c->dead = 1;
    if (c->cfd >= 0) close(c->cfd);
    if (c->ufd >= 0) close(c->ufd);
    c->cfd = c->ufd = -1;
}

static void fp__strand(fp_conn *c) {
    fault_proxy *p = c->p;
    /* Counted before the client can see its side close. */
    fp__count(p, &p->stranded, 1);
    close(c->cfd);
    c->cfd = -1;
    c->stranded = 1;
    for (int dir = 0; dir < 2; dir++) {
        fp__dir *d = &c->d[dir];
        if (d->held) fp__count(p, &p->holding, -1);
        d->held = 0;
        while (d->head) {
            fp__chunk *k = d->head;
            d->head = k->next;
            fp__chunk_done(c, k);
        }
        d->tail = NULL;
        d->queued = d->in_len = 0;
    }
}

static void fp__conn_free(fp_conn *c) {
    fault_proxy *p = c->p;
    if (p->hook.close) p->hook.close(p->hook.arg, c);
    for (int dir = 0; dir < 2; dir++) {
        fp__dir *d = &c->d[dir];
        while (d->head) {
            fp__chunk *k = d->head;
            d->head = k->next;
            fp__chunk_done(c, k);
        }
        if (d->held) fp__count(p, &p->holding, -1);
        free(d->in);
    }
    if (c->stranded) fp__count(p, &p->stranded, -1);
    fp__count(p, &p->active, -1);
    p->nconns--;
    free(c);
}

static int fp__connect_upstream(fp_conn *c) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&c->p->up, sizeof(c->p->up)) != 0) {
        close(fd);
        return -1;
    }
    fp__nonblock(fd);
    c->ufd = fd;
    if (c->p->hook.open) c->p->hook.open(c->p->hook.arg, c);
    return 0;
}

static void fp__accept(fault_proxy *p, int blackhole, long long now) {
    int fd = accept(p->lfd, NULL, NULL);
    if (fd < 0) return;
    pthread_mutex_lock(&p->mu);
    int refuse = now < p->refuse_until;
    pthread_mutex_unlock(&p->mu);
    int limit = p->max_conns > 0 ? p->max_conns : FP__MAX_CONNS;
    fp_conn *c = NULL;
    if (refuse || p->nconns >= limit || !(c = calloc(1, sizeof(*c)))) {
        close(fd);
        return;
    }
    c->p = p;
    c->cfd = fd;
    c->ufd = -1;
    fp__nonblock(fd);
    /* In a partition the upstream is reached only once it heals, as a SYN would be. */
    if (!blackhole && fp__connect_upstream(c) != 0) {
        close(fd);
        free(c);
        return;
    }
    c->next = p->conns;
    p->conns = c;
    p->nconns++;
    pthread_mutex_lock(&p->mu);
    p->connections++;
    p->active++;
    pthread_mutex_unlock(&p->mu);
}

/* Cuts what has been read in direction dir into frames and lets the hook decide. */
static void fp__frames(fp_conn *c, int dir, int delay_ms, long long now) {
    fault_proxy *p = c->p;
    fp__dir *d = &c->d[dir];
    while (d->in_len > 0 && !c->dead && !c->stranded) {
        size_t n = d->in_len;
        if (p->hook.frame) {
            long got = p->hook.frame(p->hook.arg, c, dir, d->in, d->in_len);
            if (got < 0 || (size_t)got > d->in_len) {
                fp__cut(c);
                return;
            }
            if (got == 0) return;
            n = (size_t)got;
        }
        fp_frame f = {.dir = dir, .data = d->in, .len = n};
        fp_verdict v = p->hook.decide ? p->hook.decide(p->hook.arg, c, &f) : FP_PASS;
        if (c->dead) return; /* a send that ran out of memory */
        long long due = now + delay_ms;
        switch (v) {
        case FP_DELAY:
            due += f.delay_ms > 0 ? f.delay_ms : 0; /* fall through */
        case FP_HOLD:
        case FP_PASS:
            if (v == FP_HOLD && !d->held) {
                d->held = 1;
                fp__count(p, &p->holding, 1);
            }
            if (fp__enqueue(c, dir, f.data, f.len, due, f.tag) != 0) fp__cut(c);
            break;
        case FP_DROP:
            break;
        case FP_CUT:
            fp__cut(c);
            return;
        case FP_STRAND:
            fp__strand(c);
            return;
        }
        memmove(d->in, d->in + n, d->in_len - n);
        d->in_len -= n;
    }
}

static void fp__read(fp_conn *c, int dir, int delay_ms, long long now) {
    fp__dir *d = &c->d[dir];
    int fd = dir == FP_UP ? c->cfd : c->ufd;
    if (d->in_cap - d->in_len < FP__READ) {
        size_t cap = d->in_cap ? d->in_cap * 2 : 2 * FP__READ;
        while (cap - d->in_len < FP__READ)
            cap *= 2;
        unsigned char *nb = realloc(d->in, cap);
        if (!nb) {
            fp__cut(c);
            return;
        }
        d->in = nb;
        d->in_cap = cap;
    }
    ssize_t n = read(fd, d->in + d->in_len, FP__READ);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
        d->eof = 1;
        return;
    }
    d->in_len += (size_t)n;
    fp__frames(c, dir, delay_ms, now);
}

/* Writes what is due in direction dir; returns -1 if the peer is gone. */
static int fp__flush(fp_conn *c, int dir, long long now) {
    fp__dir *d = &c->d[dir];
    int fd = dir == FP_UP ? c->ufd : c->cfd;
    while (d->head && !d->held && d->head->due <= now) {
        fp__chunk *k = d->head;
        ssize_t w = send(fd, k->data + k->off, k->len - k->off, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
        if (w < 0) return -1;
        k->off += (size_t)w;
        d->queued -= (size_t)w;
        if (k->off < k->len) return 0;
        d->head = k->next;
        if (!d->head) d->tail = NULL;
        fp__chunk_done(c, k);
    }
    return 0;
}

/* The connection's part of the poll set: which events, and the earliest time that
 * matters to it (LLONG_MAX: none). */
static long long fp__events(fp_conn *c, int blackhole, short ev[2]) {
    long long next = c->cut_at ? c->cut_at : LLONG_MAX;
    ev[0] = ev[1] = 0;
    if (c->stranded) {
        ev[1] = POLLIN;
        return next;
    }
    if (blackhole || c->ufd < 0) return next;
    for (int dir = 0; dir < 2; dir++) {
        fp__dir *d = &c->d[dir];
        int src = dir == FP_UP ? 0 : 1;
        if (!d->eof && d->queued < FP__QUEUE_MAX) ev[src] |= POLLIN;
        if (d->head && !d->held) {
            if (d->head->due <= fp_now_ms())
                ev[1 - src] |= POLLOUT;
            else if (d->head->due < next)
                next = d->head->due;
        }
    }
    return next;
}

static void fp__drain_stranded(fp_conn *c) {
    char buf[4096];
    ssize_t n = read(c->ufd, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) fp__cut(c);
}

/* ---------------------------------------------------------------- the thread */

static void *fp__main(void *arg) {
    fault_proxy *p = arg;
    struct pollfd *fds = NULL;
    fp_conn **owner = NULL;
    size_t cap = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int stop = p->stop, blackhole = p->blackhole, delay_ms = p->delay_ms;
        int release = p->release_req;
        unsigned cut = p->cut_req;
        p->release_req = 0;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        long long now = fp_now_ms();

        if (cut != p->cut_done) {
            for (fp_conn *c = p->conns; c; c = c->next)
                fp__cut(c);
        }
        for (fp_conn *c = p->conns; c; c = c->next) {
            if (c->dead) continue;
            if (c->cut_at && now >= c->cut_at) fp__cut(c);
            if (release) {
                for (int dir = 0; dir < 2; dir++) {
                    if (c->d[dir].held) fp__count(p, &p->holding, -1);
                    c->d[dir].held = 0;
                }
            }
            /* One accepted in a partition reaches the upstream once it is over. */
            if (!blackhole && !c->dead && !c->stranded && c->ufd < 0 &&
                fp__connect_upstream(c) != 0)
                fp__cut(c);
            if (c->dead || c->stranded || blackhole || c->ufd < 0) continue;
            for (int dir = 0; dir < 2 && !c->dead; dir++) {
                if (fp__flush(c, dir, now) != 0) fp__cut(c);
                /* A side that closed ends the connection once what it sent is out. */
                if (c->d[dir].eof && !c->d[dir].head) fp__cut(c);
            }
        }
        /* Free the dead, then tell a cut_all() caller that its connections are gone. */
        for (fp_conn **pc = &p->conns; *pc;) {
            fp_conn *c = *pc;
            if (c->dead) {
                *pc = c->next;
                fp__conn_free(c);
            } else {
                pc = &c->next;
            }
        }
        if (cut != p->cut_done) {
            pthread_mutex_lock(&p->mu);
            p->cut_done = cut;
            pthread_cond_broadcast(&p->cond);
            pthread_mutex_unlock(&p->mu);
        }

        size_t need = 2 + 2 * (size_t)p->nconns;
        if (need > cap) {
            cap = need * 2;
            struct pollfd *nf = realloc(fds, cap * sizeof(*fds));
            fp_conn **no = realloc(owner, cap * sizeof(*owner));
            if (nf) fds = nf;
            if (no) owner = no;
            if (!nf || !no) {
                cap = 0;
                usleep(10000);
                continue;
            }
        }
        size_t n = 0;
        fds[n++] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
        fds[n++] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
        long long next = LLONG_MAX;
        for (fp_conn *c = p->conns; c; c = c->next) {
            short ev[2];
            long long t = fp__events(c, blackhole, ev);
            if (t < next) next = t;
            owner[n] = c;
            fds[n++] = (struct pollfd){.fd = ev[0] ? c->cfd : -1, .events = ev[0]};
            owner[n] = c;
            fds[n++] = (struct pollfd){.fd = ev[1] ? c->ufd : -1, .events = ev[1]};
        }
        long long wait = next == LLONG_MAX ? 1000 : next - fp_now_ms();
        if (wait < 0) wait = 0;
        if (wait > 1000) wait = 1000;
        if (poll(fds, n, (int)wait) < 0 && errno != EINTR) break;
        now = fp_now_ms();
        /* Taken again: a setting changed while we waited applies to what woke us (the
         * caller may have sent its bytes right after the change). */
        pthread_mutex_lock(&p->mu);
        blackhole = p->blackhole;
        delay_ms = p->delay_ms;
        pthread_mutex_unlock(&p->mu);

        if (fds[1].revents & POLLIN) {
            char buf[64];
            while (read(p->wake[0], buf, sizeof(buf)) > 0) {
            }
        }
        if (fds[0].revents & POLLIN) fp__accept(p, blackhole, now);
        for (size_t i = 2; i < n; i += 2) {
            fp_conn *c = owner[i];
            if (c->dead) continue;
            if (c->stranded) {
                if (fds[i + 1].revents) fp__drain_stranded(c);
                continue;
            }
            if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) fp__read(c, FP_UP, delay_ms, now);
            if (!c->dead && !c->stranded && (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                fp__read(c, FP_DOWN, delay_ms, now);
        }
    }
    for (fp_conn *c = p->conns; c;) {
        fp_conn *next = c->next;
        fp__cut(c);
        fp__conn_free(c);
        c = next;
    }
    p->conns = NULL;
    pthread_mutex_lock(&p->mu);
    p->cut_done = p->cut_req;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
    free(fds);
    free(owner);
    return NULL;
}

/* ---------------------------------------------------------------- the face */

int fault_proxy_new(const fault_proxy_config *cfg, fault_proxy **out) {
    if (!cfg || !out || cfg->upstream_port <= 0 || cfg->upstream_port > 65535 ||
        cfg->listen_port < 0 || cfg->listen_port > 65535)
        return FAULT_PROXY_ERR_ARGS;
    struct sockaddr_in up = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)cfg->upstream_port)};
    const char *host = cfg->upstream_host ? cfg->upstream_host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &up.sin_addr) != 1) {
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
        if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return FAULT_PROXY_ERR_ARGS;
        up.sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
        freeaddrinfo(res);
    }
    fault_proxy *p = calloc(1, sizeof(*p));
    if (!p) return FAULT_PROXY_ERR_NOMEM;
    p->up = up;
    if (cfg->hook) p->hook = *cfg->hook;
    p->max_conns = cfg->max_conns;
    p->lfd = p->wake[0] = p->wake[1] = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cond, NULL);
    int rc = FAULT_PROXY_ERR_LISTEN;
    if (pipe(p->wake) != 0) goto fail;
    fcntl(p->wake[0], F_SETFL, O_NONBLOCK);
    fcntl(p->wake[1], F_SETFL, O_NONBLOCK);
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (p->lfd < 0) goto fail;
    int one = 1;
    setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)cfg->listen_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (bind(p->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(p->lfd, 64) != 0 ||
        getsockname(p->lfd, (struct sockaddr *)&a, &al) != 0)
        goto fail;
    fcntl(p->lfd, F_SETFL, O_NONBLOCK);
    p->port = ntohs(a.sin_port);
    rc = FAULT_PROXY_ERR_THREAD;
    if (pthread_create(&p->thr, NULL, fp__main, p) != 0) goto fail;
    *out = p;
    return FAULT_PROXY_OK;
fail:
    if (p->lfd >= 0) close(p->lfd);
    if (p->wake[0] >= 0) close(p->wake[0]);
    if (p->wake[1] >= 0) close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cond);
    free(p);
    return rc;
}

void fault_proxy_free(fault_proxy *p) {
    if (!p) return;
    fp__set(p, &p->stop, 1);
    pthread_join(p->thr, NULL);
    close(p->lfd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cond);
    free(p);
}

int fault_proxy_port(const fault_proxy *p) {
    return p->port;
}

void fault_proxy_blackhole(fault_proxy *p, int on) {
    fp__set(p, &p->blackhole, on != 0);
}

void fault_proxy_delay(fault_proxy *p, int ms) {
    fp__set(p, &p->delay_ms, ms > 0 ? ms : 0);
}

void fault_proxy_cut_all(fault_proxy *p) {
    pthread_mutex_lock(&p->mu);
    unsigned want = ++p->cut_req;
    pthread_mutex_unlock(&p->mu);
    fp__wake(p);
    pthread_mutex_lock(&p->mu);
    while ((int)(p->cut_done - want) < 0 && !p->stop)
        pthread_cond_wait(&p->cond, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void fault_proxy_refuse(fault_proxy *p, int ms) {
    pthread_mutex_lock(&p->mu);
    p->refuse_until = ms < 0 ? LLONG_MAX : ms == 0 ? 0 : fp_now_ms() + ms;
    pthread_mutex_unlock(&p->mu);
}

void fault_proxy_release(fault_proxy *p) {
    fp__set(p, &p->release_req, 1);
}

int fault_proxy_connections(fault_proxy *p) {
    return fp__get(p, &p->connections);
}

int fault_proxy_active(fault_proxy *p) {
    return fp__get(p, &p->active);
}

int fault_proxy_holding(fault_proxy *p) {
    return fp__get(p, &p->holding);
}

int fault_proxy_stranded(fault_proxy *p) {
    return fp__get(p, &p->stranded);
}

fault_proxy *fp_conn_proxy(fp_conn *c) {
    return c->p;
}

void *fp_conn_data(fp_conn *c) {
    return c->data;
}

void fp_conn_set_data(fp_conn *c, void *data) {
    c->data = data;
}

int fp_conn_send(fp_conn *c, int dir, const void *data, size_t len) {
    pthread_mutex_lock(&c->p->mu);
    int delay_ms = c->p->delay_ms;
    pthread_mutex_unlock(&c->p->mu);
    if (fp__enqueue(c, dir, data, len, fp_now_ms() + delay_ms, 0) == 0) return 0;
    fp__cut(c);
    return -1;
}

void fp_conn_cut_after(fp_conn *c, int ms) {
    c->cut_at = fp_now_ms() + (ms > 0 ? ms : 0);
}
