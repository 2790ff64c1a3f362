// SPDX-License-Identifier: BSD-3-Clause
/*
 * engine_f64.c - the CPU engine's float64 forward and backward, computed in double.
 *
 * float64 is there to check gradients (torch.autograd.gradcheck compares with finite
 * differences, which fp32 arithmetic cannot pass), not for speed, so the passes are the
 * textbook ones, each output element owned by one task:
 *
 *   forward, one task per query row (b, i, h): the row of scores over the visible keys,
 *            m = max, l = sum e^(s - m), O = sum e^(s - m) v / l, LSE = m + log l (stored
 *            as float, the protocol's lse).
 *   backward 1, one task per query row: the row's softmax again (in double: the float lse
 *            is not precise enough for double gradients), Dsum = dO . O (O as given),
 *            dS_j = P_j (dO . v_j - Dsum), dQ = scale sum_j dS_j k_j; the row's LSE (double)
 *            and Dsum are kept for step 2.
 *   backward 2, one task per key row (b, j, hk): over the group's query heads in ascending
 *            order, then the query rows that see key j in ascending order,
 *            P = e^(scale q.k_j - LSE), dV_j += P dO_i, dK_j += scale P (dO_i . v_j - Dsum) q_i.
 *
 * Every sum runs in a fixed order inside one task, so the bits depend on the inputs only:
 * not on the thread count, the schedule or the tile sizes (which the caller still resolves
 * and reports). Masks, GQA and rows that see no key (O = 0, LSE = +inf, dQ = 0) as in
 * engine.h.
 */
#include "kernels/cpu/engine_int.h"

#include <math.h>
#include <string.h>

struct f64op {
    const struct attn_problem *p;
    struct attn_tensor q, k, v, out, dout, dq, dk, dv;
    float *lse_out;       /* forward: (bh, seqlen_q) */
    double *lse, *dsum;   /* backward: (bh, seqlen_q), from step 1 for step 2 */
    double *thread_mem;   /* per thread: seqlen_k doubles */
    int64_t per_thread;
    int32_t group;
};

static inline const double *row(const struct attn_tensor *t, int64_t b, int64_t s, int64_t h)
{
    return (const double *)t->data + eng__row(t, b, s, h);
}

static inline double dot(const double *a, const double *b, int32_t n)
{
    double s = 0;
    for (int32_t d = 0; d < n; d++)
        s += a[d] * b[d];
    return s;
}

/* Keys 0..n-1 are visible to query row i (n may be 0). */
static inline int64_t visible_keys(const struct attn_problem *p, int64_t i)
{
    if (p->mask != SCHED_MASK_CAUSAL)
        return p->seqlen_k;
    int64_t n = i + (int64_t)p->seqlen_k - p->seqlen_q + 1;
    return n < 0 ? 0 : n > p->seqlen_k ? p->seqlen_k : n;
}

/* The probabilities of row (b, i, h) into prob[0..n) (n visible keys); returns the
 * log-sum-exp, +inf when the row sees no key. */
static double softmax_row(const struct f64op *o, int64_t b, int64_t i, int64_t h, int64_t n,
                          double *prob)
{
    const struct attn_problem *p = o->p;
    const int32_t D = p->head_dim;
    const double *qi = row(&o->q, b, i, h);
    const int64_t hk = h / o->group;
    double mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        prob[j] = dot(qi, row(&o->k, b, j, hk), D) * (double)p->scale;
        mx = prob[j] > mx ? prob[j] : mx;
    }
    if (n == 0)
        return INFINITY;
    double sum = 0;
    for (int64_t j = 0; j < n; j++) {
        prob[j] = exp(prob[j] - mx);
        sum += prob[j];
    }
    for (int64_t j = 0; j < n; j++)
        prob[j] /= sum;
    return mx + log(sum);
}

static void fwd_row(void *arg, int64_t task, int32_t thread)
{
    const struct f64op *o = arg;
    const struct attn_problem *p = o->p;
    const int32_t D = p->head_dim;
    const int64_t i = task % p->seqlen_q, bh = task / p->seqlen_q;
    const int64_t b = bh / p->heads_q, h = bh % p->heads_q, hk = h / o->group;
    double *prob = o->thread_mem + thread * o->per_thread;
    const int64_t n = visible_keys(p, i);
    const double l = softmax_row(o, b, i, h, n, prob);
    double *out = (double *)o->out.data + eng__row(&o->out, b, i, h);
    for (int32_t d = 0; d < D; d++) {
        double acc = 0;
        for (int64_t j = 0; j < n; j++)
            acc += prob[j] * row(&o->v, b, j, hk)[d];
        out[d] = acc;
    }
    o->lse_out[task] = (float)l;
}

