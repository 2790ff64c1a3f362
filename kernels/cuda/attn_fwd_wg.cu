// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_fwd_wg.cu - v3's forward kernel (sm_90a): warp-specialised, on Hopper warpgroup
 * products (wgmma). Head dims 64 and 128, fp16/bf16, full and causal masks, GQA; the same
 * outputs as v2's forward (attn_fwd_tc.cu): O, and LSE = ln sum_j exp(scale q_i k_j),
 * +inf (and O = 0) for a row that sees no key.
 *
 * Reference: FlashAttention-3 (Shah et al., arXiv 2407.08608, Sec. 3.1 and Algorithm 1:
 * "producer warpgroup", "consumer warpgroups", setmaxnreg); the facts used are collected
 * in ../shared/docs/hopper.md Sec. 2 and 5. This is steps F1-F3 of that note's Sec. 7 and
 * F4's TMA loads.
 * No code of FA3 or ThunderKittens is reproduced. FA3's names: kBlockM = FWD_WG_BM,
 * kBlockN = FWD_WG_BN, kStages = FWD_WG_STAGES; its producer is one warp issuing TMA, so
 * is ours (two threads, one per ring), with a cp.async producer for the views TMA cannot
 * describe.
 *
 * One CTA of 384 threads (three warpgroups) per (128-row q-tile, batch*head), heaviest
 * q-tiles (the last, under a causal mask) launched first, as v2:
 *   warpgroup 0, the producer ("load"): gives its registers up (setmaxnreg.dec) and fills
 *     two 2-stage rings (FWD_WG_STAGES), one for K and one for V, and Q once, in one of
 *     two ways (two instances of the kernel, template argument TMA; the host picks):
 *     - TMA (step F4's loads; FWD_WG_LOAD_REGS_TMA): lane 0 of warp 0 loads Q and the K
 *       tiles, lane 0 of warp 1 the V tiles, each tile as D/64 boxes of 128 rows x 64
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
 *     both producers.
 * The rings: k_full[s] (v_full[s]) completes tile n's phase when its bytes are in shared
 * memory and visible to wgmma (the async proxy): with TMA, on the loading thread's one
 * arrival (arrive.expect_tx of the tile's FWD_WG_BN x D x 2 bytes, made before the boxes
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
 * F3, FWD_WG_PINGPONG): the two consumers take turns issuing their products (named
 * barriers, FA3's "warp scheduler barriers"), so one's softmax overlaps the other's
 * products. Not yet here (../shared/docs/hopper.md Sec. 7, F4-F5): an smem + TMA-store
 * epilogue, a persistent scheduler, wider kv tiles.
 *
 * Determinism. Every element of S is one chain of wgmma over d ascending; every element
 * of O one chain over kv-tiles ascending and, within a tile, keys ascending in k16 steps;
 * row maxima and sums are fixed in-thread loops and a fixed xor-shuffle tree over the 4
 * lanes of a row. Nothing depends on timing or on which SM runs what, so the bits are a
 * function of the inputs, shape, dtype, mask and scale (and the build and GPU type). They
 * differ from v2's forward (128-key tiles, other sum groupings), and a row's bits depend
 * on the 128-key tile grid only: the 128-row q-tile's causal range adds tiles a row sees
 * nothing of, which changes no value (corr = 2^0 = 1, P = 0). The two producers put the
 * same bytes in shared memory, so they give the same bits.
 */
#include "kernels/cuda/attn_cuda_int.h"
#include "kernels/cuda/attn_wgmma.h"

#include <cuda.h> /* CUtensorMap and its enums only: the encoder comes through the runtime */
#include <cudaTypedefs.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#define FWD_WG_BM 128 /* q rows per CTA: two consumer warpgroups of 64 */
#define FWD_WG_BN 128 /* keys per kv-tile */
#define FWD_WG_THREADS 384
#define FWD_WG_STAGES 2
#define FWD_WG_ALIGN 1024 /* the 128-byte swizzle is a function of address bits */
/* Registers a thread, producer / consumers: 128 x 56 + 256 x 224 (cp.async) and
 * 128 x 24 + 256 x 240 (TMA: two threads issue), each 64,512, the pool of 384 threads at
 * the 168 that __launch_bounds__(384, 1) gives. */
#define FWD_WG_LOAD_REGS_CP 56
#define FWD_WG_MMA_REGS_CP 224
#define FWD_WG_LOAD_REGS_TMA 24
#define FWD_WG_MMA_REGS_TMA 240
static_assert(128 * FWD_WG_LOAD_REGS_CP + 256 * FWD_WG_MMA_REGS_CP <= 168 * FWD_WG_THREADS &&
                  128 * FWD_WG_LOAD_REGS_TMA + 256 * FWD_WG_MMA_REGS_TMA <= 168 * FWD_WG_THREADS,
              "setmaxnreg stays within the launch's register pool");
/* TMA boxes: 64 columns (128 bytes, the swizzle's span) x 128 rows, D/64 of them a tile */
#define FWD_WG_BOX_COLS 64
#define FWD_WG_BOX_BYTES (FWD_WG_BOX_COLS * FWD_WG_BN * 2)
/* Ping-pong (step F3): 1 makes the two consumers take turns issuing their products, so
 * one's softmax runs while the other's products run; 0 lets them issue as they please.
 * The bits are the same either way (the order of issue changes no arithmetic). */
#ifndef FWD_WG_PINGPONG
#define FWD_WG_PINGPONG 1
#endif
/* Named barriers 1 and 2 (0 is __syncthreads): consumer 0's and consumer 1's turn. */
#define FWD_WG_TURN_BAR 1

template <int D>
struct fwd_wg_smem {
    uint16_t q_smem[FWD_WG_BM * D];                /* (128, D) Q, swizzled (attn_sw128) */
    uint16_t k_smem[FWD_WG_STAGES][FWD_WG_BN * D]; /* (2, 128, D) K tiles */
    uint16_t v_smem[FWD_WG_STAGES][FWD_WG_BN * D]; /* (2, 128, D) V tiles */
    /* TMA: 1 arrival (expect_tx) + the tile's bytes; cp.async: 64 arrivals, the loaders */
    uint64_t q_full;                 /* Q has landed */
    uint64_t k_full[FWD_WG_STAGES];  /* the stage's K tile has landed */
    uint64_t v_full[FWD_WG_STAGES];  /* the stage's V tile has landed */
    uint64_t k_empty[FWD_WG_STAGES]; /* the consumers are done with the stage's K (256) */
    uint64_t v_empty[FWD_WG_STAGES]; /* ... with its V (256) */
};
static_assert(sizeof(fwd_wg_smem<64>::q_smem) % 1024 == 0 && sizeof(fwd_wg_smem<64>::k_smem[0]) % 1024 == 0 &&
                  offsetof(fwd_wg_smem<64>, v_smem) % 1024 == 0 && offsetof(fwd_wg_smem<128>, v_smem) % 1024 == 0,
              "every tile starts on a 1024-byte boundary");
static_assert(FWD_WG_BM == FWD_WG_BN && sizeof(fwd_wg_smem<64>::q_smem) == FWD_WG_BOX_BYTES &&
                  sizeof(fwd_wg_smem<128>::k_smem[0]) == 2 * FWD_WG_BOX_BYTES &&
                  sizeof(fwd_wg_smem<128>::q_smem) == 2 * FWD_WG_BOX_BYTES,
              "a Q, K or V tile is D/64 boxes exactly: the expect_tx count is the tile's size");

/* The tensor maps of Q, K and V (TMA instances only; zeros for the others). */
struct fwd_wg_maps {
    CUtensorMap q, k, v;
};

template <int D>
struct fwd_wg_kern {
    static constexpr size_t bytes = sizeof(fwd_wg_smem<D>) + FWD_WG_ALIGN;
};

#if ATTN_WGMMA
/* Ping-pong turns: consumer c waits for its turn (its barrier, which the other consumer's
 * 128 threads arrive at once they have issued), issues, then hands the turn over. */
static __device__ __forceinline__ void fwd_wg_turn_wait(int32_t c)
{
    if (!FWD_WG_PINGPONG)
        return;
    if (c == 0) /* immediate ids: ptxas then reserves only the barriers used */
        asm volatile("bar.sync %0, 256;" ::"n"(FWD_WG_TURN_BAR) : "memory");
    else
        asm volatile("bar.sync %0, 256;" ::"n"(FWD_WG_TURN_BAR + 1) : "memory");
}
static __device__ __forceinline__ void fwd_wg_turn_pass(int32_t c)
{
    if (!FWD_WG_PINGPONG)
        return;
    if (c == 0)
        asm volatile("bar.arrive %0, 256;" ::"n"(FWD_WG_TURN_BAR + 1) : "memory");
    else
        asm volatile("bar.arrive %0, 256;" ::"n"(FWD_WG_TURN_BAR) : "memory");
}

/* The online-softmax update of one kv-tile for the thread's two rows (r = 0: row i[0],
 * r = 1: i[0] + 8), in place: S (raw scores) becomes P, m, l (this thread's partial sum)
 * advance, corr = 2^(m - m'). Accumulator element 4 j + e is row r = e / 2, column
 * 8 j + 2 t4 + e % 2. MASK: test each element against the q rows (rm), the keys (rn) and
 * the causal diagonal (row i sees key j <= diag + i); false only where all are visible,
 * where both versions compute the same values. */
template <bool MASK>
static __device__ __forceinline__ void fwd_wg_softmax(float (&s)[64], float (&m)[2], float (&l)[2],
                                                      float (&corr)[2], float scale2, int32_t i0w, int32_t t4,
                                                      int32_t rm, int32_t rn, int causal, int64_t diag)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int32_t lim = FWD_WG_BN; /* columns c < lim are visible */
        if (MASK) {
            const int32_t i = i0w + 8 * r;
            int64_t end = rn;
            if (causal && diag + i + 1 < end)
                end = diag + i + 1;
            lim = i < rm ? (end > 0 ? (int32_t)end : 0) : 0;
        }
        float tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < FWD_WG_BN / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float &x = s[4 * j + 2 * r + e];
                if (MASK && 8 * j + 2 * t4 + e >= lim)
                    x = -INFINITY;
                tmax = fmaxf(tmax, x);
            }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
        /* scale2 > 0 (the API checks scale > 0): the max of the scaled scores is the
         * scaled max, rounding being monotone */
        const float mx = fmaxf(m[r], __fmul_rn(tmax, scale2));
        float rsum = 0.0f;
        if (mx == -INFINITY) { /* the row has seen no key yet: nothing to add */
            corr[r] = 1.0f;
#pragma unroll
            for (int j = 0; j < FWD_WG_BN / 8; j++) {
                s[4 * j + 2 * r] = 0.0f;
                s[4 * j + 2 * r + 1] = 0.0f;
            }
        } else {
            corr[r] = attn_ex2(__fsub_rn(m[r], mx)); /* 0 when m was -inf */
            const float nmx = -mx;
#pragma unroll
            for (int j = 0; j < FWD_WG_BN / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float &x = s[4 * j + 2 * r + e];
                    x = attn_ex2(fmaf(x, scale2, nmx)); /* masked: 2^-inf = 0 */
                    rsum = __fadd_rn(rsum, x);
                }
        }
        l[r] = fmaf(l[r], corr[r], rsum);
        m[r] = mx;
    }
}

