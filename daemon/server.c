/*
 * server.c - see server.h.
 */
#include "server.h"

#include "log.h"

#include "proto/wire.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

struct server {
    void *zctx;
    void *sock;
    uv_poll_t poll; /* on ZMQ_FD: only wakes the loop */
    uv_idle_t idle; /* runs the drain again while messages or an unread edge may wait */
    server_msg_fn fn;
    void *ctx;
    int draining; /* inside drain(): sends need no extra wake-up, drain re-reads EVENTS */
    int closed;
};

/* "Peer-Address" of an ipc peer ends in ":<uid>:<gid>:<pid>" (libzmq appends the
 * SO_PEERCRED values); anything else leaves the ids unknown. */
static void peer_creds(zmq_msg_t *msg, int64_t *ret_uid, int64_t *ret_pid)
{
    *ret_uid = *ret_pid = -1;
    const char *addr = zmq_msg_gets(msg, "Peer-Address");
    if (!addr)
        return;
    /* c[0], c[1], c[2]: just after the last three colons (uid, gid, pid). */
    const char *c[3];
    int found = 0;
    for (const char *p = addr + strlen(addr); p > addr && found < 3; p--)
        if (p[-1] == ':')
            c[2 - found++] = p;
    if (found < 3)
        return;
    char *end;
    errno = 0;
    unsigned long long uid = strtoull(c[0], &end, 10);
    if (errno || end == c[0] || *end != ':')
        return;
    unsigned long long pid = strtoull(c[2], &end, 10);
    if (errno || end == c[2] || *end != '\0')
        return;
    *ret_uid = (int64_t)uid;
    *ret_pid = (int64_t)pid;
}

/* Receive and hand over one message. Returns 1 if one was handled, 0 if none was there. */
static int recv_one(struct server *s)
{
    zmq_msg_t rid, body, extra;
    zmq_msg_init(&rid);
    if (zmq_msg_recv(&rid, s->sock, ZMQ_DONTWAIT) < 0) {
        if (errno != EAGAIN && errno != EINTR)
            log_warn("receiving from the socket failed: %s", zmq_strerror(errno));
        zmq_msg_close(&rid);
        return 0;
    }
    struct server_msg m = {.rid = zmq_msg_data(&rid), .rid_len = zmq_msg_size(&rid),
                           .peer_uid = -1, .peer_pid = -1};
    zmq_msg_init(&body);
    if (zmq_msg_more(&rid)) {
        /* The frames of one message arrive together, so these cannot block or be missing. */
        if (zmq_msg_recv(&body, s->sock, ZMQ_DONTWAIT) >= 0) {
            m.frames = 1;
            m.data = zmq_msg_data(&body);
            m.len = zmq_msg_size(&body);
            peer_creds(&body, &m.peer_uid, &m.peer_pid);
            int more = zmq_msg_more(&body);
            while (more) {
                zmq_msg_init(&extra);
                if (zmq_msg_recv(&extra, s->sock, ZMQ_DONTWAIT) < 0) {
                    zmq_msg_close(&extra);
                    break;
                }
                m.frames++;
                more = zmq_msg_more(&extra);
                zmq_msg_close(&extra);
            }
        }
    }
    s->fn(s->ctx, &m);
    zmq_msg_close(&body);
    zmq_msg_close(&rid);
    return 1;
}

static void on_idle(uv_idle_t *h);

static void drain(struct server *s)
{
    if (s->closed || s->draining)
        return;
    s->draining = 1;
    for (int handled = 0;;) {
        uint32_t events = 0; /* ZMQ_EVENTS is an int; uint32_t has the same size */
        size_t size = sizeof events;
        if (zmq_getsockopt(s->sock, ZMQ_EVENTS, &events, &size) < 0) {
            log_warn("reading ZMQ_EVENTS failed: %s", zmq_strerror(errno));
            break;
        }
        if (!(events & ZMQ_POLLIN)) {
            uv_idle_stop(&s->idle);
            break;
        }
        if (handled == SERVER_BATCH) {
            /* More waiting: come back next iteration, after timers and completions. */
            uv_idle_start(&s->idle, on_idle);
            break;
        }
        if (!recv_one(s))
            break; /* readiness reported falsely */
        handled++;
        if (s->closed)
            break;
    }
    s->draining = 0;
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    (void)events;
    struct server *s = h->data;
    if (status < 0)
        log_warn("polling the socket failed: %s", uv_strerror(status));
    drain(s);
}

static void on_idle(uv_idle_t *h)
{
    struct server *s = h->data;
    uv_idle_stop(h);
    drain(s);
}

