/* lock_lost_reply_test: a create whose reply is lost is recovered, and never
 * leaves an orphan. The zklock session talks to ZooKeeper through a small
 * loopback TCP proxy in this test. When armed, the proxy forwards the next
 * create2 request of a lock node to the server, swallows the reply, and severs
 * the connection 300 ms later (the server has made the node by then). The client
 * sees a connection loss on the create, reconnects through the proxy and its
 * ZooKeeper session survives. Checked:
 *   1. fair: the acquisition adopts the node it made (one child, czxid = token);
 *   2. herd: likewise for the single herd node;
 *   3. fair, and the proxy refuses reconnection until the acquisition's deadline
 *      has passed: the acquisition fails, and once the connection is back the
 *      node it may have made is deleted in the background (no orphan);
 *   4. a release while disconnected: the hold is SUSPECT first, the release says
 *      ZKLOCK_ERR_CONNECTION, and the node is deleted after reconnection, so
 *      another session gets the lock. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lock_test.h"

#define ZOO_CREATE2_OPCODE 15

typedef struct proxy {
    int lfd, port;
    struct sockaddr_in up;
    pthread_mutex_t mu;
    int arm;       /* sever after the next lock-node create */
    int sever_now; /* sever the current connection at once */
    int refuse_ms; /* after severing, refuse new connections this long */
    int64_t refuse_until;
    int triggers;
    int stop;
    pthread_t thr;
} proxy;

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void *proxy_main(void *arg) {
    proxy *p = arg;
    int cfd = -1, ufd = -1, first = 1, dropping = 0;
    int64_t close_at = 0;
    static unsigned char buf[1 << 20];
    size_t blen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int stop = p->stop, sever = p->sever_now;
        p->sever_now = 0;
        if (sever && cfd >= 0) p->refuse_until = lt_now_ms() + p->refuse_ms;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        int64_t now = lt_now_ms();
        if (cfd >= 0 && (sever || (dropping && now >= close_at))) {
            close(cfd);
            close(ufd);
            cfd = ufd = -1;
        }

        struct pollfd fds[3] = {{.fd = p->lfd, .events = POLLIN},
                                {.fd = cfd, .events = POLLIN},
                                {.fd = ufd, .events = POLLIN}};
        poll(fds, cfd >= 0 ? 3 : 1, 20);
        now = lt_now_ms();

        if (fds[0].revents & POLLIN) {
            int nc = accept(p->lfd, NULL, NULL);
            pthread_mutex_lock(&p->mu);
            int refuse = now < p->refuse_until;
            pthread_mutex_unlock(&p->mu);
            if (nc >= 0 && (refuse || cfd >= 0)) {
                close(nc);
            } else if (nc >= 0) {
                ufd = socket(AF_INET, SOCK_STREAM, 0);
                if (connect(ufd, (struct sockaddr *)&p->up, sizeof(p->up)) != 0) {
                    close(ufd);
                    close(nc);
                    ufd = -1;
                } else {
                    cfd = nc;
                    blen = 0;
                    first = 1;
                    dropping = 0;
                }
            }
            continue;
        }
        if (cfd < 0) continue;

        int broken = 0;
        if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = read(cfd, buf + blen, sizeof(buf) - blen);
            if (n <= 0)
                broken = 1;
            else
                blen += (size_t)n;
            /* Forward whole frames (4-byte length + payload), looking at each. */
            while (!broken && blen >= 4) {
                uint32_t len = ntohl(*(uint32_t *)buf);
                if (blen < 4 + (size_t)len) break;
                const unsigned char *f = buf + 4;
                if (!dropping) {
                    if (write_all(ufd, buf, 4 + len) != 0) broken = 1;
                    int type = len >= 8 ? (int)ntohl(*(const uint32_t *)(f + 4)) : -1;
                    pthread_mutex_lock(&p->mu);
                    if (!first && p->arm && type == ZOO_CREATE2_OPCODE &&
                        (memmem(f, len, "-lock-", 6) || memmem(f, len, "-herd", 5))) {
                        p->arm = 0;
                        p->triggers++;
                        dropping = 1;
                        close_at = now + 300;
                        p->refuse_until = close_at + p->refuse_ms;
                    }
                    pthread_mutex_unlock(&p->mu);
                }
                first = 0;
                memmove(buf, buf + 4 + len, blen - 4 - len);
                blen -= 4 + len;
            }
        }
        if (!broken && (fds[2].revents & (POLLIN | POLLHUP | POLLERR))) {
            static unsigned char down[1 << 16];
            ssize_t n = read(ufd, down, sizeof(down));
            if (n <= 0)
                broken = 1;
            else if (!dropping && write_all(cfd, down, (size_t)n) != 0)
                broken = 1;
        }
        if (broken) {
            close(cfd);
            close(ufd);
            cfd = ufd = -1;
        }
    }
    if (cfd >= 0) {
        close(cfd);
        close(ufd);
    }
    return NULL;
}

