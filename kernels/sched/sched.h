// SPDX-License-Identifier: BSD-3-Clause
/*
 * sched.h - backward-pass schedules: who visits which dQ tile when, and in which order the
 * partial sums of each dQ tile are added.
 *
 * The attention backward runs over *units*: one kv-tile n of one (batch, q-head) pair. A unit
 * visits every q-tile m that the mask lets it touch, computes that tile's dQ partial sum and
 * adds it into a shared fp32 accumulator. A deterministic schedule fixes, for every dQ tile,
 * the order of those additions: each addition has a *rank*, and the worker adding it waits
 * until the tile's counter equals its rank, adds, then increments the counter.
 *
 * Units are grouped into *jobs* (what one virtual SM runs back to back; a job is one unit,
 * or a (long, short) pair of kv-tiles for causal shift) and jobs are listed in a *dispatch
 * order*. The order of additions depends on the shape, the tile sizes and a virtual wave
 * size W only - never on the real SM count, the grid or the thread count - so the same
 * request gives the same bits on every machine.
 *
 *   schedule    jobs            dispatch          visits q-tiles    adds into dQ[m] in order
 *   ascending   one kv-tile     n ascending       m ascending       n ascending (FA3 original)
 *   descending  one kv-tile     n ascending       m descending      n ascending (DASH)
 *   spt         one kv-tile     n descending      m ascending       n descending (FA3 SPT)
 *   shift       W-chunks; pairs chunk by chunk    rotated by slot   (chunk, step, slot) (DASH)
 *   atomic      one kv-tile     n ascending       m ascending       any (not reproducible)
 *
 * Shift. The jobs of one head are cut into chunks of at most W consecutive jobs; all heads'
 * chunk 0 come first in dispatch order, then all heads' chunk 1, and so on. Inside a chunk
 * the job in slot i starts its walk over the shared rectangle of q-tiles [rs, M) at tile
 * rs + i and wraps, so jobs that run at the same time touch different dQ tiles. Full mask:
 * a job is one kv-tile and rs = 0. Causal (two stages): job k is kv-tile k (long) followed
 * by kv-tile N-1-k (short); the long tile walks the rectangle, then its private triangle
 * below rs upward; the short tile then walks down from M-1. Ranks are the order of the
 * (chunk, step within the job, slot) keys of the additions into a tile. That key order is
 * a total order that agrees with every job's program order, so if the W jobs of a chunk run
 * concurrently no wait can ever form a cycle - whatever the tile ratio (64x96 included) -
 * and for lock-step execution it is exactly the order in which additions arrive, so nobody
 * waits. It reproduces the DASH fork's orders for its integer-ratio examples.
 *
 * Deadlock freedom. ascending/descending/spt wait only on units earlier in dispatch order,
 * so any number of workers taking jobs in dispatch order finishes. shift waits on jobs of
 * the same chunk, so it needs at least min(W, jobs in a chunk) workers running at once;
 * a machine with P >= W workers taking jobs in dispatch order (statically j mod P or
 * dynamically) cannot deadlock. tests/test_sched.c checks both by exhaustive simulation.
 *
 * Masks: full, and causal aligned to the bottom-right corner as flash-attn >= 2.1 does
 * (query i sees key j iff j <= i + seqlen_k - seqlen_q), narrowed by a sliding window to a
 * band. Everything below is written in terms of the per-unit q range [m_lo(n), m_hi(n))
 * and the per-tile contributor range [n_lo(m), n_hi(m)), which the band supplies; shift on
 * a band walks each tile's own range (sched__band_shift_rank). A packed batch is one
 * schedule per sequence (docs/schedules.md).
 *
 * All indices and counters are 32-bit; sched_init() rejects shapes whose tile or job
 * counts would not fit, so nothing here can overflow. Everything but sched_init() and the
 * name helpers is a pure inline function usable from C and from CUDA device code.
 */
#ifndef DASH_SCHED_H
#define DASH_SCHED_H

#include <stdint.h>

#ifdef __CUDACC__
#define SCHED_FN static inline __host__ __device__
#else
#define SCHED_FN static inline
#endif

