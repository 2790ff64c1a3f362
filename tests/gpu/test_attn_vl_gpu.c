// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_attn_vl_gpu.c - the CUDA kernels for sliding windows, softcap and packed
 * variable-length batches (kernels/cuda/attn_vl.cu) against the float64 reference computed
 * sequence by sequence (kernels/attn/ref.c), and their determinism as bytes; then the same
 * through a real `dashd --backend cuda` with libdash.
 *
 * Suite gpu_attn_vl: random ragged batches (lengths 1, tile multiples and not, empty
 * sequences, up to 2000 rows), dense batches with windows and softcap, windows from 0 to
 * past the length (causal and not), softcap 0/30/50, GQA, fp16/bf16, head dims 64 and 128
 * (and 96, 80, 40, 112, which run the 128 or 64 kernels on copies widened by zero columns);
 * values, LSE and gradients; rows that see no key exactly 0 (LSE +inf), keys no query sees
 * exactly 0; every deterministic schedule bitwise repeatable and the same bits for several
 * grids; a sequence's bits the same whatever it is packed with. The backward runs on both
 * of its kernels where the GPU has both: v3's wgmma step (sm_90: the default there, 64 x
 * 128 tiles) and v2's mma.sync step (64 x 64 tiles, and every tile width with impl v2);
 * each test checks which one ran (cuattn__last_wg). Outputs are poisoned (0xff,
 * NaN) before every call; inputs are fresh random draws (the runner prints the seed).
 *
 * Suite gpu_dashd_varlen: a packed batch with a window and a softcap through dashd
 * --backend cuda (tensors in a registered CUDA allocation, and again in shared memory the
 * daemon stages; offsets in shared memory) gives the in-process kernels' bits; a head dim
 * these kernels lack is refused clearly.
 */
#include "gpu_attn_vl.h"

#include "gpu_bufs.h"
#include "gpu_check.h"
#include "../harness.h"
#include "../testutil.h"
#include "../../client/dash.h"
#include "kernels/attn/ref.h"
#include "kernels/cuda/attn_cuda.h"
#include "kernels/cuda/attn_cuda_test.h"

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VL_MAXB GPU_BUFS_MAXB

static int32_t irand(struct tu_rng *r, int32_t n)
{
    return (int32_t)(tu_next(r) % (uint64_t)n);
}

/* The implementations whose VL backward kernels differ on this GPU: v3 (the wgmma step)
 * where the GPU has it, and v2 (mma.sync); a's impl is left at the first. */
static int vl_impls(struct cuattn *ca, int32_t impls[2])
{
    int n = 0;
    if (cuattn_set_impl(ca, CUATTN_IMPL_WGMMA) == 0)
        impls[n++] = CUATTN_IMPL_WGMMA;
    impls[n++] = CUATTN_IMPL_TENSOR_CORES;
    CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impls[0]), 0);
    return n;
}

/* The last backward ran the kernel expected of impl and kv-tile width block_n (0: the
 * default, 128): v3's where impl is v3 and the tiles 64 x 128, else v2's. */
static int ran_expected(const struct cuattn *ca, int32_t impl, int32_t block_n, const char *what)
{
    const int want = impl == CUATTN_IMPL_WGMMA && block_n != 64;
    if (cuattn__last_wg(ca) == want)
        return 1;
    fprintf(stderr, "\n  %s: ran v%d's backward, expected v%d's", what, cuattn__last_wg(ca) ? 3 : 2, want ? 3 : 2);
    return 0;
}

/* The last forward ran v3's kernel (attn_vl.cu's on fwd_wg.cuh) where impl is v3, else v2's. */
static int ran_expected_fwd(const struct cuattn *ca, int32_t impl, const char *what)
{
    const int want = impl == CUATTN_IMPL_WGMMA;
    if (cuattn__last_fwd_wg(ca) == want)
        return 1;
    fprintf(stderr, "\n  %s: ran v%d's forward, expected v%d's", what, cuattn__last_fwd_wg(ca) ? 3 : 2, want ? 3 : 2);
    return 0;
}

static double tolerance(enum dtype_kind t)
{
    return t == DTYPE_F16 ? 5e-3 : 1e-2;
}

/* The float64 reference (sequence by sequence), and the checks against it. */
struct vrefs {
    double *out, *lse, *dq, *dk, *dv;
};

/* The forward's float64 reference (O, LSE) of a, sequence by sequence, with room for the
 * gradients: vrefs_compute's (Dsum from the float64 O), or vrefs_backward_given_out's after
 * gpu_bufs_forward (the long ragged batches skip the former, which they would not use). */
static void vrefs_forward(struct vrefs *R, const struct gpu_bufs *a)
{
    R->out = malloc(sizeof(double) * (size_t)(a->nq + 1));
    R->lse = malloc(sizeof(double) * (size_t)(a->nlse + 1));
    R->dq = malloc(sizeof(double) * (size_t)(a->nq + 1));
    R->dk = malloc(sizeof(double) * (size_t)(a->nk + 1));
    R->dv = malloc(sizeof(double) * (size_t)(a->nk + 1));
    CU_ASSERT_FATAL(R->out && R->lse && R->dq && R->dk && R->dv);
    CU_ASSERT_FATAL(ref_forward(&a->p, gpu_bufs_tq(a, a->q), gpu_bufs_tk(a, a->k), gpu_bufs_tk(a, a->v), R->out, R->lse) == 0);
}

/* The forward's reference and the gradients' (Dsum from the float64 O). */
static void vrefs_compute(struct vrefs *R, const struct gpu_bufs *a)
{
    vrefs_forward(R, a);
    CU_ASSERT_FATAL(ref_backward(&a->p, gpu_bufs_tq(a, a->q), gpu_bufs_tk(a, a->k), gpu_bufs_tk(a, a->v), gpu_bufs_tq(a, a->dout), R->dq, R->dk,
                                 R->dv) == 0);
}

/* The gradients again, Dsum from the O the kernel's forward stored (ref_backward_given_out):
 * the backward reads that O. In a row with two keys and P = (0.0014, 0.9986), O's f16
 * rounding alone gives dQ a relative error of 0.07 (float64 emulation); a dense f16 case of
 * 310 queries over 2 keys, causal, measured dq 0.0071 against the float64 O on the H200,
 * where the f16 kernels give 4e-4 on rows of many keys. Call after gpu_bufs_forward. */
static void vrefs_backward_given_out(struct vrefs *R, const struct gpu_bufs *a)
{
    CU_ASSERT_FATAL(ref_backward_given_out(&a->p, gpu_bufs_tq(a, a->q), gpu_bufs_tk(a, a->k), gpu_bufs_tk(a, a->v), gpu_bufs_tq(a, a->out),
                                           gpu_bufs_tq(a, a->dout), R->dq, R->dk, R->dv) == 0);
}

static void vrefs_free(struct vrefs *R)
{
    free(R->out);
    free(R->lse);
    free(R->dq);
    free(R->dk);
    free(R->dv);
}

/* Relative error of n values of a got tensor against ref; exact zeros where the reference
 * is exactly zero on a whole row of `row` values (rows that see no key, keys no query
 * sees) are counted in *zero_bad. */
static double compare(const void *got, enum dtype_kind t, const double *ref, int64_t n, int64_t row,
                      int *zero_bad)
{
    double *g = malloc(sizeof(double) * (size_t)(n + 1));
    CU_ASSERT_FATAL(g != NULL);
    tu_to_double(got, t, n, g);
    for (int64_t r0 = 0; r0 < n; r0 += row) {
        int zero = 1;
        for (int64_t e = r0; e < r0 + row && zero; e++)
            zero = ref[e] == 0.0;
        if (zero)
            for (int64_t e = r0; e < r0 + row; e++)
                *zero_bad += !(g[e] == 0.0);
    }
    double e = n ? ref_rel_error(g, ref, n) : 0.0;
    free(g);
    return e;
}

