// SPDX-License-Identifier: BSD-3-Clause
/*
 * proc.c - see proc.h.
 */
#include "proc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

int proc_gone(int64_t pid)
{
    if (pid <= 0)
        return 0;
    if (kill((pid_t)pid, 0) != 0)
        return errno == ESRCH;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold anything */
    return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}
