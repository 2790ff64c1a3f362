/*
 * attn_cuda_int.h - what the CUDA backend's files share: the launch parameter structs,
 * the launchers of attn_fwd.cu and attn_bwd.cu, and the device helpers both kernels use
 * (dtype conversion, tile loads, acquire/release). Not a public header; C++ only.
 *
 * Thread layout, shared by every kernel of the backend (256 threads, 64x64 tiles):
 *   ty = tid / 16 (0..15), tx = tid % 16 (0..15).
 *   64x64 tiles (S, P, dP, dS): thread owns rows ty + 16r, columns tx + 16c (r, c < 4).
 *   64xD tiles (O, dQ, dK, dV):  thread owns rows ty + 16r (r < 4) and the column pairs
 *                                 2tx + 32c + {0, 1} (c < D/32); element [r][2c + e].
 * The 16 threads of one row group are 16 consecutive lanes of one warp, so row
 * reductions are fixed xor-shuffle trees inside a half warp.
 */
#ifndef DASH_ATTN_CUDA_INT_H
#define DASH_ATTN_CUDA_INT_H

#include "attn_cuda.h"

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "dag.h"
#include "engine_int.h"
}

#define ATTN_BM CUATTN_BLOCK /* q-tile rows */
#define ATTN_BN CUATTN_BLOCK /* kv-tile rows */
#define ATTN_THREADS 256
#define ATTN_PS (ATTN_BN + 1) /* row stride (floats) of P and dS in shared memory */

/* Backward execution modes. */
enum attn_mode {
    ATTN_MODE_PERSISTENT = 1,  /* CTAs take jobs in dispatch order from a job counter */
    ATTN_MODE_INTERLEAVED = 2, /* W virtual SMs stepped in turn, state in global scratch */
};

/* Slots of one virtual SM's state in global scratch (int32 each). */
enum attn_vsm_slot {
    VSM_JOB = 0, /* next job in dispatch order (>= s.jobs: done) */
    VSM_STAGE,   /* stage within the job */
    VSM_STEP,    /* step within the stage's unit */
    VSM_PENDING, /* 1: the dQ partial of (stage, step) is computed, not yet added */
    VSM_LOADED,  /* 1: the unit's dK/dV accumulators are live */
    VSM_M,       /* q-tile of the pending partial */
    VSM_RANK,    /* its rank */
    VSM_SLOTS = 8
};

/* Forward launch: one CTA per (q-tile, batch*head). */
struct attn_fwd_params {
    void *out;        /* (B, Sq, Hq, D) fp16/bf16, strides out_stride */
    float *lse;       /* (B, Hq, Sq) contiguous */
    const void *q;    /* (B, Sq, Hq, D) */
    const void *k;    /* (B, Sk, Hkv, D) */
    const void *v;    /* (B, Sk, Hkv, D) */
    int64_t out_stride[3], q_stride[3], k_stride[3], v_stride[3]; /* elements: b, s, h */
    int32_t seqlen_q, seqlen_k, heads_q, group; /* group = Hq / Hkv */
    float scale;
    struct sched geo; /* 64x64 tile geometry and mask */
};

/* Backward launch: preprocess, the scheduled main kernel, postprocess. */
struct attn_bwd_params {
    void *dq;          /* (B, Sq, Hq, D) output */
    void *dk, *dv;     /* (B, Sk, Hkv, D) outputs */
    const void *q;     /* (B, Sq, Hq, D) */
    const void *k, *v; /* (B, Sk, Hkv, D) */
    const void *out;   /* (B, Sq, Hq, D) the forward's output */
    const void *dout;  /* (B, Sq, Hq, D) */
    const float *lse;  /* (B, Hq, Sq) contiguous */
    int64_t dq_stride[3], dk_stride[3], dv_stride[3], q_stride[3], k_stride[3], v_stride[3],
        out_stride[3], dout_stride[3]; /* elements: b, s, h */

