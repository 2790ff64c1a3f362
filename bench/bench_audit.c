// SPDX-License-Identifier: BSD-3-Clause
/*
 * bench_audit.c - what the audit (--audit-level outputs: the digests of dq, dk, dv) adds to
 * a backward on the GPU, part by part, with the kernels in this process (as dashd runs
 * them, stream-ordered on the kernels' own stream):
 *
 *   backward          the kernels alone;
 *   + leaves          the kernels hashing their output rows as they write them
 *                     (cuattn_set_leaves), no digest kernels;
 *   + from leaves     that, and the digests folded from those leaves (what dashd does):
 *                     by the backward's own dQ postprocess where it folds them
 *                     (cuattn_set_digests), else by the digest kernels after it;
 *   + from memory     the kernels alone, then the digests read from the outputs.
 *
 * Bursts of N backwards, one synchronise, the variants taking turns burst by burst in the
 * rounds of a Williams square (four orders in which every variant comes first once and
 * follows every other variant once: drift, and whatever a variant's place after another
 * costs, falls on all alike over each four rounds; a plain rotation, 553d0b3's, put each
 * variant after the same one three times in four). A variant's cost is the median over the
 * rounds of its time over the backward's in the same round, with that ratio's quartiles:
 * the GPU's clock moves by more between runs than the audit costs at causal 4k (1% there
 * is 16 us; the medians of 11 bursts taken apart read -0.4 to +6.6% over nine runs,
 * bench/results/device-session-2026-12-07c.md), so the cost is read from the pairs.
 * Then the digest kernels alone (event-timed, best of 5, from a backward's leaves and from
 * memory), and whether every way gives the same digests (the backward's own, when it made
 * them, too). bf16, 16384 tokens, 16 heads, schedule auto.
 *
 *   bench_audit [--seqlen S] [--hdim D] [--reps N] [--bursts B]
 *   bench_audit --once ...     one backward of each variant, untimed (for ncu)
 */
#include "bench/benchmeta.h"
#include "bench/benchrng.h"
#include "bench/benchtime.h"
#include "kernels/cuda/attn_cuda.h"
#include "kernels/digest/digest_cuda.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        cudaError_t e_ = (call);                                                     \
        if (e_ != cudaSuccess) {                                                     \
            fprintf(stderr, "bench_audit: %s: %s\n", #call, cudaGetErrorString(e_)); \
            goto out;                                                                \
        }                                                                            \
    } while (0)

#define BURSTS_MAX 200

#define VARIANTS 4

/* The rounds' orders (a Williams square of the four variants): round b takes row b % 4. */
static const int bench_audit_order[VARIANTS][VARIANTS] = {{0, 1, 3, 2}, {1, 2, 0, 3}, {2, 3, 1, 0}, {3, 0, 2, 1}};

/* One variant's backward (and digests) on a's stream; 0 or nonzero. */
static int one(struct cuattn *a, const struct attn_problem *p, const struct attn_tensor *e, const float *lse,
               int var, const struct digest_view *dv3, void *scratch, size_t need, uint64_t *d_out)
{
    uint64_t *const out[3] = {d_out, d_out + 1, d_out + 2};
    (void)cuattn_set_leaves(a, var == 1 || var == 2);
    (void)cuattn_set_digests(a, var == 2 ? out : NULL);
    int rc = cuattn_backward(a, p, NULL, 0, e[5], e[6], e[7], e[0], e[1], e[2], e[3], lse, e[4], NULL);
    (void)cuattn_set_digests(a, NULL);
    if (rc || var < 2 || (var == 2 && cuattn_digested(a)))
        return rc;
    struct digest_view v[3];
    for (int i = 0; i < 3; i++) {
        v[i] = dv3[i];
        v[i].leaves = var == 2 ? cuattn_leaves(a, i) : NULL;
        if (var == 2 && !v[i].leaves)
            return -1; /* these kernels hash every output */
    }
    return digest_cuda(v, 3, scratch, need, d_out, cuattn_stream(a));
}

