// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_bwd_tc.cu - v2 and v3 of the backward kernels. v3 (sm_90 only; its own section
 * below) keeps everything of v2's described here but the products and the dQ hand-off of
 * the persistent mode. v2: the five products of a step on tensor cores
 * (mma.sync m16n8k16, fp16/bf16 inputs, fp32 accumulators), with the bookkeeping of
 * attn_bwd.cu (v1): the same schedules and ranks (kernels/sched/sched.h), dQ tile counters and
 * release sequence, the same persistent and interleaved modes sharing one step function,
 * the same scratch layout, GQA handling and outputs. q-tiles are 64 rows; kv-tiles are
 * BN = 128 rows by default (the schedule's block_n), or 64 when asked: each Q/dO tile
 * loaded then serves 128 keys, the warps' products are twice as wide, and a step's one dQ
 * turn covers twice the work (H200, hdim 128, 4k: about 1.9x the 64 x 64 kernel;
 * bench/results/gpu-v2-128-2026-11-29.md).
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
 * Warps and fragments (256 threads = 8 warps as a 2 x 4 grid, w1 = warp % 2, w2 = warp / 2;
 * layouts of the fragments in attn_cuda_int.h). Each warp covers 32 rows or columns of
 * every product where it can, so one ldmatrix of a B operand feeds two m16 tiles:
 *   S, dP (64 x BN):      warp owns q rows 32 w1 .. +32, kv columns BN/4 w2 .. +BN/4:
 *                         2 x BN/32 C fragments each; k = d, D/16 steps. Q, dO by ldmatrix
 *                         (A), K, V by ldmatrix (B, n-major).
 *   dV, dK (BN x D):      warp owns kv rows BN/4 w2 .. +BN/4, columns D/2 w1 .. +D/2:
 *                         BN/64 x D/16 C fragments each (BN D/256 floats per thread);
 *                         k = i, 4 steps. P^T, dS^T by ldmatrix.trans from P, dS (A); dO, Q
 *                         by ldmatrix.trans (B).
 *   dQp (64 x D):         warp owns q rows 32 w1 .. +32, columns D/4 w2 .. +D/4: 2 x D/32
 *                         C fragments (D/4 floats); k = j, BN/16 steps. dS by ldmatrix (A),
 *                         K by ldmatrix.trans (B).
 * The interleaved mode keeps a virtual SM's dK, dV and pending dQ partial in global
 * scratch, BWD_TC_VSM_FLOATS per thread.
 *
 * Shared memory: K, V of the unit (BN, D + 8); Q, dO, LSE, Dsum double-buffered (64, D + 8);
 * P, dS (64, BN + 8), 16-bit; the dQ staging tile (64, D) fp32; the persistent mode's
 * visit table (2 KB). BN = 128: 205 KiB at D = 128, 125 KiB at D = 64; BN = 64: 155 KiB and
 * 91 KiB. Registers (ptxas 13.0, sm_90a, persistent / interleaved): BN = 128: 255 / 255 at
 * D = 128, 245 / 243 at D = 64; BN = 64: 240 / 237 and 197 / 182. One CTA of 8 warps per SM. P = 2^x is one MUFU.EX2
 * (attn_ex2); P and dS go to shared memory by stmatrix on sm_90. The persistent mode
 * prefetches the next step's Q, dO, LSE and Dsum with cp.async into the other buffer
 * while the step computes, and waits for them before its dQ turn's barrier, which
 * publishes them: a prefetched step starts without a barrier. A prefetch changes when
 * bytes arrive, never which bytes: the interleaved mode, which never prefetches, computes
 * on the same values. The step ends without a barrier: the dQ turn's barriers, which
 * every caller meets next, keep the next step's writes (prefetch, P, dS) behind this
 * step's reads.
 *
 * Waiting less for turns (persistent mode; neither changes an order of additions, so
 * neither changes a bit):
 *   - shift jobs are taken in descending slot order within their (chunk, head) group:
 *     most dQ tiles take shift's additions in descending slot order, so each addition
 *     waits on a job that started earlier;
 *   - for shift and causal spt (params.defer) a turn is passed on during the unit's next
 *     step, after its S and dP products: the reductions complete under those products
 *     instead of stalling the fence, and in these schedules the next adder of the tile is
 *     a step or more behind anyway. Chains of lock-step adders (ascending, descending,
 *     full spt) pass on at once, since every link would lengthen the chain;
 *   - the q-tiles and ranks of a unit's steps are formed once, by all threads at the
 *     unit's start, into a shared table (bwd_tc_fill_visits), not by thread 0 in front of
 *     every turn; the spin on the counter backs off to 256 ns at most.
 * atomic has no turns: its additions are neither fenced nor followed by a barrier.
 *
 * Determinism. Every element of every product is one chain of mma.sync over its k in
 * ascending k16 steps, each mma a fixed function of its fragments and accumulator; dK and
 * dV chain across the unit's steps in visit order; P, dS and the row terms are elementwise.
 * dQ tiles are summed in rank order exactly as in v1: thread 0 waits (acquire) for the
 * counter to equal the rank, the CTA adds its partial with fp32 additions at L2 (the turn
 * is exclusive, so the additions into each element happen one after another, in rank
 * order), and the tile is passed on (release-store of rank + 1) only once the addition has
 * been performed: on sm_90 every thread stages its partial in shared memory and thread 0
 * adds the tile with one bulk reduction (cp.reduce.async.bulk .add.f32), waits for its
 * completion (cp.async.bulk.wait_group, not .read) and stores (the thread that added is
 * the one that acquires and releases, so its acquire load and release store order the
 * reduction without a fence); on sm_80 every thread adds by red, fences, the CTA meets at
 * a barrier, thread 0 fences and stores. Either at once, or deferred into the next step
 * as above: the same sequence, later. Nothing depends on which CTA runs what or when, so
 * the bits do not depend on the grid or the mode.
 *
 * Dsum and exact zeros. Where a row's softmax puts all its weight on one key j, O_i = V_j
 * exactly, and dP_ij - Dsum_i must be exactly 0 (dQ and dK are then exactly 0; the tests
 * compare such cases against a zero reference). v1 gets this by forming Dsum with dP's
 * fmaf chain; here the preprocess forms Dsum_i as the element (i, i) of dO O^T with the
 * same mma.sync chain (k16 steps of d ascending, accumulator from 0), so O_i = V_j gives
 * Dsum_i = dP_ij bit for bit - provided an mma element depends on its A row, B column and
 * accumulator only, not on its position in the fragment.
 */
#include "kernels/cuda/attn_cuda_int.h"
#include "kernels/cuda/attn_wgmma.h"

#include <math.h>
#include <stddef.h>

/* q-tile rows of every v2 backward; the kv-tile rows BN (64 or 128) are a template
 * parameter, the schedule's block_n. */
#define BWD_TC_BM 64

/* Steps per refill of the persistent mode's visit table (see bwd_tc_fill_visits). */
#define BWD_TC_TAB 256

template <int D, int BN>
struct bwd_tc_smem {
    static constexpr bool swizzled = false;                /* padded rows, read by ldmatrix */
    static constexpr bool writer = false;                  /* no dQ writer warp (below) */
    uint16_t k_smem[BN * attn_tc_ld<D>::v];                /* (BN, D + 8) K tile of the unit */
    uint16_t v_smem[BN * attn_tc_ld<D>::v];                /* (BN, D + 8) V tile of the unit */
    uint16_t q_smem[2][BWD_TC_BM * attn_tc_ld<D>::v];      /* (2, 64, D + 8) Q of the step, of the next */
    uint16_t dout_smem[2][BWD_TC_BM * attn_tc_ld<D>::v];   /* (2, 64, D + 8) dO likewise */
    uint16_t p_smem[BWD_TC_BM * (BN + 8)];                 /* (64, BN + 8) P, input dtype, row i */
    uint16_t ds_smem[BWD_TC_BM * (BN + 8)];                /* (64, BN + 8) dS, input dtype, row i */
    float lse_smem[2][BWD_TC_BM];                          /* (2, 64) LSE rows, +inf past Sq */
    float dsum_smem[2][BWD_TC_BM];                         /* (2, 64) Dsum rows, 0 past Sq */
    float dq_smem[BWD_TC_BM * D];                          /* (64, D) dQ partial, dQacc's layout (sm_90) */
    int32_t visit_smem[BWD_TC_TAB + 1];                    /* persistent: q-tile of steps base .. */
    int32_t rank_smem[BWD_TC_TAB + 1];                     /* ... and its rank (-1: atomic) */
    int32_t flag_smem;                                     /* broadcast from thread 0 */
};

/* Registers of one unit (C fragments, layouts in the header comment):
 *   dK, dV: kv rows BN/4 wk + 16 mt + g (+ 8), columns D/2 wd + 8 t + 2 t4 (+ 1);
 *           MT = BN/64 m-tiles x D/16 n-tiles x 4 = BN D / 256 floats each;
 *   dQp:    q rows 32 wq + 16 mt + g (+ 8), columns D/4 wd4 + 8 t + 2 t4 (+ 1);
 *           2 m-tiles x D/32 n-tiles x 4 = D/4 floats. */
template <int D, int BN>
struct bwd_tc_regs {
    float dk_reg[BN / 64][D / 16][4];
    float dv_reg[BN / 64][D / 16][4];
    float dq_reg[2][D / 32][4];
};

/* Floats per thread of one virtual SM's registers in the interleaved mode's scratch. */
#define BWD_TC_VSM_FLOATS(D, BN) (2 * (BN) * (D) / 256 + (D) / 4)

/* sm_90 adds a dQ tile with one bulk reduction issued by one thread; sm_80 with red by
 * every thread. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define BWD_TC_BULK 1
#else
#define BWD_TC_BULK 0
#endif

/* A GPU-scope acquire-release fence: the thread's earlier reductions are performed at GPU
 * scope before anything it does later. A release needs no more than this (the sequential
 * consistency of __threadfence, fence.sc, adds a global ordering point and an L1
 * invalidation that the dQ hand-off never uses). sm_80 only: see bwd_tc_take_turn. */
#if !BWD_TC_BULK
static __device__ __forceinline__ void bwd_tc_fence(void)
{
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}
#endif

#define BWD_TC_SPIN_MAX 256 /* ns: the longest sleep between two looks at a dQ tile counter */

/* Thread 0: wait until dQ tile counter ctr reaches `rank` (the tile's turn), then order
 * what follows after the additions it saw. With bulk reductions (sm_90) thread 0 issues
 * the tile's addition itself, so the acquire load orders it; with red (sm_80) every thread
 * adds after a barrier, and the fence extends the order to them. The fence costs: v3's
 * writer taking its turns with it (and passing them on with another) ran hdim 64's
 * deterministic backward at 0.83-0.91 of atomic, without them at 0.97-1.00, in one A/B run
 * on the H200 (bench/results/gpu-v3-lean-writer-2026-11-29.md). */
static __device__ __forceinline__ void bwd_tc_take_turn(const int32_t *ctr, int32_t rank)
{
    uint32_t ns = 32;
    while (attn_ld_acquire(ctr) != rank) {
        /* Back off to BWD_TC_SPIN_MAX at most: a wait usually ends within a step (several
         * microseconds), and every nanosecond slept past the release is a nanosecond the
         * whole CTA idles. */
        __nanosleep(ns);
        ns = ns < BWD_TC_SPIN_MAX ? ns * 2 : ns;
    }
#if !BWD_TC_BULK
    bwd_tc_fence();
#endif
}

/* attn_tc_load_tile for this kernel's CTA, with the aligned case unrolled: thread t copies
 * 16-byte chunk t % (D/8) of rows t / (D/8) + k (256 / (D/8)), so each chunk is one
 * cp.async at a fixed offset from two pointers formed once, instead of a loop that divides
 * and multiplies per chunk (about 29 instructions a chunk in ptxas 13.0's code). Unaligned sources take the general loop; the bytes that land are the same. */
template <int D, int ROWS, bool SW>
static __device__ __forceinline__ void bwd_tc_load_tile(uint16_t *tile_smem, const uint16_t *src,
                                                        int64_t base, int64_t row_stride, int32_t rows)
{
    const int32_t CH = D / 8, RP = ATTN_THREADS / CH; /* chunks per row, rows per pass */
    /* elements from a row to the row RP below: RP is a multiple of 8, so in the swizzled
     * layout the chunk keeps its place within the row */
    const int32_t STEP = RP * (SW ? 64 : attn_tc_ld<D>::v);
    const uint16_t *g = src + base;
    if (((((uintptr_t)g | (uintptr_t)(row_stride * 2)) & 15u) != 0)) {
        attn_tc_load_tile<D, ROWS, SW>(tile_smem, src, base, row_stride, rows, ATTN_THREADS);
        return;
    }
    const int32_t r = threadIdx.x / CH, c = threadIdx.x % CH;
    const uint16_t *from = g + r * row_stride + c * 8;
    uint16_t *to = tile_smem + attn_tc_chunk<D, ROWS, SW>(r, c);
#pragma unroll
    for (int32_t k = 0; k < ROWS / RP; k++) {
        if (r + k * RP < rows)
            attn_cp_async16(to + k * STEP, from + k * RP * row_stride);
        else
            *reinterpret_cast<uint4 *>(to + k * STEP) = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* The CTA's compute warps meet: all of the CTA, or with a dQ writer warp (W) the 256
 * compute threads at named barrier 1, which the writer never joins. */
template <bool W>
static __device__ __forceinline__ void bwd_cta_sync(void)
{
    if (W)
        asm volatile("bar.sync 1, %0;" ::"n"(ATTN_THREADS) : "memory");
    else
        __syncthreads();
}

/* Copies into shared memory that the thread has waited for become visible to v3's wgmma
 * reads (the async proxy) once a barrier follows; v2 reads through the generic proxy and
 * needs nothing. */
template <bool SW>
static __device__ __forceinline__ void bwd_tc_async_visible(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (SW)
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

/* Load the unit's K and V tiles and wait for them. */
template <int D, int BN, typename SM>
static __device__ __forceinline__ void bwd_tc_load_kv(const struct attn_bwd_params &p, SM &sm, int32_t bh,
                                                      int32_t n)
{
    const int32_t b = bh / p.heads_q, hk = (bh - b * p.heads_q) / p.group;
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;
    bwd_tc_load_tile<D, BN, SM::swizzled>(sm.k_smem, static_cast<const uint16_t *>(p.k),
                            b * p.k_stride[0] + (int64_t)j0 * p.k_stride[1] + hk * p.k_stride[2],
                            p.k_stride[1], rn);
    bwd_tc_load_tile<D, BN, SM::swizzled>(sm.v_smem, static_cast<const uint16_t *>(p.v),
                            b * p.v_stride[0] + (int64_t)j0 * p.v_stride[1] + hk * p.v_stride[2],
                            p.v_stride[1], rn);
    attn_cp_async_commit();
    attn_cp_async_wait<0>();
    bwd_tc_async_visible<SM::swizzled>();
    bwd_cta_sync<SM::writer>(); /* K and V are complete before the unit's first step reads them */
}

/* Start loading Q, dO, LSE and Dsum of q-tile m of head bh into buffer `buf`, as one
 * committed cp.async group (rows past Sq: Q, dO 0, LSE +inf, Dsum 0). */
template <int D, int BN, typename SM>
static __device__ __forceinline__ void bwd_tc_load_q(const struct attn_bwd_params &p, SM &sm, int32_t buf,
                                                     int32_t bh, int32_t m)
{
    const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q;
    const int32_t i0 = m * BWD_TC_BM, rm = p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
    bwd_tc_load_tile<D, BWD_TC_BM, SM::swizzled>(sm.q_smem[buf], static_cast<const uint16_t *>(p.q),
                                   b * p.q_stride[0] + (int64_t)i0 * p.q_stride[1] + h * p.q_stride[2],
                                   p.q_stride[1], rm);
    bwd_tc_load_tile<D, BWD_TC_BM, SM::swizzled>(sm.dout_smem[buf], static_cast<const uint16_t *>(p.dout),
                                   b * p.dout_stride[0] + (int64_t)i0 * p.dout_stride[1] + h * p.dout_stride[2],
                                   p.dout_stride[1], rm);
    const int32_t tid = threadIdx.x;
    if (tid < BWD_TC_BM) {
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

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_zero_kv(bwd_tc_regs<D, BN> &x)
{
#pragma unroll
    for (int mt = 0; mt < BN / 64; mt++)
#pragma unroll
        for (int t = 0; t < D / 16; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                x.dk_reg[mt][t][e] = 0.0f;
                x.dv_reg[mt][t][e] = 0.0f;
            }
}

/*
 * dQacc layout. Rows of D floats as (bh, Sq, D), but the 16-byte chunks of row i are
 * permuted: logical chunk c (columns 4c .. 4c+3) is stored at chunk c ^ (i % 8). The
 * layout is private to this file (the postprocess undoes it); it lets a warp write its C
 * fragments (8 rows g, 4 column pairs) into a staging copy of the tile in shared memory
 * without bank conflicts, and the tile stays one contiguous block of rm D floats, so one
 * bulk reduction adds it (sm_90). The sm_80 path adds the same elements by red.
 */
static __device__ __forceinline__ int32_t bwd_tc_dq_at(int32_t i, int32_t d)
{
    return (((d >> 2) ^ (i & 7)) << 2) + (d & 3); /* offset of column d within row i */
}

#if BWD_TC_BULK
/* sm_90: the dQ partial goes from registers to sm.dq_smem (every thread), then thread 0
 * adds the whole tile into dQacc with one cp.reduce.async.bulk (fp32 add at L2, element by
 * element, like red.add.f32): no thread's registers wait on reductions, and only thread 0
 * fences. The turn is exclusive, so each element still takes its additions one at a time,
 * in rank order. */
template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_stage_dq(float *dq_smem, const bwd_tc_regs<D, BN> &x)
{
    const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t w1 = warp & 1, w2 = warp >> 1, g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int32_t i = 32 * w1 + 16 * mt + g + 8 * r;
#pragma unroll
            for (int t = 0; t < D / 32; t++) {
                const int32_t d = w2 * (D / 4) + 8 * t + 2 * t4;
                *reinterpret_cast<float2 *>(dq_smem + i * D + bwd_tc_dq_at(i, d)) =
                    make_float2(x.dq_reg[mt][t][2 * r], x.dq_reg[mt][t][2 * r + 1]);
            }
        }
    /* the staged tile is written through the generic proxy and read by the bulk copy */
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* Thread 0: add rows [0, rm) of the staged tile into dQacc tile m of head bh. */
template <int D>
static __device__ __forceinline__ void bwd_tc_bulk_add(const struct attn_bwd_params &p, const float *dq_smem,
                                                       int32_t bh, int32_t m)
{
    const int32_t i0 = m * BWD_TC_BM, rm = p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
    float *acc = p.dq_acc + ((int64_t)bh * p.seqlen_q + i0) * D; /* (rm, D), 16-byte aligned */
    /* the turn was acquired through the generic proxy; the reduction runs in the async one */
    asm volatile("fence.proxy.async.global;" ::: "memory");
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                     __cvta_generic_to_global(acc)),
                 "r"(attn_smem_u32(dq_smem)), "r"((uint32_t)(rm * D * sizeof(float)))
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* Thread 0: the staging buffer may be written again once the last reduction has read it. */
static __device__ __forceinline__ void bwd_tc_bulk_wait_read(void)
{
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

/* Thread 0: the tail of its addition: wait until the reduction has been performed (not
 * only read: wait_group without .read), order it with generic accesses, then pass the tile
 * on. The release store orders the thread's own reduction; no fence is needed (see
 * bwd_tc_take_turn). rank < 0 (atomic): only the wait. */
static __device__ __forceinline__ void bwd_tc_pass_on(int32_t *ctr, int32_t rank)
{
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    if (rank < 0)
        return;
    asm volatile("fence.proxy.async.global;" ::: "memory");
    attn_st_release(ctr, rank + 1);
}
#endif

/* Add the dQ partial into dQacc[m] at L2 with fp32 reductions (sm_80). The caller holds
 * the tile's turn (or the schedule is atomic, where additions race on purpose). */
template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_add_dq(const struct attn_bwd_params &p,
                                                     const bwd_tc_regs<D, BN> &x, int32_t bh, int32_t m)
{
    const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t w1 = warp & 1, w2 = warp >> 1, g = lane >> 2, t4 = lane & 3;
    const int32_t i0 = m * BWD_TC_BM, rm = p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
    float *acc = p.dq_acc + ((int64_t)bh * p.seqlen_q + i0) * D; /* (rm, D) rows of the tile */
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int32_t i = 32 * w1 + 16 * mt + g + 8 * r;
            if (i >= rm)
                continue;
#pragma unroll
            for (int t = 0; t < D / 32; t++) {
                const int32_t d = w2 * (D / 4) + 8 * t + 2 * t4;
                attn_red_add2(acc + i * D + bwd_tc_dq_at(i, d), x.dq_reg[mt][t][2 * r], x.dq_reg[mt][t][2 * r + 1]);
            }
        }
}

#if !BWD_TC_BULK
/* The tail of an addition by red (sm_80): make it visible at GPU scope, then pass the tile on. */
static __device__ __forceinline__ void bwd_tc_release(int32_t *ctr, int32_t rank)
{
    bwd_tc_fence(); /* this thread's reductions are performed GPU-wide ... */
    __syncthreads(); /* ... and so are every other thread's before thread 0 goes on */
    if (threadIdx.x == 0 && rank >= 0) {
        bwd_tc_fence(); /* cumulative: orders the whole CTA's addition before the store */
        attn_st_release(ctr, rank + 1);
    }
}
#endif

/* Add and pass on at once (interleaved mode, and wherever nothing is deferred): the same
 * sequence on both paths, ending with the tile passed on (rank >= 0, thread 0). */
template <int D, int BN, typename SM, typename REGS>
static __device__ __forceinline__ void bwd_tc_add_release(const struct attn_bwd_params &p, SM &sm, const REGS &x,
                                                          int32_t bh, int32_t m, int32_t *ctr, int32_t rank)
{
#if BWD_TC_BULK
    bwd_tc_stage_dq<D, BN>(sm.dq_smem, x);
    __syncthreads(); /* the staged tile is complete before thread 0 hands it to the copy */
    if (threadIdx.x == 0) {
        bwd_tc_bulk_add<D>(p, sm.dq_smem, bh, m);
        bwd_tc_pass_on(ctr, rank); /* also: the copy has read the buffer before it is reused */
    }
#else
    (void)sm;
    bwd_tc_add_dq<D, BN>(p, x, bh, m);
    bwd_tc_release(ctr, rank);
#endif
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* The store twin of attn_ldsm_x4 (sm_90 stmatrix): four 8 x 8 16-bit matrices from
 * fragment registers (lane l holds row l / 4, columns 2 (l % 4), +1 of each), lane l giving
 * the address of row l % 8 of matrix l / 8. */
static __device__ __forceinline__ void bwd_tc_stsm_x4(uint16_t *smem, uint32_t r0, uint32_t r1, uint32_t r2,
                                                      uint32_t r3)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(attn_smem_u32(smem)),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}
#endif

/* P and dS of the warp's (32, BN/4) slab from its S and dP fragments, rounded to the
 * input dtype into shared memory. MASK: test every element against Sq, Sk and the causal
 * diagonal; the caller passes false only where every element is visible, so both
 * versions compute the same values. Branch-free: every element takes the same ex2 and
 * products, and a masked one is then replaced by +0 (a select, not a branch around the
 * exponential, which cost about as many instructions as the arithmetic itself). Each row
 * sees the columns below one limit, min(Sk, diagonal + 1) - j0, formed once per row. */
template <typename DT, int BN, bool MASK>
static __device__ __forceinline__ void bwd_tc_pds(const struct attn_bwd_params &p, uint16_t *p_smem,
                                                  uint16_t *ds_smem, const float *lse_smem,
                                                  const float *dsum_smem, float (&s_reg)[2][BN / 32][4],
                                                  float (&dp_reg)[2][BN / 32][4], int32_t i0, int32_t rm,
                                                  int32_t j0, int32_t rn)
{
    const int32_t PLD = BN + 8;
    const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t wm = warp & 1, wn = warp >> 1, g = lane >> 2, t4 = lane & 3;
    const int32_t jt = (BN / 4) * wn + 2 * t4; /* the thread's first column in the tile */
    const int64_t offset = (int64_t)p.seqlen_k - p.seqlen_q;
    const int causal = p.s.mask == SCHED_MASK_CAUSAL;
    const float scale2 = __fmul_rn(p.scale, ATTN_LOG2E);
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        uint32_t pw[2][BN / 32], dsw[2][BN / 32]; /* packed pairs of rows g, g + 8 of the m-tile */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int32_t i = 32 * wm + 16 * mt + g + 8 * r;
            const float lse2 = __fmul_rn(lse_smem[i], ATTN_LOG2E), dsum = dsum_smem[i];
            int32_t lim = 0; /* columns jt + c with c < lim are visible (MASK only) */
            if (MASK) {
                const int64_t diag = (int64_t)i0 + i + offset - j0 + 1; /* past the last visible j */
                const int64_t end = causal && diag < rn ? diag : rn;
                lim = i < rm && end > 0 ? (int32_t)end - jt : -jt;
            }
#pragma unroll
            for (int t = 0; t < BN / 32; t++) {
                float pv[2], dsv[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float pr = attn_ex2(fmaf(s_reg[mt][t][2 * r + e], scale2, -lse2));
                    const float ds = __fmul_rn(pr, __fsub_rn(dp_reg[mt][t][2 * r + e], dsum));
                    const bool vis = !MASK || 8 * t + e < lim;
                    pv[e] = vis ? pr : 0.0f;
                    dsv[e] = vis ? ds : 0.0f;
                }
                pw[r][t] = DT::pack2(pv[0], pv[1]);
                dsw[r][t] = DT::pack2(dsv[0], dsv[1]);
            }
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        /* one stmatrix per two n-tiles: matrices (g, t), (g + 8, t), (g, t + 1), (g + 8, t + 1) */
        const int32_t xr = attn_ldsm_x_row(lane), xc = attn_ldsm_x_col(lane);
#pragma unroll
        for (int u = 0; u < BN / 64; u++) {
            const int32_t at = (32 * wm + 16 * mt + xr) * PLD + (BN / 4) * wn + 16 * u + xc;
            bwd_tc_stsm_x4(p_smem + at, pw[0][2 * u], pw[1][2 * u], pw[0][2 * u + 1], pw[1][2 * u + 1]);
            bwd_tc_stsm_x4(ds_smem + at, dsw[0][2 * u], dsw[1][2 * u], dsw[0][2 * u + 1], dsw[1][2 * u + 1]);
        }
#else
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int t = 0; t < BN / 32; t++) {
                const int32_t at = (32 * wm + 16 * mt + g + 8 * r) * PLD + jt + 8 * t;
                *reinterpret_cast<uint32_t *>(p_smem + at) = pw[r][t];
                *reinterpret_cast<uint32_t *>(ds_smem + at) = dsw[r][t];
            }
#endif
    }
}

/*
 * One step: unit (bh, n) against q-tile m, whose Q/dO/LSE/Dsum are (`loaded`) or are to be
 * loaded into buffer `buf`. `loaded` means complete and published: the caller waited for
 * its copies and has met a barrier since. If next_m >= 0 the step also starts loading
 * q-tile next_m of the same head into buffer buf ^ 1, for the caller's next step; the
 * caller waits for that group before the barrier it meets next (the dQ turn's), so the
 * next step starts without a barrier of its own. Updates x.dk_reg, x.dv_reg and leaves the
 * dQ partial in x.dq_reg. K/V of the unit must be in shared memory. Both modes run
 * exactly this code; `loaded` and next_m only move loads in time. The step ends with reads
 * of this buffer, P, dS and K still in flight in other warps: the caller meets at a
 * barrier (the dQ turn's) before anything overwrites them.
 */
template <typename DT, int D, int BN>
static __device__ __forceinline__ void bwd_tc_step(const struct attn_bwd_params &p, bwd_tc_smem<D, BN> &sm,
                                                   bwd_tc_regs<D, BN> &x, int32_t bh, int32_t n, int32_t m,
                                                   int32_t buf, int loaded, int32_t next_m,
                                                   int32_t *rel_ctr, int32_t rel_rank)
{
    const int32_t LD = attn_tc_ld<D>::v, PLD = BN + 8;
    const int32_t MT = BN / 64;   /* m-tiles of the warp's (BN/4, D/2) slab of dK, dV */
    const int32_t NTS = BN / 32;  /* n-tiles of the warp's (32, BN/4) slab of S, dP */
    const int32_t NTQ = D / 32;   /* n-tiles of the warp's (32, D/4) slab of dQp */
    const int32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t w1 = warp & 1, w2 = warp >> 1; /* 2 x 4 warp grid, read per product */
    const int32_t xr = attn_ldsm_x_row(lane), xc = attn_ldsm_x_col(lane);
    const int32_t yr = attn_ldsm_y_row(lane), yc = attn_ldsm_y_col(lane);
    const int32_t i0 = m * BWD_TC_BM, rm = p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;

    if (!loaded)
        bwd_tc_load_q<D, BN>(p, sm, buf, bh, m);
    if (next_m >= 0) /* the previous step's reads of buffer buf ^ 1 ended before its turn's barrier */
        bwd_tc_load_q<D, BN>(p, sm, buf ^ 1, bh, next_m);
    if (!loaded) {
        if (next_m >= 0)
            attn_cp_async_wait<1>(); /* all but the prefetch: this step's group has landed */
        else
            attn_cp_async_wait<0>();
        __syncthreads(); /* Q, dO, LSE and Dsum of the step are complete before anyone reads them */
    }
    const uint16_t *q_smem = sm.q_smem[buf], *dout_smem = sm.dout_smem[buf];

    /* S = Q K^T and dP = dO V^T, d ascending; warp: q rows 32 w1 .., kv columns BN/4 w2 .. */
    float s_reg[2][NTS][4], dp_reg[2][NTS][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int t = 0; t < NTS; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s_reg[mt][t][e] = 0.0f;
                dp_reg[mt][t][e] = 0.0f;
            }
#pragma unroll
    for (int32_t kk = 0; kk < D / 16; kk++) {
        uint32_t aq[2][4], ado[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            attn_ldsm_x4(aq[mt], q_smem + (32 * w1 + 16 * mt + xr) * LD + 16 * kk + xc);
            attn_ldsm_x4(ado[mt], dout_smem + (32 * w1 + 16 * mt + xr) * LD + 16 * kk + xc);
        }
#pragma unroll
        for (int nb = 0; nb < NTS / 2; nb++) {
            uint32_t bk[4], bv[4];
            attn_ldsm_x4(bk, sm.k_smem + ((BN / 4) * w2 + 16 * nb + yr) * LD + 16 * kk + yc);
            attn_ldsm_x4(bv, sm.v_smem + ((BN / 4) * w2 + 16 * nb + yr) * LD + 16 * kk + yc);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                DT::mma(s_reg[mt][2 * nb], aq[mt], bk[0], bk[1]);
                DT::mma(s_reg[mt][2 * nb + 1], aq[mt], bk[2], bk[3]);
                DT::mma(dp_reg[mt][2 * nb], ado[mt], bv[0], bv[1]);
                DT::mma(dp_reg[mt][2 * nb + 1], ado[mt], bv[2], bv[3]);
            }
        }
    }

    /* P = 2^(S scale log2(e) - LSE log2(e)), 0 where masked; dS = P (dP - Dsum). The
     * masks are skipped where the whole tile is visible: full rows and columns, and for
     * causal the tile's first row sees its last key. */
    const bool whole = rm == BWD_TC_BM && rn == BN &&
                       (p.s.mask != SCHED_MASK_CAUSAL ||
                        (int64_t)i0 + ((int64_t)p.seqlen_k - p.seqlen_q) - j0 >= BN - 1);
    if (whole)
        bwd_tc_pds<DT, BN, false>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s_reg,
                                  dp_reg, i0, rm, j0, rn);
    else
        bwd_tc_pds<DT, BN, true>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s_reg,
                                 dp_reg, i0, rm, j0, rn);
    /* A deferred release of the previous step's dQ turn (rel_ctr, rank rel_rank in thread
     * 0): the sequence of bwd_tc_pass_on (sm_90: thread 0 alone, its bulk reduction was
     * issued before S and dP) or of bwd_tc_release (sm_80: with this step's barrier as its
     * barrier; the reductions were issued before S and dP, so the fences find them
     * performed). */
#if BWD_TC_BULK
    __syncthreads(); /* P and dS are complete before the products below read other warps' parts */
    if (rel_ctr && tid == 0)
        bwd_tc_pass_on(rel_ctr, rel_rank);
#else
    if (rel_ctr)
        bwd_tc_fence(); /* this thread's reductions are performed GPU-wide ... */
    __syncthreads(); /* P and dS are complete before the products below read other warps'
                        parts (and every thread's fence is behind us) */
    if (rel_ctr && tid == 0) {
        bwd_tc_fence(); /* cumulative: orders the whole CTA's addition before the store */
        attn_st_release(rel_ctr, rel_rank + 1);
    }
#endif

    /* dV += P^T dO and dK += dS^T Q, i ascending; warp: kv rows BN/4 w2 .., d columns D/2 w1 .. */
#pragma unroll
    for (int32_t kk = 0; kk < BWD_TC_BM / 16; kk++) {
        uint32_t ap[MT][4], ads[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            attn_ldsm_x4_t(ap[mt], sm.p_smem + (16 * kk + yr) * PLD + (BN / 4) * w2 + 16 * mt + yc);
            attn_ldsm_x4_t(ads[mt], sm.ds_smem + (16 * kk + yr) * PLD + (BN / 4) * w2 + 16 * mt + yc);
        }
#pragma unroll
        for (int nb = 0; nb < D / 32; nb++) {
            const int32_t d0 = w1 * (D / 2) + 16 * nb;
            uint32_t bo[4], bq[4];
            attn_ldsm_x4_t(bo, dout_smem + (16 * kk + xr) * LD + d0 + xc);
            attn_ldsm_x4_t(bq, q_smem + (16 * kk + xr) * LD + d0 + xc);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                DT::mma(x.dv_reg[mt][2 * nb], ap[mt], bo[0], bo[1]);
                DT::mma(x.dv_reg[mt][2 * nb + 1], ap[mt], bo[2], bo[3]);
                DT::mma(x.dk_reg[mt][2 * nb], ads[mt], bq[0], bq[1]);
                DT::mma(x.dk_reg[mt][2 * nb + 1], ads[mt], bq[2], bq[3]);
            }
        }
    }

    /* dQp = dS K, j ascending; warp: q rows 32 w1 .., d columns D/4 w2 .. */
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int t = 0; t < NTQ; t++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                x.dq_reg[mt][t][e] = 0.0f;
#pragma unroll
    for (int32_t kk = 0; kk < BN / 16; kk++) {
        uint32_t a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
            attn_ldsm_x4(a[mt], sm.ds_smem + (32 * w1 + 16 * mt + xr) * PLD + 16 * kk + xc);
#pragma unroll
        for (int nb = 0; nb < NTQ / 2; nb++) {
            uint32_t bk[4];
            attn_ldsm_x4_t(bk, sm.k_smem + (16 * kk + xr) * LD + w2 * (D / 4) + 16 * nb + xc);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                DT::mma(x.dq_reg[mt][2 * nb], a[mt], bk[0], bk[1]);
                DT::mma(x.dq_reg[mt][2 * nb + 1], a[mt], bk[2], bk[3]);
            }
        }
    }
}

