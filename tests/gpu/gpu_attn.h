// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_attn.h - the CUDA attention suite of the GPU runner (tests/gpu/test_attn_gpu.c).
 */
#ifndef DASH_GPU_ATTN_H
#define DASH_GPU_ATTN_H

/* Registers suites gpu_attn and gpu_attn_fwd (v3's forward); 0, or -1 if CUnit failed.
 * Call with a usable GPU only. */
int suite_gpu_attn(void);

#endif
