// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_dashd_stream_gpu.c - suite gpu_dashd's stream-ordered ops (dash_forward_stream,
 * dash_backward_stream): ordered on the caller's stream by semaphores (the default where
 * the GPU has 64-bit stream memory operations) and by events; the poison of an op that
 * fails, and when the failure is told; the semaphore slots, reused in order, and a ready
 * word that lands late; a stream capturing a graph; per-client limits; and ops in flight
 * when dashd dies: released by the library's watchdog, restored to a new daemon, or done
 * before the old one died. The fixture and the registration are test_dashd_gpu.c's
 * (gpu_dashd_int.h).
 */
#include "gpu_check.h"
#include "gpu_dashd_int.h"
#include "gpu_delay.h"

#include "../harness.h"
#include "../../client/dash.h"

#include <CUnit/CUnit.h>
#include <cuda.h> /* CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Stream-ordered calls: the daemon's kernels wait for a producer still running on the
 * caller's stream (the call returns before it ends), the caller's later work waits for
 * the daemon's; bits equal the in-process kernels', and synchronous calls mix freely. */
void test_dashd_gpu_stream_ops_follow_the_callers_stream(void)
{
    /* both ways of ordering: semaphores (the default on this GPU) and events */
    for (int events = 0; events < 2; events++) {
        struct fixture f;
        gpu_dashd_connect_flags = events ? DASH_CONNECT_STREAM_EVENTS : 0;
        gpu_dashd_fixture_open(&f, "gpu-stream");
        gpu_dashd_connect_flags = 0;
        gpu_dashd_check_stream(&f, 300000000ull, "stream-ordered behind a 300 ms producer");
        gpu_dashd_check_bits(&f, "synchronous after stream-ordered");
        gpu_dashd_check_stream(&f, 0, "stream-ordered again");
        CU_ASSERT_EQUAL(dash_sync(f.c), 0);
        gpu_dashd_fixture_close(&f, "gpu-stream");
    }
}

/* ---- the poison of failed stream-ordered ops ------------------------------------------- */

static const int fwd_outputs[] = {OUT, LSE}, bwd_outputs[] = {DQ, DK, DV};

