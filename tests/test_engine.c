// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_engine.c - the CPU engine against the float64 reference, and its determinism as
 * bytes: every deterministic schedule gives identical dQ/dK/dV for 1..8 threads and on
 * every repeat, whatever the tile sizes, W, mask, GQA ratio or strides. Inputs are fresh
 * random draws each run (seed printed by the runner); outputs are poisoned beforehand.
 */
#include "suites.h"
#include "testutil.h"
#include "kernels/cpu/engine.h"
#include "kernels/attn/ref.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fixtures ---------------------------------------------------------------------- */

struct attn {
    struct attn_problem p;
    int64_t nq, nk, nlse; /* elements of q-shaped, k-shaped tensors, and of lse */
    void *q, *k, *v, *out, *dout, *dq, *dk, *dv;
    float *lse;
};

static struct attn_tensor dense_q(const struct attn *a, void *data)
{
    return attn_dense(data, a->p.seqlen_q, a->p.heads_q, a->p.head_dim);
}

static struct attn_tensor dense_k(const struct attn *a, void *data)
{
    return attn_dense(data, a->p.seqlen_k, a->p.heads_kv, a->p.head_dim);
}

static void attn_init(struct attn *a, const struct attn_problem *p, struct tu_rng *r)
{
    memset(a, 0, sizeof *a);
    a->p = *p;
    a->nq = (int64_t)p->batch * p->seqlen_q * p->heads_q * p->head_dim;
    a->nk = (int64_t)p->batch * p->seqlen_k * p->heads_kv * p->head_dim;
    a->nlse = (int64_t)p->batch * p->heads_q * p->seqlen_q;
    size_t es = (size_t)dtype_size(p->dtype);
    a->q = malloc(es * (size_t)a->nq);
    a->out = malloc(es * (size_t)a->nq);
    a->dout = malloc(es * (size_t)a->nq);
    a->dq = malloc(es * (size_t)a->nq);
    a->k = malloc(es * (size_t)a->nk);
    a->v = malloc(es * (size_t)a->nk);
    a->dk = malloc(es * (size_t)a->nk);
    a->dv = malloc(es * (size_t)a->nk);
    a->lse = malloc(sizeof(float) * (size_t)a->nlse);
    tu_fill(a->q, p->dtype, a->nq, r, 1.0);
    tu_fill(a->k, p->dtype, a->nk, r, 1.0);
    tu_fill(a->v, p->dtype, a->nk, r, 1.0);
    tu_fill(a->dout, p->dtype, a->nq, r, 1.0);
    tu_poison(a->out, es * (size_t)a->nq);
    tu_poison(a->lse, sizeof(float) * (size_t)a->nlse);
}

static void attn_free(struct attn *a)
{
    free(a->q);
    free(a->k);
    free(a->v);
    free(a->out);
    free(a->dout);
    free(a->dq);
    free(a->dk);
    free(a->dv);
    free(a->lse);
}

static int run_forward(struct eng *e, struct attn *a, const struct attn_config *cfg)
{
    return eng_forward(e, &a->p, cfg, dense_q(a, a->out), a->lse, dense_q(a, a->q),
                       dense_k(a, a->k), dense_k(a, a->v), NULL);
}

static int run_backward(struct eng *e, struct attn *a, const struct attn_config *cfg,
                        struct attn_config *ret_cfg)
{
    size_t es = (size_t)dtype_size(a->p.dtype);
    tu_poison(a->dq, es * (size_t)a->nq);
    tu_poison(a->dk, es * (size_t)a->nk);
    tu_poison(a->dv, es * (size_t)a->nk);
    return eng_backward(e, &a->p, cfg, dense_q(a, a->dq), dense_k(a, a->dk), dense_k(a, a->dv),
                        dense_q(a, a->q), dense_k(a, a->k), dense_k(a, a->v), dense_q(a, a->out),
                        a->lse, dense_q(a, a->dout), ret_cfg);
}

static double rel_err(const void *got, enum dtype_kind t, const double *ref, int64_t n)
{
    double *g = malloc(sizeof(double) * (size_t)n);
    tu_to_double(got, t, n, g);
    double e = ref_rel_error(g, ref, n);
    free(g);
    return e;
}

static double tolerance(enum dtype_kind t)
{
    return t == DTYPE_F32 ? 1e-5 : t == DTYPE_F16 ? 5e-3 : 1e-2;
}

struct shape_case {
    int32_t batch, sq, sk, hq, hkv, d;
    enum dtype_kind dtype;
    enum sched_mask mask;
    int32_t bm, bn, w;
};

/* Odd sizes on purpose: seqlens that are not multiples of the tiles, seqlen_q != seqlen_k
 * both ways (causal rows that see no key), seqlen 1, GQA ratios 1, 2, 8, non-integer tile
 * ratios, head dims from 32 to 256, and W smaller than the number of kv-tiles. */
