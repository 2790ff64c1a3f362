// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_audit_file.c - suite audit's tests of the log files themselves: verify catches a
 * flipped byte, a torn tail and a spliced record; SIGTERM loses nothing, SIGKILL leaves a
 * log valid up to its end; rotation and SIGHUP keep one sequence across files; the reader
 * survives garbage and stays linear in time and bounded in memory on a damaged tail; dashd
 * refuses a file that is not an audit log and bad options, and says how many records it
 * lost to a full file, a full disk or a writer that fell behind. The fixture and the
 * registration are test_audit.c's (test_audit_int.h).
 */
#include "harness.h"
#include "test_audit_int.h"
#include "testutil.h"

#include "client/dash.h"
#include "daemon/audit.h"
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
#include <unistd.h>

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

/* verify: a flipped byte inside a record, a cut-off tail, and a record spliced in from
 * another log are each reported with their offset. */
void test_audit_verify_catches_flip_truncation_and_splice(void)
{
    char a[256], b[256], bad[256], args[900];
    ta_path_of(a, sizeof a, "v-a.log");
    ta_path_of(b, sizeof b, "v-b.log");
    ta_path_of(bad, sizeof bad, "v-bad.log");
    ta_logged_run(a, NULL, "v", tu_seed() ^ 1, -1, -1, NULL);
    ta_logged_run(b, NULL, "v", tu_seed() ^ 2, -1, -1, NULL);
    size_t na, nb;
    unsigned char *pa = ta_slurp(a, &na), *pb = ta_slurp(b, &nb);
    CU_ASSERT_FATAL(pa && pb);
    uint64_t fa[32], fb[32];
    size_t ka = frames_of(pa, na, fa, 32), kb = frames_of(pb, nb, fb, 32);
    CU_ASSERT_FATAL(ka == 13 && kb == 13); /* a header and 12 records each */
    char *out = NULL, want[128];

    /* a flipped byte in the middle of record 5 */
    uint64_t at = (fa[5] + fa[6]) / 2;
    pa[at] ^= 0x01;
    CU_ASSERT_EQUAL_FATAL(ta_spit(bad, pa, na), 0);
    pa[at] ^= 0x01;
    snprintf(args, sizeof args, "verify %s", bad);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 1);
    snprintf(want, sizeof want, "offset %llu: %llu corrupt bytes", (unsigned long long)fa[5],
             (unsigned long long)(fa[6] - fa[5]));
    CU_ASSERT(out && strstr(out, want));
    CU_ASSERT(out && strstr(out, "records 5..5 are missing"));
    free(out);

    /* the last record cut short */
    CU_ASSERT_EQUAL_FATAL(ta_spit(bad, pa, na - 5), 0);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 3);
    snprintf(want, sizeof want, "offset %llu: torn tail", (unsigned long long)fa[12]);
    CU_ASSERT(out && strstr(out, want));
    CU_ASSERT(out && strstr(out, "11 records (seq 1..11)"));
    free(out);

    /* a file that is no audit log at all: said so, not "valid up to offset 0" */
    static const char not_a_log[] = "root:x:0:0:root:/root:/bin/sh\n";
    CU_ASSERT_EQUAL_FATAL(ta_spit(bad, (const unsigned char *)not_a_log, sizeof not_a_log - 1), 0);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 1);
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
    CU_ASSERT_EQUAL_FATAL(ta_spit(bad, sp, na + len3), 0);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 1);
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
void test_audit_sigterm_loses_nothing_and_sigkill_leaves_a_valid_prefix(void)
{
    char log[256], args[900];
    ta_path_of(log, sizeof log, "kill.log");
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
        t[i] = dash_tensor_dense(b, ta_off(i), 1, S, H, D);
    t[8] = dash_tensor_lse(b, ta_off(8), 1, H, S);
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
    int st = ta_dashctl(args, &out);
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
        t[i] = dash_tensor_dense(b, ta_off(i), 1, S, H, D);
    t[8] = dash_tensor_lse(b, ta_off(8), 1, H, S);
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
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "2 headers: OK"));
    free(out);
    snprintf(args, sizeof args, "dump --json %s | grep -c '\"client\":\"burst\"'", log);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
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
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    if (!out || strtol(out, NULL, 10) != 25)
        fprintf(stderr, "\n  second segment: %s records", out ? out : "?");
    CU_ASSERT(out && strtol(out, NULL, 10) == 25);
    free(out);
}

/* Size rotation keeps PATH.1.. with one sequence across them; SIGHUP after a move
 * (logrotate) starts a fresh PATH that continues the sequence. The SIGHUP comes between
 * two requests of the client, so no record can fall between the files unseen. */
