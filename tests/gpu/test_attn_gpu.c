// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_attn_gpu.c - the CUDA attention backend (kernels/cuda/attn_cuda.h) against the float64
 * reference, and its determinism as bytes: every deterministic schedule gives identical
 * dQ/dK/dV on every repeat and for every grid (132, 114, 78, 16, 1 CTAs, persistent and
 * interleaved modes), with W 64 and W 7. Inputs are fresh random draws each run (seed
 * printed by the runner; replay with DASH_TEST_SEED); outputs are poisoned with 0xff
 * (NaN) on the device before every call, so an element the kernels forget cannot pass.
 *
 * Every test but two runs the implementation cuattn_new() picks (v3 on sm_90, v2
 * elsewhere, unless DASH_GPU_IMPL says otherwise; head dim 256 runs v1 either way, 96
 * what 128 runs, on widened copies), so the suite checks whichever is active;
 * test_attn_gpu_both_impls_match_reference_and_v2_bits_repeat and
 * test_attn_gpu_head_dims_96_256_run_v1_with_grid_independent_bits set each in turn.
 * Suite gpu_attn_fwd sets v3 (sm_90 only) for its forward (attn_fwd_wg.cu, head dims 64,
 * 128 and 256): reference at short and long shapes, repeats, strides, TMA and cp.async
 * loads giving the same bits, consumers without rows and the persistent CTAs' rounds.
 */
#include "gpu_attn.h"

#include "gpu_bufs.h"
#include "gpu_check.h"
#include "../testutil.h"
#include "kernels/cuda/attn_auto.h"
#include "kernels/cuda/attn_cuda_test.h"
#include "kernels/attn/ref.h"
#include "kernels/digest/digest.h"
#include "kernels/digest/digest_cuda.h"

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- fixtures ---------------------------------------------------------------------- */

static double rel_err(const void *got, enum dtype_kind t, const double *ref, int64_t n)
{
    double *g = malloc(sizeof(double) * (size_t)n);
    CU_ASSERT_FATAL(g != NULL);
    tu_to_double(got, t, n, g);
    double e = ref_rel_error(g, ref, n);
    free(g);
    return e;
}

static double tolerance(enum dtype_kind t)
{
    return t == DTYPE_F16 ? 5e-3 : 1e-2;
}

/* The digests a backward folded into d_dig (device memory: dq, dk, dv; cuattn_set_digests)
 * against digest_rows() of a's outputs as copied back: how many differ (each printed). */
static int folded_digests_differ(const struct gpu_bufs *a, const uint64_t *d_dig, const char *what)
{
    uint64_t got[3];
    CUDA_OK(cudaMemcpy(got, d_dig, sizeof got, cudaMemcpyDeviceToHost));
    const void *host[3] = {a->dq, a->dk, a->dv};
    const uint64_t row = a->es * (uint64_t)a->p.head_dim;
    const uint64_t bytes[3] = {a->es * (uint64_t)a->nq, a->es * (uint64_t)a->nk, a->es * (uint64_t)a->nk};
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t want = 0;
        CU_ASSERT_EQUAL(digest_rows(host[i], bytes[i], row, &want), 0);
        if (got[i] != want && bad++ < 3)
            fprintf(stderr, "\n  %s: output %d's folded digest %016llx, the host's %016llx", what, i,
                    (unsigned long long)got[i], (unsigned long long)want);
    }
    return bad;
}

/* Device memory for three folded digests, as cuattn_set_digests takes it. */
struct dig3 {
    uint64_t *d;
    uint64_t *out[3];
};

static void dig3_init(struct dig3 *g)
{
    g->d = gpu_dev_alloc(3 * sizeof(uint64_t));
    for (int i = 0; i < 3; i++)
        g->out[i] = g->d + i;
}

/* Poisoned before a call on ca's stream: a digest the kernels do not write cannot pass. */
static void dig3_poison(struct dig3 *g, struct cuattn *ca)
{
    CUDA_OK(cudaMemsetAsync(g->d, 0xa5, 3 * sizeof(uint64_t), (cudaStream_t)cuattn_stream(ca)));
}

struct shape_case {
    int32_t batch, sq, sk, hq, hkv, d;
    enum dtype_kind dtype;
    enum sched_mask mask;
};

static struct attn_problem problem_of(const struct shape_case *c)
{
    struct attn_problem p = {.batch = c->batch, .seqlen_q = c->sq, .seqlen_k = c->sk, .heads_q = c->hq, .heads_kv = c->hkv, .head_dim = c->d, .dtype = c->dtype, .mask = c->mask, .scale = (float)(1.0 / sqrt((double)c->d))};
    return p;
}

/* Device 0 with the implementation DASH_GPU_IMPL names (v1, v2, v3; unset: the default),
 * so that scripts/gpu_check_tc.sh can run the suite once per implementation. */
static struct cuattn *open_device(void)
{
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    CU_ASSERT_FATAL(ca != NULL);
    const char *impl = getenv("DASH_GPU_IMPL");
    if (impl && *impl) {
        CU_ASSERT_FATAL(impl[0] == 'v' && impl[1] >= '1' && impl[1] <= '3' && !impl[2]);
        CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impl[1] - '0'), 0);
    }
    return ca;
}

/* Device 0's compute capability, major * 10 + minor (what auto's table is keyed on). */
static int32_t gpu_cc(void)
{
    int major = 0, minor = 0;
    CU_ASSERT_EQUAL_FATAL(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
    return major * 10 + minor;
}

/* Device 0 is sm_90, where v3 (CUATTN_IMPL_WGMMA) runs. */
static int gpu_is_hopper(void)
{
    return gpu_cc() / 10 == 9;
}

/* The float64 reference of one problem's forward and backward, on a's inputs. */
struct refs {
    double *out, *lse, *dq, *dk, *dv;
};

static void refs_compute(struct refs *R, const struct attn_problem *p, const struct gpu_bufs *a)
{
    R->out = malloc(sizeof(double) * (size_t)a->nq);
    R->lse = malloc(sizeof(double) * (size_t)a->nlse);
    R->dq = malloc(sizeof(double) * (size_t)a->nq);
    R->dk = malloc(sizeof(double) * (size_t)a->nk);
    R->dv = malloc(sizeof(double) * (size_t)a->nk);
    CU_ASSERT_FATAL(R->out && R->lse && R->dq && R->dk && R->dv);
    CU_ASSERT_FATAL(ref_forward(p, gpu_bufs_tq(a, a->q), gpu_bufs_tk(a, a->k), gpu_bufs_tk(a, a->v), R->out, R->lse) == 0);
    CU_ASSERT_FATAL(ref_backward(p, gpu_bufs_tq(a, a->q), gpu_bufs_tk(a, a->k), gpu_bufs_tk(a, a->v), gpu_bufs_tq(a, a->dout), R->dq,
                                 R->dk, R->dv) == 0);
}

static void refs_free(struct refs *R)
{
    free(R->out);
    free(R->lse);
    free(R->dq);
    free(R->dk);
    free(R->dv);
}

/* Whether a's forward is within the dtype's tolerance of the reference (out) and its lse
 * within 1e-4 relative (+inf where a row sees no key); the error and bad lse count out. */
static int forward_close(const struct gpu_bufs *a, const struct refs *R, double *err, int *lse_bad)
{
    *err = rel_err(a->out, a->p.dtype, R->out, a->nq);
    *lse_bad = 0;
    for (int64_t i = 0; i < a->nlse; i++)
        *lse_bad += isinf(R->lse[i]) ? !(isinf(a->lse[i]) && a->lse[i] > 0)
                                     : !(fabs(a->lse[i] - R->lse[i]) <= 1e-4 * (1 + fabs(R->lse[i])));
    return *err < tolerance(a->p.dtype) && *lse_bad == 0;
}

/* Whether a's gradients are within the dtype's tolerance of the reference; errors out. */
static int grads_close(const struct gpu_bufs *a, const struct refs *R, double err[3])
{
    const enum dtype_kind t = a->p.dtype;
    err[0] = rel_err(a->dq, t, R->dq, a->nq);
    err[1] = rel_err(a->dk, t, R->dk, a->nk);
    err[2] = rel_err(a->dv, t, R->dv, a->nk);
    return err[0] < tolerance(t) && err[1] < tolerance(t) && err[2] < tolerance(t);
}

/* ---- tests ------------------------------------------------------------------------- */

/* bf16 and fp16, head dims 64, 96, 128 and 256, causal and full, GQA 4:2 and 4:1 (and
 * MHA), seqlen_q != seqlen_k both ways (causal rows that see no key), lengths that are not
 * multiples of 64, and every schedule (auto included, W 64 and W 7). Head dim 96 runs what
 * 128 runs, on widened copies (test_attn_gpu_rejects_bad_arguments_and_reports_config
 * checks which kernels and tiles). */
static void test_attn_gpu_matches_float64_reference_for_every_schedule(void)
{
    const struct shape_case cases[] = {
        {1, 200, 130, 4, 2, 64, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 130, 200, 4, 1, 64, DTYPE_F16, SCHED_MASK_CAUSAL},
        {2, 200, 130, 4, 4, 128, DTYPE_F16, SCHED_MASK_FULL},
        {1, 130, 200, 4, 2, 128, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 256, 256, 4, 1, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 200, 130, 4, 2, 128, DTYPE_F16, SCHED_MASK_CAUSAL},
        {2, 77, 64, 4, 2, 64, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 1, 1, 4, 2, 64, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 520, 450, 2, 1, 64, DTYPE_BF16, SCHED_MASK_CAUSAL}, /* more kv-tiles than W 7 */
        {1, 200, 130, 4, 2, 96, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 130, 200, 4, 1, 96, DTYPE_F16, SCHED_MASK_FULL},
        {2, 77, 64, 2, 2, 96, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 1, 1, 2, 1, 96, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 1000, 700, 4, 4, 96, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 200, 130, 4, 2, 256, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 130, 200, 4, 1, 256, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 520, 450, 2, 1, 256, DTYPE_BF16, SCHED_MASK_CAUSAL},
    };
    const int32_t ws[] = {SCHED_W_DEFAULT, 7};
    struct cuattn *ca = open_device();
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x6a77);
    int bad = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        struct refs R;
        refs_compute(&R, &p, &a);
        const double tol = tolerance(p.dtype);

        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        double err;
        int lse_bad;
        if (!forward_close(&a, &R, &err, &lse_bad)) {
            fprintf(stderr, "\n  case %zu forward: rel error %.3g (limit %.0g), %d bad lse", ci, err,
                    tol, lse_bad);
            bad++;
        }

        for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++)
            for (int kind = 0; kind < SCHED_KIND_COUNT; kind++) {
                if (wi > 0 && kind != SCHED_SHIFT && kind != SCHED_AUTO)
                    continue; /* W matters to shift (and to what auto picks) only */
                struct attn_config cfg = {(enum sched_kind)kind, ws[wi], 0, 0, 0}, used;
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, &used), 0);
                CU_ASSERT(used.sched != SCHED_AUTO && used.w == ws[wi]);
                double e[3];
                if (!grads_close(&a, &R, e)) {
                    fprintf(stderr, "\n  case %zu %s W %d: rel error dq %.3g dk %.3g dv %.3g (limit %.0g)",
                            ci, sched_kind_name(cfg.sched), ws[wi], e[0], e[1], e[2], tol);
                    bad++;
                }
            }
        refs_free(&R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    cuattn_free(ca);
}

static void test_attn_gpu_backward_repeats_are_bitwise_equal(void)
{
    const struct shape_case cases[] = {
        {2, 512, 512, 4, 2, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 300, 700, 4, 1, 64, DTYPE_F16, SCHED_MASK_FULL},
        {1, 190, 250, 4, 2, 96, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 250, 190, 2, 1, 256, DTYPE_F16, SCHED_MASK_FULL},
    };
    struct cuattn *ca = open_device();
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x3e9);
    int mismatches = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        for (int kind = SCHED_ASCENDING; kind < SCHED_KIND_COUNT; kind++) {
            struct attn_config cfg = {(enum sched_kind)kind, 0, 0, 0, 0};
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
            struct gpu_copy base;
            gpu_copy_bwd(&base, &a);
            for (int rep = 1; rep < 20; rep++) {
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
                if (!gpu_copy_equal(&base, &a) && mismatches++ < 5)
                    fprintf(stderr, "\n  case %zu %s: repeat %d differs from the first", ci,
                            sched_kind_name(cfg.sched), rep);
            }
            gpu_copy_free(&base);
        }
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    cuattn_free(ca);
}

/* The same bytes for grids 132, 114, 78, 16 and 1 and for the interleaved mode forced on
 * large grids. Shape 0 has 70 kv-tiles (of v2's 128 rows; 140 of 64), so shift with W 64
 * needs 64 CTAs at once and runs interleaved on grids 63, 16 and 1; shape 1 is causal
 * shift with W 7 in two chunks or more; shape 3 has many heads waiting on each other at
 * once. */
static void test_attn_gpu_backward_bits_do_not_depend_on_grid(void)
{
    const struct shape_case cases[] = {
        {1, 128, 8960, 2, 1, 64, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 2000, 2000, 2, 2, 64, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 200, 130, 4, 2, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {2, 2048, 2048, 8, 2, 64, DTYPE_BF16, SCHED_MASK_CAUSAL}, /* 16 heads of 16 pairs */
        {1, 200, 1000, 4, 2, 96, DTYPE_F16, SCHED_MASK_CAUSAL}, /* the 128 kernels, widened */
    };
    const int32_t ws[] = {SCHED_W_DEFAULT, 7};
    /* 64 and 63: just enough CTAs for persistent shift with W 64 on shape 0, one too few */
    const struct {
        int32_t grid;
        int interleaved;
    } runs[] = {{114, 0}, {78, 0}, {64, 0}, {63, 0}, {16, 0}, {1, 0}, {132, 1}, {16, 1}, {3, 1}};
    struct cuattn *ca = open_device();
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x91d);
    int mismatches = 0, shift_modes = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++)
            for (int kind = SCHED_ASCENDING; kind < SCHED_KIND_COUNT; kind++) {
                struct attn_config cfg = {(enum sched_kind)kind, ws[wi], 0, 0, 0};
                cuattn__force_interleaved(ca, 0);
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 132, NULL), 0);
                struct gpu_copy base;
                gpu_copy_bwd(&base, &a);
                int seen[3] = {0, 0, 0};
                for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
                    cuattn__force_interleaved(ca, runs[ri].interleaved);
                    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, runs[ri].grid, NULL), 0);
                    int32_t mode = 0, grid = 0;
                    cuattn__last_launch(ca, &mode, &grid);
                    seen[mode == 2 ? 2 : 1] = 1;
                    if (!gpu_copy_equal(&base, &a) && mismatches++ < 8)
                        fprintf(stderr, "\n  case %zu %s W %d: grid %d (%s, %d CTAs) differs from grid 132",
                                ci, sched_kind_name(cfg.sched), ws[wi], runs[ri].grid,
                                mode == 2 ? "interleaved" : "persistent", grid);
                }
                cuattn__force_interleaved(ca, 0);
                /* shift ran interleaved because the grid was too small, not only by force */
                if (kind == SCHED_SHIFT && ci < 2) {
                    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 1, NULL), 0);
                    int32_t mode = 0;
                    cuattn__last_launch(ca, &mode, NULL);
                    shift_modes += mode == 2 && seen[1] && seen[2];
                }
                gpu_copy_free(&base);
            }
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    CU_ASSERT_EQUAL(shift_modes, 4);
    cuattn_free(ca);
}

/* atomic adds in arrival order: not reproducible, but as accurate as the others. */
static void test_attn_gpu_atomic_is_close_to_reference(void)
{
    const struct shape_case c = {1, 512, 512, 4, 4, 64, DTYPE_BF16, SCHED_MASK_FULL};
    struct cuattn *ca = open_device();
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xa70);
    struct attn_problem p = problem_of(&c);
    struct gpu_bufs a;
    gpu_bufs_init(&a, &p, NULL, NULL, &r);
    struct refs R;
    refs_compute(&R, &p, &a);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
    struct attn_config cfg = {SCHED_ATOMIC, 0, 0, 0, 0};
    for (int rep = 0; rep < 3; rep++) {
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, rep == 2 ? 7 : 0, NULL), 0);
        double e[3];
        const int close = grads_close(&a, &R, e);
        if (!close)
            fprintf(stderr, "\n  atomic: rel error dq %.3g dk %.3g dv %.3g (limit %.0g)", e[0], e[1],
                    e[2], tolerance(p.dtype));
        CU_ASSERT(close);
    }
    refs_free(&R);
    gpu_bufs_free(&a);
    cuattn_free(ca);
}

/* Rows of output i (0 dQ, 1 dK, 2 dV) of a's last backward whose fused leaf is not the row's
 * XXH3-64; -1 where the kernels gave that output no leaves. */
