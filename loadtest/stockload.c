/* stockload: the project's load driver for stockd.
 *
 * It plays JMeter's thread group (T virtual threads, each sending its next request when
 * the previous one was answered, L times) or keeps C requests in flight for S seconds,
 * counts every answer by what it means (answer.h), records latencies in a log-bucket
 * histogram (lathist.h) and, given the database, reconciles the "deducted" answers with
 * the orders rows (reconcile.h). With --keys-out it writes one line per finished request
 * (its Idempotency-Key, status, outcome, order id, replay flag and libcurl code, see
 * answer_key_line), so a fault test can tell which keys got no usable answer and retry
 * exactly those. The usage text is in loadopts.c.
 *
 * One thread drives everything through libcurl's multi interface: each virtual thread
 * is one easy handle that is re-added when its answer is in, and the multi handle's
 * connection cache keeps the connections alive between requests. One thread is plenty
 * for loopback rates against a service that does a MySQL transaction per request, and
 * it makes the counters plain variables. */
#include "answer.h"
#include "lathist.h"
#include "loadopts.h"
#include "reconcile.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <mysql.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define EXIT_MISMATCH 1
#define EXIT_USAGE    2
#define EXIT_NORUN    3

#define BODY_INITIAL       512
#define BODY_MAX           65536 /* stockd's answers are a few hundred bytes; the rest is dropped */
#define POLL_MS            100   /* longest sleep between checks of the stop flag and the clock */
#define PROGRESS_NS        200000000ULL
#define CONNECT_TIMEOUT_MS 10000L
#define FDS_SPARE          64 /* descriptors besides one per connection: stdio, DNS, MySQL, ... */

/* Set by SIGINT / SIGTERM: start no new request, wait for those under way, report. */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

typedef struct run run;

/* One virtual thread: an easy handle and the answer it is reading. */
typedef struct slot {
    run *run;
    CURL *easy;
    struct curl_slist *headers;   /* the Idempotency-Key header of the request under way */
    char key[ANSWER_KEY_MAX + 1]; /* that key, for the keys file ("" without --idempotency) */
    char *body;
    size_t len, cap;
    uint64_t started_ns;
    uint64_t left; /* loops mode: requests this thread has still to send */
    char *url;     /* with --products: this request's URL (the template with its id) */
} slot;

struct run {
    const loadopts *o;
    CURLM *multi;
    slot *slots;
    unsigned nslots;
    unsigned in_flight;
    uint64_t t0_ns, deadline_ns, end_ns;
    uint64_t done; /* requests answered or failed */
    uint64_t counts[ANSWER_KINDS];
    uint64_t curl_errors[CURL_LAST];
    uint64_t replayed;
    lathist all; /* every request that got an HTTP answer */
    lathist by_kind[ANSWER_KINDS];
    uint64_t *order_ids; /* of the deducted answers, in completion order */
    size_t n_ids, cap_ids;
    bool failed; /* a request could not be started or the multi handle broke */
    char failure[256];
    bool interrupted;
    bool show_progress;
    uint64_t next_progress_ns;
    char key_prefix[48];
    uint64_t key_seq;
    FILE *keys;               /* --keys-out, open during the run */
    char keys_path[PATH_MAX]; /* its absolute path, for the JSON output */
    uint64_t keys_written;    /* lines written to it */
    uint64_t rng;             /* --products, --users: xorshift64 state, never 0 */
};

/* ------------------------------------------------------------------ --products */

/* Writes the URL template o->url with "{id}" replaced by id into buf (cap bytes);
 * the caller sized buf as strlen(template) + 12, which any int32 id fits. */
static void url_for_product(const char *tmpl, int32_t id, char *buf, size_t cap) {
    const char *at = strstr(tmpl, "{id}");
    snprintf(buf, cap, "%.*s%d%s", (int)(at - tmpl), tmpl, (int)id, at + 4);
}

/* The next number of the run's xorshift64 (--products, --users). */
static uint64_t next_random(run *r) {
    uint64_t x = r->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    r->rng = x;
    return x;
}

