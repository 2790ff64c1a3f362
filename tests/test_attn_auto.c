// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_attn_auto.c - which schedule `auto` names on the CUDA backend (kernels/cuda/
 * attn_auto.h), without a GPU: the sm_90 table measured on an H200, a band's rule, and
 * today's rule on architectures without a table.
 */
#include "suites.h"
#include "kernels/cuda/attn_auto.h"

#include "kernels/attn/problem.h"

#include <string.h>

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

/* A problem of head dim d and mask m with window (l, r) (window 0 where both are -1 and
 * there is none), max lengths s; packed: cu_seqlens set (its values are not read here). */
static struct attn_problem problem_with(int32_t d, enum sched_mask m, int32_t l, int32_t r, int32_t s,
                                        const int32_t *cu)
{
    struct attn_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = p.heads_kv = 1;
    p.head_dim = d;
    p.mask = m;
    p.seqlen_q = p.seqlen_k = s;
    p.window = l >= 0 || r >= 0;
    p.window_left = l;
    p.window_right = r;
    p.cu_seqlens_q = p.cu_seqlens_k = cu;
    return p;
}

/* A packed batch's max lengths are its longest sequence's: a window judged on them would
 * name another schedule for the same short sequence once a long one joins the batch (and
 * so give it other bits, batch_invariant or not). Judged on the window alone, it names one. */
static void test_attn_auto_packed_batch_with_a_window_names_one_schedule_whatever_its_lengths(void)
{
    static const int32_t cu[] = {0, 800};
    for (int32_t d = 64; d <= 128; d += 32) {
        const struct attn_problem alone = problem_with(d, SCHED_MASK_CAUSAL, 1000, 0, 800, cu);
        const struct attn_problem with_long = problem_with(d, SCHED_MASK_CAUSAL, 1000, 0, 5000, cu);
        CU_ASSERT_EQUAL(cuattn_auto_for(SM90, &alone), cuattn_auto_for(SM90, &with_long));
        CU_ASSERT_EQUAL(cuattn_auto_for(SM90, &alone), SCHED_SPT);
        CU_ASSERT_EQUAL(cuattn_auto_for(80, &alone), cuattn_auto_for(80, &with_long));
    }
    /* without a window the table's entry, at any lengths */
    const struct attn_problem plain = problem_with(96, SCHED_MASK_CAUSAL, -1, -1, 800, cu);
    const struct attn_problem plain_long = problem_with(96, SCHED_MASK_CAUSAL, -1, -1, 5000, cu);
    CU_ASSERT_EQUAL(cuattn_auto_for(SM90, &plain), SCHED_SPT);
    CU_ASSERT_EQUAL(cuattn_auto_for(SM90, &plain_long), SCHED_SPT);
    const struct attn_problem full = problem_with(128, SCHED_MASK_FULL, -1, -1, 800, cu);
    CU_ASSERT_EQUAL(cuattn_auto_for(SM90, &full), SCHED_SHIFT);
}

/* A dense problem's window past its lengths is its plain mask (the dense kernels serve it,
 * with the plain mask's bits), so auto names the plain mask's schedule; a window that
 * leaves a band names spt. */
static void test_attn_auto_dense_window_past_its_lengths_names_the_plain_masks_schedule(void)
{
    const struct attn_problem past96 = problem_with(96, SCHED_MASK_CAUSAL, 5000, 0, 1000, NULL);
    const struct attn_problem past128 = problem_with(128, SCHED_MASK_CAUSAL, 5000, 0, 1000, NULL);
    const struct attn_problem full_as_causal = problem_with(128, SCHED_MASK_FULL, -1, 0, 1000, NULL);
    const struct attn_problem band = problem_with(128, SCHED_MASK_CAUSAL, 300, 0, 1000, NULL);
    CU_ASSERT_EQUAL(cuattn_auto_for(SM90, &past96), SCHED_SPT);    /* the table's 96 causal */
    CU_ASSERT_EQUAL(cuattn_auto_for(SM90, &past128), SCHED_SHIFT); /* the table's 128 causal */
    CU_ASSERT_EQUAL(cuattn_auto_for(SM90, &full_as_causal), cuattn_auto_schedule(SM90, 128, SCHED_MASK_CAUSAL, 0));
    CU_ASSERT_EQUAL(cuattn_auto_for(SM90, &band), SCHED_SPT);
    CU_ASSERT_EQUAL(cuattn_auto_for(80, &band), SCHED_SPT);
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
    ADD_TEST(s, test_attn_auto_packed_batch_with_a_window_names_one_schedule_whatever_its_lengths);
    ADD_TEST(s, test_attn_auto_dense_window_past_its_lengths_names_the_plain_masks_schedule);
    return 0;
}