static int64_t leaves_not_row_hashes(const struct cuattn *ca, const struct gpu_bufs *a, int i)
{
    const uint64_t *dl = cuattn_leaves(ca, i);
    if (!dl)
        return -1;
    const struct attn_problem *p = &a->p;
    const int64_t rows = i ? (int64_t)p->batch * p->seqlen_k * p->heads_kv : (int64_t)p->batch * p->seqlen_q * p->heads_q;
    const void *host[3] = {a->dq, a->dk, a->dv};
    const size_t row = a->es * (size_t)p->head_dim;
    uint64_t *hl = malloc(sizeof(uint64_t) * (size_t)rows);
    CU_ASSERT_PTR_NOT_NULL_FATAL(hl);
    CUDA_OK(cudaMemcpy(hl, dl, sizeof(uint64_t) * (size_t)rows, cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    for (int64_t k = 0; k < rows; k++)
        bad += hl[k] != XXH3_64bits((const unsigned char *)host[i] + (size_t)k * row, row);
    free(hl);
    return bad;
}

/* (batch, heads, seqlen, head_dim) views with padded rows give the same bits as the dense
 * layout: strides change where bytes live, not what is computed. */
/* The rows of a (batch, seqlen, heads, D) view on the device (copied back into host, of
 * bytes) that differ from the same rows of the dense array `dense`: how many. */
static int view_rows_differ(const struct attn_tensor *t, void *host, size_t bytes, const void *dense, int32_t batch,
                            int32_t seqlen, int32_t heads, int32_t D, size_t es)
{
    CUDA_OK(cudaMemcpy(host, t->data, bytes, cudaMemcpyDeviceToHost));
    int diff = 0;
    for (int32_t b = 0; b < batch; b++)
        for (int32_t s = 0; s < seqlen; s++)
            for (int32_t h = 0; h < heads; h++)
                diff += memcmp((char *)host + es * (size_t)(b * t->stride[0] + s * t->stride[1] + h * t->stride[2]),
                               (const char *)dense + es * (size_t)(((int64_t)(b * seqlen + s) * heads + h) * D),
                               es * (size_t)D) != 0;
    return diff;
}

static void strided_views_give_same_bits(const struct shape_case c)
{
    struct cuattn *ca = open_device();
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x57d ^ (uint64_t)c.d);
    struct attn_problem p = problem_of(&c);
    struct gpu_bufs a;
    gpu_bufs_init(&a, &p, NULL, NULL, &r);
    struct attn_config cfg = {SCHED_SHIFT, 3, 0, 0, 0};
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, &cfg, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);

    /* strided device copies: (b, h, s, d) with 6 padding elements per row */
    const int32_t D = p.head_dim, pad = 6;
    enum { Q, K, V, OUT, DOUT, DQ, DK, DV, VIEWS };
    const void *src[VIEWS] = {a.q, a.k, a.v, a.out, a.dout, a.dq, a.dk, a.dv};
    const int32_t seqlen[VIEWS] = {p.seqlen_q, p.seqlen_k, p.seqlen_k, p.seqlen_q, p.seqlen_q,
                                   p.seqlen_q, p.seqlen_k, p.seqlen_k};
    const int32_t heads[VIEWS] = {p.heads_q, p.heads_kv, p.heads_kv, p.heads_q, p.heads_q,
                                  p.heads_q, p.heads_kv, p.heads_kv};
    struct attn_tensor t[VIEWS];
    void *host[VIEWS];
    size_t bytes[VIEWS];
    for (int i = 0; i < VIEWS; i++) {
        const int64_t row = D + pad, n = (int64_t)p.batch * heads[i] * seqlen[i] * row;
        bytes[i] = a.es * (size_t)n;
        host[i] = malloc(bytes[i]);
        CU_ASSERT_FATAL(host[i] != NULL);
        memset(host[i], 0xff, bytes[i]);
        struct attn_tensor view = {gpu_dev_alloc(bytes[i]), {heads[i] * seqlen[i] * row, row, seqlen[i] * row, 1}};
        t[i] = view;
        if (i < DQ) { /* inputs, and the forward's out: copy the dense values in */
            for (int32_t b = 0; b < p.batch; b++)
                for (int32_t s = 0; s < seqlen[i]; s++)
                    for (int32_t h = 0; h < heads[i]; h++)
                        memcpy((char *)host[i] + a.es * (size_t)(b * view.stride[0] + s * view.stride[1] + h * view.stride[2]),
                               (const char *)src[i] + a.es * (size_t)(((int64_t)(b * seqlen[i] + s) * heads[i] + h) * D),
                               a.es * (size_t)D);
        }
        CUDA_OK(cudaMemcpy(view.data, host[i], bytes[i], cudaMemcpyHostToDevice));
    }
    CU_ASSERT_EQUAL_FATAL(cuattn_backward(ca, &p, &cfg, 0, t[DQ], t[DK], t[DV], t[Q], t[K], t[V],
                                          t[OUT], a.d_lse, t[DOUT], NULL), 0);
    int diff = 0;
    for (int i = DQ; i < VIEWS; i++)
        diff += view_rows_differ(&t[i], host[i], bytes[i], src[i], p.batch, seqlen[i], heads[i], D, a.es);
    CU_ASSERT_EQUAL(diff, 0);
    /* The same views with the audit's leaves: where the maps do not encode, dK and dV go out
     * by pair stores and their leaves come from the quads' rows (bwd_wg_put_leaves), a path
     * no dense test takes; GQA's come from the hashed sum. Twice, the output views and (the
     * second time) the leaves poisoned first: the rows' bits are the dense run's again, and
     * each output has leaves exactly where arm_leaves gives them (dQ wherever the tensor
     * cores run; dK and dV for GQA, or v3's persistent launch), every one its row's hash. */
    const int64_t rows[3] = {(int64_t)p.batch * p.seqlen_q * p.heads_q, (int64_t)p.batch * p.seqlen_k * p.heads_kv,
                             (int64_t)p.batch * p.seqlen_k * p.heads_kv};
    CU_ASSERT_EQUAL_FATAL(cuattn_set_leaves(ca, 1), 0);
    for (int round = 0; round < 2; round++) {
        for (int i = DQ; i < VIEWS; i++)
            CUDA_OK(cudaMemset(t[i].data, 0xff, bytes[i]));
        if (round)
            for (int i = 0; i < 3; i++)
                if (cuattn_leaves(ca, i))
                    CUDA_OK(cudaMemset((void *)(uintptr_t)cuattn_leaves(ca, i), 0xff, sizeof(uint64_t) * (size_t)rows[i]));
        CUDA_OK(cudaDeviceSynchronize()); /* poisoned before the handle's own stream runs */
        CU_ASSERT_EQUAL_FATAL(cuattn_backward(ca, &p, &cfg, 0, t[DQ], t[DK], t[DV], t[Q], t[K], t[V], t[OUT], a.d_lse,
                                              t[DOUT], NULL), 0);
        CUDA_OK(cudaDeviceSynchronize());
        int leaf_diff = 0;
        for (int i = DQ; i < VIEWS; i++)
            leaf_diff += view_rows_differ(&t[i], host[i], bytes[i], src[i], p.batch, seqlen[i], heads[i], D, a.es);
        CU_ASSERT_EQUAL(leaf_diff, 0);
        int32_t mode = 0;
        cuattn__last_launch(ca, &mode, NULL);
        const int dq_leaves = D % 64 == 0 && cuattn_impl_for(ca, D) != CUATTN_IMPL_CUDA_CORES;
        const int dkv_leaves = D % 64 == 0 && (p.heads_q > p.heads_kv || (cuattn__last_wg(ca) && mode == 1));
        int leafed = 0;
        int64_t not_hashes = 0;
        for (int i = 0; i < 3; i++) {
            const int64_t bad = leaves_not_row_hashes(ca, &a, i);
            if (bad < 0)
                continue;
            leafed++;
            if (bad)
                fprintf(stderr, "\n  head dim %d strided views, round %d: %lld rows of output %d whose leaf is not their hash",
                        D, round, (long long)bad, i);
            not_hashes += bad;
        }
        if (leafed != dq_leaves + 2 * dkv_leaves)
            fprintf(stderr, "\n  head dim %d strided views: leaves for %d outputs, %d expected", D, leafed,
                    dq_leaves + 2 * dkv_leaves);
        CU_ASSERT_EQUAL(leafed, dq_leaves + 2 * dkv_leaves);
        CU_ASSERT_EQUAL(not_hashes, 0);
    }
    for (int i = 0; i < VIEWS; i++) {
        free(host[i]);
        CU_ASSERT(gpu_cuda_ok(cudaFree(t[i].data), "cudaFree", __LINE__));
    }
    gpu_bufs_free(&a);
    cuattn_free(ca);
}

/* Head dim 64, and 96, whose widened copies (attn_pad.cu) then read and write views whose
 * strides (102 elements a row) allow only 2-byte accesses, where the dense ones take
 * 16-byte ones: the same bits either way, and with the audit's leaves on, every leaf the
 * kernels give is its row's hash (GQA's hashed sum and MHA's pair stores into views). */
static void test_attn_gpu_strided_views_give_same_bits(void)
{
    strided_views_give_same_bits((struct shape_case){2, 150, 100, 4, 2, 64, DTYPE_F16, SCHED_MASK_CAUSAL});
    /* MHA: where the maps do not encode, dK and dV by pair stores from registers while the
     * next unit loads (trial lap64) */
    strided_views_give_same_bits((struct shape_case){2, 150, 300, 2, 2, 64, DTYPE_BF16, SCHED_MASK_FULL});
    strided_views_give_same_bits((struct shape_case){2, 150, 100, 4, 2, 96, DTYPE_BF16, SCHED_MASK_CAUSAL});
}

/* v1 (CUDA cores), v2 (tensor cores) and, on sm_90, v3 (wgmma) on the same inputs, in one
 * object switched with cuattn_set_impl: each against the float64 reference (forward, and
 * every deterministic schedule), and v2's and v3's bytes identical over 5 repeats of
 * grids 132, 16 and 1 (shift W 64 on one CTA runs interleaved, on 132 persistent). The
 * implementations' bits may differ from each other. Case 2's
 * dq and dk are exactly zero (one key per row), which only exact arithmetic passes. */
static void test_attn_gpu_both_impls_match_reference_and_v2_bits_repeat(void)
{
    const struct shape_case cases[] = {
        {1, 300, 260, 4, 2, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {2, 200, 330, 4, 4, 64, DTYPE_F16, SCHED_MASK_FULL},
        {1, 1, 1, 4, 2, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 2000, 2000, 2, 1, 128, DTYPE_F16, SCHED_MASK_CAUSAL}, /* shift W 7 in 2+ chunks */
    };
    const int32_t impls[] = {CUATTN_IMPL_CUDA_CORES, CUATTN_IMPL_TENSOR_CORES, CUATTN_IMPL_WGMMA};
    const int32_t grids[] = {132, 16, 1};
    const int32_t ws[] = {SCHED_W_DEFAULT, 7};
    struct cuattn *ca = open_device();
    CU_ASSERT_EQUAL(cuattn_set_impl(ca, 4), -EINVAL);
    CU_ASSERT_EQUAL(cuattn_set_impl(ca, 0), -EINVAL);
    CU_ASSERT_EQUAL(cuattn_set_impl(NULL, CUATTN_IMPL_TENSOR_CORES), -EINVAL);
    CU_ASSERT_EQUAL(cuattn_impl(NULL), -EINVAL);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x7c2);
    int bad = 0, mismatches = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        struct refs R;
        refs_compute(&R, &p, &a);
        const double tol = tolerance(p.dtype);
        for (size_t ii = 0; ii < sizeof impls / sizeof impls[0]; ii++) {
            const int32_t impl = impls[ii];
            const int tc = impl != CUATTN_IMPL_CUDA_CORES;
            if (impl == CUATTN_IMPL_WGMMA && !gpu_is_hopper()) {
                CU_ASSERT_EQUAL(cuattn_set_impl(ca, impl), -ENOTSUP);
                continue;
            }
            CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impl), 0);
            CU_ASSERT_EQUAL(cuattn_impl(ca), impl);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
            double err;
            int lse_bad;
            if (!forward_close(&a, &R, &err, &lse_bad)) {
                fprintf(stderr, "\n  case %zu impl %d forward: rel error %.3g (limit %.0g), %d bad lse", ci,
                        impl, err, tol, lse_bad);
                bad++;
            }
            if (tc) { /* the forward's bytes repeat too */
                struct gpu_copy first;
                gpu_copy_fwd(&first, &a);
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
                if (!gpu_copy_equal(&first, &a) && mismatches++ < 8)
                    fprintf(stderr, "\n  case %zu impl %d: forward repeat differs", ci, impl);
                gpu_copy_free(&first);
            }
            for (int kind = SCHED_ASCENDING; kind < SCHED_KIND_COUNT; kind++)
                for (size_t wi = 0; wi < 2 * sizeof ws / sizeof ws[0]; wi++) {
                    /* v2 and v3 twice: their default 64 x 128 tiles, then 64 x 64 (v3
                     * runs v2's kernel there) */
                    const int32_t bn = wi >= sizeof ws / sizeof ws[0] ? CUATTN_BLOCK : 0;
                    if ((wi % 2 > 0 && kind != SCHED_SHIFT) || (bn && !tc))
                        continue; /* W matters to shift only */
                    const int32_t w = ws[wi % 2];
                    struct attn_config cfg = {(enum sched_kind)kind, w, 0, bn, 0};
                    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
                    double e[3];
                    if (!grads_close(&a, &R, e)) {
                        fprintf(stderr, "\n  case %zu impl %d %s W %d bn %d: rel error dq %.3g dk %.3g dv %.3g (limit %.0g)",
                                ci, impl, sched_kind_name(cfg.sched), w, bn, e[0], e[1], e[2], tol);
                        bad++;
                    }
                    if (!tc)
                        continue;
                    struct gpu_copy base;
                    gpu_copy_bwd(&base, &a);
                    for (int rep = 0; rep < 5; rep++)
                        for (size_t gi = 0; gi < sizeof grids / sizeof grids[0]; gi++) {
                            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, grids[gi], NULL), 0);
                            int32_t mode = 0, used_grid = 0;
                            cuattn__last_launch(ca, &mode, &used_grid);
                            if (!gpu_copy_equal(&base, &a) && mismatches++ < 8)
                                fprintf(stderr, "\n  case %zu impl %d %s W %d bn %d: repeat %d grid %d (%s, %d CTAs) differs",
                                        ci, impl, sched_kind_name(cfg.sched), w, bn, rep, grids[gi],
                                        mode == 2 ? "interleaved" : "persistent", used_grid);
                        }
                    gpu_copy_free(&base);
                }
        }
        refs_free(&R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(mismatches, 0);
    cuattn_free(ca);
}

/* Head dims the kernels lack - multiples of 8 from 32 to 256 but 64, 96, 128 and 256: 32,
 * 40 (to 64), 80, 112 (to 128), 160, 200 (to 256) - run the next width's kernels on widened
 * copies (cuattn_kernel_dim), reporting that width's implementations and tiles: against
 * float64 into poisoned outputs, forward and every schedule's backward, fp16 and bf16,
 * causal and full, GQA, lengths that are not tile multiples; each deterministic schedule's
 * bytes again on a second call and on grid 16; v1 (widened too) where the object runs v2 or
 * v3 by default. A head dim under 32, not a multiple of 8 or above 256 is refused. */
static void test_attn_gpu_other_head_dims_run_widened_and_match_float64(void)
{
    const struct shape_case cases[] = {
        {2, 200, 130, 4, 1, 32, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 77, 77, 2, 2, 40, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 300, 260, 4, 2, 80, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {2, 130, 130, 2, 2, 112, DTYPE_F16, SCHED_MASK_FULL},
        {1, 150, 170, 4, 2, 160, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 100, 90, 2, 2, 200, DTYPE_F16, SCHED_MASK_FULL},
    };
    struct cuattn *ca = open_device();
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x8080);
    int bad = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        const int32_t d = p.head_dim, want = d <= 64 ? 64 : d <= 128 ? 128 : 256;
        CU_ASSERT(cuattn_serves_head_dim(d));
        CU_ASSERT_EQUAL(cuattn_kernel_dim(ca, d), want);
        CU_ASSERT_EQUAL(cuattn_impl_for(ca, d), cuattn_impl_for(ca, want));
        CU_ASSERT_EQUAL(cuattn_fwd_impl_for(ca, d), cuattn_fwd_impl_for(ca, want));
        struct attn_problem pw = p;
        pw.head_dim = want;
        CU_ASSERT_EQUAL(cuattn_bwd_block_n(ca, &p), cuattn_bwd_block_n(ca, &pw));
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        struct refs R;
        refs_compute(&R, &p, &a);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        double err;
        int lse_bad;
        if (!forward_close(&a, &R, &err, &lse_bad)) {
            fprintf(stderr, "\n  case %zu (head dim %d) forward: rel error %.3g, %d bad lse", ci, d, err, lse_bad);
            bad++;
        }
        for (int kind = 0; kind < SCHED_KIND_COUNT; kind++) {
            struct attn_config cfg = {(enum sched_kind)kind, 0, 0, 0, 0};
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
            double e[3];
            if (!grads_close(&a, &R, e)) {
                fprintf(stderr, "\n  case %zu (head dim %d) %s: rel error dq %.3g dk %.3g dv %.3g", ci, d,
                        sched_kind_name(cfg.sched), e[0], e[1], e[2]);
                bad++;
            }
            if (kind == SCHED_ATOMIC)
                continue;
            struct gpu_copy g;
            gpu_copy_bwd(&g, &a);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
            const int again = gpu_copy_equal(&g, &a);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 16, NULL), 0);
            if ((!again || !gpu_copy_equal(&g, &a)) && bad++ < 20)
                fprintf(stderr, "\n  case %zu (head dim %d) %s: other bytes on a %s", ci, d,
                        sched_kind_name(cfg.sched), again ? "grid of 16" : "repeat");
            gpu_copy_free(&g);
        }
        if (cuattn_impl(ca) != CUATTN_IMPL_CUDA_CORES && want != 256) { /* v1, widened as well */
            const int32_t impl = cuattn_impl(ca);
            CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, CUATTN_IMPL_CUDA_CORES), 0);
            CU_ASSERT_EQUAL(cuattn_kernel_dim(ca, d), want);
            struct attn_config cfg = {SCHED_SHIFT, 0, 0, 0, 0};
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
            double e[3];
            if (!forward_close(&a, &R, &err, &lse_bad) || !grads_close(&a, &R, e)) {
                fprintf(stderr, "\n  case %zu (head dim %d) v1: rel error out %.3g dq %.3g", ci, d, err, e[0]);
                bad++;
            }
            CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impl), 0);
        }
        refs_free(&R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    const int32_t refused[] = {8, 16, 24, 36, 84, 264, 512};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CU_ASSERT(!cuattn_serves_head_dim(refused[i]));
        struct attn_problem q = problem_of(&cases[0]);
        q.head_dim = refused[i];
        CU_ASSERT_EQUAL(cuattn_check_config(ca, &q, NULL, 0), -ENOTSUP);
        CU_ASSERT_EQUAL(cuattn_check_config(ca, &q, NULL, 1), -ENOTSUP);
    }
    cuattn_free(ca);
}

/* v1's head dims 96 and 256. 256 has no v2 kernels: with v2 set, a call runs v1 (64 x 64
 * tiles reported) and gives v1's bytes (v3 has its own, tested below). 96 runs v1 when v1 is set (with v2 or v3 it runs
 * their 128-column kernels on widened copies, which the reference, grid and strides tests check).
 * Every deterministic schedule gives v1's bytes again on grids 132, 16, 3 and 1 and in the
 * interleaved mode forced on 132 and 5 CTAs. Case 0 has 16 kv-tiles, so shift W 64 needs
 * 16 CTAs at once and runs interleaved on 3 and 1 unforced; case 1 is causal GQA with odd
 * lengths, shift W 7 in 2+ chunks. */
