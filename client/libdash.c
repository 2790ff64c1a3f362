// SPDX-License-Identifier: BSD-3-Clause
/*
 * libdash.c - the client's session with dashd: the table of requests in flight, the
 * session state machine that survives daemon restarts, and waiting. dash_connect.c opens
 * and closes a client, dash_map.c holds the id maps.
 *
 * Nothing here runs in the background: the library only reads the socket inside a call
 * that waits (dash_wait, a synchronous op, dash_shm_alloc...). Whatever arrives during such
 * a call is handled, whichever request it answers, so replies for other tickets are stored
 * and a session restore started by one call is carried on by the next.
 *
 * Liveness. A waiting call that has heard nothing for DASH__PROBE_MS sends a Ping (or, while
 * a Hello is pending, the Hello again: it may have been lost with a dying daemon). Every
 * message received counts as a sign of life, so an op that runs for minutes on a responsive
 * daemon never times out, while a daemon that is gone (or stopped) is given up on after the
 * client's timeout. A Ping's reply also carries our session id, which is how a restarted
 * daemon is noticed while we wait for replies that will never come.
 *
 * dash_internal.h draws the request and session states.
 */
#include "client/dash_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* ---- time ----------------------------------------------------------------------------- */

int64_t dash__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dash__now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* ---- requests ------------------------------------------------------------------------- */

static int needs_session(enum dash__kind k)
{
    return k == DASH__REGISTER || k == DASH__UNREGISTER || k == DASH__FORWARD ||
           k == DASH__BACKWARD || k == DASH__REGISTER_EVENTS;
}

static int is_op(enum dash__kind k)
{
    return k == DASH__FORWARD || k == DASH__BACKWARD;
}

struct dash__req *dash__req_new(struct dash_client *c, enum dash__kind kind)
{
    struct dash__req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->kind = kind;
    r->state = DASH__QUEUED;
    r->born_ms = dash__now_ms();
    r->wait_slot = r->record_slot = r->signal_slot = -1;
    r->prev = c->reqs_tail;
    if (c->reqs_tail)
        c->reqs_tail->next = r;
    else
        c->reqs = r;
    c->reqs_tail = r;
    return r;
}

void dash__req_free(struct dash_client *c, struct dash__req *r)
{
    dash__map_del(&c->by_wire, r->wire_id);
    dash__map_del(&c->by_ticket, r->ticket);
    if (is_op(r->kind) && r->state != DASH__DONE)
        dash__op_finish(c, r, DASH_ECANCELED, NULL); /* gives its buffers back */
    if (r->kind == DASH__REGISTER && r->buf && r->buf->reg_req == r)
        r->buf->reg_req = NULL;
    if (r->kind == DASH__REGISTER_EVENTS && c->events && c->events->reg_req == r)
        c->events->reg_req = NULL;
    if (c->probe == r)
        c->probe = NULL;
    if (c->hello == r)
        c->hello = NULL;
    if (r->prev)
        r->prev->next = r->next;
    else
        c->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        c->reqs_tail = r->prev;
    wire_free_reply(r->reply);
    free(r->offsets);
    free(r);
}

/* A zmq failure as one of our codes: its own errno values (ETERM...) are not ours. */
int dash__zmq_code(int e)
{
    return e > 0 && e < ZMQ_HAUSNUMERO ? -e : DASH_EIO;
}

/* Encode r with a fresh wire id and send it. On success r is SENT under the new id (the
 * previous one, if any, is forgotten); on failure r is unchanged. */
