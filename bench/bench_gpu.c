// SPDX-License-Identifier: BSD-3-Clause
/*
 * bench_gpu.c - forward and backward TFLOPS of our CUDA kernels (kernels/cuda/attn_cuda.h) for
 * every schedule, at the shapes of the anchors (bf16, 16384 tokens per batch, heads *
 * head_dim = 2048, seqlen 1k..16k, hdim 64, 128, 96 and 256, full and causal), plus a bitwise
 * repeat check of every deterministic schedule. Prints one JSON object; bench/gpu_report.py
 * joins it with PyTorch's numbers from bench/sdpa_peers.py, measured in the same run.
 *
 *   bench_gpu [--quick] [--reps N] [--only D,S,MASK[,SCHED]] [--impl 1|2|3]
 *             [--window L | --lengths N,N,...]
 *
 * --only runs one shape (head dim D, seqlen S, mask full|causal) and optionally one
 * schedule, so that a profiler (ncu -k ... --launch-count 1) can find its launch; its D
 * may be any head dim the kernels serve, a multiple of 8 from 32 to 256 (the sweep has 64,
 * 128, 96 and 256), and S at most 16384 (else the usage, exit 2). H = 2048 / D
 * rounded down (head dim 96, the 128 kernels on widened copies: 21 heads, 2016 wide). Head dim 256 has v3's forward (sm_90) and v1's backward (CUDA cores, about
 * 20 TFLOPS: its sweep adds some 25 s, 6 at --quick). --impl sets the
 * kernel implementation (cuattn_set_impl: 1 v1, 2 v2, 3 v3; default: cuattn_new's choice,
 * v3 on sm_90), so one build can time v2's forward beside v3's.
 *
 * --window L and --lengths time the kernels of sliding windows and packed batches
 * (attn_vl.cu) without dashd in between, for profiling (scripts/gpu_vl_kernels.sh): --window
 * runs the causal grid with flash-attn's window (L, 0); --lengths one packed batch of those
 * sequence lengths (causal each, at most 16384 tokens; S reports the longest). Their rows
 * carry "window" or "lengths" and count FLOPs on the (query, key) pairs the mask lets
 * through, exactly, as bench/varlen_peers.py does.
 *
 * FLOPs as flash-attn counts them: fwd = 4*B*H*S*S*D (halved when causal), bwd = 2.5*fwd.
 * Each call is timed as the peers are (bench/gpu_peers.py, bench/cudnn_peers.py): CUDA
 * events on the object's stream before and after it (the object asynchronous, its calls
 * queued), then a wait for the second; median of N calls (--reps, default 10) after
 * BENCH_WARMUPS warm-ups. What the host does inside a call before its first launch (tensor
 * maps, tables) lies between the events too, and the backward's preprocess, postprocess
 * and memsets are inside. (Until 2026-12-06 these were synchronous calls on the host clock,
 * median of 3 after one warm-up: the wait's wake-up in every figure.)
 * "digest" is XXH64 of the bytes of dQ, dK and dV (in that order, each view's bytes only) of
 * the repeat-check call: two builds whose deterministic schedules print the same digest
 * compute the same bits.
 */
#include "bench/benchtime.h"
#include "kernels/cuda/attn_cuda.h"
#include "kernels/digest/xxh64.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOKENS 16384
#define HIDDEN 2048

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "bench_gpu: %s: %s\n", #call, cudaGetErrorString(e_));      \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define BENCH_WARMUPS 3 /* calls before the timed ones, as the peers' scripts do */

/* Record e1 on st after the call queued there since e0, wait for it: the milliseconds
 * between the two events. */
static double event_ms(cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1)
{
    float ms = 0.0f;
    CHECK(cudaEventRecord(e1, st));
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
}

/* The median of the reps times after the warm-ups in t (sorts them). */
static double median_after_warmups(double *t, int reps)
{
    qsort(t + BENCH_WARMUPS, (size_t)reps, sizeof(double), btime_cmp_double);
    return t[BENCH_WARMUPS + reps / 2];
}

/* random normal bf16 on the host, copied to the device once: every shape has the same
 * number of elements per tensor (TOKENS * HIDDEN), so one set of buffers serves all */