static void test_attn_gpu_head_dims_96_256_run_v1_with_grid_independent_bits(void)
{
    const struct shape_case cases[] = {
        {1, 130, 1000, 2, 1, 96, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 333, 900, 4, 2, 256, DTYPE_F16, SCHED_MASK_CAUSAL},
    };
    const int32_t ws[] = {SCHED_W_DEFAULT, 7};
    const struct {
        int32_t grid;
        int interleaved;
    } runs[] = {{132, 0}, {16, 0}, {3, 0}, {1, 0}, {132, 1}, {5, 1}};
    struct cuattn *ca = open_device();
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x96256);
    int mismatches = 0, modes_seen = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        const int only_v1 = p.head_dim == 256; /* with v2 set */
        CU_ASSERT_EQUAL(cuattn_impl_for(ca, p.head_dim) == CUATTN_IMPL_CUDA_CORES,
                        only_v1 && cuattn_impl(ca) != CUATTN_IMPL_WGMMA);
        CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, CUATTN_IMPL_CUDA_CORES), 0);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++)
            for (int kind = SCHED_ASCENDING; kind < SCHED_KIND_COUNT; kind++) {
                if (wi > 0 && kind != SCHED_SHIFT)
                    continue; /* W matters to shift only */
                struct attn_config cfg = {(enum sched_kind)kind, ws[wi], 0, 0, 0}, used;
                cuattn__force_interleaved(ca, 0);
                CU_ASSERT_EQUAL_FATAL(
                    cuattn_set_impl(ca, only_v1 ? CUATTN_IMPL_TENSOR_CORES : CUATTN_IMPL_CUDA_CORES), 0);
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 132, &used), 0);
                CU_ASSERT_EQUAL(used.block_m, CUATTN_BLOCK);
                CU_ASSERT_EQUAL(used.block_n, CUATTN_BLOCK);
                struct gpu_copy base;
                gpu_copy_bwd(&base, &a);
                CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, CUATTN_IMPL_CUDA_CORES), 0);
                int seen[3] = {0, 0, 0};
                for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
                    cuattn__force_interleaved(ca, runs[ri].interleaved);
                    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, runs[ri].grid, &used), 0);
                    CU_ASSERT_EQUAL(used.block_n, CUATTN_BLOCK);
                    int32_t mode = 0, grid = 0;
                    cuattn__last_launch(ca, &mode, &grid);
                    if (!runs[ri].interleaved)
                        seen[mode == 2 ? 2 : 1] = 1;
                    if (!gpu_copy_equal(&base, &a) && mismatches++ < 8)
                        fprintf(stderr, "\n  case %zu D %d %s W %d: grid %d (%s, %d CTAs) differs from grid 132",
                                ci, p.head_dim, sched_kind_name(cfg.sched), ws[wi], runs[ri].grid,
                                mode == 2 ? "interleaved" : "persistent", grid);
                }
                /* shift ran both modes without being forced */
                if (kind == SCHED_SHIFT && ci == 0 && wi == 0)
                    modes_seen += seen[1] && seen[2];
                gpu_copy_free(&base);
            }
        cuattn__force_interleaved(ca, 0);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    CU_ASSERT_EQUAL(modes_seen, 1);
    cuattn_free(ca);
}

/* v3's dense backward does not zero its dQ accumulator under a deterministic schedule (the
 * first addition of a tile is a copy; attn_bwd_dq_first_stores): with the scratch filled
 * with NaN before each call (cuattn__poison_scratch) every schedule, atomic too, gives the
 * bytes it gives on scratch left by earlier calls and matches float64 - causal with more
 * queries than keys (whole dQ tiles no kv-tile reaches, rows that see no key in a tile that
 * others' keys reach), full, GQA, head dims 64 (pairs of q-tiles), 96, 128 and 256. */
static struct cuattn *open_v3(void);

static void test_attn_gpu_v3_backward_needs_no_zeroed_scratch(void)
{
    const struct shape_case cases[] = {
        {1, 300, 17, 2, 1, 64, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {2, 200, 130, 4, 2, 128, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 130, 200, 4, 1, 128, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 200, 70, 2, 2, 96, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 250, 100, 2, 1, 256, DTYPE_F16, SCHED_MASK_CAUSAL},
    };
    struct cuattn *ca = open_v3();
    if (!ca)
        return;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x5c7a);
    int bad = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        struct refs R;
        refs_compute(&R, &p, &a);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        for (int kind = 0; kind < SCHED_KIND_COUNT; kind++) {
            struct attn_config cfg = {(enum sched_kind)kind, 0, 0, 0, 0};
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
            struct gpu_copy g;
            gpu_copy_bwd(&g, &a);
            cuattn__poison_scratch(ca, 1);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
            cuattn__poison_scratch(ca, 0);
            CU_ASSERT(cuattn__last_wg(ca));
            double e[3];
            const int close = grads_close(&a, &R, e), same = kind == SCHED_ATOMIC || gpu_copy_equal(&g, &a);
            if (!close || !same) {
                fprintf(stderr, "\n  case %zu %s on NaN scratch: rel error dq %.3g dk %.3g dv %.3g%s", ci,
                        sched_kind_name(cfg.sched), e[0], e[1], e[2], same ? "" : ", other bytes");
                bad++;
            }
            gpu_copy_free(&g);
        }
        refs_free(&R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    cuattn_free(ca);
}

/* v3's backward at head dim 256 (64 x 64 tiles, bwd_wgmma.cuh) against float64 into
 * poisoned outputs, for every deterministic schedule (shift at W 64 and 7) and atomic:
 * fp16 and bf16, full and causal, GQA 2:1 and MHA, lengths that are not tile multiples,
 * seqlen_q != seqlen_k both ways, one key per row (dQ and dK exactly zero), and 2048
 * causal; then each deterministic schedule's bytes again 20 times over grids 132, 114, 78,
 * 16 and 1 and in the interleaved mode forced on 5 CTAs, and it must have run v3's kernel. */
static void test_attn_gpu_v3_head_dim_256_backward_matches_float64_with_grid_independent_bits(void)
{
    const struct shape_case cases[] = {
        {1, 257, 385, 2, 1, 256, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {2, 130, 100, 4, 2, 256, DTYPE_F16, SCHED_MASK_FULL},
        {1, 1, 1, 2, 1, 256, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 100, 70, 2, 2, 256, DTYPE_F16, SCHED_MASK_CAUSAL}, /* rows that see no key */
        {1, 2048, 2048, 2, 1, 256, DTYPE_BF16, SCHED_MASK_CAUSAL},
    };
    const int32_t grids[] = {132, 114, 78, 16, 1};
    const int32_t ws[] = {SCHED_W_DEFAULT, 7};
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    if (!gpu_is_hopper() || cuattn_set_impl(ca, CUATTN_IMPL_WGMMA) != 0 ||
        cuattn_impl_for(ca, 256) != CUATTN_IMPL_WGMMA) {
        CU_ASSERT(!gpu_is_hopper());
        fprintf(stderr, "\n    not an sm_90 GPU: v3's head-dim-256 backward cannot run here ");
        cuattn_free(ca);
        return;
    }
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x256b);
    int bad = 0, mismatches = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        struct refs R;
        refs_compute(&R, &p, &a);
        const double tol = tolerance(p.dtype);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        for (int kind = SCHED_ASCENDING; kind < SCHED_KIND_COUNT; kind++)
            for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++) {
                if (wi > 0 && kind != SCHED_SHIFT)
                    continue; /* W matters to shift only */
                struct attn_config cfg = {(enum sched_kind)kind, ws[wi], 0, 0, 0}, used;
                memset(&used, 0, sizeof used);
                cuattn__force_interleaved(ca, 0);
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, &used), 0);
                CU_ASSERT_EQUAL(cuattn__last_wg(ca), 1);
                CU_ASSERT_EQUAL(used.block_n, CUATTN_BLOCK);
                double e[3];
                if (!grads_close(&a, &R, e)) {
                    fprintf(stderr, "\n  case %zu %s W %d: rel error dq %.3g dk %.3g dv %.3g (limit %.0g)", ci,
                            sched_kind_name(cfg.sched), ws[wi], e[0], e[1], e[2], tol);
                    bad++;
                }
                if (kind == SCHED_ATOMIC)
                    continue;
                struct gpu_copy base;
                gpu_copy_bwd(&base, &a);
                const size_t runs = 21; /* 20 repeats, the grids in turn, then interleaved */
                for (size_t ri = 0; ri < runs; ri++) {
                    const int inter = ri + 1 == runs;
                    const int32_t grid = inter ? 5 : grids[ri % (sizeof grids / sizeof grids[0])];
                    cuattn__force_interleaved(ca, inter);
                    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, grid, NULL), 0);
                    int32_t mode = 0, used_grid = 0;
                    cuattn__last_launch(ca, &mode, &used_grid);
                    CU_ASSERT_EQUAL(cuattn__last_wg(ca), 1);
                    if (!gpu_copy_equal(&base, &a) && mismatches++ < 8)
                        fprintf(stderr, "\n  case %zu %s W %d: run %zu grid %d (%s, %d CTAs) differs", ci,
                                sched_kind_name(cfg.sched), ws[wi], ri, grid,
                                mode == 2 ? "interleaved" : "persistent", used_grid);
                }
                cuattn__force_interleaved(ca, 0);
                gpu_copy_free(&base);
            }
        refs_free(&R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(mismatches, 0);
    cuattn_free(ca);
}

/* The test compute-sanitizer runs (scripts/gpu_sanitize.sh: memcheck, racecheck,
 * synccheck), small enough for their slowdown: every kernel implementation, every head
 * dim, every schedule, persistent and interleaved CTAs, each checked against float64 (so
 * a sanitizer run that changes nothing also says the results are right), with and without
 * the audit's fused leaves. */
static void test_attn_gpu_small_shapes_for_sanitizers(void)
{
    const struct shape_case cases[] = {
        {1, 130, 100, 2, 1, 64, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 70, 129, 2, 2, 128, DTYPE_F16, SCHED_MASK_FULL},
        {1, 90, 70, 2, 1, 96, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 65, 70, 2, 1, 256, DTYPE_F16, SCHED_MASK_FULL},
        {2, 130, 200, 2, 2, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {2, 200, 300, 2, 2, 64, DTYPE_BF16, SCHED_MASK_CAUSAL},
    };
    /* each case's CTAs in the persistent runs (0: the SM count): the last two cases' run
     * several units each, so the tools see unit ends with the next unit's loads under the
     * dK/dV stores - head dim 128's (four units a CTA: its K/V and first stage, trial
     * unitlap) and 64's pair kernel (six: its K/V and first pair, trial lap64) - whole
     * kv-tiles and ones past the keys' end, and at 64 pairs without a tile b */
    const int32_t grid[] = {0, 0, 0, 0, 2, 2};
    struct cuattn *ca = open_device();
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x5a71);
    int bad = 0;
    struct dig3 dig;
    dig3_init(&dig);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        struct refs R;
        refs_compute(&R, &p, &a);
        const double tol = tolerance(p.dtype);
        for (int32_t impl = CUATTN_IMPL_CUDA_CORES; impl <= CUATTN_IMPL_WGMMA; impl++) {
            if (impl == CUATTN_IMPL_WGMMA && !gpu_is_hopper())
                continue;
            CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impl), 0);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
            if (!(rel_err(a.out, p.dtype, R.out, a.nq) < tol)) {
                fprintf(stderr, "\n  case %zu impl %d forward: too far from float64", ci, impl);
                bad++;
            }
            for (int kind = 0; kind < SCHED_KIND_COUNT; kind++)
                for (int inter = 0; inter < 2; inter++) {
                    if (inter && kind != SCHED_SHIFT)
                        continue; /* interleaving is shift's answer to a small grid */
                    struct attn_config cfg = {(enum sched_kind)kind, inter ? 7 : 0, 0, 0, 0};
                    cuattn__force_interleaved(ca, inter);
                    /* the audit's fused leaves on every other schedule and interleaved, so
                     * the tools see the epilogues both ways; with them the digests folded
                     * where the kernels fold them (the dQ postprocess's barriers and counter) */
                    const int leaves = inter || kind % 2 == 0;
                    CU_ASSERT_EQUAL_FATAL(cuattn_set_leaves(ca, leaves), 0);
                    CU_ASSERT_EQUAL_FATAL(cuattn_set_digests(ca, leaves ? dig.out : NULL), 0);
                    dig3_poison(&dig, ca);
                    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, inter ? 3 : grid[ci], NULL), 0);
                    if (cuattn_digested(ca))
                        bad += folded_digests_differ(&a, dig.d, "sanitizer shape");
                    double e[3];
                    if (!grads_close(&a, &R, e)) {
                        fprintf(stderr, "\n  case %zu impl %d %s%s: rel error dq %.3g dk %.3g dv %.3g",
                                ci, impl, sched_kind_name(cfg.sched), inter ? " interleaved" : "",
                                e[0], e[1], e[2]);
                        bad++;
                    }
                }
            cuattn__force_interleaved(ca, 0);
            (void)cuattn_set_leaves(ca, 0);
            (void)cuattn_set_digests(ca, NULL);
        }
        refs_free(&R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CUDA_OK(cudaFree(dig.d));
    cuattn_free(ca);
}

/* On a GPU with less shared memory per block than v3 needs: an A100 (163 KiB) runs v2 at
 * head dim 128, its backward with 64 x 64 tiles (block_n 64, the only ones v2 has there),
 * with v2's bits; sm_86 and sm_89 parts (99 KiB) run v1 and say so, with v1's bits; head
 * dim 256 is refused where even v1's tiles do not fit. Simulated here by lowering the
 * object's shared-memory figure; the bits are those of objects set to v2 and v1 on the
 * whole device. */
static void test_attn_gpu_smaller_gpus_run_v2_or_v1(void)
{
    const struct shape_case c = {1, 200, 150, 4, 2, 128, DTYPE_BF16, SCHED_MASK_CAUSAL};
    struct cuattn *v1 = open_device(), *v2 = open_device(), *small = open_device();
    CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(v1, CUATTN_IMPL_CUDA_CORES), 0);
    CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(v2, CUATTN_IMPL_TENSOR_CORES), 0);
    const int32_t chosen = cuattn_impl(small);
    CU_ASSERT_NOT_EQUAL(cuattn_impl_for(small, 128), CUATTN_IMPL_CUDA_CORES); /* the H200 */
    CU_ASSERT_EQUAL(cuattn_impl_for(small, 256) == CUATTN_IMPL_WGMMA, chosen == CUATTN_IMPL_WGMMA);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xa100);
    struct attn_problem p = problem_of(&c);
    struct gpu_bufs a;
    gpu_bufs_init(&a, &p, NULL, NULL, &r);
    CU_ASSERT_EQUAL(cuattn_bwd_block_n(v2, &p), CUATTN_BLOCK); /* v2 at 128: 64 x 64 only */
    CU_ASSERT_EQUAL(cuattn_bwd_block_n(v1, &p), CUATTN_BLOCK);
    CU_ASSERT_EQUAL(cuattn_bwd_block_n(small, &p), chosen == CUATTN_IMPL_WGMMA ? CUATTN_TC_BLOCK_N : CUATTN_BLOCK);
    /* each implementation's forward; then both backwards from v1's forward (the inputs of
     * every backward below) */
    struct gpu_copy fwd[2], bwd[2];
    struct attn_config cfg = {SCHED_SHIFT, 0, 0, 0, 0}, used;
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(v2, &a, NULL, NULL), 0);
    gpu_copy_fwd(&fwd[1], &a);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(v1, &a, NULL, NULL), 0);
    gpu_copy_fwd(&fwd[0], &a);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(v1, &a, &cfg, 0, NULL), 0);
    gpu_copy_bwd(&bwd[0], &a);
    CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(v2, &a, &cfg, 0, &used), 0);
    CU_ASSERT_EQUAL(used.block_n, CUATTN_BLOCK);
    gpu_copy_bwd(&bwd[1], &a);
    CU_ASSERT(!gpu_copy_equal(&bwd[0], &a)); /* (two implementations: different bits) */
    const size_t limits[] = {163 * 1024, 99 * 1024};
    const int32_t runs[] = {CUATTN_IMPL_TENSOR_CORES, CUATTN_IMPL_CUDA_CORES};
    for (size_t li = 0; li < 2; li++) {
        const int k = runs[li] == CUATTN_IMPL_TENSOR_CORES;
        cuattn__limit_smem(small, limits[li]);
        CU_ASSERT_EQUAL(cuattn_impl_for(small, 128), runs[li]);
        CU_ASSERT_EQUAL(cuattn_impl_for(small, 96), runs[li]); /* 96: what 128 runs */
        CU_ASSERT_EQUAL(cuattn_impl_for(small, 256), CUATTN_IMPL_CUDA_CORES); /* v3's 256 needs 212 KiB */
        CU_ASSERT_EQUAL(cuattn_impl(small), chosen); /* the choice stays */
        CU_ASSERT_EQUAL(cuattn_bwd_block_n(small, &p), CUATTN_BLOCK);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(small, &a, NULL, NULL), 0);
        CU_ASSERT(gpu_copy_equal(&fwd[k], &a));
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(v1, &a, NULL, NULL), 0); /* the backwards' inputs again */
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(small, &a, &cfg, 0, &used), 0);
        CU_ASSERT_EQUAL(used.block_n, CUATTN_BLOCK);
        CU_ASSERT(gpu_copy_equal(&bwd[k], &a));
        struct attn_config wide = {SCHED_SHIFT, 0, 0, CUATTN_TC_BLOCK_N, 0};
        CU_ASSERT_EQUAL(gpu_bufs_backward(small, &a, &wide, 0, NULL), -EINVAL); /* neither has 128 here */
        CU_ASSERT_EQUAL(cuattn_check_config(small, &p, &wide, 1), -EINVAL);
    }
    for (int k = 0; k < 2; k++) {
        gpu_copy_free(&fwd[k]);
        gpu_copy_free(&bwd[k]);
    }
    gpu_bufs_free(&a);
    /* 99 KiB: v3's head-dim-256 forward (about 193 KiB) does not fit either: v1's runs
     * (about 162 KiB); v1's head-dim-256 backward cannot run */
    CU_ASSERT_EQUAL(cuattn_fwd_impl_for(small, 256), CUATTN_IMPL_CUDA_CORES);
    const struct shape_case big = {1, 70, 70, 2, 1, 256, DTYPE_F16, SCHED_MASK_FULL};
    struct attn_problem pb = problem_of(&big);
    gpu_bufs_init(&a, &pb, NULL, NULL, &r);
    CU_ASSERT_EQUAL(gpu_bufs_backward(small, &a, &cfg, 0, NULL), -ENOTSUP);
    /* the early check says what the calls say (v1 at 256: 113 KiB forward, 162 KiB backward) */
    CU_ASSERT_EQUAL(cuattn_check_config(small, &pb, &cfg, 1), -ENOTSUP);
    CU_ASSERT_EQUAL(cuattn_check_config(small, &pb, NULL, 0), gpu_bufs_forward(small, &a, NULL, NULL));
    gpu_bufs_free(&a);
    cuattn_free(v1);
    cuattn_free(v2);
    cuattn_free(small);
}

