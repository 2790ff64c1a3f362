// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_dashd.c - a real dashd, spoken to over the raw wire protocol: every kind of bad
 * input gets a clear error reply and the daemon goes on serving everyone else. Also the
 * results it computes are bit for bit the in-process engine's, it keeps answering pings
 * during a long backward, refuses to share its endpoint, and exits cleanly on SIGTERM.
 */
#include "suites.h"
#include "harness.h"
#include "testutil.h"
#include "daemon/session.h"
#include "kernels/cpu/engine.h"
#include "proto/errors.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static struct dashd_proc D;
static uint64_t next_id = 100;

static int suite_init(void)
{
    return dashd_start(&D, "--threads 2 --session-timeout 3") == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    return dashd_stop(&D) == 0 ? 0 : -1;
}

/* ---- helpers ---------------------------------------------------------------------- */

struct shm {
    char name[64];
    void *data;
    size_t size;
};

/* A new shm object `name` of `size` bytes, mapped. */
static int shm_make_named(struct shm *s, const char *name, size_t size)
{
    snprintf(s->name, sizeof s->name, "%s", name);
    int fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
        return -1;
    s->data = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    s->size = size;
    return s->data == MAP_FAILED ? -1 : 0;
}

static int shm_make(struct shm *s, size_t size)
{
    static int n;
    char name[64];
    snprintf(name, sizeof name, "/dash-test-%d-%d", (int)getpid(), n++);
    return shm_make_named(s, name, size);
}

static void shm_drop(struct shm *s)
{
    munmap(s->data, s->size);
    shm_unlink(s->name);
}

/* A connected raw client with a session. */
static struct raw_client *session(void)
{
    struct raw_client *r = raw_connect(D.endpoint);
    if (r && raw_hello(r, WIRE_PROTOCOL_VERSION) != 0) {
        raw_close(r);
        return NULL;
    }
    return r;
}

static int64_t register_shm(struct raw_client *r, const struct shm *s, uint64_t size)
{
    Dash__RegisterBuffer rb = DASH__REGISTER_BUFFER__INIT;
    rb.size = size;
    rb.shm_name = (char *)s->name;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = next_id++;
    req.body_case = DASH__REQUEST__BODY_REGISTER_BUFFER;
    req.register_buffer = &rb;
    Dash__Reply *rep = raw_call(r, &req, 5000);
    int64_t id = rep && rep->code == 0 && rep->has_buffer_id ? (int64_t)rep->buffer_id
                                                             : (rep ? rep->code : -1);
    wire_free_reply(rep);
    return id;
}

/* One attention problem laid out densely in one buffer: q k v out lse dout dq dk dv. */
struct layout {
    int32_t b, sq, sk, hq, hkv, d;
    enum dtype_kind dt;
    uint64_t off[9];
    int64_t shape[9][4];
    int ndim[9];
    uint64_t total;
};

enum { T_Q, T_K, T_V, T_OUT, T_LSE, T_DOUT, T_DQ, T_DK, T_DV };

static void layout_init(struct layout *L, int32_t b, int32_t sq, int32_t sk, int32_t hq, int32_t hkv,
                        int32_t d, enum dtype_kind dt)
{
    memset(L, 0, sizeof *L);
    L->b = b, L->sq = sq, L->sk = sk, L->hq = hq, L->hkv = hkv, L->d = d, L->dt = dt;
    uint64_t at = 0;
    for (int t = 0; t < 9; t++) {
        int kv = t == T_K || t == T_V || t == T_DK || t == T_DV;
        uint64_t n;
        if (t == T_LSE) {
            L->ndim[t] = 3;
            L->shape[t][0] = b, L->shape[t][1] = hq, L->shape[t][2] = sq;
            n = (uint64_t)b * hq * sq * 4;
        } else {
            L->ndim[t] = 4;
            L->shape[t][0] = b, L->shape[t][1] = kv ? sk : sq, L->shape[t][2] = kv ? hkv : hq;
            L->shape[t][3] = d;
            n = (uint64_t)b * (kv ? sk : sq) * (kv ? hkv : hq) * d * (uint64_t)dtype_size(dt);
        }
        L->off[t] = at;
        at += (n + 63) & ~(uint64_t)63;
    }
    L->total = at;
}

/* TensorRefs for a layout, all in buffer `id`. */
struct refs {
    Dash__TensorRef t[9];
};

static void refs_init(struct refs *R, const struct layout *L, uint64_t id)
{
    for (int t = 0; t < 9; t++) {
        dash__tensor_ref__init(&R->t[t]);
        R->t[t].buffer_id = id;
        R->t[t].offset = L->off[t];
        R->t[t].n_shape = (size_t)L->ndim[t];
        R->t[t].shape = (int64_t *)L->shape[t];
    }
}

static Dash__AttnParams params_for(const struct layout *L, enum sched_mask mask)
{
    Dash__AttnParams p = DASH__ATTN_PARAMS__INIT;
    p.dtype = L->dt == DTYPE_F32 ? DASH__DTYPE__F32 : L->dt == DTYPE_F16 ? DASH__DTYPE__F16 : DASH__DTYPE__BF16;
    p.mask = mask == SCHED_MASK_CAUSAL ? DASH__MASK__CAUSAL : DASH__MASK__FULL;
    return p;
}

static Dash__Reply *forward(struct raw_client *r, Dash__AttnParams *p, struct refs *R)
{
    Dash__Forward f = DASH__FORWARD__INIT;
    f.params = p;
    f.q = &R->t[T_Q], f.k = &R->t[T_K], f.v = &R->t[T_V], f.out = &R->t[T_OUT], f.lse = &R->t[T_LSE];
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = next_id++;
    req.body_case = DASH__REQUEST__BODY_FORWARD;
    req.forward = &f;
    return raw_call(r, &req, 20000);
}

static uint64_t send_backward(struct raw_client *r, Dash__AttnParams *p, struct refs *R)
{
    Dash__Backward b = DASH__BACKWARD__INIT;
    b.params = p;
    b.q = &R->t[T_Q], b.k = &R->t[T_K], b.v = &R->t[T_V], b.out = &R->t[T_OUT];
    b.lse = &R->t[T_LSE], b.dout = &R->t[T_DOUT], b.dq = &R->t[T_DQ], b.dk = &R->t[T_DK];
    b.dv = &R->t[T_DV];
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = next_id++;
    req.body_case = DASH__REQUEST__BODY_BACKWARD;
    req.backward = &b;
    void *buf;
    size_t len;
    if (wire_encode(&req.base, &buf, &len) != 0)
        return 0;
    int rc = raw_send(r, buf, len);
    free(buf);
    return rc ? 0 : req.id;
}

