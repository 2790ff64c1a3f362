// SPDX-License-Identifier: BSD-3-Clause
/*
 * digest_fold.cuh - the levels of digest.h's tree above the leaves (a group's hash over 64
 * leaf hashes, a supergroup's over 64 group hashes, the root over the supergroup hashes:
 * each XXH64 of a run of 8-byte words) formed by a quad of threads, for a kernel that
 * folds the leaves it wrote into the digests itself (the backward's dQ postprocess,
 * kernels/cuda/bwd_fold.cuh) instead of leaving them to digest_cuda.h's tree kernel.
 *
 * XXH64's four stripe accumulators are independent chains: lane t4 of the quad runs
 * accumulator t4 over the words t4, t4 + 4, ... of the whole 32-byte stripes (a quarter of
 * the serial rounds one thread would run: the chain of 64-bit multiplies is what a group's
 * hash waits on), the quad gathers the four by shuffles and every lane ends the hash
 * (xxh64_words_end: converge, length, the words past the stripes, avalanche). Each lane
 * loads its words several at a time before their rounds, so a run read from L2 waits one
 * latency per 64 words, not one per word. The arithmetic is checked against libxxhash on
 * the host (tests/test_digest.c); the digests it makes against the CPU's by the GPU tests.
 */
#ifndef DASH_DIGEST_FOLD_CUH
#define DASH_DIGEST_FOLD_CUH

#include "kernels/digest/xxh64.h"

#include <stdint.h>

/* XXH64 (seed) of the n words load(0) .. load(n - 1), by the quad of `lane` (lanes
 * 4 g .. 4 g + 3). All 32 lanes of the warp must call (the shuffles name the whole warp),
 * each quad with its own load, n and seed; a quad with nothing to hash passes n 0 (and
 * gets the hash of no words, which it drops). AHEAD: the words a lane loads before their
 * rounds - 16 from L2 (one latency per 64 words), 4 from shared memory (registers are
 * what a caller inside a busy loop lacks). The hash in every lane of the quad. */
template <int AHEAD, typename Load>
static __device__ __forceinline__ uint64_t digest_words_quad(Load load, uint32_t n, uint64_t seed, int32_t lane)
{
    const int32_t t4 = lane & 3, q0 = lane & ~3;
    const uint32_t stripes = n / 4;
    uint64_t v = xxh64_start(seed, t4);
    for (uint32_t s = 0; s < stripes; s += AHEAD) {
        uint64_t x[AHEAD];
#pragma unroll
        for (int32_t k = 0; k < AHEAD; k++)
            x[k] = s + k < stripes ? load(4 * (s + k) + t4) : 0;
#pragma unroll
        for (int32_t k = 0; k < AHEAD; k++)
            if (s + k < stripes)
                v = xxh64_round(v, x[k]);
    }
    const uint64_t v0 = __shfl_sync(0xffffffffu, (unsigned long long)v, q0);
    const uint64_t v1 = __shfl_sync(0xffffffffu, (unsigned long long)v, q0 + 1);
    const uint64_t v2 = __shfl_sync(0xffffffffu, (unsigned long long)v, q0 + 2);
    const uint64_t v3 = __shfl_sync(0xffffffffu, (unsigned long long)v, q0 + 3);
    const uint32_t at = 4 * stripes, left = n - at;
    return xxh64_words_end(v0, v1, v2, v3, n, seed, left > 0 ? load(at) : 0, left > 1 ? load(at + 1) : 0,
                           left > 2 ? load(at + 2) : 0);
}

#endif
