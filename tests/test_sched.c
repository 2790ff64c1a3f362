// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_sched.c - properties of the schedule library (kernels/sched/sched.h), each checked over
 * every small shape rather than a few examples: visits cover the mask exactly once, ranks
 * are permutations, workers following the ranks never deadlock, shift's ranks are the
 * arrival order of its (chunk, step, slot) keys, and large shapes do not overflow.
 */
#include "suites.h"
#include "testutil.h"
#include "kernels/sched/sched.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------------- */

/* A sequence length that needs exactly `tiles` tiles of `block` rows, usually not a
 * multiple of the block (the remainder varies with `salt`). */
static int32_t seqlen_for(int32_t tiles, int32_t block, int32_t salt)
{
    return tiles * block - (salt % block);
}

/* Brute force over elements: may any query of q-tile m see any key of kv-tile n? The
 * window straight from its definition (flash-attn's: -1 unbounded, causal is right 0). */
static int pair_allowed(const struct sched_shape *sh, int32_t m, int32_t n)
{
    const int64_t left = sh->window ? sh->window_left : -1;
    const int64_t right = sh->mask == SCHED_MASK_CAUSAL ? 0 : sh->window ? sh->window_right : -1;
    for (int32_t i = m * sh->block_m; i < (m + 1) * sh->block_m && i < sh->seqlen_q; i++)
        for (int32_t j = n * sh->block_n; j < (n + 1) * sh->block_n && j < sh->seqlen_k; j++) {
            const int64_t diag = (int64_t)i + sh->seqlen_k - sh->seqlen_q;
            if ((left < 0 || j >= diag - left) && (right < 0 || j <= diag + right))
                return 1;
        }
    return 0;
}

struct visit {
    int32_t bh, m, n, rank, job, stage, step;
};

/* The shift key's step of (job k in `slot`, stage) at q-tile m, written from the
 * definition in docs/schedules.md rather than from sched.h's closed forms. */
static int32_t oracle_step(const struct sched *s, int32_t k, int32_t slot, int32_t rs,
                           int32_t stage, int32_t m)
{
    int32_t lo = sched_m_lo(s, k), M = s->m_tiles, rlen = M - rs;
    if (stage == 1)
        return (M - lo) + (M - 1 - m);
    if (m >= rs)
        return (m - rs + rlen - slot % rlen) % rlen;
    return rlen + (m - lo);
}

/* Shift rank by brute force: count, one by one, the additions into m with a smaller
 * (chunk, step, slot) key. */
static int32_t oracle_shift_rank(const struct sched *s, const struct sched_job *J, int32_t stage,
                                 int32_t m)
{
    int32_t n_lo = sched_n_lo(s, m), n_hi = sched_n_hi(s, m), rank = 0;
    int32_t first = J->chunk * s->w;
    int32_t rs = sched_m_lo(s, first + J->len - 1);
    int32_t my = oracle_step(s, J->k, J->slot, rs, stage, m);
    for (int32_t k = 0; k < s->jobs_per_head; k++) {
        for (int32_t st = 0; st < sched_job_stages(s, k); st++) {
            int32_t n = sched_job_unit(s, k, st);
            if (n < n_lo || n >= n_hi || (k == J->k && st == stage))
                continue;
            if (k < first) {
                rank++;
                continue;
            }
            if (k >= first + J->len)
                continue;
            int32_t t = oracle_step(s, k, k - first, rs, st, m);
            rank += t < my || (t == my && k - first < J->slot);
        }
    }
    return rank;
}

/* Every addition the schedule makes, in job/stage/step order. Caller frees. */
static struct visit *list_visits(const struct sched *s, int32_t *ret_count)
{
    int64_t cap = (int64_t)s->bh * s->m_tiles * s->n_tiles;
    struct visit *v = malloc(sizeof(*v) * (size_t)(cap ? cap : 1));
    int32_t c = 0;
    for (int32_t j = 0; j < s->jobs; j++) {
        struct sched_job J = sched_job_at(s, j);
        for (int32_t st = 0; st < sched_job_stages(s, J.k); st++) {
            int32_t n = sched_job_unit(s, J.k, st);
            for (int32_t step = 0; step < sched_unit_steps(s, n); step++) {
                if (c >= cap)
                    goto out; /* more visits than pairs: reported by the caller */
                int32_t m = sched_visit(s, &J, st, step);
                v[c++] = (struct visit){J.bh, m, n, sched_rank(s, &J, st, m), j, st, step};
            }
        }
    }
out:
    *ret_count = c;
    return v;
}

/*
 * Run the schedule on `workers` workers: worker w runs jobs w, w+workers, ... in order and
 * may add into a dQ tile only when the tile's counter equals the addition's rank. Each
 * round every worker tries its next addition; a round without progress while additions
 * remain is a deadlock. Returns 0 when all additions complete, -EDEADLK otherwise.
 */
static int simulate(const struct sched *s, int32_t workers)
{
    int32_t *counter = calloc((size_t)s->bh * s->m_tiles, sizeof(int32_t));
    int32_t *job = malloc(sizeof(int32_t) * (size_t)workers);
    int32_t *stage = calloc((size_t)workers, sizeof(int32_t));
    int32_t *step = calloc((size_t)workers, sizeof(int32_t));
    for (int32_t w = 0; w < workers; w++)
        job[w] = w;
    int rc = 0;
    for (;;) {
        int progress = 0, busy = 0;
        for (int32_t w = 0; w < workers; w++) {
            if (job[w] >= s->jobs)
                continue;
            busy = 1;
            struct sched_job J = sched_job_at(s, job[w]);
            int32_t n = sched_job_unit(s, J.k, stage[w]);
            if (sched_unit_steps(s, n) == 0) { /* a band left the kv-tile unseen */
                progress = 1;
                if (++stage[w] == sched_job_stages(s, J.k)) {
                    stage[w] = 0;
                    job[w] += workers;
                }
                continue;
            }
            int32_t m = sched_visit(s, &J, stage[w], step[w]);
            int32_t r = sched_rank(s, &J, stage[w], m);
            int32_t *ctr = &counter[(int64_t)J.bh * s->m_tiles + m];
            if (r >= 0 && *ctr != r)
                continue;
            (*ctr)++;
            progress = 1;
            if (++step[w] == sched_unit_steps(s, n)) {
                step[w] = 0;
                if (++stage[w] == sched_job_stages(s, J.k)) {
                    stage[w] = 0;
                    job[w] += workers;
                }
            }
        }
        if (!busy)
            break;
        if (!progress) {
            rc = -EDEADLK;
            break;
        }
    }
    free(counter);
    free(job);
    free(stage);
    free(step);
    return rc;
}

