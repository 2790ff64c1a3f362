// SPDX-License-Identifier: BSD-3-Clause
/*
 * demo_client.c - what `make demo` runs against a live dashd: a client that puts random
 * bf16 attention inputs in shared memory, asks the daemon for the forward and the
 * backward, checks the results against a float64 reference, checks - when the daemon
 * serves from the CPU engine - that the bytes are exactly what the engine computes in this
 * process with the configuration the daemon reports, and runs the backward again to show
 * the gradients repeat bit for bit. (On a GPU the bits are the CUDA kernels', which the
 * GPU test suite compares with the kernels run in-process.)
 *
 *   demo_client [ENDPOINT]     (default: the endpoint dashd uses by default)
 */
#include "client/dash.h"
#include "kernels/digest/digest.h"
#include "kernels/cpu/engine.h"
#include "kernels/attn/ref.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { B = 2, SQ = 300, SK = 300, HQ = 8, HKV = 2, D = 64 };

/* byte offsets of the tensors in one shared buffer */
struct layout {
    uint64_t q, k, v, out, lse, dout, dq, dk, dv, total;
};

static uint64_t place(uint64_t *at, uint64_t bytes)
{
    uint64_t here = *at;
    *at += (bytes + 63) & ~(uint64_t)63;
    return here;
}

static struct layout layout_make(void)
{
    struct layout L;
    uint64_t at = 0, qb = (uint64_t)B * SQ * HQ * D * 2, kb = (uint64_t)B * SK * HKV * D * 2;
    L.q = place(&at, qb), L.k = place(&at, kb), L.v = place(&at, kb), L.out = place(&at, qb);
    L.lse = place(&at, (uint64_t)B * HQ * SQ * 4), L.dout = place(&at, qb);
    L.dq = place(&at, qb), L.dk = place(&at, kb), L.dv = place(&at, kb);
    L.total = at;
    return L;
}

/* random normal bf16 values, from a seed drawn from the clock: fresh every run */
static void fill(void *base, uint64_t off, int64_t n, uint64_t *s)
{
    uint16_t *p = (uint16_t *)((char *)base + off);
    for (int64_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        double u1 = ((double)(*s >> 11) + 1.0) / 9007199254740993.0;
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        double u2 = (double)(*s >> 11) / 9007199254740992.0;
        p[i] = dtype_f32_to_bf16((float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2)));
    }
}

static const char *sched_name(enum dash_schedule s)
{
    static const char *names[] = {"auto", "atomic", "ascending", "descending", "spt", "shift"};
    return (unsigned)s < 6 ? names[s] : "?";
}

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))) {
        int help = argc == 2;
        fprintf(help ? stdout : stderr,
                "Usage: demo_client [ENDPOINT]\n"
                "Asks a running dashd (at ENDPOINT, default: where dashd listens by default)\n"
                "for a forward and a backward on random bf16 inputs in shared memory, checks\n"
                "them against a float64 reference (and, on the CPU engine, bit for bit\n"
                "against this process), and repeats the backward to show the same bits.\n"
                "Exit status 0 when every check passes.\n");
        return help ? 0 : 2;
    }
    const char *endpoint = argc > 1 ? argv[1] : NULL;
    struct dash_connect_opts opts = {.client_name = "demo_client", .run_tag = "make-demo",
                                     .timeout_ms = 10000};
    struct dash_client *c = NULL;
    struct dash_buffer *buf = NULL;
    struct layout L = layout_make();
    int rc = dash_connect(endpoint, &opts, &c);
    if (rc) {
        fprintf(stderr, "demo_client: cannot reach dashd: %s\n", dash_strerror(rc));
        return 1;
    }
    if ((rc = dash_shm_alloc(c, L.total, &buf))) {
        fprintf(stderr, "demo_client: shared memory: %s\n", dash_strerror(rc));
        dash_close(c);
        return 1;
    }
    char *base = dash_buffer_data(buf);
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    fill(base, L.q, (int64_t)B * SQ * HQ * D, &seed);
    fill(base, L.k, (int64_t)B * SK * HKV * D, &seed);
    fill(base, L.v, (int64_t)B * SK * HKV * D, &seed);
    fill(base, L.dout, (int64_t)B * SQ * HQ * D, &seed);
    memset(base + L.out, 0xff, L.lse - L.out); /* poison outputs: NaN until written */
    memset(base + L.dq, 0xff, L.total - L.dq);

    struct dash_tensor q = dash_tensor_dense(buf, L.q, B, SQ, HQ, D);
    struct dash_tensor k = dash_tensor_dense(buf, L.k, B, SK, HKV, D);
    struct dash_tensor v = dash_tensor_dense(buf, L.v, B, SK, HKV, D);
    struct dash_tensor out = dash_tensor_dense(buf, L.out, B, SQ, HQ, D);
    struct dash_tensor lse = dash_tensor_lse(buf, L.lse, B, HQ, SQ);
    struct dash_tensor dout = dash_tensor_dense(buf, L.dout, B, SQ, HQ, D);
    struct dash_tensor dq = dash_tensor_dense(buf, L.dq, B, SQ, HQ, D);
    struct dash_tensor dk = dash_tensor_dense(buf, L.dk, B, SK, HKV, D);
    struct dash_tensor dv = dash_tensor_dense(buf, L.dv, B, SK, HKV, D);
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .schedule = DASH_SCHED_AUTO};
    struct dash_result fr, br;
    int ok = 1;

    printf("problem: batch %d, seqlen %d, heads %d q / %d kv, head_dim %d, causal, bf16\n", B, SQ,
           HQ, HKV, D);
    if ((rc = dash_forward(c, &a, &q, &k, &v, &out, &lse, &fr)) ||
        (rc = dash_backward(c, &a, &q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, &br))) {
        fprintf(stderr, "demo_client: %s\n", dash_strerror(rc));
        ok = 0;
        goto out;
    }
    printf("daemon (%s backend): forward %.1f ms, backward %.1f ms, schedule auto -> %s (W %d, "
           "tiles %dx%d)\n",
           br.backend, fr.run_us / 1e3, br.run_us / 1e3, sched_name(br.schedule), br.wave,
           br.block_m, br.block_n);
    uint64_t digest = digest_bytes(base + L.dq, L.total - L.dq);

    /* Values: against float64 attention on the same (bf16) inputs. */
    struct attn_problem p = {.batch = B, .seqlen_q = SQ, .seqlen_k = SK, .heads_q = HQ, .heads_kv = HKV, .head_dim = D, .dtype = DTYPE_BF16, .mask = SCHED_MASK_CAUSAL, .scale = 0.125f};
