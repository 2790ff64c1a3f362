// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_vl.cu - sliding windows, softcap and packed variable-length batches on v2's
 * tensor-core kernels (mma.sync; sm_80 and sm_90): the forward and the deterministic
 * backward as separate template instantiations (VL) of v2's code (fwd_tc.cuh, bwd_mma.cuh),
 * so the dense kernels stay what they were; and on sm_90 with impl v3 on v3's: the forward
 * on its warp-specialised kernel (fwd_wg.cuh, VL likewise: attn_fwd_vl_wg_kernel, TMA for
 * dense batches, cp.async for packed ones) and the backward on its wgmma step
 * (bwd_wgmma.cuh, VL likewise; 64 x 128 tiles: attn_bwd_vl_wg_kernel). A file of its own because it compiles the
 * schedule library's band arithmetic into device code (SCHED_DEVICE_BAND: sched.h keeps it
 * out of every other file, where it made the dense backward spill).
 *
 * Every request is cut into sequences, each a dense problem of batch 1 (a packed batch:
 * its cu_seqlens rows; a dense batch with a window or softcap: batch element b), with its
 * own lengths, normalised window and schedule (docs/schedules.md, "Packed batches"). The
 * host lists the sequences that have work in a table (struct attn_vl_seq); a CTA or job
 * finds its sequence there by binary search, and thread 0 writes a copy of the launch
 * params into shared memory that describes that sequence alone (pointers moved to its
 * first rows, its lengths and schedule). The shared step code then runs on that copy
 * unchanged but for the masks (the window's two sides) and the softcap (scores
 * cap tanh(scale q.k / cap); dS through the tanh's derivative 1 - tanh^2).
 *
 *   forward     one CTA per (128-row q-tile, head) of each sequence, sequence by sequence
 *               (v3 on a dense batch through TMA: those tiles in that order, taken by a CTA
 *               an SM, attn_fwd_vl_wgp_kernel); kv-tiles from the one holding the tile's
 *               first row's first key to the one holding its last row's last (v2: 64 keys,
 *               v3: 128).
 *   backward    preprocess (Dsum, and LSE moved into the scratch layout), the persistent
 *               kernel taking jobs in dispatch order (sequence after sequence, each in its
 *               schedule's order; ranks from sched_rank on the sequence's schedule),
 *               postprocess (dQ), and dK/dV of sequences without queries (zero) and of GQA
 *               groups (the per-q-head sums, ascending).
 * The dQ order of every tile is the sequence's schedule's, fixed by the ranks; nothing
 * depends on the grid or on who takes which job, so the bits do not either. There is no
 * interleaved mode: a shift schedule runs at least as many CTAs as a chunk has jobs
 * (the host raises the grid to that; attn_cuda.c refuses a W the GPU cannot hold at once).
 * Rows that see no key get O = 0, LSE = +inf, and zero gradients (P = 0 there).
 */
#define SCHED_DEVICE_BAND 1

#include "kernels/cuda/attn_cuda_int.h"
#include "kernels/cuda/attn_wgmma.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/cuda/bwd_mma.cuh"
#include "kernels/cuda/bwd_rows.cuh"
#include "kernels/cuda/bwd_wgmma.cuh"
#include "kernels/cuda/fwd_tc.cuh"
#include "kernels/cuda/fwd_wg.cuh"

/* The last i in [0, n) whose key(i) <= x, for keys ascending in i (0 when none is: the
 * callers' key(0) is their least). */
template <typename Key>
static __device__ __forceinline__ int32_t vl_last_le(int32_t n, Key key, int32_t x)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const int32_t mid = (lo + hi + 1) >> 1;
        if (key(mid) <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The last of n table entries whose `first` is <= x (entry 0 has first 0). */
static __device__ __forceinline__ int32_t vl_entry(const struct attn_vl_seq *t, int32_t n, int32_t x)
{
    return vl_last_le(n, [t](int32_t i) { return t[i].first; }, x);
}

/* The sequence b in [0, batch) that holds row t: cu[b] <= t < cu[b + 1] (the last b with
 * cu[b] <= t, which skips empty sequences). */
static __device__ __forceinline__ int32_t vl_seq_of(const int32_t *cu, int32_t batch, int32_t t)
{
    return vl_last_le(batch, [cu](int32_t i) { return cu[i]; }, t);
}

/* ---- forward ------------------------------------------------------------------------- */

static_assert(FWD_TC_BM == FWD_WG_BM, "both forwards take 128-row q-tiles: one table serves both");

/* Thread 0: the params of CTA blockIdx.x's sequence into q (tensors moved to its first rows,
 * its lengths and geometry; seqlen_k 0 for a sequence without keys) and mb its q-tile (the
 * heaviest, last, tiles of a sequence first), head and view batch. */
static __device__ __forceinline__ int32_t fwd_vl_enter(const struct attn_fwd_params &p, struct attn_fwd_params &q,
                                                       int32_t (&mb)[3])
{
    const int32_t entry = vl_entry(p.vl, p.vl_count, (int32_t)blockIdx.x);
    const struct attn_vl_seq *e = p.vl + entry;
    q = p;
    const int64_t oq = (int64_t)e->vb * p.q_stride[0] + (int64_t)e->vq * p.q_stride[1];
    const int64_t oo = (int64_t)e->vb * p.out_stride[0] + (int64_t)e->vq * p.out_stride[1];
    const int64_t ok = (int64_t)e->vb * p.k_stride[0] + (int64_t)e->vk * p.k_stride[1];
    const int64_t ov = (int64_t)e->vb * p.v_stride[0] + (int64_t)e->vk * p.v_stride[1];
    q.q = static_cast<const uint16_t *>(p.q) + oq;
    q.out = static_cast<uint16_t *>(p.out) + oo;
    q.k = static_cast<const uint16_t *>(p.k) + ok;
    q.v = static_cast<const uint16_t *>(p.v) + ov;
    q.lse = p.lse + e->lse0;
    q.geo = e->s;
    q.seqlen_q = e->s.seqlen_q;
    q.seqlen_k = e->nokeys ? 0 : e->s.seqlen_k;
    const int32_t M = (e->s.seqlen_q + FWD_TC_BM - 1) / FWD_TC_BM, lb = (int32_t)blockIdx.x - e->first;
    mb[0] = M - 1 - lb % M;
    mb[1] = lb / M;
    mb[2] = e->vb;
    return entry;
}

template <int D>
struct fwd_vl_smem {
    fwd_tc_smem<D> t;
    struct attn_fwd_params prm; /* the CTA's sequence */
    int32_t mb[3];              /* its q-tile, head and view batch */
};

template <typename DT, int D>
__global__ void __launch_bounds__(FWD_TC_THREADS, 2) attn_fwd_vl_kernel(const __grid_constant__ struct attn_fwd_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    fwd_vl_smem<D> &sm = *reinterpret_cast<fwd_vl_smem<D> *>(smem_raw);
    if (threadIdx.x == 0)
        fwd_vl_enter(p, sm.prm, sm.mb);
    __syncthreads(); /* the sequence's params are visible to all */
    fwd_tc_body<DT, D, true>(sm.prm, sm.t, sm.mb[0], sm.mb[1]);
}

/* The kv-tiles of a q-tile's band (the persistent v3 forward below): rows i0 .. i0 + rm - 1
 * of a sequence of seqlen_q queries and seqlen_k keys with the normalised window (wl, wr),
 * from the tile that holds the first row's first key to the one that holds the last row's
 * last; n_lo == n_hi where no row sees a key. The one-tile kernel forms the same values in
 * line: called there, this function made ptxas spill 12/16 bytes at head dim 128. */
template <int D>
static __device__ __forceinline__ void fwd_vl_band(int32_t seqlen_q, int32_t seqlen_k, int32_t wl, int32_t wr,
                                                   int32_t i0, int32_t rm, int32_t &n_lo, int32_t &n_hi)
{
    constexpr int32_t BN = FWD_WG_BN_OF(D);
    const int64_t off = (int64_t)seqlen_k - seqlen_q;
    int64_t j_lo = 0, j_hi = seqlen_k;
    if (wl >= 0 && (int64_t)i0 + off - wl > 0)
        j_lo = (int64_t)i0 + off - wl;
    if (wr >= 0 && (int64_t)i0 + rm + off + wr < j_hi)
        j_hi = (int64_t)i0 + rm + off + wr;
    n_lo = (int32_t)(j_lo / BN);
    n_hi = j_hi > j_lo ? (int32_t)((j_hi + BN - 1) / BN) : n_lo;
}

/* v3's forward (fwd_wg.cuh, sm_90a) on the table: one CTA per (128-row q-tile, head) of
 * each sequence as attn_fwd_vl_kernel, the producer and consumers of the dense kernel on
 * the sequence's params, over the kv-tiles of the q-tile's band (fwd_wg.cuh's VL). TMA
 * loads for dense batches through maps of the whole view (the sequence is batch element
 * mb[2], rows from 0), for packed ones through each sequence's own maps (p.vl_maps: a map
 * of the whole view would read the next sequence's rows past its end, where cp.async and
 * these maps give zeros). */
template <int D>
struct fwd_vl_wg_smem {
    fwd_wg_smem<D> t;           /* first: the kernel aligns the block to FWD_WG_ALIGN */
    struct attn_fwd_params prm; /* the CTA's sequence */
    int32_t mb[3];              /* its q-tile, head and view batch */
    /* its window and softcap terms: read from here where the consumers need them, which
     * keeps 4 registers free for the products (in registers, the TMA instance spilled) */
    fwd_wg_vl vt;
    const fwd_wg_maps *maps; /* the maps the producer reads: the sequence's or the view's */
};

template <typename DT, int D, bool TMA>
__global__ void __launch_bounds__(FWD_WG_THREADS, 1)
    attn_fwd_vl_wg_kernel(const struct attn_fwd_params p, const __grid_constant__ fwd_wg_maps maps)
{
#if ATTN_WGMMA
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t raw_at = attn_smem_u32(smem_raw);
    fwd_vl_wg_smem<D> &sm = *reinterpret_cast<fwd_vl_wg_smem<D> *>(
        smem_raw + (((raw_at + FWD_WG_ALIGN - 1) & ~(uint32_t)(FWD_WG_ALIGN - 1)) - raw_at));
    if (threadIdx.x == 0) {
        const int32_t entry = fwd_vl_enter(p, sm.prm, sm.mb);
        sm.maps = &maps;
        if (p.vl_maps) { /* the sequence's own maps: its rows from 0, batch 0 */
            sm.maps = static_cast<const fwd_wg_maps *>(p.vl_maps) + entry;
            sm.mb[2] = 0;
        }
        fwd_wg_init<D, TMA>(sm.t);
        const struct attn_fwd_params &q = sm.prm;
        sm.vt.wl = q.geo.wl;
        sm.vt.wr = q.geo.wr;
        sm.vt.cap2 = q.softcap > 0.0f ? __fmul_rn(q.softcap, ATTN_LOG2E) : 0.0f;
        sm.vt.capsc = q.softcap > 0.0f ? __fdiv_rn(q.scale, q.softcap) : 0.0f;
    }
    __syncthreads(); /* the sequence's params, its terms and the barriers are ready for all */
    const struct attn_fwd_params &q = sm.prm;
    const int32_t i0 = sm.mb[0] * FWD_WG_BM, h = sm.mb[1];
    const int32_t rm = q.seqlen_q - i0 < FWD_WG_BM ? q.seqlen_q - i0 : FWD_WG_BM;
    /* the band's keys: from the first row's first to the last row's last */
    const int64_t off = (int64_t)q.seqlen_k - q.seqlen_q;
    int64_t j_lo = 0, j_hi = q.seqlen_k;
    if (q.geo.wl >= 0 && (int64_t)i0 + off - q.geo.wl > 0)
        j_lo = (int64_t)i0 + off - q.geo.wl;
    if (q.geo.wr >= 0 && (int64_t)i0 + rm + off + q.geo.wr < j_hi)
        j_hi = (int64_t)i0 + rm + off + q.geo.wr;
    const int32_t n_lo = (int32_t)(j_lo / FWD_WG_BN_OF(D));
    const int32_t n_hi = j_hi > j_lo ? (int32_t)((j_hi + FWD_WG_BN_OF(D) - 1) / FWD_WG_BN_OF(D)) : n_lo;
    fwd_wg_run<DT, D, TMA>(q, *sm.maps, sm.t, 0, h, h, i0, rm, n_lo, n_hi, sm.mb[2], sm.vt);
#else
    (void)p;
    (void)maps;
    __trap(); /* sm_80 never runs v3 */
#endif
}

/* v3's forward of a dense batch with a window or softcap, through TMA (the view's maps):
 * persistent, as the dense kernel (fwd_wg_run_tiles) - a CTA an SM, its K/V rings and their
 * phases running on across q-tiles and the next tile's Q loading once the consumers' last S
 * product has read this one's, while they still rescale and store - taking the one-tile
 * kernel's q-tiles (numbered as there: batch element, head, the last q-tile first) from a
 * counter, as the hardware hands that kernel's CTAs to free SMs: first tile blockIdx.x,
 * then gridDim.x + the counter's next value. Taken in turn (tile blockIdx.x + k gridDim.x)
 * they would be uneven where a window's first q-tiles see fewer keys (a model of the 16k
 * windows: 4k -5%, 8k -21% against a CTA a tile; taken from the counter +6-9%, +4-5%). The
 * Q/K loader takes the CTA's tiles: tile k's index into slot k % 2 (tile_full), which the V
 * loader and the consumers read and free at once (tile_empty); the loader writes a slot again
 * once its last index has been read. In a dense batch every sequence has the same lengths
 * and normalised window, so a tile's place is arithmetic (no table look-up) and the window
 * is entry 0's. A tile's loads, products and stores are the one-tile kernel's - the same
 * kv-tiles in the same order, the same O and LSE addresses - whichever CTA runs it and
 * when, so the bits are too. Why: a CTA a tile paid ~7.8 us a q-tile besides its kv-tiles
 * (launch, set-up, Q's and the first K's latency, the rings' fill and drain; fitted to the
 * H100's kernels-alone TFLOPS at windows 1k and 4k), the dense persistent kernel ~2.5-3.2
 * (bench/results/window-trial-2026-12-07.md). Packed batches keep a CTA a tile: their
 * tiles' params are the table's (trial vlpersist took them from a host plan by bulk copies,
 * and ran slower). */
template <int D>
struct fwd_vl_wgp_smem {
    fwd_wg_smem<D> t;        /* first: the kernel aligns the block to FWD_WG_ALIGN */
    fwd_wg_vl vt;            /* the batch's window and softcap terms (read where the consumers need them) */
    int32_t tile_smem[2];    /* slot k % 2: the CTA's tile k (>= vl_blocks: no more) */
    uint64_t tile_full[2];   /* the slot holds its tile (the Q/K loader's arrival) */
    uint64_t tile_empty[2];  /* its readers have read it (FWD_VL_TILE_READERS arrivals) */
};
/* A slot's readers: the V loader and every consumer thread. */
#define FWD_VL_TILE_READERS (1 + FWD_WG_THREADS - 128)

/* The one-tile kernel's tile idx of a dense batch (M q-tiles a head): rows i0 .. i0 + rm - 1
 * of head h of batch element b (bh = b heads + h), the band's kv-tiles n_lo .. n_hi - 1. */
struct fwd_vl_tile {
    int32_t b, h, bh, i0, rm, n_lo, n_hi;
};

template <int D>
static __device__ __forceinline__ fwd_vl_tile fwd_vl_tile_of(const struct attn_fwd_params &p, const fwd_wg_vl &vt,
                                                             int32_t M, int32_t idx)
{
    fwd_vl_tile T;
    T.bh = (int32_t)((uint32_t)idx / (uint32_t)M);
    T.b = T.bh / p.heads_q;
    T.h = T.bh - T.b * p.heads_q;
    T.i0 = (M - 1 - (int32_t)((uint32_t)idx % (uint32_t)M)) * FWD_WG_BM;
    T.rm = p.seqlen_q - T.i0 < FWD_WG_BM ? p.seqlen_q - T.i0 : FWD_WG_BM;
    fwd_vl_band<D>(p.seqlen_q, p.seqlen_k, vt.wl, vt.wr, T.i0, T.rm, T.n_lo, T.n_hi);
    return T;
}

#if ATTN_WGMMA
/* A reader of the CTA's tile k: waits for its slot, reads the index and frees the slot. */
template <int D>
static __device__ __forceinline__ int32_t fwd_vl_tile_read(fwd_vl_wgp_smem<D> &sm, int32_t k)
{
    const int32_t s = k & 1;
    attn_mbar_wait(&sm.tile_full[s], (uint32_t)(k >> 1) & 1u);
    const int32_t idx = *static_cast<volatile int32_t *>(&sm.tile_smem[s]);
    attn_mbar_arrive(&sm.tile_empty[s]); /* (a release: the read comes first) */
    return idx;
}
#endif

template <typename DT, int D>
__global__ void __launch_bounds__(FWD_WG_THREADS, 1)
    attn_fwd_vl_wgp_kernel(const struct attn_fwd_params p, const __grid_constant__ fwd_wg_maps maps)
{
#if ATTN_WGMMA
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t raw_at = attn_smem_u32(smem_raw);
    fwd_vl_wgp_smem<D> &sm = *reinterpret_cast<fwd_vl_wgp_smem<D> *>(
        smem_raw + (((raw_at + FWD_WG_ALIGN - 1) & ~(uint32_t)(FWD_WG_ALIGN - 1)) - raw_at));
    if (threadIdx.x == 0) {
        fwd_wg_init<D, true>(sm.t);
        for (int s = 0; s < 2; s++) {
            attn_mbar_init(&sm.tile_full[s], 1);
            attn_mbar_init(&sm.tile_empty[s], FWD_VL_TILE_READERS);
        }
        sm.vt.wl = p.vl->s.wl; /* (entry 0's: every sequence's) */
        sm.vt.wr = p.vl->s.wr;
        sm.vt.cap2 = p.softcap > 0.0f ? __fmul_rn(p.softcap, ATTN_LOG2E) : 0.0f;
        sm.vt.capsc = p.softcap > 0.0f ? __fdiv_rn(p.scale, p.softcap) : 0.0f;
    }
    __syncthreads(); /* the barriers and the batch's terms are ready for all */
    const int32_t M = (p.seqlen_q + FWD_WG_BM - 1) / FWD_WG_BM, tiles = p.vl_blocks;
    /* the warpgroup through a shuffle from lane 0: warp-uniform to the compiler */
    const int32_t wg = __shfl_sync(0xffffffffu, (int32_t)(threadIdx.x >> 7), 0);
    int32_t t0 = 0, qk = 0; /* the rings' count and Q's phase, carried across tiles on every side */
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(FWD_WG_LOAD_REGS_TMA_VL) : "memory");
        const int32_t w = __shfl_sync(0xffffffffu, (int32_t)(threadIdx.x >> 5), 0);
        if ((threadIdx.x & 31u) != 0)
            return;
        if (w == 0) /* warp 0: the tiles, Q, K (a loop of its own: one shared with V's spilled 24 bytes) */
            for (int32_t k = 0;; k++) {
                const int32_t s = k & 1; /* tile k into its slot, once the slot's last index has been read */
                attn_mbar_wait(&sm.tile_empty[s], ((uint32_t)(k >> 1) & 1u) ^ 1u); /* at once the first time round */
                const int32_t idx = k == 0 ? (int32_t)blockIdx.x : (int32_t)gridDim.x + atomicAdd(p.vl_next, 1);
                sm.tile_smem[s] = idx;
                attn_mbar_arrive(&sm.tile_full[s]); /* (a release: the index's store comes first) */
                if (idx >= tiles)
                    break;
                const fwd_vl_tile T = fwd_vl_tile_of<D>(p, sm.vt, M, idx);
                fwd_wg_produce_tma<D, true>(maps, sm.t, T.b, T.h, T.h / p.group, T.i0, T.n_lo, T.n_hi, 0, t0, qk);
                t0 += T.n_hi - T.n_lo;
                qk += T.n_hi > T.n_lo;
            }
        else if (w == 1) /* warp 1: V */
            for (int32_t k = 0;; k++) {
                const int32_t idx = fwd_vl_tile_read<D>(sm, k);
                if (idx >= tiles)
                    break;
                const fwd_vl_tile T = fwd_vl_tile_of<D>(p, sm.vt, M, idx);
                fwd_wg_produce_tma<D, true>(maps, sm.t, T.b, T.h, T.h / p.group, T.i0, T.n_lo, T.n_hi, 1, t0);
                t0 += T.n_hi - T.n_lo;
            }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(FWD_WG_MMA_REGS_TMA_VL) : "memory");
    for (int32_t k = 0;; k++) {
        const int32_t idx = fwd_vl_tile_read<D>(sm, k);
        if (idx >= tiles)
            break;
        const fwd_vl_tile T = fwd_vl_tile_of<D>(p, sm.vt, M, idx);
        fwd_wg_consume<DT, D, true, true>(p, sm.t, wg - 1, T.b, T.h, T.bh, T.i0, T.rm, T.n_lo, T.n_hi, sm.vt, t0,
                                          qk);
        t0 += T.n_hi - T.n_lo;
        qk += T.n_hi > T.n_lo;
    }
#else
    (void)p;
    (void)maps;
    __trap(); /* sm_80 never runs v3 */
#endif
}

