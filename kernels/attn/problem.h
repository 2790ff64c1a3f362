// SPDX-License-Identifier: BSD-3-Clause
/*
 * problem.h - what every implementation of attention is asked: the problem (shapes, dtype,
 * mask, scale), the tensors (strided views in flash-attn's (batch, seqlen, heads, head_dim)
 * layout) and the configuration the output bits depend on; and the checks that hold for
 * all of them. The CPU engine (kernels/cpu), the CUDA kernels (kernels/cuda) and dashd's
 * validation use these; each adds only what it supports (head dims, dtypes, tile sizes).
 * Plain C, usable from CUDA host code.
 */
#ifndef DASH_ATTN_PROBLEM_H
#define DASH_ATTN_PROBLEM_H

#include "kernels/attn/dtype.h"
#include "kernels/sched/sched.h"

#include <stdint.h>

/* A strided view of a (batch, seqlen, heads, head_dim) tensor. Strides are in elements
 * and must be >= 0, with stride[3] == 1. Output tensors must not overlap themselves. */
struct attn_tensor {
    void *data;
    int64_t stride[4];
};

/* The problem: shapes and the attention parameters. */
struct attn_problem {
    int32_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
    enum dtype_kind dtype;
    enum sched_mask mask;
    float scale; /* softmax scale, finite and > 0; usually 1/sqrt(head_dim) */
};

/* What the output bits depend on besides the inputs and the problem. Zero fields mean
 * the implementation's defaults; implementations report the values they used. */
struct attn_config {
    enum sched_kind sched; /* backward schedule; SCHED_AUTO: the implementation's rule */
    int32_t w;             /* virtual wave size (0: SCHED_W_DEFAULT) */
    int32_t block_m;       /* q-tile rows (0: the implementation's default) */
    int32_t block_n;       /* kv-tile rows (0: the implementation's default) */
};

/* The rules every implementation shares: 0, -EINVAL (p NULL, a size below 1, heads_q not
 * a multiple of heads_kv, an unknown mask, a scale that is not finite and > 0) or
 * -ENOTSUP (an unknown dtype). Head dims are each implementation's to check. */
int attn_check_problem(const struct attn_problem *p);

/* A view that can be indexed: data set, stride[3] == 1, strides >= 0, the farthest element
 * within int64 range; an output (output != 0) must also not overlap itself (with its dims
 * sorted by stride, each stride steps over the whole extent of the dims below it, which
 * refuses a few exotic non-overlapping interleavings). 0 or -EINVAL. */
int attn_check_tensor(const struct attn_tensor *t, int32_t batch, int32_t seqlen, int32_t heads,
                      int32_t head_dim, int output);

/* The schedule's view of a problem at a configuration's tile sizes, padding zeroed (caches
 * compare it as memory). */
void attn_sched_shape(const struct attn_problem *p, const struct attn_config *c,
                      struct sched_shape *ret_shape);

/* The schedule's tile geometry for a problem at a configuration whose sizes are all set
 * (w, block_m, block_n > 0): sched_init for c->sched (SCHED_AUTO stands for any: the
 * geometry is checked as for ascending), then the bound every implementation's element
 * indices share, seqlen * head_dim within 32 bits. 0 and *ret_geo; -EINVAL (the schedule
 * refuses the sizes) or -EOVERFLOW (tile counts or indices past 32 bits). */
int attn_geometry(const struct attn_problem *p, const struct attn_config *c, struct sched *ret_geo);

/* Strides of a dense (batch, seqlen, heads, head_dim) tensor. */
static inline struct attn_tensor attn_dense(void *data, int32_t seqlen, int32_t heads,
                                            int32_t head_dim)
{
    struct attn_tensor t = {data,
                            {(int64_t)seqlen * heads * head_dim, (int64_t)heads * head_dim,
                             head_dim, 1}};
    return t;
}

#endif
