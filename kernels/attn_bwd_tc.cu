/*
 * attn_bwd_tc.cu - v2 of the backward kernels: the five products of a step on tensor cores
 * (mma.sync m16n8k16, fp16/bf16 inputs, fp32 accumulators), with everything else as in
 * attn_bwd.cu (v1): the same schedules and ranks (kernels/sched.h), the same 64 x 64
 * tiles, dQ tile counters and release sequence, the same persistent and interleaved modes
 * sharing one step function, the same scratch, GQA handling and outputs.
 *
 *   attn_bwd_tc_preprocess_kernel   Dsum_i = rowsum(dO o O), formed by the very mma.sync
 *                                   chain that forms dP = dO V^T (see below).
 *   attn_bwd_tc_{persistent,interleaved}_kernel
 *                                   the units, in the schedule's order. Per step (unit
 *                                   (bh, n) against q-tile m):
 *                                       S = Q K^T, dP = dO V^T                (fp32)
 *                                       P = 2^(log2(e) (scale S - LSE)), 0 where masked
 *                                       dS = P o (dP - Dsum)                  (fp32)
 *                                       P, dS rounded to the input dtype -> shared memory
 *                                       dV += P^T dO,  dK += dS^T Q,  dQp = dS K
 *                                   and dQp is added into dQacc[m] when counter[m] == rank.
 *   attn_bwd_tc_postprocess_kernel  dQ = scale dQacc, rounded to the input dtype.
 *   attn_bwd_tc_dkv_sum_kernel      GQA: dK, dV of a kv head = sum over its q-heads, ascending.
 *
 * Rounding P and dS to fp16/bf16 before the three products that take them is what
 * FlashAttention 2 and 3 do; it is the one place v2 rounds an intermediate that v1 keeps
 * in fp32. The sums themselves accumulate in fp32 (dS is formed from the fp32 P and dP).
 *
 * Warps and fragments (256 threads = 8 warps; warp w: wm = w % 4, wn = w / 4; layouts of
 * the fragments in attn_cuda_int.h):
 *   S, dP (64 x 64):      warp owns rows 16 wm .. +16, columns 32 wn .. +32: 4 n-tiles
 *                         of C fragments each; k = d, D/16 steps. Q, dO by ldmatrix (A),
 *                         K, V by ldmatrix (B, n-major).
 *   dV, dK (64 x D):      warp owns kv rows 16 wm .. +16, columns D/2 wn .. +D/2: D/16
 *                         n-tiles each (D/4 floats per thread); k = i, 4 steps. P^T, dS^T
 *                         by ldmatrix.trans from P, dS (A); dO, Q by ldmatrix.trans (B).
 *   dQp (64 x D):         warp owns q rows 16 wm .. +16, columns D/2 wn .. +D/2; k = j,
 *                         4 steps. dS by ldmatrix (A), K by ldmatrix.trans (B).
 * dK, dV and the pending dQ partial are D/4 floats each per thread, as in v1, so the
 * interleaved mode's register scratch has v1's size.
 *
 * Shared memory: K, V of the unit; Q, dO, LSE, Dsum double-buffered; P, dS (64, 72)
 * 16-bit: 121 KB at D = 128, 73 KB at D = 64. Registers (ptxas, sm_90a): 240 (persistent)
 * and 241 (interleaved) at D = 128, 183 and 180 at D = 64, no spills: one CTA of 8 warps
 * per SM either way. The persistent mode prefetches the next step's Q, dO, LSE and Dsum
 * with cp.async into the other buffer while the step computes and while it waits for its
 * dQ turn. A prefetch changes when bytes arrive, never which bytes: the interleaved mode,
 * which never prefetches, computes on the same values.
 *
 * Determinism. Every element of every product is one chain of mma.sync over its k in
 * ascending k16 steps, each mma a fixed function of its fragments and accumulator; dK and
 * dV chain across the unit's steps in visit order; P, dS and the row terms are elementwise.
 * dQ tiles are summed in rank order exactly as in v1: thread 0 waits (acquire) for the
 * counter to equal the rank, the CTA adds its partial with fp32 reductions at L2 (the turn
 * is exclusive, so the additions into each element happen one after another, in rank
 * order), every thread fences, the CTA meets at a barrier, thread 0 fences and
 * release-stores rank + 1. Nothing depends on which CTA runs what or when, so the bits do
 * not depend on the grid or the mode.
 *
 * Dsum and exact zeros. Where a row's softmax puts all its weight on one key j, O_i = V_j
 * exactly, and dP_ij - Dsum_i must be exactly 0 (dQ and dK are then exactly 0; the tests
 * compare such cases against a zero reference). v1 gets this by forming Dsum with dP's
 * fmaf chain; here the preprocess forms Dsum_i as the element (i, i) of dO O^T with the
 * same mma.sync chain (k16 steps of d ascending, accumulator from 0), so O_i = V_j gives
 * Dsum_i = dP_ij bit for bit - provided an mma element depends on its A row, B column and
 * accumulator only, not on its position in the fragment.
 */
#include "attn_cuda_int.h"

#include <math.h>