/* Forward and gradients within the dtype's tolerance, LSE within 1e-4 (+inf where the
 * reference row sees no key), exact zeros where the reference has them. 1 if all hold;
 * the numbers go to stderr otherwise. */
static int check_forward(const struct gpu_bufs *a, const struct vrefs *R, const char *what)
{
    int zb = 0, lse_bad = 0;
    const double e = compare(a->out, a->p.dtype, R->out, a->nq, a->p.head_dim, &zb);
    for (int64_t i = 0; i < a->nlse; i++)
        lse_bad += isinf(R->lse[i]) ? !(isinf(a->lse[i]) && a->lse[i] > 0)
                                    : !(fabs(a->lse[i] - R->lse[i]) <= 1e-4 * (1 + fabs(R->lse[i])));
    const int ok = e < tolerance(a->p.dtype) && lse_bad == 0 && zb == 0;
    if (!ok)
        fprintf(stderr, "\n  %s forward: rel error %.3g, %d bad lse, %d masked values not 0", what, e, lse_bad, zb);
    return ok;
}

static int check_backward(const struct gpu_bufs *a, const struct vrefs *R, const char *what)
{
    int zb = 0;
    const int64_t D = a->p.head_dim;
    const double eq = compare(a->dq, a->p.dtype, R->dq, a->nq, D, &zb);
    const double ek = compare(a->dk, a->p.dtype, R->dk, a->nk, D, &zb);
    const double ev = compare(a->dv, a->p.dtype, R->dv, a->nk, D, &zb);
    const double tol = tolerance(a->p.dtype);
    const int ok = eq < tol && ek < tol && ev < tol && zb == 0;
    if (!ok)
        fprintf(stderr, "\n  %s backward: rel errors dq %.3g dk %.3g dv %.3g, %d masked values not 0", what, eq,
                ek, ev, zb);
    return ok;
}

/* Each implementation's backward of a under each of the nk schedules on grid CTAs (0: the
 * SM count), checked against R (and that the implementation asked for is the one that ran);
 * impls[0] is current again on return. Returns the failures. */
static int backward_every(struct cuattn *ca, struct gpu_bufs *a, const struct vrefs *R, const int32_t *impls,
                          int ni, const enum sched_kind *kinds, size_t nk, const char *what, int32_t grid)
{
    int bad = 0;
    for (int ii = 0; ii < ni; ii++) {
        CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impls[ii]), 0);
        for (size_t k = 0; k < nk; k++) {
            struct attn_config cfg = {kinds[k], 0, 0, 0, 0};
            char at[224];
            snprintf(at, sizeof at, "%s v%d %s", what, (int)impls[ii], sched_kind_name(kinds[k]));
            const int rc = gpu_bufs_backward(ca, a, &cfg, grid, NULL);
            CU_ASSERT_EQUAL(rc, 0);
            if (rc) {
                fprintf(stderr, "\n  %s: backward returned %d", at, rc);
                bad++;
                continue;
            }
            bad += !ran_expected(ca, impls[ii], 0, at);
            bad += !check_backward(a, R, at);
        }
    }
    CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impls[0]), 0);
    return bad;
}

static struct attn_problem base_problem(int32_t batch, int32_t hq, int32_t hkv, int32_t d, enum dtype_kind dt)
{
    struct attn_problem p = {.batch = batch, .seqlen_q = 1, .seqlen_k = 1, .heads_q = hq, .heads_kv = hkv,
                             .head_dim = d, .dtype = dt, .mask = SCHED_MASK_FULL,
                             .scale = (float)(1.0 / sqrt((double)d))};
    return p;
}

/* A length: 1, tile edges, or anything up to max. */
static int32_t draw_len(struct tu_rng *r, int32_t max)
{
    static const int32_t edges[] = {1, 2, 63, 64, 65, 127, 128, 129, 191};
    const int32_t k = irand(r, 3);
    if (k == 0)
        return edges[irand(r, (int32_t)(sizeof edges / sizeof edges[0]))];
    return 1 + irand(r, max);
}

/* A window side: unbounded, 0, small, or past the length. */
static int32_t draw_side(struct tu_rng *r, int32_t len)
{
    switch (irand(r, 4)) {
    case 0:
        return -1;
    case 1:
        return 0;
    case 2:
        return irand(r, 200);
    default:
        return len + irand(r, 100);
    }
}

static void test_attn_vl_gpu_random_batches_match_float64_reference(void)
{
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x7a11);
    static const int32_t heads[][2] = {{4, 2}, {4, 1}, {2, 2}, {3, 1}};
    static const float caps[] = {0.0f, 30.0f, 50.0f};
    const int cases = 18;
    int bad = 0;
    for (int ci = 0; ci < cases; ci++) {
        const int packed = ci % 3 != 2, big = ci == 4 || ci == 13;
        /* 96, 80, 40, 112: the 128 or 64 kernels on widened copies */
        static const int32_t dims[] = {64, 128, 96, 80, 40, 112};
        const int32_t d = dims[(ci / 2) % 6];
        const int32_t *hh = heads[irand(&r, 4)];
        struct attn_problem p = base_problem(1, hh[0], hh[1], d, ci % 2 ? DTYPE_BF16 : DTYPE_F16);
        p.mask = irand(&r, 2) ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL;
        p.softcap = caps[ci % 3];
        if (p.softcap > 0)
            p.scale *= 4.0f; /* scores up to about half the cap: the tanh bends them */
        int32_t lq[VL_MAXB], lk[VL_MAXB], maxlen = 1;
        if (packed) {
            p.batch = big ? 2 : 1 + irand(&r, 6);
            for (int32_t b = 0; b < p.batch; b++) {
                lq[b] = big && b == 0 ? 1900 + irand(&r, 100) : draw_len(&r, 500);
                lk[b] = irand(&r, 2) ? lq[b] : draw_len(&r, 500);
                if (p.batch > 2 && b == 1 && irand(&r, 2)) /* an empty side */
                    (irand(&r, 2) ? lq : lk)[b] = 0;
                maxlen = lq[b] > maxlen ? lq[b] : maxlen;
            }
        } else {
            p.batch = 1 + irand(&r, 3);
            p.seqlen_q = draw_len(&r, 400);
            p.seqlen_k = irand(&r, 2) ? p.seqlen_q : draw_len(&r, 400);
            maxlen = p.seqlen_q;
        }
        if (irand(&r, 4) != 0 || p.softcap == 0) { /* mostly a window */
            p.window = 1;
            p.window_left = draw_side(&r, maxlen);
            p.window_right = draw_side(&r, maxlen);
        }
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, packed ? lq : NULL, packed ? lk : NULL, &r);
        struct vrefs R;
        vrefs_compute(&R, &a);
        char what[160];
        snprintf(what, sizeof what, "case %d (%s B %d, H %d/%d, D %d, %s, %s, window %d (%d, %d), cap %g)", ci,
                 packed ? "packed" : "dense", a.p.batch, a.p.heads_q, a.p.heads_kv, d,
                 a.p.dtype == DTYPE_BF16 ? "bf16" : "f16", a.p.mask == SCHED_MASK_CAUSAL ? "causal" : "full",
                 a.p.window, a.p.window_left, a.p.window_right, (double)a.p.softcap);
        int32_t impls[2];
        const int ni = vl_impls(ca, impls);
        for (int ii = ni - 1; ii >= 0; ii--) { /* each forward; the default's O (v3's) last */
            CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impls[ii]), 0);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
            bad += !ran_expected_fwd(ca, impls[ii], what);
            bad += !check_forward(&a, &R, what);
        }
        vrefs_backward_given_out(&R, &a);
        const enum sched_kind kinds[] = {SCHED_AUTO, SCHED_DESCENDING, SCHED_ATOMIC};
        bad += backward_every(ca, &a, &R, impls, ni, kinds, sizeof kinds / sizeof kinds[0], what, 0);
        vrefs_free(&R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    cuattn_free(ca);
}

