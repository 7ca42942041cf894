/* log.c: stockd's log lines (stockd.h, "log"). One line per call on stderr, written
 * whole under a mutex so that lines of different threads never interleave. Two
 * formats: text for people (time, instance, level, message) and JSON for log shippers
 * (one object per line; cJSON escapes the message, so a quote or newline in it cannot
 * break the line). It calls nothing else of the service, so any file may log. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "stockd.h"

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_instance[65] = "stockd"; /* stockd_config.instance's size */
static stockd_log_format log_format = STOCKD_LOG_TEXT;

void stockd_log_setup(const char *instance, stockd_log_format format) {
    pthread_mutex_lock(&log_mu);
    if (instance) snprintf(log_instance, sizeof(log_instance), "%s", instance);
    log_format = format;
    pthread_mutex_unlock(&log_mu);
}

/* The message, formatted into buf (cap bytes) or, when longer, into a malloc'd string
 * (*owned, freed by the caller). Never NULL. */
static const char *format_message(char *buf, size_t cap, char **owned, const char *fmt,
                                  va_list ap) {
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(buf, cap, fmt, ap);
    *owned = NULL;
    if (n >= 0 && (size_t)n >= cap && (*owned = malloc((size_t)n + 1)) != NULL)
        vsnprintf(*owned, (size_t)n + 1, fmt, again);
    va_end(again);
    return *owned ? *owned : buf; /* out of memory: the message cut at cap */
}

void stockd_log(const char *level, const char *fmt, ...) {
    char ts[48], buf[1024], *owned;
    struct timespec now;
    struct tm tm;
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof(ts) - n, ".%03ldZ", now.tv_nsec / 1000000);
    va_start(ap, fmt);
    const char *msg = format_message(buf, sizeof(buf), &owned, fmt, ap);
    va_end(ap);

    pthread_mutex_lock(&log_mu);
    if (log_format == STOCKD_LOG_JSON) {
        cJSON *o = cJSON_CreateObject();
        char *line = NULL;
        if (o && cJSON_AddStringToObject(o, "time", ts) &&
            cJSON_AddStringToObject(o, "level", level) &&
            cJSON_AddStringToObject(o, "instance", log_instance) &&
            cJSON_AddStringToObject(o, "message", msg))
            line = cJSON_PrintUnformatted(o);
        if (line)
            fprintf(stderr, "%s\n", line);
        else /* out of memory: still one line a shipper can take */
            fprintf(stderr, "{\"time\":\"%s\",\"level\":\"error\",\"message\":\"out of memory\"}\n",
                    ts);
        cJSON_free(line);
        cJSON_Delete(o);
    } else {
        fprintf(stderr, "%s %s %s: %s\n", ts, log_instance, level, msg);
    }
    fflush(stderr);
    pthread_mutex_unlock(&log_mu);
    free(owned);
}