static const struct shape_case cases[] = {
    {2, 37, 53, 4, 4, 64, DTYPE_F32, SCHED_MASK_FULL, 16, 16, 3},
    {1, 53, 37, 4, 2, 32, DTYPE_F32, SCHED_MASK_CAUSAL, 16, 8, 64},
    {1, 17, 81, 6, 3, 96, DTYPE_F32, SCHED_MASK_CAUSAL, 8, 16, 2},
    {2, 64, 64, 8, 1, 64, DTYPE_BF16, SCHED_MASK_CAUSAL, 64, 64, 64},
    {1, 1, 1, 2, 1, 32, DTYPE_BF16, SCHED_MASK_CAUSAL, 64, 64, 64},
    {1, 1, 40, 2, 2, 32, DTYPE_BF16, SCHED_MASK_FULL, 64, 16, 64},
    {1, 100, 70, 2, 2, 128, DTYPE_F16, SCHED_MASK_FULL, 32, 48, 4},
    {1, 90, 90, 2, 2, 128, DTYPE_BF16, SCHED_MASK_CAUSAL, 64, 96, 64},
    {1, 33, 33, 4, 2, 256, DTYPE_BF16, SCHED_MASK_CAUSAL, 16, 24, 2},
};

static struct attn_problem problem_of(const struct shape_case *c)
{
    struct attn_problem p = {.batch = c->batch, .seqlen_q = c->sq, .seqlen_k = c->sk, .heads_q = c->hq, .heads_kv = c->hkv, .head_dim = c->d, .dtype = c->dtype, .mask = c->mask, .scale = (float)(1.0 / sqrt((double)c->d))};
    return p;
}

/* ---- tests ------------------------------------------------------------------------- */

static void test_engine_matches_float64_reference_for_every_schedule(void)
{
    struct eng *e = eng_new(2);
    CU_ASSERT_FATAL(e != NULL);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x1234);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const struct shape_case *c = &cases[ci];
        struct attn_problem p = problem_of(c);
        struct attn a;
        attn_init(&a, &p, &r);
        double *out = malloc(sizeof(double) * (size_t)a.nq), *lse = malloc(sizeof(double) * (size_t)a.nlse);
        double *dq = malloc(sizeof(double) * (size_t)a.nq);
        double *dk = malloc(sizeof(double) * (size_t)a.nk), *dv = malloc(sizeof(double) * (size_t)a.nk);
        CU_ASSERT_FATAL(ref_forward(&p, dense_q(&a, a.q), dense_k(&a, a.k), dense_k(&a, a.v), out, lse) == 0);
        CU_ASSERT_FATAL(ref_backward(&p, dense_q(&a, a.q), dense_k(&a, a.k), dense_k(&a, a.v),
                                     dense_q(&a, a.dout), dq, dk, dv) == 0);
        struct attn_config cfg = {SCHED_AUTO, c->w, c->bm, c->bn, 0};
        CU_ASSERT_EQUAL_FATAL(run_forward(e, &a, &cfg), 0);
        double tol = tolerance(p.dtype), err = rel_err(a.out, p.dtype, out, a.nq);
        if (!(err < tol))
            fprintf(stderr, "\n  case %zu forward: rel error %.3g (limit %.0g)", ci, err, tol);
        CU_ASSERT(err < tol);
        int lse_bad = 0;
        for (int64_t i = 0; i < a.nlse; i++)
            lse_bad += isinf(lse[i]) ? !(isinf(a.lse[i]) && a.lse[i] > 0)
                                     : !(fabs(a.lse[i] - lse[i]) <= 1e-4 * (1 + fabs(lse[i])));
        CU_ASSERT_EQUAL(lse_bad, 0);

        for (int kind = 0; kind < SCHED_KIND_COUNT; kind++) {
            cfg.sched = (enum sched_kind)kind;
            struct attn_config used;
            CU_ASSERT_EQUAL_FATAL(run_backward(e, &a, &cfg, &used), 0);
            CU_ASSERT(used.sched != SCHED_AUTO);
            double eq = rel_err(a.dq, p.dtype, dq, a.nq);
            double ek = rel_err(a.dk, p.dtype, dk, a.nk);
            double ev = rel_err(a.dv, p.dtype, dv, a.nk);
            if (!(eq < tol && ek < tol && ev < tol))
                fprintf(stderr, "\n  case %zu %s: rel error dq %.3g dk %.3g dv %.3g (limit %.0g)", ci,
                        sched_kind_name(cfg.sched), eq, ek, ev, tol);
            CU_ASSERT(eq < tol);
            CU_ASSERT(ek < tol);
            CU_ASSERT(ev < tol);
        }
        free(out);
        free(lse);
        free(dq);
        free(dk);
        free(dv);
        attn_free(&a);
    }
    eng_free(e);
}

/* Copies of the gradients of one run, to compare bytes with. */
struct grads {
    void *dq, *dk, *dv;
    size_t qb, kb;
};

static void grads_take(struct grads *g, const struct attn *a)
{
    size_t es = (size_t)dtype_size(a->p.dtype);
    g->qb = es * (size_t)a->nq;
    g->kb = es * (size_t)a->nk;
    g->dq = malloc(g->qb);
    g->dk = malloc(g->kb);
    g->dv = malloc(g->kb);
    memcpy(g->dq, a->dq, g->qb);
    memcpy(g->dk, a->dk, g->kb);
    memcpy(g->dv, a->dv, g->kb);
}

static int grads_equal(const struct grads *g, const struct attn *a)
{
    return memcmp(g->dq, a->dq, g->qb) == 0 && memcmp(g->dk, a->dk, g->kb) == 0 &&
           memcmp(g->dv, a->dv, g->kb) == 0;
}

static void grads_free(struct grads *g)
{
    free(g->dq);
    free(g->dk);
    free(g->dv);
}

