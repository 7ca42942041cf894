/* http.c: stockd's HTTP side on libmicrohttpd.
 *
 * One internal polling thread runs every connection. It parses and routes each request
 * and answers at once whatever needs no I/O (bad input, unknown routes, a full queue).
 * A request that needs MySQL or ZooKeeper becomes a job: the connection is suspended
 * first and the job pushed second, so a worker can never resume a connection that is
 * not yet suspended. When the worker is done it resumes the connection from its own
 * thread (libmicrohttpd allows that), and the polling thread sends the answer.
 *
 * Routes:
 *   GET|POST /stock/reduce?id=N   deduct one unit (Idempotency-Key header or request_id=)
 *   GET|HEAD /stock?id=N          current stock
 *   GET|HEAD /health              MySQL and ZooKeeper connectivity
 *   GET|HEAD /metrics             Prometheus text (rendered here: it needs no I/O)
 *   GET|HEAD /lock/queue?id=N     the lock service's view of product N's lock (lockview.c)
 *   GET|HEAD /route/view, /route/owner?id=N   owner routing's view (route.c)
 *   POST /peer/frame              peers only: a frame of forwarded deductions (peer_api.c)
 * Requests carry no body, but for /peer/: a body is refused with 400. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "peer_api.h"
#include "stockd.h"

struct stockd_http {
    stockd_ctx *ctx;
    struct MHD_Daemon *daemon;
    atomic_uint open_requests; /* request contexts made and not yet completed */
    atomic_ullong next_seq;    /* for our own request ids */
    char boot_id[17];          /* random per process, so ids are unique across restarts */
    MHD_socket quiesced;       /* the listening socket once quiesced, closed after stop */
};

/* The per-request context: the job, plus what the polling thread learns while routing. */
typedef struct http_req {
    stockd_job job;
    bool started; /* on_request has seen it: its next call has the whole request */
    bool queued;
    bool too_many;    /* on_uri cut its query: more than STOCKD_MAX_PARAMS parameters */
    bool nul_path;    /* a NUL byte before the query (unescape_arg found it) */
    size_t uri_bytes; /* the URI's length as sent, when on_uri cut it */
    size_t body_bytes;
    bool peer; /* a /peer/ call: peer_api.c's, with its state */
    void *peer_state;
} http_req;

/* libmicrohttpd's memory per connection (its "pool"), which must hold the whole request
 * head and the answer's status line and headers. Under load this is most of stockd's
 * memory, so it is sized by what it costs, not by what fits:
 * - libmicrohttpd 0.9.75 zeroes the whole pool each time a kept-alive connection starts
 *   its next request, so every connection nginx keeps open holds all of it resident.
 * - Behind nginx an instance has one connection per request in flight, plus the ones
 *   nginx is closing: 400 to 700 per instance at 1000 in flight over 3 instances
 *   (loadtest/memory). At 64 KiB that was a 38 to 50 MB peak per instance, over about
 *   12 MB at rest; at 8 KiB still 16.2 to 16.4 MB over a million requests.
 * - 6 KiB is stockd's own limits (4 KiB of URI or of headers, stockd.h) plus room for
 *   the rest of a head and the answer's headers: a head of up to about 5.4 KiB fits.
 *   A request to stockd is a short line and a few headers (about 300 bytes via nginx).
 * - A pool of 32 KiB or less comes from malloc, not mmap: the polling thread's arena
 *   keeps freed pools for the next connections, so the peak is reused, not repeated.
 * A head that does not fit gets libmicrohttpd's own 414 / 431 (HTML); one over stockd's
 * limits that still fits gets stockd's JSON answer. */
#define STOCKD_CONNECTION_MEMORY (6 * 1024)

/* The most body stockd reads (and drops) before it closes the connection: far above
 * nginx's default client_max_body_size (1 MiB), so whatever nginx forwards still gets
 * its JSON 400, and small enough that a client cannot keep a connection busy. */
#define STOCKD_MAX_BODY (8 * 1024 * 1024)

static const char fallback_body[] = "{\"result\":\"internal_error\",\"message\":\"out of memory\"}";

