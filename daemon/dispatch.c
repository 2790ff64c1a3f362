// SPDX-License-Identifier: BSD-3-Clause
/*
 * dispatch.c - see dispatch.h.
 *
 * Counting: every message counts as a request of the daemon and, when the sender has a
 * session, of that session; every reply with a non-zero code counts as an error of both.
 * A session's latency ring holds the time from receiving a Forward or Backward to
 * sending its reply (queue wait included) - the latency a client sees for real work;
 * the cheap requests would only drown it.
 */
#include "dispatch.h"

#include "audit.h"
#include "job.h"
#include "log.h"
#include "queue.h"
#include "session.h"
#include "shmbuf.h"
#include "validate.h"

#include "proto/errors.h"
#include "proto/wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MSG_MAX 256

_Static_assert(JOB_RID_MAX >= SESS_RID_MAX, "a session's routing id must fit in a job");

struct dispatch {
    uv_loop_t *loop;
    struct server *srv;
    struct backend *backend; /* borrowed */
    struct sess_table *sessions;
    struct queue *queue;
    struct job_runner *runner; /* used by the worker thread only */
    uv_timer_t sweep;
    struct dispatch_config cfg;
    uint64_t start_ns;
    uint64_t requests, errors;
    uint32_t in_flight; /* ops accepted and not yet answered */
    int stopping;
    int idle_called;
    void (*on_idle)(void *arg);
    void *idle_arg;
};

/* A client string for our own records and log lines: cut to fit, control characters
 * replaced, so a client cannot forge log lines. */
static void copy_clean(char *dst, size_t size, const char *src)
{
    size_t i = 0;
    for (; src && src[i] && i + 1 < size; i++)
        dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ? '?' : src[i];
    dst[i] = '\0';
}

/* ---- replies ------------------------------------------------------------------------- */

static void send_reply(struct dispatch *d, const void *rid, size_t rid_len, Dash__Reply *r)
{
    struct session *s = sess_find(d->sessions, rid, rid_len);
    r->has_session_id = 1;
    r->session_id = s ? s->id : 0;
    void *buf;
    size_t len;
    int rc = wire_encode(&r->base, &buf, &len);
    Dash__Reply small = DASH__REPLY__INIT;
    if (rc == -EMSGSIZE) {
        /* Only an echoed ping payload near the limit gets here: say so instead. */
        small.id = r->id;
        small.code = DASH_EINVAL;
        small.message = "the reply would exceed the message size limit";
        small.has_session_id = 1;
        small.session_id = r->session_id;
        r = &small;
        rc = wire_encode(&r->base, &buf, &len);
    }
    if (r->code != 0) {
        d->errors++;
        if (s)
            s->errors++;
    }
    if (rc) {
        log_error("cannot encode the reply to request %llu: %s", (unsigned long long)r->id,
                  dash_strerror(rc));
        return;
    }
    rc = server_send(d->srv, rid, rid_len, buf, len);
    free(buf);
    /* The send may have ended the connection, and the gone callback its session. */
    s = sess_find(d->sessions, rid, rid_len);
    if (rc == -EHOSTUNREACH) {
        if (s) {
            log_info("session %llu (\"%s\"): the client is gone, dropping the session",
                     (unsigned long long)s->id, s->name);
            sess_drop(d->sessions, s);
        } else {
            log_debug("reply to request %llu dropped: the peer is gone", (unsigned long long)r->id);
        }
    } else if (rc == -EAGAIN) {
        log_warn("reply to request %llu of session %llu dropped: the client is not reading",
                 (unsigned long long)r->id, (unsigned long long)(s ? s->id : 0));
    } else if (rc) {
        log_warn("cannot send the reply to request %llu: %s", (unsigned long long)r->id,
                 dash_strerror(rc));
    }
}

