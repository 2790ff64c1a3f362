// SPDX-License-Identifier: BSD-3-Clause
/*
 * run_gpu_tests.c - the CUnit runner for GPU suites (`make test-gpu`). Without a usable
 * CUDA device it says so and exits 0 having run nothing; CI has no GPU.
 *
 * Suite gpu_sched: the schedule library executed in device code gives the same visits and
 * ranks as on the host, for every schedule over a spread of shapes (including causal
 * shift with a non-integer tile ratio and more jobs than W).
 *
 * Suite gpu_attn: the CUDA attention kernels against the float64 reference, and the
 * bitwise reproducibility of their backward over repeats and grids (test_attn_gpu.c).
 *
 * Suite gpu_dashd: dashd --backend cuda end to end, through libdash's CUDA buffers, from
 * this process and from children that are this binary again (`--dashd-child ...`).
 *
 * Suites gpu_attn_vl and gpu_dashd_varlen: sliding windows, softcap and packed
 * variable-length batches on the CUDA kernels against the float64 reference, their bits
 * over repeats, grids and packings, and through dashd --backend cuda (test_attn_vl_gpu.c).
 *
 * Suite gpu_share: the backward while other work holds SMs (test_share_gpu.c).
 *
 * Suite gpu_digest: the GPU digests equal the CPU's (test_digest_gpu.c).
 *
 * Suite gpu_audit: dashd --backend cuda with an audit log (test_audit_gpu.c).
 *
 * DASH_GPU_SUITE=<name> runs one suite only; DASH_GPU_TEST=<name> then one test of it
 * (for the slow tools: compute-sanitizer's racecheck on the small cases).
 */
#include "gpu_attn.h"
#include "gpu_attn_vl.h"
#include "gpu_audit.h"
#include "gpu_dashd.h"
#include "gpu_digest.h"
#include "gpu_sched.h"
#include "gpu_share.h"
#include "../testutil.h"

#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_shape(const struct sched_shape *sh, int32_t w, int *mismatches, int64_t *total)
{
    for (int kind = SCHED_ATOMIC; kind < SCHED_KIND_COUNT; kind++) {
        struct sched s;
        if (sched_init(&s, (enum sched_kind)kind, sh, w) != 0) {
            (*mismatches)++;
            continue;
        }
        int64_t *off = malloc(sizeof(int64_t) * (size_t)(s.jobs + 1));
        off[0] = 0;
        for (int32_t j = 0; j < s.jobs; j++) {
            struct sched_job J = sched_job_at(&s, j);
            int64_t n = 0;
            for (int32_t st = 0; st < sched_job_stages(&s, J.k); st++)
                n += sched_unit_steps(&s, sched_job_unit(&s, J.k, st));
            off[j + 1] = off[j] + n;
        }
        int32_t *visits = malloc(sizeof(int32_t) * (size_t)off[s.jobs]);
        int32_t *ranks = malloc(sizeof(int32_t) * (size_t)off[s.jobs]);
        CU_ASSERT_EQUAL(gpu_sched_walk(&s, off, visits, ranks), 0);
        for (int32_t j = 0; j < s.jobs; j++) {
            struct sched_job J = sched_job_at(&s, j);
            int64_t at = off[j];
            for (int32_t st = 0; st < sched_job_stages(&s, J.k); st++) {
                int32_t n = sched_job_unit(&s, J.k, st);
                for (int32_t step = 0; step < sched_unit_steps(&s, n); step++, at++) {
                    int32_t m = sched_visit(&s, &J, st, step);
                    if (visits[at] != m || ranks[at] != sched_rank(&s, &J, st, m))
                        (*mismatches)++;
                }
            }
        }
        *total += off[s.jobs];
        free(off);
        free(visits);
        free(ranks);
    }
}

static void test_gpu_sched_device_matches_host(void)
{
    const struct {
        struct sched_shape sh;
        int32_t w;
    } shapes[] = {
        {{1, 16, 16384, 16384, 64, 128, SCHED_MASK_CAUSAL, 0, 0, 0}, SCHED_W_DEFAULT},
        {{2, 8, 4096, 4096, 128, 128, SCHED_MASK_FULL, 0, 0, 0}, SCHED_W_DEFAULT},
        {{1, 4, 3000, 2000, 64, 96, SCHED_MASK_CAUSAL, 0, 0, 0}, 7},
        {{3, 2, 1000, 1500, 64, 96, SCHED_MASK_FULL, 0, 0, 0}, 5},
        {{1, 1, 1, 1, 64, 64, SCHED_MASK_CAUSAL, 0, 0, 0}, 1},
    };
    int mismatches = 0;
    int64_t total = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_shape(&shapes[i].sh, shapes[i].w, &mismatches, &total);
    printf("\n    %lld additions compared, %d mismatches ", (long long)total, mismatches);
    CU_ASSERT(total > 100000);
    CU_ASSERT_EQUAL(mismatches, 0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--dashd-child"))
        return gpu_dashd_child(argc, argv);
    char why[256];
    if (gpu_probe(why, sizeof why) != 0) {
        printf("test-gpu: skipped: no usable GPU (%s)\n", why);
        return 0;
    }
    printf("test-gpu: device 0: %s\n", why);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("gpu_sched", NULL, NULL);
    if (!s || !CU_add_test(s, "test_gpu_sched_device_matches_host", test_gpu_sched_device_matches_host))
        return 2;
    if (suite_gpu_attn() != 0 || suite_gpu_attn_vl() != 0 || suite_gpu_dashd() != 0 || suite_gpu_share() != 0 ||
        suite_gpu_digest() != 0 || suite_gpu_audit() != 0)
        return 2;
    printf("random seed: %llu (replay with DASH_TEST_SEED=%llu)\n", (unsigned long long)tu_seed(),
           (unsigned long long)tu_seed());
    CU_basic_set_mode(CU_BRM_VERBOSE);
    const char *only = getenv("DASH_GPU_SUITE");
    if (only && *only) {
        CU_pSuite one = CU_get_suite(only);
        if (!one) {
            fprintf(stderr, "test-gpu: no suite named %s\n", only);
            CU_cleanup_registry();
            return 2;
        }
        const char *test = getenv("DASH_GPU_TEST");
        if (test && *test) {
            CU_pTest t = CU_get_test(one, test);
            if (!t) {
                fprintf(stderr, "test-gpu: suite %s has no test named %s\n", only, test);
                CU_cleanup_registry();
                return 2;
            }
            CU_basic_run_test(one, t);
        } else {
            CU_basic_run_suite(one);
        }
    } else {
        CU_basic_run_tests();
    }
    unsigned failed = CU_get_number_of_tests_failed() + CU_get_number_of_failures() +
                      CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