template <int D>
struct bwd_tc_smem {
    uint16_t k_smem[ATTN_BN * attn_tc_ld<D>::v];       /* (64, D + 8) K tile of the unit */
    uint16_t v_smem[ATTN_BN * attn_tc_ld<D>::v];       /* (64, D + 8) V tile of the unit */
    uint16_t q_smem[2][ATTN_BM * attn_tc_ld<D>::v];    /* (2, 64, D + 8) Q of the step, of the next */
    uint16_t dout_smem[2][ATTN_BM * attn_tc_ld<D>::v]; /* (2, 64, D + 8) dO likewise */
    uint16_t p_smem[ATTN_BM * ATTN_TC_PLD];            /* (64, 72) P, input dtype, row i */
    uint16_t ds_smem[ATTN_BM * ATTN_TC_PLD];           /* (64, 72) dS, input dtype, row i */
    float lse_smem[2][ATTN_BM];                        /* (2, 64) LSE rows, +inf past Sq */
    float dsum_smem[2][ATTN_BM];                       /* (2, 64) Dsum rows, 0 past Sq */
    int32_t flag_smem;                                 /* broadcast from thread 0 */
};

/* Registers of one unit: the thread's C fragments of dK, dV (kv rows 16 wm + g, + 8;
 * columns D/2 wn + 8 t + 2 (lane % 4), + 1) and of the pending dQ partial (q rows, same
 * columns). D/16 n-tiles x 4 = D/4 floats each. */
template <int D>
struct bwd_tc_regs {
    float dk_reg[D / 16][4];
    float dv_reg[D / 16][4];
    float dq_reg[D / 16][4];
};

/* Load the unit's K and V tiles and wait for them. */
template <int D>
static __device__ __forceinline__ void bwd_tc_load_kv(const struct attn_bwd_params &p, bwd_tc_smem<D> &sm,
                                                      int32_t bh, int32_t n)
{
    const int32_t b = bh / p.heads_q, hk = (bh - b * p.heads_q) / p.group;
    const int32_t j0 = n * ATTN_BN, rn = p.seqlen_k - j0 < ATTN_BN ? p.seqlen_k - j0 : ATTN_BN;
    attn_tc_load_tile<D>(sm.k_smem, static_cast<const uint16_t *>(p.k),
                         b * p.k_stride[0] + (int64_t)j0 * p.k_stride[1] + hk * p.k_stride[2],
                         p.k_stride[1], rn, ATTN_THREADS);
    attn_tc_load_tile<D>(sm.v_smem, static_cast<const uint16_t *>(p.v),
                         b * p.v_stride[0] + (int64_t)j0 * p.v_stride[1] + hk * p.v_stride[2],
                         p.v_stride[1], rn, ATTN_THREADS);
    attn_cp_async_commit();
    attn_cp_async_wait<0>();
    __syncthreads(); /* K and V are complete before the unit's first step reads them */
}

/* Start loading Q, dO, LSE and Dsum of q-tile m of head bh into buffer `buf`, as one
 * committed cp.async group (rows past Sq: Q, dO 0, LSE +inf, Dsum 0). */
template <int D>
static __device__ __forceinline__ void bwd_tc_load_q(const struct attn_bwd_params &p, bwd_tc_smem<D> &sm,
                                                     int32_t buf, int32_t bh, int32_t m)
{
    const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q;
    const int32_t i0 = m * ATTN_BM, rm = p.seqlen_q - i0 < ATTN_BM ? p.seqlen_q - i0 : ATTN_BM;
    attn_tc_load_tile<D>(sm.q_smem[buf], static_cast<const uint16_t *>(p.q),
                         b * p.q_stride[0] + (int64_t)i0 * p.q_stride[1] + h * p.q_stride[2],
                         p.q_stride[1], rm, ATTN_THREADS);
    attn_tc_load_tile<D>(sm.dout_smem[buf], static_cast<const uint16_t *>(p.dout),
                         b * p.dout_stride[0] + (int64_t)i0 * p.dout_stride[1] + h * p.dout_stride[2],
                         p.dout_stride[1], rm, ATTN_THREADS);
    const int32_t tid = threadIdx.x;
    if (tid < ATTN_BM) {
        const int64_t row = (int64_t)bh * p.seqlen_q + i0 + tid;
        if (tid < rm) {
            attn_cp_async4(&sm.lse_smem[buf][tid], p.lse + row);
            attn_cp_async4(&sm.dsum_smem[buf][tid], p.dsum + row);
        } else {
            sm.lse_smem[buf][tid] = INFINITY;
            sm.dsum_smem[buf][tid] = 0.0f;
        }
    }
    attn_cp_async_commit();
}

template <int D>
static __device__ __forceinline__ void bwd_tc_zero_kv(bwd_tc_regs<D> &x)
{
#pragma unroll
    for (int t = 0; t < D / 16; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            x.dk_reg[t][e] = 0.0f;
            x.dv_reg[t][e] = 0.0f;
        }
}

/*
 * One step: unit (bh, n) against q-tile m, whose Q/dO/LSE/Dsum are (`loaded`) or are to be
 * loaded into buffer `buf`. If next_m >= 0 the step also starts loading q-tile next_m of
 * the same head into buffer buf ^ 1, for the caller's next step. Updates x.dk_reg,
 * x.dv_reg and leaves the dQ partial in x.dq_reg. K/V of the unit must be in shared
 * memory. Both modes run exactly this code; `loaded` and next_m only move loads in time.
 */