int dash__send(struct dash_client *c, struct dash__req *r)
{
    Dash__Request m = DASH__REQUEST__INIT;
    Dash__Hello hello = DASH__HELLO__INIT;
    Dash__Ping ping = DASH__PING__INIT;
    Dash__Stats stats = DASH__STATS__INIT;
    Dash__Goodbye goodbye = DASH__GOODBYE__INIT;
    Dash__RegisterBuffer reg = DASH__REGISTER_BUFFER__INIT;
    Dash__UnregisterBuffer unreg = DASH__UNREGISTER_BUFFER__INIT;
    Dash__RegisterEvents regev = DASH__REGISTER_EVENTS__INIT;
    ProtobufCBinaryData handles[DASH__EVENT_RING];
    struct dash__op_storage st;
    uint8_t token[8];
    int rc;

    switch (r->kind) {
    case DASH__HELLO:
        hello.protocol_version = WIRE_PROTOCOL_VERSION;
        hello.client_name = c->name;
        hello.has_pid = 1;
        hello.pid = (uint32_t)getpid();
        hello.run_tag = c->run_tag; /* NULL: absent */
        hello.has_rank = hello.has_world_size = c->world_size > 0;
        hello.rank = c->rank;
        hello.world_size = c->world_size;
        m.body_case = DASH__REQUEST__BODY_HELLO;
        m.hello = &hello;
        break;
    case DASH__PING:
        memcpy(token, &r->token, sizeof token);
        ping.has_payload = 1;
        ping.payload.len = sizeof token;
        ping.payload.data = token;
        /* fall through */
    case DASH__PROBE:
        m.body_case = DASH__REQUEST__BODY_PING;
        m.ping = &ping;
        break;
    case DASH__STATS:
        m.body_case = DASH__REQUEST__BODY_STATS;
        m.stats = &stats;
        break;
    case DASH__GOODBYE:
        m.body_case = DASH__REQUEST__BODY_GOODBYE;
        m.goodbye = &goodbye;
        break;
    case DASH__REGISTER:
        reg.size = r->buf->size;
        if (r->buf->kind == DASH__BUF_CUDA) {
            reg.has_cuda_ipc_handle = 1;
            reg.cuda_ipc_handle.len = DASH__IPC_HANDLE_BYTES;
            reg.cuda_ipc_handle.data = r->buf->ipc_handle;
            reg.device_uuid = r->buf->device_uuid;
            reg.has_alloc_offset = 1;
            reg.alloc_offset = r->buf->alloc_offset;
        } else {
            reg.shm_name = r->buf->name;
        }
        m.body_case = DASH__REQUEST__BODY_REGISTER_BUFFER;
        m.register_buffer = &reg;
        break;
    case DASH__UNREGISTER:
        unreg.buffer_id = r->buffer_id;
        m.body_case = DASH__REQUEST__BODY_UNREGISTER_BUFFER;
        m.unregister_buffer = &unreg;
        break;
    case DASH__REGISTER_EVENTS:
        for (int i = 0; i < DASH__EVENT_RING; i++) {
            handles[i].len = DASH__IPC_HANDLE_BYTES;
            handles[i].data = c->events->handle[i];
        }
        regev.n_handles = DASH__EVENT_RING;
        regev.handles = handles;
        regev.device_uuid = c->events->device_uuid;
        m.body_case = DASH__REQUEST__BODY_REGISTER_EVENTS;
        m.register_events = &regev;
        break;
    case DASH__FORWARD:
    case DASH__BACKWARD:
        if ((rc = dash__op_encode(c, r, &m, &st)) != 0)
            return rc;
        break;
    }

    uint64_t id = c->next_wire++;
    m.id = id;
    void *buf;
    size_t len;
    if ((rc = wire_encode(&m.base, &buf, &len)) != 0)
        return rc;
    if ((rc = dash__map_put(&c->by_wire, id, r)) != 0)
        goto free_buf;
    /* A ping's round trip starts before the send: zmq_send() hands the message to
     * ZeroMQ's I/O thread, which may deliver it, and the reply come back, before this
     * thread runs again. */
    int64_t sent_us = dash__now_us();
    /* Blocks only while the pipe to the daemon is full (ZMQ_SNDTIMEO bounds it). */
    while ((rc = zmq_send(c->sock, buf, len, 0)) < 0 && zmq_errno() == EINTR)
        ;
    if (rc < 0) {
        int e = zmq_errno();
        rc = e == EAGAIN ? DASH_ETIMEDOUT : dash__zmq_code(e);
        dash__map_del(&c->by_wire, id);
        goto free_buf;
    }
    rc = 0;
    dash__map_del(&c->by_wire, r->wire_id);
    r->wire_id = id;
    r->gen = c->gen;
    r->state = DASH__SENT;
    r->retry_ms = 0;
    if (r->kind == DASH__PING)
        r->sent_us = sent_us;
free_buf:
    free(buf);
    return rc;
}

/* ---- the session state machine -------------------------------------------------------- */