static void test_attn_gpu_rejects_bad_arguments_and_reports_config(void)
{
    struct cuattn *bad = NULL;
    int count = 0;
    CU_ASSERT_EQUAL(cuattn_new(-1, &bad), -ENODEV);
    CU_ASSERT(gpu_cuda_ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount", __LINE__));
    CU_ASSERT_EQUAL(cuattn_new(count, &bad), -ENODEV);
    CU_ASSERT_PTR_NULL(bad);
    cuattn_free(NULL);

    struct cuattn *ca = open_device();
    char name[128];
    int32_t sms = 0;
    CU_ASSERT_EQUAL(cuattn_device(ca, name, sizeof name, &sms), 0);
    CU_ASSERT(name[0] != 0 && sms > 0);

    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xbad);
    const struct shape_case c = {1, 100, 90, 2, 1, 64, DTYPE_BF16, SCHED_MASK_CAUSAL};
    struct attn_problem p = problem_of(&c);
    struct gpu_bufs a;
    gpu_bufs_init(&a, &p, NULL, NULL, &r);

    struct attn_config used;
    memset(&used, 0, sizeof used);
    CU_ASSERT_EQUAL(gpu_bufs_forward(ca, &a, NULL, &used), 0);
    CU_ASSERT_EQUAL(used.sched, SCHED_ASCENDING);
    CU_ASSERT_EQUAL(used.block_m, CUATTN_BLOCK);
    CU_ASSERT_EQUAL(used.block_n, CUATTN_BLOCK);
    /* v2's and v3's backward default to 64 x 128 tiles and run 64 x 64 when asked; v1 has
     * 64 x 64 */
    const int32_t wide = cuattn_impl(ca) != CUATTN_IMPL_CUDA_CORES ? CUATTN_TC_BLOCK_N : CUATTN_BLOCK;
    CU_ASSERT_EQUAL(gpu_bufs_backward(ca, &a, NULL, 0, &used), 0);
    CU_ASSERT(sched_is_deterministic(used.sched) && used.sched != SCHED_AUTO);
    CU_ASSERT_EQUAL(used.w, SCHED_W_DEFAULT);
    CU_ASSERT_EQUAL(used.block_m, CUATTN_BLOCK);
    CU_ASSERT_EQUAL(used.block_n, wide);
    struct attn_config pinned = {SCHED_SPT, 7, 64, 0, 0};
    CU_ASSERT_EQUAL(gpu_bufs_backward(ca, &a, &pinned, 5, &used), 0);
    CU_ASSERT_EQUAL(used.sched, SCHED_SPT);
    CU_ASSERT_EQUAL(used.w, 7);
    CU_ASSERT_EQUAL(used.block_n, wide);
    struct attn_config narrow = {SCHED_SPT, 0, 0, CUATTN_BLOCK, 0};
    CU_ASSERT_EQUAL(gpu_bufs_backward(ca, &a, &narrow, 0, &used), 0);
    CU_ASSERT_EQUAL(used.block_n, CUATTN_BLOCK);
    struct attn_config widest = {SCHED_SPT, 0, 0, CUATTN_TC_BLOCK_N, 0};
    CU_ASSERT_EQUAL(gpu_bufs_backward(ca, &a, &widest, 0, &used), wide == CUATTN_TC_BLOCK_N ? 0 : -EINVAL);

    /* the kernels' limits */
    struct attn_problem q = p;
    q.dtype = DTYPE_F32;
    CU_ASSERT_EQUAL(cuattn_forward(ca, &q, NULL, gpu_bufs_tq(&a, a.d_out), a.d_lse, gpu_bufs_tq(&a, a.d_q), gpu_bufs_tk(&a, a.d_k),
                                   gpu_bufs_tk(&a, a.d_v), NULL), -ENOTSUP);
    const int32_t no_dims[] = {24, 84, 264}; /* under 32, not a multiple of 8, over 256 */
    for (size_t i = 0; i < sizeof no_dims / sizeof no_dims[0]; i++) {
        q = p;
        q.head_dim = no_dims[i];
        CU_ASSERT_EQUAL(cuattn_forward(ca, &q, NULL, gpu_bufs_tq(&a, a.d_out), a.d_lse, gpu_bufs_tq(&a, a.d_q),
                                       gpu_bufs_tk(&a, a.d_k), gpu_bufs_tk(&a, a.d_v), NULL), -ENOTSUP);
    }
    const struct attn_config bad_cfgs[] = {
        {SCHED_ASCENDING, 0, 32, 0, 0}, {SCHED_ASCENDING, 0, 0, 96, 0},
        {SCHED_ASCENDING, 0, 128, 0, 0}, {SCHED_ASCENDING, -1, 0, 0, 0},
        {(enum sched_kind)99, 0, 0, 0, 0}, {SCHED_SHIFT, SCHED_W_MAX + 1, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof bad_cfgs / sizeof bad_cfgs[0]; i++)
        CU_ASSERT_EQUAL(gpu_bufs_backward(ca, &a, &bad_cfgs[i], 0, NULL), -EINVAL);
    CU_ASSERT_EQUAL(gpu_bufs_backward(ca, &a, NULL, -1, NULL), -EINVAL);
    /* malformed problem and views */
    q = p;
    q.heads_kv = 3;
    CU_ASSERT_EQUAL(cuattn_forward(ca, &q, NULL, gpu_bufs_tq(&a, a.d_out), a.d_lse, gpu_bufs_tq(&a, a.d_q), gpu_bufs_tk(&a, a.d_k),
                                   gpu_bufs_tk(&a, a.d_v), NULL), -EINVAL);
    CU_ASSERT_EQUAL(cuattn_forward(ca, &p, NULL, gpu_bufs_tq(&a, a.d_out), NULL, gpu_bufs_tq(&a, a.d_q), gpu_bufs_tk(&a, a.d_k),
                                   gpu_bufs_tk(&a, a.d_v), NULL), -EINVAL);
    struct attn_tensor overlap = gpu_bufs_tq(&a, a.d_out);
    overlap.stride[1] = 1; /* rows of the output would overlap */
    CU_ASSERT_EQUAL(cuattn_forward(ca, &p, NULL, overlap, a.d_lse, gpu_bufs_tq(&a, a.d_q), gpu_bufs_tk(&a, a.d_k),
                                   gpu_bufs_tk(&a, a.d_v), NULL), -EINVAL);
    struct attn_tensor odd = gpu_bufs_tq(&a, (char *)a.d_q + 1); /* 16-bit elements need 2-byte alignment */
    CU_ASSERT_EQUAL(cuattn_forward(ca, &p, NULL, gpu_bufs_tq(&a, a.d_out), a.d_lse, odd, gpu_bufs_tk(&a, a.d_k),
                                   gpu_bufs_tk(&a, a.d_v), NULL), -EINVAL);
    CU_ASSERT_EQUAL(cuattn_forward(NULL, &p, NULL, gpu_bufs_tq(&a, a.d_out), a.d_lse, gpu_bufs_tq(&a, a.d_q), gpu_bufs_tk(&a, a.d_k),
                                   gpu_bufs_tk(&a, a.d_v), NULL), -EINVAL);
    /* still usable after refusals */
    CU_ASSERT_EQUAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
    gpu_bufs_free(&a);

    /* head dim 256 runs v3 where v3 is set, else v1 (v2 has no 256): 64 x 64 tiles
     * reported either way, block_n 128 refused; 96 runs what 128 runs (widened copies; v1's
     * own kernels when v1 is set), with its tiles. Small shapes, so this test suits
     * compute-sanitizer. */
    CU_ASSERT_EQUAL(cuattn_impl_for(ca, 64), cuattn_impl(ca));
    CU_ASSERT_EQUAL(cuattn_impl_for(ca, 128), cuattn_impl(ca));
    CU_ASSERT_EQUAL(cuattn_impl_for(NULL, 96), -EINVAL);
    CU_ASSERT_EQUAL(cuattn_fwd_impl_for(NULL, 256), -EINVAL);
    const int32_t odd_dims[] = {96, 256};
    for (size_t i = 0; i < sizeof odd_dims / sizeof odd_dims[0]; i++)
        for (int32_t impl = CUATTN_IMPL_CUDA_CORES; impl <= CUATTN_IMPL_WGMMA; impl++) {
            if (impl == CUATTN_IMPL_WGMMA && !gpu_is_hopper())
                continue;
            const struct shape_case c2 = {1, 100, 90, 2, 1, odd_dims[i], DTYPE_F16, SCHED_MASK_CAUSAL};
            struct attn_problem p2 = problem_of(&c2);
            gpu_bufs_init(&a, &p2, NULL, NULL, &r);
            CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, impl), 0);
            const int32_t runs = p2.head_dim == 96            ? cuattn_impl_for(ca, 128)
                                 : impl == CUATTN_IMPL_WGMMA ? CUATTN_IMPL_WGMMA
                                                             : CUATTN_IMPL_CUDA_CORES;
            CU_ASSERT_EQUAL(cuattn_impl_for(ca, p2.head_dim), runs);
            /* the forward: 96 as 128; 256 on v3 where v3 is set, else v1 */
            const int32_t fwd = p2.head_dim == 96 ? runs : impl == CUATTN_IMPL_WGMMA ? impl : CUATTN_IMPL_CUDA_CORES;
            CU_ASSERT_EQUAL(cuattn_fwd_impl_for(ca, p2.head_dim), fwd);
            /* (v2 has 128-row kv-tiles at head dim 64 only) */
            const int32_t bn = runs == CUATTN_IMPL_WGMMA && p2.head_dim != 256 ? CUATTN_TC_BLOCK_N : CUATTN_BLOCK;
            CU_ASSERT_EQUAL(cuattn_bwd_block_n(ca, &p2), bn);
            memset(&used, 0, sizeof used);
            CU_ASSERT_EQUAL(gpu_bufs_forward(ca, &a, NULL, &used), 0);
            CU_ASSERT_EQUAL(cuattn__last_fwd_wg(ca), fwd == CUATTN_IMPL_WGMMA);
            CU_ASSERT_EQUAL(used.block_n, CUATTN_BLOCK);
            memset(&used, 0, sizeof used);
            CU_ASSERT_EQUAL(gpu_bufs_backward(ca, &a, NULL, 0, &used), 0);
            /* auto, resolved for the dim asked (96, not the 128 it runs) */
            CU_ASSERT_EQUAL(used.sched, cuattn_auto_schedule(gpu_cc(), p2.head_dim, SCHED_MASK_CAUSAL, 0));
            CU_ASSERT_EQUAL(used.block_m, CUATTN_BLOCK);
            CU_ASSERT_EQUAL(used.block_n, bn);
            CU_ASSERT_EQUAL(cuattn__last_wg(ca), runs == CUATTN_IMPL_WGMMA);
            CU_ASSERT_EQUAL(gpu_bufs_backward(ca, &a, &narrow, 0, NULL), 0);
            CU_ASSERT_EQUAL(gpu_bufs_backward(ca, &a, &widest, 0, NULL), bn == CUATTN_TC_BLOCK_N ? 0 : -EINVAL);
            gpu_bufs_free(&a);
        }
    cuattn_free(ca);
}

/* ---- v3's forward (attn_fwd_wg.cu; suite gpu_attn_fwd) -------------------------------- */

/* An sm_90 object set to v3, or NULL (and v3 refused) on other GPUs. */
static struct cuattn *open_v3(void)
{
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    if (!gpu_is_hopper()) {
        CU_ASSERT_EQUAL(cuattn_set_impl(ca, CUATTN_IMPL_WGMMA), -ENOTSUP);
        fprintf(stderr, "\n    not an sm_90 GPU: v3's forward cannot run here ");
        cuattn_free(ca);
        return NULL;
    }
    CU_ASSERT_EQUAL_FATAL(cuattn_set_impl(ca, CUATTN_IMPL_WGMMA), 0);
    return ca;
}

/* v3's forward against the float64 reference (out within the dtype's tolerance, lse
 * within 1e-4, +inf for rows that see no key), into poisoned outputs: head dims 64, 128
 * and 256 (its 64-key tiles), full and causal, fp16 and bf16, GQA 2:1 and 4:1 and MHA;
 * lengths 1, 17, 100 and others that are not multiples of the 128-row tiles,
 * seqlen_q != seqlen_k both ways (causal rows that see no key, a q-tile whose kv range is
 * empty), and 4096 (2048 too at 256). Each call is then repeated twice and must give the
 * same bytes (out and lse), and must have run v3's kernel. */
static void test_attn_gpu_v3_forward_matches_float64_reference_and_repeats_its_bits(void)
{
    const struct shape_case cases[] = {
        {1, 1, 1, 4, 2, 64, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 1, 1, 2, 1, 128, DTYPE_BF16, SCHED_MASK_FULL},
        {2, 17, 17, 4, 2, 64, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 17, 17, 4, 1, 128, DTYPE_F16, SCHED_MASK_CAUSAL},
        {2, 100, 100, 4, 4, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 100, 100, 4, 2, 64, DTYPE_F16, SCHED_MASK_FULL},
        {1, 100, 17, 4, 2, 128, DTYPE_F16, SCHED_MASK_CAUSAL}, /* rows 0-82 see no key */
        {1, 300, 17, 2, 1, 64, DTYPE_BF16, SCHED_MASK_CAUSAL}, /* whole q-tiles see none */
        {1, 17, 300, 4, 2, 64, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 1, 200, 2, 1, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 200, 1, 2, 1, 64, DTYPE_F16, SCHED_MASK_FULL},
        {1, 300, 260, 4, 2, 128, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 257, 385, 2, 1, 64, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 385, 257, 2, 1, 128, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 4096, 4096, 2, 1, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 4096, 4096, 2, 1, 128, DTYPE_F16, SCHED_MASK_FULL},
        {1, 4096, 4096, 2, 1, 64, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 4096, 4096, 2, 2, 64, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 1, 1, 2, 1, 256, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {2, 17, 17, 4, 2, 256, DTYPE_F16, SCHED_MASK_FULL},
        {1, 100, 100, 4, 4, 256, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 100, 17, 4, 2, 256, DTYPE_F16, SCHED_MASK_CAUSAL}, /* rows 0-82 see no key */
        {1, 300, 17, 2, 1, 256, DTYPE_BF16, SCHED_MASK_CAUSAL}, /* whole q-tiles see none */
        {1, 1, 200, 2, 1, 256, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 300, 260, 4, 2, 256, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 257, 385, 2, 1, 256, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 385, 257, 2, 1, 256, DTYPE_BF16, SCHED_MASK_CAUSAL},
        /* long 256 shapes with fewer heads: the float64 reference is the test's cost */
        {1, 4096, 4096, 1, 1, 256, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 2048, 2048, 2, 2, 256, DTYPE_F16, SCHED_MASK_FULL},
    };
    struct cuattn *ca = open_v3();
    if (!ca)
        return;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xf3d);
    int bad = 0, mismatches = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        CU_ASSERT_EQUAL(cuattn_fwd_impl_for(ca, p.head_dim), CUATTN_IMPL_WGMMA);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        struct refs R; /* the forward's only: the long shapes' backward reference is slow */
        memset(&R, 0, sizeof R);
        R.out = malloc(sizeof(double) * (size_t)a.nq);
        R.lse = malloc(sizeof(double) * (size_t)a.nlse);
        CU_ASSERT_FATAL(R.out && R.lse);
        CU_ASSERT_FATAL(ref_forward(&p, gpu_bufs_tq(&a, a.q), gpu_bufs_tk(&a, a.k), gpu_bufs_tk(&a, a.v), R.out, R.lse) == 0);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        CU_ASSERT_EQUAL(cuattn__last_fwd_wg(ca), 1);
        double err;
        int lse_bad;
        if (!forward_close(&a, &R, &err, &lse_bad)) {
            fprintf(stderr, "\n  case %zu (%d x %d, d %d, %s, %s): rel error %.3g (limit %.0g), %d bad lse", ci,
                    p.seqlen_q, p.seqlen_k, p.head_dim, p.dtype == DTYPE_BF16 ? "bf16" : "f16",
                    p.mask == SCHED_MASK_CAUSAL ? "causal" : "full", err, tolerance(p.dtype), lse_bad);
            bad++;
        }
        struct gpu_copy first;
        gpu_copy_fwd(&first, &a);
        for (int rep = 0; rep < 2; rep++) {
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
            if (!gpu_copy_equal(&first, &a) && mismatches++ < 8)
                fprintf(stderr, "\n  case %zu: repeat %d differs", ci, rep);
        }
        gpu_copy_free(&first);
        free(R.out);
        free(R.lse);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(mismatches, 0);
    cuattn_free(ca);
}

/* v3's forward on (b, h, s, d) views with padded rows gives the dense layout's bytes
 * (which the TMA loads produce): a pad of 8 elements keeps every row and stride 16-byte
 * aligned (TMA again, through a map of the padded view), a pad of 3 does not (the cp.async
 * producer's plain-load path); out is written through the same padded views. Head dims
 * 64, 128 and 256, causal GQA, batch 2 (a tile past a sequence's end must not see the next
 * sequence's rows). */
static void test_attn_gpu_v3_forward_bits_do_not_depend_on_strides(void)
{
    const struct shape_case cases[] = {
        {2, 150, 290, 4, 2, 64, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 290, 150, 4, 1, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {2, 150, 290, 4, 2, 256, DTYPE_BF16, SCHED_MASK_CAUSAL},
    };
    const int32_t pads[] = {8, 3};
    struct cuattn *ca = open_v3();
    if (!ca)
        return;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x5f3);
    int diff = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0); /* the dense bytes */
        CU_ASSERT_EQUAL(cuattn__last_fwd_tma(ca), 1);
        const size_t lb = sizeof(float) * (size_t)a.nlse;
        float *lse_dense = malloc(lb);
        CU_ASSERT_FATAL(lse_dense != NULL);
        memcpy(lse_dense, a.lse, lb);
        for (size_t pi = 0; pi < sizeof pads / sizeof pads[0]; pi++) {
            const int32_t D = p.head_dim, row = D + pads[pi];
            enum { Q, K, V, OUT, VIEWS };
            const void *src[VIEWS] = {a.q, a.k, a.v, a.out};
            const int32_t seqlen[VIEWS] = {p.seqlen_q, p.seqlen_k, p.seqlen_k, p.seqlen_q};
            const int32_t heads[VIEWS] = {p.heads_q, p.heads_kv, p.heads_kv, p.heads_q};
            struct attn_tensor t[VIEWS];
            void *host[VIEWS];
            size_t bytes[VIEWS];
            for (int i = 0; i < VIEWS; i++) {
                const int64_t n = (int64_t)p.batch * heads[i] * seqlen[i] * row;
                bytes[i] = a.es * (size_t)n;
                host[i] = malloc(bytes[i]);
                CU_ASSERT_FATAL(host[i] != NULL);
                memset(host[i], 0xff, bytes[i]); /* out: poisoned */
                struct attn_tensor view = {gpu_dev_alloc(bytes[i]),
                                           {(int64_t)heads[i] * seqlen[i] * row, row, (int64_t)seqlen[i] * row, 1}};
                t[i] = view;
                if (i != OUT)
                    for (int32_t b = 0; b < p.batch; b++)
                        for (int32_t s = 0; s < seqlen[i]; s++)
                            for (int32_t h = 0; h < heads[i]; h++)
                                memcpy((char *)host[i] + a.es * (size_t)(b * view.stride[0] + s * view.stride[1] + h * view.stride[2]),
                                       (const char *)src[i] + a.es * (size_t)(((int64_t)(b * seqlen[i] + s) * heads[i] + h) * D),
                                       a.es * (size_t)D);
                CUDA_OK(cudaMemcpy(view.data, host[i], bytes[i], cudaMemcpyHostToDevice));
            }
            /* the uploads above (legacy stream) landed; the poison on the object's stream, as
             * gpu_bufs_forward's: the kernels come after both */
            CUDA_OK(cudaDeviceSynchronize());
            CUDA_OK(cudaMemsetAsync(a.d_lse, 0xff, lb, (cudaStream_t)cuattn_stream(ca)));
            CU_ASSERT_EQUAL_FATAL(cuattn_forward(ca, &p, NULL, t[OUT], a.d_lse, t[Q], t[K], t[V], NULL), 0);
            CU_ASSERT_EQUAL(cuattn__last_fwd_tma(ca), (row * (int32_t)a.es) % 16 == 0);
            CUDA_OK(cudaMemcpy(host[OUT], t[OUT].data, bytes[OUT], cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(a.lse, a.d_lse, lb, cudaMemcpyDeviceToHost));
            int d = memcmp(a.lse, lse_dense, lb) != 0;
            for (int32_t b = 0; b < p.batch; b++)
                for (int32_t s = 0; s < p.seqlen_q; s++)
                    for (int32_t h = 0; h < p.heads_q; h++)
                        d += memcmp((char *)host[OUT] + a.es * (size_t)(b * t[OUT].stride[0] + s * t[OUT].stride[1] + h * t[OUT].stride[2]),
                                    (const char *)a.out + a.es * (size_t)(((int64_t)(b * p.seqlen_q + s) * p.heads_q + h) * D),
                                    a.es * (size_t)D) != 0;
            if (d)
                fprintf(stderr, "\n  case %zu pad %d: %d rows (or lse) differ", ci, pads[pi], d);
            diff += d;
            for (int i = 0; i < VIEWS; i++) {
                free(host[i]);
                CU_ASSERT(gpu_cuda_ok(cudaFree(t[i].data), "cudaFree", __LINE__));
            }
        }
        free(lse_dense);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(diff, 0);
    cuattn_free(ca);
}

