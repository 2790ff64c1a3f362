// SPDX-License-Identifier: BSD-3-Clause
/*
 * fwd_wg.cuh - v3's forward (attn_fwd_wg.cu describes it: roles, rings, overlap, turns,
 * determinism): its shared memory, producers, online softmax, consumers and the work of
 * one CTA, as templates. attn_fwd_wg.cu instantiates the dense kernel (VL false) and owns
 * the host side (tensor maps, launch); attn_vl.cu the kernel for sliding windows, softcap
 * and packed batches (VL true), whose CTA first finds its sequence in the table. The dense
 * instantiation is the code it was before the VL branches existed (every VL branch is
 * `if constexpr`).
 *
 * VL: the CTA's params describe its sequence alone (a batch of 1 whose tensors start at its
 * first rows, LSE rows lse_stride apart); row i (of the sequence) sees key j iff
 * j <= i + off + wr (wr >= 0) and j >= i + off - wl (wl >= 0), off = seqlen_k - seqlen_q,
 * (wl, wr) the sequence's normalised window (its geo); the kv-tiles run from the one that
 * holds the first row's first key to the one that holds the last row's last key (128-key
 * tiles on the sequence's own grid, so a sequence's bits do not depend on what it is packed
 * with). With a softcap the base-2 score is cap2 tanh(capsc q.k), cap2 = cap log2(e),
 * capsc = scale / cap (as v2's VL forward, fwd_tc.cuh).
 */
#ifndef DASH_KERNELS_CUDA_FWD_WG_CUH
#define DASH_KERNELS_CUDA_FWD_WG_CUH

#include "kernels/cuda/attn_cuda_int.h"
#include "kernels/cuda/attn_wgmma.h"

#include <cuda.h> /* CUtensorMap and its enums only: the encoder comes through the runtime */
#include <math.h>
#include <stddef.h>

#define FWD_WG_BM 128 /* q rows per CTA: two consumer warpgroups of 64 */
/* Consumer warpgroups of the dense kernel at head dim D (the window/packed kernel has 2):
 * NC x 64 q rows a tile, 128 (NC + 1) threads. Three at head dim 64, FA3's 192-row tiles
 * there, where a tile's two softmaxes take as long on the MUFU as its products on the
 * tensor cores; a row's arithmetic does not depend on the tile's rows, so neither do the
 * bits. H200, one A/B against two (the same bits): forward +8.5% at 4k full, +5.3% at 16k
 * causal, +1.2% at 4k causal, -0.6% (noise) at 1k full; gpu_attn_fwd, racecheck and
 * synccheck clean (bench/results/nc3-trial-2026-12-04.md). FWD_WG_NC64=2 builds the
 * two-consumer kernel at 64 for an A/B. */
#ifndef FWD_WG_NC64
#define FWD_WG_NC64 3
#endif
#define FWD_WG_NC_OF(D) ((D) == 64 ? FWD_WG_NC64 : 2)
/* At head dim 64 under a causal mask, q-tiles of 192 rows against kv-tiles of 128 keys
 * compute more masked-out products than 128-row ones - of the products a head's tiles run,
 * the causal half is 67% at 1k (192 rows) against 89% (128), 85% / 94% at 2k, 89% / 97% at
 * 4k - which at short sequences outweighs the third consumer's gain. So up to
 * FWD_WG_NC2_CAUSAL_MAX query rows a causal forward at 64 runs the two-consumer kernel; the
 * bits are the same (a row's arithmetic does not depend on the tile's rows). H100, one A/B
 * against three consumers everywhere (the same bits): 1k causal +20.2%, 2k +13.5%; 4k causal
 * and 1k full run the same kernel as before (-0.3%, -0.6%: noise); gpu_attn_fwd, racecheck
 * and synccheck clean (bench/results/nc2causal-trial-2026-12-06.md). */
#ifndef FWD_WG_NC2_CAUSAL_MAX /* (-DFWD_WG_NC2_CAUSAL_MAX=0: three everywhere, for an A/B) */
#define FWD_WG_NC2_CAUSAL_MAX 2048
#endif
#define FWD_WG_THREADS_OF(NC) (128 * ((NC) + 1))
/* Keys per kv-tile: 128, and 64 at head dim 256, where a consumer thread's O takes 128
 * registers (S then takes 32, P 16) and two stages of 128-key K and V tiles (256 KiB)
 * would not fit shared memory (at 64: Q 64 KiB + K, V 2 x 2 x 32 KiB). 80 (FA3's choice
 * at 256; 226 KiB) ran 4-5% faster at 4k and 16k but its TMA consumers spilled 8 bytes
 * at every register split (bench/results/gpu-fwd256-9372e03-2026-12-02.md). The VL
 * kernel (head dims 64, 128) has 128. */
#define FWD_WG_BN_OF(D) ((D) > 128 ? 64 : 128)
#define FWD_WG_THREADS 384
#define FWD_WG_STAGES 2
#define FWD_WG_ALIGN 1024 /* the 128-byte swizzle is a function of address bits */
/* Registers a thread, producer / consumers: 128 x 56 + 256 x 224 (cp.async) and
 * 128 x 32 + 256 x 232 (TMA: two threads issue), within 64,512, the pool of 384 threads at
 * the 168 that __launch_bounds__(384, 1) gives. (TMA had 24 / 240 until the causal pairs'
 * walk, whose state spilled 16 bytes in the producer at 24; nvcc 13.0.) */
#define FWD_WG_LOAD_REGS_CP 56
#define FWD_WG_MMA_REGS_CP 224
#define FWD_WG_LOAD_REGS_TMA 32
#define FWD_WG_MMA_REGS_TMA 232
/* VL with cp.async (packed batches): the window and softcap terms cost the consumers
 * registers; at head dim 128 ptxas reports 232/252 bytes of spills at 56 / 224, 64/56 at
 * 40 / 232 and 40/40 at 24 / 240 with the producer's copy loops unrolled, none at 24 / 240
 * with them rolled (fwd_wg_produce's ROLLED; nvcc 13.0) */
#define FWD_WG_LOAD_REGS_CP_VL 24
#define FWD_WG_MMA_REGS_CP_VL 240
/* VL with TMA keeps 24 / 240: its consumers spill 80 bytes at 232, and its one-tile
 * producer fits 24 */
#define FWD_WG_LOAD_REGS_TMA_VL 24
#define FWD_WG_MMA_REGS_TMA_VL 240
/* Three consumers (512 threads, a pool of 128 a thread at __launch_bounds__(512, 1)) */
#define FWD_WG_LOAD_REGS_CP3 32 /* its copy loops rolled, as the window/packed kernel's */
#define FWD_WG_MMA_REGS_CP3 160
#define FWD_WG_LOAD_REGS_TMA3 32
#define FWD_WG_MMA_REGS_TMA3 160
static_assert(128 * FWD_WG_LOAD_REGS_CP3 + 384 * FWD_WG_MMA_REGS_CP3 <= 128 * 512 &&
                  128 * FWD_WG_LOAD_REGS_TMA3 + 384 * FWD_WG_MMA_REGS_TMA3 <= 128 * 512,
              "setmaxnreg stays within the 512-thread launch's register pool");
