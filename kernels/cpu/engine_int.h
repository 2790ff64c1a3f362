// SPDX-License-Identifier: BSD-3-Clause
/*
 * engine_int.h - what engine.c (API, validation, forward) and engine_bwd.c (backward)
 * share. Not a public header.
 */
#ifndef DASH_ENGINE_INT_H
#define DASH_ENGINE_INT_H

#include "kernels/sched/dag.h"
#include "kernels/cpu/engine.h"
#include "kernels/cpu/pool.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#define ENG__ALIGN 64

struct eng {
    struct pool *pool;
    unsigned char *scratch; /* grow-only arena, reused by every call */
    size_t scratch_cap;
    size_t work_max;     /* eng_set_work_max (0: none) */
    size_t work_refused; /* what the last op refused for it needed */
    struct dag_auto_cache auto_cache;
    eng_stop_fn stop; /* eng_set_stop */
    void *stop_ctx;
    int stopped;         /* the op in progress was told to stop: workers leave (read and
                          * written with __atomic builtins: this header is C and C++) */
    uint32_t polls;      /* tasks of the op so far, while a stop is set (__atomic) */
};

/* A worker about to run `n` more tasks of an op: 1 if the op is to stop (eng_set_stop).
 * Tasks are counted over all workers, and stop() is asked whenever the count passes a
 * multiple of ENG__POLL_EVERY. Row phases count a whole chunk at once: one shared
 * read-modify-write per task would cost more than their tasks (a row's dot product). */
#define ENG__POLL_EVERY 16
static inline int eng__stopping(struct eng *e, uint32_t n)
{
    if (e->stop) {
        uint32_t was = __atomic_fetch_add(&e->polls, n, __ATOMIC_RELAXED);
        if (was / ENG__POLL_EVERY != (was + n) / ENG__POLL_EVERY && e->stop(e->stop_ctx))
            __atomic_store_n(&e->stopped, 1, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&e->stopped, __ATOMIC_RELAXED);
}

/* At the start of an op: not stopped; at its end: 0, or -ECANCELED if it was. */
static inline void eng__op_begin(struct eng *e)
{
    __atomic_store_n(&e->stopped, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&e->polls, 0, __ATOMIC_RELAXED);
}
static inline int eng__op_end(struct eng *e)
{
    return __atomic_load_n(&e->stopped, __ATOMIC_RELAXED) ? -ECANCELED : 0;
}

/* Carves aligned pieces out of the engine's arena. First pass (base == NULL) only counts. */
struct eng__carver {
    unsigned char *base;
    size_t used;
};

static inline void *eng__carve(struct eng__carver *c, size_t bytes)
{
    size_t at = (c->used + ENG__ALIGN - 1) & ~(size_t)(ENG__ALIGN - 1);
    c->used = at + bytes;
    return c->base ? c->base + at : NULL;
}

/* Make the arena at least `bytes` long. Returns it, or NULL (the old arena is kept). */
/* The op's working memory, `bytes` of the arena: 0 and *ret, -E2BIG past eng_set_work_max's
 * bound (work_refused then says how much), or -ENOMEM. */
int eng__arena(struct eng *e, size_t bytes, void **ret);

/* Validate everything both passes need and fill *ret_cfg and *ret_geo (a schedule of the
 * resolved kind, whose tile geometry both passes use). */
int eng__prepare(struct eng *e, const struct attn_problem *p, const struct attn_config *cfg,
                 struct attn_config *ret_cfg, struct sched *ret_geo);

/*
 * What the passes run over: segments, each with a schedule of its own. A dense batch is one
 * segment (the problem's schedule, batch B); a packed batch one per sequence with rows
 * (batch 1, the sequence's lengths), tiled and scheduled alone, so nothing of a sequence's
 * arithmetic depends on the others (docs/schedules.md). Forward tasks, backward jobs (in
 * the schedule's dispatch order, segment after segment) and dQ counters are numbered over
 * all segments in order.
 */
struct eng__seg {
    struct sched s;     /* its schedule; for a sequence without keys only m_tiles is used */
    int32_t q0, k0;     /* its first q and k row in the tensors' seqlen dim */
    int32_t sq, sk;     /* its lengths */
    int64_t task0;      /* forward tasks before it (s.bh * s.m_tiles each) */
    int32_t job0;       /* backward jobs before it (none for a sequence without keys) */
    int64_t tile0;      /* dQ counters before it (s.bh * s.m_tiles each) */
};

struct eng__segs {
    struct eng__seg *seg;
    int32_t count;
    int64_t tasks;      /* forward tasks */
    int32_t jobs;       /* backward jobs */
    int64_t tiles;      /* dQ tiles */
    int64_t rows_q, rows_k; /* rows per head of the q-side and k-side views (lse's last dim) */
};

/* Segments of problem p under resolved config c into *ret (seg carved from the carver,
 * filled when it has a base). 0, -EINVAL or -EOVERFLOW (job counts past 32 bits). */
int eng__segments(const struct attn_problem *p, const struct attn_config *c,
                  struct eng__carver *a, struct eng__segs *ret);

/* The segment holding forward task t / backward job j (binary search). */
int32_t eng__seg_of_task(const struct eng__segs *g, int64_t t);
int32_t eng__seg_of_job(const struct eng__segs *g, int32_t j);

/* Keys [*lo, *hi) of kv-tile rows [j0, j0 + rn) that row i of a segment sees. */
static inline void eng__visible(const struct eng__seg *g, int32_t i, int32_t j0, int32_t rn,
                                int32_t *lo, int32_t *hi)
{
    const int64_t off = (int64_t)g->sk - g->sq;
    int64_t a = g->s.wl < 0 ? 0 : i + off - g->s.wl - j0;
    int64_t b = g->s.wr < 0 ? rn : i + off + g->s.wr - j0 + 1;
    if (a < 0)
        a = 0;
    if (b > rn)
        b = rn;
    if (b < a)
        b = a;
    *lo = (int32_t)a;
    *hi = (int32_t)b;
}

/* Element offset of (b, s, h, 0). */
static inline int64_t eng__row(const struct attn_tensor *t, int64_t b, int64_t s, int64_t h)
{
    return b * t->stride[0] + s * t->stride[1] + h * t->stride[2];
}

/* Run fn(ctx, task, thread) for every task in [0, tasks) on the engine's threads; tasks
 * are handed out dynamically, so fn must not care which thread runs which task. */
typedef void (*eng__task_fn)(void *ctx, int64_t task, int32_t thread);
void eng__for_each(struct eng *e, int64_t tasks, eng__task_fn fn, void *ctx);

/* float64, computed in double (engine_f64.c): eng_forward and eng_backward hand a DTYPE_F64
 * problem here once they have checked it and its tensors. 0, -ENOMEM or -ECANCELED. */
int eng__forward_f64(struct eng *e, const struct attn_problem *p, struct attn_tensor out,
                     float *lse, struct attn_tensor q, struct attn_tensor k, struct attn_tensor v);
int eng__backward_f64(struct eng *e, const struct attn_problem *p, struct attn_tensor dq,
                      struct attn_tensor dk, struct attn_tensor dv, struct attn_tensor q,
                      struct attn_tensor k, struct attn_tensor v, struct attn_tensor out,
                      struct attn_tensor dout);

#endif
