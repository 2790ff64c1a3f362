/*
 * dash_cuda.c - CUDA buffers: a view of the caller's cudaMalloc memory, shared with the
 * daemon by CUDA IPC handle.
 *
 * A legacy IPC handle names a whole allocation and can only be made from its base, while
 * callers hold pointers into the middle of allocations (PyTorch's caching allocator
 * sub-allocates). So the library asks the driver for the allocation around the pointer
 * (cuMemGetAddressRange) and sends: the base's handle, the GPU's UUID (device ordinals
 * differ between processes with CUDA_VISIBLE_DEVICES; UUIDs do not), where the view
 * starts in the allocation (alloc_offset) and its size. The daemon checks the view
 * against the allocation it maps, and every tensor against the view's size.
 *
 * Driver functions come through cudaGetDriverEntryPointByVersion, so nothing links
 * libcuda: a program linked with libdash runs on a machine without a GPU or driver, where
 * dash_cuda_register() says DASH_ENOGPU. Built without CUDA (no nvcc), it always does.
 *
 * The buffer itself is an ordinary struct dash_buffer of kind CUDA: registration, restore
 * after a daemon restart and freeing are dash_shm.c's and libdash.c's, which send the
 * kept handle again whenever the session is restored.
 *
 * Stream-ordered ops (dash_forward_stream). The daemon's work is ordered against the
 * caller's stream on the GPU, not on the host: the library records an interprocess event
 * on the caller's stream and names it as the op's wait event; the daemon records another
 * after the op and replies as soon as the op is queued; the library then makes the
 * caller's stream wait for that event. The host waits one round trip, never for the GPU.
 * The events come from a ring made once per client (DASH__EVENT_RING, registered like a
 * buffer, again after a daemon restart). Reusing a slot is safe because each call is done
 * with both its events before it returns: a stream wait binds to the record that
 * precedes it, so a later record of the same event cannot disturb it.
 */
#include "client/dash_internal.h"

#include <stdlib.h> /* both variants free() */

#ifdef DASH_HAVE_CUDA

#include <cuda.h> /* types only (CUresult, CUdeviceptr) */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(cudaIpcMemHandle_t) == DASH__IPC_HANDLE_BYTES,
               "the wire's handle size is cudaIpcMemHandle_t's");

typedef CUresult (*mem_range_fn)(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);

static pthread_once_t mem_range_once = PTHREAD_ONCE_INIT;
static mem_range_fn mem_range;

static void find_mem_range(void)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
        mem_range = (mem_range_fn)fn;
    else
        (void)cudaGetLastError();
}

/* The same text dashd compares against: "GPU-" and the 16 bytes as 8-4-4-4-12 hex. */
static void format_uuid(const cudaUUID_t *u, char buf[DASH__UUID_MAX])
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(buf, DASH__UUID_MAX,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

/* Fill b's handle, UUID and alloc_offset for [dev_ptr, dev_ptr + size) on `device`, which
 * is current. */
static int describe(struct dash_buffer *b, int device)
{
    CUdeviceptr base = 0;
    size_t bytes = 0;
    const CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)b->data;
    if (mem_range(&base, &bytes, ptr) != CUDA_SUCCESS || base > ptr || ptr - base >= bytes)
        return DASH_EINVAL;
    const uint64_t off = (uint64_t)(ptr - base);
    if (b->size > bytes - off)
        return DASH_EBOUNDS;
    cudaIpcMemHandle_t h;
    if (cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base) != cudaSuccess) {
        (void)cudaGetLastError();
        return DASH_ENOTSUP; /* VMM memory (expandable segments), or IPC unsupported here */
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return DASH_ENOGPU;
    }
    memcpy(b->ipc_handle, &h, sizeof h);
    format_uuid(&prop.uuid, b->device_uuid);
    b->alloc_offset = off;
    return 0;
}

/* Where device memory at ptr lives: 0 and *ret_device (its ordinal); DASH_ENOGPU (no
 * driver entry points), DASH_EINVAL (not device memory), DASH_ENOTSUP (managed memory). */