/*
 * A model of the CUDA backward's persistent mode with a dQ writer (kernels/cuda/attn_bwd_tc.cu,
 * v3): `ctas` CTAs take jobs from one shared counter in dispatch order, running the jobs
 * sched_job_taken names. In a CTA, the compute side runs a job's steps in order and hands
 * each step's addition (dQ tile, rank) to the writer through one of `nbuf` staging
 * buffers, waiting only for a free buffer; the writer takes the handed additions in order,
 * waits for each one's turn, adds it (freeing its buffer) and passes the tile on. With
 * `rule`, the compute side takes a new job only if every job up to sched_wait_end of its
 * last job has been taken, or its writer holds nothing (the kernel's bwd_wg_drain) - and
 * after a job whose last unit had one step, only once its writer holds nothing (the
 * one-tile kernels' wait_end = INT32_MAX, from sched_job_last_steps). Steps
 * run in a random order that favours the compute side, as on the GPU, where the writer
 * waits on turns. Returns 0 when every addition completes, -EDEADLK when nothing can move
 * while work remains.
 */
struct hand_cta {
    struct sched_job J; /* the job being computed, after the remap */
    int32_t have;       /* a job is being computed */
    int32_t stage, step;
    int32_t tile[2], rank[2]; /* handed, not yet added: a ring of nbuf (<= 2) */
    int32_t head, held;
    int32_t wait_end; /* sched_wait_end of the last job taken; INT32_MAX: drain first */
};

static int simulate_handoff(const struct sched *s, int32_t ctas, int32_t nbuf, int rule, uint64_t seed)
{
    struct tu_rng rng;
    tu_rng_init(&rng, seed);
    int32_t *counter = calloc((size_t)s->bh * s->m_tiles, sizeof(int32_t));
    struct hand_cta *c = calloc((size_t)ctas, sizeof(*c));
    int32_t *ready = malloc(sizeof(int32_t) * 2 * (size_t)ctas); /* 2i: compute i, 2i+1: writer i */
    int32_t next_job = 0, rc = 0;
    for (;;) {
        int32_t n_ready = 0, n_compute = 0, busy = 0;
        for (int32_t i = 0; i < ctas; i++) { /* what can move now; compute sides listed first */
            struct hand_cta *x = &c[i];
            if (x->have)
                busy = 1;
            if (x->have ? x->held < nbuf
                        : next_job < s->jobs && (!rule || x->held == 0 || next_job >= x->wait_end))
                ready[n_ready++] = 2 * i;
        }
        n_compute = n_ready;
        for (int32_t i = 0; i < ctas; i++) {
            struct hand_cta *x = &c[i];
            if (!x->held)
                continue;
            busy = 1;
            int32_t r = x->rank[x->head];
            if (r < 0 || counter[x->tile[x->head]] == r)
                ready[n_ready++] = 2 * i + 1;
        }
        if (!busy && next_job >= s->jobs)
            break; /* everything taken and added */
        if (n_ready == 0) {
            rc = -EDEADLK;
            break;
        }
        int32_t pick = n_compute > 0 && (tu_next(&rng) % 4 != 0 || n_compute == n_ready)
                           ? ready[tu_next(&rng) % (uint64_t)n_compute]
                           : ready[n_compute + (int32_t)(tu_next(&rng) % (uint64_t)(n_ready - n_compute))];
        struct hand_cta *x = &c[pick / 2];
        if (pick % 2) { /* the writer adds the oldest handed tile */
            counter[x->tile[x->head]]++;
            x->head = (x->head + 1) % nbuf;
            x->held--;
        } else if (!x->have) { /* the compute side takes a job */
            int32_t j = next_job++;
            x->J = sched_job_taken(s, j);
            x->wait_end = sched_job_last_steps(s, x->J.k) == 1 ? INT32_MAX : sched_wait_end(s, j);
            x->have = 1;
            x->stage = x->step = 0;
        } else { /* the compute side hands its next step over */
            int32_t m = sched_visit(s, &x->J, x->stage, x->step);
            int32_t at = (x->head + x->held) % nbuf;
            x->tile[at] = x->J.bh * s->m_tiles + m;
            x->rank[at] = sched_rank(s, &x->J, x->stage, m);
            x->held++;
            if (++x->step == sched_unit_steps(s, sched_job_unit(s, x->J.k, x->stage))) {
                x->step = 0;
                if (++x->stage == sched_job_stages(s, x->J.k))
                    x->have = 0;
            }
        }
    }
    free(counter);
    free(c);
    free(ready);
    return rc;
}

/* The fewest CTAs the CUDA backward runs in persistent mode (attn_cuda.cu): shift needs a
 * whole chunk resident at once. */
static int32_t persistent_need(const struct sched *s)
{
    return s->kind != SCHED_SHIFT ? 1 : s->chunks > 1 ? s->w : s->jobs_per_head;
}

static int cmp_int32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/*
 * All properties of one schedule on one shape; returns a description of the first
 * failure or NULL. `allowed` is the brute-force mask, M x N.
 */
