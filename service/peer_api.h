/* peer_api.h: private to service/: the peer endpoints under /peer/ (peer_api.c), which
 * http.c hands every request whose path begins with /peer/. */
#ifndef STOCKD_PEER_API_H
#define STOCKD_PEER_API_H

#include <microhttpd.h>

#include "stockd.h"

/* The header that carries the peers' shared secret (--peer-secret-file). */
#define STOCKD_PEER_SECRET_HEADER "X-Stockd-Peer-Secret"
/* The header a forwarded request carries: served where it lands. */
#define STOCKD_HOP_HEADER "X-Stockd-Hop"

/* libmicrohttpd's access handler for a /peer/ request after its first call (headers):
 * takes the body in, then answers at once (403, 404, 405, 400) or suspends the
 * connection while the frame's entries are served. *state is the call's own (NULL at
 * first; freed by stockd_peer_free). Polling thread only. */
enum MHD_Result stockd_peer_request(stockd_ctx *ctx, struct MHD_Connection *c, void **state,
                                    const char *url, const char *method, const char *upload,
                                    size_t *upload_size);
/* A frame's entry has its answer (the worker's ctx->complete for a job with job->frame):
 * the last one resumes the connection. Any thread. */
void stockd_peer_entry_done(stockd_job *job);
/* Frees a call's state; NULL is a no-op. Polling thread, when the request completes. */
void stockd_peer_free(void *state);

#endif