/* Issue S = Q_c K^T over one kv-tile (SS wgmma m64n128k16, d ascending), committed as
 * one group. */
template <typename DT, int D>
static __device__ __forceinline__ void fwd_wg_s(float (&s)[64], const uint16_t *q_s, const uint16_t *k_s, int32_t c)
{
    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < D / 16; kk++)
        attn_wg_mma<DT, 128, 0, 0>(s, attn_wg_kmajor(q_s, FWD_WG_BM, 64 * c, 16 * kk),
                                   attn_wg_kmajor(k_s, FWD_WG_BN, 0, 16 * kk), kk > 0);
    attn_wg_commit();
}

/* The softmax of kv-tile n for consumer c: masked where the tile hides some element of
 * the warpgroup's rows (diagonal, ragged ends), unmasked elsewhere. */
static __device__ __forceinline__ void fwd_wg_softmax_tile(const struct attn_fwd_params &p, float (&s)[64],
                                                           float (&m)[2], float (&l)[2], float (&corr)[2],
                                                           float scale2, int32_t i0, int32_t i0w, int32_t t4,
                                                           int32_t rm, int32_t n, int32_t c)
{
    const int32_t j0 = n * FWD_WG_BN, rn = p.seqlen_k - j0 < FWD_WG_BN ? p.seqlen_k - j0 : FWD_WG_BN;
    const int causal = p.geo.mask == SCHED_MASK_CAUSAL;
    /* row i sees key j <= diag + i (causal: key j0 + j <= i0 + i + seqlen_k - seqlen_q) */
    const int64_t diag = (int64_t)i0 + ((int64_t)p.seqlen_k - p.seqlen_q) - j0;
    const bool whole = 64 * c + 64 <= rm && rn == FWD_WG_BN && (!causal || diag + 64 * c >= FWD_WG_BN - 1);
    if (whole)
        fwd_wg_softmax<false>(s, m, l, corr, scale2, i0w, t4, rm, rn, causal, diag);
    else
        fwd_wg_softmax<true>(s, m, l, corr, scale2, i0w, t4, rm, rn, causal, diag);
}

