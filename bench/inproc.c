// SPDX-License-Identifier: BSD-3-Clause
/*
 * inproc.c - issue 20's what-if, for the bench only: dashd's kernels (kernels/cuda) run in
 * the trainer's own process and CUDA context, ordered on the caller's stream, with no
 * daemon, no request and no context switch. bench/step_inproc.py loads this as a shared
 * library (build/libdash_inproc.so) and times examples/train_tiny_gpt.py's step with it,
 * so that the step a design running the kernels in the caller's context could reach is a
 * measured figure beside the one through dashd. Not a product path: no validation beyond
 * the kernels' own checks, no audit.
 *
 * Ordering: the caller's stream records an event that cuattn's stream waits for, the
 * kernels are queued on cuattn's stream (asynchronous mode), and the caller's stream waits
 * for an event recorded behind them - two event waits per op, all on the GPU.
 */
#include "kernels/cuda/attn_cuda.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct inproc {
    struct cuattn *a;
    cudaEvent_t in, out;
};

/* Opens `device`; 0 and *ret, or a negative code. */
int inproc_new(int device, struct inproc **ret)
{
    struct inproc *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    int rc = cuattn_new(device, &h->a);
    if (rc < 0)
        goto free_h;
    if ((rc = cuattn_set_async(h->a, 1)) < 0)
        goto free_a;
    if (cudaSetDevice(device) != cudaSuccess ||
        cudaEventCreateWithFlags(&h->in, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&h->out, cudaEventDisableTiming) != cudaSuccess) {
        rc = -EIO;
        goto free_a;
    }
    *ret = h;
    return 0;
free_a:
    cuattn_free(h->a);
free_h:
    free(h);
    return rc;
}

static int order_before(struct inproc *h, void *stream)
{
    if (cudaEventRecord(h->in, (cudaStream_t)stream) != cudaSuccess ||
        cudaStreamWaitEvent((cudaStream_t)cuattn_stream(h->a), h->in, 0) != cudaSuccess)
        return -EIO;
    return 0;
}

static int order_after(struct inproc *h, void *stream)
{
    if (cudaEventRecord(h->out, (cudaStream_t)cuattn_stream(h->a)) != cudaSuccess ||
        cudaStreamWaitEvent((cudaStream_t)stream, h->out, 0) != cudaSuccess)
        return -EIO;
    return 0;
}

static struct attn_tensor view(void *data, const int64_t *stride)
{
    struct attn_tensor t = {.data = data};
    memcpy(t.stride, stride, sizeof t.stride);
    return t;
}

static struct attn_problem problem(const int32_t *shape, int32_t bf16, int32_t causal, float scale)
{
    /* shape: batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim */
    struct attn_problem p = {.batch = shape[0], .seqlen_q = shape[1], .seqlen_k = shape[2],
                             .heads_q = shape[3], .heads_kv = shape[4], .head_dim = shape[5],
                             .dtype = bf16 ? DTYPE_BF16 : DTYPE_F16,
                             .mask = causal ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL, .scale = scale};
    return p;
}

/* out (B, Sq, Hq, D), lse (B, Hq, Sq) fp32 contiguous; strides in elements, 4 a tensor
 * (q, k, v, out in that order in `strides`). Queued on `stream` (a cudaStream_t). */
int inproc_forward(struct inproc *h, const int32_t *shape, int32_t bf16, int32_t causal, float scale,
                   void *q, void *k, void *v, void *out, float *lse, const int64_t *strides, void *stream)
{
    const struct attn_problem p = problem(shape, bf16, causal, scale);
    int rc = order_before(h, stream);
    if (rc == 0)
        rc = cuattn_forward(h->a, &p, NULL, view(out, strides + 12), lse, view(q, strides),
                            view(k, strides + 4), view(v, strides + 8), NULL);
    return rc < 0 ? rc : order_after(h, stream);
}

/* The deterministic backward (schedule auto); strides of q, k, v, out, dout, dq, dk, dv. */
int inproc_backward(struct inproc *h, const int32_t *shape, int32_t bf16, int32_t causal, float scale,
                    void *q, void *k, void *v, void *out, const float *lse, void *dout, void *dq, void *dk,
                    void *dv, const int64_t *strides, void *stream)
{
    const struct attn_problem p = problem(shape, bf16, causal, scale);
    int rc = order_before(h, stream);
    if (rc == 0)
        rc = cuattn_backward(h->a, &p, NULL, 0, view(dq, strides + 20), view(dk, strides + 24),
                             view(dv, strides + 28), view(q, strides), view(k, strides + 4),
                             view(v, strides + 8), view(out, strides + 12), lse, view(dout, strides + 16),
                             NULL);
    return rc < 0 ? rc : order_after(h, stream);
}
