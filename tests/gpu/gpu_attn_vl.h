// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_attn_vl.h - the suites of tests/gpu/test_attn_vl_gpu.c: windows, softcap and packed
 * batches on the CUDA kernels (gpu_attn_vl) and through dashd --backend cuda
 * (gpu_dashd_varlen).
 */
#ifndef DASH_GPU_ATTN_VL_H
#define DASH_GPU_ATTN_VL_H

/* Registers both suites; 0, or -1 if CUnit failed. Call with a usable GPU only. */
int suite_gpu_attn_vl(void);

#endif