/* The persistent forward: capped at 1, 3 and 7 CTAs, each CTA takes many q-tiles - causal
 * ones of different lengths (in heavy/light pairs), tiles whose rows see no key (nothing
 * loaded, no phase taken) between tiles that do, GQA and MHA - and with more CTAs than
 * there is work (CTAs that take nothing), through TMA and through cp.async loads, and gives
 * the bytes of the launch's own choice (a CTA an SM), which are within the dtype's
 * tolerance of float64. */
static void test_attn_gpu_v3_forward_persistent_ctas_give_the_same_bits(void)
{
    const struct shape_case cases[] = {
        {2, 1000, 1000, 4, 2, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 700, 77, 4, 1, 64, DTYPE_F16, SCHED_MASK_CAUSAL}, /* q-tiles 0-3 see no key */
        {3, 300, 500, 2, 2, 64, DTYPE_BF16, SCHED_MASK_FULL},
        {2, 700, 900, 2, 1, 256, DTYPE_F16, SCHED_MASK_CAUSAL}, /* 64-key tiles */
        {1, 300, 500, 4, 2, 256, DTYPE_BF16, SCHED_MASK_FULL},
        /* each head's 60-row q-tile (consumer 1 idle, two kv-tiles) before its whole one, on
         * few CTAs, the tensors past L2: the idle consumer must wait for Q's phase too
         * (fwd_wg_idle), or the next tile's S product may read Q as it lands (a race: this
         * case can only catch it when it fires) */
        {32, 188, 200, 16, 16, 128, DTYPE_BF16, SCHED_MASK_FULL},
    };
    const int32_t ctas[] = {1, 3, 7, 1 << 20};
    struct cuattn *ca = open_v3();
    if (!ca)
        return;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x9e75);
    int bad = 0, diff = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        struct refs R;
        refs_compute(&R, &p, &a);
        double err;
        int lse_bad;
        if (!forward_close(&a, &R, &err, &lse_bad)) {
            fprintf(stderr, "\n  case %zu: rel error %.3g, %d bad lse", ci, err, lse_bad);
            bad++;
        }
        refs_free(&R);
        struct gpu_copy one_an_sm;
        gpu_copy_fwd(&one_an_sm, &a);
        for (int cp = 0; cp < 2; cp++)
            for (size_t k = 0; k < sizeof ctas / sizeof ctas[0]; k++) {
                cuattn__force_no_tma(ca, cp);
                cuattn__force_fwd_ctas(ca, ctas[k]);
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
                if (!gpu_copy_equal(&one_an_sm, &a)) {
                    fprintf(stderr, "\n  case %zu, %s, %d CTAs: other bytes than a CTA an SM", ci,
                            cp ? "cp.async" : "TMA", (int)ctas[k]);
                    diff++;
                }
            }
        cuattn__force_no_tma(ca, 0);
        cuattn__force_fwd_ctas(ca, 0);
        gpu_copy_free(&one_an_sm);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(diff, 0);
    cuattn_free(ca);
}

/* Head dim 64's dense forward with two consumer warpgroups (128-row q-tiles) and with three
 * (192 rows): the launch picks by mask and length (fwd_wg.cuh's FWD_WG_NC2_CAUSAL_MAX), so
 * both must give the same bytes - causal and full, ragged lengths (the last tile partial in
 * one and whole in the other), q-tiles that see no key, GQA, TMA and cp.async, a CTA an SM
 * and 3 CTAs - and the rule's choice must be what ran. */
static void test_attn_gpu_v3_forward_two_and_three_consumers_give_the_same_bits_at_64(void)
{
    const struct shape_case cases[] = {
        {2, 1000, 1000, 4, 2, 64, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 2048, 2048, 2, 2, 64, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 700, 77, 4, 1, 64, DTYPE_BF16, SCHED_MASK_CAUSAL}, /* q-tiles that see no key */
        {2, 385, 640, 2, 1, 64, DTYPE_F16, SCHED_MASK_CAUSAL},
        {3, 300, 500, 2, 2, 64, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 4096, 4096, 2, 1, 64, DTYPE_BF16, SCHED_MASK_CAUSAL},
    };
    const int32_t ctas[] = {0, 3};
    struct cuattn *ca = open_v3();
    if (!ca)
        return;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x2c3);
    int diff = 0, rule = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0); /* the rule's choice */
        const int32_t want = p.mask == SCHED_MASK_CAUSAL && p.seqlen_q <= 2048 ? 2 : 3;
        if (cuattn__last_fwd_consumers(ca) != want) {
            fprintf(stderr, "\n  case %zu: %d consumers ran, the rule says %d", ci,
                    (int)cuattn__last_fwd_consumers(ca), (int)want);
            rule++;
        }
        struct gpu_copy first;
        gpu_copy_fwd(&first, &a);
        for (int nc = 2; nc <= 3; nc++)
            for (int cp = 0; cp < 2; cp++)
                for (size_t k = 0; k < sizeof ctas / sizeof ctas[0]; k++) {
                    cuattn__force_fwd_consumers(ca, nc);
                    cuattn__force_no_tma(ca, cp);
                    cuattn__force_fwd_ctas(ca, ctas[k]);
                    CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
                    CU_ASSERT_EQUAL(cuattn__last_fwd_consumers(ca), nc);
                    if (!gpu_copy_equal(&first, &a)) {
                        fprintf(stderr, "\n  case %zu, %d consumers, %s, %d CTAs: other bytes", ci, nc,
                                cp ? "cp.async" : "TMA", (int)ctas[k]);
                        diff++;
                    }
                }
        cuattn__force_fwd_consumers(ca, 0);
        cuattn__force_no_tma(ca, 0);
        cuattn__force_fwd_ctas(ca, 0);
        gpu_copy_free(&first);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(rule, 0);
    CU_ASSERT_EQUAL(diff, 0);
    cuattn_free(ca);
}

/* Consumers whose rows all lie past seqlen_q (the last q-tile's rows end before 64 c) run
 * no products and only free the stages, and under a full mask the persistent CTAs take
 * each round's tiles turned (fwd_wg.cuh: fwd_wg_consume, fwd_wg_walk; trial fwdtail):
 * lengths that leave one or two of head dim 64's three consumers idle in the last q-tile
 * (1024, 2048, 1000, 500, 200, 65, 64, 1 rows: 64, 128, 40, 116, 8, 65, 64, 1 in it) and
 * 128's second (1088, 300, 64, 1; 65 leaves it one row), 64 with two consumers and with
 * three under a causal mask (forced), 96 (the 128 kernel, widened) and 256 (whose turns
 * keep them busy); full and causal, GQA and MHA, more batches and heads than CTAs. Each is
 * within the dtype's tolerance of float64 (out, and lse: every row written, the outputs
 * being poisoned), and 132, 16, 3 and 1 CTAs, through TMA and cp.async, give the bytes of a
 * CTA an SM. */
static void test_attn_gpu_v3_forward_idle_consumers_and_turned_rounds_keep_the_bits(void)
{
    const struct {
        struct shape_case s;
        int32_t nc; /* the dense forward's consumers at 64 (0: its rule) */
    } cases[] = {
        {{2, 1024, 1024, 4, 2, 64, DTYPE_BF16, SCHED_MASK_FULL}, 0},
        {{1, 2048, 2048, 2, 1, 64, DTYPE_F16, SCHED_MASK_FULL}, 0},
        {{1, 1000, 700, 4, 1, 64, DTYPE_F16, SCHED_MASK_FULL}, 0},
        {{3, 500, 500, 2, 2, 64, DTYPE_BF16, SCHED_MASK_FULL}, 0},
        {{2, 200, 333, 4, 2, 64, DTYPE_F16, SCHED_MASK_FULL}, 0},
        {{4, 65, 65, 4, 2, 64, DTYPE_BF16, SCHED_MASK_FULL}, 0},
        {{4, 64, 100, 2, 1, 64, DTYPE_F16, SCHED_MASK_FULL}, 0},
        {{8, 1, 1, 4, 2, 64, DTYPE_BF16, SCHED_MASK_FULL}, 0},
        {{2, 1000, 1000, 4, 2, 64, DTYPE_BF16, SCHED_MASK_CAUSAL}, 3},
        {{1, 300, 500, 2, 1, 64, DTYPE_F16, SCHED_MASK_CAUSAL}, 3},
        {{2, 1088, 1088, 4, 2, 64, DTYPE_F16, SCHED_MASK_FULL}, 2},
        {{2, 300, 300, 4, 2, 64, DTYPE_BF16, SCHED_MASK_CAUSAL}, 2},
        {{2, 1088, 1088, 4, 2, 128, DTYPE_BF16, SCHED_MASK_FULL}, 0},
        {{1, 65, 65, 4, 1, 128, DTYPE_F16, SCHED_MASK_FULL}, 0},
        {{2, 300, 200, 2, 1, 128, DTYPE_F16, SCHED_MASK_CAUSAL}, 0},
        {{4, 64, 64, 2, 2, 128, DTYPE_BF16, SCHED_MASK_FULL}, 0},
        {{8, 1, 1, 4, 2, 128, DTYPE_F16, SCHED_MASK_FULL}, 0},
        {{2, 300, 300, 3, 1, 96, DTYPE_BF16, SCHED_MASK_FULL}, 0},
        {{1, 300, 300, 2, 1, 256, DTYPE_BF16, SCHED_MASK_FULL}, 0},
        {{2, 64, 130, 2, 1, 256, DTYPE_F16, SCHED_MASK_CAUSAL}, 0},
    };
    const int32_t ctas[] = {132, 16, 3, 1};
    struct cuattn *ca = open_v3();
    if (!ca)
        return;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x1d1e);
    int bad = 0, diff = 0, rule = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci].s);
        const int32_t nc = cases[ci].nc;
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        struct refs R; /* the forward's only */
        memset(&R, 0, sizeof R);
        R.out = malloc(sizeof(double) * (size_t)a.nq);
        R.lse = malloc(sizeof(double) * (size_t)a.nlse);
        CU_ASSERT_FATAL(R.out && R.lse);
        CU_ASSERT_FATAL(ref_forward(&p, gpu_bufs_tq(&a, a.q), gpu_bufs_tk(&a, a.k), gpu_bufs_tk(&a, a.v), R.out, R.lse) == 0);
        cuattn__force_fwd_consumers(ca, nc);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0); /* a CTA an SM */
        CU_ASSERT_EQUAL(cuattn__last_fwd_wg(ca), 1);
        if (nc && cuattn__last_fwd_consumers(ca) != nc) {
            fprintf(stderr, "\n  case %zu: %d consumers ran, %d forced", ci, (int)cuattn__last_fwd_consumers(ca),
                    (int)nc);
            rule++;
        }
        double err;
        int lse_bad;
        if (!forward_close(&a, &R, &err, &lse_bad)) {
            fprintf(stderr, "\n  case %zu (%d x %d, d %d, %s, %d consumers): rel error %.3g (limit %.0g), %d bad lse",
                    ci, p.seqlen_q, p.seqlen_k, p.head_dim, p.mask == SCHED_MASK_CAUSAL ? "causal" : "full",
                    (int)cuattn__last_fwd_consumers(ca), err, tolerance(p.dtype), lse_bad);
            bad++;
        }
        struct gpu_copy one_an_sm;
        gpu_copy_fwd(&one_an_sm, &a);
        for (int cp = 0; cp < 2; cp++)
            for (size_t k = 0; k < sizeof ctas / sizeof ctas[0]; k++) {
                cuattn__force_no_tma(ca, cp);
                cuattn__force_fwd_ctas(ca, ctas[k]);
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
                if (!gpu_copy_equal(&one_an_sm, &a)) {
                    fprintf(stderr, "\n  case %zu, %s, %d CTAs: other bytes than a CTA an SM", ci,
                            cp ? "cp.async" : "TMA", (int)ctas[k]);
                    diff++;
                }
            }
        cuattn__force_no_tma(ca, 0);
        cuattn__force_fwd_ctas(ca, 0);
        cuattn__force_fwd_consumers(ca, 0);
        gpu_copy_free(&one_an_sm);
        free(R.out);
        free(R.lse);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(diff, 0);
    CU_ASSERT_EQUAL(rule, 0);
    cuattn_free(ca);
}

/* v3's forward loads its tiles through TMA where the views allow and through cp.async
 * elsewhere; both must put the same bytes in shared memory, so the same problem gives the
 * same out and lse bytes either way (into poisoned outputs). Dense views (TMA by default,
 * cp.async when forced): batches of 2 and 3 whose lengths end inside a tile (the rows
 * after a sequence's end are the next sequence's in memory: TMA must load zeros there),
 * GQA and MHA, head dims 64, 128, 256 and 96 (the 128 kernel: through the widened copies,
 * or through maps 96 columns wide against the copies) and both dtypes, full and causal, unequal lengths both ways, a
 * q-tile with no kv-tile, one row, and 4096. With batch 1, also views whose batch strides
 * TMA could not take (3, 5, 0 elements): never stepped along, they must keep TMA and the
 * bytes. */
