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
 */
#include "gpu_check.h"
#include "gpu_dashd.h"
#include "gpu_delay.h"

#include "../harness.h"
#include "../testutil.h"
#include "../../client/dash.h"
#include "kernels/cuda/attn_cuda.h"

#include <CUnit/CUnit.h>
#include <cuda.h> /* CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS */
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the problem and where its tensors live ------------------------------------------ */

#define SEQ 200
#define HQ 4
#define HKV 2
#define HD 64
#define ES 2 /* bf16 */
#define QB ((size_t)SEQ * HQ * HD * ES)
#define KB ((size_t)SEQ * HKV * HD * ES)
#define LB ((size_t)HQ * SEQ * sizeof(float))
#define ALLOC_BYTES ((size_t)4 << 20) /* 2 MiB-aligned, as the CUDA guide advises for IPC */
#define VIEW_OFF ((size_t)3 * 4096 + 256) /* where the registered view starts */
#define NSCHED 2
#define EVRING_TEST_MANY 257 /* one more event than a session may hold */

enum { Q, K, V, OUT, LSE, DOUT, DQ, DK, DV, SLOTS };

static const size_t slot_bytes[SLOTS] = {QB, KB, KB, QB, LB, QB, QB, KB, KB};
static const enum sched_kind kernel_sched[NSCHED] = {SCHED_SHIFT, SCHED_DESCENDING};
static const enum dash_schedule wire_sched[NSCHED] = {DASH_SCHED_SHIFT, DASH_SCHED_DESCENDING};

/* Byte offsets of the tensors in the view, and the view's size: every tensor after a gap,
 * so none sits at offset 0. */
static uint64_t off[SLOTS];
static uint64_t view_bytes;

static void layout_init(void)
{
    uint64_t at = 512;
    for (int s = 0; s < SLOTS; s++) {
        off[s] = at;
        at = ((at + slot_bytes[s] + 255) & ~(uint64_t)255) + 256;
    }
    view_bytes = at + 1024;
}

/* What one run produces, host side: out | lse | (dq | dk | dv) per schedule. */
static size_t result_bytes(void)
{
    return QB + LB + NSCHED * (QB + 2 * KB);
}

struct inputs {
    unsigned char q[QB], k[KB], v[KB], dout[QB];
};

static void inputs_fill(struct inputs *in, uint64_t seed)
{
    struct tu_rng r;
    tu_rng_init(&r, seed);
    tu_fill(in->q, DTYPE_BF16, (int64_t)(QB / ES), &r, 1.0);
    tu_fill(in->k, DTYPE_BF16, (int64_t)(KB / ES), &r, 1.0);
    tu_fill(in->v, DTYPE_BF16, (int64_t)(KB / ES), &r, 1.0);
    tu_fill(in->dout, DTYPE_BF16, (int64_t)(QB / ES), &r, 1.0);
}

/* Poison a view that lives in device memory or, for a shared-memory buffer, in host
 * memory. */
static cudaError_t set_ff(unsigned char *p, size_t n)
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
static int view_load(unsigned char *view, const struct inputs *in)
{
    return set_ff(view, view_bytes) == cudaSuccess &&
                   cudaMemcpy(view + off[Q], in->q, QB, cudaMemcpyDefault) == cudaSuccess &&
                   cudaMemcpy(view + off[K], in->k, KB, cudaMemcpyDefault) == cudaSuccess &&
                   cudaMemcpy(view + off[V], in->v, KB, cudaMemcpyDefault) == cudaSuccess &&
                   cudaMemcpy(view + off[DOUT], in->dout, QB, cudaMemcpyDefault) ==
                       cudaSuccess &&
                   cudaDeviceSynchronize() == cudaSuccess
               ? 0
               : -1;
}

static int fetch(unsigned char *dst, const unsigned char *view, int slot)
{
    return cudaMemcpy(dst, view + off[slot], slot_bytes[slot], cudaMemcpyDefault) ==
                   cudaSuccess
               ? 0
               : -1;
}

