/* lock_kinds.c: the registry, every lock kind by name (lock.h). Adding a kind is one
 * new file in lock/ that ends with its `const lock_kind`, and one line here (its
 * declaration and its row), plus its library in lock/CMakeLists.txt. */
#include <string.h>

#include "lock.h"

extern const lock_kind lock_kind_none;   /* lock_none.c: nothing beyond the row lock */
extern const lock_kind lock_kind_local;  /* lock_local.c: striped mutexes */
extern const lock_kind zklock_kind_fair; /* zklock_kind.c: the ZooKeeper fair lock */
extern const lock_kind zklock_kind_herd; /* zklock_kind.c: the herd lock */
extern const lock_kind redislock_kind;   /* redislock.c */
extern const lock_kind redlock_kind;     /* redlock.c */
extern const lock_kind dblock_kind;      /* dblock.c */
extern const lock_kind etcdlock_kind;    /* etcdlock.c */

const lock_kind *const lock_kinds[] = {
    &lock_kind_none,   &lock_kind_local, &zklock_kind_fair,
    &zklock_kind_herd, &redislock_kind,  &dblock_kind,
    &redlock_kind,     &etcdlock_kind,   NULL,
};

const lock_kind *lock_kind_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; lock_kinds[i]; i++)
        if (strcmp(lock_kinds[i]->name, name) == 0) return lock_kinds[i];
    return NULL;
}
