// SPDX-License-Identifier: BSD-3-Clause
/*
 * digest_leaf.cuh - the leaf hash of digest.h (version 2: XXH64 of one row, seed 0) formed
 * by the threads that hold the row in registers, for kernels that write a tensor and can
 * hash it on the way out (the backward's dQ postprocess and dK/dV epilogues): the audit
 * then never reads those outputs again (digest_cuda.h takes the leaves as given).
 *
 * A row of D 16-bit elements is 2D bytes, D a multiple of 64: whole 32-byte stripes, so the
 * hash is XXH64's four accumulators, lane a taking the 8-byte words w = a, a + 4, ... in
 * turn, converged, plus the length, avalanched (xxh64.h; no tail). Four threads (a quad)
 * play the four accumulators of a row and fetch every word from the threads that hold its
 * two 32-bit pairs (an element pair (d, d + 1), as stored: low element in the low half)
 * by shuffles: a warp hashes eight rows at once. (A warp per row, four lanes hashing
 * and 28 waiting, cost the dQ postprocess more than reading dQ again.) All 32 lanes of the
 * warp must call, with the same D.
 *
 * Checked through the backward by tests/gpu/test_attn_gpu.c: the kernels' leaves against
 * XXH64 of the rows copied back, and their digest against digest_rows() on the host.
 */
#ifndef DASH_DIGEST_LEAF_CUH
#define DASH_DIGEST_LEAF_CUH

#include "kernels/digest/xxh64.h"

#include <stdint.h>

/* The quad's four accumulators folded: accumulators 0, 1, 2, 3 live at t4 = 0, 2, 1, 3
 * (digest_leaves_quad); the hash in every lane of the quad. */
static __device__ __forceinline__ uint64_t digest_leaf_finish(uint64_t v, int32_t lane, uint32_t bytes)
{
    const int32_t base = lane & ~3;
    const uint64_t v0 = __shfl_sync(0xffffffffu, (unsigned long long)v, base);
    const uint64_t v1 = __shfl_sync(0xffffffffu, (unsigned long long)v, base + 2);
    const uint64_t v2 = __shfl_sync(0xffffffffu, (unsigned long long)v, base + 1);
    const uint64_t v3 = __shfl_sync(0xffffffffu, (unsigned long long)v, base + 3);
    return xxh64_avalanche(xxh64_converge(v0, v1, v2, v3) + bytes);
}

/* A quad (lanes 4 g .. 4 g + 3, t4 = lane % 4) holds N rows, the mma/wgmma accumulator
 * layout: thread t4 the pairs q[r][t] of row r at elements 8 t + 2 t4 (t < D / 8). Word
 * 4 k + a is elements 16 k + 4 a ..+3: the pairs of t = 2 k + a / 2 from t4 = 2 (a % 2)
 * and the next. So t4 runs accumulator a = 2 (t4 % 2) + t4 / 2, and each step is one
 * exchange with the neighbour (t4 ^ 1): an even t4 owns the word's low pair and is sent
 * the high one, an odd t4 the reverse. The N rows' chains are independent and run side
 * by side (a chain of 64-bit rounds is long: one row at a time left the epilogues waiting
 * on it). h[r]: row r's hash, valid in every lane of the quad. */
template <int D, int N>
static __device__ __forceinline__ void digest_leaves_quad(const uint32_t (&q)[N][D / 8], int32_t lane,
                                                          uint64_t (&h)[N])
{
    static_assert(D % 16 == 0, "whole stripes");
    const int32_t t4 = lane & 3, odd = t4 & 1;
    uint64_t v[N];
#pragma unroll
    for (int32_t r = 0; r < N; r++)
        v[r] = xxh64_start(0, 2 * odd + (t4 >> 1));
#pragma unroll
    for (int32_t k = 0; k < D / 16; k++)
#pragma unroll
        for (int32_t r = 0; r < N; r++) {
            const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? q[r][2 * k] : q[r][2 * k + 1], 1);
            const uint64_t w = odd ? ((uint64_t)got | (uint64_t)q[r][2 * k + 1] << 32)
                                   : ((uint64_t)q[r][2 * k] | (uint64_t)got << 32);
            v[r] = xxh64_round(v[r], w);
        }
#pragma unroll
    for (int32_t r = 0; r < N; r++)
        h[r] = digest_leaf_finish(v[r], lane, 2u * D);
}

/* XXH64 of one row of D 16-bit elements hashed by one thread alone, from chunk(m): the
 * row's 16-byte chunk m (elements 8 m .. 8 m + 7, m < D / 8) as two little-endian 8-byte
 * words - words 2 m and 2 m + 1 of the row, the word pairs of accumulators 0, 1 (m even)
 * or 2, 3 (m odd) at stripe m / 2. For rows another thread staged in shared memory, where
 * any thread may read any row: no exchanges, and one converge and avalanche a row instead
 * of digest_leaves_quad's four a lane (each quad lane finishes all four of its rows). The
 * four chains are independent and run side by side; chunk(m) is called just before its
 * rounds (the reads may stream into them instead of being held whole). */
template <int D, typename CHUNK>
static __device__ __forceinline__ uint64_t digest_leaf_row(CHUNK chunk)
{
    static_assert(D % 16 == 0, "whole stripes");
    uint64_t v[4];
#pragma unroll
    for (int32_t a = 0; a < 4; a++)
        v[a] = xxh64_start(0, a);
#pragma unroll
    for (int32_t m = 0; m < D / 8; m++) {
        const ulonglong2 w = chunk(m);
        v[2 * (m & 1)] = xxh64_round(v[2 * (m & 1)], w.x);
        v[2 * (m & 1) + 1] = xxh64_round(v[2 * (m & 1) + 1], w.y);
    }
    return xxh64_avalanche(xxh64_converge(v[0], v[1], v[2], v[3]) + 2u * D);
}

/* A warp's rows of D 16-bit elements staged in shared memory as 32-bit pairs, row r at
 * r * DIGEST_LEAF_PITCH(D) words (four words of padding: the quads' reads below hit 32
 * banks), each hashed by a quad: lane 4 r + t4 reads its pairs (elements 8 t + 2 t4, word
 * 4 t + t4) of row r. The hash is valid in the lanes of quad r. */
#define DIGEST_LEAF_PITCH(D) ((D) / 2 + 4)
template <int D>
static __device__ __forceinline__ uint64_t digest_leaf_staged(const uint32_t *stage, int32_t lane)
{
    const uint32_t *row = stage + (lane >> 2) * DIGEST_LEAF_PITCH(D);
    uint32_t q[1][D / 8];
#pragma unroll
    for (int32_t t = 0; t < D / 8; t++)
        q[0][t] = row[4 * t + (lane & 3)];
    uint64_t h[1];
    digest_leaves_quad<D, 1>(q, lane, h);
    return h[0];
}

#endif