/* A product drawn uniformly from the --products range (the modulo bias is below 1e-9
 * for any range of int32 ids). */
static int32_t pick_product(run *r) {
    uint64_t span = (uint64_t)(r->o->products_hi - r->o->products_lo) + 1;
    return r->o->products_lo + (int32_t)(next_random(r) % span);
}

/* ------------------------------------------------------------------ requests */

/* libcurl's write callback: keeps up to BODY_MAX bytes of the answer. Always claims
 * the whole chunk, so an oversized body is cut rather than turned into an error. */
static size_t on_body(char *data, size_t size, size_t nmemb, void *arg) {
    slot *s = arg;
    size_t n = size * nmemb;
    if (s->len + n > s->cap && s->cap < BODY_MAX) {
        size_t cap = s->cap;
        while (cap < s->len + n && cap < BODY_MAX)
            cap *= 2;
        if (cap > BODY_MAX) cap = BODY_MAX;
        char *grown = realloc(s->body, cap);
        if (grown) {
            s->body = grown;
            s->cap = cap;
        }
    }
    size_t room = s->cap - s->len, take = n < room ? n : room;
    memcpy(s->body + s->len, data, take);
    s->len += take;
    return n;
}

static void fail_run(run *r, const char *what) {
    if (!r->failed) snprintf(r->failure, sizeof(r->failure), "%s", what);
    r->failed = true;
}

static int slot_setup(run *r, slot *s) {
    const loadopts *o = r->o;
    s->run = r;
    s->cap = BODY_INITIAL;
    s->body = malloc(s->cap);
    s->easy = curl_easy_init();
    if (!s->body || !s->easy) return -1;

    CURL *e = s->easy;
    long connect_ms = o->timeout_ms < CONNECT_TIMEOUT_MS ? o->timeout_ms : CONNECT_TIMEOUT_MS;
    int bad = 0;
    bad |= curl_easy_setopt(e, CURLOPT_URL, o->url);
    bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    /* Never go through a proxy from the environment: the target is the service itself. */
    bad |= curl_easy_setopt(e, CURLOPT_PROXY, "");
    bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    bad |= curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, o->timeout_ms);
    bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    bad |= curl_easy_setopt(e, CURLOPT_USERAGENT, "stockload/1");
    bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, s);
    bad |= curl_easy_setopt(e, CURLOPT_PRIVATE, s);
    if (o->post) {
        bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
        bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, 0L);
    }
    if (o->mode == LOADOPTS_LOOPS) s->left = o->loops;
    if (o->products_lo) {
        s->url = malloc(strlen(o->url) + 12);
        if (!s->url) return -1;
    }
    return bad ? -1 : 0;
}

static void slot_release(slot *s) {
    if (s->easy) curl_easy_cleanup(s->easy);
    curl_slist_free_all(s->headers);
    free(s->body);
    free(s->url);
}

static int slot_start(run *r, slot *s) {
    if (r->o->idempotency || r->o->users) {
        /* The key is unique across runs (wall clock and pid in the prefix) and within
         * one (the sequence number), and fits the contract's 64 [A-Za-z0-9_-]. It stays
         * in the slot until the answer is in, for the keys file. */
        char hdr[128];
        struct curl_slist *h = NULL, *more;
        if (r->o->idempotency) {
            snprintf(s->key, sizeof(s->key), "%s-%" PRIu64, r->key_prefix, ++r->key_seq);
            snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s", s->key);
            if (!(h = curl_slist_append(NULL, hdr))) return -1;
        }
        if (r->o->users) {
            snprintf(hdr, sizeof(hdr), "X-User: u%" PRIu64, 1 + next_random(r) % r->o->users);
            if (!(more = curl_slist_append(h, hdr))) {
                curl_slist_free_all(h);
                return -1;
            }
            h = more;
        }
        curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, h);
        curl_slist_free_all(s->headers);
        s->headers = h;
    }
    if (s->url) {
        url_for_product(r->o->url, pick_product(r), s->url, strlen(r->o->url) + 12);
        if (curl_easy_setopt(s->easy, CURLOPT_URL, s->url) != CURLE_OK) return -1;
    }
    s->len = 0;
    s->started_ns = now_ns();
    if (curl_multi_add_handle(r->multi, s->easy) != CURLM_OK) return -1;
    r->in_flight++;
    if (r->o->mode == LOADOPTS_LOOPS) s->left--;
    return 0;
}