static void test_attn_gpu_v3_forward_tma_and_cp_async_loads_give_identical_bits(void)
{
    const struct shape_case cases[] = {
        {1, 1, 1, 2, 1, 128, DTYPE_BF16, SCHED_MASK_FULL},
        {2, 17, 17, 4, 2, 64, DTYPE_BF16, SCHED_MASK_FULL},
        {3, 200, 130, 4, 2, 128, DTYPE_BF16, SCHED_MASK_FULL},
        {2, 100, 100, 4, 4, 128, DTYPE_F16, SCHED_MASK_CAUSAL},
        {2, 300, 17, 2, 1, 64, DTYPE_F16, SCHED_MASK_CAUSAL}, /* whole q-tiles see no key */
        {2, 257, 385, 4, 1, 64, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 385, 257, 2, 1, 128, DTYPE_F16, SCHED_MASK_FULL},
        {1, 4096, 4096, 2, 1, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 4096, 4096, 2, 2, 64, DTYPE_F16, SCHED_MASK_FULL},
        {3, 200, 130, 4, 2, 256, DTYPE_BF16, SCHED_MASK_FULL}, /* 64-key tiles from here */
        {2, 257, 385, 4, 1, 256, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 385, 257, 2, 1, 256, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 4096, 4096, 2, 1, 256, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {2, 257, 385, 4, 1, 96, DTYPE_BF16, SCHED_MASK_CAUSAL}, /* the 128 kernel, 96 of its columns */
        {1, 385, 257, 2, 1, 96, DTYPE_F16, SCHED_MASK_FULL},
    };
    struct cuattn *ca = open_v3();
    if (!ca)
        return;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x7a4);
    int diff = 0, paths = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        const size_t qb = a.es * (size_t)a.nq, lb = sizeof(float) * (size_t)a.nlse;
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        paths += cuattn__last_fwd_tma(ca) != 1;
        struct gpu_copy tma;
        gpu_copy_fwd(&tma, &a);
        cuattn__force_no_tma(ca, 1);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        paths += cuattn__last_fwd_tma(ca) != 0;
        cuattn__force_no_tma(ca, 0);
        if (!gpu_copy_equal(&tma, &a)) {
            fprintf(stderr, "\n  case %zu (%d x %d x %d, %d x %d, d %d): cp.async's bytes differ from TMA's", ci,
                    p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.head_dim);
            diff++;
        }
        if (p.batch == 1) { /* a dim of length 1 is never stepped: an odd stride there keeps TMA */
            struct attn_tensor q = gpu_bufs_tq(&a, a.d_q), k = gpu_bufs_tk(&a, a.d_k), v = gpu_bufs_tk(&a, a.d_v), o = gpu_bufs_tq(&a, a.d_out);
            q.stride[0] = 3;
            k.stride[0] = 5;
            v.stride[0] = 0;
            CUDA_OK(cudaMemsetAsync(a.d_out, 0xff, qb, (cudaStream_t)cuattn_stream(ca)));
            CUDA_OK(cudaMemsetAsync(a.d_lse, 0xff, lb, (cudaStream_t)cuattn_stream(ca)));
            CU_ASSERT_EQUAL_FATAL(cuattn_forward(ca, &p, NULL, o, a.d_lse, q, k, v, NULL), 0);
            paths += cuattn__last_fwd_tma(ca) != 1;
            CUDA_OK(cudaMemcpy(a.out, a.d_out, qb, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(a.lse, a.d_lse, lb, cudaMemcpyDeviceToHost));
            if (!gpu_copy_equal(&tma, &a)) {
                fprintf(stderr, "\n  case %zu: odd batch strides change the bytes", ci);
                diff++;
            }
        }
        gpu_copy_free(&tma);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(paths, 0); /* each run took the path it was meant to */
    CU_ASSERT_EQUAL(diff, 0);
    cuattn_free(ca);
}

/* ---- head dim 96 on the 128 kernels: the caller's 96 columns only -------------------- */

/* Row pitch of the pitched views below, elements: the model's (B, S, H, 128) storage with a
 * 96-column head in it, say. */
/* The pitch of a widened head dim's rows in these tests: its width (96 -> 128, 40 -> 64). */
static int64_t pitch_of(int32_t d)
{
    return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

/* A device copy of `rows` rows of dim elements (es bytes each) from src at a pitch of
 * pitch_of(dim), the rest of each row 0xff bytes (NaN in fp16 and bf16); src NULL: all 0xff
 * (an output, poisoned). Its host twin (for reading back) in *ret_host. */
static void *pitched_dev(const void *src, int64_t rows, size_t es, int32_t dim, unsigned char **ret_host)
{
    const int64_t pitch = pitch_of(dim);
    const size_t bytes = es * (size_t)rows * pitch;
    unsigned char *h = malloc(bytes);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    memset(h, 0xff, bytes);
    for (int64_t i = 0; src && i < rows; i++)
        memcpy(h + es * (size_t)i * pitch, (const unsigned char *)src + es * (size_t)i * dim, es * dim);
    void *d = gpu_dev_alloc(bytes);
    CUDA_OK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    *ret_host = h;
    return d;
}

/* p's tensor at d as a pitched view (rows pitch_of(head dim) elements apart): the queries'
 * side (Q, O, dO, dQ), or with kside the keys' (K, V, dK, dV). */
static struct attn_tensor pitched_view(void *d, const struct attn_problem *p, int kside)
{
    const int64_t seq = kside ? p->seqlen_k : p->seqlen_q, heads = kside ? p->heads_kv : p->heads_q;
    const int64_t pitch = pitch_of(p->head_dim);
    return (struct attn_tensor){.data = d, .stride = {seq * heads * pitch, heads * pitch, pitch, 1}};
}

/* Read a pitched output back into h: rows whose dim elements differ from dense's, and the
 * bytes written past them (poison changed), added to *wrong and *gaps. */
static void pitched_check(unsigned char *h, const void *d, const void *dense, int64_t rows, size_t es, int32_t dim,
                          int64_t *wrong, int64_t *gaps)
{
    const int64_t pitch = pitch_of(dim);
    CUDA_OK(cudaMemcpy(h, d, es * (size_t)rows * pitch, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < rows; i++) {
        const unsigned char *row = h + es * (size_t)i * pitch;
        *wrong += memcmp(row, (const unsigned char *)dense + es * (size_t)i * dim, es * dim) != 0;
        for (size_t b = es * (size_t)dim; b < es * (size_t)pitch; b++)
            *gaps += row[b] != 0xff;
    }
}

/* A widened head dim runs the kernel of its width (96 and 72 the 128 one, 40 the 64, 200 the
 * 256; 136 too, on copies under TMA as well: the 256 kernel's last 64-column box would lie
 * wholly past its columns): its loads must see zeros past
 * the caller's columns and its stores write those columns only, whatever lies beyond them in
 * the caller's memory. Q, K, V and O as pitched views (rows the width apart), the columns
 * after each row NaN in the inputs and poison in O: O's columns and LSE must be the bytes of
 * the same problem on dense tensors, the gaps untouched, through TMA (no widened copies) and
 * through cp.async (the copies). */
static void test_attn_gpu_widened_head_dims_forward_reads_and_writes_only_their_columns(void)
{
    const struct shape_case cases[] = {
        {2, 200, 130, 4, 2, 96, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 385, 257, 2, 1, 96, DTYPE_F16, SCHED_MASK_CAUSAL},
        {2, 300, 17, 2, 1, 96, DTYPE_BF16, SCHED_MASK_CAUSAL}, /* whole q-tiles see no key */
        {1, 1000, 1000, 2, 2, 96, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {2, 200, 130, 4, 2, 72, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 385, 257, 2, 2, 40, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 300, 300, 2, 1, 136, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 257, 385, 2, 2, 200, DTYPE_BF16, SCHED_MASK_CAUSAL},
    };
    struct cuattn *ca = open_v3();
    if (!ca)
        return;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x9696);
    int bad = 0, paths = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        cuattn__force_no_tma(ca, 1); /* the dense tensors' bytes through the widened copies */
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        CU_ASSERT_EQUAL(cuattn__last_narrow(ca) & 1, 0);
        struct gpu_copy dense;
        gpu_copy_fwd(&dense, &a);
        const int32_t dim = p.head_dim;
        /* under TMA the caller's tensors themselves, except where the 256 kernel's last box
         * would lie wholly past them (136-192) */
        const int narrow = cuattn_kernel_dim(ca, dim) - dim < 64;
        const int64_t rq = a.nq / dim, rk = a.nk / dim;
        unsigned char *h[4];
        void *d[4] = {pitched_dev(a.q, rq, a.es, dim, &h[0]), pitched_dev(a.k, rk, a.es, dim, &h[1]),
                      pitched_dev(a.v, rk, a.es, dim, &h[2]), pitched_dev(NULL, rq, a.es, dim, &h[3])};
        const struct attn_tensor tq = pitched_view(d[0], &p, 0), tk = pitched_view(d[1], &p, 1),
                                 tv = pitched_view(d[2], &p, 1), to = pitched_view(d[3], &p, 0);
        for (int cp = 0; cp < 2; cp++) {
            const size_t lb = sizeof(float) * (size_t)a.nlse;
            CUDA_OK(cudaMemsetAsync(d[3], 0xff, a.es * (size_t)rq * pitch_of(dim), (cudaStream_t)cuattn_stream(ca)));
            CUDA_OK(cudaMemsetAsync(a.d_lse, 0xff, lb, (cudaStream_t)cuattn_stream(ca)));
            cuattn__force_no_tma(ca, cp);
            CU_ASSERT_EQUAL_FATAL(cuattn_forward(ca, &p, NULL, to, a.d_lse, tq, tk, tv, NULL), 0);
            paths += cuattn__last_fwd_tma(ca) != !cp;
            paths += (cuattn__last_narrow(ca) & 1) != (!cp && narrow);
            int64_t wrong = 0, gaps = 0;
            pitched_check(h[3], d[3], dense.data[0], rq, a.es, dim, &wrong, &gaps);
            CUDA_OK(cudaMemcpy(a.lse, a.d_lse, lb, cudaMemcpyDeviceToHost));
            const int lse_bad = memcmp(a.lse, dense.data[1], lb) != 0;
            if (wrong || gaps || lse_bad) {
                fprintf(stderr, "\n  case %zu (head dim %d), %s: %lld rows differ from the dense tensors', %lld gap "
                        "bytes written%s", ci, dim, cp ? "cp.async" : "TMA", (long long)wrong, (long long)gaps, lse_bad ? ", lse differs" : "");
                bad++;
            }
        }
        cuattn__force_no_tma(ca, 0);
        for (int t = 0; t < 4; t++) {
            CUDA_OK(cudaFree(d[t]));
            free(h[t]);
        }
        gpu_copy_free(&dense);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(paths, 0);
    CU_ASSERT_EQUAL(bad, 0);
    cuattn_free(ca);
}

/* The same for the backward: Q, K, V, O, dO as pitched views with NaN past each row's
 * columns, dQ, dK, dV pitched and poisoned; their columns must be the bytes of dense
 * tensors through the widened copies and the gaps untouched - with TMA forced off (the
 * copies) and on (under MHA the 128 kernels on these views for 72-120, no copies; the
 * others copies still). 96, 72, 88, 120 (Dsum's 8-column halves), 80, 40 and 200; MHA and
 * GQA, full and causal, both dtypes, the default schedule and shift. */
static void test_attn_gpu_widened_head_dims_backward_reads_and_writes_only_their_columns(void)
{
    const struct shape_case cases[] = {
        {2, 200, 130, 4, 4, 96, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 385, 257, 2, 2, 96, DTYPE_F16, SCHED_MASK_CAUSAL},
        {2, 300, 17, 2, 2, 96, DTYPE_BF16, SCHED_MASK_CAUSAL}, /* q rows that see no key */
        {1, 1000, 1000, 4, 2, 96, DTYPE_BF16, SCHED_MASK_CAUSAL}, /* GQA */
        {1, 2048, 2048, 2, 2, 96, DTYPE_F16, SCHED_MASK_CAUSAL},
        {2, 200, 130, 4, 4, 72, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 385, 257, 2, 2, 88, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 1000, 1000, 2, 2, 120, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 700, 700, 4, 2, 80, DTYPE_BF16, SCHED_MASK_FULL}, /* GQA */
        {1, 300, 300, 2, 2, 40, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 300, 257, 2, 2, 200, DTYPE_F16, SCHED_MASK_FULL},
    };
    const struct attn_config shift = {SCHED_SHIFT, 0, 0, 0, 0};
    struct cuattn *ca = open_device();
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x96b);
    int bad = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int sc = 0; sc < 2; sc++) {
            struct attn_problem p = problem_of(&cases[ci]);
            const struct attn_config *cfg = sc ? &shift : NULL;
            struct gpu_bufs a;
            gpu_bufs_init(&a, &p, NULL, NULL, &r);
            /* the dense tensors' bytes through the widened copies (no TMA: never narrow) */
            cuattn__force_no_tma(ca, 1);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, cfg, 0, NULL), 0);
            struct gpu_copy dense;
            gpu_copy_bwd(&dense, &a);
            const int32_t dim = p.head_dim;
            const int64_t rq = a.nq / dim, rk = a.nk / dim;
            unsigned char *h[8];
            void *d[8] = {pitched_dev(a.q, rq, a.es, dim, &h[0]),    pitched_dev(a.k, rk, a.es, dim, &h[1]),
                          pitched_dev(a.v, rk, a.es, dim, &h[2]),    pitched_dev(a.out, rq, a.es, dim, &h[3]),
                          pitched_dev(a.dout, rq, a.es, dim, &h[4]), pitched_dev(NULL, rq, a.es, dim, &h[5]),
                          pitched_dev(NULL, rk, a.es, dim, &h[6]),   pitched_dev(NULL, rk, a.es, dim, &h[7])};
            struct attn_tensor t[8];
            for (int i = 0; i < 8; i++) /* K, V, dK, dV on the keys' side */
                t[i] = pitched_view(d[i], &p, i == 1 || i == 2 || i == 6 || i == 7);
            for (int cp = 1; cp >= 0; cp--) { /* the copies, then (MHA) none */
                cuattn__force_no_tma(ca, cp);
                for (int i = 5; i < 8; i++)
                    CUDA_OK(cudaMemsetAsync(d[i], 0xff, a.es * (size_t)(i == 5 ? rq : rk) * pitch_of(dim),
                                            (cudaStream_t)cuattn_stream(ca)));
                CU_ASSERT_EQUAL_FATAL(cuattn_backward(ca, &p, cfg, 0, t[5], t[6], t[7], t[0], t[1], t[2], t[3],
                                                      a.d_lse, t[4], NULL),
                                      0);
                /* on the caller's tensors exactly where v3's MHA backward at width 128 can be */
                const int narrow = !cp && cuattn_impl(ca) == CUATTN_IMPL_WGMMA && p.heads_q == p.heads_kv &&
                                   cuattn_kernel_dim(ca, dim) == 128;
                if (((cuattn__last_narrow(ca) >> 1) & 1) != narrow) {
                    fprintf(stderr, "\n  case %zu (head dim %d)%s: ran %s", ci, dim, sc ? " (shift)" : "",
                            narrow ? "on copies, not the caller's tensors" : "on the caller's tensors");
                    bad++;
                }
                int64_t wrong = 0, gaps = 0;
                pitched_check(h[5], d[5], dense.data[0], rq, a.es, dim, &wrong, &gaps);
                pitched_check(h[6], d[6], dense.data[1], rk, a.es, dim, &wrong, &gaps);
                pitched_check(h[7], d[7], dense.data[2], rk, a.es, dim, &wrong, &gaps);
                if (wrong || gaps) {
                    fprintf(stderr, "\n  case %zu (head dim %d)%s, %s: %lld rows differ from the dense tensors', "
                            "%lld gap bytes written", ci, dim, sc ? " (shift)" : "", cp ? "no TMA" : "TMA", (long long)wrong,
                            (long long)gaps);
                    bad++;
                }
            }
            for (int i = 0; i < 8; i++) {
                CUDA_OK(cudaFree(d[i]));
                free(h[i]);
            }
            gpu_copy_free(&dense);
            gpu_bufs_free(&a);
        }
    CU_ASSERT_EQUAL(bad, 0);
    cuattn_free(ca);
}

/* The test compute-sanitizer runs on v3's forward (scripts/gpu_sanitize.sh): shapes with 3 to
 * 5 kv-tiles, so both stages of both rings are reused (phases wrap), full and causal,
 * both head dims, unequal lengths and a q-tile whose rows see no key; each run with the
 * TMA loads and again with cp.async, each checked against float64 (an unchanged result
 * under a sanitizer is also a right one). Head dim 256 (64-key tiles): 5 kv-tiles. */
static void test_attn_gpu_v3_forward_small_shapes_for_sanitizers(void)
{
    const struct shape_case cases[] = {
        {1, 200, 600, 2, 1, 64, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 130, 400, 2, 2, 128, DTYPE_F16, SCHED_MASK_FULL},
        {1, 300, 130, 2, 1, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 150, 300, 2, 1, 256, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 130, 260, 2, 2, 256, DTYPE_BF16, SCHED_MASK_FULL},
    };
    struct cuattn *ca = open_v3();
    if (!ca)
        return;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x5af3);
    int bad = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        struct refs R;
        memset(&R, 0, sizeof R);
        R.out = malloc(sizeof(double) * (size_t)a.nq);
        R.lse = malloc(sizeof(double) * (size_t)a.nlse);
        CU_ASSERT_FATAL(R.out && R.lse);
        CU_ASSERT_FATAL(ref_forward(&p, gpu_bufs_tq(&a, a.q), gpu_bufs_tk(&a, a.k), gpu_bufs_tk(&a, a.v), R.out, R.lse) == 0);
        for (int cp = 0; cp < 2; cp++) {
            cuattn__force_no_tma(ca, cp);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
            CU_ASSERT_EQUAL(cuattn__last_fwd_tma(ca), !cp);
            double err;
            int lse_bad;
            if (!forward_close(&a, &R, &err, &lse_bad)) {
                fprintf(stderr, "\n  case %zu (%s): rel error %.3g, %d bad lse", ci, cp ? "cp.async" : "TMA", err,
                        lse_bad);
                bad++;
            }
        }
        cuattn__force_no_tma(ca, 0);
        free(R.out);
        free(R.lse);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    cuattn_free(ca);
}

/* The audit's leaves fused into the backward (cuattn_set_leaves): where the kernels hash
 * an output, its leaves are XXH3-64 of each of its rows as copied back, and the digest from
 * them (digest_cuda with the leaves given) is digest_rows() of the host copy and the
 * device's digest read from memory; the outputs' bits are those of a run without leaves.
 * The leaves are poisoned before the run checked. The implementation the suite runs
 * decides which outputs get leaves (dQ on v2/v3, dK and dV on v3 at head dims 64/128 or
 * through GQA's sum), and on sm_90 the MHA shapes at 64 and 128 must have all three, so
 * the check cannot pass by hashing nothing. Odd
 * lengths (partial kv tiles, whose missing rows must write no leaf), GQA, fp16 and bf16,
 * head dims 64, 128, 256, and 96, 80, 40, 200 (never: their kernels see widened rows).
 * Both calls with leaves also ask for the digests folded by the kernels
 * (cuattn_set_digests): where they are (v3, MHA, head dims 64 and 128) each call's equal
 * the host's digests of the outputs (poisoned before each call; the second call finds the
 * block counter the first left), and nowhere else does a call say it folded them. */
static void test_attn_gpu_fused_digest_leaves_are_the_output_rows_hashed(void)
{
    const struct shape_case cases[] = {
        {2, 300, 300, 4, 4, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 190, 450, 4, 4, 64, DTYPE_F16, SCHED_MASK_FULL},
        {2, 257, 257, 8, 2, 128, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 200, 200, 2, 2, 256, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 100, 100, 2, 2, 96, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 130, 130, 2, 2, 80, DTYPE_BF16, SCHED_MASK_CAUSAL}, /* widened: no leaves either */
        {1, 100, 120, 2, 2, 40, DTYPE_F16, SCHED_MASK_FULL},
        {1, 90, 90, 2, 2, 200, DTYPE_BF16, SCHED_MASK_FULL},
    };
    struct cuattn *ca = open_device();
    const int v3 = cuattn_impl(ca) == CUATTN_IMPL_WGMMA;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x1eaf);
    int bad = 0, hashed = 0, folded = 0;
    struct dig3 dig;
    dig3_init(&dig);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        CU_ASSERT_EQUAL_FATAL(cuattn_set_leaves(ca, 0), 0);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, NULL, 0, NULL), 0);
        for (int i = 0; i < 3; i++)
            CU_ASSERT_PTR_NULL(cuattn_leaves(ca, i));
        struct gpu_copy plain;
        gpu_copy_bwd(&plain, &a);
        const int64_t rows[3] = {(int64_t)p.batch * p.seqlen_q * p.heads_q, (int64_t)p.batch * p.seqlen_k * p.heads_kv,
                                 (int64_t)p.batch * p.seqlen_k * p.heads_kv};
        /* once to have the leaves' memory, then again with every leaf poisoned first (the
         * same shape reuses it): a row whose leaf is not written cannot pass */
        const int fold = v3 && p.heads_q == p.heads_kv && (p.head_dim == 64 || p.head_dim == 128);
        CU_ASSERT_EQUAL_FATAL(cuattn_set_leaves(ca, 1), 0);
        CU_ASSERT_EQUAL_FATAL(cuattn_set_digests(ca, dig.out), 0);
        dig3_poison(&dig, ca);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, NULL, 0, NULL), 0);
        CU_ASSERT_EQUAL(cuattn_digested(ca), fold);
        if (cuattn_digested(ca))
            bad += folded_digests_differ(&a, dig.d, "first call");
        const uint64_t *first[3];
        for (int i = 0; i < 3; i++)
            if ((first[i] = cuattn_leaves(ca, i)) != NULL)
                CUDA_OK(cudaMemset((void *)(uintptr_t)first[i], 0xff, sizeof(uint64_t) * (size_t)rows[i]));
        CUDA_OK(cudaDeviceSynchronize()); /* poisoned before the kernels' own stream runs */
        dig3_poison(&dig, ca);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, NULL, 0, NULL), 0);
        CU_ASSERT_EQUAL(cuattn_digested(ca), fold);
        if (cuattn_digested(ca)) {
            bad += folded_digests_differ(&a, dig.d, "second call");
            folded++;
        }
        CU_ASSERT_EQUAL_FATAL(cuattn_set_digests(ca, NULL), 0);
        for (int i = 0; i < 3; i++)
            CU_ASSERT_PTR_EQUAL(cuattn_leaves(ca, i), first[i]);
        CU_ASSERT(gpu_copy_equal(&plain, &a));
        gpu_copy_free(&plain);
        const void *host[3] = {a.dq, a.dk, a.dv};
        void *dev[3] = {a.d_dq, a.d_dk, a.d_dv};
        const size_t row = a.es * (size_t)p.head_dim;
        int got_leaves = 0;
        for (int i = 0; i < 3; i++) {
            const uint64_t *dl = cuattn_leaves(ca, i);
            if (!dl)
                continue;
            got_leaves++;
            uint64_t *hl = malloc(sizeof(uint64_t) * (size_t)rows[i]);
            CU_ASSERT_PTR_NOT_NULL_FATAL(hl);
            CUDA_OK(cudaMemcpy(hl, dl, sizeof(uint64_t) * (size_t)rows[i], cudaMemcpyDeviceToHost));
            for (int64_t k = 0; k < rows[i]; k++)
                if (hl[k] != XXH3_64bits((const unsigned char *)host[i] + (size_t)k * row, row) && bad++ < 5)
                    fprintf(stderr, "\n  case %zu output %d: row %lld's leaf is not its hash", ci, i, (long long)k);
            free(hl);
            /* the digest from the leaves, from memory, and on the host */
            const int64_t seq = i ? p.seqlen_k : p.seqlen_q, heads = i ? p.heads_kv : p.heads_q;
            struct digest_view v[2] = {{dev[i], 4, {p.batch, seq, heads, p.head_dim},
                                        {seq * heads * p.head_dim, heads * p.head_dim, p.head_dim, 1}, 2, dl},
                                       {dev[i], 4, {p.batch, seq, heads, p.head_dim},
                                        {seq * heads * p.head_dim, heads * p.head_dim, p.head_dim, 1}, 2, NULL}};
            const size_t need = digest_cuda_scratch_bytes(v, 2);
            void *scratch = gpu_dev_alloc(need);
            uint64_t *d_out = gpu_dev_alloc(2 * sizeof(uint64_t)), out[2], want = 0;
            CU_ASSERT_EQUAL_FATAL(digest_cuda(v, 2, scratch, need, d_out, cuattn_stream(ca)), 0);
            CUDA_OK(cudaStreamSynchronize((cudaStream_t)cuattn_stream(ca)));
            CUDA_OK(cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost));
            CU_ASSERT_EQUAL(digest_rows(host[i], (uint64_t)rows[i] * row, row, &want), 0);
            CU_ASSERT_EQUAL(out[0], want);
            CU_ASSERT_EQUAL(out[1], want);
            CUDA_OK(cudaFree(scratch));
            CUDA_OK(cudaFree(d_out));
        }
        /* a widened call's kernels would hash their width's rows: its digests come from
         * the caller's outputs in memory */
        const int widened = cuattn_kernel_dim(ca, p.head_dim) != p.head_dim;
        if (widened)
            CU_ASSERT_EQUAL(got_leaves, 0);
        if (v3 && p.heads_q == p.heads_kv && p.head_dim != 256 && !widened)
            CU_ASSERT_EQUAL(got_leaves, 3);
        hashed += got_leaves;
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(hashed > 0 || cuattn_impl(ca) == CUATTN_IMPL_CUDA_CORES);
    CU_ASSERT(folded > 0 || !v3);
    /* out with a NULL entry is refused */
    uint64_t *const half[3] = {dig.out[0], NULL, dig.out[2]};
    CU_ASSERT_EQUAL(cuattn_set_digests(ca, half), -EINVAL);
    CU_ASSERT_EQUAL(cuattn_set_digests(NULL, NULL), -EINVAL);
    (void)cuattn_set_leaves(ca, 0);
    CUDA_OK(cudaFree(dig.d));
    cuattn_free(ca);
}

