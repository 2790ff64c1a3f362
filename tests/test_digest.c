// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_digest.c - the tensor digest (kernels/digest/digest.h, version 3): its definition,
 * and the XXH3-64 (leaves) and XXH64 (the tree above them) that the GPU side uses
 * (kernels/digest/xxh3.h, xxh64.h) against libxxhash.
 */
#include "suites.h"
#include "testutil.h"

#include "kernels/digest/digest.h"
#include "kernels/digest/xxh3.h"
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

/* The device's XXH3-64 is libxxhash's XXH3_64bits for every length a leaf can have
 * (0 .. 4096 bytes: the empty input, 1-3, 4-8, 9-16, 17-128, 129-240, and the long form's
 * stripes, blocks, scrambles and last stripe), at every start modulo 16 (the device reads
 * 16 bytes at once where aligned, 8 where not). */
static void test_digest_xxh3_matches_libxxhash(void)
{
    unsigned char *b = random_bytes(4096 + 16, 0x13);
    int bad = 0;
    for (size_t n = 0; n <= 4096; n++)
        for (size_t off = 0; off < 16; off++)
            bad += xxh3_64(b + off, n) != XXH3_64bits(b + off, n);
    CU_ASSERT_EQUAL(bad, 0);
    free(b);
}

/* Little-endian words w0, w1 of chunk c (bytes 16 c ..) of p. */
static void chunk_words(const unsigned char *p, uint32_t c, uint64_t *w0, uint64_t *w1)
{
    *w0 = *w1 = 0;
    for (int k = 0; k < 8; k++) {
        *w0 |= (uint64_t)p[16 * c + (uint32_t)k] << (8 * k);
        *w1 |= (uint64_t)p[16 * c + 8 + (uint32_t)k] << (8 * k);
    }
}

/* Lane j's term of a chunked row of n bytes split over four lanes as the kernels split it
 * (digest_leaf.cuh): the 17-128 class's chunks c = j, j + 4, ...; the long class's
 * accumulator pair j over chunks 4 s + j. */
static uint64_t part_term(const unsigned char *p, uint32_t n, uint32_t j)
{
    uint64_t t = 0, w0, w1;
    if (n <= 128) {
        for (uint32_t c = j; c < n / 16; c += 4) {
            chunk_words(p, c, &w0, &w1);
            t += xxh3_mid_term(c, n, w0, w1);
        }
        return t;
    }
    uint64_t a0, a1;
    xxh3_long_start(j, &a0, &a1);
    for (uint32_t s = 0; s < n / XXH3_STRIPE; s++) {
        chunk_words(p, 4 * s + j, &w0, &w1);
        xxh3_long_chunk(s, j, n, &a0, &a1, w0, w1);
    }
    return xxh3_long_term(j, a0, a1);
}

/* The chunked forms (xxh3.h) are XXH3_64bits for every length they take up to a leaf's
 * 4 KiB (XXH3_CHUNKED: 32, 64, 96, 128, then 256 .. 4096 in 64s; blocks and scrambles from
 * 1088 on): one thread taking every chunk in order (digest_leaf_row's order), and four
 * lanes each forming their part, summed in any order (digest_leaf_staged's split); and
 * the lengths around them are not chunked. */
