// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_validate.c - the daemon's request validation (daemon/validate.c): every rule of the
 * table in docs/protocol.md, each with a request that must be refused with the right code
 * and a near miss that must pass - an extent exactly equal to the buffer passes and one
 * byte more fails, offsets and strides near 2^64 never wrap into acceptance, and so on.
 * Plus the CPU backend's own limits (daemon/backend_cpu.c).
 *
 * A fixture is a valid request with one buffer per tensor, each exactly as large as its
 * dense tensor; a test breaks one thing at a time.
 */
#include "suites.h"
#include "../daemon/backend.h"
#include "../daemon/validate.h"
#include "../proto/errors.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- fixtures ---------------------------------------------------------------------- */

static const struct val_limits cpu_limits = {
    .head_dim_min = 32,
    .head_dim_max = 256,
    .block_max = 512,
    .dtypes = (1u << DTYPE_F32) | (1u << DTYPE_F16) | (1u << DTYPE_BF16) | (1u << DTYPE_F64),
};

/* The session's buffers: id -> size, and the object each maps (obj 0: its own, named by
 * its id) from base. */
struct bufs {
    uint64_t id[VAL_SLOTS + 2], size[VAL_SLOTS + 2], obj[VAL_SLOTS + 2], base[VAL_SLOTS + 2];
    int n;
};

/* Each buffer maps the object its fixture says, by default one of its own. */
static int lookup(void *ctx, uint64_t id, struct val_buffer *ret)
{
    const struct bufs *b = ctx;
    for (int i = 0; i < b->n; i++)
        if (b->id[i] == id) {
            ret->size = b->size[i];
            ret->object[0] = b->obj[i] ? b->obj[i] : id;
            ret->object[1] = 0;
            ret->base = b->base[i];
            return 0;
        }
    return DASH_ENOBUF;
}

/* A forward or backward request; tensor slot s lives alone in buffer 100 + s. */
struct fx {
    Dash__Forward fwd;
    Dash__Backward bwd;
    Dash__AttnParams params;
    Dash__TensorRef t[VAL_SLOTS];
    int64_t shape[VAL_SLOTS][4];
    int64_t strides[VAL_SLOTS][4];
    struct bufs bufs;
    int backward;
    struct val_plan plan;
    char msg[256];
};

static int elem(Dash__DType d)
{
    return d == DASH__DTYPE__F64 ? 8 : d == DASH__DTYPE__F32 ? 4 : 2;
}

static void set_shape(struct fx *x, int s, int n, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t v[4] = {a, b, c, d};
    memcpy(x->shape[s], v, sizeof v);
    x->t[s].n_shape = (size_t)n;
    x->t[s].shape = x->shape[s];
}

static void set_strides(struct fx *x, int s, int n, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t v[4] = {a, b, c, d};
    memcpy(x->strides[s], v, sizeof v);
    x->t[s].n_strides = (size_t)n;
    x->t[s].strides = x->strides[s];
}

/* Make slot s's buffer exactly `size` bytes. */
static void set_size(struct fx *x, int s, uint64_t size)
{
    x->bufs.size[s] = size;
}

static void fx_init(struct fx *x, int backward, Dash__DType dt, int B, int Sq, int Sk, int Hq,
                    int Hkv, int D)
{
    memset(x, 0, sizeof *x);
    x->backward = backward;
    dash__attn_params__init(&x->params);
    x->params.dtype = dt;
    x->params.mask = DASH__MASK__CAUSAL;
    int slots = backward ? VAL_SLOTS : VAL_LSE + 1;
    uint64_t es = (uint64_t)elem(dt);
    for (int s = 0; s < slots; s++) {
        dash__tensor_ref__init(&x->t[s]);
        x->t[s].buffer_id = 100 + (uint64_t)s;
        int kv = s == VAL_K || s == VAL_V || s == VAL_DK || s == VAL_DV;
        if (s == VAL_LSE) {
            set_shape(x, s, 3, B, Hq, Sq, 0);
            x->bufs.size[s] = 4ull * (uint64_t)B * (uint64_t)Hq * (uint64_t)Sq;
        } else if (kv) {
            set_shape(x, s, 4, B, Sk, Hkv, D);
            x->bufs.size[s] = es * (uint64_t)B * (uint64_t)Sk * (uint64_t)Hkv * (uint64_t)D;
        } else {
            set_shape(x, s, 4, B, Sq, Hq, D);
            x->bufs.size[s] = es * (uint64_t)B * (uint64_t)Sq * (uint64_t)Hq * (uint64_t)D;
        }
        x->bufs.id[s] = 100 + (uint64_t)s;
    }
    x->bufs.n = slots;
    dash__forward__init(&x->fwd);
    dash__backward__init(&x->bwd);
    x->fwd.params = x->bwd.params = &x->params;
    x->fwd.q = x->bwd.q = &x->t[VAL_Q];
    x->fwd.k = x->bwd.k = &x->t[VAL_K];
    x->fwd.v = x->bwd.v = &x->t[VAL_V];
    x->fwd.out = x->bwd.out = &x->t[VAL_OUT];
    x->fwd.lse = x->bwd.lse = &x->t[VAL_LSE];
    x->bwd.dout = &x->t[VAL_DOUT];
    x->bwd.dq = &x->t[VAL_DQ];
    x->bwd.dk = &x->t[VAL_DK];
    x->bwd.dv = &x->t[VAL_DV];
}

/* The common case: f16, B=2, Sq=16, Sk=24, Hq=8, Hkv=2, D=64. */
static void fx_fwd(struct fx *x)
{
    fx_init(x, 0, DASH__DTYPE__F16, 2, 16, 24, 8, 2, 64);
}

static void fx_bwd(struct fx *x)
{
    fx_init(x, 1, DASH__DTYPE__F16, 2, 16, 24, 8, 2, 64);
}

static int run_lim(struct fx *x, const struct val_limits *lim)
{
    x->msg[0] = '\0';
    if (x->backward)
        return val_backward(&x->bwd, lim, lookup, &x->bufs, x->msg, sizeof x->msg, &x->plan);
    return val_forward(&x->fwd, lim, lookup, &x->bufs, x->msg, sizeof x->msg, &x->plan);
}

static int run(struct fx *x)
{
    return run_lim(x, &cpu_limits);
}