/* The fixed packed batch of the determinism tests: lengths 1, 100, 0 (no query), 333, 64,
 * 517, 2; a window, a softcap, GQA 4:2, head dim 128 and 64. */
static void det_problem(struct gpu_bufs *a, int32_t d, enum dtype_kind dt, struct tu_rng *r)
{
    static const int32_t lq[] = {1, 100, 0, 333, 64, 517, 2}, lk[] = {1, 130, 40, 333, 64, 300, 5};
    struct attn_problem p = base_problem(7, 4, 2, d, dt);
    p.mask = SCHED_MASK_CAUSAL;
    p.window = 1;
    p.window_left = 150;
    p.window_right = 0;
    p.softcap = 30.0f;
    p.scale *= 4.0f;
    gpu_bufs_init(a, &p, lq, lk, r);
}

/* Every deterministic schedule (W 64 and 7 for shift), at both kv-tile widths (on sm_90:
 * 128 runs v3's wgmma kernel, 64 v2's): the same bits on a repeat and for grids 0 (the SM
 * count), 1 and 5 (raised to what a shift chunk needs), and close to the reference; the
 * reported schedule is the one asked for. */
static void test_attn_vl_gpu_deterministic_schedules_repeat_bitwise_for_every_grid(void)
{
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xde7);
    int bad = 0;
    int32_t impls[2];
    vl_impls(ca, impls); /* the default: v3 where the GPU has it */
    for (int di = 0; di < 4; di++) { /* (64, f16), (128, bf16), (64, bf16), (128, f16) */
        struct gpu_bufs a;
        det_problem(&a, di % 2 ? 128 : 64, (di == 1 || di == 2) ? DTYPE_BF16 : DTYPE_F16, &r);
        struct vrefs R;
        vrefs_compute(&R, &a);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        bad += !check_forward(&a, &R, "determinism batch");
        const enum sched_kind kinds[] = {SCHED_ASCENDING, SCHED_DESCENDING, SCHED_SPT, SCHED_SHIFT, SCHED_SHIFT};
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            const int32_t w = k == 4 ? 7 : SCHED_W_DEFAULT;
            for (int32_t bn = 64; bn <= cuattn_bwd_block_n(ca, &a.p); bn += 64) { /* the tiles it has */
                struct attn_config cfg = {kinds[k], w, 0, bn, 0}, used;
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, &used), 0);
                CU_ASSERT_EQUAL(used.sched, kinds[k]);
                CU_ASSERT_EQUAL(used.w, w);
                CU_ASSERT_EQUAL(used.block_n, bn);
                char what[96];
                snprintf(what, sizeof what, "D %d %s schedule %d W %d block_n %d", a.p.head_dim,
                         a.p.dtype == DTYPE_BF16 ? "bf16" : "f16", (int)kinds[k], w, bn);
                bad += !ran_expected(ca, impls[0], bn, what);
                bad += !check_backward(&a, &R, what);
                struct gpu_copy g;
                gpu_copy_bwd(&g, &a);
                const int32_t grids[] = {0, 1, 5};
                for (size_t gi = 0; gi < sizeof grids / sizeof grids[0]; gi++) {
                    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, grids[gi], NULL), 0);
                    if (!gpu_copy_equal(&g, &a)) {
                        fprintf(stderr, "\n  %s: grid %d gave other bits", what, grids[gi]);
                        bad++;
                    }
                }
                gpu_copy_free(&g);
            }
        }
        vrefs_free(&R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    cuattn_free(ca);
}

/* Every 16-bit element of n at p: NaN (fp16 and bf16 alike: exponent all ones, a mantissa
 * bit set). */
static void fill_nan16(void *p, size_t n)
{
    uint16_t *e = p;
    for (size_t i = 0; i < n; i++)
        e[i] = 0x7fffu;
}

/* Sequence A packed alone, and between two others (so at another offset) whose inputs are
 * all NaN: A's outputs, LSE and gradients are the same bits, for an explicit schedule of
 * each kind, with each backward kernel the GPU has (v3's, v2's) and head dims 64 and 128.
 * A's lengths are no tile multiples, so its last tiles run past its end into the third
 * sequence's rows: a load that took them (a TMA box over the end) would carry NaN into A's
 * results where zeros belong (NaN times a masked P of 0 is NaN). */
static int packing_case(struct cuattn *ca, int32_t D, struct tu_rng *r)
{
    const int32_t LA = 291, KA = 250, HQ = 4, HKV = 2;
    const int32_t lq2[] = {77, LA, 130}, lk2[] = {90, KA, 64};
    struct attn_problem p = base_problem(1, HQ, HKV, D, DTYPE_BF16);
    p.window = 1;
    p.window_left = 100;
    p.window_right = 20;
    p.softcap = 50.0f;
    p.scale *= 5.0f;
    struct gpu_bufs one, three;
    gpu_bufs_init(&one, &p, &LA, &KA, r);
    p.batch = 3;
    gpu_bufs_init(&three, &p, lq2, lk2, r);
    /* A's rows of `three` are `one`'s: copy them in (row sizes in elements) */
    const size_t rowq = (size_t)HQ * D * one.es, rowk = (size_t)HKV * D * one.es;
    const size_t aq = (size_t)lq2[0] * rowq, ak = (size_t)lk2[0] * rowk;
    fill_nan16(three.q, (size_t)three.nq);
    fill_nan16(three.dout, (size_t)three.nq);
    fill_nan16(three.k, (size_t)three.nk);
    fill_nan16(three.v, (size_t)three.nk);
    memcpy((char *)three.q + aq, one.q, (size_t)LA * rowq);
    memcpy((char *)three.dout + aq, one.dout, (size_t)LA * rowq);
    memcpy((char *)three.k + ak, one.k, (size_t)KA * rowk);
    memcpy((char *)three.v + ak, one.v, (size_t)KA * rowk);
    CUDA_OK(cudaMemcpy(three.d_q, three.q, three.es * (size_t)three.nq, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(three.d_dout, three.dout, three.es * (size_t)three.nq, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(three.d_k, three.k, three.es * (size_t)three.nk, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(three.d_v, three.v, three.es * (size_t)three.nk, cudaMemcpyHostToDevice));
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &one, NULL, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &three, NULL, NULL), 0);
    int bad = 0;
    bad += memcmp((char *)three.out + aq, one.out, (size_t)LA * rowq) != 0;
    for (int32_t h = 0; h < HQ; h++) /* lse (heads, total_q) */
        bad += memcmp(three.lse + (size_t)h * three.rq + lq2[0], one.lse + (size_t)h * LA,
                      sizeof(float) * (size_t)LA) != 0;
    int32_t impls[2];
    const int ni = vl_impls(ca, impls);
    const enum sched_kind kinds[] = {SCHED_ASCENDING, SCHED_DESCENDING, SCHED_SPT, SCHED_SHIFT};
    for (int ii = 0; ii < ni; ii++) {
        CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impls[ii]), 0);
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            struct attn_config cfg = {kinds[k], 0, 0, 0, 0};
            char what[64];
            snprintf(what, sizeof what, "D %d v%d schedule %d", D, (int)impls[ii], (int)kinds[k]);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &one, &cfg, 0, NULL), 0);
            bad += !ran_expected(ca, impls[ii], 0, what);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &three, &cfg, 0, NULL), 0);
            bad += !ran_expected(ca, impls[ii], 0, what);
            if (memcmp((char *)three.dq + aq, one.dq, (size_t)LA * rowq) ||
                memcmp((char *)three.dk + ak, one.dk, (size_t)KA * rowk) ||
                memcmp((char *)three.dv + ak, one.dv, (size_t)KA * rowk)) {
                fprintf(stderr, "\n  %s: the sequence's gradients changed with the packing", what);
                bad++;
            }
        }
    }
    CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impls[0]), 0);
    gpu_bufs_free(&one);
    gpu_bufs_free(&three);
    return bad;
}

