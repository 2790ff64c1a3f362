// SPDX-License-Identifier: BSD-3-Clause
/*
 * fwd_tc.cuh - v2's forward (attn_fwd_tc.cu describes it): its shared memory, loads, online
 * softmax and the work of one CTA, as templates. attn_fwd_tc.cu instantiates the dense
 * kernel (VL false); attn_vl.cu the kernel for windows, softcap and packed batches (VL
 * true), in a file of its own because it compiles the schedule's band arithmetic into
 * device code (SCHED_DEVICE_BAND, kernels/sched/sched.h). The dense instantiation is the
 * code it was before the VL branches existed (every VL branch is `if constexpr`).
 */
#ifndef DASH_KERNELS_CUDA_FWD_TC_CUH
#define DASH_KERNELS_CUDA_FWD_TC_CUH

#include "kernels/cuda/attn_cuda_int.h"

#include <math.h>

#define FWD_TC_THREADS 128
#define FWD_TC_WARPS (FWD_TC_THREADS / 32)
#define FWD_TC_BM 128 /* q rows per CTA: two 16-row m-tiles per warp */
#define FWD_TC_BN ATTN_BN /* kv rows per tile: the 64 the bits are defined by */

template <int D>
struct fwd_tc_smem {
    uint16_t q_smem[FWD_TC_BM * attn_tc_ld<D>::v];    /* (128, D + 8) Q tile */
    uint16_t k_smem[2][FWD_TC_BN * attn_tc_ld<D>::v]; /* (2, 64, D + 8) K tiles n, n + 1 */
    uint16_t v_smem[2][FWD_TC_BN * attn_tc_ld<D>::v]; /* (2, 64, D + 8) V tiles n, n + 1 */
};

/* attn_vl.cu's kernels only: the window and softcap terms of one kv-tile. A row i of the
 * q-tile sees tile column j iff j <= diag + i (wr >= 0) and j >= lo + i (wl >= 0); with a
 * softcap (cap2 > 0) the base-2 score is cap2 tanh(capsc q.k), cap2 = cap log2(e),
 * capsc = scale / cap. */
struct fwd_vl_terms {
    int32_t wl, wr;
    int64_t lo;
    float cap2, capsc;
};

/* Start the copy of K and V tile n of (b, hk) into buffer `buf`; the caller commits. */
template <int D>
static __device__ __forceinline__ void fwd_tc_load_kv(const struct attn_fwd_params &p, fwd_tc_smem<D> &sm,
                                                      int32_t buf, int32_t b, int32_t hk, int32_t n)
{
    const int32_t j0 = n * FWD_TC_BN, rn = p.seqlen_k - j0 < FWD_TC_BN ? p.seqlen_k - j0 : FWD_TC_BN;
    attn_tc_load_tile<D>(sm.k_smem[buf], static_cast<const uint16_t *>(p.k),
                         b * p.k_stride[0] + (int64_t)j0 * p.k_stride[1] + hk * p.k_stride[2],
                         p.k_stride[1], rn, FWD_TC_THREADS);
    attn_tc_load_tile<D>(sm.v_smem[buf], static_cast<const uint16_t *>(p.v),
                         b * p.v_stride[0] + (int64_t)j0 * p.v_stride[1] + hk * p.v_stride[2],
                         p.v_stride[1], rn, FWD_TC_THREADS);
}

/* The online-softmax update of one kv-tile for the thread's four rows (mt, r), in place:
 * S (raw scores) becomes P = 2^(S2 - m'), m, l advance, corr = 2^(m - m'). MASK: test each
 * element against Sq, Sk and the causal diagonal; false only where every element is
 * visible, where both versions compute the same values. */
