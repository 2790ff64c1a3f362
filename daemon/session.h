// SPDX-License-Identifier: BSD-3-Clause
/*
 * session.h - client sessions: who is connected, their buffers, their counters.
 *
 * A session belongs to one ZeroMQ routing id (one DEALER connection) and starts with
 * Hello. Session ids and buffer ids come from table-wide counters and are never reused,
 * so another session's buffer id, or an old one, is simply unknown. Everything here runs
 * on the loop thread only; jobs in flight refer to a session by routing id and session
 * id (never by pointer) and hold their own references on the buffers they use, so a
 * session can be dropped at any time.
 */
#ifndef DASHD_SESSION_H
#define DASHD_SESSION_H

#include "evring.h"
#include "limits.h"
#include "shmbuf.h"

#include <stddef.h>
#include <stdint.h>

#define SESS_RID_MAX 256
#define SESS_NAME_MAX 128   /* client_name and run_tag are cut to this (NUL included) */
#define SESS_LATENCIES 1024 /* recent op latencies kept for p50/p99 */

struct sess_buf {
    uint64_t id;
    struct shmbuf *buf; /* one reference */
};

/* Plain data owned by the table; the fields are read freely, changed through the
 * functions below or directly for the counters. */
struct session {
    uint64_t id;
    unsigned char rid[SESS_RID_MAX];
    size_t rid_len;
    char name[SESS_NAME_MAX];
    char run_tag[SESS_NAME_MAX];
    uint32_t pid;        /* what Hello said, else the peer's pid if known, else 0 */
    uint32_t rank, world_size; /* a distributed run's, as Hello said; world_size 0: none */
    int64_t peer_uid;    /* from the connection's credentials; -1 if unknown */
    int64_t peer_pid;    /* likewise, in dashd's pid namespace; -1 if unknown */
    uint64_t last_ns;    /* uv_hrtime() of the last message */
    uint32_t in_flight;  /* queued or running ops */
    uint32_t signal_ops; /* of which ordered by semaphores (dispatch.h) */
    uint64_t requests, errors, forwards, backwards;
    uint64_t bytes_registered; /* sum of the sizes of the buffers held now */
    /* Ring of the last SESS_LATENCIES op latencies in microseconds. */
    uint64_t lat_us[SESS_LATENCIES];
    uint32_t lat_count, lat_next;
    /* Buffers, sorted by id (ids only grow, so registering appends). */
    struct sess_buf *bufs;
    size_t n_bufs, cap_bufs;
    /* The client it belongs to (limits.h; one reference), or NULL: dropping the session
     * takes its session and buffers off the client's counts. */
    struct lim_client *client;
    /* Interprocess events (RegisterEvents), NULL until the first; one reference. */
    struct evring *events;
    /* Table links. */
    struct session *hash_next, *prev, *next;
};

struct sess_table;

struct sess_table *sess_table_new(void);

/* Drops every session. Accepts NULL. */
void sess_table_free(struct sess_table *t);

/* The session of a routing id, or NULL. */
struct session *sess_find(struct sess_table *t, const void *rid, size_t rid_len);

/* A new session for a routing id (which must have none; rid_len <= SESS_RID_MAX), with a
 * fresh id. 0 and *ret_sess, or DASH_ENOMEM / DASH_EINVAL. */
int sess_create(struct sess_table *t, const void *rid, size_t rid_len, struct session **ret_sess);

/* Remove and free a session, dropping its references on its buffers (a mapping lives on
 * while a job still holds it). If the client process is gone (peer_pid known and no
 * longer running), the shared memory objects it registered under libdash's names
 * ("/dash-<pid>-...", pid as Hello said) are unlinked first: a client that crashed or was
 * killed left them behind, and nobody else would remove them. A live client's stay (an
 * idle session that expired, a daemon shutting down): it registers them again. A zombie
 * (exited, not yet reaped) counts as gone. */
void sess_drop(struct sess_table *t, struct session *s);

/* Like sess_drop, for a session whose connection has just ended. A client that dies
 * closes its connection while it exits, before the kernel reports the process gone, so
 * if it is not gone yet, the names are kept for SESS_RECLAIM_WAIT_MS: sess_reclaim_poll()
 * unlinks them if the process goes within that time, and forgets them otherwise (a live
 * client that closed its connection keeps its memory). */
#define SESS_RECLAIM_WAIT_MS 5000
void sess_drop_disconnected(struct sess_table *t, struct session *s, uint64_t now_ns);

/* Unlink the shared memory of the clients that have gone since their connection ended;
 * call now and then (the idle sweep does). */
void sess_reclaim_poll(struct sess_table *t, uint64_t now_ns);

/* Iterate: sess_first(t), then sess_next(s) until NULL. Do not drop the current one
 * without taking its successor first. */
struct session *sess_first(struct sess_table *t);
struct session *sess_next(struct session *s);
uint32_t sess_count(const struct sess_table *t);

/* Add a buffer (taking over the caller's reference) under a fresh id: 0 and *ret_id, or
 * DASH_ENOMEM / DASH_ENOSPC (more than max buffers in the session). */
int sess_buf_add(struct sess_table *t, struct session *s, struct shmbuf *b, size_t max,
                 uint64_t *ret_id);

/* The buffer with this id in this session, or NULL. */
struct shmbuf *sess_buf_find(const struct session *s, uint64_t id);

/* Remove a buffer and drop the session's reference: 0 or DASH_ENOBUF. */
int sess_buf_remove(struct session *s, uint64_t id);

/* Record one op latency. */
void sess_latency_add(struct session *s, uint64_t us);

/* The p-th percentile (0 < p <= 100, nearest rank) of the recorded latencies; 0 if none. */
uint64_t sess_latency_pct(const struct session *s, double p);

#endif