static const char *check_schedule(const struct sched *s, const unsigned char *allowed)
{
    static char why[256];
    int32_t count;
    struct visit *v = list_visits(s, &count);
    int32_t M = s->m_tiles, N = s->n_tiles;
    int32_t *seen = calloc((size_t)s->bh * M * N, sizeof(int32_t));
    int32_t *ranks = malloc(sizeof(int32_t) * (size_t)(N + 1));
    const char *fail = NULL;

    for (int32_t i = 0; i < count; i++) {
        struct visit *x = &v[i];
        if (s->kind == SCHED_SHIFT && !s->band && x->bh == 0) {
            struct sched_job J = sched_job_at(s, x->job);
            int32_t want = oracle_shift_rank(s, &J, x->stage, x->m);
            if (x->rank != want) {
                snprintf(why, sizeof why, "job %d stage %d q-tile %d: rank %d, oracle %d", x->job,
                         x->stage, x->m, x->rank, want);
                fail = why;
                goto out;
            }
        }
        if (x->m < 0 || x->m >= M) {
            snprintf(why, sizeof why, "job %d visits q-tile %d outside [0,%d)", x->job, x->m, M);
            fail = why;
            goto out;
        }
        seen[((int64_t)x->bh * M + x->m) * N + x->n]++;
    }
    for (int32_t bh = 0; bh < s->bh; bh++)
        for (int32_t m = 0; m < M; m++)
            for (int32_t n = 0; n < N; n++) {
                int32_t got = seen[((int64_t)bh * M + m) * N + n];
                if (got != allowed[m * N + n]) {
                    snprintf(why, sizeof why, "pair (m=%d,n=%d) of head %d visited %d times, mask says %d",
                             m, n, bh, got, allowed[m * N + n]);
                    fail = why;
                    goto out;
                }
            }
    for (int32_t m = 0; m < M; m++) {
        int32_t k = 0;
        for (int32_t n = 0; n < N; n++)
            k += allowed[m * N + n];
        if (k != sched_contributors(s, m)) {
            snprintf(why, sizeof why, "q-tile %d: %d contributors, sched says %d", m, k,
                     sched_contributors(s, m));
            fail = why;
            goto out;
        }
    }
    if (!sched_is_deterministic(s->kind))
        goto out;

    /* ranks of each dQ tile's additions are 0..K-1 */
    for (int32_t bh = 0; bh < s->bh; bh++)
        for (int32_t m = 0; m < M; m++) {
            int32_t k = 0;
            for (int32_t i = 0; i < count; i++)
                if (v[i].bh == bh && v[i].m == m)
                    ranks[k++] = v[i].rank;
            qsort(ranks, (size_t)k, sizeof(int32_t), cmp_int32);
            for (int32_t i = 0; i < k; i++)
                if (ranks[i] != i) {
                    snprintf(why, sizeof why, "head %d q-tile %d: ranks are not a permutation (%d at %d)",
                             bh, m, ranks[i], i);
                    fail = why;
                    goto out;
                }
        }
    /* every addition waits only on jobs below sched_wait_end of its own */
    for (int32_t bh = 0; bh < s->bh; bh++)
        for (int32_t m = 0; m < M; m++) {
            for (int32_t i = 0; i < count; i++) /* ranks[r]: the job of m's addition r */
                if (v[i].bh == bh && v[i].m == m)
                    ranks[v[i].rank] = v[i].job;
            for (int32_t i = 0; i < count; i++) {
                if (v[i].bh != bh || v[i].m != m)
                    continue;
                for (int32_t r = 0; r < v[i].rank; r++)
                    if (ranks[r] >= sched_wait_end(s, v[i].job)) {
                        snprintf(why, sizeof why, "job %d waits on job %d at q-tile %d, past its wait end %d",
                                 v[i].job, ranks[r], m, sched_wait_end(s, v[i].job));
                        fail = why;
                        goto out;
                    }
            }
        }
    if (simulate(s, s->w) != 0) {
        fail = "deadlock with W workers";
        goto out;
    }
    if (s->kind != SCHED_SHIFT) {
        for (int32_t p = 1; p <= 3; p++)
            if (simulate(s, p) != 0) {
                snprintf(why, sizeof why, "deadlock with %d workers", p);
                fail = why;
                goto out;
            }
    } else if (simulate(s, s->w + 3) != 0) {
        fail = "deadlock with W+3 workers";
        goto out;
    }
out:
    free(v);
    free(seen);
    free(ranks);
    return fail;
}

/* ---- tests ------------------------------------------------------------------------ */

static const int32_t block_pairs[][2] = {{1, 1}, {4, 4}, {2, 3}, {3, 2}, {4, 2}, {2, 4}};

/* Exhaustive sweep: tiles 1..16 each way, both masks, heads 1..4, unequal tile sizes,
 * W 1..16 (shift) - every schedule, every property. */
static void test_sched_properties_hold_for_all_small_shapes(void)
{
    int checked = 0, failures = 0;
    for (size_t bp = 0; bp < sizeof block_pairs / sizeof block_pairs[0]; bp++)
        for (int mask = 0; mask < SCHED_MASK_COUNT; mask++)
            for (int32_t M = 1; M <= 16; M++)
                for (int32_t N = 1; N <= 16; N++) {
                    struct sched_shape sh = {
                        .batch = 1, .heads = 1,
                        .block_m = block_pairs[bp][0], .block_n = block_pairs[bp][1],
                        .mask = (enum sched_mask)mask,
                    };
                    sh.seqlen_q = seqlen_for(M, sh.block_m, M + 2 * N);
                    sh.seqlen_k = seqlen_for(N, sh.block_n, 3 * M + N);
                    unsigned char allowed[16 * 16];
                    for (int32_t m = 0; m < M; m++)
                        for (int32_t n = 0; n < N; n++)
                            allowed[m * N + n] = (unsigned char)pair_allowed(&sh, m, n);
                    for (int32_t heads = 1; heads <= 4; heads++) {
                        sh.heads = heads;
                        sh.batch = heads == 4 ? 2 : 1; /* also cover batch > 1 */
                        for (int kind = SCHED_ATOMIC; kind < SCHED_KIND_COUNT; kind++) {
                            int32_t w_max = kind == SCHED_SHIFT ? 16 : 1;
                            for (int32_t w = 1; w <= w_max; w++) {
                                struct sched s;
                                if (sched_init(&s, (enum sched_kind)kind, &sh, kind == SCHED_SHIFT ? w : 7) != 0) {
                                    CU_FAIL("sched_init rejected a small shape");
                                    return;
                                }
                                const char *why = check_schedule(&s, allowed);
                                checked++;
                                if (why && failures++ < 5) {
                                    fprintf(stderr,
                                            "\n  %s %s M=%d N=%d blocks=%dx%d Sq=%d Sk=%d bh=%d W=%d: %s",
                                            sched_kind_name(s.kind), sched_mask_name(s.mask), M, N,
                                            sh.block_m, sh.block_n, sh.seqlen_q, sh.seqlen_k, s.bh,
                                            s.w, why);
                                }
                            }
                        }
                    }
                }
    CU_ASSERT_EQUAL(failures, 0);
    CU_ASSERT(checked > 100000);
}

/* Shift ranks are, by definition, the order of the (chunk, step, slot) keys. Recompute that
 * order from the visit sequence alone and compare. */
