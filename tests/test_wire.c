/*
 * test_wire.c - the shared wire helpers: messages survive a round trip; random, truncated
 * and oversized inputs are refused without crashing; decoding respects its memory budget;
 * the default endpoint follows the environment.
 */
#include "suites.h"
#include "testutil.h"
#include "proto/errors.h"
#include "proto/wire.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A Forward request with every field set, encoded. Caller frees *buf. */
static void encode_forward(void **buf, size_t *len, int64_t nshape)
{
    Dash__AttnParams params = DASH__ATTN_PARAMS__INIT;
    params.dtype = DASH__DTYPE__BF16;
    params.mask = DASH__MASK__CAUSAL;
    params.has_scale = 1;
    params.scale = 0.125f;
    params.has_schedule = 1;
    params.schedule = DASH__SCHEDULE__SHIFT;
    int64_t *shape = malloc(sizeof(int64_t) * (size_t)nshape);
    for (int64_t i = 0; i < nshape; i++)
        shape[i] = i + 1;
    Dash__TensorRef t = DASH__TENSOR_REF__INIT;
    t.buffer_id = 7;
    t.offset = 4096;
    t.n_shape = (size_t)nshape;
    t.shape = shape;
    Dash__Forward f = DASH__FORWARD__INIT;
    f.params = &params;
    f.q = f.k = f.v = f.out = f.lse = &t;
    Dash__Request r = DASH__REQUEST__INIT;
    r.id = 0x1234567890ull;
    r.body_case = DASH__REQUEST__BODY_FORWARD;
    r.forward = &f;
    size_t need = protobuf_c_message_get_packed_size(&r.base);
    *buf = malloc(need);
    *len = protobuf_c_message_pack(&r.base, *buf);
    free(shape);
}

static void test_wire_request_round_trips(void)
{
    void *buf;
    size_t len;
    encode_forward(&buf, &len, 4);
    Dash__Request *r = wire_decode_request(buf, len, WIRE_DECODE_BUDGET);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT_EQUAL(r->id, 0x1234567890ull);
    CU_ASSERT_EQUAL(r->body_case, DASH__REQUEST__BODY_FORWARD);
    CU_ASSERT_EQUAL(r->forward->params->dtype, DASH__DTYPE__BF16);
    CU_ASSERT_EQUAL(r->forward->params->schedule, DASH__SCHEDULE__SHIFT);
    CU_ASSERT_EQUAL(r->forward->lse->offset, 4096u);
    CU_ASSERT_EQUAL(r->forward->k->n_shape, 4u);
    CU_ASSERT_EQUAL(r->forward->k->shape[3], 4);
    wire_free_request(r);
    free(buf);
}

/* Random bytes, every truncation and every single-byte corruption of a valid message:
 * decoding either fails cleanly or yields a message that frees cleanly (run under the
 * sanitizers to make "cleanly" mean something). */
static void test_wire_survives_garbage_truncation_and_corruption(void)
{
    struct tu_rng r;
    tu_rng_init(&r, tu_seed() ^ 0x77);
    unsigned char junk[512];
    int decoded = 0;
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t)(tu_next(&r) % sizeof junk);
        for (size_t j = 0; j < n; j++)
            junk[j] = (unsigned char)tu_next(&r);
        Dash__Request *m = wire_decode_request(junk, n, WIRE_DECODE_BUDGET);
        decoded += m != NULL;
        wire_free_request(m);
    }
    CU_ASSERT(decoded < 20000); /* random bytes are almost never a valid request */

    void *buf;
    size_t len;
    encode_forward(&buf, &len, 4);
    int full_ok = 0;
    for (size_t cut = 0; cut <= len; cut++) {
        Dash__Request *m = wire_decode_request(buf, cut, WIRE_DECODE_BUDGET);
        if (cut == len)
            full_ok = m != NULL;
        wire_free_request(m);
    }
    CU_ASSERT(full_ok);
    unsigned char *copy = malloc(len);
    for (size_t at = 0; at < len; at++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(copy, buf, len);
            copy[at] ^= (unsigned char)(1u << bit);
            wire_free_request(wire_decode_request(copy, len, WIRE_DECODE_BUDGET));
        }
    free(copy);
    free(buf);
    /* and a reply decoder fed a request (wrong type) does not crash either */
    encode_forward(&buf, &len, 4);
    wire_free_reply(wire_decode_reply(buf, len, WIRE_DECODE_BUDGET));
    free(buf);
}

