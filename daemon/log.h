// SPDX-License-Identifier: BSD-3-Clause
/*
 * log.h - the daemon's leveled log: one line per event on stderr,
 * "<ISO 8601 UTC time> <level> <message>".
 *
 * Under systemd, when stderr is the journal's stream (JOURNAL_STREAM names its device and
 * inode, sd-daemon(3)), lines are "<N><message>" instead, N the syslog priority (3 error,
 * 4 warn, 6 info, 7 debug), so journald files each at its level and stamps the time; and
 * a line logged while the thread handles a session's request (log_context_set) goes to
 * the journal natively with the fields DASHD_SESSION, DASHD_CLIENT and DASHD_RUN_TAG
 * (`journalctl DASHD_CLIENT=trainer-3`), falling back to the stream if the journal
 * refuses it.
 *
 * Only the daemon's top level (main.c, and the event-loop code in server.c and dispatch.c)
 * logs; the modules below it return codes and messages instead. Lines are written with one
 * write(2) each, so lines from different threads never interleave.
 */
#ifndef DASHD_LOG_H
#define DASHD_LOG_H

#include <stdarg.h>
#include <stdint.h>

enum log_level { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Lines above `level` are dropped. The default is LOG_INFO. */
void log_set_level(enum log_level level);

/* Whether a line at `level` would be written (to skip building an expensive one). */
int log_enabled(enum log_level level);

/* "error", "warn", "info", "debug" -> the level, or -1. */
int log_level_parse(const char *name);

/* Decide the line format from JOURNAL_STREAM and stderr (call at start, and again if
 * stderr changes); returns 1 for the journal's, 0 for plain lines (the default). */
int log_init(void);

/* The calling thread is handling a request of this session: its lines carry these fields
 * (journal only) until log_context_clear(). The strings are copied. */
void log_context_set(uint64_t session, const char *client, const char *run_tag);
void log_context_clear(void);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_vmsg(enum log_level level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
