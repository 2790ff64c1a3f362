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