template <typename DT, int D>
static __device__ __forceinline__ void bwd_tc_step(const struct attn_bwd_params &p, bwd_tc_smem<D> &sm,
                                                   bwd_tc_regs<D> &x, int32_t bh, int32_t n, int32_t m,
                                                   int32_t buf, int loaded, int32_t next_m)
{
    const int32_t LD = attn_tc_ld<D>::v, PLD = ATTN_TC_PLD;
    const int32_t NT = D / 16; /* n-tiles of the warp's (16, D/2) slab of dK, dV, dQp */
    const int32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t wm = warp & 3, wn = warp >> 2, g = lane >> 2, t4 = lane & 3;
    const int32_t xr = attn_ldsm_x_row(lane), xc = attn_ldsm_x_col(lane);
    const int32_t yr = attn_ldsm_y_row(lane), yc = attn_ldsm_y_col(lane);
    const int32_t i0 = m * ATTN_BM, rm = p.seqlen_q - i0 < ATTN_BM ? p.seqlen_q - i0 : ATTN_BM;
    const int32_t j0 = n * ATTN_BN, rn = p.seqlen_k - j0 < ATTN_BN ? p.seqlen_k - j0 : ATTN_BN;
    const int64_t offset = (int64_t)p.seqlen_k - p.seqlen_q;
    const int causal = p.s.mask == SCHED_MASK_CAUSAL;
    const float scale2 = __fmul_rn(p.scale, ATTN_LOG2E);

    if (!loaded)
        bwd_tc_load_q<D>(p, sm, buf, bh, m);
    if (next_m >= 0) {
        bwd_tc_load_q<D>(p, sm, buf ^ 1, bh, next_m);
        attn_cp_async_wait<1>(); /* all but the prefetch: this step's group has landed */
    } else {
        attn_cp_async_wait<0>();
    }
    __syncthreads(); /* Q, dO, LSE and Dsum of the step are complete before anyone reads them */
    const uint16_t *q_smem = sm.q_smem[buf], *dout_smem = sm.dout_smem[buf];

    /* S = Q K^T and dP = dO V^T, d ascending */
    float s_reg[4][4], dp_reg[4][4];
#pragma unroll
    for (int t = 0; t < 4; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s_reg[t][e] = 0.0f;
            dp_reg[t][e] = 0.0f;
        }
#pragma unroll
    for (int32_t kk = 0; kk < D / 16; kk++) {
        uint32_t aq[4], ado[4];
        attn_ldsm_x4(aq, q_smem + (16 * wm + xr) * LD + 16 * kk + xc);
        attn_ldsm_x4(ado, dout_smem + (16 * wm + xr) * LD + 16 * kk + xc);
#pragma unroll
        for (int nb = 0; nb < 2; nb++) {
            uint32_t bk[4], bv[4];
            attn_ldsm_x4(bk, sm.k_smem + (32 * wn + 16 * nb + yr) * LD + 16 * kk + yc);
            attn_ldsm_x4(bv, sm.v_smem + (32 * wn + 16 * nb + yr) * LD + 16 * kk + yc);
            DT::mma(s_reg[2 * nb], aq, bk[0], bk[1]);
            DT::mma(s_reg[2 * nb + 1], aq, bk[2], bk[3]);
            DT::mma(dp_reg[2 * nb], ado, bv[0], bv[1]);
            DT::mma(dp_reg[2 * nb + 1], ado, bv[2], bv[3]);
        }
    }

    /* P = 2^(S scale log2(e) - LSE log2(e)), 0 where masked; dS = P (dP - Dsum); both
     * rounded to the input dtype into shared memory */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int32_t i = 16 * wm + g + 8 * r;
        const float lse2 = __fmul_rn(sm.lse_smem[buf][i], ATTN_LOG2E), dsum = sm.dsum_smem[buf][i];
        const int64_t last = (int64_t)i0 + i + offset - j0; /* last visible j in the tile */
#pragma unroll
        for (int t = 0; t < 4; t++) {
            float pv[2], dsv[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int32_t j = 32 * wn + 8 * t + 2 * t4 + e;
                const bool vis = i < rm && j < rn && (!causal || j <= last);
                const float pr = vis ? exp2f(fmaf(s_reg[t][2 * r + e], scale2, -lse2)) : 0.0f;
                pv[e] = pr;
                dsv[e] = vis ? __fmul_rn(pr, __fsub_rn(dp_reg[t][2 * r + e], dsum)) : 0.0f;
            }
            const int32_t at = i * PLD + 32 * wn + 8 * t + 2 * t4;
            *reinterpret_cast<uint32_t *>(sm.p_smem + at) = DT::pack2(pv[0], pv[1]);
            *reinterpret_cast<uint32_t *>(sm.ds_smem + at) = DT::pack2(dsv[0], dsv[1]);
        }
    }
    __syncthreads(); /* P and dS are complete before the products below read other warps' parts */

    /* dV += P^T dO and dK += dS^T Q, i ascending */
