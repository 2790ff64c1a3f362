// SPDX-License-Identifier: BSD-3-Clause
/*
 * bench_ping.c - dashd's round trip against its floor: a bare ZeroMQ request/reply over
 * ipc, measured in the same run.
 *
 *   bench_ping [--samples N] [--out DIR] [--check]
 *
 * Four ways to go to another process and back, one request at a time, on private ipc
 * endpoints, each sample timed on CLOCK_MONOTONIC from before the send to after the
 * reply is in:
 *
 *   zmq floor      a DEALER sends the bytes of an encoded Ping to a ROUTER in a child
 *                  process that sends them back (blocking zmq_send/zmq_recv both sides)
 *   raw ping       the same DEALER kind against dashd: encode a Ping, decode the reply
 *   dash_ping      libdash's dash_ping on a client with a session
 *   tiny forward   dash_forward, bf16 B=1 S=64 H=1 D=64 full mask, on dashd's CPU
 *                  backend with 1 engine thread; its daemon overhead is the round trip
 *                  minus the run_us the daemon reports (copy in, compute, copy out)
 *
 * The four take turns sample by sample (after warm-ups), so load that comes and goes on a
 * shared machine falls on all of them alike.
 * Targets (issue 19): dash_ping p50 <= 1.3 x the floor's p50; the tiny forward's
 * overhead p50 <= 1.5 x the floor's p50. Percentiles are nearest-rank.
 *
 * The report goes to stdout and, with --out DIR, also to DIR/ping-floor-YYYY-MM-DD.md.
 * --check: exit 3 when a target is missed (`make test` runs a short one without it;
 * CI machines are too noisy for a ratio to gate on). Exit 1 when something fails.
 */
#include "client/dash.h"
#include "proto/wire.h"

#include "bench/benchd.h"
#include "bench/benchmeta.h"
#include "bench/benchtime.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define WARMUP 200
#define PING_TARGET 1.3
#define FORWARD_TARGET 1.5

enum way { FLOOR, RAW, PING, FORWARD, WAYS };
static const char *const way_names[WAYS] = {"zmq floor", "raw ping", "dash_ping",
                                            "tiny forward"};

struct samples {
    double *v;
    size_t n;
};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static double pct(struct samples *s, double p)
{
    qsort(s->v, s->n, sizeof *s->v, btime_cmp_double);
    size_t rank = (size_t)(p / 100.0 * (double)s->n + 0.999999);
    rank = rank < 1 ? 1 : rank > s->n ? s->n : rank;
    return s->v[rank - 1];
}

static void fail(const char *what, int rc)
{
    fprintf(stderr, "bench_ping: %s: %s\n", what, rc ? dash_strerror(rc) : strerror(errno));
}

/* ---- the processes ------------------------------------------------------------------------ */

/* The echo server: a ROUTER that sends every message back, until the parent dies or
 * sends "quit". */
static void echo_main(const char *endpoint)
{
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_ROUTER);
    if (!s || zmq_bind(s, endpoint) != 0)
        _exit(1);
    for (;;) {
        zmq_msg_t rid, body;
        zmq_msg_init(&rid);
        zmq_msg_init(&body);
        if (zmq_msg_recv(&rid, s, 0) < 0 || zmq_msg_recv(&body, s, 0) < 0)
            _exit(1);
        if (zmq_msg_size(&body) == 4 && memcmp(zmq_msg_data(&body), "quit", 4) == 0)
            break;
        if (zmq_msg_send(&rid, s, ZMQ_SNDMORE) < 0 || zmq_msg_send(&body, s, 0) < 0)
            _exit(1);
    }
    zmq_close(s);
    zmq_ctx_term(ctx);
    _exit(0);
}

/* The echo server, as a child that dies with us. */
static pid_t spawn_echo(const char *endpoint)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
        _exit(127);
    echo_main(endpoint);
    _exit(0);
}

/* ---- one sample of each way ----------------------------------------------------------------- */

struct bench {
    void *zctx, *floor_sock, *raw_sock;
    void *ping_bytes;
    size_t ping_len;
    struct dash_client *c;
    struct dash_buffer *buf;
    struct dash_tensor q, k, v, out, lse;
    uint64_t next_id;
};

static double sample_floor(struct bench *b)
{
    char reply[256];
    double t0 = now_us();
    if (zmq_send(b->floor_sock, b->ping_bytes, b->ping_len, 0) < 0 ||
        zmq_recv(b->floor_sock, reply, sizeof reply, 0) < 0)
        return -1;
    return now_us() - t0;
}

static double sample_raw(struct bench *b)
{
    Dash__Ping p = DASH__PING__INIT;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = ++b->next_id;
    req.body_case = DASH__REQUEST__BODY_PING;
    req.ping = &p;
    unsigned char out[64], in[256];
    double t0 = now_us();
    size_t len = dash__request__pack(&req, out);
    if (zmq_send(b->raw_sock, out, len, 0) < 0)
        return -1;
    int n = zmq_recv(b->raw_sock, in, sizeof in, 0);
    Dash__Reply *rep = n > 0 ? wire_decode_reply(in, (size_t)n, WIRE_DECODE_BUDGET) : NULL;
    double t = now_us() - t0;
    int ok = rep && rep->id == req.id && rep->code == 0;
    wire_free_reply(rep);
    return ok ? t : -1;
}