static_assert(128 * FWD_WG_LOAD_REGS_CP + 256 * FWD_WG_MMA_REGS_CP <= 168 * FWD_WG_THREADS &&
                  128 * FWD_WG_LOAD_REGS_CP_VL + 256 * FWD_WG_MMA_REGS_CP_VL <= 168 * FWD_WG_THREADS &&
                  128 * FWD_WG_LOAD_REGS_TMA + 256 * FWD_WG_MMA_REGS_TMA <= 168 * FWD_WG_THREADS &&
                  128 * FWD_WG_LOAD_REGS_TMA_VL + 256 * FWD_WG_MMA_REGS_TMA_VL <= 168 * FWD_WG_THREADS,
              "setmaxnreg stays within the launch's register pool");
/* TMA boxes: 64 columns (128 bytes, the swizzle's span) x a tile's rows (Q: FWD_WG_BM, K
 * and V: FWD_WG_BN_OF(D)), D/64 of them a tile */
#define FWD_WG_BOX_COLS 64
/* Ping-pong (step F3, FA3's "warp scheduler barriers"): at head dim D the consumers take
 * turns issuing their products (named barriers, each consumer waiting for the one before it
 * to have issued) only where FWD_WG_TURNS(D); elsewhere they issue as they please. The bits
 * are the same either way (the order of issue changes no arithmetic). Without turns, on an
 * H100 against turns everywhere: +12% at head dim 64 4k full, +16% at 64 16k causal, +2.2%
 * at 64 1k causal, +2.0% at 128 4k full, +2.7% at 128 16k causal (ncu at 64 had put their
 * barrier stalls at 1.04 per issued instruction; bench/results/device-session-2026-12-06d.md,
 * trial nopp). At 256 the turns stay: without them ptxas spills 8-56 bytes in its consumers
 * (nvcc 13.0), and that head dim was not measured. */
#define FWD_WG_TURNS(D) ((D) == 256)
/* Named barriers 1 .. NC (0 is __syncthreads): consumer c's turn is barrier 1 + c. */
#define FWD_WG_TURN_BAR 1
/* Persistent scheduler (step F4's), dense kernel: a CTA takes q-tiles in turn (rounds of
 * gridDim.x tiles, one a CTA, heaviest first as fwd_wg_tile_of numbers them; under a full
 * mask the round turned so that the light last tiles of a head go round the CTAs,
 * fwd_wg_walk), its K/V rings
 * and their phases running on across tiles, and the next tile's Q loading once the
 * consumers' last S product has read this one's (q_empty), while they still rescale and
 * store. A row's arithmetic does not depend on which CTA runs it, so the bits are those of
 * a CTA a tile. The launch (attn_cuda.cu's fwd_ctas) gives
 * every dense mask one CTA an SM (full: +1-10% over a CTA a tile on the H200,
 * bench/results/gpu-h200-7c31afe-2026-12-02.md). Under a causal mask the tiles' work is
 * uneven (q-tile k of M sees k + 1 kv-tiles), and taking them in turn ran 6-7% slower than
 * a CTA a tile; so there a CTA takes jobs of two q-tiles of a head, the k-th heaviest then
 * the k-th lightest (M + 1 kv-tiles a job whatever k; the middle tile alone where M is
 * odd), jobs in turn (fwd_wg_walk): +2.6-9.5% over a CTA a tile
 * (bench/results/gpu-first-7487a13-2026-12-02.md). The VL kernel keeps a CTA a tile (it
 * reads its sequence from the table). */


template <int D, int NC = 2>
struct fwd_wg_smem {
    static constexpr int BN = FWD_WG_BN_OF(D);
    uint16_t q_smem[64 * NC * D];           /* (64 NC, D) Q, swizzled (attn_sw128) */
    uint16_t k_smem[FWD_WG_STAGES][BN * D]; /* (2, BN, D) K tiles */
    uint16_t v_smem[FWD_WG_STAGES][BN * D]; /* (2, BN, D) V tiles */
    /* TMA: 1 arrival (expect_tx) + the tile's bytes; cp.async: 64 arrivals, the loaders */
    uint64_t q_full;                 /* Q has landed */
    uint64_t k_full[FWD_WG_STAGES];  /* the stage's K tile has landed */
    uint64_t v_full[FWD_WG_STAGES];  /* the stage's V tile has landed */
    uint64_t k_empty[FWD_WG_STAGES]; /* the consumers are done with the stage's K (128 NC) */
    uint64_t v_empty[FWD_WG_STAGES]; /* ... with its V (128 NC) */
    uint64_t q_empty; /* ... with the tile's Q (128 NC; the persistent dense kernel) */
};
static_assert(sizeof(fwd_wg_smem<64>::q_smem) % 1024 == 0 && sizeof(fwd_wg_smem<64>::k_smem[0]) % 1024 == 0 &&
                  offsetof(fwd_wg_smem<64>, v_smem) % 1024 == 0 && offsetof(fwd_wg_smem<128>, v_smem) % 1024 == 0 &&
                  sizeof(fwd_wg_smem<256>::k_smem[0]) % 1024 == 0 && offsetof(fwd_wg_smem<256>, v_smem) % 1024 == 0,
              "every tile starts on a 1024-byte boundary");
static_assert(sizeof(fwd_wg_smem<64>::q_smem) == FWD_WG_BOX_COLS * FWD_WG_BM * 2 &&
                  sizeof(fwd_wg_smem<128>::k_smem[0]) == 2 * FWD_WG_BOX_COLS * 128 * 2 &&
                  sizeof(fwd_wg_smem<256>::q_smem) == 4 * FWD_WG_BOX_COLS * FWD_WG_BM * 2 &&
                  sizeof(fwd_wg_smem<256>::k_smem[0]) == 4 * FWD_WG_BOX_COLS * 64 * 2,
              "a Q, K or V tile is D/64 boxes exactly: the expect_tx count is the tile's size");
typedef fwd_wg_smem<64, 3> fwd_wg_smem_64_3;
static_assert(sizeof(fwd_wg_smem_64_3::q_smem) == FWD_WG_BOX_COLS * 192 * 2 &&
                  offsetof(fwd_wg_smem_64_3, k_smem) % 1024 == 0 && offsetof(fwd_wg_smem_64_3, v_smem) % 1024 == 0,
              "three consumers: Q is one 192-row box, every tile on a 1024-byte boundary");

/* The tensor maps of Q, K and V (TMA instances only; zeros for the others). */
struct fwd_wg_maps {
    CUtensorMap q, k, v;
};

template <int D, int NC = 2>
struct fwd_wg_kern {
    static constexpr size_t bytes = sizeof(fwd_wg_smem<D, NC>) + FWD_WG_ALIGN;
};

