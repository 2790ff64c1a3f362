// SPDX-License-Identifier: BSD-3-Clause
/*
 * log.c - see log.h.
 */
/* sd-journal.h brings syslog.h, whose LOG_INFO and LOG_DEBUG would collide with ours:
 * it comes first and its names go. */
#include <systemd/sd-journal.h>
#undef LOG_INFO
#undef LOG_DEBUG

#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = {"error", "warn", "info", "debug"};
/* syslog priorities (sd-daemon(3)): err, warning, info, debug */
static const int level_priority[] = {3, 4, 6, 7};

static _Atomic int current_level = LOG_INFO;
static _Atomic int to_journal;

/* The session the calling thread is handling (log_context_set), copied. */
static _Thread_local struct {
    int set;
    uint64_t session;
    char client[128];
    char run_tag[128];
} context;

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

int log_init(void)
{
    /* JOURNAL_STREAM names the device and inode of the stream systemd connected to the
     * journal; stderr is that stream only if they match (a child may inherit the variable
     * with stderr pointing elsewhere). */
    int journal = 0;
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
        (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino)
        journal = 1;
    atomic_store(&to_journal, journal);
    return journal;
}

void log_context_set(uint64_t session, const char *client, const char *run_tag)
{
    context.set = 1;
    context.session = session;
    snprintf(context.client, sizeof context.client, "%s", client ? client : "");
    snprintf(context.run_tag, sizeof context.run_tag, "%s", run_tag ? run_tag : "");
}

void log_context_clear(void)
{
    context.set = 0;
}

/* The journal's native protocol, with the session's fields; -1 if the journal would not
 * take it (then the line goes to stderr). */
static int send_structured(enum log_level level, const char *msg)
{
    int rc = sd_journal_send("MESSAGE=%s", msg, "PRIORITY=%d", level_priority[level],
                             "SYSLOG_IDENTIFIER=dashd", "DASHD_SESSION=%" PRIu64, context.session,
                             "DASHD_CLIENT=%s", context.client, "DASHD_RUN_TAG=%s",
                             context.run_tag, NULL);
    return rc < 0 ? -1 : 0;
}

void log_vmsg(enum log_level level, const char *fmt, va_list ap)
{
    if (!log_enabled(level))
        return;
    char line[1024];
    size_t n;
    int journal = atomic_load(&to_journal);
    if (journal) {
        /* journald stamps the time itself; "<N>" gives the line its priority */
        n = (size_t)snprintf(line, sizeof line, "<%d>", level_priority[level]);
    } else {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
        n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %s ", ts.tv_nsec / 1000000,
                              level_names[level]);
    }
    int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
    /* One event, one line: a control character from a string a client chose (a shared
     * memory name) must not start a line of its own, with a "<N>" priority of its choice. */
    for (char *p = line + n; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    if (journal && context.set && m >= 0 && send_structured(level, line + n) == 0)
        return;
    /* A message longer than the line is cut; the newline always fits. */
    n = m < 0 ? n : (n + (size_t)m < sizeof line - 1 ? n + (size_t)m : sizeof line - 2);
    line[n++] = '\n';
    /* One write per line, so concurrent lines do not interleave; a failed write to stderr
     * has nowhere else to be reported. */
    (void)!write(STDERR_FILENO, line, n);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(level, fmt, ap);
    va_end(ap);
}
