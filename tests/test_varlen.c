// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_varlen.c - the CPU engine on packed variable-length batches, sliding windows and
 * softcap: values and gradients against the float64 reference computed sequence by
 * sequence (fresh random ragged batches with empty, length-1 and non-tile-multiple
 * sequences, windows from 0 to past the length, softcap 0/30/50, causal or not, GQA);
 * rows that see no key give zeros, never NaN; bits identical for 1..8 threads and every
 * deterministic schedule; and batch invariance: a sequence's bits are the same whatever it
 * is packed with and wherever. The shared problem checks (attn_explain_problem) too.
 */
#include "suites.h"
#include "testutil.h"
#include "kernels/attn/ref.h"
#include "kernels/cpu/engine.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXB 16

/* A packed batch and its tensors, (total, heads, head_dim) as batch-1 views. */
struct pack {
    struct attn_problem p;
    int32_t cuq[MAXB + 1], cuk[MAXB + 1];
    int64_t nq, nk, nlse;
    void *q, *k, *v, *out, *dout, *dq, *dk, *dv;
    float *lse;
};

static struct attn_tensor tq(const struct pack *a, void *d)
{
    return attn_dense(d, a->p.total_q, a->p.heads_q, a->p.head_dim);
}

static struct attn_tensor tk(const struct pack *a, void *d)
{
    return attn_dense(d, a->p.total_k, a->p.heads_kv, a->p.head_dim);
}

/* base: the problem's heads, dims, dtype, mask, window, softcap (batch and lengths are
 * set here). Inputs are left to the caller (pack_fill). */
static void pack_init(struct pack *a, const struct attn_problem *base, int32_t batch,
                      const int32_t *lq, const int32_t *lk)
{
    memset(a, 0, sizeof *a);
    a->p = *base;
    a->p.batch = batch;
    a->p.seqlen_q = a->p.seqlen_k = 1;
    for (int32_t b = 0; b < batch; b++) {
        a->cuq[b + 1] = a->cuq[b] + lq[b];
        a->cuk[b + 1] = a->cuk[b] + lk[b];
        a->p.seqlen_q = lq[b] > a->p.seqlen_q ? lq[b] : a->p.seqlen_q;
        a->p.seqlen_k = lk[b] > a->p.seqlen_k ? lk[b] : a->p.seqlen_k;
    }
    a->p.cu_seqlens_q = a->cuq;
    a->p.cu_seqlens_k = a->cuk;
    a->p.total_q = a->cuq[batch];
    a->p.total_k = a->cuk[batch];
    const struct attn_problem *p = &a->p;
    a->nq = (int64_t)p->total_q * p->heads_q * p->head_dim;
    a->nk = (int64_t)p->total_k * p->heads_kv * p->head_dim;
    a->nlse = (int64_t)p->heads_q * p->total_q;
    size_t es = (size_t)dtype_size(p->dtype);
    /* + 1: a batch of empty sequences still gets a pointer */
    a->q = malloc(es * (size_t)a->nq + 1);
    a->out = malloc(es * (size_t)a->nq + 1);
    a->dout = malloc(es * (size_t)a->nq + 1);
    a->dq = malloc(es * (size_t)a->nq + 1);
    a->k = malloc(es * (size_t)a->nk + 1);
    a->v = malloc(es * (size_t)a->nk + 1);
    a->dk = malloc(es * (size_t)a->nk + 1);
    a->dv = malloc(es * (size_t)a->nk + 1);
    a->lse = malloc(sizeof(float) * (size_t)a->nlse + 1);
}

static void pack_fill(struct pack *a, struct tu_rng *r)
{
    const double sigma = a->p.softcap > 0 ? 3.0 : 1.0; /* scores that reach the cap */
    if (a->nq) {
        tu_fill(a->q, a->p.dtype, a->nq, r, sigma);
        tu_fill(a->dout, a->p.dtype, a->nq, r, 1.0);
    }
    if (a->nk) {
        tu_fill(a->k, a->p.dtype, a->nk, r, sigma);
        tu_fill(a->v, a->p.dtype, a->nk, r, 1.0);
    }
}

static void pack_free(struct pack *a)
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

static int fwd(struct eng *e, struct pack *a, const struct attn_config *cfg)
{
    size_t es = (size_t)dtype_size(a->p.dtype);
    tu_poison(a->out, es * (size_t)a->nq);
    tu_poison(a->lse, sizeof(float) * (size_t)a->nlse);
    return eng_forward(e, &a->p, cfg, tq(a, a->out), a->lse, tq(a, a->q), tk(a, a->k),
                       tk(a, a->v), NULL);
}

static int bwd(struct eng *e, struct pack *a, const struct attn_config *cfg,
               struct attn_config *ret_cfg)
{
    size_t es = (size_t)dtype_size(a->p.dtype);
    tu_poison(a->dq, es * (size_t)a->nq);
    tu_poison(a->dk, es * (size_t)a->nk);
    tu_poison(a->dv, es * (size_t)a->nk);
    return eng_backward(e, &a->p, cfg, tq(a, a->dq), tk(a, a->dk), tk(a, a->dv), tq(a, a->q),
                        tk(a, a->k), tk(a, a->v), tq(a, a->out), a->lse, tq(a, a->dout),
                        ret_cfg);
}

