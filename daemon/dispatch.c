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
#include "dispatch_int.h"

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

void dispatch__copy_clean(char *dst, size_t size, const char *src)
{
    size_t i = 0;
    for (; src && src[i] && i + 1 < size; i++)
        dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ? '?' : src[i];
    dst[i] = '\0';
}

/* ---- replies ------------------------------------------------------------------------- */

void dispatch__send_reply(struct dispatch *d, const void *rid, size_t rid_len, Dash__Reply *r)
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
    metrics_count_reply(&d->metrics, r->code);
    if (r->code != 0 && s)
        s->errors++;
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

void dispatch__reply_error(struct dispatch *d, const void *rid, size_t rid_len, uint64_t id,
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
    dispatch__send_reply(d, rid, rid_len, &r);
}

void dispatch__check_idle(struct dispatch *d)
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
        dispatch__reply_error(d, m->rid, m->rid_len, req->id, DASH_EVERSION,
                              "protocol version %u is not supported; this daemon speaks version %u",
                              h->protocol_version, WIRE_PROTOCOL_VERSION);
        return;
    }
    if (h->has_rank != h->has_world_size ||
        (h->has_world_size && (h->world_size == 0 || h->rank >= h->world_size))) {
        dispatch__reply_error(d, m->rid, m->rid_len, req->id, DASH_EINVAL,
                              "Hello's rank and world_size go together, with rank < world_size "
                              "(got rank %s%u, world_size %s%u)", h->has_rank ? "" : "none/",
                              h->rank, h->has_world_size ? "" : "none/", h->world_size);
        return;
    }
    int created = !s;
    if (created) {
        char msg[MSG_MAX];
        struct lim_client *c = limits_client(d->limits, m->peer_uid, m->peer_pid);
        int rc = c ? limits_session_begin(c, msg, sizeof msg) : DASH_ENOMEM;
        if (rc) {
            if (c)
                log_info("Hello refused: %s", msg);
            limits_unref(c);
            dispatch__reply_error(d, m->rid, m->rid_len, req->id, rc, "%s",
                                  c ? msg : "out of memory");
            return;
        }
        rc = sess_create(d->sessions, m->rid, m->rid_len, &s);
        if (rc) {
            limits_session_end(c, 0, 0);
            limits_unref(c);
            dispatch__reply_error(d, m->rid, m->rid_len, req->id, rc, "cannot create a session");
            return;
        }
        s->client = c;
        s->requests = 1;
        if (d->srv) /* the connection's slot is the session cap's to count from now on */
            server_set_session(d->srv, m->rid, m->rid_len, 1);
        s->last_ns = uv_hrtime();
        s->peer_uid = m->peer_uid;
        s->peer_pid = m->peer_pid;
    }
    if (created || h->client_name)
        dispatch__copy_clean(s->name, sizeof s->name, h->client_name);
    if (created || h->run_tag)
        dispatch__copy_clean(s->run_tag, sizeof s->run_tag, h->run_tag);
    if (h->has_world_size) {
        s->rank = h->rank;
        s->world_size = h->world_size;
    }
    if (h->has_pid)
        s->pid = h->pid;
    else if (created && m->peer_pid >= 0)
        s->pid = (uint32_t)m->peer_pid;
    if (s->world_size)
        log_info("session %llu %s: client \"%s\" pid %u run \"%s\" rank %u of %u",
                 (unsigned long long)s->id, created ? "started" : "said hello again", s->name,
                 s->pid, s->run_tag, s->rank, s->world_size);
    else
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
    dispatch__send_reply(d, m->rid, m->rid_len, &r);
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

/* RegisterBuffer once counted against the client's caps: 0 (answered with the id), or
 * the code of a refusal already answered. */
