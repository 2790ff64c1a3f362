// SPDX-License-Identifier: BSD-3-Clause
/*
 * shmbuf.c - see shmbuf.h.
 */
#include "shmbuf.h"

#include "proto/errors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct shmbuf {
    unsigned char *data; /* the mapping, size bytes (SHMBUF_CUDA: a device pointer) */
    uint64_t size;
    uint32_t refs; /* loop thread only */
    enum shmbuf_kind kind;
    void (*release)(void *ctx); /* NULL: munmap (shared memory we mapped) */
    void *release_ctx;
    char name[SHMBUF_NAME_MAX + 1]; /* SHMBUF_SHM: the object's name; else "" */
    uint64_t dev, ino; /* SHMBUF_SHM: the object's identity (fstat) */
};

int shmbuf_check_name(const char *name, char *msg, size_t msglen)
{
    if (!name || name[0] != '/') {
        snprintf(msg, msglen, "shm_name must start with '/'");
        return DASH_EINVAL;
    }
    size_t len = strlen(name);
    if (len > SHMBUF_NAME_MAX) {
        snprintf(msg, msglen, "shm_name is %zu bytes, more than %d", len, SHMBUF_NAME_MAX);
        return DASH_EINVAL;
    }
    if (strchr(name + 1, '/')) {
        snprintf(msg, msglen, "shm_name may hold no '/' after the first");
        return DASH_EINVAL;
    }
    if (!strcmp(name, "/") || !strcmp(name, "/.") || !strcmp(name, "/..")) {
        snprintf(msg, msglen, "shm_name needs a name after the '/'");
        return DASH_EINVAL;
    }
    return 0;
}

int shmbuf_open(const char *name, uint64_t size, int64_t owner_uid, char *msg, size_t msglen,
                struct shmbuf **ret_buf)
{
    int rc = shmbuf_check_name(name, msg, msglen);
    if (rc)
        return rc;
    if (size == 0 || size > (uint64_t)SIZE_MAX || size > (uint64_t)INT64_MAX) {
        snprintf(msg, msglen, "size %llu is not a usable buffer size", (unsigned long long)size);
        return DASH_EINVAL;
    }
    /* glibc adds O_NOFOLLOW and O_CLOEXEC; O_NONBLOCK keeps a FIFO someone planted in
     * /dev/shm from blocking the event loop (it is then refused as not a regular file). */
    int fd = shm_open(name, O_RDWR | O_NONBLOCK, 0);
    if (fd < 0) {
        rc = -errno;
        snprintf(msg, msglen, "cannot open the shared memory object: %s", strerror(errno));
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        snprintf(msg, msglen, "cannot stat the shared memory object: %s", strerror(errno));
        goto close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = DASH_EINVAL;
        snprintf(msg, msglen, "the shared memory object is not a regular file");
        goto close_fd;
    }
    if (owner_uid >= 0 && (int64_t)st.st_uid != owner_uid) {
        rc = DASH_EPERM;
        snprintf(msg, msglen, "the shared memory object belongs to another user");
        goto close_fd;
    }
    if ((uint64_t)st.st_size < size) {
        rc = DASH_EBOUNDS;
        snprintf(msg, msglen, "the shared memory object has %lld bytes, fewer than size %llu",
                 (long long)st.st_size, (unsigned long long)size);
        goto close_fd;
    }
    struct shmbuf *b = malloc(sizeof *b);
    if (!b) {
        rc = DASH_ENOMEM;
        snprintf(msg, msglen, "out of memory");
        goto close_fd;
    }
    void *data = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
        rc = -errno;
        snprintf(msg, msglen, "cannot map %llu bytes: %s", (unsigned long long)size,
                 strerror(errno));
        goto free_buf;
    }
    /* The mapping keeps the object alive; holding the fd would only cost an fd per
     * buffer, and a shrink is caught by the guard anyway. */
    close(fd);
    b->data = data;
    b->size = size;
    b->refs = 1;
    b->kind = SHMBUF_SHM;
    b->release = NULL;
    b->release_ctx = NULL;
    b->dev = (uint64_t)st.st_dev;
    b->ino = (uint64_t)st.st_ino;
    memcpy(b->name, name, strlen(name) + 1); /* checked: at most SHMBUF_NAME_MAX bytes */
    *ret_buf = b;
    return 0;

free_buf:
    free(b);
close_fd:
    close(fd);
    return rc;
}

int shmbuf_wrap(enum shmbuf_kind kind, unsigned char *data, uint64_t size,
                void (*release)(void *ctx), void *release_ctx, struct shmbuf **ret_buf)
{
    struct shmbuf *b = malloc(sizeof *b);
    if (!b)
        return DASH_ENOMEM;
    b->data = data;
    b->size = size;
    b->refs = 1;
    b->kind = kind;
    b->release = release;
    b->release_ctx = release_ctx;
    b->name[0] = '\0';
    *ret_buf = b;
    return 0;
}

void shmbuf_ref(struct shmbuf *b)
{
    b->refs++;
}

void shmbuf_unref(struct shmbuf *b)
{
    if (!b || --b->refs > 0)
        return;
    if (b->release)
        b->release(b->release_ctx);
    else
        munmap(b->data, (size_t)b->size);
    free(b);
}

unsigned char *shmbuf_data(const struct shmbuf *b)
{
    return b->data;
}

uint64_t shmbuf_size(const struct shmbuf *b)
{
    return b->size;
}

enum shmbuf_kind shmbuf_kind(const struct shmbuf *b)
{
    return b->kind;
}

const char *shmbuf_name(const struct shmbuf *b)
{
    return b->kind == SHMBUF_SHM ? b->name : NULL;
}

const char *shmbuf_kind_name(enum shmbuf_kind kind)
{
    return kind == SHMBUF_CUDA ? "CUDA memory" : "shared memory";
}

void shmbuf_object(const struct shmbuf *b, uint64_t ret_object[2], uint64_t *ret_base)
{
    if (b->kind == SHMBUF_SHM) {
        ret_object[0] = b->dev;
        ret_object[1] = b->ino;
        *ret_base = 0; /* mapped from the object's start */
    } else {
        ret_object[0] = SHMBUF_OBJECT_DEVICE;
        ret_object[1] = 0;
        *ret_base = (uint64_t)(uintptr_t)b->data;
    }
}
