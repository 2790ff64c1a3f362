// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_audit.c - the audit log end to end on the CPU backend: a real dashd with --audit,
 * a real client (libdash) running a small "training script", and `dashctl audit` on the
 * logs it leaves: two identical runs diff as identical, a flipped input bit is named with
 * its step and label, verify catches a flipped byte, a torn tail and a spliced record,
 * SIGTERM loses nothing, SIGKILL leaves a log valid up to its end, rotation and SIGHUP
 * keep one sequence across files. The digests in the records are checked against the
 * outputs the client received.
 */
#include "suites.h"
#include "harness.h"
#include "testutil.h"

#include "client/dash.h"
#include "daemon/audit.h"
#include "kernels/digest/digest.h"
#include "proto/auditfile.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define S 64
#define H 2
#define D 32
#define NT ((size_t)S * H * D) /* elements of one q-shaped tensor */
#define TB (NT * 2)            /* bf16 bytes */
#define LB ((size_t)H * S * 4)
#define STEPS 3

/* q k v out dout dq dk dv, then lse, in one shared-memory buffer */
static uint64_t off(int t)
{
    return t < 8 ? (uint64_t)t * TB : 8 * TB;
}

static char dir[128];

static int suite_init(void)
{
    snprintf(dir, sizeof dir, "/tmp/dash-audit-%d", (int)getpid());
    return mkdir(dir, 0700) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return tu_run(cmd, NULL) == 0 ? 0 : -1;
}

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* `dashctl audit <args>`: exit status, stdout in *out (may be NULL). */
static int dashctl(const char *args, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/dashctl audit %s", tu_build_dir(), args);
    return tu_run(cmd, out);
}

/* The "training script": STEPS steps of two attention layers (forward, backward) with
 * the step and label set; inputs drawn from seed. flip_step/flip_label: flip one bit of
 * q before that layer's forward (-1: none). rank of world_size (0 of 0: no rank) go to
 * Hello. Returns 0 or a libdash code. *ret_dq_digest: the digest of the last dq the
 * client received. */
static int run_script_ranked(const char *endpoint, const char *run_tag, uint64_t seed,
                             int flip_step, int flip_layer, unsigned rank, unsigned world_size,
                             uint64_t *ret_dq_digest)
{
    struct dash_connect_opts o = {.client_name = "trainer", .run_tag = run_tag, .timeout_ms = 20000,
                                  .rank = rank, .world_size = world_size};
    struct dash_client *c = NULL;
    struct dash_buffer *b = NULL;
    int rc = dash_connect(endpoint, &o, &c);
    if (!rc)
        rc = dash_shm_alloc(c, 8 * TB + LB, &b);
    if (rc) {
        dash_close(c);
        return rc;
    }
    unsigned char *mem = dash_buffer_data(b);
    struct dash_tensor t[9];
    for (int i = 0; i < 8; i++)
        t[i] = dash_tensor_dense(b, off(i), 1, S, H, D);
    t[8] = dash_tensor_lse(b, off(8), 1, H, S);
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .schedule = DASH_SCHED_SHIFT};
    struct tu_rng r;
    tu_rng_init(&r, seed);
    for (int step = 0; step < STEPS && !rc; step++)
        for (int layer = 0; layer < 2 && !rc; layer++) {
            for (int i = 0; i < 5; i++) /* q k v, out (overwritten), dout */
                tu_fill(mem + off(i == 3 ? 4 : i), DTYPE_BF16, (int64_t)NT, &r, 1.0);
            if (step == flip_step && layer == flip_layer)
                mem[off(0) + 77] ^= 0x04;
            char label[32];
            snprintf(label, sizeof label, "layer%d.attn", layer);
            dash_set_audit(c, step, label);
            rc = dash_forward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], NULL);
            if (!rc)
                rc = dash_backward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], &t[4], &t[5], &t[6],
                                   &t[7], NULL);
        }
    if (ret_dq_digest)
        CU_ASSERT_EQUAL(digest_rows(mem + off(5), TB, D * 2, ret_dq_digest), 0);
    dash_close(c);
    return rc;
}

static int run_script(const char *endpoint, const char *run_tag, uint64_t seed, int flip_step,
                      int flip_layer, uint64_t *ret_dq_digest)
{
    return run_script_ranked(endpoint, run_tag, seed, flip_step, flip_layer, 0, 0, ret_dq_digest);
}

/* Start dashd with an audit log, run the script, stop it with SIGTERM. */
static void logged_run(const char *log, const char *extra, const char *tag, uint64_t seed,
                       int flip_step, int flip_layer, uint64_t *ret_dq_digest)
{
    struct dashd_proc d;
    char args[512];
    snprintf(args, sizeof args, "--backend cpu --threads 2 --audit %s %s", log, extra ? extra : "");
    CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
    CU_ASSERT_EQUAL(run_script(d.endpoint, tag, seed, flip_step, flip_layer, ret_dq_digest), 0);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

/* Byte offsets of the frames of a file (header and records), up to max. */
static size_t frames_of(const unsigned char *data, size_t size, uint64_t *offs, size_t max)
{
    size_t n = 0;
    struct auditfile_reader rd;
    struct auditfile_item it;
    auditfile_reader_init(&rd, data, size);
    while (auditfile_read(&rd, &it) == 0 && it.kind != AUDITFILE_END) {
        if (n < max)
            offs[n++] = it.offset;
        auditfile_item_free(&it);
    }
    auditfile_reader_free(&rd);
    return n;
}

static unsigned char *slurp(const char *path, size_t *ret_size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *ret_size = (size_t)n;
    return p;
}

static int spit(const char *path, const unsigned char *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0)
        ok = 0;
    return ok ? 0 : -1;
}

/* Copy the log at src to dst frame by frame, each frame handed to edit (which may change
 * it; it.kind says whether it.frame is a header or a record) and encoded again, so the
 * CRCs hold. Returns how many frames edit changed. */
typedef int (*frame_edit_fn)(struct auditfile_item *it, void *ctx);
static int rewrite_log(const char *src, const char *dst, frame_edit_fn edit, void *ctx)
{
    size_t n;
    unsigned char *p = slurp(src, &n);
    CU_ASSERT_FATAL(p != NULL);
    FILE *f = fopen(dst, "wb");
    CU_ASSERT_FATAL(f != NULL);
    struct auditfile_reader rd;
    struct auditfile_item it;
    int changed = 0;
    auditfile_reader_init(&rd, p, n);
    while (auditfile_read(&rd, &it) == 0 && it.kind != AUDITFILE_END) {
        CU_ASSERT_FATAL(it.kind == AUDITFILE_HEADER || it.kind == AUDITFILE_RECORD);
        changed += edit(&it, ctx);
        unsigned char *buf;
        size_t len;
        CU_ASSERT_FATAL(auditfile_encode(it.frame, &buf, &len) == 0);
        CU_ASSERT_FATAL(fwrite(buf, 1, len, f) == len);
        free(buf);
        auditfile_item_free(&it);
    }
    CU_ASSERT_FATAL(fclose(f) == 0);
    auditfile_reader_free(&rd);
    free(p);
    return changed;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- tests --------------------------------------------------------------------------- */

/* Two runs of the same script are identical record for record; a third with one flipped
 * input bit is named at its step and label as an input divergence; and the digest the
 * daemon recorded for dq is the digest of the dq the client got. */
static void test_audit_runs_diff_identical_and_a_flipped_input_is_named(void)
{
    char a[256], b[256], c[256], args[900];
    path_of(a, sizeof a, "run-a.log");
    path_of(b, sizeof b, "run-b.log");
    path_of(c, sizeof c, "run-c.log");
    const uint64_t seed = tu_seed() ^ 0xa0d17;
    uint64_t dq_a = 0, dq_b = 0;
    logged_run(a, "--audit-level all", "exp", seed, -1, -1, &dq_a);
    logged_run(b, "--audit-level all", "exp", seed, -1, -1, &dq_b);
    logged_run(c, "--audit-level all", "exp", seed, 1, 1, NULL);
    CU_ASSERT_EQUAL(dq_a, dq_b);

    char *out = NULL;
    snprintf(args, sizeof args, "diff %s %s", a, b);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "identical: 12 records matched"));
    free(out);

    snprintf(args, sizeof args, "diff %s %s", a, c);
    CU_ASSERT_EQUAL(dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "step 1 label \"layer1.attn\" forward"));
    CU_ASSERT(out && strstr(out, "inputs differ: q "));
    free(out);

    /* the recorded dq digest of the last backward is what the client received */
    char want[32];
    snprintf(want, sizeof want, "dq=%016llx", (unsigned long long)dq_a);
    snprintf(args, sizeof args, "dump %s | tail -n 1", a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, want));
    CU_ASSERT(out && strstr(out, "step=2 label=layer1.attn backward"));
    free(out);

    snprintf(args, sizeof args, "verify %s", a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "12 records (seq 1..12) in 1 file, 1 header: OK"));
    free(out);
    snprintf(args, sizeof args, "summary %s", a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "divergences: 0 of 12"));
    free(out);
}

