/* kvfile.c: files of KEY=VALUE lines, the format of `stockd --config FILE` and of a
 * systemd EnvironmentFile: # comments and blank lines, spaces and tabs around a key and
 * its value, and a value that may be wrapped in one pair of double or single quotes.
 * What the keys mean is the caller's (config.c). Pure apart from reading the file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stockd.h"

/* Trims spaces and tabs (and a line's end) at both ends of s in place; returns the new
 * start. */
static char *kvfile_trim(char *s) {
    char *end = s + strlen(s);
    while (*s == ' ' || *s == '\t')
        s++;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
        *--end = '\0';
    return s;
}

int stockd_kvfile_read(const char *path, stockd_kvfile_fn *fn, void *arg, char *err,
                       size_t errlen) {
    char *line = NULL, where[300];
    size_t cap = 0;
    unsigned lineno = 0;
    int rc = -1;
    FILE *f = fopen(path, "r");

    if (!f) {
        snprintf(err, errlen, "cannot read --config file '%s': %s", path, strerror(errno));
        return -1;
    }
    while (getline(&line, &cap, f) != -1) {
        char *key = kvfile_trim(line), *val, *eq;
        size_t n;

        snprintf(where, sizeof(where), "%s:%u", path, ++lineno);
        if (!*key || *key == '#') continue;
        eq = strchr(key, '=');
        if (!eq || eq == key) {
            snprintf(err, errlen, "%s: expected KEY=VALUE, got '%.40s'", where, key);
            goto out;
        }
        *eq = '\0';
        key = kvfile_trim(key);
        val = kvfile_trim(eq + 1);
        n = strlen(val);
        if (n && (*val == '"' || *val == '\'')) {
            if (n < 2 || val[n - 1] != *val) {
                snprintf(err, errlen, "%s: %s: unbalanced quote", where, key);
                goto out;
            }
            val[n - 1] = '\0';
            val++;
        }
        if (fn(arg, key, val, where, lineno, err, errlen) != 0) goto out;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "cannot read --config file '%s': %s", path, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    free(line);
    fclose(f);
    return rc;
}
