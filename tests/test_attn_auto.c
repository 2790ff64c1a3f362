// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_attn_auto.c - which schedule `auto` names on the CUDA backend (kernels/cuda/
 * attn_auto.h), without a GPU: the sm_90 table measured on an H200, a band's rule, and
 * today's rule on architectures without a table.
 */
#include "suites.h"
#include "kernels/cuda/attn_auto.h"

#include <CUnit/CUnit.h>

#define SM90 90

static void test_attn_auto_sm90_names_spt_at_head_dim_96_causal(void)
{
    CU_ASSERT_EQUAL(cuattn_auto_schedule(SM90, 96, SCHED_MASK_CAUSAL, 0), SCHED_SPT);
}

/* where spt is not ahead by the table's margin (64 causal: within the noise) or is slower */
static void test_attn_auto_sm90_names_shift_elsewhere_in_the_table(void)
{
    CU_ASSERT_EQUAL(cuattn_auto_schedule(SM90, 128, SCHED_MASK_FULL, 0), SCHED_SHIFT);
    CU_ASSERT_EQUAL(cuattn_auto_schedule(SM90, 128, SCHED_MASK_CAUSAL, 0), SCHED_SHIFT);
    CU_ASSERT_EQUAL(cuattn_auto_schedule(SM90, 64, SCHED_MASK_CAUSAL, 0), SCHED_SHIFT);
    CU_ASSERT_EQUAL(cuattn_auto_schedule(SM90, 96, SCHED_MASK_FULL, 0), SCHED_SHIFT);
    CU_ASSERT_EQUAL(cuattn_auto_schedule(SM90, 256, SCHED_MASK_CAUSAL, 0), SCHED_SHIFT);
}

static void test_attn_auto_band_names_spt_on_every_architecture(void)
{
    const int32_t ccs[] = {80, 86, SM90, 100};
    for (size_t i = 0; i < sizeof ccs / sizeof ccs[0]; i++)
        for (int m = 0; m < SCHED_MASK_COUNT; m++) {
            CU_ASSERT_EQUAL(cuattn_auto_schedule(ccs[i], 128, (enum sched_mask)m, 1), SCHED_SPT);
            CU_ASSERT_EQUAL(cuattn_auto_schedule(ccs[i], 64, (enum sched_mask)m, 1), SCHED_SPT);
        }
}

/* No table for sm_80 or sm_100: shift, even where sm_90's table says spt. */
static void test_attn_auto_architecture_without_a_table_names_shift(void)
{
    const int32_t ccs[] = {80, 89, 100, 0};
    for (size_t i = 0; i < sizeof ccs / sizeof ccs[0]; i++) {
        CU_ASSERT_EQUAL(cuattn_auto_schedule(ccs[i], 96, SCHED_MASK_CAUSAL, 0), SCHED_SHIFT);
        CU_ASSERT_EQUAL(cuattn_auto_schedule(ccs[i], 128, SCHED_MASK_FULL, 0), SCHED_SHIFT);
    }
}

/* A head dim the table has no row for (a dim the kernels may serve one day) gets shift. */
static void test_attn_auto_sm90_head_dim_without_a_row_names_shift(void)
{
    CU_ASSERT_EQUAL(cuattn_auto_schedule(SM90, 192, SCHED_MASK_CAUSAL, 0), SCHED_SHIFT);
}

static void test_attn_auto_names_a_deterministic_schedule_everywhere(void)
{
    const int32_t ccs[] = {80, SM90, 100}, dims[] = {64, 96, 128, 256};
    for (size_t i = 0; i < sizeof ccs / sizeof ccs[0]; i++)
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
            for (int m = 0; m < SCHED_MASK_COUNT; m++)
                for (int band = 0; band <= 1; band++) {
                    enum sched_kind k = cuattn_auto_schedule(ccs[i], dims[d], (enum sched_mask)m, band);
                    CU_ASSERT(k > SCHED_AUTO && k < SCHED_KIND_COUNT && sched_is_deterministic(k));
                }
}

int suite_attn_auto(void)
{
    CU_pSuite s = CU_add_suite("attn_auto", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_attn_auto_sm90_names_spt_at_head_dim_96_causal);
    ADD_TEST(s, test_attn_auto_sm90_names_shift_elsewhere_in_the_table);
    ADD_TEST(s, test_attn_auto_band_names_spt_on_every_architecture);
    ADD_TEST(s, test_attn_auto_architecture_without_a_table_names_shift);
    ADD_TEST(s, test_attn_auto_sm90_head_dim_without_a_row_names_shift);
    ADD_TEST(s, test_attn_auto_names_a_deterministic_schedule_everywhere);
    return 0;
}