template <bool MASK, bool VL = false>
static __device__ __forceinline__ void fwd_tc_softmax(float (&s_reg)[2][8][4], float (&m_reg)[2][2],
                                                      float (&l_reg)[2][2], float (&corr_reg)[2][2],
                                                      float scale2, int32_t warp, int32_t g, int32_t t4,
                                                      int32_t rm, int32_t rn, int causal, int64_t diag,
                                                      const struct fwd_vl_terms *vt = NULL)
{
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int32_t i = 32 * warp + 16 * mt + g + 8 * r;
            const int64_t last = diag + i; /* last visible j in the tile */
            float tmax = -INFINITY;
#pragma unroll
            for (int t = 0; t < 8; t++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int32_t j = 8 * t + 2 * t4 + e;
                    float sv;
                    if constexpr (VL) {
                        /* window: diag is the right side's (wr >= 0), lo the left side's */
                        const bool vis = !MASK || (i < rm && j < rn && (vt->wr < 0 || j <= last) &&
                                                   (vt->wl < 0 || j >= vt->lo + i));
                        const float x = s_reg[mt][t][2 * r + e];
                        sv = !vis ? -INFINITY
                             : vt->cap2 > 0.0f ? __fmul_rn(tanhf(__fmul_rn(x, vt->capsc)), vt->cap2)
                                               : __fmul_rn(x, scale2);
                    } else {
                        const bool vis = !MASK || (i < rm && j < rn && (!causal || j <= last));
                        sv = vis ? __fmul_rn(s_reg[mt][t][2 * r + e], scale2) : -INFINITY;
                    }
                    s_reg[mt][t][2 * r + e] = sv;
                    tmax = fmaxf(tmax, sv);
                }
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
            const float mx = fmaxf(m_reg[mt][r], tmax);
            float rsum = 0.0f;
            if (mx == -INFINITY) { /* the row has seen no key yet: nothing to add */
                corr_reg[mt][r] = 1.0f;
#pragma unroll
                for (int t = 0; t < 8; t++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        s_reg[mt][t][2 * r + e] = 0.0f;
            } else {
                corr_reg[mt][r] = attn_ex2(__fsub_rn(m_reg[mt][r], mx)); /* 0 when m was -inf */
#pragma unroll
                for (int t = 0; t < 8; t++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const float sv = s_reg[mt][t][2 * r + e];
                        const float pv = attn_ex2(__fsub_rn(sv, mx)); /* masked: 2^-inf = 0 */
                        s_reg[mt][t][2 * r + e] = pv;
                        rsum = __fadd_rn(rsum, pv);
                    }
            }
            rsum = __fadd_rn(rsum, __shfl_xor_sync(0xffffffffu, rsum, 1));
            rsum = __fadd_rn(rsum, __shfl_xor_sync(0xffffffffu, rsum, 2));
            l_reg[mt][r] = fmaf(l_reg[mt][r], corr_reg[mt][r], rsum);
            m_reg[mt][r] = mx;
        }
}

/* The work of one CTA: 128-row q-tile m of head bh (batch * heads_q + head). VL (attn_vl.cu,
 * which compiles the schedule's band arithmetic into device code): p describes one
 * sequence - a batch of 1 whose tensors start at its first rows, lse rows lse_stride apart,
 * geo its own 64 x 64 geometry with its normalised window (wl, wr), seqlen_k 0 if it has no
 * key - and the window and softcap apply. */
