/* writer_http.c: the writer's GET /metrics (writer_int.h's writer_http__*). libmicrohttpd
 * serves it on a thread of its own, as stockd's /metrics is served; the writer's loop
 * publishes a copy of its statistics after every round (under a mutex: the loop never
 * waits on the HTTP thread for longer than a copy), and a scrape renders the last copy.
 * The metric names are a contract: monitoring/ and lab/ read them (docs/operating.md). */
#include <microhttpd.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "writer_int.h"

struct writer_http {
    struct MHD_Daemon *daemon;
    pthread_mutex_t mu;
    writer_stats st;
    char consumer[WRITER_CONSUMER_MAX + 1];
};

/* One counter or gauge of writer_stats. */
typedef struct family {
    const char *name, *type, *help;
    size_t off;
    enum { U64, LL, UINT, DBL } kind;
} family;

#define S(field) offsetof(writer_stats, field)

static const family families[] = {
    {"stock_writer_batches_total", "counter", "Batches committed to MariaDB.", S(batches), U64},
    {"stock_writer_batch_entries_total", "counter",
     "Entries in the batches committed (with stock_writer_batches_total: the mean batch size).",
     S(entries), U64},
    {"stock_writer_last_batch_entries", "gauge", "Entries in the last batch committed.",
     S(last_batch), UINT},
    {"stock_writer_orders_total", "counter", "Entries written as orders.", S(orders), U64},
    {"stock_writer_duplicates_total", "counter",
     "Entries written before (a redelivery): nothing written.", S(duplicates), U64},
    {"stock_writer_oversold_promises_total", "counter",
     "Entries with no stock left in MariaDB: recorded in oversold_promise.", S(oversold), U64},
    {"stock_writer_key_reused_total", "counter",
     "Entries whose key had an order of another deduction (a memo gone, a key reused): "
     "recorded in oversold_promise with reason key_reused.",
     S(key_reused), U64},
    {"stock_writer_claimed_total", "counter", "Entries claimed from other consumers.", S(claimed),
     U64},
    {"stock_writer_malformed_total", "counter", "Entries not in the contract's format.",
     S(malformed), U64},
    {"stock_writer_vanished_total", "counter",
     "Pending entries deleted from the stream before they were written (lost orders).", S(vanished),
     U64},
    {"stock_writer_retries_total", "counter", "Failed rounds (Redis or MariaDB away).", S(retries),
     U64},
    {"stock_writer_trimmed_total", "counter",
     "Stream entries trimmed once every group had acknowledged them.", S(trimmed), U64},
    {"stock_writer_consumers_removed_total", "counter",
     "Consumers removed from the group (idle, nothing pending).", S(forgotten), U64},
    {"stock_writer_lag_seconds_sum", "counter",
     "Sum over written entries of commit time minus the deduction's time (at_us).", S(lag_sum_s),
     DBL},
    {"stock_writer_last_lag_seconds", "gauge",
     "Commit time of the last batch minus the deduction time of its oldest entry.", S(last_lag_s),
     DBL},
    {"stock_writer_undelivered_entries", "gauge",
     "Entries of the stream not yet read by the group (XINFO GROUPS lag).", S(undelivered), LL},
    {"stock_writer_pending_entries", "gauge",
     "Entries read by the group and not yet acknowledged (written).", S(pending), LL},
};

static char *render(writer_http *h) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    writer_stats st;
    pthread_mutex_lock(&h->mu);
    st = h->st;
    pthread_mutex_unlock(&h->mu);
    fprintf(f,
            "# HELP stock_writer_info The writer's consumer name.\n"
            "# TYPE stock_writer_info gauge\nstock_writer_info{consumer=\"%s\"} 1\n",
            h->consumer);
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        const family *m = &families[i];
        const char *p = (const char *)&st + m->off;
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s ", m->name, m->help, m->name, m->type, m->name);
        if (m->kind == U64) fprintf(f, "%llu\n", (unsigned long long)*(const uint64_t *)p);
        if (m->kind == LL) fprintf(f, "%lld\n", *(const long long *)p);
        if (m->kind == UINT) fprintf(f, "%u\n", *(const unsigned *)p);
        if (m->kind == DBL) fprintf(f, "%.6f\n", *(const double *)p);
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **state) {
    (void)version, (void)upload, (void)upload_len, (void)state;
    writer_http *h = cls;
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    char *body = get && strcmp(url, "/metrics") == 0 ? render(h) : NULL;
    unsigned status = body ? 200 : !get ? 405 : strcmp(url, "/metrics") == 0 ? 500 : 404;
    if (!body) body = strdup(status == 404 ? "not found: GET /metrics\n" : "error\n");
    if (!body) return MHD_NO;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer_with_free_callback(strlen(body), body, free);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            status == 200 ? "text/plain; version=0.0.4" : "text/plain");
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

int writer_http__start(const writer_config *c, writer_http **out, char *err, size_t errlen) {
    *out = NULL;
    if (!c->metrics_port) return WRITER_OK;
    writer_http *h = calloc(1, sizeof(*h));
    if (!h) return WRITER_ERR_NOMEM;
    pthread_mutex_init(&h->mu, NULL);
    snprintf(h->consumer, sizeof(h->consumer), "%s", c->consumer);
    h->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                                 (uint16_t)c->metrics_port, NULL, NULL, on_request, h,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!h->daemon) {
        snprintf(err, errlen, "cannot listen on port %u for /metrics", c->metrics_port);
        writer_http__stop(h);
        return WRITER_ERR_CONFIG;
    }
    *out = h;
    return WRITER_OK;
}

void writer_http__publish(writer_http *h, const writer_stats *st) {
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->st = *st;
    pthread_mutex_unlock(&h->mu);
}

void writer_http__stop(writer_http *h) {
    if (!h) return;
    if (h->daemon) MHD_stop_daemon(h->daemon);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
