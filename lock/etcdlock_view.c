/* etcdlock_view.c: the etcd fair lock's part of lock_view_read (lock.h). The queue of
 * a lock is every key under <prefix><name>/, one per waiter and named by its lease, in
 * the order of their create revisions: the oldest holds, and each other one watches the
 * key just before it (etcdlock.c). A key's value is the instance that queued it
 * (etcdlock_config.owner). The view is one range of those keys, oldest first, and the
 * holder's lease left (its time to live, which etcd gives in whole seconds): two
 * requests on the handle's command connection. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "etcdlock_int.h"
#include "lease_pool_int.h"
#include "lock.h"

/* Decodes base64 `in` into out (cap bytes, NUL-terminated, cut at cap - 1). */
static void ev_unb64(const char *in, char *out, size_t cap) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned acc = 0;
    int bits = 0;
    size_t n = 0;
    for (const char *p = in; *p && *p != '=' && n + 1 < cap; p++) {
        const char *at = strchr(abc, *p);
        if (!at) break;
        acc = (acc << 6) | (unsigned)(at - abc);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (char)((acc >> bits) & 0xff);
        }
    }
    out[n] = '\0';
}

/* The lease's time to live in ms, or -1 (gone, or not known). */
static int64_t ev_lease_left_ms(etcdlock *l, int64_t lease) {
    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return -1;
    etcdlock__j_add_i64(req, "ID", lease);
    int rc = etcdlock__call(l, "/v3/lease/timetolive", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return -1;
    int64_t ttl = etcdlock__j_i64(res, "TTL");
    cJSON_Delete(res);
    return ttl >= 0 ? ttl * 1000 : -1;
}

int etcdlock__lease_view(void *handle, const char *name, lock_view *out) {
    etcdlock *l = handle;
    char pfx[ETCDLOCK_KEY_MAX], pfx_b64[ETCDLOCK_B64_MAX], end_b64[ETCDLOCK_B64_MAX];
    if (!lock__lease_name_valid(name, ETCDLOCK_NAME_MAX)) return LOCK_ERR_ARGS;
    etcdlock__queue_range(l, name, pfx, pfx_b64, end_b64);
    snprintf(out->path, sizeof(out->path), "%s", pfx);
    out->queue = out->lease = true;

    cJSON *req = cJSON_CreateObject(), *res = NULL;
    if (!req) return LOCK_ERR_NOMEM;
    etcdlock__j_add_queue_range(req, pfx_b64, end_b64, "ASCEND", LOCK_VIEW_MAX);
    int rc = etcdlock__call(l, "/v3/kv/range", req, &res, NULL);
    cJSON_Delete(req);
    if (rc != LOCK_OK) return rc;
    int64_t count = etcdlock__j_i64(res, "count"), holder_lease = 0;
    const cJSON *kv;
    cJSON_ArrayForEach(kv, etcdlock__j_get(res, "kvs")) {
        if (out->n == LOCK_VIEW_MAX) break;
        lock_view_entry *e = &out->e[out->n];
        const cJSON *k = etcdlock__j_get(kv, "key"), *v = etcdlock__j_get(kv, "value");
        char key[ETCDLOCK_KEY_MAX];
        ev_unb64(cJSON_IsString(k) ? k->valuestring : "", key, sizeof(key));
        /* The key's last part, the lease in hex (at most 16 digits). */
        const char *last = strrchr(key, '/');
        snprintf(e->node, sizeof(e->node), "%.63s", last ? last + 1 : key);
        ev_unb64(cJSON_IsString(v) ? v->valuestring : "", e->owner, sizeof(e->owner));
        e->seq = etcdlock__j_i64(kv, "create_revision");
        e->watches = (int)out->n - 1;
        if (out->n == 0) holder_lease = etcdlock__j_i64(kv, "lease");
        out->n++;
    }
    cJSON_Delete(res);
    out->total = count > (int64_t)out->n ? (size_t)count : out->n;
    out->lease_ms = out->n && holder_lease ? ev_lease_left_ms(l, holder_lease) : -1;
    return LOCK_OK;
}