static int device_of(const void *ptr, int *ret_device)
{
    (void)pthread_once(&mem_range_once, find_mem_range);
    if (!mem_range)
        return DASH_ENOGPU;
    struct cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
        (void)cudaGetLastError();
        return DASH_EINVAL;
    }
    if (attr.type != cudaMemoryTypeDevice)
        return attr.type == cudaMemoryTypeManaged ? DASH_ENOTSUP : DASH_EINVAL;
    *ret_device = attr.device;
    return 0;
}

/* Make `device` current, saving the caller's in *ret_old (-1 if unknown): 0 or
 * DASH_ENOGPU. Undo with restore_device(). */
static int switch_device(int device, int *ret_old)
{
    if (cudaGetDevice(ret_old) != cudaSuccess) {
        (void)cudaGetLastError();
        *ret_old = -1;
    }
    if (*ret_old != device && cudaSetDevice(device) != cudaSuccess) {
        (void)cudaGetLastError();
        return DASH_ENOGPU;
    }
    return 0;
}

static void restore_device(int old, int device)
{
    if (old >= 0 && old != device)
        (void)cudaSetDevice(old);
}

int dash_cuda_register(struct dash_client *c, void *dev_ptr, size_t size,
                       struct dash_buffer **ret_buf)
{
    if (!c || !dev_ptr || !ret_buf || size == 0 || size > (size_t)INT64_MAX)
        return DASH_EINVAL;
    if (c->flags & DASH_CONNECT_NO_SESSION)
        return DASH_ENOSESSION;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return DASH_ENOGPU;
    }
    int device, rc = device_of(dev_ptr, &device);
    if (rc)
        return rc;

    struct dash_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return DASH_ENOMEM;
    b->owner = c;
    b->kind = DASH__BUF_CUDA;
    b->data = dev_ptr;
    b->size = size;
    b->device = device;
    /* The driver calls need the pointer's device current; the caller's stays as it was. */
    int old;
    if ((rc = switch_device(device, &old)) == 0)
        rc = describe(b, device);
    restore_device(old, device);
    if (rc) {
        free(b);
        return rc;
    }
    if ((rc = dash__buffer_adopt(c, b)) != 0)
        return rc;
    *ret_buf = b;
    return 0;
}

/* ---- whole-allocation views (dash_cuda_view) ---------------------------------------------- */

int dash_cuda_view(struct dash_client *c, const void *ptr, size_t bytes, struct dash_buffer **ret_buf,
                   uint64_t *ret_offset)
{
    if (!c || !ptr || !ret_buf || !ret_offset || bytes == 0)
        return DASH_EINVAL;
    int device, old, rc = device_of(ptr, &device);
    if (rc)
        return rc;
    if ((rc = switch_device(device, &old)) != 0) {
        restore_device(old, device);
        return rc;
    }
    CUdeviceptr base = 0;
    size_t size = 0;
    const CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
    cudaIpcMemHandle_t h;
    if (mem_range(&base, &size, p) != CUDA_SUCCESS || base > p || p - base >= size) {
        rc = DASH_EINVAL;
        goto out;
    }
    if (bytes > size - (size_t)(p - base)) {
        rc = DASH_EBOUNDS;
        goto out;
    }
    if (cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base) != cudaSuccess) {
        (void)cudaGetLastError();
        rc = DASH_ENOTSUP;
        goto out;
    }
    /* The handle names the allocation itself: one freed and made again at the same address
     * has another, so a stale registration is never reused for new memory. */
    for (int i = 0; i < c->n_views; i++) {
        struct dash_buffer *b = c->views[i].buf;
        if (b->data == (void *)(uintptr_t)base && b->size == size &&
            memcmp(c->views[i].handle, &h, sizeof h) == 0) {
            c->views[i].last_use = ++c->view_clock;
            *ret_buf = b;
            *ret_offset = (uint64_t)(p - base);
            goto out;
        }
    }
    int slot = c->n_views;
    if (slot == DASH__VIEW_CACHE) {
        /* the least recently used one not in use by an op in flight */
        slot = -1;
        for (int i = 0; i < c->n_views; i++)
            if (c->views[i].buf->users == 0 &&
                (slot < 0 || c->views[i].last_use < c->views[slot].last_use))
                slot = i;
        if (slot < 0) {
            rc = DASH_EBUSY;
            goto out;
        }
        (void)dash_buffer_free(c, c->views[slot].buf);
        c->views[slot].buf = NULL;
    }
    struct dash_buffer *b = NULL;
    if ((rc = dash_cuda_register(c, (void *)(uintptr_t)base, size, &b)) != 0) {
        if (slot < c->n_views) { /* the evicted slot stays empty: close the gap */
            c->views[slot] = c->views[c->n_views - 1];
            c->n_views--;
        }
        goto out;
    }
    memcpy(c->views[slot].handle, &h, sizeof h);
    c->views[slot].buf = b;
    c->views[slot].last_use = ++c->view_clock;
    if (slot == c->n_views)
        c->n_views++;
    *ret_buf = b;
    *ret_offset = (uint64_t)(p - base);
