// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_dashctl.c - the dashctl binary, run as a user runs it: exit statuses, what goes to
 * stdout, and, for `dashctl sched`, that the numbers it prints are the DAG model's own
 * (recomputed here in-process with kernels/sched/dag.h) and the closed forms of kernels.md §4.
 *
 * The binary is build/dashctl, next to the test runner (tu_build_dir()); `make test`
 * builds it first.
 */
#include "suites.h"
#include "testutil.h"
#include "kernels/sched/dag.h"
#include "kernels/sched/sched.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The issue's example, in every output mode. */
#define ISSUE_EXAMPLE "sched --mask causal --tiles 16 --sms 16 --heads 4 --c 1 --r 0.25"

static const char *const sched_names[] = {"atomic", "ascending", "descending", "spt", "shift"};

/* ---- helpers ---------------------------------------------------------------------- */

/* Run `dashctl <args>` through the shell (args may redirect); stdout into *ret_out.
 * Returns the exit status, or -1 (after a CUnit failure) if the binary is missing. */
static int dashctl_run(const char *args, char **ret_out)
{
    char path[4096], cmd[8192];
    *ret_out = NULL;
    snprintf(path, sizeof path, "%s/dashctl", tu_build_dir());
    if (access(path, X_OK) != 0) {
        CU_FAIL("dashctl is not built next to the test runner (run make)");
        return -1;
    }
    snprintf(cmd, sizeof cmd, "'%s' %s", path, args);
    int status = tu_run(cmd, ret_out);
    if (!*ret_out) {
        CU_FAIL("could not capture dashctl's output");
        return -1;
    }
    return status;
}

/* Where `"name"` followed by a colon starts in doc: a JSON member, not a string value such
 * as "chosen": "shift". NULL if none. */
static const char *json_member(const char *doc, const char *name)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", name);
    for (const char *p = strstr(doc, quoted); p; p = strstr(p + 1, quoted)) {
        const char *q = p + strlen(quoted);
        while (*q == ' ' || *q == '\n')
            q++;
        if (*q == ':')
            return q + 1;
    }
    return NULL;
}

/* The number in member `key` of the flat object member `obj` of a dashctl JSON document
 * (its values hold arrays but no nested objects, so the first '}' ends it). Returns 0,
 * or -1 when absent or not a number (null). */
static int json_number(const char *doc, const char *obj, const char *key, double *ret)
{
    const char *o = json_member(doc, obj);
    if (!o)
        return -1;
    const char *end = strchr(o, '}');
    const char *k = json_member(o, key);
    if (!k || !end || k > end)
        return -1;
    char *after;
    double v = strtod(k, &after);
    if (after == k)
        return -1;
    *ret = v;
    return 0;
}

/* The makespan dag_model() gives in-process, for what ISSUE_EXAMPLE describes. */
static double issue_example_makespan(enum sched_kind kind)
{
    struct sched_shape sh = {.batch = 1, .heads = 4, .seqlen_q = 16 * 64, .seqlen_k = 16 * 64,
                             .block_m = 64, .block_n = 64, .mask = SCHED_MASK_CAUSAL};
    struct sched s;
    struct dag_stats st;
    CU_ASSERT_FATAL(sched_init(&s, kind, &sh, SCHED_W_DEFAULT) == 0);
    CU_ASSERT_FATAL(dag_model(&s, 16, 1.0, 0.25, NULL, NULL, &st) == 0);
    return st.makespan;
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_dashctl_version_help_and_unknown_command(void)
{
    char *out;
    CU_ASSERT_EQUAL(dashctl_run("--version", &out), 0);
    CU_ASSERT_STRING_EQUAL(out, "dashctl 0.1.0\n");
    free(out);
    CU_ASSERT_EQUAL(dashctl_run("--help", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "sched"));
    free(out);
    /* usage goes to stderr, so stdout stays empty */
    CU_ASSERT_EQUAL(dashctl_run("frobnicate 2>/dev/null", &out), 2);
    CU_ASSERT_STRING_EQUAL(out, "");
    free(out);
    CU_ASSERT_EQUAL(dashctl_run("2>/dev/null", &out), 2);
    free(out);
    /* help after a subcommand is help, not a file name */
    CU_ASSERT_EQUAL(dashctl_run("audit summary --help", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "dashctl audit summary"));
    free(out);
}

static void test_dashctl_sched_prints_every_schedule(void)
{
    char *out, line[64];
    CU_ASSERT_EQUAL_FATAL(dashctl_run(ISSUE_EXAMPLE, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "mask causal"));
    for (size_t i = 0; i < sizeof sched_names / sizeof sched_names[0]; i++) {
        snprintf(line, sizeof line, "\n%s: makespan ", sched_names[i]);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, line));
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\nauto: makespan "));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "visits"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "any order")); /* atomic's order */
    free(out);
}

