/* fault_proxy_redis.c: see fault_proxy_redis.h. A RESP value is a type byte and a line
 * ending in CRLF; bulk types then carry that many bytes and a CRLF, aggregate types that
 * many values (twice as many for maps and attributes). */
#include "fault_proxy_redis.h"

#include <string.h>

#define RESP_DEPTH 64

/* The end of the line that starts at buf (just past its CRLF), 0 if not there. */
static size_t line_end(const unsigned char *buf, size_t len) {
    const unsigned char *nl = memchr(buf, '\n', len);
    return nl ? (size_t)(nl - buf) + 1 : 0;
}

/* Is t a type whose line is a length (bulk) or a count (aggregate)? The other lines,
 * integers and big numbers among them, are whole values and never read as numbers. */
static int counted(unsigned char t) {
    return strchr("$!=;*~>%|", t) != NULL && t != '\0';
}

static long value_len(const unsigned char *buf, size_t len, int depth) {
    if (len == 0) return 0;
    if (depth > RESP_DEPTH) return -1;
    size_t end = line_end(buf, len);
    if (!end) return len > (64u << 10) ? -1 : 0;
    if (!counted(buf[0])) /* a simple line: + - : _ # , ( . and the client's inline commands */
        return (long)end;
    /* A length or count: digits, or -1 (null), or ? (a streamed value, whose parts come
     * as values of their own: taken as a line). */
    if (end >= 2 && buf[1] == '?') return (long)end;
    if (end >= 2 && buf[1] == '-') return (long)end;
    long long n = 0;
    size_t i = 1;
    for (; i < end && buf[i] >= '0' && buf[i] <= '9'; i++) {
        n = n * 10 + (buf[i] - '0');
        if (n > (512ll << 20)) return -1; /* Redis's own ceiling for a bulk string */
    }
    if (i == 1 || buf[i] != '\r' || i + 2 != end) return -1; /* not a length line */
    switch (buf[0]) {
    case '$':
    case '!':
    case '=':
    case ';': /* bulk string, bulk error, verbatim string, a streamed string's part */
        if (end + (size_t)n + 2 > len) return 0;
        return (long)(end + (size_t)n + 2);
    default: { /* array, set, push; map and attribute have pairs */
        long long items = buf[0] == '%' || buf[0] == '|' ? 2 * n : n;
        size_t off = end;
        for (long long k = 0; k < items; k++) {
            long got = value_len(buf + off, len - off, depth + 1);
            if (got <= 0) return got;
            off += (size_t)got;
        }
        if (buf[0] == '|') { /* an attribute precedes the value it describes */
            long got = value_len(buf + off, len - off, depth + 1);
            if (got <= 0) return got;
            off += (size_t)got;
        }
        return (long)off;
    }
    }
}

long fp_redis_value_len(const unsigned char *buf, size_t len) {
    return value_len(buf, len, 0);
}

static long redis_frame(void *arg, fp_conn *c, int dir, const unsigned char *buf, size_t len) {
    (void)arg;
    (void)c;
    (void)dir;
    return fp_redis_value_len(buf, len);
}

fp_hook fp_redis_hook(void) {
    return (fp_hook){.name = "redis", .frame = redis_frame};
}
