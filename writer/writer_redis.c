/* writer_redis.c: the writer's side of the stream contract on hiredis: a connection with
 * the group, the reads (own pending entries, new entries, entries claimed from a dead
 * consumer), the acknowledgement, and the parsing of an entry. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redisconn.h"
#include "writer_int.h"

redisReply *writer_redis__cmd(redisContext *r, int argc, const char **argv, char *err,
                              size_t errlen) {
    redisReply *rep = redisCommandArgv(r, argc, argv, NULL);
    if (!rep) snprintf(err, errlen, "redis: %s", r->errstr[0] ? r->errstr : "connection lost");
    return rep;
}

int writer_redis__dial(const writer_config *c, unsigned io_ms, redisContext **out, char *err,
                       size_t errlen) {
    redisconn_config cfg = {.host = c->redis_host,
                            .port = c->redis_port,
                            .user = c->redis_user,
                            .password = c->redis_password,
                            .connect_timeout_ms = 2000,
                            .io_timeout_ms = (int)io_ms};
    char what[300];
    snprintf(what, sizeof(what), "redis %s:%d", c->redis_host, c->redis_port);
    int code = redisconn_dial(&cfg, what, out, err, errlen);
    if (code != REDISCONN_OK)
        return code == REDISCONN_ERR_NOMEM ? WRITER_ERR_NOMEM : WRITER_ERR_REDIS;
    /* The group, made by whoever comes first (the stream contract). */
    const char *create[] = {"XGROUP", "CREATE", WRITER_STREAM, WRITER_GROUP, "0", "MKSTREAM"};
    redisReply *rep = writer_redis__cmd(*out, 6, create, err, errlen);
    int rc = WRITER_OK;
    if (!rep) {
        rc = WRITER_ERR_REDIS;
    } else if (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "BUSYGROUP", 9) != 0) {
        snprintf(err, errlen, "%s: XGROUP CREATE: %s", what, rep->str);
        rc = WRITER_ERR_REDIS;
    }
    if (rep) freeReplyObject(rep);
    if (rc != WRITER_OK) {
        redisFree(*out);
        *out = NULL;
    }
    return rc;
}

/* Copies a field's value (len bytes) into dst (cap bytes): false if empty or too long. */
static bool field_str(char *dst, size_t cap, const char *s, size_t len) {
    if (len == 0 || len >= cap) return false;
    memcpy(dst, s, len);
    dst[len] = '\0';
    return true;
}

/* A decimal integer in lo..hi of exactly len bytes. */
static bool field_int(int64_t *dst, const char *s, size_t len, int64_t lo, int64_t hi) {
    char buf[24], *end;
    if (len == 0 || len >= sizeof(buf) || s[0] == '+' || s[0] == '-') return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *dst = v;
    return true;
}

void writer_redis__entry(const redisReply *r, writer_entry *e) {
    memset(e, 0, sizeof(*e));
    e->kind = WRITER__ENTRY_MALFORMED;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        !field_str(e->id, sizeof(e->id), r->element[0]->str, r->element[0]->len))
        return;
    const redisReply *f = r->element[1];
    if (f->type == REDIS_REPLY_NIL) {
        e->kind = WRITER__ENTRY_VANISHED;
        return;
    }
    if (f->type != REDIS_REPLY_ARRAY || f->elements % 2) return;
    unsigned seen = 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) return;
        int64_t n;
        if (strcmp(k->str, "key") == 0) {
            if (!field_str(e->key, sizeof(e->key), v->str, v->len) || strlen(e->key) != v->len)
                return;
            seen |= 1;
        } else if (strcmp(k->str, "product") == 0) {
            if (!field_int(&n, v->str, v->len, 1, INT32_MAX)) return;
            e->product = (int32_t)n;
            seen |= 2;
        } else if (strcmp(k->str, "instance") == 0) {
            if (!field_str(e->instance, sizeof(e->instance), v->str, v->len)) return;
            seen |= 4;
        } else if (strcmp(k->str, "at_us") == 0) {
            if (!field_int(&n, v->str, v->len, 0, INT64_MAX / 2)) return;
            e->at_us = n;
            seen |= 8;
        } else if (strcmp(k->str, "user") == 0) {
            /* Optional: a deduction with a customer (stockd checked its form). */
            if (v->len == 0 || !field_str(e->user, sizeof(e->user), v->str, v->len) ||
                strlen(e->user) != v->len)
                return;
        } else if (strcmp(k->str, "state") == 0) {
            /* Optional: the deduction made a reservation (with expires_us). */
            if (v->len != 8 || strcmp(v->str, "reserved") != 0) return;
            strcpy(e->state, "reserved");
        } else if (strcmp(k->str, "expires_us") == 0) {
            if (!field_int(&n, v->str, v->len, 1, INT64_MAX / 2)) return;
            e->expires_us = n;
        } else if (strcmp(k->str, "change") == 0) {
            /* A change entry: the reservation of `key` paid, cancelled or expired. */
            if (strcmp(v->str, "paid") != 0 && strcmp(v->str, "cancelled") != 0 &&
                strcmp(v->str, "expired") != 0)
                return;
            snprintf(e->change, sizeof(e->change), "%s", v->str);
        }
    }
    bool reserved = e->state[0] != '\0';
    if (reserved != (e->expires_us > 0) || (reserved && e->change[0])) return;
    if (seen == 15) e->kind = WRITER__ENTRY_OK;
}

