// SPDX-License-Identifier: BSD-3-Clause
/*
 * job.c - see job.h.
 */
#include "job.h"

#include "guard.h"

#include "kernels/digest/digest.h"
#include "proto/errors.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define JOB_ALIGN 64
/* A larger arena is given back after the job, so one big request does not pin memory. */
#define JOB_SCRATCH_KEEP ((size_t)256 << 20)

struct job_runner {
    struct backend *backend;
    uint64_t scratch_max;
    unsigned char *scratch;
    size_t scratch_cap;
};

struct job_runner *job_runner_new(struct backend *b, uint64_t scratch_max)
{
    struct job_runner *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->backend = b;
    r->scratch_max = scratch_max;
    return r;
}

void job_runner_free(struct job_runner *r)
{
    if (!r)
        return;
    free(r->scratch);
    free(r);
}

uint64_t job_scratch_bytes(const struct val_plan *plan)
{
    uint64_t total = 0;
    for (int s = 0; s < plan->slots; s++) {
        uint64_t n = val_dense_bytes(&plan->t[s]);
        if (n > UINT64_MAX - JOB_ALIGN || __builtin_add_overflow(total, n + JOB_ALIGN, &total))
            return UINT64_MAX;
    }
    return total;
}

/* Copy between a strided view in client memory and its dense scratch copy. */
struct copy {
    const struct val_tensor *t;
    unsigned char *client; /* the mapping + offset: element (0, 0, 0, 0) */
    unsigned char *dense;
    int to_client;
};

static int is_dense(const struct val_tensor *t)
{
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] > 1 && t->stride[i] != want)
            return 0;
        want *= t->shape[i];
    }
    return 1;
}

static void copy_fn(void *arg)
{
    const struct copy *c = arg;
    const struct val_tensor *t = c->t;
    const size_t es = (size_t)t->elem_size;
    if (is_dense(t)) {
        size_t n = (size_t)val_dense_bytes(t);
        if (c->to_client)
            memcpy(c->client, c->dense, n);
        else
            memcpy(c->dense, c->client, n);
        return;
    }
    /* 4-d (lse is always dense). A run is the innermost row, or the heads x head_dim
     * block of one (batch, seq) position when the heads are contiguous. */
    const int64_t B = t->shape[0], S = t->shape[1], H = t->shape[2], D = t->shape[3];
    const int heads_packed = H == 1 || t->stride[2] == D;
    const size_t run = (size_t)(heads_packed ? H * D : D) * es;
    const int64_t runs_h = heads_packed ? 1 : H;
    unsigned char *dense = c->dense;
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t h = 0; h < runs_h; h++) {
                unsigned char *cl =
                    c->client + (size_t)(b * t->stride[0] + s * t->stride[1] + h * t->stride[2]) * es;
                if (c->to_client)
                    memcpy(cl, dense, run);
                else
                    memcpy(dense, cl, run);
                dense += run;
            }
}

static int copy_slot(struct job *j, int slot, unsigned char *dense, int to_client)
{
    const struct val_tensor *t = &j->plan.t[slot];
    struct copy c = {t, shmbuf_data(j->buf[slot]) + t->offset, dense, to_client};
    if (guard_call(copy_fn, &c) == 0)
        return 0;
    snprintf(j->msg, sizeof j->msg, "%s: buffer %llu lost memory while being %s (shrunk?)",
             val_slot_name((enum val_slot)slot), (unsigned long long)t->buffer_id,
             to_client ? "written" : "read");
    return DASH_EBUFGONE;
}

static struct attn_tensor dense_tensor(const struct val_tensor *t, unsigned char *data)
{
    struct attn_tensor e = {data, {0, 0, 0, 1}};
    if (t->ndim == 4)
        e = attn_dense(data, t->shape[1], t->shape[2], t->shape[3]);
    return e;
}

/* A tensor in place in device memory: the buffer's device pointer + offset, the request's
 * strides. */
static struct attn_tensor device_tensor(const struct job *j, int slot)
{
    const struct val_tensor *t = &j->plan.t[slot];
    struct attn_tensor e = {shmbuf_data(j->buf[slot]) + t->offset,
                           {t->stride[0], t->stride[1], t->stride[2], t->stride[3]}};
    return e;
}