static int forward_code(struct raw_client *r, Dash__AttnParams *p, struct refs *R)
{
    Dash__Reply *rep = forward(r, p, R);
    int code = rep ? rep->code : 1;
    if (rep && rep->code != 0 && (!rep->message || !*rep->message))
        code = 2; /* an error must say what is wrong */
    wire_free_reply(rep);
    return code;
}

static void fill_inputs(const struct layout *L, void *base, struct tu_rng *rng)
{
    const int in[] = {T_Q, T_K, T_V, T_DOUT};
    for (int i = 0; i < 4; i++) {
        int t = in[i];
        int64_t n = L->shape[t][0] * L->shape[t][1] * L->shape[t][2] * L->shape[t][3];
        tu_fill((char *)base + L->off[t], L->dt, n, rng, 1.0);
    }
}

/* A shared-memory object holding L with fresh random inputs (outputs left as they are). */
static void shm_with_inputs(struct shm *s, const struct layout *L, uint64_t salt)
{
    CU_ASSERT_FATAL(shm_make(s, L->total) == 0);
    struct tu_rng rng;
    tu_rng_init(&rng, tu_seed() ^ salt);
    fill_inputs(L, s->data, &rng);
}

static int daemon_serves(void)
{
    return raw_ping_endpoint(D.endpoint, 5000) == 0 && dashd_alive(&D);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_dashd_ping_and_stats_need_no_session(void)
{
    CU_ASSERT(daemon_serves());
    struct raw_client *r = raw_connect(D.endpoint);
    CU_ASSERT_FATAL(r != NULL);
    Dash__Stats st = DASH__STATS__INIT;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = next_id++;
    req.body_case = DASH__REQUEST__BODY_STATS;
    req.stats = &st;
    Dash__Reply *rep = raw_call(r, &req, 5000);
    CU_ASSERT_FATAL(rep != NULL);
    CU_ASSERT_EQUAL(rep->code, 0);
    CU_ASSERT_PTR_NOT_NULL(rep->stats);
    if (rep->stats)
        CU_ASSERT(rep->stats->has_queue_capacity && rep->stats->queue_capacity > 0);
    CU_ASSERT(rep->has_session_id && rep->session_id == 0);
    wire_free_reply(rep);
    raw_close(r);
}

static void test_dashd_hello_checks_protocol_version(void)
{
    struct raw_client *r = raw_connect(D.endpoint);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT_EQUAL(raw_hello(r, 999), DASH_EVERSION);
    CU_ASSERT_EQUAL(raw_hello(r, 0), DASH_EVERSION);
    CU_ASSERT_EQUAL(raw_hello(r, WIRE_PROTOCOL_VERSION), 0);
    raw_close(r);
}

/* Hello with a rank: rank and world_size go together, rank < world_size, else
 * DASH_EINVAL naming them and no session; a good pair shows in the session's stats. */
static void test_dashd_hello_rank_needs_a_world_size_above_it(void)
{
    struct raw_client *r = raw_connect(D.endpoint);
    CU_ASSERT_FATAL(r != NULL);
    const struct {
        int has_rank, has_world;
        unsigned rank, world;
        int want;
    } cases[] = {
        {1, 1, 2, 2, DASH_EINVAL}, {1, 1, 0, 0, DASH_EINVAL}, {1, 0, 0, 0, DASH_EINVAL},
        {0, 1, 0, 4, DASH_EINVAL}, {1, 1, 7, 4, DASH_EINVAL}, {1, 1, 3, 4, 0},
    };
    uint64_t session = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Dash__Hello hl = DASH__HELLO__INIT;
        hl.protocol_version = WIRE_PROTOCOL_VERSION;
        hl.client_name = "ranked";
        hl.has_rank = cases[i].has_rank;
        hl.rank = cases[i].rank;
        hl.has_world_size = cases[i].has_world;
        hl.world_size = cases[i].world;
        Dash__Request req = DASH__REQUEST__INIT;
        req.id = next_id++;
        req.body_case = DASH__REQUEST__BODY_HELLO;
        req.hello = &hl;
        Dash__Reply *rep = raw_call(r, &req, 5000);
        CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
        CU_ASSERT_EQUAL(rep->code, cases[i].want);
        if (cases[i].want) {
            CU_ASSERT(rep->message && strstr(rep->message, "rank and world_size"));
            CU_ASSERT(!rep->has_session_id || rep->session_id == 0);
        } else if (rep->hello) {
            session = rep->hello->session_id;
        }
        wire_free_reply(rep);
    }
    CU_ASSERT_FATAL(session != 0);
    Dash__Stats st = DASH__STATS__INIT;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = next_id++;
    req.body_case = DASH__REQUEST__BODY_STATS;
    req.stats = &st;
    Dash__Reply *rep = raw_call(r, &req, 5000);
    CU_ASSERT_FATAL(rep && rep->stats);
    int found = 0;
    for (size_t k = 0; k < rep->stats->n_clients; k++) {
        const Dash__ClientStats *c = rep->stats->clients[k];
        if (c->session_id != session)
            continue;
        found = 1;
        CU_ASSERT(c->has_rank && c->rank == 3 && c->has_world_size && c->world_size == 4);
    }
    CU_ASSERT(found);
    wire_free_reply(rep);
    raw_close(r);
}

static void test_dashd_requests_before_hello_get_no_session(void)
{
    struct raw_client *r = raw_connect(D.endpoint);
    CU_ASSERT_FATAL(r != NULL);
    struct shm s;
    CU_ASSERT_FATAL(shm_make(&s, 4096) == 0);
    CU_ASSERT_EQUAL(register_shm(r, &s, 4096), DASH_ENOSESSION);
    shm_drop(&s);
    raw_close(r);
}

