// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_delay.h - deliberately slow kernels for the tests: a producer that waits on the
 * GPU's clock and only then copies (work queued behind it on a stream is provably still
 * waiting when the host looks), and a kernel that holds SMs for a while (other work must
 * make do with the rest).
 */
#ifndef DASH_GPU_DELAY_H
#define DASH_GPU_DELAY_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Queue on `stream`: wait delay_ns of GPU time, then copy n bytes from src to dst (both
 * device memory). Returns the launch's error. */
cudaError_t gpu_test_delayed_copy(void *dst, const void *src, size_t n, uint64_t delay_ns,
                                  cudaStream_t stream);

/* Queue on `stream`: `ctas` CTAs that each hold a whole SM (200 KB of shared memory, so
 * nothing else fits beside them) for hold_ns of GPU time, then exit. Returns the launch's
 * error (the shared-memory limit is raised on first use). */
cudaError_t gpu_test_hold_sms(int ctas, uint64_t hold_ns, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
