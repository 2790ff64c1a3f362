// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_dag.c - the DAG model against the paper's closed forms, its deadlock detection,
 * its DOT output, and the `auto` rule.
 */
#include "suites.h"
#include "testutil.h"
#include "kernels/sched/dag.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double makespan(enum sched_kind kind, enum sched_mask mask, int32_t tiles, int32_t heads,
                       int32_t sms, int32_t w, double c, double r)
{
    struct sched_shape sh = {1, heads, tiles, tiles, 1, 1, mask, 0, 0, 0};
    struct sched s;
    struct dag_stats st;
    if (sched_init(&s, kind, &sh, w) != 0)
        return -1;
    int rc = dag_model(&s, sms, c, r, NULL, NULL, &st);
    return rc == 0 ? st.makespan : rc;
}

/* One head, n SMs = n kv-tiles = n q-tiles (kernels.md section 4). */
static void test_dag_one_head_matches_closed_forms(void)
{
    const double costs[][2] = {{1, 0.25}, {1, 0.5}, {3, 1}, {1, 0}};
    for (size_t ci = 0; ci < sizeof costs / sizeof costs[0]; ci++) {
        double c = costs[ci][0], r = costs[ci][1];
        for (int32_t n = 1; n <= 24; n++) {
            double naive = n * (c + r) + (n - 1) * r, bound = n * (c + r);
            CU_ASSERT_DOUBLE_EQUAL(makespan(SCHED_ASCENDING, SCHED_MASK_FULL, n, 1, n, n, c, r), naive, 1e-9);
            CU_ASSERT_DOUBLE_EQUAL(makespan(SCHED_SHIFT, SCHED_MASK_FULL, n, 1, n, n, c, r), bound, 1e-9);
            CU_ASSERT_DOUBLE_EQUAL(makespan(SCHED_ASCENDING, SCHED_MASK_CAUSAL, n, 1, n, n, c, r), naive, 1e-9);
            CU_ASSERT_DOUBLE_EQUAL(makespan(SCHED_DESCENDING, SCHED_MASK_CAUSAL, n, 1, n, n, c, r), bound, 1e-9);
        }
    }
}

/* m heads on n SMs, descending causal: m (n+1)(c+r)/2 + (n-1) r. The model's greedy
 * dispatch reproduces the estimate exactly when the heads pair up (m even); with an odd
 * head count the last head's columns cannot be balanced and up to half a column of work,
 * (n-1)(c+r)/2, is left over. One head alone takes n (c+r) (closed form above). */
static void test_dag_multi_head_descending_matches_estimate(void)
{
    const double c = 1, r = 0.25;
    for (int32_t m = 2; m <= 8; m++)
        for (int32_t n = 2; n <= 16; n++) {
            double est = m * (n + 1) * (c + r) / 2 + (n - 1) * r;
            double got = makespan(SCHED_DESCENDING, SCHED_MASK_CAUSAL, n, m, n, n, c, r);
            if (m % 2 == 0) {
                CU_ASSERT_DOUBLE_EQUAL(got, est, 1e-9);
            } else {
                CU_ASSERT(got >= est - 1e-9);
                CU_ASSERT(got <= est + (n - 1) * (c + r) / 2 + 1e-9);
            }
        }
}

/* Nothing beats the work bound; atomic (no chain) is never slower than a chain. */
static void test_dag_makespan_respects_work_bound(void)
{
    for (int mask = 0; mask < SCHED_MASK_COUNT; mask++)
        for (int kind = SCHED_ATOMIC; kind < SCHED_KIND_COUNT; kind++)
            for (int32_t sms = 1; sms <= 9; sms += 4) {
                struct sched_shape sh = {2, 3, 7 * 4 - 1, 5 * 3, 4, 3, (enum sched_mask)mask, 0, 0, 0};
                struct sched s, a;
                struct dag_stats st, at;
                CU_ASSERT_FATAL(sched_init(&s, (enum sched_kind)kind, &sh, 4) == 0);
                CU_ASSERT_FATAL(sched_init(&a, SCHED_ATOMIC, &sh, 4) == 0);
                int rc = dag_model(&s, sms, 1, 0.25, NULL, NULL, &st);
                if (kind == SCHED_SHIFT && sms < 4) {
                    CU_ASSERT(rc == 0 || rc == -EDEADLK);
                    continue;
                }
                CU_ASSERT_FATAL(rc == 0);
                CU_ASSERT_FATAL(dag_model(&a, sms, 1, 0.25, NULL, NULL, &at) == 0);
                CU_ASSERT(st.makespan >= st.work / sms - 1e-9);
                CU_ASSERT(st.makespan >= at.makespan - 1e-9);
                CU_ASSERT_EQUAL(st.additions, at.additions);
            }
}