/* Numbered as the protocol's Schedule and dash.h's dash_schedule (dashd asserts it at
 * compile time and converts by a cast): AUTO first, then the schedules a kernel runs,
 * SCHED_ATOMIC .. SCHED_KIND_COUNT - 1. */
enum sched_kind {
    SCHED_AUTO = 0, /* resolved by dag_auto() before sched_init() */
    SCHED_ATOMIC,
    SCHED_ASCENDING,
    SCHED_DESCENDING,
    SCHED_SPT,
    SCHED_SHIFT,
    SCHED_KIND_COUNT
};

enum sched_mask { SCHED_MASK_FULL = 0, SCHED_MASK_CAUSAL, SCHED_MASK_COUNT };

/* The fleet-wide default virtual wave size. It must not exceed the SM count of any GPU we
 * serve (shift needs W concurrent workers); 64 fits an H20 (78 SMs) and every larger part. */
#define SCHED_W_DEFAULT 64
#define SCHED_W_MAX 4096

/* What a schedule is a function of. heads counts query heads (a GQA kv head serves several).
 * A window (flash-attn's window_size, kernels/attn/problem.h) narrows the mask to a band:
 * with `window` set, query i sees key j only if i+off-window_left <= j <= i+off+window_right,
 * off = seqlen_k - seqlen_q, -1 meaning unbounded; causal forces window_right to 0. */
struct sched_shape {
    int32_t batch, heads;
    int32_t seqlen_q, seqlen_k;
    int32_t block_m, block_n; /* q-tile rows, kv-tile rows */
    enum sched_mask mask;
    int32_t window;                    /* 0: the mask alone */
    int32_t window_left, window_right; /* >= -1 */
};

/* A resolved schedule: the shape plus derived counts. Plain data, copy it freely (it is
 * what a CUDA kernel receives by value). Invariants after sched_init(): every count below
 * is >= 1 and every product the functions form fits in int32_t. */
struct sched {
    enum sched_kind kind;
    enum sched_mask mask; /* full or causal; a band when `band` is set */
    int32_t w;
    int32_t batch, heads, seqlen_q, seqlen_k, block_m, block_n;
    int32_t m_tiles;       /* M: q-tiles per head */
    int32_t n_tiles;       /* N: kv-tiles per head */
    int32_t bh;            /* batch * heads */
    int32_t jobs_per_head; /* N, or ceil(N/2) for causal shift */
    int32_t chunks;        /* chunks per head: ceil(jobs_per_head / W) for shift, else 1 */
    int32_t jobs;          /* bh * jobs_per_head */
    int32_t paired;        /* jobs are (long, short) kv-tile pairs (causal shift) */
    int32_t band;          /* a window narrows the mask: wl, wr below */
    int32_t wl, wr;        /* the effective window, -1 unbounded (a band: not both -1, and
                            * not (-1, 0), which is the causal mask) */
};

/* One job in dispatch order. */
struct sched_job {
    int32_t bh;    /* batch * heads + head */
    int32_t k;     /* job index within its head */
    int32_t chunk; /* shift: chunk of the head; else 0 */
    int32_t slot;  /* shift: position within the chunk; else k */
    int32_t len;   /* shift: jobs in this chunk; else jobs_per_head */
};

/* Fill *ret from a shape. Returns 0, -EINVAL for a bad kind/mask/size/W (SCHED_AUTO is
 * invalid here), or -EOVERFLOW when tile or job counts would not fit in 32 bits.
 * *ret is untouched on failure. */
int sched_init(struct sched *ret, enum sched_kind kind, const struct sched_shape *shape, int32_t w);

/* "ascending", ... ; NULL for an invalid kind. */
const char *sched_kind_name(enum sched_kind kind);
/* Parse a name; returns the kind or -EINVAL. */
int sched_kind_parse(const char *name);
const char *sched_mask_name(enum sched_mask mask);
int sched_mask_parse(const char *name);
/* Whether the schedule gives the same bits on every run. */
SCHED_FN int sched_is_deterministic(enum sched_kind kind) { return kind != SCHED_ATOMIC; }

/* ---- mask geometry ---------------------------------------------------------------- */

