/* Host shims for compiling digest version 3's device code (__CUDA_ARCH__ paths) on the CPU:
 * PTX mul.wide.u32 and __umul64hi in C, shared memory as a plain 1024-aligned array
 * addressed by offsets (__cvta_generic_to_shared / ld.shared.v2.u64), a warp as 32 host
 * threads with barrier-based __shfl_xor_sync / __syncwarp. Include system headers first. */
#pragma once
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <assert.h>
#include <stdlib.h>
#include <thread>
#include <vector>
#include <functional>

#define __CUDACC__ 1
#define __CUDA_ARCH__ 900
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline

struct ulonglong2 { unsigned long long x, y; };
static inline ulonglong2 make_ulonglong2(unsigned long long x, unsigned long long y) { return {x, y}; }
struct uint4 { unsigned x, y, z, w; };
template <class T> static inline T __ldg(const T *p) { return *p; }
struct emu_dim3 { unsigned x; };
thread_local emu_dim3 threadIdx;

#ifndef EMU_MUTANT
#define EMU_MUTANT 0
#endif
/* PTX mul.wide.u32 d, a, b: the full 64-bit product of two unsigned 32-bit values. */
static inline uint64_t emu_mul_wide_u32(uint32_t a, uint32_t b)
{
#if EMU_MUTANT == 1 /* a wrong shim: signed operands (mul.wide.s32) */
    return (uint64_t)((int64_t)(int32_t)a * (int64_t)(int32_t)b);
#else
    return (uint64_t)a * (uint64_t)b;
#endif
}
/* CUDA __umul64hi: the high 64 bits of the unsigned 128-bit product. */
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b)
{
#if EMU_MUTANT == 2 /* a wrong shim: signed (__mul64hi) */
    return (unsigned long long)(((__int128)(long long)a * (long long)b) >> 64);
#else
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
#endif
}

/* shared memory: offsets into one aligned array */
#define EMU_SMEM_BYTES (256 * 1024)
alignas(1024) static unsigned char emu_smem[EMU_SMEM_BYTES];
static inline size_t __cvta_generic_to_shared(const void *p)
{
    const unsigned char *c = (const unsigned char *)p;
    assert(c >= emu_smem && c < emu_smem + EMU_SMEM_BYTES);
    return (size_t)(c - emu_smem);
}
static int emu_ld_misaligned;
static inline void emu_ld_shared_v2_u64_(unsigned long long &x, unsigned long long &y, uint32_t addr)
{
    if (addr % 16 || addr + 16 > EMU_SMEM_BYTES) { /* ld.shared.v2.u64 needs 16-byte alignment */
        emu_ld_misaligned++;
        x = y = 0;
        return;
    }
    memcpy(&x, emu_smem + addr, 8);
    memcpy(&y, emu_smem + addr + 8, 8);
}
#define emu_ld_shared_v2_u64(X, Y, A) emu_ld_shared_v2_u64_((X), (Y), (uint32_t)(A))

/* a warp: 32 host threads, shuffles through slots between two barriers */
struct emu_warp {
    pthread_barrier_t bar;
    uint64_t slot[32];
};
static emu_warp emu_w;
thread_local int emu_lane;
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int m)
{
    assert(mask == 0xffffffffu);
    emu_w.slot[emu_lane] = (uint64_t)v;
    pthread_barrier_wait(&emu_w.bar);
    const T r = (T)emu_w.slot[(emu_lane ^ m) & 31];
    pthread_barrier_wait(&emu_w.bar);
    return r;
}
static inline void __syncwarp(void) { pthread_barrier_wait(&emu_w.bar); }
/* f(lane) in 32 threads, lane = threadIdx.x */
static inline void emu_run_warp(const std::function<void(int)> &f)
{
    pthread_barrier_init(&emu_w.bar, NULL, 32);
    std::vector<std::thread> ts;
    for (int l = 0; l < 32; l++)
        ts.emplace_back([&f, l] {
            emu_lane = l;
            threadIdx.x = (unsigned)l;
            f(l);
        });
    for (auto &t : ts)
        t.join();
    pthread_barrier_destroy(&emu_w.bar);
}
