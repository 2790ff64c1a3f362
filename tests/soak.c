// SPDX-License-Identifier: BSD-3-Clause
/*
 * soak.c - see soak.h.
 */
#include "soak.h"

#include "testutil.h"
#include "client/dash.h"
#include "kernels/cpu/engine.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROBS 3
#define MAX_VANISHED 8192
#define SETTLE_MS 20000

static const char *const kind_names[SOAK_KINDS] = {"forward", "backward", "ping", "stats",
                                                   "bad request", "buffer churn", "vanish",
                                                   "reconnect"};

const char *soak_kind_name(enum soak_kind k)
{
    return k < SOAK_KINDS ? kind_names[k] : "?";
}

/* What the clients and the parent share (MAP_SHARED). */
struct shared {
    atomic_uint_fast64_t done;
    atomic_uint_fast64_t sent[SOAK_KINDS];
    atomic_uint_fast64_t good, wrong_bits, wrong_code;
    atomic_int n_vanished;
    pid_t vanished[MAX_VANISHED];
};

/* One problem in the client's buffer: inputs, the engine's forward outputs as inputs of
 * the backward (out_ref, lse_ref), and the areas the daemon writes. */
struct prob {
    int32_t b, sq, sk, hq, hkv, d;
    enum dash_mask mask;
    uint64_t q, k, v, dout, out_ref, lse_ref, out, lse, dq, dk, dv;
    uint64_t qb, kb, lb; /* bytes of a q-shaped, kv-shaped and lse tensor */
    unsigned char *want_dq, *want_dk, *want_dv;
};

struct client {
    const struct soak_opts *o;
    struct shared *sh;
    struct dash_client *c;
    struct dash_buffer *buf;
    struct prob p[PROBS];
    uint64_t total;
    unsigned char *inputs; /* the buffer's first `total` bytes as set up */
    struct tu_rng rng;
    int idx;
};

static const int32_t shapes[PROBS][7] = {
    /* b, sq, sk, hq, hkv, d, causal */
    {1, 32, 32, 2, 1, 32, 1},
    {1, 48, 64, 4, 2, 64, 0},
    {2, 16, 16, 2, 2, 32, 1},
};

static uint64_t place(uint64_t *at, uint64_t n)
{
    uint64_t here = *at;
    *at += (n + 63) & ~(uint64_t)63;
    return here;
}

static struct dash_attn attn_of(const struct prob *p)
{
    struct dash_attn a = {.dtype = DASH_BF16, .mask = p->mask, .schedule = DASH_SCHED_SHIFT,
                          .wave = 4, .block_m = 16, .block_n = 16};
    return a;
}

static void bad(struct client *cl, const char *what, int rc)
{
    atomic_fetch_add(&cl->sh->wrong_code, 1);
    fprintf(stderr, "soak client %d: %s: %d (%s)\n", cl->idx, what, rc, dash_strerror(rc));
}