/* Whether s is a band (a window narrows its mask). In device code it is a constant 0
 * unless the file defines SCHED_DEVICE_BAND before including this header: the dense
 * kernels' schedule arithmetic stays the dense masks' alone - with the band's branches in
 * it, ptxas spilled the hdim-128 v3 backward (108/172 B) and serialized its wgmma (C7518).
 * Only the kernels for windows and packed batches (kernels/cuda/attn_vl.cu, a file of their
 * own) define it. */
#if defined(__CUDA_ARCH__) && !defined(SCHED_DEVICE_BAND)
#define SCHED_BAND(s) ((void)(s), 0)
#else
#define SCHED_BAND(s) ((s)->band)
#endif

/* Band masks. Rows that see some key of kv-tile n, keys that some row of q-tile m sees:
 * each an interval (consecutive rows' windows overlap), clipped to the sequence; an empty
 * one gives an empty tile range. Both ends never decrease with n (with m). */
SCHED_FN void sched__band_rows(const struct sched *s, int32_t n, int64_t *lo, int64_t *hi)
{
    const int64_t off = (int64_t)s->seqlen_k - s->seqlen_q;
    const int64_t a = (int64_t)n * s->block_n;
    const int64_t b = a + s->block_n - 1 < s->seqlen_k - 1 ? a + s->block_n - 1 : s->seqlen_k - 1;
    *lo = s->wr < 0 ? 0 : a - off - s->wr;
    *hi = s->wl < 0 ? s->seqlen_q - 1 : b - off + s->wl;
    if (*lo < 0)
        *lo = 0;
    if (*hi > s->seqlen_q - 1)
        *hi = s->seqlen_q - 1;
}

SCHED_FN void sched__band_keys(const struct sched *s, int32_t m, int64_t *lo, int64_t *hi)
{
    const int64_t off = (int64_t)s->seqlen_k - s->seqlen_q;
    const int64_t c = (int64_t)m * s->block_m;
    const int64_t d = c + s->block_m - 1 < s->seqlen_q - 1 ? c + s->block_m - 1 : s->seqlen_q - 1;
    *lo = s->wl < 0 ? 0 : c + off - s->wl;
    *hi = s->wr < 0 ? s->seqlen_k - 1 : d + off + s->wr;
    if (*lo < 0)
        *lo = 0;
    if (*hi > s->seqlen_k - 1)
        *hi = s->seqlen_k - 1;
}

/* First q-tile that kv-tile n contributes to. Full and causal: never beyond M-1 (with
 * bottom-right causal alignment the last key of every kv-tile is seen by the last query).
 * A band may leave a kv-tile unseen: then m_lo == m_hi. */
SCHED_FN int32_t sched_m_lo(const struct sched *s, int32_t n)
{
    if (SCHED_BAND(s)) {
        int64_t lo, hi;
        sched__band_rows(s, n, &lo, &hi);
        return lo > hi ? 0 : (int32_t)(lo / s->block_m);
    }
    if (s->mask == SCHED_MASK_FULL)
        return 0;
    /* smallest m whose last row i satisfies i + (Sk - Sq) >= n*Bn */
    int32_t t = (n * s->block_n - s->seqlen_k) + s->seqlen_q;
    return t <= 0 ? 0 : t / s->block_m;
}

SCHED_FN int32_t sched_m_hi(const struct sched *s, int32_t n)
{
    if (SCHED_BAND(s)) {
        int64_t lo, hi;
        sched__band_rows(s, n, &lo, &hi);
        return lo > hi ? 0 : (int32_t)(hi / s->block_m + 1);
    }
    return s->m_tiles;
}

SCHED_FN int32_t sched_n_lo(const struct sched *s, int32_t m)
{
    if (SCHED_BAND(s)) {
        int64_t lo, hi;
        sched__band_keys(s, m, &lo, &hi);
        return lo > hi ? 0 : (int32_t)(lo / s->block_n);
    }
    return 0;
}

