// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_job.c - moving tensors between client memory and the backend (daemon/job.c), with
 * a fake backend that copies inputs to outputs so every byte can be traced: strided and
 * packed views are gathered correctly, outputs are scattered to exactly their own
 * elements (the gaps of an interleaved buffer stay untouched), a buffer shrunk behind the
 * daemon's back gives DASH_EBUFGONE, and the scratch cap is enforced.
 */
#include "suites.h"
#include "../daemon/guard.h"
#include "../daemon/job.h"
#include "../proto/errors.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- a backend that copies --------------------------------------------------------------- */

static int fake_check(void *impl, const struct val_plan *plan, char *msg, size_t msglen)
{
    (void)impl;
    (void)plan;
    (void)msg;
    (void)msglen;
    return 0;
}

static size_t rows_bytes(const struct attn_problem *p, int kv)
{
    return (size_t)p->batch * (size_t)(kv ? p->seqlen_k : p->seqlen_q) *
           (size_t)(kv ? p->heads_kv : p->heads_q) * (size_t)p->head_dim *
           (size_t)dtype_size(p->dtype);
}

static void fake_cfg(struct attn_config *ret_cfg)
{
    *ret_cfg = (struct attn_config){SCHED_DESCENDING, 32, 16, 48, 0};
}

/* out = q, lse[i] = i */
static int fake_forward(void *impl, const struct backend_op *op, char *msg, size_t msglen,
                        struct attn_config *ret_cfg)
{
    (void)impl;
    (void)msg;
    (void)msglen;
    const struct attn_problem *p = op->prob;
    memcpy(op->out.data, op->q.data, rows_bytes(p, 0));
    for (int64_t i = 0; i < (int64_t)p->batch * p->heads_q * p->seqlen_q; i++)
        op->lse[i] = (float)i;
    fake_cfg(ret_cfg);
    return 0;
}

/* dq = dout, dk = k, dv = v */
static int fake_backward(void *impl, const struct backend_op *op, char *msg, size_t msglen,
                         struct attn_config *ret_cfg)
{
    (void)impl;
    (void)msg;
    (void)msglen;
    const struct attn_problem *p = op->prob;
    memcpy(op->dq.data, op->dout.data, rows_bytes(p, 0));
    memcpy(op->dk.data, op->k.data, rows_bytes(p, 1));
    memcpy(op->dv.data, op->v.data, rows_bytes(p, 1));
    fake_cfg(ret_cfg);
    return 0;
}

static int32_t fake_threads(void *impl)
{
    (void)impl;
    return 1;
}

static void fake_free(void *impl)
{
    (void)impl;
}

static struct backend fake = {
    .name = "fake",
    .limits = {32, 256, 512, 7},
    .threads = fake_threads,
    .check = fake_check,
    .forward = fake_forward,
    .backward = fake_backward,
    .free = fake_free,
};

/* ---- fixtures ------------------------------------------------------------------------------ */

struct shm {
    char name[64];
    int fd;
    size_t size;
    struct shmbuf *buf;
    float *f; /* the mapping as floats */
};

static int shm_make(struct shm *s, size_t size)
{
    static int n;
    char msg[256];
    snprintf(s->name, sizeof s->name, "/dashd-test-job-%d-%d", (int)getpid(), n++);
    s->fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (s->fd < 0 || ftruncate(s->fd, (off_t)size) != 0)
        return -1;
    s->size = size;
    s->buf = NULL;
    if (shmbuf_open(s->name, size, -1, msg, sizeof msg, &s->buf) != 0)
        return -1;
    s->f = (float *)shmbuf_data(s->buf);
    return 0;
}

static void shm_done(struct shm *s)
{
    shmbuf_unref(s->buf);
    close(s->fd);
    shm_unlink(s->name);
}

static int lookup(void *ctx, uint64_t id, struct val_buffer *ret)
{
    const struct shm *s = ctx;
    if (id != 1)
        return DASH_ENOBUF;
    *ret = (struct val_buffer){.size = s->size, .object = {1, 0}};
    return 0;
}

static void tref(Dash__TensorRef *t, int64_t *shape, int64_t *strides, uint64_t offset, int nd)
{
    dash__tensor_ref__init(t);
    t->buffer_id = 1;
    t->offset = offset;
    t->n_shape = (size_t)nd;
    t->shape = shape;
    t->n_strides = strides ? (size_t)nd : 0;
    t->strides = strides;
}

enum { B = 2, S = 5, H = 2, D = 32 };
#define F sizeof(float)

/* A forward on f32 with q, k, v packed as (B, S, 3, H, D) at offset 0 and out written into
 * the first half of an interleaved (B, S, 2, H, D) region whose second half holds a
 * sentinel; lse dense after it. */
struct fwd_fx {
    struct shm shm;
    Dash__Forward fwd;
    Dash__AttnParams params;
    Dash__TensorRef t[5];
    int64_t shape_q[4], shape_lse[3], packed[4], inter[4];
    size_t out_off, lse_off;
    struct job job;
};

