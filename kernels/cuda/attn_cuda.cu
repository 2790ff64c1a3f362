// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_cuda.cu - the CUDA backend's host side: device and stream, argument validation
 * (the CPU engine's rules plus the kernels' limits), schedule resolution, grow-only
 * device scratch, the choice of implementation (v1: attn_fwd.cu, attn_bwd.cu; v2, tensor
 * cores: attn_fwd_tc.cu, attn_bwd_tc.cu; v3, sm_90: attn_fwd_wg.cu and attn_bwd_tc.cu's
 * wgmma kernels) and of backward mode, launches and error checks.
 * Both implementations take the same params structs, scratch layout and modes; only the
 * launchers called differ. Head dim 256 has v1's kernels and v3's (64 x 64 tiles, sm_90)
 * only, so calls with it run v1 unless v3 is chosen (cuattn_impl_for); head dim 96 runs the 128-column kernels
 * of v2 or v3 on copies widened by zero columns (attn_pad.cu; a second grow-only
 * allocation holds them), or v1 where 128 runs v1.
 *
 * Backward mode. The kernel's CTAs must all be resident at once (they wait on each
 * other), so the grid is capped at blocks-per-SM x SMs. Then:
 *   - fixed-order schedules (ascending, descending, spt) and atomic: persistent, any grid;
 *   - shift: persistent when grid >= min(W, jobs per chunk), the most jobs of one chunk
 *     that may wait on each other; otherwise interleaved over min(W, jobs) virtual SMs.
 * Both modes give the same bits (attn_bwd.cu, attn_bwd_tc.cu), so the choice is only
 * about speed.
 *
 * Scratch (one device allocation, grown when a call needs more, never shrunk):
 *   dQacc (bh, Sq, D) f32 | Dsum (bh, Sq) f32 | counters (bh, M) i32 | job counter i32 |
 *   GQA: dKacc, dVacc (bh, Sk, D) f32 | interleaved: states (nvsm, 8) i32, registers
 *   (nvsm, 3, D/4, 256) f32 (v1), (nvsm, cuattn__bwd_tc_vsm_floats, 256) f32 (v2).
 */
#include "kernels/cuda/attn_auto.h"
#include "kernels/cuda/attn_cuda_int.h"
#include "kernels/cuda/attn_cuda_test.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUATTN_ALIGN 256
/* Pinned staging buffers for the host tables a call uploads (upload()). */
#define CUATTN_PIN_SLOTS 8

/* One staging buffer: host memory the DMA engine reads in place, and the event recorded
 * after the copy that last read it. */
struct cuattn_pin {
    unsigned char *host; /* cudaHostAlloc'd, cap bytes */
    size_t cap;
    cudaEvent_t done; /* made on first use */
    int pending;      /* done was recorded after a copy from host */
};

struct cuattn {
    int device;
    int32_t sms;
    char name[256];
    cudaStream_t stream;
    unsigned char *scratch; /* device memory, scratch_cap bytes */
    size_t scratch_cap;
    unsigned char *pad; /* device memory, pad_cap bytes: head dim 96's widened copies */
    size_t pad_cap;
    int32_t impl; /* CUATTN_IMPL_CUDA_CORES (v1), _TENSOR_CORES (v2) or _WGMMA (v3) */
    int hopper;   /* sm_90: v3's kernels can run */
    int32_t cc;   /* compute capability, major * 10 + minor: what auto's table is keyed on */
    size_t smem_optin; /* the device's shared memory per block, opted in */
    int force_interleaved;
    int no_tma;       /* cuattn__force_no_tma: v3's forward loads through cp.async */
    int poison_scratch; /* cuattn__poison_scratch: scratch_reserve fills it with 0xff */
    int32_t fwd_ctas; /* cuattn__force_fwd_ctas: the persistent forward's CTAs (0: SMs) */
    int32_t fwd_nc;   /* cuattn__force_fwd_consumers: the dense forward's (0: its rule) */
    int32_t last_fwd_nc; /* the consumer warpgroups of the last dense v3 forward */
    int last_fwd_tma; /* the last v3 forward on this object loaded through TMA */
    int last_fwd_wg;  /* the last forward on this object ran v3's kernel */
    int32_t narrow; /* forward_padded's direct call: the caller's head dim (0: none) */
    int32_t narrow_bwd; /* backward_padded's direct call: the caller's head dim (0: none) */
    int last_narrow;    /* cuattn__last_narrow: bit 0 the last forward, bit 1 the last backward */
    int async; /* cuattn_set_async: calls return once launched */
    int32_t last_mode, last_grid;
    int last_wg; /* the last backward ran v3's wgmma step */
    unsigned char *leaves; /* device memory, leaves_cap bytes: the audit's fused leaf hashes */
    size_t leaves_cap;
    int leaves_on;          /* cuattn_set_leaves */
    uint64_t *leaf_out[3];  /* the last backward's leaves of dq, dk, dv, or NULL */
    uint64_t *digest_out[3]; /* cuattn_set_digests, or NULLs */
    int digested;            /* the last backward folded its digests (cuattn_digested) */
    struct cuattn_pin pin[CUATTN_PIN_SLOTS];
    int pin_next; /* the slot upload() takes next */
};

static int err_code(cudaError_t err)
{
    switch (err) {
    case cudaSuccess:
        return 0;
    case cudaErrorMemoryAllocation:
        return -ENOMEM;
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorInsufficientDriver:
        return -ENODEV;
    default:
        return -EIO;
    }
}

/* ---- lifetime ------------------------------------------------------------------------ */

