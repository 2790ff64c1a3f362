// SPDX-License-Identifier: BSD-3-Clause
/*
 * bench_daemon.c - what a request through dashd costs: the round trip of a Ping and of a
 * tiny forward and backward through the daemon, set beside the same forward and backward
 * computed in this process, and the throughput of 1, 2 and 4 client processes; written up
 * as a Markdown report.
 *
 *   bench_daemon [--quick] [--out DIR]
 *
 * The bench starts its own daemon, <dir of argv[0]>/dashd on a private endpoint
 * ipc:///tmp/dashd-bench-<pid>.sock with 2 engine threads, waits until it answers, and
 * stops it with SIGTERM at the end and on every error path (dashd also gets SIGTERM if
 * the bench itself dies, through PR_SET_PDEATHSIG). Then:
 *
 *   latency      one client, one request at a time: 2000 dash_ping after 100 warm-ups;
 *                500 tiny forwards (bf16, B=1 S=64 H=1 D=64, full mask) and 500 tiny
 *                backwards through the daemon; the same 500 + 500 with eng_forward and
 *                eng_backward on an in-process engine of 2 threads. p50/p99/max of the
 *                client-side time; the daemon's own run_us and queue_us beside it.
 *   throughput   1, 2 and 4 child processes, each with its own dash_client (a client or
 *                a ZeroMQ context must not cross a fork, so the parent closes its own
 *                before forking), issuing synchronous forwards back to back for 3 s; the
 *                tiny shape, then a medium one (B=1 S=512 H=4 D=64). Children connect and
 *                warm up first, then all start together when the parent closes a "go"
 *                pipe, and report through a pipe of their own.
 *
 * --quick divides every count by 10 and uses 1 s windows (a smoke test, about 7 s). The
 * default run takes about 22 s on the 2-core dev machine, 18 of them the six throughput
 * windows. Times are CLOCK_MONOTONIC; percentiles are nearest-rank over every sample.
 *
 * As a check that both paths did the same work, the daemon's outputs of the latency runs
 * are compared with the in-process ones byte for byte (same inputs, same configuration);
 * the report says whether they agree.
 *
 * The report goes to stdout and, with --out DIR, also to DIR/daemon-roundtrip-YYYY-MM-DD.md
 * (UTC date; an existing file of that day is overwritten). Progress and errors go to
 * stderr. Exit status: 0 success; 1 a libdash or engine call failed, the daemon did not
 * start, hung or did not exit cleanly on SIGTERM, a client process failed, or I/O failed;
 * 2 bad usage.
 */
#include "../client/dash.h"
#include "kernels/cpu/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include "bench/benchd.h"
#include "bench/benchmeta.h"
#include "bench/benchrng.h"
#include "bench/benchtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BENCH_SEED 0x5eed5eedULL
#define DAEMON_THREADS 2 /* the in-process engine gets as many, so the two compute alike */
#define PING_N 2000
#define PING_WARMUP 100
#define OP_N 500
#define OP_WARMUP 20
#define WINDOW_S 3.0
#define QUICK_DIVISOR 10
#define QUICK_WINDOW_S 1.0
#define MAX_CLIENTS 4
#define CLIENT_TIMEOUT_MS 10000 /* how long libdash waits for any sign of life */
#define START_WAIT_MS 10000     /* how long dashd may take to answer at all */
#define STOP_WAIT_MS 5000       /* how long dashd may take to exit after SIGTERM */
#define CHILD_GRACE_MS 30000    /* beyond the window, before a client process is a hang */

#if defined(__GNUC__) && !defined(__clang__)
#define BENCH_COMPILER "gcc " __VERSION__
#else
#define BENCH_COMPILER __VERSION__
#endif

struct shape {
    int32_t batch, seqlen, heads, head_dim;
};

static const struct shape tiny = {1, 64, 1, 64};
static const struct shape medium = {1, 512, 4, 64};

static const int client_counts[] = {1, 2, 4};
#define NCOUNTS ((int)(sizeof client_counts / sizeof client_counts[0]))

/* Byte offsets of the tensors of one problem in one buffer, each 64-byte aligned. */
struct layout {
    uint64_t q, k, v, out, lse, dout, dq, dk, dv, total;
};

/* Nearest-rank percentiles of one set of samples, in microseconds. */
struct dist {
    int64_t n;
    double p50, p99, max;
};

/* One row of the latency table. */
struct lat_row {
    const char *call, *path;
    const struct shape *shape; /* NULL for Ping */
    struct dist t;
    int has_daemon_times;
    double run_p50, queue_p50; /* dash_result's, when has_daemon_times */
};

/* What a client process sends its parent: once when it is ready (phase CHILD_READY, or
 * CHILD_DONE with rc < 0 if it could not get ready), once when it is done. Smaller than
 * PIPE_BUF, so each write arrives whole. */