/* O = O corr, and P (s) rounded to the input dtype as the next P V's A fragments. */
template <typename DT, int D>
static __device__ __forceinline__ void fwd_wg_rescale(const float (&s)[64], float (&o)[D / 2],
                                                      uint32_t (&pa)[FWD_WG_BN / 16][4], const float (&corr)[2])
{
#pragma unroll
    for (int e = 0; e < D / 2; e++)
        o[e] = __fmul_rn(o[e], corr[(e >> 1) & 1]);
#pragma unroll
    for (int kk = 0; kk < FWD_WG_BN / 16; kk++)
#pragma unroll
        for (int q = 0; q < 4; q++)
            pa[kk][q] = DT::pack2(s[8 * kk + 2 * q], s[8 * kk + 2 * q + 1]);
}

/* Issue O += P V over one kv-tile (RS wgmma m64nDk16, keys ascending), committed as one
 * group; P's registers and O must not be touched until it has been waited for. */
template <typename DT, int D>
static __device__ __forceinline__ void fwd_wg_pv(float (&o)[D / 2], const uint32_t (&pa)[FWD_WG_BN / 16][4],
                                                 const uint16_t *v_s)
{
    attn_wg_fence(); /* O and P were written by ordinary instructions */
#pragma unroll
    for (int32_t kk = 0; kk < FWD_WG_BN / 16; kk++)
        attn_wg_mma_rs<DT, D, 1>(o, pa[kk], attn_wg_mnmajor(v_s, FWD_WG_BN, 16 * kk, 0), 1);
    attn_wg_commit();
}