/* The digests folded by the dQ postprocess (cuattn_set_digests) at large outputs equal the
 * host's digests of the outputs copied back, and the tree kernel's from the same leaves:
 * dQ with 65 supergroups (more than the 32 the last block folds at a time; 4138 groups for
 * a postprocess capped at 16 blocks an SM, so blocks take several groups in turn; a last
 * group of 24 leaves), dK and dV with 67 supergroups (3 words past the root's stripes)
 * where dQ has 2 (more blocks for the kv supergroups than dQ has groups: blocks with no dQ
 * row), and the reverse. Each shape three times, one call between them without digests,
 * the shapes taking turns (other grids): every call finds the block counter at 0. */
static void test_attn_gpu_folded_digests_equal_cpu_at_large_outputs(void)
{
    const struct shape_case cases[] = {
        {4, 1003, 1003, 66, 66, 64, DTYPE_BF16, SCHED_MASK_FULL},
        {1, 130, 8200, 33, 33, 128, DTYPE_F16, SCHED_MASK_CAUSAL},
        {1, 8200, 130, 33, 33, 128, DTYPE_BF16, SCHED_MASK_FULL},
    };
    const int n = (int)(sizeof cases / sizeof cases[0]);
    struct cuattn *ca = open_device();
    if (cuattn_impl(ca) != CUATTN_IMPL_WGMMA) {
        printf("\n    skipped: the digests are folded by v3's backward only (sm_90) ");
        cuattn_free(ca);
        return;
    }
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xf01d);
    struct gpu_bufs a[3];
    for (int ci = 0; ci < n; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        gpu_bufs_init(&a[ci], &p, NULL, NULL, &r);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a[ci], NULL, NULL), 0);
    }
    struct dig3 dig;
    dig3_init(&dig);
    CU_ASSERT_EQUAL_FATAL(cuattn_set_leaves(ca, 1), 0);
    int bad = 0, calls = 0;
    for (int round = 0; round < 3; round++)
        for (int ci = 0; ci < n; ci++) {
            struct gpu_bufs *b = &a[ci];
            char what[64];
            snprintf(what, sizeof what, "case %d round %d", ci, round);
            if (round == 1 && ci == 1) { /* a call that asks for no digests between */
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, b, NULL, 0, NULL), 0);
                CU_ASSERT_EQUAL(cuattn_digested(ca), 0);
            }
            CU_ASSERT_EQUAL_FATAL(cuattn_set_digests(ca, dig.out), 0);
            dig3_poison(&dig, ca);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, b, NULL, 0, NULL), 0);
            CU_ASSERT_EQUAL_FATAL(cuattn_set_digests(ca, NULL), 0);
            int32_t mode = 0, grid = 0;
            cuattn__last_launch(ca, &mode, &grid);
            CU_ASSERT_EQUAL(cuattn_digested(ca), mode != 2); /* persistent: folded */
            if (!cuattn_digested(ca))
                continue;
            calls++;
            bad += folded_digests_differ(b, dig.d, what);
            /* the tree kernel's digests from the same leaves */
            const struct attn_problem *p = &b->p;
            struct digest_view v[3];
            void *dev[3] = {b->d_dq, b->d_dk, b->d_dv};
            for (int i = 0; i < 3; i++) {
                const int64_t seq = i ? p->seqlen_k : p->seqlen_q, heads = i ? p->heads_kv : p->heads_q;
                const struct digest_view x = {dev[i], 4, {p->batch, seq, heads, p->head_dim},
                                              {seq * heads * p->head_dim, heads * p->head_dim, p->head_dim, 1},
                                              2, cuattn_leaves(ca, i)};
                v[i] = x;
            }
            const size_t need = digest_cuda_scratch_bytes(v, 3);
            void *scratch = gpu_dev_alloc(need);
            uint64_t *d_tree = gpu_dev_alloc(3 * sizeof(uint64_t)), tree[3], got[3];
            CU_ASSERT_EQUAL_FATAL(digest_cuda(v, 3, scratch, need, d_tree, cuattn_stream(ca)), 0);
            CUDA_OK(cudaStreamSynchronize((cudaStream_t)cuattn_stream(ca)));
            CUDA_OK(cudaMemcpy(tree, d_tree, sizeof tree, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(got, dig.d, sizeof got, cudaMemcpyDeviceToHost));
            CU_ASSERT(memcmp(tree, got, sizeof got) == 0);
            CUDA_OK(cudaFree(scratch));
            CUDA_OK(cudaFree(d_tree));
        }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(calls > 0);
    (void)cuattn_set_leaves(ca, 0);
    for (int ci = 0; ci < n; ci++)
        gpu_bufs_free(&a[ci]);
    CUDA_OK(cudaFree(dig.d));
    cuattn_free(ca);
}

/* Many units a CTA at one head dim without GQA: each case's backward under every schedule
 * (shift at W 64 and shift_w) and atomic against float64 on the SM count's grid; the
 * deterministic ones' bytes on grids 16, 3 and 1 equal to it; then with the audit's leaves
 * on grids 132 and 1: the same bytes, and every row's leaf (dQ, dK, dV) its hash - dK's
 * and dV's where the launch was persistent (a shift grid below its chunk runs interleaved,
 * whose dK and dV are digested from memory: arm_leaves gives none, -1). *ret_small counts
 * the runs on grids 3 and 1 that were not interleaved. */
static void units_in_a_row_check(const struct shape_case *cases, size_t n_cases, int32_t shift_w, uint64_t seed,
                                 int *ret_small)
{
    const struct {
        enum sched_kind kind;
        int32_t w;
    } runs[] = {{SCHED_ASCENDING, 0}, {SCHED_DESCENDING, 0}, {SCHED_SPT, 0},
                {SCHED_SHIFT, 0},     {SCHED_SHIFT, shift_w}, {SCHED_ATOMIC, 0}};
    const int32_t grids[] = {16, 3, 1}, leaf_grids[] = {132, 1};
    struct cuattn *ca = open_device();
    const int v3 = cuattn_impl(ca) == CUATTN_IMPL_WGMMA;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ seed);
    int bad = 0, mismatches = 0, persistent_small = 0, persistent_leaves = 0;
    for (size_t ci = 0; ci < n_cases; ci++) {
        struct attn_problem p = problem_of(&cases[ci]);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        struct refs R;
        refs_compute(&R, &p, &a);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
            struct attn_config cfg = {runs[ri].kind, runs[ri].w, 0, 0, 0};
            char what[96];
            snprintf(what, sizeof what, "case %zu %s W %d", ci, sched_kind_name(cfg.sched), runs[ri].w);
            CU_ASSERT_EQUAL_FATAL(cuattn_set_leaves(ca, 0), 0);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
            double e[3];
            if (!grads_close(&a, &R, e)) {
                fprintf(stderr, "\n  %s: rel error dq %.3g dk %.3g dv %.3g", what, e[0], e[1], e[2]);
                bad++;
            }
            if (runs[ri].kind == SCHED_ATOMIC)
                continue;
            struct gpu_copy base;
            gpu_copy_bwd(&base, &a);
            for (size_t gi = 0; gi < sizeof grids / sizeof grids[0]; gi++) {
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, grids[gi], NULL), 0);
                int32_t mode = 0;
                cuattn__last_launch(ca, &mode, NULL);
                persistent_small += mode != 2 && grids[gi] <= 3;
                if (!gpu_copy_equal(&base, &a) && mismatches++ < 8)
                    fprintf(stderr, "\n  %s: grid %d differs from the SM count's", what, grids[gi]);
            }
            CU_ASSERT_EQUAL_FATAL(cuattn_set_leaves(ca, 1), 0);
            for (size_t gi = 0; gi < sizeof leaf_grids / sizeof leaf_grids[0]; gi++) {
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, leaf_grids[gi], NULL), 0);
                if (!gpu_copy_equal(&base, &a) && mismatches++ < 8)
                    fprintf(stderr, "\n  %s: grid %d with leaves differs", what, leaf_grids[gi]);
                int32_t mode = 0;
                cuattn__last_launch(ca, &mode, NULL);
                persistent_leaves += mode == 1; /* persistent */
                for (int i = 0; i < 3; i++) {
                    /* v3 at 64 and 128 without GQA hashes all three in the persistent mode */
                    const int64_t nb = leaves_not_row_hashes(ca, &a, i);
                    if (nb > 0 || (v3 && nb < 0 && mode == 1)) {
                        fprintf(stderr, "\n  %s: grid %d output %d: %lld leaves not their row's hash", what,
                                leaf_grids[gi], i, (long long)nb);
                        bad++;
                    }
                }
            }
            gpu_copy_free(&base);
        }
        (void)cuattn_set_leaves(ca, 0);
        refs_free(&R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(mismatches, 0);
    CU_ASSERT(persistent_leaves > 0 || !v3); /* the leaves were checked somewhere */
    cuattn_free(ca);
    *ret_small = persistent_small;
}

/* Head dim 128, where a unit's dK and dV go out by TMA stores while the next unit's K, V
 * and first Q/dO load (bwd_wgmma.cuh's BWD_WG_DKV_LAP): on small grids a CTA runs many units
 * in a row, so every kind of unit end follows another - units of one step (one q-tile over
 * 8 kv-tiles; the last kv-tile of each causal head with seqlen_q > seqlen_k, where ascending
 * and descending drain first), a job's second unit (causal shift's pairs), the next job on
 * another head and batch element, kv-tiles past the keys' end. units_in_a_row_check with
 * shift at W 7. */
static void test_attn_gpu_many_units_a_cta_keep_their_bits_and_leaves(void)
{
    const struct shape_case cases[] = {
        {3, 200, 130, 2, 2, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 64, 1000, 4, 4, 128, DTYPE_F16, SCHED_MASK_FULL},
        {2, 384, 384, 2, 2, 128, DTYPE_BF16, SCHED_MASK_CAUSAL},
    };
    int small;
    units_in_a_row_check(cases, sizeof cases / sizeof cases[0], 7, 0x1a9, &small);
}

/* Head dim 64, where a unit's dK and dV go out by TMA stores staged in the last pair's dS^T
 * tiles while the next unit's K, V and first pair load (attn_bwd_tc.cu's
 * bwd_wg_pair_persistent): every kind of unit end follows another - units of one step (one
 * q-tile over 8 kv-tiles: the pair's tile b missing, its Q and dO zeros), units of one pair
 * (the last kv-tile of a causal head; with seqlen_q > seqlen_k, rows that see no key), a
 * job's second unit (causal shift's pairs), the next job on another head and batch element,
 * kv-tiles past the keys' end (K and V rows zeroed, not copied). units_in_a_row_check with
 * shift at W 3, and some of the runs on grids 3 and 1 persistent: the pair kernel with many
 * units a CTA. */
static void test_attn_gpu_head_dim_64_units_in_a_row_keep_their_bits_and_leaves(void)
{
    const struct shape_case cases[] = {
        {3, 200, 130, 2, 2, 64, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 64, 1000, 4, 4, 64, DTYPE_F16, SCHED_MASK_FULL},
        {2, 384, 384, 2, 2, 64, DTYPE_BF16, SCHED_MASK_CAUSAL},
        {1, 300, 700, 2, 2, 64, DTYPE_BF16, SCHED_MASK_FULL},
    };
    int small;
    units_in_a_row_check(cases, sizeof cases / sizeof cases[0], 3, 0x1a964, &small);
    CU_ASSERT(small > 0);
}

/* ---- long shapes against float64 -------------------------------------------------------- */

/* Query rows a0 .. a0 + r - 1 of a batch-1 problem and the float64 reference of them alone:
 * r queries over the keys they can see - all seqlen_k under a full mask, the first
 * a0 + r + seqlen_k - seqlen_q under the causal mask (bottom-right aligned) - on views into
 * a's host inputs. It is exact for those rows' O, LSE and dQ, and for dK and dV of the last
 * kv keys: every key when the block is the whole problem, the last r under a causal mask
 * when the block holds the last rows (no earlier row sees them); kv is 0 otherwise. So
 * the reference of a 16k problem costs what its blocks cost. The block is computed in
 * pieces of rows (the same sub-problems, smaller) on up to ROW_BLOCK_THREADS threads, the
 * host's cores: single-threaded, the 4096 block alone took 15 s of an EPYC core. dK and dV
 * are the pieces' sums, in piece order. */
struct row_block {
    int32_t a0, r, kv;
    struct refs R; /* out, dq (r, heads_q, D); lse (heads_q, r); dk, dv (keys, heads_kv, D) */
};

#define ROW_BLOCK_THREADS 16
#define ROW_BLOCK_MIN_ROWS 16 /* rows a piece has at least */

/* One piece: rows c0 .. c0 + cr - 1 over their first sk keys (out and dq point into the
 * block's arrays; lse (heads_q, cr), dk and dv (sk keys) are the piece's own). No CUnit
 * call here: the pieces run on threads. */
struct ref_piece {
    const struct gpu_bufs *a;
    int32_t c0, cr, sk;
    double *out, *lse, *dq, *dk, *dv;
    int rc;
};

static void *ref_piece_run(void *arg)
{
    struct ref_piece *w = arg;
    const struct attn_problem *p = &w->a->p;
    struct attn_problem s = *p;
    s.seqlen_q = w->cr;
    s.seqlen_k = w->sk;
    const int32_t D = p->head_dim;
    const size_t at = w->a->es * (size_t)((int64_t)w->c0 * p->heads_q * D);
    const struct attn_tensor q = attn_dense((char *)w->a->q + at, w->cr, p->heads_q, D),
                             dout = attn_dense((char *)w->a->dout + at, w->cr, p->heads_q, D),
                             k = attn_dense(w->a->k, w->sk, p->heads_kv, D),
                             v = attn_dense(w->a->v, w->sk, p->heads_kv, D);
    w->rc = ref_forward(&s, q, k, v, w->out, w->lse);
    if (w->rc == 0)
        w->rc = ref_backward(&s, q, k, v, dout, w->dq, w->dk, w->dv);
    return NULL;
}

/* The keys row i of p sees (the causal mask's prefix, or all). */
static int64_t row_keys(const struct attn_problem *p, int64_t i)
{
    if (p->mask != SCHED_MASK_CAUSAL)
        return p->seqlen_k;
    const int64_t n = i + 1 + (p->seqlen_k - p->seqlen_q);
    return n < 0 ? 0 : n > p->seqlen_k ? p->seqlen_k : n;
}