/* Read the monitor's events: a disconnect sets c->peer_gone. */
static void drain_monitor(struct dash_client *c)
{
    if (!c->monitor)
        return;
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, c->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            if (zmq_errno() == EINTR)
                continue;
            return;
        }
        /* An event is two frames: 2 bytes of event id and 4 of value, then the address. */
        uint16_t event = 0;
        if (zmq_msg_size(&msg) >= sizeof event)
            memcpy(&event, zmq_msg_data(&msg), sizeof event);
        if (event & ZMQ_EVENT_DISCONNECTED)
            c->peer_gone = 1;
        int more = zmq_msg_more(&msg);
        zmq_msg_close(&msg);
        while (more) {
            zmq_msg_init(&msg);
            more = zmq_msg_recv(&msg, c->monitor, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&msg);
            zmq_msg_close(&msg);
        }
    }
}

/* Send (or send again) the Hello. */
int dash__start_hello(struct dash_client *c)
{
    struct dash__req *r = c->hello;
    if (!r && !(r = dash__req_new(c, DASH__HELLO)))
        return DASH_ENOMEM;
    /* Whoever answers this Hello is checked; disconnects before it are settled by it. */
    drain_monitor(c);
    c->peer_gone = 0;
    int rc = dash__send(c, r);
    if (rc) {
        if (r->state != DASH__SENT)
            dash__req_free(c, r);
        return rc;
    }
    c->hello = r;
    c->state = DASH__S_HELLO;
    dash__signals_new_daemon(c, 0);
    c->last_probe_ms = dash__now_ms();
    return 0;
}

/* No session can be had now (a Hello refused or unsendable): everything that waits for one
 * fails with code, and the next call that needs a session tries again. */
static void fail_waiting(struct dash_client *c, int code)
{
    /* A refused daemon: the ops say why (dash_last_error) */
    Dash__Reply refused = DASH__REPLY__INIT;
    refused.message = c->refusal;
    const Dash__Reply *why = code == DASH_EPERM && c->refusal[0] ? &refused : NULL;
    c->state = DASH__S_LOST;
    c->session_id = 0;
    c->hello_code = code;
    for (struct dash__req *r = c->reqs; r; r = r->next)
        if (is_op(r->kind) && r->state == DASH__QUEUED)
            dash__op_finish(c, r, code, why);
    for (struct dash_buffer *b = c->bufs; b; b = b->next) {
        if (b->reg != DASH__REG_OK) {
            b->reg = DASH__REG_FAILED;
            b->reg_code = code;
        }
    }
    if (c->events && c->events->reg != DASH__REG_OK) {
        c->events->reg = DASH__REG_FAILED;
        c->events->reg_code = code;
    }
}

static int send_register(struct dash_client *c, struct dash_buffer *b)
{
    struct dash__req *r = dash__req_new(c, DASH__REGISTER);
    if (!r)
        return DASH_ENOMEM;
    r->buf = b;
    int rc = dash__send(c, r);
    if (rc) {
        dash__req_free(c, r);
        return rc;
    }
    b->reg = DASH__REG_PENDING;
    b->reg_req = r;
    c->regs_in_flight++;
    return 0;
}

static int send_register_events(struct dash_client *c)
{
    struct dash__req *r = dash__req_new(c, DASH__REGISTER_EVENTS);
    if (!r)
        return DASH_ENOMEM;
    int rc = dash__send(c, r);
    if (rc) {
        dash__req_free(c, r);
        return rc;
    }
    c->events->reg = DASH__REG_PENDING;
    c->events->reg_req = r;
    c->regs_in_flight++;
    return 0;
}

/* The last registration of a restore has answered: send what waited for it - but not a
 * signal-ordered op the library has released meanwhile (the watchdog, once the daemon's
 * process was gone): the caller's stream went on past its poisoned outputs, which the
 * caller may have reused since, and the new daemon would write them at any time. (One
 * whose call already returned its failure - signal_told - is dropped without a word.) */