int cuattn_new(int device, struct cuattn **ret)
{
    if (!ret)
        return -EINVAL;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count)
        return -ENODEV;
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess)
        return -ENODEV;
    cudaDeviceProp prop;
    if ((err = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
        return err_code(err);
    if (prop.major < 8) /* bf16 conversions and the smem we ask for need sm_80 or later */
        return -ENODEV;
    const int hopper = prop.major == 9; /* wgmma is sm_90a's, not a later architecture's */
    const int32_t impl = hopper ? CUATTN_IMPL_WGMMA : CUATTN_IMPL_TENSOR_CORES;
    struct cuattn *a = static_cast<struct cuattn *>(calloc(1, sizeof(*a)));
    if (!a)
        return -ENOMEM;
    a->device = device;
    a->impl = impl;
    a->hopper = hopper;
    a->cc = prop.major * 10 + prop.minor;
    a->sms = prop.multiProcessorCount;
    a->smem_optin = prop.sharedMemPerBlockOptin;
    snprintf(a->name, sizeof a->name, "%s", prop.name);
    if ((err = cudaStreamCreateWithFlags(&a->stream, cudaStreamNonBlocking)) != cudaSuccess)
        goto free_a;
    /* Load the kernels (both implementations: the choice may change between calls) and
     * raise their shared-memory limits now, so calls start warm. */
    if ((err = cuattn__fwd_init(a->smem_optin)) != cudaSuccess ||
        (err = cuattn__bwd_init(a->smem_optin)) != cudaSuccess ||
        (err = cuattn__fwd_tc_init(a->smem_optin)) != cudaSuccess ||
        (err = cuattn__bwd_tc_init(a->smem_optin, hopper)) != cudaSuccess ||
        (hopper && (err = cuattn__fwd_wg_init(a->smem_optin)) != cudaSuccess) ||
        (err = cuattn__vl_init(a->smem_optin, hopper)) != cudaSuccess)
        goto free_stream;
    *ret = a;
    return 0;

free_stream:
    cudaStreamDestroy(a->stream);
free_a:
    free(a);
    return err_code(err);
}

void cuattn_free(struct cuattn *a)
{
    if (!a)
        return;
    (void)cudaSetDevice(a->device);
    if (a->scratch)
        (void)cudaFree(a->scratch);
    if (a->pad)
        (void)cudaFree(a->pad);
    if (a->leaves)
        (void)cudaFree(a->leaves);
    (void)cudaStreamSynchronize(a->stream); /* copies may still read the staging buffers */
    for (int i = 0; i < CUATTN_PIN_SLOTS; i++) {
        if (a->pin[i].host)
            (void)cudaFreeHost(a->pin[i].host);
        if (a->pin[i].done)
            (void)cudaEventDestroy(a->pin[i].done);
    }
    (void)cudaStreamDestroy(a->stream);
    free(a);
}

int cuattn_device(const struct cuattn *a, char *name, size_t len, int32_t *ret_sms)
{
    if (!a || (!name && len))
        return -EINVAL;
    if (len)
        snprintf(name, len, "%s", a->name);
    if (ret_sms)
        *ret_sms = a->sms;
    return 0;
}

int cuattn_set_impl(struct cuattn *a, int32_t impl)
{
    if (!a ||
        (impl != CUATTN_IMPL_CUDA_CORES && impl != CUATTN_IMPL_TENSOR_CORES && impl != CUATTN_IMPL_WGMMA))
        return -EINVAL;
    if (impl == CUATTN_IMPL_WGMMA && !a->hopper)
        return -ENOTSUP;
    a->impl = impl;
    return 0;
}

int32_t cuattn_impl(const struct cuattn *a)
{
    return a ? a->impl : -EINVAL;
}

/* The next of the kernels' own widths, 64, 128 and 256, at or above head_dim. */
static int32_t pad_width(int32_t head_dim)
{
    return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256;
}

/* A served head dim that only runs widened (96 aside: v1 has its own). */
static int widened_only(int32_t head_dim)
{
    return cuattn_serves_head_dim(head_dim) && !ATTN_V1_HEAD_DIM(head_dim);
}

int32_t cuattn_impl_for(const struct cuattn *a, int32_t head_dim)
{
    if (!a)
        return -EINVAL;
    if (head_dim == CUATTN_NARROW_DIM || widened_only(head_dim))
        head_dim = pad_width(head_dim); /* widened copies (padded()): 96 where 128 has tensor cores */
    if (head_dim == 256) /* v3's kernels, 64 x 64 tiles (bwd_wgmma.cuh), or v1's */
        return a->impl == CUATTN_IMPL_WGMMA && cuattn__bwd_wg_smem_bytes(head_dim) <= a->smem_optin &&
                       cuattn__fwd_wg_smem_bytes(head_dim) <= a->smem_optin
                   ? CUATTN_IMPL_WGMMA
                   : CUATTN_IMPL_CUDA_CORES;
    if (head_dim != 64 && head_dim != 128)
        return CUATTN_IMPL_CUDA_CORES;
    /* v2's backward keeps two Q/dO stages, P, dS and a dQ tile on chip: at head dim 128 (64
     * x 64 tiles, BWD_TC_WIDE) 155 KiB, which an A100 (163 KiB) holds and an sm_86/sm_89
     * part (99 KiB) does not. Where v2 does not fit the dim runs v1, whose tiles fit; the
     * bits are v1's, as reported. */
    if (a->impl == CUATTN_IMPL_CUDA_CORES)
        return a->impl;
    if (cuattn__fwd_tc_smem_bytes(head_dim) > a->smem_optin)
        return CUATTN_IMPL_CUDA_CORES;
    /* v3: its own forward (attn_fwd_wg.cu) and backward, where both fit (an sm_90 GPU's
     * 227 KiB hold either); else v2's */
    if (a->impl == CUATTN_IMPL_WGMMA && cuattn__bwd_wg_smem_bytes(head_dim) <= a->smem_optin &&
        cuattn__fwd_wg_smem_bytes(head_dim) <= a->smem_optin)
        return CUATTN_IMPL_WGMMA;
    if (cuattn__bwd_tc_smem_bytes(head_dim) > a->smem_optin)
        return CUATTN_IMPL_CUDA_CORES;
    return CUATTN_IMPL_TENSOR_CORES;
}

int32_t cuattn_fwd_impl_for(const struct cuattn *a, int32_t head_dim)
{
    if (!a)
        return -EINVAL;
    if (widened_only(head_dim)) /* what its width runs */
        head_dim = pad_width(head_dim);
    /* head dim 256: v3's forward (64-key tiles, fwd_wg.cuh) wherever it fits, even where
     * v3's backward does not */
    if (head_dim == 256 && a->impl == CUATTN_IMPL_WGMMA && cuattn__fwd_wg_smem_bytes(head_dim) <= a->smem_optin)
        return CUATTN_IMPL_WGMMA;
    return cuattn_impl_for(a, head_dim);
}

int32_t cuattn_kernel_dim(const struct cuattn *a, int32_t head_dim)
{
    if (!a)
        return -EINVAL;
    if (head_dim == CUATTN_NARROW_DIM)
        return cuattn_impl_for(a, head_dim) != CUATTN_IMPL_CUDA_CORES ? pad_width(head_dim) : head_dim;
    return widened_only(head_dim) ? pad_width(head_dim) : head_dim;
}

int cuattn_serves_head_dim(int32_t head_dim)
{
    return head_dim >= CUATTN_HEAD_DIM_MIN && head_dim <= CUATTN_HEAD_DIM_MAX && head_dim % 8 == 0;
}

void cuattn__limit_smem(struct cuattn *a, size_t bytes)
{
    if (a && bytes < a->smem_optin)
        a->smem_optin = bytes;
}

int cuattn_set_async(struct cuattn *a, int on)
{
    if (!a)
        return -EINVAL;
    a->async = on != 0;
    return 0;
}

void *cuattn_stream(const struct cuattn *a)
{
    return a ? (void *)a->stream : NULL;
}

void cuattn__force_interleaved(struct cuattn *a, int on)
{
    if (a)
        a->force_interleaved = on != 0;
}

int cuattn__last_wg(const struct cuattn *a)
{
    return a ? a->last_wg : 0;
}

void cuattn__poison_scratch(struct cuattn *a, int on)
{
    if (a)
        a->poison_scratch = on != 0;
}

/* cuattn__fault's kernel: one store through `where`, an address no allocation holds. */
__global__ void cuattn_fault_kernel(volatile uint32_t *where)
{
    *where = 0xdead;
}

int cuattn__fault(struct cuattn *a)
{
    if (!a)
        return -EINVAL;
    /* the first page of the address space is never mapped */
    cuattn_fault_kernel<<<1, 1, 0, a->stream>>>((volatile uint32_t *)(uintptr_t)64);
    return err_code(cudaGetLastError());
}

void cuattn__force_no_tma(struct cuattn *a, int on)
{
    if (a)
        a->no_tma = on != 0;
}

void cuattn__force_fwd_ctas(struct cuattn *a, int32_t ctas)
{
    if (a)
        a->fwd_ctas = ctas > 0 ? ctas : 0;
}

void cuattn__force_fwd_consumers(struct cuattn *a, int32_t nc)
{
    if (a)
        a->fwd_nc = nc == 2 || nc == 3 ? nc : 0;
}

int32_t cuattn__last_fwd_consumers(const struct cuattn *a)
{
    return a ? a->last_fwd_nc : 0;
}

int cuattn__last_fwd_tma(const struct cuattn *a)
{
    return a ? a->last_fwd_tma : 0;
}

int cuattn__last_narrow(const struct cuattn *a)
{
    return a ? a->last_narrow : 0;
}

int cuattn__last_fwd_wg(const struct cuattn *a)
{
    return a ? a->last_fwd_wg : 0;
}

void cuattn__last_launch(const struct cuattn *a, int32_t *ret_mode, int32_t *ret_grid)
{
    if (ret_mode)
        *ret_mode = a ? a->last_mode : 0;
    if (ret_grid)
        *ret_grid = a ? a->last_grid : 0;
}

/* The persistent dense v3 forward's CTAs (fwd_wg.cuh): one an SM, full mask or causal
 * (where a CTA takes pairs of q-tiles, heavy with light, in turn); the test hook's count
 * overrides it. */
static int32_t fwd_ctas(const struct cuattn *a)
{
    return a->fwd_ctas ? a->fwd_ctas : a->sms;
}

/* ---- validation ---------------------------------------------------------------------- */


/* Whether a window leaves a band (a window past the length is the plain mask, which the
 * dense kernels serve with the plain mask's bits). */
static int window_band(const struct attn_problem *p)
{
    return attn_window_bands(p, p->seqlen_q, p->seqlen_k);
}

/* Whether a problem runs attn_vl.cu's kernels: a packed batch, a softcap, or a band. */
static int needs_vl(const struct attn_problem *p)
{
    return p->cu_seqlens_q || p->softcap != 0 || window_band(p);
}

/* cfg with SCHED_AUTO resolved for p as the caller asked it, in *buf; cfg itself where it
 * names a schedule or p is malformed (prepare refuses it). For head dim 96 before it is
 * widened to 128: auto's table has rows of its own for 96, measured as asked. */
static const struct attn_config *resolve_auto(const struct cuattn *a, const struct attn_problem *p,
                                              const struct attn_config *cfg, struct attn_config *buf)
{
    if ((cfg && cfg->sched != SCHED_AUTO) || attn_check_problem(p))
        return cfg;
    *buf = cfg ? *cfg : (struct attn_config){SCHED_AUTO, 0, 0, 0, 0};
    buf->sched = cuattn_auto_for(a->cc, p);
    return buf;
}

/* eng__prepare's rules (defaults; SCHED_AUTO as below, not by dag_auto) plus the
 * kernels' limits: fp16/bf16, head dim 64, 96, 128 or 256 (v1's list; the caller has
 * picked the implementation with cuattn_impl_for), 64-row q-tiles; kv-tiles of 64 rows,
 * or for v2's backward (wide_n) 128 by default and 64 when asked. */
static int prepare(const struct cuattn *a, const struct attn_problem *p, const struct attn_config *cfg,
                   int wide_n, struct attn_config *ret_cfg, struct sched *ret_s)
{
    int rc = attn_check_problem(p);
    if (rc)
        return rc;
    if (p->dtype != DTYPE_F16 && p->dtype != DTYPE_BF16)
        return -ENOTSUP;
    if (!ATTN_V1_HEAD_DIM(p->head_dim))
        return -ENOTSUP;
    /* packed batches, windows and softcap: attn_vl.cu's kernels, head dims 64 and 128 */
    if ((p->cu_seqlens_q || p->window || p->softcap != 0) && p->head_dim != 64 && p->head_dim != 128)
        return -ENOTSUP;
    struct attn_config c = {SCHED_AUTO, 0, 0, 0, 0};
    if (cfg)
        c = *cfg;
    if ((int)c.sched < 0 || c.sched >= SCHED_KIND_COUNT || c.w < 0 || c.w > SCHED_W_MAX)
        return -EINVAL;
    if (p->head_dim == 256)
        wide_n = 0; /* v1's and v3's kernels at 256 have 64-row kv-tiles only */
    if ((c.block_m != 0 && c.block_m != CUATTN_BLOCK) ||
        (c.block_n != 0 && c.block_n != CUATTN_BLOCK && !(wide_n && c.block_n == CUATTN_TC_BLOCK_N)))
        return -EINVAL;
    if (!c.w)
        c.w = SCHED_W_DEFAULT;
    c.block_m = CUATTN_BLOCK;
    if (!c.block_n)
        c.block_n = wide_n ? CUATTN_TC_BLOCK_N : CUATTN_BLOCK;
    /* auto: cuattn_auto_schedule (attn_auto.c): spt where a window leaves a band; on sm_90
     * the table measured on an H200 (attn_auto_table.h, made from a stored bench run by
     * scripts/auto_table.py); shift elsewhere. A function of the compute capability and
     * the shape only, never of the SM count or timing, so one GPU model always names the
     * same schedule, and so gets the same bits. A head dim 96 call run widened arrives
     * here with auto already resolved as 96 (resolve_auto). */
    if (c.sched == SCHED_AUTO)
        c.sched = cuattn_auto_for(a->cc, p);
    struct sched s;
    if ((rc = attn_geometry(p, &c, &s)))
        return rc;
    *ret_cfg = c;
    *ret_s = s;
    return 0;
}


/* attn_vl.cu's sequence table for a call (struct attn_vl_seq): the sequences with work, in
 * order, each at the config's tiles (the forward: 64 x 64, ascending). */
struct vl_plan {
    struct attn_vl_seq *seq; /* malloc'd, count entries */
    int32_t count;
    int32_t total; /* forward: CTAs; backward: jobs */
    int32_t tiles; /* backward: dQ tile counters */
    int32_t need;  /* backward: CTAs that must run at once (shift: a chunk's jobs) */
    int32_t zero_k; /* backward: a sequence with keys and no query */
    int32_t *cu_q, *cu_k; /* malloc'd, batch + 1 each: packed offsets, or b S (dense) */
    int32_t rows_q, rows_k; /* rows of the scratch layout: total_q, total_k (dense: B S) */
};

static void vl_plan_free(struct vl_plan *v)
{
    free(v->seq);
    free(v->cu_q);
    free(v->cu_k);
    memset(v, 0, sizeof *v);
}

/* counts_only: the counts and `need` alone, no table (a check before any launch; a dense
 * batch's sequences are all alike, so one stands for all). */
static int vl_plan_make(const struct attn_problem *p, const struct attn_config *c, int backward,
                        struct vl_plan *ret, int counts_only = 0)
{
    memset(ret, 0, sizeof *ret);
    const int32_t dense = p->cu_seqlens_q == NULL, B = counts_only && dense ? 1 : p->batch;
    struct attn_vl_seq one;
    int32_t cu_one[2][2];
    if (counts_only) {
        ret->seq = &one;
        ret->cu_q = cu_one[0];
        ret->cu_k = cu_one[1];
    } else {
        ret->seq = static_cast<struct attn_vl_seq *>(calloc((size_t)B, sizeof *ret->seq));
        ret->cu_q = static_cast<int32_t *>(malloc(sizeof(int32_t) * ((size_t)B + 1)));
        ret->cu_k = static_cast<int32_t *>(malloc(sizeof(int32_t) * ((size_t)B + 1)));
        if (!ret->seq || !ret->cu_q || !ret->cu_k) {
            vl_plan_free(ret);
            return -ENOMEM;
        }
    }
    int64_t total = 0, tiles = 0, rows_q = 0, rows_k = 0;
    int32_t need = 1;
    for (int32_t b = 0; b < B; b++) {
        int32_t q0, k0, sq, sk;
        attn_seq(p, b, &q0, &k0, &sq, &sk);
        const int64_t sq0 = dense ? rows_q : q0, sk0 = dense ? rows_k : k0; /* scratch rows */
        if (!counts_only) {
            ret->cu_q[b] = (int32_t)sq0;
            ret->cu_k[b] = (int32_t)sk0;
        }
        rows_q = sq0 + sq;
        rows_k = sk0 + sk;
        if (sq == 0 || (backward && sk == 0)) {
            ret->zero_k |= backward && sq == 0 && sk > 0;
            continue;
        }
        struct attn_config cc = *c;
        if (!backward) {
            cc.sched = SCHED_ASCENDING;
            cc.block_m = cc.block_n = CUATTN_BLOCK;
        }
        struct sched_shape sh;
        attn_sched_shape_of(p, &cc, b, &sh);
        sh.batch = 1;
        if (sk == 0) { /* the forward of a sequence without keys: O 0, LSE +inf */
            sh.seqlen_k = 1;
            sh.window = 0;
        }
        struct attn_vl_seq *e = counts_only ? &one : &ret->seq[ret->count];
        int rc = sched_init(&e->s, cc.sched, &sh, cc.w);
        if (rc) {
            if (!counts_only)
                vl_plan_free(ret);
            return rc;
        }
        e->q0 = (int32_t)sq0;
        e->k0 = (int32_t)sk0;
        e->vb = dense ? b : 0;
        e->vq = dense ? 0 : q0;
        e->vk = dense ? 0 : k0;
        e->nokeys = sk == 0;
        e->lse0 = dense ? (int64_t)b * p->heads_q * p->seqlen_q : q0;
        e->first = (int32_t)total;
        e->tile0 = (int32_t)tiles;
        if (backward) {
            total += e->s.jobs;
            tiles += (int64_t)e->s.bh * e->s.m_tiles;
            const int32_t nd = e->s.kind != SCHED_SHIFT ? 1 : e->s.chunks > 1 ? e->s.w : e->s.jobs_per_head;
            need = nd > need ? nd : need;
        } else {
            total += (int64_t)((sq + 127) / 128) * p->heads_q; /* 128-row q-tiles, per head */
        }
        if (total > INT32_MAX || tiles > INT32_MAX) {
            if (!counts_only)
                vl_plan_free(ret);
            return -EOVERFLOW;
        }
        ret->count++;
    }
    if (counts_only) {
        memset(ret, 0, sizeof *ret);
        ret->need = need;
        return 0;
    }
    ret->cu_q[B] = (int32_t)rows_q;
    ret->cu_k[B] = (int32_t)rows_k;
    if (rows_q > INT32_MAX / p->heads_q || rows_k > INT32_MAX / p->heads_q) {
        vl_plan_free(ret);
        return -EOVERFLOW;
    }
    ret->total = (int32_t)total;
    ret->tiles = (int32_t)tiles;
    ret->need = need;
    ret->rows_q = (int32_t)rows_q;
    ret->rows_k = (int32_t)rows_k;
    return 0;
}

/* The kernels' limits for a problem attn_vl.cu runs: their shared memory, and for the
 * backward (which has no interleaved mode) the CTAs a shift chunk needs at once. 0,
 * -ENOTSUP or -ERANGE (W more than the GPU holds at once). */
/* attn_vl.cu's backward on v3's wgmma step: where the dense backward of the dim runs v3
 * (cuattn_impl_for: sm_90, impl v3), at 64 x 128 tiles, and its shared memory fits; else
 * v2's mma.sync kernel (64 x 64 tiles, sm_80, or a device short of shared memory). */
static int vl_wg(const struct cuattn *a, const struct attn_problem *p, int32_t block_n)
{
    return cuattn_impl_for(a, p->head_dim) == CUATTN_IMPL_WGMMA && block_n == CUATTN_TC_BLOCK_N &&
           cuattn__bwd_vl_wg_smem_bytes(p->head_dim) <= a->smem_optin;
}

/* attn_vl.cu's backward runs 64 x 128 tiles by default where it has them and they fit the
 * device - v3's, and v2's at head dim 64 (BWD_TC_WIDE) - else 64 x 64. */
static int vl_wide(const struct cuattn *a, const struct attn_problem *p)
{
    if (!BWD_TC_WIDE(p->head_dim))
        return vl_wg(a, p, CUATTN_TC_BLOCK_N);
    return cuattn__bwd_vl_smem_bytes(p->head_dim) <= a->smem_optin;
}

/* The backward's default kv-tile is 128 rows where the kernels it runs have them (prepare's
 * wide_n; at head dim 256 everyone's are 64): attn_vl.cu's as vl_wide says; the dense ones
 * of v3, and of v2 at head dim 64 (BWD_TC_WIDE); v1's are 64. p: the problem the kernels
 * run (widened, for a padded one). */
static int bwd_wide(const struct cuattn *a, const struct attn_problem *p)
{
    if (needs_vl(p))
        return vl_wide(a, p);
    const int32_t impl = cuattn_impl_for(a, p->head_dim);
    return impl == CUATTN_IMPL_WGMMA || (impl == CUATTN_IMPL_TENSOR_CORES && BWD_TC_WIDE(p->head_dim));
}

static int vl_limits(const struct cuattn *a, const struct attn_problem *p, const struct attn_config *c,
                     int backward, int32_t need)
{
    if (cuattn__fwd_vl_smem_bytes(p->head_dim) > a->smem_optin)
        return -ENOTSUP;
    if (!backward)
        return 0;
    if (cuattn__bwd_vl_smem_bytes(p->head_dim) > a->smem_optin && c->block_n != CUATTN_BLOCK)
        return -ENOTSUP;
    int32_t per_sm = 0;
    if (cuattn__bwd_vl_blocks_per_sm(p->dtype, p->head_dim, c->block_n, vl_wg(a, p, c->block_n), &per_sm) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return -ENOTSUP;
    }
    if (per_sm < 1)
        return -ENOTSUP;
    return (int64_t)per_sm * a->sms < need ? -ERANGE : 0;
}

/* The head dim p's kernels run at: cuattn_kernel_dim's, but 96 always 128 where windows,
 * softcap or a packed batch take attn_vl.cu's kernels (tensor cores only: v1's own 96 has
 * none of them, as 88 and 104 are widened whatever runs the dense calls). */
static int32_t run_dim(const struct cuattn *a, const struct attn_problem *p)
{
    if (needs_vl(p) && p->head_dim == CUATTN_NARROW_DIM)
        return pad_width(p->head_dim);
    return cuattn_kernel_dim(a, p->head_dim);
}

/* A head dim the kernels lack runs the next width's kernels on copies of its tensors
 * widened by zero columns (attn_pad.cu says why that is its answer; run_dim: 96 where the
 * implementation for it is not v1 or the call needs attn_vl.cu, the others always). */
static int padded(const struct cuattn *a, const struct attn_problem *p)
{
    return p && run_dim(a, p) != p->head_dim;
}

/* cuattn_forward's and cuattn_backward's answer to forward_padded's and backward_padded's
 * direct calls where they cannot run them on the caller's columns (the forward: not v3,
 * cp.async forced, or views TMA cannot describe; the backward: not v3's persistent kernel,
 * GQA, or views the narrow loads and stores cannot take) - the widened copies then; never
 * returned to a caller. */
#define CUATTN_NARROW_REFUSED (-ECANCELED)

/* The K and V views' tiles start 16-byte aligned, so the 128 kernel copies them with
 * 16-byte chunks and stops at the caller's columns (bwd_tc_load_tile's aligned path). */
static int narrow_kv_aligned(const struct attn_tensor *t)
{
    return ((uintptr_t)t->data & 15u) == 0 && t->stride[0] % 8 == 0 && t->stride[1] % 8 == 0 &&
           t->stride[2] % 8 == 0;
}

/* The problem the kernels run for a padded one. */
static struct attn_problem widened(const struct cuattn *a, const struct attn_problem *p)
{
    struct attn_problem w = *p;
    w.head_dim = run_dim(a, p);
    return w;
}

/* The problem SCHED_AUTO is resolved for in a padded call: head dim 96 as asked (auto's
 * table has rows of its own for it, measured so), the others as the width they run at. */
static const struct attn_problem *auto_problem(const struct attn_problem *p, const struct attn_problem *w)
{
    return p->head_dim == CUATTN_NARROW_DIM ? p : w;
}

int cuattn_check_config(const struct cuattn *a, const struct attn_problem *p,
                        const struct attn_config *cfg, int backward)
{
    if (!a || !p)
        return -EINVAL;
    struct attn_problem wide;
    struct attn_config asked;
    if (padded(a, p)) { /* checked as what runs: the problem at the kernels' width */
        wide = widened(a, p);
        if (backward)
            cfg = resolve_auto(a, auto_problem(p, &wide), cfg, &asked);
        p = &wide;
    }
    /* what cuattn_forward / cuattn_backward ask of prepare */
    struct attn_config c, fc;
    struct sched s;
    if (!backward) {
        fc = cfg ? *cfg : (struct attn_config){SCHED_ASCENDING, 0, 0, 0, 0};
        fc.sched = SCHED_ASCENDING;
        cfg = &fc;
    }
    /* (attn_vl.cu's kernels are v2's or v3's: their tile widths whatever the object's choice) */
    const int vl = needs_vl(p);
    int rc = prepare(a, p, cfg, backward && bwd_wide(a, p), &c, &s);
    if (rc)
        return rc;
    if (!vl) {
        /* the CUDA-core kernels' shared memory, as cuattn_forward / cuattn_backward check it
         * (e.g. head dim 256 on a 99 KiB sm_86/sm_89 part: -ENOTSUP, not 0) */
        const int32_t impl = backward ? cuattn_impl_for(a, p->head_dim) : cuattn_fwd_impl_for(a, p->head_dim);
        const size_t need = backward ? cuattn__bwd_smem_bytes(p->head_dim) : cuattn__fwd_smem_bytes(p->head_dim);
        return impl == CUATTN_IMPL_CUDA_CORES && need > a->smem_optin ? -ENOTSUP : 0;
    }
    struct vl_plan v;
    if ((rc = vl_plan_make(p, &c, backward, &v, 1)))
        return rc;
    return vl_limits(a, p, &c, backward, v.need);
}

int32_t cuattn_bwd_block_n(const struct cuattn *a, const struct attn_problem *p)
{
    if (!a || !p)
        return -EINVAL;
    struct attn_problem wide;
    if (padded(a, p)) {
        wide = widened(a, p);
        p = &wide;
    }
    return p->head_dim != 256 && bwd_wide(a, p) ? CUATTN_TC_BLOCK_N : CUATTN_BLOCK;
}

/* The engine's view checks, plus the 2-byte alignment the kernels' 16-bit loads need. */
static int check_view(const struct attn_tensor *t, int32_t batch, int32_t seqlen, int32_t heads,
                      int32_t head_dim, int output)
{
    if (attn_check_tensor(t, batch, seqlen, heads, head_dim, output))
        return -EINVAL;
    return ((uintptr_t)t->data & 1u) ? -EINVAL : 0;
}

static void strides3(int64_t dst[3], const struct attn_tensor *t)
{
    dst[0] = t->stride[0];
    dst[1] = t->stride[1];
    dst[2] = t->stride[2];
}

/* The backward's tensors and their (batch, seqlen, heads) strides into its params. */
static void bwd_tensors(struct attn_bwd_params *bp, struct attn_tensor dq, struct attn_tensor dk,
                        struct attn_tensor dv, struct attn_tensor q, struct attn_tensor k,
                        struct attn_tensor v, struct attn_tensor out, const float *lse,
                        struct attn_tensor dout)
{
    bp->dq = dq.data;
    bp->dk = dk.data;
    bp->dv = dv.data;
    bp->q = q.data;
    bp->k = k.data;
    bp->v = v.data;
    bp->out = out.data;
    bp->dout = dout.data;
    bp->lse = lse;
    strides3(bp->dq_stride, &dq);
    strides3(bp->dk_stride, &dk);
    strides3(bp->dv_stride, &dv);
    strides3(bp->q_stride, &q);
    strides3(bp->k_stride, &k);
    strides3(bp->v_stride, &v);
    strides3(bp->out_stride, &out);
    strides3(bp->dout_stride, &dout);
}

/* Make a grow-only device allocation (*mem, *cap bytes) at least `bytes` long; the old
 * contents are not kept. */
static int grow(struct cuattn *a, unsigned char **mem, size_t *cap, size_t bytes)
{
    if (bytes <= *cap)
        return 0;
    const size_t want = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    if (*mem) {
        /* Work still queued may use it (cuattn_set_async): finish that first. */
        cudaError_t err = cudaStreamSynchronize(a->stream);
        if (err == cudaSuccess)
            err = cudaFree(*mem);
        *mem = NULL;
        *cap = 0;
        if (err != cudaSuccess)
            return err_code(err);
    }
    void *got = NULL;
    cudaError_t err = cudaMalloc(&got, want);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        return err_code(err);
    }
    *mem = static_cast<unsigned char *>(got);
    *cap = want;
    return 0;
}

