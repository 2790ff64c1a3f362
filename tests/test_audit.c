// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_audit.c - the audit log end to end on the CPU backend: a real dashd with --audit,
 * a real client (libdash) running a small "training script", and `dashctl audit` on the
 * logs it leaves, compared: two identical runs diff as identical (on other thread counts
 * too), a flipped input bit is named with its step and label, and across ranks with its
 * rank; diff tells outputs that alone differ and the same tokens packed otherwise, refuses
 * logs of two digest versions and an empty comparison, warns of sessions of one name
 * calling at once, and scales to long logs and long lists of files. The digests in the
 * records are checked against the outputs the client received. The log files themselves
 * (verify, signals, rotation, damaged and foreign files, lost records) are
 * test_audit_file.c's; both use the fixture here (test_audit_int.h), and suite_audit below
 * registers the tests of both, in the order they run.
 */
#include "suites.h"
#include "harness.h"
#include "test_audit_int.h"
#include "testutil.h"

#include "client/dash.h"
#include "kernels/digest/digest.h"
#include "proto/auditfile.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* q k v out dout dq dk dv, then lse, in one shared-memory buffer */
uint64_t ta_off(int t)
{
    return t < 8 ? (uint64_t)t * TB : 8 * TB;
}

char ta_dir[128];

static int suite_init(void)
{
    snprintf(ta_dir, sizeof ta_dir, "/tmp/dash-audit-%d", (int)getpid());
    return mkdir(ta_dir, 0700) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ta_dir);
    return tu_run(cmd, NULL) == 0 ? 0 : -1;
}

void ta_path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", ta_dir, name);
}

/* `dashctl audit <args>`: exit status, stdout in *out (may be NULL). */
int ta_dashctl(const char *args, char **out)
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
        t[i] = dash_tensor_dense(b, ta_off(i), 1, S, H, D);
    t[8] = dash_tensor_lse(b, ta_off(8), 1, H, S);
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .schedule = DASH_SCHED_SHIFT};
    struct tu_rng r;
    tu_rng_init(&r, seed);
    for (int step = 0; step < STEPS && !rc; step++)
        for (int layer = 0; layer < 2 && !rc; layer++) {
            for (int i = 0; i < 5; i++) /* q k v, out (overwritten), dout */
                tu_fill(mem + ta_off(i == 3 ? 4 : i), DTYPE_BF16, (int64_t)NT, &r, 1.0);
            if (step == flip_step && layer == flip_layer)
                mem[ta_off(0) + 77] ^= 0x04;
            char label[32];
            snprintf(label, sizeof label, "layer%d.attn", layer);
            dash_set_audit(c, step, label);
            rc = dash_forward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], NULL);
            if (!rc)
                rc = dash_backward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], &t[4], &t[5], &t[6],
                                   &t[7], NULL);
        }
    if (ret_dq_digest)
        CU_ASSERT_EQUAL(digest_rows(mem + ta_off(5), TB, D * 2, ret_dq_digest), 0);
    dash_close(c);
    return rc;
}

int ta_run_script(const char *endpoint, const char *run_tag, uint64_t seed, int flip_step,
                  int flip_layer, uint64_t *ret_dq_digest)
{
    return run_script_ranked(endpoint, run_tag, seed, flip_step, flip_layer, 0, 0, ret_dq_digest);
}

/* Start dashd with an audit log, run the script, stop it with SIGTERM. */
void ta_logged_run(const char *log, const char *extra, const char *tag, uint64_t seed,
                   int flip_step, int flip_layer, uint64_t *ret_dq_digest)
{
    struct dashd_proc d;
    char args[512];
    snprintf(args, sizeof args, "--backend cpu --threads 2 --audit %s %s", log, extra ? extra : "");
    CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
    CU_ASSERT_EQUAL(ta_run_script(d.endpoint, tag, seed, flip_step, flip_layer, ret_dq_digest), 0);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

unsigned char *ta_slurp(const char *path, size_t *ret_size)
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

int ta_spit(const char *path, const unsigned char *p, size_t n)
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
    unsigned char *p = ta_slurp(src, &n);
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

double ta_now_s(void)
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
    ta_path_of(a, sizeof a, "run-a.log");
    ta_path_of(b, sizeof b, "run-b.log");
    ta_path_of(c, sizeof c, "run-c.log");
    const uint64_t seed = tu_seed() ^ 0xa0d17;
    uint64_t dq_a = 0, dq_b = 0;
    ta_logged_run(a, "--audit-level all", "exp", seed, -1, -1, &dq_a);
    ta_logged_run(b, "--audit-level all", "exp", seed, -1, -1, &dq_b);
    ta_logged_run(c, "--audit-level all", "exp", seed, 1, 1, NULL);
    CU_ASSERT_EQUAL(dq_a, dq_b);

    char *out = NULL;
    snprintf(args, sizeof args, "diff %s %s", a, b);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "identical: 12 records matched"));
    free(out);

    snprintf(args, sizeof args, "diff %s %s", a, c);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "step 1 label \"layer1.attn\" forward"));
    CU_ASSERT(out && strstr(out, "inputs differ: q "));
    free(out);

    /* the recorded dq digest of the last backward is what the client received */
    char want[32];
    snprintf(want, sizeof want, "dq=%016llx", (unsigned long long)dq_a);
    snprintf(args, sizeof args, "dump %s | tail -n 1", a);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, want));
    CU_ASSERT(out && strstr(out, "step=2 label=layer1.attn backward"));
    free(out);

    snprintf(args, sizeof args, "verify %s", a);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "12 records (seq 1..12) in 1 file, 1 header: OK"));
    free(out);
    snprintf(args, sizeof args, "summary %s", a);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
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
    ta_path_of(d, sizeof d, sub);
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
    CU_ASSERT_EQUAL(ta_spit(log, (const unsigned char *)"not a log\n", 10), 0);
}

