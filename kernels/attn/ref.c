// SPDX-License-Identifier: BSD-3-Clause
/*
 * ref.c - the float64 reference. Deliberately the simplest correct code: one query row at
 * a time, the row's scores over its visible keys, no tiling, no online softmax; a packed
 * batch sequence by sequence, and the window and softcap from their definitions.
 */
#include "kernels/attn/ref.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double at(const struct attn_tensor *t, enum dtype_kind dt, int64_t b, int64_t s, int64_t h,
                 int64_t d)
{
    return dtype_load_f64(t->data, dt, b * t->stride[0] + s * t->stride[1] + h * t->stride[2] + d);
}

/* One sequence of the problem: where its rows are in the tensors' view (vb, q0 + i) and
 * (vb, k0 + j), and its lengths. */
struct seq {
    int64_t vb, q0, k0, sq, sk;
};

static struct seq seq_of(const struct attn_problem *p, int32_t b)
{
    int32_t q0, k0, sq, sk;
    attn_seq(p, b, &q0, &k0, &sq, &sk);
    struct seq s = {p->cu_seqlens_q ? 0 : b, q0, k0, sq, sk};
    return s;
}

/* The definition, straight from flash-attn's documentation: causal is right = 0, -1 is
 * unbounded, aligned to the bottom-right corner of the sequence's own (sq, sk) matrix.
 * Row i sees key j iff (left < 0 || j >= diag - left) && (right < 0 || j <= diag + right),
 * diag = i + sk - sq: the keys [*lo, *hi) (empty when *hi <= *lo). The loops below visit
 * only those: a masked key's terms were exact zeros (P = 0 times a finite value), so
 * leaving them out changes no sum, and a long windowed row costs its window, not its
 * length. */
static void visible_keys(const struct attn_problem *p, const struct seq *s, int64_t i, int64_t *lo, int64_t *hi)
{
    const int64_t left = p->window ? p->window_left : -1;
    const int64_t right = p->mask == SCHED_MASK_CAUSAL ? 0 : p->window ? p->window_right : -1;
    const int64_t diag = i + s->sk - s->sq;
    *lo = left < 0 || diag - left < 0 ? 0 : diag - left;
    *hi = right < 0 || diag + right + 1 > s->sk ? s->sk : diag + right + 1;
    if (*hi < *lo)
        *hi = *lo;
}

/* The score of (i, j) and, with a softcap, d(score)/d(scale q.k) in *ret_dcap (else 1). */
static double score(const struct attn_problem *p, double qk, double *ret_dcap)
{
    const double s = qk * (double)p->scale;
    if (p->softcap > 0) {
        const double t = tanh(s / (double)p->softcap);
        *ret_dcap = 1 - t * t;
        return (double)p->softcap * t;
    }
    *ret_dcap = 1;
    return s;
}

/* Softmax row of query i of sequence s, head h, into prob[j] (and the softcap's
 * derivative into dcap[j], if not NULL) for the visible keys j in [*lo, *hi), the only
 * ones its callers read; returns the log-sum-exp, or +inf when the row sees no key (then
 * *hi = *lo). */
static double softmax_row(const struct attn_problem *p, const struct attn_tensor *q,
                          const struct attn_tensor *k, const struct seq *sq, int64_t i,
                          int64_t h, double *prob, double *dcap, int64_t *lo, int64_t *hi)
{
    const int64_t hk = h / (p->heads_q / p->heads_kv);
    double mx = -INFINITY;
    visible_keys(p, sq, i, lo, hi);
    for (int64_t j = *lo; j < *hi; j++) {
        double s = 0, dc;
        for (int64_t d = 0; d < p->head_dim; d++)
            s += at(q, p->dtype, sq->vb, sq->q0 + i, h, d) * at(k, p->dtype, sq->vb, sq->k0 + j, hk, d);
        prob[j] = score(p, s, &dc);
        if (dcap)
            dcap[j] = dc;
        if (prob[j] > mx)
            mx = prob[j];
    }
    if (mx == -INFINITY) { /* no visible key (or -inf scores alone, from infinite inputs) */
        *hi = *lo;
        return INFINITY;
    }
    double sum = 0;
    for (int64_t j = *lo; j < *hi; j++) {
        prob[j] = exp(prob[j] - mx); /* every key here is visible */
        sum += prob[j];
    }
    for (int64_t j = *lo; j < *hi; j++)
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
    double *prob = malloc(sizeof(double) * (size_t)p->seqlen_k + 1);
    if (!prob)
        return -ENOMEM;
    const int64_t D = p->head_dim, G = p->heads_q / p->heads_kv;
    const int64_t Rq = attn_view_rows_q(p);
    for (int32_t b = 0; b < p->batch; b++) {
        const struct seq sq = seq_of(p, b);
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < sq.sq; i++) {
                int64_t lo, hi;
                double l = softmax_row(p, &q, &k, &sq, i, h, prob, NULL, &lo, &hi);
                const int64_t row = sq.q0 + i;
                if (lse)
                    lse[(sq.vb * p->heads_q + h) * Rq + row] = l;
                double *o = out + ((sq.vb * Rq + row) * p->heads_q + h) * D;
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = lo; j < hi; j++)
                        acc += prob[j] * at(&v, p->dtype, sq.vb, sq.k0 + j, h / G, d);
                    o[d] = acc;
                }
            }
    }
    free(prob);
    return 0;
}

