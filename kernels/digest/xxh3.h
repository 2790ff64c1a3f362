// SPDX-License-Identifier: BSD-3-Clause
/*
 * xxh3.h - XXH3-64 with seed 0 and the default secret (xxHash's doc/xxhash_spec.md,
 * "XXH3 Algorithm Description") as inline functions for host and device code: the leaf
 * hash of the digests (digest.h, version 3).
 *
 * The GPU digests and the backward's kernels need it in device code, where libxxhash
 * cannot go; the host side of the digests uses libxxhash itself (digest.c), and the tests
 * check this implementation against libxxhash's XXH3_64bits for every length up to 4 KiB
 * (the longest leaf), at misaligned starts, and the chunked forms below against it too.
 * Written from the specification; only its constants (the primes, the 192-byte secret)
 * are taken over. Inputs are read as little-endian words; the devices we build for are
 * little-endian.
 *
 * Length classes (n bytes): 0; 1-3, 4-8, 9-16 (a few words mixed with the secret);
 * 17-128 and 129-240 (16-byte chunks, each mixed with 16 bytes of the secret by one
 * 64 x 64 -> 128-bit multiply, summed); above 240 the long form: eight 64-bit accumulators
 * fed 64-byte stripes, each 8-byte word w adding lo32(w ^ key) * hi32(w ^ key) to its own
 * accumulator and w to its neighbour's (a 32 x 32 -> 64-bit multiply a word, where XXH64
 * needs two 64 x 64-bit ones), the accumulators scrambled after every block of 16 stripes,
 * the last 64 bytes fed as a stripe of their own, then merged pairwise.
 *
 * Chunked rows. The kernels hash rows they hold as 16-byte chunks: a row of n bytes with
 * XXH3_CHUNKED(n) - a multiple of 32 up to 128 (the 17-128 class) or of 64 above 240 (the
 * long class) - hashes to xxh3_end(T, n), T the sum (mod 2^64) of one term per part:
 *
 *   17-128  chunk c's term xxh3_mid_term(c, n, w0, w1), for each c < n / 16;
 *   long    accumulator pair j's xxh3_long_term(j, a0, a1), j < 4, after pair j started
 *           at xxh3_long_start and took the chunks c = 4 s + j (stripe s, in order) by
 *           xxh3_long_chunk: chunk c only ever touches pair c % 4.
 *
 * The terms are independent, so a row can be split over threads by chunks (17-128) or by
 * accumulator pairs (long) and their terms summed in any order (digest_leaf.cuh).
 */
#ifndef DASH_XXH3_H
#define DASH_XXH3_H

#include "kernels/digest/xxh64.h" /* the 64-bit primes, XXH64's avalanche and reads */

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define XXH3_FN static __forceinline__ __host__ __device__
#else
#define XXH3_FN static inline
#endif

#define XXH3_P32_1 0x9E3779B1u
#define XXH3_P32_2 0x85EBCA77u
#define XXH3_P32_3 0xC2B2AE3Du
#define XXH3_MX1 0x165667919E3779F9ull /* XXH3's avalanche */
#define XXH3_MX2 0x9FB21C651E98DF25ull /* the 4-8 byte class's mix */

#define XXH3_SECRET_SIZE 192
#define XXH3_STRIPE 64                                           /* bytes: 8 accumulators' words */
#define XXH3_BLOCK_STRIPES ((XXH3_SECRET_SIZE - XXH3_STRIPE) / 8) /* 16 stripes, then a scramble */
#define XXH3_MID_MAX 240                                         /* the longest medium input */
/* Where in the secret each use reads its keys (byte offsets). */
#define XXH3_KEY_SCRAMBLE (XXH3_SECRET_SIZE - XXH3_STRIPE)       /* 128: accumulator i's at + 8 i */
#define XXH3_KEY_LAST_STRIPE (XXH3_SECRET_SIZE - XXH3_STRIPE - 7) /* 121: the last 64 bytes' */
#define XXH3_KEY_MERGE 11                                        /* pair j's at + 16 j */
#define XXH3_KEY_MID_ON 3    /* 129-240: chunk i >= 8's at 16 (i - 8) + 3 */
#define XXH3_KEY_MID_LAST 119 /* 129-240: the last 16 bytes' (136 - 17) */

