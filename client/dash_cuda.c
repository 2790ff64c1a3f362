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
 */
#include "client/dash_internal.h"

#ifdef DASH_HAVE_CUDA

#include <cuda.h> /* types only (CUresult, CUdeviceptr) */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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
    (void)pthread_once(&mem_range_once, find_mem_range);
    if (!mem_range)
        return DASH_ENOGPU;
    struct cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, dev_ptr) != cudaSuccess) {
        (void)cudaGetLastError();
        return DASH_EINVAL;
    }
    if (attr.type == cudaMemoryTypeManaged)
        return DASH_ENOTSUP;
    if (attr.type != cudaMemoryTypeDevice)
        return DASH_EINVAL;

    struct dash_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return DASH_ENOMEM;
    b->owner = c;
    b->kind = DASH__BUF_CUDA;
    b->data = dev_ptr;
    b->size = size;
    /* The driver calls need the pointer's device current; the caller's stays as it was. */
    int old = -1;
    if (cudaGetDevice(&old) != cudaSuccess)
        old = -1;
    int rc = DASH_ENOGPU;
    if (old == attr.device || cudaSetDevice(attr.device) == cudaSuccess)
        rc = describe(b, attr.device);
    else
        (void)cudaGetLastError();
    if (old >= 0 && old != attr.device)
        (void)cudaSetDevice(old);
    if (rc) {
        free(b);
        return rc;
    }
    if ((rc = dash__buffer_adopt(c, b)) != 0)
        return rc;
    *ret_buf = b;
    return 0;
}

#else /* no CUDA in this build */

int dash_cuda_register(struct dash_client *c, void *dev_ptr, size_t size,
                       struct dash_buffer **ret_buf)
{
    if (!c || !dev_ptr || !ret_buf || size == 0)
        return DASH_EINVAL;
    return DASH_ENOGPU;
}

#endif