static double *as_double(const void *src, enum dtype_kind t, int64_t n)
{
    double *d = malloc(sizeof(double) * (size_t)n + 1);
    tu_to_double(src, t, n, d);
    return d;
}

static int any_nan(const void *src, enum dtype_kind t, int64_t n)
{
    double *d = as_double(src, t, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad |= isnan(d[i]);
    free(d);
    return bad;
}

static double tol(enum dtype_kind t)
{
    return t == DTYPE_F64 ? 1e-12 : t == DTYPE_F32 ? 1e-5 : 1.5e-2;
}

/* Engine vs reference on one packed batch: out, lse (the same rows +inf), dq, dk, dv.
 * Rows seeing no key must be exactly 0 in out and dq. */
static void check_against_reference(struct eng *e, struct pack *a, const struct attn_config *cfg,
                                    const char *what)
{
    const struct attn_problem *p = &a->p;
    CU_ASSERT_EQUAL_FATAL(fwd(e, a, cfg), 0);
    CU_ASSERT_EQUAL_FATAL(bwd(e, a, cfg, NULL), 0);
    double *ro = malloc(sizeof(double) * (size_t)a->nq + 8);
    double *rl = malloc(sizeof(double) * (size_t)a->nlse + 8);
    double *rq = malloc(sizeof(double) * (size_t)a->nq + 8);
    double *rk = malloc(sizeof(double) * (size_t)a->nk + 8);
    double *rv = malloc(sizeof(double) * (size_t)a->nk + 8);
    CU_ASSERT_EQUAL_FATAL(ref_forward(p, tq(a, a->q), tk(a, a->k), tk(a, a->v), ro, rl), 0);
    CU_ASSERT_EQUAL_FATAL(ref_backward(p, tq(a, a->q), tk(a, a->k), tk(a, a->v), tq(a, a->dout),
                                       rq, rk, rv), 0);
    double *go = as_double(a->out, p->dtype, a->nq), *gq = as_double(a->dq, p->dtype, a->nq);
    double *gk = as_double(a->dk, p->dtype, a->nk), *gv = as_double(a->dv, p->dtype, a->nk);
    double e_o = ref_rel_error(go, ro, a->nq), e_q = ref_rel_error(gq, rq, a->nq);
    double e_k = ref_rel_error(gk, rk, a->nk), e_v = ref_rel_error(gv, rv, a->nk);
    int lse_ok = 1, zero_ok = 1, nan_free = 1;
    for (int64_t i = 0; i < a->nlse; i++) {
        if (isinf(rl[i]))
            lse_ok &= isinf(a->lse[i]) && a->lse[i] > 0;
        else
            lse_ok &= fabs(a->lse[i] - rl[i]) <= 1e-3 * (1 + fabs(rl[i]));
    }
    /* a row with lse +inf sees no key: its out and dq are exactly zero */
    const int64_t D = p->head_dim;
    for (int64_t h = 0; h < p->heads_q; h++)
        for (int64_t t = 0; t < p->total_q; t++)
            if (isinf(rl[h * p->total_q + t]))
                for (int64_t d = 0; d < D; d++) {
                    int64_t at = (t * p->heads_q + h) * D + d;
                    zero_ok &= go[at] == 0 && gq[at] == 0;
                }
    for (int64_t i = 0; i < a->nq; i++)
        nan_free &= !isnan(go[i]) && !isnan(gq[i]);
    for (int64_t i = 0; i < a->nk; i++)
        nan_free &= !isnan(gk[i]) && !isnan(gv[i]);
    const double t = tol(p->dtype);
    int ok = e_o <= t && e_q <= 2 * t && e_k <= 2 * t && e_v <= 2 * t && lse_ok && zero_ok && nan_free;
    if (!ok)
        printf("\n  %s: errors out %.2e dq %.2e dk %.2e dv %.2e, lse %s, masked rows %s, %s\n",
               what, e_o, e_q, e_k, e_v, lse_ok ? "ok" : "WRONG", zero_ok ? "zero" : "NOT ZERO",
               nan_free ? "no NaN" : "NaN");
    CU_ASSERT(ok);
    free(ro);
    free(rl);
    free(rq);
    free(rk);
    free(rv);
    free(go);
    free(gq);
    free(gk);
    free(gv);
}

/* Random lengths 0..max, with 1 and a non-tile multiple among them. */
static void draw_lengths(struct tu_rng *r, int32_t batch, int32_t max, int32_t *l)
{
    for (int32_t b = 0; b < batch; b++)
        l[b] = (int32_t)(tu_next(r) % (uint64_t)(max + 1));
    if (batch > 1)
        l[0] = 1;
    if (batch > 2)
        l[2] = 17 + (int32_t)(tu_next(r) % 8) * 16; /* 17, 33, ..., never a multiple of 16 */
}

struct window_case {
    int32_t window, left, right;
};

static const struct window_case windows[] = {
    {0, -1, -1}, {1, -1, -1}, {1, 0, 0},  {1, 5, 0},  {1, 0, 7},
    {1, 13, 4},  {1, 3, -1},  {1, -1, 2}, {1, 500, 500},
};

/* ---- tests --------------------------------------------------------------------------- */

static void test_varlen_engine_matches_float64_reference_sequence_by_sequence(void)
{
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x7661726c656eULL);
    struct eng *e = eng_new(3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    const float caps[] = {0.0f, 30.0f, 50.0f};
    const enum sched_kind kinds[] = {SCHED_ASCENDING, SCHED_DESCENDING, SCHED_SPT, SCHED_SHIFT,
                                     SCHED_AUTO};
    int n = 0;
    for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++)
        for (int causal = 0; causal < 2; causal++)
            for (size_t ci = 0; ci < 3; ci++) {
                const int gqa = (wi + ci) % 2;
                struct attn_problem base = {.heads_q = 4, .heads_kv = gqa ? 2 : 4, .head_dim = 32,
                                            .dtype = (wi + ci + causal) % 3 == 0 ? DTYPE_BF16 : DTYPE_F32,
                                            .mask = causal ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL,
                                            .scale = 1.0f / sqrtf(32.0f),
                                            .window = windows[wi].window,
                                            .window_left = windows[wi].left,
                                            .window_right = windows[wi].right,
                                            .softcap = caps[ci]};
                int32_t lq[5], lk[5];
                const int32_t batch = 5;
                draw_lengths(&r, batch, 70, lq);
                /* k lengths equal, longer or shorter than q's */
                for (int32_t b = 0; b < batch; b++)
                    lk[b] = (wi % 3 == 0) ? lq[b] : (int32_t)(tu_next(&r) % 71);
                struct pack a;
                pack_init(&a, &base, batch, lq, lk);
                pack_fill(&a, &r);
                struct attn_config cfg = {kinds[n % 5], 1 + n % 5, 16, (n % 2) ? 16 : 24, n % 2};
                char what[160];
                snprintf(what, sizeof what, "window %d (%d, %d) %s softcap %g %s %s",
                         windows[wi].window, windows[wi].left, windows[wi].right,
                         causal ? "causal" : "full", (double)caps[ci], gqa ? "gqa" : "mha",
                         sched_kind_name(cfg.sched));
                check_against_reference(e, &a, &cfg, what);
                pack_free(&a);
                n++;
            }
    eng_free(e);
}

