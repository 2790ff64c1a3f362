// SPDX-License-Identifier: BSD-3-Clause
/*
 * benchtime.h - the clock and the order statistics every benchmark times with, defined
 * once: wall time in milliseconds on the monotonic clock, and medians of samples.
 */
#ifndef DASH_BENCHTIME_H
#define DASH_BENCHTIME_H

#include <stddef.h>

/* CLOCK_MONOTONIC in milliseconds. */
double btime_now_ms(void);

/* qsort's comparison of doubles, ascending. */
int btime_cmp_double(const void *a, const void *b);

/* Sorts t[0..n) and returns t[n / 2] (the upper median for even n). n >= 1. */
double btime_median(double *t, size_t n);

#endif
