// SPDX-License-Identifier: BSD-3-Clause
/*
 * errors.h - the one table of dashd error codes.
 *
 * Every function in the project returns 0 (or a count) on success and a negative code on
 * failure. Codes that have a POSIX meaning are -errno (so the kernels/ library, which may
 * include nothing of ours, can return -EINVAL and it is already a DASH_EINVAL); codes of
 * our own live below -4000. The same numbers travel on the wire, so they are stable: never
 * renumber an entry, only append.
 *
 * Client and daemon both use this header; it lives in proto/ because proto/ is what they
 * share (see docs/architecture.md).
 */
#ifndef DASH_ERRORS_H
#define DASH_ERRORS_H

#include <errno.h>

/* X(name, value, message) */
#define DASH_ERRNO_MAP(X)                                                        \
    X(EINVAL, -EINVAL, "invalid argument")                                       \
    X(ENOMEM, -ENOMEM, "out of memory")                                          \
    X(EOVERFLOW, -EOVERFLOW, "value too large for the index types")              \
    X(ENOTSUP, -ENOTSUP, "operation not supported")                              \
    X(EDEADLK, -EDEADLK, "schedule would deadlock")                              \
    X(ERANGE, -ERANGE, "result out of range")                                    \
    X(ENOENT, -ENOENT, "no such file or object")                                 \
    X(EIO, -EIO, "input/output error")                                           \
    X(EAGAIN, -EAGAIN, "resource temporarily unavailable")                       \
    X(ETIMEDOUT, -ETIMEDOUT, "timed out")                                        \
    X(EBUSY, -EBUSY, "resource busy")                                            \
    X(EPROTO, -EPROTO, "protocol error")                                         \
    X(ENOSPC, -ENOSPC, "no space left")                                          \
    X(ECANCELED, -ECANCELED, "operation canceled")                               \
    X(ECONNREFUSED, -ECONNREFUSED, "connection refused")                         \
    X(EBADDTYPE, -4001, "unsupported dtype")                                     \
    X(EHEADDIM, -4002, "unsupported head dimension")                             \
    X(ESHAPE, -4003, "tensor shapes do not agree")                               \
    X(ESCHED, -4004, "unknown or unusable schedule")                             \
    X(ENOGPU, -4005, "no usable GPU")                                            \
    X(ENOSESSION, -4006, "no session: send Hello first")                         \
    X(ENOBUF, -4007, "unknown buffer id")                                        \
    X(EBOUNDS, -4008, "tensor reaches outside its buffer")                       \
    X(EVERSION, -4009, "unsupported protocol version")                           \
    X(EMALFORMED, -4010, "malformed message")                                    \
    X(EBUFGONE, -4011, "buffer memory is gone (shrunk or unmapped)")             \
    X(ELIMIT, -4012, "over a per-client limit of this daemon")                   \
    X(EPERM, -EPERM, "not permitted (an endpoint or daemon that is not trusted)")            \
    X(EACCES, -EACCES, "permission denied (the daemon's socket or its directory)")

enum dash_err {
#define DASH_ERR_ENUM_(name, value, msg) DASH_##name = (value),
    DASH_ERRNO_MAP(DASH_ERR_ENUM_)
#undef DASH_ERR_ENUM_
};

/* A readable message for any return code of ours (0 gives "success"); never NULL.
 * Unknown negative values that are -errno fall back to strerror's text. Thread-safe. */
const char *dash_strerror(int code);

/* The code's symbolic name ("DASH_EINVAL"), or "DASH_UNKNOWN". Thread-safe. */
const char *dash_errname(int code);

#endif