/* Long sequences, as packed training batches hold them: 8191 and 8000 tokens beside a
 * 1-token and a 333-token one (lengths neither 1 nor a tile multiple but one), GQA 2:1,
 * causal with a window of 255 keys and a softcap of 30, bf16 and fp32: values, LSE and
 * gradients against the float64 reference, whose loops visit a row's window only (so this
 * takes seconds, not the minutes a full row of 8k keys would). */
static void test_varlen_8k_sequences_with_a_window_match_float64_reference(void)
{
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x384b6c656eULL);
    struct eng *e = eng_new(2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    for (int fp32 = 0; fp32 < 2; fp32++) {
        struct attn_problem base = {.heads_q = 2, .heads_kv = 1, .head_dim = 32,
                                    .dtype = fp32 ? DTYPE_F32 : DTYPE_BF16, .mask = SCHED_MASK_CAUSAL,
                                    .scale = 4.0f / sqrtf(32.0f), .window = 1, .window_left = 255,
                                    .window_right = 0, .softcap = 30.0f};
        const int32_t lq[] = {8191, 1, 333, 8000};
        struct pack a;
        pack_init(&a, &base, 4, lq, lq);
        pack_fill(&a, &r);
        struct attn_config cfg = {fp32 ? SCHED_SHIFT : SCHED_AUTO, 0, 0, 0, 0};
        check_against_reference(e, &a, &cfg, fp32 ? "8k, fp32, shift" : "8k, bf16, auto");
        pack_free(&a);
    }
    eng_free(e);
}

/* float64 serves windows, softcap and packed batches with the same definitions (the
 * reference's): every window case, causal or not, softcap 0/30/50, GQA or not, on fresh
 * ragged batches, to 1e-12 (what gradcheck needs); its bits are the same for 1 and 5
 * threads and any schedule or tile sizes (each element owned by one task), and a sequence
 * packed alone gives the bits it has inside the batch. */
