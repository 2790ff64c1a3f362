// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_digest_gpu.c - digests computed on the GPU (kernels/digest/digest_cuda.h) equal the CPU's
 * (kernels/digest/digest.h, libxxhash) for the same bytes: random blobs of odd sizes (below,
 * around the 4 KiB leaf and the 256 KiB group, and 96 MiB), misaligned starts, tensors of
 * rows (short rows on the warp-staged path and off it, rows over a leaf, 64 MiB of 256-byte
 * rows: many supergroups), strided and broadcast views, many views in one call, views
 * whose leaves are given; and one flipped bit on the device changes the digest. Fresh
 * random bytes every run (the runner's seed). The leaves the backward's kernels hash are
 * checked in test_attn_gpu.c.
 */
#include "gpu_digest.h"

#include "gpu_check.h"
#include "../testutil.h"
#include "kernels/digest/digest.h"
#include "kernels/digest/digest_cuda.h"

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>
#include <xxhash.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Digest views on the device (one call), results to host. */
static void gpu_digests(const struct digest_view *v, int32_t n, uint64_t *out)
{
    size_t need = digest_cuda_scratch_bytes(v, n);
    CU_ASSERT_FATAL(need > 0);
    void *scratch = NULL;
    uint64_t *d_out = NULL;
    CUDA_OK(cudaMalloc(&scratch, need));
    CUDA_OK(cudaMalloc((void **)&d_out, sizeof(uint64_t) * (size_t)n));
    CU_ASSERT_EQUAL_FATAL(digest_cuda(v, n, scratch, need, d_out, NULL), 0);
    CUDA_OK(cudaMemcpy(out, d_out, sizeof(uint64_t) * (size_t)n, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(scratch));
    CUDA_OK(cudaFree(d_out));
}

static struct digest_view bytes_view(const void *p, int64_t n)
{
    struct digest_view v = {p, 1, {n, 0, 0, 0}, {1, 0, 0, 0}, 1, NULL};
    return v;
}

static void test_digest_gpu_equals_cpu_on_odd_sizes_and_offsets(void)
{
    const int64_t sizes[] = {1, 7, 12, 31, 32, 33, 200, 4095, 4096, 4097, 262143, 262144, 262145,
                             1000003, (int64_t)96 << 20};
    const int n = (int)(sizeof sizes / sizeof sizes[0]);
    const size_t cap = ((size_t)96 << 20) + 16;
    unsigned char *h = malloc(cap), *d = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xd1d1);
    for (size_t i = 0; i < cap; i++)
        h[i] = (unsigned char)tu_next(&r);
    CUDA_OK(cudaMalloc((void **)&d, cap));
    CUDA_OK(cudaMemcpy(d, h, cap, cudaMemcpyHostToDevice));
    /* aligned starts, then starts 2 and 5 bytes in (the unaligned load path) */
    for (int shift = 0; shift < 8; shift += shift ? 3 : 2) {
        struct digest_view v[16];
        uint64_t got[16];
        for (int i = 0; i < n; i++)
            v[i] = bytes_view(d + shift, sizes[i]);
        gpu_digests(v, n, got);
        for (int i = 0; i < n; i++) {
            uint64_t want = digest_bytes(h + shift, (uint64_t)sizes[i]);
            if (got[i] != want)
                fprintf(stderr, "\n  %lld bytes at +%d: gpu %016llx cpu %016llx",
                        (long long)sizes[i], shift, (unsigned long long)got[i],
                        (unsigned long long)want);
            CU_ASSERT_EQUAL(got[i], want);
        }
    }
    /* one flipped bit on the device, at a chunk boundary and at the end */
    const size_t flips[] = {4096, 1000002};
    for (int f = 0; f < 2; f++) {
        unsigned char byte = (unsigned char)(h[flips[f]] ^ 0x10);
        CUDA_OK(cudaMemcpy(d + flips[f], &byte, 1, cudaMemcpyHostToDevice));
        struct digest_view v = bytes_view(d, 1000003);
        uint64_t got;
        gpu_digests(&v, 1, &got);
        CU_ASSERT_NOT_EQUAL(got, digest_bytes(h, 1000003));
        CUDA_OK(cudaMemcpy(d + flips[f], &h[flips[f]], 1, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaFree(d));
    free(h);
}

/* bf16 (batch 2, seq 300, heads 3, dim 70) stored as (batch, heads, seq, 80): packed on
 * the device; a broadcast view; fp32 lse-like 3-dim dense. Same as the CPU's strided
 * digests of the same storage. */
static void test_digest_gpu_strided_views_equal_cpu(void)
{
    const size_t es = 2, total = 2 * 3 * 300 * 80;
    unsigned char *h = malloc(total * es), *d = NULL;
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xd2d2);
    for (size_t i = 0; i < total * es; i++)
        h[i] = (unsigned char)tu_next(&r);
    CUDA_OK(cudaMalloc((void **)&d, total * es));
    CUDA_OK(cudaMemcpy(d, h, total * es, cudaMemcpyHostToDevice));
    struct digest_view v[3] = {
        {d, 4, {2, 300, 3, 70}, {3 * 300 * 80, 80, 300 * 80, 1}, 2, NULL},
        {d, 2, {1000, 70, 0, 0}, {0, 1, 0, 0}, 2, NULL},
        {d, 3, {2, 3, 4000}, {12000, 4000, 1}, 4, NULL},
    };
    uint64_t got[3];
    gpu_digests(v, 3, got);
    for (int i = 0; i < 3; i++) {
        uint64_t want = 0;
        CU_ASSERT_EQUAL_FATAL(digest_strided(h, v[i].ndim, v[i].shape, v[i].strides,
                                             (size_t)v[i].elem, &want), 0);
        CU_ASSERT_EQUAL(got[i], want);
    }
    /* bad views are refused before anything is queued */
    struct digest_view bad = v[0];
    bad.elem = 3;
    CU_ASSERT_EQUAL(digest_cuda_scratch_bytes(&bad, 1), 0);
    uint64_t out;
    CU_ASSERT_EQUAL(digest_cuda(&bad, 1, d, total * es, &out, NULL), -22);
    CU_ASSERT_EQUAL(digest_cuda(v, 17, d, total * es, &out, NULL), -22);
    CUDA_OK(cudaFree(d));
    free(h);
}

/* Dense 2-dim views (rows x row bytes, as elements of es bytes) at aligned and misaligned
 * starts: rows of 128 and 256 bytes (whole lines: the warp-staged path, one step: the
 * kernels' row forms), 384 and 1152 (staged in several steps, XXH3's long form streamed;
 * 1152 past a block and its scramble), 96, 6, 12, 192 and 300 bytes (per thread: XXH3's
 * 17-128, 4-8, 9-16, 129-240 and long classes), 4096 and 4098 (a leaf, and a leaf and a
 * bit), 12 KiB + 2 rows, 64 MiB of 256-byte rows, and 274001 and 524287 rows of 128 bytes
 * (67 and 128 supergroups: a root over more than one block's batch of them, with and
 * without words past the stripes; an odd leaf count); each equal to digest_rows() on the
 * host. Then the same views with their leaves given (XXH3-64 of each row here on the
 * host, uploaded; the tensor's base pointing at nothing readable) give the same digests:
 * what the fused kernels hand over. */
static void test_digest_gpu_rows_and_given_leaves_equal_cpu(void)
{
    const int64_t shapes[][3] = {/* rows, row elements, elem bytes */
                                 {7, 64, 2},    {3001, 128, 2}, {333, 48, 2},   {1001, 3, 2},
                                 {65, 2048, 2}, {33, 2049, 2},  {5, 6145, 2},   {4099, 32, 4},
                                 {262144, 128, 2}, {274001, 64, 2}, {524287, 32, 4}, {129, 192, 2},
                                 {97, 576, 2},     {1000, 6, 2},    {777, 96, 2},    {300, 150, 2}};
    const int n = (int)(sizeof shapes / sizeof shapes[0]);
    const size_t cap = ((size_t)64 << 20) + 64;
    unsigned char *h = malloc(cap), *d = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0xd3d3);
    for (size_t i = 0; i < cap; i++)
        h[i] = (unsigned char)tu_next(&r);
    CUDA_OK(cudaMalloc((void **)&d, cap));
    CUDA_OK(cudaMemcpy(d, h, cap, cudaMemcpyHostToDevice));
    int bad = 0;
    for (int shift = 0; shift < 40; shift += 34) { /* aligned, and 2 bytes past 32 */
        struct digest_view v[16];
        uint64_t got[16], want[16];
        for (int i = 0; i < n; i++) {
            struct digest_view x = {d + shift, 2, {shapes[i][0], shapes[i][1], 0, 0}, {shapes[i][1], 1, 0, 0},
                                    (int32_t)shapes[i][2], NULL};
            v[i] = x;
            const uint64_t row = (uint64_t)(shapes[i][1] * shapes[i][2]);
            CU_ASSERT_EQUAL_FATAL(digest_rows(h + shift, (uint64_t)shapes[i][0] * row, row, &want[i]), 0);
        }
        gpu_digests(v, n, got);
        for (int i = 0; i < n; i++)
            if (got[i] != want[i] && bad++ < 5)
                fprintf(stderr, "\n  rows %lld x %lld x %lld at +%d: gpu %016llx cpu %016llx",
                        (long long)shapes[i][0], (long long)shapes[i][1], (long long)shapes[i][2], shift,
                        (unsigned long long)got[i], (unsigned long long)want[i]);
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* given leaves: rows of at most 4 KiB, the leaves hashed here */
    struct digest_view v[5];
    uint64_t *leaves[5] = {NULL, NULL, NULL, NULL, NULL}, got[5], want[5];
    const int pick[5] = {1, 4, 8, 9, 10};
    for (int k = 0; k < 5; k++) {
        const int64_t rows = shapes[pick[k]][0], row = shapes[pick[k]][1] * shapes[pick[k]][2];
        uint64_t *hl = malloc(sizeof(uint64_t) * (size_t)rows);
        CU_ASSERT_PTR_NOT_NULL_FATAL(hl);
        for (int64_t i = 0; i < rows; i++)
            hl[i] = XXH3_64bits(h + i * row, (size_t)row);
        CUDA_OK(cudaMalloc((void **)&leaves[k], sizeof(uint64_t) * (size_t)rows));
        CUDA_OK(cudaMemcpy(leaves[k], hl, sizeof(uint64_t) * (size_t)rows, cudaMemcpyHostToDevice));
        free(hl);
        struct digest_view x = {(const void *)(uintptr_t)16, 2, {rows, shapes[pick[k]][1], 0, 0},
                                {shapes[pick[k]][1], 1, 0, 0}, (int32_t)shapes[pick[k]][2], leaves[k]};
        v[k] = x;
        CU_ASSERT_EQUAL_FATAL(digest_rows(h, (uint64_t)(rows * row), (uint64_t)row, &want[k]), 0);
    }
    gpu_digests(v, 5, got);
    for (int k = 0; k < 5; k++) {
        CU_ASSERT_EQUAL(got[k], want[k]);
        CUDA_OK(cudaFree(leaves[k]));
    }
    /* given leaves must be whole rows of at most a leaf */
    struct digest_view long_rows = v[0];
    long_rows.shape[1] = 4097;
    CU_ASSERT_EQUAL(digest_cuda_scratch_bytes(&long_rows, 1), 0);
    CUDA_OK(cudaFree(d));
    free(h);
}

int suite_gpu_digest(void)
{
    CU_pSuite s = CU_add_suite("gpu_digest", NULL, NULL);
    if (!s ||
        !CU_add_test(s, "test_digest_gpu_equals_cpu_on_odd_sizes_and_offsets",
                     test_digest_gpu_equals_cpu_on_odd_sizes_and_offsets) ||
        !CU_add_test(s, "test_digest_gpu_strided_views_equal_cpu",
                     test_digest_gpu_strided_views_equal_cpu) ||
        !CU_add_test(s, "test_digest_gpu_rows_and_given_leaves_equal_cpu",
                     test_digest_gpu_rows_and_given_leaves_equal_cpu))
        return -1;
    return 0;
}
