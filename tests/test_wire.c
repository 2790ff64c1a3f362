// SPDX-License-Identifier: BSD-3-Clause
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
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
    /* the socket sits in a directory of its own, not in /tmp itself */
    char want[64], dir[64], want_dir[64];
    snprintf(want, sizeof want, "ipc:///tmp/dashd-%u/dashd.sock", (unsigned)getuid());
    CU_ASSERT_STRING_EQUAL(buf, want);
    snprintf(want_dir, sizeof want_dir, "/tmp/dashd-%u", (unsigned)getuid());
    CU_ASSERT_EQUAL(wire_private_dir(dir, sizeof dir), 0);
    CU_ASSERT_STRING_EQUAL(dir, want_dir);
    CU_ASSERT_EQUAL(wire_private_dir(dir, 8), -ENAMETOOLONG);
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

static void test_wire_peer_creds_are_the_last_three_fields(void)
{
    int64_t uid = 7, pid = 7;
    CU_ASSERT_EQUAL(wire_peer_creds("/tmp/x.sock:1000:1001:4242", &uid, &pid), 0);
    CU_ASSERT_EQUAL(uid, 1000);
    CU_ASSERT_EQUAL(pid, 4242);
    CU_ASSERT_EQUAL(wire_peer_creds("@dash:x:y:0:0:1", &uid, &pid), 0);
    CU_ASSERT_EQUAL(uid, 0);
    CU_ASSERT_EQUAL(pid, 1);
    CU_ASSERT_EQUAL(wire_peer_creds(NULL, &uid, &pid), -ENOENT);
    CU_ASSERT_EQUAL(wire_peer_creds("", &uid, &pid), -ENOENT);
    CU_ASSERT_EQUAL(wire_peer_creds("127.0.0.1", &uid, &pid), -ENOENT);
    CU_ASSERT_EQUAL(wire_peer_creds("a:1:2:", &uid, &pid), -ENOENT);
    CU_ASSERT_EQUAL(wire_peer_creds("a:x:2:3", &uid, &pid), -ENOENT);
}

/* Set DASHD_ENDPOINT_OWNER (NULL: unset it). */
static void put_owner_env(const char *v)
{
    if (v)
        setenv("DASHD_ENDPOINT_OWNER", v, 1);
    else
        unsetenv("DASHD_ENDPOINT_OWNER");
}

/* Unset DASHD_ENDPOINT_OWNER, returning what it was, for restore_owner_env(). */
static char *clear_owner_env(void)
{
    const char *old = getenv("DASHD_ENDPOINT_OWNER");
    char *saved = old ? strdup(old) : NULL;
    put_owner_env(NULL);
    return saved;
}

static void restore_owner_env(char *saved)
{
    put_owner_env(saved);
    free(saved);
}

static void test_wire_peer_check_trusts_the_caller_root_and_the_named_owner(void)
{
    char *saved = clear_owner_env();
    char addr[64], why[512];
    const char *ep = "ipc://@dash-wire-test";
    snprintf(addr, sizeof addr, "@x:%u:%u:99", (unsigned)geteuid(), (unsigned)getegid());
    CU_ASSERT_EQUAL(wire_peer_check(addr, ep, -1, why, sizeof why), 0);
    CU_ASSERT_STRING_EQUAL(why, "");
    CU_ASSERT_EQUAL(wire_peer_check("@x:0:0:1", ep, -1, why, sizeof why), 0);
    if (geteuid() != 54321) {
        CU_ASSERT_EQUAL(wire_peer_check("@x:54321:54321:77", ep, -1, why, sizeof why), DASH_EPERM);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "uid 54321"));
        CU_ASSERT_PTR_NOT_NULL(strstr(why, ep));
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "pid 77"));
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "DASHD_ENDPOINT_OWNER=54321"));
        /* the socket's owner, as the file check found it */
        CU_ASSERT_EQUAL(wire_peer_check("@x:54321:54321:77", ep, 54321, why, sizeof why), 0);
        put_owner_env("54321");
        CU_ASSERT_EQUAL(wire_peer_check("@x:54321:54321:77", ep, -1, why, sizeof why), 0);
        CU_ASSERT_EQUAL(wire_peer_check("@x:54322:54322:77", ep, -1, why, sizeof why), DASH_EPERM);
    }
    put_owner_env("no-such-user-dash-test");
    CU_ASSERT_EQUAL(wire_peer_check("@x:0:0:1", ep, -1, why, sizeof why), DASH_EPERM);
    put_owner_env(NULL);
    /* no credentials: nothing to believe */
    CU_ASSERT_EQUAL(wire_peer_check(NULL, ep, -1, why, sizeof why), DASH_EPERM);
    CU_ASSERT_EQUAL(wire_peer_check("127.0.0.1", ep, -1, why, sizeof why), DASH_EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "no credentials"));
    restore_owner_env(saved);
}