/* Make the scratch at least `bytes` long; the old contents are not kept. */
static int scratch_reserve(struct cuattn *a, size_t bytes)
{
    int rc = grow(a, &a->scratch, &a->scratch_cap, bytes);
    if (rc == 0 && a->poison_scratch && bytes > 0)
        rc = err_code(cudaMemsetAsync(a->scratch, 0xff, bytes, a->stream));
    return rc;
}

/* Part of an upload: bytes of src to dst + at. */
struct upload_part {
    size_t at;
    const void *src;
    size_t bytes;
};

/* Copy host memory to the device in stream order without waiting for the stream: the
 * parts are laid out as they lie at dst in the next of the pinned staging slots, and one
 * copy of their span is queued. A slot is reused once the copy that last read it has
 * completed (its event; with CUATTN_PIN_SLOTS of them, that is several calls back). A
 * cudaMemcpyAsync from pageable memory would instead wait for the whole stream to drain,
 * so a caller queueing calls ahead (dashd) would lose the queue on every packed batch,
 * window or softcap call. The sources may go once this returns. */
static cudaError_t upload(struct cuattn *a, unsigned char *dst, const struct upload_part *parts, int n)
{
    size_t span = 0;
    for (int i = 0; i < n; i++)
        if (parts[i].at + parts[i].bytes > span)
            span = parts[i].at + parts[i].bytes;
    if (span == 0)
        return cudaSuccess;
    struct cuattn_pin *s = &a->pin[a->pin_next];
    a->pin_next = (a->pin_next + 1) % CUATTN_PIN_SLOTS;
    cudaError_t err;
    if (s->pending) {
        if ((err = cudaEventSynchronize(s->done)) != cudaSuccess)
            return err;
        s->pending = 0;
    }
    if (!s->done && (err = cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming)) != cudaSuccess)
        return err;
    if (span > s->cap) {
        if (s->host && (err = cudaFreeHost(s->host)) != cudaSuccess)
            return err;
        s->host = NULL;
        s->cap = 0;
        const size_t want = (span + ((size_t)64 << 10) - 1) & ~(((size_t)64 << 10) - 1);
        void *got = NULL;
        if ((err = cudaHostAlloc(&got, want, cudaHostAllocDefault)) != cudaSuccess)
            return err;
        s->host = static_cast<unsigned char *>(got);
        s->cap = want;
    }
    for (int i = 0; i < n; i++)
        memcpy(s->host + parts[i].at, parts[i].src, parts[i].bytes);
    if ((err = cudaMemcpyAsync(dst, s->host, span, cudaMemcpyHostToDevice, a->stream)) != cudaSuccess)
        return err;
    if ((err = cudaEventRecord(s->done, a->stream)) != cudaSuccess)
        return err;
    s->pending = 1;
    return cudaSuccess;
}

