// SPDX-License-Identifier: BSD-3-Clause
/*
 * bench_engine.c - CPU throughput of the attention engine (kernels/cpu/engine.h), written up
 * as a Markdown report.
 *
 *   bench_engine [--quick] [--reps N] [--out DIR]
 *
 * For every shape, mask and thread count it times eng_forward and eng_backward under each
 * backward schedule: one warm-up call, then the median of N timed calls (N = 3 unless
 * --reps says otherwise). FLOPs are counted as flash-attn's benchmark counts them:
 *     fwd = 4 * batch * heads_q * seqlen_q * seqlen_k * head_dim   (halved when causal)
 *     bwd = 2.5 * fwd
 * so our GFLOP/s can be set beside theirs.
 *
 * Shapes (bf16, the engine's default 64x64 tiles), each full and causal, threads 1 and 2:
 *     B=1 H=4 S=512  D=64     (--quick runs only this one)
 *     B=1 H=4 S=1024 D=64
 *     B=1 H=2 S=1024 D=128
 * With N = 3 the default run takes about 2 minutes on a 2-core AMD EPYC (about 15 s with
 * --quick); the two S=1024 shapes are 90% of it, so time a run before adding a shape.
 *
 * Besides timing, the bench checks the engine's central promise: for a deterministic
 * schedule the gradient bytes do not depend on the thread count. It keeps the T=1
 * gradients of every deterministic schedule and compares the T=2 ones with memcmp; any
 * difference is reported loudly and the exit status is 1.
 *
 * The report goes to stdout and, with --out DIR, also to DIR/cpu-engine-YYYY-MM-DD.md
 * (UTC date; an existing file of that day is overwritten). Progress goes to stderr.
 * Exit status: 0 success, 1 an engine call, I/O or bit-identity check failed, 2 bad usage.
 */
#include "kernels/cpu/engine.h"
#include "../proto/errors.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include "bench/benchmeta.h"
#include "bench/benchrng.h"
#include "bench/benchtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_REPS_DEFAULT 3
#define BENCH_REPS_MAX 1000
#define BENCH_SEED 0x5eed5eedULL
#define BENCH_NTHREADS 2

/* gcc's __VERSION__ is the bare version number; clang's already names the compiler. */
#if defined(__GNUC__) && !defined(__clang__)
#define BENCH_COMPILER "gcc " __VERSION__
#else
#define BENCH_COMPILER __VERSION__
#endif

struct shape {
    int32_t batch, heads, seqlen, head_dim;
};

