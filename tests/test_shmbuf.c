// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_shmbuf.c - client shared memory in the daemon (daemon/shmbuf.c) and the SIGBUS
 * guard around every access to it (daemon/guard.c): names are checked, sizes must fit
 * the object, other users' objects are refused, and a client shrinking its object after
 * registering turns a copy into -EFAULT instead of a crash - for reads and writes, again
 * and again on the same thread.
 */
#include "suites.h"
#include "../daemon/guard.h"
#include "../daemon/shmbuf.h"
#include "../proto/errors.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A fresh shm object of `size` bytes; its name in name (64 bytes). Returns the fd. */
static int make_shm(char *name, size_t size)
{
    static int n;
    snprintf(name, 64, "/dashd-test-shmbuf-%d-%d", (int)getpid(), n++);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0 && ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        shm_unlink(name);
        return -1;
    }
    return fd;
}

static void test_shmbuf_names(void)
{
    char msg[128], name[300];
    CU_ASSERT_EQUAL(shmbuf_check_name("/ok", msg, sizeof msg), 0);
    CU_ASSERT_EQUAL(shmbuf_check_name("/a.b-c_d", msg, sizeof msg), 0);
    CU_ASSERT_EQUAL(shmbuf_check_name("ok", msg, sizeof msg), DASH_EINVAL);
    CU_ASSERT_EQUAL(shmbuf_check_name("", msg, sizeof msg), DASH_EINVAL);
    CU_ASSERT_EQUAL(shmbuf_check_name(NULL, msg, sizeof msg), DASH_EINVAL);
    CU_ASSERT_EQUAL(shmbuf_check_name("/a/b", msg, sizeof msg), DASH_EINVAL);
    CU_ASSERT_EQUAL(shmbuf_check_name("/../etc", msg, sizeof msg), DASH_EINVAL);
    CU_ASSERT_EQUAL(shmbuf_check_name("/", msg, sizeof msg), DASH_EINVAL);
    CU_ASSERT_EQUAL(shmbuf_check_name("/.", msg, sizeof msg), DASH_EINVAL);
    CU_ASSERT_EQUAL(shmbuf_check_name("/..", msg, sizeof msg), DASH_EINVAL);
    CU_ASSERT_EQUAL(shmbuf_check_name("/...", msg, sizeof msg), 0);
    /* 255 bytes with the slash pass, 256 do not */
    name[0] = '/';
    memset(name + 1, 'x', 254);
    name[255] = '\0';
    CU_ASSERT_EQUAL(shmbuf_check_name(name, msg, sizeof msg), 0);
    name[255] = 'x';
    name[256] = '\0';
    CU_ASSERT_EQUAL(shmbuf_check_name(name, msg, sizeof msg), DASH_EINVAL);
}

static void test_shmbuf_open_checks_size_and_owner(void)
{
    char name[64], msg[256];
    int fd = make_shm(name, 8192);
    CU_ASSERT_FATAL(fd >= 0);
    struct shmbuf *b = NULL;
    CU_ASSERT_EQUAL(shmbuf_open(name, 8192, -1, msg, sizeof msg, &b), 0);
    CU_ASSERT_PTR_NOT_NULL(b);
    if (b) {
        CU_ASSERT_EQUAL(shmbuf_size(b), 8192);
        shmbuf_data(b)[8191] = 7; /* mapped read-write and shared */
        unsigned char c = 0;
        CU_ASSERT_EQUAL(pread(fd, &c, 1, 8191), 1);
        CU_ASSERT_EQUAL(c, 7);
        shmbuf_ref(b);
        shmbuf_unref(b);
        CU_ASSERT_EQUAL(shmbuf_data(b)[8191], 7); /* still mapped: one reference left */
        shmbuf_unref(b);
    }
    b = NULL;
    CU_ASSERT_EQUAL(shmbuf_open(name, 100, (int64_t)getuid(), msg, sizeof msg, &b), 0);
    shmbuf_unref(b);
    struct shmbuf *none = NULL;
    CU_ASSERT_EQUAL(shmbuf_open(name, 8193, -1, msg, sizeof msg, &none), DASH_EBOUNDS);
    CU_ASSERT_EQUAL(shmbuf_open(name, 0, -1, msg, sizeof msg, &none), DASH_EINVAL);
    CU_ASSERT_EQUAL(shmbuf_open(name, UINT64_MAX, -1, msg, sizeof msg, &none), DASH_EINVAL);
    CU_ASSERT_EQUAL(shmbuf_open(name, 10, (int64_t)getuid() + 1, msg, sizeof msg, &none), DASH_EPERM);
    CU_ASSERT_EQUAL(shmbuf_open("/dashd-test-no-such-object", 10, -1, msg, sizeof msg, &none),
                    DASH_ENOENT);
    CU_ASSERT_EQUAL(shmbuf_open("no-slash", 10, -1, msg, sizeof msg, &none), DASH_EINVAL);
    CU_ASSERT_PTR_NULL(none);
    close(fd);
    shm_unlink(name);
}

struct copy_arg {
    unsigned char *dst;
    const unsigned char *src;
    size_t n;
};

static void copy(void *arg)
{
    struct copy_arg *c = arg;
    memcpy(c->dst, c->src, c->n);
}

static void test_shmbuf_guard_turns_sigbus_into_efault(void)
{
    CU_ASSERT_EQUAL_FATAL(guard_install(), 0);
    CU_ASSERT_EQUAL(guard_install(), 0); /* idempotent */
    char name[64], msg[256];
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    int fd = make_shm(name, 4 * page);
    CU_ASSERT_FATAL(fd >= 0);
    struct shmbuf *b = NULL;
    CU_ASSERT_EQUAL_FATAL(shmbuf_open(name, 4 * page, -1, msg, sizeof msg, &b), 0);
    static unsigned char local[1 << 16];
    unsigned char *map = shmbuf_data(b);
    struct copy_arg in = {local, map, 4 * page};
    CU_ASSERT_EQUAL(guard_call(copy, &in), 0);

    /* The client shrinks its object to one page behind our back. */
    CU_ASSERT_EQUAL_FATAL(ftruncate(fd, (off_t)page), 0);
    for (int round = 0; round < 3; round++) { /* the handler stays armed after a jump */
        struct copy_arg rd = {local, map, 2 * page};
        CU_ASSERT_EQUAL(guard_call(copy, &rd), -EFAULT);
        struct copy_arg wr = {map + page, local, 16};
        CU_ASSERT_EQUAL(guard_call(copy, &wr), -EFAULT);
        struct copy_arg ok = {local, map, page}; /* what is still there still works */
        CU_ASSERT_EQUAL(guard_call(copy, &ok), 0);
    }
    /* plain memory is unaffected */
    static unsigned char other[64];
    struct copy_arg plain = {other, local, sizeof other};
    CU_ASSERT_EQUAL(guard_call(copy, &plain), 0);
    shmbuf_unref(b);
    close(fd);
    shm_unlink(name);
}

int suite_shmbuf(void)
{
    CU_pSuite s = CU_add_suite("shmbuf", NULL, NULL);
    if (!s)
        return -1;
    ADD_TEST(s, test_shmbuf_names);
    ADD_TEST(s, test_shmbuf_open_checks_size_and_owner);
    ADD_TEST(s, test_shmbuf_guard_turns_sigbus_into_efault);
    return 0;
}
