// SPDX-License-Identifier: BSD-3-Clause
/*
 * dash_poison.c - which bytes a failed stream-ordered op poisons (all 0xFF: NaN in f16,
 * bf16 and f32), and the check that makes poisoning them safe.
 *
 * A stream-ordered op that fails leaves every element of its outputs (out and lse for a
 * forward; dq, dk and dv for a backward) all 0xFF before the caller's stream goes on
 * (dash.h). The library writes the poison itself, with cudaMemset2DAsync, so it must know
 * the exact bytes of each element, and no others: an output may be a strided view that
 * shares its allocation with other tensors (dq of a packed dqkv), whose bytes between the
 * elements are not ours to touch. So a tensor is cut into 2-D runs (a row of `width`
 * contiguous bytes, `height` rows `pitch` bytes apart) by merging the dimensions that are
 * contiguous with the ones inside them; what does not merge is looped over. A dense tensor
 * is one run; flash-attn's packed layouts are one or two levels.
 *
 * The same walk checks a stream-ordered op's outputs before anything is queued: strides
 * >= 0, and every element inside the tensor's buffer (DASH_EBOUNDS), so the poison never
 * writes outside memory the caller registered. Host code, tested without a GPU, except
 * dash__poison_outputs (CUDA builds), which queues the memsets; dash_signal.c decides when.
 */
#include "client/dash_internal.h"

#include <stdio.h>
#include <string.h>

/* t's dims with size > 1, outermost first, as (shape, stride in bytes); dense strides
 * when t's are all zero. Returns the count (0: one element, or empty: see *ret_empty). */
static int dims_of(const struct dash_tensor *t, size_t elem, int64_t shape[4], int64_t stride[4],
                   int *ret_empty)
{
    int zero = 1;
    for (int32_t i = 0; i < t->ndim; i++)
        zero &= t->strides[i] == 0;
    int64_t dense = 1;
    int64_t st[4];
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
        st[i] = zero ? dense : t->strides[i];
        dense *= t->shape[i] > 0 ? t->shape[i] : 1;
    }
    int n = 0;
    *ret_empty = 0;
    for (int32_t i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0)
            *ret_empty = 1;
        if (t->shape[i] <= 1)
            continue;
        shape[n] = t->shape[i];
        stride[n] = st[i] * (int64_t)elem;
        n++;
    }
    return n;
}

int dash__view_span(int32_t ndim, const int64_t *shape, const int64_t *strides, uint64_t elem,
                    uint64_t *ret_bytes)
{
    if (ndim < 1 || ndim > 4 || elem == 0)
        return DASH_EINVAL;
    uint64_t last = 0; /* the last element's index */
    for (int32_t d = 0; d < ndim; d++) {
        if (shape[d] < 1 || strides[d] < 0)
            return DASH_EINVAL;
        uint64_t step;
        if (__builtin_mul_overflow((uint64_t)(shape[d] - 1), (uint64_t)strides[d], &step) ||
            __builtin_add_overflow(last, step, &last))
            return DASH_EINVAL;
    }
    if (__builtin_mul_overflow(last + 1, elem, ret_bytes))
        return DASH_EINVAL;
    return 0;
}

int dash__tensor_check(const struct dash_tensor *t, size_t elem, char *why, size_t len)
{
    if (!t || !t->buf || t->ndim < 1 || t->ndim > 4 || elem == 0) {
        snprintf(why, len, "no tensor, or ndim %d outside 1..4", t ? t->ndim : 0);
        return DASH_EINVAL;
    }
    int zero = 1, empty = 0;
    for (int32_t i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || t->strides[i] < 0) {
            snprintf(why, len, "dim %d: shape %lld, stride %lld: both must be >= 0", i,
                     (long long)t->shape[i], (long long)t->strides[i]);
            return DASH_EINVAL;
        }
        zero &= t->strides[i] == 0;
        empty |= t->shape[i] == 0;
    }
    if (empty)
        return 0; /* no element: nothing is written */
    int64_t st[4], dense = 1;
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
        st[i] = zero ? dense : t->strides[i];
        dense *= t->shape[i];
    }
    uint64_t bytes;
    if (dash__view_span(t->ndim, t->shape, st, elem, &bytes) != 0 ||
        t->offset > t->buf->size || bytes > t->buf->size - t->offset) {
        snprintf(why, len, "a tensor at offset %llu reaches past its buffer of %llu bytes",
                 (unsigned long long)t->offset, (unsigned long long)t->buf->size);
        return DASH_EBOUNDS;
    }
    return 0;
}

