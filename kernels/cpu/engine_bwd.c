// SPDX-License-Identifier: BSD-3-Clause
/*
 * engine_bwd.c - the CPU engine's backward pass, run as the schedule prescribes.
 *
 *   1. rows:   Dsum_i = sum_d dO_id O_id (fp32), and dQacc rows zeroed.
 *   2. units:  W virtual SMs; virtual SM v runs jobs v, v+W, ... . For each q-tile m that
 *              a unit (kv-tile n of one (batch, q-head)) visits:
 *                  S  = Q K^T,  P = exp(scale S - LSE)   (0 where masked)
 *                  dV += P^T dO
 *                  dP = dO V^T, dS = P o (dP - Dsum)
 *                  dK += dS^T Q
 *                  dQp = dS K      -> added into dQacc[m] when counter[m] == rank
 *              and at the end of the unit dK, dV (dK times scale) are written out, or
 *              kept in fp32 per query head when several query heads share a kv head.
 *   3. rows:   dQ = scale dQacc; GQA: dK, dV = sum over the group's query heads in
 *              ascending order.
 *
 * Softcap: P comes from the capped scores c = cap tanh(scale S / cap), and dS is taken
 * through the cap: dS = P o (dP - Dsum) o (1 - tanh^2), the tanh recomputed exactly as the
 * forward computed it. Windows and packed batches only change which (q-tile, kv-tile)
 * pairs the schedule visits and which keys of a tile a row sees (engine_int.h's segments).
 *
 * Step 2 is where determinism is won or lost. An addition into dQacc happens only when
 * the tile's counter equals the schedule's rank (acquire), and the counter moves on only
 * after the addition (release), so each dQ tile is summed in the schedule's order whatever
 * the threads do. Everything else is computed by one worker in a fixed loop order.
 * Worker t steps virtual SMs t, t+T, ...; a virtual SM whose turn has not come keeps its
 * partial and the worker moves on to the next one, so any T from 1 up works for any W.
 */
#include "kernels/cpu/engine_int.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* State of one virtual SM; its buffers live in the engine's arena. */
struct vsm {
    int32_t job, stage, step;
    int32_t seg;     /* the segment of job */
    int32_t loaded;  /* K/V of the current unit are in k, kt, v, vt */
    int32_t pending; /* dq holds a partial waiting for its turn */
    int32_t m, rank; /* of the pending partial */
    float *k, *kt;   /* (bn, D), (D, bn) */
    float *v, *vt;   /* (bn, D), (D, bn) */
    float *dk, *dv;  /* (bn, D) accumulators */
    float *dq;       /* (bm, D) partial */
};

struct bwd {
    struct eng *e;
    const struct attn_problem *p;
    struct eng__segs g;
    int32_t bm, bn, D, group, nvsm, threads;
    struct attn_tensor dq, dk, dv, q, k, v, out, dout;
    const float *lse;     /* (view batch * heads_q, rows_q) */
    float *dsum;          /* (view batch * heads_q, rows_q) */
    float *dq_acc;        /* (view batch * heads_q, rows_q, D) */
    float *dk_acc, *dv_acc; /* (view batch * heads_q, rows_k, D), GQA only */
    _Atomic int32_t *counter; /* every segment's (bh, M) */
    struct vsm *vsm;
    unsigned char *thread_mem;
    size_t per_thread;
};

/* ---- phase 1 and 3: row-parallel work ---------------------------------------------- */

static void pre_row(void *arg, int64_t row, int32_t thread)
{
    struct bwd *w = arg;
    const struct attn_problem *p = w->p;
    (void)thread;
    const int32_t bh = (int32_t)(row / w->g.rows_q), i = (int32_t)(row % w->g.rows_q);
    const int32_t b = bh / p->heads_q, h = bh % p->heads_q;
    const int64_t oa = eng__row(&w->out, b, i, h), da = eng__row(&w->dout, b, i, h);
    float sum = 0.0f;
    for (int32_t d = 0; d < w->D; d++)
        sum += dtype_load(w->dout.data, p->dtype, da + d) * dtype_load(w->out.data, p->dtype, oa + d);
    w->dsum[row] = sum;
    memset(w->dq_acc + row * w->D, 0, sizeof(float) * (size_t)w->D);
}