/* Whether this virtual thread sends another request now. */
static bool slot_wants_more(run *r, slot *s, uint64_t now) {
    if (stop_requested || r->failed) return false;
    if (r->o->mode == LOADOPTS_LOOPS) return s->left > 0;
    return now < r->deadline_ns;
}

static void push_order_id(run *r, uint64_t id) {
    if (r->n_ids == r->cap_ids) {
        size_t cap = r->cap_ids ? r->cap_ids * 2 : 1024;
        uint64_t *grown = realloc(r->order_ids, cap * sizeof(*grown));
        if (!grown) {
            fail_run(r, "out of memory for order ids");
            return;
        }
        r->order_ids = grown;
        r->cap_ids = cap;
    }
    r->order_ids[r->n_ids++] = id;
}

/* Appends the request's line to the keys file. A line that cannot be written fails the
 * run: a keys file with holes would hide lost answers from the fault tests. */
static void write_key_line(run *r, const slot *s, long status, answer_kind kind,
                           const answer_info *info, CURLcode res) {
    char line[ANSWER_KEY_LINE_MAX];
    int n = answer_key_line(line, sizeof(line), s->key, status, kind, info, (int)res);
    if (n < 0) {
        fail_run(r, "a request's keys-file line could not be formatted");
        return;
    }
    if (fwrite(line, 1, (size_t)n, r->keys) != (size_t)n) {
        fail_run(r, "could not write the keys file");
        return;
    }
    r->keys_written++;
}

static void on_done(run *r, CURL *easy, CURLcode res) {
    slot *s = NULL;
    uint64_t now = now_ns();
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&s);
    curl_multi_remove_handle(r->multi, easy);
    r->in_flight--;
    r->done++;

    answer_kind kind;
    answer_info info = {0};
    long status = 0;
    if (res != CURLE_OK) {
        kind = ANSWER_TRANSPORT;
        if ((unsigned)res < CURL_LAST) r->curl_errors[res]++;
    } else {
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        kind = answer_classify(status, s->body, s->len, &info);
        uint64_t us = (now - s->started_ns) / 1000;
        lathist_record(&r->all, us);
        lathist_record(&r->by_kind[kind], us);
    }
    r->counts[kind]++;
    if (kind == ANSWER_DEDUCTED) {
        if (!info.keyed) push_order_id(r, info.order_id);
        if (info.replayed) r->replayed++;
    }
    if (r->keys) write_key_line(r, s, status, kind, &info, res);

    if (slot_wants_more(r, s, now) && slot_start(r, s) != 0)
        fail_run(r, "could not start a request (out of memory?)");
}

/* ------------------------------------------------------------------ progress */

static uint64_t planned_requests(const loadopts *o) {
    return o->mode == LOADOPTS_LOOPS ? (uint64_t)o->concurrency * o->loops : 0;
}

static void progress_draw(run *r, uint64_t now) {
    double elapsed = (double)(now - r->t0_ns) / 1e9;
    double frac;
    if (r->o->mode == LOADOPTS_LOOPS)
        frac = (double)r->done / (double)planned_requests(r->o);
    else
        frac = elapsed / r->o->duration_s;
    if (frac > 1) frac = 1;

    char bar[31];
    int width = (int)sizeof(bar) - 1, fill = (int)(frac * width);
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';

    uint64_t errors = r->done - r->counts[ANSWER_DEDUCTED] - r->counts[ANSWER_SOLD_OUT];
    fprintf(stderr, "\r[%s] %5.1f%%  %" PRIu64 " done  %.0f req/s  %" PRIu64 " other\033[K", bar,
            frac * 100, r->done, elapsed > 0 ? (double)r->done / elapsed : 0.0, errors);
    fflush(stderr);
}

