/*
 * ctl.h - the commands of dashctl (client/dashctl.c dispatches to them).
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
 * model of kernels/dag.h, offline (no daemon). Options and output: `dashctl sched --help`.
 * Returns one of the CTL_EXIT_* values. Uses getopt_long, so it must not run concurrently
 * with another getopt user. */
int ctl_sched(int argc, char **argv);

#endif
