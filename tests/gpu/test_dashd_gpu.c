// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_dashd_gpu.c - dashd on the GPU, end to end: a real `dashd --backend cuda` (harness.c)
 * serving this process and its children through libdash's CUDA buffers.
 *
 * The client side is what a framework does: one cudaMalloc allocation (4 MiB) with q, k,
 * v, out, lse, dout, dq, dk, dv at offsets inside it, registered as a view that starts
 * mid-allocation (so alloc_offset and tensor offsets are both non-zero). Inputs are fresh
 * random draws (the runner prints the seed); the whole view is poisoned with 0xff (NaN)
 * before every op, so an element the daemon forgets cannot pass. The problem: bf16,
 * causal, GQA 4:2, seqlen 200, head dim 64; backward with schedules shift and descending.
 *
 * The bits to match are the kernels' own, run in this process on copies (cuattn): the
 * kernels are grid-independent, so the daemon's bytes must be identical. CUDA IPC cannot
 * open a handle in the process that exported it, which is why the daemon is a separate
 * process; the concurrent clients and the client killed mid-request are this binary
 * again, fork+exec'd (a CUDA context must not cross fork) with `--dashd-child`; the two
 * concurrent clients start together (a pipe barrier) and run CHILD_ROUNDS rounds each.
 *
 * The suite is three files, sharing gpu_dashd_int.h: this one has the fixture (the problem,
 * the in-process reference, the runs through dashd, the suite's dashd), the children, the
 * tests of client processes (two at once, one killed, one stalled) and of the daemon's own
 * restarts (killed, stopped, its GPU context lost), and the suite's registration, whose
 * order is the order the tests run in; test_dashd_stream_gpu.c has the stream-ordered ops
 * and test_dashd_requests_gpu.c what dashd serves and refuses.
 */
#include "gpu_check.h"
#include "gpu_dashd.h"
#include "gpu_dashd_int.h"
#include "gpu_delay.h"

#include "../harness.h"
#include "../testutil.h"
#include "../../client/dash.h"
#include "kernels/cuda/attn_cuda.h"

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the problem and where its tensors live ------------------------------------------ */

static const enum sched_kind kernel_sched[NSCHED] = {SCHED_SHIFT, SCHED_DESCENDING};
static const enum dash_schedule wire_sched[NSCHED] = {DASH_SCHED_SHIFT, DASH_SCHED_DESCENDING};

/* Byte offsets of the tensors in the view, and the view's size: every tensor after a gap,
 * so none sits at offset 0. */
uint64_t gpu_dashd_off[SLOTS];
uint64_t gpu_dashd_view_bytes;

static void layout_init(void)
{
    uint64_t at = 512;
    for (int s = 0; s < SLOTS; s++) {
        gpu_dashd_off[s] = at;
        at = ((at + slot_bytes[s] + 255) & ~(uint64_t)255) + 256;
    }
    gpu_dashd_view_bytes = at + 1024;
}

/* What one run produces, host side: out | lse | (dq | dk | dv) per schedule. */
size_t gpu_dashd_result_bytes(void)
{
    return QB + LB + NSCHED * (QB + 2 * KB);
}

struct inputs {
    unsigned char q[QB], k[KB], v[KB], dout[QB];
};

static void inputs_fill(struct inputs *in, uint64_t gpu_dashd_seed)
{
    struct tu_rng r;
    tu_rng_init(&r, gpu_dashd_seed);
    tu_fill(in->q, DTYPE_BF16, (int64_t)(QB / ES), &r, 1.0);
    tu_fill(in->k, DTYPE_BF16, (int64_t)(KB / ES), &r, 1.0);
    tu_fill(in->v, DTYPE_BF16, (int64_t)(KB / ES), &r, 1.0);
    tu_fill(in->dout, DTYPE_BF16, (int64_t)(QB / ES), &r, 1.0);
}

/* Poison a view that lives in device memory or, for a shared-memory buffer, in host
 * memory. */
cudaError_t gpu_dashd_set_ff(unsigned char *p, size_t n)
{
    struct cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) == cudaSuccess && at.type == cudaMemoryTypeDevice)
        return cudaMemset(p, 0xff, n);
    (void)cudaGetLastError();
    memset(p, 0xff, n);
    return cudaSuccess;
}

/* Poison the whole view, then copy the inputs in. cudaMemset, and a copy from pageable
 * memory, may still be under way when they return, and the daemon (or cuattn's own
 * stream) would not wait for them: wait for the device. 0 or -1. */
int gpu_dashd_view_load(unsigned char *view, const struct inputs *in)
{
    return gpu_dashd_set_ff(view, gpu_dashd_view_bytes) == cudaSuccess &&
                   cudaMemcpy(view + gpu_dashd_off[Q], in->q, QB, cudaMemcpyDefault) == cudaSuccess &&
                   cudaMemcpy(view + gpu_dashd_off[K], in->k, KB, cudaMemcpyDefault) == cudaSuccess &&
                   cudaMemcpy(view + gpu_dashd_off[V], in->v, KB, cudaMemcpyDefault) == cudaSuccess &&
                   cudaMemcpy(view + gpu_dashd_off[DOUT], in->dout, QB, cudaMemcpyDefault) ==
                       cudaSuccess &&
                   cudaDeviceSynchronize() == cudaSuccess
               ? 0
               : -1;
}

int gpu_dashd_fetch(unsigned char *dst, const unsigned char *view, int slot)
{
    return cudaMemcpy(dst, view + gpu_dashd_off[slot], slot_bytes[slot], cudaMemcpyDefault) ==
                   cudaSuccess
               ? 0
               : -1;
}

int gpu_dashd_poison_grads(unsigned char *view)
{
    for (int s = DQ; s <= DV; s++)
        if (gpu_dashd_set_ff(view + gpu_dashd_off[s], slot_bytes[s]) != cudaSuccess)
            return -1;
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}