static int set_int(void *sock, int opt, int value, const char *name, char *err, size_t errlen)
{
    if (zmq_setsockopt(sock, opt, &value, sizeof value) == 0)
        return 0;
    snprintf(err, errlen, "cannot set %s: %s", name, zmq_strerror(errno));
    return -1;
}

struct server *server_new(uv_loop_t *loop, const char *endpoint, server_msg_fn fn, void *ctx,
                          char *err, size_t errlen)
{
    struct server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->fn = fn;
    s->ctx = ctx;
    s->zctx = zmq_ctx_new();
    if (!s->zctx) {
        snprintf(err, errlen, "cannot create a ZeroMQ context: %s", zmq_strerror(errno));
        goto free_s;
    }
    s->sock = zmq_socket(s->zctx, ZMQ_ROUTER);
    if (!s->sock) {
        snprintf(err, errlen, "cannot create the ROUTER socket: %s", zmq_strerror(errno));
        goto term_ctx;
    }
    int64_t maxmsg = WIRE_MAX_MESSAGE;
    if (zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0) {
        snprintf(err, errlen, "cannot set ZMQ_MAXMSGSIZE: %s", zmq_strerror(errno));
        goto close_sock;
    }
    if (set_int(s->sock, ZMQ_ROUTER_MANDATORY, 1, "ZMQ_ROUTER_MANDATORY", err, errlen) ||
        set_int(s->sock, ZMQ_SNDHWM, SERVER_HWM, "ZMQ_SNDHWM", err, errlen) ||
        set_int(s->sock, ZMQ_RCVHWM, SERVER_HWM, "ZMQ_RCVHWM", err, errlen) ||
        set_int(s->sock, ZMQ_LINGER, 0, "ZMQ_LINGER", err, errlen) ||
        set_int(s->sock, ZMQ_HEARTBEAT_IVL, SERVER_HEARTBEAT_IVL_MS, "ZMQ_HEARTBEAT_IVL", err,
                errlen) ||
        set_int(s->sock, ZMQ_HEARTBEAT_TTL, SERVER_HEARTBEAT_TIMEOUT_MS, "ZMQ_HEARTBEAT_TTL", err,
                errlen) ||
        set_int(s->sock, ZMQ_HEARTBEAT_TIMEOUT, SERVER_HEARTBEAT_TIMEOUT_MS,
                "ZMQ_HEARTBEAT_TIMEOUT", err, errlen))
        goto close_sock;
    if (zmq_bind(s->sock, endpoint) != 0) {
        snprintf(err, errlen, "cannot bind %s: %s", endpoint, zmq_strerror(errno));
        goto close_sock;
    }
    int fd;
    size_t fd_size = sizeof fd;
    if (zmq_getsockopt(s->sock, ZMQ_FD, &fd, &fd_size) != 0) {
        snprintf(err, errlen, "cannot get ZMQ_FD: %s", zmq_strerror(errno));
        goto close_sock;
    }
    int rc = uv_poll_init(loop, &s->poll, fd);
    if (rc) {
        snprintf(err, errlen, "cannot poll the socket: %s", uv_strerror(rc));
        goto close_sock;
    }
    s->poll.data = s;
    uv_idle_init(loop, &s->idle);
    s->idle.data = s;
    uv_poll_start(&s->poll, UV_READABLE, on_poll);
    /* Peers may have connected and sent before the first edge we can see. */
    uv_idle_start(&s->idle, on_idle);
    return s;

close_sock:
    zmq_close(s->sock);
term_ctx:
    zmq_ctx_term(s->zctx);
free_s:
    free(s);
    return NULL;
}

int server_send(struct server *s, const void *rid, size_t rid_len, const void *data, size_t len)
{
    if (s->closed)
        return -ENOTCONN;
    if (zmq_send(s->sock, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return -errno;
    if (zmq_send(s->sock, data, len, ZMQ_DONTWAIT) < 0)
        return -errno;
    /* A send can swallow the edge that announced new input; look again soon. */
    if (!s->draining)
        uv_idle_start(&s->idle, on_idle);
    return 0;
}

void server_close(struct server *s, int linger_ms)
{
    if (s->closed)
        return;
    s->closed = 1;
    uv_close((uv_handle_t *)&s->poll, NULL);
    uv_close((uv_handle_t *)&s->idle, NULL);
    (void)zmq_setsockopt(s->sock, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    zmq_close(s->sock);
    s->sock = NULL;
}

void server_free(struct server *s)
{
    if (!s)
        return;
    zmq_ctx_term(s->zctx);
    free(s);
}