static void test_engine_backward_bits_identical_for_1_to_8_threads_and_repeats(void)
{
    struct eng *engines[8];
    for (int t = 0; t < 8; t++) {
        engines[t] = eng_new(t + 1);
        CU_ASSERT_FATAL(engines[t] != NULL);
        CU_ASSERT_EQUAL(eng_threads(engines[t]), t + 1);
    }
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x5678);
    const struct shape_case det_cases[] = {
        {2, 150, 150, 4, 2, 64, DTYPE_BF16, SCHED_MASK_CAUSAL, 16, 16, 4},
        {1, 96, 130, 3, 3, 32, DTYPE_F32, SCHED_MASK_FULL, 16, 24, 64},
        {1, 77, 77, 8, 1, 32, DTYPE_F16, SCHED_MASK_CAUSAL, 8, 12, 5},
    };
    int mismatches = 0;
    for (size_t ci = 0; ci < sizeof det_cases / sizeof det_cases[0]; ci++) {
        struct attn_problem p = problem_of(&det_cases[ci]);
        struct attn a;
        attn_init(&a, &p, &r);
        struct attn_config cfg = {SCHED_ASCENDING, det_cases[ci].w, det_cases[ci].bm, det_cases[ci].bn, 0};
        CU_ASSERT_EQUAL_FATAL(run_forward(engines[0], &a, &cfg), 0);
        for (int kind = SCHED_ASCENDING; kind < SCHED_KIND_COUNT; kind++) {
            cfg.sched = (enum sched_kind)kind;
            CU_ASSERT_EQUAL_FATAL(run_backward(engines[0], &a, &cfg, NULL), 0);
            struct grads base;
            grads_take(&base, &a);
            for (int t = 1; t < 8; t++) {
                for (int rep = 0; rep < (t == 2 ? 3 : 1); rep++) {
                    CU_ASSERT_EQUAL_FATAL(run_backward(engines[t], &a, &cfg, NULL), 0);
                    if (!grads_equal(&base, &a) && mismatches++ < 5)
                        fprintf(stderr, "\n  case %zu %s: %d threads differ from 1 thread", ci,
                                sched_kind_name(cfg.sched), t + 1);
                }
            }
            grads_free(&base);
        }
        attn_free(&a);
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    for (int t = 0; t < 8; t++)
        eng_free(engines[t]);
}

/* Tile sizes whose P and dS tiles are not a multiple of 64 bytes (bm * bn not a multiple
 * of 16): each thread's scratch must still hold its four aligned pieces, or a thread's dS
 * runs into the next thread's Q and the gradients depend on the thread count. */
static void test_engine_backward_bits_identical_across_threads_at_unaligned_tile_sizes(void)
{
    struct eng *e1 = eng_new(1), *en[2] = {eng_new(3), eng_new(4)};
    CU_ASSERT_FATAL(e1 && en[0] && en[1]);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x0dd7);
    const struct shape_case det_cases[] = {
        {1, 40, 40, 2, 2, 32, DTYPE_F32, SCHED_MASK_FULL, 2, 3, 64},   /* P, dS: 24 bytes each */
        {2, 40, 33, 2, 1, 32, DTYPE_F32, SCHED_MASK_CAUSAL, 2, 3, 16},
        {1, 64, 64, 2, 2, 32, DTYPE_BF16, SCHED_MASK_FULL, 1, 7, 64},  /* 28 bytes each */
    };
    int mismatches = 0;
    for (size_t ci = 0; ci < sizeof det_cases / sizeof det_cases[0]; ci++) {
        struct attn_problem p = problem_of(&det_cases[ci]);
        struct attn a;
        attn_init(&a, &p, &r);
        struct attn_config cfg = {SCHED_ASCENDING, det_cases[ci].w, det_cases[ci].bm, det_cases[ci].bn, 0};
        CU_ASSERT_EQUAL_FATAL(run_forward(e1, &a, &cfg), 0);
        for (int kind = SCHED_ASCENDING; kind < SCHED_KIND_COUNT; kind++) {
            cfg.sched = (enum sched_kind)kind;
            CU_ASSERT_EQUAL_FATAL(run_backward(e1, &a, &cfg, NULL), 0);
            struct grads base;
            grads_take(&base, &a);
            for (int rep = 0; rep < 16; rep++) {
                CU_ASSERT_EQUAL_FATAL(run_backward(en[rep % 2], &a, &cfg, NULL), 0);
                if (!grads_equal(&base, &a) && mismatches++ < 5)
                    fprintf(stderr, "\n  case %zu %s: %d threads differ from 1 thread", ci,
                            sched_kind_name(cfg.sched), eng_threads(en[rep % 2]));
            }
            grads_free(&base);
        }
        attn_free(&a);
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    eng_free(e1);
    eng_free(en[0]);
    eng_free(en[1]);
}

/* float64 is computed in double: within 1e-12 of the reference (fp32 arithmetic would be
 * 1e-7 away), the same bits for 1 and 3 threads and for every schedule, rows that see no
 * key give O = 0, LSE = +inf, dQ = 0, and GQA sums its query heads. */
