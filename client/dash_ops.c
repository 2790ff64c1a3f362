// SPDX-License-Identifier: BSD-3-Clause
/*
 * dash_ops.c - forward and backward: tensor helpers, argument checks, the Forward/Backward
 * messages, and tickets.
 *
 * An op is a struct dash__req holding copies of its parameters and tensors (tensors keep
 * their struct dash_buffer pointers, not the daemon's ids), so that the message can be
 * built again with new ids whenever the session is restored. Its ticket is a key of
 * c->by_ticket until the caller has taken the result. While an op is unfinished each of its
 * tensors counts as a user of its buffer, which keeps dash_shm_free() from pulling the
 * memory away underneath a resend.
 */
#include "client/dash_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tensors -------------------------------------------------------------------------- */

size_t dash_dtype_size(enum dash_dtype t)
{
    switch (t) {
    case DASH_F32:
        return 4;
    case DASH_F16:
    case DASH_BF16:
        return 2;
    case DASH_F64:
        return 8;
    }
    return 0;
}

struct dash_tensor dash_tensor_dense(struct dash_buffer *b, uint64_t offset, int64_t batch,
                                     int64_t seqlen, int64_t heads, int64_t head_dim)
{
    struct dash_tensor t = {.buf = b, .offset = offset, .ndim = 4};
    t.shape[0] = batch;
    t.shape[1] = seqlen;
    t.shape[2] = heads;
    t.shape[3] = head_dim;
    t.strides[3] = 1;
    t.strides[2] = head_dim;
    t.strides[1] = heads * head_dim;
    t.strides[0] = seqlen * heads * head_dim;
    return t;
}

struct dash_tensor dash_tensor_lse(struct dash_buffer *b, uint64_t offset, int64_t batch,
                                   int64_t heads_q, int64_t seqlen_q)
{
    struct dash_tensor t = {.buf = b, .offset = offset, .ndim = 3};
    t.shape[0] = batch;
    t.shape[1] = heads_q;
    t.shape[2] = seqlen_q;
    t.strides[2] = 1;
    t.strides[1] = seqlen_q;
    t.strides[0] = heads_q * seqlen_q;
    return t;
}

/* Whether t's strides say nothing a dense layout would not: all zero, or exactly the dense
 * row-major strides. Such tensors go on the wire without strides. */
static int strides_are_dense(const struct dash_tensor *t)
{
    int zero = 1;
    for (int32_t i = 0; i < t->ndim; i++)
        zero &= t->strides[i] == 0;
    if (zero)
        return 1;
    int64_t expect = 1;
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
        if (t->strides[i] != expect)
            return 0;
        /* wrapping is harmless here: a wrapped product only makes us send the strides */
        expect = (int64_t)((uint64_t)expect * (uint64_t)t->shape[i]);
    }
    return 1;
}

/* ---- checks --------------------------------------------------------------------------- */

/* What the library can tell is wrong without the daemon; the daemon checks the rest
 * (shapes agreeing, bounds, head dims...). */
static int check_attn(const struct dash_attn *a, char *why, size_t len)
{
    if ((unsigned)a->dtype > DASH_F64 || (unsigned)a->mask > DASH_MASK_CAUSAL ||
        (unsigned)a->schedule > DASH_SCHED_SHIFT || !(a->scale >= 0.0f) || isinf(a->scale) ||
        a->wave < 0 || a->block_m < 0 || a->block_n < 0) { /* NaN fails the comparison */
        snprintf(why, len, "bad attention parameters (dtype, mask, schedule, scale, wave or "
                 "block sizes out of range)");
        return DASH_EINVAL;
    }
    if (a->window && (a->window_left < -1 || a->window_right < -1)) {
        snprintf(why, len, "window (%d, %d): each side must be >= 0, or -1 for unbounded",
                 a->window_left, a->window_right);
        return DASH_EINVAL;
    }
    if (!(a->softcap >= 0.0f) || isinf(a->softcap)) {
        snprintf(why, len, "softcap %g must be finite and >= 0 (0: off)", (double)a->softcap);
        return DASH_EINVAL;
    }
    if (a->cu_seqlens_q.buf && a->n_offsets) {
        snprintf(why, len, "the offsets are given both in buffers (cu_seqlens_q/k) and by value "
                 "(offsets_q/k); give them one way");
        return DASH_EINVAL;
    }
    if (!a->cu_seqlens_q.buf && a->n_offsets &&
        (a->n_offsets < 2 || a->n_offsets > (1 << 24) + 1 || !a->offsets_q || !a->offsets_k)) {
        snprintf(why, len, "offsets by value: n_offsets %d must be batch + 1 >= 2 (batch at most "
                 "2^24) with offsets_q and offsets_k set", a->n_offsets);
        return DASH_EINVAL;
    }
    if ((a->cu_seqlens_q.buf || a->n_offsets) && (a->max_seqlen_q < 1 || a->max_seqlen_k < 1)) {
        snprintf(why, len, "max_seqlen_q %d and max_seqlen_k %d must be >= 1 in a packed batch",
                 a->max_seqlen_q, a->max_seqlen_k);
        return DASH_EINVAL;
    }
    return 0;
}

