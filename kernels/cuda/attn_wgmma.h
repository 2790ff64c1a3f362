// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_wgmma.h - Hopper (sm_90a) warpgroup products for the v3 backward: shared-memory
 * tiles in the 128-byte swizzled layout, their matrix descriptors, and wgmma.mma_async
 * m64nNk16 (N = 32, 64, 128; fp16/bf16 inputs, fp32 accumulators, both operands in shared
 * memory; or, RS, A from registers: N = 64, 128, 256), the descriptors of K-major and
 * MN-major tile slices, the mbarrier wait/arrive the warp-specialised kernels use
 * (v3's backward: bwd_wgmma.cuh; v3's forward: attn_fwd_wg.cu), and TMA tile loads that
 * complete on an mbarrier (v3's forward). Not a public header;
 * C++ only, included after attn_cuda_int.h.
 *
 * The tile layout (attn_sw128 in attn_cuda_int.h). A [rows][C] tile of 16-bit elements (C a multiple of 64) is stored as
 * C/64 column blocks of rows x 128 bytes, one after another; in row r of a block, 16-byte
 * chunk c (elements 8c .. 8c+7 of the block) sits at chunk c ^ (r % 8). This is the
 * hardware's 128-byte swizzle as long as every tile starts on a 1024-byte boundary, so
 * one layout serves both ways a product reads a tile:
 *   K-major (the reduction index runs along the 128-byte rows: Q, dO, K, V, dS as the
 *     left factor of S, dP, dQ): 8-row groups 1024 bytes apart (SBO); a k16 slice starts
 *     32 bytes further along the row per step, the next column block rows x 128 bytes on.
 *   MN-major (the output index runs along the rows: P^T, dS^T, dO, Q, K as factors of
 *     dV, dK, dQ): k16 = two 8-row groups 1024 bytes apart (SBO), column blocks of 64
 *     output indices rows x 128 bytes apart (LBO); the instruction's transpose flag is set.
 *
 * RS form (A from registers, B by descriptor): thread (warp w, lane = 4 g + t) holds A's
 * rows 16 w + g and 16 w + g + 8 of the k16 slice as four 32-bit pairs: a0 (g, 2t..2t+1),
 * a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..) - mma.sync's A fragment. Element pairs
 * 8 kk + {0,1}, {2,3}, {4,5}, {6,7} of an m64nN accumulator (columns 16 kk ..) are
 * exactly a0 .. a3 of k16 slice kk, so a product's output feeds the next as A in place.
 *
 * Accumulators: m64nN gives each thread of the warpgroup N/2 floats; warp w of the group
 * holds rows 16 w + g and 16 w + g + 8 (g = lane / 4), and d[4 j + e] is column
 * 8 j + 2 (lane % 4) + (e & 1) of row 16 w + g + 8 (e >> 1) - mma.sync's C fragment,
 * repeated over the N/8 column blocks.
 *
 * Every product here is one fixed sequence of wgmma instructions, each a fixed function
 * of its operands: nothing depends on timing, so the bits repeat.
 */
#ifndef DASH_ATTN_WGMMA_H
#define DASH_ATTN_WGMMA_H

#include "kernels/cuda/attn_cuda_int.h"

#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_WGMMA 1 /* this compilation pass can emit wgmma (sm_90a) */
#else
#define ATTN_WGMMA 0
#endif