static void test_varlen_float64_serves_windows_softcap_and_packed_batches(void)
{
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x6636345f76ULL);
    struct eng *e1 = eng_new(1), *e5 = eng_new(5);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e1 && e5);
    const float caps[] = {0.0f, 30.0f, 50.0f};
    int n = 0;
    for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++)
        for (int causal = 0; causal < 2; causal++)
            for (size_t ci = 0; ci < 3; ci++, n++) {
                const int gqa = (wi + ci + (size_t)causal) % 2;
                struct attn_problem base = {.heads_q = 4, .heads_kv = gqa ? 2 : 4, .head_dim = 32,
                                            .dtype = DTYPE_F64,
                                            .mask = causal ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL,
                                            .scale = 0.3f, .window = windows[wi].window,
                                            .window_left = windows[wi].left,
                                            .window_right = windows[wi].right,
                                            .softcap = caps[ci]};
                int32_t lq[4], lk[4];
                draw_lengths(&r, 4, 40, lq);
                for (int32_t b = 0; b < 4; b++)
                    lk[b] = (wi % 3 == 0) ? lq[b] : (int32_t)(tu_next(&r) % 41);
                struct pack a;
                pack_init(&a, &base, 4, lq, lk);
                pack_fill(&a, &r);
                struct attn_config c1 = {SCHED_ASCENDING, 1, 16, 16, 0};
                struct attn_config c2 = {SCHED_SHIFT, 3, 32, 48, 0};
                char what[160];
                snprintf(what, sizeof what, "float64 window %d (%d, %d) %s softcap %g %s",
                         windows[wi].window, windows[wi].left, windows[wi].right,
                         causal ? "causal" : "full", (double)caps[ci], gqa ? "gqa" : "mha");
                check_against_reference(e1, &a, &c1, what);
                const size_t qb = 8 * (size_t)a.nq, kb = 8 * (size_t)a.nk;
                unsigned char *keep = malloc(2 * qb + 2 * kb + 4 * (size_t)a.nlse + 1);
                CU_ASSERT_PTR_NOT_NULL_FATAL(keep);
                memcpy(keep, a.out, qb);
                memcpy(keep + qb, a.dq, qb);
                memcpy(keep + 2 * qb, a.dk, kb);
                memcpy(keep + 2 * qb + kb, a.dv, kb);
                memcpy(keep + 2 * qb + 2 * kb, a.lse, 4 * (size_t)a.nlse);
                CU_ASSERT_EQUAL_FATAL(fwd(e5, &a, &c2), 0);
                CU_ASSERT_EQUAL_FATAL(bwd(e5, &a, &c2, NULL), 0);
                CU_ASSERT(memcmp(keep, a.out, qb) == 0);
                CU_ASSERT(memcmp(keep + qb, a.dq, qb) == 0);
                CU_ASSERT(memcmp(keep + 2 * qb, a.dk, kb) == 0);
                CU_ASSERT(memcmp(keep + 2 * qb + kb, a.dv, kb) == 0);
                CU_ASSERT(memcmp(keep + 2 * qb + 2 * kb, a.lse, 4 * (size_t)a.nlse) == 0);
                /* sequence 2 alone (a length that is no tile multiple): the same bits */
                struct pack one;
                pack_init(&one, &base, 1, &lq[2], &lk[2]);
                const int64_t D = base.head_dim;
                memcpy(one.q, (double *)a.q + (int64_t)a.cuq[2] * base.heads_q * D, 8 * (size_t)one.nq);
                memcpy(one.dout, (double *)a.dout + (int64_t)a.cuq[2] * base.heads_q * D, 8 * (size_t)one.nq);
                memcpy(one.k, (double *)a.k + (int64_t)a.cuk[2] * base.heads_kv * D, 8 * (size_t)one.nk);
                memcpy(one.v, (double *)a.v + (int64_t)a.cuk[2] * base.heads_kv * D, 8 * (size_t)one.nk);
                CU_ASSERT_EQUAL_FATAL(fwd(e5, &one, &c1), 0);
                CU_ASSERT_EQUAL_FATAL(bwd(e5, &one, &c1, NULL), 0);
                CU_ASSERT(memcmp(one.out, (double *)a.out + (int64_t)a.cuq[2] * base.heads_q * D,
                                 8 * (size_t)one.nq) == 0);
                CU_ASSERT(memcmp(one.dq, (double *)a.dq + (int64_t)a.cuq[2] * base.heads_q * D,
                                 8 * (size_t)one.nq) == 0);
                CU_ASSERT(memcmp(one.dk, (double *)a.dk + (int64_t)a.cuk[2] * base.heads_kv * D,
                                 8 * (size_t)one.nk) == 0);
                pack_free(&one);
                free(keep);
                pack_free(&a);
            }
    CU_ASSERT(n == 54);
    eng_free(e1);
    eng_free(e5);
}