/* Parses the entries of one stream's array reply into e[*n..), at most max in all. */
static void take_entries(const redisReply *arr, unsigned max, writer_entry *e, unsigned *n) {
    for (size_t i = 0; arr && arr->type == REDIS_REPLY_ARRAY && i < arr->elements && *n < max; i++)
        writer_redis__entry(arr->element[i], &e[(*n)++]);
}

int writer_redis__read(redisContext *r, const char *consumer, const char *from, unsigned max,
                       unsigned block_ms, writer_entry *e, unsigned *n, char *err, size_t errlen) {
    char count[16], block[16];
    snprintf(count, sizeof(count), "%u", max);
    snprintf(block, sizeof(block), "%u", block_ms);
    const char *argv[] = {"XREADGROUP", "GROUP", WRITER_GROUP, consumer,      "COUNT", count,
                          "BLOCK",      block,   "STREAMS",    WRITER_STREAM, from};
    bool blocking = strcmp(from, ">") == 0;
    int argc = 11;
    if (!blocking) { /* no BLOCK: own pending entries are there or not */
        argv[6] = "STREAMS", argv[7] = WRITER_STREAM, argv[8] = from;
        argc = 9;
    }
    *n = 0;
    redisReply *rep = writer_redis__cmd(r, argc, argv, err, errlen);
    if (!rep) return WRITER_ERR_REDIS;
    int rc = WRITER_OK;
    if (rep->type == REDIS_REPLY_ERROR) {
        /* NOGROUP: the stream or the group was deleted (a FLUSHALL, a promoted replica
         * without them): the caller dials again, which creates them. */
        snprintf(err, errlen, "redis: XREADGROUP: %s", rep->str);
        rc = WRITER_ERR_REDIS;
    } else if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1) {
        const redisReply *s = rep->element[0];
        if (s->type == REDIS_REPLY_ARRAY && s->elements == 2)
            take_entries(s->element[1], max, e, n);
    }
    freeReplyObject(rep);
    return rc;
}

int writer_redis__claim(redisContext *r, const char *consumer, unsigned idle_ms, char *cursor,
                        size_t cursorlen, unsigned max, writer_entry *e, unsigned *n, char *err,
                        size_t errlen) {
    char idle[16], count[16];
    snprintf(idle, sizeof(idle), "%u", idle_ms);
    snprintf(count, sizeof(count), "%u", max);
    const char *argv[] = {"XAUTOCLAIM", WRITER_STREAM, WRITER_GROUP, consumer,
                          idle,         cursor,        "COUNT",      count};
    *n = 0;
    redisReply *rep = writer_redis__cmd(r, 8, argv, err, errlen);
    if (!rep) return WRITER_ERR_REDIS;
    int rc = WRITER_OK;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2 ||
        rep->element[0]->type != REDIS_REPLY_STRING) {
        snprintf(err, errlen, "redis: XAUTOCLAIM: %s",
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
        rc = WRITER_ERR_REDIS;
    } else {
        snprintf(cursor, cursorlen, "%s", rep->element[0]->str);
        take_entries(rep->element[1], max, e, n);
        /* Redis 7 lists, third, the pending ids whose entries were deleted from the
         * stream; it has already taken them off the pending list. They are lost orders:
         * reported as vanished, so that the caller logs and counts them. */
        if (rep->elements >= 3 && rep->element[2]->type == REDIS_REPLY_ARRAY) {
            const redisReply *gone = rep->element[2];
            for (size_t i = 0; i < gone->elements && *n < max; i++) {
                writer_entry *v = &e[(*n)++];
                memset(v, 0, sizeof(*v));
                v->kind = WRITER__ENTRY_VANISHED;
                if (gone->element[i]->type == REDIS_REPLY_STRING)
                    snprintf(v->id, sizeof(v->id), "%s", gone->element[i]->str);
            }
        }
    }
    freeReplyObject(rep);
    return rc;
}