static int check_tensor(const struct dash_client *c, const struct dash_tensor *t, int32_t ndim)
{
    if (!t || !t->buf || t->buf->owner != c || t->ndim != ndim)
        return DASH_EINVAL;
    return 0;
}

/* ---- messages ------------------------------------------------------------------------- */

/* The API's enums are the wire's, value for value: messages cast one into the other. */
_Static_assert((int)DASH_F32 == (int)DASH__DTYPE__F32 && (int)DASH_F16 == (int)DASH__DTYPE__F16 &&
                   (int)DASH_BF16 == (int)DASH__DTYPE__BF16 && (int)DASH_F64 == (int)DASH__DTYPE__F64,
               "enum dash_dtype is the wire's DType");
_Static_assert((int)DASH_MASK_FULL == (int)DASH__MASK__FULL && (int)DASH_MASK_CAUSAL == (int)DASH__MASK__CAUSAL,
               "enum dash_mask is the wire's Mask");
_Static_assert((int)DASH_SCHED_AUTO == (int)DASH__SCHEDULE__AUTO &&
                   (int)DASH_SCHED_ATOMIC == (int)DASH__SCHEDULE__ATOMIC &&
                   (int)DASH_SCHED_ASCENDING == (int)DASH__SCHEDULE__ASCENDING &&
                   (int)DASH_SCHED_DESCENDING == (int)DASH__SCHEDULE__DESCENDING &&
                   (int)DASH_SCHED_SPT == (int)DASH__SCHEDULE__SPT && (int)DASH_SCHED_SHIFT == (int)DASH__SCHEDULE__SHIFT,
               "enum dash_schedule is the wire's Schedule");

int dash__op_encode(const struct dash_client *c, struct dash__req *r, Dash__Request *m,
                    struct dash__op_storage *st)
{
    for (int i = 0; i < r->nt; i++) {
        const struct dash_buffer *b = r->t[i].buf;
        if (b->reg != DASH__REG_OK)
            return b->reg == DASH__REG_FAILED ? b->reg_code : DASH_ENOBUF;
    }
    if (r->signal_slot >= 0) {
        const struct dash__signals *g = c->signals;
        if (!g || g->buf->reg != DASH__REG_OK)
            return g && g->buf->reg == DASH__REG_FAILED ? g->buf->reg_code : DASH_ENOBUF;
        dash__event_sync__init(&st->sync);
        st->sync.has_signal_buffer = st->sync.has_ready_offset = 1;
        st->sync.has_done_offset = st->sync.has_signal_seq = 1;
        st->sync.signal_buffer = g->buf->id;
        st->sync.ready_offset = 8 * (uint64_t)r->signal_slot;
        st->sync.done_offset = 8 * (uint64_t)(DASH__SIGNAL_SLOTS + r->signal_slot);
        st->sync.signal_seq = r->signal_seq;
        st->sync.has_fail_offset = 1;
        st->sync.fail_offset = 8 * (uint64_t)(2 * DASH__SIGNAL_SLOTS + r->signal_slot);
        m->sync = &st->sync;
    } else if (r->wait_slot >= 0 || r->record_slot >= 0) {
        const struct dash__events *e = c->events;
        if (!e || e->reg != DASH__REG_OK)
            return e && e->reg == DASH__REG_FAILED ? e->reg_code : DASH_ENOENT;
        dash__event_sync__init(&st->sync);
        st->sync.has_wait_event = r->wait_slot >= 0;
        st->sync.wait_event = e->base + (uint32_t)(r->wait_slot >= 0 ? r->wait_slot : 0);
        st->sync.has_record_event = r->record_slot >= 0;
        st->sync.record_event = e->base + (uint32_t)(r->record_slot >= 0 ? r->record_slot : 0);
        st->sync.has_reply_when_queued = r->when_queued != 0;
        st->sync.reply_when_queued = r->when_queued != 0;
        m->sync = &st->sync;
    }
    if (r->audit_step >= 0 || r->audit_label[0]) {
        dash__audit_tag__init(&st->audit);
        st->audit.has_step = r->audit_step >= 0;
        st->audit.step = (uint64_t)(r->audit_step >= 0 ? r->audit_step : 0);
        st->audit.label = r->audit_label[0] ? r->audit_label : NULL;
        m->audit = &st->audit;
    }

