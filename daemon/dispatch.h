// SPDX-License-Identifier: BSD-3-Clause
/*
 * dispatch.h - requests to replies: the daemon's protocol logic on the loop thread.
 *
 * It owns the session table, the work queue and its worker, and the idle-session sweep;
 * it borrows the backend and the transport. Cheap requests (Hello, RegisterBuffer,
 * UnregisterBuffer, Stats, Ping) are answered inline; Forward and Backward are validated
 * inline and then queued, and answered when the worker hands them back. Every reply
 * carries the sender's current session id.
 *
 *   server --msg--> dispatch_on_message --> handlers --> server_send
 *                                  \--> queue --> worker: job_run --> done --> server_send
 */
#ifndef DASHD_DISPATCH_H
#define DASHD_DISPATCH_H

#include "backend.h"
#include "limits.h"
#include "metrics.h"
#include "server.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define DASHD_VERSION "0.1.0"
/* Signal-ordered ops (EventSync semaphores) a session may have in flight: they bypass the
 * queue's capacity (refusing one would stall the client's stream), so this bounds them. */
#define DISPATCH_SIGNAL_OPS_MAX 4096

struct dispatch_config {
    uint32_t queue_capacity;     /* queued + running ops before DASH_EBUSY */
    uint32_t session_timeout_ms; /* idle sessions with nothing in flight are dropped */
    uint64_t scratch_max;        /* largest scratch one op may need */
    uint32_t max_buffers;        /* per session */
    struct limits_config limits; /* per client (limits.h) */
    struct audit *audit;         /* the audit log (borrowed), or NULL */
    const char *kernel_build;    /* what audit records say computed the op */
};

struct dispatch;

/* Create the sessions, the queue (its worker thread starts) and the sweep timer. NULL on
 * failure. */
struct dispatch *dispatch_new(uv_loop_t *loop, struct backend *b, const struct dispatch_config *cfg);

/* The transport replies go through; set before the first message. */
void dispatch_set_server(struct dispatch *d, struct server *srv);

/* The server's message callback (ctx is the dispatch). */
void dispatch_on_message(void *ctx, const struct server_msg *m);

/* The server's connection-gone callback: the connection's session (if any) ends now; its
 * ops in flight finish, and their replies have nowhere to go. */
void dispatch_on_gone(void *ctx, const unsigned char *rid, size_t rid_len);

/* Stop taking new work: from now on Forward, Backward, Hello and buffer requests get
 * DASH_ECANCELED, while ops already accepted finish and are answered. on_idle(arg) is
 * called (once, from the loop) when nothing is in flight any more - possibly at once. */
void dispatch_stop(struct dispatch *d, void (*on_idle)(void *arg), void *arg);

/* Change the per-client caps (SIGHUP); what clients hold already stays. */
void dispatch_set_limits(struct dispatch *d, const struct limits_config *cfg);

/* Audit to a (borrowed; NULL: no audit) from now on: ops finishing from now on are
 * recorded there (config reload). */
void dispatch_set_audit(struct dispatch *d, struct audit *a);

/* metrics_collect_fn (metrics_http.h) for the metrics endpoint, ctx the dispatch: the
 * counters and the StatsReply `dashctl stats` gets, all sessions listed. Loop thread. */
int dispatch_collect(void *ctx, struct metrics *ret_m, void **ret_stats, size_t *ret_len);

/* Ops accepted and not yet answered. */
uint32_t dispatch_in_flight(const struct dispatch *d);

/* Close the loop handles (timer, queue wake-up). Call once nothing is in flight. */
void dispatch_close(struct dispatch *d);

/* Drop every session (unmapping buffers), join the worker, free. After dispatch_close()
 * and after the loop has run the close callbacks. Accepts NULL. */
void dispatch_free(struct dispatch *d);

#endif