/* Rank by rank: a 2-rank "run" is two clients of ranks 0 and 1 (each its own data) whose
 * records go to one shared log (dir/shared.log) or to a log per rank (two daemons). The
 * run repeated, with the ranks in the other order and a log per rank, diffs identical as
 * directories; a third with one bit of q flipped on rank 1 at step 1 before layer 1 is
 * named at that rank, step and record (layer0 fwd, bwd, layer1 fwd: record 2), rank 0
 * staying identical; records carry rank=R/2. */
static void ranked_run(const char *sub, int per_rank, int reverse, uint64_t seed, int flip)
{
    char d[256], log[300], args[512];
    path_of(d, sizeof d, sub);
    CU_ASSERT_EQUAL_FATAL(mkdir(d, 0700), 0);
    struct dashd_proc p[2];
    for (int i = 0; i < (per_rank ? 2 : 1); i++) {
        snprintf(log, sizeof log, "%s/%s.log", d, per_rank ? (i ? "rank1" : "rank0") : "shared");
        snprintf(args, sizeof args, "--backend cpu --threads 2 --audit-level all --audit %s", log);
        CU_ASSERT_EQUAL_FATAL(dashd_start(&p[i], args), 0);
    }
    for (int k = 0; k < 2; k++) {
        unsigned rank = (unsigned)(reverse ? 1 - k : k);
        const char *ep = p[per_rank ? rank : 0].endpoint;
        CU_ASSERT_EQUAL(run_script_ranked(ep, "ddp", seed + rank, flip && rank == 1 ? 1 : -1,
                                          flip && rank == 1 ? 1 : -1, rank, 2, NULL), 0);
    }
    for (int i = 0; i < (per_rank ? 2 : 1); i++)
        CU_ASSERT_EQUAL(dashd_stop(&p[i]), 0);
    /* something that is not an audit log in the directory is skipped with a warning */
    snprintf(log, sizeof log, "%s/notes.txt", d);
    CU_ASSERT_EQUAL(spit(log, (const unsigned char *)"not a log\n", 10), 0);
}

static void test_audit_diff_of_directories_names_the_rank_step_and_layer(void)
{
    const uint64_t seed = tu_seed() ^ 0x4a7c;
    ranked_run("ranks-a", 0, 0, seed, 0);
    ranked_run("ranks-b", 1, 1, seed, 0);
    ranked_run("ranks-c", 0, 0, seed, 1);
    char a[256], b[256], c[256], args[900], *out = NULL;
    path_of(a, sizeof a, "ranks-a");
    path_of(b, sizeof b, "ranks-b");
    path_of(c, sizeof c, "ranks-c");

    snprintf(args, sizeof args, "diff %s %s 2>/dev/null", a, b);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "rank 0: identical, 12 records matched"));
    CU_ASSERT(out && strstr(out, "rank 1: identical, 12 records matched"));
    CU_ASSERT(out && strstr(out, "identical: 2 ranks"));
    free(out);

    snprintf(args, sizeof args, "diff %s %s 2>/dev/null", a, c);
    CU_ASSERT_EQUAL(dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "rank 0: identical, 12 records matched"));
    CU_ASSERT(out && strstr(out, "rank 1: first difference at step 1, record 2 of the step "
                                 "(forward \"layer1.attn\")"));
    CU_ASSERT(out && strstr(out, "inputs differ: q "));
    CU_ASSERT(out && strstr(out, "first divergence: rank 1, step 1, record 2 of the step "
                                 "(forward \"layer1.attn\"); 1 of 2 ranks differ"));
    free(out);

    /* the same from files with --ranks; a directory against a file is refused */
    snprintf(args, sizeof args, "diff --ranks %s/shared.log %s/shared.log", a, c);
    CU_ASSERT_EQUAL(dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "first divergence: rank 1, step 1, record 2"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s/shared.log 2>&1", a, c);
    CU_ASSERT_EQUAL(dashctl(args, &out), 2);
    CU_ASSERT(out && strstr(out, "is a directory but"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s 2>&1 >/dev/null", a, b);
    dashctl(args, &out);
    CU_ASSERT(out && strstr(out, "notes.txt holds no audit log header: skipped"));
    free(out);

    snprintf(args, sizeof args, "dump %s/rank1.log | grep -c 'rank=1/2 step='", b);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && atoi(out) == 12);
    free(out);
    snprintf(args, sizeof args, "dump --json %s/shared.log | grep -c '\"rank\":0,\"world_size\":2'", a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && atoi(out) == 12);
    free(out);
}

/* rewrite_log's edit: flip a bit of record 8's dk digest (step 1, layer 1, backward). */
static int flip_dk_of_record_8(struct auditfile_item *it, void *ctx)
{
    (void)ctx;
    const Dash__AuditRecord *r = it->kind == AUDITFILE_RECORD ? it->frame->record : NULL;
    if (!r || r->seq != 8)
        return 0;
    CU_ASSERT_FATAL(r->n_outputs == 3);
    r->outputs[1]->digest ^= 1;
    return 1;
}

/* diff's verdict when the inputs agree and an output does not: rewrite run A's log with
 * one output digest changed (frames re-encoded, so the CRCs hold) and diff it against A. */
static void test_audit_diff_calls_same_inputs_other_outputs_only_outputs(void)
{
    char a[256], b[256], args[900], *out = NULL;
    path_of(a, sizeof a, "o-a.log");
    path_of(b, sizeof b, "o-b.log");
    logged_run(a, "--audit-level all", "o", tu_seed() ^ 5, -1, -1, NULL);
    CU_ASSERT_EQUAL(rewrite_log(a, b, flip_dk_of_record_8, NULL), 1);
    snprintf(args, sizeof args, "diff %s %s", a, b);
    CU_ASSERT_EQUAL(dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "step 1 label \"layer1.attn\" backward"));
    CU_ASSERT(out && strstr(out, "only outputs differ: dk "));
    free(out);
    snprintf(args, sizeof args, "verify %s", b);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    free(out);
}

/* rewrite_log's edit: a header of the digest version before (dashd writes DIGEST_VERSION). */
static int header_to_digest_before(struct auditfile_item *it, void *ctx)
{
    (void)ctx;
    if (it->kind != AUDITFILE_HEADER)
        return 0;
    CU_ASSERT_EQUAL(it->frame->header->digest_version, DIGEST_VERSION);
    it->frame->header->digest_version = DIGEST_VERSION - 1;
    return 1;
}

/* Logs of two digest versions are never compared: run A's log rewritten with headers of
 * the version before (frames re-encoded, so the CRCs hold; the records unchanged: a log
 * of version 2, XXH64 leaves, beside one of version 3) is refused by diff, file against
 * file and as directories, with the reason and exit 2; A against itself still diffs
 * identical, and dump shows the version dashd writes. */
static void test_audit_diff_refuses_logs_of_two_digest_versions(void)
{
    char a[256], b[300], da[256], db[256], args[1200], why[64], *out = NULL;
    snprintf(why, sizeof why, "digests of versions %d and %d", DIGEST_VERSION - 1, DIGEST_VERSION);
    path_of(a, sizeof a, "dv-a.log");
    path_of(da, sizeof da, "dv-da");
    path_of(db, sizeof db, "dv-db");
    CU_ASSERT_FATAL(mkdir(da, 0700) == 0 && mkdir(db, 0700) == 0);
    snprintf(b, sizeof b, "%s/rank0.log", db);
    logged_run(a, "", "dv", tu_seed() ^ 6, -1, -1, NULL);
    CU_ASSERT(rewrite_log(a, b, header_to_digest_before, NULL) >= 1);
    size_t na;
    unsigned char *pa = slurp(a, &na);
    CU_ASSERT_FATAL(pa != NULL);
    char copy[300];
    snprintf(copy, sizeof copy, "%s/rank0.log", da);
    CU_ASSERT_FATAL(spit(copy, pa, na) == 0);
    free(pa);
    snprintf(args, sizeof args, "diff %s %s 2>&1", a, b);
    CU_ASSERT_EQUAL(dashctl(args, &out), 2);
    CU_ASSERT(out && strstr(out, why));
    CU_ASSERT(out && !strstr(out, "identical"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s 2>&1", da, db);
    CU_ASSERT_EQUAL(dashctl(args, &out), 2);
    CU_ASSERT(out && strstr(out, why));
    free(out);
    snprintf(args, sizeof args, "diff %s %s", a, copy);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "identical"));
    free(out);
    snprintf(args, sizeof args, "dump --json %s | grep -c '\"digest_version\":%d'", a, DIGEST_VERSION);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && atoi(out) >= 1);
    free(out);
}

