// SPDX-License-Identifier: BSD-3-Clause
/*
 * testutil.h - what the test suites share: fresh random inputs, poisoned outputs,
 * conversions to double, and running the programs under test.
 */
#ifndef DASH_TESTUTIL_H
#define DASH_TESTUTIL_H

#include "kernels/attn/dtype.h"

#include <stddef.h>
#include <stdint.h>

/* This run's random seed: DASH_TEST_SEED from the environment, else drawn fresh from the
 * clock and pid. The runner prints it so any failure can be replayed. */
uint64_t tu_seed(void);

struct tu_rng {
    uint64_t s;
};

void tu_rng_init(struct tu_rng *r, uint64_t seed);
uint64_t tu_next(struct tu_rng *r);
/* Standard normal sample. */
double tu_normal(struct tu_rng *r);

/* n elements of kind t drawn from N(0, scale^2); never all zero. */
void tu_fill(void *buf, enum dtype_kind t, int64_t n, struct tu_rng *r, double scale);

/* Fill with 0xff bytes: NaN in every float format, so an output the code under test
 * forgets to write cannot pass a check. */
void tu_poison(void *buf, size_t bytes);

/* n elements of kind t at buf, as doubles. */
void tu_to_double(const void *buf, enum dtype_kind t, int64_t n, double *out);

/* Directory holding the test binary (build/), where dashctl also lives. */
const char *tu_build_dir(void);

/* Resident memory of a process in KiB (VmRSS), or -1. */
long tu_rss_kib(int pid);

/* Run a shell command, capturing stdout into *ret_out (malloc'd, NUL-terminated; may be
 * NULL to discard). Returns the exit status, or -1 if it could not run. */
int tu_run(const char *cmd, char **ret_out);

#endif