static void test_attn_vl_gpu_sequence_bits_do_not_depend_on_packing(void)
{
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xba7c);
    int bad = 0;
    for (int32_t D = 64; D <= 128; D += 64)
        bad += packing_case(ca, D, &r);
    CU_ASSERT_EQUAL(bad, 0);
    cuattn_free(ca);
}

/* A dense batch with a window and a softcap (4 sequences of 700 queries over 650 keys, GQA
 * 4:2, bf16) and the same sequences packed: the forward's O and LSE are the same bits, for
 * each forward kernel the GPU has; on v3's the dense batch loads through TMA (the persistent
 * kernel: a CTA an SM, and again on 1, 3 and 7 CTAs, each then taking several q-tiles in a
 * row, cuattn__force_fwd_ctas), and again through cp.async (cuattn__force_no_tma, a CTA a
 * tile), and the packed batch through TMA with maps per sequence and again through
 * cp.async - the same bytes in shared memory, so the same bits.
 * Head dims 64 and 128; long enough that the band starts past the first kv-tile (window
 * (300, 0) at 700 rows, which is no multiple of a tile: each sequence's last tiles run
 * past its end, into the next one's rows). */
static void test_attn_vl_gpu_forward_bits_do_not_depend_on_loads_or_packing(void)
{
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xf0a7);
    enum { B = 4, SQ = 700, SK = 650, HQ = 4, HKV = 2 };
    int bad = 0;
    for (int32_t D = 64; D <= 128; D += 64) {
        struct attn_problem p = base_problem(B, HQ, HKV, D, DTYPE_BF16);
        p.seqlen_q = SQ;
        p.seqlen_k = SK;
        p.mask = SCHED_MASK_CAUSAL;
        p.window = 1;
        p.window_left = 300;
        p.window_right = 0;
        p.softcap = 30.0f;
        p.scale *= 4.0f;
        struct gpu_bufs dense, packed;
        gpu_bufs_init(&dense, &p, NULL, NULL, &r);
        const int32_t lq[B] = {SQ, SQ, SQ, SQ}, lk[B] = {SK, SK, SK, SK};
        gpu_bufs_init(&packed, &p, lq, lk, &r);
        /* (B, S, H, D) and (B * S, H, D) contiguous are the same bytes */
        CU_ASSERT_FATAL(dense.nq == packed.nq && dense.nk == packed.nk && dense.nlse == packed.nlse);
        CUDA_OK(cudaMemcpy(packed.d_q, dense.q, dense.es * (size_t)dense.nq, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(packed.d_k, dense.k, dense.es * (size_t)dense.nk, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(packed.d_v, dense.v, dense.es * (size_t)dense.nk, cudaMemcpyHostToDevice));
        struct vrefs R;
        vrefs_compute(&R, &dense);
        int32_t impls[2];
        const int ni = vl_impls(ca, impls);
        const size_t ob = dense.es * (size_t)dense.nq, lb = sizeof(float) * (size_t)dense.nlse;
        void *out0 = malloc(ob + 1);
        float *lse0 = malloc(lb + 4);
        CU_ASSERT_FATAL(out0 && lse0);
        for (int ii = 0; ii < ni; ii++) {
            char what[64];
            snprintf(what, sizeof what, "D %d v%d", D, (int)impls[ii]);
            const int v3 = impls[ii] == CUATTN_IMPL_WGMMA;
            CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impls[ii]), 0);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &dense, NULL, NULL), 0);
            bad += !ran_expected_fwd(ca, impls[ii], what);
            bad += cuattn__last_fwd_tma(ca) != v3;
            bad += !check_forward(&dense, &R, what);
            memcpy(out0, dense.out, ob);
            memcpy(lse0, dense.lse, lb); /* (B, H, S) */
            if (v3) {
                cuattn__force_no_tma(ca, 1);
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &dense, NULL, NULL), 0);
                cuattn__force_no_tma(ca, 0);
                bad += cuattn__last_fwd_tma(ca) != 0 || !ran_expected_fwd(ca, impls[ii], what);
                if (memcmp(out0, dense.out, ob) != 0 || memcmp(lse0, dense.lse, lb) != 0) {
                    fprintf(stderr, "\n  %s: cp.async gave other bits than TMA", what);
                    bad++;
                }
                const int32_t ctas[] = {1, 3, 7}; /* the persistent kernel's tiles in a row */
                for (size_t ci = 0; ci < sizeof ctas / sizeof ctas[0]; ci++) {
                    cuattn__force_fwd_ctas(ca, ctas[ci]);
                    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &dense, NULL, NULL), 0);
                    cuattn__force_fwd_ctas(ca, 0);
                    bad += cuattn__last_fwd_tma(ca) != 1 || !ran_expected_fwd(ca, impls[ii], what);
                    if (memcmp(out0, dense.out, ob) != 0 || memcmp(lse0, dense.lse, lb) != 0) {
                        fprintf(stderr, "\n  %s: TMA on %d CTAs gave other bits", what, (int)ctas[ci]);
                        bad++;
                    }
                }
            }
            for (int cp = 0; cp <= v3; cp++) { /* v3: TMA (maps per sequence), then cp.async */
                cuattn__force_no_tma(ca, cp);
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &packed, NULL, NULL), 0);
                cuattn__force_no_tma(ca, 0);
                bad += cuattn__last_fwd_tma(ca) != (v3 && !cp) || !ran_expected_fwd(ca, impls[ii], what);
                int lse_bad = 0;
                for (int32_t b = 0; b < B; b++) /* packed LSE: (H, B * S) */
                    for (int32_t h = 0; h < HQ; h++)
                        lse_bad += memcmp(packed.lse + (size_t)h * B * SQ + (size_t)b * SQ,
                                          lse0 + ((size_t)b * HQ + h) * SQ, sizeof(float) * SQ) != 0;
                if (memcmp(out0, packed.out, ob) != 0 || lse_bad) {
                    fprintf(stderr, "\n  %s: packed (%s) gave other bits than dense (%d LSE rows)", what,
                            cp ? "cp.async" : "TMA", lse_bad);
                    bad++;
                }
            }
        }
        CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impls[0]), 0);
        free(out0);
        free(lse0);
        vrefs_free(&R);
        gpu_bufs_free(&dense);
        gpu_bufs_free(&packed);
    }
    CU_ASSERT_EQUAL(bad, 0);
    cuattn_free(ca);
}

/* Rows that see no key (a window right of every key, causal with more queries than keys,
 * a sequence without keys) get O = 0, LSE = +inf and dQ = 0; keys no query sees (a
 * sequence without queries, a window that skips them) dK = dV = 0 - never NaN; with each
 * backward kernel the GPU has. Each backward runs twice, the second time on scratch filled
 * with NaN first (cuattn__poison_scratch: v3 does not zero its dQ accumulator, and rows no
 * kv-tile reaches are never written there), and must give the same bytes. */