/* The matrix descriptor of a 128-byte swizzled operand starting at smem (see above). */
static __device__ __forceinline__ uint64_t attn_wg_desc(const void *smem, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((attn_smem_u32(smem) & 0x3FFFFu) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
           ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}

#if ATTN_WGMMA
/* Registers a product reads or writes are settled before the next wgmma uses them. */
static __device__ __forceinline__ void attn_wg_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void attn_wg_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
/* Wait until at most N committed groups of this warpgroup are still running. */
template <int N>
static __device__ __forceinline__ void attn_wg_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* Generic-proxy writes of shared memory (stores, cp.async) become visible to wgmma. */
static __device__ __forceinline__ void attn_wg_smem_fence(void)
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* One wgmma.mma_async m64nNk16 with fp32 accumulators d (N/2 a thread), both operands by
 * descriptor, scale-d from a register (0: d's old value is ignored), transposes TA, TB.
 * The operand numbers after the N/2 accumulators - A, B, scale-d, TA, TB - are spelled
 * out per N, since asm text takes literals only. */
#define ATTN_WG_MMA_FN(NAME, SHAPE, TY, NREG, DREGS, DOUTS, A, B, SC, TA_, TB_)                  \
    template <int TA, int TB>                                                                \
    static __device__ __forceinline__ void NAME(float (&d)[NREG], uint64_t da, uint64_t db, int32_t scale_d) \
    {                                                                                        \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SC ", 0;\n"                        \
                     "wgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " {" DREGS "}, %" #A \
                     ", %" #B ", p, 1, 1, %" #TA_ ", %" #TB_ ";\n}\n"                            \
                     : DOUTS                                                                 \
                     : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));                    \
    }

/* The accumulator operands of m64n32/64/128/256: each list extends the one before. */
#define ATTN_WG_DREGS_16 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define ATTN_WG_DREGS_32 \
    ATTN_WG_DREGS_16 ", " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define ATTN_WG_DREGS_64 \
    ATTN_WG_DREGS_32 ", " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define ATTN_WG_DOUTS_16 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define ATTN_WG_DOUTS_32 \
    ATTN_WG_DOUTS_16, \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define ATTN_WG_DOUTS_64 \
    ATTN_WG_DOUTS_32, \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#define ATTN_WG_DREGS_128 \
    ATTN_WG_DREGS_64 ", " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define ATTN_WG_DOUTS_128 \
    ATTN_WG_DOUTS_64, \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

ATTN_WG_MMA_FN(attn_wg_bf16_n32, "m64n32k16", "bf16", 16, ATTN_WG_DREGS_16, ATTN_WG_DOUTS_16, 16, 17, 18, 19, 20)
ATTN_WG_MMA_FN(attn_wg_bf16_n64, "m64n64k16", "bf16", 32, ATTN_WG_DREGS_32, ATTN_WG_DOUTS_32, 32, 33, 34, 35, 36)
ATTN_WG_MMA_FN(attn_wg_bf16_n128, "m64n128k16", "bf16", 64, ATTN_WG_DREGS_64, ATTN_WG_DOUTS_64, 64, 65, 66, 67, 68)
ATTN_WG_MMA_FN(attn_wg_f16_n32, "m64n32k16", "f16", 16, ATTN_WG_DREGS_16, ATTN_WG_DOUTS_16, 16, 17, 18, 19, 20)
ATTN_WG_MMA_FN(attn_wg_f16_n64, "m64n64k16", "f16", 32, ATTN_WG_DREGS_32, ATTN_WG_DOUTS_32, 32, 33, 34, 35, 36)
ATTN_WG_MMA_FN(attn_wg_f16_n128, "m64n128k16", "f16", 64, ATTN_WG_DREGS_64, ATTN_WG_DOUTS_64, 64, 65, 66, 67, 68)

/* d (+)= A B over one k16 slice: m64nN, TA/TB 1 for an MN-major operand; scale_d 0
 * ignores d's old value (the first slice of a product). */
template <typename DT, int N, int TA, int TB>
static __device__ __forceinline__ void attn_wg_mma(float (&d)[N / 2], uint64_t da, uint64_t db, int32_t scale_d)
{
    static_assert(N == 32 || N == 64 || N == 128, "m64nNk16 with N 32, 64 or 128");
    if constexpr (DT::is_bf16) {
        if constexpr (N == 32)
            attn_wg_bf16_n32<TA, TB>(d, da, db, scale_d);
        else if constexpr (N == 64)
            attn_wg_bf16_n64<TA, TB>(d, da, db, scale_d);
        else
            attn_wg_bf16_n128<TA, TB>(d, da, db, scale_d);
    } else {
        if constexpr (N == 32)
            attn_wg_f16_n32<TA, TB>(d, da, db, scale_d);
        else if constexpr (N == 64)
            attn_wg_f16_n64<TA, TB>(d, da, db, scale_d);
        else
            attn_wg_f16_n128<TA, TB>(d, da, db, scale_d);
    }
}
/* The RS form: d (+)= A B with A from registers a (4 pairs a thread, above), B by
 * descriptor (TB 1: MN-major). Operand numbers after the N/2 accumulators: a0..a3, B,
 * scale-d, TB. */
#define ATTN_WG_RS_FN(NAME, SHAPE, TY, NREG, DREGS, DOUTS, A0, A1, A2, A3, B, SC, TB_)          \
    template <int TB>                                                                        \
    static __device__ __forceinline__ void NAME(float (&d)[NREG], const uint32_t (&a)[4], uint64_t db, \
                                                int32_t scale_d)                             \
    {                                                                                        \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SC ", 0;\n"                        \
                     "wgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " {" DREGS "}, {%" #A0 \
                     ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #B ", p, 1, 1, %" #TB_ ";\n}\n"           \
                     : DOUTS                                                                 \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB)); \
    }
ATTN_WG_RS_FN(attn_wg_rs_bf16_n64, "m64n64k16", "bf16", 32, ATTN_WG_DREGS_32, ATTN_WG_DOUTS_32, 32, 33, 34, 35, 36, 37, 38)
ATTN_WG_RS_FN(attn_wg_rs_bf16_n128, "m64n128k16", "bf16", 64, ATTN_WG_DREGS_64, ATTN_WG_DOUTS_64, 64, 65, 66, 67, 68, 69, 70)
ATTN_WG_RS_FN(attn_wg_rs_f16_n64, "m64n64k16", "f16", 32, ATTN_WG_DREGS_32, ATTN_WG_DOUTS_32, 32, 33, 34, 35, 36, 37, 38)
ATTN_WG_RS_FN(attn_wg_rs_f16_n128, "m64n128k16", "f16", 64, ATTN_WG_DREGS_64, ATTN_WG_DOUTS_64, 64, 65, 66, 67, 68, 69, 70)
ATTN_WG_RS_FN(attn_wg_rs_bf16_n256, "m64n256k16", "bf16", 128, ATTN_WG_DREGS_128, ATTN_WG_DOUTS_128, 128, 129, 130, 131, 132, 133, 134)
ATTN_WG_RS_FN(attn_wg_rs_f16_n256, "m64n256k16", "f16", 128, ATTN_WG_DREGS_128, ATTN_WG_DOUTS_128, 128, 129, 130, 131, 132, 133, 134)

/* d (+)= A B over one k16 slice, A from registers (RS form): m64nN, TB 1 for an MN-major B. */
template <typename DT, int N, int TB>
static __device__ __forceinline__ void attn_wg_mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db,
                                                      int32_t scale_d)
{
    static_assert(N == 64 || N == 128 || N == 256, "RS m64nNk16 with N 64, 128 or 256");
    if constexpr (DT::is_bf16) {
        if constexpr (N == 64)
            attn_wg_rs_bf16_n64<TB>(d, a, db, scale_d);
        else if constexpr (N == 128)
            attn_wg_rs_bf16_n128<TB>(d, a, db, scale_d);
        else
            attn_wg_rs_bf16_n256<TB>(d, a, db, scale_d);
    } else {
        if constexpr (N == 64)
            attn_wg_rs_f16_n64<TB>(d, a, db, scale_d);
        else if constexpr (N == 128)
            attn_wg_rs_f16_n128<TB>(d, a, db, scale_d);
        else
            attn_wg_rs_f16_n256<TB>(d, a, db, scale_d);
    }
}

/* Keep the compiler from moving reads or writes of accumulator registers across a wgmma
 * fence or wait: to it, the asynchronous product's registers change only at the asm. */
template <int N>
static __device__ __forceinline__ void attn_wg_pin(float (&d)[N])
{
#pragma unroll
    for (int e = 0; e < N; e++)
        asm volatile("" : "+f"(d[e])::"memory");
}
/* The same for the 32-bit pairs of an RS product's A operand: the product reads them
 * asynchronously, so nothing else may be given their registers before its wait. */
template <int N>
static __device__ __forceinline__ void attn_wg_pin(uint32_t (&a)[N])
{
#pragma unroll
    for (int e = 0; e < N; e++)
        asm volatile("" : "+r"(a[e])::"memory");
}

/* Descriptors of 128-byte swizzled tiles of `rows` rows (above): a K-major operand at
 * rows r0 .. (a multiple of 8), k16 slice from k0; an MN-major one at k rows k0 ..,
 * output index from c0. */
static __device__ __forceinline__ uint64_t attn_wg_kmajor(const uint16_t *tile, int32_t rows, int32_t r0, int32_t k0)
{
    return attn_wg_desc(tile + ((k0 >> 6) * rows * 64 + r0 * 64 + (k0 & 63)), 16, 1024);
}
static __device__ __forceinline__ uint64_t attn_wg_mnmajor(const uint16_t *tile, int32_t rows, int32_t k0, int32_t c0)
{
    return attn_wg_desc(tile + ((c0 >> 6) * rows * 64 + k0 * 64 + (c0 & 63)), (uint32_t)rows * 128, 1024);
}
#endif /* ATTN_WGMMA */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* mbarriers in shared memory (sm_90): init by one thread, then a CTA barrier before use. */
static __device__ __forceinline__ void attn_mbar_init(uint64_t *bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(attn_smem_u32(bar)), "r"(count) : "memory");
}

static __device__ __forceinline__ void attn_mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(attn_smem_u32(bar)) : "memory");
}

