// SPDX-License-Identifier: BSD-3-Clause
/*
 * suites.h - the CUnit suites of the test runner (tests/run_tests.c), one per module.
 * Each suite_<module>() registers its tests and returns 0, or -1 if CUnit failed.
 */
#ifndef DASH_TEST_SUITES_H
#define DASH_TEST_SUITES_H

#include <CUnit/CUnit.h>

#define ADD_TEST(suite, fn)                        \
    do {                                           \
        if (!CU_add_test((suite), #fn, (fn)))      \
            return -1;                             \
    } while (0)

int suite_errors(void);
int suite_sched(void);
int suite_dag(void);
int suite_attn_auto(void);
int suite_dtype(void);
int suite_engine(void);
int suite_varlen(void);
int suite_dashd_varlen(void);
int suite_dashctl(void);
int suite_wire(void);
int suite_dashd(void);
int suite_libdash(void);
int suite_validate(void);
int suite_shmbuf(void);
int suite_session(void);
int suite_job(void);
int suite_client(void);
int suite_digest(void);
int suite_audit(void);
int suite_server(void);
int suite_endpoint(void);
int suite_notify(void);
int suite_reach(void);
int suite_limits(void);
/* `test_dash --child NAME ENDPOINT`: a limits test's other process (test_limits.c). */
int limits_child(const char *name, const char *endpoint);
int suite_config(void);
int suite_metrics(void);
int suite_log(void);
int suite_soak(void);

#endif
