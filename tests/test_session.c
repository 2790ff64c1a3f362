// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_session.c - the session table (daemon/session.c): sessions found by routing id,
 * session and buffer ids never reused, a buffer id valid only in the session that
 * registered it, buffers that outlive their session while a request still holds them,
 * and the latency percentiles over the ring of recent ops.
 */
#include "suites.h"
#include "../daemon/session.h"
#include "../proto/errors.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A mapped shm buffer of `size` bytes (the object itself is unlinked at once). */
static struct shmbuf *make_buf(uint64_t size)
{
    static int n;
    char name[64], msg[256];
    snprintf(name, sizeof name, "/dashd-test-session-%d-%d", (int)getpid(), n++);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return NULL;
    struct shmbuf *b = NULL;
    if (ftruncate(fd, (off_t)size) == 0)
        (void)shmbuf_open(name, size, -1, msg, sizeof msg, &b);
    close(fd);
    shm_unlink(name);
    return b;
}

static void test_session_ids_are_never_reused(void)
{
    struct sess_table *t = sess_table_new();
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    struct session *a, *b, *c;
    CU_ASSERT_EQUAL(sess_create(t, "\0\1\2\3\4", 5, &a), 0);
    CU_ASSERT_EQUAL(sess_create(t, "\0\1\2\3\5", 5, &b), 0);
    CU_ASSERT(a->id != 0 && b->id > a->id);
    CU_ASSERT_PTR_EQUAL(sess_find(t, "\0\1\2\3\4", 5), a);
    CU_ASSERT_PTR_EQUAL(sess_find(t, "\0\1\2\3\5", 5), b);
    CU_ASSERT_PTR_NULL(sess_find(t, "\0\1\2\3", 4));
    CU_ASSERT_EQUAL(sess_count(t), 2);
    uint64_t old = a->id;
    sess_drop(t, a);
    CU_ASSERT_PTR_NULL(sess_find(t, "\0\1\2\3\4", 5));
    CU_ASSERT_EQUAL(sess_count(t), 1);
    CU_ASSERT_EQUAL(sess_create(t, "\0\1\2\3\4", 5, &c), 0); /* same routing id again */
    CU_ASSERT(c->id > b->id && c->id != old);
    int seen = 0;
    for (struct session *s = sess_first(t); s; s = sess_next(s))
        seen++;
    CU_ASSERT_EQUAL(seen, 2);
    unsigned char big[SESS_RID_MAX + 1] = {0};
    struct session *none = NULL;
    CU_ASSERT_EQUAL(sess_create(t, big, sizeof big, &none), DASH_EINVAL);
    CU_ASSERT_PTR_NULL(none);
    sess_table_free(t);
}

static void test_session_buffer_ids_belong_to_one_session(void)
{
    struct sess_table *t = sess_table_new();
    struct session *a, *b;
    CU_ASSERT_EQUAL_FATAL(sess_create(t, "a", 1, &a), 0);
    CU_ASSERT_EQUAL_FATAL(sess_create(t, "b", 1, &b), 0);
    struct shmbuf *x = make_buf(4096), *y = make_buf(8192), *z = make_buf(4096);
    CU_ASSERT_FATAL(x && y && z);
    uint64_t ix, iy, iz;
    CU_ASSERT_EQUAL(sess_buf_add(t, a, x, 2, &ix), 0);
    CU_ASSERT_EQUAL(sess_buf_add(t, b, y, 2, &iy), 0);
    CU_ASSERT_EQUAL(sess_buf_add(t, a, z, 2, &iz), 0);
    CU_ASSERT(ix != iy && iy != iz && ix != iz);
    CU_ASSERT_PTR_EQUAL(sess_buf_find(a, ix), x);
    CU_ASSERT_PTR_NULL(sess_buf_find(a, iy)); /* b's buffer is unknown to a */
    CU_ASSERT_PTR_NULL(sess_buf_find(b, ix));
    CU_ASSERT_EQUAL(a->bytes_registered, 8192);
    CU_ASSERT_EQUAL(a->n_bufs, 2);
    struct shmbuf *w = make_buf(4096);
    uint64_t iw = 0;
    CU_ASSERT_EQUAL(sess_buf_add(t, a, w, 2, &iw), DASH_ENOSPC); /* at the per-session cap */
    shmbuf_unref(w);
    CU_ASSERT_EQUAL(sess_buf_remove(b, ix), DASH_ENOBUF);
    CU_ASSERT_EQUAL(sess_buf_remove(a, ix), 0);
    CU_ASSERT_EQUAL(sess_buf_remove(a, ix), DASH_ENOBUF);
    CU_ASSERT_EQUAL(a->bytes_registered, 4096);
    CU_ASSERT_PTR_EQUAL(sess_buf_find(a, iz), z);
    /* ids are not reused after a removal */
    struct shmbuf *v = make_buf(4096);
    uint64_t iv;
    CU_ASSERT_EQUAL(sess_buf_add(t, a, v, 2, &iv), 0);
    CU_ASSERT(iv > iz && iv != ix);
    sess_table_free(t);
}

static void test_session_buffer_outlives_dropped_session(void)
{
    struct sess_table *t = sess_table_new();
    struct session *a;
    CU_ASSERT_EQUAL_FATAL(sess_create(t, "a", 1, &a), 0);
    struct shmbuf *x = make_buf(4096);
    CU_ASSERT_FATAL(x != NULL);
    uint64_t id;
    CU_ASSERT_EQUAL(sess_buf_add(t, a, x, 8, &id), 0);
    shmbuf_ref(x); /* a request in flight */
    sess_drop(t, a);
    shmbuf_data(x)[4095] = 1; /* still mapped */
    CU_ASSERT_EQUAL(shmbuf_data(x)[4095], 1);
    shmbuf_unref(x); /* the request finished: unmapped now (valgrind checks the leak) */
    sess_table_free(t);
}

static void test_session_latency_percentiles(void)
{
    struct sess_table *t = sess_table_new();
    struct session *a;
    CU_ASSERT_EQUAL_FATAL(sess_create(t, "a", 1, &a), 0);
    CU_ASSERT_EQUAL(sess_latency_pct(a, 50), 0);
    for (uint64_t v = 100; v >= 1; v--) /* 1..100 in reverse: order must not matter */
        sess_latency_add(a, v);
    CU_ASSERT_EQUAL(sess_latency_pct(a, 50), 50);
    CU_ASSERT_EQUAL(sess_latency_pct(a, 99), 99);
    CU_ASSERT_EQUAL(sess_latency_pct(a, 100), 100);
    /* the ring keeps the last SESS_LATENCIES values only */
    for (uint64_t v = 0; v < 3 * SESS_LATENCIES; v++)
        sess_latency_add(a, v < 2 * SESS_LATENCIES ? 1000000 : 7);
    CU_ASSERT_EQUAL(a->lat_count, SESS_LATENCIES);
    CU_ASSERT_EQUAL(sess_latency_pct(a, 50), 7);
    CU_ASSERT_EQUAL(sess_latency_pct(a, 99), 7);
    sess_table_free(t);
}

int suite_session(void)
{
    CU_pSuite s = CU_add_suite("session", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_session_ids_are_never_reused);
    ADD_TEST(s, test_session_buffer_ids_belong_to_one_session);
    ADD_TEST(s, test_session_buffer_outlives_dropped_session);
    ADD_TEST(s, test_session_latency_percentiles);
    return 0;
}
