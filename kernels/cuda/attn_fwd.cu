// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_fwd.cu - the forward kernel: one CTA per (q-tile m, batch*head), 256 threads.
 *
 * The CTA's 64 query rows walk the kv-tiles their mask allows, n = 0 .. n_hi(m)-1 in
 * ascending order, with the online softmax (the CPU engine's formulas, fp32):
 *     S = scale Q K^T (-inf where masked),  m' = max(m, rowmax S),
 *     l' = l e^(m - m') + rowsum e^(S - m'),  O' = O e^(m - m') + e^(S - m') V,
 * and at the end O = O / l, LSE = m + log l; rows that saw no key get O = 0, LSE = +inf.
 * Q, K, V are staged in shared memory as 16-bit words; S and O live in registers (layout
 * in attn_cuda_int.h); P goes through shared memory for the P V product.
 *
 * Every sum has a fixed order (d ascending for S, j ascending for P V, a fixed shuffle
 * tree for the row sums), so the output does not depend on anything but the inputs.
 */
#include "kernels/cuda/attn_cuda_int.h"

#include <math.h>

template <int D>
struct fwd_smem {
    uint16_t q_smem[ATTN_BM * attn_ld<D>::v]; /* (64, D + 2) Q tile */
    uint16_t k_smem[ATTN_BN * attn_ld<D>::v]; /* (64, D + 2) K tile */
    uint16_t v_smem[ATTN_BN * attn_ld<D>::v]; /* (64, D + 2) V tile */
    float p_smem[ATTN_BM * ATTN_PS];          /* (64, 65) P = e^(S - m') */
};

template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS, 1) attn_fwd_kernel(const struct attn_fwd_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    fwd_smem<D> &sm = *reinterpret_cast<fwd_smem<D> *>(smem_raw);
    const int32_t LD = attn_ld<D>::v;
    const int32_t DC = D / 32; /* column pairs per thread */
    const int32_t tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;

    const int32_t M = p.geo.m_tiles;
    const int32_t m = (int32_t)(blockIdx.x % (uint32_t)M), bh = (int32_t)(blockIdx.x / (uint32_t)M);
    const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q, hk = h / p.group;
    const int32_t i0 = m * ATTN_BM;
    const int32_t rm = p.seqlen_q - i0 < ATTN_BM ? p.seqlen_q - i0 : ATTN_BM;
    const int64_t offset = (int64_t)p.seqlen_k - p.seqlen_q; /* causal: key j <= i + offset */
    const int causal = p.geo.mask == SCHED_MASK_CAUSAL;
    const uint16_t *q_g = static_cast<const uint16_t *>(p.q);
    const uint16_t *k_g = static_cast<const uint16_t *>(p.k);
    const uint16_t *v_g = static_cast<const uint16_t *>(p.v);

    attn_load_tile<D>(sm.q_smem, q_g, b * p.q_stride[0] + i0 * p.q_stride[1] + h * p.q_stride[2],
                      p.q_stride[1], rm);

    float o_reg[4][2 * DC];
    float m_reg[4], l_reg[4];
#pragma unroll
    for (int r = 0; r < 4; r++) {
        m_reg[r] = -INFINITY;
        l_reg[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < 2 * DC; e++)
            o_reg[r][e] = 0.0f;
    }

    const int32_t n_hi = sched_n_hi(&p.geo, m);
    for (int32_t n = sched_n_lo(&p.geo, m); n < n_hi; n++) {
        const int32_t j0 = n * ATTN_BN;
        const int32_t rn = p.seqlen_k - j0 < ATTN_BN ? p.seqlen_k - j0 : ATTN_BN;
        attn_load_tile<D>(sm.k_smem, k_g, b * p.k_stride[0] + j0 * p.k_stride[1] + hk * p.k_stride[2],
                          p.k_stride[1], rn);
        attn_load_tile<D>(sm.v_smem, v_g, b * p.v_stride[0] + j0 * p.v_stride[1] + hk * p.v_stride[2],
                          p.v_stride[1], rn);
        __syncthreads(); /* K and V (and Q, on the first tile) are complete before S reads them */

        /* S = Q K^T, d ascending */
        float s_reg[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                s_reg[r][c] = 0.0f;
#pragma unroll 4
        for (int32_t d = 0; d < D; d += 2) {
            float2 qv[4], kv[4];
#pragma unroll
            for (int r = 0; r < 4; r++)
                qv[r] = attn_pair<DT>(sm.q_smem + (ty + 16 * r) * LD, d);
#pragma unroll
            for (int c = 0; c < 4; c++)
                kv[c] = attn_pair<DT>(sm.k_smem + (tx + 16 * c) * LD, d);
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    s_reg[r][c] = fmaf(qv[r].x, kv[c].x, s_reg[r][c]);
                    s_reg[r][c] = fmaf(qv[r].y, kv[c].y, s_reg[r][c]);
                }
        }

        /* online softmax, row by row; the 16 threads of a row group agree on m and l */
        float corr_reg[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int32_t i = ty + 16 * r;
            const int64_t last = (int64_t)i0 + i + offset - j0; /* last visible j in the tile */
            float tmax = -INFINITY;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int32_t j = tx + 16 * c;
                const bool vis = i < rm && j < rn && (!causal || j <= last);
                s_reg[r][c] = vis ? __fmul_rn(s_reg[r][c], p.scale) : -INFINITY;
                tmax = fmaxf(tmax, s_reg[r][c]);
            }
#pragma unroll
            for (int off = 8; off > 0; off >>= 1)
                tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, off, 16));
            const float mx = fmaxf(m_reg[r], tmax);
            float rsum = 0.0f;
            if (mx == -INFINITY) { /* the row has seen no key yet: nothing to add */
                corr_reg[r] = 1.0f;
#pragma unroll
                for (int c = 0; c < 4; c++)
                    s_reg[r][c] = 0.0f;
            } else {
                corr_reg[r] = expf(__fsub_rn(m_reg[r], mx)); /* 0 when m was -inf */
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    s_reg[r][c] = s_reg[r][c] == -INFINITY ? 0.0f : expf(__fsub_rn(s_reg[r][c], mx));
                    rsum = __fadd_rn(rsum, s_reg[r][c]);
                }
            }