static int poison_grads(unsigned char *view)
{
    for (int s = DQ; s <= DV; s++)
        if (set_ff(view + off[s], slot_bytes[s]) != cudaSuccess)
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
    return attn_dense(view + off[slot], SEQ, heads, HD);
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
    if (cudaMalloc((void **)&view, view_bytes) != cudaSuccess || view_load(view, in)) {
        snprintf(why, len, "cannot set up the reference copies");
        goto free_all;
    }
    const struct attn_problem p = problem();
    if ((rc = cuattn_forward(ca, &p, NULL, kt(view, OUT), (float *)(void *)(view + off[LSE]),
                             kt(view, Q), kt(view, K), kt(view, V), NULL))) {
        snprintf(why, len, "cuattn_forward: %d", rc);
        goto free_all;
    }
    rc = -1;
    if (fetch(res, view, OUT) || fetch(res + QB, view, LSE))
        goto free_all;
    unsigned char *g = res + QB + LB;
    for (int i = 0; i < NSCHED; i++, g += QB + 2 * KB) {
        struct attn_config cfg = {kernel_sched[i], 0, 0, 0, 0};
        if (poison_grads(view))
            goto free_all;
        if ((rc = cuattn_backward(ca, &p, &cfg, 0, kt(view, DQ), kt(view, DK), kt(view, DV),
                                  kt(view, Q), kt(view, K), kt(view, V), kt(view, OUT),
                                  (const float *)(void *)(view + off[LSE]), kt(view, DOUT),
                                  NULL))) {
            snprintf(why, len, "cuattn_backward %s: %d", sched_kind_name(kernel_sched[i]), rc);
            goto free_all;
        }
        rc = -1;
        if (fetch(g, view, DQ) || fetch(g + QB, view, DK) || fetch(g + QB + KB, view, DV))
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

struct tensors {
    struct dash_tensor t[SLOTS];
};

static struct tensors tensors_of(struct dash_buffer *b)
{
    struct tensors ts;
    for (int s = 0; s < SLOTS; s++) {
        int heads = s == K || s == V || s == DK || s == DV ? HKV : HQ;
        ts.t[s] = s == LSE ? dash_tensor_lse(b, off[s], 1, HQ, SEQ)
                           : dash_tensor_dense(b, off[s], 1, SEQ, heads, HD);
    }
    return ts;
}

/* view is dash_buffer_data(b). 0, or the failing code with the reason in why. */
static int run_through_daemon(struct dash_client *c, struct dash_buffer *b, const struct inputs *in,
                              unsigned char *res, char *why, size_t len)
{
    unsigned char *view = dash_buffer_data(b);
    if (view_load(view, in)) {
        snprintf(why, len, "cannot load the view");
        return -1;
    }
    struct tensors ts = tensors_of(b);
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
    if (fetch(res, view, OUT) || fetch(res + QB, view, LSE))
        return -1;
    unsigned char *g = res + QB + LB;
    for (int i = 0; i < NSCHED; i++, g += QB + 2 * KB) {
        a.schedule = wire_sched[i];
        if (poison_grads(view))
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
        if (fetch(g, view, DQ) || fetch(g + QB, view, DK) || fetch(g + QB + KB, view, DV))
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
        cudaMalloc((void **)&stage, view_bytes) != cudaSuccess ||
        cudaMallocHost((void **)&host, result_bytes()) != cudaSuccess || view_load(stage, in) ||
        set_ff(view, view_bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
        goto out;
    /* the producer: the inputs (and poisoned outputs) land in the view late */
    if (gpu_test_delayed_copy(view, stage, view_bytes, delay_ns, s) != cudaSuccess)
        goto out;
    struct tensors ts = tensors_of(b);
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
        cudaMemcpyAsync(host, view + off[OUT], QB, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
        cudaMemcpyAsync(host + QB, view + off[LSE], LB, cudaMemcpyDeviceToHost, s) != cudaSuccess)
        goto out;
    unsigned char *g = host + QB + LB;
    for (int i = 0; i < NSCHED; i++, g += QB + 2 * KB) {
        a.schedule = wire_sched[i];
        for (int slot = DQ; slot <= DV; slot++)
            if (cudaMemsetAsync(view + off[slot], 0xff, slot_bytes[slot], s) != cudaSuccess)
                goto out;
        rc = dash_backward_stream(c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                  &t[DQ], &t[DK], &t[DV], s, &r);
        if (rc) {
            snprintf(why, len, "dash_backward_stream %d: %s", (int)wire_sched[i], dash_errname(rc));
            goto out;
        }
        rc = -1;
        if (r.schedule != wire_sched[i] ||
            cudaMemcpyAsync(g, view + off[DQ], QB, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
            cudaMemcpyAsync(g + QB, view + off[DK], KB, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
            cudaMemcpyAsync(g + QB + KB, view + off[DV], KB, cudaMemcpyDeviceToHost, s) != cudaSuccess)
            goto out;
    }
    snprintf(why, len, "the stream failed");
    if (cudaStreamSynchronize(s) != cudaSuccess)
        goto out;
    memcpy(res, host, result_bytes());
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
static const char *first_difference(const unsigned char *a, const unsigned char *b)
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

static struct dashd_proc D;
static uint64_t seed;
static struct inputs *inputs;
static unsigned char *expected; /* result_bytes(): the in-process kernels' bits */

static void show_log(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tail -n 20 %s >&2", D.log_path);
    (void)tu_run(cmd, NULL);
}

static int suite_init(void)
{
    layout_init();
    seed = tu_seed() ^ 0xd45d;
    inputs = malloc(sizeof *inputs);
    expected = malloc(result_bytes());
    if (!inputs || !expected)
        return -1;
    inputs_fill(inputs, seed);
    char why[128];
    /* the reference first: no daemon kernel can overlap this process's backward */
    if (run_in_process(inputs, expected, why, sizeof why) != 0) {
        fprintf(stderr, "\n  reference: %s\n", why);
        return -1;
    }
    if (dashd_start(&D, "--backend cuda --session-timeout 10") != 0) {
        fprintf(stderr, "\n  dashd --backend cuda did not start:\n");
        show_log();
        return -1;
    }
    return 0;
}

static int suite_clean(void)
{
    int status = dashd_stop(&D);
    if (status != 0) {
        fprintf(stderr, "\n  dashd exited with %d:\n", status);
        show_log();
    }
    free(inputs);
    free(expected);
    return status == 0 ? 0 : -1;
}

static unsigned connect_flags; /* DASH_CONNECT_* for the next connect_client() */

static struct dash_client *connect_client(const char *name)
{
    struct dash_connect_opts o = {.client_name = name, .timeout_ms = 20000,
                                  .flags = connect_flags};
    struct dash_client *c = NULL;
    int rc = dash_connect(D.endpoint, &o, &c);
    if (rc)
        fprintf(stderr, "\n  dash_connect: %s", dash_errname(rc));
    return c;
}

/* One allocation, the view registered from VIEW_OFF. */
struct fixture {
    struct dash_client *c;
    unsigned char *alloc;
    struct dash_buffer *b;
};

static void fixture_open(struct fixture *f, const char *name)
{
    memset(f, 0, sizeof *f);
    f->c = connect_client(name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->c);
    CU_ASSERT_FATAL(cudaMalloc((void **)&f->alloc, ALLOC_BYTES) == cudaSuccess);
    int rc = dash_cuda_register(f->c, f->alloc + VIEW_OFF, view_bytes, &f->b);
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
    if (dash_connect(D.endpoint, &o, &c) != 0)
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
static void fixture_close(struct fixture *f, const char *name)
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
static void check_bits(struct fixture *f, const char *when)
{
    unsigned char *got = malloc(result_bytes());
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    char why[128] = "";
    int rc = run_through_daemon(f->c, f->b, inputs, got, why, sizeof why);
    if (rc)
        fprintf(stderr, "\n  %s: %s", when, why);
    CU_ASSERT_EQUAL(rc, 0);
    const char *diff = rc ? NULL : first_difference(got, expected);
    if (diff)
        fprintf(stderr, "\n  %s: %s differs from the in-process kernels", when, diff);
    CU_ASSERT_PTR_NULL(diff);
    free(got);
}

/* The stream-ordered run's bits against the in-process kernels'. With a producer delay,
 * the forward must also have returned while the producer still ran. */
static void check_stream(struct fixture *f, uint64_t delay_ns, const char *when)
{
    unsigned char *got = malloc(result_bytes());
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    char why[128] = "";
    int early = 0;
    int rc = run_stream(f->c, f->b, inputs, got, delay_ns, &early, why, sizeof why);
    if (rc)
        fprintf(stderr, "\n  %s: %s", when, why);
    CU_ASSERT_EQUAL(rc, 0);
    if (delay_ns && !rc && !early)
        fprintf(stderr, "\n  %s: the call waited for the producer kernel", when);
    CU_ASSERT(!delay_ns || rc || early);
    const char *diff = rc ? NULL : first_difference(got, expected);
    if (diff)
        fprintf(stderr, "\n  %s: %s differs from the in-process kernels", when, diff);
    CU_ASSERT_PTR_NULL(diff);
    free(got);
}

/* ---- raw RegisterBuffer, for what libdash would never send -------------------------------- */

static void uuid_of_device0(char buf[48])
{
    struct cudaDeviceProp prop;
    memset(buf, 0, 48);
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
        return;
    const unsigned char *b = (const unsigned char *)prop.uuid.bytes;
    snprintf(buf, 48, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

/* Send req on a raw session: its reply (the caller frees it; NULL: none came), with the
 * code (-1 when none came) and message copied out. */
static Dash__Reply *raw_reply(struct raw_client *r, Dash__Request *req, int timeout_ms, int *code,
                              char *msg, size_t msglen)
{
    Dash__Reply *rep = raw_call(r, req, timeout_ms);
    *code = rep ? rep->code : -1;
    snprintf(msg, msglen, "%s", rep && rep->message ? rep->message : "");
    return rep;
}

/* RegisterBuffer{handle, uuid, alloc_offset (absent when NULL), size} on a raw session:
 * the reply's code (-1: no reply), its message in msg, the buffer id in *ret_id (0: none). */
static int raw_register_at(struct raw_client *r, const void *handle, size_t hlen, const char *uuid,
                           const uint64_t *alloc_offset, uint64_t size, char *msg, size_t msglen,
                           uint64_t *ret_id)
{
    static uint64_t id = 100;
    Dash__RegisterBuffer rb = DASH__REGISTER_BUFFER__INIT;
    rb.size = size;
    rb.has_cuda_ipc_handle = 1;
    rb.cuda_ipc_handle.data = (uint8_t *)handle;
    rb.cuda_ipc_handle.len = hlen;
    rb.device_uuid = (char *)uuid;
    rb.has_alloc_offset = alloc_offset != NULL;
    rb.alloc_offset = alloc_offset ? *alloc_offset : 0;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = id++;
    req.body_case = DASH__REQUEST__BODY_REGISTER_BUFFER;
    req.register_buffer = &rb;
    int code;
    Dash__Reply *rep = raw_reply(r, &req, 10000, &code, msg, msglen);
    *ret_id = rep && code == 0 && rep->has_buffer_id ? rep->buffer_id : 0;
    wire_free_reply(rep);
    return code;
}

static int raw_register(struct raw_client *r, const void *handle, size_t hlen, const char *uuid,
                        uint64_t alloc_offset, uint64_t size, char *msg, size_t msglen)
{
    uint64_t id;
    return raw_register_at(r, handle, hlen, uuid, &alloc_offset, size, msg, msglen, &id);
}

/* RegisterBuffer for the whole of an allocation: the buffer id, or 0. */
static uint64_t raw_register_id(struct raw_client *r, const cudaIpcMemHandle_t *h, const char *uuid,
                                uint64_t size)
{
    char msg[256];
    uint64_t id;
    (void)raw_register_at(r, h, sizeof *h, uuid, NULL, size, msg, sizeof msg, &id);
    return id;
}

/* RegisterEvents with n handles of lens[i] bytes: the reply's code (-1: none), message,
 * first_event (or -1 when absent). */
static int raw_events(struct raw_client *r, unsigned char (*handles)[64], const size_t *lens,
                      size_t n, const char *uuid, char *msg, size_t msglen, int64_t *ret_first)
{
    ProtobufCBinaryData *hs = calloc(n ? n : 1, sizeof *hs);
    for (size_t i = 0; i < n; i++) {
        hs[i].data = handles[i];
        hs[i].len = lens[i];
    }
    Dash__RegisterEvents re = DASH__REGISTER_EVENTS__INIT;
    re.n_handles = n;
    re.handles = hs;
    re.device_uuid = (char *)uuid;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 7002;
    req.body_case = DASH__REQUEST__BODY_REGISTER_EVENTS;
    req.register_events = &re;
    int code;
    Dash__Reply *rep = raw_reply(r, &req, 10000, &code, msg, msglen);
    free(hs);
    *ret_first = rep && rep->has_first_event ? (int64_t)rep->first_event : -1;
    wire_free_reply(rep);
    return code;
}

/* A forward of the suite's problem on buffer id (tensors at off[]) with this EventSync
 * (NULL: none): the reply's code, message, and whether it carried run_us. */
static int raw_forward_sync(struct raw_client *r, uint64_t id, Dash__EventSync *sync, char *msg,
                            size_t msglen, int *ret_has_run_us)
{
    int64_t shp[5][4] = {{1, SEQ, HQ, HD}, {1, SEQ, HKV, HD}, {1, SEQ, HKV, HD}, {1, SEQ, HQ, HD},
                         {1, HQ, SEQ, 0}};
    Dash__TensorRef t[5];
    for (int i = 0; i < 5; i++) {
        dash__tensor_ref__init(&t[i]);
        t[i].buffer_id = id;
        t[i].offset = off[i];
        t[i].n_shape = i == LSE ? 3 : 4;
        t[i].shape = shp[i];
    }
    Dash__AttnParams p = DASH__ATTN_PARAMS__INIT;
    p.dtype = DASH__DTYPE__BF16;
    p.mask = DASH__MASK__CAUSAL;
    Dash__Forward f = DASH__FORWARD__INIT;
    f.params = &p;
    f.q = &t[Q], f.k = &t[K], f.v = &t[V], f.out = &t[OUT], f.lse = &t[LSE];
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 7003;
    req.body_case = DASH__REQUEST__BODY_FORWARD;
    req.forward = &f;
    req.sync = sync;
    int code;
    Dash__Reply *rep = raw_reply(r, &req, 20000, &code, msg, msglen);
    *ret_has_run_us = rep && rep->op && rep->op->has_run_us;
    wire_free_reply(rep);
    return code;
}

static void raw_goodbye(struct raw_client *r)
{
    Dash__Goodbye g = DASH__GOODBYE__INIT;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 999;
    req.body_case = DASH__REQUEST__BODY_GOODBYE;
    req.goodbye = &g;
    Dash__Reply *rep = raw_call(r, &req, 5000);
    CU_ASSERT(rep && rep->code == 0);
    wire_free_reply(rep);
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
    unsigned char *res = malloc(result_bytes()), *alloc = NULL;
    if (!in || !res || cudaMalloc((void **)&alloc, ALLOC_BYTES) != cudaSuccess)
        return 3;
    inputs_fill(in, child_seed);
    struct dash_connect_opts o = {.client_name = mode, .timeout_ms = 20000};
    struct dash_client *c;
    struct dash_buffer *b;
    int rc = dash_connect(endpoint, &o, &c);
    if (!rc)
        rc = dash_cuda_register(c, alloc + VIEW_OFF, view_bytes, &b);
    if (rc) {
        fprintf(stderr, "child %s: %s\n", mode, dash_errname(rc));
        return 4;
    }
    char why[128] = "";
    if (!strcmp(mode, "client")) {
        char path[128];
        int ready_fd = -1, go_fd = -1;
        char go = 0;
        unsigned char *again = malloc(result_bytes());
        if (!again || sscanf(arg, "%127[^,],%d,%d", path, &ready_fd, &go_fd) != 3 ||
            write(ready_fd, "r", 1) != 1 || read(go_fd, &go, 1) != 1)
            return 12;
        for (int round = 0; round < CHILD_ROUNDS; round++) {
            /* odd rounds stream-ordered: both kinds of call, from both clients at once */
            unsigned char *dst = round ? again : res;
            rc = round % 2 ? run_stream(c, b, in, dst, 0, NULL, why, sizeof why)
                           : run_through_daemon(c, b, in, dst, why, sizeof why);
            if (rc != 0) {
                fprintf(stderr, "child client: %s\n", why);
                return 5;
            }
            if (round && memcmp(res, again, result_bytes()) != 0)
                return 11;
        }
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(res, 1, result_bytes(), f) != result_bytes() || fclose(f) != 0)
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
            cudaMalloc((void **)&stage, view_bytes) != cudaSuccess || view_load(stage, in) ||
            cudaDeviceSynchronize() != cudaSuccess ||
            gpu_test_delayed_copy(dash_buffer_data(b), stage, view_bytes, 60000000000ull, s) != cudaSuccess)
            return 13;
        struct tensors ts = tensors_of(b);
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
    if (view_load(dash_buffer_data(b), in))
        return 7;
    struct tensors ts = tensors_of(b);
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
    snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)seed);
    pid_t pid = fork();
    if (pid == 0) {
        /* no CUDA (or ZeroMQ) here before exec: the context belongs to the parent */
        (void)extra_fd;
        execl("/proc/self/exe", "test_dash_gpu", "--dashd-child", mode, D.endpoint, seed_s, arg,
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
    fixture_open(&f, "gpu-bits");
    CU_ASSERT(dash_buffer_data(f.b) == f.alloc + VIEW_OFF);
    CU_ASSERT_EQUAL(dash_buffer_size(f.b), view_bytes);
    check_bits(&f, "first run");
    check_bits(&f, "second run"); /* fresh poison, same bits */

    struct dash_stats *st = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_stats(f.c, &st), 0);
    CU_ASSERT_STRING_EQUAL(st->backend, "cuda");
    CU_ASSERT(st->threads > 0); /* the SM count */
    /* dashd was started with this process's environment: under MPS exactly when we are */
    int mps = 0;
    CUDA_OK(cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, 0));
    CU_ASSERT_STRING_EQUAL(st->gpu_sharing, mps ? "mps" : "contexts");
    dash_stats_free(st);
    fixture_close(&f, "gpu-bits");
}

/* A client child's result file (PATH of its "client" mode): all of it there, the bits of
 * the in-process kernels; removed after. */
static void check_child_result(const char *path, int child)
{
    unsigned char *got = malloc(result_bytes());
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    FILE *fp = fopen(path, "rb");
    size_t n = fp ? fread(got, 1, result_bytes(), fp) : 0;
    if (fp)
        fclose(fp);
    unlink(path);
    CU_ASSERT_EQUAL(n, result_bytes());
    const char *diff = n == result_bytes() ? first_difference(got, expected) : "everything";
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

static void test_dashd_gpu_bounds_are_checked(void)
{
    struct fixture f;
    fixture_open(&f, "gpu-bounds");
    struct tensors ts = tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};

    /* a tensor whose offset lies past the registered view (though inside the allocation) */
    struct dash_tensor far = t[Q];
    far.offset = view_bytes - 64;
    CU_ASSERT_EQUAL(dash_forward(f.c, &a, &far, &t[K], &t[V], &t[OUT], &t[LSE], NULL), DASH_EBOUNDS);
    far.offset = view_bytes + 4096;
    CU_ASSERT_EQUAL(dash_forward(f.c, &a, &t[Q], &t[K], &t[V], &far, &t[LSE], NULL), DASH_EBOUNDS);

    /* a view larger than the allocation: libdash sees it first */
    struct dash_buffer *big = NULL;
    CU_ASSERT_EQUAL(dash_cuda_register(f.c, f.alloc + VIEW_OFF, ALLOC_BYTES - VIEW_OFF + 1, &big),
                    DASH_EBOUNDS);
    CU_ASSERT_PTR_NULL(big);
    /* and the daemon checks it too, for clients that do not */
    cudaIpcMemHandle_t h;
    CU_ASSERT_FATAL(cudaIpcGetMemHandle(&h, f.alloc) == cudaSuccess);
    char uuid[48], msg[256];
    uuid_of_device0(uuid);
    struct raw_client *r = raw_connect(D.endpoint);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL_FATAL(raw_hello(r, 1), 0);
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h, uuid, VIEW_OFF, ALLOC_BYTES - VIEW_OFF + 4096,
                                 msg, sizeof msg), DASH_EBOUNDS);
    CU_ASSERT(strstr(msg, "allocation") != NULL);
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h, uuid, ALLOC_BYTES, 1, msg, sizeof msg),
                    DASH_EBOUNDS);
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h, uuid, UINT64_MAX - 10, 100, msg, sizeof msg),
                    DASH_EBOUNDS);
    /* the whole allocation is fine, and shares the mapping the fixture's session opened */
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h, uuid, 0, ALLOC_BYTES, msg, sizeof msg), 0);
    /* another GPU's handle, a handle of the wrong size, no uuid */
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h, "GPU-00000000-0000-0000-0000-000000000000", 0,
                                 4096, msg, sizeof msg), DASH_ENOTSUP);
    CU_ASSERT(strstr(msg, "another GPU") != NULL);
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h - 1, uuid, 0, 4096, msg, sizeof msg), DASH_EINVAL);
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h, NULL, 0, 4096, msg, sizeof msg), DASH_EINVAL);
    raw_goodbye(r); /* release the whole-allocation registration before the memory goes */
    raw_close(r);

    /* shared memory on the CUDA backend: staged through the device, the same bits */
    struct dash_buffer *shm = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(f.c, view_bytes, &shm), 0);
    unsigned char *got = malloc(result_bytes());
    char why[128] = "";
    int rc = run_through_daemon(f.c, shm, inputs, got, why, sizeof why);
    if (rc)
        fprintf(stderr, "\n  shared memory on the CUDA daemon: %s", why);
    CU_ASSERT_EQUAL(rc, 0);
    const char *diff = rc ? NULL : first_difference(got, expected);
    if (diff)
        fprintf(stderr, "\n  shared memory on the CUDA daemon: %s differs", diff);
    CU_ASSERT_PTR_NULL(diff);
    free(got);
    CU_ASSERT_EQUAL(dash_buffer_free(f.c, shm), 0);
    /* still serving this client, bit for bit */
    check_bits(&f, "after the refusals");
    fixture_close(&f, "gpu-bounds");
}