/* Lay out the problems, draw inputs, compute the engine's outputs in this process. */
static int prepare(struct client *cl)
{
    uint64_t at = 0;
    for (int i = 0; i < PROBS; i++) {
        struct prob *p = &cl->p[i];
        p->b = shapes[i][0], p->sq = shapes[i][1], p->sk = shapes[i][2];
        p->hq = shapes[i][3], p->hkv = shapes[i][4], p->d = shapes[i][5];
        p->mask = shapes[i][6] ? DASH_MASK_CAUSAL : DASH_MASK_FULL;
        p->qb = (uint64_t)p->b * p->sq * p->hq * p->d * 2;
        p->kb = (uint64_t)p->b * p->sk * p->hkv * p->d * 2;
        p->lb = (uint64_t)p->b * p->hq * p->sq * 4;
        p->q = place(&at, p->qb), p->k = place(&at, p->kb), p->v = place(&at, p->kb);
        p->dout = place(&at, p->qb), p->out_ref = place(&at, p->qb), p->lse_ref = place(&at, p->lb);
        p->out = place(&at, p->qb), p->lse = place(&at, p->lb), p->dq = place(&at, p->qb);
        p->dk = place(&at, p->kb), p->dv = place(&at, p->kb);
    }
    cl->total = at;
    cl->inputs = calloc(1, at);
    if (!cl->inputs)
        return -1;
    struct eng *e = eng_new(1);
    if (!e)
        return -1;
    int rc = 0;
    for (int i = 0; i < PROBS && rc == 0; i++) {
        struct prob *p = &cl->p[i];
        unsigned char *m = cl->inputs;
        tu_fill(m + p->q, DTYPE_BF16, (int64_t)(p->qb / 2), &cl->rng, 1.0);
        tu_fill(m + p->k, DTYPE_BF16, (int64_t)(p->kb / 2), &cl->rng, 1.0);
        tu_fill(m + p->v, DTYPE_BF16, (int64_t)(p->kb / 2), &cl->rng, 1.0);
        tu_fill(m + p->dout, DTYPE_BF16, (int64_t)(p->qb / 2), &cl->rng, 1.0);
        p->want_dq = malloc(p->qb);
        p->want_dk = malloc(p->kb);
        p->want_dv = malloc(p->kb);
        if (!p->want_dq || !p->want_dk || !p->want_dv)
            return -1;
        struct attn_problem pr = {.batch = p->b, .seqlen_q = p->sq, .seqlen_k = p->sk,
                                  .heads_q = p->hq, .heads_kv = p->hkv, .head_dim = p->d,
                                  .dtype = DTYPE_BF16,
                                  .mask = p->mask == DASH_MASK_CAUSAL ? SCHED_MASK_CAUSAL
                                                                      : SCHED_MASK_FULL,
                                  .scale = (float)(1.0 / sqrt((double)p->d))};
        struct attn_config cfg = {.sched = SCHED_SHIFT, .w = 4, .block_m = 16, .block_n = 16};
#define T(ptr, s, h) attn_dense(ptr, s, h, p->d)
        rc = eng_forward(e, &pr, &cfg, T(m + p->out_ref, p->sq, p->hq), (float *)(m + p->lse_ref),
                         T(m + p->q, p->sq, p->hq), T(m + p->k, p->sk, p->hkv),
                         T(m + p->v, p->sk, p->hkv), NULL);
        if (rc == 0)
            rc = eng_backward(e, &pr, &cfg, T(p->want_dq, p->sq, p->hq),
                              T(p->want_dk, p->sk, p->hkv), T(p->want_dv, p->sk, p->hkv),
                              T(m + p->q, p->sq, p->hq), T(m + p->k, p->sk, p->hkv),
                              T(m + p->v, p->sk, p->hkv), T(m + p->out_ref, p->sq, p->hq),
                              (float *)(m + p->lse_ref), T(m + p->dout, p->sq, p->hq), NULL);
#undef T
    }
    eng_free(e);
    return rc;
}

static int connect_and_fill(struct client *cl)
{
    char name[32];
    snprintf(name, sizeof name, "soak-%d", cl->idx);
    struct dash_connect_opts o = {.client_name = name, .run_tag = "soak", .timeout_ms = 60000};
    int rc = dash_connect(cl->o->endpoint, &o, &cl->c);
    if (rc == 0 && (rc = dash_shm_alloc(cl->c, cl->total, &cl->buf)) == 0)
        memcpy(dash_buffer_data(cl->buf), cl->inputs, cl->total);
    return rc;
}