static int register_buffer(struct dispatch *d, const struct server_msg *m,
                           const Dash__Request *req, struct session *s)
{
    const Dash__RegisterBuffer *rb = req->register_buffer;
    char msg[MSG_MAX];
    struct shmbuf *b;
    int rc;
    if (rb->has_cuda_ipc_handle) {
        rc = register_cuda(d, rb, msg, sizeof msg, &b);
        if (rc)
            log_info("session %llu: CUDA buffer refused: %s", (unsigned long long)s->id, msg);
    } else if (!rb->shm_name) {
        rc = DASH_EINVAL;
        snprintf(msg, sizeof msg, "RegisterBuffer needs shm_name or cuda_ipc_handle");
    } else if (!(d->backend->buffer_kinds & (1u << SHMBUF_SHM))) {
        rc = DASH_ENOTSUP;
        snprintf(msg, sizeof msg,
                 "the %s backend computes on device memory only: register CUDA memory "
                 "(cuda_ipc_handle; dash_cuda_register), or run dashd --backend cpu for "
                 "shared memory",
                 d->backend->name);
    } else {
        /* A peer other than root may only map objects it owns: the daemon may be able to
         * open other users' memory, and must not lend that ability out. */
        int64_t owner = s->peer_uid > 0 ? s->peer_uid : -1;
        rc = shmbuf_open(rb->shm_name, rb->size, owner, msg, sizeof msg, &b);
    }
    if (rc) {
        dispatch__reply_error(d, m->rid, m->rid_len, req->id, rc, "%s", msg);
        return rc;
    }
    uint64_t id;
    rc = sess_buf_add(d->sessions, s, b, d->cfg.max_buffers, &id);
    if (rc) {
        shmbuf_unref(b);
        dispatch__reply_error(d, m->rid, m->rid_len, req->id, rc,
                              rc == DASH_ENOSPC ? "a session may hold at most %u buffers"
                                                : "out of memory (%u buffers)",
                              d->cfg.max_buffers);
        return rc;
    }
    log_debug("session %llu registered buffer %llu (%llu bytes of %s)", (unsigned long long)s->id,
              (unsigned long long)id, (unsigned long long)rb->size,
              shmbuf_kind_name(shmbuf_kind(b)));
    Dash__Reply r = DASH__REPLY__INIT;
    r.id = req->id;
    r.has_buffer_id = 1;
    r.buffer_id = id;
    dispatch__send_reply(d, m->rid, m->rid_len, &r);
    return 0;
}

static void on_register(struct dispatch *d, const struct server_msg *m, const Dash__Request *req,
                        struct session *s)
{
    const Dash__RegisterBuffer *rb = req->register_buffer;
    char msg[MSG_MAX];
    int rc;
    if (rb->has_cuda_ipc_handle && rb->shm_name) {
        dispatch__reply_error(d, m->rid, m->rid_len, req->id, DASH_EINVAL,
                              "RegisterBuffer names both shm_name and cuda_ipc_handle: set one");
        return;
    }
    /* Counted before anything is opened or mapped: a client over its caps maps nothing
     * (mappings are a resource of the whole daemon: vm.max_map_count). */
    if ((rc = limits_buffer_begin(s->client, rb->size, msg, sizeof msg)) != 0) {
        log_info("session %llu: buffer refused: %s", (unsigned long long)s->id, msg);
        dispatch__reply_error(d, m->rid, m->rid_len, req->id, rc, "%s", msg);
        return;
    }
    /* The reply may end the connection, and with it s (its write fails: the peer is
     * gone), so the count is given back through a reference of our own. */
    struct lim_client *c = s->client;
    limits_ref(c);
    if (register_buffer(d, m, req, s) != 0)
        limits_buffer_end(c, rb->size);
    limits_unref(c);
}