/* Check a code and, on failure, that a reason was written. */
#define EXPECT(x, code)                                                     \
    do {                                                                    \
        int rc_ = run(x);                                                   \
        CU_ASSERT_EQUAL(rc_, (code));                                       \
        if (rc_ != (code))                                                  \
            fprintf(stderr, "\n  %s:%d: got %s (%s), wanted %s\n", __FILE__, \
                    __LINE__, dash_errname(rc_), (x)->msg, dash_errname(code)); \
        if ((code) != 0)                                                    \
            CU_ASSERT(strlen((x)->msg) > 5);                                \
    } while (0)

/* ---- valid requests ------------------------------------------------------------------ */

static void test_validate_valid_forward_gives_plan(void)
{
    struct fx x;
    fx_fwd(&x);
    EXPECT(&x, 0);
    const struct val_plan *p = &x.plan;
    CU_ASSERT_EQUAL(p->backward, 0);
    CU_ASSERT_EQUAL(p->slots, VAL_LSE + 1);
    CU_ASSERT_EQUAL(p->prob.batch, 2);
    CU_ASSERT_EQUAL(p->prob.seqlen_q, 16);
    CU_ASSERT_EQUAL(p->prob.seqlen_k, 24);
    CU_ASSERT_EQUAL(p->prob.heads_q, 8);
    CU_ASSERT_EQUAL(p->prob.heads_kv, 2);
    CU_ASSERT_EQUAL(p->prob.head_dim, 64);
    CU_ASSERT_EQUAL(p->prob.dtype, DTYPE_F16);
    CU_ASSERT_EQUAL(p->prob.mask, SCHED_MASK_CAUSAL);
    CU_ASSERT(fabsf(p->prob.scale - 0.125f) < 1e-7f); /* absent: 1/sqrt(64) */
    CU_ASSERT_EQUAL(p->cfg.sched, SCHED_AUTO);
    CU_ASSERT_EQUAL(p->cfg.w, 0);
    CU_ASSERT_EQUAL(p->cfg.block_m, 0);
    CU_ASSERT_EQUAL(p->cfg.block_n, 0);
    /* dense strides filled in, extents exact */
    CU_ASSERT_EQUAL(p->t[VAL_Q].stride[0], 16 * 8 * 64);
    CU_ASSERT_EQUAL(p->t[VAL_Q].stride[1], 8 * 64);
    CU_ASSERT_EQUAL(p->t[VAL_Q].stride[2], 64);
    CU_ASSERT_EQUAL(p->t[VAL_Q].stride[3], 1);
    CU_ASSERT_EQUAL(p->t[VAL_Q].extent, x.bufs.size[VAL_Q]);
    CU_ASSERT_EQUAL(p->t[VAL_K].extent, x.bufs.size[VAL_K]);
    CU_ASSERT_EQUAL(p->t[VAL_LSE].extent, x.bufs.size[VAL_LSE]);
    CU_ASSERT_EQUAL(p->t[VAL_LSE].elem_size, 4);
    CU_ASSERT_EQUAL(p->t[VAL_Q].elem_size, 2);
    CU_ASSERT(!p->t[VAL_Q].output && !p->t[VAL_K].output && !p->t[VAL_V].output);
    CU_ASSERT(p->t[VAL_OUT].output && p->t[VAL_LSE].output);
}

static void test_validate_valid_backward_gives_plan(void)
{
    struct fx x;
    fx_bwd(&x);
    x.params.has_schedule = 1;
    x.params.schedule = DASH__SCHEDULE__SHIFT;
    x.params.has_wave = 1;
    x.params.wave = 16;
    x.params.has_block_m = x.params.has_block_n = 1;
    x.params.block_m = 32;
    x.params.block_n = 96;
    x.params.has_scale = 1;
    x.params.scale = 0.5f;
    EXPECT(&x, 0);
    const struct val_plan *p = &x.plan;
    CU_ASSERT_EQUAL(p->backward, 1);
    CU_ASSERT_EQUAL(p->slots, VAL_SLOTS);
    CU_ASSERT_EQUAL(p->cfg.sched, SCHED_SHIFT);
    CU_ASSERT_EQUAL(p->cfg.w, 16);
    CU_ASSERT_EQUAL(p->cfg.block_m, 32);
    CU_ASSERT_EQUAL(p->cfg.block_n, 96);
    CU_ASSERT_EQUAL(p->prob.scale, 0.5f);
    CU_ASSERT(!p->t[VAL_LSE].output && !p->t[VAL_OUT].output && !p->t[VAL_DOUT].output);
    CU_ASSERT(p->t[VAL_DQ].output && p->t[VAL_DK].output && p->t[VAL_DV].output);
}

static void test_validate_schedules_map_explicitly(void)
{
    static const struct {
        Dash__Schedule proto;
        enum sched_kind kind;
    } map[] = {
        {DASH__SCHEDULE__AUTO, SCHED_AUTO},         {DASH__SCHEDULE__ATOMIC, SCHED_ATOMIC},
        {DASH__SCHEDULE__ASCENDING, SCHED_ASCENDING}, {DASH__SCHEDULE__DESCENDING, SCHED_DESCENDING},
        {DASH__SCHEDULE__SPT, SCHED_SPT},           {DASH__SCHEDULE__SHIFT, SCHED_SHIFT},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        struct fx x;
        fx_bwd(&x);
        x.params.has_schedule = 1;
        x.params.schedule = map[i].proto;
        EXPECT(&x, 0);
        CU_ASSERT_EQUAL(x.plan.cfg.sched, map[i].kind);
    }
}

static void test_validate_failure_leaves_plan_untouched(void)
{
    struct fx x;
    fx_fwd(&x);
    x.t[VAL_K].buffer_id = 7;
    memset(&x.plan, 0xa5, sizeof x.plan);
    EXPECT(&x, DASH_ENOBUF);
    const unsigned char *b = (const unsigned char *)&x.plan;
    int untouched = 1;
    for (size_t i = 0; i < sizeof x.plan; i++)
        untouched &= b[i] == 0xa5;
    CU_ASSERT(untouched);
}

/* ---- ENOBUF, EMALFORMED ------------------------------------------------------------------ */

static void test_validate_unknown_buffer_is_enobuf(void)
{
    for (int s = 0; s < VAL_SLOTS; s++) {
        struct fx x;
        fx_bwd(&x);
        x.t[s].buffer_id = 99; /* another session's id looks exactly like this */
        EXPECT(&x, DASH_ENOBUF);
        CU_ASSERT(strstr(x.msg, val_slot_name((enum val_slot)s)) == x.msg);
    }
    /* near miss: tensors may share one registered buffer */
    struct fx x;
    fx_fwd(&x);
    x.t[VAL_V].buffer_id = 100 + VAL_K;
    EXPECT(&x, 0);
}

