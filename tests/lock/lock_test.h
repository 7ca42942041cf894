/* lock_test.h: helpers shared by the zklock tests: the ZooKeeper address from the
 * environment, a session with short timeouts, a plain ZooKeeper handle to look at
 * the tree from outside the library, and the four-letter words. */
#ifndef LOCK_TEST_H
#define LOCK_TEST_H

#include <stdint.h>
#include <zookeeper.h>

#include "check.h"
#include "zklock.h"

/* $STOCKD_TEST_ZK, or skip the test (exit 77) when it is not set. */
const char *lt_zk_hosts(void);

/* A unique lock name for this run: "<prefix>_<pid>_<time>". */
const char *lt_lock_name(const char *prefix);

/* A session on `hosts` with the given session timeout (0 = default); fails the
 * test if it cannot connect. Root is /stock/locks (the default). */
zklock_session *lt_session(const char *hosts, int session_timeout_ms);

int64_t lt_now_ms(void);
void lt_sleep_ms(int ms);

/* A plain handle (no zklock) for looking at the tree; fails the test if it
 * cannot connect within 10 s. */
zhandle_t *lt_zk_open(const char *hosts);

/* Children of <root>/<name>, -1 if that parent does not exist. */
int lt_children(zhandle_t *zh, const char *name);

/* Waits up to `secs` for the container parent of `name` to be reaped by the
 * server; returns 1 if it is gone. ZooKeeper reads znode.container.checkIntervalMs
 * only as a JVM system property (lab/servers.py passes -D...=1000); from zoo.cfg it is
 * ignored and the server checks every 60 s, hence the tests' generous 90 s. */
int lt_wait_parent_gone(zhandle_t *zh, const char *name, int secs);

/* Waits up to `secs` for <root>/<name> to have `n` children; returns 1 if so. For
 * n = 0 a parent that is gone counts: the server reaps an empty container parent
 * (within about a second here), so a poll that comes late finds no parent at all. */
int lt_wait_children(zhandle_t *zh, const char *name, int n, int secs);

/* Sends a four-letter word to host:port (the first host of `hosts`); returns a
 * malloc'd answer or NULL. */
char *lt_4lw(const char *hosts, const char *word);

/* "Total watches:N" from `wchs`, -1 on failure. */
long lt_total_watches(const char *hosts);

/* The session's counters, and the ZooKeeper operations among them (creates, deletes,
 * listings, reads). */
zklock_stats lt_stats(zklock_session *s);
uint64_t lt_ops(zklock_session *s);

/* One fair acquisition on a thread of its own, for the tests that need a waiter while
 * the main thread changes the world around it:
 *     lt_acquire_run r = {.s = s, .name = name, .timeout_ms = 5000};
 *     pthread_create(&t, NULL, lt_acquire_main, &r); ... pthread_join(t, NULL);
 * The thread acquires, releases at once if it got the lock, and leaves the result in
 * rc; read rc only after pthread_join. The caller owns r and the session. */
typedef struct lt_acquire_run {
    zklock_session *s;
    const char *name;
    int timeout_ms;
    int rc; /* written by the thread */
} lt_acquire_run;

void *lt_acquire_main(void *arg);

#endif