/* Shift with fewer SMs than jobs in a chunk has a wait cycle; with W SMs or more it never
 * has, and neither do the fixed orders on any SM count. */
static void test_dag_reports_deadlock_only_when_sms_below_chunk(void)
{
    CU_ASSERT_EQUAL(makespan(SCHED_SHIFT, SCHED_MASK_FULL, 8, 1, 2, 8, 1, 0.25), -EDEADLK);
    CU_ASSERT(makespan(SCHED_SHIFT, SCHED_MASK_FULL, 8, 1, 8, 8, 1, 0.25) > 0);
    CU_ASSERT(makespan(SCHED_SHIFT, SCHED_MASK_FULL, 8, 1, 2, 2, 1, 0.25) > 0);
    CU_ASSERT(makespan(SCHED_SHIFT, SCHED_MASK_FULL, 8, 3, 13, 8, 1, 0.25) > 0);
    for (int kind = SCHED_ASCENDING; kind < SCHED_SHIFT; kind++)
        for (int32_t sms = 1; sms <= 5; sms++)
            CU_ASSERT(makespan((enum sched_kind)kind, SCHED_MASK_CAUSAL, 9, 2, sms, 64, 1, 0.25) > 0);
}

static void test_dag_rejects_bad_arguments(void)
{
    struct sched_shape sh = {1, 1, 4, 4, 1, 1, SCHED_MASK_FULL, 0, 0, 0};
    struct sched s;
    struct dag_stats st;
    CU_ASSERT_FATAL(sched_init(&s, SCHED_SHIFT, &sh, 4) == 0);
    CU_ASSERT_EQUAL(dag_model(NULL, 4, 1, 1, NULL, NULL, &st), -EINVAL);
    CU_ASSERT_EQUAL(dag_model(&s, 0, 1, 1, NULL, NULL, &st), -EINVAL);
    CU_ASSERT_EQUAL(dag_model(&s, 4, -1, 1, NULL, NULL, &st), -EINVAL);
    CU_ASSERT_EQUAL(dag_model(&s, 4, 1, NAN, NULL, NULL, &st), -EINVAL);
    CU_ASSERT_EQUAL(dag_model(&s, 4, 1, 1, NULL, NULL, NULL), -EINVAL);
    enum sched_kind k;
    CU_ASSERT_EQUAL(dag_auto(NULL, 4, &k), -EINVAL);
    sh.seqlen_q = 0;
    CU_ASSERT_EQUAL(dag_auto(&sh, 4, &k), -EINVAL);
}