static void post_dq_row(void *arg, int64_t row, int32_t thread)
{
    struct bwd *w = arg;
    const struct attn_problem *p = w->p;
    (void)thread;
    const int32_t bh = (int32_t)(row / w->g.rows_q), i = (int32_t)(row % w->g.rows_q);
    const int32_t b = bh / p->heads_q, h = bh % p->heads_q;
    const int64_t at = eng__row(&w->dq, b, i, h);
    const float *acc = w->dq_acc + row * w->D;
    for (int32_t d = 0; d < w->D; d++)
        dtype_store(w->dq.data, p->dtype, at + d, acc[d] * p->scale);
}

/* GQA: row = (batch, kv head, key). */
static void post_dkv_row(void *arg, int64_t row, int32_t thread)
{
    struct bwd *w = arg;
    const struct attn_problem *p = w->p;
    (void)thread;
    const int32_t j = (int32_t)(row % w->g.rows_k);
    const int32_t bhk = (int32_t)(row / w->g.rows_k);
    const int32_t b = bhk / p->heads_kv, hk = bhk % p->heads_kv;
    const int64_t ka = eng__row(&w->dk, b, j, hk), va = eng__row(&w->dv, b, j, hk);
    for (int32_t d = 0; d < w->D; d++) {
        float sk = 0.0f, sv = 0.0f;
        for (int32_t g = 0; g < w->group; g++) {
            int64_t src = (((int64_t)b * p->heads_q + hk * w->group + g) * w->g.rows_k + j) * w->D + d;
            sk += w->dk_acc[src];
            sv += w->dv_acc[src];
        }
        dtype_store(w->dk.data, p->dtype, ka + d, sk);
        dtype_store(w->dv.data, p->dtype, va + d, sv);
    }
}

/* ---- phase 2: the units ------------------------------------------------------------ */

static void unit_load(struct bwd *w, struct vsm *x, int32_t bh, int32_t n)
{
    const struct attn_problem *p = w->p;
    const struct eng__seg *g = &w->g.seg[x->seg];
    const int32_t D = w->D, bn = w->bn;
    const int32_t b = bh / p->heads_q, hk = (bh % p->heads_q) / w->group;
    const int32_t j0 = n * bn, rn = g->sk - j0 < bn ? g->sk - j0 : bn;
    for (int32_t j = 0; j < rn; j++) {
        int64_t ka = eng__row(&w->k, b, g->k0 + j0 + j, hk);
        int64_t va = eng__row(&w->v, b, g->k0 + j0 + j, hk);
        for (int32_t d = 0; d < D; d++) {
            float kv = dtype_load(w->k.data, p->dtype, ka + d);
            float vv = dtype_load(w->v.data, p->dtype, va + d);
            x->k[j * D + d] = kv;
            x->kt[d * bn + j] = kv;
            x->v[j * D + d] = vv;
            x->vt[d * bn + j] = vv;
        }
    }
    memset(x->dk, 0, sizeof(float) * (size_t)bn * D);
    memset(x->dv, 0, sizeof(float) * (size_t)bn * D);
    x->loaded = 1;
}

static void unit_store(struct bwd *w, struct vsm *x, int32_t bh, int32_t n)
{
    const struct attn_problem *p = w->p;
    const struct eng__seg *g = &w->g.seg[x->seg];
    const int32_t D = w->D, bn = w->bn;
    const int32_t b = bh / p->heads_q, h = bh % p->heads_q, hk = h / w->group;
    const int32_t j0 = n * bn, rn = g->sk - j0 < bn ? g->sk - j0 : bn;
    for (int32_t j = 0; j < rn; j++) {
        const float *dk = x->dk + (size_t)j * D, *dv = x->dv + (size_t)j * D;
        if (w->group == 1) {
            int64_t ka = eng__row(&w->dk, b, g->k0 + j0 + j, hk);
            int64_t va = eng__row(&w->dv, b, g->k0 + j0 + j, hk);
            for (int32_t d = 0; d < D; d++) {
                dtype_store(w->dk.data, p->dtype, ka + d, dk[d] * p->scale);
                dtype_store(w->dv.data, p->dtype, va + d, dv[d]);
            }
        } else {
            int64_t at = ((int64_t)bh * w->g.rows_k + g->k0 + j0 + j) * D;
            for (int32_t d = 0; d < D; d++) {
                w->dk_acc[at + d] = dk[d] * p->scale;
                w->dv_acc[at + d] = dv[d];
            }
        }
    }
    x->loaded = 0;
}

