// SPDX-License-Identifier: BSD-3-Clause
/*
 * bwd_mma.cuh - v2's step of the backward on mma.sync tensor cores, and what v3 shares
 * with it: the tiles in shared memory, the loads, the dQ turn (take, add, release), the
 * store of a unit's dK, dV and the interleaved mode's saved state. Device code included
 * by attn_bwd_tc.cu only (before bwd_wgmma.cuh, whose overloads complete these
 * templates); the kernels, their modes and the determinism argument are described there.
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
 * visit table (2 KB). BN = 128: 125 KiB at D = 64 (at D = 128 it would need 205 KiB, more
 * than an sm_80 GPU gives, and spilled registers on sm_90: not built, BWD_TC_WIDE); BN = 64:
 * 155 KiB at D = 128 (an A100 holds it) and 91 KiB at D = 64. Registers (ptxas 13.0, sm_90a,
 * persistent / interleaved): BN = 128, D = 64: 245 / 243; BN = 64: 240 / 237 and 197 / 182.
 * One CTA of 8 warps per SM. P = 2^x is one MUFU.EX2
 * (attn_ex2); P and dS go to shared memory by stmatrix on sm_90. The persistent mode
 * prefetches the next step's Q, dO, LSE and Dsum with cp.async into the other buffer
 * while the step computes, and waits for them before its dQ turn's barrier, which
 * publishes them: a prefetched step starts without a barrier. A prefetch changes when
 * bytes arrive, never which bytes: the interleaved mode, which never prefetches, computes
 * on the same values. The step ends without a barrier: the dQ turn's barriers, which
 * every caller meets next, keep the next step's writes (prefetch, P, dS) behind this
 * step's reads.
 */
#ifndef DASH_KERNELS_CUDA_BWD_MMA_CUH
#define DASH_KERNELS_CUDA_BWD_MMA_CUH