static size_t carve(size_t *used, size_t bytes)
{
    const size_t at = (*used + CUATTN_ALIGN - 1) & ~(size_t)(CUATTN_ALIGN - 1);
    *used = at + bytes;
    return at;
}

/* Wait for the stream (unless the object is asynchronous) and turn any failure (launch
 * or execution) into a code. */
static int finish(struct cuattn *a, cudaError_t launch_err)
{
    if (launch_err != cudaSuccess) {
        (void)cudaStreamSynchronize(a->stream);
        return err_code(launch_err);
    }
    if (a->async)
        return err_code(cudaGetLastError());
    cudaError_t err = cudaStreamSynchronize(a->stream);
    if (err == cudaSuccess)
        err = cudaGetLastError();
    return err_code(err);
}

/* ---- head dims the kernels lack: the next width's kernels on widened copies --------------- */

/* One tensor of a padded call: the caller's view (rows x heads per view batch), whether
 * the call writes it, and its dense widened copy in a->pad. */
struct pad_arg {
    const struct attn_tensor *t;
    int32_t rows, heads;
    int output;
    struct attn_tensor wide;
};

/* Check the caller's views (as an unpadded call does), lay the copies out in a->pad and
 * widen the inputs on the stream. 0 or a negative code. */
static int pad_in(struct cuattn *a, const struct attn_problem *p, struct pad_arg *args, int n)
{
    const int32_t vb = attn_view_batch(p);
    for (int i = 0; i < n; i++)
        if (check_view(args[i].t, vb, args[i].rows, args[i].heads, p->head_dim, args[i].output))
            return -EINVAL;
    cudaError_t err = cudaSetDevice(a->device);
    if (err != cudaSuccess)
        return err_code(err);
    const int32_t dp = run_dim(a, p);
    size_t used = 0, at[9];
    for (int i = 0; i < n; i++)
        at[i] = carve(&used, sizeof(uint16_t) * (size_t)vb * (size_t)args[i].rows * (size_t)args[i].heads * dp);
    /* at least a byte: a call whose tensors are all empty (a packed batch of empty
     * sequences) must still hand the kernels non-NULL views, as an unpadded call does */
    int rc = grow(a, &a->pad, &a->pad_cap, used ? used : 1);
    if (rc)
        return rc;
    for (int i = 0; i < n; i++) {
        const int64_t row = (int64_t)args[i].heads * dp;
        args[i].wide.data = a->pad + at[i];
        args[i].wide.stride[0] = row * args[i].rows;
        args[i].wide.stride[1] = row;
        args[i].wide.stride[2] = dp;
        args[i].wide.stride[3] = 1;
        if (!args[i].output &&
            (err = cuattn__pad_widen(args[i].wide.data, args[i].t->data, args[i].t->stride, vb, args[i].rows,
                                     args[i].heads, p->head_dim, dp, a->stream)) != cudaSuccess)
            return finish(a, err);
    }
    return 0;
}