static void test_wire_peek_id_reads_only_a_leading_id(void)
{
    const unsigned char ok[] = {0x08, 0xac, 0x02, 0xff};  /* id 300, then junk */
    const unsigned char open_varint[] = {0x08, 0x80, 0x80}; /* never ends */
    const unsigned char other[] = {0x10, 0x05};             /* field 2 first */
    CU_ASSERT_EQUAL(wire_peek_id(ok, sizeof ok), 300u);
    CU_ASSERT_EQUAL(wire_peek_id(open_varint, sizeof open_varint), 0u);
    CU_ASSERT_EQUAL(wire_peek_id(other, sizeof other), 0u);
    CU_ASSERT_EQUAL(wire_peek_id(ok, 1), 0u);
    CU_ASSERT_EQUAL(wire_peek_id(NULL, 4), 0u);
}

static void test_wire_decode_respects_budget(void)
{
    void *buf;
    size_t len;
    encode_forward(&buf, &len, 4000); /* 5 tensors x 4000 shape entries x 8 bytes */
    Dash__Request *m = wire_decode_request(buf, len, 4096);
    CU_ASSERT_PTR_NULL(m);
    m = wire_decode_request(buf, len, 1 << 20);
    CU_ASSERT_PTR_NOT_NULL(m);
    if (m)
        CU_ASSERT_EQUAL(m->forward->q->n_shape, 4000u);
    wire_free_request(m);
    free(buf);
}

static void test_wire_encode_refuses_oversized_message(void)
{
    Dash__Ping p = DASH__PING__INIT;
    p.has_payload = 1;
    p.payload.len = WIRE_MAX_MESSAGE + 1;
    p.payload.data = calloc(1, p.payload.len);
    Dash__Request r = DASH__REQUEST__INIT;
    r.body_case = DASH__REQUEST__BODY_PING;
    r.ping = &p;
    void *buf = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL(wire_encode(&r.base, &buf, &len), -EMSGSIZE);
    p.payload.len = 100;
    CU_ASSERT_EQUAL(wire_encode(&r.base, &buf, &len), 0);
    CU_ASSERT(len > 100 && len < 120);
    free(buf);
    free(p.payload.data);
}

static void test_wire_default_endpoint_follows_environment(void)
{
    char buf[256];
    char *old_ep = getenv("DASHD_ENDPOINT") ? strdup(getenv("DASHD_ENDPOINT")) : NULL;
    char *old_xdg = getenv("XDG_RUNTIME_DIR") ? strdup(getenv("XDG_RUNTIME_DIR")) : NULL;
    unsetenv("DASHD_ENDPOINT");
    unsetenv("XDG_RUNTIME_DIR");
    CU_ASSERT_EQUAL(wire_default_endpoint(buf, sizeof buf), 0);
    char want[64];
    snprintf(want, sizeof want, "ipc:///tmp/dashd-%u.sock", (unsigned)getuid());
    CU_ASSERT_STRING_EQUAL(buf, want);
    setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
    CU_ASSERT_EQUAL(wire_default_endpoint(buf, sizeof buf), 0);
    CU_ASSERT_STRING_EQUAL(buf, "ipc:///run/user/1000/dashd.sock");
    CU_ASSERT_STRING_EQUAL(wire_ipc_path(buf), "/run/user/1000/dashd.sock");
    setenv("DASHD_ENDPOINT", "ipc:///tmp/x.sock", 1);
    CU_ASSERT_EQUAL(wire_default_endpoint(buf, sizeof buf), 0);
    CU_ASSERT_STRING_EQUAL(buf, "ipc:///tmp/x.sock");
    char longpath[200] = "ipc:///";
    memset(longpath + 7, 'a', 150);
    longpath[157] = 0;
    setenv("DASHD_ENDPOINT", longpath, 1);
    CU_ASSERT_EQUAL(wire_default_endpoint(buf, sizeof buf), -ENAMETOOLONG);
    CU_ASSERT_EQUAL(wire_default_endpoint(buf, 10), -ENAMETOOLONG);
    CU_ASSERT_PTR_NULL(wire_ipc_path("tcp://127.0.0.1:5555"));
    if (old_ep)
        setenv("DASHD_ENDPOINT", old_ep, 1);
    else
        unsetenv("DASHD_ENDPOINT");
    if (old_xdg)
        setenv("XDG_RUNTIME_DIR", old_xdg, 1);
    else
        unsetenv("XDG_RUNTIME_DIR");
    free(old_ep);
    free(old_xdg);
}

int suite_wire(void)
{
    CU_pSuite s = CU_add_suite("wire", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_wire_request_round_trips);
    ADD_TEST(s, test_wire_survives_garbage_truncation_and_corruption);
    ADD_TEST(s, test_wire_decode_respects_budget);
    ADD_TEST(s, test_wire_peek_id_reads_only_a_leading_id);
    ADD_TEST(s, test_wire_encode_refuses_oversized_message);
    ADD_TEST(s, test_wire_default_endpoint_follows_environment);
    return 0;
}
