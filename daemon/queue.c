// SPDX-License-Identifier: BSD-3-Clause
/*
 * queue.c - see queue.h.
 *
 * The waiting items form a round of flows without any allocation: the first waiting
 * item of each flow is linked into the round (flow_next) and knows its flow's last item
 * (flow_tail); the items of a flow follow each other through next.
 *
 *   round: head A1 ──flow_next──> B1 ──flow_next──> C1 (tail)
 *            │next                 │next
 *            A2 ── A3              B2
 *
 * The worker takes the round's head item; if its flow has more, the next item becomes
 * the flow's head and goes to the round's end. Pushing scans the round for the item's
 * flow (the flows with work waiting, usually few) and appends, or opens a new flow at the
 * round's end.
 */
#include "queue.h"

#include "proto/errors.h"

#include <pthread.h>
#include <stdlib.h>

struct list {
    struct queue_item *head, *tail;
};

struct queue {
    uv_async_t async; /* wakes the loop when items finished */
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct queue_item *round_head, *round_tail; /* guarded by mu: flows with work waiting */
    struct list done; /* guarded by mu */
    struct queue_item *early_head, *early_tail; /* guarded by mu; linked by early_next */
    int stop;         /* guarded by mu */
    uint32_t depth;   /* loop thread only */
    uint32_t capacity;
    queue_run_fn run;
    queue_done_fn early_fn;
    queue_done_fn done_fn;
    void *ctx;
};

static void list_push(struct list *l, struct queue_item *it)
{
    it->next = NULL;
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
}

/* Append an item to its flow, or open the flow at the end of the round. Under mu. */
static void round_push(struct queue *q, struct queue_item *it)
{
    it->next = it->flow_next = NULL;
    for (struct queue_item *h = q->round_head; h; h = h->flow_next) {
        if (h->flow == it->flow) {
            h->flow_tail->next = it;
            h->flow_tail = it;
            return;
        }
    }
    it->flow_tail = it;
    if (q->round_tail)
        q->round_tail->flow_next = it;
    else
        q->round_head = it;
    q->round_tail = it;
}

/* The next item in turn: the head of the round's first flow, whose rest (if any) goes to
 * the end of the round. Under mu, with the round not empty. */
static struct queue_item *round_take(struct queue *q)
{
    struct queue_item *it = q->round_head;
    q->round_head = it->flow_next;
    if (!q->round_head)
        q->round_tail = NULL;
    struct queue_item *rest = it->next;
    if (rest) {
        rest->flow_tail = it->flow_tail;
        rest->flow_next = NULL;
        if (q->round_tail)
            q->round_tail->flow_next = rest;
        else
            q->round_head = rest;
        q->round_tail = rest;
    }
    it->next = it->flow_next = it->flow_tail = NULL;
    return it;
}

static void *worker_main(void *arg)
{
    struct queue *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->round_head && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->stop)
            break;
        struct queue_item *it = round_take(q);
        it->early_expected = it->early_sent = it->finish_deferred = 0;
        pthread_mutex_unlock(&q->mu);
        int later = q->run(q->ctx, it) == QUEUE_LATER;
        pthread_mutex_lock(&q->mu);
        if (!later) {
            list_push(&q->done, it);
            /* Coalesced by libuv: one wake-up may deliver several items. */
            uv_async_send(&q->async);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* Both lists are taken in one critical section and early ones run first: an item's done
 * is pushed only after its early (queue_early), so it is never delivered before it. */
static void on_async(uv_async_t *h)
{
    struct queue *q = h->data;
    pthread_mutex_lock(&q->mu);
    struct queue_item *early = q->early_head;
    q->early_head = q->early_tail = NULL;
    struct queue_item *it = q->done.head;
    q->done.head = q->done.tail = NULL;
    pthread_mutex_unlock(&q->mu);
    while (early) {
        struct queue_item *next = early->early_next;
        q->early_fn(q->ctx, early);
        early = next;
    }
    while (it) {
        struct queue_item *next = it->next;
        q->depth--;
        q->done_fn(q->ctx, it);
        it = next;
    }
}

struct queue *queue_new(uv_loop_t *loop, uint32_t capacity, queue_run_fn run,
                        queue_done_fn early, queue_done_fn done, void *ctx)
{
    if (capacity < 1)
        return NULL;
    struct queue *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->capacity = capacity;
    q->run = run;
    q->early_fn = early;
    q->done_fn = done;
    q->ctx = ctx;
    if (pthread_mutex_init(&q->mu, NULL))
        goto free_q;
    if (pthread_cond_init(&q->cv, NULL))
        goto destroy_mu;
    if (uv_async_init(loop, &q->async, on_async))
        goto destroy_cv;
    q->async.data = q;
    if (pthread_create(&q->worker, NULL, worker_main, q))
        goto close_async;
    return q;

close_async:
    /* The handle is already registered with the loop; the caller's loop must not outlive
     * a failed start anyway (dashd exits), so only keep it from firing. */
    uv_close((uv_handle_t *)&q->async, NULL);
    return NULL;
destroy_cv:
    pthread_cond_destroy(&q->cv);
destroy_mu:
    pthread_mutex_destroy(&q->mu);
free_q:
    free(q);
    return NULL;
}

void queue_push_any(struct queue *q, struct queue_item *item)
{
    q->depth++;
    pthread_mutex_lock(&q->mu);
    round_push(q, item);
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

int queue_push(struct queue *q, struct queue_item *item)
{
    if (q->depth >= q->capacity)
        return DASH_EBUSY;
    queue_push_any(q, item);
    return 0;
}

void queue_expect_early(struct queue *q, struct queue_item *item)
{
    pthread_mutex_lock(&q->mu);
    item->early_expected = 1;
    pthread_mutex_unlock(&q->mu);
}

void queue_early(struct queue *q, struct queue_item *item)
{
    pthread_mutex_lock(&q->mu);
    if (!item->early_sent) {
        item->early_sent = 1;
        item->early_next = NULL;
        if (q->early_tail)
            q->early_tail->early_next = item;
        else
            q->early_head = item;
        q->early_tail = item;
        if (item->finish_deferred) /* it completed before we got here: deliver both */
            list_push(&q->done, item);
        uv_async_send(&q->async);
    }
    pthread_mutex_unlock(&q->mu);
}

void queue_finish(struct queue *q, struct queue_item *item)
{
    pthread_mutex_lock(&q->mu);
    if (item->early_expected && !item->early_sent) {
        item->finish_deferred = 1; /* queue_early() delivers it */
    } else {
        list_push(&q->done, item);
        uv_async_send(&q->async);
    }
    pthread_mutex_unlock(&q->mu);
}

uint32_t queue_depth(const struct queue *q)
{
    return q->depth;
}

uint32_t queue_capacity(const struct queue *q)
{
    return q->capacity;
}

void queue_close(struct queue *q)
{
    uv_close((uv_handle_t *)&q->async, NULL);
}

void queue_free(struct queue *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->worker, NULL);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}