static int do_forward(struct client *cl, const struct prob *p)
{
    unsigned char *m = dash_buffer_data(cl->buf);
    tu_poison(m + p->out, p->qb);
    tu_poison(m + p->lse, p->lb);
    struct dash_attn a = attn_of(p);
    struct dash_tensor q = dash_tensor_dense(cl->buf, p->q, p->b, p->sq, p->hq, p->d);
    struct dash_tensor k = dash_tensor_dense(cl->buf, p->k, p->b, p->sk, p->hkv, p->d);
    struct dash_tensor v = dash_tensor_dense(cl->buf, p->v, p->b, p->sk, p->hkv, p->d);
    struct dash_tensor out = dash_tensor_dense(cl->buf, p->out, p->b, p->sq, p->hq, p->d);
    struct dash_tensor lse = dash_tensor_lse(cl->buf, p->lse, p->b, p->hq, p->sq);
    int rc = dash_forward(cl->c, &a, &q, &k, &v, &out, &lse, NULL);
    if (rc) {
        bad(cl, "forward", rc);
        return 0;
    }
    if (memcmp(m + p->out, cl->inputs + p->out_ref, p->qb) != 0 ||
        memcmp(m + p->lse, cl->inputs + p->lse_ref, p->lb) != 0) {
        atomic_fetch_add(&cl->sh->wrong_bits, 1);
        fprintf(stderr, "soak client %d: a forward's outputs differ from the engine's\n", cl->idx);
        return 0;
    }
    return 1;
}

static int do_backward(struct client *cl, const struct prob *p)
{
    unsigned char *m = dash_buffer_data(cl->buf);
    tu_poison(m + p->dq, p->qb);
    tu_poison(m + p->dk, p->kb);
    tu_poison(m + p->dv, p->kb);
    struct dash_attn a = attn_of(p);
    struct dash_tensor q = dash_tensor_dense(cl->buf, p->q, p->b, p->sq, p->hq, p->d);
    struct dash_tensor k = dash_tensor_dense(cl->buf, p->k, p->b, p->sk, p->hkv, p->d);
    struct dash_tensor v = dash_tensor_dense(cl->buf, p->v, p->b, p->sk, p->hkv, p->d);
    struct dash_tensor out = dash_tensor_dense(cl->buf, p->out_ref, p->b, p->sq, p->hq, p->d);
    struct dash_tensor lse = dash_tensor_lse(cl->buf, p->lse_ref, p->b, p->hq, p->sq);
    struct dash_tensor dout = dash_tensor_dense(cl->buf, p->dout, p->b, p->sq, p->hq, p->d);
    struct dash_tensor dq = dash_tensor_dense(cl->buf, p->dq, p->b, p->sq, p->hq, p->d);
    struct dash_tensor dk = dash_tensor_dense(cl->buf, p->dk, p->b, p->sk, p->hkv, p->d);
    struct dash_tensor dv = dash_tensor_dense(cl->buf, p->dv, p->b, p->sk, p->hkv, p->d);
    int rc = dash_backward(cl->c, &a, &q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, NULL);
    if (rc) {
        bad(cl, "backward", rc);
        return 0;
    }
    if (memcmp(m + p->dq, p->want_dq, p->qb) != 0 || memcmp(m + p->dk, p->want_dk, p->kb) != 0 ||
        memcmp(m + p->dv, p->want_dv, p->kb) != 0) {
        atomic_fetch_add(&cl->sh->wrong_bits, 1);
        fprintf(stderr, "soak client %d: a backward's outputs differ from the engine's\n",
                cl->idx);
        return 0;
    }
    return 1;
}