    dash__attn_params__init(&st->params);
    st->params.dtype = (Dash__DType)r->attn.dtype;
    st->params.mask = (Dash__Mask)r->attn.mask;
    st->params.has_scale = r->attn.scale != 0.0f;
    st->params.scale = r->attn.scale;
    st->params.has_schedule = 1;
    st->params.schedule = (Dash__Schedule)r->attn.schedule;
    st->params.has_wave = r->attn.wave != 0;
    st->params.wave = r->attn.wave;
    st->params.has_block_m = r->attn.block_m != 0;
    st->params.block_m = r->attn.block_m;
    st->params.has_block_n = r->attn.block_n != 0;
    st->params.block_n = r->attn.block_n;
    if (r->attn.window) {
        st->params.has_window_left = st->params.has_window_right = 1;
        st->params.window_left = r->attn.window_left;
        st->params.window_right = r->attn.window_right;
    }
    st->params.has_softcap = r->attn.softcap != 0.0f;
    st->params.softcap = r->attn.softcap;
    st->params.has_batch_invariant = r->attn.batch_invariant != 0;
    st->params.batch_invariant = r->attn.batch_invariant != 0;

    for (int i = 0; i < r->nt; i++) {
        struct dash_tensor *t = &r->t[i];
        Dash__TensorRef *ref = &st->refs[i];
        dash__tensor_ref__init(ref);
        ref->buffer_id = t->buf->id;
        ref->offset = t->offset;
        ref->n_shape = (size_t)t->ndim;
        ref->shape = t->shape;
        if (!strides_are_dense(t)) {
            ref->n_strides = (size_t)t->ndim;
            ref->strides = t->strides;
        }
    }

    Dash__TensorRef *ref = st->refs;
    Dash__Varlen *varlen = NULL;
    if (r->attn.cu_seqlens_q.buf || r->offsets) {
        const int body = r->kind == DASH__FORWARD ? 5 : 9;
        varlen = &st->varlen;
        dash__varlen__init(varlen);
        if (r->offsets) { /* by value: the request's own copy */
            varlen->n_cu_seqlens_q_values = varlen->n_cu_seqlens_k_values =
                (size_t)r->attn.n_offsets;
            varlen->cu_seqlens_q_values = r->offsets;
            varlen->cu_seqlens_k_values = r->offsets + r->attn.n_offsets;
        } else { /* the offsets' tensors follow the op's */
            varlen->cu_seqlens_q = &ref[body];
            varlen->cu_seqlens_k = &ref[body + 1];
        }
        varlen->max_seqlen_q = r->attn.max_seqlen_q;
        varlen->max_seqlen_k = r->attn.max_seqlen_k;
    }
    if (r->kind == DASH__FORWARD) {
        dash__forward__init(&st->fwd);
        st->fwd.params = &st->params;
        st->fwd.q = &ref[0];
        st->fwd.k = &ref[1];
        st->fwd.v = &ref[2];
        st->fwd.out = &ref[3];
        st->fwd.lse = &ref[4];
        st->fwd.varlen = varlen;
        m->body_case = DASH__REQUEST__BODY_FORWARD;
        m->forward = &st->fwd;
    } else {
        dash__backward__init(&st->bwd);
        st->bwd.params = &st->params;
        st->bwd.q = &ref[0];
        st->bwd.k = &ref[1];
        st->bwd.v = &ref[2];
        st->bwd.out = &ref[3];
        st->bwd.lse = &ref[4];
        st->bwd.dout = &ref[5];
        st->bwd.dq = &ref[6];
        st->bwd.dk = &ref[7];
        st->bwd.dv = &ref[8];
        st->bwd.varlen = varlen;
        m->body_case = DASH__REQUEST__BODY_BACKWARD;
        m->backward = &st->bwd;
    }
    return 0;
}