/* The digest (digest.h) of a tensor's dense copy: rows of its innermost dimension. */
static uint64_t dense_digest(const struct val_tensor *t, const void *dense)
{
    uint64_t d = 0;
    const uint64_t row = (uint64_t)t->shape[t->ndim - 1] * (uint64_t)t->elem_size;
    (void)digest_rows(dense, val_dense_bytes(t), row, &d); /* a dense copy is whole rows */
    return d;
}

/* CUDA memory: no copies and no guard (the IPC mapping pins the memory, and validation
 * proved every element inside the registered size); the backend reads and writes the
 * client's tensors where they are. */
static int run_in_place(struct job_runner *r, struct job *j, backend_done_fn done,
                        void *done_ctx)
{
    const struct val_plan *p = &j->plan;
    struct backend_op op = {.prob = &p->prob, .cfg = &p->cfg, .wait_event = j->wait_event,
                            .record_event = j->record_event, .signal_ready = j->signal_ready,
                            .signal_done = j->signal_done, .signal_fail = j->signal_fail,
                            .signal_seq = j->signal_seq,
                            .peer_pid = j->peer_pid,
                            .done = done,
                            .done_ctx = done_ctx};
    op.lse = (float *)(void *)(shmbuf_data(j->buf[VAL_LSE]) + p->t[VAL_LSE].offset);
    op.q = device_tensor(j, VAL_Q);
    op.k = device_tensor(j, VAL_K);
    op.v = device_tensor(j, VAL_V);
    op.out = device_tensor(j, VAL_OUT);
    /* audit: the backend digests on the device, in place */
    j->device_op = 1;
    op.digests = j->view_digest;
    for (int s = 0; s < p->slots; s++) {
        if (!(j->digest_mask & (1u << s)))
            continue;
        const struct val_tensor *t = &p->t[s];
        struct digest_view *v = &op.digest_views[op.n_digests];
        memset(v, 0, sizeof *v);
        v->base = shmbuf_data(j->buf[s]) + t->offset;
        v->ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) {
            v->shape[d] = t->shape[d];
            v->strides[d] = t->stride[d];
        }
        v->elem = t->elem_size;
        op.digest_is_output[op.n_digests] = t->output;
        op.n_digests++;
    }
    if (!p->backward)
        return r->backend->forward(r->backend->impl, &op, j->msg, sizeof j->msg, &j->used);
    op.dout = device_tensor(j, VAL_DOUT);
    op.dq = device_tensor(j, VAL_DQ);
    op.dk = device_tensor(j, VAL_DK);
    op.dv = device_tensor(j, VAL_DV);
    return r->backend->backward(r->backend->impl, &op, j->msg, sizeof j->msg, &j->used);
}

/* Is the job's client process gone (so nobody will read its result)? kill(pid, 0) fails
 * with ESRCH only when no such process exists; an unknown pid is never gone. */
static int client_gone(void *job)
{
    const struct job *j = job;
    return j->peer_pid > 0 && kill((pid_t)j->peer_pid, 0) != 0 && errno == ESRCH;
}