out:
    restore_device(old, device);
    return rc;
}

/* ---- the event ring and stream-ordered ops ---------------------------------------------- */

static int events_settled(struct dash_client *c, const void *arg)
{
    (void)arg;
    return !c->events || c->events->reg == DASH__REG_OK || c->events->reg == DASH__REG_FAILED;
}

void dash__events_destroy(struct dash_client *c, int in_child)
{
    struct dash__events *e = c->events;
    c->events = NULL;
    if (!e)
        return;
    if (!in_child) {
        int old;
        if (switch_device(e->device, &old) == 0) {
            /* The daemon's last record may still be queued: an exported event must
             * outlive what the importer queued on it. */
            if (e->last_record >= 0)
                (void)cudaEventSynchronize((cudaEvent_t)e->ev[e->last_record]);
            for (int i = 0; i < DASH__EVENT_RING; i++)
                if (e->ev[i])
                    (void)cudaEventDestroy((cudaEvent_t)e->ev[i]);
        }
        (void)cudaGetLastError();
        restore_device(old, e->device);
    }
    if (e->reg_req)
        e->reg_req = NULL; /* the request itself belongs to c->reqs */
    free(e);
}

/* Make the ring on `device` (current) and register it, waiting for the daemon. */
static int events_make(struct dash_client *c, int device)
{
    struct dash__events *e = calloc(1, sizeof *e);
    if (!e)
        return DASH_ENOMEM;
    e->device = device;
    e->last_record = -1;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        (void)cudaGetLastError();
        free(e);
        return DASH_ENOGPU;
    }
    format_uuid(&prop.uuid, e->device_uuid);
    c->events = e;
    for (int i = 0; i < DASH__EVENT_RING; i++) {
        cudaEvent_t ev;
        cudaIpcEventHandle_t h;
        if (cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            dash__events_destroy(c, 0);
            return DASH_ENOMEM;
        }
        e->ev[i] = ev;
        if (cudaIpcGetEventHandle(&h, ev) != cudaSuccess) {
            (void)cudaGetLastError();
            dash__events_destroy(c, 0);
            return DASH_ENOTSUP;
        }
        _Static_assert(sizeof h == DASH__IPC_HANDLE_BYTES, "cudaIpcEventHandle_t is 64 bytes");
        memcpy(e->handle[i], &h, sizeof h);
    }
    int rc = dash__register_events(c);
    if (!rc)
        rc = dash__wait(c, events_settled, NULL, -1, dash__now_ms());
    if (!rc && c->events && c->events->reg == DASH__REG_FAILED)
        rc = c->events->reg_code;
    if (rc) {
        /* nothing of ours is queued on them: no record happened */
        dash__events_destroy(c, 0);
        return rc;
    }
    return 0;
}

