// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_share_gpu.c - the deterministic backward when other work holds SMs.
 *
 * A persistent backward launches one CTA per SM, and under `shift` a CTA may wait for a
 * dQ turn held by a job that no CTA has started yet. If other work (another stream of the
 * process, another client's kernel under MPS) holds SMs, only some of our CTAs are
 * resident at first; the rest start as those SMs come free. This checks that the kernel
 * then finishes, and with the same bits: a kernel on a second stream holds 66, 120 or 131
 * of the SMs for 300 ms (a whole SM per CTA, so nothing of ours fits beside it), and a
 * shift and a descending backward start while it runs.
 *
 * Problem: bf16, causal, 8 heads, seqlen 2048, hdim 128 (256 jobs, so shift has several
 * chunks of W = 64); fresh random inputs (the runner's seed); gradients poisoned with 0xff
 * before every call. The bits to match are the same call's on an idle GPU. A second test
 * does the same for head dim 64 (v3's pair kernel) and the window/packed kernel.
 */
#include "gpu_share.h"
#include "gpu_delay.h"

#include "gpu_bufs.h"
#include "gpu_check.h"
#include "../testutil.h"
#include "kernels/cuda/attn_cuda.h"
#include "kernels/cuda/attn_cuda_test.h"

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S 2048
#define H 8
#define HD 128
#define HOLD_NS 300000000ull

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_share_gpu_backward_finishes_with_same_bits_while_sms_are_held(void)
{
    const size_t n = (size_t)S * H * HD, tb = n * 2, lb = (size_t)H * S * sizeof(float);
    const struct attn_problem p = {.batch = 1, .seqlen_q = S, .seqlen_k = S, .heads_q = H, .heads_kv = H, .head_dim = HD, .dtype = DTYPE_BF16, .mask = SCHED_MASK_CAUSAL, .scale = (float)(1.0 / sqrt((double)HD))};
    struct cuattn *a = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &a), 0);
    int32_t sms = 0;
    CU_ASSERT_EQUAL_FATAL(cuattn_device(a, NULL, 0, &sms), 0);
    unsigned char *mem = NULL; /* q k v out dout dq dk dv, lse */
    CUDA_OK(cudaMalloc((void **)&mem, 8 * tb + lb));
    void *host = malloc(tb), *ref = malloc(3 * tb), *got = malloc(3 * tb);
    CU_ASSERT_FATAL(host && ref && got);
    struct tu_rng rng;
    tu_rng_init(&rng, tu_seed() ^ 0x5a5a);
    const int inputs[] = {0, 1, 2, 4};
    for (int i = 0; i < 4; i++) {
        tu_fill(host, DTYPE_BF16, (int64_t)n, &rng, 1.0);
        CUDA_OK(cudaMemcpy(mem + (size_t)inputs[i] * tb, host, tb, cudaMemcpyHostToDevice));
    }
#define T(i) attn_dense(mem + (size_t)(i) * tb, S, H, HD)
    float *lse = (float *)(void *)(mem + 8 * tb);
    CU_ASSERT_EQUAL_FATAL(cuattn_forward(a, &p, NULL, T(3), lse, T(0), T(1), T(2), NULL), 0);
    cudaStream_t other;
    CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));

    const enum sched_kind kinds[] = {SCHED_SHIFT, SCHED_DESCENDING};
    const int held[] = {66, 120, 131};
    for (int ki = 0; ki < 2; ki++) {
        struct attn_config cfg = {kinds[ki], 0, 0, 0, 0};
        for (int h = -1; h < 3; h++) { /* -1: the idle GPU, the bits to match */
            CUDA_OK(cudaMemset(mem + 5 * tb, 0xff, 3 * tb));
            CUDA_OK(cudaDeviceSynchronize());
            int still_held = 1;
            if (h >= 0) {
                CUDA_OK(gpu_test_hold_sms(held[h] < sms ? held[h] : sms - 1, HOLD_NS, other));
                sleep_ms(20); /* let its CTAs take their SMs */
                still_held = cudaStreamQuery(other) == cudaErrorNotReady;
            }
            int rc = cuattn_backward(a, &p, &cfg, 0, T(5), T(6), T(7), T(0), T(1), T(2), T(3),
                                     lse, T(4), NULL);
            CU_ASSERT_EQUAL(rc, 0);
            CU_ASSERT(still_held); /* the SMs were really taken when the backward started */
            CUDA_OK(cudaStreamSynchronize(other));
            CUDA_OK(cudaMemcpy(h < 0 ? ref : got, mem + 5 * tb, 3 * tb, cudaMemcpyDeviceToHost));
            if (h >= 0 && memcmp(ref, got, 3 * tb) != 0) {
                fprintf(stderr, "\n  %s with %d SMs held: the bits differ from the idle GPU's",
                        sched_kind_name(kinds[ki]), held[h]);
                CU_FAIL("bits differ while SMs were held");
            }
        }
    }
#undef T
    (void)cudaStreamDestroy(other);
    (void)cudaFree(mem);
    free(host);
    free(ref);
    free(got);
    cuattn_free(a);
}

/* Backward of b (after its forward) into gradients poisoned before the GPU is shared:
 * with held > 0, that many SMs are taken by a kernel on `other` for HOLD_NS first. The
 * gradients copied back into b's host outputs; 0, or the call's error. *still_held: the
 * SMs were still taken when the backward started. */