static double sample_ping(struct bench *b)
{
    double t0 = now_us();
    int rc = dash_ping(b->c, 5000, NULL);
    return rc ? -1 : now_us() - t0;
}

/* The round trip of one tiny forward, and the daemon's run_us and queue_us of it. */
static double sample_forward(struct bench *b, double *ret_run_us, double *ret_queue_us)
{
    static const struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_FULL};
    struct dash_result res;
    double t0 = now_us();
    int rc = dash_forward(b->c, &a, &b->q, &b->k, &b->v, &b->out, &b->lse, &res);
    double t = now_us() - t0;
    *ret_run_us = (double)res.run_us;
    *ret_queue_us = (double)res.queue_us;
    return rc ? -1 : t;
}

static int setup(struct bench *b, const char *floor_ep, const char *dashd_ep)
{
    b->zctx = zmq_ctx_new();
    b->floor_sock = zmq_socket(b->zctx, ZMQ_DEALER);
    b->raw_sock = zmq_socket(b->zctx, ZMQ_DEALER);
    int zero = 0;
    if (!b->floor_sock || !b->raw_sock ||
        zmq_setsockopt(b->floor_sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(b->raw_sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(b->floor_sock, floor_ep) != 0 || zmq_connect(b->raw_sock, dashd_ep) != 0) {
        fail("zmq sockets", 0);
        return -1;
    }
    /* the floor echoes what a Ping request is on the wire */
    Dash__Ping p = DASH__PING__INIT;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 12345;
    req.body_case = DASH__REQUEST__BODY_PING;
    req.ping = &p;
    if (wire_encode(&req.base, &b->ping_bytes, &b->ping_len) != 0)
        return -1;
    struct dash_connect_opts o = {.client_name = "bench_ping", .timeout_ms = 10000};
    int rc = -1;
    for (int i = 0; i < 200 && rc != 0; i++) {
        rc = dash_connect(dashd_ep, &o, &b->c);
        if (rc)
            usleep(20000);
    }
    if (rc) {
        fail("dash_connect", rc);
        return -1;
    }
    const int64_t B = 1, S = 64, H = 1, D = 64;
    const uint64_t tb = (uint64_t)(B * S * H * D * 2), lb = (uint64_t)(B * H * S * 4);
    if ((rc = dash_shm_alloc(b->c, 4 * tb + lb, &b->buf)) != 0) {
        fail("dash_shm_alloc", rc);
        return -1;
    }
    uint16_t *x = dash_buffer_data(b->buf);
    uint32_t s = 12345;
    for (uint64_t i = 0; i < 3 * tb / 2; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (uint16_t)(0x3c00 | (s >> 23)); /* bf16 in [1, 2) */
    }
    b->q = dash_tensor_dense(b->buf, 0, B, S, H, D);
    b->k = dash_tensor_dense(b->buf, tb, B, S, H, D);
    b->v = dash_tensor_dense(b->buf, 2 * tb, B, S, H, D);
    b->out = dash_tensor_dense(b->buf, 3 * tb, B, S, H, D);
    b->lse = dash_tensor_lse(b->buf, 4 * tb, B, H, S);
    return 0;
}

int main(int argc, char **argv)
{
    size_t n = 20000;
    const char *out_dir = NULL;
    int check = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--samples") && i + 1 < argc)
            n = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out_dir = argv[++i];
        else if (!strcmp(argv[i], "--check"))
            check = 1;
        else {
            fprintf(stderr, "usage: bench_ping [--samples N] [--out DIR] [--check]\n");
            return 2;
        }
    }
    if (n < 1)
        n = 1;
    char floor_ep[96];
    struct benchd dd;
    if (benchd_init(&dd, "bench_ping", argv[0]) != 0) {
        fprintf(stderr, "bench_ping: no dashd next to this program (%s)\n", dd.path);
        return 1;
    }
    snprintf(floor_ep, sizeof floor_ep, "ipc:///tmp/bench-ping-zmq-%d.sock", (int)getpid());
    static const char *const dashd_args[] = {"--backend", "cpu", "--threads", "1",
                                             "--log-level", "warn", NULL};
    pid_t echo = spawn_echo(floor_ep);
    int daemon = benchd_start(&dd, dashd_args) == 0 && benchd_wait_ready(&dd, 10000) == 0;
    int status = 1;
    struct bench b = {0};
    struct samples s[WAYS], overhead, queued;
    for (int w = 0; w < WAYS; w++)
        s[w] = (struct samples){calloc(n, sizeof(double)), 0};
    overhead = (struct samples){calloc(n, sizeof(double)), 0};
    queued = (struct samples){calloc(n, sizeof(double)), 0};
    if (echo < 0 || !daemon || setup(&b, floor_ep, dd.endpoint) != 0)
        goto stop;
    double run, queue;
    for (int i = 0; i < WARMUP; i++)
        if (sample_floor(&b) < 0 || sample_raw(&b) < 0 || sample_ping(&b) < 0 ||
            sample_forward(&b, &run, &queue) < 0) {
            fail("warm-up", 0);
            goto stop;
        }
    for (size_t i = 0; i < n; i++) {
        for (int w = 0; w < WAYS; w++) {
            double t = w == FLOOR ? sample_floor(&b) : w == RAW ? sample_raw(&b)
                     : w == PING ? sample_ping(&b) : sample_forward(&b, &run, &queue);
            if (t < 0) {
                fail(way_names[w], 0);
                goto stop;
            }
            s[w].v[s[w].n++] = t;
            if (w == FORWARD) {
                overhead.v[overhead.n++] = t - run;
                queued.v[queued.n++] = queue;
            }
        }
    }
    status = 0;

stop:
    if (b.floor_sock)
        (void)zmq_send(b.floor_sock, "quit", 4, 0);
    if (b.c) {
        if (b.buf)
            (void)dash_buffer_free(b.c, b.buf);
        dash_close(b.c);
    }
    if (b.floor_sock)
        zmq_close(b.floor_sock);
    if (b.raw_sock)
        zmq_close(b.raw_sock);
    if (b.zctx)
        zmq_ctx_term(b.zctx);
    free(b.ping_bytes);
    if (dd.pid > 0 && benchd_stop(&dd, 10000) != 0) {
        fprintf(stderr, "bench_ping: dashd did not exit cleanly\n");
        status = 1;
    }
    if (echo > 0) {
        kill(echo, SIGTERM);
        (void)waitpid(echo, NULL, 0);
    }
    if (status != 0)
        return status;

    char cpu[256], load[64], commit[64], cmd[1024], date[16];
    bmeta_cpu_model(cpu, sizeof cpu);
    bmeta_loadavg(load, sizeof load);
    bmeta_git_commit(commit, sizeof commit);
    bmeta_cmdline(cmd, sizeof cmd, argc, argv);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    double floor50 = pct(&s[FLOOR], 50), ping50 = pct(&s[PING], 50);
    double over50 = pct(&overhead, 50);
    double ping_ratio = ping50 / floor50, fwd_ratio = over50 / floor50;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fprintf(f, "# dashd round trip against a bare ZeroMQ request/reply (%s)\n\n", date);
    fprintf(f, "- machine: %s, %ld online CPUs; load average before writing: %s\n", cpu,
            sysconf(_SC_NPROCESSORS_ONLN), load);
    fprintf(f, "- commit: %s; command: `%s`\n", commit, cmd);
    fprintf(f, "- %zu samples per way, the ways taking turns sample by sample, after %d "
            "warm-ups; dashd --backend cpu --threads 1; times in us, client side, before send "
            "to reply in\n\n", s[FLOOR].n, WARMUP);
    fprintf(f, "| way | p50 | p90 | p99 | max |\n| --- | ---: | ---: | ---: | ---: |\n");
    for (int w = 0; w < WAYS; w++)
        fprintf(f, "| %s | %.1f | %.1f | %.1f | %.1f |\n", way_names[w], pct(&s[w], 50),
                pct(&s[w], 90), pct(&s[w], 99), pct(&s[w], 100));
    fprintf(f, "| tiny forward minus its run_us (daemon overhead) | %.1f | %.1f | %.1f | %.1f |\n",
            over50, pct(&overhead, 90), pct(&overhead, 99), pct(&overhead, 100));
    fprintf(f, "| of which receipt to the worker starting it (queue_us) | %.1f | %.1f | %.1f | %.1f |\n",
            pct(&queued, 50), pct(&queued, 90), pct(&queued, 99), pct(&queued, 100));
    fprintf(f, "\n- dash_ping p50 / floor p50 = **%.2f** (target <= %.1f: %s)\n", ping_ratio,
            PING_TARGET, ping_ratio <= PING_TARGET ? "met" : "MISSED");
    fprintf(f, "- tiny forward's daemon overhead p50 / floor p50 = **%.2f** (target <= %.1f: "
            "%s)\n", fwd_ratio, FORWARD_TARGET, fwd_ratio <= FORWARD_TARGET ? "met" : "MISSED");
    fclose(f);
    fputs(text, stdout);
    if (out_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/ping-floor-%s.md", out_dir, date);
        FILE *o = fopen(path, "w");
        if (!o || fwrite(text, 1, len, o) != len || fclose(o) != 0) {
            perror(path);
            status = 1;
        } else {
            fprintf(stderr, "bench_ping: report in %s\n", path);
        }
    }
    free(text);
    for (int w = 0; w < WAYS; w++)
        free(s[w].v);
    free(overhead.v);
    free(queued.v);
    if (check && (ping_ratio > PING_TARGET || fwd_ratio > FORWARD_TARGET))
        return 3;
    return status;
}