static void on_unregister(struct dispatch *d, const struct server_msg *m,
                          const Dash__Request *req, struct session *s)
{
    uint64_t id = req->unregister_buffer->buffer_id;
    if (sess_buf_remove(s, id) != 0) {
        dispatch__reply_error(d, m->rid, m->rid_len, req->id, DASH_ENOBUF,
                              "buffer %llu is not registered in this session",
                              (unsigned long long)id);
        return;
    }
    log_debug("session %llu unregistered buffer %llu", (unsigned long long)s->id,
              (unsigned long long)id);
    Dash__Reply r = DASH__REPLY__INIT;
    r.id = req->id;
    dispatch__send_reply(d, m->rid, m->rid_len, &r);
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
        dispatch__reply_error(
            d, m->rid, m->rid_len, req->id, DASH_ENOTSUP,
            "interprocess events need the CUDA backend; this daemon runs the %s backend", b->name);
        return;
    }
    uint32_t have = s->events ? evring_count(s->events) : 0;
    if (re->n_handles == 0 || re->n_handles > EVRING_MAX - have) {
        dispatch__reply_error(
            d, m->rid, m->rid_len, req->id, re->n_handles ? DASH_ENOSPC : DASH_EINVAL,
            "RegisterEvents with %zu handles: a session holds 1 to %d events and has %u",
            re->n_handles, EVRING_MAX, have);
        return;
    }
    if (!s->events && !(s->events = evring_new(close_event, b))) {
        dispatch__reply_error(d, m->rid, m->rid_len, req->id, DASH_ENOMEM, "out of memory");
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
        dispatch__reply_error(d, m->rid, m->rid_len, req->id, rc, "%s", msg);
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
    dispatch__send_reply(d, m->rid, m->rid_len, &r);
}

/* ---- Stats, Ping ------------------------------------------------------------------------- */

static int cmp_session_id(const void *a, const void *b)
{
    const struct session *x = *(struct session *const *)a, *y = *(struct session *const *)b;
    return (x->id > y->id) - (x->id < y->id);
}

/* The StatsReply of this moment (sessions in id order); the arrays it points into are b's.
 * Sessions are listed for `asker_uid` alone: root (0) sees all, another user only their
 * own, an asker without credentials (-1, tcp://) none; all of them are counted in
 * `sessions`. 0, or DASH_ENOMEM. `dashctl stats` and the metrics endpoint (as root: the
 * operator's) both read it. */
struct stats_arrays {
    struct session **ss;
    Dash__ClientStats *cs;
    Dash__ClientStats **cps;
};

static void stats_arrays_free(struct stats_arrays *b)
{
    free(b->cps);
    free(b->cs);
    free(b->ss);
}

static int build_stats(struct dispatch *d, int64_t asker_uid, Dash__StatsReply *st,
                       struct stats_arrays *b)
{
    uint32_t n = sess_count(d->sessions);
    b->ss = calloc(n ? n : 1, sizeof *b->ss);
    b->cs = calloc(n ? n : 1, sizeof *b->cs);
    b->cps = calloc(n ? n : 1, sizeof *b->cps);
    if (!b->ss || !b->cs || !b->cps) {
        stats_arrays_free(b);
        return DASH_ENOMEM;
    }
    /* Who is connected, under which name and run, is for root and for the same user only:
     * another user's sessions are counted (sessions) but not listed, not even by id. An
     * asker without credentials (tcp://) sees none. */
    uint32_t i = 0, listed = 0;
    for (struct session *s = sess_first(d->sessions); s; s = sess_next(s))
        if (asker_uid == 0 || (asker_uid > 0 && s->peer_uid == asker_uid))
            b->ss[listed++] = s;
    qsort(b->ss, listed, sizeof *b->ss, cmp_session_id);
    for (i = 0; i < listed; i++) {
        const struct session *s = b->ss[i];
        Dash__ClientStats *c = &b->cs[i];
        dash__client_stats__init(c);
        c->has_session_id = c->has_pid = c->has_requests = c->has_errors = 1;
        c->has_forwards = c->has_backwards = c->has_bytes_registered = c->has_buffers = 1;
        c->has_latency_p50_us = c->has_latency_p99_us = c->has_in_flight = 1;
        c->session_id = s->id;
        c->client_name = (char *)s->name;
        c->pid = s->pid;
        c->run_tag = (char *)s->run_tag;
        c->has_rank = c->has_world_size = s->world_size > 0;
        c->rank = s->rank;
        c->world_size = s->world_size;
        c->requests = s->requests;
        c->errors = s->errors;
        c->forwards = s->forwards;
        c->backwards = s->backwards;
        c->bytes_registered = s->bytes_registered;
        c->buffers = (uint32_t)s->n_bufs;
        c->latency_p50_us = sess_latency_pct(s, 50);
        c->latency_p99_us = sess_latency_pct(s, 99);
        c->in_flight = s->in_flight;
        b->cps[i] = c;
    }
    dash__stats_reply__init(st);
    st->server_version = DASHD_VERSION;
    st->backend = (char *)d->backend->name;
    st->has_uptime_ms = st->has_queue_depth = st->has_queue_capacity = 1;
    st->has_requests = st->has_errors = st->has_threads = 1;
    st->uptime_ms = (uv_hrtime() - d->start_ns) / 1000000;
    st->queue_depth = queue_depth(d->queue);
    st->queue_capacity = queue_capacity(d->queue);
    st->requests = metrics_requests(&d->metrics);
    st->errors = metrics_errors(&d->metrics);
    st->threads = (uint32_t)d->backend->threads(d->backend->impl);
    st->n_clients = listed;
    st->clients = b->cps;
    st->has_sessions = 1;
    st->sessions = (uint32_t)n;
    st->gpu_sharing = (char *)d->backend->gpu_sharing; /* NULL: absent */
    if (d->cfg.audit) {
        struct audit_stats as;
        audit_get_stats(d->cfg.audit, &as);
        st->audit_path = (char *)audit_path(d->cfg.audit);
        st->audit_level = (char *)audit_level_name(audit_level(d->cfg.audit));
        st->has_audit_written = st->has_audit_dropped = st->has_audit_write_errors = 1;
        st->audit_written = as.written;
        st->audit_dropped = as.dropped;
        st->audit_write_errors = as.write_errors;
    }
    return 0;
}