/* Per-thread scratch of unit_step, carved in this order (each piece aligned, so the size
 * is counted the same way it is carved). */
static size_t unit_thread_bytes(int32_t bm, int32_t bn, int32_t d, struct eng__carver *c)
{
    eng__carve(c, sizeof(float) * (size_t)bm * d);  /* Q */
    eng__carve(c, sizeof(float) * (size_t)bm * d);  /* dO */
    eng__carve(c, sizeof(float) * (size_t)bm * bn); /* P */
    eng__carve(c, sizeof(float) * (size_t)bm * bn); /* dS */
    return c->used;
}

/* Compute the virtual SM's next dQ partial (and its dK/dV contributions). */
static void unit_step(struct bwd *w, struct vsm *x, int32_t thread)
{
    const struct attn_problem *p = w->p;
    const struct eng__seg *g = &w->g.seg[x->seg];
    const struct sched *s = &g->s;
    const int32_t D = w->D, bm = w->bm, bn = w->bn;
    struct eng__carver c = {w->thread_mem + (size_t)thread * w->per_thread, 0};
    float *Q = eng__carve(&c, sizeof(float) * (size_t)bm * D);
    float *dO = eng__carve(&c, sizeof(float) * (size_t)bm * D);
    float *P = eng__carve(&c, sizeof(float) * (size_t)bm * bn);
    float *dS = eng__carve(&c, sizeof(float) * (size_t)bm * bn);

    const struct sched_job J = sched_job_at(s, x->job - g->job0);
    const int32_t n = sched_job_unit(s, J.k, x->stage);
    if (!x->loaded)
        unit_load(w, x, J.bh, n);
    const int32_t m = sched_visit(s, &J, x->stage, x->step);
    const int32_t b = J.bh / p->heads_q, h = J.bh % p->heads_q;
    const int32_t i0 = m * bm, rm = g->sq - i0 < bm ? g->sq - i0 : bm;
    const int32_t j0 = n * bn, rn = g->sk - j0 < bn ? g->sk - j0 : bn;
    const int64_t lrow = ((int64_t)b * p->heads_q + h) * w->g.rows_q + g->q0 + i0;
    const float *lse = w->lse + lrow, *dsum = w->dsum + lrow;
    const float cap = p->softcap, capscale = cap > 0 ? p->scale / cap : 0.0f;

    for (int32_t i = 0; i < rm; i++) {
        int64_t qa = eng__row(&w->q, b, g->q0 + i0 + i, h);
        int64_t da = eng__row(&w->dout, b, g->q0 + i0 + i, h);
        for (int32_t d = 0; d < D; d++) {
            Q[i * D + d] = dtype_load(w->q.data, p->dtype, qa + d);
            dO[i * D + d] = dtype_load(w->dout.data, p->dtype, da + d);
        }
    }
    /* P = exp(scale Q K^T - LSE), zero where masked; dP = dO V^T, then dS = P (dP - Dsum).
     * d outer, j inner keeps every sum in a fixed order and lets the j loop vectorise. */
    for (int32_t i = 0; i < rm; i++) {
        float *pr = P + (size_t)i * bn, *ds = dS + (size_t)i * bn;
        memset(pr, 0, sizeof(float) * (size_t)rn);
        memset(ds, 0, sizeof(float) * (size_t)rn);
        int32_t lo, hi;
        eng__visible(g, i0 + i, j0, rn, &lo, &hi);
        if (lo == hi)
            continue;
        for (int32_t d = 0; d < D; d++) {
            const float qd = Q[i * D + d], od = dO[i * D + d];
            const float *kt = x->kt + (size_t)d * bn, *vt = x->vt + (size_t)d * bn;
            for (int32_t j = lo; j < hi; j++) {
                pr[j] += qd * kt[j];
                ds[j] += od * vt[j];
            }
        }
        if (cap > 0) {
            for (int32_t j = lo; j < hi; j++) {
                const float t = tanhf(pr[j] * capscale);
                pr[j] = expf(cap * t - lse[i]);
                ds[j] = pr[j] * (ds[j] - dsum[i]) * (1.0f - t * t);
            }
        } else {
            for (int32_t j = lo; j < hi; j++) {
                pr[j] = expf(pr[j] * p->scale - lse[i]);
                ds[j] = pr[j] * (ds[j] - dsum[i]);
            }
        }
    }
/* dV += P^T dO, dK += dS^T Q  (rows of the unit's accumulators, i ascending) */
    for (int32_t i = 0; i < rm; i++) {
        const float *pr = P + (size_t)i * bn, *ds = dS + (size_t)i * bn;
        const float *qi = Q + (size_t)i * D, *oi = dO + (size_t)i * D;
        for (int32_t j = 0; j < rn; j++) {
            float *dv = x->dv + (size_t)j * D, *dk = x->dk + (size_t)j * D;
            const float pj = pr[j], dsj = ds[j];
            for (int32_t d = 0; d < D; d++) {
                dv[d] += pj * oi[d];
                dk[d] += dsj * qi[d];
            }
        }
    }
    /* dQp = dS K  (j ascending) */
    for (int32_t i = 0; i < rm; i++) {
        float *dq = x->dq + (size_t)i * D;
        const float *ds = dS + (size_t)i * bn;
        memset(dq, 0, sizeof(float) * (size_t)D);
        for (int32_t j = 0; j < rn; j++) {
            const float dsj = ds[j], *kj = x->k + (size_t)j * D;
            for (int32_t d = 0; d < D; d++)
                dq[d] += dsj * kj[d];
        }
    }
    x->m = m;
    x->rank = sched_rank(s, &J, x->stage, m);
    x->pending = 1;
}