/* VL only: the sequence's window (wl, wr: -1 unbounded) and softcap terms (cap2 0: off). */
struct fwd_wg_vl {
    int32_t wl, wr;
    float cap2, capsc;
};

/* attn_fwd_wg.cu: the tensor maps of p's Q, K and V as (D, seqlen, heads, batch) views
 * (batch p->geo.batch), Q in boxes of q_rows (the kernel's q-tile: 64 x its consumers);
 * false where TMA cannot describe one (then the cp.async kernel). */
bool cuattn__fwd_wg_maps(fwd_wg_maps *maps, const struct attn_fwd_params *p, int32_t head_dim,
                         uint32_t q_rows = FWD_WG_BM);

#if ATTN_WGMMA
/* Ping-pong turns: consumer c waits for its turn (its barrier, which the previous
 * consumer's 128 threads arrive at once they have issued), issues, then hands the turn to
 * the next, c + 1 mod NC. */
template <int D, int NC = 2>
static __device__ __forceinline__ void fwd_wg_turn_wait(int32_t c)
{
    if constexpr (!FWD_WG_TURNS(D))
        return;
    if (c == 0) /* immediate ids: ptxas then reserves only the barriers used */
        asm volatile("bar.sync %0, 256;" ::"n"(FWD_WG_TURN_BAR) : "memory");
    else if (NC == 2 || c == 1)
        asm volatile("bar.sync %0, 256;" ::"n"(FWD_WG_TURN_BAR + 1) : "memory");
    else
        asm volatile("bar.sync %0, 256;" ::"n"(FWD_WG_TURN_BAR + 2) : "memory");
}
template <int D, int NC = 2>
static __device__ __forceinline__ void fwd_wg_turn_pass(int32_t c)
{
    if constexpr (!FWD_WG_TURNS(D))
        return;
    if (c == 0)
        asm volatile("bar.arrive %0, 256;" ::"n"(FWD_WG_TURN_BAR + 1) : "memory");
    else if (NC == 3 && c == 1)
        asm volatile("bar.arrive %0, 256;" ::"n"(FWD_WG_TURN_BAR + 2) : "memory");
    else
        asm volatile("bar.arrive %0, 256;" ::"n"(FWD_WG_TURN_BAR) : "memory");
}

/* The online-softmax update of one kv-tile for the thread's two rows (r = 0: row i[0],
 * r = 1: i[0] + 8), in place: S (raw scores) becomes P, m, l (this thread's partial sum)
 * advance, corr = 2^(m - m'). Accumulator element 4 j + e is row r = e / 2, column
 * 8 j + 2 t4 + e % 2. MASK: test each element against the q rows (rm), the keys (rn) and
 * the diagonal (row i sees key j <= diag + i, where `causal`), and with VL the window's left
 * side (j >= lo + i, where wl >= 0); false only where all are visible, where both versions
 * compute the same values. VL with a softcap: scores cap2 tanh(capsc S) in base 2. */
template <bool MASK, int BN, bool VL = false>
static __device__ __forceinline__ void fwd_wg_softmax(float (&s)[BN / 2], float (&m)[2], float (&l)[2],
                                                      float (&corr)[2], float scale2, int32_t i0w, int32_t t4,
                                                      int32_t rm, int32_t rn, int causal, int64_t diag,
                                                      int64_t lo = 0, const fwd_wg_vl *vt = NULL)
{
    float sc = scale2; /* the factor from S to base-2 scores */
    if constexpr (VL) {
        if (vt->cap2 > 0.0f) {
#pragma unroll
            for (int e = 0; e < BN / 2; e++)
                s[e] = __fmul_rn(tanhf(__fmul_rn(s[e], vt->capsc)), vt->cap2);
            sc = 1.0f; /* exact: x * 1 and fma(x, 1, -m) = x - m */
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int32_t lim = BN; /* columns first <= c < lim are visible */
        [[maybe_unused]] int32_t first = 0;
        if (MASK) {
            const int32_t i = i0w + 8 * r;
            int64_t end = rn;
            if (causal && diag + i + 1 < end)
                end = diag + i + 1;
            lim = i < rm ? (end > 0 ? (int32_t)end : 0) : 0;
            if constexpr (VL) {
                const int64_t f = lo + i;
                if (vt->wl >= 0 && f > 0)
                    first = f < BN ? (int32_t)f : BN;
            }
        }
        float tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float &x = s[4 * j + 2 * r + e];
                const int32_t col = 8 * j + 2 * t4 + e;
                if (MASK && (col >= lim || (VL && col < first)))
                    x = -INFINITY;
                tmax = fmaxf(tmax, x);
            }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
        /* sc > 0 (the API checks scale > 0): the max of the scaled scores is the scaled
         * max, rounding being monotone */
        const float mx = fmaxf(m[r], __fmul_rn(tmax, sc));
        float rsum = 0.0f;
        if (mx == -INFINITY) { /* the row has seen no key yet: nothing to add */
            corr[r] = 1.0f;
#pragma unroll
            for (int j = 0; j < BN / 8; j++) {
                s[4 * j + 2 * r] = 0.0f;
                s[4 * j + 2 * r + 1] = 0.0f;
            }
        } else {
            corr[r] = attn_ex2(__fsub_rn(m[r], mx)); /* 0 when m was -inf */
            const float nmx = -mx;
#pragma unroll
            for (int j = 0; j < BN / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float &x = s[4 * j + 2 * r + e];
                    x = attn_ex2(fmaf(x, sc, nmx)); /* masked: 2^-inf = 0 */
                    rsum = __fadd_rn(rsum, x);
                }
        }
        l[r] = fmaf(l[r], corr[r], rsum);
        m[r] = mx;
    }
}

/* Issue S = Q_c K^T over one kv-tile (SS wgmma m64nBNk16, d ascending), committed as
 * one group. */
template <typename DT, int D, int BN = FWD_WG_BN_OF(D), int NC = 2>
static __device__ __forceinline__ void fwd_wg_s(float (&s)[BN / 2], const uint16_t *q_s, const uint16_t *k_s,
                                                int32_t c)
{
    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < D / 16; kk++)
        attn_wg_mma<DT, BN, 0, 0>(s, attn_wg_kmajor(q_s, 64 * NC, 64 * c, 16 * kk),
                                  attn_wg_kmajor(k_s, BN, 0, 16 * kk), kk > 0);
    attn_wg_commit();
}

/* The softmax of kv-tile n for consumer c: masked where the tile hides some element of
 * the warpgroup's rows (diagonal, window, ragged ends), unmasked elsewhere. */
