// SPDX-License-Identifier: BSD-3-Clause
/*
 * dispatch_int.h - what dispatch.c (sessions, buffers, Stats, Ping, the entry point, the
 * lifetime) and dispatch_op.c (Forward and Backward, their jobs and audit records) share:
 * the dispatcher's state and the ways to answer a request. Private to the two.
 */
#ifndef DASHD_DISPATCH_INT_H
#define DASHD_DISPATCH_INT_H

#include "dispatch.h"
#include "job.h"
#include "metrics.h"
#include "queue.h"
#include "session.h"

#include "proto/wire.h"

#define MSG_MAX 256

_Static_assert(JOB_RID_MAX >= SESS_RID_MAX, "a session's routing id must fit in a job");

struct dispatch {
    uv_loop_t *loop;
    struct server *srv;
    struct backend *backend; /* borrowed */
    struct sess_table *sessions;
    struct limits *limits;
    struct queue *queue;
    struct job_runner *runner; /* used by the worker thread only */
    uv_timer_t sweep;
    struct dispatch_config cfg;
    uint64_t start_ns;
    struct metrics metrics; /* requests, errors, op latencies (metrics.h) */
    uint32_t in_flight; /* ops accepted and not yet answered */
    uint64_t rescued_seen; /* backend->rescued when on_sweep last logged it */
    int stopping;
    int idle_called;
    void (*on_idle)(void *arg);
    void *idle_arg;
};

/* A client string for our own records and log lines: cut to fit, control characters
 * replaced, so a client cannot forge log lines. */
void dispatch__copy_clean(char *dst, size_t size, const char *src);

/* Send r to rid (its session id filled in), counting an error reply. */
void dispatch__send_reply(struct dispatch *d, const void *rid, size_t rid_len, Dash__Reply *r);

/* Reply to request id with code and a message (printf format). */
__attribute__((format(printf, 6, 7))) void dispatch__reply_error(struct dispatch *d,
                                                                 const void *rid,
                                                                 size_t rid_len, uint64_t id,
                                                                 int code, const char *fmt,
                                                                 ...);

/* Call the idle callback once a stopping dispatcher has nothing in flight. */
void dispatch__check_idle(struct dispatch *d);

/* dispatch_op.c: a Forward (backward 0) or Backward of session s. */
void dispatch__on_op(struct dispatch *d, const struct server_msg *m, const Dash__Request *req,
                     struct session *s, int backward);
/* An op with signals that will not run (the client's stream waits): write its fail word
 * (the client poisons, then releases), or its done word if it names none. */
void dispatch__release_signals(struct dispatch *d, const struct session *s,
                               const Dash__Request *req);
/* The queue's callbacks (worker thread, then loop thread). */
int dispatch__run_job(void *ctx, struct queue_item *it);
void dispatch__job_early(void *ctx, struct queue_item *it);
void dispatch__job_done(void *ctx, struct queue_item *it);

#endif
