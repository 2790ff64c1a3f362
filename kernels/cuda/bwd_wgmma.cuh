// SPDX-License-Identifier: BSD-3-Clause
/*
 * bwd_wgmma.cuh - v3's step of the backward on Hopper warpgroup products (sm_90a) and its
 * dQ writer warp: overloads of bwd_mma.cuh's per-step functions for v3's registers, used by
 * the shared drivers in attn_bwd_tc.cu and by attn_vl.cu's v3 kernel (the step's VL flag,
 * the hand-off with the tile's place in the ticket). Included by those two files only,
 * after bwd_mma.cuh. Head dims 64 and 128 (64 x 128 tiles), and 256 (64 x 64 tiles, its
 * own shared memory and step: bwd_wg_smem<256>, H200 225-284 TFLOPS at 1k-16k against v1's
 * 20: bench/results/gpu-bwd256-0b862a1-2026-12-03.md).
 *
 * Reference: FlashAttention-3 (Shah et al., arXiv 2407.08608) for the warpgroup products
 * and the producer/consumer split; DASH (arXiv 2601.21824) for the order of the dQ
 * additions; ../shared/docs/hopper.md for the measurements behind the choices here.
 */
#ifndef DASH_KERNELS_CUDA_BWD_WGMMA_CUH
#define DASH_KERNELS_CUDA_BWD_WGMMA_CUH

#include "kernels/digest/digest_leaf.cuh"

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
 * Head dim 128 runs the step transposed (BWD_WG_TRANSPOSED, below):
 *   S^T, dP^T (128 x 64): warpgroup wg forms its kv rows 64 wg .. +64 (m64n64, k = d);
 *   dV, dK (128 x D):  the same rows, A = P^T and dS^T from registers (RS), k = i;
 *   dQp (64 x D):      as above, dS read MN-major from the transposed (128, 64) dS tile.
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

/* Head dims where the step runs transposed (hopper.md B3): each warpgroup forms S^T and
 * dP^T over its own 64 kv rows, so P^T and dS^T stay in registers as the A operands of dV
 * and dK (RS wgmma) and only dS goes through shared memory, transposed, for dQ
 * (bwd_wg_pds_t, bwd_wg_step_mb). Measured on the H200 at head dim 128, same
 * bits: atomic +2.5-4%, the deterministic schedules level, and ptxas's 12/16 bytes of
 * spills gone; at head dim 64, 2-5% slower (its step is short, and LSE and Dsum become
 * 16 loads a thread instead of 2), so 64 keeps the untransposed step, and so does the
 * interleaved kernel (its virtual SMs' state leaves no registers: it spilled 12 bytes
 * transposed): bwd_tc_step is the untransposed step.
 * bench/results/gpu-bwd-rs-2026-12-03.md. */
#define BWD_WG_TRANSPOSED(D) ((D) == 128)

/* Where the step is transposed, the persistent kernel with the writer warp and the
 * window/packed kernel (attn_vl.cu) have no CTA barrier after a step (bwd_wg_step_mb). What that barrier protected is kept otherwise:
 * the next step's Q, dO, LSE and Dsum are complete when an mbarrier per stage (q_full)
 * has every thread's cp.async (cp.async.mbarrier.arrive.noinc) and stores (a release
 * arrival); the prefetch is issued after the dS barrier, where both warpgroups have
 * finished the previous step; dS alternates between two tiles (the second in the room of
 * P, which the transposed step does not use); K, V and the visit table get a barrier
 * before they are rewritten (unit starts, refills). Same bits; +7-10% for the dense
 * deterministic schedules at 4k-16k, +2-6% for windows and packed batches
 * (bench/results/gpu-bwd-stagebars-2026-12-03.md). */
#define BWD_WG_STAGE_BARS(D) BWD_WG_TRANSPOSED(D)
/* Q and dO by TMA (hopper.md B4, without its producer warp): where the stages have
 * mbarriers (BWD_WG_STAGE_BARS), the dense persistent kernel's thread 0 gives the stage's
 * expected bytes and issues D/64 boxes of 64 x 64 of each (128-byte swizzle, rows past Sq
 * zero) in place of every compute thread's cp.async; LSE and Dsum as before. The compute
 * warps then issue no copies of their own: same bits, det +10-12% at 4k-16k
 * (bench/results/gpu-bwd-tmaq-2026-12-04.md). Views TMA cannot describe keep cp.async
 * (bwd_wg_qmaps::ok 0). The window/packed kernel (attn_vl.cu) takes maps of the call's whole
 * views (packed: one batch of all rows) and loads its sequences' whole q-tiles so, the last
 * partial tile of each by cp.async: +12% (window 1k), +17% (window 4k), +7% (packed batch)
 * in the same run (bench/results/gpu-bwd-tmaq-2026-12-04.md). Head dim 256's persistent
 * kernel takes the same boxes from a loader lane of the writer warpgroup, which waits for the
 * writer's read of the dQ partial in the stage instead of the compute warps (bwd_wg256_lq). */
/* In the kernels whose stages have mbarriers (BWD_WG_STAGE_BARS), a unit's first Q, dO, LSE
 * and Dsum load (stage 0) is issued before its K and V load, not after it, so the two
 * latencies overlap once per unit rather than adding up: the short units of packed batches
 * and 1k sequences pay them most often. Same loads, same bits; on the H200 +1.0-1.7% (head
 * dim 128 causal 1k-16k), +1.3% (the packed 19-document batch), +1.2% (window 1k) in the
 * same run (trial kvq, bench/results/kvq-trial-2026-12-05.md). */
#include <cuda.h> /* CUtensorMap */
/* dK and dV through shared memory and TMA stores (bwd_wg_store_unit_tma) at head dims 64
 * and 128 (where the maps encode, without GQA's fp32 sums): a unit's dK and dV go out
 * through K's and V's tiles (free after its last step) and one TMA store per warpgroup and
 * 64-column block, instead of every thread's 4-byte pair stores (8 rows of 16 bytes per
 * warp instruction; the trace put 75-98 us of a CTA's 950-5400 in them). On the H200 in
 * one run against the pair stores, same bits (bench/results/gpu-bwd-tmastore-2026-12-04.md):
 * det +6.5% (64) and +6.8% (128) at 1k causal, +2.0-3.7% at 4k, +0.4-1.0% at 16k causal;
 * window/packed +1.8-7%. */
#define BWD_WG_DKV_TMA(D) (BWD_WG_STAGE_BARS(D) || (D) == 64)
/* Trial unitlap: where the stages have mbarriers (BWD_WG_STAGE_BARS: head dim 128, the dense
 * persistent kernel and the window/packed one), a unit's dK and dV are staged for those
 * stores not in K's and V's tiles but in four 16 KiB tiles the unit's end leaves free -
 * stage 1's Q and dO (dK's two 64-column blocks), P and dS (dV's), at K's offsets
 * (bwd_wg_dkv_tile) - so the next unit's K and V load no longer waits for the stores to read
 * them. The unit's end then (attn_bwd_tc.cu's bwd_wg_persistent_lap, attn_vl.cu's
 * bwd_vl_wg_lap): the next job taken by thread 0 (its round trip under the other warps'
 * staging), dK and dV staged and their stores issued, the next unit's first stage (stage
 * 0), K/V load and visit table issued, and only then the audit's leaves and the wait for
 * the stores' read, all under that load; the next unit-start barrier (bwd_tc_load_kv_wait)
 * publishes K, V, the table and the read. Serial before: the staging and the stores' read,
 * the job's L2 round trips, the table, then the K/V load (trace at 4k full: ~2.2 us in the
 * store and ~2.7 in the unit start, per unit). The same loads, stores and products: the
 * same bits (bench/results/unitlap-trial-2026-12-06.md). Head dim 64's pair kernel
 * (BWD_WG_PAIR64) overlaps its unit end its own way (trial lap64: dK and dV staged in the
 * dS^T tiles of the unit's last pair, the stores' read waited for at the next unit's start;
 * bwd_wg_pair_store, attn_bwd_tc.cu's bwd_wg_pair_persistent). */
#define BWD_WG_DKV_LAP(D) BWD_WG_STAGE_BARS(D)
struct bwd_wg_qmaps {
    CUtensorMap q, dout; /* (D, Sq, Hq, B) in boxes of 64 x BWD_TC_BM */
    int32_t ok;          /* 0: cp.async */
    CUtensorMap dk, dv;  /* (D, Sk, Hkv, B) in boxes of 64 x 64 (BWD_WG_DKV_TMA) */
    int32_t ok_dkv;      /* 0: the pair stores */
};
/* attn_fwd_wg.cu's tensor map of a (batch, seqlen, heads, D) view in boxes of 64 x rows */
bool cuattn__tma_map_4d(CUtensorMap *map, const void *data, int32_t D, int32_t batch, int32_t seqlen,
                        int32_t heads, const int64_t stride[3], uint32_t rows);
/* Host: p's Q and dO maps as (batch, rows, heads_q, D) views; ok whether both encode. */
static inline void bwd_wg_qmaps_encode(bwd_wg_qmaps *maps, const struct attn_bwd_params *p, int32_t D,
                                       int32_t batch, int32_t rows)
{
    maps->ok = cuattn__tma_map_4d(&maps->q, p->q, D, batch, rows, p->heads_q, p->q_stride, BWD_TC_BM) &&
               cuattn__tma_map_4d(&maps->dout, p->dout, D, batch, rows, p->heads_q, p->dout_stride, BWD_TC_BM);
}
/* Host: p's dK and dV maps as (batch, rows_k, heads_kv, D) views; ok_dkv whether both encode. */
static inline void bwd_wg_dkvmaps_encode(bwd_wg_qmaps *maps, const struct attn_bwd_params *p, int32_t D,
                                         int32_t batch, int32_t rows_k)
{
    maps->ok_dkv = cuattn__tma_map_4d(&maps->dk, p->dk, D, batch, rows_k, p->heads_kv, p->dk_stride, 64) &&
                   cuattn__tma_map_4d(&maps->dv, p->dv, D, batch, rows_k, p->heads_kv, p->dv_stride, 64);
}

/* Trial instrument (default 0): BWD_WG_TRACE=1 times the persistent kernel's parts per CTA
 * in SM cycles (clock64) - the compute warps' steps, hand-offs and drains (thread 0), the
 * writer's waits - into bwd_wg_trace, which the host prints at exit (bwd_wg_trace_print;
 * each file has its own copy: the dense persistent kernel's in attn_bwd_tc.cu, the
 * window/packed one's in attn_vl.cu). At head dim 256, q.empty is the compute warps' wait,
 * before a load into a Q/dO stage, for the writer's read of the dQ partial staged there
 * (empty_bar: bwd_tc_step<256>), and the printer adds it per step (q.empty/step); hand
 * is the hand-off's own wait for it, as at 64 and 128. Where the loader lane loads Q and
 * dO at 256 (bwd_wg256_lq), q.full is the step's wait for its stage instead (q.full/step)
 * and hand includes thread 0's wait for the loader. */
#ifndef BWD_WG_TRACE
#define BWD_WG_TRACE 0
#endif
#if BWD_WG_TRACE
enum { BT_KERNEL, BT_STEPS, BT_STEP, BT_SYNC, BT_HAND, BT_DRAIN, BT_TICKETS, BT_FULL, BT_TURN, BT_READ,
       BT_PERFORM, BT_JOB, BT_UNIT, BT_STORE, BT_QEMPTY, BT_QFULL, BT_N };
__device__ unsigned long long bwd_wg_trace[1024][BT_N];
#define BWD_WG_TSLOT(i) bwd_wg_trace[blockIdx.x & 1023][i] /* this CTA's part i */
#define BWD_WG_T0() const long long bt0_ = clock64()
#define BWD_WG_TADD(i) (BWD_WG_TSLOT(i) += (unsigned long long)(clock64() - bt0_))
#define BWD_WG_TCOUNT(i) (BWD_WG_TSLOT(i) += 1)
/* a writer's laps: BWD_WG_TLAP0 starts the clock, each BWD_WG_TLAP(i) adds the time since
 * the last lap to part i */
#define BWD_WG_TLAP0() long long bt0_ = clock64(), bt1_
#define BWD_WG_TLAP(i) (bt1_ = clock64(), BWD_WG_TSLOT(i) += (unsigned long long)(bt1_ - bt0_), bt0_ = bt1_)
#include <stdio.h>
#include <stdlib.h>
/* At exit (each file that launches a traced kernel registers it): the last traced launch's
 * parts in this file, averaged over its CTAs (stderr), tagged. */
static void bwd_wg_trace_print(const char *tag)
{
    static unsigned long long h[1024][BT_N];
    int khz = 0;
    if (cudaMemcpyFromSymbol(h, bwd_wg_trace, sizeof h) != cudaSuccess ||
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) != cudaSuccess || khz <= 0)
        return;
    static const char *const name[BT_N] = {"kernel", "steps", "step", "sync", "hand", "drain", "tickets",
                                           "w.full", "w.turn", "w.read", "w.perform", "job", "unit", "store",
                                           "q.empty", "q.full"};
    double sum[BT_N] = {0};
    int ctas = 0;
    for (int b = 0; b < 1024; b++)
        if (h[b][BT_KERNEL]) {
            ctas++;
            for (int i = 0; i < BT_N; i++)
                sum[i] += (double)h[b][i];
        }
    if (!ctas)
        return;
    fprintf(stderr, "bwd_wg_trace %s: %d CTAs, clock %d MHz; per CTA (us, counts):", tag, ctas, khz / 1000);
    for (int i = 0; i < BT_N; i++)
        fprintf(stderr, " %s %.1f", name[i],
                i == BT_STEPS || i == BT_TICKETS ? sum[i] / ctas : sum[i] / ctas / (khz / 1000.0));
    for (int i = BT_QEMPTY; i <= BT_QFULL; i++) /* cycles over steps, both summed over the CTAs */
        if (sum[BT_STEPS] > 0 && sum[i] > 0)
            fprintf(stderr, " %s/step %.3f", name[i], sum[i] / sum[BT_STEPS] / (khz / 1000.0));
    fprintf(stderr, "\n");
}
#else
#define BWD_WG_T0() ((void)0)
#define BWD_WG_TADD(i) ((void)0)
#define BWD_WG_TCOUNT(i) ((void)0)
#define BWD_WG_TLAP0() ((void)0)
#define BWD_WG_TLAP(i) ((void)0)
#endif

