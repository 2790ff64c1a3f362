// SPDX-License-Identifier: BSD-3-Clause
/*
 * ctl.h - the commands of dashctl (client/dashctl/dashctl.c dispatches to them).
 *
 * Each command is one function with main()'s signature, called with argv[0] set to the
 * command's name ("sched"), so it can parse its own options with getopt_long. It writes
 * its results to stdout and at most one line per problem to stderr, prefixed with
 * "dashctl <command>: ", and returns the process exit status below. Commands never call
 * exit(): dashctl's main() owns the process, and checks that stdout was written.
 */
#ifndef DASH_CTL_H
#define DASH_CTL_H

/* Exit statuses shared by every command. */
#define CTL_EXIT_OK 0
#define CTL_EXIT_FAIL 1  /* the request was valid but could not be carried out */
#define CTL_EXIT_USAGE 2 /* bad command, option or value; nothing was written to stdout */

/* `dashctl sched`: model the backward-pass schedules of one attention shape with the DAG
 * model of kernels/sched/dag.h, offline (no daemon). Options and output: `dashctl sched --help`.
 * Returns one of the CTL_EXIT_* values. Uses getopt_long, so it must not run concurrently
 * with another getopt user. */
int ctl_sched(int argc, char **argv);

/* `dashctl ping`: round trips to the daemon, each printed, then min/median/max. */
int ctl_ping(int argc, char **argv);

/* `dashctl stats`: the daemon's counters and one row per client session; --json. */
int ctl_stats(int argc, char **argv);

/* `dashctl status`: a one-paragraph health summary; exit 1 when no daemon answers. */
int ctl_status(int argc, char **argv);

/* `dashctl audit dump|verify|diff|summary`: read dashd's audit logs offline. verify exits
 * 3 when a file is valid up to a torn tail. */
int ctl_audit(int argc, char **argv);

/* ---- shared by ping, stats and status (client/dashctl/ctl_daemon.c) ----------------------------
 * They take --endpoint E (default: dash_default_endpoint()) and --timeout MS. */

#include "client/dash.h"

#include <stddef.h>
#include <stdint.h>

#define CTL_TIMEOUT_MS_DEFAULT 2000
#define CTL_TIMEOUT_MS_MAX 3600000
#define CTL_ENDPOINT_MAX 512

/* Write "dashctl <cmd>: <message>" as one line on stderr; returns CTL_EXIT_USAGE. */
int ctl__usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Report getopt_long's ':' or '?' return for cmd (long options numbered from first_long);
 * returns CTL_EXIT_USAGE. */
int ctl__getopt_error(const char *cmd, int opt, int argc, char **argv, int first_long);

/* Parse --opt's value as an integer in lo..hi into *ret: 0, or CTL_EXIT_USAGE (reported). */
int ctl__parse_int(const char *cmd, const char *opt, const char *arg, int lo, int hi, int *ret);

/* The endpoint to use: arg, or the default when arg is NULL, into buf. 0 or CTL_EXIT_USAGE
 * (reported). */
int ctl__endpoint(const char *cmd, const char *arg, char *buf, size_t len);

/* dash_connect() without a session, as "dashctl". Returns 0 or its code; reports nothing
 * (ctl__connect_why() has the sentence). A missing or dead socket fails at once. */
int ctl__connect(const char *endpoint, int timeout_ms, struct dash_client **ret_client);

/* Why the last ctl__connect() failed, naming the endpoint ("" after a success). */
const char *ctl__connect_why(void);

/* What every daemon command does once getopt is done: returns an exit status to return
 * with (the parse failed: rc; --help: usage printed, CTL_EXIT_OK; a stray argument:
 * CTL_EXIT_USAGE; a bad endpoint) or -1 to carry on with the endpoint resolved in buf. */
int ctl__after_options(const char *cmd, int rc, int help, const char *usage, int argc,
                       char **argv, const char *endpoint_arg, char *buf, size_t len);

/* Report a failed ctl__connect() on stderr: "dashd is not running: <why>" (no socket, or
 * nothing listening), "dashd is not answering: <why>" (timeout), else the sentence itself
 * (permission denied, not trusted); returns the exit status: CTL_EXIT_USAGE for an
 * unusable endpoint, else CTL_EXIT_FAIL. */
int ctl__connect_failed(const char *cmd, const char *endpoint, int timeout_ms, int rc);

/* Copy s into dst (len bytes) for a text table: at most max_cols characters, control
 * characters and invalid UTF-8 as '?', '~' as the last character when cut short. Returns
 * the characters written (one column each). */
size_t ctl__text(char *dst, size_t len, const char *s, size_t max_cols);

/* Print s to stdout as a JSON string (quoted, escaped; invalid UTF-8 as U+FFFD). */
void ctl__json_string(const char *s);

/* A duration for people: "4.250s", "3m 07s", "2h 03m 04s", "5d 2h 03m". */
void ctl__duration(char *dst, size_t len, uint64_t ms);

#endif
