// SPDX-License-Identifier: BSD-3-Clause
/*
 * engine_f64.c - the CPU engine's float64 forward and backward, computed in double.
 *
 * float64 is there to check gradients (torch.autograd.gradcheck compares with finite
 * differences, which fp32 arithmetic cannot pass), not for speed, so the passes are the
 * textbook ones, each output element owned by one task:
 *
 *   forward, one task per query row (b, i, h): the row of scores over the keys it sees,
 *            m = max, l = sum e^(s - m), O = sum e^(s - m) v / l, LSE = m + log l (stored
 *            as float, the protocol's lse).
 *   backward 1, one task per query row: the row's softmax again (in double: the float lse
 *            is not precise enough for double gradients), Dsum = dO . O (O as given),
 *            dS_j = P_j (dO . v_j - Dsum) c_j, dQ = scale sum_j dS_j k_j; the row's LSE
 *            (double) and Dsum are kept for step 2.
 *   backward 2, one task per key row (b, j, hk): over the group's query heads in ascending
 *            order, then the query rows that see key j in ascending order,
 *            P = e^(s_ij - LSE), dV_j += P dO_i, dK_j += scale P (dO_i . v_j - Dsum) c_ij q_i.
 *
 * The options are those of the other dtypes, with the same definitions (engine.h,
 * docs/schedules.md): the score s = scale q.k, or with a softcap cap tanh(scale q.k / cap),
 * whose derivative c = 1 - tanh^2 carries the gradient back (c = 1 without one); a window
 * (attn_window_of: causal is right 0, aligned bottom-right per sequence) limits the keys of
 * query i to one contiguous range; a packed batch is done sequence by sequence, its rows
 * found by their offsets (a row belongs to exactly one sequence). A query row that sees no
 * key has O = 0, LSE = +inf and dQ = 0; a key row no query sees has dK = dV = 0.
 *
 * Every sum runs in a fixed order inside one task, so the bits depend on the inputs only:
 * not on the thread count, the schedule or the tile sizes (which the caller still resolves
 * and reports), nor on how a packed batch is packed.
 */
#include "kernels/cpu/engine_int.h"

#include <math.h>
#include <string.h>

struct f64op {
    const struct attn_problem *p;
    struct attn_tensor q, k, v, out, dout, dq, dk, dv;
    float *lse_out;       /* forward: (view batch, heads_q, view rows_q) */
    double *lse, *dsum;   /* backward: the same layout, from step 1 for step 2 */
    double *thread_mem;   /* per thread: 2 * seqlen_k doubles (probabilities, softcap c) */
    int64_t per_thread;
    int32_t group, rows_q, rows_k;
};

