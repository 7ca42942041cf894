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

static long value_len(const unsigned char *buf, size_t len, int depth) {
    if (len == 0) return 0;
    if (depth > RESP_DEPTH) return -1;
    size_t end = line_end(buf, len);
    if (!end) return len > (64u << 10) ? -1 : 0;
    long long n = 0;
    int neg = 0;
    for (size_t i = 1; i < end && buf[i] != '\r' && buf[i] != '\n'; i++) {
        if (i == 1 && buf[i] == '-')
            neg = 1;
        else if (buf[i] >= '0' && buf[i] <= '9')
            n = n * 10 + (buf[i] - '0');
        else if (buf[i] != '?')
            break; /* a streamed length: taken as a line */
        if (n > (512ll << 20)) return -1;
    }
    switch (buf[0]) {
    case '$':
    case '!':
    case '=': /* bulk string, bulk error, verbatim string */
        if (neg) return (long)end;
        if (end + (size_t)n + 2 > len) return 0;
        return (long)(end + (size_t)n + 2);
    case '*':
    case '~':
    case '>':
    case '%':
    case '|': { /* array, set, push; map and attribute have pairs */
        if (neg) return (long)end;
        long long items = buf[0] == '%' || buf[0] == '|' ? 2 * n : n;
        size_t off = end;
        for (long long i = 0; i < items; i++) {
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
    default: /* a simple line: + - : _ # , ( and the client's inline commands */
        return (long)end;
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