/* Zero each output of `slots` and the 256 bytes after it (synchronously). 0 or -1. */
static int zero_outputs(unsigned char *view, const int *slots, int n)
{
    for (int i = 0; i < n; i++)
        if (cudaMemset(view + gpu_dashd_off[slots[i]], 0, slot_bytes[slots[i]] + 256) != cudaSuccess)
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
        if (!h || cudaMemcpy(h, view + gpu_dashd_off[slots[i]], bytes + 256, cudaMemcpyDeviceToHost) !=
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
int gpu_dashd_semaphores_here(void)
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
void test_dashd_gpu_signal_op_failure_releases_the_stream_and_is_told_later(void)
{
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-signal-errors");
    CU_ASSERT_FATAL(gpu_dashd_view_load(dash_buffer_data(f.b), gpu_dashd_inputs) == 0);
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = gpu_dashd_tensors_of(f.b);
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
    gpu_dashd_fixture_close(&f, "gpu-signal-errors");
}

/* A refused op's caller stream lags far behind (a 3 s producer before it) while 255 more
 * ops go out on other streams, so that the 256th after it would take its semaphore slot:
 * the late ready write of the refused op must not take that slot's word back below the new
 * op's (dashd's one stream then waited for the new op for ever, every client's ops behind
 * it) - the library skips the slot until that write has landed. Stream C's op just before
 * holds dashd's stream (a 4 s producer) until after the late write. Every stream finishes,
 * the last forward gives the in-process kernels' bits, the refusal is told once. */
void test_dashd_gpu_late_ready_word_of_a_refused_op_does_not_stall_its_slots_next_op(void)
{
    if (!gpu_dashd_semaphores_here())
        return;
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-signal-late");
    unsigned char *view = dash_buffer_data(f.b), *stage = NULL, *scratch = NULL;
    CU_ASSERT_FATAL(gpu_dashd_view_load(view, gpu_dashd_inputs) == 0);
    CU_ASSERT_FATAL(cudaMalloc((void **)&stage, 256) == cudaSuccess &&
                    cudaMalloc((void **)&scratch, 256) == cudaSuccess);
    cudaStream_t sa, sb, sc;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking) == cudaSuccess &&
                    cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking) == cudaSuccess &&
                    cudaStreamCreateWithFlags(&sc, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = gpu_dashd_tensors_of(f.b);
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
    failed |= cudaMemsetAsync(view + gpu_dashd_off[OUT], 0xff, QB, sb) != cudaSuccess;
    LATE_FORWARD(sb);
#undef LATE_FORWARD
    CU_ASSERT_EQUAL(failed, 0);
    const int done = stream_done_within(sa, 20000) == 0 && stream_done_within(sc, 20000) == 0 &&
                     stream_done_within(sb, 20000) == 0;
    CU_ASSERT(done);
    if (!done) { /* dashd's stream is stuck: a fresh one for the tests after this one */
        fprintf(stderr, "\n  a stream still waited 20 s after the late ready word ");
        dashd_kill(&gpu_dashd_D);
        CU_ASSERT_EQUAL(dashd_restart(&gpu_dashd_D), 0);
        (void)stream_done_within(sb, 20000); /* the watchdog releases what it held */
    } else {
        if (!told)
            CU_ASSERT_EQUAL(dash_sync(f.c), DASH_ESCHED);
        CU_ASSERT_EQUAL(dash_sync(f.c), 0);
        unsigned char *got = malloc(QB + LB);
        CU_ASSERT_FATAL(got != NULL);
        CU_ASSERT(gpu_dashd_fetch(got, view, OUT) == 0 && gpu_dashd_fetch(got + QB, view, LSE) == 0);
        CU_ASSERT(memcmp(got, gpu_dashd_expected, QB + LB) == 0);
        free(got);
    }
    CU_ASSERT(cudaStreamDestroy(sa) == cudaSuccess && cudaStreamDestroy(sb) == cudaSuccess &&
              cudaStreamDestroy(sc) == cudaSuccess);
    (void)cudaFree(stage);
    (void)cudaFree(scratch);
    gpu_dashd_fixture_close(&f, "gpu-signal-late");
}

/* dashd dies after a stream-ordered op has run to the end (its done word written, the
 * caller's stream gone on) and before its reply went out (DASHD_TEST_EXIT_BEFORE_REPLY=1):
 * the restore finds the op done and does not send it again - a second run by the new daemon
 * would write outputs the caller has reused by then (here: filled with a marker after the
 * stream finished), at any time. The call that carries the restore reports no failure. */
void test_dashd_gpu_op_done_before_its_daemon_died_is_not_sent_again(void)
{
    if (!gpu_dashd_semaphores_here())
        return;
    CU_ASSERT_EQUAL_FATAL(dashd_stop(&gpu_dashd_D), 0);
    CU_ASSERT_FATAL(setenv("DASHD_TEST_EXIT_BEFORE_REPLY", "1", 1) == 0);
    const int up = dashd_restart(&gpu_dashd_D);
    unsetenv("DASHD_TEST_EXIT_BEFORE_REPLY");
    CU_ASSERT_EQUAL_FATAL(up, 0);
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-done-unreplied");
    unsigned char *view = dash_buffer_data(f.b);
    CU_ASSERT_FATAL(gpu_dashd_view_load(view, gpu_dashd_inputs) == 0);
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = gpu_dashd_tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    CU_ASSERT_EQUAL(dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL), 0);
    CU_ASSERT_EQUAL(stream_done_within(s, 20000), 0); /* dashd wrote the done word */
    unsigned char *got = malloc(QB + LB);
    CU_ASSERT_FATAL(got != NULL);
    CU_ASSERT(gpu_dashd_fetch(got, view, OUT) == 0 && gpu_dashd_fetch(got + QB, view, LSE) == 0);
    CU_ASSERT(memcmp(got, gpu_dashd_expected, QB + LB) == 0);
    /* it is gone, with the reply */
    CU_ASSERT_EQUAL(dashd_wait_exit(&gpu_dashd_D, 10000), 70);
    /* the caller reuses the outputs */
    CU_ASSERT(cudaMemset(view + gpu_dashd_off[OUT], 0x5a, QB) == cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&gpu_dashd_D), 0);
    CU_ASSERT_EQUAL(dash_sync(f.c), 0); /* hears of the restart, restores */
    usleep(500000);                     /* a resent op would have run by now */
    CU_ASSERT(cudaDeviceSynchronize() == cudaSuccess);
    CU_ASSERT(gpu_dashd_fetch(got, view, OUT) == 0);
    size_t kept = 0;
    for (size_t i = 0; i < QB; i++)
        kept += got[i] == 0x5a;
    CU_ASSERT_EQUAL(kept, QB);
    if (kept != QB)
        fprintf(stderr, "\n  %zu of %zu bytes of the reused output were written again", QB - kept, QB);
    gpu_dashd_check_stream(&f, 0, "stream-ordered, after the restore");
    free(got);
    CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    gpu_dashd_fixture_close(&f, "gpu-done-unreplied");
}

