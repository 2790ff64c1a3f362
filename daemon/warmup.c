// SPDX-License-Identifier: BSD-3-Clause
/*
 * warmup.c - the warm-up ops of warmup.h: bf16, head dims 64 and 128, full and causal,
 * forward then backward, on dense host tensors of one tile's size (backend_op.host: the
 * CUDA backend stages them through the GPU, so its kernels run). The inputs are small
 * numbers, so nothing overflows; the results are thrown away.
 */
#include "warmup.h"

#include "kernels/attn/dtype.h"
#include "proto/errors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define WARMUP_SEQLEN 64

static void dense(struct attn_tensor *t, void *data, int32_t seqlen, int32_t heads, int32_t dim)
{
    t->data = data;
    t->stride[3] = 1;
    t->stride[2] = dim;
    t->stride[1] = (int64_t)heads * dim;
    t->stride[0] = (int64_t)seqlen * heads * dim;
}

static int run_one(struct backend *b, int32_t head_dim, enum sched_mask mask, char *msg,
                   size_t msglen)
{
    struct attn_problem p = {.batch = 1, .seqlen_q = WARMUP_SEQLEN, .seqlen_k = WARMUP_SEQLEN,
                             .heads_q = 1, .heads_kv = 1, .head_dim = head_dim,
                             .dtype = DTYPE_BF16, .mask = mask,
                             .scale = 1.0f / sqrtf((float)head_dim)};
    struct attn_config cfg = {.sched = SCHED_AUTO}, used;
    size_t n = (size_t)WARMUP_SEQLEN * (size_t)head_dim, bytes = n * 2;
    enum { Q, K, V, O, DO, DQ, DK, DV, NT };
    unsigned char *mem = calloc(NT, bytes);
    float *lse = calloc(WARMUP_SEQLEN, sizeof *lse);
    int rc = DASH_ENOMEM;
    if (!mem || !lse) {
        snprintf(msg, msglen, "out of memory for the warm-up");
        goto free_mem;
    }
    for (size_t i = 0; i < n; i++)
        for (int t = Q; t <= DO; t++)
            dtype_store(mem + (size_t)t * bytes, DTYPE_BF16, (int64_t)i,
                        (float)((i * 7 + (size_t)t * 3) % 17) / 17.0f - 0.5f);
    struct backend_op op = {.host = 1, .prob = &p, .cfg = &cfg, .lse = lse};
    struct attn_tensor *ts[NT] = {&op.q, &op.k, &op.v, &op.out, &op.dout, &op.dq, &op.dk, &op.dv};
    for (int t = 0; t < NT; t++)
        dense(ts[t], mem + (size_t)t * bytes, WARMUP_SEQLEN, 1, head_dim);
    if ((rc = b->forward(b->impl, &op, msg, msglen, &used)) == 0)
        rc = b->backward(b->impl, &op, msg, msglen, &used);
free_mem:
    free(mem);
    free(lse);
    return rc;
}

int warmup_run(struct backend *b, char *msg, size_t msglen)
{
    static const int32_t dims[] = {64, 128};
    int ran = 0;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        for (int m = SCHED_MASK_FULL; m < SCHED_MASK_COUNT; m++) {
            char why[256] = "";
            int rc = run_one(b, dims[d], (enum sched_mask)m, why, sizeof why);
            if (rc < 0) {
                snprintf(msg, msglen, "head dim %d, %s mask: %s", dims[d],
                         m == SCHED_MASK_CAUSAL ? "causal" : "full",
                         why[0] ? why : dash_strerror(rc));
                return rc;
            }
            ran += 2;
        }
    }
    return ran;
}