/* Store the unit's dK (times scale) and dV: straight to the outputs, or per q-head fp32
 * for GQA (summed by attn_bwd_tc_dkv_sum_kernel). */
template <typename DT, int D, int BN>
static __device__ __forceinline__ void bwd_tc_store_unit(const struct attn_bwd_params &p,
                                                         const bwd_tc_regs<D, BN> &x, int32_t bh, int32_t n)
{
    const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t w1 = warp & 1, w2 = warp >> 1, g = lane >> 2, t4 = lane & 3;
    const int32_t b = bh / p.heads_q, hk = (bh - b * p.heads_q) / p.group;
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;
    uint16_t *dk_g = static_cast<uint16_t *>(p.dk), *dv_g = static_cast<uint16_t *>(p.dv);
#pragma unroll
    for (int mt = 0; mt < BN / 64; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int32_t j = (BN / 4) * w2 + 16 * mt + g + 8 * r;
            if (j >= rn)
                continue;
#pragma unroll
            for (int t = 0; t < D / 16; t++) {
                const int32_t d = w1 * (D / 2) + 8 * t + 2 * t4;
                const float dk0 = __fmul_rn(x.dk_reg[mt][t][2 * r], p.scale);
                const float dk1 = __fmul_rn(x.dk_reg[mt][t][2 * r + 1], p.scale);
                const float dv0 = x.dv_reg[mt][t][2 * r], dv1 = x.dv_reg[mt][t][2 * r + 1];
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

/* Interleaved mode: a virtual SM's registers in global scratch, (BWD_TC_VSM_FLOATS, 256)
 * floats - dK, dV, then the dQ partial - thread-minor so that the CTA's accesses coalesce. */
template <int D, int BN>
static __device__ __forceinline__ float *bwd_tc_vsm_data(const struct attn_bwd_params &p, int32_t v)
{
    return p.vsm_data + (int64_t)v * BWD_TC_VSM_FLOATS(D, BN) * ATTN_THREADS + threadIdx.x;
}

/* Thread 0: virtual SM v's state slots into global scratch. */
static __device__ __forceinline__ void bwd_tc_vsm_save_state(const struct attn_bwd_params &p, int32_t v,
                                                             const int32_t *st)
{
    if (threadIdx.x == 0)
        for (int i = 0; i < VSM_SLOTS; i++)
            p.vsm_state[(int64_t)v * VSM_SLOTS + i] = st[i];
}

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_vsm_save(const struct attn_bwd_params &p, int32_t v,
                                                       const int32_t *st, const bwd_tc_regs<D, BN> &x)
{
    const int32_t KV = BN * D / 256; /* floats of each of dK, dV */
    float *data = bwd_tc_vsm_data<D, BN>(p, v);
    bwd_tc_vsm_save_state(p, v, st);
    if (st[VSM_LOADED])
#pragma unroll
        for (int mt = 0; mt < BN / 64; mt++)
#pragma unroll
            for (int t = 0; t < D / 16; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int32_t f = (mt * (D / 16) + t) * 4 + e;
                    data[f * ATTN_THREADS] = x.dk_reg[mt][t][e];
                    data[(KV + f) * ATTN_THREADS] = x.dv_reg[mt][t][e];
                }
    if (st[VSM_PENDING])
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int t = 0; t < D / 32; t++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    data[(2 * KV + (mt * (D / 32) + t) * 4 + e) * ATTN_THREADS] = x.dq_reg[mt][t][e];
}

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_vsm_restore(const struct attn_bwd_params &p, int32_t v,
                                                          const int32_t *st, bwd_tc_regs<D, BN> &x)
{
    const int32_t KV = BN * D / 256;
    const float *data = bwd_tc_vsm_data<D, BN>(p, v);
    if (st[VSM_LOADED])
#pragma unroll
        for (int mt = 0; mt < BN / 64; mt++)
#pragma unroll
            for (int t = 0; t < D / 16; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int32_t f = (mt * (D / 16) + t) * 4 + e;
                    x.dk_reg[mt][t][e] = data[f * ATTN_THREADS];
                    x.dv_reg[mt][t][e] = data[(KV + f) * ATTN_THREADS];
                }
    if (st[VSM_PENDING])
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int t = 0; t < D / 32; t++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    x.dq_reg[mt][t][e] = data[(2 * KV + (mt * (D / 32) + t) * 4 + e) * ATTN_THREADS];
}

/* ---- v3: the step on Hopper warpgroup products (sm_90a) ---------------------------------
 *
 * The same units, steps, schedules, turns and dQ hand-off as v2 (the drivers below are
 * shared), 64 x 128 tiles only; the five products are wgmma.mma_async with both operands
 * in shared memory (attn_wgmma.h), so no thread loads fragments. Two warpgroups of four
 * warps (wg = warp / 4, wi = warp % 4):
 *   S, dP (64 x 128):  warpgroup wg forms kv columns 64 wg .. +64 (m64n64, k = d);
 *   dV, dK (128 x D):  warpgroup wg owns kv rows 64 wg .. +64 (m64nD, k = i, P^T and
 *                      dS^T read MN-major from the tiles P and dS - its own columns);
 *   dQp (64 x D):      warpgroup wg forms d columns (D/2) wg .. +D/2 (m64n(D/2), k = j).
 * Every input tile (K, V, Q, dO, P, dS) is 16-bit in the 128-byte swizzled layout, so the
 * one copy serves the K-major and the MN-major reads. Each element of each product is one
 * chain of wgmma over its k in ascending k16 steps, a fixed function of the operands: the
 * bits repeat, and do not depend on the grid or the mode, as in v2 (they differ from
 * v2's: the tensor cores group their sums differently). Registers per thread: dK, dV
 * D/2 floats each, dQp D/4 (the same count as v2's, so the interleaved scratch is too).
 */
/* dQ staging buffers of v3's writer warp, taken in turn: one. (Two at head dim 64, which
 * the shared memory allows, measured no faster: bench/results/gpu-v3-lean-writer-2026-11-29.md;
 * the ring below stays general, and the wait-end rule of bwd_tc_persistent is what makes
 * more than one safe: docs/schedules.md.) */
#define BWD_WG_DQBUFS 1

template <int D>
struct bwd_wg_smem {
    static constexpr bool swizzled = true;
    static constexpr bool writer = true; /* persistent mode: a ninth warp adds dQ (below) */
    uint16_t k_smem[CUATTN_TC_BLOCK_N * D];     /* (128, D) K of the unit, swizzled */
    uint16_t v_smem[CUATTN_TC_BLOCK_N * D];     /* (128, D) V */
    uint16_t q_smem[2][BWD_TC_BM * D];          /* (2, 64, D) Q of the step, of the next */
    uint16_t dout_smem[2][BWD_TC_BM * D];       /* (2, 64, D) dO likewise */
    uint16_t p_smem[BWD_TC_BM * CUATTN_TC_BLOCK_N];  /* (64, 128) P, input dtype */
    uint16_t ds_smem[BWD_TC_BM * CUATTN_TC_BLOCK_N]; /* (64, 128) dS */
    float dq_smem[BWD_WG_DQBUFS * BWD_TC_BM * D]; /* (BWD_WG_DQBUFS, 64, D) dQ partials, dQacc's layout */
    float lse_smem[2][BWD_TC_BM];
    float dsum_smem[2][BWD_TC_BM];
    int32_t visit_smem[BWD_TC_TAB + 1];
    int32_t rank_smem[BWD_TC_TAB + 1];
    int32_t flag_smem;
    int32_t ticket[BWD_WG_DQBUFS][4]; /* compute warps -> writer, per buffer: bh, m, rank (-1
                                           atomic), 1 at the end */
    uint64_t full_bar[BWD_WG_DQBUFS];  /* mbarriers: buffer b holds a ticket (256 arrivals) */
    uint64_t empty_bar[BWD_WG_DQBUFS]; /* buffer b is free again (the writer's one arrival) */
};
#define BWD_WG_TILES_ALIGNED(D)                                                                \
    (offsetof(bwd_wg_smem<D>, k_smem) == 0 && offsetof(bwd_wg_smem<D>, v_smem) % 1024 == 0 &&    \
     offsetof(bwd_wg_smem<D>, q_smem) % 1024 == 0 && offsetof(bwd_wg_smem<D>, dout_smem) % 1024 == 0 && \
     offsetof(bwd_wg_smem<D>, p_smem) % 1024 == 0 && offsetof(bwd_wg_smem<D>, ds_smem) % 1024 == 0 && \
     sizeof(bwd_wg_smem<D>::q_smem[0]) % 1024 == 0 && sizeof(bwd_wg_smem<D>::dout_smem[0]) % 1024 == 0)
static_assert(BWD_WG_TILES_ALIGNED(64) && BWD_WG_TILES_ALIGNED(128), "v3's tiles start on 1024-byte boundaries");
/* Every tile above is a multiple of 1024 bytes and starts the struct's 1024-aligned block
 * (the tiles come first):
 * the swizzle is a function of address bits, so the kernel aligns the struct (below). */
#define BWD_WG_ALIGN 1024

template <int D>
struct bwd_wg_regs {
    float dk_reg[D / 2]; /* m64nD accumulators: kv rows 64 wg + 16 wi + g (+8) */
    float dv_reg[D / 2];
    float dq_reg[D / 4]; /* m64n(D/2): q rows 16 wi + g (+8), columns (D/2) wg + .. */

    /* Accumulator element e of a thread: row 16 wi + g + 8 (e % 4 / 2) of the
     * warpgroup's rows, column 8 (e / 4) + 2 t4 + e % 2 (attn_wgmma.h). */
    static __device__ __forceinline__ int32_t row(int32_t e)
    {
        const int32_t lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 3;
        return 16 * wi + (lane >> 2) + 8 * ((e >> 1) & 1);
    }
    static __device__ __forceinline__ int32_t col(int32_t e) { return 8 * (e >> 2) + 2 * (threadIdx.x & 3) + (e & 1); }
};

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_zero_kv(bwd_wg_regs<D> &x)
{
#pragma unroll
    for (int e = 0; e < D / 2; e++) {
        x.dk_reg[e] = 0.0f;
        x.dv_reg[e] = 0.0f;
    }
}

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_stage_dq(float *dq_smem, const bwd_wg_regs<D> &x)
{
    const int32_t d0 = (D / 2) * (threadIdx.x >> 7);
#pragma unroll
    for (int e = 0; e < D / 4; e += 2) {
        const int32_t i = bwd_wg_regs<D>::row(e), d = d0 + bwd_wg_regs<D>::col(e);
        *reinterpret_cast<float2 *>(dq_smem + i * D + bwd_tc_dq_at(i, d)) = make_float2(x.dq_reg[e], x.dq_reg[e + 1]);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* sm_80 never runs v3 (its kernels trap there); this only lets the shared driver compile. */
template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_add_dq(const struct attn_bwd_params &, const bwd_wg_regs<D> &,
                                                     int32_t, int32_t)
{
    __trap();
}

template <typename DT, int D, int BN>
static __device__ __forceinline__ void bwd_tc_store_unit(const struct attn_bwd_params &p, const bwd_wg_regs<D> &x,
                                                         int32_t bh, int32_t n)
{
    const int32_t b = bh / p.heads_q, hk = (bh - b * p.heads_q) / p.group;
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;
    const int32_t r0 = 64 * (threadIdx.x >> 7);
    uint16_t *dk_g = static_cast<uint16_t *>(p.dk), *dv_g = static_cast<uint16_t *>(p.dv);
#pragma unroll
    for (int e = 0; e < D / 2; e += 2) {
        const int32_t j = r0 + bwd_wg_regs<D>::row(e), d = bwd_wg_regs<D>::col(e);
        if (j >= rn)
            continue;
        const float dk0 = __fmul_rn(x.dk_reg[e], p.scale), dk1 = __fmul_rn(x.dk_reg[e + 1], p.scale);
        const float dv0 = x.dv_reg[e], dv1 = x.dv_reg[e + 1];
        if (p.group == 1) {
            attn_st_pair(dk_g + b * p.dk_stride[0] + (int64_t)(j0 + j) * p.dk_stride[1] + hk * p.dk_stride[2] + d,
                         DT::pack2(dk0, dk1));
            attn_st_pair(dv_g + b * p.dv_stride[0] + (int64_t)(j0 + j) * p.dv_stride[1] + hk * p.dv_stride[2] + d,
                         DT::pack2(dv0, dv1));
        } else {
            const int64_t at = ((int64_t)bh * p.seqlen_k + j0 + j) * D + d;
            *reinterpret_cast<float2 *>(p.dk_acc + at) = make_float2(dk0, dk1);
            *reinterpret_cast<float2 *>(p.dv_acc + at) = make_float2(dv0, dv1);
        }
    }
}

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_vsm_save(const struct attn_bwd_params &p, int32_t v,
                                                       const int32_t *st, const bwd_wg_regs<D> &x)
{
    float *data = bwd_tc_vsm_data<D, BN>(p, v);
    bwd_tc_vsm_save_state(p, v, st);
    if (st[VSM_LOADED])
#pragma unroll
        for (int e = 0; e < D / 2; e++) {
            data[e * ATTN_THREADS] = x.dk_reg[e];
            data[(D / 2 + e) * ATTN_THREADS] = x.dv_reg[e];
        }
    if (st[VSM_PENDING])
#pragma unroll
        for (int e = 0; e < D / 4; e++)
            data[(D + e) * ATTN_THREADS] = x.dq_reg[e];
}

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_vsm_restore(const struct attn_bwd_params &p, int32_t v,
                                                          const int32_t *st, bwd_wg_regs<D> &x)
{
    const float *data = bwd_tc_vsm_data<D, BN>(p, v);
    if (st[VSM_LOADED])
#pragma unroll
        for (int e = 0; e < D / 2; e++) {
            x.dk_reg[e] = data[e * ATTN_THREADS];
            x.dv_reg[e] = data[(D / 2 + e) * ATTN_THREADS];
        }
    if (st[VSM_PENDING])
#pragma unroll
        for (int e = 0; e < D / 4; e++)
            x.dq_reg[e] = data[(D + e) * ATTN_THREADS];
}

#if ATTN_WGMMA
/* Keep the compiler from moving reads or writes of accumulator registers across a wgmma
 * fence or wait: to it, the asynchronous product's registers change only at the asm. */
template <int N>
static __device__ __forceinline__ void bwd_wg_pin(float (&d)[N])
{
#pragma unroll
    for (int e = 0; e < N; e++)
        asm volatile("" : "+f"(d[e])::"memory");
}

/* Descriptors of the tiles (attn_wgmma.h): a K-major operand at rows r0 .. (a multiple
 * of 8), k16 slice from k0; an MN-major one at k rows k0 .., output index from c0. */
static __device__ __forceinline__ uint64_t bwd_wg_kmajor(const uint16_t *tile, int32_t rows, int32_t r0, int32_t k0)
{
    return attn_wg_desc(tile + ((k0 >> 6) * rows * 64 + r0 * 64 + (k0 & 63)), 16, 1024);
}
static __device__ __forceinline__ uint64_t bwd_wg_mnmajor(const uint16_t *tile, int32_t rows, int32_t k0, int32_t c0)
{
    return attn_wg_desc(tile + ((c0 >> 6) * rows * 64 + k0 * 64 + (c0 & 63)), (uint32_t)rows * 128, 1024);
}

/* P and dS of the warpgroup's 64 x 64 block from its S and dP accumulators, rounded to
 * the input dtype into the swizzled P and dS tiles; MASK as in bwd_tc_pds (the values are
 * the same either way where the caller passes false). S becomes P on the way. The caller
 * has waited for S only: dP's group is waited for here, once P is formed. */
template <typename DT, bool MASK>
static __device__ __forceinline__ void bwd_wg_pds(const struct attn_bwd_params &p, uint16_t *p_smem,
                                                  uint16_t *ds_smem, const float *lse_smem,
                                                  const float *dsum_smem, float (&s)[32], float (&dp)[32],
                                                  int32_t i0, int32_t rm, int32_t j0, int32_t rn)
{
    const int32_t c0 = 64 * (threadIdx.x >> 7); /* the warpgroup's first column */
    const int64_t offset = (int64_t)p.seqlen_k - p.seqlen_q;
    const int causal = p.s.mask == SCHED_MASK_CAUSAL;
    const float scale2 = __fmul_rn(p.scale, ATTN_LOG2E);
    int32_t lim[2]; /* row r's columns c0 + c with c < lim[r] are visible (MASK only) */
    float lse2[2], dsum[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int32_t i = bwd_wg_regs<64>::row(2 * r);
        lse2[r] = __fmul_rn(lse_smem[i], ATTN_LOG2E);
        dsum[r] = dsum_smem[i];
        lim[r] = 0;
        if (MASK) {
            const int64_t diag = (int64_t)i0 + i + offset - j0 + 1; /* past the last visible j */
            const int64_t end = causal && diag < rn ? diag : rn;
            lim[r] = i < rm && end > 0 ? (int32_t)end - c0 : -c0;
        }
    }
#pragma unroll
    for (int e = 0; e < 32; e++) {
        const int r = (e >> 1) & 1;
        const float pr = attn_ex2(fmaf(s[e], scale2, -lse2[r]));
        s[e] = !MASK || bwd_wg_regs<64>::col(e) < lim[r] ? pr : 0.0f;
    }
    attn_wg_wait<0>(); /* dP has landed */
    bwd_wg_pin<32>(dp);
#pragma unroll
    for (int e = 0; e < 32; e++) {
        const int r = (e >> 1) & 1;
        dp[e] = __fmul_rn(s[e], __fsub_rn(dp[e], dsum[r])); /* 0 where P is */
    }
#pragma unroll
    for (int e = 0; e < 32; e += 2) {
        const uint32_t at = attn_sw128(bwd_wg_regs<64>::row(e), c0 + bwd_wg_regs<64>::col(e), BWD_TC_BM) / 2;
        *reinterpret_cast<uint32_t *>(p_smem + at) = DT::pack2(s[e], s[e + 1]);
        *reinterpret_cast<uint32_t *>(ds_smem + at) = DT::pack2(dp[e], dp[e + 1]);
    }
}
#endif

/* One step of v3: the contract of v2's bwd_tc_step (loads, prefetch, registers, the
 * deferred pass-on of rel_ctr after the P/dS barrier), on wgmma. On return dQp has
 * landed; dK and dV have too, unless they are left running under the hand-off (`keep`).
 * With the writer warp (the persistent default) nothing is deferred: rel_ctr is NULL.
 * Measured without the writer (bench/results/gpu-v3-wgmma-2026-11-29.md): passing on
 * earlier, under S and dP, stalls warp 0 until the bulk reduction has completed, and
 * later, under the last products, delays the next adder; both were slower. */
template <typename DT, int D, int BN>
static __device__ __forceinline__ void bwd_tc_step(const struct attn_bwd_params &p, bwd_wg_smem<D> &sm,
                                                   bwd_wg_regs<D> &x, int32_t bh, int32_t n, int32_t m,
                                                   int32_t buf, int loaded, int32_t next_m,
                                                   int32_t *rel_ctr, int32_t rel_rank)
{
#if ATTN_WGMMA
    static_assert(BN == CUATTN_TC_BLOCK_N && BN == 128, "v3 runs 64 x 128 tiles");
    const int32_t tid = threadIdx.x, wg = tid >> 7;
    const int32_t i0 = m * BWD_TC_BM, rm = p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;

    /* A step with a successor in the unit leaves its dK, dV products
     * running past its return, under the dQ hand-off; the successor's S product, queued
     * behind them, completes only after them, so everything that waits for S may then
     * overwrite what they read (the prefetch into buf ^ 1 - their Q and dO - and P, dS). */
    const int keep = next_m >= 0;
    if (!loaded) {
        bwd_tc_load_q<D, BN>(p, sm, buf, bh, m);
        attn_cp_async_wait<0>();
        bwd_tc_async_visible<true>();
        bwd_cta_sync<bwd_wg_smem<D>::writer>(); /* Q, dO, LSE and Dsum are complete before anyone reads them */
    }
    const uint16_t *q_s = sm.q_smem[buf], *do_s = sm.dout_smem[buf];

    /* S = Q K^T, then dP = dO V^T, d ascending: two groups in flight */
    float s[32], dp[32];
    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < D / 16; kk++)
        attn_wg_mma<DT, 64, 0, 0>(s, bwd_wg_kmajor(q_s, BWD_TC_BM, 0, 16 * kk),
                                  bwd_wg_kmajor(sm.k_smem, BN, 64 * wg, 16 * kk), kk > 0);
    attn_wg_commit();
#pragma unroll
    for (int32_t kk = 0; kk < D / 16; kk++)
        attn_wg_mma<DT, 64, 0, 0>(dp, bwd_wg_kmajor(do_s, BWD_TC_BM, 0, 16 * kk),
                                  bwd_wg_kmajor(sm.v_smem, BN, 64 * wg, 16 * kk), kk > 0);
    attn_wg_commit();
    attn_wg_wait<1>(); /* S has landed (and the previous step's dK, dV); dP may still be running */
    bwd_wg_pin<32>(s);
    if (next_m >= 0) /* the previous step's reads of buffer buf ^ 1 are complete */
        bwd_tc_load_q<D, BN>(p, sm, buf ^ 1, bh, next_m);

    const bool whole = rm == BWD_TC_BM && rn == BN &&
                       (p.s.mask != SCHED_MASK_CAUSAL ||
                        (int64_t)i0 + ((int64_t)p.seqlen_k - p.seqlen_q) - j0 >= BN - 1);
    if (whole)
        bwd_wg_pds<DT, false>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s, dp, i0, rm,
                              j0, rn);
    else
        bwd_wg_pds<DT, true>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s, dp, i0, rm,
                             j0, rn);
    bwd_tc_async_visible<true>();
    bwd_cta_sync<bwd_wg_smem<D>::writer>(); /* P and dS are complete before the products below read them */
    if (rel_ctr && tid == 0)
        bwd_tc_pass_on(rel_ctr, rel_rank);

    /* dQp = dS K (j ascending), then dK += dS^T Q and dV += P^T dO (i ascending): two
     * groups, so the dQ hand-off needs only the first */
    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < BN / 16; kk++)
        attn_wg_mma<DT, D / 2, 0, 1>(x.dq_reg, bwd_wg_kmajor(sm.ds_smem, BWD_TC_BM, 0, 16 * kk),
                                     bwd_wg_mnmajor(sm.k_smem, BN, 16 * kk, (D / 2) * wg), kk > 0);
    attn_wg_commit();
#pragma unroll
    for (int32_t kk = 0; kk < BWD_TC_BM / 16; kk++)
        attn_wg_mma<DT, D, 1, 1>(x.dk_reg, bwd_wg_mnmajor(sm.ds_smem, BWD_TC_BM, 16 * kk, 64 * wg),
                                 bwd_wg_mnmajor(q_s, BWD_TC_BM, 16 * kk, 0), 1);
#pragma unroll
    for (int32_t kk = 0; kk < BWD_TC_BM / 16; kk++)
        attn_wg_mma<DT, D, 1, 1>(x.dv_reg, bwd_wg_mnmajor(sm.p_smem, BWD_TC_BM, 16 * kk, 64 * wg),
                                 bwd_wg_mnmajor(do_s, BWD_TC_BM, 16 * kk, 0), 1);
    attn_wg_commit();
    if (keep) {
        attn_wg_wait<1>();
    } else {
        attn_wg_wait<0>();
        bwd_wg_pin<D / 2>(x.dv_reg);
        bwd_wg_pin<D / 2>(x.dk_reg);
    }
    bwd_wg_pin<D / 4>(x.dq_reg);
#else
    (void)p, (void)sm, (void)x, (void)bh, (void)n, (void)m, (void)buf, (void)loaded, (void)next_m;
    (void)rel_ctr, (void)rel_rank;
    __trap();
#endif
}

/* ---- v3's dQ writer warp (persistent mode) -----------------------------------------------
 *
 * In the persistent kernel a ninth warp adds the dQ tiles: the compute warps stage a
 * step's partial in sm.dq_smem and hand it over with a ticket (head, q-tile, rank), then
 * go on with the next step; the writer waits for the tile's turn, adds it with one bulk
 * reduction, frees the staging buffer as soon as the reduction has read it, and passes the
 * tile on the moment the addition is performed. The compute warps wait for no turn: only
 * for a staging buffer (BWD_WG_DQBUFS of them, taken in turn), which the writer frees one
 * turn behind. The additions and their order are exactly those of the other paths (one
 * bulk reduction per step, in rank order), so the bits are too.
 *
 * The hand-off runs on two mbarriers per buffer in shared memory: full_bar[b] completes a
 * phase when all 256 compute threads have staged their part and arrived (thread 0 writes
 * the ticket first), empty_bar[b] when the writer has taken the ticket and the reduction
 * has read the buffer. Arrivals release and waits acquire, so the ticket's and the tile's
 * stores and loads are ordered by the barriers themselves - a protocol compute-sanitizer's
 * racecheck follows (it did not follow the named-barrier form this replaced), and whose
 * state lives in shared memory, set up afresh by each CTA. */
struct bwd_wg_ring {
    int32_t b;      /* the buffer of the next ticket */
    uint32_t phase; /* how often the ring has wrapped, mod 2: the parity of b's phase */
};

template <int D>
static __device__ __forceinline__ void bwd_wg_ring_next(bwd_wg_ring &r)
{
    if (++r.b == BWD_WG_DQBUFS) {
        r.b = 0;
        r.phase ^= 1u;
    }
}

#if BWD_TC_BULK
static __device__ __forceinline__ void bwd_mbar_init(uint64_t *bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(attn_smem_u32(bar)), "r"(count) : "memory");
}

