// SPDX-License-Identifier: BSD-3-Clause
/*
 * fuzz_request.c - libFuzzer target over what dashd does with the bytes of one message
 * before any memory is touched: wire_peek_id, wire_decode_request under the daemon's
 * budget, and for a Forward or Backward the validation of daemon/validate.c followed by
 * the CPU backend's own checks (eng_check_problem, eng_check_config), as dispatch runs
 * them. Built with clang -fsanitize=fuzzer,address,undefined (`make fuzz`; a short run in
 * `make test`); the seed corpus comes from tests/fuzz_seeds.c.
 *
 * Besides "no crash, no sanitizer report", each input is held to what the checks promise:
 *   - an accepted plan has every element of every tensor inside its registered buffer
 *     (recomputed here in 128-bit arithmetic from shape, strides, offset and dtype, not
 *     taken from the plan's extent), dims >= 1, the last stride 1, and shapes that agree
 *     with the problem;
 *   - a refusal is a negative DASH_E* code with a message.
 * A broken promise aborts, which libFuzzer reports as a crash with the input saved.
 *
 * The session's buffers: ids 1..40, buffer i holding 2^i bytes (so seeds can place
 * tensors, and mutated ids or offsets land near and past every size); 30..33 are views of
 * one object.
 */
#include "daemon/validate.h"
#include "kernels/cpu/engine.h"
#include "proto/errors.h"
#include "proto/wire.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_BUFFERS 40

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_request: broken promise: %s\n", what);
    abort();
}

/* Buffers 30..33 are views of one object (at 4 KiB apart), so outputs can meet through
 * two ids; the others are objects of their own. */
static int lookup(void *ctx, uint64_t id, struct val_buffer *ret)
{
    (void)ctx;
    if (id < 1 || id > FUZZ_BUFFERS)
        return DASH_ENOBUF;
    int shared = id >= 30 && id <= 33;
    ret->size = (uint64_t)1 << id;
    ret->object[0] = shared ? 30 : id;
    ret->object[1] = 0;
    ret->base = shared ? (id - 30) * 4096 : 0;
    return 0;
}

/* Every element of t lies inside [t->offset, t->offset + t->extent) and the buffer. */
static void check_tensor(const struct val_tensor *t)
{
    struct val_buffer vb;
    if (lookup(NULL, t->buffer_id, &vb) != 0)
        fail("a plan names an unregistered buffer");
    uint64_t size = vb.size;
    if (t->ndim < 1 || t->ndim > 4)
        fail("a plan tensor without 1 to 4 dims");
    if (t->elem_size != 2 && t->elem_size != 4)
        fail("a plan tensor with an element size other than 2 or 4");
    unsigned __int128 last = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 1)
            fail("a plan dim below 1");
        if (t->stride[i] < 0)
            fail("a negative stride in a plan");
        last += (unsigned __int128)(uint64_t)(t->shape[i] - 1) * (uint64_t)t->stride[i];
    }
    if (t->stride[t->ndim - 1] != 1)
        fail("a plan tensor whose last stride is not 1");
    unsigned __int128 end = (last + 1) * (unsigned)t->elem_size;
    if (end > t->extent)
        fail("an element beyond the tensor's extent");
    if ((unsigned __int128)t->offset + t->extent > size)
        fail("an element beyond the registered buffer");
}