void dash__signal_tell(struct dash_client *c, const struct dash__req *r)
{
    if (c->async_code || !r->code)
        return;
    c->async_code = r->code;
    snprintf(c->async_msg, sizeof c->async_msg, "an earlier stream-ordered %s failed: %.200s",
             r->kind == DASH__FORWARD ? "forward" : "backward", r->message);
}

void dash__op_finish(struct dash_client *c, struct dash__req *r, int code, const Dash__Reply *rep)
{
    if (r->state == DASH__DONE)
        return;
    if (!code) {
        const Dash__OpResult *op = rep ? rep->op : NULL;
        if (!op) {
            code = DASH_EPROTO;
        } else {
            r->result.schedule = (enum dash_schedule)op->schedule;
            r->result.wave = op->wave;
            r->result.block_m = op->block_m;
            r->result.block_n = op->block_n;
            r->result.queue_us = op->has_queue_us ? op->queue_us : 0;
            r->result.run_us = op->has_run_us ? op->run_us : 0;
            memset(r->result.backend, 0, sizeof r->result.backend);
            if (op->backend)
                strncpy(r->result.backend, op->backend, sizeof r->result.backend - 1);
        }
    }
    r->code = code;
    r->state = DASH__DONE;
    if (code) {
        const char *m = rep && rep->message && rep->message[0] ? rep->message : dash_strerror(code);
        snprintf(r->message, sizeof r->message, "%s", m);
    }
    for (int i = 0; i < r->nt; i++)
        r->t[i].buf->users--;
    if (r->signal_slot >= 0) {
        if (c->signals)
            atomic_fetch_sub(&c->signals->outstanding, 1);
        /* The daemon writes the done word of every op it answers, but a failure may come
         * from us (no session to be had) or before it knew the word: write it too, so the
         * caller's stream goes on; the next call reports the failure. */
        if (code) {
            dash__signal_release(c, r->signal_slot, r->signal_seq);
            if (!r->signal_told)
                dash__signal_tell(c, r);
        }
        if (c->signals && c->signals->slot_req[r->signal_slot] == r)
            c->signals->slot_req[r->signal_slot] = NULL;
    }
}

void dash__reap_detached(struct dash_client *c)
{
    struct dash__req *next;
    for (struct dash__req *r = c->reqs; r; r = next) {
        next = r->next;
        if (r->detached && r->state == DASH__DONE &&
            (r->kind == DASH__FORWARD || r->kind == DASH__BACKWARD))
            dash__req_free(c, r);
    }
}

/* ---- submitting and waiting ----------------------------------------------------------- */