/* ---- the kernels in this process (the bits to match) ---------------------------------- */

static struct attn_problem problem(void)
{
    struct attn_problem p = {.batch = 1, .seqlen_q = SEQ, .seqlen_k = SEQ, .heads_q = HQ, .heads_kv = HKV, .head_dim = HD, .dtype = DTYPE_BF16, .mask = SCHED_MASK_CAUSAL, .scale = (float)(1.0 / sqrt((double)HD))};
    return p;
}

static struct attn_tensor kt(unsigned char *view, int slot)
{
    int heads = slot == K || slot == V || slot == DK || slot == DV ? HKV : HQ;
    return attn_dense(view + gpu_dashd_off[slot], SEQ, heads, HD);
}

/* Forward and both backwards with cuattn on a fresh allocation laid out like the view.
 * 0, or a negative code with the reason in why. */
static int run_in_process(const struct inputs *in, unsigned char *res, char *why, size_t len)
{
    struct cuattn *ca = NULL;
    unsigned char *view = NULL;
    int rc = cuattn_new(0, &ca);
    if (rc) {
        snprintf(why, len, "cuattn_new: %d", rc);
        return rc;
    }
    rc = -1;
    if (cudaMalloc((void **)&view, gpu_dashd_view_bytes) != cudaSuccess || gpu_dashd_view_load(view, in)) {
        snprintf(why, len, "cannot set up the reference copies");
        goto free_all;
    }
    const struct attn_problem p = problem();
    if ((rc = cuattn_forward(ca, &p, NULL, kt(view, OUT), (float *)(void *)(view + gpu_dashd_off[LSE]),
                             kt(view, Q), kt(view, K), kt(view, V), NULL))) {
        snprintf(why, len, "cuattn_forward: %d", rc);
        goto free_all;
    }
    rc = -1;
    if (gpu_dashd_fetch(res, view, OUT) || gpu_dashd_fetch(res + QB, view, LSE))
        goto free_all;
    unsigned char *g = res + QB + LB;
    for (int i = 0; i < NSCHED; i++, g += QB + 2 * KB) {
        struct attn_config cfg = {kernel_sched[i], 0, 0, 0, 0};
        if (gpu_dashd_poison_grads(view))
            goto free_all;
        if ((rc = cuattn_backward(ca, &p, &cfg, 0, kt(view, DQ), kt(view, DK), kt(view, DV),
                                  kt(view, Q), kt(view, K), kt(view, V), kt(view, OUT),
                                  (const float *)(void *)(view + gpu_dashd_off[LSE]), kt(view, DOUT),
                                  NULL))) {
            snprintf(why, len, "cuattn_backward %s: %d", sched_kind_name(kernel_sched[i]), rc);
            goto free_all;
        }
        rc = -1;
        if (gpu_dashd_fetch(g, view, DQ) || gpu_dashd_fetch(g + QB, view, DK) || gpu_dashd_fetch(g + QB + KB, view, DV))
            goto free_all;
    }
    rc = 0;
free_all:
    if (view)
        (void)cudaFree(view);
    cuattn_free(ca);
    return rc;
}

/* ---- the same through dashd --------------------------------------------------------------- */

struct tensors gpu_dashd_tensors_of(struct dash_buffer *b)
{
    struct tensors ts;
    for (int s = 0; s < SLOTS; s++) {
        int heads = s == K || s == V || s == DK || s == DV ? HKV : HQ;
        ts.t[s] = s == LSE ? dash_tensor_lse(b, gpu_dashd_off[s], 1, HQ, SEQ)
                           : dash_tensor_dense(b, gpu_dashd_off[s], 1, SEQ, heads, HD);
    }
    return ts;
}

/* view is dash_buffer_data(b). 0, or the failing code with the reason in why. */
int gpu_dashd_run_through_daemon(struct dash_client *c, struct dash_buffer *b, const struct inputs *in,
                                 unsigned char *res, char *why, size_t len)
{
    unsigned char *view = dash_buffer_data(b);
    if (gpu_dashd_view_load(view, in)) {
        snprintf(why, len, "cannot load the view");
        return -1;
    }
    struct tensors ts = gpu_dashd_tensors_of(b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    struct dash_result r;
    int rc = dash_forward(c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &r);
    if (rc) {
        snprintf(why, len, "dash_forward: %s", dash_errname(rc));
        return rc;
    }
    if (strcmp(r.backend, "cuda") != 0) {
        snprintf(why, len, "the forward ran on backend \"%s\"", r.backend);
        return -1;
    }
    if (gpu_dashd_fetch(res, view, OUT) || gpu_dashd_fetch(res + QB, view, LSE))
        return -1;
    unsigned char *g = res + QB + LB;
    for (int i = 0; i < NSCHED; i++, g += QB + 2 * KB) {
        a.schedule = wire_sched[i];
        if (gpu_dashd_poison_grads(view))
            return -1;
        rc = dash_backward(c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT], &t[DQ],
                           &t[DK], &t[DV], &r);
        if (rc) {
            snprintf(why, len, "dash_backward %d: %s", (int)wire_sched[i], dash_errname(rc));
            return rc;
        }
        if (r.schedule != wire_sched[i] || strcmp(r.backend, "cuda") != 0) {
            snprintf(why, len, "the backward ran %d on \"%s\"", (int)r.schedule, r.backend);
            return -1;
        }
        if (gpu_dashd_fetch(g, view, DQ) || gpu_dashd_fetch(g + QB, view, DK) || gpu_dashd_fetch(g + QB + KB, view, DV))
            return -1;
    }
    return 0;
}