static __device__ __forceinline__ void bwd_mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(attn_smem_u32(bar)) : "memory");
}

/* Wait until the phase of parity `parity` has completed (parity 1 passes at once before
 * the first phase completes: the phase "before" it counts as complete). */
static __device__ __forceinline__ void bwd_mbar_wait(uint64_t *bar, uint32_t parity)
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

/* Thread 0, before the warps part: the barriers; a CTA-wide barrier must follow. */
template <int D>
static __device__ __forceinline__ void bwd_wg_init(bwd_wg_smem<D> &sm)
{
    for (int32_t b = 0; b < BWD_WG_DQBUFS; b++) {
        bwd_mbar_init(&sm.full_bar[b], ATTN_THREADS);
        bwd_mbar_init(&sm.empty_bar[b], 1);
    }
}

/* Compute warps: wait for staging buffer r.b, then let thread 0 fill in the ticket
 * (end: no more tickets) and everyone arrive; on to the next buffer. The tile, if any,
 * must be staged between the wait and the arrival: see bwd_wg_hand. */
template <int D>
static __device__ __forceinline__ void bwd_wg_ticket(bwd_wg_smem<D> &sm, bwd_wg_ring &r, int32_t bh, int32_t m,
                                                     int32_t rank, int32_t end)
{
    if (threadIdx.x == 0) {
        sm.ticket[r.b][0] = bh;
        sm.ticket[r.b][1] = m;
        sm.ticket[r.b][2] = rank;
        sm.ticket[r.b][3] = end;
    }
    bwd_mbar_arrive(&sm.full_bar[r.b]);
    bwd_wg_ring_next<D>(r);
}