static void test_sched_shift_ranks_are_key_order_of_visits(void)
{
    for (int mask = 0; mask < SCHED_MASK_COUNT; mask++)
        for (int32_t w = 1; w <= 9; w += 4)
            for (int32_t N = 1; N <= 13; N += 3) {
                struct sched_shape sh = {.batch = 1, .heads = 3, .block_m = 2, .block_n = 3,
                                         .mask = (enum sched_mask)mask};
                sh.seqlen_q = seqlen_for(11, 2, N);
                sh.seqlen_k = seqlen_for(N, 3, 1);
                struct sched s;
                CU_ASSERT_FATAL(sched_init(&s, SCHED_SHIFT, &sh, w) == 0);
                int32_t count;
                struct visit *v = list_visits(&s, &count);
                for (int32_t a = 0; a < count; a++) {
                    struct sched_job Ja = sched_job_at(&s, v[a].job);
                    int32_t step_a = v[a].step;
                    if (v[a].stage == 1)
                        step_a += sched_unit_steps(&s, sched_job_unit(&s, Ja.k, 0));
                    int32_t before = 0;
                    for (int32_t b = 0; b < count; b++) {
                        if (v[b].bh != v[a].bh || v[b].m != v[a].m || b == a)
                            continue;
                        struct sched_job Jb = sched_job_at(&s, v[b].job);
                        int32_t step_b = v[b].step;
                        if (v[b].stage == 1)
                            step_b += sched_unit_steps(&s, sched_job_unit(&s, Jb.k, 0));
                        if (Jb.chunk != Ja.chunk ? Jb.chunk < Ja.chunk
                            : step_b != step_a  ? step_b < step_a
                                                : Jb.slot < Ja.slot)
                            before++;
                    }
                    CU_ASSERT_EQUAL(v[a].rank, before);
                }
                free(v);
            }
}

/* ranks of m as a string "a,b,c" listing kv-tiles in accumulation order, for head 0 */
static void order_of(const struct sched *s, int32_t m, char *buf, size_t len)
{
    int32_t count;
    struct visit *v = list_visits(s, &count);
    int32_t order[64];
    int32_t k = sched_contributors(s, m);
    for (int32_t i = 0; i < count; i++)
        if (v[i].bh == 0 && v[i].m == m)
            order[v[i].rank] = v[i].n;
    buf[0] = 0;
    for (int32_t i = 0; i < k; i++)
        snprintf(buf + strlen(buf), len - strlen(buf), i ? ",%d" : "%d", order[i]);
    free(v);
}

static void visits_of(const struct sched *s, int32_t n, char *buf, size_t len)
{
    buf[0] = 0;
    for (int32_t j = 0; j < s->jobs; j++) {
        struct sched_job J = sched_job_at(s, j);
        for (int32_t st = 0; st < sched_job_stages(s, J.k); st++) {
            if (J.bh != 0 || sched_job_unit(s, J.k, st) != n)
                continue;
            for (int32_t step = 0; step < sched_unit_steps(s, n); step++)
                snprintf(buf + strlen(buf), len - strlen(buf), step ? " %d" : "%d",
                         sched_visit(s, &J, st, step));
        }
    }
}

/* The DASH fork's documented orders (docs: kernels.md section 3.2 and 3.3). */
static void test_sched_shift_reproduces_dash_fork_examples(void)
{
    char buf[256];
    struct sched s;
    /* full mask, 6 q-tiles, 3 kv-tiles, one wave */
    struct sched_shape full = {1, 1, 6, 3, 1, 1, SCHED_MASK_FULL, 0, 0, 0};
    CU_ASSERT_FATAL(sched_init(&s, SCHED_SHIFT, &full, 64) == 0);
    const char *full_orders[6] = {"0,2,1", "1,0,2", "2,1,0", "2,1,0", "2,1,0", "2,1,0"};
    for (int32_t m = 0; m < 6; m++) {
        order_of(&s, m, buf, sizeof buf);
        CU_ASSERT_STRING_EQUAL(buf, full_orders[m]);
    }
    visits_of(&s, 2, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "2 3 4 5 0 1");

    /* causal, 4x4 square tiles */
    struct sched_shape sq = {1, 1, 4, 4, 1, 1, SCHED_MASK_CAUSAL, 0, 0, 0};
    CU_ASSERT_FATAL(sched_init(&s, SCHED_SHIFT, &sq, 64) == 0);
    const char *sq_visits[4] = {"1 2 3 0", "2 3 1", "3 2", "3"};
    for (int32_t n = 0; n < 4; n++) {
        visits_of(&s, n, buf, sizeof buf);
        CU_ASSERT_STRING_EQUAL(buf, sq_visits[n]);
    }
    const char *sq_orders[4] = {"0", "0,1", "1,0,2", "1,0,2,3"};
    for (int32_t m = 0; m < 4; m++) {
        order_of(&s, m, buf, sizeof buf);
        CU_ASSERT_STRING_EQUAL(buf, sq_orders[m]);
    }

    /* causal, 64x128 tiles (stride 2), N = 4, 8 q-tiles */
    struct sched_shape st2 = {1, 1, 512, 512, 64, 128, SCHED_MASK_CAUSAL, 0, 0, 0};
    CU_ASSERT_FATAL(sched_init(&s, SCHED_SHIFT, &st2, 64) == 0);
    visits_of(&s, 0, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "2 3 4 5 6 7 0 1");
    visits_of(&s, 1, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "3 4 5 6 7 2");
    const char *st2_orders[8] = {"0", "0", "0,1", "1,0", "1,0,2", "1,0,2", "1,0,2,3", "1,0,2,3"};
    for (int32_t m = 0; m < 8; m++) {
        order_of(&s, m, buf, sizeof buf);
        CU_ASSERT_STRING_EQUAL(buf, st2_orders[m]);
    }
}

/* The orders of the fixed schedules are what their names promise, for every W. */
static void test_sched_fixed_orders_match_their_definition(void)
{
    char buf[256];
    struct sched s;
    struct sched_shape sh = {1, 2, 5 * 3 - 1, 4 * 2, 3, 2, SCHED_MASK_CAUSAL, 0, 0, 0};
    CU_ASSERT_FATAL(sched_init(&s, SCHED_ASCENDING, &sh, 1) == 0);
    order_of(&s, 4, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "0,1,2,3");
    visits_of(&s, 1, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "2 3 4");
    CU_ASSERT_FATAL(sched_init(&s, SCHED_DESCENDING, &sh, 99) == 0);
    order_of(&s, 4, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "0,1,2,3");
    visits_of(&s, 1, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "4 3 2");
    CU_ASSERT_FATAL(sched_init(&s, SCHED_SPT, &sh, 5) == 0);
    order_of(&s, 4, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "3,2,1,0");
    order_of(&s, 2, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "1,0");
    /* spt dispatches the shortest (rightmost) kv-tile first */
    struct sched_job J = sched_job_at(&s, 0);
    CU_ASSERT_EQUAL(sched_job_unit(&s, J.k, 0), 3);
    /* ranks of the fixed schedules do not depend on W */
    struct sched a, b;
    CU_ASSERT_FATAL(sched_init(&a, SCHED_DESCENDING, &sh, 1) == 0);
    CU_ASSERT_FATAL(sched_init(&b, SCHED_DESCENDING, &sh, 64) == 0);
    for (int32_t j = 0; j < a.jobs; j++) {
        struct sched_job Ja = sched_job_at(&a, j), Jb = sched_job_at(&b, j);
        int32_t n = sched_job_unit(&a, Ja.k, 0);
        for (int32_t st = 0; st < sched_unit_steps(&a, n); st++) {
            int32_t m = sched_visit(&a, &Ja, 0, st);
            CU_ASSERT_EQUAL(m, sched_visit(&b, &Jb, 0, st));
            CU_ASSERT_EQUAL(sched_rank(&a, &Ja, 0, m), sched_rank(&b, &Jb, 0, m));
        }
    }
}

