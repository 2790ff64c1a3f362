// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_client.c - libdash without a daemon: argument checks that fail before anything is
 * sent, connecting to an endpoint where nobody listens, the tensor helpers, the error table
 * of the public header, and the request table the library keys replies by.
 *
 * The argument checks run on a client assembled by hand from client/dash_internal.h, with
 * no socket at all: a check that let a request through would have nothing to send it on,
 * and the test sees that nothing was queued or sent. What needs a daemon (the session
 * restore, resending in-flight work) is for the integration suites.
 */
#include "suites.h"
#include "testutil.h"
#include "proto/errors.h"
#include "client/dash.h"
#include "client/dash_internal.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a client without a socket -------------------------------------------------------- */

struct fixture {
    struct dash_client c, other;
    struct dash_buffer b, foreign;
    char mem[4096];
};

static void fixture_init(struct fixture *f)
{
    memset(f, 0, sizeof *f);
    f->c.state = DASH__S_OK;
    f->c.session_id = 7;
    f->c.timeout_ms = 300;
    f->c.next_wire = 1;
    f->c.next_ticket = 1;
    f->other = f->c;
    f->b = (struct dash_buffer){.owner = &f->c, .data = f->mem, .size = sizeof f->mem,
                                .reg = DASH__REG_OK, .id = 1};
    f->foreign = (struct dash_buffer){.owner = &f->other, .data = f->mem,
                                      .size = sizeof f->mem, .reg = DASH__REG_OK, .id = 2};
    f->c.bufs = &f->b;
    f->other.bufs = &f->foreign;
}

/* Nothing was queued, sent or given a ticket. */
static void assert_untouched(const struct fixture *f)
{
    CU_ASSERT_PTR_NULL(f->c.reqs);
    CU_ASSERT_EQUAL(f->c.by_wire.n, 0);
    CU_ASSERT_EQUAL(f->c.by_ticket.n, 0);
    CU_ASSERT_EQUAL(f->c.next_wire, 1);
    CU_ASSERT_EQUAL(f->c.next_ticket, 1);
    CU_ASSERT_EQUAL(f->b.users, 0);
}