/* Keep P's registers live up to here (after the wait): the product reads them
 * asynchronously, so nothing else may be given them while it runs. */
static __device__ __forceinline__ void fwd_wg_pin_a(uint32_t (&pa)[FWD_WG_BN / 16][4])
{
#pragma unroll
    for (int kk = 0; kk < FWD_WG_BN / 16; kk++)
#pragma unroll
        for (int q = 0; q < 4; q++)
            asm volatile("" : "+r"(pa[kk][q])::"memory");
}

/* Producer, cp.async: warps 0-1 copy Q once, then the K tiles; warps 2-3 the V tiles.
 * Two rings, each at its own pace: K(n + 2) is copied as soon as S(n) is done, V(n + 2)
 * once P(n) V(n) is, so neither waits behind the other. */
template <int D>
static __device__ __forceinline__ void fwd_wg_produce(const struct attn_fwd_params &p, fwd_wg_smem<D> &sm,
                                                      int32_t b, int32_t h, int32_t hk, int32_t i0, int32_t rm,
                                                      int32_t n_hi, int32_t v_half)
{
    if (!v_half)
        attn_tc_load_tile<D, FWD_WG_BM, true>(sm.q_smem, static_cast<const uint16_t *>(p.q),
                                              b * p.q_stride[0] + (int64_t)i0 * p.q_stride[1] + h * p.q_stride[2],
                                              p.q_stride[1], rm, 64);
    attn_cp_async_commit();
    const uint16_t *src = static_cast<const uint16_t *>(v_half ? p.v : p.k);
    const int64_t *stride = v_half ? p.v_stride : p.k_stride;
    for (int32_t n = 0; n < n_hi; n++) {
        const int32_t st = n & 1;
        const uint32_t ph = (uint32_t)(n >> 1) & 1u;
        /* the stage is free (at once the first time round) */
        attn_mbar_wait(v_half ? &sm.v_empty[st] : &sm.k_empty[st], ph ^ 1u);
        const int32_t j0 = n * FWD_WG_BN, rn = p.seqlen_k - j0 < FWD_WG_BN ? p.seqlen_k - j0 : FWD_WG_BN;
        attn_tc_load_tile<D, FWD_WG_BN, true>(v_half ? sm.v_smem[st] : sm.k_smem[st], src,
                                              b * stride[0] + (int64_t)j0 * stride[1] + hk * stride[2], stride[1],
                                              rn, 64, v_half ? 64 : 0);
        attn_cp_async_commit();
        if (n == 0 && !v_half) { /* Q's group first */
            attn_cp_async_wait<1>();
            attn_wg_smem_fence();
            attn_mbar_arrive(&sm.q_full);
        }
        attn_cp_async_wait<0>();
        attn_wg_smem_fence(); /* visible to wgmma (the async proxy) */
        attn_mbar_arrive(v_half ? &sm.v_full[st] : &sm.k_full[st]);
    }
    if (n_hi == 0 && !v_half) { /* nobody reads Q; keep the copy from outliving the CTA */
        attn_cp_async_wait<0>();
        attn_mbar_arrive(&sm.q_full);
    }
}