static int run(struct job_runner *r, struct job *j, backend_done_fn done, void *done_ctx)
{
    const struct val_plan *p = &j->plan;
    /* dispatch never mixes kinds in one op, so the first tensor's buffer says it */
    if (shmbuf_kind(j->buf[0]) == SHMBUF_CUDA)
        return run_in_place(r, j, done, done_ctx);
    uint64_t need = job_scratch_bytes(p);
    if (need > r->scratch_max) {
        snprintf(j->msg, sizeof j->msg, "the request needs %llu bytes of scratch, more than %llu",
                 (unsigned long long)need, (unsigned long long)r->scratch_max);
        return DASH_ENOMEM;
    }
    if (need > r->scratch_cap) {
        /* the old scratch goes first (its contents are not kept): never both at once */
        free(r->scratch);
        r->scratch = NULL;
        r->scratch_cap = 0;
        size_t cap = ((size_t)need + 4095) & ~(size_t)4095;
        unsigned char *mem = aligned_alloc(JOB_ALIGN, cap);
        if (!mem) {
            snprintf(j->msg, sizeof j->msg, "cannot allocate %llu bytes of scratch",
                     (unsigned long long)need);
            return DASH_ENOMEM;
        }
        r->scratch = mem;
        r->scratch_cap = cap;
    }
    unsigned char *dense[VAL_SLOTS] = {0};
    size_t at = 0;
    for (int s = 0; s < p->slots; s++) {
        dense[s] = r->scratch + at;
        at += ((size_t)val_dense_bytes(&p->t[s]) + JOB_ALIGN - 1) & ~(size_t)(JOB_ALIGN - 1);
    }

    int rc;
    for (int s = 0; s < p->slots; s++)
        if (!p->t[s].output && (rc = copy_slot(j, s, dense[s], 0)))
            return rc;
    /* audit: digests of the dense copies, which are the tensors' bytes in dense order */
    for (int s = 0; s < p->slots; s++)
        if (!p->t[s].output && (j->digest_mask & (1u << s))) {
            j->digest[s] = dense_digest(&p->t[s], dense[s]);
            j->digest_ok |= 1u << s;
        }

    struct backend_op op = {.host = 1, .prob = &p->prob, .cfg = &p->cfg,
                            .lse = (float *)dense[VAL_LSE], .stop = client_gone, .stop_ctx = j,
                            /* what the cap leaves (0 would mean no bound: the tensors
                             * filling the cap exactly leave 1 byte, which no op fits in) */
                            .work_max = r->scratch_max == UINT64_MAX    ? 0
                                        : r->scratch_max - need > 0 ? r->scratch_max - need
                                                                    : 1};
    op.q = dense_tensor(&p->t[VAL_Q], dense[VAL_Q]);
    op.k = dense_tensor(&p->t[VAL_K], dense[VAL_K]);
    op.v = dense_tensor(&p->t[VAL_V], dense[VAL_V]);
    op.out = dense_tensor(&p->t[VAL_OUT], dense[VAL_OUT]);
    if (p->backward) {
        op.dout = dense_tensor(&p->t[VAL_DOUT], dense[VAL_DOUT]);
        op.dq = dense_tensor(&p->t[VAL_DQ], dense[VAL_DQ]);
        op.dk = dense_tensor(&p->t[VAL_DK], dense[VAL_DK]);
        op.dv = dense_tensor(&p->t[VAL_DV], dense[VAL_DV]);
        rc = r->backend->backward(r->backend->impl, &op, j->msg, sizeof j->msg, &j->used);
    } else {
        rc = r->backend->forward(r->backend->impl, &op, j->msg, sizeof j->msg, &j->used);
    }
    if (rc)
        return rc;
    for (int s = 0; s < p->slots; s++)
        if (p->t[s].output && (j->digest_mask & (1u << s))) {
            j->digest[s] = dense_digest(&p->t[s], dense[s]);
            j->digest_ok |= 1u << s;
        }

    for (int s = 0; s < p->slots; s++)
        if (p->t[s].output && (rc = copy_slot(j, s, dense[s], 1)))
            return rc;
    return 0;
}

int job_run(struct job_runner *r, struct job *j, backend_done_fn done, void *done_ctx)
{
    j->started_ns = uv_hrtime();
    j->msg[0] = '\0';
    if (client_gone(j)) {
        j->rc = DASH_ECANCELED;
        snprintf(j->msg, sizeof j->msg, "not run: the client process (pid %lld) is gone",
                 (long long)j->peer_pid);
        if (j->signal_done) /* the client poisons the outputs (or nobody waits any more) */
            (void)r->backend->signal_release(r->backend->impl,
                                             j->signal_fail ? j->signal_fail : j->signal_done,
                                             j->signal_seq);
        j->finished_ns = j->started_ns;
        return 0;
    }
    int rc = run(r, j, done, done_ctx);
    if (r->scratch_cap > JOB_SCRATCH_KEEP) {
        free(r->scratch);
        r->scratch = NULL;
        r->scratch_cap = 0;
    }
    /* Queued: done() may already be running on another thread and owns the result. */
    if (rc == BACKEND_QUEUED)
        return BACKEND_QUEUED;
    j->rc = rc;
    j->finished_ns = uv_hrtime();
    return 0;
}

void job_device_digests(struct job *j)
{
    int i = 0;
    for (int s = 0; s < j->plan.slots; s++)
        if (j->digest_mask & (1u << s)) {
            j->digest[s] = j->view_digest[i++];
            j->digest_ok |= 1u << s;
        }
}
