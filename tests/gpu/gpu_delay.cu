// SPDX-License-Identifier: BSD-3-Clause
/*
 * gpu_delay.cu - see gpu_delay.h.
 */
#include "gpu_delay.h"

static __device__ uint64_t global_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* One CTA: every thread waits until the deadline (so none copies early), then they copy
 * with a block stride. */
static __global__ void delayed_copy_kernel(unsigned char *dst, const unsigned char *src, size_t n,
                                           uint64_t delay_ns)
{
    __shared__ uint64_t start;
    if (threadIdx.x == 0)
        start = global_ns();
    __syncthreads();
    while (global_ns() - start < delay_ns)
        __nanosleep(10000);
    __syncthreads();
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        dst[i] = src[i];
}

cudaError_t gpu_test_delayed_copy(void *dst, const void *src, size_t n, uint64_t delay_ns,
                                  cudaStream_t stream)
{
    delayed_copy_kernel<<<1, 256, 0, stream>>>(static_cast<unsigned char *>(dst),
                                                static_cast<const unsigned char *>(src), n,
                                                delay_ns);
    return cudaGetLastError();
}

#define HOLD_SMEM (200 * 1024)

static __global__ void hold_kernel(uint64_t hold_ns)
{
    extern __shared__ unsigned char held[];
    __shared__ uint64_t start;
    if (threadIdx.x == 0) {
        start = global_ns();
        held[0] = 1; /* the allocation is the point; touch it so it is not elided */
    }
    __syncthreads();
    while (global_ns() - start < hold_ns)
        __nanosleep(100000);
}

cudaError_t gpu_test_hold_sms(int ctas, uint64_t hold_ns, cudaStream_t stream)
{
    cudaError_t err = cudaFuncSetAttribute(hold_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           HOLD_SMEM);
    if (err != cudaSuccess)
        return err;
    hold_kernel<<<ctas, 32, HOLD_SMEM, stream>>>(hold_ns);
    return cudaGetLastError();
}
