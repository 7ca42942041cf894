/* fuzz_replay.c: runs the fuzz target over files without libFuzzer, so that the
 * committed corpus is exercised by every build (gcc included), not only where clang's
 * fuzzer runtime exists. Each argument is a file or a directory of files; every file is
 * one input. Exits 1 if no input was found, so a missing corpus cannot pass. An
 * invariant that fails aborts inside the target. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n;
    int rc = -1;

    if (!f) goto out;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) goto out;
    buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) goto out;
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    rc = 0;
out:
    if (rc != 0) fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
    free(buf);
    if (f) fclose(f);
    return rc;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv) {
    unsigned files = 0;

    for (int i = 1; i < argc; i++) {
        struct stat st;
        struct dirent **names;
        int n;

        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "fuzz_replay: no such file or directory: %s\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) != 0) return 1;
            files++;
            continue;
        }
        n = scandir(argv[i], &names, NULL, by_name);
        if (n < 0) return 1;
        for (int j = 0; j < n; j++) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], names[j]->d_name);
            if (names[j]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                if (run_file(path) != 0) return 1;
                files++;
            }
            free(names[j]);
        }
        free(names);
    }
    if (files == 0) {
        fprintf(stderr, "fuzz_replay: no inputs\n");
        return 1;
    }
    printf("fuzz_replay: %u inputs, all invariants held\n", files);
    return 0;
}