/* The default secret (xxhash_spec.md, "Seed and Secret"). */
#define XXH3_SECRET_BYTES                                                                                          \
    {                                                                                                          \
        0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c, 0xde, 0xd4, \
            0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, 0xcb, 0x79, 0xe6,  \
            0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74,  \
            0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91,  \
            0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d,  \
            0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, 0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34,  \
            0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, 0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31,  \
            0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5,  \
            0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, 0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16,  \
            0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8,  \
            0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca,  \
            0xbb, 0x4b, 0x40, 0x7e                                                                             \
    }

/* The long form's accumulators at the start (accumulator i's value). */
#define XXH3_ACC_START                                                                                             \
    {                                                                                                          \
        XXH3_P32_3, XXH64_P1, XXH64_P2, XXH64_P3, XXH64_P4, XXH3_P32_2, XXH64_P5, XXH3_P32_1                       \
    }

#ifdef __CUDACC__
/* Device code reads the secret as little-endian 64-bit words (a key at an offset that is
 * not a multiple of 8 from two of them): where the offset is a constant the compiler folds
 * the key into the instruction; where it is not (a lane's own accumulator pair), one or two
 * cached loads. One word past the secret, so that the second load stays inside. */
struct xxh3_consts {
    uint64_t key[XXH3_SECRET_SIZE / 8 + 1];
    uint64_t acc[8]; /* XXH3_ACC_START */
};

static constexpr __host__ __device__ struct xxh3_consts xxh3_consts_make(void)
{
    constexpr unsigned char s[XXH3_SECRET_SIZE] = XXH3_SECRET_BYTES;
    constexpr uint64_t a[8] = XXH3_ACC_START;
    struct xxh3_consts c{};
    for (int i = 0; i < XXH3_SECRET_SIZE; i++)
        c.key[i / 8] |= (uint64_t)s[i] << (8 * (i % 8));
    for (int i = 0; i < 8; i++)
        c.acc[i] = a[i];
    return c;
}
#endif

/* The secret's little-endian 64-bit word at byte off (off <= XXH3_SECRET_SIZE - 8). */
XXH3_FN uint64_t xxh3_key64(uint32_t off)
{
#ifdef __CUDA_ARCH__
    static const struct xxh3_consts c = xxh3_consts_make();
    const uint32_t sh = 8 * (off % 8);
    const uint64_t lo = c.key[off / 8];
    return sh ? lo >> sh | c.key[off / 8 + 1] << (64 - sh) : lo;
#else
    static const unsigned char s[XXH3_SECRET_SIZE] = XXH3_SECRET_BYTES;
    uint64_t v = 0;
    for (int b = 0; b < 8; b++)
        v |= (uint64_t)s[off + (uint32_t)b] << (8 * b);
    return v;
#endif
}

/* The long form's accumulator i (0..7) at the start. */
XXH3_FN uint64_t xxh3_acc_start(uint32_t i)
{
#ifdef __CUDA_ARCH__
    static const struct xxh3_consts c = xxh3_consts_make();
    return c.acc[i];
#else
    static const uint64_t a[8] = XXH3_ACC_START;
    return a[i];
#endif
}

/* a b, a widening 32 x 32-bit multiply. On the device PTX's mul.wide.u32 itself (ptxas
 * folds an addition of the product into the multiply): the same product written in C on
 * 64-bit values (the masked halves) stayed a 64-bit multiply, which ptxas narrowed leaving
 * a zero high cross term to add (a tenth of head dim 128's unit-end leaves). */
