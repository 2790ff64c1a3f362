// SPDX-License-Identifier: BSD-3-Clause
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
 * The event ring that stream-ordered ops use where no semaphores order them (dash_signal.c
 * makes that choice and carries the ops) is made and destroyed here too.
 */
#include "client/dash_internal.h"

#include <stdio.h> /* both variants snprintf() */
#include <stdlib.h> /* both variants free() */
#include <string.h>

/* dash_cuda_view's arguments, checked alike by both variants: 0, or its refusal with the
 * reason in dash_last_error (c not NULL). */
static int view_args_bad(struct dash_client *c, const void *ptr, size_t bytes, struct dash_buffer **ret_buf,
                         uint64_t *ret_offset)
{
    if (!ptr || !ret_buf || !ret_offset || bytes == 0)
        return dash__fail(c, DASH_EINVAL, "dash_cuda_view: pointer %p, %zu bytes (a NULL pointer or none: an "
                          "empty tensor?)", ptr, bytes);
    return 0;
}

#ifdef DASH_HAVE_CUDA

#include <cuda.h> /* types only (CUresult, CUdeviceptr) */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(cudaIpcMemHandle_t) == DASH__IPC_HANDLE_BYTES,
               "the wire's handle size is cudaIpcMemHandle_t's");

typedef CUresult (*mem_range_fn)(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);
typedef CUresult (*pointer_attrs_fn)(unsigned int n, CUpointer_attribute *attrs, void **data,
                                     CUdeviceptr ptr);

static pthread_once_t mem_range_once = PTHREAD_ONCE_INIT;
static mem_range_fn mem_range;
/* cuPointerGetAttributes: the fast path of dash_cuda_view (NULL: none) */
static pointer_attrs_fn pointer_attrs;

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
    void *pa = NULL;
    enum cudaDriverEntryPointQueryResult fpa = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &pa, 12000, cudaEnableDefault,
                                         &fpa) == cudaSuccess && fpa == cudaDriverEntryPointSuccess)
        pointer_attrs = (pointer_attrs_fn)pa;
    else
        (void)cudaGetLastError();
    dash__find_stream_mem_ops();
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
    wire_format_uuid((const unsigned char *)prop.uuid.bytes, b->device_uuid);
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
 * DASH_ENOGPU. Undo with dash__restore_device(). */
int dash__switch_device(int device, int *ret_old)
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

void dash__restore_device(int old, int device)
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
    if ((rc = dash__switch_device(device, &old)) == 0)
        rc = describe(b, device);
    dash__restore_device(old, device);
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

/* The allocation holding ptr, in one driver call: its unique id (0: none or unknown), start
 * and size; only device memory that is not managed counts. */