__attribute__((format(printf, 6, 7))) static void reply_error(struct dispatch *d, const void *rid,
                                                              size_t rid_len, uint64_t id,
                                                              int code, const char *fmt, ...)
{
    char msg[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_debug("request %llu: %s: %s", (unsigned long long)id, dash_errname(code), msg);
    Dash__Reply r = DASH__REPLY__INIT;
    r.id = id;
    r.code = code;
    r.message = msg;
    send_reply(d, rid, rid_len, &r);
}

static void check_idle(struct dispatch *d)
{
    if (d->stopping && d->in_flight == 0 && !d->idle_called) {
        d->idle_called = 1;
        d->on_idle(d->idle_arg);
    }
}

/* ---- Hello, buffers ---------------------------------------------------------------------- */

static void on_hello(struct dispatch *d, const struct server_msg *m, const Dash__Request *req,
                     struct session *s)
{
    const Dash__Hello *h = req->hello;
    if (h->protocol_version != WIRE_PROTOCOL_VERSION) {
        reply_error(d, m->rid, m->rid_len, req->id, DASH_EVERSION,
                    "protocol version %u is not supported; this daemon speaks version %u",
                    h->protocol_version, WIRE_PROTOCOL_VERSION);
        return;
    }
    int created = !s;
    if (created) {
        int rc = sess_create(d->sessions, m->rid, m->rid_len, &s);
        if (rc) {
            reply_error(d, m->rid, m->rid_len, req->id, rc, "cannot create a session");
            return;
        }
        s->requests = 1;
        s->last_ns = uv_hrtime();
        s->peer_uid = m->peer_uid;
        s->peer_pid = m->peer_pid;
    }
    if (created || h->client_name)
        copy_clean(s->name, sizeof s->name, h->client_name);
    if (created || h->run_tag)
        copy_clean(s->run_tag, sizeof s->run_tag, h->run_tag);
    if (h->has_pid)
        s->pid = h->pid;
    else if (created && m->peer_pid >= 0)
        s->pid = (uint32_t)m->peer_pid;
    log_info("session %llu %s: client \"%s\" pid %u run \"%s\"", (unsigned long long)s->id,
             created ? "started" : "said hello again", s->name, s->pid, s->run_tag);

    Dash__HelloReply hr = DASH__HELLO_REPLY__INIT;
    hr.protocol_version = WIRE_PROTOCOL_VERSION;
    hr.server_version = DASHD_VERSION;
    hr.backend = (char *)d->backend->name;
    hr.has_session_id = 1;
    hr.session_id = s->id;
    hr.has_session_timeout_ms = 1;
    hr.session_timeout_ms = d->cfg.session_timeout_ms;
    hr.device = d->backend->device;
    hr.has_signals = 1;
    hr.signals = d->backend->signal_release != NULL;
    Dash__Reply r = DASH__REPLY__INIT;
    r.id = req->id;
    r.hello = &hr;
    send_reply(d, m->rid, m->rid_len, &r);
}

/* RegisterBuffer{cuda_ipc_handle}: the backend opens (or shares) the mapping. */
static int register_cuda(struct dispatch *d, const Dash__RegisterBuffer *rb, char *msg,
                         size_t msglen, struct shmbuf **ret_buf)
{
    if (!d->backend->cuda_import) {
        snprintf(msg, msglen, "this daemon serves from the %s backend, which cannot use CUDA "
                 "memory: register POSIX shared memory (shm_name), or run dashd --backend cuda "
                 "on a GPU host", d->backend->name);
        return DASH_ENOTSUP;
    }
    struct backend_cuda_buffer req = {
        .handle = rb->cuda_ipc_handle.data,
        .handle_len = rb->cuda_ipc_handle.len,
        .device_uuid = rb->device_uuid,
        .alloc_offset = rb->has_alloc_offset ? rb->alloc_offset : 0,
        .size = rb->size,
    };
    return d->backend->cuda_import(d->backend->impl, &req, msg, msglen, ret_buf);
}

static void on_register(struct dispatch *d, const struct server_msg *m, const Dash__Request *req,
                        struct session *s)
{
    const Dash__RegisterBuffer *rb = req->register_buffer;
    char msg[MSG_MAX];
    struct shmbuf *b;
    int rc;
    if (rb->has_cuda_ipc_handle && rb->shm_name) {
        reply_error(d, m->rid, m->rid_len, req->id, DASH_EINVAL,
                    "RegisterBuffer names both shm_name and cuda_ipc_handle: set one");
        return;
    }
    if (rb->has_cuda_ipc_handle) {
        rc = register_cuda(d, rb, msg, sizeof msg, &b);
        if (rc) {
            log_info("session %llu: CUDA buffer refused: %s", (unsigned long long)s->id, msg);
            reply_error(d, m->rid, m->rid_len, req->id, rc, "%s", msg);
            return;
        }
    } else {
        if (!rb->shm_name) {
            reply_error(d, m->rid, m->rid_len, req->id, DASH_EINVAL,
                        "RegisterBuffer needs shm_name or cuda_ipc_handle");
            return;
        }
        if (!(d->backend->buffer_kinds & (1u << SHMBUF_SHM))) {
            reply_error(d, m->rid, m->rid_len, req->id, DASH_ENOTSUP,
                        "the %s backend computes on device memory only: register CUDA memory "
                        "(cuda_ipc_handle; dash_cuda_register), or run dashd --backend cpu for "
                        "shared memory", d->backend->name);
            return;
        }
        /* A peer other than root may only map objects it owns: the daemon may be able to
         * open other users' memory, and must not lend that ability out. */
        int64_t owner = s->peer_uid > 0 ? s->peer_uid : -1;
        rc = shmbuf_open(rb->shm_name, rb->size, owner, msg, sizeof msg, &b);
        if (rc) {
            reply_error(d, m->rid, m->rid_len, req->id, rc, "%s", msg);
            return;
        }
    }
    uint64_t id;
    rc = sess_buf_add(d->sessions, s, b, d->cfg.max_buffers, &id);
    if (rc) {
        shmbuf_unref(b);
        reply_error(d, m->rid, m->rid_len, req->id, rc,
                    rc == DASH_ENOSPC ? "a session may hold at most %u buffers"
                                      : "out of memory (%u buffers)",
                    d->cfg.max_buffers);
        return;
    }
    log_debug("session %llu registered buffer %llu (%llu bytes of %s)", (unsigned long long)s->id,
              (unsigned long long)id, (unsigned long long)rb->size,
              shmbuf_kind_name(shmbuf_kind(b)));
    Dash__Reply r = DASH__REPLY__INIT;
    r.id = req->id;
    r.has_buffer_id = 1;
    r.buffer_id = id;
    send_reply(d, m->rid, m->rid_len, &r);
}

static void on_unregister(struct dispatch *d, const struct server_msg *m,
                          const Dash__Request *req, struct session *s)
{
    uint64_t id = req->unregister_buffer->buffer_id;
    if (sess_buf_remove(s, id) != 0) {
        reply_error(d, m->rid, m->rid_len, req->id, DASH_ENOBUF,
                    "buffer %llu is not registered in this session", (unsigned long long)id);
        return;
    }
    log_debug("session %llu unregistered buffer %llu", (unsigned long long)s->id,
              (unsigned long long)id);
    Dash__Reply r = DASH__REPLY__INIT;
    r.id = req->id;
    send_reply(d, m->rid, m->rid_len, &r);
}

static void close_event(void *ctx, void *ev)
{
    struct backend *b = ctx;
    b->event_close(b->impl, ev);
}

/* RegisterEvents: open every handle (all or none) and append them to the session's list. */
static void on_register_events(struct dispatch *d, const struct server_msg *m,
                               const Dash__Request *req, struct session *s)
{
    const Dash__RegisterEvents *re = req->register_events;
    struct backend *b = d->backend;
    if (!b->events_open) {
        reply_error(d, m->rid, m->rid_len, req->id, DASH_ENOTSUP,
                    "interprocess events need the CUDA backend; this daemon runs the %s backend",
                    b->name);
        return;
    }
    uint32_t have = s->events ? evring_count(s->events) : 0;
    if (re->n_handles == 0 || re->n_handles > EVRING_MAX - have) {
        reply_error(d, m->rid, m->rid_len, req->id, re->n_handles ? DASH_ENOSPC : DASH_EINVAL,
                    "RegisterEvents with %zu handles: a session holds 1 to %d events and has %u",
                    re->n_handles, EVRING_MAX, have);
        return;
    }
    if (!s->events && !(s->events = evring_new(close_event, b))) {
        reply_error(d, m->rid, m->rid_len, req->id, DASH_ENOMEM, "out of memory");
        return;
    }
    const unsigned char *handles[EVRING_MAX];
    size_t lens[EVRING_MAX];
    void *evs[EVRING_MAX];
    for (size_t i = 0; i < re->n_handles; i++) {
        handles[i] = re->handles[i].data;
        lens[i] = re->handles[i].len;
    }
    char msg[MSG_MAX];
    int rc = b->events_open(b->impl, handles, lens, re->n_handles, re->device_uuid, evs, msg,
                            sizeof msg);
    if (rc) {
        log_info("session %llu: events refused: %s", (unsigned long long)s->id, msg);
        reply_error(d, m->rid, m->rid_len, req->id, rc, "%s", msg);
        return;
    }
    for (size_t i = 0; i < re->n_handles; i++)
        (void)evring_add(s->events, evs[i]); /* room was checked above */
    log_debug("session %llu registered events %u..%u", (unsigned long long)s->id, have,
              have + (uint32_t)re->n_handles - 1);
    Dash__Reply r = DASH__REPLY__INIT;
    r.id = req->id;
    r.has_first_event = 1;
    r.first_event = have;
    send_reply(d, m->rid, m->rid_len, &r);
}

/* ---- Forward, Backward ------------------------------------------------------------------- */

static int lookup_size(void *ctx, uint64_t id, uint64_t *ret_size)
{
    struct shmbuf *b = sess_buf_find(ctx, id);
    if (!b)
        return DASH_ENOBUF;
    *ret_size = shmbuf_size(b);
    return 0;
}

/* Every tensor of one op lives in the same kind of buffer, one the backend computes on
 * (the backend reads them all the same way: copied from shared memory, or in place on
 * the device). 0 and *ret_kind, or DASH_EINVAL / DASH_ENOTSUP with a reason. */
static int check_kinds(struct dispatch *d, struct session *s, const struct val_plan *plan,
                       char *msg, size_t msglen, enum shmbuf_kind *ret_kind)
{
    enum shmbuf_kind kind = shmbuf_kind(sess_buf_find(s, plan->t[0].buffer_id));
    for (int slot = 1; slot < plan->slots; slot++) {
        enum shmbuf_kind k = shmbuf_kind(sess_buf_find(s, plan->t[slot].buffer_id));
        if (k != kind) {
            snprintf(msg, msglen, "%s is in %s but %s is in %s: every tensor of one op must be "
                     "on the same kind of buffer", val_slot_name(VAL_Q), shmbuf_kind_name(kind),
                     val_slot_name((enum val_slot)slot), shmbuf_kind_name(k));
            return DASH_EINVAL;
        }
    }
    if (!(d->backend->buffer_kinds & (1u << kind))) {
        snprintf(msg, msglen, "the %s backend cannot compute on %s", d->backend->name,
                 shmbuf_kind_name(kind));
        return DASH_ENOTSUP;
    }
    *ret_kind = kind;
    return 0;
}

/* The slots an audit level digests: the outputs, and with "all" the inputs too. */
static unsigned audit_digest_mask(enum audit_level level, int backward)
{
    unsigned out = backward ? (1u << VAL_DQ) | (1u << VAL_DK) | (1u << VAL_DV)
                            : (1u << VAL_OUT) | (1u << VAL_LSE);
    unsigned in = backward ? (1u << VAL_Q) | (1u << VAL_K) | (1u << VAL_V) | (1u << VAL_OUT) |
                                 (1u << VAL_LSE) | (1u << VAL_DOUT)
                           : (1u << VAL_Q) | (1u << VAL_K) | (1u << VAL_V);
    return level == AUDIT_ALL ? in | out : level == AUDIT_OUTPUTS ? out : 0;
}

/* EventSync of an op on buffers of `kind`: fill j's events (no reference taken yet).
 * 0, or a DASH_* code with a reason. */
static int check_sync(const struct session *s, const Dash__EventSync *sync, enum shmbuf_kind kind,
                      char *msg, size_t msglen, struct job *j)
{
    if (kind != SHMBUF_CUDA) {
        snprintf(msg, msglen, "event sync orders work on device buffers; this op's tensors are "
                 "in %s, and its reply comes once the outputs are written", shmbuf_kind_name(kind));
        return DASH_EINVAL;
    }
    uint32_t n = s->events ? evring_count(s->events) : 0;
    if ((sync->has_wait_event && sync->wait_event >= n) ||
        (sync->has_record_event && sync->record_event >= n)) {
        snprintf(msg, msglen, "event %u is not registered: the session has %u (RegisterEvents)",
                 sync->has_wait_event && sync->wait_event >= n ? sync->wait_event
                                                               : sync->record_event, n);
        return DASH_ENOENT;
    }
    j->reply_when_queued = sync->has_reply_when_queued && sync->reply_when_queued;
    if (j->reply_when_queued && !sync->has_record_event) {
        snprintf(msg, msglen, "reply_when_queued needs record_event: without it nothing says "
                 "when the outputs are ready");
        return DASH_EINVAL;
    }
    j->wait_event = sync->has_wait_event ? evring_get(s->events, sync->wait_event) : NULL;
    j->record_event = sync->has_record_event ? evring_get(s->events, sync->record_event) : NULL;
    return 0;
}

/* EventSync's semaphores: 0 and the words (device pointers into the buffer, on which the
 * job is to take a reference), or a code with the reason. */
static int check_signals(const struct session *s, const Dash__EventSync *sync, char *msg,
                         size_t msglen, struct shmbuf **ret_buf, uint64_t **ret_ready,
                         uint64_t **ret_done)
{
    if (!sync->has_signal_buffer || !sync->has_ready_offset || !sync->has_done_offset ||
        !sync->has_signal_seq || sync->signal_seq == 0) {
        snprintf(msg, msglen, "signals need signal_buffer, ready_offset, done_offset and a "
                 "signal_seq above 0");
        return DASH_EINVAL;
    }
    if (sync->has_wait_event || sync->has_record_event || sync->reply_when_queued) {
        snprintf(msg, msglen, "an op is ordered by events or by signals, not both");
        return DASH_EINVAL;
    }
    struct shmbuf *b = sess_buf_find(s, sync->signal_buffer);
    if (!b) {
        snprintf(msg, msglen, "signal buffer %llu is not registered in this session",
                 (unsigned long long)sync->signal_buffer);
        return DASH_ENOBUF;
    }
    const uint64_t size = shmbuf_size(b), r = sync->ready_offset, dn = sync->done_offset;
    if (shmbuf_kind(b) != SHMBUF_CUDA || (r | dn) % 8 != 0 || r > size - 8 || dn > size - 8 ||
        size < 8 || r == dn) {
        snprintf(msg, msglen, "signals are two distinct 8-byte aligned words inside a CUDA "
                 "buffer (ready at %llu, done at %llu, buffer of %llu bytes, %s)",
                 (unsigned long long)r, (unsigned long long)dn, (unsigned long long)size,
                 shmbuf_kind_name(shmbuf_kind(b)));
        return DASH_EINVAL;
    }
    *ret_buf = b;
    *ret_ready = (uint64_t *)(void *)(shmbuf_data(b) + r);
    *ret_done = (uint64_t *)(void *)(shmbuf_data(b) + dn);
    return 0;
}

/* An op that will not run: write its done word, if it names valid semaphores. */
static void release_signals(struct dispatch *d, const struct session *s, const Dash__Request *req)
{
    char msg[MSG_MAX];
    struct shmbuf *b;
    uint64_t *ready, *done;
    if (s && req->sync && req->sync->has_signal_buffer && d->backend->signal_release &&
        check_signals(s, req->sync, msg, sizeof msg, &b, &ready, &done) == 0)
        (void)d->backend->signal_release(d->backend->impl, done, req->sync->signal_seq);
}

static void on_op(struct dispatch *d, const struct server_msg *m, const Dash__Request *req,
                  struct session *s, int backward)
{
    const Dash__EventSync *sync = req->sync;
    const int want_sync = sync && (sync->has_wait_event || sync->has_record_event ||
                                   (sync->has_reply_when_queued && sync->reply_when_queued));
    const int want_signals = sync && (sync->has_signal_buffer || sync->has_ready_offset ||
                                      sync->has_done_offset || sync->has_signal_seq);
    if ((want_sync && !d->backend->events_open) ||
        (want_signals && !d->backend->signal_release)) {
        reply_error(d, m->rid, m->rid_len, req->id, DASH_ENOTSUP,
                    "%s sync needs the CUDA backend%s; this daemon runs the %s backend (its "
                    "replies come after the outputs are written)",
                    want_signals ? "signal" : "event",
                    want_signals ? " on a GPU with 64-bit stream memory operations" : "",
                    d->backend->name);
        return;
    }
    char msg[MSG_MAX];
    /* Semaphores first: once they are known, every way this op ends writes its done word,
     * so the client's stream that waits for it goes on. */
    struct shmbuf *sig_buf = NULL;
    uint64_t *sig_ready = NULL, *sig_done = NULL;
    int rc = want_signals ? check_signals(s, sync, msg, sizeof msg, &sig_buf, &sig_ready,
                                          &sig_done) : 0;
    if (rc) {
        reply_error(d, m->rid, m->rid_len, req->id, rc, "%s", msg);
        return;
    }
    struct job *j = NULL;
    if (sig_done && s->signal_ops >= DISPATCH_SIGNAL_OPS_MAX) {
        rc = DASH_EBUSY;
        snprintf(msg, sizeof msg, "a session may have at most %d signal-ordered ops in flight",
                 DISPATCH_SIGNAL_OPS_MAX);
        goto refuse;
    }
    if (!(j = calloc(1, sizeof *j))) {
        rc = DASH_ENOMEM;
        snprintf(msg, sizeof msg, "out of memory");
        goto refuse;
    }
    const struct val_limits *lim = &d->backend->limits;
    rc = backward ? val_backward(req->backward, lim, lookup_size, s, msg, sizeof msg, &j->plan)
                      : val_forward(req->forward, lim, lookup_size, s, msg, sizeof msg, &j->plan);
    if (!rc)
        rc = d->backend->check(d->backend->impl, &j->plan, msg, sizeof msg);
    enum shmbuf_kind kind = SHMBUF_SHM;
    if (!rc)
        rc = check_kinds(d, s, &j->plan, msg, sizeof msg, &kind);
    if (!rc && want_sync)
        rc = check_sync(s, sync, kind, msg, sizeof msg, j);
    /* Only shared memory is copied through host scratch. */
    uint64_t need = rc || kind != SHMBUF_SHM ? 0 : job_scratch_bytes(&j->plan);
    if (!rc && need > d->cfg.scratch_max) {
        rc = DASH_ENOMEM;
        snprintf(msg, sizeof msg, "the request needs %llu bytes of scratch, more than %llu",
                 (unsigned long long)need, (unsigned long long)d->cfg.scratch_max);
    }
    if (!rc && sig_done && kind != SHMBUF_CUDA) {
        rc = DASH_EINVAL;
        snprintf(msg, sizeof msg, "signals order work on device buffers; this op's tensors "
                 "are in %s", shmbuf_kind_name(kind));
    }
    if (rc)
        goto refuse;
    if (sig_done) {
        j->signal_buf = sig_buf;
        shmbuf_ref(sig_buf);
        j->signal_ready = sig_ready;
        j->signal_done = sig_done;
        j->signal_seq = sync->signal_seq;
    }
    memcpy(j->rid, m->rid, m->rid_len);
    j->rid_len = m->rid_len;
    j->request_id = req->id;
    j->session_id = s->id;
    j->received_ns = uv_hrtime();
    j->peer_pid = s->peer_pid;
    j->queue = d->queue;
    if (d->cfg.audit) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        j->wall_unix_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        j->pid = s->pid;
        j->uid = s->peer_uid;
        snprintf(j->client_name, sizeof j->client_name, "%s", s->name);
        snprintf(j->run_tag, sizeof j->run_tag, "%s", s->run_tag);
        if (req->audit) {
            j->has_step = req->audit->has_step;
            j->step = req->audit->step;
            copy_clean(j->label, sizeof j->label, req->audit->label);
        }
        j->digest_mask = audit_digest_mask(audit_level(d->cfg.audit), backward);
    }
    for (int slot = 0; slot < j->plan.slots; slot++) {
        j->buf[slot] = sess_buf_find(s, j->plan.t[slot].buffer_id);
        shmbuf_ref(j->buf[slot]);
    }
    if (j->wait_event || j->record_event) {
        j->events = s->events;
        evring_ref(j->events);
    }
    j->pushed_ns = uv_hrtime();
    /* An op the client's stream already waits for is not refused for a full queue: that
     * would stall the client's GPU work; each session holds at most
     * DISPATCH_SIGNAL_OPS_MAX of them. */
    if (j->signal_done) {
        queue_push_any(d->queue, &j->item);
        s->signal_ops++;
    } else if ((rc = queue_push(d->queue, &j->item)) != 0) {
        for (int slot = 0; slot < j->plan.slots; slot++)
            shmbuf_unref(j->buf[slot]);
        evring_unref(j->events);
        free(j);
        reply_error(d, m->rid, m->rid_len, req->id, DASH_EBUSY,
                    "the queue is full (%u requests waiting or running)", queue_capacity(d->queue));
        return;
    }
    s->in_flight++;
    d->in_flight++;
    return;

refuse:
    free(j);
    if (sig_done) /* the client's stream waits for this op: let it go on */
        (void)d->backend->signal_release(d->backend->impl, sig_done, sync->signal_seq);
    reply_error(d, m->rid, m->rid_len, req->id, rc, "%s", msg);
}