static void finish_restore(struct dash_client *c)
{
    c->state = DASH__S_OK;
    for (struct dash__req *r = c->reqs; r; r = r->next) {
        if (!is_op(r->kind) || r->state != DASH__QUEUED)
            continue;
        if (r->signal_slot >= 0 && dash__signal_released(c, r->signal_slot, r->signal_seq)) {
            Dash__Reply why = DASH__REPLY__INIT;
            why.message = (char *)"released (its outputs poisoned) while the session with dashd "
                                  "was being restored: not sent again";
            dash__op_finish(c, r, DASH_EIO, &why);
            continue;
        }
        /* The old daemon ran it to the end and went before its reply reached us: done, not
         * sent again - the caller's stream has gone on past it and may have reused the
         * outputs, which a second run would write at any time. */
        if (r->signal_slot >= 0 && dash__signal_completed(c, r->signal_slot, r->signal_seq)) {
            Dash__Reply done = DASH__REPLY__INIT;
            Dash__OpResult op = DASH__OP_RESULT__INIT;
            op.backend = (char *)"cuda";
            done.op = &op;
            dash__op_finish(c, r, 0, &done);
            continue;
        }
        int rc = dash__send(c, r); /* a buffer the daemon refused fails the op here */
        if (rc)
            dash__op_finish(c, r, rc, NULL);
    }
}

/* The daemon restarted, or dropped our session: start over with Hello. */
static void lose_session(struct dash_client *c)
{
    c->state = DASH__S_LOST;
    c->session_id = 0;
    c->regs_in_flight = 0;
    for (struct dash_buffer *b = c->bufs; b; b = b->next) {
        if (b->reg == DASH__REG_OK || b->reg == DASH__REG_PENDING) {
            b->reg = DASH__REG_NONE;
            b->id = 0;
            b->reg_req = NULL;
        }
    }
    if (c->events && (c->events->reg == DASH__REG_OK || c->events->reg == DASH__REG_PENDING)) {
        c->events->reg = DASH__REG_NONE;
        c->events->reg_req = NULL;
    }
    struct dash__req *next;
    for (struct dash__req *r = c->reqs; r; r = next) {
        next = r->next;
        if (r->state != DASH__SENT || !needs_session(r->kind))
            continue;
        dash__map_del(&c->by_wire, r->wire_id);
        r->wire_id = 0;
        if (is_op(r->kind))
            r->state = DASH__QUEUED; /* pure functions: running one twice is harmless */
        else
            dash__req_free(c, r); /* registers are redone; unregisters are moot */
    }
    if (++c->lost_streak > DASH__MAX_LOST_STREAK) {
        fail_waiting(c, DASH_EPROTO);
        return;
    }
    int rc = dash__start_hello(c);
    if (rc)
        fail_waiting(c, rc);
}

/* Before sending what needs the session: if the connection dropped since the Hello, the
 * daemon that answers now may be another one (an abstract name or a path in a sticky
 * directory can be taken over when ours exits); it gets a Hello, checked, first. */
void dash__notice_disconnect(struct dash_client *c)
{
    drain_monitor(c);
    if (c->peer_gone && (c->state == DASH__S_OK || c->state == DASH__S_REGISTERING))
        lose_session(c);
}

/* A message came from a peer we do not trust (its reply was handled as DASH_EPERM): a
 * session it seems to answer for is given up, and the Hello that follows is refused. */
static void refuse_peer(struct dash_client *c)
{
    snprintf(c->last_error, sizeof c->last_error, "%s", c->refusal);
    if (!(c->flags & DASH_CONNECT_NO_SESSION) &&
        (c->state == DASH__S_OK || c->state == DASH__S_REGISTERING))
        lose_session(c);
}

static void on_hello(struct dash_client *c, struct dash__req *r, const Dash__Reply *rep)
{
    const Dash__HelloReply *h = rep->hello;
    int code = rep->code;
    uint64_t sid = 0;
    if (!code && (!h || h->protocol_version != WIRE_PROTOCOL_VERSION))
        code = DASH_EVERSION;
    if (!code) {
        sid = h->has_session_id ? h->session_id : rep->has_session_id ? rep->session_id : 0;
        if (!sid)
            code = DASH_EPROTO; /* 0 means "no session" on the wire */
    }
    dash__req_free(c, r);
    if (code) {
        fail_waiting(c, code);
        return;
    }
    c->hello_code = 0;
    c->session_id = sid;
    c->daemon_signals = h->has_signals && h->signals;
    c->session_timeout_ms = h->has_session_timeout_ms ? h->session_timeout_ms : 0;
    dash__signals_new_daemon(c, 1);
    c->gen++;
    c->state = DASH__S_REGISTERING;
    for (struct dash_buffer *b = c->bufs; b; b = b->next) {
        if (b->reg == DASH__REG_OK || b->reg == DASH__REG_PENDING)
            continue;
        int rc = send_register(c, b);
        if (rc) {
            b->reg = DASH__REG_FAILED;
            b->reg_code = rc;
        }
    }
    if (c->events && c->events->reg != DASH__REG_OK && c->events->reg != DASH__REG_PENDING) {
        int rc = send_register_events(c);
        if (rc) {
            c->events->reg = DASH__REG_FAILED;
            c->events->reg_code = rc;
        }
    }
    if (c->regs_in_flight == 0)
        finish_restore(c);
}

