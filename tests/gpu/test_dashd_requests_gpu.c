// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_dashd_requests_gpu.c - suite gpu_dashd's checks of what dashd --backend cuda serves
 * and what it refuses, with an error reply that says why, the daemon serving on: buffers
 * past their allocation, a garbage or foreign IPC handle (raw RegisterBuffer, which libdash
 * would never send), dash_cuda_tensors' views of one allocation, float64, the configuration
 * an OpResult reports, malformed RegisterEvents and EventSync, head dims other than 64,
 * windows, softcap and packed batches, and the CPU backend given CUDA buffers. The fixture
 * and the registration are test_dashd_gpu.c's (gpu_dashd_int.h).
 */
#include "gpu_check.h"
#include "gpu_dashd_int.h"

#include "../harness.h"
#include "../testutil.h"
#include "../../client/dash.h"
#include "kernels/cuda/attn_cuda.h"

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- raw RegisterBuffer, for what libdash would never send -------------------------------- */

static void uuid_of_device0(char buf[48])
{
    struct cudaDeviceProp prop;
    memset(buf, 0, 48);
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
        return;
    const unsigned char *b = (const unsigned char *)prop.uuid.bytes;
    snprintf(buf, 48, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

/* Send req on a raw session: its reply (the caller frees it; NULL: none came), with the
 * code (-1 when none came) and message copied out. */
static Dash__Reply *raw_reply(struct raw_client *r, Dash__Request *req, int timeout_ms, int *code,
                              char *msg, size_t msglen)
{
    Dash__Reply *rep = raw_call(r, req, timeout_ms);
    *code = rep ? rep->code : -1;
    snprintf(msg, msglen, "%s", rep && rep->message ? rep->message : "");
    return rep;
}

/* RegisterBuffer{handle, uuid, alloc_offset (absent when NULL), size} on a raw session:
 * the reply's code (-1: no reply), its message in msg, the buffer id in *ret_id (0: none). */
static int raw_register_at(struct raw_client *r, const void *handle, size_t hlen, const char *uuid,
                           const uint64_t *alloc_offset, uint64_t size, char *msg, size_t msglen,
                           uint64_t *ret_id)
{
    static uint64_t id = 100;
    Dash__RegisterBuffer rb = DASH__REGISTER_BUFFER__INIT;
    rb.size = size;
    rb.has_cuda_ipc_handle = 1;
    rb.cuda_ipc_handle.data = (uint8_t *)handle;
    rb.cuda_ipc_handle.len = hlen;
    rb.device_uuid = (char *)uuid;
    rb.has_alloc_offset = alloc_offset != NULL;
    rb.alloc_offset = alloc_offset ? *alloc_offset : 0;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = id++;
    req.body_case = DASH__REQUEST__BODY_REGISTER_BUFFER;
    req.register_buffer = &rb;
    int code;
    Dash__Reply *rep = raw_reply(r, &req, 10000, &code, msg, msglen);
    *ret_id = rep && code == 0 && rep->has_buffer_id ? rep->buffer_id : 0;
    wire_free_reply(rep);
    return code;
}

static int raw_register(struct raw_client *r, const void *handle, size_t hlen, const char *uuid,
                        uint64_t alloc_offset, uint64_t size, char *msg, size_t msglen)
{
    uint64_t id;
    return raw_register_at(r, handle, hlen, uuid, &alloc_offset, size, msg, msglen, &id);
}

/* RegisterBuffer for the whole of an allocation: the buffer id, or 0. */
static uint64_t raw_register_id(struct raw_client *r, const cudaIpcMemHandle_t *h, const char *uuid,
                                uint64_t size)
{
    char msg[256];
    uint64_t id;
    (void)raw_register_at(r, h, sizeof *h, uuid, NULL, size, msg, sizeof msg, &id);
    return id;
}

/* RegisterEvents with n handles of lens[i] bytes: the reply's code (-1: none), message,
 * first_event (or -1 when absent). */
static int raw_events(struct raw_client *r, unsigned char (*handles)[64], const size_t *lens,
                      size_t n, const char *uuid, char *msg, size_t msglen, int64_t *ret_first)
{
    ProtobufCBinaryData *hs = calloc(n ? n : 1, sizeof *hs);
    for (size_t i = 0; i < n; i++) {
        hs[i].data = handles[i];
        hs[i].len = lens[i];
    }
    Dash__RegisterEvents re = DASH__REGISTER_EVENTS__INIT;
    re.n_handles = n;
    re.handles = hs;
    re.device_uuid = (char *)uuid;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 7002;
    req.body_case = DASH__REQUEST__BODY_REGISTER_EVENTS;
    req.register_events = &re;
    int code;
    Dash__Reply *rep = raw_reply(r, &req, 10000, &code, msg, msglen);
    free(hs);
    *ret_first = rep && rep->has_first_event ? (int64_t)rep->first_event : -1;
    wire_free_reply(rep);
    return code;
}

/* A forward of the suite's problem on buffer id (tensors at off[]) with this EventSync
 * (NULL: none): the reply's code, message, and whether it carried run_us. */
static int raw_forward_sync(struct raw_client *r, uint64_t id, Dash__EventSync *sync, char *msg,
                            size_t msglen, int *ret_has_run_us)
{
    int64_t shp[5][4] = {{1, SEQ, HQ, HD}, {1, SEQ, HKV, HD}, {1, SEQ, HKV, HD}, {1, SEQ, HQ, HD},
                         {1, HQ, SEQ, 0}};
    Dash__TensorRef t[5];
    for (int i = 0; i < 5; i++) {
        dash__tensor_ref__init(&t[i]);
        t[i].buffer_id = id;
        t[i].offset = gpu_dashd_off[i];
        t[i].n_shape = i == LSE ? 3 : 4;
        t[i].shape = shp[i];
    }
    Dash__AttnParams p = DASH__ATTN_PARAMS__INIT;
    p.dtype = DASH__DTYPE__BF16;
    p.mask = DASH__MASK__CAUSAL;
    Dash__Forward f = DASH__FORWARD__INIT;
    f.params = &p;
    f.q = &t[Q], f.k = &t[K], f.v = &t[V], f.out = &t[OUT], f.lse = &t[LSE];
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 7003;
    req.body_case = DASH__REQUEST__BODY_FORWARD;
    req.forward = &f;
    req.sync = sync;
    int code;
    Dash__Reply *rep = raw_reply(r, &req, 20000, &code, msg, msglen);
    *ret_has_run_us = rep && rep->op && rep->op->has_run_us;
    wire_free_reply(rep);
    return code;
}

static void raw_goodbye(struct raw_client *r)
{
    Dash__Goodbye g = DASH__GOODBYE__INIT;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 999;
    req.body_case = DASH__REQUEST__BODY_GOODBYE;
    req.goodbye = &g;
    Dash__Reply *rep = raw_call(r, &req, 5000);
    CU_ASSERT(rep && rep->code == 0);
    wire_free_reply(rep);
}

/* ---- tests -------------------------------------------------------------------------------- */

void test_dashd_gpu_bounds_are_checked(void)
{
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-bounds");
    struct tensors ts = gpu_dashd_tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};

    /* a tensor whose offset lies past the registered view (though inside the allocation) */
    struct dash_tensor far = t[Q];
    far.offset = gpu_dashd_view_bytes - 64;
    CU_ASSERT_EQUAL(dash_forward(f.c, &a, &far, &t[K], &t[V], &t[OUT], &t[LSE], NULL), DASH_EBOUNDS);
    far.offset = gpu_dashd_view_bytes + 4096;
    CU_ASSERT_EQUAL(dash_forward(f.c, &a, &t[Q], &t[K], &t[V], &far, &t[LSE], NULL), DASH_EBOUNDS);

    /* a view larger than the allocation: libdash sees it first */
    struct dash_buffer *big = NULL;
    CU_ASSERT_EQUAL(dash_cuda_register(f.c, f.alloc + VIEW_OFF, ALLOC_BYTES - VIEW_OFF + 1, &big),
                    DASH_EBOUNDS);
    CU_ASSERT_PTR_NULL(big);
    /* and the daemon checks it too, for clients that do not */
    cudaIpcMemHandle_t h;
    CU_ASSERT_FATAL(cudaIpcGetMemHandle(&h, f.alloc) == cudaSuccess);
    char uuid[48], msg[256];
    uuid_of_device0(uuid);
    struct raw_client *r = raw_connect(gpu_dashd_D.endpoint);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL_FATAL(raw_hello(r, 1), 0);
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h, uuid, VIEW_OFF, ALLOC_BYTES - VIEW_OFF + 4096,
                                 msg, sizeof msg), DASH_EBOUNDS);
    CU_ASSERT(strstr(msg, "allocation") != NULL);
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h, uuid, ALLOC_BYTES, 1, msg, sizeof msg),
                    DASH_EBOUNDS);
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h, uuid, UINT64_MAX - 10, 100, msg, sizeof msg),
                    DASH_EBOUNDS);
    /* the whole allocation is fine, and shares the mapping the fixture's session opened */
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h, uuid, 0, ALLOC_BYTES, msg, sizeof msg), 0);
    /* another GPU's handle, a handle of the wrong size, no uuid */
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h, "GPU-00000000-0000-0000-0000-000000000000", 0,
                                 4096, msg, sizeof msg), DASH_ENOTSUP);
    CU_ASSERT(strstr(msg, "another GPU") != NULL);
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h - 1, uuid, 0, 4096, msg, sizeof msg), DASH_EINVAL);
    CU_ASSERT_EQUAL(raw_register(r, &h, sizeof h, NULL, 0, 4096, msg, sizeof msg), DASH_EINVAL);
    raw_goodbye(r); /* release the whole-allocation registration before the memory goes */
    raw_close(r);

    /* shared memory on the CUDA backend: staged through the device, the same bits */
    struct dash_buffer *shm = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(f.c, gpu_dashd_view_bytes, &shm), 0);
    unsigned char *got = malloc(gpu_dashd_result_bytes());
    char why[128] = "";
    int rc = gpu_dashd_run_through_daemon(f.c, shm, gpu_dashd_inputs, got, why, sizeof why);
    if (rc)
        fprintf(stderr, "\n  shared memory on the CUDA daemon: %s", why);
    CU_ASSERT_EQUAL(rc, 0);
    const char *diff = rc ? NULL : gpu_dashd_first_difference(got, gpu_dashd_expected);
    if (diff)
        fprintf(stderr, "\n  shared memory on the CUDA daemon: %s differs", diff);
    CU_ASSERT_PTR_NULL(diff);
    free(got);
    CU_ASSERT_EQUAL(dash_buffer_free(f.c, shm), 0);
    /* still serving this client, bit for bit */
    gpu_dashd_check_bits(&f, "after the refusals");
    gpu_dashd_fixture_close(&f, "gpu-bounds");
}