template <bool VL, int BN>
static __device__ __forceinline__ void fwd_wg_softmax_tile(const struct attn_fwd_params &p, float (&s)[BN / 2],
                                                           float (&m)[2], float (&l)[2], float (&corr)[2],
                                                           float scale2, int32_t i0, int32_t i0w, int32_t t4,
                                                           int32_t rm, int32_t n, int32_t c, const fwd_wg_vl &vt)
{
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;
    const int64_t off = (int64_t)p.seqlen_k - p.seqlen_q;
    if constexpr (VL) {
        /* row i sees key j0 + j with j <= diag + i (wr >= 0) and j >= lo + i (wl >= 0) */
        const int64_t diag = (int64_t)i0 + off + (vt.wr > 0 ? vt.wr : 0) - j0;
        const int64_t lo = (int64_t)i0 + off - vt.wl - j0;
        const bool whole = 64 * c + 64 <= rm && rn == BN && (vt.wr < 0 || diag + 64 * c >= BN - 1) &&
                           (vt.wl < 0 || lo + 64 * c + 63 <= 0);
        if (whole)
            fwd_wg_softmax<false, BN, true>(s, m, l, corr, scale2, i0w, t4, rm, rn, 0, diag, lo, &vt);
        else
            fwd_wg_softmax<true, BN, true>(s, m, l, corr, scale2, i0w, t4, rm, rn, vt.wr >= 0, diag, lo, &vt);
    } else {
        const int causal = p.geo.mask == SCHED_MASK_CAUSAL;
        /* row i sees key j <= diag + i (causal: key j0 + j <= i0 + i + seqlen_k - seqlen_q) */
        const int64_t diag = (int64_t)i0 + off - j0;
        const bool whole = 64 * c + 64 <= rm && rn == BN && (!causal || diag + 64 * c >= BN - 1);
        if (whole)
            fwd_wg_softmax<false, BN>(s, m, l, corr, scale2, i0w, t4, rm, rn, causal, diag);
        else
            fwd_wg_softmax<true, BN>(s, m, l, corr, scale2, i0w, t4, rm, rn, causal, diag);
    }
}

/* O = O corr, and P (s) rounded to the input dtype as the next P V's A fragments. */
template <typename DT, int D, int BN = FWD_WG_BN_OF(D)>
static __device__ __forceinline__ void fwd_wg_rescale(const float (&s)[BN / 2], float (&o)[D / 2],
                                                      uint32_t (&pa)[BN / 16][4], const float (&corr)[2])
{
#pragma unroll
    for (int e = 0; e < D / 2; e++)
        o[e] = __fmul_rn(o[e], corr[(e >> 1) & 1]);
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
        for (int q = 0; q < 4; q++)
            pa[kk][q] = DT::pack2(s[8 * kk + 2 * q], s[8 * kk + 2 * q + 1]);
}

/* Issue O += P V over one kv-tile (RS wgmma m64nDk16, keys ascending), committed as one
 * group; P's registers and O must not be touched until it has been waited for. */
template <typename DT, int D, int BN = FWD_WG_BN_OF(D)>
static __device__ __forceinline__ void fwd_wg_pv(float (&o)[D / 2], const uint32_t (&pa)[BN / 16][4],
                                                 const uint16_t *v_s)
{
    attn_wg_fence(); /* O and P were written by ordinary instructions */
#pragma unroll
    for (int32_t kk = 0; kk < BN / 16; kk++)
        attn_wg_mma_rs<DT, D, 1>(o, pa[kk], attn_wg_mnmajor(v_s, BN, 16 * kk, 0), 1);
    attn_wg_commit();
}

/* Keep P's registers live up to here (after the wait): the product reads them
 * asynchronously, so nothing else may be given them while it runs. */
template <int BN>
static __device__ __forceinline__ void fwd_wg_pin_a(uint32_t (&pa)[BN / 16][4])
{
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
        attn_wg_pin<4>(pa[kk]);
}

/* Producer, cp.async: warps 0-1 copy Q once, then the K tiles; warps 2-3 the V tiles.
 * Two rings, each at its own pace: K(n + 2) is copied as soon as S(n) is done, V(n + 2)
 * once P(n) V(n) is, so neither waits behind the other. kv-tiles n_lo .. n_hi - 1; the
 * t-th goes to stage t % 2 with phase (t / 2) % 2. ROLLED: the copy loops stay rolled
 * (VL, whose consumers leave the producer 24 registers: unrolled, it spilled 40 bytes). */
template <int D, bool ROLLED = false, bool PERSIST = false, int NC = 2>
static __device__ __forceinline__ void fwd_wg_produce(const struct attn_fwd_params &p, fwd_wg_smem<D, NC> &sm,
                                                      int32_t b, int32_t h, int32_t hk, int32_t i0, int32_t rm,
                                                      int32_t n_lo, int32_t n_hi, int32_t v_half, int32_t t0 = 0,
                                                      int32_t qk = 0)
{
    if (!v_half && (!PERSIST || n_hi > n_lo)) { /* PERSIST: a tile with work, once the last Q is read */
        if constexpr (PERSIST)
            attn_mbar_wait(&sm.q_empty, ((uint32_t)qk & 1u) ^ 1u);
        attn_tc_load_tile<D, 64 * NC, true, ROLLED>(sm.q_smem, static_cast<const uint16_t *>(p.q),
                                              b * p.q_stride[0] + (int64_t)i0 * p.q_stride[1] + h * p.q_stride[2],
                                              p.q_stride[1], rm, 64);
    }
    attn_cp_async_commit();
    const uint16_t *src = static_cast<const uint16_t *>(v_half ? p.v : p.k);
    const int64_t *stride = v_half ? p.v_stride : p.k_stride;
    for (int32_t n = n_lo; n < n_hi; n++) {
        const int32_t rel = n - n_lo, t = t0 + rel, st = t & 1; /* t: the ring's count */
        const uint32_t ph = (uint32_t)(t >> 1) & 1u;
        /* the stage is free (at once the first time round) */
        attn_mbar_wait(v_half ? &sm.v_empty[st] : &sm.k_empty[st], ph ^ 1u);
        constexpr int32_t BN = FWD_WG_BN_OF(D);
        const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;
        attn_tc_load_tile<D, BN, true, ROLLED>(v_half ? sm.v_smem[st] : sm.k_smem[st], src,
                                              b * stride[0] + (int64_t)j0 * stride[1] + hk * stride[2], stride[1],
                                              rn, 64, v_half ? 64 : 0);
        attn_cp_async_commit();
        if (rel == 0 && !v_half) { /* Q's group first */
            attn_cp_async_wait<1>();
            attn_wg_smem_fence();
            attn_mbar_arrive(&sm.q_full);
        }
        attn_cp_async_wait<0>();
        attn_wg_smem_fence(); /* visible to wgmma (the async proxy) */
        attn_mbar_arrive(v_half ? &sm.v_full[st] : &sm.k_full[st]);
    }
    if (!PERSIST && n_hi <= n_lo && !v_half) { /* nobody reads Q; keep the copy from outliving the CTA */
        attn_cp_async_wait<0>();
        attn_mbar_arrive(&sm.q_full);
    }
}

/* Producer, TMA: one thread (lane 0 of warp 0: Q once, then the K tiles; of warp 1: the
 * V tiles). Per tile: wait for the stage to be free, announce the tile's bytes on its
 * full barrier (the phase's one arrival) and issue its D/64 boxes; the phase completes
 * when they have landed. The two rings keep their own pace, as with cp.async. b is the
 * view's batch coordinate, i0 and the tiles' rows the view's. */
