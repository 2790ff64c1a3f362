// SPDX-License-Identifier: BSD-3-Clause
/*
 * dag.h - the DASH paper's DAG model of the attention backward, and the `auto` rule.
 *
 * Each addition of a schedule is two nodes: a compute node C(m, n) of cost c (the unit's
 * five GEMMs for q-tile m) and a reduction node R(m, n) of cost r (adding the dQ partial
 * into the shared accumulator). Edges: C -> R of the same addition; each SM's program
 * order (R of one step -> C of the next); and, per dQ tile, the chain of R nodes in the
 * schedule's rank order (none for `atomic`). The makespan is the longest path.
 *
 * Which SM runs which job is part of the DAG. We model what a persistent kernel with a
 * job counter does: P SMs, and an SM that becomes idle takes the next job in the
 * schedule's dispatch order (ties to the lower SM index). The model is evaluated as a
 * discrete-event simulation, which yields exactly the longest path of that DAG, and
 * reports a cycle (a wait on an addition that can never happen) as -EDEADLK.
 *
 * Costs and SM counts are model inputs; nothing here reads the machine.
 */
#ifndef DASH_DAG_H
#define DASH_DAG_H

#include "kernels/sched/sched.h"

#include <stdint.h>
#include <stdio.h>

/* Costs used by dag_auto(): compute 1, reduction 0.25 (the ratio the DASH paper's
 * simulations use; a later issue may fit them to measurements). */
#define DAG_AUTO_C 1.0
#define DAG_AUTO_R 0.25
/* dag_auto() models at most this many additions; larger shapes are modelled on fewer heads
 * and, if still too large, on coarser tiles (see dag_auto). */
#define DAG_AUTO_MAX_EVENTS (1 << 18)

struct dag_stats {
    double makespan;   /* longest path */
    double work;       /* sum of all node costs */
    double wait;       /* summed time SMs spent blocked on a reduction chain */
    int64_t additions; /* number of (C, R) pairs */
};

/* Called once per addition as the model executes it (in execution order). */
typedef void (*dag_visit_fn)(void *ctx, int32_t sm, int32_t bh, int32_t m, int32_t n,
                             double c_start, double r_start, double r_end);

/* Model schedule s on `sms` SMs with costs c, r >= 0 (SMs beyond the number of jobs never
 * get one and are not modelled). Fills *ret and returns 0 (*ret untouched on failure);
 * -EINVAL for bad arguments, -ENOMEM, or -EDEADLK if the schedule cannot complete on that
 * many SMs (shift with fewer SMs than jobs in a chunk). `visit` may be NULL. */
int dag_model(const struct sched *s, int32_t sms, double c, double r, dag_visit_fn visit,
              void *ctx, struct dag_stats *ret);

/* dag_model() for a packed batch: one schedule per sequence (all of one kind, each of
 * batch 1 with the sequence's lengths), their jobs dispatched sequence after sequence, each
 * sequence with dQ tiles of its own. visit's bh numbers the (sequence, head) pairs in
 * order. Same returns, plus -EINVAL for mixed kinds and -EOVERFLOW past 32-bit job counts. */
int dag_model_seqs(const struct sched *seqs, int32_t nseq, int32_t sms, double c, double r,
                   dag_visit_fn visit, void *ctx, struct dag_stats *ret);

/* Write the DAG of dag_model() as Graphviz DOT to f, nodes labelled with their start
 * times and SMs. Same returns as dag_model(), plus -EIO if writing fails. On failure f may
 * hold part of a graph: write to a buffer first if that matters. */
int dag_write_dot(FILE *f, const struct sched *s, int32_t sms, double c, double r);

/*
 * The `auto` rule: the deterministic schedule (ascending, descending, spt, shift) with the
 * smallest modelled makespan for this shape, modelled on W SMs (the virtual machine, so
 * the choice - like the bits - is the same on every GPU) with DAG_AUTO_C/DAG_AUTO_R. Ties
 * go to the simpler schedule, in that list's order. Shapes with more than
 * DAG_AUTO_MAX_EVENTS additions are modelled with as few heads as keep it under the cap
 * (at least one), then with tiles doubled until one head fits. Returns 0 or a negative code.
 */
int dag_auto(const struct sched_shape *shape, int32_t w, enum sched_kind *ret_kind);

/*
 * `auto` for a packed batch (one schedule per sequence, kernels/attn/problem.h): resolved
 * with dag_auto() on one sequence's shape. By default the sequence with the most work
 * (seqlen_q * seqlen_k, the first of equals) - which decides the makespan, and changes with
 * what is packed. Batch invariant: a reference sequence of DAG_AUTO_REF_LEN rows each side
 * and one head, with the batch's mask, window and tiles, so the choice (and every
 * sequence's bits) does not depend on the other sequences.
 */
#define DAG_AUTO_REF_LEN 4096
/* The index of the sequence auto models (cu_q, cu_k: batch + 1 offsets each), or -1 when
 * no sequence has both queries and keys. */
int32_t dag_auto_packed_seq(const int32_t *cu_q, const int32_t *cu_k, int32_t batch);
/* *shape as the batch-invariant reference: batch 1, heads 1, DAG_AUTO_REF_LEN each side. */
void dag_auto_packed_ref(struct sched_shape *shape);

/* The last DAG_AUTO_CACHE answers of dag_auto(), so a backend pays for the model once per
 * shape. Zero-initialise it. Not thread-safe: one per engine. */
#define DAG_AUTO_CACHE 16
struct dag_auto_cache {
    struct {
        int valid;
        struct sched_shape shape; /* compared as bytes: callers zero its padding */
        int32_t w;
        enum sched_kind kind;
    } entry[DAG_AUTO_CACHE];
    int32_t next;
};

/* dag_auto() through the cache. shape's padding bytes must be zero (memset it before
 * filling the fields). Same returns as dag_auto(). */
int dag_auto_cached(struct dag_auto_cache *c, const struct sched_shape *shape, int32_t w,
                    enum sched_kind *ret_kind);

#endif