/* Compute warps: hand the step's dQ partial of tile m of head bh (rank; -1 for atomic)
 * over in the next staging buffer. */
template <int D>
static __device__ __forceinline__ void bwd_wg_hand(bwd_wg_smem<D> &sm, const bwd_wg_regs<D> &x, bwd_wg_ring &r,
                                                   int32_t bh, int32_t m, int32_t rank)
{
    bwd_mbar_wait(&sm.empty_bar[r.b], r.phase ^ 1u); /* b is free (at once the first time round) */
    bwd_tc_stage_dq<D, CUATTN_TC_BLOCK_N>(sm.dq_smem + r.b * BWD_TC_BM * D, x); /* then fences */
    bwd_wg_ticket(sm, r, bh, m, rank, 0);
}

/* Compute warps, at the end: no more tickets. */
template <int D>
static __device__ __forceinline__ void bwd_wg_hand_end(bwd_wg_smem<D> &sm, bwd_wg_ring &r)
{
    bwd_mbar_wait(&sm.empty_bar[r.b], r.phase ^ 1u);
    bwd_wg_ticket(sm, r, 0, 0, 0, 1);
}

/* Thread 0: wait until the writer has taken the turn of every ticket handed over so far
 * (it then needs nothing more to finish them): each buffer's last use has been read. */