int main(int argc, char **argv)
{
    int reps = 10, S = 4096, D = 128, once = 0, bursts = 32;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--bursts") == 0 && i + 1 < argc)
            bursts = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seqlen") == 0 && i + 1 < argc)
            S = atoi(argv[++i]);
        else if (strcmp(argv[i], "--hdim") == 0 && i + 1 < argc)
            D = atoi(argv[++i]);
        else if (strcmp(argv[i], "--once") == 0)
            once = 1;
        else {
            fprintf(stderr, "usage: bench_audit [--seqlen S] [--hdim 64|128|256] [--reps N] [--bursts B] [--once]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 1000 || bursts < 4 || bursts % 4 || bursts > BURSTS_MAX || S < 64 || 16384 % S ||
        (D != 64 && D != 128 && D != 256))
        return 2;
    const int H = 16, B = 16384 / S;
    const size_t n = (size_t)16384 * H * D, tb = n * 2, lb = (size_t)B * H * S * 4;
    int ok = 0;
    struct cuattn *a = NULL;
    unsigned char *mem = NULL;
    void *scratch = NULL;
    uint64_t *d_out = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (cuattn_new(0, &a) != 0) {
        fprintf(stderr, "bench_audit: no CUDA device\n");
        return 1;
    }
    (void)cuattn_set_async(a, 1);
    cudaStream_t st = (cudaStream_t)cuattn_stream(a);
    /* q k v out dout dq dk dv, then lse */
    CHECK(cudaMalloc((void **)&mem, 8 * tb + lb));
    {
        void *h = malloc(tb);
        uint64_t seed = 42;
        if (!h)
            goto out;
        for (int t = 0; t < 5; t++) { /* q k v out dout: N(0, 1) */
            bench_fill_bf16(h, n, &seed);
            CHECK(cudaMemcpy(mem + t * tb, h, tb, cudaMemcpyHostToDevice));
        }
        free(h);
    }
    struct attn_tensor e[8];
    for (int i = 0; i < 8; i++)
        e[i] = attn_dense(mem + (size_t)i * tb, S, H, D);
    const float *lse = (const float *)(const void *)(mem + 8 * tb);
    struct digest_view dv3[3];
    for (int i = 0; i < 3; i++)
        dv3[i] = (struct digest_view){mem + (size_t)(5 + i) * tb, 4, {B, S, H, D},
                                      {(int64_t)S * H * D, H * D, D, 1}, 2, NULL};
    const size_t need = digest_cuda_scratch_bytes(dv3, 3);
    CHECK(cudaMalloc(&scratch, need));
    CHECK(cudaMalloc((void **)&d_out, 3 * sizeof(uint64_t)));
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    char device[256] = "unknown", commit[64], cmd[512];
    (void)cuattn_device(a, device, sizeof device, NULL);
    bmeta_git_commit(commit, sizeof commit);
    bmeta_cmdline(cmd, sizeof cmd, argc, argv);
    printf("# what auditing (the digests of dq, dk, dv) adds to the backward, in process\n\n"
           "- device: %s\n- commit: %s\n- command: `%s`\n\n", device, commit, cmd);
    printf("bf16, batch %d x seqlen %d, 16 heads, hdim %d, schedule auto; bursts of %d stream-ordered "
           "backwards, the variants in turn (each round one row of a Williams square: every "
           "variant first once and after every other once in four rounds), %d rounds: ms per "
           "backward (median of the bursts), and each variant's cost as the median over the "
           "rounds of its burst over the backward's burst of the same round [quartiles]\n\n"
           "| mask | backward | + leaves (kernels hash) | + digests from leaves | + digests from memory | "
           "digest kernels: from leaves / from memory | same digests |\n"
           "| --- | ---: | ---: | ---: | ---: | ---: | --- |\n",
           B, S, D, reps, bursts);
    for (int causal = 0; causal < 2; causal++) {
        const struct attn_problem p = {.batch = B, .seqlen_q = S, .seqlen_k = S, .heads_q = H, .heads_kv = H,
                                       .head_dim = D, .dtype = DTYPE_BF16,
                                       .mask = causal ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL,
                                       .scale = (float)(1.0 / sqrt((double)D))};
        if (cuattn_forward(a, &p, NULL, e[3], (float *)(void *)(mem + 8 * tb), e[0], e[1], e[2], NULL) != 0)
            goto out;
        CHECK(cudaStreamSynchronize(st));
        if (once) {
            for (int var = 0; var < VARIANTS; var++)
                if (one(a, &p, e, lse, var, dv3, scratch, need, d_out) != 0)
                    goto out;
            CHECK(cudaStreamSynchronize(st));
            continue;
        }
        double t[VARIANTS][BURSTS_MAX];
        for (int burst = -1; burst < bursts; burst++)
            for (int turn = 0; turn < VARIANTS; turn++) {
                const int var = bench_audit_order[burst < 0 ? 0 : burst % VARIANTS][turn];
                CHECK(cudaStreamSynchronize(st));
                const double t0 = btime_now_ms();
                for (int k = 0; k < reps; k++)
                    if (one(a, &p, e, lse, var, dv3, scratch, need, d_out) != 0) {
                        fprintf(stderr, "bench_audit: variant %d failed\n", var);
                        goto out;
                    }
                CHECK(cudaStreamSynchronize(st));
                if (burst >= 0)
                    t[var][burst] = (btime_now_ms() - t0) / reps;
            }
        /* each round's ratios first (the medians below sort t) */
        double r[VARIANTS][BURSTS_MAX], m[VARIANTS], rq[VARIANTS][3];
        for (int var = 1; var < VARIANTS; var++) {
            for (int b = 0; b < bursts; b++)
                r[var][b] = 100.0 * (t[var][b] - t[0][b]) / t[0][b];
            qsort(r[var], (size_t)bursts, sizeof r[var][0], btime_cmp_double);
            rq[var][0] = r[var][bursts / 4];
            rq[var][1] = r[var][bursts / 2];
            rq[var][2] = r[var][(3 * bursts) / 4];
        }
        for (int var = 0; var < VARIANTS; var++)
            m[var] = btime_median(t[var], (size_t)bursts);
        /* the digests of variant 2 (the backward's own where it folds them), then the
         * digest kernels alone after a backward that left its leaves; and the bits */
        uint64_t got[3][3];
        if (one(a, &p, e, lse, 2, dv3, scratch, need, d_out) != 0)
            goto out;
        CHECK(cudaStreamSynchronize(st));
        const int folded = cuattn_digested(a);
        CHECK(cudaMemcpy(got[2], d_out, sizeof got[2], cudaMemcpyDeviceToHost));
        if (one(a, &p, e, lse, 1, dv3, scratch, need, d_out) != 0)
            goto out;
        struct digest_view v[3];
        for (int i = 0; i < 3; i++) {
            v[i] = dv3[i];
            v[i].leaves = cuattn_leaves(a, i);
        }
        float best[2] = {1e9f, 1e9f}, ms;
        for (int k = 0; k < 5; k++)
            for (int w = 0; w < 2; w++) {
                CHECK(cudaEventRecord(e0, st));
                if (digest_cuda(w ? dv3 : v, 3, scratch, need, d_out, st) != 0)
                    goto out;
                CHECK(cudaEventRecord(e1, st));
                CHECK(cudaEventSynchronize(e1));
                CHECK(cudaEventElapsedTime(&ms, e0, e1));
                best[w] = ms < best[w] ? ms : best[w];
                CHECK(cudaMemcpy(got[w], d_out, sizeof got[w], cudaMemcpyDeviceToHost));
            }
        (void)cuattn_set_leaves(a, 0);
        const int same = memcmp(got[0], got[1], sizeof got[0]) == 0 && memcmp(got[0], got[2], sizeof got[0]) == 0;
        printf("| %s | %.3f |", causal ? "causal" : "full", m[0]);
        for (int var = 1; var < VARIANTS; var++)
            printf(" %.3f (%+.2f%% [%+.2f, %+.2f]) |", m[var], rq[var][1], rq[var][0], rq[var][2]);
        printf(" %.3f / %.3f | %s%s |\n", best[0], best[1], same ? "yes" : "NO",
               folded ? " (folded by the backward)" : "");
    }
    ok = 1;
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(scratch);
    cudaFree(d_out);
    cudaFree(mem);
    cuattn_free(a);
    return ok ? 0 : 1;
}
