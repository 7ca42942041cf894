/* Tests of service/log.c: both formats, and that a message with quotes, backslashes and
 * newlines stays one JSON line that a shipper can parse. stderr is pointed at a file. */
#include "check.h"
#include "stockd.h"

#include <cjson/cJSON.h>
#include <unistd.h>

/* Runs fn with stderr in a temporary file and returns what it wrote (static buffer). */
static const char *capture(void (*fn)(void)) {
    static char out[8192];
    FILE *tmp = tmpfile();
    CHECK(tmp != NULL);
    fflush(stderr);
    int saved = dup(2);
    CHECK(saved >= 0);
    CHECK(dup2(fileno(tmp), 2) >= 0);
    fn();
    fflush(stderr);
    CHECK(dup2(saved, 2) >= 0);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, sizeof(out) - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
    return out;
}

static void log_text(void) {
    stockd_log_setup("inst-1", STOCKD_LOG_TEXT);
    stockd_log("warn", "lock: %s (%d)", "session expired", 7);
}

static void log_json(void) {
    stockd_log_setup("inst-2", STOCKD_LOG_JSON);
    stockd_log("info", "quote \" backslash \\ newline\n tab\t end %d", 42);
    stockd_log("warn", "%s", "second");
}

static void log_long(void) {
    static char big[5000];
    memset(big, 'x', sizeof(big) - 1);
    stockd_log_setup("inst-3", STOCKD_LOG_JSON);
    stockd_log("info", "%s", big);
}

int main(void) {
    const char *t = capture(log_text);
    CHECK(strstr(t, "Z inst-1 warn: lock: session expired (7)\n") != NULL);
    CHECK(strchr(t, '\n') == t + strlen(t) - 1);
    puts("ok: text: time, instance, level: message, one line");

    const char *j = capture(log_json);
    const char *nl = strchr(j, '\n');
    CHECK(nl != NULL);
    char first[2048];
    memcpy(first, j, (size_t)(nl - j));
    first[nl - j] = '\0';
    cJSON *o = cJSON_Parse(first);
    if (!o) CHECK_FAIL_("not one JSON object per line: '%s'", first);
    CHECK_STR_EQ("info", cJSON_GetStringValue(cJSON_GetObjectItem(o, "level")));
    CHECK_STR_EQ("inst-2", cJSON_GetStringValue(cJSON_GetObjectItem(o, "instance")));
    CHECK_STR_EQ("quote \" backslash \\ newline\n tab\t end 42",
                 cJSON_GetStringValue(cJSON_GetObjectItem(o, "message")));
    const char *time = cJSON_GetStringValue(cJSON_GetObjectItem(o, "time"));
    CHECK(time && strlen(time) == 24 && time[23] == 'Z');
    cJSON_Delete(o);
    cJSON *second = cJSON_Parse(nl + 1);
    CHECK(second != NULL);
    CHECK_STR_EQ("second", cJSON_GetStringValue(cJSON_GetObjectItem(second, "message")));
    cJSON_Delete(second);
    puts("ok: json: one object per line, the message escaped whole");

    const char *l = capture(log_long);
    cJSON *big = cJSON_Parse(l);
    CHECK(big != NULL);
    CHECK_INT_EQ(4999, strlen(cJSON_GetStringValue(cJSON_GetObjectItem(big, "message"))));
    cJSON_Delete(big);
    puts("ok: a message longer than the line buffer is logged whole");
    puts("test_log: all passed");
    return 0;
}
