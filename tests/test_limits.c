// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_limits.c - per-client caps, fairness and the full queue, against a real dashd
 * driven through libdash from several processes: a process over a cap gets DASH_ELIMIT
 * naming it while another process is served as before; a full queue makes libdash wait
 * instead of failing; the worker takes turns between clients, so one client's backlog
 * does not hold up another's tiny op. Each test starts its own daemon with the caps it
 * needs.
 */
#include "suites.h"
#include "harness.h"
#include "testutil.h"
#include "client/dash.h"
#include "proto/errors.h"
#include "kernels/cpu/engine.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------------- */

/* A forward problem (bf16, causal) laid out in one shm buffer. */
struct fwd {
    int32_t b, s, h, d;
    uint64_t q, k, v, out, lse, total;
    struct dash_buffer *buf;
};

static const struct dash_attn ATTN = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL,
                                      .schedule = DASH_SCHED_AUTO};

static void fwd_layout(struct fwd *f, int32_t s, int32_t h, int32_t d)
{
    f->b = 1, f->s = s, f->h = h, f->d = d;
    uint64_t t = (uint64_t)s * h * d * 2, at = 0;
    f->q = at, at += t;
    f->k = at, at += t;
    f->v = at, at += t;
    f->out = at, at += t;
    f->lse = at, at += (uint64_t)h * s * 4;
    f->total = at;
}

/* Allocate and fill; 0 or the failing code. */
static int fwd_make(struct dash_client *c, struct fwd *f, int32_t s, int32_t h, int32_t d,
                    uint64_t seed)
{
    fwd_layout(f, s, h, d);
    int rc = dash_shm_alloc(c, f->total, &f->buf);
    if (rc)
        return rc;
    char *mem = dash_buffer_data(f->buf);
    struct tu_rng r;
    tu_rng_init(&r, seed);
    int64_t n = (int64_t)s * h * d;
    tu_fill(mem + f->q, DTYPE_BF16, n, &r, 1.0);
    tu_fill(mem + f->k, DTYPE_BF16, n, &r, 1.0);
    tu_fill(mem + f->v, DTYPE_BF16, n, &r, 1.0);
    tu_poison(mem + f->out, f->total - f->out);
    return 0;
}

static int fwd_submit(struct dash_client *c, const struct fwd *f, uint64_t *ticket)
{
    struct dash_tensor q = dash_tensor_dense(f->buf, f->q, 1, f->s, f->h, f->d);
    struct dash_tensor k = dash_tensor_dense(f->buf, f->k, 1, f->s, f->h, f->d);
    struct dash_tensor v = dash_tensor_dense(f->buf, f->v, 1, f->s, f->h, f->d);
    struct dash_tensor o = dash_tensor_dense(f->buf, f->out, 1, f->s, f->h, f->d);
    struct dash_tensor l = dash_tensor_lse(f->buf, f->lse, 1, f->h, f->s);
    return dash_forward_submit(c, &ATTN, &q, &k, &v, &o, &l, ticket);
}

static int fwd_run(struct dash_client *c, const struct fwd *f, struct dash_result *res)
{
    uint64_t t;
    int rc = fwd_submit(c, f, &t);
    return rc ? rc : dash_wait(c, t, -1, res);
}

/* Whether the daemon's out and lse are the bits of the engine in this process. */
static int fwd_matches_engine(const struct fwd *f, const struct dash_result *res)
{
    const char *mem = dash_buffer_data(f->buf);
    char *mine = malloc(f->total);
    if (!mine)
        return 0;
    memcpy(mine, mem, f->total);
    tu_poison(mine + f->out, f->total - f->out);
    struct eng *e = eng_new(1);
    struct attn_problem p = {.batch = 1, .seqlen_q = f->s, .seqlen_k = f->s, .heads_q = f->h,
                             .heads_kv = f->h, .head_dim = f->d, .dtype = DTYPE_BF16,
                             .mask = SCHED_MASK_CAUSAL, .scale = (float)(1.0 / sqrt((double)f->d))};
    struct attn_config cfg = {.sched = SCHED_ASCENDING, .w = res->wave, .block_m = res->block_m,
                              .block_n = res->block_n};
#define T(off) attn_dense(mine + (off), f->s, f->h, f->d)
    int rc = eng_forward(e, &p, &cfg, T(f->out), (float *)(void *)(mine + f->lse), T(f->q),
                         T(f->k), T(f->v), NULL);
#undef T
    eng_free(e);
    int same = rc == 0 && memcmp(mine + f->out, mem + f->out, f->total - f->out) == 0;
    free(mine);
    return same;
}

