/* curl_api.h: libcurl's calls as loaded at run time (dlopen, once per process, by
 * etcdlock_http.c), for the code that needs libcurl without linking it: mode etcd's
 * lock and stockd's owner routing (service/forward.c). Linked, libcurl and the ~18
 * libraries it needs were mapped into every stockd whatever its mode, about 1.5 MB of
 * resident memory per instance (docs/benchmarks.md, "Memory"). */
#ifndef LOCK_CURL_API_H
#define LOCK_CURL_API_H

#include <curl/curl.h> /* the types only */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The libcurl calls this file makes, filled in by load_curl() from the library's own
 * symbols; read-only once loaded. */
struct curl_api {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *e);
    CURLcode (*easy_setopt)(CURL *e, CURLoption opt, ...);
    CURLcode (*easy_perform)(CURL *e);
    CURLcode (*easy_getinfo)(CURL *e, CURLINFO info, ...);
    const char *(*easy_strerror)(CURLcode cc);
    struct curl_slist *(*slist_append)(struct curl_slist *list, const char *s);
    void (*slist_free_all)(struct curl_slist *list);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_cleanup)(CURLM *m);
    CURLMcode (*multi_add_handle)(CURLM *m, CURL *e);
    CURLMcode (*multi_remove_handle)(CURLM *m, CURL *e);
    CURLMcode (*multi_perform)(CURLM *m, int *running);
    CURLMsg *(*multi_info_read)(CURLM *m, int *left);
    CURLMcode (*multi_poll)(CURLM *m, struct curl_waitfd extra[], unsigned n, int timeout_ms,
                            int *numfds);
};

/* Loads libcurl and runs curl_global_init, once per process; any thread. The table, or
 * NULL with the reason in err (the library is missing or too old). */
const struct curl_api *lock_curl_api(char *err, size_t errcap);

/* Bytes received over HTTP (an answer's body, a peer's frame), kept NUL-terminated so
 * that cJSON reads them in place. Zeroed = empty; the owner frees p. */
typedef struct curl_api_buf {
    char *p;
    size_t n, cap;
} curl_api_buf;

/* Appends n bytes of data, doubling the room as needed. 0, or -1 when out of memory (b
 * is left as it was). */
static inline int curl_api_buf_append(curl_api_buf *b, const char *data, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

/* A CURLOPT_WRITEFUNCTION that appends the body to the curl_api_buf of its
 * CURLOPT_WRITEDATA; a failed append fails the transfer. */
static inline size_t curl_api_on_body(char *data, size_t size, size_t nmemb, void *buf) {
    return curl_api_buf_append(buf, data, size * nmemb) == 0 ? size * nmemb : 0;
}

#endif