static void test_digest_xxh3_of_chunked_rows_matches_libxxhash(void)
{
    unsigned char *b = random_bytes(4096, 0x14);
    int bad = 0, rows = 0;
    for (uint32_t n = 16; n <= 4096; n += 16) {
        if (!XXH3_CHUNKED(n))
            continue;
        rows++;
        const uint64_t want = XXH3_64bits(b, n);
        uint64_t t = 0, w0, w1;
        if (n <= 128) {
            for (uint32_t c = 0; c < n / 16; c++) {
                chunk_words(b, c, &w0, &w1);
                t += xxh3_mid_term(c, n, w0, w1);
            }
        } else {
            uint64_t a[8];
            for (uint32_t j = 0; j < 4; j++)
                xxh3_long_start(j, &a[2 * j], &a[2 * j + 1]);
            for (uint32_t c = 0; c < n / 16; c++) {
                chunk_words(b, c, &w0, &w1);
                xxh3_long_chunk(c / 4, c % 4, n, &a[2 * (c % 4)], &a[2 * (c % 4) + 1], w0, w1);
            }
            for (uint32_t j = 0; j < 4; j++)
                t += xxh3_long_term(j, a[2 * j], a[2 * j + 1]);
        }
        bad += xxh3_end(t, n) != want;
        const uint64_t parts = part_term(b, n, 3) + part_term(b, n, 1) + part_term(b, n, 0) + part_term(b, n, 2);
        bad += xxh3_end(parts, n) != want;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(rows, 4 + (4096 - 256) / 64 + 1);
    CU_ASSERT(!XXH3_CHUNKED(16) && !XXH3_CHUNKED(48) && !XXH3_CHUNKED(160) && !XXH3_CHUNKED(192) &&
              !XXH3_CHUNKED(240) && !XXH3_CHUNKED(288));
    free(b);
}

/* XXH64 of n 8-byte words from its four stripe accumulators run apart, as a quad of GPU
 * threads runs them (digest_fold.cuh: lane a the chain over the words a, a + 4, ... of the
 * whole stripes, 16 stripes at a time; xxh64_words_end on the four and the words past the
 * stripes), is libxxhash's XXH64 of those 8 n bytes: 0 to 300 words (short of a stripe,
 * whole stripes, 1 to 3 words past them, past one and several chunks of 16 stripes) with
 * seed 0 (groups and supergroups) and seeds of byte counts (the roots). */
static void test_digest_xxh64_from_split_accumulators_matches_libxxhash(void)
{
    unsigned char *b = random_bytes(300 * 8, 0x12);
    uint64_t w[300];
    for (int i = 0; i < 300; i++) {
        w[i] = 0;
        for (int k = 0; k < 8; k++)
            w[i] |= (uint64_t)b[8 * i + k] << (8 * k); /* little-endian, as the device reads */
    }
    const uint64_t seeds[] = {0, 4096, (uint64_t)262144 * 256, 0x9E3779B97F4A7C15ull};
    int bad = 0;
    for (uint64_t n = 0; n <= 300; n++)
        for (size_t si = 0; si < sizeof seeds / sizeof seeds[0]; si++) {
            const uint64_t seed = seeds[si], stripes = n / 4;
            uint64_t v[4];
            for (int a = 0; a < 4; a++) {
                v[a] = xxh64_start(seed, a);
                for (uint64_t s = 0; s < stripes; s += 16)
                    for (uint64_t k = 0; k < 16 && s + k < stripes; k++)
                        v[a] = xxh64_round(v[a], w[4 * (s + k) + (uint64_t)a]);
            }
            const uint64_t at = 4 * stripes, left = n - at;
            const uint64_t got = xxh64_words_end(v[0], v[1], v[2], v[3], n, seed, left > 0 ? w[at] : 0,
                                                 left > 1 ? w[at + 1] : 0, left > 2 ? w[at + 2] : 0);
            bad += got != XXH64(b, (size_t)n * 8, seed);
        }
    CU_ASSERT_EQUAL(bad, 0);
    free(b);
}

/* The definition written out (digest.h, version 3): every row cut into leaves of at most
 * 4 KiB, each hashed with XXH3-64; groups of 64 leaf hashes, supergroups of 64 group
 * hashes, the root over the supergroup hashes (little-endian words) seeded with the
 * length, each with XXH64. Each level is a plain array here, hashed with libxxhash. */
static void le64(unsigned char *p, uint64_t v)
{
    for (int b = 0; b < 8; b++)
        p[b] = (unsigned char)(v >> (8 * b));
}

/* XXH64 over consecutive runs of up to 64 words of `in` (k words) into `out`: the count. */
static uint64_t fold64(const unsigned char *in, uint64_t k, unsigned char *out)
{
    uint64_t m = 0;
    for (uint64_t j = 0; j < k; j += DIGEST_FANOUT, m++)
        le64(out + m * 8, XXH64(in + j * 8, (k - j < DIGEST_FANOUT ? k - j : DIGEST_FANOUT) * 8, 0));
    return m;
}

static uint64_t by_definition(const unsigned char *p, uint64_t n, uint64_t row)
{
    const uint64_t per_row = row ? (row + DIGEST_CHUNK - 1) / DIGEST_CHUNK : 0;
    const uint64_t k = row ? n / row * per_row : 0;
    unsigned char *leaves = malloc(k * 8 + 8), *groups = malloc(k * 8 + 8), *supers = malloc(k * 8 + 8);
    uint64_t i = 0;
    for (uint64_t r = 0; row && r < n; r += row)
        for (uint64_t at = 0; at < row; at += DIGEST_CHUNK, i++)
            le64(leaves + i * 8, XXH3_64bits(p + r + at, row - at < DIGEST_CHUNK ? row - at : DIGEST_CHUNK));
    const uint64_t m = fold64(leaves, k, groups), s = fold64(groups, m, supers);
    const uint64_t d = XXH64(supers, s * 8, n);
    free(leaves);
    free(groups);
    free(supers);
    return d;
}

static uint64_t rows_digest(const unsigned char *p, uint64_t n, uint64_t row)
{
    uint64_t d = 0;
    CU_ASSERT_EQUAL(digest_rows(p, n, row, &d), 0);
    return d;
}

/* A blob of bytes is one row: around a leaf, a group (64 leaves = 256 KiB), several groups,
 * and a supergroup (64 groups = 16 MiB). */
static void test_digest_of_bytes_follows_its_definition_at_leaf_and_group_boundaries(void)
{
    const uint64_t sizes[] = {0, 1, 31, 32, 4095, 4096, 4097, 3 * 4096 + 7, 262143, 262144,
                              262145, 1000003, 3 * 262144 + 4096 * 5 + 9, (16u << 20) + 4096 * 3 + 1};
    const uint64_t cap = (16u << 20) + 4096 * 3 + 1;
    unsigned char *b = random_bytes(cap, 0x22);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        CU_ASSERT_EQUAL(digest_bytes(b, sizes[i]), by_definition(b, sizes[i], sizes[i]));
    /* the length is bound in: a prefix never shares its digest */
    CU_ASSERT_NOT_EQUAL(digest_bytes(b, 4096), digest_bytes(b, 4097));
    free(b);
}

/* Rows: short ones (one leaf each, the attention outputs' case), rows of exactly a leaf,
 * rows a little over one (two leaves, the second short), enough rows for several
 * supergroups; and the row length is bound in where it cuts other leaves. Bad row
 * lengths are refused. */
static void test_digest_of_rows_follows_its_definition_and_binds_the_row_length(void)
{
    const uint64_t rows[][2] = {{2, 7}, {6, 1001}, {128, 300}, {256, 4097}, {256, 70000},
                                {4096, 65}, {4098, 33}, {3 * 4096 + 2, 5}, {512, 1}};
    const uint64_t cap = 256 * 70000;
    unsigned char *b = random_bytes(cap, 0x23);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const uint64_t n = rows[i][0] * rows[i][1];
        CU_ASSERT_EQUAL(rows_digest(b, n, rows[i][0]), by_definition(b, n, rows[i][0]));
    }
    /* one row of n is digest_bytes; other row lengths of the same bytes cut other leaves
     * and differ - except rows of whole leaves, which cut the same ones (two rows of 4 KiB
     * are one of 8 KiB) */
    CU_ASSERT_EQUAL(rows_digest(b, 512, 512), digest_bytes(b, 512));
    CU_ASSERT_NOT_EQUAL(rows_digest(b, 256 * 300, 256), rows_digest(b, 256 * 300, 128));
    CU_ASSERT_NOT_EQUAL(rows_digest(b, 12288, 6144), rows_digest(b, 12288, 4096));
    CU_ASSERT_EQUAL(rows_digest(b, 8192, 8192), rows_digest(b, 8192, 4096));
    uint64_t d = 0;
    CU_ASSERT_EQUAL(digest_rows(b, 100, 0, &d), -EINVAL);
    CU_ASSERT_EQUAL(digest_rows(b, 100, 3, &d), -EINVAL);
    CU_ASSERT_EQUAL(digest_rows(NULL, 0, 0, &d), 0);
    CU_ASSERT_EQUAL(d, by_definition(NULL, 0, 0));
    free(b);
}

