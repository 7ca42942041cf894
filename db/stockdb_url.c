/* stockdb_url.c: the one parser of the project's mysql:// URLs (stockdb.h's
 * stockdb_config_from_url), used by the service's db/ and by loadtest/'s reconciliation,
 * so that a URL means the same everywhere. Pure: it links no client library. */
#include "stockdb.h"
#include "hostport.h"

#include <stdbool.h>
#include <string.h>

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Copies [s, s+n) into dst (size cap) decoding %XX. Refuses raw characters in `forbid`,
 * controls, spaces, bad escapes, %00, and results that do not fit. */
static bool url_decode(char *dst, size_t cap, const char *s, size_t n, const char *forbid) {
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == 0x7f || strchr(forbid, c)) return false;
        if (c == '%') {
            if (i + 2 >= n) return false;
            int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
            if (h < 0 || l < 0) return false;
            c = (unsigned char)(h * 16 + l);
            if (c == 0) return false;
            i += 2;
        }
        if (out + 1 >= cap) return false;
        dst[out++] = (char)c;
    }
    dst[out] = '\0';
    return true;
}

/* True if [s, s+n) is non-empty, made only of `allowed` plus letters and digits, and
 * fits (with its NUL) in cap bytes. */
static bool plain_token(const char *s, size_t n, size_t cap, const char *allowed) {
    if (n == 0 || n >= cap) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (c == '\0' || !strchr(allowed, c))) return false;
    }
    return true;
}

int stockdb_config_from_url(stockdb_config *cfg, const char *url) {
    static const char scheme[] = "mysql://";
    if (!cfg || !url || strncmp(url, scheme, sizeof(scheme) - 1) != 0) return STOCKDB_ERR_CONFIG;
    stockdb_config c = *cfg;
    const char *auth = url + sizeof(scheme) - 1;
    const char *slash = strchr(auth, '/');
    if (!slash) return STOCKDB_ERR_CONFIG;
    const char *at = memchr(auth, '@', (size_t)(slash - auth));
    if (!at || memchr(at + 1, '@', (size_t)(slash - at - 1))) return STOCKDB_ERR_CONFIG;

    /* USER[:PASS] */
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    const char *user_end = colon ? colon : at;
    if (user_end == auth) return STOCKDB_ERR_CONFIG;
    if (!url_decode(c.user, sizeof(c.user), auth, (size_t)(user_end - auth), "@/?#"))
        return STOCKDB_ERR_CONFIG;
    if (colon &&
        !url_decode(c.password, sizeof(c.password), colon + 1, (size_t)(at - colon - 1), "@/?#"))
        return STOCKDB_ERR_CONFIG;

    /* HOST[:PORT], MySQL's port when there is none. */
    hostport hp;
    if (hostport_parse(at + 1, (size_t)(slash - at - 1), 3306, &hp) != 0 ||
        strlen(hp.host) >= sizeof(c.host))
        return STOCKDB_ERR_CONFIG;
    memcpy(c.host, hp.host, strlen(hp.host) + 1);
    c.port = (unsigned)hp.port;

    /* /DB */
    const char *dbname = slash + 1;
    size_t n = strlen(dbname);
    if (!plain_token(dbname, n, sizeof(c.database), "_$-")) return STOCKDB_ERR_CONFIG;
    memcpy(c.database, dbname, n + 1);

    *cfg = c;
    return STOCKDB_OK;
}