static void test_attn_vl_gpu_rows_without_keys_give_zeros_not_nan(void)
{
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x2e50);
    const int32_t lq[] = {300, 0, 50, 200}, lk[] = {100, 70, 0, 400};
    struct attn_problem p = base_problem(4, 4, 1, 128, DTYPE_F16);
    p.mask = SCHED_MASK_CAUSAL;
    p.window = 1;
    p.window_left = 10; /* sequence 3: keys 0 .. 189 are seen by nobody */
    p.window_right = 0;
    struct gpu_bufs a;
    gpu_bufs_init(&a, &p, lq, lk, &r);
    struct vrefs R;
    vrefs_compute(&R, &a);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
    CU_ASSERT(check_forward(&a, &R, "rows without keys"));
    int inf_rows = 0;
    for (int64_t i = 0; i < a.nlse; i++)
        inf_rows += isinf(R.lse[i]) != 0;
    CU_ASSERT(inf_rows >= 4 * (200 + 50)); /* sequence 0's first 200 rows, all of sequence 2's */
    /* sequence 3's kv-tile 0 (keys 0 .. 127) has no step at all: its dK, dV are stored as
     * zeros without a product */
    const enum sched_kind kinds[] = {SCHED_SHIFT, SCHED_SPT};
    int32_t impls[2];
    const int ni = vl_impls(ca, impls);
    for (int ii = 0; ii < ni; ii++) {
        CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impls[ii]), 0);
        for (size_t k = 0; k < 2; k++) {
            struct attn_config cfg = {kinds[k], 0, 0, 0, 0};
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
            CU_ASSERT(ran_expected(ca, impls[ii], 0, "rows without keys"));
            CU_ASSERT(check_backward(&a, &R, "rows without keys"));
            struct gpu_copy g;
            gpu_copy_bwd(&g, &a);
            cuattn__poison_scratch(ca, 1);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
            cuattn__poison_scratch(ca, 0);
            CU_ASSERT(check_backward(&a, &R, "rows without keys, NaN scratch"));
            CU_ASSERT(gpu_copy_equal(&g, &a));
            gpu_copy_free(&g);
        }
    }
    vrefs_free(&R);
    gpu_bufs_free(&a);
    cuattn_free(ca);
}

/* A dense batch with a window that reaches every key gives the plain mask's bits (the
 * dense kernels run it), auto names shift there and spt for a band, and what these
 * kernels lack is refused: head dim 256 (96 runs the 128 kernels widened where 128 has
 * tensor cores). */
static void test_attn_vl_gpu_plain_windows_keep_dense_bits_and_other_dims_are_refused(void)
{
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x91a1);
    struct attn_problem p = base_problem(2, 4, 2, 64, DTYPE_BF16);
    p.seqlen_q = 200;
    p.seqlen_k = 170;
    p.mask = SCHED_MASK_CAUSAL;
    struct gpu_bufs a;
    gpu_bufs_init(&a, &p, NULL, NULL, &r);
    struct attn_config cfg = {SCHED_SHIFT, 0, 0, 0, 0};
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
    float *lse0 = malloc(sizeof(float) * (size_t)a.nlse);
    void *out0 = malloc(a.es * (size_t)a.nq);
    CU_ASSERT_FATAL(lse0 && out0);
    memcpy(lse0, a.lse, sizeof(float) * (size_t)a.nlse);
    memcpy(out0, a.out, a.es * (size_t)a.nq);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
    struct gpu_copy g;
    gpu_copy_bwd(&g, &a);
    a.p.window = 1;
    a.p.window_left = 500; /* past every key: the causal mask */
    a.p.window_right = 3;
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
    CU_ASSERT(memcmp(out0, a.out, a.es * (size_t)a.nq) == 0);
    CU_ASSERT(memcmp(lse0, a.lse, sizeof(float) * (size_t)a.nlse) == 0);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
    CU_ASSERT(gpu_copy_equal(&g, &a));
    /* auto: shift for the plain mask, spt for a band (its bits those of spt asked for by
     * name) */
    struct attn_config used;
    memset(&used, 0, sizeof used);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, NULL, 0, &used), 0);
    CU_ASSERT_EQUAL(used.sched, SCHED_SHIFT);
    CU_ASSERT(gpu_copy_equal(&g, &a));
    a.p.window_left = 40;
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
    struct attn_config spt = {SCHED_SPT, 0, 0, 0, 0};
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &spt, 0, NULL), 0);
    gpu_copy_free(&g);
    gpu_copy_bwd(&g, &a);
    memset(&used, 0, sizeof used);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, NULL, 0, &used), 0);
    CU_ASSERT_EQUAL(used.sched, SCHED_SPT);
    CU_ASSERT(gpu_copy_equal(&g, &a));
    gpu_copy_free(&g);
    free(lse0);
    free(out0);
    struct attn_problem q = a.p;
    q.window_left = 20;
    const int32_t too_wide[] = {136, 200, 256}; /* the kernels have widths 64 and 128 */
    for (size_t i = 0; i < sizeof too_wide / sizeof too_wide[0]; i++) {
        q.head_dim = too_wide[i];
        CU_ASSERT_EQUAL(cuattn_check_config(ca, &q, NULL, 0), -ENOTSUP);
        CU_ASSERT_EQUAL(cuattn_check_config(ca, &q, NULL, 1), -ENOTSUP);
    }
    q.head_dim = 96;
    CU_ASSERT_NOT_EQUAL(cuattn_impl_for(ca, 96), CUATTN_IMPL_CUDA_CORES);
    CU_ASSERT_EQUAL(cuattn_check_config(ca, &q, NULL, 0), 0);
    CU_ASSERT_EQUAL(cuattn_check_config(ca, &q, NULL, 1), 0);
    q.head_dim = 64;
    CU_ASSERT_EQUAL(cuattn_check_config(ca, &q, NULL, 1), 0);
    gpu_bufs_free(&a);
    cuattn_free(ca);
}


/* Head dim 96 with a window runs attn_vl.cu's 128 kernels on widened copies whatever runs
 * the dense calls: where 128 runs v1 (which has a 96 of its own) the window is served, with
 * the bits of v2's window kernels (what attn_vl.cu runs where the object is not v3), as 88
 * and 104 are (both widened to 128 always). */
static void test_attn_vl_gpu_head_dim_96_windows_run_widened_whatever_runs_the_dense_calls(void)
{
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x96a1);
    struct attn_problem p = base_problem(1, 2, 2, 96, DTYPE_BF16);
    p.seqlen_q = 300;
    p.seqlen_k = 300;
    p.mask = SCHED_MASK_CAUSAL;
    p.window = 1;
    p.window_left = 50;
    struct gpu_bufs a;
    gpu_bufs_init(&a, &p, NULL, NULL, &r);
    const struct attn_config spt = {SCHED_SPT, 0, 0, 0, 0};
    CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, CUATTN_IMPL_TENSOR_CORES), 0);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &spt, 0, NULL), 0);
    struct gpu_copy f, g;
    gpu_copy_fwd(&f, &a);
    gpu_copy_bwd(&g, &a);
    CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, CUATTN_IMPL_CUDA_CORES), 0);
    CU_ASSERT_EQUAL(cuattn_kernel_dim(ca, 96), 96); /* the dense calls: v1's own 96 */
    CU_ASSERT_EQUAL(cuattn_check_config(ca, &a.p, NULL, 0), 0);
    CU_ASSERT_EQUAL(cuattn_check_config(ca, &a.p, &spt, 1), 0);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
    CU_ASSERT(gpu_copy_equal(&f, &a));
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &spt, 0, NULL), 0);
    CU_ASSERT(gpu_copy_equal(&g, &a));
    gpu_copy_free(&f);
    gpu_copy_free(&g);
    gpu_bufs_free(&a);
    cuattn_free(ca);
}

/* Long ragged batches: packed batches of sequences of 8192 and 1 query, one of any length up
 * to 8192 (rarely a tile multiple), one at a tile edge and one up to 300, each over its own
 * number of keys (equal, or drawn apart: seqlen_q != seqlen_k, rows that see no key); GQA
 * 2:1; (a) head dim 64, fp16, causal with a left window of 1 .. 300 keys and no softcap
 * (v3's backward instance without the tanh), (b) head dim 128, bf16, not causal, both
 * sides 0 .. 63, softcap 50. The windows keep the float64 reference affordable at 8k
 * (2 to 9 s of one CPU core, by the lengths drawn; windows past the length, the plain masks, are
 * test_attn_vl_gpu_random_batches_match_float64_reference's at up to 2000 rows). Out and
 * LSE, then the gradients (Dsum from the stored O) of every deterministic schedule (shift at
 * W 64 and 7) and atomic at each kv-tile width the GPU has (on sm_90: 128 v3's kernel, 64
 * v2's), into poisoned outputs; then each deterministic schedule's bytes again 20 times
 * over grids 132, 114, 78, 16 and 1. */