/* A stream that is capturing a CUDA graph is refused by the stream-ordered calls before
 * anything is queued (a graph would record the op's ready write, and dashd's stream would
 * wait for it for ever); the capture itself is left intact, and the client works after. */
void test_dashd_gpu_stream_op_on_a_capturing_stream_is_refused(void)
{
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-capture");
    CU_ASSERT_FATAL(gpu_dashd_view_load(dash_buffer_data(f.b), gpu_dashd_inputs) == 0);
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = gpu_dashd_tensors_of(f.b);
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
    gpu_dashd_check_stream(&f, 0, "stream-ordered, after a refused capture");
    CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    gpu_dashd_fixture_close(&f, "gpu-capture");
}

/* More ops in flight than there are semaphore slots, back to back on one stream with no
 * host wait: every slot is used again, the stream keeps its order, and the last forward's
 * outputs equal the in-process kernels'. */
void test_dashd_gpu_signal_ops_reuse_every_slot_in_order(void)
{
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-signal-slots");
    unsigned char *view = dash_buffer_data(f.b);
    CU_ASSERT_FATAL(gpu_dashd_view_load(view, gpu_dashd_inputs) == 0);
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = gpu_dashd_tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    enum { N = 1000 };
    int failed = 0;
    double t0 = (double)clock();
    for (int i = 0; i < N && !failed; i++) {
        /* poison the outputs before each: only the op itself can write them back */
        failed |= cudaMemsetAsync(view + gpu_dashd_off[OUT], 0xff, QB, s) != cudaSuccess;
        failed |= dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL) != 0;
    }
    double cpu_us = ((double)clock() - t0) / CLOCKS_PER_SEC * 1e6 / N;
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT(cudaStreamSynchronize(s) == cudaSuccess);
    CU_ASSERT_EQUAL(dash_sync(f.c), 0);
    unsigned char *got = malloc(QB + LB);
    CU_ASSERT_FATAL(got != NULL);
    CU_ASSERT(gpu_dashd_fetch(got, view, OUT) == 0 && gpu_dashd_fetch(got + QB, view, LSE) == 0);
    CU_ASSERT(memcmp(got, gpu_dashd_expected, QB + LB) == 0);
    fprintf(stderr, "\n    %d forwards in flight through 256 slots; %.0f us of CPU per call ", N,
            cpu_us);
    free(got);
    CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    gpu_dashd_fixture_close(&f, "gpu-signal-slots");
}

/* The daemon dies (SIGKILL) with semaphore-ordered ops in flight behind a slow producer:
 * the library's watchdog writes their done words, so the caller's stream finishes without
 * any call into the library; the next dash_sync() says what happened; after a restart the
 * client works again. */
