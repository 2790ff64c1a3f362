// SPDX-License-Identifier: BSD-3-Clause
/*
 * benchrng.c - see benchrng.h.
 */
#include "benchrng.h"

#include "kernels/attn/dtype.h"

#include <math.h>

/* splitmix64: tiny, and good enough to feed Box-Muller. */
static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1]: never 0, so log() below stays finite. */
static double rng_unit(uint64_t *state)
{
    return ((double)(rng_next(state) >> 11) + 1.0) * 0x1.0p-53;
}

void bench_fill_bf16(void *dst, size_t n, uint64_t *state)
{
    const double two_pi = 6.283185307179586;
    for (size_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(rng_unit(state))), t = two_pi * rng_unit(state);
        dtype_store(dst, DTYPE_BF16, (int64_t)i, (float)(r * cos(t)));
        if (i + 1 < n)
            dtype_store(dst, DTYPE_BF16, (int64_t)i + 1, (float)(r * sin(t)));
    }
}