/* A packed batch through libdash (S tokens, 3-d tensors, 2-d lse, offsets after lse in the
 * same buffer): forward and backward of the same tokens cut at `cut` into two sequences,
 * with `window_left` (-2: no window) and softcap 30. 0 or a libdash code. */
static int run_packed(const char *endpoint, int32_t cut, int32_t window_left)
{
    struct dash_connect_opts o = {.client_name = "packer", .run_tag = "p", .timeout_ms = 20000};
    struct dash_client *c = NULL;
    struct dash_buffer *b = NULL;
    int rc = dash_connect(endpoint, &o, &c);
    if (!rc)
        rc = dash_shm_alloc(c, 8 * TB + LB + 64, &b);
    if (rc) {
        dash_close(c);
        return rc;
    }
    unsigned char *mem = dash_buffer_data(b);
    struct dash_tensor t[9];
    for (int i = 0; i < 8; i++) {
        t[i] = dash_tensor_dense(b, off(i), 1, S, H, D);
        t[i].ndim = 3; /* (total, heads, head_dim) */
        t[i].shape[0] = S, t[i].shape[1] = H, t[i].shape[2] = D, t[i].shape[3] = 0;
        memset(t[i].strides, 0, sizeof t[i].strides);
    }
    t[8] = dash_tensor_lse(b, off(8), 1, H, S);
    t[8].ndim = 2;
    t[8].shape[0] = H, t[8].shape[1] = S, t[8].shape[2] = 0;
    memset(t[8].strides, 0, sizeof t[8].strides);
    int32_t *cu = (int32_t *)(void *)(mem + off(8) + LB);
    cu[0] = 0, cu[1] = cut, cu[2] = S;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .schedule = DASH_SCHED_SHIFT,
                          .softcap = 30.0f, .max_seqlen_q = S, .max_seqlen_k = S};
    a.cu_seqlens_q = (struct dash_tensor){.buf = b, .offset = off(8) + LB, .ndim = 1, .shape = {3}};
    a.cu_seqlens_k = a.cu_seqlens_q;
    if (window_left >= -1) {
        a.window = 1;
        a.window_left = window_left;
        a.window_right = -1;
    }
    struct tu_rng r;
    tu_rng_init(&r, 0x7061636bULL); /* the same tokens in every run */
    for (int i = 0; i < 5; i++)
        tu_fill(mem + off(i == 3 ? 4 : i), DTYPE_BF16, (int64_t)NT, &r, 1.0);
    dash_set_audit(c, 0, "packed.attn");
    rc = dash_forward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], NULL);
    if (!rc)
        rc = dash_backward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], &t[4], &t[5], &t[6], &t[7],
                           NULL);
    dash_close(c);
    return rc;
}

/* Records carry the packing (sequences, offsets' digests), window and softcap; diff tells
 * the same tokens packed differently from other tokens, and names a changed window;
 * summary does not count another packing of the same tokens as a divergence. */
static void test_audit_diff_tells_same_tokens_different_packing_apart(void)
{
    char a[256], b[256], c[256], args[900], *out = NULL;
    path_of(a, sizeof a, "pk-a.log");
    path_of(b, sizeof b, "pk-b.log");
    path_of(c, sizeof c, "pk-c.log");
    const char *logs[3] = {a, b, c};
    const int32_t cuts[3] = {20, 41, 20}, lefts[3] = {16, 16, 8};
    for (int i = 0; i < 3; i++) {
        struct dashd_proc d;
        snprintf(args, sizeof args, "--backend cpu --threads 2 --audit %s --audit-level all", logs[i]);
        CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
        CU_ASSERT_EQUAL(run_packed(d.endpoint, cuts[i], lefts[i]), 0);
        CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    }
    snprintf(args, sizeof args, "dump %s", a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "window=(16,-1) softcap=30 varlen=2 cu_q="));
    free(out);
    snprintf(args, sizeof args, "dump --json %s | tail -n 1", a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "\"varlen\":{\"batch\":2,\"max_seqlen_q\":64,"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s", a, b);
    CU_ASSERT_EQUAL(dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "label \"packed.attn\" forward"));
    CU_ASSERT(out && strstr(out, "same tokens, different packing: q, k, v and dout are the same bytes"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s", a, c);
    CU_ASSERT_EQUAL(dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "parameters differ: window (16, -1) softcap 30 vs window (8, -1) softcap 30"));
    CU_ASSERT(out && !strstr(out, "packing"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s", a, a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    free(out);
    /* summary: the same tokens packed otherwise are another call, not a divergence (the
     * forwards of a and b had the same inputs and other outputs: it counted one) */
    snprintf(args, sizeof args, "summary %s %s", a, b);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "divergences: 0 of 4 "));
    free(out);
}

/* Nothing compared proves nothing: a run tag that matches no record (a typo) on both
 * sides, or two files that are no audit logs, are refused (exit 2), never "identical". */
static void test_audit_diff_of_no_records_is_not_identical(void)
{
    char a[256], n1[256], n2[256], args[1200], *out = NULL;
    path_of(a, sizeof a, "none-a.log");
    path_of(n1, sizeof n1, "none-1.txt");
    path_of(n2, sizeof n2, "none-2.txt");
    logged_run(a, "", "exp", tu_seed() ^ 0x40e, -1, -1, NULL);
    CU_ASSERT_EQUAL(spit(n1, (const unsigned char *)"not a log\n", 10), 0);
    CU_ASSERT_EQUAL(spit(n2, (const unsigned char *)"nor this\n", 9), 0);
    snprintf(args, sizeof args, "diff --run-a exq --run-b exq %s %s 2>&1", a, a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 2);
    CU_ASSERT(out && !strstr(out, "identical:"));
    free(out);
    snprintf(args, sizeof args, "diff --ranks --run-a exq --run-b exq %s %s 2>&1", a, a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 2);
    CU_ASSERT(out && !strstr(out, "identical:"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s 2>&1", n1, n2);
    CU_ASSERT_EQUAL(dashctl(args, &out), 2);
    CU_ASSERT(out && !strstr(out, "identical:"));
    free(out);
    snprintf(args, sizeof args, "diff --run-a exp --run-b exp %s %s", a, a);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "identical: 12 records matched"));
    free(out);
}

/* A log of n forward records at level "all" written directly: record i has input digest
 * in_of(i) and output digest out_of(i), label "layer<i % 32>", step i / 64. */
static void synthetic_log(const char *path, size_t n, uint64_t (*in_of)(size_t),
                          uint64_t (*out_of)(size_t))
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    Dash__AuditHeader h = DASH__AUDIT_HEADER__INIT;
    h.format_version = AUDITFILE_FORMAT_VERSION;
    h.log_id = 0x5eed;
    h.first_seq = 1;
    h.has_digest_version = 1;
    h.digest_version = DIGEST_VERSION;
    h.level = "all";
    Dash__AuditFrame fr = DASH__AUDIT_FRAME__INIT;
    fr.body_case = DASH__AUDIT_FRAME__BODY_HEADER;
    fr.header = &h;
    unsigned char *buf;
    size_t len;
    CU_ASSERT_FATAL(auditfile_encode(&fr, &buf, &len) == 0);
    CU_ASSERT_FATAL(fwrite(buf, 1, len, f) == len);
    free(buf);
    for (size_t i = 0; i < n; i++) {
        Dash__AuditTensor in = DASH__AUDIT_TENSOR__INIT, out = DASH__AUDIT_TENSOR__INIT;
        Dash__AuditTensor *ins[1] = {&in}, *outs[1] = {&out};
        in.name = "q", in.has_digest = 1, in.digest = in_of(i);
        out.name = "out", out.has_digest = 1, out.digest = out_of(i);
        Dash__AuditRecord r = DASH__AUDIT_RECORD__INIT;
        char label[32];
        snprintf(label, sizeof label, "layer%zu", i % 32);
        r.log_id = 0x5eed, r.seq = i + 1, r.client_name = "trainer", r.op = "forward";
        r.has_step = 1, r.step = i / 64, r.label = label;
        r.n_inputs = 1, r.inputs = ins, r.n_outputs = 1, r.outputs = outs;
        fr.body_case = DASH__AUDIT_FRAME__BODY_RECORD;
        fr.record = &r;
        CU_ASSERT_FATAL(auditfile_encode(&fr, &buf, &len) == 0);
        CU_ASSERT_FATAL(fwrite(buf, 1, len, f) == len);
        free(buf);
    }
    CU_ASSERT_FATAL(fclose(f) == 0);
}