static void row_block_ref(struct row_block *B, const struct gpu_bufs *a, int32_t a0, int32_t r)
{
    const struct attn_problem *p = &a->p;
    CU_ASSERT_FATAL(p->batch == 1 && a0 >= 0 && r >= 1 && a0 + r <= p->seqlen_q);
    const int32_t sk = p->mask == SCHED_MASK_CAUSAL ? a0 + r + (p->seqlen_k - p->seqlen_q) : p->seqlen_k;
    CU_ASSERT_FATAL(sk >= 1 && sk <= p->seqlen_k);
    B->a0 = a0;
    B->r = r;
    B->kv = a0 == 0 && r == p->seqlen_q                               ? p->seqlen_k
            : p->mask == SCHED_MASK_CAUSAL && a0 + r == p->seqlen_q ? (r < p->seqlen_k ? r : p->seqlen_k)
                                                                      : 0;
    const int32_t D = p->head_dim, H = p->heads_q;
    const int64_t rowq = (int64_t)H * D, nq = (int64_t)r * rowq, rowk = (int64_t)p->heads_kv * D,
                  nk = (int64_t)sk * rowk;
    B->R.out = malloc(sizeof(double) * (size_t)nq);
    B->R.lse = malloc(sizeof(double) * (size_t)H * (size_t)r);
    B->R.dq = malloc(sizeof(double) * (size_t)nq);
    B->R.dk = calloc((size_t)nk, sizeof(double));
    B->R.dv = calloc((size_t)nk, sizeof(double));
    CU_ASSERT_FATAL(B->R.out && B->R.lse && B->R.dq && B->R.dk && B->R.dv);

    /* pieces of about equal work (visible keys); one piece where the block's first row sees
     * no key (a sub-problem of rows that see none has no keys to view) */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t n = cpus < 1 ? 1 : cpus > ROW_BLOCK_THREADS ? ROW_BLOCK_THREADS : (int32_t)cpus;
    if (n > r / ROW_BLOCK_MIN_ROWS)
        n = r / ROW_BLOCK_MIN_ROWS;
    if (n < 1 || row_keys(p, a0) < 1)
        n = 1;
    int64_t work = 0;
    for (int64_t i = a0; i < a0 + r; i++)
        work += row_keys(p, i);
    struct ref_piece w[ROW_BLOCK_THREADS];
    memset(w, 0, sizeof w);
    int32_t c0 = a0, pieces = 0;
    int64_t done = 0;
    for (int32_t t = 0; t < n && c0 < a0 + r; t++) {
        int32_t c1 = c0;
        const int64_t goal = t + 1 == n ? work : work * (t + 1) / n;
        while (c1 < a0 + r && (done < goal || c1 - c0 < ROW_BLOCK_MIN_ROWS))
            done += row_keys(p, c1++);
        if (t + 1 == n || a0 + r - c1 < ROW_BLOCK_MIN_ROWS)
            c1 = a0 + r; /* the rest */
        struct ref_piece *x = &w[pieces++];
        x->a = a;
        x->c0 = c0;
        x->cr = c1 - c0;
        x->sk = p->mask == SCHED_MASK_CAUSAL ? c1 + (p->seqlen_k - p->seqlen_q) : p->seqlen_k;
        x->out = B->R.out + (int64_t)(c0 - a0) * rowq;
        x->dq = B->R.dq + (int64_t)(c0 - a0) * rowq;
        x->lse = malloc(sizeof(double) * (size_t)H * (size_t)x->cr);
        x->dk = malloc(sizeof(double) * (size_t)((int64_t)x->sk * rowk));
        x->dv = malloc(sizeof(double) * (size_t)((int64_t)x->sk * rowk));
        CU_ASSERT_FATAL(x->lse && x->dk && x->dv);
        c0 = c1;
    }
    pthread_t th[ROW_BLOCK_THREADS];
    int started[ROW_BLOCK_THREADS] = {0};
    for (int32_t t = 1; t < pieces; t++) /* piece 0 on this thread */
        started[t] = pthread_create(&th[t], NULL, ref_piece_run, &w[t]) == 0;
    ref_piece_run(&w[0]);
    for (int32_t t = 1; t < pieces; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        else
            ref_piece_run(&w[t]); /* no thread: here */
    }
    int rc = 0;
    for (int32_t t = 0; t < pieces; t++) {
        const struct ref_piece *x = &w[t];
        rc |= x->rc;
        for (int32_t h = 0; h < H; h++)
            memcpy(B->R.lse + (int64_t)h * r + (x->c0 - a0), x->lse + (int64_t)h * x->cr,
                   sizeof(double) * (size_t)x->cr);
        for (int64_t e = 0; e < (int64_t)x->sk * rowk; e++) {
            B->R.dk[e] += x->dk[e];
            B->R.dv[e] += x->dv[e];
        }
        free(x->lse);
        free(x->dk);
        free(x->dv);
    }
    CU_ASSERT_FATAL(rc == 0);
}

/* Elements of n 16-bit values at p that are NaN or infinite: the 0xff poison is NaN, so an
 * element no kernel wrote is one. */
static int64_t nonfinite16(const void *p, enum dtype_kind t, int64_t n)
{
    const uint16_t *e = p, exp = t == DTYPE_F16 ? 0x7c00u : 0x7f80u;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += (e[i] & exp) == exp;
    return bad;
}

/* Every output of a's last forward (grads 0: O and LSE) or backward (dQ, dK, dV) finite -
 * for problems where every row sees a key and every key a row; what is not goes to stderr. */
static int outputs_finite(const struct gpu_bufs *a, int grads, const char *what)
{
    int64_t n[3] = {0, 0, 0};
    if (!grads) {
        n[0] = nonfinite16(a->out, a->p.dtype, a->nq);
        for (int64_t i = 0; i < a->nlse; i++)
            n[1] += !isfinite(a->lse[i]);
    } else {
        n[0] = nonfinite16(a->dq, a->p.dtype, a->nq);
        n[1] = nonfinite16(a->dk, a->p.dtype, a->nk);
        n[2] = nonfinite16(a->dv, a->p.dtype, a->nk);
    }
    if (n[0] + n[1] + n[2] == 0)
        return 1;
    if (grads)
        fprintf(stderr, "\n  %s: %lld dq, %lld dk, %lld dv elements not finite (unwritten?)", what,
                (long long)n[0], (long long)n[1], (long long)n[2]);
    else
        fprintf(stderr, "\n  %s: %lld out, %lld lse elements not finite (unwritten?)", what, (long long)n[0],
                (long long)n[1]);
    return 0;
}

/* Whether a's host outputs hold B's rows within the dtype's tolerance: the forward's (O,
 * and LSE within 1e-4 relative) or the backward's (dQ of the rows, dK and dV of the last
 * B->kv keys); what is off goes to stderr with `what`. */
static int row_block_close(const struct gpu_bufs *a, const struct row_block *B, int grads, const char *what)
{
    const struct attn_problem *p = &a->p;
    const int64_t rowq = (int64_t)p->heads_q * p->head_dim, rowk = (int64_t)p->heads_kv * p->head_dim;
    const size_t at = a->es * (size_t)(B->a0 * rowq);
    const double tol = tolerance(p->dtype);
    if (!grads) {
        const double e = rel_err((const char *)a->out + at, p->dtype, B->R.out, B->r * rowq);
        int lse_bad = 0;
        for (int32_t h = 0; h < p->heads_q; h++)
            for (int32_t i = 0; i < B->r; i++) {
                const double want = B->R.lse[(int64_t)h * B->r + i];
                const float got = a->lse[(int64_t)h * p->seqlen_q + B->a0 + i];
                lse_bad += isinf(want) ? !(isinf(got) && got > 0) : !(fabs(got - want) <= 1e-4 * (1 + fabs(want)));
            }
        if (e < tol && lse_bad == 0)
            return 1;
        fprintf(stderr, "\n  %s, rows %d + %d forward: rel error %.3g (limit %.0g), %d bad lse", what, B->a0, B->r,
                e, tol, lse_bad);
        return 0;
    }
    double e[3] = {rel_err((const char *)a->dq + at, p->dtype, B->R.dq, B->r * rowq), 0.0, 0.0};
    if (B->kv > 0) { /* the last kv keys: the reference's own last rows */
        const int32_t sk = p->mask == SCHED_MASK_CAUSAL ? B->a0 + B->r + (p->seqlen_k - p->seqlen_q) : p->seqlen_k;
        const size_t got = a->es * (size_t)((int64_t)(p->seqlen_k - B->kv) * rowk);
        const int64_t want = (int64_t)(sk - B->kv) * rowk;
        e[1] = rel_err((const char *)a->dk + got, p->dtype, B->R.dk + want, B->kv * rowk);
        e[2] = rel_err((const char *)a->dv + got, p->dtype, B->R.dv + want, B->kv * rowk);
    }
    if (e[0] < tol && e[1] < tol && e[2] < tol)
        return 1;
    fprintf(stderr, "\n  %s, rows %d + %d (last %d keys): rel error dq %.3g dk %.3g dv %.3g (limit %.0g)", what,
            B->a0, B->r, B->kv, e[0], e[1], e[2], tol);
    return 0;
}

/* Long shapes against float64, into poisoned outputs: 4096 causal at head dim 64 with GQA
 * 2:1 (v3's pair kernel on sm_90: 64 q-tiles a unit at most, the last kv-tile's unit one
 * pair) with the reference whole; 16000 queries over 16411 keys (odd lengths,
 * seqlen_q != seqlen_k, 129 kv-tiles) causal at head dim 128 with GQA 2:1, on its first
 * rows, 96 rows mid-way and its last 64 rows with the last 64 keys' dK and dV (row_block_ref);
 * 16384 full at head dim 64 on two blocks of rows. The forward (and its bytes on a repeat)
 * and every schedule's backward (shift at W 64 and 7, atomic); then each deterministic
 * schedule's bytes again: at 4096 20 times over grids 132, 114, 78, 16 and 1 in turn, at
 * 16000 once on each, and then once in the interleaved mode forced on 5 CTAs (on sm_90 at
 * head dim 64: the one-tile step against the pair kernel). Every output element must be
 * finite (every row sees a key, every key a row), the rows outside the blocks too. The
 * float64 reference is the test's cost: about 21 s of one EPYC core, on row pieces over
 * the host's cores (row_block_ref). */
static void test_attn_gpu_long_shapes_match_float64_reference_and_repeat_their_bits(void)
{
    const struct {
        struct shape_case c;
        int32_t blocks[3][2]; /* (first row, rows); rows 0: no more */
        size_t runs; /* of each deterministic schedule after its first: grids in turn, the last interleaved */
    } cases[] = {
        {{1, 4096, 4096, 2, 1, 64, DTYPE_F16, SCHED_MASK_CAUSAL}, {{0, 4096}}, 21},
        {{1, 16000, 16411, 2, 1, 128, DTYPE_BF16, SCHED_MASK_CAUSAL}, {{0, 100}, {7777, 96}, {15936, 64}}, 6},
        {{1, 16384, 16384, 1, 1, 64, DTYPE_BF16, SCHED_MASK_FULL}, {{3001, 64}, {16320, 64}}, 0},
    };
    const enum sched_kind kinds[] = {SCHED_ATOMIC, SCHED_ASCENDING, SCHED_DESCENDING,
                                     SCHED_SPT,    SCHED_SHIFT,     SCHED_SHIFT};
    const int32_t grids[] = {132, 114, 78, 16, 1};
    struct cuattn *ca = open_device();
    const int v3 = cuattn_impl(ca) == CUATTN_IMPL_WGMMA;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x16c4);
    int bad = 0, mismatches = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct attn_problem p = problem_of(&cases[ci].c);
        struct gpu_bufs a;
        gpu_bufs_init(&a, &p, NULL, NULL, &r);
        struct row_block blk[3];
        int nb = 0;
        for (; nb < 3 && cases[ci].blocks[nb][1] > 0; nb++)
            row_block_ref(&blk[nb], &a, cases[ci].blocks[nb][0], cases[ci].blocks[nb][1]);
        char what[96];
        snprintf(what, sizeof what, "case %zu (%d x %d, d %d, %s)", ci, p.seqlen_q, p.seqlen_k, p.head_dim,
                 p.mask == SCHED_MASK_CAUSAL ? "causal" : "full");
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        bad += !outputs_finite(&a, 0, what); /* the rows the blocks leave out too */
        for (int b = 0; b < nb; b++)
            bad += !row_block_close(&a, &blk[b], 0, what);
        struct gpu_copy fwd;
        gpu_copy_fwd(&fwd, &a);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(ca, &a, NULL, NULL), 0);
        if (!gpu_copy_equal(&fwd, &a) && mismatches++ < 8)
            fprintf(stderr, "\n  %s: the forward's repeat differs", what);
        gpu_copy_free(&fwd);
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            const int32_t w = k + 1 == sizeof kinds / sizeof kinds[0] ? 7 : SCHED_W_DEFAULT;
            struct attn_config cfg = {kinds[k], w, 0, 0, 0};
            char sw[160];
            snprintf(sw, sizeof sw, "%s %s W %d", what, sched_kind_name(kinds[k]), w);
            cuattn__force_interleaved(ca, 0);
            CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, 0, NULL), 0);
            if (v3)
                CU_ASSERT_EQUAL(cuattn__last_wg(ca), 1);
            bad += !outputs_finite(&a, 1, sw);
            for (int b = 0; b < nb; b++)
                bad += !row_block_close(&a, &blk[b], 1, sw);
            if (!cases[ci].runs || kinds[k] == SCHED_ATOMIC)
                continue;
            struct gpu_copy base;
            gpu_copy_bwd(&base, &a);
            for (size_t ri = 0; ri < cases[ci].runs; ri++) {
                const int inter = ri + 1 == cases[ci].runs;
                const int32_t grid = inter ? 5 : grids[ri % (sizeof grids / sizeof grids[0])];
                cuattn__force_interleaved(ca, inter);
                CU_ASSERT_EQUAL_FATAL(gpu_bufs_backward(ca, &a, &cfg, grid, NULL), 0);
                int32_t mode = 0, used_grid = 0;
                cuattn__last_launch(ca, &mode, &used_grid);
                CU_ASSERT(!inter || mode == 2);
                if (!gpu_copy_equal(&base, &a) && mismatches++ < 8)
                    fprintf(stderr, "\n  %s: run %zu grid %d (%s, %d CTAs) differs", sw, ri, grid,
                            mode == 2 ? "interleaved" : "persistent", used_grid);
            }
            cuattn__force_interleaved(ca, 0);
            gpu_copy_free(&base);
        }
        for (int b = 0; b < nb; b++)
            refs_free(&blk[b].R);
        gpu_bufs_free(&a);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(mismatches, 0);
    cuattn_free(ca);
}

int suite_gpu_attn(void)
{
    CU_pSuite s = CU_add_suite("gpu_attn", NULL, NULL);
    if (!s)
        return -1;
    if (!CU_add_test(s, "test_attn_gpu_matches_float64_reference_for_every_schedule",
                     test_attn_gpu_matches_float64_reference_for_every_schedule) ||
        !CU_add_test(s, "test_attn_gpu_widened_head_dims_backward_reads_and_writes_only_their_columns",
                     test_attn_gpu_widened_head_dims_backward_reads_and_writes_only_their_columns) ||
        !CU_add_test(s, "test_attn_gpu_backward_repeats_are_bitwise_equal",
                     test_attn_gpu_backward_repeats_are_bitwise_equal) ||
        !CU_add_test(s, "test_attn_gpu_backward_bits_do_not_depend_on_grid",
                     test_attn_gpu_backward_bits_do_not_depend_on_grid) ||
        !CU_add_test(s, "test_attn_gpu_atomic_is_close_to_reference",
                     test_attn_gpu_atomic_is_close_to_reference) ||
        !CU_add_test(s, "test_attn_gpu_strided_views_give_same_bits",
                     test_attn_gpu_strided_views_give_same_bits) ||
        !CU_add_test(s, "test_attn_gpu_both_impls_match_reference_and_v2_bits_repeat",
                     test_attn_gpu_both_impls_match_reference_and_v2_bits_repeat) ||
        !CU_add_test(s, "test_attn_gpu_head_dims_96_256_run_v1_with_grid_independent_bits",
                     test_attn_gpu_head_dims_96_256_run_v1_with_grid_independent_bits) ||
        !CU_add_test(s, "test_attn_gpu_other_head_dims_run_widened_and_match_float64",
                     test_attn_gpu_other_head_dims_run_widened_and_match_float64) ||
        !CU_add_test(s, "test_attn_gpu_v3_head_dim_256_backward_matches_float64_with_grid_independent_bits",
                     test_attn_gpu_v3_head_dim_256_backward_matches_float64_with_grid_independent_bits) ||
        !CU_add_test(s, "test_attn_gpu_v3_backward_needs_no_zeroed_scratch", test_attn_gpu_v3_backward_needs_no_zeroed_scratch) ||
        !CU_add_test(s, "test_attn_gpu_small_shapes_for_sanitizers",
                     test_attn_gpu_small_shapes_for_sanitizers) ||
        !CU_add_test(s, "test_attn_gpu_smaller_gpus_run_v2_or_v1", test_attn_gpu_smaller_gpus_run_v2_or_v1) ||
        !CU_add_test(s, "test_attn_gpu_rejects_bad_arguments_and_reports_config",
                     test_attn_gpu_rejects_bad_arguments_and_reports_config) ||
        !CU_add_test(s, "test_attn_gpu_fused_digest_leaves_are_the_output_rows_hashed",
                     test_attn_gpu_fused_digest_leaves_are_the_output_rows_hashed) ||
        !CU_add_test(s, "test_attn_gpu_folded_digests_equal_cpu_at_large_outputs",
                     test_attn_gpu_folded_digests_equal_cpu_at_large_outputs) ||
        !CU_add_test(s, "test_attn_gpu_many_units_a_cta_keep_their_bits_and_leaves",
                     test_attn_gpu_many_units_a_cta_keep_their_bits_and_leaves) ||
        !CU_add_test(s, "test_attn_gpu_head_dim_64_units_in_a_row_keep_their_bits_and_leaves",
                     test_attn_gpu_head_dim_64_units_in_a_row_keep_their_bits_and_leaves) ||
        !CU_add_test(s, "test_attn_gpu_long_shapes_match_float64_reference_and_repeat_their_bits",
                     test_attn_gpu_long_shapes_match_float64_reference_and_repeat_their_bits))
        return -1;
    CU_pSuite f = CU_add_suite("gpu_attn_fwd", NULL, NULL);
    if (!f ||
        !CU_add_test(f, "test_attn_gpu_v3_forward_matches_float64_reference_and_repeats_its_bits",
                     test_attn_gpu_v3_forward_matches_float64_reference_and_repeats_its_bits) ||
        !CU_add_test(f, "test_attn_gpu_v3_forward_bits_do_not_depend_on_strides",
                     test_attn_gpu_v3_forward_bits_do_not_depend_on_strides) ||
        !CU_add_test(f, "test_attn_gpu_v3_forward_tma_and_cp_async_loads_give_identical_bits",
                     test_attn_gpu_v3_forward_tma_and_cp_async_loads_give_identical_bits) ||
        !CU_add_test(f, "test_attn_gpu_widened_head_dims_forward_reads_and_writes_only_their_columns",
                     test_attn_gpu_widened_head_dims_forward_reads_and_writes_only_their_columns) ||
        !CU_add_test(f, "test_attn_gpu_v3_forward_persistent_ctas_give_the_same_bits",
                     test_attn_gpu_v3_forward_persistent_ctas_give_the_same_bits) ||
        !CU_add_test(f, "test_attn_gpu_v3_forward_two_and_three_consumers_give_the_same_bits_at_64",
                     test_attn_gpu_v3_forward_two_and_three_consumers_give_the_same_bits_at_64) ||
        !CU_add_test(f, "test_attn_gpu_v3_forward_idle_consumers_and_turned_rounds_keep_the_bits",
                     test_attn_gpu_v3_forward_idle_consumers_and_turned_rounds_keep_the_bits) ||
        !CU_add_test(f, "test_attn_gpu_v3_forward_small_shapes_for_sanitizers",
                     test_attn_gpu_v3_forward_small_shapes_for_sanitizers))
        return -1;
    return 0;
}
