// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_fwd_wg.cu - v3's forward kernel (sm_90a): warp-specialised, on Hopper warpgroup
 * products (wgmma). Head dims 64, 128 and 256, fp16/bf16, full and causal masks, GQA; the
 * same outputs as v2's forward (attn_fwd_tc.cu): O, and LSE = ln sum_j exp(scale q_i k_j),
 * +inf (and O = 0) for a row that sees no key. Head dim 256 has 64-key tiles
 * (FWD_WG_BN_OF; below, read 128 keys as 64 there): its O takes 128 registers a consumer
 * thread and its 2-stage K and V rings 128 KiB beside Q's 64 KiB. v2 has no 256; v1's
 * forward (CUDA cores) ran it at about 20 TFLOPS. (v3's backward at 256: bwd_wgmma.cuh.)
 *
 * Reference: FlashAttention-3 (Shah et al., arXiv 2407.08608, Sec. 3.1 and Algorithm 1:
 * "producer warpgroup", "consumer warpgroups", setmaxnreg); the facts used are collected
 * in ../shared/docs/hopper.md Sec. 2 and 5. This is steps F1-F3 of that note's Sec. 7 and
 * F4's TMA loads.
 * No code of FA3 or ThunderKittens is reproduced. FA3's names: kBlockM = FWD_WG_BM,
 * kBlockN = FWD_WG_BN_OF(D), kStages = FWD_WG_STAGES; its producer is one warp issuing TMA, so
 * is ours (two threads, one per ring), with a cp.async producer for the views TMA cannot
 * describe.
 *
 * CTAs of 384 threads (three warpgroups), one an SM, each taking (128-row q-tile,
 * batch*head) tiles in turn, heaviest first (under a causal mask in heavy/light pairs: the
 * persistent scheduler, fwd_wg.cuh), each tile as follows:
 *   warpgroup 0, the producer ("load"): gives its registers up (setmaxnreg.dec) and fills
 *     two 2-stage rings (FWD_WG_STAGES), one for K and one for V, and Q once, in one of
 *     two ways (two instances of the kernel, template argument TMA; the host picks):
 *     - TMA (step F4's loads; FWD_WG_LOAD_REGS_TMA): lane 0 of warp 0 loads Q and the K
 *       tiles, lane 0 of warp 1 the V tiles, each tile as D/64 boxes of its rows x 64
 *       columns (cp.async.bulk.tensor.4d) through a tensor map of the view as (head_dim,
 *       seqlen, heads, batch) built on the host per call with 128-byte swizzle: a box
 *       lands as one 128-row column block of the attn_sw128 layout below, the same bytes
 *       cp.async puts there. Rows past seqlen are outside the map's extent and land as
 *       zeros, never the next sequence's or head's rows. Lanes 1-31 of warps 0-1 and
 *       all of warps 2-3 exit at once. Needs 16-byte aligned bases and strides.
 *     - cp.async (every other view; FWD_WG_LOAD_REGS_CP): warps 0-1 copy Q once and then
 *       the K tiles, warps 2-3 the V tiles, 16 bytes a lane (plain loads where a row is
 *       not 16-byte aligned, so every stride works and the same bytes land); rows past
 *       the tensor's end are zero-filled.
 *   warpgroups 1 and 2, the consumers ("mma"): take the registers (setmaxnreg.inc);
 *     consumer c owns q rows 64 c .. 64 c + 63 of the tile. Their code is the same for
 *     both producers. One that owns no row (the tile ends before 64 c) computes nothing
 *     and only frees each stage as it fills (fwd_wg_idle).
 * The rings: k_full[s] (v_full[s]) completes tile n's phase when its bytes are in shared
 * memory and visible to wgmma (the async proxy): with TMA, on the loading thread's one
 * arrival (arrive.expect_tx of the tile's FWD_WG_BN_OF(D) x D x 2 bytes, made before the boxes
 * are issued) and the boxes' complete_tx of those bytes; with cp.async, on the arrivals
 * of the 64 threads that copy K (V), each after its copies landed (cp.async.wait_group)
 * and a proxy fence. k_empty[s] (v_empty[s]) completes when all 256 consumer threads have
 * waited for the product that reads the tile (S for K, P V for V) and arrived (release;
 * the loader acquires it before overwriting the stage). Stage s = n % 2, phase parity
 * (n / 2) % 2. q_full likewise for Q, once (not loaded at all when no kv-tile is).
 *
 * Per kv-tile n = 0 .. n_hi - 1 (128 keys, ascending), consumer c (shapes per warpgroup):
 *   S (64 x 128)  = Q_c K_n^T        SS wgmma m64n128k16, d ascending (D/16 steps)
 *   online softmax in registers, base 2 (scale2 = log2(e) scale; masks only on tiles
 *   that hide some element):
 *     m' = max(m, scale2 rowmax S),  P = 2^(scale2 S - m') (one FFMA and one MUFU.EX2),
 *     corr = 2^(m - m'),  l' = l corr + rowsum P (each thread sums its own 32 columns;
 *     the 4 lanes of a row add theirs once, at the end),  O' = O corr
 *   O (64 x D)   += P V_n             RS wgmma m64nDk16: P, rounded to the input dtype,
 *                                     from registers (the S accumulator's layout is the A
 *                                     fragment's: attn_wgmma.h), V MN-major; keys ascending
 * and at the end O = O / l, LSE = ln(2) m + ln l. Each thread holds 64 S floats, D/2 O
 * floats and P as 32 packed pairs. O is stored from registers (4-byte stores).
 *
 * Overlap (step F2): the P V product of tile n - 1 runs on the tensor cores while the
 * softmax of tile n runs (issued right after S(n); see fwd_wg_consume). Ping-pong (step
 * F3, FWD_WG_TURNS): at head dim 256 only, the two consumers take turns issuing their
 * products (named barriers, FA3's "warp scheduler barriers"); at 64 and 128 they issue as
 * they please, measured faster (fwd_wg.cuh). Not yet here (../shared/docs/hopper.md Sec. 7, F4-F5): an smem + TMA-store
 * epilogue, wider kv tiles.
 *
 * Determinism. Every element of S is one chain of wgmma over d ascending; every element
 * of O one chain over kv-tiles ascending and, within a tile, keys ascending in k16 steps;
 * row maxima and sums are fixed in-thread loops and a fixed xor-shuffle tree over the 4
 * lanes of a row. Nothing depends on timing or on which SM runs what, so the bits are a
 * function of the inputs, shape, dtype, mask and scale (and the build and GPU type). They
 * differ from v2's forward (128-key tiles, other sum groupings), and a row's bits depend
 * on the 128-key tile grid only: the 128-row q-tile's causal range adds tiles a row sees
 * nothing of, which changes no value (corr = 2^0 = 1, P = 0); at head dim 256 on the
 * 64-key grid, so its bits differ from v1's (64-key tiles too, other sum groupings and
 * products). The two producers put the
 * same bytes in shared memory, so they give the same bits.
 */
#include "kernels/cuda/fwd_wg.cuh"

#include <cudaTypedefs.h>
#include <string.h>

template <typename DT, int D, bool TMA, int NC>
__global__ void __launch_bounds__(FWD_WG_THREADS_OF(NC), 1)
    attn_fwd_wg_kernel(const struct attn_fwd_params p, const __grid_constant__ fwd_wg_maps maps)
{
#if ATTN_WGMMA
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *raw = smem_raw;
    const uint32_t at = attn_smem_u32(raw);
    raw += ((at + FWD_WG_ALIGN - 1) & ~(uint32_t)(FWD_WG_ALIGN - 1)) - at;
    fwd_wg_smem<D, NC> &sm = *reinterpret_cast<fwd_wg_smem<D, NC> *>(raw);

    /* Heaviest tiles first: with a causal mask the last q-tiles see the most keys. */
    const int32_t M = (p.seqlen_q + 64 * NC - 1) / (64 * NC);
    if (threadIdx.x == 0)
        fwd_wg_init<D, TMA, NC>(sm);
    __syncthreads(); /* the barriers are set up before anyone uses them */
    fwd_wg_run_tiles<DT, D, TMA, NC>(p, maps, sm, M, M * p.geo.bh);
#else
    (void)p;
    (void)maps;
    __trap(); /* sm_80 never runs v3 */
#endif
}

/* ---- host: tensor maps, launch ------------------------------------------------------ */

/* cuTensorMapEncodeTiled, from the driver through the runtime (nothing links libcuda), or
 * NULL where the driver lacks it (then every call runs the cp.async kernel). Resolved once,
 * at the first init; a failed look-up's error is cleared there so no launch reports it. */
static PFN_cuTensorMapEncodeTiled_v12000 fwd_wg_encoder(void)
{
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *f = NULL;
        cudaDriverEntryPointQueryResult got = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &got) !=
                cudaSuccess ||
            got != cudaDriverEntryPointSuccess) {
            (void)cudaGetLastError();
            f = NULL;
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    }();
    return fn;
}

/* The tensor map of a (batch, seqlen, heads, D) view with element strides stride[0..2]
 * (b, s, h; d contiguous) as the 4D tensor (D, seqlen, heads, batch), innermost first, in
 * boxes of 64 x rows x 1 x 1 (rows: the tile's, FWD_WG_BM for Q, FWD_WG_BN_OF(D) for K
 * and V) with 128-byte swizzle. False (no map: the caller runs the
 * cp.async kernel) where TMA cannot describe the view: a base or a stride (of a dim longer
 * than 1) that is not a positive multiple of 16 bytes below 2^40, or an encoder refusal. A
 * dim of length 1 is never stepped along, so its stride is any legal value. seqlen being
 * its own dim, rows past it are out of bounds (zeros), whatever lies there in memory. */
static bool fwd_wg_map(CUtensorMap *map, PFN_cuTensorMapEncodeTiled_v12000 enc, const void *data, int32_t D,
                       int32_t batch, int32_t seqlen, int32_t heads, const int64_t stride[3], uint32_t rows)
{
    if (!enc || ((uintptr_t)data & 15u) || batch < 1 || seqlen < 1 || heads < 1)
        return false;
    const cuuint64_t dim[4] = {(cuuint64_t)D, (cuuint64_t)seqlen, (cuuint64_t)heads, (cuuint64_t)batch};
    const int64_t elems[3] = {stride[1], stride[2], stride[0]}; /* of dims 1, 2, 3 */
    cuuint64_t bytes[3];
    for (int i = 0; i < 3; i++) {
        const bool ok = elems[i] > 0 && elems[i] < ((int64_t)1 << 39) && (elems[i] * 2) % 16 == 0;
        if (!ok && dim[i + 1] > 1)
            return false;
        bytes[i] = ok ? (cuuint64_t)elems[i] * 2 : 16;
    }
    const cuuint32_t box[4] = {FWD_WG_BOX_COLS, rows, 1, 1}, step[4] = {1, 1, 1, 1};
    return enc(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void *>(data), dim, bytes, box, step,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* the backward's Q and dO (bwd_wgmma.cuh's bwd_wg_qmaps): boxes of 64 x rows */
bool cuattn__tma_map_4d(CUtensorMap *map, const void *data, int32_t D, int32_t batch, int32_t seqlen,
                        int32_t heads, const int64_t stride[3], uint32_t rows)
{
    return fwd_wg_map(map, fwd_wg_encoder(), data, D, batch, seqlen, heads, stride, rows);
}

bool cuattn__fwd_wg_maps(fwd_wg_maps *maps, const struct attn_fwd_params *p, int32_t head_dim, uint32_t q_rows)
{
    memset(maps, 0, sizeof *maps);
    const int32_t batch = p->geo.batch, heads_kv = p->heads_q / p->group;
    const PFN_cuTensorMapEncodeTiled_v12000 enc = fwd_wg_encoder();
    const uint32_t bn = FWD_WG_BN_OF(head_dim);
    const int32_t cols = p->d_cols ? p->d_cols : head_dim; /* past it: zeros */
    return enc && fwd_wg_map(&maps->q, enc, p->q, cols, batch, p->seqlen_q, p->heads_q, p->q_stride, q_rows) &&
           fwd_wg_map(&maps->k, enc, p->k, cols, batch, p->seqlen_k, heads_kv, p->k_stride, bn) &&
           fwd_wg_map(&maps->v, enc, p->v, cols, batch, p->seqlen_k, heads_kv, p->v_stride, bn);
}

bool cuattn__fwd_wg_tma_ok(const struct attn_fwd_params *p, int32_t head_dim)
{
    fwd_wg_maps maps;
    return cuattn__fwd_wg_maps(&maps, p, head_dim);
}

template <typename DT, int D, int NC = FWD_WG_NC_OF(D)>
static cudaError_t fwd_wg_launch(const struct attn_fwd_params *p, int allow_tma, int *ret_tma, int32_t ctas,
                                 cudaStream_t stream)
{
    constexpr int BM = 64 * NC, threads = FWD_WG_THREADS_OF(NC);
    constexpr size_t bytes = fwd_wg_kern<D, NC>::bytes;
    uint32_t blocks = (uint32_t)((p->seqlen_q + BM - 1) / BM) * (uint32_t)p->geo.bh;
    if (ctas > 0 && blocks > (uint32_t)ctas)
        blocks = (uint32_t)ctas; /* persistent: each CTA takes several q-tiles */
    fwd_wg_maps maps;
    memset(&maps, 0, sizeof maps);
    const bool tma = allow_tma && cuattn__fwd_wg_maps(&maps, p, D, BM);
    if (p->d_cols && !tma) /* cp.async would read the caller's rows as D wide */
        return cudaErrorNotSupported;
    if (tma)
        attn_fwd_wg_kernel<DT, D, true, NC><<<blocks, threads, bytes, stream>>>(*p, maps);
    else
        attn_fwd_wg_kernel<DT, D, false, NC><<<blocks, threads, bytes, stream>>>(*p, maps);
    if (ret_tma)
        *ret_tma = tma;
    return cudaGetLastError();
}

template <typename DT, int D, int NC = FWD_WG_NC_OF(D)>
static cudaError_t fwd_wg_attr(size_t smem_optin)
{
    constexpr size_t bytes = fwd_wg_kern<D, NC>::bytes;
    if (bytes > smem_optin)
        return cudaSuccess; /* unusable here: the host runs v2's forward */
    cudaError_t err = cudaFuncSetAttribute(attn_fwd_wg_kernel<DT, D, true, NC>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (err != cudaSuccess)
        return err;
    return cudaFuncSetAttribute(attn_fwd_wg_kernel<DT, D, false, NC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)bytes);
}

cudaError_t cuattn__fwd_wg_init(size_t smem_optin)
{
    cudaError_t err;
    if ((err = fwd_wg_attr<attn_bf16, 64>(smem_optin)) != cudaSuccess ||
        (err = fwd_wg_attr<attn_bf16, 128>(smem_optin)) != cudaSuccess ||
        (err = fwd_wg_attr<attn_f16, 64>(smem_optin)) != cudaSuccess ||
        (err = fwd_wg_attr<attn_bf16, 64, 2>(smem_optin)) != cudaSuccess ||
        (err = fwd_wg_attr<attn_f16, 64, 2>(smem_optin)) != cudaSuccess ||
        (err = fwd_wg_attr<attn_f16, 128>(smem_optin)) != cudaSuccess ||
        (err = fwd_wg_attr<attn_bf16, 256>(smem_optin)) != cudaSuccess ||
        (err = fwd_wg_attr<attn_f16, 256>(smem_optin)) != cudaSuccess)
        return err;
    (void)fwd_wg_encoder(); /* resolve it now, not inside a call */
    return cudaSuccess;
}

size_t cuattn__fwd_wg_smem_bytes(int32_t head_dim)
{
    return head_dim == 64    ? fwd_wg_kern<64, FWD_WG_NC_OF(64)>::bytes
           : head_dim == 128 ? fwd_wg_kern<128>::bytes
           : head_dim == 256 ? fwd_wg_kern<256>::bytes
                             : 0;
}

int cuattn__fwd_wg_consumers(const struct attn_fwd_params *p, int32_t head_dim, int32_t nc)
{
    if (head_dim != 64)
        return FWD_WG_NC_OF(head_dim);
    if (nc == 2 || nc == 3)
        return nc; /* a test's */
    return p->geo.mask == SCHED_MASK_CAUSAL && p->seqlen_q <= FWD_WG_NC2_CAUSAL_MAX ? 2 : FWD_WG_NC64;
}

cudaError_t cuattn__fwd_wg_launch(const struct attn_fwd_params *p, enum dtype_kind dt, int32_t head_dim,
                                  int allow_tma, int *ret_tma, int32_t ctas, int32_t nc, cudaStream_t stream)
{
    const int bf = dt == DTYPE_BF16;
    if (ret_tma)
        *ret_tma = 0;
    switch (head_dim) {
    case 64:
        if (cuattn__fwd_wg_consumers(p, 64, nc) == 2)
            return bf ? fwd_wg_launch<attn_bf16, 64, 2>(p, allow_tma, ret_tma, ctas, stream)
                      : fwd_wg_launch<attn_f16, 64, 2>(p, allow_tma, ret_tma, ctas, stream);
        return bf ? fwd_wg_launch<attn_bf16, 64>(p, allow_tma, ret_tma, ctas, stream)
                  : fwd_wg_launch<attn_f16, 64>(p, allow_tma, ret_tma, ctas, stream);
    case 128:
        return bf ? fwd_wg_launch<attn_bf16, 128>(p, allow_tma, ret_tma, ctas, stream)
                  : fwd_wg_launch<attn_f16, 128>(p, allow_tma, ret_tma, ctas, stream);
    case 256:
        return bf ? fwd_wg_launch<attn_bf16, 256>(p, allow_tma, ret_tma, ctas, stream)
                  : fwd_wg_launch<attn_f16, 256>(p, allow_tma, ret_tma, ctas, stream);
    default:
        return cudaErrorInvalidValue;
    }
}