template <typename DT, int D, bool VL>
static __device__ __forceinline__ void fwd_tc_body(const struct attn_fwd_params &p, fwd_tc_smem<D> &sm,
                                                   int32_t m, int32_t bh)
{
    const int32_t LD = attn_tc_ld<D>::v;
    const int32_t NT = D / 8; /* n-tiles of O per m-tile */
    const int32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t g = lane >> 2, t4 = lane & 3;
    const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q, hk = h / p.group;
    const int32_t i0 = m * FWD_TC_BM;
    const int32_t rm = p.seqlen_q - i0 < FWD_TC_BM ? p.seqlen_q - i0 : FWD_TC_BM;
    const int64_t offset = (int64_t)p.seqlen_k - p.seqlen_q; /* causal: key j <= i + offset */
    const int causal = p.geo.mask == SCHED_MASK_CAUSAL;
    const float scale2 = __fmul_rn(p.scale, ATTN_LOG2E); /* scores in base 2 */

    /* kv-tiles of the 64-row q-tile that holds the last row, which sees the most keys */
    int32_t n_lo = sched_n_lo(&p.geo, (i0 + rm - 1) / ATTN_BM);
    int32_t n_hi = sched_n_hi(&p.geo, (i0 + rm - 1) / ATTN_BM);
    [[maybe_unused]] struct fwd_vl_terms vt;
    if constexpr (VL) {
        /* a band: from the first 64-row tile's first kv-tile (n_lo never decreases with m) */
        n_lo = sched_n_lo(&p.geo, i0 / ATTN_BM);
        if (p.seqlen_k == 0 || n_hi < n_lo)
            n_hi = n_lo;
        vt.wl = p.geo.wl;
        vt.wr = p.geo.wr;
        vt.cap2 = p.softcap > 0.0f ? __fmul_rn(p.softcap, ATTN_LOG2E) : 0.0f;
        vt.capsc = p.softcap > 0.0f ? __fdiv_rn(p.scale, p.softcap) : 0.0f;
    }
    attn_tc_load_tile<D, FWD_TC_BM>(sm.q_smem, static_cast<const uint16_t *>(p.q),
                                    b * p.q_stride[0] + (int64_t)i0 * p.q_stride[1] + h * p.q_stride[2],
                                    p.q_stride[1], rm, FWD_TC_THREADS);
    if (n_lo < n_hi)
        fwd_tc_load_kv<D>(p, sm, 0, b, hk, n_lo);
    attn_cp_async_commit();

    /* this thread's rows: 32 warp + 16 mt + g + 8 r */
    float o_reg[2][NT][4];
    float m_reg[2][2], l_reg[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            m_reg[mt][r] = -INFINITY;
            l_reg[mt][r] = 0.0f;
        }
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                o_reg[mt][t][e] = 0.0f;
    }

    const int32_t xr = attn_ldsm_x_row(lane), xc = attn_ldsm_x_col(lane);
    const int32_t yr = attn_ldsm_y_row(lane), yc = attn_ldsm_y_col(lane);

    for (int32_t n = n_lo; n < n_hi; n++) {
        const int32_t buf = (n - n_lo) & 1;
        const int32_t j0 = n * FWD_TC_BN;
        const int32_t rn = p.seqlen_k - j0 < FWD_TC_BN ? p.seqlen_k - j0 : FWD_TC_BN;
        const bool more = n + 1 < n_hi;
        if (more) { /* tile n + 1 is in flight while tile n computes */
            fwd_tc_load_kv<D>(p, sm, buf ^ 1, b, hk, n + 1);
            attn_cp_async_commit();
            attn_cp_async_wait<1>();
        } else {
            attn_cp_async_wait<0>();
        }
        __syncthreads(); /* K(n), V(n) (and Q) have landed for everyone */
        const uint16_t *k_smem = sm.k_smem[buf], *v_smem = sm.v_smem[buf];

        /* S = Q K^T: warp rows 32 warp .. +32, all 64 columns; d ascending */
        float s_reg[2][8][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int t = 0; t < 8; t++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s_reg[mt][t][e] = 0.0f;
#pragma unroll
        for (int32_t kk = 0; kk < D / 16; kk++) {
            uint32_t a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
                attn_ldsm_x4(a[mt], sm.q_smem + (32 * warp + 16 * mt + xr) * LD + 16 * kk + xc);
#pragma unroll
            for (int nb = 0; nb < 4; nb++) {
                uint32_t bk[4];
                attn_ldsm_x4(bk, k_smem + (16 * nb + yr) * LD + 16 * kk + yc);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    DT::mma(s_reg[mt][2 * nb], a[mt], bk[0], bk[1]);
                    DT::mma(s_reg[mt][2 * nb + 1], a[mt], bk[2], bk[3]);
                }
            }
        }

        /* online softmax, four rows per thread; the 4 lanes of a row agree on m and l.
         * Masks only where some element of the tile is hidden. */
        float corr_reg[2][2];
        if constexpr (VL) {
            const int64_t diag = (int64_t)i0 + offset + (vt.wr > 0 ? vt.wr : 0) - j0;
            vt.lo = (int64_t)i0 + offset - vt.wl - j0; /* row i sees j >= lo + i (wl >= 0) */
            const bool whole = rm == FWD_TC_BM && rn == FWD_TC_BN && (vt.wr < 0 || diag >= FWD_TC_BN - 1) &&
                               (vt.wl < 0 || vt.lo + FWD_TC_BM - 1 <= 0);
            if (whole)
                fwd_tc_softmax<false, true>(s_reg, m_reg, l_reg, corr_reg, scale2, warp, g, t4, rm, rn, 0, diag,
                                            &vt);
            else
                fwd_tc_softmax<true, true>(s_reg, m_reg, l_reg, corr_reg, scale2, warp, g, t4, rm, rn, 0, diag,
                                           &vt);
        } else {
        const int64_t diag = (int64_t)i0 + offset - j0; /* row i sees j <= diag + i */
        const bool whole = rm == FWD_TC_BM && rn == FWD_TC_BN && (!causal || diag >= FWD_TC_BN - 1);
        if (whole)
            fwd_tc_softmax<false>(s_reg, m_reg, l_reg, corr_reg, scale2, warp, g, t4, rm, rn, causal, diag);
        else
            fwd_tc_softmax<true>(s_reg, m_reg, l_reg, corr_reg, scale2, warp, g, t4, rm, rn, causal, diag);
        }

        /* O = O corr + P V, j ascending in k16 steps */
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                o_reg[mt][t][0] = __fmul_rn(o_reg[mt][t][0], corr_reg[mt][0]);
                o_reg[mt][t][1] = __fmul_rn(o_reg[mt][t][1], corr_reg[mt][0]);
                o_reg[mt][t][2] = __fmul_rn(o_reg[mt][t][2], corr_reg[mt][1]);
                o_reg[mt][t][3] = __fmul_rn(o_reg[mt][t][3], corr_reg[mt][1]);
            }
