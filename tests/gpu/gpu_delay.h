/*
 * gpu_delay.h - a deliberately slow producer for the stream-ordering tests: a kernel that
 * waits on the GPU's clock and only then copies, so work queued behind it on a stream is
 * provably still waiting when the host looks.
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

#ifdef __cplusplus
}
#endif

#endif
