// SPDX-License-Identifier: BSD-3-Clause
/*
 * metrics_http.h - the Prometheus endpoint (`dashd --metrics ADDR:PORT`): GET /metrics
 * over HTTP, served by libmicrohttpd from a thread of its own.
 *
 * The loop never waits for a scrape. A scrape asks the loop for a snapshot (uv_async) and
 * waits up to METRICS_HTTP_WAIT_MS for it; the loop's callback builds one (collect(), on
 * the loop thread: the counters copied, the StatsReply packed) and swaps it in under a
 * mutex that either side holds only to swap or take a pointer. A snapshot younger than
 * METRICS_HTTP_FRESH_MS is served as it is, so a scrape storm costs the loop at most one
 * snapshot per that interval; a loop busy past the wait gets the last snapshot served
 * (or 503 before the first). Rendering (metrics_render) runs on the endpoint's thread.
 *
 *   scrape (MHD thread) ──want──> uv_async ──> loop: collect() ──swap──> snapshot
 *        ^───────────────────── cond broadcast ─────────────────────────────┘
 *
 * Only GET and HEAD of /metrics are served (404 elsewhere, 405 for other methods); at most
 * METRICS_HTTP_CONNECTIONS connections at once, each closed after 10 s idle.
 */
#ifndef DASHD_METRICS_HTTP_H
#define DASHD_METRICS_HTTP_H

#include "metrics.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define METRICS_HTTP_FRESH_MS 100
#define METRICS_HTTP_WAIT_MS 1000
#define METRICS_HTTP_CONNECTIONS 16

/* Loop thread: fill *ret_m with the counters and *ret_stats / *ret_len with a malloc'd
 * packed StatsReply (all sessions). 0, or a negative code (nothing allocated). */
typedef int (*metrics_collect_fn)(void *ctx, struct metrics *ret_m, void **ret_stats,
                                  size_t *ret_len);

struct metrics_http;

/* "ADDR:PORT" with ADDR an IPv4 address or a bracketed IPv6 one ("[::1]:9464"), PORT
 * 0..65535 (0: any free port). 0, or -EINVAL. */
int metrics_http_parse_addr(const char *spec, void *ret_sockaddr, size_t *ret_len);

/* Bind spec and start serving; collect(ctx) runs on loop's thread. NULL with the reason
 * in err (the loop must then run before it is closed: a handle may be closing). */
struct metrics_http *metrics_http_new(uv_loop_t *loop, const char *spec,
                                      metrics_collect_fn collect, void *ctx, char *err,
                                      size_t errlen);

/* The port bound (useful with port 0). */
unsigned metrics_http_port(const struct metrics_http *h);

/* Loop thread: stop serving (joins the endpoint's thread; a scrape waiting for a
 * snapshot gets 503) and close the async handle; h is freed when the loop runs its close
 * callback. Idempotent until then. Accepts NULL. */
void metrics_http_close(struct metrics_http *h);

#endif