/* Queues status + body (which the response takes over and frees) on the connection. */
static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status, char *body,
                                 const char *allow, const char *content_type) {
    struct MHD_Response *resp;
    enum MHD_Result ret;

    if (body) {
        resp = MHD_create_response_from_buffer_with_free_callback(strlen(body), body, free);
    } else {
        status = 500;
        resp = MHD_create_response_from_buffer(sizeof(fallback_body) - 1, (void *)fallback_body,
                                               MHD_RESPMEM_PERSISTENT);
    }
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            content_type ? content_type : "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Answers at once, on the polling thread, and counts the answer. */
static enum MHD_Result send_error(stockd_http *h, struct MHD_Connection *c, stockd_route route,
                                  stockd_result r, const char *message, const char *allow) {
    stockd_answer a = {.result = r, .message = message};
    stockd_metrics_request(route, r);
    return send_body(c, stockd_answer_status(r), stockd_answer_json(&a, h->ctx->cfg->instance),
                     allow, NULL);
}

/* Collects the decoded query parameters, up to STOCKD_MAX_PARAMS. */
typedef struct http_params {
    stockd_param p[STOCKD_MAX_PARAMS];
    size_t n;
    bool truncated;
} http_params;

static enum MHD_Result collect_param(void *cls, enum MHD_ValueKind kind, const char *key,
                                     size_t key_size, const char *value, size_t value_size) {
    http_params *ps = cls;

    if (ps->n == STOCKD_MAX_PARAMS) {
        ps->truncated = true;
        return MHD_NO;
    }
    ps->p[ps->n++] = (stockd_param){key, key_size, value, value_size};
    return MHD_YES;
}

/* Adds up the bytes of the query parameters. */
static enum MHD_Result count_bytes(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_size, const char *value, size_t value_size) {
    *(size_t *)cls += key_size + value_size + 2; /* "k=v&" */
    return MHD_YES;
}

/* Adds a header to the request (contract.c reads what it knows of it). libmicrohttpd's
 * header names are NUL-terminated; a header with no value counts as empty. */
static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      size_t key_size, const char *value, size_t value_size) {
    (void)key_size;
    stockd_request_set_header(cls, key, value ? value : "", value ? value_size : 0);
    return MHD_YES;
}

/* When the request arrived, on stockd_now_ns's clock: now, moved back by the time it
 * spent since nginx sent it (its X-Request-Start header, nginx/nginx.conf.in). A request
 * can wait in the listen backlog before libmicrohttpd accepts it (when more than
 * --max-connections are in flight), while nginx's proxy_read_timeout counts from the
 * send; --queue-deadline-ms must count from there too, or a deduction could COMMIT after
 * nginx has answered 504. The header is wall-clock time, compared with ours: nginx and
 * stockd share one clock when they run on one host (containers of one host included).
 * On two hosts the clocks' difference adds to every age: a time that reads as in the
 * future or older than STOCKD_REQUEST_START_MAX_AGE_MS is ignored (counted from now,
 * as without the header); a clock behind ours by more than the deadline but less than
 * that bound makes every deduction expire. A client that sends the header itself (not
 * through nginx, which replaces it) can only make its own request expire sooner. */
static uint64_t request_arrival_ns(struct MHD_Connection *c) {
    uint64_t now = stockd_now_ns(), age = 0;
    const char *v;
    size_t len;
    struct timespec wall;

    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, "X-Request-Start", 15, &v, &len) ==
            MHD_YES &&
        clock_gettime(CLOCK_REALTIME, &wall) == 0 && wall.tv_sec >= 0)
        age = stockd_request_age_ns(v, len,
                                    (uint64_t)wall.tv_sec * 1000000000u + (uint64_t)wall.tv_nsec);
    return age < now ? now - age : 0;
}

/* Owner routing: a deduction that came with X-Stockd-Hop is served here (a client that
 * sends it gains nothing but that); any other keeps its request whole (frame.c's JSON:
 * method, path, every parameter, the headers of stockd_forwarded_headers), in case its
 * product's owner is another instance. Its id is made already, so it travels too. */
static void forwardable(stockd_http *h, struct MHD_Connection *c, stockd_job *job,
                        const stockd_request_in *in, const char *method, const char *url) {
    stockd_param hs[4];
    size_t nh = 0;
    job->hop = MHD_lookup_connection_value(c, MHD_HEADER_KIND, STOCKD_HOP_HEADER) != NULL;
    if (job->hop || !stockd_route_on()) return;
    for (const char *const *name = stockd_forwarded_headers; *name && nh < 4; name++) {
        const char *v;
        size_t len;
        if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, *name, strlen(*name), &v, &len) ==
            MHD_YES)
            hs[nh++] = (stockd_param){*name, strlen(*name), v, len};
    }
    job->fwd = stockd_frame_request(method, url, in->params, in->nparams, hs, nh);
    (void)h;
}

/* Routes a complete request (contract.c decides) and acts on the decision: answer at
 * once, or suspend the connection and queue a job. */
