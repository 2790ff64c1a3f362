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
#include "kernels/digest/digest_leaf.cuh"

/* One warp: a kv row's dK and dV at dk_row, dv_row = the sum of the `group` q-heads' rows
 * of dK*scale and dV in the scratch (dk_acc, dv_acc) at src0, src0 + step, ... (ascending;
 * group 0: zeros), rounded to the dtype; lane l the pairs d = 2 l, 2 l + 64, ... (The
 * scratch comes as pointers, not the params: a reference to a kernel's by-value params
 * puts them in local memory, 12 bytes of spills.) */
template <typename DT, int D>
static __device__ __forceinline__ void attn_bwd_dkv_row(const float *dk_acc, const float *dv_acc, uint16_t *dk_row,
                                                        uint16_t *dv_row, int64_t src0, int64_t step, int32_t group,
                                                        int32_t lane)
{
    static_assert(D % 2 == 0, "pairs");
#pragma unroll
    for (int32_t d = 2 * lane; d < D; d += 64) {
        float2 sk = make_float2(0.0f, 0.0f), sv = make_float2(0.0f, 0.0f);
        for (int32_t g = 0; g < group; g++) {
            const float2 k = *reinterpret_cast<const float2 *>(dk_acc + src0 + g * step + d);
            const float2 v = *reinterpret_cast<const float2 *>(dv_acc + src0 + g * step + d);
            sk = make_float2(__fadd_rn(sk.x, k.x), __fadd_rn(sk.y, k.y));
            sv = make_float2(__fadd_rn(sv.x, v.x), __fadd_rn(sv.y, v.y));
        }
        attn_st_pair(dk_row + d, (uint32_t)DT::from_f(sk.x) | ((uint32_t)DT::from_f(sk.y) << 16));
        attn_st_pair(dv_row + d, (uint32_t)DT::from_f(sv.x) | ((uint32_t)DT::from_f(sv.y) << 16));
    }
}

/* The same for eight rows at once, a quad of lanes per row (lane 4 g + t4 the pairs
 * d = 8 t + 2 t4 of its quad's row), each row's dK and dV digest leaves hashed by its quad
 * (digest_leaves_quad_fn: lane 0 dK's, lane 1 dV's, lanes 2 and 3 rows of zeros) into
 * *leaf_k, *leaf_v: GQA's sum where the audit asks for the leaves. Each 16-byte chunk t of
 * the two rows is summed, stored and hashed in turn (holding both rows whole for the hash,
 * the kernel spilled at head dim 128 on sm_80). Each element is the same sum in the same
 * order, so the same bits. dk_row NULL: the quad has no row (it still takes part in the
 * shuffles). */
template <typename DT, int D>
static __device__ __forceinline__ void attn_bwd_dkv_row_hashed(const float *dk_acc, const float *dv_acc,
                                                               uint16_t *dk_row, uint16_t *dv_row, int64_t src0,
                                                               int64_t step, int32_t group, int32_t lane,
                                                               uint64_t *leaf_k, uint64_t *leaf_v)
{
    const uint64_t h = digest_leaves_quad_fn<D, 2>(
        [&](int32_t t, uint32_t(&x)[4]) {
            const int32_t d = 8 * t + 2 * (lane & 3);
            float2 sk = make_float2(0.0f, 0.0f), sv = make_float2(0.0f, 0.0f);
            for (int32_t g = 0; dk_row && g < group; g++) {
                const float2 k = *reinterpret_cast<const float2 *>(dk_acc + src0 + g * step + d);
                const float2 v = *reinterpret_cast<const float2 *>(dv_acc + src0 + g * step + d);
                sk = make_float2(__fadd_rn(sk.x, k.x), __fadd_rn(sk.y, k.y));
                sv = make_float2(__fadd_rn(sv.x, v.x), __fadd_rn(sv.y, v.y));
            }
            x[0] = (uint32_t)DT::from_f(sk.x) | ((uint32_t)DT::from_f(sk.y) << 16);
            x[1] = (uint32_t)DT::from_f(sv.x) | ((uint32_t)DT::from_f(sv.y) << 16);
            if (dk_row) {
                attn_st_pair(dk_row + d, x[0]);
                attn_st_pair(dv_row + d, x[1]);
            }
        },
        lane);
    if (dk_row && (lane & 3) == 0)
        *leaf_k = h;
    else if (dk_row && (lane & 3) == 1)
        *leaf_v = h;
}