static void test_wire_endpoint_check_judges_the_socket_and_its_directory(void)
{
    char *saved = clear_owner_env();
    char dir[] = "/tmp/dash-wire-ep-XXXXXX", ep[128], link_ep[128], why[1024];
    int64_t owner = 7;
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(ep, sizeof ep, "ipc://%s/s.sock", dir);
    snprintf(link_ep, sizeof link_ep, "ipc://%s/l.sock", dir);

    /* nothing there yet, in a directory of ours: fine, and no file vouches for anyone */
    CU_ASSERT_EQUAL(wire_endpoint_check(ep, &owner, why, sizeof why), 0);
    CU_ASSERT_EQUAL(owner, -1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/s.sock", dir);
    CU_ASSERT_EQUAL_FATAL(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    CU_ASSERT_EQUAL(wire_endpoint_check(ep, &owner, why, sizeof why), 0);
    CU_ASSERT_EQUAL(owner, (int64_t)geteuid());

    /* our socket, but anyone may replace it */
    CU_ASSERT_EQUAL(chmod(dir, 0777), 0);
    CU_ASSERT_EQUAL(wire_endpoint_check(ep, &owner, why, sizeof why), DASH_EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, dir));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "written by others"));
    /* sticky, as /tmp: others cannot remove or rename our socket */
    CU_ASSERT_EQUAL(chmod(dir, 01777), 0);
    CU_ASSERT_EQUAL(wire_endpoint_check(ep, &owner, why, sizeof why), 0);
    CU_ASSERT_EQUAL(chmod(dir, 0700), 0);

    /* a link in place of the socket is not followed */
    CU_ASSERT_EQUAL(symlink(sa.sun_path, link_ep + 6), 0);
    CU_ASSERT_EQUAL(wire_endpoint_check(link_ep, &owner, why, sizeof why), DASH_EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "symbolic link"));

    /* no file to judge */
    CU_ASSERT_EQUAL(wire_endpoint_check("ipc://@dash-wire-test", &owner, why, sizeof why), 0);
    CU_ASSERT_EQUAL(owner, -1);
    CU_ASSERT_EQUAL(wire_endpoint_check("tcp://127.0.0.1:1", &owner, why, sizeof why), 0);
    CU_ASSERT_EQUAL(wire_endpoint_check("ipc:///nonexistent-dash/dir/s.sock", &owner, why,
                                        sizeof why), 0);
    CU_ASSERT_EQUAL(wire_endpoint_check("ipc://", &owner, why, sizeof why), -EINVAL);

    put_owner_env("no-such-user-dash-test");
    CU_ASSERT_EQUAL(wire_endpoint_check(ep, &owner, why, sizeof why), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "DASHD_ENDPOINT_OWNER=no-such-user-dash-test"));
    put_owner_env("root");
    CU_ASSERT_EQUAL(wire_endpoint_check(ep, &owner, why, sizeof why), 0);

    close(fd);
    unlink(link_ep + 6);
    unlink(ep + 6);
    rmdir(dir);
    restore_owner_env(saved);
}

static void test_wire_private_dir_check_wants_a_real_private_directory(void)
{
    char dir[] = "/tmp/dash-wire-priv-XXXXXX", link[64], why[512];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    CU_ASSERT_EQUAL(wire_private_dir_check(dir, geteuid(), why, sizeof why), 0);
    CU_ASSERT_EQUAL(chmod(dir, 0750), 0);
    CU_ASSERT_EQUAL(wire_private_dir_check(dir, geteuid(), why, sizeof why), DASH_EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "0750"));
    CU_ASSERT_EQUAL(chmod(dir, 0700), 0);
    CU_ASSERT_EQUAL(wire_private_dir_check(dir, geteuid() + 1, why, sizeof why), DASH_EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "belongs to"));
    snprintf(link, sizeof link, "%s.link", dir);
    CU_ASSERT_EQUAL(symlink(dir, link), 0);
    CU_ASSERT_EQUAL(wire_private_dir_check(link, geteuid(), why, sizeof why), DASH_EPERM);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "symbolic link"));
    unlink(link);
    CU_ASSERT_EQUAL(wire_private_dir_check(link, geteuid(), why, sizeof why), -ENOENT);
    rmdir(dir);
}

/* The one definition of how the wire names a GPU: as nvidia-smi -L prints its UUID. */
static void test_wire_formats_a_gpu_uuid_as_nvidia_smi_does(void)
{
    const unsigned char b[16] = {0x17, 0x98, 0x1e, 0x79, 0x18, 0x15, 0xa2, 0xc3,
                                 0x6a, 0xca, 0x89, 0x44, 0x90, 0x5e, 0x5b, 0x99};
    char buf[WIRE_UUID_MAX];
    wire_format_uuid(b, buf);
    CU_ASSERT_STRING_EQUAL(buf, "GPU-17981e79-1815-a2c3-6aca-8944905e5b99");
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
    ADD_TEST(s, test_wire_peer_creds_are_the_last_three_fields);
    ADD_TEST(s, test_wire_peer_check_trusts_the_caller_root_and_the_named_owner);
    ADD_TEST(s, test_wire_endpoint_check_judges_the_socket_and_its_directory);
    ADD_TEST(s, test_wire_private_dir_check_wants_a_real_private_directory);
    ADD_TEST(s, test_wire_formats_a_gpu_uuid_as_nvidia_smi_does);
    return 0;
}
