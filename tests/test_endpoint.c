// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_endpoint.c - whose daemon a client talks to, and who can keep dashd from starting
 * (issue 14, item 5). Real processes only: a second Unix user is a forked child that
 * setuid()s to an unused uid (SQUATTER_UID, and VICTIM_UID where a test needs a user of
 * its own), so these tests need root and say "skipped" without it. Children report
 * through a shared anonymous mapping, never through CUnit.
 *
 *   squatters   a raw Unix listener that counts connections and bytes (nothing may
 *               reach it), a raw ROUTER that answers Hello with success as dashd would
 *               (it counts what it receives), and a real dashd running as the other user
 *   dashd       started from a copy of build/dashd in a directory every uid can read
 *
 * Every test here failed on the code before the trust checks, except the halves that
 * check that the caller's own daemon and a system service stay reachable.
 */
#include "suites.h"
#include "harness.h"
#include "testutil.h"
#include "client/dash.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define SQUATTER_UID 54321 /* unused uids: no passwd entry needed */
#define VICTIM_UID 54322
#define MAX_KINDS 16

/* What children report. */
struct shared {
    volatile int ready, stop;
    volatile int connections; /* raw listener: connections accepted */
    volatile long bytes;      /* raw listener: bytes received */
    volatile int kinds[MAX_KINDS]; /* raw ROUTER: requests received, by body case */
    volatile int rc[8];       /* a client child's results */
    char why[4][1024];
};

static struct shared *sh;
static char bindir[64]; /* copies of dashd and dashctl that every uid can run */
static pid_t kids[16];  /* children not yet reaped: the teardown ends what a failure left */
static struct dashd_proc D; /* the harness's dashd, when a test runs one */

static pid_t track(pid_t pid)
{
    for (int i = 0; pid > 0 && i < 16; i++)
        if (!kids[i]) {
            kids[i] = pid;
            break;
        }
    return pid;
}

static void untrack(pid_t pid)
{
    for (int i = 0; i < 16; i++)
        if (kids[i] == pid)
            kids[i] = 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int skip_unless_root(void)
{
    if (geteuid() == 0)
        return 0;
    printf("\n    skipped: needs root to act as a second user (uid %d) ", SQUATTER_UID);
    return 1;
}

/* Become uid (and its gid); in a child only. */
static void become(uid_t uid)
{
    if (setgroups(0, NULL) != 0 || setgid(uid) != 0 || setuid(uid) != 0)
        _exit(126);
}

static int copy_file(const char *from, const char *to)
{
    char cmd[8448];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && chmod 0755 '%s'", from, to, to);
    return tu_run(cmd, NULL);
}

/* The caller's DASHD_ENDPOINT and DASHD_ENDPOINT_OWNER, put back after the suite. */
static char *saved_env[2];
static const char *const env_names[2] = {"DASHD_ENDPOINT", "DASHD_ENDPOINT_OWNER"};

static int suite_init(void)
{
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(env_names[i]);
        saved_env[i] = v ? strdup(v) : NULL;
        unsetenv(env_names[i]);
    }
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return -1;
    if (geteuid() != 0)
        return 0;
    char from[4096], to[128];
    snprintf(bindir, sizeof bindir, "/tmp/dash-ep-bin-XXXXXX");
    if (!mkdtemp(bindir) || chmod(bindir, 0755) != 0)
        return -1;
    const char *progs[] = {"dashd", "dashctl"};
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/%s", tu_build_dir(), progs[i]);
        snprintf(to, sizeof to, "%s/%s", bindir, progs[i]);
        if (copy_file(from, to) != 0)
            return -1;
    }
    return 0;
}

static int suite_clean(void)
{
    if (bindir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", bindir);
        (void)tu_run(cmd, NULL);
    }
    if (sh)
        munmap(sh, sizeof *sh);
    for (int i = 0; i < 2; i++) {
        if (saved_env[i])
            setenv(env_names[i], saved_env[i], 1);
        free(saved_env[i]);
        saved_env[i] = NULL;
    }
    return 0;
}

