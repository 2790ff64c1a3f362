/*
 * attn_fwd_tc.cu - v2 of the forward kernel: tensor cores (mma.sync m16n8k16, fp16/bf16
 * inputs, fp32 accumulators), one CTA of 128 threads (4 warps) per (q-tile m, batch*head).
 *
 * Warp w owns query rows 16w .. 16w+15 of the 64-row q-tile. For each kv-tile n = 0 ..
 * n_hi(m)-1, ascending, it computes its (16, 64) slice of S in registers and runs the
 * online softmax on it (the same formulas as v1, in base 2):
 *     S2 = log2(e) scale Q K^T (-inf where masked),  m' = max(m, rowmax S2),
 *     l' = l 2^(m - m') + rowsum 2^(S2 - m'),  O' = O 2^(m - m') + 2^(S2 - m') V,
 * and at the end O = O / l, LSE = ln(2) m + ln l; rows that saw no key get O = 0 and
 * LSE = +inf. P = 2^(S2 - m') is rounded to the input dtype for the P V product, as
 * FlashAttention does; l sums the unrounded fp32 P.
 *
 * Fragments (attn_cuda_int.h): S is 8 n-tiles of C fragments; two adjacent n-tiles of S
 * are exactly the A fragment of P for one k16 step of P V (the C layout of m16n8 pairs
 * matches the A layout of m16k16), so P never leaves registers. O is D/8 n-tiles of C
 * fragments, D/2 floats per thread. Q, K, V tiles sit in shared memory, (64, D + 8) each;
 * Q and K are read with ldmatrix, V with ldmatrix.trans.
 *
 * Pipeline (single buffers, cp.async): K(n+1) is in flight while the softmax and P V(n)
 * run, V(n) while S(n) runs. Resources (ptxas, sm_90a): D = 128: 164 registers, 51 KB of
 * shared memory, 3 CTAs per SM; D = 64: 126 registers, 27 KB, 4 CTAs per SM; no spills.
 * The CTAs sharing an SM hide each other's waits.
 *
 * Determinism. Each element of S is one chain of mma.sync over d ascending (k16 chunks);
 * each element of O one chain over kv-tiles and, within a tile, j ascending; row maxima and
 * sums are fixed in-thread loops then a fixed xor-shuffle tree over the 4 lanes of a row.
 * Tensor-core results are a function of the fragments and the accumulator, so the output
 * depends on the inputs alone (and the kernel build and GPU type).
 */
#include "attn_cuda_int.h"

#include <math.h>

#define FWD_TC_THREADS 128
#define FWD_TC_WARPS (FWD_TC_THREADS / 32)

template <int D>
struct fwd_tc_smem {
    uint16_t q_smem[ATTN_BM * attn_tc_ld<D>::v]; /* (64, D + 8) Q tile */
    uint16_t k_smem[ATTN_BN * attn_tc_ld<D>::v]; /* (64, D + 8) K tile */
    uint16_t v_smem[ATTN_BN * attn_tc_ld<D>::v]; /* (64, D + 8) V tile */
};

/* Start the copy of K or V tile n of (b, hk) into tile_smem; the caller commits. */
template <int D>
static __device__ __forceinline__ void fwd_tc_load_kv(uint16_t *tile_smem, const void *src,
                                                      const int64_t stride[3], int32_t seqlen_k,
                                                      int32_t b, int32_t hk, int32_t n)
{
    const int32_t j0 = n * ATTN_BN, rn = seqlen_k - j0 < ATTN_BN ? seqlen_k - j0 : ATTN_BN;
    attn_tc_load_tile<D>(tile_smem, static_cast<const uint16_t *>(src),
                         b * stride[0] + (int64_t)j0 * stride[1] + hk * stride[2], stride[1], rn,
                         FWD_TC_THREADS);
}