static void *device_random(uint64_t *seed)
{
    size_t n = (size_t)TOKENS * HIDDEN;
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        double u1 = ((double)(*seed >> 11) + 1.0) / 9007199254740993.0;
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        double u2 = (double)(*seed >> 11) / 9007199254740992.0;
        h[i] = dtype_f32_to_bf16((float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2)));
    }
    void *d;
    CHECK(cudaMalloc(&d, n * 2));
    CHECK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* (query, key) pairs a causal sequence of n tokens lets through with the window (left, 0),
 * left < 0 unbounded: row i sees keys max(0, i - left) .. i. */
static double causal_pairs(int64_t n, int64_t left)
{
    if (left < 0 || left >= n)
        return (double)n * (double)(n + 1) / 2;
    /* rows 0 .. left see i + 1 keys, the rest left + 1 */
    return (double)(left + 1) * (double)(left + 2) / 2 + (double)(n - left - 1) * (double)(left + 1);
}

#define MAX_LENGTHS 4096

struct bufs {
    void *q, *k, *v, *out, *dout, *dq, *dk, *dv;
    float *lse;
};

int main(int argc, char **argv)
{
    int quick = 0, reps = 10, impl = 0;
    int32_t only_d = 0, only_s = 0, only_causal = -1, only_sched = -1, window = -1, nlen = 0;
    static int32_t cu[MAX_LENGTHS + 1];
    int64_t total = 0, longest = 0;
    for (int i = 1; i < argc; i++) {
        char mask[16] = "", sched[16] = "";
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--window") == 0 && i + 1 < argc && (window = atoi(argv[++i])) >= 0)
            ;
        else if (strcmp(argv[i], "--lengths") == 0 && i + 1 < argc) {
            int bad = 0;
            for (char *tok = strtok(argv[++i], ","); tok; tok = strtok(NULL, ",")) {
                char *end;
                const long n = strtol(tok, &end, 10);
                if (*end || n < 0 || total + n > TOKENS || nlen == MAX_LENGTHS) {
                    bad = 1;
                    break;
                }
                cu[nlen] = (int32_t)total;
                total += n;
                longest = n > longest ? n : longest;
                nlen++;
            }
            cu[nlen] = (int32_t)total;
            if (bad || nlen == 0 || longest == 0) {
                fprintf(stderr, "bench_gpu: --lengths: at most %d non-negative lengths, 1 to %d tokens in all\n",
                        MAX_LENGTHS, TOKENS);
                return 2;
            }
        }
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--impl") == 0 && i + 1 < argc)
            impl = atoi(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc &&
                 sscanf(argv[++i], "%d,%d,%15[a-z],%15[a-z]", &only_d, &only_s, mask, sched) >= 3 &&
                 only_d >= 32 && only_d <= 256 && only_d % 8 == 0 && only_s >= 1 && only_s <= TOKENS &&
                 sched_mask_parse(mask) >= 0 && (!sched[0] || sched_kind_parse(sched) >= 0)) {
            only_causal = sched_mask_parse(mask) == SCHED_MASK_CAUSAL;
            only_sched = sched[0] ? sched_kind_parse(sched) : -1;
        } else {
            fprintf(stderr, "usage: bench_gpu [--quick] [--reps N] [--only D,S,MASK[,SCHED]] [--impl 1|2|3] "
                            "[--window L | --lengths N,N,...]\n");
            return 2;
        }
    }
    if (window >= 0 && nlen) {
        fprintf(stderr, "bench_gpu: --window or --lengths, not both\n");
        return 2;
    }
    const int vl = window >= 0 || nlen > 0;
    if (reps < 1 || reps > 100)
        reps = 10;
    struct cuattn *a;
    int rc = cuattn_new(0, &a);
    if (rc) {
        fprintf(stderr, "bench_gpu: no usable GPU (%d)\n", rc);
        return 1;
    }
    if (impl && (rc = cuattn_set_impl(a, impl))) {
        fprintf(stderr, "bench_gpu: --impl %d: %d\n", impl, rc);
        return 2;
    }
    if ((rc = cuattn_set_async(a, 1))) {
        fprintf(stderr, "bench_gpu: asynchronous calls: %d\n", rc);
        return 1;
    }
    const cudaStream_t st = (cudaStream_t)cuattn_stream(a);
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    char name[128];
    int32_t sms = 0;
    cuattn_device(a, name, sizeof name, &sms);
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);

    uint64_t seed = 0x5eed;
    struct bufs b;
    b.q = device_random(&seed), b.k = device_random(&seed), b.v = device_random(&seed);
    b.dout = device_random(&seed);
    size_t n = (size_t)TOKENS * HIDDEN * 2;
    CHECK(cudaMalloc(&b.out, n));
    CHECK(cudaMalloc(&b.dq, n));
    CHECK(cudaMalloc(&b.dk, n));
    CHECK(cudaMalloc(&b.dv, n));
    CHECK(cudaMalloc((void **)&b.lse, (size_t)TOKENS * 64 * sizeof(float)));
    unsigned char *h1 = malloc(n), *h2 = malloc(n);

    printf("{\"device\": \"%s\", \"sms\": %d, \"driver\": %d, \"runtime\": %d, \"reps\": %d, "
           "\"warmups\": %d, \"timing\": \"events\", \"impl\": %d, \"rows\": [",
           name, sms, drv, rt, reps, BENCH_WARMUPS, (int)cuattn_impl(a));
    const int32_t seqlens_full[] = {1024, 2048, 4096, 8192, 16384}, seqlens_quick[] = {1024, 4096};
    const int32_t *seqlens = quick ? seqlens_quick : seqlens_full;
    int nseq = quick ? 2 : 5, first = 1;
    if (only_d) {
        seqlens = &only_s;
        nseq = 1;
    }
    const int32_t one_len = (int32_t)longest;
    if (nlen) { /* one packed batch */
        seqlens = &one_len;
        nseq = 1;
    }
    const enum sched_kind kinds[] = {SCHED_ATOMIC, SCHED_ASCENDING, SCHED_DESCENDING, SCHED_SPT,
                                     SCHED_SHIFT, SCHED_AUTO};
    const int32_t sweep[] = {64, 128, 96, 256};
    const int32_t *dims = only_d ? &only_d : sweep; /* --only: any head dim the kernels serve */
    const int ndims = only_d ? 1 : (int)(sizeof sweep / sizeof sweep[0]);
    for (int di = 0; di < ndims; di++)
        for (int causal = 0; causal < 2; causal++)
            for (int si = 0; si < nseq; si++) {
                const int32_t d = dims[di];
                if ((only_d && d != only_d) || (only_causal >= 0 && causal != only_causal) || (vl && !causal))
                    continue;
                int32_t S = seqlens[si], B = TOKENS / S, H = HIDDEN / d;
                struct attn_problem p = {.batch = B, .seqlen_q = S, .seqlen_k = S, .heads_q = H, .heads_kv = H, .head_dim = d, .dtype = DTYPE_BF16, .mask = causal ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL, .scale = (float)(1.0 / sqrt((double)d))};
                double flops = 4.0 * B * H * (double)S * S * d / (causal ? 2 : 1);
                int32_t rows = S; /* of the views: a packed batch's are its tokens */
                if (window >= 0) {
                    p.window = 1;
                    p.window_left = window;
                    p.window_right = 0;
                    flops = 4.0 * B * H * d * causal_pairs(S, window);
                } else if (nlen) {
                    p.batch = nlen;
                    p.cu_seqlens_q = p.cu_seqlens_k = cu;
                    p.total_q = p.total_k = (int32_t)total;
                    rows = (int32_t)total;
                    B = 1;
                    double pairs = 0;
                    for (int32_t j = 0; j < nlen; j++)
                        pairs += causal_pairs(cu[j + 1] - cu[j], -1);
                    flops = 4.0 * H * d * pairs;
                }
                struct attn_tensor tq = attn_dense(b.q, rows, H, d), tk = attn_dense(b.k, rows, H, d);
                struct attn_tensor tv = attn_dense(b.v, rows, H, d), to = attn_dense(b.out, rows, H, d);
                struct attn_tensor tdo = attn_dense(b.dout, rows, H, d), tdq = attn_dense(b.dq, rows, H, d);
                struct attn_tensor tdk = attn_dense(b.dk, rows, H, d), tdv = attn_dense(b.dv, rows, H, d);
                double t[BENCH_WARMUPS + 100];
                for (int r = 0; r < BENCH_WARMUPS + reps; r++) {
                    CHECK(cudaEventRecord(e0, st));
                    if ((rc = cuattn_forward(a, &p, NULL, to, b.lse, tq, tk, tv, NULL))) {
                        fprintf(stderr, "bench_gpu: forward d%d S%d: %d\n", d, S, rc);
                        return 1;
                    }
                    t[r] = event_ms(st, e0, e1);
                }
                const double fwd_ms = median_after_warmups(t, reps);
                printf("%s\n  {\"D\": %d, \"S\": %d, \"B\": %d, \"H\": %d, \"causal\": %s, ",
                       first ? "" : ",", d, S, B, H, causal ? "true" : "false");
                if (window >= 0)
                    printf("\"window\": %d, ", (int)window);
                if (nlen) {
                    printf("\"lengths\": [");
                    for (int32_t j = 0; j < nlen; j++)
                        printf("%s%d", j ? ", " : "", (int)(cu[j + 1] - cu[j]));
                    printf("], ");
                }
                printf("\"fwd_ms\": %.4f, \"fwd_tflops\": %.2f, \"bwd\": [", fwd_ms, flops / fwd_ms / 1e9);
                first = 0;
                for (size_t ki = 0, shown = 0; ki < sizeof kinds / sizeof kinds[0]; ki++) {
                    if (only_sched >= 0 && (int)kinds[ki] != only_sched)
                        continue;
                    struct attn_config cfg = {kinds[ki], 0, 0, 0, 0}, used;
                    for (int r = 0; r < BENCH_WARMUPS + reps; r++) {
                        CHECK(cudaEventRecord(e0, st));
                        rc = cuattn_backward(a, &p, &cfg, 0, tdq, tdk, tdv, tq, tk, tv, to, b.lse,
                                             tdo, &used);
                        if (rc) {
                            fprintf(stderr, "bench_gpu: backward d%d S%d %s: %d\n", d, S,
                                    sched_kind_name(kinds[ki]), rc);
                            return 1;
                        }
                        t[r] = event_ms(st, e0, e1);
                    }
                    const double bwd_ms = median_after_warmups(t, reps);
                    /* bits of the last two calls' dq (a third call, for the comparison),
                     * the bytes of the views only: head dim 96's rows are 2016 wide and a
                     * packed batch may be short of TOKENS, and the rest of the buffers holds
                     * whatever was there (fresh memory, an earlier shape's gradients) */
                    const size_t vn = (size_t)B * rows * H * d * 2;
                    CHECK(cudaMemcpy(h1, b.dq, vn, cudaMemcpyDeviceToHost));
                    rc = cuattn_backward(a, &p, &cfg, 0, tdq, tdk, tdv, tq, tk, tv, to, b.lse, tdo, NULL);
                    CHECK(cudaStreamSynchronize(st)); /* the object's stream may not wait for the copy's */
                    CHECK(cudaMemcpy(h2, b.dq, vn, cudaMemcpyDeviceToHost));
                    int same = rc == 0 && memcmp(h1, h2, vn) == 0;
                    uint64_t digest = xxh64(h2, vn, 0);
                    CHECK(cudaMemcpy(h1, b.dk, vn, cudaMemcpyDeviceToHost));
                    digest = xxh64(h1, vn, digest);
                    CHECK(cudaMemcpy(h1, b.dv, vn, cudaMemcpyDeviceToHost));
                    digest = xxh64(h1, vn, digest);
                    printf("%s{\"schedule\": \"%s\", \"used\": \"%s\", \"ms\": %.4f, \"tflops\": %.2f, "
                           "\"bitwise_repeat\": %s, \"digest\": \"%016llx\"}",
                           shown++ ? ", " : "", sched_kind_name(kinds[ki]), sched_kind_name(used.sched),
                           bwd_ms, 2.5 * flops / bwd_ms / 1e9, same ? "true" : "false",
                           (unsigned long long)digest);
                    fflush(stdout);
                }
                printf("]}");
            }
    printf("\n]}\n");
    free(h1);
    free(h2);
    cuattn_free(a);
    return 0;
}
