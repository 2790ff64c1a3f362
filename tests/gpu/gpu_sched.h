// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_sched.h - host entry points of tests/gpu/test_sched_device.cu, callable from C.
 */
#ifndef DASH_GPU_SCHED_H
#define DASH_GPU_SCHED_H

#include "kernels/sched/sched.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 and the device's name in buf if a CUDA device is usable; else a negative value and
 * the reason in buf. */
int gpu_probe(char *buf, size_t len);

/* On the device: for every job of s, every stage and step, the visited q-tile and its
 * rank, written at offsets[j] onwards (offsets: jobs + 1 prefix sums of the additions per
 * job). visits and ranks are host arrays of offsets[jobs] entries. 0 or a negative code. */
int gpu_sched_walk(const struct sched *s, const int64_t *offsets, int32_t *visits,
                   int32_t *ranks);

#ifdef __cplusplus
}
#endif

#endif
