// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_cuda_int.h - what the CUDA backend's files share: the launch parameter structs,
 * the launchers of attn_fwd.cu and attn_bwd.cu (v1, CUDA cores) and of attn_fwd_tc.cu and
 * attn_bwd_tc.cu (v2, tensor cores), and the device helpers the kernels use (dtype
 * conversion, tile loads, acquire/release; for v2 also mma.sync, ldmatrix, cp.async and
 * the fp32 reduction). Not a public header; C++ only.
 *
 * v1 and v2 take the same params structs and the same scratch; the host (attn_cuda.cu)
 * picks one per call from struct cuattn's impl. Everything below the v1 thread-layout
 * note is v1's; v2's layouts are described in attn_fwd_tc.cu and attn_bwd_tc.cu.
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

#include "kernels/cuda/attn_cuda.h"
#include "kernels/digest/digest.h"

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "kernels/sched/dag.h"
#include "kernels/attn/problem.h"
}

#define ATTN_BM CUATTN_BLOCK /* q-tile rows */
#define ATTN_BN CUATTN_BLOCK /* kv-tile rows */
#define ATTN_THREADS 256

/* The most shared memory a block may opt into on the GPUs that run the sm_80 code (8.x:
 * the A100's 163 KiB, less on the others). A kernel that needs more is not built for them
 * (ATTN_FITS_ARCH false: its sm_80 body traps); the host checks the opt-in size before it
 * launches anything (the attr functions), so it never runs such a kernel there. */
#define ATTN_SM8X_SMEM_MAX 166912
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define ATTN_FITS_ARCH(bytes) ((bytes) <= ATTN_SM8X_SMEM_MAX)
#else
#define ATTN_FITS_ARCH(bytes) true
#endif
#define ATTN_PS (ATTN_BN + 1) /* row stride (floats) of P and dS in shared memory */

/* v2's backward (mma.sync; dense, and windows/softcap/packed in attn_vl.cu) has kernels of
 * 128-row kv-tiles (CUATTN_TC_BLOCK_N) at head dim 64 only. At 128 such a CTA needs 205 KiB
 * of shared memory, more than any GPU that runs the sm_80 code gives, and spilled registers
 * on sm_90; its 64 x 64 kernels need 155 KiB, which an A100 (163) holds. v3 has 64 x 128
 * tiles at 64 and 128. */
#define BWD_TC_WIDE(D) ((D) == 64)

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
    VSM_USED,    /* the slots above; the kernels keep and copy these only */
    VSM_SLOTS = 8 /* a virtual SM's stride in vsm_state */
};

/* Windows, softcap and packed batches (attn_vl.cu): one entry per sequence that has work,
 * in order, built by the host for each call. The sequence is a problem of its own (batch 1,
 * heads_q heads, its lengths and normalised window: sched_init on attn_sched_shape_of),
 * tiled from its first rows q0, k0. `first` is its first CTA (forward: (128-row q-tile,
 * head) blocks) or its first job in the backward's dispatch order; `tile0` its first dQ
 * tile counter (backward). nokeys: a forward entry whose sequence has no key (its rows get
 * O = 0, LSE = +inf; s then describes one key and is not used for masks). */
struct attn_vl_seq {
    struct sched s;
    int32_t q0, k0;      /* first rows in the scratch layout (packed: the offsets; dense: b S) */
    int32_t vb, vq, vk;  /* where its tensors start: batch vb, rows vq (q-side), vk (k-side) */
    int32_t first, tile0, nokeys;
    int64_t lse0;        /* its head 0's first lse element (rows lse_stride apart) */
};

/* v3's forward of a packed batch loads through TMA with tensor maps per sequence (each its
 * own Q, K and V rows, so rows past its end are zeros as with cp.async), encoded on the host
 * and uploaded with the table, for batches of up to CUATTN_SEQ_MAPS_MAX sequences (more:
 * cp.async). 1.7x the packed forward's cp.async speed on the H200
 * (bench/results/gpu-bwd-tmaq-2026-12-04.md). */
#define CUATTN_SEQ_MAPS_MAX 256