static Dash__Schedule proto_schedule(enum sched_kind k)
{
    switch (k) {
    case SCHED_ATOMIC:
        return DASH__SCHEDULE__ATOMIC;
    case SCHED_ASCENDING:
        return DASH__SCHEDULE__ASCENDING;
    case SCHED_DESCENDING:
        return DASH__SCHEDULE__DESCENDING;
    case SCHED_SPT:
        return DASH__SCHEDULE__SPT;
    case SCHED_SHIFT:
        return DASH__SCHEDULE__SHIFT;
    default:
        /* Backends never report AUTO (backend.h); this would be a bug. */
        return DASH__SCHEDULE__AUTO;
    }
}

/* Completion of a job the backend queued on the device (a backend thread). */
static void job_gpu_done(void *ctx, int rc, uint64_t run_ns)
{
    struct job *j = ctx;
    if (rc) {
        j->rc = rc;
        snprintf(j->msg, sizeof j->msg, "the GPU failed while running the op (%s); dashd "
                 "needs a restart", dash_strerror(rc));
    }
    j->run_ns = run_ns;
    j->finished_ns = uv_hrtime();
    queue_finish(j->queue, &j->item);
}

static int run_job(void *ctx, struct queue_item *it)
{
    struct job *j = (struct job *)it;
    struct dispatch *d = ctx;
    if (j->reply_when_queued)
        queue_expect_early(j->queue, it);
    j->rc = 0;
    if (job_run(d->runner, j, job_gpu_done, j) != BACKEND_QUEUED)
        return QUEUE_DONE;
    /* From here on j may complete at any moment: touch it no more, except to announce. */
    if (j->reply_when_queued) {
        j->launched_ns = uv_hrtime(); /* the completion reads no field written here */
        queue_early(j->queue, it);
    }
    return QUEUE_LATER;
}