/* After the kernels: narrow the outputs into the caller's views, then finish. */
static int pad_out(struct cuattn *a, const struct attn_problem *p, const struct pad_arg *args, int n)
{
    cudaError_t err = cudaSuccess;
    const int32_t dp = run_dim(a, p);
    for (int i = 0; i < n && err == cudaSuccess; i++)
        if (args[i].output)
            err = cuattn__pad_narrow(args[i].t->data, args[i].t->stride, args[i].wide.data, attn_view_batch(p),
                                     args[i].rows, args[i].heads, p->head_dim, dp, a->stream);
    return finish(a, err);
}

static int forward_padded(struct cuattn *a, const struct attn_problem *p, const struct attn_config *cfg,
                          struct attn_tensor out, float *lse, struct attn_tensor q, struct attn_tensor k,
                          struct attn_tensor v, struct attn_config *ret_cfg)
{
    const struct attn_problem w = widened(a, p);
    int rc = cuattn_check_config(a, p, cfg, 0);
    if (rc)
        return rc;
    /* the wider kernel on the caller's tensors, where TMA describes them and each 64-column
     * box of a row holds some of the caller's columns (136-192 on the 256 kernel: copies) */
    if (!needs_vl(p) && w.head_dim - p->head_dim < 64) {
        a->narrow = p->head_dim;
        rc = cuattn_forward(a, &w, cfg, out, lse, q, k, v, ret_cfg);
        a->narrow = 0;
        if (rc == 0)
            a->last_narrow |= 1;
        if (rc != CUATTN_NARROW_REFUSED)
            return rc;
    }
    const int32_t vq = attn_view_rows_q(p), vk = attn_view_rows_k(p);
    struct pad_arg args[4] = {{&q, vq, p->heads_q, 0, {}},
                              {&k, vk, p->heads_kv, 0, {}},
                              {&v, vk, p->heads_kv, 0, {}},
                              {&out, vq, p->heads_q, 1, {}}};
    if ((rc = pad_in(a, p, args, 4)))
        return rc;
    if ((rc = cuattn_forward(a, &w, cfg, args[3].wide, lse, args[0].wide, args[1].wide, args[2].wide, ret_cfg)))
        return rc;
    return pad_out(a, p, args, 4);
}

static int backward_padded(struct cuattn *a, const struct attn_problem *p, const struct attn_config *cfg,
                           int32_t grid, struct attn_tensor dq, struct attn_tensor dk, struct attn_tensor dv,
                           struct attn_tensor q, struct attn_tensor k, struct attn_tensor v,
                           struct attn_tensor out, const float *lse, struct attn_tensor dout,
                           struct attn_config *ret_cfg)
{
    const struct attn_problem w = widened(a, p);
    struct attn_config asked;
    cfg = resolve_auto(a, auto_problem(p, &w), cfg, &asked); /* auto as head dim 96, not 128 */
    int rc = cuattn_check_config(a, p, cfg, 1);
    if (rc)
        return rc;
    if (!needs_vl(p) && w.head_dim == 128 && p->heads_q == p->heads_kv && !a->no_tma &&
        narrow_kv_aligned(&k) && narrow_kv_aligned(&v)) {
        /* the 128 kernels on the caller's tensors (TMA maps as wide as they are:
         * cuattn__force_no_tma forces the copies); their leaves would hash 128 columns */
        const int leaves_on = a->leaves_on;
        a->leaves_on = 0;
        a->narrow_bwd = p->head_dim;
        rc = cuattn_backward(a, &w, cfg, grid, dq, dk, dv, q, k, v, out, lse, dout, ret_cfg);
        a->narrow_bwd = 0;
        a->leaves_on = leaves_on;
        if (rc == 0)
            a->last_narrow |= 2;
        if (rc != CUATTN_NARROW_REFUSED)
            return rc;
    }
    const int32_t vq = attn_view_rows_q(p), vk = attn_view_rows_k(p), hq = p->heads_q, hk = p->heads_kv;
    struct pad_arg args[8] = {{&q, vq, hq, 0, {}},    {&k, vk, hk, 0, {}},  {&v, vk, hk, 0, {}},
                              {&out, vq, hq, 0, {}},  {&dout, vq, hq, 0, {}}, {&dq, vq, hq, 1, {}},
                              {&dk, vk, hk, 1, {}},   {&dv, vk, hk, 1, {}}};
    if ((rc = pad_in(a, p, args, 8)))
        return rc;
    /* the kernels see the widened rows: their leaves would not be the outputs' */
    const int leaves_on = a->leaves_on;
    a->leaves_on = 0;
    rc = cuattn_backward(a, &w, cfg, grid, args[5].wide, args[6].wide, args[7].wide, args[0].wide,
                         args[1].wide, args[2].wide, args[3].wide, lse, args[4].wide, ret_cfg);
    a->leaves_on = leaves_on;
    if (rc)
        return rc;
    return pad_out(a, p, args, 8);
}

