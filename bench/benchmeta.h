// SPDX-License-Identifier: BSD-3-Clause
/*
 * benchmeta.h - what every benchmark report records about where and how it ran, so a
 * figure in bench/results/ can be traced to a machine, a commit and a command.
 */
#ifndef DASH_BENCHMETA_H
#define DASH_BENCHMETA_H

#include <stddef.h>

/* "model name" from /proc/cpuinfo, or "unknown". */
void bmeta_cpu_model(char *buf, size_t cap);

/* The 1, 5 and 15 minute load averages, or "unknown": other work skews every number. */
void bmeta_loadavg(char *buf, size_t cap);

/* `git rev-parse --short HEAD`, with "-dirty" when tracked files differ; or "unknown". */
void bmeta_git_commit(char *buf, size_t cap);

/* argv joined by spaces, arguments a shell would split quoted. */
void bmeta_cmdline(char *buf, size_t cap, int argc, char **argv);

#endif