static void fill_op_result(const struct dispatch *d, const struct job *j, int with_run,
                           Dash__OpResult *op)
{
    op->schedule = proto_schedule(j->used.sched);
    op->wave = j->used.w;
    op->block_m = j->used.block_m;
    op->block_n = j->used.block_n;
    op->has_queue_us = 1;
    op->queue_us = (j->started_ns - j->received_ns) / 1000;
    op->has_run_us = with_run;
    op->run_us = (j->run_ns ? j->run_ns : j->finished_ns - j->started_ns) / 1000;
    op->backend = (char *)d->backend->name;
}

/* Count a finished reply in the session's latency (and the idle clock). */
static struct session *job_session(struct dispatch *d, const struct job *j)
{
    struct session *s = sess_find(d->sessions, j->rid, j->rid_len);
    return s && s->id == j->session_id ? s : NULL;
}

/* The op is queued on the device (reply_when_queued): answer now, finish in job_done. */
static void job_early(void *ctx, struct queue_item *it)
{
    struct dispatch *d = ctx;
    struct job *j = (struct job *)it;
    struct session *s = job_session(d, j);
    if (s)
        sess_latency_add(s, (uv_hrtime() - j->received_ns) / 1000);
    Dash__Reply r = DASH__REPLY__INIT;
    Dash__OpResult op = DASH__OP_RESULT__INIT;
    r.id = j->request_id;
    fill_op_result(d, j, 0, &op);
    r.op = &op;
    const uint64_t now = uv_hrtime();
    log_debug("request %llu of session %llu: %s queued on the device; us from receipt: "
              "validated %llu, worker started %llu, on the device %llu, replying %llu",
              (unsigned long long)j->request_id, (unsigned long long)j->session_id,
              j->plan.backward ? "backward" : "forward",
              (unsigned long long)(j->pushed_ns - j->received_ns) / 1000,
              (unsigned long long)(j->started_ns - j->received_ns) / 1000,
              (unsigned long long)(j->launched_ns - j->received_ns) / 1000,
              (unsigned long long)(now - j->received_ns) / 1000);
    send_reply(d, j->rid, j->rid_len, &r);
    j->replied = 1;
}

