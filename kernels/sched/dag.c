// SPDX-License-Identifier: BSD-3-Clause
/*
 * dag.c - evaluating the DAG model by discrete-event simulation.
 *
 * Runnable SMs sit in a binary heap keyed by (clock, sm). Popping the earliest one and
 * executing its next addition keeps every start time equal to the latest end time among
 * the node's predecessors, i.e. the longest path. An SM whose reduction must wait for an
 * addition not yet executed parks on that dQ tile's wait list; the addition that moves the
 * tile's counter to its rank wakes it. Parked SMs left over when the heap runs dry form a
 * cycle: -EDEADLK.
 */
#include "kernels/sched/dag.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct sm_state {
    double clock;  /* time at which the SM is free for its next node */
    double c_end;  /* when parked: end of the compute node waiting on its reduction */
    double c_start;
    int32_t job;   /* -1: none yet; else a job index over all sequences */
    int32_t seq;   /* the sequence (schedule) the job belongs to */
    int32_t stage, step;
    int32_t rank;  /* when parked: the counter value it waits for */
    int32_t next;  /* next SM in the same tile's wait list, -1 ends it */
};

struct model {
    const struct sched *seqs; /* one schedule per sequence; jobs run sequence after sequence */
    int32_t nseq;
    int32_t *job0;     /* per sequence: jobs before it (nseq + 1 entries) */
    int64_t *tile0;    /* per sequence: dQ tiles before it */
    int32_t *bh0;      /* per sequence: (batch, head) pairs before it */
    int32_t jobs;      /* all sequences' */
    double c, r;
    struct sm_state *sm;
    int32_t nsm;
    int32_t *heap; /* runnable SMs */
    int32_t heap_len;
    int32_t next_job;
    int32_t *counter;  /* per (bh, m) */
    double *last_end;  /* per (bh, m): end of the latest reduction */
    int32_t *waiters;  /* per (bh, m): head of the wait list */
    dag_visit_fn visit;
    void *ctx;
    struct dag_stats st;
};

static int before(const struct model *md, int32_t a, int32_t b)
{
    const struct sm_state *x = &md->sm[a], *y = &md->sm[b];
    return x->clock < y->clock || (x->clock == y->clock && a < b);
}

static void heap_push(struct model *md, int32_t v)
{
    int32_t i = md->heap_len++;
    md->heap[i] = v;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!before(md, md->heap[i], md->heap[p]))
            break;
        int32_t t = md->heap[i];
        md->heap[i] = md->heap[p];
        md->heap[p] = t;
        i = p;
    }
}

static int32_t heap_pop(struct model *md)
{
    int32_t top = md->heap[0];
    md->heap[0] = md->heap[--md->heap_len];
    int32_t i = 0;
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, best = i;
        if (l < md->heap_len && before(md, md->heap[l], md->heap[best]))
            best = l;
        if (r < md->heap_len && before(md, md->heap[r], md->heap[best]))
            best = r;
        if (best == i)
            break;
        int32_t t = md->heap[i];
        md->heap[i] = md->heap[best];
        md->heap[best] = t;
        i = best;
    }
    return top;
}

