// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_bufs.h - the GPU attention suites' one fixture: a problem (dense, or a packed batch
 * of up to GPU_BUFS_MAXB sequences) with its host inputs drawn at random, host copies for
 * the outputs, and the device twins of all of them. Tensors are dense views: (B, S, heads,
 * D), or (1, total, heads, D) for a packed batch. test_attn_gpu.c and test_attn_vl_gpu.c
 * use it.
 */
#ifndef DASH_GPU_BUFS_H
#define DASH_GPU_BUFS_H

#include "../testutil.h"
#include "kernels/attn/problem.h"

#include <stddef.h>
#include <stdint.h>

#define GPU_BUFS_MAXB 8

struct gpu_bufs {
    struct attn_problem p; /* a packed batch's offsets point into cu */
    int32_t cu[2][GPU_BUFS_MAXB + 1];
    int32_t vb, rq, rk;   /* view batch and rows (attn_view_*) */
    int64_t nq, nk, nlse; /* elements of q-shaped and k-shaped tensors, and of lse */
    size_t es;            /* bytes per element */
    void *q, *k, *v, *dout;           /* host inputs */
    void *out, *dq, *dk, *dv;         /* host copies of the device outputs */
    float *lse;
    void *d_q, *d_k, *d_v, *d_dout;   /* device inputs */
    void *d_out, *d_dq, *d_dk, *d_dv; /* device outputs */
    float *d_lse;
};

/* cudaMalloc'd device memory (16 bytes for 0), the test failing fatally without it. */
void *gpu_dev_alloc(size_t bytes);

/* Set up a for p, drawing the inputs from r and copying them to the device. lq and lk
 * (p->batch lengths each, at most GPU_BUFS_MAXB) make it a packed batch: a->p then holds
 * the offsets, totals and longest lengths; NULL keeps p's dense batch. */
void gpu_bufs_init(struct gpu_bufs *a, const struct attn_problem *p, const int32_t *lq, const int32_t *lk,
                   struct tu_rng *r);

void gpu_bufs_free(struct gpu_bufs *a);

/* Copies of a's host outputs, to compare bytes with: the forward's (out, lse) or the
 * backward's (dq, dk, dv), as the last run copied them back. */
struct gpu_copy {
    void *data[3];
    size_t bytes[3];
    int n;
};

void gpu_copy_fwd(struct gpu_copy *c, const struct gpu_bufs *a);
void gpu_copy_bwd(struct gpu_copy *c, const struct gpu_bufs *a);
/* Whether a's host outputs of the copied kind hold the copy's bytes. */
int gpu_copy_equal(const struct gpu_copy *c, const struct gpu_bufs *a);
void gpu_copy_free(struct gpu_copy *c);

/* The dense views of a's q-side (q, out, dout, dq) and k-side (k, v, dk, dv) tensors. */
struct attn_tensor gpu_bufs_tq(const struct gpu_bufs *a, void *data);
struct attn_tensor gpu_bufs_tk(const struct gpu_bufs *a, void *data);

/* Forward of a on ca's GPU into poisoned outputs (every byte 0xff: NaN), out and lse
 * copied back to a's host outputs; 0 or the call's error. The poison goes on the object's
 * stream (cuattn_stream), so that the kernels come after it: that stream is non-blocking,
 * and cudaMemset's legacy default stream is not ordered with it. */
struct cuattn;
struct attn_config;
int gpu_bufs_forward(struct cuattn *ca, struct gpu_bufs *a, const struct attn_config *cfg,
                     struct attn_config *ret_cfg);
/* The same for the backward (after the forward) on `grid` CTAs (0: the object's choice):
 * dq, dk, dv poisoned, then copied back. */
int gpu_bufs_backward(struct cuattn *ca, struct gpu_bufs *a, const struct attn_config *cfg, int32_t grid,
                      struct attn_config *ret_cfg);
/* Its three steps, for a test that does something between them (test_share_gpu.c holds
 * SMs before the call): dq, dk, dv poisoned on the object's stream; the call alone (its
 * error, nothing copied); the gradients copied back into the host buffers. */
void gpu_bufs_poison_grads(struct cuattn *ca, struct gpu_bufs *a);
int gpu_bufs_backward_call(struct cuattn *ca, struct gpu_bufs *a, const struct attn_config *cfg, int32_t grid,
                           struct attn_config *ret_cfg);
void gpu_bufs_grads_back(struct gpu_bufs *a);

#endif