#pragma unroll
    for (int32_t kk = 0; kk < ATTN_BM / 16; kk++) {
        uint32_t ap[4], ads[4];
        attn_ldsm_x4_t(ap, sm.p_smem + (16 * kk + yr) * PLD + 16 * wm + yc);
        attn_ldsm_x4_t(ads, sm.ds_smem + (16 * kk + yr) * PLD + 16 * wm + yc);
#pragma unroll
        for (int nb = 0; nb < NT / 2; nb++) {
            const int32_t d0 = wn * (D / 2) + 16 * nb;
            uint32_t bo[4], bq[4];
            attn_ldsm_x4_t(bo, dout_smem + (16 * kk + xr) * LD + d0 + xc);
            attn_ldsm_x4_t(bq, q_smem + (16 * kk + xr) * LD + d0 + xc);
            DT::mma(x.dv_reg[2 * nb], ap, bo[0], bo[1]);
            DT::mma(x.dv_reg[2 * nb + 1], ap, bo[2], bo[3]);
            DT::mma(x.dk_reg[2 * nb], ads, bq[0], bq[1]);
            DT::mma(x.dk_reg[2 * nb + 1], ads, bq[2], bq[3]);
        }
    }

    /* dQp = dS K, j ascending */
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            x.dq_reg[t][e] = 0.0f;
#pragma unroll
    for (int32_t kk = 0; kk < ATTN_BN / 16; kk++) {
        uint32_t a[4];
        attn_ldsm_x4(a, sm.ds_smem + (16 * wm + xr) * PLD + 16 * kk + xc);
#pragma unroll
        for (int nb = 0; nb < NT / 2; nb++) {
            uint32_t bk[4];
            attn_ldsm_x4_t(bk, sm.k_smem + (16 * kk + xr) * LD + wn * (D / 2) + 16 * nb + xc);
            DT::mma(x.dq_reg[2 * nb], a, bk[0], bk[1]);
            DT::mma(x.dq_reg[2 * nb + 1], a, bk[2], bk[3]);
        }
    }
    __syncthreads(); /* every read of this buffer, P, dS (and K, V) is done before the next
                        step's prefetch or the next unit overwrites them */
}

/* Add the dQ partial into dQacc[m] at L2. The caller holds the tile's turn (or the
 * schedule is atomic, where additions race on purpose). */
template <int D>
static __device__ __forceinline__ void bwd_tc_add_dq(const struct attn_bwd_params &p,
                                                     const bwd_tc_regs<D> &x, int32_t bh, int32_t m)
{
    const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t wm = warp & 3, wn = warp >> 2, g = lane >> 2, t4 = lane & 3;
    const int32_t i0 = m * ATTN_BM, rm = p.seqlen_q - i0 < ATTN_BM ? p.seqlen_q - i0 : ATTN_BM;
    float *acc = p.dq_acc + ((int64_t)bh * p.seqlen_q + i0) * D; /* (rm, D) rows of the tile */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int32_t i = 16 * wm + g + 8 * r;
        if (i >= rm)
            continue;
#pragma unroll
        for (int t = 0; t < D / 16; t++)
            attn_red_add2(acc + i * D + wn * (D / 2) + 8 * t + 2 * t4, x.dq_reg[t][2 * r],
                          x.dq_reg[t][2 * r + 1]);
    }
}

/* The tail of an addition: make it visible at GPU scope, then pass the tile on. */
static __device__ __forceinline__ void bwd_tc_release(int32_t *ctr, int32_t rank)
{
    __threadfence(); /* this thread's reductions are performed GPU-wide ... */
    __syncthreads(); /* ... and so are every other thread's before thread 0 goes on */
    if (threadIdx.x == 0 && rank >= 0) {
        __threadfence(); /* cumulative: orders the whole CTA's addition before the store */
        attn_st_release(ctr, rank + 1);
    }
}

/* Store the unit's dK (times scale) and dV: straight to the outputs, or per q-head fp32
 * for GQA (summed by attn_bwd_tc_dkv_sum_kernel). */
template <typename DT, int D>
static __device__ __forceinline__ void bwd_tc_store_unit(const struct attn_bwd_params &p,
                                                         const bwd_tc_regs<D> &x, int32_t bh, int32_t n)
{
    const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t wm = warp & 3, wn = warp >> 2, g = lane >> 2, t4 = lane & 3;
    const int32_t b = bh / p.heads_q, hk = (bh - b * p.heads_q) / p.group;
    const int32_t j0 = n * ATTN_BN, rn = p.seqlen_k - j0 < ATTN_BN ? p.seqlen_k - j0 : ATTN_BN;
    uint16_t *dk_g = static_cast<uint16_t *>(p.dk), *dv_g = static_cast<uint16_t *>(p.dv);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int32_t j = 16 * wm + g + 8 * r;
        if (j >= rn)
            continue;
#pragma unroll
        for (int t = 0; t < D / 16; t++) {
            const int32_t d = wn * (D / 2) + 8 * t + 2 * t4;
            const float dk0 = __fmul_rn(x.dk_reg[t][2 * r], p.scale);
            const float dk1 = __fmul_rn(x.dk_reg[t][2 * r + 1], p.scale);
            const float dv0 = x.dv_reg[t][2 * r], dv1 = x.dv_reg[t][2 * r + 1];
            if (p.group == 1) {
                attn_st_pair(dk_g + b * p.dk_stride[0] + (int64_t)(j0 + j) * p.dk_stride[1] +
                                 hk * p.dk_stride[2] + d,
                             DT::pack2(dk0, dk1));
                attn_st_pair(dv_g + b * p.dv_stride[0] + (int64_t)(j0 + j) * p.dv_stride[1] +
                                 hk * p.dv_stride[2] + d,
                             DT::pack2(dv0, dv1));
            } else {
                const int64_t at = ((int64_t)bh * p.seqlen_k + j0 + j) * D + d;
                *reinterpret_cast<float2 *>(p.dk_acc + at) = make_float2(dk0, dk1);
                *reinterpret_cast<float2 *>(p.dv_acc + at) = make_float2(dv0, dv1);
            }
        }
    }
}

/* Interleaved mode: a virtual SM's registers in global scratch, (3, D/4, 256) floats,
 * thread-minor so that the CTA's accesses coalesce. */
template <int D>
static __device__ __forceinline__ float *bwd_tc_vsm_data(const struct attn_bwd_params &p, int32_t v)
{
    return p.vsm_data + (int64_t)v * 3 * (D / 4) * ATTN_THREADS + threadIdx.x;
}