/* ---- backward ------------------------------------------------------------------------ */

template <int D, int BN>
struct bwd_vl_smem : bwd_tc_smem<D, BN> {
    struct attn_bwd_params prm; /* the job's sequence */
    int32_t local_job;          /* the job's index in its sequence's dispatch order */
};

/* Thread 0: point sm.prm at the sequence of dispatch index `job` (SM: bwd_vl_smem or
 * bwd_vl_wg_smem). */
template <int D, typename SM>
static __device__ __forceinline__ const struct attn_vl_seq *bwd_vl_enter(const struct attn_bwd_params &p, SM &sm,
                                                                         int32_t job)
{
    const struct attn_vl_seq *e = p.vl + vl_entry(p.vl, p.vl_count, job);
    struct attn_bwd_params &q = sm.prm;
    const int64_t rq = (int64_t)p.heads_q * e->q0, rk = (int64_t)p.heads_q * e->k0;
    q.q = static_cast<const uint16_t *>(p.q) + (int64_t)e->vb * p.q_stride[0] + (int64_t)e->vq * p.q_stride[1];
    q.dout = static_cast<const uint16_t *>(p.dout) + (int64_t)e->vb * p.dout_stride[0] +
             (int64_t)e->vq * p.dout_stride[1];
    q.k = static_cast<const uint16_t *>(p.k) + (int64_t)e->vb * p.k_stride[0] + (int64_t)e->vk * p.k_stride[1];
    q.v = static_cast<const uint16_t *>(p.v) + (int64_t)e->vb * p.v_stride[0] + (int64_t)e->vk * p.v_stride[1];
    q.dk = static_cast<uint16_t *>(p.dk) + (int64_t)e->vb * p.dk_stride[0] + (int64_t)e->vk * p.dk_stride[1];
    q.dv = static_cast<uint16_t *>(p.dv) + (int64_t)e->vb * p.dv_stride[0] + (int64_t)e->vk * p.dv_stride[1];
    q.lse = p.lse_vl + rq;
    q.dsum = p.dsum + rq;
    q.dq_acc = p.dq_acc + rq * D;
    q.dk_acc = p.dk_acc ? p.dk_acc + rk * D : NULL;
    q.dv_acc = p.dv_acc ? p.dv_acc + rk * D : NULL;
    q.counter = p.counter + e->tile0;
    q.seqlen_q = e->s.seqlen_q;
    q.seqlen_k = e->s.seqlen_k;
    q.s = e->s;
    sm.local_job = job - e->first;
    return e;
}