/* After each test: end the children a failed assertion left running, and the environment
 * it changed. */
static void teardown(void)
{
    for (int i = 0; i < 16; i++) {
        if (kids[i] > 0) {
            kill(kids[i], SIGKILL);
            waitpid(kids[i], NULL, 0);
        }
        kids[i] = 0;
    }
    if (D.pid > 0)
        dashd_kill(&D);
    unsetenv("DASHD_ENDPOINT");
    unsetenv("DASHD_ENDPOINT_OWNER");
}

static void reset_shared(void)
{
    memset((void *)sh, 0, sizeof *sh);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    char *buf = calloc(1, 65536);
    size_t n = buf ? fread(buf, 1, 65535, f) : 0;
    (void)n;
    fclose(f);
    return buf;
}

/* Wait for pid to exit, at most ms; its exit status, or -1 (then it is killed). */
static int wait_exit(pid_t pid, int ms)
{
    for (int waited = 0; waited < ms; waited += 10) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            untrack(pid);
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    untrack(pid);
    return -1;
}

static void stop_child(pid_t pid)
{
    if (pid <= 0)
        return;
    sh->stop = 1;
    if (wait_exit(pid, 3000) < 0)
        CU_FAIL("a child did not stop");
}

static int wait_ready(pid_t pid)
{
    for (int i = 0; i < 500 && !sh->ready; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            untrack(pid);
            return -1;
        }
        sleep_ms(10);
    }
    return sh->ready ? 0 : -1;
}

/* ---- dashd as anyone -------------------------------------------------------------------- */

/* Start dashd as uid ((uid_t)-1: as we are, from the build folder) on endpoint (NULL: its
 * default, with XDG_RUNTIME_DIR and DASHD_ENDPOINT unset), stderr to log. */
static pid_t spawn_dashd(uid_t uid, const char *endpoint, const char *log)
{
    char bin[4096];
    if (uid == (uid_t)-1)
        snprintf(bin, sizeof bin, "%s/dashd", tu_build_dir());
    else
        snprintf(bin, sizeof bin, "%s/dashd", bindir);
    pid_t pid = fork();
    if (pid != 0)
        return track(pid);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
        _exit(125);
    if (uid != (uid_t)-1)
        become(uid);
    unsetenv("XDG_RUNTIME_DIR");
    unsetenv("DASHD_ENDPOINT");
    if (endpoint)
        execl(bin, "dashd", "--endpoint", endpoint, "--backend", "cpu", "--threads", "1",
              (char *)NULL);
    else
        execl(bin, "dashd", "--backend", "cpu", "--threads", "1", (char *)NULL);
    _exit(127);
}

/* Until dashd answers a Ping at endpoint: 0, or -1 if it exited or took over 10 s. */
static int dashd_ready(pid_t pid, const char *endpoint)
{
    for (int i = 0; i < 200; i++) {
        if (raw_ping_endpoint(endpoint, 50) == 0)
            return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            untrack(pid);
            return -1;
        }
    }
    return -1;
}

static void dashd_end(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    if (wait_exit(pid, 10000) != 0)
        CU_FAIL("dashd did not stop cleanly");
}

/* ---- squatters ------------------------------------------------------------------------ */

/* A plain Unix socket at path, bound as uid (after making the directory dir, mode 0700,
 * if dir is not NULL): counts what reaches it. */
static pid_t squat_unix(uid_t uid, const char *path, const char *dir)
{
    pid_t pid = fork();
    if (pid != 0)
        return track(pid);
    become(uid);
    if (dir && mkdir(dir, 0700) != 0)
        _exit(1);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 16) != 0)
        _exit(1);
    (void)chmod(path, 0777);
    struct pollfd fds[17] = {{.fd = lfd, .events = POLLIN}};
    int n = 1;
    sh->ready = 1;
    while (!sh->stop) {
        if (poll(fds, (nfds_t)n, 20) <= 0)
            continue;
        if ((fds[0].revents & POLLIN) && n < 17) {
            int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
            if (cfd >= 0) {
                sh->connections++;
                fds[n++] = (struct pollfd){.fd = cfd, .events = POLLIN};
            }
        }
        for (int i = 1; i < n; i++) {
            char buf[4096];
            ssize_t got;
            if (fds[i].revents & POLLIN)
                while ((got = read(fds[i].fd, buf, sizeof buf)) > 0)
                    sh->bytes += got;
        }
    }
    unlink(path);
    _exit(0);
}

