/* fault_proxy_test: the fault proxy (fault_proxy.h) against a stand-in upstream on
 * loopback that echoes what it gets and counts its connections and bytes. No server is
 * needed. Checked:
 *   1. the raw proxy changes no byte, either way, over a megabyte;
 *   2. a delay is observed on each way of a round trip (0 lifts it; how fast the trip
 *      is then is the machine's business, printed, not checked);
 *   3. a partition passes nothing either way, and a connection made during it reaches
 *      the upstream only when it ends; then what was sent arrives, in order;
 *   4. cut closes every connection (the client reads end of file) and the proxy goes on;
 *   5. the MySQL hook holds the N-th COMMIT (counted over connections), while the other
 *      connections flow, and prints its two lines; other packets and COMMITs pass;
 *   6. the MySQL hook's one-shot cut before a COMMIT, and its strand: the upstream's side
 *      stays open until the upstream closes it;
 *   7. the Redis hook's framing finds whole RESP values and waits for partial ones;
 *   8. behind the Redis hook, every reply type stockd's hiredis sees (integers as big as
 *      a fencing token, pub/sub messages, RESP3's types) comes back whole, in order and
 *      at once (within 1 s, a bound far above a loopback trip and far below a timeout). */
#include "check.h"
#include "fault_proxy.h"
#include "fault_proxy_mysql.h"
#include "fault_proxy_redis.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---------------------------------------------------------------- the stand-in */

static struct {
    int lfd, port;
    atomic_int conns, bytes;
    atomic_int close_all; /* bumped: every echo closes its connection */
} up;

static void *echo_main(void *arg) {
    int fd = (int)(intptr_t)arg;
    int gen = atomic_load(&up.close_all);
    char buf[65536];
    for (;;) {
        struct pollfd q = {fd, POLLIN, 0};
        int n = poll(&q, 1, 20);
        if (atomic_load(&up.close_all) != gen) break;
        if (n <= 0) continue;
        ssize_t got = read(fd, buf, sizeof(buf));
        if (got <= 0) break;
        atomic_fetch_add(&up.bytes, (int)got);
        for (ssize_t off = 0; off < got;) {
            ssize_t w = write(fd, buf + off, (size_t)(got - off));
            if (w <= 0) goto out;
            off += w;
        }
    }
out:
    close(fd);
    return NULL;
}

static void *accept_main(void *arg) {
    (void)arg;
    for (;;) {
        int fd = accept(up.lfd, NULL, NULL);
        if (fd < 0) return NULL;
        atomic_fetch_add(&up.conns, 1);
        pthread_t t;
        CHECK_INT_EQ(0, pthread_create(&t, NULL, echo_main, (void *)(intptr_t)fd));
        pthread_detach(t);
    }
}

static void upstream_start(void) {
    up.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    CHECK_INT_EQ(0, bind(up.lfd, (struct sockaddr *)&a, sizeof(a)));
    CHECK_INT_EQ(0, listen(up.lfd, 16));
    CHECK_INT_EQ(0, getsockname(up.lfd, (struct sockaddr *)&a, &al));
    up.port = ntohs(a.sin_port);
    pthread_t t;
    CHECK_INT_EQ(0, pthread_create(&t, NULL, accept_main, NULL));
    pthread_detach(t);
}

/* ---------------------------------------------------------------- helpers */

static fault_proxy *proxy(const fp_hook *hook) {
    fault_proxy_config cfg = {.upstream_port = up.port, .hook = hook};
    fault_proxy *p = NULL;
    int rc = fault_proxy_new(&cfg, &p);
    if (rc != FAULT_PROXY_OK) CHECK_FAIL_("fault_proxy_new: %s", fault_proxy_strerror(rc));
    return p;
}

static int dial(fault_proxy *p) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)fault_proxy_port(p)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_INT_EQ(0, connect(fd, (struct sockaddr *)&a, sizeof(a)));
    return fd;
}

static void send_all(int fd, const void *data, size_t n) {
    const char *b = data;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        CHECK(w > 0);
        b += w;
        n -= (size_t)w;
    }
}