enum { CHILD_READY = 1, CHILD_DONE = 2 };
struct child_report {
    int32_t phase;
    int32_t rc;    /* 0, or the code of the call that failed */
    char what[48]; /* that call */
    uint64_t count;
    double elapsed_s; /* from "go" to the end of the last request */
    double p50_us, p99_us, run_p50_us, queue_p50_us;
};

/* One row of the throughput table. */
struct tput_row {
    const struct shape *shape;
    int clients;
    double window_s, total_rps;
    uint64_t requests;
    struct child_report rep[MAX_CLIENTS];
};

struct bench {
    int quick;
    int ping_n, ping_warmup, op_n, op_warmup;
    double window_s;
    struct benchd d;     /* the dashd measured */
    char backend[16];    /* as dash_result named it */
    struct lat_row lat[5];
    int nlat;
    double fwd_overhead_us, bwd_overhead_us;
    int fwd_identical, bwd_identical;
    enum dash_schedule bwd_sched;
    int32_t bwd_wave, bwd_block_m, bwd_block_n;
    struct tput_row tput[2 * NCOUNTS];
    int ntput;
    uint64_t daemon_requests, daemon_errors; /* its StatsReply at the end */
    double measured_s;
};

/* ---- helpers ------------------------------------------------------------------------ */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* Sorts v. Nearest rank in integers, so 0.99 * 2000 cannot round up to rank 1981. */
static struct dist dist_of(double *v, size_t n)
{
    struct dist d = {(int64_t)n, 0, 0, 0};
    if (n == 0)
        return d;
    qsort(v, n, sizeof *v, btime_cmp_double);
    d.p50 = v[(500 * n + 999) / 1000 - 1];
    d.p99 = v[(990 * n + 999) / 1000 - 1];
    d.max = v[n - 1];
    return d;
}

/* A growable array of samples, for the throughput windows whose count is not known. */
struct samples {
    double *v;
    size_t n, cap;
};

static int samples_push(struct samples *s, double x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 4096;
        double *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return DASH_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return 0;
}


static size_t elems_of(const struct shape *s)
{
    return (size_t)s->batch * s->seqlen * s->heads * s->head_dim;
}

static uint64_t place(uint64_t *at, uint64_t bytes)
{
    uint64_t here = *at;
    *at += (bytes + 63) & ~(uint64_t)63;
    return here;
}

static struct layout layout_of(const struct shape *s)
{
    struct layout L;
    uint64_t at = 0, t = elems_of(s) * 2;
    L.q = place(&at, t), L.k = place(&at, t), L.v = place(&at, t), L.out = place(&at, t);
    L.lse = place(&at, (uint64_t)s->batch * s->heads * s->seqlen * sizeof(float));
    L.dout = place(&at, t), L.dq = place(&at, t), L.dk = place(&at, t), L.dv = place(&at, t);
    L.total = at;
    return L;
}

/* q, k, v and dout of the problem, the same bytes in every process. */
static void fill_inputs(char *base, const struct layout *L, const struct shape *s)
{
    uint64_t rng = BENCH_SEED;
    bench_fill_bf16(base + L->q, elems_of(s), &rng);
    bench_fill_bf16(base + L->k, elems_of(s), &rng);
    bench_fill_bf16(base + L->v, elems_of(s), &rng);
    bench_fill_bf16(base + L->dout, elems_of(s), &rng);
}

/* Every tensor of a problem laid out by layout_of() in b. */
struct views {
    struct dash_tensor q, k, v, out, lse, dout, dq, dk, dv;
};

static struct views views_of(struct dash_buffer *b, const struct layout *L, const struct shape *s)
{
    struct views t;
    int64_t B = s->batch, S = s->seqlen, H = s->heads, D = s->head_dim;
    t.q = dash_tensor_dense(b, L->q, B, S, H, D);
    t.k = dash_tensor_dense(b, L->k, B, S, H, D);
    t.v = dash_tensor_dense(b, L->v, B, S, H, D);
    t.out = dash_tensor_dense(b, L->out, B, S, H, D);
    t.lse = dash_tensor_lse(b, L->lse, B, H, S);
    t.dout = dash_tensor_dense(b, L->dout, B, S, H, D);
    t.dq = dash_tensor_dense(b, L->dq, B, S, H, D);
    t.dk = dash_tensor_dense(b, L->dk, B, S, H, D);
    t.dv = dash_tensor_dense(b, L->dv, B, S, H, D);
    return t;
}

/* What the tests send: bf16, full mask, and zeros (the defaults: scale 1/sqrt(D), schedule
 * auto) for the rest, which is also what the in-process engine is given. */
static const struct dash_attn attn = {.dtype = DASH_BF16, .mask = DASH_MASK_FULL};

