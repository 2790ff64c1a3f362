// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_fwd_tc.cu - v2 of the forward kernel: tensor cores (mma.sync m16n8k16, fp16/bf16
 * inputs, fp32 accumulators), one CTA of 128 threads (4 warps) per (128-row q-tile,
 * batch*head), heaviest q-tiles (the last, under a causal mask) launched first.
 *
 * Warp w owns query rows 32w .. 32w+31 of the q-tile, as two m16 tiles, so each ldmatrix
 * of K or V feeds two products. For each 64-row kv-tile n = 0 .. n_hi-1, ascending, it
 * computes its (32, 64) slice of S in registers and runs the online softmax on it (the
 * same formulas as v1, in base 2):
 *     S2 = log2(e) scale Q K^T (-inf where masked),  m' = max(m, rowmax S2),
 *     l' = l 2^(m - m') + rowsum 2^(S2 - m'),  O' = O 2^(m - m') + 2^(S2 - m') V,
 * and at the end O = O / l, LSE = ln(2) m + ln l; rows that saw no key get O = 0 and
 * LSE = +inf. 2^x is one MUFU.EX2 (attn_ex2). P = 2^(S2 - m') is rounded to the input
 * dtype for the P V product, as FlashAttention does; l sums the unrounded fp32 P. Masks
 * are applied only on tiles that hide some element (diagonal, ragged ends).
 *
 * Fragments (attn_cuda_int.h): S is 2 x 8 n-tiles of C fragments; two adjacent n-tiles of
 * S are exactly the A fragment of P for one k16 step of P V (the C layout of m16n8 pairs
 * matches the A layout of m16k16), so P never leaves registers. O is 2 x D/8 n-tiles of C
 * fragments, D floats per thread. Q (128, D + 8) and K, V (64, D + 8) tiles sit in shared
 * memory; Q and K are read with ldmatrix, V with ldmatrix.trans.
 *
 * Pipeline (cp.async): K and V are double-buffered; tile n + 1 is in flight while tile n
 * computes. Resources (ptxas 13.0, sm_90a): D = 128: 255 registers, 104 KB of shared
 * memory; D = 64: 236 registers, 55 KB; no spills; 2 CTAs (8 warps) per SM either way.
 *
 * Determinism. Each element of S is one chain of mma.sync over d ascending (k16 chunks);
 * each element of O one chain over kv-tiles and, within a tile, j ascending; row maxima and
 * sums are fixed in-thread loops then a fixed xor-shuffle tree over the 4 lanes of a row.
 * Tensor-core results are a function of the fragments and the accumulator, so the output
 * depends on the inputs alone (and the kernel build and GPU type). A row's arithmetic is
 * that of 64-row q-tiles: the upper rows of a 128-row causal tile also meet a kv-tile they
 * see nothing of, which changes no value (the correction is 2^0 = 1 and P = 0), so the
 * bits are those of 64 x 64 tiles, as reported.
 *
 * The kernel's code is in fwd_tc.cuh, which attn_vl.cu instantiates again with windows,
 * softcap and packed batches; this file instantiates the dense kernel.
 */
#include "kernels/cuda/attn_cuda_int.h"
#include "kernels/cuda/fwd_tc.cuh"

#include <math.h>

template <typename DT, int D>
__global__ void __launch_bounds__(FWD_TC_THREADS, 2) attn_fwd_tc_kernel(const struct attn_fwd_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    fwd_tc_smem<D> &sm = *reinterpret_cast<fwd_tc_smem<D> *>(smem_raw);
    /* Heaviest tiles first: with a causal mask the last q-tiles see the most keys. */
    const int32_t M = (p.seqlen_q + FWD_TC_BM - 1) / FWD_TC_BM;
    const int32_t m = M - 1 - (int32_t)(blockIdx.x % (uint32_t)M), bh = (int32_t)(blockIdx.x / (uint32_t)M);
    fwd_tc_body<DT, D, false>(p, sm, m, bh);
}

template <typename DT, int D>
static cudaError_t fwd_tc_launch(const struct attn_fwd_params *p, cudaStream_t stream)
{
    const uint32_t blocks = (uint32_t)((p->seqlen_q + FWD_TC_BM - 1) / FWD_TC_BM) * (uint32_t)p->geo.bh;
    attn_fwd_tc_kernel<DT, D><<<blocks, FWD_TC_THREADS, sizeof(fwd_tc_smem<D>), stream>>>(*p);
    return cudaGetLastError();
}

template <typename DT, int D>
static cudaError_t fwd_tc_attr(size_t smem_optin)
{
    if (sizeof(fwd_tc_smem<D>) > smem_optin)
        return cudaSuccess; /* unusable here: cuattn_impl_for sends this dim to v1 */
    return cudaFuncSetAttribute(attn_fwd_tc_kernel<DT, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)sizeof(fwd_tc_smem<D>));
}

cudaError_t cuattn__fwd_tc_init(size_t smem_optin)
{
    cudaError_t err;
    if ((err = fwd_tc_attr<attn_bf16, 64>(smem_optin)) != cudaSuccess ||
        (err = fwd_tc_attr<attn_bf16, 128>(smem_optin)) != cudaSuccess ||
        (err = fwd_tc_attr<attn_f16, 64>(smem_optin)) != cudaSuccess ||
        (err = fwd_tc_attr<attn_f16, 128>(smem_optin)) != cudaSuccess)
        return err;
    return cudaSuccess;
}

size_t cuattn__fwd_tc_smem_bytes(int32_t head_dim)
{
    return head_dim == 64 ? sizeof(fwd_tc_smem<64>) : head_dim == 128 ? sizeof(fwd_tc_smem<128>) : 0;
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