XXH3_FN uint64_t xxh3_mulw(uint32_t a, uint32_t b)
{
#ifdef __CUDA_ARCH__
    uint64_t r;
    asm("mul.wide.u32 %0, %1, %2;" : "=l"(r) : "r"(a), "r"(b));
    return r;
#else
    return (uint64_t)a * b;
#endif
}

/* The product of v's halves, lo32(v) hi32(v) (the long form's multiply a word). */
XXH3_FN uint64_t xxh3_mul32(uint64_t v)
{
    return xxh3_mulw((uint32_t)v, (uint32_t)(v >> 32));
}

/* The low and high halves of the 128-bit product a b, xor-ed. */
XXH3_FN uint64_t xxh3_mul128_fold64(uint64_t a, uint64_t b)
{
#ifdef __CUDA_ARCH__
    return a * b ^ __umul64hi(a, b);
#else
    const unsigned __int128 m = (unsigned __int128)a * b;
    return (uint64_t)m ^ (uint64_t)(m >> 64);
#endif
}

/* XXH3's final mix (the spec's avalanche; the 0-3 byte classes use XXH64's). */
XXH3_FN uint64_t xxh3_avalanche(uint64_t h)
{
    h ^= h >> 37;
    h *= XXH3_MX1;
    return h ^ (h >> 32);
}

XXH3_FN uint64_t xxh3_bswap64(uint64_t x)
{
    x = (x & 0x00FF00FF00FF00FFull) << 8 | (x >> 8 & 0x00FF00FF00FF00FFull);
    x = (x & 0x0000FFFF0000FFFFull) << 16 | (x >> 16 & 0x0000FFFF0000FFFFull);
    return x << 32 | x >> 32;
}

/* 16 bytes at p as two little-endian words. */
XXH3_FN void xxh3_read16(const unsigned char *p, uint64_t *ret_w0, uint64_t *ret_w1)
{
#ifdef __CUDA_ARCH__
    if (((uintptr_t)p & 15u) == 0) { /* one load where the address allows (aligned rows) */
        const ulonglong2 v = *(const ulonglong2 *)p;
        *ret_w0 = v.x;
        *ret_w1 = v.y;
        return;
    }
#endif
    *ret_w0 = xxh64_read64(p);
    *ret_w1 = xxh64_read64(p + 8);
}

/* The spec's mixStep (seed 0): the 16 bytes w0, w1 against the 16 of the secret at koff. */
XXH3_FN uint64_t xxh3_mix16(uint64_t w0, uint64_t w1, uint32_t koff)
{
    return xxh3_mul128_fold64(w0 ^ xxh3_key64(koff), w1 ^ xxh3_key64(koff + 8));
}

/* Words w0, w1 (lanes 2 j and 2 j + 1 of a stripe) into accumulators a0 = acc[2 j] and
 * a1 = acc[2 j + 1], keys at koff, koff + 8: each word's 32 x 32-bit product to its own
 * accumulator, the word itself to its neighbour's. */
XXH3_FN void xxh3_accumulate16(uint64_t *a0, uint64_t *a1, uint64_t w0, uint64_t w1, uint32_t koff)
{
    *a0 += w1 + xxh3_mul32(w0 ^ xxh3_key64(koff));
    *a1 += w0 + xxh3_mul32(w1 ^ xxh3_key64(koff + 8));
}

/* Accumulator i's scramble at the end of a block. */
XXH3_FN uint64_t xxh3_scramble(uint64_t a, uint32_t i)
{
    a ^= a >> 47;
    a ^= xxh3_key64(XXH3_KEY_SCRAMBLE + 8 * i);
    return a * XXH3_P32_1;
}

/* Accumulator pair j's share of the long form's merge. */
XXH3_FN uint64_t xxh3_long_term(uint32_t j, uint64_t a0, uint64_t a1)
{
    return xxh3_mul128_fold64(a0 ^ xxh3_key64(XXH3_KEY_MERGE + 16 * j), a1 ^ xxh3_key64(XXH3_KEY_MERGE + 16 * j + 8));
}

