// SPDX-License-Identifier: BSD-3-Clause
/*
 * backend_cuda.c - the CUDA kernels (kernels/cuda/attn_cuda.h) as a dashd backend, and the
 * daemon's table of CUDA IPC mappings.
 *
 * One struct cuattn, made at start (kernels loaded, scratch grown on first use): the
 * worker thread calls forward and backward on it one at a time, which is also the
 * "one backward per device at a time" attn_cuda.h asks for. Tensors arrive as device
 * pointers into the clients' allocations (job.c), so nothing is copied.
 *
 * Mappings. A client registers a view of one of its cudaMalloc allocations: the
 * allocation's IPC handle, the GPU's UUID, where the view starts in the allocation
 * (alloc_offset) and its size. Each distinct handle is opened ONCE per daemon, however
 * many registrations (of any session) name it: a handle may be opened only once per
 * context and process, and an open costs about a millisecond. The table counts the
 * registrations (shmbufs) using a mapping; the last one's release closes it. A buffer's
 * own refcount (shmbuf.h) already waits for the requests in flight that use it, so a
 * mapping is never closed under a running kernel. Keyed by the handle's bytes, never by
 * address: an allocation freed and made again at the same address has a new handle.
 *
 *   session A buf 3 --\
 *   session A buf 7 ---+--> map {handle H, base, bytes, refs 3} --cudaIpcCloseMemHandle
 *   session B buf 9 --/          (opened by the first, closed by the last)
 *
 * Bounds: after opening, cuMemGetAddressRange gives the extent of the allocation the
 * mapping covers, and [alloc_offset, alloc_offset + size) must lie inside it; every
 * tensor is then checked against size by validate.c. Driver functions come through
 * cudaGetDriverEntryPointByVersion, so dashd never links libcuda (it runs, falling back
 * or failing cleanly, on machines without a driver).
 *
 * Ops on device memory are asynchronous: the worker queues the kernels on cuattn's one
 * stream (between the client's wait event and record event, when named) and goes on to
 * the next request, so the GPU runs back-to-back ops without a host round trip between
 * them. One stream keeps them in arrival order and one backward at a time on the device.
 * Completion: behind each op the worker records a pooled event; the completer thread
 * waits for them in order (cudaEventSynchronize, blocking-sync events, so it sleeps) and
 * calls the op's done(), which hands the job back to the loop (replies, releases its
 * buffers). A device fault after queueing reaches done() as DASH_EIO. Ops on shared
 * memory stay synchronous: their outputs are copied back to the host before the reply.
 *
 * Interprocess events: each registered handle is opened once (cudaIpcOpenEventHandle);
 * they belong to the session's list (evring.h), and are destroyed when it goes, which
 * never disturbs a wait or record already queued.
 *
 * Threads: the table, opens and closes are on the loop thread (RegisterBuffer, and the
 * last unref in job_done or a session drop); backend_cuda_new made the daemon's device
 * current there. Kernels run on the worker thread (cuattn sets the device itself); the
 * completer thread only waits on events.
 *
 * The ops queued on the device (struct pending: the completer thread, the semaphores and
 * the rescuer thread) are backend_cuda_pending.c's; backend_cuda_int.h holds what the
 * two files share.
 */
#include "backend_cuda_int.h"

#include "log.h"

#include "kernels/cuda/attn_cuda.h"
#include "kernels/cuda/attn_cuda_test.h" /* cuattn__fault, for DASHD_TEST_DEVICE_FAULT only */
#include "kernels/digest/digest_cuda.h"
#include "proto/errors.h"
#include "proto/wire.h"

#include <cuda.h> /* types only (CUresult, CUdeviceptr): nothing here links libcuda */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


_Static_assert(CUATTN_IMPL_CUDA_CORES == 1 && CUATTN_IMPL_TENSOR_CORES == 2 &&
                   CUATTN_IMPL_WGMMA == 3,
               "dashd --kernels vN is the CUATTN_IMPL of value N");
_Static_assert(sizeof(cudaIpcMemHandle_t) == BACKEND_IPC_HANDLE_BYTES,
               "the wire's handle size is cudaIpcMemHandle_t's");

/* One opened IPC handle. */
struct cuda_map {
    struct cuda_map *next;
    struct cuda *owner;
    unsigned char handle[BACKEND_IPC_HANDLE_BYTES];
    unsigned char *base; /* device pointer: the start of the mapped allocation */
    uint64_t bytes;      /* the allocation's size, from cuMemGetAddressRange */
    uint32_t refs;       /* registrations (shmbufs) using it */
};