    /* device scratch */
    float *dq_acc;     /* (B*Hq, Sq, D) fp32 dQ accumulator (unscaled) */
    float *dsum;       /* (B*Hq, Sq) rowsum(dO * O) */
    float *dk_acc;     /* (B*Hq, Sk, D) per-q-head dK * scale; GQA only, else NULL */
    float *dv_acc;     /* (B*Hq, Sk, D) per-q-head dV; GQA only, else NULL */
    int32_t *counter;  /* (B*Hq, M) dQ tile counters, zero at launch */
    int32_t *job_next; /* (1) persistent mode's job counter, zero at launch */
    int32_t *vsm_state; /* (nvsm, VSM_SLOTS) interleaved mode only */
    float *vsm_data;    /* (nvsm, 3, D/4, 256) dK, dV, dQ-partial registers; interleaved only */

    int32_t seqlen_q, seqlen_k, heads_q, heads_kv, group, head_dim;
    float scale;
    struct sched s; /* the resolved schedule (64x64 tiles) */
    int32_t mode;   /* enum attn_mode */
    int32_t nvsm;   /* interleaved mode: virtual SMs, min(W, jobs) */
};

/* attn_fwd.cu */
cudaError_t cuattn__fwd_init(void);
cudaError_t cuattn__fwd_launch(const struct attn_fwd_params *p, enum dtype_kind dt,
                               int32_t head_dim, cudaStream_t stream);

/* attn_bwd.cu */
cudaError_t cuattn__bwd_init(void);
/* CTAs of the main backward kernel that fit on one SM at once (>= 1 when it can run). */
cudaError_t cuattn__bwd_blocks_per_sm(enum dtype_kind dt, int32_t head_dim, int32_t *ret);
/* Zero the counters, run preprocess, main (grid CTAs) and postprocess kernels. */
cudaError_t cuattn__bwd_launch(const struct attn_bwd_params *p, enum dtype_kind dt,
                               int32_t grid, int32_t sms, cudaStream_t stream);

/* ---- device helpers ---------------------------------------------------------------- */
#ifdef __CUDACC__

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* Storage type tags: tensors are handled as raw 16-bit words and converted here, so one
 * code path serves both types. */
struct attn_bf16 {
    static __device__ __forceinline__ float to_f(uint16_t x) { return __uint_as_float((uint32_t)x << 16); }
    static __device__ __forceinline__ uint16_t from_f(float f)
    {
        return __bfloat16_as_ushort(__float2bfloat16_rn(f));
    }
};

struct attn_f16 {
    static __device__ __forceinline__ float to_f(uint16_t x) { return __half2float(__ushort_as_half(x)); }
    static __device__ __forceinline__ uint16_t from_f(float f)
    {
        return __half_as_ushort(__float2half_rn(f));
    }
};

/* Two adjacent 16-bit elements (even column) of a shared-memory tile, as floats. */
template <typename DT>
static __device__ __forceinline__ float2 attn_pair(const uint16_t *row_smem, int32_t col)
{
    const uint32_t w = *reinterpret_cast<const uint32_t *>(row_smem + col);
    return make_float2(DT::to_f((uint16_t)(w & 0xffffu)), DT::to_f((uint16_t)(w >> 16)));
}

/* Row stride (16-bit elements) of a 64xD input tile in shared memory: D + 2 keeps rows
 * 4-byte aligned for pair loads and makes the stride an odd number of words, so 16
 * threads reading one column of 16 different rows hit 16 different banks. */
template <int D>
struct attn_ld {
    static const int32_t v = D + 2;
};

/* Copy `rows` rows (of 64) of a strided (B, S, H, D) tensor, starting at element `base`
 * (row 0) with `row_stride` elements between rows, into tile_smem (64, D + 2); rows past
 * `rows` are zero so that no later read sees uninitialised memory. */
template <int D>
static __device__ __forceinline__ void attn_load_tile(uint16_t *tile_smem, const uint16_t *src,
                                                      int64_t base, int64_t row_stride,
                                                      int32_t rows)
{
    for (int32_t e = threadIdx.x; e < ATTN_BM * D; e += ATTN_THREADS) {
        const int32_t r = e / D, c = e - r * D;
        tile_smem[r * attn_ld<D>::v + c] = r < rows ? src[base + r * row_stride + c] : (uint16_t)0;
    }
}

static __device__ __forceinline__ int32_t attn_ld_acquire(const int32_t *p)
{
    int32_t v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ void attn_st_release(int32_t *p, int32_t v)
{
    asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

#endif /* __CUDACC__ */

#endif
