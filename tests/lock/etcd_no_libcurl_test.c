/* etcd_no_libcurl_test: etcdlock loads libcurl at run time (etcdlock_http.c), so a
 * machine without it must refuse mode etcd clearly, not crash or fail later. This
 * executable is built from etcdlock's own sources with ETCDLOCK_LIBCURL naming a library
 * that does not exist:
 *   - etcdlock_new answers LOCK_ERR_ARGS, makes no handle, and its error names the
 *     library and says that mode etcd needs libcurl; a second call answers the same;
 *   - the kind's set (what stockd makes at start-up) is refused the same way, so
 *     `stockd --lock etcd` ends its start-up with that message;
 *   - the rest of lock/ works meanwhile (the local kind's set is made).
 * No server needed. */
#include <string.h>

#include "check.h"
#include "etcdlock_int.h"
#include "lock.h"

extern const lock_kind etcdlock_kind;   /* etcdlock.c, built into this test */
extern const lock_kind lock_kind_local; /* lock_local.c, in lock_base */

static void check_message(const char *err) {
    if (!strstr(err, "mode etcd needs libcurl") || !strstr(err, ETCDLOCK_LIBCURL))
        CHECK_FAIL_("unclear error: \"%s\"", err);
}

int main(void) {
    char err[512];
    etcdlock_config c = {.endpoints = "127.0.0.1:1"};
    for (int i = 0; i < 2; i++) {
        etcdlock *l = (etcdlock *)&c; /* must be reset to NULL */
        CHECK_INT_EQ(LOCK_ERR_ARGS, etcdlock_new(&c, &l, err, sizeof(err)));
        CHECK(l == NULL);
        check_message(err);
    }

    lock_config lc = {.addr = "127.0.0.1:1",
                      .timeout_ms = 1000,
                      .lease_ms = 10000,
                      .holders = 2,
                      .owner = "test"};
    lock_set *set = NULL;
    CHECK_INT_EQ(LOCK_ERR_ARGS, lock_set_new(&etcdlock_kind, &lc, &set, err, sizeof(err)));
    CHECK(set == NULL);
    check_message(err);

    CHECK_INT_EQ(LOCK_OK, lock_set_new(&lock_kind_local, &lc, &set, err, sizeof(err)));
    lock_set_free(set);
    puts("ok: without libcurl, mode etcd is refused with a clear error");
    return 0;
}