static int fwd_fx_init(struct fwd_fx *x)
{
    memset(x, 0, sizeof *x);
    x->out_off = (size_t)B * S * 3 * H * D * F;
    x->lse_off = x->out_off + (size_t)B * S * 2 * H * D * F;
    if (shm_make(&x->shm, x->lse_off + (size_t)B * H * S * F))
        return -1;
    for (size_t i = 0; i < x->out_off / F; i++)
        x->shm.f[i] = (float)i;
    memset((char *)x->shm.f + x->out_off, 0xab, x->shm.size - x->out_off);
    int64_t q[4] = {B, S, H, D}, l[3] = {B, H, S}, p[4] = {S * 3 * H * D, 3 * H * D, D, 1},
            o[4] = {S * 2 * H * D, 2 * H * D, D, 1};
    memcpy(x->shape_q, q, sizeof q);
    memcpy(x->shape_lse, l, sizeof l);
    memcpy(x->packed, p, sizeof p);
    memcpy(x->inter, o, sizeof o);
    dash__attn_params__init(&x->params);
    x->params.dtype = DASH__DTYPE__F32;
    dash__forward__init(&x->fwd);
    x->fwd.params = &x->params;
    tref(&x->t[0], x->shape_q, x->packed, 0, 4);
    tref(&x->t[1], x->shape_q, x->packed, H * D * F, 4);
    tref(&x->t[2], x->shape_q, x->packed, 2 * H * D * F, 4);
    tref(&x->t[3], x->shape_q, x->inter, x->out_off, 4);
    tref(&x->t[4], x->shape_lse, NULL, x->lse_off, 3);
    x->fwd.q = &x->t[0];
    x->fwd.k = &x->t[1];
    x->fwd.v = &x->t[2];
    x->fwd.out = &x->t[3];
    x->fwd.lse = &x->t[4];
    char msg[256];
    if (val_forward(&x->fwd, &fake.limits, lookup, &x->shm, msg, sizeof msg, &x->job.plan))
        return -1;
    for (int s = 0; s < x->job.plan.slots; s++)
        x->job.buf[s] = x->shm.buf; /* the fixture's one reference stands for all */
    return 0;
}

/* ---- tests ------------------------------------------------------------------------------------ */

static void test_job_forward_scatters_only_own_elements(void)
{
    CU_ASSERT_EQUAL_FATAL(guard_install(), 0);
    struct fwd_fx x;
    CU_ASSERT_EQUAL_FATAL(fwd_fx_init(&x), 0);
    struct job_runner *r = job_runner_new(&fake, UINT64_MAX);
    job_run(r, &x.job, NULL, NULL);
    CU_ASSERT_EQUAL(x.job.rc, 0);
    CU_ASSERT_EQUAL(x.job.used.sched, SCHED_DESCENDING);
    CU_ASSERT(x.job.finished_ns >= x.job.started_ns);
    int ok_out = 1, ok_gap = 1, ok_lse = 1;
    const float *out = (const float *)((const char *)x.shm.f + x.out_off);
    uint32_t sentinel;
    memset(&sentinel, 0xab, sizeof sentinel);
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++)
            for (int h = 0; h < 2 * H; h++)
                for (int d = 0; d < D; d++) {
                    size_t at = (((size_t)b * S + s) * 2 * H + h) * D + d;
                    if (h < H) { /* out[b,s,h,d] = q[b,s,h,d], q packed with stride 3*H*D */
                        size_t qat = (((size_t)b * S + s) * 3 * H + h) * D + d;
                        ok_out &= out[at] == (float)qat;
                    } else {
                        uint32_t u;
                        memcpy(&u, &out[at], sizeof u);
                        ok_gap &= u == sentinel;
                    }
                }
    const float *lse = (const float *)((const char *)x.shm.f + x.lse_off);
    for (int i = 0; i < B * H * S; i++)
        ok_lse &= lse[i] == (float)i;
    CU_ASSERT(ok_out);
    CU_ASSERT(ok_gap);
    CU_ASSERT(ok_lse);
    job_runner_free(r);
    shm_done(&x.shm);
}