/* One of three requests the daemon must refuse, each with its own code. */
static int do_bad(struct client *cl, const struct prob *p)
{
    struct dash_attn a = attn_of(p);
    int which = (int)(tu_next(&cl->rng) % 3), want, rc;
    int32_t d = p->d;
    struct dash_tensor q = dash_tensor_dense(cl->buf, p->q, p->b, p->sq, p->hq, d);
    struct dash_tensor k = dash_tensor_dense(cl->buf, p->k, p->b, p->sk, p->hkv, d);
    struct dash_tensor v = dash_tensor_dense(cl->buf, p->v, p->b, p->sk, p->hkv, d);
    struct dash_tensor out = dash_tensor_dense(cl->buf, p->out, p->b, p->sq, p->hq, d);
    struct dash_tensor lse = dash_tensor_lse(cl->buf, p->lse, p->b, p->hq, p->sq);
    if (which == 0) { /* head dim 16: below what the engine serves */
        q = dash_tensor_dense(cl->buf, p->q, p->b, p->sq, p->hq, 16);
        k = dash_tensor_dense(cl->buf, p->k, p->b, p->sk, p->hkv, 16);
        v = dash_tensor_dense(cl->buf, p->v, p->b, p->sk, p->hkv, 16);
        out = dash_tensor_dense(cl->buf, p->out, p->b, p->sq, p->hq, 16);
        want = DASH_EHEADDIM;
    } else if (which == 1) { /* q reaches past the end of the buffer */
        q.offset = dash_buffer_size(cl->buf) - 2;
        want = DASH_EBOUNDS;
    } else { /* k's head dim disagrees with q's */
        k = dash_tensor_dense(cl->buf, p->k, p->b, p->sk, p->hkv, d / 2);
        want = DASH_ESHAPE;
    }
    rc = dash_forward(cl->c, &a, &q, &k, &v, &out, &lse, NULL);
    if (rc != want) {
        char what[64];
        snprintf(what, sizeof what, "bad request %d answered %d, not %d", which, rc, want);
        bad(cl, what, rc);
        return 0;
    }
    return 1;
}

/* A process that connects, registers, submits a forward and exits without a word. */
static int do_vanish(struct client *cl, const struct prob *p)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return 0;
    if (pid == 0) {
        struct dash_connect_opts o = {.client_name = "soak-vanish", .timeout_ms = 60000};
        struct dash_client *c;
        struct dash_buffer *b;
        uint64_t ticket;
        if (dash_connect(cl->o->endpoint, &o, &c) != 0 || dash_shm_alloc(c, cl->total, &b) != 0)
            _exit(1);
        memcpy(dash_buffer_data(b), cl->inputs, cl->total);
        struct dash_attn a = attn_of(p);
        struct dash_tensor q = dash_tensor_dense(b, p->q, p->b, p->sq, p->hq, p->d);
        struct dash_tensor k = dash_tensor_dense(b, p->k, p->b, p->sk, p->hkv, p->d);
        struct dash_tensor v = dash_tensor_dense(b, p->v, p->b, p->sk, p->hkv, p->d);
        struct dash_tensor out = dash_tensor_dense(b, p->out, p->b, p->sq, p->hq, p->d);
        struct dash_tensor lse = dash_tensor_lse(b, p->lse, p->b, p->hq, p->sq);
        _exit(dash_forward_submit(c, &a, &q, &k, &v, &out, &lse, &ticket) == 0 ? 0 : 1);
    }
    int n = atomic_fetch_add(&cl->sh->n_vanished, 1);
    if (n < MAX_VANISHED)
        cl->sh->vanished[n] = pid;
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        bad(cl, "a vanishing client could not submit", -1);
        return 0;
    }
    return 1;
}

static int do_reconnect(struct client *cl, const struct prob *p)
{
    struct dash_attn a = attn_of(p);
    struct dash_tensor q = dash_tensor_dense(cl->buf, p->q, p->b, p->sq, p->hq, p->d);
    struct dash_tensor k = dash_tensor_dense(cl->buf, p->k, p->b, p->sk, p->hkv, p->d);
    struct dash_tensor v = dash_tensor_dense(cl->buf, p->v, p->b, p->sk, p->hkv, p->d);
    struct dash_tensor out = dash_tensor_dense(cl->buf, p->out, p->b, p->sq, p->hq, p->d);
    struct dash_tensor lse = dash_tensor_lse(cl->buf, p->lse, p->b, p->hq, p->sq);
    uint64_t ticket;
    int rc = dash_forward_submit(cl->c, &a, &q, &k, &v, &out, &lse, &ticket);
    dash_close(cl->c); /* with the forward in flight */
    cl->c = NULL;
    cl->buf = NULL;
    if (rc == 0)
        rc = connect_and_fill(cl);
    if (rc) {
        bad(cl, "reconnect", rc);
        return 0;
    }
    return 1;
}