static int backward_while_held(struct cuattn *a, struct gpu_bufs *b, const struct attn_config *cfg, int held,
                               cudaStream_t other, int *still_held)
{
    gpu_bufs_poison_grads(a, b);
    CUDA_OK(cudaDeviceSynchronize());
    *still_held = 1;
    if (held > 0) {
        CUDA_OK(gpu_test_hold_sms(held, HOLD_NS, other));
        sleep_ms(20); /* let its CTAs take their SMs */
        *still_held = cudaStreamQuery(other) == cudaErrorNotReady;
    }
    const int rc = gpu_bufs_backward_call(a, b, cfg, 0, NULL);
    CUDA_OK(cudaStreamSynchronize(other));
    if (rc)
        return rc;
    gpu_bufs_grads_back(b);
    return 0;
}

/* The same for the backward kernels the test above does not reach: at head dim 64 (fp16,
 * causal, GQA 8:2, seqlen 2048 and 1950: 16 kv-tiles a head, the last one's unit one pair of
 * q-tiles, or one q-tile) v3's persistent pair kernel on sm_90 (v2's elsewhere) under shift
 * and descending; and the window/packed kernel (a packed batch of 2048, 1, 1500 and 777
 * queries over 2048, 1, 1400 and 900 keys, causal with a left window of 300, softcap 30,
 * head dim 128, GQA 4:2) under shift and spt. Each while a kernel holds 66 SMs, then all
 * but one, for 300 ms: the bits of the same call on an idle GPU, and the kernel meant
 * (on sm_90: v3's wgmma step, persistent). */
static void test_share_gpu_pair_and_window_kernels_keep_their_bits_while_sms_are_held(void)
{
    struct cuattn *a = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &a), 0);
    int32_t sms = 0;
    CU_ASSERT_EQUAL_FATAL(cuattn_device(a, NULL, 0, &sms), 0);
    const int v3 = cuattn_impl(a) == CUATTN_IMPL_WGMMA;
    struct tu_rng rng;
    tu_rng_init(&rng, tu_seed() ^ 0x5a64);
    cudaStream_t other;
    CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    static const int32_t lq[] = {2048, 1, 1500, 777}, lk[] = {2048, 1, 1400, 900};
    const int held[] = {66, 1 << 20}; /* 1 << 20: all but one */
    for (int ci = 0; ci < 3; ci++) {
        const int vl = ci == 2;
        struct attn_problem p = {.batch = vl ? 4 : 1, .seqlen_q = ci ? 1950 : 2048, .seqlen_k = ci ? 1950 : 2048,
                                 .heads_q = 8, .heads_kv = 2, .head_dim = vl ? 128 : 64,
                                 .dtype = vl ? DTYPE_BF16 : DTYPE_F16, .mask = SCHED_MASK_CAUSAL,
                                 .scale = (float)(1.0 / sqrt(vl ? 128.0 : 64.0))};
        if (vl) {
            p.heads_q = 4;
            p.window = 1;
            p.window_left = 300;
            p.softcap = 30.0f;
        }
        struct gpu_bufs b;
        gpu_bufs_init(&b, &p, vl ? lq : NULL, vl ? lk : NULL, &rng);
        CU_ASSERT_EQUAL_FATAL(gpu_bufs_forward(a, &b, NULL, NULL), 0); /* out and lse poisoned first */
        const enum sched_kind kinds[] = {SCHED_SHIFT, vl ? SCHED_SPT : SCHED_DESCENDING};
        for (int ki = 0; ki < 2; ki++) {
            struct attn_config cfg = {kinds[ki], 0, 0, 0, 0};
            struct gpu_copy idle;
            int still_held = 1;
            CU_ASSERT_EQUAL_FATAL(backward_while_held(a, &b, &cfg, 0, other, &still_held), 0);
            gpu_copy_bwd(&idle, &b);
            for (int h = 0; h < 2; h++) {
                const int n = held[h] < sms ? held[h] : sms - 1;
                const int rc = backward_while_held(a, &b, &cfg, n, other, &still_held);
                CU_ASSERT_EQUAL(rc, 0);
                CU_ASSERT(still_held); /* the SMs were really taken when the backward started */
                int32_t mode = 0;
                cuattn__last_launch(a, &mode, NULL);
                CU_ASSERT_EQUAL(mode, 1); /* persistent */
                if (v3)
                    CU_ASSERT_EQUAL(cuattn__last_wg(a), 1);
                if (rc == 0 && !gpu_copy_equal(&idle, &b)) {
                    fprintf(stderr, "\n  %s %s with %d SMs held: the bits differ from the idle GPU's",
                            vl ? "window/packed" : ci ? "head dim 64 (1950)" : "head dim 64 (2048)",
                            sched_kind_name(kinds[ki]), n);
                    CU_FAIL("bits differ while SMs were held");
                }
            }
            gpu_copy_free(&idle);
        }
        gpu_bufs_free(&b);
    }
    (void)cudaStreamDestroy(other);
    cuattn_free(a);
}

int suite_gpu_share(void)
{
    CU_pSuite s = CU_add_suite("gpu_share", NULL, NULL);
    if (!s || !CU_add_test(s, "test_share_gpu_backward_finishes_with_same_bits_while_sms_are_held",
                           test_share_gpu_backward_finishes_with_same_bits_while_sms_are_held) ||
        !CU_add_test(s, "test_share_gpu_pair_and_window_kernels_keep_their_bits_while_sms_are_held",
                     test_share_gpu_pair_and_window_kernels_keep_their_bits_while_sms_are_held))
        return -1;
    return 0;
}