#pragma unroll
        for (int32_t kk = 0; kk < FWD_TC_BN / 16; kk++) {
            uint32_t a[2][4]; /* P rows (g, g+8) of each m-tile, columns 16 kk + (2 t4, 2 t4 + 8) */
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                a[mt][0] = DT::pack2(s_reg[mt][2 * kk][0], s_reg[mt][2 * kk][1]);
                a[mt][1] = DT::pack2(s_reg[mt][2 * kk][2], s_reg[mt][2 * kk][3]);
                a[mt][2] = DT::pack2(s_reg[mt][2 * kk + 1][0], s_reg[mt][2 * kk + 1][1]);
                a[mt][3] = DT::pack2(s_reg[mt][2 * kk + 1][2], s_reg[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int nb = 0; nb < D / 16; nb++) {
                uint32_t bv[4];
                attn_ldsm_x4_t(bv, v_smem + (16 * kk + xr) * LD + 16 * nb + xc);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    DT::mma(o_reg[mt][2 * nb], a[mt], bv[0], bv[1]);
                    DT::mma(o_reg[mt][2 * nb + 1], a[mt], bv[2], bv[3]);
                }
            }
        }
        __syncthreads(); /* every warp is done reading K(n), V(n) before tile n + 2 overwrites them */
    }
    attn_cp_async_wait<0>(); /* an empty range still issued the Q copy: let it land */

    uint16_t *out_g = static_cast<uint16_t *>(p.out);
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int32_t i = 32 * warp + 16 * mt + g + 8 * r;
            if (i >= rm)
                continue;
            const int64_t at = b * p.out_stride[0] + (int64_t)(i0 + i) * p.out_stride[1] + h * p.out_stride[2];
            const bool none = l_reg[mt][r] == 0.0f; /* the row sees no key */
            const float inv = none ? 0.0f : __frcp_rn(l_reg[mt][r]);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int32_t d = 8 * t + 2 * t4;
                attn_st_pair(out_g + at + d,
                             DT::pack2(none ? 0.0f : __fmul_rn(o_reg[mt][t][2 * r], inv),
                                       none ? 0.0f : __fmul_rn(o_reg[mt][t][2 * r + 1], inv)));
            }
            if (t4 == 0)
                p.lse[(int64_t)bh * (VL ? p.lse_stride : p.seqlen_q) + i0 + i] =
                    none ? INFINITY : fmaf(m_reg[mt][r], ATTN_LN2, logf(l_reg[mt][r]));
        }
}

#endif