static uint64_t unique_in(size_t i)
{
    return i;
}

static uint64_t some_out(size_t i)
{
    return i % 7 == 3 ? 1 : 0; /* a few outputs differ from their twins' */
}

static uint64_t repeated_in(size_t i)
{
    return i % 5;
}

/* A run's log holds millions of records: diff and summary are not quadratic in them (60k
 * records, level all, each well under the 20 s a quadratic pass took), and summary still
 * counts divergences as an earlier op with the same inputs and other outputs. */
static void test_audit_diff_and_summary_scale_to_long_logs(void)
{
    char a[256], b[256], small[256], args[1200], *out = NULL;
    path_of(a, sizeof a, "long-a.log");
    path_of(b, sizeof b, "long-b.log");
    path_of(small, sizeof small, "long-small.log");
    synthetic_log(a, 60000, unique_in, some_out);
    synthetic_log(b, 60000, unique_in, some_out);
    snprintf(args, sizeof args, "timeout 20 %s/dashctl audit diff %s %s", tu_build_dir(), a, b);
    double t0 = now_s();
    CU_ASSERT_EQUAL(tu_run(args, &out), 0);
    CU_ASSERT(out && strstr(out, "identical: 60000 records matched"));
    free(out);
    snprintf(args, sizeof args, "timeout 20 %s/dashctl audit summary %s", tu_build_dir(), a);
    CU_ASSERT_EQUAL(tu_run(args, &out), 0);
    CU_ASSERT(out && strstr(out, "divergences: 0 of 60000"));
    free(out);
    printf("\n    diff and summary of 60000 records: %.2f s ", now_s() - t0);
    /* inputs repeat every 5 records; record i diverges when an earlier one of its inputs
     * had other outputs: counted the quadratic way here */
    const size_t n = 200;
    synthetic_log(small, n, repeated_in, some_out);
    uint64_t want = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (repeated_in(j) == repeated_in(i) && some_out(j) != some_out(i)) {
                want++;
                break;
            }
    char expect[64];
    snprintf(expect, sizeof expect, "divergences: %llu of %zu ", (unsigned long long)want, n);
    snprintf(args, sizeof args, "summary %s", small);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(want > 0 && out && strstr(out, expect));
    free(out);
}

/* A side of diff may list any number of files (--audit-keep goes up to 1000): all of
 * them are compared. 300 files a side, the last one of B from a run with a flipped bit. */
static void test_audit_diff_reads_every_file_of_a_long_list(void)
{
    char a[256], c[256];
    path_of(a, sizeof a, "many-a.log");
    path_of(c, sizeof c, "many-c.log");
    const uint64_t seed = tu_seed() ^ 0x3001;
    logged_run(a, "--audit-level all", "many", seed, -1, -1, NULL);
    logged_run(c, "--audit-level all", "many", seed, 2, 1, NULL);
    const size_t files = 300, len = 64 + 2 * files * 12;
    char *cmd = malloc(len), *out = NULL;
    CU_ASSERT_FATAL(cmd != NULL);
    size_t at = (size_t)snprintf(cmd, len, "cd %s && exec 2>/dev/null && %s/dashctl audit diff ", dir, tu_build_dir());
    for (int side = 0; side < 2; side++) {
        for (size_t i = 0; i < files; i++)
            at += (size_t)snprintf(cmd + at, len - at, "%s%s", i ? "," : "",
                                   side && i == files - 1 ? "many-c.log" : "many-a.log");
        at += (size_t)snprintf(cmd + at, len - at, " ");
    }
    CU_ASSERT_FATAL(at < len);
    CU_ASSERT_EQUAL(tu_run(cmd, &out), 1);
    CU_ASSERT(out && strstr(out, "inputs differ: q "));
    free(out);
    free(cmd);
}

/* verify: a flipped byte inside a record, a cut-off tail, and a record spliced in from
 * another log are each reported with their offset. */
static void test_audit_verify_catches_flip_truncation_and_splice(void)
{
    char a[256], b[256], bad[256], args[900];
    path_of(a, sizeof a, "v-a.log");
    path_of(b, sizeof b, "v-b.log");
    path_of(bad, sizeof bad, "v-bad.log");
    logged_run(a, NULL, "v", tu_seed() ^ 1, -1, -1, NULL);
    logged_run(b, NULL, "v", tu_seed() ^ 2, -1, -1, NULL);
    size_t na, nb;
    unsigned char *pa = slurp(a, &na), *pb = slurp(b, &nb);
    CU_ASSERT_FATAL(pa && pb);
    uint64_t fa[32], fb[32];
    size_t ka = frames_of(pa, na, fa, 32), kb = frames_of(pb, nb, fb, 32);
    CU_ASSERT_FATAL(ka == 13 && kb == 13); /* a header and 12 records each */
    char *out = NULL, want[128];

    /* a flipped byte in the middle of record 5 */
    uint64_t at = (fa[5] + fa[6]) / 2;
    pa[at] ^= 0x01;
    CU_ASSERT_EQUAL_FATAL(spit(bad, pa, na), 0);
    pa[at] ^= 0x01;
    snprintf(args, sizeof args, "verify %s", bad);
    CU_ASSERT_EQUAL(dashctl(args, &out), 1);
    snprintf(want, sizeof want, "offset %llu: %llu corrupt bytes", (unsigned long long)fa[5],
             (unsigned long long)(fa[6] - fa[5]));
    CU_ASSERT(out && strstr(out, want));
    CU_ASSERT(out && strstr(out, "records 5..5 are missing"));
    free(out);

    /* the last record cut short */
    CU_ASSERT_EQUAL_FATAL(spit(bad, pa, na - 5), 0);
    CU_ASSERT_EQUAL(dashctl(args, &out), 3);
    snprintf(want, sizeof want, "offset %llu: torn tail", (unsigned long long)fa[12]);
    CU_ASSERT(out && strstr(out, want));
    CU_ASSERT(out && strstr(out, "11 records (seq 1..11)"));
    free(out);

    /* a file that is no audit log at all: said so, not "valid up to offset 0" */
    static const char not_a_log[] = "root:x:0:0:root:/root:/bin/sh\n";
    CU_ASSERT_EQUAL_FATAL(spit(bad, (const unsigned char *)not_a_log, sizeof not_a_log - 1), 0);
    CU_ASSERT_EQUAL(dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "offset 0: the file's 30 bytes hold no complete frame: not a "
                                 "dashd audit log"));
    CU_ASSERT(out && !strstr(out, "before offset 0"));
    free(out);

    /* record 3 of log B spliced in after record 6 of log A */
    size_t len3 = (size_t)(fb[4] - fb[3]);
    unsigned char *sp = malloc(na + len3);
    memcpy(sp, pa, (size_t)fa[7]);
    memcpy(sp + fa[7], pb + fb[3], len3);
    memcpy(sp + fa[7] + len3, pa + fa[7], na - (size_t)fa[7]);
    CU_ASSERT_EQUAL_FATAL(spit(bad, sp, na + len3), 0);
    CU_ASSERT_EQUAL(dashctl(args, &out), 1);
    snprintf(want, sizeof want, "offset %llu: record 3 belongs to log", (unsigned long long)fa[7]);
    CU_ASSERT(out && strstr(out, want));
    CU_ASSERT(out && strstr(out, "spliced in from another log"));
    free(out);
    free(sp);
    free(pa);
    free(pb);
}

/* SIGTERM writes every record of the work it finishes; SIGKILL during a burst leaves a
 * log that verifies up to its end (at worst a torn tail), and the next dashd on the same
 * path cuts that tail and carries on in a new segment. */