/* Producer, TMA: one thread (lane 0 of warp 0: Q once, then the K tiles; of warp 1: the
 * V tiles). Per tile: wait for the stage to be free, announce the tile's bytes on its
 * full barrier (the phase's one arrival) and issue its D/64 boxes; the phase completes
 * when they have landed. The two rings keep their own pace, as with cp.async. */
template <int D>
static __device__ __forceinline__ void fwd_wg_produce_tma(const fwd_wg_maps &maps, fwd_wg_smem<D> &sm,
                                                          int32_t b, int32_t h, int32_t hk, int32_t i0,
                                                          int32_t n_hi, int32_t v_warp)
{
    constexpr uint32_t tile_bytes = (uint32_t)sizeof(sm.k_smem[0]); /* = D/64 boxes */
    const CUtensorMap *map = v_warp ? &maps.v : &maps.k;
    uint16_t(*ring)[FWD_WG_BN * D] = v_warp ? sm.v_smem : sm.k_smem;
    uint64_t *full = v_warp ? sm.v_full : sm.k_full, *empty = v_warp ? sm.v_empty : sm.k_empty;
    attn_tma_prefetch(map);
    if (!v_warp && n_hi > 0) { /* Q, unless no consumer will wait for it */
        attn_mbar_expect_tx(&sm.q_full, (uint32_t)sizeof(sm.q_smem));
#pragma unroll
        for (int32_t c = 0; c < D / FWD_WG_BOX_COLS; c++)
            attn_tma_load_4d(sm.q_smem + c * FWD_WG_BM * FWD_WG_BOX_COLS, &maps.q, &sm.q_full, FWD_WG_BOX_COLS * c,
                             i0, h, b);
    }
    for (int32_t n = 0; n < n_hi; n++) {
        const int32_t st = n & 1;
        /* the stage is free (at once the first time round: parity 1 is the phase before) */
        attn_mbar_wait(&empty[st], ((uint32_t)(n >> 1) & 1u) ^ 1u);
        attn_mbar_expect_tx(&full[st], tile_bytes);
#pragma unroll
        for (int32_t c = 0; c < D / FWD_WG_BOX_COLS; c++)
            attn_tma_load_4d(ring[st] + c * FWD_WG_BN * FWD_WG_BOX_COLS, map, &full[st], FWD_WG_BOX_COLS * c,
                             n * FWD_WG_BN, hk, b);
    }
}