template <typename DT, int D>
__global__ void __launch_bounds__(FWD_TC_THREADS) attn_fwd_tc_kernel(const struct attn_fwd_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    fwd_tc_smem<D> &sm = *reinterpret_cast<fwd_tc_smem<D> *>(smem_raw);
    const int32_t LD = attn_tc_ld<D>::v;
    const int32_t NT = D / 8; /* n-tiles of O per warp */
    const int32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t g = lane >> 2, t4 = lane & 3;

    const int32_t M = p.geo.m_tiles;
    const int32_t m = (int32_t)(blockIdx.x % (uint32_t)M), bh = (int32_t)(blockIdx.x / (uint32_t)M);
    const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q, hk = h / p.group;
    const int32_t i0 = m * ATTN_BM;
    const int32_t rm = p.seqlen_q - i0 < ATTN_BM ? p.seqlen_q - i0 : ATTN_BM;
    const int64_t offset = (int64_t)p.seqlen_k - p.seqlen_q; /* causal: key j <= i + offset */
    const int causal = p.geo.mask == SCHED_MASK_CAUSAL;
    const float scale2 = __fmul_rn(p.scale, ATTN_LOG2E); /* scores in base 2 */

    const int32_t n_lo = sched_n_lo(&p.geo, m), n_hi = sched_n_hi(&p.geo, m);
    attn_tc_load_tile<D>(sm.q_smem, static_cast<const uint16_t *>(p.q),
                         b * p.q_stride[0] + (int64_t)i0 * p.q_stride[1] + h * p.q_stride[2],
                         p.q_stride[1], rm, FWD_TC_THREADS);
    if (n_lo < n_hi)
        fwd_tc_load_kv<D>(sm.k_smem, p.k, p.k_stride, p.seqlen_k, b, hk, n_lo);
    attn_cp_async_commit();

    /* this thread's rows: r = 0 -> 16 warp + g, r = 1 -> 16 warp + g + 8 */
    float o_reg[NT][4];
    float m_reg[2], l_reg[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        m_reg[r] = -INFINITY;
        l_reg[r] = 0.0f;
    }
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o_reg[t][e] = 0.0f;

    const int32_t xr = attn_ldsm_x_row(lane), xc = attn_ldsm_x_col(lane);
    const int32_t yr = attn_ldsm_y_row(lane), yc = attn_ldsm_y_col(lane);

    for (int32_t n = n_lo; n < n_hi; n++) {
        const int32_t j0 = n * ATTN_BN;
        const int32_t rn = p.seqlen_k - j0 < ATTN_BN ? p.seqlen_k - j0 : ATTN_BN;
        attn_cp_async_wait<0>();
        __syncthreads(); /* K(n) (and Q) have landed for everyone, and every warp is done
                            reading V(n-1), so V(n) may overwrite it */
        fwd_tc_load_kv<D>(sm.v_smem, p.v, p.v_stride, p.seqlen_k, b, hk, n);
        attn_cp_async_commit();

        /* S = Q K^T: warp rows 16 warp .., all 64 columns; d ascending */
        float s_reg[8][4];
#pragma unroll
        for (int t = 0; t < 8; t++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s_reg[t][e] = 0.0f;
#pragma unroll
        for (int32_t kk = 0; kk < D / 16; kk++) {
            uint32_t a[4];
            attn_ldsm_x4(a, sm.q_smem + (16 * warp + xr) * LD + 16 * kk + xc);
#pragma unroll
            for (int nb = 0; nb < 4; nb++) {
                uint32_t bk[4];
                attn_ldsm_x4(bk, sm.k_smem + (16 * nb + yr) * LD + 16 * kk + yc);
                DT::mma(s_reg[2 * nb], a, bk[0], bk[1]);
                DT::mma(s_reg[2 * nb + 1], a, bk[2], bk[3]);
            }
        }
        __syncthreads(); /* every warp is done reading K(n) before K(n+1) overwrites it */
        const bool more = n + 1 < n_hi;
        if (more)
            fwd_tc_load_kv<D>(sm.k_smem, p.k, p.k_stride, p.seqlen_k, b, hk, n + 1);
        attn_cp_async_commit();

        /* online softmax, two rows per thread; the 4 lanes of a row agree on m and l */
        float corr_reg[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int32_t i = 16 * warp + g + 8 * r;
            const int64_t last = (int64_t)i0 + i + offset - j0; /* last visible j in the tile */
            float tmax = -INFINITY;
#pragma unroll
            for (int t = 0; t < 8; t++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int32_t j = 8 * t + 2 * t4 + e;
                    const bool vis = i < rm && j < rn && (!causal || j <= last);
                    const float sv = vis ? __fmul_rn(s_reg[t][2 * r + e], scale2) : -INFINITY;
                    s_reg[t][2 * r + e] = sv;
                    tmax = fmaxf(tmax, sv);
                }
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
            const float mx = fmaxf(m_reg[r], tmax);
            float rsum = 0.0f;
            if (mx == -INFINITY) { /* the row has seen no key yet: nothing to add */
                corr_reg[r] = 1.0f;
#pragma unroll
                for (int t = 0; t < 8; t++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        s_reg[t][2 * r + e] = 0.0f;
            } else {
                corr_reg[r] = exp2f(__fsub_rn(m_reg[r], mx)); /* 0 when m was -inf */
#pragma unroll
                for (int t = 0; t < 8; t++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const float sv = s_reg[t][2 * r + e];
                        const float pv = sv == -INFINITY ? 0.0f : exp2f(__fsub_rn(sv, mx));
                        s_reg[t][2 * r + e] = pv;
                        rsum = __fadd_rn(rsum, pv);
                    }
            }
            rsum = __fadd_rn(rsum, __shfl_xor_sync(0xffffffffu, rsum, 1));
            rsum = __fadd_rn(rsum, __shfl_xor_sync(0xffffffffu, rsum, 2));
            l_reg[r] = fmaf(l_reg[r], corr_reg[r], rsum);
            m_reg[r] = mx;
        }

        if (more)
            attn_cp_async_wait<1>();
        else
            attn_cp_async_wait<0>();
        __syncthreads(); /* V(n) has landed for everyone before P V reads it */

        /* O = O corr + P V, j ascending in k16 steps */
#pragma unroll
        for (int t = 0; t < NT; t++) {
            o_reg[t][0] = __fmul_rn(o_reg[t][0], corr_reg[0]);
            o_reg[t][1] = __fmul_rn(o_reg[t][1], corr_reg[0]);
            o_reg[t][2] = __fmul_rn(o_reg[t][2], corr_reg[1]);
            o_reg[t][3] = __fmul_rn(o_reg[t][3], corr_reg[1]);
        }
#pragma unroll
        for (int32_t kk = 0; kk < ATTN_BN / 16; kk++) {
            uint32_t a[4]; /* P rows (g, g+8), columns 16 kk + (2 t4, 2 t4 + 8) */
            a[0] = DT::pack2(s_reg[2 * kk][0], s_reg[2 * kk][1]);
            a[1] = DT::pack2(s_reg[2 * kk][2], s_reg[2 * kk][3]);
            a[2] = DT::pack2(s_reg[2 * kk + 1][0], s_reg[2 * kk + 1][1]);
            a[3] = DT::pack2(s_reg[2 * kk + 1][2], s_reg[2 * kk + 1][3]);
#pragma unroll
            for (int nb = 0; nb < D / 16; nb++) {
                uint32_t bv[4];
                attn_ldsm_x4_t(bv, sm.v_smem + (16 * kk + xr) * LD + 16 * nb + xc);
                DT::mma(o_reg[2 * nb], a, bv[0], bv[1]);
                DT::mma(o_reg[2 * nb + 1], a, bv[2], bv[3]);
            }
        }
    }
    attn_cp_async_wait<0>(); /* an empty range still issued the Q copy: let it land */

    uint16_t *out_g = static_cast<uint16_t *>(p.out);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int32_t i = 16 * warp + g + 8 * r;
        if (i >= rm)
            continue;
        const int64_t at = b * p.out_stride[0] + (int64_t)(i0 + i) * p.out_stride[1] + h * p.out_stride[2];
        const bool none = l_reg[r] == 0.0f; /* the row sees no key */
        const float inv = none ? 0.0f : __frcp_rn(l_reg[r]);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int32_t d = 8 * t + 2 * t4;
            attn_st_pair(out_g + at + d, DT::pack2(none ? 0.0f : __fmul_rn(o_reg[t][2 * r], inv),
                                                   none ? 0.0f : __fmul_rn(o_reg[t][2 * r + 1], inv)));
        }
        if (t4 == 0)
            p.lse[(int64_t)bh * p.seqlen_q + i0 + i] =
                none ? INFINITY : fmaf(m_reg[r], ATTN_LN2, logf(l_reg[r]));
    }
}