/* Causal rows that see no key (seqlen_q > seqlen_k) have no contributors; a kv-tile always
 * has at least one q-tile. seqlen 1 works. */
static void test_sched_edge_shapes(void)
{
    struct sched s;
    struct sched_shape tall = {1, 1, 10, 3, 2, 2, SCHED_MASK_CAUSAL, 0, 0, 0};
    CU_ASSERT_FATAL(sched_init(&s, SCHED_SHIFT, &tall, 4) == 0);
    /* queries 0..6 see no key: tiles 0..2 (rows 0-5) are empty, tile 3 (rows 6,7) is not */
    CU_ASSERT_EQUAL(sched_contributors(&s, 0), 0);
    CU_ASSERT_EQUAL(sched_contributors(&s, 2), 0);
    CU_ASSERT_EQUAL(sched_contributors(&s, 3), 1);
    CU_ASSERT_EQUAL(sched_m_lo(&s, 0), 3);
    for (int32_t n = 0; n < s.n_tiles; n++)
        CU_ASSERT(sched_unit_steps(&s, n) >= 1);
    struct sched_shape one = {1, 1, 1, 1, 64, 64, SCHED_MASK_CAUSAL, 0, 0, 0};
    CU_ASSERT_FATAL(sched_init(&s, SCHED_SHIFT, &one, 64) == 0);
    CU_ASSERT_EQUAL(s.m_tiles, 1);
    CU_ASSERT_EQUAL(s.n_tiles, 1);
    CU_ASSERT_EQUAL(s.jobs, 1);
    CU_ASSERT_EQUAL(simulate(&s, 1), 0);
}

/* 1M tokens x 128 heads: counts fit, and ranks deep inside the problem are still a
 * permutation (checked on a few q-tiles of the last head). */
static void test_sched_large_shape_indices_do_not_overflow(void)
{
    struct sched_shape sh = {1, 128, 1 << 20, 1 << 20, 64, 128, SCHED_MASK_CAUSAL, 0, 0, 0};
    for (int kind = SCHED_ASCENDING; kind < SCHED_KIND_COUNT; kind++) {
        struct sched s;
        CU_ASSERT_FATAL(sched_init(&s, (enum sched_kind)kind, &sh, SCHED_W_DEFAULT) == 0);
        CU_ASSERT_EQUAL(s.m_tiles, 16384);
        CU_ASSERT_EQUAL(s.n_tiles, 8192);
        int32_t bh = s.bh - 1;
        int32_t ms[3] = {0, 8191, 16383};
        int32_t *hits = calloc((size_t)s.n_tiles, sizeof(int32_t));
        for (int mi = 0; mi < 3; mi++) {
            int32_t m = ms[mi], K = sched_contributors(&s, m);
            memset(hits, 0, sizeof(int32_t) * (size_t)s.n_tiles);
            int ok = 1;
            /* walk the jobs of the last head only */
            for (int32_t j = 0; j < s.jobs && ok; j++) {
                struct sched_job J = sched_job_at(&s, j);
                if (J.bh != bh)
                    continue;
                for (int32_t st = 0; st < sched_job_stages(&s, J.k); st++) {
                    int32_t n = sched_job_unit(&s, J.k, st);
                    if (n >= sched_n_hi(&s, m))
                        continue;
                    int32_t r = sched_rank(&s, &J, st, m);
                    if (r < 0 || r >= K || hits[r]++)
                        ok = 0;
                }
            }
            CU_ASSERT(ok);
        }
        free(hits);
        /* the last job decodes to the last head */
        struct sched_job last = sched_job_at(&s, s.jobs - 1);
        CU_ASSERT_EQUAL(last.bh, s.bh - 1);
    }
    /* and a shape that cannot be indexed in 32 bits is refused */
    struct sched_shape huge = {1 << 16, 1 << 10, 1 << 20, 1 << 20, 64, 64, SCHED_MASK_FULL, 0, 0, 0};
    struct sched s;
    CU_ASSERT_EQUAL(sched_init(&s, SCHED_SHIFT, &huge, 64), -EOVERFLOW);
}

static void test_sched_init_rejects_bad_arguments(void)
{
    struct sched s;
    struct sched_shape ok = {1, 1, 16, 16, 4, 4, SCHED_MASK_FULL, 0, 0, 0};
    CU_ASSERT_EQUAL(sched_init(&s, SCHED_SHIFT, &ok, 4), 0);
    CU_ASSERT_EQUAL(sched_init(NULL, SCHED_SHIFT, &ok, 4), -EINVAL);
    CU_ASSERT_EQUAL(sched_init(&s, SCHED_SHIFT, NULL, 4), -EINVAL);
    CU_ASSERT_EQUAL(sched_init(&s, SCHED_AUTO, &ok, 4), -EINVAL);
    CU_ASSERT_EQUAL(sched_init(&s, (enum sched_kind)42, &ok, 4), -EINVAL);
    CU_ASSERT_EQUAL(sched_init(&s, SCHED_SHIFT, &ok, 0), -EINVAL);
    CU_ASSERT_EQUAL(sched_init(&s, SCHED_SHIFT, &ok, SCHED_W_MAX + 1), -EINVAL);
    struct sched_shape bad = ok;
    bad.seqlen_q = 0;
    CU_ASSERT_EQUAL(sched_init(&s, SCHED_SHIFT, &bad, 4), -EINVAL);
    bad = ok;
    bad.block_n = -3;
    CU_ASSERT_EQUAL(sched_init(&s, SCHED_SHIFT, &bad, 4), -EINVAL);
    bad = ok;
    bad.mask = (enum sched_mask)9;
    CU_ASSERT_EQUAL(sched_init(&s, SCHED_SHIFT, &bad, 4), -EINVAL);
    bad = ok;
    bad.seqlen_q = INT32_MAX - 2;
    CU_ASSERT_EQUAL(sched_init(&s, SCHED_SHIFT, &bad, 4), -EOVERFLOW);
}