/* float64 is the CPU engine's: the CUDA backend refuses it, on device memory and on shared
 * memory it would stage, with a reply that says so and where it runs; the client goes on. */
/* dash_cuda_tensors: many strided views of one allocation in one call - each the buffer and
 * offset dash_cuda_view gives for the bytes it spans, shape and strides copied; a view
 * running past the allocation and malformed refs are refused. */
static void test_dashd_gpu_cuda_tensors_are_the_views_of_their_allocation(void)
{
    struct fixture f;
    fixture_open(&f, "gpu-tensors");
    unsigned char *m = f.alloc;
    struct dash_cuda_ref refs[3] = {
        /* a dense (2, 8, 2, 64) bf16 tensor at 256 bytes */
        {.ptr = m + 256, .ndim = 4, .elem_size = 2, .shape = {2, 8, 2, 64},
         .strides = {8 * 2 * 64, 2 * 64, 64, 1}},
        /* a (2, 2, 8) float32 lse at 64 KiB */
        {.ptr = m + 65536, .ndim = 3, .elem_size = 4, .shape = {2, 2, 8}, .strides = {16, 8, 1}},
        /* a transposed view, (batch, seqlen, heads, d) of a (batch, heads, seqlen, d) block */
        {.ptr = m + 131072, .ndim = 4, .elem_size = 2, .shape = {1, 8, 4, 64},
         .strides = {4 * 8 * 64, 64, 8 * 64, 1}},
    };
    struct dash_tensor t[3];
    memset(t, 0xab, sizeof t);
    CU_ASSERT_EQUAL_FATAL(dash_cuda_tensors(f.c, 3, refs, t), 0);
    const size_t bytes[3] = {2 * 8 * 2 * 64 * 2, 2 * 2 * 8 * 4, 4 * 8 * 64 * 2};
    for (int i = 0; i < 3; i++) {
        struct dash_buffer *b = NULL;
        uint64_t off = 0;
        CU_ASSERT_EQUAL(dash_cuda_view(f.c, refs[i].ptr, bytes[i], &b, &off), 0);
        CU_ASSERT_PTR_EQUAL(t[i].buf, b);
        CU_ASSERT_EQUAL(t[i].offset, off);
        CU_ASSERT_EQUAL(t[i].offset, (uint64_t)((const unsigned char *)refs[i].ptr - m));
        CU_ASSERT_EQUAL(t[i].ndim, refs[i].ndim);
        for (int d = 0; d < refs[i].ndim; d++) {
            CU_ASSERT_EQUAL(t[i].shape[d], refs[i].shape[d]);
            CU_ASSERT_EQUAL(t[i].strides[d], refs[i].strides[d]);
        }
    }
    CU_ASSERT_PTR_EQUAL(t[0].buf, t[1].buf); /* one allocation, one registration */
    CU_ASSERT_PTR_EQUAL(t[0].buf, t[2].buf);

    /* the last byte of the allocation is fine, one more is not */
    struct dash_cuda_ref edge = {.ptr = m + ALLOC_BYTES - 128, .ndim = 1, .elem_size = 2,
                                 .shape = {64}, .strides = {1}};
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 1, &edge, t), 0);
    edge.shape[0] = 65;
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 1, &edge, t), DASH_EBOUNDS);
    struct dash_cuda_ref bad = refs[0];
    bad.ndim = 5;
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 1, &bad, t), DASH_EINVAL);
    bad = refs[0];
    bad.strides[1] = -1;
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 1, &bad, t), DASH_EINVAL);
    bad = refs[0];
    bad.shape[2] = 0;
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 1, &bad, t), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, -1, refs, t), DASH_EINVAL);
    fixture_close(&f, "gpu-tensors");
}

/* dash_cuda_tensors of more allocations than the view cache holds: a later tensor of the
 * call may not evict (and free) the registration an earlier one points to; with every
 * registration held by this call the answer is DASH_EBUSY, and the holds end with it. */
static void test_dashd_gpu_cuda_tensors_never_evict_their_own_views(void)
{
    enum { N = 64 + 1 }; /* DASH__VIEW_CACHE + 1 */
    struct fixture f;
    fixture_open(&f, "gpu-tensors-evict");
    void *mem[N] = {0};
    struct dash_cuda_ref refs[N];
    static struct dash_tensor t[N];
    for (int i = 0; i < N; i++) {
        CU_ASSERT_FATAL(cudaMalloc(&mem[i], (size_t)2 << 20) == cudaSuccess); /* IPC-sized */
        refs[i] = (struct dash_cuda_ref){.ptr = mem[i], .ndim = 1, .elem_size = 4,
                                         .shape = {16}, .strides = {1}};
    }
    int rc = dash_cuda_tensors(f.c, N, refs, t);
    if (rc == 0) /* what it gave must still be live and distinct: the first one was evicted */
        fprintf(stderr, "\n  %d allocations in one call: t[0].buf %p, t[%d].buf %p", N,
                (void *)t[0].buf, N - 1, (void *)t[N - 1].buf);
    CU_ASSERT_EQUAL(rc, DASH_EBUSY);
    /* nothing stays held: the cache evicts again */
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 1, &refs[N - 1], t), 0);
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 2, refs, t), 0);
    CU_ASSERT_PTR_NOT_EQUAL(t[0].buf, t[1].buf);
    fixture_close(&f, "gpu-tensors-evict");
    for (int i = 0; i < N; i++)
        CU_ASSERT(cudaFree(mem[i]) == cudaSuccess);
}

static void test_dashd_gpu_cuda_backend_refuses_float64_with_a_clear_error(void)
{
    struct fixture f;
    fixture_open(&f, "gpu-f64");
    struct tensors ts = tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_F64, .mask = DASH_MASK_CAUSAL};
    CU_ASSERT_EQUAL(dash_forward(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], NULL),
                    DASH_EBADDTYPE);
    const char *why = dash_last_error(f.c);
    CU_ASSERT(why && strstr(why, "f64") && strstr(why, "CPU engine"));
    if (why)
        fprintf(stderr, "\n  (dashd: %s)", why);
    struct dash_buffer *shm = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(f.c, view_bytes, &shm), 0);
    struct tensors hs = tensors_of(shm);
    CU_ASSERT_EQUAL(dash_forward(f.c, &a, &hs.t[Q], &hs.t[K], &hs.t[V], &hs.t[OUT], &hs.t[LSE], NULL),
                    DASH_EBADDTYPE);
    CU_ASSERT_EQUAL(dash_buffer_free(f.c, shm), 0);
    check_bits(&f, "after refusing float64");
    fixture_close(&f, "gpu-f64");
}

static void test_dashd_gpu_garbage_handle_is_an_error_reply(void)
{
    char uuid[48], msg[256];
    uuid_of_device0(uuid);
    unsigned char garbage[64];
    struct tu_rng rng;
    tu_rng_init(&rng, seed ^ 0x6a7b);
    for (size_t i = 0; i < sizeof garbage; i++)
        garbage[i] = (unsigned char)tu_next(&rng);
    struct raw_client *r = raw_connect(D.endpoint);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL_FATAL(raw_hello(r, 1), 0);
    int code = raw_register(r, garbage, sizeof garbage, uuid, 0, 4096, msg, sizeof msg);
    CU_ASSERT(code < 0 && code != -1);
    CU_ASSERT(strstr(msg, "cannot open the CUDA IPC handle") != NULL);
    memset(garbage, 0, sizeof garbage);
    code = raw_register(r, garbage, sizeof garbage, uuid, 0, 4096, msg, sizeof msg);
    CU_ASSERT(code < 0 && code != -1);
    raw_close(r);
    CU_ASSERT(dashd_alive(&D));
    CU_ASSERT_EQUAL(raw_ping_endpoint(D.endpoint, 5000), 0);
    struct fixture f;
    fixture_open(&f, "gpu-after-garbage");
    check_bits(&f, "after a garbage handle");
    fixture_close(&f, "gpu-after-garbage");
}

/* Stream-ordered calls: the daemon's kernels wait for a producer still running on the
 * caller's stream (the call returns before it ends), the caller's later work waits for
 * the daemon's; bits equal the in-process kernels', and synchronous calls mix freely. */
static void test_dashd_gpu_stream_ops_follow_the_callers_stream(void)
{
    /* both ways of ordering: semaphores (the default on this GPU) and events */
    for (int events = 0; events < 2; events++) {
        struct fixture f;
        connect_flags = events ? DASH_CONNECT_STREAM_EVENTS : 0;
        fixture_open(&f, "gpu-stream");
        connect_flags = 0;
        check_stream(&f, 300000000ull, "stream-ordered behind a 300 ms producer");
        check_bits(&f, "synchronous after stream-ordered");
        check_stream(&f, 0, "stream-ordered again");
        CU_ASSERT_EQUAL(dash_sync(f.c), 0);
        fixture_close(&f, "gpu-stream");
    }
}