static struct dash_client *client(const struct dashd_proc *d, const char *name, int *ret_rc)
{
    struct dash_connect_opts o = {.client_name = name, .timeout_ms = 20000};
    struct dash_client *c = NULL;
    int rc = dash_connect(d->endpoint, &o, &c);
    if (ret_rc)
        *ret_rc = rc;
    return rc ? NULL : c;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Run fn in a child process: its exit status (0: all well), or -1. */
/* Another process running fn against dashd d: this program again, exec'd as
 * `test_dash --child NAME ENDPOINT` (limits_child below). A fork() alone would copy this
 * multithreaded process - libzmq's threads of the clients it has open - and a child can then
 * wait for ever on a lock one of them held at the fork (seen once under ASan: the suite hung
 * in CI). Returns fn's status, or -1. */
static const char *child_name(int (*fn)(const struct dashd_proc *d));

static int in_child(int (*fn)(const struct dashd_proc *d), const struct dashd_proc *d)
{
    const char *name = child_name(fn);
    if (!name)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        execl("/proc/self/exe", "test_dash", "--child", name, d->endpoint, (char *)NULL);
        _exit(98);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* Another process: connects, allocates two buffers, runs a small forward. */
static int other_process_is_served(const struct dashd_proc *d)
{
    struct dash_client *c = client(d, "other", NULL);
    struct dash_buffer *extra = NULL;
    struct fwd f;
    struct dash_result res;
    if (!c)
        return 10;
    if (fwd_make(c, &f, 64, 2, 64, 7) != 0 || dash_shm_alloc(c, 4096, &extra) != 0)
        return 11;
    if (fwd_run(c, &f, &res) != 0 || !fwd_matches_engine(&f, &res))
        return 12;
    dash_close(c);
    return 0;
}

/* ---- caps --------------------------------------------------------------------------- */

/* Two sessions are the cap: a third dash_connect of the same process is refused with
 * DASH_ELIMIT, another process connects and computes, and closing one session frees its
 * place. */
static void test_limits_process_over_session_cap_gets_elimit_others_served(void)
{
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--threads 1 --limit-sessions 2") == 0);
    int rc;
    struct dash_client *a = client(&d, "a", &rc), *b = client(&d, "b", &rc);
    CU_ASSERT_PTR_NOT_NULL(a);
    CU_ASSERT_PTR_NOT_NULL(b);
    struct dash_client *c = client(&d, "c", &rc);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_EQUAL(rc, DASH_ELIMIT);
    CU_ASSERT_EQUAL(in_child(other_process_is_served, &d), 0);
    dash_close(b);
    for (int i = 0; i < 100 && !c; i++) { /* the Goodbye is not waited for */
        c = client(&d, "c", &rc);
        if (!c)
            usleep(20000);
    }
    CU_ASSERT_PTR_NOT_NULL(c);
    dash_close(c);
    dash_close(a);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

/* Buffers and registered bytes, all of a process's sessions together: over either cap is
 * DASH_ELIMIT with the reason, freeing one makes room, another process is untouched. */
static void test_limits_buffers_and_bytes_over_cap_get_elimit_others_served(void)
{
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--threads 1 --limit-buffers 3 "
                                    "--limit-registered-bytes 1M") == 0);
    struct dash_client *a = client(&d, "a", NULL), *a2 = client(&d, "a2", NULL);
    CU_ASSERT_FATAL(a && a2);
    struct dash_buffer *b[4] = {NULL};
    CU_ASSERT_EQUAL(dash_shm_alloc(a, 65536, &b[0]), 0);
    CU_ASSERT_EQUAL(dash_shm_alloc(a, 65536, &b[1]), 0);
    CU_ASSERT_EQUAL(dash_shm_alloc(a2, 65536, &b[2]), 0); /* the same process: counted too */
    CU_ASSERT_EQUAL(dash_shm_alloc(a, 4096, &b[3]), DASH_ELIMIT);
    printf("\n    4th buffer: %s ", dash_last_error(a));
    CU_ASSERT_PTR_NOT_NULL(strstr(dash_last_error(a), "buffers"));
    CU_ASSERT_EQUAL(in_child(other_process_is_served, &d), 0);
    CU_ASSERT_EQUAL(dash_shm_free(a, b[1]), 0);
    CU_ASSERT_EQUAL(dash_shm_alloc(a, 2u << 20, &b[3]), DASH_ELIMIT); /* bytes */
    CU_ASSERT_PTR_NOT_NULL(strstr(dash_last_error(a), "registered_bytes"));
    CU_ASSERT_EQUAL(dash_shm_alloc(a, 512 * 1024, &b[3]), 0);
    /* a session's end gives back what it held */
    dash_close(a2);
    struct dash_buffer *more = NULL;
    int rc = DASH_ELIMIT;
    for (int i = 0; i < 100 && rc == DASH_ELIMIT; i++) {
        rc = dash_shm_alloc(a, 65536, &more);
        if (rc == DASH_ELIMIT)
            usleep(20000);
    }
    CU_ASSERT_EQUAL(rc, 0);
    dash_close(a);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

/* Requests in flight: with a cap of 2, a burst of 6 long forwards has at least one refused
 * with DASH_ELIMIT while the first two run; those that ran are correct; another process's
 * forward at the same time runs. */
static int child_forward(const struct dashd_proc *d)
{
    return other_process_is_served(d);
}

static void test_limits_requests_in_flight_over_cap_get_elimit_others_served(void)
{
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--threads 1 --limit-in-flight 2") == 0);
    struct dash_client *a = client(&d, "a", NULL);
    CU_ASSERT_FATAL(a != NULL);
    enum { N = 6 };
    struct fwd f;
    CU_ASSERT_FATAL(fwd_make(a, &f, 512, 4, 64, tu_seed()) == 0);
    uint64_t t[N];
    for (int i = 0; i < N; i++)
        CU_ASSERT_FATAL(fwd_submit(a, &f, &t[i]) == 0);
    int ok = 0, limited = 0, other = 0;
    struct dash_result res;
    CU_ASSERT_EQUAL(in_child(child_forward, &d), 0);
    for (int i = 0; i < N; i++) {
        int rc = dash_wait(a, t[i], -1, &res);
        if (rc == 0)
            ok++;
        else if (rc == DASH_ELIMIT)
            limited++;
        else
            other++;
    }
    printf("\n    %d ran, %d refused (%s) ", ok, limited, dash_last_error(a));
    CU_ASSERT(ok >= 2);
    CU_ASSERT(limited >= 1);
    CU_ASSERT_EQUAL(other, 0);
    CU_ASSERT(fwd_matches_engine(&f, &res) || ok == 0);
    /* below the cap again: served */
    CU_ASSERT_EQUAL(fwd_run(a, &f, &res), 0);
    dash_close(a);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

/* Request size: the tensor bytes one op names. */
static void test_limits_request_over_size_cap_gets_elimit(void)
{
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--threads 1 --limit-request-bytes 300K") == 0);
    struct dash_client *a = client(&d, "a", NULL);
    CU_ASSERT_FATAL(a != NULL);
    struct fwd small, big;
    struct dash_result res;
    CU_ASSERT_FATAL(fwd_make(a, &small, 128, 2, 64, 1) == 0); /* 4 x 32 KiB + 1 KiB */
    CU_ASSERT_FATAL(fwd_make(a, &big, 512, 2, 64, 2) == 0);   /* 4 x 128 KiB + 4 KiB */
    CU_ASSERT_EQUAL(fwd_run(a, &big, &res), DASH_ELIMIT);
    printf("\n    %s ", dash_last_error(a));
    CU_ASSERT_PTR_NOT_NULL(strstr(dash_last_error(a), "request_bytes"));
    CU_ASSERT_EQUAL(fwd_run(a, &small, &res), 0);
    CU_ASSERT(fwd_matches_engine(&small, &res));
    dash_close(a);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

/* One process registering one 4 KiB object over and over (each registration is one of
 * the daemon's memory maps, and vm.max_map_count - 65530 by default - is shared by every
 * client): with the default config the 8193rd is refused with DASH_ELIMIT, and another
 * process registers and computes as before. (Before: nothing stopped it short of the
 * kernel's limit, and then other clients' registrations failed.) */
static void test_limits_one_process_cannot_take_the_daemons_memory_maps(void)
{
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--threads 1") == 0);
    char name[64];
    snprintf(name, sizeof name, "/dash-test-maps-%d", (int)getpid());
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    CU_ASSERT_FATAL(fd >= 0 && ftruncate(fd, 4096) == 0);
    close(fd);
    struct raw_client *r = raw_connect(d.endpoint);
    CU_ASSERT_FATAL(r && raw_hello(r, WIRE_PROTOCOL_VERSION) == 0);
    int ok = 0, code = 0;
    for (int i = 0; i < 8193 && code == 0; i++) {
        Dash__RegisterBuffer rb = DASH__REGISTER_BUFFER__INIT;
        rb.size = 4096;
        rb.shm_name = name;
        Dash__Request req = DASH__REQUEST__INIT;
        req.id = 1000 + (uint64_t)i;
        req.body_case = DASH__REQUEST__BODY_REGISTER_BUFFER;
        req.register_buffer = &rb;
        Dash__Reply *rep = raw_call(r, &req, 5000);
        code = rep ? rep->code : -1;
        if (code == 0)
            ok++;
        else if (rep)
            printf("\n    registration %d: %s: %s ", i + 1, dash_errname(code), rep->message);
        wire_free_reply(rep);
    }
    CU_ASSERT_EQUAL(ok, 8192);
    CU_ASSERT_EQUAL(code, DASH_ELIMIT);
    CU_ASSERT_EQUAL(in_child(other_process_is_served, &d), 0);
    raw_close(r);
    shm_unlink(name);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

/* ---- the full queue ------------------------------------------------------------------- */

/* A queue of one: eight forwards submitted at once all complete, correctly, because
 * libdash waits and sends again while the queue is full. (Before: all but the first came
 * back DASH_EBUSY.) */
static void test_limits_full_queue_makes_libdash_wait_not_fail(void)
{
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--threads 1 --queue 1") == 0);
    struct dash_client *a = client(&d, "a", NULL);
    CU_ASSERT_FATAL(a != NULL);
    enum { N = 8 };
    struct fwd f[N];
    uint64_t t[N];
    uint64_t seed = tu_seed();
    for (int i = 0; i < N; i++)
        CU_ASSERT_FATAL(fwd_make(a, &f[i], 192, 2, 64, seed + (uint64_t)i) == 0);
    for (int i = 0; i < N; i++)
        CU_ASSERT_FATAL(fwd_submit(a, &f[i], &t[i]) == 0);
    int ok = 0;
    for (int i = 0; i < N; i++) {
        struct dash_result res;
        int rc = dash_wait(a, t[i], -1, &res);
        if (rc)
            printf("\n    op %d: %s: %s ", i, dash_errname(rc), dash_last_error(a));
        ok += rc == 0 && fwd_matches_engine(&f[i], &res);
    }
    CU_ASSERT_EQUAL(ok, N);
    dash_close(a);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

/* The queue stays full for longer than the client's timeout: the op fails with DASH_EBUSY
 * and the daemon's reason, within about the timeout. */
static void test_limits_queue_full_past_the_timeout_gives_ebusy(void)
{
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--threads 1 --queue 1") == 0);
    struct dash_client *hog = client(&d, "hog", NULL);
    struct dash_connect_opts o = {.client_name = "impatient", .timeout_ms = 300};
    struct dash_client *a = NULL;
    CU_ASSERT_FATAL(hog && dash_connect(d.endpoint, &o, &a) == 0);
    struct fwd big, small;
    CU_ASSERT_FATAL(fwd_make(hog, &big, 4096, 4, 64, 3) == 0);
    CU_ASSERT_FATAL(fwd_make(a, &small, 64, 1, 64, 4) == 0);
    uint64_t t;
    CU_ASSERT_FATAL(fwd_submit(hog, &big, &t) == 0);
    usleep(100000); /* it runs for seconds on one thread */
    double t0 = now_ms();
    struct dash_result res;
    int rc = fwd_run(a, &small, &res);
    double took = now_ms() - t0;
    printf("\n    %s after %.0f ms: %s ", dash_errname(rc), took, dash_last_error(a));
    CU_ASSERT_EQUAL(rc, DASH_EBUSY);
    CU_ASSERT(took >= 200 && took < 3000);
    CU_ASSERT_PTR_NOT_NULL(strstr(dash_last_error(a), "queue is full"));
    CU_ASSERT_EQUAL(dash_wait(hog, t, -1, &res), 0);
    dash_close(a);
    dash_close(hog);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

/* ---- fairness ---------------------------------------------------------------------------- */

/* A client with 40 forwards queued, and another's single small forward sent after them:
 * the small one waits for about one of the big ones, not forty. (With one FIFO it waited
 * for all forty: bench/results/fairness-*.md.) */
static void test_limits_queue_takes_turns_between_clients(void)
{
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--threads 1") == 0);
    int go[2], done[2];
    CU_ASSERT_FATAL(pipe(go) == 0 && pipe(done) == 0);
    enum { N = 40 };
    pid_t kid = fork();
    CU_ASSERT_FATAL(kid >= 0);
    if (kid == 0) {
        struct dash_client *h = client(&d, "heavy", NULL);
        struct fwd f;
        uint64_t t[N];
        if (!h || fwd_make(h, &f, 384, 4, 64, 5) != 0)
            _exit(10);
        for (int i = 0; i < N; i++)
            if (fwd_submit(h, &f, &t[i]) != 0)
                _exit(11);
        char x = 1;
        if (write(go[1], &x, 1) != 1)
            _exit(12);
        uint64_t run_us = 0;
        struct dash_result res;
        for (int i = 0; i < N; i++) {
            if (dash_wait(h, t[i], -1, &res) != 0)
                _exit(13);
            run_us += res.run_us;
        }
        uint64_t mean = run_us / N;
        if (write(done[1], &mean, sizeof mean) != sizeof mean)
            _exit(14);
        dash_close(h);
        _exit(0);
    }
    struct dash_client *l = client(&d, "light", NULL);
    struct fwd f;
    CU_ASSERT_FATAL(l && fwd_make(l, &f, 64, 1, 64, 6) == 0);
    char x;
    CU_ASSERT_FATAL(read(go[0], &x, 1) == 1);
    usleep(50000); /* the heavy client's requests are in the daemon's queue */
    struct dash_result res;
    double t0 = now_ms();
    CU_ASSERT_EQUAL(fwd_run(l, &f, &res), 0);
    double took = now_ms() - t0;
    CU_ASSERT(fwd_matches_engine(&f, &res));
    uint64_t heavy_us = 0;
    CU_ASSERT_FATAL(read(done[0], &heavy_us, sizeof heavy_us) == sizeof heavy_us);
    int st;
    CU_ASSERT_FATAL(waitpid(kid, &st, 0) == kid);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    printf("\n    small forward: %.1f ms (queued %llu us); one heavy forward runs %llu us ", took,
           (unsigned long long)res.queue_us, (unsigned long long)heavy_us);
    /* One heavy op running plus one taking its turn first is about 2 heavy means; one FIFO
     * would make it about N. The bound sits between, with room for a machine so loaded
     * that the ops running while the small one waits take several times their mean (a
     * 6x bound failed at 6.4x with two sanitizer builds running beside the tests). */
    CU_ASSERT(res.queue_us < (uint64_t)N * heavy_us / 4);
    close(go[0]), close(go[1]), close(done[0]), close(done[1]);
    dash_close(l);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

/* ---- memory -------------------------------------------------------------------------- */

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* This process's memory cgroup directory (v1 memory controller, or v2), or -1. */
static int own_memory_cgroup(char *dir, size_t len, int *ret_v2)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[1024];
    int found = -1;
    while (f && found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        char ctl[256];
        snprintf(ctl, sizeof ctl, ",%s,", c1 + 1);
        if (strstr(ctl, ",memory,")) {
            snprintf(dir, len, "/sys/fs/cgroup/memory%s", strcmp(c2 + 1, "/") ? c2 + 1 : "");
            *ret_v2 = 0;
            found = 0;
        } else if (!c1[1]) {
            snprintf(dir, len, "/sys/fs/cgroup%s", strcmp(c2 + 1, "/") ? c2 + 1 : "");
            *ret_v2 = 1;
            found = 0;
        }
    }
    if (f)
        fclose(f);
    return found;
}

/* dashd in a cgroup limited to 256 MiB, asked for a forward whose stride-0 k and v (one
 * 4 KiB buffer) are 512 MiB each dense: it answers DASH_ENOMEM, since it caps one op's
 * scratch at half the cgroup's limit, and goes on serving. (Before: the cap was half the
 * RAM; the op's scratch was allocated and the kernel killed dashd.) Needs a writable
 * cgroup (root); skipped otherwise. */
static void test_limits_memory_cap_follows_the_cgroup_limit(void)
{
    char own[512], dir[600], path[700], pid[32];
    int v2 = 0;
    if (own_memory_cgroup(own, sizeof own, &v2) != 0) {
        printf("\n    skipped: no memory cgroup ");
        return;
    }
    snprintf(dir, sizeof dir, "%s/dash-test-%d", own, (int)getpid());
    snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    if (mkdir(dir, 0755) != 0 || write_file(path, "268435456") != 0) {
        printf("\n    skipped: cannot make a memory-limited cgroup under %s ", own);
        rmdir(dir);
        return;
    }
    /* dashd starts inside it; this process goes back where it was */
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    struct dashd_proc d;
    int joined = write_file(path, pid) == 0;
    int started = joined ? dashd_start(&d, "--threads 1") : -1;
    snprintf(path, sizeof path, "%s/cgroup.procs", own);
    CU_ASSERT_FATAL(!joined || write_file(path, pid) == 0);
    if (!joined) {
        printf("\n    skipped: cannot join %s ", dir);
        rmdir(dir);
        return;
    }
    CU_ASSERT_FATAL(started == 0);
    struct dash_client *c = client(&d, "big", NULL);
    CU_ASSERT_FATAL(c != NULL);
    const int64_t Sq = 16, Sk = (int64_t)1 << 21, D = 64;
    struct dash_buffer *in = NULL, *outb = NULL;
    CU_ASSERT_FATAL(dash_shm_alloc(c, 4096, &in) == 0);
    CU_ASSERT_FATAL(dash_shm_alloc(c, (size_t)(Sq * D * 4 + Sq * 4), &outb) == 0);
    memset(dash_buffer_data(in), 0, 4096);
    struct dash_tensor q = {in, 0, 4, {1, Sq, 1, D}, {0, 0, D, 1}};
    struct dash_tensor k = {in, 0, 4, {1, Sk, 1, D}, {0, 0, D, 1}}; /* 512 MiB dense */
    struct dash_tensor o = dash_tensor_dense(outb, 0, 1, Sq, 1, D);
    struct dash_tensor l = dash_tensor_lse(outb, (uint64_t)(Sq * D * 4), 1, 1, Sq);
    struct dash_attn at = {.dtype = DASH_F32};
    int rc = dash_forward(c, &at, &q, &k, &k, &o, &l, NULL);
    printf("\n    %s: %s ", dash_errname(rc), dash_last_error(c));
    CU_ASSERT_EQUAL(rc, DASH_ENOMEM);
    CU_ASSERT(dashd_alive(&d));
    /* and it still serves */
    struct fwd f;
    struct dash_result res;
    CU_ASSERT_FATAL(fwd_make(c, &f, 64, 2, 64, 9) == 0);
    CU_ASSERT_EQUAL(fwd_run(c, &f, &res), 0);
    dash_close(c);
    if (dashd_alive(&d))
        CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    rmdir(dir);
}

/* One op's host memory counts the CPU engine's working memory, not only its tensors'
 * copies: under GQA the backward sums dK and dV per query head in float, group x the dense
 * dK each (an MQA op of 64 query heads on 1 MiB of tensors asks 16 MiB). Under --op-memory
 * 4M that backward is DASH_ENOMEM saying why, its outputs untouched; its forward and the
 * same backward at 2 query heads per kv head run; another process is served; dashd lives.
 * (Before: only the copies were counted, so a small request could make dashd allocate -
 * and, on an overcommitting kernel, touch - many times the cap.) */
static void test_limits_op_memory_counts_the_engines_gqa_sums(void)
{
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--threads 1 --backend cpu --op-memory 4M") == 0);
    struct dash_client *c = client(&d, "mqa", NULL);
    CU_ASSERT_FATAL(c != NULL);
    const int64_t Sq = 16, Sk = 1024, D = 32;
    for (int hq = 64; hq >= 2; hq -= 62) {
        const int64_t nq = Sq * hq * D * 4, nk = Sk * D * 4, nl = hq * Sq * 4;
        struct dash_buffer *b = NULL;
        CU_ASSERT_FATAL(dash_shm_alloc(c, (size_t)(4 * nq + 4 * nk + nl), &b) == 0);
        unsigned char *m = dash_buffer_data(b);
        struct tu_rng rng;
        tu_rng_init(&rng, tu_seed() ^ 0x3e3);
        tu_fill(m, DTYPE_F32, (4 * nq + 4 * nk) / 4, &rng, 1.0); /* every tensor's bytes */
        uint64_t at = 0;
        struct dash_tensor q = dash_tensor_dense(b, at, 1, Sq, hq, D), out, dout, dq, k, v, dk, dv;
        out = dash_tensor_dense(b, at += nq, 1, Sq, hq, D);
        dout = dash_tensor_dense(b, at += nq, 1, Sq, hq, D);
        dq = dash_tensor_dense(b, at += nq, 1, Sq, hq, D);
        k = dash_tensor_dense(b, at += nq, 1, Sk, 1, D);
        v = dash_tensor_dense(b, at += nk, 1, Sk, 1, D);
        dk = dash_tensor_dense(b, at += nk, 1, Sk, 1, D);
        dv = dash_tensor_dense(b, at += nk, 1, Sk, 1, D);
        struct dash_tensor lse = dash_tensor_lse(b, at += nk, 1, hq, Sq);
        struct dash_attn a = {.dtype = DASH_F32, .mask = DASH_MASK_CAUSAL};
        CU_ASSERT_EQUAL_FATAL(dash_forward(c, &a, &q, &k, &v, &out, &lse, NULL), 0);
        memset(m + dq.offset, 0x5a, (size_t)nq); /* a refusal must leave dq, dk, dv alone */
        memset(m + dk.offset, 0x5a, (size_t)(2 * nk));
        int rc = dash_backward(c, &a, &q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, NULL);
        if (hq == 64) {
            const char *why = dash_last_error(c);
            CU_ASSERT_EQUAL(rc, DASH_ENOMEM);
            CU_ASSERT(strstr(why, "working memory") && strstr(why, "GQA") && strstr(why, "--op-memory"));
            printf("\n    %s: %s ", dash_errname(rc), why);
            int untouched = 1;
            for (int64_t i = 0; i < nq; i++)
                untouched &= m[dq.offset + (uint64_t)i] == 0x5a;
            for (int64_t i = 0; i < 2 * nk; i++)
                untouched &= m[dk.offset + (uint64_t)i] == 0x5a;
            CU_ASSERT(untouched);
        } else {
            CU_ASSERT_EQUAL(rc, 0);
            float g;
            memcpy(&g, m + dk.offset, sizeof g);
            CU_ASSERT(isfinite(g));
        }
        CU_ASSERT_EQUAL(dash_buffer_free(c, b), 0);
    }
    CU_ASSERT_EQUAL(in_child(other_process_is_served, &d), 0);
    dash_close(c);
    CU_ASSERT(dashd_alive(&d));
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

/* The edges of --op-memory: a forward whose tensors' copies fill the cap exactly leaves the
 * engine nothing - refused for its working memory, not run unbounded (the engine's "no
 * bound" is 0, which the copies' exact fill once handed it) - and one byte less is refused
 * for the copies themselves. The copies count each tensor's dense bytes and 64 more (the
 * worker's alignment, job.c). */
static void test_limits_op_memory_filled_by_the_tensors_leaves_the_engine_nothing(void)
{
    const int64_t S = 64, H = 2, D = 32, nq = S * H * D * 4, nl = H * S * 4;
    const uint64_t need = 4 * (uint64_t)(nq + 64) + (uint64_t)(nl + 64); /* q k v out, lse */
    for (int less = 0; less <= 1; less++) {
        char args[96];
        snprintf(args, sizeof args, "--threads 1 --backend cpu --op-memory %llu",
                 (unsigned long long)(need - (uint64_t)less));
        struct dashd_proc d;
        CU_ASSERT_FATAL(dashd_start(&d, args) == 0);
        struct dash_client *c = client(&d, "edge", NULL);
        CU_ASSERT_FATAL(c != NULL);
        struct dash_buffer *b = NULL;
        CU_ASSERT_FATAL(dash_shm_alloc(c, (size_t)(4 * nq + nl), &b) == 0);
        memset(dash_buffer_data(b), 0, (size_t)(4 * nq + nl));
        struct dash_tensor q = dash_tensor_dense(b, 0, 1, S, H, D);
        struct dash_tensor k = dash_tensor_dense(b, (uint64_t)nq, 1, S, H, D);
        struct dash_tensor v = dash_tensor_dense(b, 2 * (uint64_t)nq, 1, S, H, D);
        struct dash_tensor o = dash_tensor_dense(b, 3 * (uint64_t)nq, 1, S, H, D);
        struct dash_tensor l = dash_tensor_lse(b, 4 * (uint64_t)nq, 1, H, S);
        struct dash_attn a = {.dtype = DASH_F32};
        int rc = dash_forward(c, &a, &q, &k, &v, &o, &l, NULL);
        const char *why = dash_last_error(c);
        printf("\n    --op-memory %s: %s: %s ", less ? "need - 1" : "need", dash_errname(rc), why);
        CU_ASSERT_EQUAL(rc, DASH_ENOMEM);
        CU_ASSERT(less ? strstr(why, "bytes of scratch") != NULL
                       : strstr(why, "working memory") && strstr(why, "more than the 1 left"));
        dash_close(c);
        CU_ASSERT(dashd_alive(&d));
        CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    }
}

/* ---- who sees whom ------------------------------------------------------------------- */

/* In a child running as nobody: its stats list its own session only (not root's name or
 * run tag, nor its session id), and count both. */
static int nobody_sees_only_itself(const struct dashd_proc *d)
{
    if (setgid(65534) != 0 || setuid(65534) != 0)
        return 20;
    struct dash_connect_opts o = {.client_name = "nobody-client", .timeout_ms = 10000};
    struct dash_client *c = NULL;
    struct dash_stats *st = NULL;
    int rc = dash_connect(d->endpoint, &o, &c);
    if (rc) {
        fprintf(stderr, "\n    nobody: dash_connect: %s", dash_errname(rc));
        return 21;
    }
    if (dash_stats(c, &st) != 0)
        return 22;
    int bad = st->sessions < 2 || st->n_clients != 1 ||
              strcmp(st->clients[0].client_name, "nobody-client") != 0 ||
              st->clients[0].session_id != st->own_session_id;
    dash_stats_free(st);
    dash_close(c);
    return bad ? 23 : 0;
}

/* dashctl stats (StatsReply) lists a session's client name, pid, run tag and id only to
 * root and to the session's own user: another user's are counted, not shown. (Before:
 * any peer saw every session's name, pid and run tag.) Needs root (to be someone else). */
static void test_limits_stats_show_other_users_sessions_only_to_root(void)
{
    if (geteuid() != 0) {
        printf("\n    skipped: needs root to run a client as another user ");
        return;
    }
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, "--threads 1") == 0);
    CU_ASSERT_FATAL(chmod(d.endpoint + strlen("ipc://"), 0777) == 0);
    struct dash_connect_opts o = {.client_name = "root-secret", .run_tag = "secret-run",
                                  .timeout_ms = 10000};
    struct dash_client *a = NULL;
    CU_ASSERT_FATAL(dash_connect(d.endpoint, &o, &a) == 0);
    CU_ASSERT_EQUAL(in_child(nobody_sees_only_itself, &d), 0);
    struct dash_stats *st = NULL;
    CU_ASSERT_FATAL(dash_stats(a, &st) == 0);
    CU_ASSERT(st->n_clients >= 1); /* root sees its own (nobody's session has ended) */
    dash_stats_free(st);
    dash_close(a);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}


/* The functions a child may run, by name (in_child, limits_child). */
static const struct {
    const char *name;
    int (*fn)(const struct dashd_proc *d);
} children[] = {
    {"other_process_is_served", other_process_is_served},
    {"child_forward", child_forward},
    {"nobody_sees_only_itself", nobody_sees_only_itself},
};

static const char *child_name(int (*fn)(const struct dashd_proc *d))
{
    for (size_t i = 0; i < sizeof children / sizeof children[0]; i++)
        if (children[i].fn == fn)
            return children[i].name;
    return NULL;
}

int limits_child(const char *name, const char *endpoint)
{
    struct dashd_proc d;
    memset(&d, 0, sizeof d);
    snprintf(d.endpoint, sizeof d.endpoint, "%s", endpoint);
    for (size_t i = 0; i < sizeof children / sizeof children[0]; i++)
        if (!strcmp(children[i].name, name))
            return children[i].fn(&d);
    fprintf(stderr, "test_dash --child: no child function named '%s'\n", name);
    return 99;
}

int suite_limits(void)
{
    CU_pSuite s = CU_add_suite("limits", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_limits_process_over_session_cap_gets_elimit_others_served);
    ADD_TEST(s, test_limits_buffers_and_bytes_over_cap_get_elimit_others_served);
    ADD_TEST(s, test_limits_requests_in_flight_over_cap_get_elimit_others_served);
    ADD_TEST(s, test_limits_request_over_size_cap_gets_elimit);
    ADD_TEST(s, test_limits_one_process_cannot_take_the_daemons_memory_maps);
    ADD_TEST(s, test_limits_full_queue_makes_libdash_wait_not_fail);
    ADD_TEST(s, test_limits_queue_full_past_the_timeout_gives_ebusy);
    ADD_TEST(s, test_limits_queue_takes_turns_between_clients);
    ADD_TEST(s, test_limits_stats_show_other_users_sessions_only_to_root);
    ADD_TEST(s, test_limits_memory_cap_follows_the_cgroup_limit);
    ADD_TEST(s, test_limits_op_memory_counts_the_engines_gqa_sums);
    ADD_TEST(s, test_limits_op_memory_filled_by_the_tensors_leaves_the_engine_nothing);
    return 0;
}
