// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_dashd_varlen.c - packed variable-length batches, windows and softcap through a real
 * dashd (CPU backend) on the wire: every bad offset, shape, window and softcap gets its
 * own clear error before any tensor is touched (the outputs' bytes stay as they were), the
 * daemon keeps serving, and good requests give the in-process engine's bits.
 */
#include "harness.h"
#include "suites.h"
#include "testutil.h"

#include "client/dash.h"
#include "kernels/cpu/engine.h"
#include "proto/errors.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static struct dashd_proc D;
static uint64_t next_id = 1000;

static int suite_init(void)
{
    return dashd_start(&D, "--threads 2") == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    return dashd_stop(&D) == 0 ? 0 : -1;
}

/* ---- a packed batch in one shared-memory object ---------------------------------------- */

enum { T_Q, T_K, T_V, T_OUT, T_LSE, T_DOUT, T_DQ, T_DK, T_DV, T_CUQ, T_CUK, T_N };

#define NSEQ 4
static const int32_t LQ[NSEQ] = {1, 37, 0, 20}, LK[NSEQ] = {5, 37, 9, 16};
enum { HQ = 4, HKV = 2, HD = 32 };

struct packed {
    char name[64];
    unsigned char *data;
    size_t size;
    int32_t tq, tk;
    uint64_t off[T_N];
    int64_t shape[T_N][3];
    int ndim[T_N];
    Dash__TensorRef ref[T_N];
    Dash__Varlen varlen;
    int64_t buffer_id;
};

static struct raw_client *session(void)
{
    struct raw_client *r = raw_connect(D.endpoint);
    if (r && raw_hello(r, WIRE_PROTOCOL_VERSION) != 0) {
        raw_close(r);
        return NULL;
    }
    return r;
}

static void packed_init(struct packed *P, struct raw_client *r, uint64_t salt)
{
    static int n;
    memset(P, 0, sizeof *P);
    for (int b = 0; b < NSEQ; b++) {
        P->tq += LQ[b];
        P->tk += LK[b];
    }
    uint64_t at = 0;
    for (int t = 0; t < T_N; t++) {
        const int kv = t == T_K || t == T_V || t == T_DK || t == T_DV;
        uint64_t bytes;
        if (t == T_CUQ || t == T_CUK) {
            P->ndim[t] = 1;
            P->shape[t][0] = NSEQ + 1;
            bytes = 4 * (NSEQ + 1);
        } else if (t == T_LSE) {
            P->ndim[t] = 2;
            P->shape[t][0] = HQ, P->shape[t][1] = P->tq;
            bytes = 4 * (uint64_t)HQ * (uint64_t)P->tq;
        } else {
            P->ndim[t] = 3;
            P->shape[t][0] = kv ? P->tk : P->tq, P->shape[t][1] = kv ? HKV : HQ, P->shape[t][2] = HD;
            bytes = 4 * (uint64_t)P->shape[t][0] * (uint64_t)P->shape[t][1] * HD;
        }
        P->off[t] = at;
        at += (bytes + 63) & ~(uint64_t)63;
    }
    P->size = at;
    snprintf(P->name, sizeof P->name, "/dash-test-varlen-%d-%d", (int)getpid(), n++);
    int fd = shm_open(P->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    CU_ASSERT_FATAL(fd >= 0 && ftruncate(fd, (off_t)P->size) == 0);
    P->data = mmap(NULL, P->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CU_ASSERT_FATAL(P->data != MAP_FAILED);
    struct tu_rng rng;
    tu_rng_init(&rng, tu_seed() ^ salt);
    const int in[] = {T_Q, T_K, T_V, T_DOUT};
    for (int i = 0; i < 4; i++) {
        int t = in[i];
        tu_fill(P->data + P->off[t], DTYPE_F32, P->shape[t][0] * P->shape[t][1] * P->shape[t][2],
                &rng, 3.0);
    }
    int32_t *cq = (int32_t *)(void *)(P->data + P->off[T_CUQ]);
    int32_t *ck = (int32_t *)(void *)(P->data + P->off[T_CUK]);
    for (int b = 0; b < NSEQ; b++) {
        cq[b + 1] = cq[b] + LQ[b];
        ck[b + 1] = ck[b] + LK[b];
    }
    /* outputs: a pattern a refused request must leave alone */
    memset(P->data + P->off[T_OUT], 0x5a, P->off[T_DOUT] - P->off[T_OUT]);
    memset(P->data + P->off[T_DQ], 0x5a, P->off[T_CUQ] - P->off[T_DQ]);

    Dash__RegisterBuffer rb = DASH__REGISTER_BUFFER__INIT;
    rb.size = P->size;
    rb.shm_name = P->name;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = next_id++;
    req.body_case = DASH__REQUEST__BODY_REGISTER_BUFFER;
    req.register_buffer = &rb;
    Dash__Reply *rep = raw_call(r, &req, 5000);
    CU_ASSERT_FATAL(rep && rep->code == 0 && rep->has_buffer_id);
    P->buffer_id = (int64_t)rep->buffer_id;
    wire_free_reply(rep);
}

/* Fresh refs and params (the defaults: causal, window (-1, 4), softcap 30, f32). */
static void packed_reset(struct packed *P, Dash__AttnParams *p)
{
    for (int t = 0; t < T_N; t++) {
        dash__tensor_ref__init(&P->ref[t]);
        P->ref[t].buffer_id = (uint64_t)P->buffer_id;
        P->ref[t].offset = P->off[t];
        P->ref[t].n_shape = (size_t)P->ndim[t];
        P->ref[t].shape = P->shape[t];
    }
    dash__varlen__init(&P->varlen);
    P->varlen.cu_seqlens_q = &P->ref[T_CUQ];
    P->varlen.cu_seqlens_k = &P->ref[T_CUK];
    P->varlen.max_seqlen_q = 37;
    P->varlen.max_seqlen_k = 37;
    dash__attn_params__init(p);
    p->dtype = DASH__DTYPE__F32;
    p->mask = DASH__MASK__FULL;
    p->has_window_left = p->has_window_right = 1;
    p->window_left = 6;
    p->window_right = 4;
    p->has_softcap = 1;
    p->softcap = 30.0f;
    p->has_schedule = 1;
    p->schedule = DASH__SCHEDULE__SHIFT;
    p->has_wave = 1;
    p->wave = 3;
    p->has_block_m = p->has_block_n = 1;
    p->block_m = p->block_n = 16;
}

static void packed_drop(struct packed *P)
{
    munmap(P->data, P->size);
    shm_unlink(P->name);
}

static Dash__Reply *call(struct raw_client *r, struct packed *P, Dash__AttnParams *p, int backward)
{
    Dash__Request req = DASH__REQUEST__INIT;
    Dash__Forward f = DASH__FORWARD__INIT;
    Dash__Backward b = DASH__BACKWARD__INIT;
    Dash__TensorRef *R = P->ref;
    req.id = next_id++;
    if (backward) {
        b.params = p;
        b.q = &R[T_Q], b.k = &R[T_K], b.v = &R[T_V], b.out = &R[T_OUT], b.lse = &R[T_LSE];
        b.dout = &R[T_DOUT], b.dq = &R[T_DQ], b.dk = &R[T_DK], b.dv = &R[T_DV];
        b.varlen = &P->varlen;
        req.body_case = DASH__REQUEST__BODY_BACKWARD;
        req.backward = &b;
    } else {
        f.params = p;
        f.q = &R[T_Q], f.k = &R[T_K], f.v = &R[T_V], f.out = &R[T_OUT], f.lse = &R[T_LSE];
        f.varlen = &P->varlen;
        req.body_case = DASH__REQUEST__BODY_FORWARD;
        req.forward = &f;
    }
    return raw_call(r, &req, 20000);
}

/* The request's reply code; a refusal must carry `needle` in its message and leave the
 * outputs' bytes untouched. */
static int refused(struct raw_client *r, struct packed *P, Dash__AttnParams *p, int backward,
                   const char *needle)
{
    const size_t out_len = P->off[T_DOUT] - P->off[T_OUT], dq_len = P->off[T_CUQ] - P->off[T_DQ];
    unsigned char *before = malloc(out_len + dq_len);
    memcpy(before, P->data + P->off[T_OUT], out_len);
    memcpy(before + out_len, P->data + P->off[T_DQ], dq_len);
    Dash__Reply *rep = call(r, P, p, backward);
    int code = rep ? rep->code : 1;
    if (code != 0) {
        const char *m = rep->message ? rep->message : "";
        if (!needle || !strstr(m, needle)) {
            printf("\n  reply %s \"%s\" does not say \"%s\"", dash_errname(code), m,
                   needle ? needle : "(none)");
            code = 2;
        }
        if (memcmp(before, P->data + P->off[T_OUT], out_len) != 0 ||
            memcmp(before + out_len, P->data + P->off[T_DQ], dq_len) != 0) {
            printf("\n  a refused request (\"%s\") wrote an output", m);
            code = 3;
        }
    }
    wire_free_reply(rep);
    free(before);
    return code;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_dashd_varlen_each_bad_request_gets_its_own_clear_error(void)
{
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    struct packed P;
    packed_init(&P, r, 0x1001);
    Dash__AttnParams p;
    int32_t *cq = (int32_t *)(void *)(P.data + P.off[T_CUQ]);
    int32_t *ck = (int32_t *)(void *)(P.data + P.off[T_CUK]);
    int32_t saved_q[NSEQ + 1], saved_k[NSEQ + 1];
    memcpy(saved_q, cq, sizeof saved_q);
    memcpy(saved_k, ck, sizeof saved_k);
    int64_t shape2[2] = {NSEQ + 1, 1}, strides[1] = {2}, one[1] = {1};

    /* offsets: their values, read once and checked before any tensor */
    struct {
        int side, index;
        int32_t value;
        const char *needle;
    } values[] = {
        {0, 0, 1, "cu_seqlens_q[0]=1, the offsets must start at 0"},
        {0, 2, 0, "cu_seqlens_q[2]=0 is below cu_seqlens_q[1]=1 (offsets must not decrease)"},
        {1, 4, 60, "cu_seqlens_k[4]=60, the last offset must be the token count 67"},
        {0, 4, 57, "the last offset must be the token count 58"},
        {1, 3, 14, "cu_seqlens_k[3]=14 is below cu_seqlens_k[2]=42"},
    };
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        packed_reset(&P, &p);
        int32_t *cu = values[i].side ? ck : cq;
        cu[values[i].index] = values[i].value;
        CU_ASSERT_EQUAL(refused(r, &P, &p, i % 2, values[i].needle), DASH_ESHAPE);
        memcpy(cq, saved_q, sizeof saved_q);
        memcpy(ck, saved_k, sizeof saved_k);
    }
    packed_reset(&P, &p);
    P.varlen.max_seqlen_q = 36; /* sequence 1 has 37 rows */
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "sequence 1 has 37 rows (cu_seqlens_q[2]-cu_seqlens_q[1]), "
                                          "more than max_seqlen_q=36"), DASH_ESHAPE);
    packed_reset(&P, &p);
    P.varlen.max_seqlen_k = 0;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "max_seqlen_q 37 and max_seqlen_k 0 must be >= 1"),
                    DASH_ESHAPE);

    /* the offsets as tensors */
    packed_reset(&P, &p);
    P.ref[T_CUQ].buffer_id = 999999;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "cu_seqlens_q: buffer 999999 is not registered"), DASH_ENOBUF);
    packed_reset(&P, &p);
    P.ref[T_CUK].n_shape = 2;
    P.ref[T_CUK].shape = shape2;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 1, "cu_seqlens_k: shape has 2 dims, expected 1"), DASH_ESHAPE);
    packed_reset(&P, &p);
    P.ref[T_CUQ].shape = one;
    P.ref[T_CUK].shape = one;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "cu_seqlens_q.shape[0]=1, expected batch + 1"), DASH_ESHAPE);
    packed_reset(&P, &p);
    P.ref[T_CUQ].shape = shape2; /* 5 entries, k keeps 5: fine as a count; make k differ */
    P.ref[T_CUK].shape = one;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "cu_seqlens_k.shape[0]=1"), DASH_ESHAPE);
    packed_reset(&P, &p);
    int64_t three[1] = {3};
    P.ref[T_CUK].shape = three;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "cu_seqlens_q has 5 entries, cu_seqlens_k 3"), DASH_ESHAPE);
    packed_reset(&P, &p);
    P.ref[T_CUQ].n_strides = 1;
    P.ref[T_CUQ].strides = strides;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "cu_seqlens_q must be dense"), DASH_ESHAPE);
    packed_reset(&P, &p);
    P.ref[T_CUK].offset = P.size - 8;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 1, "cu_seqlens_k: offset"), DASH_EBOUNDS);
    packed_reset(&P, &p);
    P.ref[T_CUQ].offset += 2;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "not a multiple of 4"), DASH_ESHAPE);

    /* tensors in the dense layout under a packed batch, and disagreeing token counts */
    packed_reset(&P, &p);
    int64_t q4[4] = {1, P.tq, HQ, HD};
    P.ref[T_Q].n_shape = 4;
    P.ref[T_Q].shape = q4;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "q: shape has 4 dims, expected 3 (total, heads, head_dim)"),
                    DASH_ESHAPE);
    packed_reset(&P, &p);
    int64_t lse3[3] = {1, HQ, P.tq};
    P.ref[T_LSE].n_shape = 3;
    P.ref[T_LSE].shape = lse3;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "lse: shape has 3 dims, expected 2 (heads_q, total_q)"),
                    DASH_ESHAPE);
    packed_reset(&P, &p);
    int64_t kshort[3] = {P.tk - 1, HKV, HD};
    P.ref[T_V].shape = kshort;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "v.shape[0]=66 does not match k.shape[0]=67"), DASH_ESHAPE);

    /* window and softcap */
    packed_reset(&P, &p);
    p.window_left = -2;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "window (-2, 4): each side must be >= 0, or -1"), DASH_EINVAL);
    packed_reset(&P, &p);
    p.window_right = -7;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 1, "window (6, -7)"), DASH_EINVAL);
    packed_reset(&P, &p);
    p.softcap = -1.0f;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "softcap -1 must be finite and >= 0"), DASH_EINVAL);
    packed_reset(&P, &p);
    p.softcap = INFINITY;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 1, "softcap inf"), DASH_EINVAL);

    /* and after all that, a good request runs */
    packed_reset(&P, &p);
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, NULL), 0);
    CU_ASSERT_EQUAL(refused(r, &P, &p, 1, NULL), 0);
    CU_ASSERT(raw_ping_endpoint(D.endpoint, 5000) == 0 && dashd_alive(&D));
    packed_drop(&P);
    raw_close(r);
}

