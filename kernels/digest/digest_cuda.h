// SPDX-License-Identifier: BSD-3-Clause
/*
 * digest_cuda.h - the digests of kernels/digest/digest.h computed on the GPU, for tensors in
 * device memory: the same value as digest_strided() on a host copy of the same bytes.
 *
 * Two kernels: one thread hashes each leaf (a row, or a 4 KiB piece of a longer row)
 * into the scratch; then a block per supergroup makes its 64 group hashes (a thread each,
 * over 64 leaf hashes) and its own hash, and the block that ends a tensor's last
 * supergroup hashes the tensor's root over them. A dense view is hashed in place;
 * a strided one is first gathered into dense scratch. A view whose leaves a kernel has
 * already hashed (the backward's fused epilogues, attn_cuda.h) skips the first kernel and
 * never reads the tensor; where v3's backward folds its outputs' leaves into their
 * digests itself (cuattn_set_digests, the same values), neither kernel runs for them.
 * Everything is queued on the caller's stream, so digests of an op's outputs queued right
 * after the op are ready when the stream reaches them.
 */
#ifndef DASH_DIGEST_CUDA_H
#define DASH_DIGEST_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DIGEST_CUDA_MAX_VIEWS 16

/* A tensor in device memory: ndim (1..4) dims, strides in elements, elem bytes (1, 2, 4,
 * 8 or 16). leaves: NULL, or its leaf hashes (digest.h: one per row, in row-major order;
 * rows of at most DIGEST_CHUNK bytes) already in device memory, written earlier on the
 * same stream; base is then not read. */
struct digest_view {
    const void *base;
    int32_t ndim;
    int64_t shape[4];
    int64_t strides[4];
    int32_t elem;
    const uint64_t *leaves;
};

/* Device scratch digest_cuda() needs for these views (group and supergroup hashes, the
 * leaf hashes of views without given ones, and dense copies of the strided ones); 0 for
 * a bad argument. */
size_t digest_cuda_scratch_bytes(const struct digest_view *v, int32_t n);

/* Queue on `stream` (a cudaStream_t; NULL: the legacy default stream) the digests of
 * v[0..n) (n <= DIGEST_CUDA_MAX_VIEWS) into out[0..n), which the device writes (device
 * memory, or pinned/mapped host memory). scratch: device memory of at least
 * digest_cuda_scratch_bytes(v, n) bytes, used until the stream has passed the digests.
 * Returns 0, -EINVAL (bad views, too little scratch) or -EIO (a launch failed). */
int digest_cuda(const struct digest_view *v, int32_t n, void *scratch, size_t scratch_bytes,
                uint64_t *out, void *stream);

#ifdef __cplusplus
}
#endif

#endif
