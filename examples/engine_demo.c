// SPDX-License-Identifier: BSD-3-Clause
/*
 * engine_demo.c - one attention forward and backward on the CPU engine, in process,
 * checked against the float64 reference and checked bit for bit (build/engine_demo).
 *
 * It links the engine library and calls it directly; `make demo` (scripts/demo.sh) does
 * not run it: it runs examples/demo_client.c against a real dashd.
 *
 * The problem is chosen to exercise the awkward cases at once: bf16 storage, seqlen 300
 * (not a multiple of the 64-row tiles, so the last tile is ragged), GQA with 8 query heads
 * sharing 2 kv heads, and the bottom-right causal mask. The demo
 *   1. runs the forward and compares out with the reference,
 *   2. runs the backward with the `shift` schedule on engines of 1, 2 and 4 threads and
 *      requires identical dq/dk/dv bytes (it prints an FNV-1a digest of each run so the
 *      equality is visible), and compares the gradients with the reference,
 *   3. runs `auto` (printing what it chose) and `atomic` (whose bits may change from run
 *      to run: its additions into dQ happen in arrival order) against the reference.
 * Exit status 0 when every check passes, 1 otherwise.
 */
#include "kernels/cpu/engine.h"
#include "kernels/attn/ref.h"
#include "../proto/errors.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEMO_BATCH 2
#define DEMO_SEQLEN 300
#define DEMO_HEADS_Q 8
#define DEMO_HEADS_KV 2
#define DEMO_HEAD_DIM 64
#define DEMO_SEED 0xda5d0001ULL
#define DEMO_MAX_REL_ERR 1e-2 /* bf16 keeps 8 significant bits: ~4e-3 is expected */
#define DEMO_NENGINES 3

static const int32_t demo_threads[DEMO_NENGINES] = {1, 2, 4};

struct demo {
    struct attn_problem p;
    size_t nq, nk; /* elements of a q-shaped and of a k-shaped tensor */
    struct eng *eng[DEMO_NENGINES];
    uint16_t *q, *k, *v, *dout;      /* inputs, bf16 */
    uint16_t *out, *dq, *dk, *dv;    /* engine outputs, bf16 */
    float *lse;                      /* (batch, heads_q, seqlen) */
    double *ref_out, *ref_dq, *ref_dk, *ref_dv; /* float64 reference */
    double *tmp;                     /* an engine output widened to double */
    int failed;
};

/* ---- helpers ------------------------------------------------------------------------ */

/* splitmix64, then Box-Muller: standard normal values, reproducible from DEMO_SEED. */
static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *state) /* (0, 1], so log() stays finite */
{
    return ((double)(rng_next(state) >> 11) + 1.0) * 0x1.0p-53;
}

static void fill_normal(uint16_t *dst, size_t n, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        double r = sqrt(-2.0 * log(rng_unit(state))), t = 6.283185307179586 * rng_unit(state);
        dtype_store(dst, DTYPE_BF16, (int64_t)i, (float)(r * cos(t)));
    }
}