#include "kernels/digest/digest_leaf.cuh"

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
 * and multiplies per chunk (about 29 instructions a chunk in ptxas 13.0's code). Unaligned sources take the general loop; the bytes that land are the same
 * (for all D columns: a narrow load, chunks < D/8, must be aligned). Returns whether any
 * thread wrote part of the tile with plain stores (zeros past the rows or the columns, or
 * the general loop), which wgmma reads only after a proxy fence: uniform over the CTA. */
template <int D, int ROWS, bool SW>
static __device__ __forceinline__ bool bwd_tc_load_tile(uint16_t *tile_smem, const uint16_t *src,
                                                        int64_t base, int64_t row_stride, int32_t rows,
                                                        int32_t chunks = D / 8)
{
    const int32_t CH = D / 8, RP = ATTN_THREADS / CH; /* chunks per row, rows per pass */
    /* elements from a row to the row RP below: RP is a multiple of 8, so in the swizzled
     * layout the chunk keeps its place within the row */
    const int32_t STEP = RP * (SW ? 64 : attn_tc_ld<D>::v);
    const uint16_t *g = src + base;
    if (((((uintptr_t)g | (uintptr_t)(row_stride * 2)) & 15u) != 0)) {
        if (chunks != CH) /* the general loop loads every column: the host sends such views */
            __trap();     /* to the widened copies (narrow_kv_aligned), never here */
        attn_tc_load_tile<D, ROWS, SW>(tile_smem, src, base, row_stride, rows, ATTN_THREADS);
        return true;
    }
    const int32_t r = threadIdx.x / CH, c = threadIdx.x % CH;
    const uint16_t *from = g + r * row_stride + c * 8;
    uint16_t *to = tile_smem + attn_tc_chunk<D, ROWS, SW>(r, c);
#pragma unroll
    for (int32_t k = 0; k < ROWS / RP; k++) {
        if (r + k * RP < rows && c < chunks) /* (chunks: the caller's columns of a widened head dim; zeros past them) */
            attn_cp_async16(to + k * STEP, from + k * RP * row_stride);
        else
            *reinterpret_cast<uint4 *>(to + k * STEP) = make_uint4(0u, 0u, 0u, 0u);
    }
    return rows < ROWS || chunks != CH;
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

/* The persistent kernels: thread 0 takes the next job's dispatch index for the CTA (through
 * flag, a word of shared memory); every thread returns it, and flag is free again on return. */
template <bool W>
static __device__ __forceinline__ int32_t bwd_tc_take_job(const struct attn_bwd_params &p, int32_t &flag)
{
    if (threadIdx.x == 0)
        flag = atomicAdd(p.job_next, 1);
    bwd_cta_sync<W>(); /* the job index is visible to every thread */
    const int32_t job = flag;
    bwd_cta_sync<W>(); /* everyone has read it before thread 0 may write the next one */
    return job;
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

/* Persistent mode (attn_bwd_tc.cu, attn_vl.cu): the q-tiles and ranks of steps base .. base + BWD_TC_TAB of the job's
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

/* Start loading the unit's K and V tiles (one committed cp.async group a thread; rows past
 * Sk are zeroed at once). NARROW: p.d_cols may name fewer columns than D (72-120 on the 128
 * kernel, dense only; the window/packed kernels pass false, which keeps the column count a
 * constant: read from the params it cost their softcap instance a spill). Returns whether
 * plain stores wrote part of them (bwd_tc_load_tile). */
template <int D, int BN, bool NARROW = true, typename SM>
static __device__ __forceinline__ bool bwd_tc_load_kv_start(const struct attn_bwd_params &p, SM &sm, int32_t bh,
                                                            int32_t n)
{
    const int32_t b = bh / p.heads_q, hk = (bh - b * p.heads_q) / p.group;
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;
    const int32_t ch = NARROW && D == 128 && p.d_cols ? p.d_cols / 8 : D / 8; /* the caller's columns (aligned: host) */
    const bool kg = bwd_tc_load_tile<D, BN, SM::swizzled>(sm.k_smem, static_cast<const uint16_t *>(p.k),
                            b * p.k_stride[0] + (int64_t)j0 * p.k_stride[1] + hk * p.k_stride[2],
                            p.k_stride[1], rn, ch);
    const bool vg = bwd_tc_load_tile<D, BN, SM::swizzled>(sm.v_smem, static_cast<const uint16_t *>(p.v),
                            b * p.v_stride[0] + (int64_t)j0 * p.v_stride[1] + hk * p.v_stride[2],
                            p.v_stride[1], rn, ch);
    attn_cp_async_commit();
    return kg || vg;
}

/* Wait for every cp.async of the thread (the K and V load above among them) and meet. */
template <typename SM>
static __device__ __forceinline__ void bwd_tc_load_kv_wait(void)
{
    attn_cp_async_wait<0>();
    bwd_tc_async_visible<SM::swizzled>();
    bwd_cta_sync<SM::writer>(); /* K and V are complete before the unit's first step reads them */
}

/* Load the unit's K and V tiles and wait for them. */
template <int D, int BN, bool NARROW = true, typename SM>
static __device__ __forceinline__ void bwd_tc_load_kv(const struct attn_bwd_params &p, SM &sm, int32_t bh,
                                                      int32_t n)
{
    bwd_tc_load_kv_start<D, BN, NARROW>(p, sm, bh, n);
    bwd_tc_load_kv_wait<SM>();
}

/* Start loading LSE and Dsum of q-tile m (rows i0 .., rm of them) of head bh into buffer
 * `buf` and commit the thread's cp.async group (rows past Sq: LSE +inf, Dsum 0). */
template <typename SM>
static __device__ __forceinline__ void bwd_tc_load_stats(const struct attn_bwd_params &p, SM &sm, int32_t buf,
                                                         int32_t bh, int32_t i0, int32_t rm)
{
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
    bwd_tc_load_stats(p, sm, buf, bh, i0, rm);
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

/* A pair of row's elements d, d + 1 (0 where row is NULL: past the end): one 32-bit load
 * where the row is 4-byte aligned (al), two 16-bit loads where it is not (odd strides). */
static __device__ __forceinline__ uint32_t bwd_tc_ld_pair(const uint16_t *row, int32_t d, bool al)
{
    if (!row)
        return 0u;
    return al ? *reinterpret_cast<const uint32_t *>(row + d) : attn_ld_pair(row + d);
}

/* The preprocess's Dsum chain for one warp's 16 rows: rows g and g + 8 of the group
 * (g = lane / 4) at o_row[0], o_row[1] and do_row[0], do_row[1] (NULL past the end), the
 * diagonal of dO O^T by mma.sync m16n8k16 over d ascending from zero accumulators - the
 * chain bwd_tc_step runs for dP = dO V^T. Row g's sum ends in lane 4g + g/2's
 * c_lo[g % 2], row g + 8's in c_hi[2 + g % 2]. The loads' width changes no value, so
 * neither the bits. */
template <typename DT, int D>
static __device__ __forceinline__ void bwd_tc_dsum_chain(const uint16_t *const (&o_row)[2],
                                                         const uint16_t *const (&do_row)[2], int32_t t4,
                                                         float (&c_lo)[4], float (&c_hi)[4], int32_t cols = D)
{
    bool al[2];
#pragma unroll
    for (int r = 0; r < 2; r++)
        al[r] = (((uintptr_t)o_row[r] | (uintptr_t)do_row[r]) & 3u) == 0;
#pragma unroll
    for (int e = 0; e < 4; e++)
        c_lo[e] = c_hi[e] = 0.0f;
#pragma unroll
    for (int32_t kk = 0; kk < D / 16; kk++) {
        const int32_t d = 16 * kk + 2 * t4;
        uint32_t a[4] = {0u, 0u, 0u, 0u}, b0 = 0u, b1 = 0u, b2 = 0u, b3 = 0u;
        /* past cols (a widened head dim's on the wider kernel, a multiple of 8): zeros, the
         * widened copies' columns; the step's two 8-column halves apart */
        if (cols == D || 16 * kk < cols) {
            a[0] = bwd_tc_ld_pair(do_row[0], d, al[0]);
            a[1] = bwd_tc_ld_pair(do_row[1], d, al[1]);
            b0 = bwd_tc_ld_pair(o_row[0], d, al[0]);
            b2 = bwd_tc_ld_pair(o_row[1], d, al[1]);
        }
        if (cols == D || 16 * kk + 8 < cols) {
            a[2] = bwd_tc_ld_pair(do_row[0], d + 8, al[0]);
            a[3] = bwd_tc_ld_pair(do_row[1], d + 8, al[1]);
            b1 = bwd_tc_ld_pair(o_row[0], d + 8, al[0]);
            b3 = bwd_tc_ld_pair(o_row[1], d + 8, al[1]);
        }
        DT::mma(c_lo, a, b0, b1);
        DT::mma(c_hi, a, b2, b3);
    }
}

/* dQacc's element as additions to zero give it: a + 0 with subnormals flushed (add.ftz) -
 * -0 becomes +0, a subnormal +0, nothing else changes. Where a tile's first addition is a
 * copy (attn_bwd_dq_first_stores) a lone contributor's -0 or subnormal reaches dQacc as it
 * is; the bulk reductions (and sm_80's red) flush subnormal inputs and results to zero, so
 * 0 + x gave +0 for both: this makes the copy's element the same. */
static __device__ __forceinline__ float bwd_tc_dq_plus0(float a)
{
    float r;
    asm("add.rn.ftz.f32 %0, %1, 0f00000000;" : "=f"(r) : "f"(a));
    return r;
}

static __device__ __forceinline__ float2 bwd_tc_dq_plus0(float2 a)
{
    return make_float2(bwd_tc_dq_plus0(a.x), bwd_tc_dq_plus0(a.y));
}

/* The postprocess of one dQ row, by one warp: dQ = scale dQacc rounded to the dtype, lane l
 * the pairs d = 2 l, 2 l + 64, ... (stores of consecutive pairs, reads inside the row's
 * 128-byte swizzle groups). dq_row: the row's first element; acc_row: its D floats in
 * the bwd_tc_dq_at layout of row i, or NULL for a row nothing was added to (zeros). The
 * same products, so the same bits, as one thread a pair; the row's index arithmetic is
 * done once, not per pair (64-bit divisions: they, not memory, bounded the pair-per-thread
 * kernels). */
template <typename DT, int D>
static __device__ __forceinline__ void bwd_tc_dq_row(uint16_t *dq_row, const float *acc_row, int32_t i, float scale,
                                                     int32_t lane, int32_t cols = D)
{
    static_assert(D % 64 == 0, "whole warps of pairs");
#pragma unroll
    for (int32_t d = 2 * lane; d < D; d += 64) {
        if (cols != D && d >= cols) /* a widened head dim: the caller's columns only */
            continue;
        const float2 a = acc_row ? bwd_tc_dq_plus0(*reinterpret_cast<const float2 *>(acc_row + bwd_tc_dq_at(i, d)))
                                 : make_float2(0.0f, 0.0f);
        attn_st_pair(dq_row + d, DT::pack2(__fmul_rn(a.x, scale), __fmul_rn(a.y, scale)));
    }
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

/* One thread: add rows [0, rm) of the staged tile into the (rm, D) floats at acc (16-byte
 * aligned); store: copy them there instead (the tile's first addition where dQacc was not
 * zeroed: attn_bwd_dq_first_stores). */
template <int D>
static __device__ __forceinline__ void bwd_tc_bulk_add_to(float *acc, const float *dq_smem, int32_t rm,
                                                          bool store = false)
{
    /* the turn was acquired through the generic proxy; the reduction runs in the async one */
    asm volatile("fence.proxy.async.global;" ::: "memory");
    if (store)
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                         __cvta_generic_to_global(acc)),
                     "r"(attn_smem_u32(dq_smem)), "r"((uint32_t)(rm * D * sizeof(float)))
                     : "memory");
    else
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                         __cvta_generic_to_global(acc)),
                     "r"(attn_smem_u32(dq_smem)), "r"((uint32_t)(rm * D * sizeof(float)))
                     : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* Thread 0: add (store) rows [0, rm) of the staged tile into dQacc tile m of head bh. */
template <int D>
static __device__ __forceinline__ void bwd_tc_bulk_add(const struct attn_bwd_params &p, const float *dq_smem,
                                                       int32_t bh, int32_t m, bool store = false)
{
    const int32_t i0 = m * BWD_TC_BM, rm = p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
    bwd_tc_bulk_add_to<D>(p.dq_acc + ((int64_t)bh * p.seqlen_q + i0) * D, dq_smem, rm, store);
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
template <typename DT, int BN, bool MASK, bool VL = false>
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
            [[maybe_unused]] int32_t lim_lo = 0; /* VL: ... and c >= lim_lo */
            if constexpr (VL) {
                /* attn_vl.cu: the sequence's window (wl, wr; -1 unbounded), causal in it */
                if (MASK) {
                    const int64_t at = (int64_t)i0 + i + offset - j0; /* the diagonal's column */
                    const int64_t end = p.s.wr >= 0 && at + p.s.wr + 1 < rn ? at + p.s.wr + 1 : rn;
                    const int64_t start = p.s.wl >= 0 && at - p.s.wl > 0 ? at - p.s.wl : 0;
                    const bool any = i < rm && end > start;
                    lim = any ? (int32_t)end - jt : -jt;
                    lim_lo = any ? (int32_t)start - jt : -jt;
                }
            } else if (MASK) {
                const int64_t diag = (int64_t)i0 + i + offset - j0 + 1; /* past the last visible j */
                const int64_t end = causal && diag < rn ? diag : rn;
                lim = i < rm && end > 0 ? (int32_t)end - jt : -jt;
            }
#pragma unroll
            for (int t = 0; t < BN / 32; t++) {
                float pv[2], dsv[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float pr, ds;
                    if constexpr (VL) {
                        /* softcap: the score cap tanh(scale q.k / cap); dS through the tanh */
                        if (p.softcap > 0.0f) {
                            const float th = tanhf(__fmul_rn(s_reg[mt][t][2 * r + e], __fdiv_rn(p.scale, p.softcap)));
                            pr = attn_ex2(fmaf(th, __fmul_rn(p.softcap, ATTN_LOG2E), -lse2));
                            ds = __fmul_rn(__fmul_rn(pr, __fsub_rn(dp_reg[mt][t][2 * r + e], dsum)),
                                           fmaf(-th, th, 1.0f));
                        } else {
                            pr = attn_ex2(fmaf(s_reg[mt][t][2 * r + e], scale2, -lse2));
                            ds = __fmul_rn(pr, __fsub_rn(dp_reg[mt][t][2 * r + e], dsum));
                        }
                    } else {
                        pr = attn_ex2(fmaf(s_reg[mt][t][2 * r + e], scale2, -lse2));
                        ds = __fmul_rn(pr, __fsub_rn(dp_reg[mt][t][2 * r + e], dsum));
                    }
                    const bool vis = !MASK || (8 * t + e < lim && (!VL || 8 * t + e >= lim_lo));
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
template <typename DT, int D, int BN, bool VL = false, bool T = false> /* T: v3's (bwd_wgmma.cuh) */
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
    if constexpr (VL) {
        /* the window (wl, wr; -1 unbounded): every row of the tile sees every column */
        const int64_t at = (int64_t)i0 + ((int64_t)p.seqlen_k - p.seqlen_q) - j0;
        const bool whole = rm == BWD_TC_BM && rn == BN && (p.s.wr < 0 || at + p.s.wr >= BN - 1) &&
                           (p.s.wl < 0 || at + BWD_TC_BM - 1 - p.s.wl <= 0);
        if (whole)
            bwd_tc_pds<DT, BN, false, true>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf],
                                            s_reg, dp_reg, i0, rm, j0, rn);
        else
            bwd_tc_pds<DT, BN, true, true>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf],
                                           s_reg, dp_reg, i0, rm, j0, rn);
    } else {
    const bool whole = rm == BWD_TC_BM && rn == BN &&
                       (p.s.mask != SCHED_MASK_CAUSAL ||
                        (int64_t)i0 + ((int64_t)p.seqlen_k - p.seqlen_q) - j0 >= BN - 1);
    if (whole)
        bwd_tc_pds<DT, BN, false>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s_reg,
                                  dp_reg, i0, rm, j0, rn);
    else
        bwd_tc_pds<DT, BN, true>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s_reg,
                                 dp_reg, i0, rm, j0, rn);
    }
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
 * for GQA (summed by attn_bwd_dkv_sum_kernel). v2 never hashes its rows (LEAVES, for
 * v3's overload: bwd_wgmma.cuh). */
template <typename DT, int D, int BN, bool LEAVES>
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
        for (int i = 0; i < VSM_USED; i++)
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

#endif
