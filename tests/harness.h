// SPDX-License-Identifier: BSD-3-Clause
/*
 * harness.h - a real dashd for the integration suites: started from build/ on a fresh
 * temporary ipc:// endpoint, stopped with SIGTERM (or killed), its stderr kept in a log
 * file next to the socket. Plus a raw DEALER that speaks the wire protocol directly, for
 * sending what no well-behaved client would.
 */
#ifndef DASH_TEST_HARNESS_H
#define DASH_TEST_HARNESS_H

#include "proto/wire.h"

#include <stddef.h>
#include <sys/types.h>

struct dashd_proc {
    pid_t pid;
    char endpoint[128];
    char log_path[128];
    char extra[256]; /* extra command-line arguments, kept for restarts */
    long nofile_soft, nofile_hard; /* RLIMIT_NOFILE it starts with; 0: inherited */
};

/* Start dashd on a new temporary endpoint with `extra` arguments (may be NULL) and wait
 * until it answers a Ping (at most 10 s). Returns 0 or -1. */
int dashd_start(struct dashd_proc *d, const char *extra);

/* dashd_start with the open-file limits soft/hard (as a service manager would set them). */
int dashd_start_limited(struct dashd_proc *d, const char *extra, long nofile_soft,
                        long nofile_hard);

/* Start again on the same endpoint (after a stop or kill). */
int dashd_restart(struct dashd_proc *d);

/* SIGTERM and wait; returns the exit status (or -1 if it did not exit within 10 s, in
 * which case it is killed). The log is removed after a clean exit (status 0), and its path
 * printed otherwise. */
int dashd_stop(struct dashd_proc *d);

/* Wait at most ms for dashd to exit by itself; returns its exit status (128 + the signal if
 * one ended it), or -1 if it was still running (it is killed then). The log is removed
 * after status 0, and its path printed otherwise, as dashd_stop does. */
int dashd_wait_exit(struct dashd_proc *d, int ms);

/* Whether dashd's log has a line containing what, looking again every 50 ms for at most
 * wait_ms (0: once). 1 or 0. */
int dashd_log_has(const struct dashd_proc *d, const char *what, int wait_ms);

/* SIGKILL and reap. */
void dashd_kill(struct dashd_proc *d);

/* Whether the process is still running. */
int dashd_alive(struct dashd_proc *d);

struct raw_client;

/* A DEALER connected to endpoint; NULL on failure. */
struct raw_client *raw_connect(const char *endpoint);
void raw_close(struct raw_client *r);

/* Send one frame of arbitrary bytes. 0 or -1. */
int raw_send(struct raw_client *r, const void *data, size_t len);

/* Receive one reply (NULL on timeout or if it does not decode). Free with wire_free_reply. */
Dash__Reply *raw_recv(struct raw_client *r, int timeout_ms);

/* Encode, send, and wait for the reply with the same id. */
Dash__Reply *raw_call(struct raw_client *r, Dash__Request *req, int timeout_ms);

/* Hello with the given protocol version; returns the reply code (or -1 on no reply). */
int raw_hello(struct raw_client *r, unsigned version);

/* A ping on a fresh connection: 0 if the daemon answers within timeout_ms. */
int raw_ping_endpoint(const char *endpoint, int timeout_ms);

#endif
