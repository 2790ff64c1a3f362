// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_bufs.c - the GPU attention suites' fixture (gpu_bufs.h).
 */
#include "gpu_bufs.h"

#include "gpu_check.h"
#include "kernels/cuda/attn_cuda.h"

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

void *gpu_dev_alloc(size_t bytes)
{
    void *ptr = NULL;
    CUDA_OK(cudaMalloc(&ptr, bytes ? bytes : 16));
    return ptr;
}

void gpu_bufs_init(struct gpu_bufs *a, const struct attn_problem *p, const int32_t *lq, const int32_t *lk,
                   struct tu_rng *r)
{
    memset(a, 0, sizeof *a);
    a->p = *p;
    if (lq) {
        CU_ASSERT_FATAL(p->batch >= 1 && p->batch <= GPU_BUFS_MAXB);
        int32_t mq = 1, mk = 1;
        for (int32_t b = 0; b < p->batch; b++) {
            a->cu[0][b + 1] = a->cu[0][b] + lq[b];
            a->cu[1][b + 1] = a->cu[1][b] + lk[b];
            mq = lq[b] > mq ? lq[b] : mq;
            mk = lk[b] > mk ? lk[b] : mk;
        }
        a->p.cu_seqlens_q = a->cu[0];
        a->p.cu_seqlens_k = a->cu[1];
        a->p.total_q = a->cu[0][p->batch];
        a->p.total_k = a->cu[1][p->batch];
        a->p.seqlen_q = mq;
        a->p.seqlen_k = mk;
    }
    a->vb = attn_view_batch(&a->p);
    a->rq = attn_view_rows_q(&a->p);
    a->rk = attn_view_rows_k(&a->p);
    a->nq = (int64_t)a->vb * a->rq * p->heads_q * p->head_dim;
    a->nk = (int64_t)a->vb * a->rk * p->heads_kv * p->head_dim;
    a->nlse = (int64_t)a->vb * p->heads_q * a->rq;
    a->es = (size_t)dtype_size(p->dtype);
    const size_t qb = a->es * (size_t)a->nq, kb = a->es * (size_t)a->nk, lb = sizeof(float) * (size_t)a->nlse;
    /* one byte more: an empty side still gets a pointer of its own */
    a->q = malloc(qb + 1);
    a->k = malloc(kb + 1);
    a->v = malloc(kb + 1);
    a->dout = malloc(qb + 1);
    a->out = malloc(qb + 1);
    a->dq = malloc(qb + 1);
    a->dk = malloc(kb + 1);
    a->dv = malloc(kb + 1);
    a->lse = malloc(lb + 4);
    CU_ASSERT_FATAL(a->q && a->k && a->v && a->dout && a->out && a->dq && a->dk && a->dv && a->lse);
    if (a->nq) {
        tu_fill(a->q, p->dtype, a->nq, r, 1.0);
        tu_fill(a->dout, p->dtype, a->nq, r, 1.0);
    }
    if (a->nk) {
        tu_fill(a->k, p->dtype, a->nk, r, 1.0);
        tu_fill(a->v, p->dtype, a->nk, r, 1.0);
    }
    a->d_q = gpu_dev_alloc(qb);
    a->d_k = gpu_dev_alloc(kb);
    a->d_v = gpu_dev_alloc(kb);
    a->d_dout = gpu_dev_alloc(qb);
    a->d_out = gpu_dev_alloc(qb);
    a->d_dq = gpu_dev_alloc(qb);
    a->d_dk = gpu_dev_alloc(kb);
    a->d_dv = gpu_dev_alloc(kb);
    a->d_lse = gpu_dev_alloc(lb);
    CUDA_OK(cudaMemcpy(a->d_q, a->q, qb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(a->d_k, a->k, kb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(a->d_v, a->v, kb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(a->d_dout, a->dout, qb, cudaMemcpyHostToDevice));
    /* A cudaMemcpy from pageable memory may return before its last DMA has landed, and it
     * runs on the legacy stream, which the backend's non-blocking stream is not ordered
     * with: the kernels must not start on inputs still in flight. */
    CUDA_OK(cudaDeviceSynchronize());
}

void gpu_bufs_free(struct gpu_bufs *a)
{
    void *host[] = {a->q, a->k, a->v, a->dout, a->out, a->dq, a->dk, a->dv, a->lse};
    void *dev[] = {a->d_q, a->d_k, a->d_v, a->d_dout, a->d_out, a->d_dq, a->d_dk, a->d_dv, a->d_lse};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        CU_ASSERT(gpu_cuda_ok(cudaFree(dev[i]), "cudaFree", __LINE__));
}

/* The host outputs of one kind: the forward's (n 2) or the backward's (n 3). */
static int outputs_of(const struct gpu_bufs *a, int n, const void *data[3], size_t bytes[3])
{
    const size_t qb = a->es * (size_t)a->nq, kb = a->es * (size_t)a->nk;
    if (n == 2) {
        data[0] = a->out, bytes[0] = qb;
        data[1] = a->lse, bytes[1] = sizeof(float) * (size_t)a->nlse;
    } else {
        data[0] = a->dq, bytes[0] = qb;
        data[1] = a->dk, bytes[1] = kb;
        data[2] = a->dv, bytes[2] = kb;
    }
    return n;
}

static void copy_take(struct gpu_copy *c, const struct gpu_bufs *a, int n)
{
    const void *src[3];
    memset(c, 0, sizeof *c);
    c->n = outputs_of(a, n, src, c->bytes);
    for (int i = 0; i < c->n; i++) {
        c->data[i] = malloc(c->bytes[i] + 1); /* one byte more: an empty side too */
        CU_ASSERT_FATAL(c->data[i] != NULL);
        memcpy(c->data[i], src[i], c->bytes[i]);
    }
}

void gpu_copy_fwd(struct gpu_copy *c, const struct gpu_bufs *a)
{
    copy_take(c, a, 2);
}

void gpu_copy_bwd(struct gpu_copy *c, const struct gpu_bufs *a)
{
    copy_take(c, a, 3);
}

int gpu_copy_equal(const struct gpu_copy *c, const struct gpu_bufs *a)
{
    const void *now[3];
    size_t bytes[3];
    outputs_of(a, c->n, now, bytes);
    for (int i = 0; i < c->n; i++)
        if (bytes[i] != c->bytes[i] || memcmp(c->data[i], now[i], bytes[i]) != 0)
            return 0;
    return 1;
}

void gpu_copy_free(struct gpu_copy *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->data[i]);
    memset(c, 0, sizeof *c);
}

struct attn_tensor gpu_bufs_tq(const struct gpu_bufs *a, void *data)
{
    return attn_dense(data, a->rq, a->p.heads_q, a->p.head_dim);
}

struct attn_tensor gpu_bufs_tk(const struct gpu_bufs *a, void *data)
{
    return attn_dense(data, a->rk, a->p.heads_kv, a->p.head_dim);
}

int gpu_bufs_forward(struct cuattn *ca, struct gpu_bufs *a, const struct attn_config *cfg,
                     struct attn_config *ret_cfg)
{
    const size_t qb = a->es * (size_t)a->nq, lb = sizeof(float) * (size_t)a->nlse;
    cudaStream_t st = (cudaStream_t)cuattn_stream(ca);
    CUDA_OK(cudaMemsetAsync(a->d_out, 0xff, qb, st));
    CUDA_OK(cudaMemsetAsync(a->d_lse, 0xff, lb, st));
    int rc = cuattn_forward(ca, &a->p, cfg, gpu_bufs_tq(a, a->d_out), a->d_lse, gpu_bufs_tq(a, a->d_q),
                            gpu_bufs_tk(a, a->d_k), gpu_bufs_tk(a, a->d_v), ret_cfg);
    if (rc)
        return rc;
    CUDA_OK(cudaMemcpy(a->out, a->d_out, qb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(a->lse, a->d_lse, lb, cudaMemcpyDeviceToHost));
    return 0;
}

void gpu_bufs_poison_grads(struct cuattn *ca, struct gpu_bufs *a)
{
    const size_t qb = a->es * (size_t)a->nq, kb = a->es * (size_t)a->nk;
    cudaStream_t st = (cudaStream_t)cuattn_stream(ca);
    CUDA_OK(cudaMemsetAsync(a->d_dq, 0xff, qb, st));
    CUDA_OK(cudaMemsetAsync(a->d_dk, 0xff, kb, st));
    CUDA_OK(cudaMemsetAsync(a->d_dv, 0xff, kb, st));
}

int gpu_bufs_backward_call(struct cuattn *ca, struct gpu_bufs *a, const struct attn_config *cfg, int32_t grid,
                           struct attn_config *ret_cfg)
{
    return cuattn_backward(ca, &a->p, cfg, grid, gpu_bufs_tq(a, a->d_dq), gpu_bufs_tk(a, a->d_dk),
                           gpu_bufs_tk(a, a->d_dv), gpu_bufs_tq(a, a->d_q), gpu_bufs_tk(a, a->d_k),
                           gpu_bufs_tk(a, a->d_v), gpu_bufs_tq(a, a->d_out), a->d_lse, gpu_bufs_tq(a, a->d_dout),
                           ret_cfg);
}

void gpu_bufs_grads_back(struct gpu_bufs *a)
{
    const size_t qb = a->es * (size_t)a->nq, kb = a->es * (size_t)a->nk;
    CUDA_OK(cudaMemcpy(a->dq, a->d_dq, qb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(a->dk, a->d_dk, kb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(a->dv, a->d_dv, kb, cudaMemcpyDeviceToHost));
}

int gpu_bufs_backward(struct cuattn *ca, struct gpu_bufs *a, const struct attn_config *cfg, int32_t grid,
                      struct attn_config *ret_cfg)
{
    gpu_bufs_poison_grads(ca, a);
    const int rc = gpu_bufs_backward_call(ca, a, cfg, grid, ret_cfg);
    if (rc)
        return rc;
    gpu_bufs_grads_back(a);
    return 0;
}
