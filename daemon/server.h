/*
 * server.h - the transport: one ZeroMQ ROUTER socket driven by a libuv loop.
 *
 * The socket is touched only on the loop thread. ZMQ_FD is edge-triggered and may wake us
 * for nothing, so every wake-up (and the loop iteration after any send, which can consume
 * an edge) reads ZMQ_EVENTS and drains messages with ZMQ_DONTWAIT until the socket is no
 * longer readable. At most SERVER_BATCH messages are handled per loop iteration; if more
 * are waiting, a uv_idle handle brings us back without blocking, so completions and
 * timers run in between.
 *
 * Socket options: ROUTER_MANDATORY (a reply to a departed peer fails with EHOSTUNREACH
 * instead of vanishing), MAXMSGSIZE = WIRE_MAX_MESSAGE, explicit send/receive high-water
 * marks, LINGER 0 while serving, and ZMTP heartbeats so dead peers are noticed.
 */
#ifndef DASHD_SERVER_H
#define DASHD_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define SERVER_BATCH 256
#define SERVER_HWM 4096
#define SERVER_HEARTBEAT_IVL_MS 1000
#define SERVER_HEARTBEAT_TIMEOUT_MS 5000

/* One message as received: [routing id][payload frames...]. */
struct server_msg {
    const unsigned char *rid;
    size_t rid_len;
    const void *data; /* the first payload frame (NULL when frames == 0) */
    size_t len;
    int frames;       /* payload frames; a well-formed message has exactly 1 */
    int64_t peer_uid; /* from the ipc peer's credentials; -1 when unknown */
    int64_t peer_pid;
};

/* Called on the loop thread for every message; may call server_send(). */
typedef void (*server_msg_fn)(void *ctx, const struct server_msg *m);

struct server;

/* Create the socket, bind it to `endpoint` and start polling. NULL on failure, with the
 * reason in err. The caller handles the ipc lock file and stale socket beforehand. */
struct server *server_new(uv_loop_t *loop, const char *endpoint, server_msg_fn fn, void *ctx,
                          char *err, size_t errlen);

/* Send [rid][data]. Returns 0, -EHOSTUNREACH (the peer is gone), -EAGAIN (its queue is at
 * the high-water mark; the message is dropped) or another -errno. */
int server_send(struct server *s, const void *rid, size_t rid_len, const void *data, size_t len);

/* Stop reading, give pending replies up to linger_ms to leave, close the socket and the
 * loop handles. Idempotent. */
void server_close(struct server *s, int linger_ms);

/* Terminate the ZeroMQ context (waits for the linger) and free. After server_close() and
 * after the loop has run the close callbacks. Accepts NULL. */
void server_free(struct server *s);

#endif