/* GQA: dK, dV of kv head hk = sum over its q-heads g = 0 .. group-1, ascending. One warp
 * per row (b, hk, j) (attn_bwd_dkv_row): the row's index arithmetic (64-bit divisions) once
 * a row, not once an element; each element's sum and rounding as before, so the same
 * bits. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_dkv_sum_kernel(const struct attn_bwd_params p)
{
    const int64_t rows = (int64_t)p.s.batch * p.heads_kv * p.seqlen_k;
    const int32_t warps = ATTN_THREADS / 32, lane = threadIdx.x & 31;
    uint16_t *dk_g = static_cast<uint16_t *>(p.dk), *dv_g = static_cast<uint16_t *>(p.dv);
    for (int64_t row = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5); row < rows; row += (int64_t)gridDim.x * warps) {
        const int32_t bhk = (int32_t)(row / p.seqlen_k), j = (int32_t)(row - (int64_t)bhk * p.seqlen_k);
        const int32_t b = bhk / p.heads_kv, hk = bhk - b * p.heads_kv;
        attn_bwd_dkv_row<DT, D>(p.dk_acc, p.dv_acc, dk_g + b * p.dk_stride[0] + (int64_t)j * p.dk_stride[1] + hk * p.dk_stride[2],
                                dv_g + b * p.dv_stride[0] + (int64_t)j * p.dv_stride[1] + hk * p.dv_stride[2],
                                (((int64_t)b * p.heads_q + (int64_t)hk * p.group) * p.seqlen_k + j) * D,
                                (int64_t)p.seqlen_k * D, p.group, lane);
    }
}

/* attn_bwd_dkv_sum_kernel where the audit asks for the rows' digest leaves (leaf_dk,
 * leaf_dv: row-major (b, j, hk)): eight rows a warp, a quad each (attn_bwd_dkv_row_hashed).
 * A kernel of its own, so that the hashing's registers (74 at head dim 128 on sm_90a) do
 * not cost the plain sum, which every GQA backward runs, a block an SM; bound to one block
 * an SM, as without the bound ptxas held head dim 256's to 80 registers and spilled on
 * sm_80. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS, 1) attn_bwd_dkv_sum_hashed_kernel(const struct attn_bwd_params p)
{
    const int64_t rows = (int64_t)p.s.batch * p.heads_kv * p.seqlen_k;
    const int32_t warps = ATTN_THREADS / 32, lane = threadIdx.x & 31;
    uint16_t *dk_g = static_cast<uint16_t *>(p.dk), *dv_g = static_cast<uint16_t *>(p.dv);
    const int64_t warp = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5), all = (int64_t)gridDim.x * warps;
    for (int64_t r0 = 8 * warp; r0 < rows; r0 += 8 * all) { /* uniform across the warp */
        const int64_t row = r0 + (lane >> 2);
        uint16_t *dk_row = NULL, *dv_row = NULL;
        int64_t src0 = 0, leaf = 0;
        if (row < rows) {
            const int32_t bhk = (int32_t)(row / p.seqlen_k), j = (int32_t)(row - (int64_t)bhk * p.seqlen_k);
            const int32_t b = bhk / p.heads_kv, hk = bhk - b * p.heads_kv;
            dk_row = dk_g + b * p.dk_stride[0] + (int64_t)j * p.dk_stride[1] + hk * p.dk_stride[2];
            dv_row = dv_g + b * p.dv_stride[0] + (int64_t)j * p.dv_stride[1] + hk * p.dv_stride[2];
            src0 = (((int64_t)b * p.heads_q + (int64_t)hk * p.group) * p.seqlen_k + j) * D;
            leaf = ((int64_t)b * p.seqlen_k + j) * p.heads_kv + hk;
        }
        attn_bwd_dkv_row_hashed<DT, D>(p.dk_acc, p.dv_acc, dk_row, dv_row, src0, (int64_t)p.seqlen_k * D, p.group,
                                       lane, p.leaf_dk + leaf, p.leaf_dv + leaf);
    }
}

/* Blocks for a grid-stride kernel over `work` items of `per_block` each: at most 16 per SM. */
static inline uint32_t attn_bwd_rows_grid(int64_t work, int64_t per_block, int32_t sms)
{
    int64_t blocks = (work + per_block - 1) / per_block;
    const int64_t cap = (int64_t)(sms > 0 ? sms : 1) * 16;
    return (uint32_t)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

/* Whether the launch leaves the dQ accumulator unzeroed: v3's persistent kernels (dense, and
 * attn_vl.cu's) under a deterministic schedule copy each dQ tile's first addition (rank 0)
 * into dQacc instead of adding it to zeros (bwd_wg_write_ticket, bwd_wg_writer_at), which
 * saves the memset (4 bytes an element of dQ: 134 MB, about 45 us, at 16k tokens x 2048).
 * A tile that no kv-tile reaches (rows that see no key; attn_vl.cu: a sequence without
 * keys has no tiles at all) keeps its counter at 0, and the postprocess writes zeros for its
 * rows. The
 * bits are those of the additions to zeros: a copy of x is 0 + x (a bulk reduction, which
 * flushes subnormal inputs and results to zero) except for x = -0 or a subnormal x, and the
 * postprocess adds +0 with subnormals flushed to every element (bwd_tc_dq_plus0), which
 * leaves any other value as it is and makes those the +0 that 0 + x gave. */
static __host__ __device__ __forceinline__ bool attn_bwd_dq_first_stores(const struct attn_bwd_params &p)
{
    return p.wg && p.mode == ATTN_MODE_PERSISTENT && p.s.kind != SCHED_ATOMIC;
}

/* The dQ accumulator (fp32, rows x d; unless attn_bwd_dq_first_stores), the counters and
 * the job counter start at 0 on every launch. */
static inline cudaError_t attn_bwd_zero_state(const struct attn_bwd_params *p, int32_t d, cudaStream_t stream)
{
    const int64_t rows_q = (int64_t)p->s.bh * p->seqlen_q;
    const size_t tiles = (size_t)p->s.bh * (size_t)p->s.m_tiles;
    cudaError_t err;
    if ((!attn_bwd_dq_first_stores(*p) &&
         (err = cudaMemsetAsync(p->dq_acc, 0, sizeof(float) * (size_t)rows_q * d, stream)) != cudaSuccess) ||
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
    if constexpr (D % 64 == 0) {
        if (p->leaf_dk) { /* eight rows a warp */
            attn_bwd_dkv_sum_hashed_kernel<DT, D>
                <<<attn_bwd_rows_grid(rows_k, 8 * (ATTN_THREADS / 32), sms), ATTN_THREADS, 0, stream>>>(*p);
            return cudaGetLastError();
        }
    }
    attn_bwd_dkv_sum_kernel<DT, D><<<attn_bwd_rows_grid(rows_k, ATTN_THREADS / 32, sms), ATTN_THREADS, 0, stream>>>(*p);
    return cudaGetLastError();
}

#endif