static void on_register(struct dash_client *c, struct dash__req *r, const Dash__Reply *rep)
{
    struct dash_buffer *b = r->buf;
    int code = rep->code;
    if (!code && !rep->has_buffer_id)
        code = DASH_EPROTO;
    if (c->regs_in_flight)
        c->regs_in_flight--;
    if (!b) {
        /* freed while registering: undo it on the daemon's side too */
        if (!code)
            dash__unregister_detached(c, rep->buffer_id);
    } else if (!code) {
        b->reg = DASH__REG_OK;
        b->id = rep->buffer_id;
        b->reg_req = NULL;
    } else {
        b->reg = DASH__REG_FAILED;
        b->reg_code = code;
        b->reg_req = NULL;
        /* what dash_shm_alloc() and dash_cuda_register() leave in dash_last_error() */
        (void)dash__fail(c, code, "dashd at %s refused the buffer: %s", c->endpoint,
                         rep->message && *rep->message ? rep->message : dash_strerror(code));
    }
    dash__req_free(c, r);
    if (c->state == DASH__S_REGISTERING && c->regs_in_flight == 0)
        finish_restore(c);
}

static void on_register_events(struct dash_client *c, struct dash__req *r,
                               const Dash__Reply *rep)
{
    int code = rep->code;
    if (!code && !rep->has_first_event)
        code = DASH_EPROTO;
    if (c->regs_in_flight)
        c->regs_in_flight--;
    struct dash__events *e = c->events;
    if (e && e->reg_req == r) {
        e->reg = code ? DASH__REG_FAILED : DASH__REG_OK;
        e->reg_code = code;
        e->base = code ? 0 : rep->first_event;
        e->reg_req = NULL;
    }
    dash__req_free(c, r);
    if (c->state == DASH__S_REGISTERING && c->regs_in_flight == 0)
        finish_restore(c);
}

/* The daemon's queue was full: send r again later, if the client's timeout leaves time
 * for it (a full queue is a wait, not a failure). Only ops whose caller waits for the
 * reply: a stream-ordered op is ordered against others that a resend would overtake.
 * Returns 1 if r will be resent. */
static int busy_retry(struct dash_client *c, struct dash__req *r)
{
    if (r->wait_slot >= 0 || r->record_slot >= 0 || r->signal_slot >= 0)
        return 0;
    int64_t now = dash__now_ms();
    int backoff = r->busy_backoff_ms ? r->busy_backoff_ms : 1;
    if (now + backoff >= r->born_ms + c->timeout_ms)
        return 0;
    r->busy_backoff_ms = backoff * 2 > DASH__BUSY_BACKOFF_MAX_MS ? DASH__BUSY_BACKOFF_MAX_MS
                                                                 : backoff * 2;
    r->retry_ms = now + backoff;
    r->state = DASH__QUEUED;
    return 1;
}

/* Send the ops whose retry is due (the session must be there: otherwise the restore sends
 * every queued op). Returns when the next one is due, or INT64_MAX. */
static int64_t send_due_retries(struct dash_client *c, int64_t now)
{
    int64_t next = INT64_MAX;
    if (c->state != DASH__S_OK)
        return next;
    for (struct dash__req *r = c->reqs; r; r = r->next) {
        if (!is_op(r->kind) || r->state != DASH__QUEUED || !r->retry_ms)
            continue;
        if (r->retry_ms > now) {
            next = r->retry_ms < next ? r->retry_ms : next;
            continue;
        }
        r->retry_ms = 0;
        int rc = dash__send(c, r);
        if (rc)
            dash__op_finish(c, r, rc, NULL);
    }
    return next;
}

