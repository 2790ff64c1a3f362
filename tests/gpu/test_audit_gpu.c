// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_audit_gpu.c - the audit log on the GPU: dashd --backend cuda --audit-level all,
 * a client on device buffers (libdash, stream-ordered and blocking calls). The digests the
 * daemon computed on the device equal the CPU digests of the bytes the client reads back;
 * two runs of the same script agree on every deterministic record; a third run with one
 * flipped input bit (step 1) is named as an input divergence - unless the `atomic`
 * backwards diverged first, which diff must then call "only outputs differ". (Whether
 * atomic additions race into different bits is up to the hardware: on the H200 at this
 * shape they have come out identical.) Problem: bf16, causal, 8 heads, seqlen 1024,
 * hdim 128: on sm_90 v3's backward folds dq's, dk's and dv's digests in its own dQ
 * postprocess (cuattn_set_digests), elsewhere the digest kernels fold its leaves; the
 * shift backward's three are checked against the bytes read back, after two backwards
 * (the postprocess's block counter reused).
 */
#include "gpu_audit.h"

#include "../harness.h"
#include "../testutil.h"
#include "../../client/dash.h"
#include "kernels/digest/digest.h"

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S 1024
#define H 8
#define HD 128
#define NT ((size_t)S * H * HD)
#define TB (NT * 2)
#define LB ((size_t)H * S * 4)

static char dir[128];

static int suite_init(void)
{
    snprintf(dir, sizeof dir, "/tmp/dash-gpu-audit-%d", (int)getpid());
    return mkdir(dir, 0700) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return tu_run(cmd, NULL) == 0 ? 0 : -1;
}

static uint64_t off(int t)
{
    return t < 8 ? (uint64_t)t * TB : 8 * TB;
}

/* One run: dashd on the GPU with an audit log at `log`; the client does a forward, a
 * shift backward and an atomic backward (stream-ordered), then the same three blocking.
 * ret_grad: the CPU digests of the blocking shift backward's dq, dk, dv as read back. 0 or -1. */
static int run(const char *log, uint64_t seed, int flip, uint64_t ret_grad[3], uint64_t *ret_out)
{
    struct dashd_proc d;
    char args[512];
    snprintf(args, sizeof args, "--backend cuda --audit %s --audit-level all", log);
    if (dashd_start(&d, args) != 0)
        return -1;
    int rc = -1;
    unsigned char *mem = NULL, *host = malloc(TB);
    struct dash_client *c = NULL;
    struct dash_buffer *b = NULL;
    cudaStream_t s = NULL;
    struct dash_connect_opts o = {.client_name = "gpu-trainer", .run_tag = "gpu", .timeout_ms = 30000};
    if (!host || cudaMalloc((void **)&mem, 8 * TB + LB) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        dash_connect(d.endpoint, &o, &c) != 0 || dash_cuda_register(c, mem, 8 * TB + LB, &b) != 0)
        goto out;
    struct tu_rng r;
    tu_rng_init(&r, seed);
    for (int i = 0; i < 5; i++) {
        tu_fill(host, DTYPE_BF16, (int64_t)NT, &r, 1.0);
        if (cudaMemcpy(mem + off(i == 3 ? 4 : i), host, TB, cudaMemcpyHostToDevice) != cudaSuccess)
            goto out;
    }
    /* pass 0's ops are ordered on stream s, which does not wait for these copies */
    if (cudaDeviceSynchronize() != cudaSuccess)
        goto out;
    struct dash_tensor t[9];
    for (int i = 0; i < 8; i++)
        t[i] = dash_tensor_dense(b, off(i), 1, S, H, HD);
    t[8] = dash_tensor_lse(b, off(8), 1, H, S);
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    for (int pass = 0; pass < 2; pass++) {
        void *st = pass == 0 ? s : NULL;
        if (flip && pass == 1) {
            /* one exponent bit of q, as the client's own computation might; in a middle row
             * (causal row 0 sees one key, so its q changes no output) */
            const size_t at = off(0) + ((size_t)(S / 2) * H * HD + 300) * 2 + 1;
            unsigned char byte;
            if (cudaMemcpy(&byte, mem + at, 1, cudaMemcpyDeviceToHost) != cudaSuccess)
                goto out;
            byte ^= 0x20;
            /* a pageable host-to-device cudaMemcpy may return before its byte lands, and
             * dashd's forward, another process's kernel, would read the old q: the caller
             * orders its writes before a host-ordered op (docs/libdash.md) */
            if (cudaMemcpy(mem + at, &byte, 1, cudaMemcpyHostToDevice) != cudaSuccess ||
                cudaDeviceSynchronize() != cudaSuccess)
                goto out;
        }
        dash_set_audit(c, pass, "attn.forward");
        int e = pass == 0 ? dash_forward_stream(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], st, NULL)
                          : dash_forward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], NULL);
        const enum dash_schedule sched[2] = {DASH_SCHED_SHIFT, DASH_SCHED_ATOMIC};
        for (int k = 0; k < 2 && !e; k++) {
            a.schedule = sched[k];
            dash_set_audit(c, pass, k ? "attn.atomic" : "attn.shift");
            e = pass == 0 ? dash_backward_stream(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], &t[4],
                                                 &t[5], &t[6], &t[7], st, NULL)
                          : dash_backward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], &t[4], &t[5],
                                          &t[6], &t[7], NULL);
            for (int g = 0; !e && pass == 1 && k == 0 && g < 3; g++) {
                if (cudaMemcpy(host, mem + off(5 + g), TB, cudaMemcpyDeviceToHost) != cudaSuccess)
                    e = -1;
                (void)digest_rows(host, TB, HD * 2, &ret_grad[g]); /* rows of head_dim */
            }
        }
        a.schedule = DASH_SCHED_AUTO;
        if (e)
            goto out;
        if (pass == 0 && cudaStreamSynchronize(s) != cudaSuccess)
            goto out;
    }
    if (cudaMemcpy(host, mem + off(3), TB, cudaMemcpyDeviceToHost) != cudaSuccess)
        goto out;
    (void)digest_rows(host, TB, HD * 2, ret_out);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "\n  the audited GPU run failed");
    dash_close(c);
    if (dashd_stop(&d) != 0)
        rc = -1;
    if (s)
        cudaStreamDestroy(s);
    if (mem)
        cudaFree(mem);
    free(host);
    return rc;
}