int eng__forward_f64(struct eng *e, const struct attn_problem *p, struct attn_tensor out,
                     float *lse, struct attn_tensor q, struct attn_tensor k, struct attn_tensor v)
{
    struct f64op o = {.p = p, .q = q, .k = k, .v = v, .out = out, .lse_out = lse,
                      .group = p->heads_q / p->heads_kv, .per_thread = p->seqlen_k};
    o.thread_mem = (double *)eng__arena(e, sizeof(double) * (size_t)o.per_thread *
                                               (size_t)eng_threads(e));
    if (!o.thread_mem)
        return -ENOMEM;
    eng__op_begin(e);
    eng__for_each(e, (int64_t)p->batch * p->heads_q * p->seqlen_q, fwd_row, &o);
    return eng__op_end(e);
}

static void bwd_query_row(void *arg, int64_t task, int32_t thread)
{
    const struct f64op *o = arg;
    const struct attn_problem *p = o->p;
    const int32_t D = p->head_dim;
    const int64_t i = task % p->seqlen_q, bh = task / p->seqlen_q;
    const int64_t b = bh / p->heads_q, h = bh % p->heads_q, hk = h / o->group;
    double *prob = o->thread_mem + thread * o->per_thread;
    const int64_t n = visible_keys(p, i);
    const double *dout = row(&o->dout, b, i, h);
    o->lse[task] = softmax_row(o, b, i, h, n, prob);
    const double dsum = dot(dout, row(&o->out, b, i, h), D);
    o->dsum[task] = dsum;
    double *dq = (double *)o->dq.data + eng__row(&o->dq, b, i, h);
    memset(dq, 0, sizeof(double) * (size_t)D);
    for (int64_t j = 0; j < n; j++) {
        const double ds = prob[j] * (dot(dout, row(&o->v, b, j, hk), D) - dsum);
        const double *kj = row(&o->k, b, j, hk);
        for (int32_t d = 0; d < D; d++)
            dq[d] += ds * kj[d];
    }
    for (int32_t d = 0; d < D; d++)
        dq[d] *= (double)p->scale;
}

static void bwd_key_row(void *arg, int64_t task, int32_t thread)
{
    const struct f64op *o = arg;
    const struct attn_problem *p = o->p;
    const int32_t D = p->head_dim;
    (void)thread;
    const int64_t j = task % p->seqlen_k, bhk = task / p->seqlen_k;
    const int64_t b = bhk / p->heads_kv, hk = bhk % p->heads_kv;
    /* causal: query i sees key j when j <= i + seqlen_k - seqlen_q */
    int64_t i0 = 0;
    if (p->mask == SCHED_MASK_CAUSAL) {
        i0 = j - ((int64_t)p->seqlen_k - p->seqlen_q);
        i0 = i0 < 0 ? 0 : i0;
    }
    const double *kj = row(&o->k, b, j, hk), *vj = row(&o->v, b, j, hk);
    double *dk = (double *)o->dk.data + eng__row(&o->dk, b, j, hk);
    double *dv = (double *)o->dv.data + eng__row(&o->dv, b, j, hk);
    memset(dk, 0, sizeof(double) * (size_t)D);
    memset(dv, 0, sizeof(double) * (size_t)D);
    for (int64_t h = hk * o->group; h < (hk + 1) * o->group; h++)
        for (int64_t i = i0; i < p->seqlen_q; i++) {
            const int64_t r = (b * p->heads_q + h) * p->seqlen_q + i;
            if (o->lse[r] == INFINITY)
                continue;
            const double *qi = row(&o->q, b, i, h), *dout = row(&o->dout, b, i, h);
            const double pr = exp(dot(qi, kj, D) * (double)p->scale - o->lse[r]);
            const double ds = pr * (dot(dout, vj, D) - o->dsum[r]);
            for (int32_t d = 0; d < D; d++) {
                dv[d] += pr * dout[d];
                dk[d] += ds * qi[d];
            }
        }
    for (int32_t d = 0; d < D; d++)
        dk[d] *= (double)p->scale;
}

int eng__backward_f64(struct eng *e, const struct attn_problem *p, struct attn_tensor dq,
                      struct attn_tensor dk, struct attn_tensor dv, struct attn_tensor q,
                      struct attn_tensor k, struct attn_tensor v, struct attn_tensor out,
                      struct attn_tensor dout)
{
    struct f64op o = {.p = p, .q = q, .k = k, .v = v, .out = out, .dout = dout, .dq = dq,
                      .dk = dk, .dv = dv, .group = p->heads_q / p->heads_kv,
                      .per_thread = p->seqlen_k};
    const size_t rows_q = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seqlen_q;
    double *mem = (double *)eng__arena(
        e, sizeof(double) * (rows_q * 2 + (size_t)o.per_thread * (size_t)eng_threads(e)));
    if (!mem)
        return -ENOMEM;
    o.lse = mem;
    o.dsum = mem + rows_q;
    o.thread_mem = mem + rows_q * 2;
    eng__op_begin(e);
    eng__for_each(e, (int64_t)rows_q, bwd_query_row, &o);
    int rc = eng__op_end(e);
    if (rc)
        return rc;
    eng__op_begin(e);
    eng__for_each(e, (int64_t)p->batch * p->heads_kv * p->seqlen_k, bwd_key_row, &o);
    return eng__op_end(e);
}