/* Returns whether r took ownership of rep. */
static int on_reply(struct dash_client *c, struct dash__req *r, Dash__Reply *rep)
{
    switch (r->kind) {
    case DASH__HELLO:
        on_hello(c, r, rep);
        return 0;
    case DASH__PROBE:
    case DASH__GOODBYE:
        dash__req_free(c, r);
        return 0;
    case DASH__PING:
        r->code = rep->code;
        if (!r->code && (!rep->has_ping_payload || rep->ping_payload.len != sizeof r->token ||
                         memcmp(rep->ping_payload.data, &r->token, sizeof r->token) != 0))
            r->code = DASH_EPROTO;
        r->rtt_us = (uint64_t)(dash__now_us() - r->sent_us);
        r->state = DASH__DONE;
        return 0;
    case DASH__STATS:
        r->code = rep->code;
        if (!r->code && !rep->stats)
            r->code = DASH_EPROTO;
        r->reply = rep;
        r->state = DASH__DONE;
        return 1;
    case DASH__REGISTER:
        on_register(c, r, rep);
        return 0;
    case DASH__REGISTER_EVENTS:
        on_register_events(c, r, rep);
        return 0;
    case DASH__UNREGISTER:
        dash__req_free(c, r); /* always detached; an unknown id is no news */
        return 0;
    case DASH__FORWARD:
    case DASH__BACKWARD:
        if (rep->code == DASH_EBUSY && busy_retry(c, r))
            return 0;
        dash__op_finish(c, r, rep->code, rep);
        return 0;
    }
    return 0;
}

static void dispatch(struct dash_client *c, Dash__Reply *rep)
{
    struct dash__req *r = dash__map_get(&c->by_wire, rep->id);
    if (!r) {
        /* a reply to an earlier send of something resent since, or to nothing of ours */
        wire_free_reply(rep);
        return;
    }
    dash__map_del(&c->by_wire, r->wire_id);
    r->wire_id = 0;

    /* Only a reply to a request of the current session may say that the session is gone;
     * one from before the last Hello reports a session we already replaced. */
    int checked = r->kind != DASH__HELLO && !(c->flags & DASH_CONNECT_NO_SESSION) &&
                  r->gen == c->gen &&
                  (c->state == DASH__S_OK || c->state == DASH__S_REGISTERING);
    uint64_t sid = rep->has_session_id ? rep->session_id : 0;
    int lost = checked && (sid != c->session_id || rep->code == DASH_ENOSESSION);

    if (lost && needs_session(r->kind) &&
        (!is_op(r->kind) || rep->code == DASH_ENOSESSION || rep->code == DASH_ENOBUF)) {
        /* Refused for want of the session: lose_session() treats r like everything else
         * still in flight (ops are resent, buffers registered again). */
        wire_free_reply(rep);
        lose_session(c);
        return;
    }
    if (checked && !lost && r->kind != DASH__REGISTER)
        c->lost_streak = 0; /* the session demonstrably works */
    if (!on_reply(c, r, rep))
        wire_free_reply(rep);
    if (lost)
        lose_session(c);
}

/* ---- reading and waiting -------------------------------------------------------------- */

/* Whether msg comes from a daemon we may believe (wire_peer_check); the reason of a
 * refusal goes to c->refusal. One connection's messages share their Peer-Address, so the
 * last one that passed is remembered. */
static int peer_trusted(struct dash_client *c, zmq_msg_t *msg)
{
    if (!c->check_peer)
        return 1;
    const char *addr = zmq_msg_gets(msg, "Peer-Address");
    if (addr && c->peer_ok[0] && strcmp(addr, c->peer_ok) == 0)
        return 1;
    char why[sizeof c->refusal];
    if (wire_peer_check(addr, c->endpoint, c->owner, why, sizeof why) != 0) {
        snprintf(c->refusal, sizeof c->refusal, "%s", why);
        return 0;
    }
    snprintf(c->peer_ok, sizeof c->peer_ok, "%s", addr ? addr : "");
    return 1;
}

