/* peer_api.c: the endpoints instances call on each other for owner routing
 * (docs/routing.md). One today: POST /peer/frame, a non-owner's queued deductions of a
 * product (frame.c's format). Each entry is routed by stockd_route_request, exactly as
 * a direct request, becomes a job marked hop (served here, never forwarded again) and
 * joins this instance's own combiner batch; the connection stays suspended until every
 * entry has its answer, and then all are sent back together, in entry order.
 *
 * Nothing here is reachable without the peers' shared secret (compared in constant
 * time); nginx does not proxy /peer/ either. A malformed frame is refused whole (400)
 * before any entry becomes a job, so it changes nothing. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "curl_api.h"
#include "peer_api.h"

/* The largest frame body taken: STOCKD_FRAME_MAX entries of a few hundred bytes. */
#define PEER_BODY_MAX (2u * 1024 * 1024)

typedef struct peer_call {
    stockd_ctx *ctx;
    struct MHD_Connection *conn;
    curl_api_buf body; /* the frame as it arrives */
    bool too_big;
    bool routed; /* the entries are jobs: wait for done */
    stockd_frame frame;
    stockd_job *jobs;             /* one per entry; kind DEDUCT only where queued */
    bool *queued;                 /* entry i became a job */
    stockd_frame_answer *answers; /* entries answered at once */
    char **bodies;                /* ... and their bodies */
    atomic_uint remaining;        /* jobs not yet answered, plus one while pushing */
    atomic_bool done;
} peer_call;

