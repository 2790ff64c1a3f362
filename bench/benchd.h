// SPDX-License-Identifier: BSD-3-Clause
/*
 * benchd.h - a dashd that a benchmark starts as its child: found next to the benchmark's
 * program, on a private ipc endpoint, waited for until it answers, stopped with SIGTERM
 * and checked to exit cleanly. It dies with the benchmark (PR_SET_PDEATHSIG).
 */
#ifndef DASH_BENCHD_H
#define DASH_BENCHD_H

#include <stddef.h>
#include <sys/types.h>

struct benchd {
    const char *tool;    /* the benchmark's name, for messages */
    char path[4096];     /* the dashd program */
    char sock_path[128];
    char endpoint[160];  /* "ipc://" + sock_path */
    pid_t pid;           /* > 0 while it runs */
    int status;          /* waitpid's, once stopped */
};

/* d for tool, with dashd taken from argv0's folder (/proc/self/exe's when argv0 has none,
 * i.e. was found on $PATH) and the endpoint /tmp/dashd-<tool>-<pid>.sock. 0, or a negative
 * errno when there is no executable dashd there (d->path then names where it looked). */
int benchd_init(struct benchd *d, const char *tool, const char *argv0);

/* Start `dashd --endpoint E ARGS...` (args: NULL-terminated, may be NULL). 0 or -errno. */
int benchd_start(struct benchd *d, const char *const *args);

/* Poll with short no-session connects until dashd answers, at most wait_ms. 0, or a
 * negative code (said on stderr) when it exited or did not answer. */
int benchd_wait_ready(struct benchd *d, int wait_ms);

/* SIGTERM, then wait up to wait_ms (then SIGKILL). 0 if it exited with status 0 in time. */
int benchd_stop(struct benchd *d, int wait_ms);

/* A waitpid status in words: "exit status 1", "killed by signal 9 (Killed)". */
void benchd_describe_status(int status, char *buf, size_t cap);

#endif