void test_dashd_gpu_daemon_killed_with_signal_ops_in_flight_releases_the_stream(void)
{
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-signal-kill");
    unsigned char *view = dash_buffer_data(f.b), *stage = NULL;
    CU_ASSERT_FATAL(cudaMalloc((void **)&stage, gpu_dashd_view_bytes) == cudaSuccess);
    CU_ASSERT_FATAL(gpu_dashd_view_load(stage, gpu_dashd_inputs) == 0);
    /* the producer writes zeros into the gradients (and after them): the poison must land
     * after it */
    CU_ASSERT_FATAL(zero_outputs(stage, bwd_outputs, 3) == 0);
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = gpu_dashd_tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    /* the daemon's ops wait (on the GPU) for a producer of 2 s */
    CU_ASSERT_FATAL(gpu_test_delayed_copy(view, stage, gpu_dashd_view_bytes, 2000000000ull, s) == cudaSuccess);
    int sent = 0;
    for (int i = 0; i < 20; i++)
        sent += dash_backward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                     &t[DQ], &t[DK], &t[DV], s, NULL) == 0;
    CU_ASSERT_EQUAL(sent, 20);
    usleep(200000); /* the requests have arrived */
    dashd_kill(&gpu_dashd_D);
    CU_ASSERT_EQUAL(stream_done_within(s, 15000), 0); /* released: no call of ours needed */
    CU_ASSERT(outputs_poisoned(view, bwd_outputs, 3)); /* poisoned before the release */
    int rc = dash_sync(f.c);
    CU_ASSERT(rc == DASH_EIO || rc == DASH_ETIMEDOUT);
    CU_ASSERT(strstr(dash_last_error(f.c), "went away") || strstr(dash_last_error(f.c), "answer"));
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&gpu_dashd_D), 0);
    gpu_dashd_check_stream(&f, 0, "stream-ordered after the daemon was killed and restarted");
    CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    CU_ASSERT(cudaFree(stage) == cudaSuccess);
    gpu_dashd_fixture_close(&f, "gpu-signal-kill");
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
void test_dashd_gpu_restart_heard_in_a_ping_resends_stream_ops_before_it_returns(void)
{
    if (!gpu_dashd_semaphores_here())
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
             dash_cuda_register(c, alloc + VIEW_OFF, gpu_dashd_view_bytes, &b) == 0 &&
             cudaMalloc((void **)&stage, gpu_dashd_view_bytes) == cudaSuccess &&
             cudaMallocHost((void **)&host, QB + LB) == cudaSuccess && gpu_dashd_view_load(stage, gpu_dashd_inputs) == 0 &&
             gpu_dashd_set_ff(dash_buffer_data(b), gpu_dashd_view_bytes) == cudaSuccess &&
             cudaDeviceSynchronize() == cudaSuccess &&
             cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess;
    CU_ASSERT(ok);
    if (!ok)
        goto out;
    unsigned char *view = dash_buffer_data(b);
    struct tensors ts = gpu_dashd_tensors_of(b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    /* the inputs land 3 s from now; the forward waits for them on the GPU */
    ok = gpu_test_delayed_copy(view, stage, gpu_dashd_view_bytes, 3000000000ull, s) == cudaSuccess &&
         dash_forward_stream(c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL) == 0 &&
         cudaMemcpyAsync(host, view + gpu_dashd_off[OUT], QB, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
         cudaMemcpyAsync(host + QB, view + gpu_dashd_off[LSE], LB, cudaMemcpyDeviceToHost, s) == cudaSuccess;
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
    const int out_same = memcmp(host, gpu_dashd_expected, QB) == 0, lse_same = memcmp(host + QB, gpu_dashd_expected + QB, LB) == 0;
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
void test_dashd_gpu_op_released_by_the_watchdog_is_not_sent_to_the_next_daemon(void)
{
    if (!gpu_dashd_semaphores_here())
        return;
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-released-not-resent");
    unsigned char *view = dash_buffer_data(f.b), *stage = NULL;
    CU_ASSERT_FATAL(cudaMalloc((void **)&stage, gpu_dashd_view_bytes) == cudaSuccess);
    CU_ASSERT_FATAL(gpu_dashd_view_load(stage, gpu_dashd_inputs) == 0);
    CU_ASSERT_FATAL(zero_outputs(stage, fwd_outputs, 2) == 0); /* the producer writes zeros there */
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = gpu_dashd_tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    CU_ASSERT_FATAL(gpu_test_delayed_copy(view, stage, gpu_dashd_view_bytes, 1000000000ull, s) == cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], s, NULL), 0);
    usleep(200000); /* the request has arrived */
    dashd_kill(&gpu_dashd_D);
    CU_ASSERT_EQUAL(stream_done_within(s, 15000), 0); /* released by the watchdog */
    CU_ASSERT(outputs_poisoned(view, fwd_outputs, 2));
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&gpu_dashd_D), 0);
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
    gpu_dashd_check_stream(&f, 0, "stream-ordered after the released op");
    CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
    CU_ASSERT(cudaFree(stage) == cudaSuccess);
    gpu_dashd_fixture_close(&f, "gpu-released-not-resent");
}

/* Ops the daemon refuses after the library sent them (a tile size, a head count that does
 * not divide, on both ways of ordering): every output is all 0xFF once the caller's stream
 * has passed the op - although a slow producer queued before the call writes zeros into
 * them 300 ms later, so the poison is ordered after the caller's earlier work - nothing
 * else in the buffer is touched, the error is told (at once with events, at the next call
 * with semaphores), and the calls after it work. */
