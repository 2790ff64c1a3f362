// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_digest.c - the tensor digest (kernels/digest/digest.h): its definition, and the XXH64
 * that the GPU side uses (kernels/digest/xxh64.h) against libxxhash.
 */
#include "suites.h"
#include "testutil.h"

#include "kernels/digest/digest.h"
#include "kernels/digest/xxh64.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static unsigned char *random_bytes(size_t n, uint64_t salt)
{
    unsigned char *p = malloc(n ? n : 1);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ salt);
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)tu_next(&r);
    return p;
}

/* The device's XXH64 is libxxhash's on every length class: short inputs, whole 32-byte
 * stripes, and every tail of 8/4/1 bytes, with several seeds and misaligned starts. */
static void test_digest_xxh64_matches_libxxhash(void)
{
    unsigned char *b = random_bytes(4096 + 8, 0x11);
    int bad = 0;
    for (size_t n = 0; n < 300; n++)
        for (size_t off = 0; off < 8; off += 3)
            for (uint64_t seed = 0; seed < 3; seed++) {
                uint64_t s = seed * 0x9E3779B97F4A7C15ull;
                bad += xxh64(b + off, n, s) != XXH64(b + off, n, s);
            }
    bad += xxh64(b, 4096, 65536) != XXH64(b, 4096, 65536);
    CU_ASSERT_EQUAL(bad, 0);
    free(b);
}

/* The definition written out: leaves of 4 KiB chunks, groups of 64 leaf hashes, the root
 * over the group hashes (little-endian words) seeded with the length. */
static void le64(unsigned char *p, uint64_t v)
{
    for (int b = 0; b < 8; b++)
        p[b] = (unsigned char)(v >> (8 * b));
}

static uint64_t by_definition(const unsigned char *p, uint64_t n)
{
    uint64_t k = (n + DIGEST_CHUNK - 1) / DIGEST_CHUNK, m = (k + DIGEST_FANOUT - 1) / DIGEST_FANOUT;
    unsigned char *leaves = malloc(k ? k * 8 : 1), *groups = malloc(m ? m * 8 : 1);
    for (uint64_t i = 0; i < k; i++) {
        uint64_t len = i + 1 < k ? DIGEST_CHUNK : n - i * DIGEST_CHUNK;
        le64(leaves + i * 8, XXH64(p + i * DIGEST_CHUNK, len, 0));
    }
    for (uint64_t j = 0; j < m; j++) {
        uint64_t cnt = k - j * DIGEST_FANOUT < DIGEST_FANOUT ? k - j * DIGEST_FANOUT : DIGEST_FANOUT;
        le64(groups + j * 8, XXH64(leaves + j * DIGEST_FANOUT * 8, cnt * 8, 0));
    }
    uint64_t d = XXH64(groups, m * 8, n);
    free(leaves);
    free(groups);
    return d;
}

static void test_digest_follows_its_definition_at_chunk_boundaries(void)
{
    /* around a chunk, a group (64 chunks = 256 KiB), and several groups */
    const uint64_t sizes[] = {0, 1, 31, 32, 4095, 4096, 4097, 3 * 4096 + 7, 262143, 262144,
                              262145, 1000003, 3 * 262144 + 4096 * 5 + 9};
    unsigned char *b = random_bytes(1000003, 0x22);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        CU_ASSERT_EQUAL(digest_bytes(b, sizes[i]), by_definition(b, sizes[i]));
    /* the length is bound in: a prefix never shares its digest */
    CU_ASSERT_NOT_EQUAL(digest_bytes(b, 4096), digest_bytes(b, 4097));
    free(b);
}

/* One flipped bit anywhere - first byte, chunk and group boundaries, the last byte -
 * changes it. */