/* Consumer warpgroup c (0, 1): rows 64 c .. of the q-tile, through all kv-tiles. */
template <typename DT, int D>
static __device__ __forceinline__ void fwd_wg_consume(const struct attn_fwd_params &p, fwd_wg_smem<D> &sm,
                                                      int32_t c, int32_t b, int32_t h, int32_t bh, int32_t i0,
                                                      int32_t rm, int32_t n_hi)
{
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
    uint32_t pa[FWD_WG_BN / 16][4]; /* P(n-1) as RS A fragments, in flight under softmax(n) */
    float corr[2];
    /* Turns (FWD_WG_PINGPONG): n_hi + 1 issue points per consumer (S(0), S(n) with
     * P(n-1) V(n-1), the last P V), each between a wait for the turn and its hand-over.
     * Consumer 0 has the first turn (consumer 1 hands it over unasked), and consumer 1's
     * last hand-over is left out, so every arrival at a turn barrier is waited for. */
    if (n_hi > 0) { /* (else no row of the tile sees a key) */
        if (c == 1)
            fwd_wg_turn_pass(c);
        attn_mbar_wait(&sm.q_full, 0u);
        /* tile 0: nothing to overlap with. The loop's body is straight-line code, so the
         * compiler sees every product waited for before its registers are touched. */
        attn_mbar_wait(&sm.k_full[0], 0u);
        float s[64];
        fwd_wg_turn_wait(c);
        fwd_wg_s<DT, D>(s, sm.q_smem, sm.k_smem[0], c);
        fwd_wg_turn_pass(c);
        attn_wg_wait<0>();
        attn_wg_pin<64>(s);
        attn_mbar_arrive(&sm.k_empty[0]);
        fwd_wg_softmax_tile(p, s, m, l, corr, scale2, i0, i0w, t4, rm, 0, c);
        fwd_wg_rescale<DT, D>(s, o, pa, corr);
    }
    for (int32_t n = 1; n < n_hi; n++) {
        const int32_t st = n & 1, pst = st ^ 1; /* stages of tiles n and n - 1 */
        /* both waits before the products: nothing spins while they are in flight */
        attn_mbar_wait(&sm.k_full[st], (uint32_t)(n >> 1) & 1u);
        attn_mbar_wait(&sm.v_full[pst], (uint32_t)((n - 1) >> 1) & 1u);
        float s[64];
        fwd_wg_turn_wait(c);
        fwd_wg_s<DT, D>(s, sm.q_smem, sm.k_smem[st], c);
        fwd_wg_pv<DT, D>(o, pa, sm.v_smem[pst]);
        fwd_wg_turn_pass(c);
        attn_wg_wait<1>(); /* S has landed; P V may still run */
        attn_wg_pin<64>(s);
        attn_mbar_arrive(&sm.k_empty[st]); /* this thread's reads of K(n) are done */
        fwd_wg_softmax_tile(p, s, m, l, corr, scale2, i0, i0w, t4, rm, n, c);
        attn_wg_wait<0>();
        attn_wg_pin<D / 2>(o);
        fwd_wg_pin_a(pa); /* its registers were read until here */
        attn_mbar_arrive(&sm.v_empty[pst]); /* ... and of V(n - 1) */
        fwd_wg_rescale<DT, D>(s, o, pa, corr);
    }
    if (n_hi > 0) { /* the last tile's P V */
        const int32_t st = (n_hi - 1) & 1;
        attn_mbar_wait(&sm.v_full[st], (uint32_t)((n_hi - 1) >> 1) & 1u);
        fwd_wg_turn_wait(c);
        fwd_wg_pv<DT, D>(o, pa, sm.v_smem[st]);
        if (c == 0)
            fwd_wg_turn_pass(c);
        attn_wg_wait<0>();
        attn_wg_pin<D / 2>(o);
        fwd_wg_pin_a(pa);
        attn_mbar_arrive(&sm.v_empty[st]);
    }

    uint16_t *out_g = static_cast<uint16_t *>(p.out);
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
            attn_st_pair(out_g + at + 8 * j + 2 * t4,
                         DT::pack2(__fmul_rn(o[4 * j + 2 * r], inv), __fmul_rn(o[4 * j + 2 * r + 1], inv)));
        if (t4 == 0)
            p.lse[(int64_t)bh * p.seqlen_q + i0 + i] = none ? INFINITY : fmaf(m[r], ATTN_LN2, logf(lr));
    }
}
#endif /* ATTN_WGMMA */