template <int D, bool PERSIST = false, int NC = 2>
static __device__ __forceinline__ void fwd_wg_produce_tma(const fwd_wg_maps &maps, fwd_wg_smem<D, NC> &sm,
                                                          int32_t b, int32_t h, int32_t hk, int32_t i0,
                                                          int32_t n_lo, int32_t n_hi, int32_t v_warp,
                                                          int32_t t0 = 0, int32_t qk = 0)
{
    constexpr uint32_t tile_bytes = (uint32_t)sizeof(sm.k_smem[0]); /* = D/64 boxes */
    const CUtensorMap *map = v_warp ? &maps.v : &maps.k;
    constexpr int32_t BN = FWD_WG_BN_OF(D);
    uint16_t(*ring)[BN * D] = v_warp ? sm.v_smem : sm.k_smem;
    uint64_t *full = v_warp ? sm.v_full : sm.k_full, *empty = v_warp ? sm.v_empty : sm.k_empty;
    attn_tma_prefetch(map);
    if (!v_warp && n_hi > n_lo) { /* Q, unless no consumer will wait for it */
        if constexpr (PERSIST) /* once the last tile's Q has been read */
            attn_mbar_wait(&sm.q_empty, ((uint32_t)qk & 1u) ^ 1u);
        attn_mbar_expect_tx(&sm.q_full, (uint32_t)sizeof(sm.q_smem));
#pragma unroll
        for (int32_t c = 0; c < D / FWD_WG_BOX_COLS; c++)
            attn_tma_load_4d(sm.q_smem + c * 64 * NC * FWD_WG_BOX_COLS, &maps.q, &sm.q_full, FWD_WG_BOX_COLS * c,
                             i0, h, b);
    }
    for (int32_t n = n_lo; n < n_hi; n++) {
        const int32_t t = t0 + (n - n_lo), st = t & 1; /* t: the ring's count */
        /* the stage is free (at once the first time round: parity 1 is the phase before) */
        attn_mbar_wait(&empty[st], ((uint32_t)(t >> 1) & 1u) ^ 1u);
        attn_mbar_expect_tx(&full[st], tile_bytes);
#pragma unroll
        for (int32_t c = 0; c < D / FWD_WG_BOX_COLS; c++)
            attn_tma_load_4d(ring[st] + c * BN * FWD_WG_BOX_COLS, map, &full[st], FWD_WG_BOX_COLS * c, n * BN, hk,
                             b);
    }
}

/* A consumer thread's reads of K(n), in stage st, are done (k_empty); with PERSIST, after the
 * last of the nt tiles' S products, its reads of Q too (q_empty). */
template <bool PERSIST, int D, int NC>
static __device__ __forceinline__ void fwd_wg_free_k(fwd_wg_smem<D, NC> &sm, int32_t st, int32_t n, int32_t nt)
{
    attn_mbar_arrive(&sm.k_empty[st]);
    if constexpr (PERSIST) {
        if (n == nt - 1)
            attn_mbar_arrive(&sm.q_empty);
    }
}

/* An idle consumer's kv-tiles (fwd_wg_consume): the empty barriers count its 128 arrivals,
 * so through the tile's nt kv-tiles (t0 + n in the rings) it waits for each stage to fill
 * and frees it at once, K (and Q after the last, PERSIST) then V - the arrivals its
 * products' waits would have made, in the same phases. (An arrival must follow its phase's
 * fill: one before it would count towards the stage's previous phase.) PERSIST: it waits
 * for Q's phase qk too, as a busy consumer does. Skipped, the idle consumer could leave the
 * tile with Q's phase qk still pending (its K and V landed first); its wait for the next
 * tile's Q (parity qk + 1) would then pass on phase qk - 1, and its S product could read
 * the next Q while TMA still writes it, behind a K that came from L2 first. */
template <bool PERSIST, int D, int NC>
static __device__ __forceinline__ void fwd_wg_idle(fwd_wg_smem<D, NC> &sm, int32_t t0, int32_t nt, int32_t qk)
{
    if constexpr (PERSIST)
        if (nt > 0)
            attn_mbar_wait(&sm.q_full, (uint32_t)qk & 1u);
    for (int32_t n = 0; n < nt; n++) {
        const int32_t tn = t0 + n, st = tn & 1;
        const uint32_t ph = (uint32_t)(tn >> 1) & 1u;
        attn_mbar_wait(&sm.k_full[st], ph);
        fwd_wg_free_k<PERSIST>(sm, st, n, nt);
        attn_mbar_wait(&sm.v_full[st], ph);
        attn_mbar_arrive(&sm.v_empty[st]);
    }
}

/* Consumer warpgroup c (0 .. NC - 1): rows 64 c .. of the q-tile, through kv-tiles n_lo ..
 * n_hi - 1 (below, n counts them from 0; t0 + n is the t of the producers). PERSIST: the
 * CTA's qk-th tile with work (Q's phase), and the consumers free Q (q_empty) once their last
 * S product has read it.
 * Idle consumers: where the q-tile's rows end before consumer c's (64 c >= rm: the last
 * q-tile of a seqlen_q that is not a multiple of 64 NC), its products would compute rows
 * that are never stored (O and LSE are stored for rows i < rm only), so it runs none of
 * them and no softmax, and keeps only the waits and arrivals that the producers and the
 * other consumers count: the full barriers' waits, the empty barriers' arrivals (K, Q, V)
 * and, three consumers, the turns. No other row's value depends on it: the bits are the
 * same. Two consumers under turns (FWD_WG_TURNS, head dim 256) run their products as
 * before. How ptxas takes each form (nvcc 13.0, bench/results/fwdtail-trial-2026-12-07.md):
 * an early return, or any conditional bound or start of the three-consumer loop, spills the
 * persistent loop's qk (8 bytes at 64, 4/12 at 128); the products skipped one by one
 * (`if (busy)` around each) spill 100-1000 bytes in the two-consumer loops and add ~60
 * register moves a kv-tile in the three-consumer one; the forms below nothing. */