/* The persistent mode of attn_bwd_tc.cu (v2: no writer warp), job by job over the table:
 * the same steps, turns, deferral and prefetch, on the job's sequence's params. */
template <typename DT, int D, int BN>
__global__ void __launch_bounds__(ATTN_THREADS, 1) attn_bwd_vl_kernel(const __grid_constant__ struct attn_bwd_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    typedef bwd_vl_smem<D, BN> SM;
    if constexpr (!ATTN_FITS_ARCH(sizeof(SM))) { /* not built where it cannot run */
        (void)p;
        __trap();
        return;
    }
    SM &sm = *reinterpret_cast<SM *>(smem_raw);
    const struct attn_bwd_params &q = sm.prm;
    const struct sched *s = &sm.prm.s;
    bwd_tc_regs<D, BN> x;
    if (threadIdx.x == 0)
        sm.prm = p;
    for (;;) {
        __syncthreads(); /* every read of the last job's params (and of the flag) is done */
        if (threadIdx.x == 0) {
            const int32_t job = atomicAdd(p.job_next, 1);
            sm.flag_smem = job;
            if (job < p.vl_jobs)
                bwd_vl_enter<D>(p, sm, job);
        }
        __syncthreads(); /* the job and its sequence's params are visible to every thread */
        if (sm.flag_smem >= p.vl_jobs) {
#if BWD_TC_BULK
            if (threadIdx.x == 0) /* atomic leaves its last reduction in flight: finish it */
                asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
            return;
        }
        const struct sched_job J = sched_job_taken(s, sm.local_job);
        for (int32_t stage = 0; stage < sched_job_stages(s, J.k); stage++) {
            const int32_t n = sched_job_unit(s, J.k, stage);
            const int32_t steps = sched_unit_steps(s, n);
            bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, 0, steps);
            bwd_tc_load_kv<D, BN, false>(q, sm, J.bh, n); /* its barrier publishes the table too */
            bwd_tc_zero_kv<D, BN>(x);
            int32_t m = steps > 0 ? sm.visit_smem[0] : 0, buf = 0, base = 0;
            int loaded = 0;
            int32_t *pend_ctr = NULL, pend_rank = -1; /* a turn still to pass on */
            for (int32_t step = 0; step < steps; step++) {
                if (step + 1 - base > BWD_TC_TAB) { /* the successor's entry is past the table */
                    base = step;
                    bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, base, steps);
                    __syncthreads(); /* the refill is complete before anyone reads it */
                }
                const int32_t next_m = step + 1 < steps ? sm.visit_smem[step + 1 - base] : -1;
                const int32_t rank = threadIdx.x == 0 ? sm.rank_smem[step - base] : -1;
                int32_t *ctr = q.counter + (int64_t)J.bh * s->m_tiles + m;
                const int take = threadIdx.x == 0 && s->kind != SCHED_ATOMIC;
                bwd_tc_step<DT, D, BN, true>(q, sm, x, J.bh, n, m, buf, loaded, next_m, pend_ctr, pend_rank);
                pend_ctr = NULL;
                if (take)
                    bwd_tc_take_turn(ctr, rank);
                const int defer = s->kind != SCHED_ATOMIC && q.defer && next_m >= 0;
#if BWD_TC_BULK
                if (threadIdx.x == 0)
                    bwd_tc_bulk_wait_read(); /* the last reduction has read the staging buffer */
#endif
                attn_cp_async_wait<0>(); /* the prefetch for the next step has landed ... */
                __syncthreads(); /* ... and is visible to all; our turn has come; every warp is
                                    done with the step's buffer, P, dS and K */
#if BWD_TC_BULK
                bwd_tc_stage_dq<D, BN>(sm.dq_smem, x);
                __syncthreads(); /* the staged tile is complete before thread 0 hands it on */
                if (threadIdx.x == 0) {
                    bwd_tc_bulk_add<D>(q, sm.dq_smem, J.bh, m);
                    if (s->kind != SCHED_ATOMIC && !defer)
                        bwd_tc_pass_on(ctr, rank);
                }
#else
                bwd_tc_add_dq<D, BN>(q, x, J.bh, m);
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
            bwd_tc_store_unit<DT, D, BN, false>(q, x, J.bh, n);
            __syncthreads(); /* K, V and the table are free before the next unit loads them */
        }
    }
}

