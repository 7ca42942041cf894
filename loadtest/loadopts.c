/* loadopts: stockload's command-line parser and usage text (see loadopts.h). */
#include "loadopts.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char loadopts_usage[] =
    "usage: stockload --url URL (--threads T [--loops L] | --duration S --concurrency C)\n"
    "                 [--method GET|POST] [--idempotency [--keys-out FILE]]\n"
    "                 [--timeout-ms N] [--json] [--no-progress] [--mysql URL --product ID]\n"
    "                 [--products A-B] [--users N]\n"
    "       stockload --help | --version\n"
    "\n"
    "Sends load to one URL over keep-alive connections and counts what stockd answered.\n"
    "\n"
    "Modes (pick one):\n"
    "  --threads T        JMeter's model: T virtual threads, each sending its next request\n"
    "  --loops L          when its previous one was answered, L times: exactly T x L requests,\n"
    "                     at most T in flight (L defaults to 1; T <= 10000, T x L <= 1e8).\n"
    "  --duration S       keep C requests in flight for S seconds (0.1..3600, decimals ok);\n"
    "  --concurrency C    requests under way when time is up are waited for and counted.\n"
    "\n"
    "Request:\n"
    "  --url URL          http:// or https:// target, e.g.\n"
    "                     http://127.0.0.1:8080/stock/reduce?id=1\n"
    "  --products A-B     spread the load: every request names a product drawn uniformly\n"
    "                     from A..B in place of the literal {id} in the URL, e.g.\n"
    "                     --url 'http://127.0.0.1:8080/stock/reduce?id={id}' --products 1-100\n"
    "                     (not with --mysql: reconciliation is per product)\n"
    "  --users N          every request names a customer drawn uniformly from u1..uN in\n"
    "                     an X-User header (1..1000000): the limit per customer and the\n"
    "                     reservations of docs/orders.md under load\n"
    "  --method M         GET (default) or POST (with an empty body)\n"
    "  --idempotency      send a unique Idempotency-Key header with every request\n"
    "  --keys-out FILE    (with --idempotency) write one line per finished request to FILE,\n"
    "                     in completion order, as loadtest/check-invariant --keys reads it:\n"
    "                       KEY STATUS RESULT ORDER_ID REPLAYED CURL_EXIT\n"
    "                     STATUS is the HTTP status (0: no HTTP answer), RESULT the outcome\n"
    "                     below (\"-\" for a transport error), ORDER_ID and REPLAYED those of\n"
    "                     a deduction (else 0 false), CURL_EXIT libcurl's code, the same as\n"
    "                     curl(1)'s exit status (0 ok, 7 refused, 28 timed out, 56 reset).\n"
    "                     A fault test retries each key whose answer was lost with it.\n"
    "  --timeout-ms N     whole-request timeout, 1..600000 (default 30000); a request\n"
    "                     that gets no answer in time counts as a transport error\n"
    "\n"
    "Output:\n"
    "  --json             print one JSON object instead of the table: requests,\n"
    "                     duration_s, throughput_rps, interrupted, counts{<outcome>,\n"
    "                     total_503, total_5xx}, replayed, transport_errors{<curl error>},\n"
    "                     latency_ms{count,min,mean,p50,p90,p99,max},\n"
    "                     latency_ms_by_outcome, order_id_count, order_ids (sorted),\n"
    "                     keys_out (absolute path) and keys_written with --keys-out,\n"
    "                     reconciliation{verdict,answers,rows,missing_rows,...}\n"
    "  --no-progress      no progress bar (it is only ever drawn when stderr is a terminal)\n"
    "\n"
    "Reconciliation (both options or neither):\n"
    "  --mysql URL        mysql://USER@HOST:PORT/DB; the password comes from the\n"
    "                     environment variable STOCKD_MYSQL_PASSWORD\n"
    "  --product ID       the product whose orders rows are compared with the answers\n"
    "  After the run, every \"deducted\" answer's order_id must have an orders row of\n"
    "  that product, no such row may lack a \"deducted\" answer, and no two answers may\n"
    "  name the same order. The caller must clear the product's orders before the run\n"
    "  (DELETE FROM orders WHERE product_id = ID), or older rows count as unanswered.\n"
    "  Transport errors and 5xx answers other than stockd's refusals leave open whether\n"
    "  a request deducted; the verdict reports how many there were.\n"
    "\n"
    "Outcomes: deducted (200 deducted, or reserved), sold_out (409), lock_timeout, lock_lost, "
    "unavailable,\n"
    "overloaded (503 by \"result\"), other_503, other_5xx (500 unknown, 502, 504),\n"
    "http_4xx, unexpected (any other status, or a 200 that is not a deduction with an\n"
    "order id), transport_error (no HTTP answer). Latency percentiles (log buckets,\n"
    "within 1 %) cover every request that got an HTTP answer; throughput is all\n"
    "requests over the wall time from the first request to the last answer.\n"
    "\n"
    "Exit status: 0 done (and reconciliation ok), 1 reconciliation mismatch, 2 usage\n"
    "error, 3 could not run (setup failed, interrupted, database unreachable, --keys-out\n"
    "not writable, or not one request got an HTTP answer).\n";