int writer_redis__ack(redisContext *r, const writer_entry *e, unsigned n, char *err,
                      size_t errlen) {
    const char **argv = malloc((n + 3) * sizeof(*argv));
    if (!argv) {
        snprintf(err, errlen, "out of memory");
        return WRITER_ERR_NOMEM;
    }
    argv[0] = "XACK", argv[1] = WRITER_STREAM, argv[2] = WRITER_GROUP;
    int argc = 3;
    for (unsigned i = 0; i < n; i++)
        if (e[i].id[0]) argv[argc++] = e[i].id;
    int rc = WRITER_OK;
    if (argc > 3) {
        redisReply *rep = writer_redis__cmd(r, argc, argv, err, errlen);
        if (!rep || rep->type == REDIS_REPLY_ERROR) {
            if (rep) snprintf(err, errlen, "redis: XACK: %s", rep->str);
            rc = WRITER_ERR_REDIS;
        }
        if (rep) freeReplyObject(rep);
    }
    free(argv);
    return rc;
}

int writer_redis__wait(redisContext *r, unsigned replicas, unsigned timeout_ms, long long *acked,
                       char *err, size_t errlen) {
    char n[16], ms[16];
    snprintf(n, sizeof(n), "%u", replicas);
    snprintf(ms, sizeof(ms), "%u", timeout_ms);
    const char *argv[] = {"WAIT", n, ms};
    redisReply *rep = writer_redis__cmd(r, 3, argv, err, errlen);
    if (!rep) return WRITER_ERR_REDIS;
    int rc = WRITER_OK;
    if (rep->type == REDIS_REPLY_INTEGER) {
        *acked = rep->integer;
    } else {
        snprintf(err, errlen, "redis: WAIT: %s",
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
        rc = WRITER_ERR_REDIS;
    }
    freeReplyObject(rep);
    return rc;
}

/* ---------------------------------------------------------------- trimming */

/* The integer or string field `name` of a flat RESP2 map. */
static const redisReply *map_get(const redisReply *m, const char *name) {
    for (size_t i = 0; m->type == REDIS_REPLY_ARRAY && i + 1 < m->elements; i += 2)
        if (m->element[i]->type == REDIS_REPLY_STRING && strcmp(m->element[i]->str, name) == 0)
            return m->element[i + 1];
    return NULL;
}

writer_id writer_redis__id(const char *s) {
    writer_id id = {0, 0};
    char *end;
    id.ms = strtoull(s, &end, 10);
    if (*end == '-') id.seq = strtoull(end + 1, NULL, 10);
    return id;
}

int writer_redis__id_cmp(writer_id a, writer_id b) {
    if (a.ms != b.ms) return a.ms < b.ms ? -1 : 1;
    return a.seq < b.seq ? -1 : a.seq > b.seq;
}

/* The first id that group g (an XINFO GROUPS row) may still need: its oldest pending
 * entry, or else the one after its last delivered. */
static int group_floor(redisContext *r, const redisReply *g, writer_id *floor, char *err,
                       size_t errlen) {
    const redisReply *name = map_get(g, "name"), *pending = map_get(g, "pending"),
                     *last = map_get(g, "last-delivered-id");
    if (!name || name->type != REDIS_REPLY_STRING || !last || last->type != REDIS_REPLY_STRING) {
        snprintf(err, errlen, "redis: XINFO GROUPS: unexpected reply");
        return WRITER_ERR_REDIS;
    }
    *floor = writer_redis__id(last->str);
    if (!pending || pending->type != REDIS_REPLY_INTEGER || pending->integer == 0) {
        if (++floor->seq == 0) floor->ms++;
        return WRITER_OK;
    }
    const char *argv[] = {"XPENDING", WRITER_STREAM, name->str};
    redisReply *rep = writer_redis__cmd(r, 3, argv, err, errlen);
    if (!rep) return WRITER_ERR_REDIS;
    int rc = WRITER_OK;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 &&
        rep->element[1]->type == REDIS_REPLY_STRING) {
        writer_id oldest = writer_redis__id(rep->element[1]->str);
        if (writer_redis__id_cmp(oldest, *floor) < 0) *floor = oldest;
    } else if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis: XPENDING: %s", rep->str);
        rc = WRITER_ERR_REDIS;
    } /* else: acknowledged meanwhile; the floor after the last delivered holds */
    freeReplyObject(rep);
    return rc;
}