template <int D>
struct bwd_wg_smem {
    static constexpr bool swizzled = true;
    static constexpr bool writer = true; /* persistent mode: a ninth warp adds dQ (below) */
    uint16_t k_smem[CUATTN_TC_BLOCK_N * D];     /* (128, D) K of the unit, swizzled */
    uint16_t v_smem[CUATTN_TC_BLOCK_N * D];     /* (128, D) V */
    uint16_t q_smem[2][BWD_TC_BM * D];          /* (2, 64, D) Q of the step, of the next */
    uint16_t dout_smem[2][BWD_TC_BM * D];       /* (2, 64, D) dO likewise */
    uint16_t p_smem[BWD_TC_BM * CUATTN_TC_BLOCK_N];  /* (64, 128) P, input dtype (the
                                                        transposed step keeps P in registers) */
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
    uint64_t q_full[2]; /* stage b's Q, dO, LSE, Dsum have landed (BWD_WG_STAGE_BARS) */
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

/* Head dim 256: 64 x 64 tiles (BWD_WG256_BN kv rows), and no room for a dQ staging
 * buffer of its own (K, V, two stages of Q and dO, P and dS take 208 KiB of the 227): a
 * step's dQ partial (64 x 256 floats, 64 KiB) is staged where the step's own Q and dO were
 * (their two tiles are 64 KiB together, one after the other), once every product that
 * reads them has completed. The writer must have read it before the next prefetch into that
 * stage (the step below waits for it there; with maps, the loader lane: bwd_wg256_lq), so
 * the compute warps wait for the writer part of a step earlier than at 64 and 128 - with
 * one staging buffer there, the same tickets.
 * q_smem[b], dout_smem[b] and dq_smem (stage 1, which the interleaved mode, always on stage
 * 0, stages in) are views of io_smem, so the shared loads and hand-offs serve as they are. */
#define BWD_WG256_BN CUATTN_BLOCK
template <int OFF, typename T>
struct bwd_wg256_view { /* element OFF + 2 b BWD_TC_BM 256 of io_smem, as T */
    __device__ __forceinline__ T *operator[](int32_t b)
    {
        return reinterpret_cast<T *>(reinterpret_cast<uint16_t *>(this) + (OFF + 2 * b) * BWD_TC_BM * 256);
    }
    __device__ __forceinline__ operator T *() { return (*this)[0]; }
};
template <>
struct bwd_wg_smem<256> {
    static constexpr bool swizzled = true;
    static constexpr bool writer = true;
    uint16_t k_smem[BWD_WG256_BN * 256]; /* (64, 256) K of the unit, swizzled */
    uint16_t v_smem[BWD_WG256_BN * 256]; /* (64, 256) V */
    union {
        uint16_t io_smem[2][2][BWD_TC_BM * 256]; /* (2 stages, Q | dO, 64, 256); a stage's dQ
                                                    partial in its place, (64, 256) floats */
        bwd_wg256_view<0, uint16_t> q_smem;      /* q_smem[b]: Q of stage b */
        bwd_wg256_view<1, uint16_t> dout_smem;   /* dout_smem[b]: dO of stage b */
        bwd_wg256_view<2, float> dq_smem;        /* stage 1 as dQ staging (interleaved mode) */
    };
    uint16_t p_smem[BWD_TC_BM * BWD_WG256_BN];  /* (64, 64) P, input dtype */
    uint16_t ds_smem[BWD_TC_BM * BWD_WG256_BN]; /* (64, 64) dS */
    float lse_smem[2][BWD_TC_BM];
    float dsum_smem[2][BWD_TC_BM];
    int32_t visit_smem[BWD_TC_TAB + 1];
    int32_t rank_smem[BWD_TC_TAB + 1];
    int32_t flag_smem;
    int32_t ticket[BWD_WG_DQBUFS][4];
    int32_t ticket_stage[BWD_WG_DQBUFS]; /* the stage whose place holds the ticket's partial */
    uint64_t full_bar[BWD_WG_DQBUFS];
    uint64_t empty_bar[BWD_WG_DQBUFS];
    /* Q and dO by TMA from the loader lane (bwd_wg256_loader; persistent mode, maps ok): */
    uint64_t q_full[2];  /* stage b's Q, dO, LSE, Dsum have landed (2 x 256 + 1 arrivals, 64 KiB) */
    int32_t lq_req[4];   /* compute thread 0 -> loader: first row (-1: the end), head, batch,
                            stage | empty_bar's parity << 1 | staging buffer << 2 */
    uint64_t lq_full;    /* lq_req holds a request (thread 0's one arrival) */
    uint64_t lq_empty;   /* the loader has waited for the stage and issued its boxes (its one arrival) */
};
static_assert(offsetof(bwd_wg_smem<256>, k_smem) == 0 && offsetof(bwd_wg_smem<256>, v_smem) % 1024 == 0 &&
                  offsetof(bwd_wg_smem<256>, io_smem) % 1024 == 0 && offsetof(bwd_wg_smem<256>, p_smem) % 1024 == 0 &&
                  offsetof(bwd_wg_smem<256>, ds_smem) % 1024 == 0,
              "v3's tiles at head dim 256 start on 1024-byte boundaries");

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

/* Head dim 256: both warpgroups hold all 64 kv rows, warpgroup wg the d columns
 * 128 wg .. +128 of dK and dV (m64n128) and of dQp (m64n128, q rows as above). */
template <>
struct bwd_wg_regs<256> {
    float dk_reg[64]; /* kv rows 16 wi + g (+8), columns 128 wg + col(e) */
    float dv_reg[64];
    float dq_reg[64]; /* q rows 16 wi + g (+8), columns 128 wg + col(e) */
    static __device__ __forceinline__ int32_t row(int32_t e) { return bwd_wg_regs<64>::row(e); }
    static __device__ __forceinline__ int32_t col(int32_t e) { return bwd_wg_regs<64>::col(e); }
};

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_zero_kv(bwd_wg_regs<D> &x)
{
#pragma unroll
    for (int e = 0; e < (int)(sizeof x.dk_reg / sizeof(float)); e++) {
        x.dk_reg[e] = 0.0f;
        x.dv_reg[e] = 0.0f;
    }
}

/* FRESH: form the thread's D/8 staging addresses here, at every call, from a thread index
 * the compiler cannot see through (an empty asm), instead of letting it keep them from the
 * kernel's start: attn_vl.cu's kernel, short of registers at hdim 128, spilled them and
 * reloaded all of them every step. The addresses are the same either way. Head dim 256
 * always forms them here (both its hand-offs, the writer's and the interleaved mode's,
 * spilled them otherwise: 8 and 188 bytes). */
template <int D, int BN, bool FRESH = (D == 256)>
static __device__ __forceinline__ void bwd_tc_stage_dq(float *dq_smem, const bwd_wg_regs<D> &x)
{
    if constexpr (FRESH) {
        uint32_t tid = threadIdx.x;
        asm volatile("" : "+r"(tid));
        const int32_t lane = tid & 31, wi = (tid >> 5) & 3, d0 = (D / 2) * (tid >> 7);
#pragma unroll
        for (int e = 0; e < D / 4; e += 2) {
            const int32_t i = 16 * wi + (lane >> 2) + 8 * ((e >> 1) & 1); /* bwd_wg_regs::row, col */
            const int32_t d = d0 + 8 * (e >> 2) + 2 * (lane & 3);
            *reinterpret_cast<float2 *>(dq_smem + i * D + bwd_tc_dq_at(i, d)) =
                make_float2(x.dq_reg[e], x.dq_reg[e + 1]);
        }
    } else {
        const int32_t d0 = (D / 2) * (threadIdx.x >> 7);
#pragma unroll
        for (int e = 0; e < D / 4; e += 2) {
            const int32_t i = bwd_wg_regs<D>::row(e), d = d0 + bwd_wg_regs<D>::col(e);
            *reinterpret_cast<float2 *>(dq_smem + i * D + bwd_tc_dq_at(i, d)) =
                make_float2(x.dq_reg[e], x.dq_reg[e + 1]);
        }
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

/* The audit's leaves of a unit's dK and dV rows from the quad's packed rows q (q[2 h]: dK,
 * q[2 h + 1]: dV of the thread's row half h, as bwd_tc_store_unit packs them): the quad
 * transposes them so that lane t4 hashes its quad's row t4 whole (digest_leaves_quad), and
 * writes that leaf where the row r0 + row(2 h) < rn, h = t4 / 2 (row-major (b, j, hk)
 * leaves; j0 the unit's first kv row). Two stores, not one through a select of the two
 * pointers (bwd_wg_store_dkv_done's reason). */
template <int D>
static __device__ __forceinline__ void bwd_wg_put_leaves(const struct attn_bwd_params &p, const uint32_t (&q)[4][D / 8],
                                                         int32_t lane, int32_t b, int32_t j0, int32_t r0, int32_t rn,
                                                         int32_t hk)
{
    const uint64_t leaf = digest_leaves_quad<D, 4>(q, lane);
    const int32_t t4 = lane & 3, j = r0 + bwd_wg_regs<D>::row(2 * (t4 >> 1));
    if (j < rn) {
        const int64_t at = ((int64_t)b * p.seqlen_k + j0 + j) * p.heads_kv + hk;
        if (t4 & 1)
            p.leaf_dv[at] = leaf;
        else
            p.leaf_dk[at] = leaf;
    }
}

/* The audit's leaves of a unit's dK and dV rows, one row a lane, read back from their
 * staging tiles (the TMA stores' source; the same packed values bwd_tc_store_unit packs):
 * lane L of warp wi of warpgroup wg hashes row j = 64 wg + 16 wi + L % 16 of dK (L < 16)
 * or of dV - its warp's own 16 rows of each, as its quads held them - alone
 * (digest_leaf_row), reading the row's 16-byte chunks (LDS.128) in the hash's order: no
 * exchanges, one finish a row. tile(v, c): column block c (64 columns of all 128 rows, K's
 * layout, 128-byte rows) of dK (v 0) or dV (v 1); chunk m of row j, block m / 8, sits at
 * chunk (m % 8) ^ (j % 8) of the block's row (attn_sw128), so eight consecutive lanes,
 * eight consecutive rows, hit eight different chunks of the 128 bytes of banks (no
 * conflict: 4 wavefronts a read). A lane reads pairs that other lanes of its warp staged:
 * the caller orders the staging before (the warpgroup's barrier after it) and keeps the
 * tiles until every lane is past this. The thread index laundered, so that the offsets
 * are formed here (as bwd_wg_store_unit_tma's hashing did at head dim 128: the writes',
 * kept live across the barrier, spilled). Leaves of rows j < Sk - n BN only. */
template <int D, int BN, typename TILE>
static __device__ __forceinline__ void bwd_wg_tile_leaves(const struct attn_bwd_params &p, TILE tile, int32_t b,
                                                          int32_t hk, int32_t n)
{
    static_assert((D == 64 || D == 128) && BN == 128, "two warpgroups of 64 kv rows of 128-byte column blocks");
    uint32_t tid = threadIdx.x;
    asm volatile("" : "+r"(tid));
    const int32_t lane = (int32_t)(tid & 31), v = lane >> 4;
    const int32_t j = 64 * (int32_t)(tid >> 7) + 16 * (int32_t)((tid >> 5) & 3) + (lane & 15);
    /* the row's chunk at row + ((m % 8) ^ (j % 8)) 16 = (row + (j % 8) 16) ^ (m % 8) 16, the
     * row 128-byte aligned: one LOP3 a read for its shared address */
    uint32_t row[D / 64];
#pragma unroll
    for (int32_t c = 0; c < D / 64; c++)
        row[c] = (uint32_t)__cvta_generic_to_shared(v ? tile(1, c) : tile(0, c)) + (uint32_t)j * 128 +
                 ((uint32_t)(j & 7) << 4);
    const uint64_t leaf = digest_leaf_row<D>([&](int32_t m) {
        ulonglong2 w;
        asm volatile("ld.shared.v2.u64 {%0, %1}, [%2];"
                     : "=l"(w.x), "=l"(w.y)
                     : "r"(row[m >> 3] ^ ((uint32_t)(m & 7) << 4)));
        return w;
    });
    /* two stores, not one through a select of the two pointers: with the select, head dim
     * 128's kernel's PTX kept the params' fields in registers across the units (411
     * ld.param instead of 589) and ptxas spilled 256 bytes (trial leaves) */
    if (j < p.seqlen_k - n * BN) {
        const int64_t at = ((int64_t)b * p.seqlen_k + n * BN + j) * p.heads_kv + hk;
        if (v)
            p.leaf_dv[at] = leaf;
        else
            p.leaf_dk[at] = leaf;
    }
}

/* Store the unit's dK (times scale) and dV: straight to the outputs, or per q-head fp32
 * for GQA (summed by attn_bwd_dkv_sum_kernel). Head dims 64 and 128 hold whole rows in
 * each quad, so where the audit asks (leaf_dk) the quad also hashes the rows it stores
 * (digest_leaves_quad; row-major (b, j, hk) leaves). LEAVES false compiles that out: the
 * interleaved kernel, at 255 registers, spilled with it (its dK and dV are digested from
 * memory), and the window/packed kernels never hash. */
template <typename DT, int D, int BN, bool LEAVES>
static __device__ __forceinline__ void bwd_tc_store_unit(const struct attn_bwd_params &p, const bwd_wg_regs<D> &x,
                                                         int32_t bh, int32_t n)
{
    const int32_t b = bh / p.heads_q, hk = (bh - b * p.heads_q) / p.group;
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;
    /* warpgroup wg holds kv rows 64 wg .. (head dim 256: all 64 rows, columns 128 wg ..) */
    const int32_t r0 = D == 256 ? 0 : 64 * (threadIdx.x >> 7), c0 = D == 256 ? 128 * (threadIdx.x >> 7) : 0;
    uint16_t *dk_g = static_cast<uint16_t *>(p.dk), *dv_g = static_cast<uint16_t *>(p.dv);
    if constexpr (D != 256 && LEAVES) {
        if (p.group == 1 && p.leaf_dk) {
            /* the thread's two row halves h: elements e = 4 t + 2 h (+1), columns
             * 8 t + 2 t4; their dK and dV rows packed, stored, and the four hashed side by
             * side (q[2 h] dK, q[2 h + 1] dV) */
            const int32_t lane = threadIdx.x & 31;
            uint32_t q[4][D / 8];
#pragma unroll
            for (int32_t h = 0; h < 2; h++) {
                const int32_t j = r0 + bwd_wg_regs<D>::row(2 * h);
                uint16_t *k_row = dk_g + b * p.dk_stride[0] + (int64_t)(j0 + j) * p.dk_stride[1] + hk * p.dk_stride[2];
                uint16_t *v_row = dv_g + b * p.dv_stride[0] + (int64_t)(j0 + j) * p.dv_stride[1] + hk * p.dv_stride[2];
#pragma unroll
                for (int32_t t = 0; t < D / 8; t++) {
                    const int32_t e = 4 * t + 2 * h, d = bwd_wg_regs<D>::col(e);
                    q[2 * h][t] = DT::pack2(__fmul_rn(x.dk_reg[e], p.scale), __fmul_rn(x.dk_reg[e + 1], p.scale));
                    q[2 * h + 1][t] = DT::pack2(x.dv_reg[e], x.dv_reg[e + 1]);
                    if (j < rn) {
                        attn_st_pair(k_row + d, q[2 * h][t]);
                        attn_st_pair(v_row + d, q[2 * h + 1][t]);
                    }
                }
            }
            bwd_wg_put_leaves<D>(p, q, lane, b, j0, r0, rn, hk);
            return;
        }
    }
#pragma unroll
    for (int e = 0; e < (int)(sizeof x.dk_reg / sizeof(float)); e += 2) {
        const int32_t j = r0 + bwd_wg_regs<D>::row(e), d = c0 + bwd_wg_regs<D>::col(e);
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

/* Whether the unit's dK and dV go out by TMA (bwd_wg_store_unit_tma): maps, no GQA sums,
 * audit leaves only where the kernel hashes (LEAVES); in a window/packed kernel (view) only
 * a whole kv-tile (the rows past a packed sequence's end are the next one's). Uniform over
 * the CTA. */
template <int BN, bool LEAVES>
static __device__ __forceinline__ bool bwd_wg_dkv_tma(const struct attn_bwd_params &p, const bwd_wg_qmaps *qm,
                                                      int32_t n, const int32_t *view)
{
    return qm && qm->ok_dkv && p.group == 1 && (LEAVES || !p.leaf_dk) && (!view || p.seqlen_k - n * BN >= BN);
}

/* BWD_WG_DKV_LAP: where a unit's dK (v 0) and dV (v 1) are staged for the stores - column
 * block c (64 columns of all 128 rows, K's layout: warpgroup wg's rows from row 64 wg) in
 * tile (v, c): stage 1's Q and dO for dK, the P and dS tiles for dV, each 16 KiB and
 * 1024-byte aligned, so a warpgroup's box is its 64 rows of a tile, as in K's. An element's
 * offset in its tile is the one it has in K's (and in the transposed dS tile,
 * bwd_wg_pds_t), offsets the kernels form anyway. All four tiles are free from the barrier
 * that ends a unit's last step (no load is in flight into stage 1 there: the last step
 * prefetches nothing) until the next unit's first step writes dS or prefetches into stage
 * 1, behind the unit-start barrier that publishes the stores' read; the next unit's first
 * stage, loaded meanwhile, is stage 0. */
template <int D, typename SM>
static __device__ __forceinline__ unsigned char *bwd_wg_dkv_tile(SM &sm, int32_t v, int32_t c)
{
    static_assert(D == 128 && sizeof sm.q_smem[1] == BWD_TC_BM * D * 2 && sizeof sm.dout_smem[1] == BWD_TC_BM * D * 2 &&
                      sizeof sm.p_smem == CUATTN_TC_BLOCK_N * 64 * 2 && sizeof sm.ds_smem == CUATTN_TC_BLOCK_N * 64 * 2,
                  "four tiles of 128 rows of 64 columns");
    uint16_t *const t[2][2] = {{sm.q_smem[1], sm.dout_smem[1]}, {sm.p_smem, sm.ds_smem}};
    return reinterpret_cast<unsigned char *>(t[v][c]);
}

/* The unit's dK (times scale) and dV through shared memory (the 128-byte swizzled layout of
 * the loads, which the maps' swizzle undoes) and a TMA store per 64-column block of each
 * warpgroup's 64 rows; rows past Sk are the maps' out-of-bounds (not written). LEAVES:
 * where the audit asks (leaf_dk), once the stores are issued each lane hashes one of the
 * warpgroup's staged rows read back from the tiles (bwd_wg_tile_leaves: the packed values
 * bwd_tc_store_unit's quads would hash; head dim 128 later, in bwd_wg_store_dkv_done, under
 * the next unit's loads), behind the warpgroup's barrier that publishes the staging and
 * before anything rewrites the tiles (K's and V's: the issuing threads' wait for the
 * stores' read and the barrier after it, here or at the next unit's start; PAIR_LAP's set:
 * the next unit's second pair, behind its start's barrier). The staging
 * tiles, each element at the offset it has in K's (the same boxes either way):
 *   - K's and V's tiles (free after the unit's last step): the issuing thread waits here
 *     until the stores have read them, so they are free for the next unit's K and V once
 *     the unit-start barrier has passed (waiting there instead, the first form measured,
 *     fe8551b, spilled 8 bytes in the dense kernel);
 *   - DKV_LAP (BWD_WG_DKV_LAP: head dim 128, trial unitlap): bwd_wg_dkv_tile's four tiles,
 *     and the caller finishes with bwd_wg_store_dkv_done (the leaves, the wait for the
 *     read) once it has issued the next unit's loads;
 *   - PAIR_LAP (head dim 64's pair kernel, bwd_wg_smem_pair, through bwd_wg_pair_store;
 *     trial lap64): the dS^T tiles of set `set` (dst_smem[set][0] and [1], each (128 kv, 64)
 *     in K's layout), which the unit's last pair used and the next unit's first pair does
 *     not, and nobody waits here: the issuing threads wait for the stores' read at the next
 *     unit's start, after the next job is taken and before the next unit's K/V copies
 *     (attn_bwd_tc.cu's bwd_wg_pair_persistent).
 * view: the window/packed kernel's (view batch, first q row, first k row). */
template <typename DT, int D, int BN, bool LEAVES, typename SM, bool PAIR_LAP = false>
static __device__ __forceinline__ void bwd_wg_store_unit_tma(const struct attn_bwd_params &p, SM &sm,
                                                             const bwd_wg_regs<D> &x, int32_t bh, int32_t n,
                                                             const bwd_wg_qmaps *qm, const int32_t *view = nullptr,
                                                             int32_t set = 0)
{
    static_assert(BN == 128 && (D == 128 || D == 64), "two warpgroups of 64 kv rows, head dim 64 or 128");
    constexpr bool DKV_LAP = BWD_WG_DKV_LAP(D);
    static_assert(!DKV_LAP || D == 128, "the leaves are hashed in bwd_wg_store_dkv_done where DKV_LAP");
    static_assert(!PAIR_LAP || (D == 64 && !DKV_LAP), "the dS^T tiles of the pair kernel hold 64 columns");
#if BWD_TC_BULK
    int32_t b = bh / p.heads_q;
    const int32_t hk = (bh - b * p.heads_q) / p.group, wg = threadIdx.x >> 7, r0 = 64 * wg;
    int32_t j = n * BN + r0;
    if (view) {
        b += view[0];
        j += view[2];
    }
    bwd_cta_sync<true>(); /* every product of this unit's last step (dQ reads all of K) is done */
    unsigned char *ks, *vs; /* K's and V's tiles or PAIR_LAP's dS^T set (DKV_LAP: bwd_wg_dkv_tile) */
    if constexpr (PAIR_LAP) {
        ks = reinterpret_cast<unsigned char *>(sm.dst_smem[set][0]);
        vs = reinterpret_cast<unsigned char *>(sm.dst_smem[set][1]);
    } else {
        (void)set;
        ks = reinterpret_cast<unsigned char *>(sm.k_smem);
        vs = reinterpret_cast<unsigned char *>(sm.v_smem);
    }
    if constexpr (DKV_LAP) {
#pragma unroll
        for (int e = 0; e < D / 2; e += 2) { /* element e's column block: e / 32 (col(e) / 64) */
            const int32_t c = e >> 5;
            const uint32_t at = attn_sw128(r0 + bwd_wg_regs<D>::row(e), bwd_wg_regs<D>::col(e) - 64 * c, BN);
            *reinterpret_cast<uint32_t *>(bwd_wg_dkv_tile<D>(sm, 0, c) + at) =
                DT::pack2(__fmul_rn(x.dk_reg[e], p.scale), __fmul_rn(x.dk_reg[e + 1], p.scale));
            *reinterpret_cast<uint32_t *>(bwd_wg_dkv_tile<D>(sm, 1, c) + at) = DT::pack2(x.dv_reg[e], x.dv_reg[e + 1]);
        }
    } else {
#pragma unroll
        for (int e = 0; e < D / 2; e += 2) {
            const uint32_t at = attn_sw128(r0 + bwd_wg_regs<D>::row(e), bwd_wg_regs<D>::col(e), BN);
            *reinterpret_cast<uint32_t *>(ks + at) =
                DT::pack2(__fmul_rn(x.dk_reg[e], p.scale), __fmul_rn(x.dk_reg[e + 1], p.scale));
            *reinterpret_cast<uint32_t *>(vs + at) = DT::pack2(x.dv_reg[e], x.dv_reg[e + 1]);
        }
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (wg == 0) /* the warpgroup's rows are written */
        asm volatile("bar.sync 2, 128;" ::: "memory");
    else
        asm volatile("bar.sync 3, 128;" ::: "memory");
    if ((threadIdx.x & 127) == 0) {
#pragma unroll
        for (int32_t c = 0; c < D / 64; c++) {
            if constexpr (DKV_LAP) {
                attn_tma_store_4d(&qm->dk, bwd_wg_dkv_tile<D>(sm, 0, c) + r0 * 128, 64 * c, j, hk, b);
                attn_tma_store_4d(&qm->dv, bwd_wg_dkv_tile<D>(sm, 1, c) + r0 * 128, 64 * c, j, hk, b);
            } else {
                const uint32_t at = (uint32_t)(c * BN * 128 + r0 * 128);
                attn_tma_store_4d(&qm->dk, ks + at, 64 * c, j, hk, b);
                attn_tma_store_4d(&qm->dv, vs + at, 64 * c, j, hk, b);
            }
        }
        attn_tma_store_commit();
    }
    if constexpr (LEAVES && D == 64) /* under the stores: the warpgroup's rows are staged */
        if (p.leaf_dk)
            bwd_wg_tile_leaves<D, BN>(p, [&](int32_t v, int32_t) { return v ? vs : ks; }, b, hk, n);
    if constexpr (!DKV_LAP && !PAIR_LAP) { /* staged in K and V */
        if ((threadIdx.x & 127) == 0)
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); /* the tiles are free */
        if constexpr (!BWD_WG_STAGE_BARS(D)) /* no unit-start barrier: everyone waits for that here */
            bwd_cta_sync<true>();
    }
#else
    (void)p, (void)sm, (void)x, (void)bh, (void)n, (void)qm, (void)view, (void)set;
    __trap();
#endif
}

/* A unit's dK and dV from a v3 kernel with the dQ writer: by TMA stores where the head dim
 * has them (BWD_WG_DKV_TMA) and bwd_wg_dkv_tma allows, else bwd_tc_store_unit's pair
 * stores. The dense persistent kernel (view NULL) and the window/packed one share it. Where
 * BWD_WG_DKV_LAP, either way ends behind a barrier that follows every product of the
 * unit's last step (the TMA path's before its staging, the pair stores' after them): the
 * caller may then issue the next unit's loads, and calls bwd_wg_store_dkv_done after them. */
template <typename DT, int D, int BN, bool LEAVES, typename SM>
static __device__ __forceinline__ void bwd_wg_store_dkv(const struct attn_bwd_params &p, SM &sm,
                                                        const bwd_wg_regs<D> &x, int32_t bh, int32_t n,
                                                        const bwd_wg_qmaps *qm, const int32_t *view = nullptr)
{
    if constexpr (BWD_WG_DKV_TMA(D)) {
        if (bwd_wg_dkv_tma<BN, LEAVES>(p, qm, n, view)) {
            bwd_wg_store_unit_tma<DT, D, BN, LEAVES>(p, sm, x, bh, n, qm, view);
            return;
        }
    }
    bwd_tc_store_unit<DT, D, BN, LEAVES>(p, x, bh, n);
    if constexpr (BWD_WG_DKV_LAP(D)) /* (the TMA path meets before its staging) */
        bwd_cta_sync<true>(); /* every product of the unit's last step is done: the caller may
                                 load the next unit's table, first stage, K and V */
}

/* BWD_WG_DKV_LAP: the rest of bwd_wg_store_dkv, once the caller has issued the next unit's
 * loads. LEAVES (the dense kernel, view NULL): where the unit went out by TMA and the audit
 * asks, each lane hashes one of its warp's 16 dK and 16 dV rows read back whole from the
 * staging tiles (bwd_wg_tile_leaves: the same packed values, XXH3-64 of each row). A lane
 * reads pairs that other lanes of its warp staged (the quad that held the row): the
 * warpgroup's barrier after the staging (bwd_wg_store_unit_tma's bar.sync 2/3) orders those
 * writes before these reads, and nothing writes the four tiles before the next unit-start
 * barrier. Then the issuing threads wait until the stores have read the tiles; the next
 * unit-start barrier (bwd_tc_load_kv_wait) publishes that. Without LEAVES p, qm and n are
 * not read (the window/packed kernel's params are the next job's by now). */
template <typename DT, int D, int BN, bool LEAVES, typename SM>
static __device__ __forceinline__ void bwd_wg_store_dkv_done(const struct attn_bwd_params &p, SM &sm, int32_t bh,
                                                             int32_t n, const bwd_wg_qmaps *qm)
{
    static_assert(BWD_WG_DKV_LAP(D) && D == 128 && BN == 128, "the staging tiles of unitlap");
#if BWD_TC_BULK
    if constexpr (LEAVES) {
        if (p.leaf_dk && bwd_wg_dkv_tma<BN, LEAVES>(p, qm, n, nullptr)) {
            const int32_t b = bh / p.heads_q, hk = (bh - b * p.heads_q) / p.group;
            bwd_wg_tile_leaves<D, BN>(p, [&](int32_t v, int32_t c) { return bwd_wg_dkv_tile<D>(sm, v, c); }, b, hk, n);
        }
    }
    if ((threadIdx.x & 127) == 0)
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); /* the tiles are free */
#else
    (void)p, (void)sm, (void)bh, (void)n, (void)qm;
    __trap();
#endif
}

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_vsm_save(const struct attn_bwd_params &p, int32_t v,
                                                       const int32_t *st, const bwd_wg_regs<D> &x)
{
    float *data = bwd_tc_vsm_data<D, BN>(p, v);
    bwd_tc_vsm_save_state(p, v, st);
    constexpr int KV = sizeof x.dk_reg / sizeof(float), DQ = sizeof x.dq_reg / sizeof(float);
    if (st[VSM_LOADED])
#pragma unroll
        for (int e = 0; e < KV; e++) {
            data[e * ATTN_THREADS] = x.dk_reg[e];
            data[(KV + e) * ATTN_THREADS] = x.dv_reg[e];
        }
    if (st[VSM_PENDING])
#pragma unroll
        for (int e = 0; e < DQ; e++)
            data[(2 * KV + e) * ATTN_THREADS] = x.dq_reg[e];
}

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_vsm_restore(const struct attn_bwd_params &p, int32_t v,
                                                          const int32_t *st, bwd_wg_regs<D> &x)
{
    const float *data = bwd_tc_vsm_data<D, BN>(p, v);
    constexpr int KV = sizeof x.dk_reg / sizeof(float), DQ = sizeof x.dq_reg / sizeof(float);
    if (st[VSM_LOADED])
#pragma unroll
        for (int e = 0; e < KV; e++) {
            x.dk_reg[e] = data[e * ATTN_THREADS];
            x.dv_reg[e] = data[(KV + e) * ATTN_THREADS];
        }
    if (st[VSM_PENDING])
#pragma unroll
        for (int e = 0; e < DQ; e++)
            x.dq_reg[e] = data[(2 * KV + e) * ATTN_THREADS];
}

#if ATTN_WGMMA
/* P and dS of the warpgroup's 64 x W block (columns c0 ..), rounded to the input dtype,
 * into the swizzled P and dS tiles.
 * fresh (v3's interleaved kernel at head dim 256; a constant wherever this is inlined):
 * form the store addresses here, at every call, from a thread index read by an asm
 * volatile mov from %tid.x, so that ptxas does not keep them from the kernel's start. That
 * kernel's dK, dV and pending dQ partial take 192 of its 255 registers; it kept four of
 * these addresses from the start, spilled them and reloaded them every step (16 of its 20
 * bytes). An empty asm over threadIdx.x (bwd_tc_stage_dq's FRESH) does not do it: it
 * leaves a plain copy in the PTX, and ptxas hoists the arithmetic all the same (32 bytes;
 * 36 with bwd_tc_interleaved's restore flag fixed); the mov is an S2R in the step. The
 * addresses are those of the loop below: row + 8 (element e + 2) has the same swizzle, 512
 * elements on, and chunk c0 / 8 + k of a row (k = e / 4 < W / 8, c0 a multiple of W) is
 * c0 / 8 XOR k, so one attn_sw128 and an XOR per pair of rows (attn_sw128 for each element
 * spilled nothing either, with twice the arithmetic; the offset as one expression of tid's
 * bit fields spilled 80 bytes). The same stores in the same order. */
template <typename DT, int W = 64>
static __device__ __forceinline__ void bwd_wg_store_pds(uint16_t *p_smem, uint16_t *ds_smem, const float (&s)[W / 2],
                                                        const float (&dp)[W / 2], int32_t c0, bool fresh = false)
{
    if (fresh) {
        uint32_t tid;
        asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
        const int32_t lane = tid & 31, wi = (tid >> 5) & 3, cw = W * (int32_t)(tid >> 7); /* cw: c0 */
        /* element e = 0's place: bwd_wg_regs<64>::row(0), col(0) */
        const uint32_t at0 = attn_sw128(16 * wi + (lane >> 2), cw + 2 * (lane & 3), BWD_TC_BM) / 2;
#pragma unroll
        for (int e = 0; e < W / 2; e += 4) {
            const uint32_t at = at0 ^ (uint32_t)(8 * (e >> 2)); /* elements e and e + 2 (+ 8 rows) */
            *reinterpret_cast<uint32_t *>(p_smem + at) = DT::pack2(s[e], s[e + 1]);
            *reinterpret_cast<uint32_t *>(ds_smem + at) = DT::pack2(dp[e], dp[e + 1]);
            *reinterpret_cast<uint32_t *>(p_smem + at + 8 * 64) = DT::pack2(s[e + 2], s[e + 3]);
            *reinterpret_cast<uint32_t *>(ds_smem + at + 8 * 64) = DT::pack2(dp[e + 2], dp[e + 3]);
        }
    } else {
#pragma unroll
        for (int e = 0; e < W / 2; e += 2) {
            const uint32_t at = attn_sw128(bwd_wg_regs<64>::row(e), c0 + bwd_wg_regs<64>::col(e), BWD_TC_BM) / 2;
            *reinterpret_cast<uint32_t *>(p_smem + at) = DT::pack2(s[e], s[e + 1]);
            *reinterpret_cast<uint32_t *>(ds_smem + at) = DT::pack2(dp[e], dp[e + 1]);
        }
    }
}

/* P and dS of the warpgroup's 64 x W block (W = 64; 32 at head dim 256) from its S and
 * dP accumulators, rounded to the input dtype into the swizzled P and dS tiles; MASK as in
 * bwd_tc_pds (the values are the same either way where the caller passes false). S
 * becomes P on the way. The caller has waited for S only: dP's group is waited for here,
 * once P is formed. VL (attn_vl.cu): the mask is the sequence's window band, and a softcap
 * bends the scores. */
template <typename DT, bool MASK, bool VL = false, int W = 64, bool CAP = false>
static __device__ __forceinline__ void bwd_wg_pds(const struct attn_bwd_params &p, uint16_t *p_smem,
                                                  uint16_t *ds_smem, const float *lse_smem,
                                                  const float *dsum_smem, float (&s)[W / 2], float (&dp)[W / 2],
                                                  int32_t i0, int32_t rm, int32_t j0, int32_t rn, bool fresh = false)
{
    const int32_t c0 = W * (threadIdx.x >> 7); /* the warpgroup's first column */
    const int64_t offset = (int64_t)p.seqlen_k - p.seqlen_q;
    const int causal = p.s.mask == SCHED_MASK_CAUSAL;
    const float scale2 = __fmul_rn(p.scale, ATTN_LOG2E);
    int32_t lim[2]; /* row r's columns c0 + c with c < lim[r] are visible (MASK only) */
    [[maybe_unused]] int32_t lim_lo[2]; /* VL: ... and c >= lim_lo[r] */
    float lse2[2], dsum[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int32_t i = bwd_wg_regs<64>::row(2 * r);
        lse2[r] = __fmul_rn(lse_smem[i], ATTN_LOG2E);
        dsum[r] = dsum_smem[i];
        lim[r] = 0;
        if constexpr (VL) {
            /* attn_vl.cu: the sequence's window (wl, wr; -1 unbounded), causal in it (as
             * bwd_tc_pds) */
            lim_lo[r] = 0;
            if (MASK) {
                const int64_t at = (int64_t)i0 + i + offset - j0; /* the diagonal's column */
                const int64_t end = p.s.wr >= 0 && at + p.s.wr + 1 < rn ? at + p.s.wr + 1 : rn;
                const int64_t start = p.s.wl >= 0 && at - p.s.wl > 0 ? at - p.s.wl : 0;
                const bool any = i < rm && end > start;
                lim[r] = any ? (int32_t)end - c0 : -c0;
                lim_lo[r] = any ? (int32_t)start - c0 : -c0;
            }
        } else if (MASK) {
            const int64_t diag = (int64_t)i0 + i + offset - j0 + 1; /* past the last visible j */
            const int64_t end = causal && diag < rn ? diag : rn;
            lim[r] = i < rm && end > 0 ? (int32_t)end - c0 : -c0;
        }
    }
    if constexpr (CAP) { /* the VL kernel's instance for a softcap > 0 (the host's choice) */
        /* softcap: the score is cap tanh(scale q.k / cap), so P = 2^(log2(e) (cap th -
         * LSE)) and dS = P (dP - Dsum) (1 - th^2), th = tanh(scale S / cap) (the
         * arithmetic of bwd_tc_pds). th replaces S while dP runs; P and dS then take
         * the places of th and dP, so no register more is live than without the cap. */
        const float k = __fdiv_rn(p.scale, p.softcap), cap2 = __fmul_rn(p.softcap, ATTN_LOG2E);
#pragma unroll
        for (int e = 0; e < W / 2; e++)
            s[e] = tanhf(__fmul_rn(s[e], k));
        attn_wg_wait<0>(); /* dP has landed */
        attn_wg_pin<W / 2>(dp);
#pragma unroll
        for (int e = 0; e < W / 2; e++) {
            const int r = (e >> 1) & 1, c = bwd_wg_regs<64>::col(e);
            const float th = s[e], pr = attn_ex2(fmaf(th, cap2, -lse2[r]));
            const float ds = __fmul_rn(__fmul_rn(pr, __fsub_rn(dp[e], dsum[r])), fmaf(-th, th, 1.0f));
            const bool vis = !MASK || (c < lim[r] && c >= lim_lo[r]);
            s[e] = vis ? pr : 0.0f;
            dp[e] = vis ? ds : 0.0f;
        }
    } else {
#pragma unroll
        for (int e = 0; e < W / 2; e++) {
            const int r = (e >> 1) & 1;
            const float pr = attn_ex2(fmaf(s[e], scale2, -lse2[r]));
            if constexpr (VL) {
                const int32_t c = bwd_wg_regs<64>::col(e);
                s[e] = !MASK || (c < lim[r] && c >= lim_lo[r]) ? pr : 0.0f;
            } else {
                s[e] = !MASK || bwd_wg_regs<64>::col(e) < lim[r] ? pr : 0.0f;
            }
        }
        attn_wg_wait<0>(); /* dP has landed */
        attn_wg_pin<W / 2>(dp);
#pragma unroll
        for (int e = 0; e < W / 2; e++) {
            const int r = (e >> 1) & 1;
            dp[e] = __fmul_rn(s[e], __fsub_rn(dp[e], dsum[r])); /* 0 where P is */
        }
    }
    bwd_wg_store_pds<DT, W>(p_smem, ds_smem, s, dp, c0, fresh);
}

/* Issue S = Q K^T and then dP = dO V^T (d ascending, k16 steps), two committed groups,
 * over N kv rows r0 .. of K and V (bn rows a tile) and the step's 64 q rows; T forms the
 * transposes S^T = K Q^T and dP^T = V dO^T instead (the kv rows as the product's rows). */
template <typename DT, int D, int N, bool T>
static __device__ __forceinline__ void bwd_wg_s_dp(float (&s)[N / 2], float (&dp)[N / 2], const uint16_t *q_s,
                                                   const uint16_t *do_s, const uint16_t *k_s, const uint16_t *v_s,
                                                   int32_t bn, int32_t r0)
{
    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < D / 16; kk++)
        if constexpr (T)
            attn_wg_mma<DT, N, 0, 0>(s, attn_wg_kmajor(k_s, bn, r0, 16 * kk), attn_wg_kmajor(q_s, BWD_TC_BM, 0, 16 * kk),
                                     kk > 0);
        else
            attn_wg_mma<DT, N, 0, 0>(s, attn_wg_kmajor(q_s, BWD_TC_BM, 0, 16 * kk), attn_wg_kmajor(k_s, bn, r0, 16 * kk),
                                     kk > 0);
    attn_wg_commit();
#pragma unroll
    for (int32_t kk = 0; kk < D / 16; kk++)
        if constexpr (T)
            attn_wg_mma<DT, N, 0, 0>(dp, attn_wg_kmajor(v_s, bn, r0, 16 * kk),
                                     attn_wg_kmajor(do_s, BWD_TC_BM, 0, 16 * kk), kk > 0);
        else
            attn_wg_mma<DT, N, 0, 0>(dp, attn_wg_kmajor(do_s, BWD_TC_BM, 0, 16 * kk),
                                     attn_wg_kmajor(v_s, bn, r0, 16 * kk), kk > 0);
    attn_wg_commit();
}

/* The transposed step's P and dS (BWD_WG_TRANSPOSED): the warpgroup's S^T and dP^T (64 kv rows 64 wg .. of
 * the tile x 64 q columns: accumulator row r is kv row 64 wg + r, column c is q row c)
 * become P^T and dS^T, packed to the input dtype as the A fragments of dV += P^T dO and
 * dK += dS^T Q (pt, dst: k16 slice kk is pairs 4 kk .. 4 kk + 3, attn_wgmma.h); dS^T is
 * also stored, as a (128 kv, 64 q) swizzled tile, for dQ = dS K (A MN-major). LSE and
 * Dsum are per column here. The arithmetic per element is bwd_wg_pds's. MASK and VL as
 * there: an element is visible where lo[h] <= c < hi[h] for its row half h. */
template <typename DT, bool MASK, bool VL = false, bool CAP = false>
static __device__ __forceinline__ void bwd_wg_pds_t(const struct attn_bwd_params &p, uint16_t *ds_smem,
                                                    const float *lse_smem, const float *dsum_smem, float (&s)[32],
                                                    float (&dp)[32], uint32_t (&pt)[16], uint32_t (&dst)[16],
                                                    int32_t wg, int32_t i0, int32_t rm, int32_t j0, int32_t rn)
{
    const int64_t base = (int64_t)i0 + ((int64_t)p.seqlen_k - p.seqlen_q) - j0; /* q row c sees kv
                                                       row j (causal) while j <= c + base */
    const float scale2 = __fmul_rn(p.scale, ATTN_LOG2E);
    int32_t lo[2], hi[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int32_t j = 64 * wg + bwd_wg_regs<64>::row(2 * h);
        int64_t l = 0, u = rm;
        if constexpr (VL) { /* the window (wl, wr; -1 unbounded) as bwd_wg_pds's */
            if (p.s.wr >= 0 && j - p.s.wr - base > l)
                l = j - p.s.wr - base;
            if (p.s.wl >= 0 && j + p.s.wl - base + 1 < u)
                u = j + p.s.wl - base + 1;
        } else if (p.s.mask == SCHED_MASK_CAUSAL && j - base > l) {
            l = j - base;
        }
        if (j >= rn || u < l)
            u = l;
        lo[h] = MASK ? (int32_t)(l < BWD_TC_BM ? l : BWD_TC_BM) : 0;
        hi[h] = MASK ? (int32_t)u : BWD_TC_BM;
    }
    if constexpr (CAP) { /* the VL kernel's instance for a softcap > 0 (the host's choice); th
                            replaces S while dP runs (bwd_wg_pds) */
        const float k = __fdiv_rn(p.scale, p.softcap), cap2 = __fmul_rn(p.softcap, ATTN_LOG2E);
#pragma unroll
        for (int e = 0; e < 32; e++)
            s[e] = tanhf(__fmul_rn(s[e], k));
        attn_wg_wait<0>(); /* dP has landed */
        attn_wg_pin<32>(dp);
#pragma unroll
        for (int e = 0; e < 32; e++) {
            const int h = (e >> 1) & 1, c = bwd_wg_regs<64>::col(e);
            const float th = s[e], pr = attn_ex2(fmaf(th, cap2, -__fmul_rn(lse_smem[c], ATTN_LOG2E)));
            const float ds = __fmul_rn(__fmul_rn(pr, __fsub_rn(dp[e], dsum_smem[c])), fmaf(-th, th, 1.0f));
            const bool vis = !MASK || (c >= lo[h] && c < hi[h]);
            s[e] = vis ? pr : 0.0f;
            dp[e] = vis ? ds : 0.0f;
        }
    } else {
#pragma unroll
        for (int e = 0; e < 32; e++) {
            const int h = (e >> 1) & 1, c = bwd_wg_regs<64>::col(e);
            const float pr = attn_ex2(fmaf(s[e], scale2, -__fmul_rn(lse_smem[c], ATTN_LOG2E)));
            s[e] = !MASK || (c >= lo[h] && c < hi[h]) ? pr : 0.0f;
        }
        attn_wg_wait<0>(); /* dP has landed */
        attn_wg_pin<32>(dp);
#pragma unroll
        for (int e = 0; e < 32; e++)
            dp[e] = __fmul_rn(s[e], __fsub_rn(dp[e], dsum_smem[bwd_wg_regs<64>::col(e)])); /* 0 where P is */
    }
#pragma unroll
    for (int e = 0; e < 32; e += 2) {
        pt[e / 2] = DT::pack2(s[e], s[e + 1]);
        dst[e / 2] = DT::pack2(dp[e], dp[e + 1]);
        const uint32_t at = attn_sw128(64 * wg + bwd_wg_regs<64>::row(e), bwd_wg_regs<64>::col(e), CUATTN_TC_BLOCK_N) / 2;
        *reinterpret_cast<uint32_t *>(ds_smem + at) = dst[e / 2];
    }
}
#endif

/* The persistent mode's hand-off ring (v3's dQ writer warp, below). */
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

/* One step of v3, untransposed (head dim 64; 128 in the interleaved kernel; the transposed
 * step is bwd_wg_step_mb): the contract of v2's bwd_tc_step (loads, prefetch, registers, the
 * deferred pass-on of rel_ctr after the P/dS barrier), on wgmma; VL as there (attn_vl.cu:
 * p describes the job's sequence; the window band and the softcap in P and dS). On return dQp has
 * landed; dK and dV have too, unless they are left running under the hand-off (`keep`).
 * With the writer warp (the persistent default) nothing is deferred: rel_ctr is NULL.
 * Measured without the writer (bench/results/gpu-v3-wgmma-2026-11-29.md): passing on
 * earlier, under S and dP, stalls warp 0 until the bulk reduction has completed, and
 * later, under the last products, delays the next adder; both were slower. */
template <typename DT, int D, int BN, bool VL = false, bool CAP = false>
static __device__ __forceinline__ void bwd_tc_step(const struct attn_bwd_params &p, bwd_wg_smem<D> &sm,
                                                   bwd_wg_regs<D> &x, int32_t bh, int32_t n, int32_t m,
                                                   int32_t buf, int loaded, int32_t next_m,
                                                   int32_t *rel_ctr, int32_t rel_rank)
{
#if ATTN_WGMMA
    static_assert(BN == CUATTN_TC_BLOCK_N && BN == 128, "v3 runs 64 x 128 tiles");
    /* wg through a shuffle from lane 0: the compiler then knows it is warp-uniform and
     * forms the B descriptors below in uniform registers, as it does the A ones; from
     * threadIdx.x it kept them in ordinary registers and spilled them at hdim 128 (144 B,
     * refilled between consecutive wgmma: ../shared/docs/hopper.md, B-a). */
    const int32_t tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
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
    bwd_wg_s_dp<DT, D, 64, false>(s, dp, q_s, do_s, sm.k_smem, sm.v_smem, BN, 64 * wg);
    attn_wg_wait<1>(); /* S has landed (and the previous step's dK, dV); dP may still be running */
    attn_wg_pin<32>(s);
    if (next_m >= 0) /* the previous step's reads of buffer buf ^ 1 are complete */
        bwd_tc_load_q<D, BN>(p, sm, buf ^ 1, bh, next_m);

    if constexpr (VL) {
        /* the window (wl, wr; -1 unbounded): every row of the tile sees every column (as
         * bwd_mma.cuh's step) */
        const int64_t at = (int64_t)i0 + ((int64_t)p.seqlen_k - p.seqlen_q) - j0;
        const bool whole = rm == BWD_TC_BM && rn == BN && (p.s.wr < 0 || at + p.s.wr >= BN - 1) &&
                           (p.s.wl < 0 || at + BWD_TC_BM - 1 - p.s.wl <= 0);
        if (whole)
            bwd_wg_pds<DT, false, true, 64, CAP>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf],
                                                 s, dp, i0, rm, j0, rn);
        else
            bwd_wg_pds<DT, true, true, 64, CAP>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s,
                                                dp, i0, rm, j0, rn);
    } else {
        const bool whole = rm == BWD_TC_BM && rn == BN &&
                           (p.s.mask != SCHED_MASK_CAUSAL ||
                            (int64_t)i0 + ((int64_t)p.seqlen_k - p.seqlen_q) - j0 >= BN - 1);
        if (whole)
            bwd_wg_pds<DT, false>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s, dp, i0,
                                  rm, j0, rn);
        else
            bwd_wg_pds<DT, true>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s, dp, i0,
                                 rm, j0, rn);
    }
    bwd_tc_async_visible<true>();
    bwd_cta_sync<bwd_wg_smem<D>::writer>(); /* P and dS are complete before the products below read them */
    if (rel_ctr && tid == 0)
        bwd_tc_pass_on(rel_ctr, rel_rank);

    /* dQp = dS K (j ascending), then dK += dS^T Q and dV += P^T dO (i ascending): two
     * groups, so the dQ hand-off needs only the first */
    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < BN / 16; kk++)
        attn_wg_mma<DT, D / 2, 0, 1>(x.dq_reg, attn_wg_kmajor(sm.ds_smem, BWD_TC_BM, 0, 16 * kk),
                                     attn_wg_mnmajor(sm.k_smem, BN, 16 * kk, (D / 2) * wg), kk > 0);
    attn_wg_commit();
