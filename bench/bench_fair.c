// SPDX-License-Identifier: BSD-3-Clause
/*
 * bench_fair.c - fairness between clients of unequal request rates: a heavy client keeps
 * K medium forwards in flight without pause while a light client sends one tiny forward
 * every 20 ms; the light client's latency (its own clock, send to reply) is what one FIFO
 * in dashd made seconds and the round robin between clients (daemon/queue.c) keeps near
 * one heavy op. Reports p50/p99/max of the tiny op alone and beside the heavy client,
 * and the heavy client's throughput.
 *
 *   bench_fair [--seconds S] [--inflight K] [--out DIR]
 *
 * dashd is the one next to this program (benchd.h): copy the program next to another
 * build's dashd to measure that one.
 */
#include "bench/benchd.h"
#include "bench/benchmeta.h"
#include "bench/benchtime.h"
#include "client/dash.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TINY_EVERY_MS 20
#define LAT_MAX 100000

struct op {
    struct dash_buffer *buf;
    struct dash_tensor q, k, v, o, l;
};

/* A bf16 causal forward of (1, s, h, 64) in one shm buffer, inputs set to small values. */
static int op_make(struct dash_client *c, int64_t s, int64_t h, struct op *op)
{
    const int64_t d = 64;
    uint64_t t = (uint64_t)(s * h * d * 2);
    int rc = dash_shm_alloc(c, 4 * t + (uint64_t)(h * s * 4), &op->buf);
    if (rc)
        return rc;
    uint16_t *mem = dash_buffer_data(op->buf);
    for (uint64_t i = 0; i < 3 * t / 2; i++)
        mem[i] = (uint16_t)(0x3c00 + (i * 2654435761u >> 24) % 64); /* bf16 ~ 0.0078..0.01 */
    op->q = dash_tensor_dense(op->buf, 0, 1, s, h, d);
    op->k = dash_tensor_dense(op->buf, t, 1, s, h, d);
    op->v = dash_tensor_dense(op->buf, 2 * t, 1, s, h, d);
    op->o = dash_tensor_dense(op->buf, 3 * t, 1, s, h, d);
    op->l = dash_tensor_lse(op->buf, 4 * t, 1, h, s);
    return 0;
}

static const struct dash_attn ATTN = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};