static void test_dashctl_sched_json_makespans_match_dag_model(void)
{
    char *out;
    double v;
    CU_ASSERT_EQUAL_FATAL(dashctl_run(ISSUE_EXAMPLE " --json", &out), 0);
    CU_ASSERT_EQUAL(out[0], '{');
    CU_ASSERT_PTR_NOT_NULL(json_member(out, "shape"));
    for (size_t i = 0; i < sizeof sched_names / sizeof sched_names[0]; i++) {
        CU_ASSERT_PTR_NOT_NULL(json_member(out, sched_names[i]));
        CU_ASSERT_EQUAL(json_number(out, sched_names[i], "work", &v), 0);
        CU_ASSERT_DOUBLE_EQUAL(v, 4 * (16 * 17 / 2) * 1.25, 0.0);
    }
    CU_ASSERT_PTR_NULL(strstr(out, "nan"));
    CU_ASSERT_PTR_NULL(strstr(out, "inf"));

    /* printed so that they read back bit for bit */
    CU_ASSERT_EQUAL(json_number(out, "descending", "makespan", &v), 0);
    CU_ASSERT_DOUBLE_EQUAL(v, issue_example_makespan(SCHED_DESCENDING), 0.0);
    CU_ASSERT_EQUAL(json_number(out, "shift", "makespan", &v), 0);
    CU_ASSERT_DOUBLE_EQUAL(v, issue_example_makespan(SCHED_SHIFT), 0.0);

    /* auto reports dag_auto()'s choice and that schedule's makespan on --sms */
    struct sched_shape sh = {1, 4, 16 * 64, 16 * 64, 64, 64, SCHED_MASK_CAUSAL, 0, 0, 0};
    enum sched_kind kind;
    char chosen[64];
    CU_ASSERT_FATAL(dag_auto(&sh, SCHED_W_DEFAULT, &kind) == 0);
    snprintf(chosen, sizeof chosen, "\"chosen\": \"%s\"", sched_kind_name(kind));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, chosen));
    CU_ASSERT_EQUAL(json_number(out, "auto", "makespan", &v), 0);
    CU_ASSERT_DOUBLE_EQUAL(v, issue_example_makespan(kind), 0.0);
    free(out);
}

/* kernels.md §4, one head, n = 8 SMs = 8 tiles: naive n(c+r) + (n-1)r, shift n(c+r). */
static void test_dashctl_sched_json_full_mask_closed_forms(void)
{
    char *out;
    double v;
    CU_ASSERT_EQUAL_FATAL(dashctl_run("sched --mask full --tiles 8 --sms 8 --c 1 --r 0.25 --json",
                                      &out), 0);
    CU_ASSERT_EQUAL(json_number(out, "ascending", "makespan", &v), 0);
    CU_ASSERT_DOUBLE_EQUAL(v, 8 * 1.25 + 7 * 0.25, 0.0);
    CU_ASSERT_EQUAL(json_number(out, "shift", "makespan", &v), 0);
    CU_ASSERT_DOUBLE_EQUAL(v, 10.0, 0.0);
    free(out);
}

static void test_dashctl_sched_dot_is_one_whole_digraph(void)
{
    char *out;
    CU_ASSERT_EQUAL_FATAL(dashctl_run(ISSUE_EXAMPLE " --dot --schedule shift", &out), 0);
    size_t len = strlen(out);
    CU_ASSERT_EQUAL(strncmp(out, "digraph", 7), 0);
    CU_ASSERT(len >= 2 && strcmp(out + len - 2, "}\n") == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "shift"));
    free(out);
}

static void test_dashctl_sched_rejects_bad_options_with_exit_2(void)
{
    /* the last three: more work than the model takes on (it used to run for minutes or
     * until memory ran out), refused at once */
    static const char *const bad[] = {"--no-such-flag", "--tiles 0", "--mask diagonal",
                                      "--c -1", "--schedule fastest", "--tiles", "--w 0",
                                      "--tiles 2049", "--batch 100000 --heads 2",
                                      "--cu-seqlens 0,100000000"};
    char args[256], *out;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "sched %s 2>/dev/null", bad[i]);
        CU_ASSERT_EQUAL(dashctl_run(args, &out), 2);
        CU_ASSERT_STRING_EQUAL(out, "");
        free(out);
        /* and says why in exactly one line on stderr */
        snprintf(args, sizeof args, "sched %s 2>&1 >/dev/null", bad[i]);
        CU_ASSERT_EQUAL(dashctl_run(args, &out), 2);
        CU_ASSERT_EQUAL(strncmp(out, "dashctl sched: ", 15), 0);
        const char *nl = strchr(out, '\n');
        CU_ASSERT(nl != NULL && nl[1] == '\0');
        free(out);
    }
}