static void test_engine_f64_matches_the_reference_to_double_precision_with_the_same_bits(void)
{
    struct eng *e1 = eng_new(1), *e3 = eng_new(3);
    CU_ASSERT_FATAL(e1 && e3);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xf64);
    const struct shape_case cases[] = {
        {2, 37, 53, 4, 2, 32, DTYPE_F64, SCHED_MASK_CAUSAL, 16, 16, 64},
        {1, 70, 20, 3, 1, 64, DTYPE_F64, SCHED_MASK_CAUSAL, 64, 64, 64}, /* rows with no key */
        {1, 33, 65, 2, 2, 96, DTYPE_F64, SCHED_MASK_FULL, 64, 64, 64},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct attn a;
        attn_init(&a, &p, &r);
        double *out = malloc(sizeof(double) * (size_t)a.nq), *lse = malloc(sizeof(double) * (size_t)a.nlse);
        double *dq = malloc(sizeof(double) * (size_t)a.nq), *dk = malloc(sizeof(double) * (size_t)a.nk),
               *dv = malloc(sizeof(double) * (size_t)a.nk);
        CU_ASSERT_FATAL(out && lse && dq && dk && dv);
        CU_ASSERT_EQUAL_FATAL(ref_forward(&p, dense_q(&a, a.q), dense_k(&a, a.k), dense_k(&a, a.v), out, lse), 0);
        CU_ASSERT_EQUAL_FATAL(ref_backward(&p, dense_q(&a, a.q), dense_k(&a, a.k), dense_k(&a, a.v),
                                           dense_q(&a, a.dout), dq, dk, dv), 0);
        CU_ASSERT_EQUAL_FATAL(run_forward(e3, &a, NULL), 0);
        double err = rel_err(a.out, DTYPE_F64, out, a.nq);
        CU_ASSERT(err < 1e-12);
        int64_t empty_rows = 0;
        for (int64_t i = 0; i < a.nlse; i++) {
            if (isinf(lse[i])) {
                empty_rows++;
                CU_ASSERT(isinf(a.lse[i]) && a.lse[i] > 0);
            } else {
                CU_ASSERT(fabs(a.lse[i] - lse[i]) <= 1e-6 * (1 + fabs(lse[i])));
            }
        }
        CU_ASSERT(ci != 1 || empty_rows > 0);
        CU_ASSERT_EQUAL_FATAL(run_backward(e3, &a, NULL, NULL), 0);
        double eq = rel_err(a.dq, DTYPE_F64, dq, a.nq), ek = rel_err(a.dk, DTYPE_F64, dk, a.nk),
               ev = rel_err(a.dv, DTYPE_F64, dv, a.nk);
        CU_ASSERT(eq < 1e-11 && ek < 1e-11 && ev < 1e-11);
        if (err >= 1e-12 || eq >= 1e-11 || ek >= 1e-11 || ev >= 1e-11)
            fprintf(stderr, "\n  f64 case %zu: out %.2e dq %.2e dk %.2e dv %.2e", ci, err, eq, ek, ev);
        struct grads base;
        grads_take(&base, &a);
        for (int kind = 0; kind < SCHED_KIND_COUNT; kind++) { /* auto, atomic and every order */
            struct attn_config cfg = {(enum sched_kind)kind, 0, 0, 0, 0};
            CU_ASSERT_EQUAL_FATAL(run_backward(kind % 2 ? e1 : e3, &a, &cfg, NULL), 0);
            CU_ASSERT(grads_equal(&base, &a));
        }
        grads_free(&base);
        free(out), free(lse), free(dq), free(dk), free(dv);
        attn_free(&a);
    }
    /* float64 serves windows and softcap too (tests/test_varlen.c checks their values) */
    struct attn_problem w = problem_of(&cases[0]);
    CU_ASSERT_EQUAL(eng_check_problem(&w), 0);
    w.window = 1, w.window_left = 4, w.window_right = 0;
    CU_ASSERT_EQUAL(eng_check_problem(&w), 0);
    w = problem_of(&cases[0]);
    w.softcap = 30.0f;
    CU_ASSERT_EQUAL(eng_check_problem(&w), 0);
    eng_free(e1);
    eng_free(e3);
}

static void test_engine_forward_bits_identical_across_threads(void)
{
    struct eng *e1 = eng_new(1), *e5 = eng_new(5);
    CU_ASSERT_FATAL(e1 && e5);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x9abc);
    struct attn_problem p = problem_of(&cases[3]);
    struct attn a;
    attn_init(&a, &p, &r);
    size_t qb = (size_t)dtype_size(p.dtype) * (size_t)a.nq, lb = sizeof(float) * (size_t)a.nlse;
    CU_ASSERT_EQUAL_FATAL(run_forward(e1, &a, NULL), 0);
    void *out1 = malloc(qb), *lse1 = malloc(lb);
    memcpy(out1, a.out, qb);
    memcpy(lse1, a.lse, lb);
    tu_poison(a.out, qb);
    tu_poison(a.lse, lb);
    CU_ASSERT_EQUAL_FATAL(run_forward(e5, &a, NULL), 0);
    CU_ASSERT(memcmp(out1, a.out, qb) == 0);
    CU_ASSERT(memcmp(lse1, a.lse, lb) == 0);
    free(out1);
    free(lse1);
    attn_free(&a);
    eng_free(e1);
    eng_free(e5);
}

/* The same values laid out as (batch, heads, seqlen, head_dim) with padding give the same
 * bits as the dense layout: strides change where bytes live, not what is computed. */