static bool secret_ok(const char *want, const char *got, size_t glen) {
    size_t wlen = strlen(want);
    unsigned char d = (unsigned char)(wlen == 0 || wlen != glen);
    /* Every byte of what came is looked at whatever matched before: the time taken
     * depends on its length only, never on how much of the secret it got right. */
    for (size_t i = 0; i < glen; i++)
        d |= (unsigned char)(got[i] ^ want[wlen ? i % wlen : 0]);
    return d == 0;
}

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, char *body) {
    static const char oom[] = "{\"result\":\"internal_error\",\"message\":\"out of memory\"}";
    struct MHD_Response *resp =
        body
            ? MHD_create_response_from_buffer_with_free_callback(strlen(body), body, free)
            : MHD_create_response_from_buffer(sizeof(oom) - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result rc = MHD_queue_response(c, body ? status : 500, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result refuse(peer_call *p, struct MHD_Connection *c, stockd_result r,
                              const char *message) {
    stockd_answer a = {.result = r, .message = message};
    return answer(c, stockd_answer_status(r), stockd_answer_json(&a, p->ctx->cfg->instance));
}

/* Entry i answered at once with a, no job made. */
static void answer_now(peer_call *p, size_t i, const stockd_answer *a) {
    p->answers[i] = (stockd_frame_answer){stockd_answer_status(a->result), a->result, NULL};
    p->bodies[i] = stockd_answer_json(a, p->ctx->cfg->instance);
    p->answers[i].body = p->bodies[i];
}

/* Routes entry i: its job (not yet pushed) or its answer. */
static void route_entry(peer_call *p, size_t i, uint64_t now) {
    const stockd_config *cfg = p->ctx->cfg;
    stockd_frame_entry *e = &p->frame.e[i];
    stockd_routed d;
    stockd_answer a = {0};
    char owner[STOCKD_ADDR_MAX];

    stockd_route_request(&e->in, &d);
    if (d.error != STOCKD_R_OK) {
        a = (stockd_answer){.result = d.error, .message = d.message};
        return answer_now(p, i, &a);
    }
    if (d.route != STOCKD_ROUTE_REDUCE) {
        a = (stockd_answer){.result = STOCKD_R_BAD_REQUEST,
                            .message = "only deductions cross between instances"};
        return answer_now(p, i, &a);
    }
    /* The id the forwarder serves it under, should its forward fail: the client's key
     * when there is one (so the two must agree), else the forwarder's own. */
    if (d.key &&
        (strlen(e->request_id) != d.key_len || memcmp(d.key, e->request_id, d.key_len) != 0)) {
        a = (stockd_answer){.result = STOCKD_R_BAD_REQUEST,
                            .message = "the entry's request_id is not its Idempotency-Key"};
        return answer_now(p, i, &a);
    }
    stockd_job *job = &p->jobs[i];
    job->kind = STOCKD_JOB_DEDUCT;
    job->route = STOCKD_ROUTE_REDUCE;
    job->product_id = d.product_id;
    snprintf(job->request_id, sizeof(job->request_id), "%s", e->request_id);
    job->hop = true;
    job->frame = p;
    /* The deadline the forwarder gave it: as if it had arrived that much earlier here. */
    uint64_t qd = (uint64_t)cfg->queue_deadline_ms;
    uint64_t used_ms = e->deadline_ms && e->deadline_ms < qd ? qd - e->deadline_ms : 0;
    job->arrived_ns = now > used_ms * 1000000u ? now - used_ms * 1000000u : 0;
    p->queued[i] = true;
    if (stockd_route_owner(d.product_id, owner, sizeof(owner)) != STOCKD_OWNER_SELF)
        stockd_route_count(STOCKD_RC_REFUSED_HOPS, 1);
}

/* A whole, authenticated frame: parsed (or refused), its entries routed, the jobs
 * queued behind the connection's suspension. */
static enum MHD_Result serve_frame(peer_call *p, struct MHD_Connection *c) {
    const char *why = stockd_frame_parse(p->body.p, p->body.n, &p->frame);
    size_t n = p->frame.n, jobs = 0;
    if (why) return refuse(p, c, STOCKD_R_BAD_REQUEST, why);
    p->jobs = calloc(n, sizeof(*p->jobs));
    p->queued = calloc(n, sizeof(*p->queued));
    p->answers = calloc(n, sizeof(*p->answers));
    p->bodies = calloc(n, sizeof(*p->bodies));
    if (!p->jobs || !p->queued || !p->answers || !p->bodies)
        return refuse(p, c, STOCKD_R_INTERNAL, "out of memory; nothing was deducted");
    uint64_t now = stockd_now_ns();
    for (size_t i = 0; i < n; i++) {
        route_entry(p, i, now);
        jobs += p->queued[i];
    }
    stockd_route_count(STOCKD_RC_FRAME_DEDUCTIONS, jobs);
    p->routed = true;
    p->conn = c;
    atomic_store(&p->remaining, (unsigned)jobs + 1);
    /* Suspend before the pushes, as http.c does: a worker may answer at once. */
    MHD_suspend_connection(c);
    for (size_t i = 0; i < n; i++) {
        if (!p->queued[i]) continue;
        if (stockd_jobq_push(p->ctx->queue, &p->jobs[i]) != 0) {
            stockd_answer a = {.result = STOCKD_R_OVERLOADED,
                               .id = p->jobs[i].product_id,
                               .message = "too many requests waiting, or shutting down; "
                                          "nothing was deducted"};
            p->jobs[i].status = stockd_answer_status(a.result);
            p->jobs[i].result = a.result;
            p->jobs[i].body = stockd_answer_json(&a, p->ctx->cfg->instance);
            stockd_peer_entry_done(&p->jobs[i]);
        }
    }
    stockd_peer_entry_done(&(stockd_job){.frame = p}); /* the pusher's own share */
    return MHD_YES;
}

/* Every entry answered: the answers, in entry order. */
static enum MHD_Result send_answers(peer_call *p, struct MHD_Connection *c) {
    for (size_t i = 0; i < p->frame.n; i++)
        if (p->queued[i])
            p->answers[i] =
                (stockd_frame_answer){p->jobs[i].status, p->jobs[i].result, p->jobs[i].body};
    return answer(c, 200, stockd_frame_answers(p->answers, p->frame.n));
}

enum MHD_Result stockd_peer_request(stockd_ctx *ctx, struct MHD_Connection *c, void **state,
                                    const char *url, const char *method, const char *upload,
                                    size_t *upload_size) {
    peer_call *p = *state;
    const char *got = NULL;
    size_t glen = 0;

    if (!p) {
        if (!(p = calloc(1, sizeof(*p)))) return MHD_NO;
        p->ctx = ctx;
        *state = p;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (p->too_big || p->body.n + n > PEER_BODY_MAX) {
            p->too_big = true;
            return MHD_YES;
        }
        return curl_api_buf_append(&p->body, upload, n) == 0 ? MHD_YES : MHD_NO;
    }
    if (p->routed) return atomic_load(&p->done) ? send_answers(p, c) : MHD_YES;
    /* The secret first: nothing about the peer API is told to a caller without it. */
    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, STOCKD_PEER_SECRET_HEADER,
                                      strlen(STOCKD_PEER_SECRET_HEADER), &got, &glen) != MHD_YES ||
        !secret_ok(ctx->cfg->peer_secret, got, glen))
        return refuse(p, c, STOCKD_R_FORBIDDEN,
                      "the peer API needs the peers' shared secret; nothing was done");
    if (strcmp(url, "/peer/frame") != 0)
        return refuse(p, c, STOCKD_R_NO_ROUTE, "no such peer route; POST /peer/frame");
    if (strcmp(method, "POST") != 0)
        return refuse(p, c, STOCKD_R_METHOD_NOT_ALLOWED, "use POST for /peer/frame");
    if (p->too_big)
        return refuse(p, c, STOCKD_R_BAD_REQUEST, "the frame is too large; nothing was deducted");
    return serve_frame(p, c);
}

void stockd_peer_entry_done(stockd_job *job) {
    peer_call *p = job->frame;
    if (atomic_fetch_sub(&p->remaining, 1) != 1) return;
    atomic_store(&p->done, true);
    MHD_resume_connection(p->conn);
}

void stockd_peer_free(void *state) {
    peer_call *p = state;
    if (!p) return;
    for (size_t i = 0; p->jobs && i < p->frame.n; i++)
        free(p->jobs[i].body);
    for (size_t i = 0; p->bodies && i < p->frame.n; i++)
        free(p->bodies[i]);
    free(p->jobs);
    free(p->queued);
    free(p->answers);
    free(p->bodies);
    stockd_frame_free(&p->frame);
    free(p->body.p);
    free(p);
}
