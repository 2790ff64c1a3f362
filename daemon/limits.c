// SPDX-License-Identifier: BSD-3-Clause
/*
 * limits.c - see limits.h.
 *
 * Clients are kept in a chained hash table by (uid, pid); one without credentials is in
 * it too (so that limits_free finds it) but never looked up. Each is freed when its last
 * reference (a session, a job) goes.
 */
#include "limits.h"

#include "proto/errors.h"

#include <stdio.h>
#include <stdlib.h>

#define LIM_BUCKETS 1024

struct limits {
    struct limits_config cfg;
    struct lim_client *bucket[LIM_BUCKETS];
    uint64_t next_key;
    uint32_t count;
};

static size_t bucket_of(int64_t uid, int64_t pid)
{
    uint64_t h = ((uint64_t)uid * 0x9e3779b97f4a7c15ull) ^ (uint64_t)pid;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return (size_t)(h >> 40) % LIM_BUCKETS;
}

struct limits *limits_new(const struct limits_config *cfg)
{
    struct limits *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->cfg = *cfg;
    l->next_key = 1;
    return l;
}

void limits_free(struct limits *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < LIM_BUCKETS; i++) {
        struct lim_client *c = l->bucket[i], *next;
        for (; c; c = next) {
            next = c->hash_next;
            free(c);
        }
    }
    free(l);
}

void limits_set(struct limits *l, const struct limits_config *cfg)
{
    l->cfg = *cfg;
}

const struct limits_config *limits_get(const struct limits *l)
{
    return &l->cfg;
}

struct lim_client *limits_client(struct limits *l, int64_t uid, int64_t pid)
{
    size_t b = bucket_of(uid, pid);
    if (pid >= 0) {
        for (struct lim_client *c = l->bucket[b]; c; c = c->hash_next) {
            if (c->uid == uid && c->pid == pid) {
                c->refs++;
                return c;
            }
        }
    }
    struct lim_client *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->owner = l;
    c->key = l->next_key++;
    c->uid = pid >= 0 ? uid : -1;
    c->pid = pid >= 0 ? pid : -1;
    c->refs = 1;
    b = bucket_of(c->uid, c->pid);
    c->hash_next = l->bucket[b];
    l->bucket[b] = c;
    l->count++;
    return c;
}

void limits_ref(struct lim_client *c)
{
    c->refs++;
}

void limits_unref(struct lim_client *c)
{
    if (!c || --c->refs > 0)
        return;
    struct limits *l = c->owner;
    struct lim_client **p = &l->bucket[bucket_of(c->uid, c->pid)];
    while (*p && *p != c)
        p = &(*p)->hash_next;
    if (*p)
        *p = c->hash_next;
    l->count--;
    free(c);
}

/* The reason for a refusal: which cap, what the client has, the config key. */
static int refuse(char *msg, size_t msglen, const struct lim_client *c, const char *what,
                  unsigned long long have, unsigned long long want, unsigned long long cap,
                  const char *key)
{
    if (c->pid >= 0)
        snprintf(msg, msglen, "over this client's limit of %llu %s (process %lld has %llu and "
                 "asks for %llu more; [limits] %s in dashd's config)", cap, what,
                 (long long)c->pid, have, want, key);
    else
        snprintf(msg, msglen, "over this client's limit of %llu %s (it has %llu and asks for "
                 "%llu more; [limits] %s in dashd's config)", cap, what, have, want, key);
    return DASH_ELIMIT;
}

int limits_session_begin(struct lim_client *c, char *msg, size_t msglen)
{
    const struct limits *l = c->owner;
    if (l->cfg.sessions && c->sessions >= l->cfg.sessions)
        return refuse(msg, msglen, c, "sessions", c->sessions, 1, l->cfg.sessions, "sessions");
    c->sessions++;
    return 0;
}

void limits_session_end(struct lim_client *c, uint32_t n_buffers, uint64_t bytes)
{
    c->sessions--;
    c->buffers -= n_buffers < c->buffers ? n_buffers : c->buffers;
    c->registered_bytes -= bytes < c->registered_bytes ? bytes : c->registered_bytes;
}

int limits_buffer_begin(struct lim_client *c, uint64_t bytes, char *msg,
                        size_t msglen)
{
    const struct limits *l = c->owner;
    if (l->cfg.buffers && c->buffers >= l->cfg.buffers)
        return refuse(msg, msglen, c, "registered buffers", c->buffers, 1, l->cfg.buffers,
                      "buffers");
    if (l->cfg.registered_bytes &&
        (bytes > l->cfg.registered_bytes || c->registered_bytes > l->cfg.registered_bytes - bytes))
        return refuse(msg, msglen, c, "registered bytes", c->registered_bytes, bytes,
                      l->cfg.registered_bytes, "registered_bytes");
    c->buffers++;
    c->registered_bytes += bytes;
    return 0;
}

void limits_buffer_end(struct lim_client *c, uint64_t bytes)
{
    if (c->buffers)
        c->buffers--;
    c->registered_bytes -= bytes < c->registered_bytes ? bytes : c->registered_bytes;
}

int limits_op_begin(struct lim_client *c, uint64_t request_bytes, char *msg,
                    size_t msglen)
{
    const struct limits *l = c->owner;
    if (l->cfg.request_bytes && request_bytes > l->cfg.request_bytes)
        return refuse(msg, msglen, c, "tensor bytes per request", 0, request_bytes,
                      l->cfg.request_bytes, "request_bytes");
    if (l->cfg.in_flight && c->in_flight >= l->cfg.in_flight)
        return refuse(msg, msglen, c, "requests in flight", c->in_flight, 1, l->cfg.in_flight,
                      "in_flight");
    c->in_flight++;
    return 0;
}

void limits_op_end(struct lim_client *c)
{
    if (c->in_flight)
        c->in_flight--;
}

uint32_t limits_count(const struct limits *l)
{
    return l->count;
}
