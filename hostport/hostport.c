/* hostport.c: HOST:PORT and comma lists of them (the grammar is in hostport.h). */
#include "hostport.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define HOSTPORT_NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_"
#define HOSTPORT_IPV6_CHARS "0123456789abcdefABCDEF:."

/* true when the n bytes at s are 1 or more, all of them in allowed. */
static bool hostport__chars(const char *s, size_t n, const char *allowed) {
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\0' || !strchr(allowed, s[i])) return false;
    return n > 0;
}

int hostport_parse(const char *s, size_t len, int default_port, hostport *out) {
    const char *end, *host = s, *host_end, *port = NULL;

    if (!s || !out || len == 0) return -1;
    end = s + len;
    if (*s == '[') {
        const char *close = memchr(s, ']', len);
        if (!close) return -1;
        host = s + 1;
        host_end = close;
        if (close + 1 != end) {
            if (close[1] != ':') return -1;
            port = close + 2;
        }
        if (host_end - host < 2 ||
            !hostport__chars(host, (size_t)(host_end - host), HOSTPORT_IPV6_CHARS) ||
            !memchr(host, ':', (size_t)(host_end - host)))
            return -1;
    } else {
        const char *colon = memchr(s, ':', len);
        host_end = colon ? colon : end;
        if (colon) port = colon + 1;
        if (!hostport__chars(host, (size_t)(host_end - host), HOSTPORT_NAME_CHARS)) return -1;
    }
    if ((size_t)(host_end - host) >= sizeof(out->host)) return -1;

    long v = default_port;
    if (port) {
        if (port == end || end - port > 5) return -1;
        v = 0;
        for (const char *p = port; p < end; p++) {
            if (*p < '0' || *p > '9') return -1;
            v = v * 10 + (*p - '0');
        }
    }
    if (v < 1 || v > 65535) return -1;
    memcpy(out->host, host, (size_t)(host_end - host));
    out->host[host_end - host] = '\0';
    out->port = (int)v;
    return 0;
}

int hostport_list_parse(const char *s, hostport *out, int max) {
    int n = 0;

    if (!s || max < 1) return -1;
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        hostport one;
        if (n == max || hostport_parse(p, len, 0, &one) != 0) return -1;
        /* A repeat is the same text: the list names each server once as written. */
        for (const char *q = s; q < p;) {
            const char *qc = strchr(q, ',');
            if ((size_t)(qc - q) == len && memcmp(q, p, len) == 0) return -1;
            q = qc + 1;
        }
        if (out) out[n] = one;
        n++;
        if (!comma) return n;
        p = comma + 1;
    }
}

int hostport_format(const hostport *hp, char *buf, size_t cap) {
    int n = snprintf(buf, cap, strchr(hp->host, ':') ? "[%s]:%d" : "%s:%d", hp->host, hp->port);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}
