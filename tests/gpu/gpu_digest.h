// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_digest.h - suite gpu_digest: the GPU digests against the CPU's
 * (tests/gpu/test_digest_gpu.c).
 */
#ifndef DASH_GPU_DIGEST_H
#define DASH_GPU_DIGEST_H

/* Registers suite gpu_digest; 0, or -1 if CUnit failed. Call with a usable GPU only. */
int suite_gpu_digest(void);

#endif