/* Forward launch: one CTA per (q-tile, batch*head). */
/* A widened head dim's dense forward (96, 80, 40, 200, ...) runs v3's kernel of its width on
 * the caller's tensors through tensor maps as wide as they are, whose loads fill the columns
 * past them with zeros (the bytes widened copies would hold), and stores O's first d_cols
 * columns: no copies in or out (attn_pad.cu), the same bits as the copies give. Views TMA
 * cannot describe, windows, softcap and packed batches keep the copies (narrow96-trial:
 * bench/results/narrow96-trial-2026-12-06.md; every widened dim since trial narrowall). */
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
    /* attn_vl.cu only (zero for the dense kernels): */
    float softcap;                 /* 0: off */
    const struct attn_vl_seq *vl;  /* device table, vl_count entries (geo: 64 x 64 tiles) */
    int32_t vl_count, vl_blocks;   /* entries; CTAs in all */
    int32_t lse_stride;            /* elements between two heads' rows of lse (total_q) */
    const void *vl_maps; /* packed batches: v3's tensor maps per entry (fwd_wg_maps), or NULL */
    int32_t *vl_next;    /* v3's persistent kernel of a dense batch: tiles taken from it (0 at launch) */
    /* the caller's head dim where the dense v3 kernel runs wider (96 or 80 on the 128
     * kernel, 40 on the 64, 200 on the 256; no widened copies): the tensor maps' width (columns past it load as zeros) and the
     * columns of O stored; 0: the kernel's */
    int32_t d_cols;
};

/* The dense backward (MHA, v3 persistent) of a head dim widened to 128 (72-120) runs the
 * 128 kernels on the caller's tensors without widened copies: the loads put the zeros there
 * that copies would hold (the same bits), the stores write d_cols columns
 * (attn_bwd_params.d_cols). GQA, windows, softcap,
 * packed batches, the interleaved mode and views TMA cannot describe keep the copies. */
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
    float *vsm_data;    /* v1: (nvsm, 3, D/4, 256), v2: (nvsm, cuattn__bwd_tc_vsm_floats, 256)
                           dK, dV, dQ-partial registers; interleaved only */

    int32_t seqlen_q, seqlen_k, heads_q, heads_kv, group, head_dim;
    float scale;
    struct sched s; /* the resolved schedule (64 x 64 tiles; v2 also 64 x 128) */
    int32_t mode;   /* enum attn_mode */
    int32_t nvsm;   /* interleaved mode: virtual SMs, min(W, jobs) */
    int32_t defer;  /* v2/v3 persistent: 1 passes a dQ tile on during the unit's next step */
    int32_t wg;     /* 1: v3's kernels (wgmma, sm_90; 64 x 128 tiles), 0: v2's */
    /* The audit's leaf hashes (digest.h: one per output row, row-major (b, s, h) order),
     * written by the kernels that write those rows, or NULL: dQ by the v2/v3 postprocess,
     * dK and dV by v3's persistent epilogue (head dims 64, 128; no GQA) or GQA's sum
     * (attn_bwd_dkv_sum_kernel). The host sets only those its kernels write. */
    uint64_t *leaf_dq, *leaf_dk, *leaf_dv;
    /* the caller's head dim where v3's dense persistent kernel runs wider (72-120 on the 128
     * kernel, no widened copies): its loads give zeros past it (TMA maps that wide, K and V
     * copied that far), Dsum sums that far, dQ, dK and dV are stored that far; 0: the
     * kernel's */
    int32_t d_cols;
    /* attn_vl.cu only (zero for the dense kernels). The scratch rows (dq_acc, dsum, lse_vl;
     * dk_acc, dv_acc) are laid out sequence by sequence: sequence b's block starts at row
     * heads_q q0 (k0) and is (heads_q, its length) - each sequence a dense problem of batch 1. */
    float softcap;                    /* 0: off */
    const struct attn_vl_seq *vl;     /* device table, vl_count entries, s at the call's tiles */
    int32_t vl_count, vl_jobs;        /* entries; jobs in all (dispatch order: entry by entry) */
    const int32_t *cu_q, *cu_k;       /* device copies of the offsets (batch + 1 each) */
    int32_t total_q, total_k;         /* rows of the packed tensors (a dense batch: B S as one) */
    float *lse_vl;                    /* (heads_q total_q) f32: lse in the scratch layout */
    int32_t vl_dense;                 /* 1: a dense batch (view (batch, S); cu_q, cu_k are b S) */
    int32_t vl_tiles;                 /* dQ tile counters in all */
    int32_t vl_zero_k;                /* 1: some sequence has keys but no query (dK, dV 0) */
};