static void test_digest_one_flipped_bit_changes_it(void)
{
    const size_t n = 3 * 262144 + 123;
    unsigned char *b = random_bytes(n, 0x33);
    const uint64_t d = digest_bytes(b, n);
    const size_t where[] = {0, 4095, 4096, 262144, 524288 + 5, n - 1};
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++)
        for (int bit = 0; bit < 8; bit += 7) {
            b[where[i]] ^= (unsigned char)(1u << bit);
            CU_ASSERT_NOT_EQUAL(digest_bytes(b, n), d);
            b[where[i]] ^= (unsigned char)(1u << bit);
        }
    CU_ASSERT_EQUAL(digest_bytes(b, n), d);
    /* swapping two chunks changes it too, and so does swapping two groups */
    unsigned char *tmp = malloc(262144);
    memcpy(tmp, b, 4096);
    memcpy(b, b + 4096, 4096);
    memcpy(b + 4096, tmp, 4096);
    CU_ASSERT_NOT_EQUAL(digest_bytes(b, n), d);
    memcpy(b + 4096, b, 4096);
    memcpy(b, tmp, 4096);
    CU_ASSERT_EQUAL(digest_bytes(b, n), d);
    memcpy(tmp, b, 262144);
    memcpy(b, b + 262144, 262144);
    memcpy(b + 262144, tmp, 262144);
    CU_ASSERT_NOT_EQUAL(digest_bytes(b, n), d);
    free(tmp);
    free(b);
}

/* A strided view digests as its dense copy: a (2, 300, 3, 70) bf16 view with padded rows
 * and a permuted head/seq order, a broadcast (stride 0) view, and lse-like 3-dim fp32. */
static void test_digest_strided_view_equals_its_dense_copy(void)
{
    const int64_t shape[4] = {2, 300, 3, 70};
    /* storage: (batch, heads, seq, 80): seq and heads swapped, 10 elements of padding */
    const int64_t strides[4] = {3 * 300 * 80, 80, 300 * 80, 1};
    const size_t es = 2, total = 2 * 3 * 300 * 80;
    unsigned char *store = random_bytes(total * es, 0x44);
    unsigned char *dense = malloc(2 * 300 * 3 * 70 * es);
    size_t at = 0;
    for (int64_t a = 0; a < 2; a++)
        for (int64_t s = 0; s < 300; s++)
            for (int64_t h = 0; h < 3; h++)
                for (int64_t d = 0; d < 70; d++, at += es)
                    memcpy(dense + at, store + (a * strides[0] + s * strides[1] + h * strides[2] + d) * (int64_t)es, es);
    uint64_t got = 0;
    CU_ASSERT_EQUAL_FATAL(digest_strided(store, 4, shape, strides, es, &got), 0);
    CU_ASSERT_EQUAL(got, digest_bytes(dense, at));
    /* a non-unit innermost stride takes the element-by-element path */
    const int64_t shape2[2] = {300, 35};
    const int64_t strides2[2] = {80, 2};
    at = 0;
    for (int64_t s = 0; s < 300; s++)
        for (int64_t d = 0; d < 35; d++, at += es)
            memcpy(dense + at, store + (s * 80 + d * 2) * (int64_t)es, es);
    CU_ASSERT_EQUAL_FATAL(digest_strided(store, 2, shape2, strides2, es, &got), 0);
    CU_ASSERT_EQUAL(got, digest_bytes(dense, at));
    /* broadcast: stride 0 repeats the row */
    const int64_t shape3[2] = {1000, 70};
    const int64_t strides3[2] = {0, 1};
    for (int64_t r = 0; r < 1000; r++)
        memcpy(dense + (size_t)r * 70 * es, store, 70 * es);
    CU_ASSERT_EQUAL_FATAL(digest_strided(store, 2, shape3, strides3, es, &got), 0);
    CU_ASSERT_EQUAL(got, digest_bytes(dense, 1000 * 70 * es));
    /* bad arguments */
    CU_ASSERT_EQUAL(digest_strided(store, 0, shape, strides, es, &got), -EINVAL);
    CU_ASSERT_EQUAL(digest_strided(store, 5, shape, strides, es, &got), -EINVAL);
    CU_ASSERT_EQUAL(digest_strided(store, 4, shape, strides, 3, &got), -EINVAL);
    const int64_t zero[1] = {0};
    CU_ASSERT_EQUAL(digest_strided(store, 1, zero, strides, es, &got), -EINVAL);
    free(store);
    free(dense);
}

int suite_digest(void)
{
    CU_pSuite s = CU_add_suite("digest", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_digest_xxh64_matches_libxxhash);
    ADD_TEST(s, test_digest_follows_its_definition_at_chunk_boundaries);
    ADD_TEST(s, test_digest_one_flipped_bit_changes_it);
    ADD_TEST(s, test_digest_strided_view_equals_its_dense_copy);
    return 0;
}