static void progress_tick(run *r) {
    if (!r->show_progress) return;
    uint64_t now = now_ns();
    if (now < r->next_progress_ns) return;
    r->next_progress_ns = now + PROGRESS_NS;
    progress_draw(r, now);
}

static void progress_clear(run *r) {
    if (!r->show_progress) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
}

/* ------------------------------------------------------------------ the run */

static void drive(run *r) {
    r->t0_ns = now_ns();
    r->deadline_ns = r->t0_ns + (uint64_t)(r->o->duration_s * 1e9);
    for (unsigned i = 0; i < r->nslots; i++) {
        if (!slot_wants_more(r, &r->slots[i], r->t0_ns)) continue;
        if (slot_start(r, &r->slots[i]) != 0) fail_run(r, "could not start a request");
    }

    while (r->in_flight > 0) {
        int running;
        CURLMcode mc = curl_multi_perform(r->multi, &running);
        if (mc != CURLM_OK) {
            fail_run(r, curl_multi_strerror(mc));
            break;
        }
        CURLMsg *m;
        int queued;
        while ((m = curl_multi_info_read(r->multi, &queued))) {
            /* m is invalid once its handle is removed: copy what on_done needs. */
            if (m->msg == CURLMSG_DONE) on_done(r, m->easy_handle, m->data.result);
        }
        if (stop_requested) r->interrupted = true;
        progress_tick(r);
        if (r->in_flight == 0) break;
        mc = curl_multi_poll(r->multi, NULL, 0, POLL_MS, NULL);
        if (mc != CURLM_OK) {
            fail_run(r, curl_multi_strerror(mc));
            break;
        }
    }
    r->end_ns = now_ns();
    progress_clear(r);
}

/* Makes sure one descriptor per connection is available, raising the soft limit up to
 * the hard one if needed. */
static int ensure_fds(unsigned connections, char *err, size_t errlen) {
    struct rlimit rl;
    rlim_t need = (rlim_t)connections + FDS_SPARE;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0; /* cannot tell: try anyway */
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
            snprintf(err, errlen, "%u connections need %llu file descriptors, the limit is %llu",
                     connections, (unsigned long long)need, (unsigned long long)rl.rlim_max);
            return -1;
        }
        rl.rlim_cur = need;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            snprintf(err, errlen, "cannot raise the file descriptor limit to %llu",
                     (unsigned long long)need);
            return -1;
        }
    }
    return 0;
}

static int run_init(run *r, const loadopts *o, char *err, size_t errlen) {
    r->o = o;
    r->nslots = o->concurrency;
    lathist_init(&r->all);
    for (int k = 0; k < ANSWER_KINDS; k++)
        lathist_init(&r->by_kind[k]);

    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    snprintf(r->key_prefix, sizeof(r->key_prefix), "sl%" PRIx64 "-%x",
             (uint64_t)((uint64_t)wall.tv_sec * 1000000000U + (uint64_t)wall.tv_nsec),
             (unsigned)getpid());
    r->rng = ((uint64_t)wall.tv_nsec << 20) ^ (uint64_t)wall.tv_sec ^ (uint64_t)getpid();
    if (r->rng == 0) r->rng = 0x9e3779b97f4a7c15ULL;

    r->multi = curl_multi_init();
    r->slots = calloc(r->nslots, sizeof(*r->slots));
    if (!r->multi || !r->slots) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* At most one connection per virtual thread, all kept alive between requests, and
     * no multiplexing: each request waits for its own connection like a JMeter thread. */
    curl_multi_setopt(r->multi, CURLMOPT_MAXCONNECTS, (long)r->nslots);
    curl_multi_setopt(r->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)r->nslots);
    curl_multi_setopt(r->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
    for (unsigned i = 0; i < r->nslots; i++) {
        if (slot_setup(r, &r->slots[i]) != 0) {
            snprintf(err, errlen, "could not set up request %u (out of memory?)", i);
            return -1;
        }
    }
    return 0;
}