/* The audit's digests folded by the dQ postprocess (cuattn_set_digests; bwd_fold.cuh),
 * where v3's persistent kernel wrote dK's and dV's leaves before it (no GQA) and every
 * index fits 32 bits: a parameter of that kernel's own, beside attn_bwd_params (in which
 * it changed the code of kernels that copy their parameters, attn_vl.cu's). */
struct attn_bwd_fold {
    uint64_t *out[3];       /* where the digests of dq, dk, dv go: device or pinned host memory */
    unsigned char *scratch; /* attn_bwd_fold_bytes of the handle's leaf memory (below) */
};

/* The fold scratch (attn_bwd_fold.scratch) of a backward with rows_q dQ and rows_k dK/dV
 * rows: the postprocess's count of finished blocks at 0 (0 before and after each launch),
 * dQ's group hashes (ceil(rows_q / 64)) at attn_bwd_fold_groups_at, dK's then dV's
 * supergroup hashes (ceil(rows_k / 4096) each) at attn_bwd_fold_supers_at; one layout for
 * the host that sizes it and the kernel that uses it. */
#define ATTN_BWD_FOLD_ALIGN 256
static __host__ __device__ inline uint64_t attn_bwd_fold_groups_at(void)
{
    return ATTN_BWD_FOLD_ALIGN;
}

static __host__ __device__ inline uint64_t attn_bwd_fold_supers_at(uint64_t rows_q)
{
    const uint64_t bytes = 8 * ((rows_q + DIGEST_FANOUT - 1) / DIGEST_FANOUT);
    return attn_bwd_fold_groups_at() + (bytes + ATTN_BWD_FOLD_ALIGN - 1) / ATTN_BWD_FOLD_ALIGN * ATTN_BWD_FOLD_ALIGN;
}

static __host__ __device__ inline uint64_t attn_bwd_fold_bytes(uint64_t rows_q, uint64_t rows_k)
{
    const uint64_t super = DIGEST_FANOUT * DIGEST_FANOUT; /* leaves */
    return attn_bwd_fold_supers_at(rows_q) + 8 * 2 * ((rows_k + super - 1) / super);
}

/* v1 serves every head dim of this list; v2 only 64 and 128, v3 64, 128 and 256
 * (cuattn_impl_for). */
#define ATTN_V1_HEAD_DIM(d) ((d) == 64 || (d) == 96 || (d) == 128 || (d) == 256)

/* One switch from (dtype, head dim) to a v1 template instance: CALL(T, D) for the
 * ATTN_V1_HEAD_DIM dims, cudaErrorInvalidValue for any other. */
#define ATTN_V1_DISPATCH(dt, head_dim, CALL)                                                  \
    do {                                                                                      \
        const int bf_ = (dt) == DTYPE_BF16;                                                   \
        switch (head_dim) {                                                                   \
        case 64:                                                                              \
            return bf_ ? CALL(attn_bf16, 64) : CALL(attn_f16, 64);                            \
        case 96:                                                                              \
            return bf_ ? CALL(attn_bf16, 96) : CALL(attn_f16, 96);                            \
        case 128:                                                                             \
            return bf_ ? CALL(attn_bf16, 128) : CALL(attn_f16, 128);                          \
        case 256:                                                                             \
            return bf_ ? CALL(attn_bf16, 256) : CALL(attn_f16, 256);                          \
        default:                                                                              \
            return cudaErrorInvalidValue;                                                     \
        }                                                                                     \
    } while (0)

/* attn_fwd.cu. init raises the shared-memory limit of every kernel whose tile needs no
 * more than smem_optin bytes (the device's opt-in maximum per block) and leaves the others
 * unusable: the backward's 64 x 256 tiles need about 162 KiB, more than sm_86/sm_89 give.
 * smem_bytes is what a head dim's kernel needs (0 for a dim v1 does not serve); callers
 * refuse a call that needs more than smem_optin. */
cudaError_t cuattn__fwd_init(size_t smem_optin);
size_t cuattn__fwd_smem_bytes(int32_t head_dim);
cudaError_t cuattn__fwd_launch(const struct attn_fwd_params *p, enum dtype_kind dt,
                               int32_t head_dim, cudaStream_t stream);