#pragma unroll
    for (int32_t kk = 0; kk < BWD_TC_BM / 16; kk++)
        attn_wg_mma<DT, D, 1, 1>(x.dk_reg, attn_wg_mnmajor(sm.ds_smem, BWD_TC_BM, 16 * kk, 64 * wg),
                                 attn_wg_mnmajor(q_s, BWD_TC_BM, 16 * kk, 0), 1);
#pragma unroll
    for (int32_t kk = 0; kk < BWD_TC_BM / 16; kk++)
        attn_wg_mma<DT, D, 1, 1>(x.dv_reg, attn_wg_mnmajor(sm.p_smem, BWD_TC_BM, 16 * kk, 64 * wg),
                                 attn_wg_mnmajor(do_s, BWD_TC_BM, 16 * kk, 0), 1);
    attn_wg_commit();
    if (keep) {
        attn_wg_wait<1>();
    } else {
        attn_wg_wait<0>();
        attn_wg_pin<D / 2>(x.dv_reg);
        attn_wg_pin<D / 2>(x.dk_reg);
    }
    attn_wg_pin<D / 4>(x.dq_reg);
#else
    (void)p, (void)sm, (void)x, (void)bh, (void)n, (void)m, (void)buf, (void)loaded, (void)next_m;
    (void)rel_ctr, (void)rel_rank;
    __trap();