static enum MHD_Result route(stockd_http *h, struct MHD_Connection *c, http_req *r, const char *url,
                             const char *method) {
    http_params ps = {.n = 0};
    stockd_request_in in = {.method = method, .path = url, .body_bytes = r->body_bytes};
    stockd_routed d;
    stockd_job *job = &r->job;

    if (r->nul_path)
        return send_error(h, c, STOCKD_ROUTE_OTHER, STOCKD_R_BAD_REQUEST,
                          "a NUL byte in the request's path", NULL);
    MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, collect_param, &ps);
    in.params = ps.p;
    in.nparams = ps.n;
    in.params_truncated = ps.truncated || r->too_many;
    in.uri_bytes = strlen(url);
    MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, count_bytes, &in.uri_bytes);
    if (r->uri_bytes > in.uri_bytes) in.uri_bytes = r->uri_bytes;
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, collect_header, &in);
    stockd_route_request(&in, &d);

    if (d.error == STOCKD_R_OK && d.route == STOCKD_ROUTE_RESTOCK) {
        /* Restock is the operator's: its token (--admin-token-file), checked here, before
         * any work is queued. */
        const char *auth = NULL;
        size_t auth_len = 0;
        if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, "Authorization", 13, &auth,
                                          &auth_len) != MHD_YES)
            auth = NULL;
        d.error = stockd_check_admin(auth, auth_len, h->ctx->cfg->admin_token);
        d.message = d.error == STOCKD_R_UNAUTHORIZED ? "restock needs Authorization: Bearer <token>"
                    : h->ctx->cfg->admin_token[0]
                        ? "wrong token; nothing was restocked"
                        : "restock is off: stockd runs without --admin-token-file";
    }
    if (d.error != STOCKD_R_OK) return send_error(h, c, d.route, d.error, d.message, d.allow);
    if (d.route == STOCKD_ROUTE_ROUTING) {
        stockd_metrics_request(STOCKD_ROUTE_ROUTING, STOCKD_R_OK);
        return send_body(
            c, 200, d.product_id ? stockd_route_owner_json(d.product_id) : stockd_route_view_json(),
            NULL, NULL);
    }
    if (d.route == STOCKD_ROUTE_METRICS) {
        /* Rendering reads counters only: no I/O, so it is done right here. */
        stockd_metrics_request(STOCKD_ROUTE_METRICS, STOCKD_R_OK);
        return send_body(c, 200, stockd_metrics_render(h->ctx->cfg, h->ctx->locks), NULL,
                         "text/plain; version=0.0.4; charset=utf-8");
    }
    job->route = d.route;
    job->kind = d.kind;
    job->product_id = d.product_id;
    job->order_id = d.order_id;
    job->event = d.event;
    job->units = d.units;
    if (d.user) {
        memcpy(job->user, d.user, d.user_len);
        job->user[d.user_len] = '\0';
    }
    if (d.order) { /* redis-stock's name of an order (contract.c) */
        memcpy(job->request_id, d.order, d.order_len);
        job->request_id[d.order_len] = '\0';
    } else if (d.key) {
        memcpy(job->request_id, d.key, d.key_len);
        job->request_id[d.key_len] = '\0';
    } else if (job->kind == STOCKD_JOB_DEDUCT) {
        /* Our own unique id: "i/<random per process>/<sequence>" ('/' never appears in
         * a client key, and at most 39 bytes). It lets a COMMIT whose reply was lost be
         * confirmed; the instance is in the order row already. */
        snprintf(job->request_id, sizeof(job->request_id), "i/%s/%llu", h->boot_id,
                 (unsigned long long)atomic_fetch_add(&h->next_seq, 1));
    }

    if (job->kind == STOCKD_JOB_DEDUCT) forwardable(h, c, job, &in, method, url);

    /* Suspend before the push: once pushed, a worker may resume at any moment. */
    job->conn = c;
    job->arrived_ns = request_arrival_ns(c);
    MHD_suspend_connection(c);
    r->queued = true;
    if (stockd_jobq_push(h->ctx->queue, job) != 0) {
        /* Answer through the same resume path a worker uses, so a response is never
         * queued on a suspended connection. */
        stockd_answer a = {.result = STOCKD_R_OVERLOADED,
                           .message = "too many requests waiting, or shutting down; "
                                      "nothing was deducted"};
        job->result = a.result;
        job->status = stockd_answer_status(a.result);
        job->body = stockd_answer_json(&a, h->ctx->cfg->instance);
        stockd_http_complete(job);
    }
    return MHD_YES;
}