/* ---- the poison of failed stream-ordered ops ------------------------------------------- */

static const int fwd_outputs[] = {OUT, LSE}, bwd_outputs[] = {DQ, DK, DV};

/* Zero each output of `slots` and the 256 bytes after it (synchronously). 0 or -1. */
static int zero_outputs(unsigned char *view, const int *slots, int n)
{
    for (int i = 0; i < n; i++)
        if (cudaMemset(view + off[slots[i]], 0, slot_bytes[slots[i]] + 256) != cudaSuccess)
            return -1;
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}

/* Whether every byte of each output is 0xFF (NaN in bf16 and f32) while the 256 bytes after
 * it are still zero: the poison covers the outputs, and nothing else. */
static int outputs_poisoned(const unsigned char *view, const int *slots, int n)
{
    int ok = 1;
    for (int i = 0; i < n; i++) {
        const size_t bytes = slot_bytes[slots[i]];
        unsigned char *h = malloc(bytes + 256);
        if (!h || cudaMemcpy(h, view + off[slots[i]], bytes + 256, cudaMemcpyDeviceToHost) !=
                      cudaSuccess) {
            free(h);
            return 0;
        }
        for (size_t j = 0; j < bytes + 256; j++)
            if (h[j] != (j < bytes ? 0xff : 0)) {
                fprintf(stderr, "\n    slot %d byte %zu is 0x%02x ", slots[i], j, h[j]);
                ok = 0;
                break;
            }
        free(h);
    }
    return ok;
}

/* Whether the GPU has 64-bit stream memory operations, which semaphore-ordered ops need
 * (elsewhere stream calls are ordered by events: nothing for these tests to check; said). */
static int semaphores_here(void)
{
    int memops = 0;
    CUDA_OK(cudaDeviceGetAttribute(&memops, (enum cudaDeviceAttr)CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0));
    if (!memops)
        fprintf(stderr, "\n    no 64-bit stream memory operations here: nothing to check ");
    return memops;
}

/* Wait for a stream at most ms milliseconds: 0 when it finished, -1 when it did not. */
static int stream_done_within(cudaStream_t s, int ms)
{
    for (int i = 0; i < ms; i++, usleep(1000)) {
        cudaError_t e = cudaStreamQuery(s);
        if (e != cudaErrorNotReady)
            return e == cudaSuccess ? 0 : -1;
    }
    return -1;
}

/* Semaphore-ordered ops: a failure the daemon finds (a tile size it refuses) never leaves
 * the caller's stream waiting; it reaches the caller at the next call, naming the op;
 * the calls after it work. */
static void test_dashd_gpu_signal_op_failure_releases_the_stream_and_is_told_later(void)
{
    struct fixture f;
    fixture_open(&f, "gpu-signal-errors");
    CU_ASSERT_FATAL(view_load(dash_buffer_data(f.b), inputs) == 0);
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .block_n = 96};
    CU_ASSERT_EQUAL(dash_backward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE],
                                         &t[DOUT], &t[DQ], &t[DK], &t[DV], s, NULL), 0);
    CU_ASSERT_EQUAL(stream_done_within(s, 10000), 0); /* released, not hung */
    a.block_n = 0;
    int rc = dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL);
    CU_ASSERT_EQUAL(rc, DASH_ESCHED);
    CU_ASSERT(strstr(dash_last_error(f.c), "earlier stream-ordered backward") != NULL);
    CU_ASSERT_EQUAL(dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL), 0);
    CU_ASSERT_EQUAL(dash_sync(f.c), 0);
    CU_ASSERT(cudaStreamSynchronize(s) == cudaSuccess);
    CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    fixture_close(&f, "gpu-signal-errors");
}

/* A refused op's caller stream lags far behind (a 3 s producer before it) while 255 more
 * ops go out on other streams, so that the 256th after it would take its semaphore slot:
 * the late ready write of the refused op must not take that slot's word back below the new
 * op's (dashd's one stream then waited for the new op for ever, every client's ops behind
 * it) - the library skips the slot until that write has landed. Stream C's op just before
 * holds dashd's stream (a 4 s producer) until after the late write. Every stream finishes,
 * the last forward gives the in-process kernels' bits, the refusal is told once. */
static void test_dashd_gpu_late_ready_word_of_a_refused_op_does_not_stall_its_slots_next_op(void)
{
    if (!semaphores_here())
        return;
    struct fixture f;
    fixture_open(&f, "gpu-signal-late");
    unsigned char *view = dash_buffer_data(f.b), *stage = NULL, *scratch = NULL;
    CU_ASSERT_FATAL(view_load(view, inputs) == 0);
    CU_ASSERT_FATAL(cudaMalloc((void **)&stage, 256) == cudaSuccess &&
                    cudaMalloc((void **)&scratch, 256) == cudaSuccess);
    cudaStream_t sa, sb, sc;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking) == cudaSuccess &&
                    cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking) == cudaSuccess &&
                    cudaStreamCreateWithFlags(&sc, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn bad = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .block_n = 96};
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    int told = 0; /* the refusal, returned by one of the calls after it (which sends nothing) */
#define LATE_FORWARD(stream)                                                                   \
    do {                                                                                       \
        int rc_ = dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], stream, NULL); \
        if (rc_ == DASH_ESCHED && !told) {                                                     \
            told = 1;                                                                          \
            rc_ = dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], stream, NULL); \
        }                                                                                      \
        failed |= rc_ != 0;                                                                    \
    } while (0)
    int failed = gpu_test_delayed_copy(scratch, stage, 256, 3000000000ull, sa) != cudaSuccess;
    /* refused by dashd (a tile size it does not serve) before its stream waits for the word */
    failed |= dash_forward_stream(f.c, &bad, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], sa, NULL) != 0;
    for (int i = 0; i < 254 && !failed; i++)
        LATE_FORWARD(sb);
    failed |= gpu_test_delayed_copy(scratch, stage, 256, 4000000000ull, sc) != cudaSuccess;
    LATE_FORWARD(sc);
    /* the 256th op after the refused one: its slot's word, by sequence number */
    failed |= cudaMemsetAsync(view + off[OUT], 0xff, QB, sb) != cudaSuccess;
    LATE_FORWARD(sb);
#undef LATE_FORWARD
    CU_ASSERT_EQUAL(failed, 0);
    const int done = stream_done_within(sa, 20000) == 0 && stream_done_within(sc, 20000) == 0 &&
                     stream_done_within(sb, 20000) == 0;
    CU_ASSERT(done);
    if (!done) { /* dashd's stream is stuck: a fresh one for the tests after this one */
        fprintf(stderr, "\n  a stream still waited 20 s after the late ready word ");
        dashd_kill(&D);
        CU_ASSERT_EQUAL(dashd_restart(&D), 0);
        (void)stream_done_within(sb, 20000); /* the watchdog releases what it held */
    } else {
        if (!told)
            CU_ASSERT_EQUAL(dash_sync(f.c), DASH_ESCHED);
        CU_ASSERT_EQUAL(dash_sync(f.c), 0);
        unsigned char *got = malloc(QB + LB);
        CU_ASSERT_FATAL(got != NULL);
        CU_ASSERT(fetch(got, view, OUT) == 0 && fetch(got + QB, view, LSE) == 0);
        CU_ASSERT(memcmp(got, expected, QB + LB) == 0);
        free(got);
    }
    CU_ASSERT(cudaStreamDestroy(sa) == cudaSuccess && cudaStreamDestroy(sb) == cudaSuccess &&
              cudaStreamDestroy(sc) == cudaSuccess);
    (void)cudaFree(stage);
    (void)cudaFree(scratch);
    fixture_close(&f, "gpu-signal-late");
}

/* dashd dies after a stream-ordered op has run to the end (its done word written, the
 * caller's stream gone on) and before its reply went out (DASHD_TEST_EXIT_BEFORE_REPLY=1):
 * the restore finds the op done and does not send it again - a second run by the new daemon
 * would write outputs the caller has reused by then (here: filled with a marker after the
 * stream finished), at any time. The call that carries the restore reports no failure. */
static void test_dashd_gpu_op_done_before_its_daemon_died_is_not_sent_again(void)
{
    if (!semaphores_here())
        return;
    CU_ASSERT_EQUAL_FATAL(dashd_stop(&D), 0);
    CU_ASSERT_FATAL(setenv("DASHD_TEST_EXIT_BEFORE_REPLY", "1", 1) == 0);
    const int up = dashd_restart(&D);
    unsetenv("DASHD_TEST_EXIT_BEFORE_REPLY");
    CU_ASSERT_EQUAL_FATAL(up, 0);
    struct fixture f;
    fixture_open(&f, "gpu-done-unreplied");
    unsigned char *view = dash_buffer_data(f.b);
    CU_ASSERT_FATAL(view_load(view, inputs) == 0);
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    CU_ASSERT_EQUAL(dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL), 0);
    CU_ASSERT_EQUAL(stream_done_within(s, 20000), 0); /* dashd wrote the done word */
    unsigned char *got = malloc(QB + LB);
    CU_ASSERT_FATAL(got != NULL);
    CU_ASSERT(fetch(got, view, OUT) == 0 && fetch(got + QB, view, LSE) == 0);
    CU_ASSERT(memcmp(got, expected, QB + LB) == 0);
    /* it is gone, with the reply */
    CU_ASSERT_EQUAL(dashd_wait_exit(&D, 10000), 70);
    /* the caller reuses the outputs */
    CU_ASSERT(cudaMemset(view + off[OUT], 0x5a, QB) == cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&D), 0);
    CU_ASSERT_EQUAL(dash_sync(f.c), 0); /* hears of the restart, restores */
    usleep(500000);                     /* a resent op would have run by now */
    CU_ASSERT(cudaDeviceSynchronize() == cudaSuccess);
    CU_ASSERT(fetch(got, view, OUT) == 0);
    size_t kept = 0;
    for (size_t i = 0; i < QB; i++)
        kept += got[i] == 0x5a;
    CU_ASSERT_EQUAL(kept, QB);
    if (kept != QB)
        fprintf(stderr, "\n  %zu of %zu bytes of the reused output were written again", QB - kept, QB);
    check_stream(&f, 0, "stream-ordered, after the restore");
    free(got);
    CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    fixture_close(&f, "gpu-done-unreplied");
}

/* A stream that is capturing a CUDA graph is refused by the stream-ordered calls before
 * anything is queued (a graph would record the op's ready write, and dashd's stream would
 * wait for it for ever); the capture itself is left intact, and the client works after. */
static void test_dashd_gpu_stream_op_on_a_capturing_stream_is_refused(void)
{
    struct fixture f;
    fixture_open(&f, "gpu-capture");
    CU_ASSERT_FATAL(view_load(dash_buffer_data(f.b), inputs) == 0);
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    CU_ASSERT_FATAL(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    int rc = dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL);
    CU_ASSERT_EQUAL(rc, DASH_EINVAL);
    CU_ASSERT(strstr(dash_last_error(f.c), "capturing a CUDA graph") != NULL);
    cudaGraph_t graph = NULL;
    CU_ASSERT(cudaStreamEndCapture(s, &graph) == cudaSuccess); /* not invalidated */
    if (graph)
        (void)cudaGraphDestroy(graph);
    check_stream(&f, 0, "stream-ordered, after a refused capture");
    CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    fixture_close(&f, "gpu-capture");
}

/* More ops in flight than there are semaphore slots, back to back on one stream with no
 * host wait: every slot is used again, the stream keeps its order, and the last forward's
 * outputs equal the in-process kernels'. */
