/*
 * digest.h - the 64-bit digest of a tensor's bytes, identical on the CPU (this file,
 * libxxhash) and on the GPU (digest_cuda.h): what the audit log records so that two runs
 * can be proven to have produced the same bytes.
 *
 * Definition (digest version 1, "xxh64-tree-64k"). Let B be the tensor's bytes in dense
 * row-major order - element by element, each element's bytes as stored (little-endian) -
 * and n = |B|, so a strided view digests like its dense copy. Cut B into chunks of
 * DIGEST_CHUNK = 65536 bytes (the last one shorter; none when n = 0). Then
 *
 *     leaf_i = XXH64(chunk_i, seed 0)                      i = 0 .. k-1
 *     digest = XXH64(le64(leaf_0) || ... || le64(leaf_k-1), seed n)
 *
 * The chunks let a GPU hash in parallel (one thread per chunk) and the root binds their
 * order and the length. Any change of a byte, of the order, or of the length changes the
 * digest except with probability about 2^-64 per pair of tensors.
 */
#ifndef DASH_DIGEST_H
#define DASH_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DIGEST_VERSION 1
#define DIGEST_CHUNK 65536

/* The digest of n contiguous bytes. p may be NULL when n is 0. */
uint64_t digest_bytes(const void *p, uint64_t n);

/* The digest of a strided view: ndim (1..4) dims of shape[i] >= 1 elements of elem bytes,
 * strides in elements (any, including 0 and overlapping), read in row-major order.
 * Returns 0 and *ret, or -EINVAL (bad ndim, shape or elem) / -ENOMEM. */
int digest_strided(const void *base, int32_t ndim, const int64_t *shape, const int64_t *strides,
                   size_t elem, uint64_t *ret);

#ifdef __cplusplus
}
#endif

#endif