static enum soak_kind draw_kind(struct client *cl)
{
    /* percent: forward 30, backward 20, ping 22, stats 5, bad 12, buffer 5, vanish 4,
     * reconnect 2 */
    static const int cut[SOAK_KINDS] = {30, 50, 72, 77, 89, 94, 98, 100};
    int x = (int)(tu_next(&cl->rng) % 100);
    int k = 0;
    while (x >= cut[k])
        k++;
    return (enum soak_kind)k;
}

static void client_main(const struct soak_opts *o, struct shared *sh, int idx)
{
    struct client cl = {.o = o, .sh = sh, .idx = idx};
    tu_rng_init(&cl.rng, o->seed * 1000003u + (uint64_t)idx);
    if (prepare(&cl) != 0 || connect_and_fill(&cl) != 0) {
        fprintf(stderr, "soak client %d: cannot set up\n", idx);
        _exit(1);
    }
    for (int i = 0; i < o->requests; i++) {
        enum soak_kind kind = draw_kind(&cl);
        const struct prob *p = &cl.p[tu_next(&cl.rng) % PROBS];
        int ok = 0, rc;
        switch (kind) {
        case SOAK_FORWARD:
            ok = do_forward(&cl, p);
            break;
        case SOAK_BACKWARD:
            ok = do_backward(&cl, p);
            break;
        case SOAK_PING:
            ok = (rc = dash_ping(cl.c, 60000, NULL)) == 0;
            if (!ok)
                bad(&cl, "ping", rc);
            break;
        case SOAK_STATS: {
            struct dash_stats *st;
            ok = (rc = dash_stats(cl.c, &st)) == 0;
            if (ok)
                dash_stats_free(st);
            else
                bad(&cl, "stats", rc);
            break;
        }
        case SOAK_BAD:
            ok = do_bad(&cl, p);
            break;
        case SOAK_BUFFER: {
            struct dash_buffer *b2;
            rc = dash_shm_alloc(cl.c, 4096 + tu_next(&cl.rng) % 65536, &b2);
            if (rc == 0)
                rc = dash_buffer_free(cl.c, b2);
            ok = rc == 0;
            if (!ok)
                bad(&cl, "buffer churn", rc);
            break;
        }
        case SOAK_VANISH:
            ok = do_vanish(&cl, p);
            break;
        default:
            ok = do_reconnect(&cl, p);
            break;
        }
        atomic_fetch_add(&sh->sent[kind], 1);
        if (ok)
            atomic_fetch_add(&sh->good, 1);
        atomic_fetch_add(&sh->done, 1);
    }
    dash_close(cl.c);
    _exit(0);
}

/* ---- the daemon's side ------------------------------------------------------------------- */

static long count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static long count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long n = 0;
    int ch;
    while ((ch = fgetc(f)) != EOF)
        n += ch == '\n';
    fclose(f);
    return n;
}

void soak_usage_of(pid_t pid, struct soak_usage *ret)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    ret->fds = count_dir(path);
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    ret->maps = count_lines(path);
    ret->rss_kib = tu_rss_kib((int)pid);
    ret->shm_objects = -1;
}

/* libdash's shared memory objects (/dev/shm/dash-<pid>-...) of the given processes, made
 * since `since` (pids wrap: an older run's leftover may carry one of ours). */
static long our_shm_objects(const pid_t *pids, int n, int n_clients, time_t since, int say)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return -1;
    long count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid;
        char path[300];
        struct stat st;
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        if (sscanf(e->d_name, "dash-%ld-", &pid) != 1 || stat(path, &st) != 0 ||
            st.st_mtime < since)
            continue;
        for (int i = 0; i < n; i++)
            if (pids[i] == (pid_t)pid) {
                count++;
                if (say)
                    fprintf(stderr, "soak: /dev/shm/%s is left (%s)\n", e->d_name,
                            i < n_clients ? "a client's" : "a vanished process's");
                break;
            }
    }
    closedir(d);
    return count;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sessions dashd holds now, or -1. */