template <int D>
static __device__ __forceinline__ void bwd_wg_drain(bwd_wg_smem<D> &sm, const bwd_wg_ring &r)
{
    for (int32_t b = 0; b < BWD_WG_DQBUFS; b++) /* b's next use: in this round, or the next */
        bwd_mbar_wait(&sm.empty_bar[b], (b < r.b ? r.phase ^ 1u : r.phase) ^ 1u);
}

/* The writer (one thread): take the tickets in turn until the end. */
template <int D>
static __device__ __forceinline__ void bwd_wg_writer(const struct attn_bwd_params &p, bwd_wg_smem<D> &sm)
{
    for (bwd_wg_ring r = {0, 0u};; bwd_wg_ring_next<D>(r)) {
        bwd_mbar_wait(&sm.full_bar[r.b], r.phase); /* a ticket */
        const int32_t bh = sm.ticket[r.b][0], m = sm.ticket[r.b][1], rank = sm.ticket[r.b][2];
        if (sm.ticket[r.b][3])
            return;
        int32_t *ctr = p.counter + (int64_t)bh * p.s.m_tiles + m;
        if (rank >= 0)
            bwd_tc_take_turn(ctr, rank);
        bwd_tc_bulk_add<D>(p, sm.dq_smem + r.b * BWD_TC_BM * D, bh, m);
        bwd_tc_bulk_wait_read();
        bwd_mbar_arrive(&sm.empty_bar[r.b]); /* free again */
        bwd_tc_pass_on(ctr, rank); /* performed, then passed on (atomic: performed) */
    }
}
#endif