/* Move the virtual SM past a finished stage: store the unit, go to the next stage or job
 * (and its segment). Stages that visit no q-tile (a band can leave a kv-tile unseen)
 * are stored at once, their dK and dV zero. */
static void unit_advance(struct bwd *w, struct vsm *x)
{
    for (;;) {
        const struct sched *s = &w->g.seg[x->seg].s;
        const struct sched_job J = sched_job_at(s, x->job - w->g.seg[x->seg].job0);
        const int32_t n = sched_job_unit(s, J.k, x->stage);
        if (x->step < sched_unit_steps(s, n))
            return;
        if (!x->loaded)
            unit_load(w, x, J.bh, n);
        unit_store(w, x, J.bh, n);
        x->step = 0;
        if (++x->stage < sched_job_stages(s, J.k))
            continue;
        x->stage = 0;
        x->job += w->nvsm;
        if (x->job >= w->g.jobs)
            return;
        x->seg = eng__seg_of_job(&w->g, x->job);
    }
}

/* Add the pending partial if it is its turn; then move the virtual SM on. Returns 1 if
 * the partial was added. */
static int unit_publish(struct bwd *w, struct vsm *x)
{
    const struct attn_problem *p = w->p;
    const struct eng__seg *g = &w->g.seg[x->seg];
    const struct sched *s = &g->s;
    const struct sched_job J = sched_job_at(s, x->job - g->job0);
    _Atomic int32_t *ctr = &w->counter[g->tile0 + (int64_t)J.bh * s->m_tiles + x->m];
    if (x->rank >= 0) {
        if (atomic_load_explicit(ctr, memory_order_acquire) != x->rank)
            return 0;
    } else { /* atomic schedule: the counter is a lock, taken in arrival order */
        int32_t unlocked = 0;
        if (!atomic_compare_exchange_strong_explicit(ctr, &unlocked, 1, memory_order_acquire,
                                                     memory_order_relaxed))
            return 0;
    }
    const int32_t i0 = x->m * w->bm, rm = g->sq - i0 < w->bm ? g->sq - i0 : w->bm;
    const int32_t b = J.bh / p->heads_q, h = J.bh % p->heads_q;
    float *acc = w->dq_acc + (((int64_t)b * p->heads_q + h) * w->g.rows_q + g->q0 + i0) * w->D;
    const int64_t len = (int64_t)rm * w->D;
    for (int64_t t = 0; t < len; t++)
        acc[t] += x->dq[t];
    atomic_store_explicit(ctr, x->rank >= 0 ? x->rank + 1 : 0, memory_order_release);
    x->pending = 0;
    x->step++;
    unit_advance(w, x);
    return 1;
}

