/* fault_proxy_mysql.h: the MySQL hook of the fault proxy (fault_proxy.h). It cuts the
 * client's side of the stream into the protocol's packets (3-byte little-endian length,
 * 1-byte sequence, payload) only to recognise COM_QUERY "COMMIT" and "ROLLBACK" (what
 * mysql_commit() and mysql_rollback() send; case and surrounding blanks do not matter).
 * The server's side passes as it is read.
 *
 * What it can do to a COMMIT (COMMITs are counted from 1 over every connection):
 *   - hold the N-th for S seconds, every other connection flowing freely;
 *   - delay every COMMIT by D ms (a disk that syncs slowly, a far network);
 *   - hold the (K+1)-th next one for S seconds when a file says "S K" (the arm file:
 *     read when a COMMIT arrives; with K 0, or none, it is deleted and that COMMIT held;
 *     otherwise the COMMIT passes and "S K-1" is written back; a malformed file holds
 *     nothing);
 *   - one-shot faults, for the tests of db/: cut the connection right before the next
 *     COMMIT (or ROLLBACK) reaches the server, or right after the server answered the
 *     COMMIT (the answer is never delivered), or strand it (fault_proxy.h's FP_STRAND: the
 *     COMMIT never arrives, the server's session is left open). Optionally the proxy then
 *     refuses new connections until fault_proxy_refuse(p, 0).
 * A hold prints "holding COMMIT #N for S s" when it starts and "released COMMIT #N" once
 * the COMMIT has gone on, one line each to the log given.
 *
 * Threads: every call may be made from any thread; the hook runs on the proxy's. */
#ifndef FAULT_PROXY_MYSQL_H
#define FAULT_PROXY_MYSQL_H

#include <stdio.h>

#include "fault_proxy.h"

typedef struct fp_mysql fp_mysql;

typedef enum {
    FP_MYSQL_NONE,
    FP_MYSQL_CUT_BEFORE_COMMIT,
    FP_MYSQL_CUT_AFTER_COMMIT,
    FP_MYSQL_CUT_BEFORE_ROLLBACK,
    FP_MYSQL_STRAND_COMMIT,
} fp_mysql_fault;

/* log (not owned; NULL: none) gets the hold lines, flushed at once. NULL without memory. */
fp_mysql *fp_mysql_new(FILE *log);

/* After the proxy it serves is freed. NULL is a no-op. */
void fp_mysql_free(fp_mysql *m);

/* The hook to put in fault_proxy_config; its arg is m. */
fp_hook fp_mysql_hook(fp_mysql *m);

void fp_mysql_hold_commit(fp_mysql *m, int nth, double seconds);
void fp_mysql_delay_commit(fp_mysql *m, int ms);
/* Copies path; "" or NULL: none. */
void fp_mysql_arm_file(fp_mysql *m, const char *path);

/* Arms one fault for the next COMMIT (any armed fault is used up by the next COMMIT) or,
 * for FP_MYSQL_CUT_BEFORE_ROLLBACK, the next ROLLBACK. */
void fp_mysql_arm(fp_mysql *m, fp_mysql_fault fault);
/* On: once a cut fault fires, the proxy refuses new connections (fault_proxy_refuse). */
void fp_mysql_refuse_after(fp_mysql *m, int on);

/* Cut faults fired, strand faults fired, COMMITs seen. */
int fp_mysql_cuts(fp_mysql *m);
int fp_mysql_strands(fp_mysql *m);
int fp_mysql_commits(fp_mysql *m);

#endif
