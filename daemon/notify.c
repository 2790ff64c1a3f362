// SPDX-License-Identifier: BSD-3-Clause
/*
 * notify.c - sd_notify for dashd (notify.h). Every message is one datagram to
 * $NOTIFY_SOCKET (libsystemd's sd_notify); a failure to send is ignored, as systemd itself
 * recommends: the daemon serves the same with or without a service manager.
 */
#include "notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <systemd/sd-daemon.h>

struct notify {
    uv_timer_t timer;
    uint64_t watchdog_usec; /* 0: no watchdog */
    int timer_started, closed;
};

static void on_watchdog(uv_timer_t *t)
{
    (void)t;
    (void)sd_notify(0, "WATCHDOG=1");
}

struct notify *notify_new(uv_loop_t *loop)
{
    struct notify *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    uint64_t usec = 0;
    /* > 0 only when $WATCHDOG_USEC is set and $WATCHDOG_PID, if set, is us */
    if (sd_watchdog_enabled(0, &usec) > 0)
        n->watchdog_usec = usec;
    uv_timer_init(loop, &n->timer);
    n->timer.data = n;
    return n;
}

/* One datagram: head ("READY=1\n" or "") then STATUS=<fmt...>. */
static void send_status(const char *head, const char *fmt, va_list ap)
{
    char text[512];
    vsnprintf(text, sizeof text, fmt, ap);
    (void)sd_notifyf(0, "%sSTATUS=%s", head, text);
}

void notify_status(struct notify *n, const char *fmt, ...)
{
    (void)n;
    va_list ap;
    va_start(ap, fmt);
    send_status("", fmt, ap);
    va_end(ap);
}

void notify_ready(struct notify *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    send_status("READY=1\n", fmt, ap);
    va_end(ap);
    if (n && n->watchdog_usec && !n->timer_started && !n->closed) {
        /* Half the interval, as sd_watchdog_enabled(3) advises: one late tick is no kill. */
        uint64_t ms = n->watchdog_usec / 2000;
        if (ms == 0)
            ms = 1;
        (void)sd_notify(0, "WATCHDOG=1");
        uv_timer_start(&n->timer, on_watchdog, ms, ms);
        n->timer_started = 1;
    }
}

void notify_stopping(struct notify *n, const char *fmt, ...)
{
    (void)n;
    va_list ap;
    va_start(ap, fmt);
    send_status("STOPPING=1\n", fmt, ap);
    va_end(ap);
}

uint64_t notify_watchdog_usec(const struct notify *n)
{
    return n ? n->watchdog_usec : 0;
}

void notify_close(struct notify *n)
{
    if (!n || n->closed)
        return;
    n->closed = 1;
    uv_timer_stop(&n->timer);
    uv_close((uv_handle_t *)&n->timer, NULL);
}

void notify_free(struct notify *n)
{
    free(n);
}
