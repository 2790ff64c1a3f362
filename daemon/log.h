// SPDX-License-Identifier: BSD-3-Clause
/*
 * log.h - the daemon's leveled log: one line per event on stderr,
 * "<ISO 8601 UTC time> <level> <message>".
 *
 * Only the daemon's top level (main.c, and the event-loop code in server.c and dispatch.c)
 * logs; the modules below it return codes and messages instead. Lines are written with one
 * write(2) each, so lines from different threads never interleave.
 */
#ifndef DASHD_LOG_H
#define DASHD_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Lines above `level` are dropped. The default is LOG_INFO. */
void log_set_level(enum log_level level);

/* Whether a line at `level` would be written (to skip building an expensive one). */
int log_enabled(enum log_level level);

/* "error", "warn", "info", "debug" -> the level, or -1. */
int log_level_parse(const char *name);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