int writer_redis__trim(redisContext *r, long long *trimmed, long long *lag, long long *pending,
                       char *err, size_t errlen) {
    const char *info[] = {"XINFO", "GROUPS", WRITER_STREAM};
    *trimmed = *lag = *pending = 0;
    redisReply *rep = writer_redis__cmd(r, 3, info, err, errlen);
    if (!rep) return WRITER_ERR_REDIS;
    int rc = WRITER_OK;
    bool any = false;
    writer_id floor = {0, 0};
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis: XINFO GROUPS: %s", rep->str);
        rc = WRITER_ERR_REDIS;
    }
    for (size_t i = 0; rc == WRITER_OK && rep->type == REDIS_REPLY_ARRAY && i < rep->elements;
         i++) {
        writer_id f;
        const redisReply *g = rep->element[i], *name = map_get(g, "name"), *l = map_get(g, "lag"),
                         *p = map_get(g, "pending");
        if (name && name->type == REDIS_REPLY_STRING && strcmp(name->str, WRITER_GROUP) == 0) {
            *lag = l && l->type == REDIS_REPLY_INTEGER ? l->integer : 0;
            *pending = p && p->type == REDIS_REPLY_INTEGER ? p->integer : 0;
        }
        rc = group_floor(r, g, &f, err, errlen);
        if (rc == WRITER_OK && (!any || writer_redis__id_cmp(f, floor) < 0)) floor = f;
        any = true;
    }
    freeReplyObject(rep);
    if (rc != WRITER_OK || !any) return rc; /* no group: nobody has acknowledged anything */
    char minid[48];
    snprintf(minid, sizeof(minid), "%llu-%llu", floor.ms, floor.seq);
    const char *trim[] = {"XTRIM", WRITER_STREAM, "MINID", minid};
    rep = writer_redis__cmd(r, 4, trim, err, errlen);
    if (!rep) return WRITER_ERR_REDIS;
    if (rep->type == REDIS_REPLY_INTEGER) {
        *trimmed = rep->integer;
    } else {
        snprintf(err, errlen, "redis: XTRIM: %s",
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
        rc = WRITER_ERR_REDIS;
    }
    freeReplyObject(rep);
    return rc;
}

int writer_redis__forget(redisContext *r, const char *self, unsigned idle_ms, FILE *log,
                         long long *removed, char *err, size_t errlen) {
    const char *argv[] = {"XINFO", "CONSUMERS", WRITER_STREAM, WRITER_GROUP};
    *removed = 0;
    redisReply *rep = writer_redis__cmd(r, 4, argv, err, errlen);
    if (!rep) return WRITER_ERR_REDIS;
    int rc = WRITER_OK;
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis: XINFO CONSUMERS: %s", rep->str);
        rc = WRITER_ERR_REDIS;
    }
    for (size_t i = 0; rc == WRITER_OK && rep->type == REDIS_REPLY_ARRAY && i < rep->elements;
         i++) {
        const redisReply *name = map_get(rep->element[i], "name"),
                         *pending = map_get(rep->element[i], "pending"),
                         *idle = map_get(rep->element[i], "idle");
        if (!name || name->type != REDIS_REPLY_STRING || !pending ||
            pending->type != REDIS_REPLY_INTEGER || !idle || idle->type != REDIS_REPLY_INTEGER)
            continue;
        if (strcmp(name->str, self) == 0 || pending->integer != 0 ||
            idle->integer < (long long)idle_ms)
            continue;
        /* DELCONSUMER answers the pending entries it dropped: checked to be 0 above, and
         * a consumer that read meanwhile would be re-created by its next read. */
        const char *del[] = {"XGROUP", "DELCONSUMER", WRITER_STREAM, WRITER_GROUP, name->str};
        redisReply *d = writer_redis__cmd(r, 5, del, err, errlen);
        if (!d) {
            rc = WRITER_ERR_REDIS;
            break;
        }
        if (d->type == REDIS_REPLY_INTEGER) {
            (*removed)++;
            fprintf(log,
                    "stock-writer %s: removed consumer %s from the group (idle %lld ms, "
                    "nothing pending)\n",
                    self, name->str, idle->integer);
        }
        freeReplyObject(d);
    }
    freeReplyObject(rep);
    return rc;
}