/* ---- backward on v3's step (wgmma, sm_90a) -------------------------------------------
 *
 * attn_bwd_tc.cu's v3 persistent kernel (64 x 128 tiles, bwd_wgmma.cuh's step with VL, a
 * third warpgroup whose one thread is the dQ writer), job by job over the table as
 * attn_bwd_vl_kernel: the compute warps run the job's sequence's steps on sm.prm and hand
 * each dQ partial over with the tile's place in the ticket (bwd_wg_hand_at), so the writer
 * never reads a sequence's params, which the next job replaces. The ranks are the
 * sequence's schedule's (bwd_tc_fill_visits), the additions one bulk reduction each in
 * rank order, as in the v2 kernel above: the same orders, so the same determinism, grid
 * and packing independence (the bits are v3's, not v2's: the tensor cores group their
 * sums differently). kv-tiles no query of the band sees have no steps: dK, dV 0 without
 * loading K, V. At head dim 128 a sequence's whole q-tiles come by TMA (bwd_wg_qmaps, the
 * sequence's place in the call's views in sm.view), its last partial one by cp.async. */
template <int D>
struct bwd_vl_wg_smem : bwd_wg_smem<D> {
    int64_t tile_at[BWD_WG_DQBUFS][2]; /* per staging buffer: counter index, dQacc offset */
    struct attn_bwd_params prm;        /* the job's sequence */
    int32_t local_job;                 /* the job's index in its sequence's dispatch order */
    int32_t view[3];                   /* its view batch, first q row and first k row (the TMA maps') */
    /* trial unitlap (bwd_vl_wg_lap; in registers, the kernel spilled): */
    struct sched_job job_smem;         /* the job */
    int32_t wait_end_smem;             /* thread 0's wait end of the job (the drain rule) */
};

#if BWD_TC_BULK
/* Thread 0: make dispatch index `job` the CTA's job (flag_smem), and where it is one, point
 * the params and the view at its sequence. */
template <int D>
static __device__ __forceinline__ void bwd_vl_wg_take(const struct attn_bwd_params &p, bwd_vl_wg_smem<D> &sm,
                                                      int32_t job)
{
    sm.flag_smem = job;
    if (job < p.vl_jobs) {
        const struct attn_vl_seq *e = bwd_vl_enter<D>(p, sm, job);
        sm.view[0] = e->vb;
        sm.view[1] = e->vq;
        sm.view[2] = e->vk;
        sm.job_smem = sched_job_taken(&sm.prm.s, sm.local_job);
        sm.wait_end_smem = job - sm.local_job + sched_wait_end(&sm.prm.s, sm.local_job);
    }
}

/* Trial unitlap (BWD_WG_DKV_LAP, bwd_wgmma.cuh; head dim 128): the kernel's compute warps,
 * one unit an iteration, as attn_bwd_tc.cu's bwd_wg_persistent_lap - at a unit's end thread
 * 0 takes the next job (after a drain where the rule asks for one), dK and dV are stored
 * (bwd_wg_store_dkv, its barrier), and only then are the job's params replaced (the stores
 * read them; a barrier, the take, a barrier); then the next unit's first stage (not in the
 * softcap's instance: its step loads it), K/V load and table are issued before the wait for
 * the stores' read, and the load's barrier publishes all three. Units without steps load
 * nothing (dK, dV 0). The steps, hand-offs and turns are the loop's in the kernel. The job
 * (job_smem) and thread 0's wait end live in shared memory and the last unit's kv-tile is
 * formed again from its stage: kept in registers, the kernel spilled 4-12 bytes. */
template <typename DT, int D, bool CAP>
static __device__ __forceinline__ void bwd_vl_wg_lap(const struct attn_bwd_params &p, bwd_vl_wg_smem<D> &sm,
                                                     const bwd_wg_qmaps *maps)
{
    constexpr int32_t BN = CUATTN_TC_BLOCK_N;
    const struct attn_bwd_params &q = sm.prm; /* the job's sequence */
    const struct sched *s = &sm.prm.s;
    bwd_wg_regs<D> x;
    bwd_wg_ring hb = {0, 0u}; /* the staging buffer of the next ticket */
    uint32_t qph = 0;         /* the stages' next parities */
    int32_t dsb = 0;          /* ... and the dS tile of the next step */
    int32_t stage = -1; /* the unit: stage `stage` of job J (-1: none yet) */
    const struct sched_job &J = sm.job_smem;
    {
        BWD_WG_T0();
        if (threadIdx.x == 0) /* the CTA's first job: nothing to drain */
            bwd_vl_wg_take<D>(p, sm, atomicAdd(p.job_next, 1));
        bwd_cta_sync<true>(); /* the job and its sequence's params are visible to every thread */
        const int32_t job = sm.flag_smem;
        if (threadIdx.x == 0)
            BWD_WG_TADD(BT_JOB);
        if (job >= p.vl_jobs) {
            bwd_wg_hand_end(sm, hb); /* tell the writer */
            return;
        }
    }
    for (;;) {
        /* the last unit (pn -1: none; its kv-tile formed again, not kept across the steps) */
        const int32_t pbh = J.bh, pn = stage >= 0 ? sched_job_unit(s, J.k, stage) : -1;
        if (pn >= 0) {
            BWD_WG_T0();
            const int take = stage + 1 == sched_job_stages(s, J.k);
            int32_t next = -1; /* thread 0: the next job */
            if (take && threadIdx.x == 0 &&
                !bwd_wg_must_drain(p, sched_job_last_steps(s, J.k) == 1 ? INT32_MAX : sm.wait_end_smem, sm.flag_smem))
                next = atomicAdd(p.job_next, 1);
            bwd_wg_store_dkv<DT, D, BN, false>(q, sm, x, pbh, pn, maps, sm.view);
            if (take) {
                bwd_cta_sync<true>(); /* every read of the job's params (and of the flag) is done */
                if (threadIdx.x == 0) {
                    if (next < 0) { /* the rule asks the writer to take its turns first */
                        BWD_WG_T0();
                        bwd_wg_drain(sm, hb);
                        BWD_WG_TADD(BT_DRAIN);
                        next = atomicAdd(p.job_next, 1);
                    }
                    bwd_vl_wg_take<D>(p, sm, next);
                }
                bwd_cta_sync<true>(); /* the job and its sequence's params are visible to every thread */
                const int32_t job = sm.flag_smem;
                if (job >= p.vl_jobs) { /* tell the writer */
                    if ((threadIdx.x & 127) == 0) /* the last unit's dK, dV stores */
                        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
                    bwd_wg_hand_end(sm, hb);
                    return;
                }
                stage = -1;
            }
            if (threadIdx.x == 0)
                BWD_WG_TADD(BT_STORE);
        }
        stage++;
        BWD_WG_T0();
        const int32_t n = sched_job_unit(s, J.k, stage);
        /* (a count from shared memory through a shuffle from lane 0: see the loop below) */
        const int32_t steps = __shfl_sync(0xffffffffu, sched_unit_steps(s, n), 0);
        if (steps > 0) { /* the unit's loads; every read of the last unit's table, K, V and
                            stage 0 came before the unit end's first barrier */
            if constexpr (!CAP)
                bwd_wg_load_q_mb<D, BN>(q, sm, 0, J.bh, sched_visit(s, &J, stage, 0), maps, sm.view);
            bwd_tc_load_kv_start<D, BN, false>(q, sm, J.bh, n);
            bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, 0, steps);
        }
        if (pn >= 0)
            bwd_wg_store_dkv_done<DT, D, BN, false>(q, sm, pbh, pn, maps);
        if (steps > 0)
            bwd_tc_load_kv_wait<bwd_vl_wg_smem<D>>(); /* its barrier publishes the table and the
                                                         stores' read too */
        if (threadIdx.x == 0)
            BWD_WG_TADD(BT_UNIT);
        bwd_tc_zero_kv<D, BN>(x);
        int32_t m = steps > 0 ? sm.visit_smem[0] : 0, buf = 0, base = 0;
        int loaded = !CAP && steps > 0;
        for (int32_t step = 0; step < steps; step++) { /* the loop's below, with stage barriers */
            if (step + 1 - base > BWD_TC_TAB) { /* the successor's entry is past the table */
                bwd_cta_sync<true>();           /* everyone has read the old table */
                base = step;
                bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, base, steps);
                bwd_cta_sync<true>(); /* the refill is complete before anyone reads it */
            }
            const int32_t next_m = step + 1 < steps ? sm.visit_smem[step + 1 - base] : -1;
            const int32_t rank = threadIdx.x == 0 ? sm.rank_smem[step - base] : -1;
#if BWD_WG_TRACE
            const long long bs0_ = clock64();
#endif
            bwd_wg_step_mb<DT, D, BN, true, CAP>(q, sm, x, J.bh, n, m, buf, loaded, next_m, qph, dsb, maps,
                                                 sm.view);
            dsb ^= 1;
#if BWD_WG_TRACE
            if (threadIdx.x == 0) {
                BWD_WG_TSLOT(BT_STEP) += (unsigned long long)(clock64() - bs0_);
                BWD_WG_TSLOT(BT_STEPS) += 1;
            }
#endif
            const int32_t i0 = m * BWD_TC_BM, rm = q.seqlen_q - i0 < BWD_TC_BM ? q.seqlen_q - i0 : BWD_TC_BM;
            bwd_wg_hand_at<D>(sm, x, hb, (q.counter - p.counter) + (int64_t)J.bh * s->m_tiles + m,
                              (q.dq_acc - p.dq_acc) + ((int64_t)J.bh * q.seqlen_q + i0) * D, rm,
                              s->kind != SCHED_ATOMIC ? rank : -1);
            m = next_m;
            buf ^= 1;
            loaded = 1;
        }
    }
}
#endif