static void test_engine_strided_views_give_same_bits(void)
{
    struct eng *e = eng_new(3);
    CU_ASSERT_FATAL(e != NULL);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xdef0);
    struct attn_problem p = problem_of(&cases[1]);
    struct attn a;
    attn_init(&a, &p, &r);
    struct attn_config cfg = {SCHED_SHIFT, 3, 16, 8, 0};
    CU_ASSERT_EQUAL_FATAL(run_forward(e, &a, &cfg), 0);
    CU_ASSERT_EQUAL_FATAL(run_backward(e, &a, &cfg, NULL), 0);

    /* strided copies: (b, h, s, d) with 5 padding elements per row */
    const int32_t D = p.head_dim, pad = 5;
    struct attn_tensor tq, tk, tv, tout, tdout, tdq, tdk, tdv;
    const struct {
        struct attn_tensor *t;
        void *src;
        int32_t seqlen, heads;
    } views[] = {{&tq, a.q, p.seqlen_q, p.heads_q},    {&tk, a.k, p.seqlen_k, p.heads_kv},
                 {&tv, a.v, p.seqlen_k, p.heads_kv},   {&tout, a.out, p.seqlen_q, p.heads_q},
                 {&tdout, a.dout, p.seqlen_q, p.heads_q}, {&tdq, NULL, p.seqlen_q, p.heads_q},
                 {&tdk, NULL, p.seqlen_k, p.heads_kv}, {&tdv, NULL, p.seqlen_k, p.heads_kv}};
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++) {
        int64_t row = D + pad, n = (int64_t)p.batch * views[i].heads * views[i].seqlen * row;
        float *buf = malloc(sizeof(float) * (size_t)n);
        tu_poison(buf, sizeof(float) * (size_t)n);
        struct attn_tensor t = {buf, {views[i].heads * views[i].seqlen * row, row,
                                     views[i].seqlen * row, 1}};
        if (views[i].src) {
            struct attn_tensor src = attn_dense(views[i].src, views[i].seqlen, views[i].heads, D);
            for (int32_t b = 0; b < p.batch; b++)
                for (int32_t s = 0; s < views[i].seqlen; s++)
                    for (int32_t h = 0; h < views[i].heads; h++)
                        memcpy(buf + b * t.stride[0] + s * t.stride[1] + h * t.stride[2],
                               (float *)src.data + b * src.stride[0] + s * src.stride[1] + h * src.stride[2],
                               sizeof(float) * (size_t)D);
        }
        *views[i].t = t;
    }
    CU_ASSERT_EQUAL_FATAL(eng_backward(e, &p, &cfg, tdq, tdk, tdv, tq, tk, tv, tout, a.lse, tdout, NULL), 0);
    int diff = 0;
    const struct {
        struct attn_tensor *t;
        void *dense;
        int32_t seqlen, heads;
    } outs[] = {{&tdq, a.dq, p.seqlen_q, p.heads_q}, {&tdk, a.dk, p.seqlen_k, p.heads_kv},
                {&tdv, a.dv, p.seqlen_k, p.heads_kv}};
    for (size_t i = 0; i < 3; i++) {
        struct attn_tensor d = attn_dense(outs[i].dense, outs[i].seqlen, outs[i].heads, D);
        for (int32_t b = 0; b < p.batch; b++)
            for (int32_t s = 0; s < outs[i].seqlen; s++)
                for (int32_t h = 0; h < outs[i].heads; h++)
                    diff += memcmp((float *)outs[i].t->data + b * outs[i].t->stride[0] +
                                       s * outs[i].t->stride[1] + h * outs[i].t->stride[2],
                                   (float *)d.data + b * d.stride[0] + s * d.stride[1] + h * d.stride[2],
                                   sizeof(float) * (size_t)D) != 0;
    }
    CU_ASSERT_EQUAL(diff, 0);
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++)
        free(views[i].t->data);
    attn_free(&a);
    eng_free(e);
}

/* eng_set_stop's poll: stop once it has been asked `after` times (any worker asks). */
struct stop_after {
    int asked, after;
};

static int stop_after_polls(void *ctx)
{
    struct stop_after *st = ctx;
    return __atomic_add_fetch(&st->asked, 1, __ATOMIC_RELAXED) > st->after;
}

/* Told to stop midway, the forward and every backward schedule (the deterministic ones
 * with virtual SMs waiting for their turns) return -ECANCELED without hanging; the
 * engine then runs the next op whole, with the bits of an engine never stopped. */
static void test_engine_stop_ends_an_op_midway_and_the_next_runs_whole(void)
{
    struct eng *e = eng_new(3), *fresh = eng_new(3);
    CU_ASSERT_FATAL(e != NULL && fresh != NULL);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x5709);
    const struct shape_case c = {2, 300, 300, 4, 2, 64, DTYPE_BF16, SCHED_MASK_CAUSAL, 16, 16, 4};
    struct attn_problem p = problem_of(&c);
    struct attn a;
    attn_init(&a, &p, &r);
    struct attn_config cfg = {SCHED_ASCENDING, c.w, c.bm, c.bn, 0};
    CU_ASSERT_EQUAL_FATAL(run_forward(fresh, &a, &cfg), 0);
    struct stop_after st = {0, 2};
    eng_set_stop(e, stop_after_polls, &st);
    CU_ASSERT_EQUAL(run_forward(e, &a, &cfg), -ECANCELED);
    CU_ASSERT(st.asked > st.after);
    eng_set_stop(e, NULL, NULL);
    CU_ASSERT_EQUAL_FATAL(run_forward(fresh, &a, &cfg), 0); /* the forward's outputs again */
    for (int kind = SCHED_ATOMIC; kind < SCHED_KIND_COUNT; kind++) {
        cfg.sched = (enum sched_kind)kind;
        /* stops early and later: in the row phases, and among virtual SMs that wait for
         * their turns (the polls' share of each phase depends on the threads' timing) */
        int stopped = 0;
        for (int after = 2; after <= 1024; after *= 2) {
            st = (struct stop_after){0, after};
            eng_set_stop(e, stop_after_polls, &st);
            int rc = run_backward(e, &a, &cfg, NULL);
            CU_ASSERT(rc == -ECANCELED || (rc == 0 && st.asked <= after));
            stopped += rc == -ECANCELED;
        }
        CU_ASSERT(stopped >= 2);
        eng_set_stop(e, NULL, NULL);
        if (kind == SCHED_ATOMIC)
            continue; /* its bits may differ run to run */
        CU_ASSERT_EQUAL_FATAL(run_backward(fresh, &a, &cfg, NULL), 0);
        struct grads want;
        grads_take(&want, &a);
        CU_ASSERT_EQUAL_FATAL(run_backward(e, &a, &cfg, NULL), 0);
        CU_ASSERT(grads_equal(&want, &a));
        grads_free(&want);
    }
    attn_free(&a);
    eng_free(e);
    eng_free(fresh);
}

