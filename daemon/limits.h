// SPDX-License-Identifier: BSD-3-Clause
/*
 * limits.h - what one client may take of dashd, and who a client is.
 *
 * A client is a process: the uid and pid of the connection's peer (SO_PEERCRED, which the
 * peer cannot choose). Every connection of one process - dash_connect() called eight
 * times, or eight threads each with a client - is one client, so opening more
 * connections gains a process nothing. A connection without credentials (tcp://) is a
 * client of its own. The caps, each 0 for none:
 *
 *   sessions           sessions (connections that said Hello) at once
 *   buffers            registered buffers, all its sessions together
 *   registered_bytes   bytes of those buffers
 *   in_flight          Forward/Backward ops accepted and not yet answered
 *   request_bytes      tensor bytes one op names (the dense size of every tensor it reads
 *                      or writes, which is also what a shared-memory op copies)
 *
 * A request over a cap is refused with DASH_ELIMIT and a message naming the cap, the
 * client's use and the config key; nothing else of the client and nothing of any other
 * client changes. The client is also the unit of fairness: its key is the queue's flow
 * (queue.h), so the worker takes turns between processes, not connections.
 *
 * Threads: the loop thread only. A client lives while a session or a job refers to it.
 */
#ifndef DASHD_LIMITS_H
#define DASHD_LIMITS_H

#include <stddef.h>
#include <stdint.h>

struct limits_config {
    uint32_t connections; /* enforced by the server at accept (server_config), not here */
    uint32_t sessions;
    uint32_t buffers;
    uint64_t registered_bytes;
    uint32_t in_flight;
    uint64_t request_bytes;
};

/* One client's use, counted by the functions below. */
struct lim_client {
    struct limits *owner;
    uint64_t key;   /* unique in the daemon's life: the queue flow */
    int64_t uid, pid; /* the peer's credentials; -1: none (a client of its own) */
    uint32_t refs;
    uint32_t sessions, buffers, in_flight;
    uint64_t registered_bytes;
    struct lim_client *hash_next;
};

struct limits;

/* A table of clients with these caps. NULL on failure. */
struct limits *limits_new(const struct limits_config *cfg);

/* Accepts NULL. Clients still referenced are freed too. */
void limits_free(struct limits *l);

/* Change the caps (SIGHUP). What a client holds beyond a lowered cap stays; only new
 * requests are refused. */
void limits_set(struct limits *l, const struct limits_config *cfg);
const struct limits_config *limits_get(const struct limits *l);

/* The client of a peer with these credentials (pid < 0: a new client of its own), with a
 * reference for the caller; NULL when out of memory. */
struct lim_client *limits_client(struct limits *l, int64_t uid, int64_t pid);
void limits_ref(struct lim_client *c);
void limits_unref(struct lim_client *c);

/* May c start one more session? 0 (counted), or DASH_ELIMIT with the reason in msg. */
int limits_session_begin(struct lim_client *c, char *msg, size_t msglen);
/* A session of c ended, holding n_buffers buffers of `bytes` bytes (released with it).
 * session.c calls this and limits_buffer_end(). */
void limits_session_end(struct lim_client *c, uint32_t n_buffers, uint64_t bytes);

/* May c register a buffer of `bytes`? 0 (counted), or DASH_ELIMIT with the reason. */
int limits_buffer_begin(struct lim_client *c, uint64_t bytes, char *msg,
                        size_t msglen);
/* A buffer of c was unregistered, or its registration failed after limits_buffer_begin. */
void limits_buffer_end(struct lim_client *c, uint64_t bytes);

/* May c start an op naming `request_bytes` tensor bytes? 0 (counted in flight), or
 * DASH_ELIMIT with the reason. */
int limits_op_begin(struct lim_client *c, uint64_t request_bytes, char *msg,
                    size_t msglen);
/* An op counted by limits_op_begin was answered (or never queued). */
void limits_op_end(struct lim_client *c);

/* Clients known now (for tests and stats). */
uint32_t limits_count(const struct limits *l);

#endif
