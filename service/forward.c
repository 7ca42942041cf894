/* forward.c: a non-owner's side of owner routing (docs/routing.md). The leader of a
 * product's slot (deduct.c's loop) calls forward__pass before each pass: when another
 * instance owns the product, it takes the slot's queue, sends it to the owner as ONE
 * frame (frame.c) and relays each entry's answer to its client verbatim; when the
 * forward fails, the jobs go back to the head of the slot and this instance serves them
 * under the lock as ever, under the same request ids (an owner that committed before
 * its answer was lost is then found by the ledger's unique key: exactly one order).
 * Once a frame may have reached the owner, its entries stay in doubt (stockd_job.in_doubt)
 * until served here: one that cannot be (its deadline, shutdown) is answered `unknown`,
 * never with an answer that says nothing was deducted (answer.c).
 *
 * Why the leader worker sends the frame itself, on easy handles of its own (one per
 * peer, kept alive), rather than handing it to a forwarding thread with a curl multi
 * handle: the leader would otherwise wait for the product's lock; waiting for the owner
 * instead keeps the batching the same (the slot fills while the frame is out, and the
 * next frame takes it all), costs no hand-over between threads per frame, and needs no
 * second queue. The price is a worker per frame in flight, as a lock wait holds one
 * today, and up to --workers keep-alive connections per peer. libmicrohttpd's polling
 * thread never waits: the clients' connections stay suspended as for any deduction.
 *
 * libcurl is loaded at run time (lock/curl_api.h), only with --route owner. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "curl_api.h"
#include "peer_api.h"
#include "worker_int.h"

/* Without --queue-deadline-ms: how long a frame's answer is waited for. */
#define FORWARD_TIMEOUT_MS 10000u
/* The longest a connection to a peer is waited for: a peer that cannot take a connection
 * in this long is treated as unreachable (nothing was sent). */
#define FORWARD_CONNECT_MS 1000u

static const struct curl_api *api;

int stockd_forward_init(char *err, size_t errlen) {
    api = lock_curl_api(err, errlen);
    return api ? 0 : -1;
}

typedef struct fwd_conn {
    char addr[STOCKD_ADDR_MAX];
    CURL *easy;
} fwd_conn;

struct forwarder {
    struct curl_slist *headers;
    fwd_conn conn[STOCKD_PEERS_MAX];
    size_t n;
    curl_api_buf r;
};

static forwarder *forwarder_of(worker_state *ws) {
    if (ws->fwd || !api) return ws->fwd;
    forwarder *f = calloc(1, sizeof(*f));
    char secret[sizeof(ws->w->ctx->cfg->peer_secret) + 40];
    if (!f) return NULL;
    snprintf(secret, sizeof(secret), "%s: %s", STOCKD_PEER_SECRET_HEADER,
             ws->w->ctx->cfg->peer_secret);
    struct curl_slist *h = api->slist_append(NULL, secret);
    if (h) h = api->slist_append(h, STOCKD_HOP_HEADER ": 1");
    if (h) h = api->slist_append(h, "Content-Type: application/json");
    if (h) h = api->slist_append(h, "Expect:"); /* no 100-continue round */
    memset(secret, 0, sizeof(secret));
    if (!h) {
        free(f);
        return NULL;
    }
    f->headers = h;
    return ws->fwd = f;
}

/* The kept-alive handle to addr, made on first use; NULL when out of memory. */
static CURL *conn_to(forwarder *f, const char *addr) {
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->conn[i].addr, addr) == 0) return f->conn[i].easy;
    if (f->n == STOCKD_PEERS_MAX) return NULL;
    CURL *e = api->easy_init();
    if (!e) return NULL;
    char url[STOCKD_ADDR_MAX + 32];
    snprintf(url, sizeof(url), "http://%s/peer/frame", addr);
    api->easy_setopt(e, CURLOPT_URL, url);
    api->easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    api->easy_setopt(e, CURLOPT_HTTPHEADER, f->headers);
    api->easy_setopt(e, CURLOPT_WRITEFUNCTION, curl_api_on_body);
    api->easy_setopt(e, CURLOPT_WRITEDATA, &f->r);
    api->easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    api->easy_setopt(e, CURLOPT_PROXY, ""); /* never an http_proxy of the environment */
    fwd_conn *c = &f->conn[f->n++];
    snprintf(c->addr, sizeof(c->addr), "%s", addr);
    c->easy = e;
    return e;
}

