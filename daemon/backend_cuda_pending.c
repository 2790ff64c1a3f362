// SPDX-License-Identifier: BSD-3-Clause
/*
 * backend_cuda_pending.c - the ops the CUDA backend has queued on the device (struct
 * pending), from the moment the worker hands one over (backend_cuda__track) to its done():
 * the completer thread that waits for each op's event, the pool of entries and their
 * events, and the semaphores that order an op with its client's stream - stream memory
 * operations (backend_cuda__find_stream_memops) that wait for the op's ready word and write
 * its done word (backend_cuda__signal_write), the daemon's own releases of a done word on
 * release_stream, and the rescuer thread that writes the ready word of a client that died.
 * backend_cuda.c (the backend: mappings, events, ops, start) queues the ops and starts the
 * threads; backend_cuda_int.h holds what the two files share.
 */
#include "backend_cuda_int.h"

#include "proc.h"

#include "kernels/cuda/attn_cuda.h"
#include "proto/errors.h"

#include <cuda.h> /* types only (CUresult, CUdeviceptr): nothing here links libcuda */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- completion ------------------------------------------------------------------------ */

uint64_t backend_cuda__mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void *backend_cuda__completer_main(void *arg)
{
    struct cuda *c = arg;
    (void)cudaSetDevice(c->device);
    uint64_t last_done_ns = 0;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->head && !c->stop)
            pthread_cond_wait(&c->cv, &c->mu);
        if (!c->head)
            break; /* stopping, and nothing is pending */
        struct pending *p = c->head;
        pthread_mutex_unlock(&c->mu);
        cudaError_t err = cudaEventSynchronize(p->ev);
        (void)backend_cuda__note_device_error(c, err, "a queued op");
        uint64_t now = backend_cuda__mono_ns();
        /* One stream: an op starts when it was queued or when the one before it ended. */
        uint64_t start = p->queued_ns > last_done_ns ? p->queued_ns : last_done_ns;
        last_done_ns = now;
        if (p->dst && err == cudaSuccess)
            memcpy(p->dst, p->pinned, sizeof(uint64_t) * (size_t)p->n_digests);
        p->done(p->ctx, err == cudaSuccess ? 0 : DASH_EIO, now > start ? now - start : 0);
        pthread_mutex_lock(&c->mu);
        c->head = p->next;
        if (!c->head)
            c->tail = NULL;
        p->next = c->free_list;
        c->free_list = p;
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Queue on `st`: *word = seq. With the default flags the write follows a memory barrier:
 * once the client's stream sees the value, it sees everything queued before it. 0 or
 * DASH_EIO. */