/* run_through_daemon's ops, stream-ordered (dash_*_stream) on a stream of our own, as a
 * training step would queue them: the inputs reach the view from a producer kernel that
 * first waits delay_ns on the GPU; every poisoning and every read-back is queued on the
 * same stream, and the host waits only at the end. *ret_early (may be NULL): whether the
 * forward returned while the producer was still running. 0, or a code with why. */
static int run_stream(struct dash_client *c, struct dash_buffer *b, const struct inputs *in,
                      unsigned char *res, uint64_t delay_ns, int *ret_early, char *why,
                      size_t len)
{
    unsigned char *view = dash_buffer_data(b), *stage = NULL, *host = NULL;
    cudaStream_t s = NULL;
    int rc = -1;
    snprintf(why, len, "cannot set up the stream run");
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc((void **)&stage, gpu_dashd_view_bytes) != cudaSuccess ||
        cudaMallocHost((void **)&host, gpu_dashd_result_bytes()) != cudaSuccess || gpu_dashd_view_load(stage, in) ||
        gpu_dashd_set_ff(view, gpu_dashd_view_bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
        goto out;
    /* the producer: the inputs (and poisoned outputs) land in the view late */
    if (gpu_test_delayed_copy(view, stage, gpu_dashd_view_bytes, delay_ns, s) != cudaSuccess)
        goto out;
    struct tensors ts = gpu_dashd_tensors_of(b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    struct dash_result r;
    if ((rc = dash_forward_stream(c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, &r)) != 0) {
        snprintf(why, len, "dash_forward_stream: %s", dash_errname(rc));
        goto out;
    }
    if (ret_early)
        *ret_early = cudaStreamQuery(s) == cudaErrorNotReady;
    rc = -1;
    snprintf(why, len, "queueing the read-back failed");
    if (strcmp(r.backend, "cuda") != 0 ||
        cudaMemcpyAsync(host, view + gpu_dashd_off[OUT], QB, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
        cudaMemcpyAsync(host + QB, view + gpu_dashd_off[LSE], LB, cudaMemcpyDeviceToHost, s) != cudaSuccess)
        goto out;
    unsigned char *g = host + QB + LB;
    for (int i = 0; i < NSCHED; i++, g += QB + 2 * KB) {
        a.schedule = wire_sched[i];
        for (int slot = DQ; slot <= DV; slot++)
            if (cudaMemsetAsync(view + gpu_dashd_off[slot], 0xff, slot_bytes[slot], s) != cudaSuccess)
                goto out;
        rc = dash_backward_stream(c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                  &t[DQ], &t[DK], &t[DV], s, &r);
        if (rc) {
            snprintf(why, len, "dash_backward_stream %d: %s", (int)wire_sched[i], dash_errname(rc));
            goto out;
        }
        rc = -1;
        if (r.schedule != wire_sched[i] ||
            cudaMemcpyAsync(g, view + gpu_dashd_off[DQ], QB, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
            cudaMemcpyAsync(g + QB, view + gpu_dashd_off[DK], KB, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
            cudaMemcpyAsync(g + QB + KB, view + gpu_dashd_off[DV], KB, cudaMemcpyDeviceToHost, s) != cudaSuccess)
            goto out;
    }
    snprintf(why, len, "the stream failed");
    if (cudaStreamSynchronize(s) != cudaSuccess)
        goto out;
    memcpy(res, host, gpu_dashd_result_bytes());
    rc = 0;
    why[0] = '\0';
out:
    if (s) {
        (void)cudaStreamSynchronize(s);
        (void)cudaStreamDestroy(s);
    }
    (void)cudaFree(stage);
    (void)cudaFreeHost(host);
    return rc;
}

/* Which part of two results first differs, or NULL. */
const char *gpu_dashd_first_difference(const unsigned char *a, const unsigned char *b)
{
    static const char *names[] = {"dq", "dk", "dv"};
    static char buf[64];
    if (memcmp(a, b, QB))
        return "out";
    if (memcmp(a + QB, b + QB, LB))
        return "lse";
    size_t at = QB + LB;
    for (int i = 0; i < NSCHED; i++)
        for (int j = 0; j < 3; j++) {
            size_t n = j == 0 ? QB : KB;
            if (memcmp(a + at, b + at, n)) {
                snprintf(buf, sizeof buf, "%s of %s", names[j], sched_kind_name(kernel_sched[i]));
                return buf;
            }
            at += n;
        }
    return NULL;
}

/* ---- fixtures ------------------------------------------------------------------------------ */

struct dashd_proc gpu_dashd_D;
uint64_t gpu_dashd_seed;
struct inputs *gpu_dashd_inputs;
unsigned char *gpu_dashd_expected; /* result_bytes(): the in-process kernels' bits */

static void show_log(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tail -n 20 %s >&2", gpu_dashd_D.log_path);
    (void)tu_run(cmd, NULL);
}

static int suite_init(void)
{
    layout_init();
    gpu_dashd_seed = tu_seed() ^ 0xd45d;
    gpu_dashd_inputs = malloc(sizeof *gpu_dashd_inputs);
    gpu_dashd_expected = malloc(gpu_dashd_result_bytes());
    if (!gpu_dashd_inputs || !gpu_dashd_expected)
        return -1;
    inputs_fill(gpu_dashd_inputs, gpu_dashd_seed);
    char why[128];
    /* the reference first: no daemon kernel can overlap this process's backward */
    if (run_in_process(gpu_dashd_inputs, gpu_dashd_expected, why, sizeof why) != 0) {
        fprintf(stderr, "\n  reference: %s\n", why);
        return -1;
    }
    if (dashd_start(&gpu_dashd_D, "--backend cuda --session-timeout 10") != 0) {
        fprintf(stderr, "\n  dashd --backend cuda did not start:\n");
        show_log();
        return -1;
    }
    return 0;
}

static int suite_clean(void)
{
    int status = dashd_stop(&gpu_dashd_D);
    if (status != 0) {
        fprintf(stderr, "\n  dashd exited with %d:\n", status);
        show_log();
    }
    free(gpu_dashd_inputs);
    free(gpu_dashd_expected);
    return status == 0 ? 0 : -1;
}

unsigned gpu_dashd_connect_flags; /* DASH_CONNECT_* for the next connect_client() */

struct dash_client *gpu_dashd_connect_client(const char *name)
{
    struct dash_connect_opts o = {.client_name = name, .timeout_ms = 20000,
                                  .flags = gpu_dashd_connect_flags};
    struct dash_client *c = NULL;
    int rc = dash_connect(gpu_dashd_D.endpoint, &o, &c);
    if (rc)
        fprintf(stderr, "\n  dash_connect: %s", dash_errname(rc));
    return c;
}

void gpu_dashd_fixture_open(struct fixture *f, const char *name)
{
    memset(f, 0, sizeof *f);
    f->c = gpu_dashd_connect_client(name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->c);
    CU_ASSERT_FATAL(cudaMalloc((void **)&f->alloc, ALLOC_BYTES) == cudaSuccess);
    int rc = dash_cuda_register(f->c, f->alloc + VIEW_OFF, gpu_dashd_view_bytes, &f->b);
    if (rc)
        fprintf(stderr, "\n  dash_cuda_register: %s", dash_errname(rc));
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

/* Whether the daemon still lists a session named `name`; -1 if it cannot be asked. */
static int session_listed(const char *name)
{
    struct dash_connect_opts o = {.timeout_ms = 5000, .flags = DASH_CONNECT_NO_SESSION};
    struct dash_client *c;
    struct dash_stats *st;
    if (dash_connect(gpu_dashd_D.endpoint, &o, &c) != 0)
        return -1;
    int listed = -1;
    if (dash_stats(c, &st) == 0) {
        listed = 0;
        for (size_t i = 0; i < st->n_clients; i++)
            listed |= !strcmp(st->clients[i].client_name, name);
        dash_stats_free(st);
    }
    dash_close(c);
    return listed;
}

/* Close the client, wait until the daemon has dropped its session (and so closed its
 * mapping: freeing memory another process still maps is undefined), free the memory. */
void gpu_dashd_fixture_close(struct fixture *f, const char *name)
{
    dash_close(f->c);
    int listed = 1;
    for (int i = 0; i < 200 && listed == 1; i++) {
        listed = session_listed(name);
        if (listed == 1)
            usleep(10000);
    }
    CU_ASSERT_EQUAL(listed, 0);
    CU_ASSERT(cudaFree(f->alloc) == cudaSuccess);
}

/* The daemon's bits against the in-process kernels', for this client. */
void gpu_dashd_check_bits(struct fixture *f, const char *when)
{
    unsigned char *got = malloc(gpu_dashd_result_bytes());
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    char why[128] = "";
    int rc = gpu_dashd_run_through_daemon(f->c, f->b, gpu_dashd_inputs, got, why, sizeof why);
    if (rc)
        fprintf(stderr, "\n  %s: %s", when, why);
    CU_ASSERT_EQUAL(rc, 0);
    const char *diff = rc ? NULL : gpu_dashd_first_difference(got, gpu_dashd_expected);
    if (diff)
        fprintf(stderr, "\n  %s: %s differs from the in-process kernels", when, diff);
    CU_ASSERT_PTR_NULL(diff);
    free(got);
}

/* The stream-ordered run's bits against the in-process kernels'. With a producer delay,
 * the forward must also have returned while the producer still ran. */
void gpu_dashd_check_stream(struct fixture *f, uint64_t delay_ns, const char *when)
{
    unsigned char *got = malloc(gpu_dashd_result_bytes());
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    char why[128] = "";
    int early = 0;
    int rc = run_stream(f->c, f->b, gpu_dashd_inputs, got, delay_ns, &early, why, sizeof why);
    if (rc)
        fprintf(stderr, "\n  %s: %s", when, why);
    CU_ASSERT_EQUAL(rc, 0);
    if (delay_ns && !rc && !early)
        fprintf(stderr, "\n  %s: the call waited for the producer kernel", when);
    CU_ASSERT(!delay_ns || rc || early);
    const char *diff = rc ? NULL : gpu_dashd_first_difference(got, gpu_dashd_expected);
    if (diff)
        fprintf(stderr, "\n  %s: %s differs from the in-process kernels", when, diff);
    CU_ASSERT_PTR_NULL(diff);
    free(got);
}

/* ---- children (fork+exec of this binary) ------------------------------------------------- */

#define CHILD_ROUNDS 4

/* argv: prog --dashd-child MODE ENDPOINT SEED ARG. client (ARG "PATH,READY_FD,GO_FD"):
 * register, say so on READY_FD, wait for a byte on GO_FD (so both clients run at once),
 * run everything CHILD_ROUNDS times (synchronous and stream-ordered calls in turn), write
 * the result (the same every round, else exit
 * 11) to PATH, exit 0. victim (ARG "READY_FD"): register, forward, submit backwards
 * without waiting, write one byte to READY_FD and wait to be killed. stalled (ARG
 * "READY_FD"): register, queue a stream-ordered forward behind a minute-long kernel on its
 * own stream, write one byte to READY_FD and wait to be killed. */
int gpu_dashd_child(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    const char *mode = argv[2], *endpoint = argv[3], *arg = argv[5];
    uint64_t child_seed = strtoull(argv[4], NULL, 10);
    layout_init();
    struct inputs *in = malloc(sizeof *in);
    unsigned char *res = malloc(gpu_dashd_result_bytes()), *alloc = NULL;
    if (!in || !res || cudaMalloc((void **)&alloc, ALLOC_BYTES) != cudaSuccess)
        return 3;
    inputs_fill(in, child_seed);
    struct dash_connect_opts o = {.client_name = mode, .timeout_ms = 20000};
    struct dash_client *c;
    struct dash_buffer *b;
    int rc = dash_connect(endpoint, &o, &c);
    if (!rc)
        rc = dash_cuda_register(c, alloc + VIEW_OFF, gpu_dashd_view_bytes, &b);
    if (rc) {
        fprintf(stderr, "child %s: %s\n", mode, dash_errname(rc));
        return 4;
    }
    char why[128] = "";
    if (!strcmp(mode, "client")) {
        char path[128];
        int ready_fd = -1, go_fd = -1;
        char go = 0;
        unsigned char *again = malloc(gpu_dashd_result_bytes());
        if (!again || sscanf(arg, "%127[^,],%d,%d", path, &ready_fd, &go_fd) != 3 ||
            write(ready_fd, "r", 1) != 1 || read(go_fd, &go, 1) != 1)
            return 12;
        for (int round = 0; round < CHILD_ROUNDS; round++) {
            /* odd rounds stream-ordered: both kinds of call, from both clients at once */
            unsigned char *dst = round ? again : res;
            rc = round % 2 ? run_stream(c, b, in, dst, 0, NULL, why, sizeof why)
                           : gpu_dashd_run_through_daemon(c, b, in, dst, why, sizeof why);
            if (rc != 0) {
                fprintf(stderr, "child client: %s\n", why);
                return 5;
            }
            if (round && memcmp(res, again, gpu_dashd_result_bytes()) != 0)
                return 11;
        }
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(res, 1, gpu_dashd_result_bytes(), f) != gpu_dashd_result_bytes() || fclose(f) != 0)
            return 6;
        dash_close(c);
        return 0;
    }
    if (!strcmp(mode, "stalled")) {
        /* a stream-ordered forward whose ready word waits on this process's stream behind a
         * minute-long kernel; the parent kills us before the kernel ends, and with us the
         * stream's queued work: the word is never written from here */
        cudaStream_t s = NULL;
        unsigned char *stage = NULL;
        if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
            cudaMalloc((void **)&stage, gpu_dashd_view_bytes) != cudaSuccess || gpu_dashd_view_load(stage, in) ||
            cudaDeviceSynchronize() != cudaSuccess ||
            gpu_test_delayed_copy(dash_buffer_data(b), stage, gpu_dashd_view_bytes, 60000000000ull, s) != cudaSuccess)
            return 13;
        struct tensors ts = gpu_dashd_tensors_of(b);
        struct dash_tensor *t = ts.t;
        struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
        if (dash_forward_stream(c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL) != 0)
            return 14;
        if (write(atoi(arg), "r", 1) != 1)
            return 10;
        for (;;)
            pause();
    }
    /* victim */
    if (gpu_dashd_view_load(dash_buffer_data(b), in))
        return 7;
    struct tensors ts = gpu_dashd_tensors_of(b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL,
                          .schedule = DASH_SCHED_SHIFT};
    if (dash_forward(c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], NULL) != 0)
        return 8;
    for (int i = 0; i < 16; i++) {
        uint64_t ticket;
        if (dash_backward_submit(c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT], &t[DQ],
                                 &t[DK], &t[DV], &ticket) != 0)
            return 9;
    }
    int fd = atoi(arg);
    if (write(fd, "r", 1) != 1)
        return 10;
    for (;;)
        pause();
}

/* Start this binary as a child; its pid, or -1. extra_fd stays open in the child. */
static pid_t spawn_child(const char *mode, const char *arg, int extra_fd)
{
    char seed_s[32];
    snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)gpu_dashd_seed);
    pid_t pid = fork();
    if (pid == 0) {
        /* no CUDA (or ZeroMQ) here before exec: the context belongs to the parent */
        (void)extra_fd;
        execl("/proc/self/exe", "test_dash_gpu", "--dashd-child", mode, gpu_dashd_D.endpoint, seed_s, arg,
              (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* A child's exit status (128 + signal when killed); one still running after timeout_s is
 * killed, said so, and counts as failed: a stuck child is a failure, not a hang. */
static int wait_child_for(pid_t pid, int timeout_s)
{
    int status;
    for (int i = 0; i < timeout_s * 10; i++) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (w < 0)
            return -1;
        usleep(100000);
    }
    fprintf(stderr, "\n  child %d still running after %d s: killed", (int)pid, timeout_s);
    kill(pid, SIGKILL);
    (void)waitpid(pid, &status, 0);
    return -2;
}

static int wait_child(pid_t pid)
{
    return wait_child_for(pid, 120);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_dashd_gpu_forward_backward_match_in_process_kernels(void)
{
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-bits");
    CU_ASSERT(dash_buffer_data(f.b) == f.alloc + VIEW_OFF);
    CU_ASSERT_EQUAL(dash_buffer_size(f.b), gpu_dashd_view_bytes);
    gpu_dashd_check_bits(&f, "first run");
    gpu_dashd_check_bits(&f, "second run"); /* fresh poison, same bits */

    struct dash_stats *st = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_stats(f.c, &st), 0);
    CU_ASSERT_STRING_EQUAL(st->backend, "cuda");
    CU_ASSERT(st->threads > 0); /* the SM count */
    /* dashd was started with this process's environment: under MPS exactly when we are */
    int mps = 0;
    CUDA_OK(cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, 0));
    CU_ASSERT_STRING_EQUAL(st->gpu_sharing, mps ? "mps" : "contexts");
    dash_stats_free(st);
    gpu_dashd_fixture_close(&f, "gpu-bits");
}

/* A client child's result file (PATH of its "client" mode): all of it there, the bits of
 * the in-process kernels; removed after. */
static void check_child_result(const char *path, int child)
{
    unsigned char *got = malloc(gpu_dashd_result_bytes());
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    FILE *fp = fopen(path, "rb");
    size_t n = fp ? fread(got, 1, gpu_dashd_result_bytes(), fp) : 0;
    if (fp)
        fclose(fp);
    unlink(path);
    CU_ASSERT_EQUAL(n, gpu_dashd_result_bytes());
    const char *diff = n == gpu_dashd_result_bytes() ? gpu_dashd_first_difference(got, gpu_dashd_expected) : "everything";
    if (diff)
        fprintf(stderr, "\n  child %d: %s differs from the in-process kernels", child, diff);
    CU_ASSERT_PTR_NULL(diff);
    free(got);
}

static void test_dashd_gpu_two_client_processes_get_the_same_bits(void)
{
    char path[2][128], arg[2][192];
    pid_t pid[2];
    int ready[2], go[2];
    CU_ASSERT_FATAL(pipe(ready) == 0 && pipe(go) == 0);
    for (int i = 0; i < 2; i++) {
        snprintf(path[i], sizeof path[i], "/tmp/dashd-gpu-child-%d-%d.bin", (int)getpid(), i);
        snprintf(arg[i], sizeof arg[i], "%s,%d,%d", path[i], ready[1], go[0]);
        unlink(path[i]);
        pid[i] = spawn_child("client", arg[i], -1);
        CU_ASSERT_FATAL(pid[i] > 0);
    }
    close(ready[1]);
    close(go[0]);
    /* both registered: let them loose together */
    /* Each child holds the other's write end of `ready` too: one that failed before it was
     * ready leaves the other waiting for `go` and this read without an EOF. So bounded. */
    char byte;
    int n_ready = 0;
    struct pollfd pf = {.fd = ready[0], .events = POLLIN};
    while (n_ready < 2 && poll(&pf, 1, 60000) == 1 && read(ready[0], &byte, 1) == 1)
        n_ready++;
    if (n_ready < 2)
        fprintf(stderr, "\n  only %d of 2 children registered within 60 s", n_ready);
    CU_ASSERT_EQUAL(n_ready, 2);
    CU_ASSERT(write(go[1], "gg", 2) == 2);
    close(ready[0]);
    close(go[1]);
    for (int i = 0; i < 2; i++) {
        int status = wait_child(pid[i]);
        if (status != 0)
            fprintf(stderr, "\n  child %d exited with %d", i, status);
        CU_ASSERT_EQUAL(status, 0);
        check_child_result(path[i], i);
    }
}

/* Start a child of `mode` that writes one byte to the fd it is given once its work is
 * sent (victim, stalled), wait up to 60 s for that byte, kill it and reap it. Whether the
 * byte came. */
static int child_killed_once_ready(const char *mode)
{
    int fds[2];
    CU_ASSERT_FATAL(pipe(fds) == 0);
    char fd_s[16];
    snprintf(fd_s, sizeof fd_s, "%d", fds[1]);
    pid_t pid = spawn_child(mode, fd_s, fds[1]);
    CU_ASSERT_FATAL(pid > 0);
    close(fds[1]);
    char byte = 0;
    struct pollfd pf = {.fd = fds[0], .events = POLLIN};
    const int ready = poll(&pf, 1, 60000) == 1 && read(fds[0], &byte, 1) == 1;
    close(fds[0]);
    if (ready && !strcmp(mode, "stalled"))
        usleep(300000); /* dashd has queued the op behind its ready word */
    kill(pid, SIGKILL);
    CU_ASSERT_EQUAL(wait_child(pid), 128 + SIGKILL);
    return ready;
}

static void test_dashd_gpu_client_killed_mid_request(void)
{
    CU_ASSERT(child_killed_once_ready("victim")); /* 16 backwards submitted */
    CU_ASSERT(dashd_alive(&gpu_dashd_D));
    CU_ASSERT_EQUAL(raw_ping_endpoint(gpu_dashd_D.endpoint, 10000), 0);
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-after-kill");
    gpu_dashd_check_bits(&f, "after a client was killed");
    gpu_dashd_fixture_close(&f, "gpu-after-kill");
    CU_ASSERT(dashd_alive(&gpu_dashd_D));
}

static void test_dashd_gpu_client_recovers_from_daemon_restart(void)
{
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-restart");
    gpu_dashd_check_bits(&f, "before the restart");
    dashd_kill(&gpu_dashd_D); /* a crash: nothing closed cleanly */
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&gpu_dashd_D), 0);
    gpu_dashd_check_bits(&f, "after a SIGKILL and restart");
    /* the event ring too: made now, lost with the daemon, registered again by itself */
    gpu_dashd_check_stream(&f, 0, "stream-ordered, before the second restart");
    CU_ASSERT_EQUAL(dashd_stop(&gpu_dashd_D), 0); /* SIGTERM: closes the mapping it reopened */
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&gpu_dashd_D), 0);
    gpu_dashd_check_bits(&f, "after a SIGTERM and restart");
    gpu_dashd_check_stream(&f, 0, "stream-ordered, after the restart");
    gpu_dashd_fixture_close(&f, "gpu-restart");
}