template <int D>
static __device__ __forceinline__ void bwd_tc_vsm_save(const struct attn_bwd_params &p, int32_t v,
                                                       const int32_t *st, const bwd_tc_regs<D> &x)
{
    float *data = bwd_tc_vsm_data<D>(p, v);
    if (threadIdx.x == 0)
        for (int i = 0; i < VSM_SLOTS; i++)
            p.vsm_state[(int64_t)v * VSM_SLOTS + i] = st[i];
    if (st[VSM_LOADED])
#pragma unroll
        for (int t = 0; t < D / 16; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                data[((0 * (D / 4)) + 4 * t + e) * ATTN_THREADS] = x.dk_reg[t][e];
                data[((1 * (D / 4)) + 4 * t + e) * ATTN_THREADS] = x.dv_reg[t][e];
            }
    if (st[VSM_PENDING])
#pragma unroll
        for (int t = 0; t < D / 16; t++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                data[((2 * (D / 4)) + 4 * t + e) * ATTN_THREADS] = x.dq_reg[t][e];
}

template <int D>
static __device__ __forceinline__ void bwd_tc_vsm_restore(const struct attn_bwd_params &p, int32_t v,
                                                          const int32_t *st, bwd_tc_regs<D> &x)
{
    const float *data = bwd_tc_vsm_data<D>(p, v);
    if (st[VSM_LOADED])
#pragma unroll
        for (int t = 0; t < D / 16; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                x.dk_reg[t][e] = data[((0 * (D / 4)) + 4 * t + e) * ATTN_THREADS];
                x.dv_reg[t][e] = data[((1 * (D / 4)) + 4 * t + e) * ATTN_THREADS];
            }
    if (st[VSM_PENDING])
#pragma unroll
        for (int t = 0; t < D / 16; t++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                x.dq_reg[t][e] = data[((2 * (D / 4)) + 4 * t + e) * ATTN_THREADS];
}

/* Persistent mode: take jobs in dispatch order; block on each turn. While thread 0 waits,
 * the next step's Q/dO are already on their way. */
template <typename DT, int D>
static __device__ __forceinline__ void bwd_tc_persistent(const struct attn_bwd_params &p, bwd_tc_smem<D> &sm)
{
    const struct sched *s = &p.s;
    bwd_tc_regs<D> x;
    for (;;) {
        if (threadIdx.x == 0)
            sm.flag_smem = atomicAdd(p.job_next, 1);
        __syncthreads(); /* the job index is visible to every thread */
        const int32_t job = sm.flag_smem;
        __syncthreads(); /* everyone has read it before thread 0 may write the next one */
        if (job >= s->jobs)
            return;
        const struct sched_job J = sched_job_at(s, job);
        for (int32_t stage = 0; stage < sched_job_stages(s, J.k); stage++) {
            const int32_t n = sched_job_unit(s, J.k, stage);
            bwd_tc_load_kv<D>(p, sm, J.bh, n);
            bwd_tc_zero_kv<D>(x);
            const int32_t steps = sched_unit_steps(s, n);
            int32_t m = sched_visit(s, &J, stage, 0), buf = 0;
            int loaded = 0;
            for (int32_t step = 0; step < steps; step++) {
                const int32_t next_m = step + 1 < steps ? sched_visit(s, &J, stage, step + 1) : -1;
                bwd_tc_step<DT, D>(p, sm, x, J.bh, n, m, buf, loaded, next_m);
                int32_t *ctr = p.counter + (int64_t)J.bh * s->m_tiles + m;
                int32_t rank = -1;
                if (threadIdx.x == 0 && s->kind != SCHED_ATOMIC) {
                    rank = sched_rank(s, &J, stage, m);
                    /* The unit whose addition we wait for was taken earlier by a running
                     * CTA (or, for shift, by one of the >= W resident CTAs), so it comes. */
                    uint32_t ns = 32;
                    while (attn_ld_acquire(ctr) != rank) {
                        __nanosleep(ns);
                        ns = ns < 1024 ? ns * 2 : ns;
                    }
                    __threadfence();
                }
                __syncthreads(); /* our turn has come, for the whole CTA */
                bwd_tc_add_dq<D>(p, x, J.bh, m);
                bwd_tc_release(ctr, rank);
                m = next_m;
                buf ^= 1;
                loaded = 1;
            }
            bwd_tc_store_unit<DT, D>(p, x, J.bh, n);
        }
    }
}

/* Interleaved mode: virtual SMs blockIdx.x, blockIdx.x + gridDim.x, ... in turn (v1's
 * bookkeeping, v2's step; no prefetch, since the next step may belong to another one). */
template <typename DT, int D>
static __device__ __forceinline__ void bwd_tc_interleaved(const struct attn_bwd_params &p, bwd_tc_smem<D> &sm)
{
    const struct sched *s = &p.s;
    bwd_tc_regs<D> x;
    int32_t st[VSM_SLOTS]; /* the held virtual SM's state; VSM_RANK is valid in thread 0 only */
    int32_t held = -1;     /* the virtual SM whose registers and K/V are on chip */

    if (threadIdx.x == 0)
        for (int32_t v = blockIdx.x; v < p.nvsm; v += gridDim.x)
            for (int i = 0; i < VSM_SLOTS; i++)
                p.vsm_state[(int64_t)v * VSM_SLOTS + i] = i == VSM_JOB ? v : 0;
    for (int i = 0; i < VSM_SLOTS; i++)
        st[i] = 0;
    __syncthreads(); /* the states are initialised before anyone reads them */

    uint32_t ns = 32;
    for (;;) {
        int active = 0, progress = 0;
        for (int32_t v = blockIdx.x; v < p.nvsm; v += gridDim.x) {
            if (v != held) {
                int32_t nx[VSM_SLOTS];
                for (int i = 0; i < VSM_SLOTS; i++) /* written by thread 0, then a barrier */
                    nx[i] = __ldcg(p.vsm_state + (int64_t)v * VSM_SLOTS + i);
                if (nx[VSM_JOB] >= s->jobs)
                    continue;
                if (held >= 0)
                    bwd_tc_vsm_save<D>(p, held, st, x);
                held = v;
                for (int i = 0; i < VSM_SLOTS; i++)
                    st[i] = nx[i];
                bwd_tc_vsm_restore<D>(p, v, st, x);
                if (st[VSM_LOADED]) {
                    const struct sched_job J = sched_job_at(s, st[VSM_JOB]);
                    bwd_tc_load_kv<D>(p, sm, J.bh, sched_job_unit(s, J.k, st[VSM_STAGE]));
                }
            } else if (st[VSM_JOB] >= s->jobs) {
                continue;
            }
            active = 1;
            /* Run this virtual SM until it must wait or is done. */
            while (st[VSM_JOB] < s->jobs) {
                const struct sched_job J = sched_job_at(s, st[VSM_JOB]);
                const int32_t n = sched_job_unit(s, J.k, st[VSM_STAGE]);
                if (!st[VSM_PENDING]) {
                    if (!st[VSM_LOADED]) {
                        bwd_tc_load_kv<D>(p, sm, J.bh, n);
                        bwd_tc_zero_kv<D>(x);
                        st[VSM_LOADED] = 1;
                    }
                    st[VSM_M] = sched_visit(s, &J, st[VSM_STAGE], st[VSM_STEP]);
                    bwd_tc_step<DT, D>(p, sm, x, J.bh, n, st[VSM_M], 0, 0, -1);
                    if (threadIdx.x == 0)
                        st[VSM_RANK] = sched_rank(s, &J, st[VSM_STAGE], st[VSM_M]);
                    st[VSM_PENDING] = 1;
                    progress = 1;
                }
                int32_t *ctr = p.counter + (int64_t)J.bh * s->m_tiles + st[VSM_M];
                if (threadIdx.x == 0) {
                    const int go = st[VSM_RANK] < 0 || attn_ld_acquire(ctr) == st[VSM_RANK];
                    if (go)
                        __threadfence();
                    sm.flag_smem = go;
                }
                __syncthreads(); /* thread 0's verdict on the turn is visible to all */
                const int go = sm.flag_smem;
                __syncthreads(); /* everyone has read it before thread 0 may write it again */
                if (!go)
                    break; /* not our turn: keep the partial, try the next virtual SM */
                bwd_tc_add_dq<D>(p, x, J.bh, st[VSM_M]);
                bwd_tc_release(ctr, threadIdx.x == 0 ? st[VSM_RANK] : -1);
                st[VSM_PENDING] = 0;
                progress = 1;
                if (++st[VSM_STEP] < sched_unit_steps(s, n))
                    continue;
                bwd_tc_store_unit<DT, D>(p, x, J.bh, n);
                st[VSM_LOADED] = 0;
                st[VSM_STEP] = 0;
                if (++st[VSM_STAGE] < sched_job_stages(s, J.k))
                    continue;
                st[VSM_STAGE] = 0;
                st[VSM_JOB] += p.nvsm;
            }
        }
        if (!active)
            return;
        if (progress) {
            ns = 32;
        } else {
            __nanosleep(ns); /* every virtual SM waits on another CTA: back off */
            ns = ns < 1024 ? ns * 2 : ns;
        }
    }
}

/* The two modes are two kernels around the same inlined bwd_tc_step, so that each gets
 * its own register allocation: one kernel holding both needs more than 255 registers at
 * D = 128 and spills. Which kernel runs changes nothing but the bookkeeping around the
 * steps. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS, 1) attn_bwd_tc_persistent_kernel(const struct attn_bwd_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bwd_tc_persistent<DT, D>(p, *reinterpret_cast<bwd_tc_smem<D> *>(smem_raw));
}

template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS, 1) attn_bwd_tc_interleaved_kernel(const struct attn_bwd_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bwd_tc_interleaved<DT, D>(p, *reinterpret_cast<bwd_tc_smem<D> *>(smem_raw));
}

/* Dsum_i = sum_d dO_id O_id, as the diagonal of dO O^T on tensor cores: one warp per 16
 * rows, A = those 16 rows of dO, B = 8 rows of O (rows 0-7, then 8-15), k16 steps of d
 * ascending from a zero accumulator - the chain bwd_tc_step runs for dP = dO V^T. Row r0+c
 * of the first product is element (c, c), held by lane 4c + c/2 as c[c % 2]; row r0+8+c of
 * the second is element (8+c, c), held by the same lane as c[2 + c % 2]. Rows are (bh, i)
 * flattened; rows past the end read zeros and are not stored. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_tc_preprocess_kernel(const struct attn_bwd_params p)
{
    const int64_t rows = (int64_t)p.s.bh * p.seqlen_q;
    const int64_t groups = (rows + 15) / 16;
    const int32_t lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int32_t warps = ATTN_THREADS / 32;
    const uint16_t *o_g = static_cast<const uint16_t *>(p.out);
    const uint16_t *do_g = static_cast<const uint16_t *>(p.dout);
    for (int64_t grp = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5); grp < groups;
         grp += (int64_t)gridDim.x * warps) {
        const uint16_t *o_row[2], *do_row[2]; /* rows r0 + g, r0 + 8 + g; NULL past the end */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int64_t row = grp * 16 + g + 8 * r;
            o_row[r] = do_row[r] = NULL;
            if (row < rows) {
                const int32_t bh = (int32_t)(row / p.seqlen_q), i = (int32_t)(row - (int64_t)bh * p.seqlen_q);
                const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q;
                o_row[r] = o_g + b * p.out_stride[0] + (int64_t)i * p.out_stride[1] + h * p.out_stride[2];
                do_row[r] = do_g + b * p.dout_stride[0] + (int64_t)i * p.dout_stride[1] + h * p.dout_stride[2];
            }
        }
        float c_lo[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int32_t kk = 0; kk < D / 16; kk++) {
            const int32_t d = 16 * kk + 2 * t4;
            uint32_t a[4];
            a[0] = do_row[0] ? attn_ld_pair(do_row[0] + d) : 0u;
            a[1] = do_row[1] ? attn_ld_pair(do_row[1] + d) : 0u;
            a[2] = do_row[0] ? attn_ld_pair(do_row[0] + d + 8) : 0u;
            a[3] = do_row[1] ? attn_ld_pair(do_row[1] + d + 8) : 0u;
            const uint32_t b0 = o_row[0] ? attn_ld_pair(o_row[0] + d) : 0u;
            const uint32_t b1 = o_row[0] ? attn_ld_pair(o_row[0] + d + 8) : 0u;
            const uint32_t b2 = o_row[1] ? attn_ld_pair(o_row[1] + d) : 0u;
            const uint32_t b3 = o_row[1] ? attn_ld_pair(o_row[1] + d + 8) : 0u;
            DT::mma(c_lo, a, b0, b1);
            DT::mma(c_hi, a, b2, b3);
        }
        if (t4 == (g >> 1)) {
            const int64_t row = grp * 16 + g;
            if (row < rows)
                p.dsum[row] = (g & 1) ? c_lo[1] : c_lo[0];
            if (row + 8 < rows)
                p.dsum[row + 8] = (g & 1) ? c_hi[3] : c_hi[2];
        }
    }
}