static void run_release(run *r) {
    if (r->slots) {
        for (unsigned i = 0; i < r->nslots; i++) {
            if (r->slots[i].easy && r->multi) curl_multi_remove_handle(r->multi, r->slots[i].easy);
            slot_release(&r->slots[i]);
        }
    }
    free(r->slots);
    if (r->multi) curl_multi_cleanup(r->multi);
    free(r->order_ids);
    if (r->keys) fclose(r->keys);
}

/* Opens --keys-out for writing (truncated) and remembers its absolute path. */
static int keys_open(run *r, const char *path, char *err, size_t errlen) {
    r->keys = fopen(path, "w");
    if (!r->keys || !realpath(path, r->keys_path)) {
        snprintf(err, errlen, "cannot write --keys-out %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Closes the keys file; a failed flush or close loses lines, so it fails the run. */
static void keys_close(run *r) {
    if (!r->keys) return;
    bool bad = ferror(r->keys) != 0;
    bad |= fclose(r->keys) != 0;
    r->keys = NULL;
    if (bad) fail_run(r, "could not write the keys file");
}

/* ------------------------------------------------------------------ output */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double wall_s(const run *r) {
    return (double)(r->end_ns - r->t0_ns) / 1e9;
}

static double throughput(const run *r) {
    double s = wall_s(r);
    return s > 0 ? (double)r->done / s : 0;
}

static uint64_t ambiguous_answers(const run *r) {
    uint64_t n = 0;
    for (int k = 0; k < ANSWER_KINDS; k++)
        if (answer_kind_ambiguous((answer_kind)k)) n += r->counts[k];
    return n;
}

static uint64_t total_503(const run *r) {
    return r->counts[ANSWER_LOCK_TIMEOUT] + r->counts[ANSWER_LOCK_LOST] +
           r->counts[ANSWER_UNAVAILABLE] + r->counts[ANSWER_OVERLOADED] +
           r->counts[ANSWER_OTHER_503];
}

/* The outcome of the reconciliation step, for both output formats. */
typedef struct verdict {
    bool asked;  /* --mysql was given */
    bool failed; /* the rows could not be read; error says why */
    char error[512];
    reconcile_report report;
} verdict;

static cJSON *latency_json(const lathist *h) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)h->total);
    cJSON_AddNumberToObject(o, "min", (double)h->min_us / 1000.0);
    cJSON_AddNumberToObject(o, "mean", lathist_mean(h) / 1000.0);
    cJSON_AddNumberToObject(o, "p50", lathist_percentile(h, 50) / 1000.0);
    cJSON_AddNumberToObject(o, "p90", lathist_percentile(h, 90) / 1000.0);
    cJSON_AddNumberToObject(o, "p99", lathist_percentile(h, 99) / 1000.0);
    cJSON_AddNumberToObject(o, "max", (double)h->max_us / 1000.0);
    return o;
}