/* CAP: the instance for a softcap > 0 (its P and dS through the tanh); without, the
 * softcap's code is not compiled in (it had left the instance at 128 spilling 4 bytes). */
template <typename DT, int D, bool CAP>
__global__ void __launch_bounds__(ATTN_THREADS + 128, 1)
    attn_bwd_vl_wg_kernel(const __grid_constant__ struct attn_bwd_params p, const __grid_constant__ bwd_wg_qmaps maps)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
#if ATTN_WGMMA
    typedef bwd_vl_wg_smem<D> SM;
    constexpr int32_t BN = CUATTN_TC_BLOCK_N;
    const uint32_t raw_at = attn_smem_u32(smem_raw); /* the tiles' swizzle needs 1024-byte alignment */
    SM &sm = *reinterpret_cast<SM *>(smem_raw + (((raw_at + BWD_WG_ALIGN - 1) & ~(uint32_t)(BWD_WG_ALIGN - 1)) - raw_at));
#if BWD_WG_TRACE
    const long long bk0_ = clock64();
    if (threadIdx.x < BT_N)
        BWD_WG_TSLOT(threadIdx.x) = 0;
#endif
    if (threadIdx.x == 0) {
        bwd_wg_init<D>(sm);
        sm.prm = p;
    }
    __syncthreads(); /* the hand-off's barriers are set up before anyone uses them */
    if (threadIdx.x >= ATTN_THREADS) { /* registers as attn_bwd_tc_persistent_kernel's */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;" ::: "memory");
        if (threadIdx.x == ATTN_THREADS)
            bwd_wg_writer_at<D>(p, sm);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;" ::: "memory");
    if constexpr (BWD_WG_DKV_LAP(D)) { /* trial unitlap (head dim 128) */
        bwd_vl_wg_lap<DT, D, CAP>(p, sm, &maps);
#if BWD_WG_TRACE
        if (threadIdx.x == 0)
            BWD_WG_TSLOT(BT_KERNEL) = (unsigned long long)(clock64() - bk0_);
#endif
    } else {
        const struct attn_bwd_params &q = sm.prm; /* the job's sequence */
        const struct sched *s = &sm.prm.s;
        bwd_wg_regs<D> x;
        bwd_wg_ring hb = {0, 0u}; /* the staging buffer of the next ticket */
        int32_t wait_end = 0; /* dispatch index past the jobs the last job's turns may wait on;
                                 INT32_MAX (thread 0) when its last unit had one step: drain first */
        [[maybe_unused]] uint32_t qph = 0; /* BWD_WG_STAGE_BARS: the stages' next parities */
        [[maybe_unused]] int32_t dsb = 0;  /* ... and the dS tile of the next step */
        for (;;) {
            /* as bwd_tc_persistent: the writer takes every turn handed over before this CTA
             * takes a job that those turns may wait on (shift), or after a job whose last unit
             * had one step (wait_end INT32_MAX) */
            if (threadIdx.x == 0 && wait_end > attn_ld_acquire(p.job_next)) {
                BWD_WG_T0();
                bwd_wg_drain(sm, hb);
                BWD_WG_TADD(BT_DRAIN);
            }
            BWD_WG_T0();
            bwd_cta_sync<true>(); /* every read of the last job's params (and of the flag) is done */
            if (threadIdx.x == 0) {
                const int32_t job = atomicAdd(p.job_next, 1);
                sm.flag_smem = job;
                if (job < p.vl_jobs) {
                    const struct attn_vl_seq *e = bwd_vl_enter<D>(p, sm, job);
                    sm.view[0] = e->vb;
                    sm.view[1] = e->vq;
                    sm.view[2] = e->vk;
                }
            }
            bwd_cta_sync<true>(); /* the job and its sequence's params are visible to every thread */
            const int32_t job = sm.flag_smem;
            if (threadIdx.x == 0)
                BWD_WG_TADD(BT_JOB);
            if (job >= p.vl_jobs) {
                if ((threadIdx.x & 127) == 0) /* the last unit's dK, dV stores */
                    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
                bwd_wg_hand_end(sm, hb); /* tell the writer */
    #if BWD_WG_TRACE
                if (threadIdx.x == 0)
                    BWD_WG_TSLOT(BT_KERNEL) = (unsigned long long)(clock64() - bk0_);
    #endif
                return;
            }
            const int32_t local = sm.local_job;
            const struct sched_job J = sched_job_taken(s, local);

            wait_end = job - local + sched_wait_end(s, local);
            /* Counts from the params in shared memory, passed through a shuffle from lane 0:
             * the compiler then knows they are warp-uniform, so the loops around the products
             * are not divergent paths (ptxas serialized every wgmma, C7518, when they were). */
            const int32_t stages = __shfl_sync(0xffffffffu, sched_job_stages(s, J.k), 0);
            for (int32_t stage = 0; stage < stages; stage++) {
                const int32_t n = sched_job_unit(s, J.k, stage);
                const int32_t steps = __shfl_sync(0xffffffffu, sched_unit_steps(s, n), 0);
                BWD_WG_T0();
                bwd_tc_zero_kv<D, BN>(x);
                if (steps > 0) {
                    /* the previous unit read the table last before its last step's barrier */
                    if constexpr (BWD_WG_STAGE_BARS(D)) /* no barrier after each step: one here,
                                                           before the table, K and V are rewritten */
                        bwd_cta_sync<true>();
                    bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, 0, steps);
                    /* the first step's stage, under K and V's load (not in the softcap's instance:
                     * there the one more live value spilled 4 bytes at 128) */
                    if constexpr (BWD_WG_STAGE_BARS(D) && !CAP)
                        bwd_wg_load_q_mb<D, BN>(q, sm, 0, J.bh, sched_visit(s, &J, stage, 0), &maps, sm.view);
                    bwd_tc_load_kv<D, BN, false>(q, sm, J.bh, n); /* its barrier publishes the table too */
                }
                if (threadIdx.x == 0)
                    BWD_WG_TADD(BT_UNIT);
                int32_t m = steps > 0 ? sm.visit_smem[0] : 0, buf = 0, base = 0;
                int loaded = BWD_WG_STAGE_BARS(D) && !CAP && steps > 0;
                for (int32_t step = 0; step < steps; step++) {
                    if (step + 1 - base > BWD_TC_TAB) { /* the successor's entry is past the table */
                        if constexpr (BWD_WG_STAGE_BARS(D))
                            bwd_cta_sync<true>(); /* everyone has read the old table */
                        base = step;
                        bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, base, steps);
                        bwd_cta_sync<true>(); /* the refill is complete before anyone reads it */
                    }
                    const int32_t next_m = step + 1 < steps ? sm.visit_smem[step + 1 - base] : -1;
                    const int32_t rank = threadIdx.x == 0 ? sm.rank_smem[step - base] : -1;
                    if constexpr (BWD_WG_STAGE_BARS(D)) {
    #if BWD_WG_TRACE
                        const long long bs0_ = clock64();
    #endif
                        bwd_wg_step_mb<DT, D, BN, true, CAP>(q, sm, x, J.bh, n, m, buf, loaded, next_m, qph, dsb, &maps,
                                                        sm.view);
                        dsb ^= 1;
    #if BWD_WG_TRACE
                        if (threadIdx.x == 0) {
                            BWD_WG_TSLOT(BT_STEP) += (unsigned long long)(clock64() - bs0_);
                            BWD_WG_TSLOT(BT_STEPS) += 1;
                        }
    #endif
                    } else {
                        bwd_tc_step<DT, D, BN, true, CAP>(q, sm, x, J.bh, n, m, buf, loaded, next_m, NULL, -1);
                        attn_cp_async_wait<0>(); /* the prefetch for the next step has landed ... */
                        bwd_tc_async_visible<true>();
                        bwd_cta_sync<true>(); /* ... and is visible to all; every warp is done with
                                                 the step's buffer, P, dS and K */
                    }
                    const int32_t i0 = m * BWD_TC_BM, rm = q.seqlen_q - i0 < BWD_TC_BM ? q.seqlen_q - i0 : BWD_TC_BM;
                    /* the tile's counter and dQacc rows, as offsets into the call's (formed here
                     * from shared memory, not kept live across the steps) */
                    bwd_wg_hand_at<D>(sm, x, hb, (q.counter - p.counter) + (int64_t)J.bh * s->m_tiles + m,
                                      (q.dq_acc - p.dq_acc) + ((int64_t)J.bh * q.seqlen_q + i0) * D, rm,
                                      s->kind != SCHED_ATOMIC ? rank : -1);
                    m = next_m;
                    buf ^= 1;
                    loaded = 1;
                }
                {
                    BWD_WG_T0();
                    bwd_wg_store_dkv<DT, D, BN, false>(q, sm, x, J.bh, n, &maps, sm.view);
                    if (threadIdx.x == 0)
                        BWD_WG_TADD(BT_STORE);
                }
            }
            /* (here, not where wait_end is set: the value live through the steps spilled 12
             * bytes in the softcap's instance at 128) */
            if (threadIdx.x == 0 && sched_job_last_steps(s, J.k) == 1)
                wait_end = INT32_MAX;
        }
    }