static void test_validate_missing_parts_are_malformed(void)
{
    struct fx x;
    fx_fwd(&x);
    x.fwd.params = NULL;
    EXPECT(&x, DASH_EMALFORMED);
    fx_bwd(&x);
    x.bwd.dv = NULL;
    EXPECT(&x, DASH_EMALFORMED);
    CU_ASSERT_EQUAL(val_forward(NULL, &cpu_limits, lookup, &x.bufs, x.msg, sizeof x.msg, &x.plan),
                    DASH_EMALFORMED);
}

/* ---- EBOUNDS -------------------------------------------------------------------------------- */

static void test_validate_extent_equal_to_size_passes_one_more_byte_fails(void)
{
    for (int s = 0; s < VAL_SLOTS; s++) {
        struct fx x;
        fx_bwd(&x);
        uint64_t exact = x.bufs.size[s];
        EXPECT(&x, 0);
        set_size(&x, s, exact - 1);
        EXPECT(&x, DASH_EBOUNDS);
        /* the same by offset: one element in, buffer one element larger passes */
        fx_bwd(&x);
        x.t[s].offset = 2;
        set_size(&x, s, exact + 2);
        EXPECT(&x, 0);
        x.t[s].offset = 3;
        EXPECT(&x, DASH_EBOUNDS);
    }
}

static void test_validate_bounds_message_names_numbers(void)
{
    struct fx x;
    fx_init(&x, 0, DASH__DTYPE__F32, 1, 4, 4, 4, 4, 64); /* q: 4096 bytes */
    x.t[VAL_Q].offset = 8;
    EXPECT(&x, DASH_EBOUNDS);
    CU_ASSERT_STRING_EQUAL(x.msg, "q: offset+extent 4104 > buffer size 4096");
}

static void test_validate_offset_near_2_64_does_not_wrap(void)
{
    /* q is 2*16*8*64 f16 = 32768 bytes; a wrapping sum would land on a small number */
    static const uint64_t offsets[] = {UINT64_MAX, UINT64_MAX - 1, UINT64_MAX - 4095,
                                       UINT64_MAX - 32768 + 1, UINT64_MAX - 32767 + 4096};
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
        struct fx x;
        fx_fwd(&x);
        x.t[VAL_Q].offset = offsets[i];
        set_size(&x, VAL_Q, UINT64_MAX); /* even the largest buffer cannot hold it */
        EXPECT(&x, DASH_EBOUNDS);
        set_size(&x, VAL_Q, 1 << 20); /* nor an ordinary one */
        EXPECT(&x, DASH_EBOUNDS);
    }
    /* near miss: the last possible placement in a 2^64-1 byte buffer */
    struct fx x;
    fx_fwd(&x);
    uint64_t ext = x.bufs.size[VAL_Q];
    set_size(&x, VAL_Q, UINT64_MAX);
    CU_ASSERT_EQUAL(ext, 32768);
    x.t[VAL_Q].offset = UINT64_MAX - ext;
    EXPECT(&x, 0);
    x.t[VAL_Q].offset++;
    EXPECT(&x, DASH_EBOUNDS);
}

static void test_validate_offset_at_size_is_out_of_bounds(void)
{
    struct fx x;
    fx_fwd(&x);
    x.t[VAL_V].offset = x.bufs.size[VAL_V];
    EXPECT(&x, DASH_EBOUNDS);
}

static void test_validate_stride_tricks_cannot_reach_outside(void)
{
    struct fx x;
    /* (dim-1) * stride wraps to 0 modulo 2^64: 4 * 2^62 */
    fx_fwd(&x);
    set_shape(&x, VAL_Q, 4, 5, 16, 8, 64);
    set_shape(&x, VAL_K, 4, 5, 24, 2, 64);
    set_shape(&x, VAL_V, 4, 5, 24, 2, 64);
    set_shape(&x, VAL_OUT, 4, 5, 16, 8, 64);
    set_shape(&x, VAL_LSE, 3, 5, 8, 16, 0);
    set_size(&x, VAL_K, UINT64_MAX);
    set_size(&x, VAL_V, UINT64_MAX);
    set_size(&x, VAL_OUT, UINT64_MAX);
    set_size(&x, VAL_LSE, UINT64_MAX);
    set_size(&x, VAL_Q, UINT64_MAX);
    set_strides(&x, VAL_Q, 4, 1ll << 62, 512, 64, 1);
    EXPECT(&x, DASH_EBOUNDS);
    /* the sum of the terms wraps, each term alone fits */
    set_strides(&x, VAL_Q, 4, (1ll << 62) / 4 * 3, INT64_MAX / 15, 64, 1);
    EXPECT(&x, DASH_EBOUNDS);
    /* the element count fits, times the element size it does not */
    set_strides(&x, VAL_Q, 4, INT64_MAX / 4, 0, 0, 1);
    EXPECT(&x, DASH_EBOUNDS);
    /* near miss: huge strides on a dim of size 1 reach nothing */
    fx_fwd(&x);
    set_shape(&x, VAL_Q, 4, 2, 16, 8, 64);
    set_shape(&x, VAL_K, 4, 2, 1, 2, 64); /* Sk = 1 */
    set_shape(&x, VAL_V, 4, 2, 1, 2, 64);
    set_strides(&x, VAL_K, 4, 128, INT64_MAX, 64, 1);
    set_size(&x, VAL_K, 2 * 2 * 64 * 2);
    set_size(&x, VAL_V, 2 * 2 * 64 * 2);
    EXPECT(&x, 0);
    /* a big but honest stride that reaches exactly the end passes, one element more not */
    fx_fwd(&x);
    set_strides(&x, VAL_Q, 4, 1000000, 8 * 64, 64, 1);
    uint64_t last = 1000000 + 15 * 512 + 7 * 64 + 63;
    set_size(&x, VAL_Q, (last + 1) * 2);
    EXPECT(&x, 0);
    set_strides(&x, VAL_Q, 4, 1000001, 8 * 64, 64, 1);
    EXPECT(&x, DASH_EBOUNDS);
}