template <typename DT, int D, bool VL, bool PERSIST = false, int NC = 2>
static __device__ __forceinline__ void fwd_wg_consume(const struct attn_fwd_params &p, fwd_wg_smem<D, NC> &sm,
                                                      int32_t c, int32_t b, int32_t h, int32_t bh, int32_t i0,
                                                      int32_t rm, int32_t n_lo, int32_t n_hi, const fwd_wg_vl &vt,
                                                      int32_t t0 = 0, int32_t qk = 0)
{
    constexpr int BN = FWD_WG_BN_OF(D);
    const int32_t nt = n_hi > n_lo ? n_hi - n_lo : 0; /* tiles */
    const int32_t lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 3;
    const int32_t g = lane >> 2, t4 = lane & 3;
    const int32_t i0w = 64 * c + 16 * wi + g; /* the thread's rows: i0w, i0w + 8 */
    const float scale2 = __fmul_rn(p.scale, ATTN_LOG2E);

    float o[D / 2]; /* m64nD accumulator: element 4 j + e is row i0w + 8 (e / 2), column 8 j + 2 t4 + e % 2 */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < D / 2; e++)
        o[e] = 0.0f;

    /* Two products in flight (FA3's intra-warpgroup overlap): at tile n the consumer
     * issues S(n) = Q K(n)^T, then O += P(n-1) V(n-1), waits for S(n) only, runs tile n's
     * softmax while the P V product runs, then waits for it, frees stage n - 1, rescales
     * O and forms P(n). The same operations in the same order as one tile at a time
     * (O = O corr(n) + P(n) V(n)), so the same bits. */
    uint32_t pa[BN / 16][4]; /* P(n-1) as RS A fragments, in flight under softmax(n) */
    float corr[2];
    const bool busy = 64 * c < rm; /* (else idle: above) */
    if constexpr (NC == 3) {
        /* Three consumers (at head dim 64): 160 registers a thread hold S, O and P, but not
         * S(n) beside P(n-1) and O in flight (the overlap below spilled 300 bytes), so here
         * one tile at a time - the other two consumers' products fill the tensor cores while
         * one runs its softmax. The same operations in the same order (O = O corr(n) +
         * P(n) V(n)), so the same bits. Turns: 2 nt issue points per consumer (S(n), then
         * P(n) V(n)), handed round 0 -> 1 -> 2 -> 0 as below. */
        if (nt > 0) {
            if (c == NC - 1)
                fwd_wg_turn_pass<D, NC>(c);
            attn_mbar_wait(&sm.q_full, (uint32_t)qk & 1u);
        }
        for (int32_t n = 0; n < nt; n++) {
            const int32_t tn = t0 + n, st = tn & 1;
            attn_mbar_wait(&sm.k_full[st], (uint32_t)(tn >> 1) & 1u);
            if (busy) {
                float s[BN / 2];
                fwd_wg_turn_wait<D, NC>(c);
                fwd_wg_s<DT, D, BN, NC>(s, sm.q_smem, sm.k_smem[st], c);
                fwd_wg_turn_pass<D, NC>(c);
                attn_wg_wait<0>();
                attn_wg_pin<BN / 2>(s);
                fwd_wg_free_k<PERSIST>(sm, st, n, nt); /* K(n), and Q after the last */
                fwd_wg_softmax_tile<VL, BN>(p, s, m, l, corr, scale2, i0, i0w, t4, rm, n_lo + n, c, vt);
                fwd_wg_rescale<DT, D>(s, o, pa, corr);
                attn_mbar_wait(&sm.v_full[st], (uint32_t)(tn >> 1) & 1u);
                fwd_wg_turn_wait<D, NC>(c);
                fwd_wg_pv<DT, D>(o, pa, sm.v_smem[st]);
                if (n < nt - 1 || c != NC - 1)
                    fwd_wg_turn_pass<D, NC>(c);
                attn_wg_wait<0>();
                attn_wg_pin<D / 2>(o);
                fwd_wg_pin_a<BN>(pa);
            } else { /* idle: the same waits, arrivals and turns, no products */
                fwd_wg_turn_wait<D, NC>(c);
                fwd_wg_turn_pass<D, NC>(c);
                fwd_wg_free_k<PERSIST>(sm, st, n, nt);
                attn_mbar_wait(&sm.v_full[st], (uint32_t)(tn >> 1) & 1u);
                fwd_wg_turn_wait<D, NC>(c);
                if (n < nt - 1 || c != NC - 1)
                    fwd_wg_turn_pass<D, NC>(c);
            }
            attn_mbar_arrive(&sm.v_empty[st]); /* ... and of V(n) */
        }
    } else {
        /* Turns (FWD_WG_TURNS): nt + 1 issue points per consumer (S(0), S(n) with
         * P(n-1) V(n-1), the last P V), each between a wait for the turn and its hand-over.
         * Consumer 0 has the first turn (consumer 1 hands it over unasked), and consumer 1's
         * last hand-over is left out, so every arrival at a turn barrier is waited for. */
        const int32_t nb = busy || FWD_WG_TURNS(D) ? nt : 0; /* tiles with products */
        if (nb > 0) { /* (else no row of the tile sees a key, or the consumer is idle) */
            if (c == NC - 1)
                fwd_wg_turn_pass<D, NC>(c);
            attn_mbar_wait(&sm.q_full, (uint32_t)qk & 1u);
            /* tile 0: nothing to overlap with. The loop's body is straight-line code, so the
             * compiler sees every product waited for before its registers are touched. */
            attn_mbar_wait(&sm.k_full[t0 & 1], (uint32_t)(t0 >> 1) & 1u);
            float s[BN / 2];
            fwd_wg_turn_wait<D, NC>(c);
            fwd_wg_s<DT, D, BN, NC>(s, sm.q_smem, sm.k_smem[t0 & 1], c);
            fwd_wg_turn_pass<D, NC>(c);
            attn_wg_wait<0>();
            attn_wg_pin<BN / 2>(s);
            fwd_wg_free_k<PERSIST>(sm, t0 & 1, 0, nb); /* K(0), and Q if it was the last */
            fwd_wg_softmax_tile<VL, BN>(p, s, m, l, corr, scale2, i0, i0w, t4, rm, n_lo, c, vt);
            fwd_wg_rescale<DT, D>(s, o, pa, corr);
        }
        for (int32_t n = 1; n < nb; n++) {
            const int32_t tn = t0 + n, st = tn & 1, pst = st ^ 1; /* stages of tiles n and n - 1 */
            /* both waits before the products: nothing spins while they are in flight */
            attn_mbar_wait(&sm.k_full[st], (uint32_t)(tn >> 1) & 1u);
            attn_mbar_wait(&sm.v_full[pst], (uint32_t)((tn - 1) >> 1) & 1u);
            float s[BN / 2];
            fwd_wg_turn_wait<D, NC>(c);
            fwd_wg_s<DT, D, BN, NC>(s, sm.q_smem, sm.k_smem[st], c);
            fwd_wg_pv<DT, D>(o, pa, sm.v_smem[pst]);
            fwd_wg_turn_pass<D, NC>(c);
            attn_wg_wait<1>(); /* S has landed; P V may still run */
            attn_wg_pin<BN / 2>(s);
            fwd_wg_free_k<PERSIST>(sm, st, n, nb); /* K(n), and Q after the last */
            fwd_wg_softmax_tile<VL, BN>(p, s, m, l, corr, scale2, i0, i0w, t4, rm, n_lo + n, c, vt);
            attn_wg_wait<0>();
            attn_wg_pin<D / 2>(o);
            fwd_wg_pin_a<BN>(pa); /* its registers were read until here */
            attn_mbar_arrive(&sm.v_empty[pst]); /* ... and of V(n - 1) */
            fwd_wg_rescale<DT, D>(s, o, pa, corr);
        }
        if (nb > 0) { /* the last tile's P V (ring count t0 + nb - 1) */
            const int32_t st = (t0 + (nb - 1)) & 1;
            attn_mbar_wait(&sm.v_full[st], (uint32_t)((t0 + (nb - 1)) >> 1) & 1u);
            fwd_wg_turn_wait<D, NC>(c);
            fwd_wg_pv<DT, D>(o, pa, sm.v_smem[st]);
            if (c == 0) /* (two consumers here) */
                fwd_wg_turn_pass<D, NC>(c);
            attn_wg_wait<0>();
            attn_wg_pin<D / 2>(o);
            fwd_wg_pin_a<BN>(pa);
            attn_mbar_arrive(&sm.v_empty[st]);
        }
        if (!busy && nb == 0) /* (the guard keeps ptxas from spilling) */
            fwd_wg_idle<PERSIST>(sm, t0, nt, qk);
    }

    uint16_t *out_g = static_cast<uint16_t *>(p.out);
    /* b and h again from bh, which is kept anyway: not live through the tiles (three
     * consumers; and the persistent window kernel, attn_vl.cu's attn_fwd_vl_wgp_kernel, whose
     * consumers spilled 4 bytes at 128 with them live) */
    if constexpr (NC == 3 || (VL && PERSIST)) {
        int32_t x = bh;
        asm volatile("" : "+r"(x));
        b = VL && !PERSIST ? b : x / p.heads_q;
        h = VL && !PERSIST ? h : x - b * p.heads_q;
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float lr = l[r]; /* the row's sum: the 4 lanes' partials, a fixed tree */
        lr = __fadd_rn(lr, __shfl_xor_sync(0xffffffffu, lr, 1));
        lr = __fadd_rn(lr, __shfl_xor_sync(0xffffffffu, lr, 2));
        const int32_t i = i0w + 8 * r;
        if (i >= rm)
            continue;
        const int64_t at = b * p.out_stride[0] + (int64_t)(i0 + i) * p.out_stride[1] + h * p.out_stride[2];
        const bool none = lr == 0.0f; /* the row sees no key */
        const float inv = none ? 0.0f : __frcp_rn(lr);
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            if (VL || p.d_cols == 0 || 8 * j < p.d_cols) /* the caller's columns only */
            attn_st_pair(out_g + at + 8 * j + 2 * t4,
                         DT::pack2(__fmul_rn(o[4 * j + 2 * r], inv), __fmul_rn(o[4 * j + 2 * r + 1], inv)));
        if (t4 == 0)
            p.lse[(int64_t)bh * (VL ? p.lse_stride : p.seqlen_q) + i0 + i] = none ? INFINITY : fmaf(m[r], ATTN_LN2, logf(lr));
    }
}