/* ---- forward ----------------------------------------------------------------------- */

int cuattn_forward(struct cuattn *a, const struct attn_problem *p, const struct attn_config *cfg,
                   struct attn_tensor out, float *lse, struct attn_tensor q, struct attn_tensor k,
                   struct attn_tensor v, struct attn_config *ret_cfg)
{
    if (!a || !lse || ((uintptr_t)lse & 3u))
        return -EINVAL;
    if (!a->narrow)
        a->last_narrow &= ~1;
    if (padded(a, p))
        return forward_padded(a, p, cfg, out, lse, q, k, v, ret_cfg);
    /* The forward has no schedule; only the tile sizes matter. Never run auto for it. */
    struct attn_config c, fc = {SCHED_ASCENDING, 0, 0, 0, 0};
    if (cfg) {
        fc = *cfg;
        fc.sched = SCHED_ASCENDING;
    }
    struct sched geo;
    int rc = prepare(a, p, &fc, 0, &c, &geo);
    if (rc)
        return rc;
    const int vl = needs_vl(p);
    /* the VL kernels follow the dim's dense choice (64, 128: the same) */
    const int32_t impl = vl ? cuattn_impl_for(a, p->head_dim) : cuattn_fwd_impl_for(a, p->head_dim);
    const int tc = vl || impl != CUATTN_IMPL_CUDA_CORES;
    if (!tc && cuattn__fwd_smem_bytes(p->head_dim) > a->smem_optin)
        return -ENOTSUP;
    if (vl && (rc = vl_limits(a, p, &c, 0, 1)))
        return rc;
    const int32_t vb = attn_view_batch(p), vq = attn_view_rows_q(p), vk = attn_view_rows_k(p);
    const int32_t cols = a->narrow ? a->narrow : p->head_dim; /* the views' width */
    if (check_view(&q, vb, vq, p->heads_q, cols, 0) || check_view(&k, vb, vk, p->heads_kv, cols, 0) ||
        check_view(&v, vb, vk, p->heads_kv, cols, 0) || check_view(&out, vb, vq, p->heads_q, cols, 1))
        return -EINVAL;
    cudaError_t err = cudaSetDevice(a->device);
    if (err != cudaSuccess)
        return err_code(err);

    struct attn_fwd_params fp;
    memset(&fp, 0, sizeof fp);
    fp.out = out.data;
    fp.lse = lse;
    fp.q = q.data;
    fp.k = k.data;
    fp.v = v.data;
    strides3(fp.out_stride, &out);
    strides3(fp.q_stride, &q);
    strides3(fp.k_stride, &k);
    strides3(fp.v_stride, &v);
    fp.seqlen_q = p->seqlen_q;
    fp.seqlen_k = p->seqlen_k;
    fp.heads_q = p->heads_q;
    fp.group = p->heads_q / p->heads_kv;
    fp.scale = p->scale;
    fp.geo = geo;
    if (vl) {
        struct vl_plan v;
        if ((rc = vl_plan_make(p, &c, 0, &v)))
            return rc;
        size_t used = 0;
        const size_t o_tab = carve(&used, sizeof(struct attn_vl_seq) * ((size_t)v.count + 1));
        const size_t o_next = carve(&used, sizeof(int32_t)); /* the persistent kernel's counter */
        /* v3's forward where the dim's dense forward is v3's; TMA for dense batches */
        const int wg = impl == CUATTN_IMPL_WGMMA && cuattn__fwd_vl_wg_smem_bytes(p->head_dim) <= a->smem_optin;
        /* and for packed ones of up to CUATTN_SEQ_MAPS_MAX sequences, with maps per sequence */
        const int seq_maps = wg && p->cu_seqlens_q && !a->no_tma && v.count <= CUATTN_SEQ_MAPS_MAX;
        const size_t maps_bytes = seq_maps ? cuattn__fwd_vl_seq_maps_bytes(v.count) : 0;
        const size_t o_maps = seq_maps ? carve(&used, maps_bytes) : 0;
        if ((rc = scratch_reserve(a, used)) == 0) {
            fp.vl = reinterpret_cast<struct attn_vl_seq *>(a->scratch + o_tab);
            fp.vl_count = v.count;
            fp.vl_blocks = v.total;
            fp.softcap = p->softcap;
            fp.lse_stride = p->cu_seqlens_q ? p->total_q : p->seqlen_q;
            fp.vl_next = reinterpret_cast<int32_t *>(a->scratch + o_next);
            static const int32_t zero = 0; /* the counter, uploaded with the table */
            struct upload_part tab[3] = {{0, v.seq, sizeof(struct attn_vl_seq) * (size_t)v.count},
                                         {o_next - o_tab, &zero, sizeof zero}, {0, NULL, 0}};
            int parts = 2, allow_tma = !a->no_tma && !p->cu_seqlens_q;
            /* CUtensorMap is alignas(128) and cuTensorMapEncodeTiled wants its target 64-byte
             * aligned: malloc gives 16 (maps_bytes is a multiple of 128, as aligned_alloc needs) */
            void *hmaps = seq_maps && maps_bytes ? aligned_alloc(128, maps_bytes) : NULL;
            if (hmaps && cuattn__fwd_vl_seq_maps(hmaps, &fp, v.seq, v.count, p->head_dim)) {
                tab[2] = {o_maps - o_tab, hmaps, maps_bytes};
                parts = 3;
                fp.vl_maps = a->scratch + o_maps;
                allow_tma = 1;
            }
            cudaError_t lerr = upload(a, a->scratch + o_tab, tab, parts);
            free(hmaps);
            int tma = 0;
            if (lerr == cudaSuccess && v.total > 0)
                lerr = cuattn__fwd_vl_launch(&fp, p->dtype, p->head_dim, wg, allow_tma, &tma, fwd_ctas(a), a->stream);
            rc = finish(a, lerr);
            if (rc == 0) {
                a->last_fwd_tma = tma;
                a->last_fwd_wg = wg;
            }
        }
        vl_plan_free(&v);
    } else {
        int tma = 0;
        fp.d_cols = a->narrow;
        if (a->narrow && (impl != CUATTN_IMPL_WGMMA || a->no_tma || !cuattn__fwd_wg_tma_ok(&fp, p->head_dim)))
            return CUATTN_NARROW_REFUSED; /* the widened copies then */
        rc = finish(a, impl == CUATTN_IMPL_WGMMA
                           ? cuattn__fwd_wg_launch(&fp, p->dtype, p->head_dim, !a->no_tma, &tma,
                                                   fwd_ctas(a), a->fwd_nc, a->stream)
                       : tc ? cuattn__fwd_tc_launch(&fp, p->dtype, p->head_dim, a->stream)
                            : cuattn__fwd_launch(&fp, p->dtype, p->head_dim, a->stream));
        if (rc == 0) {
            a->last_fwd_tma = tma;
            a->last_fwd_wg = impl == CUATTN_IMPL_WGMMA;
            a->last_fwd_nc = impl == CUATTN_IMPL_WGMMA ? cuattn__fwd_wg_consumers(&fp, p->head_dim, a->fwd_nc) : 0;
        }
    }
    if (rc == 0 && ret_cfg)
        *ret_cfg = c;
    return rc;
}

/* ---- backward ---------------------------------------------------------------------- */

/* The audit's fused leaves (cuattn_set_leaves): point bp's leaf arrays into the handle's
 * leaf memory for the outputs whose kernels hash their rows - dQ in the v2/v3 postprocess,
 * dK and dV in v3's persistent epilogue (head dims 64, 128, no GQA) or GQA's sum - at head dims that
 * are whole warps of pairs; the others stay NULL and are digested from memory. Where all
 * three are hashed before the dQ postprocess (the persistent epilogue, not GQA's sum, which
 * runs after it) and cuattn_set_digests asked, the postprocess folds the digests too
 * (bwd_fold.cuh): *ret_fold says where (untouched otherwise). Its scratch comes first in
 * the leaf memory, its block counter at the start whatever the shape, zeroed whenever the
 * memory is new (each launch leaves it at 0 for the next; nothing else is ever put there:
 * a call that folds nothing keeps its place). */