void forward__free(worker_state *ws) {
    forwarder *f = ws->fwd;
    if (!f) return;
    for (size_t i = 0; i < f->n; i++)
        api->easy_cleanup(f->conn[i].easy);
    api->slist_free_all(f->headers);
    free(f->r.p);
    free(f);
    ws->fwd = NULL;
}

/* What the owner has of a job's deadline, and the margin kept for a local serve after a
 * failed forward: a fifth of --queue-deadline-ms (at least 100 ms). 0 = no deadline. */
static uint64_t reserve_ms(const stockd_config *cfg) {
    uint64_t r = cfg->queue_deadline_ms / 5;
    return r < 100 ? 100 : r;
}

/* The most of a job's deadline a frame is given at the owner: two reserves (two fifths
 * of --queue-deadline-ms, 10 s of the default 25 s). An owner that answers at all answers
 * a frame within a batch or two; one silent longer is paused, cut off or dead, and
 * waiting on for it only takes the time its entries need for a serve here (with the
 * whole deadline less the reserve, a forward to a paused owner waited 22 s, past a
 * client's 20 s). An owner merely slow answers the entries it could not serve in time
 * `overloaded`, and they are served here. */
static uint64_t budget_ms(const stockd_config *cfg, uint64_t min_left) {
    uint64_t reserve = reserve_ms(cfg), budget = min_left - reserve;
    return budget < 2 * reserve ? budget : 2 * reserve;
}

static uint64_t left_ms(const stockd_config *cfg, const stockd_job *job, uint64_t now) {
    uint64_t used = (now - job->arrived_ns) / 1000000u, qd = cfg->queue_deadline_ms;
    return used < qd ? qd - used : 0;
}

/* Sends jobs[0..n-1] to owner as one frame and relays the answers. true: answered,
 * but for the *back jobs the owner answered `overloaded` (its queue full or closed: it is
 * stopping; nothing deducted there), moved to jobs[0..*back-1] for a serve here; false:
 * the forward failed, nothing answered, and each job in doubt if the frame may have
 * reached the owner. */
static bool send_frame(worker_state *ws, const char *owner, stockd_job **jobs, unsigned n,
                       uint64_t min_left, unsigned *back) {
    const stockd_config *cfg = ws->w->ctx->cfg;
    forwarder *f = forwarder_of(ws);
    CURL *e = f ? conn_to(f, owner) : NULL;
    stockd_frame_out *out = calloc(n, sizeof(*out));
    stockd_frame_answer *ans = calloc(n, sizeof(*ans));
    char *body = NULL;
    void *parsed = NULL;
    bool ok = false, reached = false, sent = false;
    /* Every entry gets the oldest one's deadline less the reserve, at most the budget:
     * they are one batch at the owner, and after a failed forward every one still has
     * time for a local serve. The answer is waited for half a reserve past that, so the
     * owner cannot commit an entry after its forwarder gave up on it. */
    uint64_t qd = cfg->queue_deadline_ms, reserve = reserve_ms(cfg);
    uint64_t budget = qd ? budget_ms(cfg, min_left) : 0;
    unsigned deadline = (unsigned)budget;
    long timeout = qd ? (long)(budget + reserve / 2) : (long)FORWARD_TIMEOUT_MS;
    long status = 0;

    if (!e || !out || !ans) goto out;
    for (unsigned i = 0; i < n; i++)
        out[i] = (stockd_frame_out){jobs[i]->fwd, jobs[i]->request_id, deadline};
    if (!(body = stockd_frame_build(stockd_route_self(), stockd_route_view(), out, n))) goto out;
    f->r.n = 0;
    api->easy_setopt(e, CURLOPT_POSTFIELDS, body);
    api->easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    api->easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout);
    api->easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(timeout < FORWARD_CONNECT_MS ? timeout : FORWARD_CONNECT_MS));
    stockd_route_count(STOCKD_RC_FRAMES, 1);
    stockd_route_count(STOCKD_RC_FORWARDED, n);
    CURLcode cc = api->easy_perform(e);
    api->easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    reached = cc == CURLE_OK;
    /* Nothing was sent when no connection was made; the owner's peer API answers other
     * than 200 only before it queues an entry. Anything else may have reached it. */
    sent =
        reached ? status == 200 : cc != CURLE_COULDNT_CONNECT && cc != CURLE_COULDNT_RESOLVE_HOST;
    if (cc != CURLE_OK)
        answer__log_failure(ws, "forward", api->easy_strerror(cc));
    else if (status != 200)
        answer__log_failure(ws, "forward", f->r.n ? f->r.p : "the owner refused the frame");
    if (cc == CURLE_OK && status == 200 && f->r.n &&
        (parsed = stockd_frame_answers_parse(f->r.p, f->r.n, ans, n)) != NULL) {
        *back = 0;
        for (unsigned i = 0; i < n; i++) {
            if (ans[i].result == STOCKD_R_OVERLOADED) {
                jobs[(*back)++] = jobs[i];
                continue;
            }
            char *copy = strdup(ans[i].body);
            answer__complete(ws, jobs[i], copy ? ans[i].status : 500, ans[i].result, copy);
        }
        ok = true;
    }