#endif
}

/* Q's and dO's D/64 boxes of 64 x BWD_TC_BM (rows r0 .. of head h, batch b in the maps'
 * view; rows past the view's end land as zeros) into stage buf, their bytes expected on
 * q_full[buf] by the one arrival made here: the stage's TMA (bwd_wg_load_q_mb's thread 0,
 * head dim 256's loader lane). */
template <int D, typename SM>
static __device__ __forceinline__ void bwd_wg_q_boxes(SM &sm, int32_t buf, const bwd_wg_qmaps *qm, int32_t r0,
                                                      int32_t h, int32_t b)
{
#if BWD_TC_BULK
    attn_mbar_expect_tx(&sm.q_full[buf], 2 * (D / 64) * BWD_TC_BM * 64 * 2);
#pragma unroll
    for (int32_t c = 0; c < D / 64; c++) {
        attn_tma_load_4d(sm.q_smem[buf] + c * BWD_TC_BM * 64, &qm->q, &sm.q_full[buf], 64 * c, r0, h, b);
        attn_tma_load_4d(sm.dout_smem[buf] + c * BWD_TC_BM * 64, &qm->dout, &sm.q_full[buf], 64 * c, r0, h, b);
    }
#else
    (void)sm, (void)buf, (void)qm, (void)r0, (void)h, (void)b;
    __trap();
#endif
}

