// SPDX-License-Identifier: BSD-3-Clause
/*
 * engine.c - the CPU engine's API: engine lifetime, argument validation, schedule
 * resolution, the parallel-for helper, and the forward pass.
 *
 * Forward. One task is one q-tile of one (batch, head): its block_m rows walk the
 * kv-tiles that the mask lets them see, in ascending order, with the online softmax
 * (running row max m, running denominator l, output rescaled when m grows):
 *     S = scale * Q K^T,  m' = max(m, rowmax S),  l' = l e^(m-m') + rowsum e^(S-m'),
 *     O' = O e^(m-m') + e^(S-m') V,   and at the end O = O / l,  LSE = m + log l.
 * A task writes only its own rows, so the result does not depend on who runs it.
 */
#include "kernels/cpu/engine_int.h"

#include "kernels/sched/dag.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct eng *eng_new(int32_t threads)
{
    struct eng *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->pool = pool_new(threads);
    if (!e->pool) {
        free(e);
        return NULL;
    }
    return e;
}

void eng_free(struct eng *e)
{
    if (!e)
        return;
    pool_free(e->pool);
    free(e->scratch);
    free(e);
}

void eng_set_stop(struct eng *e, eng_stop_fn stop, void *ctx)
{
    e->stop = stop;
    e->stop_ctx = ctx;
}

int32_t eng_threads(const struct eng *e)
{
    return pool_threads(e->pool);
}

void eng_trim(struct eng *e, size_t keep)
{
    if (e->scratch_cap > keep) {
        free(e->scratch);
        e->scratch = NULL;
        e->scratch_cap = 0;
    }
}

int eng__arena(struct eng *e, size_t bytes, void **ret)
{
    if (e->work_max && bytes > e->work_max) {
        e->work_refused = bytes;
        return -E2BIG;
    }
    if (bytes > e->scratch_cap) {
        /* the old arena goes first (nothing in it is kept): never both at once */
        free(e->scratch);
        e->scratch = NULL;
        e->scratch_cap = 0;
        size_t cap = (bytes + 4095) & ~(size_t)4095;
        unsigned char *mem = aligned_alloc(ENG__ALIGN, cap);
        if (!mem)
            return -ENOMEM;
        e->scratch = mem;
        e->scratch_cap = cap;
    }
    *ret = e->scratch;
    return 0;
}

void eng_set_work_max(struct eng *e, size_t bytes)
{
    e->work_max = bytes;
}

size_t eng_work_refused(const struct eng *e)
{
    return e->work_refused;
}

/* ---- validation ------------------------------------------------------------------- */

int eng_check_problem(const struct attn_problem *p)
{
    int rc = attn_check_problem(p);
    if (rc)
        return rc;
    if (p->head_dim < ENG_HEAD_DIM_MIN || p->head_dim > ENG_HEAD_DIM_MAX)
        return -ENOTSUP;
    return 0;
}

/* cfg's values checked against the engine's ranges, defaults filled in (SCHED_AUTO kept).
 * 0 or -EINVAL. */
static int fill_config(const struct attn_config *cfg, struct attn_config *ret)
{
    struct attn_config c = {SCHED_AUTO, 0, 0, 0, 0};
    if (cfg)
        c = *cfg;
    if ((int)c.sched < 0 || c.sched >= SCHED_KIND_COUNT || c.w < 0 || c.w > SCHED_W_MAX ||
        c.block_m < 0 || c.block_m > ENG_BLOCK_MAX || c.block_n < 0 || c.block_n > ENG_BLOCK_MAX)
        return -EINVAL;
    if (!c.w)
        c.w = SCHED_W_DEFAULT;
    if (!c.block_m)
        c.block_m = ENG_BLOCK_DEFAULT;
    if (!c.block_n)
        c.block_n = ENG_BLOCK_DEFAULT;
    *ret = c;
    return 0;
}

int eng_check_config(const struct attn_problem *p, const struct attn_config *cfg)
{
    struct attn_config c;
    struct sched geo;
    int rc = fill_config(cfg, &c);
    return rc ? rc : attn_geometry(p, &c, &geo);
}

/* Packed batches: the shape SCHED_AUTO is resolved on (dag.h's rule). */
static void varlen_auto_shape(const struct attn_problem *p, const struct attn_config *c,
                              struct sched_shape *ret)
{
    int32_t b = c->batch_invariant ? -1
                                   : dag_auto_packed_seq(p->cu_seqlens_q, p->cu_seqlens_k, p->batch);
    if (b >= 0) {
        attn_sched_shape_of(p, c, b, ret);
        return;
    }
    attn_sched_shape(p, c, ret);
    dag_auto_packed_ref(ret);
}