template <typename DT, int D>
static cudaError_t fwd_tc_launch(const struct attn_fwd_params *p, cudaStream_t stream)
{
    const uint32_t blocks = (uint32_t)p->geo.m_tiles * (uint32_t)p->geo.bh;
    attn_fwd_tc_kernel<DT, D><<<blocks, FWD_TC_THREADS, sizeof(fwd_tc_smem<D>), stream>>>(*p);
    return cudaGetLastError();
}

template <typename DT, int D>
static cudaError_t fwd_tc_attr(void)
{
    return cudaFuncSetAttribute(attn_fwd_tc_kernel<DT, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)sizeof(fwd_tc_smem<D>));
}

cudaError_t cuattn__fwd_tc_init(void)
{
    cudaError_t err;
    if ((err = fwd_tc_attr<attn_bf16, 64>()) != cudaSuccess || (err = fwd_tc_attr<attn_bf16, 128>()) != cudaSuccess ||
        (err = fwd_tc_attr<attn_f16, 64>()) != cudaSuccess || (err = fwd_tc_attr<attn_f16, 128>()) != cudaSuccess)
        return err;
    return cudaSuccess;
}

cudaError_t cuattn__fwd_tc_launch(const struct attn_fwd_params *p, enum dtype_kind dt,
                                  int32_t head_dim, cudaStream_t stream)
{
    const int bf = dt == DTYPE_BF16;
    switch (head_dim) {
    case 64:
        return bf ? fwd_tc_launch<attn_bf16, 64>(p, stream) : fwd_tc_launch<attn_f16, 64>(p, stream);
    case 128:
        return bf ? fwd_tc_launch<attn_bf16, 128>(p, stream) : fwd_tc_launch<attn_f16, 128>(p, stream);
    default:
        return cudaErrorInvalidValue;
    }
}