#else
    (void)p;
    (void)smem_raw;
    __trap(); /* sm_80 never runs v3 (cuattn_impl_for) */
#endif
}

/* Where row t of a q-side (k-side: cu_k) tensor belongs: its sequence's first row in the
 * scratch layout, its length, its row in the sequence, and its element offset in a tensor
 * of strides st (batch, row). */
struct vl_row {
    int32_t b, r0, len, i;
    int64_t at;
};

static __device__ __forceinline__ struct vl_row vl_row_of(const struct attn_bwd_params &p, const int32_t *cu,
                                                          int32_t t, const int64_t *st)
{
    struct vl_row w;
    w.b = vl_seq_of(cu, p.s.batch, t);
    w.r0 = cu[w.b];
    w.len = cu[w.b + 1] - w.r0;
    w.i = t - w.r0;
    w.at = p.vl_dense ? (int64_t)w.b * st[0] + (int64_t)w.i * st[1] : (int64_t)t * st[1];
    return w;
}

/* Dsum as attn_bwd_tc.cu's preprocess forms it (the diagonal of dO O^T by the dP chain),
 * over rows (head h, packed row t), h total_q + t, into the scratch layout; LSE copied
 * there too. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_vl_preprocess_kernel(const __grid_constant__ struct attn_bwd_params p)
{
    const int64_t rows = (int64_t)p.heads_q * p.total_q;
    const int64_t groups = (rows + 15) / 16;
    const int32_t lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int32_t warps = ATTN_THREADS / 32;
    const uint16_t *o_g = static_cast<const uint16_t *>(p.out);
    const uint16_t *do_g = static_cast<const uint16_t *>(p.dout);
    for (int64_t grp = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5); grp < groups;
         grp += (int64_t)gridDim.x * warps) {
        const uint16_t *o_row[2], *do_row[2]; /* rows grp 16 + g, + 8; NULL past the end */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int64_t row = grp * 16 + g + 8 * r;
            o_row[r] = do_row[r] = NULL;
            if (row < rows) {
                const int32_t h = (int32_t)(row / p.total_q), t = (int32_t)(row - (int64_t)h * p.total_q);
                const struct vl_row wo = vl_row_of(p, p.cu_q, t, p.out_stride);
                const struct vl_row wd = vl_row_of(p, p.cu_q, t, p.dout_stride);
                o_row[r] = o_g + wo.at + h * p.out_stride[2];
                do_row[r] = do_g + wd.at + h * p.dout_stride[2];
            }
        }
        float c_lo[4], c_hi[4];
        bwd_tc_dsum_chain<DT, D>(o_row, do_row, t4, c_lo, c_hi);
        if (t4 == (g >> 1)) {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int64_t row = grp * 16 + g + 8 * r;
                if (row >= rows)
                    continue;
                const int32_t h = (int32_t)(row / p.total_q), t = (int32_t)(row - (int64_t)h * p.total_q);
                const int32_t b = vl_seq_of(p.cu_q, p.s.batch, t), q0 = p.cu_q[b];
                const int32_t sq = p.cu_q[b + 1] - q0, i = t - q0;
                const int64_t at = (int64_t)p.heads_q * q0 + (int64_t)h * sq + i;
                /* lse: (batch, heads_q, S) dense, (1, heads_q, total_q) packed */
                const int64_t from = p.vl_dense ? at : (int64_t)h * p.total_q + t;
                p.dsum[at] = r ? ((g & 1) ? c_hi[3] : c_hi[2]) : ((g & 1) ? c_lo[1] : c_lo[0]);
                p.lse_vl[at] = p.lse[from];
            }
        }
    }
}

/* Whether row w.i of head h of w's sequence had no addition where dQacc was not zeroed
 * (attn_bwd_dq_first_stores): its sequence has no table entry (no keys: the table holds the
 * sequences with work, in order, each at its first row q0) or its tile's counter is 0. */
static __device__ __forceinline__ bool vl_dq_untouched(const struct attn_bwd_params &p, const struct vl_row &w,
                                                       int32_t h)
{
    const struct attn_vl_seq *t = p.vl; /* the last entry whose q0 <= w.r0 */
    const struct attn_vl_seq *e = t + vl_last_le(p.vl_count, [t](int32_t i) { return t[i].q0; }, w.r0);
    return p.vl_count == 0 || e->q0 != w.r0 ||
           p.counter[e->tile0 + (int64_t)h * e->s.m_tiles + w.i / BWD_TC_BM] == 0;
}