static void on_stats(struct dispatch *d, const struct server_msg *m, const Dash__Request *req)
{
    Dash__StatsReply st;
    struct stats_arrays b = {0};
    if (build_stats(d, m->peer_uid, &st, &b) != 0) {
        dispatch__reply_error(d, m->rid, m->rid_len, req->id, DASH_ENOMEM, "out of memory");
        return;
    }
    Dash__Reply r = DASH__REPLY__INIT;
    r.id = req->id;
    r.stats = &st;
    /* Hundreds of sessions could outgrow one message: list the oldest ones that fit
     * (leaving room for the session id dispatch__send_reply adds). */
    while (st.n_clients > 0 &&
           protobuf_c_message_get_packed_size(&r.base) + 16 > (size_t)WIRE_MAX_MESSAGE)
        st.n_clients = st.n_clients * 3 / 4;
    dispatch__send_reply(d, m->rid, m->rid_len, &r);
    stats_arrays_free(&b);
}

int dispatch_collect(void *ctx, struct metrics *ret_m, void **ret_stats, size_t *ret_len)
{
    struct dispatch *d = ctx;
    Dash__StatsReply st;
    struct stats_arrays b = {0};
    if (build_stats(d, 0, &st, &b) != 0)
        return DASH_ENOMEM;
    size_t len = protobuf_c_message_get_packed_size(&st.base);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) {
        stats_arrays_free(&b);
        return DASH_ENOMEM;
    }
    (void)protobuf_c_message_pack(&st.base, buf);
    stats_arrays_free(&b);
    *ret_m = d->metrics;
    *ret_stats = buf;
    *ret_len = len;
    return 0;
}

static void on_ping(struct dispatch *d, const struct server_msg *m, const Dash__Request *req)
{
    Dash__Reply r = DASH__REPLY__INIT;
    r.id = req->id;
    r.has_ping_payload = req->ping->has_payload;
    r.ping_payload = req->ping->payload;
    dispatch__send_reply(d, m->rid, m->rid_len, &r);
}

/* ---- the entry point ---------------------------------------------------------------------- */