static void test_dashd_garbage_gets_malformed_and_daemon_serves_others(void)
{
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    struct tu_rng rng;
    tu_rng_init(&rng, tu_seed() ^ 0xbad);
    unsigned char junk[300];
    int malformed = 0, answered = 0;
    for (int i = 0; i < 50; i++) {
        for (size_t j = 0; j < sizeof junk; j++)
            junk[j] = (unsigned char)tu_next(&rng);
        CU_ASSERT_EQUAL(raw_send(r, junk, 1 + i * 5), 0);
        Dash__Reply *rep = raw_recv(r, 5000);
        answered += rep != NULL;
        malformed += rep && rep->code != 0;
        wire_free_reply(rep);
    }
    CU_ASSERT_EQUAL(answered, 50);
    CU_ASSERT_EQUAL(malformed, 50);
    /* an empty frame, and a truncated valid request */
    CU_ASSERT_EQUAL(raw_send(r, "", 0), 0);
    Dash__Reply *rep = raw_recv(r, 5000);
    CU_ASSERT(rep && rep->code == DASH_EMALFORMED && rep->id == 0);
    wire_free_reply(rep);
    Dash__Ping p = DASH__PING__INIT;
    p.has_payload = 1;
    p.payload.data = (uint8_t *)"0123456789abcdef";
    p.payload.len = 16;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 77;
    req.body_case = DASH__REQUEST__BODY_PING;
    req.ping = &p;
    void *buf;
    size_t len;
    CU_ASSERT_FATAL(wire_encode(&req.base, &buf, &len) == 0);
    CU_ASSERT_EQUAL(raw_send(r, buf, len - 5), 0);
    rep = raw_recv(r, 5000);
    CU_ASSERT(rep && rep->code == DASH_EMALFORMED && rep->id == 77); /* the id is echoed */
    wire_free_reply(rep);
    /* the same connection still works afterwards, with the payload echoed */
    rep = raw_call(r, &req, 5000);
    CU_ASSERT(rep && rep->code == 0 && rep->has_ping_payload && rep->ping_payload.len == 16);
    wire_free_reply(rep);
    free(buf);
    raw_close(r);
    CU_ASSERT(daemon_serves());
}

static void test_dashd_unknown_request_type_gets_protocol_error(void)
{
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    /* id = 5, then field 50 (varint 1): a body from a newer client this daemon lacks */
    const unsigned char msg[] = {0x08, 0x05, 0x90, 0x03, 0x01};
    CU_ASSERT_EQUAL(raw_send(r, msg, sizeof msg), 0);
    Dash__Reply *rep = raw_recv(r, 5000);
    CU_ASSERT(rep && rep->code == DASH_EPROTO && rep->id == 5);
    wire_free_reply(rep);
    raw_close(r);
}

static void test_dashd_unknown_and_foreign_buffers_are_refused(void)
{
    struct raw_client *a = session(), *b = session();
    CU_ASSERT_FATAL(a && b);
    struct layout L;
    layout_init(&L, 1, 16, 16, 2, 2, 32, DTYPE_F32);
    struct shm s;
    CU_ASSERT_FATAL(shm_make(&s, L.total) == 0);
    int64_t id = register_shm(a, &s, L.total);
    CU_ASSERT_FATAL(id > 0);
    struct refs R;
    Dash__AttnParams p = params_for(&L, SCHED_MASK_FULL);
    refs_init(&R, &L, (uint64_t)id);
    CU_ASSERT_EQUAL(forward_code(a, &p, &R), 0);
    CU_ASSERT_EQUAL(forward_code(b, &p, &R), DASH_ENOBUF); /* a's buffer, b's session */
    refs_init(&R, &L, (uint64_t)id + 1000);
    CU_ASSERT_EQUAL(forward_code(a, &p, &R), DASH_ENOBUF);
    /* bad shm names and a buffer larger than its object */
    struct shm fake = s;
    snprintf(fake.name, sizeof fake.name, "/no-such-dash-shm-%d", (int)getpid());
    CU_ASSERT(register_shm(a, &fake, 4096) < 0);
    snprintf(fake.name, sizeof fake.name, "/a/b");
    CU_ASSERT(register_shm(a, &fake, 4096) < 0);
    CU_ASSERT_EQUAL(register_shm(a, &s, L.total + 1), DASH_EBOUNDS);
    shm_drop(&s);
    raw_close(a);
    raw_close(b);
}

/* One shm object registered twice: a forward whose lse (through the second id) lies
 * inside its out (through the first) is refused with DASH_ESHAPE naming both ids, and
 * the out bytes are untouched; with lse past out it runs. (Before: outputs were compared
 * by buffer id only, and the two writes raced over the same bytes.) */
static void test_dashd_outputs_overlapping_through_two_ids_of_one_object_are_refused(void)
{
    struct raw_client *a = session();
    CU_ASSERT_FATAL(a != NULL);
    struct layout L;
    layout_init(&L, 1, 16, 16, 2, 2, 32, DTYPE_F32);
    struct shm s;
    shm_with_inputs(&s, &L, 0x0b1);
    int64_t id1 = register_shm(a, &s, L.total), id2 = register_shm(a, &s, L.total);
    CU_ASSERT_FATAL(id1 > 0 && id2 > 0 && id1 != id2);
    struct refs R;
    Dash__AttnParams p = params_for(&L, SCHED_MASK_FULL);
    refs_init(&R, &L, (uint64_t)id1);
    R.t[T_LSE].buffer_id = (uint64_t)id2;
    R.t[T_LSE].offset = L.off[T_OUT] + 64; /* inside out, through the other id */
    tu_poison((char *)s.data + L.off[T_OUT], L.off[T_LSE] - L.off[T_OUT]);
    unsigned char before[64];
    memcpy(before, (char *)s.data + L.off[T_OUT], sizeof before);
    Dash__Reply *rep = forward(a, &p, &R);
    CU_ASSERT_FATAL(rep != NULL);
    CU_ASSERT_EQUAL(rep->code, DASH_ESHAPE);
    printf("\n    %s ", rep->message);
    CU_ASSERT(rep->message && strstr(rep->message, "out and lse overlap") != NULL);
    wire_free_reply(rep);
    CU_ASSERT(memcmp(before, (char *)s.data + L.off[T_OUT], sizeof before) == 0);
    R.t[T_LSE].offset = L.off[T_LSE]; /* apart: fine through either id */
    CU_ASSERT_EQUAL(forward_code(a, &p, &R), 0);
    shm_drop(&s);
    raw_close(a);
}