#pragma unroll
            for (int off = 8; off > 0; off >>= 1)
                rsum = __fadd_rn(rsum, __shfl_xor_sync(0xffffffffu, rsum, off, 16));
            l_reg[r] = fmaf(l_reg[r], corr_reg[r], rsum);
            m_reg[r] = mx;
#pragma unroll
            for (int c = 0; c < 4; c++)
                sm.p_smem[i * ATTN_PS + tx + 16 * c] = s_reg[r][c];
        }
        __syncthreads(); /* P is complete before P V reads other threads' columns */

        /* O = O corr + P V, j ascending */
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int e = 0; e < 2 * DC; e++)
                o_reg[r][e] = __fmul_rn(o_reg[r][e], corr_reg[r]);
#pragma unroll 4
        for (int32_t j = 0; j < ATTN_BN; j++) {
            float pj[4];
#pragma unroll
            for (int r = 0; r < 4; r++)
                pj[r] = sm.p_smem[(ty + 16 * r) * ATTN_PS + j];
#pragma unroll
            for (int c = 0; c < DC; c++) {
                const float2 vv = attn_pair<DT>(sm.v_smem + j * LD, 2 * tx + 32 * c);
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    o_reg[r][2 * c] = fmaf(pj[r], vv.x, o_reg[r][2 * c]);
                    o_reg[r][2 * c + 1] = fmaf(pj[r], vv.y, o_reg[r][2 * c + 1]);
                }
            }
        }
        __syncthreads(); /* every read of K, V and P is done before the next tile overwrites them */
    }

    uint16_t *out_g = static_cast<uint16_t *>(p.out);
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int32_t i = ty + 16 * r;
        if (i >= rm)
            continue;
        const int64_t at = b * p.out_stride[0] + (int64_t)(i0 + i) * p.out_stride[1] + h * p.out_stride[2];
        const bool none = l_reg[r] == 0.0f; /* the row sees no key */
        const float inv = none ? 0.0f : __frcp_rn(l_reg[r]);
#pragma unroll
        for (int c = 0; c < DC; c++) {
            const int32_t d = 2 * tx + 32 * c;
            out_g[at + d] = DT::from_f(none ? 0.0f : __fmul_rn(o_reg[r][2 * c], inv));
            out_g[at + d + 1] = DT::from_f(none ? 0.0f : __fmul_rn(o_reg[r][2 * c + 1], inv));
        }
        if (tx == 0)
            p.lse[(int64_t)bh * p.seqlen_q + i0 + i] =
                none ? INFINITY : __fadd_rn(m_reg[r], logf(l_reg[r]));
    }
}

template <typename DT, int D>
static cudaError_t fwd_launch(const struct attn_fwd_params *p, cudaStream_t stream)
{
    const uint32_t blocks = (uint32_t)p->geo.m_tiles * (uint32_t)p->geo.bh;
    attn_fwd_kernel<DT, D><<<blocks, ATTN_THREADS, sizeof(fwd_smem<D>), stream>>>(*p);
    return cudaGetLastError();
}

/* Raise the kernel's shared-memory limit where the device has room for its tile. */
template <typename DT, int D>
static cudaError_t fwd_attr(size_t smem_optin)
{
    if (sizeof(fwd_smem<D>) > smem_optin)
        return cudaSuccess; /* unusable here: cuattn_forward refuses this head dim */
    return cudaFuncSetAttribute(attn_fwd_kernel<DT, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)sizeof(fwd_smem<D>));
}

cudaError_t cuattn__fwd_init(size_t smem_optin)
{
    cudaError_t err;
    if ((err = fwd_attr<attn_bf16, 64>(smem_optin)) != cudaSuccess ||
        (err = fwd_attr<attn_f16, 64>(smem_optin)) != cudaSuccess ||
        (err = fwd_attr<attn_bf16, 96>(smem_optin)) != cudaSuccess ||
        (err = fwd_attr<attn_f16, 96>(smem_optin)) != cudaSuccess ||
        (err = fwd_attr<attn_bf16, 128>(smem_optin)) != cudaSuccess ||
        (err = fwd_attr<attn_f16, 128>(smem_optin)) != cudaSuccess ||
        (err = fwd_attr<attn_bf16, 256>(smem_optin)) != cudaSuccess ||
        (err = fwd_attr<attn_f16, 256>(smem_optin)) != cudaSuccess)
        return err;
    return cudaSuccess;
}

size_t cuattn__fwd_smem_bytes(int32_t head_dim)
{
    switch (head_dim) {
    case 64:
        return sizeof(fwd_smem<64>);
    case 96:
        return sizeof(fwd_smem<96>);
    case 128:
        return sizeof(fwd_smem<128>);
    case 256:
        return sizeof(fwd_smem<256>);
    default:
        return 0;
    }
}

cudaError_t cuattn__fwd_launch(const struct attn_fwd_params *p, enum dtype_kind dt,
                               int32_t head_dim, cudaStream_t stream)
{
#define FWD_RUN(T, D) fwd_launch<T, D>(p, stream)
    ATTN_V1_DISPATCH(dt, head_dim, FWD_RUN);
#undef FWD_RUN
}