int eng__prepare(struct eng *e, const struct attn_problem *p, const struct attn_config *cfg,
                 struct attn_config *ret_cfg, struct sched *ret_geo)
{
    int rc = eng_check_problem(p);
    if (rc)
        return rc;
    struct attn_config c;
    if ((rc = fill_config(cfg, &c)) != 0)
        return rc;
    if (c.sched == SCHED_AUTO) {
        struct sched_shape sh;
        /* padding zeroed: the auto cache compares memory */
        if (p->cu_seqlens_q)
            varlen_auto_shape(p, &c, &sh);
        else
            attn_sched_shape(p, &c, &sh);
        if ((rc = dag_auto_cached(&e->auto_cache, &sh, c.w, &c.sched)) != 0)
            return rc;
    }
    struct sched geo;
    if ((rc = attn_geometry(p, &c, &geo)) != 0)
        return rc;
    *ret_cfg = c;
    *ret_geo = geo;
    return 0;
}

int eng__segments(const struct attn_problem *p, const struct attn_config *c,
                  struct eng__carver *a, struct eng__segs *ret)
{
    struct eng__segs g = {0};
    g.rows_q = attn_view_rows_q(p);
    g.rows_k = attn_view_rows_k(p);
    int32_t count = 0;
    for (int32_t b = 0; b < (p->cu_seqlens_q ? p->batch : 1); b++) {
        int32_t q0, k0, sq, sk;
        attn_seq(p, b, &q0, &k0, &sq, &sk);
        count += sq > 0;
    }
    g.seg = eng__carve(a, sizeof(struct eng__seg) * (size_t)(count > 0 ? count : 1));
    g.count = count;
    int64_t jobs = 0;
    int32_t at = 0;
    for (int32_t b = 0; b < (p->cu_seqlens_q ? p->batch : 1); b++) {
        struct eng__seg x;
        memset(&x, 0, sizeof x);
        attn_seq(p, b, &x.q0, &x.k0, &x.sq, &x.sk);
        if (x.sq == 0)
            continue;
        struct sched_shape sh;
        attn_sched_shape_of(p, c, b, &sh);
        if (x.sk == 0)
            sh.seqlen_k = 1; /* no key: only the q tiles matter */
        int rc = sched_init(&x.s, c->sched, &sh, c->w);
        if (rc)
            return rc;
        x.task0 = g.tasks;
        x.tile0 = g.tiles;
        x.job0 = (int32_t)jobs;
        g.tasks += (int64_t)x.s.bh * x.s.m_tiles;
        g.tiles += (int64_t)x.s.bh * x.s.m_tiles;
        if (x.sk > 0)
            jobs += x.s.jobs;
        if (jobs > INT32_MAX)
            return -EOVERFLOW;
        if (a->base)
            g.seg[at] = x;
        at++;
    }
    g.jobs = (int32_t)jobs;
    *ret = g;
    return 0;
}