static double pct(double *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* The light client for `seconds`: latencies of its tiny forwards into lat (sorted). */
static size_t light(const char *endpoint, double seconds, double *lat)
{
    struct dash_connect_opts o = {.client_name = "bench-light", .timeout_ms = 60000};
    struct dash_client *c = NULL;
    struct op op;
    size_t n = 0;
    if (dash_connect(endpoint, &o, &c) != 0 || op_make(c, 64, 1, &op) != 0) {
        fprintf(stderr, "bench_fair: light client: cannot connect or allocate\n");
        dash_close(c);
        return 0;
    }
    double end = btime_now_ms() + seconds * 1000;
    while (btime_now_ms() < end && n < LAT_MAX) {
        double t0 = btime_now_ms();
        int rc = dash_forward(c, &ATTN, &op.q, &op.k, &op.v, &op.o, &op.l, NULL);
        double t = btime_now_ms() - t0;
        if (rc) {
            fprintf(stderr, "bench_fair: tiny forward: %s: %s\n", dash_errname(rc),
                    dash_last_error(c));
            break;
        }
        lat[n++] = t;
        double wait = TINY_EVERY_MS - t;
        if (wait > 0)
            usleep((useconds_t)(wait * 1000));
    }
    dash_close(c);
    qsort(lat, n, sizeof *lat, btime_cmp_double);
    return n;
}

/* The heavy client until killed: K medium forwards always in flight; writes its count of
 * completed ops and their mean run time to fd when told to stop (SIGTERM). */
static volatile sig_atomic_t heavy_stop;

static void on_term(int sig)
{
    (void)sig;
    heavy_stop = 1;
}

static int heavy(const char *endpoint, int inflight, int fd)
{
    signal(SIGTERM, on_term);
    struct dash_connect_opts o = {.client_name = "bench-heavy", .timeout_ms = 60000};
    struct dash_client *c = NULL;
    struct op op;
    if (dash_connect(endpoint, &o, &c) != 0 || op_make(c, 512, 4, &op) != 0)
        return 10;
    uint64_t *t = calloc((size_t)inflight, sizeof *t);
    for (int i = 0; i < inflight; i++)
        if (dash_forward_submit(c, &ATTN, &op.q, &op.k, &op.v, &op.o, &op.l, &t[i]) != 0)
            return 11;
    uint64_t done = 0, run_us = 0;
    for (int i = 0; !heavy_stop; i = (i + 1) % inflight) {
        struct dash_result r;
        if (dash_wait(c, t[i], -1, &r) != 0)
            return 12;
        done++;
        run_us += r.run_us;
        if (dash_forward_submit(c, &ATTN, &op.q, &op.k, &op.v, &op.o, &op.l, &t[i]) != 0)
            return 13;
    }
    uint64_t out[2] = {done, done ? run_us / done : 0};
    if (write(fd, out, sizeof out) != sizeof out)
        return 14;
    free(t);
    dash_close(c); /* the ops still in flight are dropped with the session */
    return 0;
}

int main(int argc, char **argv)
{
    double seconds = 10;
    int inflight = 16;
    const char *out_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--inflight") && i + 1 < argc)
            inflight = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out_dir = argv[++i];
        else {
            fprintf(stderr, "usage: bench_fair [--seconds S] [--inflight K] [--out DIR]\n");
            return 2;
        }
    }
    if (seconds <= 0 || inflight < 1)
        return 2;
    struct benchd d;
    if (benchd_init(&d, "bench_fair", argv[0]) != 0) {
        fprintf(stderr, "bench_fair: no dashd at %s\n", d.path);
        return 1;
    }
    const char *args[] = {"--backend", "cpu", NULL};
    if (benchd_start(&d, args) != 0 || benchd_wait_ready(&d, 10000) != 0)
        return 1;
    static double alone[LAT_MAX], busy[LAT_MAX];
    size_t n_alone = light(d.endpoint, seconds / 4, alone);
    int pfd[2];
    if (pipe(pfd) != 0)
        return 1;
    pid_t kid = fork();
    if (kid == 0) {
        close(pfd[0]);
        _exit(heavy(d.endpoint, inflight, pfd[1]));
    }
    close(pfd[1]);
    usleep(300000); /* its ops are queued */
    size_t n_busy = light(d.endpoint, seconds, busy);
    kill(kid, SIGTERM);
    uint64_t hv[2] = {0, 0};
    int ok = read(pfd[0], hv, sizeof hv) == sizeof hv;
    int st;
    waitpid(kid, &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    int stopped = benchd_stop(&d, 10000) == 0;

    char cpu[256], load[64], commit[64], cmd[1024], when[64];
    bmeta_cpu_model(cpu, sizeof cpu);
    bmeta_loadavg(load, sizeof load);
    bmeta_git_commit(commit, sizeof commit);
    bmeta_cmdline(cmd, sizeof cmd, argc, argv);
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    char report[16384];
    snprintf(report, sizeof report,
             "| dashd | tiny forward alone p50 / p99 / max (ms) | beside the heavy client p50 / "
             "p99 / max (ms) | heavy: ops/s, run per op (ms) |\n"
             "| --- | --- | --- | --- |\n"
             "| %s | %.2f / %.2f / %.2f (%zu) | %.2f / %.2f / %.2f (%zu) | %.1f, %.2f |\n\n"
             "%s, %s, load %s, commit %s; `%s`; heavy: (1, 512, 4, 64) bf16 causal, %d in "
             "flight; tiny: (1, 64, 1, 64), one every %d ms; dashd --backend cpu (default "
             "threads)%s\n",
             d.path, pct(alone, n_alone, 50), pct(alone, n_alone, 99),
             n_alone ? alone[n_alone - 1] : 0, n_alone, pct(busy, n_busy, 50),
             pct(busy, n_busy, 99), n_busy ? busy[n_busy - 1] : 0, n_busy,
             (double)hv[0] / seconds, (double)hv[1] / 1000.0, when, cpu, load, commit, cmd,
             inflight, TINY_EVERY_MS, ok && stopped ? "" : " - THE RUN HAD ERRORS (see stderr)");
    fputs(report, stdout);
    if (out_dir) {
        char path[512], day[16];
        strftime(day, sizeof day, "%Y-%m-%d", gmtime(&now));
        snprintf(path, sizeof path, "%s/fairness-%s.md", out_dir, day);
        FILE *f = fopen(path, "a");
        if (f) {
            fputs(report, f);
            fputs("\n", f);
            fclose(f);
        }
    }
    return ok && stopped ? 0 : 1;
}