/* dQ = scale dQacc, one thread per pair of elements. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_tc_postprocess_kernel(const struct attn_bwd_params p)
{
    const int64_t pairs = (int64_t)p.s.bh * p.seqlen_q * (D / 2);
    uint16_t *dq_g = static_cast<uint16_t *>(p.dq);
    for (int64_t e = (int64_t)blockIdx.x * ATTN_THREADS + threadIdx.x; e < pairs;
         e += (int64_t)gridDim.x * ATTN_THREADS) {
        const int64_t row = e / (D / 2);
        const int32_t d = 2 * (int32_t)(e - row * (D / 2));
        const int32_t bh = (int32_t)(row / p.seqlen_q), i = (int32_t)(row - (int64_t)bh * p.seqlen_q);
        const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q;
        const float2 a = *reinterpret_cast<const float2 *>(p.dq_acc + row * D + d);
        attn_st_pair(dq_g + b * p.dq_stride[0] + (int64_t)i * p.dq_stride[1] + h * p.dq_stride[2] + d,
                     DT::pack2(__fmul_rn(a.x, p.scale), __fmul_rn(a.y, p.scale)));
    }
}

/* GQA: dK, dV of kv head hk = sum over its q-heads g = 0 .. group-1, ascending. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_tc_dkv_sum_kernel(const struct attn_bwd_params p)
{
    const int64_t total = (int64_t)p.s.batch * p.heads_kv * p.seqlen_k * D;
    uint16_t *dk_g = static_cast<uint16_t *>(p.dk), *dv_g = static_cast<uint16_t *>(p.dv);
    for (int64_t e = (int64_t)blockIdx.x * ATTN_THREADS + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * ATTN_THREADS) {
        const int64_t row = e / D; /* (b, hk, j) */
        const int32_t d = (int32_t)(e - row * D);
        const int32_t bhk = (int32_t)(row / p.seqlen_k), j = (int32_t)(row - (int64_t)bhk * p.seqlen_k);
        const int32_t b = bhk / p.heads_kv, hk = bhk - b * p.heads_kv;
        float sk = 0.0f, sv = 0.0f;
        for (int32_t g = 0; g < p.group; g++) {
            const int64_t src = (((int64_t)b * p.heads_q + (int64_t)hk * p.group + g) * p.seqlen_k + j) * D + d;
            sk = __fadd_rn(sk, p.dk_acc[src]);
            sv = __fadd_rn(sv, p.dv_acc[src]);
        }
        dk_g[b * p.dk_stride[0] + (int64_t)j * p.dk_stride[1] + hk * p.dk_stride[2] + d] = DT::from_f(sk);
        dv_g[b * p.dv_stride[0] + (int64_t)j * p.dv_stride[1] + hk * p.dv_stride[2] + d] = DT::from_f(sv);
    }
}