/* dashd's GPU context is lost (DASHD_TEST_DEVICE_FAULT=1: a kernel storing to an unmapped
 * address before its first op on device memory, as a failing GPU or a kernel's bug would):
 * that op's caller gets DASH_EIO, dashd says why in its log and exits with status 75
 * (DASHD_EXIT_DEVICE_LOST, daemon/backend.h) instead of failing every later op of every
 * client; a fresh dashd on the endpoint (what systemd's Restart=on-failure starts) then
 * serves the same client its bits, the library having said hello and registered again by
 * itself. Not under MPS, where a fault is not confined to dashd's context. */
static void test_dashd_gpu_lost_context_stops_dashd_for_a_restart(void)
{
    struct dash_stats *st = NULL;
    struct dash_client *probe = gpu_dashd_connect_client("gpu-lost-probe");
    CU_ASSERT_PTR_NOT_NULL_FATAL(probe);
    int mps = dash_stats(probe, &st) == 0 && strcmp(st->gpu_sharing, "mps") == 0;
    dash_stats_free(st);
    dash_close(probe);
    if (mps)
        return;
    CU_ASSERT_EQUAL_FATAL(dashd_stop(&gpu_dashd_D), 0);
    CU_ASSERT_FATAL(setenv("DASHD_TEST_DEVICE_FAULT", "1", 1) == 0);
    const int up = dashd_restart(&gpu_dashd_D);
    unsetenv("DASHD_TEST_DEVICE_FAULT");
    CU_ASSERT_EQUAL_FATAL(up, 0);
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-lost");
    unsigned char *got = malloc(gpu_dashd_result_bytes());
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    char why[128] = "";
    CU_ASSERT_EQUAL(gpu_dashd_run_through_daemon(f.c, f.b, gpu_dashd_inputs, got, why, sizeof why), DASH_EIO);
    CU_ASSERT(strstr(why, "dash_forward") != NULL);
    /* it exits by itself, with its status */
    const int status = dashd_wait_exit(&gpu_dashd_D, 20000);
    CU_ASSERT_EQUAL(status, 75);
    const int said = dashd_log_has(&gpu_dashd_D, "the GPU context is lost", 0) &&
                     dashd_log_has(&gpu_dashd_D, "exit status 75", 0);
    CU_ASSERT(said);
    if (status != 75 || !said)
        fprintf(stderr, "\n  dashd's log: %s", gpu_dashd_D.log_path);
    /* what a service manager does next; the client carries on by itself */
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&gpu_dashd_D), 0);
    gpu_dashd_check_bits(&f, "after the lost context's restart");
    free(got);
    gpu_dashd_fixture_close(&f, "gpu-lost");
}