/* BWD_WG_STAGE_BARS: start loading stage buf (bwd_tc_load_q), its completion tracked by
 * q_full[buf]: the thread's cp.async by a no-increment arrival when they land, its stores
 * (LSE +inf, Dsum 0 past the rows) by a release arrival. With maps (qm->ok), Q and dO come
 * by TMA instead: thread 0's arrival carries their bytes (expect_tx), the rest as before.
 * view (shared memory; the window/packed kernel): the sequence's view batch
 * and first row in the maps' view; then only whole tiles come by TMA (the rows past a
 * packed sequence are the next one's, which cp.async's zeros must replace). */
template <int D, int BN>
static __device__ __forceinline__ void bwd_wg_load_q_mb(const struct attn_bwd_params &p, bwd_wg_smem<D> &sm,
                                                        int32_t buf, int32_t bh, int32_t m,
                                                        const bwd_wg_qmaps *qm = nullptr,
                                                        const int32_t *view = nullptr)
{
#if BWD_TC_BULK
    if (qm && qm->ok && (!view || p.seqlen_q - m * BWD_TC_BM >= BWD_TC_BM)) {
        int32_t b = bh / p.heads_q, h = bh - b * p.heads_q, tid = threadIdx.x;
        const int32_t i0 = m * BWD_TC_BM, rm = p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
        int32_t r0 = i0; /* the boxes' first row in the maps' view */
        if (view) {
            b += view[0];
            r0 += view[1];
        }
        bwd_tc_load_stats(p, sm, buf, bh, i0, rm); /* LSE and Dsum as bwd_tc_load_q */
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(attn_smem_u32(&sm.q_full[buf]))
                     : "memory");
        if (tid == 0) /* its second arrival carries the bytes; then the boxes */
            bwd_wg_q_boxes<D>(sm, buf, qm, r0, h, b);
        else
            attn_mbar_arrive(&sm.q_full[buf]);
        return;
    }
    bwd_tc_load_q<D, BN>(p, sm, buf, bh, m);
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(attn_smem_u32(&sm.q_full[buf]))
                 : "memory");
    attn_mbar_arrive(&sm.q_full[buf]);
#else
    (void)p, (void)sm, (void)buf, (void)bh, (void)m;
    __trap();
#endif
}

/* Wait for stage buf (parity bit buf of qph, flipped), then make its bytes visible to
 * this thread's wgmma (async proxy). */
template <int D>
static __device__ __forceinline__ void bwd_wg_wait_q(bwd_wg_smem<D> &sm, int32_t buf, uint32_t &qph)
{
#if BWD_TC_BULK
    attn_mbar_wait(&sm.q_full[buf], (qph >> buf) & 1u);
    qph ^= 1u << buf;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
    (void)sm, (void)buf, (void)qph;
    __trap();
#endif
}

/* The transposed step (BWD_WG_TRANSPOSED), without the post-step barrier
 * (BWD_WG_STAGE_BARS): warpgroup wg forms S^T = K Q^T and dP^T = V dO^T over its kv rows
 * 64 wg ..; P^T and dS^T stay in registers as the A operands of dV += P^T dO and
 * dK += dS^T Q; dS goes to tile dsb (ds_smem or p_smem), transposed, for dQ = dS K. The
 * stage's data through q_full, the prefetch after the dS barrier; VL as bwd_tc_step's. On
 * return every product has landed (the RS products read registers the next step needs). */
template <typename DT, int D, int BN, bool VL = false, bool CAP = false>
static __device__ __forceinline__ void bwd_wg_step_mb(const struct attn_bwd_params &p, bwd_wg_smem<D> &sm,
                                                      bwd_wg_regs<D> &x, int32_t bh, int32_t n, int32_t m,
                                                      int32_t buf, int loaded, int32_t next_m, uint32_t &qph,
                                                      int32_t dsb, const bwd_wg_qmaps *qm = nullptr,
                                                      const int32_t *view = nullptr)
{
    static_assert(BWD_WG_TRANSPOSED(D) && BN == CUATTN_TC_BLOCK_N, "the transposed step's head dim");
#if ATTN_WGMMA
    const int32_t tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    const int32_t i0 = m * BWD_TC_BM, rm = p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;
    uint16_t *ds_s = dsb ? sm.p_smem : sm.ds_smem;
    if (!loaded)
        bwd_wg_load_q_mb<D, BN>(p, sm, buf, bh, m, qm, view);
    bwd_wg_wait_q(sm, buf, qph);
    const uint16_t *q_s = sm.q_smem[buf], *do_s = sm.dout_smem[buf];

    float s[32], dp[32]; /* S^T and dP^T over the warpgroup's 64 kv rows */
    bwd_wg_s_dp<DT, D, 64, true>(s, dp, q_s, do_s, sm.k_smem, sm.v_smem, BN, 64 * wg);
    attn_wg_wait<1>(); /* S^T has landed; dP^T may still be running */
    attn_wg_pin<32>(s);

    uint32_t pt[16], dst[16];
    {
        const int64_t at = (int64_t)i0 + ((int64_t)p.seqlen_k - p.seqlen_q) - j0;
        bool whole;
        if constexpr (VL) /* the window (wl, wr; -1 unbounded) as bwd_tc_step's */
            whole = rm == BWD_TC_BM && rn == BN && (p.s.wr < 0 || at + p.s.wr >= BN - 1) &&
                    (p.s.wl < 0 || at + BWD_TC_BM - 1 - p.s.wl <= 0);
        else
            whole = rm == BWD_TC_BM && rn == BN && (p.s.mask != SCHED_MASK_CAUSAL || at >= BN - 1);
        if (whole)
            bwd_wg_pds_t<DT, false, VL, CAP>(p, ds_s, sm.lse_smem[buf], sm.dsum_smem[buf], s, dp, pt, dst, wg, i0, rm,
                                        j0, rn);
        else
            bwd_wg_pds_t<DT, true, VL, CAP>(p, ds_s, sm.lse_smem[buf], sm.dsum_smem[buf], s, dp, pt, dst, wg, i0, rm,
                                       j0, rn);
    }
    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < BWD_TC_BM / 16; kk++) {
        const uint32_t a[4] = {pt[4 * kk], pt[4 * kk + 1], pt[4 * kk + 2], pt[4 * kk + 3]};
        attn_wg_mma_rs<DT, D, 1>(x.dv_reg, a, attn_wg_mnmajor(do_s, BWD_TC_BM, 16 * kk, 0), 1);
    }
#pragma unroll
    for (int32_t kk = 0; kk < BWD_TC_BM / 16; kk++) {
        const uint32_t a[4] = {dst[4 * kk], dst[4 * kk + 1], dst[4 * kk + 2], dst[4 * kk + 3]};
        attn_wg_mma_rs<DT, D, 1>(x.dk_reg, a, attn_wg_mnmajor(q_s, BWD_TC_BM, 16 * kk, 0), 1);
    }
    attn_wg_commit();
    bwd_tc_async_visible<true>();
    bwd_cta_sync<true>(); /* dS is complete before dQ reads it; both warpgroups have finished
                             the previous step, so stage buf ^ 1 and the other dS tile are free */
    if (next_m >= 0)
        bwd_wg_load_q_mb<D, BN>(p, sm, buf ^ 1, bh, next_m, qm, view);

    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < BN / 16; kk++)
        attn_wg_mma<DT, D / 2, 1, 1>(x.dq_reg, attn_wg_mnmajor(ds_s, BN, 16 * kk, 0),
                                     attn_wg_mnmajor(sm.k_smem, BN, 16 * kk, (D / 2) * wg), kk > 0);
    attn_wg_commit();
    attn_wg_wait<0>();
    attn_wg_pin<D / 2>(x.dv_reg);
    attn_wg_pin<D / 2>(x.dk_reg);
    attn_wg_pin<D / 4>(x.dq_reg);
    attn_wg_pin<16>(pt); /* the RS products read them until the wait */
    attn_wg_pin<16>(dst);
#else
    (void)p, (void)sm, (void)x, (void)bh, (void)n, (void)m, (void)buf, (void)loaded, (void)next_m, (void)qph;
    (void)dsb;
    __trap();
#endif
}

/* ---- Head dim 256: Q and dO by TMA from a loader lane ---------------------------------------
 *
 * At 256 a load into a Q/dO stage must wait for the writer's read of the dQ partial staged
 * there (bwd_wg_smem<256>), and the compute warps waited for it themselves, in the step,
 * before their cp.async (the trace's q.empty). With maps (persistent mode, qm->ok) the
 * writer warpgroup's idle warp 9, lane 0 - the loader, at the writer warpgroup's 24
 * registers - waits there instead and issues the stage's TMA boxes (bwd_wg_q_boxes, 128's
 * box code and swizzled layout); the compute warps load LSE and Dsum by cp.async as before
 * (they do not alias the staging) and wait for the stage's q_full at the step's start.
 *
 * One load: every compute thread issues its LSE/Dsum cp.async and makes two arrivals on
 * q_full[buf] (one when its cp.async land, .noinc; one release, for its stores past the
 * rows); thread 0 then posts a request {first row, head, batch, stage | the parity of the
 * empty_bar phase of the last ticket handed over | its buffer} in the one-slot mailbox
 * (after lq_empty: the loader has finished the last request) and arrives on lq_full. The
 * loader takes it, waits for that empty_bar phase (the read of the last partial, which is
 * in this stage or long read - exactly the wait the compute warps made), makes the 513th
 * arrival of q_full[buf] with the stage's 64 KiB expected (expect_tx), issues the boxes
 * and arrives on lq_empty. The stage's phase completes when the 513 arrivals and the
 * bytes are in.
 *
 * Phases. An mbarrier wait names a phase by its parity, so no barrier may complete two
 * phases past one that a waiter still has to see:
 *   empty_bar: the loader waits for phase k (ticket k's read; the last ticket before the
 *     request). Phase k + 1 needs ticket k + 1, whose full_bar phase needs thread 0's
 *     arrival, and thread 0 first waits lq_empty for every request posted so far
 *     (bwd_wg256_hand): the loader has seen phase k by then.
 *   lq_full / lq_empty: one request in flight; the next is posted by thread 0 only after
 *     lq_empty, and the loader arrives on lq_empty only after reading the request.
 *   q_full[b]: each load into stage b is waited for by every compute thread at the start
 *     of the step that uses it; the next load into b is posted after the next step's P/dS
 *     barrier (or at a later unit's start, behind K and V's barrier), so every thread has
 *     seen the phase, and every thread's arrivals for the next phase come after.
 * Waits. The loader waits only for thread 0's requests and for empty_bar phases; the compute
 * warps wait for q_full (the loader, so that empty_bar phase, and the copies) and thread 0
 * for lq_empty (the loader, so that phase again). Each empty_bar phase is one the compute
 * warps waited for at the same load today (the unit's first load, the prefetch, the
 * hand-off), so no wait is added to the chain (drain rule unchanged: bwd_tc_persistent);
 * nothing the loader waits for depends on what the compute warps do after posting. At the
 * end, thread 0 posts a request of row -1 (bwd_wg256_loader_end) and the loader returns;
 * every request posted was for a step that ran, so no copy is in flight then. */
struct bwd_wg256_lq {
    int32_t tma;   /* 1: the loader loads Q and dO (qm->ok; uniform); 0: cp.async as before */
    uint32_t qph;  /* the stages' next q_full parities (bit b: stage b) */
    uint32_t mph;  /* the requests posted so far, mod 2 */
};