/* Reads exactly n bytes within limit_ms; returns how many came. */
static size_t recv_n(int fd, void *buf, size_t n, int limit_ms) {
    size_t got = 0;
    long long end = fp_now_ms() + limit_ms;
    while (got < n) {
        long long left = end - fp_now_ms();
        struct pollfd q = {fd, POLLIN, 0};
        if (left <= 0 || poll(&q, 1, (int)left) != 1) break;
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

/* The milliseconds a round trip of msg takes (the echo coming back whole). */
static long long round_trip(int fd, const char *msg) {
    char back[256];
    size_t n = strlen(msg);
    long long t0 = fp_now_ms();
    send_all(fd, msg, n);
    CHECK_INT_EQ(n, recv_n(fd, back, n, 10000));
    CHECK(memcmp(back, msg, n) == 0);
    return fp_now_ms() - t0;
}

static void wait_for(atomic_int *v, int want) {
    for (int i = 0; i < 500 && atomic_load(v) != want; i++)
        usleep(10000);
    CHECK_INT_EQ(want, atomic_load(v));
}

/* ---------------------------------------------------------------- the cases */

static void test_raw_changes_no_byte(void) {
    fault_proxy *p = proxy(NULL);
    int fd = dial(p);
    size_t n = 1 << 20;
    unsigned char *out = malloc(n), *back = malloc(n);
    CHECK(out && back);
    unsigned x = 12345;
    for (size_t i = 0; i < n; i++)
        out[i] = (unsigned char)((x = x * 1103515245 + 12345) >> 16);
    /* Write in pieces, reading as we go, so neither side's buffers fill up. */
    size_t got = 0;
    for (size_t off = 0; off < n; off += 8192) {
        send_all(fd, out + off, 8192);
        got += recv_n(fd, back + got, off + 8192 - got, 5000);
    }
    CHECK_INT_EQ(n, got);
    CHECK(memcmp(out, back, n) == 0);
    CHECK_INT_EQ(1, fault_proxy_connections(p));
    close(fd);
    fault_proxy_free(p);
    free(out);
    free(back);
    printf("ok: the raw proxy changes no byte either way\n");
}

static void test_delay_is_observed(void) {
    fault_proxy *p = proxy(NULL);
    int fd = dial(p);
    round_trip(fd, "warm");
    fault_proxy_delay(p, 150);
    usleep(50000);
    long long took = round_trip(fd, "slow");
    CHECK_INT_GE(took, 290); /* 150 ms each way, less the clock's rounding */
    fault_proxy_delay(p, 0);
    usleep(50000);
    long long fast = round_trip(fd, "fast");
    printf("info: round trip %lld ms with 150 ms each way, %lld ms without\n", took, fast);
    close(fd);
    fault_proxy_free(p);
    printf("ok: a delay holds each way of a round trip, and 0 lifts it\n");
}

static void test_blackhole_passes_nothing(void) {
    fault_proxy *p = proxy(NULL);
    int fd = dial(p);
    round_trip(fd, "before");
    int conns = atomic_load(&up.conns), bytes = atomic_load(&up.bytes);
    fault_proxy_blackhole(p, 1);
    usleep(50000);
    send_all(fd, "lost?", 5);
    int fd2 = dial(p); /* accepted, but the upstream must not see it */
    send_all(fd2, "late", 4);
    char buf[16];
    CHECK_INT_EQ(0, recv_n(fd, buf, 5, 500));
    CHECK_INT_EQ(0, recv_n(fd2, buf, 4, 100));
    CHECK_INT_EQ(bytes, atomic_load(&up.bytes));
    CHECK_INT_EQ(conns, atomic_load(&up.conns));
    fault_proxy_blackhole(p, 0);
    CHECK_INT_EQ(5, recv_n(fd, buf, 5, 5000));
    CHECK(memcmp(buf, "lost?", 5) == 0);
    CHECK_INT_EQ(4, recv_n(fd2, buf, 4, 5000));
    CHECK(memcmp(buf, "late", 4) == 0);
    CHECK_INT_EQ(conns + 1, atomic_load(&up.conns));
    close(fd);
    close(fd2);
    fault_proxy_free(p);
    printf("ok: a partition passes nothing either way, then everything in order\n");
}

static void test_cut_closes_every_connection(void) {
    fault_proxy *p = proxy(NULL);
    int a = dial(p), b = dial(p);
    round_trip(a, "a");
    round_trip(b, "b");
    CHECK_INT_EQ(2, fault_proxy_active(p));
    fault_proxy_cut_all(p);
    CHECK_INT_EQ(0, fault_proxy_active(p));
    char buf[4];
    struct pollfd q = {a, POLLIN, 0};
    CHECK_INT_EQ(1, poll(&q, 1, 5000));
    CHECK_INT_EQ(0, read(a, buf, sizeof(buf))); /* end of file */
    q.fd = b;
    CHECK_INT_EQ(1, poll(&q, 1, 5000));
    CHECK_INT_EQ(0, read(b, buf, sizeof(buf)));
    close(a);
    close(b);
    int c = dial(p);
    round_trip(c, "again");
    close(c);
    fault_proxy_free(p);
    printf("ok: cut closes every connection, and new ones are relayed\n");
}

/* One COM_QUERY packet of the MySQL protocol. */
static size_t query(char *out, const char *sql) {
    size_t n = 1 + strlen(sql);
    out[0] = (char)n;
    out[1] = out[2] = out[3] = 0;
    out[4] = 3;
    memcpy(out + 5, sql, n - 1);
    return 4 + n;
}

static void test_mysql_holds_the_nth_commit(void) {
    FILE *log = tmpfile();
    CHECK(log != NULL);
    fp_mysql *m = fp_mysql_new(log);
    fp_mysql_hold_commit(m, 2, 0.6);
    fp_hook hook = fp_mysql_hook(m);
    fault_proxy *p = proxy(&hook);
    int a = dial(p), b = dial(p);
    char pkt[64], back[64];
    size_t n = query(pkt, "COMMIT");
    long long t0 = fp_now_ms();
    send_all(a, pkt, n); /* the first: passes */
    CHECK_INT_EQ(n, recv_n(a, back, n, 5000));
    n = query(pkt, " commit ");
    send_all(b, pkt, n); /* the second, on b: held */
    long long t1 = fp_now_ms();
    size_t m1 = query(back, "SELECT 1");
    char echo[64];
    send_all(a, back, m1); /* a flows meanwhile */
    CHECK_INT_EQ(m1, recv_n(a, echo, m1, 5000));
    CHECK(memcmp(echo, back, m1) == 0);
    CHECK_INT_EQ(0, recv_n(b, echo, n, 200));
    CHECK_INT_EQ(n, recv_n(b, echo, n, 5000));
    CHECK(memcmp(echo, pkt, n) == 0);
    long long held = fp_now_ms() - t1;
    CHECK_INT_GE(held, 590);
    n = query(pkt, "COMMIT"); /* the third: passes */
    send_all(b, pkt, n);
    CHECK_INT_EQ(n, recv_n(b, echo, n, 5000));
    CHECK_INT_EQ(3, fp_mysql_commits(m));
    printf("info: the 2nd COMMIT held %lld ms (0.6 s asked), all in %lld ms\n", held,
           fp_now_ms() - t0);
    close(a);
    close(b);
    fault_proxy_free(p);
    fp_mysql_free(m);
    char lines[256] = "";
    rewind(log);
    size_t got = fread(lines, 1, sizeof(lines) - 1, log);
    lines[got] = '\0';
    fclose(log);
    CHECK_STR_EQ("holding COMMIT #2 for 0.6 s\nreleased COMMIT #2\n", lines);
    printf("ok: the MySQL hook holds the N-th COMMIT and only it\n");
}

static void test_mysql_cuts_and_strands(void) {
    fp_mysql *m = fp_mysql_new(NULL);
    fp_hook hook = fp_mysql_hook(m);
    fault_proxy *p = proxy(&hook);
    char pkt[64], buf[64];
    size_t n = query(pkt, "COMMIT");

    int a = dial(p);
    int bytes = atomic_load(&up.bytes);
    fp_mysql_arm(m, FP_MYSQL_CUT_BEFORE_COMMIT);
    send_all(a, pkt, n);
    CHECK_INT_EQ(0, recv_n(a, buf, n, 5000)); /* closed, nothing came back */
    CHECK_INT_EQ(1, fp_mysql_cuts(m));
    CHECK_INT_EQ(bytes, atomic_load(&up.bytes));
    close(a);

    a = dial(p);
    size_t s1 = query(buf, "SELECT 1");
    send_all(a, buf, s1);
    char echo[64];
    CHECK_INT_EQ(s1, recv_n(a, echo, s1, 5000));
    wait_for(&up.bytes, bytes + (int)s1);
    fp_mysql_arm(m, FP_MYSQL_STRAND_COMMIT);
    send_all(a, pkt, n);
    CHECK_INT_EQ(0, recv_n(a, echo, n, 5000));
    CHECK_INT_EQ(1, fp_mysql_strands(m));
    CHECK_INT_EQ(1, fault_proxy_stranded(p));
    CHECK_INT_EQ(bytes + (int)s1, atomic_load(&up.bytes)); /* the COMMIT never arrived */
    atomic_fetch_add(&up.close_all, 1);                    /* the server ends the session */
    for (int i = 0; i < 500 && fault_proxy_stranded(p) > 0; i++)
        usleep(10000);
    CHECK_INT_EQ(0, fault_proxy_stranded(p));
    close(a);
    fault_proxy_free(p);
    fp_mysql_free(m);
    printf("ok: the MySQL hook cuts before a COMMIT, and strands one until the server closes\n");
}

static void test_redis_framing(void) {
    const char *whole[] = {"+OK\r\n",
                           ":42\r\n",
                           "$-1\r\n",
                           "$3\r\nfoo\r\n",
                           "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
                           "*-1\r\n",
                           "%1\r\n+a\r\n:1\r\n",
                           "PING\r\n",
                           "*1\r\n*1\r\n:7\r\n",
                           ":1764095012345678\r\n",
                           "(3492890328409238509324850943850943825024385\r\n",
                           ">2\r\n$7\r\nmessage\r\n:-1764095012345678\r\n",
                           "~1\r\n_\r\n"};
    for (size_t i = 0; i < sizeof(whole) / sizeof(whole[0]); i++) {
        const unsigned char *b = (const unsigned char *)whole[i];
        size_t n = strlen(whole[i]);
        CHECK_INT_EQ((long)n, fp_redis_value_len(b, n));
        for (size_t k = 0; k < n; k++)
            CHECK_INT_EQ(0, fp_redis_value_len(b, k));
    }
    const char *two = "$3\r\nfoo\r\n+OK\r\n";
    CHECK_INT_EQ(9, fp_redis_value_len((const unsigned char *)two, strlen(two)));
    printf("ok: the Redis hook frames whole RESP values\n");
}

/* A stand-in Redis for one connection: for each step it reads the request's bytes,
 * answers the reply at once (a split reply in two writes 100 ms apart) and says nothing
 * more until the next request, so a reply the proxy kept back would never arrive. */
typedef struct redis_step {
    const char *req, *reply;
    int split; /* the reply is written in two parts: this many bytes, then the rest */
} redis_step;

static struct {
    int lfd;
    const redis_step *steps;
    size_t n;
    atomic_int bad_request; /* 1 + the step whose request came wrong */
} rs;

static void *redis_stand_in(void *arg) {
    (void)arg;
    int fd = accept(rs.lfd, NULL, NULL);
    if (fd < 0) return NULL;
    char buf[4096];
    for (size_t i = 0; i < rs.n; i++) {
        size_t n = strlen(rs.steps[i].req);
        if (recv_n(fd, buf, n, 10000) != n || memcmp(buf, rs.steps[i].req, n) != 0) {
            atomic_store(&rs.bad_request, (int)i + 1);
            break;
        }
        const char *r = rs.steps[i].reply;
        size_t len = strlen(r), first = rs.steps[i].split ? (size_t)rs.steps[i].split : len;
        send_all(fd, r, first);
        if (first < len) {
            usleep(100000);
            send_all(fd, r + first, len - first);
        }
    }
    char c;
    while (read(fd, &c, 1) > 0) { /* until the proxy closes */
    }
    close(fd);
    return NULL;
}

/* stockd's Redis link behind the Redis hook: each reply hiredis would get (simple
 * string, error, integers up to a microsecond token, bulk, null bulk, arrays, nested
 * arrays, a pub/sub message, and RESP3's types) reaches the client whole, in order,
 * within 1 s (normally a millisecond or two; the hook's old framer cut the connection at
 * an integer above 2^29 and stockd's lock waited out its timeouts). */
static void test_redis_replies_pass_at_once(void) {
    static const char get[] = "*2\r\n$3\r\nGET\r\n$4\r\nlock\r\n";
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    static const char evalsha[] = "*5\r\n$7\r\nEVALSHA\r\n"
                                  "$40\r\n0123456789abcdef0123456789abcdef01234567\r\n"
                                  "$1\r\n2\r\n$4\r\nlock\r\n$5\r\nfence\r\n";
    static const redis_step steps[] = {
        {"*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$23\r\nreturn redis.call('x')\n\r\n",
         "$40\r\n0123456789abcdef0123456789abcdef01234567\r\n", 0},
        {evalsha, ":1764095012345678\r\n", 0}, /* a token: microseconds since 1970 */
        {evalsha, ":-1500\r\n", 0},
        {evalsha, ":0\r\n", 0},
        {evalsha, ":9223372036854775807\r\n", 0},
        {evalsha, "-NOSCRIPT No matching script. Please use EVAL.\r\n", 0},
        {ping, "+PONG\r\n", 0},
        {get, "$16\r\n1764095012345678\r\n", 0},
        {get, "$-1\r\n", 0},
        {get, "$0\r\n\r\n", 0},
        {get, "*0\r\n", 0},
        {get, "*-1\r\n", 0},
        {get, "*3\r\n$3\r\nfoo\r\n:1764095012345678\r\n$-1\r\n", 0},
        {get, "*2\r\n*2\r\n:1\r\n+a\r\n*1\r\n*1\r\n$1\r\nx\r\n", 0},
        {"*2\r\n$9\r\nSUBSCRIBE\r\n$3\r\nrel\r\n", "*3\r\n$9\r\nsubscribe\r\n$3\r\nrel\r\n:1\r\n",
         0},
        {ping, "*3\r\n$7\r\nmessage\r\n$3\r\nrel\r\n$16\r\n1764095012345678\r\n", 0},
        {ping, ">3\r\n$7\r\nmessage\r\n$3\r\nrel\r\n$16\r\n1764095012345678\r\n", 0},
        {ping, "_\r\n", 0},
        {ping, "#t\r\n", 0},
        {ping, ",3.25\r\n", 0},
        {ping, "(3492890328409238509324850943850943825024385\r\n", 0},
        {ping, "%2\r\n+a\r\n:1764095012345678\r\n+b\r\n_\r\n", 0},
        {ping, "~2\r\n:1\r\n:2\r\n", 0},
        {ping, "=15\r\ntxt:Some string\r\n", 0},
        {ping, "!10\r\nSYNTAX bad\r\n", 0},
        {ping, "|1\r\n+ttl\r\n:3600\r\n:1764095012345678\r\n", 0},
        {ping, "*2\r\n$3\r\nfoo\r\n:1764095012345678\r\n", 9}, /* split inside a value */
        {ping, ":1764095012345678\r\n", 5},
    };
    rs.steps = steps;
    rs.n = sizeof(steps) / sizeof(steps[0]);
    rs.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    CHECK_INT_EQ(0, bind(rs.lfd, (struct sockaddr *)&a, sizeof(a)));
    CHECK_INT_EQ(0, listen(rs.lfd, 4));
    CHECK_INT_EQ(0, getsockname(rs.lfd, (struct sockaddr *)&a, &al));
    pthread_t t;
    CHECK_INT_EQ(0, pthread_create(&t, NULL, redis_stand_in, NULL));

    fp_hook hook = fp_redis_hook();
    fault_proxy_config cfg = {.upstream_port = ntohs(a.sin_port), .hook = &hook};
    fault_proxy *p = NULL;
    CHECK_INT_EQ(FAULT_PROXY_OK, fault_proxy_new(&cfg, &p));
    int fd = dial(p);
    long long worst = 0;
    for (size_t i = 0; i < rs.n; i++) {
        const redis_step *s = &steps[i];
        char back[256];
        size_t n = strlen(s->reply);
        long long t0 = fp_now_ms();
        send_all(fd, s->req, strlen(s->req));
        size_t got = recv_n(fd, back, n, 5000);
        long long took = fp_now_ms() - t0;
        if (got != n || memcmp(back, s->reply, n) != 0)
            CHECK_FAIL_("step %zu: %zu of %zu bytes of %.20s... came back", i, got, n, s->reply);
        if (took > 1000) CHECK_FAIL_("step %zu: the reply took %lld ms", i, took);
        if (!s->split && took > worst) worst = took;
    }
    char extra;
    CHECK_INT_EQ(0, recv_n(fd, &extra, 1, 100)); /* nothing more, nothing twice */
    CHECK_INT_EQ(0, atomic_load(&rs.bad_request));
    CHECK_INT_EQ(1, fault_proxy_connections(p));
    close(fd);
    fault_proxy_free(p);
    pthread_join(t, NULL);
    close(rs.lfd);
    printf("info: the slowest whole reply took %lld ms behind the Redis hook\n", worst);
    printf("ok: the Redis hook passes every reply type at once, whole and in order\n");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    upstream_start();
    test_raw_changes_no_byte();
    test_delay_is_observed();
    test_blackhole_passes_nothing();
    test_cut_closes_every_connection();
    test_mysql_holds_the_nth_commit();
    test_mysql_cuts_and_strands();
    test_redis_framing();
    test_redis_replies_pass_at_once();
    printf("fault_proxy_test: ok\n");
    return 0;
}
