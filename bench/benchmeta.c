// SPDX-License-Identifier: BSD-3-Clause
/*
 * benchmeta.c - the metadata block every benchmark report starts with: CPU model, load
 * average, git commit, command line. See benchmeta.h.
 */
#include "benchmeta.h"

#include <stdio.h>
#include <string.h>

void bmeta_cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        char *v = strchr(line, ':');
        if (!v)
            continue;
        v += 1 + strspn(v + 1, " \t");
        v[strcspn(v, "\n")] = '\0';
        snprintf(buf, cap, "%s", v);
        break;
    }
    fclose(f);
}

/* Runs cmd; returns 1 and its first output line (newline stripped) if it exited 0. */
static int run_capture(const char *cmd, char *buf, size_t cap, int *ret_any_output)
{
    FILE *f = popen(cmd, "r");
    if (!f)
        return 0;
    buf[0] = '\0';
    int any = fgets(buf, (int)cap, f) != NULL;
    char sink[256];
    while (fgets(sink, sizeof sink, f)) /* drain, so the child never blocks on a full pipe */
        ;
    int status = pclose(f);
    buf[strcspn(buf, "\n")] = '\0';
    if (ret_any_output)
        *ret_any_output = any;
    return status == 0;
}

void bmeta_git_commit(char *buf, size_t cap)
{
    char line[128];
    int dirty = 0;
    if (!run_capture("git rev-parse --short HEAD 2>/dev/null", line, sizeof line, NULL) ||
        !line[0]) {
        snprintf(buf, cap, "unknown");
        return;
    }
    char status[256];
    /* Dirty only if we can tell: a failing `git status` leaves the plain commit. */
    if (!run_capture("git status --porcelain --untracked-files=no 2>/dev/null", status, sizeof status, &dirty))
        dirty = 0;
    snprintf(buf, cap, "%s%s", line, dirty ? "-dirty" : "");
}

/* argv joined by spaces, with arguments a shell would split quoted. */
void bmeta_cmdline(char *buf, size_t cap, int argc, char **argv)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < argc && used < cap; i++) {
        const char *a = argv[i];
        int plain = a[0] && strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                       "0123456789_-+=.,/:@%") == strlen(a);
        int n = snprintf(buf + used, cap - used, plain ? "%s%s" : "%s'%s'", i ? " " : "", a);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* Other processes on the CPUs skew every number; the load average says how much to
 * trust a report. */
void bmeta_loadavg(char *buf, size_t cap)
{
    double l1, l5, l15;
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f)
        return;
    if (fscanf(f, "%lf %lf %lf", &l1, &l5, &l15) == 3)
        snprintf(buf, cap, "%.2f, %.2f, %.2f", l1, l5, l15);
    fclose(f);
}