template <typename DT, int D, bool TMA>
__global__ void __launch_bounds__(FWD_WG_THREADS, 1)
    attn_fwd_wg_kernel(const struct attn_fwd_params p, const __grid_constant__ fwd_wg_maps maps)
{
#if ATTN_WGMMA
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *raw = smem_raw;
    const uint32_t at = attn_smem_u32(raw);
    raw += ((at + FWD_WG_ALIGN - 1) & ~(uint32_t)(FWD_WG_ALIGN - 1)) - at;
    fwd_wg_smem<D> &sm = *reinterpret_cast<fwd_wg_smem<D> *>(raw);

    /* Heaviest tiles first: with a causal mask the last q-tiles see the most keys. */
    const int32_t M = (p.seqlen_q + FWD_WG_BM - 1) / FWD_WG_BM;
    const int32_t mt = M - 1 - (int32_t)(blockIdx.x % (uint32_t)M), bh = (int32_t)(blockIdx.x / (uint32_t)M);
    const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q, hk = h / p.group;
    const int32_t i0 = mt * FWD_WG_BM;
    const int32_t rm = p.seqlen_q - i0 < FWD_WG_BM ? p.seqlen_q - i0 : FWD_WG_BM;
    /* kv-tiles: all keys, or under a causal mask those up to the last row's diagonal */
    int64_t j_end = p.seqlen_k;
    if (p.geo.mask == SCHED_MASK_CAUSAL) {
        const int64_t last = (int64_t)i0 + rm - 1 + ((int64_t)p.seqlen_k - p.seqlen_q) + 1;
        if (last < j_end)
            j_end = last > 0 ? last : 0;
    }
    const int32_t n_hi = (int32_t)((j_end + FWD_WG_BN - 1) / FWD_WG_BN);

    if (threadIdx.x == 0) {
        const uint32_t loaders = TMA ? 1u : 64u; /* arrivals that fill a stage */
        attn_mbar_init(&sm.q_full, loaders);
        for (int s = 0; s < FWD_WG_STAGES; s++) {
            attn_mbar_init(&sm.k_full[s], loaders);
            attn_mbar_init(&sm.v_full[s], loaders);
            attn_mbar_init(&sm.k_empty[s], 256);
            attn_mbar_init(&sm.v_empty[s], 256);
        }
        if (TMA)
            attn_mbar_init_fence(); /* the TMA unit completes bytes on them too */
    }
    __syncthreads(); /* the barriers are set up before anyone uses them */

    /* the warpgroup through a shuffle from lane 0: warp-uniform to the compiler */
    const int32_t wg = __shfl_sync(0xffffffffu, (int32_t)(threadIdx.x >> 7), 0);
    if (wg == 0) {
        if constexpr (TMA) {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(FWD_WG_LOAD_REGS_TMA) : "memory");
            const int32_t w = __shfl_sync(0xffffffffu, (int32_t)(threadIdx.x >> 5), 0);
            if (w < 2 && (threadIdx.x & 31u) == 0) /* warp 0: Q, K; warp 1: V */
                fwd_wg_produce_tma<D>(maps, sm, b, h, hk, i0, n_hi, w);
        } else {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(FWD_WG_LOAD_REGS_CP) : "memory");
            const int32_t v_half = __shfl_sync(0xffffffffu, (int32_t)(threadIdx.x >> 6), 0); /* warps 2, 3 */
            fwd_wg_produce<D>(p, sm, b, h, hk, i0, rm, n_hi, v_half);
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(TMA ? FWD_WG_MMA_REGS_TMA : FWD_WG_MMA_REGS_CP)
                 : "memory");
    fwd_wg_consume<DT, D>(p, sm, wg - 1, b, h, bh, i0, rm, n_hi);
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
 * boxes of 64 x 128 x 1 x 1 with 128-byte swizzle. False (no map: the caller runs the
 * cp.async kernel) where TMA cannot describe the view: a base or a stride (of a dim longer
 * than 1) that is not a positive multiple of 16 bytes below 2^40, or an encoder refusal. A
 * dim of length 1 is never stepped along, so its stride is any legal value. seqlen being
 * its own dim, rows past it are out of bounds (zeros), whatever lies there in memory. */
