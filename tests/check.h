/* check.h: the assertion macros of our C tests. Each failing check prints the file,
 * line, the expression and both sides, then the test exits 1. A test exits 77 to be
 * marked skipped by ctest, with the reason on stderr. */
#ifndef STOCKD_TEST_CHECK_H
#define STOCKD_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_FAIL_(...)                                                                           \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) CHECK_FAIL_("check failed: %s", #cond);                                       \
    } while (0)

#define CHECK_INT_EQ(expected, actual)                                                             \
    do {                                                                                           \
        long long e_ = (long long)(expected), a_ = (long long)(actual);                            \
        if (e_ != a_)                                                                              \
            CHECK_FAIL_("%s == %s: expected %lld, got %lld", #expected, #actual, e_, a_);          \
    } while (0)

#define CHECK_INT_OP_(a, op, b)                                                                    \
    do {                                                                                           \
        long long l_ = (long long)(a), r_ = (long long)(b);                                        \
        if (!(l_ op r_)) CHECK_FAIL_("%s %s %s: %lld vs %lld", #a, #op, #b, l_, r_);               \
    } while (0)
#define CHECK_INT_GE(a, b) CHECK_INT_OP_(a, >=, b)
#define CHECK_INT_GT(a, b) CHECK_INT_OP_(a, >, b)
#define CHECK_INT_LE(a, b) CHECK_INT_OP_(a, <=, b)
#define CHECK_INT_LT(a, b) CHECK_INT_OP_(a, <, b)

#define CHECK_STR_EQ(expected, actual)                                                             \
    do {                                                                                           \
        const char *e_ = (expected), *a_ = (actual);                                               \
        if (!e_ || !a_ || strcmp(e_, a_) != 0)                                                     \
            CHECK_FAIL_("%s == %s: expected \"%s\", got \"%s\"", #expected, #actual,               \
                        e_ ? e_ : "(null)", a_ ? a_ : "(null)");                                   \
    } while (0)

#define SKIP(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "SKIP: ");                                                                 \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        exit(77);                                                                                  \
    } while (0)

#endif