static int fwd(struct fixture *f, const struct dash_attn *a, const struct dash_tensor *q,
               const struct dash_tensor *lse, uint64_t *ticket)
{
    struct dash_tensor t = dash_tensor_dense(&f->b, 0, 1, 4, 2, 32);
    return dash_forward_submit(&f->c, a, q, &t, &t, &t, lse, ticket);
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_client_connect_without_daemon_fails_at_once(void)
{
    char ep[128];
    snprintf(ep, sizeof ep, "ipc:///tmp/dash-test-nobody-%ld.sock", (long)getpid());
    unlink(ep + 6);
    struct dash_connect_opts o = {.client_name = "test", .timeout_ms = 3000};
    struct dash_client *c = (struct dash_client *)&o; /* must stay untouched */
    int64_t t0 = dash__now_ms();
    /* no socket file: nothing to wait for (tests/test_reach.c has the other cases) */
    CU_ASSERT_EQUAL(dash_connect(ep, &o, &c), DASH_ENOENT);
    CU_ASSERT(dash__now_ms() - t0 < 1000);
    CU_ASSERT_PTR_EQUAL(c, (struct dash_client *)&o);

    /* the same without a session */
    o.flags = DASH_CONNECT_NO_SESSION;
    CU_ASSERT_EQUAL(dash_connect(ep, &o, &c), DASH_ENOENT);
    CU_ASSERT_PTR_EQUAL(c, (struct dash_client *)&o);
}

static void test_client_connect_rejects_bad_arguments(void)
{
    struct dash_client *c = NULL;
    char long_name[DASH__NAME_MAX + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';

    CU_ASSERT_EQUAL(dash_connect("ipc:///tmp/x.sock", NULL, NULL), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_connect("", NULL, &c), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_connect("bogus://nowhere", &(struct dash_connect_opts){.timeout_ms = 100},
                                 &c),
                    DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_connect("ipc:///tmp/x.sock",
                                 &(struct dash_connect_opts){.timeout_ms = -1}, &c),
                    DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_connect("ipc:///tmp/x.sock", &(struct dash_connect_opts){.flags = 0x80},
                                 &c),
                    DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_connect("ipc:///tmp/x.sock",
                                 &(struct dash_connect_opts){.client_name = long_name}, &c),
                    DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_connect("ipc:///tmp/x.sock",
                                 &(struct dash_connect_opts){.run_tag = long_name}, &c),
                    DASH_EINVAL);
    CU_ASSERT_PTR_NULL(c);
}

static void test_client_null_handles_are_einval_and_close_null_is_fine(void)
{
    struct dash_buffer *b = NULL;
    struct dash_stats *s = NULL;
    struct dash_tensor t = {0};
    struct dash_attn a = {0};
    uint64_t ticket = 0, rtt = 0;

    dash_close(NULL);
    dash_stats_free(NULL);
    CU_ASSERT_EQUAL(dash_shm_alloc(NULL, 4096, &b), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_shm_free(NULL, NULL), DASH_EINVAL);
    CU_ASSERT_PTR_NULL(dash_buffer_data(NULL));
    CU_ASSERT_EQUAL(dash_buffer_size(NULL), 0);
    CU_ASSERT_EQUAL(dash_forward(NULL, &a, &t, &t, &t, &t, &t, NULL), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_backward(NULL, &a, &t, &t, &t, &t, &t, &t, &t, &t, &t, NULL),
                    DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_forward_submit(NULL, &a, &t, &t, &t, &t, &t, &ticket), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_wait(NULL, 1, -1, NULL), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_poll(NULL, 1, NULL), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_ping(NULL, 100, &rtt), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_stats(NULL, &s), DASH_EINVAL);
    CU_ASSERT_PTR_NULL(b);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_EQUAL(ticket, 0);
    CU_ASSERT_EQUAL(rtt, 0);
}

static void test_client_bad_tensors_are_einval_before_sending(void)
{
    struct fixture f;
    fixture_init(&f);
    struct dash_attn a = {.dtype = DASH_BF16};
    struct dash_tensor q = dash_tensor_dense(&f.b, 0, 1, 4, 2, 32);
    struct dash_tensor lse = dash_tensor_lse(&f.b, 0, 1, 2, 4);
    uint64_t ticket = 99;

    struct dash_tensor q3 = q, lse4 = lse, q_nobuf = q, q_foreign = q, q_ndim0 = q;
    q3.ndim = 3;
    lse4.ndim = 4;
    q_nobuf.buf = NULL;
    q_foreign.buf = &f.foreign;
    q_ndim0.ndim = 0;

    CU_ASSERT_EQUAL(fwd(&f, &a, NULL, &lse, &ticket), DASH_EINVAL);
    CU_ASSERT_EQUAL(fwd(&f, &a, &q, NULL, &ticket), DASH_EINVAL);
    CU_ASSERT_EQUAL(fwd(&f, &a, &q3, &lse, &ticket), DASH_EINVAL);
    CU_ASSERT_EQUAL(fwd(&f, &a, &q_ndim0, &lse, &ticket), DASH_EINVAL);
    CU_ASSERT_EQUAL(fwd(&f, &a, &q, &lse4, &ticket), DASH_EINVAL);
    CU_ASSERT_EQUAL(fwd(&f, &a, &q, &q, &ticket), DASH_EINVAL); /* lse must be 3-d */
    CU_ASSERT_EQUAL(fwd(&f, &a, &q_nobuf, &lse, &ticket), DASH_EINVAL);
    CU_ASSERT_EQUAL(fwd(&f, &a, &q_foreign, &lse, &ticket), DASH_EINVAL);
    CU_ASSERT_EQUAL(fwd(&f, NULL, &q, &lse, &ticket), DASH_EINVAL);
    CU_ASSERT_EQUAL(fwd(&f, &a, &q, &lse, NULL), DASH_EINVAL);
    /* every one of a backward's nine tensors is checked */
    CU_ASSERT_EQUAL(dash_backward_submit(&f.c, &a, &q, &q, &q, &q, &lse, &q, &q, &q, &q_foreign,
                                         &ticket),
                    DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_backward(&f.c, &a, &q, &q, &q, &q, &lse, &q3, &q, &q, &q, NULL),
                    DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_forward(&f.c, &a, &q, &q, &q, &q_nobuf, &lse, NULL), DASH_EINVAL);
    CU_ASSERT_EQUAL(ticket, 99);
    assert_untouched(&f);
}

static void test_client_bad_attention_params_are_einval_before_sending(void)
{
    struct fixture f;
    fixture_init(&f);
    struct dash_tensor q = dash_tensor_dense(&f.b, 0, 1, 4, 2, 32);
    struct dash_tensor lse = dash_tensor_lse(&f.b, 0, 1, 2, 4);
    const struct dash_attn bad[] = {
        {.dtype = (enum dash_dtype)4}, /* past DASH_F64 */
        {.dtype = (enum dash_dtype)-1},
        {.mask = (enum dash_mask)2},
        {.schedule = (enum dash_schedule)6},
        {.scale = -0.5f},
        {.scale = NAN},
        {.scale = INFINITY},
        {.wave = -1},
        {.block_m = -64},
        {.block_n = -1},
    };
    uint64_t ticket = 99;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_EQUAL(fwd(&f, &bad[i], &q, &lse, &ticket), DASH_EINVAL);
    CU_ASSERT_EQUAL(ticket, 99);
    assert_untouched(&f);
}

static void test_client_buffer_and_ticket_misuse(void)
{
    struct fixture f;
    fixture_init(&f);
    struct dash_buffer *b = NULL;
    uint64_t rtt = 5;

    /* a buffer of another client, and one still used by an op in flight */
    CU_ASSERT_EQUAL(dash_shm_free(&f.c, &f.foreign), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_shm_free(&f.c, NULL), DASH_EINVAL);
    f.b.users = 1;
    CU_ASSERT_EQUAL(dash_shm_free(&f.c, &f.b), DASH_EBUSY);
    f.b.users = 0;
    CU_ASSERT_PTR_EQUAL(f.c.bufs, &f.b); /* still there */
    CU_ASSERT_EQUAL(dash_shm_alloc(&f.c, 0, &b), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_shm_alloc(&f.c, 4096, NULL), DASH_EINVAL);
    CU_ASSERT_PTR_NULL(b);

    /* tickets that were never given, or given by another client */
    CU_ASSERT_EQUAL(dash_wait(&f.c, 0, 0, NULL), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_wait(&f.c, 1, 0, NULL), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_wait(&f.c, 1, -2, NULL), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_poll(&f.c, 12345, NULL), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_ping(&f.c, -2, &rtt), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_stats(&f.c, NULL), DASH_EINVAL);
    CU_ASSERT_EQUAL(rtt, 5);

    /* a monitoring client has no session for buffers and ops */
    f.c.flags = DASH_CONNECT_NO_SESSION;
    struct dash_tensor q = dash_tensor_dense(&f.b, 0, 1, 4, 2, 32);
    struct dash_tensor lse = dash_tensor_lse(&f.b, 0, 1, 2, 4);
    uint64_t ticket = 99;
    CU_ASSERT_EQUAL(dash_shm_alloc(&f.c, 4096, &b), DASH_ENOSESSION);
    CU_ASSERT_EQUAL(fwd(&f, &(struct dash_attn){0}, &q, &lse, &ticket), DASH_ENOSESSION);
    CU_ASSERT_EQUAL(ticket, 99);
    assert_untouched(&f);
}

static void test_client_tensor_helpers_fill_dense_strides(void)
{
    struct dash_buffer *b = (struct dash_buffer *)0x1000; /* only stored */
    struct dash_tensor t = dash_tensor_dense(b, 256, 2, 128, 8, 64);
    CU_ASSERT_PTR_EQUAL(t.buf, b);
    CU_ASSERT_EQUAL(t.offset, 256);
    CU_ASSERT_EQUAL(t.ndim, 4);
    const int64_t shape[4] = {2, 128, 8, 64}, strides[4] = {128 * 8 * 64, 8 * 64, 64, 1};
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(t.shape[i], shape[i]);
        CU_ASSERT_EQUAL(t.strides[i], strides[i]);
    }

    struct dash_tensor l = dash_tensor_lse(b, 8, 2, 8, 128);
    CU_ASSERT_EQUAL(l.ndim, 3);
    CU_ASSERT_EQUAL(l.offset, 8);
    CU_ASSERT_EQUAL(l.shape[0], 2);
    CU_ASSERT_EQUAL(l.shape[1], 8);
    CU_ASSERT_EQUAL(l.shape[2], 128);
    CU_ASSERT_EQUAL(l.strides[0], 8 * 128);
    CU_ASSERT_EQUAL(l.strides[1], 128);
    CU_ASSERT_EQUAL(l.strides[2], 1);
    CU_ASSERT_EQUAL(l.shape[3], 0);
    CU_ASSERT_EQUAL(l.strides[3], 0);

    CU_ASSERT_EQUAL(dash_dtype_size(DASH_F32), 4);
    CU_ASSERT_EQUAL(dash_dtype_size(DASH_F16), 2);
    CU_ASSERT_EQUAL(dash_dtype_size(DASH_BF16), 2);
    CU_ASSERT_EQUAL(dash_dtype_size((enum dash_dtype)9), 0);
}

/* Dense strides travel as no strides at all; anything else travels as given. */
static void test_client_forward_message_carries_ids_and_params(void)
{
    struct fixture f;
    fixture_init(&f);
    struct dash__req r = {.kind = DASH__FORWARD, .nt = 5, .wait_slot = -1, .record_slot = -1,
                          .signal_slot = -1};
    r.attn = (struct dash_attn){.dtype = DASH_F16, .mask = DASH_MASK_CAUSAL, .scale = 0.125f,
                                .schedule = DASH_SCHED_SHIFT, .wave = 32};
    for (int i = 0; i < 5; i++)
        r.t[i] = dash_tensor_dense(&f.b, (uint64_t)i * 512, 1, 4, 2, 32);
    r.t[4] = dash_tensor_lse(&f.b, 2560, 1, 2, 4);
    r.t[1].strides[0] = 1000; /* a padded batch stride */
    f.b.id = 41;

    Dash__Request m = DASH__REQUEST__INIT;
    struct dash__op_storage st;
    CU_ASSERT_EQUAL_FATAL(dash__op_encode(&f.c, &r, &m, &st), 0);
    CU_ASSERT_EQUAL(m.body_case, DASH__REQUEST__BODY_FORWARD);
    const Dash__Forward *fw = m.forward;
    CU_ASSERT_EQUAL(fw->params->dtype, DASH__DTYPE__F16);
    CU_ASSERT_EQUAL(fw->params->mask, DASH__MASK__CAUSAL);
    CU_ASSERT(fw->params->has_scale && fw->params->scale == 0.125f);
    CU_ASSERT(fw->params->has_schedule && fw->params->schedule == DASH__SCHEDULE__SHIFT);
    CU_ASSERT(fw->params->has_wave && fw->params->wave == 32);
    CU_ASSERT(!fw->params->has_block_m && !fw->params->has_block_n);
    CU_ASSERT_EQUAL(fw->q->buffer_id, 41);
    CU_ASSERT_EQUAL(fw->v->offset, 1024);
    CU_ASSERT_EQUAL(fw->q->n_shape, 4);
    CU_ASSERT_EQUAL(fw->q->n_strides, 0);
    CU_ASSERT_EQUAL(fw->k->n_strides, 4);
    CU_ASSERT_EQUAL(fw->k->strides[0], 1000);
    CU_ASSERT_EQUAL(fw->lse->n_shape, 3);
    CU_ASSERT_EQUAL(fw->lse->n_strides, 0);
    CU_ASSERT_PTR_NULL(m.sync); /* no event sync asked for: none sent */

    /* a buffer that is not registered in this session cannot be sent */
    f.b.reg = DASH__REG_NONE;
    CU_ASSERT_EQUAL(dash__op_encode(&f.c, &r, &m, &st), DASH_ENOBUF);
    f.b.reg = DASH__REG_FAILED;
    f.b.reg_code = DASH_EBOUNDS;
    CU_ASSERT_EQUAL(dash__op_encode(&f.c, &r, &m, &st), DASH_EBOUNDS);
}

/* A stream-ordered op names the ring's slots as the daemon's indices (base + slot), and
 * cannot be sent while the ring is not registered in this session. */
static void test_client_event_sync_names_ring_slots_after_the_base(void)
{
    struct fixture f;
    fixture_init(&f);
    struct dash__events ev = {.reg = DASH__REG_OK, .base = 32, .last_record = -1};
    f.c.events = &ev;
    struct dash__req r = {.kind = DASH__BACKWARD, .nt = 9, .wait_slot = 4, .record_slot = 5,
                          .when_queued = 1, .signal_slot = -1};
    r.attn = (struct dash_attn){.dtype = DASH_BF16};
    for (int i = 0; i < 9; i++)
        r.t[i] = dash_tensor_dense(&f.b, 0, 1, 4, 2, 32);
    r.t[4] = dash_tensor_lse(&f.b, 0, 1, 2, 4);
    Dash__Request m = DASH__REQUEST__INIT;
    struct dash__op_storage st;
    CU_ASSERT_EQUAL_FATAL(dash__op_encode(&f.c, &r, &m, &st), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m.sync);
    CU_ASSERT(m.sync->has_wait_event && m.sync->wait_event == 36);
    CU_ASSERT(m.sync->has_record_event && m.sync->record_event == 37);
    CU_ASSERT(m.sync->has_reply_when_queued && m.sync->reply_when_queued);

    Dash__Request m2 = DASH__REQUEST__INIT;
    ev.reg = DASH__REG_PENDING;
    CU_ASSERT_EQUAL(dash__op_encode(&f.c, &r, &m2, &st), DASH_ENOENT);
    ev.reg = DASH__REG_FAILED;
    ev.reg_code = DASH_ENOTSUP;
    CU_ASSERT_EQUAL(dash__op_encode(&f.c, &r, &m2, &st), DASH_ENOTSUP);
    f.c.events = NULL;
    CU_ASSERT_EQUAL(dash__op_encode(&f.c, &r, &m2, &st), DASH_ENOENT);
}

/* A signal-ordered op names its slot's two words in the semaphore buffer (ready at
 * 8 * slot, done at 8 * (slots + slot)) with its sequence number, and cannot be sent
 * while that buffer is not registered in this session. */
static void test_client_signal_sync_names_the_words_of_its_slot(void)
{
    struct fixture f;
    fixture_init(&f);
    struct dash_buffer sigbuf = {.owner = &f.c, .kind = DASH__BUF_CUDA, .reg = DASH__REG_OK,
                                 .id = 77, .size = 3 * DASH__SIGNAL_SLOTS * 8};
    struct dash__signals g = {.buf = &sigbuf};
    f.c.signals = &g;
    struct dash__req r = {.kind = DASH__FORWARD, .nt = 5, .wait_slot = -1, .record_slot = -1,
                          .signal_slot = 9, .signal_seq = 265};
    r.attn = (struct dash_attn){.dtype = DASH_BF16};
    for (int i = 0; i < 5; i++)
        r.t[i] = dash_tensor_dense(&f.b, 0, 1, 4, 2, 32);
    r.t[4] = dash_tensor_lse(&f.b, 0, 1, 2, 4);
    Dash__Request m = DASH__REQUEST__INIT;
    struct dash__op_storage st;
    CU_ASSERT_EQUAL_FATAL(dash__op_encode(&f.c, &r, &m, &st), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m.sync);
    CU_ASSERT(m.sync->has_signal_buffer && m.sync->signal_buffer == 77);
    CU_ASSERT(m.sync->has_ready_offset && m.sync->ready_offset == 72);
    CU_ASSERT(m.sync->has_done_offset && m.sync->done_offset == 8 * (DASH__SIGNAL_SLOTS + 9));
    CU_ASSERT(m.sync->has_signal_seq && m.sync->signal_seq == 265);
    /* the fail word: the daemon writes it instead of done when the op fails */
    CU_ASSERT(m.sync->has_fail_offset && m.sync->fail_offset == 8 * (2 * DASH__SIGNAL_SLOTS + 9));
    CU_ASSERT(!m.sync->has_wait_event && !m.sync->has_record_event && !m.sync->reply_when_queued);
    Dash__Request m2 = DASH__REQUEST__INIT;
    sigbuf.reg = DASH__REG_PENDING;
    CU_ASSERT_EQUAL(dash__op_encode(&f.c, &r, &m2, &st), DASH_ENOBUF);
    sigbuf.reg = DASH__REG_FAILED;
    sigbuf.reg_code = DASH_ENOTSUP;
    CU_ASSERT_EQUAL(dash__op_encode(&f.c, &r, &m2, &st), DASH_ENOTSUP);
    f.c.signals = NULL;
}

/* ---- the poison of a failed stream-ordered op (dash_poison.c) -------------------------- */

struct mark {
    unsigned char *bytes;
    size_t size;
    int bad; /* a run with pitch < width, or outside the buffer */
};

static int mark_run(void *ctx, const struct dash__run *r)
{
    struct mark *m = ctx;
    if (r->pitch < r->width || r->height == 0 || r->width == 0)
        m->bad = 1;
    for (uint64_t row = 0; row < r->height; row++)
        for (uint64_t i = 0; i < r->width; i++) {
            uint64_t at = r->offset + row * r->pitch + i;
            if (at >= m->size)
                m->bad = 1;
            else
                m->bytes[at]++;
        }
    return 0;
}

/* The runs of random strided tensors (permuted dims, padding, stride 0, sizes 0 and 1)
 * cover exactly the bytes of their elements, and no others: checked byte by byte against
 * enumerating every element. */
static void test_client_poison_runs_cover_exactly_the_elements(void)
{
    enum { SIZE = 1 << 16 };
    unsigned char *want = calloc(SIZE, 1), *got = calloc(SIZE, 1);
    CU_ASSERT_FATAL(want && got);
    struct dash_buffer b = {.size = SIZE};
    struct tu_rng rng;
    tu_rng_init(&rng, 0x90150);
    int tensors = 0;
    for (int trial = 0; trial < 3000; trial++) {
        struct dash_tensor t = {.buf = &b, .ndim = 3 + (int32_t)(tu_next(&rng) % 2)};
        const size_t elem = (size_t)1 << (1 + tu_next(&rng) % 3); /* 2, 4, 8 */
        t.offset = (tu_next(&rng) % 16) * elem;
        for (int32_t i = 0; i < t.ndim; i++)
            t.shape[i] = tu_next(&rng) % 12 == 0 ? 0 : 1 + (int64_t)(tu_next(&rng) % 4);
        if (tu_next(&rng) % 4 != 0) {
            /* a layout: dims in a random order, each padded by 0..2 elements */
            int32_t order[4] = {0, 1, 2, 3};
            for (int32_t i = t.ndim - 1; i > 0; i--) {
                int32_t j = (int32_t)(tu_next(&rng) % (uint64_t)(i + 1)), x = order[i];
                order[i] = order[j];
                order[j] = x;
            }
            int64_t st = 1;
            for (int32_t i = t.ndim - 1; i >= 0; i--) {
                const int32_t d = order[i];
                t.strides[d] = tu_next(&rng) % 6 == 0 ? 0 : st; /* 0: broadcast (overlap) */
                st = st * (t.shape[d] > 0 ? t.shape[d] : 1) + (int64_t)(tu_next(&rng) % 3);
            }
        } /* else all zero: dense */
        char why[200];
        if (dash__tensor_check(&t, elem, why, sizeof why) != 0)
            continue;
        tensors++;
        memset(want, 0, SIZE);
        memset(got, 0, SIZE);
        int64_t dense[4], n = 1;
        for (int32_t i = t.ndim - 1; i >= 0; i--) {
            dense[i] = n;
            n *= t.shape[i];
        }
        int all_zero = 1;
        for (int32_t i = 0; i < t.ndim; i++)
            all_zero &= t.strides[i] == 0;
        for (int64_t e = 0; e < n; e++) {
            uint64_t at = t.offset;
            for (int32_t i = 0; i < t.ndim; i++) {
                const int64_t idx = e / dense[i] % t.shape[i];
                at += (uint64_t)idx * (uint64_t)(all_zero ? dense[i] : t.strides[i]) * elem;
            }
            for (size_t k = 0; k < elem; k++)
                want[at + k] = 1;
        }
        struct mark m = {got, SIZE, 0};
        CU_ASSERT_EQUAL_FATAL(dash__tensor_runs(&t, elem, mark_run, &m), 0);
        CU_ASSERT_FALSE(m.bad);
        for (size_t i = 0; i < SIZE; i++)
            if ((got[i] != 0) != want[i]) {
                CU_FAIL("a run missed an element's byte, or covered a byte of no element");
                break;
            }
    }
    CU_ASSERT(tensors > 1000);
    /* the layouts that matter are one run: dense, and dq of a packed (b, s, 3, h, d) */
    int count = 0;
    struct dash_tensor d = dash_tensor_dense(&b, 64, 2, 8, 4, 16);
    struct mark m = {got, SIZE, 0};
    memset(got, 0, SIZE);
    CU_ASSERT_EQUAL(dash__tensor_runs(&d, 2, mark_run, &m), 0);
    for (size_t i = 0; i < SIZE; i++)
        count += got[i] != 0;
    CU_ASSERT_EQUAL(count, 2 * 8 * 4 * 16 * 2);
    struct dash_tensor packed = {.buf = &b, .offset = 0, .ndim = 4, .shape = {2, 8, 4, 16},
                                 .strides = {8 * 3 * 4 * 16, 3 * 4 * 16, 16, 1}};
    memset(got, 0, SIZE);
    m = (struct mark){got, SIZE, 0};
    CU_ASSERT_EQUAL(dash__tensor_runs(&packed, 2, mark_run, &m), 0);
    count = 0;
    for (size_t i = 0; i < SIZE; i++)
        count += got[i] != 0;
    CU_ASSERT_EQUAL(count, 2 * 8 * 4 * 16 * 2); /* dk and dv, between, untouched */
    free(want);
    free(got);
}

/* Outputs that reach past their buffer, or have negative strides or shapes, are refused
 * before anything is queued: their poison would write memory the caller never gave. */
static void test_client_poison_check_refuses_tensors_outside_their_buffer(void)
{
    struct dash_buffer b = {.size = 4096};
    char why[200];
    struct dash_tensor t = dash_tensor_dense(&b, 0, 1, 8, 4, 32); /* 1024 bf16: 2048 bytes */
    CU_ASSERT_EQUAL(dash__tensor_check(&t, 2, why, sizeof why), 0);
    t.offset = 2048;
    CU_ASSERT_EQUAL(dash__tensor_check(&t, 2, why, sizeof why), 0); /* ends exactly at the end */
    t.offset = 2050;
    CU_ASSERT_EQUAL(dash__tensor_check(&t, 2, why, sizeof why), DASH_EBOUNDS);
    CU_ASSERT(strstr(why, "past its buffer") != NULL);
    t.offset = 0;
    CU_ASSERT_EQUAL(dash__tensor_check(&t, 4, why, sizeof why), 0);
    CU_ASSERT_EQUAL(dash__tensor_check(&t, 8, why, sizeof why), DASH_EBOUNDS);
    t.strides[0] = -1;
    CU_ASSERT_EQUAL(dash__tensor_check(&t, 2, why, sizeof why), DASH_EINVAL);
    t = dash_tensor_dense(&b, 0, 1, 8, 4, 32);
    t.strides[1] = INT64_MAX / 2; /* overflow, not a wrap into the buffer */
    CU_ASSERT_EQUAL(dash__tensor_check(&t, 2, why, sizeof why), DASH_EBOUNDS);
    t = dash_tensor_dense(&b, UINT64_MAX - 4, 1, 1, 1, 1);
    CU_ASSERT_EQUAL(dash__tensor_check(&t, 8, why, sizeof why), DASH_EBOUNDS);
    t = dash_tensor_dense(&b, 5000, 0, 8, 4, 32); /* empty: nothing to write anywhere */
    CU_ASSERT_EQUAL(dash__tensor_check(&t, 2, why, sizeof why), 0);
    struct dash_tensor lse = dash_tensor_lse(&b, 4096 - 4 * 4 * 8, 1, 4, 8);
    CU_ASSERT_EQUAL(dash__tensor_check(&lse, 4, why, sizeof why), 0);
    lse.offset += 4;
    CU_ASSERT_EQUAL(dash__tensor_check(&lse, 4, why, sizeof why), DASH_EBOUNDS);
}

static void test_client_error_table_matches_proto(void)
{
    static const struct {
        const char *name;
        int value;
        const char *msg;
    } pub[] = {
#define E_(name, value, msg) {#name, value, msg},
        DASH_ERROR_TABLE(E_)
#undef E_
    }, proto[] = {
#define E_(name, value, msg) {#name, value, msg},
        DASH_ERRNO_MAP(E_)
#undef E_
    };
    size_t n = sizeof pub / sizeof pub[0];
    CU_ASSERT_EQUAL_FATAL(n, sizeof proto / sizeof proto[0]);
    for (size_t i = 0; i < n; i++) {
        char name[64];
        CU_ASSERT_STRING_EQUAL(pub[i].name, proto[i].name);
        CU_ASSERT_EQUAL(pub[i].value, proto[i].value);
        CU_ASSERT_STRING_EQUAL(pub[i].msg, proto[i].msg);
        /* and the library's functions cover every code */
        snprintf(name, sizeof name, "DASH_%s", pub[i].name);
        CU_ASSERT_STRING_EQUAL(dash_errname(pub[i].value), name);
        CU_ASSERT_STRING_EQUAL(dash_strerror(pub[i].value), pub[i].msg);
    }
    CU_ASSERT_STRING_EQUAL(dash_strerror(0), "success");
    CU_ASSERT_EQUAL(DASH_EAGAIN, -EAGAIN);
    CU_ASSERT_EQUAL(DASH_ENOSESSION, -4006);
}

static void test_client_default_endpoint_follows_environment(void)
{
    char buf[256], *saved = getenv("DASHD_ENDPOINT");
    if (saved)
        saved = strdup(saved);
    setenv("DASHD_ENDPOINT", "ipc:///tmp/dash-test.sock", 1);
    CU_ASSERT_EQUAL(dash_default_endpoint(buf, sizeof buf), 0);
    CU_ASSERT_STRING_EQUAL(buf, "ipc:///tmp/dash-test.sock");
    CU_ASSERT_EQUAL(dash_default_endpoint(buf, 8), -ENAMETOOLONG);
    CU_ASSERT_EQUAL(dash_default_endpoint(NULL, 8), DASH_EINVAL);
    if (saved) {
        setenv("DASHD_ENDPOINT", saved, 1);
        free(saved);
    } else {
        unsetenv("DASHD_ENDPOINT");
    }
}

/* The table replies are matched through: random puts and deletes against a plain array. */
static void test_client_request_table_matches_a_reference(void)
{
    enum { KEYS = 2000, STEPS = 50000 };
    struct tu_rng rng;
    tu_rng_init(&rng, tu_seed() ^ 0xc11e47);
    static void *ref[KEYS + 1];
    memset(ref, 0, sizeof ref);
    struct dash__map m = {0};
    size_t live = 0;
    for (int s = 0; s < STEPS; s++) {
        /* a small key range makes collisions and deletes inside probe runs common */
        uint64_t key = 1 + tu_next(&rng) % KEYS;
        if (tu_next(&rng) % 3) {
            void *val = (void *)(uintptr_t)(tu_next(&rng) | 1);
            CU_ASSERT_EQUAL_FATAL(dash__map_put(&m, key, val), 0);
            live += ref[key] == NULL;
            ref[key] = val;
        } else {
            dash__map_del(&m, key);
            live -= ref[key] != NULL;
            ref[key] = NULL;
        }
        if (s % 997 == 0) {
            for (uint64_t k = 1; k <= KEYS; k++)
                CU_ASSERT_PTR_EQUAL_FATAL(dash__map_get(&m, k), ref[k]);
            CU_ASSERT_EQUAL_FATAL(m.n, live);
        }
    }
    CU_ASSERT_PTR_NULL(dash__map_get(&m, 0));
    dash__map_free(&m);
    CU_ASSERT_PTR_NULL(dash__map_get(&m, 1));
}

int suite_client(void)
{
    CU_pSuite s = CU_add_suite("client", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_client_connect_without_daemon_fails_at_once);
    ADD_TEST(s, test_client_connect_rejects_bad_arguments);
    ADD_TEST(s, test_client_null_handles_are_einval_and_close_null_is_fine);
    ADD_TEST(s, test_client_bad_tensors_are_einval_before_sending);
    ADD_TEST(s, test_client_bad_attention_params_are_einval_before_sending);
    ADD_TEST(s, test_client_buffer_and_ticket_misuse);
    ADD_TEST(s, test_client_tensor_helpers_fill_dense_strides);
    ADD_TEST(s, test_client_forward_message_carries_ids_and_params);
    ADD_TEST(s, test_client_event_sync_names_ring_slots_after_the_base);
    ADD_TEST(s, test_client_signal_sync_names_the_words_of_its_slot);
    ADD_TEST(s, test_client_poison_runs_cover_exactly_the_elements);
    ADD_TEST(s, test_client_poison_check_refuses_tensors_outside_their_buffer);
    ADD_TEST(s, test_client_error_table_matches_proto);
    ADD_TEST(s, test_client_default_endpoint_follows_environment);
    ADD_TEST(s, test_client_request_table_matches_a_reference);
    return 0;
}
