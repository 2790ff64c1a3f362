// SPDX-License-Identifier: BSD-3-Clause
/*
 * server.h - the transport: the ROUTER side of ZeroMQ's wire protocol (ZMTP 3.x, NULL
 * mechanism) on libuv streams, on the loop thread.
 *
 * Clients use libzmq DEALER sockets, unchanged; the daemon speaks ZMTP itself instead of
 * using a libzmq ROUTER socket, because four defects of the libzmq socket could not be fixed
 * from outside it: an edge-triggered ZMQ_FD whose edge a failed send can swallow (a request
 * then waits forever), an assert on EMFILE in its ipc listener (running out of file
 * descriptors aborts the daemon), no bound on an unfinished multipart message (one peer can
 * take all memory), and peer-chosen routing ids (a peer can present another's id). Here:
 *
 *   accept ──> greeting + READY (deadline SERVER_HANDSHAKE_MS) ──> open: one frame = one
 *   message; a frame with MORE set, a frame over WIRE_MAX_MESSAGE, a bad flag, a command
 *   other than PING/PONG: the peer is told (what dispatch replies) and disconnected
 *
 * - Memory: a connection buffers at most one frame (WIRE_MAX_MESSAGE plus its header) on
 *   input; on output, reading from a peer pauses while more than SERVER_WQ_PAUSE bytes of
 *   replies wait for it, so a client that does not read cannot make replies pile up. All
 *   connections together: once more than reply_bytes wait, every connection with replies
 *   waiting stops being read until its own have left, so a thousand connections that do
 *   not read cost reply_bytes plus about one reply each, not a thousand times the pause
 *   mark.
 * - Connections: at most max_connections (the rest are accepted and closed at once, so
 *   libzmq retries them later); the caller sizes it below the file descriptor limit.
 *   libuv turns EMFILE on accept into an error we log, never an abort.
 * - Routing ids are 8 bytes chosen by the daemon, one per connection, never reused in the
 *   daemon's life; a peer's own "Identity" is ignored. A session keyed by routing id
 *   therefore belongs to one connection, and so to the credentials (SO_PEERCRED) of the
 *   process that opened it.
 * - Ordering: messages of one connection are handed over in order, replies leave in the
 *   order server_send() was called.
 *
 * Endpoints: ipc://PATH (a socket file; bind fails if PATH exists), ipc://@NAME (Linux
 * abstract socket), tcp://HOST:PORT (HOST an address or *; peers have no credentials).
 */
#ifndef DASHD_SERVER_H
#define DASHD_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define SERVER_RID_LEN 8
#define SERVER_HANDSHAKE_MS 5000        /* greeting and READY must arrive within this */
#define SERVER_CLOSE_MS 5000            /* a graceful close waits this long for the peer to read */
#define SERVER_WQ_PAUSE (1u << 20)      /* stop reading a peer with this much unsent */
#define SERVER_WQ_DROP (64u << 20)      /* a reply to a peer this far behind is dropped */
#define SERVER_DEFAULT_CONNECTIONS 4096

/* One message as received. */
struct server_msg {
    const unsigned char *rid; /* SERVER_RID_LEN bytes: the connection */
    size_t rid_len;
    const void *data; /* the frame */
    size_t len;
    int multipart;    /* the frame had MORE set: the connection closes after the reply */
    int64_t peer_uid; /* from the ipc peer's credentials; -1 when unknown */
    int64_t peer_pid;
    uint64_t arrived_ns; /* uv_hrtime() when the read that completed it was parsed */
};

/* Called on the loop thread for every message; may call server_send(). */
typedef void (*server_msg_fn)(void *ctx, const struct server_msg *m);
/* Called on the loop thread when an open connection ends (peer closed it, broke the
 * protocol or stopped being writable); its routing id is unknown from then on. */
typedef void (*server_gone_fn)(void *ctx, const unsigned char *rid, size_t rid_len);

struct server_config {
    const char *endpoint;
    uint32_t max_connections; /* 0: SERVER_DEFAULT_CONNECTIONS */
    uint64_t reply_bytes;     /* replies waiting, all connections (0: no cap beyond each's) */
    /* Connections without a session (server_set_session) one peer process (SO_PEERCRED
     * uid and pid) may hold at once, closing ones included; more are closed at accept and
     * logged. 0: no cap. tcp:// peers have none. */
    uint32_t client_connections;
    server_msg_fn on_msg;
    server_gone_fn on_gone; /* may be NULL */
    void *ctx;
};

struct server;

/* Bind the endpoint and start accepting. NULL on failure, with the reason in err (the
 * loop must then run before it is closed: a handle may be closing). The caller handles the
 * ipc lock file and a stale socket file beforehand. */
struct server *server_new(uv_loop_t *loop, const struct server_config *cfg, char *err,
                          size_t errlen);

/* Send data as one frame to the connection rid. Returns 0 (sent or queued), -EHOSTUNREACH
 * (no such connection: it is gone), -EAGAIN (the peer has not read SERVER_WQ_DROP bytes;
 * the reply is dropped), or -ENOTCONN after server_close(). */
int server_send(struct server *s, const void *rid, size_t rid_len, const void *data, size_t len);

/* Change the cap on one process's connections (config reload; those it holds stay). */
void server_set_client_connections(struct server *s, uint32_t n);

/* Whether the connection rid carries a session (dispatch: Hello made one; it was dropped
 * while the connection stays): those are not counted against client_connections. No-op
 * for a connection that is gone. */
void server_set_session(struct server *s, const void *rid, size_t rid_len, int has);

/* Change the cap on replies waiting (config reload); 0: none. */
void server_set_reply_bytes(struct server *s, uint64_t bytes);

/* Bytes of replies waiting in dashd for their connections now. */
uint64_t server_reply_bytes_queued(const struct server *s);

/* Stop accepting and reading, give queued replies up to linger_ms to leave, then close
 * every connection and handle. Idempotent. */
void server_close(struct server *s, int linger_ms);

/* Free, after server_close() and after the loop has run the close callbacks. Accepts NULL. */
void server_free(struct server *s);

#endif