static void test_audit_diff_of_directories_names_the_rank_step_and_layer(void)
{
    const uint64_t seed = tu_seed() ^ 0x4a7c;
    ranked_run("ranks-a", 0, 0, seed, 0);
    ranked_run("ranks-b", 1, 1, seed, 0);
    ranked_run("ranks-c", 0, 0, seed, 1);
    char a[256], b[256], c[256], args[900], *out = NULL;
    ta_path_of(a, sizeof a, "ranks-a");
    ta_path_of(b, sizeof b, "ranks-b");
    ta_path_of(c, sizeof c, "ranks-c");

    snprintf(args, sizeof args, "diff %s %s 2>/dev/null", a, b);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "rank 0: identical, 12 records matched"));
    CU_ASSERT(out && strstr(out, "rank 1: identical, 12 records matched"));
    CU_ASSERT(out && strstr(out, "identical: 2 ranks"));
    free(out);

    snprintf(args, sizeof args, "diff %s %s 2>/dev/null", a, c);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "rank 0: identical, 12 records matched"));
    CU_ASSERT(out && strstr(out, "rank 1: first difference at step 1, record 2 of the step "
                                 "(forward \"layer1.attn\")"));
    CU_ASSERT(out && strstr(out, "inputs differ: q "));
    CU_ASSERT(out && strstr(out, "first divergence: rank 1, step 1, record 2 of the step "
                                 "(forward \"layer1.attn\"); 1 of 2 ranks differ"));
    free(out);

    /* the same from files with --ranks; a directory against a file is refused */
    snprintf(args, sizeof args, "diff --ranks %s/shared.log %s/shared.log", a, c);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "first divergence: rank 1, step 1, record 2"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s/shared.log 2>&1", a, c);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 2);
    CU_ASSERT(out && strstr(out, "is a directory but"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s 2>&1 >/dev/null", a, b);
    ta_dashctl(args, &out);
    CU_ASSERT(out && strstr(out, "notes.txt holds no audit log header: skipped"));
    free(out);

    snprintf(args, sizeof args, "dump %s/rank1.log | grep -c 'rank=1/2 step='", b);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && atoi(out) == 12);
    free(out);
    snprintf(args, sizeof args, "dump --json %s/shared.log | grep -c '\"rank\":0,\"world_size\":2'", a);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
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
    ta_path_of(a, sizeof a, "o-a.log");
    ta_path_of(b, sizeof b, "o-b.log");
    ta_logged_run(a, "--audit-level all", "o", tu_seed() ^ 5, -1, -1, NULL);
    CU_ASSERT_EQUAL(rewrite_log(a, b, flip_dk_of_record_8, NULL), 1);
    snprintf(args, sizeof args, "diff %s %s", a, b);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "step 1 label \"layer1.attn\" backward"));
    CU_ASSERT(out && strstr(out, "only outputs differ: dk "));
    free(out);
    snprintf(args, sizeof args, "verify %s", b);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
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
    ta_path_of(a, sizeof a, "dv-a.log");
    ta_path_of(da, sizeof da, "dv-da");
    ta_path_of(db, sizeof db, "dv-db");
    CU_ASSERT_FATAL(mkdir(da, 0700) == 0 && mkdir(db, 0700) == 0);
    snprintf(b, sizeof b, "%s/rank0.log", db);
    ta_logged_run(a, "", "dv", tu_seed() ^ 6, -1, -1, NULL);
    CU_ASSERT(rewrite_log(a, b, header_to_digest_before, NULL) >= 1);
    size_t na;
    unsigned char *pa = ta_slurp(a, &na);
    CU_ASSERT_FATAL(pa != NULL);
    char copy[300];
    snprintf(copy, sizeof copy, "%s/rank0.log", da);
    CU_ASSERT_FATAL(ta_spit(copy, pa, na) == 0);
    free(pa);
    snprintf(args, sizeof args, "diff %s %s 2>&1", a, b);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 2);
    CU_ASSERT(out && strstr(out, why));
    CU_ASSERT(out && !strstr(out, "identical"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s 2>&1", da, db);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 2);
    CU_ASSERT(out && strstr(out, why));
    free(out);
    snprintf(args, sizeof args, "diff %s %s", a, copy);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "identical"));
    free(out);
    snprintf(args, sizeof args, "dump --json %s | grep -c '\"digest_version\":%d'", a, DIGEST_VERSION);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
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
        t[i] = dash_tensor_dense(b, ta_off(i), 1, S, H, D);
        t[i].ndim = 3; /* (total, heads, head_dim) */
        t[i].shape[0] = S, t[i].shape[1] = H, t[i].shape[2] = D, t[i].shape[3] = 0;
        memset(t[i].strides, 0, sizeof t[i].strides);
    }
    t[8] = dash_tensor_lse(b, ta_off(8), 1, H, S);
    t[8].ndim = 2;
    t[8].shape[0] = H, t[8].shape[1] = S, t[8].shape[2] = 0;
    memset(t[8].strides, 0, sizeof t[8].strides);
    int32_t *cu = (int32_t *)(void *)(mem + ta_off(8) + LB);
    cu[0] = 0, cu[1] = cut, cu[2] = S;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .schedule = DASH_SCHED_SHIFT,
                          .softcap = 30.0f, .max_seqlen_q = S, .max_seqlen_k = S};
    a.cu_seqlens_q = (struct dash_tensor){.buf = b, .offset = ta_off(8) + LB, .ndim = 1, .shape = {3}};
    a.cu_seqlens_k = a.cu_seqlens_q;
    if (window_left >= -1) {
        a.window = 1;
        a.window_left = window_left;
        a.window_right = -1;
    }
    struct tu_rng r;
    tu_rng_init(&r, 0x7061636bULL); /* the same tokens in every run */
    for (int i = 0; i < 5; i++)
        tu_fill(mem + ta_off(i == 3 ? 4 : i), DTYPE_BF16, (int64_t)NT, &r, 1.0);
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
    ta_path_of(a, sizeof a, "pk-a.log");
    ta_path_of(b, sizeof b, "pk-b.log");
    ta_path_of(c, sizeof c, "pk-c.log");
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
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "window=(16,-1) softcap=30 varlen=2 cu_q="));
    free(out);
    snprintf(args, sizeof args, "dump --json %s | tail -n 1", a);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "\"varlen\":{\"batch\":2,\"max_seqlen_q\":64,"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s", a, b);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "label \"packed.attn\" forward"));
    CU_ASSERT(out && strstr(out, "same tokens, different packing: q, k, v and dout are the same bytes"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s", a, c);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "parameters differ: window (16, -1) softcap 30 vs window (8, -1) softcap 30"));
    CU_ASSERT(out && !strstr(out, "packing"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s", a, a);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    free(out);
    /* summary: the same tokens packed otherwise are another call, not a divergence (the
     * forwards of a and b had the same inputs and other outputs: it counted one) */
    snprintf(args, sizeof args, "summary %s %s", a, b);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "divergences: 0 of 4 "));
    free(out);
}

/* Nothing compared proves nothing: a run tag that matches no record (a typo) on both
 * sides, or two files that are no audit logs, are refused (exit 2), never "identical". */
static void test_audit_diff_of_no_records_is_not_identical(void)
{
    char a[256], n1[256], n2[256], args[1200], *out = NULL;
    ta_path_of(a, sizeof a, "none-a.log");
    ta_path_of(n1, sizeof n1, "none-1.txt");
    ta_path_of(n2, sizeof n2, "none-2.txt");
    ta_logged_run(a, "", "exp", tu_seed() ^ 0x40e, -1, -1, NULL);
    CU_ASSERT_EQUAL(ta_spit(n1, (const unsigned char *)"not a log\n", 10), 0);
    CU_ASSERT_EQUAL(ta_spit(n2, (const unsigned char *)"nor this\n", 9), 0);
    snprintf(args, sizeof args, "diff --run-a exq --run-b exq %s %s 2>&1", a, a);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 2);
    CU_ASSERT(out && !strstr(out, "identical:"));
    free(out);
    snprintf(args, sizeof args, "diff --ranks --run-a exq --run-b exq %s %s 2>&1", a, a);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 2);
    CU_ASSERT(out && !strstr(out, "identical:"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s 2>&1", n1, n2);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 2);
    CU_ASSERT(out && !strstr(out, "identical:"));
    free(out);
    snprintf(args, sizeof args, "diff --run-a exp --run-b exp %s %s", a, a);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
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
    ta_path_of(a, sizeof a, "long-a.log");
    ta_path_of(b, sizeof b, "long-b.log");
    ta_path_of(small, sizeof small, "long-small.log");
    synthetic_log(a, 60000, unique_in, some_out);
    synthetic_log(b, 60000, unique_in, some_out);
    snprintf(args, sizeof args, "timeout 20 %s/dashctl audit diff %s %s", tu_build_dir(), a, b);
    double t0 = ta_now_s();
    CU_ASSERT_EQUAL(tu_run(args, &out), 0);
    CU_ASSERT(out && strstr(out, "identical: 60000 records matched"));
    free(out);
    snprintf(args, sizeof args, "timeout 20 %s/dashctl audit summary %s", tu_build_dir(), a);
    CU_ASSERT_EQUAL(tu_run(args, &out), 0);
    CU_ASSERT(out && strstr(out, "divergences: 0 of 60000"));
    free(out);
    printf("\n    diff and summary of 60000 records: %.2f s ", ta_now_s() - t0);
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
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(want > 0 && out && strstr(out, expect));
    free(out);
}

/* A side of diff may list any number of files (--audit-keep goes up to 1000): all of
 * them are compared. 300 files a side, the last one of B from a run with a flipped bit. */
static void test_audit_diff_reads_every_file_of_a_long_list(void)
{
    char a[256], c[256];
    ta_path_of(a, sizeof a, "many-a.log");
    ta_path_of(c, sizeof c, "many-c.log");
    const uint64_t seed = tu_seed() ^ 0x3001;
    ta_logged_run(a, "--audit-level all", "many", seed, -1, -1, NULL);
    ta_logged_run(c, "--audit-level all", "many", seed, 2, 1, NULL);
    const size_t files = 300, len = 64 + 2 * files * 12;
    char *cmd = malloc(len), *out = NULL;
    CU_ASSERT_FATAL(cmd != NULL);
    size_t at = (size_t)snprintf(cmd, len, "cd %s && exec 2>/dev/null && %s/dashctl audit diff ", ta_dir, tu_build_dir());
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

/* Two sessions of one client name (no rank) that call at the same time share alignment
 * keys, so diff pairs their records in the order dashd received them - which another run
 * need not repeat: diff says so (naming both sessions) and still compares. Sessions of one
 * name one after the other (a restart) pair as they came: no warning. */
static void test_audit_diff_warns_of_sessions_of_one_name_calling_at_once(void)
{
    for (int together = 1; together >= 0; together--) {
        char log[256], args[700], *out = NULL;
        ta_path_of(log, sizeof log, together ? "twins.log" : "restart.log");
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
                    t[k][i] = dash_tensor_dense(b[k], ta_off(i), 1, S, H, D);
                t[k][8] = dash_tensor_lse(b[k], ta_off(8), 1, H, S);
                for (int i = 0; i < 3; i++)
                    tu_fill((unsigned char *)dash_buffer_data(b[k]) + ta_off(i), DTYPE_BF16,
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
        CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
        CU_ASSERT(out && strstr(out, "identical: 4 records"));
        const int warned = out && strstr(out, "called at the same time") &&
                           strstr(out, "client \"twin\"");
        CU_ASSERT_EQUAL(warned, together);
        if (warned != together)
            printf("\n%s", out ? out : "");
        free(out);
    }
}

/* The determinism contract: the bits never depend on the thread count (nor, on a GPU, on
 * which device ran them). Two runs of one script on daemons of 2 and 3 engine threads
 * compute the same bits, every digest equal: diff calls them identical, in both modes. */
static void test_audit_runs_on_other_thread_counts_diff_identical(void)
{
    char a[300], b[300], da[256], db[256], args[1200], *out = NULL;
    ta_path_of(da, sizeof da, "thr-a");
    ta_path_of(db, sizeof db, "thr-b");
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
        CU_ASSERT_EQUAL(ta_run_script(d.endpoint, "thr", seed, -1, -1, dqs[i]), 0);
        CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    }
    CU_ASSERT_EQUAL(dq_a, dq_b); /* the same bits */
    snprintf(args, sizeof args, "diff %s %s", a, b);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "identical: 12 records matched"));
    free(out);
    snprintf(args, sizeof args, "diff %s %s", da, db);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
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