/* One past the last kv-tile that contributes to q-tile m (== n_lo: the tile sees no key). */
SCHED_FN int32_t sched_n_hi(const struct sched *s, int32_t m)
{
    if (SCHED_BAND(s)) {
        int64_t lo, hi;
        sched__band_keys(s, m, &lo, &hi);
        return lo > hi ? 0 : (int32_t)(hi / s->block_n + 1);
    }
    if (s->mask == SCHED_MASK_FULL)
        return s->n_tiles;
    int32_t last_row = (m + 1) * s->block_m;
    if (last_row > s->seqlen_q)
        last_row = s->seqlen_q;
    int32_t last_key = (last_row - 1 - s->seqlen_q) + s->seqlen_k;
    if (last_key < 0)
        return 0;
    int32_t n = last_key / s->block_n + 1;
    return n < s->n_tiles ? n : s->n_tiles;
}

/* How many additions dQ tile m receives; its counter ends at this value. */
SCHED_FN int32_t sched_contributors(const struct sched *s, int32_t m)
{
    return sched_n_hi(s, m) - sched_n_lo(s, m);
}

/* ---- jobs ----------------------------------------------------------------------------- */

/* The j-th job in dispatch order, 0 <= j < s->jobs. */
SCHED_FN struct sched_job sched_job_at(const struct sched *s, int32_t j)
{
    struct sched_job J;
    if (s->kind != SCHED_SHIFT || s->chunks == 1) {
        J.bh = j / s->jobs_per_head;
        J.k = j - J.bh * s->jobs_per_head;
        J.chunk = 0;
        J.slot = J.k;
        J.len = s->jobs_per_head;
        return J;
    }
    /* Full chunks (W jobs per head) come first, then the last, shorter chunk of each head.
     * bh * W < jobs here, because chunks > 1 means W < jobs_per_head. */
    int32_t per_chunk = s->bh * s->w;
    int32_t full_jobs = (s->chunks - 1) * per_chunk;
    int32_t rem;
    if (j < full_jobs) {
        J.chunk = j / per_chunk;
        rem = j - J.chunk * per_chunk;
        J.len = s->w;
    } else {
        J.chunk = s->chunks - 1;
        rem = j - full_jobs;
        J.len = s->jobs_per_head - J.chunk * s->w;
    }
    J.bh = rem / J.len;
    J.slot = rem - J.bh * J.len;
    J.k = J.chunk * s->w + J.slot;
    return J;
}

/* The job a persistent worker runs when it takes dispatch index j. Shift: each (chunk,
 * head) group's jobs in descending slot order. Shift adds into most dQ tiles in descending
 * slot order, so each addition then waits on a job that started earlier, not later. The
 * group stays contiguous in dispatch order, which is all shift's deadlock freedom needs;
 * the ranks, and so the bits, do not depend on who takes which job when. Others: job j. */
SCHED_FN struct sched_job sched_job_taken(const struct sched *s, int32_t j)
{
    struct sched_job J = sched_job_at(s, j);
    if (s->kind == SCHED_SHIFT)
        J = sched_job_at(s, j - J.slot + (J.len - 1 - J.slot));
    return J;
}

/* One past the last dispatch index whose job job j's additions may wait for (through the
 * ranks sched_rank sets). Shift's jobs of one (chunk, head) wait on each other, also on
 * those dispatched after them; every other schedule waits only on earlier jobs. A worker
 * that has not finished j's waits must not take a job below this index: it would wait on
 * itself (the CUDA backward's writer warp checks this before it takes a job). */
SCHED_FN int32_t sched_wait_end(const struct sched *s, int32_t j)
{
    if (s->kind != SCHED_SHIFT)
        return j + 1;
    struct sched_job J = sched_job_at(s, j);
    return j - J.slot + J.len;
}

/* Units in job k of a head: 2 for a causal-shift pair whose partner exists, else 1. */
SCHED_FN int32_t sched_job_stages(const struct sched *s, int32_t k)
{
    return (s->paired && k < s->n_tiles / 2) ? 2 : 1;
}

/* The kv-tile that stage 0 or 1 of job k processes. */
SCHED_FN int32_t sched_job_unit(const struct sched *s, int32_t k, int32_t stage)
{
    if (stage == 1)
        return s->n_tiles - 1 - k;
    return s->kind == SCHED_SPT ? s->n_tiles - 1 - k : k;
}

/* Number of q-tiles kv-tile n visits. */
SCHED_FN int32_t sched_unit_steps(const struct sched *s, int32_t n)
{
    return sched_m_hi(s, n) - sched_m_lo(s, n);
}