static void test_audit_sigterm_loses_nothing_and_sigkill_leaves_a_valid_prefix(void)
{
    char log[256], args[900];
    path_of(log, sizeof log, "kill.log");
    struct dashd_proc d;
    snprintf(args, sizeof args, "--backend cpu --threads 2 --audit %s --audit-sync none", log);
    CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
    struct dash_connect_opts o = {.client_name = "burst", .timeout_ms = 20000};
    struct dash_client *c = NULL;
    struct dash_buffer *b = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_connect(d.endpoint, &o, &c), 0);
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(c, 8 * TB + LB, &b), 0);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 3);
    tu_fill(dash_buffer_data(b), DTYPE_BF16, (int64_t)(4 * NT), &r, 1.0);
    struct dash_tensor t[9];
    for (int i = 0; i < 8; i++)
        t[i] = dash_tensor_dense(b, off(i), 1, S, H, D);
    t[8] = dash_tensor_lse(b, off(8), 1, H, S);
    struct dash_attn a = {.dtype = DASH_BF16};
    uint64_t tickets[200];
    for (int i = 0; i < 200; i++)
        CU_ASSERT_EQUAL_FATAL(dash_forward_submit(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8],
                                                  &tickets[i]), 0);
    for (int i = 0; i < 60; i++)
        CU_ASSERT_EQUAL(dash_wait(c, tickets[i], -1, NULL), 0);
    dashd_kill(&d); /* mid-burst: records may be queued, half-written or not yet made */
    char *out = NULL;
    snprintf(args, sizeof args, "verify %s", log);
    int st = dashctl(args, &out);
    CU_ASSERT(st == 0 || st == 3);
    CU_ASSERT(out && (strstr(out, ": OK") || strstr(out, "valid up to a torn tail")));
    free(out);
    dash_close(c);

    /* a new daemon on the same log: the tail is repaired, a second segment starts, and
     * SIGTERM after N finished ops leaves exactly N more records */
    CU_ASSERT_EQUAL_FATAL(dashd_restart(&d), 0);
    CU_ASSERT_EQUAL_FATAL(dash_connect(d.endpoint, &o, &c), 0);
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(c, 8 * TB + LB, &b), 0);
    tu_fill(dash_buffer_data(b), DTYPE_BF16, (int64_t)(4 * NT), &r, 1.0);
    for (int i = 0; i < 8; i++)
        t[i] = dash_tensor_dense(b, off(i), 1, S, H, D);
    t[8] = dash_tensor_lse(b, off(8), 1, H, S);
    for (int i = 0; i < 25; i++)
        CU_ASSERT_EQUAL(dash_forward_submit(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8],
                                            &tickets[i]), 0);
    /* a Stats reply comes after the daemon has taken every earlier message of ours: all 25
     * are accepted (queued or running) when the SIGTERM comes */
    struct dash_stats *stats = NULL;
    CU_ASSERT_EQUAL(dash_stats(c, &stats), 0);
    dash_stats_free(stats);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0); /* SIGTERM with work queued: it finishes it */
    for (int i = 0; i < 25; i++)
        (void)dash_wait(c, tickets[i], 1000, NULL);
    dash_close(c);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "2 headers: OK"));
    free(out);
    snprintf(args, sizeof args, "dump --json %s | grep -c '\"client\":\"burst\"'", log);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    /* the first segment: at most the 200 submitted (records still queued in the writer
     * when SIGKILL came are lost, as docs/audit.md says) */
    long n = out ? strtol(out, NULL, 10) : 0;
    if (n < 25 || n > 200 + 25)
        fprintf(stderr, "\n  %ld records of the burst client", n);
    CU_ASSERT(n >= 25 && n <= 200 + 25);
    free(out);
    /* the second segment holds exactly the 25 */
    snprintf(args, sizeof args, "dump --json %s | awk '/\"type\":\"header\"/{h++} h==2 && "
             "/\"type\":\"record\"/{n++} END{print n}'", log);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    if (!out || strtol(out, NULL, 10) != 25)
        fprintf(stderr, "\n  second segment: %s records", out ? out : "?");
    CU_ASSERT(out && strtol(out, NULL, 10) == 25);
    free(out);
}

/* Size rotation keeps PATH.1.. with one sequence across them; SIGHUP after a move
 * (logrotate) starts a fresh PATH that continues the sequence. The SIGHUP comes between
 * two requests of the client, so no record can fall between the files unseen. */
static void test_audit_rotation_and_sighup_keep_one_sequence(void)
{
    char log[256], moved[256], args[1200];
    path_of(log, sizeof log, "rot.log");
    path_of(moved, sizeof moved, "rot.moved");
    struct dashd_proc d;
    snprintf(args, sizeof args, "--backend cpu --threads 2 --audit %s --audit-max-size 1K "
             "--audit-keep 20", log);
    CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
    CU_ASSERT_EQUAL(run_script(d.endpoint, "rot", tu_seed(), -1, -1, NULL), 0);
    /* dashctl stats shows the log and its counters */
    char cmd[1024], *st_out = NULL;
    snprintf(cmd, sizeof cmd, "%s/dashctl stats --endpoint %s", tu_build_dir(), d.endpoint);
    CU_ASSERT_EQUAL(tu_run(cmd, &st_out), 0);
    CU_ASSERT(st_out && strstr(st_out, log) && strstr(st_out, "(level outputs)") &&
              strstr(st_out, "0 dropped, 0 write errors"));
    free(st_out);
    snprintf(cmd, sizeof cmd, "%s/dashctl stats --json --endpoint %s", tu_build_dir(), d.endpoint);
    CU_ASSERT_EQUAL(tu_run(cmd, &st_out), 0);
    CU_ASSERT(st_out && strstr(st_out, "\"audit_level\": \"outputs\"") &&
              strstr(st_out, "\"audit_dropped\": 0"));
    free(st_out);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0); /* the writer may trail the replies: let it finish */
    char *out = NULL;
    /* every file but the newest, oldest first, then the newest */
    snprintf(args, sizeof args, "verify $(ls -1 %s.* | sort -t. -k3 -n -r) %s", log, log);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "12 records (seq 1..12)"));
    CU_ASSERT(out && strstr(out, ": OK"));
    free(out);
    struct stat st;
    CU_ASSERT(stat(log, &st) == 0 && st.st_size <= 1024);

    /* logrotate's way: move the file, SIGHUP, and the next records start a new file */
    path_of(log, sizeof log, "hup.log");
    snprintf(args, sizeof args, "--backend cpu --threads 2 --audit %s", log);
    CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
    CU_ASSERT_EQUAL(run_script(d.endpoint, "hup", tu_seed(), -1, -1, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(rename(log, moved), 0);
    CU_ASSERT_EQUAL(kill(d.pid, SIGHUP), 0);
    struct stat st2;
    for (int i = 0; i < 200 && stat(log, &st2) != 0; i++)
        usleep(10000); /* the writer reopens as soon as it hears of the signal */
    CU_ASSERT_EQUAL_FATAL(stat(log, &st2), 0);
    CU_ASSERT_EQUAL(run_script(d.endpoint, "hup", tu_seed(), -1, -1, NULL), 0);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    snprintf(args, sizeof args, "verify %s %s", moved, log);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "24 records (seq 1..24) in 2 files, 2 headers: OK"));
    free(out);
    /* the new file holds the second run, and any records of the first that the writer had
     * not written when the signal came (it trails the replies): seq N..24 with N <= 13 */
    snprintf(args, sizeof args, "verify %s", log);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    unsigned n_recs = 0, first = 0, last = 0;
    const char *at = out ? strstr(out, " records (seq ") : NULL;
    CU_ASSERT_FATAL(at != NULL);
    while (at > out && at[-1] >= '0' && at[-1] <= '9')
        at--;
    CU_ASSERT(sscanf(at, "%u records (seq %u..%u)", &n_recs, &first, &last) == 3);
    CU_ASSERT(last == 24 && first >= 2 && first <= 13 && n_recs == 25 - first);
    free(out);
    /* diff reads a side made of several files (a rotated log), comma-separated: the two
     * runs of the same script on either side of the SIGHUP agree record for record */
    snprintf(args, sizeof args, "diff --run-a hup %s,%s %s,%s", moved, log, moved, log);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "identical: 24 records matched"));
    free(out);
}

/* dashctl audit on files that are not audit logs - random bytes, an empty file, a valid
 * log with garbage appended or prepended - reports problems and never crashes. */
static void test_audit_reader_survives_garbage(void)
{
    char good[256], bad[256], args[900], *out = NULL;
    path_of(good, sizeof good, "g-good.log");
    path_of(bad, sizeof bad, "g-bad.log");
    logged_run(good, NULL, "g", tu_seed() ^ 9, -1, -1, NULL);
    size_t n;
    unsigned char *p = slurp(good, &n);
    CU_ASSERT_FATAL(p != NULL);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x9a7b);
    unsigned char *junk = malloc(65536);
    for (size_t i = 0; i < 65536; i++)
        junk[i] = (unsigned char)tu_next(&r);
    for (int round = 0; round < 4; round++) {
        if (round == 0) {
            CU_ASSERT_EQUAL_FATAL(spit(bad, junk, 65536), 0);
        } else if (round == 1) {
            CU_ASSERT_EQUAL_FATAL(spit(bad, junk, 0), 0);
        } else {
            unsigned char *mix = malloc(n + 999);
            size_t at = 0;
            if (round == 2) { /* garbage before a valid log */
                memcpy(mix, junk, 999);
                memcpy(mix + 999, p, n);
            } else { /* a valid log, then garbage */
                memcpy(mix, p, n);
                memcpy(mix + n, junk, 999);
            }
            at = n + 999;
            CU_ASSERT_EQUAL_FATAL(spit(bad, mix, at), 0);
            free(mix);
        }
        const char *cmds[] = {"verify", "dump", "dump --json", "summary"};
        for (int c = 0; c < 4; c++) {
            snprintf(args, sizeof args, "%s %s >/dev/null 2>&1; echo $?", cmds[c], bad);
            CU_ASSERT_EQUAL(dashctl(args, &out), 0);
            int status = out ? atoi(out) : -1;
            free(out);
            /* verify finds problems (1), or in the third round a corrupt stretch (1);
             * nothing may crash (a signal shows as 128+) */
            CU_ASSERT(status >= 0 && status < 128);
            if (c == 0)
                CU_ASSERT(status == 1 || (round == 3 && status == 3));
        }
        snprintf(args, sizeof args, "diff %s %s >/dev/null 2>&1; echo $?", good, bad);
        CU_ASSERT_EQUAL(dashctl(args, &out), 0);
        CU_ASSERT(out && atoi(out) < 128);
        free(out);
    }
    free(junk);
    free(p);
}