/* dashd's bits for a packed batch with a window and softcap, GQA, forward and backward,
 * equal the in-process engine's; its OpResult is what it ran. */
static void test_dashd_varlen_window_softcap_results_equal_in_process_engine(void)
{
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    for (int variant = 0; variant < 3; variant++) {
        struct packed P;
        packed_init(&P, r, 0x2002 + (uint64_t)variant);
        Dash__AttnParams p;
        packed_reset(&P, &p);
        if (variant == 1) { /* causal, left window only, auto in the batch-invariant mode */
            p.mask = DASH__MASK__CAUSAL;
            p.has_window_right = 0;
            p.schedule = DASH__SCHEDULE__AUTO;
            p.has_batch_invariant = p.batch_invariant = 1;
        }
        if (variant == 2) { /* no window, no softcap: a plain packed batch */
            p.has_window_left = p.has_window_right = p.has_softcap = 0;
            p.schedule = DASH__SCHEDULE__DESCENDING;
        }
        Dash__Reply *rep = call(r, &P, &p, 0);
        CU_ASSERT_FATAL(rep && rep->code == 0);
        wire_free_reply(rep);
        rep = call(r, &P, &p, 1);
        CU_ASSERT_FATAL(rep && rep->code == 0 && rep->op);
        struct attn_config cfg = {(enum sched_kind)0, rep->op->wave, rep->op->block_m,
                                  rep->op->block_n, 0};
        switch (rep->op->schedule) {
        case DASH__SCHEDULE__ASCENDING: cfg.sched = SCHED_ASCENDING; break;
        case DASH__SCHEDULE__DESCENDING: cfg.sched = SCHED_DESCENDING; break;
        case DASH__SCHEDULE__SPT: cfg.sched = SCHED_SPT; break;
        case DASH__SCHEDULE__SHIFT: cfg.sched = SCHED_SHIFT; break;
        default: CU_FAIL("unexpected schedule");
        }
        wire_free_reply(rep);

        unsigned char *mine = malloc(P.size);
        memcpy(mine, P.data, P.size);
        const int outs[] = {T_OUT, T_LSE, T_DQ, T_DK, T_DV}; /* their elements, not the gaps */
        for (int i = 0; i < 5; i++) {
            const int t = outs[i];
            int64_t n = P.shape[t][0] * P.shape[t][1] * (P.ndim[t] == 3 ? P.shape[t][2] : 1);
            tu_poison(mine + P.off[t], 4 * (size_t)n);
        }
        const int32_t *cq = (const int32_t *)(void *)(mine + P.off[T_CUQ]);
        const int32_t *ck = (const int32_t *)(void *)(mine + P.off[T_CUK]);
        struct attn_problem pr = {.batch = NSEQ, .seqlen_q = 37, .seqlen_k = 37, .heads_q = HQ,
                                  .heads_kv = HKV, .head_dim = HD, .dtype = DTYPE_F32,
                                  .mask = variant == 1 ? SCHED_MASK_CAUSAL : SCHED_MASK_FULL,
                                  .scale = (float)(1.0 / sqrt((double)HD)),
                                  .window = variant != 2, .window_left = 6,
                                  .window_right = variant == 1 ? -1 : 4,
                                  .softcap = variant == 2 ? 0.0f : 30.0f, .cu_seqlens_q = cq,
                                  .cu_seqlens_k = ck, .total_q = P.tq, .total_k = P.tk};
        struct eng *e = eng_new(3);
#define T(x, n_, h_) attn_dense(mine + P.off[x], n_, h_, HD)
        float *lse = (float *)(void *)(mine + P.off[T_LSE]);
        CU_ASSERT_EQUAL(eng_forward(e, &pr, &cfg, T(T_OUT, P.tq, HQ), lse, T(T_Q, P.tq, HQ),
                                    T(T_K, P.tk, HKV), T(T_V, P.tk, HKV), NULL), 0);
        CU_ASSERT_EQUAL(eng_backward(e, &pr, &cfg, T(T_DQ, P.tq, HQ), T(T_DK, P.tk, HKV),
                                     T(T_DV, P.tk, HKV), T(T_Q, P.tq, HQ), T(T_K, P.tk, HKV),
                                     T(T_V, P.tk, HKV), T(T_OUT, P.tq, HQ), lse,
                                     T(T_DOUT, P.tq, HQ), NULL), 0);
#undef T
        CU_ASSERT(memcmp(mine, P.data, P.size) == 0);
        free(mine);
        eng_free(e);
        packed_drop(&P);
    }
    raw_close(r);
}

