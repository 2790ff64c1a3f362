// SPDX-License-Identifier: BSD-3-Clause
/*
 * dispatch_op.c - Forward and Backward: validated on the loop thread (buffers, kinds,
 * event and signal syncs), queued, run by the worker (job.c), answered, audited. The rest
 * of the protocol is dispatch.c's; dispatch_int.h is what the two share.
 */
#include "dispatch_int.h"

#include "audit.h"
#include "guard.h"
#include "job.h"
#include "log.h"
#include "queue.h"
#include "session.h"
#include "shmbuf.h"
#include "validate.h"

#include "kernels/digest/digest.h"
#include "proto/errors.h"
#include "proto/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

_Static_assert(SHMBUF_OBJECT_DEVICE == VAL_OBJECT_DEVICE, "one name for device memory");

static int lookup_size(void *ctx, uint64_t id, struct val_buffer *ret)
{
    struct shmbuf *b = sess_buf_find(ctx, id);
    if (!b)
        return DASH_ENOBUF;
    ret->size = shmbuf_size(b);
    shmbuf_object(b, ret->object, &ret->base);
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

struct copy_in {
    const unsigned char *from;
    int32_t *to;
    size_t bytes;
};

static void copy_in_fn(void *arg)
{
    const struct copy_in *c = arg;
    memcpy(c->to, c->from, c->bytes);
}

/* A packed batch: copy its offsets out of the client's shared memory (under the SIGBUS
 * guard), or from the request when sent by value, into the job, and check their values -
 * before any tensor is touched. 0, or a
 * DASH_* code with a reason: DASH_EINVAL (offsets not in shared memory), DASH_EBUFGONE,
 * DASH_ENOMEM, DASH_ESHAPE (values: attn_explain_problem's words). */
static int read_offsets(struct session *s, struct job *j, char *msg, size_t msglen)
{
    struct val_plan *p = &j->plan;
    if (!p->varlen)
        return 0;
    const size_t n = (size_t)p->cu[VAL_CU_Q].shape[0];
    if (!(j->cu_seqlens = malloc(2 * n * sizeof(int32_t)))) {
        snprintf(msg, msglen, "out of memory for %zu offsets", 2 * n);
        return DASH_ENOMEM;
    }
    static const char *const names[2] = {"cu_seqlens_q", "cu_seqlens_k"};
    for (int side = 0; side < 2; side++) {
        const struct val_tensor *t = &p->cu[side];
        if (p->cu_values[side]) { /* sent by value: in the request, which goes after this */
            memcpy(j->cu_seqlens + (size_t)side * n, p->cu_values[side], n * sizeof(int32_t));
            p->cu_values[side] = NULL;
            continue;
        }
        struct shmbuf *b = sess_buf_find(s, t->buffer_id);
        if (shmbuf_kind(b) != SHMBUF_SHM) {
            snprintf(msg, msglen, "%s: buffer %llu is %s; offsets must be in shared memory",
                     names[side], (unsigned long long)t->buffer_id, shmbuf_kind_name(shmbuf_kind(b)));
            return DASH_EINVAL;
        }
        struct copy_in c = {shmbuf_data(b) + t->offset, j->cu_seqlens + (size_t)side * n,
                            n * sizeof(int32_t)};
        if (guard_call(copy_in_fn, &c) != 0) {
            snprintf(msg, msglen, "%s: buffer %llu lost memory while being read (shrunk?)",
                     names[side], (unsigned long long)t->buffer_id);
            return DASH_EBUFGONE;
        }
    }
    p->prob.cu_seqlens_q = j->cu_seqlens;
    p->prob.cu_seqlens_k = j->cu_seqlens + n;
    char why[200];
    if (attn_explain_problem(&p->prob, why, sizeof why) != 0) {
        snprintf(msg, msglen, "%s", why);
        return DASH_ESHAPE;
    }
    /* max_seqlen is a bound (flash-attn's): from here on the longest sequences' lengths, so
     * that a loose one (the token count, INT32_MAX) is served as the exact one is - the
     * engines size their tiles, indices and scratch by it. It stays >= 1 (all lengths 0). */
    for (int side = 0; side < 2; side++) {
        const int32_t *cu = j->cu_seqlens + (size_t)side * n;
        int32_t longest = 1;
        for (size_t b = 0; b + 1 < n; b++)
            longest = cu[b + 1] - cu[b] > longest ? cu[b + 1] - cu[b] : longest;
        *(side ? &p->prob.seqlen_k : &p->prob.seqlen_q) = longest;
    }
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
 * job is to take a reference; *ret_fail NULL when the client named no fail word), or a
 * code with the reason. */
static int check_signals(const struct session *s, const Dash__EventSync *sync, char *msg,
                         size_t msglen, struct shmbuf **ret_buf, uint64_t **ret_ready,
                         uint64_t **ret_done, uint64_t **ret_fail)
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
    const uint64_t f = sync->fail_offset;
    if (sync->has_fail_offset && (f % 8 != 0 || f > size - 8 || f == r || f == dn)) {
        snprintf(msg, msglen, "the fail word (at %llu) must be an 8-byte aligned word inside "
                 "the signal buffer of %llu bytes, apart from ready (%llu) and done (%llu)",
                 (unsigned long long)f, (unsigned long long)size, (unsigned long long)r,
                 (unsigned long long)dn);
        return DASH_EINVAL;
    }
    *ret_buf = b;
    *ret_ready = (uint64_t *)(void *)(shmbuf_data(b) + r);
    *ret_done = (uint64_t *)(void *)(shmbuf_data(b) + dn);
    *ret_fail = sync->has_fail_offset ? (uint64_t *)(void *)(shmbuf_data(b) + f) : NULL;
    return 0;
}

