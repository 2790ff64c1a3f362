// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_pad.cu - head dims the kernels lack (96 on the tensor-core kernels, and every other
 * multiple of 8 up to 256 but 64, 128 and 256: cuattn_kernel_dim): copies of a call's
 * tensors with their rows widened by zero columns to the next of the kernels' widths, and
 * the outputs narrowed back.
 *
 * Why it gives the narrower head dim's answer: every product of the attention either sums over the
 * head dim (S = Q K^T, dP = dO V^T, the forward's rowsum(dO * O)) or keeps it as its
 * output index (O = P V, dV = P^T dO, dK = dS^T Q, dQ = dS K). Zero columns add exact
 * zeros to the first kind (x + 0 = x in fp32) and make zero output columns in the second,
 * which pad_narrow drops. The wider kernels' own determinism (fixed order of every sum,
 * bits independent of the grid) carries over; the bits are those of these kernels at
 * their width, reported as such (cuattn_impl_for).
 *
 * Layouts. A view (batch, rows, heads, d) with element strides (s0, s1, s2, 1), as
 * struct attn_tensor has it, against a dense (batch * rows * heads, dp) copy. One lane a
 * 16-byte chunk of the dense row (dp / 8 chunks, a power of two dividing 32, so a warp
 * holds whole rows and the row's view offset - three 64-bit divisions - is computed once
 * and shuffled to its lanes); 16-byte loads and stores on the view where its base and
 * strides allow, else 2-byte ones. Memory-bound: about (1 + dp / d) times a tensor's bytes
 * moved per copy (96 -> 128: 2.33; 32 -> 64 and 136 -> 256 about 3). */
#include "kernels/cuda/attn_cuda_int.h"

#include <stdint.h>

#define PAD_THREADS 256

/* The view's element offset of dense row r (r = ((b rows) + s) heads + h). */
static __device__ __forceinline__ int64_t pad_row_at(int64_t r, int32_t rows, int32_t heads, int64_t s0, int64_t s1,
                                                     int64_t s2)
{
    const int64_t bs = r / heads;
    const int32_t h = (int32_t)(r - bs * heads);
    const int64_t b = bs / rows;
    const int32_t s = (int32_t)(bs - b * rows);
    return b * s0 + (int64_t)s * s1 + (int64_t)h * s2;
}

/* The row and chunk of lane `lane`'s chunk in warp task `base` (a multiple of 32 chunks of
 * a dense row's 1 << cshift; 1 << cshift divides 32, so a task holds whole rows), and the
 * view's element offset of that row: computed by the row's first lane and passed to the
 * others (the 64-bit divisions once a row, not once a chunk). All 32 lanes must call it. */
static __device__ __forceinline__ void pad_chunk_of(int64_t base, int32_t lane, int32_t cshift, int32_t rows,
                                                    int32_t heads, int64_t s0, int64_t s1, int64_t s2, int64_t *ret_r,
                                                    int32_t *ret_c, int64_t *ret_at)
{
    const int64_t r = (base >> cshift) + (lane >> cshift);
    const int32_t c = lane & ((1 << cshift) - 1);
    int64_t at = 0;
    if (c == 0)
        at = pad_row_at(r, rows, heads, s0, s1, s2);
    *ret_at = __shfl_sync(0xffffffffu, at, lane - c);
    *ret_r = r;
    *ret_c = c;
}

/* WIDEN: dst (n, dp) dense <- src's view (d columns), columns d .. dp - 1 zero; else
 * dst's view (d columns) <- src (n, dp) dense, its first d columns. One lane a 16-byte
 * chunk of the dense row (dp / 8 = 1 << cshift chunks), a warp 32 / (dp / 8) rows; in a
 * narrowing, the lanes of columns d .. dp - 1 idle. VEC: 16-byte accesses on the view. */