/* attn_bwd.cu: init and smem_bytes as for the forward, for the main backward kernel. */
cudaError_t cuattn__bwd_init(size_t smem_optin);
size_t cuattn__bwd_smem_bytes(int32_t head_dim);
/* CTAs of the main backward kernel that fit on one SM at once (>= 1 when it can run). */
cudaError_t cuattn__bwd_blocks_per_sm(enum dtype_kind dt, int32_t head_dim, int32_t *ret);
/* Zero the counters, run preprocess, main (grid CTAs) and postprocess kernels. */
cudaError_t cuattn__bwd_launch(const struct attn_bwd_params *p, enum dtype_kind dt,
                               int32_t grid, int32_t sms, cudaStream_t stream);

/* attn_fwd_tc.cu (v2): init and smem_bytes as for v1 (0 for a dim v2 does not serve). A
 * dim whose v2 kernels do not fit the device runs v1 (cuattn_impl_for). */
cudaError_t cuattn__fwd_tc_init(size_t smem_optin);
size_t cuattn__fwd_tc_smem_bytes(int32_t head_dim);
cudaError_t cuattn__fwd_tc_launch(const struct attn_fwd_params *p, enum dtype_kind dt,
                                  int32_t head_dim, cudaStream_t stream);

/* attn_fwd_wg.cu (v3's forward, sm_90a only: its kernels trap elsewhere): init (call it on
 * sm_90 only), smem_bytes and launch as for v2, head dims 64 and 128. The launch loads
 * through TMA tensor maps when allow_tma and the views allow it (16-byte aligned bases and
 * strides, a driver that has cuTensorMapEncodeTiled), else through cp.async; the bits are
 * the same either way. *ret_tma (unless NULL): 1 when the TMA kernel was launched. ctas > 0
 * caps the CTAs, each then taking q-tiles in turn (the persistent scheduler, fwd_wg.cuh:
 * under a causal mask in heavy/light pairs); 0: no cap (a CTA a q-tile, or a pair). The
 * bits are the same either way. */
cudaError_t cuattn__fwd_wg_init(size_t smem_optin);
size_t cuattn__fwd_wg_smem_bytes(int32_t head_dim);
/* attn_fwd_wg.cu: whether v3's dense forward at head_dim loads p's views through TMA */
bool cuattn__fwd_wg_tma_ok(const struct attn_fwd_params *p, int32_t head_dim);
/* The consumer warpgroups v3's dense forward runs p with at head_dim (fwd_wg.cuh: 2, or 3 at
 * 64 but under a causal mask up to FWD_WG_NC2_CAUSAL_MAX rows); nc 2 or 3 forces it (tests) */
int cuattn__fwd_wg_consumers(const struct attn_fwd_params *p, int32_t head_dim, int32_t nc);
cudaError_t cuattn__fwd_wg_launch(const struct attn_fwd_params *p, enum dtype_kind dt,
                                  int32_t head_dim, int allow_tma, int *ret_tma, int32_t ctas, int32_t nc,
                                  cudaStream_t stream);

/* attn_bwd_tc.cu (v2, and v3 on sm_90 when wg): the same contracts as the v1 functions
 * above, for kv-tiles of p->s.block_n rows (64 or CUATTN_TC_BLOCK_N; q-tiles are 64 rows).
 * The main kernels also have 256 threads, but v3's persistent one, which has a third
 * warpgroup for its dQ writer warp (384); the interleaved mode's register scratch is
 * (nvsm, cuattn__bwd_tc_vsm_floats(D, block_n), 256) floats; every other scratch size is
 * v1's. */
cudaError_t cuattn__bwd_tc_init(size_t smem_optin, int wg); /* wg: also v3's kernels */
size_t cuattn__bwd_tc_smem_bytes(int32_t head_dim); /* v2's widest kv-tile at the dim (BWD_TC_WIDE) */
size_t cuattn__bwd_wg_smem_bytes(int32_t head_dim); /* v3 (64 x 128 only) */
cudaError_t cuattn__bwd_tc_blocks_per_sm(enum dtype_kind dt, int32_t head_dim, int32_t block_n, int wg,
                                         int32_t *ret);
size_t cuattn__bwd_tc_vsm_floats(int32_t head_dim, int32_t block_n);
/* attn_bwd_tc.cu: whether v3's dense persistent backward at head_dim encodes the TMA maps
 * of p's Q, dO, dK and dV at p->d_cols columns (the narrow call's condition) */
bool cuattn__bwd_wg_narrow_ok(const struct attn_bwd_params *p, int32_t head_dim);
/* fold: NULL, or the digests for the dQ postprocess to fold (the host asks only where
 * struct attn_bwd_fold says) */
