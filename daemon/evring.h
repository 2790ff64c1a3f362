// SPDX-License-Identifier: BSD-3-Clause
/*
 * evring.h - a session's interprocess events (CUDA backend): the event handles a client
 * registered (RegisterEvents), opened by the backend, in registration order.
 *
 * Requests name events by index (EventSync), so indices never change: events are only
 * appended, at most EVRING_MAX per session, and all live as long as the list. The list is
 * reference-counted because a job that names an event keeps using it on the worker thread
 * after its session may have been dropped: the session holds one reference, each such job
 * another; the last release closes every event. Loop thread only, except evring_get on a
 * list the caller holds a reference to (the slots it reads are never written again).
 */
#ifndef DASHD_EVRING_H
#define DASHD_EVRING_H

#include <stdint.h>

#define EVRING_MAX 256

/* Closes one opened event (the backend's). */
typedef void (*evring_close_fn)(void *ctx, void *ev);

struct evring;

/* An empty list with one reference, or NULL. */
struct evring *evring_new(evring_close_fn close, void *ctx);

/* Append an opened event (the list takes it over): 0, or DASH_ENOSPC when full. */
int evring_add(struct evring *r, void *ev);

/* How many events the list holds. */
uint32_t evring_count(const struct evring *r);

/* Event i, or NULL past the end. */
void *evring_get(const struct evring *r, uint32_t i);

void evring_ref(struct evring *r);

/* Accepts NULL. The last reference closes the events and frees the list. */
void evring_unref(struct evring *r);

#endif