/* A ROUTER bound at endpoint as uid that plays dashd: Hello gets success (session 42),
 * Ping its payload, RegisterBuffer a buffer id; it counts every request by kind. */
static pid_t squat_router(uid_t uid, const char *endpoint)
{
    pid_t pid = fork();
    if (pid != 0)
        return track(pid);
    become(uid);
    void *ctx = zmq_ctx_new();
    void *r = zmq_socket(ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(r, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(r, endpoint) != 0)
        _exit(1);
    sh->ready = 1;
    while (!sh->stop) {
        zmq_pollitem_t it = {r, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 20) <= 0)
            continue;
        zmq_msg_t rid, body;
        zmq_msg_init(&rid);
        zmq_msg_init(&body);
        if (zmq_msg_recv(&rid, r, 0) < 0 || zmq_msg_recv(&body, r, 0) < 0)
            goto next;
        Dash__Request *req =
            wire_decode_request(zmq_msg_data(&body), zmq_msg_size(&body), WIRE_DECODE_BUDGET);
        if (!req)
            goto next;
        if ((unsigned)req->body_case < MAX_KINDS)
            sh->kinds[req->body_case]++;
        Dash__Reply rep = DASH__REPLY__INIT;
        Dash__HelloReply hello = DASH__HELLO_REPLY__INIT;
        rep.id = req->id;
        rep.has_session_id = 1;
        rep.session_id = 42;
        if (req->body_case == DASH__REQUEST__BODY_HELLO) {
            hello.protocol_version = WIRE_PROTOCOL_VERSION;
            hello.has_session_id = 1;
            hello.session_id = 42;
            rep.hello = &hello;
        } else if (req->body_case == DASH__REQUEST__BODY_PING && req->ping->has_payload) {
            rep.has_ping_payload = 1;
            rep.ping_payload = req->ping->payload;
        } else if (req->body_case == DASH__REQUEST__BODY_REGISTER_BUFFER) {
            rep.has_buffer_id = 1;
            rep.buffer_id = 1;
        }
        void *buf;
        size_t len;
        if (wire_encode(&rep.base, &buf, &len) == 0) {
            zmq_send(r, zmq_msg_data(&rid), zmq_msg_size(&rid), ZMQ_SNDMORE);
            zmq_send(r, buf, len, 0);
            free(buf);
        }
        wire_free_request(req);
    next:
        zmq_msg_close(&rid);
        zmq_msg_close(&body);
    }
    zmq_close(r);
    zmq_ctx_term(ctx);
    _exit(0);
}

static int sessionful_kinds(void)
{
    return sh->kinds[DASH__REQUEST__BODY_REGISTER_BUFFER] + sh->kinds[DASH__REQUEST__BODY_FORWARD] +
           sh->kinds[DASH__REQUEST__BODY_BACKWARD] + sh->kinds[DASH__REQUEST__BODY_REGISTER_EVENTS];
}

static struct dash_connect_opts quick = {.client_name = "test-endpoint", .timeout_ms = 1500};

/* ---- tests ---------------------------------------------------------------------------- */

