// SPDX-License-Identifier: BSD-3-Clause
/*
 * problem.h - what every implementation of attention is asked: the problem (shapes, dtype,
 * mask, window, softcap, scale, and the sequence offsets of a packed variable-length batch),
 * the tensors (strided views in flash-attn's (batch, seqlen, heads, head_dim) layout) and
 * the configuration the output bits depend on; and the checks that hold for all of them. The CPU engine (kernels/cpu), the CUDA kernels (kernels/cuda) and dashd's
 * validation use these; each adds only what it supports (head dims, dtypes, tile sizes).
 * Plain C, usable from CUDA host code.
 */
#ifndef DASH_ATTN_PROBLEM_H
#define DASH_ATTN_PROBLEM_H

#include "kernels/attn/dtype.h"
#include "kernels/sched/sched.h"

#include <stddef.h>
#include <stdint.h>

/* A strided view of a (batch, seqlen, heads, head_dim) tensor. Strides are in elements
 * and must be >= 0, with stride[3] == 1. Output tensors must not overlap themselves. */
struct attn_tensor {
    void *data;
    int64_t stride[4];
};

/*
 * The problem: shapes and the attention parameters. Zero-initialised fields past `scale`
 * mean what the plain problem means (no window, no softcap, a dense batch).
 *
 * Window (flash-attn's window_size): with `window` set, query i of a sequence sees key j
 * only if  i + off - window_left <= j <= i + off + window_right,  off = seqlen_k - seqlen_q
 * of that sequence (bottom-right alignment, as the causal mask), -1 meaning unbounded on
 * that side. The causal mask is the window (-1, 0); causal with a window keeps its left
 * side and forces right = 0, as flash-attn does.
 *
 * Softcap (Gemma 2): scores s = scale q.k become softcap * tanh(s / softcap); 0 is off.
 *
 * Packed variable-length batch (flash-attn's varlen): with cu_seqlens_q set, the tensors
 * are (total_q or total_k, heads, head_dim) - seen as attn_tensors of batch 1 and seqlen
 * total_q / total_k - and sequence b owns rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) of q,
 * out, dout, dq and [cu_seqlens_k[b], cu_seqlens_k[b+1]) of k, v, dk, dv; lse is
 * (1, heads_q, total_q). batch counts the sequences (batch + 1 offsets each), seqlen_q
 * and seqlen_k bound every sequence's length (flash-attn's max_seqlen_q / max_seqlen_k).
 * Sequences may be empty; rows that see no key get O = 0, LSE = +inf and zero gradients.
 */
struct attn_problem {
    int32_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
    enum dtype_kind dtype;
    enum sched_mask mask;
    float scale; /* softmax scale, finite and > 0; usually 1/sqrt(head_dim) */
    int32_t window;                    /* 0: none; 1: window_left / window_right apply */
    int32_t window_left, window_right; /* >= -1; -1: unbounded */
    float softcap;                     /* 0: off; else finite and > 0 */
    const int32_t *cu_seqlens_q;       /* NULL: a dense batch; else batch + 1 offsets */
    const int32_t *cu_seqlens_k;       /* set with cu_seqlens_q */
    int32_t total_q, total_k;          /* varlen: rows of q and of k (the last offsets) */
};

/* Most sequences a packed batch may hold (dashd reads their offsets into its memory). */
#define ATTN_VARLEN_MAX_BATCH (1 << 24)

/* The effective window of one sequence of sq queries and sk keys: *ret_left and
 * *ret_right, -1 for an unbounded side - causal forces right to 0, and a side wide enough
 * to see every key is unbounded (so a window past the length is the plain mask, bits
 * included). */
void attn_window_of(const struct attn_problem *p, int32_t sq, int32_t sk, int32_t *ret_left,
                    int32_t *ret_right);

/* Whether p's window leaves a band at sq queries and sk keys (attn_window_of's window is
 * neither the full mask (-1, -1) nor the causal one (-1, 0)); 0 without a window. */
int attn_window_bands(const struct attn_problem *p, int32_t sq, int32_t sk);

/* Sequence b of a problem: its first q and k rows and its lengths (a dense batch: rows
 * from 0, the problem's lengths). */