/* Why the CUDA runtime cannot be used, in words. */
static void describe_init_error(cudaError_t err, char *buf, size_t len)
{
    switch (err) {
    case cudaErrorInsufficientDriver:
        snprintf(buf, len,
                 "no usable NVIDIA driver (libcuda.so.1 is missing, or older than the CUDA %d.%d "
                 "runtime this dashd was built with)",
                 CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        break;
    case cudaErrorNoDevice:
        snprintf(buf, len, "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and /dev/nvidia*)");
        break;
    default:
        snprintf(buf, len, "the CUDA runtime failed: %s (%s)", cudaGetErrorString(err),
                 cudaGetErrorName(err));
        break;
    }
}

static int check_uuid(const struct cuda *c, const char *uuid, const char *what, char *msg,
                      size_t msglen)
{
    if (!uuid) {
        snprintf(msg, msglen, "%s needs device_uuid (the GPU it belongs to)", what);
        return DASH_EINVAL;
    }
    /* The client's string is not echoed: messages end up in the log. */
    if (strcasecmp(uuid, c->uuid) != 0) {
        snprintf(msg, msglen, "the %s belongs to another GPU: this dashd serves CUDA device "
                 "%d (%s)", what, c->device, c->uuid);
        return DASH_ENOTSUP;
    }
    return 0;
}

/* ---- mappings -------------------------------------------------------------------------- */

static void map_release(void *ctx)
{
    struct cuda_map *m = ctx;
    if (--m->refs > 0)
        return;
    struct cuda *c = m->owner;
    struct cuda_map **pp = &c->maps;
    while (*pp != m)
        pp = &(*pp)->next;
    *pp = m->next;
    /* Nothing can be reported from here; a failed close leaks a mapping, not memory of
     * ours, and the next open of the same handle would say so. */
    if (cudaIpcCloseMemHandle(m->base) != cudaSuccess)
        (void)cudaGetLastError();
    free(m);
}

/* The allocation around ptr: cuMemGetAddressRange, or the pointer's range attributes if
 * that refuses an imported mapping. */
static CUresult alloc_range(const struct cuda *c, void *ptr, CUdeviceptr *ret_base,
                            size_t *ret_bytes)
{
    const CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
    CUresult cr = c->mem_range(ret_base, ret_bytes, p);
    if (cr == CUDA_SUCCESS || !c->pointer_attr)
        return cr;
    CUdeviceptr start = 0;
    size_t bytes = 0;
    if (c->pointer_attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) != CUDA_SUCCESS ||
        c->pointer_attr(&bytes, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) != CUDA_SUCCESS)
        return cr;
    *ret_base = start;
    *ret_bytes = bytes;
    return CUDA_SUCCESS;
}

/* Open the handle (or find it open) and take one reference. */
static int map_get(struct cuda *c, const unsigned char *handle, char *msg, size_t msglen,
                   struct cuda_map **ret_map)
{
    for (struct cuda_map *m = c->maps; m; m = m->next) {
        if (memcmp(m->handle, handle, BACKEND_IPC_HANDLE_BYTES) == 0) {
            m->refs++;
            *ret_map = m;
            return 0;
        }
    }
    struct cuda_map *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(msg, msglen, "out of memory");
        return DASH_ENOMEM;
    }
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    void *ptr = NULL;
    cudaError_t err = cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for the next call on this thread */
        free(m);
        snprintf(msg, msglen,
                 "cannot open the CUDA IPC handle: %s (is it from this GPU, of a live process "
                 "other than dashd? PyTorch expandable segments cannot be shared)",
                 cudaGetErrorString(err));
        return err == cudaErrorMemoryAllocation ? DASH_ENOMEM : DASH_EINVAL;
    }
    CUdeviceptr base = 0;
    size_t bytes = 0;
    CUresult cr = alloc_range(c, ptr, &base, &bytes);
    if (cr != CUDA_SUCCESS || (uintptr_t)base > (uintptr_t)ptr ||
        (uintptr_t)ptr - (uintptr_t)base >= bytes) {
        (void)cudaIpcCloseMemHandle(ptr);
        (void)cudaGetLastError();
        free(m);
        snprintf(msg, msglen, "cannot find the extent of the mapped allocation (driver error %d)",
                 (int)cr);
        return DASH_EIO;
    }
    memcpy(m->handle, handle, BACKEND_IPC_HANDLE_BYTES);
    m->owner = c;
    m->base = ptr;
    m->bytes = (uint64_t)(bytes - ((uintptr_t)ptr - (uintptr_t)base));
    m->refs = 1;
    m->next = c->maps;
    c->maps = m;
    *ret_map = m;
    return 0;
}

static int cuda_import(void *impl, const struct backend_cuda_buffer *req, char *msg,
                       size_t msglen, struct shmbuf **ret_buf)
{
    struct cuda *c = impl;
    if (req->handle_len != BACKEND_IPC_HANDLE_BYTES) {
        snprintf(msg, msglen, "cuda_ipc_handle has %zu bytes; a cudaIpcMemHandle_t has %d",
                 req->handle_len, BACKEND_IPC_HANDLE_BYTES);
        return DASH_EINVAL;
    }
    int rc = check_uuid(c, req->device_uuid, "cuda_ipc_handle", msg, msglen);
    if (rc)
        return rc;
    if (req->size == 0) {
        snprintf(msg, msglen, "size 0 is not a usable buffer size");
        return DASH_EINVAL;
    }
    uint64_t end;
    if (__builtin_add_overflow(req->alloc_offset, req->size, &end)) {
        snprintf(msg, msglen, "alloc_offset %llu + size %llu overflows",
                 (unsigned long long)req->alloc_offset, (unsigned long long)req->size);
        return DASH_EBOUNDS;
    }
    struct cuda_map *m;
    rc = map_get(c, req->handle, msg, msglen, &m);
    if (rc)
        return rc;
    if (end > m->bytes) {
        snprintf(msg, msglen, "the buffer [%llu, %llu) reaches past the end of the %llu-byte "
                 "allocation the handle maps", (unsigned long long)req->alloc_offset,
                 (unsigned long long)end, (unsigned long long)m->bytes);
        map_release(m);
        return DASH_EBOUNDS;
    }
    rc = shmbuf_wrap(SHMBUF_CUDA, m->base + req->alloc_offset, req->size, map_release, m, ret_buf);
    if (rc) {
        snprintf(msg, msglen, "out of memory");
        map_release(m);
    }
    return rc;
}