static int arm_leaves(struct cuattn *a, const struct attn_problem *p, struct attn_bwd_params *bp, int tc,
                      struct attn_bwd_fold *ret_fold)
{
    const int32_t D = p->head_dim;
    const int dq = tc;
    const int dkv = p->heads_q > p->heads_kv || (bp->wg && D != 256 && bp->mode == ATTN_MODE_PERSISTENT);
    if (D % 64 != 0 || (!dq && !dkv))
        return 0;
    const size_t rows_q = (size_t)p->batch * (size_t)p->seqlen_q * (size_t)p->heads_q;
    const size_t rows_k = (size_t)p->batch * (size_t)p->seqlen_k * (size_t)p->heads_kv;
    const int fold = a->digest_out[0] && dq && dkv && p->heads_q == p->heads_kv && !a->narrow_bwd &&
                     rows_q <= INT32_MAX && rows_k <= INT32_MAX; /* the kernel's 32-bit indices */
    size_t used = 0;
    const size_t o_fold = carve(&used, fold ? (size_t)attn_bwd_fold_bytes(rows_q, rows_k) : sizeof(unsigned int));
    const size_t o_q = carve(&used, sizeof(uint64_t) * rows_q);
    const size_t o_k = carve(&used, sizeof(uint64_t) * rows_k);
    const size_t o_v = carve(&used, sizeof(uint64_t) * rows_k);
    const size_t cap = a->leaves_cap;
    int rc = grow(a, &a->leaves, &a->leaves_cap, used);
    if (rc == 0 && a->leaves_cap != cap) /* new memory: the counter starts at 0 */
        rc = err_code(cudaMemsetAsync(a->leaves + o_fold, 0, sizeof(unsigned int), a->stream));
    if (rc)
        return rc;
    if (dq)
        bp->leaf_dq = reinterpret_cast<uint64_t *>(a->leaves + o_q);
    if (dkv) {
        bp->leaf_dk = reinterpret_cast<uint64_t *>(a->leaves + o_k);
        bp->leaf_dv = reinterpret_cast<uint64_t *>(a->leaves + o_v);
    }
    if (fold) {
        for (int i = 0; i < 3; i++)
            ret_fold->out[i] = a->digest_out[i];
        ret_fold->scratch = a->leaves + o_fold;
    }
    return 0;
}

/* cuattn_backward for a problem attn_vl.cu runs (c, s resolved by prepare). */
static int backward_vl(struct cuattn *a, const struct attn_problem *p, const struct attn_config *c,
                       const struct sched *s, int32_t grid, struct attn_tensor dq, struct attn_tensor dk,
                       struct attn_tensor dv, struct attn_tensor q, struct attn_tensor k, struct attn_tensor v,
                       struct attn_tensor out, const float *lse, struct attn_tensor dout,
                       struct attn_config *ret_cfg)
{
    const int32_t vb = attn_view_batch(p), vq = attn_view_rows_q(p), vk = attn_view_rows_k(p);
    if (check_view(&q, vb, vq, p->heads_q, p->head_dim, 0) || check_view(&k, vb, vk, p->heads_kv, p->head_dim, 0) ||
        check_view(&v, vb, vk, p->heads_kv, p->head_dim, 0) ||
        check_view(&out, vb, vq, p->heads_q, p->head_dim, 0) ||
        check_view(&dout, vb, vq, p->heads_q, p->head_dim, 0) ||
        check_view(&dq, vb, vq, p->heads_q, p->head_dim, 1) || check_view(&dk, vb, vk, p->heads_kv, p->head_dim, 1) ||
        check_view(&dv, vb, vk, p->heads_kv, p->head_dim, 1))
        return -EINVAL;
    cudaError_t err = cudaSetDevice(a->device);
    if (err != cudaSuccess)
        return err_code(err);
    struct vl_plan pl;
    int rc = vl_plan_make(p, c, 1, &pl);
    if (rc)
        return rc;
    if ((rc = vl_limits(a, p, c, 1, pl.need))) {
        vl_plan_free(&pl);
        return rc;
    }
    /* Grid: persistent only; never more than fit at once, never fewer than a shift chunk
     * needs (vl_limits checked that they fit), never more than jobs. No bits change. */
    const int wg = vl_wg(a, p, s->block_n);
    int32_t per_sm = 0;
    err = cuattn__bwd_vl_blocks_per_sm(p->dtype, p->head_dim, s->block_n, wg, &per_sm);
    if (err != cudaSuccess) {
        vl_plan_free(&pl);
        return err_code(err);
    }
    int64_t g = grid ? grid : a->sms;
    if (g > (int64_t)per_sm * a->sms)
        g = (int64_t)per_sm * a->sms;
    if (g < pl.need)
        g = pl.need;
    if (g > pl.total)
        g = pl.total > 0 ? pl.total : 1;

    const int32_t D = p->head_dim, group = p->heads_q / p->heads_kv, B = p->batch;
    const size_t rows_q = (size_t)p->heads_q * (size_t)pl.rows_q, rows_k = (size_t)p->heads_q * (size_t)pl.rows_k;
    size_t used = 0;
    const size_t o_dq = carve(&used, sizeof(float) * rows_q * (size_t)D);
    const size_t o_dsum = carve(&used, sizeof(float) * rows_q);
    const size_t o_lse = carve(&used, sizeof(float) * rows_q);
    const size_t o_ctr = carve(&used, sizeof(int32_t) * ((size_t)pl.tiles + 1));
    const size_t o_job = carve(&used, sizeof(int32_t));
    const size_t o_tab = carve(&used, sizeof(struct attn_vl_seq) * ((size_t)pl.count + 1));
    const size_t o_cuq = carve(&used, sizeof(int32_t) * ((size_t)B + 1));
    const size_t o_cuk = carve(&used, sizeof(int32_t) * ((size_t)B + 1));
    size_t o_dk = 0, o_dv = 0;
    if (group > 1) {
        o_dk = carve(&used, sizeof(float) * rows_k * (size_t)D);
        o_dv = carve(&used, sizeof(float) * rows_k * (size_t)D);
    }
    if ((rc = scratch_reserve(a, used))) {
        vl_plan_free(&pl);
        return rc;
    }
    unsigned char *base = a->scratch;
    struct attn_bwd_params bp;
    memset(&bp, 0, sizeof bp);
    bwd_tensors(&bp, dq, dk, dv, q, k, v, out, lse, dout);
    bp.dq_acc = reinterpret_cast<float *>(base + o_dq);
    bp.dsum = reinterpret_cast<float *>(base + o_dsum);
    bp.lse_vl = reinterpret_cast<float *>(base + o_lse);
    bp.counter = reinterpret_cast<int32_t *>(base + o_ctr);
    bp.job_next = reinterpret_cast<int32_t *>(base + o_job);
    bp.vl = reinterpret_cast<struct attn_vl_seq *>(base + o_tab);
    bp.cu_q = reinterpret_cast<int32_t *>(base + o_cuq);
    bp.cu_k = reinterpret_cast<int32_t *>(base + o_cuk);
    if (group > 1) {
        bp.dk_acc = reinterpret_cast<float *>(base + o_dk);
        bp.dv_acc = reinterpret_cast<float *>(base + o_dv);
    }
    bp.seqlen_q = p->seqlen_q;
    bp.seqlen_k = p->seqlen_k;
    bp.heads_q = p->heads_q;
    bp.heads_kv = p->heads_kv;
    bp.group = group;
    bp.head_dim = D;
    bp.scale = p->scale;
    bp.s = *s;
    bp.mode = ATTN_MODE_PERSISTENT;
    bp.defer = s->kind == SCHED_SHIFT || (s->kind == SCHED_SPT && s->mask == SCHED_MASK_CAUSAL);
    bp.wg = wg;
    bp.softcap = p->softcap;
    bp.vl_count = pl.count;
    bp.vl_jobs = pl.total;
    bp.total_q = pl.rows_q;
    bp.total_k = pl.rows_k;
    bp.vl_dense = p->cu_seqlens_q == NULL;
    bp.vl_tiles = pl.tiles;
    bp.vl_zero_k = pl.zero_k;
    /* the table and the offsets, carved one after another: one upload */
    const struct upload_part tabs[3] = {{0, pl.seq, sizeof(struct attn_vl_seq) * (size_t)pl.count},
                                        {o_cuq - o_tab, pl.cu_q, sizeof(int32_t) * ((size_t)B + 1)},
                                        {o_cuk - o_tab, pl.cu_k, sizeof(int32_t) * ((size_t)B + 1)}};
    err = upload(a, base + o_tab, tabs, 3);
    vl_plan_free(&pl);
    if (err == cudaSuccess)
        err = cuattn__bwd_vl_launch(&bp, p->dtype, (int32_t)g, a->sms, a->stream);
    if ((rc = finish(a, err)))
        return rc;
    a->last_mode = ATTN_MODE_PERSISTENT;
    a->last_grid = (int32_t)g;
    a->last_wg = wg;
    if (ret_cfg)
        *ret_cfg = *c;
    return 0;
}

