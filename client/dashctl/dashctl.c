// SPDX-License-Identifier: BSD-3-Clause
/*
 * dashctl.c - the command-line tool: `dashctl <command> [options]`.
 *
 * main() only picks a command from the table below and hands it the rest of argv (with
 * the command's name as argv[0]); each command lives in its own client/ctl_<name>.c and
 * is declared in ctl.h. Adding `ping`, `stats`, `status` or `audit` is one table row and
 * one file.
 */
#include "client/dashctl/ctl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define DASHCTL_VERSION "0.1.0"

struct ctl_command {
    const char *name;
    const char *summary; /* one line for the usage text */
    int (*run)(int argc, char **argv);
};

static const struct ctl_command commands[] = {
    {"sched", "model backward-pass schedules of a shape with the DAG model (offline)", ctl_sched},
    {"ping", "round trips to dashd, with min/median/max", ctl_ping},
    {"stats", "dashd's counters and one row per client session (--json)", ctl_stats},
    {"status", "whether dashd is running, and how it is doing, in one paragraph", ctl_status},
    {"audit", "read audit logs: dump, verify, diff two runs, summary (offline)", ctl_audit},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: dashctl <command> [options]\n"
               "       dashctl --help | --version\n"
               "\n"
               "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n"
               "'dashctl <command> --help' lists the options of a command.\n"
               "Exit status: 0 success, 1 failure, 2 bad command, option or value.\n");
}

/* stdout is where every command's results go; a full disk or a closed pipe must not look
 * like success to a script. */
static int check_stdout(int status)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "dashctl: cannot write output: %s\n", strerror(errno));
        return status == CTL_EXIT_OK ? CTL_EXIT_FAIL : status;
    }
    return status;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CTL_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        usage(stdout);
        return check_stdout(CTL_EXIT_OK);
    }
    if (strcmp(name, "--version") == 0) {
        printf("dashctl %s\n", DASHCTL_VERSION);
        return check_stdout(CTL_EXIT_OK);
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0)
            return check_stdout(commands[i].run(argc - 1, argv + 1));

    fprintf(stderr, "dashctl: unknown command '%s'\n", name);
    usage(stderr);
    return CTL_EXIT_USAGE;
}