/* Persistent mode: the q-tiles and ranks of steps base .. base + BWD_TC_TAB of the job's
 * stage (those below `steps`), one entry per thread, into the visit table. A step then
 * reads its q-tile, its successor's and its rank instead of forming them: the shift
 * ranks take several integer divisions, and thread 0 forming them every step delayed its
 * warp, and so every barrier, by hundreds of instructions. The caller publishes the
 * table with a barrier, and refills it only once every read of the old one is behind a
 * barrier. */
static __device__ __forceinline__ void bwd_tc_fill_visits(const struct sched *s, int32_t *visit_smem,
                                                          int32_t *rank_smem, const struct sched_job *J,
                                                          int32_t stage, int32_t base, int32_t steps)
{
    for (int32_t t = threadIdx.x; t <= BWD_TC_TAB && base + t < steps; t += ATTN_THREADS) {
        const int32_t m = sched_visit(s, J, stage, base + t);
        visit_smem[t] = m;
        rank_smem[t] = sched_rank(s, J, stage, m);
    }
}

/* Persistent mode: take jobs in dispatch order; block on each turn. While thread 0 waits,
 * the next step's Q/dO are already on their way. v3 with the writer warp (W) hands each
 * step's dQ partial to the writer instead and waits for no turn. */
template <typename DT, int D, int BN, typename SM, typename REGS>
static __device__ __forceinline__ void bwd_tc_persistent(const struct attn_bwd_params &p, SM &sm)
{
    const struct sched *s = &p.s;
    constexpr bool W = SM::writer;
    [[maybe_unused]] bwd_wg_ring hb = {0, 0u}; /* W: the staging buffer of the next ticket */
    [[maybe_unused]] int32_t wait_end = 0;     /* W: sched_wait_end of the last job taken */
    REGS x;
    for (;;) {
        if constexpr (W) {
            /* The writer may still hold tickets of the last job whose turns wait on a job
             * nobody has taken yet (shift: the jobs of a chunk wait on each other). Taking
             * that job now would deadlock: its tiles would wait for a staging buffer, the
             * buffers for those turns, the turns for its tiles. So unless every job they
             * may wait on is taken, let the writer take every turn first. */
            if (threadIdx.x == 0 && wait_end > attn_ld_acquire(p.job_next))
                bwd_wg_drain(sm, hb);
        }
        if (threadIdx.x == 0)
            sm.flag_smem = atomicAdd(p.job_next, 1);
        bwd_cta_sync<W>(); /* the job index is visible to every thread */
        const int32_t job = sm.flag_smem;
        bwd_cta_sync<W>(); /* everyone has read it before thread 0 may write the next one */
        if (job >= s->jobs) {
            if constexpr (W) { /* tell the writer */
                bwd_wg_hand_end(sm, hb);
                return;
            }
#if BWD_TC_BULK
            if (threadIdx.x == 0) /* atomic leaves its last reduction in flight: finish it */
                asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
            return;
        }
        const struct sched_job J = sched_job_taken(s, job);
        if constexpr (W)
            wait_end = sched_wait_end(s, job);
        for (int32_t stage = 0; stage < sched_job_stages(s, J.k); stage++) {
            const int32_t n = sched_job_unit(s, J.k, stage);
            const int32_t steps = sched_unit_steps(s, n);
            /* the previous unit read the table last before its last turn's barrier */
            bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, 0, steps);
            bwd_tc_load_kv<D, BN>(p, sm, J.bh, n); /* its barrier publishes the table too */
            bwd_tc_zero_kv<D, BN>(x);
            int32_t m = sm.visit_smem[0], buf = 0, base = 0; /* the table holds steps base .. */
            int loaded = 0;
            int32_t *pend_ctr = NULL, pend_rank = -1; /* a turn still to pass on */
            for (int32_t step = 0; step < steps; step++) {
                if (step + 1 - base > BWD_TC_TAB) { /* the successor's entry is past the table */
                    base = step;
                    bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, base, steps);
                    bwd_cta_sync<W>(); /* the refill is complete before anyone reads it (every
                                          read of the old table came before the last turn) */
                }
                const int32_t next_m = step + 1 < steps ? sm.visit_smem[step + 1 - base] : -1;
                const int32_t rank = threadIdx.x == 0 ? sm.rank_smem[step - base] : -1;
                int32_t *ctr = p.counter + (int64_t)J.bh * s->m_tiles + m;
                /* The unit whose addition we wait for was taken earlier by a running CTA
                 * (or, for shift, by one of the >= W resident CTAs), so it comes. With the
                 * writer warp (W) the writer waits for turns, not thread 0. */
                const int take = threadIdx.x == 0 && s->kind != SCHED_ATOMIC && !W;
                bwd_tc_step<DT, D, BN>(p, sm, x, J.bh, n, m, buf, loaded, next_m, pend_ctr, pend_rank);
                pend_ctr = NULL;
                if (take)
                    bwd_tc_take_turn(ctr, rank);
                /* Passing the tile on during the next step lets the reductions complete
                 * under S and dP instead of stalling the fence; the next step waits on
                 * nothing before it passes the tile on, so no wait can form a cycle.
                 * atomic passes nothing on: its additions need no fence. */
                if constexpr (W) {
                    /* the writer warp waits for the turn, adds and passes the tile on */
                    attn_cp_async_wait<0>(); /* the prefetch for the next step has landed ... */
                    bwd_tc_async_visible<true>();
                    bwd_cta_sync<W>(); /* ... and is visible to all; every warp is done with the
                                          step's buffer, P, dS and K */
                    /* thread 0's rank, read at the top of the step: the table may be
                     * refilled as soon as the compute warps have handed the tile over
                     * (nothing makes them wait for each other there) */
                    bwd_wg_hand(sm, x, hb, J.bh, m, s->kind != SCHED_ATOMIC ? rank : -1);
                    m = next_m;
                    buf ^= 1;
                    loaded = 1;
                    continue;
                }
                const int defer = s->kind != SCHED_ATOMIC && p.defer && next_m >= 0;
#if BWD_TC_BULK
                if (threadIdx.x == 0)
                    bwd_tc_bulk_wait_read(); /* the last reduction has read the staging buffer */
#endif
                attn_cp_async_wait<0>(); /* the prefetch for the next step has landed ... */
                bwd_tc_async_visible<SM::swizzled>();
                __syncthreads(); /* ... and is visible to all; our turn has come, for the whole
                                    CTA; every warp is done with the step's buffer, P, dS and
                                    K before the next step or unit overwrites them, and thread
                                    0 with the staging buffer */
#if BWD_TC_BULK
                bwd_tc_stage_dq<D, BN>(sm.dq_smem, x);
                __syncthreads(); /* the staged tile is complete before thread 0 hands it on */
                if (threadIdx.x == 0) {
                    bwd_tc_bulk_add<D>(p, sm.dq_smem, J.bh, m);
                    if (s->kind != SCHED_ATOMIC && !defer)
                        bwd_tc_pass_on(ctr, rank);
                }
#else
                bwd_tc_add_dq<D, BN>(p, x, J.bh, m);
                if (s->kind != SCHED_ATOMIC && !defer)
                    bwd_tc_release(ctr, rank);
#endif
                if (defer) {
                    pend_ctr = ctr;
                    pend_rank = rank;
                }
                m = next_m;
                buf ^= 1;
                loaded = 1;
            }
            bwd_tc_store_unit<DT, D, BN>(p, x, J.bh, n);
        }
    }
}