/* dash_cuda_tensors: many strided views of one allocation in one call - each the buffer and
 * offset dash_cuda_view gives for the bytes it spans, shape and strides copied; a view
 * running past the allocation and malformed refs are refused. */
void test_dashd_gpu_cuda_tensors_are_the_views_of_their_allocation(void)
{
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-tensors");
    unsigned char *m = f.alloc;
    struct dash_cuda_ref refs[3] = {
        /* a dense (2, 8, 2, 64) bf16 tensor at 256 bytes */
        {.ptr = m + 256, .ndim = 4, .elem_size = 2, .shape = {2, 8, 2, 64},
         .strides = {8 * 2 * 64, 2 * 64, 64, 1}},
        /* a (2, 2, 8) float32 lse at 64 KiB */
        {.ptr = m + 65536, .ndim = 3, .elem_size = 4, .shape = {2, 2, 8}, .strides = {16, 8, 1}},
        /* a transposed view, (batch, seqlen, heads, d) of a (batch, heads, seqlen, d) block */
        {.ptr = m + 131072, .ndim = 4, .elem_size = 2, .shape = {1, 8, 4, 64},
         .strides = {4 * 8 * 64, 64, 8 * 64, 1}},
    };
    struct dash_tensor t[3];
    memset(t, 0xab, sizeof t);
    CU_ASSERT_EQUAL_FATAL(dash_cuda_tensors(f.c, 3, refs, t), 0);
    const size_t bytes[3] = {2 * 8 * 2 * 64 * 2, 2 * 2 * 8 * 4, 4 * 8 * 64 * 2};
    for (int i = 0; i < 3; i++) {
        struct dash_buffer *b = NULL;
        uint64_t off = 0;
        CU_ASSERT_EQUAL(dash_cuda_view(f.c, refs[i].ptr, bytes[i], &b, &off), 0);
        CU_ASSERT_PTR_EQUAL(t[i].buf, b);
        CU_ASSERT_EQUAL(t[i].offset, off);
        CU_ASSERT_EQUAL(t[i].offset, (uint64_t)((const unsigned char *)refs[i].ptr - m));
        CU_ASSERT_EQUAL(t[i].ndim, refs[i].ndim);
        for (int d = 0; d < refs[i].ndim; d++) {
            CU_ASSERT_EQUAL(t[i].shape[d], refs[i].shape[d]);
            CU_ASSERT_EQUAL(t[i].strides[d], refs[i].strides[d]);
        }
    }
    CU_ASSERT_PTR_EQUAL(t[0].buf, t[1].buf); /* one allocation, one registration */
    CU_ASSERT_PTR_EQUAL(t[0].buf, t[2].buf);

    /* the last byte of the allocation is fine, one more is not */
    struct dash_cuda_ref edge = {.ptr = m + ALLOC_BYTES - 128, .ndim = 1, .elem_size = 2,
                                 .shape = {64}, .strides = {1}};
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 1, &edge, t), 0);
    edge.shape[0] = 65;
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 1, &edge, t), DASH_EBOUNDS);
    struct dash_cuda_ref bad = refs[0];
    bad.ndim = 5;
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 1, &bad, t), DASH_EINVAL);
    bad = refs[0];
    bad.strides[1] = -1;
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 1, &bad, t), DASH_EINVAL);
    bad = refs[0];
    bad.shape[2] = 0;
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 1, &bad, t), DASH_EINVAL);
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, -1, refs, t), DASH_EINVAL);
    gpu_dashd_fixture_close(&f, "gpu-tensors");
}