static void test_sched_names_round_trip(void)
{
    for (int k = 0; k < SCHED_KIND_COUNT; k++)
        CU_ASSERT_EQUAL(sched_kind_parse(sched_kind_name((enum sched_kind)k)), k);
    for (int m = 0; m < SCHED_MASK_COUNT; m++)
        CU_ASSERT_EQUAL(sched_mask_parse(sched_mask_name((enum sched_mask)m)), m);
    CU_ASSERT_EQUAL(sched_kind_parse("bogus"), -EINVAL);
    CU_ASSERT_EQUAL(sched_kind_parse(NULL), -EINVAL);
    CU_ASSERT_PTR_NULL(sched_kind_name(SCHED_KIND_COUNT));
    CU_ASSERT(!sched_is_deterministic(SCHED_ATOMIC));
    CU_ASSERT(sched_is_deterministic(SCHED_SHIFT));
}

/* The writer hand-off model (simulate_handoff) on the GPU grid test's first shape, which
 * hung on an H200 with two staging buffers: with the wait-end rule it completes under any
 * order tried; without it some orders deadlock - with one buffer too. */
static void test_sched_writer_handoff_needs_the_wait_end_rule(void)
{
    struct sched_shape sh = {.batch = 1, .heads = 2, .seqlen_q = 128, .seqlen_k = 8960,
                             .block_m = 64, .block_n = 128, .mask = SCHED_MASK_FULL};
    struct sched s;
    CU_ASSERT_EQUAL_FATAL(sched_init(&s, SCHED_SHIFT, &sh, 64), 0);
    const int32_t grids[] = {64, 78, 114, 132};
    int deadlocks[2] = {0, 0}, failures = 0;
    for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++)
        for (int32_t nbuf = 1; nbuf <= 2; nbuf++)
            for (uint64_t seed = 1; seed <= 40; seed++) {
                failures += simulate_handoff(&s, grids[g], nbuf, 1, seed) != 0;
                deadlocks[nbuf - 1] += simulate_handoff(&s, grids[g], nbuf, 0, seed) != 0;
            }
    CU_ASSERT_EQUAL(failures, 0);
    CU_ASSERT(deadlocks[0] > 0);
    CU_ASSERT(deadlocks[1] > 0);
}

/* The rule is enough everywhere: every schedule of small shapes (both masks, 1-2 heads,
 * several W), one and two buffers, from the fewest CTAs persistent mode runs to three
 * more. */
static void test_sched_writer_handoff_never_deadlocks_with_the_rule(void)
{
    const int32_t ws[] = {1, 2, 3, 5, 8};
    int checked = 0, failures = 0;
    for (int mask = 0; mask < SCHED_MASK_COUNT; mask++)
        for (int32_t M = 1; M <= 10; M++)
            for (int32_t N = 1; N <= 10; N++)
                for (int32_t heads = 1; heads <= 2; heads++)
                    for (int kind = SCHED_ATOMIC; kind < SCHED_KIND_COUNT; kind++)
                        for (size_t wi = 0; wi < (kind == SCHED_SHIFT ? sizeof ws / sizeof ws[0] : 1); wi++) {
                            struct sched_shape sh = {.batch = 1, .heads = heads, .block_m = 2, .block_n = 3,
                                                     .mask = (enum sched_mask)mask};
                            sh.seqlen_q = seqlen_for(M, sh.block_m, M + N);
                            sh.seqlen_k = seqlen_for(N, sh.block_n, M + 2 * N);
                            struct sched s;
                            if (sched_init(&s, (enum sched_kind)kind, &sh, ws[wi]) != 0) {
                                CU_FAIL("sched_init rejected a small shape");
                                return;
                            }
                            for (int32_t extra = 0; extra <= 3; extra += 3)
                                for (int32_t nbuf = 1; nbuf <= 2; nbuf++) {
                                    int32_t ctas = persistent_need(&s) + extra;
                                    checked++;
                                    if (simulate_handoff(&s, ctas, nbuf, 1, (uint64_t)checked) != 0 &&
                                        failures++ < 5)
                                        fprintf(stderr, "\n  %s %s M=%d N=%d heads=%d W=%d: deadlock with %d CTAs, %d buffers",
                                                sched_kind_name(s.kind), sched_mask_name(s.mask), M, N, heads, s.w,
                                                ctas, nbuf);
                                }
                        }
    CU_ASSERT_EQUAL(failures, 0);
    CU_ASSERT(checked > 5000);
}

/* ---- windows (bands) and packed batches ------------------------------------------------ */

/* Windows in rows, both sides from 0 to past the length, -1 unbounded. */
static const int32_t band_windows[][2] = {{-1, 0}, {0, 0},  {1, -1}, {-1, 2}, {3, 1}, {0, 5},
                                          {7, 7},   {2, 0}, {5, 3},  {40, 40}, {0, -1}, {9, 2}};

/* sched_job_last_steps (the CUDA backward drains its writer after a job it gives 1) says
 * what the kernels' flag said at a job's end - the steps of its last unit with any (the flag
 * was set to steps == 1 by each unit with steps > 0, in stage order) - for every kind, both
 * masks, lengths around the tile sizes and the bands (where units of no steps exist); and at
 * causal 2112 with 64 x 128 tiles (33 q-tiles; bench/results/onedrain-trial-2026-12-06.md)
 * exactly the job holding the last kv-tile - one q-tile - ends in one step, for every kind
 * without shift's pairs. */
