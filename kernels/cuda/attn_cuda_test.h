// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_cuda_test.h - what only the tests may ask of the CUDA backend (attn_cuda.h): forcing
 * a mode, pretending to be a smaller GPU, reading back what the last launch did. Not for
 * dashd or any other caller: these change speed or coverage, never the bits. (One
 * exception: dashd calls cuattn__fault when its environment asks for it, for the tests of
 * what it does when its GPU fails.)
 */
#ifndef DASH_ATTN_CUDA_TEST_H
#define DASH_ATTN_CUDA_TEST_H

#include "kernels/cuda/attn_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For tests: 1 makes every later backward on `a` run the interleaved mode (W virtual SMs
 * stepped in turn by the CTAs, state in global scratch) whatever the grid; 0 restores the
 * automatic choice. The bits are the same either way; this lets a test prove it. */
void cuattn__force_interleaved(struct cuattn *a, int on);
/* Tests: behave as a GPU with at most `bytes` of shared memory per block would (which
 * kernels fit, which head dims are served); only ever lowers the device's figure. */
void cuattn__limit_smem(struct cuattn *a, size_t bytes);

/* For tests: 1 makes every later v3 forward (attn_fwd_wg.cu, and attn_vl.cu's on dense
 * batches) on `a` load its tiles through cp.async even where TMA could; 0 restores the
 * automatic choice (TMA where the views allow). The bits are the same either way; this
 * lets a test prove it. */
void cuattn__force_no_tma(struct cuattn *a, int on);
/* For tests: 1 makes every later call on `a` fill the scratch it uses with 0xff bytes (NaN
 * as floats) before its kernels run, so a test can show that nothing reads scratch it did
 * not write in that call (the dQ accumulator where v3's backward skips its memset:
 * attn_bwd_dq_first_stores); 0 stops it. The bits are the same either way. */
void cuattn__poison_scratch(struct cuattn *a, int on);
/* For tests: queue on a's stream a kernel that stores to an address no allocation holds, as
 * a failing GPU or a kernel's bug would: the process's CUDA context is then lost
 * (cudaErrorIllegalAddress at the next synchronisation, and for every later call). 0, or
 * a negative errno where the launch itself failed. */
int cuattn__fault(struct cuattn *a);
/* For tests: 1 if the last successful v3 forward on `a` loaded through TMA, else 0. */
int cuattn__last_fwd_tma(const struct cuattn *a);
/* For tests: bit 0 set if the last successful forward on `a` ran a widened head dim's wider
 * kernel on the caller's tensors (no widened copies), bit 1 the same for the last backward. */
int cuattn__last_narrow(const struct cuattn *a);
/* For tests: 1 if the last successful forward on `a` ran v3's kernel (dense or VL), else 0. */
int cuattn__last_fwd_wg(const struct cuattn *a);
/* For tests: ctas > 0 caps later dense v3 forwards on `a` at that many CTAs, whatever the
 * mask (0: the launch's own choice, attn_cuda.cu's fwd_ctas), so a test can make each CTA
 * take many q-tiles. The bits are the same either way. */
void cuattn__force_fwd_ctas(struct cuattn *a, int32_t ctas);
/* For tests: nc 2 or 3 makes later dense v3 forwards at head dim 64 on `a` run that many
 * consumer warpgroups (64 nc-row q-tiles; 0: the launch's rule, fwd_wg.cuh); the bits are
 * the same either way. cuattn__last_fwd_consumers: what the last dense v3 forward ran. */
void cuattn__force_fwd_consumers(struct cuattn *a, int32_t nc);
int32_t cuattn__last_fwd_consumers(const struct cuattn *a);

/* For tests: the mode (1 persistent, 2 interleaved) and the CTA count of the last
 * successful backward on `a`; 0 before any. */
void cuattn__last_launch(const struct cuattn *a, int32_t *ret_mode, int32_t *ret_grid);
/* For tests: 1 if the last successful backward on `a` ran v3's wgmma step (sm_90), 0 if
 * v1's or v2's kernels (or before any). */
int cuattn__last_wg(const struct cuattn *a);

#ifdef __cplusplus
}
#endif

#endif
