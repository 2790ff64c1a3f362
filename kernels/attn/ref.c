// SPDX-License-Identifier: BSD-3-Clause
/*
 * ref.c - the float64 reference. Deliberately the simplest correct code: one query row at
 * a time, the full row of scores, no tiling, no online softmax.
 */
#include "kernels/attn/ref.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double at(const struct attn_tensor *t, enum dtype_kind dt, int64_t b, int64_t s, int64_t h,
                 int64_t d)
{
    return dtype_load(t->data, dt, b * t->stride[0] + s * t->stride[1] + h * t->stride[2] + d);
}

static int visible(const struct attn_problem *p, int64_t i, int64_t j)
{
    return p->mask == SCHED_MASK_FULL || j <= i + p->seqlen_k - p->seqlen_q;
}

/* Softmax row of query (b, i, h) into prob[seqlen_k]; returns the log-sum-exp, or +inf
 * when the row sees no key (prob all zero). */
static double softmax_row(const struct attn_problem *p, const struct attn_tensor *q,
                          const struct attn_tensor *k, int64_t b, int64_t i, int64_t h,
                          double *prob)
{
    const int64_t hk = h / (p->heads_q / p->heads_kv);
    double mx = -INFINITY;
    for (int64_t j = 0; j < p->seqlen_k; j++) {
        if (!visible(p, i, j)) {
            prob[j] = -INFINITY;
            continue;
        }
        double s = 0;
        for (int64_t d = 0; d < p->head_dim; d++)
            s += at(q, p->dtype, b, i, h, d) * at(k, p->dtype, b, j, hk, d);
        prob[j] = s * (double)p->scale;
        if (prob[j] > mx)
            mx = prob[j];
    }
    if (mx == -INFINITY) {
        memset(prob, 0, sizeof(double) * (size_t)p->seqlen_k);
        return INFINITY;
    }
    double sum = 0;
    for (int64_t j = 0; j < p->seqlen_k; j++) {
        prob[j] = prob[j] == -INFINITY ? 0 : exp(prob[j] - mx);
        sum += prob[j];
    }
    for (int64_t j = 0; j < p->seqlen_k; j++)
        prob[j] /= sum;
    return mx + log(sum);
}

int ref_forward(const struct attn_problem *p, struct attn_tensor q, struct attn_tensor k,
                struct attn_tensor v, double *out, double *lse)
{
    int rc = attn_check_problem(p);
    if (rc)
        return rc;
    if (!out)
        return -EINVAL;
    double *prob = malloc(sizeof(double) * (size_t)p->seqlen_k);
    if (!prob)
        return -ENOMEM;
    const int64_t D = p->head_dim, G = p->heads_q / p->heads_kv;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < p->seqlen_q; i++) {
                double l = softmax_row(p, &q, &k, b, i, h, prob);
                if (lse)
                    lse[(b * p->heads_q + h) * p->seqlen_q + i] = l;
                double *o = out + ((b * p->seqlen_q + i) * p->heads_q + h) * D;
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < p->seqlen_k; j++)
                        acc += prob[j] * at(&v, p->dtype, b, j, h / G, d);
                    o[d] = acc;
                }
            }
    free(prob);
    return 0;
}

int ref_backward(const struct attn_problem *p, struct attn_tensor q, struct attn_tensor k,
                 struct attn_tensor v, struct attn_tensor dout, double *dq, double *dk,
                 double *dv)
{
    int rc = attn_check_problem(p);
    if (rc)
        return rc;
    if (!dq || !dk || !dv)
        return -EINVAL;
    const int64_t D = p->head_dim, G = p->heads_q / p->heads_kv, Sk = p->seqlen_k;
    double *prob = malloc(sizeof(double) * (size_t)Sk);
    double *dp = malloc(sizeof(double) * (size_t)Sk);
    double *o = malloc(sizeof(double) * (size_t)D);
    if (!prob || !dp || !o) {
        free(prob);
        free(dp);
        free(o);
        return -ENOMEM;
    }
    memset(dq, 0, sizeof(double) * (size_t)(p->batch * p->seqlen_q * p->heads_q * D));
    memset(dk, 0, sizeof(double) * (size_t)(p->batch * Sk * p->heads_kv * D));
    memset(dv, 0, sizeof(double) * (size_t)(p->batch * Sk * p->heads_kv * D));
    const double scale = p->scale;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < p->seqlen_q; i++) {
                const int64_t hk = h / G;
                softmax_row(p, &q, &k, b, i, h, prob);
                /* O row, dP row and Dsum = dO . O, all in double */
                double dsum = 0;
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < Sk; j++)
                        acc += prob[j] * at(&v, p->dtype, b, j, hk, d);
                    o[d] = acc;
                    dsum += acc * at(&dout, p->dtype, b, i, h, d);
                }
                for (int64_t j = 0; j < Sk; j++) {
                    double acc = 0;
                    for (int64_t d = 0; d < D; d++)
                        acc += at(&dout, p->dtype, b, i, h, d) * at(&v, p->dtype, b, j, hk, d);
                    dp[j] = acc;
                }
                double *dqi = dq + ((b * p->seqlen_q + i) * p->heads_q + h) * D;
                for (int64_t j = 0; j < Sk; j++) {
                    if (prob[j] == 0)
                        continue;
                    const double ds = prob[j] * (dp[j] - dsum);
                    double *dkj = dk + ((b * Sk + j) * p->heads_kv + hk) * D;
                    double *dvj = dv + ((b * Sk + j) * p->heads_kv + hk) * D;
                    for (int64_t d = 0; d < D; d++) {
                        dqi[d] += scale * ds * at(&k, p->dtype, b, j, hk, d);
                        dkj[d] += scale * ds * at(&q, p->dtype, b, i, h, d);
                        dvj[d] += prob[j] * at(&dout, p->dtype, b, i, h, d);
                    }
                }
            }
    free(prob);
    free(dp);
    free(o);
    return 0;
}

double ref_rel_error(const double *a, const double *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    if (den == 0)
        return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}
