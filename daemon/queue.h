// SPDX-License-Identifier: BSD-3-Clause
/*
 * queue.h - the bounded work queue between the event loop and the one worker thread.
 *
 *   loop thread                      worker thread
 *   queue_push(item) --FIFO--------> run(item)      (one at a time, in arrival order)
 *   done(item)  <----uv_async_send-- finished list
 *
 * Work the worker only starts (a kernel queued on the GPU) finishes later: run returns
 * QUEUE_LATER and whoever learns of the completion calls queue_finish(), from any thread.
 * Such an item may also be announced early (queue_early(): the loop's early callback
 * runs, e.g. to reply "queued"); done then still comes, always after early, and the item
 * stays accepted (counted against the capacity) until done.
 *
 * One worker is enough: the engine is itself multi-threaded and runs one call at a time.
 * Fairness: every item names a flow (its client, limits.h); each flow is a FIFO, and the
 * worker takes one item from each flow with work in turn (round robin), so a client with
 * a hundred ops queued delays another's single op by at most one op, not a hundred. Items
 * of one flow run in arrival order. The capacity bounds everything accepted and not
 * yet handed back to the loop (waiting, running, finished but not delivered), so a full
 * queue answers DASH_EBUSY at once instead of growing without bound. The loop thread
 * keeps serving Ping and Stats while the worker runs.
 */
#ifndef DASHD_QUEUE_H
#define DASHD_QUEUE_H

#include <stdint.h>
#include <uv.h>

/* Embed this in the job; the queue links jobs through it. The fields are the queue's. */
struct queue_item {
    uint64_t flow; /* set by the caller before queue_push: items of one flow run in order */
    struct queue_item *next, *early_next;
    /* The first waiting item of a flow stands for the flow in the round: flow_next links
     * the round, flow_tail is the flow's last item. */
    struct queue_item *flow_next, *flow_tail;
    unsigned char early_expected, early_sent, finish_deferred;
};

#define QUEUE_DONE 0  /* run: the item is finished */
#define QUEUE_LATER 1 /* run: queue_finish(item) will be called */

/* run: on the worker thread, returns QUEUE_DONE or QUEUE_LATER. early, done: on the loop
 * thread; done in completion order. */
typedef int (*queue_run_fn)(void *ctx, struct queue_item *item);
typedef void (*queue_done_fn)(void *ctx, struct queue_item *item);

struct queue;

/* A queue of `capacity` (>= 1) items with its worker thread started, or NULL. early may
 * be NULL when nothing calls queue_early(). */
struct queue *queue_new(uv_loop_t *loop, uint32_t capacity, queue_run_fn run,
                        queue_done_fn early, queue_done_fn done, void *ctx);

/* Worker thread, inside run, before the work can complete: the item will be announced
 * with queue_early(), so a completion that comes first waits for it. */
void queue_expect_early(struct queue *q, struct queue_item *item);

/* Any thread: have the loop call early(item) (once, before done(item)). */
void queue_early(struct queue *q, struct queue_item *item);

/* Any thread: an item whose run returned QUEUE_LATER is finished. */
void queue_finish(struct queue *q, struct queue_item *item);

/* Loop thread. 0, or DASH_EBUSY when full (the item is not taken). */
int queue_push(struct queue *q, struct queue_item *item);

/* queue_push without the capacity check, for work the caller bounds itself (an op that a
 * client's GPU stream already waits for, which must not be refused: see dispatch.c). */
void queue_push_any(struct queue *q, struct queue_item *item);

/* Loop thread: items accepted and not yet passed to done. */
uint32_t queue_depth(const struct queue *q);
uint32_t queue_capacity(const struct queue *q);

/* Loop thread: close the loop handle; call when depth is 0 and nothing more is pushed. */
void queue_close(struct queue *q);

/* Stop and join the worker, and free. Call after queue_close() and after the loop has run
 * the close. Items still queued are abandoned (not freed). Accepts NULL. */
void queue_free(struct queue *q);

#endif