/* eng_set_work_max: an op whose working memory (the arena the engine counts before it
 * allocates) is past the bound returns -E2BIG without computing - its outputs keep their
 * poison - and eng_work_refused says how much it needed; that much as the bound runs it, one
 * byte less does not; no bound runs it; the bits are the unbounded run's. GQA's float dK/dV
 * sums make the backward's need group times the dense dK (what dashd's --op-memory counts). */
static void test_engine_work_max_refuses_before_computing_and_names_the_need(void)
{
    struct eng *e = eng_new(2), *fresh = eng_new(2);
    CU_ASSERT_FATAL(e != NULL && fresh != NULL);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x3e3f);
    const struct shape_case c = {1, 20, 200, 16, 1, 32, DTYPE_F32, SCHED_MASK_CAUSAL, 16, 16, 4};
    struct attn_problem p = problem_of(&c);
    struct attn a;
    attn_init(&a, &p, &r);
    struct attn_config cfg = {SCHED_SHIFT, c.w, c.bm, c.bn, 0};
    CU_ASSERT_EQUAL_FATAL(run_forward(fresh, &a, &cfg), 0);
    CU_ASSERT_EQUAL_FATAL(run_backward(fresh, &a, &cfg, NULL), 0);
    struct grads want;
    grads_take(&want, &a);
    eng_set_work_max(e, 4096);
    CU_ASSERT_EQUAL(run_backward(e, &a, &cfg, NULL), -E2BIG);
    const size_t need = eng_work_refused(e);
    /* at least the float dK and dV sums: 16 query heads x 200 keys x 32 x 4 bytes each */
    CU_ASSERT(need >= 2 * (size_t)16 * 200 * 32 * 4);
    const unsigned char *dq = a.dq;
    int poisoned = 1;
    for (int64_t i = 0; i < a.nq * 4; i++)
        poisoned &= dq[i] == 0xff;
    CU_ASSERT(poisoned); /* tu_poison's NaN bytes: nothing was written */
    eng_set_work_max(e, need - 1);
    CU_ASSERT_EQUAL(run_backward(e, &a, &cfg, NULL), -E2BIG);
    eng_set_work_max(e, need);
    CU_ASSERT_EQUAL(run_backward(e, &a, &cfg, NULL), 0);
    CU_ASSERT(grads_equal(&want, &a));
    eng_set_work_max(e, 0);
    CU_ASSERT_EQUAL(run_backward(e, &a, &cfg, NULL), 0);
    CU_ASSERT(grads_equal(&want, &a));
    grads_free(&want);
    attn_free(&a);
    eng_free(e);
    eng_free(fresh);
}

static void test_engine_reports_resolved_config(void)
{
    struct eng *e = eng_new(1);
    CU_ASSERT_FATAL(e != NULL);
    struct attn_problem p = problem_of(&cases[3]);
    struct attn_config used;
    CU_ASSERT_EQUAL(eng_resolve(e, &p, NULL, &used), 0);
    CU_ASSERT(sched_is_deterministic(used.sched) && used.sched != SCHED_AUTO);
    CU_ASSERT_EQUAL(used.w, SCHED_W_DEFAULT);
    CU_ASSERT_EQUAL(used.block_m, ENG_BLOCK_DEFAULT);
    CU_ASSERT_EQUAL(used.block_n, ENG_BLOCK_DEFAULT);
    struct attn_config pinned = {SCHED_SPT, 7, 32, 16, 0};
    CU_ASSERT_EQUAL(eng_resolve(e, &p, &pinned, &used), 0);
    CU_ASSERT_EQUAL(used.sched, SCHED_SPT);
    CU_ASSERT_EQUAL(used.w, 7);
    CU_ASSERT_EQUAL(used.block_m, 32);
    CU_ASSERT_EQUAL(used.block_n, 16);
    eng_free(e);
}

static void test_engine_rejects_bad_arguments(void)
{
    struct eng *e = eng_new(2);
    CU_ASSERT_FATAL(e != NULL);
    CU_ASSERT_PTR_NULL(eng_new(0));
    CU_ASSERT_PTR_NULL(eng_new(100000));
    eng_free(NULL);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed());
    struct attn_problem good = problem_of(&cases[0]);
    struct attn a;
    attn_init(&a, &good, &r);
    struct attn_config used;
    struct attn_tensor q = dense_q(&a, a.q), k = dense_k(&a, a.k), v = dense_k(&a, a.v);
    struct attn_tensor o = dense_q(&a, a.out);

    CU_ASSERT_EQUAL(eng_check_problem(&good), 0);
    CU_ASSERT_EQUAL(eng_check_problem(NULL), -EINVAL);
    struct attn_problem p;