enum opt_id {
    OPT_URL,
    OPT_THREADS,
    OPT_LOOPS,
    OPT_DURATION,
    OPT_CONCURRENCY,
    OPT_METHOD,
    OPT_IDEMPOTENCY,
    OPT_TIMEOUT,
    OPT_JSON,
    OPT_NO_PROGRESS,
    OPT_MYSQL,
    OPT_PRODUCT,
    OPT_KEYS_OUT,
    OPT_PRODUCTS,
    OPT_USERS,
    OPT_COUNT
};

static const struct {
    const char *name;
    bool takes_value;
} options[OPT_COUNT] = {
    [OPT_URL] = {"url", true},
    [OPT_THREADS] = {"threads", true},
    [OPT_LOOPS] = {"loops", true},
    [OPT_DURATION] = {"duration", true},
    [OPT_CONCURRENCY] = {"concurrency", true},
    [OPT_METHOD] = {"method", true},
    [OPT_IDEMPOTENCY] = {"idempotency", false},
    [OPT_TIMEOUT] = {"timeout-ms", true},
    [OPT_JSON] = {"json", false},
    [OPT_NO_PROGRESS] = {"no-progress", false},
    [OPT_MYSQL] = {"mysql", true},
    [OPT_PRODUCT] = {"product", true},
    [OPT_KEYS_OUT] = {"keys-out", true},
    [OPT_PRODUCTS] = {"products", true},
    [OPT_USERS] = {"users", true},
};

__attribute__((format(printf, 3, 4))) static int usage_error(char *err, size_t errlen,
                                                             const char *fmt, ...) {
    if (errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return LOADOPTS_USAGE;
}

/* A decimal integer in [min, max]: digits only, so "-1", " 5" and "5x" are refused
 * instead of being read as a huge number, 5 or 5. */
static bool parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
    if (*s < '0' || *s > '9') return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    if (v < min || v > max) return false;
    *out = v;
    return true;
}

/* Seconds as a plain decimal ("10", "0.5"): no sign, exponent, hex, inf or nan. */
static bool parse_seconds(const char *s, double *out) {
    if (!*s || strspn(s, "0123456789.") != strlen(s) || strchr(s, '.') != strrchr(s, '.'))
        return false;
    char *end;
    double v = strtod(s, &end);
    if (*end || !isfinite(v)) return false;
    *out = v;
    return true;
}