static inline void attn_seq(const struct attn_problem *p, int32_t b, int32_t *ret_q0,
                            int32_t *ret_k0, int32_t *ret_sq, int32_t *ret_sk)
{
    if (!p->cu_seqlens_q) {
        *ret_q0 = *ret_k0 = 0;
        *ret_sq = p->seqlen_q;
        *ret_sk = p->seqlen_k;
        return;
    }
    *ret_q0 = p->cu_seqlens_q[b];
    *ret_k0 = p->cu_seqlens_k[b];
    *ret_sq = p->cu_seqlens_q[b + 1] - *ret_q0;
    *ret_sk = p->cu_seqlens_k[b + 1] - *ret_k0;
}

/* What the output bits depend on besides the inputs and the problem. Zero fields mean
 * the implementation's defaults; implementations report the values they used. */
struct attn_config {
    enum sched_kind sched; /* backward schedule; SCHED_AUTO: the implementation's rule */
    int32_t w;             /* virtual wave size (0: SCHED_W_DEFAULT) */
    int32_t block_m;       /* q-tile rows (0: the implementation's default) */
    int32_t block_n;       /* kv-tile rows (0: the implementation's default) */
    /* Packed batches: SCHED_AUTO resolves without looking at the other sequences, so a
     * sequence's bits never depend on what it is packed with (docs/schedules.md). Every
     * explicit schedule is batch invariant anyway: sequences are tiled and ordered alone. */
    int32_t batch_invariant;
};

/* The rules every implementation shares: 0, -EINVAL (p NULL, a size below 1, heads_q not
 * a multiple of heads_kv, an unknown mask, a scale that is not finite and > 0, a window
 * side below -1, a softcap that is not finite and >= 0; varlen: offsets missing, not
 * starting at 0, decreasing, a sequence longer than seqlen_q / seqlen_k, the last offset
 * not total_q / total_k, more than ATTN_VARLEN_MAX_BATCH sequences) or -ENOTSUP (an
 * unknown dtype). Head dims are each implementation's to check. */
int attn_check_problem(const struct attn_problem *p);

/* attn_check_problem, and the first rule broken in words (why, at most whylen bytes,
 * NUL-terminated; "" when none is), naming the field and the numbers: what dashd replies. */
int attn_explain_problem(const struct attn_problem *p, char *why, size_t whylen);

/* The view of a problem's q-side (q, out, dout, dq) and k-side (k, v, dk, dv) tensors that
 * attn_check_tensor checks: (batch, seqlen) for a dense batch, (1, total) for varlen. */
static inline int32_t attn_view_batch(const struct attn_problem *p)
{
    return p->cu_seqlens_q ? 1 : p->batch;
}
static inline int32_t attn_view_rows_q(const struct attn_problem *p)
{
    return p->cu_seqlens_q ? p->total_q : p->seqlen_q;
}
static inline int32_t attn_view_rows_k(const struct attn_problem *p)
{
    return p->cu_seqlens_q ? p->total_k : p->seqlen_k;
}

/* A view that can be indexed: data set, stride[3] == 1, strides >= 0, the farthest element
 * within int64 range; an output (output != 0) must also not overlap itself (with its dims
 * sorted by stride, each stride steps over the whole extent of the dims below it, which
 * refuses a few exotic non-overlapping interleavings). 0 or -EINVAL. */
int attn_check_tensor(const struct attn_tensor *t, int32_t batch, int32_t seqlen, int32_t heads,
                      int32_t head_dim, int output);

/* The schedule's view of a problem at a configuration's tile sizes, padding zeroed (caches
 * compare it as memory); for a packed batch, with the bounds seqlen_q / seqlen_k as
 * lengths. attn_sched_shape_of: sequence b's own (batch 1, its lengths, which must be
 * >= 1 each); the same as attn_sched_shape for a dense batch. */
void attn_sched_shape(const struct attn_problem *p, const struct attn_config *c,
                      struct sched_shape *ret_shape);
void attn_sched_shape_of(const struct attn_problem *p, const struct attn_config *c, int32_t b,
                         struct sched_shape *ret_shape);

/* The schedule's tile geometry for a problem at a configuration whose sizes are all set
 * (w, block_m, block_n > 0): sched_init for c->sched (SCHED_AUTO stands for any: the
 * geometry is checked as for ascending) on attn_sched_shape, then the bound every
 * implementation's element indices share, seqlen * head_dim (varlen: also the token
 * counts * head_dim) within 32 bits. 0 and *ret_geo; -EINVAL (the schedule
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
