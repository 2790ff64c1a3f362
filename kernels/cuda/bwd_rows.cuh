// SPDX-License-Identifier: BSD-3-Clause
/*
 * bwd_rows.cuh - what every backward implementation (v1 attn_bwd.cu, v2/v3 attn_bwd_tc.cu)
 * does around its main kernel alike: the state a launch starts from (the dQ accumulator,
 * the tile counters and the job counter at zero), the grid of the grid-stride row kernels,
 * and GQA's sum of a kv head's dK, dV over its q-heads. Included by those two files only.
 */
#ifndef DASH_KERNELS_CUDA_BWD_ROWS_CUH
#define DASH_KERNELS_CUDA_BWD_ROWS_CUH

#include "kernels/cuda/attn_cuda_int.h"

/* GQA: dK, dV of kv head hk = sum over its q-heads g = 0 .. group-1, ascending. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_dkv_sum_kernel(const struct attn_bwd_params p)
{
    const int32_t batch = p.s.batch;
    const int64_t total = (int64_t)batch * p.heads_kv * p.seqlen_k * D;
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

/* Blocks for a grid-stride kernel over `work` items of `per_block` each: at most 16 per SM. */
static inline uint32_t attn_bwd_rows_grid(int64_t work, int64_t per_block, int32_t sms)
{
    int64_t blocks = (work + per_block - 1) / per_block;
    const int64_t cap = (int64_t)(sms > 0 ? sms : 1) * 16;
    return (uint32_t)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

/* The dQ accumulator (fp32, rows x d), the counters and the job counter start at 0 on
 * every launch. */
static inline cudaError_t attn_bwd_zero_state(const struct attn_bwd_params *p, int32_t d, cudaStream_t stream)
{
    const int64_t rows_q = (int64_t)p->s.bh * p->seqlen_q;
    const size_t tiles = (size_t)p->s.bh * (size_t)p->s.m_tiles;
    cudaError_t err;
    if ((err = cudaMemsetAsync(p->dq_acc, 0, sizeof(float) * (size_t)rows_q * d, stream)) != cudaSuccess ||
        (err = cudaMemsetAsync(p->counter, 0, sizeof(int32_t) * tiles, stream)) != cudaSuccess ||
        (err = cudaMemsetAsync(p->job_next, 0, sizeof(int32_t), stream)) != cudaSuccess)
        return err;
    return cudaSuccess;
}

/* GQA (group > 1): dK, dV from the per-q-head accumulators; nothing otherwise. */
template <typename DT, int D>
static cudaError_t attn_bwd_dkv_sum(const struct attn_bwd_params *p, int32_t sms, cudaStream_t stream)
{
    if (p->group <= 1)
        return cudaSuccess;
    const int64_t rows_k = (int64_t)p->s.batch * p->heads_kv * p->seqlen_k;
    attn_bwd_dkv_sum_kernel<DT, D>
        <<<attn_bwd_rows_grid(rows_k * D, ATTN_THREADS, sms), ATTN_THREADS, 0, stream>>>(*p);
    return cudaGetLastError();
}

#endif