static cJSON *u64_array(const uint64_t *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

static int print_json(const run *r, const verdict *v) {
    const loadopts *o = r->o;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "mode", o->mode == LOADOPTS_LOOPS ? "loops" : "duration");
    cJSON_AddStringToObject(root, "url", o->url);
    if (o->products_lo) {
        cJSON *pr = cJSON_AddObjectToObject(root, "products");
        cJSON_AddNumberToObject(pr, "from", o->products_lo);
        cJSON_AddNumberToObject(pr, "to", o->products_hi);
    }
    if (o->users) cJSON_AddNumberToObject(root, "users", o->users);
    cJSON_AddStringToObject(root, "method", o->post ? "POST" : "GET");
    cJSON_AddBoolToObject(root, "idempotency", o->idempotency);
    if (o->mode == LOADOPTS_LOOPS) {
        cJSON_AddNumberToObject(root, "threads", o->concurrency);
        cJSON_AddNumberToObject(root, "loops", (double)o->loops);
    } else {
        cJSON_AddNumberToObject(root, "concurrency", o->concurrency);
        cJSON_AddNumberToObject(root, "duration_requested_s", o->duration_s);
    }
    cJSON_AddNumberToObject(root, "timeout_ms", (double)o->timeout_ms);
    cJSON_AddNumberToObject(root, "requests", (double)r->done);
    cJSON_AddNumberToObject(root, "duration_s", wall_s(r));
    cJSON_AddNumberToObject(root, "throughput_rps", throughput(r));
    cJSON_AddBoolToObject(root, "interrupted", r->interrupted);
    if (r->failed) cJSON_AddStringToObject(root, "failure", r->failure);

    cJSON *counts = cJSON_AddObjectToObject(root, "counts");
    for (int k = 0; k < ANSWER_KINDS; k++)
        cJSON_AddNumberToObject(counts, answer_kind_name((answer_kind)k), (double)r->counts[k]);
    cJSON_AddNumberToObject(counts, "total_503", (double)total_503(r));
    cJSON_AddNumberToObject(counts, "total_5xx",
                            (double)(total_503(r) + r->counts[ANSWER_OTHER_5XX]));
    cJSON_AddNumberToObject(root, "replayed", (double)r->replayed);

    cJSON *terr = cJSON_AddObjectToObject(root, "transport_errors");
    for (int c = 0; c < CURL_LAST; c++)
        if (r->curl_errors[c])
            cJSON_AddNumberToObject(terr, curl_easy_strerror((CURLcode)c),
                                    (double)r->curl_errors[c]);

    cJSON_AddItemToObject(root, "latency_ms", latency_json(&r->all));
    cJSON *by = cJSON_AddObjectToObject(root, "latency_ms_by_outcome");
    for (int k = 0; k < ANSWER_KINDS; k++)
        if (r->by_kind[k].total)
            cJSON_AddItemToObject(by, answer_kind_name((answer_kind)k),
                                  latency_json(&r->by_kind[k]));

    cJSON_AddNumberToObject(root, "order_id_count", (double)r->n_ids);
    cJSON_AddItemToObject(root, "order_ids", u64_array(r->order_ids, r->n_ids));
    if (o->keys_out) {
        cJSON_AddStringToObject(root, "keys_out", r->keys_path);
        cJSON_AddNumberToObject(root, "keys_written", (double)r->keys_written);
    }

    if (v->asked) {
        cJSON *rec = cJSON_AddObjectToObject(root, "reconciliation");
        cJSON_AddNumberToObject(rec, "product", o->product);
        if (v->failed) {
            cJSON_AddStringToObject(rec, "verdict", "error");
            cJSON_AddStringToObject(rec, "error", v->error);
        } else {
            const reconcile_report *p = &v->report;
            cJSON_AddStringToObject(rec, "verdict", p->ok ? "ok" : "mismatch");
            cJSON_AddNumberToObject(rec, "answers", (double)p->answers);
            cJSON_AddNumberToObject(rec, "rows", (double)p->rows);
            cJSON_AddNumberToObject(rec, "missing_rows", (double)p->missing_rows);
            cJSON_AddNumberToObject(rec, "unanswered_rows", (double)p->unanswered_rows);
            cJSON_AddNumberToObject(rec, "duplicate_answers", (double)p->duplicate_answers);
            cJSON_AddNumberToObject(rec, "ambiguous_answers", (double)ambiguous_answers(r));
            cJSON_AddItemToObject(rec, "missing_examples",
                                  u64_array(p->missing_examples, p->n_missing_examples));
            cJSON_AddItemToObject(rec, "unanswered_examples",
                                  u64_array(p->unanswered_examples, p->n_unanswered_examples));
        }
    }

    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return -1; /* cJSON builds nothing when out of memory */
    puts(text);
    cJSON_free(text);
    return 0;
}

static void print_ids(const uint64_t *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        printf("%s%" PRIu64, i ? ", " : "", v[i]);
}