/* A request's context, counted open until on_completed frees it. */
static http_req *new_req(stockd_http *h) {
    http_req *r = calloc(1, sizeof(*r));
    if (r) atomic_fetch_add(&h->open_requests, 1);
    return r;
}

/* One request line as libmicrohttpd parses it, for unescape_arg: on_uri sets it, and
 * both run on the polling thread, one request line at a time. */
typedef struct request_line {
    http_req *r;
    const char *uri, *uri_end; /* on_uri's URI, which ends at the first NUL byte */
    char *cut, cut_byte;       /* where unescape_arg last wrote a NUL, and what was there */
} request_line;
static _Thread_local request_line parsing;

/* The version that ends every request line libmicrohttpd 0.9.75 accepts ("HTTP/1.d",
 * exactly 8 bytes), with its NUL. */
static bool at_version(const char *p) {
    return memcmp(p, "HTTP/1.", 7) == 0 && p[7] >= '0' && p[7] <= '9' && p[8] == '\0';
}

/* libmicrohttpd's unescape callback, called on each query key and value as it splits
 * them (after on_uri), then on the path. It finds the query with memchr over the whole
 * URI, while on_uri reads it as a string: one NUL byte before the '?' hides the query
 * from on_uri, so a query of too many parameters was split anyway and hung as on_uri's
 * comment says. An argument found past on_uri's end is such a request (refused with 400
 * by route()), and each of its keys and values ends the query right after itself:
 * libmicrohttpd 0.9.75 has put a NUL where the '&' or '=' after it was, and goes on at
 * the byte after that NUL, so a NUL written there leaves it nothing more to split (a
 * value's first byte, taken by its key's call, is put back before the value's own). No
 * byte past the request line is read or written: the URI is followed by a NUL,
 * "HTTP/1.d" and the line's NUL, so 9 bytes after any NUL up to the URI's end are the
 * line's, and a NUL followed by "HTTP/1.d" and a NUL, which may be the URI's end, is
 * never written past. Tested by tests/service/many_params.sh, whose rows with a NUL
 * before the query would hang without this. */
static size_t unescape_arg(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls;
    (void)c;
    if (parsing.uri && s > parsing.uri_end) {
        if (parsing.r) parsing.r->nul_path = true;
        if (s == parsing.cut) *s = parsing.cut_byte;
        char *end = s + strlen(s);
        parsing.cut = NULL;
        if (!at_version(end + 1)) {
            parsing.cut = end + 1;
            parsing.cut_byte = end[1];
            end[1] = '\0';
        }
    } else if (s == parsing.uri) {
        parsing = (request_line){0}; /* the path's call comes last */
    }
    return MHD_http_unescape(s);
}

/* The request's URI as sent, before libmicrohttpd splits its query into arguments: its
 * manual says the URI callback (MHD_OPTION_URI_LOG_CALLBACK) is "called before parsing
 * the URI", and what it returns is the request's context (on_request's *ctxp).
 * libmicrohttpd 0.9.75 stores each argument in the connection's pool
 * (STOCKD_CONNECTION_MEMORY), and an argument that does not fit leaves the request with
 * no answer until the connection times out: about 85 empty ones do. A query of more
 * than STOCKD_MAX_PARAMS parameters is refused anyway, so it is cut here, before it is
 * split: libmicrohttpd then stores none of it, and route() refuses the request with
 * stockd's JSON 400, as any query past the limit, whatever its length. The cut writes
 * into the URI, which libmicrohttpd passes as const: it is the connection's own read
 * buffer, which libmicrohttpd splits in place right after this call. Both this order
 * and that buffer are tested (tests/service/many_params.sh would get no answer). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)c;
    http_req *r = new_req(cls);
    char *query = r && uri ? strchr(uri, '?') : NULL;
    parsing = (request_line){.r = r, .uri = uri, .uri_end = uri ? uri + strlen(uri) : NULL};
    if (!query) return r;
    size_t params = 1;
    for (const char *p = query + 1; *p; p++)
        params += *p == '&';
    if (params > STOCKD_MAX_PARAMS) {
        r->too_many = true;
        r->uri_bytes = strlen(uri);
        query[1] = '\0';
    }
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **ctxp) {
    stockd_http *h = cls;
    http_req *r = *ctxp;

    if (!r || !r->started) {
        /* First call: headers only. The context is on_uri's (made here if it had no
         * memory then); routing waits for the end. */
        if (!r && !(r = new_req(h))) return MHD_NO;
        r->started = true;
        r->peer = strncmp(url, "/peer/", 6) == 0;
        *ctxp = r;
        return MHD_YES;
    }
    if (r->peer)
        return stockd_peer_request(h->ctx, c, &r->peer_state, url, method, upload_data,
                                   upload_size);
    if (*upload_size) {
        /* No route takes a body: it is counted and dropped, and refused with 400 once it
         * has arrived (libmicrohttpd cannot answer before that). Past STOCKD_MAX_BODY the
         * connection is closed without an answer, so a client cannot keep one busy by
         * streaming; behind nginx a body that large never arrives (nginx answers 413). */
        r->body_bytes += *upload_size;
        *upload_size = 0;
        return r->body_bytes > STOCKD_MAX_BODY ? MHD_NO : MHD_YES;
    }
    if (r->job.done) {
        /* Resumed by a worker: the answer is ready. The response takes the body. */
        char *body = r->job.body;
        r->job.body = NULL;
        stockd_metrics_request(r->job.route, r->job.result);
        return send_body(c, r->job.status, body, NULL, NULL);
    }
    if (r->queued) return MHD_YES; /* cannot happen while suspended; be safe */
    return route(h, c, r, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **ctxp,
                         enum MHD_RequestTerminationCode toe) {
    stockd_http *h = cls;
    http_req *r = *ctxp;

    if (!r) return;
    free(r->job.body);
    free(r->job.fwd);
    stockd_peer_free(r->peer_state);
    free(r);
    *ctxp = NULL;
    atomic_fetch_sub(&h->open_requests, 1);
}