/* dQ = scale dQacc, one warp per row (h, t) (bwd_tc_dq_row): the row's sequence is looked
 * up once, not per pair. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_vl_postprocess_kernel(const __grid_constant__ struct attn_bwd_params p)
{
    const int64_t rows = (int64_t)p.heads_q * p.total_q;
    const int32_t warps = ATTN_THREADS / 32, lane = threadIdx.x & 31;
    uint16_t *dq_g = static_cast<uint16_t *>(p.dq);
    const bool first = attn_bwd_dq_first_stores(p);
    for (int64_t row = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5); row < rows; row += (int64_t)gridDim.x * warps) {
        const int32_t h = (int32_t)(row / p.total_q), t = (int32_t)(row - (int64_t)h * p.total_q);
        const struct vl_row w = vl_row_of(p, p.cu_q, t, p.dq_stride);
        const int64_t at = (int64_t)p.heads_q * w.r0 + (int64_t)h * w.len + w.i;
        bwd_tc_dq_row<DT, D>(dq_g + w.at + h * p.dq_stride[2],
                             first && vl_dq_untouched(p, w, h) ? NULL : p.dq_acc + at * D, w.i, p.scale, lane);
    }
}

/* dK, dV rows no unit wrote: a sequence without queries gets zeros; GQA sums a kv head's
 * q-heads ascending (attn_bwd_dkv_row, as attn_bwd_dkv_sum_kernel), from the scratch
 * layout. A warp a row (t, hk), its sequence looked up once. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_vl_dkv_kernel(const __grid_constant__ struct attn_bwd_params p)
{
    const int64_t rows = (int64_t)p.total_k * p.heads_kv;
    const int32_t warps = ATTN_THREADS / 32, lane = threadIdx.x & 31;
    uint16_t *dk_g = static_cast<uint16_t *>(p.dk), *dv_g = static_cast<uint16_t *>(p.dv);
    for (int64_t row = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5); row < rows; row += (int64_t)gridDim.x * warps) {
        const int32_t t = (int32_t)(row / p.heads_kv), hk = (int32_t)(row - (int64_t)t * p.heads_kv);
        const struct vl_row wk = vl_row_of(p, p.cu_k, t, p.dk_stride);
        const struct vl_row wv = vl_row_of(p, p.cu_k, t, p.dv_stride);
        const int32_t sq = p.cu_q[wk.b + 1] - p.cu_q[wk.b];
        if (sq != 0 && p.group <= 1)
            continue; /* the unit stored it */
        /* no query: nothing ran, the gradients are 0 (no q-head to sum); else the q-heads'
         * rows, len apart */
        attn_bwd_dkv_row<DT, D>(p.dk_acc, p.dv_acc, dk_g + wk.at + hk * p.dk_stride[2], dv_g + wv.at + hk * p.dv_stride[2],
                                ((int64_t)p.heads_q * wk.r0 + (int64_t)hk * p.group * wk.len + wk.i) * D,
                                (int64_t)wk.len * D, sq != 0 ? p.group : 0, lane);
    }
}

/* ---- host side ----------------------------------------------------------------------- */

template <int D>
static size_t fwd_vl_bytes(void)
{
    return sizeof(fwd_vl_smem<D>);
}

template <int D>
static size_t fwd_vl_wg_bytes(void)
{
    return sizeof(fwd_vl_wg_smem<D>) + FWD_WG_ALIGN; /* the kernel aligns the block up */
}

template <int D>
static size_t fwd_vl_wgp_bytes(void)
{
    return sizeof(fwd_vl_wgp_smem<D>) + FWD_WG_ALIGN; /* the kernel aligns the block up */
}

template <int D, int BN>
static size_t bwd_vl_bytes(void)
{
    return sizeof(bwd_vl_smem<D, BN>);
}

template <int D>
static size_t bwd_vl_wg_bytes(void)
{
    return sizeof(bwd_vl_wg_smem<D>) + BWD_WG_ALIGN; /* the kernel aligns the block up */
}

template <typename DT, int D>
static cudaError_t vl_attr(size_t smem_optin, int wg)
{
    cudaError_t err = cudaSuccess;
    if (wg && bwd_vl_wg_bytes<D>() <= smem_optin)
        err = cudaFuncSetAttribute(attn_bwd_vl_wg_kernel<DT, D, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)bwd_vl_wg_bytes<D>());
    if (err == cudaSuccess && wg && bwd_vl_wg_bytes<D>() <= smem_optin)
        err = cudaFuncSetAttribute(attn_bwd_vl_wg_kernel<DT, D, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)bwd_vl_wg_bytes<D>());
    if (err == cudaSuccess && wg && fwd_vl_wg_bytes<D>() <= smem_optin)
        err = cudaFuncSetAttribute(attn_fwd_vl_wg_kernel<DT, D, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)fwd_vl_wg_bytes<D>());
    if (err == cudaSuccess && wg && fwd_vl_wg_bytes<D>() <= smem_optin)
        err = cudaFuncSetAttribute(attn_fwd_vl_wg_kernel<DT, D, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)fwd_vl_wg_bytes<D>());
    if (err == cudaSuccess && wg && fwd_vl_wgp_bytes<D>() <= smem_optin)
        err = cudaFuncSetAttribute(attn_fwd_vl_wgp_kernel<DT, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)fwd_vl_wgp_bytes<D>());
    if (err != cudaSuccess)
        return err;
    if (fwd_vl_bytes<D>() <= smem_optin)
        err = cudaFuncSetAttribute(attn_fwd_vl_kernel<DT, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)fwd_vl_bytes<D>());
    if (err == cudaSuccess && bwd_vl_bytes<D, 64>() <= smem_optin)
        err = cudaFuncSetAttribute(attn_bwd_vl_kernel<DT, D, 64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)bwd_vl_bytes<D, 64>());
    if constexpr (BWD_TC_WIDE(D))
        if (err == cudaSuccess && bwd_vl_bytes<D, CUATTN_TC_BLOCK_N>() <= smem_optin)
            err = cudaFuncSetAttribute(attn_bwd_vl_kernel<DT, D, CUATTN_TC_BLOCK_N>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)bwd_vl_bytes<D, CUATTN_TC_BLOCK_N>());
    return err;
}

cudaError_t cuattn__vl_init(size_t smem_optin, int wg)
{
    cudaError_t err;
    if ((err = vl_attr<attn_bf16, 64>(smem_optin, wg)) != cudaSuccess ||
        (err = vl_attr<attn_bf16, 128>(smem_optin, wg)) != cudaSuccess ||
        (err = vl_attr<attn_f16, 64>(smem_optin, wg)) != cudaSuccess ||
        (err = vl_attr<attn_f16, 128>(smem_optin, wg)) != cudaSuccess)
        return err;
    return cudaSuccess;
}

size_t cuattn__fwd_vl_smem_bytes(int32_t head_dim)
{
    return head_dim == 64 ? fwd_vl_bytes<64>() : head_dim == 128 ? fwd_vl_bytes<128>() : 0;
}

size_t cuattn__fwd_vl_wg_smem_bytes(int32_t head_dim)
{
    return head_dim == 64 ? fwd_vl_wg_bytes<64>() : head_dim == 128 ? fwd_vl_wg_bytes<128>() : 0;
}

size_t cuattn__bwd_vl_smem_bytes(int32_t head_dim)
{
    return head_dim == 64 ? bwd_vl_bytes<64, CUATTN_TC_BLOCK_N>() : head_dim == 128 ? bwd_vl_bytes<128, 64>() : 0;
}

size_t cuattn__bwd_vl_wg_smem_bytes(int32_t head_dim)
{
    return head_dim == 64 ? bwd_vl_wg_bytes<64>() : head_dim == 128 ? bwd_vl_wg_bytes<128>() : 0;
}

size_t cuattn__fwd_vl_seq_maps_bytes(int32_t count)
{
    return sizeof(fwd_wg_maps) * (size_t)count;
}

/* The tensor maps of each table entry's sequence: its Q, K and V rows as a batch of one,
 * so TMA fills rows past its end with zeros. False where one does not encode. */
bool cuattn__fwd_vl_seq_maps(void *out, const struct attn_fwd_params *p, const struct attn_vl_seq *seq,
                             int32_t count, int32_t head_dim)
{
    fwd_wg_maps *m = static_cast<fwd_wg_maps *>(out);
    for (int32_t i = 0; i < count; i++) {
        const struct attn_vl_seq *e = &seq[i];
        struct attn_fwd_params s = *p;
        s.q = static_cast<const uint16_t *>(p->q) + (int64_t)e->vb * p->q_stride[0] + (int64_t)e->vq * p->q_stride[1];
        s.k = static_cast<const uint16_t *>(p->k) + (int64_t)e->vb * p->k_stride[0] + (int64_t)e->vk * p->k_stride[1];
        s.v = static_cast<const uint16_t *>(p->v) + (int64_t)e->vb * p->v_stride[0] + (int64_t)e->vk * p->v_stride[1];
        s.seqlen_q = e->s.seqlen_q > 0 ? e->s.seqlen_q : 1; /* (a dim of 0 does not encode; never read) */
        s.seqlen_k = e->s.seqlen_k > 0 ? e->s.seqlen_k : 1;
        s.geo.batch = 1;
        if (!cuattn__fwd_wg_maps(&m[i], &s, head_dim))
            return false;
    }
    return true;
}

/* WG: v3's kernel (TMA where allowed and the maps encode: dense batches, persistent on
 * ctas CTAs (0: a CTA a tile), and packed ones with maps per sequence, p->vl_maps), else
 * v2's. */
template <typename DT, int D>
static cudaError_t fwd_vl_launch(const struct attn_fwd_params *p, int wg, int allow_tma, int *ret_tma,
                                 int32_t ctas, cudaStream_t stream)
{
    const uint32_t blocks = (uint32_t)p->vl_blocks;
    if (!wg) {
        attn_fwd_vl_kernel<DT, D><<<blocks, FWD_TC_THREADS, fwd_vl_bytes<D>(), stream>>>(*p);
        return cudaGetLastError();
    }
    fwd_wg_maps maps;
    memset(&maps, 0, sizeof maps);
    const bool tma = allow_tma && (p->vl_maps || cuattn__fwd_wg_maps(&maps, p, D));
    if (tma && !p->vl_maps) /* a dense batch */
        attn_fwd_vl_wgp_kernel<DT, D>
            <<<ctas > 0 && blocks > (uint32_t)ctas ? (uint32_t)ctas : blocks, FWD_WG_THREADS, fwd_vl_wgp_bytes<D>(),
               stream>>>(*p, maps);
    else if (tma)
        attn_fwd_vl_wg_kernel<DT, D, true><<<blocks, FWD_WG_THREADS, fwd_vl_wg_bytes<D>(), stream>>>(*p, maps);
    else
        attn_fwd_vl_wg_kernel<DT, D, false><<<blocks, FWD_WG_THREADS, fwd_vl_wg_bytes<D>(), stream>>>(*p, maps);
    *ret_tma = tma;
    return cudaGetLastError();
}