/* --audit naming a file that is not an audit log (a typo, a reused path): dashd refuses
 * to start and the file is untouched; a file replaced by someone else's before a SIGHUP is
 * not written to either. A header cut short by a crash is still cut off and the log goes
 * on. (Before: a 108 KB text file became the 55 bytes of a header.) */
static void test_audit_refuses_a_file_that_is_not_an_audit_log(void)
{
    char path[256], cmd[1024], *out = NULL;
    path_of(path, sizeof path, "not-a-log.txt");
    size_t n = 108 * 1024;
    unsigned char *text = malloc(n);
    for (size_t i = 0; i < n; i++)
        text[i] = (unsigned char)"precious notes, not an audit log\n"[i % 33];
    CU_ASSERT_EQUAL_FATAL(spit(path, text, n), 0);
    snprintf(cmd, sizeof cmd, "timeout 10 %s/dashd --backend cpu --endpoint ipc://%s/nal.sock "
             "--audit %s 2>&1", tu_build_dir(), dir, path);
    CU_ASSERT_EQUAL(tu_run(cmd, &out), 1);
    CU_ASSERT(out && strstr(out, "is not an audit log"));
    free(out);
    size_t m;
    unsigned char *now = slurp(path, &m);
    CU_ASSERT(now && m == n && memcmp(now, text, n) == 0);
    free(now);

    /* SIGHUP onto a path that someone replaced with their own file */
    char log[256], args[600];
    path_of(log, sizeof log, "replaced.log");
    snprintf(args, sizeof args, "--backend cpu --threads 1 --audit %s", log);
    struct dashd_proc d;
    CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
    CU_ASSERT_EQUAL(run_script(d.endpoint, "r", tu_seed(), -1, -1, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(rename(path, log), 0);
    CU_ASSERT_EQUAL(kill(d.pid, SIGHUP), 0);
    usleep(200000);
    CU_ASSERT_EQUAL(run_script(d.endpoint, "r", tu_seed(), -1, -1, NULL), 0);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    now = slurp(log, &m);
    CU_ASSERT(now && m == n && memcmp(now, text, n) == 0);
    free(now);

    /* a header torn by a crash (its first 20 bytes): cut off, and the log starts over */
    char good[256];
    path_of(good, sizeof good, "torn-src.log");
    logged_run(good, NULL, "t", tu_seed() ^ 5, -1, -1, NULL);
    unsigned char *g = slurp(good, &m);
    CU_ASSERT_FATAL(g && m > 20);
    path_of(log, sizeof log, "torn-header.log");
    CU_ASSERT_EQUAL_FATAL(spit(log, g, 20), 0);
    free(g);
    logged_run(log, NULL, "t", tu_seed() ^ 6, -1, -1, NULL);
    snprintf(args, sizeof args, "verify %s", log);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "12 records"));
    free(out);
    free(text);
}

/* Whether dashd's log has a line containing what. */
static int log_says(const struct dashd_proc *d, const char *what)
{
    FILE *f = fopen(d->log_path, "r");
    char line[1024];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, what) != NULL;
    if (f)
        fclose(f);
    return found;
}

/* Records that cannot be written (the file hit the file-size limit) are lost, but not
 * silently: once the path is moved and dashd told (SIGHUP), the new file's header says how
 * many were lost, and verify explains the gap with it instead of calling records missing.
 * dashd lives on (SIGXFSZ is ignored) and logs a failure once, not once per batch. */
static void test_audit_records_lost_to_a_full_file_are_marked_in_the_next_header(void)
{
    char log[256], moved[256], args[600], *out = NULL;
    path_of(log, sizeof log, "fsize.log");
    path_of(moved, sizeof moved, "fsize.moved");
    snprintf(args, sizeof args, "--backend cpu --threads 1 --audit %s", log);
    struct rlimit was, small;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_FSIZE, &was) == 0);
    small = was;
    small.rlim_cur = 6000; /* about 20 records; dashd's own log fits too */
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &small) == 0);
    struct dashd_proc d;
    int started = dashd_start(&d, args);
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &was) == 0);
    CU_ASSERT_FATAL(started == 0);
    /* until the file is full */
    for (int run = 0; run < 20 && !log_says(&d, "records are lost until"); run++)
        CU_ASSERT_EQUAL(run_script(d.endpoint, "f", tu_seed(), -1, -1, NULL), 0);
    CU_ASSERT(dashd_alive(&d));
    CU_ASSERT_EQUAL_FATAL(rename(log, moved), 0);
    CU_ASSERT_EQUAL(kill(d.pid, SIGHUP), 0);
    usleep(200000);
    CU_ASSERT_EQUAL(run_script(d.endpoint, "f", tu_seed(), -1, -1, NULL), 0);
    FILE *lf = fopen(d.log_path, "r");
    char line[1024];
    int failures = 0;
    while (lf && fgets(line, sizeof line, lf))
        failures += strstr(line, "records are lost until") != NULL;
    if (lf)
        fclose(lf);
    /* once per episode (the file full before the move; perhaps the new one at the end),
     * not once per record or batch */
    CU_ASSERT(failures >= 1 && failures <= 2);
    if (failures < 1 || failures > 2) {
        snprintf(args, sizeof args, "cat %s >&2", d.log_path);
        (void)tu_run(args, NULL);
    }
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    snprintf(args, sizeof args, "verify %s %s", moved, log);
    CU_ASSERT_EQUAL(dashctl(args, &out), 1);
    printf("\n    %s", out ? out : "");
    CU_ASSERT(out && strstr(out, "were lost: dashd could not write them"));
    CU_ASSERT(out && !strstr(out, "missing"));
    free(out);
}

/* A pipe's bytes until every writer has closed it (a thread: the audit writer blocks on
 * the pipe until someone reads). */
struct drain {
    int fd;
    unsigned char *buf;
    size_t len, cap;
};

static void *drain_main(void *arg)
{
    struct drain *d = arg;
    for (;;) {
        struct pollfd pf = {d->fd, POLLIN, 0};
        if (poll(&pf, 1, 10000) <= 0)
            return NULL;
        if (d->len == d->cap) {
            unsigned char *b = realloc(d->buf, d->cap ? 2 * d->cap : 65536);
            if (!b)
                return NULL;
            d->buf = b;
            d->cap = d->cap ? 2 * d->cap : 65536;
        }
        ssize_t n = read(d->fd, d->buf + d->len, d->cap - d->len);
        if (n == 0)
            return NULL; /* the writer closed: all there is */
        if (n > 0)
            d->len += (size_t)n;
    }
}

/* Records dropped at the very end - the writer behind (here: blocked on a full pipe that
 * nobody reads), the log closed with no record after them - are said by the header it
 * closes with (dropped_before = how many, first_seq = the next), and verify explains the
 * gap with it, calling no record missing. (Before: the only place that said so was the
 * next record, which never came: the loss was silent.) */