#if BWD_TC_BULK
/* The request's "last ticket's read" is empty_bar[ring.b] at ring.phase ^ 1: one buffer. */
static_assert(BWD_WG_DQBUFS == 1, "bwd_wg256_load_q assumes one dQ staging buffer");
/* Compute warps, all 256 (uniform): start loading q-tile m of head bh into stage buf - LSE
 * and Dsum by cp.async, Q and dO by the loader once the writer has read the last ticket's
 * partial (ring: the ticket ring as the caller's hand-offs left it). */
static __device__ __forceinline__ void bwd_wg256_load_q(const struct attn_bwd_params &p, bwd_wg_smem<256> &sm,
                                                        int32_t buf, int32_t bh, int32_t m, const bwd_wg_ring &ring,
                                                        bwd_wg256_lq &lq)
{
    const int32_t i0 = m * BWD_TC_BM, rm = p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
    bwd_tc_load_stats(p, sm, buf, bh, i0, rm); /* LSE and Dsum as bwd_tc_load_q */
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(attn_smem_u32(&sm.q_full[buf]))
                 : "memory");
    attn_mbar_arrive(&sm.q_full[buf]);
    if (threadIdx.x == 0) {
        const int32_t b = bh / p.heads_q;
        attn_mbar_wait(&sm.lq_empty, lq.mph ^ 1u); /* the last request is done (at once the first time) */
        sm.lq_req[0] = i0;
        sm.lq_req[1] = bh - b * p.heads_q;
        sm.lq_req[2] = b;
        sm.lq_req[3] = buf | (int32_t)((ring.phase ^ 1u) << 1) | ring.b << 2;
        attn_mbar_arrive(&sm.lq_full);
    }
    lq.mph ^= 1u;
}

/* Thread 0, at the end: no more requests; the loader returns. Every way out of the compute
 * warps' loop must pass here (today there is one: no job left), or the loader waits on
 * lq_full for ever and the CTA never finishes. */
static __device__ __forceinline__ void bwd_wg256_loader_end(bwd_wg_smem<256> &sm, const bwd_wg256_lq &lq)
{
    attn_mbar_wait(&sm.lq_empty, lq.mph ^ 1u);
    sm.lq_req[0] = -1;
    attn_mbar_arrive(&sm.lq_full);
}

/* The loader (warp 9, lane 0; the writer warpgroup's 24 registers): take the requests in
 * turn until the end, each: wait for the writer's read of the partial in the stage, then
 * the stage's boxes (above). */
static __device__ __forceinline__ void bwd_wg256_loader(bwd_wg_smem<256> &sm, const bwd_wg_qmaps *qm)
{
    for (uint32_t ph = 0;; ph ^= 1u) {
        attn_mbar_wait(&sm.lq_full, ph); /* a request */
        const int32_t r0 = sm.lq_req[0], h = sm.lq_req[1], b = sm.lq_req[2], at = sm.lq_req[3];
        if (r0 < 0)
            return;
        attn_mbar_wait(&sm.empty_bar[at >> 2], (uint32_t)(at >> 1) & 1u); /* the stage is free */
        bwd_wg_q_boxes<256>(sm, at & 1, qm, r0, h, b);
        attn_mbar_arrive(&sm.lq_empty); /* (after the request's last read) */
    }
}
#endif

/* Head dim 256's step (64 x 64 tiles, bwd_wg_smem<256>): the contract of the step above,
 * with nothing left running at the return - the dQ partial is staged where this step's Q
 * and dO are, so every product that reads them has completed. Warpgroup wg:
 *   S, dP (64 x 64):  kv columns 32 wg .. +32 (m64n32, k = d: 16 k16 steps);
 *   dQp (64 x 256):   d columns 128 wg .. +128 (m64n128, k = j: 4 steps);
 *   dK, dV (64 x 256): all 64 kv rows, d columns 128 wg .. +128 (m64n128, k = i: 4 steps;
 *                      both warpgroups read all of dS^T and P^T).
 * ring: the persistent mode's hand-off (bwd_wg_smem<256>): a load into a stage waits until
 * the writer has read the partial staged there; NULL in the interleaved mode (no writer,
 * no prefetch: the partial goes through stage 1, the loads into stage 0). dQp's registers
 * are zeroed before its product (whose first k16 step ignores them all the same), so the
 * compiler keeps them live from the product to the hand-off only: 128 (dK, dV) + 64 floats
 * at the peak, within the 240 registers. lq (persistent mode): with lq->tma the loads go
 * through the loader lane (bwd_wg256_load_q), and the step waits for its stage's q_full
 * instead of its own cp.async and a barrier. */
template <typename DT, int D, int BN, bool VL = false>
static __device__ __forceinline__ void bwd_tc_step(const struct attn_bwd_params &p, bwd_wg_smem<256> &sm,
                                                   bwd_wg_regs<256> &x, int32_t bh, int32_t n, int32_t m,
                                                   int32_t buf, int loaded, int32_t next_m, int32_t *rel_ctr,
                                                   int32_t rel_rank, const bwd_wg_ring *ring = nullptr,
                                                   bwd_wg256_lq *lq = nullptr)
{
    static_assert(D == 256 && BN == BWD_WG256_BN && !VL, "head dim 256: 64 x 64 tiles, dense masks");
#if ATTN_WGMMA
    const int32_t tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0); /* uniform: see above */
    const int32_t i0 = m * BWD_TC_BM, rm = p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;
    const bool tma = lq && lq->tma; /* (uniform) */
    if (tma) {
        if (!loaded)
            bwd_wg256_load_q(p, sm, buf, bh, m, *ring, *lq);
        BWD_WG_T0();
        bwd_wg_wait_q(sm, buf, lq->qph); /* Q, dO (the loader's TMA), LSE and Dsum (everyone's) */
        if (tid == 0)
            BWD_WG_TADD(BT_QFULL);
    } else if (!loaded) {
        if (ring) { /* the writer has read what the last ticket staged (maybe in this stage) */
            BWD_WG_T0();
            attn_mbar_wait(&sm.empty_bar[ring->b], ring->phase ^ 1u);
            if (tid == 0)
                BWD_WG_TADD(BT_QEMPTY);
        }
        bwd_tc_load_q<D, BN>(p, sm, buf, bh, m);
        attn_cp_async_wait<0>();
        bwd_tc_async_visible<true>();
        bwd_cta_sync<true>(); /* Q, dO, LSE and Dsum are complete before anyone reads them */
    }
    const uint16_t *q_s = sm.q_smem[buf], *do_s = sm.dout_smem[buf];

    /* S = Q K^T, then dP = dO V^T, d ascending: two groups in flight */
    float s[16], dp[16];
    bwd_wg_s_dp<DT, D, 32, false>(s, dp, q_s, do_s, sm.k_smem, sm.v_smem, BN, 32 * wg);
    attn_wg_wait<1>(); /* S has landed; dP may still be running */
    attn_wg_pin<16>(s);

    const bool whole = rm == BWD_TC_BM && rn == BN &&
                       (p.s.mask != SCHED_MASK_CAUSAL ||
                        (int64_t)i0 + ((int64_t)p.seqlen_k - p.seqlen_q) - j0 >= BN - 1);
    /* the interleaved mode (no ring) forms the P and dS store addresses afresh: see
     * bwd_wg_store_pds */
    if (whole)
        bwd_wg_pds<DT, false, false, 32>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s, dp, i0,
                                         rm, j0, rn, !ring);
    else
        bwd_wg_pds<DT, true, false, 32>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s, dp, i0,
                                        rm, j0, rn, !ring);
    bwd_tc_async_visible<true>();
    bwd_cta_sync<true>(); /* P and dS are complete before the products below read them */
    /* The next step's Q, dO, LSE and Dsum into stage buf ^ 1: the previous step's products
     * are complete, and its partial, staged there, must have been read too. Here rather
     * than as soon as S has landed (as at 64 and 128): the writer gets P and dS's time
     * more, the load still has the products' - 1.03-1.08x faster at 1k-16k, the same bits
     * (bench/results/gpu-bwd256-0b862a1-2026-12-03.md). */
    if (next_m >= 0) {
        if (tma) { /* the loader waits for that read */
            bwd_wg256_load_q(p, sm, buf ^ 1, bh, next_m, *ring, *lq);
        } else {
            if (ring) {
                BWD_WG_T0();
                attn_mbar_wait(&sm.empty_bar[ring->b], ring->phase ^ 1u);
                if (tid == 0)
                    BWD_WG_TADD(BT_QEMPTY);
            }
            bwd_tc_load_q<D, BN>(p, sm, buf ^ 1, bh, next_m);
        }
    }
    if (rel_ctr && tid == 0)
        bwd_tc_pass_on(rel_ctr, rel_rank);

    /* dQp = dS K (j ascending), then dK += dS^T Q and dV += P^T dO (i ascending) */
#pragma unroll
    for (int e = 0; e < 64; e++) /* (volatile: the zeros stay here, behind the barrier) */
        asm volatile("mov.b32 %0, 0;" : "=f"(x.dq_reg[e]));
    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < BN / 16; kk++)
        attn_wg_mma<DT, 128, 0, 1>(x.dq_reg, attn_wg_kmajor(sm.ds_smem, BWD_TC_BM, 0, 16 * kk),
                                   attn_wg_mnmajor(sm.k_smem, BN, 16 * kk, 128 * wg), kk > 0);
    attn_wg_commit();
#pragma unroll
    for (int32_t kk = 0; kk < BWD_TC_BM / 16; kk++)
        attn_wg_mma<DT, 128, 1, 1>(x.dk_reg, attn_wg_mnmajor(sm.ds_smem, BWD_TC_BM, 16 * kk, 0),
                                   attn_wg_mnmajor(q_s, BWD_TC_BM, 16 * kk, 128 * wg), 1);
#pragma unroll
    for (int32_t kk = 0; kk < BWD_TC_BM / 16; kk++)
        attn_wg_mma<DT, 128, 1, 1>(x.dv_reg, attn_wg_mnmajor(sm.p_smem, BWD_TC_BM, 16 * kk, 0),
                                   attn_wg_mnmajor(do_s, BWD_TC_BM, 16 * kk, 128 * wg), 1);
    attn_wg_commit();
    attn_wg_wait<0>();
    attn_wg_pin<64>(x.dv_reg);
    attn_wg_pin<64>(x.dk_reg);
    attn_wg_pin<64>(x.dq_reg);
#else
    (void)p, (void)sm, (void)x, (void)bh, (void)n, (void)m, (void)buf, (void)loaded, (void)next_m;
    (void)rel_ctr, (void)rel_rank, (void)ring, (void)lq;
    __trap();
#endif
}

/* Thread 0 (BWD_WG_DKV_LAP), before it takes the job after job `job`:
 * whether the drain rule (bwd_tc_persistent) asks for bwd_wg_drain first - wait_end, that
 * job's, above job_next. job_next is past `job` already, so a wait end of job + 1 or less
 * (every schedule but shift) needs no load of it, and INT32_MAX (a last unit of one step)
 * always drains. */