static void units_worker(void *arg, int32_t thread, int32_t threads)
{
    struct bwd *w = arg;
    int idle = 0;
    for (;;) {
        int active = 0, progress = 0;
        for (int32_t v = thread; v < w->nvsm; v += threads) {
            struct vsm *x = &w->vsm[v];
            if (x->job >= w->g.jobs)
                continue;
            active = 1;
            /* Keep stepping this virtual SM until it must wait: its tiles stay in cache,
             * and every switch is then forced by a real dependency. */
            while (x->job < w->g.jobs) {
                if (eng__stopping(w->e, 1))
                    return; /* every worker leaves: no turn is waited for again */
                if (!x->pending) {
                    unit_step(w, x, thread);
                    progress = 1;
                }
                if (!unit_publish(w, x))
                    break;
                progress = 1;
            }
        }
        if (!active)
            return;
        if (progress) {
            idle = 0;
        } else if (++idle < 64) {
            sched_yield(); /* another worker is about to release the tile we wait for */
        } else {
            struct timespec ts = {0, 20000}; /* the other worker may need this core */
            nanosleep(&ts, NULL);
        }
    }
}

/* A packed sequence without queries has no segment, and its keys no unit: their dK and
 * dV are zero. */
static void zero_unqueried_keys(struct bwd *w)
{
    const struct attn_problem *p = w->p;
    for (int32_t b = 0; p->cu_seqlens_q && b < p->batch; b++) {
        int32_t q0, k0, sq, sk;
        attn_seq(p, b, &q0, &k0, &sq, &sk);
        if (sq > 0)
            continue;
        for (int32_t j = k0; j < k0 + sk; j++)
            for (int32_t hk = 0; hk < p->heads_kv; hk++) {
                if (w->group == 1) {
                    int64_t ka = eng__row(&w->dk, 0, j, hk), va = eng__row(&w->dv, 0, j, hk);
                    for (int32_t d = 0; d < w->D; d++) {
                        dtype_store(w->dk.data, p->dtype, ka + d, 0.0f);
                        dtype_store(w->dv.data, p->dtype, va + d, 0.0f);
                    }
                    continue;
                }
                for (int32_t g = 0; g < w->group; g++) {
                    int64_t at = ((int64_t)(hk * w->group + g) * w->g.rows_k + j) * w->D;
                    memset(w->dk_acc + at, 0, sizeof(float) * (size_t)w->D);
                    memset(w->dv_acc + at, 0, sizeof(float) * (size_t)w->D);
                }
            }
    }
}

/* ---- entry point ------------------------------------------------------------------- */

int eng_backward(struct eng *e, const struct attn_problem *p, const struct attn_config *cfg,
                 struct attn_tensor dq, struct attn_tensor dk, struct attn_tensor dv,
                 struct attn_tensor q, struct attn_tensor k, struct attn_tensor v,
                 struct attn_tensor out, const float *lse, struct attn_tensor dout,
                 struct attn_config *ret_cfg)
{
    if (!e || !lse)
        return -EINVAL;
    struct bwd w = {.e = e, .p = p, .dq = dq, .dk = dk, .dv = dv, .q = q, .k = k, .v = v,
                    .out = out, .dout = dout, .lse = lse};
    struct attn_config c;
    struct sched geo;
    int rc = eng__prepare(e, p, cfg, &c, &geo);
    if (rc)
        return rc;
    const int32_t VB = attn_view_batch(p), Rq = attn_view_rows_q(p), Rk = attn_view_rows_k(p);
    if (attn_check_tensor(&q, VB, Rq, p->heads_q, p->head_dim, 0) ||
        attn_check_tensor(&k, VB, Rk, p->heads_kv, p->head_dim, 0) ||
        attn_check_tensor(&v, VB, Rk, p->heads_kv, p->head_dim, 0) ||
        attn_check_tensor(&out, VB, Rq, p->heads_q, p->head_dim, 0) ||
        attn_check_tensor(&dout, VB, Rq, p->heads_q, p->head_dim, 0) ||
        attn_check_tensor(&dq, VB, Rq, p->heads_q, p->head_dim, 1) ||
        attn_check_tensor(&dk, VB, Rk, p->heads_kv, p->head_dim, 1) ||
        attn_check_tensor(&dv, VB, Rk, p->heads_kv, p->head_dim, 1))
        return -EINVAL;
    if (p->dtype == DTYPE_F64) {
        if ((rc = eng__backward_f64(e, p, dq, dk, dv, q, k, v, out, dout)))
            return rc;
        if (ret_cfg)
            *ret_cfg = c;
        return 0;
    }
    w.bm = c.block_m;
    w.bn = c.block_n;
    w.D = p->head_dim;
    w.group = p->heads_q / p->heads_kv;
    w.threads = eng_threads(e);

