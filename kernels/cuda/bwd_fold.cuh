// SPDX-License-Identifier: BSD-3-Clause
/*
 * bwd_fold.cuh - the dQ postprocess that also makes the audit's digests of dq, dk and dv
 * (cuattn_set_digests), where v3's persistent kernel has hashed dK's and dV's rows into
 * their leaves before it (head dims 64 and 128, no GQA). Without it the hashed postprocess
 * (attn_bwd_tc.cu) writes dQ's leaves and a tree kernel of its own launch (digest_cuda.h)
 * folds the three outputs' leaves into groups, supergroups and roots: 11.5 us at a 4k
 * backward's outputs under ncu, plus the gap between the launches, on the critical path.
 * Here the same digests (digest.h, version 3) come out of the postprocess's own blocks:
 *
 *   kv prologue   block b first makes dK's and dV's supergroup hashes b, b + grid, ... from
 *                 the leaves the persistent kernel wrote: each quad two group hashes into
 *                 shared memory, then one quad the supergroup's hash (fold_supers);
 *   dQ loop       the block takes whole groups of 64 dQ rows in the leaves' order (b, i, h)
 *                 - steps blockIdx.x, + grid, ... - each warp two batches of eight rows of
 *                 a step (w and w + 4), with the hashed postprocess's pipeline: a batch's
 *                 rows loaded (all at once: bwd_fold_ld_acc), last batch's rows hashed by
 *                 quads from their stage buffer, this batch stored and staged. The leaves
 *                 also go to shared memory; once a step's 64 are there (a barrier every
 *                 two batches) warp j % 4's first quad hashes them into the group's hash
 *                 (fold_groups);
 *   the last block  (a counter of finished blocks, atomicInc wrapping it back to 0 for the
 *                 next launch) makes dQ's supergroup hashes, 32 at a time, while one quad
 *                 runs the root's stripes over each batch of them, and two more quads the
 *                 roots of dK and dV over their supergroup hashes, each root seeded with
 *                 its tensor's bytes, into f.out.
 *
 * Every group, supergroup and root is XXH64 over the same words as digest_cuda.h's tree
 * takes them (digest_fold.cuh), so the digests are those of the tree kernel, bit for bit;
 * dQ's bits and leaves are the hashed postprocess's. The iteration in the leaves' order
 * reads dQacc's rows of eight heads per batch (each a whole 512-byte row at head dim 128,
 * as before) and writes eight consecutive rows of dq. Indices are 32-bit: the host folds
 * only where rows_q and rows_k fit.
 */
#ifndef DASH_KERNELS_CUDA_BWD_FOLD_CUH
#define DASH_KERNELS_CUDA_BWD_FOLD_CUH

#include "kernels/cuda/attn_cuda_int.h"
#include "kernels/cuda/bwd_mma.cuh"
#include "kernels/cuda/bwd_rows.cuh"
#include "kernels/digest/digest.h"
#include "kernels/digest/digest_fold.cuh"
#include "kernels/digest/digest_leaf.cuh"

#define BWD_FOLD_WARPS 4 /* a block's: a step's 64 rows are two batches of eight a warp */
#define BWD_FOLD_SUPER (DIGEST_FANOUT * DIGEST_FANOUT) /* the leaves of a supergroup */
/* Blocks an SM must hold (the launch bounds): the hashed postprocess's, whose 70 and 56
 * registers give 7 and 9; left to itself ptxas gave this kernel 77-80 and 60-64 (6 and 8
 * blocks), for the dQ group's hash inside the loop. 0 spills either way. */
#define BWD_FOLD_BLOCKS(D) ((D) == 64 ? 9 : 7)

/* A pair of dQacc's floats, loaded whether the row is used or not (its tile's counter at 0
 * with dQacc not zeroed: the caller drops it; the scratch holds every row). Under the
 * hashed postprocess's `zero ? 0 : x` a plain load became a load predicated on the
 * counter's value: each row's counter load, its compare, then its dQacc loads, row after
 * row (its SASS) - in the leaves' order a batch's eight rows have eight counters, eight L2
 * round trips in a row before the last row's loads leave. ptxas cannot predicate a
 * volatile load, and nothing loaded is used before the stores, so a batch's loads are all
 * in flight together while the last batch is hashed (the SASS: 16 loads and a counter
 * back to back at head dim 128). */