static void test_endpoint_foreign_socket_in_sticky_tmp_is_refused_before_anything_is_sent(void)
{
    if (skip_unless_root())
        return;
    char path[96], ep[128], why[1024];
    snprintf(path, sizeof path, "/tmp/dash-ep-squat-%d.sock", (int)getpid());
    snprintf(ep, sizeof ep, "ipc://%s", path);
    unlink(path);
    reset_shared();
    pid_t sq = squat_unix(SQUATTER_UID, path, NULL);
    CU_ASSERT_EQUAL_FATAL(wait_ready(sq), 0);

    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL(dash_connect(ep, &quick, &c), DASH_EPERM);
    CU_ASSERT_PTR_NULL(c);
    /* the same path as the default endpoint, through $DASHD_ENDPOINT */
    setenv("DASHD_ENDPOINT", ep, 1);
    CU_ASSERT_EQUAL(dash_connect(NULL, &quick, &c), DASH_EPERM);
    CU_ASSERT_EQUAL(dash_endpoint_check(NULL, why, sizeof why), DASH_EPERM);
    unsetenv("DASHD_ENDPOINT");
    CU_ASSERT_EQUAL(dash_endpoint_check(ep, why, sizeof why), DASH_EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "uid 54321"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, path));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "DASHD_ENDPOINT_OWNER"));

    sleep_ms(200); /* time for a connection to be accepted, had one been made */
    stop_child(sq);
    CU_ASSERT_EQUAL(sh->connections, 0);
    CU_ASSERT_EQUAL(sh->bytes, 0);
    unlink(path);
}

static void test_endpoint_socket_in_a_directory_others_can_write_is_refused(void)
{
    char dir[] = "/tmp/dash-ep-open-XXXXXX", ep[128], log[128], why[1024];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(ep, sizeof ep, "ipc://%s/dashd.sock", dir);
    snprintf(log, sizeof log, "%s.log", dir);
    CU_ASSERT_EQUAL(chmod(dir, 0777), 0); /* writable by all, not sticky */
    /* our own daemon: even so, anyone could have replaced its socket */
    pid_t d = spawn_dashd((uid_t)-1, ep, log);
    CU_ASSERT_EQUAL_FATAL(dashd_ready(d, ep), 0);

    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL(dash_connect(ep, &quick, &c), DASH_EPERM);
    CU_ASSERT_EQUAL(dash_endpoint_check(ep, why, sizeof why), DASH_EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, dir));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "written by others"));
    char *text = read_text(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "clients will refuse"));
    free(text);

    /* the same daemon once the directory is ours alone */
    CU_ASSERT_EQUAL(chmod(dir, 0755), 0);
    CU_ASSERT_EQUAL(dash_connect(ep, &quick, &c), 0);
    dash_close(c);
    dashd_end(d);
    rmdir(dir);
    unlink(log);
}

static void test_endpoint_own_daemon_is_accepted_at_a_path_and_an_abstract_name(void)
{
    CU_ASSERT_EQUAL_FATAL(dashd_start(&D, "--threads 1"), 0);
    char why[1024] = "x";
    CU_ASSERT_EQUAL(dash_endpoint_check(D.endpoint, why, sizeof why), 0);
    CU_ASSERT_STRING_EQUAL(why, "");
    /* a path without a transport is no endpoint: refused, saying what one looks like */
    CU_ASSERT_EQUAL(dash_endpoint_check("gpu0.sock", why, sizeof why), DASH_EINVAL);
    CU_ASSERT(strstr(why, "not an endpoint (ipc://PATH") != NULL);
    struct dash_client *c = NULL;
    struct dash_buffer *b = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_connect(D.endpoint, &quick, &c), 0);
    CU_ASSERT_EQUAL(dash_shm_alloc(c, 4096, &b), 0);
    dash_close(c);
    CU_ASSERT_EQUAL(dashd_stop(&D), 0);

    char ep[96], log[96];
    snprintf(ep, sizeof ep, "ipc://@dash-ep-own-%d", (int)getpid());
    snprintf(log, sizeof log, "/tmp/dash-ep-own-%d.log", (int)getpid());
    pid_t d = spawn_dashd((uid_t)-1, ep, log);
    CU_ASSERT_EQUAL_FATAL(dashd_ready(d, ep), 0);
    CU_ASSERT_EQUAL(dash_connect(ep, &quick, &c), 0);
    CU_ASSERT_EQUAL(dash_shm_alloc(c, 4096, &b), 0);
    dash_close(c);
    dashd_end(d);
    unlink(log);
}