/* Interleaved mode: virtual SMs blockIdx.x, blockIdx.x + gridDim.x, ... in turn (v1's
 * bookkeeping, v2's step; no prefetch, since the next step may belong to another one). */
template <typename DT, int D, int BN, typename SM, typename REGS>
static __device__ __forceinline__ void bwd_tc_interleaved(const struct attn_bwd_params &p, SM &sm)
{
    const struct sched *s = &p.s;
    REGS x;
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
                    bwd_tc_vsm_save<D, BN>(p, held, st, x);
                held = v;
                for (int i = 0; i < VSM_SLOTS; i++)
                    st[i] = nx[i];
                bwd_tc_vsm_restore<D, BN>(p, v, st, x);
                if (st[VSM_LOADED]) {
                    const struct sched_job J = sched_job_at(s, st[VSM_JOB]);
                    bwd_tc_load_kv<D, BN>(p, sm, J.bh, sched_job_unit(s, J.k, st[VSM_STAGE]));
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
                        bwd_tc_load_kv<D, BN>(p, sm, J.bh, n);
                        bwd_tc_zero_kv<D, BN>(x);
                        st[VSM_LOADED] = 1;
                    }
                    st[VSM_M] = sched_visit(s, &J, st[VSM_STAGE], st[VSM_STEP]);
                    bwd_tc_step<DT, D, BN>(p, sm, x, J.bh, n, st[VSM_M], 0, 0, -1, NULL, -1);
                    if (threadIdx.x == 0)
                        st[VSM_RANK] = sched_rank(s, &J, st[VSM_STAGE], st[VSM_M]);
                    st[VSM_PENDING] = 1;
                    progress = 1;
                }
                int32_t *ctr = p.counter + (int64_t)J.bh * s->m_tiles + st[VSM_M];
                if (threadIdx.x == 0) {
                    const int go = st[VSM_RANK] < 0 || attn_ld_acquire(ctr) == st[VSM_RANK];
#if !BWD_TC_BULK /* (sm_90: thread 0 adds the tile itself; see bwd_tc_take_turn) */
                    if (go)
                        __threadfence();
#endif
                    sm.flag_smem = go;
                }
                __syncthreads(); /* thread 0's verdict on the turn is visible to all */
                const int go = sm.flag_smem;
                __syncthreads(); /* everyone has read it before thread 0 may write it again */
                if (!go)
                    break; /* not our turn: keep the partial, try the next virtual SM */
                bwd_tc_add_release<D, BN>(p, sm, x, J.bh, st[VSM_M], ctr, threadIdx.x == 0 ? st[VSM_RANK] : -1);
                st[VSM_PENDING] = 0;
                progress = 1;
                if (++st[VSM_STEP] < sched_unit_steps(s, n))
                    continue;
                bwd_tc_store_unit<DT, D, BN>(p, x, J.bh, n);
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
/* v3's shared memory starts on a BWD_WG_ALIGN boundary: the kernel asks for that much more
 * and rounds the dynamic block's address up. */