static void proxy_start(proxy *p, const char *hosts) {
    char host[64];
    int port = 0;
    CHECK(sscanf(hosts, "%63[^:]:%d", host, &port) == 2);
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    p->up.sin_family = AF_INET;
    p->up.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, host, &p->up.sin_addr);
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t al = sizeof(a);
    CHECK(bind(p->lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(p->lfd, 8) == 0);
    CHECK(getsockname(p->lfd, (struct sockaddr *)&a, &al) == 0);
    p->port = ntohs(a.sin_port);
    CHECK(pthread_create(&p->thr, NULL, proxy_main, p) == 0);
}

static void proxy_set(proxy *p, int arm, int sever_now, int refuse_ms) {
    pthread_mutex_lock(&p->mu);
    p->arm = arm;
    p->sever_now = sever_now;
    p->refuse_ms = refuse_ms;
    pthread_mutex_unlock(&p->mu);
}

static int proxy_triggers(proxy *p) {
    pthread_mutex_lock(&p->mu);
    int n = p->triggers;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* czxid of the only child of <root>/<name>, or of <root>/<name>-herd. */
static int64_t node_czxid(zhandle_t *zh, const char *name, int herd) {
    char path[512];
    struct Stat st;
    if (herd) {
        snprintf(path, sizeof(path), "/stock/locks/%s-herd", name);
    } else {
        struct String_vector v = {0, NULL};
        snprintf(path, sizeof(path), "/stock/locks/%s", name);
        CHECK_INT_EQ(ZOK, zoo_get_children(zh, path, 0, &v));
        CHECK_INT_EQ(1, v.count);
        snprintf(path, sizeof(path), "/stock/locks/%s/%s", name, v.data[0]);
        deallocate_String_vector(&v);
    }
    CHECK_INT_EQ(ZOK, zoo_exists(zh, path, 0, &st));
    return st.czxid;
}

int main(void) {
    const char *hosts = lt_zk_hosts();
    const char *base = lt_lock_name("lostreply");
    char fair[128], herd[128], giveup[128], rel[128];
    snprintf(fair, sizeof(fair), "%s_f", base);
    snprintf(herd, sizeof(herd), "%s_h", base);
    snprintf(giveup, sizeof(giveup), "%s_g", base);
    snprintf(rel, sizeof(rel), "%s_r", base);
    zhandle_t *zh = lt_zk_open(hosts);
    /* Parents first, so that the create the proxy cuts is one that succeeds. */
    const char *names[] = {fair, giveup, rel};
    for (int i = 0; i < 3; i++) {
        char path[256];
        snprintf(path, sizeof(path), "/stock/locks/%s", names[i]);
        zoo_create(zh, "/stock", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
        zoo_create(zh, "/stock/locks", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
        CHECK_INT_EQ(ZOK,
                     zoo_create(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, NULL, 0));
    }

    proxy p;
    proxy_start(&p, hosts);
    char via[64];
    snprintf(via, sizeof(via), "127.0.0.1:%d", p.port);
    zklock_session *s = lt_session(via, 10000);
    zklock_stats st;

    /* 1. Fair: the node made by the lost create is adopted. */
    zklock_hold *h = NULL;
    proxy_set(&p, 1, 0, 0);
    CHECK_INT_EQ(ZKLOCK_OK, zklock_acquire(s, fair, ZKLOCK_FAIR, 30000, &h));
    CHECK_INT_EQ(1, proxy_triggers(&p));
    zklock_get_stats(s, &st);
    CHECK_INT_EQ(1, st.recovered_creates);
    CHECK_INT_EQ(1, lt_children(zh, fair));
    CHECK_INT_EQ(node_czxid(zh, fair, 0), zklock_token(h));
    CHECK_INT_EQ(ZKLOCK_OK, zklock_check(h));
    CHECK_INT_EQ(ZKLOCK_OK, zklock_release(h));
    CHECK_INT_EQ(0, lt_children(zh, fair));
    printf("fair: lost create adopted\n");

    /* 2. Herd: the same for the single node. */
    proxy_set(&p, 1, 0, 0);
    CHECK_INT_EQ(ZKLOCK_OK, zklock_acquire(s, herd, ZKLOCK_HERD, 30000, &h));
    CHECK_INT_EQ(2, proxy_triggers(&p));
    zklock_get_stats(s, &st);
    CHECK_INT_EQ(2, st.recovered_creates);
    CHECK_INT_EQ(node_czxid(zh, herd, 1), zklock_token(h));
    CHECK_INT_EQ(ZKLOCK_OK, zklock_release(h));
    char herd_path[256];
    snprintf(herd_path, sizeof(herd_path), "/stock/locks/%s-herd", herd);
    CHECK_INT_EQ(ZNONODE, zoo_exists(zh, herd_path, 0, NULL));
    printf("herd: lost create adopted\n");

    /* 3. The acquisition gives up while the create's fate is unknown. */
    proxy_set(&p, 1, 0, 2500);
    int rc = zklock_acquire(s, giveup, ZKLOCK_FAIR, 1000, &h);
    CHECK(rc == ZKLOCK_ERR_CONNECTION || rc == ZKLOCK_ERR_TIMEOUT);
    CHECK_INT_EQ(3, proxy_triggers(&p));
    CHECK_INT_EQ(1, lt_children(zh, giveup)); /* made by the lost create */
    if (!lt_wait_children(zh, giveup, 0, 20))
        CHECK_FAIL_("orphan left: %d children", lt_children(zh, giveup));
    printf("gave up with an unknown create (%s): node deleted after reconnection\n",
           zklock_strerror(rc));

    /* 4. Release while disconnected. */
    CHECK_INT_EQ(ZKLOCK_OK, zklock_acquire(s, rel, ZKLOCK_FAIR, 10000, &h));
    proxy_set(&p, 0, 1, 2500);
    int chk = ZKLOCK_OK;
    for (int64_t end = lt_now_ms() + 10000; chk == ZKLOCK_OK && lt_now_ms() < end;) {
        lt_sleep_ms(20);
        chk = zklock_check(h);
    }
    CHECK_INT_EQ(ZKLOCK_SUSPECT, chk);
    CHECK_INT_EQ(ZKLOCK_ERR_CONNECTION, zklock_release(h));
    CHECK_INT_EQ(1, lt_children(zh, rel));
    zklock_session *other = lt_session(hosts, 0);
    zklock_hold *oh = NULL;
    CHECK_INT_EQ(ZKLOCK_OK, zklock_acquire(other, rel, ZKLOCK_FAIR, 30000, &oh));
    CHECK_INT_EQ(ZKLOCK_OK, zklock_release(oh));
    zklock_session_free(other);
    zklock_get_stats(s, &st);
    CHECK_INT_GE(st.suspect_events, 1);
    CHECK_INT_EQ(0, st.lost_events); /* the session survived every cut */
    CHECK_INT_EQ(0, st.expirations);
    printf("release while disconnected: node deleted after reconnection\n");

    zklock_session_free(s);
    pthread_mutex_lock(&p.mu);
    p.stop = 1;
    pthread_mutex_unlock(&p.mu);
    pthread_join(p.thr, NULL);
    close(p.lfd);
    zookeeper_close(zh);
    printf("ok\n");
    return 0;
}
