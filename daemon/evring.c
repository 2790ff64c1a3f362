// SPDX-License-Identifier: BSD-3-Clause
/*
 * evring.c - see evring.h.
 */
#include "evring.h"

#include "proto/errors.h"

#include <stdlib.h>

struct evring {
    uint32_t refs;
    uint32_t n;
    evring_close_fn close;
    void *ctx;
    void *ev[EVRING_MAX]; /* fixed: a slot, once written, never moves or changes */
};

struct evring *evring_new(evring_close_fn close, void *ctx)
{
    struct evring *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->refs = 1;
    r->close = close;
    r->ctx = ctx;
    return r;
}

int evring_add(struct evring *r, void *ev)
{
    if (r->n >= EVRING_MAX)
        return DASH_ENOSPC;
    r->ev[r->n++] = ev;
    return 0;
}

uint32_t evring_count(const struct evring *r)
{
    return r->n;
}

void *evring_get(const struct evring *r, uint32_t i)
{
    return i < r->n ? r->ev[i] : NULL;
}

void evring_ref(struct evring *r)
{
    r->refs++;
}

void evring_unref(struct evring *r)
{
    if (!r || --r->refs > 0)
        return;
    for (uint32_t i = 0; i < r->n; i++)
        r->close(r->ctx, r->ev[i]);
    free(r);
}