/* One sequence: its view batch, first rows, lengths, and its window's sides (-1: none). */
struct seq {
    int64_t vb, q0, k0, sq, sk;
    int32_t left, right;
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

static struct seq seq_at(const struct attn_problem *p, int32_t vb, int32_t b)
{
    int32_t q0, k0, sq, sk;
    attn_seq(p, b, &q0, &k0, &sq, &sk);
    struct seq s = {vb, q0, k0, sq, sk, -1, -1};
    attn_window_of(p, sq, sk, &s.left, &s.right);
    return s;
}

/* The sequence holding view row `r` of (view batch vb) on the q side (k_side 0) or k side:
 * a dense batch's is vb itself; a packed batch's the last one starting at or before r (the
 * empty sequences before it start there too, and end there). */
static struct seq seq_of_row(const struct attn_problem *p, int32_t vb, int64_t r, int k_side)
{
    if (!p->cu_seqlens_q)
        return seq_at(p, vb, vb);
    const int32_t *cu = k_side ? p->cu_seqlens_k : p->cu_seqlens_q;
    int32_t lo = 0, hi = p->batch - 1; /* the answer is in [lo, hi] */
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo + 1) / 2;
        if (cu[mid] <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return seq_at(p, 0, lo);
}

/* The keys query i of s sees: [*lo, *hi) (empty when *lo >= *hi). */
static inline void keys_of(const struct seq *s, int64_t i, int64_t *lo, int64_t *hi)
{
    const int64_t diag = i + s->sk - s->sq;
    int64_t a = s->left < 0 ? 0 : diag - s->left, b = s->right < 0 ? s->sk : diag + s->right + 1;
    *lo = a < 0 ? 0 : a;
    *hi = b > s->sk ? s->sk : b;
}

/* The queries that see key j of s: [*lo, *hi). */
static inline void queries_of(const struct seq *s, int64_t j, int64_t *lo, int64_t *hi)
{
    const int64_t off = s->sk - s->sq;
    /* j <= i + off + right  <=>  i >= j - off - right;  j >= i + off - left  <=>  i <= j - off + left */
    int64_t a = s->right < 0 ? 0 : j - off - s->right, b = s->left < 0 ? s->sq : j - off + s->left + 1;
    *lo = a < 0 ? 0 : a;
    *hi = b > s->sq ? s->sq : b;
}

/* The score of q.k and, in *ret_c, its derivative through the softcap (1 without one). */
static inline double score(const struct attn_problem *p, double qk, double *ret_c)
{
    const double s = qk * (double)p->scale;
    if (p->softcap > 0) {
        const double t = tanh(s / (double)p->softcap);
        *ret_c = 1 - t * t;
        return (double)p->softcap * t;
    }
    *ret_c = 1;
    return s;
}

/* The probabilities of query i of s, head h, over its keys [lo, hi) into prob[0..hi-lo)
 * (and the softcap's derivatives into c[]); returns the log-sum-exp, +inf when it sees
 * no key. */
static double softmax_row(const struct f64op *o, const struct seq *s, int64_t i, int64_t h,
                          int64_t lo, int64_t hi, double *prob, double *c)
{
    const struct attn_problem *p = o->p;
    const int32_t D = p->head_dim;
    const double *qi = row(&o->q, s->vb, s->q0 + i, h);
    const int64_t hk = h / o->group, n = hi - lo;
    double mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        prob[j] = score(p, dot(qi, row(&o->k, s->vb, s->k0 + lo + j, hk), D), &c[j]);
        mx = prob[j] > mx ? prob[j] : mx;
    }
    if (n <= 0)
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

/* A query-row task: its sequence, row i in it and head h (task = (vb * Hq + h) * Rq + r,
 * the lse layout). */
static struct seq query_task(const struct f64op *o, int64_t task, int64_t *ret_i, int64_t *ret_h)
{
    const int64_t r = task % o->rows_q, bh = task / o->rows_q;
    const int32_t vb = (int32_t)(bh / o->p->heads_q);
    *ret_h = bh % o->p->heads_q;
    struct seq s = seq_of_row(o->p, vb, r, 0);
    *ret_i = r - s.q0;
    return s;
}

static void fwd_row(void *arg, int64_t task, int32_t thread)
{
    const struct f64op *o = arg;
    const struct attn_problem *p = o->p;
    const int32_t D = p->head_dim;
    int64_t i, h, lo, hi;
    const struct seq s = query_task(o, task, &i, &h);
    const int64_t hk = h / o->group;
    double *prob = o->thread_mem + thread * o->per_thread, *c = prob + p->seqlen_k;
    keys_of(&s, i, &lo, &hi);
    const double l = softmax_row(o, &s, i, h, lo, hi, prob, c);
    double *out = (double *)o->out.data + eng__row(&o->out, s.vb, s.q0 + i, h);
    for (int32_t d = 0; d < D; d++) {
        double acc = 0;
        for (int64_t j = lo; j < hi; j++)
            acc += prob[j - lo] * row(&o->v, s.vb, s.k0 + j, hk)[d];
        out[d] = acc;
    }
    o->lse_out[task] = (float)l;
}

static struct f64op op_of(const struct attn_problem *p)
{
    struct f64op o = {.p = p, .group = p->heads_q / p->heads_kv, .per_thread = 2 * (int64_t)p->seqlen_k,
                      .rows_q = attn_view_rows_q(p), .rows_k = attn_view_rows_k(p)};
    return o;
}

int eng__forward_f64(struct eng *e, const struct attn_problem *p, struct attn_tensor out,
                     float *lse, struct attn_tensor q, struct attn_tensor k, struct attn_tensor v)
{
    struct f64op o = op_of(p);
    o.q = q;
    o.k = k;
    o.v = v;
    o.out = out;
    o.lse_out = lse;
    void *mem;
    int rc = eng__arena(e, sizeof(double) * (size_t)o.per_thread * (size_t)eng_threads(e), &mem);
    if (rc)
        return rc;
    o.thread_mem = mem;
    eng__op_begin(e);
    eng__for_each(e, (int64_t)attn_view_batch(p) * p->heads_q * o.rows_q, fwd_row, &o);
    return eng__op_end(e);
}

static void bwd_query_row(void *arg, int64_t task, int32_t thread)
{
    const struct f64op *o = arg;
    const struct attn_problem *p = o->p;
    const int32_t D = p->head_dim;
    int64_t i, h, lo, hi;
    const struct seq s = query_task(o, task, &i, &h);
    const int64_t hk = h / o->group;
    double *prob = o->thread_mem + thread * o->per_thread, *c = prob + p->seqlen_k;
    keys_of(&s, i, &lo, &hi);
    const double *dout = row(&o->dout, s.vb, s.q0 + i, h);
    o->lse[task] = softmax_row(o, &s, i, h, lo, hi, prob, c);
    const double dsum = dot(dout, row(&o->out, s.vb, s.q0 + i, h), D);
    o->dsum[task] = dsum;
    double *dq = (double *)o->dq.data + eng__row(&o->dq, s.vb, s.q0 + i, h);
    memset(dq, 0, sizeof(double) * (size_t)D);
    for (int64_t j = lo; j < hi; j++) {
        const double ds = prob[j - lo] * (dot(dout, row(&o->v, s.vb, s.k0 + j, hk), D) - dsum) *
                          c[j - lo];
        const double *kj = row(&o->k, s.vb, s.k0 + j, hk);
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
    const int64_t r = task % o->rows_k, bhk = task / o->rows_k;
    const int32_t vb = (int32_t)(bhk / p->heads_kv);
    const int64_t hk = bhk % p->heads_kv;
    const struct seq s = seq_of_row(p, vb, r, 1);
    const int64_t j = r - s.k0;
    int64_t lo, hi;
    queries_of(&s, j, &lo, &hi);
    const double *kj = row(&o->k, s.vb, r, hk), *vj = row(&o->v, s.vb, r, hk);
    double *dk = (double *)o->dk.data + eng__row(&o->dk, s.vb, r, hk);
    double *dv = (double *)o->dv.data + eng__row(&o->dv, s.vb, r, hk);
    memset(dk, 0, sizeof(double) * (size_t)D);
    memset(dv, 0, sizeof(double) * (size_t)D);
    for (int64_t h = hk * o->group; h < (hk + 1) * o->group; h++)
        for (int64_t i = lo; i < hi; i++) {
            const int64_t t = ((int64_t)s.vb * p->heads_q + h) * o->rows_q + s.q0 + i;
            if (o->lse[t] == INFINITY)
                continue;
            const double *qi = row(&o->q, s.vb, s.q0 + i, h), *dout = row(&o->dout, s.vb, s.q0 + i, h);
            double c;
            const double pr = exp(score(p, dot(qi, kj, D), &c) - o->lse[t]);
            const double ds = pr * (dot(dout, vj, D) - o->dsum[t]) * c;
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
    struct f64op o = op_of(p);
    o.q = q;
    o.k = k;
    o.v = v;
    o.out = out;
    o.dout = dout;
    o.dq = dq;
    o.dk = dk;
    o.dv = dv;
    const int64_t VB = attn_view_batch(p);
    const size_t rows_q = (size_t)VB * (size_t)p->heads_q * (size_t)o.rows_q;
    void *arena;
    int rc = eng__arena(e, sizeof(double) * (rows_q * 2 + (size_t)o.per_thread * (size_t)eng_threads(e)),
                        &arena);
    if (rc)
        return rc;
    double *mem = arena;
    o.lse = mem;
    o.dsum = mem + rows_q;
    o.thread_mem = mem + rows_q * 2;
    eng__op_begin(e);
    eng__for_each(e, (int64_t)rows_q, bwd_query_row, &o);
    rc = eng__op_end(e);
    if (rc)
        return rc;
    eng__op_begin(e);
    eng__for_each(e, VB * p->heads_kv * o.rows_k, bwd_key_row, &o);
    return eng__op_end(e);
}