static uint64_t alloc_of(const void *ptr, CUdeviceptr *ret_base, size_t *ret_size)
{
    (void)pthread_once(&mem_range_once, find_mem_range);
    if (!pointer_attrs)
        return 0;
    CUpointer_attribute at[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    unsigned int type = 0;
    unsigned int managed = 0;
    unsigned long long id = 0;
    CUdeviceptr base = 0;
    size_t size = 0;
    void *data[] = {&type, &managed, &id, &base, &size};
    if (pointer_attrs(sizeof at / sizeof at[0], at, data, (CUdeviceptr)(uintptr_t)ptr) !=
            CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE || managed)
        return 0;
    *ret_base = base;
    *ret_size = size;
    return id;
}

static int cuda_view(struct dash_client *c, const void *ptr, size_t bytes, struct dash_buffer **ret_buf,
                     uint64_t *ret_offset, int *ret_registered);

/* cuda_view's refusals, each with its reason in dash_last_error (dash_cuda_register's own
 * failures already say theirs). */
int dash_cuda_view(struct dash_client *c, const void *ptr, size_t bytes, struct dash_buffer **ret_buf,
                   uint64_t *ret_offset)
{
    if (!c)
        return DASH_EINVAL;
    int rc = view_args_bad(c, ptr, bytes, ret_buf, ret_offset);
    if (rc)
        return rc;
    int registered = 0;
    rc = cuda_view(c, ptr, bytes, ret_buf, ret_offset, &registered);
    if (rc == 0 || registered)
        return rc;
    switch (rc) {
    case DASH_EBOUNDS:
        return dash__fail(c, rc, "%zu bytes from %p run past the end of its CUDA allocation", bytes, ptr);
    case DASH_EBUSY:
        return dash__fail(c, rc, "%p: every one of the %d cached views of CUDA allocations is in use by an op "
                          "in flight", ptr, DASH__VIEW_CACHE);
    case DASH_ENOTSUP:
        return dash__fail(c, rc, "%p: memory dashd cannot open (managed memory, or an allocation without a "
                          "CUDA IPC handle, such as cudaMallocAsync's pools)", ptr);
    case DASH_ENOGPU:
        return dash__fail(c, rc, "no usable CUDA runtime or GPU in this process");
    default:
        return dash__fail(c, rc, "%p is not in device memory a CUDA allocation of this process holds", ptr);
    }
}

static int cuda_view(struct dash_client *c, const void *ptr, size_t bytes, struct dash_buffer **ret_buf,
                     uint64_t *ret_offset, int *ret_registered)
{
    /* Fast path: an allocation registered before, known by its id (which the driver never
     * gives to another allocation), so no handle need be asked for. */
    CUdeviceptr fbase = 0;
    size_t fsize = 0;
    const uint64_t alloc_id = alloc_of(ptr, &fbase, &fsize);
    const CUdeviceptr fp = (CUdeviceptr)(uintptr_t)ptr;
    for (int i = 0; alloc_id && i < c->n_views; i++) {
        struct dash_buffer *b = c->views[i].buf;
        if (c->views[i].alloc_id == alloc_id && b->data == (void *)(uintptr_t)fbase &&
            b->size == fsize) {
            if (bytes > fsize - (size_t)(fp - fbase))
                return DASH_EBOUNDS;
            c->views[i].last_use = ++c->view_clock;
            *ret_buf = b;
            *ret_offset = (uint64_t)(fp - fbase);
            return 0;
        }
    }
    int device, old, rc = device_of(ptr, &device);
    if (rc)
        return rc;
    if ((rc = dash__switch_device(device, &old)) != 0) {
        dash__restore_device(old, device);
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
            if (alloc_id && fbase == base)
                c->views[i].alloc_id = alloc_id;
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
        *ret_registered = 1; /* its own reason in last_error */
        if (slot < c->n_views) { /* the evicted slot stays empty: close the gap */
            c->views[slot] = c->views[c->n_views - 1];
            c->n_views--;
        }
        goto out;
    }
    memcpy(c->views[slot].handle, &h, sizeof h);
    c->views[slot].alloc_id = alloc_id && fbase == base ? alloc_id : 0;
    c->views[slot].buf = b;
    c->views[slot].last_use = ++c->view_clock;
    if (slot == c->n_views)
        c->n_views++;
    *ret_buf = b;
    *ret_offset = (uint64_t)(p - base);
out:
    dash__restore_device(old, device);
    return rc;
}

/* ---- the event ring ------------------------------------------------------------------- */

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
        if (dash__switch_device(e->device, &old) == 0) {
            /* The daemon's last record may still be queued: an exported event must
             * outlive what the importer queued on it. */
            if (e->last_record >= 0)
                (void)cudaEventSynchronize((cudaEvent_t)e->ev[e->last_record]);
            for (int i = 0; i < DASH__EVENT_RING; i++)
                if (e->ev[i])
                    (void)cudaEventDestroy((cudaEvent_t)e->ev[i]);
        }
        (void)cudaGetLastError();
        dash__restore_device(old, e->device);
    }
    if (e->reg_req)
        e->reg_req = NULL; /* the request itself belongs to c->reqs */
    free(e);
}

/* Make the ring on `device` (current) and register it, waiting for the daemon. */
int dash__events_make(struct dash_client *c, int device)
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
    wire_format_uuid((const unsigned char *)prop.uuid.bytes, e->device_uuid);
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

int dash__cuda_busid(int cuda_device, char *buf, size_t len)
{
    if (cudaDeviceGetPCIBusId(buf, (int)len, cuda_device) != cudaSuccess) {
        (void)cudaGetLastError();
        return DASH_ENOGPU;
    }
    return 0;
}

