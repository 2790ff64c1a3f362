// SPDX-License-Identifier: BSD-3-Clause
/*
 * pool.h - a fixed set of worker threads that run one parallel region at a time.
 *
 * pool_run(fn, ctx) calls fn(ctx, t, T) once on each of the T workers (the caller is
 * worker 0) and returns when all have returned. Workers stay parked between regions, so a
 * warm engine pays no thread start-up per request. Not reentrant: one pool_run() at a
 * time per pool (the engine serialises its callers).
 */
#ifndef DASH_POOL_H
#define DASH_POOL_H

#include <stdint.h>

struct pool;

typedef void (*pool_fn)(void *ctx, int32_t thread, int32_t threads);

/* A pool of `threads` workers (1..POOL_THREADS_MAX), or NULL (bad count, no memory, or
 * thread creation failed). */
#define POOL_THREADS_MAX 256
struct pool *pool_new(int32_t threads);

/* Stops and joins the workers. Accepts NULL. */
void pool_free(struct pool *p);

int32_t pool_threads(const struct pool *p);

/* Run fn on every worker and wait for all of them. */
void pool_run(struct pool *p, pool_fn fn, void *ctx);

#endif