static void test_validate_element_size_follows_dtype(void)
{
    struct fx x;
    fx_fwd(&x); /* f16 buffers, exactly sized */
    EXPECT(&x, 0);
    x.params.dtype = DASH__DTYPE__F32; /* the same buffers now hold half the elements */
    EXPECT(&x, DASH_EBOUNDS);
    x.params.dtype = DASH__DTYPE__BF16;
    EXPECT(&x, 0);
}

/* ---- ESHAPE -------------------------------------------------------------------------------- */

static void test_validate_wrong_dim_count_is_eshape(void)
{
    struct fx x;
    fx_fwd(&x);
    set_shape(&x, VAL_Q, 3, 2, 16, 8, 0);
    EXPECT(&x, DASH_ESHAPE);
    fx_fwd(&x);
    x.t[VAL_K].n_shape = 5; /* refused on the count alone, before any dim is read */
    EXPECT(&x, DASH_ESHAPE);
    fx_fwd(&x);
    set_shape(&x, VAL_LSE, 4, 2, 8, 16, 1);
    EXPECT(&x, DASH_ESHAPE);
    fx_fwd(&x);
    x.t[VAL_OUT].n_shape = 0;
    EXPECT(&x, DASH_ESHAPE);
}

static void test_validate_dim_below_one_is_eshape(void)
{
    for (int d = 0; d < 4; d++) {
        struct fx x;
        fx_fwd(&x);
        x.shape[VAL_V][d] = 0;
        EXPECT(&x, DASH_ESHAPE);
        x.shape[VAL_V][d] = -1;
        EXPECT(&x, DASH_ESHAPE);
    }
    /* near miss: every dim 1 (head dim aside) */
    struct fx x;
    fx_init(&x, 1, DASH__DTYPE__F32, 1, 1, 1, 1, 1, 32);
    EXPECT(&x, 0);
}

static void test_validate_dim_beyond_int32_is_eshape(void)
{
    struct fx x;
    fx_fwd(&x);
    x.shape[VAL_K][1] = x.shape[VAL_V][1] = (int64_t)INT32_MAX + 1;
    set_strides(&x, VAL_K, 4, 0, 0, 64, 1);
    set_strides(&x, VAL_V, 4, 0, 0, 64, 1);
    EXPECT(&x, DASH_ESHAPE);
    /* near miss: INT32_MAX keys, broadcast with stride 0 so they fit in the buffer */
    x.shape[VAL_K][1] = x.shape[VAL_V][1] = INT32_MAX;
    EXPECT(&x, 0);
    CU_ASSERT_EQUAL(x.plan.prob.seqlen_k, INT32_MAX);
}

static void test_validate_disagreeing_shapes_are_eshape(void)
{
    /* every dim of every tensor but q and k (which define them), and k's batch and D */
    for (int s = VAL_K; s < VAL_SLOTS; s++) {
        int nd = s == VAL_LSE ? 3 : 4;
        for (int d = 0; d < nd; d++) {
            if (s == VAL_K && (d == 1 || d == 2))
                continue; /* Sk and Hkv come from k */
            struct fx x;
            fx_bwd(&x);
            x.shape[s][d] += 1;
            int rc = run(&x);
            /* a grown head dim is also a head-dim mismatch; anything may not pass */
            CU_ASSERT(rc == DASH_ESHAPE);
            if (rc != DASH_ESHAPE)
                fprintf(stderr, "\n  slot %d dim %d: %s (%s)\n", s, d, dash_errname(rc), x.msg);
        }
    }
}

static void test_validate_heads_must_divide(void)
{
    struct fx x;
    fx_init(&x, 0, DASH__DTYPE__F32, 1, 4, 4, 8, 3, 64);
    EXPECT(&x, DASH_ESHAPE);
    CU_ASSERT_STRING_EQUAL(x.msg, "k.shape[2]=3 does not divide q heads 8");
    fx_init(&x, 0, DASH__DTYPE__F32, 1, 4, 4, 8, 16, 64); /* more kv heads than q heads */
    EXPECT(&x, DASH_ESHAPE);
    /* near misses: GQA, MQA, MHA */
    fx_init(&x, 0, DASH__DTYPE__F32, 1, 4, 4, 8, 2, 64);
    EXPECT(&x, 0);
    fx_init(&x, 0, DASH__DTYPE__F32, 1, 4, 4, 8, 1, 64);
    EXPECT(&x, 0);
    fx_init(&x, 0, DASH__DTYPE__F32, 1, 4, 4, 8, 8, 64);
    EXPECT(&x, 0);
}

static void test_validate_stride_count_must_match(void)
{
    struct fx x;
    fx_fwd(&x);
    set_strides(&x, VAL_Q, 3, 8 * 64, 64, 1, 0);
    EXPECT(&x, DASH_ESHAPE);
    fx_fwd(&x);
    set_strides(&x, VAL_LSE, 4, 128, 16, 1, 1);
    EXPECT(&x, DASH_ESHAPE);
    /* near miss: all four, dense */
    fx_fwd(&x);
    set_strides(&x, VAL_Q, 4, 16 * 8 * 64, 8 * 64, 64, 1);
    EXPECT(&x, 0);
}

static void test_validate_negative_stride_is_eshape(void)
{
    for (int d = 0; d < 3; d++) {
        struct fx x;
        fx_fwd(&x);
        set_strides(&x, VAL_K, 4, 24 * 2 * 64, 2 * 64, 64, 1);
        x.strides[VAL_K][d] = -1;
        EXPECT(&x, DASH_ESHAPE);
        x.strides[VAL_K][d] = INT64_MIN;
        EXPECT(&x, DASH_ESHAPE);
        /* near miss: a zero stride broadcasts an input */
        x.strides[VAL_K][d] = 0;
        EXPECT(&x, 0);
    }
}

static void test_validate_last_stride_must_be_one(void)
{
    struct fx x;
    fx_fwd(&x);
    set_strides(&x, VAL_V, 4, 24 * 2 * 128, 2 * 128, 128, 2);
    set_size(&x, VAL_V, 2ull * 24 * 2 * 128 * 2);
    EXPECT(&x, DASH_ESHAPE);
    x.strides[VAL_V][3] = 0;
    EXPECT(&x, DASH_ESHAPE);
    x.strides[VAL_V][3] = 1;
    EXPECT(&x, 0);
}