int32_t eng__seg_of_task(const struct eng__segs *g, int64_t t)
{
    int32_t lo = 0, hi = g->count - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (g->seg[mid].task0 <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int32_t eng__seg_of_job(const struct eng__segs *g, int32_t j)
{
    /* the last segment whose first job is <= j and that has jobs */
    int32_t lo = 0, hi = g->count - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (g->seg[mid].job0 <= j)
            lo = mid;
        else
            hi = mid - 1;
    }
    while (lo > 0 && (g->seg[lo].sk == 0 || g->seg[lo].job0 > j))
        lo--;
    return lo;
}

int eng_resolve(struct eng *e, const struct attn_problem *p, const struct attn_config *cfg,
                struct attn_config *ret_cfg)
{
    struct sched geo;
    struct attn_config c;
    if (!e || !ret_cfg)
        return -EINVAL;
    int rc = eng__prepare(e, p, cfg, &c, &geo);
    if (rc == 0)
        *ret_cfg = c;
    return rc;
}

/* ---- parallel for ----------------------------------------------------------------- */

struct for_each_ctx {
    struct eng *e;
    eng__task_fn fn;
    void *ctx;
    int64_t tasks, chunk;
    _Atomic int64_t next;
};

static void for_each_worker(void *arg, int32_t thread, int32_t threads)
{
    struct for_each_ctx *c = arg;
    (void)threads;
    for (;;) {
        int64_t first = atomic_fetch_add_explicit(&c->next, c->chunk, memory_order_relaxed);
        if (first >= c->tasks)
            break;
        int64_t last = first + c->chunk < c->tasks ? first + c->chunk : c->tasks;
        if (eng__stopping(c->e, (uint32_t)(last - first)))
            return;
        for (int64_t t = first; t < last; t++)
            c->fn(c->ctx, t, thread);
    }
}

void eng__for_each(struct eng *e, int64_t tasks, eng__task_fn fn, void *ctx)
{
    struct for_each_ctx c = {.e = e, .fn = fn, .ctx = ctx, .tasks = tasks};
    int64_t per = tasks / ((int64_t)pool_threads(e->pool) * 8);
    c.chunk = per < 1 ? 1 : per > 256 ? 256 : per;
    atomic_init(&c.next, 0);
    if (tasks > 0)
        pool_run(e->pool, for_each_worker, &c);
}

/* ---- forward ---------------------------------------------------------------------- */

struct fwd {
    const struct attn_problem *p;
    struct eng__segs g;
    int32_t bm, bn, group;
    struct attn_tensor out, q, k, v;
    float *lse;
    unsigned char *thread_mem;
    size_t per_thread;
};

/* Per-thread scratch of the forward, carved in this order. */
static size_t fwd_thread_bytes(int32_t bm, int32_t bn, int32_t d, struct eng__carver *c)
{
    eng__carve(c, sizeof(float) * (size_t)bm * d);  /* Q */
    eng__carve(c, sizeof(float) * (size_t)bm * d);  /* O */
    eng__carve(c, sizeof(float) * (size_t)bm * bn); /* S, then P */
    eng__carve(c, sizeof(float) * (size_t)d * bn);  /* K^T */
    eng__carve(c, sizeof(float) * (size_t)bn * d);  /* V */
    eng__carve(c, sizeof(float) * (size_t)bm * 2);  /* row max, row sum */
    return c->used;
}

static void fwd_task(void *arg, int64_t task, int32_t thread)
{
    const struct fwd *f = arg;
    const struct attn_problem *p = f->p;
    const int32_t D = p->head_dim, bm = f->bm, bn = f->bn;
    struct eng__carver c = {f->thread_mem + (size_t)thread * f->per_thread, 0};
    float *Q = eng__carve(&c, sizeof(float) * (size_t)bm * D);
    float *O = eng__carve(&c, sizeof(float) * (size_t)bm * D);
    float *S = eng__carve(&c, sizeof(float) * (size_t)bm * bn);
    float *Kt = eng__carve(&c, sizeof(float) * (size_t)D * bn);
    float *V = eng__carve(&c, sizeof(float) * (size_t)bn * D);
    float *rmax = eng__carve(&c, sizeof(float) * (size_t)bm * 2);
    float *rsum = rmax + bm;

    const struct eng__seg *g = &f->g.seg[eng__seg_of_task(&f->g, task)];
    const int32_t M = g->s.m_tiles;
    const int32_t m = (int32_t)((task - g->task0) % M), bh = (int32_t)((task - g->task0) / M);
    const int32_t b = bh / p->heads_q, h = bh % p->heads_q, hk = h / f->group;
    const int32_t i0 = m * bm, rm = g->sq - i0 < bm ? g->sq - i0 : bm;
    /* softcap: s = cap tanh(scale q.k / cap) */
    const float cap = p->softcap, capscale = cap > 0 ? p->scale / cap : 0.0f;

    for (int32_t i = 0; i < rm; i++) {
        int64_t at = eng__row(&f->q, b, g->q0 + i0 + i, h);
        for (int32_t d = 0; d < D; d++)
            Q[i * D + d] = dtype_load(f->q.data, p->dtype, at + d);
        rmax[i] = -INFINITY;
        rsum[i] = 0.0f;
    }
    memset(O, 0, sizeof(float) * (size_t)rm * D);

    const int32_t n_hi = g->sk > 0 ? sched_n_hi(&g->s, m) : 0;
    for (int32_t n = g->sk > 0 ? sched_n_lo(&g->s, m) : 0; n < n_hi; n++) {
        const int32_t j0 = n * bn, rn = g->sk - j0 < bn ? g->sk - j0 : bn;
        for (int32_t j = 0; j < rn; j++) {
            int64_t ka = eng__row(&f->k, b, g->k0 + j0 + j, hk);
            int64_t va = eng__row(&f->v, b, g->k0 + j0 + j, hk);
            for (int32_t d = 0; d < D; d++) {
                Kt[d * bn + j] = dtype_load(f->k.data, p->dtype, ka + d);
                V[j * D + d] = dtype_load(f->v.data, p->dtype, va + d);
            }
        }
        for (int32_t i = 0; i < rm; i++) {
            float *s = S + (size_t)i * bn;
            memset(s, 0, sizeof(float) * (size_t)rn);
            /* d outer, j inner: the inner loop is independent per j, so it vectorises
             * without reassociating any sum. */
            for (int32_t d = 0; d < D; d++) {
                const float qd = Q[i * D + d], *kt = Kt + (size_t)d * bn;
                for (int32_t j = 0; j < rn; j++)
                    s[j] += qd * kt[j];
            }
            int32_t lo, hi;
            eng__visible(g, i0 + i, j0, rn, &lo, &hi);
            if (lo == hi)
                continue;
            float mx = rmax[i];
            for (int32_t j = lo; j < hi; j++) {
                s[j] = cap > 0 ? cap * tanhf(s[j] * capscale) : s[j] * p->scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            const float corr = expf(rmax[i] - mx); /* 0 when the row had no key yet */
            float sum = 0.0f;
            for (int32_t j = lo; j < hi; j++) {
                s[j] = expf(s[j] - mx);
                sum += s[j];
            }
            rsum[i] = rsum[i] * corr + sum;
            rmax[i] = mx;
            float *o = O + (size_t)i * D;
            for (int32_t d = 0; d < D; d++)
                o[d] *= corr;
            for (int32_t j = lo; j < hi; j++) {
                const float pj = s[j], *vj = V + (size_t)j * D;
                for (int32_t d = 0; d < D; d++)
                    o[d] += pj * vj[d];
            }
        }
    }

    for (int32_t i = 0; i < rm; i++) {
        int64_t at = eng__row(&f->out, b, g->q0 + i0 + i, h);
        float *lse = &f->lse[((int64_t)b * p->heads_q + h) * f->g.rows_q + g->q0 + i0 + i];
        if (rsum[i] == 0.0f) { /* the row sees no key */
            for (int32_t d = 0; d < D; d++)
                dtype_store(f->out.data, p->dtype, at + d, 0.0f);
            *lse = INFINITY;
            continue;
        }
        const float inv = 1.0f / rsum[i];
        for (int32_t d = 0; d < D; d++)
            dtype_store(f->out.data, p->dtype, at + d, O[i * D + d] * inv);
        *lse = rmax[i] + logf(rsum[i]);
    }
}

int eng_forward(struct eng *e, const struct attn_problem *p, const struct attn_config *cfg,
                struct attn_tensor out, float *lse, struct attn_tensor q, struct attn_tensor k,
                struct attn_tensor v, struct attn_config *ret_cfg)
{
    if (!e || !lse)
        return -EINVAL;
    struct fwd f = {.p = p, .out = out, .q = q, .k = k, .v = v, .lse = lse};
    /* The forward has no schedule; only the tile sizes matter. Never run auto for it. */
    struct attn_config c, fc = {SCHED_ASCENDING, 0, 0, 0, 0};
    if (cfg) {
        fc = *cfg;
        fc.sched = SCHED_ASCENDING;
    }
    struct sched geo;
    int rc = eng__prepare(e, p, &fc, &c, &geo);
    if (rc)
        return rc;
    const int32_t VB = attn_view_batch(p), Rq = attn_view_rows_q(p), Rk = attn_view_rows_k(p);
    if (attn_check_tensor(&q, VB, Rq, p->heads_q, p->head_dim, 0) ||
        attn_check_tensor(&k, VB, Rk, p->heads_kv, p->head_dim, 0) ||
        attn_check_tensor(&v, VB, Rk, p->heads_kv, p->head_dim, 0) ||
        attn_check_tensor(&out, VB, Rq, p->heads_q, p->head_dim, 1))
        return -EINVAL;
    if (p->dtype == DTYPE_F64) {
        if ((rc = eng__forward_f64(e, p, out, lse, q, k, v)))
            return rc;
        if (ret_cfg)
            *ret_cfg = c;
        return 0;
    }
    f.bm = c.block_m;
    f.bn = c.block_n;
    f.group = p->heads_q / p->heads_kv;
    struct eng__carver count = {NULL, 0};
    f.per_thread = (fwd_thread_bytes(f.bm, f.bn, p->head_dim, &count) + ENG__ALIGN - 1) &
                   ~(size_t)(ENG__ALIGN - 1);
    /* count, then carve: the segments, then each thread's scratch */
    unsigned char *base = NULL;
    for (int pass = 0; pass < 2; pass++) {
        struct eng__carver a = {base, 0};
        if ((rc = eng__segments(p, &c, &a, &f.g)) != 0)
            return rc;
        f.thread_mem = eng__carve(&a, f.per_thread * (size_t)eng_threads(e));
        void *mem = base;
        if (!base && (rc = eng__arena(e, a.used, &mem)))
            return rc;
        base = mem;
    }
    eng__op_begin(e);
    eng__for_each(e, f.g.tasks, fwd_task, &f);
    if ((rc = eng__op_end(e)))
        return rc;
    if (ret_cfg)
        *ret_cfg = c;
    return 0;
}