/* Interprocess events are the CUDA backend's: on the CPU backend RegisterEvents and an
 * op that names events get DASH_ENOTSUP saying why, an empty EventSync is harmless, and
 * the daemon goes on serving. */
static void test_dashd_event_sync_on_cpu_backend_is_refused_clearly(void)
{
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    unsigned char handle[64] = {1, 2, 3};
    ProtobufCBinaryData h = {sizeof handle, handle};
    Dash__RegisterEvents re = DASH__REGISTER_EVENTS__INIT;
    re.n_handles = 1;
    re.handles = &h;
    re.device_uuid = "GPU-00000000-0000-0000-0000-000000000000";
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = next_id++;
    req.body_case = DASH__REQUEST__BODY_REGISTER_EVENTS;
    req.register_events = &re;
    Dash__Reply *rep = raw_call(r, &req, 5000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
    CU_ASSERT_EQUAL(rep->code, DASH_ENOTSUP);
    CU_ASSERT(rep->message && strstr(rep->message, "CUDA backend"));
    CU_ASSERT(!rep->has_first_event);
    wire_free_reply(rep);

    struct layout L;
    layout_init(&L, 1, 16, 16, 2, 2, 32, DTYPE_F32);
    struct shm s;
    shm_with_inputs(&s, &L, 0xe7);
    int64_t id = register_shm(r, &s, L.total);
    CU_ASSERT_FATAL(id > 0);
    struct refs R;
    refs_init(&R, &L, (uint64_t)id);
    Dash__AttnParams p = params_for(&L, SCHED_MASK_FULL);
    Dash__Forward f = DASH__FORWARD__INIT;
    f.params = &p;
    f.q = &R.t[T_Q], f.k = &R.t[T_K], f.v = &R.t[T_V], f.out = &R.t[T_OUT], f.lse = &R.t[T_LSE];
    Dash__EventSync sync = DASH__EVENT_SYNC__INIT;
    Dash__Request op = DASH__REQUEST__INIT;
    op.body_case = DASH__REQUEST__BODY_FORWARD;
    op.forward = &f;
    op.sync = &sync;
    /* each way of asking for ordering is refused: events, and the semaphores (signals),
     * which a CPU daemon's Hello does not offer */
    for (int ask = 0; ask < 4; ask++) {
        sync.has_wait_event = ask == 0;
        sync.has_record_event = ask == 1;
        sync.has_reply_when_queued = sync.reply_when_queued = ask == 2;
        sync.has_signal_buffer = sync.has_ready_offset = sync.has_done_offset =
            sync.has_signal_seq = ask == 3;
        sync.signal_buffer = (uint64_t)id;
        sync.done_offset = 8;
        sync.signal_seq = 1;
        op.id = next_id++;
        rep = raw_call(r, &op, 5000);
        CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
        CU_ASSERT_EQUAL(rep->code, DASH_ENOTSUP);
        CU_ASSERT(rep->message && strstr(rep->message, "CUDA backend"));
        CU_ASSERT(ask < 3 || (rep->message && strstr(rep->message, "signal sync")));
        wire_free_reply(rep);
    }
    Dash__Hello hl = DASH__HELLO__INIT;
    hl.protocol_version = WIRE_PROTOCOL_VERSION;
    Dash__Request hello = DASH__REQUEST__INIT;
    hello.id = next_id++;
    hello.body_case = DASH__REQUEST__BODY_HELLO;
    hello.hello = &hl;
    rep = raw_call(r, &hello, 5000);
    CU_ASSERT(rep && rep->hello && rep->hello->has_signals && !rep->hello->signals);
    wire_free_reply(rep);
    /* an EventSync that asks for nothing changes nothing */
    sync.has_wait_event = sync.has_record_event = 0;
    sync.has_signal_buffer = sync.has_ready_offset = sync.has_done_offset = 0;
    sync.has_signal_seq = 0;
    sync.has_reply_when_queued = 1;
    sync.reply_when_queued = 0;
    op.id = next_id++;
    rep = raw_call(r, &op, 20000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
    CU_ASSERT_EQUAL(rep->code, 0);
    CU_ASSERT(rep->op && rep->op->has_run_us);
    wire_free_reply(rep);
    CU_ASSERT(daemon_serves());
    shm_drop(&s);
    raw_close(r);
}

static void test_dashd_bad_tensors_get_precise_codes(void)
{
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    struct layout L;
    layout_init(&L, 1, 16, 16, 2, 2, 32, DTYPE_F32);
    struct shm s;
    CU_ASSERT_FATAL(shm_make(&s, L.total) == 0);
    int64_t id = register_shm(r, &s, L.total);
    CU_ASSERT_FATAL(id > 0);
    struct refs R;
    Dash__AttnParams p = params_for(&L, SCHED_MASK_CAUSAL);
    int64_t shape[4], strides[4];

#define RESET() (refs_init(&R, &L, (uint64_t)id), p = params_for(&L, SCHED_MASK_CAUSAL))
    RESET();
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), 0);
    /* offsets and extents past the end, including a wrap-around offset */
    RESET();
    R.t[T_OUT].offset = L.total - 8;
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), DASH_EBOUNDS);
    RESET();
    R.t[T_Q].offset = UINT64_MAX - 16;
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), DASH_EBOUNDS);
    RESET();
    R.t[T_LSE].offset = L.total - 4; /* lse needs 2*16 floats */
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), DASH_EBOUNDS);
    /* shapes: negative, zero, overflowing, wrong rank, disagreeing, bad GQA ratio */
    const struct {
        int t, dim;
        int64_t value;
        int code;
    } shape_cases[] = {
        {T_Q, 1, -16, DASH_ESHAPE},      {T_K, 0, 0, DASH_ESHAPE},
        {T_Q, 1, (int64_t)1 << 40, DASH_ESHAPE}, {T_V, 1, 15, DASH_ESHAPE},
        {T_K, 2, 3, DASH_ESHAPE},        {T_OUT, 2, 4, DASH_ESHAPE},
        {T_LSE, 2, 17, DASH_ESHAPE},     {T_Q, 3, 16, DASH_ESHAPE},
    };
    for (size_t i = 0; i < sizeof shape_cases / sizeof shape_cases[0]; i++) {
        RESET();
        memcpy(shape, L.shape[shape_cases[i].t], sizeof shape);
        shape[shape_cases[i].dim] = shape_cases[i].value;
        R.t[shape_cases[i].t].shape = shape;
        int got = forward_code(r, &p, &R);
        if (got != shape_cases[i].code && got != DASH_EBOUNDS)
            fprintf(stderr, "\n  shape case %zu: got %s", i, dash_errname(got));
        CU_ASSERT(got == shape_cases[i].code || got == DASH_EBOUNDS);
    }
    RESET();
    R.t[T_Q].n_shape = 3;
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), DASH_ESHAPE);
    /* stride tricks: a stride that reaches past the buffer, a negative one, an output that
     * overlaps itself, a strides list of the wrong length, a non-unit last stride */
    RESET();
    strides[0] = 16 * 2 * 32, strides[1] = 2 * 32, strides[2] = 32, strides[3] = 1;
    R.t[T_K].n_strides = 4;
    R.t[T_K].strides = strides;
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), 0); /* dense, spelled out: fine */
    strides[1] = 1 << 20;
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), DASH_EBOUNDS);
    strides[1] = -64;
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), DASH_ESHAPE);
    RESET();
    strides[0] = 0, strides[1] = 0, strides[2] = 32, strides[3] = 1;
    R.t[T_OUT].n_strides = 4;
    R.t[T_OUT].strides = strides;
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), DASH_ESHAPE);
    RESET();
    R.t[T_OUT].n_strides = 2;
    R.t[T_OUT].strides = strides;
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), DASH_ESHAPE);
    RESET();
    strides[0] = 16 * 2 * 32, strides[1] = 2 * 32, strides[2] = 32, strides[3] = 2;
    R.t[T_V].n_strides = 4;
    R.t[T_V].strides = strides;
    CU_ASSERT(forward_code(r, &p, &R) < 0);
    /* dtype, head dim, schedule parameters, scale */
    RESET();
    p.dtype = (Dash__DType)7;
    CU_ASSERT(forward_code(r, &p, &R) == DASH_EBADDTYPE || forward_code(r, &p, &R) == DASH_EMALFORMED);
    struct layout small;
    layout_init(&small, 1, 16, 16, 2, 2, 16, DTYPE_F32);
    struct refs Rs;
    refs_init(&Rs, &small, (uint64_t)id);
    Dash__AttnParams ps = params_for(&small, SCHED_MASK_FULL);
    CU_ASSERT_EQUAL(forward_code(r, &ps, &Rs), DASH_EHEADDIM);
    RESET();
    p.has_wave = 1;
    p.wave = 1 << 20;
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), DASH_ESCHED);
    RESET();
    p.has_scale = 1;
    p.scale = -1.0f;
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), DASH_EINVAL);
    p.scale = NAN;
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), DASH_EINVAL);
#undef RESET
    shm_drop(&s);
    raw_close(r);
    CU_ASSERT(daemon_serves());
}