/* max_seqlen is a bound, as in flash-attn: a loose one - the token count, INT32_MAX, one
 * side only - gives the exact one's bits, forward and backward, at a fixed schedule and at
 * `auto` (INT32_MAX was refused as too large for 32-bit indices: the engines sized their
 * tiles by the bound). One below the longest sequence is refused (the bad-request test). */
static void test_dashd_varlen_a_loose_max_seqlen_gives_the_exact_ones_bits(void)
{
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    for (int variant = 0; variant < 2; variant++) {
        struct packed P;
        packed_init(&P, r, 0x2100 + (uint64_t)variant);
        Dash__AttnParams p;
        packed_reset(&P, &p);
        if (variant == 1) { /* causal, auto, the default tiles */
            p.mask = DASH__MASK__CAUSAL;
            p.has_window_left = p.has_window_right = p.has_softcap = 0;
            p.schedule = DASH__SCHEDULE__AUTO;
            p.has_wave = p.has_block_m = p.has_block_n = 0;
        }
        const int32_t bounds[][2] = {{37, 37}, {P.tq, P.tk}, {INT32_MAX, INT32_MAX}, {37, INT32_MAX}};
        unsigned char *exact = malloc(P.size);
        CU_ASSERT_FATAL(exact != NULL);
        for (int i = 0; i < 4; i++) {
            P.varlen.max_seqlen_q = bounds[i][0];
            P.varlen.max_seqlen_k = bounds[i][1];
            memset(P.data + P.off[T_OUT], 0xff, P.off[T_DOUT] - P.off[T_OUT]); /* out, lse: NaN */
            memset(P.data + P.off[T_DQ], 0xff, P.off[T_CUQ] - P.off[T_DQ]);    /* dq, dk, dv */
            for (int backward = 0; backward < 2; backward++) {
                Dash__Reply *rep = call(r, &P, &p, backward);
                CU_ASSERT_FATAL(rep != NULL);
                if (rep->code != 0)
                    printf("\n  max_seqlen (%d, %d), %s: %s \"%s\"", (int)bounds[i][0], (int)bounds[i][1],
                           backward ? "backward" : "forward", dash_errname(rep->code),
                           rep->message ? rep->message : "");
                CU_ASSERT_EQUAL(rep->code, 0);
                wire_free_reply(rep);
            }
            if (i == 0)
                memcpy(exact, P.data, P.size);
            else
                CU_ASSERT(memcmp(exact, P.data, P.size) == 0);
        }
        /* the outputs were written (not the poison): the exact bound's own run was checked
         * against the engine by the test above; here a finite first element suffices */
        float o0;
        memcpy(&o0, exact + P.off[T_OUT], sizeof o0);
        CU_ASSERT(isfinite(o0));
        free(exact);
        packed_drop(&P);
    }
    raw_close(r);
}