void stockd_http_complete(stockd_job *job) {
    if (job->frame) { /* an entry of a peer's frame (peer_api.c) */
        stockd_peer_entry_done(job);
        return;
    }
    /* The worker's last touch of the job: after resume the polling thread owns it. */
    job->done = true;
    MHD_resume_connection(job->conn);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    stockd_log("http", "%s", line);
}

stockd_http *stockd_http_start(stockd_ctx *ctx, char *err, size_t errlen) {
    const stockd_config *cfg = ctx->cfg;
    stockd_http *h = calloc(1, sizeof(*h));
    struct sockaddr_in sin = {0};
    unsigned char rnd[8];

    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->ctx = ctx;
    h->quiesced = MHD_INVALID_SOCKET;
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        uint64_t t = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
        memcpy(rnd, &t, sizeof(rnd));
    }
    for (size_t i = 0; i < sizeof(rnd); i++)
        sprintf(h->boot_id + 2 * i, "%02x", rnd[i]);

    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->bind, &sin.sin_addr) != 1) {
        snprintf(err, errlen, "--bind must be an IPv4 address, got '%s'", cfg->bind);
        free(h);
        return NULL;
    }
    /* No MHD_OPTION_LISTENING_ADDRESS_REUSE: it sets SO_REUSEPORT, and a second stockd
     * on the same port would then start silently and take half the connections (a
     * stale `none` instance behind a `zk` one brings oversell back). libmicrohttpd's
     * default, SO_REUSEADDR only, still restarts at once past TIME_WAIT. */
    h->daemon = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC | MHD_USE_ERROR_LOG,
        (uint16_t)cfg->port, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
        MHD_OPTION_SOCK_ADDR, &sin, MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->connection_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)STOCKD_CONNECTION_MEMORY,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_URI_LOG_CALLBACK, on_uri, h,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape_arg, NULL, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_END);
    if (!h->daemon) {
        snprintf(err, errlen, "cannot listen on %s:%u (in use, or not an address of this host)",
                 cfg->bind, cfg->port);
        free(h);
        return NULL;
    }
    return h;
}

void stockd_http_quiesce(stockd_http *h) {
    /* The listening socket comes back to us, but the polling thread may still be using
     * it (taking it out of its epoll set): libmicrohttpd's manual says to close it only
     * after MHD_stop_daemon, which stockd_http_stop does. */
    h->quiesced = MHD_quiesce_daemon(h->daemon);
}

void stockd_http_stop(stockd_http *h, unsigned ms) {
    struct timespec ts = {0, 10 * 1000 * 1000};

    if (!h) return;
    /* Every queued job has been answered by now (the workers drained the queue); give
     * the polling thread time to send those answers before the connections close. */
    for (unsigned waited = 0; atomic_load(&h->open_requests) > 0 && waited < ms; waited += 10)
        nanosleep(&ts, NULL);
    MHD_stop_daemon(h->daemon);
    if (h->quiesced != MHD_INVALID_SOCKET) close(h->quiesced);
    free(h);
}