static void test_attn_vl_gpu_long_ragged_batches_match_float64_and_repeat_on_every_grid(void)
{
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x8c41);
    int32_t impls[2];
    vl_impls(ca, impls); /* the default: v3 where the GPU has it */
    static const int32_t edges[] = {63, 65, 127, 129, 191};
    const enum sched_kind kinds[] = {SCHED_ATOMIC, SCHED_ASCENDING, SCHED_DESCENDING,
                                     SCHED_SPT,    SCHED_SHIFT,     SCHED_SHIFT};
    const int32_t grids[] = {132, 114, 78, 16, 1};
    int bad = 0, mismatches = 0;
    for (int ci = 0; ci < 2; ci++) {
        enum { B = 5 };
        const int32_t D = ci ? 128 : 64;
        struct attn_problem p = base_problem(B, 2, 1, D, ci ? DTYPE_BF16 : DTYPE_F16);
        p.mask = ci ? SCHED_MASK_FULL : SCHED_MASK_CAUSAL;
        p.window = 1;
        p.window_left = ci ? irand(&r, 64) : 1 + irand(&r, 300);
        p.window_right = ci ? irand(&r, 64) : 0;
        if (ci) {
            p.softcap = 50.0f;
            p.scale *= 4.0f; /* scores up to about half the cap: the tanh bends them */
        }
        int32_t lq[B] = {1, 8192, 1 + irand(&r, 8192), edges[irand(&r, 5)], 1 + irand(&r, 300)}, lk[B];
        const int s = irand(&r, B); /* the 8k sequence's place */
        const int32_t t = lq[1];
        lq[1] = lq[s];
        lq[s] = t;
        for (int b = 0; b < B; b++)
            lk[b] = irand(&r, 2) ? lq[b] : lq[b] == 8192 ? 8192 - irand(&r, 200) : 1 + irand(&r, lq[b] + 64);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, lq, lk, &r);
        char what[200];
        snprintf(what, sizeof what,
                 "case %d (D %d, %s, window (%d, %d), cap %g; q %d %d %d %d %d, k %d %d %d %d %d)", ci, D,
                 p.mask == SCHED_MASK_CAUSAL ? "causal" : "full", p.window_left, p.window_right, (double)p.softcap,
                 lq[0], lq[1], lq[2], lq[3], lq[4], lk[0], lk[1], lk[2], lk[3], lk[4]);
        struct vrefs R;
        vrefs_forward(&R, &a);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        bad += !ran_expected_fwd(ca, impls[0], what);
        bad += !check_forward(&a, &R, what);
        struct gpu_copy fwd;
        gpu_copy_fwd(&fwd, &a);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        if (!gpu_copy_equal(&fwd, &a) && mismatches++ < 8)
            fprintf(stderr, "\n  %s: the forward's repeat differs", what);
        gpu_copy_free(&fwd);
        vrefs_backward_given_out(&R, &a);
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            const int32_t w = k + 1 == sizeof kinds / sizeof kinds[0] ? 7 : SCHED_W_DEFAULT;
            for (int32_t bn = 64; bn <= cuattn_bwd_block_n(ca, &a.p); bn += 64) { /* the tiles it has */
                struct attn_config cfg = {kinds[k], w, 0, bn, 0}, used;
                memset(&used, 0, sizeof used);
                char sw[280];
                snprintf(sw, sizeof sw, "%s %s W %d block_n %d", what, sched_kind_name(kinds[k]), w, bn);
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, &used), 0);
                CU_ASSERT_EQUAL(used.sched, kinds[k]);
                CU_ASSERT_EQUAL(used.block_n, bn);
                bad += !ran_expected(ca, impls[0], bn, sw);
                bad += !check_backward(&a, &R, sw);
                if (kinds[k] == SCHED_ATOMIC)
                    continue;
                struct gpu_copy g;
                gpu_copy_bwd(&g, &a);
                for (int rep = 0; rep < 20; rep++) {
                    const int32_t grid = grids[rep % (int)(sizeof grids / sizeof grids[0])];
                    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, grid, NULL), 0);
                    if (!gpu_copy_equal(&g, &a) && mismatches++ < 8)
                        fprintf(stderr, "\n  %s: repeat %d on grid %d gave other bits", sw, rep, grid);
                }
                gpu_copy_free(&g);
            }
        }
        vrefs_free(&R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(mismatches, 0);
    cuattn_free(ca);
}

/* Packed batches without GQA at head dim 128, whose whole kv-tiles go out by TMA stores
 * while the next unit's K, V and first Q/dO load (trial unitlap, bwd_wgmma.cuh's
 * BWD_WG_DKV_LAP): sequences of whole tiles and not, one of a single row, one with keys and
 * no query (its units have no steps); causal with a left window (v3's instance without the
 * tanh) and full with both sides and a softcap (with). Every deterministic schedule (shift at
 * W 64 and 7) and atomic against float64 on the SM count's grid, and the deterministic ones'
 * bytes on grids 1, 3 and 16 (a CTA runs many units, of many sequences, in a row) equal to
 * it. */
static void test_attn_vl_gpu_batches_without_gqa_repeat_their_bits_on_small_grids(void)
{
    static const int32_t lq[] = {256, 1, 384, 0, 128, 200}, lk[] = {256, 100, 384, 70, 128, 130};
    const enum sched_kind kinds[] = {SCHED_ASCENDING, SCHED_DESCENDING, SCHED_SPT,
                                     SCHED_SHIFT,     SCHED_SHIFT,      SCHED_ATOMIC};
    const int32_t grids[] = {1, 3, 16};
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x1a95);
    int32_t impls[2];
    vl_impls(ca, impls); /* the default: v3 where the GPU has it */
    int bad = 0, mismatches = 0;
    for (int ci = 0; ci < 2; ci++) {
        struct attn_problem p = base_problem(6, 2, 2, 128, ci ? DTYPE_F16 : DTYPE_BF16);
        p.mask = ci ? SCHED_MASK_FULL : SCHED_MASK_CAUSAL;
        p.window = 1;
        p.window_left = ci ? 300 : 200;
        p.window_right = ci ? 50 : 0;
        if (ci) {
            p.softcap = 30.0f;
            p.scale *= 4.0f;
        }
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, lq, lk, &r);
        struct vrefs R;
        vrefs_compute(&R, &a);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            const int32_t w = k == 4 ? 7 : SCHED_W_DEFAULT;
            struct attn_config cfg = {kinds[k], w, 0, 0, 0};
            char what[96];
            snprintf(what, sizeof what, "case %d %s W %d", ci, sched_kind_name(kinds[k]), w);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
            bad += !ran_expected(ca, impls[0], 0, what);
            bad += !check_backward(&a, &R, what);
            if (kinds[k] == SCHED_ATOMIC)
                continue;
            struct gpu_copy g;
            gpu_copy_bwd(&g, &a);
            for (size_t gi = 0; gi < sizeof grids / sizeof grids[0]; gi++) {
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, grids[gi], NULL), 0);
                if (!gpu_copy_equal(&g, &a) && mismatches++ < 8)
                    fprintf(stderr, "\n  %s: grid %d gave other bits", what, grids[gi]);
            }
            gpu_copy_free(&g);
        }
        vrefs_free(&R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(mismatches, 0);
    cuattn_free(ca);
}

