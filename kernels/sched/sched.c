// SPDX-License-Identifier: BSD-3-Clause
/*
 * sched.c - the host-only part of the schedule library: validating a shape into a
 * struct sched, and the names of schedules and masks. The schedule functions themselves
 * are inline in sched.h so CUDA kernels can call them.
 */
#include "kernels/sched/sched.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

static const char *const kind_names[SCHED_KIND_COUNT] = {
    [SCHED_ATOMIC] = "atomic",         [SCHED_ASCENDING] = "ascending",
    [SCHED_DESCENDING] = "descending", [SCHED_SPT] = "spt",
    [SCHED_SHIFT] = "shift",           [SCHED_AUTO] = "auto",
};

static const char *const mask_names[SCHED_MASK_COUNT] = {
    [SCHED_MASK_FULL] = "full",
    [SCHED_MASK_CAUSAL] = "causal",
};

const char *sched_kind_name(enum sched_kind kind)
{
    if ((int)kind < 0 || kind >= SCHED_KIND_COUNT)
        return NULL;
    return kind_names[kind];
}

int sched_kind_parse(const char *name)
{
    if (!name)
        return -EINVAL;
    for (int i = 0; i < SCHED_KIND_COUNT; i++)
        if (strcmp(name, kind_names[i]) == 0)
            return i;
    return -EINVAL;
}

const char *sched_mask_name(enum sched_mask mask)
{
    if ((int)mask < 0 || mask >= SCHED_MASK_COUNT)
        return NULL;
    return mask_names[mask];
}

int sched_mask_parse(const char *name)
{
    if (!name)
        return -EINVAL;
    for (int i = 0; i < SCHED_MASK_COUNT; i++)
        if (strcmp(name, mask_names[i]) == 0)
            return i;
    return -EINVAL;
}

int sched_init(struct sched *ret, enum sched_kind kind, const struct sched_shape *shape, int32_t w)
{
    if (!ret || !shape)
        return -EINVAL;
    if ((int)kind <= (int)SCHED_AUTO || kind >= SCHED_KIND_COUNT)
        return -EINVAL;
    if ((int)shape->mask < 0 || shape->mask >= SCHED_MASK_COUNT)
        return -EINVAL;
    if (shape->batch < 1 || shape->heads < 1 || shape->seqlen_q < 1 || shape->seqlen_k < 1 ||
        shape->block_m < 1 || shape->block_n < 1 || w < 1 || w > SCHED_W_MAX)
        return -EINVAL;
    if (shape->window && (shape->window_left < -1 || shape->window_right < -1))
        return -EINVAL;

    /* Every product formed in sched.h is bounded by one of these. Row indices reach
     * (m+1)*block_m < seqlen_q + block_m, and the causal offsets add or subtract a
     * sequence length from a value in [-seqlen, seqlen]. */
    const int64_t lim = INT32_MAX;
    if ((int64_t)shape->seqlen_q + shape->block_m > lim ||
        (int64_t)shape->seqlen_k + shape->block_n > lim ||
        (int64_t)shape->seqlen_q + shape->seqlen_k > lim)
        return -EOVERFLOW;
    int64_t m_tiles = ((int64_t)shape->seqlen_q + shape->block_m - 1) / shape->block_m;
    int64_t n_tiles = ((int64_t)shape->seqlen_k + shape->block_n - 1) / shape->block_n;
    int64_t bh = (int64_t)shape->batch * shape->heads;
    /* Steps within a causal-shift job reach 2*M; dQ tiles number bh*M, units bh*N. */
    if (bh > lim || bh * m_tiles > lim || bh * n_tiles > lim || 2 * m_tiles > lim)
        return -EOVERFLOW;

    struct sched s = {0};
    s.kind = kind;
    s.mask = shape->mask;
    s.w = w;
    s.batch = shape->batch;
    s.heads = shape->heads;
    s.seqlen_q = shape->seqlen_q;
    s.seqlen_k = shape->seqlen_k;
    s.block_m = shape->block_m;
    s.block_n = shape->block_n;
    s.m_tiles = (int32_t)m_tiles;
    s.n_tiles = (int32_t)n_tiles;
    s.bh = (int32_t)bh;
    /* The effective window (kernels/attn/problem.c's attn_window_of, the same rule): causal
     * is right 0, and a side wide enough to see every key is unbounded, so a window past
     * the length is the plain mask, schedule and bits included. */
    int32_t wl = shape->window ? shape->window_left : -1;
    int32_t wr = shape->mask == SCHED_MASK_CAUSAL ? 0 : shape->window ? shape->window_right : -1;
    if (wl >= shape->seqlen_k - 1)
        wl = -1;
    if (wr > 0 && wr >= shape->seqlen_q - 1)
        wr = -1;
    s.wl = wl;
    s.wr = wr;
    if (shape->window) { /* without one, the mask stays what it was (bits included) */
        if (wl < 0 && wr < 0)
            s.mask = SCHED_MASK_FULL;
        else if (wl < 0 && wr == 0)
            s.mask = SCHED_MASK_CAUSAL;
        else
            s.band = 1;
    }
    s.paired = kind == SCHED_SHIFT && s.mask == SCHED_MASK_CAUSAL && !s.band;
    s.jobs_per_head = s.paired ? (s.n_tiles + 1) / 2 : s.n_tiles;
    s.chunks = kind == SCHED_SHIFT ? (s.jobs_per_head + w - 1) / w : 1;
    s.jobs = (int32_t)(bh * s.jobs_per_head);
    *ret = s;
    return 0;
}