/* dash_cuda_tensors of more allocations than the view cache holds: a later tensor of the
 * call may not evict (and free) the registration an earlier one points to; with every
 * registration held by this call the answer is DASH_EBUSY, and the holds end with it. */
void test_dashd_gpu_cuda_tensors_never_evict_their_own_views(void)
{
    enum { N = 64 + 1 }; /* DASH__VIEW_CACHE + 1 */
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-tensors-evict");
    void *mem[N] = {0};
    struct dash_cuda_ref refs[N];
    static struct dash_tensor t[N];
    for (int i = 0; i < N; i++) {
        CU_ASSERT_FATAL(cudaMalloc(&mem[i], (size_t)2 << 20) == cudaSuccess); /* IPC-sized */
        refs[i] = (struct dash_cuda_ref){.ptr = mem[i], .ndim = 1, .elem_size = 4,
                                         .shape = {16}, .strides = {1}};
    }
    int rc = dash_cuda_tensors(f.c, N, refs, t);
    if (rc == 0) /* what it gave must still be live and distinct: the first one was evicted */
        fprintf(stderr, "\n  %d allocations in one call: t[0].buf %p, t[%d].buf %p", N,
                (void *)t[0].buf, N - 1, (void *)t[N - 1].buf);
    CU_ASSERT_EQUAL(rc, DASH_EBUSY);
    /* nothing stays held: the cache evicts again */
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 1, &refs[N - 1], t), 0);
    CU_ASSERT_EQUAL(dash_cuda_tensors(f.c, 2, refs, t), 0);
    CU_ASSERT_PTR_NOT_EQUAL(t[0].buf, t[1].buf);
    gpu_dashd_fixture_close(&f, "gpu-tensors-evict");
    for (int i = 0; i < N; i++)
        CU_ASSERT(cudaFree(mem[i]) == cudaSuccess);
}

