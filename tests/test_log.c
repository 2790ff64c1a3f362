// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_log.c - dashd's log lines (daemon/log.c): plain "<time> <level> <message>" lines,
 * and "<N><message>" lines, N the syslog priority, when stderr is the journal's stream
 * (JOURNAL_STREAM names stderr's device and inode, as systemd sets it); in process, and
 * from a real dashd started the way systemd starts it. And a session's lines sent to the
 * journal with its fields: in a mount namespace of its own (where the machine allows one),
 * a socket of the test's stands at /run/systemd/journal/socket and reads what dashd sends.
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
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <poll.h>
#include <errno.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

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

#define JOURNAL_SKIP 77

/* Child: the journal's socket in a namespace of our own, dashd logging to it, a session
 * that makes dashd log a line; exit 0 when a datagram carried the session's fields. */
static int journal_child(void)
{
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return JOURNAL_SKIP;
    mkdir("/run/systemd", 0755);
    mkdir("/run/systemd/journal", 0755);
    if (mount("tmpfs", "/run/systemd/journal", "tmpfs", 0, "mode=0755") != 0)
        return JOURNAL_SKIP;
    int js = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "/run/systemd/journal/socket");
    if (js < 0 || bind(js, (struct sockaddr *)&sa, sizeof sa) != 0)
        return 2;
    char log_path[64], endpoint[96];
    snprintf(log_path, sizeof log_path, "/tmp/dash-log-journal-%d", (int)getpid());
    snprintf(endpoint, sizeof endpoint, "ipc:///tmp/dash-log-journal-%d.sock", (int)getpid());
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
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
    int found = 0;
    struct raw_client *raw = up == 0 ? raw_connect(endpoint) : NULL;
    if (raw) {
        Dash__Hello h = DASH__HELLO__INIT;
        h.protocol_version = WIRE_PROTOCOL_VERSION;
        h.client_name = "journal-test";
        h.run_tag = "run-j";
        Dash__Request req = DASH__REQUEST__INIT;
        req.id = 1;
        req.body_case = DASH__REQUEST__BODY_HELLO;
        req.hello = &h;
        Dash__Reply *rep = raw_call(raw, &req, 5000);
        uint64_t session = rep ? rep->session_id : 0;
        wire_free_reply(rep);
        /* a request of the session that dashd logs (at debug) while handling it */
        Dash__UnregisterBuffer ub = DASH__UNREGISTER_BUFFER__INIT;
        ub.buffer_id = 424242;
        Dash__Request req2 = DASH__REQUEST__INIT;
        req2.id = 2;
        req2.body_case = DASH__REQUEST__BODY_UNREGISTER_BUFFER;
        req2.unregister_buffer = &ub;
        wire_free_reply(raw_call(raw, &req2, 5000));
        raw_close(raw);
        char want_session[64];
        snprintf(want_session, sizeof want_session, "\nDASHD_SESSION=%llu\n",
                 (unsigned long long)session);
        static char dgram[65536];
        struct pollfd p = {.fd = js, .events = POLLIN};
        while (!found && poll(&p, 1, 3000) == 1) {
            ssize_t n = recv(js, dgram, sizeof dgram - 1, 0);
            if (n <= 0)
                break;
            dgram[n] = '\0';
            found = strstr(dgram, "MESSAGE=request 2: DASH_ENOBUF") && strstr(dgram, "\nPRIORITY=7\n") &&
                    strstr(dgram, want_session) && strstr(dgram, "\nDASHD_CLIENT=journal-test\n") &&
                    strstr(dgram, "\nDASHD_RUN_TAG=run-j\n") &&
                    strstr(dgram, "\nSYSLOG_IDENTIFIER=dashd\n");
        }
    }
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    /* the line went to the journal, not to the stream */
    const char *text = slurp(log_path);
    int in_stream = text && strstr(text, "DASH_ENOBUF") != NULL;
    unlink(log_path);
    return found && !in_stream && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

static void test_log_session_lines_reach_the_journal_with_their_fields(void)
{
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0)
        _exit(journal_child());
    int status;
    CU_ASSERT_FATAL(waitpid(pid, &status, 0) == pid);
    CU_ASSERT(WIFEXITED(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) == JOURNAL_SKIP) {
        fprintf(stderr, "(not checked: no mount namespace here) ");
        return;
    }
    CU_ASSERT(WEXITSTATUS(status) == 0);
}