/* A packed batch through libdash holds its offsets' buffer only while the op is in
 * flight: after an op that ran and after one the daemon refused, the buffer frees (the
 * library once counted the offsets out but not in, and the buffer stayed busy for good). */
static void test_dashd_varlen_offsets_buffer_frees_after_the_op(void)
{
    enum { TQ = 50, H = 2, HD = 64 };
    struct dash_connect_opts o = {.client_name = "varlen-free", .timeout_ms = 10000};
    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_connect(D.endpoint, &o, &c), 0);
    const size_t tb = (size_t)TQ * H * HD * 2;
    struct dash_buffer *b = NULL, *sb = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(c, 4 * tb + (size_t)H * TQ * 4, &b), 0);
    unsigned char *mem = dash_buffer_data(b);
    for (size_t i = 0; i < 3 * tb / 2; i++)
        ((uint16_t *)(void *)mem)[i] = 0x3c00 + (uint16_t)(i % 64); /* bf16 near 1..2 */
    struct dash_tensor t[5];
    for (int s = 0; s < 4; s++)
        t[s] = (struct dash_tensor){.buf = b, .offset = s * tb, .ndim = 3, .shape = {TQ, H, HD}};
    t[4] = (struct dash_tensor){.buf = b, .offset = 4 * tb, .ndim = 2, .shape = {H, TQ}};
    for (int refuse = 0; refuse < 2; refuse++) {
        CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(c, 4096, &sb), 0);
        int32_t *cu = dash_buffer_data(sb);
        cu[0] = 0, cu[1] = 13, cu[2] = refuse ? TQ - 1 : TQ; /* refused: not the token count */
        struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .max_seqlen_q = 37,
                              .max_seqlen_k = 37};
        a.cu_seqlens_q = (struct dash_tensor){.buf = sb, .ndim = 1, .shape = {3}};
        a.cu_seqlens_k = a.cu_seqlens_q;
        CU_ASSERT_EQUAL(dash_forward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[4], NULL),
                        refuse ? DASH_ESHAPE : 0);
        CU_ASSERT_EQUAL(dash_buffer_free(c, sb), 0);
    }
    CU_ASSERT_EQUAL(dash_buffer_free(c, b), 0);
    dash_close(c);
}