/* An op that will not run: write its fail word (the client poisons the outputs and
 * releases its stream), or its done word when it names none, if it names valid
 * semaphores. */
void dispatch__release_signals(struct dispatch *d, const struct session *s,
                                         const Dash__Request *req)
          {
    char msg[MSG_MAX];
    struct shmbuf *b;
    uint64_t *ready, *done, *fail;
    if (s && req->sync && req->sync->has_signal_buffer && d->backend->signal_release &&
        check_signals(s, req->sync, msg, sizeof msg, &b, &ready, &done, &fail) == 0)
        (void)d->backend->signal_release(d->backend->impl, fail ? fail : done,
                                         req->sync->signal_seq);
}

/* What limits.h calls a request's size: the dense bytes of every tensor it names. */
static uint64_t plan_tensor_bytes(const struct val_plan *p)
{
    uint64_t sum = 0;
    for (int slot = 0; slot < p->slots; slot++) {
        uint64_t n = val_dense_bytes(&p->t[slot]);
        if (n > UINT64_MAX - sum)
            return UINT64_MAX;
        sum += n;
    }
    return sum;
}

void dispatch__on_op(struct dispatch *d, const struct server_msg *m, const Dash__Request *req,
                               struct session *s, int backward)
          {
    const Dash__EventSync *sync = req->sync;
    const int want_sync = sync && (sync->has_wait_event || sync->has_record_event ||
                                   (sync->has_reply_when_queued && sync->reply_when_queued));
    const int want_signals = sync && (sync->has_signal_buffer || sync->has_ready_offset ||
                                      sync->has_done_offset || sync->has_signal_seq);
    if ((want_sync && !d->backend->events_open) ||
        (want_signals && !d->backend->signal_release)) {
        dispatch__reply_error(
            d, m->rid, m->rid_len, req->id, DASH_ENOTSUP,
            "%s sync needs the CUDA backend%s; this daemon runs the %s backend (its "
            "replies come after the outputs are written)",
            want_signals ? "signal" : "event",
            want_signals ? " on a GPU with 64-bit stream memory operations" : "", d->backend->name);
        return;
    }
    char msg[MSG_MAX];
    /* Semaphores first: once they are known, every way this op ends writes its done word,
     * so the client's stream that waits for it goes on. */
    struct shmbuf *sig_buf = NULL;
    uint64_t *sig_ready = NULL, *sig_done = NULL, *sig_fail = NULL;
    int rc = want_signals ? check_signals(s, sync, msg, sizeof msg, &sig_buf, &sig_ready,
                                          &sig_done, &sig_fail) : 0;
    if (rc) {
        dispatch__reply_error(d, m->rid, m->rid_len, req->id, rc, "%s", msg);
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
        rc = read_offsets(s, j, msg, sizeof msg);
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
    if (!rc)
        rc = limits_op_begin(s->client, plan_tensor_bytes(&j->plan), msg, sizeof msg);
    if (rc)
        goto refuse;
    j->client = s->client;
    limits_ref(j->client);
    j->item.flow = j->client->key;
    if (sig_done) {
        j->signal_buf = sig_buf;
        shmbuf_ref(sig_buf);
        j->signal_ready = sig_ready;
        j->signal_done = sig_done;
        j->signal_fail = sig_fail;
        j->signal_seq = sync->signal_seq;
    }
    memcpy(j->rid, m->rid, m->rid_len);
    j->rid_len = m->rid_len;
    j->request_id = req->id;
    j->session_id = s->id;
    j->received_ns = uv_hrtime();
    j->arrived_ns = m->arrived_ns;
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
        j->rank = s->rank;
        j->world_size = s->world_size;
        if (req->audit) {
            j->has_step = req->audit->has_step;
            j->step = req->audit->step;
            dispatch__copy_clean(j->label, sizeof j->label, req->audit->label);
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
        limits_op_end(j->client);
        limits_unref(j->client);
        free(j->cu_seqlens);
        free(j);
        dispatch__reply_error(d, m->rid, m->rid_len, req->id, DASH_EBUSY,
                              "the queue is full (%u requests waiting or running)",
                              queue_capacity(d->queue));
        return;
    }
    s->in_flight++;
    d->in_flight++;
    return;

refuse:
    if (j)
        free(j->cu_seqlens);
    free(j);
    /* The client's stream waits for this op: let it go on - through the client's poison
     * of the outputs when it named a fail word (nothing of this op was queued). */
    if (sig_done)
        (void)d->backend->signal_release(d->backend->impl, sig_fail ? sig_fail : sig_done,
                                         sync->signal_seq);
    dispatch__reply_error(d, m->rid, m->rid_len, req->id, rc, "%s", msg);
}

/* sched.h numbers the kinds as the wire does (validate.c asserts it). Backends never
 * report AUTO (backend.h). */
static Dash__Schedule proto_schedule(enum sched_kind k)
{
    return (Dash__Schedule)k;
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

int dispatch__run_job(void *ctx, struct queue_item *it)
{
    struct job *j = (struct job *)it;
    struct dispatch *d = ctx;
    if (j->reply_when_queued)
        queue_expect_early(j->queue, it);
    j->rc = 0;
    /* A signal-ordered op has no early reply to time it by: what its debug line needs is
     * copied now, as j may complete (and be freed) as soon as it is on the device. */
    const int trace = j->signal_done && log_enabled(LOG_DEBUG);
    const unsigned long long id = j->request_id, sid = j->session_id;
    const uint64_t arrived = j->arrived_ns, received = j->received_ns, pushed = j->pushed_ns;
    const int backward = j->plan.backward;
    /* read now too: once queued, a signal-ordered op (no early reply) may complete and be
     * freed by the loop before job_run returns */
    const int early = j->reply_when_queued;
    const uint64_t started = trace ? uv_hrtime() : 0;
    if (job_run(d->runner, j, job_gpu_done, j) != BACKEND_QUEUED)
        return QUEUE_DONE;
    /* From here on j may complete at any moment: touch it no more, except to announce (an
     * op with an early reply is not finished before queue_early: queue_expect_early). */
    if (early) {
        j->launched_ns = uv_hrtime(); /* the completion reads no field written here */
        queue_early(j->queue, it);
    }
    if (trace) {
        const uint64_t launched = uv_hrtime();
        log_debug("request %llu of session %llu: %s launched (signal-ordered), arrived at %llu "
                  "ns (monotonic); us from then: job made %llu, queued %llu, worker started "
                  "%llu, on the device %llu", id, sid, backward ? "backward" : "forward",
                  (unsigned long long)arrived, (unsigned long long)(received - arrived) / 1000,
                  (unsigned long long)(pushed - arrived) / 1000,
                  (unsigned long long)(started - arrived) / 1000,
                  (unsigned long long)(launched - arrived) / 1000);
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

/* The op is queued on the device (reply_when_queued): answer now, finish in dispatch__job_done. */
void dispatch__job_early(void *ctx, struct queue_item *it)
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
    dispatch__send_reply(d, j->rid, j->rid_len, &r);
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
    r.has_peer_pid = j->peer_pid >= 0;
    r.peer_pid = j->peer_pid;
    r.client_name = (char *)j->client_name;
    r.run_tag = (char *)j->run_tag;
    r.has_rank = r.has_world_size = j->world_size > 0;
    r.rank = j->rank;
    r.world_size = j->world_size;
    r.has_step = j->has_step;
    r.step = j->step;
    r.label = (char *)j->label;
    r.request_id = j->request_id;
    r.op = p->backward ? "backward" : "forward";
    r.has_dtype = r.has_mask = r.has_scale = 1;
    r.dtype = p->prob.dtype == DTYPE_F32   ? DASH__DTYPE__F32
              : p->prob.dtype == DTYPE_F16 ? DASH__DTYPE__F16
              : p->prob.dtype == DTYPE_F64 ? DASH__DTYPE__F64
                                           : DASH__DTYPE__BF16;
    r.mask = p->prob.mask == SCHED_MASK_CAUSAL ? DASH__MASK__CAUSAL : DASH__MASK__FULL;
    r.scale = p->prob.scale;
    if (p->prob.window) {
        r.has_window_left = r.has_window_right = 1;
        r.window_left = p->prob.window_left;
        r.window_right = p->prob.window_right;
    }
    r.has_softcap = p->prob.softcap != 0;
    r.softcap = p->prob.softcap;
    r.has_batch_invariant = p->cfg.batch_invariant != 0;
    r.batch_invariant = p->cfg.batch_invariant != 0;
    if (p->varlen && j->cu_seqlens) {
        const size_t n = (size_t)p->prob.batch + 1;
        r.has_varlen_batch = r.has_max_seqlen_q = r.has_max_seqlen_k = 1;
        r.varlen_batch = (uint32_t)p->prob.batch;
        r.max_seqlen_q = p->max_seqlen[VAL_CU_Q];
        r.max_seqlen_k = p->max_seqlen[VAL_CU_K];
        r.has_cu_seqlens_q_digest = r.has_cu_seqlens_k_digest = 1;
        r.cu_seqlens_q_digest = digest_bytes(j->cu_seqlens, n * sizeof(int32_t));
        r.cu_seqlens_k_digest = digest_bytes(j->cu_seqlens + n, n * sizeof(int32_t));
    }
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

/* Tests only (DASHD_TEST_EXIT_BEFORE_REPLY=N in dashd's environment): whether this, the
 * Nth stream-ordered op to succeed, is to make dashd exit before its reply goes out - its
 * done word written, as when a daemon dies between the two. Loop thread. */
static int test_exit_before_reply(void)
{
    static long long at = -1, seen;
    if (at < 0) {
        const char *v = getenv("DASHD_TEST_EXIT_BEFORE_REPLY");
        at = v ? atoll(v) : 0;
    }
    return at > 0 && ++seen == at;
}

void dispatch__job_done(void *ctx, struct queue_item *it)
{
    struct dispatch *d = ctx;
    struct job *j = (struct job *)it;
    uint64_t now = uv_hrtime();
    d->in_flight--;
    if (j->device_op && j->rc == 0)
        job_device_digests(j);
    /* only an op that arrived while auditing was on (SIGHUP may have switched it on) */
    if (d->cfg.audit && j->wall_unix_ns)
        audit_job(d, j, now);
    struct session *s = job_session(d, j);
    /* the latency the client saw: to the "queued" reply if it had one, else to this one */
    uint64_t answered = j->replied ? j->launched_ns : now;
    metrics_count_op(&d->metrics, j->plan.backward, answered - j->received_ns,
                     j->started_ns ? j->started_ns - j->received_ns : 0,
                     j->run_ns ? j->run_ns : j->finished_ns - j->started_ns,
                     strcmp(d->backend->name, "cuda") == 0);
    if (s) {
        log_context_set(s->id, s->name, s->run_tag);
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
        if (j->rc == 0 && j->signal_done && test_exit_before_reply()) {
            log_warn("DASHD_TEST_EXIT_BEFORE_REPLY: exiting before the reply of request %llu",
                     (unsigned long long)j->request_id);
            _exit(70);
        }
        dispatch__send_reply(d, j->rid, j->rid_len, &r);
    }
    for (int slot = 0; slot < j->plan.slots; slot++)
        shmbuf_unref(j->buf[slot]);
    shmbuf_unref(j->signal_buf);
    evring_unref(j->events);
    limits_op_end(j->client);
    limits_unref(j->client);
    free(j->cu_seqlens);
    free(j);
    log_context_clear();
    dispatch__check_idle(d);
}