/* Child: a client process that registers shared memory under libdash's naming with a
 * newline and a priority prefix in its name, then dies without a Goodbye. Its own zmq
 * context (the parent's does not survive fork). 0 once registered. */
static int dying_client(const char *endpoint, const char *shm_name)
{
    int fd = shm_open(shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0)
        return 2;
    close(fd);
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    int timeout = 5000;
    zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    if (zmq_connect(sock, endpoint) != 0)
        return 3;
    Dash__Hello h = DASH__HELLO__INIT;
    h.protocol_version = WIRE_PROTOCOL_VERSION;
    h.client_name = "dying";
    h.has_pid = 1;
    h.pid = (uint32_t)getpid();
    Dash__RegisterBuffer rb = DASH__REGISTER_BUFFER__INIT;
    rb.shm_name = (char *)shm_name;
    rb.size = 4096;
    Dash__Request req[2] = {DASH__REQUEST__INIT, DASH__REQUEST__INIT};
    req[0].id = 1;
    req[0].body_case = DASH__REQUEST__BODY_HELLO;
    req[0].hello = &h;
    req[1].id = 2;
    req[1].body_case = DASH__REQUEST__BODY_REGISTER_BUFFER;
    req[1].register_buffer = &rb;
    for (int i = 0; i < 2; i++) {
        void *buf;
        size_t len;
        char reply[4096];
        if (wire_encode(&req[i].base, &buf, &len) != 0 || zmq_send(sock, buf, len, 0) != (int)len)
            return 4;
        free(buf);
        int n = zmq_recv(sock, reply, sizeof reply, 0);
        Dash__Reply *rep = n > 0 ? wire_decode_reply(reply, (size_t)n, WIRE_DECODE_BUDGET) : NULL;
        if (!rep || rep->code != 0)
            return 5 + i;
        wire_free_reply(rep);
    }
    return 0; /* and die: no Goodbye, no close */
}

/* What a client names its shared memory must not become a log line of its own: under
 * the journal's stream a "\n<N>" in it would be a line at any priority the client likes. */
static void test_log_client_strings_cannot_start_a_line(void)
{
    char log_path[64], endpoint[96];
    snprintf(log_path, sizeof log_path, "/tmp/dash-log-inj-%d", (int)getpid());
    snprintf(endpoint, sizeof endpoint, "ipc:///tmp/dash-log-inj-%d.sock", (int)getpid());
    unlink(log_path);
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
            _exit(126);
        set_journal_stream(STDERR_FILENO);
        char dashd[512];
        snprintf(dashd, sizeof dashd, "%s/dashd", tu_build_dir());
        execl(dashd, dashd, "--backend", "cpu", "--threads", "1", "--endpoint", endpoint,
              (char *)NULL);
        _exit(127);
    }
    int up = -1;
    for (int i = 0; i < 200 && up != 0; i++)
        up = raw_ping_endpoint(endpoint, 50);
    CU_ASSERT_FATAL(up == 0);
    pid_t cpid = fork();
    CU_ASSERT_FATAL(cpid >= 0);
    if (cpid == 0) {
        char name[128];
        snprintf(name, sizeof name, "/dash-%d-x\n<2>FORGED by a client", (int)getpid());
        _exit(dying_client(endpoint, name));
    }
    int cstatus = -1;
    CU_ASSERT(waitpid(cpid, &cstatus, 0) == cpid);
    CU_ASSERT(WIFEXITED(cstatus) && WEXITSTATUS(cstatus) == 0);
    char name[128];
    snprintf(name, sizeof name, "/dash-%d-x\n<2>FORGED by a client", (int)cpid);
    /* the daemon notices the client is gone and unlinks the object, logging its name */
    for (int i = 0; i < 100; i++) {
        int fd = shm_open(name, O_RDONLY, 0);
        if (fd < 0)
            break;
        close(fd);
        usleep(50000);
    }
    usleep(100000);
    kill(pid, SIGTERM);
    int status = -1;
    CU_ASSERT(waitpid(pid, &status, 0) == pid);
    (void)shm_unlink(name);
    const char *text = slurp(log_path);
    CU_ASSERT_FATAL(text != NULL);
    CU_ASSERT(strstr(text, "unlinked its shared memory") != NULL);
    CU_ASSERT(!matches(text, "^<2>FORGED"));
    if (matches(text, "^<2>FORGED"))
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
    ADD_TEST(s, test_log_session_lines_reach_the_journal_with_their_fields);
    ADD_TEST(s, test_log_client_strings_cannot_start_a_line);
    return 0;
}