static void test_sched_job_last_steps_is_the_last_visiting_units_steps(void)
{
    const int32_t lens[] = {1, 63, 64, 65, 127, 128, 129, 300, 2112};
    const size_t nl = sizeof lens / sizeof lens[0], nw = sizeof band_windows / sizeof band_windows[0];
    int32_t zero_units = 0;
    for (int kind = SCHED_ATOMIC; kind < SCHED_KIND_COUNT; kind++)
        for (int mask = 0; mask < 2; mask++)
            for (size_t a = 0; a < nl; a++)
                for (size_t w = 0; w <= nw; w += 1) {
                    struct sched_shape sh = {1, 2, lens[a], lens[(a + w) % nl], 64, 128,
                                             mask ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL, w < nw, 0, 0};
                    if (w < nw) { /* a band, its sides in tiles' rows */
                        sh.window_left = band_windows[w][0] < 0 ? -1 : band_windows[w][0] * 37;
                        sh.window_right = band_windows[w][1] < 0 ? -1 : band_windows[w][1] * 37;
                    }
                    struct sched s;
                    if (sched_init(&s, (enum sched_kind)kind, &sh, 5) != 0)
                        continue; /* (a band sched_init refuses: no visit at all) */
                    for (int32_t j = 0; j < s.jobs; j++) {
                        const struct sched_job J = sched_job_at(&s, j);
                        int32_t flag = -1; /* the kernels' rule: -1 until a unit has steps */
                        for (int32_t st = 0; st < sched_job_stages(&s, J.k); st++) {
                            const int32_t steps = sched_unit_steps(&s, sched_job_unit(&s, J.k, st));
                            zero_units += steps == 0;
                            if (steps > 0)
                                flag = steps == 1;
                        }
                        const int32_t got = sched_job_last_steps(&s, J.k);
                        CU_ASSERT_EQUAL(got == 1, flag == 1);
                        CU_ASSERT_EQUAL(got == 0, flag == -1);
                    }
                }
    CU_ASSERT(zero_units > 0); /* the bands gave units without steps */
    struct sched_shape sh = {1, 1, 2112, 2112, 64, 128, SCHED_MASK_CAUSAL, 0, 0, 0};
    const enum sched_kind kinds[] = {SCHED_ASCENDING, SCHED_DESCENDING, SCHED_SPT};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        struct sched s;
        CU_ASSERT_FATAL(sched_init(&s, kinds[i], &sh, 132) == 0);
        CU_ASSERT_EQUAL(s.m_tiles, 33);
        int32_t ones = 0;
        for (int32_t k = 0; k < s.n_tiles; k++)
            if (sched_job_last_steps(&s, k) == 1) {
                ones++;
                CU_ASSERT_EQUAL(sched_job_unit(&s, k, sched_job_stages(&s, k) - 1), s.n_tiles - 1);
            }
        CU_ASSERT_EQUAL(ones, 1);
    }
}

/* Every schedule on every small banded shape: visits are the band's pairs exactly once
 * (tiles outside it are never visited), a dQ tile's contributors are the kv-tiles of its
 * band, ranks are permutations, waits stay below the wait end, no deadlock for W workers
 * (and 1..3 for the fixed orders), causal and full, q longer or shorter than k. */
static void test_sched_band_properties_hold_for_all_small_shapes(void)
{
    int checked = 0, failures = 0;
    for (size_t bp = 0; bp < sizeof block_pairs / sizeof block_pairs[0]; bp++)
        for (size_t wi = 0; wi < sizeof band_windows / sizeof band_windows[0]; wi++)
            for (int mask = 0; mask < SCHED_MASK_COUNT; mask++)
                for (int32_t M = 1; M <= 10; M++)
                    for (int32_t N = 1; N <= 10; N++) {
                        struct sched_shape sh = {
                            .batch = 1, .heads = 1,
                            .block_m = block_pairs[bp][0], .block_n = block_pairs[bp][1],
                            .mask = (enum sched_mask)mask, .window = 1,
                            .window_left = band_windows[wi][0], .window_right = band_windows[wi][1],
                        };
                        sh.seqlen_q = seqlen_for(M, sh.block_m, M + 2 * N + (int32_t)wi);
                        sh.seqlen_k = seqlen_for(N, sh.block_n, 3 * M + N);
                        unsigned char allowed[10 * 10];
                        for (int32_t m = 0; m < M; m++)
                            for (int32_t n = 0; n < N; n++)
                                allowed[m * N + n] = (unsigned char)pair_allowed(&sh, m, n);
                        for (int32_t heads = 1; heads <= 2; heads++) {
                            sh.heads = heads;
                            for (int kind = SCHED_ATOMIC; kind < SCHED_KIND_COUNT; kind++) {
                                int32_t w_max = kind == SCHED_SHIFT ? 6 : 1;
                                for (int32_t w = 1; w <= w_max; w++) {
                                    struct sched s;
                                    if (sched_init(&s, (enum sched_kind)kind, &sh,
                                                   kind == SCHED_SHIFT ? w : 7) != 0) {
                                        CU_FAIL("sched_init rejected a small banded shape");
                                        return;
                                    }
                                    const char *why = check_schedule(&s, allowed);
                                    checked++;
                                    if (why && failures++ < 5)
                                        fprintf(stderr, "\n  %s %s window (%d,%d) M=%d N=%d blocks=%dx%d "
                                                "Sq=%d Sk=%d W=%d: %s", sched_kind_name(s.kind),
                                                sched_mask_name((enum sched_mask)mask), sh.window_left,
                                                sh.window_right, M, N, sh.block_m, sh.block_n,
                                                sh.seqlen_q, sh.seqlen_k, s.w, why);
                                }
                            }
                        }
                    }
    CU_ASSERT_EQUAL(failures, 0);
    CU_ASSERT(checked > 50000);
}

/* Shift on a band: ranks are the order of the (chunk, step, slot) keys of the visits. */
static void test_sched_band_shift_ranks_are_key_order_of_visits(void)
{
    for (size_t wi = 0; wi < sizeof band_windows / sizeof band_windows[0]; wi++)
        for (int32_t w = 1; w <= 9; w += 4)
            for (int32_t N = 1; N <= 13; N += 3) {
                struct sched_shape sh = {.batch = 1, .heads = 2, .block_m = 2, .block_n = 3,
                                         .mask = SCHED_MASK_FULL, .window = 1,
                                         .window_left = band_windows[wi][0] < 0 ? -1 : band_windows[wi][0] * 2,
                                         .window_right = band_windows[wi][1] < 0 ? -1 : band_windows[wi][1] * 2};
                sh.seqlen_q = seqlen_for(11, 2, N);
                sh.seqlen_k = seqlen_for(N, 3, 1);
                struct sched s;
                CU_ASSERT_FATAL(sched_init(&s, SCHED_SHIFT, &sh, w) == 0);
                if (!s.band)
                    continue; /* a window that is the plain mask: the test above */
                int32_t count;
                struct visit *v = list_visits(&s, &count);
                for (int32_t a = 0; a < count; a++) {
                    struct sched_job Ja = sched_job_at(&s, v[a].job);
                    int32_t before = 0;
                    for (int32_t b = 0; b < count; b++) {
                        if (v[b].bh != v[a].bh || v[b].m != v[a].m || b == a)
                            continue;
                        struct sched_job Jb = sched_job_at(&s, v[b].job);
                        if (Jb.chunk != Ja.chunk ? Jb.chunk < Ja.chunk
                            : v[b].step != v[a].step ? v[b].step < v[a].step
                                                     : Jb.slot < Ja.slot)
                            before++;
                    }
                    CU_ASSERT_EQUAL(v[a].rank, before);
                }
                free(v);
            }
}

/* A packed batch: one schedule per sequence, jobs dispatched sequence after sequence,
 * each sequence with dQ counters of its own. Workers take jobs w, w + P, ... of the
 * concatenated list and add only in turn. 0, or -EDEADLK. */