/* ---- host side ---------------------------------------------------------------------- */

/* Blocks for a grid-stride kernel over `work` items of `per_block` each. */
static uint32_t tc_rows_grid(int64_t work, int64_t per_block, int32_t sms)
{
    int64_t blocks = (work + per_block - 1) / per_block;
    const int64_t cap = (int64_t)(sms > 0 ? sms : 1) * 16;
    return (uint32_t)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

template <typename DT, int D>
static cudaError_t bwd_tc_launch(const struct attn_bwd_params *p, int32_t grid, int32_t sms,
                                 cudaStream_t stream)
{
    cudaError_t err;
    const int64_t rows_q = (int64_t)p->s.bh * p->seqlen_q;
    const size_t tiles = (size_t)p->s.bh * (size_t)p->s.m_tiles;
    /* the dQ accumulator, the counters and the job counter start at 0 on every launch */
    if ((err = cudaMemsetAsync(p->dq_acc, 0, sizeof(float) * (size_t)rows_q * D, stream)) != cudaSuccess ||
        (err = cudaMemsetAsync(p->counter, 0, sizeof(int32_t) * tiles, stream)) != cudaSuccess ||
        (err = cudaMemsetAsync(p->job_next, 0, sizeof(int32_t), stream)) != cudaSuccess)
        return err;
    /* 16 rows per warp, 8 warps per block */
    attn_bwd_tc_preprocess_kernel<DT, D>
        <<<tc_rows_grid(rows_q, 16 * (ATTN_THREADS / 32), sms), ATTN_THREADS, 0, stream>>>(*p);
    if ((err = cudaGetLastError()) != cudaSuccess)
        return err;
    if (p->mode == ATTN_MODE_INTERLEAVED)
        attn_bwd_tc_interleaved_kernel<DT, D>
            <<<(uint32_t)grid, ATTN_THREADS, sizeof(bwd_tc_smem<D>), stream>>>(*p);
    else
        attn_bwd_tc_persistent_kernel<DT, D>
            <<<(uint32_t)grid, ATTN_THREADS, sizeof(bwd_tc_smem<D>), stream>>>(*p);
    if ((err = cudaGetLastError()) != cudaSuccess)
        return err;
    attn_bwd_tc_postprocess_kernel<DT, D>
        <<<tc_rows_grid(rows_q * (D / 2), ATTN_THREADS, sms), ATTN_THREADS, 0, stream>>>(*p);
    if ((err = cudaGetLastError()) != cudaSuccess)
        return err;
    if (p->group > 1) {
        const int64_t rows_k = (int64_t)p->s.batch * p->heads_kv * p->seqlen_k;
        attn_bwd_tc_dkv_sum_kernel<DT, D>
            <<<tc_rows_grid(rows_k * D, ATTN_THREADS, sms), ATTN_THREADS, 0, stream>>>(*p);
        if ((err = cudaGetLastError()) != cudaSuccess)
            return err;
    }
    return cudaSuccess;
}

template <typename DT, int D>
static cudaError_t bwd_tc_attr(void)
{
    cudaError_t err = cudaFuncSetAttribute(attn_bwd_tc_persistent_kernel<DT, D>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)sizeof(bwd_tc_smem<D>));
    if (err != cudaSuccess)
        return err;
    return cudaFuncSetAttribute(attn_bwd_tc_interleaved_kernel<DT, D>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(bwd_tc_smem<D>));
}