static __device__ __forceinline__ bool bwd_wg_must_drain(const struct attn_bwd_params &p, int32_t wait_end,
                                                         int32_t job)
{
    return wait_end > job + 1 && (wait_end == INT32_MAX || wait_end > attn_ld_acquire(p.job_next));
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
#if BWD_TC_BULK
/* Thread 0, before the warps part: the barriers; a CTA-wide barrier must follow. */
template <int D>
static __device__ __forceinline__ void bwd_wg_init(bwd_wg_smem<D> &sm)
{
    for (int32_t b = 0; b < BWD_WG_DQBUFS; b++) {
        attn_mbar_init(&sm.full_bar[b], ATTN_THREADS);
        attn_mbar_init(&sm.empty_bar[b], 1);
    }
    if constexpr (BWD_WG_STAGE_BARS(D)) /* every thread's cp.async, then its release arrival */
        for (int32_t b = 0; b < 2; b++)
            attn_mbar_init(&sm.q_full[b], 2 * ATTN_THREADS);
    if constexpr (D == 256) { /* ... and the loader's arrival with the bytes (bwd_wg256_lq) */
        for (int32_t b = 0; b < 2; b++)
            attn_mbar_init(&sm.q_full[b], 2 * ATTN_THREADS + 1);
        attn_mbar_init(&sm.lq_full, 1);
        attn_mbar_init(&sm.lq_empty, 1);
    }
    if constexpr (D == 256 || BWD_WG_STAGE_BARS(D))
        attn_mbar_init_fence(); /* q_full: TMA completes bytes on it, issued by another thread */
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
    attn_mbar_arrive(&sm.full_bar[r.b]);
    bwd_wg_ring_next<D>(r);
}

/* Compute warps: hand the step's dQ partial of tile m of head bh (rank; -1 for atomic)
 * over in the next staging buffer. FRESH: the staging addresses formed at every call
 * (bwd_tc_stage_dq; the unitlap driver, bwd_wg_persistent_lap). */
template <int D, bool FRESH = false>
static __device__ __forceinline__ void bwd_wg_hand(bwd_wg_smem<D> &sm, const bwd_wg_regs<D> &x, bwd_wg_ring &r,
                                                   int32_t bh, int32_t m, int32_t rank)
{
    {
        BWD_WG_T0();
        attn_mbar_wait(&sm.empty_bar[r.b], r.phase ^ 1u); /* b is free (at once the first time round) */
        if (threadIdx.x == 0)
            BWD_WG_TADD(BT_HAND);
    }
    bwd_tc_stage_dq<D, CUATTN_TC_BLOCK_N, FRESH>(sm.dq_smem + r.b * BWD_TC_BM * D, x); /* then fences */
    bwd_wg_ticket(sm, r, bh, m, rank, 0);
}

/* Head dim 256: the same, with the partial staged in the place of stage `stage`'s Q and
 * dO (bwd_wg_smem<256>); every product that read them has completed, in both warpgroups
 * (the caller's barrier). With the loader (lq.tma), thread 0 hands the ticket over only
 * once the loader has finished every request so far: it has then seen the empty_bar phase
 * each waited for, which this ticket's read would otherwise let pass twice (the phases'
 * rule above bwd_wg256_lq). */
static __device__ __forceinline__ void bwd_wg256_hand(bwd_wg_smem<256> &sm, const bwd_wg_regs<256> &x,
                                                      bwd_wg_ring &r, int32_t stage, int32_t bh, int32_t m,
                                                      int32_t rank, const bwd_wg256_lq &lq)
{
    {
        BWD_WG_T0();
        attn_mbar_wait(&sm.empty_bar[r.b], r.phase ^ 1u); /* the writer has read the last partial */
        if (threadIdx.x == 0)
            BWD_WG_TADD(BT_HAND);
    }
    bwd_tc_stage_dq<256, BWD_WG256_BN>(reinterpret_cast<float *>(sm.io_smem[stage]), x); /* then fences */
    if (threadIdx.x == 0) {
        if (lq.tma) {
            BWD_WG_T0();
            attn_mbar_wait(&sm.lq_empty, lq.mph ^ 1u);
            BWD_WG_TADD(BT_HAND);
        }
        sm.ticket_stage[r.b] = stage;
    }
    bwd_wg_ticket<256>(sm, r, bh, m, rank, 0);
}

/* Compute warps, at the end: no more tickets. */
template <int D>
static __device__ __forceinline__ void bwd_wg_hand_end(bwd_wg_smem<D> &sm, bwd_wg_ring &r)
{
    attn_mbar_wait(&sm.empty_bar[r.b], r.phase ^ 1u);
    bwd_wg_ticket(sm, r, 0, 0, 0, 1);
}

/* Thread 0: wait until the writer has taken the turn of every ticket handed over so far
 * (it then needs nothing more to finish them): each buffer's last use has been read. */
template <int D>
static __device__ __forceinline__ void bwd_wg_drain(bwd_wg_smem<D> &sm, const bwd_wg_ring &r)
{
    for (int32_t b = 0; b < BWD_WG_DQBUFS; b++) /* b's next use: in this round, or the next */
        attn_mbar_wait(&sm.empty_bar[b], (b < r.b ? r.phase ^ 1u : r.phase) ^ 1u);
}

/* The writer, one ticket: tile m of head bh (rank -1: atomic) staged at src - its turn, the
 * reduction into dQacc (rank 0: a copy, dQacc not being zeroed: attn_bwd_dq_first_stores),
 * the staging buffer freed (empty) once the reduction has read it, then the tile performed
 * and passed on (atomic: performed). */
template <int D>
static __device__ __forceinline__ void bwd_wg_write_ticket(const struct attn_bwd_params &p, const float *src,
                                                           int32_t bh, int32_t m, int32_t rank, uint64_t *empty)
{
    BWD_WG_TLAP0();
    int32_t *ctr = p.counter + (int64_t)bh * p.s.m_tiles + m;
    if (rank >= 0)
        bwd_tc_take_turn(ctr, rank);
    BWD_WG_TLAP(BT_TURN);
    bwd_tc_bulk_add<D>(p, src, bh, m, rank == 0);
    bwd_tc_bulk_wait_read();
    attn_mbar_arrive(empty); /* free again */
    BWD_WG_TLAP(BT_READ);
    bwd_tc_pass_on(ctr, rank);
    BWD_WG_TLAP(BT_PERFORM);
}

/* The writer (one thread): take the tickets in turn until the end. */
template <int D>
static __device__ __forceinline__ void bwd_wg_writer(const struct attn_bwd_params &p, bwd_wg_smem<D> &sm)
{
    for (bwd_wg_ring r = {0, 0u};; bwd_wg_ring_next<D>(r)) {
        BWD_WG_TLAP0();
        attn_mbar_wait(&sm.full_bar[r.b], r.phase); /* a ticket */
        BWD_WG_TLAP(BT_FULL);
        const int32_t bh = sm.ticket[r.b][0], m = sm.ticket[r.b][1], rank = sm.ticket[r.b][2];
        if (sm.ticket[r.b][3])
            return;
        BWD_WG_TCOUNT(BT_TICKETS);
        if constexpr (D == 256) /* staged in the place of a stage's Q and dO */
            bwd_wg_write_ticket<D>(p, reinterpret_cast<const float *>(sm.io_smem[sm.ticket_stage[r.b]]), bh, m,
                                   rank, &sm.empty_bar[r.b]);
        else
            bwd_wg_write_ticket<D>(p, sm.dq_smem + r.b * BWD_TC_BM * D, bh, m, rank, &sm.empty_bar[r.b]);
    }
}

/* The same hand-off where the tile's place travels with the ticket (attn_vl.cu: the
 * writer may add a job's last tiles while the compute warps already run the next job, of
 * another sequence, whose params replaced the last one's). SM derives from bwd_wg_smem<D>
 * and adds `int64_t tile_at[BWD_WG_DQBUFS][2]`: the tile's counter as an index into
 * p.counter, its first float in p.dq_acc; the ticket's m is the tile's rows. */
template <int D, typename SM>
static __device__ __forceinline__ void bwd_wg_hand_at(SM &sm, const bwd_wg_regs<D> &x, bwd_wg_ring &r,
                                                      int64_t ctr_at, int64_t acc_at, int32_t rm, int32_t rank)
{
    {
        BWD_WG_T0();
        attn_mbar_wait(&sm.empty_bar[r.b], r.phase ^ 1u); /* b is free (at once the first time round) */
        if (threadIdx.x == 0)
            BWD_WG_TADD(BT_HAND);
    }
    bwd_tc_stage_dq<D, CUATTN_TC_BLOCK_N, true>(sm.dq_smem + r.b * BWD_TC_BM * D, x); /* then fences */
    if (threadIdx.x == 0) {
        sm.tile_at[r.b][0] = ctr_at;
        sm.tile_at[r.b][1] = acc_at;
    }
    bwd_wg_ticket<D>(sm, r, 0, rm, rank, 0);
}

template <int D, typename SM>
static __device__ __forceinline__ void bwd_wg_writer_at(const struct attn_bwd_params &p, SM &sm)
{
    for (bwd_wg_ring r = {0, 0u};; bwd_wg_ring_next<D>(r)) {
        BWD_WG_TLAP0();
        attn_mbar_wait(&sm.full_bar[r.b], r.phase); /* a ticket */
        BWD_WG_TLAP(BT_FULL);
        const int32_t rm = sm.ticket[r.b][1], rank = sm.ticket[r.b][2];
        if (sm.ticket[r.b][3])
            return;
        BWD_WG_TCOUNT(BT_TICKETS);
        int32_t *ctr = p.counter + sm.tile_at[r.b][0];
        if (rank >= 0)
            bwd_tc_take_turn(ctr, rank);
        BWD_WG_TLAP(BT_TURN);
        bwd_tc_bulk_add_to<D>(p.dq_acc + sm.tile_at[r.b][1], sm.dq_smem + r.b * BWD_TC_BM * D, rm, rank == 0);
        bwd_tc_bulk_wait_read();
        attn_mbar_arrive(&sm.empty_bar[r.b]); /* free again */
        BWD_WG_TLAP(BT_READ);
        bwd_tc_pass_on(ctr, rank); /* performed, then passed on (atomic: performed) */
        BWD_WG_TLAP(BT_PERFORM);
    }
}
#endif

/* ---- BWD_WG_PAIR64: head dim 64, a pair of q-tiles a step ---------------------------------
 *
 * At head dim 64 a step of the kernels above is short (its five products are half of
 * 128's), and every change that moved work around inside it measured slower there
 * (the transposed step -2 to -5%, stage barriers -6 to -9%, a late prefetch -3%: bench/
 * results/gpu-bwd-rs-2026-12-03.md, gpu-bwd-stagebars-2026-12-03.md); its m64n64 products
 * with both operands in shared memory, and dQ's m64n32, read about as many bytes of shared
 * memory as the tensor cores need cycles (../shared/docs/hopper.md), and 0.68-0.76 of
 * cuDNN's non-deterministic backward is where it stands. FA3 runs 128 q rows a step at
 * 64. Here the schedules, ranks, dQ tiles and hand-off stay as they are (64-row q-tiles):
 * the persistent kernel takes the unit's steps two at a time, tiles a and b (the unit's
 * next two q-tiles in its order; b none at an odd end):
 *   S^T, dP^T (128 x 128): warpgroup wg forms its kv rows 64 wg .. over both tiles' 128 q
 *                      rows (m64n128, k = d: the pair's Q and dO tiles are one 128-row
 *                      K-major operand);
 *   dV, dK (128 x 64): the same rows, A = P^T and dS^T from registers (RS), k = the 128
 *                      q rows (tile a's 64, then b's: the k16 slices main adds in two
 *                      steps, in the same order into the same accumulators);
 *   dQp (64 x 64):     warpgroup 0 forms tile a's, warpgroup 1 tile b's (m64n64, k = j),
 *                      dS read MN-major from the pair's transposed dS tiles;
 * and each warpgroup hands its own tile to the writer (staging buffer wg, a ticket each,
 * in the unit's order: the writer takes a's turn before b's, as main does). Every element
 * is the same chain of the same products as main's step, so the bits must equal main's.
 * Per pair the products read ~112 KiB of shared memory for twice the work of main's
 * step's ~88 (per warpgroup), and the step's fixed costs (barriers, waits, the hand-off's
 * mbarriers, the prefetch's latency) come once per two tiles.
 * H200, one A/B against the one-tile step (bench/results/pair64-trial-2026-12-05.md): the
 * same bits (dQ, dK, dV digests, and gpu_attn's persistent-against-interleaved grids);
 * deterministic backward +15% (1k full), +19.8% (4k full), +18.5% (4k causal), +22% (16k
 * causal); racecheck and synccheck clean. BWD_WG_PAIR64=0 builds the one-tile step for an
 * A/B. */
#ifndef BWD_WG_PAIR64
#define BWD_WG_PAIR64 1
#endif
#if BWD_WG_PAIR64
struct bwd_wg_smem_pair {
    static constexpr bool swizzled = true;
    static constexpr bool writer = true;
    uint16_t k_smem[CUATTN_TC_BLOCK_N * 64];        /* (128, 64) K of the unit, swizzled */
    uint16_t v_smem[CUATTN_TC_BLOCK_N * 64];        /* (128, 64) V */
    uint16_t q_smem[2][2 * BWD_TC_BM * 64];         /* (2 stages, 128, 64): tile a's Q rows, then b's */
    uint16_t dout_smem[2][2 * BWD_TC_BM * 64];      /* (2 stages, 128, 64) dO likewise */
    uint16_t dst_smem[2][2][CUATTN_TC_BLOCK_N * 64]; /* (2 in turn, tile a | b, 128 kv, 64 q) dS^T */
    float dq_smem[2][BWD_TC_BM * 64];               /* warpgroup w's dQ partial in buffer w */
    float lse_smem[2][2 * BWD_TC_BM];               /* (2 stages, 128): tile a's rows, then b's */
    float dsum_smem[2][2 * BWD_TC_BM];
    int32_t visit_smem[BWD_TC_TAB + 1];
    int32_t rank_smem[BWD_TC_TAB + 1];
    int32_t flag_smem;
    struct sched_job job_smem; /* the job taken: thread 0 writes it between the job's barrier and
                                  its first unit's, and every thread reads it from here, so that
                                  its fields are not kept in registers across the pairs */
    int32_t wait_end_smem;     /* its drain bound (thread 0's alone, likewise) */
    int32_t ticket[2][4];  /* warpgroup w -> writer: bh, m (-1: no tile), rank (-1 atomic), 1 at the end */
    uint64_t full_bar[2];  /* buffer w holds a ticket (warpgroup w's 128 arrivals) */
    uint64_t empty_bar[2]; /* buffer w is free again (the writer's one arrival) */
    uint64_t q_full[2];    /* stage b's Q, dO, LSE, Dsum have landed */
};
static_assert(offsetof(bwd_wg_smem_pair, v_smem) % 1024 == 0 && offsetof(bwd_wg_smem_pair, q_smem) % 1024 == 0 &&
                  offsetof(bwd_wg_smem_pair, dout_smem) % 1024 == 0 &&
                  offsetof(bwd_wg_smem_pair, dst_smem) % 1024 == 0 && offsetof(bwd_wg_smem_pair, dq_smem) % 1024 == 0,
              "the pair's tiles start on 1024-byte boundaries");

/* Thread 0, before the warps part: the barriers; a CTA-wide barrier must follow. */
#if BWD_TC_BULK
static __device__ __forceinline__ void bwd_wg_pair_init(bwd_wg_smem_pair &sm)
{
    for (int32_t b = 0; b < 2; b++) {
        attn_mbar_init(&sm.full_bar[b], 128);
        attn_mbar_init(&sm.empty_bar[b], 1);
        attn_mbar_init(&sm.q_full[b], 2 * ATTN_THREADS); /* every thread's cp.async, then its arrival */
    }
}
#endif

/* Start loading the pair (q-tiles ma and mb of head bh; mb < 0: none, zeros) into stage
 * buf, tracked by q_full[buf] as bwd_wg_load_q_mb tracks a tile: Q and dO by TMA where the
 * maps encode (rows past Sq land as zeros), else by cp.async; LSE and Dsum by cp.async
 * (+inf and 0 past the rows). */
static __device__ __forceinline__ void bwd_wg_pair_load(const struct attn_bwd_params &p, bwd_wg_smem_pair &sm,
                                                        int32_t buf, int32_t bh, int32_t ma, int32_t mb,
                                                        const bwd_wg_qmaps *qm)
{
#if BWD_TC_BULK
    const int32_t tid = threadIdx.x, b = bh / p.heads_q, h = bh - b * p.heads_q;
    const bool tma = qm && qm->ok;
    if (!tma) {
#pragma unroll
        for (int32_t t = 0; t < 2; t++) {
            const int32_t m = t ? mb : ma, i0 = m >= 0 ? m * BWD_TC_BM : 0;
            const int32_t rm = m < 0 ? 0 : p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
            bwd_tc_load_tile<64, BWD_TC_BM, true>(sm.q_smem[buf] + t * BWD_TC_BM * 64,
                                                  static_cast<const uint16_t *>(p.q),
                                                  b * p.q_stride[0] + (int64_t)i0 * p.q_stride[1] + h * p.q_stride[2],
                                                  p.q_stride[1], rm);
            bwd_tc_load_tile<64, BWD_TC_BM, true>(
                sm.dout_smem[buf] + t * BWD_TC_BM * 64, static_cast<const uint16_t *>(p.dout),
                b * p.dout_stride[0] + (int64_t)i0 * p.dout_stride[1] + h * p.dout_stride[2], p.dout_stride[1], rm);
        }
    } else if (mb < 0) { /* no tile b: its Q and dO are zeros (8 KiB each) */
        uint4 *zq = reinterpret_cast<uint4 *>(sm.q_smem[buf] + BWD_TC_BM * 64);
        uint4 *zd = reinterpret_cast<uint4 *>(sm.dout_smem[buf] + BWD_TC_BM * 64);
#pragma unroll
        for (int32_t k = 0; k < BWD_TC_BM * 64 * 2 / 16; k += ATTN_THREADS) {
            zq[k + tid] = make_uint4(0u, 0u, 0u, 0u);
            zd[k + tid] = make_uint4(0u, 0u, 0u, 0u);
        }
        /* the writers' own fence, before their arrival: wgmma reads the zeros through the
         * async proxy */
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    if (tid < 2 * BWD_TC_BM) { /* row tid % 64 of tile a (tid < 64) or b */
        const int32_t m = tid < BWD_TC_BM ? ma : mb, i = m * BWD_TC_BM + (tid & (BWD_TC_BM - 1));
        if (m >= 0 && i < p.seqlen_q) {
            const int64_t row = (int64_t)bh * p.seqlen_q + i;
            attn_cp_async4(&sm.lse_smem[buf][tid], p.lse + row);
            attn_cp_async4(&sm.dsum_smem[buf][tid], p.dsum + row);
        } else {
            sm.lse_smem[buf][tid] = INFINITY;
            sm.dsum_smem[buf][tid] = 0.0f;
        }
    }
    attn_cp_async_commit();
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(attn_smem_u32(&sm.q_full[buf]))
                 : "memory");
    if (tma && tid == 0) { /* its second arrival carries the bytes; then the boxes */
        attn_mbar_expect_tx(&sm.q_full[buf], (mb >= 0 ? 2 : 1) * 2 * BWD_TC_BM * 64 * 2);
#pragma unroll
        for (int32_t t = 0; t < 2; t++) {
            const int32_t m = t ? mb : ma;
            if (m >= 0) {
                attn_tma_load_4d(sm.q_smem[buf] + t * BWD_TC_BM * 64, &qm->q, &sm.q_full[buf], 0, m * BWD_TC_BM, h, b);
                attn_tma_load_4d(sm.dout_smem[buf] + t * BWD_TC_BM * 64, &qm->dout, &sm.q_full[buf], 0,
                                 m * BWD_TC_BM, h, b);
            }
        }
    } else {
        attn_mbar_arrive(&sm.q_full[buf]);
    }
#else
    (void)p, (void)sm, (void)buf, (void)bh, (void)ma, (void)mb, (void)qm;
    __trap();
#endif
}

#if ATTN_WGMMA
/* The pair's P and dS: bwd_wg_pds_t's arithmetic over the warpgroup's S^T and dP^T (64 kv
 * rows 64 wg .. x 128 q columns: column c is row c % 64 of tile c / 64, i0[t] its first
 * row, rm[t] its rows (0: no tile)); P^T and dS^T packed as the A fragments of dV and dK
 * (k16 slice kk: pairs 4 kk .. 4 kk + 3), dS^T also stored as tile t's (128 kv, 64 q)
 * swizzled tile ds_t[t] for dQ. */
template <typename DT, bool MASK>
static __device__ __forceinline__ void bwd_wg_pair_pds(const struct attn_bwd_params &p, uint16_t *ds_a, uint16_t *ds_b,
                                                       const float *lse_smem, const float *dsum_smem, float (&s)[64],
                                                       float (&dp)[64], uint32_t (&pt)[32], uint32_t (&dst)[32],
                                                       int32_t wg, const int32_t (&i0)[2], const int32_t (&rm)[2],
                                                       int32_t j0, int32_t rn)
{
    const float scale2 = __fmul_rn(p.scale, ATTN_LOG2E);
    /* the thread's index through an empty asm (bwd_tc_stage_dq's FRESH): its rows, columns
     * and store offsets are formed here, not kept from the kernel's start */
    uint32_t tid = threadIdx.x;
    asm volatile("" : "+r"(tid));
    const int32_t lane = tid & 31, wi = (tid >> 5) & 3, t4 = lane & 3, g = lane >> 2;
    /* tile t, row half h: visible where lo <= c % 64 < hi, less the thread's 2 t4 here, so
     * that element e compares the constant part of its column, (8 (e / 4) + e % 2) % 64,
     * instead of 16 column indices kept in registers across the exponentials */
    int32_t lo[2][2], hi[2][2];
    if constexpr (MASK) {
        /* 32-bit: |i0 - j0 + Sk - Sq| < 2^31 for every length the problem check admits */
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const int32_t base = i0[t] + (p.seqlen_k - p.seqlen_q) - j0;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int32_t j = 64 * wg + 16 * wi + g + 8 * h;
                int32_t l = 0, u = rm[t];
                if (p.s.mask == SCHED_MASK_CAUSAL && j - base > l)
                    l = j - base;
                if (j >= rn || u < l)
                    u = l;
                lo[t][h] = (l < BWD_TC_BM ? l : BWD_TC_BM) - 2 * t4;
                hi[t][h] = u - 2 * t4;
            }
        }
    }
    /* (the empty asm statements keep ptxas from loading every column's LSE or Dsum ahead
     * of the loop: 32 registers more at the peak, and spills) */
    const float *lse_t = lse_smem + 2 * t4, *dsum_t = dsum_smem + 2 * t4; /* column 8 k + 2 t4 (+1) */
