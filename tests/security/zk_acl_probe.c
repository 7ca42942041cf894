/* zk_acl_probe: what a ZooKeeper client without stockd's digest credentials can do to
 * stockd's lock nodes (issue 16, defect 12). Used by zk_acl.sh.
 *
 *   zk_acl_probe mkpath HOSTS PATH
 *       creates PATH (one level, open ACL) if missing: the chroot the test runs in.
 *   zk_acl_probe probe HOSTS USER:PASSWORD LOCK
 *       HOSTS includes the chroot. While stockd holds lock LOCK (so its container parent
 *       <root>/LOCK has a child), an authenticated client lists the children and reads
 *       the ACLs, and then a client without auth, and one with another digest identity,
 *       try to list, add a child, delete the held node, delete the parent and add a lock
 *       parent of their own. Every one of those must be refused with NOAUTH. Prints one
 *       line per check; exits 0 if all hold, 1 otherwise, 2 on a usage or connection
 *       error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zookeeper.h>

#define ROOT "/stock/locks"

static int failures;

static void quiet(const char *message) {
    (void)message;
}

/* A connected handle (with digest auth if auth is not NULL), or NULL. */
static zhandle_t *connect_zk(const char *hosts, const char *auth) {
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zhandle_t *zh = zookeeper_init2(hosts, NULL, 10000, NULL, NULL, 0, quiet);
    if (!zh) return NULL;
    if (auth && zoo_add_auth(zh, "digest", auth, (int)strlen(auth), NULL, NULL) != ZOK) {
        zookeeper_close(zh);
        return NULL;
    }
    for (int i = 0; i < 200 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
        usleep(50 * 1000);
    if (zoo_state(zh) != ZOO_CONNECTED_STATE) {
        zookeeper_close(zh);
        return NULL;
    }
    return zh;
}

/* Checks that rc is ZNOAUTH, printing what was tried and by whom. */
static void expect_noauth(const char *who, const char *what, int rc) {
    if (rc == ZNOAUTH) {
        printf("ok: %s: %s refused (%s)\n", who, what, zerror(rc));
    } else {
        printf("FAIL: %s: %s: expected NOAUTH, got %s\n", who, what, zerror(rc));
        failures++;
    }
}

static void print_acl(zhandle_t *zh, const char *path) {
    struct ACL_vector acl = {0, NULL};
    struct Stat st;
    int rc = zoo_get_acl(zh, path, &acl, &st);
    if (rc != ZOK) {
        printf("FAIL: cannot read the ACL of %s: %s\n", path, zerror(rc));
        failures++;
        return;
    }
    int open = 0;
    for (int i = 0; i < acl.count; i++) {
        printf("acl of %s: %s:%s perms %d\n", path, acl.data[i].id.scheme, acl.data[i].id.id,
               acl.data[i].perms);
        if (strcmp(acl.data[i].id.scheme, "digest") != 0) open = 1;
    }
    if (open || acl.count == 0) {
        printf("FAIL: %s is not limited to a digest identity\n", path);
        failures++;
    } else {
        printf("ok: %s is limited to a digest identity\n", path);
    }
    deallocate_ACL_vector(&acl);
}

/* The attacks, by one client. held: the path of the held lock node. */
static void attack(zhandle_t *zh, const char *who, const char *parent, const char *held) {
    struct String_vector kids = {0, NULL};
    char path[512];
    int rc = zoo_get_children(zh, parent, 0, &kids);
    if (rc == ZOK) deallocate_String_vector(&kids);
    expect_noauth(who, "listing the lock parent", rc);
    snprintf(path, sizeof(path), "%s/00000000000000000000000000000000-lock-", parent);
    rc = zoo_create(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, NULL, 0);
    expect_noauth(who, "creating a child under the lock parent", rc);
    rc = zoo_delete(zh, held, -1);
    expect_noauth(who, "deleting the held lock node", rc);
    rc = zoo_delete(zh, parent, -1);
    expect_noauth(who, "deleting the lock parent", rc);
    rc = zoo_create(zh, ROOT "/product_999999", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT,
                    NULL, 0);
    expect_noauth(who, "creating a lock parent of its own under " ROOT, rc);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "mkpath") == 0) {
        zhandle_t *zh = connect_zk(argv[2], NULL);
        if (!zh) return 2;
        int rc = zoo_create(zh, argv[3], NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0);
        zookeeper_close(zh);
        if (rc != ZOK && rc != ZNODEEXISTS) {
            fprintf(stderr, "zk_acl_probe: create %s: %s\n", argv[3], zerror(rc));
            return 2;
        }
        return 0;
    }
    if (argc != 5 || strcmp(argv[1], "probe") != 0) {
        fprintf(stderr, "usage: zk_acl_probe mkpath HOSTS PATH | probe HOSTS USER:PASSWORD LOCK\n");
        return 2;
    }
    const char *hosts = argv[2], *auth = argv[3], *lock = argv[4];
    char parent[256], held[512];
    snprintf(parent, sizeof(parent), ROOT "/%s", lock);

    zhandle_t *owner = connect_zk(hosts, auth);
    zhandle_t *anon = connect_zk(hosts, NULL);
    zhandle_t *other = connect_zk(hosts, "intruder:guess");
    if (!owner || !anon || !other) {
        fprintf(stderr, "zk_acl_probe: cannot connect to %s\n", hosts);
        return 2;
    }
    struct String_vector kids = {0, NULL};
    int rc = zoo_get_children(owner, parent, 0, &kids);
    if (rc != ZOK || kids.count < 1) {
        fprintf(stderr, "zk_acl_probe: stockd's identity cannot list %s (%s, %d children)\n",
                parent, zerror(rc), rc == ZOK ? kids.count : 0);
        return 2;
    }
    snprintf(held, sizeof(held), "%s/%s", parent, kids.data[0]);
    deallocate_String_vector(&kids);
    printf("the held lock node: %s\n", held);
    print_acl(owner, ROOT);
    print_acl(owner, parent);
    print_acl(owner, held);

    attack(anon, "a client without auth", parent, held);
    attack(other, "another digest identity", parent, held);

    struct Stat st;
    rc = zoo_exists(owner, held, 0, &st);
    if (rc == ZOK) {
        printf("ok: the held lock node is still there\n");
    } else {
        printf("FAIL: the held lock node is gone: %s\n", zerror(rc));
        failures++;
    }
    zookeeper_close(other);
    zookeeper_close(anon);
    zookeeper_close(owner);
    printf("%s: %d failed checks\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