/* ---- device errors --------------------------------------------------------------------- */

/* Whether err leaves this process's CUDA context unusable: the errors that cuda_runtime's
 * driver_types.h says corrupt the context ("the process must be terminated and relaunched",
 * "inconsistent state"), and an uncorrectable ECC or NVLink error, after which the GPU needs
 * a reset.
 * Every later call of the process fails with them. */
static int cuda_error_loses_device(cudaError_t err)
{
    switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorContained:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
        return 1;
    default:
        return 0;
    }
}

/* An op failed with err (where: what was being done; cudaSuccess: it did not): if that lost
 * the device, say so in base.lost (the first reason wins), for the loop to stop dashd
 * (backend.h). Returns what the op's error message adds: "" or why dashd restarts. Any
 * thread. */
const char *backend_cuda__note_device_error(struct cuda *c, cudaError_t err, const char *where)
{
    static const char lost[] = "; the GPU context is lost: dashd restarts";
    if (!cuda_error_loses_device(err))
        return "";
    int none = 0;
    if (!atomic_compare_exchange_strong(&c->base.lost, &none, 1))
        return lost;
    snprintf(c->base.lost_why, sizeof c->base.lost_why, "%s: %s (%s)", where,
             cudaGetErrorString(err), cudaGetErrorName(err));
    atomic_store(&c->base.lost, 2);
    return lost;
}

/* ---- digests --------------------------------------------------------------------------- */

/* Queue the digests of views v[0..n) into out[0..n) (pinned) on the stream, growing the
 * scratch when needed. 0, or DASH_ENOMEM / DASH_EINVAL / DASH_EIO with a reason. */
static int queue_digests(struct cuda *c, const struct digest_view *v, int32_t n, uint64_t *out,
                         char *msg, size_t msglen)
{
    if (n == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)cuattn_stream(c->ca);
    size_t need = digest_cuda_scratch_bytes(v, n);
    if (!need) {
        snprintf(msg, msglen, "audit: a tensor cannot be digested");
        return DASH_EINVAL;
    }
    if (need > c->dig_cap) {
        /* queued digests may still use the old scratch */
        if (cudaStreamSynchronize(st) != cudaSuccess || cudaFree(c->dig_scratch) != cudaSuccess) {
            snprintf(msg, msglen, "audit: the device failed: %s",
                     cudaGetErrorString(cudaGetLastError()));
            return DASH_EIO;
        }
        c->dig_scratch = NULL;
        c->dig_cap = 0;
        if (cudaMalloc(&c->dig_scratch, need) != cudaSuccess) {
            (void)cudaGetLastError();
            snprintf(msg, msglen, "audit: no device memory for %zu bytes of digest scratch", need);
            return DASH_ENOMEM;
        }
        c->dig_cap = need;
    }
    if (digest_cuda(v, n, c->dig_scratch, c->dig_cap, out, st) != 0) {
        snprintf(msg, msglen, "audit: the digest kernels did not launch");
        return DASH_EIO;
    }
    return 0;
}

/* ---- interprocess events --------------------------------------------------------------- */

static int cuda_events_open(void *impl, const unsigned char *const *handles, const size_t *lens,
                            size_t n, const char *device_uuid, void **ret_ev, char *msg,
                            size_t msglen)
{
    struct cuda *c = impl;
    int rc = check_uuid(c, device_uuid, "event handle", msg, msglen);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] != sizeof(cudaIpcEventHandle_t)) {
            snprintf(msg, msglen, "event handle %zu has %zu bytes; a cudaIpcEventHandle_t has %zu",
                     i, lens[i], sizeof(cudaIpcEventHandle_t));
            return DASH_EINVAL;
        }
    }
    for (size_t i = 0; i < n; i++) {
        cudaIpcEventHandle_t h;
        memcpy(&h, handles[i], sizeof h);
        cudaEvent_t ev = NULL;
        cudaError_t err = cudaIpcOpenEventHandle(&ev, h);
        if (err != cudaSuccess) {
            (void)cudaGetLastError(); /* not sticky */
            while (i-- > 0)
                (void)cudaEventDestroy((cudaEvent_t)ret_ev[i]);
            snprintf(msg, msglen, "cannot open event handle: %s (made with cudaEventInterprocess | "
                     "cudaEventDisableTiming, on this GPU, by a live process other than dashd?)",
                     cudaGetErrorString(err));
            return DASH_EINVAL;
        }
        ret_ev[i] = ev;
    }
    return 0;
}

static void cuda_event_close(void *impl, void *ev)
{
    (void)impl;
    if (cudaEventDestroy((cudaEvent_t)ev) != cudaSuccess)
        (void)cudaGetLastError();
}

/* ---- ops ------------------------------------------------------------------------------- */

static int32_t cuda_threads(void *impl)
{
    const struct cuda *c = impl;
    return c->sms;
}

