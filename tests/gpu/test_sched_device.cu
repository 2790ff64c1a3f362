// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_sched_device.cu - the schedule library compiled as CUDA device code: one thread per
 * job walks the job exactly as a backward kernel will, so the test can compare every
 * visit and rank with the host's answer.
 */
#include "gpu_sched.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>

/* one thread per job (shape comments: offsets (jobs+1), visits/ranks (additions)) */
__global__ void sched_walk_kernel(struct sched s, const int64_t *offsets, int32_t *visits,
                                  int32_t *ranks)
{
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= s.jobs)
        return;
    struct sched_job J = sched_job_at(&s, (int32_t)j);
    int64_t at = offsets[j];
    for (int32_t st = 0; st < sched_job_stages(&s, J.k); st++) {
        int32_t n = sched_job_unit(&s, J.k, st);
        for (int32_t step = 0; step < sched_unit_steps(&s, n); step++) {
            int32_t m = sched_visit(&s, &J, st, step);
            visits[at] = m;
            ranks[at] = sched_rank(&s, &J, st, m);
            at++;
        }
    }
}

extern "C" int gpu_probe(char *buf, size_t len)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaErrorInsufficientDriver) { /* the runtime's words for "no driver" too */
        snprintf(buf, len, "no usable NVIDIA driver: libcuda.so.1 is missing, or older than the "
                 "CUDA %d.%d runtime these tests were built with", CUDART_VERSION / 1000,
                 CUDART_VERSION % 1000 / 10);
        return -ENODEV;
    }
    if (err != cudaSuccess || count == 0) {
        snprintf(buf, len, "%s", err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device");
        return -ENODEV;
    }
    cudaDeviceProp prop;
    if ((err = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
        snprintf(buf, len, "%s", cudaGetErrorString(err));
        return -ENODEV;
    }
    snprintf(buf, len, "%s, %d SMs, sm_%d%d", prop.name, prop.multiProcessorCount, prop.major,
             prop.minor);
    return 0;
}

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                \
                    cudaGetErrorString(e_));                                             \
            rc = -EIO;                                                                   \
            goto out;                                                                    \
        }                                                                                \
    } while (0)

extern "C" int gpu_sched_walk(const struct sched *s, const int64_t *offsets, int32_t *visits,
                              int32_t *ranks)
{
    int rc = 0;
    int64_t total = offsets[s->jobs];
    int64_t *d_off = NULL;
    int32_t *d_visits = NULL, *d_ranks = NULL;
    CHECK(cudaMalloc(&d_off, sizeof(int64_t) * (size_t)(s->jobs + 1)));
    CHECK(cudaMalloc(&d_visits, sizeof(int32_t) * (size_t)total));
    CHECK(cudaMalloc(&d_ranks, sizeof(int32_t) * (size_t)total));
    CHECK(cudaMemcpy(d_off, offsets, sizeof(int64_t) * (size_t)(s->jobs + 1), cudaMemcpyHostToDevice));
    /* poison: a slot the kernel forgets stays -7 and cannot match the host */
    CHECK(cudaMemset(d_visits, 0xf9, sizeof(int32_t) * (size_t)total));
    CHECK(cudaMemset(d_ranks, 0xf9, sizeof(int32_t) * (size_t)total));
    sched_walk_kernel<<<(s->jobs + 127) / 128, 128>>>(*s, d_off, d_visits, d_ranks);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(visits, d_visits, sizeof(int32_t) * (size_t)total, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(ranks, d_ranks, sizeof(int32_t) * (size_t)total, cudaMemcpyDeviceToHost));
out:
    cudaFree(d_off);
    cudaFree(d_visits);
    cudaFree(d_ranks);
    return rc;
}