static void test_dag_dot_has_every_node_and_chain(void)
{
    struct sched_shape sh = {1, 1, 3, 3, 1, 1, SCHED_MASK_FULL, 0, 0, 0};
    struct sched s;
    CU_ASSERT_FATAL(sched_init(&s, SCHED_SHIFT, &sh, 3) == 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CU_ASSERT_FATAL(f != NULL);
    CU_ASSERT_EQUAL(dag_write_dot(f, &s, 3, 1, 0.25), 0);
    fclose(f);
    CU_ASSERT(strncmp(buf, "digraph", 7) == 0);
    int c_nodes = 0, chain = 0;
    for (char *p = buf; (p = strstr(p, "shape=box")); p++)
        c_nodes++;
    for (char *p = buf; (p = strstr(p, "color=red")); p++)
        chain++;
    CU_ASSERT_EQUAL(c_nodes, 9);   /* 3 x 3 additions */
    CU_ASSERT_EQUAL(chain, 3 * 2); /* per dQ tile, 3 reductions linked by 2 edges */
    CU_ASSERT(strstr(buf, "makespan 3.75") != NULL);
    free(buf);
}

/* auto picks the smallest modelled makespan; for one causal head that is descending or
 * spt (n(c+r)), for a full mask shift; the pick is the same whatever the machine. */
static void test_dag_auto_picks_fastest_modelled_schedule(void)
{
    enum sched_kind k;
    struct sched_shape full = {1, 1, 8 * 64, 8 * 64, 64, 64, SCHED_MASK_FULL, 0, 0, 0};
    CU_ASSERT_EQUAL(dag_auto(&full, 8, &k), 0);
    CU_ASSERT_EQUAL(k, SCHED_SHIFT);
    struct sched_shape causal = {1, 1, 8 * 64, 8 * 64, 64, 64, SCHED_MASK_CAUSAL, 0, 0, 0};
    CU_ASSERT_EQUAL(dag_auto(&causal, 8, &k), 0);
    CU_ASSERT_EQUAL(k, SCHED_DESCENDING); /* ties with spt go to the simpler, listed first */
    /* a big shape still resolves quickly (heads, then tiles, are reduced for the model) */
    struct sched_shape big = {4, 32, 1 << 16, 1 << 16, 64, 64, SCHED_MASK_CAUSAL, 0, 0, 0};
    CU_ASSERT_EQUAL(dag_auto(&big, SCHED_W_DEFAULT, &k), 0);
    CU_ASSERT(sched_is_deterministic(k));
}

/* The cache answers exactly what dag_auto answers, also after it has wrapped around. */
static void test_dag_auto_cache_gives_dag_auto_answers(void)
{
    struct dag_auto_cache c;
    memset(&c, 0, sizeof c);
    for (int round = 0; round < 2; round++)
        for (int32_t t = 1; t <= DAG_AUTO_CACHE + 5; t++) {
            struct sched_shape sh;
            memset(&sh, 0, sizeof sh);
            sh.batch = 1, sh.heads = 1 + t % 3, sh.seqlen_q = sh.seqlen_k = t * 16;
            sh.block_m = sh.block_n = 16, sh.mask = (enum sched_mask)(t % 2);
            enum sched_kind want, got = SCHED_AUTO;
            CU_ASSERT_EQUAL_FATAL(dag_auto(&sh, 4, &want), 0);
            CU_ASSERT_EQUAL(dag_auto_cached(&c, &sh, 4, &got), 0);
            CU_ASSERT_EQUAL(got, want);
        }
    CU_ASSERT_EQUAL(dag_auto_cached(NULL, NULL, 4, NULL), -EINVAL);
}

/* Packed batches and windows in the model: on W SMs (any SM count for the fixed orders)
 * every schedule completes; the model executes exactly the visits the schedules list
 * (tiles outside a band are not visited), never beats the work bound, and a batch packed
 * in another order has the same additions. */
static void test_dag_models_ragged_batches_and_windows_without_deadlock(void)
{
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x646167ULL);
    for (int trial = 0; trial < 60; trial++) {
        const int32_t nseq = 1 + (int32_t)(tu_next(&r) % 6), w = 1 + (int32_t)(tu_next(&r) % 8);
        int32_t lq[6], lk[6];
        for (int32_t q = 0; q < nseq; q++) {
            lq[q] = 1 + (int32_t)(tu_next(&r) % 300);
            lk[q] = trial % 3 ? lq[q] : 1 + (int32_t)(tu_next(&r) % 300);
        }
        const int window = trial % 4 != 0;
        const int32_t left = (int32_t)(tu_next(&r) % 200) - 1, right = (int32_t)(tu_next(&r) % 50) - 1;
        for (int kind = SCHED_ATOMIC; kind < SCHED_KIND_COUNT; kind++) {
            struct sched seqs[6], rev[6];
            int64_t visits = 0;
            for (int32_t q = 0; q < nseq; q++) {
                struct sched_shape sh = {.batch = 1, .heads = 2, .seqlen_q = lq[q], .seqlen_k = lk[q],
                                         .block_m = 32, .block_n = 16,
                                         .mask = trial % 2 ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL,
                                         .window = window, .window_left = left,
                                         .window_right = right};
                CU_ASSERT_FATAL(sched_init(&seqs[q], (enum sched_kind)kind, &sh, w) == 0);
                rev[nseq - 1 - q] = seqs[q];
                for (int32_t n = 0; n < seqs[q].n_tiles; n++)
                    visits += (int64_t)seqs[q].bh * sched_unit_steps(&seqs[q], n);
            }
            for (int32_t sms = kind == SCHED_SHIFT ? w : 1; sms <= w + 2; sms += 3) {
                struct dag_stats st, st2;
                CU_ASSERT_FATAL(dag_model_seqs(seqs, nseq, sms, 1, 0.25, NULL, NULL, &st) == 0);
                CU_ASSERT_FATAL(dag_model_seqs(rev, nseq, sms, 1, 0.25, NULL, NULL, &st2) == 0);
                CU_ASSERT_EQUAL(st.additions, visits);
                CU_ASSERT_EQUAL(st2.additions, visits);
                CU_ASSERT(st.makespan >= st.work / sms - 1e-9);
            }
        }
    }
    /* mixed kinds are refused */
    struct sched_shape sh = {.batch = 1, .heads = 1, .seqlen_q = 10, .seqlen_k = 10, .block_m = 4,
                             .block_n = 4};
    struct sched two[2];
    struct dag_stats st;
    CU_ASSERT_FATAL(sched_init(&two[0], SCHED_SPT, &sh, 4) == 0);
    CU_ASSERT_FATAL(sched_init(&two[1], SCHED_SHIFT, &sh, 4) == 0);
    CU_ASSERT_EQUAL(dag_model_seqs(two, 2, 4, 1, 0.25, NULL, NULL, &st), -EINVAL);
}