static void test_endpoint_service_socket_in_a_directory_root_made_for_it_is_accepted(void)
{
    if (skip_unless_root())
        return;
    /* as systemd's RuntimeDirectory= makes /run/dashd for User=dashd */
    char base[] = "/tmp/dash-ep-run-XXXXXX", svc[64], ep[96], log[96], why[1024];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(base));
    CU_ASSERT_EQUAL(chmod(base, 0755), 0);
    snprintf(svc, sizeof svc, "%s/dashd", base);
    snprintf(ep, sizeof ep, "ipc://%s/dashd.sock", svc);
    snprintf(log, sizeof log, "%s.log", base);
    CU_ASSERT_EQUAL(mkdir(svc, 0755), 0);
    CU_ASSERT_EQUAL(chown(svc, SQUATTER_UID, SQUATTER_UID), 0);
    pid_t d = spawn_dashd(SQUATTER_UID, ep, log);
    CU_ASSERT_EQUAL_FATAL(dashd_ready(d, ep), 0);

    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL(dash_endpoint_check(ep, why, sizeof why), 0);
    CU_ASSERT_EQUAL(dash_connect(ep, &quick, &c), 0);
    CU_ASSERT_EQUAL(dash_ping(c, 2000, NULL), 0);
    dash_close(c);

    /* its directory writable by its group too: nothing vouches for the socket any more */
    CU_ASSERT_EQUAL(chmod(svc, 0775), 0);
    CU_ASSERT_EQUAL(dash_connect(ep, &quick, &c), DASH_EPERM);
    CU_ASSERT_EQUAL(dash_endpoint_check(ep, why, sizeof why), DASH_EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "uid 54321"));
    /* ... nor when the directory above it is not root's */
    CU_ASSERT_EQUAL(chmod(svc, 0755), 0);
    CU_ASSERT_EQUAL(chown(base, SQUATTER_UID, SQUATTER_UID), 0);
    CU_ASSERT_EQUAL(dash_connect(ep, &quick, &c), DASH_EPERM);
    CU_ASSERT_EQUAL(chown(base, 0, 0), 0);

    dashd_end(d);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", base, log);
    (void)tu_run(cmd, NULL);
}

/* As VICTIM_UID, with the default endpoint: dash_connect(NULL) into rc[0],
 * dash_endpoint_check(NULL) into rc[1] and why[0], `dashctl ping` into rc[2]. */
static void victim_client(int with_dashctl)
{
    pid_t pid = track(fork());
    if (pid == 0) {
        become(VICTIM_UID);
        unsetenv("XDG_RUNTIME_DIR");
        unsetenv("DASHD_ENDPOINT");
        struct dash_client *c = NULL;
        sh->rc[0] = dash_connect(NULL, &quick, &c);
        dash_close(c);
        sh->rc[1] = dash_endpoint_check(NULL, sh->why[0], sizeof sh->why[0]);
        if (with_dashctl) {
            char cmd[256];
            snprintf(cmd, sizeof cmd, "%s/dashctl ping --timeout 2000 >/dev/null 2>&1", bindir);
            sh->rc[2] = tu_run(cmd, NULL);
        }
        _exit(0);
    }
    CU_ASSERT_EQUAL(wait_exit(pid, 20000), 0);
}

