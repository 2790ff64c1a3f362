/*
 * backend.h - what the daemon needs from whatever computes attention.
 *
 * A backend is a set of functions over an opaque implementation, in the style of Redis's
 * ae event-loop backends: the CPU one (backend_cpu.c) wraps the kernels/ engine; a CUDA
 * one is added by supplying the same functions. The worker thread calls forward and
 * backward, one at a time; check and the plain fields are read from the loop thread at
 * any time, so check must not touch state that forward/backward use.
 *
 * The tensors a backend receives are daemon-owned memory (dense scratch copies of the
 * client's tensors, see job.c), never client memory, so a backend cannot fault on a
 * buffer the client shrank.
 */
#ifndef DASHD_BACKEND_H
#define DASHD_BACKEND_H

#include "validate.h"

#include "kernels/engine.h"

#include <stddef.h>
#include <stdint.h>

/* One op's arguments. Forward uses q, k, v (in) and out, lse (out); backward uses
 * q, k, v, out, lse, dout (in) and dq, dk, dv (out). Shapes as in kernels/engine.h. */
struct backend_op {
    const struct eng_problem *prob;
    const struct eng_config *cfg; /* as requested; zeros and SCHED_AUTO mean defaults */
    struct eng_tensor q, k, v, out, dout, dq, dk, dv;
    float *lse; /* (batch, heads_q, seqlen_q), dense */
};

struct backend {
    const char *name;   /* "cpu", "cuda": what OpResult.backend and HelloReply.backend say */
    char device[64];    /* a readable description for HelloReply.device and the log */
    struct val_limits limits;
    void *impl;
    /* Worker threads the backend computes with (Stats.threads). */
    int32_t (*threads)(void *impl);
    /* Anything the backend refuses that validation cannot know (index widths, tile
     * geometry): 0 or a DASH_* code with a reason in msg. Pure, thread-safe. */
    int (*check)(void *impl, const struct val_plan *plan, char *msg, size_t msglen);
    /* Run an op. Returns 0 and the configuration actually used in *ret_cfg (never
     * SCHED_AUTO, no zero fields), or a DASH_* code with a reason in msg. */
    int (*forward)(void *impl, const struct backend_op *op, char *msg, size_t msglen,
                   struct eng_config *ret_cfg);
    int (*backward)(void *impl, const struct backend_op *op, char *msg, size_t msglen,
                    struct eng_config *ret_cfg);
    void (*free)(void *impl);
};

/* The CPU engine with `threads` workers (1..POOL_THREADS_MAX), or NULL. */
struct backend *backend_cpu_new(int32_t threads);

/* Accepts NULL. */
static inline void backend_free(struct backend *b)
{
    if (b)
        b->free(b->impl);
}

#endif