static void test_validate_lse_must_be_dense(void)
{
    struct fx x;
    fx_fwd(&x); /* lse (2, 8, 16) */
    set_strides(&x, VAL_LSE, 3, 8 * 16, 16, 1, 0);
    EXPECT(&x, 0);
    x.strides[VAL_LSE][1] = 17;
    set_size(&x, VAL_LSE, 1 << 20);
    EXPECT(&x, DASH_ESHAPE);
    /* an input lse must be dense too (no broadcast views) */
    fx_bwd(&x);
    set_strides(&x, VAL_LSE, 3, 0, 16, 1, 0);
    EXPECT(&x, DASH_ESHAPE);
    set_strides(&x, VAL_LSE, 3, 8 * 16, 16, 1, 0);
    EXPECT(&x, 0);
}

static void test_validate_overlapping_output_is_eshape(void)
{
    struct fx x;
    fx_fwd(&x);
    const int s = VAL_OUT;
    set_size(&x, s, 1 << 22);
    /* heads one element apart: row h+1 starts inside row h */
    set_strides(&x, s, 4, 16 * 8 * 64, 8 * 64, 63, 1);
    EXPECT(&x, DASH_ESHAPE);
    /* near miss: exactly adjacent */
    x.strides[s][2] = 64;
    EXPECT(&x, 0);
    /* batch stride zero: both batches write the same place */
    set_strides(&x, s, 4, 0, 8 * 64, 64, 1);
    EXPECT(&x, DASH_ESHAPE);
    /* near miss: gaps between rows are fine (a padded or packed layout) */
    set_strides(&x, s, 4, 16 * 3 * 8 * 64, 3 * 8 * 64, 64, 1);
    EXPECT(&x, 0);
    /* transposed (heads outermost) is fine too */
    set_strides(&x, s, 4, 8 * 16 * 64, 64, 16 * 64, 1);
    EXPECT(&x, 0);
    /* two dims with the same stride collide */
    set_strides(&x, s, 4, 16 * 8 * 64, 64, 64, 1);
    EXPECT(&x, DASH_ESHAPE);

    int outs_bwd[] = {VAL_DQ, VAL_DK, VAL_DV};
    for (size_t i = 0; i < 3; i++) {
        fx_bwd(&x);
        int o = outs_bwd[i];
        set_size(&x, o, 1 << 22);
        int64_t S = o == VAL_DQ ? 16 : 24, H = o == VAL_DQ ? 8 : 2;
        set_strides(&x, o, 4, S * H * 64, H * 64 - 1, 64, 1); /* seq rows overlap the last head */
        EXPECT(&x, DASH_ESHAPE);
        x.strides[o][1] = H * 64;
        EXPECT(&x, 0);
    }
    /* near miss: a size-1 dim may have any stride, even 0, in an output */
    fx_init(&x, 0, DASH__DTYPE__F32, 1, 4, 4, 8, 8, 64);
    set_strides(&x, VAL_OUT, 4, 0, 8 * 64, 64, 1);
    EXPECT(&x, 0);
    /* and inputs may overlap themselves freely */
    fx_fwd(&x);
    set_strides(&x, VAL_Q, 4, 0, 0, 0, 1);
    EXPECT(&x, 0);
}

/* Two outputs must not share a byte: lse inside out is refused, dq, dk, dv unbound from
 * one packed (b, s, 3, h, d) tensor are fine, and the same packing shifted by as little
 * as one element (or not at all) is refused. */
/* Two registrations of one object are one memory: out and lse in buffers 103 and 104 that
 * map the same object with lse's bytes inside out's are refused, naming both ids; the
 * same ids mapping disjoint parts of it pass. (Before: only buffer ids were compared.) */
static void test_validate_outputs_through_two_ids_of_one_object_must_not_overlap(void)
{
    struct fx x;
    fx_fwd(&x);
    uint64_t out_bytes = x.bufs.size[VAL_OUT];
    x.bufs.obj[VAL_OUT] = x.bufs.obj[VAL_LSE] = 7;
    x.bufs.base[VAL_OUT] = 0;
    x.bufs.base[VAL_LSE] = out_bytes / 2; /* lse starts inside out */
    EXPECT(&x, DASH_ESHAPE);
    CU_ASSERT(strstr(x.msg, "out and lse overlap") != NULL);
    CU_ASSERT(strstr(x.msg, "103") != NULL && strstr(x.msg, "104") != NULL);
    x.bufs.base[VAL_LSE] = out_bytes; /* right after it */
    EXPECT(&x, 0);
    /* a backward's dq and dk through two ids, same shape, the same bytes */
    struct fx y;
    fx_init(&y, 1, DASH__DTYPE__F16, 2, 16, 16, 8, 8, 64);
    y.bufs.obj[VAL_DQ] = y.bufs.obj[VAL_DK] = 9;
    EXPECT(&y, DASH_ESHAPE);
    CU_ASSERT(strstr(y.msg, "dq and dk overlap") != NULL);
    y.bufs.base[VAL_DK] = y.bufs.size[VAL_DQ];
    EXPECT(&y, 0);
}