static void test_dashd_gpu_signal_ops_reuse_every_slot_in_order(void)
{
    struct fixture f;
    fixture_open(&f, "gpu-signal-slots");
    unsigned char *view = dash_buffer_data(f.b);
    CU_ASSERT_FATAL(view_load(view, inputs) == 0);
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    enum { N = 1000 };
    int failed = 0;
    double t0 = (double)clock();
    for (int i = 0; i < N && !failed; i++) {
        /* poison the outputs before each: only the op itself can write them back */
        failed |= cudaMemsetAsync(view + off[OUT], 0xff, QB, s) != cudaSuccess;
        failed |= dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL) != 0;
    }
    double cpu_us = ((double)clock() - t0) / CLOCKS_PER_SEC * 1e6 / N;
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT(cudaStreamSynchronize(s) == cudaSuccess);
    CU_ASSERT_EQUAL(dash_sync(f.c), 0);
    unsigned char *got = malloc(QB + LB);
    CU_ASSERT_FATAL(got != NULL);
    CU_ASSERT(fetch(got, view, OUT) == 0 && fetch(got + QB, view, LSE) == 0);
    CU_ASSERT(memcmp(got, expected, QB + LB) == 0);
    fprintf(stderr, "\n    %d forwards in flight through 256 slots; %.0f us of CPU per call ", N,
            cpu_us);
    free(got);
    CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    fixture_close(&f, "gpu-signal-slots");
}

/* The daemon dies (SIGKILL) with semaphore-ordered ops in flight behind a slow producer:
 * the library's watchdog writes their done words, so the caller's stream finishes without
 * any call into the library; the next dash_sync() says what happened; after a restart the
 * client works again. */
static void test_dashd_gpu_daemon_killed_with_signal_ops_in_flight_releases_the_stream(void)
{
    struct fixture f;
    fixture_open(&f, "gpu-signal-kill");
    unsigned char *view = dash_buffer_data(f.b), *stage = NULL;
    CU_ASSERT_FATAL(cudaMalloc((void **)&stage, view_bytes) == cudaSuccess);
    CU_ASSERT_FATAL(view_load(stage, inputs) == 0);
    /* the producer writes zeros into the gradients (and after them): the poison must land
     * after it */
    CU_ASSERT_FATAL(zero_outputs(stage, bwd_outputs, 3) == 0);
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    /* the daemon's ops wait (on the GPU) for a producer of 2 s */
    CU_ASSERT_FATAL(gpu_test_delayed_copy(view, stage, view_bytes, 2000000000ull, s) == cudaSuccess);
    int sent = 0;
    for (int i = 0; i < 20; i++)
        sent += dash_backward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                     &t[DQ], &t[DK], &t[DV], s, NULL) == 0;
    CU_ASSERT_EQUAL(sent, 20);
    usleep(200000); /* the requests have arrived */
    dashd_kill(&D);
    CU_ASSERT_EQUAL(stream_done_within(s, 15000), 0); /* released: no call of ours needed */
    CU_ASSERT(outputs_poisoned(view, bwd_outputs, 3)); /* poisoned before the release */
    int rc = dash_sync(f.c);
    CU_ASSERT(rc == DASH_EIO || rc == DASH_ETIMEDOUT);
    CU_ASSERT(strstr(dash_last_error(f.c), "went away") || strstr(dash_last_error(f.c), "answer"));
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&D), 0);
    check_stream(&f, 0, "stream-ordered after the daemon was killed and restarted");
    CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    CU_ASSERT(cudaFree(stage) == cudaSuccess);
    fixture_close(&f, "gpu-signal-kill");
}

/* A TCP port of the loopback that binds now, below Linux's ephemeral range (where a
 * reconnecting client could take it by a self-connect while no daemon listens); 0 if none. */
static unsigned free_loopback_port(void)
{
    for (unsigned i = 0; i < 200; i++) {
        const unsigned port = 20000 + ((unsigned)getpid() * 7 + i * 131) % 10000;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            return 0;
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        const int ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
        close(fd);
        if (ok)
            return port;
    }
    return 0;
}

/* The daemon is replaced (SIGKILL, a new one on the same endpoint) while a semaphore-ordered
 * forward waits on the GPU for a slow producer, and the library first hears of it in a call
 * that does not itself need the session (dash_ping): the op, re-queued for the new session,
 * is sent again before that call returns, so the caller's stream - the caller does nothing
 * but wait on it - finishes with the forward's bits within a bound. The endpoint is tcp://,
 * whose daemon the watchdog cannot watch (no credentials, no pid): before the fix the op
 * stayed in the library until the watchdog's last resort, ten client timeouts (200 s). */
static void test_dashd_gpu_restart_heard_in_a_ping_resends_stream_ops_before_it_returns(void)
{
    if (!semaphores_here())
        return;
    struct dashd_proc T;
    CU_ASSERT_EQUAL_FATAL(dashd_start(&T, "--backend cuda --session-timeout 10"), 0);
    CU_ASSERT_EQUAL(dashd_stop(&T), 0);
    /* a port picked just before each try (another process may take it in between) */
    int up = 0;
    for (int i = 0; i < 5 && !up; i++) {
        const unsigned port = free_loopback_port();
        if (!port)
            break;
        snprintf(T.endpoint, sizeof T.endpoint, "tcp://127.0.0.1:%u", port);
        up = dashd_restart(&T) == 0;
    }
    CU_ASSERT_FATAL(up);
    struct dash_connect_opts o = {.client_name = "gpu-restart-ping", .timeout_ms = 20000};
    struct dash_client *c = NULL;
    unsigned char *alloc = NULL, *stage = NULL, *host = NULL;
    struct dash_buffer *b = NULL;
    cudaStream_t s = NULL;
    int ok = dash_connect(T.endpoint, &o, &c) == 0 &&
             cudaMalloc((void **)&alloc, ALLOC_BYTES) == cudaSuccess &&
             dash_cuda_register(c, alloc + VIEW_OFF, view_bytes, &b) == 0 &&
             cudaMalloc((void **)&stage, view_bytes) == cudaSuccess &&
             cudaMallocHost((void **)&host, QB + LB) == cudaSuccess && view_load(stage, inputs) == 0 &&
             set_ff(dash_buffer_data(b), view_bytes) == cudaSuccess &&
             cudaDeviceSynchronize() == cudaSuccess &&
             cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess;
    CU_ASSERT(ok);
    if (!ok)
        goto out;
    unsigned char *view = dash_buffer_data(b);
    struct tensors ts = tensors_of(b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    /* the inputs land 3 s from now; the forward waits for them on the GPU */
    ok = gpu_test_delayed_copy(view, stage, view_bytes, 3000000000ull, s) == cudaSuccess &&
         dash_forward_stream(c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL) == 0 &&
         cudaMemcpyAsync(host, view + off[OUT], QB, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
         cudaMemcpyAsync(host + QB, view + off[LSE], LB, cudaMemcpyDeviceToHost, s) == cudaSuccess;
    CU_ASSERT(ok);
    if (!ok)
        goto out;
    usleep(200000); /* the request has arrived */
    dashd_kill(&T);
    usleep(300000);
    CU_ASSERT_EQUAL(dashd_restart(&T), 0);
    CU_ASSERT_EQUAL(dash_ping(c, 10000, NULL), 0); /* the new daemon answers: no session */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int done = stream_done_within(s, 20000) == 0; /* no call of ours meanwhile */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "\n    the stream %s %.0f ms after the ping returned ", done ? "finished" : "still waited",
            (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
    CU_ASSERT(done);
    if (!done) { /* a call of ours carries the restore through: no 200 s wait for the watchdog */
        (void)dash_sync(c);
        if (stream_done_within(s, 30000) != 0) { /* still not: leave, the daemon stopped below */
            fprintf(stderr, "\n  the stream still waited 30 s after dash_sync ");
            CU_FAIL("stream never released");
            goto out;
        }
    }
    CU_ASSERT(cudaStreamSynchronize(s) == cudaSuccess);
    const int out_same = memcmp(host, expected, QB) == 0, lse_same = memcmp(host + QB, expected + QB, LB) == 0;
    if (!out_same || !lse_same)
        fprintf(stderr, "\n  the resent forward: %s differs from the in-process kernels",
                out_same ? "lse" : "out");
    CU_ASSERT(out_same && lse_same);
    CU_ASSERT_EQUAL(dash_sync(c), 0);
out:
    if (s)
        CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    dash_close(c);
    CU_ASSERT(dashd_stop(&T) == 0);
    (void)cudaFree(stage);
    (void)cudaFreeHost(host);
    (void)cudaFree(alloc);
}

/* The daemon dies with a semaphore-ordered forward in flight and the watchdog releases it
 * (its outputs poisoned, the caller's stream gone on); then a new daemon comes up and a
 * call that does not need the session (dash_ping) hears of it: the released op, re-queued
 * for the new session with everything else in flight, is not sent again - a new daemon
 * running it would write outputs the caller may have reused by then, at any time. Its
 * outputs keep the poison, the next dash_sync() reports the failure, and the client works. */
static void test_dashd_gpu_op_released_by_the_watchdog_is_not_sent_to_the_next_daemon(void)
{
    if (!semaphores_here())
        return;
    struct fixture f;
    fixture_open(&f, "gpu-released-not-resent");
    unsigned char *view = dash_buffer_data(f.b), *stage = NULL;
    CU_ASSERT_FATAL(cudaMalloc((void **)&stage, view_bytes) == cudaSuccess);
    CU_ASSERT_FATAL(view_load(stage, inputs) == 0);
    CU_ASSERT_FATAL(zero_outputs(stage, fwd_outputs, 2) == 0); /* the producer writes zeros there */
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    CU_ASSERT_FATAL(gpu_test_delayed_copy(view, stage, view_bytes, 1000000000ull, s) == cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL), 0);
    usleep(200000); /* the request has arrived */
    dashd_kill(&D);
    CU_ASSERT_EQUAL(stream_done_within(s, 15000), 0); /* released by the watchdog */
    CU_ASSERT(outputs_poisoned(view, fwd_outputs, 2));
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&D), 0);
    /* The first ping hears of the new daemon (its answer names no session); the library
     * then says Hello and registers the buffers again, and the restore ends - sending what
     * it re-queued - while one of these calls reads the answers (with the fix, inside the
     * first). take_release(), which would have failed the op first, runs only in a
     * stream-ordered call or dash_sync(): a caller that pings, registers or polls meanwhile
     * reaches the restore's end before it. */
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(dash_ping(f.c, 10000, NULL), 0);
    usleep(500000); /* time for the new daemon to run the op, had it been sent */
    CU_ASSERT(cudaDeviceSynchronize() == cudaSuccess);
    const int kept = outputs_poisoned(view, fwd_outputs, 2);
    if (!kept)
        fprintf(stderr, "\n  the released forward was sent to the new daemon: its outputs were written ");
    CU_ASSERT(kept);
    const int rc = dash_sync(f.c);
    CU_ASSERT(cudaDeviceSynchronize() == cudaSuccess);
    CU_ASSERT(outputs_poisoned(view, fwd_outputs, 2)); /* nor sent by dash_sync's restore */
    CU_ASSERT(rc == DASH_EIO);
    CU_ASSERT(strstr(dash_last_error(f.c), "not sent again") || strstr(dash_last_error(f.c), "went away"));
    check_stream(&f, 0, "stream-ordered after the released op");
    CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    CU_ASSERT(cudaFree(stage) == cudaSuccess);
    fixture_close(&f, "gpu-released-not-resent");
}