/* A client process killed while dashd's GPU queue waits for its stream (a stream-ordered
 * forward's ready word queued behind a minute-long kernel, which the kill discards): dashd
 * writes the word itself once it sees the process gone, so another client, in a process
 * of its own, gets its bits (synchronous and stream-ordered calls) within a bound instead
 * of waiting behind it for ever. GPUs without 64-bit stream memory operations order
 * stream calls by events instead: nothing to check there. */
static void stalled_client_holds_nobody_up(int fresh)
{
    if (!gpu_dashd_semaphores_here())
        return;
    char audit[96] = "";
    if (fresh) { /* a daemon that has run nothing yet, auditing: the stalled op is its first */
        CU_ASSERT_EQUAL(dashd_stop(&gpu_dashd_D), 0);
        snprintf(audit, sizeof audit, "/tmp/dashd-gpu-stall-audit-%d.log", (int)getpid());
        unlink(audit);
        snprintf(gpu_dashd_D.extra, sizeof gpu_dashd_D.extra, "--backend cuda --session-timeout 10 --audit %s", audit);
        CU_ASSERT_EQUAL_FATAL(dashd_restart(&gpu_dashd_D), 0);
    }
    CU_ASSERT(child_killed_once_ready("stalled"));
    /* another client: registered, let go at once, given 60 s (dashd waits 0.5 s before it
     * writes a dead client's word) */
    char path[128], arg[192];
    int ready[2], go[2];
    CU_ASSERT_FATAL(pipe(ready) == 0 && pipe(go) == 0);
    snprintf(path, sizeof path, "/tmp/dashd-gpu-after-stall-%d.bin", (int)getpid());
    snprintf(arg, sizeof arg, "%s,%d,%d", path, ready[1], go[0]);
    unlink(path);
    const pid_t pid = spawn_child("client", arg, -1);
    CU_ASSERT_FATAL(pid > 0);
    close(ready[1]);
    close(go[0]);
    char byte = 0;
    struct pollfd pf = {.fd = ready[0], .events = POLLIN};
    CU_ASSERT(poll(&pf, 1, 60000) == 1 && read(ready[0], &byte, 1) == 1);
    CU_ASSERT(write(go[1], "g", 1) == 1);
    close(ready[0]);
    close(go[1]);
    const int status = wait_child_for(pid, 60);
    if (status != 0)
        fprintf(stderr, "\n  the other client exited with %d (-2: still waiting after 60 s)", status);
    CU_ASSERT_EQUAL(status, 0);
    check_child_result(path, 0);
    CU_ASSERT(dashd_alive(&gpu_dashd_D));
    if (fresh) { /* back to the suite's daemon */
        CU_ASSERT_EQUAL(dashd_stop(&gpu_dashd_D), 0);
        unlink(audit);
        snprintf(gpu_dashd_D.extra, sizeof gpu_dashd_D.extra, "--backend cuda --session-timeout 10");
        CU_ASSERT_EQUAL(dashd_restart(&gpu_dashd_D), 0);
    }
}