/* The gradients; Dsum from the float64 O, or from *given (ref_backward_given_out). */
static int backward(const struct attn_problem *p, struct attn_tensor q, struct attn_tensor k,
                    struct attn_tensor v, const struct attn_tensor *given, struct attn_tensor dout,
                    double *dq, double *dk, double *dv)
{
    int rc = attn_check_problem(p);
    if (rc)
        return rc;
    if (!dq || !dk || !dv)
        return -EINVAL;
    const int64_t D = p->head_dim, G = p->heads_q / p->heads_kv, Sk = p->seqlen_k;
    const int64_t VB = attn_view_batch(p), Rq = attn_view_rows_q(p), Rk = attn_view_rows_k(p);
    double *prob = malloc(sizeof(double) * (size_t)Sk + 1);
    double *dcap = malloc(sizeof(double) * (size_t)Sk + 1);
    double *dp = malloc(sizeof(double) * (size_t)Sk + 1);
    double *o = malloc(sizeof(double) * (size_t)D);
    if (!prob || !dcap || !dp || !o) {
        free(prob);
        free(dcap);
        free(dp);
        free(o);
        return -ENOMEM;
    }
    memset(dq, 0, sizeof(double) * (size_t)(VB * Rq * p->heads_q * D));
    memset(dk, 0, sizeof(double) * (size_t)(VB * Rk * p->heads_kv * D));
    memset(dv, 0, sizeof(double) * (size_t)(VB * Rk * p->heads_kv * D));
    const double scale = p->scale;
    for (int32_t b = 0; b < p->batch; b++) {
        const struct seq sq = seq_of(p, b);
        const int64_t vb = sq.vb;
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < sq.sq; i++) {
                const int64_t hk = h / G, qi = sq.q0 + i;
                int64_t lo, hi;
                softmax_row(p, &q, &k, &sq, i, h, prob, dcap, &lo, &hi);
                /* O row (or the given one), dP row and Dsum = dO . O, all in double */
                double dsum = 0;
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = lo; j < hi; j++)
                        acc += prob[j] * at(&v, p->dtype, vb, sq.k0 + j, hk, d);
                    o[d] = given ? at(given, p->dtype, vb, qi, h, d) : acc;
                    dsum += o[d] * at(&dout, p->dtype, vb, qi, h, d);
                }
                for (int64_t j = lo; j < hi; j++) {
                    double acc = 0;
                    for (int64_t d = 0; d < D; d++)
                        acc += at(&dout, p->dtype, vb, qi, h, d) * at(&v, p->dtype, vb, sq.k0 + j, hk, d);
                    dp[j] = acc;
                }
                double *dqi = dq + ((vb * Rq + qi) * p->heads_q + h) * D;
                for (int64_t j = lo; j < hi; j++) {
                    if (prob[j] == 0)
                        continue;
                    /* d(loss)/d(score), then through the softcap to d/d(scale q.k) */
                    const double ds = prob[j] * (dp[j] - dsum) * dcap[j];
                    const int64_t kj = sq.k0 + j;
                    double *dkj = dk + ((vb * Rk + kj) * p->heads_kv + hk) * D;
                    double *dvj = dv + ((vb * Rk + kj) * p->heads_kv + hk) * D;
                    for (int64_t d = 0; d < D; d++) {
                        dqi[d] += scale * ds * at(&k, p->dtype, vb, kj, hk, d);
                        dkj[d] += scale * ds * at(&q, p->dtype, vb, qi, h, d);
                        dvj[d] += prob[j] * at(&dout, p->dtype, vb, qi, h, d);
                    }
                }
            }
    }
    free(prob);
    free(dcap);
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

int ref_backward(const struct attn_problem *p, struct attn_tensor q, struct attn_tensor k,
                 struct attn_tensor v, struct attn_tensor dout, double *dq, double *dk,
                 double *dv)
{
    return backward(p, q, k, v, NULL, dout, dq, dk, dv);
}

int ref_backward_given_out(const struct attn_problem *p, struct attn_tensor q,
                           struct attn_tensor k, struct attn_tensor v, struct attn_tensor out,
                           struct attn_tensor dout, double *dq, double *dk, double *dv)
{
    if (!out.data)
        return -EINVAL;
    return backward(p, q, k, v, &out, dout, dq, dk, dv);
}
