// SPDX-License-Identifier: BSD-3-Clause
/*
 * bench_gpu_daemon.c - what serving through dashd costs on the GPU: the same forward and
 * backward (bf16, hdim 128, 16 heads, causal and full, 16384 tokens) timed through a
 * dashd on the same GPU (device memory registered with dash_cuda_register, so no copies)
 * and in this process with the kernels directly. Prints a Markdown table.
 *
 *   bench_gpu_daemon [--reps N] [--seqlen S] [--audit PATH]
 *                    (dashd is started from argv[0]'s folder; --audit: with
 *                    --audit PATH --audit-level outputs, to measure what auditing costs)
 *
 * Two ways of calling, two tables:
 *   blocking        each call returns when the op is done: the client's wall clock around
 *                   each call, median of N after two warm-ups; the daemon's own run_us
 *                   beside it;
 *   stream-ordered  what a training loop does: N ops queued back to back on a stream
 *                   (dash_*_stream through the daemon; cuattn in asynchronous mode in
 *                   process), one synchronise at the end; time per op = total / N,
 *                   median of 3 such bursts after a warm-up burst. Twice: with the stream
 *                   idle at the start (the first op's request round trip is in the time)
 *                   and busy (LEAD_NS of other work queued first, as in training, where
 *                   the host runs ahead of the GPU; that lead is subtracted).
 * Then what the audit's digests of dq, dk, dv cost alone, read from memory (bench_audit
 * measures what auditing adds to the backward, part by part). The header says whether this process's GPU context goes through MPS (docs/mps.md).
 */
#include "bench/benchd.h"
#include "bench/benchtime.h"
#include "client/dash.h"
#include "kernels/cuda/attn_cuda.h"
#include "kernels/digest/digest_cuda.h"
#include "tests/gpu/gpu_delay.h"

#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "bench_gpu_daemon: %s: %s\n", #call, cudaGetErrorString(e_)); \
            goto out;                                                                    \
        }                                                                                \
    } while (0)

#define LEAD_NS 5000000ull /* the "stream busy" variant's head start, ns */

/* One mask's op, both ways: the client's tensors in the registered buffer and the same
 * bytes as in-process views (q k v out dout dq dk dv, then lse, at multiples of tb). */
struct bench_op {
    struct dash_tensor t[9];
    struct dash_attn at;
    struct attn_problem p;
    struct attn_tensor e[8];
    float *lse;
};

static void bench_op_init(struct bench_op *b, int causal, struct dash_buffer *buf, unsigned char *mem,
                          size_t tb, int B, int S, int H, int D)
{
    for (int i = 0; i < 8; i++) {
        b->t[i] = dash_tensor_dense(buf, (uint64_t)i * tb, B, S, H, D);
        b->e[i] = attn_dense(mem + (size_t)i * tb, S, H, D);
    }
    b->t[8] = dash_tensor_lse(buf, 8 * tb, B, H, S);
    b->lse = (float *)(void *)(mem + 8 * tb);
    b->at = (struct dash_attn){.dtype = DASH_BF16, .mask = causal ? DASH_MASK_CAUSAL : DASH_MASK_FULL,
                               .schedule = DASH_SCHED_AUTO};
    b->p = (struct attn_problem){.batch = B, .seqlen_q = S, .seqlen_k = S, .heads_q = H, .heads_kv = H, .head_dim = D, .dtype = DTYPE_BF16, .mask = causal ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL, .scale = (float)(1.0 / sqrt((double)D))};
}

/* The op (0 forward, 1 backward) with the kernels in this process. */
static int in_process(struct cuattn *a, const struct bench_op *b, int op)
{
    const struct attn_tensor *e = b->e;
    return op == 0 ? cuattn_forward(a, &b->p, NULL, e[3], b->lse, e[0], e[1], e[2], NULL)
                   : cuattn_backward(a, &b->p, NULL, 0, e[5], e[6], e[7], e[0], e[1], e[2], e[3],
                                     b->lse, e[4], NULL);
}

/* The op through dashd: blocking (stream NULL, result in *r) or ordered on `stream`. */
static int through_dashd(struct dash_client *c, const struct bench_op *b, int op, cudaStream_t stream,
                         struct dash_result *r)
{
    const struct dash_tensor *t = b->t;
    if (!stream)
        return op == 0 ? dash_forward(c, &b->at, &t[0], &t[1], &t[2], &t[3], &t[8], r)
                       : dash_backward(c, &b->at, &t[0], &t[1], &t[2], &t[3], &t[8], &t[4], &t[5],
                                       &t[6], &t[7], r);
    return op == 0 ? dash_forward_stream(c, &b->at, &t[0], &t[1], &t[2], &t[3], &t[8], stream, NULL)
                   : dash_backward_stream(c, &b->at, &t[0], &t[1], &t[2], &t[3], &t[8], &t[4], &t[5],
                                          &t[6], &t[7], stream, NULL);
}