static void print_table(const run *r, const verdict *v) {
    const loadopts *o = r->o;
    printf("stockload: %" PRIu64 " requests ", r->done);
    if (o->mode == LOADOPTS_LOOPS)
        printf("(%u threads x %" PRIu64 " loops)", o->concurrency, o->loops);
    else
        printf("(%u concurrent for %.1f s)", o->concurrency, o->duration_s);
    printf(" in %.3f s: %.1f req/s%s\n", wall_s(r), throughput(r),
           r->interrupted ? " (interrupted)" : "");
    printf("  %s %s\n", o->post ? "POST" : "GET", o->url);
    printf("  %-16s %10s %7s\n", "outcome", "count", "share");
    for (int k = 0; k < ANSWER_KINDS; k++) {
        double share = r->done ? 100.0 * (double)r->counts[k] / (double)r->done : 0;
        printf("  %-16s %10" PRIu64 " %6.1f%%\n", answer_kind_name((answer_kind)k), r->counts[k],
               share);
    }
    for (int c = 0; c < CURL_LAST; c++)
        if (r->curl_errors[c])
            printf("  transport error: %s x %" PRIu64 "\n", curl_easy_strerror((CURLcode)c),
                   r->curl_errors[c]);
    if (r->replayed) printf("  replayed answers: %" PRIu64 "\n", r->replayed);
    if (o->keys_out) printf("  keys: %" PRIu64 " lines in %s\n", r->keys_written, r->keys_path);
    const lathist *h = &r->all;
    printf("  latency ms: p50 %.3f  p90 %.3f  p99 %.3f  max %.3f  (mean %.3f over %" PRIu64
           " answers)\n",
           lathist_percentile(h, 50) / 1000, lathist_percentile(h, 90) / 1000,
           lathist_percentile(h, 99) / 1000, (double)h->max_us / 1000, lathist_mean(h) / 1000,
           h->total);
    if (r->failed) printf("  run failed: %s\n", r->failure);

    if (!v->asked) return;
    printf("reconciliation of product %d: ", (int)o->product);
    if (v->failed) {
        printf("ERROR: %s\n", v->error);
        return;
    }
    const reconcile_report *p = &v->report;
    if (p->ok) {
        printf("ok (%zu deducted answers, %zu orders rows)\n", p->answers, p->rows);
        return;
    }
    printf("MISMATCH (%zu deducted answers, %zu orders rows)\n", p->answers, p->rows);
    if (p->missing_rows) {
        printf("  %zu answered orders have no row, e.g. ", p->missing_rows);
        print_ids(p->missing_examples, p->n_missing_examples);
        putchar('\n');
    }
    if (p->unanswered_rows) {
        printf("  %zu rows have no deducted answer, e.g. ", p->unanswered_rows);
        print_ids(p->unanswered_examples, p->n_unanswered_examples);
        putchar('\n');
    }
    if (p->duplicate_answers) printf("  %zu answers repeat an order id\n", p->duplicate_answers);
    printf("  %" PRIu64 " answers left open whether they deducted (transport errors, 5xx other "
           "than stockd's refusals, unexpected)\n",
           ambiguous_answers(r));
}

/* ------------------------------------------------------------------ main */

/* Fills *db from --mysql and STOCKD_MYSQL_PASSWORD; false (with err) if unusable. */
static bool mysql_target(const char *url, reconcile_db *db, char *err, size_t errlen) {
    memset(db, 0, sizeof(*db));
    const char *pw = getenv("STOCKD_MYSQL_PASSWORD");
    if (pw) {
        if (strlen(pw) >= sizeof(db->password)) {
            snprintf(err, errlen, "STOCKD_MYSQL_PASSWORD is too long");
            return false;
        }
        strcpy(db->password, pw);
    }
    if (reconcile_parse_url(db, url) != RECONCILE_OK) {
        snprintf(err, errlen, "--mysql must be mysql://USER@HOST[:PORT]/DB");
        return false;
    }
    return true;
}

/* Checks the URL with libcurl's own parser, so a typo is a usage error up front
 * rather than T x L transport errors. */
static bool url_parses(const char *url) {
    CURLU *u = curl_url();
    bool ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK;
    curl_url_cleanup(u);
    return ok;
}