/* One audit record for a finished job (loop thread). */
static void audit_job(struct dispatch *d, const struct job *j, uint64_t now)
{
    const struct val_plan *p = &j->plan;
    Dash__AuditRecord r = DASH__AUDIT_RECORD__INIT;
    Dash__AuditTensor tens[VAL_SLOTS], *ins[VAL_SLOTS], *outs[VAL_SLOTS];
    int64_t shapes[VAL_SLOTS][4];
    r.has_wall_unix_ns = r.has_session_id = r.has_pid = r.has_request_id = 1;
    r.wall_unix_ns = j->wall_unix_ns;
    r.session_id = j->session_id;
    r.pid = j->pid;
    r.has_uid = j->uid >= 0;
    r.uid = j->uid;
    r.client_name = (char *)j->client_name;
    r.run_tag = (char *)j->run_tag;
    r.has_step = j->has_step;
    r.step = j->step;
    r.label = (char *)j->label;
    r.request_id = j->request_id;
    r.op = p->backward ? "backward" : "forward";
    r.has_dtype = r.has_mask = r.has_scale = 1;
    r.dtype = p->prob.dtype == DTYPE_F32 ? DASH__DTYPE__F32
              : p->prob.dtype == DTYPE_F16 ? DASH__DTYPE__F16 : DASH__DTYPE__BF16;
    r.mask = p->prob.mask == SCHED_MASK_CAUSAL ? DASH__MASK__CAUSAL : DASH__MASK__FULL;
    r.scale = p->prob.scale;
    if (j->rc == 0) {
        /* a forward has no backward schedule nor wave: only its tile sizes are recorded */
        r.has_schedule = r.has_wave = p->backward;
        r.has_block_m = r.has_block_n = 1;
        r.schedule = proto_schedule(j->used.sched);
        r.wave = j->used.w;
        r.block_m = j->used.block_m;
        r.block_n = j->used.block_n;
    }
    r.backend = (char *)d->backend->name;
    r.kernel_build = (char *)(d->cfg.kernel_build ? d->cfg.kernel_build : "");
    r.device = d->backend->device;
    r.has_sm_count = 1;
    r.sm_count = d->backend->threads(d->backend->impl);
    /* every tensor with its shape; digests where the level asked for them */
    for (int s = 0; s < p->slots; s++) {
        Dash__AuditTensor *t = &tens[s];
        dash__audit_tensor__init(t);
        t->name = (char *)val_slot_name((enum val_slot)s);
        for (int k = 0; k < p->t[s].ndim; k++)
            shapes[s][k] = p->t[s].shape[k];
        t->n_shape = (size_t)p->t[s].ndim;
        t->shape = shapes[s];
        t->has_digest = (j->digest_ok >> s) & 1u;
        t->digest = j->digest[s];
        if (p->t[s].output)
            outs[r.n_outputs++] = t;
        else
            ins[r.n_inputs++] = t;
    }
    r.inputs = ins;
    r.outputs = outs;
    r.has_duration_us = r.has_code = 1;
    r.duration_us = (now - j->received_ns) / 1000;
    r.code = j->rc;
    audit_submit(d->cfg.audit, &r);
}