void test_audit_rotation_and_sighup_keep_one_sequence(void)
{
    char log[256], moved[256], args[1200];
    ta_path_of(log, sizeof log, "rot.log");
    ta_path_of(moved, sizeof moved, "rot.moved");
    struct dashd_proc d;
    snprintf(args, sizeof args, "--backend cpu --threads 2 --audit %s --audit-max-size 1K "
             "--audit-keep 20", log);
    CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
    CU_ASSERT_EQUAL(ta_run_script(d.endpoint, "rot", tu_seed(), -1, -1, NULL), 0);
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
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "12 records (seq 1..12)"));
    CU_ASSERT(out && strstr(out, ": OK"));
    free(out);
    struct stat st;
    CU_ASSERT(stat(log, &st) == 0 && st.st_size <= 1024);

    /* logrotate's way: move the file, SIGHUP, and the next records start a new file */
    ta_path_of(log, sizeof log, "hup.log");
    snprintf(args, sizeof args, "--backend cpu --threads 2 --audit %s", log);
    CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
    CU_ASSERT_EQUAL(ta_run_script(d.endpoint, "hup", tu_seed(), -1, -1, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(rename(log, moved), 0);
    CU_ASSERT_EQUAL(kill(d.pid, SIGHUP), 0);
    struct stat st2;
    for (int i = 0; i < 200 && stat(log, &st2) != 0; i++)
        usleep(10000); /* the writer reopens as soon as it hears of the signal */
    CU_ASSERT_EQUAL_FATAL(stat(log, &st2), 0);
    CU_ASSERT_EQUAL(ta_run_script(d.endpoint, "hup", tu_seed(), -1, -1, NULL), 0);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    snprintf(args, sizeof args, "verify %s %s", moved, log);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "24 records (seq 1..24) in 2 files, 2 headers: OK"));
    free(out);
    /* the new file holds the second run, and any records of the first that the writer had
     * not written when the signal came (it trails the replies): seq N..24 with N <= 13 */
    snprintf(args, sizeof args, "verify %s", log);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
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
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "identical: 24 records matched"));
    free(out);
}

/* dashctl audit on files that are not audit logs - random bytes, an empty file, a valid
 * log with garbage appended or prepended - reports problems and never crashes. */