/* 64-bit FNV-1a, continued from h so that several buffers hash as their concatenation. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *c = data;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

#define FNV1A_INIT 0xcbf29ce484222325ULL

static uint64_t grads_digest(const struct demo *d)
{
    uint64_t h = fnv1a(FNV1A_INIT, d->dq, d->nq * sizeof(uint16_t));
    h = fnv1a(h, d->dk, d->nk * sizeof(uint16_t));
    return fnv1a(h, d->dv, d->nk * sizeof(uint16_t));
}

/* ||engine - reference|| / ||reference|| for a bf16 engine output of n elements. */
static double rel_err(struct demo *d, const uint16_t *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d->tmp[i] = dtype_load(got, DTYPE_BF16, (int64_t)i);
    return ref_rel_error(d->tmp, want, (int64_t)n);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static struct attn_tensor dense_q(const struct demo *d, void *data)
{
    return attn_dense(data, d->p.seqlen_q, d->p.heads_q, d->p.head_dim);
}

static struct attn_tensor dense_k(const struct demo *d, void *data)
{
    return attn_dense(data, d->p.seqlen_k, d->p.heads_kv, d->p.head_dim);
}

/* ---- the steps -------------------------------------------------------------------------- */

/* Backward with `sched` on engine ei; *ret_kind gets the schedule that ran. */
static int run_backward(struct demo *d, int ei, enum sched_kind sched, enum sched_kind *ret_kind,
                        double *ret_ms)
{
    struct attn_config cfg = {.sched = sched}, got;
    double t0 = now_ms();
    int rc = eng_backward(d->eng[ei], &d->p, &cfg, dense_q(d, d->dq), dense_k(d, d->dk),
                          dense_k(d, d->dv), dense_q(d, d->q), dense_k(d, d->k),
                          dense_k(d, d->v), dense_q(d, d->out), d->lse, dense_q(d, d->dout),
                          &got);
    *ret_ms = now_ms() - t0;
    if (rc)
        return rc;
    *ret_kind = got.sched;
    return 0;
}

/* Prints the gradients' errors vs the reference; marks the demo failed above the limit. */
static void check_grads(struct demo *d)
{
    double edq = rel_err(d, d->dq, d->ref_dq, d->nq);
    double edk = rel_err(d, d->dk, d->ref_dk, d->nk);
    double edv = rel_err(d, d->dv, d->ref_dv, d->nk);
    int ok = edq < DEMO_MAX_REL_ERR && edk < DEMO_MAX_REL_ERR && edv < DEMO_MAX_REL_ERR;
    printf("    rel err vs float64: dq %.1e  dk %.1e  dv %.1e  %s\n", edq, edk, edv,
           ok ? "ok" : "TOO LARGE");
    if (!ok)
        d->failed = 1;
}

static int demo_run(struct demo *d)
{
    const struct attn_problem *p = &d->p;
    enum sched_kind kind;
    double ms;
    int rc;

    printf("dashd engine demo - the CPU engine in this process (then demo_client asks a real\n"
           "dashd for the same)\n");
    printf("problem: batch %d, seqlen %d (ragged 64-row tiles), heads %d q / %d kv (GQA),\n"
           "         head_dim %d, causal, bf16, scale 1/sqrt(%d); random normal inputs\n",
           p->batch, p->seqlen_q, p->heads_q, p->heads_kv, p->head_dim, p->head_dim);

    /* The reference first: it is the slow part (float64, no tiling), about a second. */
    if ((rc = ref_forward(p, dense_q(d, d->q), dense_k(d, d->k), dense_k(d, d->v), d->ref_out,
                          NULL)) ||
        (rc = ref_backward(p, dense_q(d, d->q), dense_k(d, d->k), dense_k(d, d->v),
                           dense_q(d, d->dout), d->ref_dq, d->ref_dk, d->ref_dv)))
        return rc;

    double t0 = now_ms();
    if ((rc = eng_forward(d->eng[1], p, NULL, dense_q(d, d->out), d->lse, dense_q(d, d->q),
                          dense_k(d, d->k), dense_k(d, d->v), NULL)))
        return rc;
    ms = now_ms() - t0;
    double eout = rel_err(d, d->out, d->ref_out, d->nq);
    int ok = eout < DEMO_MAX_REL_ERR;
    printf("forward (2 threads, %.0f ms): out rel err vs float64 %.1e  %s\n", ms, eout,
           ok ? "ok" : "TOO LARGE");
    if (!ok)
        d->failed = 1;

    /* The promise: a deterministic schedule's bytes do not depend on the thread count. */
    printf("backward, schedule shift:\n");
    uint64_t first = 0;
    for (int ei = 0; ei < DEMO_NENGINES; ei++) {
        if ((rc = run_backward(d, ei, SCHED_SHIFT, &kind, &ms)))
            return rc;
        uint64_t h = grads_digest(d);
        if (ei == 0)
            first = h;
        printf("    %d thread%s %6.0f ms  digest(dq|dk|dv) %016llx%s\n", demo_threads[ei],
               demo_threads[ei] == 1 ? " " : "s", ms, (unsigned long long)h,
               ei == 0 ? "" : h == first ? "  identical" : "  DIFFERENT");
        if (h != first)
            d->failed = 1;
    }
    check_grads(d); /* of the last run; the digests say the others are the same bytes */

    if ((rc = run_backward(d, 1, SCHED_AUTO, &kind, &ms)))
        return rc;
    printf("backward, schedule auto -> %s (2 threads, %.0f ms), digest %016llx\n",
           sched_kind_name(kind), ms, (unsigned long long)grads_digest(d));
    check_grads(d);

    if ((rc = run_backward(d, 1, SCHED_ATOMIC, &kind, &ms)))
        return rc;
    printf("backward, schedule atomic (2 threads, %.0f ms), digest %016llx\n"
           "    (not guaranteed reproducible: dQ partials are added in arrival order)\n",
           ms, (unsigned long long)grads_digest(d));
    check_grads(d);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        int help = !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h");
        fprintf(help ? stdout : stderr,
                "Usage: engine_demo\n"
                "One attention forward and backward on the CPU engine in this process (bf16,\n"
                "seqlen 300, GQA 8/2, causal), checked against a float64 reference, the\n"
                "backward's bits checked equal on 1, 2 and 4 threads. Takes no arguments.\n"
                "Exit status 0 when every check passes.\n");
        return help ? 0 : 2;
    }
    struct demo d = {
        .p = {
            .batch = DEMO_BATCH,
            .seqlen_q = DEMO_SEQLEN,
            .seqlen_k = DEMO_SEQLEN,
            .heads_q = DEMO_HEADS_Q,
            .heads_kv = DEMO_HEADS_KV,
            .head_dim = DEMO_HEAD_DIM,
            .dtype = DTYPE_BF16,
            .mask = SCHED_MASK_CAUSAL,
            .scale = (float)(1.0 / sqrt((double)DEMO_HEAD_DIM)),
        },
    };
    d.nq = (size_t)DEMO_BATCH * DEMO_SEQLEN * DEMO_HEADS_Q * DEMO_HEAD_DIM;
    d.nk = (size_t)DEMO_BATCH * DEMO_SEQLEN * DEMO_HEADS_KV * DEMO_HEAD_DIM;
    int rc = -ENOMEM;

    if (!(d.q = malloc(d.nq * 2)) || !(d.dout = malloc(d.nq * 2)) ||
        !(d.out = malloc(d.nq * 2)) || !(d.dq = malloc(d.nq * 2)) ||
        !(d.k = malloc(d.nk * 2)) || !(d.v = malloc(d.nk * 2)) || !(d.dk = malloc(d.nk * 2)) ||
        !(d.dv = malloc(d.nk * 2)) ||
        !(d.lse = malloc(sizeof(float) * DEMO_BATCH * DEMO_HEADS_Q * DEMO_SEQLEN)) ||
        !(d.ref_out = malloc(sizeof(double) * d.nq)) ||
        !(d.ref_dq = malloc(sizeof(double) * d.nq)) ||
        !(d.ref_dk = malloc(sizeof(double) * d.nk)) ||
        !(d.ref_dv = malloc(sizeof(double) * d.nk)) || !(d.tmp = malloc(sizeof(double) * d.nq)))
        goto out_free;
    for (int i = 0; i < DEMO_NENGINES; i++)
        if (!(d.eng[i] = eng_new(demo_threads[i])))
            goto out_free;

    uint64_t rng = DEMO_SEED;
    fill_normal(d.q, d.nq, &rng);
    fill_normal(d.k, d.nk, &rng);
    fill_normal(d.v, d.nk, &rng);
    fill_normal(d.dout, d.nq, &rng);

    rc = demo_run(&d);

out_free:
    if (rc)
        fprintf(stderr, "engine_demo: error: %s\n", dash_strerror(rc));
    else
        printf("%s\n", d.failed ? "result: FAILED (see above)" : "result: all checks passed");
    for (int i = 0; i < DEMO_NENGINES; i++)
        eng_free(d.eng[i]);
    free(d.tmp);
    free(d.ref_dv);
    free(d.ref_dk);
    free(d.ref_dq);
    free(d.ref_out);
    free(d.lse);
    free(d.dv);
    free(d.dk);
    free(d.v);
    free(d.k);
    free(d.dq);
    free(d.out);
    free(d.dout);
    free(d.q);
    return rc || d.failed ? 1 : 0;
}