void test_dashd_gpu_failed_stream_ops_poison_their_outputs_before_the_stream_goes_on(void)
{
    for (int events = 0; events < 2; events++) {
        struct fixture f;
        gpu_dashd_connect_flags = events ? DASH_CONNECT_STREAM_EVENTS : 0;
        gpu_dashd_fixture_open(&f, "gpu-poison");
        gpu_dashd_connect_flags = 0;
        unsigned char *view = dash_buffer_data(f.b), *zeros = NULL;
        CU_ASSERT_FATAL(gpu_dashd_view_load(view, gpu_dashd_inputs) == 0);
        CU_ASSERT_FATAL(cudaMalloc((void **)&zeros, QB + 256) == cudaSuccess);
        CU_ASSERT_FATAL(cudaMemset(zeros, 0, QB + 256) == cudaSuccess);
        cudaStream_t s;
        CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
        struct tensors ts = gpu_dashd_tensors_of(f.b);
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
                CU_ASSERT(gpu_test_delayed_copy(view + gpu_dashd_off[outs[i]], zeros, slot_bytes[outs[i]],
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
        CU_ASSERT(gpu_dashd_fetch(got, view, OUT) == 0 && gpu_dashd_fetch(got + QB, view, LSE) == 0);
        CU_ASSERT(memcmp(got, gpu_dashd_expected, QB + LB) == 0);
        free(got);
        CU_ASSERT(cudaStreamDestroy(s) == cudaSuccess);
        CU_ASSERT(cudaFree(zeros) == cudaSuccess);
        gpu_dashd_fixture_close(&f, "gpu-poison");
    }
}

/* An output that reaches past its buffer is refused by the call itself (DASH_EBOUNDS,
 * naming the tensor), before anything is queued: no poison is written anywhere (the other
 * output keeps its zeros), and the client goes on. */
void test_dashd_gpu_stream_op_output_past_its_buffer_is_refused_before_queueing(void)
{
    for (int events = 0; events < 2; events++) {
        struct fixture f;
        gpu_dashd_connect_flags = events ? DASH_CONNECT_STREAM_EVENTS : 0;
        gpu_dashd_fixture_open(&f, "gpu-poison-bounds");
        gpu_dashd_connect_flags = 0;
        unsigned char *view = dash_buffer_data(f.b);
        CU_ASSERT_FATAL(gpu_dashd_view_load(view, gpu_dashd_inputs) == 0);
        CU_ASSERT_FATAL(zero_outputs(view, fwd_outputs, 2) == 0);
        struct tensors ts = gpu_dashd_tensors_of(f.b);
        struct dash_tensor *t = ts.t;
        struct dash_tensor out = t[OUT];
        out.offset = gpu_dashd_view_bytes - QB / 2;
        struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
        CU_ASSERT_EQUAL(dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &out, &t[LSE], 0, NULL),
                        DASH_EBOUNDS);
        CU_ASSERT(strstr(dash_last_error(f.c), "out:") != NULL);
        CU_ASSERT(cudaDeviceSynchronize() == cudaSuccess);
        unsigned char *h = malloc(LB);
        CU_ASSERT_FATAL(h != NULL);
        CU_ASSERT(gpu_dashd_fetch(h, view, LSE) == 0);
        int zero = 1;
        for (size_t i = 0; i < LB; i++)
            zero &= h[i] == 0;
        CU_ASSERT(zero);
        free(h);
        CU_ASSERT_EQUAL(dash_forward_stream(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], 0, NULL), 0);
        CU_ASSERT(cudaDeviceSynchronize() == cudaSuccess);
        CU_ASSERT_EQUAL(dash_sync(f.c), 0);
        gpu_dashd_fixture_close(&f, "gpu-poison-bounds");
    }
}

/* A per-client limit refuses the op after validation (a daemon with --limit-request-bytes
 * below the op's size): the semaphore-ordered forward's out and lse are all 0xFF when the
 * stream has passed it, and the error (DASH_ELIMIT's family: whatever the limit says) is
 * told by dash_sync. */
void test_dashd_gpu_op_refused_by_a_client_limit_poisons_its_outputs(void)
{
    struct dashd_proc L;
    CU_ASSERT_EQUAL_FATAL(dashd_start(&L, "--backend cuda --limit-request-bytes 64K"), 0);
    struct dash_connect_opts o = {.client_name = "gpu-poison-limit", .timeout_ms = 20000};
    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_connect(L.endpoint, &o, &c), 0);
    unsigned char *alloc = NULL;
    CU_ASSERT_FATAL(cudaMalloc((void **)&alloc, ALLOC_BYTES) == cudaSuccess);
    struct dash_buffer *b = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_cuda_register(c, alloc + VIEW_OFF, gpu_dashd_view_bytes, &b), 0);
    unsigned char *view = dash_buffer_data(b);
    CU_ASSERT_FATAL(gpu_dashd_view_load(view, gpu_dashd_inputs) == 0);
    CU_ASSERT_FATAL(zero_outputs(view, fwd_outputs, 2) == 0);
    cudaStream_t s;
    CU_ASSERT_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    struct tensors ts = gpu_dashd_tensors_of(b);
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