int main(int argc, char **argv) {
    loadopts o;
    char err[512];
    reconcile_db db;
    verdict v;
    run *r = NULL;
    int status = EXIT_NORUN;
    bool curl_ready = false, mysql_ready = false;

    memset(&v, 0, sizeof(v));
    switch (loadopts_parse(&o, argc, argv, err, sizeof(err))) {
    case LOADOPTS_HELP:
        fputs(loadopts_usage, stdout);
        return 0;
    case LOADOPTS_VERSION:
        puts("stockload " STOCKD_VERSION);
        return 0;
    case LOADOPTS_USAGE:
        fprintf(stderr, "stockload: %s (see --help)\n", err);
        return EXIT_USAGE;
    default:
        break;
    }
    if (o.mysql_url && !mysql_target(o.mysql_url, &db, err, sizeof(err))) {
        fprintf(stderr, "stockload: %s\n", err);
        return EXIT_USAGE;
    }

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "stockload: libcurl initialisation failed\n");
        goto out;
    }
    curl_ready = true;
    char checked[2048];
    if (o.products_lo) {
        if (strlen(o.url) + 12 > sizeof(checked)) {
            fprintf(stderr, "stockload: --url is too long for --products\n");
            status = EXIT_USAGE;
            goto out;
        }
        url_for_product(o.url, o.products_lo, checked, sizeof(checked));
    }
    if (!url_parses(o.products_lo ? checked : o.url)) {
        fprintf(stderr, "stockload: --url '%s' is not a valid URL\n", o.url);
        status = EXIT_USAGE;
        goto out;
    }
    if (ensure_fds(o.concurrency, err, sizeof(err)) != 0) {
        fprintf(stderr, "stockload: %s\n", err);
        goto out;
    }
    /* The run struct holds a dozen histograms: too big for the stack. */
    r = calloc(1, sizeof(*r));
    if (!r || run_init(r, &o, err, sizeof(err)) != 0) {
        fprintf(stderr, "stockload: %s\n", r ? err : "out of memory");
        goto out;
    }
    r->show_progress = o.progress && isatty(STDERR_FILENO);
    if (o.keys_out && keys_open(r, o.keys_out, err, sizeof(err)) != 0) {
        fprintf(stderr, "stockload: %s\n", err);
        goto out;
    }

    /* The first Ctrl-C lets the requests under way finish and still reports; a
     * second one (SA_RESETHAND) kills the process. */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    drive(r);
    /* Closed before the report, so the file is complete once stockload has printed. */
    keys_close(r);

    if (o.mysql_url) {
        uint64_t *rows = NULL;
        size_t n_rows = 0;
        v.asked = true;
        if (mysql_library_init(0, NULL, NULL) != 0) {
            v.failed = true;
            snprintf(v.error, sizeof(v.error), "libmysqlclient initialisation failed");
        } else {
            mysql_ready = true;
            if (reconcile_fetch(&db, o.product, &rows, &n_rows, v.error, sizeof(v.error)) != 0)
                v.failed = true;
            else
                reconcile_compare(r->order_ids, r->n_ids, rows, n_rows, &v.report);
            free(rows);
        }
    }
    /* reconcile_compare sorted them already; sorting again costs little. */
    if (r->n_ids) qsort(r->order_ids, r->n_ids, sizeof(*r->order_ids), cmp_u64);

    if (o.json) {
        if (print_json(r, &v) != 0) {
            fprintf(stderr, "stockload: out of memory writing the JSON output\n");
            goto out;
        }
    } else {
        print_table(r, &v);
    }
    fflush(stdout);

    if (r->failed) {
        fprintf(stderr, "stockload: run failed: %s\n", r->failure);
    } else if (r->interrupted) {
        fprintf(stderr, "stockload: interrupted; the results above are partial\n");
    } else if (r->done == r->counts[ANSWER_TRANSPORT]) {
        fprintf(stderr, "stockload: not one request got an HTTP answer\n");
    } else if (v.failed) {
        fprintf(stderr, "stockload: reconciliation failed: %s\n", v.error);
    } else {
        status = v.asked && !v.report.ok ? EXIT_MISMATCH : 0;
    }

out:
    if (r) run_release(r);
    free(r);
    if (mysql_ready) mysql_library_end();
    if (curl_ready) curl_global_cleanup();
    return status;
}
