// SPDX-License-Identifier: BSD-3-Clause
/*
 * warmup.h - one small forward and backward per common head dim and mask before dashd says
 * it is ready, so the first client does not pay for loading kernels (the CUDA runtime loads
 * each kernel at its first launch) or for the engine's first allocations.
 */
#ifndef DASHD_WARMUP_H
#define DASHD_WARMUP_H

#include "backend.h"

#include <stddef.h>

/* Run the warm-up ops on b from the calling thread (before the worker starts: backends run
 * one op at a time). Returns the number of ops run, or a DASH_* code with the first
 * failure's reason in msg. */
int warmup_run(struct backend *b, char *msg, size_t msglen);

#endif