/* The daemon's bits equal the in-process engine's, for forward and backward. */
static void test_dashd_results_equal_in_process_engine(void)
{
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    struct layout L;
    layout_init(&L, 2, 45, 37, 4, 2, 64, DTYPE_BF16);
    struct shm s;
    shm_with_inputs(&s, &L, 0xfeed);
    tu_poison((char *)s.data + L.off[T_OUT], L.off[T_LSE] - L.off[T_OUT]);
    int64_t id = register_shm(r, &s, L.total);
    CU_ASSERT_FATAL(id > 0);
    struct refs R;
    refs_init(&R, &L, (uint64_t)id);
    Dash__AttnParams p = params_for(&L, SCHED_MASK_CAUSAL);
    p.has_schedule = 1;
    p.schedule = DASH__SCHEDULE__SHIFT;
    p.has_wave = 1;
    p.wave = 3;
    Dash__Reply *rep = forward(r, &p, &R);
    CU_ASSERT_FATAL(rep && rep->code == 0);
    wire_free_reply(rep);
    uint64_t bid = send_backward(r, &p, &R);
    rep = raw_recv(r, 30000);
    CU_ASSERT_FATAL(rep && rep->id == bid && rep->code == 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rep->op);
    CU_ASSERT_EQUAL(rep->op->schedule, DASH__SCHEDULE__SHIFT);
    CU_ASSERT_EQUAL(rep->op->wave, 3);
    struct attn_config cfg = {SCHED_SHIFT, 3, rep->op->block_m, rep->op->block_n, 0};
    wire_free_reply(rep);

    /* the same in process, into a copy */
    unsigned char *mine = malloc(L.total);
    memcpy(mine, s.data, L.total);
    struct eng *e = eng_new(3);
    struct attn_problem pr = {.batch = L.b, .seqlen_q = L.sq, .seqlen_k = L.sk, .heads_q = L.hq, .heads_kv = L.hkv, .head_dim = L.d, .dtype = L.dt, .mask = SCHED_MASK_CAUSAL, .scale = (float)(1.0 / sqrt((double)L.d))};
#define T(x, s_, h_) attn_dense(mine + L.off[x], s_, h_, L.d)
    CU_ASSERT_EQUAL(eng_forward(e, &pr, &cfg, T(T_OUT, L.sq, L.hq), (float *)(mine + L.off[T_LSE]),
                                T(T_Q, L.sq, L.hq), T(T_K, L.sk, L.hkv), T(T_V, L.sk, L.hkv), NULL), 0);
    CU_ASSERT_EQUAL(eng_backward(e, &pr, &cfg, T(T_DQ, L.sq, L.hq), T(T_DK, L.sk, L.hkv),
                                 T(T_DV, L.sk, L.hkv), T(T_Q, L.sq, L.hq), T(T_K, L.sk, L.hkv),
                                 T(T_V, L.sk, L.hkv), T(T_OUT, L.sq, L.hq),
                                 (float *)(mine + L.off[T_LSE]), T(T_DOUT, L.sq, L.hq), NULL), 0);
#undef T
    CU_ASSERT(memcmp(mine, s.data, L.total) == 0);
    free(mine);
    eng_free(e);
    shm_drop(&s);
    raw_close(r);
}