/* The window/packed kernels small enough for compute-sanitizer (scripts/gpu_sanitize.sh),
 * beside test_attn_vl_gpu_rows_without_keys_give_zeros_not_nan (head dim 128, no softcap,
 * a packed batch): head dims 64 and 128, each with a softcap and without (the backward's
 * two instances), packed batches (v3's forward with maps per sequence) and dense ones with a
 * window (its persistent forward through TMA, also on one CTA: Q handed over and the rings'
 * phases carried from tile to tile), each forward also through cp.async; GQA, causal and
 * not, lengths off the tiles (the last tiles run past a sequence's end), a sequence without
 * queries; each forward and backward kernel the GPU has, shift and ascending, each run
 * checked against float64 (an unchanged result under a sanitizer is also a right one). The
 * two cases without GQA at head dim 128 run their backward on 2 CTAs: each runs several
 * units in a row, whole kv-tiles stored by TMA under the next unit's loads (trial unitlap)
 * between tiles past a sequence's end (pair stores), with the softcap and without. */
static void test_attn_vl_gpu_small_shapes_for_sanitizers(void)
{
    const struct {
        int32_t d;
        enum dtype_kind dt;
        int packed;
        enum sched_mask mask;
        int32_t wl, wr;
        float cap;
        int32_t hkv, grid; /* kv heads (of 4 q-heads); the backward's CTAs (0: the SM count) */
        int32_t sq, sk;    /* a dense batch's lengths (0: 150 queries over 130 keys) */
    } cases[] = {
        {64, DTYPE_F16, 1, SCHED_MASK_CAUSAL, 50, 0, 30.0f, 2, 0, 0, 0},
        {64, DTYPE_BF16, 0, SCHED_MASK_FULL, 20, 70, 0.0f, 2, 0, 0, 0},
        {128, DTYPE_BF16, 0, SCHED_MASK_CAUSAL, 40, 0, 50.0f, 2, 0, 0, 0},
        {128, DTYPE_F16, 1, SCHED_MASK_FULL, 30, 10, 30.0f, 2, 0, 0, 0},
        {128, DTYPE_BF16, 1, SCHED_MASK_CAUSAL, 150, 0, 0.0f, 4, 2, 0, 0},
        {128, DTYPE_F16, 0, SCHED_MASK_FULL, 100, 20, 30.0f, 4, 2, 0, 0},
        /* 400 queries over 100 keys, causal: q-tiles 0 and 1 see no key, so on one CTA the
         * persistent forward meets whole tiles without keys (no loads, the rings' counts and
         * Q's phase unchanged) between tiles with keys; the last tile's 16 rows leave
         * consumer 1 idle before a tile where it is busy (fwd_wg_idle's wait for Q) */
        {128, DTYPE_BF16, 0, SCHED_MASK_CAUSAL, 64, 0, 30.0f, 2, 0, 400, 100},
    };
    const int32_t lq[] = {1, 150, 0, 65}, lk[] = {1, 200, 40, 64};
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x5a7e);
    int32_t impls[2];
    const int ni = vl_impls(ca, impls);
    int bad = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = base_problem(cases[ci].packed ? 4 : 2, 4, cases[ci].hkv, cases[ci].d, cases[ci].dt);
        if (!cases[ci].packed) {
            p.seqlen_q = cases[ci].sq ? cases[ci].sq : 150;
            p.seqlen_k = cases[ci].sk ? cases[ci].sk : 130;
        }
        p.mask = cases[ci].mask;
        p.window = 1;
        p.window_left = cases[ci].wl;
        p.window_right = cases[ci].wr;
        p.softcap = cases[ci].cap;
        if (p.softcap > 0)
            p.scale *= 4.0f;
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, cases[ci].packed ? lq : NULL, cases[ci].packed ? lk : NULL, &r);
        struct vrefs R;
        vrefs_forward(&R, &a);
        char what[96];
        for (int ii = ni - 1; ii >= 0; ii--) { /* each forward; the default's O (v3's) last */
            CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impls[ii]), 0);
            const int v3 = impls[ii] == CUATTN_IMPL_WGMMA;
            /* v3: cp.async, then TMA (a dense batch's persistent kernel: also on one CTA,
             * every q-tile in a row on it, then a CTA an SM) */
            for (int run = 2 * v3; run >= 0; run--) {
                const int cp = run == 2, one = run == 1 && !cases[ci].packed;
                if (run == 1 && !one)
                    continue;
                snprintf(what, sizeof what, "case %zu v%d%s", ci, (int)impls[ii],
                         cp ? " cp.async" : one ? " 1 CTA" : "");
                cuattn__force_no_tma(ca, cp);
                cuattn__force_fwd_ctas(ca, one);
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
                cuattn__force_fwd_ctas(ca, 0);
                bad += !ran_expected_fwd(ca, impls[ii], what);
                bad += cuattn__last_fwd_tma(ca) != (v3 && !cp);
                bad += !check_forward(&a, &R, what);
            }
            cuattn__force_no_tma(ca, 0);
        }
        vrefs_backward_given_out(&R, &a);
        const enum sched_kind kinds[] = {SCHED_SHIFT, SCHED_ASCENDING};
        snprintf(what, sizeof what, "case %zu", ci);
        bad += backward_every(ca, &a, &R, impls, ni, kinds, sizeof kinds / sizeof kinds[0], what, cases[ci].grid);
        vrefs_free(&R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    cuattn_free(ca);
}

/* ---- through dashd --------------------------------------------------------------------- */

static struct dashd_proc D;

static int dashd_suite_init(void)
{
    return dashd_start(&D, "--backend cuda --session-timeout 10") == 0 ? 0 : -1;
}

static int dashd_suite_clean(void)
{
    return dashd_stop(&D) == 0 ? 0 : -1;
}

/* A packed batch (lengths 1, 200, 0, 131; GQA 4:2, bf16, head dim 64, causal with window
 * (64, 0), softcap 30) in one CUDA allocation, offsets in a shared-memory buffer: dashd's
 * forward and shift backward give the bits of the same kernels run here; then a head dim
 * 256 request with a window is refused with DASH_EHEADDIM and a reason, and the session
 * goes on serving. */