/* Ops the daemon refuses after the library sent them (a tile size, a head count that does
 * not divide, on both ways of ordering): every output is all 0xFF once the caller's stream
 * has passed the op - although a slow producer queued before the call writes zeros into
 * them 300 ms later, so the poison is ordered after the caller's earlier work - nothing
 * else in the buffer is touched, the error is told (at once with events, at the next call
 * with semaphores), and the calls after it work. */
static void test_dashd_gpu_failed_stream_ops_poison_their_outputs_before_the_stream_goes_on(void)
{
    for (int events = 0; events < 2; events++) {
        struct fixture f;
        connect_flags = events ? DASH_CONNECT_STREAM_EVENTS : 0;
        fixture_open(&f, "gpu-poison");
        connect_flags = 0;
        unsigned char *view = dash_buffer_data(f.b), *zeros = NULL;
        CU_ASSERT_FATAL(view_load(view, inputs) == 0);
        CU_ASSERT_FATAL(cudaMalloc((void **)&zeros, QB + 256) == cudaSuccess);
        CU_ASSERT_FATAL(cudaMemset(zeros, 0, QB + 256) == cudaSuccess);
        cudaStream_t s;
        CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
        struct tensors ts = tensors_of(f.b);
        struct dash_tensor *t = ts.t;
        for (int kind = 0; kind < 3; kind++) {
            const int backward = kind == 2;
            const int *outs = backward ? bwd_outputs : fwd_outputs;
            const int n = backward ? 3 : 2;
            CU_ASSERT_FATAL(zero_outputs(view, outs, n) == 0);
            struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
            struct dash_tensor k = t[K];
            int want;
            if (kind == 0) {
                a.block_n = 128; /* the forward's kv-tiles are 64 */
                want = DASH_ESCHED;
            } else if (kind == 1) {
                k.shape[2] = 3; /* 4 query heads over 3 kv heads */
                want = DASH_ESHAPE;
            } else {
                a.block_n = 96;
                want = DASH_ESCHED;
            }
            for (int i = 0; i < n; i++) /* zeros again, 300 ms from now, on the stream */
                CU_ASSERT(gpu_test_delayed_copy(view + off[outs[i]], zeros, slot_bytes[outs[i]],
                                                300000000ull, s) == cudaSuccess);
            int rc = backward ? dash_backward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT],
                                                     &t[LSE], &t[DOUT], &t[DQ], &t[DK], &t[DV],
                                                     s, NULL)
                              : dash_forward_stream(f.c, &a, &t[Q], &k, &t[V], &t[OUT], &t[LSE],
                                                    s, NULL);
            CU_ASSERT_EQUAL(rc, events ? want : 0);
            CU_ASSERT_EQUAL(stream_done_within(s, 10000), 0); /* released, not hung */
            CU_ASSERT(outputs_poisoned(view, outs, n));
            if (!events) { /* told by the next call, which is not sent; or by dash_sync */
                a = (struct dash_attn){.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
                if (kind == 1) {
                    CU_ASSERT_EQUAL(dash_sync(f.c), want);
                } else {
                    CU_ASSERT_EQUAL(dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT],
                                                        &t[LSE], s, NULL), want);
                }
                CU_ASSERT(strstr(dash_last_error(f.c), backward ? "earlier stream-ordered backward"
                                                                : "earlier stream-ordered forward") != NULL);
            }
        }
        /* and the next op runs, writing real values over the poison */
        struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
        CU_ASSERT_EQUAL(dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL), 0);
        CU_ASSERT(cudaStreamSynchronize(s) == cudaSuccess);
        CU_ASSERT_EQUAL(dash_sync(f.c), 0);
        unsigned char *got = malloc(QB + LB);
        CU_ASSERT_FATAL(got != NULL);
        CU_ASSERT(fetch(got, view, OUT) == 0 && fetch(got + QB, view, LSE) == 0);
        CU_ASSERT(memcmp(got, expected, QB + LB) == 0);
        free(got);
        CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
        CU_ASSERT(cudaFree(zeros) == cudaSuccess);
        fixture_close(&f, "gpu-poison");
    }
}

/* An output that reaches past its buffer is refused by the call itself (DASH_EBOUNDS,
 * naming the tensor), before anything is queued: no poison is written anywhere (the other
 * output keeps its zeros), and the client goes on. */
static void test_dashd_gpu_stream_op_output_past_its_buffer_is_refused_before_queueing(void)
{
    for (int events = 0; events < 2; events++) {
        struct fixture f;
        connect_flags = events ? DASH_CONNECT_STREAM_EVENTS : 0;
        fixture_open(&f, "gpu-poison-bounds");
        connect_flags = 0;
        unsigned char *view = dash_buffer_data(f.b);
        CU_ASSERT_FATAL(view_load(view, inputs) == 0);
        CU_ASSERT_FATAL(zero_outputs(view, fwd_outputs, 2) == 0);
        struct tensors ts = tensors_of(f.b);
        struct dash_tensor *t = ts.t;
        struct dash_tensor out = t[OUT];
        out.offset = view_bytes - QB / 2;
        struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
        CU_ASSERT_EQUAL(dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &out, &t[LSE], 0, NULL),
                        DASH_EBOUNDS);
        CU_ASSERT(strstr(dash_last_error(f.c), "out:") != NULL);
        CU_ASSERT(cudaDeviceSynchronize() == cudaSuccess);
        unsigned char *h = malloc(LB);
        CU_ASSERT_FATAL(h != NULL);
        CU_ASSERT(fetch(h, view, LSE) == 0);
        int zero = 1;
        for (size_t i = 0; i < LB; i++)
            zero &= h[i] == 0;
        CU_ASSERT(zero);
        free(h);
        CU_ASSERT_EQUAL(dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], 0, NULL), 0);
        CU_ASSERT(cudaDeviceSynchronize() == cudaSuccess);
        CU_ASSERT_EQUAL(dash_sync(f.c), 0);
        fixture_close(&f, "gpu-poison-bounds");
    }
}

/* A per-client limit refuses the op after validation (a daemon with --limit-request-bytes
 * below the op's size): the semaphore-ordered forward's out and lse are all 0xFF when the
 * stream has passed it, and the error (DASH_ELIMIT's family: whatever the limit says) is
 * told by dash_sync. */
static void test_dashd_gpu_op_refused_by_a_client_limit_poisons_its_outputs(void)
{
    struct dashd_proc L;
    CU_ASSERT_EQUAL_FATAL(dashd_start(&L, "--backend cuda --limit-request-bytes 64K"), 0);
    struct dash_connect_opts o = {.client_name = "gpu-poison-limit", .timeout_ms = 20000};
    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_connect(L.endpoint, &o, &c), 0);
    unsigned char *alloc = NULL;
    CU_ASSERT_FATAL(cudaMalloc((void **)&alloc, ALLOC_BYTES) == cudaSuccess);
    struct dash_buffer *b = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_cuda_register(c, alloc + VIEW_OFF, view_bytes, &b), 0);
    unsigned char *view = dash_buffer_data(b);
    CU_ASSERT_FATAL(view_load(view, inputs) == 0);
    CU_ASSERT_FATAL(zero_outputs(view, fwd_outputs, 2) == 0);
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = tensors_of(b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    CU_ASSERT_EQUAL(dash_forward_stream(c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL), 0);
    CU_ASSERT_EQUAL(stream_done_within(s, 10000), 0);
    CU_ASSERT(outputs_poisoned(view, fwd_outputs, 2));
    int rc = dash_sync(c);
    CU_ASSERT(rc < 0);
    fprintf(stderr, "\n    refused: %s (%s) ", dash_errname(rc), dash_last_error(c));
    CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    CU_ASSERT_EQUAL(dash_buffer_free(c, b), 0);
    dash_close(c);
    CU_ASSERT(cudaFree(alloc) == cudaSuccess);
    CU_ASSERT_EQUAL(dashd_stop(&L), 0);
}

/* The configuration an OpResult reports can be sent back and reproduces the bits: the v2
 * backward reports 128-row kv-tiles, which the daemon must accept; 64 also runs; other
 * sizes are DASH_ESCHED. */
static void test_dashd_gpu_reported_config_reproduces_the_bits(void)
{
    struct fixture f;
    fixture_open(&f, "gpu-config");
    CU_ASSERT_FATAL(view_load(dash_buffer_data(f.b), inputs) == 0);
    struct tensors ts = tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    struct dash_result r, r2;
    CU_ASSERT_EQUAL_FATAL(dash_forward(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], NULL), 0);
    unsigned char *g1 = malloc(QB), *g2 = malloc(QB);
    CU_ASSERT_EQUAL_FATAL(dash_backward(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                        &t[DQ], &t[DK], &t[DV], &r), 0);
    CU_ASSERT_FATAL(fetch(g1, dash_buffer_data(f.b), DQ) == 0);
    struct dash_attn again = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL,
                              .schedule = r.schedule, .wave = r.wave, .block_m = r.block_m,
                              .block_n = r.block_n};
    CU_ASSERT_FATAL(poison_grads(dash_buffer_data(f.b)) == 0);
    CU_ASSERT_EQUAL(dash_backward(f.c, &again, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                  &t[DQ], &t[DK], &t[DV], &r2), 0);
    CU_ASSERT_FATAL(fetch(g2, dash_buffer_data(f.b), DQ) == 0);
    CU_ASSERT(memcmp(g1, g2, QB) == 0);
    CU_ASSERT_EQUAL(r2.block_n, r.block_n);
    again.block_n = 64;
    CU_ASSERT_EQUAL(dash_backward(f.c, &again, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                  &t[DQ], &t[DK], &t[DV], &r2), 0);
    CU_ASSERT_EQUAL(r2.block_n, 64);
    again.block_n = 96;
    CU_ASSERT_EQUAL(dash_backward(f.c, &again, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                  &t[DQ], &t[DK], &t[DV], NULL), DASH_ESCHED);
    again.block_n = 128;
    CU_ASSERT_EQUAL(dash_forward(f.c, &again, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], NULL),
                    DASH_ESCHED); /* the forward's kv-tiles are 64 */
    free(g1);
    free(g2);
    fixture_close(&f, "gpu-config");
}

/* Every malformed RegisterEvents and EventSync gets a clear error, a good one works, and
 * the daemon goes on serving. */