static int32_t seq_of_job(const struct model *md, int32_t j)
{
    int32_t lo = 0, hi = md->nseq - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (md->job0[mid] <= j)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The SM's current job, as its schedule numbers it. */
static struct sched_job job_of(const struct model *md, const struct sm_state *x)
{
    return sched_job_at(&md->seqs[x->seq], x->job - md->job0[x->seq]);
}

/* Move the SM to its next addition (`done`: past the current one), passing over stages
 * that visit no q-tile (a band can leave a kv-tile unseen). When the current job is done:
 * with `take`, take the next job in dispatch order; without, stop with x->job = -1 and
 * return 1, so that the SM takes its next job when the heap pops it, at the time it
 * becomes idle (in (clock, sm) order, as the SMs of a persistent kernel take them).
 * Returns 0 when it has nothing left to do. */
static int advance(struct model *md, struct sm_state *x, int done, int take)
{
    if (x->job >= 0 && done)
        x->step++;
    for (;;) {
        if (x->job < 0) {
            if (md->next_job >= md->jobs)
                return 0;
            if (!take)
                return 1;
            x->job = md->next_job++;
            x->seq = seq_of_job(md, x->job);
            x->stage = 0;
            x->step = 0;
        }
        const struct sched *s = &md->seqs[x->seq];
        struct sched_job J = job_of(md, x);
        if (x->step < sched_unit_steps(s, sched_job_unit(s, J.k, x->stage)))
            return 1;
        x->step = 0;
        if (++x->stage < sched_job_stages(s, J.k))
            continue;
        x->job = -1;
    }
}

/* Execute the reduction of SM i's current addition into tile t, put the SM back in the
 * heap if it has more work, and repeat for the parked SM (if any) that waits for the
 * tile's new counter value: its reduction can start right when this one ends. */
static void reduce(struct model *md, int32_t i, int64_t t, int32_t m)
{
    while (i >= 0) {
        struct sm_state *x = &md->sm[i];
        const struct sched *s = &md->seqs[x->seq];
        double r_start = x->c_end;
        if (sched_is_deterministic(s->kind) && md->last_end[t] > r_start)
            r_start = md->last_end[t];
        double r_end = r_start + md->r;
        if (r_end > md->last_end[t])
            md->last_end[t] = r_end;
        md->counter[t]++;
        md->st.additions++;
        md->st.wait += r_start - x->c_end;
        if (md->visit) {
            struct sched_job J = job_of(md, x);
            md->visit(md->ctx, i, md->bh0[x->seq] + J.bh, m, sched_job_unit(s, J.k, x->stage),
                      x->c_start, r_start, r_end);
        }
        x->clock = r_end;
        if (r_end > md->st.makespan)
            md->st.makespan = r_end;
        if (advance(md, x, 1, 0))
            heap_push(md, i);

        int32_t *link = &md->waiters[t];
        i = -1;
        while (*link >= 0) {
            if (md->sm[*link].rank == md->counter[t]) {
                i = *link;
                *link = md->sm[i].next;
                break;
            }
            link = &md->sm[*link].next;
        }
    }
}

int dag_model_seqs(const struct sched *seqs, int32_t nseq, int32_t sms, double c, double r,
                   dag_visit_fn visit, void *ctx, struct dag_stats *ret)
{
    if (!seqs || nseq < 1 || !ret || sms < 1 || !(c >= 0) || !(r >= 0))
        return -EINVAL;
    for (int32_t q = 1; q < nseq; q++)
        if (seqs[q].kind != seqs[0].kind)
            return -EINVAL;
    struct model md = {.seqs = seqs, .nseq = nseq, .c = c, .r = r, .visit = visit, .ctx = ctx};
    int rc = -ENOMEM;
    md.job0 = malloc(sizeof(int32_t) * ((size_t)nseq + 1));
    md.tile0 = malloc(sizeof(int64_t) * ((size_t)nseq + 1));
    md.bh0 = malloc(sizeof(int32_t) * ((size_t)nseq + 1));
    if (!md.job0 || !md.tile0 || !md.bh0)
        goto out;
    int64_t jobs = 0, tiles = 0, bh = 0;
    for (int32_t q = 0; q < nseq; q++) {
        md.job0[q] = (int32_t)jobs;
        md.tile0[q] = tiles;
        md.bh0[q] = (int32_t)bh;
        jobs += seqs[q].jobs;
        tiles += (int64_t)seqs[q].bh * seqs[q].m_tiles;
        bh += seqs[q].bh;
        if (jobs > INT32_MAX || bh > INT32_MAX) {
            rc = -EOVERFLOW;
            goto out;
        }
    }
    md.job0[nseq] = (int32_t)jobs;
    md.jobs = (int32_t)jobs;
    /* SMs beyond the job count never take a job: same result, no per-SM cost. */
    if (sms > md.jobs)
        sms = md.jobs;
    md.nsm = sms;
    md.sm = calloc((size_t)sms, sizeof(*md.sm));
    md.heap = malloc(sizeof(int32_t) * (size_t)sms);
    md.counter = calloc((size_t)tiles, sizeof(int32_t));
    md.last_end = calloc((size_t)tiles, sizeof(double));
    md.waiters = malloc(sizeof(int32_t) * (size_t)tiles);
    if (!md.sm || !md.heap || !md.counter || !md.last_end || !md.waiters)
        goto out;
    memset(md.waiters, 0xff, sizeof(int32_t) * (size_t)tiles); /* all -1 */
    for (int32_t i = 0; i < sms; i++) {
        md.sm[i].job = -1;
        md.sm[i].next = -1;
        if (advance(&md, &md.sm[i], 0, 1))
            heap_push(&md, i);
    }
    while (md.heap_len > 0) {
        int32_t i = heap_pop(&md);
        struct sm_state *x = &md.sm[i];
        /* Idle since x->clock: no SM still in the heap becomes idle earlier (pushes never
         * go below the clock just popped), so jobs are taken in the order SMs free up. */
        if (x->job < 0 && !advance(&md, x, 0, 1))
            continue;
        const struct sched *s = &md.seqs[x->seq];
        struct sched_job J = job_of(&md, x);
        int32_t m = sched_visit(s, &J, x->stage, x->step);
        int64_t t = md.tile0[x->seq] + (int64_t)J.bh * s->m_tiles + m;
        x->c_start = x->clock;
        x->c_end = x->clock + c;
        md.st.work += c + r;
        int32_t rank = sched_rank(s, &J, x->stage, m);
        if (rank < 0 || rank == md.counter[t]) {
            reduce(&md, i, t, m);
        } else {
            x->rank = rank;
            x->next = md.waiters[t];
            md.waiters[t] = i;
        }
    }
    rc = 0;
    for (int64_t t = 0; t < tiles; t++)
        if (md.waiters[t] >= 0)
            rc = -EDEADLK;
    if (rc == 0)
        *ret = md.st;
out:
    free(md.job0);
    free(md.tile0);
    free(md.bh0);
    free(md.sm);
    free(md.heap);
    free(md.counter);
    free(md.last_end);
    free(md.waiters);
    return rc;
}

int dag_model(const struct sched *s, int32_t sms, double c, double r, dag_visit_fn visit,
              void *ctx, struct dag_stats *ret)
{
    return dag_model_seqs(s, 1, sms, c, r, visit, ctx, ret);
}

/* ---- DOT output ------------------------------------------------------------------- */

struct dot_ctx {
    FILE *f;
    const struct sched *s;
    int64_t *last_sm;   /* per SM: id of its last R node, -1 none */
    int64_t *last_tile; /* per (bh, m): id of the last R node of the chain */
    int64_t next_id;
    int err;
};

static void dot_visit(void *p, int32_t sm, int32_t bh, int32_t m, int32_t n, double c_start,
                      double r_start, double r_end)
{
    struct dot_ctx *d = p;
    int64_t id = d->next_id++;
    int64_t t = (int64_t)bh * d->s->m_tiles + m;
    (void)r_end;
    if (fprintf(d->f,
                "  c%lld [label=\"C h%d q%d kv%d\\nsm%d t=%g\" shape=box];\n"
                "  r%lld [label=\"R h%d q%d kv%d\\nt=%g\"];\n  c%lld -> r%lld;\n",
                (long long)id, bh, m, n, sm, c_start, (long long)id, bh, m, n, r_start,
                (long long)id, (long long)id) < 0)
        d->err = -EIO;
    if (d->last_sm[sm] >= 0 && fprintf(d->f, "  r%lld -> c%lld [color=gray];\n",
                                      (long long)d->last_sm[sm], (long long)id) < 0)
        d->err = -EIO;
    if (sched_is_deterministic(d->s->kind) && d->last_tile[t] >= 0 &&
        fprintf(d->f, "  r%lld -> r%lld [color=red];\n", (long long)d->last_tile[t],
                (long long)id) < 0)
        d->err = -EIO;
    d->last_sm[sm] = id;
    d->last_tile[t] = id;
}

int dag_write_dot(FILE *f, const struct sched *s, int32_t sms, double c, double r)
{
    if (!f || !s || sms < 1)
        return -EINVAL;
    struct dot_ctx d = {.f = f, .s = s};
    size_t tiles = (size_t)s->bh * (size_t)s->m_tiles;
    d.last_sm = malloc(sizeof(int64_t) * (size_t)sms);
    d.last_tile = malloc(sizeof(int64_t) * tiles);
    int rc = -ENOMEM;
    if (!d.last_sm || !d.last_tile)
        goto out;
    memset(d.last_sm, 0xff, sizeof(int64_t) * (size_t)sms);
    memset(d.last_tile, 0xff, sizeof(int64_t) * tiles);
    struct dag_stats st;
    if (fprintf(f, "digraph dash_%s {\n  rankdir=LR;\n  // gray: SM program order, red: dQ chain\n",
                sched_kind_name(s->kind)) < 0) {
        rc = -EIO;
        goto out;
    }
    rc = dag_model(s, sms, c, r, dot_visit, &d, &st);
    if (rc == 0 && fprintf(f, "  label=\"%s: makespan %g\";\n}\n", sched_kind_name(s->kind),
                           st.makespan) < 0)
        rc = -EIO;
    if (rc == 0 && (d.err || fflush(f) != 0))
        rc = -EIO;
out:
    free(d.last_sm);
    free(d.last_tile);
    return rc;
}

/* ---- auto ------------------------------------------------------------------------- */

static int64_t additions_per_head(const struct sched *s)
{
    int64_t a = 0;
    for (int32_t n = 0; n < s->n_tiles; n++)
        a += sched_unit_steps(s, n);
    return a;
}

int dag_auto_cached(struct dag_auto_cache *c, const struct sched_shape *shape, int32_t w,
                    enum sched_kind *ret_kind)
{
    if (!c || !shape || !ret_kind)
        return -EINVAL;
    for (int i = 0; i < DAG_AUTO_CACHE; i++)
        if (c->entry[i].valid && c->entry[i].w == w &&
            memcmp(&c->entry[i].shape, shape, sizeof *shape) == 0) {
            *ret_kind = c->entry[i].kind;
            return 0;
        }
    enum sched_kind kind;
    int rc = dag_auto(shape, w, &kind);
    if (rc)
        return rc;
    int i = (int)(c->next++ % DAG_AUTO_CACHE);
    memset(&c->entry[i], 0, sizeof c->entry[i]);
    c->entry[i].valid = 1;
    c->entry[i].shape = *shape;
    c->entry[i].w = w;
    c->entry[i].kind = kind;
    *ret_kind = kind;
    return 0;
}

int dag_auto(const struct sched_shape *shape, int32_t w, enum sched_kind *ret_kind)
{
    static const enum sched_kind candidates[] = {SCHED_ASCENDING, SCHED_DESCENDING, SCHED_SPT,
                                                 SCHED_SHIFT};
    if (!shape || !ret_kind)
        return -EINVAL;
    struct sched probe;
    int rc = sched_init(&probe, SCHED_ASCENDING, shape, w);
    if (rc)
        return rc;

    /* Shrink the modelled problem until it is cheap: first heads, then tile counts. */
    struct sched_shape m = *shape;
    int64_t per_head = additions_per_head(&probe);
    while (per_head > DAG_AUTO_MAX_EVENTS) {
        m.block_m = m.block_m > INT32_MAX / 2 ? m.block_m : m.block_m * 2;
        m.block_n = m.block_n > INT32_MAX / 2 ? m.block_n : m.block_n * 2;
        if ((rc = sched_init(&probe, SCHED_ASCENDING, &m, w)))
            return rc;
        int64_t next = additions_per_head(&probe);
        if (next >= per_head)
            break;
        per_head = next;
    }
    int64_t bh_cap = DAG_AUTO_MAX_EVENTS / (per_head ? per_head : 1);
    if ((int64_t)m.batch * m.heads > bh_cap) {
        m.batch = 1;
        m.heads = (int32_t)(bh_cap > 1 ? bh_cap : 1);
    }

    double best = 0;
    int have_best = 0;
    enum sched_kind best_kind = SCHED_ASCENDING;
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        struct sched s;
        struct dag_stats st;
        if ((rc = sched_init(&s, candidates[i], &m, w)))
            return rc;
        rc = dag_model(&s, w, DAG_AUTO_C, DAG_AUTO_R, NULL, NULL, &st);
        if (rc == -EDEADLK)
            continue; /* cannot happen with W SMs; kept so a future schedule cannot win by it */
        if (rc)
            return rc;
        if (!have_best || st.makespan < best) {
            have_best = 1;
            best = st.makespan;
            best_kind = candidates[i];
        }
    }
    if (!have_best)
        return -EDEADLK;
    *ret_kind = best_kind;
    return 0;
}

int32_t dag_auto_packed_seq(const int32_t *cu_q, const int32_t *cu_k, int32_t batch)
{
    int32_t best = -1;
    int64_t best_work = 0;
    for (int32_t b = 0; b < batch; b++) {
        int64_t work = (int64_t)(cu_q[b + 1] - cu_q[b]) * (cu_k[b + 1] - cu_k[b]);
        if (work > best_work) {
            best_work = work;
            best = b;
        }
    }
    return best;
}

void dag_auto_packed_ref(struct sched_shape *shape)
{
    shape->batch = 1;
    shape->heads = 1;
    shape->seqlen_q = shape->seqlen_k = DAG_AUTO_REF_LEN;
}
