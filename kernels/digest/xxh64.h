// SPDX-License-Identifier: BSD-3-Clause
/*
 * xxh64.h - XXH64 (the 64-bit xxHash, as specified by its reference documentation) as
 * inline functions for host and device code.
 *
 * The GPU digests (digest_cuda.cu) need XXH64 in device code, where libxxhash cannot go;
 * the host side of the digests uses libxxhash itself (digest.c), and the tests check that
 * this implementation and libxxhash agree on every length class (0..31 bytes, the 32-byte
 * stripes, and the 8/4/1-byte tails). Inputs are read as little-endian words; the devices
 * we build for are little-endian.
 */
#ifndef DASH_XXH64_H
#define DASH_XXH64_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define XXH64_FN static __forceinline__ __host__ __device__
#else
#define XXH64_FN static inline
#endif

#define XXH64_P1 0x9E3779B185EBCA87ull
#define XXH64_P2 0xC2B2AE3D27D4EB4Full
#define XXH64_P3 0x165667B19E3779F9ull
#define XXH64_P4 0x85EBCA77C2B2AE63ull
#define XXH64_P5 0x27D4EB2F165667C5ull

XXH64_FN uint64_t xxh64_rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

/* Lane accumulator a (0..3)'s start for seed: the four of them take the 8-byte words
 * a, a + 4, ... of the 32-byte stripes. */
XXH64_FN uint64_t xxh64_start(uint64_t seed, int a)
{
    return seed + (a == 0 ? XXH64_P1 + XXH64_P2 : a == 1 ? XXH64_P2 : a == 2 ? 0 : 0 - XXH64_P1);
}

XXH64_FN uint64_t xxh64_round(uint64_t acc, uint64_t lane)
{
    acc += lane * XXH64_P2;
    return xxh64_rotl(acc, 31) * XXH64_P1;
}

XXH64_FN uint64_t xxh64_merge(uint64_t h, uint64_t v)
{
    h ^= xxh64_round(0, v);
    return h * XXH64_P1 + XXH64_P4;
}

XXH64_FN uint64_t xxh64_read64(const unsigned char *p)
{
#ifdef __CUDA_ARCH__
    /* memcpy from global memory becomes byte loads on the device: use one load when the
     * address allows it (the digests' chunks are aligned whenever the tensor is) */
    if (((uintptr_t)p & 7u) == 0)
        return *(const uint64_t *)p;
#endif
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

XXH64_FN uint32_t xxh64_read32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The four lane accumulators folded into one, after the 32-byte stripes. */
XXH64_FN uint64_t xxh64_converge(uint64_t v1, uint64_t v2, uint64_t v3, uint64_t v4)
{
    uint64_t h = xxh64_rotl(v1, 1) + xxh64_rotl(v2, 7) + xxh64_rotl(v3, 12) + xxh64_rotl(v4, 18);
    h = xxh64_merge(h, v1);
    h = xxh64_merge(h, v2);
    h = xxh64_merge(h, v3);
    return xxh64_merge(h, v4);
}

/* The final mix. */
XXH64_FN uint64_t xxh64_avalanche(uint64_t h)
{
    h ^= h >> 33;
    h *= XXH64_P2;
    h ^= h >> 29;
    h *= XXH64_P3;
    return h ^ (h >> 32);
}

/* One 8-byte word past the stripes into h. */
XXH64_FN uint64_t xxh64_tail8(uint64_t h, uint64_t w)
{
    h ^= xxh64_round(0, w);
    return xxh64_rotl(h, 27) * XXH64_P1 + XXH64_P4;
}

/* XXH64 with seed of n 8-byte words (8 n bytes) from its four stripe accumulators, for
 * code that runs them side by side (a quad of GPU threads, digest_fold.cuh): v0 .. v3 the
 * chains of xxh64_round from xxh64_start(seed, a) over the words a, a + 4, ... of the
 * n / 4 whole 32-byte stripes (ignored when n < 4), t0 .. t2 the n % 4 words past them
 * (the rest ignored). What xxh64() gives for those bytes. */
XXH64_FN uint64_t xxh64_words_end(uint64_t v0, uint64_t v1, uint64_t v2, uint64_t v3, uint64_t n,
                                  uint64_t seed, uint64_t t0, uint64_t t1, uint64_t t2)
{
    uint64_t h = n >= 4 ? xxh64_converge(v0, v1, v2, v3) : seed + XXH64_P5;
    h += 8 * n;
    if (n % 4 > 0)
        h = xxh64_tail8(h, t0);
    if (n % 4 > 1)
        h = xxh64_tail8(h, t1);
    if (n % 4 > 2)
        h = xxh64_tail8(h, t2);
    return xxh64_avalanche(h);
}

/* The hash of len bytes at p with seed. */
XXH64_FN uint64_t xxh64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = (const unsigned char *)data, *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = xxh64_start(seed, 0), v2 = xxh64_start(seed, 1), v3 = xxh64_start(seed, 2),
                 v4 = xxh64_start(seed, 3);
        const unsigned char *limit = end - 32;
        do {
            v1 = xxh64_round(v1, xxh64_read64(p));
            v2 = xxh64_round(v2, xxh64_read64(p + 8));
            v3 = xxh64_round(v3, xxh64_read64(p + 16));
            v4 = xxh64_round(v4, xxh64_read64(p + 24));
            p += 32;
        } while (p <= limit);
        h = xxh64_converge(v1, v2, v3, v4);
    } else {
        h = seed + XXH64_P5;
    }
    h += (uint64_t)len;
    for (; p + 8 <= end; p += 8) {
        h ^= xxh64_round(0, xxh64_read64(p));
        h = xxh64_rotl(h, 27) * XXH64_P1 + XXH64_P4;
    }
    if (p + 4 <= end) {
        h ^= (uint64_t)xxh64_read32(p) * XXH64_P1;
        h = xxh64_rotl(h, 23) * XXH64_P2 + XXH64_P3;
        p += 4;
    }
    for (; p < end; p++) {
        h ^= (uint64_t)(*p) * XXH64_P5;
        h = xxh64_rotl(h, 11) * XXH64_P1;
    }
    return xxh64_avalanche(h);
}

#endif