static int simulate_seqs(const struct sched *seqs, int32_t nseq, int32_t workers)
{
    int32_t jobs = 0, tiles = 0, job0[32], tile0[32];
    for (int32_t q = 0; q < nseq; q++) {
        job0[q] = jobs;
        tile0[q] = tiles;
        jobs += seqs[q].jobs;
        tiles += seqs[q].bh * seqs[q].m_tiles;
    }
    int32_t *counter = calloc((size_t)tiles + 1, sizeof(int32_t));
    int32_t *job = malloc(sizeof(int32_t) * (size_t)workers);
    int32_t *stage = calloc((size_t)workers, sizeof(int32_t));
    int32_t *step = calloc((size_t)workers, sizeof(int32_t));
    for (int32_t w = 0; w < workers; w++)
        job[w] = w;
    int rc = 0;
    for (;;) {
        int progress = 0, busy = 0;
        for (int32_t w = 0; w < workers; w++) {
            if (job[w] >= jobs)
                continue;
            busy = 1;
            int32_t q = nseq - 1;
            while (job0[q] > job[w])
                q--;
            const struct sched *s = &seqs[q];
            struct sched_job J = sched_job_at(s, job[w] - job0[q]);
            int32_t n = sched_job_unit(s, J.k, stage[w]);
            if (sched_unit_steps(s, n) > 0) {
                int32_t m = sched_visit(s, &J, stage[w], step[w]);
                int32_t r = sched_rank(s, &J, stage[w], m);
                int32_t *ctr = &counter[tile0[q] + J.bh * s->m_tiles + m];
                if (r >= 0 && *ctr != r)
                    continue;
                (*ctr)++;
            }
            progress = 1;
            if (sched_unit_steps(s, n) == 0 || ++step[w] == sched_unit_steps(s, n)) {
                step[w] = 0;
                if (++stage[w] == sched_job_stages(s, J.k)) {
                    stage[w] = 0;
                    job[w] += workers;
                }
            }
        }
        if (!busy)
            break;
        if (!progress) {
            rc = -EDEADLK;
            break;
        }
    }
    free(counter);
    free(job);
    free(stage);
    free(step);
    return rc;
}

/* Packed batches of random ragged lengths (1 to a few tiles, empty sequences left out as
 * the engine does), with and without windows, every schedule: each sequence's schedule
 * has the properties above on its own, and the batch run together completes for W
 * workers (shift) or 1..3 (the fixed orders) - and in the DAG model on W SMs. */
static void test_sched_ragged_batches_complete_without_deadlock(void)
{
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x72616767ULL);
    int failures = 0, checked = 0;
    for (int trial = 0; trial < 120; trial++) {
        const int32_t nseq = 1 + (int32_t)(tu_next(&r) % 8);
        const int32_t bm = 1 + (int32_t)(tu_next(&r) % 4), bn = 1 + (int32_t)(tu_next(&r) % 4);
        const size_t wi = tu_next(&r) % (sizeof band_windows / sizeof band_windows[0] + 1);
        const int mask = (int)(tu_next(&r) % 2);
        const int32_t w = 1 + (int32_t)(tu_next(&r) % 6);
        for (int kind = SCHED_ATOMIC; kind < SCHED_KIND_COUNT; kind++) {
            struct sched seqs[8];
            for (int32_t q = 0; q < nseq; q++) {
                struct sched_shape sh = {.batch = 1, .heads = 1 + trial % 2, .block_m = bm,
                                         .block_n = bn, .mask = (enum sched_mask)mask};
                if (wi < sizeof band_windows / sizeof band_windows[0]) {
                    sh.window = 1;
                    sh.window_left = band_windows[wi][0];
                    sh.window_right = band_windows[wi][1];
                }
                sh.seqlen_q = 1 + (int32_t)(tu_next(&r) % (uint64_t)(6 * bm));
                sh.seqlen_k = tu_next(&r) % 3 ? sh.seqlen_q : 1 + (int32_t)(tu_next(&r) % (uint64_t)(6 * bn));
                CU_ASSERT_FATAL(sched_init(&seqs[q], (enum sched_kind)kind, &sh, w) == 0);
                unsigned char allowed[64 * 64];
                const int32_t M = seqs[q].m_tiles, N = seqs[q].n_tiles;
                for (int32_t m = 0; m < M; m++)
                    for (int32_t n = 0; n < N; n++)
                        allowed[m * N + n] = (unsigned char)pair_allowed(&sh, m, n);
                const char *why = check_schedule(&seqs[q], allowed);
                if (why && failures++ < 5)
                    fprintf(stderr, "\n  ragged trial %d sequence %d %s: %s", trial, q,
                            sched_kind_name((enum sched_kind)kind), why);
            }
            if (kind == SCHED_ATOMIC)
                continue;
            const int32_t lo = kind == SCHED_SHIFT ? w : 1, hi = kind == SCHED_SHIFT ? w + 2 : 3;
            for (int32_t p = lo; p <= hi; p++) {
                checked++;
                if (simulate_seqs(seqs, nseq, p) != 0 && failures++ < 5)
                    fprintf(stderr, "\n  ragged trial %d: %s deadlocks with %d workers", trial,
                            sched_kind_name((enum sched_kind)kind), p);
            }
        }
    }
    CU_ASSERT_EQUAL(failures, 0);
    CU_ASSERT(checked > 500);
}

int suite_sched(void)
{
    CU_pSuite s = CU_add_suite("sched", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_sched_init_rejects_bad_arguments);
    ADD_TEST(s, test_sched_names_round_trip);
    ADD_TEST(s, test_sched_edge_shapes);
    ADD_TEST(s, test_sched_shift_reproduces_dash_fork_examples);
    ADD_TEST(s, test_sched_fixed_orders_match_their_definition);
    ADD_TEST(s, test_sched_shift_ranks_are_key_order_of_visits);
    ADD_TEST(s, test_sched_large_shape_indices_do_not_overflow);
    ADD_TEST(s, test_sched_properties_hold_for_all_small_shapes);
    ADD_TEST(s, test_sched_band_properties_hold_for_all_small_shapes);
    ADD_TEST(s, test_sched_band_shift_ranks_are_key_order_of_visits);
    ADD_TEST(s, test_sched_ragged_batches_complete_without_deadlock);
    ADD_TEST(s, test_sched_writer_handoff_needs_the_wait_end_rule);
    ADD_TEST(s, test_sched_job_last_steps_is_the_last_visiting_units_steps);
    ADD_TEST(s, test_sched_writer_handoff_never_deadlocks_with_the_rule);
    return 0;
}
