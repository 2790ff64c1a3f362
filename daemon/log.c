// SPDX-License-Identifier: BSD-3-Clause
/*
 * log.c - see log.h.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static _Atomic int current_level = LOG_INFO;

void log_set_level(enum log_level level)
{
    atomic_store(&current_level, (int)level);
}

int log_enabled(enum log_level level)
{
    return (int)level <= atomic_load(&current_level);
}

int log_level_parse(const char *name)
{
    for (int i = 0; i <= LOG_DEBUG; i++)
        if (name && strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %s ", ts.tv_nsec / 1000000,
                          level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    /* A message longer than the line is cut; the newline always fits. */
    n = m < 0 ? n : (n + (size_t)m < sizeof line - 1 ? n + (size_t)m : sizeof line - 2);
    line[n++] = '\n';
    /* One write per line, so concurrent lines do not interleave; a failed write to stderr
     * has nowhere else to be reported. */
    (void)!write(STDERR_FILENO, line, n);
}
