// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_auto.h - which schedule SCHED_AUTO names on the CUDA backend (attn_cuda.cu's
 * prepare()). A fixed function of the GPU's architecture and the shape: shift, the
 * fastest deterministic schedule of these kernels almost everywhere; spt where a window
 * leaves a band; and on an architecture with a measured table (attn_auto_table.h,
 * generated from stored bench runs by scripts/auto_table.py: so far sm_90) the table's
 * schedule for its head dims and masks. docs/schedules.md ("The DAG model and `auto`")
 * gives the measurements and the thresholds. Plain C, no CUDA: the CPU tests call it.
 */
#ifndef DASH_ATTN_AUTO_H
#define DASH_ATTN_AUTO_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* (inside the block on purpose: sched.h has no C++ guards of its own, and attn_cuda.cu
 * includes this header first, so its declarations must get C linkage here) */
#include "kernels/sched/sched.h"

/* One row of a measured table: on compute capability cc (major * 10 + minor), a problem
 * of this head dim (96 as the caller asked it, not the 128 it runs widened; the other widened
 * dims as the width they run at, which the table names) and mask,
 * without a band, gets `sched` for SCHED_AUTO. */
struct cuattn_auto_entry {
    int32_t cc, head_dim;
    enum sched_mask mask;
    enum sched_kind sched;
};

/* The deterministic schedule SCHED_AUTO names for a backward on a GPU of compute
 * capability cc (major * 10 + minor, e.g. 90) at this head dim and mask (the plain mask
 * the kernels run: a window that leaves no band counts as the mask it reaches); band != 0
 * where a window leaves a band. spt for a band; else the measured table's entry for cc,
 * head_dim and mask, where there is one; else shift. Depends on nothing else (not the SM
 * count, not timing or load), so the same build on the same GPU model names the same
 * schedule - and gives the same bits - every time. Any thread. */
enum sched_kind cuattn_auto_schedule(int32_t cc, int32_t head_dim, enum sched_mask mask, int band);

/* cuattn_auto_schedule for problem p (its head dim as attn_cuda.cu's auto_problem hands it:
 * 96 as asked, the other widened dims at their width): band and mask from its window. A dense problem's window is judged on its own
 * lengths (a window past them is the plain mask, which the dense kernels serve); a packed
 * batch's on the window alone - its lengths are its longest sequence's, so judging on them
 * would let one sequence's schedule, and bits, depend on what it is packed with. */
struct attn_problem;
enum sched_kind cuattn_auto_for(int32_t cc, const struct attn_problem *p);

#ifdef __cplusplus
}
#endif

#endif