static void job_done(void *ctx, struct queue_item *it)
{
    struct dispatch *d = ctx;
    struct job *j = (struct job *)it;
    uint64_t now = uv_hrtime();
    d->in_flight--;
    if (j->device_op && j->rc == 0)
        job_device_digests(j);
    if (d->cfg.audit)
        audit_job(d, j, now);
    struct session *s = job_session(d, j);
    if (s) {
        s->in_flight--;
        if (j->signal_done)
            s->signal_ops--;
        s->last_ns = now; /* the idle clock starts when the client has its answer */
        if (j->plan.backward)
            s->backwards++;
        else
            s->forwards++;
        if (!j->replied)
            sess_latency_add(s, (now - j->received_ns) / 1000);
    }
    if (j->replied) {
        /* The client was told "queued"; a failure now can only be logged (and the
         * device is unusable anyway: every later op fails too). */
        if (j->rc)
            log_error("request %llu of session %llu failed after its reply: %s",
                      (unsigned long long)j->request_id, (unsigned long long)j->session_id,
                      j->msg[0] ? j->msg : dash_strerror(j->rc));
    } else {
        Dash__Reply r = DASH__REPLY__INIT;
        Dash__OpResult op = DASH__OP_RESULT__INIT;
        r.id = j->request_id;
        r.code = j->rc;
        if (j->rc == 0) {
            fill_op_result(d, j, 1, &op);
            r.op = &op;
            log_debug("request %llu of session %llu: %s done in %llu us (queued %llu us)",
                      (unsigned long long)j->request_id, (unsigned long long)j->session_id,
                      j->plan.backward ? "backward" : "forward", (unsigned long long)op.run_us,
                      (unsigned long long)op.queue_us);
        } else {
            r.message = j->msg[0] ? j->msg : (char *)dash_strerror(j->rc);
            log_debug("request %llu of session %llu: %s: %s", (unsigned long long)j->request_id,
                      (unsigned long long)j->session_id, dash_errname(j->rc), r.message);
        }
        send_reply(d, j->rid, j->rid_len, &r);
    }
    for (int slot = 0; slot < j->plan.slots; slot++)
        shmbuf_unref(j->buf[slot]);
    shmbuf_unref(j->signal_buf);
    evring_unref(j->events);
    free(j);
    check_idle(d);
}