#define EXPECT_PROBLEM(field, value, code)                    \
    do {                                                      \
        p = good;                                             \
        p.field = value;                                      \
        CU_ASSERT_EQUAL(eng_check_problem(&p), code);         \
        CU_ASSERT_EQUAL(eng_resolve(e, &p, NULL, &used), code); \
    } while (0)
    EXPECT_PROBLEM(batch, 0, -EINVAL);
    EXPECT_PROBLEM(seqlen_q, -5, -EINVAL);
    EXPECT_PROBLEM(seqlen_k, 0, -EINVAL);
    EXPECT_PROBLEM(heads_kv, 3, -EINVAL); /* 4 query heads cannot share 3 kv heads */
    EXPECT_PROBLEM(heads_q, 0, -EINVAL);
    EXPECT_PROBLEM(scale, 0.0f, -EINVAL);
    EXPECT_PROBLEM(scale, NAN, -EINVAL);
    EXPECT_PROBLEM(scale, INFINITY, -EINVAL);
    EXPECT_PROBLEM(mask, (enum sched_mask)7, -EINVAL);
    EXPECT_PROBLEM(head_dim, 16, -ENOTSUP);
    EXPECT_PROBLEM(head_dim, 512, -ENOTSUP);
    EXPECT_PROBLEM(dtype, (enum dtype_kind)9, -ENOTSUP);
#undef EXPECT_PROBLEM
    p = good;
    p.seqlen_q = INT32_MAX; /* well-formed, but its tile indices would not fit */
    CU_ASSERT_EQUAL(eng_resolve(e, &p, NULL, &used), -EOVERFLOW);
    /* the engine-free check says the same, for any thread (dashd's validation) */
    CU_ASSERT_EQUAL(eng_check_config(&p, NULL), -EOVERFLOW);

    const struct attn_config bad_cfgs[] = {{(enum sched_kind)99, 0, 0, 0, 0},
                                          {SCHED_SHIFT, -1, 0, 0, 0},
                                          {SCHED_SHIFT, SCHED_W_MAX + 1, 0, 0, 0},
                                          {SCHED_SHIFT, 0, ENG_BLOCK_MAX + 1, 0, 0},
                                          {SCHED_SHIFT, 0, 0, -8, 0}};
    for (size_t i = 0; i < sizeof bad_cfgs / sizeof bad_cfgs[0]; i++) {
        CU_ASSERT_EQUAL(eng_resolve(e, &good, &bad_cfgs[i], &used), -EINVAL);
        CU_ASSERT_EQUAL(eng_check_config(&good, &bad_cfgs[i]), -EINVAL);
    }
    CU_ASSERT_EQUAL(eng_check_config(&good, NULL), 0);

    CU_ASSERT_EQUAL(eng_forward(NULL, &good, NULL, o, a.lse, q, k, v, NULL), -EINVAL);
    CU_ASSERT_EQUAL(eng_forward(e, &good, NULL, o, NULL, q, k, v, NULL), -EINVAL);
    struct attn_tensor t = q;
    t.data = NULL;
    CU_ASSERT_EQUAL(eng_forward(e, &good, NULL, o, a.lse, t, k, v, NULL), -EINVAL);
    t = q;
    t.stride[3] = 2; /* head_dim must be contiguous */
    CU_ASSERT_EQUAL(eng_forward(e, &good, NULL, o, a.lse, t, k, v, NULL), -EINVAL);
    t = k;
    t.stride[1] = -t.stride[1];
    CU_ASSERT_EQUAL(eng_forward(e, &good, NULL, o, a.lse, q, t, v, NULL), -EINVAL);
    t = k;
    t.stride[0] = INT64_MAX / 2;
    CU_ASSERT_EQUAL(eng_forward(e, &good, NULL, o, a.lse, q, t, v, NULL), -EINVAL);
    t = o;
    t.stride[1] = 0; /* all rows of an output on one address: a race */
    CU_ASSERT_EQUAL(eng_forward(e, &good, NULL, t, a.lse, q, k, v, NULL), -EINVAL);
    t = q;
    t.stride[1] = 0; /* a broadcast input is fine */
    CU_ASSERT_EQUAL(eng_forward(e, &good, NULL, o, a.lse, t, k, v, NULL), 0);

    CU_ASSERT_EQUAL(run_forward(e, &a, NULL), 0);
    struct attn_tensor dq = dense_q(&a, a.dq), dk = dense_k(&a, a.dk), dv = dense_k(&a, a.dv);
    struct attn_tensor dout = dense_q(&a, a.dout);
    CU_ASSERT_EQUAL(eng_backward(e, &good, NULL, dq, dk, dv, q, k, v, o, NULL, dout, NULL), -EINVAL);
    t = dk;
    t.stride[2] = 1; /* heads overlap each other's rows */
    CU_ASSERT_EQUAL(eng_backward(e, &good, NULL, dq, t, dv, q, k, v, o, a.lse, dout, NULL), -EINVAL);
    struct attn_problem bad = good;
    bad.head_dim = 8;
    CU_ASSERT_EQUAL(eng_backward(e, &bad, NULL, dq, dk, dv, q, k, v, o, a.lse, dout, NULL), -ENOTSUP);
    CU_ASSERT_EQUAL(eng_backward(e, &good, NULL, dq, dk, dv, q, k, v, o, a.lse, dout, &used), 0);
    attn_free(&a);
    eng_free(e);
}