/* float64 is the CPU engine's: the CUDA backend refuses it, on device memory and on shared
 * memory it would stage, with a reply that says so and where it runs; the client goes on. */
void test_dashd_gpu_cuda_backend_refuses_float64_with_a_clear_error(void)
{
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-f64");
    struct tensors ts = gpu_dashd_tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_F64, .mask = DASH_MASK_CAUSAL};
    CU_ASSERT_EQUAL(dash_forward(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], NULL),
                    DASH_EBADDTYPE);
    const char *why = dash_last_error(f.c);
    CU_ASSERT(why && strstr(why, "f64") && strstr(why, "CPU engine"));
    if (why)
        fprintf(stderr, "\n  (dashd: %s)", why);
    struct dash_buffer *shm = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(f.c, gpu_dashd_view_bytes, &shm), 0);
    struct tensors hs = gpu_dashd_tensors_of(shm);
    CU_ASSERT_EQUAL(dash_forward(f.c, &a, &hs.t[Q], &hs.t[K], &hs.t[V], &hs.t[OUT], &hs.t[LSE], NULL),
                    DASH_EBADDTYPE);
    CU_ASSERT_EQUAL(dash_buffer_free(f.c, shm), 0);
    gpu_dashd_check_bits(&f, "after refusing float64");
    gpu_dashd_fixture_close(&f, "gpu-f64");
}

void test_dashd_gpu_garbage_handle_is_an_error_reply(void)
{
    char uuid[48], msg[256];
    uuid_of_device0(uuid);
    unsigned char garbage[64];
    struct tu_rng rng;
    tu_rng_init(&rng, gpu_dashd_seed ^ 0x6a7b);
    for (size_t i = 0; i < sizeof garbage; i++)
        garbage[i] = (unsigned char)tu_next(&rng);
    struct raw_client *r = raw_connect(gpu_dashd_D.endpoint);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL_FATAL(raw_hello(r, 1), 0);
    int code = raw_register(r, garbage, sizeof garbage, uuid, 0, 4096, msg, sizeof msg);
    CU_ASSERT(code < 0 && code != -1);
    CU_ASSERT(strstr(msg, "cannot open the CUDA IPC handle") != NULL);
    memset(garbage, 0, sizeof garbage);
    code = raw_register(r, garbage, sizeof garbage, uuid, 0, 4096, msg, sizeof msg);
    CU_ASSERT(code < 0 && code != -1);
    raw_close(r);
    CU_ASSERT(dashd_alive(&gpu_dashd_D));
    CU_ASSERT_EQUAL(raw_ping_endpoint(gpu_dashd_D.endpoint, 5000), 0);
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-after-garbage");
    gpu_dashd_check_bits(&f, "after a garbage handle");
    gpu_dashd_fixture_close(&f, "gpu-after-garbage");
}

/* The configuration an OpResult reports can be sent back and reproduces the bits: the v2
 * backward reports 128-row kv-tiles, which the daemon must accept; 64 also runs; other
 * sizes are DASH_ESCHED. */
void test_dashd_gpu_reported_config_reproduces_the_bits(void)
{
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-config");
    CU_ASSERT_FATAL(gpu_dashd_view_load(dash_buffer_data(f.b), gpu_dashd_inputs) == 0);
    struct tensors ts = gpu_dashd_tensors_of(f.b);
    struct dash_tensor *t = ts.t;
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    struct dash_result r, r2;
    CU_ASSERT_EQUAL_FATAL(dash_forward(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], NULL), 0);
    unsigned char *g1 = malloc(QB), *g2 = malloc(QB);
    CU_ASSERT_EQUAL_FATAL(dash_backward(f.c, &a, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                        &t[DQ], &t[DK], &t[DV], &r), 0);
    CU_ASSERT_FATAL(gpu_dashd_fetch(g1, dash_buffer_data(f.b), DQ) == 0);
    struct dash_attn again = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL,
                              .schedule = r.schedule, .wave = r.wave, .block_m = r.block_m,
                              .block_n = r.block_n};
    CU_ASSERT_FATAL(gpu_dashd_poison_grads(dash_buffer_data(f.b)) == 0);
    CU_ASSERT_EQUAL(dash_backward(f.c, &again, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                  &t[DQ], &t[DK], &t[DV], &r2), 0);
    CU_ASSERT_FATAL(gpu_dashd_fetch(g2, dash_buffer_data(f.b), DQ) == 0);
    CU_ASSERT(memcmp(g1, g2, QB) == 0);
    CU_ASSERT_EQUAL(r2.block_n, r.block_n);
    again.block_n = 64;
    CU_ASSERT_EQUAL(dash_backward(f.c, &again, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                  &t[DQ], &t[DK], &t[DV], &r2), 0);
    CU_ASSERT_EQUAL(r2.block_n, 64);
    again.block_n = 96;
    CU_ASSERT_EQUAL(dash_backward(f.c, &again, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                  &t[DQ], &t[DK], &t[DV], NULL), DASH_ESCHED);
    again.block_n = 128;
    CU_ASSERT_EQUAL(dash_forward(f.c, &again, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], NULL),
                    DASH_ESCHED); /* the forward's kv-tiles are 64 */
    free(g1);
    free(g2);
    gpu_dashd_fixture_close(&f, "gpu-config");
}

/* Every malformed RegisterEvents and EventSync gets a clear error, a good one works, and
 * the daemon goes on serving. */
