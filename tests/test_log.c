// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_log.c - dashd's log lines (daemon/log.c): plain "<time> <level> <message>" lines,
 * and "<N><message>" lines, N the syslog priority, when stderr is the journal's stream
 * (JOURNAL_STREAM names stderr's device and inode, as systemd sets it); in process, and
 * from a real dashd started the way systemd starts it.
 */
#include "suites.h"
#include "harness.h"
#include "testutil.h"
#include "daemon/log.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* JOURNAL_STREAM as systemd would set it for fd. */
static void set_journal_stream(int fd)
{
    struct stat st;
    char v[64];
    fstat(fd, &st);
    snprintf(v, sizeof v, "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    setenv("JOURNAL_STREAM", v, 1);
}

static int matches(const char *text, const char *pattern)
{
    regex_t re;
    if (regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE | REG_NOSUB) != 0)
        return 0;
    int ok = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

static void test_log_lines_carry_priorities_only_on_the_journal_stream(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/dash-log-test-%d", (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);

    set_journal_stream(fd);
    int journal = log_init();
    log_set_level(LOG_DEBUG);
    log_error("e %d", 1);
    log_warn("w %d", 2);
    log_info("i %d", 3);
    log_debug("d %d", 4);
    /* a stream of another file (a child that inherited the variable): plain lines */
    setenv("JOURNAL_STREAM", "1:2", 1);
    int other = log_init();
    log_info("plain %d", 5);
    unsetenv("JOURNAL_STREAM");
    int none = log_init();
    log_warn("plain %d", 6);
    log_set_level(LOG_INFO);

    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fd);
    CU_ASSERT(journal == 1);
    CU_ASSERT(other == 0);
    CU_ASSERT(none == 0);
    const char *text = slurp(path);
    CU_ASSERT_FATAL(text != NULL);
    CU_ASSERT(matches(text, "^<3>e 1$"));
    CU_ASSERT(matches(text, "^<4>w 2$"));
    CU_ASSERT(matches(text, "^<6>i 3$"));
    CU_ASSERT(matches(text, "^<7>d 4$"));
    CU_ASSERT(matches(text, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}Z info plain 5$"));
    CU_ASSERT(matches(text, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}Z warn plain 6$"));
    unlink(path);
}

static void test_log_dashd_under_journal_stream_writes_priority_prefixes(void)
{
    char log_path[64], endpoint[96];
    snprintf(log_path, sizeof log_path, "/tmp/dash-log-dashd-%d", (int)getpid());
    snprintf(endpoint, sizeof endpoint, "ipc:///tmp/dash-log-dashd-%d.sock", (int)getpid());
    unlink(log_path);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
            _exit(126);
        set_journal_stream(STDERR_FILENO);
        char dashd[512];
        snprintf(dashd, sizeof dashd, "%s/dashd", tu_build_dir());
        execl(dashd, dashd, "--backend", "cpu", "--threads", "1", "--log-level", "debug",
              "--endpoint", endpoint, (char *)NULL);
        _exit(127);
    }
    int up = -1;
    for (int i = 0; i < 200 && up != 0; i++)
        up = raw_ping_endpoint(endpoint, 50);
    CU_ASSERT(up == 0);
    /* a malformed message: a debug line for the refusal */
    struct raw_client *raw = raw_connect(endpoint);
    CU_ASSERT_FATAL(raw != NULL);
    CU_ASSERT(raw_send(raw, "\xff\xff", 2) == 0);
    Dash__Reply *rep = raw_recv(raw, 5000);
    CU_ASSERT(rep != NULL);
    wire_free_reply(rep);
    raw_close(raw);
    kill(pid, SIGTERM);
    int status = -1;
    CU_ASSERT(waitpid(pid, &status, 0) == pid);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    const char *text = slurp(log_path);
    CU_ASSERT_FATAL(text != NULL);
    CU_ASSERT(matches(text, "^<6>dashd [0-9.]+ serving "));
    CU_ASSERT(matches(text, "^<7>request [0-9]+: DASH_EMALFORMED: "));
    CU_ASSERT(matches(text, "^<6>stopped$"));
    /* every line has a priority and no timestamp of its own */
    int lines = 0, prefixed = 0;
    for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "") {
        lines++;
        prefixed += l[0] == '<' && strchr("3467", l[1]) && l[2] == '>' &&
                    !(l[3] >= '0' && l[3] <= '9');
    }
    CU_ASSERT(lines >= 3);
    CU_ASSERT(prefixed == lines);
    if (prefixed != lines)
        fprintf(stderr, "\n%s\n", text);
    unlink(log_path);
}

int suite_log(void)
{
    CU_pSuite s = CU_add_suite("log", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_log_lines_carry_priorities_only_on_the_journal_stream);
    ADD_TEST(s, test_log_dashd_under_journal_stream_writes_priority_prefixes);
    return 0;
}