static void test_dashd_gpu_client_killed_before_its_stream_reached_the_op_holds_nobody_up(void)
{
    stalled_client_holds_nobody_up(0);
}

/* The same as the first op of a fresh daemon that audits: the digests' scratch is made
 * inside the op, after its wait for the dead client's ready word is queued on dashd's
 * stream, and making it synchronises that stream on the host - so the worker thread itself
 * waits, not only the GPU, until dashd writes the word (the op is in the rescuer's sight
 * while it is being queued). */
static void test_dashd_gpu_client_killed_before_its_stream_reached_a_fresh_daemons_first_op_holds_nobody_up(void)
{
    stalled_client_holds_nobody_up(1);
}

int suite_gpu_dashd(void)
{
    CU_pSuite s = CU_add_suite("gpu_dashd", suite_init, suite_clean);
    if (!s)
        return -1;
    if (!CU_add_test(s, "test_dashd_gpu_forward_backward_match_in_process_kernels",
                     test_dashd_gpu_forward_backward_match_in_process_kernels) ||
        !CU_add_test(s, "test_dashd_gpu_two_client_processes_get_the_same_bits",
                     test_dashd_gpu_two_client_processes_get_the_same_bits) ||
        !CU_add_test(s, "test_dashd_gpu_bounds_are_checked", test_dashd_gpu_bounds_are_checked) ||
        !CU_add_test(s, "test_dashd_gpu_cuda_tensors_are_the_views_of_their_allocation",
                     test_dashd_gpu_cuda_tensors_are_the_views_of_their_allocation) ||
        !CU_add_test(s, "test_dashd_gpu_cuda_tensors_never_evict_their_own_views",
                     test_dashd_gpu_cuda_tensors_never_evict_their_own_views) ||
        !CU_add_test(s, "test_dashd_gpu_cuda_backend_refuses_float64_with_a_clear_error",
                     test_dashd_gpu_cuda_backend_refuses_float64_with_a_clear_error) ||
        !CU_add_test(s, "test_dashd_gpu_garbage_handle_is_an_error_reply",
                     test_dashd_gpu_garbage_handle_is_an_error_reply) ||
        !CU_add_test(s, "test_dashd_gpu_stream_ops_follow_the_callers_stream",
                     test_dashd_gpu_stream_ops_follow_the_callers_stream) ||
        !CU_add_test(s, "test_dashd_gpu_signal_op_failure_releases_the_stream_and_is_told_later",
                     test_dashd_gpu_signal_op_failure_releases_the_stream_and_is_told_later) ||
        !CU_add_test(s, "test_dashd_gpu_failed_stream_ops_poison_their_outputs_before_the_stream_goes_on",
                     test_dashd_gpu_failed_stream_ops_poison_their_outputs_before_the_stream_goes_on) ||
        !CU_add_test(s, "test_dashd_gpu_op_refused_by_a_client_limit_poisons_its_outputs",
                     test_dashd_gpu_op_refused_by_a_client_limit_poisons_its_outputs) ||
        !CU_add_test(s, "test_dashd_gpu_stream_op_output_past_its_buffer_is_refused_before_queueing",
                     test_dashd_gpu_stream_op_output_past_its_buffer_is_refused_before_queueing) ||
        !CU_add_test(s, "test_dashd_gpu_signal_ops_reuse_every_slot_in_order",
                     test_dashd_gpu_signal_ops_reuse_every_slot_in_order) ||
        !CU_add_test(s, "test_dashd_gpu_late_ready_word_of_a_refused_op_does_not_stall_its_slots_next_op",
                     test_dashd_gpu_late_ready_word_of_a_refused_op_does_not_stall_its_slots_next_op) ||
        !CU_add_test(s, "test_dashd_gpu_stream_op_on_a_capturing_stream_is_refused",
                     test_dashd_gpu_stream_op_on_a_capturing_stream_is_refused) ||
        !CU_add_test(s, "test_dashd_gpu_op_done_before_its_daemon_died_is_not_sent_again",
                     test_dashd_gpu_op_done_before_its_daemon_died_is_not_sent_again) ||
        !CU_add_test(s, "test_dashd_gpu_daemon_killed_with_signal_ops_in_flight_releases_the_stream",
                     test_dashd_gpu_daemon_killed_with_signal_ops_in_flight_releases_the_stream) ||
        !CU_add_test(s, "test_dashd_gpu_restart_heard_in_a_ping_resends_stream_ops_before_it_returns",
                     test_dashd_gpu_restart_heard_in_a_ping_resends_stream_ops_before_it_returns) ||
        !CU_add_test(s, "test_dashd_gpu_op_released_by_the_watchdog_is_not_sent_to_the_next_daemon",
                     test_dashd_gpu_op_released_by_the_watchdog_is_not_sent_to_the_next_daemon) ||
        !CU_add_test(s, "test_dashd_gpu_reported_config_reproduces_the_bits",
                     test_dashd_gpu_reported_config_reproduces_the_bits) ||
        !CU_add_test(s, "test_dashd_gpu_event_sync_errors_are_replies",
                     test_dashd_gpu_event_sync_errors_are_replies) ||
        !CU_add_test(s, "test_dashd_gpu_client_killed_mid_request",
                     test_dashd_gpu_client_killed_mid_request) ||
        !CU_add_test(s, "test_dashd_gpu_client_recovers_from_daemon_restart",
                     test_dashd_gpu_client_recovers_from_daemon_restart) ||
        !CU_add_test(s, "test_dashd_gpu_lost_context_stops_dashd_for_a_restart",
                     test_dashd_gpu_lost_context_stops_dashd_for_a_restart) ||
        !CU_add_test(s, "test_dashd_gpu_head_dims_96_and_256_match_in_process",
                     test_dashd_gpu_head_dims_96_and_256_match_in_process) ||
        !CU_add_test(s, "test_dashd_gpu_windows_softcap_and_packed_batches_run_and_other_dims_are_refused",
                     test_dashd_gpu_windows_softcap_and_packed_batches_run_and_other_dims_are_refused) ||
        !CU_add_test(s, "test_dashd_gpu_cpu_backend_refuses_cuda_buffers",
                     test_dashd_gpu_cpu_backend_refuses_cuda_buffers) ||
        /* last: were dashd's queue stuck after it, the tests after it would hang too */
        !CU_add_test(s, "test_dashd_gpu_client_killed_before_its_stream_reached_the_op_holds_nobody_up",
                     test_dashd_gpu_client_killed_before_its_stream_reached_the_op_holds_nobody_up) ||
        !CU_add_test(s, "test_dashd_gpu_client_killed_before_its_stream_reached_a_fresh_daemons_first_op_holds_nobody_up",
                     test_dashd_gpu_client_killed_before_its_stream_reached_a_fresh_daemons_first_op_holds_nobody_up))
        return -1;
    return 0;
}