/* ref_backward_given_out takes Dsum = rowsum(dO o O) from the O it is given: with the
 * float64 O it is ref_backward; with O moved by delta on one row, that row's dQ moves by
 * exactly -scale (dO . delta) sum_j P_j k_j and nothing else does (dV never reads O). */
static void test_ref_backward_given_out_reads_dsum_from_the_stored_output(void)
{
    enum { SQ = 6, SK = 2, D = 8, ROW = SQ - 1 };
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x676976656eULL);
    double q[SQ * D], k[SK * D], v[SK * D], dout[SQ * D], o[SQ * D], lse[SQ];
    double g[2][3][SQ * D]; /* [plain, given][dq, dk, dv]; dk/dv use the first SK * D */
    tu_fill(q, DTYPE_F64, SQ * D, &r, 1.0);
    tu_fill(k, DTYPE_F64, SK * D, &r, 1.0);
    tu_fill(v, DTYPE_F64, SK * D, &r, 1.0);
    tu_fill(dout, DTYPE_F64, SQ * D, &r, 1.0);
    /* causal, bottom-right: rows 4 and 5 see keys (one and two), the rest none */
    struct attn_problem p = {.batch = 1, .seqlen_q = SQ, .seqlen_k = SK, .heads_q = 1, .heads_kv = 1,
                             .head_dim = D, .dtype = DTYPE_F64, .mask = SCHED_MASK_CAUSAL, .scale = 0.5f};
    struct attn_tensor tq = attn_dense(q, SQ, 1, D), tk = attn_dense(k, SK, 1, D), tv = attn_dense(v, SK, 1, D);
    struct attn_tensor tdo = attn_dense(dout, SQ, 1, D), to = attn_dense(o, SQ, 1, D);
    CU_ASSERT_EQUAL_FATAL(ref_forward(&p, tq, tk, tv, o, lse), 0);
    CU_ASSERT_EQUAL_FATAL(ref_backward(&p, tq, tk, tv, tdo, g[0][0], g[0][1], g[0][2]), 0);
    CU_ASSERT_EQUAL_FATAL(ref_backward_given_out(&p, tq, tk, tv, to, tdo, g[1][0], g[1][1], g[1][2]), 0);
    for (int e = 0; e < SQ * D; e++)
        CU_ASSERT(fabs(g[1][0][e] - g[0][0][e]) <= 1e-13 * (1 + fabs(g[0][0][e])));
    /* move O's last row by delta */
    double delta[D], dd = 0;
    for (int d = 0; d < D; d++) {
        delta[d] = 1e-3 * (d + 1);
        o[ROW * D + d] += delta[d];
        dd += dout[ROW * D + d] * delta[d];
    }
    CU_ASSERT_EQUAL_FATAL(ref_backward_given_out(&p, tq, tk, tv, to, tdo, g[1][0], g[1][1], g[1][2]), 0);
    double pr[SK];
    for (int j = 0; j < SK; j++) {
        double qk = 0;
        for (int d = 0; d < D; d++)
            qk += q[ROW * D + d] * k[j * D + d];
        pr[j] = exp((double)p.scale * qk - lse[ROW]);
    }
    for (int i = 0; i < SQ; i++)
        for (int d = 0; d < D; d++) {
            double want = g[0][0][i * D + d];
            if (i == ROW)
                for (int j = 0; j < SK; j++)
                    want -= (double)p.scale * pr[j] * dd * k[j * D + d];
            CU_ASSERT(fabs(g[1][0][i * D + d] - want) <= 1e-12);
        }
    CU_ASSERT(memcmp(g[1][2], g[0][2], sizeof(double) * SK * D) == 0);
    CU_ASSERT(fabs(g[1][1][0] - g[0][1][0]) > 1e-9); /* dK reads the same dS */
    struct attn_tensor none = {0};
    CU_ASSERT_EQUAL(ref_backward_given_out(&p, tq, tk, tv, none, tdo, g[1][0], g[1][1], g[1][2]), -EINVAL);
}

int suite_engine(void)
{
    CU_pSuite s = CU_add_suite("engine", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_engine_rejects_bad_arguments);
    ADD_TEST(s, test_engine_reports_resolved_config);
    ADD_TEST(s, test_engine_matches_float64_reference_for_every_schedule);
    ADD_TEST(s, test_engine_forward_bits_identical_across_threads);
    ADD_TEST(s, test_engine_f64_matches_the_reference_to_double_precision_with_the_same_bits);
    ADD_TEST(s, test_engine_backward_bits_identical_for_1_to_8_threads_and_repeats);
    ADD_TEST(s, test_engine_backward_bits_identical_across_threads_at_unaligned_tile_sizes);
    ADD_TEST(s, test_engine_strided_views_give_same_bits);
    ADD_TEST(s, test_engine_stop_ends_an_op_midway_and_the_next_runs_whole);
    ADD_TEST(s, test_engine_work_max_refuses_before_computing_and_names_the_need);
    ADD_TEST(s, test_ref_backward_given_out_reads_dsum_from_the_stored_output);
    return 0;
}