void test_dashd_gpu_event_sync_errors_are_replies(void)
{
    char uuid[48], msg[256];
    uuid_of_device0(uuid);
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-events");
    CU_ASSERT_FATAL(gpu_dashd_view_load(f.alloc + VIEW_OFF, gpu_dashd_inputs) == 0);
    cudaIpcMemHandle_t mh;
    CU_ASSERT_FATAL(cudaIpcGetMemHandle(&mh, f.alloc) == cudaSuccess);
    struct raw_client *r = raw_connect(gpu_dashd_D.endpoint);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL_FATAL(raw_hello(r, 1), 0);
    uint64_t whole = raw_register_id(r, &mh, uuid, ALLOC_BYTES);
    CU_ASSERT_FATAL(whole != 0);

    enum { NEV = 3, MANY = EVRING_TEST_MANY };
    cudaEvent_t ev[NEV];
    static unsigned char h[MANY][64];
    size_t lens[MANY];
    for (int i = 0; i < MANY; i++)
        lens[i] = 64;
    for (int i = 0; i < NEV; i++) {
        cudaIpcEventHandle_t eh;
        CU_ASSERT_FATAL(cudaEventCreateWithFlags(&ev[i], cudaEventInterprocess |
                                                             cudaEventDisableTiming) == cudaSuccess);
        CU_ASSERT_FATAL(cudaIpcGetEventHandle(&eh, ev[i]) == cudaSuccess);
        memcpy(h[i], &eh, 64);
    }
    int64_t first = 0;
    CU_ASSERT_EQUAL(raw_events(r, h, lens, 0, uuid, msg, sizeof msg, &first), DASH_EINVAL);
    size_t short_len = 63;
    CU_ASSERT_EQUAL(raw_events(r, h, &short_len, 1, uuid, msg, sizeof msg, &first), DASH_EINVAL);
    CU_ASSERT(strstr(msg, "bytes") != NULL);
    CU_ASSERT_EQUAL(raw_events(r, h, lens, 1, "GPU-00000000-0000-0000-0000-000000000000", msg,
                               sizeof msg, &first), DASH_ENOTSUP);
    CU_ASSERT_EQUAL(raw_events(r, h, lens, 1, NULL, msg, sizeof msg, &first), DASH_EINVAL);
    struct tu_rng rng;
    tu_rng_init(&rng, gpu_dashd_seed ^ 0xe7e7);
    for (int i = NEV; i < MANY; i++)
        for (int j = 0; j < 64; j++)
            h[i][j] = (unsigned char)tu_next(&rng);
    CU_ASSERT_EQUAL(raw_events(r, &h[NEV], lens, 1, uuid, msg, sizeof msg, &first), DASH_EINVAL);
    CU_ASSERT(strstr(msg, "cannot open event handle") != NULL);
    CU_ASSERT_EQUAL(raw_events(r, h, lens, MANY, uuid, msg, sizeof msg, &first), DASH_ENOSPC);
    /* good ones: indices in registration order */
    CU_ASSERT_EQUAL(raw_events(r, h, lens, 2, uuid, msg, sizeof msg, &first), 0);
    CU_ASSERT_EQUAL(first, 0);
    CU_ASSERT_EQUAL(raw_events(r, &h[2], lens, 1, uuid, msg, sizeof msg, &first), 0);
    CU_ASSERT_EQUAL(first, 2);

    int has_run = 0;
    Dash__EventSync sync = DASH__EVENT_SYNC__INIT;
    sync.has_wait_event = 1;
    sync.wait_event = 3;
    CU_ASSERT_EQUAL(raw_forward_sync(r, whole, &sync, msg, sizeof msg, &has_run), DASH_ENOENT);
    CU_ASSERT(strstr(msg, "not registered") != NULL);
    sync.wait_event = 0;
    sync.has_record_event = 1;
    sync.record_event = 1000;
    CU_ASSERT_EQUAL(raw_forward_sync(r, whole, &sync, msg, sizeof msg, &has_run), DASH_ENOENT);
    sync.has_record_event = 0;
    sync.has_reply_when_queued = sync.reply_when_queued = 1;
    CU_ASSERT_EQUAL(raw_forward_sync(r, whole, &sync, msg, sizeof msg, &has_run), DASH_EINVAL);
    CU_ASSERT(strstr(msg, "record_event") != NULL);
    /* a good one: answered when queued (no run time yet), the record reaches our event */
    CU_ASSERT_FATAL(cudaEventRecord(ev[0], 0) == cudaSuccess);
    sync.has_record_event = 1;
    sync.record_event = 1;
    CU_ASSERT_EQUAL(raw_forward_sync(r, whole, &sync, msg, sizeof msg, &has_run), 0);
    CU_ASSERT(!has_run);
    CU_ASSERT(cudaEventSynchronize(ev[1]) == cudaSuccess);
    /* the same without reply_when_queued: answered when done */
    sync.has_reply_when_queued = 0;
    CU_ASSERT_EQUAL(raw_forward_sync(r, whole, &sync, msg, sizeof msg, &has_run), 0);
    CU_ASSERT(has_run);
    CU_ASSERT(cudaEventQuery(ev[1]) == cudaSuccess);

    /* events order device work only: a shared-memory op that names them is refused */
    char shm_name[64];
    snprintf(shm_name, sizeof shm_name, "/dash-gpu-events-%d", (int)getpid());
    int fd = shm_open(shm_name, O_CREAT | O_EXCL | O_RDWR, 0600);
    CU_ASSERT_FATAL(fd >= 0 && ftruncate(fd, (off_t)gpu_dashd_view_bytes) == 0);
    close(fd);
    Dash__RegisterBuffer rb = DASH__REGISTER_BUFFER__INIT;
    rb.size = gpu_dashd_view_bytes;
    rb.shm_name = shm_name;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 7004;
    req.body_case = DASH__REQUEST__BODY_REGISTER_BUFFER;
    req.register_buffer = &rb;
    Dash__Reply *rep = raw_call(r, &req, 10000);
    CU_ASSERT_FATAL(rep && rep->code == 0 && rep->has_buffer_id);
    uint64_t shm_id = rep->buffer_id;
    wire_free_reply(rep);
    CU_ASSERT_EQUAL(raw_forward_sync(r, shm_id, &sync, msg, sizeof msg, &has_run), DASH_EINVAL);
    CU_ASSERT(strstr(msg, "device buffers") != NULL);

    /* semaphores: a fail word that is misaligned, one of the other two, or outside the
     * buffer is refused before any word is written (nothing waits on these) */
    Dash__EventSync sig = DASH__EVENT_SYNC__INIT;
    sig.has_signal_buffer = sig.has_ready_offset = sig.has_done_offset = sig.has_signal_seq = 1;
    sig.signal_buffer = whole;
    sig.ready_offset = 0;
    sig.done_offset = 8;
    sig.signal_seq = 1;
    sig.has_fail_offset = 1;
    const uint64_t bad_fail[] = {4, 0, 8, ALLOC_BYTES, UINT64_MAX - 7};
    for (size_t i = 0; i < sizeof bad_fail / sizeof bad_fail[0]; i++) {
        sig.fail_offset = bad_fail[i];
        msg[0] = '\0';
        CU_ASSERT_EQUAL(raw_forward_sync(r, whole, &sig, msg, sizeof msg, &has_run), DASH_EINVAL);
        CU_ASSERT(strstr(msg, "fail word") != NULL);
    }

    raw_goodbye(r);
    raw_close(r);
    /* the daemon has dropped the session (and closed its copies of the events) by the
     * time it answers anything after the goodbye */
    CU_ASSERT_EQUAL(raw_ping_endpoint(gpu_dashd_D.endpoint, 5000), 0);
    for (int i = 0; i < NEV; i++)
        CU_ASSERT(cudaEventDestroy(ev[i]) == cudaSuccess);
    shm_unlink(shm_name);
    gpu_dashd_check_bits(&f, "after the event errors");
    gpu_dashd_fixture_close(&f, "gpu-events");
}