/* A backward long enough to see, and pings answered while it runs. */
static void test_dashd_answers_ping_during_long_backward(void)
{
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    struct layout L;
    layout_init(&L, 1, 1024, 1024, 4, 4, 64, DTYPE_F32);
    struct shm s;
    shm_with_inputs(&s, &L, 0);
    int64_t id = register_shm(r, &s, L.total);
    CU_ASSERT_FATAL(id > 0);
    struct refs R;
    refs_init(&R, &L, (uint64_t)id);
    Dash__AttnParams p = params_for(&L, SCHED_MASK_FULL);
    CU_ASSERT_FATAL(forward_code(r, &p, &R) == 0);
    uint64_t bid = send_backward(r, &p, &R);
    CU_ASSERT_FATAL(bid != 0);
    int pings = 0, done = 0;
    for (int i = 0; i < 400 && !done; i++) {
        if (raw_ping_endpoint(D.endpoint, 2000) == 0)
            pings++;
        Dash__Reply *rep = raw_recv(r, 0);
        if (rep) {
            done = rep->id == bid;
            CU_ASSERT(rep->code == 0);
            wire_free_reply(rep);
        }
    }
    if (!done) {
        Dash__Reply *rep = raw_recv(r, 60000);
        done = rep && rep->id == bid && rep->code == 0;
        wire_free_reply(rep);
    }
    CU_ASSERT(done);
    CU_ASSERT(pings >= 3); /* the backward takes well over 3 round trips */
    shm_drop(&s);
    raw_close(r);
}

static void test_dashd_shrunk_shm_gets_error_not_sigbus(void)
{
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    struct layout L;
    layout_init(&L, 1, 64, 64, 2, 2, 64, DTYPE_F32);
    struct shm s;
    shm_with_inputs(&s, &L, 0);
    int64_t id = register_shm(r, &s, L.total);
    CU_ASSERT_FATAL(id > 0);
    int fd = shm_open(s.name, O_RDWR, 0);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(ftruncate(fd, 0), 0);
    close(fd);
    struct refs R;
    refs_init(&R, &L, (uint64_t)id);
    Dash__AttnParams p = params_for(&L, SCHED_MASK_FULL);
    CU_ASSERT_EQUAL(forward_code(r, &p, &R), DASH_EBUFGONE);
    CU_ASSERT(daemon_serves());
    shm_unlink(s.name);
    munmap(s.data, s.size);
    raw_close(r);
}

/* The daemon's Stats reply (the caller frees it with wire_free_reply), or NULL. */
static Dash__Reply *stats_call(void)
{
    struct raw_client *r = raw_connect(D.endpoint);
    Dash__Stats st = DASH__STATS__INIT;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = next_id++;
    req.body_case = DASH__REQUEST__BODY_STATS;
    req.stats = &st;
    Dash__Reply *rep = r ? raw_call(r, &req, 5000) : NULL;
    raw_close(r);
    return rep;
}

/* Stats entries of sessions whose client pid is `pid`. */
static int sessions_of_pid(uint32_t pid)
{
    Dash__Reply *rep = stats_call();
    int n = -1;
    if (rep && rep->stats) {
        n = 0;
        for (size_t c = 0; c < rep->stats->n_clients; c++)
            n += rep->stats->clients[c]->has_pid && rep->stats->clients[c]->pid == pid;
    }
    wire_free_reply(rep);
    return n;
}

/* The daemon's error count (Stats). */
static int64_t daemon_errors(void)
{
    Dash__Reply *rep = stats_call();
    int64_t n = rep && rep->stats && rep->stats->has_errors ? (int64_t)rep->stats->errors : -1;
    wire_free_reply(rep);
    return n;
}

/* Wait up to `tenths` tenths of a second for the daemon to count at least `at_least`
 * errors; 1 if it did. A dead client's session ends with its connection, and its ops end
 * (as errors nobody hears) a little later. */
static int errors_reach(int64_t at_least, int tenths)
{
    for (int i = 0; i < tenths; i++, usleep(100000))
        if (daemon_errors() >= at_least)
            return 1;
    return 0;
}

static void test_dashd_goodbye_ends_the_session_at_once(void)
{
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    struct shm s;
    CU_ASSERT_FATAL(shm_make(&s, 4096) == 0);
    CU_ASSERT(register_shm(r, &s, 4096) > 0);
    int before = sessions_of_pid((uint32_t)getpid());
    CU_ASSERT(before >= 1);
    Dash__Goodbye g = DASH__GOODBYE__INIT;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = next_id++;
    req.body_case = DASH__REQUEST__BODY_GOODBYE;
    req.goodbye = &g;
    Dash__Reply *rep = raw_call(r, &req, 5000);
    CU_ASSERT(rep && rep->code == 0);
    wire_free_reply(rep);
    CU_ASSERT_EQUAL(sessions_of_pid((uint32_t)getpid()), before - 1);
    CU_ASSERT_EQUAL(register_shm(r, &s, 4096), DASH_ENOSESSION);
    /* without a session it is harmless */
    req.id = next_id++;
    rep = raw_call(r, &req, 5000);
    CU_ASSERT(rep && rep->code == 0);
    wire_free_reply(rep);
    shm_drop(&s);
    raw_close(r);
}

static void test_dashd_one_gib_message_is_refused(void)
{
    struct raw_client *big = raw_connect(D.endpoint);
    CU_ASSERT_FATAL(big != NULL);
    size_t len = (size_t)1 << 30;
    void *buf = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); /* zero pages */
    CU_ASSERT_FATAL(buf != MAP_FAILED);
    raw_send(big, buf, len);
    Dash__Reply *rep = raw_recv(big, 2000);
    CU_ASSERT_PTR_NULL(rep); /* the daemon drops the connection; it never answers */
    wire_free_reply(rep);
    raw_close(big);
    munmap(buf, len);
    CU_ASSERT(daemon_serves());
}

/* Fork a client that registers L's buffer s, sends `backwards` backwards and, once they
 * are on their way, dies by SIGKILL without a word; returns its pid once it is dead. */
static pid_t client_that_dies_with_work_sent(const struct layout *L, const struct shm *s, int backwards)
{
    pid_t child = fork();
    if (child == 0) {
        struct raw_client *r = session();
        int64_t id = r ? register_shm(r, s, L->total) : -1;
        if (id <= 0)
            _exit(1);
        struct refs R;
        refs_init(&R, L, (uint64_t)id);
        Dash__AttnParams p = params_for(L, SCHED_MASK_FULL);
        for (int i = 0; i < backwards; i++)
            send_backward(r, &p, &R);
        usleep(100000); /* the requests are on their way; now die */
        kill(getpid(), SIGKILL);
        _exit(2);
    }
    int status = 0;
    if (child > 0)
        waitpid(child, &status, 0);
    CU_ASSERT(child > 0 && WIFSIGNALED(status));
    return child;
}