/* ---- Stats, Ping ------------------------------------------------------------------------- */

static int cmp_session_id(const void *a, const void *b)
{
    const struct session *x = *(struct session *const *)a, *y = *(struct session *const *)b;
    return (x->id > y->id) - (x->id < y->id);
}

static void on_stats(struct dispatch *d, const struct server_msg *m, const Dash__Request *req)
{
    uint32_t n = sess_count(d->sessions);
    struct session **ss = calloc(n ? n : 1, sizeof *ss);
    Dash__ClientStats *cs = calloc(n ? n : 1, sizeof *cs);
    Dash__ClientStats **cps = calloc(n ? n : 1, sizeof *cps);
    if (!ss || !cs || !cps) {
        reply_error(d, m->rid, m->rid_len, req->id, DASH_ENOMEM, "out of memory");
        goto free_all;
    }
    uint32_t i = 0;
    for (struct session *s = sess_first(d->sessions); s; s = sess_next(s))
        ss[i++] = s;
    qsort(ss, n, sizeof *ss, cmp_session_id);
    for (i = 0; i < n; i++) {
        const struct session *s = ss[i];
        Dash__ClientStats *c = &cs[i];
        dash__client_stats__init(c);
        c->has_session_id = c->has_pid = c->has_requests = c->has_errors = 1;
        c->has_forwards = c->has_backwards = c->has_bytes_registered = c->has_buffers = 1;
        c->has_latency_p50_us = c->has_latency_p99_us = c->has_in_flight = 1;
        c->session_id = s->id;
        c->client_name = (char *)s->name;
        c->pid = s->pid;
        c->run_tag = (char *)s->run_tag;
        c->requests = s->requests;
        c->errors = s->errors;
        c->forwards = s->forwards;
        c->backwards = s->backwards;
        c->bytes_registered = s->bytes_registered;
        c->buffers = (uint32_t)s->n_bufs;
        c->latency_p50_us = sess_latency_pct(s, 50);
        c->latency_p99_us = sess_latency_pct(s, 99);
        c->in_flight = s->in_flight;
        cps[i] = c;
    }
    Dash__StatsReply st = DASH__STATS_REPLY__INIT;
    st.server_version = DASHD_VERSION;
    st.backend = (char *)d->backend->name;
    st.has_uptime_ms = st.has_queue_depth = st.has_queue_capacity = 1;
    st.has_requests = st.has_errors = st.has_threads = 1;
    st.uptime_ms = (uv_hrtime() - d->start_ns) / 1000000;
    st.queue_depth = queue_depth(d->queue);
    st.queue_capacity = queue_capacity(d->queue);
    st.requests = d->requests;
    st.errors = d->errors;
    st.threads = (uint32_t)d->backend->threads(d->backend->impl);
    st.n_clients = n;
    st.clients = cps;
    st.has_sessions = 1;
    st.sessions = (uint32_t)n;
    st.gpu_sharing = (char *)d->backend->gpu_sharing; /* NULL: absent */
    struct audit_stats as;
    if (d->cfg.audit) {
        audit_get_stats(d->cfg.audit, &as);
        st.audit_path = (char *)audit_path(d->cfg.audit);
        st.audit_level = (char *)audit_level_name(audit_level(d->cfg.audit));
        st.has_audit_written = st.has_audit_dropped = st.has_audit_write_errors = 1;
        st.audit_written = as.written;
        st.audit_dropped = as.dropped;
        st.audit_write_errors = as.write_errors;
    }
    Dash__Reply r = DASH__REPLY__INIT;
    r.id = req->id;
    r.stats = &st;
    /* Hundreds of sessions could outgrow one message: list the oldest ones that fit
     * (leaving room for the session id send_reply adds). */
    while (st.n_clients > 0 &&
           protobuf_c_message_get_packed_size(&r.base) + 16 > (size_t)WIRE_MAX_MESSAGE)
        st.n_clients = st.n_clients * 3 / 4;
    send_reply(d, m->rid, m->rid_len, &r);
free_all:
    free(cps);
    free(cs);
    free(ss);
}

static void on_ping(struct dispatch *d, const struct server_msg *m, const Dash__Request *req)
{
    Dash__Reply r = DASH__REPLY__INIT;
    r.id = req->id;
    r.has_ping_payload = req->ping->has_payload;
    r.ping_payload = req->ping->payload;
    send_reply(d, m->rid, m->rid_len, &r);
}

/* ---- the entry point ---------------------------------------------------------------------- */