    const size_t D = (size_t)w.D, bm = (size_t)w.bm, bn = (size_t)w.bn;
    const size_t rows_q = (size_t)VB * (size_t)p->heads_q * (size_t)Rq;
    const size_t rows_k = (size_t)VB * (size_t)p->heads_q * (size_t)Rk;
    struct eng__carver tc = {NULL, 0};
    w.per_thread = (unit_thread_bytes(w.bm, w.bn, w.D, &tc) + ENG__ALIGN - 1) &
                   ~(size_t)(ENG__ALIGN - 1);

    /* Lay out the arena: count first, then carve for real. */
    unsigned char *base = NULL;
    for (int pass = 0; pass < 2; pass++) {
        struct eng__carver a = {base, 0};
        if ((rc = eng__segments(p, &c, &a, &w.g)) != 0)
            return rc;
        /* virtual SMs beyond the job count stay idle */
        w.nvsm = w.g.jobs < c.w ? w.g.jobs : c.w;
        w.dsum = eng__carve(&a, sizeof(float) * rows_q);
        w.dq_acc = eng__carve(&a, sizeof(float) * rows_q * D);
        if (w.group > 1) {
            w.dk_acc = eng__carve(&a, sizeof(float) * rows_k * D);
            w.dv_acc = eng__carve(&a, sizeof(float) * rows_k * D);
        }
        w.counter = eng__carve(&a, sizeof(_Atomic int32_t) * (size_t)(w.g.tiles > 0 ? w.g.tiles : 1));
        w.vsm = eng__carve(&a, sizeof(struct vsm) * (size_t)(w.nvsm > 0 ? w.nvsm : 1));
        for (int32_t i = 0; i < w.nvsm; i++) {
            float *buf = eng__carve(&a, sizeof(float) * (bn * D * 6 + bm * D));
            if (base) {
                struct vsm *x = &w.vsm[i];
                memset(x, 0, sizeof *x);
                x->job = i;
                x->k = buf;
                x->kt = x->k + bn * D;
                x->v = x->kt + bn * D;
                x->vt = x->v + bn * D;
                x->dk = x->vt + bn * D;
                x->dv = x->dk + bn * D;
                x->dq = x->dv + bn * D;
            }
        }
        w.thread_mem = eng__carve(&a, w.per_thread * (size_t)w.threads);
        void *mem = base;
        if (!base && (rc = eng__arena(e, a.used, &mem)))
            return rc;
        base = mem;
    }
    for (int64_t t = 0; t < w.g.tiles; t++)
        atomic_init(&w.counter[t], 0);
    zero_unqueried_keys(&w);
    for (int32_t i = 0; i < w.nvsm; i++) {
        w.vsm[i].seg = eng__seg_of_job(&w.g, i);
        unit_advance(&w, &w.vsm[i]); /* past leading stages that visit nothing */
    }

    eng__op_begin(e);
    eng__for_each(e, (int64_t)rows_q, pre_row, &w);
    pool_run(e->pool, units_worker, &w);
    eng__for_each(e, (int64_t)rows_q, post_dq_row, &w);
    if (w.group > 1)
        eng__for_each(e, (int64_t)VB * p->heads_kv * Rk, post_dkv_row, &w);
    if ((rc = eng__op_end(e)))
        return rc; /* stopped midway (eng_set_stop): the phases after it ran no task */
    if (ret_cfg)
        *ret_cfg = c;
    return 0;
}