void test_audit_reader_survives_garbage(void)
{
    char good[256], bad[256], args[900], *out = NULL;
    ta_path_of(good, sizeof good, "g-good.log");
    ta_path_of(bad, sizeof bad, "g-bad.log");
    ta_logged_run(good, NULL, "g", tu_seed() ^ 9, -1, -1, NULL);
    size_t n;
    unsigned char *p = ta_slurp(good, &n);
    CU_ASSERT_FATAL(p != NULL);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x9a7b);
    unsigned char *junk = malloc(65536);
    for (size_t i = 0; i < 65536; i++)
        junk[i] = (unsigned char)tu_next(&r);
    for (int round = 0; round < 4; round++) {
        if (round == 0) {
            CU_ASSERT_EQUAL_FATAL(ta_spit(bad, junk, 65536), 0);
        } else if (round == 1) {
            CU_ASSERT_EQUAL_FATAL(ta_spit(bad, junk, 0), 0);
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
            CU_ASSERT_EQUAL_FATAL(ta_spit(bad, mix, at), 0);
            free(mix);
        }
        const char *cmds[] = {"verify", "dump", "dump --json", "summary"};
        for (int c = 0; c < 4; c++) {
            snprintf(args, sizeof args, "%s %s >/dev/null 2>&1; echo $?", cmds[c], bad);
            CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
            int status = out ? atoi(out) : -1;
            free(out);
            /* verify finds problems (1), or in the third round a corrupt stretch (1);
             * nothing may crash (a signal shows as 128+) */
            CU_ASSERT(status >= 0 && status < 128);
            if (c == 0)
                CU_ASSERT(status == 1 || (round == 3 && status == 3));
        }
        snprintf(args, sizeof args, "diff %s %s >/dev/null 2>&1; echo $?", good, bad);
        CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
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
void test_audit_refuses_a_file_that_is_not_an_audit_log(void)
{
    char path[256], cmd[1024], *out = NULL;
    ta_path_of(path, sizeof path, "not-a-log.txt");
    size_t n = 108 * 1024;
    unsigned char *text = malloc(n);
    for (size_t i = 0; i < n; i++)
        text[i] = (unsigned char)"precious notes, not an audit log\n"[i % 33];
    CU_ASSERT_EQUAL_FATAL(ta_spit(path, text, n), 0);
    snprintf(cmd, sizeof cmd, "timeout 10 %s/dashd --backend cpu --endpoint ipc://%s/nal.sock "
             "--audit %s 2>&1", tu_build_dir(), ta_dir, path);
    CU_ASSERT_EQUAL(tu_run(cmd, &out), 1);
    CU_ASSERT(out && strstr(out, "is not an audit log"));
    free(out);
    size_t m;
    unsigned char *now = ta_slurp(path, &m);
    CU_ASSERT(now && m == n && memcmp(now, text, n) == 0);
    free(now);

    /* SIGHUP onto a path that someone replaced with their own file */
    char log[256], args[600];
    ta_path_of(log, sizeof log, "replaced.log");
    snprintf(args, sizeof args, "--backend cpu --threads 1 --audit %s", log);
    struct dashd_proc d;
    CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
    CU_ASSERT_EQUAL(ta_run_script(d.endpoint, "r", tu_seed(), -1, -1, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(rename(path, log), 0);
    CU_ASSERT_EQUAL(kill(d.pid, SIGHUP), 0);
    usleep(200000);
    CU_ASSERT_EQUAL(ta_run_script(d.endpoint, "r", tu_seed(), -1, -1, NULL), 0);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    now = ta_slurp(log, &m);
    CU_ASSERT(now && m == n && memcmp(now, text, n) == 0);
    free(now);

    /* a header torn by a crash (its first 20 bytes): cut off, and the log starts over */
    char good[256];
    ta_path_of(good, sizeof good, "torn-src.log");
    ta_logged_run(good, NULL, "t", tu_seed() ^ 5, -1, -1, NULL);
    unsigned char *g = ta_slurp(good, &m);
    CU_ASSERT_FATAL(g && m > 20);
    ta_path_of(log, sizeof log, "torn-header.log");
    CU_ASSERT_EQUAL_FATAL(ta_spit(log, g, 20), 0);
    free(g);
    ta_logged_run(log, NULL, "t", tu_seed() ^ 6, -1, -1, NULL);
    snprintf(args, sizeof args, "verify %s", log);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0);
    CU_ASSERT(out && strstr(out, "12 records"));
    free(out);
    free(text);
}

/* Records that cannot be written (the file hit the file-size limit) are lost, but not
 * silently: once the path is moved and dashd told (SIGHUP), the new file's header says how
 * many were lost, and verify explains the gap with it instead of calling records missing.
 * dashd lives on (SIGXFSZ is ignored) and logs a failure once, not once per batch. */
void test_audit_records_lost_to_a_full_file_are_marked_in_the_next_header(void)
{
    char log[256], moved[256], args[600], *out = NULL;
    ta_path_of(log, sizeof log, "fsize.log");
    ta_path_of(moved, sizeof moved, "fsize.moved");
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
    for (int run = 0; run < 20 && !dashd_log_has(&d, "records are lost until", 0); run++)
        CU_ASSERT_EQUAL(ta_run_script(d.endpoint, "f", tu_seed(), -1, -1, NULL), 0);
    CU_ASSERT(dashd_alive(&d));
    CU_ASSERT_EQUAL_FATAL(rename(log, moved), 0);
    CU_ASSERT_EQUAL(kill(d.pid, SIGHUP), 0);
    usleep(200000);
    CU_ASSERT_EQUAL(ta_run_script(d.endpoint, "f", tu_seed(), -1, -1, NULL), 0);
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
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 1);
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
void test_audit_drops_at_the_very_end_are_said_by_the_closing_header(void)
{
    char fifo[256], copy[256], args[600], *out = NULL;
    ta_path_of(fifo, sizeof fifo, "drops.fifo");
    ta_path_of(copy, sizeof copy, "drops.log");
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
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 1);
    CU_ASSERT(out && strstr(out, "were dropped by dashd (its writer fell behind; said so in the "
                                 "header it closed the log with)"));
    CU_ASSERT(out && !strstr(out, "missing"));
    if (!out || strstr(out, "missing"))
        printf("\n%s", out ? out : "");
    free(out);
    unlink(fifo);
}

/* The disk fills up just as the log rotates (a tmpfs of 256 KiB, filled by another file):
 * the new file's header cannot be written, so no record may be written after it either;
 * once there is room again, the file starts with a header that says how many records were
 * lost. verify finds no record without a header. (Before: the records went on into a file
 * without a header, which verify rejects.) Needs to mount a tmpfs (root); skipped
 * otherwise. */
void test_audit_disk_full_at_rotation_leaves_no_headerless_file(void)
{
    char mnt[256], cmd[1024], log[300], filler[300], args[800], *out = NULL;
    ta_path_of(mnt, sizeof mnt, "small-fs");
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
    CU_ASSERT_EQUAL(ta_run_script(d.endpoint, "full", tu_seed(), -1, -1, NULL), 0);
    usleep(100000);
    /* fill the file system */
    FILE *f = fopen(filler, "wb");
    CU_ASSERT_FATAL(f != NULL);
    static unsigned char block[512];
    while (fwrite(block, 1, sizeof block, f) == sizeof block && fflush(f) == 0)
        ;
    fclose(f);
    CU_ASSERT_EQUAL(ta_run_script(d.endpoint, "full", tu_seed(), -1, -1, NULL), 0);
    usleep(100000);
    unlink(filler);
    usleep(1100000); /* the writer tries the file again once a second */
    CU_ASSERT_EQUAL(ta_run_script(d.endpoint, "full", tu_seed(), -1, -1, NULL), 0);
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    snprintf(args, sizeof args, "verify $(ls -1 %s.* | sort -t. -k3 -n -r) %s", log, log);
    CU_ASSERT(ta_dashctl(args, &out) >= 0);
    CU_ASSERT(out && !strstr(out, "before any header"));
    CU_ASSERT(out && strstr(out, "were lost: dashd could not write them"));
    if (out && (strstr(out, "before any header") || !strstr(out, "were lost")))
        printf("\n    %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "umount %s", mnt);
    CU_ASSERT_EQUAL(tu_run(cmd, NULL), 0);
    rmdir(mnt);
}

/* bad: the log at good followed by tail bytes in which every fourth byte starts a
 * plausible frame length of 256 KiB (a damaged tail crafted to be slow to search). */
static void write_crafted_tail(const char *bad, const char *good, size_t tail)
{
    size_t n;
    unsigned char *p = ta_slurp(good, &n);
    CU_ASSERT_FATAL(p != NULL);
    unsigned char *mix = malloc(n + tail);
    CU_ASSERT_FATAL(mix != NULL);
    memcpy(mix, p, n);
    static const unsigned char pattern[4] = {0xff, 0xff, 0x03, 0x00}; /* 262143 */
    for (size_t i = 0; i < tail; i++)
        mix[n + i] = pattern[i % 4];
    CU_ASSERT_EQUAL_FATAL(ta_spit(bad, mix, n + tail), 0);
    free(mix);
    free(p);
}

/* A damaged tail crafted to be slow: 1 MiB in which every fourth byte starts a plausible
 * frame length of 256 KiB. verify reads it, and dashd starts on it (cutting it off), in
 * seconds. (Before: the reader computed a 256 KiB CRC at each of those offsets: 145 s.) */
void test_audit_reader_is_linear_on_a_crafted_damaged_tail(void)
{
    char good[256], bad[256], args[800], *out = NULL;
    ta_path_of(good, sizeof good, "slow-src.log");
    ta_path_of(bad, sizeof bad, "slow.log");
    ta_logged_run(good, NULL, "s", tu_seed() ^ 7, -1, -1, NULL);
    write_crafted_tail(bad, good, (size_t)1 << 20);
    double t0 = ta_now_s();
    snprintf(args, sizeof args, "verify %s", bad);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 3); /* valid up to a torn tail */
    double verify_s = ta_now_s() - t0;
    CU_ASSERT(out && strstr(out, "12 records"));
    free(out);
    t0 = ta_now_s();
    struct dashd_proc d;
    snprintf(args, sizeof args, "--backend cpu --threads 1 --audit %s", bad);
    CU_ASSERT_EQUAL_FATAL(dashd_start(&d, args), 0);
    double start_s = ta_now_s() - t0;
    CU_ASSERT_EQUAL(dashd_stop(&d), 0);
    printf("\n    verify %.2f s, dashd start %.2f s on a 1 MiB crafted tail ", verify_s, start_s);
    CU_ASSERT(verify_s < 5.0);
    CU_ASSERT(start_s < 5.0);
    snprintf(args, sizeof args, "verify %s", bad);
    CU_ASSERT_EQUAL(ta_dashctl(args, &out), 0); /* the tail was cut */
    free(out);
}

/* The search after a bad frame keeps running CRCs for a window that slides with it, not
 * for the whole damaged stretch: a log with a 96 MiB tail of plausible lengths is read
 * under a 312 MiB address-space limit (4 bytes of CRC per byte of the stretch would need
 * 384 MiB). A foreign or damaged file of any size must not exhaust dashd's or dashctl's
 * memory. */
void test_audit_reader_memory_is_bounded_on_a_long_damaged_stretch(void)
{
    char good[256], bad[256], args[1200], *out = NULL;
    ta_path_of(good, sizeof good, "mem-src.log");
    ta_path_of(bad, sizeof bad, "mem.log");
    ta_logged_run(good, NULL, "m", tu_seed() ^ 9, -1, -1, NULL);
    write_crafted_tail(bad, good, (size_t)96 << 20);
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
void test_audit_bad_options_are_refused(void)
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
    CU_ASSERT_EQUAL(ta_dashctl("verify /nonexistent/log 2>&1", &out), 2);
    free(out);
    CU_ASSERT_EQUAL(ta_dashctl("frobnicate 2>&1", &out), 2);
    free(out);
}