template <bool WIDEN, bool VEC>
__global__ void __launch_bounds__(PAD_THREADS) attn_pad_copy_kernel(uint16_t *dst, const uint16_t *src, int64_t n,
                                                                     int32_t rows, int32_t heads, int64_t s0,
                                                                     int64_t s1, int64_t s2, int32_t d, int32_t cshift)
{
    const int32_t dp = 8 << cshift, lane = threadIdx.x & 31;
    const int64_t total = n << cshift, step = (int64_t)gridDim.x * PAD_THREADS;
    for (int64_t base = (int64_t)blockIdx.x * PAD_THREADS + (threadIdx.x & ~31u); base < total; base += step) {
        int64_t r, at;
        int32_t c;
        pad_chunk_of(base, lane, cshift, rows, heads, s0, s1, s2, &r, &c, &at);
        if (r >= n || (!WIDEN && 8 * c >= d))
            continue;
        if (WIDEN) {
            uint4 val = make_uint4(0u, 0u, 0u, 0u);
            if (8 * c < d) {
                const uint16_t *from = src + at + 8 * c;
                if (VEC) {
                    val = *reinterpret_cast<const uint4 *>(from);
                } else {
                    uint32_t w[4];
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        w[e] = (uint32_t)from[2 * e] | ((uint32_t)from[2 * e + 1] << 16);
                    val = make_uint4(w[0], w[1], w[2], w[3]);
                }
            }
            *reinterpret_cast<uint4 *>(dst + r * dp + 8 * c) = val;
        } else {
            const uint4 val = *reinterpret_cast<const uint4 *>(src + r * dp + 8 * c);
            uint16_t *to = dst + at + 8 * c;
            if (VEC) {
                *reinterpret_cast<uint4 *>(to) = val;
            } else {
                const uint32_t w[4] = {val.x, val.y, val.z, val.w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    to[2 * e] = (uint16_t)(w[e] & 0xFFFFu);
                    to[2 * e + 1] = (uint16_t)(w[e] >> 16);
                }
            }
        }
    }
}

/* 16-byte accesses serve the view where its base and every stride keep them aligned. */
static bool pad_vec(const void *data, const int64_t s[3])
{
    return ((uintptr_t)data & 15u) == 0 && s[0] % 8 == 0 && s[1] % 8 == 0 && s[2] % 8 == 0;
}

/* log2 of dp / 8 where that is a power of two dividing 32 (dp 8 .. 256), else -1. */
static int32_t pad_cshift(int32_t dp)
{
    for (int32_t k = 0; k <= 5; k++)
        if (dp == 8 << k)
            return k;
    return -1;
}

static uint32_t pad_blocks(int64_t threads)
{
    const int64_t b = (threads + PAD_THREADS - 1) / PAD_THREADS;
    return (uint32_t)(b < 65536 ? b : 65536); /* the loops stride over the rest */
}

/* Both copies: the view is src (widen) or dst (narrow), with strides `stride`. */
static cudaError_t pad_copy(bool widen, void *dst, const void *src, const int64_t stride[3], int32_t batch,
                            int32_t rows, int32_t heads, int32_t d, int32_t dp, cudaStream_t stream)
{
    const int32_t cshift = pad_cshift(dp);
    if (d % 8 || cshift < 0 || d > dp || batch < 0 || rows < 0 || heads < 0)
        return cudaErrorInvalidValue;
    const int64_t n = (int64_t)batch * rows * heads;
    if (n == 0 || (!widen && d == 0))
        return cudaSuccess;
    const uint32_t blocks = pad_blocks(n * (dp / 8));
    uint16_t *to = static_cast<uint16_t *>(dst);
    const uint16_t *from = static_cast<const uint16_t *>(src);
    const bool vec = pad_vec(widen ? src : dst, stride);
    if (widen && vec)
        attn_pad_copy_kernel<true, true><<<blocks, PAD_THREADS, 0, stream>>>(to, from, n, rows, heads, stride[0],
                                                                             stride[1], stride[2], d, cshift);
    else if (widen)
        attn_pad_copy_kernel<true, false><<<blocks, PAD_THREADS, 0, stream>>>(to, from, n, rows, heads, stride[0],
                                                                              stride[1], stride[2], d, cshift);
    else if (vec)
        attn_pad_copy_kernel<false, true><<<blocks, PAD_THREADS, 0, stream>>>(to, from, n, rows, heads, stride[0],
                                                                              stride[1], stride[2], d, cshift);
    else
        attn_pad_copy_kernel<false, false><<<blocks, PAD_THREADS, 0, stream>>>(to, from, n, rows, heads, stride[0],
                                                                               stride[1], stride[2], d, cshift);
    return cudaGetLastError();
}

cudaError_t cuattn__pad_widen(void *dst, const void *src, const int64_t stride[3], int32_t batch, int32_t rows,
                              int32_t heads, int32_t d, int32_t dp, cudaStream_t stream)
{
    return pad_copy(true, dst, src, stride, batch, rows, heads, d, dp, stream);
}

cudaError_t cuattn__pad_narrow(void *dst, const int64_t stride[3], const void *src, int32_t batch, int32_t rows,
                               int32_t heads, int32_t d, int32_t dp, cudaStream_t stream)
{
    return pad_copy(false, dst, src, stride, batch, rows, heads, d, dp, stream);
}