/* One flipped bit anywhere - first byte, leaf and group boundaries, the last byte -
 * changes it, in a blob and in rows. */
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
    memcpy(b + 262144, b, 262144);
    memcpy(b, tmp, 262144);
    /* rows of 256 bytes: a flipped bit in any row, and two rows swapped */
    const uint64_t rn = n / 256 * 256, dr = rows_digest(b, rn, 256);
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
        if (where[i] >= rn)
            continue;
        b[where[i]] ^= 1u;
        CU_ASSERT_NOT_EQUAL(rows_digest(b, rn, 256), dr);
        b[where[i]] ^= 1u;
    }
    CU_ASSERT_EQUAL(rows_digest(b, rn, 256), dr);
    memcpy(tmp, b, 256);
    memcpy(b, b + 256, 256);
    memcpy(b + 256, tmp, 256);
    CU_ASSERT_NOT_EQUAL(rows_digest(b, rn, 256), dr);
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
    CU_ASSERT_EQUAL(got, rows_digest(dense, at, 70 * es));
    /* a non-unit innermost stride takes the element-by-element path */
    const int64_t shape2[2] = {300, 35};
    const int64_t strides2[2] = {80, 2};
    at = 0;
    for (int64_t s = 0; s < 300; s++)
        for (int64_t d = 0; d < 35; d++, at += es)
            memcpy(dense + at, store + (s * 80 + d * 2) * (int64_t)es, es);
    CU_ASSERT_EQUAL_FATAL(digest_strided(store, 2, shape2, strides2, es, &got), 0);
    CU_ASSERT_EQUAL(got, rows_digest(dense, at, 35 * es));
    /* broadcast: stride 0 repeats the row */
    const int64_t shape3[2] = {1000, 70};
    const int64_t strides3[2] = {0, 1};
    for (int64_t r = 0; r < 1000; r++)
        memcpy(dense + (size_t)r * 70 * es, store, 70 * es);
    CU_ASSERT_EQUAL_FATAL(digest_strided(store, 2, shape3, strides3, es, &got), 0);
    CU_ASSERT_EQUAL(got, rows_digest(dense, 1000 * 70 * es, 70 * es));
    /* rows longer than a leaf, strided: (3, 5000) fp32 taken from every other column */
    const int64_t shape4[2] = {3, 5000};
    const int64_t strides4[2] = {10000, 2};
    unsigned char *wide = random_bytes(3 * 10000 * 4, 0x45), *wd = malloc(3 * 5000 * 4);
    for (int64_t r = 0; r < 3; r++)
        for (int64_t c = 0; c < 5000; c++)
            memcpy(wd + (r * 5000 + c) * 4, wide + (r * 10000 + 2 * c) * 4, 4);
    CU_ASSERT_EQUAL_FATAL(digest_strided(wide, 2, shape4, strides4, 4, &got), 0);
    CU_ASSERT_EQUAL(got, rows_digest(wd, 3 * 5000 * 4, 5000 * 4));
    free(wide);
    free(wd);
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
    ADD_TEST(s, test_digest_xxh3_matches_libxxhash);
    ADD_TEST(s, test_digest_xxh3_of_chunked_rows_matches_libxxhash);
    ADD_TEST(s, test_digest_xxh64_matches_libxxhash);
    ADD_TEST(s, test_digest_xxh64_from_split_accumulators_matches_libxxhash);
    ADD_TEST(s, test_digest_of_bytes_follows_its_definition_at_leaf_and_group_boundaries);
    ADD_TEST(s, test_digest_of_rows_follows_its_definition_and_binds_the_row_length);
    ADD_TEST(s, test_digest_one_flipped_bit_changes_it);
    ADD_TEST(s, test_digest_strided_view_equals_its_dense_copy);
    return 0;
}
