// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_cuda.h - the CUDA attention backend: forward (O, LSE) and backward (dQ, dK, dV) on
 * one GPU, with the same API structs, masks, GQA mapping and schedules as the CPU engine
 * (kernels/attn/problem.h).
 *
 * Two implementations of the kernels, chosen per object (cuattn_set_impl):
 *   v1 (CUATTN_IMPL_CUDA_CORES): built for correctness and
 *      determinism, not speed: 64x64 tiles, 256 threads per CTA, fp32 arithmetic on CUDA
 *      cores, inputs staged in shared memory as fp16/bf16.
 *   v2 (CUATTN_IMPL_TENSOR_CORES, the default where v3 cannot run): the same schedules,
 *      masks and modes, with the products on tensor cores (mma.sync, fp32 accumulators);
 *      P and dS are rounded to the input dtype before the products that take them, as
 *      FlashAttention does. Its backward uses 64 x 128 tiles (block_n =
 *      CUATTN_TC_BLOCK_N) at head dim 64 unless the config asks for block_n = 64, and 64 x
 *      64 tiles at 128 (cuattn_bwd_block_n says which); its forward's bits are those of
 *      64 x 64 tiles.
 *   v3 (CUATTN_IMPL_WGMMA, the default on sm_90 GPUs - H100, H200): a warp-specialised
 *      forward (attn_fwd_wg.cu: one producer warpgroup loading Q and a 2-stage K/V ring,
 *      two consumer warpgroups of 64 q rows each; S = Q K^T and O += P V on Hopper
 *      warpgroup MMAs (wgmma), 128 x 128 tiles, P from registers), and a backward whose
 *      products are wgmma (operands in shared memory) on 64 x 128 tiles, with v2's
 *      schedules, turns and modes; a config asking for block_n = 64 runs v2's 64 x 64
 *      backward kernel. v3's forward has 128 x 128 tiles (128 x 64 at head dim 256) only,
 *      whatever the config (which it reports back as 64 x 64, the forward's config for
 *      every implementation): its bits are those of 128-key tiles (64 at 256), for every
 *      stride of the inputs (rows that are not 16-byte aligned are loaded by plain loads;
 *      the same bytes land). Other GPUs refuse v3 (-ENOTSUP).
 * Head dims: v1 has kernels of 64, 96, 128 and 256; v2 and v3 of 64 and 128, and v3 of 256;
 * every other multiple of 8 from 32 to 256 (and 96 on v2, v3) runs the next width's kernels
 * on copies of its tensors widened by zero columns (cuattn_kernel_dim; windows, softcap and
 * packed batches included, up to 128); v3's 256 serves
 * dense problems only (its backward with 64 x 64 tiles, 212 KiB of shared memory). A call with head
 * dim 256 runs v1 unless v3 is set (v2 has no 256), and its forward runs v3 wherever v3 is
 * set and the forward fits (cuattn_impl_for and cuattn_fwd_impl_for say which one a call
 * runs); its backward's kv-tiles are 64 rows either way. v2's backward at 128 needs 155 KiB
 * of shared memory per CTA (an A100 gives 163): on GPUs that give less (sm_86/sm_89's 99
 * KiB) the dims whose v2 kernels do not fit run v1 too. v1's backward at 256 needs about
 * 162 KiB: GPUs that give less refuse head dim 256 with -ENOTSUP.
 * Sliding windows, softcap and packed variable-length batches (struct attn_problem's
 * window, softcap, cu_seqlens) run kernels of their own, attn_vl.cu: the forward and
 * backward with the window's two sides, the softcap (and its tanh derivative in the
 * backward) and a per-sequence table - v3's (wgmma) where the dense problems of the dim run
 * v3 (sm_90), else v2's (mma.sync). Head dims 64 and 128, and the other multiples of 8
 * from 32 to 120 widened to those - 96 too where the dense calls run v1 (others: -ENOTSUP);
 * the
 * backward's tiles 64 x 128 by default where they fit the device, else 64 x 64 (block_n 64
 * on request, which runs v2's step on sm_90 too). Each
 * sequence is its own problem with its own schedule (docs/schedules.md, "Packed batches"),
 * so a sequence's bits do not depend on what it is packed with. Their backward has no
 * interleaved mode: a shift schedule launches at least the CTAs one chunk of a sequence
 * needs (min(W, its jobs per head)) whatever `grid` says, and a W the GPU cannot hold at
 * once is refused (-ERANGE). A window wide enough to see every key is the plain mask and
 * runs the dense kernels, with their bits. Rows that see no key get O = 0, LSE = +inf and
 * zero gradients; keys no query sees get dK = dV = 0.
 *
 * For a deterministic schedule the output bytes depend on the inputs, shape, dtype, mask,
 * scale, schedule, W and tile sizes, and on the kernel build - never on `grid`, the SM
 * count or timing. "The kernel build" is the compiled kernels, the implementation chosen
 * (v1, v2 and v3 give different bits, all close to the reference) and the GPU architecture
 * they run on (on sm_90 v2 adds each dQ tile with one bulk reduction from shared memory,
 * which keeps subnormal sums; sm_80's per-element reductions flush them to zero); struct attn_config does not carry it, so whoever records a config to
 * reproduce bits must record the build and impl beside it. The bits are not those of the
 * CPU engine (sums inside a tile are grouped differently) but all are close to the
 * float64 reference.
 *
 * All tensor data and lse pointers are DEVICE pointers of the object's device, laid out
 * as struct attn_tensor describes (element strides, stride[3] == 1). Every call launches
 * on the object's own stream and, unless the object is asynchronous (cuattn_set_async),
 * waits for it. One call at a time per object; separate objects may be used from
 * separate threads.
 *
 * One backward per device at a time. A shift backward's CTAs wait on each other, so they
 * must all be resident together (the grid is capped so that they fit an idle GPU). Two
 * backward kernels sharing the SMs - two objects on one device, or two processes - can
 * each hold SMs the other needs and never finish. Callers (the daemon) serialise backward
 * calls per device; forward calls and other work may overlap a backward, since they never
 * wait and so always free their SMs. The fixed-order schedules are safe even then.
 *
 * Errors: -EINVAL (malformed arguments), -ENOTSUP (dtype other than F16/BF16, head dim
 * that is not a multiple of 8 from 32 to 256, or one the GPU lacks the shared memory for), -EOVERFLOW (shape too large), -ENOMEM (device memory), -ENODEV (no
 * such device), -EIO (any other CUDA failure, including a kernel fault; the object should
 * then be freed).
 */
#ifndef DASH_ATTN_CUDA_H
#define DASH_ATTN_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* problem.h has no C++ guards of its own: give its functions C linkage here. */
#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/attn/problem.h"

/* Rows per q-tile, and per kv-tile of v1; cfg->block_m must be 0 or this. */
#define CUATTN_BLOCK 64
/* Rows per kv-tile of v2's backward by default (cfg->block_n 0); v2 also runs block_n =
 * CUATTN_BLOCK when asked. v1, and head dim 256 (v3's or v1's), run CUATTN_BLOCK only. */
#define CUATTN_TC_BLOCK_N 128

/* Head dims the kernels lack run the kernels of the next of 64, 128 and 256 on copies of
 * their tensors widened by zero columns (cuattn_kernel_dim): the same answer (attn_pad.cu),
 * the bits of those kernels, dp / d times their work (at most 2). That is every multiple of
 * 8 from 32 to 256 but 64, 128 and 256 - and 96 (CUATTN_NARROW_DIM) where 128 runs tensor
 * cores or the call has a window, softcap or packed batch (v1 has a dense 96 of its own). On v3 the dense forward of every widened head dim,
 * and the dense MHA backward of those widened to 128, run the wider kernels on the caller's
 * tensors instead where the views allow: TMA loads give zeros past the caller's columns and
 * the stores stop there (no copies, the same bits). */
#define CUATTN_NARROW_DIM 96
/* The served range: from 32 (the CPU engine's least too), so that a widened call moves at
 * most twice its tensors' bytes (32 -> 64; 136 -> 256 about 1.9x), up to 256. */
#define CUATTN_HEAD_DIM_MIN 32
#define CUATTN_HEAD_DIM_MAX 256
/* Windows, softcap and packed batches (attn_vl.cu's kernels, widths 64 and 128): served head
 * dims up to this one. */
#define CUATTN_VL_HEAD_DIM_MAX 128

/* One device, one stream, kernels loaded at creation, grow-only device scratch. */
struct cuattn;

/* Kernel implementations (see above). */
#define CUATTN_IMPL_CUDA_CORES 1   /* v1 (the value is the version: one name, vN, throughout) */
#define CUATTN_IMPL_TENSOR_CORES 2 /* v2 */
#define CUATTN_IMPL_WGMMA 3        /* v3: v2 with the backward on Hopper's wgmma (sm_90) */

/* Open `device` (a CUDA device ordinal). The implementation starts as v3 on an sm_90 GPU
 * and v2 on others (cuattn_set_impl chooses another). Returns 0 and *ret, or -ENODEV (no
 * such usable device), -EIO (CUDA failed) or -ENOMEM. *ret is untouched on failure. */
int cuattn_new(int device, struct cuattn **ret);

/* Choose the implementation later calls on `a` use: CUATTN_IMPL_CUDA_CORES,
 * CUATTN_IMPL_TENSOR_CORES or CUATTN_IMPL_WGMMA. 0, -ENOTSUP (v3 on a GPU other than
 * sm_90) or -EINVAL (a NULL, or another value); nothing changes on failure. Not while a
 * call on `a` runs. */
int cuattn_set_impl(struct cuattn *a, int32_t impl);

/* The implementation calls on `a` use; -EINVAL for NULL. */
int32_t cuattn_impl(const struct cuattn *a);

/* The implementation a call on `a` with this head dim runs: cuattn_impl(a) for 64 and 128
 * where its kernels fit the device's shared memory per block (else v2 if that fits, else
 * v1); for 96 what 128 runs (widened copies; v1's own 96 where that is v1); for 256 v3
 * where v3 is set and both its kernels fit (sm_90: 64 x 64 tiles), else
 * CUATTN_IMPL_CUDA_CORES (v2 has no 256); for another multiple of 8 up to 256, what the
 * dim it is widened to runs (cuattn_kernel_dim). -EINVAL for NULL.
 * Whoever records what the bits depend on records this, not cuattn_impl. */
int32_t cuattn_impl_for(const struct cuattn *a, int32_t head_dim);

/* The implementation a forward on `a` with this head dim runs: cuattn_impl_for's, except
 * at head dim 256 where v3 is set and its forward fits the device but its backward does
 * not: v3's forward (64-key tiles), while the backward is v1's. -EINVAL for NULL. */
int32_t cuattn_fwd_impl_for(const struct cuattn *a, int32_t head_dim);

/* The head dim the kernels run a call of this head dim at on `a`: 128 for 96 where
 * cuattn_impl_for(a, 96) is not v1, the next of 64, 128 and 256 for the other served head
 * dims (cuattn_serves_head_dim; widened copies), else head_dim itself; -EINVAL for
 * NULL. Windows, softcap and packed batches need 64 or 128 here. */
int32_t cuattn_kernel_dim(const struct cuattn *a, int32_t head_dim);

/* 1 if the kernels serve a head dim - a multiple of 8 from 32 to 256: 64, 96 (v1), 128 and
 * 256 as they are, the others widened (cuattn_kernel_dim) - else 0. A device may still
 * lack the shared memory for one (a call then returns -ENOTSUP). */
int cuattn_serves_head_dim(int32_t head_dim);

/* on != 0: later calls return as soon as their kernels are launched on the object's
 * stream (cuattn_stream), reporting launch failures only; the caller orders its own work
 * on that stream (events, cudaStreamSynchronize). Calls stay ordered among themselves,
 * and growing the scratch waits for what is queued. 0, or -EINVAL for NULL. */
int cuattn_set_async(struct cuattn *a, int on);

/* The object's stream (a cudaStream_t), or NULL for NULL. */
void *cuattn_stream(const struct cuattn *a);

/* Frees the scratch and the stream. Accepts NULL. */
void cuattn_free(struct cuattn *a);

/* The device's name (NUL-terminated, truncated to len) and its SM count. name may be NULL
 * when len is 0; ret_sms may be NULL. 0 or -EINVAL. */
int cuattn_device(const struct cuattn *a, char *name, size_t len, int32_t *ret_sms);

/* What cuattn_forward (backward 0) or cuattn_backward (1) would say of a problem and
 * configuration before launching anything - the same checks, made by the same code - so a
 * caller can refuse a request early: 0, -EINVAL (bad values, tile sizes these kernels do
 * not have, a schedule that refuses them), -ENOTSUP (dtype or head dim), -EOVERFLOW
 * (indices past 32 bits), -ERANGE (windows, softcap, packed batches: a shift W more than
 * the GPU runs at once). Reads `a` only; any thread. */
int cuattn_check_config(const struct cuattn *a, const struct attn_problem *p,
                        const struct attn_config *cfg, int backward);

/* The kv-tile rows (block_n) a backward of this problem runs on `a` when its config leaves
 * block_n 0, and the most it accepts: CUATTN_TC_BLOCK_N where the kernels it runs have 128-row
 * kv-tiles (v3's; v2's at head dim 64; windows, softcap and packed batches likewise, where
 * those kernels fit), else CUATTN_BLOCK. -EINVAL for NULLs. Reads `a` only; any thread. */
int32_t cuattn_bwd_block_n(const struct cuattn *a, const struct attn_problem *p);

/*
 * Forward: out = softmax(scale q k^T, mask) v and lse (batch, heads_q, seqlen_q) fp32,
 * contiguous, +inf for rows that see no key (whose out is 0). Shapes as eng_forward. The
 * forward has no schedule: like eng_forward it reports sched = SCHED_ASCENDING. cfg may be
 * NULL; ret_cfg may be NULL (filled only on success). 0 or a negative code.
 */
int cuattn_forward(struct cuattn *a, const struct attn_problem *p, const struct attn_config *cfg,
                   struct attn_tensor out, float *lse, struct attn_tensor q, struct attn_tensor k,
                   struct attn_tensor v, struct attn_config *ret_cfg);

/*
 * Backward: dq, dk, dv from q, k, v, the forward's out and lse, and dout, run in the
 * schedule's order (SCHED_AUTO becomes cuattn_auto_schedule's choice for the GPU's compute
 * capability and the shape, kernels/cuda/attn_auto.h: shift, spt where a window leaves a
 * band, or what the measured table of an architecture names; W defaults to
 * SCHED_W_DEFAULT). `grid` is how many CTAs to launch, 0 meaning the
 * device's SM count; it is capped at what can be resident at once. It changes the speed,
 * never the bits. cfg may be NULL; ret_cfg may be NULL (filled only on success).
 * 0 or a negative code; outputs are unspecified on failure.
 */
int cuattn_backward(struct cuattn *a, const struct attn_problem *p, const struct attn_config *cfg,
                    int32_t grid, struct attn_tensor dq, struct attn_tensor dk, struct attn_tensor dv,
                    struct attn_tensor q, struct attn_tensor k, struct attn_tensor v,
                    struct attn_tensor out, const float *lse, struct attn_tensor dout,
                    struct attn_config *ret_cfg);

/*
 * The audit's digests of a backward's outputs, fused into the kernels that write them:
 * with on != 0, every later cuattn_backward also writes, where its kernels can, the leaf
 * hashes (kernels/digest/digest.h, version 3: one per row of head_dim elements, row-major
 * (batch, seqlen, heads) order) of dq, dk and dv into memory of `a`, so the digests need
 * not read the outputs again (digest_cuda.h takes them as a view's leaves). 0 or -EINVAL.
 */
int cuattn_set_leaves(struct cuattn *a, int on);

/*
 * The audit's digests themselves, folded by the backward's kernels: with out non-NULL (and
 * leaves on), every later cuattn_backward whose kernels hash all three outputs' rows before
 * its dQ postprocess - v3's persistent kernel at head dims 64 and 128 without GQA, not
 * windows, softcap, packed batches or widened head dims, and outputs of fewer than 2^31
 * rows (kernels/cuda/bwd_fold.cuh) - also folds those leaves into the
 * digests (kernels/digest/digest.h, version 3) of the whole dq, dk and dv, (batch, seqlen,
 * heads, head_dim) as dense bytes, and writes them to out[0], out[1], out[2] from its last
 * kernel, on the stream of `a`: no digest kernel need follow. cuattn_digested says whether
 * it did. out[i]: 8 bytes of device memory, or of pinned host memory the device can write
 * (cudaMallocHost), each valid until the stream has passed the call. out NULL (the default):
 * off. 0, or -EINVAL (a NULL handle, or out with a NULL entry).
 */
int cuattn_set_digests(struct cuattn *a, uint64_t *const out[3]);

/* After a successful cuattn_backward: 1 when its kernels wrote the three digests to
 * cuattn_set_digests' addresses, else 0 (then fold cuattn_leaves with digest_cuda). */
int cuattn_digested(const struct cuattn *a);

/* After a successful cuattn_backward: the device array of leaf hashes of output `which`
 * (0 dq, 1 dk, 2 dv), written on the stream of `a` and valid there until the next backward;
 * NULL where that output's kernels did not hash it (off; packed batches, windows and
 * softcap; widened head dims (96, 80, ...) and the CUDA-core kernels' dQ; a failed call). */
const uint64_t *cuattn_leaves(const struct cuattn *a, int which);

#ifdef __cplusplus
}
#endif

#endif
