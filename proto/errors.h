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
 * share (see docs/architecture.md). The codes themselves are defined once, in the
 * installed header client/dash.h, which must stay self-contained.
 */
#ifndef DASH_ERRORS_H
#define DASH_ERRORS_H

#include <errno.h>

/* X(name, value, message): the table of the installed header client/dash.h
 * (DASH_ERROR_TABLE), copied under this name into the build's generated headers by the
 * Makefile, so that there is one table and proto/ includes nothing from client/. */
#include "proto/error_table.h"

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
