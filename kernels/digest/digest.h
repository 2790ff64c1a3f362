// SPDX-License-Identifier: BSD-3-Clause
/*
 * digest.h - the 64-bit digest of a tensor's bytes, identical on the CPU (this file,
 * libxxhash) and on the GPU (digest_cuda.h): what the audit log records so that two runs
 * can be proven to have produced the same bytes.
 *
 * Definition (digest version 3, "xxh3-rows-4k-64-64"). Let B be the tensor's bytes in
 * dense row-major order - element by element, each element's bytes as stored
 * (little-endian) - and n = |B|, so a strided view digests like its dense copy. A row is
 * the innermost dimension: r = shape[ndim-1] * elem bytes (a blob of bytes is one row of
 * n). Cut every row, in order, into leaves of DIGEST_CHUNK = 4096 bytes (the row's last one
 * shorter; a row of at most 4 KiB is one leaf), then the leaves' hashes into groups of
 * DIGEST_FANOUT = 64, and the groups' hashes into supergroups of 64 (the last of each
 * smaller). Then
 *
 *     leaf_i  = XXH3-64(leaf bytes_i)  (seed 0, the default secret)
 *     group_j = XXH64(le64(leaf_64j)  || ... || le64(leaf_64j+63),  seed 0)
 *     super_k = XXH64(le64(group_64k) || ... || le64(group_64k+63), seed 0)
 *     digest  = XXH64(le64(super_0)   || ... || le64(super_m-1),    seed n)
 *
 * Rows as leaves let a kernel that writes a row hash it while the row is still on chip
 * (the backward's dQ postprocess and dK/dV epilogues do: attn_cuda.h), so an audited op
 * need not read its outputs again; XXH3's long form costs such a kernel a 32 x 32-bit
 * multiply per 8-byte word where XXH64 cost two 64 x 64-bit ones. The supergroups keep
 * the root's serial chain short when rows are small (64 MiB of 256-byte rows: 64 words).
 * The root binds the order and the length. Any change of a byte, of the order, of the
 * length, or of the leaf boundaries (another row length, unless both are whole multiples
 * of 4 KiB) changes the digest except with probability about 2^-64 per pair of tensors.
 *
 * Version 1 (until 2026-12-03) had 4 KiB leaves cut across rows and no supergroups;
 * version 2 (until 2026-12-07) hashed the leaves with XXH64 (seed 0). Logs record the
 * version in their header, and `dashctl audit diff` refuses to compare digests of
 * different versions.
 */
#ifndef DASH_DIGEST_H
#define DASH_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DIGEST_VERSION 3
#define DIGEST_CHUNK 4096
#define DIGEST_FANOUT 64

/* The digest of n contiguous bytes as one row. p may be NULL when n is 0. */
uint64_t digest_bytes(const void *p, uint64_t n);

/* The digest of n contiguous bytes in rows of `row` bytes (a dense tensor whose innermost
 * dimension has row bytes). Returns 0 and *ret, or -EINVAL when row is 0 or does not divide
 * n (n 0: any row). */
int digest_rows(const void *p, uint64_t n, uint64_t row, uint64_t *ret);

/* The digest of a strided view: ndim (1..4) dims of shape[i] >= 1 elements of elem bytes,
 * strides in elements (any, including 0 and overlapping), read in row-major order.
 * Returns 0 and *ret, or -EINVAL (bad ndim, shape or elem) / -ENOMEM. */
int digest_strided(const void *base, int32_t ndim, const int64_t *shape, const int64_t *strides,
                   size_t elem, uint64_t *ret);

#ifdef __cplusplus
}
#endif

#endif