#else /* no CUDA in this build */

int dash__cuda_busid(int cuda_device, char *buf, size_t len)
{
    (void)cuda_device, (void)buf, (void)len;
    return DASH_ENOGPU;
}

int dash_cuda_view(struct dash_client *c, const void *ptr, size_t bytes, struct dash_buffer **ret_buf,
                   uint64_t *ret_offset)
{
    if (!c)
        return DASH_EINVAL;
    const int rc = view_args_bad(c, ptr, bytes, ret_buf, ret_offset);
    return rc ? rc : dash__fail(c, DASH_ENOGPU, "this libdash was built without CUDA");
}

void dash__events_destroy(struct dash_client *c, int in_child)
{
    (void)in_child;
    free(c->events);
    c->events = NULL;
}

int dash_cuda_register(struct dash_client *c, void *dev_ptr, size_t size,
                       struct dash_buffer **ret_buf)
{
    if (!c || !dev_ptr || !ret_buf || size == 0)
        return DASH_EINVAL;
    return DASH_ENOGPU;
}

#endif

/* ---- many views in one call (dash_cuda_tensors) ------------------------------------------ */

int dash_cuda_tensors(struct dash_client *c, int32_t n, const struct dash_cuda_ref *refs,
                      struct dash_tensor *ret)
{
    if (!c)
        return DASH_EINVAL;
    if (n < 0 || (n > 0 && (!refs || !ret)))
        return dash__fail(c, DASH_EINVAL, "dash_cuda_tensors: %d refs at %p into %p", (int)n, (const void *)refs,
                          (void *)ret);
    int rc = 0;
    int32_t i;
    for (i = 0; i < n; i++) {
        const struct dash_cuda_ref *r = &refs[i];
        uint64_t bytes;
        if (!r->ptr) { /* an empty tensor's data pointer */
            rc = dash__fail(c, DASH_EINVAL, "tensor %d has no data (a NULL pointer: an empty tensor? every "
                            "dimension must be at least 1)", (int)i);
            break;
        }
        if (r->elem_size < 1 ||
            dash__view_span(r->ndim, r->shape, r->strides, (uint64_t)r->elem_size, &bytes) != 0) {
            rc = dash__fail(c, DASH_EINVAL, "tensor %d: %d dimensions of %d-byte elements whose shape and "
                            "strides span no memory a view can name (negative, or past 2^63 bytes)", (int)i,
                            (int)r->ndim, (int)r->elem_size);
            break;
        }
        struct dash_tensor *t = &ret[i];
        memset(t, 0, sizeof *t);
        /* Inside the allocation an earlier tensor of this call was found in (a view's buffer
         * is its whole allocation, live now: allocations do not overlap), so no driver call:
         * q, k and v are often pieces of one projection's output. */
        const uintptr_t p = (uintptr_t)r->ptr;
        for (int32_t j = 0; j < i && !t->buf; j++) {
            const uintptr_t base = (uintptr_t)ret[j].buf->data;
            if (p >= base && p - base < ret[j].buf->size && bytes <= ret[j].buf->size - (p - base)) {
                t->buf = ret[j].buf;
                t->offset = (uint64_t)(p - base);
            }
        }
        if (!t->buf && (rc = dash_cuda_view(c, r->ptr, (size_t)bytes, &t->buf, &t->offset)) != 0) {
            char why[sizeof c->last_error];
            snprintf(why, sizeof why, "%s", c->last_error);
            (void)dash__fail(c, rc, "tensor %d: %s", (int)i, why);
            break;
        }
        /* Held until this call ends: a full view cache evicts (frees) the least recently
         * used registration nobody uses, which must not be one an earlier tensor of this
         * call already points to. */
        t->buf->users++;
        t->ndim = r->ndim;
        for (int32_t d = 0; d < r->ndim; d++) {
            t->shape[d] = r->shape[d];
            t->strides[d] = r->strides[d];
        }
    }
    for (int32_t j = 0; j < i; j++)
        ret[j].buf->users--;
    return rc;
}
