// SPDX-License-Identifier: BSD-3-Clause
/*
 * digest.h - the 64-bit digest of a tensor's bytes, identical on the CPU (this file,
 * libxxhash) and on the GPU (digest_cuda.h): what the audit log records so that two runs
 * can be proven to have produced the same bytes.
 *
 * Definition (digest version 1, "xxh64-tree-4k-64"). Let B be the tensor's bytes in dense
 * row-major order - element by element, each element's bytes as stored (little-endian) -
 * and n = |B|, so a strided view digests like its dense copy. Cut B into chunks of
 * DIGEST_CHUNK = 4096 bytes (the last one shorter; none when n = 0), and the chunks'
 * hashes into groups of DIGEST_FANOUT = 64 (the last one smaller). Then
 *
 *     leaf_i  = XXH64(chunk_i, seed 0)
 *     group_j = XXH64(le64(leaf_64j) || ... || le64(leaf_64j+63), seed 0)
 *     digest  = XXH64(le64(group_0) || ... || le64(group_m-1), seed n)
 *
 * A GPU hashes every chunk in its own thread, then every group, then the root, so the
 * work is spread over tens of thousands of threads for the tensors of one op, and no
 * thread hashes more than 4 KiB; the root binds the order and the length. Any change of a
 * byte, of the order, or of the length changes the digest except with probability about
 * 2^-64 per pair of tensors.
 */
#ifndef DASH_DIGEST_H
#define DASH_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DIGEST_VERSION 1
#define DIGEST_CHUNK 4096
#define DIGEST_FANOUT 64

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