/* Wait up to timeout_ms for the socket, then handle every message that has arrived. */
static int pump(struct dash_client *c, long timeout_ms)
{
    zmq_pollitem_t it = {.socket = c->sock, .events = ZMQ_POLLIN};
    int n = zmq_poll(&it, 1, timeout_ms);
    if (n < 0)
        return zmq_errno() == EINTR ? 0 : dash__zmq_code(zmq_errno());
    if (n == 0)
        return 0;
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, c->sock, ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            zmq_msg_close(&msg);
            if (e == EINTR)
                continue;
            return e == EAGAIN ? 0 : dash__zmq_code(e);
        }
        int trusted = peer_trusted(c, &msg);
        if (trusted)
            c->last_rx_ms = dash__now_ms(); /* an untrusted peer is no sign of our daemon */
        int more = zmq_msg_more(&msg);
        Dash__Reply *rep = NULL;
        if (!more)
            rep = wire_decode_reply(zmq_msg_data(&msg), zmq_msg_size(&msg), WIRE_DECODE_BUDGET);
        zmq_msg_close(&msg);
        if (rep && !trusted)
            rep->code = DASH_EPERM; /* every handler reads nothing else of a failed reply */
        /* A reply is one frame; the rest of a multi-frame message is dropped with it. */
        while (more) {
            zmq_msg_init(&msg);
            if (zmq_msg_recv(&msg, c->sock, ZMQ_DONTWAIT) < 0)
                more = 0;
            else
                more = zmq_msg_more(&msg);
            zmq_msg_close(&msg);
        }
        if (rep)
            dispatch(c, rep);
        if (!trusted)
            refuse_peer(c);
    }
}

/* Probe the daemon if it has been silent for DASH__PROBE_MS while we wait for it. Returns
 * when the next probe may be due. */
static int64_t probe(struct dash_client *c, int64_t now)
{
    int64_t due = max64(c->last_rx_ms, c->last_probe_ms) + DASH__PROBE_MS;
    if (now < due)
        return due;
    if (c->state == DASH__S_HELLO && c->hello) {
        /* the Hello may have gone down with the daemon it was sent to */
        (void)dash__send(c, c->hello);
    } else {
        size_t own = c->probe && c->probe->state == DASH__SENT;
        if (c->by_wire.n <= own)
            return now + DASH__PROBE_MS; /* nothing awaited */
        if (!c->probe)
            c->probe = dash__req_new(c, DASH__PROBE);
        if (c->probe && dash__send(c, c->probe) != 0 && c->probe->state != DASH__SENT)
            dash__req_free(c, c->probe);
    }
    c->last_probe_ms = now;
    return now + DASH__PROBE_MS;
}

/* A signal-ordered op waiting in the library (re-queued for a restore). */
static int is_queued_signal_op(const struct dash__req *r)
{
    return is_op(r->kind) && r->state == DASH__QUEUED && r->signal_slot >= 0;
}

static int queued_signal_op(const struct dash_client *c)
{
    for (const struct dash__req *r = c->reqs; r; r = r->next)
        if (is_queued_signal_op(r))
            return 1;
    return 0;
}

static int no_queued_signal_op(struct dash_client *c, const void *arg)
{
    (void)arg;
    return !queued_signal_op(c);
}

/* The signal-ordered ops still waiting for a restore will not be sent by this call: fail
 * them (dash__op_finish releases each one: poison, then the done word; the next call
 * reports it), so that no caller's stream waits on them. Not while a carry waits (it
 * decides for itself). */
static void fail_queued_signal_ops(struct dash_client *c, int rc)
{
    if (c->carrying || !queued_signal_op(c))
        return;
    Dash__Reply why = DASH__REPLY__INIT;
    char msg[200];
    snprintf(msg, sizeof msg, "the session with dashd at %s could not be restored to send it "
             "again: %s", c->endpoint, dash_strerror(rc));
    why.message = msg;
    for (struct dash__req *r = c->reqs; r; r = r->next)
        if (is_queued_signal_op(r))
            dash__op_finish(c, r, rc, &why);
}

/* See dash_internal.h. At most one client timeout from now, even if the daemon keeps
 * answering probes but never the restore; the call's own outcome and dash_last_error()
 * are left as they were (the ops' failure goes to the next call, as any signal-ordered
 * op's). */
void dash__carry_restore(struct dash_client *c)
{
    if (c->carrying || c->state == DASH__S_OK || !queued_signal_op(c))
        return;
    char saved[sizeof c->last_error];
    memcpy(saved, c->last_error, sizeof saved);
    c->carrying = 1;
    const int64_t now = dash__now_ms();
    int rc = dash__wait(c, no_queued_signal_op, NULL, now + c->timeout_ms, now);
    c->carrying = 0;
    if (rc)
        fail_queued_signal_ops(c, rc);
    memcpy(c->last_error, saved, sizeof saved);
}

