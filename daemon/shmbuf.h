// SPDX-License-Identifier: BSD-3-Clause
/*
 * shmbuf.h - a client's registered buffer: POSIX shared memory opened and mapped once, or
 * (CUDA backend) a view into a CUDA IPC mapping that the backend opened.
 *
 * RegisterBuffer names a shm object and promises its size; the daemon maps exactly that
 * many bytes read-write and shared, and every tensor is checked against that size before
 * any byte is touched. The mapping is refcounted: the session that registered it holds
 * one reference, and each queued or running request that uses it holds another, so an
 * Unregister or a lost session unmaps only after the last request using it finished.
 *
 * The client still owns the object and may shrink it at any time; touching the mapping
 * is therefore only ever done inside guard_call() (guard.h). Refcounts are touched on the
 * loop thread only; the worker only reads data, size and kind.
 *
 * A SHMBUF_CUDA buffer is made by the CUDA backend (shmbuf_wrap): data is a DEVICE pointer
 * (the IPC mapping's base + alloc_offset), never dereferenced on the host, and the last
 * reference calls the backend's release function (which closes the mapping once no other
 * registration shares it) instead of munmap. So the same refcounts that keep shared memory
 * mapped while a request uses it keep a CUDA mapping open.
 */
#ifndef DASHD_SHMBUF_H
#define DASHD_SHMBUF_H

#include <stddef.h>
#include <stdint.h>

/* Longest name accepted, '/' included (NAME_MAX for the one path component). */
#define SHMBUF_NAME_MAX 255

struct shmbuf;

enum shmbuf_kind {
    SHMBUF_SHM,  /* POSIX shared memory mapped into the daemon */
    SHMBUF_CUDA, /* device memory of the backend's GPU (a CUDA IPC mapping) */
};

/* Check a shm_open name: starts with '/', has no other '/', is not "/", "/." or "/..",
 * at most SHMBUF_NAME_MAX bytes. 0 or DASH_EINVAL with a reason in msg. */
int shmbuf_check_name(const char *name, char *msg, size_t msglen);

/* Open `name` read-write and map its first `size` bytes (size >= 1). If owner_uid is not
 * -1, the object must belong to that uid (so a client cannot map another user's memory
 * through us). Returns 0 and *ret_buf with one reference, or a DASH_* code with a reason
 * in msg: DASH_EINVAL (name, size), DASH_EBOUNDS (the object is smaller than size),
 * DASH_EPERM (another user's object), DASH_ENOENT, DASH_ENOMEM or another -errno. The fd
 * is closed after mapping. */
int shmbuf_open(const char *name, uint64_t size, int64_t owner_uid, char *msg, size_t msglen,
                struct shmbuf **ret_buf);

/* A buffer of `kind` over memory someone else owns: `size` bytes at data (size >= 1).
 * The last shmbuf_unref() calls release(release_ctx) (on the loop thread). Returns 0 and
 * *ret_buf with one reference, or DASH_ENOMEM (release is then not called). */
int shmbuf_wrap(enum shmbuf_kind kind, unsigned char *data, uint64_t size,
                void (*release)(void *ctx), void *release_ctx, struct shmbuf **ret_buf);

void shmbuf_ref(struct shmbuf *b);

/* Drop a reference; the last one unmaps and frees. Accepts NULL. */
void shmbuf_unref(struct shmbuf *b);

unsigned char *shmbuf_data(const struct shmbuf *b);

/* The shm_open name a SHMBUF_SHM buffer was opened by; NULL for other kinds. */
const char *shmbuf_name(const struct shmbuf *b);
uint64_t shmbuf_size(const struct shmbuf *b);
enum shmbuf_kind shmbuf_kind(const struct shmbuf *b);

/* The memory b maps, for telling whether two buffers share bytes: an object and b's
 * start in it. Shared memory: {st_dev, st_ino} of the shm object, start 0 (mapped from its
 * beginning), so registering one object twice gives the same object. CUDA memory:
 * {SHMBUF_OBJECT_DEVICE, 0} and the device address, one address space for every mapping
 * of the backend's GPU. */
#define SHMBUF_OBJECT_DEVICE UINT64_MAX
void shmbuf_object(const struct shmbuf *b, uint64_t ret_object[2], uint64_t *ret_base);

/* "shared memory" or "CUDA memory", for messages. */
const char *shmbuf_kind_name(enum shmbuf_kind kind);

#endif
