// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_config.c - dashd's config file (--config, INI) against a real dashd: the file sets
 * options, the command line wins over it, a bad file stops dashd at start naming the file
 * and line, and SIGHUP applies what can change live (limits, the audit file) and logs
 * what needs a restart.
 */
#include "suites.h"
#include "harness.h"
#include "testutil.h"
#include "client/dash.h"

#include <CUnit/CUnit.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char conf_path[128];

static void write_conf(const char *text)
{
    FILE *f = fopen(conf_path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(text, f);
    fclose(f);
}

static struct dash_client *client(const struct dashd_proc *d, int *ret_rc)
{
    struct dash_connect_opts o = {.client_name = "config-test", .timeout_ms = 10000};
    struct dash_client *c = NULL;
    *ret_rc = dash_connect(d->endpoint, &o, &c);
    return *ret_rc ? NULL : c;
}

/* Whether the daemon's log has a line containing `what`, waiting up to 5 s. */
static int log_has(const struct dashd_proc *d, const char *what)
{
    return dashd_log_has(d, what, 5000);
}

/* The file sets queue, threads and a limit; --queue on the command line wins. */
static void test_config_file_sets_options_and_command_line_wins(void)
{
    write_conf("# a comment\n"
               "[dashd]\n"
               "queue = 7\n"
               "threads = 1\n"
               "session_timeout = 2.5\n"
               "\n"
               "[limits]\n"
               "sessions = 1\n");
    char extra[256];
    snprintf(extra, sizeof extra, "--config %s --queue 9", conf_path);
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, extra) == 0);
    int rc;
    struct dash_client *a = client(&d, &rc);
    CU_ASSERT_FATAL(a != NULL);
    struct dash_stats *st = NULL;
    CU_ASSERT_FATAL(dash_stats(a, &st) == 0);
    CU_ASSERT_EQUAL(st->queue_capacity, 9); /* the command line */
    CU_ASSERT_EQUAL(st->threads, 1);        /* the file */
    dash_stats_free(st);
    struct dash_client *b = client(&d, &rc); /* [limits] sessions = 1 */
    CU_ASSERT_PTR_NULL(b);
    CU_ASSERT_EQUAL(rc, DASH_ELIMIT);
    CU_ASSERT(log_has(&d, "session timeout 2.5 s"));
    dash_close(a);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

/* The example shipped in systemd/ is a valid config (every line a comment or a default). */
static void test_config_example_file_is_valid(void)
{
    char extra[512];
    snprintf(extra, sizeof extra, "--config %s/../systemd/dashd.conf.example", tu_build_dir());
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, extra) == 0);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
}

/* A bad file stops dashd before it serves: exit status 2 and a line naming the file, the
 * line and what is wrong. */
