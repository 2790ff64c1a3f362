// SPDX-License-Identifier: BSD-3-Clause
/*
 * problem.c - see problem.h.
 */
#include "kernels/attn/problem.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int attn_check_problem(const struct attn_problem *p)
{
    if (!p)
        return -EINVAL;
    if (p->batch < 1 || p->seqlen_q < 1 || p->seqlen_k < 1 || p->heads_q < 1 || p->heads_kv < 1 ||
        p->heads_q % p->heads_kv != 0 || p->head_dim < 1)
        return -EINVAL;
    if ((int)p->mask < 0 || p->mask >= SCHED_MASK_COUNT)
        return -EINVAL;
    if (!(p->scale > 0) || !isfinite(p->scale))
        return -EINVAL;
    if ((int)p->dtype < 0 || p->dtype >= DTYPE_COUNT)
        return -ENOTSUP;
    return 0;
}

struct dim {
    int64_t size, stride;
};

static int cmp_dim(const void *a, const void *b)
{
    const struct dim *x = a, *y = b;
    return (x->stride > y->stride) - (x->stride < y->stride);
}

int attn_check_tensor(const struct attn_tensor *t, int32_t batch, int32_t seqlen, int32_t heads,
                      int32_t head_dim, int output)
{
    if (!t->data || t->stride[3] != 1)
        return -EINVAL;
    struct dim d[4] = {{batch, t->stride[0]}, {seqlen, t->stride[1]}, {heads, t->stride[2]},
                       {head_dim, 1}};
    /* The farthest element must be addressable: sum of (size-1)*stride without overflow. */
    int64_t reach = 0;
    for (int i = 0; i < 4; i++) {
        if (d[i].stride < 0)
            return -EINVAL;
        if (d[i].size > 1 && d[i].stride > (INT64_MAX / 2) / (d[i].size - 1))
            return -EINVAL;
        reach += (d[i].size - 1) * d[i].stride;
        if (reach > INT64_MAX / 2)
            return -EINVAL;
    }
    if (!output)
        return 0;
    /* No two elements may share an address: with dims sorted by stride, each stride must
     * step over the whole extent of the dims below it. */
    qsort(d, 4, sizeof d[0], cmp_dim);
    int64_t extent = 1;
    for (int i = 0; i < 4; i++) {
        if (d[i].size == 1)
            continue;
        if (d[i].stride < extent)
            return -EINVAL;
        extent = d[i].stride * d[i].size;
    }
    return 0;
}

void attn_sched_shape(const struct attn_problem *p, const struct attn_config *c,
                      struct sched_shape *ret_shape)
{
    /* Field by field after a memset, so padding bytes are zero. */
    memset(ret_shape, 0, sizeof *ret_shape);
    ret_shape->batch = p->batch;
    ret_shape->heads = p->heads_q;
    ret_shape->seqlen_q = p->seqlen_q;
    ret_shape->seqlen_k = p->seqlen_k;
    ret_shape->block_m = c->block_m;
    ret_shape->block_n = c->block_n;
    ret_shape->mask = p->mask;
}

int attn_geometry(const struct attn_problem *p, const struct attn_config *c, struct sched *ret_geo)
{
    struct sched_shape sh;
    attn_sched_shape(p, c, &sh);
    int rc = sched_init(ret_geo, c->sched == SCHED_AUTO ? SCHED_ASCENDING : c->sched, &sh, c->w);
    if (rc)
        return rc;
    if ((int64_t)p->seqlen_q * p->head_dim > INT32_MAX || (int64_t)p->seqlen_k * p->head_dim > INT32_MAX)
        return -EOVERFLOW;
    return 0;
}