static __device__ __forceinline__ float2 bwd_fold_ld_acc(const float *acc)
{
    float2 v;
    asm volatile("ld.global.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(acc));
    return v;
}

template <typename DT, int D>
__global__ void __launch_bounds__(32 * BWD_FOLD_WARPS, BWD_FOLD_BLOCKS(D))
    attn_bwd_tc_postprocess_folded_kernel(const struct attn_bwd_params p, const struct attn_bwd_fold f)
{
    static_assert(8 * 2 * BWD_FOLD_WARPS == DIGEST_FANOUT, "a step is a group: two batches of eight a warp");
    __shared__ __align__(16) uint32_t stage[BWD_FOLD_WARPS][2][8 * DIGEST_LEAF_PITCH(D)]; /* LDS.128 rows */
    __shared__ uint64_t word_smem[2][DIGEST_FANOUT]; /* a step's leaves; a supergroup's group hashes */
    __shared__ uint32_t last_smem;
    const int32_t lane = threadIdx.x & 31, w = threadIdx.x >> 5, q = threadIdx.x >> 2;
    const uint32_t H = (uint32_t)p.heads_q, S = (uint32_t)p.seqlen_q;
    const uint32_t rows = (uint32_t)p.s.bh * S, rows_k = (uint32_t)p.s.bh * (uint32_t)p.seqlen_k; /* MHA */
    const uint32_t groups = (rows + DIGEST_FANOUT - 1) / DIGEST_FANOUT;
    const uint32_t groups_k = (rows_k + DIGEST_FANOUT - 1) / DIGEST_FANOUT;
    const uint32_t supers = (groups + DIGEST_FANOUT - 1) / DIGEST_FANOUT;
    const uint32_t supers_k = (groups_k + DIGEST_FANOUT - 1) / DIGEST_FANOUT;
    unsigned int *fold_done = reinterpret_cast<unsigned int *>(f.scratch);
    uint64_t *fold_groups = reinterpret_cast<uint64_t *>(f.scratch + attn_bwd_fold_groups_at());
    uint64_t *fold_supers = reinterpret_cast<uint64_t *>(f.scratch + attn_bwd_fold_supers_at(rows));

    /* kv prologue: dK's supergroups, then dV's; quad q the groups q and q + 32 */
    for (uint32_t sg = blockIdx.x; sg < 2 * supers_k; sg += gridDim.x) { /* uniform in the block */
        const uint32_t s = sg < supers_k ? sg : sg - supers_k;
        const uint64_t *leaf = sg < supers_k ? p.leaf_dk : p.leaf_dv;
#pragma unroll 1
        for (uint32_t half = 0; half < 2; half++) {
            const uint32_t g = DIGEST_FANOUT * s + q + 32 * half; /* the view's group */
            const uint32_t n = g < groups_k ? min(rows_k - DIGEST_FANOUT * g, (uint32_t)DIGEST_FANOUT) : 0;
            const uint64_t *lg = leaf + (uint64_t)DIGEST_FANOUT * g;
            const uint64_t h = digest_words_quad<16>([&](uint32_t k) { return __ldg(lg + k); }, n, 0, lane);
            if ((lane & 3) == 0 && n)
                word_smem[0][q + 32 * half] = h;
        }
        __syncthreads(); /* the supergroup's group hashes are in word_smem[0] */
        if (w == 0) {
            const uint32_t n = min(groups_k - DIGEST_FANOUT * s, (uint32_t)DIGEST_FANOUT);
            const uint64_t h =
                digest_words_quad<4>([&](uint32_t k) { return word_smem[0][k]; }, lane < 4 ? n : 0, 0, lane);
            if (lane == 0)
                fold_supers[sg] = h;
        }
        __syncthreads(); /* word_smem[0] is read before the next supergroup's groups go there */
    }

    /* dQ loop: t runs over the warp's batches 2 j (rows 8 w ..) and 2 j + 1 (rows 8 w + 32 ..)
     * of the block's steps j, and once more to hash the last; uniform in the block */
    const uint32_t steps = blockIdx.x < groups ? (groups - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const bool first = attn_bwd_dq_first_stores(p);
    uint16_t *dq_g = static_cast<uint16_t *>(p.dq);
    int32_t cur = 0;       /* the stage buffer this batch fills; the other holds the last one */
    int64_t last = -1;     /* the staged batch's first row, -1: none */
    for (uint32_t t = 0; t <= 2 * steps; t++) {
        const uint32_t r0 = (blockIdx.x + (t >> 1) * gridDim.x) * DIGEST_FANOUT + 8 * (w + BWD_FOLD_WARPS * (t & 1));
        const bool have = t < 2 * steps && r0 < rows; /* uniform across the warp */
        /* row r0 = (b S + i) H + h: two 32-bit divisions a batch, then counted on */
        const uint32_t bi0 = have ? r0 / H : 0, h0 = have ? r0 - bi0 * H : 0;
        const uint32_t b0 = have ? bi0 / S : 0, i0 = have ? bi0 - b0 * S : 0;
        /* the batch's dQacc pairs, and (lane r) row r's tile counter: every load issued here
         * with no branch between them (a row past the end loads row 0's, unused), none used
         * before the stores below, after the last batch's hash */
        float2 a[8][D / 64];
        int32_t ctr = 1;
        if (have) {
            uint32_t b = b0, i = i0, h = h0;
            int32_t my_bh = 0, my_i = 0; /* lane r < 8: row r's */
#pragma unroll
            for (int32_t r = 0; r < 8; r++) {
                const bool in = r0 + r < rows;
                const int32_t bh = in ? (int32_t)(b * H + h) : 0, ii = in ? (int32_t)i : 0;
                if (r == lane) {
                    my_bh = bh;
                    my_i = ii;
                }
                const float *acc = p.dq_acc + ((int64_t)bh * S + ii) * D;
#pragma unroll
                for (int32_t k = 0; k < D / 64; k++)
                    a[r][k] = bwd_fold_ld_acc(acc + bwd_tc_dq_at(ii, 2 * lane + 64 * k));
                if (++h == H) {
                    h = 0;
                    if (++i == S) {
                        i = 0;
                        b++;
                    }
                }
            }
            if (first && lane < 8) /* bwd_tc_dq_untouched's counter */
                ctr = p.counter[(int64_t)my_bh * p.s.m_tiles + my_i / BWD_TC_BM];
        }
        if (last >= 0) { /* the last batch's rows, a quad each: leaves in the rows' order */
            const uint64_t leaf = digest_leaf_staged<D>(stage[w][cur ^ 1], lane);
            const int64_t row = last + (lane >> 2);
            if ((lane & 3) == 0 && row < rows) {
                p.leaf_dq[row] = leaf;
                word_smem[((t - 1) >> 1) & 1][row % DIGEST_FANOUT] = leaf;
            }
        }
        if (have) {
            uint32_t *st = stage[w][cur];
            /* bit r: row r's tile had no addition where dQacc was not zeroed
             * (attn_bwd_dq_first_stores): zeros */
            const uint32_t untouched = __ballot_sync(0xffffffffu, ctr == 0);
            uint32_t b = b0, i = i0, h = h0;
#pragma unroll
            for (int32_t r = 0; r < 8; r++) {
                if (r0 + r < rows) {
                    uint16_t *dq_row = dq_g + b * p.dq_stride[0] + (int64_t)i * p.dq_stride[1] + h * p.dq_stride[2];
#pragma unroll
                    for (int32_t k = 0; k < D / 64; k++) {
                        const int32_t d = 2 * lane + 64 * k;
                        const float2 x = (untouched >> r) & 1u ? make_float2(0.0f, 0.0f) : bwd_tc_dq_plus0(a[r][k]);
                        const uint32_t pr = DT::pack2(__fmul_rn(x.x, p.scale), __fmul_rn(x.y, p.scale));
                        attn_st_pair(dq_row + d, pr);
                        st[r * DIGEST_LEAF_PITCH(D) + d / 2] = pr;
                    }
                }
                if (++h == H) {
                    h = 0;
                    if (++i == S) {
                        i = 0;
                        b++;
                    }
                }
            }
        }
        __syncwarp(); /* staged before the next iteration's quads read them */
        last = have ? (int64_t)r0 : -1;
        cur ^= 1;
        if (t > 0 && (t & 1) == 0) { /* batch t - 1 ended step j = t / 2 - 1 */
            __syncthreads(); /* every warp's leaves of step j are in word_smem[j % 2] */
            const uint32_t j = t / 2 - 1, g = blockIdx.x + j * gridDim.x;
            if (w == (int32_t)(j % BWD_FOLD_WARPS)) { /* a warp in turn: its first quad */
                const uint32_t n = min(rows - DIGEST_FANOUT * g, (uint32_t)DIGEST_FANOUT);
                const uint64_t *ls = word_smem[j & 1];
                const uint64_t hg = digest_words_quad<4>([&](uint32_t k) { return ls[k]; }, lane < 4 ? n : 0, 0, lane);
                if (lane == 0)
                    fold_groups[g] = hg;
            }
            /* word_smem[j % 2] takes step j + 2's leaves only after the next step's barrier */
        }
    }

    /* The count of finished blocks: the barrier orders every thread's hashes before thread
     * 0's fence, which orders them before its increment (release); the block that brings
     * the count to the grid (atomicInc wraps it to 0 for the next launch) fences after it
     * (acquire) and reads the others' hashes from L2. */
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned int done = atomicInc(fold_done, gridDim.x - 1);
        __threadfence();
        last_smem = done == gridDim.x - 1;
    }
    __syncthreads();
    if (!last_smem)
        return;

    /* dQ's supergroups, 32 at a time (quad q the supergroup base + q) into word_smem[c % 2];
     * the first quad runs the root's stripe accumulators over each batch after the barrier
     * (a batch is whole stripes, 32 words; the next batch goes to the other half, so one
     * barrier a batch keeps the writes behind the root's reads) */
    const uint64_t bytes = (uint64_t)rows * D * 2, bytes_k = (uint64_t)rows_k * D * 2;
    uint64_t racc = xxh64_start(bytes, lane & 3);
    uint32_t c = 0;
    for (uint32_t base = 0; base < supers; base += 32, c++) { /* uniform in the block */
        const uint32_t sg = base + q;
        const uint32_t n = sg < supers ? min(groups - DIGEST_FANOUT * sg, (uint32_t)DIGEST_FANOUT) : 0;
        const uint64_t *gp = fold_groups + (uint64_t)DIGEST_FANOUT * sg;
        const uint64_t h = digest_words_quad<16>([&](uint32_t k) { return __ldcg(gp + k); }, n, 0, lane);
        if ((lane & 3) == 0 && n)
            word_smem[c & 1][q] = h;
        __syncthreads(); /* the batch's supergroup hashes are in word_smem[c % 2] */
        if (threadIdx.x < 4) {
            const uint32_t m = min(supers - base, 32u);
            for (uint32_t k = 0; k < m / 4; k++)
                racc = xxh64_round(racc, word_smem[c & 1][4 * k + (lane & 3)]);
        }
    }
    if (w == 0) { /* the first quad: dQ's root over its stripes and the words past them */
        const uint64_t v0 = __shfl_sync(0xffffffffu, (unsigned long long)racc, 0);
        const uint64_t v1 = __shfl_sync(0xffffffffu, (unsigned long long)racc, 1);
        const uint64_t v2 = __shfl_sync(0xffffffffu, (unsigned long long)racc, 2);
        const uint64_t v3 = __shfl_sync(0xffffffffu, (unsigned long long)racc, 3);
        const uint32_t m = supers - (c - 1) * 32, at = m / 4 * 4; /* the last batch: its words */
        const uint64_t *lw = word_smem[(c - 1) & 1];
        if (lane == 0)
            *f.out[0] = xxh64_words_end(v0, v1, v2, v3, supers, bytes, m - at > 0 ? lw[at] : 0,
                                               m - at > 1 ? lw[at + 1] : 0, m - at > 2 ? lw[at + 2] : 0);
    } else if (w < 3) { /* dK's root (warp 1), dV's (warp 2): their first quads */
        const uint64_t *sp = fold_supers + (w - 1) * supers_k;
        const uint64_t h = digest_words_quad<16>([&](uint32_t k) { return __ldcg(sp + k); }, lane < 4 ? supers_k : 0,
                                             bytes_k, lane);
        if (lane == 0)
            *(w == 1 ? f.out[1] : f.out[2]) = h; /* (no index into the params) */
    }
}

#endif