void dispatch_on_message(void *ctx, const struct server_msg *m)
{
    struct dispatch *d = ctx;
    d->requests++;
    struct session *s = sess_find(d->sessions, m->rid, m->rid_len);
    if (s) {
        s->requests++;
        s->last_ns = uv_hrtime();
    }
    if (m->multipart) {
        /* The server disconnects the peer after this reply: nothing of the message is kept. */
        reply_error(d, m->rid, m->rid_len, wire_peek_id(m->data, m->len), DASH_EMALFORMED,
                    "a message of more than one frame: dashd's protocol has one frame per "
                    "message; disconnecting");
        return;
    }
    Dash__Request *req = wire_decode_request(m->data, m->len, WIRE_DECODE_BUDGET);
    if (!req) {
        /* echo the id when the message at least starts with it, so the client knows which
         * of its requests this is */
        reply_error(d, m->rid, m->rid_len, wire_peek_id(m->data, m->len), DASH_EMALFORMED,
                    "%zu bytes that do not decode as a dash.Request", m->len);
        return;
    }
    const uint64_t id = req->id;
    switch (req->body_case) {
    case DASH__REQUEST__BODY_PING:
        on_ping(d, m, req);
        break;
    case DASH__REQUEST__BODY_STATS:
        on_stats(d, m, req);
        break;
    case DASH__REQUEST__BODY_GOODBYE: {
        Dash__Reply r = DASH__REPLY__INIT;
        r.id = id;
        send_reply(d, m->rid, m->rid_len, &r);
        /* look again: the send may already have dropped it (peer gone) */
        struct session *gone = sess_find(d->sessions, m->rid, m->rid_len);
        if (gone) {
            log_info("session %llu (\"%s\") said goodbye", (unsigned long long)gone->id, gone->name);
            sess_drop(d->sessions, gone);
        }
        break;
    }
    case DASH__REQUEST__BODY_HELLO:
    case DASH__REQUEST__BODY_REGISTER_BUFFER:
    case DASH__REQUEST__BODY_UNREGISTER_BUFFER:
    case DASH__REQUEST__BODY_REGISTER_EVENTS:
    case DASH__REQUEST__BODY_FORWARD:
    case DASH__REQUEST__BODY_BACKWARD:
        if (d->stopping && req->body_case != DASH__REQUEST__BODY_UNREGISTER_BUFFER) {
            release_signals(d, s, req);
            reply_error(d, m->rid, m->rid_len, id, DASH_ECANCELED, "dashd is shutting down");
            break;
        }
        if (req->body_case == DASH__REQUEST__BODY_HELLO) {
            on_hello(d, m, req, s);
            break;
        }
        if (!s) {
            reply_error(d, m->rid, m->rid_len, id, DASH_ENOSESSION,
                        "no session on this connection: send Hello first");
            break;
        }
        if (req->body_case == DASH__REQUEST__BODY_REGISTER_BUFFER)
            on_register(d, m, req, s);
        else if (req->body_case == DASH__REQUEST__BODY_UNREGISTER_BUFFER)
            on_unregister(d, m, req, s);
        else if (req->body_case == DASH__REQUEST__BODY_REGISTER_EVENTS)
            on_register_events(d, m, req, s);
        else
            on_op(d, m, req, s, req->body_case == DASH__REQUEST__BODY_BACKWARD);
        break;
    default:
        reply_error(d, m->rid, m->rid_len, id, DASH_EPROTO,
                    "the request has no body this daemon knows (a newer client?)");
        break;
    }
    wire_free_request(req);
}

/* ---- lifetime ----------------------------------------------------------------------------- */

static void on_sweep(uv_timer_t *t)
{
    struct dispatch *d = t->data;
    uint64_t now = uv_hrtime(), limit = (uint64_t)d->cfg.session_timeout_ms * 1000000;
    sess_reclaim_poll(d->sessions, now);
    struct session *next;
    for (struct session *s = sess_first(d->sessions); s; s = next) {
        next = sess_next(s);
        if (s->in_flight == 0 && now - s->last_ns > limit) {
            log_info("session %llu (\"%s\") expired after %.1f s idle", (unsigned long long)s->id,
                     s->name, (double)(now - s->last_ns) / 1e9);
            sess_drop(d->sessions, s);
        }
    }
}

struct dispatch *dispatch_new(uv_loop_t *loop, struct backend *b, const struct dispatch_config *cfg)
{
    struct dispatch *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->loop = loop;
    d->backend = b;
    d->cfg = *cfg;
    d->start_ns = uv_hrtime();
    d->sessions = sess_table_new();
    if (!d->sessions)
        goto free_d;
    d->runner = job_runner_new(b, cfg->scratch_max);
    if (!d->runner)
        goto free_sessions;
    d->queue = queue_new(loop, cfg->queue_capacity, run_job, job_early, job_done, d);
    if (!d->queue)
        goto free_runner;
    uv_timer_init(loop, &d->sweep);
    d->sweep.data = d;
    /* Sweep often enough that a session outlives its timeout by at most a quarter of it
     * (or a second). */
    uint64_t every = cfg->session_timeout_ms / 4;
    every = every < 50 ? 50 : every > 1000 ? 1000 : every;
    uv_timer_start(&d->sweep, on_sweep, every, every);
    return d;

free_runner:
    job_runner_free(d->runner);
free_sessions:
    sess_table_free(d->sessions);
free_d:
    free(d);
    return NULL;
}

void dispatch_set_server(struct dispatch *d, struct server *srv)
{
    d->srv = srv;
}

void dispatch_on_gone(void *ctx, const unsigned char *rid, size_t rid_len)
{
    struct dispatch *d = ctx;
    struct session *s = sess_find(d->sessions, rid, rid_len);
    if (!s)
        return;
    log_info("session %llu (\"%s\"): the client closed its connection, dropping the session",
             (unsigned long long)s->id, s->name);
    sess_drop_disconnected(d->sessions, s, uv_hrtime());
}

void dispatch_stop(struct dispatch *d, void (*on_idle)(void *arg), void *arg)
{
    if (d->stopping)
        return;
    d->stopping = 1;
    d->on_idle = on_idle;
    d->idle_arg = arg;
    check_idle(d);
}

uint32_t dispatch_in_flight(const struct dispatch *d)
{
    return d->in_flight;
}

void dispatch_close(struct dispatch *d)
{
    uv_timer_stop(&d->sweep);
    uv_close((uv_handle_t *)&d->sweep, NULL);
    queue_close(d->queue);
}

void dispatch_free(struct dispatch *d)
{
    if (!d)
        return;
    queue_free(d->queue);
    sess_table_free(d->sessions);
    job_runner_free(d->runner);
    free(d);
}
