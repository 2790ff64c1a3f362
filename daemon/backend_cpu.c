// SPDX-License-Identifier: BSD-3-Clause
/*
 * backend_cpu.c - the CPU engine (kernels/cpu/engine.h) as a dashd backend.
 *
 * The engine validates its arguments itself, but the daemon has already checked them
 * against the protocol's rules; what can still fail here is the engine's own limits
 * (32-bit tile and index counts), which check() reports before a request is queued, and
 * running out of memory. Engine codes are turned into the protocol's codes here, so the
 * rest of the daemon never sees a bare -EINVAL from the engine.
 */
#include "backend.h"

#include "proto/errors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

struct cpu {
    struct backend base; /* first, so free() can find the whole */
    struct eng *eng;
};

static int32_t cpu_threads(void *impl)
{
    struct cpu *c = impl;
    return eng_threads(c->eng);
}

/* An engine code as a protocol code, with a reason. */
static int map_engine_error(int rc, const struct attn_problem *p, int backward, size_t work,
                            size_t work_max, char *msg, size_t msglen)
{
    switch (rc) {
    case -ENOMEM:
        snprintf(msg, msglen, "the CPU engine ran out of memory");
        return DASH_ENOMEM;
    case -EOVERFLOW:
        snprintf(msg, msglen, "the shape is too large for the CPU engine's 32-bit indices");
        return DASH_ESHAPE;
    case -E2BIG:
        snprintf(msg, msglen, "the CPU engine needs %zu bytes of working memory for this %s "
                 "(%s accumulators%s), more than the %zu left to it under dashd's cap on one "
                 "op's host memory (--op-memory) once the tensors are copied", work,
                 backward ? "backward" : "forward", p->dtype == DTYPE_F64 ? "double" : "float",
                 backward && p->heads_q > p->heads_kv ? ", per query head for GQA's dK and dV" : "",
                 work_max);
        return DASH_ENOMEM;
    case -ENOTSUP:
        if (p->head_dim < ENG_HEAD_DIM_MIN || p->head_dim > ENG_HEAD_DIM_MAX) {
            snprintf(msg, msglen, "head dim %d is outside %d..%d", p->head_dim, ENG_HEAD_DIM_MIN,
                     ENG_HEAD_DIM_MAX);
            return DASH_EHEADDIM;
        }
        snprintf(msg, msglen, "the CPU engine cannot serve this dtype");
        return DASH_EBADDTYPE;
    case -EINVAL:
        snprintf(msg, msglen, "the CPU engine refused the shapes or strides");
        return DASH_ESHAPE;
    case -ECANCELED:
        snprintf(msg, msglen, "stopped midway: the client process is gone");
        return DASH_ECANCELED;
    default:
        snprintf(msg, msglen, "the CPU engine failed: %s", dash_strerror(rc));
        return rc < 0 ? rc : DASH_EIO;
    }
}

static int cpu_check(void *impl, const struct val_plan *plan, char *msg, size_t msglen)
{
    (void)impl;
    const struct attn_problem *p = &plan->prob;
    int rc = eng_check_problem(p);
    if (rc)
        return map_engine_error(rc, p, 0, 0, 0, msg, msglen);
    /* the engine's own checks of the configuration, by its own code (eng__prepare's) */
    rc = eng_check_config(p, &plan->cfg);
    if (rc == -EINVAL) {
        snprintf(msg, msglen, "the schedule refuses wave %d with blocks %dx%d",
                 plan->cfg.w ? plan->cfg.w : SCHED_W_DEFAULT,
                 plan->cfg.block_m ? plan->cfg.block_m : ENG_BLOCK_DEFAULT,
                 plan->cfg.block_n ? plan->cfg.block_n : ENG_BLOCK_DEFAULT);
        return DASH_ESCHED;
    }
    return rc ? map_engine_error(rc, p, 0, 0, 0, msg, msglen) : 0;
}

/* The engine's working memory kept between ops; more (a large op's) is given back after
 * the op, as the worker's scratch is (job.c), so a client that came and went with large
 * ops does not leave the daemon holding their memory. */
#define CPU_ARENA_KEEP ((size_t)64 << 20)

static int cpu_forward(void *impl, const struct backend_op *op, char *msg, size_t msglen,
                       struct attn_config *ret_cfg)
{
    struct cpu *c = impl;
    eng_set_stop(c->eng, op->stop, op->stop_ctx);
    eng_set_work_max(c->eng, (size_t)op->work_max);
    int rc = eng_forward(c->eng, op->prob, op->cfg, op->out, op->lse, op->q, op->k, op->v, ret_cfg);
    eng_set_stop(c->eng, NULL, NULL);
    eng_set_work_max(c->eng, 0);
    eng_trim(c->eng, CPU_ARENA_KEEP);
    return rc ? map_engine_error(rc, op->prob, 0, eng_work_refused(c->eng), (size_t)op->work_max, msg,
                                 msglen)
              : 0;
}

static int cpu_backward(void *impl, const struct backend_op *op, char *msg, size_t msglen,
                        struct attn_config *ret_cfg)
{
    struct cpu *c = impl;
    eng_set_stop(c->eng, op->stop, op->stop_ctx);
    eng_set_work_max(c->eng, (size_t)op->work_max);
    int rc = eng_backward(c->eng, op->prob, op->cfg, op->dq, op->dk, op->dv, op->q, op->k, op->v,
                          op->out, op->lse, op->dout, ret_cfg);
    eng_set_stop(c->eng, NULL, NULL);
    eng_set_work_max(c->eng, 0);
    eng_trim(c->eng, CPU_ARENA_KEEP);
    return rc ? map_engine_error(rc, op->prob, 1, eng_work_refused(c->eng), (size_t)op->work_max, msg,
                                 msglen)
              : 0;
}

static void cpu_free(void *impl)
{
    struct cpu *c = impl;
    eng_free(c->eng);
    free(c);
}

struct backend *backend_cpu_new(int32_t threads)
{
    struct cpu *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->eng = eng_new(threads);
    if (!c->eng) {
        free(c);
        return NULL;
    }
    struct backend *b = &c->base;
    b->name = "cpu";
    snprintf(b->device, sizeof b->device, "cpu (%d engine threads)", (int)eng_threads(c->eng));
    b->limits = (struct val_limits){.head_dim_min = ENG_HEAD_DIM_MIN,
                                    .head_dim_max = ENG_HEAD_DIM_MAX,
                                    .block_max = ENG_BLOCK_MAX,
                                    .dtypes = (1u << DTYPE_F32) | (1u << DTYPE_F16) |
                                              (1u << DTYPE_BF16) | (1u << DTYPE_F64)};
    b->buffer_kinds = 1u << SHMBUF_SHM; /* cuda_import stays NULL: no CUDA memory here */
    b->impl = c;
    b->threads = cpu_threads;
    b->check = cpu_check;
    b->forward = cpu_forward;
    b->backward = cpu_backward;
    b->free = cpu_free;
    return b;
}