static void test_dashd_gpu_event_sync_errors_are_replies(void)
{
    char uuid[48], msg[256];
    uuid_of_device0(uuid);
    struct fixture f;
    fixture_open(&f, "gpu-events");
    CU_ASSERT_FATAL(view_load(f.alloc + VIEW_OFF, inputs) == 0);
    cudaIpcMemHandle_t mh;
    CU_ASSERT_FATAL(cudaIpcGetMemHandle(&mh, f.alloc) == cudaSuccess);
    struct raw_client *r = raw_connect(D.endpoint);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL_FATAL(raw_hello(r, 1), 0);
    uint64_t whole = raw_register_id(r, &mh, uuid, ALLOC_BYTES);
    CU_ASSERT_FATAL(whole != 0);

    enum { NEV = 3, MANY = EVRING_TEST_MANY };
    cudaEvent_t ev[NEV];
    static unsigned char h[MANY][64];
    size_t lens[MANY];
    for (int i = 0; i < MANY; i++)
        lens[i] = 64;
    for (int i = 0; i < NEV; i++) {
        cudaIpcEventHandle_t eh;
        CU_ASSERT_FATAL(cudaEventCreateWithFlags(&ev[i], cudaEventInterprocess |
                                                             cudaEventDisableTiming) == cudaSuccess);
        CU_ASSERT_FATAL(cudaIpcGetEventHandle(&eh, ev[i]) == cudaSuccess);
        memcpy(h[i], &eh, 64);
    }
    int64_t first = 0;
    CU_ASSERT_EQUAL(raw_events(r, h, lens, 0, uuid, msg, sizeof msg, &first), DASH_EINVAL);
    size_t short_len = 63;
    CU_ASSERT_EQUAL(raw_events(r, h, &short_len, 1, uuid, msg, sizeof msg, &first), DASH_EINVAL);
    CU_ASSERT(strstr(msg, "bytes") != NULL);
    CU_ASSERT_EQUAL(raw_events(r, h, lens, 1, "GPU-00000000-0000-0000-0000-000000000000", msg,
                               sizeof msg, &first), DASH_ENOTSUP);
    CU_ASSERT_EQUAL(raw_events(r, h, lens, 1, NULL, msg, sizeof msg, &first), DASH_EINVAL);
    struct tu_rng rng;
    tu_rng_init(&rng, seed ^ 0xe7e7);
    for (int i = NEV; i < MANY; i++)
        for (int j = 0; j < 64; j++)
            h[i][j] = (unsigned char)tu_next(&rng);
    CU_ASSERT_EQUAL(raw_events(r, &h[NEV], lens, 1, uuid, msg, sizeof msg, &first), DASH_EINVAL);
    CU_ASSERT(strstr(msg, "cannot open event handle") != NULL);
    CU_ASSERT_EQUAL(raw_events(r, h, lens, MANY, uuid, msg, sizeof msg, &first), DASH_ENOSPC);
    /* good ones: indices in registration order */
    CU_ASSERT_EQUAL(raw_events(r, h, lens, 2, uuid, msg, sizeof msg, &first), 0);
    CU_ASSERT_EQUAL(first, 0);
    CU_ASSERT_EQUAL(raw_events(r, &h[2], lens, 1, uuid, msg, sizeof msg, &first), 0);
    CU_ASSERT_EQUAL(first, 2);

    int has_run = 0;
    Dash__EventSync sync = DASH__EVENT_SYNC__INIT;
    sync.has_wait_event = 1;
    sync.wait_event = 3;
    CU_ASSERT_EQUAL(raw_forward_sync(r, whole, &sync, msg, sizeof msg, &has_run), DASH_ENOENT);
    CU_ASSERT(strstr(msg, "not registered") != NULL);
    sync.wait_event = 0;
    sync.has_record_event = 1;
    sync.record_event = 1000;
    CU_ASSERT_EQUAL(raw_forward_sync(r, whole, &sync, msg, sizeof msg, &has_run), DASH_ENOENT);
    sync.has_record_event = 0;
    sync.has_reply_when_queued = sync.reply_when_queued = 1;
    CU_ASSERT_EQUAL(raw_forward_sync(r, whole, &sync, msg, sizeof msg, &has_run), DASH_EINVAL);
    CU_ASSERT(strstr(msg, "record_event") != NULL);
    /* a good one: answered when queued (no run time yet), the record reaches our event */
    CU_ASSERT_FATAL(cudaEventRecord(ev[0], 0) == cudaSuccess);
    sync.has_record_event = 1;
    sync.record_event = 1;
    CU_ASSERT_EQUAL(raw_forward_sync(r, whole, &sync, msg, sizeof msg, &has_run), 0);
    CU_ASSERT(!has_run);
    CU_ASSERT(cudaEventSynchronize(ev[1]) == cudaSuccess);
    /* the same without reply_when_queued: answered when done */
    sync.has_reply_when_queued = 0;
    CU_ASSERT_EQUAL(raw_forward_sync(r, whole, &sync, msg, sizeof msg, &has_run), 0);
    CU_ASSERT(has_run);
    CU_ASSERT(cudaEventQuery(ev[1]) == cudaSuccess);

    /* events order device work only: a shared-memory op that names them is refused */
    char shm_name[64];
    snprintf(shm_name, sizeof shm_name, "/dash-gpu-events-%d", (int)getpid());
    int fd = shm_open(shm_name, O_CREAT | O_EXCL | O_RDWR, 0600);
    CU_ASSERT_FATAL(fd >= 0 && ftruncate(fd, (off_t)view_bytes) == 0);
    close(fd);
    Dash__RegisterBuffer rb = DASH__REGISTER_BUFFER__INIT;
    rb.size = view_bytes;
    rb.shm_name = shm_name;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 7004;
    req.body_case = DASH__REQUEST__BODY_REGISTER_BUFFER;
    req.register_buffer = &rb;
    Dash__Reply *rep = raw_call(r, &req, 10000);
    CU_ASSERT_FATAL(rep && rep->code == 0 && rep->has_buffer_id);
    uint64_t shm_id = rep->buffer_id;
    wire_free_reply(rep);
    CU_ASSERT_EQUAL(raw_forward_sync(r, shm_id, &sync, msg, sizeof msg, &has_run), DASH_EINVAL);
    CU_ASSERT(strstr(msg, "device buffers") != NULL);

    /* semaphores: a fail word that is misaligned, one of the other two, or outside the
     * buffer is refused before any word is written (nothing waits on these) */
    Dash__EventSync sig = DASH__EVENT_SYNC__INIT;
    sig.has_signal_buffer = sig.has_ready_offset = sig.has_done_offset = sig.has_signal_seq = 1;
    sig.signal_buffer = whole;
    sig.ready_offset = 0;
    sig.done_offset = 8;
    sig.signal_seq = 1;
    sig.has_fail_offset = 1;
    const uint64_t bad_fail[] = {4, 0, 8, ALLOC_BYTES, UINT64_MAX - 7};
    for (size_t i = 0; i < sizeof bad_fail / sizeof bad_fail[0]; i++) {
        sig.fail_offset = bad_fail[i];
        msg[0] = '\0';
        CU_ASSERT_EQUAL(raw_forward_sync(r, whole, &sig, msg, sizeof msg, &has_run), DASH_EINVAL);
        CU_ASSERT(strstr(msg, "fail word") != NULL);
    }

    raw_goodbye(r);
    raw_close(r);
    /* the daemon has dropped the session (and closed its copies of the events) by the
     * time it answers anything after the goodbye */
    CU_ASSERT_EQUAL(raw_ping_endpoint(D.endpoint, 5000), 0);
    for (int i = 0; i < NEV; i++)
        CU_ASSERT(cudaEventDestroy(ev[i]) == cudaSuccess);
    shm_unlink(shm_name);
    check_bits(&f, "after the event errors");
    fixture_close(&f, "gpu-events");
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
    CU_ASSERT(dashd_alive(&D));
    CU_ASSERT_EQUAL(raw_ping_endpoint(D.endpoint, 10000), 0);
    struct fixture f;
    fixture_open(&f, "gpu-after-kill");
    check_bits(&f, "after a client was killed");
    fixture_close(&f, "gpu-after-kill");
    CU_ASSERT(dashd_alive(&D));
}

static void test_dashd_gpu_client_recovers_from_daemon_restart(void)
{
    struct fixture f;
    fixture_open(&f, "gpu-restart");
    check_bits(&f, "before the restart");
    dashd_kill(&D); /* a crash: nothing closed cleanly */
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&D), 0);
    check_bits(&f, "after a SIGKILL and restart");
    /* the event ring too: made now, lost with the daemon, registered again by itself */
    check_stream(&f, 0, "stream-ordered, before the second restart");
    CU_ASSERT_EQUAL(dashd_stop(&D), 0); /* SIGTERM: closes the mapping it reopened */
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&D), 0);
    check_bits(&f, "after a SIGTERM and restart");
    check_stream(&f, 0, "stream-ordered, after the restart");
    fixture_close(&f, "gpu-restart");
}

/* Whether the file at path holds a line containing needle. */
static int log_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[2048];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
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
    struct dash_client *probe = connect_client("gpu-lost-probe");
    CU_ASSERT_PTR_NOT_NULL_FATAL(probe);
    int mps = dash_stats(probe, &st) == 0 && strcmp(st->gpu_sharing, "mps") == 0;
    dash_stats_free(st);
    dash_close(probe);
    if (mps)
        return;
    CU_ASSERT_EQUAL_FATAL(dashd_stop(&D), 0);
    CU_ASSERT_FATAL(setenv("DASHD_TEST_DEVICE_FAULT", "1", 1) == 0);
    const int up = dashd_restart(&D);
    unsetenv("DASHD_TEST_DEVICE_FAULT");
    CU_ASSERT_EQUAL_FATAL(up, 0);
    struct fixture f;
    fixture_open(&f, "gpu-lost");
    unsigned char *got = malloc(result_bytes());
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    char why[128] = "";
    CU_ASSERT_EQUAL(run_through_daemon(f.c, f.b, inputs, got, why, sizeof why), DASH_EIO);
    CU_ASSERT(strstr(why, "dash_forward") != NULL);
    /* it exits by itself, with its status */
    const int status = dashd_wait_exit(&D, 20000);
    CU_ASSERT_EQUAL(status, 75);
    const int said = log_has(D.log_path, "the GPU context is lost") &&
                     log_has(D.log_path, "exit status 75");
    CU_ASSERT(said);
    if (status != 75 || !said)
        fprintf(stderr, "\n  dashd's log: %s", D.log_path);
    /* what a service manager does next; the client carries on by itself */
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&D), 0);
    check_bits(&f, "after the lost context's restart");
    free(got);
    fixture_close(&f, "gpu-lost");
}

/* A client process killed while dashd's GPU queue waits for its stream (a stream-ordered
 * forward's ready word queued behind a minute-long kernel, which the kill discards): dashd
 * writes the word itself once it sees the process gone, so another client, in a process
 * of its own, gets its bits (synchronous and stream-ordered calls) within a bound instead
 * of waiting behind it for ever. GPUs without 64-bit stream memory operations order
 * stream calls by events instead: nothing to check there. */