static void test_varlen_dense_batch_with_window_and_softcap_matches_reference(void)
{
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x64656e7365ULL);
    struct eng *e = eng_new(2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    /* a dense (batch, seqlen) problem: a batch of equal sequences, checked as one; in f32
     * and in f64 (which serves windows and softcap as well) */
    for (size_t it = 2; it < 2 * (sizeof windows / sizeof windows[0]); it++) {
        const size_t wi = it / 2; /* each window case in f32 and f64 */
        const enum dtype_kind dt = it % 2 ? DTYPE_F64 : DTYPE_F32;
        const double tl = dt == DTYPE_F64 ? 1e-12 : 1e-5;
        const size_t es = (size_t)dtype_size(dt);
        struct attn_problem base = {.heads_q = 2, .heads_kv = 1, .head_dim = 32, .dtype = dt,
                                    .mask = wi % 2 ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL,
                                    .scale = 0.2f, .window = 1, .window_left = windows[wi].left,
                                    .window_right = windows[wi].right,
                                    .softcap = wi % 3 ? 0.0f : 30.0f};
        int32_t lq[2] = {45, 45}, lk[2] = {61, 61};
        struct pack a;
        pack_init(&a, &base, 2, lq, lk);
        pack_fill(&a, &r);
        /* the same tensors as a dense batch: (2, 45, heads, dim) over the packed rows */
        struct attn_problem d = a.p;
        d.cu_seqlens_q = d.cu_seqlens_k = NULL;
        d.seqlen_q = 45;
        d.seqlen_k = 61;
        const int64_t D = d.head_dim;
        struct attn_tensor q = attn_dense(a.q, 45, 2, D), k = attn_dense(a.k, 61, 1, D);
        struct attn_tensor v = attn_dense(a.v, 61, 1, D), o = attn_dense(a.out, 45, 2, D);
        struct attn_tensor dout = attn_dense(a.dout, 45, 2, D), dq = attn_dense(a.dq, 45, 2, D);
        struct attn_tensor dk = attn_dense(a.dk, 61, 1, D), dv = attn_dense(a.dv, 61, 1, D);
        struct attn_config cfg = {SCHED_SHIFT, 2, 16, 16, 0};
        CU_ASSERT_EQUAL_FATAL(eng_forward(e, &d, &cfg, o, a.lse, q, k, v, NULL), 0);
        CU_ASSERT_EQUAL_FATAL(eng_backward(e, &d, &cfg, dq, dk, dv, q, k, v, o, a.lse, dout, NULL), 0);
        double *ro = malloc(sizeof(double) * (size_t)a.nq), *rl = malloc(sizeof(double) * (size_t)a.nlse);
        double *rq = malloc(sizeof(double) * (size_t)a.nq), *rk = malloc(sizeof(double) * (size_t)a.nk);
        double *rv = malloc(sizeof(double) * (size_t)a.nk);
        CU_ASSERT_EQUAL_FATAL(ref_forward(&d, q, k, v, ro, rl), 0);
        CU_ASSERT_EQUAL_FATAL(ref_backward(&d, q, k, v, dout, rq, rk, rv), 0);
        double *go = as_double(a.out, d.dtype, a.nq), *gq = as_double(a.dq, d.dtype, a.nq);
        double *gk = as_double(a.dk, d.dtype, a.nk);
        CU_ASSERT(ref_rel_error(go, ro, a.nq) < tl);
        CU_ASSERT(ref_rel_error(gq, rq, a.nq) < 2 * tl);
        CU_ASSERT(ref_rel_error(gk, rk, a.nk) < 2 * tl);
        /* and the packed form of the same batch gives the same bits */
        void *o1 = malloc((size_t)a.nq * es), *dq1 = malloc((size_t)a.nq * es);
        memcpy(o1, a.out, (size_t)a.nq * es);
        memcpy(dq1, a.dq, (size_t)a.nq * es);
        CU_ASSERT_EQUAL(fwd(e, &a, &cfg), 0);
        CU_ASSERT_EQUAL(bwd(e, &a, &cfg, NULL), 0);
        CU_ASSERT(memcmp(o1, a.out, (size_t)a.nq * es) == 0);
        CU_ASSERT(memcmp(dq1, a.dq, (size_t)a.nq * es) == 0);
        free(o1);
        free(dq1);
        free(ro);
        free(rl);
        free(rq);
        free(rk);
        free(rv);
        free(go);
        free(gq);
        free(gk);
        pack_free(&a);
    }
    eng_free(e);
}

static void test_varlen_rows_without_keys_give_zeros_never_nan(void)
{
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x6e6f6b6579ULL);
    struct eng *e = eng_new(2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    /* sequences with no keys, no queries, more queries than keys under causal (the first
     * rows see nothing), and a window that leaves rows and keys unseen */
    int32_t lq[6] = {5, 0, 40, 9, 1, 30}, lk[6] = {0, 12, 10, 9, 0, 3};
    for (int causal = 0; causal < 2; causal++)
        for (int win = 0; win < 2; win++) {
            struct attn_problem base = {.heads_q = 2, .heads_kv = 1, .head_dim = 32,
                                        .dtype = DTYPE_F32,
                                        .mask = causal ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL,
                                        .scale = 0.3f, .window = win, .window_left = 2,
                                        .window_right = causal ? 0 : 1, .softcap = 30.0f};
            struct pack a;
            pack_init(&a, &base, 6, lq, lk);
            pack_fill(&a, &r);
            struct attn_config cfg = {SCHED_SHIFT, 3, 16, 16, 0};
            check_against_reference(e, &a, &cfg, causal ? "causal, rows without keys" : "rows without keys");
            CU_ASSERT(!any_nan(a.dk, a.p.dtype, a.nk));
            pack_free(&a);
        }
    eng_free(e);
}

/* Every deterministic schedule (auto too) gives the same bits for 1..8 threads. */
static void test_varlen_backward_bits_identical_for_1_to_8_threads_every_schedule(void)
{
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x74687265ULL);
    int32_t lq[6], lk[6];
    draw_lengths(&r, 6, 90, lq);
    memcpy(lk, lq, sizeof lk);
    lk[3] += 11;
    const enum sched_kind kinds[] = {SCHED_ASCENDING, SCHED_DESCENDING, SCHED_SPT, SCHED_SHIFT,
                                     SCHED_AUTO};
    for (int wcase = 0; wcase < 3; wcase++) {
        struct attn_problem base = {.heads_q = 4, .heads_kv = 2, .head_dim = 32, .dtype = DTYPE_BF16,
                                    .mask = wcase == 1 ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL,
                                    .scale = 0.17f, .window = wcase != 0, .window_left = 20,
                                    .window_right = 9, .softcap = wcase == 2 ? 50.0f : 0.0f};
        struct pack a;
        pack_init(&a, &base, 6, lq, lk);
        pack_fill(&a, &r);
        const size_t bq = (size_t)a.nq * 2, bk = (size_t)a.nk * 2;
        void *dq0 = malloc(bq), *dk0 = malloc(bk), *dv0 = malloc(bk);
        for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++) {
            struct attn_config cfg = {kinds[ki], 3, 16, 16, 0};
            for (int32_t t = 1; t <= 8; t++) {
                struct eng *e = eng_new(t);
                CU_ASSERT_PTR_NOT_NULL_FATAL(e);
                CU_ASSERT_EQUAL_FATAL(fwd(e, &a, &cfg), 0);
                CU_ASSERT_EQUAL_FATAL(bwd(e, &a, &cfg, NULL), 0);
                if (t == 1) {
                    memcpy(dq0, a.dq, bq);
                    memcpy(dk0, a.dk, bk);
                    memcpy(dv0, a.dv, bk);
                } else {
                    int same = memcmp(dq0, a.dq, bq) == 0 && memcmp(dk0, a.dk, bk) == 0 &&
                               memcmp(dv0, a.dv, bk) == 0;
                    if (!same)
                        printf("\n  %s, %d threads: bits differ from 1 thread\n",
                               sched_kind_name(kinds[ki]), t);
                    CU_ASSERT(same);
                }
                eng_free(e);
            }
        }
        free(dq0);
        free(dk0);
        free(dv0);
        pack_free(&a);
    }
}