/* Wait up to `tenths` tenths of a second for the sessions of pid to end; 1 if they did. */
static int sessions_end(pid_t pid, int tenths)
{
    for (int i = 0; i < tenths; i++, usleep(100000))
        if (sessions_of_pid((uint32_t)pid) == 0)
            return 1;
    return 0;
}

/* A client killed while its backward runs: the engine stops it midway (the op ends as
 * DASH_ECANCELED, with nobody to tell), the daemon keeps serving and forgets the session. */
static void test_dashd_client_killed_mid_request(void)
{
    struct layout L;
    layout_init(&L, 1, 2048, 2048, 4, 4, 64, DTYPE_F32); /* a backward of about a second */
    struct shm s;
    shm_with_inputs(&s, &L, 0);
    const int64_t errors_before = daemon_errors();
    CU_ASSERT_FATAL(errors_before >= 0);
    pid_t child = client_that_dies_with_work_sent(&L, &s, 1);
    CU_ASSERT(daemon_serves());
    CU_ASSERT(sessions_end(child, 100));
    CU_ASSERT(errors_reach(errors_before + 1, 100));
    shm_drop(&s);
}

/* A client killed with backwards still queued: those that had not started when it died
 * are not run (they end as DASH_ECANCELED errors, with nobody to tell), so the worker is
 * soon free for the others. */
static void test_dashd_queued_work_of_a_killed_client_is_not_run(void)
{
    struct layout L;
    layout_init(&L, 1, 2048, 2048, 4, 4, 64, DTYPE_F32); /* a backward of about a second */
    struct shm s;
    shm_with_inputs(&s, &L, 0);
    const int64_t errors_before = daemon_errors();
    CU_ASSERT_FATAL(errors_before >= 0);
    pid_t child = client_that_dies_with_work_sent(&L, &s, 4); /* one runs, three wait */
    CU_ASSERT(sessions_end(child, 300)); /* the running one finishes; the session expires */
    /* at least the three that were still queued were refused, not run */
    CU_ASSERT(errors_reach(errors_before + 3, 100));
    CU_ASSERT(daemon_serves());
    shm_drop(&s);
}

/* A shm object named as libdash names them, /dash-<pid>-<tag>, of `size` bytes. */
static int shm_make_libdash_named(struct shm *s, const char *tag, size_t size)
{
    char name[64];
    snprintf(name, sizeof name, "/dash-%d-%s", (int)getpid(), tag);
    return shm_make_named(s, name, size);
}

