/* fault-proxy: the fault proxy (fault_proxy.h) as a command, for the shell tests and
 * loadtest/nemesis.
 *
 *   fault-proxy --listen PORT --upstream [HOST:]PORT [--proto raw|mysql|zk|redis]
 *               [--control FILE] [--hold-commit N --hold-s S] [--delay-commit-ms D]
 *               [--arm-file PATH]
 *
 * It listens on 127.0.0.1:PORT, relays every connection to the upstream and prints
 * "ready" once it listens. It changes no byte. --proto names the hook that frames the
 * stream (raw: none); the COMMIT options are the MySQL hook's (fault_proxy_mysql.h) and
 * imply --proto mysql: the N-th COMMIT held S seconds, every COMMIT delayed D ms, holds
 * armed through PATH ("S K": let K COMMITs pass, hold the next for S s). A hold prints
 * "holding COMMIT #N for S s" and "released COMMIT #N".
 *
 * --control FILE: whenever FILE exists (looked for every 20 ms) it is read, deleted, and
 * each of its lines applied, each printed as "control: LINE" once applied:
 *   blackhole on|off  a partition: no byte passes either way; new connections are
 *                     accepted and get nothing until it is off
 *   delay MS          every chunk, both ways, forwarded MS ms late (0: none)
 *   cut               every open connection closed at once
 *   heal              blackhole off and delay 0
 *   zk-hold-create MS (--proto zk) hold the next lock-node create and cut; refuse
 *                     reconnection for MS ms; on a later connection let the create
 *                     through right after the first sync or listing, whichever comes
 *                     first (a follower that lags: fault_proxy_zk.h); it prints
 *                     "zk: held create let through (N)" when it is
 * Writers write FILE.tmp and rename it to FILE, so a file is never read half-written.
 * It runs until killed. Exit 2 on bad usage, 1 if it cannot listen. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault_proxy.h"
#include "fault_proxy_mysql.h"
#include "fault_proxy_redis.h"
#include "fault_proxy_zk.h"

static void usage(void) {
    fprintf(stderr, "usage: fault-proxy --listen PORT --upstream [HOST:]PORT "
                    "[--proto raw|mysql|zk|redis] [--control FILE]\n"
                    "                   [--hold-commit N --hold-s S] [--delay-commit-ms D] "
                    "[--arm-file PATH]\n");
    exit(2);
}

static int parse_int(const char *s, int lo, int hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) usage();
    return (int)v;
}

static double parse_double(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || v < 0) usage();
    return v;
}

static void apply(fault_proxy *p, fp_zk *zk, char *line) {
    line[strcspn(line, "\r\n")] = '\0';
    char word[32] = "", arg[32] = "";
    int n = sscanf(line, "%31s %31s", word, arg);
    if (n < 1) return;
    if (!strcmp(word, "blackhole") && n == 2 && (!strcmp(arg, "on") || !strcmp(arg, "off"))) {
        fault_proxy_blackhole(p, !strcmp(arg, "on"));
        printf("control: blackhole %s\n", arg);
    } else if (!strcmp(word, "delay") && n == 2 && strspn(arg, "0123456789") == strlen(arg)) {
        int ms = atoi(arg);
        fault_proxy_delay(p, ms);
        printf("control: delay %d\n", ms);
    } else if (!strcmp(word, "cut") && n == 1) {
        fault_proxy_cut_all(p);
        printf("control: cut\n");
    } else if (!strcmp(word, "heal") && n == 1) {
        fault_proxy_blackhole(p, 0);
        fault_proxy_delay(p, 0);
        printf("control: heal\n");
    } else if (!strcmp(word, "zk-hold-create") && zk && n == 2 &&
               strspn(arg, "0123456789") == strlen(arg)) {
        fp_zk_hold_next_create(zk, FP_ZK_OP_SYNC, FP_ZK_OP_GETCHILDREN, 0);
        fp_zk_refuse_after_hold(zk, atoi(arg));
        printf("control: zk-hold-create %d\n", atoi(arg));
    } else {
        fprintf(stderr, "control: unknown command: %s\n", line);
    }
    fflush(stdout);
}

static void poll_control(fault_proxy *p, fp_zk *zk, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    unlink(path);
    char line[256];
    while (fgets(line, sizeof(line), f))
        apply(p, zk, line);
    fclose(f);
}

int main(int argc, char **argv) {
    int listen_port = -1, upstream_port = -1, hold_nth = 0, delay_ms = 0, mysql_opts = 0;
    double hold_s = 0;
    const char *proto = NULL, *control = NULL, *arm = NULL;
    char host[256] = "127.0.0.1";
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(o, "--listen")) {
            listen_port = parse_int(v, 1, 65535);
        } else if (!strcmp(o, "--upstream")) {
            const char *colon = strrchr(v, ':');
            if (colon) {
                if ((size_t)(colon - v) >= sizeof(host) || colon == v) usage();
                memcpy(host, v, (size_t)(colon - v));
                host[colon - v] = '\0';
                v = colon + 1;
            }
            upstream_port = parse_int(v, 1, 65535);
        } else if (!strcmp(o, "--proto")) {
            proto = v;
        } else if (!strcmp(o, "--control")) {
            control = v;
        } else if (!strcmp(o, "--hold-commit")) {
            hold_nth = parse_int(v, 0, 1 << 30);
            mysql_opts = 1;
        } else if (!strcmp(o, "--hold-s")) {
            hold_s = parse_double(v);
            mysql_opts = 1;
        } else if (!strcmp(o, "--delay-commit-ms")) {
            delay_ms = (int)parse_double(v);
            mysql_opts = 1;
        } else if (!strcmp(o, "--arm-file")) {
            arm = v;
            mysql_opts = 1;
        } else {
            usage();
        }
    }
    if (listen_port < 0 || upstream_port < 0) usage();
    if (!proto) proto = mysql_opts ? "mysql" : "raw";
    if (mysql_opts && strcmp(proto, "mysql") != 0) {
        fprintf(stderr, "fault-proxy: the COMMIT options need --proto mysql\n");
        return 2;
    }

    fp_mysql *my = NULL;
    fp_zk *zk = NULL;
    fp_hook hook;
    fault_proxy_config cfg = {
        .listen_port = listen_port, .upstream_host = host, .upstream_port = upstream_port};
    if (!strcmp(proto, "mysql")) {
        my = fp_mysql_new(stdout);
        if (!my) return 1;
        fp_mysql_hold_commit(my, hold_nth, hold_s);
        fp_mysql_delay_commit(my, delay_ms);
        fp_mysql_arm_file(my, arm);
        hook = fp_mysql_hook(my);
        cfg.hook = &hook;
    } else if (!strcmp(proto, "zk")) {
        zk = fp_zk_new();
        if (!zk) return 1;
        hook = fp_zk_hook(zk);
        cfg.hook = &hook;
    } else if (!strcmp(proto, "redis")) {
        hook = fp_redis_hook();
        cfg.hook = &hook;
    } else if (strcmp(proto, "raw") != 0) {
        usage();
    }
    fault_proxy *p = NULL;
    int rc = fault_proxy_new(&cfg, &p);
    if (rc != FAULT_PROXY_OK) {
        fprintf(stderr, "fault-proxy: 127.0.0.1:%d: %s\n", listen_port, fault_proxy_strerror(rc));
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    int injected = 0;
    for (;;) {
        if (control) poll_control(p, zk, control);
        if (zk && fp_zk_injected(zk) != injected) {
            injected = fp_zk_injected(zk);
            printf("zk: held create let through (%d)\n", injected);
            fflush(stdout);
        }
        usleep(20 * 1000);
    }
}