int dash__wait(struct dash_client *c, int (*done)(struct dash_client *, const void *),
               const void *arg, int64_t deadline_ms, int64_t since_ms)
{
    for (;;) {
        if (done(c, arg)) {
            dash__carry_restore(c);
            return 0;
        }
        int64_t now = dash__now_ms();
        int64_t give_up = max64(since_ms, c->last_rx_ms) + c->timeout_ms;
        if (deadline_ms >= 0 && deadline_ms < give_up)
            give_up = deadline_ms;
        if (now >= give_up) {
            int rc;
            if (deadline_ms >= 0 && give_up == deadline_ms) {
                rc = dash__fail(c, DASH_ETIMEDOUT, "no answer from dashd at %s within the "
                                "%lld ms asked for", c->endpoint,
                                (long long)(deadline_ms - since_ms));
                dash__carry_restore(c); /* the caller's deadline, not the daemon's silence */
            } else {
                rc = dash__fail(c, DASH_ETIMEDOUT, "no sign of life from dashd at %s for %d ms "
                                "(the client's timeout)", c->endpoint, c->timeout_ms);
                fail_queued_signal_ops(c, rc); /* silent that long: no restore to wait for */
            }
            return rc;
        }
        int64_t wake = probe(c, now);
        int64_t retry = send_due_retries(c, now);
        if (wake > retry)
            wake = retry;
        if (wake > give_up)
            wake = give_up;
        int64_t t = wake - now;
        int rc = pump(c, t < 1 ? 1 : t > INT_MAX ? INT_MAX : (long)t);
        if (rc < 0) {
            rc = dash__fail(c, rc, "reading from dashd at %s: %s", c->endpoint, dash_strerror(rc));
            fail_queued_signal_ops(c, rc);
            return rc;
        }
    }
}

int dash__pump_now(struct dash_client *c)
{
    (void)probe(c, dash__now_ms());
    (void)send_due_retries(c, dash__now_ms());
    int rc = pump(c, 0);
    dash__carry_restore(c);
    return rc;
}

/* ---- what the other files ask of the session ------------------------------------------ */

int dash__submit(struct dash_client *c, struct dash__req *r)
{
    if (!needs_session(r->kind))
        return dash__send(c, r);
    dash__notice_disconnect(c);
    if (c->state == DASH__S_OK)
        return dash__send(c, r);
    if (c->flags & DASH_CONNECT_NO_SESSION)
        return DASH_ENOSESSION;
    if (c->state == DASH__S_LOST) {
        c->lost_streak = 0;
        int rc = dash__start_hello(c);
        if (rc)
            return rc;
    }
    r->state = DASH__QUEUED; /* finish_restore() sends it */
    return 0;
}

/* Whether a registration may be sent now: 1 (a session is there); else 0 when the Hello
 * in flight will be followed by on_hello() registering everything that needs it, or the
 * result of starting a session (on_hello() again), or DASH_ENOSESSION. */
static int may_register_now(struct dash_client *c)
{
    dash__notice_disconnect(c);
    switch (c->state) {
    case DASH__S_OK:
    case DASH__S_REGISTERING:
        return 1;
    case DASH__S_HELLO:
        return 0;
    case DASH__S_LOST:
        break;
    }
    if (c->flags & DASH_CONNECT_NO_SESSION)
        return DASH_ENOSESSION;
    c->lost_streak = 0;
    return dash__start_hello(c);
}

int dash__register(struct dash_client *c, struct dash_buffer *b)
{
    int rc = may_register_now(c);
    return rc == 1 ? send_register(c, b) : rc;
}

int dash__register_events(struct dash_client *c)
{
    int rc = may_register_now(c);
    return rc == 1 ? send_register_events(c) : rc;
}

void dash__unregister_detached(struct dash_client *c, uint64_t id)
{
    struct dash__req *r = dash__req_new(c, DASH__UNREGISTER);
    if (!r)
        return; /* the daemon releases it with the session */
    r->detached = 1;
    r->buffer_id = id;
    if (dash__send(c, r) != 0)
        dash__req_free(c, r);
}