/* Thread 0, before the CTA's __syncthreads: the rings' barriers (TMA: one arrival fills a
 * stage, the loading thread's expect_tx; cp.async: the 64 copying threads'). */
template <int D, bool TMA, int NC = 2>
static __device__ __forceinline__ void fwd_wg_init(fwd_wg_smem<D, NC> &sm)
{
    const uint32_t loaders = TMA ? 1u : 64u;
    attn_mbar_init(&sm.q_full, loaders);
    for (int s = 0; s < FWD_WG_STAGES; s++) {
        attn_mbar_init(&sm.k_full[s], loaders);
        attn_mbar_init(&sm.v_full[s], loaders);
        attn_mbar_init(&sm.k_empty[s], 128 * NC);
        attn_mbar_init(&sm.v_empty[s], 128 * NC);
    }
    attn_mbar_init(&sm.q_empty, 128 * NC);
    if (TMA)
        attn_mbar_init_fence(); /* the TMA unit completes bytes on them too */
}

/* The work of one VL CTA (attn_vl.cu; the dense kernel runs fwd_wg_run_tiles) after
 * fwd_wg_init and a __syncthreads: q-tile rows i0 .. i0 + rm - 1 of head h (bh: its LSE row
 * block), kv-tiles n_lo .. n_hi - 1; the producer warpgroup loads (TMA: at view batch
 * tma_b), the two consumer warpgroups compute and store. */
template <typename DT, int D, bool TMA>
static __device__ __forceinline__ void fwd_wg_run(const struct attn_fwd_params &p, const fwd_wg_maps &maps,
                                                  fwd_wg_smem<D> &sm, int32_t b, int32_t h, int32_t bh, int32_t i0,
                                                  int32_t rm, int32_t n_lo, int32_t n_hi, int32_t tma_b,
                                                  const fwd_wg_vl &vt)
{
    const int32_t hk = h / p.group;
    /* the warpgroup through a shuffle from lane 0: warp-uniform to the compiler */
    const int32_t wg = __shfl_sync(0xffffffffu, (int32_t)(threadIdx.x >> 7), 0);
    if (wg == 0) {
        if constexpr (TMA) {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(FWD_WG_LOAD_REGS_TMA_VL) : "memory");
            const int32_t w = __shfl_sync(0xffffffffu, (int32_t)(threadIdx.x >> 5), 0);
            if (w < 2 && (threadIdx.x & 31u) == 0) /* warp 0: Q, K; warp 1: V */
                fwd_wg_produce_tma<D>(maps, sm, tma_b, h, hk, i0, n_lo, n_hi, w);
        } else {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(FWD_WG_LOAD_REGS_CP_VL) : "memory");
            const int32_t v_half = __shfl_sync(0xffffffffu, (int32_t)(threadIdx.x >> 6), 0); /* warps 2, 3 */
            fwd_wg_produce<D, true>(p, sm, b, h, hk, i0, rm, n_lo, n_hi, v_half);
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(TMA ? FWD_WG_MMA_REGS_TMA_VL : FWD_WG_MMA_REGS_CP_VL)
                 : "memory");
    fwd_wg_consume<DT, D, true>(p, sm, wg - 1, b, h, bh, i0, rm, n_lo, n_hi, vt);
}

/* A dense launch's q-tile idx, heaviest first (a CTA a tile: its blockIdx.x): rows
 * i0 .. i0 + rm - 1 of head h of batch b (bh = b heads + h), kv-tiles 0 .. n_hi - 1 (under
 * a causal mask those up to the last row's diagonal). */
struct fwd_wg_tile {
    int32_t b, h, bh, i0, rm, n_hi;
};

template <int D, int NC = 2>
static __device__ __forceinline__ fwd_wg_tile fwd_wg_tile_of(const struct attn_fwd_params &p, int32_t M, int32_t idx)
{
    constexpr int32_t BM = 64 * NC;
    fwd_wg_tile T;
    const int32_t mt = M - 1 - (int32_t)((uint32_t)idx % (uint32_t)M);
    T.bh = (int32_t)((uint32_t)idx / (uint32_t)M);
    T.b = T.bh / p.heads_q;
    T.h = T.bh - T.b * p.heads_q;
    T.i0 = mt * BM;
    T.rm = p.seqlen_q - T.i0 < BM ? p.seqlen_q - T.i0 : BM;
    int64_t j_end = p.seqlen_k;
    if (p.geo.mask == SCHED_MASK_CAUSAL) {
        const int64_t last = (int64_t)T.i0 + T.rm - 1 + ((int64_t)p.seqlen_k - p.seqlen_q) + 1;
        if (last < j_end)
            j_end = last > 0 ? last : 0;
    }
    T.n_hi = (int32_t)((j_end + FWD_WG_BN_OF(D) - 1) / FWD_WG_BN_OF(D));
    return T;
}