static long daemon_sessions(const char *endpoint)
{
    struct dash_connect_opts o = {.timeout_ms = 5000, .flags = DASH_CONNECT_NO_SESSION};
    struct dash_client *c;
    struct dash_stats *st;
    long n = -1;
    if (dash_connect(endpoint, &o, &c) != 0)
        return -1;
    if (dash_stats(c, &st) == 0) {
        n = (long)st->sessions;
        dash_stats_free(st);
    }
    dash_close(c);
    return n;
}

int soak_run(const struct soak_opts *o, struct soak_result *ret)
{
    memset(ret, 0, sizeof *ret);
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                             -1, 0);
    if (sh == MAP_FAILED)
        return -1;
    memset(sh, 0, sizeof *sh);
    pid_t *kids = calloc((size_t)o->clients, sizeof *kids);
    if (!kids) {
        munmap(sh, sizeof *sh);
        return -1;
    }
    soak_usage_of(o->daemon_pid, &ret->idle);
    time_t since = time(NULL) - 1;
    double t0 = now_s();
    fflush(NULL);
    for (int i = 0; i < o->clients; i++) {
        kids[i] = fork();
        if (kids[i] == 0)
            client_main(o, sh, i);
    }
    /* the baseline: once every client is well under way */
    uint64_t total = (uint64_t)o->clients * (uint64_t)o->requests, tenth = total / 10;
    int sampled = 0, left = o->clients;
    while (left > 0) {
        if (!sampled && atomic_load(&sh->done) >= tenth) {
            soak_usage_of(o->daemon_pid, &ret->before);
            sampled = 1;
        }
        int status;
        pid_t w = waitpid(-1, &status, WNOHANG);
        if (w > 0) {
            for (int i = 0; i < o->clients; i++)
                if (kids[i] == w) {
                    left--;
                    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                        ret->clients_failed++;
                }
            continue;
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!sampled)
        soak_usage_of(o->daemon_pid, &ret->before);
    ret->seconds = now_s() - t0;
    /* settle: every session gone, every object of a vanished client unlinked */
    int n = atomic_load(&sh->n_vanished);
    n = n < MAX_VANISHED ? n : MAX_VANISHED;
    pid_t *all = calloc((size_t)(n + o->clients), sizeof *all);
    if (all) {
        memcpy(all, kids, (size_t)o->clients * sizeof *all);
        memcpy(all + o->clients, sh->vanished, (size_t)n * sizeof *all);
    }
    /* The descriptors are sampled in the loop too: the connection daemon_sessions() has just
     * closed is dashd's to reap, which it may not have done yet when it answered; a leaked
     * descriptor stays past SETTLE_MS. */
    long shm = -1;
    for (double end = now_s() + SETTLE_MS / 1e3; now_s() < end;) {
        shm = all ? our_shm_objects(all, n + o->clients, o->clients, since, 0) : -1;
        long sessions = daemon_sessions(o->endpoint);
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
        soak_usage_of(o->daemon_pid, &ret->after);
        if (sessions == 0 && shm == 0 && ret->after.fds >= 0 && ret->after.fds <= ret->idle.fds)
            break;
    }
    if (shm > 0)
        (void)our_shm_objects(all, n + o->clients, o->clients, since, 1);
    ret->after.shm_objects = shm;
    for (int k = 0; k < SOAK_KINDS; k++)
        ret->sent[k] = atomic_load(&sh->sent[k]);
    ret->good = atomic_load(&sh->good);
    ret->wrong_bits = atomic_load(&sh->wrong_bits);
    ret->wrong_code = atomic_load(&sh->wrong_code);
    free(all);
    free(kids);
    munmap(sh, sizeof *sh);
    return 0;
}
