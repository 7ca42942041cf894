/* lock_codes.h: the one code space of every lock library in lock/.
 *
 * Every lock library returns these values under these names, so the service needs no
 * translator: LOCK_ERR_NOT_OWNER means "not owner" whatever the kind. A library keeps
 * its own detail (a ZooKeeper error, a refused password) in its error text, not in a
 * code of its own. lock/lock.h (the module's face) includes this file and says what each code means
 * to a caller. Pure definitions: no function, no state. */
#ifndef LOCK_CODES_H
#define LOCK_CODES_H

#define LOCK_OK          0
#define LOCK_ERR_ARGS    -1 /* bad argument or configuration, or the name held already */
#define LOCK_ERR_NOMEM   -2
#define LOCK_ERR_TIMEOUT -3 /* not acquired before the deadline; nothing of ours is left */
#define LOCK_ERR_CONNECTION                                                                        \
    -4                        /* the lock service is unreachable, refused our credentials,         \
                               * or the connection broke */
#define LOCK_ERR_CANCELLED -5 /* the set (or the library's cancel flag) was cancelled */
#define LOCK_ERR_SERVER    -6 /* the lock service answered an unexpected error */
#define LOCK_ERR_NOT_OWNER -7 /* the hold belongs to another thread; untouched */
#define LOCK_SUSPECT       -8 /* check: connection lost; the lock may have passed on */
#define LOCK_LOST          -9 /* check: the session or lease is over; release: not ours */
#define LOCK_ERR_SEQ_LIMIT                                                                         \
    -10 /* zk fair: the lock's parent has used up ZooKeeper's sequence numbers (2^31-1),           \
         * which no longer order its queue: not acquired, nothing of ours is left; an operator     \
         * must recreate the parent */

#endif