static void test_audit_drops_at_the_very_end_are_said_by_the_closing_header(void)
{
    char fifo[256], copy[256], args[600], *out = NULL;
    path_of(fifo, sizeof fifo, "drops.fifo");
    path_of(copy, sizeof copy, "drops.log");
    CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
    struct drain d = {open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC), NULL, 0, 0};
    CU_ASSERT_FATAL(d.fd >= 0);
    CU_ASSERT(fcntl(d.fd, F_SETPIPE_SZ, 4096) >= 4096); /* fills after some 15 records */
    struct audit_config cfg = {.path = fifo, .level = AUDIT_OUTPUTS, .sync = AUDIT_SYNC_NONE,
                               .keep = 1, .server_version = "test", .queue_max = 1};
    struct audit *a = NULL;
    char why[256];
    CU_ASSERT_FATAL(audit_open(&cfg, &a, why, sizeof why) == 0);
    enum { N = 60 };
    char name[201];
    memset(name, 'n', 200);
    name[200] = '\0';
    for (int i = 0; i < N; i++) { /* the writer keeps up until the pipe is full */
        Dash__AuditRecord r = DASH__AUDIT_RECORD__INIT;
        r.client_name = name;
        audit_submit(a, &r);
        usleep(2000);
    }
    pthread_t t;
    CU_ASSERT_FATAL(pthread_create(&t, NULL, drain_main, &d) == 0);
    audit_close(a); /* writes what it holds, then the closing header */
    pthread_join(t, NULL);
    close(d.fd);
    uint64_t records = 0, last_seq = 0, dropped_mid = 0, closing_first = 0, closing_dropped = 0;
    struct auditfile_reader rd;
    struct auditfile_item it;
    auditfile_reader_init(&rd, d.buf, d.len);
    while (auditfile_read(&rd, &it) == 0 && it.kind != AUDITFILE_END) {
        if (it.kind == AUDITFILE_RECORD) {
            records++;
            last_seq = it.frame->record->seq;
            dropped_mid += it.frame->record->dropped_before;
        } else if (it.kind == AUDITFILE_HEADER) {
            closing_first = it.frame->header->first_seq;
            closing_dropped = it.frame->header->has_dropped_before ? it.frame->header->dropped_before : 0;
        }
        auditfile_item_free(&it);
    }
    auditfile_reader_free(&rd);
    printf("\n    %llu of %d records written, %llu dropped at the end (%llu before) ",
           (unsigned long long)records, N, (unsigned long long)closing_dropped,
           (unsigned long long)dropped_mid);
    CU_ASSERT(records >= 2 && records < N);
    CU_ASSERT_EQUAL(closing_first, N + 1);
    CU_ASSERT_EQUAL(closing_dropped, N - last_seq);
    CU_ASSERT_EQUAL(records + dropped_mid + closing_dropped, N);
    FILE *f = fopen(copy, "wb");
    CU_ASSERT_FATAL(f && fwrite(d.buf, 1, d.len, f) == d.len);
    fclose(f);
    free(d.buf);
    snprintf(args, sizeof args, "verify %s", copy);
    CU_ASSERT_EQUAL(dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "were dropped by dashd (its writer fell behind; said so in the "
                                 "header it closed the log with)"));
    CU_ASSERT(out && !strstr(out, "missing"));
    if (!out || strstr(out, "missing"))
        printf("\n%s", out ? out : "");
    free(out);
    unlink(fifo);
}

/* Two sessions of one client name (no rank) that call at the same time share alignment
 * keys, so diff pairs their records in the order dashd received them - which another run
 * need not repeat: diff says so (naming both sessions) and still compares. Sessions of one
 * name one after the other (a restart) pair as they came: no warning. */
static void test_audit_diff_warns_of_sessions_of_one_name_calling_at_once(void)
{
    for (int together = 1; together >= 0; together--) {
        char log[256], args[700], *out = NULL;
        path_of(log, sizeof log, together ? "twins.log" : "restart.log");
        struct dashd_proc d;
        snprintf(args, sizeof args, "--backend cpu --threads 1 --audit %s", log);
        CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
        struct dash_connect_opts o = {.client_name = "twin", .timeout_ms = 20000};
        struct dash_client *c[2] = {NULL, NULL};
        struct dash_buffer *b[2] = {NULL, NULL};
        struct dash_tensor t[2][9];
        struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
        struct tu_rng r;
        tu_rng_init(&r, tu_seed());
        for (int k = 0; k < 2; k++) {
            if (!together && k == 1) {
                dash_close(c[0]);
                c[0] = NULL;
            }
            if (together || k == 0 || !c[k]) {
                CU_ASSERT_EQUAL_FATAL(dash_connect(d.endpoint, &o, &c[k]), 0);
                CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(c[k], 8 * TB + LB, &b[k]), 0);
                for (int i = 0; i < 8; i++)
                    t[k][i] = dash_tensor_dense(b[k], off(i), 1, S, H, D);
                t[k][8] = dash_tensor_lse(b[k], off(8), 1, H, S);
                for (int i = 0; i < 3; i++)
                    tu_fill((unsigned char *)dash_buffer_data(b[k]) + off(i), DTYPE_BF16,
                            (int64_t)NT, &r, 1.0);
            }
            if (together && k == 0)
                continue; /* both open first, then calls in turn */
            int from = together ? 0 : k, to = together ? 1 : k;
            for (int step = 0; step < 2; step++)
                for (int w = from; w <= to; w++) {
                    dash_set_audit(c[w], step, "attn");
                    CU_ASSERT_EQUAL(dash_forward(c[w], &a, &t[w][0], &t[w][1], &t[w][2], &t[w][3],
                                                 &t[w][8], NULL), 0);
                }
        }
        dash_close(c[0]);
        dash_close(c[1]);
        CU_ASSERT_EQUAL(dashd_stop(&d), 0);
        snprintf(args, sizeof args, "diff %s %s 2>&1", log, log);
        CU_ASSERT_EQUAL(dashctl(args, &out), 0);
        CU_ASSERT(out && strstr(out, "identical: 4 records"));
        const int warned = out && strstr(out, "called at the same time") &&
                           strstr(out, "client \"twin\"");
        CU_ASSERT_EQUAL(warned, together);
        if (warned != together)
            printf("\n%s", out ? out : "");
        free(out);
    }
}

/* The disk fills up just as the log rotates (a tmpfs of 256 KiB, filled by another file):
 * the new file's header cannot be written, so no record may be written after it either;
 * once there is room again, the file starts with a header that says how many records were
 * lost. verify finds no record without a header. (Before: the records went on into a file
 * without a header, which verify rejects.) Needs to mount a tmpfs (root); skipped
 * otherwise. */
static void test_audit_disk_full_at_rotation_leaves_no_headerless_file(void)
{
    char mnt[256], cmd[1024], log[300], filler[300], args[800], *out = NULL;
    path_of(mnt, sizeof mnt, "small-fs");
    CU_ASSERT_FATAL(mkdir(mnt, 0700) == 0);
    snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=256k dashtest %s 2>&1", mnt);
    if (tu_run(cmd, &out) != 0) {
        printf("\n    skipped: cannot mount a tmpfs here (%s)", out ? out : "");
        free(out);
        rmdir(mnt);
        return;
    }
    free(out);
    snprintf(log, sizeof log, "%s/a.log", mnt);
    snprintf(filler, sizeof filler, "%s/filler", mnt);
    snprintf(args, sizeof args, "--backend cpu --threads 1 --audit %s --audit-max-size 1 "
             "--audit-keep 1000 --audit-sync every", log);
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, args) == 0);
    CU_ASSERT_EQUAL(run_script(d.endpoint, "full", tu_seed(), -1, -1, NULL), 0);
    usleep(100000);
    /* fill the file system */
    FILE *f = fopen(filler, "wb");
    CU_ASSERT_FATAL(f != NULL);
    static unsigned char block[512];
    while (fwrite(block, 1, sizeof block, f) == sizeof block && fflush(f) == 0)
        ;
    fclose(f);
    CU_ASSERT_EQUAL(run_script(d.endpoint, "full", tu_seed(), -1, -1, NULL), 0);
    usleep(100000);
    unlink(filler);
    usleep(1100000); /* the writer tries the file again once a second */
    CU_ASSERT_EQUAL(run_script(d.endpoint, "full", tu_seed(), -1, -1, NULL), 0);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    snprintf(args, sizeof args, "verify $(ls -1 %s.* | sort -t. -k3 -n -r) %s", log, log);
    CU_ASSERT(dashctl(args, &out) >= 0);
    CU_ASSERT(out && !strstr(out, "before any header"));
    CU_ASSERT(out && strstr(out, "were lost: dashd could not write them"));
    if (out && (strstr(out, "before any header") || !strstr(out, "were lost")))
        printf("\n    %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "umount %s", mnt);
    CU_ASSERT_EQUAL(tu_run(cmd, NULL), 0);
    rmdir(mnt);
}

/* A damaged tail crafted to be slow: 1 MiB in which every fourth byte starts a plausible
 * frame length of 256 KiB. verify reads it, and dashd starts on it (cutting it off), in
 * seconds. (Before: the reader computed a 256 KiB CRC at each of those offsets: 145 s.) */
