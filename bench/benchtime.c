// SPDX-License-Identifier: BSD-3-Clause
/*
 * benchtime.c - see benchtime.h.
 */
#include "bench/benchtime.h"

#include <stdlib.h>
#include <time.h>

double btime_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int btime_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double btime_median(double *t, size_t n)
{
    qsort(t, n, sizeof *t, btime_cmp_double);
    return t[n / 2];
}