static void test_endpoint_private_dir_of_another_owner_or_mode_stops_dashd_and_client(void)
{
    if (skip_unless_root())
        return;
    char dir[64], ep[96], log[96], cmd[256], elsewhere[] = "/tmp/dash-ep-else-XXXXXX";
    snprintf(dir, sizeof dir, "/tmp/dashd-%d", VICTIM_UID);
    snprintf(ep, sizeof ep, "ipc://%s/dashd.sock", dir);
    snprintf(log, sizeof log, "/tmp/dash-ep-priv-%d.log", (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)tu_run(cmd, NULL);
    char *text;

    /* the victim's own directory, but open to others */
    CU_ASSERT_EQUAL(mkdir(dir, 0755), 0);
    CU_ASSERT_EQUAL(chmod(dir, 0755), 0);
    CU_ASSERT_EQUAL(chown(dir, VICTIM_UID, VICTIM_UID), 0);
    CU_ASSERT_EQUAL(wait_exit(spawn_dashd(VICTIM_UID, NULL, log), 10000), 1);
    text = read_text(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, dir));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "0755"));
    free(text);
    reset_shared();
    victim_client(0);
    CU_ASSERT_EQUAL(sh->rc[0], DASH_EPERM);
    CU_ASSERT_EQUAL(sh->rc[1], DASH_EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(sh->why[0], "0755"));
    rmdir(dir);

    /* made by someone else, who waits in it with a socket at the default path */
    reset_shared();
    pid_t sq = squat_unix(SQUATTER_UID, ep + 6, dir);
    CU_ASSERT_EQUAL_FATAL(wait_ready(sq), 0);
    CU_ASSERT_EQUAL(wait_exit(spawn_dashd(VICTIM_UID, NULL, log), 10000), 1);
    text = read_text(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "uid 54321"));
    free(text);
    victim_client(0);
    CU_ASSERT_EQUAL(sh->rc[0], DASH_EPERM);
    CU_ASSERT_EQUAL(sh->rc[1], DASH_EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(sh->why[0], "uid 54321"));
    sleep_ms(100);
    stop_child(sq);
    CU_ASSERT_EQUAL(sh->connections, 0);
    (void)tu_run(cmd, NULL);

    /* a symbolic link to a directory of the victim's */
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(elsewhere));
    CU_ASSERT_EQUAL(chown(elsewhere, VICTIM_UID, VICTIM_UID), 0);
    CU_ASSERT_EQUAL(symlink(elsewhere, dir), 0);
    CU_ASSERT_EQUAL(wait_exit(spawn_dashd(VICTIM_UID, NULL, log), 10000), 1);
    text = read_text(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "symbolic link"));
    free(text);
    unlink(dir);
    rmdir(elsewhere);

    /* nothing there: dashd makes it, private, and its user's clients find the daemon */
    pid_t d = spawn_dashd(VICTIM_UID, NULL, log);
    CU_ASSERT_EQUAL_FATAL(dashd_ready(d, ep), 0);
    struct stat st;
    CU_ASSERT_EQUAL(lstat(dir, &st), 0);
    CU_ASSERT(S_ISDIR(st.st_mode));
    CU_ASSERT_EQUAL(st.st_uid, VICTIM_UID);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0700);
    reset_shared();
    victim_client(1);
    CU_ASSERT_EQUAL(sh->rc[0], 0);
    CU_ASSERT_EQUAL(sh->rc[1], 0);
    CU_ASSERT_EQUAL(sh->rc[2], 0); /* dashctl ping, on the default endpoint */
    dashd_end(d);
    (void)tu_run(cmd, NULL);
    unlink(log);
}

static void test_endpoint_abstract_squatter_is_refused_by_its_credentials(void)
{
    if (skip_unless_root())
        return;
    char ep[96], log[96], why[1024];
    snprintf(ep, sizeof ep, "ipc://@dashd-test-%d-squat", (int)getpid());
    snprintf(log, sizeof log, "/tmp/dash-ep-abs-%d.log", (int)getpid());
    /* a real dashd, answering Hello as well as ours would */
    pid_t d = spawn_dashd(SQUATTER_UID, ep, log);
    CU_ASSERT_EQUAL_FATAL(dashd_ready(d, ep), 0);

    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL(dash_connect(ep, &quick, &c), DASH_EPERM);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_EQUAL(dash_endpoint_check(ep, why, sizeof why), DASH_EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "uid 54321"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, ep));

    /* trusted on purpose */
    setenv("DASHD_ENDPOINT_OWNER", "54321", 1);
    CU_ASSERT_EQUAL(dash_endpoint_check(ep, why, sizeof why), 0);
    CU_ASSERT_EQUAL(dash_connect(ep, &quick, &c), 0);
    CU_ASSERT_EQUAL(dash_ping(c, 2000, NULL), 0);
    dash_close(c);
    unsetenv("DASHD_ENDPOINT_OWNER");

    dashd_end(d);
    unlink(log);
}

