// SPDX-License-Identifier: BSD-3-Clause
/*
 * digest_cuda.cu - see digest_cuda.h. The definition is digest.h's; XXH3-64 (the leaves) is
 * xxh3.h's and XXH64 (the tree above them) xxh64.h's, both checked against libxxhash by
 * the tests.
 */
#include "kernels/digest/digest_cuda.h"

#include "kernels/digest/digest.h"
#include "kernels/digest/digest_leaf.cuh"
#include "kernels/digest/xxh3.h"
#include "kernels/digest/xxh64.h"

#include <cuda_runtime.h>
#include <errno.h>

#define ALIGN 256

/* What the kernels need per view, passed by value. */
struct dview {
    const unsigned char *data; /* dense bytes: the tensor itself, or its packed copy */
    const uint64_t *leaf;      /* its leaf hashes: given (digest_view.leaves) or hashed here */
    uint64_t *leaf_out;        /* where the leaf kernel puts them (scratch), or NULL: given */
    uint64_t bytes;
    uint64_t row;     /* bytes per row (the innermost dimension) */
    uint64_t per_row; /* leaves per row */
    uint64_t first_leaf; /* its first leaf's index among those hashed here: a multiple of 64 */
    uint64_t leaves;
    uint64_t groups;
    uint64_t first_super; /* index of its first supergroup hash in the scratch */
    uint64_t supers;
};

struct dtable {
    int32_t n;
    struct dview v[DIGEST_CUDA_MAX_VIEWS];
};

/* Checks a view; its bytes, whether it is dense, and its row bytes. */
static int view_ok(const struct digest_view *v, uint64_t *ret_bytes, int *ret_dense, uint64_t *ret_row)
{
    if (!v->base || v->ndim < 1 || v->ndim > 4 || v->elem < 1 || v->elem > 16 ||
        (v->elem & (v->elem - 1)))
        return 0;
    uint64_t bytes = (uint64_t)v->elem;
    int dense = 1;
    int64_t expect = 1;
    for (int32_t i = v->ndim - 1; i >= 0; i--) {
        if (v->shape[i] < 1 || __builtin_mul_overflow(bytes, (uint64_t)v->shape[i], &bytes))
            return 0;
        if (v->shape[i] > 1 && v->strides[i] != expect)
            dense = 0;
        expect *= v->shape[i];
    }
    const uint64_t row = (uint64_t)v->shape[v->ndim - 1] * (uint64_t)v->elem;
    if (v->leaves && row > DIGEST_CHUNK)
        return 0; /* given leaves are whole rows */
    *ret_bytes = bytes;
    *ret_dense = dense;
    *ret_row = row;
    return 1;
}

static uint64_t per_row_of(uint64_t row)
{
    return (row + DIGEST_CHUNK - 1) / DIGEST_CHUNK;
}

static uint64_t leaves_of(uint64_t bytes, uint64_t row)
{
    return bytes / row * per_row_of(row);
}

static uint64_t groups_of(uint64_t leaves)
{
    return (leaves + DIGEST_FANOUT - 1) / DIGEST_FANOUT;
}