static void test_validate_outputs_must_not_overlap_each_other(void)
{
    struct fx x;
    fx_fwd(&x); /* out (2, 16, 8, 64) f16 = 32 KiB, lse (2, 8, 16) f32 = 1 KiB */
    const uint64_t out_bytes = 2 * 16 * 8 * 64 * 2;
    x.t[VAL_LSE].buffer_id = x.t[VAL_OUT].buffer_id;
    set_size(&x, VAL_OUT, out_bytes + 4096);
    x.t[VAL_LSE].offset = out_bytes / 2; /* inside out */
    EXPECT(&x, DASH_ESHAPE);
    CU_ASSERT(strstr(x.msg, "out and lse overlap") != NULL);
    x.t[VAL_LSE].offset = out_bytes; /* near miss: right after it */
    EXPECT(&x, 0);
    x.t[VAL_LSE].offset = out_bytes - 4; /* its last element's 2 bytes... and one more pair */
    EXPECT(&x, DASH_ESHAPE);

    const int64_t B = 2, S = 16, H = 4, D = 64, es = 2;
    const int outs[] = {VAL_DQ, VAL_DK, VAL_DV};
    /* shift: where dk and dv start after dq, in elements (one packed tensor: H*D apart) */
    const struct {
        int64_t dk, dv;
        int rc;
    } cases[] = {
        {H * D, 2 * H * D, 0},                     /* dq, dk, dv = packed.unbind(dim=2) */
        {H * D + 1, 2 * H * D, DASH_ESHAPE},       /* dk one element into dv's rows */
        {H * D - 1, 2 * H * D, DASH_ESHAPE},       /* dk one element into dq's rows */
        {0, 2 * H * D, DASH_ESHAPE},               /* dk is dq */
        {3 * H * D * S, 2 * H * D, DASH_ESHAPE},   /* dk's batch 0 is dq's batch 1 */
        {B * S * 3 * H * D, 2 * B * S * 3 * H * D, 0}, /* three packed tensors apart */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fx_init(&x, 1, DASH__DTYPE__F16, (int)B, (int)S, (int)S, (int)H, (int)H, (int)D);
        const int64_t shift[3] = {0, cases[c].dk, cases[c].dv};
        for (int i = 0; i < 3; i++) {
            x.t[outs[i]].buffer_id = x.t[VAL_DQ].buffer_id;
            x.t[outs[i]].offset = (uint64_t)(shift[i] * es);
            set_strides(&x, outs[i], 4, S * 3 * H * D, 3 * H * D, D, 1);
        }
        set_size(&x, VAL_DQ, (uint64_t)(B * S * 3 * H * D * es) * 3);
        EXPECT(&x, cases[c].rc);
    }
    /* sharing a range with another layout: refused (dk transposed over dq's bytes) */
    fx_init(&x, 1, DASH__DTYPE__F16, (int)B, (int)S, (int)S, (int)H, (int)H, (int)D);
    x.t[VAL_DK].buffer_id = x.t[VAL_DQ].buffer_id;
    set_size(&x, VAL_DQ, (uint64_t)(B * S * H * D * es) * 2);
    x.t[VAL_DK].offset = (uint64_t)(B * S * H * D * es) / 2;
    set_strides(&x, VAL_DK, 4, H * S * D, D, S * D, 1);
    EXPECT(&x, DASH_ESHAPE);
    CU_ASSERT(strstr(x.msg, "dq and dk overlap") != NULL);
}

/* ---- EBADDTYPE, EHEADDIM, ESCHED, EINVAL --------------------------------------------------- */

static void test_validate_dtype(void)
{
    struct fx x;
    fx_fwd(&x);
    x.params.dtype = (Dash__DType)4;
    EXPECT(&x, DASH_EBADDTYPE);
    x.params.dtype = (Dash__DType)-1;
    EXPECT(&x, DASH_EBADDTYPE);
    /* a backend that serves f32 only */
    struct val_limits f32_only = cpu_limits;
    f32_only.dtypes = 1u << DTYPE_F32;
    fx_fwd(&x);
    CU_ASSERT_EQUAL(run_lim(&x, &f32_only), DASH_EBADDTYPE);
    fx_init(&x, 0, DASH__DTYPE__F32, 2, 16, 24, 8, 2, 64);
    CU_ASSERT_EQUAL(run_lim(&x, &f32_only), 0);
    fx_init(&x, 0, DASH__DTYPE__BF16, 2, 16, 24, 8, 2, 64);
    EXPECT(&x, 0);
    CU_ASSERT_EQUAL(x.plan.prob.dtype, DTYPE_BF16);
}

/* float64: 8-byte elements on the CPU engine (bounds sized for them); a GPU backend's
 * limits (f16, bf16) refuse it, saying what it serves and where f64 runs. */
static void test_validate_f64_is_served_by_the_cpu_engine_and_refused_by_a_gpu_backend(void)
{
    struct fx x;
    fx_init(&x, 1, DASH__DTYPE__F64, 2, 16, 24, 8, 2, 64);
    EXPECT(&x, 0);
    CU_ASSERT_EQUAL(x.plan.prob.dtype, DTYPE_F64);
    x.bufs.size[VAL_DQ] -= 1; /* one byte short of the last 8-byte element */
    EXPECT(&x, DASH_EBOUNDS);
    struct val_limits gpu = cpu_limits;
    gpu.dtypes = (1u << DTYPE_F16) | (1u << DTYPE_BF16);
    fx_init(&x, 0, DASH__DTYPE__F64, 2, 16, 24, 8, 2, 64);
    CU_ASSERT_EQUAL(run_lim(&x, &gpu), DASH_EBADDTYPE);
    CU_ASSERT(strstr(x.msg, "f64 is not served") != NULL);
    CU_ASSERT(strstr(x.msg, "serves f16, bf16") != NULL);
    CU_ASSERT(strstr(x.msg, "CPU engine") != NULL);
}

static void test_validate_head_dim_range(void)
{
    static const struct {
        int d, code;
    } cases[] = {{31, DASH_EHEADDIM}, {32, 0}, {33, 0}, {128, 0}, {256, 0}, {257, DASH_EHEADDIM},
                 {1, DASH_EHEADDIM},  {4096, DASH_EHEADDIM}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fx x;
        fx_init(&x, 1, DASH__DTYPE__F32, 1, 3, 5, 2, 1, cases[i].d);
        EXPECT(&x, cases[i].code);
    }
}

static void test_validate_schedule_wave_blocks(void)
{
    struct fx x;
    fx_bwd(&x);
    x.params.has_schedule = 1;
    x.params.schedule = (Dash__Schedule)6;
    EXPECT(&x, DASH_ESCHED);
    x.params.schedule = (Dash__Schedule)-1;
    EXPECT(&x, DASH_ESCHED);
    x.params.schedule = DASH__SCHEDULE__SHIFT;
    EXPECT(&x, 0);

    static const struct {
        int32_t v;
        int code;
    } waves[] = {{-1, DASH_ESCHED}, {0, 0}, {1, 0}, {4096, 0}, {4097, DASH_ESCHED},
                 {INT32_MIN, DASH_ESCHED}, {INT32_MAX, DASH_ESCHED}};
    for (size_t i = 0; i < sizeof waves / sizeof waves[0]; i++) {
        fx_bwd(&x);
        x.params.has_wave = 1;
        x.params.wave = waves[i].v;
        EXPECT(&x, waves[i].code);
    }
    static const struct {
        int32_t v;
        int code;
    } blocks[] = {{-1, DASH_ESCHED}, {0, 0}, {1, 0}, {512, 0}, {513, DASH_ESCHED},
                  {INT32_MIN, DASH_ESCHED}};
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        fx_bwd(&x);
        x.params.has_block_m = 1;
        x.params.block_m = blocks[i].v;
        EXPECT(&x, blocks[i].code);
        fx_fwd(&x);
        x.params.has_block_n = 1;
        x.params.block_n = blocks[i].v;
        EXPECT(&x, blocks[i].code);
    }
    /* present but 0 means the default, as absent does */
    fx_bwd(&x);
    x.params.has_wave = x.params.has_block_m = x.params.has_block_n = 1;
    EXPECT(&x, 0);
    CU_ASSERT(x.plan.cfg.w == 0 && x.plan.cfg.block_m == 0 && x.plan.cfg.block_n == 0);
}