static void test_endpoint_daemon_replaced_by_another_user_gets_no_registration(void)
{
    if (skip_unless_root())
        return;
    char ep[96], log[96];
    snprintf(ep, sizeof ep, "ipc://@dash-ep-swap-%d", (int)getpid());
    snprintf(log, sizeof log, "/tmp/dash-ep-swap-%d.log", (int)getpid());
    pid_t d = spawn_dashd((uid_t)-1, ep, log);
    CU_ASSERT_EQUAL_FATAL(dashd_ready(d, ep), 0);
    struct dash_client *c = NULL;
    struct dash_buffer *b1 = NULL, *b2 = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_connect(ep, &quick, &c), 0);
    CU_ASSERT_EQUAL(dash_shm_alloc(c, 4096, &b1), 0);

    /* our daemon dies; another user takes its name and answers like dashd */
    kill(d, SIGKILL);
    waitpid(d, NULL, 0);
    untrack(d);
    reset_shared();
    pid_t sq = squat_router(SQUATTER_UID, ep);
    CU_ASSERT_EQUAL_FATAL(wait_ready(sq), 0);
    sleep_ms(500); /* libdash's socket reconnects by itself meanwhile */

    CU_ASSERT_EQUAL(dash_shm_alloc(c, 4096, &b2), DASH_EPERM);
    CU_ASSERT_PTR_NULL(b2);
    CU_ASSERT_PTR_NOT_NULL(strstr(dash_last_error(c), "uid 54321"));
    sleep_ms(200);
    stop_child(sq);
    CU_ASSERT_EQUAL(sessionful_kinds(), 0); /* no RegisterBuffer, no op */
    dash_close(c);
    unlink(log);
}

static void test_endpoint_lock_file_of_another_user_does_not_stop_dashd(void)
{
    if (skip_unless_root())
        return;
    char path[96], lock[128], ep[128], log[96];
    snprintf(path, sizeof path, "/tmp/dash-ep-lock-%d.sock", (int)getpid());
    snprintf(lock, sizeof lock, "%s.lock", path);
    snprintf(ep, sizeof ep, "ipc://%s", path);
    snprintf(log, sizeof log, "/tmp/dash-ep-lock-%d.log", (int)getpid());
    unlink(lock);
    reset_shared();
    /* another user makes the lock file first, open to all, and holds a lock on it */
    pid_t holder = track(fork());
    if (holder == 0) {
        become(SQUATTER_UID);
        int fd = open(lock, O_RDWR | O_CREAT | O_EXCL, 0666);
        if (fd < 0 || fchmod(fd, 0666) != 0 || flock(fd, LOCK_EX) != 0)
            _exit(1);
        sh->ready = 1;
        while (!sh->stop)
            sleep_ms(10);
        _exit(0);
    }
    CU_ASSERT_EQUAL_FATAL(wait_ready(holder), 0);

    pid_t d = spawn_dashd((uid_t)-1, ep, log);
    CU_ASSERT_EQUAL(dashd_ready(d, ep), 0);
    char *text = read_text(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, lock));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "uid 54321"));
    free(text);
    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL(dash_connect(ep, &quick, &c), 0);
    dash_close(c);

    /* without the lock, a second dashd of ours still takes nothing from the first */
    char log2[128];
    snprintf(log2, sizeof log2, "%s.2", log);
    CU_ASSERT_EQUAL(wait_exit(spawn_dashd((uid_t)-1, ep, log2), 10000), 1);
    text = read_text(log2);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "serving"));
    free(text);
    CU_ASSERT_EQUAL(raw_ping_endpoint(ep, 2000), 0);

    dashd_end(d);
    stop_child(holder);
    struct stat st;
    CU_ASSERT_EQUAL(lstat(lock, &st), 0); /* not ours to remove */
    unlink(lock);
    unlink(log);
    unlink(log2);
}