/* Offsets sent by value (in the request, no buffer): the bits of the same offsets in shared
 * memory, forward and backward; given both ways, or with q and k counts that differ, or
 * values that are not offsets, each a clear refusal that writes nothing; through libdash,
 * a caller's array that changes right after the call does not change what was sent. */
static void test_dashd_varlen_offsets_by_value_give_the_buffer_bits(void)
{
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    struct packed P;
    packed_init(&P, r, 0x2101);
    Dash__AttnParams p;
    packed_reset(&P, &p);
    Dash__Reply *rep = call(r, &P, &p, 0);
    CU_ASSERT_FATAL(rep && rep->code == 0);
    wire_free_reply(rep);
    rep = call(r, &P, &p, 1);
    CU_ASSERT_FATAL(rep && rep->code == 0);
    wire_free_reply(rep);
    unsigned char *by_buffer = malloc(P.size);
    memcpy(by_buffer, P.data, P.size);

    int32_t cq[NSEQ + 1], ck[NSEQ + 1];
    memcpy(cq, P.data + P.off[T_CUQ], sizeof cq);
    memcpy(ck, P.data + P.off[T_CUK], sizeof ck);
    memset(P.data + P.off[T_CUQ], 0x7f, sizeof cq); /* the buffer's copy is not read */
    memset(P.data + P.off[T_CUK], 0x7f, sizeof ck);
    const int outs[] = {T_OUT, T_LSE, T_DQ, T_DK, T_DV};
    for (int i = 0; i < 5; i++) {
        const int t = outs[i];
        int64_t n = P.shape[t][0] * P.shape[t][1] * (P.ndim[t] == 3 ? P.shape[t][2] : 1);
        tu_poison(P.data + P.off[t], 4 * (size_t)n);
    }
    packed_reset(&P, &p);
    P.varlen.cu_seqlens_q = P.varlen.cu_seqlens_k = NULL;
    P.varlen.n_cu_seqlens_q_values = P.varlen.n_cu_seqlens_k_values = NSEQ + 1;
    P.varlen.cu_seqlens_q_values = cq;
    P.varlen.cu_seqlens_k_values = ck;
    rep = call(r, &P, &p, 0);
    CU_ASSERT_FATAL(rep && rep->code == 0);
    wire_free_reply(rep);
    rep = call(r, &P, &p, 1);
    CU_ASSERT_FATAL(rep && rep->code == 0);
    wire_free_reply(rep);
    memcpy(P.data + P.off[T_CUQ], cq, sizeof cq);
    memcpy(P.data + P.off[T_CUK], ck, sizeof ck);
    CU_ASSERT(memcmp(by_buffer, P.data, P.size) == 0);

    /* refusals */
    P.varlen.cu_seqlens_q = &P.ref[T_CUQ]; /* both ways */
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "both in buffers and by value"), DASH_EMALFORMED);
    P.varlen.cu_seqlens_q = NULL;
    P.varlen.n_cu_seqlens_k_values = NSEQ; /* k has one offset fewer */
    CU_ASSERT_EQUAL(refused(r, &P, &p, 1, "both are batch + 1"), DASH_ESHAPE);
    P.varlen.n_cu_seqlens_q_values = P.varlen.n_cu_seqlens_k_values = 1;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "cu_seqlens_q: 1 values"), DASH_ESHAPE);
    P.varlen.n_cu_seqlens_q_values = P.varlen.n_cu_seqlens_k_values = NSEQ + 1;
    int32_t bad[NSEQ + 1];
    memcpy(bad, cq, sizeof bad);
    bad[2] = bad[1] - 1; /* decreasing */
    P.varlen.cu_seqlens_q_values = bad;
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "must not decrease"), DASH_ESHAPE);
    P.varlen.n_cu_seqlens_q_values = P.varlen.n_cu_seqlens_k_values = 0; /* neither way */
    CU_ASSERT_EQUAL(refused(r, &P, &p, 0, "varlen.cu_seqlens_q is missing"), DASH_EMALFORMED);
    free(by_buffer);
    packed_drop(&P);
    raw_close(r);

    /* through libdash: offsets by value; the caller's array may change after the call */
    enum { TQ = 50, H = 2, HD2 = 64 };
    struct dash_connect_opts o = {.client_name = "varlen-values", .timeout_ms = 10000};
    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_connect(D.endpoint, &o, &c), 0);
    const size_t tb = (size_t)TQ * H * HD2 * 2;
    struct dash_buffer *b = NULL, *sb = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(c, 5 * tb + 2 * (size_t)H * TQ * 4, &b), 0);
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(c, 4096, &sb), 0);
    unsigned char *mem = dash_buffer_data(b);
    for (size_t i = 0; i < 3 * tb / 2; i++)
        ((uint16_t *)(void *)mem)[i] = (uint16_t)(0x3c00 + (uint16_t)(i * 7 % 61)); /* bf16 1..2 */
    struct dash_tensor t[7];
    for (int s = 0; s < 5; s++)
        t[s] = (struct dash_tensor){.buf = b, .offset = s * tb, .ndim = 3, .shape = {TQ, H, HD2}};
    t[5] = (struct dash_tensor){.buf = b, .offset = 5 * tb, .ndim = 2, .shape = {H, TQ}};
    t[6] = t[5];
    t[6].offset += (size_t)H * TQ * 4;
    int32_t *shm_cu = dash_buffer_data(sb);
    shm_cu[0] = 0, shm_cu[1] = 13, shm_cu[2] = 31, shm_cu[3] = TQ;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .max_seqlen_q = 37,
                          .max_seqlen_k = 37};
    a.cu_seqlens_q = (struct dash_tensor){.buf = sb, .ndim = 1, .shape = {4}};
    a.cu_seqlens_k = a.cu_seqlens_q;
    CU_ASSERT_EQUAL(dash_forward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[5], NULL), 0);
    int32_t mine[4] = {0, 13, 31, TQ};
    struct dash_attn av = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .max_seqlen_q = 37,
                           .max_seqlen_k = 37, .offsets_q = mine, .offsets_k = mine,
                           .n_offsets = 4};
    uint64_t ticket;
    CU_ASSERT_EQUAL_FATAL(dash_forward_submit(c, &av, &t[0], &t[1], &t[2], &t[4], &t[6], &ticket),
                          0);
    mine[1] = 40; /* after the call: must not matter */
    CU_ASSERT_EQUAL(dash_wait(c, ticket, 20000, NULL), 0);
    CU_ASSERT(memcmp(mem + 3 * tb, mem + 4 * tb, tb) == 0);       /* out */
    CU_ASSERT(memcmp(mem + 5 * tb, mem + 5 * tb + (size_t)H * TQ * 4, (size_t)H * TQ * 4) == 0);
    av.cu_seqlens_q = a.cu_seqlens_q; /* both ways: libdash refuses before sending */
    CU_ASSERT_EQUAL(dash_forward(c, &av, &t[0], &t[1], &t[2], &t[4], &t[6], NULL), DASH_EINVAL);
    CU_ASSERT(strstr(dash_last_error(c), "give them one way") != NULL);
    av.cu_seqlens_q = (struct dash_tensor){0};
    av.n_offsets = 1;
    CU_ASSERT_EQUAL(dash_forward(c, &av, &t[0], &t[1], &t[2], &t[4], &t[6], NULL), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_buffer_free(c, sb), 0);
    CU_ASSERT_EQUAL(dash_buffer_free(c, b), 0);
    dash_close(c);
}

int suite_dashd_varlen(void)
{
    CU_pSuite s = CU_add_suite("dashd_varlen", suite_init, suite_clean);
    if (!s)
        return -1;
    ADD_TEST(s, test_dashd_varlen_each_bad_request_gets_its_own_clear_error);
    ADD_TEST(s, test_dashd_varlen_window_softcap_results_equal_in_process_engine);
    ADD_TEST(s, test_dashd_varlen_a_loose_max_seqlen_gives_the_exact_ones_bits);
    ADD_TEST(s, test_dashd_varlen_offsets_buffer_frees_after_the_op);
    ADD_TEST(s, test_dashd_varlen_offsets_by_value_give_the_buffer_bits);
    return 0;
}