/* The hash of a 17-240 byte or long input of n bytes from the sum of its terms. */
XXH3_FN uint64_t xxh3_end(uint64_t terms, uint64_t n)
{
    return xxh3_avalanche(n * XXH64_P1 + terms);
}

/* ---- chunked rows (see the file's header) ---------------------------------------------- */

#define XXH3_CHUNKED(n) (((n) % 32 == 0 && (n) >= 32 && (n) <= 128) || ((n) % 64 == 0 && (n) > XXH3_MID_MAX))
/* 17-128 with n % 32 == 0: the first n / 32 chunks are the spec's chunks from the start
 * (round i: chunk i, key 32 i), the others those from the end (round i: chunk n / 16 - 1 - i,
 * key 32 i + 16) - each chunk once. */
#define XXH3_MID_KEY(c, n) ((c) < (n) / 32 ? 32 * (c) : 32 * ((n) / 16 - 1 - (c)) + 16)
/* Long with n % 64 == 0: the stripes before the last take keys 8 (s % 16) + 16 j; the last
 * stripe is the last 64 bytes. */
#define XXH3_LONG_KEY(s, j, n) ((s) + 1 < (n) / XXH3_STRIPE ? 8 * ((s) % 16) + 16 * (j) : XXH3_KEY_LAST_STRIPE + 16 * (j))

/* Chunk c's term in a 17-128 row of n bytes (XXH3_CHUNKED). */
XXH3_FN uint64_t xxh3_mid_term(uint32_t c, uint32_t n, uint64_t w0, uint64_t w1)
{
    return xxh3_mix16(w0, w1, XXH3_MID_KEY(c, n));
}

/* Accumulator pair j's start. */
XXH3_FN void xxh3_long_start(uint32_t j, uint64_t *ret_a0, uint64_t *ret_a1)
{
    *ret_a0 = xxh3_acc_start(2 * j);
    *ret_a1 = xxh3_acc_start(2 * j + 1);
}

/* Chunk c = 4 s + j (stripe s, words 2 j and 2 j + 1) of a long row of n bytes (XXH3_CHUNKED)
 * into accumulator pair j, and the pair's scramble where stripe s ends a block. */
XXH3_FN void xxh3_long_chunk(uint32_t s, uint32_t j, uint32_t n, uint64_t *a0, uint64_t *a1, uint64_t w0, uint64_t w1)
{
    xxh3_accumulate16(a0, a1, w0, w1, XXH3_LONG_KEY(s, j, n));
    if (s + 1 < n / XXH3_STRIPE && s % XXH3_BLOCK_STRIPES == XXH3_BLOCK_STRIPES - 1) {
        *a0 = xxh3_scramble(*a0, 2 * j);
        *a1 = xxh3_scramble(*a1, 2 * j + 1);
    }
}

/* ---- any input --------------------------------------------------------------------------- */

/* The long form (n > 240): the stripes before the last 64 bytes, 16 to a block and a
 * scramble after each whole block, then the last 64 bytes as a stripe, then the merge. */