static void test_validate_scale_and_mask(void)
{
    static const float bad[] = {0.0f, -0.0f, -1.0f, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct fx x;
        fx_fwd(&x);
        x.params.has_scale = 1;
        x.params.scale = bad[i];
        EXPECT(&x, DASH_EINVAL);
    }
    static const float good[] = {1e-30f, 1.0f, 3.4e38f};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct fx x;
        fx_fwd(&x);
        x.params.has_scale = 1;
        x.params.scale = good[i];
        EXPECT(&x, 0);
        CU_ASSERT_EQUAL(x.plan.prob.scale, good[i]);
    }
    /* absent: 1/sqrt(D) rounded once from double (flash-attn's and PyTorch's default);
     * at D = 96 the float-only 1.0f / sqrtf(96) is one ulp away */
    static const int dims[] = {32, 64, 80, 96, 128, 160, 256};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        struct fx y;
        fx_init(&y, 0, DASH__DTYPE__F16, 1, 8, 8, 2, 1, dims[i]);
        EXPECT(&y, 0);
        CU_ASSERT_EQUAL(y.plan.prob.scale, (float)(1.0 / sqrt((double)dims[i])));
    }
    struct fx x;
    fx_fwd(&x);
    x.params.mask = (Dash__Mask)2;
    EXPECT(&x, DASH_EINVAL);
    x.params.mask = DASH__MASK__FULL;
    EXPECT(&x, 0);
    CU_ASSERT_EQUAL(x.plan.prob.mask, SCHED_MASK_FULL);
}

static void test_validate_dense_bytes_saturates(void)
{
    struct val_tensor t = {.shape = {INT32_MAX, INT32_MAX, INT32_MAX, 2}, .ndim = 4, .elem_size = 2};
    CU_ASSERT_EQUAL(val_dense_bytes(&t), UINT64_MAX);
    struct val_tensor u = {.shape = {2, 3, 4, 5}, .ndim = 4, .elem_size = 2};
    CU_ASSERT_EQUAL(val_dense_bytes(&u), 240);
    struct val_tensor l = {.shape = {2, 3, 4, 99}, .ndim = 3, .elem_size = 4};
    CU_ASSERT_EQUAL(val_dense_bytes(&l), 96);
}

/* ---- the CPU backend's own limits ---------------------------------------------------------- */

/* A packed batch: fx_bwd's tensors re-shaped (total, heads, dim), lse (heads, total), two
 * offset vectors of 4 entries (3 sequences) in buffers 200 and 201. */
struct vfx {
    struct fx x;
    Dash__Varlen varlen;
    Dash__TensorRef cu[2];
    int64_t cu_shape[2][1];
};

static void vfx_init(struct vfx *v, int backward)
{
    memset(v, 0, sizeof *v);
    fx_init(&v->x, backward, DASH__DTYPE__F16, 1, 40, 50, 8, 2, 64);
    struct fx *x = &v->x;
    for (int s = 0; s < (backward ? VAL_SLOTS : VAL_LSE + 1); s++) {
        int kv = s == VAL_K || s == VAL_V || s == VAL_DK || s == VAL_DV;
        if (s == VAL_LSE)
            set_shape(x, s, 2, 8, 40, 0, 0);
        else
            set_shape(x, s, 3, kv ? 50 : 40, kv ? 2 : 8, 64, 0);
    }
    for (int i = 0; i < 2; i++) {
        dash__tensor_ref__init(&v->cu[i]);
        v->cu[i].buffer_id = 200 + (uint64_t)i;
        v->cu_shape[i][0] = 4;
        v->cu[i].n_shape = 1;
        v->cu[i].shape = v->cu_shape[i];
        x->bufs.id[x->bufs.n] = 200 + (uint64_t)i;
        x->bufs.size[x->bufs.n++] = 16;
    }
    dash__varlen__init(&v->varlen);
    v->varlen.cu_seqlens_q = &v->cu[0];
    v->varlen.cu_seqlens_k = &v->cu[1];
    v->varlen.max_seqlen_q = 30;
    v->varlen.max_seqlen_k = 30;
    x->fwd.varlen = x->bwd.varlen = &v->varlen;
}