int backend_cuda__signal_write(struct cuda *c, cudaStream_t st, uint64_t *word, uint64_t seq)
{
    if (c->write_value((CUstream)st, (CUdeviceptr)(uintptr_t)word, seq,
                       CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
        (void)cudaGetLastError();
        return DASH_EIO;
    }
    return 0;
}

/* The rescuer. An op's ready word is written by its client's stream; a client process that
 * dies first (killed, crashed: the driver drops its queued work) never writes it, and
 * cuattn's one stream would wait for it forever, with every client's ops behind it. Every
 * RESCUE_TICK_MS this thread looks at the pending ops: one queued RESCUE_AFTER_MS ago or
 * more whose client process is gone (proc_gone: a zombie too) gets its ready word written
 * here, on release_stream, once (counted in base.rescued, which dispatch logs). The stream
 * then goes on: the op runs on the memory dashd still maps (nobody reads its results),
 * completes, and its session can go. A client that is alive but whose stream never gets
 * there (a stream stuck on something else) still holds the others up: one stream serves
 * everyone. */
#define RESCUE_TICK_MS 200
#define RESCUE_AFTER_MS 500
#define RESCUE_MAX 64 /* words written per tick at most; the rest wait for the next */

/* Whether p's ready word is to be written here now. Under mu. */
static int rescue_due(const struct pending *p, uint64_t now)
{
    return p->ready && !p->rescued && now - p->queued_ns >= RESCUE_AFTER_MS * 1000000ull &&
           proc_gone(p->pid);
}

void *backend_cuda__rescuer_main(void *arg)
{
    struct cuda *c = arg;
    (void)cudaSetDevice(c->device);
    struct {
        uint64_t *word, seq;
    } todo[RESCUE_MAX];
    pthread_mutex_lock(&c->mu);
    /* on until stopping with nothing pending: the completer drains the list at the end,
     * and a dead client's op in it needs this thread then too */
    while (!c->stop || c->head) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += RESCUE_TICK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&c->rescue_cv, &c->mu, &until);
        const uint64_t now = backend_cuda__mono_ns();
        int n = 0;
        for (struct pending *p = c->head; p && n < RESCUE_MAX; p = p->next)
            if (rescue_due(p, now)) {
                p->rescued = 1;
                todo[n].word = p->ready;
                todo[n].seq = p->seq;
                n++;
            }
        if (c->queuing && n < RESCUE_MAX && rescue_due(c->queuing, now)) {
            c->queuing->rescued = 1;
            todo[n].word = c->queuing->ready;
            todo[n].seq = c->queuing->seq;
            n++;
        }
        pthread_mutex_unlock(&c->mu);
        for (int i = 0; i < n; i++)
            if (backend_cuda__signal_write(c, c->release_stream, todo[i].word, todo[i].seq) == 0)
                atomic_fetch_add(&c->base.rescued, 1);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* A pending entry from the pool, or a new one (its event and pinned digests made once). */
struct pending *backend_cuda__pending_get(struct cuda *c)
{
    pthread_mutex_lock(&c->mu);
    struct pending *p = c->free_list;
    if (p)
        c->free_list = p->next;
    pthread_mutex_unlock(&c->mu);
    if (p)
        return p;
    p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (cudaEventCreateWithFlags(&p->ev, cudaEventDisableTiming | cudaEventBlockingSync) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        free(p);
        return NULL;
    }
    if (cudaMallocHost((void **)&p->pinned, sizeof(uint64_t) * 9) != cudaSuccess) {
        (void)cudaGetLastError();
        (void)cudaEventDestroy(p->ev);
        free(p);
        return NULL;
    }
    return p;
}

/* Show p to the rescuer as the op being queued (NULL: none). */
void backend_cuda__set_queuing(struct cuda *c, struct pending *p)
{
    pthread_mutex_lock(&c->mu);
    c->queuing = p;
    pthread_mutex_unlock(&c->mu);
}

void backend_cuda__pending_put(struct cuda *c, struct pending *p)
{
    pthread_mutex_lock(&c->mu);
    p->next = c->free_list;
    c->free_list = p;
    pthread_mutex_unlock(&c->mu);
}

void backend_cuda__pending_destroy(struct pending *p)
{
    (void)cudaEventDestroy(p->ev);
    (void)cudaFreeHost(p->pinned);
    free(p);
}

/* Worker thread, after queueing an op: record its completion event behind it and hand p
 * to the completer. 0, or DASH_EIO (nothing handed over: the caller waits for the stream
 * itself and still owns p). */
int backend_cuda__track(struct cuda *c, struct pending *p, backend_done_fn done, void *ctx)
{
    if (cudaEventRecord(p->ev, (cudaStream_t)cuattn_stream(c->ca)) != cudaSuccess) {
        (void)cudaGetLastError();
        return DASH_EIO;
    }
    p->done = done;
    p->ctx = ctx;
    p->next = NULL;
    pthread_mutex_lock(&c->mu);
    p->queued_ns = backend_cuda__mono_ns(); /* under mu: the rescuer may be looking at p (queuing) */
    if (c->queuing == p)
        c->queuing = NULL; /* in the list from now on */
    if (c->tail)
        c->tail->next = p;
    else
        c->head = p;
    c->tail = p;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* ---- semaphores ------------------------------------------------------------------------ */

int backend_cuda__signal_release(void *impl, uint64_t *done, uint64_t seq)
{
    struct cuda *c = impl;
    if (cudaSetDevice(c->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return DASH_EIO;
    }
    return backend_cuda__signal_write(c, c->release_stream, done, seq);
}

/* 64-bit stream memory operations, if the driver and the GPU have them (Hopper does);
 * otherwise the backend offers no semaphores and clients use events. */
void backend_cuda__find_stream_memops(struct cuda *c)
{
    int ok = 0;
    if (cudaDeviceGetAttribute(&ok, (enum cudaDeviceAttr)CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                               c->device) != cudaSuccess || !ok) {
        (void)cudaGetLastError();
        return;
    }
    void *w = NULL, *v = NULL;
    enum cudaDriverEntryPointQueryResult fw = cudaDriverEntryPointSymbolNotFound, fv = fw;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &w, 12000, cudaEnableDefault,
                                         &fw) != cudaSuccess ||
        cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &v, 12000, cudaEnableDefault,
                                         &fv) != cudaSuccess ||
        fw != cudaDriverEntryPointSuccess || fv != cudaDriverEntryPointSuccess || !w || !v ||
        cudaStreamCreateWithFlags(&c->release_stream, cudaStreamNonBlocking) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    c->wait_value = (wait_value_fn)w;
    c->write_value = (write_value_fn)v;
}