static const struct shape shapes[] = {
    {1, 4, 512, 64},
    {1, 4, 1024, 64},
    {1, 2, 1024, 128},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static const int32_t thread_counts[BENCH_NTHREADS] = {1, 2};

/* Backward schedules in report order; atomic first because the others are compared to it. */
static const enum sched_kind bwd_scheds[] = {
    SCHED_ATOMIC, SCHED_ASCENDING, SCHED_DESCENDING, SCHED_SPT, SCHED_SHIFT, SCHED_AUTO,
};
#define NSCHEDS ((int)(sizeof bwd_scheds / sizeof bwd_scheds[0]))

/* One measured row of a table. */
struct result {
    int shape;
    enum sched_mask mask;
    int32_t threads;
    enum sched_kind sched;    /* what was asked for */
    enum sched_kind resolved; /* what ran (differs only for auto) */
    double ms, gflops;
    double atomic_ms; /* bwd only: the atomic row of the same shape, mask and threads */
};

/* Gradients of one backward, as bytes. */
struct grads {
    unsigned char *dq, *dk, *dv;
};

struct bench {
    int reps;
    struct eng *eng[BENCH_NTHREADS];
    size_t max_elems; /* elements of the largest (batch, seqlen, heads, head_dim) tensor */
    size_t max_rows;  /* largest batch * heads * seqlen, for lse */
    /* Inputs (random normal, bf16) sized for the largest shape; a smaller dense shape
     * uses a prefix of each. */
    uint16_t *q, *k, *v, *dout;
    /* Outputs, allocated once. out and lse are the forward's and feed the backward. */
    uint16_t *out, *dq, *dk, *dv;
    float *lse;
    struct grads ref[NSCHEDS]; /* T=1 gradients of each schedule, for the identity check */
    double *samples;           /* reps timings */
    struct result *fwd, *bwd;
    int nfwd, nbwd;
    /* Per (shape, mask): did every deterministic schedule give the same bytes at T=1, 2? */
    int identical[NSHAPES][SCHED_MASK_COUNT];
    int measured[NSHAPES][SCHED_MASK_COUNT];
};

/* ---- helpers ------------------------------------------------------------------------ */


static struct attn_problem problem_of(const struct shape *s, enum sched_mask mask)
{
    struct attn_problem p = {
        .batch = s->batch,
        .seqlen_q = s->seqlen,
        .seqlen_k = s->seqlen,
        .heads_q = s->heads,
        .heads_kv = s->heads,
        .head_dim = s->head_dim,
        .dtype = DTYPE_BF16,
        .mask = mask,
        .scale = (float)(1.0 / sqrt((double)s->head_dim)),
    };
    return p;
}

static double fwd_flops(const struct shape *s, enum sched_mask mask)
{
    double f = 4.0 * s->batch * s->heads * (double)s->seqlen * s->seqlen * s->head_dim;
    return mask == SCHED_MASK_CAUSAL ? f / 2 : f;
}

static size_t elems_of(const struct shape *s)
{
    return (size_t)s->batch * s->seqlen * s->heads * s->head_dim;
}

static const char *mask_label(enum sched_mask m)
{
    return m == SCHED_MASK_CAUSAL ? "causal" : "full";
}

/* ---- timing ----------------------------------------------------------------------- */

/* The call under test. Returns 0 or a negative code; *ret_cfg gets the resolved config. */
struct call {
    struct eng *eng;
    const struct attn_problem *p;
    struct attn_config cfg;
    int backward;
    struct attn_tensor q, k, v, out, dout, dq, dk, dv;
    float *lse;
};

static int call_run(const struct call *c, struct attn_config *ret_cfg)
{
    if (c->backward)
        return eng_backward(c->eng, c->p, &c->cfg, c->dq, c->dk, c->dv, c->q, c->k, c->v,
                            c->out, c->lse, c->dout, ret_cfg);
    return eng_forward(c->eng, c->p, &c->cfg, c->out, c->lse, c->q, c->k, c->v, ret_cfg);
}

/* One warm-up (it also grows the engine's arena and fills the auto cache, neither of
 * which a serving daemon pays per request), then the median of b->reps timed calls. */
static int time_call(struct bench *b, const struct call *c, struct attn_config *ret_cfg,
                     double *ret_ms)
{
    int rc = call_run(c, ret_cfg);
    if (rc)
        return rc;
    for (int r = 0; r < b->reps; r++) {
        double t0 = btime_now_ms();
        if ((rc = call_run(c, ret_cfg)))
            return rc;
        b->samples[r] = btime_now_ms() - t0;
    }
    qsort(b->samples, (size_t)b->reps, sizeof b->samples[0], btime_cmp_double);
    *ret_ms = b->reps % 2 ? b->samples[b->reps / 2]
                          : 0.5 * (b->samples[b->reps / 2 - 1] + b->samples[b->reps / 2]);
    return 0;
}

/* ---- the runs --------------------------------------------------------------------- */

/* Forward and every backward schedule of one shape and mask on engine ti. */
static int bench_one(struct bench *b, int si, enum sched_mask mask, int ti)
{
    const struct shape *s = &shapes[si];
    const struct attn_problem p = problem_of(s, mask);
    const size_t bytes = elems_of(s) * sizeof(uint16_t);
    struct call c = {
        .eng = b->eng[ti],
        .p = &p,
        .q = attn_dense(b->q, s->seqlen, s->heads, s->head_dim),
        .k = attn_dense(b->k, s->seqlen, s->heads, s->head_dim),
        .v = attn_dense(b->v, s->seqlen, s->heads, s->head_dim),
        .out = attn_dense(b->out, s->seqlen, s->heads, s->head_dim),
        .dout = attn_dense(b->dout, s->seqlen, s->heads, s->head_dim),
        .dq = attn_dense(b->dq, s->seqlen, s->heads, s->head_dim),
        .dk = attn_dense(b->dk, s->seqlen, s->heads, s->head_dim),
        .dv = attn_dense(b->dv, s->seqlen, s->heads, s->head_dim),
        .lse = b->lse,
    };
    struct attn_config got;
    double ms, atomic_ms = 0;
    int rc;

    /* The forward also produces the out and lse that every backward below reads. */
    if ((rc = time_call(b, &c, &got, &ms)))
        return rc;
    b->fwd[b->nfwd++] = (struct result){si, mask, thread_counts[ti], SCHED_ASCENDING,
                                        got.sched, ms, fwd_flops(s, mask) / (ms * 1e6), 0};
    fprintf(stderr, "  S=%d H=%d D=%d %-6s T=%d  fwd %8.2f ms", s->seqlen, s->heads,
            s->head_dim, mask_label(mask), thread_counts[ti], ms);

    c.backward = 1;
    for (int k = 0; k < NSCHEDS; k++) {
        c.cfg.sched = bwd_scheds[k];
        if ((rc = time_call(b, &c, &got, &ms)))
            return rc;
        if (bwd_scheds[k] == SCHED_ATOMIC)
            atomic_ms = ms;
        b->bwd[b->nbwd++] = (struct result){si,    mask,
                                            thread_counts[ti], bwd_scheds[k],
                                            got.sched, ms,
                                            2.5 * fwd_flops(s, mask) / (ms * 1e6), atomic_ms};
        fprintf(stderr, "  %s %.1f", sched_kind_name(bwd_scheds[k]), ms);
        if (!sched_is_deterministic(got.sched))
            continue;
        /* The last timed call's gradients stand for the configuration. */
        struct grads *g = &b->ref[k];
        if (ti == 0) {
            memcpy(g->dq, b->dq, bytes);
            memcpy(g->dk, b->dk, bytes);
            memcpy(g->dv, b->dv, bytes);
        } else if (memcmp(g->dq, b->dq, bytes) || memcmp(g->dk, b->dk, bytes) ||
                   memcmp(g->dv, b->dv, bytes)) {
            fprintf(stderr, "\n*** BITS DIFFER: %s backward, B=%d H=%d S=%d D=%d %s, T=1 vs T=%d\n",
                    sched_kind_name(bwd_scheds[k]), s->batch, s->heads, s->seqlen, s->head_dim,
                    mask_label(mask), thread_counts[ti]);
            b->identical[si][mask] = 0;
        }
    }
    fputc('\n', stderr);
    return 0;
}

/* ---- the report --------------------------------------------------------------------- */


static void write_report(FILE *f, const struct bench *b, const char *date_iso,
                         const char *cmdline, const char *cpu, const char *commit,
                         const char *loadavg)
{
    fprintf(f, "# CPU attention engine benchmark\n\n");
    fprintf(f, "- date: %s\n", date_iso);
    fprintf(f, "- host CPU: %s\n", cpu);
    fprintf(f, "- online CPUs: %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
    fprintf(f, "- load average at start (1, 5, 15 min): %s\n", loadavg);
    fprintf(f, "- git commit: %s\n", commit);
    fprintf(f, "- compiler: %s\n", BENCH_COMPILER);
    fprintf(f, "- command: `%s`\n", cmdline);
    fprintf(f, "- method: bf16 storage, fp32 arithmetic, %dx%d tiles, W=%d; 1 warm-up call, "
               "then the median of %d timed calls (CLOCK_MONOTONIC); random normal inputs\n",
            ENG_BLOCK_DEFAULT, ENG_BLOCK_DEFAULT, SCHED_W_DEFAULT, b->reps);
    fprintf(f, "- FLOPs as flash-attn counts them: fwd = 4 * B * H * S * S * D (halved for "
               "the causal mask), bwd = 2.5 * fwd\n\n");

    fprintf(f, "## Forward\n\n");
    fprintf(f, "| shape (B,H,S,D,mask) | threads | schedule | ms (median) | GFLOP/s |\n");
    fprintf(f, "| --- | ---: | --- | ---: | ---: |\n");
    for (int i = 0; i < b->nfwd; i++) {
        const struct result *r = &b->fwd[i];
        const struct shape *s = &shapes[r->shape];
        fprintf(f, "| %d,%d,%d,%d,%s | %d | - | %.2f | %.2f |\n", s->batch, s->heads,
                s->seqlen, s->head_dim, mask_label(r->mask), r->threads, r->ms, r->gflops);
    }
    fprintf(f, "\nThe forward has no schedule: every q-tile is one independent task.\n\n");

    fprintf(f, "## Backward\n\n");
    fprintf(f, "| shape (B,H,S,D,mask) | threads | schedule | ms (median) | GFLOP/s "
               "| vs atomic |\n");
    fprintf(f, "| --- | ---: | --- | ---: | ---: | ---: |\n");
    for (int i = 0; i < b->nbwd; i++) {
        const struct result *r = &b->bwd[i];
        const struct shape *s = &shapes[r->shape];
        char sched[64];
        if (r->sched == SCHED_AUTO)
            snprintf(sched, sizeof sched, "auto (%s)", sched_kind_name(r->resolved));
        else
            snprintf(sched, sizeof sched, "%s", sched_kind_name(r->sched));
        fprintf(f, "| %d,%d,%d,%d,%s | %d | %s | %.2f | %.2f | %.2f |\n", s->batch, s->heads,
                s->seqlen, s->head_dim, mask_label(r->mask), r->threads, sched, r->ms,
                r->gflops, r->atomic_ms / r->ms);
    }
    fprintf(f, "\n\"vs atomic\" is atomic_ms / this_ms for the same shape, mask and thread "
               "count: above 1 this schedule is faster than `atomic`, below 1 it is slower. "
               "With 1 thread every schedule does the same arithmetic in another order, so "
               "there the ratio shows cache effects and timing noise, not waiting. "
               "\"auto (x)\" means auto resolved to "
               "schedule x.\n\n");

    fprintf(f, "## Reproducibility\n\n");
    fprintf(f, "The deterministic schedules (ascending, descending, spt, shift, and auto) "
               "must give identical dq/dk/dv bytes whatever the thread count; the bench "
               "compares the T=1 and T=2 gradients of each with memcmp.\n\n");
    for (int si = 0; si < NSHAPES; si++)
        for (int m = 0; m < SCHED_MASK_COUNT; m++) {
            if (!b->measured[si][m])
                continue;
            const struct shape *s = &shapes[si];
            fprintf(f, "- %d,%d,%d,%d,%s: bitwise identical across 1 and 2 threads: %s\n",
                    s->batch, s->heads, s->seqlen, s->head_dim, mask_label((enum sched_mask)m),
                    b->identical[si][m] ? "yes" : "NO");
        }
}

/* Writes the report to DIR/cpu-engine-<date>.md. Returns 0 or -errno. */
static int save_report(const struct bench *b, const char *dir, const char *date_day,
                       const char *date_iso, const char *cmdline, const char *cpu,
                       const char *commit, const char *loadavg, char *ret_path, size_t cap)
{
    snprintf(ret_path, cap, "%s/cpu-engine-%s.md", dir, date_day);
    FILE *f = fopen(ret_path, "w");
    if (!f)
        return -errno;
    write_report(f, b, date_iso, cmdline, cpu, commit, loadavg);
    int err = ferror(f);
    if (fclose(f) != 0 || err)
        return -EIO;
    return 0;
}

/* ---- main ------------------------------------------------------------------------------ */

static void usage(FILE *f, const char *argv0)
{
    fprintf(f, "usage: %s [--quick] [--reps N] [--out DIR]\n"
               "  --quick    only the first shape (B=1 H=4 S=512 D=64)\n"
               "  --reps N   timed calls per measurement, median reported (default %d)\n"
               "  --out DIR  also write DIR/cpu-engine-YYYY-MM-DD.md\n",
            argv0, BENCH_REPS_DEFAULT);
}

int main(int argc, char **argv)
{
    struct bench b = {.reps = BENCH_REPS_DEFAULT};
    const char *out_dir = NULL;
    int nshapes = NSHAPES, status = 1, rc = 0, reported = 0;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            nshapes = 1;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || n < 1 || n > BENCH_REPS_MAX) {
                fprintf(stderr, "bench_engine: --reps wants 1..%d\n", BENCH_REPS_MAX);
                return 2;
            }
            b.reps = (int)n;
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out_dir = argv[++i];
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout, argv[0]);
            return 0;
        } else {
            usage(stderr, argv[0]);
            return 2;
        }
    }

    /* Stamp the run before it starts, so the date names the day it was begun. */
    char date_iso[32], date_day[16], cpu[256], commit[160], cmdline[4096], loadavg[64];
    time_t t0 = time(NULL);
    struct tm utc;
    gmtime_r(&t0, &utc);
    strftime(date_iso, sizeof date_iso, "%Y-%m-%dT%H:%M:%SZ", &utc);
    strftime(date_day, sizeof date_day, "%Y-%m-%d", &utc);
    bmeta_cpu_model(cpu, sizeof cpu);
    bmeta_loadavg(loadavg, sizeof loadavg);
    bmeta_git_commit(commit, sizeof commit);
    bmeta_cmdline(cmdline, sizeof cmdline, argc, argv);

    for (int si = 0; si < nshapes; si++) {
        const struct shape *s = &shapes[si];
        size_t rows = (size_t)s->batch * s->heads * s->seqlen;
        if (elems_of(s) > b.max_elems)
            b.max_elems = elems_of(s);
        if (rows > b.max_rows)
            b.max_rows = rows;
    }
    const size_t bytes = b.max_elems * sizeof(uint16_t);
    const int nruns = nshapes * SCHED_MASK_COUNT * BENCH_NTHREADS;

    rc = -ENOMEM;
    uint16_t **bufs[] = {&b.q, &b.k, &b.v, &b.dout, &b.out, &b.dq, &b.dk, &b.dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i] = malloc(bytes)))
            goto out_free;
    for (int k = 0; k < NSCHEDS; k++)
        if (!(b.ref[k].dq = malloc(bytes)) || !(b.ref[k].dk = malloc(bytes)) ||
            !(b.ref[k].dv = malloc(bytes)))
            goto out_free;
    if (!(b.lse = malloc(sizeof(float) * b.max_rows)) ||
        !(b.samples = malloc(sizeof(double) * (size_t)b.reps)) ||
        !(b.fwd = calloc((size_t)nruns, sizeof *b.fwd)) ||
        !(b.bwd = calloc((size_t)nruns * NSCHEDS, sizeof *b.bwd)))
        goto out_free;
    for (int ti = 0; ti < BENCH_NTHREADS; ti++)
        if (!(b.eng[ti] = eng_new(thread_counts[ti])))
            goto out_free;

    uint64_t rng = BENCH_SEED;
    bench_fill_bf16(b.q, b.max_elems, &rng);
    bench_fill_bf16(b.k, b.max_elems, &rng);
    bench_fill_bf16(b.v, b.max_elems, &rng);
    bench_fill_bf16(b.dout, b.max_elems, &rng);

    fprintf(stderr, "bench_engine: %d shape(s) x {full, causal} x threads {1, 2}, %d rep(s)\n",
            nshapes, b.reps);
    double wall0 = btime_now_ms();
    for (int si = 0; si < nshapes; si++)
        for (int m = 0; m < SCHED_MASK_COUNT; m++) {
            b.identical[si][m] = 1;
            b.measured[si][m] = 1;
            /* T=1 first: its gradients are what T=2 must reproduce. */
            for (int ti = 0; ti < BENCH_NTHREADS; ti++)
                if ((rc = bench_one(&b, si, (enum sched_mask)m, ti)))
                    goto out_free;
        }
    fprintf(stderr, "bench_engine: measured in %.1f s\n", (btime_now_ms() - wall0) / 1e3);

    write_report(stdout, &b, date_iso, cmdline, cpu, commit, loadavg);
    if (fflush(stdout) != 0) {
        rc = -EIO;
        goto out_free;
    }
    if (out_dir) {
        char path[4096];
        if ((rc = save_report(&b, out_dir, date_day, date_iso, cmdline, cpu, commit, loadavg,
                              path, sizeof path))) {
            fprintf(stderr, "bench_engine: cannot write %s: %s\n", path, dash_strerror(rc));
            reported = 1;
            goto out_free;
        }
        fprintf(stderr, "bench_engine: report written to %s\n", path);
    }

    status = 0;
    for (int si = 0; si < nshapes; si++)
        for (int m = 0; m < SCHED_MASK_COUNT; m++)
            if (!b.identical[si][m])
                status = 1;
    if (status)
        fprintf(stderr, "\n*** bench_engine: FAILED: a deterministic schedule gave different "
                        "bits for 1 and 2 threads (see above) ***\n\n");
    rc = 0;

out_free:
    if (rc && !reported)
        fprintf(stderr, "\nbench_engine: error: %s\n", dash_strerror(rc));
    for (int ti = 0; ti < BENCH_NTHREADS; ti++)
        eng_free(b.eng[ti]);
    free(b.bwd);
    free(b.fwd);
    free(b.samples);
    free(b.lse);
    for (int k = 0; k < NSCHEDS; k++) {
        free(b.ref[k].dv);
        free(b.ref[k].dk);
        free(b.ref[k].dq);
    }
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(*bufs[i]);
    return rc ? 1 : status;
}