cudaError_t cuattn__bwd_tc_launch(const struct attn_bwd_params *p, const struct attn_bwd_fold *fold,
                                  enum dtype_kind dt, int32_t grid, int32_t sms, cudaStream_t stream);

/* attn_vl.cu: windows, softcap and packed batches on v2's tensor-core kernels (forward and
 * backward, 64 x 64 and 64 x 128 tiles, persistent mode only; sm_80 and sm_90), and on v3's
 * (sm_90): the forward on its warp-specialised kernel (fwd_wg.cuh), the backward on its
 * wgmma step (64 x 128 tiles; params.wg). The params carry the per-sequence table (see
 * struct attn_vl_seq). smem_bytes as for the dense v2 kernels (the backward: for v2's widest
 * kv-tile at the dim, BWD_TC_WIDE; fwd_vl_wg, bwd_vl_wg: v3's); 0 for a dim it does not serve.
 * wg: init also v3's kernels; blocks_per_sm and launch: v3's (block_n CUATTN_TC_BLOCK_N).
 * fwd_vl_launch with wg runs v3's forward, through TMA where allow_tma and the views'
 * tensor maps encode (*ret_tma 1), else through cp.async; a dense batch through TMA on
 * ctas persistent CTAs (0: a CTA a q-tile). */
cudaError_t cuattn__vl_init(size_t smem_optin, int wg);
size_t cuattn__fwd_vl_smem_bytes(int32_t head_dim);
size_t cuattn__fwd_vl_wg_smem_bytes(int32_t head_dim);
size_t cuattn__bwd_vl_smem_bytes(int32_t head_dim);
size_t cuattn__bwd_vl_wg_smem_bytes(int32_t head_dim);
/* The packed forward's maps per sequence (CUATTN_SEQ_MAPS_MAX): bytes for count entries, and
 * those of each of seq's count entries into out (false where one does not encode). */
size_t cuattn__fwd_vl_seq_maps_bytes(int32_t count);
bool cuattn__fwd_vl_seq_maps(void *out, const struct attn_fwd_params *p, const struct attn_vl_seq *seq,
                             int32_t count, int32_t head_dim);
cudaError_t cuattn__fwd_vl_launch(const struct attn_fwd_params *p, enum dtype_kind dt, int32_t head_dim, int wg,
                                  int allow_tma, int *ret_tma, int32_t ctas, cudaStream_t stream);
cudaError_t cuattn__bwd_vl_blocks_per_sm(enum dtype_kind dt, int32_t head_dim, int32_t block_n, int wg,
                                         int32_t *ret);
cudaError_t cuattn__bwd_vl_launch(const struct attn_bwd_params *p, enum dtype_kind dt,
                                  int32_t grid, int32_t sms, cudaStream_t stream);

/* attn_pad.cu: a widened head dim on its width's kernels (attn_cuda.cu's padded calls). widen:
 * dst (batch * rows * heads, dp) dense <- the view src (batch, rows, heads, d) at element
 * strides stride[0..2] (its last dim contiguous), columns d .. dp - 1 zero; narrow: the
 * view dst <- the first d columns of the dense src. d and dp multiples of 8, d <= dp;
 * queued on stream, cudaErrorInvalidValue for bad sizes. */
cudaError_t cuattn__pad_widen(void *dst, const void *src, const int64_t stride[3], int32_t batch, int32_t rows,
                              int32_t heads, int32_t d, int32_t dp, cudaStream_t stream);
cudaError_t cuattn__pad_narrow(void *dst, const int64_t stride[3], const void *src, int32_t batch, int32_t rows,
                               int32_t heads, int32_t d, int32_t dp, cudaStream_t stream);

/* ---- device helpers ---------------------------------------------------------------- */
#ifdef __CUDACC__

/* A kernel's resident blocks per SM, asked of the runtime once per device and kept: the
 * launches ask before every backward (the grid may not exceed what fits at once), and the
 * figure does not change while the process lives once the kernels' shared-memory limits are
 * raised (cuattn_new, before any launch). cache is the asking template's own (a
 * function-local static), by device ordinal; 0 is not kept (asked again). */