/* Outputs of one sequence, copied out of a packed batch. */
struct seq_bits {
    size_t bq, bk, bl;
    unsigned char *out, *dq, *dk, *dv;
    float *lse;
};

static void take_seq(const struct pack *a, int32_t b, struct seq_bits *s)
{
    const struct attn_problem *p = &a->p;
    const size_t es = (size_t)dtype_size(p->dtype), D = (size_t)p->head_dim;
    const int32_t q0 = a->cuq[b], sq = a->cuq[b + 1] - q0, k0 = a->cuk[b], sk = a->cuk[b + 1] - k0;
    s->bq = (size_t)sq * (size_t)p->heads_q * D * es;
    s->bk = (size_t)sk * (size_t)p->heads_kv * D * es;
    s->bl = (size_t)sq * sizeof(float);
    s->out = malloc(s->bq + 1);
    s->dq = malloc(s->bq + 1);
    s->dk = malloc(s->bk + 1);
    s->dv = malloc(s->bk + 1);
    s->lse = malloc(s->bl * (size_t)p->heads_q + 1);
    const size_t qrow = (size_t)p->heads_q * D * es, krow = (size_t)p->heads_kv * D * es;
    memcpy(s->out, (unsigned char *)a->out + (size_t)q0 * qrow, s->bq);
    memcpy(s->dq, (unsigned char *)a->dq + (size_t)q0 * qrow, s->bq);
    memcpy(s->dk, (unsigned char *)a->dk + (size_t)k0 * krow, s->bk);
    memcpy(s->dv, (unsigned char *)a->dv + (size_t)k0 * krow, s->bk);
    for (int32_t h = 0; h < p->heads_q; h++)
        memcpy((unsigned char *)s->lse + s->bl * (size_t)h, a->lse + (size_t)h * p->total_q + q0, s->bl);
}

static int same_seq(const struct seq_bits *x, const struct seq_bits *y, int32_t heads)
{
    return x->bq == y->bq && x->bk == y->bk && memcmp(x->out, y->out, x->bq) == 0 &&
           memcmp(x->dq, y->dq, x->bq) == 0 && memcmp(x->dk, y->dk, x->bk) == 0 &&
           memcmp(x->dv, y->dv, x->bk) == 0 && memcmp(x->lse, y->lse, x->bl * (size_t)heads) == 0;
}

static void free_seq(struct seq_bits *s)
{
    free(s->out);
    free(s->dq);
    free(s->dk);
    free(s->dv);
    free(s->lse);
}

/* Copy sequence `from` of pack src into slot `to` of pack dst (same lengths). */
static void put_seq(struct pack *dst, int32_t to, const struct pack *src, int32_t from)
{
    const struct attn_problem *p = &src->p;
    const size_t es = (size_t)dtype_size(p->dtype), D = (size_t)p->head_dim;
    const size_t qrow = (size_t)p->heads_q * D * es, krow = (size_t)p->heads_kv * D * es;
    const size_t nq = (size_t)(src->cuq[from + 1] - src->cuq[from]);
    const size_t nk = (size_t)(src->cuk[from + 1] - src->cuk[from]);
    const size_t sq0 = (size_t)src->cuq[from] * qrow, dq0 = (size_t)dst->cuq[to] * qrow;
    const size_t sk0 = (size_t)src->cuk[from] * krow, dk0 = (size_t)dst->cuk[to] * krow;
    memcpy((unsigned char *)dst->q + dq0, (unsigned char *)src->q + sq0, nq * qrow);
    memcpy((unsigned char *)dst->dout + dq0, (unsigned char *)src->dout + sq0, nq * qrow);
    memcpy((unsigned char *)dst->k + dk0, (unsigned char *)src->k + sk0, nk * krow);
    memcpy((unsigned char *)dst->v + dk0, (unsigned char *)src->v + sk0, nk * krow);
}

/* Batch invariance: the same sequences packed in shuffled orders, with strangers, and
 * one alone give each sequence the same output and gradient bits - for every explicit
 * deterministic schedule, and for auto in the batch-invariant mode. */