out:
    for (unsigned i = 0; !ok && sent && i < n; i++)
        jobs[i]->in_doubt = true;
    /* A peer that answers at all, even badly, is reachable; its circuit is for peers
     * that do not answer (refused, reset, timed out). */
    if (e) stockd_route_breaker_note(owner, reached);
    stockd_frame_answers_free(parsed);
    free(body);
    free(out);
    free(ans);
    return ok;
}

bool forward__pass(worker_state *ws, leader *l) {
    stockd_ctx *ctx = ws->w->ctx;
    stockd_combiner *c = ws->comb;
    char owner[STOCKD_ADDR_MAX];
    int32_t pid = l->lock.product_id;
    unsigned seg = l->lock.segment;

    if (!api || l->held || stockd_route_owner(pid, owner, sizeof(owner)) == STOCKD_OWNER_SELF)
        return false;
    unsigned n = stockd_combiner_take(c, pid, seg, ws->jobs, ctx->cfg->batch_max, UINT64_MAX);
    n = answer__drop_late(ws, ws->jobs, n);
    if (!n) return true;
    /* Served here: what came forwarded already (at most one hop), what is in doubt from
     * a frame sent before (served under its id, which finds the owner's order if there is
     * one), and what has too little of its deadline left for a forward and a local serve
     * after it. The rest go to the owner, kept in front. */
    uint64_t now = stockd_now_ns(), min_left = UINT64_MAX, reserve = reserve_ms(ctx->cfg);
    unsigned nf = 0;
    stockd_job *local[STOCKD_FRAME_MAX];
    unsigned nl = 0;
    for (unsigned i = 0; i < n; i++) {
        stockd_job *j = ws->jobs[i];
        uint64_t left = ctx->cfg->queue_deadline_ms ? left_ms(ctx->cfg, j, now) : UINT64_MAX;
        if (j->hop || !j->fwd || j->in_doubt || left < reserve + 50) {
            local[nl++] = j;
            continue;
        }
        if (left < min_left) min_left = left;
        ws->jobs[nf++] = j;
    }
    if (nf && !stockd_route_breaker_allow(owner)) {
        for (unsigned i = 0; i < nf; i++)
            local[nl++] = ws->jobs[i];
        stockd_route_count(STOCKD_RC_LOCAL_FALLBACKS, nf);
        nf = 0;
    }
    unsigned back = nf;
    if (nf && !send_frame(ws, owner, ws->jobs, nf, min_left, &back)) nf = 0;
    if (back) {
        /* Refused, unanswered or answered badly (back = nf; in doubt if it may have
         * reached the owner), or answered `overloaded` (nothing deducted there): served
         * here, under the same ids. */
        for (unsigned i = 0; i < back; i++)
            local[nl++] = ws->jobs[i];
        stockd_route_count(STOCKD_RC_LOCAL_FALLBACKS, back);
    }
    if (nl) stockd_combiner_putback(c, pid, seg, local, nl);
    /* Those kept here are served by this pass (batch.c), before any newcomer is sent. */
    return nl == 0;
}