#define ATTN_OCC_DEVICES 64
template <typename Ask>
static inline cudaError_t attn_occupancy_once(int32_t (&cache)[ATTN_OCC_DEVICES], Ask ask, int32_t *ret)
{
    int dev = -1;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess)
        return err;
    const bool keep = dev >= 0 && dev < ATTN_OCC_DEVICES;
    const int32_t have = keep ? __atomic_load_n(&cache[dev], __ATOMIC_RELAXED) : 0;
    if (have > 0) {
        *ret = have;
        return cudaSuccess;
    }
    int32_t n = 0;
    if ((err = ask(&n)) != cudaSuccess)
        return err;
    if (keep && n > 0)
        __atomic_store_n(&cache[dev], n, __ATOMIC_RELAXED);
    *ret = n;
    return cudaSuccess;
}

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* Storage type tags: tensors are handled as raw 16-bit words and converted here, so one
 * code path serves both types. */
struct attn_bf16 {
    static constexpr int is_bf16 = 1;
    static __device__ __forceinline__ float to_f(uint16_t x) { return __uint_as_float((uint32_t)x << 16); }
    static __device__ __forceinline__ uint16_t from_f(float f)
    {
        return __bfloat16_as_ushort(__float2bfloat16_rn(f));
    }
    /* v2: lo and hi rounded to nearest even (as from_f), lo in the low half - the order
     * mma.sync fragments and little-endian memory both want. */
    static __device__ __forceinline__ uint32_t pack2(float lo, float hi)
    {
        const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return (uint32_t)__bfloat16_as_ushort(v.x) | ((uint32_t)__bfloat16_as_ushort(v.y) << 16);
    }
    /* v2: c += a b on tensor cores, one m16n8k16 product (fp32 accumulate). */
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
    {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

struct attn_f16 {
    static constexpr int is_bf16 = 0;
    static __device__ __forceinline__ float to_f(uint16_t x) { return __half2float(__ushort_as_half(x)); }
    static __device__ __forceinline__ uint16_t from_f(float f)
    {
        return __half_as_ushort(__float2half_rn(f));
    }
    static __device__ __forceinline__ uint32_t pack2(float lo, float hi)
    {
        const __half2 v = __floats2half2_rn(lo, hi);
        return (uint32_t)__half_as_ushort(v.x) | ((uint32_t)__half_as_ushort(v.y) << 16);
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
    {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

/* ---- v2 (tensor cores) helpers ------------------------------------------------------ */
/*
 * Fragments of mma.sync.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16"), with
 * g = lane / 4 and t = lane % 4:
 *   A (16 x 16, row-major, 4 regs of 2 x 16 bit): a0 (g, 2t..2t+1), a1 (g+8, 2t..),
 *                                                   a2 (g, 2t+8..), a3 (g+8, 2t+8..)
 *   B (16 x 8, k x n, 2 regs):                      b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
 *   C (16 x 8 fp32, 4 regs):                        c0, c1 (g, 2t..2t+1), c2, c3 (g+8, 2t..)
 * ldmatrix.x4 loads four 8 x 8 16-bit matrices, matrix r's 8 row addresses coming from
 * lanes 8r .. 8r+7; lane l receives (row l/4, columns 2(l%4), +1) of each matrix, or with
 * .trans (rows 2(l%4), +1 of column l/4). Two lane -> address patterns cover every use:
 *   attn_ldsm_x: row (l & 7) + 8 ((l >> 3) & 1), column 8 (l >> 4)
 *       - an A fragment from a row-major (m, k) tile (plain ldmatrix), or
 *       - B fragments of two n-tiles from a (k, n) tile stored k-major (.trans);
 *   attn_ldsm_y: row (l & 7) + 8 (l >> 4), column 8 ((l >> 3) & 1)
 *       - B fragments of two n-tiles from an (n, k) tile stored n-major (plain), or
 *       - an A fragment of X^T from X stored (k, m) row-major (.trans).
 * For two n-tiles, regs 0, 1 are b0, b1 of the first and regs 2, 3 those of the second.
 */

#define ATTN_LOG2E 1.44269504088896340736f /* log2(e) */
#define ATTN_LN2 0.69314718055994530942f   /* ln(2) */
#define ATTN_TC_PLD (ATTN_BN + 8)          /* v2: row stride (16-bit) of P and dS in smem */

/* v2: row stride (16-bit elements) of a 64 x D input tile in shared memory: D + 8, a
 * 16-byte pad, so the 8 rows one ldmatrix matrix reads fall in 8 different 16-byte bank
 * groups (row strides of 144 and 272 bytes are 16 mod 128), and every row starts 16-byte
 * aligned for cp.async. */
template <int D>
struct attn_tc_ld {
    static const int32_t v = D + 8;
};

/* v3 (attn_wgmma.h): byte offset of element (r, c) of a [rows][C] 16-bit tile stored in
 * the 128-byte swizzled layout: C/64 column blocks of rows x 128 bytes, and in row r of a
 * block, 16-byte chunk k at chunk k ^ (r % 8). */
static __device__ __forceinline__ uint32_t attn_sw128(int32_t r, int32_t c, int32_t rows)
{
    return (uint32_t)((c >> 6) * rows * 128 + r * 128 + ((((c >> 3) & 7) ^ (r & 7)) << 4) + (c & 7) * 2);
}

/* Element offset of 16-byte chunk c of row r of a ROWS x D input tile: v2's padded rows,
 * or (SW) v3's swizzled layout. */
template <int D, int ROWS, bool SW>
static __device__ __forceinline__ int32_t attn_tc_chunk(int32_t r, int32_t c)
{
    return SW ? (int32_t)(attn_sw128(r, 8 * c, ROWS) / 2) : r * attn_tc_ld<D>::v + c * 8;
}

static __device__ __forceinline__ int32_t attn_ldsm_x_row(int32_t lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
static __device__ __forceinline__ int32_t attn_ldsm_x_col(int32_t lane) { return (lane >> 4) * 8; }
static __device__ __forceinline__ int32_t attn_ldsm_y_row(int32_t lane) { return (lane & 7) + (lane >> 4) * 8; }
static __device__ __forceinline__ int32_t attn_ldsm_y_col(int32_t lane) { return ((lane >> 3) & 1) * 8; }

static __device__ __forceinline__ uint32_t attn_smem_u32(const void *smem)
{
    return (uint32_t)__cvta_generic_to_shared(smem);
}

/* The "memory" clobbers keep the compiler from moving shared-memory reads and the
 * asynchronous copies across the barriers and the plain stores they are ordered with. */
static __device__ __forceinline__ void attn_ldsm_x4(uint32_t r[4], const uint16_t *smem)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(attn_smem_u32(smem))
                 : "memory");
}

static __device__ __forceinline__ void attn_ldsm_x4_t(uint32_t r[4], const uint16_t *smem)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(attn_smem_u32(smem))
                 : "memory");
}

/* 2^x in one MUFU.EX2 (ex2.approx.ftz: about 2 ulp, the accuracy of exp2f, results below
 * 2^-126 flushed to 0; 2^0 = 1 and 2^-inf = +0 exactly). exp2f adds range fixups around
 * the same instruction that cost issue slots in the softmax loops. */
static __device__ __forceinline__ float attn_ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* 16 bytes global -> shared, asynchronously (L2 only); both addresses 16-byte aligned. */
static __device__ __forceinline__ void attn_cp_async16(void *smem, const void *gmem)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(attn_smem_u32(smem)),
                 "l"(__cvta_generic_to_global(gmem))
                 : "memory");
}

