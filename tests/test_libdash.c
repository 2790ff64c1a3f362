// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_libdash.c - libdash against a real dashd: several client processes at once, each
 * getting the in-process engine's bits; 64 requests in flight; a daemon that restarts (or
 * is killed with work in flight) and a session that expires, both invisible to the client
 * except for the time it takes.
 */
#include "suites.h"
#include "harness.h"
#include "testutil.h"
#include "client/dash.h"
#include "kernels/cpu/engine.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct dashd_proc D;

static int suite_init(void)
{
    return dashd_start(&D, "--threads 2 --session-timeout 2") == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    if (D.pid > 0)
        return dashd_stop(&D) == 0 ? 0 : -1;
    return 0;
}

/* One problem in a shm buffer: inputs from a seed, outputs poisoned. */
struct prob {
    int32_t b, sq, sk, hq, hkv, d;
    uint64_t q, k, v, out, lse, dout, dq, dk, dv, total;
};

static uint64_t put(uint64_t *at, uint64_t n)
{
    uint64_t here = *at;
    *at += (n + 63) & ~(uint64_t)63;
    return here;
}

static void prob_init(struct prob *P, int32_t b, int32_t sq, int32_t sk, int32_t hq, int32_t hkv,
                      int32_t d, uint64_t base)
{
    P->b = b, P->sq = sq, P->sk = sk, P->hq = hq, P->hkv = hkv, P->d = d;
    uint64_t at = base, qb = (uint64_t)b * sq * hq * d * 2, kb = (uint64_t)b * sk * hkv * d * 2;
    P->q = put(&at, qb), P->k = put(&at, kb), P->v = put(&at, kb), P->out = put(&at, qb);
    P->lse = put(&at, (uint64_t)b * hq * sq * 4), P->dout = put(&at, qb), P->dq = put(&at, qb);
    P->dk = put(&at, kb), P->dv = put(&at, kb);
    P->total = at - base;
}

static void prob_fill(const struct prob *P, char *mem, uint64_t seed)
{
    struct tu_rng r;
    tu_rng_init(&r, seed);
    int64_t nq = (int64_t)P->b * P->sq * P->hq * P->d, nk = (int64_t)P->b * P->sk * P->hkv * P->d;
    tu_fill(mem + P->q, DTYPE_BF16, nq, &r, 1.0);
    tu_fill(mem + P->k, DTYPE_BF16, nk, &r, 1.0);
    tu_fill(mem + P->v, DTYPE_BF16, nk, &r, 1.0);
    tu_fill(mem + P->dout, DTYPE_BF16, nq, &r, 1.0);
    tu_poison(mem + P->out, P->lse - P->out + (uint64_t)P->b * P->hq * P->sq * 4);
    tu_poison(mem + P->dq, P->dv + (uint64_t)nk * 2 - P->dq);
}

struct views {
    struct dash_tensor q, k, v, out, lse, dout, dq, dk, dv;
};

static struct views views_of(const struct prob *P, struct dash_buffer *buf)
{
    struct views w;
    w.q = dash_tensor_dense(buf, P->q, P->b, P->sq, P->hq, P->d);
    w.k = dash_tensor_dense(buf, P->k, P->b, P->sk, P->hkv, P->d);
    w.v = dash_tensor_dense(buf, P->v, P->b, P->sk, P->hkv, P->d);
    w.out = dash_tensor_dense(buf, P->out, P->b, P->sq, P->hq, P->d);
    w.lse = dash_tensor_lse(buf, P->lse, P->b, P->hq, P->sq);
    w.dout = dash_tensor_dense(buf, P->dout, P->b, P->sq, P->hq, P->d);
    w.dq = dash_tensor_dense(buf, P->dq, P->b, P->sq, P->hq, P->d);
    w.dk = dash_tensor_dense(buf, P->dk, P->b, P->sk, P->hkv, P->d);
    w.dv = dash_tensor_dense(buf, P->dv, P->b, P->sk, P->hkv, P->d);
    return w;
}