int dash__op_submit(struct dash_client *c, enum dash__kind kind, const struct dash_attn *a,
                    const struct dash_tensor *const *ts, int nt, const struct dash__op_sync *sync,
                    uint64_t *ret_ticket, struct dash__req **ret_req)
{
    int rc;
    if (!c || !a || !ret_ticket)
        return DASH_EINVAL;
    c->last_error[0] = '\0';
    if ((rc = check_attn(a, c->last_error, sizeof c->last_error)) != 0)
        return rc;
    const int by_value = !a->cu_seqlens_q.buf && a->n_offsets > 0;
    const int varlen = a->cu_seqlens_q.buf != NULL || by_value;
    for (int i = 0; i < nt; i++) {
        const int32_t ndim = (i == 4 ? 3 : 4) - varlen; /* ts[4] is lse */
        if ((rc = check_tensor(c, ts[i], ndim)) != 0) {
            snprintf(c->last_error, sizeof c->last_error, "tensor %d: no buffer of this client, "
                     "or ndim is not %d%s", i, ndim, varlen ? " (a packed batch)" : "");
            return rc;
        }
    }
    if (varlen && !by_value && ((rc = check_tensor(c, &a->cu_seqlens_q, 1)) != 0 ||
                   (rc = check_tensor(c, &a->cu_seqlens_k, 1)) != 0)) {
        snprintf(c->last_error, sizeof c->last_error, "cu_seqlens_q and cu_seqlens_k must both be "
                 "tensors of ndim 1 in buffers of this client");
        return rc;
    }
    if (c->flags & DASH_CONNECT_NO_SESSION)
        return dash__fail(c, DASH_ENOSESSION, "this client connected without a session "
                          "(DASH_CONNECT_NO_SESSION): ping and stats only");

    struct dash__req *r = dash__req_new(c, kind);
    if (!r)
        return dash__fail(c, DASH_ENOMEM, "out of memory for a request");
    r->attn = *a;
    r->attn.offsets_q = r->attn.offsets_k = NULL; /* the caller's: r->offsets is the copy */
    if (by_value) {
        const size_t n = (size_t)a->n_offsets;
        if (!(r->offsets = malloc(2 * n * sizeof(int32_t)))) {
            r->state = DASH__DONE; /* nothing to give back yet */
            dash__req_free(c, r);
            return dash__fail(c, DASH_ENOMEM, "out of memory for %zu offsets", 2 * n);
        }
        memcpy(r->offsets, a->offsets_q, n * sizeof(int32_t));
        memcpy(r->offsets + n, a->offsets_k, n * sizeof(int32_t));
    }
    r->audit_step = c->audit_step;
    memcpy(r->audit_label, c->audit_label, sizeof r->audit_label);
    r->wait_slot = sync->wait_slot;
    r->record_slot = sync->record_slot;
    r->when_queued = sync->when_queued;
    r->signal_slot = sync->signal_slot;
    r->signal_seq = sync->signal_seq;
    r->nt = nt;
    for (int i = 0; i < nt; i++)
        r->t[i] = *ts[i];
    if (varlen && !by_value) { /* registered and held like the op's tensors */
        r->t[r->nt++] = a->cu_seqlens_q;
        r->t[r->nt++] = a->cu_seqlens_k;
    }
    r->ticket = c->next_ticket++;
    if ((rc = dash__map_put(&c->by_ticket, r->ticket, r)) != 0) {
        r->ticket = 0;
        r->state = DASH__DONE; /* nothing to give back yet */
        dash__req_free(c, r);
        return dash__fail(c, rc, "out of memory for a request");
    }
    for (int i = 0; i < r->nt; i++) /* the offsets too: dash__op_finish gives back r->nt */
        r->t[i].buf->users++;
    if ((rc = dash__submit(c, r)) != 0) {
        r->signal_slot = -1; /* never sent: the caller hears of it now, not later */
        dash__req_free(c, r); /* gives the buffers back */
        return dash__fail(c, rc, "cannot send the request to dashd at %s: %s%s%s", c->endpoint,
                          dash_strerror(rc), rc == DASH_EPERM ? ": " : "",
                          rc == DASH_EPERM ? c->refusal : "");
    }
    if (r->signal_slot >= 0 && c->signals)
        atomic_fetch_add(&c->signals->outstanding, 1);
    *ret_ticket = r->ticket;
    if (ret_req)
        *ret_req = r;
    return 0;
}

int dash_forward_submit(struct dash_client *c, const struct dash_attn *a,
                        const struct dash_tensor *q, const struct dash_tensor *k,
                        const struct dash_tensor *v, const struct dash_tensor *out,
                        const struct dash_tensor *lse, uint64_t *ret_ticket)
{
    const struct dash_tensor *ts[] = {q, k, v, out, lse};
    int rc = dash__op_submit(c, DASH__FORWARD, a, ts, 5, &DASH__NO_SYNC, ret_ticket, NULL);
    if (c)
        dash__carry_restore(c); /* its restore may leave signal-ordered ops waiting */
    return rc;
}

int dash_backward_submit(struct dash_client *c, const struct dash_attn *a,
                         const struct dash_tensor *q, const struct dash_tensor *k,
                         const struct dash_tensor *v, const struct dash_tensor *out,
                         const struct dash_tensor *lse, const struct dash_tensor *dout,
                         const struct dash_tensor *dq, const struct dash_tensor *dk,
                         const struct dash_tensor *dv, uint64_t *ret_ticket)
{
    const struct dash_tensor *ts[] = {q, k, v, out, lse, dout, dq, dk, dv};
    int rc = dash__op_submit(c, DASH__BACKWARD, a, ts, 9, &DASH__NO_SYNC, ret_ticket, NULL);
    if (c)
        dash__carry_restore(c); /* its restore may leave signal-ordered ops waiting */
    return rc;
}

static int op_done(struct dash_client *c, const void *arg)
{
    (void)c;
    return ((const struct dash__req *)arg)->state == DASH__DONE;
}