static const char *dash_sched_name(enum dash_schedule s)
{
    static const char *names[] = {"auto", "atomic", "ascending", "descending", "spt", "shift"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

static void fail(const char *what, int rc)
{
    fprintf(stderr, "bench_daemon: %s: %s (%s)\n", what, dash_strerror(rc), dash_errname(rc));
}

/* ---- latency ---------------------------------------------------------------------------- */

static void add_row(struct bench *b, const char *call, const char *path, const struct shape *s,
                    struct dist t, const double *run, const double *queue)
{
    struct lat_row *r = &b->lat[b->nlat++];
    *r = (struct lat_row){.call = call, .path = path, .shape = s, .t = t};
    if (run && queue) {
        r->has_daemon_times = 1;
        r->run_p50 = run[0];
        r->queue_p50 = queue[0];
    }
}

/* The in-process half: the same problem on an engine of our own, then a byte comparison
 * with what the daemon wrote into shm. */
static int latency_in_process(struct bench *b, const char *shm, const struct layout *L,
                              double *t)
{
    const struct shape *s = &tiny;
    struct attn_problem p = {.batch = s->batch, .seqlen_q = s->seqlen, .seqlen_k = s->seqlen,
                            .heads_q = s->heads, .heads_kv = s->heads, .head_dim = s->head_dim,
                            .dtype = DTYPE_BF16, .mask = SCHED_MASK_FULL,
                            .scale = (float)(1.0 / sqrt((double)s->head_dim))};
    /* All defaults and schedule auto: what the daemon makes of attn's zeros. */
    const struct attn_config cfg = {.sched = SCHED_AUTO};
    int rc = DASH_ENOMEM;
    char *mine = malloc(L->total);
    struct eng *e = eng_new(DAEMON_THREADS);
    if (!mine || !e) {
        fail("in-process engine", rc);
        goto free_all;
    }
    memcpy(mine, shm, L->total);
    /* Outputs NaN until written (dout, an input, lies between lse and dq). */
    memset(mine + L->out, 0xff, L->dout - L->out);
    memset(mine + L->dq, 0xff, L->total - L->dq);
#define T(off) attn_dense(mine + (off), s->seqlen, s->heads, s->head_dim)
    for (int i = 0; i < b->op_warmup + b->op_n; i++) {
        double t0 = now_us();
        rc = eng_forward(e, &p, &cfg, T(L->out), (float *)(mine + L->lse), T(L->q), T(L->k),
                         T(L->v), NULL);
        if (rc) {
            fail("eng_forward", rc);
            goto free_all;
        }
        if (i >= b->op_warmup)
            t[i - b->op_warmup] = now_us() - t0;
    }
    double fwd_p50 = b->lat[1].t.p50;
    add_row(b, "forward", "in-process (eng_forward)", s, dist_of(t, (size_t)b->op_n), NULL, NULL);
    b->fwd_overhead_us = fwd_p50 - b->lat[b->nlat - 1].t.p50;
    const size_t tbytes = elems_of(s) * 2, lbytes = (size_t)s->batch * s->heads * s->seqlen * 4;
    b->fwd_identical = memcmp(mine + L->out, shm + L->out, tbytes) == 0 &&
                       memcmp(mine + L->lse, shm + L->lse, lbytes) == 0;

    for (int i = 0; i < b->op_warmup + b->op_n; i++) {
        double t0 = now_us();
        rc = eng_backward(e, &p, &cfg, T(L->dq), T(L->dk), T(L->dv), T(L->q), T(L->k), T(L->v),
                          T(L->out), (float *)(mine + L->lse), T(L->dout), NULL);
        if (rc) {
            fail("eng_backward", rc);
            goto free_all;
        }
        if (i >= b->op_warmup)
            t[i - b->op_warmup] = now_us() - t0;
    }
#undef T
    double bwd_p50 = b->lat[2].t.p50;
    add_row(b, "backward", "in-process (eng_backward)", s, dist_of(t, (size_t)b->op_n), NULL,
            NULL);
    b->bwd_overhead_us = bwd_p50 - b->lat[b->nlat - 1].t.p50;
    b->bwd_identical = memcmp(mine + L->dq, shm + L->dq, tbytes) == 0 &&
                       memcmp(mine + L->dk, shm + L->dk, tbytes) == 0 &&
                       memcmp(mine + L->dv, shm + L->dv, tbytes) == 0;
    rc = 0;
free_all:
    eng_free(e);
    free(mine);
    return rc;
}

/* Rows 0..2 (Ping, forward and backward through the daemon), then 3..4 in-process, and
 * the rows are reordered for the report by write_report(). */
static int measure_latency(struct bench *b)
{
    const struct shape *s = &tiny;
    const struct layout L = layout_of(s);
    struct dash_connect_opts opts = {.client_name = "bench_daemon", .run_tag = "bench",
                                     .timeout_ms = CLIENT_TIMEOUT_MS};
    struct dash_client *c = NULL;
    struct dash_buffer *buf = NULL;
    size_t n = (size_t)(b->ping_n > b->op_n ? b->ping_n : b->op_n);
    double *t = malloc(n * sizeof *t), *run = malloc(n * sizeof *run),
           *queue = malloc(n * sizeof *queue);
    int rc = DASH_ENOMEM;
    if (!t || !run || !queue) {
        fail("latency samples", rc);
        goto free_samples;
    }
    if ((rc = dash_connect(b->d.endpoint, &opts, &c))) {
        fail("dash_connect", rc);
        goto free_samples;
    }
    if ((rc = dash_shm_alloc(c, L.total, &buf))) {
        fail("dash_shm_alloc", rc);
        goto close_client;
    }
    char *base = dash_buffer_data(buf);
    fill_inputs(base, &L, s);
    const struct views v = views_of(buf, &L, s);
    struct dash_result res = {0};

    fprintf(stderr, "bench_daemon: latency: %d pings, %d forwards, %d backwards\n", b->ping_n,
            b->op_n, b->op_n);
    for (int i = 0; i < b->ping_warmup + b->ping_n; i++) {
        double t0 = now_us();
        if ((rc = dash_ping(c, -1, NULL))) {
            fail("dash_ping", rc);
            goto free_buf;
        }
        if (i >= b->ping_warmup)
            t[i - b->ping_warmup] = now_us() - t0;
    }
    add_row(b, "Ping", "daemon (dash_ping)", NULL, dist_of(t, (size_t)b->ping_n), NULL, NULL);

    for (int i = 0; i < b->op_warmup + b->op_n; i++) {
        double t0 = now_us();
        if ((rc = dash_forward(c, &attn, &v.q, &v.k, &v.v, &v.out, &v.lse, &res))) {
            fail("dash_forward", rc);
            goto free_buf;
        }
        if (i >= b->op_warmup) {
            int j = i - b->op_warmup;
            t[j] = now_us() - t0, run[j] = (double)res.run_us, queue[j] = (double)res.queue_us;
        }
    }
    snprintf(b->backend, sizeof b->backend, "%s", res.backend);
    struct dist rd = dist_of(run, (size_t)b->op_n), qd = dist_of(queue, (size_t)b->op_n);
    add_row(b, "forward", "daemon (dash_forward)", s, dist_of(t, (size_t)b->op_n), &rd.p50,
            &qd.p50);

    for (int i = 0; i < b->op_warmup + b->op_n; i++) {
        double t0 = now_us();
        if ((rc = dash_backward(c, &attn, &v.q, &v.k, &v.v, &v.out, &v.lse, &v.dout, &v.dq,
                                &v.dk, &v.dv, &res))) {
            fail("dash_backward", rc);
            goto free_buf;
        }
        if (i >= b->op_warmup) {
            int j = i - b->op_warmup;
            t[j] = now_us() - t0, run[j] = (double)res.run_us, queue[j] = (double)res.queue_us;
        }
    }
    b->bwd_sched = res.schedule;
    b->bwd_wave = res.wave, b->bwd_block_m = res.block_m, b->bwd_block_n = res.block_n;
    rd = dist_of(run, (size_t)b->op_n), qd = dist_of(queue, (size_t)b->op_n);
    add_row(b, "backward", "daemon (dash_backward)", s, dist_of(t, (size_t)b->op_n), &rd.p50,
            &qd.p50);

    fprintf(stderr, "bench_daemon: latency: the same forward and backward in-process\n");
    rc = latency_in_process(b, base, &L, t);

free_buf:;
    int frc = dash_shm_free(c, buf);
    if (frc) {
        fail("dash_shm_free", frc);
        if (!rc)
            rc = frc;
    }
close_client:
    dash_close(c);
free_samples:
    free(queue);
    free(run);
    free(t);
    return rc;
}

/* ---- throughput -------------------------------------------------------------------------- */

static void child_fail(struct child_report *r, const char *what, int rc)
{
    r->phase = CHILD_DONE;
    r->rc = rc;
    snprintf(r->what, sizeof r->what, "%s", what);
}

static int write_report_msg(int fd, const struct child_report *r)
{
    ssize_t n;
    while ((n = write(fd, r, sizeof *r)) < 0 && errno == EINTR)
        ;
    return n == (ssize_t)sizeof *r ? 0 : -1;
}

/* A client process: connect, warm up, say ready, wait for "go" (EOF on go_fd), then
 * synchronous forwards back to back for the window. Never returns. */
static void child_main(const struct bench *b, const struct shape *s, int idx, int report_fd,
                       int go_fd, pid_t parent)
{
    struct child_report r = {.phase = CHILD_READY};
    struct samples t = {0}, run = {0}, queue = {0};
    struct dash_client *c = NULL;
    struct dash_buffer *buf = NULL;
    char name[64];
    int rc;

    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
        _exit(1);
    snprintf(name, sizeof name, "bench_daemon-client%d", idx);
    struct dash_connect_opts opts = {.client_name = name, .run_tag = "bench",
                                     .timeout_ms = CLIENT_TIMEOUT_MS};
    const struct layout L = layout_of(s);
    if ((rc = dash_connect(b->d.endpoint, &opts, &c))) {
        child_fail(&r, "dash_connect", rc);
        goto report;
    }
    if ((rc = dash_shm_alloc(c, L.total, &buf))) {
        child_fail(&r, "dash_shm_alloc", rc);
        goto report;
    }
    fill_inputs(dash_buffer_data(buf), &L, s);
    const struct views v = views_of(buf, &L, s);
    struct dash_result res;
    for (int i = 0; i < 3; i++)
        if ((rc = dash_forward(c, &attn, &v.q, &v.k, &v.v, &v.out, &v.lse, &res))) {
            child_fail(&r, "dash_forward (warm-up)", rc);
            goto report;
        }
    if (write_report_msg(report_fd, &r) != 0)
        goto free_buf; /* the parent is gone */
    char go;
    while (read(go_fd, &go, 1) < 0 && errno == EINTR)
        ;

    const double start = now_us(), end = start + b->window_s * 1e6;
    double t1 = start;
    while (t1 < end) {
        double t0 = t1;
        if ((rc = dash_forward(c, &attn, &v.q, &v.k, &v.v, &v.out, &v.lse, &res))) {
            child_fail(&r, "dash_forward", rc);
            goto report;
        }
        t1 = now_us();
        if ((rc = samples_push(&t, t1 - t0)) || (rc = samples_push(&run, (double)res.run_us)) ||
            (rc = samples_push(&queue, (double)res.queue_us))) {
            child_fail(&r, "samples", rc);
            goto report;
        }
    }
    r.phase = CHILD_DONE;
    r.count = t.n;
    r.elapsed_s = (t1 - start) * 1e-6;
    struct dist d = dist_of(t.v, t.n);
    r.p50_us = d.p50, r.p99_us = d.p99;
    r.run_p50_us = dist_of(run.v, run.n).p50;
    r.queue_p50_us = dist_of(queue.v, queue.n).p50;
    if ((rc = dash_shm_free(c, buf))) {
        child_fail(&r, "dash_shm_free", rc);
        goto report;
    }
    buf = NULL;
report:
    (void)write_report_msg(report_fd, &r);
free_buf:
    if (buf)
        (void)dash_shm_free(c, buf); /* already failing: dash_close frees it anyway */
    dash_close(c);
    free(queue.v);
    free(run.v);
    free(t.v);
    _exit(r.rc ? 1 : 0);
}

/* Reads one whole report before the deadline. Returns 0, -ETIMEDOUT, -EPIPE (the child
 * closed its end without a full report: it died) or -errno. */
static int read_report(int fd, struct child_report *r, double deadline)
{
    size_t got = 0;
    while (got < sizeof *r) {
        int wait_ms = (int)((deadline - now_us()) / 1e3);
        if (wait_ms <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, wait_ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -ETIMEDOUT;
        ssize_t k = read(fd, (char *)r + got, sizeof *r - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        if (k == 0)
            return -EPIPE;
        got += (size_t)k;
    }
    return 0;
}

/* Says what went wrong with client idx: a bad report, or the child's own error. */
static void child_error(int idx, int nclients, int rc, const struct child_report *r)
{
    char what[160];
    if (rc == -ETIMEDOUT)
        snprintf(what, sizeof what, "client %d of %d sent no report in time (hung?)", idx + 1,
                 nclients);
    else if (rc == -EPIPE)
        snprintf(what, sizeof what, "client %d of %d exited without reporting (crashed?)",
                 idx + 1, nclients);
    else if (rc)
        snprintf(what, sizeof what, "reading client %d of %d", idx + 1, nclients);
    if (rc) {
        fail(what, rc);
        return;
    }
    snprintf(what, sizeof what, "client %d of %d: %s", idx + 1, nclients, r->what);
    fail(what, r->rc);
}

static int run_clients(struct bench *b, const struct shape *s, int nclients,
                       struct tput_row *row)
{
    pid_t pids[MAX_CLIENTS];
    int rd[MAX_CLIENTS], go[2] = {-1, -1}, started = 0, rc = 0;
    *row = (struct tput_row){.shape = s, .clients = nclients, .window_s = b->window_s};

    if (pipe2(go, O_CLOEXEC) != 0) {
        rc = -errno;
        fail("pipe", rc);
        return rc;
    }
    fflush(NULL);
    pid_t parent = getpid();
    for (; started < nclients; started++) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) {
            rc = -errno;
            fail("pipe", rc);
            goto reap;
        }
        pid_t pid = fork();
        if (pid < 0) {
            rc = -errno;
            fail("fork", rc);
            close(p[0]);
            close(p[1]);
            goto reap;
        }
        if (pid == 0) {
            /* The child must not hold the go pipe's write end, or "go" (EOF) never comes;
             * the other clients' report pipes are none of its business either. */
            close(go[1]);
            close(p[0]);
            for (int j = 0; j < started; j++)
                close(rd[j]);
            child_main(b, s, started, p[1], go[0], parent);
        }
        close(p[1]);
        pids[started] = pid;
        rd[started] = p[0];
    }

    double deadline = now_us() + CHILD_GRACE_MS * 1e3;
    for (int i = 0; i < nclients; i++) {
        struct child_report *r = &row->rep[i];
        int e = read_report(rd[i], r, deadline);
        if (e || r->phase != CHILD_READY) {
            child_error(i, nclients, e, r);
            rc = e ? e : r->rc;
            goto reap;
        }
    }
    close(go[1]); /* go: every client's read() returns 0 at once */
    go[1] = -1;
    deadline = now_us() + b->window_s * 1e6 + CHILD_GRACE_MS * 1e3;
    for (int i = 0; i < nclients; i++) {
        struct child_report *r = &row->rep[i];
        int e = read_report(rd[i], r, deadline);
        if (e || r->phase != CHILD_DONE || r->rc) {
            child_error(i, nclients, e, r);
            rc = e ? e : r->rc ? r->rc : DASH_EPROTO;
            goto reap;
        }
        row->requests += r->count;
        row->total_rps += (double)r->count / r->elapsed_s;
    }

reap:
    if (go[1] >= 0)
        close(go[1]);
    close(go[0]);
    for (int i = 0; i < started; i++) {
        int status;
        if (rc)
            (void)kill(pids[i], SIGTERM); /* ours, by pid; a hung one must not block us */
        if (waitpid(pids[i], &status, 0) == pids[i] && !rc &&
            (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
            char how[96];
            benchd_describe_status(status, how, sizeof how);
            fprintf(stderr, "bench_daemon: client %d of %d: %s after reporting success\n",
                    i + 1, nclients, how);
            rc = DASH_EIO;
        }
        close(rd[i]);
    }
    return rc;
}

static int measure_throughput(struct bench *b)
{
    const struct shape *shapes[] = {&tiny, &medium};
    for (int si = 0; si < 2; si++)
        for (int ci = 0; ci < NCOUNTS; ci++) {
            const struct shape *s = shapes[si];
            fprintf(stderr, "bench_daemon: throughput: S=%d H=%d, %d client(s), %.0f s\n",
                    s->seqlen, s->heads, client_counts[ci], b->window_s);
            struct tput_row *row = &b->tput[b->ntput];
            int rc = run_clients(b, s, client_counts[ci], row);
            if (rc)
                return rc;
            b->ntput++;
            fprintf(stderr, "  %llu requests, %.0f req/s\n", (unsigned long long)row->requests,
                    row->total_rps);
        }
    return 0;
}

/* The daemon's own totals, as a cross-check on the client-side counts. */
static int read_daemon_stats(struct bench *b)
{
    struct dash_connect_opts opts = {.client_name = "bench_daemon-stats",
                                     .timeout_ms = CLIENT_TIMEOUT_MS,
                                     .flags = DASH_CONNECT_NO_SESSION};
    struct dash_client *c = NULL;
    struct dash_stats *st = NULL;
    int rc = dash_connect(b->d.endpoint, &opts, &c);
    if (rc) {
        fail("dash_connect (stats)", rc);
        return rc;
    }
    if ((rc = dash_stats(c, &st))) {
        fail("dash_stats", rc);
    } else {
        b->daemon_requests = st->requests;
        b->daemon_errors = st->errors;
        dash_stats_free(st);
    }
    dash_close(c);
    return rc;
}

/* ---- the report --------------------------------------------------------------------- */


struct meta {
    char date_iso[32], date_day[16], cpu[256], commit[160], cmdline[4096], loadavg[64];
};

static void shape_label(const struct shape *s, char *buf, size_t cap)
{
    if (s)
        snprintf(buf, cap, "%d,%d,%d,%d,full", s->batch, s->heads, s->seqlen, s->head_dim);
    else
        snprintf(buf, cap, "-");
}

/* " / "-joined per-client values of one field. */
static void per_client(const struct tput_row *r, size_t field_off, int decimals, char *buf,
                       size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < r->clients && used < cap; i++) {
        double x = *(const double *)((const char *)&r->rep[i] + field_off);
        int n = snprintf(buf + used, cap - used, "%s%.*f", i ? " / " : "", decimals, x);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

static void write_report(FILE *f, const struct bench *b, const struct meta *m)
{
    char how[96];
    benchd_describe_status(b->d.status, how, sizeof how);
    fprintf(f, "# dashd round-trip benchmark\n\n");
    fprintf(f, "- date: %s\n", m->date_iso);
    fprintf(f, "- host CPU: %s\n", m->cpu);
    fprintf(f, "- online CPUs: %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
    fprintf(f, "- load average at start (1, 5, 15 min): %s\n", m->loadavg);
    fprintf(f, "- git commit: %s\n", m->commit);
    fprintf(f, "- compiler: %s\n", BENCH_COMPILER);
    fprintf(f, "- command: `%s`\n", m->cmdline);
    fprintf(f, "- daemon: `dashd --endpoint %s --threads %d --log-level warn`, started by the "
               "bench; backend `%s`; stopped with SIGTERM: %s; it counted %llu requests, %llu "
               "errors\n",
            b->d.endpoint, DAEMON_THREADS, b->backend, how,
            (unsigned long long)b->daemon_requests, (unsigned long long)b->daemon_errors);
    fprintf(f, "- method: client-side time of each blocking call (dash_ping, dash_forward, "
               "dash_backward; eng_forward, eng_backward on an in-process engine of %d "
               "threads), CLOCK_MONOTONIC, warm-ups not counted; percentiles nearest-rank "
               "over every sample; run_us and queue_us are the daemon's own, from struct "
               "dash_result; bf16, full mask, scale 1/sqrt(D), schedule auto, random normal "
               "inputs; measured in %.1f s\n\n",
            DAEMON_THREADS, b->measured_s);

    fprintf(f, "## Latency: one client, one request at a time\n\n");
    fprintf(f, "| call | path | shape (B,H,S,D,mask) | N | p50 us | p99 us | max us "
               "| daemon run_us p50 | daemon queue_us p50 |\n");
    fprintf(f, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    /* Ping, then each daemon row followed by its in-process twin. */
    static const int order[] = {0, 1, 3, 2, 4};
    for (int k = 0; k < 5; k++) {
        if (order[k] >= b->nlat)
            continue;
        const struct lat_row *r = &b->lat[order[k]];
        char shape[64], run[32] = "-", queue[32] = "-";
        shape_label(r->shape, shape, sizeof shape);
        if (r->has_daemon_times) {
            snprintf(run, sizeof run, "%.0f", r->run_p50);
            snprintf(queue, sizeof queue, "%.0f", r->queue_p50);
        }
        fprintf(f, "| %s | %s | %s | %lld | %.1f | %.1f | %.1f | %s | %s |\n", r->call, r->path,
                shape, (long long)r->t.n, r->t.p50, r->t.p99, r->t.max, run, queue);
    }
    fprintf(f, "\nDaemon overhead at p50 (daemon p50 - in-process p50): forward %.1f us, "
               "backward %.1f us. The backward's schedule auto resolved to %s (W %d, tiles "
               "%dx%d). Outputs of the daemon and of the in-process engine, same inputs: "
               "out and lse %s, dq, dk and dv %s.\n\n",
            b->fwd_overhead_us, b->bwd_overhead_us, dash_sched_name(b->bwd_sched), b->bwd_wave,
            b->bwd_block_m, b->bwd_block_n,
            b->fwd_identical ? "identical bit for bit" : "DIFFERENT",
            b->bwd_identical ? "identical bit for bit" : "DIFFERENT");

    fprintf(f, "## Throughput: N client processes, synchronous forwards back to back\n\n");
    fprintf(f, "| shape (B,H,S,D,mask) | clients | window s | requests | total req/s "
               "| per-client p50 us | per-client p99 us | per-client daemon run_us p50 "
               "| per-client daemon queue_us p50 |\n");
    fprintf(f, "| --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- |\n");
    for (int i = 0; i < b->ntput; i++) {
        const struct tput_row *r = &b->tput[i];
        char shape[64], p50[128], p99[128], run[128], queue[128];
        shape_label(r->shape, shape, sizeof shape);
        per_client(r, offsetof(struct child_report, p50_us), 0, p50, sizeof p50);
        per_client(r, offsetof(struct child_report, p99_us), 0, p99, sizeof p99);
        per_client(r, offsetof(struct child_report, run_p50_us), 0, run, sizeof run);
        per_client(r, offsetof(struct child_report, queue_p50_us), 0, queue, sizeof queue);
        fprintf(f, "| %s | %d | %.0f | %llu | %.0f | %s | %s | %s | %s |\n", shape, r->clients,
                r->window_s, (unsigned long long)r->requests, r->total_rps, p50, p99, run,
                queue);
    }
    fprintf(f, "\nEach client is its own process with its own dash_client and one request in "
               "flight; total req/s is the sum of each client's requests over its own window. "
               "Per-client columns list the clients in order. The clients, the daemon's loop "
               "thread and its %d engine threads all share the machine's %ld CPUs.\n",
            DAEMON_THREADS, sysconf(_SC_NPROCESSORS_ONLN));
}

static int save_report(const struct bench *b, const struct meta *m, const char *dir,
                       char *ret_path, size_t cap)
{
    snprintf(ret_path, cap, "%s/daemon-roundtrip-%s.md", dir, m->date_day);
    FILE *f = fopen(ret_path, "w");
    if (!f)
        return -errno;
    write_report(f, b, m);
    int err = ferror(f);
    if (fclose(f) != 0 || err)
        return -EIO;
    return 0;
}

/* ---- main ------------------------------------------------------------------------------ */

static void usage(FILE *f, const char *argv0)
{
    fprintf(f, "usage: %s [--quick] [--out DIR]\n"
               "  --quick    10x fewer calls and %.0f s throughput windows (a smoke test)\n"
               "  --out DIR  also write DIR/daemon-roundtrip-YYYY-MM-DD.md\n"
               "Starts its own dashd, found next to this program.\n",
            argv0, QUICK_WINDOW_S);
}

int main(int argc, char **argv)
{
    static struct bench b; /* large: the throughput rows */
    const char *out_dir = NULL;
    int rc = 0;

    b.ping_n = PING_N, b.ping_warmup = PING_WARMUP, b.op_n = OP_N, b.op_warmup = OP_WARMUP;
    b.window_s = WINDOW_S;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            b.quick = 1;
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out_dir = argv[++i];
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout, argv[0]);
            return 0;
        } else {
            usage(stderr, argv[0]);
            return 2;
        }
    }
    if (b.quick) {
        b.ping_n /= QUICK_DIVISOR, b.ping_warmup /= QUICK_DIVISOR;
        b.op_n /= QUICK_DIVISOR, b.op_warmup /= QUICK_DIVISOR;
        b.window_s = QUICK_WINDOW_S;
    }

    /* Stamp the run before it starts, so the date names the day it was begun. */
    struct meta m;
    time_t t0 = time(NULL);
    struct tm utc;
    gmtime_r(&t0, &utc);
    strftime(m.date_iso, sizeof m.date_iso, "%Y-%m-%dT%H:%M:%SZ", &utc);
    strftime(m.date_day, sizeof m.date_day, "%Y-%m-%d", &utc);
    bmeta_cpu_model(m.cpu, sizeof m.cpu);
    bmeta_loadavg(m.loadavg, sizeof m.loadavg);
    bmeta_git_commit(m.commit, sizeof m.commit);
    bmeta_cmdline(m.cmdline, sizeof m.cmdline, argc, argv);

    if ((rc = benchd_init(&b.d, "bench_daemon", argv[0]))) {
        fprintf(stderr, "bench_daemon: no dashd next to %s (%s): %s; build it with "
                        "`make build/dashd`\n", argv[0], b.d.path, dash_strerror(rc));
        return 1;
    }

    double wall0 = now_us();
    fprintf(stderr, "bench_daemon: starting %s on %s\n", b.d.path, b.d.endpoint);
    char threads[16];
    snprintf(threads, sizeof threads, "%d", DAEMON_THREADS);
    const char *const args[] = {"--threads", threads, "--log-level", "warn", NULL};
    if ((rc = benchd_start(&b.d, args))) {
        fail("fork", rc);
        return 1;
    }
    if ((rc = benchd_wait_ready(&b.d, START_WAIT_MS)) || (rc = measure_latency(&b)) ||
        (rc = measure_throughput(&b)) || (rc = read_daemon_stats(&b)))
        goto stop_daemon;
    b.measured_s = (now_us() - wall0) * 1e-6;
    fprintf(stderr, "bench_daemon: measured in %.1f s\n", b.measured_s);

stop_daemon:
    if (benchd_stop(&b.d, STOP_WAIT_MS) != 0 && !rc)
        rc = DASH_EIO;
    if (rc)
        return 1;

    write_report(stdout, &b, &m);
    if (fflush(stdout) != 0) {
        fail("stdout", -EIO);
        return 1;
    }
    if (out_dir) {
        char path[4096];
        if ((rc = save_report(&b, &m, out_dir, path, sizeof path))) {
            fprintf(stderr, "bench_daemon: cannot write %s: %s\n", path, dash_strerror(rc));
            return 1;
        }
        fprintf(stderr, "bench_daemon: report written to %s\n", path);
    }
    if (!b.fwd_identical || !b.bwd_identical) {
        fprintf(stderr, "\n*** bench_daemon: the daemon's outputs differ from the in-process "
                        "engine's for the same inputs (see the report) ***\n\n");
        return 1;
    }
    return 0;
}
