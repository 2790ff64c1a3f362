// SPDX-License-Identifier: BSD-3-Clause
/*
 * digest_leaf.cuh - the leaf hash of digest.h (version 3: XXH3-64 of one row) formed by the
 * threads that hold the row on chip, for kernels that write a tensor and can hash it on the
 * way out (the backward's dQ postprocess and dK/dV epilogues): the audit then never reads
 * those outputs again (digest_cuda.h takes the leaves as given).
 *
 * A row of D 16-bit elements is 2D bytes: 128 at D = 64 (XXH3's 17-128 class), 256 and 512
 * at D = 128 and 256 (its long form; no block ends so short a row) - chunked rows
 * (xxh3.h): 16-byte chunks (8 elements), the hash one avalanche of a sum of independent
 * terms. Three ways to form it, all 32 lanes of the warp calling with the same D:
 *
 *   digest_leaf_row     one thread, one row, reading its chunks whole (rows another thread
 *                       staged in shared memory: any lane may read any row): the keys are
 *                       constants in the instructions, no exchanges, one finish a row;
 *   digest_leaf_staged  a quad per row staged in shared memory: lane j takes the chunks
 *                       c = j, j + 4, ... (its accumulator pair of the long form, or those
 *                       chunks' terms), its keys loaded (they depend on j), the four parts
 *                       summed by two exchanges;
 *   digest_leaves_quad  up to four rows held in registers in the mma/wgmma accumulator
 *                       layout (quad lane t4 a 4-byte pair of each chunk), transposed
 *                       within the quad a chunk at a time (lane j then holds row j's chunk
 *                       whole) and hashed as digest_leaf_row (_fn: the pairs formed as the
 *                       hash asks for them).
 *
 * Version 2 hashed with XXH64 here: two 64 x 64-bit multiplies per 8 bytes where the long
 * form needs one 32 x 32 -> 64-bit one (head dim 128's unit-end leaves: the record in
 * bench/results/digest3-trial-2026-12-07.md). The arithmetic is xxh3.h's, checked against
 * libxxhash by tests/test_digest.c (the one-thread and four-lane splits included); the
 * kernels' leaves are checked through the backward by tests/gpu/test_attn_gpu.c (against
 * XXH3-64 of the rows copied back, their digest against digest_rows() on the host).
 */
#ifndef DASH_DIGEST_LEAF_CUH
#define DASH_DIGEST_LEAF_CUH

#include "kernels/digest/xxh3.h"

#include <stdint.h>

/* XXH3-64 of a row of LEN bytes (XXH3_CHUNKED) hashed by one thread from chunk(c): the
 * row's 16-byte chunk c (bytes 16 c .. 16 c + 15) as two little-endian 8-byte words,
 * c = 0 .. LEN / 16 - 1 in order, each called just before its arithmetic (the reads may
 * stream into it instead of being held whole). The long form's four accumulator pairs are
 * independent chains and run side by side. */
template <int LEN, typename CHUNK>
static __device__ __forceinline__ uint64_t digest_leaf_chunks(CHUNK chunk)
{
    static_assert(XXH3_CHUNKED(LEN), "a chunked row (xxh3.h)");
    uint64_t t = 0;
    if constexpr (LEN <= 128) {
#pragma unroll
        for (uint32_t c = 0; c < LEN / 16; c++) {
            const ulonglong2 w = chunk((int32_t)c);
            t += xxh3_mid_term(c, LEN, w.x, w.y);
        }
    } else {
        uint64_t a[8];
#pragma unroll
        for (uint32_t j = 0; j < 4; j++)
            xxh3_long_start(j, &a[2 * j], &a[2 * j + 1]);
#pragma unroll
        for (uint32_t c = 0; c < LEN / 16; c++) {
            const ulonglong2 w = chunk((int32_t)c);
            xxh3_long_chunk(c / 4, c % 4, LEN, &a[2 * (c % 4)], &a[2 * (c % 4) + 1], w.x, w.y);
        }
#pragma unroll
        for (uint32_t j = 0; j < 4; j++)
            t += xxh3_long_term(j, a[2 * j], a[2 * j + 1]);
    }
    return xxh3_end(t, LEN);
}

/* The leaf of one row of D 16-bit elements hashed by one thread alone, from chunk(m): the
 * row's elements 8 m .. 8 m + 7 (m < D / 8) as two little-endian 8-byte words. */
template <int D, typename CHUNK>
static __device__ __forceinline__ uint64_t digest_leaf_row(CHUNK chunk)
{
    return digest_leaf_chunks<2 * D>(chunk);
}

/* A warp's rows of D 16-bit elements staged in shared memory as 32-bit pairs, row r at
 * r * DIGEST_LEAF_PITCH(D) words from a 16-byte aligned stage, each hashed by a quad: lane
 * 4 r + j reads its chunks c = j, j + 4, ... of row r (LDS.128). Sixteen words of padding
 * a row: a quarter warp's eight lanes read 64 bytes of each of two rows, and rows 64 bytes
 * apart modulo the 128 bytes of banks take disjoint banks. The hash is valid in the four
 * lanes of quad r. */
