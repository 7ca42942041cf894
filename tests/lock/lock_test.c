/* lock_test.c: see lock_test.h. */
#include "lock_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LT_ROOT "/stock/locks"

const char *lt_zk_hosts(void) {
    const char *h = getenv("STOCKD_TEST_ZK");
    if (!h || !*h) SKIP("STOCKD_TEST_ZK is not set (run through ctest)");
    return h;
}

const char *lt_lock_name(const char *prefix) {
    static char buf[128];
    snprintf(buf, sizeof(buf), "%s_%ld_%lld", prefix, (long)getpid(), (long long)time(NULL));
    return buf;
}

zklock_session *lt_session(const char *hosts, int session_timeout_ms) {
    zklock_session_config cfg = {
        .hosts = hosts, .session_timeout_ms = session_timeout_ms, .connect_timeout_ms = 10000};
    zklock_session *s = NULL;
    int rc = zklock_session_new(&cfg, &s);
    if (rc != LOCK_OK) CHECK_FAIL_("zklock_session_new(%s): %s", hosts, zklock_strerror(rc));
    return s;
}

int64_t lt_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void lt_sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void lt_quiet_log(const char *m) {
    (void)m;
}

zhandle_t *lt_zk_open(const char *hosts) {
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zhandle_t *zh = zookeeper_init2(hosts, NULL, 10000, NULL, NULL, 0, lt_quiet_log);
    CHECK(zh != NULL);
    for (int i = 0; i < 100 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
        lt_sleep_ms(100);
    if (zoo_state(zh) != ZOO_CONNECTED_STATE) CHECK_FAIL_("cannot connect to %s", hosts);
    return zh;
}

int lt_children(zhandle_t *zh, const char *name) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", LT_ROOT, name);
    struct String_vector v = {0, NULL};
    int rc = zoo_get_children(zh, path, 0, &v);
    if (rc == ZNONODE) return -1;
    if (rc != ZOK) CHECK_FAIL_("get_children(%s): %s", path, zerror(rc));
    int n = v.count;
    deallocate_String_vector(&v);
    return n;
}

int lt_wait_parent_gone(zhandle_t *zh, const char *name, int secs) {
    for (int64_t end = lt_now_ms() + secs * 1000; lt_now_ms() < end; lt_sleep_ms(200))
        if (lt_children(zh, name) < 0) return 1;
    return 0;
}

int lt_wait_children(zhandle_t *zh, const char *name, int n, int secs) {
    for (int64_t end = lt_now_ms() + secs * 1000; lt_now_ms() < end; lt_sleep_ms(20)) {
        int have = lt_children(zh, name);
        if (have == n || (n == 0 && have < 0)) return 1;
    }
    return 0;
}

char *lt_4lw(const char *hosts, const char *word) {
    char host[64];
    int port = 0;
    if (sscanf(hosts, "%63[^:]:%d", host, &port) != 2) return NULL;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return NULL;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    char *out = NULL;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        write(fd, word, strlen(word)) == (ssize_t)strlen(word)) {
        size_t cap = 4096, len = 0;
        out = malloc(cap);
        ssize_t n;
        while (out && (n = read(fd, out + len, cap - len - 1)) > 0) {
            len += (size_t)n;
            if (len + 1 == cap) out = realloc(out, cap *= 2);
        }
        if (out) out[len] = '\0';
    }
    close(fd);
    return out;
}

long lt_total_watches(const char *hosts) {
    char *a = lt_4lw(hosts, "wchs");
    long n = -1;
    const char *p = a ? strstr(a, "Total watches:") : NULL;
    if (p) n = strtol(p + strlen("Total watches:"), NULL, 10);
    free(a);
    return n;
}

void *lt_acquire_main(void *arg) {
    lt_acquire_run *r = arg;
    zklock_hold *h = NULL;
    r->rc = zklock_acquire(r->s, r->name, ZKLOCK_FAIR, r->timeout_ms, &h);
    if (r->rc == LOCK_OK) zklock_release(h);
    return NULL;
}

zklock_stats lt_stats(zklock_session *s) {
    zklock_stats st;
    zklock_get_stats(s, &st);
    return st;
}

uint64_t lt_ops(zklock_session *s) {
    zklock_stats st = lt_stats(s);
    return st.op_create + st.op_delete + st.op_get_children + st.op_get_data;
}