static void test_validate_packed_batch_gives_plan_and_refuses_bad_offsets(void)
{
    struct vfx v;
    vfx_init(&v, 1);
    v.x.params.has_window_left = 1;
    v.x.params.window_left = 7;
    v.x.params.has_softcap = 1;
    v.x.params.softcap = 50.0f;
    EXPECT(&v.x, 0);
    const struct val_plan *p = &v.x.plan;
    CU_ASSERT_EQUAL(p->varlen, 1);
    CU_ASSERT_EQUAL(p->prob.batch, 3);
    CU_ASSERT_EQUAL(p->prob.total_q, 40);
    CU_ASSERT_EQUAL(p->prob.total_k, 50);
    CU_ASSERT_EQUAL(p->prob.seqlen_q, 30);
    CU_ASSERT_EQUAL(p->prob.window, 1);
    CU_ASSERT_EQUAL(p->prob.window_left, 7);
    CU_ASSERT_EQUAL(p->prob.window_right, -1); /* the absent side */
    CU_ASSERT_EQUAL(p->prob.softcap, 50.0f);
    CU_ASSERT_PTR_NULL(p->prob.cu_seqlens_q); /* set by whoever reads the values */
    CU_ASSERT_EQUAL(p->t[VAL_Q].ndim, 4);      /* (1, total, heads, dim) */
    CU_ASSERT_EQUAL(p->t[VAL_Q].shape[0], 1);
    CU_ASSERT_EQUAL(p->t[VAL_Q].shape[1], 40);
    CU_ASSERT_EQUAL(p->t[VAL_LSE].shape[2], 40);
    CU_ASSERT_EQUAL(p->cu[VAL_CU_K].buffer_id, 201);
    CU_ASSERT_EQUAL(p->cu[VAL_CU_Q].extent, 16);

    vfx_init(&v, 0);
    v.x.bufs.size[VAL_LSE + 1] = 15; /* cu_seqlens_q's buffer one byte short */
    EXPECT(&v.x, DASH_EBOUNDS);
    vfx_init(&v, 0);
    v.cu[1].buffer_id = 999;
    EXPECT(&v.x, DASH_ENOBUF);
    vfx_init(&v, 0);
    v.cu_shape[1][0] = 3;
    EXPECT(&v.x, DASH_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(v.x.msg, "cu_seqlens_q has 4 entries, cu_seqlens_k 3"));
    vfx_init(&v, 0);
    v.cu_shape[0][0] = v.cu_shape[1][0] = 1;
    EXPECT(&v.x, DASH_ESHAPE);
    vfx_init(&v, 0);
    v.cu[0].offset = 2;
    v.x.bufs.size[VAL_LSE + 1] = 32;
    EXPECT(&v.x, DASH_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(v.x.msg, "multiple of 4"));
    vfx_init(&v, 0);
    v.varlen.max_seqlen_q = 0;
    EXPECT(&v.x, DASH_ESHAPE);
    vfx_init(&v, 0);
    set_shape(&v.x, VAL_Q, 4, 1, 40, 8, 64); /* the dense rank under a packed batch */
    EXPECT(&v.x, DASH_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(v.x.msg, "(total, heads, head_dim) in a packed batch"));
    vfx_init(&v, 0);
    set_shape(&v.x, VAL_LSE, 2, 8, 41, 0, 0);
    EXPECT(&v.x, DASH_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(v.x.msg, "lse.shape[1]=41 does not match q tokens 40"));
    vfx_init(&v, 1);
    v.x.params.has_window_right = 1;
    v.x.params.window_right = -5;
    EXPECT(&v.x, DASH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(v.x.msg, "window (-1, -5)"));
    vfx_init(&v, 1);
    v.x.params.has_softcap = 1;
    v.x.params.softcap = NAN;
    EXPECT(&v.x, DASH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(v.x.msg, "softcap"));
    /* the same window and softcap rules without a packed batch */
    struct fx x;
    fx_fwd(&x);
    x.params.has_window_left = 1;
    x.params.window_left = -2;
    EXPECT(&x, DASH_EINVAL);
    fx_fwd(&x);
    x.params.has_window_right = 1;
    x.params.window_right = 3;
    EXPECT(&x, 0);
    CU_ASSERT_EQUAL(x.plan.prob.window_left, -1);
    CU_ASSERT_EQUAL(x.plan.prob.window_right, 3);
    CU_ASSERT_EQUAL(x.plan.varlen, 0);
}

static void test_validate_cpu_backend_check(void)
{
    struct backend *b = backend_cpu_new(1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_STRING_EQUAL(b->name, "cpu");
    CU_ASSERT_EQUAL(b->limits.head_dim_min, ENG_HEAD_DIM_MIN);
    CU_ASSERT_EQUAL(b->limits.head_dim_max, ENG_HEAD_DIM_MAX);
    CU_ASSERT_EQUAL(b->limits.block_max, ENG_BLOCK_MAX);
    char msg[256];
    struct fx x;
    fx_bwd(&x);
    EXPECT(&x, 0);
    CU_ASSERT_EQUAL(b->check(b->impl, &x.plan, msg, sizeof msg), 0);
    /* Sk * head_dim beyond int32: the engine's scratch indices would overflow */
    fx_fwd(&x);
    x.shape[VAL_K][1] = x.shape[VAL_V][1] = INT32_MAX / 64 + 1;
    set_strides(&x, VAL_K, 4, 0, 0, 64, 1);
    set_strides(&x, VAL_V, 4, 0, 0, 64, 1);
    EXPECT(&x, 0);
    CU_ASSERT_EQUAL(b->check(b->impl, &x.plan, msg, sizeof msg), DASH_ESHAPE);
    /* near miss */
    x.shape[VAL_K][1] = x.shape[VAL_V][1] = INT32_MAX / 64 - 64;
    EXPECT(&x, 0);
    CU_ASSERT_EQUAL(b->check(b->impl, &x.plan, msg, sizeof msg), 0);
    backend_free(b);
}

int suite_validate(void)
{
    CU_pSuite s = CU_add_suite("validate", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_validate_valid_forward_gives_plan);
    ADD_TEST(s, test_validate_packed_batch_gives_plan_and_refuses_bad_offsets);
    ADD_TEST(s, test_validate_valid_backward_gives_plan);
    ADD_TEST(s, test_validate_schedules_map_explicitly);
    ADD_TEST(s, test_validate_failure_leaves_plan_untouched);
    ADD_TEST(s, test_validate_unknown_buffer_is_enobuf);
    ADD_TEST(s, test_validate_missing_parts_are_malformed);
    ADD_TEST(s, test_validate_extent_equal_to_size_passes_one_more_byte_fails);
    ADD_TEST(s, test_validate_bounds_message_names_numbers);
    ADD_TEST(s, test_validate_offset_near_2_64_does_not_wrap);
    ADD_TEST(s, test_validate_offset_at_size_is_out_of_bounds);
    ADD_TEST(s, test_validate_stride_tricks_cannot_reach_outside);
    ADD_TEST(s, test_validate_element_size_follows_dtype);
    ADD_TEST(s, test_validate_wrong_dim_count_is_eshape);
    ADD_TEST(s, test_validate_dim_below_one_is_eshape);
    ADD_TEST(s, test_validate_dim_beyond_int32_is_eshape);
    ADD_TEST(s, test_validate_disagreeing_shapes_are_eshape);
    ADD_TEST(s, test_validate_heads_must_divide);
    ADD_TEST(s, test_validate_stride_count_must_match);
    ADD_TEST(s, test_validate_negative_stride_is_eshape);
    ADD_TEST(s, test_validate_last_stride_must_be_one);
    ADD_TEST(s, test_validate_lse_must_be_dense);
    ADD_TEST(s, test_validate_overlapping_output_is_eshape);
    ADD_TEST(s, test_validate_outputs_must_not_overlap_each_other);
    ADD_TEST(s, test_validate_outputs_through_two_ids_of_one_object_must_not_overlap);
    ADD_TEST(s, test_validate_dtype);
    ADD_TEST(s, test_validate_f64_is_served_by_the_cpu_engine_and_refused_by_a_gpu_backend);
    ADD_TEST(s, test_validate_head_dim_range);
    ADD_TEST(s, test_validate_schedule_wave_blocks);
    ADD_TEST(s, test_validate_scale_and_mask);
    ADD_TEST(s, test_validate_dense_bytes_saturates);
    ADD_TEST(s, test_validate_cpu_backend_check);
    return 0;
}