static const struct dash_attn ATTN = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL,
                                      .schedule = DASH_SCHED_SHIFT, .wave = 5};

/* Forward then backward through the daemon; 0 or the failing code. */
static int run_both(struct dash_client *c, const struct prob *P, struct dash_buffer *buf,
                    struct dash_result *ret)
{
    struct views w = views_of(P, buf);
    int rc = dash_forward(c, &ATTN, &w.q, &w.k, &w.v, &w.out, &w.lse, NULL);
    if (rc == 0)
        rc = dash_backward(c, &ATTN, &w.q, &w.k, &w.v, &w.out, &w.lse, &w.dout, &w.dq, &w.dk, &w.dv, ret);
    return rc;
}

/* The same in process: fills out..dv of mem (the inputs already there). */
static int run_in_process(const struct prob *P, char *mem, const struct dash_result *res)
{
    struct eng *e = eng_new(1);
    struct attn_problem p = {.batch = P->b, .seqlen_q = P->sq, .seqlen_k = P->sk, .heads_q = P->hq, .heads_kv = P->hkv, .head_dim = P->d, .dtype = DTYPE_BF16, .mask = SCHED_MASK_CAUSAL, .scale = (float)(1.0 / sqrt((double)P->d))};
    struct attn_config cfg = {SCHED_SHIFT, res->wave, res->block_m, res->block_n, 0};
#define T(off, s, h) attn_dense(mem + (off), s, h, P->d)
    int rc = eng_forward(e, &p, &cfg, T(P->out, P->sq, P->hq), (float *)(mem + P->lse),
                         T(P->q, P->sq, P->hq), T(P->k, P->sk, P->hkv), T(P->v, P->sk, P->hkv), NULL);
    if (rc == 0)
        rc = eng_backward(e, &p, &cfg, T(P->dq, P->sq, P->hq), T(P->dk, P->sk, P->hkv),
                          T(P->dv, P->sk, P->hkv), T(P->q, P->sq, P->hq), T(P->k, P->sk, P->hkv),
                          T(P->v, P->sk, P->hkv), T(P->out, P->sq, P->hq), (float *)(mem + P->lse),
                          T(P->dout, P->sq, P->hq), NULL);
#undef T
    eng_free(e);
    return rc;
}

static struct dash_client *connect_or_fail(const char *name)
{
    struct dash_connect_opts o = {.client_name = name, .run_tag = "tests", .timeout_ms = 20000};
    struct dash_client *c = NULL;
    int rc = dash_connect(D.endpoint, &o, &c);
    if (rc)
        fprintf(stderr, "\n  dash_connect: %s", dash_strerror(rc));
    return rc ? NULL : c;
}

/* ---- tests ------------------------------------------------------------------------- */

