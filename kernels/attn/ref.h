// SPDX-License-Identifier: BSD-3-Clause
/*
 * ref.h - naive float64 attention, the yardstick for the engine and the GPU kernels.
 *
 * Reads the same strided (batch, seqlen, heads, head_dim) tensors as the engine (any
 * dtype), converts each element to double and computes everything in double with the
 * textbook formulas: P = softmax(scale q k^T) over visible keys, O = P v,
 * dP = dO v^T, dS = P o (dP - rowsum(dO o O)), dQ = scale dS k, dK = scale dS^T q,
 * dV = P^T dO; with a softcap the scores are cap tanh(scale q.k / cap) and dS is taken
 * through the tanh. Windows and packed batches as kernels/attn/problem.h defines them,
 * sequence by sequence. O(batch * heads * seqlen_q * seqlen_k * head_dim) time; for tests.
 * Outputs are dense doubles: out/dq (batch, seqlen_q, heads_q, head_dim),
 * dk/dv (batch, seqlen_k, heads_kv, head_dim), lse (batch, heads_q, seqlen_q); for a packed
 * batch (total_q, heads_q, head_dim), (total_k, heads_kv, head_dim), (heads_q, total_q).
 */
#ifndef DASH_REF_H
#define DASH_REF_H

#include "kernels/attn/problem.h"

/* Returns 0, or -EINVAL / -ENOTSUP as attn_check_problem, or -ENOMEM. lse may be NULL. */
int ref_forward(const struct attn_problem *p, struct attn_tensor q, struct attn_tensor k,
                struct attn_tensor v, double *out, double *lse);

/* Gradients given dout; recomputes the forward in double. */
int ref_backward(const struct attn_problem *p, struct attn_tensor q, struct attn_tensor k,
                 struct attn_tensor v, struct attn_tensor dout, double *dq, double *dk,
                 double *dv);

/* As ref_backward, but Dsum = rowsum(dO o O) reads O from `out` (the forward's output as
 * stored, in p->dtype), as the kernels' backward does, instead of the float64 O. Where a
 * row's probabilities are peaked (a few keys, one P near 1), dP - Dsum cancels and the
 * rounding of the stored O reaches dQ and dK amplified by 1/P: the kernel is then right
 * about the O it was given, and this is the reference that shows its own error. */
int ref_backward_given_out(const struct attn_problem *p, struct attn_tensor q,
                           struct attn_tensor k, struct attn_tensor v, struct attn_tensor out,
                           struct attn_tensor dout, double *dq, double *dk, double *dv);

/* ||a - b|| / ||b|| over n doubles (Frobenius); +inf if b is zero and a is not. */
double ref_rel_error(const double *a, const double *b, int64_t n);

#endif