static bool fwd_wg_map(CUtensorMap *map, PFN_cuTensorMapEncodeTiled_v12000 enc, const void *data, int32_t D,
                       int32_t batch, int32_t seqlen, int32_t heads, const int64_t stride[3])
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
    const cuuint32_t box[4] = {FWD_WG_BOX_COLS, FWD_WG_BN, 1, 1}, step[4] = {1, 1, 1, 1};
    return enc(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void *>(data), dim, bytes, box, step,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename DT, int D>
static cudaError_t fwd_wg_launch(const struct attn_fwd_params *p, int allow_tma, int *ret_tma, cudaStream_t stream)
{
    const uint32_t blocks = (uint32_t)((p->seqlen_q + FWD_WG_BM - 1) / FWD_WG_BM) * (uint32_t)p->geo.bh;
    fwd_wg_maps maps;
    memset(&maps, 0, sizeof maps);
    const int32_t batch = p->geo.batch, heads_kv = p->heads_q / p->group;
    const PFN_cuTensorMapEncodeTiled_v12000 enc = allow_tma ? fwd_wg_encoder() : NULL;
    const bool tma = enc && fwd_wg_map(&maps.q, enc, p->q, D, batch, p->seqlen_q, p->heads_q, p->q_stride) &&
                     fwd_wg_map(&maps.k, enc, p->k, D, batch, p->seqlen_k, heads_kv, p->k_stride) &&
                     fwd_wg_map(&maps.v, enc, p->v, D, batch, p->seqlen_k, heads_kv, p->v_stride);
    if (tma)
        attn_fwd_wg_kernel<DT, D, true><<<blocks, FWD_WG_THREADS, fwd_wg_kern<D>::bytes, stream>>>(*p, maps);
    else
        attn_fwd_wg_kernel<DT, D, false><<<blocks, FWD_WG_THREADS, fwd_wg_kern<D>::bytes, stream>>>(*p, maps);
    if (ret_tma)
        *ret_tma = tma;
    return cudaGetLastError();
}

template <typename DT, int D>
static cudaError_t fwd_wg_attr(size_t smem_optin)
{
    if (fwd_wg_kern<D>::bytes > smem_optin)
        return cudaSuccess; /* unusable here: the host runs v2's forward */
    cudaError_t err = cudaFuncSetAttribute(attn_fwd_wg_kernel<DT, D, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)fwd_wg_kern<D>::bytes);
    if (err != cudaSuccess)
        return err;
    return cudaFuncSetAttribute(attn_fwd_wg_kernel<DT, D, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)fwd_wg_kern<D>::bytes);
}

cudaError_t cuattn__fwd_wg_init(size_t smem_optin)
{
    cudaError_t err;
    if ((err = fwd_wg_attr<attn_bf16, 64>(smem_optin)) != cudaSuccess ||
        (err = fwd_wg_attr<attn_bf16, 128>(smem_optin)) != cudaSuccess ||
        (err = fwd_wg_attr<attn_f16, 64>(smem_optin)) != cudaSuccess ||
        (err = fwd_wg_attr<attn_f16, 128>(smem_optin)) != cudaSuccess)
        return err;
    (void)fwd_wg_encoder(); /* resolve it now, not inside a call */
    return cudaSuccess;
}

size_t cuattn__fwd_wg_smem_bytes(int32_t head_dim)
{
    return head_dim == 64 ? fwd_wg_kern<64>::bytes : head_dim == 128 ? fwd_wg_kern<128>::bytes : 0;
}

cudaError_t cuattn__fwd_wg_launch(const struct attn_fwd_params *p, enum dtype_kind dt, int32_t head_dim,
                                  int allow_tma, int *ret_tma, cudaStream_t stream)
{
    const int bf = dt == DTYPE_BF16;
    if (ret_tma)
        *ret_tma = 0;
    switch (head_dim) {
    case 64:
        return bf ? fwd_wg_launch<attn_bf16, 64>(p, allow_tma, ret_tma, stream)
                  : fwd_wg_launch<attn_f16, 64>(p, allow_tma, ret_tma, stream);
    case 128:
        return bf ? fwd_wg_launch<attn_bf16, 128>(p, allow_tma, ret_tma, stream)
                  : fwd_wg_launch<attn_f16, 128>(p, allow_tma, ret_tma, stream);
    default:
        return cudaErrorInvalidValue;
    }
}