/* A kernel code as a protocol code, with a reason. */
static int map_kernel_error(int rc, const struct attn_problem *p, char *msg, size_t msglen)
{
    switch (rc) {
    case -ENOMEM:
        snprintf(msg, msglen, "the GPU ran out of memory for the kernels' scratch");
        return DASH_ENOMEM;
    case -EOVERFLOW:
        snprintf(msg, msglen, "the shape is too large for the CUDA kernels' 32-bit indices");
        return DASH_ESHAPE;
    case -ERANGE:
        snprintf(msg, msglen, "the shift schedule's wave W is more than this GPU runs at once in "
                 "the backward for sliding windows, softcap and packed batches (it has no "
                 "interleaved mode): choose a smaller w");
        return DASH_ESCHED;
    case -ENOTSUP:
        if (!cuattn_serves_head_dim(p->head_dim)) {
            snprintf(msg, msglen, "the CUDA kernels serve head dims that are multiples of 8 from 32 "
                     "to 256 (64, 128 and 256 as they are, the others widened to the next of those), "
                     "not %d; a dashd with --backend cpu serves the others from 32", p->head_dim);
            return DASH_EHEADDIM;
        }
        if (p->dtype == DTYPE_F16 || p->dtype == DTYPE_BF16) {
            snprintf(msg, msglen, "this GPU has too little shared memory per block for the "
                     "CUDA kernels at head dim %d (or the width it is widened to)", p->head_dim);
            return DASH_EHEADDIM;
        }
        snprintf(msg, msglen, "the CUDA kernels serve fp16 and bf16 only");
        return DASH_EBADDTYPE;
    case -EINVAL:
        snprintf(msg, msglen, "the CUDA kernels refused the tensors (16-bit tensors must start "
                 "at an even address, lse at a multiple of 4 bytes)");
        return DASH_EINVAL;
    case -ENODEV:
        snprintf(msg, msglen, "the GPU is not usable any more");
        return DASH_ENOGPU;
    default:
        snprintf(msg, msglen, "CUDA failed while running the kernels (%s); dashd may need a "
                 "restart", dash_strerror(rc));
        return DASH_EIO;
    }
}

static int cuda_check(void *impl, const struct val_plan *plan, char *msg, size_t msglen)
{
    const struct cuda *c = impl;
    const struct attn_problem *p = &plan->prob;
    const int ext = plan->varlen || p->window || p->softcap != 0;
    /* attn_vl.cu's kernels run widths 64 and 128: a served head dim up to 128 (widened to
     * the next of those) */
    if (ext && (p->dtype == DTYPE_F16 || p->dtype == DTYPE_BF16) && cuattn_serves_head_dim(p->head_dim) &&
        p->head_dim > CUATTN_VL_HEAD_DIM_MAX) {
        snprintf(msg, msglen, "the CUDA kernels serve %s at head dims that are multiples of 8 "
                 "from %d to %d (64 and 128, the others widened to those) only, not %d; a dashd "
                 "with --backend cpu serves the others",
                 plan->varlen ? "packed variable-length batches" : p->window ? "sliding windows"
                 : "softcap", CUATTN_HEAD_DIM_MIN, CUATTN_VL_HEAD_DIM_MAX, p->head_dim);
        return DASH_EHEADDIM;
    }
    if (p->dtype != DTYPE_F16 && p->dtype != DTYPE_BF16)
        return map_kernel_error(-ENOTSUP, p, msg, msglen);
    if (!cuattn_serves_head_dim(p->head_dim))
        return map_kernel_error(-ENOTSUP, p, msg, msglen);
    /* the kernels' own checks, by their own code (attn_cuda.cu's prepare) */
    int rc = cuattn_check_config(c->ca, p, &plan->cfg, plan->backward);
    if (rc != -EINVAL)
        return rc ? map_kernel_error(rc, p, msg, msglen) : 0;
    if (attn_check_problem(p) != 0) {
        snprintf(msg, msglen, "the CUDA kernels refused the problem's shapes");
        return DASH_ESHAPE;
    }
    /* Tiles (attn_cuda.h): 64 q rows; kv rows 64, or 128 where the backward's kernels have
     * them (their default), so the block_n an OpResult reported can always be sent back. */
    const int wide = plan->backward && cuattn_bwd_block_n(c->ca, p) == CUATTN_TC_BLOCK_N;
    if ((plan->cfg.block_m && plan->cfg.block_m != CUATTN_BLOCK) ||
        (plan->cfg.block_n && plan->cfg.block_n != CUATTN_BLOCK &&
         !(wide && plan->cfg.block_n == CUATTN_TC_BLOCK_N))) {
        if (wide)
            snprintf(msg, msglen, "the CUDA backward uses %d-row q-tiles and %d- or %d-row "
                     "kv-tiles: block_m must be 0 or %d, block_n 0, %d or %d", CUATTN_BLOCK,
                     CUATTN_BLOCK, CUATTN_TC_BLOCK_N, CUATTN_BLOCK, CUATTN_BLOCK, CUATTN_TC_BLOCK_N);
        else
            snprintf(msg, msglen, "the CUDA kernels use %dx%d tiles here: block_m and block_n "
                     "must be 0 or %d", CUATTN_BLOCK, CUATTN_BLOCK, CUATTN_BLOCK);
        return DASH_ESCHED;
    }
    snprintf(msg, msglen, "the schedule refuses wave %d with these tiles",
             plan->cfg.w ? plan->cfg.w : SCHED_W_DEFAULT);
    return DASH_ESCHED;
}

/* ---- shared memory, staged through the device ------------------------------------------ */

/* The tensors of an op in order: q k v out lse (forward), then dout dq dk dv (backward).
 * job.c hands shared-memory ops over as dense host copies, so each is one contiguous
 * block; `out` says whether it is read back after the kernel. */
struct stage_slot {
    void *host;
    size_t bytes;
    int out;
    void *dev;
};