template <int D, int BN, int V>
struct bwd_kern {
    typedef bwd_tc_smem<D, BN> smem;
    typedef bwd_tc_regs<D, BN> regs;
    static constexpr size_t bytes = sizeof(smem);
    static constexpr int persistent_threads = ATTN_THREADS;
};
template <int D, int BN>
struct bwd_kern<D, BN, 3> {
    typedef bwd_wg_smem<D> smem;
    typedef bwd_wg_regs<D> regs;
    static constexpr size_t bytes = sizeof(smem) + BWD_WG_ALIGN;
    /* with the writer: a third warpgroup, so that registers can move between the groups */
    static constexpr int persistent_threads = ATTN_THREADS + 128;
};

template <int D, int BN, int V>
static __device__ __forceinline__ typename bwd_kern<D, BN, V>::smem &bwd_kern_smem(unsigned char *raw)
{
    if (V == 3) {
        const uint32_t at = attn_smem_u32(raw);
        raw += ((at + BWD_WG_ALIGN - 1) & ~(uint32_t)(BWD_WG_ALIGN - 1)) - at;
    }
    return *reinterpret_cast<typename bwd_kern<D, BN, V>::smem *>(raw);
}

/* V: 2 runs v2's step (mma.sync), 3 v3's (wgmma; sm_90a only, the sm_80 build traps). */
#if ATTN_WGMMA
#define BWD_KERN_RUNS(V) 1
#else
#define BWD_KERN_RUNS(V) ((V) != 3)
#endif

/* The two modes are two kernels around the same inlined bwd_tc_step, so that each gets
 * its own register allocation: one kernel holding both needs more than 255 registers at
 * D = 128 and spills. Which kernel runs changes nothing but the bookkeeping around the
 * steps. */
template <typename DT, int D, int BN, int V>
__global__ void __launch_bounds__(bwd_kern<D, BN, V>::persistent_threads, 1)
    attn_bwd_tc_persistent_kernel(const struct attn_bwd_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    typedef bwd_kern<D, BN, V> K;
    if constexpr (BWD_KERN_RUNS(V)) {
        typename K::smem &sm = bwd_kern_smem<D, BN, V>(smem_raw);
#if BWD_TC_BULK
        if constexpr (K::smem::writer) {
            /* Registers go where the products are: the third warpgroup (the writer, one
             * thread, and the idle rest) gives up all but 24 a thread, the two computing ones
             * take 240 (one writer and two compute warps per SM quarter: 24 + 2 x 240
             * registers a lane, within the 512 there are). */
            if (threadIdx.x == 0)
                bwd_wg_init<D>(sm);
            __syncthreads(); /* the hand-off's barriers are set up before anyone uses them */
            if (threadIdx.x >= ATTN_THREADS) {
                asm volatile("setmaxnreg.dec.sync.aligned.u32 24;" ::: "memory");
                if (threadIdx.x == ATTN_THREADS)
                    bwd_wg_writer<D>(p, sm);
                return;
            }
            asm volatile("setmaxnreg.inc.sync.aligned.u32 240;" ::: "memory");
        }
#endif
        bwd_tc_persistent<DT, D, BN, typename K::smem, typename K::regs>(p, sm);
    } else {
        __trap();
    }
}

template <typename DT, int D, int BN, int V>
__global__ void __launch_bounds__(ATTN_THREADS, 1) attn_bwd_tc_interleaved_kernel(const struct attn_bwd_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    typedef bwd_kern<D, BN, V> K;
    if constexpr (BWD_KERN_RUNS(V))
        bwd_tc_interleaved<DT, D, BN, typename K::smem, typename K::regs>(p, bwd_kern_smem<D, BN, V>(smem_raw));
    else
        __trap();
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
        const float2 a = *reinterpret_cast<const float2 *>(p.dq_acc + row * D + bwd_tc_dq_at(i, d));
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

template <typename DT, int D, int BN, int V>
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
        attn_bwd_tc_interleaved_kernel<DT, D, BN, V>
            <<<(uint32_t)grid, ATTN_THREADS, bwd_kern<D, BN, V>::bytes, stream>>>(*p);
    else
        attn_bwd_tc_persistent_kernel<DT, D, BN, V>
            <<<(uint32_t)grid, bwd_kern<D, BN, V>::persistent_threads, bwd_kern<D, BN, V>::bytes, stream>>>(*p);
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

template <typename DT, int D, int BN, int V>
static cudaError_t bwd_tc_attr(size_t smem_optin)
{
    const size_t bytes = bwd_kern<D, BN, V>::bytes;
    if (bytes > smem_optin)
        return cudaSuccess; /* unusable here: cuattn_impl_for sends this dim elsewhere */
    cudaError_t err = cudaFuncSetAttribute(attn_bwd_tc_persistent_kernel<DT, D, BN, V>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (err != cudaSuccess)
        return err;
    return cudaFuncSetAttribute(attn_bwd_tc_interleaved_kernel<DT, D, BN, V>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* The smaller of the two kernels' figures: the host picks the grid before the mode. */
template <typename DT, int D, int BN, int V>
static cudaError_t bwd_tc_occupancy(int32_t *ret)
{
    const size_t bytes = bwd_kern<D, BN, V>::bytes;
    int a = 0, b = 0;
    cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &a, attn_bwd_tc_persistent_kernel<DT, D, BN, V>, bwd_kern<D, BN, V>::persistent_threads, bytes);
    if (err == cudaSuccess)
        err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, attn_bwd_tc_interleaved_kernel<DT, D, BN, V>,
                                                            ATTN_THREADS, bytes);
    if (err == cudaSuccess)
        *ret = a < b ? a : b;
    return err;
}

/* v2 at both tile widths; v3 (64 x 128 only) where the device is sm_90 (wg). */
template <typename DT, int D>
static cudaError_t bwd_tc_attr_all(size_t smem_optin, int wg)
{
    cudaError_t err = bwd_tc_attr<DT, D, 64, 2>(smem_optin);
    if (err == cudaSuccess)
        err = bwd_tc_attr<DT, D, CUATTN_TC_BLOCK_N, 2>(smem_optin);
    if (err == cudaSuccess && wg)
        err = bwd_tc_attr<DT, D, CUATTN_TC_BLOCK_N, 3>(smem_optin);
    return err;
}

cudaError_t cuattn__bwd_tc_init(size_t smem_optin, int wg)
{
    cudaError_t err;
    if ((err = bwd_tc_attr_all<attn_bf16, 64>(smem_optin, wg)) != cudaSuccess ||
        (err = bwd_tc_attr_all<attn_bf16, 128>(smem_optin, wg)) != cudaSuccess ||
        (err = bwd_tc_attr_all<attn_f16, 64>(smem_optin, wg)) != cudaSuccess ||
        (err = bwd_tc_attr_all<attn_f16, 128>(smem_optin, wg)) != cudaSuccess)
        return err;
    return cudaSuccess;
}

/* The larger of v2's two tile widths: if it fits, so does the other. */
size_t cuattn__bwd_tc_smem_bytes(int32_t head_dim)
{
    return head_dim == 64    ? bwd_kern<64, CUATTN_TC_BLOCK_N, 2>::bytes
           : head_dim == 128 ? bwd_kern<128, CUATTN_TC_BLOCK_N, 2>::bytes
                             : 0;
}

size_t cuattn__bwd_wg_smem_bytes(int32_t head_dim)
{
    return head_dim == 64    ? bwd_kern<64, CUATTN_TC_BLOCK_N, 3>::bytes
           : head_dim == 128 ? bwd_kern<128, CUATTN_TC_BLOCK_N, 3>::bytes
                             : 0;
}

size_t cuattn__bwd_tc_vsm_floats(int32_t head_dim, int32_t block_n)
{
    return (size_t)BWD_TC_VSM_FLOATS(head_dim, block_n); /* v3's registers: the same count */
}

/* One switch for the (dtype, head dim, kv-tile, v2/v3) kernels; anything else is refused.
 * wg asks for v3, which has 64 x 128 tiles only. */
#define BWD_TC_DISPATCH(dt, head_dim, block_n, wg, CALL)                                        \
    do {                                                                                        \
        const int bf_ = (dt) == DTYPE_BF16, wide_ = (block_n) == CUATTN_TC_BLOCK_N;             \
        if (((block_n) != 64 && !wide_) || ((wg) && !wide_))                                    \
            return cudaErrorInvalidValue;                                                       \
        switch (head_dim) {                                                                     \
        case 64:                                                                                \
            if (wg)                                                                             \
                return bf_ ? CALL(attn_bf16, 64, CUATTN_TC_BLOCK_N, 3)                          \
                           : CALL(attn_f16, 64, CUATTN_TC_BLOCK_N, 3);                          \
            return bf_ ? (wide_ ? CALL(attn_bf16, 64, CUATTN_TC_BLOCK_N, 2) : CALL(attn_bf16, 64, 64, 2)) \
                       : (wide_ ? CALL(attn_f16, 64, CUATTN_TC_BLOCK_N, 2) : CALL(attn_f16, 64, 64, 2));  \
        case 128:                                                                               \
            if (wg)                                                                             \
                return bf_ ? CALL(attn_bf16, 128, CUATTN_TC_BLOCK_N, 3)                         \
                           : CALL(attn_f16, 128, CUATTN_TC_BLOCK_N, 3);                         \
            return bf_ ? (wide_ ? CALL(attn_bf16, 128, CUATTN_TC_BLOCK_N, 2) : CALL(attn_bf16, 128, 64, 2)) \
                       : (wide_ ? CALL(attn_f16, 128, CUATTN_TC_BLOCK_N, 2) : CALL(attn_f16, 128, 64, 2));  \
        default:                                                                                \
            return cudaErrorInvalidValue;                                                       \
        }                                                                                       \
    } while (0)

cudaError_t cuattn__bwd_tc_blocks_per_sm(enum dtype_kind dt, int32_t head_dim, int32_t block_n, int wg,
                                         int32_t *ret)
{
#define BWD_TC_OCC(T, D, BN, V) bwd_tc_occupancy<T, D, BN, V>(ret)
    BWD_TC_DISPATCH(dt, head_dim, block_n, wg, BWD_TC_OCC);
#undef BWD_TC_OCC
}

cudaError_t cuattn__bwd_tc_launch(const struct attn_bwd_params *p, enum dtype_kind dt,
                                  int32_t grid, int32_t sms, cudaStream_t stream)
{
#define BWD_TC_RUN(T, D, BN, V) bwd_tc_launch<T, D, BN, V>(p, grid, sms, stream)
    BWD_TC_DISPATCH(dt, p->head_dim, p->s.block_n, p->wg, BWD_TC_RUN);
#undef BWD_TC_RUN
}