#define T(mem, off, s, h) attn_dense((mem) + (off), s, h, D)
    {
        int64_t nq = (int64_t)B * SQ * HQ * D, nk = (int64_t)B * SK * HKV * D;
        double *ro = malloc(sizeof(double) * nq), *rq = malloc(sizeof(double) * nq);
        double *rk = malloc(sizeof(double) * nk), *rv = malloc(sizeof(double) * nk);
        double *got = malloc(sizeof(double) * nq);
        double err[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
        if (ro && rq && rk && rv && got &&
            ref_forward(&p, T(base, L.q, SQ, HQ), T(base, L.k, SK, HKV), T(base, L.v, SK, HKV), ro, NULL) == 0 &&
            ref_backward(&p, T(base, L.q, SQ, HQ), T(base, L.k, SK, HKV), T(base, L.v, SK, HKV),
                         T(base, L.dout, SQ, HQ), rq, rk, rv) == 0) {
            const struct {
                uint64_t off;
                int64_t n;
                const double *ref;
            } cmp[4] = {{L.out, nq, ro}, {L.dq, nq, rq}, {L.dk, nk, rk}, {L.dv, nk, rv}};
            for (int i = 0; i < 4; i++) {
                for (int64_t j = 0; j < cmp[i].n; j++)
                    got[j] = dtype_load(base + cmp[i].off, DTYPE_BF16, j);
                err[i] = ref_rel_error(got, cmp[i].ref, cmp[i].n);
            }
        }
        int good = err[0] < 1e-2 && err[1] < 1e-2 && err[2] < 1e-2 && err[3] < 1e-2;
        printf("vs float64 reference: out %.1e, dq %.1e, dk %.1e, dv %.1e (limit 1e-2): %s\n",
               err[0], err[1], err[2], err[3], good ? "ok" : "TOO FAR");
        ok &= good;
        free(ro), free(rq), free(rk), free(rv), free(got);
    }

    /* Bits: on the CPU backend, the same computation in this process must match exactly. */
    if (strcmp(br.backend, "cpu") == 0) {
        char *mine = malloc(L.total);
        memcpy(mine, base, L.total);
        struct eng *e = eng_new(2);
        /* sched.h numbers the schedules as dash.h does */
        struct attn_config cfg = {(enum sched_kind)br.schedule, br.wave, br.block_m, br.block_n, 0};
        struct attn_config fcfg = {SCHED_ASCENDING, fr.wave, fr.block_m, fr.block_n, 0};
        rc = e ? eng_forward(e, &p, &fcfg, T(mine, L.out, SQ, HQ), (float *)(mine + L.lse),
                             T(mine, L.q, SQ, HQ), T(mine, L.k, SK, HKV), T(mine, L.v, SK, HKV), NULL)
               : -1;
        if (rc == 0)
            rc = eng_backward(e, &p, &cfg, T(mine, L.dq, SQ, HQ), T(mine, L.dk, SK, HKV),
                              T(mine, L.dv, SK, HKV), T(mine, L.q, SQ, HQ), T(mine, L.k, SK, HKV),
                              T(mine, L.v, SK, HKV), T(mine, L.out, SQ, HQ), (float *)(mine + L.lse),
                              T(mine, L.dout, SQ, HQ), NULL);
        int same = rc == 0 && memcmp(mine + L.out, base + L.out, L.total - L.out) == 0;
        printf("in-process engine, same inputs and configuration: %s\n",
               same ? "out, lse, dq, dk, dv identical bit for bit" : "DIFFERENT");
        ok &= same;
        free(mine);
        eng_free(e);
    }
#undef T

    /* Again through the daemon: a deterministic schedule repeats its bits. */
    memset(base + L.dq, 0xff, L.total - L.dq);
    if ((rc = dash_backward(c, &a, &q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, &br))) {
        fprintf(stderr, "demo_client: %s\n", dash_strerror(rc));
        ok = 0;
        goto out;
    }
    uint64_t again = digest_bytes(base + L.dq, L.total - L.dq);
    printf("backward digest %016llx, repeated %016llx: %s\n", (unsigned long long)digest,
           (unsigned long long)again, digest == again ? "identical" : "DIFFERENT");
    ok &= digest == again;
out:
    dash_shm_free(c, buf);
    dash_close(c);
    printf("result: %s\n", ok ? "all checks passed" : "FAILED");
    return ok ? 0 : 1;
}