static int shm_exists(const char *name)
{
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

/* A client killed before it could unlink its buffers (no goodbye, no dash_close) leaves
 * them in /dev/shm; when its session ends, dashd sees the process gone and unlinks them.
 * A live client whose idle session expired keeps its buffer (it would register it again). */
static void test_dashd_gone_clients_buffers_are_unlinked_live_clients_are_kept(void)
{
    int pipefd[2];
    CU_ASSERT_FATAL(pipe(pipefd) == 0);
    pid_t child = fork();
    CU_ASSERT_FATAL(child >= 0);
    if (child == 0) {
        struct shm s;
        struct raw_client *r = session();
        char name[64] = "";
        if (r && shm_make_libdash_named(&s, "crash", 1 << 20) == 0 && register_shm(r, &s, 1 << 20) > 0)
            snprintf(name, sizeof name, "%s", s.name);
        if (write(pipefd[1], name, sizeof name) != (ssize_t)sizeof name)
            _exit(1);
        kill(getpid(), SIGKILL); /* no goodbye, no unlink */
        _exit(2);
    }
    close(pipefd[1]);
    char name[64] = "";
    CU_ASSERT_FATAL(read(pipefd[0], name, sizeof name) == (ssize_t)sizeof name);
    close(pipefd[0]);
    int status;
    waitpid(child, &status, 0);
    CU_ASSERT_FATAL(name[0] == '/'); /* left behind by the dead client... */

    struct shm live;
    CU_ASSERT_FATAL(shm_make_libdash_named(&live, "alive", 4096) == 0);
    struct raw_client *r = session();
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT(register_shm(r, &live, 4096) > 0);
    raw_close(r); /* no goodbye: the session ends with the connection, while we live */

    int gone = 0; /* ... until the daemon sees the client gone */
    for (int i = 0; i < 150 && !(gone = !shm_exists(name)); i++)
        usleep(100000);
    CU_ASSERT(gone);
    CU_ASSERT(sessions_end(getpid(), 150));
    /* past the time the daemon waits for a closed connection's process to go */
    usleep((SESS_RECLAIM_WAIT_MS + 1500) * 1000);
    CU_ASSERT(shm_exists(live.name)); /* ours, alive: kept */
    shm_drop(&live);
    if (!gone)
        shm_unlink(name);
    CU_ASSERT(daemon_serves());
}

static void test_dashd_second_daemon_on_same_endpoint_fails_loudly(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/dashd --endpoint %s 2>&1", tu_build_dir(), D.endpoint);
    char *out = NULL;
    int status = tu_run(cmd, &out);
    CU_ASSERT(status != 0);
    CU_ASSERT(out && strstr(out, "another dashd") != NULL);
    free(out);
    CU_ASSERT(daemon_serves());
}

static void test_dashd_sigterm_exits_cleanly_and_removes_socket(void)
{
    struct dashd_proc d2;
    CU_ASSERT_FATAL(dashd_start(&d2, NULL) == 0);
    const char *path = wire_ipc_path(d2.endpoint);
    CU_ASSERT_EQUAL(access(path, F_OK), 0);
    CU_ASSERT_EQUAL(dashd_stop(&d2), 0);
    CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
    /* and it starts again on the same path */
    CU_ASSERT_FATAL(dashd_restart(&d2) == 0);
    CU_ASSERT_EQUAL(dashd_stop(&d2), 0);
}

static void test_dashd_command_line(void)
{
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s/dashd --help", tu_build_dir());
    CU_ASSERT_EQUAL(tu_run(cmd, &out), 0);
    CU_ASSERT(out && strstr(out, "--endpoint") && strstr(out, "--backend"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s/dashd --version", tu_build_dir());
    CU_ASSERT_EQUAL(tu_run(cmd, &out), 0);
    CU_ASSERT(out && strstr(out, "dashd"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s/dashd --no-such-flag 2>/dev/null", tu_build_dir());
    CU_ASSERT_EQUAL(tu_run(cmd, NULL), 2);
    snprintf(cmd, sizeof cmd, "%s/dashd --threads zero 2>/dev/null", tu_build_dir());
    CU_ASSERT_EQUAL(tu_run(cmd, NULL), 2);
    /* the kernels are chosen by an option (never by the environment), for the cuda
     * backend only */
    snprintf(cmd, sizeof cmd, "%s/dashd --kernels v4 2>&1", tu_build_dir());
    CU_ASSERT_EQUAL(tu_run(cmd, &out), 2);
    CU_ASSERT(out && strstr(out, "auto, v1, v2 or v3"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s/dashd --backend cpu --kernels v2 2>&1", tu_build_dir());
    CU_ASSERT_EQUAL(tu_run(cmd, &out), 2);
    CU_ASSERT(out && strstr(out, "--backend cpu"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s/dashd --help", tu_build_dir());
    CU_ASSERT_EQUAL(tu_run(cmd, &out), 0);
    CU_ASSERT(out && strstr(out, "--kernels"));
    free(out);
}

/* The unit file passes `systemd-analyze verify` (with ExecStart pointing at this build, and
 * its Documentation= man pages found among this build's). tests/install_test.sh verifies
 * every installed unit. */
static void test_dashd_unit_file_verifies(void)
{
    char cmd[1024], *out = NULL;
    if (tu_run("command -v systemd-analyze >/dev/null", NULL) != 0) {
        fprintf(stderr, "\n  systemd-analyze not installed: unit file not verified ");
        return;
    }
    snprintf(cmd, sizeof cmd,
             "f=$(mktemp -d)/dashd.service && sed 's|^ExecStart=/usr/local/bin/dashd|ExecStart=%s/dashd|' "
             "systemd/dashd.service > $f && MANPATH=%s/man systemd-analyze verify $f 2>&1; echo rc=$?",
             tu_build_dir(), tu_build_dir());
    CU_ASSERT_EQUAL(tu_run(cmd, &out), 0);
    CU_ASSERT(out && strstr(out, "rc=0") != NULL);
    if (out && !strstr(out, "rc=0"))
        fprintf(stderr, "\n%s", out);
    free(out);
}

/* A client that sends a request which is refused and goes away before the reply can be
 * written: the failed write ends the connection (and with it the session) inside the
 * reply, so the handler must not touch the session after replying. The daemon is
 * stopped while the request and the close arrive, so it reads both in one go. */
static void test_dashd_refused_register_of_a_client_that_left_touches_no_freed_session(void)
{
    for (int round = 0; round < 3; round++) {
        struct raw_client *r = session();
        CU_ASSERT_FATAL(r != NULL);
        Dash__RegisterBuffer rb = DASH__REGISTER_BUFFER__INIT;
        rb.size = 4096;
        rb.shm_name = "no-leading-slash"; /* refused: DASH_EINVAL */
        Dash__Request req = DASH__REQUEST__INIT;
        req.id = next_id++;
        req.body_case = DASH__REQUEST__BODY_REGISTER_BUFFER;
        req.register_buffer = &rb;
        void *buf;
        size_t len;
        CU_ASSERT_FATAL(wire_encode(&req.base, &buf, &len) == 0);
        CU_ASSERT_FATAL(kill(D.pid, SIGSTOP) == 0);
        CU_ASSERT(raw_send(r, buf, len) == 0);
        free(buf);
        usleep(200000); /* the request reaches dashd's socket */
        raw_close(r);
        usleep(200000); /* and then the close */
        CU_ASSERT_FATAL(kill(D.pid, SIGCONT) == 0);
        CU_ASSERT(daemon_serves());
    }
}

int suite_dashd(void)
{
    CU_pSuite s = CU_add_suite("dashd", suite_init, suite_clean);
    if (!s)
        return -1;
    ADD_TEST(s, test_dashd_command_line);
    ADD_TEST(s, test_dashd_ping_and_stats_need_no_session);
    ADD_TEST(s, test_dashd_hello_checks_protocol_version);
    ADD_TEST(s, test_dashd_hello_rank_needs_a_world_size_above_it);
    ADD_TEST(s, test_dashd_requests_before_hello_get_no_session);
    ADD_TEST(s, test_dashd_refused_register_of_a_client_that_left_touches_no_freed_session);
    ADD_TEST(s, test_dashd_garbage_gets_malformed_and_daemon_serves_others);
    ADD_TEST(s, test_dashd_unknown_request_type_gets_protocol_error);
    ADD_TEST(s, test_dashd_unknown_and_foreign_buffers_are_refused);
    ADD_TEST(s, test_dashd_outputs_overlapping_through_two_ids_of_one_object_are_refused);
    ADD_TEST(s, test_dashd_bad_tensors_get_precise_codes);
    ADD_TEST(s, test_dashd_event_sync_on_cpu_backend_is_refused_clearly);
    ADD_TEST(s, test_dashd_results_equal_in_process_engine);
    ADD_TEST(s, test_dashd_answers_ping_during_long_backward);
    ADD_TEST(s, test_dashd_shrunk_shm_gets_error_not_sigbus);
    ADD_TEST(s, test_dashd_goodbye_ends_the_session_at_once);
    ADD_TEST(s, test_dashd_one_gib_message_is_refused);
    ADD_TEST(s, test_dashd_client_killed_mid_request);
    ADD_TEST(s, test_dashd_gone_clients_buffers_are_unlinked_live_clients_are_kept);
    ADD_TEST(s, test_dashd_queued_work_of_a_killed_client_is_not_run);
    ADD_TEST(s, test_dashd_second_daemon_on_same_endpoint_fails_loudly);
    ADD_TEST(s, test_dashd_sigterm_exits_cleanly_and_removes_socket);
    ADD_TEST(s, test_dashd_unit_file_verifies);
    return 0;
}