static void test_job_shrunk_buffer_is_ebufgone(void)
{
    CU_ASSERT_EQUAL_FATAL(guard_install(), 0);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    struct job_runner *r = job_runner_new(&fake, UINT64_MAX);
    /* shrunk below the outputs: inputs read fine, the write-back faults */
    struct fwd_fx x;
    CU_ASSERT_EQUAL_FATAL(fwd_fx_init(&x), 0);
    CU_ASSERT_EQUAL_FATAL(ftruncate(x.shm.fd, (off_t)((x.out_off + page - 1) / page * page)), 0);
    job_run(r, &x.job, NULL, NULL);
    CU_ASSERT_EQUAL(x.job.rc, DASH_EBUFGONE);
    CU_ASSERT(strncmp(x.job.msg, "out:", 4) == 0);
    shm_done(&x.shm);
    /* shrunk to nothing: the first read faults */
    CU_ASSERT_EQUAL_FATAL(fwd_fx_init(&x), 0);
    CU_ASSERT_EQUAL_FATAL(ftruncate(x.shm.fd, 0), 0);
    job_run(r, &x.job, NULL, NULL);
    CU_ASSERT_EQUAL(x.job.rc, DASH_EBUFGONE);
    CU_ASSERT(strncmp(x.job.msg, "q:", 2) == 0);
    shm_done(&x.shm);
    job_runner_free(r);
}

static void test_job_scratch_cap_is_enforced(void)
{
    struct fwd_fx x;
    CU_ASSERT_EQUAL_FATAL(fwd_fx_init(&x), 0);
    uint64_t need = job_scratch_bytes(&x.job.plan);
    CU_ASSERT(need >= (uint64_t)(4 * B * S * H * D + B * H * S) * F);
    struct job_runner *r = job_runner_new(&fake, need - 1);
    job_run(r, &x.job, NULL, NULL);
    CU_ASSERT_EQUAL(x.job.rc, DASH_ENOMEM);
    job_runner_free(r);
    r = job_runner_new(&fake, need);
    job_run(r, &x.job, NULL, NULL);
    CU_ASSERT_EQUAL(x.job.rc, 0);
    job_runner_free(r);
    shm_done(&x.shm);
}

static void test_job_backward_gathers_transposed_heads(void)
{
    CU_ASSERT_EQUAL_FATAL(guard_install(), 0);
    /* Every tensor in its own region of one buffer; k is stored heads-outermost
     * (B, H, S, D), so the copy must go row by row. dk = k, dv = v, dq = dout. */
    const size_t n = (size_t)B * S * H * D;
    struct shm shm;
    CU_ASSERT_EQUAL_FATAL(shm_make(&shm, (9 * n + (size_t)B * H * S) * F), 0);
    for (size_t i = 0; i < 9 * n + (size_t)B * H * S; i++)
        shm.f[i] = (float)i;
    int64_t shape[4] = {B, S, H, D}, lshape[3] = {B, H, S};
    int64_t trans[4] = {H * S * D, D, S * D, 1};
    Dash__TensorRef t[9];
    for (int s = 0; s < 9; s++)
        tref(&t[s], s == VAL_LSE ? lshape : shape, s == VAL_K ? trans : NULL,
             (uint64_t)s * n * F, s == VAL_LSE ? 3 : 4);
    Dash__AttnParams params;
    dash__attn_params__init(&params);
    params.dtype = DASH__DTYPE__F32;
    Dash__Backward bw;
    dash__backward__init(&bw);
    bw.params = &params;
    bw.q = &t[VAL_Q];
    bw.k = &t[VAL_K];
    bw.v = &t[VAL_V];
    bw.out = &t[VAL_OUT];
    bw.lse = &t[VAL_LSE];
    bw.dout = &t[VAL_DOUT];
    bw.dq = &t[VAL_DQ];
    bw.dk = &t[VAL_DK];
    bw.dv = &t[VAL_DV];
    struct job j;
    memset(&j, 0, sizeof j);
    char msg[256];
    CU_ASSERT_EQUAL_FATAL(val_backward(&bw, &fake.limits, lookup, &shm, msg, sizeof msg, &j.plan), 0);
    for (int s = 0; s < j.plan.slots; s++)
        j.buf[s] = shm.buf;
    struct job_runner *r = job_runner_new(&fake, UINT64_MAX);
    job_run(r, &j, NULL, NULL);
    CU_ASSERT_EQUAL(j.rc, 0);
    int ok_dk = 1, ok_dv = 1, ok_dq = 1;
    const float *f = shm.f;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++) {
                    size_t dense = (((size_t)b * S + s) * H + h) * D + d;
                    size_t kat = VAL_K * n + (((size_t)b * H + h) * S + s) * D + d;
                    ok_dk &= f[VAL_DK * n + dense] == f[kat];
                    ok_dv &= f[VAL_DV * n + dense] == f[VAL_V * n + dense];
                    ok_dq &= f[VAL_DQ * n + dense] == f[VAL_DOUT * n + dense];
                }
    CU_ASSERT(ok_dk);
    CU_ASSERT(ok_dv);
    CU_ASSERT(ok_dq);
    job_runner_free(r);
    shm_done(&shm);
}

int suite_job(void)
{
    CU_pSuite s = CU_add_suite("job", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_job_forward_scatters_only_own_elements);
    ADD_TEST(s, test_job_shrunk_buffer_is_ebufgone);
    ADD_TEST(s, test_job_scratch_cap_is_enforced);
    ADD_TEST(s, test_job_backward_gathers_transposed_heads);
    return 0;
}