#define DIGEST_LEAF_PITCH(D) ((D) / 2 + 16)
template <int D>
static __device__ __forceinline__ uint64_t digest_leaf_staged(const uint32_t *stage, int32_t lane)
{
    constexpr uint32_t LEN = 2 * D;
    static_assert(XXH3_CHUNKED(LEN) && LEN <= 64 * XXH3_BLOCK_STRIPES, "a chunked row of one block");
    const uint32_t j = (uint32_t)lane & 3u;
    const ulonglong2 *row = reinterpret_cast<const ulonglong2 *>(stage + (lane >> 2) * DIGEST_LEAF_PITCH(D));
    uint64_t t;
    if constexpr (LEN <= 128) {
        t = 0;
#pragma unroll
        for (uint32_t i = 0; i < LEN / 64; i++) {
            const ulonglong2 w = row[4 * i + j];
            t += xxh3_mid_term(4 * i + j, LEN, w.x, w.y);
        }
    } else {
        uint64_t a0, a1;
        xxh3_long_start(j, &a0, &a1);
#pragma unroll
        for (uint32_t s = 0; s < LEN / XXH3_STRIPE; s++) {
            const ulonglong2 w = row[4 * s + j];
            xxh3_long_chunk(s, j, LEN, &a0, &a1, w.x, w.y);
        }
        t = xxh3_long_term(j, a0, a1);
    }
    t += __shfl_xor_sync(0xffffffffu, (unsigned long long)t, 1);
    t += __shfl_xor_sync(0xffffffffu, (unsigned long long)t, 2);
    return xxh3_end(t, LEN);
}

/* A 4 x 4 transpose within the quad of lane t4 (= lane % 4): x[i] in, the quad's row i's
 * pair t4; out, row t4's pair i. Two exchanges of two words: with lane t4 ^ 1 (each lane
 * keeps rows i % 2 = t4 % 2 and gets the neighbour's pair of them), then with t4 ^ 2. */
static __device__ __forceinline__ void digest_quad_transpose(uint32_t (&x)[4], int32_t t4)
{
    const bool odd = t4 & 1, high = t4 & 2;
#pragma unroll
    for (int32_t i = 0; i < 4; i += 2) { /* rows i, i + 1: keep row i + odd, pairs t4 & 2 .. + 1 */
        const uint32_t keep = odd ? x[i + 1] : x[i];
        const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? x[i] : x[i + 1], 1);
        x[i] = odd ? got : keep;
        x[i + 1] = odd ? keep : got;
    }
#pragma unroll
    for (int32_t k = 0; k < 2; k++) { /* x[k]: row t4 % 2, x[2 + k]: row 2 + t4 % 2, pair (t4 & 2) + k */
        const uint32_t keep = high ? x[2 + k] : x[k];
        const uint32_t got = __shfl_xor_sync(0xffffffffu, high ? x[k] : x[2 + k], 2);
        x[k] = high ? got : keep;
        x[2 + k] = high ? keep : got;
    }
}

/* A quad (lanes 4 g .. 4 g + 3, t4 = lane % 4) holds N <= 4 rows in the mma/wgmma
 * accumulator layout: lane t4 the pairs of row r at elements 8 t + 2 t4 (t < D / 8; an
 * element pair (d, d + 1) as stored, the low element in the low half) - chunk t of each
 * row spread over the quad. pairs(t, x) gives the lane's pairs of chunk t, x[r] for r < N
 * (called for t = 0 .. D / 8 - 1 in order). For each t the quad transposes
 * (digest_quad_transpose; rows N .. 3 zeros), so that lane t4 holds chunk t of row t4
 * whole, and lane t4 hashes row t4 as digest_leaf_row. Returns row t4's leaf in lane t4
 * (lanes t4 >= N: nothing). */
template <int D, int N, typename PAIRS>
static __device__ __forceinline__ uint64_t digest_leaves_quad_fn(PAIRS pairs, int32_t lane)
{
    static_assert(N >= 1 && N <= 4 && D % 8 == 0, "up to four rows of whole chunks");
    const int32_t t4 = lane & 3;
    return digest_leaf_row<D>([&](int32_t t) {
        uint32_t x[4] = {0u, 0u, 0u, 0u};
        pairs(t, x);
        digest_quad_transpose(x, t4);
        return make_ulonglong2((unsigned long long)x[0] | (unsigned long long)x[1] << 32,
                               (unsigned long long)x[2] | (unsigned long long)x[3] << 32);
    });
}

/* digest_leaves_quad_fn of rows held whole: q[r][t] the lane's pair of chunk t of row r. */
template <int D, int N>
static __device__ __forceinline__ uint64_t digest_leaves_quad(const uint32_t (&q)[N][D / 8], int32_t lane)
{
    return digest_leaves_quad_fn<D, N>(
        [&](int32_t t, uint32_t(&x)[4]) {
#pragma unroll
            for (int32_t r = 0; r < N; r++)
                x[r] = q[r][t];
        },
        lane);
}

#endif