static void test_dashd_varlen_gpu_packed_window_softcap_match_in_process_kernels(void)
{
    enum { B = 4, HQ = 4, HKV = 2, HD = 64 };
    static const int32_t lq[B] = {1, 200, 0, 131}, lk[B] = {1, 180, 33, 131};
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xd1a5);
    struct attn_problem p = base_problem(B, HQ, HKV, HD, DTYPE_BF16);
    p.mask = SCHED_MASK_CAUSAL;
    p.window = 1;
    p.window_left = 64;
    p.window_right = 0;
    p.softcap = 30.0f;
    struct gpu_bufs a;
    gpu_bufs_init(&a, &p, lq, lk, &r);
    const int32_t tq = a.rq, tkk = a.rk;

    /* the bits to match: the kernels in this process (grid-independent) */
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct attn_config cfg = {SCHED_SHIFT, 0, 0, 0, 0};
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
    cuattn_free(ca);

    /* one allocation: q k v out dout dq dk dv, then lse */
    const size_t qb = a.es * (size_t)a.nq, kb = a.es * (size_t)a.nk, lb = sizeof(float) * (size_t)a.nlse;
    const size_t sizes[9] = {qb, kb, kb, qb, qb, qb, kb, kb, lb};
    size_t at[9], total = 0;
    for (int i = 0; i < 9; i++) {
        at[i] = total;
        total = (total + sizes[i] + 255) & ~(size_t)255;
    }
    unsigned char *mem = NULL;
    CUDA_OK(cudaMalloc((void **)&mem, total));
    CUDA_OK(cudaMemset(mem, 0xff, total));
    CUDA_OK(cudaMemcpy(mem + at[0], a.q, qb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(mem + at[1], a.k, kb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(mem + at[2], a.v, kb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(mem + at[4], a.dout, qb, cudaMemcpyHostToDevice));

    struct dash_connect_opts o = {.client_name = "gpu-varlen", .timeout_ms = 20000};
    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_connect(D.endpoint, &o, &c), 0);
    struct dash_buffer *b = NULL, *cu = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_cuda_register(c, mem, total, &b), 0);
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(c, 4096, &cu), 0);
    int32_t *offs = dash_buffer_data(cu);
    memcpy(offs, a.cu[0], sizeof(int32_t) * (B + 1));
    memcpy(offs + 16, a.cu[1], sizeof(int32_t) * (B + 1));

    struct dash_tensor t[9];
    for (int i = 0; i < 8; i++) {
        const int kv = i == 1 || i == 2 || i == 6 || i == 7;
        t[i] = (struct dash_tensor){b, at[i], 3, {kv ? tkk : tq, kv ? HKV : HQ, HD, 0}, {0, 0, 0, 0}};
    }
    t[8] = (struct dash_tensor){b, at[8], 2, {HQ, tq, 0, 0}, {0, 0, 0, 0}};
    struct dash_attn da = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .schedule = DASH_SCHED_SHIFT,
                           .window = 1, .window_left = 64, .window_right = 0, .softcap = 30.0f,
                           .max_seqlen_q = a.p.seqlen_q, .max_seqlen_k = a.p.seqlen_k};
    da.cu_seqlens_q = (struct dash_tensor){cu, 0, 1, {B + 1, 0, 0, 0}, {0, 0, 0, 0}};
    da.cu_seqlens_k = (struct dash_tensor){cu, 16 * sizeof(int32_t), 1, {B + 1, 0, 0, 0}, {0, 0, 0, 0}};
    struct dash_result res;
    int rc = dash_forward(c, &da, &t[0], &t[1], &t[2], &t[3], &t[8], &res);
    if (rc)
        fprintf(stderr, "\n  dash_forward: %s: %s", dash_errname(rc), dash_last_error(c));
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(res.backend, "cuda");
    rc = dash_backward(c, &da, &t[0], &t[1], &t[2], &t[3], &t[8], &t[4], &t[5], &t[6], &t[7], &res);
    if (rc)
        fprintf(stderr, "\n  dash_backward: %s: %s", dash_errname(rc), dash_last_error(c));
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(res.schedule, DASH_SCHED_SHIFT);
    unsigned char *got = malloc(total);
    CU_ASSERT_FATAL(got != NULL);
    CUDA_OK(cudaMemcpy(got, mem, total, cudaMemcpyDeviceToHost));
    CU_ASSERT(memcmp(got + at[3], a.out, qb) == 0);
    CU_ASSERT(memcmp(got + at[8], a.lse, lb) == 0);
    CU_ASSERT(memcmp(got + at[5], a.dq, qb) == 0);
    CU_ASSERT(memcmp(got + at[6], a.dk, kb) == 0);
    CU_ASSERT(memcmp(got + at[7], a.dv, kb) == 0);

    /* the same from shared memory, which the daemon stages through the device */
    struct dash_buffer *sh = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(c, total, &sh), 0);
    unsigned char *hm = dash_buffer_data(sh);
    memset(hm, 0xff, total);
    memcpy(hm + at[0], a.q, qb);
    memcpy(hm + at[1], a.k, kb);
    memcpy(hm + at[2], a.v, kb);
    memcpy(hm + at[4], a.dout, qb);
    struct dash_tensor st[9];
    for (int i = 0; i < 9; i++) {
        st[i] = t[i];
        st[i].buf = sh;
    }
    CU_ASSERT_EQUAL(dash_forward(c, &da, &st[0], &st[1], &st[2], &st[3], &st[8], &res), 0);
    CU_ASSERT_EQUAL(dash_backward(c, &da, &st[0], &st[1], &st[2], &st[3], &st[8], &st[4], &st[5], &st[6],
                                  &st[7], &res), 0);
    CU_ASSERT_STRING_EQUAL(res.backend, "cuda");
    CU_ASSERT(memcmp(hm + at[3], a.out, qb) == 0);
    CU_ASSERT(memcmp(hm + at[8], a.lse, lb) == 0);
    CU_ASSERT(memcmp(hm + at[5], a.dq, qb) == 0);
    CU_ASSERT(memcmp(hm + at[6], a.dk, kb) == 0);
    CU_ASSERT(memcmp(hm + at[7], a.dv, kb) == 0);

    /* head dim 256 (a dense batch of 24 rows in the same bytes) with the window: refused
     * before anything runs */
    struct dash_tensor u[9];
    for (int i = 0; i < 8; i++) {
        const int kv = i == 1 || i == 2 || i == 6 || i == 7;
        u[i] = dash_tensor_dense(b, at[i], 1, 24, kv ? HKV : HQ, 256);
    }
    u[8] = dash_tensor_lse(b, at[8], 1, HQ, 24);
    da.max_seqlen_q = da.max_seqlen_k = 0;
    da.cu_seqlens_q = da.cu_seqlens_k = (struct dash_tensor){0};
    rc = dash_forward(c, &da, &u[0], &u[1], &u[2], &u[3], &u[8], &res);
    CU_ASSERT_EQUAL(rc, DASH_EHEADDIM);
    CU_ASSERT_PTR_NOT_NULL(strstr(dash_last_error(c), "not 256"));
    uint64_t rtt = 0;
    CU_ASSERT_EQUAL(dash_ping(c, 5000, &rtt), 0);
    free(got);
    dash_close(c);
    CUDA_OK(cudaFree(mem));
    gpu_bufs_free(&a);
}

int suite_gpu_attn_vl(void)
{
    CU_pSuite s = CU_add_suite("gpu_attn_vl", NULL, NULL);
    if (!s)
        return -1;
    if (!CU_add_test(s, "test_attn_vl_gpu_random_batches_match_float64_reference",
                     test_attn_vl_gpu_random_batches_match_float64_reference) ||
        !CU_add_test(s, "test_attn_vl_gpu_deterministic_schedules_repeat_bitwise_for_every_grid",
                     test_attn_vl_gpu_deterministic_schedules_repeat_bitwise_for_every_grid) ||
        !CU_add_test(s, "test_attn_vl_gpu_sequence_bits_do_not_depend_on_packing",
                     test_attn_vl_gpu_sequence_bits_do_not_depend_on_packing) ||
        !CU_add_test(s, "test_attn_vl_gpu_forward_bits_do_not_depend_on_loads_or_packing",
                     test_attn_vl_gpu_forward_bits_do_not_depend_on_loads_or_packing) ||
        !CU_add_test(s, "test_attn_vl_gpu_rows_without_keys_give_zeros_not_nan",
                     test_attn_vl_gpu_rows_without_keys_give_zeros_not_nan) ||
        !CU_add_test(s, "test_attn_vl_gpu_plain_windows_keep_dense_bits_and_other_dims_are_refused",
                     test_attn_vl_gpu_plain_windows_keep_dense_bits_and_other_dims_are_refused) ||
        !CU_add_test(s, "test_attn_vl_gpu_head_dim_96_windows_run_widened_whatever_runs_the_dense_calls",
                     test_attn_vl_gpu_head_dim_96_windows_run_widened_whatever_runs_the_dense_calls) ||
        !CU_add_test(s, "test_attn_vl_gpu_long_ragged_batches_match_float64_and_repeat_on_every_grid",
                     test_attn_vl_gpu_long_ragged_batches_match_float64_and_repeat_on_every_grid) ||
        !CU_add_test(s, "test_attn_vl_gpu_batches_without_gqa_repeat_their_bits_on_small_grids",
                     test_attn_vl_gpu_batches_without_gqa_repeat_their_bits_on_small_grids) ||
        !CU_add_test(s, "test_attn_vl_gpu_small_shapes_for_sanitizers", test_attn_vl_gpu_small_shapes_for_sanitizers))
        return -1;
    CU_pSuite t = CU_add_suite("gpu_dashd_varlen", dashd_suite_init, dashd_suite_clean);
    if (!t || !CU_add_test(t, "test_dashd_varlen_gpu_packed_window_softcap_match_in_process_kernels",
                           test_dashd_varlen_gpu_packed_window_softcap_match_in_process_kernels))
        return -1;
    return 0;
}