static int dashctl(const char *args, char **out)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/dashctl audit %s", tu_build_dir(), args);
    return tu_run(cmd, out);
}

static void test_audit_gpu_digests_match_and_divergences_are_named(void)
{
    char a[256], b[256], f[256], args[900], want[64], *out = NULL;
    snprintf(a, sizeof a, "%s/a.log", dir);
    snprintf(b, sizeof b, "%s/b.log", dir);
    snprintf(f, sizeof f, "%s/flip.log", dir);
    const uint64_t seed = tu_seed() ^ 0xa9d;
    uint64_t grad_a[3] = {0}, grad_b[3] = {0}, grad_f[3] = {0}, out_a = 0, out_b = 0, out_f = 0;
    CU_ASSERT_EQUAL_FATAL(run(a, seed, 0, grad_a, &out_a), 0);
    CU_ASSERT_EQUAL_FATAL(run(b, seed, 0, grad_b, &out_b), 0);
    CU_ASSERT_EQUAL_FATAL(run(f, seed, 1, grad_f, &out_f), 0);
    CU_ASSERT_EQUAL(grad_a[0], grad_b[0]);
    CU_ASSERT_NOT_EQUAL(grad_a[0], grad_f[0]);

    /* the device-computed digests are the CPU digests of the bytes read back */
    static const char *const grad_names[3] = {"dq", "dk", "dv"};
    snprintf(args, sizeof args, "dump %s | grep 'label=attn.shift' | grep 'step=1 '", a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    for (int g = 0; g < 3; g++) {
        snprintf(want, sizeof want, "%s=%016llx", grad_names[g], (unsigned long long)grad_a[g]);
        CU_ASSERT(out && strstr(out, want));
    }
    CU_ASSERT(out && strstr(out, " cuda "));
    free(out);
    snprintf(want, sizeof want, "out=%016llx", (unsigned long long)out_a);
    snprintf(args, sizeof args, "dump %s | grep 'label=attn.forward' | grep 'step=1 '", a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, want));
    free(out);

    snprintf(args, sizeof args, "verify %s", a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "6 records (seq 1..6) in 1 file, 1 header: OK"));
    free(out);

    /* the same script twice: identical, or (atomic raced) only atomic's outputs differ */
    snprintf(args, sizeof args, "diff %s %s", a, b);
    int st = dashctl(args, &out);
    int atomic_raced = st == 1 && out && strstr(out, "label \"attn.atomic\" backward");
    if (st == 0) {
        CU_ASSERT(out && strstr(out, "identical: 6 records matched"));
    } else {
        CU_ASSERT(atomic_raced && strstr(out, "only outputs differ: dq "));
    }
    printf("\n    atomic backward bits %s between the runs ", atomic_raced ? "differed" : "agreed");
    free(out);

    /* a flipped input bit at step 1: named as an input divergence of the forward - unless
     * step 0's atomic backward raced between a and the flipped run (a race of its own, not
     * the one between a and b), which is then the first divergence, named as outputs only */
    snprintf(args, sizeof args, "diff %s %s", a, f);
    CU_ASSERT_EQUAL(dashctl(args, &out), 1);
    const int flip_raced = out && strstr(out, "step 0 label \"attn.atomic\" backward") != NULL;
    if (flip_raced) {
        CU_ASSERT(strstr(out, "only outputs differ: dq ") != NULL);
    } else {
        CU_ASSERT(out && strstr(out, "step 1 label \"attn.forward\" forward"));
        CU_ASSERT(out && strstr(out, "inputs differ: q "));
    }
    free(out);
}

int suite_gpu_audit(void)
{
    CU_pSuite s = CU_add_suite("gpu_audit", suite_init, suite_clean);
    if (!s || !CU_add_test(s, "test_audit_gpu_digests_match_and_divergences_are_named",
                           test_audit_gpu_digests_match_and_divergences_are_named))
        return -1;
    return 0;
}