/* The CTA's n-th tile (fwd_wg_tile_of's numbering): under a causal mask job
 * blockIdx.x + (n / 2) gridDim.x's tile n % 2 (-2: a job without a second tile); else one
 * of round n's tiles n G .. n G + G - 1 (G = gridDim.x), one a CTA; -1 past the last.
 * CTA c = b M + k of the whole blocks of M (c < G - G mod M) takes its block's tiles
 * turned, n G + b M + (k + s) mod M with s = -n (G + 1) mod M; the rest take n G + c, as
 * every CTA once did. Why: under a full mask a head's light tile (its last rows, fewer than
 * 64 NC where seqlen_q is not a multiple: its consumers without rows compute nothing,
 * fwd_wg_consume) is idx = 0 mod M. Taking n G + c, CTA c meets one where c = -n G
 * (mod M): where G and M share a factor, the same few CTAs every time (132 SMs and M = 6,
 * 11, 22: head dim 64 at 1k, 2k, 4k), and the others, a full tile more each, set the
 * makespan. Turned, n G + b M + k + s = k - n (mod M): each CTA of the blocks meets one
 * every M rounds. A round holds the same tiles as before (the same heads' K and V in L2 at
 * a time); a tile's arithmetic does not depend on who takes it, so neither do the bits. */
static __device__ __forceinline__ int32_t fwd_wg_walk(const struct attn_fwd_params &p, int32_t M, int32_t tiles,
                                                      int32_t n)
{
    if (p.geo.mask != SCHED_MASK_CAUSAL) {
        const uint32_t G = gridDim.x, m = (uint32_t)M, c = blockIdx.x;
        const int64_t at = (int64_t)n * G; /* the round's first tile */
        if (at >= tiles)
            return -1;
        uint32_t q = c; /* the CTA's tile in the round */
        /* in 32 bits (a 64-bit remainder is a call; it made ptxas spill): from 2^16 q-tiles
         * a head on, no turn */
        if (c < G - G % m && m < 65536u) {
            const uint32_t k = c % m, turn = (uint32_t)n % m * ((G + 1u) % m) % m;
            q = c - k + (k + m - turn) % m;
        }
        const int64_t idx = at + q;
        return idx < tiles ? (int32_t)idx : -1; /* (the last round: CTAs past its tiles end) */
    }
    const int32_t per_head = (M + 1) / 2, job = (int32_t)blockIdx.x + (n >> 1) * (int32_t)gridDim.x;
    if (job >= per_head * p.geo.bh)
        return -1;
    const int32_t bh = job / per_head, k = job - bh * per_head;
    const int32_t r = (n & 1) ? M - 1 - k : k; /* rank: 0 the heaviest */
    return (n & 1) && r == k ? -2 : bh * M + r;
}
/* for (each of the CTA's tiles idx) */
#define FWD_WG_FOR_TILES(idx)                                                                        \
    for (int32_t n_ = 0, idx; (idx = fwd_wg_walk(p, M, tiles, n_)) != -1; n_++)                    \
        if (idx >= 0)

/* The persistent CTA's work after fwd_wg_init and a __syncthreads: q-tiles blockIdx.x,
 * + gridDim.x, ... (FWD_WG_FOR_TILES) of the M-tile launch (tiles in all), each as fwd_wg_run's one tile, the
 * rings' counts (t0) and Q's phase (qk: tiles with work so far) carried from one to the
 * next on both sides alike. */
template <typename DT, int D, bool TMA, int NC = 2>
static __device__ __forceinline__ void fwd_wg_run_tiles(const struct attn_fwd_params &p, const fwd_wg_maps &maps,
                                                        fwd_wg_smem<D, NC> &sm, int32_t M, int32_t tiles)
{
    constexpr uint32_t load_tma = NC == 3 ? FWD_WG_LOAD_REGS_TMA3 : FWD_WG_LOAD_REGS_TMA;
    constexpr uint32_t load_cp = NC == 3 ? FWD_WG_LOAD_REGS_CP3 : FWD_WG_LOAD_REGS_CP;
    constexpr uint32_t mma_tma = NC == 3 ? FWD_WG_MMA_REGS_TMA3 : FWD_WG_MMA_REGS_TMA;
    constexpr uint32_t mma_cp = NC == 3 ? FWD_WG_MMA_REGS_CP3 : FWD_WG_MMA_REGS_CP;
    const fwd_wg_vl none = {-1, -1, 0.0f, 0.0f};
    const int32_t wg = __shfl_sync(0xffffffffu, (int32_t)(threadIdx.x >> 7), 0);
    int32_t t0 = 0, qk = 0;
    if (wg == 0) {
        if constexpr (TMA) {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(load_tma) : "memory");
            const int32_t w = __shfl_sync(0xffffffffu, (int32_t)(threadIdx.x >> 5), 0);
            if (w < 2 && (threadIdx.x & 31u) == 0) /* warp 0: Q, K; warp 1: V */
                FWD_WG_FOR_TILES(idx) {
                    const fwd_wg_tile T = fwd_wg_tile_of<D, NC>(p, M, idx);
                    fwd_wg_produce_tma<D, true, NC>(maps, sm, T.b, T.h, T.h / p.group, T.i0, 0, T.n_hi, w, t0, qk);
                    t0 += T.n_hi;
                    qk += T.n_hi > 0;
                }
        } else {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(load_cp) : "memory");
            const int32_t v_half = __shfl_sync(0xffffffffu, (int32_t)(threadIdx.x >> 6), 0); /* warps 2, 3 */
            FWD_WG_FOR_TILES(idx) {
                const fwd_wg_tile T = fwd_wg_tile_of<D, NC>(p, M, idx);
                fwd_wg_produce<D, NC == 3, true, NC>(p, sm, T.b, T.h, T.h / p.group, T.i0, T.rm, 0, T.n_hi, v_half,
                                                     t0, qk);
                t0 += T.n_hi;
                qk += T.n_hi > 0;
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(TMA ? mma_tma : mma_cp) : "memory");
    FWD_WG_FOR_TILES(idx) {
        const fwd_wg_tile T = fwd_wg_tile_of<D, NC>(p, M, idx);
        fwd_wg_consume<DT, D, false, true, NC>(p, sm, wg - 1, T.b, T.h, T.bh, T.i0, T.rm, 0, T.n_hi, none, t0, qk);
        t0 += T.n_hi;
        qk += T.n_hi > 0;
    }
}
#endif /* ATTN_WGMMA */
#endif /* DASH_KERNELS_CUDA_FWD_WG_CUH */
