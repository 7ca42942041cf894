/* loadopts: stockload's command line, parsed into a struct by a pure function so the
 * rules (two exclusive modes, limits on every number, options that need each other) are
 * unit-tested without running anything. The usage text lives here too, next to the
 * parser it documents. */
#ifndef LOADOPTS_H
#define LOADOPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits that keep one run bounded in connections, count and time. */
#define LOADOPTS_MAX_CONCURRENCY    10000
#define LOADOPTS_MAX_LOOPS          100000000ULL
#define LOADOPTS_MAX_REQUESTS       100000000ULL /* threads x loops */
#define LOADOPTS_MAX_DURATION_S     3600.0
#define LOADOPTS_MIN_DURATION_S     0.1
#define LOADOPTS_MAX_TIMEOUT_MS     600000L
#define LOADOPTS_DEFAULT_TIMEOUT_MS 30000L

typedef enum loadopts_mode {
    LOADOPTS_LOOPS = 0, /* --threads T --loops L: exactly T x L requests */
    LOADOPTS_DURATION,  /* --duration S --concurrency C: C in flight for S seconds */
} loadopts_mode;

/* Parsed options. Strings point into argv (not copied). */
typedef struct loadopts {
    const char *url;
    bool post;        /* --method POST (default GET) */
    bool idempotency; /* --idempotency: a unique Idempotency-Key per request */
    bool json;        /* --json */
    bool progress;    /* false with --no-progress; shown only on a TTY anyway */
    loadopts_mode mode;
    unsigned concurrency; /* --threads or --concurrency */
    uint64_t loops;       /* LOADOPTS_LOOPS only; default 1 */
    double duration_s;    /* LOADOPTS_DURATION only */
    long timeout_ms;
    const char *mysql_url; /* --mysql, or NULL */
    int32_t product;       /* --product, meaningful when mysql_url is set */
    const char *keys_out;  /* --keys-out FILE (needs --idempotency), or NULL */
    /* --products A-B: each request names a product drawn uniformly from A..B, put in
     * place of the literal "{id}" in the URL (which must then hold it exactly once).
     * Both 0 without the option. */
    int32_t products_lo, products_hi;
    /* --users N: each request names a customer drawn uniformly from u1..uN in an X-User
     * header (docs/orders.md: the limit counts per customer). 0 without the option. */
    uint32_t users;
} loadopts;

#define LOADOPTS_RUN     0  /* options are valid: run */
#define LOADOPTS_HELP    1  /* --help was given: print loadopts_usage, exit 0 */
#define LOADOPTS_VERSION 2  /* --version was given: print the version, exit 0 */
#define LOADOPTS_USAGE   -1 /* invalid: err says why; exit 2 */

/* Parses argv[1..argc-1] into *o (--opt VALUE and --opt=VALUE both work). On
 * LOADOPTS_USAGE, err (errlen bytes) holds a one-line reason. Pure; thread-safe. */
int loadopts_parse(loadopts *o, int argc, char **argv, char *err, size_t errlen);

/* The --help text. */
extern const char loadopts_usage[];

#endif