/* 4 bytes global -> shared, asynchronously; both addresses 4-byte aligned. */
static __device__ __forceinline__ void attn_cp_async4(void *smem, const void *gmem)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(attn_smem_u32(smem)),
                 "l"(__cvta_generic_to_global(gmem))
                 : "memory");
}

static __device__ __forceinline__ void attn_cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* Wait until at most N of this thread's committed groups are still in flight. The data is
 * visible to the other threads only after a barrier that follows. */
template <int N>
static __device__ __forceinline__ void attn_cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* gmem[0] += a, gmem[1] += b at L2 (relaxed, gpu scope; rounded to nearest even).
 * gmem 8-byte aligned. No value comes back, so nothing waits for it here; the caller's
 * fence orders it before the tile is passed on. */
static __device__ __forceinline__ void attn_red_add2(float *gmem, float a, float b)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(__cvta_generic_to_global(gmem)), "f"(a),
                 "f"(b)
                 : "memory");
#else
    atomicAdd(gmem, a);
    atomicAdd(gmem + 1, b);
#endif
}

/* Two 16-bit elements (lo at ptr[0]) packed into one register; 2-byte alignment suffices. */
static __device__ __forceinline__ uint32_t attn_ld_pair(const uint16_t *ptr)
{
    return (uint32_t)ptr[0] | ((uint32_t)ptr[1] << 16);
}