static void test_audit_reader_is_linear_on_a_crafted_damaged_tail(void)
{
    char good[256], bad[256], args[800], *out = NULL;
    path_of(good, sizeof good, "slow-src.log");
    path_of(bad, sizeof bad, "slow.log");
    logged_run(good, NULL, "s", tu_seed() ^ 7, -1, -1, NULL);
    size_t n;
    unsigned char *p = slurp(good, &n);
    CU_ASSERT_FATAL(p != NULL);
    size_t tail = 1u << 20;
    unsigned char *mix = malloc(n + tail);
    memcpy(mix, p, n);
    static const unsigned char pattern[4] = {0xff, 0xff, 0x03, 0x00}; /* 262143 */
    for (size_t i = 0; i < tail; i++)
        mix[n + i] = pattern[i % 4];
    CU_ASSERT_EQUAL_FATAL(spit(bad, mix, n + tail), 0);
    free(mix);
    free(p);
    double t0 = now_s();
    snprintf(args, sizeof args, "verify %s", bad);
    CU_ASSERT_EQUAL(dashctl(args, &out), 3); /* valid up to a torn tail */
    double verify_s = now_s() - t0;
    CU_ASSERT(out && strstr(out, "12 records"));
    free(out);
    t0 = now_s();
    struct dashd_proc d;
    snprintf(args, sizeof args, "--backend cpu --threads 1 --audit %s", bad);
    CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
    double start_s = now_s() - t0;
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    printf("\n    verify %.2f s, dashd start %.2f s on a 1 MiB crafted tail ", verify_s, start_s);
    CU_ASSERT(verify_s < 5.0);
    CU_ASSERT(start_s < 5.0);
    snprintf(args, sizeof args, "verify %s", bad);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0); /* the tail was cut */
    free(out);
}

/* The search after a bad frame keeps running CRCs for a window that slides with it, not
 * for the whole damaged stretch: a log with a 96 MiB tail of plausible lengths is read
 * under a 312 MiB address-space limit (4 bytes of CRC per byte of the stretch would need
 * 384 MiB). A foreign or damaged file of any size must not exhaust dashd's or dashctl's
 * memory. */
static void test_audit_reader_memory_is_bounded_on_a_long_damaged_stretch(void)
{
    char good[256], bad[256], args[1200], *out = NULL;
    path_of(good, sizeof good, "mem-src.log");
    path_of(bad, sizeof bad, "mem.log");
    logged_run(good, NULL, "m", tu_seed() ^ 9, -1, -1, NULL);
    size_t n;
    unsigned char *p = slurp(good, &n);
    CU_ASSERT_FATAL(p != NULL);
    const size_t tail = (size_t)96 << 20;
    unsigned char *mix = malloc(n + tail);
    CU_ASSERT_FATAL(mix != NULL);
    memcpy(mix, p, n);
    static const unsigned char pattern[4] = {0xff, 0xff, 0x03, 0x00}; /* 262143 */
    for (size_t i = 0; i < tail; i++)
        mix[n + i] = pattern[i % 4];
    CU_ASSERT_EQUAL_FATAL(spit(bad, mix, n + tail), 0);
    free(mix);
    free(p);
#if defined(__SANITIZE_ADDRESS__)
    const char *limit = ""; /* ASan's shadow memory needs the address space a limit would deny */
#else
    const char *limit = "ulimit -v 320000; ";
#endif
    snprintf(args, sizeof args, "%s%s/dashctl audit verify %s 2>&1", limit, tu_build_dir(), bad);
    CU_ASSERT_EQUAL(tu_run(args, &out), 3); /* valid up to a torn tail */
    CU_ASSERT(out && strstr(out, "12 records") && !strstr(out, "out of memory"));
    free(out);
    CU_ASSERT_EQUAL(unlink(bad), 0);
}

/* Bad audit options are refused before anything starts. */
static void test_audit_bad_options_are_refused(void)
{
    char cmd[512], *out = NULL;
    const char *bad[] = {"--audit-level all", "--audit /tmp/x --audit-level loud",
                         "--audit /tmp/x --audit-sync sometimes", "--audit /tmp/x --audit-max-size 5X",
                         "--audit /tmp/x --audit-keep 0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/dashd --backend cpu %s 2>&1", tu_build_dir(), bad[i]);
        CU_ASSERT_EQUAL(tu_run(cmd, &out), 2);
        CU_ASSERT(out && strstr(out, "dashd: "));
        free(out);
    }
    /* an audit path that cannot be opened: exit 1, saying so */
    snprintf(cmd, sizeof cmd, "%s/dashd --backend cpu --endpoint ipc:///tmp/dash-audit-bad-%d.sock "
             "--audit /nonexistent/dir/log 2>&1", tu_build_dir(), (int)getpid());
    CU_ASSERT_EQUAL(tu_run(cmd, &out), 1);
    CU_ASSERT(out && strstr(out, "cannot open /nonexistent/dir/log"));
    free(out);
    CU_ASSERT_EQUAL(dashctl("verify /nonexistent/log 2>&1", &out), 2);
    free(out);
    CU_ASSERT_EQUAL(dashctl("frobnicate 2>&1", &out), 2);
    free(out);
}

/* The determinism contract: the bits never depend on the thread count (nor, on a GPU, on
 * which device ran them). Two runs of one script on daemons of 2 and 3 engine threads
 * compute the same bits, every digest equal: diff calls them identical, in both modes. */
static void test_audit_runs_on_other_thread_counts_diff_identical(void)
{
    char a[300], b[300], da[256], db[256], args[1200], *out = NULL;
    path_of(da, sizeof da, "thr-a");
    path_of(db, sizeof db, "thr-b");
    CU_ASSERT_FATAL(mkdir(da, 0700) == 0 && mkdir(db, 0700) == 0);
    snprintf(a, sizeof a, "%s/rank0.log", da);
    snprintf(b, sizeof b, "%s/rank0.log", db);
    const uint64_t seed = tu_seed() ^ 0x7e4d;
    uint64_t dq_a = 0, dq_b = 0;
    const char *logs[2] = {a, b};
    uint64_t *dqs[2] = {&dq_a, &dq_b};
    for (int i = 0; i < 2; i++) {
        struct dashd_proc d;
        snprintf(args, sizeof args, "--backend cpu --threads %d --audit %s --audit-level all",
                 2 + i, logs[i]);
        CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
        CU_ASSERT_EQUAL(run_script(d.endpoint, "thr", seed, -1, -1, dqs[i]), 0);
        CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    }
    CU_ASSERT_EQUAL(dq_a, dq_b); /* the same bits */
    snprintf(args, sizeof args, "diff %s %s", a, b);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "identical: 12 records matched"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s", da, db);
    CU_ASSERT_EQUAL(dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "identical"));
    free(out);
}

int suite_audit(void)
{
    CU_pSuite s = CU_add_suite("audit", suite_init, suite_clean);
    if (!s)
        return -1;
    ADD_TEST(s, test_audit_runs_diff_identical_and_a_flipped_input_is_named);
    ADD_TEST(s, test_audit_diff_calls_same_inputs_other_outputs_only_outputs);
    ADD_TEST(s, test_audit_diff_tells_same_tokens_different_packing_apart);
    ADD_TEST(s, test_audit_diff_of_directories_names_the_rank_step_and_layer);
    ADD_TEST(s, test_audit_diff_refuses_logs_of_two_digest_versions);
    ADD_TEST(s, test_audit_diff_of_no_records_is_not_identical);
    ADD_TEST(s, test_audit_verify_catches_flip_truncation_and_splice);
    ADD_TEST(s, test_audit_sigterm_loses_nothing_and_sigkill_leaves_a_valid_prefix);
    ADD_TEST(s, test_audit_rotation_and_sighup_keep_one_sequence);
    ADD_TEST(s, test_audit_reader_survives_garbage);
    ADD_TEST(s, test_audit_diff_and_summary_scale_to_long_logs);
    ADD_TEST(s, test_audit_bad_options_are_refused);
    ADD_TEST(s, test_audit_refuses_a_file_that_is_not_an_audit_log);
    ADD_TEST(s, test_audit_records_lost_to_a_full_file_are_marked_in_the_next_header);
    ADD_TEST(s, test_audit_drops_at_the_very_end_are_said_by_the_closing_header);
    ADD_TEST(s, test_audit_diff_warns_of_sessions_of_one_name_calling_at_once);
    ADD_TEST(s, test_audit_disk_full_at_rotation_leaves_no_headerless_file);
    ADD_TEST(s, test_audit_reader_is_linear_on_a_crafted_damaged_tail);
    ADD_TEST(s, test_audit_runs_on_other_thread_counts_diff_identical);
    ADD_TEST(s, test_audit_reader_memory_is_bounded_on_a_long_damaged_stretch);
    ADD_TEST(s, test_audit_diff_reads_every_file_of_a_long_list);
    return 0;
}