int cuattn_backward(struct cuattn *a, const struct attn_problem *p, const struct attn_config *cfg,
                    int32_t grid, struct attn_tensor dq, struct attn_tensor dk, struct attn_tensor dv,
                    struct attn_tensor q, struct attn_tensor k, struct attn_tensor v,
                    struct attn_tensor out, const float *lse, struct attn_tensor dout,
                    struct attn_config *ret_cfg)
{
    if (!a || !lse || ((uintptr_t)lse & 3u) || grid < 0)
        return -EINVAL;
    if (!a->narrow_bwd)
        a->last_narrow &= ~2;
    a->leaf_out[0] = a->leaf_out[1] = a->leaf_out[2] = NULL;
    a->digested = 0;
    if (padded(a, p))
        return backward_padded(a, p, cfg, grid, dq, dk, dv, q, k, v, out, lse, dout, ret_cfg);
    struct attn_config c;
    struct sched s;
    const int32_t impl = p ? cuattn_impl_for(a, p->head_dim) : CUATTN_IMPL_CUDA_CORES;
    const int vl = p && attn_check_problem(p) == 0 && needs_vl(p);
    const int tc = impl != CUATTN_IMPL_CUDA_CORES;
    int rc = prepare(a, p, cfg, bwd_wide(a, p), &c, &s);
    if (rc)
        return rc;
    if (vl)
        return backward_vl(a, p, &c, &s, grid, dq, dk, dv, q, k, v, out, lse, dout, ret_cfg);
    /* v3 has 64 x 128 tiles only: a config asking for block_n 64 runs v2's 64 x 64 kernel;
     * but at head dim 256 v3 has 64 x 64 tiles only (and v2 nothing) */
    const int wg = impl == CUATTN_IMPL_WGMMA && (s.block_n == CUATTN_TC_BLOCK_N || p->head_dim == 256);
    if (!tc && cuattn__bwd_smem_bytes(p->head_dim) > a->smem_optin)
        return -ENOTSUP;
    const int32_t vb = attn_view_batch(p), vq = attn_view_rows_q(p), vk = attn_view_rows_k(p);
    const int32_t cols = a->narrow_bwd ? a->narrow_bwd : p->head_dim; /* the views' width */
    if (check_view(&q, vb, vq, p->heads_q, cols, 0) || check_view(&k, vb, vk, p->heads_kv, cols, 0) ||
        check_view(&v, vb, vk, p->heads_kv, cols, 0) || check_view(&out, vb, vq, p->heads_q, cols, 0) ||
        check_view(&dout, vb, vq, p->heads_q, cols, 0) || check_view(&dq, vb, vq, p->heads_q, cols, 1) ||
        check_view(&dk, vb, vk, p->heads_kv, cols, 1) || check_view(&dv, vb, vk, p->heads_kv, cols, 1))
        return -EINVAL;
    cudaError_t err = cudaSetDevice(a->device);
    if (err != cudaSuccess)
        return err_code(err);

    /* Grid and mode. Every CTA must be resident at once, so never more than fit. */
    int32_t per_sm = 0;
    err = tc ? cuattn__bwd_tc_blocks_per_sm(p->dtype, p->head_dim, s.block_n, wg, &per_sm)
             : cuattn__bwd_blocks_per_sm(p->dtype, p->head_dim, &per_sm);
    if (err != cudaSuccess)
        return err_code(err);
    if (per_sm < 1)
        return -EIO; /* the kernel cannot run on this device at all */
    int64_t g = grid ? grid : a->sms;
    if (g > (int64_t)per_sm * a->sms)
        g = (int64_t)per_sm * a->sms;
    /* shift: jobs of one chunk may wait on each other, so a chunk's jobs must all run at
     * once; the largest chunk has min(W, jobs per head) jobs. Others wait only backwards. */
    const int32_t need = s.kind != SCHED_SHIFT ? 1 : s.chunks > 1 ? s.w : s.jobs_per_head;
    const int mode = (a->force_interleaved || g < need) ? ATTN_MODE_INTERLEAVED : ATTN_MODE_PERSISTENT;
    const int32_t nvsm = s.jobs < c.w ? s.jobs : c.w;
    if (mode == ATTN_MODE_PERSISTENT && g > s.jobs)
        g = s.jobs; /* more CTAs than jobs would only fetch nothing */
    if (mode == ATTN_MODE_INTERLEAVED && g > nvsm)
        g = nvsm;
    if (a->narrow_bwd && (!wg || mode != ATTN_MODE_PERSISTENT || p->heads_q != p->heads_kv))
        return CUATTN_NARROW_REFUSED; /* the widened copies then */

    /* Scratch layout: count, then point. */
    const int32_t D = p->head_dim, group = p->heads_q / p->heads_kv;
    const size_t rows_q = (size_t)s.bh * (size_t)p->seqlen_q;
    const size_t rows_k = (size_t)s.bh * (size_t)p->seqlen_k;
    size_t used = 0;
    const size_t o_dq = carve(&used, sizeof(float) * rows_q * (size_t)D);
    const size_t o_dsum = carve(&used, sizeof(float) * rows_q);
    const size_t o_ctr = carve(&used, sizeof(int32_t) * (size_t)s.bh * (size_t)s.m_tiles);
    const size_t o_job = carve(&used, sizeof(int32_t));
    size_t o_dk = 0, o_dv = 0, o_state = 0, o_data = 0;
    if (group > 1) {
        o_dk = carve(&used, sizeof(float) * rows_k * (size_t)D);
        o_dv = carve(&used, sizeof(float) * rows_k * (size_t)D);
    }
    if (mode == ATTN_MODE_INTERLEAVED) {
        o_state = carve(&used, sizeof(int32_t) * VSM_SLOTS * (size_t)nvsm);
        const size_t floats = tc ? cuattn__bwd_tc_vsm_floats(D, s.block_n) : 3 * (size_t)(D / 4);
        o_data = carve(&used, sizeof(float) * (size_t)nvsm * floats * ATTN_THREADS);
    }
    if ((rc = scratch_reserve(a, used)))
        return rc;
    unsigned char *base = a->scratch;

    struct attn_bwd_params bp;
    memset(&bp, 0, sizeof bp);
    bwd_tensors(&bp, dq, dk, dv, q, k, v, out, lse, dout);
    bp.dq_acc = reinterpret_cast<float *>(base + o_dq);
    bp.dsum = reinterpret_cast<float *>(base + o_dsum);
    bp.counter = reinterpret_cast<int32_t *>(base + o_ctr);
    bp.job_next = reinterpret_cast<int32_t *>(base + o_job);
    if (group > 1) {
        bp.dk_acc = reinterpret_cast<float *>(base + o_dk);
        bp.dv_acc = reinterpret_cast<float *>(base + o_dv);
    }
    if (mode == ATTN_MODE_INTERLEAVED) {
        bp.vsm_state = reinterpret_cast<int32_t *>(base + o_state);
        bp.vsm_data = reinterpret_cast<float *>(base + o_data);
    }
    bp.seqlen_q = p->seqlen_q;
    bp.seqlen_k = p->seqlen_k;
    bp.heads_q = p->heads_q;
    bp.heads_kv = p->heads_kv;
    bp.group = group;
    bp.head_dim = D;
    bp.scale = p->scale;
    bp.s = s;
    bp.mode = mode;
    bp.nvsm = nvsm;
    /* v2: pass dQ tiles on during the next step where the successor is at least a step
     * behind in the schedule's own timing (shift: the next slot; spt, causal: two steps);
     * where units add in lock-step chains (ascending, descending, spt full) it would only
     * lengthen the chain. Measured on an H200 (bench/results/gpu-v2-128-2026-11-29.md). */
    bp.defer = s.kind == SCHED_SHIFT || (s.kind == SCHED_SPT && s.mask == SCHED_MASK_CAUSAL);
    bp.wg = wg;
    struct attn_bwd_fold fold;
    memset(&fold, 0, sizeof fold);
    if (a->leaves_on && (rc = arm_leaves(a, p, &bp, tc, &fold)))
        return rc;
    bp.d_cols = a->narrow_bwd;
    if (a->narrow_bwd && !cuattn__bwd_wg_narrow_ok(&bp, p->head_dim))
        return CUATTN_NARROW_REFUSED;

    rc = finish(a, tc ? cuattn__bwd_tc_launch(&bp, fold.out[0] ? &fold : NULL, p->dtype, (int32_t)g, a->sms,
                                              a->stream)
                      : cuattn__bwd_launch(&bp, p->dtype, (int32_t)g, a->sms, a->stream));
    if (rc)
        return rc;
    a->last_mode = mode;
    a->last_grid = (int32_t)g;
    a->last_wg = wg;
    a->leaf_out[0] = bp.leaf_dq;
    a->leaf_out[1] = bp.leaf_dk;
    a->leaf_out[2] = bp.leaf_dv;
    a->digested = fold.out[0] != NULL;
    if (ret_cfg)
        *ret_cfg = c;
    return 0;
}

int cuattn_set_leaves(struct cuattn *a, int on)
{
    if (!a)
        return -EINVAL;
    a->leaves_on = on != 0;
    return 0;
}

int cuattn_set_digests(struct cuattn *a, uint64_t *const out[3])
{
    if (!a || (out && (!out[0] || !out[1] || !out[2])))
        return -EINVAL;
    for (int i = 0; i < 3; i++)
        a->digest_out[i] = out ? out[i] : NULL;
    return 0;
}

int cuattn_digested(const struct cuattn *a)
{
    return a && a->digested;
}

const uint64_t *cuattn_leaves(const struct cuattn *a, int which)
{
    return a && which >= 0 && which < 3 ? a->leaf_out[which] : NULL;
}