/* After the barriers' init, before the CTA barrier that publishes them: makes the inits
 * visible to the async proxy too (TMA's complete_tx). */
static __device__ __forceinline__ void attn_mbar_init_fence(void)
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/* One arrival on bar that also expects `bytes` more bytes of asynchronous copies (TMA's
 * complete_tx) in the current phase: the phase completes once every expected arrival has
 * come and every expected byte has landed. */
static __device__ __forceinline__ void attn_mbar_expect_tx(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(attn_smem_u32(bar)), "r"(bytes)
                 : "memory");
}

/* TMA. A tensor map (CUtensorMap, 128 bytes) lives in kernel parameter space
 * (__grid_constant__); map is its generic address. Prefetch it into the descriptor cache. */
static __device__ __forceinline__ void attn_tma_prefetch(const void *map)
{
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

/* Copy the box at element coordinates (c0, c1, c2, c3) (innermost first) of a 4D tensor
 * map to smem, completing its bytes on bar (complete_tx). Elements outside the tensor's
 * extents land as zeros and count as bytes all the same, so a box always completes
 * exactly its size. */
static __device__ __forceinline__ void attn_tma_load_4d(void *smem, const void *map, uint64_t *bar, int32_t c0,
                                                        int32_t c1, int32_t c2, int32_t c3)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(attn_smem_u32(smem)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(attn_smem_u32(bar))
                 : "memory");
}

/* Copy smem to the box at element coordinates (c0, c1, c2, c3) of a 4D tensor map (a bulk
 * async-group of the thread: commit with attn_tma_store_commit); elements outside the
 * tensor's extents are not written. The smem must not change until the group has read it
 * (cp.async.bulk.wait_group.read). */
static __device__ __forceinline__ void attn_tma_store_4d(const void *map, const void *smem, int32_t c0, int32_t c1,
                                                         int32_t c2, int32_t c3)
{
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(attn_smem_u32(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}

static __device__ __forceinline__ void attn_tma_store_commit(void)
{
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* Wait until the phase of parity `parity` has completed (parity 1 passes at once before
 * the first phase completes: the phase "before" it counts as complete). */
static __device__ __forceinline__ void attn_mbar_wait(uint64_t *bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(attn_smem_u32(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}
#endif

#endif