static void test_endpoint_dashd_takes_over_only_its_own_dead_socket(void)
{
    if (skip_unless_root())
        return;
    char path[96], ep[128], log[96];
    snprintf(path, sizeof path, "/tmp/dash-ep-sock-%d.sock", (int)getpid());
    snprintf(ep, sizeof ep, "ipc://%s", path);
    snprintf(log, sizeof log, "/tmp/dash-ep-sock-%d.log", (int)getpid());
    unlink(path);
    char *text;

    /* another user's socket: refused, saying whose */
    reset_shared();
    pid_t sq = squat_unix(SQUATTER_UID, path, NULL);
    CU_ASSERT_EQUAL_FATAL(wait_ready(sq), 0);
    CU_ASSERT_EQUAL(wait_exit(spawn_dashd((uid_t)-1, ep, log), 10000), 1);
    text = read_text(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, path));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "uid 54321"));
    free(text);
    stop_child(sq);

    /* our own socket, alive: refused */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    CU_ASSERT_EQUAL_FATAL(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    CU_ASSERT_EQUAL(listen(fd, 4), 0);
    CU_ASSERT_EQUAL(wait_exit(spawn_dashd((uid_t)-1, ep, log), 10000), 1);
    text = read_text(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "serving"));
    free(text);

    /* our own socket, dead (nothing listens): removed, and dashd serves */
    close(fd);
    struct stat st;
    CU_ASSERT_EQUAL(lstat(path, &st), 0);
    pid_t d = spawn_dashd((uid_t)-1, ep, log);
    CU_ASSERT_EQUAL(dashd_ready(d, ep), 0);
    text = read_text(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "removed the stale socket"));
    free(text);
    dashd_end(d);
    unlink(path);
    unlink(log);
}

static void test_endpoint_check_refuses_bad_arguments_and_a_bad_owner(void)
{
    char why[512];
    CU_ASSERT_EQUAL(dash_endpoint_check("ipc:///tmp/x.sock", NULL, 10), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_endpoint_check("", why, sizeof why), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_endpoint_check("ipc://@dash-ep-nobody", NULL, 0), 0);
    /* an opt-in that names nobody is a mistake to report, not a reason to trust anyone */
    setenv("DASHD_ENDPOINT_OWNER", "no-such-user-dash-test", 1);
    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL(dash_connect("ipc:///tmp/dash-ep-nobody.sock", &quick, &c), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_endpoint_check("ipc:///tmp/dash-ep-nobody.sock", why, sizeof why),
                    DASH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "DASHD_ENDPOINT_OWNER=no-such-user-dash-test"));
    unsetenv("DASHD_ENDPOINT_OWNER");
}

int suite_endpoint(void)
{
    CU_pSuite s =
        CU_add_suite_with_setup_and_teardown("endpoint", suite_init, suite_clean, NULL, teardown);
    if (!s)
        return -1;
    ADD_TEST(s, test_endpoint_foreign_socket_in_sticky_tmp_is_refused_before_anything_is_sent);
    ADD_TEST(s, test_endpoint_socket_in_a_directory_others_can_write_is_refused);
    ADD_TEST(s, test_endpoint_own_daemon_is_accepted_at_a_path_and_an_abstract_name);
    ADD_TEST(s, test_endpoint_service_socket_in_a_directory_root_made_for_it_is_accepted);
    ADD_TEST(s, test_endpoint_private_dir_of_another_owner_or_mode_stops_dashd_and_client);
    ADD_TEST(s, test_endpoint_abstract_squatter_is_refused_by_its_credentials);
    ADD_TEST(s, test_endpoint_daemon_replaced_by_another_user_gets_no_registration);
    ADD_TEST(s, test_endpoint_lock_file_of_another_user_does_not_stop_dashd);
    ADD_TEST(s, test_endpoint_dashd_takes_over_only_its_own_dead_socket);
    ADD_TEST(s, test_endpoint_check_refuses_bad_arguments_and_a_bad_owner);
    return 0;
}
