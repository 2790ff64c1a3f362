// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_share.h - suite gpu_share: the backward kernels while other work holds SMs
 * (tests/gpu/test_share_gpu.c).
 */
#ifndef DASH_GPU_SHARE_H
#define DASH_GPU_SHARE_H

/* Registers suite gpu_share; 0, or -1 if CUnit failed. Call with a usable GPU only. */
int suite_gpu_share(void);

#endif