static void stalled_client_holds_nobody_up(int fresh)
{
    if (!semaphores_here())
        return;
    char audit[96] = "";
    if (fresh) { /* a daemon that has run nothing yet, auditing: the stalled op is its first */
        CU_ASSERT_EQUAL(dashd_stop(&D), 0);
        snprintf(audit, sizeof audit, "/tmp/dashd-gpu-stall-audit-%d.log", (int)getpid());
        unlink(audit);
        snprintf(D.extra, sizeof D.extra, "--backend cuda --session-timeout 10 --audit %s", audit);
        CU_ASSERT_EQUAL_FATAL(dashd_restart(&D), 0);
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
    CU_ASSERT(dashd_alive(&D));
    if (fresh) { /* back to the suite's daemon */
        CU_ASSERT_EQUAL(dashd_stop(&D), 0);
        unlink(audit);
        snprintf(D.extra, sizeof D.extra, "--backend cuda --session-timeout 10");
        CU_ASSERT_EQUAL(dashd_restart(&D), 0);
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

/* The CPU backend refuses CUDA memory; libdash passes the daemon's verdict on. */
/* Head dims 96, 256, 80 and 200 through dashd give the bits of the kernels in this process
 * (96: the 128 kernels on widened copies; 256: v3's on sm_90, else v1's; 80 and 200: the
 * 128 and 256 kernels on widened copies), forward and a shift backward; head dims 84 (not a
 * multiple of 8), 24 and 264 are refused with a reason, and the session goes on. */
static void test_dashd_gpu_head_dims_96_and_256_match_in_process(void)
{
    struct dash_client *c = connect_client("gpu-hdims");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct tu_rng r;
    tu_rng_init(&r, seed ^ 0x96256);
    const int32_t dims[] = {96, 256, 80, 200};
    for (int di = 0; di < 4; di++) {
        const int32_t d = dims[di];
        /* q k v out dout dq dk dv, then lse; q-shaped slots have HQ heads, the others HKV */
        const int heads[8] = {HQ, HKV, HKV, HQ, HQ, HQ, HKV, HKV};
        size_t at[9], total = 0;
        for (int i = 0; i < 9; i++) {
            at[i] = total;
            total += i < 8 ? (size_t)SEQ * heads[i] * d * ES : LB;
            total = (total + 255) & ~(size_t)255;
        }
        unsigned char *host = malloc(total), *got = malloc(total), *want = malloc(total);
        unsigned char *mem[2] = {NULL, NULL};
        CU_ASSERT_FATAL(host && got && want);
        memset(host, 0xff, total); /* outputs poisoned */
        for (int i = 0; i < 5; i++)
            if (i != 3)
                tu_fill(host + at[i], DTYPE_BF16, (int64_t)SEQ * heads[i] * d, &r, 1.0);
        for (int w = 0; w < 2; w++) {
            CUDA_OK(cudaMalloc((void **)&mem[w], total));
            CUDA_OK(cudaMemcpy(mem[w], host, total, cudaMemcpyHostToDevice));
        }
        /* in process */
        struct attn_problem p = {.batch = 1, .seqlen_q = SEQ, .seqlen_k = SEQ, .heads_q = HQ, .heads_kv = HKV, .head_dim = d, .dtype = DTYPE_BF16, .mask = SCHED_MASK_CAUSAL, .scale = (float)(1.0 / sqrt((double)d))};
        struct attn_tensor e[8];
        for (int i = 0; i < 8; i++)
            e[i] = attn_dense(mem[0] + at[i], SEQ, heads[i], d);
        float *lse = (float *)(void *)(mem[0] + at[8]);
        struct attn_config cfg = {SCHED_SHIFT, 0, 0, 0, 0};
        CU_ASSERT_EQUAL_FATAL(cuattn_forward(ca, &p, NULL, e[3], lse, e[0], e[1], e[2], NULL), 0);
        CU_ASSERT_EQUAL_FATAL(cuattn_backward(ca, &p, &cfg, 0, e[5], e[6], e[7], e[0], e[1], e[2],
                                              e[3], lse, e[4], NULL),
                              0);
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(want, mem[0], total, cudaMemcpyDeviceToHost));
        /* through dashd */
        struct dash_buffer *b = NULL;
        CU_ASSERT_EQUAL_FATAL(dash_cuda_register(c, mem[1], total, &b), 0);
        struct dash_tensor t[9];
        for (int i = 0; i < 8; i++)
            t[i] = dash_tensor_dense(b, at[i], 1, SEQ, heads[i], d);
        t[8] = dash_tensor_lse(b, at[8], 1, HQ, SEQ);
        struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL,
                              .schedule = DASH_SCHED_SHIFT};
        struct dash_result res;
        int rc = dash_forward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], &res);
        if (rc == 0)
            rc = dash_backward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], &t[4], &t[5], &t[6],
                               &t[7], &res);
        if (rc)
            fprintf(stderr, "\n  head dim %d: %s: %s", d, dash_errname(rc), dash_last_error(c));
        CU_ASSERT_EQUAL(rc, 0);
        /* the tiles reported: 64 at 256 (v3's or v1's); at 96, 80 and 200 those of the kernels
         * they run on */
        CU_ASSERT_EQUAL(res.block_n, cuattn_bwd_block_n(ca, &p));
        CUDA_OK(cudaMemcpy(got, mem[1], total, cudaMemcpyDeviceToHost));
        CU_ASSERT(memcmp(got, want, total) == 0);
        for (size_t i = 0; i < total; i++)
            if (got[i] != want[i]) {
                int slot = 8;
                while (slot > 0 && at[slot] > i)
                    slot--;
                fprintf(stderr, "\n  head dim %d: first difference at byte %zu (tensor %d of q k v "
                        "out dout dq dk dv lse)", d, i, slot);
                break;
            }
        /* and the outputs were written: no 0xff poison left in out */
        CU_ASSERT(got[at[3]] != 0xff || got[at[3] + 1] != 0xff);
        CU_ASSERT_EQUAL(dash_buffer_free(c, b), 0);
        for (int w = 0; w < 2; w++)
            CUDA_OK(cudaFree(mem[w]));
        free(host);
        free(got);
        free(want);
    }
    /* head dims the kernels do not serve: error replies that say which ones they do (84: not
     * a multiple of 8; 24 and 264: outside 32..256, refused at validation); then a served
     * call on the same session goes through */
    const int32_t refused[] = {84, 24, 264, 64};
    unsigned char *m = NULL;
    const size_t tb = (size_t)SEQ * HQ * 264 * ES;
    CUDA_OK(cudaMalloc((void **)&m, 5 * tb));
    CUDA_OK(cudaMemset(m, 0, 5 * tb));
    struct dash_buffer *b = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_cuda_register(c, m, 5 * tb, &b), 0);
    for (int i = 0; i < 4; i++) {
        const int32_t d = refused[i];
        struct dash_tensor q = dash_tensor_dense(b, 0, 1, SEQ, HQ, d);
        struct dash_tensor k = dash_tensor_dense(b, tb, 1, SEQ, HQ, d);
        struct dash_tensor v = dash_tensor_dense(b, 2 * tb, 1, SEQ, HQ, d);
        struct dash_tensor o = dash_tensor_dense(b, 3 * tb, 1, SEQ, HQ, d);
        struct dash_tensor l = dash_tensor_lse(b, 4 * tb, 1, HQ, SEQ);
        struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
        struct dash_result res;
        const int rc = dash_forward(c, &a, &q, &k, &v, &o, &l, &res);
        if (d == 64) {
            CU_ASSERT_EQUAL(rc, 0); /* the daemon goes on serving this client */
            continue;
        }
        CU_ASSERT_EQUAL(rc, DASH_EHEADDIM);
        const char *why = dash_last_error(c);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, d == 84 ? "multiples of 8" : "32"));
        if (rc != DASH_EHEADDIM)
            fprintf(stderr, "\n  head dim %d: %s: %s", d, dash_errname(rc), why);
    }
    CU_ASSERT_EQUAL(dash_buffer_free(c, b), 0);
    CUDA_OK(cudaFree(m));
    cuattn_free(ca);
    dash_close(c);
}

/* Windows, softcap and packed batches run on the CUDA backend at head dim 64 (their bits
 * are checked in suite gpu_dashd_varlen), from device buffers; at head dim 256, which their
 * kernels lack, each is an error reply that says so, and the daemon goes on serving. */
static void test_dashd_gpu_windows_softcap_and_packed_batches_run_and_other_dims_are_refused(void)
{
    struct fixture f;
    fixture_open(&f, "gpu-issue17");
    struct dash_tensor t[SLOTS], w[SLOTS];
    for (int s = 0; s < SLOTS; s++) {
        int kv = s == K || s == V || s == DK || s == DV;
        t[s] = s == LSE ? dash_tensor_lse(f.b, off[s], 1, HQ, SEQ)
                        : dash_tensor_dense(f.b, off[s], 1, SEQ, kv ? HKV : HQ, HD);
        /* head dim 256: fewer rows in the same bytes */
        w[s] = s == LSE ? dash_tensor_lse(f.b, off[s], 1, HQ, 37)
                        : dash_tensor_dense(f.b, off[s], 1, 37, kv ? HKV : HQ, 256);
    }
    struct dash_result r;
    struct dash_attn win = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .window = 1,
                            .window_left = 64, .window_right = 0};
    CU_ASSERT_EQUAL(dash_forward(f.c, &win, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &r), 0);
    CU_ASSERT_STRING_EQUAL(r.backend, "cuda");
    CU_ASSERT_EQUAL(dash_forward(f.c, &win, &w[Q], &w[K], &w[V], &w[OUT], &w[LSE], NULL),
                    DASH_EHEADDIM);
    CU_ASSERT_PTR_NOT_NULL(strstr(dash_last_error(f.c), "sliding windows"));
    CU_ASSERT_PTR_NOT_NULL(strstr(dash_last_error(f.c), "not 256"));
    struct dash_attn cap = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .softcap = 30.0f};
    CU_ASSERT_EQUAL(dash_forward(f.c, &cap, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], NULL), 0);
    CU_ASSERT_EQUAL(dash_backward(f.c, &cap, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                  &t[DQ], &t[DK], &t[DV], &r), 0);
    CU_ASSERT_STRING_EQUAL(r.backend, "cuda");
    CU_ASSERT_EQUAL(dash_backward(f.c, &cap, &w[Q], &w[K], &w[V], &w[OUT], &w[LSE], &w[DOUT],
                                  &w[DQ], &w[DK], &w[DV], NULL), DASH_EHEADDIM);
    CU_ASSERT_PTR_NOT_NULL(strstr(dash_last_error(f.c), "softcap"));
    /* a packed batch: offsets in shared memory, tensors (total, heads, dim) on the device */
    struct dash_buffer *sb = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(f.c, 4096, &sb), 0);
    int32_t *cu = dash_buffer_data(sb);
    cu[0] = 0, cu[1] = 77, cu[2] = SEQ;
    struct dash_attn pk = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .max_seqlen_q = SEQ,
                           .max_seqlen_k = SEQ};
    pk.cu_seqlens_q = (struct dash_tensor){.buf = sb, .offset = 0, .ndim = 1, .shape = {3}};
    pk.cu_seqlens_k = pk.cu_seqlens_q;
    struct dash_tensor p3[SLOTS];
    for (int s = 0; s < SLOTS; s++) {
        int kv = s == K || s == V || s == DK || s == DV;
        p3[s] = (struct dash_tensor){.buf = f.b, .offset = off[s], .ndim = s == LSE ? 2 : 3};
        if (s == LSE) {
            p3[s].shape[0] = HQ, p3[s].shape[1] = SEQ;
        } else {
            p3[s].shape[0] = SEQ, p3[s].shape[1] = kv ? HKV : HQ, p3[s].shape[2] = HD;
        }
    }
    CU_ASSERT_EQUAL(dash_forward(f.c, &pk, &p3[Q], &p3[K], &p3[V], &p3[OUT], &p3[LSE], &r), 0);
    CU_ASSERT_EQUAL(dash_backward(f.c, &pk, &p3[Q], &p3[K], &p3[V], &p3[OUT], &p3[LSE], &p3[DOUT],
                                  &p3[DQ], &p3[DK], &p3[DV], &r), 0);
    CU_ASSERT_STRING_EQUAL(r.backend, "cuda");
    /* and a plain request still runs */
    struct dash_attn plain = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    CU_ASSERT_EQUAL(dash_forward(f.c, &plain, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], NULL), 0);
    CU_ASSERT_EQUAL(dash_buffer_free(f.c, sb), 0);
    CU_ASSERT_EQUAL(dash_buffer_free(f.c, f.b), 0);
    CU_ASSERT(cudaFree(f.alloc) == cudaSuccess);
    dash_close(f.c);
}

static void test_dashd_gpu_cpu_backend_refuses_cuda_buffers(void)
{
    struct dashd_proc cpu;
    CU_ASSERT_EQUAL_FATAL(dashd_start(&cpu, "--backend cpu --threads 2"), 0);
    struct dash_connect_opts o = {.client_name = "gpu-on-cpu", .timeout_ms = 10000};
    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_connect(cpu.endpoint, &o, &c), 0);
    unsigned char *alloc = NULL;
    CU_ASSERT_FATAL(cudaMalloc((void **)&alloc, ALLOC_BYTES) == cudaSuccess);
    struct dash_buffer *b = NULL;
    CU_ASSERT_EQUAL(dash_cuda_register(c, alloc + VIEW_OFF, 4096, &b), DASH_ENOTSUP);
    CU_ASSERT_EQUAL(dash_cuda_register(c, (void *)inputs, 4096, &b), DASH_EINVAL); /* host */
    dash_close(c);
    CU_ASSERT(cudaFree(alloc) == cudaSuccess);
    CU_ASSERT_EQUAL(dashd_stop(&cpu), 0);
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