static void check_plan(const struct val_plan *p, int backward)
{
    if (p->backward != backward || p->slots != (backward ? VAL_SLOTS : VAL_LSE + 1))
        fail("a plan with the wrong slots");
    const struct attn_problem *pr = &p->prob;
    if (p->varlen) {
        /* a packed batch: (1, total, heads, head_dim), lse (1, heads_q, total_q), and the
         * offsets, (batch + 1) int32 each */
        if (!p->cu_values[0] != !p->cu_values[1])
            fail("a packed batch with one side's offsets by value and the other's in a buffer");
        for (int i = 0; i < 2; i++) {
            if (!p->cu_values[i]) /* by value: no buffer to check them against */
                check_tensor(&p->cu[i]);
            if (p->cu[i].output || p->cu[i].elem_size != 4 ||
                val_dense_bytes(&p->cu[i]) != 4 * ((uint64_t)pr->batch + 1))
                fail("a packed batch's offsets are not (batch + 1) int32 inputs");
        }
    }
    for (int s = 0; s < p->slots; s++) {
        const struct val_tensor *t = &p->t[s];
        check_tensor(t);
        int kv = s == VAL_K || s == VAL_V || s == VAL_DK || s == VAL_DV;
        int32_t batch = p->varlen ? 1 : pr->batch;
        int32_t sq = p->varlen ? pr->total_q : pr->seqlen_q;
        int32_t sk = p->varlen ? pr->total_k : pr->seqlen_k;
        if (s == VAL_LSE) {
            if (t->ndim != 3 || t->shape[0] != batch || t->shape[1] != pr->heads_q ||
                t->shape[2] != sq)
                fail("lse's shape disagrees with the problem");
        } else if (t->ndim != 4 || t->shape[0] != batch || t->shape[1] != (kv ? sk : sq) ||
                   t->shape[2] != (kv ? pr->heads_kv : pr->heads_q) ||
                   t->shape[3] != pr->head_dim) {
            fail("a tensor's shape disagrees with the problem");
        }
        int out = backward ? s >= VAL_DQ : s >= VAL_OUT;
        if (t->output != out)
            fail("a plan marks the wrong tensors as outputs");
    }
    if (pr->heads_kv < 1 || pr->heads_q % pr->heads_kv != 0)
        fail("a plan whose heads_q is not a multiple of heads_kv");
}

static void check_refusal(int rc, const char *msg)
{
    if (rc >= 0 || !dash_errname(rc) || strncmp(dash_errname(rc), "DASH_E", 6) != 0)
        fail("a refusal that is not a DASH_E* code");
    if (!msg[0])
        fail("a refusal without a message");
}

static const struct val_limits cpu_limits = {
    .head_dim_min = ENG_HEAD_DIM_MIN,
    .head_dim_max = ENG_HEAD_DIM_MAX,
    .block_max = ENG_BLOCK_MAX,
    .dtypes = (1u << DTYPE_F32) | (1u << DTYPE_F16) | (1u << DTYPE_BF16),
};

static void validate_op(const Dash__Request *req)
{
    int backward = req->body_case == DASH__REQUEST__BODY_BACKWARD;
    struct val_plan plan;
    char msg[256] = "";
    int rc = backward ? val_backward(req->backward, &cpu_limits, lookup, NULL, msg, sizeof msg,
                                     &plan)
                      : val_forward(req->forward, &cpu_limits, lookup, NULL, msg, sizeof msg,
                                    &plan);
    if (rc) {
        check_refusal(rc, msg);
        return;
    }
    check_plan(&plan, backward);
    for (int s = 0; s < plan.slots; s++)
        (void)val_dense_bytes(&plan.t[s]);
    /* the CPU backend's check, by the engine's own code (a packed batch's offsets are read
     * by dispatch first, which the target has no memory for) */
    if (!plan.varlen && eng_check_problem(&plan.prob) == 0)
        (void)eng_check_config(&plan.prob, &plan.cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the server hands over at most one frame of WIRE_MAX_MESSAGE bytes */
    if (size > WIRE_MAX_MESSAGE)
        return -1;
    (void)wire_peek_id(data, size);
    Dash__Request *req = wire_decode_request(data, size, WIRE_DECODE_BUDGET);
    if (!req)
        return 0;
    if (req->body_case == DASH__REQUEST__BODY_FORWARD ||
        req->body_case == DASH__REQUEST__BODY_BACKWARD)
        validate_op(req);
    wire_free_request(req);
    return 0;
}
