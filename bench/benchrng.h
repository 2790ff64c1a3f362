// SPDX-License-Identifier: BSD-3-Clause
/*
 * benchrng.h - the inputs the benchmarks time on: random normal values (never zeros, which
 * can run faster than real data), from a seed so a run can be repeated.
 */
#ifndef DASH_BENCHRNG_H
#define DASH_BENCHRNG_H

#include <stddef.h>
#include <stdint.h>

/* n bf16 values drawn from N(0, 1) (splitmix64 feeding Box-Muller) into dst; *state is the
 * generator's state and moves on. */
void bench_fill_bf16(void *dst, size_t n, uint64_t *state);

#endif