/* The steps of job k's last unit that visits any q-tile, 0 if none does. A worker whose
 * last unit had one step handed that step's dQ tile on without waiting for any turn of its
 * own, so the turn may still be far off (ascending, descending): the CUDA backward drains
 * its writer before it takes another job then. */
SCHED_FN int32_t sched_job_last_steps(const struct sched *s, int32_t k)
{
    for (int32_t stage = sched_job_stages(s, k) - 1; stage >= 0; stage--) {
        const int32_t steps = sched_unit_steps(s, sched_job_unit(s, k, stage));
        if (steps > 0)
            return steps;
    }
    return 0;
}

/* Shift: first q-tile of the rectangle that every long tile of the job's chunk shares. */
SCHED_FN int32_t sched__rect_lo(const struct sched *s, const struct sched_job *J)
{
    return sched_m_lo(s, J->chunk * s->w + J->len - 1);
}

/* The q-tile visited at `step` (0 <= step < sched_unit_steps) of the job's stage. */
SCHED_FN int32_t sched_visit(const struct sched *s, const struct sched_job *J, int32_t stage,
                             int32_t step)
{
    int32_t n = sched_job_unit(s, J->k, stage);
    int32_t lo = sched_m_lo(s, n);
    switch (s->kind) {
    case SCHED_DESCENDING:
        return sched_m_hi(s, n) - 1 - step;
    case SCHED_SHIFT: {
        if (SCHED_BAND(s)) { /* its own range, rotated by the slot */
            int32_t len = sched_m_hi(s, n) - lo;
            return lo + (J->slot % len + step) % len;
        }
        if (stage == 1)
            return s->m_tiles - 1 - step;
        int32_t rs = sched__rect_lo(s, J);
        int32_t rlen = s->m_tiles - rs;
        if (step < rlen)
            return rs + (J->slot % rlen + step) % rlen;
        return lo + (step - rlen);
    }
    default:
        return lo + step;
    }
}

/* Number of integers in [a0, a1) and [b0, b1) both. */
SCHED_FN int32_t sched__overlap(int32_t a0, int32_t a1, int32_t b0, int32_t b1)
{
    int32_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}

/* Integers u in [0, t) with (a - u) mod len < rem, for 0 <= a < len, t <= len: the
 * residues a, a-1, ..., a-t+1 (mod len) form one cyclic interval. */
SCHED_FN int32_t sched__cyc_below(int32_t a, int32_t t, int32_t len, int32_t rem)
{
    int32_t lo = a - t + 1;
    if (lo >= 0)
        return sched__overlap(lo, a + 1, 0, rem);
    return sched__overlap(0, a + 1, 0, rem) + sched__overlap(len + lo, len, 0, rem);
}

/*
 * Shift: how many additions into q-tile m come before the one of (job, stage), in O(1).
 * The additions of earlier chunks all come first. Within the chunk (R jobs from kv-tile
 * `first`, rectangle [rs, M) of length rlen) the key is (step within the job, slot):
 *   long tile of slot i', m >= rs:  step (m - rs - i') mod rlen           (< rlen)
 *   long tile of slot i', m <  rs:  step rlen + m - m_lo(first + i')       (if it sees m)
 *   short tile of slot i':          step (M - m_lo(first + i')) + (M-1-m) (>= rlen; only
 *                                   for m >= rs, as short tiles start at or above rs)
 * m_lo is non-decreasing in the kv-tile, and m_lo(n) <= x exactly for n < n_hi(x), which
 * turns every count below into a range overlap. tests/test_sched.c checks this against
 * sorting the keys one by one, on every small shape.
 */
