/*
 * shmbuf.h - a client's POSIX shared-memory buffer, opened and mapped once.
 *
 * RegisterBuffer names a shm object and promises its size; the daemon maps exactly that
 * many bytes read-write and shared, and every tensor is checked against that size before
 * any byte is touched. The mapping is refcounted: the session that registered it holds
 * one reference, and each queued or running request that uses it holds another, so an
 * Unregister or a lost session unmaps only after the last request using it finished.
 *
 * The client still owns the object and may shrink it at any time; touching the mapping
 * is therefore only ever done inside guard_call() (guard.h). Refcounts are touched on the
 * loop thread only; the worker only reads data and size.
 */
#ifndef DASHD_SHMBUF_H
#define DASHD_SHMBUF_H

#include <stddef.h>
#include <stdint.h>

/* Longest name accepted, '/' included (NAME_MAX for the one path component). */
#define SHMBUF_NAME_MAX 255

struct shmbuf;

/* Check a shm_open name: starts with '/', has no other '/', is not "/", "/." or "/..",
 * at most SHMBUF_NAME_MAX bytes. 0 or DASH_EINVAL with a reason in msg. */
int shmbuf_check_name(const char *name, char *msg, size_t msglen);

/* Open `name` read-write and map its first `size` bytes (size >= 1). If owner_uid is not
 * -1, the object must belong to that uid (so a client cannot map another user's memory
 * through us). Returns 0 and *ret_buf with one reference, or a DASH_* code with a reason
 * in msg: DASH_EINVAL (name, size), DASH_EBOUNDS (the object is smaller than size),
 * -EACCES, DASH_ENOENT, DASH_ENOMEM or another -errno. The fd is closed after mapping. */
int shmbuf_open(const char *name, uint64_t size, int64_t owner_uid, char *msg, size_t msglen,
                struct shmbuf **ret_buf);

void shmbuf_ref(struct shmbuf *b);

/* Drop a reference; the last one unmaps and frees. Accepts NULL. */
void shmbuf_unref(struct shmbuf *b);

unsigned char *shmbuf_data(const struct shmbuf *b);
uint64_t shmbuf_size(const struct shmbuf *b);

#endif