#pragma unroll
    for (int e = 0; e < 64; e++) {
        const int h = (e >> 1) & 1, t = e >> 5, c = 8 * (e >> 2) + (e & 1), cc = c & (BWD_TC_BM - 1);
        const float pr = attn_ex2(fmaf(s[e], scale2, -__fmul_rn(lse_t[c], ATTN_LOG2E)));
        s[e] = !MASK || (cc >= lo[t][h] && cc < hi[t][h]) ? pr : 0.0f;
    }
    attn_wg_wait<0>(); /* dP^T has landed */
    attn_wg_pin<64>(dp);
#pragma unroll
    for (int e = 0; e < 64; e++)
        dp[e] = __fmul_rn(s[e], __fsub_rn(dp[e], dsum_t[8 * (e >> 2) + (e & 1)])); /* 0 where P is */
    /* dS^T's stores: row r = 64 wg + 16 wi + g + 8 h of tile t's (128, 64) swizzled tile,
     * 16-byte chunk k ^ (r % 8) (r % 8 = g), 4 t4 bytes into it */
    unsigned char *row_at[2] = {reinterpret_cast<unsigned char *>(ds_a) + (64 * wg + 16 * wi + g) * 128 + 4 * t4,
                                reinterpret_cast<unsigned char *>(ds_b) + (64 * wg + 16 * wi + g) * 128 + 4 * t4};
#pragma unroll
    for (int e = 0; e < 64; e += 2) {
        pt[e / 2] = DT::pack2(s[e], s[e + 1]);
        dst[e / 2] = DT::pack2(dp[e], dp[e + 1]);
        const int h = (e >> 1) & 1, k = (e >> 2) & 7;
        *reinterpret_cast<uint32_t *>(row_at[e >> 5] + 8 * 128 * h + ((k ^ g) << 4)) = dst[e / 2];
    }
}
#endif

/* One pair step (above) of unit n of head bh: the visit table's tiles at, at + 1 (of the
 * `left` steps left: none past them) in stage buf (loaded by the last pair, but for the
 * unit's first pair: here, where the stage's barrier also tracks the unit's K and V, whose
 * copies the caller issued and did not wait for: bwd_wg_pair_persistent), the next pair
 * prefetched into buf ^ 1 after the dS barrier, dS^T through dst_smem[dsb]. dK, dV
 * accumulate in x; dq gets this warpgroup's tile's partial (a for 0, b for 1). On return
 * every product has landed. */
template <typename DT>
static __device__ __forceinline__ void bwd_wg_pair_step(const struct attn_bwd_params &p, bwd_wg_smem_pair &sm,
                                                        bwd_wg_regs<64> &x, float (&dq)[32], int32_t bh, int32_t n,
                                                        int32_t at, int32_t left, bool first, int32_t buf,
                                                        uint32_t &qph, int32_t dsb, const bwd_wg_qmaps *qm)
{
#if ATTN_WGMMA
    constexpr int32_t BN = CUATTN_TC_BLOCK_N;
    const int32_t tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0); /* uniform: see bwd_tc_step */
    /* the pair's tiles from the visit table (entry at, `left` steps from there on); the
     * next pair's are read where its prefetch starts */
    const int32_t ma = sm.visit_smem[at], mb = left > 1 ? sm.visit_smem[at + 1] : -1;
    int32_t i0[2], rm[2];
#pragma unroll
    for (int t = 0; t < 2; t++) {
        const int32_t m = t ? mb : ma;
        i0[t] = m >= 0 ? m * BWD_TC_BM : 0;
        rm[t] = m < 0 ? 0 : p.seqlen_q - i0[t] < BWD_TC_BM ? p.seqlen_q - i0[t] : BWD_TC_BM;
    }
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;
    if (first) /* the unit's first pair: not prefetched (q_full also tracks K and V then) */
        bwd_wg_pair_load(p, sm, buf, bh, ma, mb, qm);
    attn_mbar_wait(&sm.q_full[buf], (qph >> buf) & 1u); /* bwd_wg_wait_q */
    qph ^= 1u << buf;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    const uint16_t *q_s = sm.q_smem[buf], *do_s = sm.dout_smem[buf];

    /* S^T = K Q^T, then dP^T = V dO^T (d ascending): two groups in flight */
    float s[64], dp[64];
    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < 64 / 16; kk++)
        attn_wg_mma<DT, 2 * BWD_TC_BM, 0, 0>(s, attn_wg_kmajor(sm.k_smem, BN, 64 * wg, 16 * kk),
                                             attn_wg_kmajor(q_s, 2 * BWD_TC_BM, 0, 16 * kk), kk > 0);
    attn_wg_commit();
#pragma unroll
    for (int32_t kk = 0; kk < 64 / 16; kk++)
        attn_wg_mma<DT, 2 * BWD_TC_BM, 0, 0>(dp, attn_wg_kmajor(sm.v_smem, BN, 64 * wg, 16 * kk),
                                             attn_wg_kmajor(do_s, 2 * BWD_TC_BM, 0, 16 * kk), kk > 0);
    attn_wg_commit();
    attn_wg_wait<1>(); /* S^T has landed; dP^T may still be running */
    attn_wg_pin<64>(s);

    uint32_t pt[32], dst[32];
    {
        const int64_t off = (int64_t)p.seqlen_k - p.seqlen_q - j0;
        const bool whole = rm[0] == BWD_TC_BM && rm[1] == BWD_TC_BM && rn == BN &&
                           (p.s.mask != SCHED_MASK_CAUSAL || (i0[0] + off >= BN - 1 && i0[1] + off >= BN - 1));
        uint16_t *ds_a = sm.dst_smem[dsb][0], *ds_b = sm.dst_smem[dsb][1];
        if (whole)
            bwd_wg_pair_pds<DT, false>(p, ds_a, ds_b, sm.lse_smem[buf], sm.dsum_smem[buf], s, dp, pt, dst, wg, i0, rm,
                                       j0, rn);
        else
            bwd_wg_pair_pds<DT, true>(p, ds_a, ds_b, sm.lse_smem[buf], sm.dsum_smem[buf], s, dp, pt, dst, wg, i0, rm,
                                      j0, rn);
    }
    /* dV += P^T dO, dK += dS^T Q over the pair's 128 q rows (i ascending) */
    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < 2 * BWD_TC_BM / 16; kk++) {
        const uint32_t a[4] = {pt[4 * kk], pt[4 * kk + 1], pt[4 * kk + 2], pt[4 * kk + 3]};
        attn_wg_mma_rs<DT, 64, 1>(x.dv_reg, a, attn_wg_mnmajor(do_s, 2 * BWD_TC_BM, 16 * kk, 0), 1);
    }
#pragma unroll
    for (int32_t kk = 0; kk < 2 * BWD_TC_BM / 16; kk++) {
        const uint32_t a[4] = {dst[4 * kk], dst[4 * kk + 1], dst[4 * kk + 2], dst[4 * kk + 3]};
        attn_wg_mma_rs<DT, 64, 1>(x.dk_reg, a, attn_wg_mnmajor(q_s, 2 * BWD_TC_BM, 16 * kk, 0), 1);
    }
    attn_wg_commit();
    bwd_tc_async_visible<true>();
    bwd_cta_sync<true>(); /* dS^T is complete before dQ reads it; both warpgroups have finished
                             the last pair, so stage buf ^ 1 and the other dS^T tiles are free */
    if (left > 2)
        bwd_wg_pair_load(p, sm, buf ^ 1, bh, sm.visit_smem[at + 2], left > 3 ? sm.visit_smem[at + 3] : -1, qm);

    /* dQp of the warpgroup's tile = dS K (j ascending) */
    attn_wg_fence();
    const uint16_t *ds_w = sm.dst_smem[dsb][wg];
#pragma unroll
    for (int32_t kk = 0; kk < BN / 16; kk++)
        attn_wg_mma<DT, 64, 1, 1>(dq, attn_wg_mnmajor(ds_w, BN, 16 * kk, 0), attn_wg_mnmajor(sm.k_smem, BN, 16 * kk, 0),
                                  kk > 0);
    attn_wg_commit();
    attn_wg_wait<0>();
    attn_wg_pin<32>(x.dv_reg);
    attn_wg_pin<32>(x.dk_reg);
    attn_wg_pin<32>(dq);
    attn_wg_pin<32>(pt); /* the RS products read them until the wait */
    attn_wg_pin<32>(dst);
#else
    (void)p, (void)sm, (void)x, (void)dq, (void)bh, (void)n, (void)at, (void)left, (void)first, (void)buf;
    (void)qph, (void)dsb, (void)qm;
    __trap();
#endif
}

#if BWD_TC_BULK
/* Compute warps: hand the warpgroup's tile m (-1: none) of head bh (rank; -1 for atomic)
 * to the writer in buffer wg, once the writer has read the last pair's (phase hph). */
static __device__ __forceinline__ void bwd_wg_pair_hand(bwd_wg_smem_pair &sm, const float (&dq)[32], uint32_t hph,
                                                        int32_t bh, int32_t m, int32_t rank, int32_t end)
{
    const int32_t w = threadIdx.x >> 7;
    attn_mbar_wait(&sm.empty_bar[w], hph ^ 1u); /* free (at once the first time round) */
    if (m >= 0 && !end) {
        /* bwd_tc_stage_dq's layout, all 64 columns, its addresses formed here (FRESH) */
        uint32_t tid = threadIdx.x;
        asm volatile("" : "+r"(tid));
        const int32_t lane = tid & 31, wi = (tid >> 5) & 3;
        float *to = sm.dq_smem[w];
#pragma unroll
        for (int e = 0; e < 32; e += 2) {
            const int32_t i = 16 * wi + (lane >> 2) + 8 * ((e >> 1) & 1), d = 8 * (e >> 2) + 2 * (lane & 3);
            *reinterpret_cast<float2 *>(to + i * 64 + bwd_tc_dq_at(i, d)) = make_float2(dq[e], dq[e + 1]);
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    if ((threadIdx.x & 127) == 0) {
        sm.ticket[w][0] = bh;
        sm.ticket[w][1] = m;
        sm.ticket[w][2] = rank;
        sm.ticket[w][3] = end;
    }
    attn_mbar_arrive(&sm.full_bar[w]);
}

/* Thread 0: wait until the writer has taken the turn of every ticket handed so far
 * (bwd_wg_drain's rule; hph: the phase of the next pair). */
static __device__ __forceinline__ void bwd_wg_pair_drain(bwd_wg_smem_pair &sm, uint32_t hph)
{
    attn_mbar_wait(&sm.empty_bar[0], hph ^ 1u);
    attn_mbar_wait(&sm.empty_bar[1], hph ^ 1u);
}

/* The end of a unit (kv-tile n of head bh), all 256 compute threads, once both warpgroups
 * have handed the unit's last pair over: dK and dV out by TMA stores staged in dS^T set
 * `set` (bwd_wg_store_unit_tma's PAIR_LAP: a barrier behind every product of the last
 * pair, then the staging; nobody waits for the stores' read here), or where those do not
 * serve (GQA's fp32 sums, views without maps) by bwd_tc_store_unit's stores from
 * registers. The next unit's loads come after a barrier the caller passes first
 * (bwd_wg_pair_persistent). */
template <typename DT>
static __device__ __forceinline__ void bwd_wg_pair_store(const struct attn_bwd_params &p, bwd_wg_smem_pair &sm,
                                                         const bwd_wg_regs<64> &x, int32_t bh, int32_t n,
                                                         const bwd_wg_qmaps *qm, int32_t set)
{
    constexpr int32_t BN = CUATTN_TC_BLOCK_N;
    if (bwd_wg_dkv_tma<BN, true>(p, qm, n, nullptr)) {
        bwd_wg_store_unit_tma<DT, 64, BN, true, bwd_wg_smem_pair, true /* PAIR_LAP */>(p, sm, x, bh, n, qm, nullptr,
                                                                                       set);
        return;
    }
    bwd_tc_store_unit<DT, 64, BN, true>(p, x, bh, n);
}

/* The writer (one thread): buffer 0's ticket, then 1's, pair after pair, until the end;
 * bwd_wg_writer's turn, reduction and pass-on for each tile. */
static __device__ __forceinline__ void bwd_wg_pair_writer(const struct attn_bwd_params &p, bwd_wg_smem_pair &sm)
{
    for (uint32_t ph = 0;; ph ^= 1u)
        for (int32_t w = 0; w < 2; w++) {
            BWD_WG_TLAP0();
            attn_mbar_wait(&sm.full_bar[w], ph); /* a ticket */
            BWD_WG_TLAP(BT_FULL);
            const int32_t bh = sm.ticket[w][0], m = sm.ticket[w][1], rank = sm.ticket[w][2];
            if (sm.ticket[w][3])
                return;
            if (m < 0) { /* an odd end: no tile b */
                attn_mbar_arrive(&sm.empty_bar[w]);
                continue;
            }
            BWD_WG_TCOUNT(BT_TICKETS);
            bwd_wg_write_ticket<64>(p, sm.dq_smem[w], bh, m, rank, &sm.empty_bar[w]);
        }
}
#endif
#endif /* BWD_WG_PAIR64 */

#endif
