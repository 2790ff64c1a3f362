// SPDX-License-Identifier: BSD-3-Clause
/*
 * bench_varlen.c - what batch invariance costs on the CPU engine: a packed batch's
 * backward under every deterministic schedule, `auto` as a plain request resolves it (on
 * the batch's longest sequence) and as a batch-invariant one does (on the fixed reference
 * sequence), written up as a Markdown report.
 *
 *   bench_varlen [--quick] [--reps N] [--out DIR]
 *
 * The batch: document lengths drawn from a log-normal spread (median 512 tokens, sigma 1.0,
 * clipped to 1..4096: many short documents and a few long ones, as packed pre-training
 * data looks), drawn until TOTAL tokens are filled (the last one cut to fit); bf16, 8 heads
 * (GQA 8/2), head dim 64, causal, the engine's 64x64 tiles, W 64, 2 threads; and the same
 * batch with a sliding window of 256 keys. Each configuration: one warm-up call, then the
 * median of N (default 3) timed eng_backward calls.
 *
 * Every explicit schedule is batch invariant on the CPU engine (sequences are tiled and
 * ordered alone), so the invariant mode's cost is that of the schedule it resolves auto to
 * when the schedule that would be fastest for this batch is another one:
 *     cost = time(the schedule batch-invariant auto resolves to) / time(the fastest
 *            deterministic schedule on this batch) - 1,
 * both from the per-schedule rows (auto runs the schedule it names: the same code, the same
 * bits), so a shared machine's noise does not masquerade as a cost.
 * The report also checks, as bits, that each sequence's gradients are the same packed in
 * the drawn order and in the reversed order (exit status 1 if not).
 *
 * The report goes to stdout and, with --out DIR, to DIR/cpu-varlen-YYYY-MM-DD.md.
 */
#include "kernels/cpu/engine.h"
#include "kernels/sched/dag.h"

#include "bench/benchmeta.h"
#include "bench/benchrng.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOTAL 8192
#define TOTAL_QUICK 4096
#define MAX_DOCS 1024
#define HQ 8
#define HKV 2
#define HD 64
#define THREADS 2
#define SEED 0x76617231ULL

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64 -> uniform (0, 1) */
static double uniform(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}

/* Document lengths until `total` tokens: lognormal(ln 512, 1.0) clipped to 1..4096. */
static int32_t draw_docs(int32_t total, int32_t *cu)
{
    uint64_t s = SEED;
    int32_t n = 0;
    cu[0] = 0;
    while (cu[n] < total && n < MAX_DOCS) {
        double z = sqrt(-2 * log(uniform(&s))) * cos(2 * M_PI * uniform(&s));
        int32_t len = (int32_t)lround(exp(log(512.0) + 1.0 * z));
        len = len < 1 ? 1 : len > 4096 ? 4096 : len;
        if (cu[n] + len > total)
            len = total - cu[n];
        cu[n + 1] = cu[n] + len;
        n++;
    }
    return n;
}

struct bufs {
    void *q, *k, *v, *out, *dout, *dq, *dk, *dv;
    float *lse;
};

static int run(struct eng *e, const struct attn_problem *p, const struct attn_config *cfg,
               struct bufs *b, int reps, double *ret_ms, struct attn_config *ret_used)
{
    const int32_t T = p->total_q;
    struct attn_tensor q = attn_dense(b->q, T, HQ, HD), k = attn_dense(b->k, T, HKV, HD);
    struct attn_tensor v = attn_dense(b->v, T, HKV, HD), o = attn_dense(b->out, T, HQ, HD);
    struct attn_tensor dout = attn_dense(b->dout, T, HQ, HD), dq = attn_dense(b->dq, T, HQ, HD);
    struct attn_tensor dk = attn_dense(b->dk, T, HKV, HD), dv = attn_dense(b->dv, T, HKV, HD);
    int rc = eng_forward(e, p, cfg, o, b->lse, q, k, v, NULL);
    double t[64];
    for (int r = 0; !rc && r <= reps; r++) {
        double t0 = now_s();
        rc = eng_backward(e, p, cfg, dq, dk, dv, q, k, v, o, b->lse, dout, ret_used);
        if (r > 0)
            t[r - 1] = (now_s() - t0) * 1e3;
    }
    if (rc)
        return rc;
    for (int i = 1; i < reps; i++) /* median */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    *ret_ms = t[reps / 2];
    return 0;
}