static int stream_op(struct dash_client *c, enum dash__kind kind, const struct dash_attn *a,
                     const struct dash_tensor *const *ts, int nt, void *stream,
                     struct dash_result *ret_result)
{
    if (!c || !a)
        return DASH_EINVAL;
    for (int i = 0; i < nt; i++)
        if (!ts[i] || !ts[i]->buf || ts[i]->buf->owner != c || ts[i]->buf->kind != DASH__BUF_CUDA)
            return DASH_EINVAL;
    const int device = ts[0]->buf->device;
    for (int i = 1; i < nt; i++)
        if (ts[i]->buf->device != device)
            return DASH_EINVAL;
    if (c->flags & DASH_CONNECT_NO_SESSION)
        return DASH_ENOSESSION;
    if (c->events && c->events->device != device)
        return DASH_EINVAL; /* one client, one GPU */
    int old, rc = switch_device(device, &old);
    if (rc)
        goto out;
    if (!c->events && (rc = events_make(c, device)) != 0)
        goto out;
    struct dash__events *e = c->events;
    const int32_t w = (int32_t)e->next, r = (int32_t)((e->next + 1) % DASH__EVENT_RING);
    e->next = (e->next + 2) % DASH__EVENT_RING;
    /* Everything the caller queued on the stream so far happens before the daemon reads. */
    if (cudaEventRecord((cudaEvent_t)e->ev[w], (cudaStream_t)stream) != cudaSuccess) {
        (void)cudaGetLastError();
        rc = DASH_EINVAL; /* a stream of another device, or not a stream */
        goto out;
    }
    uint64_t ticket;
    if ((rc = dash__op_submit(c, kind, a, ts, nt, w, r, 1, &ticket)) != 0)
        goto out;
    if ((rc = dash__op_run(c, ticket, ret_result)) != 0)
        goto out;
    /* The daemon has queued its record of r: what the caller queues next runs after it. */
    if (!c->events || cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)e->ev[r], 0) != cudaSuccess) {
        (void)cudaGetLastError();
        rc = DASH_EIO;
        goto out;
    }
    e->last_record = r;
out:
    restore_device(old, device);
    return rc;
}

int dash_forward_stream(struct dash_client *c, const struct dash_attn *a,
                        const struct dash_tensor *q, const struct dash_tensor *k,
                        const struct dash_tensor *v, const struct dash_tensor *out,
                        const struct dash_tensor *lse, void *stream, struct dash_result *ret_result)
{
    const struct dash_tensor *ts[] = {q, k, v, out, lse};
    return stream_op(c, DASH__FORWARD, a, ts, 5, stream, ret_result);
}

int dash_backward_stream(struct dash_client *c, const struct dash_attn *a,
                         const struct dash_tensor *q, const struct dash_tensor *k,
                         const struct dash_tensor *v, const struct dash_tensor *out,
                         const struct dash_tensor *lse, const struct dash_tensor *dout,
                         const struct dash_tensor *dq, const struct dash_tensor *dk,
                         const struct dash_tensor *dv, void *stream,
                         struct dash_result *ret_result)
{
    const struct dash_tensor *ts[] = {q, k, v, out, lse, dout, dq, dk, dv};
    return stream_op(c, DASH__BACKWARD, a, ts, 9, stream, ret_result);
}

#else /* no CUDA in this build */

int dash_cuda_view(struct dash_client *c, const void *ptr, size_t bytes, struct dash_buffer **ret_buf,
                   uint64_t *ret_offset)
{
    if (!c || !ptr || !ret_buf || !ret_offset || bytes == 0)
        return DASH_EINVAL;
    return DASH_ENOGPU;
}

void dash__events_destroy(struct dash_client *c, int in_child)
{
    (void)in_child;
    free(c->events);
    c->events = NULL;
}

int dash_forward_stream(struct dash_client *c, const struct dash_attn *a,
                        const struct dash_tensor *q, const struct dash_tensor *k,
                        const struct dash_tensor *v, const struct dash_tensor *out,
                        const struct dash_tensor *lse, void *stream, struct dash_result *ret_result)
{
    (void)q, (void)k, (void)v, (void)out, (void)lse, (void)stream, (void)ret_result;
    return !c || !a ? DASH_EINVAL : DASH_ENOGPU;
}

int dash_backward_stream(struct dash_client *c, const struct dash_attn *a,
                         const struct dash_tensor *q, const struct dash_tensor *k,
                         const struct dash_tensor *v, const struct dash_tensor *out,
                         const struct dash_tensor *lse, const struct dash_tensor *dout,
                         const struct dash_tensor *dq, const struct dash_tensor *dk,
                         const struct dash_tensor *dv, void *stream,
                         struct dash_result *ret_result)
{
    (void)q, (void)k, (void)v, (void)out, (void)lse, (void)dout, (void)dq, (void)dk, (void)dv;
    (void)stream, (void)ret_result;
    return !c || !a ? DASH_EINVAL : DASH_ENOGPU;
}

int dash_cuda_register(struct dash_client *c, void *dev_ptr, size_t size,
                       struct dash_buffer **ret_buf)
{
    if (!c || !dev_ptr || !ret_buf || size == 0)
        return DASH_EINVAL;
    return DASH_ENOGPU;
}

#endif
