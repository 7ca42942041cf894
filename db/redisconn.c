/* redisconn.c: an authenticated hiredis connection and script loading (redisconn.h). */
#include "redisconn.h"

#include <stdio.h>
#include <string.h>

static struct timeval ms_tv(int ms) {
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return tv;
}

bool redisconn_auth_error(const char *server_err) {
    return strncmp(server_err, "NOAUTH", 6) == 0 || strncmp(server_err, "NOPERM", 6) == 0 ||
           strncmp(server_err, "WRONGPASS", 9) == 0;
}

/* AUTH on a fresh context, when there is a password. */
static int auth(const redisconn_config *cfg, redisContext *c, const char *what, char *err,
                size_t errcap) {
    const char *user = cfg->user ? cfg->user : "";
    const char *argv[3] = {"AUTH", user, cfg->password};
    size_t argl[3] = {4, strlen(user), strlen(cfg->password)};
    int argc = 3;
    if (!user[0]) {
        argv[1] = cfg->password;
        argl[1] = argl[2];
        argc = 2;
    }
    redisReply *r = redisCommandArgv(c, argc, argv, argl);
    if (!r) {
        snprintf(err, errcap, "%s connection to %s:%d: AUTH: %s", what, cfg->host, cfg->port,
                 c->errstr);
        return REDISCONN_ERR_CONNECTION;
    }
    int rc = REDISCONN_OK;
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errcap, "%s connection to %s:%d: authentication as %s refused: %s", what,
                 cfg->host, cfg->port, user[0] ? user : "the default user", r->str);
        rc = REDISCONN_ERR_AUTH;
    }
    freeReplyObject(r);
    return rc;
}

int redisconn_dial(const redisconn_config *cfg, const char *what, redisContext **out, char *err,
                   size_t errcap) {
    *out = NULL;
    redisContext *c = redisConnectWithTimeout(cfg->host, cfg->port, ms_tv(cfg->connect_timeout_ms));
    if (!c) {
        snprintf(err, errcap, "%s connection to %s:%d: out of memory", what, cfg->host, cfg->port);
        return REDISCONN_ERR_NOMEM;
    }
    int rc = REDISCONN_ERR_CONNECTION;
    if (c->err) {
        snprintf(err, errcap, "%s connection to %s:%d: %s", what, cfg->host, cfg->port, c->errstr);
        goto fail;
    }
    if (redisSetTimeout(c, ms_tv(cfg->io_timeout_ms)) != REDIS_OK) {
        snprintf(err, errcap, "%s connection to %s:%d: cannot set the timeout", what, cfg->host,
                 cfg->port);
        goto fail;
    }
    if (cfg->password && cfg->password[0] && (rc = auth(cfg, c, what, err, errcap)) != REDISCONN_OK)
        goto fail;
    *out = c;
    return REDISCONN_OK;
fail:
    redisFree(c);
    return rc;
}

int redisconn_script_load(redisContext *c, const char *text, char sha[41], char *err,
                          size_t errcap) {
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", text);
    if (!r) {
        snprintf(err, errcap, "SCRIPT LOAD: %s", c->errstr);
        return REDISCONN_ERR_CONNECTION;
    }
    int rc = REDISCONN_OK;
    if (r->type == REDIS_REPLY_STRING && r->len == 40) {
        memcpy(sha, r->str, 40);
        sha[40] = '\0';
    } else if (r->type == REDIS_REPLY_ERROR) {
        bool cred = redisconn_auth_error(r->str);
        snprintf(err, errcap, "SCRIPT LOAD: unexpected answer: %s%s", r->str,
                 cred ? " (check the Redis user and password)" : "");
        rc = cred ? REDISCONN_ERR_AUTH : REDISCONN_ERR_SERVER;
    } else {
        snprintf(err, errcap, "SCRIPT LOAD: unexpected answer: (not a SHA1)");
        rc = REDISCONN_ERR_SERVER;
    }
    freeReplyObject(r);
    return rc;
}