/* The work bound of a packed batch counts only the SMs that can get a job, as it does for
 * one shape: one 64-row sequence is one job, so on the default 64 SMs its bound is its
 * work, 1.25, as `--tiles 1` says - not 1.25 / 64. */
static void test_dashctl_sched_packed_work_bound_counts_only_sms_with_a_job(void)
{
    char *out;
    CU_ASSERT_EQUAL_FATAL(dashctl_run("sched --tiles 1 --schedule ascending", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "(work bound 1.25)"));
    free(out);
    CU_ASSERT_EQUAL_FATAL(dashctl_run("sched --cu-seqlens 0,64 --schedule ascending", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "(work bound 1.25, 1 additions)"));
    free(out);
    /* mask causal: shift pairs kv-tiles, 4 tiles are 2 jobs; 10 additions of 1.25 on 2 SMs */
    CU_ASSERT_EQUAL_FATAL(dashctl_run("sched --mask causal --cu-seqlens 0,256 --schedule shift --sms 3",
                                      &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "(work bound 6.25, 10 additions)"));
    free(out);
}

/* Shift needs as many SMs as jobs in a chunk (8 here): on 2 it cannot finish, which is a
 * result to report, not an error. */
static void test_dashctl_sched_reports_shift_deadlock(void)
{
    char *out;
    double v;
    CU_ASSERT_EQUAL_FATAL(
        dashctl_run("sched --mask full --tiles 8 --sms 2 --w 8 --schedule shift --json", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"deadlock\": true"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"makespan\": null"));
    CU_ASSERT_EQUAL(json_number(out, "shift", "work", &v), 0);
    CU_ASSERT_DOUBLE_EQUAL(v, 64 * 1.25, 0.0);
    CU_ASSERT_PTR_NULL(json_member(out, "ascending")); /* --schedule: only that one */
    free(out);
    CU_ASSERT_EQUAL_FATAL(
        dashctl_run("sched --mask full --tiles 8 --sms 2 --w 8 --schedule shift", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "shift: deadlock"));
    free(out);
}

/* --cu-seqlens: the packed batch's makespans are dag_model_seqs' own on the sequences'
 * schedules; auto names the sequence it modelled and the batch-invariant choice. */
static void test_dashctl_sched_packed_batch_makespans_match_dag_model(void)
{
    static const int32_t cu[] = {0, 100, 357, 1000, 1001, 3000};
    const int32_t nseq = 5;
    char *out;
    double v;
    CU_ASSERT_EQUAL_FATAL(dashctl_run("sched --mask causal --cu-seqlens 0,100,357,1000,1001,3000 "
                                      "--window 300,-1 --heads 2 --w 8 --json", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(json_member(out, "packed"));
    for (int k = SCHED_ASCENDING; k < SCHED_KIND_COUNT; k++) {
        struct sched seqs[5];
        for (int32_t b = 0; b < nseq; b++) {
            struct sched_shape sh = {.batch = 1, .heads = 2, .seqlen_q = cu[b + 1] - cu[b],
                                     .seqlen_k = cu[b + 1] - cu[b], .block_m = 64, .block_n = 64,
                                     .mask = SCHED_MASK_CAUSAL, .window = 1, .window_left = 300,
                                     .window_right = -1};
            CU_ASSERT_FATAL(sched_init(&seqs[b], (enum sched_kind)k, &sh, 8) == 0);
        }
        struct dag_stats st;
        CU_ASSERT_FATAL(dag_model_seqs(seqs, nseq, 8, 1.0, 0.25, NULL, NULL, &st) == 0);
        CU_ASSERT_EQUAL(json_number(out, sched_kind_name((enum sched_kind)k), "makespan", &v), 0);
        CU_ASSERT_DOUBLE_EQUAL(v, st.makespan, 0.0);
        CU_ASSERT_EQUAL(json_number(out, sched_kind_name((enum sched_kind)k), "additions", &v), 0);
        CU_ASSERT_DOUBLE_EQUAL(v, (double)st.additions, 0.0);
    }
    CU_ASSERT_EQUAL(json_number(out, "auto", "decided_by", &v), 0);
    CU_ASSERT_DOUBLE_EQUAL(v, 4, 0.0); /* 1999 x 1999 rows */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"batch_invariant\": \""));
    free(out);
    CU_ASSERT_EQUAL_FATAL(dashctl_run("sched --cu-seqlens 0,100,357 --cu-seqlens-k 0,50,60", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "packed batch: 2 sequences"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "batch-invariant auto -> "));
    free(out);
}

/* A packed batch whose shift deadlocks on --sms still reports the batch's additions (as
 * the dense shape reports its work), not whatever was on the stack: one sequence of 16 x 16
 * tiles, W 8 on 2 SMs. */
