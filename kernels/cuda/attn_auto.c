// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_auto.c - SCHED_AUTO's resolution on the CUDA backend (attn_auto.h): a band's rule,
 * then the measured table of the GPU's architecture, then shift.
 */
#include "kernels/cuda/attn_auto.h"

#include "kernels/cuda/attn_auto_table.h"

#include "kernels/attn/problem.h"

#include <stddef.h>

enum sched_kind cuattn_auto_schedule(int32_t cc, int32_t head_dim, enum sched_mask mask, int band)
{
    /* descending and spt ran 9-13% faster than shift at windows of 1k and 4k over 16k
     * tokens, spt ahead of descending since the window kernel loads Q and dO by TMA
     * (docs/schedules.md); the dense bench runs that make the table have no bands */
    if (band)
        return SCHED_SPT;
    for (size_t i = 0; i < sizeof cuattn_auto_table / sizeof cuattn_auto_table[0]; i++) {
        const struct cuattn_auto_entry *e = &cuattn_auto_table[i];
        if (e->cc == cc && e->head_dim == head_dim && e->mask == mask)
            return e->sched;
    }
    return SCHED_SHIFT;
}

enum sched_kind cuattn_auto_for(int32_t cc, const struct attn_problem *p)
{
    /* a packed batch: no length clamps the window (attn_window_of's rule at lengths no
     * sequence reaches) */
    const int32_t sq = p->cu_seqlens_q ? INT32_MAX : p->seqlen_q, sk = p->cu_seqlens_q ? INT32_MAX : p->seqlen_k;
    const int band = attn_window_bands(p, sq, sk);
    /* a window that leaves no band is the plain mask it reaches: full with right 0 is causal */
    const enum sched_mask mask = p->window && !band && p->window_right == 0 ? SCHED_MASK_CAUSAL : p->mask;
    return cuattn_auto_schedule(cc, p->head_dim, mask, band);
}
