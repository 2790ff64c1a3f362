// SPDX-License-Identifier: BSD-3-Clause
/*
 * benchd.c - see benchd.h.
 */
#include "bench/benchd.h"
#include "bench/benchtime.h"

#include "client/dash.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BENCHD_PROBE_TIMEOUT_MS 200 /* one readiness probe while dashd starts */
#define BENCHD_ARGS_MAX 32

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int benchd_init(struct benchd *d, const char *tool, const char *argv0)
{
    memset(d, 0, sizeof *d);
    d->tool = tool;
    d->pid = -1;
    snprintf(d->sock_path, sizeof d->sock_path, "/tmp/dashd-%s-%ld.sock", tool, (long)getpid());
    snprintf(d->endpoint, sizeof d->endpoint, "ipc://%s", d->sock_path);
    const char *slash = strrchr(argv0, '/');
    char self[4096];
    if (!slash) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            return -errno;
        self[n] = '\0';
        slash = strrchr(self, '/');
        argv0 = self;
    }
    int n = snprintf(d->path, sizeof d->path, "%.*s/dashd", (int)(slash - argv0), argv0);
    if (n < 0 || (size_t)n >= sizeof d->path)
        return -ENAMETOOLONG;
    return access(d->path, X_OK) == 0 ? 0 : -errno;
}

void benchd_describe_status(int status, char *buf, size_t cap)
{
    if (WIFEXITED(status))
        snprintf(buf, cap, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, cap, "wait status 0x%x", status);
}

int benchd_start(struct benchd *d, const char *const *args)
{
    const char *argv[BENCHD_ARGS_MAX] = {"dashd", "--endpoint", d->endpoint};
    int n = 3;
    for (; args && *args; args++) {
        if (n + 1 >= BENCHD_ARGS_MAX)
            return -E2BIG;
        argv[n++] = *args;
    }
    argv[n] = NULL;
    pid_t parent = getpid();
    fflush(NULL); /* or the child's copy of unwritten stdio output could be written twice */
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        /* A bench killed without a chance to clean up must not leave a daemon behind; the
         * getppid() check closes the race with a parent that died before prctl(). */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
            _exit(127);
        execv(d->path, (char *const *)argv);
        fprintf(stderr, "%s: cannot run %s: %s\n", d->tool, d->path, strerror(errno));
        _exit(127);
    }
    d->pid = pid;
    return 0;
}

int benchd_wait_ready(struct benchd *d, int wait_ms)
{
    struct dash_connect_opts opts = {.client_name = "benchd-probe",
                                     .timeout_ms = BENCHD_PROBE_TIMEOUT_MS,
                                     .flags = DASH_CONNECT_NO_SESSION};
    double deadline = btime_now_ms() + wait_ms;
    int rc;
    for (;;) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            char how[96];
            benchd_describe_status(status, how, sizeof how);
            fprintf(stderr, "%s: dashd exited while starting (%s)\n", d->tool, how);
            d->pid = -1;
            return DASH_ECONNREFUSED;
        }
        struct dash_client *probe = NULL;
        rc = dash_connect(d->endpoint, &opts, &probe);
        if (rc == 0) {
            dash_close(probe);
            return 0;
        }
        if (rc != DASH_ETIMEDOUT && rc != DASH_ECONNREFUSED && rc != -ENOENT)
            break;
        if (btime_now_ms() > deadline)
            break;
        sleep_ms(20);
    }
    fprintf(stderr, "%s: dashd (pid %d) did not answer on %s within %d ms: %s\n", d->tool,
            (int)d->pid, d->endpoint, wait_ms, dash_strerror(rc));
    return rc;
}

int benchd_stop(struct benchd *d, int wait_ms)
{
    if (d->pid <= 0)
        return 0;
    pid_t pid = d->pid;
    d->pid = -1;
    if (kill(pid, SIGTERM) != 0) {
        fprintf(stderr, "%s: kill(dashd %d, SIGTERM): %s\n", d->tool, (int)pid, strerror(errno));
        return -1;
    }
    double deadline = btime_now_ms() + wait_ms;
    int status;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0) {
            fprintf(stderr, "%s: waitpid(dashd): %s\n", d->tool, strerror(errno));
            return -1;
        }
        if (btime_now_ms() > deadline) {
            fprintf(stderr, "%s: dashd (pid %d) did not exit within %d ms of SIGTERM; "
                            "killing it\n", d->tool, (int)pid, wait_ms);
            (void)kill(pid, SIGKILL);
            (void)waitpid(pid, &status, 0);
            /* A killed dashd cannot remove its socket and lock; nobody else uses them. */
            char lock[160];
            snprintf(lock, sizeof lock, "%s.lock", d->sock_path);
            (void)unlink(d->sock_path);
            (void)unlink(lock);
            return -1;
        }
        sleep_ms(10);
    }
    d->status = status;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char how[96];
        benchd_describe_status(status, how, sizeof how);
        fprintf(stderr, "%s: dashd did not exit cleanly on SIGTERM: %s\n", d->tool, how);
        return -1;
    }
    return 0;
}
