// SPDX-License-Identifier: BSD-3-Clause
/*
 * engine.h - the CPU attention engine: forward (O, LSE) and backward (dQ, dK, dV).
 *
 * This is both the reference that GPU kernels are checked against and the backend that
 * dashd serves from on a machine without a GPU. Tensors use flash-attn's layout
 * (batch, seqlen, heads, head_dim) with arbitrary element strides, stored as fp32, fp16 or
 * bf16, with all arithmetic in fp32 - or as fp64, computed in double by a plainer path
 * (engine_f64.c: for checking gradients; its bits depend on the inputs only, not on the
 * schedule or tile sizes, which are still resolved and reported). In fp64 the backward
 * recomputes each row's softmax in double and does not read lse (float).
 *
 * The backward runs the schedule's W virtual SMs on the engine's T worker threads. A
 * virtual SM takes jobs j, j+W, j+2W... (its jobs in the schedule's dispatch order), walks
 * each unit's q-tiles in the schedule's order, and adds each dQ partial into a shared fp32
 * accumulator only when that tile's counter equals the addition's rank. A thread steps
 * its virtual SMs in turn and moves past one that must wait, so T < W cannot deadlock.
 * Every value is computed by fixed code in a fixed order, so for a deterministic schedule
 * the output bytes depend on the inputs, shape, dtype, mask, scale and the engine
 * configuration below - never on T, timing or the machine's load.
 *
 * Masks: full, or causal aligned to the bottom-right corner (flash-attn >= 2.1), narrowed
 * by a sliding window; scores optionally soft-capped; a dense batch or a packed
 * variable-length one, each sequence tiled and scheduled alone (kernels/attn/problem.h,
 * docs/schedules.md). Query rows that see no key get O = 0, LSE = +inf, dQ = 0; keys no
 * query sees get dK = dV = 0.
 * GQA/MQA: heads_kv divides heads_q; query head h reads kv head h / (heads_q / heads_kv),
 * and dK/dV of a kv head are the sum over its query heads in ascending order.
 */
#ifndef DASH_ENGINE_H
#define DASH_ENGINE_H

#include "kernels/attn/problem.h"

#include <stdint.h>

#define ENG_HEAD_DIM_MIN 32
#define ENG_HEAD_DIM_MAX 256
#define ENG_BLOCK_DEFAULT 64 /* rows per q-tile and per kv-tile unless configured */
#define ENG_BLOCK_MAX 512

struct eng;

/* An engine with `threads` workers (1..POOL_THREADS_MAX), or NULL. */
struct eng *eng_new(int32_t threads);

/* Accepts NULL. */
void eng_free(struct eng *e);

/* A way to stop an op midway: the workers poll stop(ctx) between tasks (about every 16th
 * task of the op, from whichever worker runs it, so stop must be thread-safe); once it
 * returns nonzero every worker leaves after its current task or chunk of row tasks, and
 * the op returns -ECANCELED,
 * outputs unspecified. For a caller whose result nobody will read any more (dashd: the
 * client process died). NULL: never stop. Set between calls, not during one. */
typedef int (*eng_stop_fn)(void *ctx);
void eng_set_stop(struct eng *e, eng_stop_fn stop, void *ctx);

int32_t eng_threads(const struct eng *e);

/* Give back the engine's working memory (kept between calls, sized by the largest call
 * so far) if it is larger than keep bytes; the next call allocates what it needs. So one
 * large call does not pin its memory for the engine's life. Between calls only. */
void eng_trim(struct eng *e, size_t keep);

/* The most working memory (the arena above: accumulators, per-thread tiles) one op may
 * take; 0, the default: no bound. An op that would need more returns -E2BIG before it
 * computes or allocates anything, and eng_work_refused says how much it needed (dashd:
 * one op's host memory, its tensors' copies and this together, stays under a cap). */
void eng_set_work_max(struct eng *e, size_t bytes);
size_t eng_work_refused(const struct eng *e);

/* Check a problem without running it: attn_check_problem, then -ENOTSUP for a head dim
 * outside ENG_HEAD_DIM_MIN..MAX. Every dtype serves every option (windows, softcap,
 * packed batches; float64 included: engine_f64.c). */
int eng_check_problem(const struct attn_problem *p);

/* Check a configuration for a problem eng_check_problem accepts, without an engine (so
 * from any thread): what eng_forward and eng_backward would refuse of it - sizes out of
 * range (-EINVAL), a schedule that refuses them (-EINVAL), tile counts or indices past 32
 * bits (-EOVERFLOW). 0 when they would run it. */
int eng_check_config(const struct attn_problem *p, const struct attn_config *cfg);

/* Resolve defaults and SCHED_AUTO for a problem into *ret_cfg (untouched on failure).
 * Returns 0 or a negative code (-EINVAL, -ENOTSUP, -EOVERFLOW, -ENOMEM). */
int eng_resolve(struct eng *e, const struct attn_problem *p, const struct attn_config *cfg,
                struct attn_config *ret_cfg);

/*
 * Forward: out = softmax(scale * q k^T, mask) v, and lse (natural log of the softmax
 * denominator, scaled scores) as float (batch, heads_q, seqlen_q), contiguous.
 * q, out: (batch, seqlen_q, heads_q, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim);
 * a packed batch: views of batch 1 and seqlen total_q / total_k, lse (1, heads_q, total_q).
 * cfg may be NULL (defaults); ret_cfg may be NULL. One call at a time per engine.
 * Returns 0 or a negative code; outputs are unspecified on failure.
 */
int eng_forward(struct eng *e, const struct attn_problem *p, const struct attn_config *cfg,
                struct attn_tensor out, float *lse, struct attn_tensor q, struct attn_tensor k,
                struct attn_tensor v, struct attn_config *ret_cfg);

/*
 * Backward: dq, dk, dv from q, k, v, the forward's out and lse, and dout (shaped like
 * out). dq is shaped like q, dk and dv like k. One call at a time per engine.
 * Returns 0 or a negative code; outputs are unspecified on failure.
 */
int eng_backward(struct eng *e, const struct attn_problem *p, const struct attn_config *cfg,
                 struct attn_tensor dq, struct attn_tensor dk, struct attn_tensor dv,
                 struct attn_tensor q, struct attn_tensor k, struct attn_tensor v,
                 struct attn_tensor out, const float *lse, struct attn_tensor dout,
                 struct attn_config *ret_cfg);

#endif