int main(int argc, char **argv)
{
    int reps = 10, S = 4096;
    const char *audit = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seqlen") == 0 && i + 1 < argc)
            S = atoi(argv[++i]);
        else if (strcmp(argv[i], "--audit") == 0 && i + 1 < argc)
            audit = argv[++i];
        else {
            fprintf(stderr, "usage: bench_gpu_daemon [--reps N] [--seqlen S] [--audit PATH]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 200 || S < 64 || 16384 % S)
        return 2;
    const int D = 128, H = 16, B = 16384 / S;
    struct benchd d;
    int rc = benchd_init(&d, "bench_gpu_daemon", argv[0]);
    if (rc) {
        fprintf(stderr, "bench_gpu_daemon: no dashd at %s: %s\n", d.path, dash_strerror(rc));
        return 1;
    }
    const char *const plain[] = {"--backend", "cuda", "--log-level", "warn", NULL};
    const char *const audited[] = {"--backend", "cuda", "--log-level", "warn", "--audit", audit,
                                   "--audit-level", "outputs", NULL};
    int ok = 0;
    struct dash_client *c = NULL;
    struct dash_buffer *buf = NULL;
    struct cuattn *a = NULL;
    unsigned char *mem = NULL;
    cudaStream_t stream = NULL;
    struct dash_connect_opts o = {.client_name = "bench_gpu_daemon", .timeout_ms = 30000};
    if ((rc = benchd_start(&d, audit ? audited : plain)) != 0) {
        fprintf(stderr, "bench_gpu_daemon: cannot start dashd: %s\n", dash_strerror(rc));
        return 1;
    }
    if (benchd_wait_ready(&d, 10000) != 0 || dash_connect(d.endpoint, &o, &c) != 0) {
        fprintf(stderr, "bench_gpu_daemon: dashd did not come up\n");
        goto out;
    }
    size_t n = (size_t)16384 * H * D, tb = n * 2, lb = (size_t)B * H * S * 4;
    /* q k v out dout dq dk dv, then lse, in one allocation */
    CHECK(cudaMalloc((void **)&mem, 8 * tb + lb));
    {
        uint16_t *h = malloc(tb);
        uint64_t s = 42;
        for (int t = 0; t < 8; t++) {
            for (size_t i = 0; i < n; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                h[i] = dtype_f32_to_bf16((float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * 3);
            }
            CHECK(cudaMemcpy(mem + t * tb, h, tb, cudaMemcpyHostToDevice));
        }
        free(h);
    }
    rc = dash_cuda_register(c, mem, 8 * tb + lb, &buf);
    if (rc == 0)
        rc = cuattn_new(0, &a);
    if (rc) {
        fprintf(stderr, "bench_gpu_daemon: setup: %s\n", dash_strerror(rc));
        goto out;
    }
    int mps = 0;
    CHECK(cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, 0));
    printf("# GPU contexts: %s\n\n", mps ? "shared through MPS (this process is an MPS client)"
                                         : "one per process (no MPS)");
    printf("# dashd on the GPU vs the kernels in process%s\n\n| mask | op | in-process ms | through dashd ms | "
           "dashd run_us/1000 | overhead |\n| --- | --- | ---: | ---: | ---: | ---: |\n",
           audit ? " (dashd auditing: --audit-level outputs)" : "");
    for (int causal = 0; causal < 2; causal++) {
        struct bench_op b;
        bench_op_init(&b, causal, buf, mem, tb, B, S, H, D);
        for (int op = 0; op < 2; op++) {
            double tin[200], tdm[200], run[200];
            struct dash_result r;
            for (int k = -2; k < reps; k++) {
                double t0 = btime_now_ms();
                rc = in_process(a, &b, op);
                double t1 = btime_now_ms();
                if (rc == 0)
                    rc = through_dashd(c, &b, op, NULL, &r);
                double t2 = btime_now_ms();
                if (rc) {
                    fprintf(stderr, "bench_gpu_daemon: %s\n", dash_strerror(rc));
                    goto out;
                }
                if (k >= 0) {
                    tin[k] = t1 - t0;
                    tdm[k] = t2 - t1;
                    run[k] = r.run_us / 1000.0;
                }
            }
            double mi = btime_median(tin, (size_t)reps), md = btime_median(tdm, (size_t)reps);
            double mr = btime_median(run, (size_t)reps);
            printf("| %s | %s | %.3f | %.3f | %.3f | %+.1f%% |\n", causal ? "causal" : "full",
                   op ? "backward" : "forward", mi, md, mr, 100.0 * (md - mi) / mi);
        }
    }
    printf("\nbf16, batch %d x seqlen %d, 16 heads, hdim 128, schedule auto; median of %d after 2 "
           "warm-ups; overhead = (dashd - in-process) / in-process.\n", B, S, reps);

    /* ---- stream-ordered ---- */
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    (void)cuattn_set_async(a, 1);
    cudaStream_t own = (cudaStream_t)cuattn_stream(a);
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    for (int busy = 0; busy < 2; busy++) {
        if (busy)
            printf("\n# stream-ordered, stream busy at the start: %.0f ms of other work (a kernel on "
                   "all SMs) queued first, as in a training loop; ms/op = (total - that) / %d\n\n| mask "
                   "| op | in-process ms/op | through dashd ms/op | overhead |\n| --- | --- | ---: | "
                   "---: | ---: |\n", LEAD_NS / 1e6, reps);
        else
            printf("\n# stream-ordered, stream idle at the start: %d ops back to back, one synchronise"
                   "\n\n| mask | op | in-process ms/op | through dashd ms/op | overhead |\n| --- | --- | "
                   "---: | ---: | ---: |\n", reps);
        for (int causal = 0; causal < 2; causal++) {
            struct bench_op b;
            bench_op_init(&b, causal, buf, mem, tb, B, S, H, D);
            for (int op = 0; op < 2; op++) {
                double tin[3], tdm[3];
                for (int burst = -1; burst < 3; burst++) {
                    const double lead = busy ? LEAD_NS / 1e6 : 0;
                    double t0 = btime_now_ms();
                    if (busy)
                        CHECK(gpu_test_hold_sms(sms, LEAD_NS, own));
                    for (int k = 0; k < reps && rc == 0; k++)
                        rc = in_process(a, &b, op);
                    CHECK(cudaStreamSynchronize(own));
                    double t1 = btime_now_ms();
                    if (busy)
                        CHECK(gpu_test_hold_sms(sms, LEAD_NS, stream));
                    for (int k = 0; k < reps && rc == 0; k++)
                        rc = through_dashd(c, &b, op, stream, NULL);
                    CHECK(cudaStreamSynchronize(stream));
                    double t2 = btime_now_ms();
                    if (rc) {
                        fprintf(stderr, "bench_gpu_daemon: stream-ordered: %s\n", dash_strerror(rc));
                        goto out;
                    }
                    if (burst >= 0) {
                        tin[burst] = (t1 - t0 - lead) / reps;
                        tdm[burst] = (t2 - t1 - lead) / reps;
                    }
                }
                double mi = btime_median(tin, 3), md = btime_median(tdm, 3);
                printf("| %s | %s | %.3f | %.3f | %+.1f%% |\n", causal ? "causal" : "full",
                       op ? "backward" : "forward", mi, md, 100.0 * (md - mi) / mi);
            }
        }
    }

    /* ---- what the audit's digests cost alone: dq dk dv of this shape ---- */
    {
        struct digest_view dv3[3];
        for (int i = 0; i < 3; i++)
            dv3[i] = (struct digest_view){mem + (size_t)(5 + i) * tb, 4, {B, S, H, D},
                                          {(int64_t)S * H * D, H * D, D, 1}, 2, NULL};
        size_t need = digest_cuda_scratch_bytes(dv3, 3);
        void *scratch = NULL;
        uint64_t *d_out = NULL;
        cudaEvent_t e0, e1;
        CHECK(cudaMalloc(&scratch, need));
        CHECK(cudaMalloc((void **)&d_out, 3 * sizeof(uint64_t)));
        CHECK(cudaEventCreate(&e0));
        CHECK(cudaEventCreate(&e1));
        float best_dig = 1e9f, best_cpy = 1e9f, ms;
        for (int k = 0; k < 5; k++) {
            CHECK(cudaEventRecord(e0, 0));
            if (digest_cuda(dv3, 3, scratch, need, d_out, NULL) != 0)
                goto out;
            CHECK(cudaEventRecord(e1, 0));
            CHECK(cudaEventSynchronize(e1));
            CHECK(cudaEventElapsedTime(&ms, e0, e1));
            best_dig = ms < best_dig ? ms : best_dig;
            CHECK(cudaEventRecord(e0, 0));
            CHECK(cudaMemcpyAsync(mem, mem + 5 * tb, 3 * tb, cudaMemcpyDeviceToDevice, 0));
            CHECK(cudaEventRecord(e1, 0));
            CHECK(cudaEventSynchronize(e1));
            CHECK(cudaEventElapsedTime(&ms, e0, e1));
            best_cpy = ms < best_cpy ? ms : best_cpy;
        }
        printf("\n# digests of dq, dk, dv (3 x %.0f MiB) on the device: %.3f ms (%.0f GB/s); a "
               "device-to-device copy of the same bytes: %.3f ms\n", tb / 1048576.0, best_dig,
               3.0 * tb / best_dig / 1e6, best_cpy);
        cudaFree(scratch);
        cudaFree(d_out);
    }
    ok = 1;
out:
    if (buf)
        dash_buffer_free(c, buf);
    dash_close(c);
    cuattn_free(a);
    if (stream)
        cudaStreamDestroy(stream);
    if (mem)
        cudaFree(mem);
    if (benchd_stop(&d, 10000) != 0)
        ok = 0;
    return ok ? 0 : 1;
}
