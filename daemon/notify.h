// SPDX-License-Identifier: BSD-3-Clause
/*
 * notify.h - what dashd tells its service manager (systemd's sd_notify protocol, through
 * libsystemd): STATUS lines while it starts, READY=1 once it serves with its kernels warm,
 * STOPPING=1, and WATCHDOG=1 from the event loop while systemd asks for it
 * (WatchdogSec= in the unit: $WATCHDOG_USEC, $WATCHDOG_PID).
 *
 * The watchdog is a libuv timer on the loop at half the interval systemd gave, so the pings
 * stop when the loop stops turning - a loop stuck in a callback, or a daemon stuck before
 * it serves, is restarted by systemd. Without $NOTIFY_SOCKET every call does nothing.
 * Loop thread only.
 */
#ifndef DASHD_NOTIFY_H
#define DASHD_NOTIFY_H

#include <stdint.h>
#include <uv.h>

struct notify;

/* A notifier on loop: reads $WATCHDOG_USEC (for this process) once. NULL only when out of
 * memory. */
struct notify *notify_new(uv_loop_t *loop);

/* "STATUS=<text>": what dashd is doing, shown by `systemctl status`. n may be NULL (before
 * the loop exists). */
void notify_status(struct notify *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "READY=1" with a STATUS line, and the watchdog timer started (when systemd asked for
 * one). Call once, when the socket is bound and the backend is warm. */
void notify_ready(struct notify *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "STOPPING=1" with a STATUS line. The watchdog keeps pinging while the loop drains. */
void notify_stopping(struct notify *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The watchdog interval systemd asked for, in microseconds; 0: none. */
uint64_t notify_watchdog_usec(const struct notify *n);

/* Stop the timer and close its handle (the loop must run once more to finish closing);
 * free with notify_free() after that. Accepts NULL. */
void notify_close(struct notify *n);

/* Accepts NULL. */
void notify_free(struct notify *n);

#endif