static void test_varlen_sequence_bits_do_not_depend_on_packing(void)
{
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x696e76ULL);
    struct eng *e = eng_new(4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    enum { N = 5 };
    int32_t lq[N] = {1, 77, 33, 130, 50}, lk[N];
    for (int i = 0; i < N; i++)
        lk[i] = lq[i] + (i % 2) * 7;
    const enum sched_kind kinds[] = {SCHED_ASCENDING, SCHED_DESCENDING, SCHED_SPT, SCHED_SHIFT,
                                     SCHED_AUTO};
    for (int variant = 0; variant < 2; variant++) {
        struct attn_problem base = {.heads_q = 4, .heads_kv = 2, .head_dim = 32, .dtype = DTYPE_BF16,
                                    .mask = SCHED_MASK_CAUSAL, .scale = 0.18f, .window = variant,
                                    .window_left = 40, .window_right = 0,
                                    .softcap = variant ? 30.0f : 0.0f};
        struct pack ref;
        pack_init(&ref, &base, N, lq, lk);
        pack_fill(&ref, &r);
        for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++) {
            struct attn_config cfg = {kinds[ki], 4, 16, 16, 1};
            CU_ASSERT_EQUAL_FATAL(fwd(e, &ref, &cfg), 0);
            CU_ASSERT_EQUAL_FATAL(bwd(e, &ref, &cfg, NULL), 0);
            struct seq_bits want[N];
            for (int i = 0; i < N; i++)
                take_seq(&ref, i, &want[i]);
            for (int trial = 0; trial < 4; trial++) {
                /* a shuffled order, with strangers (fresh sequences) around; trial 3: the
                 * first sequence alone after a stranger */
                int order[2 * N], slots = 0, from[2 * N];
                int32_t pq[2 * N], pk[2 * N];
                int perm[N];
                for (int i = 0; i < N; i++)
                    perm[i] = i;
                for (int i = N - 1; i > 0; i--) {
                    int j = (int)(tu_next(&r) % (uint64_t)(i + 1)), t = perm[i];
                    perm[i] = perm[j];
                    perm[j] = t;
                }
                int take = trial == 3 ? 1 : N;
                for (int i = 0; i < take; i++) {
                    if (tu_next(&r) % 2 || trial == 3) { /* a stranger before it */
                        order[slots] = -1;
                        pq[slots] = 1 + (int32_t)(tu_next(&r) % 60);
                        pk[slots] = pq[slots];
                        slots++;
                    }
                    order[slots] = perm[i];
                    pq[slots] = lq[perm[i]];
                    pk[slots] = lk[perm[i]];
                    slots++;
                }
                struct pack x;
                pack_init(&x, &base, slots, pq, pk);
                pack_fill(&x, &r); /* strangers keep their random rows */
                for (int s = 0; s < slots; s++) {
                    from[s] = order[s];
                    if (order[s] >= 0)
                        put_seq(&x, s, &ref, order[s]);
                }
                CU_ASSERT_EQUAL_FATAL(fwd(e, &x, &cfg), 0);
                CU_ASSERT_EQUAL_FATAL(bwd(e, &x, &cfg, NULL), 0);
                for (int s = 0; s < slots; s++) {
                    if (from[s] < 0)
                        continue;
                    struct seq_bits got;
                    take_seq(&x, s, &got);
                    int same = same_seq(&got, &want[from[s]], base.heads_q);
                    if (!same)
                        printf("\n  %s: sequence %d (length %d) differs at packing slot %d\n",
                               sched_kind_name(kinds[ki]), from[s], lq[from[s]], s);
                    CU_ASSERT(same);
                    free_seq(&got);
                }
                pack_free(&x);
            }
            for (int i = 0; i < N; i++)
                free_seq(&want[i]);
        }
        pack_free(&ref);
    }
    eng_free(e);
}

/* A window wider than the sequence is the plain mask, bits included. */
static void test_varlen_window_past_the_length_gives_the_plain_mask_bits(void)
{
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x77696465ULL);
    struct eng *e = eng_new(2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    int32_t lq[3] = {40, 64, 7}, lk[3] = {40, 70, 7};
    for (int causal = 0; causal < 2; causal++) {
        struct attn_problem plain = {.heads_q = 2, .heads_kv = 2, .head_dim = 32, .dtype = DTYPE_F32,
                                     .mask = causal ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL,
                                     .scale = 0.2f};
        struct attn_problem wide = plain;
        wide.window = 1;
        wide.window_left = 1000;
        wide.window_right = causal ? 0 : 70;
        struct pack a, b;
        pack_init(&a, &plain, 3, lq, lk);
        pack_fill(&a, &r);
        pack_init(&b, &wide, 3, lq, lk);
        memcpy(b.q, a.q, (size_t)a.nq * 4);
        memcpy(b.dout, a.dout, (size_t)a.nq * 4);
        memcpy(b.k, a.k, (size_t)a.nk * 4);
        memcpy(b.v, a.v, (size_t)a.nk * 4);
        struct attn_config cfg = {SCHED_SHIFT, 2, 16, 16, 0};
        CU_ASSERT_EQUAL_FATAL(fwd(e, &a, &cfg), 0);
        CU_ASSERT_EQUAL_FATAL(bwd(e, &a, &cfg, NULL), 0);
        CU_ASSERT_EQUAL_FATAL(fwd(e, &b, &cfg), 0);
        CU_ASSERT_EQUAL_FATAL(bwd(e, &b, &cfg, NULL), 0);
        CU_ASSERT(memcmp(a.out, b.out, (size_t)a.nq * 4) == 0);
        CU_ASSERT(memcmp(a.dq, b.dq, (size_t)a.nq * 4) == 0);
        CU_ASSERT(memcmp(a.dk, b.dk, (size_t)a.nk * 4) == 0);
        pack_free(&a);
        pack_free(&b);
    }
    eng_free(e);
}