static int stage_slots(const struct backend_op *op, int backward, struct stage_slot s[9])
{
    const struct attn_problem *p = op->prob;
    size_t es = (size_t)dtype_size(p->dtype);
    /* a packed batch: (1, total, heads, head_dim) tensors, lse (1, heads_q, total_q) */
    const size_t vb = (size_t)attn_view_batch(p), rq = (size_t)attn_view_rows_q(p),
                 rk = (size_t)attn_view_rows_k(p);
    size_t qb = es * vb * rq * p->heads_q * p->head_dim;
    size_t kb = es * vb * rk * p->heads_kv * p->head_dim;
    size_t lb = sizeof(float) * vb * p->heads_q * rq;
    struct stage_slot all[9] = {
        {op->q.data, qb, 0, NULL},   {op->k.data, kb, 0, NULL},   {op->v.data, kb, 0, NULL},
        {op->out.data, qb, !backward, NULL}, {op->lse, lb, !backward, NULL},
        {op->dout.data, qb, 0, NULL}, {op->dq.data, qb, 1, NULL}, {op->dk.data, kb, 1, NULL},
        {op->dv.data, kb, 1, NULL}};
    int n = backward ? 9 : 5;
    memcpy(s, all, sizeof all[0] * (size_t)n);
    return n;
}

/* Copy the op's inputs to device scratch, run it there, copy the outputs back. */
static int run_staged(struct cuda *c, const struct backend_op *op, int backward, char *msg,
                      size_t msglen, struct attn_config *ret_cfg)
{
    struct stage_slot s[9];
    int n = stage_slots(op, backward, s);
    size_t need = 0;
    for (int i = 0; i < n; i++)
        need += (s[i].bytes + 255) & ~(size_t)255;
    if (need > c->stage_cap) {
        cudaFree(c->stage);
        c->stage = NULL;
        c->stage_cap = 0;
        if (cudaMalloc(&c->stage, need) != cudaSuccess) {
            (void)cudaGetLastError();
            snprintf(msg, msglen, "cannot allocate %zu bytes of device memory to stage the "
                     "shared-memory tensors", need);
            return DASH_ENOMEM;
        }
        c->stage_cap = need;
    }
    /* Copies go on the kernels' stream, so they queue behind the device ops before. */
    cudaStream_t st = (cudaStream_t)cuattn_stream(c->ca);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        s[i].dev = (char *)c->stage + at;
        at += (s[i].bytes + 255) & ~(size_t)255;
        if (!s[i].out &&
            cudaMemcpyAsync(s[i].dev, s[i].host, s[i].bytes, cudaMemcpyHostToDevice, st) != cudaSuccess) {
            const cudaError_t err = cudaGetLastError();
            snprintf(msg, msglen, "copying an input to the device failed: %s%s", cudaGetErrorString(err),
                     backend_cuda__note_device_error(c, err, "an op on shared memory"));
            (void)backend_cuda__note_device_error(c, cudaStreamSynchronize(st),
                                                  "an op on shared memory");
            return DASH_EIO;
        }
    }
    const struct attn_problem *p = op->prob;
    /* device views of slots 0..8: q k v out lse dout dq dk dv */
    struct attn_tensor t[9];
    for (int i = 0; i < n; i++) {
        int kv = i == 1 || i == 2 || i == 7 || i == 8;
        t[i] = attn_dense(s[i].dev, kv ? attn_view_rows_k(p) : attn_view_rows_q(p),
                         kv ? p->heads_kv : p->heads_q, p->head_dim);
    }
    int rc;
    if (!backward)
        rc = cuattn_forward(c->ca, p, op->cfg, t[3], s[4].dev, t[0], t[1], t[2], ret_cfg);
    else
        rc = cuattn_backward(c->ca, p, op->cfg, 0, t[6], t[7], t[8], t[0], t[1], t[2], t[3],
                             s[4].dev, t[5], ret_cfg);
    if (rc) {
        /* the host buffers must not be in use on return */
        (void)backend_cuda__note_device_error(c, cudaStreamSynchronize(st),
                                              "an op on shared memory");
        return map_kernel_error(rc, p, msg, msglen);
    }
    for (int i = 0; i < n; i++)
        if (s[i].out &&
            cudaMemcpyAsync(s[i].host, s[i].dev, s[i].bytes, cudaMemcpyDeviceToHost, st) != cudaSuccess) {
            /* a kernel of this op that faulted already fails the copy's call: noted here, or
             * the context would be lost without dashd knowing it (every later staged op
             * failing at its first copy, above, for good) */
            const cudaError_t err = cudaGetLastError();
            snprintf(msg, msglen, "copying an output from the device failed: %s%s", cudaGetErrorString(err),
                     backend_cuda__note_device_error(c, err, "an op on shared memory"));
            (void)backend_cuda__note_device_error(c, cudaStreamSynchronize(st),
                                                  "an op on shared memory");
            return DASH_EIO;
        }
    cudaError_t err = cudaStreamSynchronize(st);
    if (err != cudaSuccess) {
        snprintf(msg, msglen, "the staged op failed on the device: %s%s", cudaGetErrorString(err),
                 backend_cuda__note_device_error(c, err, "an op on shared memory"));
        return DASH_EIO;
    }
    return 0;
}

/* Which output of the backward (0 dq, 1 dk, 2 dv) output view v is whole - (batch,
 * seqlen, heads, head_dim) from its first element, so that the kernels' leaves (rows in
 * that order) and digests are its own - or -1. */
static int whole_output(const struct backend_op *op, const struct digest_view *v)
{
    const struct attn_problem *p = op->prob;
    const void *base[3] = {op->dq.data, op->dk.data, op->dv.data};
    for (int i = 0; i < 3; i++) {
        if (v->base != base[i])
            continue;
        const int64_t want[4] = {p->batch, i ? p->seqlen_k : p->seqlen_q, i ? p->heads_kv : p->heads_q,
                                 p->head_dim};
        if (v->ndim == 4 && v->elem == 2 && v->shape[0] == want[0] && v->shape[1] == want[1] &&
            v->shape[2] == want[2] && v->shape[3] == want[3])
            return i;
    }
    return -1;
}

