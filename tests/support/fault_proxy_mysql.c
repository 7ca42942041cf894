/* fault_proxy_mysql.c: see fault_proxy_mysql.h. The settings and counters live under one
 * mutex; the only per-connection state is "cut at the server's next bytes" (a COMMIT
 * whose answer must be lost), kept in the connection's data pointer. */
#include "fault_proxy_mysql.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COM_QUERY 0x03

struct fp_mysql {
    FILE *log;
    pthread_mutex_t mu; /* guards what follows */
    int hold_nth;
    double hold_s;
    int delay_ms;
    char *arm_path;
    fp_mysql_fault armed;
    int refuse_after;
    int commits, cuts, strands;
};

/* The data pointer of a connection whose next answer is to be lost. */
static char cut_on_answer;

/* One hold line: its start (seconds > 0) or its end. */
static void say(fp_mysql *m, int nth, double seconds) {
    if (!m->log) return;
    if (seconds > 0)
        fprintf(m->log, "holding COMMIT #%d for %g s\n", nth, seconds);
    else
        fprintf(m->log, "released COMMIT #%d\n", nth);
    fflush(m->log);
}

/* True if payload is COM_QUERY with the statement word (blanks around, any case). */
static int is_query(const unsigned char *payload, size_t len, const char *word) {
    if (len < 1 || payload[0] != COM_QUERY) return 0;
    const unsigned char *s = payload + 1, *e = payload + len;
    while (s < e && isspace(*s))
        s++;
    while (e > s && isspace(e[-1]))
        e--;
    size_t n = strlen(word);
    if ((size_t)(e - s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (toupper(s[i]) != word[i]) return 0;
    return 1;
}

/* The seconds of the hold armed through the file, taking the arming (0 if none). Under
 * mu, so one arming goes to one COMMIT. */
static double armed_hold(fp_mysql *m) {
    if (!m->arm_path) return 0;
    FILE *f = fopen(m->arm_path, "r");
    if (!f) return 0;
    double s = 0;
    int skip = 0;
    int got = fscanf(f, "%lf %d", &s, &skip);
    fclose(f);
    if (got < 1) return 0;
    if (got < 2) skip = 0;
    if (skip > 0) {
        f = fopen(m->arm_path, "w");
        if (f) {
            fprintf(f, "%g %d\n", s, skip - 1);
            fclose(f);
        }
        return 0;
    }
    unlink(m->arm_path);
    return s > 0 ? s : 0;
}

static long mysql_frame(void *arg, fp_conn *c, int dir, const unsigned char *buf, size_t len) {
    (void)arg;
    (void)c;
    if (dir == FP_DOWN) return (long)len;
    if (len < 4) return 0;
    size_t n = 4 + ((size_t)buf[0] | (size_t)buf[1] << 8 | (size_t)buf[2] << 16);
    return len >= n ? (long)n : 0;
}

static fp_verdict fire_cut(fp_mysql *m, fp_conn *c) {
    m->cuts++;
    int refuse = m->refuse_after;
    pthread_mutex_unlock(&m->mu);
    if (refuse) fault_proxy_refuse(fp_conn_proxy(c), -1);
    return FP_CUT;
}

static fp_verdict mysql_decide(void *arg, fp_conn *c, fp_frame *f) {
    fp_mysql *m = arg;
    if (f->dir == FP_DOWN) {
        if (fp_conn_data(c) != &cut_on_answer) return FP_PASS;
        pthread_mutex_lock(&m->mu);
        return fire_cut(m, c);
    }
    const unsigned char *payload = f->data + 4;
    size_t plen = f->len - 4;
    if (is_query(payload, plen, "ROLLBACK")) {
        pthread_mutex_lock(&m->mu);
        if (m->armed == FP_MYSQL_CUT_BEFORE_ROLLBACK) {
            m->armed = FP_MYSQL_NONE;
            return fire_cut(m, c);
        }
        pthread_mutex_unlock(&m->mu);
        return FP_PASS;
    }
    if (!is_query(payload, plen, "COMMIT")) return FP_PASS;

    pthread_mutex_lock(&m->mu);
    int nth = ++m->commits;
    fp_mysql_fault fault = m->armed;
    m->armed = FP_MYSQL_NONE;
    if (fault == FP_MYSQL_CUT_BEFORE_COMMIT) return fire_cut(m, c);
    if (fault == FP_MYSQL_STRAND_COMMIT) {
        m->strands++;
        pthread_mutex_unlock(&m->mu);
        return FP_STRAND;
    }
    if (fault == FP_MYSQL_CUT_AFTER_COMMIT) fp_conn_set_data(c, &cut_on_answer);
    double hold_s = nth == m->hold_nth ? m->hold_s : armed_hold(m);
    int delay_ms = m->delay_ms;
    pthread_mutex_unlock(&m->mu);
    if (hold_s > 0) {
        say(m, nth, hold_s);
        f->delay_ms = (int)(hold_s * 1000 + 0.5);
        f->tag = (unsigned)nth;
        return FP_DELAY;
    }
    if (delay_ms > 0) {
        f->delay_ms = delay_ms;
        return FP_DELAY;
    }
    return FP_PASS;
}

static void mysql_done(void *arg, fp_conn *c, unsigned tag) {
    (void)c;
    say(arg, (int)tag, 0);
}

fp_mysql *fp_mysql_new(FILE *log) {
    fp_mysql *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->log = log;
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void fp_mysql_free(fp_mysql *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m->arm_path);
    free(m);
}

fp_hook fp_mysql_hook(fp_mysql *m) {
    return (fp_hook){.name = "mysql",
                     .arg = m,
                     .frame = mysql_frame,
                     .decide = mysql_decide,
                     .done = mysql_done};
}

void fp_mysql_hold_commit(fp_mysql *m, int nth, double seconds) {
    pthread_mutex_lock(&m->mu);
    m->hold_nth = nth;
    m->hold_s = seconds;
    pthread_mutex_unlock(&m->mu);
}

void fp_mysql_delay_commit(fp_mysql *m, int ms) {
    pthread_mutex_lock(&m->mu);
    m->delay_ms = ms;
    pthread_mutex_unlock(&m->mu);
}

void fp_mysql_arm_file(fp_mysql *m, const char *path) {
    char *copy = path && path[0] ? strdup(path) : NULL;
    pthread_mutex_lock(&m->mu);
    free(m->arm_path);
    m->arm_path = copy;
    pthread_mutex_unlock(&m->mu);
}

void fp_mysql_arm(fp_mysql *m, fp_mysql_fault fault) {
    pthread_mutex_lock(&m->mu);
    m->armed = fault;
    pthread_mutex_unlock(&m->mu);
}

void fp_mysql_refuse_after(fp_mysql *m, int on) {
    pthread_mutex_lock(&m->mu);
    m->refuse_after = on;
    pthread_mutex_unlock(&m->mu);
}

static int get(fp_mysql *m, const int *field) {
    pthread_mutex_lock(&m->mu);
    int v = *field;
    pthread_mutex_unlock(&m->mu);
    return v;
}

int fp_mysql_cuts(fp_mysql *m) {
    return get(m, &m->cuts);
}

int fp_mysql_strands(fp_mysql *m) {
    return get(m, &m->strands);
}

int fp_mysql_commits(fp_mysql *m) {
    return get(m, &m->commits);
}