SCHED_FN int32_t sched__shift_rank(const struct sched *s, const struct sched_job *J,
                                   int32_t stage, int32_t m)
{
    const int32_t N = s->n_tiles, M = s->m_tiles;
    const int32_t n_lo = sched_n_lo(s, m), n_hi = sched_n_hi(s, m);
    const int32_t first = J->chunk * s->w, R = J->len, i = J->slot, k = J->k;
    const int32_t half = s->paired ? N / 2 : 0; /* jobs k < half have a short tile */
    /* Earlier chunks: long tiles kv [0, first), short tiles kv [N - pairs_before, N). */
    int32_t rank = sched__overlap(0, first, n_lo, n_hi);
    if (s->paired) {
        int32_t pairs_before = first < half ? first : half;
        rank += sched__overlap(N - pairs_before, N, n_lo, n_hi);
    }
    const int32_t rs = sched__rect_lo(s, J), rlen = M - rs;
    const int32_t x = sched_m_lo(s, k); /* our long tile's first q-tile */
    /* kv-tiles n with m_lo(n) <= x, and <= x - 1 */
    const int32_t le_x = sched_n_hi(s, x), lt_x = x > 0 ? sched_n_hi(s, x - 1) : 0;
    if (stage == 1) {
        /* every long tile of the chunk has passed m (m >= rs); short tiles before us are
         * those that see m and start lower (larger m_lo of their long partner), or equal
         * and in an earlier slot */
        int32_t a = N - n_hi > first ? N - n_hi : first;
        int32_t b = first + R < half ? first + R : half;
        return rank + R + sched__overlap(a, b, le_x, N) + sched__overlap(a, k, lt_x, le_x);
    }
    if (m >= rs) {
        /* the rectangle: slot i' is at step (a - i') mod rlen, a = m - rs */
        int32_t a = m - rs, t = ((a - i) % rlen + rlen) % rlen;
        int32_t q = R / rlen, rem = R % rlen;
        return rank + t * q + sched__cyc_below(a, t, rlen, rem) + i / rlen;
    }
    /* the private triangle: long tiles that see m, starting higher, or equal and earlier */
    int32_t seen = n_hi - first < R ? n_hi - first : R; /* slots [0, seen) see m */
    return rank + sched__overlap(le_x - first, seen, 0, seen) +
           sched__overlap(lt_x - first, i, 0, i);
}

/*
 * Shift on a band: every job is one kv-tile n, which walks its own q range [m_lo, m_hi)
 * starting at m_lo + (slot mod its length) and wrapping. The key of an addition is
 * (chunk, step within the job, slot), as for the dense masks: all additions of earlier
 * chunks come first, then this chunk's in (step, slot) order - a total order that agrees
 * with every job's program order, so W concurrent jobs cannot wait in a cycle. O(R) per
 * rank (R <= W jobs in the chunk).
 */
SCHED_FN int32_t sched__band_shift_rank(const struct sched *s, const struct sched_job *J,
                                        int32_t m)
{
    const int32_t n_lo = sched_n_lo(s, m), n_hi = sched_n_hi(s, m);
    const int32_t first = J->chunk * s->w;
    int32_t rank = sched__overlap(0, first, n_lo, n_hi);
    const int32_t lo = sched_m_lo(s, J->k), len = sched_m_hi(s, J->k) - lo;
    const int32_t step = ((m - lo - J->slot % len) % len + len) % len;
    const int32_t a = first > n_lo ? first : n_lo, b = first + J->len < n_hi ? first + J->len : n_hi;
    for (int32_t n = a; n < b; n++) {
        const int32_t i = n - first, lo2 = sched_m_lo(s, n), len2 = sched_m_hi(s, n) - lo2;
        const int32_t step2 = ((m - lo2 - i % len2) % len2 + len2) % len2;
        rank += step2 < step || (step2 == step && i < J->slot);
    }
    return rank;
}

/* The counter value dQ tile m must show before the job's stage may add into it; the
 * ranks of all contributors of m are a permutation of [0, sched_contributors(m)).
 * -1 for SCHED_ATOMIC (no order). m must be a tile the unit visits. */
SCHED_FN int32_t sched_rank(const struct sched *s, const struct sched_job *J, int32_t stage,
                            int32_t m)
{
    int32_t n = sched_job_unit(s, J->k, stage);
    switch (s->kind) {
    case SCHED_ASCENDING:
    case SCHED_DESCENDING:
        return n - sched_n_lo(s, m);
    case SCHED_SPT:
        return sched_n_hi(s, m) - 1 - n;
    case SCHED_SHIFT:
        return SCHED_BAND(s) ? sched__band_shift_rank(s, J, m) : sched__shift_rank(s, J, stage, m);
    default:
        return -1;
    }
}

#endif