static void test_dashctl_sched_packed_deadlock_reports_the_additions(void)
{
    char *out;
    double v;
    CU_ASSERT_EQUAL_FATAL(dashctl_run("sched --cu-seqlens 0,1000 --sms 2 --w 8 --json", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"deadlock\": true"));
    CU_ASSERT_EQUAL(json_number(out, "shift", "additions", &v), 0);
    CU_ASSERT_DOUBLE_EQUAL(v, 16 * 16, 0.0);
    CU_ASSERT_EQUAL(json_number(out, "ascending", "additions", &v), 0);
    CU_ASSERT_DOUBLE_EQUAL(v, 16 * 16, 0.0);
    free(out);
}

/* --window: tiles outside the band are not visited (kv-tile 0 of a 6x6 causal grid with a
 * 1-tile window visits q-tiles 0 and 1 only). */
static void test_dashctl_sched_window_visits_only_the_band(void)
{
    char *out;
    CU_ASSERT_EQUAL_FATAL(dashctl_run("sched --mask causal --window 32,0 --tiles 6 --block-m 32 "
                                      "--block-n 32 --schedule ascending --json", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"visits\": [[0,1],[1,2],[2,3],[3,4],[4,5],[5]]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"orders\": [[0],[0,1],[1,2],[2,3],[3,4],[4,5]]"));
    free(out);
    static const char *const bad[] = {"--window 3", "--window -2,0", "--window 1,x",
                                      "--cu-seqlens 1,5", "--cu-seqlens 0,5,3", "--cu-seqlens 0",
                                      "--cu-seqlens 0,5 --tiles 2", "--cu-seqlens-k 0,4",
                                      "--cu-seqlens 0,5 --cu-seqlens-k 0,4,8",
                                      "--cu-seqlens 0,5 --dot"};
    char args[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "sched %s 2>&1 >/dev/null", bad[i]);
        CU_ASSERT_EQUAL(dashctl_run(args, &out), 2);
        CU_ASSERT_EQUAL(strncmp(out, "dashctl sched: ", 15), 0);
        const char *nl = strchr(out, '\n');
        CU_ASSERT(nl != NULL && nl[1] == '\0');
        free(out);
    }
}

/* Costs are finite, but the times the model sums from them may not be: JSON has no inf,
 * so such costs are refused (exit 2, one line) rather than printed as "inf". */
static void test_dashctl_sched_refuses_costs_whose_times_overflow(void)
{
    static const char *const bad[] = {"--c 1e308 --r 1e308 --tiles 2 --json",
                                      "--c 1e308 --tiles 4 --schedule ascending",
                                      "--c 1e308 --cu-seqlens 0,300,500 --json"};
    char args[256], *out;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "sched %s 2>/dev/null", bad[i]);
        CU_ASSERT_EQUAL(dashctl_run(args, &out), 2);
        CU_ASSERT_PTR_NULL(strstr(out, "inf"));
        free(out);
        snprintf(args, sizeof args, "sched %s 2>&1 >/dev/null", bad[i]);
        CU_ASSERT_EQUAL(dashctl_run(args, &out), 2);
        CU_ASSERT_EQUAL(strncmp(out, "dashctl sched: ", 15), 0);
        free(out);
    }
    /* large but summable costs still work */
    CU_ASSERT_EQUAL(dashctl_run("sched --c 1e300 --r 0 --tiles 2 --schedule spt --json", &out), 0);
    CU_ASSERT_PTR_NULL(strstr(out, "inf"));
    free(out);
}

int suite_dashctl(void)
{
    CU_pSuite s = CU_add_suite("dashctl", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_dashctl_version_help_and_unknown_command);
    ADD_TEST(s, test_dashctl_sched_packed_deadlock_reports_the_additions);
    ADD_TEST(s, test_dashctl_sched_prints_every_schedule);
    ADD_TEST(s, test_dashctl_sched_json_makespans_match_dag_model);
    ADD_TEST(s, test_dashctl_sched_json_full_mask_closed_forms);
    ADD_TEST(s, test_dashctl_sched_dot_is_one_whole_digraph);
    ADD_TEST(s, test_dashctl_sched_packed_work_bound_counts_only_sms_with_a_job);
    ADD_TEST(s, test_dashctl_sched_rejects_bad_options_with_exit_2);
    ADD_TEST(s, test_dashctl_sched_reports_shift_deadlock);
    ADD_TEST(s, test_dashctl_sched_packed_batch_makespans_match_dag_model);
    ADD_TEST(s, test_dashctl_sched_window_visits_only_the_band);
    ADD_TEST(s, test_dashctl_sched_refuses_costs_whose_times_overflow);
    return 0;
}