static void test_varlen_problem_checks_explain_each_bad_case(void)
{
    int32_t cq[4] = {0, 3, 10, 12}, ck[4] = {0, 4, 4, 9};
    const struct attn_problem good = {.batch = 3, .seqlen_q = 7, .seqlen_k = 5, .heads_q = 2,
                                      .heads_kv = 1, .head_dim = 32, .dtype = DTYPE_F32,
                                      .mask = SCHED_MASK_FULL, .scale = 0.5f, .window = 1,
                                      .window_left = -1, .window_right = 3, .softcap = 30.0f,
                                      .cu_seqlens_q = cq, .cu_seqlens_k = ck, .total_q = 12,
                                      .total_k = 9};
    char why[256];
    CU_ASSERT_EQUAL(attn_explain_problem(&good, why, sizeof why), 0);
    CU_ASSERT_STRING_EQUAL(why, "");
    struct {
        const char *needle;
        struct attn_problem p;
        int32_t cq[4], ck[4];
    } bad[] = {
        {"must start at 0", good, {1, 3, 10, 12}, {0, 4, 4, 9}},
        {"must not decrease", good, {0, 3, 2, 12}, {0, 4, 4, 9}},
        {"must not decrease", good, {0, 3, 10, 12}, {0, 4, 3, 9}},
        {"the last offset must be the token count 12", good, {0, 3, 10, 11}, {0, 4, 4, 9}},
        {"more than max_seqlen_q=7", good, {0, 3, 11, 12}, {0, 4, 4, 9}},
        {"more than max_seqlen_k=5", good, {0, 3, 10, 12}, {0, 0, 6, 9}},
        {"window (-2, 3)", good, {0, 3, 10, 12}, {0, 4, 4, 9}},
        {"softcap -1", good, {0, 3, 10, 12}, {0, 4, 4, 9}},
        {"cu_seqlens_k is missing", good, {0, 3, 10, 12}, {0, 4, 4, 9}},
    };
    bad[6].p.window_left = -2;
    bad[7].p.softcap = -1.0f;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bad[i].p.cu_seqlens_q = bad[i].cq;
        bad[i].p.cu_seqlens_k = i == 8 ? NULL : bad[i].ck;
        int rc = attn_explain_problem(&bad[i].p, why, sizeof why);
        CU_ASSERT_EQUAL(rc, -EINVAL);
        CU_ASSERT_EQUAL(attn_check_problem(&bad[i].p), rc);
        if (!strstr(why, bad[i].needle))
            printf("\n  case %zu: \"%s\" does not say \"%s\"\n", i, why, bad[i].needle);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, bad[i].needle));
    }
    struct attn_problem nan_cap = good;
    nan_cap.softcap = NAN;
    CU_ASSERT_EQUAL(attn_check_problem(&nan_cap), -EINVAL);
    /* a softcap so small that scale / softcap is infinite in float: refused with a reason,
     * not NaN outputs (0 * inf); the smallest normal one is still served */
    struct attn_problem tiny_cap = good;
    tiny_cap.softcap = 1e-40f;
    CU_ASSERT_EQUAL(attn_explain_problem(&tiny_cap, why, sizeof why), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "scale / softcap must be a finite float"));
    tiny_cap.softcap = 1e-30f;
    CU_ASSERT_EQUAL(attn_check_problem(&tiny_cap), 0);
    /* and the engine refuses what the check refuses */
    struct eng *e = eng_new(1);
    float lse[1];
    float buf[4096];
    struct attn_tensor t = attn_dense(buf, 12, 2, 32), t1 = attn_dense(buf, 9, 1, 32);
    CU_ASSERT_EQUAL(eng_forward(e, &bad[1].p, NULL, t, lse, t, t1, t1, NULL), -EINVAL);
    eng_free(e);
}

int suite_varlen(void)
{
    CU_pSuite s = CU_add_suite("varlen", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_varlen_problem_checks_explain_each_bad_case);
    ADD_TEST(s, test_varlen_engine_matches_float64_reference_sequence_by_sequence);
    ADD_TEST(s, test_varlen_8k_sequences_with_a_window_match_float64_reference);
    ADD_TEST(s, test_varlen_float64_serves_windows_softcap_and_packed_batches);
    ADD_TEST(s, test_varlen_dense_batch_with_window_and_softcap_matches_reference);
    ADD_TEST(s, test_varlen_rows_without_keys_give_zeros_never_nan);
    ADD_TEST(s, test_varlen_window_past_the_length_gives_the_plain_mask_bits);
    ADD_TEST(s, test_varlen_backward_bits_identical_for_1_to_8_threads_every_schedule);
    ADD_TEST(s, test_varlen_sequence_bits_do_not_depend_on_packing);
    return 0;
}
