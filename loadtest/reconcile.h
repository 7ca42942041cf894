/* reconcile: checks stockload's answers against the orders table after a run.
 *
 * A deduction commits one orders row in the same transaction as the stock change, so
 * after a run the "deducted" answers and the product's orders rows must name the same
 * order ids, one to one. A row no answer names is a deduction the client was never
 * told about (or an older row: the caller clears the product's orders before a run);
 * an answer with no row is a deduction the database does not have. Both are what an
 * oversold or half-committed run looks like from outside.
 *
 * reconcile_compare() is pure; reconcile_fetch() reads the rows with libmysqlclient
 * (one connection, one prepared statement) and is safe to call from one thread at a
 * time after mysql_library_init(). Nothing here prints. */
#ifndef RECONCILE_H
#define RECONCILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RECONCILE_OK          0
#define RECONCILE_ERR_URL     -1 /* the mysql:// URL does not parse */
#define RECONCILE_ERR_CONNECT -2 /* could not connect */
#define RECONCILE_ERR_QUERY   -3 /* the statement failed */
#define RECONCILE_ERR_NOMEM   -4

#define RECONCILE_EXAMPLES 8 /* mismatching ids kept per kind, for the report */

typedef struct reconcile_db {
    char host[256];
    unsigned port; /* 3306 when the URL has none */
    char user[64];
    char password[128];
    char database[64];
} reconcile_db;

typedef struct reconcile_report {
    size_t answers;           /* "deducted" answers compared */
    size_t rows;              /* orders rows of the product */
    size_t missing_rows;      /* distinct answered order ids that have no row */
    size_t unanswered_rows;   /* rows that no answer names */
    size_t duplicate_answers; /* answers naming an order id an earlier answer named */
    uint64_t missing_examples[RECONCILE_EXAMPLES];
    size_t n_missing_examples;
    uint64_t unanswered_examples[RECONCILE_EXAMPLES];
    size_t n_unanswered_examples;
    bool ok; /* no missing, unanswered or duplicate */
} reconcile_report;

/* Parses mysql://USER[:PASSWORD]@HOST[:PORT]/DB exactly as stockd does
 * (stockdb_config_from_url in db/stockdb.h: %XX escapes in USER and PASSWORD, so '@' is
 * %40). The password is left as it was in *db when the URL has none, so the caller can
 * fill it from the environment first. */
int reconcile_parse_url(reconcile_db *db, const char *url);

/* Compares the order ids of the deducted answers with the ids of the orders rows.
 * Sorts both arrays in place (ascending). Never fails. */
void reconcile_compare(uint64_t *answer_ids, size_t n_answers, uint64_t *row_ids, size_t n_rows,
                       reconcile_report *r);

/* Reads the ids of all orders rows of product into a malloc'd array (*ids, *n; the
 * caller frees it; NULL with *n = 0 when there are none). On error returns a negative
 * RECONCILE_ERR_* with the reason in err (errlen bytes). */
int reconcile_fetch(const reconcile_db *db, int32_t product, uint64_t **ids, size_t *n, char *err,
                    size_t errlen);

#endif