/* Head dims 96, 256, 80 and 200 through dashd give the bits of the kernels in this process
 * (96: the 128 kernels on widened copies; 256: v3's on sm_90, else v1's; 80 and 200: the
 * 128 and 256 kernels on widened copies), forward and a shift backward; head dims 84 (not a
 * multiple of 8), 24 and 264 are refused with a reason, and the session goes on. */
void test_dashd_gpu_head_dims_96_and_256_match_in_process(void)
{
    struct dash_client *c = gpu_dashd_connect_client("gpu-hdims");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    struct cuattn *ca = NULL;
    CU_ASSERT_EQUAL_FATAL(cuattn_new(0, &ca), 0);
    struct tu_rng r;
    tu_rng_init(&r, gpu_dashd_seed ^ 0x96256);
    const int32_t dims[] = {96, 256, 80, 200};
    for (int di = 0; di < 4; di++) {
        const int32_t d = dims[di];
        /* q k v out dout dq dk dv, then lse; q-shaped slots have HQ heads, the others HKV */
        const int heads[8] = {HQ, HKV, HKV, HQ, HQ, HQ, HKV, HKV};
        size_t at[9], total = 0;
        for (int i = 0; i < 9; i++) {
            at[i] = total;
            total += i < 8 ? (size_t)SEQ * heads[i] * d * ES : LB;
            total = (total + 255) & ~(size_t)255;
        }
        unsigned char *host = malloc(total), *got = malloc(total), *want = malloc(total);
        unsigned char *mem[2] = {NULL, NULL};
        CU_ASSERT_FATAL(host && got && want);
        memset(host, 0xff, total); /* outputs poisoned */
        for (int i = 0; i < 5; i++)
            if (i != 3)
                tu_fill(host + at[i], DTYPE_BF16, (int64_t)SEQ * heads[i] * d, &r, 1.0);
        for (int w = 0; w < 2; w++) {
            CUDA_OK(cudaMalloc((void **)&mem[w], total));
            CUDA_OK(cudaMemcpy(mem[w], host, total, cudaMemcpyHostToDevice));
        }
        /* in process */
        struct attn_problem p = {.batch = 1, .seqlen_q = SEQ, .seqlen_k = SEQ, .heads_q = HQ, .heads_kv = HKV, .head_dim = d, .dtype = DTYPE_BF16, .mask = SCHED_MASK_CAUSAL, .scale = (float)(1.0 / sqrt((double)d))};
        struct attn_tensor e[8];
        for (int i = 0; i < 8; i++)
            e[i] = attn_dense(mem[0] + at[i], SEQ, heads[i], d);
        float *lse = (float *)(void *)(mem[0] + at[8]);
        struct attn_config cfg = {SCHED_SHIFT, 0, 0, 0, 0};
        CU_ASSERT_EQUAL_FATAL(cuattn_forward(ca, &p, NULL, e[3], lse, e[0], e[1], e[2], NULL), 0);
        CU_ASSERT_EQUAL_FATAL(cuattn_backward(ca, &p, &cfg, 0, e[5], e[6], e[7], e[0], e[1], e[2],
                                              e[3], lse, e[4], NULL),
                              0);
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(want, mem[0], total, cudaMemcpyDeviceToHost));
        /* through dashd */
        struct dash_buffer *b = NULL;
        CU_ASSERT_EQUAL_FATAL(dash_cuda_register(c, mem[1], total, &b), 0);
        struct dash_tensor t[9];
        for (int i = 0; i < 8; i++)
            t[i] = dash_tensor_dense(b, at[i], 1, SEQ, heads[i], d);
        t[8] = dash_tensor_lse(b, at[8], 1, HQ, SEQ);
        struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL,
                              .schedule = DASH_SCHED_SHIFT};
        struct dash_result res;
        int rc = dash_forward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], &res);
        if (rc == 0)
            rc = dash_backward(c, &a, &t[0], &t[1], &t[2], &t[3], &t[8], &t[4], &t[5], &t[6],
                               &t[7], &res);
        if (rc)
            fprintf(stderr, "\n  head dim %d: %s: %s", d, dash_errname(rc), dash_last_error(c));
        CU_ASSERT_EQUAL(rc, 0);
        /* the tiles reported: 64 at 256 (v3's or v1's); at 96, 80 and 200 those of the kernels
         * they run on */
        CU_ASSERT_EQUAL(res.block_n, cuattn_bwd_block_n(ca, &p));
        CUDA_OK(cudaMemcpy(got, mem[1], total, cudaMemcpyDeviceToHost));
        CU_ASSERT(memcmp(got, want, total) == 0);
        for (size_t i = 0; i < total; i++)
            if (got[i] != want[i]) {
                int slot = 8;
                while (slot > 0 && at[slot] > i)
                    slot--;
                fprintf(stderr, "\n  head dim %d: first difference at byte %zu (tensor %d of q k v "
                        "out dout dq dk dv lse)", d, i, slot);
                break;
            }
        /* and the outputs were written: no 0xff poison left in out */
        CU_ASSERT(got[at[3]] != 0xff || got[at[3] + 1] != 0xff);
        CU_ASSERT_EQUAL(dash_buffer_free(c, b), 0);
        for (int w = 0; w < 2; w++)
            CUDA_OK(cudaFree(mem[w]));
        free(host);
        free(got);
        free(want);
    }
    /* head dims the kernels do not serve: error replies that say which ones they do (84: not
     * a multiple of 8; 24 and 264: outside 32..256, refused at validation); then a served
     * call on the same session goes through */
    const int32_t refused[] = {84, 24, 264, 64};
    unsigned char *m = NULL;
    const size_t tb = (size_t)SEQ * HQ * 264 * ES;
    CUDA_OK(cudaMalloc((void **)&m, 5 * tb));
    CUDA_OK(cudaMemset(m, 0, 5 * tb));
    struct dash_buffer *b = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_cuda_register(c, m, 5 * tb, &b), 0);
    for (int i = 0; i < 4; i++) {
        const int32_t d = refused[i];
        struct dash_tensor q = dash_tensor_dense(b, 0, 1, SEQ, HQ, d);
        struct dash_tensor k = dash_tensor_dense(b, tb, 1, SEQ, HQ, d);
        struct dash_tensor v = dash_tensor_dense(b, 2 * tb, 1, SEQ, HQ, d);
        struct dash_tensor o = dash_tensor_dense(b, 3 * tb, 1, SEQ, HQ, d);
        struct dash_tensor l = dash_tensor_lse(b, 4 * tb, 1, HQ, SEQ);
        struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
        struct dash_result res;
        const int rc = dash_forward(c, &a, &q, &k, &v, &o, &l, &res);
        if (d == 64) {
            CU_ASSERT_EQUAL(rc, 0); /* the daemon goes on serving this client */
            continue;
        }
        CU_ASSERT_EQUAL(rc, DASH_EHEADDIM);
        const char *why = dash_last_error(c);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, d == 84 ? "multiples of 8" : "32"));
        if (rc != DASH_EHEADDIM)
            fprintf(stderr, "\n  head dim %d: %s: %s", d, dash_errname(rc), why);
    }
    CU_ASSERT_EQUAL(dash_buffer_free(c, b), 0);
    CUDA_OK(cudaFree(m));
    cuattn_free(ca);
    dash_close(c);
}