static size_t align_up(size_t x)
{
    return (x + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

/* The tree of views v[0..n) and where its parts go: per view in t, its counts and its
 * offsets (groups from a multiple of 64, so each supergroup's are 16-byte aligned; the
 * leaves the leaf kernel hashes, for views without given ones, also from a multiple of
 * 64); in sz the totals; in dense[] whether each view is hashed in place. Returns the
 * scratch bytes those take, or 0 for a bad argument. digest_cuda_scratch_bytes and
 * digest_cuda both ask it, so what is sized is what is carved. */
struct dsizes {
    uint64_t hashed, supers, packed; /* leaves hashed here, supergroup hashes, copied bytes */
};

static size_t plan(const struct digest_view *v, int32_t n, struct dtable *t, struct dsizes *sz, int *dense)
{
    if (!v || n < 1 || n > DIGEST_CUDA_MAX_VIEWS)
        return 0;
    struct dsizes z = {0, 0, 0};
    t->n = n;
    for (int32_t i = 0; i < n; i++) {
        struct dview *d = &t->v[i];
        uint64_t bytes, row;
        if (!view_ok(&v[i], &bytes, &dense[i], &row))
            return 0;
        d->bytes = bytes;
        d->row = row;
        d->per_row = per_row_of(row);
        d->leaves = leaves_of(bytes, row);
        d->groups = groups_of(d->leaves);
        d->supers = groups_of(d->groups);
        d->first_super = z.supers;
        d->first_leaf = v[i].leaves ? 0 : z.hashed;
        if (!v[i].leaves)
            z.hashed += d->groups * DIGEST_FANOUT; /* the next one starts at a whole group */
        z.supers += d->supers;
        if (!dense[i] && !v[i].leaves)
            z.packed += align_up((size_t)bytes);
    }
    *sz = z;
    return align_up((size_t)n * sizeof(unsigned int)) + align_up((size_t)z.supers * 8) +
           align_up((size_t)z.hashed * 8) + (size_t)z.packed;
}

size_t digest_cuda_scratch_bytes(const struct digest_view *v, int32_t n)
{
    struct dtable t;
    struct dsizes sz;
    int dense[DIGEST_CUDA_MAX_VIEWS];
    return plan(v, n, &t, &sz, dense);
}

/* ---- kernels -------------------------------------------------------------------------- */

/* Gather a strided view into dense bytes, one element per thread-iteration. */
static __global__ void pack_kernel(unsigned char *dst, struct digest_view v, uint64_t elems)
{
    int64_t d[4] = {1, 1, 1, 1}, s[4] = {0, 0, 0, 0};
    for (int32_t i = 0; i < v.ndim; i++) {
        d[4 - v.ndim + i] = v.shape[i];
        s[4 - v.ndim + i] = v.strides[i];
    }
    const unsigned char *src = static_cast<const unsigned char *>(v.base);
    for (uint64_t e = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; e < elems;
         e += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t r = e;
        const int64_t i3 = (int64_t)(r % (uint64_t)d[3]);
        r /= (uint64_t)d[3];
        const int64_t i2 = (int64_t)(r % (uint64_t)d[2]);
        r /= (uint64_t)d[2];
        const int64_t i1 = (int64_t)(r % (uint64_t)d[1]);
        const int64_t i0 = (int64_t)(r / (uint64_t)d[1]);
        const int64_t at = (i0 * s[0] + i1 * s[1] + i2 * s[2] + i3 * s[3]) * v.elem;
        for (int32_t b = 0; b < v.elem; b++)
            dst[e * (uint64_t)v.elem + (uint64_t)b] = src[at + b];
    }
}

/* One 32-byte stripe (two 16-byte loads) into XXH64's four lanes (the tree's groups). */
static __device__ void stripe(uint64_t v[4], uint4 a, uint4 b)
{
    v[0] = xxh64_round(v[0], (uint64_t)a.x | (uint64_t)a.y << 32);
    v[1] = xxh64_round(v[1], (uint64_t)a.z | (uint64_t)a.w << 32);
    v[2] = xxh64_round(v[2], (uint64_t)b.x | (uint64_t)b.y << 32);
    v[3] = xxh64_round(v[3], (uint64_t)b.z | (uint64_t)b.w << 32);
}

/* A 16-byte chunk as two little-endian words. */
static __device__ __forceinline__ ulonglong2 chunk_words(uint4 v)
{
    return make_ulonglong2((unsigned long long)v.x | (unsigned long long)v.y << 32,
                           (unsigned long long)v.z | (unsigned long long)v.w << 32);
}

#define LEAF_WARPS 4                   /* warps per block of the leaf kernel */
#define LEAF_BLOCK (32 * LEAF_WARPS)   /* leaves per block */
#define LEAF_SLICES 2 /* at most, 128-byte slices of each leaf staged per step */
#define LEAF_ROW (LEAF_SLICES * 8 + 1) /* uint4 per staged leaf row: the slices + 16 pad */
#define FOLD_THREADS 64

/* Which view hashed leaf g belongs to (among the views whose leaves are hashed here, each
 * starting at a multiple of 64), or -1 past the last. */
static __device__ int32_t view_of(const struct dtable *t, uint64_t g)
{
    for (int32_t i = 0; i < t->n; i++)
        if (t->v[i].leaf_out && g >= t->v[i].first_leaf && g - t->v[i].first_leaf < t->v[i].groups * DIGEST_FANOUT)
            return i;
    return -1;
}

/* The j-th load of a warp's step at uint4 offset `at` of its 32 leaves, `len16` uint4 each
 * and back to back: 8 lanes take one 128-byte slice (a whole line) of leaf
 * (j % 8) * 4 + lane / 8. */
static __device__ __forceinline__ uint4 leaf_load(const uint4 *base, uint32_t len16, uint32_t lane, uint32_t at,
                                                  uint32_t j)
{
    const uint32_t leaf = (j & 7u) * 4 + (lane >> 3), part = (j >> 3) * 8 + (lane & 7u);
    return __ldg(base + (size_t)leaf * len16 + at + part);
}

/* The hash of the warp's 32 leaves at base, back to back, len16 uint4 each (a multiple of
 * 8 SLICES), one per lane. If every thread loaded its own bytes, one load instruction of a
 * warp would touch 32 places a leaf apart; instead the warp loads 128-byte slices of four
 * leaves per instruction (8 threads per slice, whole lines), SLICES slices of every leaf
 * per step, stages them in shared memory (rows padded against bank conflicts) and each
 * thread hashes its row: the same bytes in the same order, read at full line width.
 * Software pipelined: the next step's slices are loaded into registers while the
 * arithmetic runs on the staged ones, so memory is always in flight behind it. A leaf of
 * one step (128 or 256 bytes: head dims 64 and 128 in 16 bits) is hashed as the kernels
 * hash their rows (digest_leaf_chunks: keys constant in the instructions); a longer one by
 * XXH3's long form streamed a 16-byte chunk at a time (chunk i of a step: stripe
 * (at + i) / 4, accumulator pair i % 4), the last step's last four chunks the last stripe. */
template <int SLICES>
static __device__ uint64_t leaf_warp(const uint4 *base, uint32_t len16, uint4 (*stage)[LEAF_ROW], uint32_t lane)
{
    constexpr uint32_t STEP = 8 * SLICES; /* chunks a step */
    uint4 x[STEP];
#pragma unroll
    for (uint32_t j = 0; j < STEP; j++)
        x[j] = leaf_load(base, len16, lane, 0, j);
    if (len16 == STEP) { /* uniform: one step */
#pragma unroll
        for (uint32_t j = 0; j < STEP; j++)
            stage[(j & 7u) * 4 + (lane >> 3)][(j >> 3) * 8 + (lane & 7u)] = x[j];
        __syncwarp(); /* staged before any lane reads another's slices */
        return digest_leaf_chunks<16 * STEP>([&](int32_t c) { return chunk_words(stage[lane][c]); });
    }
    uint64_t a[8];
#pragma unroll
    for (uint32_t i = 0; i < 8; i++)
        a[i] = xxh3_acc_start(i);
    for (uint32_t at = 0; at < len16; at += STEP) {
#pragma unroll
        for (uint32_t j = 0; j < STEP; j++)
            stage[(j & 7u) * 4 + (lane >> 3)][(j >> 3) * 8 + (lane & 7u)] = x[j];
        __syncwarp(); /* staged before any lane reads another's slices */
        const bool fin = at + STEP >= len16; /* the leaf's last step */
        if (!fin)
#pragma unroll
            for (uint32_t j = 0; j < STEP; j++)
                x[j] = leaf_load(base, len16, lane, at + STEP, j);
#pragma unroll
        for (uint32_t i = 0; i < STEP; i++) {
            const ulonglong2 w = chunk_words(stage[lane][i]);
            const uint32_t j = i % 4, s = (at + i) / 4;
            if (i >= STEP - 4 && fin) { /* the last 64 bytes: the last stripe */
                xxh3_accumulate16(&a[2 * j], &a[2 * j + 1], w.x, w.y, XXH3_KEY_LAST_STRIPE + 16 * j);
                continue;
            }
            xxh3_accumulate16(&a[2 * j], &a[2 * j + 1], w.x, w.y, 8 * (s % XXH3_BLOCK_STRIPES) + 16 * j);
            if (s % XXH3_BLOCK_STRIPES == XXH3_BLOCK_STRIPES - 1) { /* a block's end (never the last stripe) */
                a[2 * j] = xxh3_scramble(a[2 * j], 2 * j);
                a[2 * j + 1] = xxh3_scramble(a[2 * j + 1], 2 * j + 1);
            }
        }
        __syncwarp(); /* every lane has read its row before the next step's staging */
    }
    uint64_t t = 0;
#pragma unroll
    for (uint32_t j = 0; j < 4; j++)
        t += xxh3_long_term(j, a[2 * j], a[2 * j + 1]);
    return xxh3_end(t, 16ull * len16);
}

/* The leaves of the views that have none given: one thread per leaf, into the scratch
 * (views' leaves start at multiples of 64 here, so a warp never spans two views; indices
 * in the padding hash nothing). Rows of whole 128-byte lines are staged a warp at a time
 * (leaf_warp); anything else is hashed by its thread where it lies. */
static __global__ void __launch_bounds__(LEAF_BLOCK) leaf_kernel(struct dtable t)
{
    __shared__ uint4 stage[LEAF_WARPS][32][LEAF_ROW];
    const uint32_t lane = threadIdx.x & 31u, w = threadIdx.x >> 5;
    const uint64_t g = blockIdx.x * (uint64_t)LEAF_BLOCK + threadIdx.x; /* hashed-leaf index */
    const int32_t vi = view_of(&t, g - lane);
    if (vi < 0)
        return; /* the block's tail past the last view (no shared-memory barrier below) */
    const struct dview *v = &t.v[vi];
    const uint64_t k = g - v->first_leaf; /* this thread's leaf in its view */
    const uint64_t k0 = k - lane;         /* the warp's first */
    /* leaves of one length, back to back: rows of at most a leaf, or of whole leaves */
    const uint64_t len = v->row < DIGEST_CHUNK ? v->row : DIGEST_CHUNK;
    const bool even = v->row <= DIGEST_CHUNK || v->row % DIGEST_CHUNK == 0;
    if (even && len % 128 == 0 && k0 + 32 <= v->leaves && ((uintptr_t)v->data & 15u) == 0) {
        /* uniform across the warp: 32 whole, aligned leaves of 128-byte lines */
        const uint4 *base = reinterpret_cast<const uint4 *>(v->data + k0 * len);
        v->leaf_out[k] = len % 256 == 0 ? leaf_warp<2>(base, (uint32_t)(len / 16), stage[w], lane)
                                        : leaf_warp<1>(base, (uint32_t)(len / 16), stage[w], lane);
    } else if (k < v->leaves) {
        const uint64_t r = k / v->per_row, piece = k - r * v->per_row;
        const uint64_t in_row = piece * DIGEST_CHUNK;
        const uint64_t n = v->row - in_row < DIGEST_CHUNK ? v->row - in_row : DIGEST_CHUNK;
        const unsigned char *p = v->data + r * v->row + in_row;
        v->leaf_out[k] = xxh3_64(p, (size_t)n); /* 16 bytes a load where p is aligned */
    }
}

/* XXH64 of n 8-byte words (8 n bytes) read through load(i): what xxh64() gives for those
 * bytes (four stripe accumulators over whole 32-byte stripes, converged, plus the length,
 * then the words past the stripes one by one), for words that are not one array in the
 * generic address space: a supergroup's group hashes in shared memory, a root's
 * supergroup hashes read from L2. */
template <typename Load>
static __device__ uint64_t xxh64_words(Load load, uint64_t n, uint64_t seed)
{
    const uint64_t striped = n / 4 * 4;
    uint64_t acc[4] = {xxh64_start(seed, 0), xxh64_start(seed, 1), xxh64_start(seed, 2), xxh64_start(seed, 3)};
    /* unrolled so that four stripes' loads can be in flight at once (a root's words come
     * from L2: one stripe at a time, a root over 32 supergroups waited eight latencies) */
#pragma unroll 4
    for (uint64_t w = 0; w < striped; w += 4)
#pragma unroll
        for (int i = 0; i < 4; i++)
            acc[i] = xxh64_round(acc[i], load(w + i));
    uint64_t h = n >= 4 ? xxh64_converge(acc[0], acc[1], acc[2], acc[3]) : seed + XXH64_P5;
    h += 8 * n;
    for (uint64_t w = striped; w < n; w++) {
        h ^= xxh64_round(0, load(w));
        h = xxh64_rotl(h, 27) * XXH64_P1 + XXH64_P4;
    }
    return xxh64_avalanche(h);
}

/* XXH64 of a whole group's 64 leaf hashes (512 bytes, 16-byte aligned): xxh64_stripes'
 * value with all 32 loads issued before the first round (in four batches, the group hash's
 * loads were four memory latencies in a row on the tree's critical path). */
static __device__ uint64_t xxh64_group(const uint4 *p)
{
    uint4 x[2 * DIGEST_FANOUT * 8 / 32];
#pragma unroll
    for (int i = 0; i < 2 * DIGEST_FANOUT * 8 / 32; i++)
        x[i] = __ldg(p + i);
    uint64_t v[4] = {xxh64_start(0, 0), xxh64_start(0, 1), xxh64_start(0, 2), xxh64_start(0, 3)};
#pragma unroll
    for (int i = 0; i < DIGEST_FANOUT * 8 / 32; i++)
        stripe(v, x[2 * i], x[2 * i + 1]);
    return xxh64_avalanche(xxh64_converge(v[0], v[1], v[2], v[3]) + 8 * DIGEST_FANOUT);
}

/* The tree above the leaves in one launch. A view's groups start at a whole supergroup, so
 * block b (FOLD_THREADS = 64 threads) is supergroup b of the views' run: each thread makes
 * one group hash - XXH64 over up to 64 leaf hashes, whole runs of 64 read as 16-byte
 * stripes - into shared memory, thread 0 the supergroup's hash over them; and the block
 * that finishes a view's last supergroup (a counter per view, zeroed before the launch)
 * makes the view's root over its supergroup hashes, seeded with its length. Three
 * dependent launches (groups, supergroups, roots) took 20-22 us at a 4k backward's
 * outputs, most of it the launches' own latency (bench/results/device-session-2026-12-06c/
 * audit-call11a.md). At one block an SM (the launch bounds' 1) ptxas keeps a dozen of a
 * group's loads in flight ahead of its rounds; at its default it kept two. */
static __global__ void __launch_bounds__(FOLD_THREADS, 1)
    tree_kernel(struct dtable t, uint64_t *supers, uint64_t *out, unsigned int *done)
{
    __shared__ uint64_t grp[FOLD_THREADS];
    const uint64_t b = blockIdx.x;
    int32_t i = 0;
    while (i < t.n && (b < t.v[i].first_super || b - t.v[i].first_super >= t.v[i].supers))
        i++;
    if (i == t.n)
        return; /* (the grid is the supergroups: never) */
    const struct dview *v = &t.v[i];
    const uint64_t s = b - v->first_super, j = s * DIGEST_FANOUT + threadIdx.x; /* the view's group j */
    if (j < v->groups) {
        const uint64_t k = j * DIGEST_FANOUT, n = v->leaves - k < DIGEST_FANOUT ? v->leaves - k : DIGEST_FANOUT;
        const uint64_t *p = v->leaf + k;
        grp[threadIdx.x] = n == DIGEST_FANOUT && ((uintptr_t)p & 15u) == 0
                               ? xxh64_group(reinterpret_cast<const uint4 *>(p))
                               : xxh64(p, (size_t)n * 8, 0);
    }
    __syncthreads(); /* the supergroup's group hashes are in grp */
    if (threadIdx.x != 0)
        return;
    const uint64_t n = v->groups - s * DIGEST_FANOUT < DIGEST_FANOUT ? v->groups - s * DIGEST_FANOUT : DIGEST_FANOUT;
    supers[b] = xxh64_words([&](uint64_t w) { return grp[w]; }, n, 0);
    __threadfence(); /* this supergroup's hash is visible before the count says so */
    if (atomicAdd(&done[i], 1u) + 1u != (unsigned int)v->supers)
        return;
    __threadfence(); /* every other supergroup's hash of the view is visible to this one */
    const uint64_t *g = supers + v->first_super;
    out[i] = xxh64_words([&](uint64_t w) { return __ldcg(g + w); }, v->supers, v->bytes);
}

/* ---- host ----------------------------------------------------------------------------- */

int digest_cuda(const struct digest_view *v, int32_t n, void *scratch, size_t scratch_bytes,
                uint64_t *out, void *stream)
{
    struct dtable t;
    struct dsizes sz;
    int dense[DIGEST_CUDA_MAX_VIEWS];
    const size_t need = plan(v, n, &t, &sz, dense);
    if (!need || !scratch || !out || scratch_bytes < need)
        return -EINVAL;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    unsigned char *at = static_cast<unsigned char *>(scratch);
    unsigned int *done = reinterpret_cast<unsigned int *>(at); /* a counter per view */
    at += align_up((size_t)n * sizeof(unsigned int));
    uint64_t *supers = reinterpret_cast<uint64_t *>(at);
    at += align_up((size_t)sz.supers * 8);
    uint64_t *leaves = reinterpret_cast<uint64_t *>(at);
    unsigned char *packed = at + align_up((size_t)sz.hashed * 8);
    for (int32_t i = 0; i < n; i++) {
        t.v[i].data = static_cast<const unsigned char *>(v[i].base);
        t.v[i].leaf_out = v[i].leaves ? NULL : leaves + t.v[i].first_leaf;
        t.v[i].leaf = v[i].leaves ? v[i].leaves : t.v[i].leaf_out;
        if (dense[i] || v[i].leaves)
            continue;
        const uint64_t elems = t.v[i].bytes / (uint64_t)v[i].elem;
        const uint64_t blocks = (elems + 255) / 256;
        pack_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, st>>>(packed, v[i], elems);
        t.v[i].data = packed;
        packed += align_up((size_t)t.v[i].bytes);
    }
    if (sz.hashed) /* the views without given leaves, each from a whole group on */
        leaf_kernel<<<(unsigned)((sz.hashed + LEAF_BLOCK - 1) / LEAF_BLOCK), LEAF_BLOCK, 0, st>>>(t);
    if (cudaMemsetAsync(done, 0, (size_t)n * sizeof(unsigned int), st) != cudaSuccess)
        return -EIO;
    tree_kernel<<<(unsigned)sz.supers, FOLD_THREADS, 0, st>>>(t, supers, out, done);
    return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
