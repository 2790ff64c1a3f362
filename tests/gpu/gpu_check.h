// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_check.h - CUDA_OK(call) for the GPU suites: a CUDA call that must succeed, failing
 * the test (fatally) with the call, the line and CUDA's error string otherwise.
 */
#ifndef DASH_GPU_CHECK_H
#define DASH_GPU_CHECK_H

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>
#include <stdio.h>

static inline int gpu_cuda_ok(cudaError_t err, const char *what, int line)
{
    if (err == cudaSuccess)
        return 1;
    fprintf(stderr, "\n  line %d: %s: %s", line, what, cudaGetErrorString(err));
    return 0;
}

#define CUDA_OK(call) CU_ASSERT_FATAL(gpu_cuda_ok((call), #call, __LINE__))

#endif