static void test_libdash_clients_in_several_processes_get_engine_bits(void)
{
    enum { N = 4 };
    struct prob P;
    prob_init(&P, 1, 130, 130, 4, 2, 64, 0);
    uint64_t seed = tu_seed() ^ 0xc11e;
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        CU_ASSERT_FATAL(kids[i] >= 0);
        if (kids[i] == 0) {
            struct dash_client *c = connect_or_fail("proc");
            struct dash_buffer *buf = NULL;
            if (!c || dash_shm_alloc(c, P.total, &buf) != 0)
                _exit(10);
            char *mem = dash_buffer_data(buf);
            prob_fill(&P, mem, seed); /* the same inputs in every process */
            struct dash_result res;
            int ok = 1;
            for (int rep = 0; rep < 3 && ok; rep++) {
                if (run_both(c, &P, buf, &res) != 0)
                    _exit(11);
                char *mine = malloc(P.total);
                memcpy(mine, mem, P.total);
                ok = run_in_process(&P, mine, &res) == 0 && memcmp(mine, mem, P.total) == 0;
                free(mine);
            }
            dash_shm_free(c, buf);
            dash_close(c);
            _exit(ok ? 0 : 12);
        }
    }
    int fine = 0;
    for (int i = 0; i < N; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
            fine++;
        else
            fprintf(stderr, "\n  client process %d: status %d", i, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    CU_ASSERT_EQUAL(fine, N);
}

static void test_libdash_64_requests_in_flight(void)
{
    enum { N = 64 };
    struct dash_client *c = connect_or_fail("async");
    CU_ASSERT_FATAL(c != NULL);
    struct prob P[N];
    uint64_t at = 0;
    for (int i = 0; i < N; i++) {
        prob_init(&P[i], 1, 17 + i % 5, 23, 2, 1, 32, at);
        at += P[i].total;
    }
    struct dash_buffer *buf;
    CU_ASSERT_FATAL(dash_shm_alloc(c, at, &buf) == 0);
    char *mem = dash_buffer_data(buf);
    uint64_t tickets[N];
    for (int i = 0; i < N; i++) {
        prob_fill(&P[i], mem, tu_seed() + (uint64_t)i);
        struct views w = views_of(&P[i], buf);
        CU_ASSERT_EQUAL_FATAL(dash_forward_submit(c, &ATTN, &w.q, &w.k, &w.v, &w.out, &w.lse, &tickets[i]), 0);
    }
    /* wait in reverse order: replies for the others are kept meanwhile */
    int ok = 0;
    struct dash_result res[N];
    for (int i = N - 1; i >= 0; i--)
        ok += dash_wait(c, tickets[i], -1, &res[i]) == 0;
    CU_ASSERT_EQUAL(ok, N);
    CU_ASSERT_EQUAL(dash_wait(c, tickets[0], 100, NULL), DASH_EINVAL); /* already waited */
    for (int i = 0; i < N; i++) {
        struct views w = views_of(&P[i], buf);
        CU_ASSERT_EQUAL(dash_backward_submit(c, &ATTN, &w.q, &w.k, &w.v, &w.out, &w.lse, &w.dout,
                                             &w.dq, &w.dk, &w.dv, &tickets[i]), 0);
    }
    ok = 0;
    for (int i = 0; i < N; i++) {
        int rc;
        while ((rc = dash_poll(c, tickets[i], &res[i])) == DASH_EAGAIN)
            usleep(1000);
        ok += rc == 0;
    }
    CU_ASSERT_EQUAL(ok, N);
    /* every result is the engine's */
    int same = 0;
    for (int i = 0; i < N; i++) {
        char *mine = malloc(at);
        memcpy(mine, mem, at);
        same += run_in_process(&P[i], mine, &res[i]) == 0 &&
                memcmp(mine + P[i].q, mem + P[i].q, P[i].total) == 0;
        free(mine);
    }
    CU_ASSERT_EQUAL(same, N);
    dash_shm_free(c, buf);
    dash_close(c);
}

static void test_libdash_recovers_after_daemon_restart(void)
{
    struct dash_client *c = connect_or_fail("restart");
    CU_ASSERT_FATAL(c != NULL);
    struct prob P;
    prob_init(&P, 1, 64, 64, 2, 2, 64, 0);
    struct dash_buffer *buf;
    CU_ASSERT_FATAL(dash_shm_alloc(c, P.total, &buf) == 0);
    char *mem = dash_buffer_data(buf);
    prob_fill(&P, mem, tu_seed());
    struct dash_result res;
    CU_ASSERT_EQUAL_FATAL(run_both(c, &P, buf, &res), 0);
    char *first = malloc(P.total);
    memcpy(first, mem, P.total);

    /* a clean restart between two calls */
    CU_ASSERT_EQUAL(dashd_stop(&D), 0);
    CU_ASSERT_FATAL(dashd_restart(&D) == 0);
    tu_poison(mem + P.dq, P.total - P.dq);
    CU_ASSERT_EQUAL(run_both(c, &P, buf, &res), 0);
    CU_ASSERT(memcmp(first, mem, P.total) == 0);

    /* SIGKILL with a backward in flight, then a new daemon: the ticket still completes */
    struct views w = views_of(&P, buf);
    uint64_t t;
    tu_poison(mem + P.dq, P.total - P.dq);
    CU_ASSERT_EQUAL_FATAL(dash_backward_submit(c, &ATTN, &w.q, &w.k, &w.v, &w.out, &w.lse, &w.dout,
                                               &w.dq, &w.dk, &w.dv, &t), 0);
    dashd_kill(&D);
    CU_ASSERT_FATAL(dashd_restart(&D) == 0);
    CU_ASSERT_EQUAL(dash_wait(c, t, -1, &res), 0);
    CU_ASSERT(memcmp(first, mem, P.total) == 0);
    free(first);
    dash_shm_free(c, buf);
    dash_close(c);
}

static void test_libdash_expired_session_is_transparent(void)
{
    struct dash_client *c = connect_or_fail("idle");
    CU_ASSERT_FATAL(c != NULL);
    struct prob P;
    prob_init(&P, 1, 40, 40, 2, 1, 32, 0);
    struct dash_buffer *buf;
    CU_ASSERT_FATAL(dash_shm_alloc(c, P.total, &buf) == 0);
    prob_fill(&P, dash_buffer_data(buf), tu_seed());
    struct dash_result res;
    CU_ASSERT_EQUAL(run_both(c, &P, buf, &res), 0);
    sleep(4); /* the daemon's session timeout is 2 s: the session and its buffer are gone */
    CU_ASSERT_EQUAL(run_both(c, &P, buf, &res), 0);
    dash_shm_free(c, buf);
    dash_close(c);
}

/* dash_close() ends the session at once: no lingering entry in the daemon's stats. */
static void test_libdash_close_ends_the_session(void)
{
    struct dash_client *c = connect_or_fail("closing");
    CU_ASSERT_FATAL(c != NULL);
    struct dash_buffer *buf;
    CU_ASSERT_FATAL(dash_shm_alloc(c, 4096, &buf) == 0);
    dash_close(c);
    struct dash_connect_opts o = {.timeout_ms = 5000, .flags = DASH_CONNECT_NO_SESSION};
    struct dash_client *mon = NULL;
    CU_ASSERT_FATAL(dash_connect(D.endpoint, &o, &mon) == 0);
    int found = 1;
    for (int i = 0; i < 50 && found; i++) {
        struct dash_stats *st = NULL;
        CU_ASSERT_FATAL(dash_stats(mon, &st) == 0);
        CU_ASSERT_STRING_EQUAL(st->gpu_sharing, ""); /* the CPU backend shares no GPU */
        found = 0;
        for (size_t k = 0; k < st->n_clients; k++)
            found |= strcmp(st->clients[k].client_name, "closing") == 0;
        dash_stats_free(st);
        if (found)
            usleep(20000);
    }
    CU_ASSERT(!found);
    dash_close(mon);
}

/* dash_connect's rank: refused outside the world (nothing sent), else sent in Hello and
 * shown in the daemon's stats for the session; a client without one shows world size 0. */
static void test_libdash_connect_rank_reaches_the_daemon(void)
{
    const struct {
        unsigned rank, world;
    } bad[] = {{2, 2}, {1, 0}, {5, 3}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct dash_connect_opts o = {.client_name = "bad-rank", .timeout_ms = 5000,
                                      .rank = bad[i].rank, .world_size = bad[i].world};
        struct dash_client *c = NULL;
        CU_ASSERT_EQUAL(dash_connect(D.endpoint, &o, &c), DASH_EINVAL);
        CU_ASSERT_PTR_NULL(c);
    }
    struct dash_connect_opts o = {.client_name = "rank-1-of-2", .timeout_ms = 5000,
                                  .rank = 1, .world_size = 2};
    struct dash_client *c = NULL, *plain = connect_or_fail("no-rank");
    CU_ASSERT_FATAL(dash_connect(D.endpoint, &o, &c) == 0 && plain != NULL);
    struct dash_stats *st = NULL;
    CU_ASSERT_FATAL(dash_stats(c, &st) == 0);
    int seen = 0;
    for (size_t k = 0; k < st->n_clients; k++) {
        const struct dash_client_stats *cs = &st->clients[k];
        if (!strcmp(cs->client_name, "rank-1-of-2")) {
            seen |= 1;
            CU_ASSERT_EQUAL(cs->session_id, st->own_session_id);
            CU_ASSERT(cs->rank == 1 && cs->world_size == 2);
        } else if (!strcmp(cs->client_name, "no-rank")) {
            seen |= 2;
            CU_ASSERT(cs->rank == 0 && cs->world_size == 0);
        }
    }
    CU_ASSERT_EQUAL(seen, 3);
    dash_stats_free(st);
    dash_close(c);
    dash_close(plain);
}

static void test_libdash_daemon_errors_reach_the_caller(void)
{
    struct dash_client *c = connect_or_fail("errors");
    CU_ASSERT_FATAL(c != NULL);
    struct prob P;
    prob_init(&P, 1, 16, 16, 2, 2, 16, 0); /* head dim 16: the CPU engine serves 32..256 */
    struct dash_buffer *buf;
    CU_ASSERT_FATAL(dash_shm_alloc(c, P.total, &buf) == 0);
    prob_fill(&P, dash_buffer_data(buf), tu_seed());
    CU_ASSERT_EQUAL(run_both(c, &P, buf, NULL), DASH_EHEADDIM);
    struct views w = views_of(&P, buf);
    w.out.offset = P.total; /* past the end */
    w.q.shape[3] = w.k.shape[3] = w.v.shape[3] = w.out.shape[3] = 32;
    CU_ASSERT(dash_forward(c, &ATTN, &w.q, &w.k, &w.v, &w.out, &w.lse, NULL) < 0);
    /* stream-ordered ops take CUDA buffers only: shared memory is refused before anything
     * is sent (and with no CUDA in the build, everything says so) */
    w = views_of(&P, buf);
    int rc = dash_forward_stream(c, &ATTN, &w.q, &w.k, &w.v, &w.out, &w.lse, NULL, NULL);
    CU_ASSERT(rc == DASH_EINVAL || rc == DASH_ENOGPU);
    if (rc == DASH_EINVAL) /* and says why */
        CU_ASSERT(strstr(dash_last_error(c), "not in CUDA memory") != NULL);
    rc = dash_backward_stream(c, &ATTN, &w.q, &w.k, &w.v, &w.out, &w.lse, &w.dout, &w.dq, &w.dk,
                              &w.dv, NULL, NULL);
    CU_ASSERT(rc == DASH_EINVAL || rc == DASH_ENOGPU);
    CU_ASSERT_EQUAL(dash_forward_stream(NULL, &ATTN, &w.q, &w.k, &w.v, &w.out, &w.lse, NULL, NULL),
                    DASH_EINVAL);
    /* dash_cuda_tensors: malformed refs are refused before any driver call; host memory is
     * not device memory (and with no CUDA in the build, nothing is) */
    struct dash_cuda_ref ref = {.ptr = dash_buffer_data(buf), .ndim = 4, .elem_size = 4,
                                .shape = {1, 16, 2, 32}, .strides = {1024, 64, 32, 1}};
    struct dash_tensor got;
    CU_ASSERT_EQUAL(dash_cuda_tensors(NULL, 1, &ref, &got), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_cuda_tensors(c, 1, NULL, &got), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_cuda_tensors(c, 0, NULL, NULL), 0);
    ref.ndim = 0;
    CU_ASSERT_EQUAL(dash_cuda_tensors(c, 1, &ref, &got), DASH_EINVAL);
    ref.ndim = 4;
    ref.strides[2] = -32;
    CU_ASSERT_EQUAL(dash_cuda_tensors(c, 1, &ref, &got), DASH_EINVAL);
    ref.strides[2] = 32;
    ref.shape[0] = INT64_MAX;
    CU_ASSERT_EQUAL(dash_cuda_tensors(c, 1, &ref, &got), DASH_EINVAL); /* bytes overflow */
    ref.shape[0] = 1;
    rc = dash_cuda_tensors(c, 1, &ref, &got);
    CU_ASSERT(rc == DASH_EINVAL || rc == DASH_ENOGPU);
    CU_ASSERT(strstr(dash_last_error(c), "tensor 0: ") == dash_last_error(c)); /* which one, and why */
    /* each refusal says its own reason, never an earlier call's: a window refused by the
     * daemon, then calls refused here */
    struct dash_attn bad = ATTN;
    bad.window = 1;
    bad.window_left = -7;
    w = views_of(&P, buf);
    w.q.shape[3] = w.k.shape[3] = w.v.shape[3] = w.out.shape[3] = 32;
    CU_ASSERT(dash_forward(c, &bad, &w.q, &w.k, &w.v, &w.out, &w.lse, NULL) < 0);
    const char *stale = "window";
    CU_ASSERT(strstr(dash_last_error(c), stale) != NULL);
    char label[300];
    memset(label, 'x', sizeof label - 1);
    label[sizeof label - 1] = '\0';
    CU_ASSERT_EQUAL(dash_set_audit(c, 1, label), DASH_EINVAL);
    CU_ASSERT(strstr(dash_last_error(c), "audit label of 299 bytes") != NULL);
    CU_ASSERT_EQUAL(dash_set_audit(c, -1, NULL), 0);
    ref.ptr = NULL; /* an empty tensor's */
    CU_ASSERT_EQUAL(dash_cuda_tensors(c, 1, &ref, &got), DASH_EINVAL);
    CU_ASSERT(strstr(dash_last_error(c), "tensor 0 has no data") != NULL);
    ref.ptr = dash_buffer_data(buf);
    ref.strides[2] = -32;
    CU_ASSERT_EQUAL(dash_cuda_tensors(c, 1, &ref, &got), DASH_EINVAL);
    CU_ASSERT(strstr(dash_last_error(c), "tensor 0: 4 dimensions") != NULL);
    ref.strides[2] = 32;
    struct dash_buffer *vb = NULL;
    uint64_t off = 0;
    CU_ASSERT_EQUAL(dash_cuda_view(c, NULL, 64, &vb, &off), DASH_EINVAL);
    CU_ASSERT(strstr(dash_last_error(c), "NULL pointer") != NULL);
    rc = dash_cuda_view(c, dash_buffer_data(buf), 64, &vb, &off); /* host memory */
    CU_ASSERT(rc == DASH_EINVAL || rc == DASH_ENOGPU);
    CU_ASSERT(strstr(dash_last_error(c), stale) == NULL && dash_last_error(c)[0] != '\0');
    uint64_t rtt = 0;
    CU_ASSERT_EQUAL(dash_ping(c, 2000, &rtt), 0);
    CU_ASSERT(rtt > 0);
    dash_shm_free(c, buf);
    dash_close(c);
}

int suite_libdash(void)
{
    CU_pSuite s = CU_add_suite("libdash", suite_init, suite_clean);
    if (!s)
        return -1;
    ADD_TEST(s, test_libdash_daemon_errors_reach_the_caller);
    ADD_TEST(s, test_libdash_connect_rank_reaches_the_daemon);
    ADD_TEST(s, test_libdash_close_ends_the_session);
    ADD_TEST(s, test_libdash_clients_in_several_processes_get_engine_bits);
    ADD_TEST(s, test_libdash_64_requests_in_flight);
    ADD_TEST(s, test_libdash_expired_session_is_transparent);
    ADD_TEST(s, test_libdash_recovers_after_daemon_restart);
    return 0;
}