/* The leaves the last backward's kernels hashed for output view v (cuattn_leaves), or NULL. */
static const uint64_t *fused_leaves(struct cuda *c, const struct backend_op *op, const struct digest_view *v)
{
    const int i = whole_output(op, v);
    return i < 0 ? NULL : cuattn_leaves(c->ca, i);
}

/* Where a backward's kernels may put its outputs' digests themselves (cuattn_set_digests):
 * when the op digests exactly its three outputs, each whole, out[i] is the pinned slot of
 * output i's digest; else 0 (the digests are queued after the kernels). */
static int folded_slots(const struct backend_op *op, int32_t n_in, uint64_t *pinned, uint64_t *out[3])
{
    out[0] = out[1] = out[2] = NULL;
    if (op->n_digests - n_in != 3)
        return 0;
    for (int32_t j = n_in; j < op->n_digests; j++) {
        const int i = whole_output(op, &op->digest_views[j]);
        if (i < 0 || out[i])
            return 0;
        out[i] = pinned + j;
    }
    return 1;
}

/* A device op: wait for the client's event, digest the inputs (audit "all"), queue the
 * kernels, digest the outputs (audit), record the client's event, then track the
 * completion (BACKEND_QUEUED) or wait for it here. Inputs come first in op->digest_views
 * (slot order), so the two digest calls fill one array. */
