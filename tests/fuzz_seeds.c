// SPDX-License-Identifier: BSD-3-Clause
/*
 * fuzz_seeds.c - writes the seed corpus of tests/fuzz_request.c: one file per valid
 * request, encoded as libdash sends it (every body kind; Forward and Backward over dtypes,
 * masks, GQA ratios, schedules, waves, tile sizes, dense and strided layouts, shared
 * buffers, sliding windows and softcaps, packed variable-length batches, event and signal
 * sync, audit tags).
 *
 *   fuzz_seeds DIR     writes DIR/seed-NNN, prints how many
 *
 * Tensors live in the fuzz target's buffers (ids 1..40, buffer i of 2^i bytes): slot s in
 * buffer 21 + s at offset 0, or all of them packed one after the other in buffer 30.
 */
#include "daemon/validate.h"
#include "proto/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *out_dir;
static int n_written;

static void emit(Dash__Request *r)
{
    void *buf;
    size_t len;
    if (wire_encode(&r->base, &buf, &len) != 0) {
        fprintf(stderr, "fuzz_seeds: cannot encode seed %d\n", n_written);
        exit(1);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-%03d", out_dir, n_written++);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    free(buf);
}

struct op_shape {
    Dash__DType dtype;
    Dash__Mask mask;
    int b, sq, sk, hq, hkv, d;
    Dash__Schedule sched;
    int wave, block_m, block_n;
    int packed;  /* every tensor in buffer 30, one after the other */
    int strided; /* q, k, v with a padded head stride (head_dim + 8) */
    int window;  /* a sliding window (left 8, right 0) and a softcap of 30 */
    int varlen;  /* a packed batch of sequences (b of them, sq and sk tokens in all); 2: its
                  * offsets by value in the request */
};

static void op_seed(const struct op_shape *o, int backward, const Dash__EventSync *sync,
                    const Dash__AuditTag *audit)
{
    Dash__AttnParams params = DASH__ATTN_PARAMS__INIT;
    params.dtype = o->dtype;
    params.mask = o->mask;
    params.has_schedule = o->sched != DASH__SCHEDULE__AUTO;
    params.schedule = o->sched;
    params.has_wave = o->wave != 0;
    params.wave = o->wave;
    params.has_block_m = o->block_m != 0;
    params.block_m = o->block_m;
    params.has_block_n = o->block_n != 0;
    params.block_n = o->block_n;
    params.has_window_left = params.has_window_right = params.has_softcap = o->window;
    params.window_left = 8;
    params.window_right = 0;
    params.softcap = 30.0f;
    Dash__TensorRef t[VAL_SLOTS];
    int64_t shape[VAL_SLOTS][4], strides[VAL_SLOTS][4];
    int slots = backward ? VAL_SLOTS : VAL_LSE + 1;
    uint64_t es = o->dtype == DASH__DTYPE__F32 ? 4 : 2, at = 0;
    for (int s = 0; s < slots; s++) {
        dash__tensor_ref__init(&t[s]);
        int kv = s == VAL_K || s == VAL_V || s == VAL_DK || s == VAL_DV;
        int64_t seq = kv ? o->sk : o->sq, heads = kv ? o->hkv : o->hq;
        uint64_t bytes;
        if (s == VAL_LSE && o->varlen) {
            int64_t v[2] = {o->hq, o->sq}, st[2] = {o->sq, 1};
            memcpy(shape[s], v, sizeof v);
            memcpy(strides[s], st, sizeof st);
            t[s].n_shape = t[s].n_strides = 2;
            bytes = 4 * (uint64_t)(o->hq * o->sq);
        } else if (s == VAL_LSE) {
            int64_t v[3] = {o->b, o->hq, o->sq}, st[3] = {(int64_t)o->hq * o->sq, o->sq, 1};
            memcpy(shape[s], v, sizeof v);
            memcpy(strides[s], st, sizeof st);
            t[s].n_shape = t[s].n_strides = 3;
            bytes = 4 * (uint64_t)(o->b * o->hq * o->sq);
        } else if (o->varlen) {
            int64_t v[3] = {seq, heads, o->d}, st[3] = {heads * o->d, o->d, 1};
            memcpy(shape[s], v, sizeof v);
            memcpy(strides[s], st, sizeof st);
            t[s].n_shape = t[s].n_strides = 3;
            bytes = es * (uint64_t)(seq * heads * o->d);
        } else {
            int64_t dpad = o->strided && s <= VAL_V ? o->d + 8 : o->d;
            int64_t v[4] = {o->b, seq, heads, o->d};
            int64_t st[4] = {seq * heads * dpad, heads * dpad, dpad, 1};
            memcpy(shape[s], v, sizeof v);
            memcpy(strides[s], st, sizeof st);
            t[s].n_shape = t[s].n_strides = 4;
            bytes = es * (uint64_t)(o->b * seq * heads * dpad);
        }
        t[s].shape = shape[s];
        t[s].strides = strides[s];
        if (o->packed) {
            t[s].buffer_id = 30;
            t[s].offset = at;
            at += (bytes + 255) & ~(uint64_t)255;
        } else {
            t[s].buffer_id = 21 + (uint64_t)s;
        }
    }
    Dash__Request r = DASH__REQUEST__INIT;
    r.id = 1000 + (uint64_t)n_written;
    r.sync = (Dash__EventSync *)sync;
    r.audit = (Dash__AuditTag *)audit;
    Dash__Forward f = DASH__FORWARD__INIT;
    Dash__Backward b = DASH__BACKWARD__INIT;
    /* the offsets in buffer 20: q's at 0, k's at 256 (b + 1 int32 each) */
    Dash__TensorRef cu[2];
    int64_t cu_shape[1] = {o->b + 1}, cu_stride[1] = {1};
    Dash__Varlen vl = DASH__VARLEN__INIT;
    for (int i = 0; i < 2; i++) {
        dash__tensor_ref__init(&cu[i]);
        cu[i].buffer_id = 20;
        cu[i].offset = (uint64_t)i * 256;
        cu[i].n_shape = cu[i].n_strides = 1;
        cu[i].shape = cu_shape;
        cu[i].strides = cu_stride;
    }
    int32_t values[2][9];
    if (o->varlen == 2) { /* even splits of sq and sk tokens over b sequences (b <= 8) */
        for (int i = 0; i <= o->b && i < 9; i++) {
            values[0][i] = o->sq * i / o->b;
            values[1][i] = o->sk * i / o->b;
        }
        vl.n_cu_seqlens_q_values = vl.n_cu_seqlens_k_values = (size_t)o->b + 1;
        vl.cu_seqlens_q_values = values[0];
        vl.cu_seqlens_k_values = values[1];
    } else {
        vl.cu_seqlens_q = &cu[0];
        vl.cu_seqlens_k = &cu[1];
    }
    vl.max_seqlen_q = o->sq;
    vl.max_seqlen_k = o->sk;
    f.varlen = b.varlen = o->varlen ? &vl : NULL;
    if (backward) {
        b.params = &params;
        b.q = &t[VAL_Q], b.k = &t[VAL_K], b.v = &t[VAL_V], b.out = &t[VAL_OUT];
        b.lse = &t[VAL_LSE], b.dout = &t[VAL_DOUT], b.dq = &t[VAL_DQ], b.dk = &t[VAL_DK];
        b.dv = &t[VAL_DV];
        r.body_case = DASH__REQUEST__BODY_BACKWARD;
        r.backward = &b;
    } else {
        f.params = &params;
        f.q = &t[VAL_Q], f.k = &t[VAL_K], f.v = &t[VAL_V], f.out = &t[VAL_OUT];
        f.lse = &t[VAL_LSE];
        r.body_case = DASH__REQUEST__BODY_FORWARD;
        r.forward = &f;
    }
    emit(&r);
}

static void simple_seeds(void)
{
    Dash__Request r = DASH__REQUEST__INIT;
    Dash__Ping ping = DASH__PING__INIT;
    unsigned char payload[32] = "ping payload";
    ping.has_payload = 1;
    ping.payload.data = payload;
    ping.payload.len = sizeof payload;
    r.id = 1;
    r.body_case = DASH__REQUEST__BODY_PING;
    r.ping = &ping;
    emit(&r);

    Dash__Hello hello = DASH__HELLO__INIT;
    hello.protocol_version = 1;
    hello.client_name = "fuzz";
    hello.has_pid = 1;
    hello.pid = 4242;
    hello.run_tag = "run-a";
    r.id = 2;
    r.body_case = DASH__REQUEST__BODY_HELLO;
    r.hello = &hello;
    emit(&r);

    Dash__RegisterBuffer rb = DASH__REGISTER_BUFFER__INIT;
    rb.size = 1 << 20;
    rb.shm_name = "/dash-4242-0";
    r.id = 3;
    r.body_case = DASH__REQUEST__BODY_REGISTER_BUFFER;
    r.register_buffer = &rb;
    emit(&r);
    unsigned char handle[64] = {1, 2, 3};
    Dash__RegisterBuffer rc = DASH__REGISTER_BUFFER__INIT;
    rc.size = 1 << 20;
    rc.has_cuda_ipc_handle = 1;
    rc.cuda_ipc_handle.data = handle;
    rc.cuda_ipc_handle.len = sizeof handle;
    rc.device_uuid = "GPU-00000000-0000-0000-0000-000000000000";
    rc.has_alloc_offset = 1;
    rc.alloc_offset = 4096;
    r.register_buffer = &rc;
    emit(&r);

    Dash__UnregisterBuffer ub = DASH__UNREGISTER_BUFFER__INIT;
    ub.buffer_id = 7;
    r.id = 4;
    r.body_case = DASH__REQUEST__BODY_UNREGISTER_BUFFER;
    r.unregister_buffer = &ub;
    emit(&r);

    Dash__Stats st = DASH__STATS__INIT;
    r.id = 5;
    r.body_case = DASH__REQUEST__BODY_STATS;
    r.stats = &st;
    emit(&r);

    Dash__Goodbye gb = DASH__GOODBYE__INIT;
    r.id = 6;
    r.body_case = DASH__REQUEST__BODY_GOODBYE;
    r.goodbye = &gb;
    emit(&r);

    ProtobufCBinaryData hs[2] = {{64, handle}, {64, handle}};
    Dash__RegisterEvents re = DASH__REGISTER_EVENTS__INIT;
    re.n_handles = 2;
    re.handles = hs;
    re.device_uuid = rc.device_uuid;
    r.id = 7;
    r.body_case = DASH__REQUEST__BODY_REGISTER_EVENTS;
    r.register_events = &re;
    emit(&r);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR\n");
        return 2;
    }
    out_dir = argv[1];
    simple_seeds();
    const struct op_shape shapes[] = {
        {DASH__DTYPE__F16, DASH__MASK__CAUSAL, 2, 16, 24, 8, 2, 64, DASH__SCHEDULE__AUTO, 0, 0, 0, 0, 0, 0, 0},
        {DASH__DTYPE__BF16, DASH__MASK__FULL, 1, 64, 64, 4, 4, 128, DASH__SCHEDULE__SHIFT, 0, 0, 0, 0, 0, 0, 0},
        {DASH__DTYPE__F32, DASH__MASK__CAUSAL, 1, 33, 17, 6, 3, 32, DASH__SCHEDULE__DESCENDING, 8, 32, 32, 0, 0, 0, 0},
        {DASH__DTYPE__F16, DASH__MASK__FULL, 2, 8, 8, 4, 1, 96, DASH__SCHEDULE__ASCENDING, 1, 16, 64, 1, 0, 0, 0},
        {DASH__DTYPE__BF16, DASH__MASK__CAUSAL, 1, 40, 40, 2, 2, 256, DASH__SCHEDULE__SPT, 64, 64, 64, 0, 1, 0, 0},
        {DASH__DTYPE__F32, DASH__MASK__FULL, 3, 5, 7, 2, 1, 48, DASH__SCHEDULE__ATOMIC, 0, 0, 0, 1, 1, 0, 0},
        {DASH__DTYPE__BF16, DASH__MASK__CAUSAL, 1, 64, 64, 4, 2, 64, DASH__SCHEDULE__SHIFT, 0, 0, 0, 0, 0, 1, 0},
        {DASH__DTYPE__F16, DASH__MASK__CAUSAL, 3, 40, 48, 4, 2, 64, DASH__SCHEDULE__AUTO, 0, 0, 0, 0, 0, 0, 1},
        {DASH__DTYPE__BF16, DASH__MASK__FULL, 2, 24, 24, 2, 1, 32, DASH__SCHEDULE__DESCENDING, 0, 0, 0, 1, 0, 1, 1},
        {DASH__DTYPE__F32, DASH__MASK__CAUSAL, 3, 30, 36, 4, 2, 32, DASH__SCHEDULE__SHIFT, 0, 0, 0, 0, 0, 0, 2},
    };
    Dash__EventSync ev = DASH__EVENT_SYNC__INIT;
    ev.has_wait_event = ev.has_record_event = ev.has_reply_when_queued = 1;
    ev.wait_event = 0;
    ev.record_event = 1;
    ev.reply_when_queued = 1;
    Dash__EventSync sig = DASH__EVENT_SYNC__INIT;
    sig.has_signal_buffer = sig.has_ready_offset = sig.has_done_offset = sig.has_signal_seq = 1;
    sig.signal_buffer = 12;
    sig.ready_offset = 0;
    sig.done_offset = 8;
    sig.signal_seq = 1;
    sig.has_fail_offset = 1; /* the word a failed op's daemon writes instead of done */
    sig.fail_offset = 16;
    Dash__AuditTag tag = DASH__AUDIT_TAG__INIT;
    tag.has_step = 1;
    tag.step = 17;
    tag.label = "layer3.attn";
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int backward = 0; backward < 2; backward++)
            op_seed(&shapes[i], backward, i % 3 == 1 ? &ev : i % 3 == 2 ? &sig : NULL,
                    i % 2 ? &tag : NULL);
    printf("fuzz_seeds: %d seeds in %s\n", n_written, out_dir);
    return 0;
}
