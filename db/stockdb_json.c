/* stockdb_json.c: the small JSON-array builder for the parameters of the statements that
 * take many rows at once (stockdb_int.h, "JSON parameters"): the keys of a batch's orders,
 * and the orders of a transaction over several products. Each statement
 * reads its array with JSON_TABLE, so one round trip carries every row. Only numbers,
 * punctuation and request ids go in; a request id is escaped byte for byte, so any key
 * arrives as it was. Memory running out drops the text and sets oom, which the caller
 * checks once at the end. */
#include "stockdb_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for more bytes and the final NUL; false when out of memory. */
static bool json_room(stockdb__json_buf *j, size_t more) {
    if (j->oom) return false;
    size_t need = j->len + more + 1;
    if (need <= j->cap) return true;
    size_t c = j->cap ? j->cap : 256;
    while (c < need)
        c *= 2;
    char *grown = realloc(j->s, c);
    if (!grown) {
        free(j->s);
        *j = (stockdb__json_buf){.oom = true};
        return false;
    }
    j->s = grown;
    j->cap = c;
    return true;
}

/* Appends text (no escaping: numbers and punctuation only). */
void stockdb__json_raw(stockdb__json_buf *j, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !json_room(j, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(j->s + j->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    j->len += (size_t)n;
}

/* Appends key as a JSON string (NULL: null). Request ids are at most
 * STOCKDB_REQUEST_ID_MAX bytes; every byte that JSON cannot carry raw is escaped, so any
 * key arrives as it was. */
void stockdb__json_key(stockdb__json_buf *j, const char *key) {
    if (!key) {
        stockdb__json_raw(j, "null");
        return;
    }
    if (!json_room(j, 6 * strlen(key) + 2)) return;
    char *o = j->s + j->len;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        if (*p == '"' || *p == '\\') {
            *o++ = '\\';
            *o++ = (char)*p;
        } else if (*p < 0x20) {
            o += snprintf(o, 7, "\\u%04x", *p);
        } else {
            *o++ = (char)*p;
        }
    }
    *o++ = '"';
    *o = '\0';
    j->len = (size_t)(o - j->s);
}