static int run_device(struct cuda *c, const struct backend_op *op, int backward, char *msg,
                      size_t msglen, struct attn_config *ret_cfg)
{
    cudaStream_t st = (cudaStream_t)cuattn_stream(c->ca);
    struct pending *p = backend_cuda__pending_get(c);
    if (!p) {
        snprintf(msg, msglen, "out of memory (host or pinned) for tracking the op");
        return DASH_ENOMEM;
    }
    p->ready = op->signal_ready;
    p->seq = op->signal_seq;
    p->pid = op->peer_pid;
    p->rescued = 0;
    /* From the wait below on, the worker may wait for the stream (growing the kernels' or
     * the digests' scratch synchronizes it; so does a failure): a client that dies before
     * its stream writes the ready word would hold the worker, and every client, for ever. */
    p->queued_ns = backend_cuda__mono_ns();
    /* where a signal-ordered op's launch goes (debug only): after the wait, the kernels,
     * the digests and event, the done signal, the tracking */
    const int trace = op->signal_ready && log_enabled(LOG_DEBUG);
    uint64_t mark[6] = {p->queued_ns, 0, 0, 0, 0, 0};
#define MARK(i) (void)(trace && (mark[i] = backend_cuda__mono_ns()))
    if (op->signal_ready)
        backend_cuda__set_queuing(c, p);
    int32_t n_in = 0;
    while (n_in < op->n_digests && !op->digest_is_output[n_in])
        n_in++;
    int rc = 0;
    /* Neither waits on the host: the device holds the op until the client's stream has
     * written its inputs (an interprocess event's wait would block this thread). */
    if (op->signal_ready &&
        c->wait_value((CUstream)st, (CUdeviceptr)(uintptr_t)op->signal_ready, op->signal_seq,
                      CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) {
        snprintf(msg, msglen, "cannot wait for the client's ready signal");
        rc = DASH_EIO;
        goto fail;
    }
    MARK(1);
    if (op->wait_event && cudaStreamWaitEvent(st, (cudaEvent_t)op->wait_event, 0) != cudaSuccess) {
        snprintf(msg, msglen, "cannot wait for the client's event: %s",
                 cudaGetErrorString(cudaGetLastError()));
        rc = DASH_EIO;
        goto fail;
    }
    if ((rc = queue_digests(c, op->digest_views, n_in, p->pinned, msg, msglen)) != 0)
        goto fail;
    /* the outputs' digests from the leaves the backward's kernels hash as they write, or
     * made by those kernels outright where they can (into this op's pinned slots: the
     * address is cleared again as soon as the kernels are queued) */
    (void)cuattn_set_leaves(c->ca, backward && op->n_digests > n_in);
    uint64_t *folded[3];
    const int fold = backward && folded_slots(op, n_in, p->pinned, folded);
    (void)cuattn_set_digests(c->ca, fold ? folded : NULL);
    if (c->fault_at && ++c->device_ops == c->fault_at)
        (void)cuattn__fault(c->ca);
    /* grid 0: the SM count (capped to what is resident at once); it never changes bits */
    rc = backward ? cuattn_backward(c->ca, op->prob, op->cfg, 0, op->dq, op->dk, op->dv, op->q,
                                    op->k, op->v, op->out, op->lse, op->dout, ret_cfg)
                  : cuattn_forward(c->ca, op->prob, op->cfg, op->out, op->lse, op->q, op->k,
                                   op->v, ret_cfg);
    (void)cuattn_set_digests(c->ca, NULL);
    if (rc) {
        rc = map_kernel_error(rc, op->prob, msg, msglen);
        goto fail;
    }
    MARK(2);
    /* Before the record: once the client's stream passes the record it may overwrite the
     * outputs (an optimizer step, the next layer), so they must be read by then. */
    struct digest_view outs[9];
    for (int32_t i = n_in; i < op->n_digests; i++) {
        outs[i - n_in] = op->digest_views[i];
        if (backward)
            outs[i - n_in].leaves = fused_leaves(c, op, &op->digest_views[i]);
    }
    if (!(fold && cuattn_digested(c->ca)) &&
        (rc = queue_digests(c, outs, op->n_digests - n_in, p->pinned + n_in, msg, msglen)) != 0)
        goto fail;
    if (op->record_event && cudaEventRecord((cudaEvent_t)op->record_event, st) != cudaSuccess) {
        snprintf(msg, msglen, "cannot record the client's event: %s",
                 cudaGetErrorString(cudaGetLastError()));
        rc = DASH_EIO;
        goto fail;
    }
    MARK(3);
    if (op->signal_done &&
        backend_cuda__signal_write(c, st, op->signal_done, op->signal_seq) != 0) {
        snprintf(msg, msglen, "cannot write the client's done signal");
        rc = DASH_EIO;
        goto fail;
    }
    MARK(4);
    p->dst = op->n_digests ? op->digests : NULL;
    p->n_digests = op->n_digests;
    if (op->done && backend_cuda__track(c, p, op->done, op->done_ctx) == 0) {
        MARK(5);
        if (trace) /* p may be done already: marks only */
            log_debug("signal-ordered %s launch, us: ready wait %llu, kernels %llu, digests and "
                      "event %llu, done signal %llu, tracking %llu", backward ? "backward" : "forward",
                      (unsigned long long)(mark[1] - mark[0]) / 1000,
                      (unsigned long long)(mark[2] - mark[1]) / 1000,
                      (unsigned long long)(mark[3] - mark[2]) / 1000,
                      (unsigned long long)(mark[4] - mark[3]) / 1000,
                      (unsigned long long)(mark[5] - mark[4]) / 1000);
        return BACKEND_QUEUED;
    }
    cudaError_t err = cudaStreamSynchronize(st);
    if (err != cudaSuccess) {
        snprintf(msg, msglen, "CUDA failed while running the kernels (%s)%s", cudaGetErrorString(err),
                 backend_cuda__note_device_error(c, err, "an op on device memory"));
        rc = DASH_EIO;
        goto fail;
    }
    backend_cuda__set_queuing(c, NULL);
    if (op->n_digests)
        memcpy(op->digests, p->pinned, sizeof(uint64_t) * (size_t)op->n_digests);
    backend_cuda__pending_put(c, p);
    return 0;
fail:
    /* Whatever was queued (the wait, digests) must not outlive the reply: drain it. */
    (void)backend_cuda__note_device_error(c, cudaStreamSynchronize(st), "an op on device memory");
    backend_cuda__set_queuing(c, NULL);
    backend_cuda__pending_put(c, p);
    /* The client's stream waits for the done signal whatever happened to the op: the
     * fail word, after which the client poisons the outputs and writes the done word (the
     * stream was drained above: none of the op's kernels can write them after that). */
    uint64_t *word = op->signal_fail ? op->signal_fail : op->signal_done;
    if (word && backend_cuda__signal_write(c, st, word, op->signal_seq) == 0)
        (void)cudaStreamSynchronize(st);
    return rc;
}

#undef MARK

static int cuda_forward(void *impl, const struct backend_op *op, char *msg, size_t msglen,
                        struct attn_config *ret_cfg)
{
    struct cuda *c = impl;
    if (op->host)
        return run_staged(c, op, 0, msg, msglen, ret_cfg);
    return run_device(c, op, 0, msg, msglen, ret_cfg);
}

static int cuda_backward(void *impl, const struct backend_op *op, char *msg, size_t msglen,
                         struct attn_config *ret_cfg)
{
    struct cuda *c = impl;
    if (op->host)
        return run_staged(c, op, 1, msg, msglen, ret_cfg);
    return run_device(c, op, 1, msg, msglen, ret_cfg);
}

static void cuda_free(void *impl)
{
    struct cuda *c = impl;
    if (c->completer_started) {
        /* Everything queued completes first (the loop waited for its jobs already). */
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_signal(&c->cv);
        pthread_cond_signal(&c->rescue_cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->completer, NULL); /* the rescuer ends once the list is empty */
        if (c->rescuer_started)
            pthread_join(c->rescuer, NULL);
    }
    while (c->free_list) {
        struct pending *p = c->free_list;
        c->free_list = p->next;
        backend_cuda__pending_destroy(p);
    }
    (void)cudaFree(c->dig_scratch);
    if (c->release_stream) {
        (void)cudaStreamSynchronize(c->release_stream);
        (void)cudaStreamDestroy(c->release_stream);
    }
    pthread_cond_destroy(&c->cv);
    pthread_cond_destroy(&c->rescue_cv);
    pthread_mutex_destroy(&c->mu);
    /* Sessions are dropped before the backend is freed, so the table is empty; close
     * whatever a bug left open rather than leak it. */
    while (c->maps) {
        struct cuda_map *m = c->maps;
        c->maps = m->next;
        (void)cudaIpcCloseMemHandle(m->base);
        free(m);
    }
    cudaFree(c->stage);
    cuattn_free(c->ca);
    free(c);
}

/* ---- start ----------------------------------------------------------------------------- */

struct backend *backend_cuda_new(int device, int32_t kernels, char *why, size_t whylen)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        describe_init_error(err, why, whylen);
        (void)cudaGetLastError();
        return NULL;
    }
    if (device < 0 || device >= count) {
        snprintf(why, whylen, "CUDA device %d does not exist (this host has %d)", device, count);
        return NULL;
    }
    struct cudaDeviceProp prop;
    if ((err = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
        describe_init_error(err, why, whylen);
        return NULL;
    }
    if (prop.major < 8) {
        snprintf(why, whylen, "CUDA device %d (%.64s) is sm_%d%d; the kernels need sm_80 or later",
                 device, prop.name, prop.major, prop.minor);
        return NULL;
    }
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    err = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                           &found);
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn) {
        (void)cudaGetLastError();
        snprintf(why, whylen, "the NVIDIA driver does not offer cuMemGetAddressRange");
        return NULL;
    }
    void *attr_fn = NULL;
    found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &attr_fn, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        attr_fn = NULL;
    }
    struct cuda *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    /* Also makes `device` current on this (the loop) thread, where buffers are opened. */
    int rc = cuattn_new(device, &c->ca);
    if (rc) {
        snprintf(why, whylen, "cannot start the CUDA kernels on device %d (%.64s): %s", device,
                 prop.name, dash_strerror(rc));
        free(c);
        return NULL;
    }
    if ((err = cudaSetDevice(device)) != cudaSuccess) {
        describe_init_error(err, why, whylen);
        cuattn_free(c->ca);
        free(c);
        return NULL;
    }
    if (kernels != BACKEND_KERNELS_AUTO && (rc = cuattn_set_impl(c->ca, kernels)) != 0) {
        snprintf(why, whylen, "--kernels v%d: %s", (int)kernels,
                 rc == -ENOTSUP ? "v3 (wgmma) runs on sm_90 GPUs only" : dash_strerror(rc));
        cuattn_free(c->ca);
        free(c);
        return NULL;
    }
    c->device = device;
    const char *fault = getenv("DASHD_TEST_DEVICE_FAULT");
    if (fault)
        c->fault_at = strtoull(fault, NULL, 10);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_cond_init(&c->rescue_cv, NULL);
    (void)cuattn_set_async(c->ca, 1);
    if (pthread_create(&c->completer, NULL, backend_cuda__completer_main, c) != 0) {
        snprintf(why, whylen, "cannot start the completion thread");
        cuda_free(c);
        return NULL;
    }
    c->completer_started = 1;
    c->mem_range = (mem_range_fn)fn;
    c->pointer_attr = (pointer_attr_fn)attr_fn;
    backend_cuda__find_stream_memops(c);
    /* only ops with ready words can need it, and only where the stream can wait on them */
    if (c->write_value) {
        if (pthread_create(&c->rescuer, NULL, backend_cuda__rescuer_main, c) != 0) {
            snprintf(why, whylen, "cannot start the rescue thread");
            cuda_free(c);
            return NULL;
        }
        c->rescuer_started = 1;
    }
    (void)cuattn_device(c->ca, NULL, 0, &c->sms);
    wire_format_uuid((const unsigned char *)prop.uuid.bytes, c->uuid);

    struct backend *b = &c->base;
    b->name = "cuda";
    int mps = 0;
    if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, device) != cudaSuccess) {
        (void)cudaGetLastError();
        mps = 0; /* the driver cannot say: assume separate contexts */
    }
    b->gpu_sharing = mps ? "mps" : "contexts";
    /* the kernel implementation is part of what the bits depend on: say which, per head
     * dim (v2 needs more shared memory than some GPUs give, cuattn_impl_for) */
    const int32_t i64 = cuattn_impl_for(c->ca, 64), i128 = cuattn_impl_for(c->ca, 128),
                  i256 = cuattn_impl_for(c->ca, 256);
    snprintf(b->device, sizeof b->device, "%.60s (CUDA device %d, %d SMs, %s, kernels %s)",
             prop.name, device, (int)c->sms, c->uuid,
             i64 == CUATTN_IMPL_WGMMA && i128 == CUATTN_IMPL_WGMMA && i256 == CUATTN_IMPL_WGMMA
                 ? "v3 wgmma (other head dims widened to 64, 128 or 256)"
             : i64 == CUATTN_IMPL_WGMMA && i128 == CUATTN_IMPL_WGMMA
                 ? "v3 wgmma (other head dims widened; 256: v3 forward, v1 backward)"
             : i64 == CUATTN_IMPL_TENSOR_CORES && i128 == CUATTN_IMPL_TENSOR_CORES
                 ? "v2 tensor cores (other head dims widened; v1 for 256)"
             : i64 != CUATTN_IMPL_CUDA_CORES
                 ? "v2 tensor cores for head dim 64, v1 CUDA cores for 96, 128, 256 (other head dims widened)"
                 : "v1 CUDA cores (other head dims widened)");
    b->limits = (struct val_limits){.head_dim_min = CUATTN_HEAD_DIM_MIN,
                                    .head_dim_max = 256, /* cuda_check narrows it */
                                    .block_max = CUATTN_TC_BLOCK_N, /* cuda_check narrows it */
                                    .dtypes = (1u << DTYPE_F16) | (1u << DTYPE_BF16)};
    /* shared memory too, staged through device scratch (run_staged) */
    b->buffer_kinds = (1u << SHMBUF_CUDA) | (1u << SHMBUF_SHM);
    b->impl = c;
    b->threads = cuda_threads;
    b->check = cuda_check;
    b->forward = cuda_forward;
    b->backward = cuda_backward;
    b->cuda_import = cuda_import;
    b->events_open = cuda_events_open;
    b->event_close = cuda_event_close;
    b->signal_release = c->wait_value ? backend_cuda__signal_release : NULL;
    b->free = cuda_free;
    return b;
}
