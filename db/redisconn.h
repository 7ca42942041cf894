/* redisconn.h: one authenticated hiredis connection to one Redis, made the same way for
 * every module that talks to Redis: the lease lock (lock/redislock.c), the stock of mode
 * redis-stock (db/stockredis.c) and the order writer. It connects within a timeout, sets
 * the timeout of every later reply, and sends AUTH [user] password when a password is
 * configured; it loads Lua scripts and says which server errors mean "the credentials".
 *
 * Pure connection plumbing: it knows no key and no script. Every call may be made from
 * any thread on its own context (hiredis contexts are not thread-safe: one per thread).
 * Nothing here prints or exits; errors are values with their detail in a buffer. */
#ifndef STOCKD_REDISCONN_H
#define STOCKD_REDISCONN_H

#include <stdbool.h>
#include <stddef.h>

#include <hiredis/hiredis.h>

#define REDISCONN_OK             0
#define REDISCONN_ERR_CONNECTION -1 /* unreachable, timed out, or the connection broke */
#define REDISCONN_ERR_AUTH       -2 /* the server refused the credentials, or wants some */
#define REDISCONN_ERR_NOMEM      -3
#define REDISCONN_ERR_SERVER     -4 /* an answer that makes no sense here */

typedef struct redisconn_config {
    const char *host; /* a name or an address, without brackets */
    int port;
    const char *user;       /* NULL or "": the default user */
    const char *password;   /* NULL or "": send no AUTH */
    int connect_timeout_ms; /* > 0 */
    int io_timeout_ms;      /* > 0: every reply after the connection */
} redisconn_config;

/* Connects and authenticates. REDISCONN_OK with *out the context (the caller frees it with
 * redisFree), or a code with *out NULL and the reason in err (errcap bytes), which begins
 * with `what` ("command connection to HOST:PORT: ..."). The password is never written to
 * err, only the server's answer. */
int redisconn_dial(const redisconn_config *cfg, const char *what, redisContext **out, char *err,
                   size_t errcap);

/* Does this error answer mean "authenticate first" or "not with these credentials"
 * (NOAUTH, NOPERM, WRONGPASS)? Pure. */
bool redisconn_auth_error(const char *server_err);

/* SCRIPT LOAD of `text` on c: REDISCONN_OK with sha (41 bytes) its SHA1, or a code and the
 * reason in err. REDISCONN_ERR_CONNECTION means the context is broken: drop it. */
int redisconn_script_load(redisContext *c, const char *text, char sha[41], char *err,
                          size_t errcap);

#endif