XXH3_FN uint64_t xxh3_long(const unsigned char *p, size_t n)
{
    uint64_t acc[8];
    for (uint32_t i = 0; i < 8; i++)
        acc[i] = xxh3_acc_start(i);
    const size_t stripes = (n - 1) / XXH3_STRIPE; /* a last block's stripes stop short of 16 */
    for (size_t s = 0; s < stripes; s++) {
        for (uint32_t j = 0; j < 4; j++) {
            uint64_t w0, w1;
            xxh3_read16(p + XXH3_STRIPE * s + 16 * j, &w0, &w1);
            xxh3_accumulate16(&acc[2 * j], &acc[2 * j + 1], w0, w1, (uint32_t)(8 * (s % XXH3_BLOCK_STRIPES)) + 16 * j);
        }
        if (s % XXH3_BLOCK_STRIPES == XXH3_BLOCK_STRIPES - 1)
            for (uint32_t i = 0; i < 8; i++)
                acc[i] = xxh3_scramble(acc[i], i);
    }
    uint64_t t = 0;
    for (uint32_t j = 0; j < 4; j++) {
        uint64_t w0, w1;
        xxh3_read16(p + n - XXH3_STRIPE + 16 * j, &w0, &w1);
        xxh3_accumulate16(&acc[2 * j], &acc[2 * j + 1], w0, w1, XXH3_KEY_LAST_STRIPE + 16 * j);
        t += xxh3_long_term(j, acc[2 * j], acc[2 * j + 1]);
    }
    return xxh3_end(t, n);
}

/* XXH3-64 (seed 0, the default secret) of n bytes at data. */
XXH3_FN uint64_t xxh3_64(const void *data, size_t n)
{
    const unsigned char *p = (const unsigned char *)data;
    if (n > XXH3_MID_MAX)
        return xxh3_long(p, n);
    if (n > 128) {
        /* 129-240: the first 8 chunks, an avalanche, the other whole chunks with keys from
         * offset 3, the last 16 bytes */
        uint64_t acc = n * XXH64_P1, w0, w1;
        for (uint32_t i = 0; i < 8; i++) {
            xxh3_read16(p + 16 * i, &w0, &w1);
            acc += xxh3_mix16(w0, w1, 16 * i);
        }
        acc = xxh3_avalanche(acc);
        for (uint32_t i = 8; i < n / 16; i++) {
            xxh3_read16(p + 16 * i, &w0, &w1);
            acc += xxh3_mix16(w0, w1, 16 * (i - 8) + XXH3_KEY_MID_ON);
        }
        xxh3_read16(p + n - 16, &w0, &w1);
        return xxh3_avalanche(acc + xxh3_mix16(w0, w1, XXH3_KEY_MID_LAST));
    }
    if (n > 16) {
        /* 17-128: rounds i of a chunk from the start and one from the end */
        uint64_t t = 0, w0, w1;
        for (uint32_t i = 0; i < (n - 1) / 32 + 1; i++) {
            xxh3_read16(p + 16 * i, &w0, &w1);
            t += xxh3_mix16(w0, w1, 32 * i);
            xxh3_read16(p + n - 16 - 16 * i, &w0, &w1);
            t += xxh3_mix16(w0, w1, 32 * i + 16);
        }
        return xxh3_end(t, n);
    }
    if (n > 8) {
        const uint64_t lo = xxh64_read64(p) ^ xxh3_key64(24) ^ xxh3_key64(32);
        const uint64_t hi = xxh64_read64(p + n - 8) ^ xxh3_key64(40) ^ xxh3_key64(48);
        return xxh3_avalanche(n + xxh3_bswap64(lo) + hi + xxh3_mul128_fold64(lo, hi));
    }
    if (n >= 4) {
        const uint64_t w = ((uint64_t)xxh64_read32(p) << 32 | xxh64_read32(p + n - 4)) ^ xxh3_key64(8) ^ xxh3_key64(16);
        uint64_t h = w ^ xxh64_rotl(w, 49) ^ xxh64_rotl(w, 24);
        h *= XXH3_MX2;
        h ^= (h >> 35) + n;
        h *= XXH3_MX2;
        return h ^ (h >> 28);
    }
    if (n > 0) {
        const uint32_t c = (uint32_t)p[n - 1] | (uint32_t)n << 8 | (uint32_t)p[0] << 16 | (uint32_t)p[n >> 1] << 24;
        return xxh64_avalanche((uint64_t)((uint32_t)xxh3_key64(0) ^ (uint32_t)xxh3_key64(4)) ^ c);
    }
    return xxh64_avalanche(xxh3_key64(56) ^ xxh3_key64(64));
}

#endif