/* The smaller of the two kernels' figures: the host picks the grid before the mode. */
template <typename DT, int D>
static cudaError_t bwd_tc_occupancy(int32_t *ret)
{
    int a = 0, b = 0;
    cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a, attn_bwd_tc_persistent_kernel<DT, D>,
                                                                    ATTN_THREADS, sizeof(bwd_tc_smem<D>));
    if (err == cudaSuccess)
        err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, attn_bwd_tc_interleaved_kernel<DT, D>,
                                                            ATTN_THREADS, sizeof(bwd_tc_smem<D>));
    if (err == cudaSuccess)
        *ret = a < b ? a : b;
    return err;
}

cudaError_t cuattn__bwd_tc_init(void)
{
    cudaError_t err;
    if ((err = bwd_tc_attr<attn_bf16, 64>()) != cudaSuccess || (err = bwd_tc_attr<attn_bf16, 128>()) != cudaSuccess ||
        (err = bwd_tc_attr<attn_f16, 64>()) != cudaSuccess || (err = bwd_tc_attr<attn_f16, 128>()) != cudaSuccess)
        return err;
    return cudaSuccess;
}

cudaError_t cuattn__bwd_tc_blocks_per_sm(enum dtype_kind dt, int32_t head_dim, int32_t *ret)
{
    const int bf = dt == DTYPE_BF16;
    switch (head_dim) {
    case 64:
        return bf ? bwd_tc_occupancy<attn_bf16, 64>(ret) : bwd_tc_occupancy<attn_f16, 64>(ret);
    case 128:
        return bf ? bwd_tc_occupancy<attn_bf16, 128>(ret) : bwd_tc_occupancy<attn_f16, 128>(ret);
    default:
        return cudaErrorInvalidValue;
    }
}

cudaError_t cuattn__bwd_tc_launch(const struct attn_bwd_params *p, enum dtype_kind dt,
                                  int32_t grid, int32_t sms, cudaStream_t stream)
{
    const int bf = dt == DTYPE_BF16;
    switch (p->head_dim) {
    case 64:
        return bf ? bwd_tc_launch<attn_bf16, 64>(p, grid, sms, stream)
                  : bwd_tc_launch<attn_f16, 64>(p, grid, sms, stream);
    case 128:
        return bf ? bwd_tc_launch<attn_bf16, 128>(p, grid, sms, stream)
                  : bwd_tc_launch<attn_f16, 128>(p, grid, sms, stream);
    default:
        return cudaErrorInvalidValue;
    }
}