static void test_config_bad_file_stops_dashd_naming_file_and_line(void)
{
    static const struct {
        const char *text, *says;
    } cases[] = {
        {"[dashd]\nqueue = 4\nqueues = 5\n", ":3: unknown key 'queues' in [dashd]"},
        {"[dashd]\n\n\nqueue = many\n", ":4: queue = many: --queue needs an integer"},
        {"[limits]\nin_flight = -1\n", ":2: in_flight = -1"},
        {"[limit]\nsessions = 1\n", ":2: unknown section [limit]"},
        {"[dashd]\nlimit-sessions = 3\n", ":2: unknown key"}, /* belongs in [limits] */
        {"[dashd]\nthis is not ini\n", ":2: not a line of an INI file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_conf(cases[i].text);
        char cmd[512], *out = NULL;
        snprintf(cmd, sizeof cmd, "%s/dashd --backend cpu --endpoint ipc:///tmp/dash-conf-%d.sock "
                 "--config %s 2>&1", tu_build_dir(), (int)getpid(), conf_path);
        int rc = tu_run(cmd, &out);
        CU_ASSERT_EQUAL(rc, 2);
        CU_ASSERT(out && strstr(out, conf_path) && strstr(out, cases[i].says));
        if (!out || !strstr(out, cases[i].says))
            printf("\n    case %zu said: %s", i, out ? out : "(nothing)");
        free(out);
    }
    /* no file at all */
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s/dashd --config /nonexistent/dashd.conf 2>&1", tu_build_dir());
    CU_ASSERT_EQUAL(tu_run(cmd, &out), 2);
    CU_ASSERT(out && strstr(out, "cannot read the config file /nonexistent/dashd.conf"));
    free(out);
}

/* SIGHUP: the session limit goes from 1 to 2 at once, a new audit path is opened and gets
 * the next op's record, threads (not live) is logged as needing a restart, and --queue
 * from the command line still wins over the file. A file made invalid changes nothing. */
static void test_config_sighup_applies_live_settings_and_logs_the_rest(void)
{
    char audit[128];
    snprintf(audit, sizeof audit, "/tmp/dash-conf-audit-%d.log", (int)getpid());
    unlink(audit);
    write_conf("[dashd]\nthreads = 1\nqueue = 5\n[limits]\nsessions = 1\n");
    char extra[256];
    snprintf(extra, sizeof extra, "--config %s --queue 9", conf_path);
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, extra) == 0);
    int rc;
    struct dash_client *a = client(&d, &rc);
    CU_ASSERT_FATAL(a != NULL);
    CU_ASSERT_PTR_NULL(client(&d, &rc));
    CU_ASSERT_EQUAL(rc, DASH_ELIMIT);

    char text[512];
    snprintf(text, sizeof text, "[dashd]\nthreads = 2\nqueue = 6\naudit = %s\n[limits]\nsessions = 2\n",
             audit);
    write_conf(text);
    CU_ASSERT_FATAL(kill(d.pid, SIGHUP) == 0);
    CU_ASSERT(log_has(&d, "SIGHUP: limit-sessions is now 2 (was 1)"));
    CU_ASSERT(log_has(&d, "SIGHUP: threads changed from 1 to 2, which needs a restart"));
    CU_ASSERT(log_has(&d, "SIGHUP: auditing to"));
    CU_ASSERT(log_has(&d, "SIGHUP: configuration read again (file "));
    CU_ASSERT(log_has(&d, "2 settings changed live, 1 needs a restart"));
    struct dash_client *b = client(&d, &rc);
    CU_ASSERT_PTR_NOT_NULL(b);
    struct dash_stats *st = NULL;
    CU_ASSERT_FATAL(dash_stats(a, &st) == 0);
    CU_ASSERT_EQUAL(st->queue_capacity, 9);
    CU_ASSERT_STRING_EQUAL(st->audit_path, audit);
    dash_stats_free(st);
    /* a forward now is audited in the new file */
    struct dash_buffer *buf = NULL;
    CU_ASSERT_FATAL(dash_shm_alloc(a, 4 * 64 * 64 * 4 + 64 * 4, &buf) == 0);
    struct dash_tensor q = dash_tensor_dense(buf, 0, 1, 64, 1, 64);
    struct dash_tensor o = dash_tensor_dense(buf, 3 * 64 * 64 * 4, 1, 64, 1, 64);
    struct dash_tensor l = dash_tensor_lse(buf, 4 * 64 * 64 * 4, 1, 1, 64);
    struct dash_attn at = {.dtype = DASH_F32};
    memset(dash_buffer_data(buf), 0, 3 * 64 * 64 * 4);
    CU_ASSERT_EQUAL(dash_forward(a, &at, &q, &q, &q, &o, &l, NULL), 0);

    /* an invalid file: nothing changes, and the log says so */
    write_conf("[limits]\nsessions = none\n");
    CU_ASSERT_FATAL(kill(d.pid, SIGHUP) == 0);
    CU_ASSERT(log_has(&d, "SIGHUP: the configuration is not valid"));
    dash_close(b);
    dash_close(a);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s/dashctl audit verify %s", tu_build_dir(), audit);
    CU_ASSERT_EQUAL(tu_run(cmd, &out), 0);
    CU_ASSERT(out && strstr(out, "1 record"));
    if (out && !strstr(out, "1 record"))
        printf("\n    verify: %s", out);
    free(out);
    unlink(audit);
}


/* SIGHUP naming an audit log that cannot be opened while none runs: refused, and a later
 * SIGHUP with the same file, once the path can be opened, opens it (the failed path must
 * not be taken for what runs). */
static void test_config_sighup_retries_an_audit_path_that_failed(void)
{
    char dir[128], audit[160];
    snprintf(dir, sizeof dir, "/tmp/dash-conf-auditdir-%d", (int)getpid());
    snprintf(audit, sizeof audit, "%s/audit.log", dir);
    unlink(audit);
    rmdir(dir);
    write_conf("[dashd]\nthreads = 1\n");
    char extra[256];
    snprintf(extra, sizeof extra, "--config %s", conf_path);
    struct dashd_proc d;
    CU_ASSERT_FATAL(dashd_start(&d, extra) == 0);
    char text[512];
    snprintf(text, sizeof text, "[dashd]\nthreads = 1\naudit = %s\n", audit);
    write_conf(text);
    CU_ASSERT_FATAL(kill(d.pid, SIGHUP) == 0);
    CU_ASSERT(log_has(&d, "SIGHUP: keeping the audit log (none)"));
    CU_ASSERT_FATAL(mkdir(dir, 0700) == 0);
    CU_ASSERT_FATAL(kill(d.pid, SIGHUP) == 0);
    CU_ASSERT(log_has(&d, "SIGHUP: auditing to"));
    int rc;
    struct dash_client *a = client(&d, &rc);
    CU_ASSERT_FATAL(a != NULL);
    struct dash_stats *st = NULL;
    CU_ASSERT_FATAL(dash_stats(a, &st) == 0);
    CU_ASSERT(st->audit_path && strcmp(st->audit_path, audit) == 0);
    dash_stats_free(st);
    dash_close(a);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    unlink(audit);
    rmdir(dir);
}

static int suite_init(void)
{
    snprintf(conf_path, sizeof conf_path, "/tmp/dash-test-%d.conf", (int)getpid());
    return 0;
}

static int suite_clean(void)
{
    unlink(conf_path);
    return 0;
}

int suite_config(void)
{
    CU_pSuite s = CU_add_suite("config", suite_init, suite_clean);
    if (!s)
        return -1;
    ADD_TEST(s, test_config_file_sets_options_and_command_line_wins);
    ADD_TEST(s, test_config_example_file_is_valid);
    ADD_TEST(s, test_config_bad_file_stops_dashd_naming_file_and_line);
    ADD_TEST(s, test_config_sighup_applies_live_settings_and_logs_the_rest);
    ADD_TEST(s, test_config_sighup_retries_an_audit_path_that_failed);
    return 0;
}
