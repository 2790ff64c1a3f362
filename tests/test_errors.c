// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_errors.c - the error table: every code has a distinct value, a name and a message.
 */
#include "suites.h"
#include "../proto/errors.h"

#include <CUnit/CUnit.h>
#include <string.h>

static const int codes[] = {
#define CODE_(name, value, msg) value,
    DASH_ERRNO_MAP(CODE_)
#undef CODE_
};

static void test_errors_codes_are_distinct_negative_and_named(void)
{
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT(codes[i] < 0);
        CU_ASSERT_STRING_NOT_EQUAL(dash_errname(codes[i]), "DASH_UNKNOWN");
        CU_ASSERT(strlen(dash_strerror(codes[i])) > 3);
        for (size_t j = i + 1; j < n; j++)
            CU_ASSERT_NOT_EQUAL(codes[i], codes[j]);
    }
}

static void test_errors_posix_codes_are_negative_errno(void)
{
    CU_ASSERT_EQUAL(DASH_EINVAL, -EINVAL);
    CU_ASSERT_EQUAL(DASH_EDEADLK, -EDEADLK);
    CU_ASSERT_STRING_EQUAL(dash_strerror(-EINVAL), "invalid argument");
    CU_ASSERT_STRING_EQUAL(dash_errname(DASH_EHEADDIM), "DASH_EHEADDIM");
    CU_ASSERT_STRING_EQUAL(dash_strerror(0), "success");
    CU_ASSERT_STRING_EQUAL(dash_errname(-4999), "DASH_UNKNOWN");
    CU_ASSERT_STRING_EQUAL(dash_strerror(-4999), "unknown error");
    /* an errno outside the table still reads as text */
    CU_ASSERT(strlen(dash_strerror(-EPIPE)) > 3);
}

int suite_errors(void)
{
    CU_pSuite s = CU_add_suite("errors", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_errors_codes_are_distinct_negative_and_named);
    ADD_TEST(s, test_errors_posix_codes_are_negative_errno);
    return 0;
}