/* Hand a finished op's status and result to the caller and forget its ticket. */
static int take(struct dash_client *c, struct dash__req *r, struct dash_result *ret_result)
{
    int code = r->code;
    if (code == 0 && ret_result)
        *ret_result = r->result;
    if (code && r->message[0])
        snprintf(c->last_error, sizeof c->last_error, "%s", r->message);
    else if (code) /* no text from the daemon (or a failure of ours): the library's own */
        snprintf(c->last_error, sizeof c->last_error, "%s (%s, dashd at %s)",
                 dash_strerror(code), dash_errname(code), c->endpoint);
    dash__req_free(c, r);
    return code;
}

int dash_wait(struct dash_client *c, uint64_t ticket, int timeout_ms,
              struct dash_result *ret_result)
{
    if (!c || timeout_ms < -1)
        return DASH_EINVAL;
    struct dash__req *r = dash__map_get(&c->by_ticket, ticket);
    if (!r)
        return dash__fail(c, DASH_EINVAL, "no ticket %llu in flight (already taken, or never "
                          "given)", (unsigned long long)ticket);
    int64_t now = dash__now_ms();
    int rc = dash__wait(c, op_done, r, timeout_ms < 0 ? -1 : now + timeout_ms, now);
    return rc ? rc : take(c, r, ret_result);
}

int dash_poll(struct dash_client *c, uint64_t ticket, struct dash_result *ret_result)
{
    if (!c)
        return DASH_EINVAL;
    struct dash__req *r = dash__map_get(&c->by_ticket, ticket);
    if (!r)
        return dash__fail(c, DASH_EINVAL, "no ticket %llu in flight (already taken, or never "
                          "given)", (unsigned long long)ticket);
    if (r->state != DASH__DONE) {
        int rc = dash__pump_now(c);
        if (rc < 0)
            return dash__fail(c, rc, "reading from dashd at %s: %s", c->endpoint,
                              dash_strerror(rc));
    }
    if (r->state == DASH__DONE)
        return take(c, r, ret_result);
    int64_t quiet = c->last_rx_ms > r->born_ms ? c->last_rx_ms : r->born_ms;
    if (dash__now_ms() - quiet >= c->timeout_ms)
        return dash__fail(c, DASH_ETIMEDOUT, "no sign of life from dashd at %s for %d ms (the "
                          "client's timeout)", c->endpoint, c->timeout_ms);
    return DASH_EAGAIN;
}

/* The synchronous ops: a ticket nobody else sees, dropped if the wait fails. */
int dash__op_run(struct dash_client *c, uint64_t ticket, struct dash_result *ret_result)
{
    int rc = dash_wait(c, ticket, -1, ret_result);
    struct dash__req *r = dash__map_get(&c->by_ticket, ticket);
    if (r)
        dash__req_free(c, r);
    return rc;
}

int dash_forward(struct dash_client *c, const struct dash_attn *a, const struct dash_tensor *q,
                 const struct dash_tensor *k, const struct dash_tensor *v,
                 const struct dash_tensor *out, const struct dash_tensor *lse,
                 struct dash_result *ret_result)
{
    uint64_t ticket;
    int rc = dash_forward_submit(c, a, q, k, v, out, lse, &ticket);
    return rc ? rc : dash__op_run(c, ticket, ret_result);
}

int dash_backward(struct dash_client *c, const struct dash_attn *a, const struct dash_tensor *q,
                  const struct dash_tensor *k, const struct dash_tensor *v,
                  const struct dash_tensor *out, const struct dash_tensor *lse,
                  const struct dash_tensor *dout, const struct dash_tensor *dq,
                  const struct dash_tensor *dk, const struct dash_tensor *dv,
                  struct dash_result *ret_result)
{
    uint64_t ticket;
    int rc = dash_backward_submit(c, a, q, k, v, out, lse, dout, dq, dk, dv, &ticket);
    return rc ? rc : dash__op_run(c, ticket, ret_result);
}

int dash_set_audit(struct dash_client *c, int64_t step, const char *label)
{
    if (!c)
        return DASH_EINVAL;
    if (label && strlen(label) >= sizeof c->audit_label)
        return dash__fail(c, DASH_EINVAL, "an audit label of %zu bytes: at most %zu", strlen(label),
                          sizeof c->audit_label - 1);
    c->audit_step = step < 0 ? -1 : step;
    snprintf(c->audit_label, sizeof c->audit_label, "%s", label ? label : "");
    return 0;
}

const char *dash_last_error(const struct dash_client *c)
{
    return c ? c->last_error : "";
}

int dash__fail(struct dash_client *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof c->last_error, fmt, ap);
    va_end(ap);
    return code;
}