cudaError_t cuattn__fwd_vl_launch(const struct attn_fwd_params *p, enum dtype_kind dt, int32_t head_dim, int wg,
                                  int allow_tma, int *ret_tma, int32_t ctas, cudaStream_t stream)
{
    const int bf = dt == DTYPE_BF16;
    *ret_tma = 0;
    switch (head_dim) {
    case 64:
        return bf ? fwd_vl_launch<attn_bf16, 64>(p, wg, allow_tma, ret_tma, ctas, stream)
                  : fwd_vl_launch<attn_f16, 64>(p, wg, allow_tma, ret_tma, ctas, stream);
    case 128:
        return bf ? fwd_vl_launch<attn_bf16, 128>(p, wg, allow_tma, ret_tma, ctas, stream)
                  : fwd_vl_launch<attn_f16, 128>(p, wg, allow_tma, ret_tma, ctas, stream);
    default:
        return cudaErrorInvalidValue;
    }
}

/* WG: v3's kernel (BN is then CUATTN_TC_BLOCK_N), else v2's. */
template <typename DT, int D, int BN, bool WG>
static cudaError_t bwd_vl_occupancy(int32_t *ret)
{
    static int32_t cache[ATTN_OCC_DEVICES];
    return attn_occupancy_once(cache, [](int32_t *r) {
        int a = 0;
        cudaError_t err;
        if constexpr (WG)
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a, attn_bwd_vl_wg_kernel<DT, D, false>,
                                                                ATTN_THREADS + 128, bwd_vl_wg_bytes<D>());
        else
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a, attn_bwd_vl_kernel<DT, D, BN>, ATTN_THREADS,
                                                                bwd_vl_bytes<D, BN>());
        if (err == cudaSuccess)
            *r = a;
        return err;
    }, ret);
}

#if BWD_WG_TRACE
static void bwd_vl_trace_dump(void) { bwd_wg_trace_print("window/packed"); }
#endif

template <typename DT, int D, int BN, bool WG>
static cudaError_t bwd_vl_launch(const struct attn_bwd_params *p, int32_t grid, int32_t sms, cudaStream_t stream)
{
    cudaError_t err;
    const int64_t rows_q = (int64_t)p->heads_q * p->total_q;
    if ((!attn_bwd_dq_first_stores(*p) &&
         (err = cudaMemsetAsync(p->dq_acc, 0, sizeof(float) * (size_t)rows_q * D, stream)) != cudaSuccess) ||
        (err = cudaMemsetAsync(p->counter, 0, sizeof(int32_t) * (size_t)p->vl_tiles, stream)) != cudaSuccess ||
        (err = cudaMemsetAsync(p->job_next, 0, sizeof(int32_t), stream)) != cudaSuccess)
        return err;
#if BWD_WG_TRACE
    static int traced;
    if (!traced++)
        atexit(bwd_vl_trace_dump);
#endif
    attn_bwd_vl_preprocess_kernel<DT, D>
        <<<attn_bwd_rows_grid(rows_q, 16 * (ATTN_THREADS / 32), sms), ATTN_THREADS, 0, stream>>>(*p);
    if ((err = cudaGetLastError()) != cudaSuccess)
        return err;
    if (p->vl_jobs > 0) {
        if constexpr (WG) {
            bwd_wg_qmaps maps; /* Q and dO by TMA: the call's views (packed: one batch of total_q rows) */
            memset(&maps, 0, sizeof maps);
            const int32_t batch = p->vl_dense ? p->total_q / p->seqlen_q : 1;
            if (BWD_WG_STAGE_BARS(D)) {
                const int32_t rows = p->vl_dense ? p->seqlen_q : p->total_q;
                bwd_wg_qmaps_encode(&maps, p, D, batch, rows);
            }
            if (BWD_WG_DKV_TMA(D))
                bwd_wg_dkvmaps_encode(&maps, p, D, batch, p->vl_dense ? p->seqlen_k : p->total_k);
            if (p->softcap > 0.0f)
                attn_bwd_vl_wg_kernel<DT, D, true>
                    <<<(uint32_t)grid, ATTN_THREADS + 128, bwd_vl_wg_bytes<D>(), stream>>>(*p, maps);
            else
                attn_bwd_vl_wg_kernel<DT, D, false>
                    <<<(uint32_t)grid, ATTN_THREADS + 128, bwd_vl_wg_bytes<D>(), stream>>>(*p, maps);
        } else
            attn_bwd_vl_kernel<DT, D, BN><<<(uint32_t)grid, ATTN_THREADS, bwd_vl_bytes<D, BN>(), stream>>>(*p);
        if ((err = cudaGetLastError()) != cudaSuccess)
            return err;
    }
    attn_bwd_vl_postprocess_kernel<DT, D>
        <<<attn_bwd_rows_grid(rows_q, ATTN_THREADS / 32, sms), ATTN_THREADS, 0, stream>>>(*p);
    if ((err = cudaGetLastError()) != cudaSuccess)
        return err;
    if (p->group > 1 || p->vl_zero_k) {
        const int64_t rows_k = (int64_t)p->heads_kv * p->total_k;
        attn_bwd_vl_dkv_kernel<DT, D>
            <<<attn_bwd_rows_grid(rows_k, ATTN_THREADS / 32, sms), ATTN_THREADS, 0, stream>>>(*p);
        err = cudaGetLastError();
    }
    return err;
}

/* One switch for the (dtype, head dim, kv-tile, v2/v3) kernels; wg asks for v3, which has
 * 64 x 128 tiles only; v2 has them at head dim 64 only (BWD_TC_WIDE). */
#define BWD_VL_DISPATCH(dt, head_dim, block_n, wg, CALL)                                        \
    do {                                                                                        \
        const int bf_ = (dt) == DTYPE_BF16, wide_ = (block_n) == CUATTN_TC_BLOCK_N;             \
        if (((block_n) != 64 && !wide_) || ((wg) && !wide_))                                    \
            return cudaErrorInvalidValue;                                                       \
        switch (head_dim) {                                                                     \
        case 64:                                                                                \
            if (wg)                                                                             \
                return bf_ ? CALL(attn_bf16, 64, CUATTN_TC_BLOCK_N, true)                       \
                           : CALL(attn_f16, 64, CUATTN_TC_BLOCK_N, true);                       \
            return bf_ ? (wide_ ? CALL(attn_bf16, 64, CUATTN_TC_BLOCK_N, false) : CALL(attn_bf16, 64, 64, false)) \
                       : (wide_ ? CALL(attn_f16, 64, CUATTN_TC_BLOCK_N, false) : CALL(attn_f16, 64, 64, false));  \
        case 128:                                                                               \
            if (wg)                                                                             \
                return bf_ ? CALL(attn_bf16, 128, CUATTN_TC_BLOCK_N, true)                      \
                           : CALL(attn_f16, 128, CUATTN_TC_BLOCK_N, true);                      \
            if (wide_)                                                                          \
                return cudaErrorInvalidValue;                                                   \
            return bf_ ? CALL(attn_bf16, 128, 64, false) : CALL(attn_f16, 128, 64, false);      \
        default:                                                                                \
            return cudaErrorInvalidValue;                                                       \
        }                                                                                       \
    } while (0)

cudaError_t cuattn__bwd_vl_blocks_per_sm(enum dtype_kind dt, int32_t head_dim, int32_t block_n, int wg,
                                         int32_t *ret)
{
#define BWD_VL_OCC(T, D, BN, WG) bwd_vl_occupancy<T, D, BN, WG>(ret)
    BWD_VL_DISPATCH(dt, head_dim, block_n, wg, BWD_VL_OCC);
#undef BWD_VL_OCC
}

cudaError_t cuattn__bwd_vl_launch(const struct attn_bwd_params *p, enum dtype_kind dt, int32_t grid, int32_t sms,
                                  cudaStream_t stream)
{
#define BWD_VL_RUN(T, D, BN, WG) bwd_vl_launch<T, D, BN, WG>(p, grid, sms, stream)
    BWD_VL_DISPATCH(dt, p->head_dim, p->s.block_n, p->wg, BWD_VL_RUN);
#undef BWD_VL_RUN
}