int dash__tensor_runs(const struct dash_tensor *t, size_t elem,
                      int (*fn)(void *ctx, const struct dash__run *run), void *ctx)
{
    int64_t shape[4], stride[4];
    int empty;
    int n = dims_of(t, elem, shape, stride, &empty);
    if (empty)
        return 0;
    struct dash__run run = {.offset = t->offset, .width = elem, .pitch = elem, .height = 1};
    /* the row: the innermost dims, as long as they are contiguous */
    while (n > 0 && (uint64_t)stride[n - 1] == run.width) {
        run.width *= (uint64_t)shape[n - 1];
        n--;
    }
    run.pitch = run.width;
    /* the rows: one more dim, and the ones outside it that continue its spacing (not when
     * rows would overlap, as with a stride 0: those are written one by one) */
    if (n > 0 && (uint64_t)stride[n - 1] >= run.width) {
        run.pitch = (uint64_t)stride[n - 1];
        run.height = (uint64_t)shape[n - 1];
        n--;
        while (n > 0 && (uint64_t)stride[n - 1] == run.pitch * run.height) {
            run.height *= (uint64_t)shape[n - 1];
            n--;
        }
    }
    /* the rest: every index of dims 0..n-1 */
    int64_t idx[4] = {0, 0, 0, 0};
    const uint64_t base = run.offset;
    for (;;) {
        uint64_t off = base;
        for (int i = 0; i < n; i++)
            off += (uint64_t)idx[i] * (uint64_t)stride[i];
        run.offset = off;
        int rc = fn(ctx, &run);
        if (rc)
            return rc;
        int i = n - 1;
        while (i >= 0 && ++idx[i] == shape[i])
            idx[i--] = 0;
        if (i < 0)
            return 0;
    }
}

int dash__outputs_of(struct dash_client *c, int forward, const struct dash_attn *a,
                     const struct dash_tensor *const *ts, struct dash__poison *ret)
{
    static const int fwd[] = {3, 4}, bwd[] = {6, 7, 8};
    static const char *const fwd_names[] = {"out", "lse"}, *const bwd_names[] = {"dq", "dk", "dv"};
    const int *which = forward ? fwd : bwd;
    const char *const *names = forward ? fwd_names : bwd_names;
    memset(ret, 0, sizeof *ret);
    ret->n = forward ? 2 : 3;
    for (int i = 0; i < ret->n; i++) {
        const struct dash_tensor *t = ts[which[i]];
        const size_t elem = which[i] == 4 ? sizeof(float) : dash_dtype_size(a->dtype);
        char why[200];
        int rc = dash__tensor_check(t, elem, why, sizeof why);
        if (rc)
            return dash__fail(c, rc, "%s: %s", names[i], why);
        ret->out[i].data = t->buf->data;
        ret->out[i].t = *t;
        ret->out[i].elem = elem;
    }
    return 0;
}

#ifdef DASH_HAVE_CUDA

#include <cuda_runtime_api.h>

struct poison_ctx {
    unsigned char *data;
    cudaStream_t st;
};

static int poison_run(void *arg, const struct dash__run *r)
{
    const struct poison_ctx *x = arg;
    if (cudaMemset2DAsync(x->data + r->offset, r->pitch, 0xff, r->width, r->height, x->st) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return DASH_EIO;
    }
    return 0;
}

int dash__poison_outputs(const struct dash__poison *p, void *stream)
{
    int rc = 0;
    for (int i = 0; i < p->n; i++) {
        struct poison_ctx x = {p->out[i].data, (cudaStream_t)stream};
        if (dash__tensor_runs(&p->out[i].t, p->out[i].elem, poison_run, &x) != 0)
            rc = DASH_EIO;
    }
    return rc;
}

#endif
