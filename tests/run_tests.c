// SPDX-License-Identifier: BSD-3-Clause
/*
 * run_tests.c - the CUnit runner for every CPU suite. `test_dash [suite...]` runs the
 * named suites only; `test_dash --child NAME ENDPOINT` is a test's other process. Exit status 0 when every test passed. The CUnit summary is the last
 * thing printed.
 */
#include "suites.h"
#include "testutil.h"

#include <CUnit/Basic.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*add)(void);
} suites[] = {
    {"errors", suite_errors}, {"sched", suite_sched},   {"dag", suite_dag},
    {"attn_auto", suite_attn_auto},
    {"dtype", suite_dtype},   {"engine", suite_engine}, {"varlen", suite_varlen},
    {"dashctl", suite_dashctl},
    {"wire", suite_wire},     {"dashd", suite_dashd},   {"dashd_varlen", suite_dashd_varlen},
    {"client", suite_client},
    {"validate", suite_validate}, {"shmbuf", suite_shmbuf}, {"session", suite_session},
    {"job", suite_job},       {"libdash", suite_libdash}, {"digest", suite_digest}, {"audit", suite_audit},
    {"server", suite_server}, {"endpoint", suite_endpoint}, {"notify", suite_notify},
    {"reach", suite_reach},
    {"limits", suite_limits}, {"config", suite_config},
    {"metrics", suite_metrics}, {"log", suite_log}, {"soak", suite_soak},
};

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--child") == 0) /* a test's other process */
        return limits_child(argv[2], argv[3]);
    for (int a = 1; a < argc; a++) {
        int known = 0;
        for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
            known |= strcmp(argv[a], suites[i].name) == 0;
        if (!known) {
            fprintf(stderr, "test_dash: no suite named '%s'; the suites are:", argv[a]);
            for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
                fprintf(stderr, " %s", suites[i].name);
            fprintf(stderr, "\n");
            return 2;
        }
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        int wanted = argc < 2;
        for (int a = 1; a < argc; a++)
            wanted |= strcmp(argv[a], suites[i].name) == 0;
        if (wanted && suites[i].add() != 0) {
            fprintf(stderr, "cannot register suite %s: %s\n", suites[i].name, CU_get_error_msg());
            CU_cleanup_registry();
            return 2;
        }
    }
    printf("random seed: %llu (replay with DASH_TEST_SEED=%llu)\n", (unsigned long long)tu_seed(),
           (unsigned long long)tu_seed());
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_tests_failed() + CU_get_number_of_failures();
    unsigned ran = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    return (failed || ran == 0) ? 1 : 0;
}