/* An SM that becomes idle takes the next job in dispatch order; the SM that frees up first
 * takes it, whatever order the model happens to evaluate the SMs in. One q-tile, three
 * kv-tiles, three heads, ascending, 5 SMs: jobs 0-4 start at 0; heads 0 and 1 each add in
 * turn, so SMs 0 and 3 are free at 1.25 (jobs 5 and 6), SMs 1 and 4 at 1.5 (jobs 7 and
 * 8). Job 6 (head 2, kv-tile 0) runs on SM 3 from 1.25; job 8 ends at 3. */
struct first_free_ctx {
    int32_t sm;
    double c_start;
};

static void first_free_visit(void *p, int32_t sm, int32_t bh, int32_t m, int32_t n, double c_start,
                             double r_start, double r_end)
{
    struct first_free_ctx *x = p;
    (void)m, (void)r_start, (void)r_end;
    if (bh == 2 && n == 0) {
        x->sm = sm;
        x->c_start = c_start;
    }
}

static void test_dag_sms_take_jobs_in_the_order_they_become_free(void)
{
    struct sched_shape sh = {1, 3, 1, 3, 1, 1, SCHED_MASK_FULL, 0, 0, 0};
    struct sched s;
    struct dag_stats st;
    struct first_free_ctx x = {-1, -1};
    CU_ASSERT_FATAL(sched_init(&s, SCHED_ASCENDING, &sh, 64) == 0);
    CU_ASSERT_FATAL(dag_model(&s, 5, 1, 0.25, first_free_visit, &x, &st) == 0);
    CU_ASSERT_EQUAL(x.sm, 3);
    CU_ASSERT_DOUBLE_EQUAL(x.c_start, 1.25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(st.makespan, 3.0, 1e-12);
}

int suite_dag(void)
{
    CU_pSuite s = CU_add_suite("dag", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_dag_one_head_matches_closed_forms);
    ADD_TEST(s, test_dag_multi_head_descending_matches_estimate);
    ADD_TEST(s, test_dag_makespan_respects_work_bound);
    ADD_TEST(s, test_dag_reports_deadlock_only_when_sms_below_chunk);
    ADD_TEST(s, test_dag_rejects_bad_arguments);
    ADD_TEST(s, test_dag_dot_has_every_node_and_chain);
    ADD_TEST(s, test_dag_auto_picks_fastest_modelled_schedule);
    ADD_TEST(s, test_dag_auto_cache_gives_dag_auto_answers);
    ADD_TEST(s, test_dag_models_ragged_batches_and_windows_without_deadlock);
    ADD_TEST(s, test_dag_sms_take_jobs_in_the_order_they_become_free);
    return 0;
}