int loadopts_parse(loadopts *o, int argc, char **argv, char *err, size_t errlen) {
    bool seen[OPT_COUNT] = {false};
    uint64_t n;

    memset(o, 0, sizeof(*o));
    o->progress = true;
    o->loops = 1;
    o->timeout_ms = LOADOPTS_DEFAULT_TIMEOUT_MS;
    if (errlen) err[0] = '\0';

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) return LOADOPTS_HELP;
        if (strcmp(arg, "--version") == 0) return LOADOPTS_VERSION;
        if (strncmp(arg, "--", 2) != 0)
            return usage_error(err, errlen, "unexpected argument '%s'", arg);

        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t namelen = eq ? (size_t)(eq - name) : strlen(name);
        int id = -1;
        for (int k = 0; k < OPT_COUNT; k++) {
            if (strlen(options[k].name) == namelen &&
                strncmp(options[k].name, name, namelen) == 0) {
                id = k;
                break;
            }
        }
        if (id < 0) return usage_error(err, errlen, "unknown option '%s'", arg);
        if (seen[id]) return usage_error(err, errlen, "--%s given twice", options[id].name);
        seen[id] = true;

        const char *val = NULL;
        if (options[id].takes_value) {
            if (eq)
                val = eq + 1;
            else if (i + 1 < argc)
                val = argv[++i];
            else
                return usage_error(err, errlen, "--%s needs a value", options[id].name);
        } else if (eq) {
            return usage_error(err, errlen, "--%s takes no value", options[id].name);
        }

        switch ((enum opt_id)id) {
        case OPT_URL:
            if (strncasecmp(val, "http://", 7) != 0 && strncasecmp(val, "https://", 8) != 0)
                return usage_error(err, errlen, "--url must start with http:// or https://");
            o->url = val;
            break;
        case OPT_THREADS:
        case OPT_CONCURRENCY:
            if (!parse_uint(val, 1, LOADOPTS_MAX_CONCURRENCY, &n))
                return usage_error(err, errlen, "--%s must be 1..%d, got '%s'", options[id].name,
                                   LOADOPTS_MAX_CONCURRENCY, val);
            o->concurrency = (unsigned)n;
            break;
        case OPT_LOOPS:
            if (!parse_uint(val, 1, LOADOPTS_MAX_LOOPS, &o->loops))
                return usage_error(err, errlen, "--loops must be 1..%llu, got '%s'",
                                   (unsigned long long)LOADOPTS_MAX_LOOPS, val);
            break;
        case OPT_DURATION:
            if (!parse_seconds(val, &o->duration_s) || o->duration_s < LOADOPTS_MIN_DURATION_S ||
                o->duration_s > LOADOPTS_MAX_DURATION_S)
                return usage_error(err, errlen, "--duration must be %.1f..%.0f seconds, got '%s'",
                                   LOADOPTS_MIN_DURATION_S, LOADOPTS_MAX_DURATION_S, val);
            break;
        case OPT_METHOD:
            if (strcmp(val, "GET") == 0)
                o->post = false;
            else if (strcmp(val, "POST") == 0)
                o->post = true;
            else
                return usage_error(err, errlen, "--method must be GET or POST, got '%s'", val);
            break;
        case OPT_IDEMPOTENCY:
            o->idempotency = true;
            break;
        case OPT_TIMEOUT:
            if (!parse_uint(val, 1, LOADOPTS_MAX_TIMEOUT_MS, &n))
                return usage_error(err, errlen, "--timeout-ms must be 1..%ld, got '%s'",
                                   LOADOPTS_MAX_TIMEOUT_MS, val);
            o->timeout_ms = (long)n;
            break;
        case OPT_JSON:
            o->json = true;
            break;
        case OPT_NO_PROGRESS:
            o->progress = false;
            break;
        case OPT_MYSQL:
            if (strncmp(val, "mysql://", 8) != 0)
                return usage_error(err, errlen, "--mysql must be mysql://USER@HOST:PORT/DB");
            o->mysql_url = val;
            break;
        case OPT_PRODUCT:
            if (!parse_uint(val, 1, INT32_MAX, &n))
                return usage_error(err, errlen, "--product must be a positive id, got '%s'", val);
            o->product = (int32_t)n;
            break;
        case OPT_KEYS_OUT:
            if (!*val) return usage_error(err, errlen, "--keys-out needs a file name");
            o->keys_out = val;
            break;
        case OPT_PRODUCTS: {
            /* A-B, both positive ids, A <= B; parsed by parse_uint piece by piece so
             * that signs, spaces and trailing junk are refused. */
            const char *dash = strchr(val, '-');
            char lo[16];
            uint64_t a, b;
            size_t len = dash ? (size_t)(dash - val) : 0;
            if (!dash || len == 0 || len >= sizeof(lo))
                return usage_error(err, errlen, "--products must be A-B, got '%s'", val);
            memcpy(lo, val, len);
            lo[len] = '\0';
            if (!parse_uint(lo, 1, INT32_MAX, &a) || !parse_uint(dash + 1, 1, INT32_MAX, &b) ||
                a > b)
                return usage_error(err, errlen,
                                   "--products must be A-B with 1 <= A <= B <= %d, got '%s'",
                                   INT32_MAX, val);
            o->products_lo = (int32_t)a;
            o->products_hi = (int32_t)b;
            break;
        }
        case OPT_USERS: {
            uint64_t users;
            if (!parse_uint(val, 1, 1000000, &users))
                return usage_error(err, errlen, "--users must be 1..1000000, got '%s'", val);
            o->users = (uint32_t)users;
            break;
        }
        case OPT_COUNT:
            break;
        }
    }

    if (!seen[OPT_URL]) return usage_error(err, errlen, "--url is required");
    if (seen[OPT_THREADS] && seen[OPT_DURATION])
        return usage_error(err, errlen,
                           "--threads/--loops and --duration/--concurrency exclude each other");
    if (seen[OPT_THREADS]) {
        o->mode = LOADOPTS_LOOPS;
        if (seen[OPT_CONCURRENCY])
            return usage_error(err, errlen, "--concurrency goes with --duration; use --threads");
        if (o->loops > LOADOPTS_MAX_REQUESTS / o->concurrency)
            return usage_error(err, errlen, "--threads x --loops must be at most %llu",
                               (unsigned long long)LOADOPTS_MAX_REQUESTS);
    } else if (seen[OPT_DURATION]) {
        o->mode = LOADOPTS_DURATION;
        if (seen[OPT_LOOPS]) return usage_error(err, errlen, "--loops goes with --threads");
        if (!seen[OPT_CONCURRENCY])
            return usage_error(err, errlen, "--duration needs --concurrency");
    } else if (seen[OPT_LOOPS]) {
        return usage_error(err, errlen, "--loops needs --threads");
    } else if (seen[OPT_CONCURRENCY]) {
        return usage_error(err, errlen, "--concurrency needs --duration");
    } else {
        return usage_error(err, errlen,
                           "pick a mode: --threads T [--loops L] or --duration S --concurrency C");
    }
    if (seen[OPT_MYSQL] != seen[OPT_PRODUCT])
        return usage_error(err, errlen, "--mysql and --product go together");
    if (seen[OPT_PRODUCTS]) {
        const char *at = strstr(o->url, "{id}");
        if (!at || strstr(at + 1, "{id}"))
            return usage_error(err, errlen, "--products needs {id} exactly once in --url");
        if (seen[OPT_MYSQL])
            return usage_error(err, errlen, "--products and --mysql exclude each other");
    } else if (strstr(o->url, "{id}")) {
        return usage_error(err, errlen, "--url holds {id}: give --products A-B");
    }
    /* Without keys there is nothing to write: refuse rather than write an empty file. */
    if (seen[OPT_KEYS_OUT] && !o->idempotency)
        return usage_error(err, errlen, "--keys-out needs --idempotency");
    return LOADOPTS_RUN;
}