/* Windows, softcap and packed batches run on the CUDA backend at head dim 64 (their bits
 * are checked in suite gpu_dashd_varlen), from device buffers; at head dim 256, which their
 * kernels lack, each is an error reply that says so, and the daemon goes on serving. */
void test_dashd_gpu_windows_softcap_and_packed_batches_run_and_other_dims_are_refused(void)
{
    struct fixture f;
    gpu_dashd_fixture_open(&f, "gpu-issue17");
    struct dash_tensor t[SLOTS], w[SLOTS];
    for (int s = 0; s < SLOTS; s++) {
        int kv = s == K || s == V || s == DK || s == DV;
        t[s] = s == LSE ? dash_tensor_lse(f.b, gpu_dashd_off[s], 1, HQ, SEQ)
                        : dash_tensor_dense(f.b, gpu_dashd_off[s], 1, SEQ, kv ? HKV : HQ, HD);
        /* head dim 256: fewer rows in the same bytes */
        w[s] = s == LSE ? dash_tensor_lse(f.b, gpu_dashd_off[s], 1, HQ, 37)
                        : dash_tensor_dense(f.b, gpu_dashd_off[s], 1, 37, kv ? HKV : HQ, 256);
    }
    struct dash_result r;
    struct dash_attn win = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .window = 1,
                            .window_left = 64, .window_right = 0};
    CU_ASSERT_EQUAL(dash_forward(f.c, &win, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &r), 0);
    CU_ASSERT_STRING_EQUAL(r.backend, "cuda");
    CU_ASSERT_EQUAL(dash_forward(f.c, &win, &w[Q], &w[K], &w[V], &w[OUT], &w[LSE], NULL),
                    DASH_EHEADDIM);
    CU_ASSERT_PTR_NOT_NULL(strstr(dash_last_error(f.c), "sliding windows"));
    CU_ASSERT_PTR_NOT_NULL(strstr(dash_last_error(f.c), "not 256"));
    struct dash_attn cap = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .softcap = 30.0f};
    CU_ASSERT_EQUAL(dash_forward(f.c, &cap, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], NULL), 0);
    CU_ASSERT_EQUAL(dash_backward(f.c, &cap, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], &t[DOUT],
                                  &t[DQ], &t[DK], &t[DV], &r), 0);
    CU_ASSERT_STRING_EQUAL(r.backend, "cuda");
    CU_ASSERT_EQUAL(dash_backward(f.c, &cap, &w[Q], &w[K], &w[V], &w[OUT], &w[LSE], &w[DOUT],
                                  &w[DQ], &w[DK], &w[DV], NULL), DASH_EHEADDIM);
    CU_ASSERT_PTR_NOT_NULL(strstr(dash_last_error(f.c), "softcap"));
    /* a packed batch: offsets in shared memory, tensors (total, heads, dim) on the device */
    struct dash_buffer *sb = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_shm_alloc(f.c, 4096, &sb), 0);
    int32_t *cu = dash_buffer_data(sb);
    cu[0] = 0, cu[1] = 77, cu[2] = SEQ;
    struct dash_attn pk = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL, .max_seqlen_q = SEQ,
                           .max_seqlen_k = SEQ};
    pk.cu_seqlens_q = (struct dash_tensor){.buf = sb, .offset = 0, .ndim = 1, .shape = {3}};
    pk.cu_seqlens_k = pk.cu_seqlens_q;
    struct dash_tensor p3[SLOTS];
    for (int s = 0; s < SLOTS; s++) {
        int kv = s == K || s == V || s == DK || s == DV;
        p3[s] = (struct dash_tensor){.buf = f.b, .offset = gpu_dashd_off[s], .ndim = s == LSE ? 2 : 3};
        if (s == LSE) {
            p3[s].shape[0] = HQ, p3[s].shape[1] = SEQ;
        } else {
            p3[s].shape[0] = SEQ, p3[s].shape[1] = kv ? HKV : HQ, p3[s].shape[2] = HD;
        }
    }
    CU_ASSERT_EQUAL(dash_forward(f.c, &pk, &p3[Q], &p3[K], &p3[V], &p3[OUT], &p3[LSE], &r), 0);
    CU_ASSERT_EQUAL(dash_backward(f.c, &pk, &p3[Q], &p3[K], &p3[V], &p3[OUT], &p3[LSE], &p3[DOUT],
                                  &p3[DQ], &p3[DK], &p3[DV], &r), 0);
    CU_ASSERT_STRING_EQUAL(r.backend, "cuda");
    /* and a plain request still runs */
    struct dash_attn plain = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    CU_ASSERT_EQUAL(dash_forward(f.c, &plain, &t[Q], &t[K], &t[V], &t[OUT], &t[LSE], NULL), 0);
    CU_ASSERT_EQUAL(dash_buffer_free(f.c, sb), 0);
    CU_ASSERT_EQUAL(dash_buffer_free(f.c, f.b), 0);
    CU_ASSERT(cudaFree(f.alloc) == cudaSuccess);
    dash_close(f.c);
}

/* The CPU backend refuses CUDA memory; libdash passes the daemon's verdict on. */
void test_dashd_gpu_cpu_backend_refuses_cuda_buffers(void)
{
    struct dashd_proc cpu;
    CU_ASSERT_EQUAL_FATAL(dashd_start(&cpu, "--backend cpu --threads 2"), 0);
    struct dash_connect_opts o = {.client_name = "gpu-on-cpu", .timeout_ms = 10000};
    struct dash_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dash_connect(cpu.endpoint, &o, &c), 0);
    unsigned char *alloc = NULL;
    CU_ASSERT_FATAL(cudaMalloc((void **)&alloc, ALLOC_BYTES) == cudaSuccess);
    struct dash_buffer *b = NULL;
    CU_ASSERT_EQUAL(dash_cuda_register(c, alloc + VIEW_OFF, 4096, &b), DASH_ENOTSUP);
    CU_ASSERT_EQUAL(dash_cuda_register(c, (void *)gpu_dashd_inputs, 4096, &b), DASH_EINVAL); /* host */
    dash_close(c);
    CU_ASSERT(cudaFree(alloc) == cudaSuccess);
    CU_ASSERT_EQUAL(dashd_stop(&cpu), 0);
}