int main(int argc, char **argv)
{
    int reps = 3, quick = 0;
    const char *out_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out_dir = argv[++i];
        else {
            fprintf(stderr, "usage: bench_varlen [--quick] [--reps N] [--out DIR]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 64) {
        fprintf(stderr, "bench_varlen: --reps from 1 to 64\n");
        return 2;
    }
    static int32_t cu[MAX_DOCS + 1], rcu[MAX_DOCS + 1];
    const int32_t total = quick ? TOTAL_QUICK : TOTAL;
    const int32_t n = draw_docs(total, cu);
    int32_t longest = 0;
    for (int32_t i = 0; i < n; i++)
        longest = cu[i + 1] - cu[i] > longest ? cu[i + 1] - cu[i] : longest;
    /* the same documents in reverse order, for the bit check */
    rcu[0] = 0;
    for (int32_t i = 0; i < n; i++)
        rcu[i + 1] = rcu[i] + (cu[n - i] - cu[n - i - 1]);

    struct bufs b, rb;
    const size_t nq = (size_t)total * HQ * HD, nk = (size_t)total * HKV * HD;
    uint64_t st = SEED;
    void **all[] = {&b.q, &b.k, &b.v, &b.out, &b.dout, &b.dq, &b.dk, &b.dv,
                    &rb.q, &rb.k, &rb.v, &rb.out, &rb.dout, &rb.dq, &rb.dk, &rb.dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const int kv = (i % 8) == 1 || (i % 8) == 2 || (i % 8) == 6 || (i % 8) == 7;
        *all[i] = malloc(2 * (kv ? nk : nq));
        if (!*all[i])
            return 1;
        bench_fill_bf16(*all[i], kv ? nk : nq, &st);
    }
    b.lse = malloc(sizeof(float) * HQ * (size_t)total);
    rb.lse = malloc(sizeof(float) * HQ * (size_t)total);
    /* rb: b's documents reversed */
    for (int32_t i = 0; i < n; i++) {
        const int32_t len = cu[i + 1] - cu[i], to = rcu[n - 1 - i];
        memcpy((char *)rb.q + (size_t)to * HQ * HD * 2, (char *)b.q + (size_t)cu[i] * HQ * HD * 2, (size_t)len * HQ * HD * 2);
        memcpy((char *)rb.dout + (size_t)to * HQ * HD * 2, (char *)b.dout + (size_t)cu[i] * HQ * HD * 2, (size_t)len * HQ * HD * 2);
        memcpy((char *)rb.k + (size_t)to * HKV * HD * 2, (char *)b.k + (size_t)cu[i] * HKV * HD * 2, (size_t)len * HKV * HD * 2);
        memcpy((char *)rb.v + (size_t)to * HKV * HD * 2, (char *)b.v + (size_t)cu[i] * HKV * HD * 2, (size_t)len * HKV * HD * 2);
    }

    struct eng *e = eng_new(THREADS);
    if (!e)
        return 1;
    char report[16384];
    size_t at = 0;
    char cpu[256], load[128], commit[64], cmd[512];
    bmeta_cpu_model(cpu, sizeof cpu);
    bmeta_loadavg(load, sizeof load);
    bmeta_git_commit(commit, sizeof commit);
    bmeta_cmdline(cmd, sizeof cmd, argc, argv);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char date[16];
    strftime(date, sizeof date, "%Y-%m-%d", &tm);
    at += (size_t)snprintf(report + at, sizeof report - at,
                           "# CPU engine: packed batches, batch invariance (%s)\n\n"
                           "- machine: %s, %d engine threads; load average at start %s\n"
                           "- commit %s; command `%s`\n"
                           "- batch: %d documents, %d tokens (lengths lognormal, median 512, "
                           "sigma 1.0, clipped 1..4096, seed %#llx; longest %d); bf16, heads "
                           "%d/%d, head dim %d, causal, tiles 64x64, W 64\n"
                           "- backward time, median of %d after a warm-up; cost = time of the "
                           "schedule batch-invariant auto picks / time of the fastest "
                           "deterministic schedule - 1 (from the per-schedule columns)\n\n"
                           "| mask | ascending | descending | spt | shift | auto -> | auto (batch "
                           "invariant) -> | cost |\n|---|---|---|---|---|---|---|---|\n",
                           date, cpu, THREADS, load, commit, cmd, n, total,
                           (unsigned long long)SEED, longest, HQ, HKV, HD, reps);
    int bad = 0;
    for (int win = 0; win < 2; win++) {
        struct attn_problem p = {.batch = n, .seqlen_q = longest, .seqlen_k = longest,
                                 .heads_q = HQ, .heads_kv = HKV, .head_dim = HD,
                                 .dtype = DTYPE_BF16, .mask = SCHED_MASK_CAUSAL,
                                 .scale = 0.125f, .window = win, .window_left = 256,
                                 .window_right = 0, .cu_seqlens_q = cu, .cu_seqlens_k = cu,
                                 .total_q = total, .total_k = total};
        /* rows: the kinds ascending..shift, then AUTO_ROW (auto) and INV_ROW (batch invariant) */
        enum { AUTO_ROW = SCHED_KIND_COUNT, INV_ROW, ROWS };
        double ms[ROWS], best = INFINITY;
        struct attn_config used[ROWS];
        for (int k = SCHED_ASCENDING; k < ROWS; k++) {
            struct attn_config cfg = {k < SCHED_KIND_COUNT ? (enum sched_kind)k : SCHED_AUTO, 0, 0,
                                      0, k == INV_ROW};
            fprintf(stderr, "bench_varlen: %s %s%s\n", win ? "window 256" : "causal",
                    sched_kind_name(cfg.sched), cfg.batch_invariant ? " (batch invariant)" : "");
            int rc = run(e, &p, &cfg, &b, reps, &ms[k], &used[k]);
            if (rc) {
                fprintf(stderr, "bench_varlen: eng_backward: %d\n", rc);
                return 1;
            }
            if (k < SCHED_KIND_COUNT && ms[k] < best)
                best = ms[k];
        }
        /* bits: each document's gradients the same packed reversed (batch-invariant auto) */
        struct attn_problem rp = p;
        rp.cu_seqlens_q = rp.cu_seqlens_k = rcu;
        struct attn_config inv = {SCHED_AUTO, 0, 0, 0, 1};
        double dummy;
        if (run(e, &p, &inv, &b, 1, &dummy, NULL) || run(e, &rp, &inv, &rb, 1, &dummy, NULL))
            return 1;
        for (int32_t i = 0; i < n; i++) {
            const int32_t len = cu[i + 1] - cu[i], to = rcu[n - 1 - i];
            if (memcmp((char *)rb.dq + (size_t)to * HQ * HD * 2, (char *)b.dq + (size_t)cu[i] * HQ * HD * 2, (size_t)len * HQ * HD * 2) ||
                memcmp((char *)rb.dk + (size_t)to * HKV * HD * 2, (char *)b.dk + (size_t)cu[i] * HKV * HD * 2, (size_t)len * HKV * HD * 2))
                bad = 1;
        }
        at += (size_t)snprintf(report + at, sizeof report - at,
                               "| %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %s %.1f ms | %s "
                               "%.1f ms | %+.1f%% |\n", win ? "causal, window 256" : "causal",
                               ms[SCHED_ASCENDING], ms[SCHED_DESCENDING], ms[SCHED_SPT],
                               ms[SCHED_SHIFT], sched_kind_name(used[AUTO_ROW].sched),
                               ms[AUTO_ROW], sched_kind_name(used[INV_ROW].sched), ms[INV_ROW],
                               100.0 * (ms[used[INV_ROW].sched] / best - 1));
    }
    at += (size_t)snprintf(report + at, sizeof report - at,
                           "\nEach document's dQ and dK bits packed in the drawn order and "
                           "reversed (batch-invariant auto): %s.\n",
                           bad ? "DIFFERENT (a bug)" : "identical");
    fputs(report, stdout);
    if (out_dir) {
        char path[512];
        snprintf(path, sizeof path, "%s/cpu-varlen-%s.md", out_dir, date);
        FILE *f = fopen(path, "w");
        if (!f || fputs(report, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "bench_varlen: cannot write %s\n", path);
            return 1;
        }
    }
    eng_free(e);
    return bad;
}
