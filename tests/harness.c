// SPDX-License-Identifier: BSD-3-Clause
/*
 * harness.c - starting and stopping a real dashd, and a raw protocol client; see harness.h.
 */
#include "harness.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* One context per process: a ZeroMQ context must not be used across fork(), so a child
 * (the killed-client test forks) gets its own. */
static void *zctx(void)
{
    static void *ctx;
    static pid_t owner;
    if (!ctx || owner != getpid()) {
        ctx = zmq_ctx_new();
        owner = getpid();
    }
    return ctx;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int spawn(struct dashd_proc *d)
{
    char cmd[1024];
    /* The CPU suites test the CPU backend even on a GPU host, where auto would pick CUDA
     * (which refuses shared memory); suites that want another backend say so. */
    snprintf(cmd, sizeof cmd, "exec %s/dashd --endpoint %s --log-level info %s %s 2>>%s",
             tu_build_dir(), d->endpoint, strstr(d->extra, "--backend") ? "" : "--backend cpu",
             d->extra, d->log_path);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setpgid(0, 0);
        if (d->nofile_hard) {
            struct rlimit rl = {(rlim_t)d->nofile_soft, (rlim_t)d->nofile_hard};
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
                _exit(126);
        }
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    d->pid = pid;
    for (int i = 0; i < 200; i++) {
        if (raw_ping_endpoint(d->endpoint, 50) == 0)
            return 0;
        if (!dashd_alive(d))
            return -1;
    }
    dashd_kill(d);
    return -1;
}

int dashd_start(struct dashd_proc *d, const char *extra)
{
    static int n;
    memset(d, 0, sizeof *d);
    snprintf(d->endpoint, sizeof d->endpoint, "ipc:///tmp/dashd-test-%d-%d.sock", (int)getpid(), n);
    snprintf(d->log_path, sizeof d->log_path, "/tmp/dashd-test-%d-%d.log", (int)getpid(), n++);
    snprintf(d->extra, sizeof d->extra, "%s", extra ? extra : "");
    unlink(d->log_path);
    return spawn(d);
}

int dashd_start_limited(struct dashd_proc *d, const char *extra, long nofile_soft,
                        long nofile_hard)
{
    static int n;
    memset(d, 0, sizeof *d);
    snprintf(d->endpoint, sizeof d->endpoint, "ipc:///tmp/dashd-test-%d-l%d.sock", (int)getpid(), n);
    snprintf(d->log_path, sizeof d->log_path, "/tmp/dashd-test-%d-l%d.log", (int)getpid(), n++);
    snprintf(d->extra, sizeof d->extra, "%s", extra ? extra : "");
    d->nofile_soft = nofile_soft;
    d->nofile_hard = nofile_hard;
    unlink(d->log_path);
    return spawn(d);
}

int dashd_restart(struct dashd_proc *d)
{
    return spawn(d);
}

int dashd_alive(struct dashd_proc *d)
{
    if (d->pid <= 0)
        return 0;
    int status;
    pid_t got = waitpid(d->pid, &status, WNOHANG);
    if (got == d->pid) {
        d->pid = 0;
        return 0;
    }
    return 1;
}

int dashd_wait_exit(struct dashd_proc *d, int ms)
{
    if (d->pid <= 0)
        return -1;
    for (int i = 0; i < ms / 10; i++) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;
            int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            if (rc == 0)
                unlink(d->log_path); /* a clean stop: nothing to look at */
            else
                fprintf(stderr, "\n  dashd exited with %d; its log: %s", rc, d->log_path);
            return rc;
        }
        sleep_ms(10);
    }
    dashd_kill(d);
    return -1;
}

int dashd_stop(struct dashd_proc *d)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    return dashd_wait_exit(d, 10000);
}

int dashd_log_has(const struct dashd_proc *d, const char *what, int wait_ms)
{
    for (int waited = 0;; waited += 50) {
        FILE *f = fopen(d->log_path, "r");
        char line[2048];
        int found = 0;
        while (f && !found && fgets(line, sizeof line, f))
            found = strstr(line, what) != NULL;
        if (f)
            fclose(f);
        if (found)
            return 1;
        if (waited >= wait_ms)
            return 0;
        usleep(50000);
    }
}

void dashd_kill(struct dashd_proc *d)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
}

struct raw_client {
    void *sock;
};

struct raw_client *raw_connect(const char *endpoint)
{
    struct raw_client *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->sock = zmq_socket(zctx(), ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(r->sock, ZMQ_LINGER, &zero, sizeof zero);
    if (!r->sock || zmq_connect(r->sock, endpoint) != 0) {
        raw_close(r);
        return NULL;
    }
    return r;
}

void raw_close(struct raw_client *r)
{
    if (!r)
        return;
    if (r->sock)
        zmq_close(r->sock);
    free(r);
}

int raw_send(struct raw_client *r, const void *data, size_t len)
{
    return zmq_send(r->sock, data, len, 0) == (int)len ? 0 : -1;
}

Dash__Reply *raw_recv(struct raw_client *r, int timeout_ms)
{
    zmq_pollitem_t it = {r->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return NULL;
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, r->sock, 0) < 0) {
        zmq_msg_close(&msg);
        return NULL;
    }
    Dash__Reply *rep = wire_decode_reply(zmq_msg_data(&msg), zmq_msg_size(&msg), WIRE_DECODE_BUDGET);
    zmq_msg_close(&msg);
    return rep;
}

Dash__Reply *raw_call(struct raw_client *r, Dash__Request *req, int timeout_ms)
{
    void *buf;
    size_t len;
    if (wire_encode(&req->base, &buf, &len) != 0)
        return NULL;
    int rc = raw_send(r, buf, len);
    free(buf);
    if (rc)
        return NULL;
    for (;;) {
        Dash__Reply *rep = raw_recv(r, timeout_ms);
        if (!rep || rep->id == req->id)
            return rep;
        wire_free_reply(rep); /* a late reply to something earlier */
    }
}

int raw_hello(struct raw_client *r, unsigned version)
{
    Dash__Hello h = DASH__HELLO__INIT;
    h.protocol_version = version;
    h.client_name = "raw-test";
    h.has_pid = 1;
    h.pid = (uint32_t)getpid();
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 1;
    req.body_case = DASH__REQUEST__BODY_HELLO;
    req.hello = &h;
    Dash__Reply *rep = raw_call(r, &req, 5000);
    if (!rep)
        return -1;
    int code = rep->code;
    wire_free_reply(rep);
    return code;
}

int raw_ping_endpoint(const char *endpoint, int timeout_ms)
{
    struct raw_client *r = raw_connect(endpoint);
    if (!r)
        return -1;
    Dash__Ping p = DASH__PING__INIT;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 99;
    req.body_case = DASH__REQUEST__BODY_PING;
    req.ping = &p;
    Dash__Reply *rep = raw_call(r, &req, timeout_ms);
    int ok = rep && rep->code == 0;
    wire_free_reply(rep);
    raw_close(r);
    return ok ? 0 : -1;
}
