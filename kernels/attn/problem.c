// SPDX-License-Identifier: BSD-3-Clause
/*
 * problem.c - see problem.h.
 */
#include "kernels/attn/problem.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Write the reason and return the code. */
__attribute__((format(printf, 4, 5))) static int why_(char *why, size_t whylen, int code,
                                                      const char *fmt, ...)
{
    if (why && whylen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* One side's offsets: cu[0] == 0, never decreasing, each step at most max_len, the last
 * equal to total. */
static int explain_offsets(const int32_t *cu, const char *name, int32_t batch, int32_t total,
                           int32_t max_len, const char *max_name, char *why, size_t whylen)
{
    if (!cu)
        return why_(why, whylen, -EINVAL, "%s is missing (both sides of a packed batch need offsets)",
                    name);
    if (cu[0] != 0)
        return why_(why, whylen, -EINVAL, "%s[0]=%d, the offsets must start at 0", name, cu[0]);
    for (int32_t b = 0; b < batch; b++) {
        if (cu[b + 1] < cu[b])
            return why_(why, whylen, -EINVAL, "%s[%d]=%d is below %s[%d]=%d (offsets must not decrease)",
                        name, b + 1, cu[b + 1], name, b, cu[b]);
        if ((int64_t)cu[b + 1] - cu[b] > max_len)
            return why_(why, whylen, -EINVAL,
                        "sequence %d has %lld rows (%s[%d]-%s[%d]), more than %s=%d", b,
                        (long long)cu[b + 1] - cu[b], name, b + 1, name, b, max_name, max_len);
    }
    if (cu[batch] != total)
        return why_(why, whylen, -EINVAL, "%s[%d]=%d, the last offset must be the token count %d",
                    name, batch, cu[batch], total);
    return 0;
}

int attn_explain_problem(const struct attn_problem *p, char *why, size_t whylen)
{
    if (why && whylen > 0)
        why[0] = '\0';
    if (!p)
        return -EINVAL;
    if (p->batch < 1 || p->seqlen_q < 1 || p->seqlen_k < 1 || p->heads_q < 1 || p->heads_kv < 1 ||
        p->head_dim < 1)
        return why_(why, whylen, -EINVAL,
                    "sizes must be >= 1 (batch %d, seqlen_q %d, seqlen_k %d, heads %d/%d, head dim %d)",
                    p->batch, p->seqlen_q, p->seqlen_k, p->heads_q, p->heads_kv, p->head_dim);
    if (p->heads_q % p->heads_kv != 0)
        return why_(why, whylen, -EINVAL, "kv heads %d do not divide q heads %d", p->heads_kv,
                    p->heads_q);
    if ((int)p->mask < 0 || p->mask >= SCHED_MASK_COUNT)
        return why_(why, whylen, -EINVAL, "mask %d is unknown", (int)p->mask);
    if (!(p->scale > 0) || !isfinite(p->scale))
        return why_(why, whylen, -EINVAL, "scale %g must be finite and > 0", (double)p->scale);
    if (p->window && (p->window_left < -1 || p->window_right < -1))
        return why_(why, whylen, -EINVAL,
                    "window (%d, %d): each side must be >= 0, or -1 for unbounded",
                    p->window_left, p->window_right);
    if (!(p->softcap >= 0) || !isfinite(p->softcap))
        return why_(why, whylen, -EINVAL, "softcap %g must be finite and >= 0 (0: off)",
                    (double)p->softcap);
    /* the engines and kernels bend scores by scale / softcap in float: an infinite ratio
     * (a subnormal softcap) would make 0 * inf = NaN of every zero score */
    if (p->softcap > 0 && !isfinite(p->scale / p->softcap))
        return why_(why, whylen, -EINVAL,
                    "softcap %g is too small for scale %g: scale / softcap must be a finite float",
                    (double)p->softcap, (double)p->scale);
    if (p->cu_seqlens_q || p->cu_seqlens_k) {
        int rc;
        if (p->batch > ATTN_VARLEN_MAX_BATCH)
            return why_(why, whylen, -EINVAL, "%d sequences, at most %d may be packed", p->batch,
                        ATTN_VARLEN_MAX_BATCH);
        if (p->total_q < 0 || p->total_k < 0)
            return why_(why, whylen, -EINVAL, "token counts %d, %d must be >= 0", p->total_q,
                        p->total_k);
        if ((rc = explain_offsets(p->cu_seqlens_q, "cu_seqlens_q", p->batch, p->total_q,
                                  p->seqlen_q, "max_seqlen_q", why, whylen)) ||
            (rc = explain_offsets(p->cu_seqlens_k, "cu_seqlens_k", p->batch, p->total_k,
                                  p->seqlen_k, "max_seqlen_k", why, whylen)))
            return rc;
    }
    if ((int)p->dtype < 0 || p->dtype >= DTYPE_COUNT)
        return why_(why, whylen, -ENOTSUP, "dtype %d is unknown", (int)p->dtype);
    return 0;
}

int attn_check_problem(const struct attn_problem *p)
{
    return attn_explain_problem(p, NULL, 0);
}

void attn_window_of(const struct attn_problem *p, int32_t sq, int32_t sk, int32_t *ret_left,
                    int32_t *ret_right)
{
    int32_t l = p->window ? p->window_left : -1, r = p->window ? p->window_right : -1;
    if (p->mask == SCHED_MASK_CAUSAL)
        r = 0;
    /* Query sq-1 sees from key sk-1-l: l >= sk-1 reaches key 0 for every query. Query 0
     * sees up to key sk-sq+r: r >= sq-1 reaches key sk-1 for every query (right 0 stays
     * the causal mask, also for one query). */
    if (l >= sk - 1)
        l = -1;
    if (r > 0 && r >= sq - 1)
        r = -1;
    *ret_left = l;
    *ret_right = r;
}

int attn_window_bands(const struct attn_problem *p, int32_t sq, int32_t sk)
{
    if (!p->window)
        return 0;
    int32_t l, r;
    attn_window_of(p, sq, sk, &l, &r);
    return !(l < 0 && r <= 0);
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

void attn_sched_shape_of(const struct attn_problem *p, const struct attn_config *c, int32_t b,
                         struct sched_shape *ret_shape)
{
    int32_t q0, k0, sq, sk;
    attn_seq(p, b, &q0, &k0, &sq, &sk);
    /* Field by field after a memset, so padding bytes are zero. */
    memset(ret_shape, 0, sizeof *ret_shape);
    ret_shape->batch = p->cu_seqlens_q ? 1 : p->batch;
    ret_shape->heads = p->heads_q;
    ret_shape->seqlen_q = sq;
    ret_shape->seqlen_k = sk;
    ret_shape->block_m = c->block_m;
    ret_shape->block_n = c->block_n;
    ret_shape->mask = p->mask;
    if (p->window) {
        ret_shape->window = 1;
        ret_shape->window_left = p->window_left;
        ret_shape->window_right = p->window_right;
    }
}

void attn_sched_shape(const struct attn_problem *p, const struct attn_config *c,
                      struct sched_shape *ret_shape)
{
    memset(ret_shape, 0, sizeof *ret_shape);
    ret_shape->batch = p->batch;
    ret_shape->heads = p->heads_q;
    ret_shape->seqlen_q = p->seqlen_q;
    ret_shape->seqlen_k = p->seqlen_k;
    ret_shape->block_m = c->block_m;
    ret_shape->block_n = c->block_n;
    ret_shape->mask = p->mask;
    if (p->window) {
        ret_shape->window = 1;
        ret_shape->window_left = p->window_left;
        ret_shape->window_right = p->window_right;
    }
}

int attn_geometry(const struct attn_problem *p, const struct attn_config *c, struct sched *ret_geo)
{
    struct sched_shape sh;
    attn_sched_shape(p, c, &sh);
    int rc = sched_init(ret_geo, c->sched == SCHED_AUTO ? SCHED_ASCENDING : c->sched, &sh, c->w);
    if (rc)
        return rc;
    if ((int64_t)p->seqlen_q * p->head_dim > INT32_MAX || (int64_t)p->seqlen_k * p->head_dim > INT32_MAX ||
        (int64_t)attn_view_rows_q(p) * p->head_dim > INT32_MAX ||
        (int64_t)attn_view_rows_k(p) * p->head_dim > INT32_MAX)
        return -EOVERFLOW;
    return 0;
}
