// SPDX-License-Identifier: BSD-3-Clause
/*
 * metrics.h - dashd's daemon-wide counters and their Prometheus text rendering.
 *
 * One definition of what dashd counts, for `dashctl stats` and the Prometheus endpoint
 * (metrics_http.h) alike: dispatch counts every request by kind, every error reply by
 * code, and every answered Forward/Backward with its latency (receipt to reply, the same
 * moment the session's p50/p99 ring records), queue wait and run time; StatsReply's
 * `requests` and `errors` are the sums of these. The per-session counters stay where
 * they were (struct session) and reach the endpoint through the StatsReply that dispatch
 * builds for `dashctl stats`, so both show the same numbers from the same code.
 *
 * Threads: a struct metrics is written on the loop thread only. The endpoint's thread
 * never reads it: the loop copies it (a plain struct) into a snapshot, which the endpoint
 * renders with metrics_render().
 */
#ifndef DASHD_METRICS_H
#define DASHD_METRICS_H

#include "proto/errors.h"
#include "proto/wire.h"

#include <stddef.h>
#include <stdint.h>

/* What a message asked for; MALFORMED: not one frame of a decodable Request. */
#define METRICS_OPS(X)                                                                          \
    X(HELLO, "hello") X(REGISTER_BUFFER, "register_buffer")                                      \
    X(UNREGISTER_BUFFER, "unregister_buffer") X(REGISTER_EVENTS, "register_events")              \
    X(FORWARD, "forward") X(BACKWARD, "backward") X(STATS, "stats") X(PING, "ping")               \
    X(GOODBYE, "goodbye") X(UNKNOWN, "unknown") X(MALFORMED, "malformed")

enum metrics_op {
#define METRICS_OP_ENUM(name, text) METRICS_OP_##name,
    METRICS_OPS(METRICS_OP_ENUM)
#undef METRICS_OP_ENUM
    METRICS_OP_COUNT
};

/* Histogram bucket upper bounds in microseconds (plus +Inf). */
#define METRICS_BUCKETS_US                                                                      \
    {50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,          \
     1000000, 2500000, 5000000, 10000000}
#define METRICS_BUCKETS 18 /* the bounds above and +Inf */
/* Error replies are counted per code of proto/errors.h's table, in its order; a code not
 * in it (none should reach a reply) in the last slot, labelled "other". */
#define METRICS_CODE_COUNT_(name, value, msg) +1
#define METRICS_CODES (0 DASH_ERRNO_MAP(METRICS_CODE_COUNT_) + 1)

struct metrics_hist {
    uint64_t count[METRICS_BUCKETS]; /* per bucket, not cumulative */
    uint64_t sum_ns;
};

/* Plain data: copy it to take a snapshot. */
struct metrics {
    uint64_t requests[METRICS_OP_COUNT];
    uint64_t errors[METRICS_CODES];
    /* Forward [0] and Backward [1], answered (with any code). */
    struct metrics_hist latency[2]; /* receipt to reply */
    struct metrics_hist queue[2];   /* receipt to the worker starting it */
    struct metrics_hist run[2];     /* on the backend: GPU time on the CUDA backend */
    uint64_t gpu_ns[2];             /* run time of the ops the GPU ran */
};

/* The kind of a decoded request. */
enum metrics_op metrics_op_of(const Dash__Request *req);

/* Loop thread: count one message. */
void metrics_count_request(struct metrics *m, enum metrics_op op);

/* Loop thread: count a reply with code (0: not an error). */
void metrics_count_reply(struct metrics *m, int code);

/* Loop thread: an answered Forward (backward 0) or Backward: receipt to reply, receipt
 * to the worker starting it, and its time on the backend (on_gpu: the GPU ran it). */
void metrics_count_op(struct metrics *m, int backward, uint64_t latency_ns, uint64_t queue_ns,
                      uint64_t run_ns, int on_gpu);

/* Messages and error replies so far (StatsReply.requests and .errors). */
uint64_t metrics_requests(const struct metrics *m);
uint64_t metrics_errors(const struct metrics *m);

/* Render Prometheus text format 0.0.4 from a snapshot: the daemon-wide counters and the
 * StatsReply of the same moment (packed; its sessions become per-client series labelled
 * session, client, run_tag and pid). Any thread. Returns a malloc'd NUL-terminated text
 * and its length in *ret_len, or NULL when out of memory or the stats do not decode. */
char *metrics_render(const struct metrics *m, const void *stats, size_t stats_len,
                     size_t *ret_len);

#endif
