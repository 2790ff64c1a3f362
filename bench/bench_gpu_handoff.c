// SPDX-License-Identifier: BSD-3-Clause
/*
 * bench_gpu_handoff.c - what passing GPU work between two processes costs, apart from
 * dashd: the floor under the daemon's per-op overhead (issue 4's "within 3%" target).
 *
 * A "client" and a "server" process (fork, no ZeroMQ, no dashd) run N ops the way a
 * stream-ordered dashd call does: the client queues a short kernel (its own work), records
 * an interprocess event and tells the server (a pipe); the server's stream waits on that
 * event, runs the op's kernel (all SMs for --work-us), records its event and answers; the
 * client's stream waits on it and goes on. Compared with the same kernels in one process
 * on one stream, and on two streams of one process joined by events. Under MPS
 * (CUDA_MPS_PIPE_DIRECTORY set, a control daemon running) the two processes share one GPU
 * context; without it the GPU time-slices between their contexts.
 *
 *   bench_gpu_handoff [--ops N] [--work-us U] [--client-us C]
 */
#include "bench/benchtime.h"
#include "tests/gpu/gpu_delay.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "bench_gpu_handoff: %s: %s\n", #call, cudaGetErrorString(e_)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static void xfer(int fd, void *p, size_t n, int out)
{
    for (size_t done = 0; done < n;) {
        ssize_t r = out ? write(fd, (char *)p + done, n - done) : read(fd, (char *)p + done, n - done);
        if (r <= 0) {
            perror("bench_gpu_handoff: pipe");
            exit(1);
        }
        done += (size_t)r;
    }
}

#define WARM 5

static int ops = 50;
static uint64_t work_ns = 1000000, client_ns = 20000;
static int sms;

/* The server: waits on the client's event, runs the op, records its own. */
static void server(int rd, int wr)
{
    cudaStream_t st;
    cudaEvent_t mine, theirs;
    cudaIpcEventHandle_t h;
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&mine, cudaEventInterprocess | cudaEventDisableTiming));
    CHECK(cudaIpcGetEventHandle(&h, mine));
    xfer(wr, &h, sizeof h, 1);
    xfer(rd, &h, sizeof h, 0);
    CHECK(cudaIpcOpenEventHandle(&theirs, h));
    for (int i = 0; i < WARM + ops; i++) {
        int op;
        xfer(rd, &op, sizeof op, 0);
        CHECK(cudaStreamWaitEvent(st, theirs, 0));
        CHECK(gpu_test_hold_sms(sms, work_ns, st));
        CHECK(cudaEventRecord(mine, st));
        xfer(wr, &op, sizeof op, 1);
    }
    CHECK(cudaStreamSynchronize(st));
    exit(0);
}

static double two_processes(void)
{
    int to_srv[2], to_cli[2];
    if (pipe(to_srv) || pipe(to_cli)) {
        perror("pipe");
        exit(1);
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(to_srv[1]);
        close(to_cli[0]);
        server(to_srv[0], to_cli[1]);
    }
    close(to_srv[0]);
    close(to_cli[1]);
    int rd = to_cli[0], wr = to_srv[1];
    cudaStream_t st;
    cudaEvent_t mine, theirs;
    cudaIpcEventHandle_t h;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&mine, cudaEventInterprocess | cudaEventDisableTiming));
    xfer(rd, &h, sizeof h, 0);
    CHECK(cudaIpcOpenEventHandle(&theirs, h));
    CHECK(cudaIpcGetEventHandle(&h, mine));
    xfer(wr, &h, sizeof h, 1);
    double t0 = 0;
    for (int i = 0; i < WARM + ops; i++) {
        if (i == WARM) { /* the first ops warm both sides up */
            CHECK(cudaStreamSynchronize(st));
            t0 = btime_now_ms();
        }
        CHECK(gpu_test_hold_sms(sms, client_ns, st));
        CHECK(cudaEventRecord(mine, st));
        xfer(wr, &i, sizeof i, 1);
        int op;
        xfer(rd, &op, sizeof op, 0);
        CHECK(cudaStreamWaitEvent(st, theirs, 0));
    }
    CHECK(cudaStreamSynchronize(st));
    double t = btime_now_ms() - t0;
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "bench_gpu_handoff: server failed\n");
        exit(1);
    }
    cudaEventDestroy(theirs);
    cudaEventDestroy(mine);
    cudaStreamDestroy(st);
    close(rd);
    close(wr);
    return t / ops;
}

/* Both kernels on one stream, or on two streams joined by events, in this process. */
static double one_process(int two_streams)
{
    cudaStream_t a, b;
    cudaEvent_t ea, eb;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&ea, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&eb, cudaEventDisableTiming));
    CHECK(gpu_test_hold_sms(sms, work_ns, a)); /* warm-up */
    CHECK(cudaDeviceSynchronize());
    double t0 = btime_now_ms();
    for (int i = 0; i < ops; i++) {
        CHECK(gpu_test_hold_sms(sms, client_ns, a));
        if (two_streams) {
            CHECK(cudaEventRecord(ea, a));
            CHECK(cudaStreamWaitEvent(b, ea, 0));
            CHECK(gpu_test_hold_sms(sms, work_ns, b));
            CHECK(cudaEventRecord(eb, b));
            CHECK(cudaStreamWaitEvent(a, eb, 0));
        } else {
            CHECK(gpu_test_hold_sms(sms, work_ns, a));
        }
    }
    CHECK(cudaStreamSynchronize(a));
    double t = btime_now_ms() - t0;
    cudaEventDestroy(ea);
    cudaEventDestroy(eb);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    return t / ops;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc)
            ops = atoi(argv[++i]);
        else if (strcmp(argv[i], "--work-us") == 0 && i + 1 < argc)
            work_ns = (uint64_t)atoll(argv[++i]) * 1000;
        else if (strcmp(argv[i], "--client-us") == 0 && i + 1 < argc)
            client_ns = (uint64_t)atoll(argv[++i]) * 1000;
        else {
            fprintf(stderr, "usage: bench_gpu_handoff [--ops N] [--work-us U] [--client-us C]\n");
            return 2;
        }
    }
    if (ops < 1)
        ops = 1;
    /* The server is forked before this process touches CUDA (a child cannot use a CUDA
     * context it inherited); the SM count comes from a throwaway child first. */
    int fds[2];
    if (pipe(fds)) {
        perror("pipe");
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        xfer(fds[1], &sms, sizeof sms, 1);
        exit(0);
    }
    xfer(fds[0], &sms, sizeof sms, 0);
    waitpid(pid, NULL, 0);
    const char *mps = getenv("CUDA_MPS_PIPE_DIRECTORY");
    /* two processes first: after this one initialises CUDA it can no longer fork a server */
    double two = two_processes();
    double one = one_process(0), joined = one_process(1);
    printf("# cross-process hand-off: %d ops, each the client's %.0f us kernel then the "
           "op's %.0f us kernel on all %d SMs%s\n",
           ops, client_ns / 1e3, work_ns / 1e3, sms, mps ? " (MPS pipe directory set)" : "");
    printf("| path | ms per op | vs one stream |\n|---|---|---|\n");
    printf("| one process, one stream | %.4f | - |\n", one);
    printf("| one process, two streams + events | %.4f | %+.4f ms |\n", joined, joined - one);
    printf("| two processes + IPC events | %.4f | %+.4f ms |\n", two, two - one);
    return 0;
}