void dispatch_on_message(void *ctx, const struct server_msg *m)
{
    struct dispatch *d = ctx;
    struct session *s = sess_find(d->sessions, m->rid, m->rid_len);
    if (s) {
        s->requests++;
        s->last_ns = uv_hrtime();
        log_context_set(s->id, s->name, s->run_tag);
    }
    if (m->multipart) {
        metrics_count_request(&d->metrics, METRICS_OP_MALFORMED);
        /* The server disconnects the peer after this reply: nothing of the message is kept. */
        dispatch__reply_error(
            d, m->rid, m->rid_len, wire_peek_id(m->data, m->len), DASH_EMALFORMED,
            "a message of more than one frame: dashd's protocol has one frame per "
            "message; disconnecting");
        log_context_clear();
        return;
    }
    Dash__Request *req = wire_decode_request(m->data, m->len, WIRE_DECODE_BUDGET);
    metrics_count_request(&d->metrics, req ? metrics_op_of(req) : METRICS_OP_MALFORMED);
    if (!req) {
        /* echo the id when the message at least starts with it, so the client knows which
         * of its requests this is */
        dispatch__reply_error(d, m->rid, m->rid_len, wire_peek_id(m->data, m->len), DASH_EMALFORMED,
                              "%zu bytes that do not decode as a dash.Request", m->len);
        log_context_clear();
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
        dispatch__send_reply(d, m->rid, m->rid_len, &r);
        /* look again: the send may already have dropped it (peer gone) */
        struct session *gone = sess_find(d->sessions, m->rid, m->rid_len);
        if (gone) {
            log_info("session %llu (\"%s\") said goodbye", (unsigned long long)gone->id,
                     gone->name);
            if (d->srv)
                server_set_session(d->srv, gone->rid, gone->rid_len, 0);
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
            dispatch__release_signals(d, s, req);
            dispatch__reply_error(d, m->rid, m->rid_len, id, DASH_ECANCELED,
                                  "dashd is shutting down");
            break;
        }
        if (req->body_case == DASH__REQUEST__BODY_HELLO) {
            on_hello(d, m, req, s);
            break;
        }
        if (!s) {
            dispatch__reply_error(d, m->rid, m->rid_len, id, DASH_ENOSESSION,
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
            dispatch__on_op(d, m, req, s, req->body_case == DASH__REQUEST__BODY_BACKWARD);
        break;
    default:
        dispatch__reply_error(d, m->rid, m->rid_len, id, DASH_EPROTO,
                              "the request has no body this daemon knows (a newer client?)");
        break;
    }
    wire_free_request(req);
    log_context_clear();
}

/* ---- lifetime ----------------------------------------------------------------------------- */

static void on_sweep(uv_timer_t *t)
{
    struct dispatch *d = t->data;
    uint64_t now = uv_hrtime(), limit = (uint64_t)d->cfg.session_timeout_ms * 1000000;
    sess_reclaim_poll(d->sessions, now);
    const uint64_t rescued = atomic_load(&d->backend->rescued);
    if (rescued != d->rescued_seen) {
        log_warn("%llu op(s) of client processes that died before their streams reached them: "
                 "dashd wrote their ready signals itself, so the GPU went on to the other "
                 "clients' ops (%llu so far)", (unsigned long long)(rescued - d->rescued_seen),
                 (unsigned long long)rescued);
        d->rescued_seen = rescued;
    }
    struct session *next;
    for (struct session *s = sess_first(d->sessions); s; s = next) {
        next = sess_next(s);
        if (s->in_flight == 0 && now - s->last_ns > limit) {
            log_info("session %llu (\"%s\") expired after %.1f s idle", (unsigned long long)s->id,
                     s->name, (double)(now - s->last_ns) / 1e9);
            if (d->srv) /* the connection stays, without a session */
                server_set_session(d->srv, s->rid, s->rid_len, 0);
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
    d->limits = limits_new(&cfg->limits);
    if (!d->limits)
        goto free_d;
    d->sessions = sess_table_new();
    if (!d->sessions)
        goto free_limits;
    d->runner = job_runner_new(b, cfg->scratch_max);
    if (!d->runner)
        goto free_sessions;
    d->queue = queue_new(loop, cfg->queue_capacity, dispatch__run_job, dispatch__job_early,
                         dispatch__job_done, d);
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
free_limits:
    limits_free(d->limits);
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
    dispatch__check_idle(d);
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
    limits_free(d->limits);
    job_runner_free(d->runner);
    free(d);
}

void dispatch_set_audit(struct dispatch *d, struct audit *a)
{
    d->cfg.audit = a;
}

void dispatch_set_limits(struct dispatch *d, const struct limits_config *cfg)
{
    d->cfg.limits = *cfg;
    limits_set(d->limits, cfg);
}
