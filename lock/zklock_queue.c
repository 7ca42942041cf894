/* zklock_queue.c: the fair lock's queue as one listing of the lock's parent shows it:
 * which children contend, in what order, and what the listing means to one contender
 * (zklock__decide: hold, or watch the predecessor). Pure functions of names, shared by
 * the recipe (zklock.c), the tries (zklock_many.c), the view (zklock_view.c) and the
 * cleanup by GUID (zklock_conn.c); the bottom layer of zklock_int.h, calling nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zklock_int.h"

/* ZooKeeper appends the parent's child version (cversion, a signed 32-bit int) as
 * printf("%010d"): ten digits. At 2^31-1 the version stops (ZooKeeper 3.8's DataTree keeps
 * the greater of the old value and its overflowed increment), so every later child is
 * named 2147483647; a create prepared while the one that reached the limit was still in
 * flight gets the overflowed, signed value: a minus sign and nine or ten digits. */
static int zklock_seq_text(const char *p, size_t n) {
    if (n == 11 || (n == 10 && *p == '-')) {
        if (*p != '-') return 0;
        p++, n--;
    } else if (n != 10) {
        return 0;
    }
    for (; n; p++, n--)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

static int zklock_hex(const char *p, size_t n, int dashes) {
    for (size_t i = 0; i < n; i++) {
        int dash = dashes && (i == 8 || i == 13 || i == 18 || i == 23);
        if (dash ? p[i] != '-' : !((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
            return 0;
    }
    return 1;
}

/* ZooKeeper's own C recipe (zoo_lock.c in its source tree) names its node
 * "x-<session id as %016lx>-<seq>": the whole name, no marker. */
static int zklock_zoo_lock_name(const char *name, size_t head) {
    return head == 2 + 16 + 1 && memcmp(name, "x-", 2) == 0 && zklock_hex(name + 2, 16, 0) &&
           name[18] == '-';
}

const char *zklock__contender_seq(const char *name) {
    static const char *const markers[] = {"-lock-", "__lock__"};
    size_t n = strlen(name);
    for (size_t len = 10; len <= 11; len++) {
        if (n < len || !zklock_seq_text(name + n - len, len)) continue;
        if (zklock_zoo_lock_name(name, n - len)) return name + n - len;
        for (size_t m = 0; m < sizeof(markers) / sizeof(markers[0]); m++) {
            size_t ml = strlen(markers[m]);
            if (n >= len + ml && memcmp(name + n - len - ml, markers[m], ml) == 0)
                return name + n - len;
        }
    }
    return NULL;
}

/* At the limit, a sequence no longer says who came first: names repeat, and a signed one
 * is newer than every unsigned one, not older as its text sorts. */
int zklock__seq_at_limit(const char *seq) {
    return seq && (seq[0] == '-' || strcmp(seq, "2147483647") == 0);
}

int64_t zklock__child_seq(const char *name) {
    const char *seq = zklock__contender_seq(name);
    return seq ? strtoll(seq, NULL, 10) : INT64_MIN;
}

int zklock__contender_cmp(const char *a, const char *b) {
    const char *sa = zklock__contender_seq(a), *sb = zklock__contender_seq(b);
    int la = zklock__seq_at_limit(sa), lb = zklock__seq_at_limit(sb);
    int rc = la != lb ? la - lb : la ? 0 : strcmp(sa, sb);
    return rc ? rc : strcmp(a, b);
}

int zklock__own_child(const char *name, const char *guid) {
    return strncmp(name, guid, ZKLOCK_GUID_LEN) == 0 &&
           strncmp(name + ZKLOCK_GUID_LEN, "-lock-", 6) == 0 &&
           zklock__contender_seq(name) == name + ZKLOCK_GUID_LEN + 6;
}

void zklock__decide(const struct String_vector *kids, const char *mine, const char *guid,
                    zklock_decision *d) {
    *d = (zklock_decision){0};
    for (int i = 0; i < kids->count; i++) {
        const char *k = kids->data[i];
        if (strcmp(k, mine) == 0) {
            d->found = 1;
        } else if (!zklock__contender_seq(k)) {
            d->strays++;
        } else if (guid && zklock__own_child(k, guid)) {
            d->twins++;
        } else if (zklock__contender_cmp(k, mine) < 0) {
            d->below++;
            if (!d->pred || zklock__contender_cmp(k, d->pred) > 0) d->pred = k;
        } else {
            d->above++;
        }
    }
    d->at_limit = zklock__seq_at_limit(zklock__contender_seq(mine));
    d->holds = d->found && !d->pred && !d->at_limit;
}

const char *zklock__contender_impl(const char *name) {
    const char *seq = zklock__contender_seq(name);
    if (!seq) return "stray";
    size_t head = (size_t)(seq - name);
    if (head == ZKLOCK_GUID_LEN + 6 && zklock_hex(name, ZKLOCK_GUID_LEN, 0) &&
        memcmp(name + ZKLOCK_GUID_LEN, "-lock-", 6) == 0)
        return "stockd";
    /* Curator's protected name: "_c_", a UUID, "-lock-". */
    if (head == 3 + 36 + 6 && memcmp(name, "_c_", 3) == 0 && zklock_hex(name + 3, 36, 1))
        return "curator";
    if (head >= 8 && memcmp(seq - 8, "__lock__", 8) == 0) return "kazoo";
    if (zklock_zoo_lock_name(name, head)) return "zoolock";
    return "other";
}
