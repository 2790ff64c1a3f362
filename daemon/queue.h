/*
 * queue.h - the bounded work queue between the event loop and the one worker thread.
 *
 *   loop thread                      worker thread
 *   queue_push(item) --FIFO--------> run(item)      (one at a time, in arrival order)
 *   done(item)  <----uv_async_send-- finished list
 *
 * One worker is enough: the engine is itself multi-threaded and runs one call at a time,
 * and a single FIFO keeps arrival order. The capacity bounds everything accepted and not
 * yet handed back to the loop (waiting, running, finished but not delivered), so a full
 * queue answers DASH_EBUSY at once instead of growing without bound. The loop thread
 * keeps serving Ping and Stats while the worker runs.
 */
#ifndef DASHD_QUEUE_H
#define DASHD_QUEUE_H

#include <stdint.h>
#include <uv.h>

/* Embed this in the job; the queue links jobs through it. */
struct queue_item {
    struct queue_item *next;
};

/* run: on the worker thread. done: on the loop thread, in completion order. */
typedef void (*queue_run_fn)(void *ctx, struct queue_item *item);
typedef void (*queue_done_fn)(void *ctx, struct queue_item *item);

struct queue;

/* A queue of `capacity` (>= 1) items with its worker thread started, or NULL. */
struct queue *queue_new(uv_loop_t *loop, uint32_t capacity, queue_run_fn run, queue_done_fn done,
                        void *ctx);

/* Loop thread. 0, or DASH_EBUSY when full (the item is not taken). */
int queue_push(struct queue *q, struct queue_item *item);

/* Loop thread: items accepted and not yet passed to done. */
uint32_t queue_depth(const struct queue *q);
uint32_t queue_capacity(const struct queue *q);

/* Loop thread: close the loop handle; call when depth is 0 and nothing more is pushed. */
void queue_close(struct queue *q);

/* Stop and join the worker, and free. Call after queue_close() and after the loop has run
 * the close. Items still queued are abandoned (not freed). Accepts NULL. */
void queue_free(struct queue *q);

#endif