/* Store a packed pair to ptr[0], ptr[1]: one 32-bit store where ptr is 4-byte aligned
 * (dense tensors), two 16-bit stores where it is not (odd strides). */
static __device__ __forceinline__ void attn_st_pair(uint16_t *ptr, uint32_t v)
{
    if (((uintptr_t)ptr & 3u) == 0) {
        *reinterpret_cast<uint32_t *>(ptr) = v;
    } else {
        ptr[0] = (uint16_t)(v & 0xffffu);
        ptr[1] = (uint16_t)(v >> 16);
    }
}

/* The loops of attn_tc_load_tile under an unroll policy (UNROLL: empty, the compiler's
 * choice, or _Pragma("unroll 1")): one text for both, so the default instantiation is the
 * code it always was (a helper function in its place changed the dense kernels' SASS). */
#define ATTN_TC_LOAD_LOOPS(UNROLL)                                                                 \
    if (vec) { /* the common case, in a loop of its own so no slow-path code is issued */         \
        UNROLL for (int32_t e = tid; e < ROWS * CH; e += threads)                                  \
        {                                                                                          \
            const int32_t r = e / CH, c = e - r * CH;                                              \
            uint16_t *dst = tile_smem + attn_tc_chunk<D, ROWS, SW>(r, c);                          \
            if (r < rows)                                                                          \
                attn_cp_async16(dst, g + r * row_stride + c * 8);                                  \
            else                                                                                   \
                *reinterpret_cast<uint4 *>(dst) = make_uint4(0u, 0u, 0u, 0u);                      \
        }                                                                                          \
        return;                                                                                    \
    }                                                                                              \
    UNROLL for (int32_t e = tid; e < ROWS * CH; e += threads)                                      \
    {                                                                                              \
        const int32_t r = e / CH, c = e - r * CH;                                                  \
        uint16_t *dst = tile_smem + attn_tc_chunk<D, ROWS, SW>(r, c);                              \
        if (r >= rows) {                                                                           \
            *reinterpret_cast<uint4 *>(dst) = make_uint4(0u, 0u, 0u, 0u);                          \
        } else {                                                                                   \
            const uint16_t *s = g + r * row_stride + c * 8;                                        \
            uint4 w;                                                                               \
            w.x = attn_ld_pair(s);                                                                 \
            w.y = attn_ld_pair(s + 2);                                                             \
            w.z = attn_ld_pair(s + 4);                                                             \
            w.w = attn_ld_pair(s + 6);                                                             \
            *reinterpret_cast<uint4 *>(dst) = w;                                                   \
        }                                                                                          \
    }

/* v2: stage rows [0, rows) of a ROWS x D tile (ROWS 64 or 128) of a strided (B, S, H, D)
 * tensor, row 0 at element `base`, into tile_smem (ROWS, D + 8), or with SW into v3's
 * swizzled (ROWS, D); rows past `rows` are zeroed. Where the source rows are 16-byte
 * aligned (the pointer and the row stride) the copies are cp.async and the caller must
 * commit and wait for them; otherwise they are plain loads, done on return. The bytes
 * that land are the same either way. `threads` is the CTA size, or the size of the group
 * of threads first .. first + threads - 1 that copies the tile. ROLLED keeps the loops
 * rolled: for threads that only load (v3's cp.async producer warps), where registers are
 * short and loop overhead costs nothing. */
template <int D, int ROWS = ATTN_BM, bool SW = false, bool ROLLED = false>
static __device__ __forceinline__ void attn_tc_load_tile(uint16_t *tile_smem, const uint16_t *src,
                                                         int64_t base, int64_t row_stride, int32_t rows,
                                                         int32_t threads, int32_t first = 0)
{
    const int32_t tid = (int32_t)threadIdx.x - first;
    const int32_t CH = D / 8; /* 16-byte chunks per row, a power of two */
    const uint16_t *g = src + base;
    const bool vec = (((uintptr_t)g | (uintptr_t)(row_stride * 2)) & 15u) == 0;
    if constexpr (ROLLED) {
        ATTN_TC_LOAD_LOOPS(_Pragma("unroll 1"))
    } else {
        ATTN_TC_LOAD_LOOPS()
    }
}
#undef ATTN_TC_LOAD_LOOPS

#endif /* __CUDACC__ */

#endif
